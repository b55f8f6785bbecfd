"""The smallest effect that matters: ``min_effect`` parsed, resolved to metric units, and judged.

    0.01    absolute, in the metric's units
    2%      relative: that share of the baseline's mean metric
    0.5x    that many times the noise floor (the baseline's seed spread, max - min)

The difference ``candidate - baseline`` is SYSTEM_CHANGED only when its (1 - alpha) CI lies entirely beyond
+X or -X; PRACTICALLY_EQUIVALENT when two one-sided tests (TOST, scipy) put it inside (-X, +X) at alpha, which is
the (1 - 2 alpha) CI lying inside the bounds; anything else is NOT_RESOLVED with respect to the threshold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import InvalidArgument
from . import stats

PRACTICALLY_EQUIVALENT = "PRACTICALLY_EQUIVALENT"
BEYOND, INSIDE, STRADDLES = "beyond", "inside", "straddles"
_SPEC = re.compile(r"^\s*(?P<value>\d*\.?\d+(?:[eE][-+]?\d+)?)\s*(?P<unit>%|x|X)?\s*$")
FORMS_HELP = "an absolute value (0.01), a share of the baseline's metric (2%) or a multiple of the noise floor (0.5x)"


@dataclass(frozen=True)
class MinEffect:
    """``kind``: absolute, relative or noise; ``value``: the number as written (2% is 2.0)."""

    kind: str
    value: float
    text: str

    def threshold(self, base_values: Sequence[float]) -> float | None:
        """The threshold in metric units from the baseline's finite values (None: not estimable)."""
        if self.kind == "absolute":
            return self.value
        floor = stats.describe(list(base_values))
        if self.kind == "relative":
            return abs(floor["mean"]) * self.value / 100 if floor["n"] else None
        return self.value * floor["spread"] if floor["n"] >= 2 else None

    def describe(self) -> str:
        return {"absolute": "absolute", "relative": f"{self.value:g}% of the baseline mean",
                "noise": f"{self.value:g}x the noise floor"}[self.kind]


def parse_min_effect(spec: Any) -> MinEffect | None:
    """None stays None; a number is absolute; a string may end in % (relative) or x (noise floor)."""
    if spec is None or isinstance(spec, MinEffect):
        return spec
    if isinstance(spec, bool):
        raise InvalidArgument(f"Expected min_effect as {FORMS_HELP} but got {spec!r}")
    if isinstance(spec, (int, float)):
        if not math.isfinite(spec) or spec <= 0:
            raise InvalidArgument(f"Expected a positive finite min_effect, e.g. 0.01, but got {spec!r}")
        return MinEffect("absolute", float(spec), f"{spec:g}")
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    if m is None:
        raise InvalidArgument(f"Cannot read min_effect {spec!r}; write it as {FORMS_HELP}")
    value = float(m["value"])
    if value <= 0:
        raise InvalidArgument(f"Expected a positive min_effect but got {spec!r}; e.g. 0.01, 2% or 0.5x")
    kind = {"%": "relative", "x": "noise", "X": "noise"}.get(m["unit"] or "", "absolute")
    return MinEffect(kind, value, spec.strip())


def tost(b: Sequence[float], c: Sequence[float], bound: float, *, paired_design: bool,
         alpha: float) -> dict[str, Any]:
    """Two one-sided tests of ``-bound < mean(c - b) < bound`` (paired t or Welch, from scipy).

    Returns the TOST p (the larger one-sided p), the (1 - 2 alpha) CI it corresponds to, and whether the
    difference is equivalent at ``alpha``. Constant deltas are decided without a test.
    """
    bb, cc = np.asarray(b, dtype=np.float64), np.asarray(c, dtype=np.float64)
    out: dict[str, Any] = {"p_value": None, "ci_low": None, "ci_high": None, "confidence": 1 - 2 * alpha,
                           "equivalent": False}
    if min(bb.size, cc.size) < 2:
        return out
    d = cc - bb if paired_design else None
    if (d is not None and np.all(d == d[0])) or (d is None and np.ptp(bb) == 0 and np.ptp(cc) == 0):
        delta = float(d[0]) if d is not None else float(cc[0] - bb[0])
        inside = -bound < delta < bound
        return {**out, "p_value": 0.0 if inside else 1.0, "ci_low": delta, "ci_high": delta, "equivalent": inside}
    if paired_design:
        lower = sps.ttest_1samp(d, -bound, alternative="greater")
        upper = sps.ttest_1samp(d, bound, alternative="less")
        ci = sps.ttest_1samp(d, 0.0).confidence_interval(confidence_level=1 - 2 * alpha)
    else:
        lower = sps.ttest_ind(cc + bound, bb, equal_var=False, alternative="greater")
        upper = sps.ttest_ind(cc - bound, bb, equal_var=False, alternative="less")
        ci = sps.ttest_ind(cc, bb, equal_var=False).confidence_interval(confidence_level=1 - 2 * alpha)
    p = float(max(lower.pvalue, upper.pvalue))
    return {**out, "p_value": p, "ci_low": float(ci.low), "ci_high": float(ci.high), "equivalent": p < alpha}


def judge(effect: MinEffect, b: Sequence[float], c: Sequence[float], test: dict[str, Any], *, paired_design: bool,
          alpha: float, sd: float | None, baseline: Sequence[float]) -> dict[str, Any]:
    """Where the CI of the difference lies against +-threshold, with the TOST and the seeds it would take.

    ``test``: the paired or unpaired result the comparison used (its CI and p); ``sd``: the stdev that
    ``seeds_to_resolve`` takes for this design (None: not estimable); ``baseline``: every finite baseline
    value, which the relative and noise-floor thresholds are taken from.
    """
    threshold = effect.threshold(baseline)
    lo, hi, p = test["ci_low"], test["ci_high"], test["p_value"]
    out: dict[str, Any] = {"spec": effect.text, "kind": effect.kind, "value": effect.value, "threshold": threshold,
                           "what": effect.describe(), "ci_low": lo, "ci_high": hi, "confidence": 1 - alpha,
                           "resolved_from_zero": p is not None and p < alpha, "relation": None, "tost": None,
                           "seeds_to_resolve": None}
    if threshold is None or lo is None or hi is None:
        return out
    eq = tost(b, c, threshold, paired_design=paired_design, alpha=alpha)
    if lo > threshold or hi < -threshold:
        relation = BEYOND
    elif eq["equivalent"]:
        relation = INSIDE
    else:
        relation = STRADDLES
    delta = test["mean_delta"]
    need = None
    if relation == STRADDLES and delta is not None and sd is not None:
        need = stats.seeds_to_resolve(abs(abs(delta) - threshold), sd, paired_design=paired_design, alpha=alpha)
    return {**out, "relation": relation, "tost": eq, "seeds_to_resolve": need}


def effect_verdict(judged: dict[str, Any], verdict: str, direction: str | None,
                   resolved: bool) -> tuple[str, str | None, bool]:
    """The statistical verdict (NOT_RESOLVED / SYSTEM_CHANGED) read against the threshold: (verdict,
    direction, resolved). Only a CI beyond the threshold keeps SYSTEM_CHANGED."""
    relation = judged["relation"]
    if relation == BEYOND and verdict == "SYSTEM_CHANGED":
        return verdict, direction, resolved
    if relation == INSIDE:
        return PRACTICALLY_EQUIVALENT, None, False
    return "NOT_RESOLVED", None, False
