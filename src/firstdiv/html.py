"""``from firstdiv import html``: the HTML pages (:mod:`firstdiv.render.html`) and the two lab helpers
that build what a page shows from the store.

    page = html.to_html(html.comparison_view("base", "cand", store="runs.db"))
    page = html.to_html(html.load_sweep("base", store))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .render.html import to_html, write_html

if TYPE_CHECKING:
    from .lab.compare import ComparisonView, comparison_view
    from .lab.sweep import load_sweep

__all__ = ["ComparisonView", "comparison_view", "load_sweep", "to_html", "write_html"]

_LAB = {"ComparisonView": "firstdiv.lab.compare", "comparison_view": "firstdiv.lab.compare",
        "load_sweep": "firstdiv.lab.sweep"}  # loaded on first use: the pages alone need no numpy or scipy


def __getattr__(name: str) -> Any:
    if name not in _LAB:
        raise AttributeError(f"module 'firstdiv.html' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAB[name]), name)
