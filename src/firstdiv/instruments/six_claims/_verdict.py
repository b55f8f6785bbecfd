"""How a claim becomes a check: its verdict, a SKIPPED claim without evidence, and a note (a PASS whose message
starts with ``"note: "``: something not verified on an otherwise healthy program)."""

from __future__ import annotations

from typing import Any

from ...report import Status
from .._core.checks import Check
from .._core.checks import check as _check

NOTE = "note: "


def claim(name: str, status: Status, kind: str, message: str, evidence: dict[str, Any] | None = None,
          expected: str = "", hint: str = "") -> Check:
    """One claim's verdict; ``kind`` names the failure, and a failing claim's message is what was observed."""
    return _check(name, kind, status, message, evidence, expected=expected, observed=message, hint=hint)


def skip(name: str, check: str, reason: str, **evidence: Any) -> Check:
    return claim(name, Status.SKIPPED, check, f"no evidence: {reason}", evidence)


def note(name: str, check: str, message: str, evidence: dict[str, Any] | None = None) -> Check:
    return claim(name, Status.PASS, check, NOTE + message, evidence)


def frozen_tie(name: str, frozen: list[dict[str, Any]], summary: dict[str, Any]) -> Check:
    """COMPUTATION for layers whose identical (or zero) rows have requires_grad=False: their units stay tied for good,
    but a frozen layer may compute a fixed map on purpose (an averaging or summing layer), so the premise that its
    units are meant to differ is not confirmed: a WARN of the kind it would FAIL with."""
    ev = {**frozen[0], **summary, "frozen": True}
    kind = "claim.computation.zero_init" if ev["zero"] else "claim.computation.symmetric_init"
    what = "all-zero weights" if ev["zero"] else f"{ev['units']} identical weight rows"
    return claim(name, Status.WARN, kind,
                 f"{ev['module']}: {what} and requires_grad=False, so its {ev['units']} units compute the same function "
                 f"for good ({len(frozen)} such layers); not confirmed that they are meant to differ: a frozen layer may be "
                 "a fixed map on purpose; if not, load or initialize its weights before freezing it", ev)
