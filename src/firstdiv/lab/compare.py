"""Paired run comparison in chapter 14's order: measurement first, then noise, then the system."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgument, NotFound
from ..report import Divergence, Finding, Report, Status
from . import stats
from ._effect import PRACTICALLY_EQUIVALENT, effect_verdict, judge, parse_min_effect
from .criteria import MET, NOT_MET, UNRESOLVED, grade, parse_criterion
from .record import RunRecord
from .store import Store, SweepInfo
from .sweep import SweepResult, load_sweep

MEASUREMENT_CHANGED, NOT_RESOLVED, SYSTEM_CHANGED = "MEASUREMENT_CHANGED", "NOT_RESOLVED", "SYSTEM_CHANGED"
#: every verdict, in chapter 14's order of precedence
VERDICTS = (MEASUREMENT_CHANGED, SYSTEM_CHANGED, PRACTICALLY_EQUIVALENT, NOT_RESOLVED)
SAME, CHANGED, UNKNOWN = "SAME", "CHANGED", "UNKNOWN"
_HIGHER = ("acc", "accuracy", "f1", "auc", "precision", "recall", "score", "examples_per_s", "throughput", "bleu")


def higher_is_better(metric: str, records: Sequence[RunRecord] = ()) -> bool:
    """Declared direction if any run declared one; otherwise by name (losses and errors are lower)."""
    for r in records:
        if metric in r.directions:
            return r.directions[metric] == "higher"
    name = metric.lower()
    return any(name == h or name.endswith("_" + h) or name.startswith(h + "_") for h in _HIGHER)


@dataclass(frozen=True)
class Side:
    name: str
    records: tuple[RunRecord, ...]
    info: dict[str, Any]


def load_side(ref: Any, store: Store | None, label: str) -> Side:
    """One side of a comparison from a sweep name, a SweepInfo, a SweepResult or run records."""
    if isinstance(ref, SweepResult):
        return Side(ref.sweep.name, ref.records, ref.sweep.info)
    if isinstance(ref, SweepInfo):
        if store is None:
            raise InvalidArgument("Comparing a SweepInfo needs the store it came from (pass store=)")
        return Side(ref.name, tuple(store.records(ref)), ref.info)
    if isinstance(ref, str):
        if store is None:
            raise InvalidArgument("Comparing sweeps by name needs a store (pass store=)")
        info = store.find_sweep(ref)
        return Side(info.name, tuple(store.records(info)), info.info)
    try:
        records = tuple(ref)
    except TypeError:  # None, a number: not a side at all
        records = ()
    if records and all(isinstance(r, RunRecord) for r in records):
        return Side(label, records, {"hypothesis": records[0].hypothesis, "success": records[0].success})
    raise InvalidArgument(f"Expected the {label} to be a sweep name, a SweepResult or run records but got {type(ref).__name__}")


def _values_differ(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, list[Any]]:
    a, b = a or {}, b or {}
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def identity(base: Sequence[RunRecord], cand: Sequence[RunRecord]) -> dict[str, dict[str, Any]]:
    """SAME/CHANGED (or UNKNOWN when not recorded) per link, with the fields that changed."""
    b0, c0 = base[0], cand[0]

    def link(key: str, get: Any, fields: dict[str, list[Any]] | None = None) -> dict[str, Any]:
        bv, cv = sorted({str(get(r)) for r in base}), sorted({str(get(r)) for r in cand})
        if any(get(r) is None for r in (*base, *cand)):
            state = UNKNOWN
        else:
            state = SAME if bv == cv else CHANGED
        return {"state": state, "baseline": bv[0] if len(bv) == 1 else bv, "candidate": cv[0] if len(cv) == 1 else cv,
                "fields": fields if state == CHANGED and fields else {}}

    def train_config(r: RunRecord) -> dict[str, Any]:
        skip = set(r.extra.get("eval_keys", ())) | set(r.extra.get("exec_keys", ()))
        return {k: v for k, v in r.config.items() if k not in skip}

    config_fields = _values_differ(train_config(b0), train_config(c0))
    return {
        "config": link("config", lambda r: r.config_hash, config_fields),
        "eval_fingerprint": link("eval_fingerprint", lambda r: r.eval_fingerprint,
                                 _values_differ(b0.eval_contract, c0.eval_contract)),
        "env": link("env", lambda r: r.env_hash, _values_differ(b0.env, c0.env)),
        "code": link("code", lambda r: r.code.get("version"), _values_differ(b0.code, c0.code)),
        "data": link("data", lambda r: r.data_identity),
    }


class Comparison(Report):
    """A Report whose ``details`` hold the verdict and its evidence (see ``to_dict()['details']``)."""

    page = "comparison"

    @property
    def verdict(self) -> str:
        return self.details["verdict"]

    @property
    def direction(self) -> str | None:
        return self.details["direction"]

    @property
    def identity(self) -> dict[str, Any]:
        return self.details["identity"]

    @property
    def paired(self) -> dict[str, Any] | None:
        return self.details["paired"]

    @property
    def unpaired(self) -> dict[str, Any]:
        return self.details["unpaired"]

    def __repr__(self) -> str:
        return __import__("firstdiv._format", fromlist=["_"]).comparison_line(self.details)

    def __rich_body__(self) -> Any:
        from ..render.sweeps import render_comparison_body

        return render_comparison_body(self)


def compare(baseline: Any, candidate: Any, *, metric: str = "val_loss",
            store: Store | str | os.PathLike[str] | None = None, alpha: float = stats.ALPHA,
            rng: np.random.Generator | None = None, min_effect: float | str | None = None) -> Comparison:
    """Compare two sweeps (names, SweepResults or record lists) on ``metric``.

    Verdict order (DESIGN.md): eval fingerprint differs -> MEASUREMENT_CHANGED; difference not
    resolved at ``alpha`` -> NOT_RESOLVED (with seeds needed); else SYSTEM_CHANGED with direction.
    ``min_effect`` (0.01, "2%" of the baseline mean, "0.5x" the noise floor): SYSTEM_CHANGED only when the
    CI clears +-that threshold, PRACTICALLY_EQUIVALENT when TOST puts it inside, else NOT_RESOLVED.
    """
    effect = parse_min_effect(min_effect)
    if not isinstance(metric, str) or not metric:
        raise InvalidArgument(f"Expected `metric` to be a metric name such as 'val_loss' but got {metric!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InvalidArgument(f"Expected alpha in (0, 1) but got {alpha!r}")
    needs_store = any(isinstance(ref, (str, SweepInfo)) for ref in (baseline, candidate))
    owned = needs_store and not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    try:
        base, cand = load_side(baseline, st, "baseline"), load_side(candidate, st, "candidate")  # type: ignore[arg-type]
    finally:
        if owned:
            st.close()  # type: ignore[union-attr]
    for side in (base, cand):
        if not side.records:
            raise NotFound(f"Sweep {side.name!r} has no successful runs to compare; run it with `firstdiv sweep`")
    for side in (base, cand):
        missing = [r.seed for r in side.records if metric not in r.final]
        if missing:
            known = sorted(set().union(*(r.final for r in side.records)))
            raise NotFound(f"Metric {metric!r} is not recorded in sweep {side.name!r} "
                           f"(seeds {missing[:5]}); recorded metrics: {', '.join(known)}")
    rng = rng if rng is not None else np.random.default_rng(0)
    return _build(base, cand, metric, alpha, rng, effect)


@dataclass(frozen=True)
class ComparisonView:
    """A comparison with both sides' runs, so the page can draw their distributions and curves."""

    comparison: Comparison
    baseline: SweepResult
    candidate: SweepResult

    #: the HTML page that shows it (firstdiv.render.html)
    page: ClassVar[str] = "comparison_view"


def comparison_view(baseline: Any, candidate: Any, *, metric: str = "val_loss", store: Any = None,
                    alpha: float = 0.05, min_effect: float | str | None = None) -> ComparisonView:
    """Compare two sweeps (names in ``store``, or SweepResults) exactly as ``firstdiv compare`` does."""
    kw = {"metric": metric, "alpha": alpha, "min_effect": min_effect}
    if isinstance(baseline, SweepResult) and isinstance(candidate, SweepResult):
        return ComparisonView(compare(baseline, candidate, **kw), baseline, candidate)
    owned = not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    try:
        sides = [ref if isinstance(ref, SweepResult) else load_sweep(ref, st) for ref in (baseline, candidate)]
        return ComparisonView(compare(sides[0], sides[1], **kw), sides[0], sides[1])
    finally:
        if owned:
            st.close()


def _build(base: Side, cand: Side, metric: str, alpha: float, rng: np.random.Generator,
           effect: Any = None) -> Comparison:
    hib = higher_is_better(metric, base.records + cand.records)
    ident = identity(base.records, cand.records)
    allb = {r.seed: r.final[metric] for r in base.records}
    allc = {r.seed: r.final[metric] for r in cand.records}
    diverged = _divergence(metric, allb, allc)
    # the statistics read the finite values; a non-finite one is a diverged run, judged apart
    bvals = {s: v for s, v in allb.items() if math.isfinite(v)}
    cvals = {s: v for s, v in allc.items() if math.isfinite(v)}
    shared = sorted(set(bvals) & set(cvals))
    floor = stats.describe(list(bvals.values()))
    unp = stats.unpaired(list(bvals.values()), list(cvals.values()), rng=rng, confidence=1 - alpha)
    pair = stats.paired([bvals[s] for s in shared], [cvals[s] for s in shared], higher_is_better=hib,
                        confidence=1 - alpha) if len(shared) >= 2 else None
    pair_used = pair is not None
    test = pair if pair_used else unp
    p = test["p_value"]
    resolved = p is not None and p < alpha
    delta = test["mean_delta"]
    sign = (-1 if hib else 1) * (delta or 0.0)
    direction = None if not resolved else ("worse" if sign > 0 else "better" if sign < 0 else None)
    if ident["eval_fingerprint"]["state"] == CHANGED:
        verdict, direction, resolved = MEASUREMENT_CHANGED, None, False  # stop there: no model-level reading
    elif diverged is not None and diverged["direction"] is not None:
        verdict, direction, resolved = SYSTEM_CHANGED, diverged["direction"], True  # a diverged run is no noise
    elif not resolved or direction is None:
        verdict, direction = NOT_RESOLVED, None
    else:
        verdict = SYSTEM_CHANGED
    spread = floor.get("spread") or None
    coupling = _coupling(pair, [bvals[s] for s in shared], [cvals[s] for s in shared]) if pair_used else None
    sd = _design_sd(pair, bvals, cvals)
    need = None if sd is None else stats.seeds_to_resolve(delta or 0.0, sd, paired_design=pair_used, alpha=alpha)
    judged = None
    if effect is not None:
        b_used, c_used = ([bvals[s] for s in shared], [cvals[s] for s in shared]) if pair_used else \
            (list(bvals.values()), list(cvals.values()))
        judged = judge(effect, b_used, c_used, test, paired_design=pair_used, alpha=alpha, sd=sd,
                       baseline=list(bvals.values()))
        if verdict in (NOT_RESOLVED, SYSTEM_CHANGED) and not (diverged is not None and diverged["direction"]):
            verdict, direction, resolved = effect_verdict(judged, verdict, direction, resolved)
    details: dict[str, Any] = {
        "verdict": verdict, "direction": direction, "metric": metric, "higher_is_better": hib, "alpha": alpha,
        "baseline_name": base.name, "candidate_name": cand.name,
        "identity": {k: v["state"] for k, v in ident.items()}, "identity_detail": ident,
        "shared_seeds": shared, "design": "paired" if pair_used else "unpaired",
        "paired": pair, "unpaired": unp, "resolved": resolved, "coupling": coupling, "seeds_to_resolve": need,
        "noise_floor": {"spread": floor.get("spread"), "stdev": floor.get("stdev"), "n": floor.get("n")},
        "noise_ratio": abs(delta) / spread if spread and delta is not None else None,
        "diverged": diverged, "min_effect": judged,
        "baseline": _summaries(base.records), "candidate": _summaries(cand.records),
        "cost": _cost(base.records, cand.records),
        "declared": _declared(cand, metric, test, spread, resolved, direction, verdict, diverged),
    }
    return _report(details, ident)


def _design_sd(pair: dict[str, Any] | None, bvals: dict[int, float], cvals: dict[int, float]) -> float | None:
    """The stdev seeds_to_resolve takes: of the paired deltas, else pooled over both sides (None: single runs)."""
    if pair is not None:
        return pair["stdev_delta"]
    if min(len(bvals), len(cvals)) < 2:
        return None  # single runs carry no estimate of seed noise
    sds = [stats.describe(list(v.values())).get("stdev", 0.0) for v in (bvals, cvals)]
    return float(np.sqrt(np.mean(np.square(sds))))


def within_declared(details: dict[str, Any]) -> bool:
    """A declared "within noise" criterion is MET: the change is resolved but inside what the run declared
    it may move, so it is no failure (a WARN) and no regression."""
    dec = details.get("declared") or {}
    return dec.get("form") == "within_noise" and dec.get("result") == MET


def is_regression(c: Comparison) -> bool:
    """What --fail-on-regression fails on: MEASUREMENT_CHANGED, or SYSTEM_CHANGED (worse) beyond the
    min_effect when one is given, unless a declared "within noise" criterion is MET."""
    if c.verdict == MEASUREMENT_CHANGED:
        return True
    return c.verdict == SYSTEM_CHANGED and c.direction == "worse" and not within_declared(c.details)


def _divergence(metric: str, base: dict[int, float], cand: dict[int, float]) -> dict[str, Any] | None:
    """Which seeds of each side ended with a non-finite ``metric``, and what that says: the side
    whose runs diverged on a larger share of its seeds is the worse one (None: equal shares)."""
    bad_b = sorted(s for s, v in base.items() if not math.isfinite(v))
    bad_c = sorted(s for s, v in cand.items() if not math.isfinite(v))
    if not bad_b and not bad_c:
        return None
    share_b, share_c = len(bad_b) / len(base), len(bad_c) / len(cand)
    direction = "worse" if share_c > share_b else "better" if share_c < share_b else None
    parts = [f"{side} {metric} non-finite on {len(bad)} of {len(vals)} seeds ({_seed_list(bad)})"
             for side, bad, vals in (("candidate", bad_c, cand), ("baseline", bad_b, base)) if bad]
    text = "diverged: " + "; ".join(parts)
    if direction is None:
        text += ("; no finite values to compare" if len(bad_b) == len(base)
                 else "; the seeds that diverged on both sides are left out of the statistics")
    return {"direction": direction, "baseline_seeds": bad_b, "candidate_seeds": bad_c, "n_baseline": len(base),
            "n_candidate": len(cand), "text": text}


def _seed_list(seeds: list[int]) -> str:
    shown = ", ".join(map(str, seeds[:8]))
    return ("seed " if len(seeds) == 1 else "seeds ") + shown + (" ..." if len(seeds) > 8 else "")


def _coupling(pair: dict[str, Any], b: list[float], c: list[float]) -> dict[str, Any]:
    """How much the shared seeds tightened the comparison: the stdev of per-seed deltas against the
    stdev a difference of two independent runs would have (sqrt(var_b + var_c))."""
    independent = float(np.sqrt(np.var(b, ddof=1) + np.var(c, ddof=1)))
    gain = independent / pair["stdev_delta"] if pair["stdev_delta"] > 0 else None
    return {"stdev_delta": pair["stdev_delta"], "independent_stdev": independent, "gain": gain}


def _summaries(records: Sequence[RunRecord]) -> dict[str, Any]:
    """Per metric, the finite values described and the non-finite ones counted (``nonfinite``)."""
    metrics: dict[str, list[float]] = {}
    for r in records:
        for k, v in r.final.items():
            metrics.setdefault(k, []).append(v)
    out = {}
    for k, v in metrics.items():
        out[k] = {**stats.describe([x for x in v if math.isfinite(x)]),
                  "nonfinite": sum(not math.isfinite(x) for x in v)}
    return {"name_seeds": [r.seed for r in records], "metrics": out}


def _cost(base: Sequence[RunRecord], cand: Sequence[RunRecord]) -> dict[str, Any]:
    """Median examples/s of each side's runs that counted examples (None: none did), and the relative change."""
    rates = [[x for r in side if (x := r.throughput.get("examples_per_s", 0.0)) > 0] for side in (base, cand)]
    bm, cm = (float(np.median(x)) if x else None for x in rates)
    return {"examples_per_s": {"baseline": bm, "candidate": cm, "change": (cm - bm) / bm if bm and cm else None}}


def _declared(cand: Side, metric: str, test: dict[str, Any], spread: float | None, resolved: bool,
              direction: str | None, verdict: str, diverged: dict[str, Any] | None = None) -> dict[str, Any] | None:
    hyp, success = cand.info.get("hypothesis"), cand.info.get("success")
    if not hyp and not success:
        return None
    out: dict[str, Any] = {"hypothesis": hyp, "success": success,
                           "declared_before_runs": cand.info.get("declared_before")}
    if verdict == MEASUREMENT_CHANGED:
        return {**out, "result": "UNRESOLVED", "why": "the measurement changed; grade it under one eval contract"}
    try:
        crit = parse_criterion(success or "")
    except InvalidArgument as exc:
        return {**out, "result": "UNRESOLVED", "why": str(exc)}
    if crit.metric != metric:
        return {**out, "result": "UNRESOLVED",
                "why": f"the criterion is about {crit.metric}; rerun compare with --metric {crit.metric}"}
    if diverged is not None and diverged["direction"] is not None:
        return {**out, **_grade_diverged(crit.form, diverged)}
    graded = grade(crit, ci=(test["ci_low"], test["ci_high"]), noise_floor=spread, resolved=resolved, direction=direction)
    return {**out, **graded, "form": crit.form}


def _grade_diverged(form: str, diverged: dict[str, Any]) -> dict[str, Any]:
    """A criterion when one side diverged: its delta is not a number, so only the direction grades."""
    if form == "improves":
        return {"result": MET if diverged["direction"] == "better" else NOT_MET, "why": diverged["text"]}
    if diverged["direction"] == "worse":
        return {"result": NOT_MET, "why": f"{diverged['text']}; a non-finite delta meets no bound"}
    return {"result": UNRESOLVED, "why": f"{diverged['text']}; the delta from a diverged baseline is not a number"}


def _report(details: dict[str, Any], ident: dict[str, Any]) -> Comparison:
    verdict, metric = details["verdict"], details["metric"]
    findings = [Finding(link, "identity", Status.PASS if v["state"] == SAME else Status.WARN,
                        f"{v['baseline']} -> {v['candidate']} {v['state']}", {"fields": v["fields"]})
                for link, v in ident.items()]
    test = details["paired"] or details["unpaired"]
    delta = "-" if test["mean_delta"] is None else f"{test['mean_delta']:+.4g}"
    findings.append(Finding(metric, details["design"], Status.PASS if not details["resolved"] else Status.WARN,
                            f"mean delta {delta}, p={test['p_value']}", test))
    diverged = details["diverged"]
    if diverged is not None:
        findings.append(Finding(metric, "diverged runs", Status.FAIL if diverged["direction"] == "worse" else Status.WARN,
                                diverged["text"], diverged))
    div = None
    status = Status.PASS
    if verdict == MEASUREMENT_CHANGED:
        e = ident["eval_fingerprint"]
        div = Divergence("eval_fingerprint", "measurement.changed", e["baseline"], e["candidate"],
                         "the two sides were evaluated differently (" + ", ".join(e["fields"]) + "); "
                         "re-evaluate both under one eval contract before comparing the model")
        status = Status.FAIL
    elif verdict == SYSTEM_CHANGED:
        changed = [k for k in ("config", "code", "data", "env") if ident[k]["state"] == CHANGED]
        hint = "changed: " + (", ".join(changed) if changed else "no recorded field (look for an unrecorded cause)")
        if diverged is not None and diverged["direction"] is not None:
            div = Divergence(metric, f"system.changed.{details['direction']}", f"finite {metric} on every seed",
                             diverged["text"], hint)
        else:
            eff = details["min_effect"]
            expected = (f"within seed noise (baseline spread {details['noise_floor']['spread']:.4g})" if eff is None
                        else f"a difference inside the min effect +-{eff['threshold']:.4g} ({eff['what']})")
            div = Divergence(metric, f"system.changed.{details['direction']}", expected,
                             f"mean delta {test['mean_delta']:+.4g} (p={test['p_value']:.3g}, "
                             f"CI [{test['ci_low']:+.4g}, {test['ci_high']:+.4g}])" if eff else
                             f"mean delta {test['mean_delta']:+.4g} (p={test['p_value']:.3g})", hint)
        status = Status.FAIL if details["direction"] == "worse" and not within_declared(details) else Status.WARN
    return Comparison("compare", status, div, tuple(findings), side_effects="none (read-only)", details=details)
