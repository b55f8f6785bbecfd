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
