"""What a person reads: terminal text and HTML pages for reports and for the lab's and the notebook's
objects. Computation never lives here: this package knows :mod:`firstdiv.report`, plain dicts,
:mod:`firstdiv._format` and :mod:`firstdiv._book`, and the objects' display hooks call into it."""

from __future__ import annotations

import functools
import importlib.util
import io
import re
from collections.abc import Iterable
from typing import Any

from .._rich import Console  # rich without moving Python's global RNG (see _rich)
from ..report import Report

__all__ = ["console_for_text", "safe_console", "to_html", "to_text", "visible"]


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
    and cursor control still pass. Every printed report and table goes through one of these.

    A console writing to a buffer (``file=``) never takes itself for a notebook: rich's Jupyter detection would
    display the buffer's contents as a side effect, so ``str(report)`` in a notebook printed the report too."""
    if "file" in kwargs:
        kwargs.setdefault("force_jupyter", False)
    return _safe_class()(**kwargs)


@functools.cache
def _safe_class() -> type:
    from .._rich import Segment

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
