"""The diagnostic dataset of chapter 31: "a small diagnostic dataset whose examples you know by hand ... one
ordinary case, one boundary case, one missing-input case, and one case requiring abstention. Run it after
changes to preprocessing, dependency versions, export, or serving."

``DiagnosticSet.create(path, examples, model_or_fn)`` runs each example once and stores its inputs and the
outputs as the expected ones; ``DiagnosticSet.load(path).check(model_or_fn)`` runs them again and reports
every example whose output changed (``diagnostic.changed`` at the example's name, with its category and max
error; a changed argmax or abstention decision is called out as such); ``.update(model_or_fn, names)``
accepts new outputs deliberately.

An example is a dict: ``name`` (unique), ``category`` (ordinary, boundary, missing_input, abstention),
``inputs`` (a tensor, a tuple of positional arguments or a dict of keyword arguments, as compare_outputs),
``note`` (why the example is there, what the right answer is) and optionally ``abstain_class`` (the output
index that means "I don't know") or ``abstain_below`` (abstain when the top softmax probability is below it).
The decision of an output: None means abstain; a string, int or bool is the decision itself; for logits (the
first floating tensor with a last axis of 2 or more) the argmax over the last axis, with the abstention rules
(one value for a single row, else a list).

On disk, a directory: ``index.json`` (``schema_version``, and per example name, category, note, input and
output leaf keys, output fingerprint, decision) and ``tensors.pt`` (``{"examples": {name: {"inputs",
"expected"}}}``, read back with ``torch.load(weights_only=True)``). Writes build a temporary sibling directory
and swap it in with ``os.replace``; on any error nothing half-written is left and the previous set stays.

Schema history: 1 -- first version.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..._files import swap_in
from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.batch import describe_error
from .._core.checks import Check, check, compose
from .._core.layers import listed, train_mode_modules
from .._core.outputs import Tolerance, compare
from .._core.state import guarded
from ._examples import (
    ABSTAIN,
    CATEGORIES,
    check_example,
    decision,
    expected_outputs,
    fingerprint,
    record,
    run_example,
    to_cpu,
)

__all__ = ["CATEGORIES", "SCHEMA_VERSION", "DiagnosticSet"]

SCHEMA_VERSION = 1
INDEX, TENSORS = "index.json", "tensors.pt"
_NAME = "diagnostic_set"


# --- disk ----------------------------------------------------------------------------------------------------------

def _path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"Expected `path` to be a str or os.PathLike directory but got {type(path).__name__}")
    return Path(path)


def _write_index(target: Path, index: dict[str, Any]) -> None:
    target.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def _write(path: Path, index: dict[str, Any], tensors: dict[str, Any]) -> None:
    """Build the set in a temporary sibling directory, then swap it in; on error nothing is left behind."""
    if not path.parent.is_dir():
        raise InvalidArgument(f"Expected the parent directory of {str(path)!r} to exist but it does not")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        torch.save(tensors, tmp / TENSORS)
        _write_index(tmp / INDEX, index)
        swap_in(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful swap


def _read_index(path: Path) -> dict[str, Any]:
    if not (path / INDEX).is_file():
        raise InvalidArgument(f"Expected a diagnostic set directory with {INDEX} at {str(path)!r} but found none")
    try:
        index = json.loads((path / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"Expected {str(path / INDEX)!r} to be valid JSON but reading it raised {describe_error(exc)}") from None
    version = index.get("schema_version") if isinstance(index, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgument(f"Expected {str(path / INDEX)!r} to carry an integer schema_version >= 1 but got {version!r}")
    if version > SCHEMA_VERSION:
        raise InvalidArgument(f"Expected a diagnostic set of schema version <= {SCHEMA_VERSION} but {str(path)!r} has schema "
                              f"version {version}, written by a newer firstdiv; upgrade firstdiv to read it")
    entries = index.get("examples")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
        raise InvalidArgument(f"Expected {str(path / INDEX)!r} to list examples with names but got {entries!r:.80}")
    bad = next((e for e in entries if e.get("category") not in CATEGORIES), None)
    if bad is not None:
        raise InvalidArgument(f"Expected category of {bad['name']!r} in {str(path / INDEX)!r} to be one of "
                              f"{', '.join(CATEGORIES)} but got {bad.get('category')!r}")
    return index


def _read_tensors(path: Path) -> dict[str, Any]:
    if not (path / TENSORS).is_file():
        raise InvalidArgument(f"Expected {TENSORS} next to {INDEX} in {str(path)!r} but found none")
    try:
        data = torch.load(path / TENSORS, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file is a one-line error
        raise InvalidArgument(f"Expected {str(path / TENSORS)!r} to be a readable tensors file but loading it raised "
                              f"{describe_error(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("examples"), dict):
        raise InvalidArgument(f"Expected {str(path / TENSORS)!r} to hold {{'examples': {{name: ...}}}} but got {type(data).__name__}")
    return data["examples"]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# --- checks --------------------------------------------------------------------------------------------------------

def _decision_text(before: Any, after: Any) -> str:
    if before == after:
        return f"decision unchanged ({before})"
    if ABSTAIN in (before if isinstance(before, list) else [before]) or ABSTAIN in (after if isinstance(after, list) else [after]):
        return f"abstention decision changed: {before} -> {after}"
    return f"argmax changed: {before} -> {after}"


def _example_check(entry: dict[str, Any], stored: dict[str, Any], model_or_fn: Any, tol: Tolerance) -> Check:
    name = entry["name"]
    ev: dict[str, Any] = {"category": entry["category"], "note": entry.get("note", "")}
    value, error = run_example(model_or_fn, stored["inputs"])
    if error:
        return check(name, "diagnostic.raised", Status.FAIL, f"[{entry['category']}] raised {error}", {**ev, "error": error},
                     expected="the stored outputs", observed=f"raised {error}",
                     hint="a change in preprocessing, dependencies, export or serving broke this example")
    summary = compare(stored["expected"], value, tol).summary()
    before, after = entry.get("decision"), decision(value, entry.get("abstain_class"), entry.get("abstain_below"))
    ev.update(summary)
    ev.update({"decision_expected": before, "decision_observed": after, "decision_changed": before != after})
    within = isinstance(summary["tolerance_ratio"], float) and summary["tolerance_ratio"] <= 1 and "problems" not in summary
    err = summary["max_abs_error"]
    text = f"[{entry['category']}] max abs error " + (f"{err:.3g}" if isinstance(err, float) else str(err))
    if within and before == after:
        return check(name, "diagnostic.changed", Status.PASS, f"{text}; {_decision_text(before, after)}", ev)
    what = _decision_text(before, after) if before != after else (
        "; ".join(summary["problems"][:2]) if "problems" in summary else f"{summary['violations']} element(s) outside {tol.describe()}")
    spread = _own_spread(model_or_fn, stored["inputs"], tol, entry)  # the premise: model_or_fn reproduces itself
    ev["own_spread"] = spread
    if spread is None or spread["varies"]:
        why = ("model_or_fn could not be run again with other random numbers" if spread is None else
               f"model_or_fn's own outputs, run twice with different RNG seeds, differ by {_num(spread['max_abs_error'])}"
               + (" and change the decision" if spread["decision_varies"] else "") + f" ({tol.describe()})")
        return check(name, "diagnostic.changed", Status.WARN, f"{text}; {what}; not a FAIL: {why}, so the change is not "
                     "shown to be beyond its own run-to-run variation; check it in eval mode with its random layers off",
                     ev, hint="model_or_fn.eval() before check(), or a function that draws no random numbers")
    return check(name, "diagnostic.changed", Status.FAIL, f"{text}; {what}", ev,
                 expected=f"the stored outputs (decision {before})", observed=f"{what}; max abs error {err:.3g}" if isinstance(err, float) else f"{what}; max abs error {err}",
                 hint=f"if the change is intended, accept it with .update(model_or_fn, names=[{name!r}]); the note says: "
                      f"{entry.get('note') or '(none)'}")


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _own_spread(model_or_fn: Any, inputs: Any, tol: Tolerance, entry: dict[str, Any]) -> dict[str, Any] | None:
    """Two more runs of one example with torch, Python and numpy seeded differently (every RNG restored after): whether
    the outputs (or the decision) differ beyond the tolerance; None when a run raised."""
    outs = []
    for seed in (1, 2):
        with guarded():  # seeds only generators it restores: CUDA's only when CUDA is initialised
            torch.default_generator.manual_seed(seed)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.manual_seed_all(seed)
            random.seed(seed)
            np.random.seed(seed)
            value, error = run_example(model_or_fn, inputs)
        if error:
            return None
        outs.append(value)
    summary = compare(outs[0], outs[1], tol).summary()
    rule = (entry.get("abstain_class"), entry.get("abstain_below"))
    decisions = [decision(v, *rule) for v in outs]
    within = isinstance(summary["tolerance_ratio"], float) and summary["tolerance_ratio"] <= 1 and "problems" not in summary
    return {"max_abs_error": summary["max_abs_error"], "decision_varies": decisions[0] != decisions[1],
            "varies": not within or decisions[0] != decisions[1]}


def _set_checks(entries: list[dict], stored: dict[str, Any], model_or_fn: Any) -> list[Check]:
    out = []
    active = train_mode_modules(model_or_fn) if isinstance(model_or_fn, nn.Module) else []
    if active:
        out.append(check("model", "diagnostic.train_mode", Status.WARN, f"{len(active)} module(s) in training mode: "
                         f"{listed(active)}; outputs are not reproducible", {"train_mode_modules": active}))
    names = {e["name"] for e in entries}
    for e in entries:
        if e["name"] not in stored:
            out.append(check(e["name"], "diagnostic.missing", Status.FAIL, f"[{e['category']}] listed in {INDEX} but "
                             f"{TENSORS} holds no inputs/outputs for it", {"category": e["category"]},
                             expected=f"stored inputs and outputs for {e['name']!r}", observed="none",
                             hint="the set was edited by hand; recreate it with DiagnosticSet.create"))
        elif fingerprint(stored[e["name"]]["expected"]) != e.get("output_fingerprint"):
            out.append(check(e["name"], "diagnostic.fingerprint_mismatch", Status.FAIL, f"[{e['category']}] stored outputs "
                             f"do not match the fingerprint in {INDEX}", {"category": e["category"]},
                             expected=str(e.get("output_fingerprint")), observed=fingerprint(stored[e["name"]]["expected"]),
                             hint="tensors.pt was replaced or edited outside firstdiv"))
    for extra in (n for n in stored if n not in names):
        out.append(check(extra, "diagnostic.extra", Status.WARN, f"{TENSORS} holds {extra!r}, which {INDEX} does not list "
                         f"(not checked)", {"name": extra}))
    for cat in CATEGORIES:
        if not any(e["category"] == cat for e in entries):
            out.append(check(cat, "diagnostic.category_missing", Status.WARN, f"no {cat} example (chapter 31: one ordinary, "
                             f"one boundary, one missing-input, one abstention)", {"category": cat}))
    return out


# --- the set -------------------------------------------------------------------------------------------------------

class DiagnosticSet:
    """A stored diagnostic dataset; build with :meth:`create`, open with :meth:`load`."""

    def __init__(self, path: Path, index: dict[str, Any], stored: dict[str, Any]) -> None:
        self.path, self._index, self._stored = path, index, stored

    @property
    def names(self) -> list[str]:
        return [e["name"] for e in self._index["examples"]]

    @property
    def categories(self) -> dict[str, str]:
        return {e["name"]: e["category"] for e in self._index["examples"]}

    def __len__(self) -> int:
        return len(self._index["examples"])

    def __repr__(self) -> str:
        return f"DiagnosticSet({str(self.path)!r}, {len(self)} examples)"

    @classmethod
    def create(cls, path: str | os.PathLike, examples: Sequence[dict[str, Any]], model_or_fn: Callable[..., Any]) -> DiagnosticSet:
        """Run every example through ``model_or_fn``, store inputs and outputs at ``path`` (a new directory)."""
        target = _path(path)
        if target.exists() and not (target.is_dir() and not any(target.iterdir())):
            raise InvalidArgument(f"Expected `path` {str(target)!r} not to exist (or to be empty) but it does; open it with "
                                  f"DiagnosticSet.load(path) and call .update(...)")
        if not callable(model_or_fn):
            raise InvalidArgument(f"Expected `model_or_fn` to be an nn.Module or callable but got {type(model_or_fn).__name__}")
        if not isinstance(examples, (list, tuple)) or not examples:
            raise InvalidArgument(f"Expected `examples` to be a non-empty list of dicts but got {examples!r:.80}")
        seen: set[str] = set()
        metas = [check_example(i, ex, seen) for i, ex in enumerate(examples)]
        inputs = {m["name"]: to_cpu(ex["inputs"]) for m, ex in zip(metas, examples)}
        outputs = expected_outputs(model_or_fn, metas, inputs)
        stored = {n: {"inputs": inputs[n], "expected": outputs[n]} for n in inputs}
        index = {"schema_version": SCHEMA_VERSION, "format": "firstdiv diagnostic set", "created": _now(), "updated": _now(),
                 "torch": torch.__version__, "examples": [record(m, inputs[m["name"]], outputs[m["name"]]) for m in metas]}
        _write(target, index, {"examples": stored})
        return cls(target, index, stored)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DiagnosticSet:
        """Open a stored set; a wrong path, unreadable files or a newer schema are one-line InvalidArgument errors."""
        target = _path(path)
        if not target.is_dir():
            raise InvalidArgument(f"Expected `path` to be a diagnostic set directory but {str(target)!r} "
                                  f"{'is a file' if target.exists() else 'does not exist'}")
        index = _read_index(target)
        return cls(target, index, _read_tensors(target))

    def check(self, model_or_fn: Callable[..., Any], *, atol: float = 1e-5, rtol: float = 1e-4) -> Report:
        """Run every example again and report each one whose output (or decision) changed."""
        if not callable(model_or_fn):
            raise InvalidArgument(f"Expected `model_or_fn` to be an nn.Module or callable but got {type(model_or_fn).__name__}")
        tol = Tolerance(rtol, atol)
        entries = self._index["examples"]
        checks = _set_checks(entries, self._stored, model_or_fn)
        checks += [_example_check(e, self._stored[e["name"]], model_or_fn, tol) for e in entries if e["name"] in self._stored]
        changed = [c.finding.where for c in checks if c.finding.check in ("diagnostic.changed", "diagnostic.raised")
                   and c.finding.status is Status.FAIL]
        details = {"path": str(self.path), "schema_version": self._index["schema_version"], "examples": len(entries),
                   "categories": {c: sum(e["category"] == c for e in entries) for c in CATEGORIES},
                   "tolerance": tol.describe(), "changed": changed}
        return compose(_NAME, checks, "model_or_fn ran once per example under torch.no_grad; module values, buffers, hooks, "
                       "train flags, RNG states and grad mode restored", details)

    def update(self, model_or_fn: Callable[..., Any], names: Sequence[str] | None = None) -> DiagnosticSet:
        """Accept ``model_or_fn``'s outputs as the expected ones for ``names`` (default: every example). The write is
        atomic and keeps what the index lists (stored entries the index does not list are dropped)."""
        if not callable(model_or_fn):
            raise InvalidArgument(f"Expected `model_or_fn` to be an nn.Module or callable but got {type(model_or_fn).__name__}")
        chosen = self.names if names is None else ([names] if isinstance(names, str) else list(names))
        unknown = [n for n in chosen if n not in self._stored or n not in self.names]
        if unknown:
            raise InvalidArgument(f"Expected `names` among the stored examples ({', '.join(n for n in self.names if n in self._stored)}) "
                                  f"but got {unknown[0]!r}")
        entries = [e for e in self._index["examples"] if e["name"] in chosen]
        outputs = expected_outputs(model_or_fn, entries, {n: self._stored[n]["inputs"] for n in chosen})
        stored = {n: dict(v) for n, v in self._stored.items() if n in self.names}
        index = {**self._index, "updated": _now(), "torch": torch.__version__, "examples": []}
        for e in self._index["examples"]:
            if e["name"] in outputs:
                stored[e["name"]]["expected"] = outputs[e["name"]]
                e = record({k: e.get(k) for k in ("name", "category", "note", "abstain_class", "abstain_below")},
                            stored[e["name"]]["inputs"], outputs[e["name"]])
            index["examples"].append(e)
        _write(self.path, index, {"examples": stored})
        self._index, self._stored = index, stored
        return self
