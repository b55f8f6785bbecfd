"""Terminal layout of a gate and of its checks, in chapter 14's E10 shape:
``seed 999   val_loss 0.9924   threshold 1.0574   pass=True   margin +0.065``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._rich import Text

if TYPE_CHECKING:
    from .gate import Gate, GateCheck


def value_text(x: float | None) -> str:
    return "not finite" if x is None else f"{x:.4f}"


def margin_text(x: float | None) -> str:
    return "-inf (no finite value)" if x is None else f"{x:+.3g}"


def seed_text(seeds: Sequence[int]) -> str:
    parts, seeds = [], sorted(seeds)
    start = prev = seeds[0] if seeds else 0
    for s in [*seeds[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(parts) if seeds else "none"


def run_text(metric: str, threshold: float, r: dict[str, Any]) -> str:
    """The chapter's line: ``val_loss 0.9924   threshold 1.0574   pass=True   margin +0.065``."""
    text = (f"{metric} {value_text(r['value'])}   threshold {threshold:.4f}   pass={not r['exceeded']}   "
            f"margin {margin_text(r['margin'])}")
    return text + (f"   ({r['error']})" if r["error"] else "")


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def rule_text(g: Gate) -> str:
    order = "largest" if g.higher_is_better else "smallest"
    return (f"split conformal: threshold = the {ordinal(g.rank)} {order} of n={g.n} calibration values "
            f"(rank ceil((n+1)(1-alpha)) at alpha={g.alpha:g}); a run fails when {g.metric} is "
            f"{'below' if g.higher_is_better else 'above'} it")


def holdout_text(g: Gate) -> str:
    h = g.holdout
    if h is None:
        return "not validated on held-out healthy seeds; calibrate with holdout= (--holdout-seeds) before relying on it"
    verdict = "consistent with alpha" if h["consistent"] else f"MORE than alpha={g.alpha:g}: not calibrated"
    return (f"{h['false_alarms']}/{h['n']} held-out healthy seeds ({seed_text(h['seeds'])}) over the threshold: "
            f"rate {h['rate']:.3f}, {h['confidence']:.0%} CI [{h['ci_low']:.3f}, {h['ci_high']:.3f}] (exact); "
            f"p={h['p_value']:.3g} for rate > {g.alpha:g}: {verdict}")


def render_gate(g: Gate) -> Iterable[Text]:
    status = "CALIBRATED" if g.calibrated else "NOT VALIDATED" if g.holdout is None else "MISCALIBRATED"
    yield Text.assemble(("GATE  ", "bold"), f"{g.metric} {g.op} {g.threshold:.4f}   ",
                        (status, "green" if g.calibrated else "bold red" if g.holdout else "yellow"))
    yield Text(f"  rule        {rule_text(g)}")
    yield Text(f"  guarantee   a new healthy run (same workload, config, code, data, measurement and environment; "
               f"only the seed new) fails with probability <= {g.alpha:g} ({g.bound:.4f} = (n+1-rank)/(n+1)), "
               "averaged over calibrations")
    yield Text(f"  held out    {holdout_text(g)}")
    yield Text(f"  calibrated  {g.workload} sweep {g.calibration_sweep or '-'} seeds {seed_text(g.calibration_seeds)}  "
               f"config {g.config_hash}  eval fp {g.eval_fingerprint}  env {g.env_hash}  code {g.code_version}")


def render_check(c: GateCheck) -> Iterable[Text]:
    d = c.details
    for r in d["runs"][:20]:
        yield Text(f"  {r['label']:<10} {run_text(d['metric'], d['threshold'], r)}", style="red" if r["exceeded"] else "")
    if d["m"] > 20:
        yield Text(f"  ... {d['m'] - 20} more runs")
    if d["m"] > 1:
        yield Text(f"  {d['exceeded']}/{d['m']} over the threshold; {d['rule']}: p={d['p_value']:.3g}")
    meas = d["measurement"]
    yield Text(f"  eval fingerprint {meas['calibrated']} -> {', '.join(meas['observed']) or 'not recorded'}  {meas['state']}")
    g = d["gate"]
    yield Text(f"  gate: {d['metric']} {d['op']} {d['threshold']:.4f} (rank {g['rank']} of {g['n']} healthy seeds, "
               f"false alarms <= {d['alpha']:g}) from {g['workload']} config {g['config_hash']}"
               + {"passed": "", "none": "; NOT validated on held-out seeds",
                  "failed": "; FAILED held-out validation: its false alarms exceed alpha"}[d["validation"]],
               style="dim")
