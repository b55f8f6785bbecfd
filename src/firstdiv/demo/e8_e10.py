"""`firstdiv demo`, continued: chapter 14's E8 (curves), E9 (bisection) and E10 (a calibrated gate)."""

from __future__ import annotations

from typing import Any

from .._rich import Console, Text
from ..lab.bisect import bisect
from ..lab.store import Store
from ..lab.sweep import sweep
from ._console import BACKEND, heading, say

#: Six plausible changes at once, one of which (lr x10) is the regression.
E9_CANDIDATE = "optimizer=adam,weight_decay=0.005,dropout=0.35,lr=0.2,hidden=28,epochs=18"


def e9(wl: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    heading(console, "E9 — Bisection", "six changes at once regressed badly: which one, and does it reproduce alone?")
    report = bisect(wl, {}, E9_CANDIDATE, "0-7", store=st, progress=progress)
    say(console, report)
    d = report.details
    return {"culprit": d["culprit"], "kind": d["kind"], "margin": d["margin"], "probes": d["probes"],
            "changes": d["changes"], "conclusion": d["conclusion"]}


def _curve_line(label: str, curve: list[float]) -> str:
    best = min(range(len(curve)), key=curve.__getitem__)
    head = " ".join(f"{v:.2f}" for v in curve[:16])
    return f"  {label}: {head} ...\n     min {curve[best]:.4f} at epoch {best}, final {curve[-1]:.4f}"


def e8(wl: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    from ..lab.curves import curves

    heading(console, "E8 — Curves, not endpoints",
             "baseline vs a lower learning rate run twice as long: do similar endpoints mean similar runs?")
    a = sweep(wl, "0-7", name="demo-e8-baseline", store=st, checkpoint_policy="best:patience=5", progress=progress, backend=BACKEND)
    b = sweep(wl, "0-7", sets=["lr=0.01", "epochs=40"], name="demo-e8-lr0.01-40ep", store=st,
              checkpoint_policy="best:patience=5", progress=progress, backend=BACKEND)
    declared = curves(a, b, metric="val_loss")
    posthoc = curves(a, b, metric="val_loss", policy="best")
    d, p = declared.details, posthoc.details
    sep, ends = d["separation"], d["endpoints"]
    a0 = next(r for r in a.records if r.seed == 0).curves["val_loss"]
    b0 = next(r for r in b.records if r.seed == 0).curves["val_loss"]
    budget = [f.message for f in posthoc.findings if f.where == "epoch budget"]
    say(console, Text("Seed 0:\n" + _curve_line("A", a0) + "\n" + _curve_line("B", b0)),
         Text(f"  8 shared seeds: last epoch delta {ends['last']['mean_delta']:+.4f} "
              f"({'resolved' if ends['last']['resolved'] else 'not resolved'}); best-epoch delta "
              f"{ends['best']['mean_delta']:+.4f} ({'resolved' if ends['best']['resolved'] else 'not resolved'})"),
         Text(f"  trajectories: {len(sep['resolved_epochs'])}/{sep['epochs_compared']} shared epochs differ resolvably, "
              f"first at epoch {sep['first_resolved']}, largest at epoch {sep['largest']['epoch']} "
              f"({sep['largest']['mean_delta']:+.4f})"),
         Text(f"  policy declared before the runs, {d['verdict']['text']}"),
         Text(f"  post-hoc minimum over unequal budgets, {p['verdict']['text']}"
              + (f"\n  WARN {budget[0]}" if budget else "")))
    return {"separation": sep, "endpoints": {k: {x: v[x] for x in ("mean_delta", "resolved", "direction")}
                                             for k, v in ends.items()},
            "declared_policy": d["verdict"], "post_hoc_policy": p["verdict"], "budget_warning": bool(budget),
            "shape": d["shape"], "best_epochs": {side: d["endpoints"]["best"][side]["epochs"]
                                                 for side in ("baseline", "candidate")}}


def e10(wl: Any, base: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    from ..lab.gate import Gate

    heading(console, "E10 — A policy guardrail from baseline variation",
             "what threshold fails a broken run but passes a healthy one, with a false-alarm rate we can state?")
    first = sweep(wl, "0-19", name="demo-gate-calibration-20", store=st, progress=progress, backend=BACKEND)
    gate20 = Gate.calibrate(first, alpha=0.05, holdout="20-39", store=st)
    second = sweep(wl, "0-39", name="demo-gate-calibration-40", store=st, progress=progress, backend=BACKEND)
    gate = Gate.calibrate(second, alpha=0.05, holdout="40-59", store=st)
    healthy = gate.check(sweep(wl, "999", name="demo-gate-healthy-999", store=st, progress=progress, backend=BACKEND))
    broken = gate.check(sweep(wl, "999", sets=["lr=0.2"], name="demo-gate-lr10x-999", store=st, progress=progress, backend=BACKEND))
    h20, h40 = gate20.holdout, gate.holdout
    say(console,
         Text(f"  rule: split-conformal order statistic, alpha {gate.alpha}: a healthy run fails with probability "
              f"<= {gate.alpha} (averaged over calibrations)"),
         Text(f"  calibrated on seeds 0-19: threshold {gate20.threshold:.4f}; held-out seeds 20-39: "
              f"{h20['false_alarms']}/{h20['n']} false alarms, 95% CI [{h20['ci_low']:.3f}, {h20['ci_high']:.3f}]"
              f"{' -> FAILS validation: recalibrate on more seeds' if not gate20.calibrated else ''}"),
         Text(f"  calibrated on seeds 0-39: threshold {gate.threshold:.4f}; held-out seeds 40-59: "
              f"{h40['false_alarms']}/{h40['n']} false alarms, 95% CI [{h40['ci_low']:.3f}, {h40['ci_high']:.3f}]"
              f"{'' if gate.calibrated else ' -> FAILS validation'}"),
         Text(f"  new healthy run (seed 999):    val_loss {healthy.details['runs'][0]['value']:.4f}   threshold "
              f"{gate.threshold:.4f}   pass={healthy.ok}   margin {healthy.margin:+.4f}"),
         Text(f"  new run with lr 10x (seed 999): val_loss {broken.details['runs'][0]['value']:.4f}   threshold "
              f"{gate.threshold:.4f}   pass={broken.ok}  margin {broken.margin:+.4f}"))
    return {"gate_20": {"threshold": gate20.threshold, "holdout": h20, "calibrated": gate20.calibrated},
            "gate_40": {"threshold": gate.threshold, "holdout": h40, "calibrated": gate.calibrated},
            "healthy": {"pass": healthy.ok, "margin": healthy.margin}, "lr10x": {"pass": broken.ok, "margin": broken.margin}}
