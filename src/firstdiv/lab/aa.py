"""A/A self-check: compare disjoint seed sets of one config and count how often the lab's own
verdict claims SYSTEM_CHANGED. At a declared alpha that rate must stay at or under alpha."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import InvalidArgument
from ..report import Divergence, Finding, Report, Status
from ._effect import parse_min_effect
from .compare import SYSTEM_CHANGED, compare
from .store import Store
from .sweep import sweep
from .workload import Workload, resolve


def aa(target: str | Workload, pairs: int = 20, seeds_per_side: int = 4, *, sets: Sequence[str] | None = None,
       config: dict[str, Any] | None = None, metric: str = "val_loss", alpha: float = 0.05, start: int = 0,
       store: Store | str | os.PathLike[str] | None = None, progress: bool = False,
       min_effect: float | str | None = None, backend: str = "serial") -> Report:
    """Run ``2 * pairs * seeds_per_side`` seeds of one config; compare pair i's two disjoint halves.

    ``min_effect`` is passed to each comparison (its pairs then read PRACTICALLY_EQUIVALENT or NOT_RESOLVED);
    ``backend``: how the sweep runs (records are the same on every backend).

    FAIL when the false SYSTEM_CHANGED rate is significantly above ``alpha`` (one-sided exact
    binomial test at level 0.05).
    """
    if pairs < 1 or seeds_per_side < 2:
        raise InvalidArgument(f"Expected --pairs >= 1 and --seeds-per-side >= 2 but got {pairs} and {seeds_per_side}")
    if not 0 < alpha < 1:
        raise InvalidArgument(f"Expected alpha in (0, 1) but got {alpha}")
    parse_min_effect(min_effect)  # a bad one fails before any run
    wl = target if isinstance(target, Workload) else resolve(target)
    cfg = wl.config(config, list(sets or []))
    n = 2 * pairs * seeds_per_side
    result = sweep(wl, range(start, start + n), config=cfg, name=f"aa-{wl.target.split(':')[-1]}", store=store,
                   progress=progress, backend=backend)
    by_seed = {r.seed: r for r in result.records}
    if len(by_seed) < n:
        raise InvalidArgument(f"{n - len(by_seed)} of the {n} A/A runs failed; fix the workload first "
                              f"(first error: {result.failed[0].error if result.failed else 'unknown'})")
    rng = np.random.default_rng(0)
    verdicts = []
    for i in range(pairs):
        lo = start + 2 * i * seeds_per_side
        a = [by_seed[s] for s in range(lo, lo + seeds_per_side)]
        b = [by_seed[s] for s in range(lo + seeds_per_side, lo + 2 * seeds_per_side)]
        verdicts.append(compare(a, b, metric=metric, alpha=alpha, rng=rng, min_effect=min_effect).verdict)
    report = _report(wl, pairs, seeds_per_side, metric, alpha, verdicts)
    report.details["min_effect"] = None if min_effect is None else str(min_effect)
    return report


def _report(wl: Workload, pairs: int, k: int, metric: str, alpha: float, verdicts: list[str]) -> Report:
    alarms = sum(v == SYSTEM_CHANGED for v in verdicts)
    test = sps.binomtest(alarms, pairs, alpha, alternative="greater")
    ci = sps.binomtest(alarms, pairs).proportion_ci(confidence_level=0.95, method="exact")  # two-sided interval
    too_many = test.pvalue < 0.05
    details = {"workload": wl.target, "pairs": pairs, "seeds_per_side": k, "metric": metric, "alpha": alpha,
               "verdicts": dict(Counter(verdicts)), "alarms": alarms, "rate": alarms / pairs, "ci_low": float(ci.low),
               "ci_high": float(ci.high), "confidence": 0.95, "p_value": float(test.pvalue)}
    finding = Finding("compare", "A/A false alarms", Status.FAIL if too_many else Status.PASS,
                      f"{alarms}/{pairs} identical-config comparisons called SYSTEM_CHANGED "
                      f"(rate {alarms / pairs:.3f}, 95% CI [{ci.low:.3f}, {ci.high:.3f}])", details)
    div = None
    if too_many:
        div = Divergence("compare", "lab.false_alarms", f"rate <= alpha {alpha}", f"{alarms}/{pairs}",
                         "the comparison's assumptions fail for this workload (e.g. heavy tails or dependence between "
                         "seeds); use more seeds per side or a rank-based check")
    return AAReport("aa", Status.FAIL if div else Status.PASS, div, (finding,),
                    side_effects="none (runs recorded in the store)", details=details)


class AAReport(Report):
    def __rich_body__(self) -> Any:
        from ..render.sweeps import render_aa

        return render_aa(self)
