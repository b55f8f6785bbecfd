"""Input rows and columns a convolution or pooling window never reads (``shape_ledger``'s unread-pixel check).

Along one spatial axis of length ``L`` a window of kernel ``k``, stride ``s``, padding ``p`` and dilation ``d``
producing ``o`` outputs reads input indices up to ``last = (o - 1) * s - p + d * (k - 1)``; the ``L - 1 - last``
trailing rows after it are never read (e.g. a 3x3 stride-2 convolution without padding on 8 rows reads rows 0..6,
or ``MaxPool2d(3, stride=2)`` on 8x8 drops the last row and column). That happens when
``(L + 2p - d(k - 1) - 1) % s`` exceeds the padding the right edge can absorb. A stride longer than the window
(the 1x1 stride-2 shortcut of a ResNet block) skips rows between windows by design; a trailing gap no longer than
that regular skip is the same pattern, not a dropped edge, and is not flagged. Transposed convolutions, adaptive
pooling and ``padding="same"`` read every input.

API (for ``shape_ledger``):

- ``window_of(module) -> dict | None`` — the window (per-axis ``k``, ``s``, ``p``, ``d``) of a conv/pooling layer.
- ``op_window(name, bound) -> dict | None`` — the same for a functional ``max_pool``/``avg_pool`` call.
- ``unread_check(entry, verdict) -> Check | None`` — the finding for an entry whose window leaves rows unread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn
from torch.nn.modules import conv, pooling

from ...report import Status
from .._core.checks import Check, check

if TYPE_CHECKING:
    from ._geometry import Entry

AXES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}

#: what a dropped edge means to the user: ``unread="warn"`` (default), ``"fail"`` (the design reads every
#: pixel) or ``"note"`` (dropped edges are intended)
VERDICTS = {"warn": Status.WARN, "fail": Status.FAIL, "note": Status.PASS}


def _n(value: Any, n: int) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),) * n


def _window(n: int, k: Any, s: Any, p: Any, d: Any) -> dict[str, tuple[int, ...]]:
    return {"k": _n(k, n), "s": _n(s if s not in (None, ()) else k, n), "p": _n(p, n), "d": _n(d, n)}


def window_of(m: nn.Module) -> dict[str, tuple[int, ...]] | None:
    if isinstance(m, conv._ConvNd) and not isinstance(m, conv._ConvTransposeNd):
        if m.padding == "same":
            return None
        n = len(m.kernel_size)
        return _window(n, m.kernel_size, m.stride, 0 if m.padding == "valid" else m.padding, m.dilation)
    if isinstance(m, (pooling._MaxPoolNd, pooling._AvgPoolNd, pooling._LPPoolNd)):
        name = type(m).__name__
        n = 3 if "3d" in name else 2 if "2d" in name else 1
        return _window(n, m.kernel_size, m.stride, getattr(m, "padding", 0), getattr(m, "dilation", 1))
    return None


def op_window(name: str, bound: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    if not name.startswith(("max_pool", "avg_pool")) or "kernel_size" not in bound:
        return None
    dilation = 1 if name.startswith("avg") else bound.get("dilation", 1)
    return _window(int(name[-2]), bound["kernel_size"], bound.get("stride"), bound.get("padding", 0), dilation)


def _never_read(length: int, out: int, k: int, s: int, p: int, d: int) -> int:
    """Trailing input rows never read along one axis (0 when the edge is read or the gap is the regular skip)."""
    last = (out - 1) * s - p + d * (k - 1)
    trailing = length - 1 - last
    regular_skip = max(s - d * (k - 1) - 1, 0)
    return trailing if trailing > regular_skip else 0


def unread_per_axis(entry: Entry) -> dict[str, list[int]]:
    """``{axis name: [first, last] unread input index}`` for the axes whose trailing rows the window never read."""
    win, inp, out = entry.extra.get("window"), entry.observed_input, entry.observed_output
    if win is None or not entry.ran or out is None:
        return {}
    n = len(win["k"])
    if len(inp) < n or len(out) < n:
        return {}
    names = AXES.get(n, tuple(f"S{i}" for i in range(n)))
    found = {}
    for axis, length, o, k, s, p, d in zip(names, inp[-n:], out[-n:], win["k"], win["s"], win["p"], win["d"]):
        dropped = _never_read(length, o, k, s, p, d)
        if dropped:
            found[axis] = [length - dropped, length - 1]
    return found


def _rows(axis: str, span: list[int]) -> str:
    kind = {"H": "rows", "W": "columns", "L": "positions", "D": "slices"}.get(axis, f"{axis} indices")
    return f"{kind} {span[0]}..{span[1]}" if span[0] != span[1] else f"{kind[:-1]} {span[0]}"


def unread_check(entry: Entry, verdict: str) -> Check | None:
    found = unread_per_axis(entry)
    if not found:
        return None
    win = entry.extra["window"]
    spatial = entry.observed_input[-len(win["k"]):]
    lengths = dict(zip(AXES.get(len(spatial), tuple(f"S{i}" for i in range(len(spatial)))), spatial))
    lost = "; ".join(f"{_rows(axis, span)} of {axis}={lengths[axis]}" for axis, span in found.items())
    ev = {"unread": found, "input_spatial": spatial, "kernel": list(win["k"]), "stride": list(win["s"]),
          "padding": list(win["p"]), "dilation": list(win["d"]), "verdict": verdict}
    status = VERDICTS[verdict]
    note = " (declared intended: unread='note')" if status is Status.PASS else ""
    return check(entry.stage, "shape.unread_pixels", status,
                 f"{entry.stage} {entry.operation} never reads input {lost}{note}", ev,
                 expected="every input row and column read", observed=f"never read: {lost}",
                 hint=f"(size + 2*padding - dilation*(kernel-1) - 1) is not a multiple of the stride at {entry.stage}: "
                      "pad the input or the layer, or change the kernel/stride, so the last window reaches the edge "
                      "(shape_ledger(..., unread='note') if dropping the edge is intended)")
