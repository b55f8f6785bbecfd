"""`firstdiv incident new|list|show|close`: the failure notebook (:mod:`firstdiv.diagnosis.incident`) on the
command line."""

from __future__ import annotations

from typing import Any

import click

from ..diagnosis.incident import _store_path, incident_close, incident_list, incident_new, incident_show
from ._common import EXIT_OK, QUIET, console, emit, json_option, level, store_option


@click.group("incident")
def incident_command() -> None:
    """The failure notebook: one PYTORCH INCIDENT worksheet per failure, kept in the run store.

    A cause stays a hypothesis until `close` records it as confirmed with the repair, its verification
    and the regression test. Secrets (tokens, keys, passwords, environment dumps) are scrubbed before storing.
    """


@incident_command.command("new")
@click.option("--symptom", default=None, help="What exactly was observed (required unless --from has one).")
@click.option("--title", default=None, help="Short title (default: the symptom's first line).")
@click.option("--expected", default=None, help="What value, shape, behavior or metric was expected.")
@click.option("--reproduction", default=None, help="The smallest input / batch / configuration that reproduces it.")
@click.option("--first-contract", "first_contract", default=None, help="The contract to check first (tensor, graph, ...).")
@click.option("--observations", default=None, help="What the instrument actually reported.")
@click.option("--first-divergence", "first_divergence", default=None, help="Where observation first disagrees.")
@click.option("--hypotheses", default=None, help="The smallest two or three mechanisms consistent with the evidence.")
@click.option("--experiment", "--distinguishing-experiment", "distinguishing_experiment", default=None,
              help="The one experiment whose outcomes force the hypotheses apart.")
@click.option("--intervention", default=None, help="The one mechanism to change.")
@click.option("--must-change", "must_change", default=None, help="The measurement that should change if the diagnosis is right.")
@click.option("--must-not-change", "must_not_change", default=None, help="The correctness property that must stay unchanged.")
@click.option("--cause", default=None, help="The suspected cause (a hypothesis unless --confirmed).")
@click.option("--confirmed", is_flag=True, help="Record --cause as confirmed rather than as a hypothesis.")
@click.option("--notes", default=None, help="Anything else worth keeping (exact error messages are scrubbed of secrets).")
@click.option("--from", "from_", type=click.Path(dir_okay=False), default=None, metavar="WORKSHEET.json",
              help="Pre-fill from a diagnose worksheet (or any report) saved with --json; it is attached.")
@click.option("--attach", multiple=True, type=click.Path(dir_okay=False), metavar="REPORT.json",
              help="Attach a report or other JSON evidence (repeatable).")
@store_option
@json_option
def _new(from_: str | None, attach: tuple[str, ...], confirmed: bool, store: str | None, as_json: bool, **fields_: Any) -> int:
    """Record a new incident (open, cause a hypothesis) and print its worksheet."""
    inc = incident_new(store, worksheet=from_, attach=attach, confirmed=confirmed, **fields_)
    _print(inc, as_json, f"recorded {inc.id} in {_store_path(store)}")
    return EXIT_OK


@incident_command.command("list")
@click.option("--status", type=click.Choice(["open", "closed", "all"]), default="all", show_default=True)
@store_option
@json_option
def _list(status: str, store: str | None, as_json: bool) -> int:
    """List incidents, oldest first."""
    incidents, path = incident_list(store, status), _store_path(store)
    if as_json:
        emit(None, True, {"store": str(path), "status": status, "incidents": [i.to_dict() for i in incidents]})
    else:
        from ..render.worksheet import incident_table

        console().print(incident_table(incidents, path) if incidents else f"no {'' if status == 'all' else status + ' '}incidents in {path}")
    return EXIT_OK


@incident_command.command("show")
@click.argument("ref")
@store_option
@json_option
def _show(ref: str, store: str | None, as_json: bool) -> int:
    """Print the worksheet of incident REF (an id or a unique prefix of one)."""
    _print(incident_show(ref, store), as_json)
    return EXIT_OK


@incident_command.command("close")
@click.argument("ref")
@click.option("--cause", default=None, help="The confirmed cause: the mechanism that produced the symptom.")
@click.option("--repair", default=None, help="The change made.")
@click.option("--verification", default=None, help="How the failure was shown gone for the predicted reason.")
@click.option("--regression-test", "regression_test", default=None, help="The test (id or path) that guards it.")
@click.option("--intervention", default=None, help="The one mechanism changed (replaces the recorded one).")
@click.option("--must-change", "must_change", default=None, help="The measurement the repair changed, as predicted.")
@click.option("--must-not-change", "must_not_change", default=None, help="The correctness property that stayed unchanged.")
@click.option("--attach", multiple=True, type=click.Path(dir_okay=False), metavar="REPORT.json",
              help="Attach the verifying report or other JSON evidence (repeatable).")
@store_option
@json_option
def _close(ref: str, attach: tuple[str, ...], store: str | None, as_json: bool, **given: Any) -> int:
    """Close incident REF with its confirmed cause, repair, verification and regression test (all four required).

    There is no closing on a hypothesis: an incident whose cause is not confirmed stays open.
    """
    _print(incident_close(ref, **given, attach=attach, store=store), as_json)
    return EXIT_OK


def _print(inc: Any, as_json: bool, note: str = "") -> None:
    emit(inc, as_json)
    if note and not as_json and level() > QUIET:  # a note: not under -q
        console().print(note, style="dim")
