"""Terminal and HTML presentation of reports; computation never lives here."""

from __future__ import annotations

import functools
import importlib.util
import io
import re
from collections.abc import Iterable
from typing import Any

from ._rich import Console, Table, Text  # rich without moving Python's global RNG (see _rich)
from .report import Report, Status

_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.WARN: "yellow", Status.SKIPPED: "dim"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


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
        yield Text(f"    expected: {_fmt(div.expected)}")
        yield Text(f"    observed: {_fmt(div.observed)}")
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


# C0 controls but newline and tab, DEL, and C1 controls (0x9b is a one-byte CSI on some terminals).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with terminal control characters shown instead of obeyed: ESC as U+241B '␛' (the
    Control Pictures block, one cell wide), C1 controls as ``\\x9b``."""
    def show(m: re.Match[str]) -> str:
        c = ord(m.group())
        return chr(0x2400 + c) if c < 0x20 else "\u2421" if c == 0x7F else f"\\x{c:02x}"

    return _UNSAFE.sub(show, text)


def safe_console(**kwargs: Any) -> Console:
    """A rich Console whose output never carries a control character taken from the data it prints
    (a sweep named ``x\\e]0;pwned\\a`` must not retitle or clear the terminal); rich's own styling
    and cursor control still pass. Every printed report and table goes through one of these."""
    return _safe_class()(**kwargs)


@functools.cache
def _safe_class() -> type:
    from ._rich import Segment

    class SafeConsole(Console):  # type: ignore[misc, valid-type]
        def render(self, renderable: Any, options: Any = None) -> Iterable[Any]:
            for seg in super().render(renderable, options):
                # Control segments are rich's own (cursor moves of a progress bar); text is data.
                if seg.control or not _UNSAFE.search(seg.text):
                    yield seg
                else:
                    yield Segment(visible(seg.text), seg.style, seg.control)

    return SafeConsole


def console_for_text(width: int = 100) -> Console:
    return safe_console(width=width, file=io.StringIO(), color_system=None, force_terminal=False, record=True)


def to_text(renderable: Any, width: int = 100) -> str:
    console = console_for_text(width)
    console.print(renderable)
    return console.export_text().rstrip("\n")


def to_html(renderable: Any) -> str:
    """Self-contained HTML. A Report gets the report page (firstdiv.html, a notebook-sized fragment) when jinja2
    and matplotlib are installed; anything else, or a Report without them, rich's export. Both escape every user string."""
    if isinstance(renderable, Report) and all(importlib.util.find_spec(m) for m in ("jinja2", "matplotlib")):
        from .html import to_html as page

        return page(renderable, fragment=True)
    console = safe_console(width=100, file=io.StringIO(), record=True, color_system="truecolor")
    console.print(renderable)
    return console.export_html(inline_styles=True)
