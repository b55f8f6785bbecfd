"""`firstdiv demo`: chapter 14's experiments E1, E2, E5, E6 and E7 on ``builtin:mlp``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._rich import Console, Table, Text
from ..lab import builtin_mlp as mlp
from ..lab import stats
from ..lab.compare import compare
from ..lab.record import Recorder, short_hash
from ..lab.store import Store
from ..lab.sweep import sweep
from ..lab.workload import resolve
from ..render.sweeps import noise_floor_table
from ._console import BACKEND, heading, say

SEEDS = "0-11"


def run_demo(store: Any = None, *, progress: bool = True, console: Console | None = None) -> dict[str, Any]:
    """Run the experiments in order, printing each in the chapter's layout; return their numbers."""
    wl = resolve("builtin:mlp")
    with Store(store) as st:
        out: dict[str, Any] = {"store": str(st.path)}
        base = sweep(wl, SEEDS, name="demo-baseline", store=st, progress=progress, backend=BACKEND)
        out["E1"] = _e1(base, console)
        out["E2"] = _e2(wl, base, console)
        out["E5"] = _e5(wl, base, st, console, progress)
        out["E6"] = _e6(wl, base, st, console, progress)
        out["E7"] = _e7(wl, base, st, console, progress)
        from . import e8_e10  # E8-E10 live in their own module

        out["E8"] = e8_e10.e8(wl, st, console, progress)
        out["E9"] = e8_e10.e9(wl, st, console, progress)
        out["E10"] = e8_e10.e10(wl, base, st, console, progress)
    return out


def _e1(base: Any, console: Console | None) -> dict[str, Any]:
    heading(console, "E1 — The noise floor", "how much do two runs of the IDENTICAL configuration differ, "
             "from the training seed alone?")
    summary = base.summary()
    say(console, noise_floor_table(summary, f"identical config, {len(base.records)} seeds"),
         Text(f"A single-run difference smaller than the val_loss spread ({summary['val_loss']['spread']:.4f}) "
              "is not evidence of a regression."))
    return {"summary": summary, "seeds": [r.seed for r in base.records],
            "val_loss": {r.seed: r.final["val_loss"] for r in base.records}}


def _fit(config: dict[str, Any], seed: int) -> tuple[Recorder, list[torch.Tensor], mlp.Data]:
    rec = Recorder(seed, config)
    saved = torch.get_num_threads()
    torch.set_num_threads(config["threads"])
    try:
        params, data = mlp.fit(seed, config, rec)
    finally:
        torch.set_num_threads(saved)
    return rec, params, data


def _first_diff(a: list[float], b: list[float]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def _e2(wl: Any, base: Any, console: Console | None) -> dict[str, Any]:
    heading(console, "E2 — Same seed, same code, twice", "what does setting the seed actually buy?")
    cfg = wl.config()
    rec_a, pa, _ = _fit(cfg, 0)
    rec_b, pb, _ = _fit(cfg, 0)
    rec_c, pc, _ = _fit(wl.config(sets=["threads=2"]), 0)
    va, vb, vc = ([r["val_loss"] for r in rec.rows] for rec in (rec_a, rec_b, rec_c))
    same_ab = va == vb and all(torch.equal(x, y) for x, y in zip(pa, pb))
    same_ac = va == vc and all(torch.equal(x, y) for x, y in zip(pa, pc))
    stored = next((r for r in base.records if r.seed == 0), None)
    matches_store = stored is not None and stored.curves["val_loss"] == va
    spread = base.summary()["val_loss"]["spread"]
    gap = max(abs(x - y) for x, y in zip(va, vc))
    result = {
        "one_thread": {"bit_identical": same_ab, "final_a": va[-1], "final_b": vb[-1]},
        "matches_recorded_run": matches_store,
        "two_threads": {"bit_identical": same_ac, "first_diverging_epoch": _first_diff(va, vc),
                        "max_abs_diff": gap, "relative_to_noise_floor": gap / spread if spread else None,
                        "final": vc[-1]},
    }
    say(console,
         Text(f"  run A (1 thread) vs run B (1 thread), same seed:\n"
              f"    val curves and parameters bit-identical: {same_ab}\n"
              f"    final val loss  A {va[-1]:.6f}   B {vb[-1]:.6f}\n"
              f"    identical to the seed-0 run recorded in E1: {matches_store}"),
         Text(f"  run A (1 thread) vs run C (2 threads), same seed:\n"
              f"    bit-identical: {same_ac}   first diverging epoch: {result['two_threads']['first_diverging_epoch']}\n"
              f"    max |val loss difference| {gap:.3g} = {gap / spread if spread else 0:.3g}x the E1 spread"
              + ("\n    (on this machine the workload's ops are too small to be split across threads)" if same_ac else "")))
    return result


def _paired_table(base: Any, cand: Any) -> tuple[Table, list[float]]:
    b = {r.seed: r.final["val_loss"] for r in base.records}
    c = {r.seed: r.final["val_loss"] for r in cand.records}
    table = Table(box=None, pad_edge=False, show_header=False)
    deltas = []
    for seed in sorted(set(b) & set(c)):
        deltas.append(c[seed] - b[seed])
        table.add_row(f"  seed {seed:>2}:", f"{b[seed]:.4f} -> {c[seed]:.4f}", f"{c[seed] - b[seed]:+.4f}")
    return table, deltas


def _e5(wl: Any, base: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    heading(console, "E5 — Paired comparison", "validation label noise 0.30 -> 0.29: visible unpaired? paired?")
    cand = sweep(wl, SEEDS, sets=["val_noise=0.29"], name="demo-val-noise-0.29", store=st, progress=progress, backend=BACKEND)
    cmp = compare(base, cand, metric="val_loss")
    bs, cs = stats.describe(base.values("val_loss")), stats.describe(cand.values("val_loss"))
    unp, pair = cmp.unpaired, cmp.paired
    table, _ = _paired_table(base, cand)
    say(console,
         Text(f"  Unpaired:  A median {bs['median']:.4f} [{bs['min']:.4f}..{bs['max']:.4f}]   "
              f"B median {cs['median']:.4f} [{cs['min']:.4f}..{cs['max']:.4f}]\n"
              f"             difference of means {unp['mean_delta']:+.4f}, Welch p={unp['p_value']:.3g}, "
              f"spread of either side ~{max(bs['stdev'], cs['stdev']):.4f} (stdev)"),
         Text("  Paired:"), table,
         Text(f"  mean per-seed delta: {pair['mean_delta']:+.4f}   stdev of deltas: {pair['stdev_delta']:.4f}\n"
              f"  {pair['better']}/{pair['n']} seeds improved   |mean| / stdev = "
              f"{abs(pair['mean_delta']) / pair['stdev_delta'] if pair['stdev_delta'] else float('inf'):.1f}   "
              f"paired t p={pair['p_value']:.3g}"),
         Text(f"  verdict: {cmp.verdict}" + (f" ({cmp.direction})" if cmp.direction else "")
              + f"; data identity {cmp.identity['data']}"))
    return {"unpaired": unp, "paired": pair, "baseline": bs, "candidate": cs, "verdict": cmp.verdict,
            "direction": cmp.direction, "identity": cmp.identity,
            "unpaired_stdev": max(bs["stdev"], cs["stdev"]), "paired_stdev": pair["stdev_delta"]}


E6_VARIANTS = (
    ("canonical", {}),
    ("model left in train() mode (dropout on)", {"eval_mode": "train"}),
    ("a different validation subset (500 of 1000)", {"eval_subset": 500}),
    ("inputs scaled x1.15 on the eval path only", {"eval_input_scale": 1.15}),
    ("cross_entropy reduction='sum'", {"eval_reduction": "sum"}),
)


def _e6(wl: Any, base: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    heading(console, "E6 — The broken benchmark", "one trained model, evaluated five ways: what moves?")
    cfg = wl.config()
    _, params, data = _fit(cfg, 0)
    rows = []
    canonical_fp = short_hash(mlp.eval_contract(cfg))
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("evaluation variant", "val loss", "val acc", "fingerprint", "== canonical?"):
        table.add_column(col, justify="left" if col == "evaluation variant" else "right")
    for label, change in E6_VARIANTS:
        vcfg = dict(cfg, **change)
        gen = mlp.generators(0)["eval"]
        m = mlp.evaluate(params, data, vcfg, gen)
        fp = short_hash(mlp.eval_contract(vcfg))
        rows.append({"variant": label, "change": change, **m, "fingerprint": fp, "same_as_canonical": fp == canonical_fp})
        table.add_row(label, f"{m['val_loss']:.4f}", f"{m['val_acc']:.4f}", fp, "-" if not change else str(fp == canonical_fp))
    train_mode = sweep(wl, SEEDS, sets=["eval_mode=train"], name="demo-eval-train-mode", store=st, progress=progress, backend=BACKEND)
    cmp = compare(base, train_mode, metric="val_loss")
    say(console, table,
         Text(f"  fingerprint covers: {', '.join(sorted(mlp.eval_contract(cfg)))}"),
         Text(f"  12-seed sweep evaluated in train() mode vs E1 baseline: verdict {cmp.verdict} "
              f"(eval fields changed: {', '.join(cmp.details['identity_detail']['eval_fingerprint']['fields'])})"))
    return {"variants": rows, "fields": sorted(mlp.eval_contract(cfg)), "train_mode_sweep_verdict": cmp.verdict,
            "n_val": cfg["n_val"]}


def _e7(wl: Any, base: Any, st: Store, console: Console | None, progress: bool) -> dict[str, Any]:
    heading(console, "E7 — A real regression, diagnosed", "learning rate x10, and labels shifted by one in the loader")
    lr10 = sweep(wl, SEEDS, sets=["lr=0.2"], name="demo-lr10x", store=st, progress=progress, backend=BACKEND,
                 hypothesis="raising the learning rate speeds convergence without materially worsening validation loss",
                 success="val_loss delta within noise")
    cmp = compare(base, lr10, metric="val_loss")
    say(console, Text("Detect — seed sweeps and the comparison report:"), cmp)
    b0 = next(r for r in base.records if r.seed == 0)
    l0 = next(r for r in lr10.records if r.seed == 0)
    epochs = list(range(0, len(b0.curves["val_loss"]), 3))
    curves = Table(box=None, pad_edge=False, header_style="bold")
    curves.add_column("epoch")
    for e in epochs:
        curves.add_column(str(e), justify="right")
    curves.add_row("baseline", *(f"{b0.curves['val_loss'][e]:.3f}" for e in epochs))
    curves.add_row("lr x10", *(f"{l0.curves['val_loss'][e]:.3f}" for e in epochs))
    say(console, Text("Explain 1 — learning curves and gradient norms, seed 0:"), curves,
         Text(f"  baseline gradient norm: median {b0.grad_norm['median']:.3f}   max {b0.grad_norm['max']:.3f}\n"
              f"  lr x10   gradient norm: median {l0.grad_norm['median']:.3f}   max {l0.grad_norm['max']:.3f}"))
    shift = sweep(wl, SEEDS, sets=["label_shift=1"], name="demo-label-shift", store=st, progress=progress, backend=BACKEND)
    cmp_shift = compare(base, shift, metric="val_loss")
    flips = _flips(wl)
    say(console, Text("Explain 2 — labels shifted by one in the loader, per-example evidence (seed 0):"),
         Text(f"  baseline val loss  {flips['baseline_val_loss']:.4f}        shifted val loss  "
              f"{flips['shifted_val_loss']:.4f}   ({flips['shifted_val_loss'] - flips['baseline_val_loss']:+.4f})\n"
              f"  examples correct before, wrong after: {flips['correct_before_wrong_after']} / {flips['n']}\n"
              f"  shifted-model accuracy: {flips['shifted_acc']:.4f}   (baseline {flips['baseline_acc']:.4f})\n"
              f"  12-seed comparison: {cmp_shift.verdict} ({cmp_shift.direction}), "
              f"{cmp_shift.details['noise_ratio']:.1f}x the noise floor"))
    return {"lr10": _cmp_numbers(cmp), "label_shift": _cmp_numbers(cmp_shift), "flips": flips,
            "curves": {"epochs": epochs, "baseline": b0.curves["val_loss"], "lr10": l0.curves["val_loss"]},
            "grad_norm": {"baseline": b0.grad_norm, "lr10": l0.grad_norm}}


def _cmp_numbers(cmp: Any) -> dict[str, Any]:
    d = cmp.details
    return {k: d[k] for k in ("verdict", "direction", "identity", "paired", "noise_ratio", "noise_floor", "declared",
                              "baseline", "candidate", "cost")}


def _flips(wl: Any) -> dict[str, Any]:
    cfg = wl.config()
    _, p_base, data = _fit(cfg, 0)
    _, p_shift, _ = _fit(wl.config(sets=["label_shift=1"]), 0)
    with torch.no_grad():
        right_base = (mlp.forward(p_base, data.x_val, 0.0, None).argmax(1) == data.y_val).numpy()
        right_shift = (mlp.forward(p_shift, data.x_val, 0.0, None).argmax(1) == data.y_val).numpy()
    eval_gen = mlp.generators(0)["eval"]
    mb, ms = mlp.evaluate(p_base, data, cfg, eval_gen), mlp.evaluate(p_shift, data, cfg, eval_gen)
    return {"n": int(right_base.size), "correct_before_wrong_after": int(np.sum(right_base & ~right_shift)),
            "baseline_val_loss": mb["val_loss"], "shifted_val_loss": ms["val_loss"],
            "baseline_acc": mb["val_acc"], "shifted_acc": ms["val_acc"]}
