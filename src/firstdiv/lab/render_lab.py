"""Terminal layout of the lab's experiments: bisection, determinism audit, A/A self-check."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._rich import Table, Text

_DECISION_STYLE = {"SAME": "green", "DIFFERENT": "bold red", "UNKNOWN": "yellow"}


def _table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def render_bisect(report: Any) -> Iterable[Any]:
    d = report.details
    yield Text(f"{d['workload']}: {len(d['changes'])} changes, metric {d['metric']}, regression criterion: worse by "
               f"more than {d['margin']:.4g} (paired {1 - d['alpha']:.0%} CI clear of it)")
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
               f"of one config, metric {d['metric']}, alpha {d['alpha']}")
    verdicts = ", ".join(f"{k} {v}" for k, v in d["verdicts"].items())
    yield Text(f"  verdicts: {verdicts}")
    yield Text(f"  false SYSTEM_CHANGED rate {d['rate']:.3f}  exact {d['confidence']:.0%} CI [{d['ci_low']:.3f}, "
               f"{d['ci_high']:.3f}]  P(rate > alpha) test p={d['p_value']:.3g}", style="bold")
