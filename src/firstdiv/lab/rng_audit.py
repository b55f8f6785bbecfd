"""RNG audit (chapter 14, E4): which randomness in a data pipeline is tied to the run's seed.

For each ``num_workers`` setting the loader runs two passes, each preceded by ``torch.manual_seed(seed)``
and nothing else. A probe wrapped around the dataset *observes* (never draws from) torch's, numpy's
legacy and ``random``'s global RNGs and every generator the dataset holds, before and after each
``__getitem__``. A pass models one run from its seeding point: the seeding inputs (torch's seed, the
loader's generator and sampler) start from the same state each pass; everything else (the dataset
and the generators it holds, numpy's and ``random``'s globals) carries over, as it does in a process.
The repair (explicit ``generator=`` plus a ``worker_init_fn`` reseeding the rest) is then applied and
verified with the same two passes. Everything that mutates runs on deep copies.

With workers a pass takes whole batches until every worker has been observed a few times (batch k comes from
worker k % num_workers; :mod:`firstdiv.lab._rng_cover` plans it from the batch size, the workers, the prefetch
and the epoch's length, within a budget), and says which workers it could not reach and why. A stream two
workers draw from the same state (a generator made in ``__init__`` and copied into every worker, a
``worker_init_fn`` seeding a constant) is ranked first, before the streams that differ between passes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, IterableDataset

from .._format import describe_error
from .._globals import restore_rng, rng_state
from ..errors import InvalidArgument, WorkloadError
from ..report import Divergence, Finding, Report, Status, skipped
from ._rng_cover import Budget, observed_counts, unobserved
from ._rng_probe import GLOBALS, CopyError, Plan, RngDemo, find_held, repair_code, run_setting
from ._targets import Kind, load_callable

INSTRUMENT = "rng_audit"
ORDER, CONTENT = "data order", "item content"


# -- evaluating ----------------------------------------------------------------------------------------


def _sequence(recs: list[dict[str, Any]], row: str) -> list[Any]:
    if row == ORDER:
        return [r["index"] for r in recs]
    if row == CONTENT:
        return [r["item"] for r in recs]
    return [(r["before"][row], r["after"][row]) for r in recs]


def _collisions(recs: list[dict[str, Any]], row: str) -> tuple[int, list[int]]:
    """Draws that two workers made from the same state to the same state, at different indices: a shared stream.
    (The same index twice, as a sampler with replacement gives, may legitimately reseed to the same state.)"""
    seen: dict[tuple[str, str], set[tuple[int, Any]]] = {}
    for r in recs:
        if r["before"][row] != r["after"][row]:
            seen.setdefault((r["before"][row], r["after"][row]), set()).add((r["worker"], r["index"]))
    shared = [{w for w, _ in got} for got in seen.values()
              if len({w for w, _ in got}) > 1 and len({i for _, i in got}) > 1]
    return len(shared), sorted(set().union(*shared)) if shared else []


def _cell(passes: list[list[dict[str, Any]]], row: str, workers: int) -> dict[str, Any]:
    a, b = (_sequence(p, row) for p in passes)
    drawn = row in (ORDER, CONTENT) or any(r["before"][row] != r["after"][row] for p in passes for r in p)
    diff = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
    where = None
    if diff is not None:
        r = passes[0][diff] if diff < len(passes[0]) else passes[1][diff]
        where = {"item": diff, "index": r["index"], "worker": r["worker"]}
    dup, dup_workers = (0, [])
    if drawn and workers >= 2 and row not in (ORDER, CONTENT):
        dup, dup_workers = max((_collisions(p, row) for p in passes), key=lambda c: c[0])
    return {"reproduces": diff is None, "drawn": drawn, "duplicated": dup, "duplicated_workers": dup_workers,
            "first_difference": where, "ok": not drawn or (diff is None and dup == 0), "observed": observed_counts(passes[0])}


def _label(cell: dict[str, Any]) -> str:
    text = "REPRODUCES" if cell["reproduces"] else "DOES NOT"
    return text + (f", DUPLICATED x{cell['duplicated']}" if cell["duplicated"] else "")


def _repair_label(cells: dict[str, dict[str, Any]]) -> str:
    bad = [(w, c) for w, c in cells.items() if not c["ok"]]
    if not bad:
        return "REPRODUCES"
    return "; ".join(f"{_label(c)} (num_workers={w})" for w, c in bad)


def _observed(c: dict[str, Any]) -> str:
    if c["reproduces"]:
        return f"{c['duplicated']} states seen by more than one worker in one pass (workers {c['duplicated_workers']})"
    d = c["first_difference"]
    who = "main process" if d["worker"] < 0 else f"worker {d['worker']}"
    return f"pass 2 differs from pass 1 at item {d['item']} (index {d['index']}, {who})"


_UNSEEN = ("the items change though every observed RNG reproduces: __getitem__ draws from a source the audit cannot see "
           "(a generator created per call without a seed, one nested deeper than dataset.x[k], os.urandom, time); "
           "derive its seed from torch.initial_seed()")


def _failures(rows: list[dict[str, Any]]) -> Iterable[tuple[int, dict[str, Any], bool, str, dict[str, Any]]]:
    """Failing cells, ranked: a stream shared across workers (the cause users see as repeated augmentations),
    then a stream or item that differs between passes, then a stream the repair leaves failing."""
    for rank, repaired in ((0, False), (1, False), (2, True)):
        for row in rows:
            for w, c in (row["repair"] if repaired else row["cells"]).items():
                if c["ok"] or (rank == 0 and not c["duplicated"]) or (rank == 1 and c["reproduces"]):
                    continue
                yield rank, row, repaired, w, c


def _divergence(rows: list[dict[str, Any]], hint: str) -> Divergence | None:
    """The first failing cell in rank order; within a rank, rows top to bottom, then columns left to right."""
    for rank, row, repaired, w, c in _failures(rows):
        what = {ORDER: "indices", CONTENT: "items"}.get(row["rng"], "states")
        setting = ("with the repair, " if repaired else "") + f"num_workers={w}"
        if c["duplicated"] and (rank == 0 or c["reproduces"]):
            kind, expected = "rng.duplicated_across_workers", f"{setting}: a distinct stream in each worker"
            observed = (f"workers {c['duplicated_workers']} share the {row['rng']} stream: {c['duplicated']} draws "
                        f"repeated from the same state in more than one worker in one pass ({_per_worker(c)})")
        else:
            kind, expected, observed = "rng.not_reproducible", f"{setting}: the same {what} in both passes", _observed(c)
        why = _UNSEEN if row["rng"] == CONTENT else hint
        if kind == "rng.duplicated_across_workers" and not repaired:
            why = _shared_hint(row["rng"])
        if repaired and row["rng"] != CONTENT:
            why = "the repair does not control this stream; seed it from torch.initial_seed() in worker_init_fn"
        return Divergence(row["rng"], kind, expected, observed, why)
    return None


def _shared_hint(name: str) -> str:
    if name.startswith("dataset."):
        return (f"{name} is created once (in __init__) and copied into every worker process, so each worker replays "
                "the same draws: reseed it per worker in a worker_init_fn from torch.initial_seed() "
                "(details['repair_code'])")
    return (f"every worker starts the {name} RNG from the same state: PyTorch seeds it per worker, so a "
            "worker_init_fn (or code in the workers) reseeds it with one constant; derive the seed from "
            "torch.initial_seed() or get_worker_info().seed instead (details['repair_code'])")


def _per_worker(c: dict[str, Any]) -> str:
    seen = c.get("observed", {})
    return ", ".join(f"{'main process' if w == 'main' else 'worker ' + w}: {n} items" for w, n in seen.items())


# -- the report ---------------------------------------------------------------------------------------


class RngAuditReport(Report):
    """A Report whose ``details`` hold the chapter's table: ``rows`` (one per RNG, table order), each with
    ``cells`` and ``repair`` keyed by num_workers; ``order`` (indices per pass); ``repair_code``."""

    @property
    def table(self) -> dict[str, dict[str, str]]:
        """{rng: {column: text}} as the terminal shows it."""
        return {row["rng"]: dict(zip(self.details["columns"], _row_texts(row))) for row in self.details["rows"]}

    def __rich_body__(self) -> Iterable[Any]:
        from .._rich import Table
        from ..render.experiments import render_rng_audit

        d = self.details
        per_pass = " / ".join(f"{sum(n.values())} ({col})" for col, n in d.get("observed", {}).items())
        shown = SimpleNamespace(ok=self.ok, details={**d, "items": per_pass or d["items"]})
        for part in render_rng_audit(shown, _row_texts):
            yield part
            if isinstance(part, Table) and "observed" in d:  # how much of each worker the table rests on
                yield from self._observed_lines()

    def _observed_lines(self) -> Iterable[Any]:
        from .._rich import Text

        yield Text("  items observed per pass: " + "; ".join(
            f"{col}: " + ", ".join(f"{n} in the main process" if w == "main" else f"{n} from worker {w}"
                                   for w, n in n_of.items()) for col, n_of in self.details["observed"].items()))
        for f in self.findings:
            if f.where == "coverage" and f.status is Status.SKIPPED:
                yield Text(f"  not observed ({f.check}): {f.message}", style="yellow")


def _row_texts(row: dict[str, Any]) -> list[str]:
    texts = [_label(c) if c["drawn"] else "not drawn" for c in row["cells"].values()]
    fixed = row["repair"].values()
    return texts + [_repair_label(row["repair"]) if any(c["drawn"] for c in fixed) else "not drawn"]


def _findings(rows: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for row in rows:
        for prefix, cells in (("", row["cells"]), ("repair, ", row["repair"])):
            for w, c in cells.items():
                msg = (_label(c) if c["drawn"] else "not drawn by __getitem__") + (
                    f"; first difference {c['first_difference']}" if c["first_difference"] else "")
                if c["duplicated"]:
                    msg += f"; workers {c['duplicated_workers']} share it ({_per_worker(c)})"
                out.append(Finding(row["rng"], f"{prefix}num_workers={w}", Status.PASS if c["ok"] else Status.FAIL, msg,
                                   {k: c[k] for k in ("reproduces", "drawn", "duplicated", "duplicated_workers",
                                                      "observed")}))
    return out


def _coverage(runs: dict[tuple[bool, int], tuple[list[Any], Budget]]) -> list[Finding]:
    """Per setting: the items each worker contributed to a pass, or which workers were never reached and why."""
    out = []
    for (fix, w), (passes, plan_of) in runs.items():
        counts = observed_counts(passes[0])
        missing = unobserved(plan_of, counts)
        check = ("repair, " if fix else "") + f"num_workers={w}"
        msg = missing or (f"{plan_of.batches} batches per pass; items per worker {counts}" if w >= 2
                          else f"{len(passes[0])} items per pass in the main process" if w == 0
                          else f"{len(passes[0])} items per pass in the one worker")
        out.append(Finding("coverage", check, Status.SKIPPED if missing else Status.PASS, msg,
                           {"observed": counts, "budget": plan_of.to_dict()}))
    return out


def _build(plan: Plan, settings: list[int], runs: dict[tuple[bool, int], tuple[list[Any], Budget]],
           source: str) -> RngAuditReport:
    rows = []
    for name in [ORDER, *GLOBALS, *(g.name for g in plan.held), CONTENT]:
        cells = {str(w): _cell(runs[False, w][0], name, w) for w in settings}
        fixed = {str(w): _cell(runs[True, w][0], name, w) for w in settings}
        rows.append({"rng": name, "cells": cells, "repair": fixed})
    user_init = plan.loader.worker_init_fn if plan.loader is not None else None
    code = repair_code(plan.seed, plan.held, getattr(user_init, "__name__", "your_worker_init_fn") if user_init else None,
                       settings)
    streams = ", ".join(["numpy", "random", *(g.name for g in plan.held)])
    hint = (f"pass generator=torch.Generator().manual_seed({plan.seed}) to the DataLoader and a worker_init_fn reseeding "
            f"{streams} from torch.initial_seed(); with num_workers=0 reseed them before each pass (details['repair_code'])")
    div = _divergence(rows, hint)
    repair_ok = all(c["ok"] for row in rows for c in row["repair"].values())
    findings = _coverage(runs) + _findings(rows) + [Finding("repair", "applied and verified", Status.PASS if repair_ok else Status.FAIL,
                                          "every drawn stream reproduces, none duplicated" if repair_ok
                                          else "some stream still fails with the repair")]
    order = {("repair, " if fix else "") + f"num_workers={w}": [[r["index"] for r in p] for p in passes]
             for (fix, w), (passes, _) in runs.items()}
    seen = {f"num_workers={w}": observed_counts(runs[False, w][0][0]) for w in settings}
    details = {"source": source, "seed": plan.seed, "items": plan.items, "batch_size": plan.batch_size,
               "num_workers": settings, "columns": [f"num_workers={w}" for w in settings] + ["with the repair"],
               "rows": rows, "order": order, "held": [g.name for g in plan.held], "repair_ok": repair_ok,
               "repair_code": code, "observed": seen}
    return RngAuditReport(INSTRUMENT, Status.FAIL if div else Status.PASS, div, tuple(findings), _SIDE_EFFECTS,
                          details=details)


_SIDE_EFFECTS = ("none on your objects: every pass ran on deep copies (the dataset, one copy per num_workers setting "
                 "shared by its two passes; a loader's sampler and generator, copied afresh per pass); torch, numpy and "
                 "random global RNG states saved before and restored after; DataLoader worker processes started and stopped")


# -- the public function -------------------------------------------------------------------------------


class _PassError(Exception):
    pass


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InvalidArgument(f"Expected `{name}` to be an integer >= {low} but got {value!r}")
    return int(value)


def _settings(num_workers: Any) -> list[int]:
    values = [num_workers] if isinstance(num_workers, (int, np.integer)) else num_workers
    try:
        out = [_check_int("num_workers", w, 0) for w in values]
    except TypeError:
        raise InvalidArgument(f"Expected `num_workers` to be integers like (0, 2) but got {num_workers!r}") from None
    if not out:
        raise InvalidArgument("Expected `num_workers` to be non-empty integers like (0, 2) but got []")
    return list(dict.fromkeys(out))


def _plan(obj: Any, seed: Any, items: Any, batch_size: Any) -> Plan | Report:
    seed, items = _check_int("seed", seed, 0), _check_int("items", items, 1)
    batch_size = None if batch_size is None else _check_int("batch_size", batch_size, 1)
    loader = obj if isinstance(obj, DataLoader) else None
    ds = loader.dataset if loader is not None else obj
    if isinstance(ds, IterableDataset):
        return skipped(INSTRUMENT, f"{type(ds).__name__} is an IterableDataset; the audit needs a map-style Dataset "
                                   "(__getitem__ and __len__) to observe each item")
    if isinstance(ds, (str, bytes)) or not all(hasattr(type(ds), m) for m in ("__getitem__", "__len__")):
        raise InvalidArgument(f"Expected a map-style Dataset (with __getitem__ and __len__) or a DataLoader but got "
                              f"{type(ds).__name__}")
    custom_batches = loader is not None and loader.batch_size is None and loader.batch_sampler is not None
    if custom_batches and batch_size is not None:
        raise InvalidArgument("`batch_size` cannot override a DataLoader built with batch_sampler=; leave it None")
    try:
        n = len(ds)
    except Exception as exc:  # noqa: BLE001 (the user's __len__: a SKIPPED report)
        return skipped(INSTRUMENT, f"len(dataset) raised {describe_error(exc, None)}; make __len__ return the item count")
    if n == 0:
        return skipped(INSTRUMENT, "the dataset is empty; audit a dataset with at least one item")
    if batch_size is None:
        batch_size = loader.batch_size if loader is not None else 1
    return Plan(ds, loader, batch_size, items, seed, find_held(ds))


def _run(plan: Plan, workers: int, repair: bool) -> tuple[list[list[dict[str, Any]]], Budget]:
    where = f"num_workers={workers}" + (" with the repair" if repair else "")
    try:
        inner = copy.deepcopy(plan.dataset)
    except Exception as exc:  # noqa: BLE001 (any copy failure is the dataset's, said in one line)
        raise _PassError(f"copy.deepcopy(dataset) raised {describe_error(exc, None)}; the audit runs on a copy to leave "
                         "yours untouched: make the dataset deep-copyable (define __deepcopy__)") from None
    try:
        passes, plan_of = run_setting(plan, inner, workers, repair)
    except CopyError as exc:
        raise _PassError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 (worker failures arrive as any type)
        last = ([x.strip() for x in str(exc).splitlines() if x.strip()] or [type(exc).__name__])[-1]  # worker tracebacks
        if not last.startswith(type(exc).__name__):
            last = f"{type(exc).__name__}: {last}"
        raise _PassError(f"the loader raised {last} at {where}; fix it and rerun") from None
    bad = next((r for p in passes for r in p if "error" in r), None)
    if bad is not None:
        raise _PassError(f"dataset[{bad['index']}] raised {bad['error']} at {where}; fix __getitem__ and rerun "
                         "(the audit calls it as a DataLoader does)")
    return passes, plan_of


def rng_audit(dataset_or_loader: Any, num_workers: Any = (0, 2), *, seed: int = 0, items: int = 16,
              batch_size: int | None = None) -> Report:
    """Which RNGs in a data pipeline reproduce from ``torch.manual_seed(seed)``, per ``num_workers``.

    Runs two passes of at least ``items`` items per setting (with workers, whole batches until each worker
    is observed; ``details['observed']`` counts the items per worker), observing torch's, numpy's legacy and
    ``random``'s global RNGs and the generators the dataset holds (also inside a Subset or ConcatDataset),
    without drawing from any of them; flags streams that two workers share (first) or that differ between
    passes; applies and verifies the repair. A bare Dataset is loaded with ``shuffle=True`` and
    ``batch_size`` (default 1), its items not collated; a DataLoader keeps its sampler, batch size, collate,
    worker_init_fn and generator (prefetching one batch per worker). Leaves every object and RNG as found.
    """
    settings = _settings(num_workers)
    plan = _plan(dataset_or_loader, seed, items, batch_size)
    if isinstance(plan, Report):
        return plan
    source = (f"DataLoader over {type(plan.dataset).__name__}" if plan.loader is not None
              else f"{type(plan.dataset).__name__} (shuffle=True, batch_size={plan.batch_size})")
    saved = rng_state()
    try:
        runs = {(fix, w): _run(plan, w, fix) for fix in (False, True) for w in settings}
    except _PassError as exc:
        return Report(INSTRUMENT, Status.SKIPPED, reason=str(exc), side_effects=_SIDE_EFFECTS, details={"source": source})
    finally:
        restore_rng(saved)
    return _build(plan, settings, runs, source)


# -- the chapter's experiment and the command line -----------------------------------------------------


BUILTINS = {"rng-demo": RngDemo}  # the chapter's E4 experiment


#: how a dataset target's errors are worded (the loader is :func:`firstdiv.lab._targets.load_callable`)
DATASET = Kind(
    WorkloadError, "Expected a target like builtin:rng-demo, path/to/file.py:make_dataset or module:make_dataset "
    "but got {target!r}",
    missing_file="File {where!r} does not exist (relative to {cwd}); give the path to a .py file defining {name}()",
    no_function="{where} has no function {name!r}; define {name}() returning a Dataset or DataLoader",
    builtins=BUILTINS, builtin_noun="dataset")


def load_target(target: str) -> Any:
    """``builtin:rng-demo``, ``path/to/file.py:function`` or ``module:function`` -> the Dataset/DataLoader
    that the zero-argument function returns."""
    fn, source = load_callable(target, DATASET)
    if source is None:  # builtin:NAME
        return fn()
    where, _, name = target.rpartition(":")
    try:
        obj = fn()
    except Exception as exc:  # noqa: BLE001 (the user's factory failing is one line)
        raise WorkloadError(f"Calling {name}() from {where} raised {describe_error(exc, None)}; it must take no "
                            "arguments and return a Dataset or DataLoader") from None
    if not isinstance(obj, DataLoader) and (isinstance(obj, (str, bytes))
                                            or not all(hasattr(type(obj), m) for m in ("__getitem__", "__len__"))):
        raise WorkloadError(f"{name}() from {where} returned {type(obj).__name__}; return a map-style Dataset or a DataLoader")
    return obj


def parse_workers(text: str) -> list[int]:
    try:
        return _settings([int(part, 10) for part in text.split(",")])
    except ValueError:
        raise InvalidArgument(f"Expected --workers like 0,2 (non-negative integers) but got {text!r}") from None
