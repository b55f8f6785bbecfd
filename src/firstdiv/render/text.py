"""The terminal layout every report shares: header, first divergence, findings (or the report's own body),
side effects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._format import inline
from .._rich import Table, Text  # rich without moving Python's global RNG (see _rich)
from ..report import Report, Status

_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.WARN: "yellow", Status.SKIPPED: "dim"}


def render_report(report: Report) -> Iterable[Any]:
    """Yield rich renderables: header, first divergence, findings, side effects."""
    custom = getattr(report, "__rich_body__", None)
    header = Text.assemble((f"{report.instrument.upper()}  ", "bold"), (report.status.value, _STYLE[report.status]))
    yield header
    if report.status is Status.SKIPPED:
        yield Text(f"  skipped: {report.reason}")
    div = report.first_divergence
    if div is not None:
        yield Text(f"  FIRST DIVERGENCE at {div.where}  [{div.kind}]", style="bold")
        yield Text(f"    expected: {inline(div.expected)}")
        yield Text(f"    observed: {inline(div.observed)}")
        if div.hint:
            yield Text(f"    hint:     {div.hint}")
    if custom is not None:
        yield from custom()
    elif report.findings:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("where", "check", "status", "evidence"):
            table.add_column(col)
        for f in report.findings:
            table.add_row(Text(f.where), Text(f.check), Text(f.status.value, style=_STYLE[f.status]), Text(f.message))
        yield table
    yield Text(f"  side effects: {report.side_effects}", style="dim")
