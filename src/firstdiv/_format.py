"""The formatting vocabulary: how numbers, p-values, config values, seed lists, ordinals and exceptions are
written wherever a person reads them (the terminal, the HTML pages, the findings' messages, the errors). Pure
functions of plain values; no rendering library."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, limit: int = 400) -> str:
    """A value as one line of text: floats to 6 significant digits, containers flattened, long text cut."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list, tuple)) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    if isinstance(value, dict):
        text = ", ".join(f"{k}={fmt(v, limit)}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(fmt(v, limit) for v in value[:50]) + (f", … {len(value) - 50} more" if len(value) > 50 else "") + "]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def seed_ranges(seeds: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3, 8'."""
    out: list[str] = []
    for s in sorted(set(seeds)):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = out[-1].split("-")[0] + f"-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def seed_text(seeds: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (the compact form the gate's lines use); no seeds -> 'none'."""
    parts, seeds = [], sorted(seeds)
    start = prev = seeds[0] if seeds else 0
    for s in [*seeds[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(parts) if seeds else "none"


def value_text(x: float | None) -> str:
    return "not finite" if x is None else f"{x:.4f}"


def margin_text(x: float | None) -> str:
    return "-inf (no finite value)" if x is None else f"{x:+.3g}"


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def num(x: Any, digits: int = 4) -> str:
    """A table's number: '-' for none, thousands grouped from 1000 up, else ``digits`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if abs(x) >= 1e3:
            return f"{x:,.0f}"
        return f"{x:.{digits}f}"
    return str(x)


def p_text(p: float | None) -> str:
    """A p-value (or any small statistic) to 3 significant digits; '-' when there is none."""
    return "-" if p is None else f"{p:.3g}"


def short(v: Any) -> str:
    """A config value in a line: lists as '{a, b, c ...}' (three shown), dicts as 'k=v, ...'."""
    if isinstance(v, list):
        return "{" + ", ".join(map(str, v[:3])) + (" ..." if len(v) > 3 else "") + "}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={short(x)}" for k, x in v.items())
    return str(v)


def inline(value: Any) -> str:
    """A value as the terminal's reports write it: floats to 6 significant digits, containers flattened, uncut."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={inline(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return str(value)


def clip(value: Any, limit: int = 90) -> str:
    """A value cut to ``limit`` characters with '...' (floats to 6 significant digits)."""
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first line of an exception's message, cut to ``limit`` characters; its type's name when it has none."""
    text = str(exc).strip()
    return (text.splitlines()[0][:limit] if limit is not None else text.splitlines()[0]) if text else type(exc).__name__


def describe_error(exc: BaseException, limit: int | None = 300) -> str:
    """One line naming what was raised: ``RuntimeError: first line of the message`` (cut to ``limit``
    characters; ``None``: uncut), or just ``RuntimeError`` when the message is empty."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {first_line(exc, limit)}" if text else type(exc).__name__


def comparison_line(d: dict) -> str:
    """A comparison's repr: ``<Comparison 'a' -> 'b' val_loss: SYSTEM_CHANGED worse, delta +0.33 [+0.31, +0.35],
    4 shared seeds>`` from its details."""
    paired = d.get("paired") or {}
    verdict = " ".join(str(x) for x in (d.get("verdict"), d.get("direction")) if x)
    delta = ""
    if "mean_delta" in paired:
        delta = f", delta {paired['mean_delta']:+.4g}"
        if "ci_low" in paired:
            delta += f" [{paired['ci_low']:+.4g}, {paired['ci_high']:+.4g}]"
    return (f"<Comparison {d.get('baseline_name')!r} -> {d.get('candidate_name')!r} {d.get('metric')}: {verdict}"
            f"{delta}, {len(d.get('shared_seeds') or ())} shared seeds>")
