"""Plots for the HTML report as inline SVG strings: strip plots, paired deltas, curves with seed bands.

Figures are made with :class:`matplotlib.figure.Figure` directly, never through pyplot, so no
backend is selected, no figure is registered in a global figure manager (nothing to close), and
every rcParam is set inside one ``rc_context`` that is restored on exit: drawing a report changes
nothing in the caller's matplotlib state. Text is written as SVG ``<text>`` (escaped by matplotlib)
and the output is cleaned of the XML prolog, comments, metadata and namespace URLs before it is
placed in the page.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

BASE, CAND, SINGLE = "#3b6ea8", "#d9822b", "#3b6ea8"
WORSE, BETTER, TIE = "#c0392b", "#2e8b57", "#7f7f7f"
WIDTH = 5.2  # inches; at 72 pt per inch and 4/3 px per pt, 499 px wide in a browser

_RC = {
    "svg.fonttype": "none",  # text stays text: smaller, selectable, escaped by matplotlib
    "svg.hashsalt": "firstdiv",  # ids are hashes of content: deterministic, equal only for equal definitions
    "font.family": "sans-serif",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#555555",
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "text.usetex": False,
}
_STRIP = [
    (re.compile(r"<\?xml.*?\?>\s*", re.DOTALL), ""),
    (re.compile(r"<!DOCTYPE.*?>\s*", re.DOTALL), ""),
    (re.compile(r"<!--.*?-->\s*", re.DOTALL), ""),
    (re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL), ""),
    (re.compile(r"<style[^>]*>.*?</style>\s*", re.DOTALL), ""),  # a global '*' rule; the page's CSS scopes it instead
    (re.compile(r'\s+xmlns(:\w+)?="[^"]*"'), ""),  # inline SVG in HTML is in the SVG namespace already
    (re.compile(r'<g id="[^"]*"'), "<g"),  # figure_1, axes_1, ...: repeated in every figure, referenced by none
]
# Inside a tag (text content has '<' escaped): scripts, foreign HTML, event handlers, links off the page.
_UNSAFE = re.compile(r"<script|<foreignObject|<[^>]*\son\w+\s*=|<[^>]*href\s*=\s*[\"'](?!#)", re.IGNORECASE)


def label(text: Any, limit: int = 40) -> str:
    """A user string as matplotlib text: '$' would start mathtext, so it is escaped; long names are cut."""
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("$", r"\$")


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    for pattern, repl in _STRIP:
        svg = pattern.sub(repl, svg)
    bad = _UNSAFE.search(svg)
    if bad:  # matplotlib escapes text; this guards the page if a future version stops doing so
        raise RuntimeError(f"matplotlib wrote unsafe SVG markup ({bad.group(0)!r}); refusing to inline it")
    return svg.strip()


def _figure(height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH, max(height, 2.0)), layout="constrained")


def _render(draw: Any, height: float, *args: Any, **kwargs: Any) -> str:
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig = _figure(height)
        draw(fig.add_subplot(), *args, **kwargs)
        return _svg(fig)


def strip_plot(groups: Sequence[tuple[str, Sequence[int], Sequence[float], str]], metric: str) -> str:
    """One row per group (label, seeds, values, colour): a dot per seed, a bar at the median.

    Vertical jitter is deterministic (seed rank), so the same runs give the same picture.
    """
    return _render(_draw_strip, 0.9 + 0.55 * len(groups), groups, metric)


def _draw_strip(ax: Any, groups: Sequence[tuple[str, Sequence[int], Sequence[float], str]], metric: str) -> None:
    for row, (_, seeds, values, color) in enumerate(groups):
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            continue
        order = np.argsort(np.argsort(np.asarray(seeds)))
        jitter = ((order % 5) - 2) * 0.07 if v.size > 1 else np.zeros(1)
        ax.scatter(v, row + jitter, s=22, color=color, alpha=0.85, edgecolors="white", linewidths=0.5, zorder=3)
        med = float(np.median(v))
        ax.plot([med, med], [row - 0.3, row + 0.3], color="#222222", linewidth=2.0, zorder=4)
        ax.annotate(f"median {med:.4g}  n={v.size}", (med, row - 0.3), xytext=(4, 0), textcoords="offset points",
                    fontsize=7.5, ha="left", va="bottom", color="#333333")
    ax.set_yticks(range(len(groups)), [label(g[0], 24) for g in groups])
    ax.set_ylim(-0.75, len(groups) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(label(metric))
    ax.set_title(label(f"{metric}: one dot per seed"), loc="left")


def paired_plot(seeds: Sequence[int], deltas: Sequence[float], *, mean: float, ci: tuple[float | None, float | None],
                higher_is_better: bool, metric: str, floor: float = 0.0) -> str:
    """Candidate minus baseline per shared seed, coloured worse/better, with 0, the mean and its CI band.

    The y axis spans at least ``floor`` (the baseline's seed spread), so deltas far inside the noise
    look small instead of being stretched to fill the axes.
    """
    return _render(_draw_paired, 2.6, seeds, deltas, mean, ci, higher_is_better, metric, floor)


def _draw_paired(ax: Any, seeds: Sequence[int], deltas: Sequence[float], mean: float,
                 ci: tuple[float | None, float | None], hib: bool, metric: str, floor: float) -> None:
    d = np.asarray(deltas, dtype=np.float64)
    x = np.arange(d.size)
    sign = -1.0 if hib else 1.0
    colors = [WORSE if sign * v > 0 else BETTER if sign * v < 0 else TIE for v in d]
    lo, hi = ci
    if lo is not None and hi is not None:
        ax.axhspan(lo, hi, color="#9bb7d4", alpha=0.35, linewidth=0, label=f"CI of mean [{lo:+.3g}, {hi:+.3g}]")
    ax.axhline(0.0, color="#222222", linewidth=1.0)
    ax.axhline(mean, color="#3b6ea8", linewidth=1.2, linestyle="--", label=f"mean delta {mean:+.4g}")
    ax.vlines(x, 0.0, d, colors=colors, linewidth=2.0, zorder=2)
    ax.scatter(x, d, color=colors, s=24, zorder=3)
    step = max(1, int(np.ceil(d.size / 24)))
    ax.set_xticks(x[::step], [str(s) for s in list(seeds)[::step]])
    ax.set_xlim(-0.7, d.size - 0.3)
    values = [abs(v) for v in (*d.tolist(), mean, lo, hi) if v is not None and np.isfinite(v)]
    reach = max([*values, floor / 2.0]) or 1.0
    ax.set_ylim(-1.15 * reach, 1.15 * reach)  # symmetric: zero in the middle, better and worse equally visible
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xlabel("shared seed")
    ax.set_ylabel(label(f"Δ {metric}"))
    ax.set_title(label(f"{metric}: candidate − baseline per seed (red worse, green better)", 80), loc="left")
    ax.legend(fontsize=7.5, loc="best")


def curve_plot(sides: Sequence[tuple[str, Sequence[dict[str, float]], str]], metric: str) -> str:
    """Per side (label, per-epoch bands from ``SweepResult.bands``, colour): the median
    curve, the interquartile band (darker) and the min-max band (lighter) over seeds."""
    return _render(_draw_curves, 2.6, sides, metric)


def _draw_curves(ax: Any, sides: Sequence[tuple[str, Sequence[dict[str, float]], str]], metric: str) -> None:
    for name, rows, color in sides:
        if not rows:
            continue
        epochs = np.array([r["epoch"] for r in rows], dtype=np.float64)
        col = {k: np.array([r[k] for r in rows], dtype=np.float64) for k in ("min", "q25", "median", "q75", "max")}
        ax.fill_between(epochs, col["min"], col["max"], color=color, alpha=0.14, linewidth=0)
        ax.fill_between(epochs, col["q25"], col["q75"], color=color, alpha=0.32, linewidth=0)
        ax.plot(epochs, col["median"], color=color, linewidth=1.8, marker="o" if len(rows) <= 30 else None,
                markersize=3, label=label(f"{name} (n={max(int(r['n']) for r in rows)})", 36))
    ax.set_xlabel("epoch")
    ax.set_ylabel(label(metric))
    ax.set_title(label(f"{metric}: median, IQR and min-max over seeds", 80), loc="left")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7.5, loc="best")
