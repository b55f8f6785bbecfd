"""`firstdiv diagnose` (the escalation ladder on a case file) and `firstdiv route` (symptom -> instrument)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from .._format import describe_error
from ..errors import InvalidArgument
from ..lab._targets import Kind, load_callable
from ._common import EXIT_FOUND, EXIT_OK, emit, json_option

# ---- diagnose ---------------------------------------------------------------------------------------------------------


#: how a case target's errors are worded (the loader is :func:`firstdiv.lab._targets.load_callable`): a case file is
#: executed afresh on every load and named as given
_CASE_USAGE = "Expected CASE like path/to/case.py:make_evidence but got {target!r}"
_CASE_IMPORT = "Cannot import module {where!r} ({error}); use path/to/case.py:{name}"
CASE = Kind(InvalidArgument, _CASE_USAGE, bad_name=_CASE_USAGE,
            missing_file="Case file {where!r} does not exist (relative to {cwd})",
            no_function="{where} has no function {name!r}; define {name}() returning a dict of evidence "
                        "(model=..., batch=..., loss_fn=..., optimizer=...)",
            import_failed=_CASE_IMPORT, module_raised=_CASE_IMPORT, module_prefix="_firstdiv_case_", reuse=False)


def _load_case(target: str) -> Callable[[], Any]:
    fn, _ = load_callable(target, CASE)
    return fn


@contextmanager
def _case_folder_importable(target: str) -> Iterator[None]:
    """A ``case.py:fn`` target's folder first on sys.path while the case is imported and its function runs (then
    taken off again), as the sweep loader does for a workload file: ``import helpers`` beside case.py works from any
    working directory, at the top of the file or inside the function."""
    where = target.rpartition(":")[0] if isinstance(target, str) else ""
    folder = str(Path(where).resolve().parent) if where.endswith(".py") and Path(where).is_file() else None
    if folder is not None:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder is not None and folder in sys.path:
            sys.path.remove(folder)


def _case_evidence(target: str) -> dict[str, Any]:
    with _case_folder_importable(target):
        fn = _load_case(target)
        try:
            evidence = fn()
        except Exception as exc:  # noqa: BLE001 - the user's function: any failure is an input error
            raise InvalidArgument(f"{target}() raised {describe_error(exc, None)}") from None
    if not isinstance(evidence, dict) or not all(isinstance(k, str) for k in evidence):
        raise InvalidArgument(f"Expected {target}() to return a dict of evidence (model=..., batch=...) but got "
                              f"{type(evidence).__name__}")
    if not evidence:
        raise InvalidArgument(f"{target}() returned an empty dict; return the evidence at hand (model=..., batch=..., ...)")
    return dict(evidence)


@click.command("diagnose")
@click.argument("case")
@click.option("--symptom", default=None, help="What exactly was observed (overrides the case's 'symptom').")
@click.option("--expected", default=None, help="What was expected instead (overrides the case's 'expected').")
@click.option("--all", "run_all", is_flag=True, help="Run every applicable instrument; still report the first divergence.")
@json_option
def diagnose_command(case: str, symptom: str | None, expected: str | None, run_all: bool, as_json: bool) -> int:
    """Run the escalation ladder on the evidence CASE returns (path/to/case.py:make_evidence: a function returning
    a dict of model, batch, loss_fn, optimizer, ..., optionally 'symptom' and 'expected') and print the incident
    worksheet. Exit 1 when a divergence was found, 0 when none, 2 on a bad CASE."""
    from ..diagnosis import diagnose
    from ..report import Status

    evidence = _case_evidence(case)
    symptom = symptom if symptom is not None else evidence.pop("symptom", None)
    expected = expected if expected is not None else evidence.pop("expected", None)
    evidence.pop("symptom", None)
    evidence.pop("expected", None)
    worksheet = diagnose(symptom=symptom, expected=expected, stop_at_first=not run_all, **evidence)
    emit(worksheet, as_json)
    return EXIT_FOUND if worksheet.status is Status.FAIL else EXIT_OK


# ---- route ------------------------------------------------------------------------------------------------------------


def _reverse_table(view: dict[str, list[str]]) -> Any:
    from .._rich import Table, Text
    from ..diagnosis._routing_table import ROUTES
    by_symptom = {spec.symptom: spec for spec in ROUTES}
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("instrument", "symptom it owns", "route", "contract", "role"):
        table.add_column(col, no_wrap=col in ("instrument", "route"))
    for name, symptoms in view.items():
        for i, symptom in enumerate(symptoms):
            spec = by_symptom[symptom]
            role = "first" if spec.instruments[0] == name else "follow-up"
            table.add_row(Text(name if i == 0 else "", style="bold"), Text(symptom), spec.id, spec.contract, role)
    return table


def _resolve_instrument(name: str) -> str:
    from ..diagnosis._routing_table import INSTRUMENTS
    lowered = {n.lower(): n for n in INSTRUMENTS}
    found = lowered.get(name.strip().lower().replace("-", "_"))
    if found is None:
        raise click.UsageError(f"Unknown instrument {name!r}; expected one of: {', '.join(INSTRUMENTS)}")
    return found


@click.command("route")
@click.argument("text", nargs=-1, metavar="[SYMPTOM]")
@click.option("--all", "show_all", is_flag=True, help="Show every matching route, not only the best 3.")
@click.option("--instrument", default=None, metavar="NAME", help="Print the symptoms instrument NAME owns (no SYMPTOM).")
@click.option("--list", "list_all", is_flag=True, help="Print every instrument and the symptoms it owns (no SYMPTOM).")
@json_option
def route_command(text: tuple[str, ...], show_all: bool, instrument: str | None, list_all: bool, as_json: bool) -> int:
    """Route SYMPTOM (free text, e.g. "loss is flat") to the contract to check first, the instrument to run, the
    evidence to capture, the distinguishing experiment and when to stop. Exit 0 also when nothing matches."""
    from ..diagnosis.route import route, routes

    symptom = " ".join(text).strip()
    if list_all or instrument is not None:
        if symptom:
            raise click.UsageError("Give either SYMPTOM or --list/--instrument, not both")
        if list_all and instrument is not None:
            raise click.UsageError("Give --list or --instrument NAME, not both")
        view = routes()
        if instrument is not None:
            name = _resolve_instrument(instrument)
            view = {name: view[name]}
        emit(_reverse_table(view), as_json, {"instruments": view} if list_all else {"instrument": name, "symptoms": view[name]})
        return EXIT_OK
    if not symptom:
        raise click.UsageError('Expected a SYMPTOM, e.g. firstdiv route "loss is flat", or --list / --instrument NAME')
    emit(route(symptom, top=None if show_all else 3), as_json)
    return EXIT_OK
