"""Seed sweeps: run a workload at many seeds, record every run, summarise the noise floor.

The target is a workload (``builtin:mlp``, ``file.py:train``, ``module:train``) or a command: a list of arguments
with ``{seed}`` and ``{key}`` placeholders, run as a child process per seed (:mod:`firstdiv.lab.command`).
"""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InvalidArgument
from ..report import Divergence, Finding, Report, Status
from . import backends
from .identity import RunIdentity
from .record import RunRecord, jsonable
from .runner import identity
from .store import Store, SweepInfo
from .workload import Workload, resolve

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
#: The largest seed a run record can hold (SQLite's INTEGER is a signed 64-bit number).
MAX_SEED = 2**63 - 1


def parse_seeds(text: str | int | Iterable[int]) -> list[int]:
    """'0-11', '0,3,5' or '0-3,8' -> sorted unique seeds; one integer or an iterable of integers
    (numpy's included) passes through."""
    if isinstance(text, str):
        return _parse_seed_text(text)
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        text = [text]
    try:
        seeds = list(text)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgument(f"Expected `seeds` like '0-11', '0,3,5' or a list of integers but got {text!r}") from None
    if not seeds or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and 0 <= s <= MAX_SEED
                            for s in seeds):
        raise InvalidArgument(f"Expected `seeds` to be non-empty integers in [0, 2**63-1] but got {seeds!r}"[:300])
    return sorted({int(s) for s in seeds})


def _parse_seed_text(text: str) -> list[int]:
    seeds: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part)
        if not m:
            raise InvalidArgument(f"Expected seeds like 0-11 or 0,3,5 but got {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi > MAX_SEED:
            raise InvalidArgument(f"Seed {hi} in {part.strip()!r} is out of range: seeds are integers in [0, 2**63-1]")
        if hi < lo:
            raise InvalidArgument(f"Seed range {part.strip()!r} is empty: write LOW-HIGH with LOW <= HIGH")
        if hi - lo > 100_000:
            raise InvalidArgument(f"Seed range {part.strip()!r} has more than 100000 seeds")
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


@dataclass(frozen=True)
class SweepResult:
    """A sweep's runs (seed order) and what this call did: which seeds ran, which were reused."""

    sweep: SweepInfo
    records: tuple[RunRecord, ...]
    ran: tuple[int, ...] = ()
    reused: tuple[int, ...] = ()
    failed: tuple[RunRecord, ...] = ()
    store_path: str = ""

    #: the HTML page that shows it (firstdiv.render.html)
    page: ClassVar[str] = "sweep"

    @property
    def metrics(self) -> list[str]:
        names: dict[str, None] = {}
        for r in self.records:
            names.update(dict.fromkeys(r.final))
        return list(names)

    def values(self, metric: str) -> list[float]:
        return [r.final[metric] for r in self.records if metric in r.final]

    @property
    def diverged(self) -> tuple[RunRecord, ...]:
        """Runs that completed with a NaN or infinite final metric (see ``RunRecord.nonfinite``)."""
        return tuple(r for r in self.records if r.ok and r.nonfinite())

    def bands(self, name: str) -> list[dict[str, float]]:
        """The seed bands (median, quartiles, min, max per epoch) of curve ``name`` over the runs that logged it."""
        from . import stats

        curves = {r.seed: r.curves[name] for r in self.records if r.curves.get(name)}
        return stats.bands(curves) if curves else []

    def summary(self) -> dict[str, dict[str, float]]:
        """The noise floor: per metric, median/stdev/min/max/spread over seeds."""
        from . import stats

        return {m: stats.describe(self.values(m)) for m in self.metrics}

    def report(self) -> Report:
        findings = [Finding(m, "seed variation", Status.PASS, f"median {s['median']:.6g} stdev {s['stdev']:.3g} "
                            f"spread {s['spread']:.3g} over {s['n']} seeds", s)
                    for m, s in self.summary().items() if s.get("n")]
        findings += [Finding(f"seed {r.seed}", "run", Status.FAIL, r.error or "failed") for r in self.failed]
        findings += [Finding(f"seed {r.seed}", "run", Status.FAIL, diverged_text(r), jsonable(r.nonfinite()))
                     for r in self.diverged]
        div = None
        if self.failed:
            r = self.failed[0]
            div = Divergence(f"seed {r.seed}", "run.failed", "the workload completes", r.error or "failed",
                             "rerunning the same command retries only the failed seeds; a fix to the code is a new "
                             "code version, so its sweep starts fresh")
        elif self.diverged:
            r = self.diverged[0]
            div = Divergence(f"seed {r.seed}", "run.diverged", "finite metrics", diverged_text(r),
                             "the run completed but its metrics are not numbers: its curves show the first epoch "
                             "that went non-finite (a smaller lr or gradient clipping are the usual repairs)")
        return Report("sweep", Status.FAIL if div else Status.PASS, div, tuple(findings),
                      side_effects="none (runs recorded in the store)", details=self.to_dict())

    def to_pandas(self) -> Any:
        """The runs (ok and failed, seed order) as a pandas DataFrame, one row per run with the columns of
        ``firstdiv export`` (see :mod:`firstdiv.lab.export`) but ``run_id``. Needs pandas (pip install pandas)."""
        from .export import to_pandas

        return to_pandas(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: a NaN or infinite value is the string "nan", "inf" or "-inf"."""
        return jsonable({
            "sweep": self.sweep.to_dict(), "store": self.store_path, "ran": list(self.ran),
            "reused": list(self.reused), "failed": [{"seed": r.seed, "error": r.error} for r in self.failed],
            "diverged": [{"seed": r.seed, "metrics": r.nonfinite()} for r in self.diverged],
            "summary": self.summary(), "seeds": [r.seed for r in self.records],
            "runs": [{"seed": r.seed, "final": r.final, "eval_fingerprint": r.eval_fingerprint,
                      "created": r.created} for r in self.records]})

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from ..render.sweeps import render_sweep

        yield from render_sweep(self, diverged_text)

    def __str__(self) -> str:
        from ..render import to_text

        return to_text(self)

    def __repr__(self) -> str:
        """One line: ``<SweepResult 'base' builtin:mlp 12 runs (12 ran, 0 reused, 0 failed)>``; print() shows the table."""
        return (f"<SweepResult {self.sweep.name!r} {self.sweep.workload} {len(self.records)} runs ({len(self.ran)} ran, "
                f"{len(self.reused)} reused, {len(self.failed)} failed)>")

    def _repr_html_(self) -> str:
        from ..render import to_html

        return to_html(self)


def load_sweep(ref: str, store: Any) -> SweepResult:
    """A stored sweep (by name or id prefix) as a SweepResult with its ok and its failed runs."""
    info = store.find_sweep(ref)
    runs = store.records(info, include_failed=True)
    return SweepResult(info, tuple(r for r in runs if r.ok), failed=tuple(r for r in runs if not r.ok),
                       store_path=str(store.path))


def diverged_text(record: RunRecord) -> str:
    """'diverged: val_loss nan from epoch 3, train_loss inf from epoch 2' (epochs count logged rows from 0)."""
    parts = [f"{name} {info['value']}" + ("" if info["epoch"] is None else f" from epoch {info['epoch']}")
             for name, info in record.nonfinite().items()]
    return "diverged: " + ", ".join(parts)


def default_name(workload: Workload, config: dict[str, Any]) -> str:
    defaults = dict(workload.spec.defaults or {})
    defaults.setdefault("threads", 1)
    changed = [f"{k}={v}" for k, v in sorted(config.items()) if k not in defaults or defaults[k] != v]
    base = workload.source.stem if workload.target.startswith("cmd:") else workload.target.split(":")[-1]
    return base + ("-" + "-".join(changed) if changed else "-default")


def sweep(target: str | Sequence[str] | Workload, seeds: str | Sequence[int], *, config: dict[str, Any] | None = None,
          sets: list[str] | None = None, name: str | None = None, store: Store | str | os.PathLike[str] | None = None,
          backend: str = "serial", workers: int | None = None, backend_options: dict[str, Any] | None = None,
          hypothesis: str | None = None,
          success: str | None = None, checkpoint_policy: str | None = None, force: bool = False,
          progress: bool = False,
          on_record: Callable[[RunRecord], None] | None = None) -> SweepResult:
    """Run ``target`` at every seed not yet recorded for this identity and return the whole sweep.

    Everything is validated before the store is opened, so bad input writes nothing.
    """
    from .._secrets import scrub_record, scrub_text

    target = _check_arguments(target, config, sets, backend, workers, backend_options,
                     name=name, hypothesis=hypothesis, success=success, checkpoint_policy=checkpoint_policy)
    seed_list = parse_seeds(seeds)
    sets = [sets] if isinstance(sets, str) else sets  # one "k=v" string, not a sequence of characters
    workers = int(workers) if workers is not None else None  # numpy integers too
    chosen = backends.get(backend)  # an unknown backend: one line, before anything runs
    checkpoint_policy = _declarations(backend, backend_options, name, hypothesis, success, checkpoint_policy)
    options = dict(backend_options or {})
    _warm(chosen, options, workers, target)
    workload = _workload(target, backend)
    cfg = workload.config(config, sets)
    chosen.check(workload, options)
    owned = not isinstance(store, Store)
    st = Store(store) if owned else store  # type: ignore[arg-type]
    try:
        ident = _identity(workload)(workload, cfg, store_path=st.path, hypothesis=hypothesis, success=success)
        sweep_name = name or default_name(workload, cfg)
        existing = st.find_sweep_exact(sweep_name, ident.identity)
        for key, value in (("hypothesis", hypothesis), ("checkpoint_policy", checkpoint_policy)):
            # the store keeps a hypothesis scrubbed of secrets: the same declaration compares equal scrubbed
            if existing is not None and value is not None and existing.info.get(key) not in (value, scrub_text(value)):
                raise InvalidArgument(f"Sweep {sweep_name!r} was declared with another {key.replace('_', ' ')}; "
                                      "it is declared before the runs: use a new --name")
        info = {"config": cfg, "config_hash": ident.config_hash, "code": ident.code, "env": ident.env,
                "env_hash": ident.env_hash, "hypothesis": hypothesis, "success": success,
                "checkpoint_policy": checkpoint_policy,
                "declared_before": not st.recorded_seeds(ident.identity) if hypothesis or checkpoint_policy else None}
        info = existing.info if existing is not None else info
        info_sweep = st.upsert_sweep(sweep_name, ident.identity, workload.target, info, seed_list)
        done = set() if force else st.recorded_seeds(ident.identity, sweep=info_sweep)
        todo = [s for s in seed_list if s not in done]
        failed: list[RunRecord] = []

        def record(rec: RunRecord) -> None:
            st.add(rec, replace=force, sweep=info_sweep)  # a forced run is appended: other sweeps keep theirs
            if not rec.ok:
                failed.append(scrub_record(rec))  # as stored: the error printed and returned is the scrubbed one
            if on_record is not None:
                on_record(rec)

        _execute(workload, todo, ident, chosen, workers, record, progress, sweep_name, options)
        records = tuple(r for r in st.records(info_sweep) if r.seed in set(seed_list))
        return SweepResult(info_sweep, records, tuple(todo), tuple(s for s in seed_list if s in done),
                           tuple(failed), str(st.path))
    finally:
        if owned:
            st.close()


def _warm(chosen: backends.Backend, options: dict[str, Any], workers: int | None, target: str | Workload) -> None:
    """Start the backend's slow machinery (the process backend's fork server importing torch), then import
    scipy (stats) while it runs, before the workload is. This module loads neither torch nor scipy at import,
    so the command line's sweep, which imports it first, still starts the fork server this early."""
    chosen.warm(options, workers, target if isinstance(target, str) else target.target)
    from . import stats  # noqa: F401 (imported now, while the fork server starts, not after the runs)


def _workload(target: str | Workload, backend: str) -> Workload:
    from .command import is_command

    workload = target if isinstance(target, Workload) else resolve(target)
    if is_command(workload) and backend not in ("serial", "process", "ray"):
        raise InvalidArgument(f"A command sweep runs on --backend serial, process or ray, not {backend}: the "
                              "command runs as a process of its own, not as a function")
    return workload


def _identity(workload: Workload) -> Callable[..., RunIdentity]:
    """How the sweep's identity is computed: a command's holds its child's interpreter and its script's code."""
    from .command import command_identity, is_command

    return command_identity if is_command(workload) else identity


def _check_arguments(target: Any, config: Any, sets: Any, backend: Any, workers: Any, backend_options: Any,
                     **texts: Any) -> str | Workload:
    """Wrong types from Python callers: one line naming the argument, before anything runs. Returns the target, a
    command (a list of arguments) as its ``cmd:`` target string."""
    from .command import command_target

    if isinstance(target, (list, tuple)):
        return command_target(target)
    if not isinstance(target, (str, Workload)):
        raise InvalidArgument(f"Expected `target` to be a string like builtin:mlp, path/to/file.py:train or "
                              f"module:train but got {target!r}")
    if config is not None and not isinstance(config, dict):
        raise InvalidArgument(f"Expected `config` to be a dict of overrides but got {type(config).__name__}; "
                              "for 'k=v' strings use sets=")
    if sets is not None and not isinstance(sets, str) and (
            not isinstance(sets, (list, tuple)) or not all(isinstance(item, str) for item in sets)):
        raise InvalidArgument(f"Expected `sets` to be 'KEY=VALUE' strings (a list of them) but got {sets!r}")
    if not isinstance(backend, str):
        raise InvalidArgument(f"Expected `backend` to be a backend name such as 'serial' but got {backend!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1):
        raise InvalidArgument(f"Expected --workers to be an integer >= 1 but got {workers!r}")
    if backend_options is not None and not isinstance(backend_options, dict):
        raise InvalidArgument(f"Expected `backend_options` to be a dict but got {type(backend_options).__name__}")
    for key, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"Expected `{key}` to be a string but got {type(value).__name__}")
    return target


def _declarations(backend: str, backend_options: dict[str, Any] | None, name: str | None, hypothesis: str | None,
                  success: str | None, checkpoint_policy: str | None) -> str | None:
    """Usage errors found before anything is written; returns the checkpoint policy in its canonical form."""
    from .criteria import parse_criterion
    from .policy import parse_policy

    backends.check_options(backend, dict(backend_options or {}))  # an option this backend would ignore
    if (hypothesis is None) != (success is None):
        raise InvalidArgument("Declare both --hypothesis and --success (the criterion that grades it), or neither")
    if success is not None:
        parse_criterion(success)
    if name is not None and not name.strip():
        raise InvalidArgument("Expected a non-empty --name")
    return str(parse_policy(checkpoint_policy)) if checkpoint_policy is not None else None


def _progress(enabled: bool, total: int, label: str) -> Any:
    import sys

    if not enabled or total == 0 or not sys.stderr.isatty():
        return nullcontext(None)  # a bar is for a person at a terminal, not for logs
    from .._rich import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from ..render import safe_console

    text = label.replace("{", "{{").replace("}", "}}")  # a sweep name is data: not markup, not a format field
    return Progress(TextColumn(text, style="bold", markup=False), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=safe_console(file=sys.stderr), transient=True)


def _execute(workload: Workload, seeds: list[int], ident: RunIdentity, backend: backends.Backend,
             workers: int | None, record: Callable[[RunRecord], None], progress: bool, label: str,
             options: dict[str, Any]) -> None:
    with _progress(progress, len(seeds), f"{label} [{backend.name}]") as bar:
        task = bar.add_task("runs", total=len(seeds)) if bar is not None else None

        def done(rec: RunRecord) -> None:
            record(rec)
            if bar is not None:
                bar.advance(task)

        if seeds:
            backend.run(workload, seeds, ident, workers=workers, done=done, options=options)
