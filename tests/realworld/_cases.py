"""The corpus for the instruments outside the learning chain (shapes, data, attention, speed, deployment):
real library models (transformers from config) and layers in the shapes real code takes, torch ``Dataset``
pipelines returning tuples and dicts, DataLoaders with workers, export paths.

Each module in ``cases/`` (files starting with ``_`` are helpers) defines ``CASES: list[Case]``. A case
builds its program from a seed with plain torch/transformers code, as a user wrote it, and calls one
instrument on it as that user would. A correct case must get no FAIL at every seed of ``seeds`` (a WARN only
with the ``warn`` reason a user would agree with) and leave no trace on the objects it hands over; a bug
case (``bug=True``) must get ``status`` from its instrument with a first divergence whose ``where`` contains
every string of ``where`` (the user's names: a module path, a stage, a layer) and whose ``kind`` contains
``kind``. Written here: never taken from the pytorch/examples repository or a published silent-bug suite.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from _api import load_dir

CASES_DIR = pathlib.Path(__file__).resolve().parent / "cases"


@dataclasses.dataclass(frozen=True)
class Case:
    """``build(seed)`` returns the program (any object; its ``model``, ``optimizer``, ``batch``, ``inputs``,
    ``sample`` attributes are what the no-trace check watches); ``call(program)`` runs the instrument on it and
    returns the Report."""

    name: str
    instrument: str
    build: Callable[[int], Any]
    call: Callable[[Any], Any]
    bug: bool = False
    where: tuple[str, ...] = ()
    kind: str = ""
    status: str = "FAIL"
    warn: str = ""
    seeds: tuple[int, ...] = (0, 1, 2)
    timing: bool = False  # its verdict rests on wall-clock measurements (the stability gate repeats it)


def load_cases() -> dict[str, list[Case]]:
    """Every ``cases/*.py`` module's ``CASES``, by file stem, imported by path."""
    if str(CASES_DIR) not in sys.path:
        sys.path.insert(0, str(CASES_DIR))  # the cases' own helpers (cases/_*.py)
    return {stem: module.CASES for stem, module in load_dir(CASES_DIR, "realworld_cases").items()}


@dataclasses.dataclass
class Outcome:
    status: str
    where: str | None
    kind: str | None
    summary: str


def outcome(report: Any) -> Outcome:
    div = report.first_divergence
    if div is not None:
        return Outcome(report.status.value, div.where, div.kind, f"{div.where} {div.kind}: {str(div.observed)[:200]}")
    bad = [f for f in report.findings if f.status.name in ("WARN", "SKIPPED", "FAIL")]
    text = report.reason[:200] if report.reason else "; ".join(f"{f.where}: {f.message[:160]}" for f in bad[:3])
    return Outcome(report.status.value, None, None, text)


def localized(case: Case, out: Outcome) -> bool:
    """The bug's status, and (for a FAIL) a first divergence naming every string of ``where`` and ``kind``."""
    if out.status != case.status:
        return False
    if case.status != "FAIL":
        return True
    return all(w in (out.where or "") for w in case.where) and case.kind in (out.kind or "")
