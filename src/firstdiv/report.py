"""The one report shape every instrument returns (DESIGN.md, "The report model").

Reports are frozen dataclasses of plain Python values: no tensors, JSON-safe through ``to_dict``.
Presentation lives in :mod:`firstdiv.render`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .errors import InvalidArgument


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIPPED = "SKIPPED"


def _plain(value: Any) -> Any:
    """Convert numbers/containers to JSON-safe plain values; refuse tensors and arrays."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 1) == 0:  # numpy/torch scalar
        return _plain(item())
    raise InvalidArgument(f"Expected plain values (numbers, strings, lists, dicts) in a report but got {type(value).__name__}")


@dataclass(frozen=True)
class Divergence:
    """The first place where observation disagrees with expectation, in the user's own terms."""

    where: str
    kind: str
    expected: Any
    observed: Any
    hint: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected", _plain(self.expected))
        object.__setattr__(self, "observed", _plain(self.observed))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Divergence:
        return cls(**{f.name: data.get(f.name, "") for f in fields(cls)})


@dataclass(frozen=True)
class Finding:
    """One check made, with its evidence as numbers."""

    where: str
    check: str
    status: Status
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "evidence", _plain(dict(self.evidence)))

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "check": self.check, "status": self.status.value,
                "message": self.message, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(data["where"], data["check"], Status(data["status"]), data.get("message", ""),
                   data.get("evidence", {}))


@dataclass(frozen=True)
class Report:
    """What an instrument found. ``ok`` is True when no divergence was found.

    ``details`` holds instrument-specific structured evidence (plain values), for renderers and JSON.
    """

    instrument: str
    status: Status
    first_divergence: Divergence | None = None
    findings: tuple[Finding, ...] = ()
    side_effects: str = "none"
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    _registry: ClassVar[dict[str, type[Report]]] = {}
    #: the HTML page that shows it (firstdiv.render.html picks the page by this name)
    page: ClassVar[str] = "report"

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "findings", tuple(self.findings))
        object.__setattr__(self, "details", _plain(dict(self.details)))
        if self.status is Status.SKIPPED and not self.reason:
            raise InvalidArgument("A SKIPPED report needs a reason saying what is missing and how to provide it")
        if self.status is Status.FAIL and self.first_divergence is None:
            raise InvalidArgument("A FAIL report needs a first_divergence")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Report._registry[cls.__name__] = cls

    def __repr__(self) -> str:
        """One line (a notebook cell's echo, a debugger): ``<Report shape_ledger FAIL at fc: shape.mismatch>``;
        ``print(report)`` shows the whole report, ``to_dict()`` every field."""
        div = self.first_divergence
        where = f" at {div.where}: {div.kind}" if div is not None else (f": {self.reason[:80]}" if self.reason else "")
        return f"<{type(self).__name__} {self.instrument} {self.status.value}{where}, {len(self.findings)} findings>"

    @property
    def ok(self) -> bool:
        return self.first_divergence is None and self.status is not Status.FAIL

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__, "instrument": self.instrument,
                               "ok": self.ok, "status": self.status.value,
                               "first_divergence": self.first_divergence.to_dict() if self.first_divergence else None,
                               "findings": [f.to_dict() for f in self.findings],
                               "side_effects": self.side_effects, "reason": self.reason,
                               "details": self.details}
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        target = Report._registry.get(data.get("type", ""), cls)
        if target is not cls and issubclass(target, cls):
            return target.from_dict(data)
        div = data.get("first_divergence")
        return cls(
            instrument=data["instrument"],
            status=Status(data["status"]),
            first_divergence=Divergence.from_dict(div) if div else None,
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", [])),
            side_effects=data.get("side_effects", "none"),
            reason=data.get("reason", ""),
            details=data.get("details", {}),
        )

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from .render.text import render_report

        yield from render_report(self)

    def __str__(self) -> str:
        from .render import to_text

        return to_text(self)

    def _repr_html_(self) -> str:
        from .render import to_html

        return to_html(self)


def skipped(instrument: str, reason: str, **details: Any) -> Report:
    """'Could not run' is a report with the reason, never silence."""
    return Report(instrument, Status.SKIPPED, reason=reason, details=details)
