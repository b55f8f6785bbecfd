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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from ..errors import InvalidArgument
from ..report import Report
from . import _build

__all__ = ["ComparisonView", "comparison_view", "load_sweep", "to_html", "write_html"]


@dataclass(frozen=True)
class ComparisonView:
    """A comparison with both sides' runs, so the page can draw their distributions and curves."""

    comparison: Any  # firstdiv.lab.compare.Comparison
    baseline: Any  # firstdiv.lab.sweep.SweepResult
    candidate: Any


def load_sweep(ref: str, store: Any) -> Any:
    """A stored sweep (by name or id prefix) as a SweepResult with its ok and its failed runs."""
    from ..lab.sweep import SweepResult

    info = store.find_sweep(ref)
    runs = store.records(info, include_failed=True)
    return SweepResult(info, tuple(r for r in runs if r.ok), failed=tuple(r for r in runs if not r.ok),
                       store_path=str(store.path))


def comparison_view(baseline: Any, candidate: Any, *, metric: str = "val_loss", store: Any = None,
                    alpha: float = 0.05) -> ComparisonView:
    """Compare two sweeps (names in ``store``, or SweepResults) exactly as ``firstdiv compare`` does."""
    from ..lab.compare import compare
    from ..lab.store import Store
    from ..lab.sweep import SweepResult

    if isinstance(baseline, SweepResult) and isinstance(candidate, SweepResult):
        return ComparisonView(compare(baseline, candidate, metric=metric, alpha=alpha), baseline, candidate)
    owned = not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    try:
        sides = [ref if isinstance(ref, SweepResult) else load_sweep(ref, st) for ref in (baseline, candidate)]
        return ComparisonView(compare(sides[0], sides[1], metric=metric, alpha=alpha), sides[0], sides[1])
    finally:
        if owned:
            st.close()


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("firstdiv.html", "templates"), autoescape=True,
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


def _context(obj: Any) -> tuple[str, dict[str, Any]]:
    from ..lab.compare import Comparison
    from ..lab.sweep import SweepResult

    if isinstance(obj, ComparisonView):
        return "comparison", _build.comparison_context(obj.comparison, obj.baseline, obj.candidate)
    if isinstance(obj, Comparison):
        return "comparison", _build.comparison_context(obj)
    if isinstance(obj, Report):
        return "report", _build.report_page(obj)
    if isinstance(obj, SweepResult):
        return "sweep", _build.sweep_context(obj)
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
