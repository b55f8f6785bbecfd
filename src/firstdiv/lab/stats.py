"""Statistics for comparing runs: pure functions over arrays, every test from scipy.

Shapes: every ``values``/``base``/``cand`` argument is a 1-d sequence of per-seed metric values.
Randomised procedures (bootstrap) take an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from ..errors import InvalidArgument

ALPHA = 0.05
POWER = 0.8
CONFIDENCE = 0.95  # of the gate's held-out false-alarm interval


def describe(values: Sequence[float]) -> dict[str, float]:
    """median, mean, stdev (ddof=1; 0 for one value), min, max, spread (max - min), n."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0}
    with np.errstate(invalid="ignore"):  # an infinite value (a diverged run) makes stdev nan: said, not warned
        return _describe(arr)


def _describe(arr: np.ndarray) -> dict[str, float]:
    return {
        "n": int(arr.size),
        "median": float(np.median(arr)),
        "mean": float(arr.mean()),
        "stdev": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "spread": float(arr.max() - arr.min()),
    }


def paired(base: Sequence[float], cand: Sequence[float], *, higher_is_better: bool = False,
           confidence: float = 1 - ALPHA) -> dict[str, Any]:
    """Per-seed deltas ``cand - base`` on shared seeds: paired t (with CI) and Wilcoxon signed-rank.

    ``worse``/``better`` count seeds by the metric's direction. Degenerate cases (all deltas equal)
    are decided without a test: all zero is no difference (p = 1); a constant non-zero shift is a
    difference with zero spread (p = 0).
    """
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(cand, dtype=np.float64)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError(f"Expected two equal-length 1-d sequences but got shapes {b.shape} and {c.shape}")
    d = c - b
    n = int(d.size)
    sign = -1.0 if higher_is_better else 1.0
    out: dict[str, Any] = {
        "n": n, "deltas": d.tolist(), "mean_delta": float(d.mean()) if n else 0.0,
        "stdev_delta": float(d.std(ddof=1)) if n > 1 else 0.0,
        "worse": int(np.sum(sign * d > 0)), "better": int(np.sum(sign * d < 0)), "ties": int(np.sum(d == 0)),
        "t_stat": None, "p_value": None, "ci_low": None, "ci_high": None, "wilcoxon_p": None,
        "confidence": confidence, "test": "paired t",
    }
    if n < 2:
        return out
    if np.all(d == d[0]):
        p = 1.0 if d[0] == 0 else 0.0
        out.update(p_value=p, ci_low=float(d[0]), ci_high=float(d[0]), wilcoxon_p=p, test="constant delta")
        return out
    with warnings.catch_warnings():
        # Nearly constant deltas (a fixed shift plus rounding) make scipy warn about precision loss;
        # the statistic is still right, and the constant case is decided above.
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        res = stats.ttest_rel(c, b)
    ci = res.confidence_interval(confidence_level=confidence)
    out.update(t_stat=float(res.statistic), p_value=float(res.pvalue), ci_low=float(ci.low), ci_high=float(ci.high))
    if np.any(d != 0):
        out["wilcoxon_p"] = float(stats.wilcoxon(c, b).pvalue)
    return out


def unpaired(base: Sequence[float], cand: Sequence[float], *, rng: np.random.Generator,
             confidence: float = 1 - ALPHA, n_resamples: int = 2000) -> dict[str, Any]:
    """Two independent samples: Welch t (CI of the mean difference), Mann-Whitney U, and a
    bootstrap CI of the median difference ``median(cand) - median(base)``."""
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(cand, dtype=np.float64)
    out: dict[str, Any] = {
        "n_base": int(b.size), "n_cand": int(c.size),
        "mean_delta": float(c.mean() - b.mean()) if b.size and c.size else None,
        "median_delta": float(np.median(c) - np.median(b)) if b.size and c.size else None,
        "p_value": None, "ci_low": None, "ci_high": None, "mannwhitney_p": None,
        "median_ci_low": None, "median_ci_high": None, "confidence": confidence, "test": "Welch t",
    }
    if b.size < 2 or c.size < 2:
        return out
    if np.ptp(b) == 0 and np.ptp(c) == 0:
        same = b[0] == c[0]
        delta = float(c[0] - b[0])
        out.update(p_value=1.0 if same else 0.0, ci_low=delta, ci_high=delta, mannwhitney_p=1.0 if same else None,
                   median_ci_low=delta, median_ci_high=delta, test="constant samples")
        return out
    res = stats.ttest_ind(c, b, equal_var=False)
    ci = res.confidence_interval(confidence_level=confidence)
    out.update(p_value=float(res.pvalue), ci_low=float(ci.low), ci_high=float(ci.high),
               mannwhitney_p=float(stats.mannwhitneyu(c, b, alternative="two-sided").pvalue))
    boot = stats.bootstrap((c, b), lambda x, y, axis=-1: np.median(x, axis=axis) - np.median(y, axis=axis),
                           vectorized=True, paired=False, confidence_level=confidence, n_resamples=n_resamples,
                           method="percentile", rng=rng)
    out.update(median_ci_low=float(boot.confidence_interval.low), median_ci_high=float(boot.confidence_interval.high))
    return out


def _paired_power(n: int, effect: float, alpha: float) -> float:
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect * math.sqrt(n)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def _welch_power(n: int, effect: float, alpha: float) -> float:
    df = 2 * n - 2
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect * math.sqrt(n / 2)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_to_resolve(delta: float, sd: float, *, paired_design: bool, alpha: float = ALPHA,
                     power: float = POWER, max_n: int = 100_000) -> int | None:
    """Seeds per side for a two-sided t-test at ``alpha`` to detect ``delta`` with ``power``.

    ``sd`` is the stdev of paired deltas (paired) or of one side's values (unpaired). Returns None
    when the effect is zero or needs more than ``max_n`` seeds.
    """
    if not math.isfinite(delta) or delta == 0 or not math.isfinite(sd):
        return None
    if sd <= 0:
        return 2
    effect = abs(delta) / sd
    power_fn = _paired_power if paired_design else _welch_power
    lo, hi = 2, 2
    while power_fn(hi, effect, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > max_n:
            return None
    while lo < hi:  # power grows with n: binary search the smallest n that reaches it
        mid = (lo + hi) // 2
        if power_fn(mid, effect, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi


# -- curves: per-epoch bands over seeds -------------------------------------------------------------

def bands(curves: Mapping[int, Sequence[float]]) -> list[dict[str, float]]:
    """Per epoch over the runs that reached it: n, min, q25, median, q75, max."""
    length = max(len(c) for c in curves.values())
    out = []
    for epoch in range(length):
        v = np.array([c[epoch] for c in curves.values() if len(c) > epoch], dtype=np.float64)
        q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 1.0])
        out.append({"epoch": epoch, "n": int(v.size), "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]),
                    "q75": float(q[3]), "max": float(q[4])})
    return out


# -- the gate's calibration: split conformal thresholds and false-alarm rates -----------------------

def exceeds(value: float, threshold: float, hib: bool) -> bool:
    """Worse than the threshold. A value that is not finite (a diverged or failed run) always is."""
    if not math.isfinite(value):
        return True
    return value < threshold if hib else value > threshold


def margin(value: float, threshold: float, hib: bool) -> float | None:
    """Room left before the threshold, in metric units: positive passes, negative fails."""
    if not math.isfinite(value):
        return None
    return value - threshold if hib else threshold - value


def conformal_rank(n: int, alpha: float) -> int:
    """1-based rank ``ceil((n+1)(1-alpha))`` of the threshold among n values ordered best to worst."""
    return max(1, math.ceil((n + 1) * (1 - alpha) - 1e-9))  # the epsilon keeps exact integers exact


def seeds_needed(alpha: float) -> int:
    """The fewest calibration runs that support ``alpha``: n >= 1/alpha - 1."""
    n = max(1, math.floor(1 / alpha - 1))
    while conformal_rank(n, alpha) > n:
        n += 1
    return n


def conformal_threshold(values: Sequence[float], alpha: float, *,
                        higher_is_better: bool = False) -> tuple[float, int]:
    """``values``: shape (n,), one metric value per healthy calibration run. Returns (threshold, rank):
    the rank-th best value. Raises InvalidArgument when n is too small for ``alpha``."""
    check_alpha(alpha)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidArgument(f"Expected a non-empty 1-d sequence of calibration values but got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgument(f"{int(np.sum(~np.isfinite(arr)))} of the {arr.size} calibration values are NaN or "
                              "infinite; calibrate on healthy runs only")
    n, rank = int(arr.size), conformal_rank(int(arr.size), alpha)
    if rank > n:
        smallest = math.ceil(1e4 / (n + 1)) / 1e4
        raise InvalidArgument(f"alpha={alpha:g} needs at least {seeds_needed(alpha)} calibration seeds "
                              f"(n >= 1/alpha - 1) but got {n}; sweep more seeds or use alpha >= {smallest:.4f}, "
                              f"the smallest these {n} seeds support")
    ordered = np.sort(arr)[::-1] if higher_is_better else np.sort(arr)
    return float(ordered[rank - 1]), rank


def false_alarm_rate(k: int, m: int, alpha: float, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """k of m healthy runs exceeded: rate, exact (Clopper-Pearson) interval, p of "rate > alpha"."""
    ci = stats.binomtest(k, m).proportion_ci(confidence_level=confidence, method="exact")
    p = float(stats.binomtest(k, m, alpha, alternative="greater").pvalue)
    return {"false_alarms": k, "n": m, "rate": k / m, "ci_low": float(ci.low), "ci_high": float(ci.high),
            "confidence": confidence, "p_value": p, "consistent": p > alpha}


def check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, numbers.Real) and 0 < alpha < 1):
        raise InvalidArgument(f"Expected alpha in (0, 1), e.g. 0.05, but got {alpha!r}")
