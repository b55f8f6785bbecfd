"""``firstdiv.log``: how a script run by a command sweep reports its metrics; a no-op anywhere else.

A command sweep (``firstdiv sweep -- python train.py --seed {seed}``) gives each child process the path of a
report file in ``FIRSTDIV_REPORT_FILE`` (or an open descriptor in ``FIRSTDIV_REPORT_FD``); each call appends one
JSON line ``{"step": 3, "val_loss": 0.41}``. Called repeatedly with a ``step`` (or ``epoch``) it draws curves; the
last value of each metric is the run's final metric. Outside a sweep neither variable is set and ``log`` returns
at once, so the same script runs bare. Under a multi-process launcher (``torchrun``) only rank 0 reports: with
``RANK`` set to anything but ``"0"`` it does nothing. A script in another language writes the same lines itself.

The protocol, one JSON object a line. A line that cannot be used (it does not parse, a kill cut it short, its step
is not a finite number, it is nested too deeply, a number is too large for a float) is skipped, counted, and named in
the run's notes:

- a metrics line: numbers, and optionally ``step`` (or ``epoch``), the row's index: ``{"step": 3, "val_loss": 0.41}``;
- a run line, written by :func:`report` (the training callbacks of ``firstdiv.integrations`` use it): the reserved key
  ``"_firstdiv"`` names its kind and ``"data"`` holds its content, so a reader that knows only metrics lines finds
  no number at the top level and skips it:

  - ``{"_firstdiv": "grad_norm", "data": [1.2, 0.9]}``: global gradient norms, one per optimizer step (appended);
  - ``{"_firstdiv": "throughput", "data": {"examples": 640, "seconds": 2.5, "tokens": 81920}}``: what the run
    trained on and the seconds it spent training (evaluation excluded); ``tokens`` (non-padding) is optional;
  - ``{"_firstdiv": "eval_contract", "data": {"indices": {...}, "mode": "eval", ...}}``: what its evaluation
    measured (which examples, preprocessing, reduction, model mode); the record's eval fingerprint is its hash;
  - ``{"_firstdiv": "config", "data": {"learning_rate": 0.001, ...}}``: the hyper-parameters as the script saw
    them (kept in the record's ``extra["reported_config"]``; the sweep's own config and identity are unchanged);
  - ``{"_firstdiv": "status", "data": {"status": "failed", "error": "RuntimeError: ..."}}``: how the training ended
    (``"running"`` when it begins, ``"ok"``, ``"failed"`` or ``"interrupted"``); a command that exits 0 while its last
    status is not ``"ok"`` is a failed run (its training raised and the script went on).

  The last line of a kind wins, except ``grad_norm`` lines, which add up. Unknown kinds are skipped.

:func:`eval_contract`, :func:`throughput`, :func:`grad_norm` and :func:`log_config` write those run lines from a
hand-written loop, so a command run's record holds what an in-process workload's does.

This module imports only the standard library's ``os`` and ``json``: ``firstdiv.log`` loads no torch.
"""

from __future__ import annotations

import json
import os
from typing import Any

REPORT_FILE = "FIRSTDIV_REPORT_FILE"
REPORT_FD = "FIRSTDIV_REPORT_FD"
#: the kinds of run line :func:`report` writes
KINDS = ("grad_norm", "throughput", "eval_contract", "config", "status")


def reporting() -> bool:
    """Whether this process reports to a sweep (a report file or descriptor is set, and this is rank 0)."""
    if not os.environ.get(REPORT_FILE) and not os.environ.get(REPORT_FD):
        return False
    return os.environ.get("RANK", "0") in ("", "0")


def log(step: int | None = None, *, epoch: int | None = None, **metrics: Any) -> None:
    """Report ``metrics`` (numbers, or 0-d tensors/arrays) of one step or epoch to the sweep running this script."""
    if not reporting():
        return
    row: dict[str, Any] = {}
    at = step if step is not None else epoch
    if at is not None:
        row["step"] = int(at)
    for name, value in metrics.items():
        row[name] = _number(f"firstdiv.log: metric {name!r}", value)
    _write(row)


def report(kind: str, data: Any) -> None:
    """Write one run line ``{"_firstdiv": kind, "data": data}`` (see the module docstring); a no-op outside a
    sweep. ``data`` must be JSON: lists and dicts of numbers and strings."""
    if kind not in KINDS:
        raise ValueError(f"firstdiv report kind must be one of {', '.join(KINDS)} but got {kind!r}")
    if reporting():
        _write({"_firstdiv": kind, "data": data})


def eval_contract(contract: dict[str, Any] | None = None, **fields: Any) -> None:
    """Report what the script's evaluation measures, as ``rec.eval_contract`` does in a workload, e.g.
    ``firstdiv.eval_contract(indices=val_idx, preprocessing="center224", reduction="mean", mode="eval")``: index
    lists, ranges, arrays and tensors are hashed by content; the record's eval fingerprint is the contract's hash,
    so `compare` tells a changed measurement from a changed model. A no-op outside a sweep."""
    merged = dict(contract or {}, **fields)
    if not merged:
        raise ValueError("firstdiv.eval_contract() needs at least one field, e.g. indices=..., mode='eval'")
    if reporting():
        from .lab.record import contract_value  # numpy, only when there is somewhere to report to

        report("eval_contract", {str(k): contract_value(v) for k, v in merged.items()})


def throughput(*, examples: int, seconds: float, tokens: int | None = None) -> None:
    """Report the examples (and, for text, non-padding tokens) trained on and the seconds spent training them
    (evaluation excluded): the record's examples/s (tokens/s), which `compare` shows as the cost."""
    data = {"examples": int(_count("examples", examples)), "seconds": _count("seconds", seconds)}
    if tokens is not None:
        data["tokens"] = int(_count("tokens", tokens))
    report("throughput", data)


def grad_norm(value: Any) -> None:
    """Report one optimizer step's global gradient norm (before clipping); the record keeps their quantiles."""
    report("grad_norm", [_number("firstdiv.grad_norm()", value)])  # NaN or infinite: what a broken step shows


def log_config(config: Any) -> None:
    """Report the hyper-parameters as the script saw them, e.g. ``firstdiv.log_config(vars(args))``: kept in the
    record's ``extra["reported_config"]`` (the sweep's config and identity stay the ``--set`` values)."""
    report("config", {str(k): _json_or_text(v) for k, v in dict(config).items()})


def _json_or_text(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):  # e.g. a Path or a dtype: its text
        return str(value)


def _number(what: str, value: Any) -> float:
    item = getattr(value, "item", None)
    value = item() if callable(item) else value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number but got {type(value).__name__}; pass a float")
    return float(value)


def _count(name: str, value: Any) -> float:
    value = _number(f"firstdiv.throughput: {name}", value)
    if not value >= 0:
        raise ValueError(f"firstdiv.throughput: {name} must be a number >= 0 but got {value!r}")
    return value


def _write(row: dict[str, Any]) -> None:
    path, fd = os.environ.get(REPORT_FILE), os.environ.get(REPORT_FD)
    data = (json.dumps(row, allow_nan=True) + "\n").encode()
    if fd:
        os.write(int(fd), data)
    else:
        with open(path, "ab") as fh:  # one append per line: lines of several processes never interleave
            fh.write(data)
