"""The failure notebook (chapter 31, "A debugging notebook that compounds in value"): one PYTORCH
INCIDENT worksheet (the appendix's layout) per failure, kept in the run store.

An incident opens with a symptom and whatever else is known; its cause is a *hypothesis* until it is
closed. Closing is the chapter's "when to stop": it needs the confirmed cause, the repair, its
verification and the regression test that guards it. There is no way to close on a hypothesis
(``confirmed=False`` is refused): an unconfirmed incident stays open, which is what it is.

Secrets are never stored: every text field and every attached JSON goes through
:mod:`firstdiv._secrets` (the rules are in its docstring) right before the one write that stores it.

Python: :func:`incident_new`, :func:`incident_list`, :func:`incident_show`, :func:`incident_close`,
:meth:`Incident.from_worksheet`. Command line: ``firstdiv incident new|list|show|close``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import click

from ._cli_common import EXIT_OK, json_option, store_option
from ._secrets import Scrubber
from .errors import InvalidArgument, NotFound

#: The worksheet in the appendix's order: (field, heading, the question it answers). CAUSE and REPAIR
#: are the notebook's additions: the mechanism (hypothesis or confirmed) and the change actually made.
WORKSHEET: tuple[tuple[str, str, str], ...] = (
    ("symptom", "SYMPTOM", "What exactly was observed?"),
    ("expected", "EXPECTED", "What specific value, shape, behavior or metric was expected?"),
    ("reproduction", "REPRODUCTION", "What is the smallest input / batch / configuration that reproduces it?"),
    ("first_contract", "FIRST CONTRACT", ("Which contract should be checked first? tensor, graph, ownership, input "
                                          "representation, geometry, attention, learning chain, performance, compiler, "
                                          "run comparison")),
    ("observations", "OBSERVATIONS", "What did the instrument actually report?"),
    ("first_divergence", "FIRST DIVERGENCE", "Where does observed behavior first disagree with the expectation?"),
    ("hypotheses", "HYPOTHESES", "What are the smallest two or three mechanisms consistent with that evidence?"),
    ("distinguishing_experiment", "DISTINGUISHING EXPERIMENT",
     "What one experiment makes those hypotheses predict different outcomes?"),
    ("cause", "CAUSE", "Which mechanism produced the symptom?"),
    ("intervention", "INTERVENTION", "Change exactly one mechanism."),
    ("repair", "REPAIR", "What change was made?"),
    ("must_change", "MUST CHANGE", "Which measurement should change if the diagnosis is correct?"),
    ("must_not_change", "MUST NOT CHANGE", "Which correctness property must remain unchanged?"),
    ("verification", "VERIFICATION", "Did the original failure disappear for the predicted reason?"),
    ("regression_test", "REGRESSION TEST", "What small test should remain so this exact failure cannot silently return?"),
)
TEXT_FIELDS = ("title", *(name for name, _, _ in WORKSHEET), "notes")
CLOSE_FIELDS = ("cause", "repair", "verification", "regression_test")
STATUSES = ("open", "closed")
CAUSE_STATUSES = ("hypothesis", "confirmed")
_ALIASES = {"experiment": "distinguishing_experiment", "contract": "first_contract", "divergence": "first_divergence",
            "hypothesis": "hypotheses", "observed": "observations"}


@dataclass(frozen=True, kw_only=True)
class Incident:
    """One failure worksheet. ``cause_status`` is 'hypothesis' until the cause is confirmed (at close).

    ``evidence`` holds attached JSON (a diagnose worksheet, any Report): dicts with ``kind``
    ('worksheet', 'report' or 'json'), ``source`` (the file it came from), ``instrument``, ``status``,
    ``summary`` and ``data``. ``redacted`` / ``env_dropped`` count what scrubbing removed before storing.
    """

    id: str = ""
    title: str = ""
    status: str = "open"
    cause_status: str = "hypothesis"
    created: str = ""
    updated: str = ""
    symptom: str = ""
    expected: str = ""
    reproduction: str = ""
    first_contract: str = ""
    observations: str = ""
    first_divergence: str = ""
    hypotheses: str = ""
    distinguishing_experiment: str = ""
    cause: str = ""
    intervention: str = ""
    repair: str = ""
    must_change: str = ""
    must_not_change: str = ""
    verification: str = ""
    regression_test: str = ""
    notes: str = ""
    evidence: tuple[dict[str, Any], ...] = ()
    redacted: int = 0
    env_dropped: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # keys written by a newer firstdiv, kept as they were

    def __post_init__(self) -> None:
        for name in TEXT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidArgument(f"Expected incident field `{name}` to be text but got {type(value).__name__}")
        if not self.symptom.strip():
            raise InvalidArgument("An incident needs a symptom (what exactly was observed); pass --symptom TEXT")
        if self.status not in STATUSES:
            raise InvalidArgument(f"Expected incident status open or closed but got {self.status!r}")
        if self.cause_status not in CAUSE_STATUSES:
            raise InvalidArgument(f"Expected cause_status hypothesis or confirmed but got {self.cause_status!r}")
        if self.cause_status == "confirmed" and not self.cause.strip():
            raise InvalidArgument("A confirmed cause needs the cause itself; pass --cause TEXT")
        missing = [n for n in CLOSE_FIELDS if not getattr(self, n).strip()]
        if self.status == "closed" and (missing or self.cause_status != "confirmed"):
            raise InvalidArgument(f"A closed incident needs a confirmed cause, repair, verification and regression test "
                                  f"(missing: {', '.join(missing) or 'confirmation'})")
        object.__setattr__(self, "evidence", tuple(dict(e) for e in self.evidence))

    @property
    def confirmed(self) -> bool:
        return self.cause_status == "confirmed"

    @property
    def missing_to_close(self) -> list[str]:
        """Worksheet fields still empty that closing requires."""
        return [n for n in CLOSE_FIELDS if not getattr(self, n).strip()]

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["evidence"] = [dict(e) for e in self.evidence]
        return {"type": "Incident", **self.extra, **out, "confirmed": self.confirmed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in data.items() if k not in known and k not in ("type", "confirmed")}
        return cls(**{k: v for k, v in data.items() if k in known}, extra={**data.get("extra", {}), **extra})

    @classmethod
    def from_worksheet(cls, report: Any, **overrides: Any) -> Incident:
        """An (unsaved) open incident pre-filled from a diagnose worksheet: a Report, its ``to_dict()``, or a
        plain dict of worksheet fields. Missing keys stay empty; the worksheet is attached as evidence."""
        data = _as_dict(report)
        source = str(report) if isinstance(report, (str, os.PathLike)) else ""
        rep = _report_dict(data) or {}
        details = rep.get("details", data) if rep else data
        if isinstance(details.get("worksheet"), dict):
            details = details["worksheet"]
        found: dict[str, str] = {}
        for key, value in details.items():
            name = str(key).strip().lower().replace(" ", "_").replace("-", "_")
            name = _ALIASES.get(name, name)
            if name in TEXT_FIELDS and value not in (None, "", [], {}):
                found[name] = _as_text(value)
        for name in ("verification", "regression_test"):  # results only closing records, not diagnose's placeholders
            if found.get(name, "").startswith("[fill in"):
                del found[name]
        div = rep.get("first_divergence")
        if "first_divergence" not in found and isinstance(div, dict):
            found["first_divergence"] = _as_text(div)
        if "observations" not in found and rep.get("findings"):
            found["observations"] = _as_text([_finding_line(f) for f in rep["findings"]])
        if "symptom" not in found and isinstance(div, dict):
            found["symptom"] = f"{rep.get('instrument', 'diagnose')} found {div.get('kind', '?')} at {div.get('where', '?')}"
        return cls(**{"symptom": "", **found, "evidence": (_entry(data, source),), **overrides})

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        yield from _render(self)

    def __str__(self) -> str:
        from ._render import to_text

        return to_text(self)

    def _repr_html_(self) -> str:
        from .html import to_html

        return to_html(self, fragment=True)


# -- evidence ----------------------------------------------------------------------------------------

def _as_dict(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        obj = obj.to_dict()
    if isinstance(obj, (str, os.PathLike)):
        obj = _load_json(Path(obj))
    if not isinstance(obj, dict):
        raise InvalidArgument(f"Expected a Report, a dict or a JSON file path as evidence but got {type(obj).__name__}")
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"Expected JSON-safe evidence (plain numbers, strings, lists, dicts) but {exc}") from None


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgument(f"Cannot read {path}: {exc.strerror}; pass a JSON file saved with --json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidArgument(f"{path} is not valid JSON{where}; pass a worksheet or report saved with --json") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"Expected {path} to hold a JSON object (a Report or worksheet) but got {type(data).__name__}")
    return data


def _report_dict(data: dict[str, Any]) -> dict[str, Any] | None:
    """The Report inside ``data`` (itself, or under 'report' as in `compare --json`), else None."""
    for cand in (data, data.get("report")):
        if isinstance(cand, dict) and "instrument" in cand and "status" in cand:
            return cand
    return None


def _evidence(attach: Any) -> list[dict[str, Any]]:
    """Evidence entries for ``attach``: one Report, dict or JSON path, or an iterable of them."""
    items = list(attach) if isinstance(attach, (list, tuple)) else [attach]
    return [_entry(_as_dict(a), str(a) if isinstance(a, (str, os.PathLike)) else "") for a in items]


def _entry(data: dict[str, Any], source: str) -> dict[str, Any]:
    rep = _report_dict(data)
    if rep is None:
        return {"kind": "json", "source": source, "instrument": "", "status": "", "summary": "", "data": data}
    worksheet = rep.get("type") == "Worksheet" or rep.get("instrument") == "diagnose"
    div = rep.get("first_divergence")
    summary = f"first divergence at {div.get('where', '?')} [{div.get('kind', '?')}]" if isinstance(div, dict) else \
        (rep.get("reason") or "no divergence")
    return {"kind": "worksheet" if worksheet else "report", "source": source, "instrument": str(rep["instrument"]),
            "status": str(rep["status"]), "summary": str(summary), "data": data}


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(f"- {_inline(v)}" for v in value)
    if isinstance(value, dict):
        if "where" in value and "kind" in value:
            where, inst = str(value["where"]), value.get("instrument")
            where = f"{inst}:{where}" if inst and not where.startswith(f"{inst}:") else where
            text = f"{where}: {value['kind']} (expected {_inline(value.get('expected'))}, " \
                   f"observed {_inline(value.get('observed'))})"
            return text + (f"; {value['hint']}" if value.get("hint") else "")
        return "\n".join(f"{k}: {_inline(v)}" for k, v in value.items())
    return str(value)


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        if "check" in value:
            return _finding_line(value)
        if "instrument" in value and "summary" in value:  # one of diagnose's observations
            return f"{value['instrument']} {value.get('status', '')}: {value['summary']}"
        return ", ".join(f"{k}={_inline(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return str(value)


def _finding_line(f: Any) -> str:
    if not isinstance(f, dict):
        return str(f)
    return f"{f.get('where', '')} {f.get('check', '')} {f.get('status', '')}: {f.get('message', '')}".strip()


# -- storage -----------------------------------------------------------------------------------------

def _store_path(store: Any) -> Path:
    from .lab.store import Store, default_path

    if isinstance(store, Store):
        return store.path
    return Path(store) if store is not None else default_path()


class _Opened:
    """A Store for ``store`` (a Store, a path or None = default), closed afterwards unless the caller owns it."""

    def __init__(self, store: Any, *, create: bool) -> None:
        self.store, self.create = store, create

    def __enter__(self) -> Any:
        from .lab.store import Store

        if isinstance(self.store, Store):
            self.st = self.store
            return self.st
        self.st = Store(_store_path(self.store), create=self.create)
        return self.st

    def __exit__(self, *_: object) -> None:
        if self.st is not self.store:
            self.st.close()


def _prepare(inc: Incident) -> Incident:
    """The choke point before every write: scrub each text field and attached JSON; title from the symptom."""
    scrub = Scrubber()
    clean = {name: scrub.text(getattr(inc, name)) for name in TEXT_FIELDS}
    evidence = tuple(scrub.json(e) for e in inc.evidence)
    extra = scrub.json(inc.extra)
    if not clean["title"].strip():
        first = clean["symptom"].strip().splitlines()[0]
        clean["title"] = first if len(first) <= 80 else first[:79] + "…"
    return replace(inc, **clean, evidence=evidence, extra=extra, redacted=inc.redacted + scrub.redacted,
                   env_dropped=inc.env_dropped + scrub.dropped)


def _now() -> str:
    from .lab.record import now_iso

    return now_iso()


def _resolve(st: Any, ref: str) -> Incident:
    key = str(ref).strip().lower()
    if not key:
        raise InvalidArgument("Expected an incident id or unique prefix (e.g. inc-3f9a) but got an empty string")
    if not key.startswith("inc-") and not "inc-".startswith(key):
        key = "inc-" + key
    rows = st.incidents(id_prefix=key)
    exact = [r for r in rows if r["id"] == key]
    if exact or len(rows) == 1:
        return Incident.from_dict((exact or rows)[0])
    if rows:
        ids = ", ".join(r["id"] for r in rows[:5]) + (" ..." if len(rows) > 5 else "")
        raise NotFound(f"Incident id prefix {ref!r} is ambiguous ({len(rows)} incidents: {ids}); give more characters")
    known = [r["id"] for r in st.incidents()]
    listed = ", ".join(known[-5:]) if known else "none yet"
    raise NotFound(f"No incident {ref!r} in {st.path} (recent: {listed}); see `firstdiv incident list`")


# -- the Python API ------------------------------------------------------------------------------------

def incident_new(store: Any = None, *, worksheet: Any = None, attach: Any = (), confirmed: bool = False,
                 **fields_: Any) -> Incident:
    """Record a new open incident and return it as stored (scrubbed).

    ``fields_``: ``symptom`` (required unless the worksheet has one), ``title`` (default: the symptom's
    first line) and any worksheet field (``expected``, ``reproduction``, ... ``regression_test``,
    ``cause``, ``notes``). ``worksheet``: a diagnose worksheet (Report, dict or JSON path) that
    pre-fills the fields and is attached; ``attach``: more evidence (Reports, dicts or JSON paths).
    ``confirmed=True`` records ``cause`` as confirmed rather than as a hypothesis.
    """
    unknown = sorted(set(fields_) - set(TEXT_FIELDS))
    if unknown:
        raise InvalidArgument(f"Unknown incident field(s) {', '.join(unknown)}; expected some of {', '.join(TEXT_FIELDS)}")
    given = {k: v for k, v in fields_.items() if v is not None}
    evidence = _evidence(attach)
    if worksheet is not None:
        base = Incident.from_worksheet(worksheet, **given)
        evidence = [*base.evidence, *evidence]
        given = {n: getattr(base, n) for n in TEXT_FIELDS}
    if confirmed and not str(given.get("cause", "")).strip():
        raise InvalidArgument("--confirmed needs the cause it confirms; pass --cause TEXT")
    now = _now()
    inc = _prepare(Incident(**{"symptom": "", **given}, cause_status="confirmed" if confirmed else "hypothesis",
                            created=now, updated=now, evidence=tuple(evidence)))
    with _Opened(store, create=True) as st:
        while True:  # a fresh random id; retried on the (astronomically rare) collision
            inc = replace(inc, id=f"inc-{uuid.uuid4().hex[:8]}")
            if st.add_incident(inc.to_dict()):
                return inc


def incident_list(store: Any = None, status: str | None = None) -> list[Incident]:
    """Incidents oldest first; ``status`` 'open', 'closed' or None/'all'. No store yet: an empty list."""
    if status not in (None, "all", *STATUSES):
        raise InvalidArgument(f"Expected status open, closed or all but got {status!r}")
    if not isinstance(store, (str, os.PathLike, type(None))) or _store_path(store).exists():
        with _Opened(store, create=False) as st:
            return [Incident.from_dict(r) for r in st.incidents(None if status == "all" else status)]
    return []


def incident_show(ref: str, store: Any = None) -> Incident:
    """The incident whose id is ``ref`` or starts with it (with or without the ``inc-`` prefix)."""
    with _OpenExisting(store, ref) as st:
        return _resolve(st, ref)


def incident_close(ref: str, *, cause: str | None = None, repair: str | None = None, verification: str | None = None,
                   regression_test: str | None = None, confirmed: bool = True, attach: Any = (),
                   store: Any = None, **worksheet: str | None) -> Incident:
    """Close an open incident with its confirmed cause, the repair, its verification and the regression
    test (a test id or path) that guards it. All four are required; ``confirmed=False`` is refused —
    an incident whose cause is still a hypothesis stays open (chapter 31: a confirmed cause is not a
    plausible hypothesis). ``worksheet`` may also complete ``intervention``, ``must_change`` and
    ``must_not_change``; ``attach`` adds evidence (the verifying report)."""
    unknown = sorted(set(worksheet) - {"intervention", "must_change", "must_not_change"})
    if unknown:
        raise InvalidArgument(f"Unknown close field(s) {', '.join(unknown)}; expected intervention, must_change or must_not_change")
    given = {"cause": cause, "repair": repair, "verification": verification, "regression_test": regression_test}
    missing = [k for k, v in given.items() if not (isinstance(v, str) and v.strip())]
    if missing:
        flags = ", ".join("--" + k.replace("_", "-") for k in missing)
        raise InvalidArgument(f"Closing an incident needs a confirmed cause, the repair, its verification and a "
                              f"regression test; missing {flags}")
    if not confirmed:
        raise InvalidArgument("Closing needs a confirmed cause; while the cause is a hypothesis the incident stays open: "
                              "run the distinguishing experiment, then close with the cause it confirmed")
    evidence = _evidence(attach)
    with _OpenExisting(store, ref) as st:
        current = _resolve(st, ref)
        if current.status == "closed":
            raise InvalidArgument(f"Incident {current.id} is already closed (on {current.updated[:16]}); "
                                  "open a new incident if the failure returned")
        more = {k: v for k, v in worksheet.items() if v is not None}
        closed = _prepare(replace(current, **given, **more, cause_status="confirmed", status="closed", updated=_now(),
                                  evidence=(*current.evidence, *evidence)))
        if not st.replace_incident(closed.to_dict(), was="open"):
            raise InvalidArgument(f"Incident {current.id} was closed by another process meanwhile; see `firstdiv incident show`")
        return closed


class _OpenExisting(_Opened):
    """Reading or updating incidents never creates a store; a missing one is a NotFound naming the ref."""

    def __init__(self, store: Any, ref: str) -> None:
        super().__init__(store, create=False)
        if isinstance(store, (str, os.PathLike, type(None))) and not _store_path(store).exists():
            raise NotFound(f"No incident {ref!r}: there is no store at {_store_path(store)} yet; record one with "
                           "`firstdiv incident new --symptom TEXT` or pass --store PATH")

# -- presentation --------------------------------------------------------------------------------------

_CAUSE = {"confirmed": ("CAUSE — CONFIRMED", "bold green"), "hypothesis": ("CAUSE — HYPOTHESIS (not confirmed)", "bold yellow")}
_VAGUE = "If you cannot fill in MUST CHANGE and MUST NOT CHANGE, the proposed repair is probably still too vague."


def _render(inc: Incident) -> Iterator[Any]:
    """The worksheet in the appendix's layout: headings in capitals, answers indented, empty ones as the question."""
    from ._rich import Padding, Text

    closed = inc.status == "closed"
    yield Text.assemble(("PYTORCH INCIDENT  ", "bold"), (inc.id or "(not stored)", "bold cyan"), "  ",
                        ("CLOSED" if closed else "OPEN", "green" if closed else "bold yellow"), "  ", Text(inc.title))
    if inc.created:
        yield Text(f"created {inc.created[:19].replace('T', ' ')} · updated {inc.updated[:19].replace('T', ' ')}", style="dim")
    for name, heading, question in WORKSHEET:
        value = getattr(inc, name).strip()
        style = "bold"
        if name == "cause" and value:
            heading, style = _CAUSE[inc.cause_status]
        yield Text("")
        yield Text(heading, style=style)
        yield Padding(Text(value) if value else Text(f"— {question}", style="dim italic"), (0, 0, 0, 4), expand=False)
    if inc.notes.strip():
        yield Text("")
        yield Text("NOTES", style="bold")
        yield Padding(Text(inc.notes.strip()), (0, 0, 0, 4), expand=False)
    if inc.evidence:
        yield Text("")
        yield Text("EVIDENCE", style="bold")
        for i, e in enumerate(inc.evidence, 1):
            head = " ".join(x for x in (e.get("kind", "json"), e.get("instrument", ""), e.get("status", "")) if x)
            tail = "".join(x for x in (f"  {e.get('summary')}" if e.get("summary") else "",
                                       f"  (from {e['source']})" if e.get("source") else ""))
            yield Padding(Text(f"{i}. {head}{tail}"), (0, 0, 0, 4), expand=False)
    yield from _footer(inc)


def _footer(inc: Incident) -> Iterator[Any]:
    from ._rich import Text

    yield Text("")
    if (inc.intervention.strip() or inc.repair.strip()) and not (inc.must_change.strip() and inc.must_not_change.strip()):
        yield Text(_VAGUE, style="yellow")
    if inc.redacted or inc.env_dropped:
        yield Text(f"scrubbed before storing: {inc.redacted} secret(s) redacted, "
                   f"{inc.env_dropped} environment variable(s) dropped", style="dim")
    if inc.status == "open":
        missing = ", ".join(inc.missing_to_close) or "nothing (confirm the cause)"
        yield Text(f"open: closing needs a confirmed cause, repair, verification and regression test (missing: {missing}); "
                   f"firstdiv incident close {inc.id or 'ID'} --cause ... --repair ... --verification ... "
                   "--regression-test ...", style="dim")


def _table(incidents: list[Incident], path: Path) -> Any:
    from ._rich import Table, Text

    table = Table(box=None, header_style="bold", pad_edge=False, title=f"incidents in {path}", title_justify="left")
    for col in ("id", "status", "cause", "created", "title"):
        table.add_column(col, no_wrap=col != "title", overflow="fold")
    for inc in incidents:
        cause = (inc.cause_status if inc.cause.strip() else "-", _CAUSE[inc.cause_status][1] if inc.cause.strip() else "dim")
        table.add_row(inc.id, Text(inc.status, style="green" if inc.status == "closed" else "yellow"), Text(*cause),
                      inc.created[:16].replace("T", " "), Text(inc.title))
    return table


# -- command line ----------------------------------------------------------------------------------------

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
        click.echo(json.dumps({"store": str(path), "status": status, "incidents": [i.to_dict() for i in incidents]},
                              indent=2, default=str))
    else:
        from ._cli_common import console

        console().print(_table(incidents, path) if incidents else f"no {'' if status == 'all' else status + ' '}incidents in {path}")
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


def _print(inc: Incident, as_json: bool, note: str = "") -> None:
    from ._cli_common import console, emit

    emit(inc, as_json)
    if note and not as_json:
        console().print(note, style="dim")


__all__ = ["Incident", "incident_close", "incident_command", "incident_list", "incident_new", "incident_show"]
