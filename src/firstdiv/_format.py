"""The formatting vocabulary: how numbers, seed lists and ordinals are written wherever a person reads them
(the terminal, the HTML pages, the findings' messages). Pure functions of plain values; no rendering library."""

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
