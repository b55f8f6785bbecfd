"""How a command's result is printed at each output level: -q a report's short form (headline, first divergence,
verdict), the default the full layout, -v the full layout and then every finding with its evidence."""

from __future__ import annotations

import json
from typing import Any

from .._rich import Console, Table, Text

#: the output levels: -q, the default, -v
QUIET, NORMAL, VERBOSE = -1, 0, 1


def render(obj: Any, level: int, out: Console) -> None:
    from ..report import Report

    if not isinstance(obj, Report):
        out.print(obj)
        return
    if level == QUIET:
        for line in short_form(obj):
            out.print(line)
        return
    out.print(obj)
    if level == VERBOSE and obj.findings:
        out.print(evidence_table(obj))


def short_form(report: Any) -> list[Text]:
    """The headline, the first divergence (where, kind) or why it was skipped, and the verdict when it has one."""
    from ..render.text import _STYLE
    from ..report import Status

    lines = [Text.assemble((f"{report.instrument.upper()}  ", "bold"), (report.status.value, _STYLE[report.status]))]
    if report.status is Status.SKIPPED:
        lines.append(Text(f"  skipped: {report.reason}"))
    div = report.first_divergence
    if div is not None:
        lines.append(Text(f"  FIRST DIVERGENCE at {div.where}  [{div.kind}]"))
    verdict = report.details.get("verdict")
    if isinstance(verdict, str):
        direction = report.details.get("direction")
        lines.append(Text(f"VERDICT  {verdict}" + (f" ({direction})" if isinstance(direction, str) else "")))
    elif isinstance(verdict, dict) and isinstance(verdict.get("text"), str):  # curves: the verdict in words
        lines.append(Text(f"VERDICT  {verdict['text']}"))
    return lines


def evidence_table(report: Any) -> Table:
    """Every finding with its evidence as numbers (what -v adds to any report)."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, title="FINDINGS (with evidence)",
                  title_justify="left")
    for col in ("where", "check", "status", "message", "evidence"):
        table.add_column(col, overflow="fold")
    for f in report.findings:
        table.add_row(Text(f.where), Text(f.check), Text(f.status.value), Text(f.message),
                      Text(json.dumps(f.evidence, sort_keys=True, default=str)))
    return table
