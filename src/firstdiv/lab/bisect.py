"""Bisection over config changes (chapter 14's E9), deciding each probe against the noise floor.

Order the differing keys, binary-search on how many of them applied as a prefix cross the
regression criterion, and decide each probe SAME / DIFFERENT / UNKNOWN from the confidence interval
of its paired deltas against the baseline; UNKNOWN adds seeds instead of guessing. Then confirm the
culprit alone on the baseline, and revert it alone from the candidate.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..report import Divergence, Finding, Report, Status
from . import stats
from ._effect import MinEffect, parse_min_effect
from .compare import higher_is_better
from .configs import build, spec_keys
from .record import short_hash
from .store import Store
from .sweep import SweepResult, parse_seeds, sweep
from .workload import Workload, resolve

SAME, DIFFERENT, UNKNOWN = "SAME", "DIFFERENT", "UNKNOWN"


@dataclass
class _Lab:
    """Shared state of one bisection: the workload, the baseline, the seeds in use, the criterion."""

    workload: Workload
    base: dict[str, Any]
    cand: dict[str, Any]
    changes: list[str]
    seeds: list[int]
    max_seeds: int
    metric: str
    alpha: float
    store: Store
    progress: bool
    margin: float | None = None
    hib: bool = False
    effect: MinEffect | None = None

    def run(self, keys: Sequence[str], label: str) -> SweepResult:
        cfg = dict(self.base, **{k: self.cand[k] for k in keys})
        name = f"bisect-{short_hash(self.base)[:6]}-{label}"
        return sweep(self.workload, self.seeds, config=cfg, name=name, store=self.store, progress=self.progress)

    def grow(self) -> bool:
        """Double the seed count (new seeds after the largest); False when at the limit."""
        if len(self.seeds) >= self.max_seeds:
            return False
        extra = min(len(self.seeds), self.max_seeds - len(self.seeds))
        self.seeds = self.seeds + list(range(max(self.seeds) + 1, max(self.seeds) + 1 + extra))
        return True


def _values(result: SweepResult, metric: str) -> dict[int, float]:
    missing = [r.seed for r in result.records if metric not in r.final]
    if missing or not result.records:
        known = ", ".join(sorted({m for r in result.records for m in r.final})) or "none"
        raise InvalidArgument(f"Metric {metric!r} is not recorded by this workload (recorded: {known}); pass --metric")
    return {r.seed: r.final[metric] for r in result.records}


def _probe(lab: _Lab, keys: Sequence[str], label: str) -> dict[str, Any]:
    """Run ``keys`` applied to the baseline and decide it; add seeds while UNKNOWN."""
    while True:
        base = _values(lab.run([], "baseline"), lab.metric)
        if lab.margin is None:  # the min effect (default 1x the noise floor) from the first baseline
            lab.margin = (lab.effect or MinEffect("noise", 1.0, "1x")).threshold(list(base.values()))
        values = _values(lab.run(keys, label), lab.metric)
        shared = sorted(set(base) & set(values))
        pair = stats.paired([base[s] for s in shared], [values[s] for s in shared],
                            higher_is_better=lab.hib, confidence=1 - lab.alpha)
        sign = -1.0 if lab.hib else 1.0
        lo, hi = sorted((sign * pair["ci_low"], sign * pair["ci_high"]))
        decision = DIFFERENT if lo > lab.margin else SAME if hi < lab.margin else UNKNOWN
        if decision != UNKNOWN or not lab.grow():
            break
    return {"label": label, "keys": list(keys), "n": pair["n"], "median": stats.describe(list(values.values()))["median"],
            "mean_delta": pair["mean_delta"], "ci_low": pair["ci_low"], "ci_high": pair["ci_high"],
            "worse": pair["worse"], "decision": decision}


def bisect(target: str | Workload, base: Any, candidate: Any, seeds: str | Sequence[int] = "0-7", *,
           order: Sequence[str] | str | None = None, metric: str = "val_loss", margin: float | None = None,
           max_seeds: int = 32, alpha: float = stats.ALPHA, store: Store | str | os.PathLike[str] | None = None,
           progress: bool = False, min_effect: float | str | None = None) -> Report:
    """Find which change of ``candidate`` over ``base`` regresses ``metric``; see module docstring.

    ``base``/``candidate``: dicts, .json/.yaml paths or "k=v,k=v" strings. ``margin``: the regression
    criterion (worse by more than this); default the baseline's seed spread (the noise floor).
    ``min_effect``: the same criterion written as for compare (0.01, "2%" of the baseline mean, "0.5x" the
    noise floor); ``margin=m`` is ``min_effect=m``, and the default is ``min_effect="1x"``.
    """
    effect = parse_min_effect(min_effect)
    if effect is not None and margin is not None:
        raise InvalidArgument("Give --margin or --min-effect, not both (--margin M is --min-effect M)")
    wl = target if isinstance(target, Workload) else resolve(target)
    base_cfg, cand_cfg = build(wl, base), build(wl, candidate)
    changes = _order([k for k in dict.fromkeys([*spec_keys(candidate), *cand_cfg]) if base_cfg.get(k) != cand_cfg.get(k)],
                     order)
    seed_list = parse_seeds(seeds)
    if len(seed_list) < 2:
        raise InvalidArgument("Bisection decides against seed noise: give at least 2 seeds, e.g. --seeds 0-7")
    if max_seeds < len(seed_list):
        raise InvalidArgument(f"--max-seeds {max_seeds} is below the {len(seed_list)} seeds given")
    if margin is not None and margin < 0:
        raise InvalidArgument(f"Expected a non-negative --margin but got {margin}")
    owned = not isinstance(store, Store)
    st = Store(store) if owned else store
    try:
        lab = _Lab(wl, base_cfg, cand_cfg, changes, seed_list, max_seeds, metric, alpha, st, progress, margin,
                   higher_is_better(metric), effect)
        return _search(lab)
    finally:
        if owned:
            st.close()


def _order(changes: list[str], order: Sequence[str] | str | None) -> list[str]:
    if not changes:
        raise InvalidArgument("The base and candidate configs are identical: there is nothing to bisect")
    if order is None:
        return changes
    wanted = [k.strip() for k in (order.split(",") if isinstance(order, str) else order) if k.strip()]
    unknown = [k for k in wanted if k not in changes]
    if unknown:
        raise InvalidArgument(f"--order names {', '.join(unknown)}, which the candidate does not change "
                              f"(changed: {', '.join(changes)})")
    return list(dict.fromkeys(wanted)) + [k for k in changes if k not in wanted]


def _search(lab: _Lab) -> Report:
    probes = [_probe(lab, lab.changes, "candidate")]
    if probes[0]["decision"] != DIFFERENT:
        return _report(lab, probes, None, None)
    lo, hi = 0, len(lab.changes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = _probe(lab, lab.changes[:mid], f"prefix-{mid}")
        probes.append(probe)
        if probe["decision"] == UNKNOWN:
            return _report(lab, probes, None, None)
        lo, hi = (lo, mid) if probe["decision"] == DIFFERENT else (mid, hi)
    culprit = lab.changes[hi - 1]
    alone = _probe(lab, [culprit], f"alone-{culprit}")
    revert = _probe(lab, [k for k in lab.changes if k != culprit], f"revert-{culprit}")
    probes += [alone, revert]
    partner = None
    if alone["decision"] == SAME:
        for other in lab.changes[: hi - 1]:
            pair = _probe(lab, [other, culprit], f"pair-{other}-{culprit}")
            probes.append(pair)
            if pair["decision"] == DIFFERENT:
                partner = other
                break
    return _report(lab, probes, culprit, partner)


def _conclusion(lab: _Lab, probes: list[dict[str, Any]], culprit: str | None, partner: str | None) -> tuple[str, str]:
    """(kind, sentence) summarising what the probes established."""
    if culprit is None:
        if probes[0]["decision"] == SAME:
            return "bisect.no_regression", "the candidate does not cross the regression criterion: nothing to bisect"
        return "bisect.undecided", (f"probe {probes[-1]['label']} stayed UNKNOWN at {probes[-1]['n']} seeds "
                                    f"(--max-seeds {lab.max_seeds}); add seeds or widen --margin")
    alone, revert = next(p for p in probes if p["label"] == f"alone-{culprit}"), \
        next(p for p in probes if p["label"] == f"revert-{culprit}")
    change = f"{culprit} ({lab.base[culprit]!r} -> {lab.cand[culprit]!r})"
    if alone["decision"] == DIFFERENT:
        tail = ("reverting it alone restores the baseline" if revert["decision"] == SAME else
                "but reverting it alone does not restore the baseline: another change regresses too")
        return "bisect.culprit", f"{change} crosses the criterion alone (confirmed); {tail}"
    if partner is not None:
        return "bisect.interaction", (f"{change} does not regress alone: it interacts with {partner} "
                                      f"({lab.base[partner]!r} -> {lab.cand[partner]!r}); the pair reproduces the regression")
    return "bisect.interaction", (f"{change} completes the regressing prefix but does not regress alone, nor with any "
                                  "single earlier change: the prefix only regresses jointly")


def _report(lab: _Lab, probes: list[dict[str, Any]], culprit: str | None, partner: str | None) -> Report:
    kind, sentence = _conclusion(lab, probes, culprit, partner)
    findings = [Finding(p["label"], "probe", Status.FAIL if p["decision"] == DIFFERENT else
                        Status.WARN if p["decision"] == UNKNOWN else Status.PASS,
                        f"{len(p['keys'])} change(s), mean delta {p['mean_delta']:+.4g} "
                        f"CI [{p['ci_low']:+.4g}, {p['ci_high']:+.4g}] at {p['n']} seeds: {p['decision']}", p)
                for p in probes]
    details = {"workload": lab.workload.target, "metric": lab.metric, "margin": lab.margin, "alpha": lab.alpha,
               "min_effect": lab.effect.text if lab.effect else None,
               "changes": [{"key": k, "base": lab.base[k], "candidate": lab.cand[k]} for k in lab.changes],
               "probes": probes, "culprit": culprit, "partner": partner, "conclusion": sentence, "kind": kind,
               "seeds": lab.seeds}
    if culprit is None:
        status = Status.PASS if kind == "bisect.no_regression" else Status.WARN
        return BisectReport("bisect", status, None, tuple(findings), side_effects="none (runs recorded in the store)",
                            details=details)
    div = Divergence(culprit, kind, lab.base[culprit], lab.cand[culprit], sentence)
    return BisectReport("bisect", Status.FAIL, div, tuple(findings), side_effects="none (runs recorded in the store)",
                        details=details)


class BisectReport(Report):
    """The bisection's report; ``details['probes']`` holds every probe's evidence."""

    @property
    def culprit(self) -> str | None:
        return self.details["culprit"]

    def __rich_body__(self) -> Any:
        from ..render.sweeps import render_bisect

        return render_bisect(self)
