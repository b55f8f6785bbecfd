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

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .._book import INCIDENT_WORKSHEET as WORKSHEET
from .._secrets import Scrubber
from ..errors import InvalidArgument, NotFound
from ._evidence import ALIASES, as_dict, as_text, entries, entry, finding_line, report_dict

TEXT_FIELDS = ("title", *(name for name, _, _ in WORKSHEET), "notes")
CLOSE_FIELDS = ("cause", "repair", "verification", "regression_test")
STATUSES = ("open", "closed")
CAUSE_STATUSES = ("hypothesis", "confirmed")

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
        data = as_dict(report)
        source = str(report) if isinstance(report, (str, os.PathLike)) else ""
        rep = report_dict(data) or {}
        details = rep.get("details", data) if rep else data
        if isinstance(details.get("worksheet"), dict):
            details = details["worksheet"]
        found: dict[str, str] = {}
        for key, value in details.items():
            name = str(key).strip().lower().replace(" ", "_").replace("-", "_")
            name = ALIASES.get(name, name)
            if name in TEXT_FIELDS and value not in (None, "", [], {}):
                found[name] = as_text(value)
        for name in ("verification", "regression_test"):  # results only closing records, not diagnose's placeholders
            if found.get(name, "").startswith("[fill in"):
                del found[name]
        div = rep.get("first_divergence")
        if "first_divergence" not in found and isinstance(div, dict):
            found["first_divergence"] = as_text(div)
        if "observations" not in found and rep.get("findings"):
            found["observations"] = as_text([finding_line(f) for f in rep["findings"]])
        if "symptom" not in found and isinstance(div, dict):
            found["symptom"] = f"{rep.get('instrument', 'diagnose')} found {div.get('kind', '?')} at {div.get('where', '?')}"
        return cls(**{"symptom": "", **found, "evidence": (entry(data, source),), **overrides})

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from ..render.worksheet import render_incident

        yield from render_incident(self)

    def __str__(self) -> str:
        from ..render import to_text

        return to_text(self)

    def _repr_html_(self) -> str:
        from ..render.html import to_html

        return to_html(self, fragment=True)


# -- storage -----------------------------------------------------------------------------------------

def _store_path(store: Any) -> Path:
    from ..lab.store import Store, default_path

    if isinstance(store, Store):
        return store.path
    return Path(store) if store is not None else default_path()


class _Opened:
    """A Store for ``store`` (a Store, a path or None = default), closed afterwards unless the caller owns it."""

    def __init__(self, store: Any, *, create: bool) -> None:
        self.store, self.create = store, create

    def __enter__(self) -> Any:
        from ..lab.store import Store

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
    from ..lab.record import now_iso

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
    evidence = entries(attach)
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
    evidence = entries(attach)
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


__all__ = ["Incident", "incident_close", "incident_list", "incident_new", "incident_show"]
