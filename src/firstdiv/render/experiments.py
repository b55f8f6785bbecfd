"""Terminal layout of the lab's experiments: the factorial and curves reports, the gate and its checks, the
RNG audit (their computation lives in the lab). User strings go in as Text, never as markup."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._format import num, p_text, seed_text, short
from .._rich import Table, Text
from ..report import Status

_MAX_ROWS = 60  # longer curves show every k-th epoch plus the epochs the report names


def _state(resolved: bool, direction: str | None) -> Text:
    return Text(f"RESOLVED ({direction})", style="bold yellow") if resolved else Text("not resolved", style="cyan")


def _warnings(findings: Iterable[Any], skip: tuple[str, ...] = ()) -> Iterable[Text]:
    for f in findings:
        if f.status is Status.WARN and not f.where.startswith(skip):
            yield Text(f"  WARN {f.where}: {f.message}", style="yellow")


# -- factorial ---------------------------------------------------------------------------------


def render_factorial_body(f: Any) -> Iterable[Any]:
    d = f.details
    better = "higher" if d["higher_is_better"] else "lower"
    yield Text(f"2x2 on {d['workload']}   {d['metric']} ({better} is better)   {len(d['seeds'])} shared seeds", style="bold")
    for label in ("A", "B"):
        fac = d["factors"][label]
        changes = ", ".join(f"{k}: {short(a)} -> {short(b)}" for k, (a, b) in fac["changes"].items())
        yield Text(f"  {label}  {fac['spec']}   ({changes})")
    yield Text("")
    yield Text("CELLS   (median [min..max] over the shared seeds)", style="bold")
    for cell in ("base", "A", "B", "AB"):
        c = d["cells"][cell]
        values = f"{num(c.get('median'))} [{num(c.get('min'))}..{num(c.get('max'))}]"
        yield Text(f"  {cell:<6}{values}   {c['sweep']}  ({c['ran']} ran, {c['reused']} reused)")
    if d["effects"]:
        yield Text("")
        yield Text(f"EFFECTS   (mean of per-seed contrasts, {1 - d['alpha']:.0%} CI, one-sample t over seeds)", style="bold")
        for name, e in d["effects"].items():
            label = "interaction A x B" if name == "interaction" else f"main effect {name}"
            line = Text(f"  {label:<19}{e['mean']:+.4f}  stdev {e['stdev']:.4f}  CI [{e['ci_low']:+.4f}, "
                        f"{e['ci_high']:+.4f}]  p={p_text(e['p_value'])}  ")
            yield line.append_text(_state(e["resolved"], e["direction"]))
        if d["effects"]["interaction"]["resolved"]:
            s = d["simple_effects"]
            yield Text("  simple effects: " + ", ".join(f"{k} {v['mean']:+.4f}" for k, v in s.items()))
    yield from _warnings(f.findings, skip=("main effect", "interaction"))
    yield Text("")
    yield Text.assemble(("SUMMARY  ", "bold"), d["summary"])


# -- curves ------------------------------------------------------------------------------------


def render_curves_body(c: Any) -> Iterable[Any]:
    d = c.details
    better = "higher" if d["higher_is_better"] else "lower"
    pairing = (f"({len(d['shared_seeds'])} shared seeds: paired per epoch)" if d["design"] == "paired"
               else "(seeds do not match: unpaired per epoch, Welch t across runs)")
    yield Text(f"RUN {d['candidate_name']}   BASELINE {d['baseline_name']}   {pairing}", style="bold")
    yield Text(f"  {d['metric']} ({better} is better)   epochs: baseline {_lens(d, 'baseline')}, "
               f"candidate {_lens(d, 'candidate')}")
    yield Text("")
    yield Text("PER EPOCH   (median, interquartile range, min..max over seeds; delta = candidate - baseline)",
               style="bold")
    yield _epoch_table(d)
    yield Text("")
    yield from _separation_lines(d)
    yield Text("")
    yield from _endpoint_lines(d)
    yield Text("")
    yield from _policy_lines(d)
    yield from _warnings(c.findings, skip=("checkpoint policy ", "per epoch"))
    yield Text("")
    v = d["verdict"]
    yield Text.assemble(("VERDICT  ", "bold"), v["text"] + (" (policy chosen after the runs)" if v["post_hoc"] else ""))


def _lens(d: dict[str, Any], side: str) -> str:
    return "/".join(map(str, d["budget"]["epochs"][side]))


def _shown_epochs(d: dict[str, Any], length: int) -> list[int]:
    if length <= _MAX_ROWS:
        return list(range(length))
    sep, shape = d["separation"], d["shape"]
    named = {sep["first_resolved"], sep["from_epoch"], (sep["largest"] or {}).get("epoch"), length - 1,
             *(s["best_epoch"] for s in shape.values()), *(s["final_epoch"] for s in shape.values())}
    step = -(-length // _MAX_ROWS)
    return sorted({e for e in range(0, length, step)} | {e for e in named if e is not None})


def _epoch_table(d: dict[str, Any]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("epoch", "baseline", "IQR", "range", "candidate", "IQR", "range", "delta", ""):
        table.add_column(col, justify="right" if col in ("epoch", "delta") else "left", no_wrap=True)
    bands, rows = d["bands"], {r["epoch"]: r for r in d["per_epoch"]}
    length = max(len(bands["baseline"]), len(bands["candidate"]))
    for e in _shown_epochs(d, length):
        cells = []
        for side in ("baseline", "candidate"):
            b = bands[side][e] if e < len(bands[side]) else None
            cells += ([num(b["median"]), f"{num(b['q25'])}..{num(b['q75'])}", f"{num(b['min'])}..{num(b['max'])}"]
                      if b else ["", "", ""])
        r = rows.get(e)
        delta = f"{r['mean_delta']:+.4f}" if r and r["mean_delta"] is not None else ""
        table.add_row(str(e), *cells, delta, "*" if r and r["resolved"] else "")
    return table


def _separation_lines(d: dict[str, Any]) -> Iterable[Text]:
    sep, conf = d["separation"], f"{1 - d['alpha']:.0%}"
    yield Text(f"SEPARATION   (* = {conf} CI of the per-epoch delta excludes 0)", style="bold")
    n = sep["epochs_compared"]
    if not sep["resolved_epochs"]:
        yield Text(f"  no epoch of {n} compared resolves a difference")
    else:
        persists = (f"stays resolved from epoch {sep['from_epoch']} to the last shared epoch {n - 1} ({sep['direction']})"
                    if sep["from_epoch"] is not None else "does not stay resolved to the last shared epoch")
        yield Text(f"  first resolved at epoch {sep['first_resolved']}; {persists}; "
                   f"{len(sep['resolved_epochs'])}/{n} epochs resolved")
    big = sep["largest"]
    if big is not None and big["ci_low"] is not None:
        yield Text(f"  largest separation at epoch {big['epoch']}: {big['mean_delta']:+.4f}  {conf} CI "
                   f"[{big['ci_low']:+.4f}, {big['ci_high']:+.4f}]  p={p_text(big['p_value'])}")
    for side in ("baseline", "candidate"):
        s = d["shape"][side]
        yield Text(f"  median curve, {side:<9}: best {num(s['best_value'])} at epoch {s['best_epoch']}, "
                   f"final {num(s['final_value'])} at epoch {s['final_epoch']}")


def _endpoint_lines(d: dict[str, Any]) -> Iterable[Text]:
    yield Text("ENDPOINTS   (per seed; median value [epochs] baseline -> candidate; best = post-hoc per-seed best)",
               style="bold")
    for name, e in d["endpoints"].items():
        line = Text(f"  {name:<5}{_sel(e['baseline'])}  ->  {_sel(e['candidate'])}   delta {e['mean_delta']:+.4f}  ")
        line.append_text(_state(e["resolved"], e["direction"]))
        if name == "best" and not d["budget"]["equal"]:
            line.append(f"   [budgets differ: {_lens(d, 'baseline')} vs {_lens(d, 'candidate')} epochs]", style="yellow")
        yield line


def _sel(side: dict[str, Any]) -> str:
    ep = side["epoch"]
    epochs = f"{ep['min']:.0f}" if ep["min"] == ep["max"] else f"{ep['min']:.0f}..{ep['max']:.0f}"
    return f"{num(side['value']['median'])} [{epochs}]"


def _policy_lines(d: dict[str, Any]) -> Iterable[Text]:
    p, s, conf = d["policy"], d["selected"], f"{1 - d['alpha']:.0%}"
    origin = {"override": "chosen after the runs: post hoc", "default": "none declared: last epoch",
              "declared": "declared before the runs"}.get(p["source"], p["source"])
    yield Text(f"CHECKPOINT POLICY   {d['verdict']['policy']}   ({origin})", style="bold")
    for side in ("baseline", "candidate"):
        yield Text(f"  {side:<10}{_sel(s[side])}   epochs chosen per seed: {s[side]['epochs']}")
    t = s["test"]
    ci = f"  {conf} CI [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]  p={p_text(t['p_value'])}" if t["ci_low"] is not None else ""
    yield Text(f"  {s['design']} delta of the selected values: {s['mean_delta']:+.4f}{ci}  ").append_text(
        _state(s["resolved"], s["direction"]))


# -- gate --------------------------------------------------------------------------------------


def render_gate(g: Any, rule: str, holdout: str) -> Iterable[Text]:
    """A Gate, in chapter 14's E10 shape; ``rule`` and ``holdout`` are the gate's own wording of its rule
    and of its held-out validation."""
    status = "CALIBRATED" if g.calibrated else "NOT VALIDATED" if g.holdout is None else "MISCALIBRATED"
    yield Text.assemble(("GATE  ", "bold"), f"{g.metric} {g.op} {g.threshold:.4f}   ",
                        (status, "green" if g.calibrated else "bold red" if g.holdout else "yellow"))
    yield Text(f"  rule        {rule}")
    yield Text(f"  guarantee   a new healthy run (same workload, config, code, data, measurement and environment; "
               f"only the seed new) fails with probability <= {g.alpha:g} ({g.bound:.4f} = (n+1-rank)/(n+1)), "
               "averaged over calibrations")
    yield Text(f"  held out    {holdout}")
    yield Text(f"  calibrated  {g.workload} sweep {g.calibration_sweep or '-'} seeds {seed_text(g.calibration_seeds)}  "
               f"config {g.config_hash}  eval fp {g.eval_fingerprint}  env {g.env_hash}  code {g.code_version}")


def render_check(c: Any, run_text: Callable[[str, float, dict[str, Any]], str]) -> Iterable[Text]:
    """A GateCheck: ``run_text(metric, threshold, run)`` is the gate's line for one run
    (``val_loss 0.9924   threshold 1.0574   pass=True   margin +0.065``)."""
    d = c.details
    for r in d["runs"][:20]:
        yield Text(f"  {r['label']:<10} {run_text(d['metric'], d['threshold'], r)}", style="red" if r["exceeded"] else "")
    if d["m"] > 20:
        yield Text(f"  ... {d['m'] - 20} more runs")
    if d["m"] > 1:
        yield Text(f"  {d['exceeded']}/{d['m']} over the threshold; {d['rule']}: p={d['p_value']:.3g}")
    e = d.get("min_effect")
    if e:
        yield Text(f"  min effect {e['spec']} ({e['what']}) = {e['value']:.4g} from the calibration median "
                   f"{e['median']:.4f}: threshold {e['calibrated_threshold']:.4f} -> {e['threshold']:.4f}"
                   + ("" if e["decides"] else " (the calibrated threshold is already beyond it)"))
    meas = d["measurement"]
    yield Text(f"  eval fingerprint {meas['calibrated']} -> {', '.join(meas['observed']) or 'not recorded'}  {meas['state']}")
    g = d["gate"]
    yield Text(f"  gate: {d['metric']} {d['op']} {d['threshold']:.4f} (rank {g['rank']} of {g['n']} healthy seeds, "
               f"false alarms <= {d['alpha']:g}) from {g['workload']} config {g['config_hash']}"
               + {"passed": "", "none": "; NOT validated on held-out seeds",
                  "failed": "; FAILED held-out validation: its false alarms exceed alpha"}[d["validation"]],
               style="dim")


# -- RNG audit ---------------------------------------------------------------------------------


def render_rng_audit(report: Any, row_texts: Callable[[dict[str, Any]], list[str]]) -> Iterable[Any]:
    """An RngAuditReport: the chapter's table; ``row_texts(row)`` is the audit's own wording of a row's cells."""
    d = report.details
    yield Text(f"  {d['source']}; {d['items']} items per pass, two passes each after torch.manual_seed({d['seed']})")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("", *d["columns"]):
        table.add_column(col)
    for row in d["rows"]:
        styled = [Text(t, style="green" if t == "REPRODUCES" else "dim" if t == "not drawn" else "bold red")
                  for t in row_texts(row)]
        table.add_row(Text(row["rng"]), *styled)
    yield table
    if not report.ok or not all(c["ok"] for row in d["rows"] for c in row["cells"].values()):
        verdict = "fixes every stream" if d["repair_ok"] else "does NOT fix every stream (see the table)"
        yield Text(f"  the repair, applied and verified on copies, {verdict}:", style="bold")
        yield Text("    " + d["repair_code"].replace("\n", "\n    "))
