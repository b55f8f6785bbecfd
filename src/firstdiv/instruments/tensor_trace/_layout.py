"""Layout analysis of ``tensor_trace``: values moved across axes (``layout.values_moved``), by the two probes its
module docstring describes.

1. ``ReshapeWatch`` — on the live trace, each ``view``/``reshape``/``flatten``/``unflatten`` (chains composed) is
   analysed as ``arange(input).reshape(output)`` by :func:`moved_by_reshape`.
2. ``arange_probe`` — on a deep copy, user modules whose output rearranges one of their float inputs are run
   again on ``arange`` values, which gives the exact map "output position <- input position" (``_moved_by_map``).

Both report with ``moved_check(path, evidence)``.
"""

from __future__ import annotations

import copy
import functools
import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..._globals import preserved_globals
from ...report import Status
from .._core.batch import rebuild
from .._core.checks import Check, check
from .._core.copying import model_copy
from .._core.modes import set_mode
from .._core.trace import Row, exception_line, is_builtin, op_name, tensors

_RESHAPES = (torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.Tensor.flatten, torch.flatten,
             torch.Tensor.unflatten, torch.unflatten, torch.Tensor.view_as, torch.Tensor.reshape_as,
             torch.Tensor.contiguous, torch.Tensor.squeeze, torch.squeeze, torch.Tensor.unsqueeze, torch.unsqueeze)
_PROBE_MAX = 2 ** 20  # elements: larger rearrangements are not probed (the index map costs rank x 8 bytes each)
_EXACT = {torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8, torch.float32: 2 ** 24, torch.float64: 2 ** 53}
_USER_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HINT_MOVED = ("reshape/view where a permute/transpose was meant: move the axes into the intended order first "
               "(e.g. .transpose(1, 2)), then merge with reshape; a reshape never reorders values")


# --- probe 1: reshapes as arange(input).reshape(output) ------------------------------------------------------------


def _intervals(shape: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """(lo, hi, size, axis): the flat-index digits ``[lo, hi)`` each axis of size > 1 occupies in row-major order."""
    out, stride = [], 1
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] > 1:
            out.append((stride, stride * shape[axis], shape[axis], axis))
        stride *= shape[axis]
    return out[::-1]


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    coords = []
    for n in reversed(shape):
        coords.append(flat % n)
        flat //= n
    return coords[::-1]


def moved_by_reshape(src: tuple[int, ...], dst: tuple[int, ...]) -> dict[str, Any] | None:
    """Evidence when ``arange(src).reshape(dst)`` moves an input axis's values onto an output axis of the same size
    that is not that axis (tensor_trace's module docstring, probe 1); None when every value stays on its axes."""
    if math.prod(src) != math.prod(dst) or math.prod(src) == 0:
        return None
    ins, outs = _intervals(src), _intervals(dst)

    def inside(a: tuple, b: tuple) -> bool:
        return b[0] <= a[0] and a[1] <= b[1] and a[0] % b[0] == 0 and b[1] % a[1] == 0

    cut = [a for a in ins if not any(inside(a, b) for b in outs)]
    exact = {(a[0], a[1]) for a in ins}
    for b in outs:
        twin = next((a for a in cut if a[2] == b[2]), None)
        if twin is None or (b[0], b[1]) in exact:
            continue
        index = [0] * len(dst)
        index[b[3]] = 1
        return {"output_axis": b[3], "size": b[2], "input_axis": twin[3],
                "output_axis_holds_input_axes": [a[3] for a in ins if a[0] < b[1] and b[0] < a[1]],
                "input_axis_spread_over_output_axes": [c[3] for c in outs if c[0] < twin[1] and twin[0] < c[1]],
                "example": f"output{index} holds input{_unravel(b[0], src)}"}
    return None


class ReshapeWatch:
    """Probe 1 on the live trace: reshape chains composed, each flagged chain reported once."""

    def __init__(self, recorder_rows: list[Row]) -> None:
        self.rows = recorder_rows
        self.chains: dict[int, tuple[Any, tuple[int, ...], bool]] = {}
        self.checked = 0
        self.flagged: list[tuple[int, Check]] = []

    def watch(self) -> dict[Any, Callable[..., None]]:
        return {f: self.on_reshape for f in _RESHAPES}

    def on_reshape(self, func: Any, args: Any, kwargs: Any, out: torch.Tensor, path: str) -> None:
        src = args[0] if args else kwargs.get("input")
        if not isinstance(src, torch.Tensor) or src.numel() != out.numel():
            return
        self.checked += 1
        chain = self.chains.get(id(src))
        origin, done = (chain[1], chain[2]) if chain is not None and chain[0]() is src else (tuple(src.shape), False)
        found = None if done else moved_by_reshape(origin, tuple(out.shape))
        self.chains[id(out)] = (weakref.ref(out), origin, done or found is not None)
        if found is not None:
            where = f"op:{op_name(func)}@{path}"
            found.update(op=where, chain_input_shape=list(origin), op_input_shape=list(src.shape), output_shape=list(out.shape))
            self.flagged.append((len(self.rows) - 1, moved_check(path, found)))


def moved_check(path: str, found: dict[str, Any]) -> Check:
    """The ``layout.values_moved`` finding for the evidence either probe found."""
    a, b = found["input_axis"], found["output_axis"]
    msg = (f"{found.get('op', path or '(model)')}: {found['chain_input_shape']} -> {found['output_shape']} puts input "
           f"axis {a} (size {found['size']}) across output axes {found['input_axis_spread_over_output_axes']}, while "
           f"output axis {b} (size {found['size']}) holds input axes {found['output_axis_holds_input_axes']}; "
           f"{found['example']}")
    return check(path, "layout.values_moved", Status.FAIL, msg, found,
                 expected=f"output axis {b} (size {found['size']}) walks input axis {a}",
                 observed=f"{found['example']} (values from input axes {found['output_axis_holds_input_axes']})",
                 hint=_HINT_MOVED)


# --- probe 2: user modules re-run on arange values ------------------------------------------------------------------


def _moved_by_map(in_shape: tuple[int, ...], index_map: torch.Tensor) -> dict[str, Any] | None:
    """The same criterion on an exact map ``output position -> input flat index`` (probe 2)."""
    coords = torch.stack(torch.unravel_index(index_map, in_shape), dim=-1)  # [*out_shape, rank_in]
    out_shape = tuple(index_map.shape)
    varies = [(coords.diff(dim=a) != 0).reshape(-1, len(in_shape)).any(dim=0).tolist() if out_shape[a] > 1
              else [False] * len(in_shape) for a in range(len(out_shape))]
    spread = {k: [a for a in range(len(out_shape)) if varies[a][k]] for k in range(len(in_shape))}
    for a, size in enumerate(out_shape):
        axes = [k for k in range(len(in_shape)) if varies[a][k]]
        if size <= 1 or (len(axes) == 1 and in_shape[axes[0]] == size):
            continue
        twin = next((k for k in range(len(in_shape)) if in_shape[k] == size and len(spread[k]) > 1), None)
        if twin is not None:
            index = [0] * len(out_shape)
            index[a] = 1
            return {"output_axis": a, "size": size, "input_axis": twin, "output_axis_holds_input_axes": axes,
                    "input_axis_spread_over_output_axes": spread[twin],
                    "example": f"output{index} holds input{coords[tuple(index)].tolist()}"}
    return None


def _probe_module(path: str, module: nn.Module, args: tuple, kwargs: dict, output: Any, stats: dict) -> dict[str, Any] | None:
    outs = [t for t in tensors(output) if t.is_floating_point()]
    if not outs:
        return None
    out = outs[0]
    for i, x in enumerate(args):
        if not (isinstance(x, torch.Tensor) and x.dtype == out.dtype and x.numel() == out.numel() > 1):
            continue
        if x.numel() > min(_EXACT.get(x.dtype, 0), _PROBE_MAX) or not torch.equal(x.flatten().sort().values, out.flatten().sort().values):
            continue
        stats["modules_probed"] += 1
        probe = torch.arange(x.numel(), dtype=x.dtype, device=x.device).reshape(x.shape)
        again = next(iter(t for t in tensors(module(*args[:i], probe, *args[i + 1:], **kwargs))), None)
        if again is None or again.shape != out.shape:
            return None
        index = again.round().long()
        if not torch.equal(index.flatten().sort().values, torch.arange(x.numel(), device=x.device)):
            return None
        stats["rearrangements"].append(path or "(model)")
        hit = _moved_by_map(tuple(x.shape), index)
        if hit is not None:
            hit.update(chain_input_shape=list(x.shape), output_shape=list(out.shape))
        return hit
    return None


class _ArangeProbe:
    """Forward hooks on the copy: each user module's output probed once (not the modules a probe run calls)."""

    def __init__(self, order: dict[str, int]) -> None:
        self.order = order  # module path -> its first output row in the trace (findings sort by it)
        self.stats: dict[str, Any] = {"modules_probed": 0, "rearrangements": []}
        self.found: list[tuple[int, Check]] = []
        self.busy = False

    def after(self, path: str, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            hit = _probe_module(path, module, args, kwargs, output, self.stats)
        except Exception as exc:  # noqa: BLE001 - a module that cannot run on arange values is not probed
            self.stats["errors"] = [*self.stats.get("errors", []), f"{path or '(model)'}: {exception_line(exc)}"][:5]
            hit = None
        finally:
            self.busy = False
        if hit is not None and not any(c.finding.where == path for _, c in self.found):
            hit.update(op=path or "(model)")
            self.found.append((self.order.get(path, 0), moved_check(path, hit)))


def arange_probe(root: nn.Module, args: tuple, kwargs: dict, order: dict[str, int]) -> tuple[list[tuple[int, Check]], dict]:
    """Probe 2 on a deep copy: user modules whose output rearranges an input are re-run on arange values.
    Returns the ``(order, check)`` findings and the probe's statistics (``skipped`` when it could not run)."""
    try:
        twin, (a2, k2) = model_copy(root), copy.deepcopy((args, kwargs))
    except Exception as exc:  # noqa: BLE001 - an uncopyable model only skips the probe
        return [], {"skipped": f"the model could not be deep-copied ({exception_line(exc)})"}
    probe = _ArangeProbe(order)
    for m in twin.modules():  # the user's hooks stay on the user's model: a copy must not run them a second time
        for name in _USER_HOOKS:
            getattr(m, name).clear()
    handles = [m.register_forward_hook(functools.partial(probe.after, p), with_kwargs=True)
               for p, m in twin.named_modules() if not is_builtin(m)]
    try:
        with torch.no_grad():
            twin(*a2, **k2)
    except Exception as exc:  # noqa: BLE001 - the trace already reports the failure; the probe stops there
        probe.stats["stopped"] = exception_line(exc)
    finally:
        for h in handles:
            h.remove()
    return probe.found, probe.stats


def examples_mixed(c: Check, examples: int | None, crosses: Callable[[], bool | None]) -> Check:
    """Evidence before FAIL for ``layout.values_moved``: a rearrangement is a defect when it moves values between
    examples (the input's one axis of the examples' size is spread over output axes, or shares an output axis with
    others) and the model's output for another example then moves when one example's input changes (``crosses``, on a
    copy). Moved only among the other axes (patches to an image, a relative-position shift) it may be the design: the
    same finding as a WARN saying so; an examples axis that cannot be told apart, a regrouping after which every
    example's output still depends on its own input alone (a batch of vectors split from each example's features), or
    a counterfactual that could not run leaves it unconfirmed (WARN)."""
    f = c.finding
    if f.check != "layout.values_moved" or f.status is not Status.FAIL:
        return c
    shape = f.evidence.get("chain_input_shape") or []
    axes = [k for k, size in enumerate(shape) if size == examples]
    held = f.evidence.get("output_axis_holds_input_axes") or []
    mixed = len(axes) == 1 and (f.evidence.get("input_axis") == axes[0] or (axes[0] in held and len(held) > 1))
    crossed = crosses() if mixed else None
    if mixed and crossed:
        return check(f.where, f.check, Status.FAIL, f"{f.message}; the model's output for other examples moves when one "
                     "example's input alone changes", {**f.evidence, "examples": examples, "output_crosstalk": True},
                     expected=c.expected, observed=c.observed, hint=c.hint)
    why = (f"the examples axis (size {examples}) of input {shape} keeps its values" if len(axes) == 1 and not mixed else
           f"which axis of input {shape} holds the {examples} examples is not clear, so mixing them is not shown"
           if not mixed else "yet each example's output depends on its own input alone (changing one example's input "
           "moves no other example's output)" if crossed is False else
           "and whether other examples' outputs move with one example's input could not be checked")
    return check(f.where, f.check, Status.WARN, f"{f.message}; {why}: a rearrangement that may be the design "
                 "(patches to an image, a relative-position shift, examples regrouped with their features), or a reshape "
                 "where a permute was meant",
                 {**f.evidence, "examples": examples, "examples_mixed": bool(mixed), "output_crosstalk": crossed})


def output_crosstalk(root: nn.Module | None, fn: Any, args: tuple, kwargs: dict, batch_axis: int,
                     examples: int | None) -> bool | None:
    """Whether another example's output moves when example 0's inputs alone are replaced by example 1's: on a deep copy
    in eval mode (no batch statistics, no dropout) with the RNGs reseeded per forward. Outputs with exactly one axis of
    the examples' size are compared (that axis, all but example 0), beyond 1e-4 of their scale; None where the copy
    or its forward cannot run, or no output shows the examples."""
    if root is None or not examples or examples < 2:
        return None
    try:
        work = set_mode(copy.deepcopy(root), False)
        call = work if fn is root else getattr(work, getattr(fn, "__name__", ""))
        with preserved_globals(seed=0), torch.no_grad():
            base = call(*args, **kwargs)
        with preserved_globals(seed=0), torch.no_grad():
            new = call(*_first_replaced(args, batch_axis, examples), **_first_replaced(kwargs, batch_axis, examples))
    except Exception:  # noqa: BLE001 - the user's forward on a copy: unconfirmed
        return None
    moves = [_others_moved(a, b, examples) for a, b in zip(tensors(base), tensors(new))]
    seen = [m for m in moves if m is not None]
    return any(seen) if seen else None


def _first_replaced(x: Any, axis: int, n: int) -> Any:
    if torch.is_tensor(x):
        if x.dim() <= axis or x.shape[axis] != n:
            return x
        y = x.clone()
        y.select(axis, 0).copy_(x.select(axis, 1))
        return y
    if isinstance(x, dict):
        return {k: _first_replaced(v, axis, n) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return rebuild(x, [_first_replaced(v, axis, n) for v in x])
    return x


def _others_moved(a: torch.Tensor, b: torch.Tensor, n: int) -> bool | None:
    axes = [k for k in range(a.dim()) if a.shape[k] == n]
    if len(axes) != 1 or a.shape != b.shape or not a.is_floating_point():
        return None
    a, b = a.movedim(axes[0], 0)[1:].double(), b.movedim(axes[0], 0)[1:].double()
    scale = max(float(a.abs().max()), 1e-12) if a.numel() else 1.0
    return bool(((a - b).abs().nan_to_num(0.0) > 1e-4 * scale).any())
