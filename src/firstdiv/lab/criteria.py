"""Success criteria declared before a run, in a small grammar that can be graded afterwards.

    val_loss delta within noise        |delta| stays inside the baseline's seed spread
    val_loss delta < 0.01              the delta's confidence interval lies below 0.01 (also <=, >, >=)
    val_acc improves                   a resolved change in the metric's better direction
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument

MET, NOT_MET, UNRESOLVED = "MET", "NOT MET", "UNRESOLVED"
_METRIC = r"(?P<metric>[A-Za-z_][\w.\-/]*)"
_FORMS = (
    ("within_noise", re.compile(rf"^{_METRIC}\s+(?:delta\s+)?(?:is\s+)?within\s+(?:the\s+)?noise(?:\s+floor)?$", re.IGNORECASE)),
    ("bound", re.compile(rf"^{_METRIC}\s+delta\s*(?P<op><=|>=|<|>)\s*(?P<value>[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)$", re.IGNORECASE)),
    ("improves", re.compile(rf"^{_METRIC}\s+improves$", re.IGNORECASE)),
)
FORMS_HELP = "'METRIC delta within noise', 'METRIC delta < X' (or <=, >, >=), or 'METRIC improves'"


@dataclass(frozen=True)
class Criterion:
    form: str
    metric: str
    op: str = ""
    value: float = 0.0
    text: str = ""


def parse_criterion(text: str) -> Criterion:
    for form, pattern in _FORMS:
        m = pattern.match(text.strip())
        if m:
            groups = m.groupdict()
            return Criterion(form, groups["metric"], groups.get("op") or "", float(groups.get("value") or 0.0), text)
    raise InvalidArgument(f"Cannot grade the success criterion {text!r}; write it as {FORMS_HELP}")


def grade(criterion: Criterion, *, ci: tuple[float | None, float | None], noise_floor: float | None,
          resolved: bool, direction: str | None) -> dict[str, Any]:
    """MET / NOT MET / UNRESOLVED from the delta's confidence interval, with the reason."""
    lo, hi = ci
    if criterion.form == "improves":
        if not resolved:
            return {"result": UNRESOLVED, "why": "the difference is not resolved at these seeds"}
        return {"result": MET if direction == "better" else NOT_MET, "why": f"resolved change, {direction}"}
    if lo is None or hi is None:
        return {"result": UNRESOLVED, "why": "no confidence interval (need at least 2 seeds on each side)"}
    if criterion.form == "within_noise":
        if noise_floor is None:
            return {"result": UNRESOLVED, "why": "no baseline noise floor (need at least 2 baseline seeds)"}
        if -noise_floor <= lo and hi <= noise_floor:
            return {"result": MET, "why": f"CI [{lo:+.4g}, {hi:+.4g}] inside +-{noise_floor:.4g}"}
        if lo > noise_floor or hi < -noise_floor:
            return {"result": NOT_MET, "why": f"CI [{lo:+.4g}, {hi:+.4g}] outside +-{noise_floor:.4g}"}
        return {"result": UNRESOLVED, "why": f"CI [{lo:+.4g}, {hi:+.4g}] straddles +-{noise_floor:.4g}"}
    x, op = criterion.value, criterion.op
    holds = {"<": hi < x, "<=": hi <= x, ">": lo > x, ">=": lo >= x}[op]
    fails = {"<": lo >= x, "<=": lo > x, ">": hi <= x, ">=": hi < x}[op]
    result = MET if holds else NOT_MET if fails else UNRESOLVED
    return {"result": result, "why": f"CI [{lo:+.4g}, {hi:+.4g}] vs delta {op} {x:g}"}
