"""Terminal layout of the lab's results, in the chapter's shapes: the noise-floor table, the sweep, the RUN block
of a comparison, bisection, the determinism audit and the A/A self-check."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._format import num, p_text, short
from .._rich import Table, Text


def noise_floor_table(summary: dict[str, dict[str, float]], title: str = "") -> Table:
    table = Table(title=title or None, box=None, header_style="bold", pad_edge=False, title_justify="left")
    for col in ("metric", "median", "stdev", "min", "max", "spread", "n"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for metric, s in summary.items():
        if not s.get("n"):
            continue
        table.add_row(metric, *(num(s[k]) for k in ("median", "stdev", "min", "max", "spread")), str(s["n"]))
    return table


def render_sweep(result: Any, diverged_text: Callable[[Any], str]) -> Iterable[Any]:
    """A SweepResult; ``diverged_text(record)`` words a diverged run (the lab's wording)."""
    s = result.sweep
    yield Text.assemble(("SWEEP ", "bold"), f"{s.name}  ", (f"[{s.id}]", "dim"), f"  {s.workload}  ",
                        f"config {s.info.get('config_hash')}  env {s.info.get('env_hash')}  "
                        f"code {s.info.get('code', {}).get('version')}")
    diverged = result.diverged
    yield Text(f"  {len(result.records)} runs: {len(result.ran)} ran now, {len(result.reused)} reused from "
               f"{result.store_path}" + (f", {len(result.failed)} FAILED" if result.failed else "")
               + (f", {len(diverged)} DIVERGED" if diverged else ""))
    yield noise_floor_table(result.summary(), f"identical config, {len(result.records)} seeds")
    for r in result.failed:
        yield Text(f"  seed {r.seed} FAILED: {r.error}", style="bold red")
    for r in sorted((*result.records, *result.failed), key=lambda r: r.seed):
        for note in r.extra.get("notes", ()):  # what the run's reading skipped or ended (a command's report lines)
            yield Text(f"  seed {r.seed}: {note}", style="yellow")
    for r in diverged:
        yield Text(f"  seed {r.seed} DIVERGED: {diverged_text(r).removeprefix('diverged: ')}", style="bold red")
    if len(result.records) == 1:
        yield Text("  one seed gives no noise floor: rerun with --seeds 0-11", style="yellow")


def _ident_rows(c: Any) -> Iterable[Text]:
    labels = {"config": "config hash", "eval_fingerprint": "eval fingerprint", "env": "env hash",
              "code": "code version", "data": "data identity"}
    for key, label in labels.items():
        v = c.details["identity_detail"][key]
        style = "green" if v["state"] == "SAME" else "bold yellow"
        line = Text(f"  {label:<17}{short(v['baseline'])}  ->  {short(v['candidate'])}   ")
        line.append(v["state"], style=style)
        yield line
        for field, (a, b) in list(v["fields"].items())[:8]:
            yield Text(f"      {field}: {short(a)} -> {short(b)}")


def _design_text(d: dict[str, Any], shared: int) -> str:
    """How the seeds were used; ``shared`` counts the shared seeds with a finite value on both sides."""
    if d["design"] == "paired":
        return f"{shared} shared seeds"
    finite = " with finite values" if d.get("diverged") else ""
    if shared == 1:
        return f"1 shared seed{finite}: too few to pair, unpaired"
    return f"no shared seeds{finite}: unpaired"


def render_comparison_body(c: Any) -> Iterable[Any]:
    d = c.details
    metric = d["metric"]
    shared = len(d["shared_seeds"])
    yield Text(f"RUN {d['candidate_name']}   BASELINE {d['baseline_name']}   ({_design_text(d, shared)})", style="bold")
    yield Text("")
    yield Text("IDENTITY", style="bold")
    yield from _ident_rows(c)
    yield Text("")
    yield Text("CORRECTNESS   (median [min..max])", style="bold")
    bm, cm = d["baseline"]["metrics"], d["candidate"]["metrics"]
    for name in [m for m in bm if m in cm and m != "examples_per_s"]:
        yield Text(f"  {name:<12}{_spread(bm[name])}  ->  {_spread(cm[name])}")
    if d.get("diverged"):
        yield Text(f"  {d['diverged']['text']}", style="bold red" if d["diverged"]["direction"] == "worse" else "yellow")
    yield from _stats_lines(d, metric)
    yield Text("")
    yield Text("COST   (median)", style="bold")
    cost = d["cost"]["examples_per_s"]
    change = f"({cost['change']:+.1%})" if cost["change"] is not None else ""
    if cost["baseline"] is None and cost["candidate"] is None:
        yield Text(f"  examples/s  {NO_RATE}")
    else:
        yield Text(f"  examples/s  {_rate(cost['baseline'])}  ->  {_rate(cost['candidate'])}   {change}")
    if d["declared"]:
        dec = d["declared"]
        yield Text("")
        yield Text("DECLARED BEFORE THE RUN" if dec.get("declared_before_runs") is not False
                   else "DECLARED (after some runs already existed)", style="bold")
        yield Text(f"  hypothesis: {dec['hypothesis']}")
        yield Text(f"  success:    {dec['success']}")
        yield Text(f"  result:     {dec['result']}  ({dec['why']})")
    yield Text("")
    yield _verdict_line(d)


NO_RATE = "not reported by these runs (firstdiv.throughput(...) in a script, rec.throughput(...) in a workload)"


def _rate(value: float | None) -> str:
    return "not reported" if value is None else num(value)


def _spread(s: dict[str, Any]) -> str:
    """median [min..max] of the finite values, then how many seeds ended non-finite."""
    text = f"{num(s['median'])} [{num(s['min'])}..{num(s['max'])}]" if s.get("n") else "-"
    bad = s.get("nonfinite", 0)
    return text + (f" +{bad} non-finite" if bad else "")


def _stats_lines(d: dict[str, Any], metric: str) -> Iterable[Text]:
    conf = f"{1 - d['alpha']:.0%}"
    if d["design"] == "paired":
        p = d["paired"]
        yield Text(f"  paired {metric} delta: mean {p['mean_delta']:+.4f}  stdev {p['stdev_delta']:.4f}  "
                   f"({p['worse']}/{p['n']} worse, {p['better']}/{p['n']} better)")
        if p["p_value"] is not None:
            wil = f"  Wilcoxon p={p['wilcoxon_p']:.3g}" if p["wilcoxon_p"] is not None else ""
            yield Text(f"    {conf} CI [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]  {p['test']} p={p['p_value']:.3g}{wil}")
    cp = d.get("coupling")
    if cp and cp["gain"] is not None:
        note = "the shared seeds bought little: the two sides' randomness is not coupled" if cp["gain"] < 1.5 else ""
        gain = "every seed moved by the same amount" if cp["gain"] > 1e4 else f"{cp['gain']:.1f}x tighter"
        yield Text(f"  pairing: stdev of deltas {cp['stdev_delta']:.4f} vs {cp['independent_stdev']:.4f} for independent "
                   f"runs ({gain}){'; ' + note if note else ''}")
    u = d["unpaired"]
    if u["p_value"] is not None:
        label = "unpaired (seeds do not match)" if d["design"] == "unpaired" else "unpaired, for contrast"
        yield Text(f"  {label}: mean delta {u['mean_delta']:+.4f}  {conf} CI [{u['ci_low']:+.4f}, {u['ci_high']:+.4f}]  "
                   f"Welch p={u['p_value']:.3g}  Mann-Whitney p={p_text(u['mannwhitney_p'])}")
    if d["noise_ratio"] is not None:
        yield Text(f"  -> {d['noise_ratio']:.1f}x the noise floor (baseline spread {d['noise_floor']['spread']:.4f})")
    if d.get("min_effect"):
        yield from _effect_lines(d["min_effect"])


def _effect_lines(e: dict[str, Any]) -> Iterable[Text]:
    """The threshold, where the CI lies against it, and the TOST that backs an equivalence."""
    if e["threshold"] is None:
        yield Text(f"  min effect {e['spec']} ({e['what']}): no threshold (the baseline needs at least 2 seeds)")
        return
    where = {"beyond": "beyond", "inside": "inside", "straddles": "straddles", None: "not comparable with"}[e["relation"]]
    ci = "no CI" if e["ci_low"] is None else f"{e['confidence']:.0%} CI [{e['ci_low']:+.4f}, {e['ci_high']:+.4f}]"
    yield Text(f"  min effect {e['spec']} ({e['what']}) = +-{e['threshold']:.4g}: {ci} {where} +-{e['threshold']:.4g}")
    t = e["tost"]
    if t and t["p_value"] is not None:
        yield Text(f"    equivalence (TOST): {t['confidence']:.0%} CI [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]  "
                   f"p={t['p_value']:.3g}  {'equivalent' if t['equivalent'] else 'not shown equivalent'} "
                   f"at alpha={(1 - t['confidence']) / 2:.3g}")


def _verdict_line(d: dict[str, Any]) -> Text:
    verdict = d["verdict"]
    style = {"MEASUREMENT_CHANGED": "bold magenta", "NOT_RESOLVED": "bold cyan", "SYSTEM_CHANGED": "bold red",
             "PRACTICALLY_EQUIVALENT": "bold green"}[verdict]
    line = Text("VERDICT  ", style="bold")
    line.append(verdict, style=style)
    ident = d["identity_detail"]
    if verdict == "MEASUREMENT_CHANGED":
        line.append(f": eval path differs in {', '.join(ident['eval_fingerprint']['fields']) or 'its fingerprint'}; "
                    "the numbers measure different things")
    elif _diverged_decides(d):
        changed = [k for k in ("config", "code", "data", "env") if ident[k]["state"] == "CHANGED"]
        if verdict == "SYSTEM_CHANGED":
            line.append(f" ({d['direction']})")
        line.append(f": {d['diverged']['text']}; changed {', '.join(changed) if changed else 'nothing recorded'}")
    elif verdict == "PRACTICALLY_EQUIVALENT":
        e = d["min_effect"]
        line.append(f": the difference is inside +-{e['threshold']:.4g} ({e['what']}); no effect that matters")
    elif verdict == "NOT_RESOLVED" and (d.get("min_effect") or {}).get("relation") == "straddles":
        e, n = d["min_effect"], len(d["shared_seeds"]) if d["design"] == "paired" else d["unpaired"]["n_base"]
        side = "resolved from zero but " if e["resolved_from_zero"] else ""
        need = e["seeds_to_resolve"]
        line.append(f": {side}not resolved against the min effect +-{e['threshold']:.4g} at {n} seeds (the CI straddles it); "
                    + (f"about {need} seeds would resolve it" if need else "the effect sits at the threshold"))
    elif verdict == "NOT_RESOLVED":
        need = d["seeds_to_resolve"]
        u = d["unpaired"]
        if d["design"] == "unpaired" and min(u["n_base"], u["n_cand"]) < 2:
            line.append(": single runs carry no estimate of seed noise; sweep both sides at shared seeds "
                        "(e.g. --seeds 0-11) before reading anything into the difference")
            return line
        n = len(d["shared_seeds"]) if d["design"] == "paired" else min(u["n_base"], u["n_cand"])
        line.append(f": not resolved against seed noise at {n} seeds; " +
                    (f"about {need} {'paired ' if d['design'] == 'paired' else ''}seeds would resolve an effect this size"
                     if need else "no difference to resolve"))
    else:
        changed = [k for k in ("config", "code", "data", "env") if ident[k]["state"] == "CHANGED"]
        line.append(f" ({d['direction']}): changed {', '.join(changed) if changed else 'nothing recorded'}")
        if d.get("min_effect"):
            line.append(f"; the CI clears the min effect +-{d['min_effect']['threshold']:.4g}")
        if (d.get("declared") or {}).get("form") == "within_noise" and d["declared"]["result"] == "MET":
            line.append("; inside the declared noise criterion, so no failure")
    return line


def _diverged_decides(d: dict[str, Any]) -> bool:
    """The verdict comes from diverged runs: one side diverged on more of its seeds, or nothing finite is left."""
    div = d.get("diverged")
    if div is None:
        return False
    u = d["unpaired"]
    return div["direction"] is not None or not u["n_base"] or not u["n_cand"]


# -- bisection, determinism audit, A/A self-check ---------------------------------------------

_DECISION_STYLE = {"SAME": "green", "DIFFERENT": "bold red", "UNKNOWN": "yellow"}


def _table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def render_bisect(report: Any) -> Iterable[Any]:
    d = report.details
    yield Text(f"{d['workload']}: {len(d['changes'])} changes, metric {d['metric']}, regression criterion: worse by "
               f"more than {d['margin']:.4g}{' (min effect ' + d['min_effect'] + ')' if d.get('min_effect') else ''} "
               f"(paired {1 - d['alpha']:.0%} CI clear of it)")
    changes = _table("#", "change", "base", "candidate")
    for i, c in enumerate(d["changes"], 1):
        changes.add_row(str(i), Text(c["key"]), Text(repr(c["base"])), Text(repr(c["candidate"])))
    yield changes
    probes = _table("probe", "changes applied", "seeds", "median", "mean delta", "CI", "decision")
    index = {c["key"]: i for i, c in enumerate(d["changes"], 1)}
    for p in d["probes"]:
        applied = ",".join(str(index[k]) for k in p["keys"]) or "-"
        probes.add_row(Text(p["label"]), applied, str(p["n"]), f"{p['median']:.4f}", f"{p['mean_delta']:+.4f}",
                       f"[{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]", Text(p["decision"], style=_DECISION_STYLE[p["decision"]]))
    yield probes
    yield Text(("CULPRIT " if d["culprit"] else "RESULT ") + d["conclusion"], style="bold")


def render_determinism(report: Any) -> Iterable[Any]:
    d = report.details
    floor = d["noise_floor"]
    yield Text(f"{d['workload']} seed {d['seed']}, metric {d['metric']}; noise floor (seed spread) "
               + (f"{floor:.4g}" if floor else "not measured"))
    table = _table("check", "bit-identical", "first diff epoch", "max |delta|", "x noise floor")
    table.columns[0].no_wrap = True
    skipped = []
    for c in d["checks"]:
        if c.get("skipped"):
            skipped.append(c)
            continue
        ratio = c["relative_to_noise_floor"]
        table.add_row(Text(c["name"]), str(c["bit_identical"]),
                      "-" if c["first_diverging_epoch"] is None else str(c["first_diverging_epoch"]),
                      f"{c['max_abs_diff']:.3g}", "-" if ratio is None else f"{ratio:.3g}")
    yield table
    for c in skipped:
        yield Text(f"  {c['name']}: skipped, {c['skipped']}", style="dim")


def render_aa(report: Any) -> Iterable[Any]:
    d = report.details
    yield Text(f"{d['workload']}: {d['pairs']} A/A comparisons of disjoint seed sets ({d['seeds_per_side']} seeds a side) "
               f"of one config, metric {d['metric']}, alpha {d['alpha']}"
               + (f", min effect {d['min_effect']}" if d.get("min_effect") else ""))
    verdicts = ", ".join(f"{k} {v}" for k, v in d["verdicts"].items())
    yield Text(f"  verdicts: {verdicts}")
    yield Text(f"  false SYSTEM_CHANGED rate {d['rate']:.3f}  exact {d['confidence']:.0%} CI [{d['ci_low']:.3f}, "
               f"{d['ci_high']:.3f}]  P(rate > alpha) test p={d['p_value']:.3g}", style="bold")
