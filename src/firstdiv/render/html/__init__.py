"""Self-contained HTML pages for sweeps, comparisons, instrument reports and incidents.

A page has no script and fetches nothing: CSS is inline, plots are inline SVG drawn by matplotlib,
and a Content-Security-Policy (``default-src 'none'``) refuses anything else a browser might try.
Every user string (config keys and values, names, notes, messages) is escaped by jinja2's
autoescape; matplotlib escapes the text it writes into the SVG.

    from firstdiv import html
    page = html.to_html(sweep_result)                      # a SweepResult
    page = html.to_html(html.comparison_view("base", "cand", store="runs.db"))  # two sweeps
    page = html.to_html(report)                            # any instrument's Report (a Comparison too)
    page = html.to_html(incident)                          # a dict or an object with to_dict()
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from ...errors import InvalidArgument
from . import _build

__all__ = ["to_html", "write_html"]


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("firstdiv.render.html", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _build.fmt
    env.filters["num"] = lambda x, spec=".4g": "–" if x is None else format(x, spec)
    return env


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("firstdiv")
    except PackageNotFoundError:
        return "unknown"


#: page attribute -> (template, context builder). The lab's objects name their page (Report.page,
#: Comparison.page, SweepResult.page, ComparisonView.page); anything else may be an incident.
_PAGES: dict[str, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    "comparison_view": ("comparison", lambda v: _build.comparison_context(v.comparison, v.baseline, v.candidate)),
    "comparison": ("comparison", _build.comparison_context),
    "report": ("report", _build.report_page),
    "sweep": ("sweep", _build.sweep_context),
}


def _context(obj: Any) -> tuple[str, dict[str, Any]]:
    page = getattr(obj, "page", None)
    entry = _PAGES.get(page) if isinstance(page, str) else None
    if entry is not None:
        template, build = entry
        return template, build(obj)
    if isinstance(obj, dict) or callable(getattr(obj, "to_dict", None)) or dataclasses.is_dataclass(obj):
        data = _build.incident_data(obj)
        if "symptom" in data:
            return "incident", _build.incident_context(data)
    raise InvalidArgument(f"Expected a Report, a SweepResult, a ComparisonView or an incident (a dict or an object with "
                          f"to_dict() holding 'symptom') but got {type(obj).__name__}")


def to_html(obj: Any, *, title: str | None = None, fragment: bool = False) -> str:
    """The page for ``obj``: a whole HTML document, or with ``fragment=True`` one ``<div>`` (for notebooks)."""
    template, ctx = _context(obj)
    ctx.update(title=title or ctx["title"], fragment=fragment, version=_version())
    return _env().get_template(f"{template}.html.j2").render(ctx)


def write_html(obj: Any, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write the page for ``obj`` to ``path``; an unwritable path is an InvalidArgument naming it."""
    page = to_html(obj, title=title)
    target = Path(path)
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"Cannot write the report to {target}: {exc.strerror or exc}; pass a writable --html PATH") from None
    return target
