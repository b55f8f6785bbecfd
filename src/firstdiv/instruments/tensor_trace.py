"""Tensor trace (appendix section 2): find the first wrong tensor, not the first illegal one.

One forward pass is recorded at every module boundary (input and output of each registered module) and
at every functional op (``F.relu``, ``torch.cat``, ``view``/``permute``/``reshape``/``transpose``,
``matmul``, ``softmax`` ...), each op attributed to the innermost running module (``op:<name>@<module
path>``): shape, dtype, device, stride and contiguity, never values. Against that ledger:

- **Named-axis contracts** ``{module path: "B T D"}`` (``""`` = the model's output) are checked on each
  call's output without editing the model. Names are bound on first sight ("B" takes the size of the
  first tensor that has it; later tensors must agree), integers are literal sizes, ``...`` stands for any
  number of axes. The first violated contract in execution order is a ``contract.axis_mismatch``.
- **Values moved across axes** (``layout.values_moved``). A tensor can have the right shape and the wrong
  meaning; random numbers hide that, arange values show it. Two probes:

  1. *Reshape check (every trace, costs nothing).* Each ``view``/``reshape``/``flatten``/``unflatten``
     (chains of them composed) is analysed as ``arange(input).reshape(output)``: in row-major order, input
     axis ``j`` occupies the flat-index digits ``[stride_j, stride_j * n_j)``. An input axis is *cut* when
     its digits do not fall inside one output axis: its values are spread over several output axes. A
     reshape is flagged when an input axis of size ``n`` is cut **and** an output axis of the same size
     ``n`` is not that axis (it holds pieces of other axes): the output has an axis that looks like the
     input's axis but is not. This is exactly the merge-heads bug ``[B, H, T, Dh] -> view(B, T, H*Dh)``
     (T is cut into (T/H, H); the output's "T" axis holds (H, T/H)), HWC read as CHW with ``reshape``, and
     NCHW -> NHWC by ``view``. Merges of adjacent axes, splits of one axis and a permute followed by a merge
     are never flagged; a split-then-merge whose sizes do not coincide with a cut axis is not flagged
     either (``[T, B, E] -> [T, B*H, Dh]`` is legitimate), so the rule errs towards silence. Ops inside
     ``torch.nn``'s own modules (``nn.MultiheadAttention``) are trusted and not checked.
  2. *Arange probe (``layout_probe=True``).* On a deep copy, every user-defined module whose output is a
     rearrangement of one of its float inputs (same number of elements, same sorted values) is run again
     on ``arange`` values in that input's place, which gives the exact map "output position <- input
     position". The same criterion is applied to that map (an input axis cut across output axes while an
     output axis of its size walks other axes), which catches rearrangements made by indexing, ``cat`` or
     ``as_strided`` rather than ``reshape``. Modules that only permute axes are legitimate (a transpose is a
     choice only a contract can judge: declare one).

If the forward pass raises, the report still holds the ledger up to the failure (``trace.forward_raised``,
``where`` = the innermost module running when it raised, evidence = the exception and the last rows).
The user's model is run once under a guard (buffers, RNG states and grad mode restored, hooks removed);
the arange probe runs on a deep copy.
"""

from __future__ import annotations

import copy
import math
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import InvalidArgument
from ..report import Report, Status
from ._checks import Check, check, compose
from ._state import guarded
from ._trace import Recorder, Row, call_args, exception_line, is_builtin, op_name, tensors

__all__ = ["tensor_trace"]

_NAME = "tensor_trace"
_MAX_DETAIL_ROWS = 5000
_RESHAPES = (torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.Tensor.flatten, torch.flatten,
             torch.Tensor.unflatten, torch.unflatten, torch.Tensor.view_as, torch.Tensor.reshape_as,
             torch.Tensor.contiguous, torch.Tensor.squeeze, torch.squeeze, torch.Tensor.unsqueeze, torch.unsqueeze)
_PROBE_MAX = 2 ** 20  # elements: larger rearrangements are not probed (the index map costs rank x 8 bytes each)
_EXACT = {torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8, torch.float32: 2 ** 24, torch.float64: 2 ** 53}
_USER_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_']*|\d+|\.\.\.)$")
_HINT_MOVED = ("reshape/view where a permute/transpose was meant: move the axes into the intended order first "
               "(e.g. .transpose(1, 2)), then merge with reshape; a reshape never reorders values")


# --- named-axis contracts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    text: str
    head: tuple[str | int, ...]
    tail: tuple[str | int, ...] | None  # after "..."; None when the spec has no "..."


def _parse(key: str, text: Any) -> _Spec:
    if not isinstance(text, str):
        raise InvalidArgument(f"Expected contract for {key!r} to be a string of axis names like 'B T D' but got "
                              f"{type(text).__name__}")
    tokens = text.replace(",", " ").split()
    bad = next((t for t in tokens if not _TOKEN.match(t)), None)
    if not tokens or bad is not None or tokens.count("...") > 1:
        why = f"token {bad!r}" if bad else ("several '...'" if tokens else "an empty string")
        raise InvalidArgument(f"Expected contract for {key!r} to be axis names, integers or one '...' separated by "
                              f"spaces (like 'B T D') but got {why}")
    parsed = [int(t) if t.isdigit() else t for t in tokens]
    if "..." in parsed:
        cut = parsed.index("...")
        return _Spec(text, tuple(parsed[:cut]), tuple(parsed[cut + 1:]))
    return _Spec(text, tuple(parsed), None)


def _contracts(contracts: Any, root: nn.Module | None) -> dict[str, list[_Spec]]:
    if contracts is None:
        return {}
    if not isinstance(contracts, dict):
        raise InvalidArgument(f"Expected `contracts` to be a dict {{module path: 'B T D'}} but got {type(contracts).__name__}")
    known = {path for path, _ in root.named_modules()} if root is not None else {""}
    out = {}
    for key, value in contracts.items():
        if not isinstance(key, str) or key not in known:
            sample = ", ".join(sorted(known - {""})[:8]) or "none"
            raise InvalidArgument(f"Expected `contracts` keys to be module paths as in named_modules() or '' for the "
                                  f"model output but got {key!r} (modules: {sample})")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        out[key] = [_parse(key, v) for v in values]
    return out


def _pairs(spec: _Spec, shape: tuple[int, ...]) -> list[tuple[int, str | int]] | None:
    """(axis, token) pairs, or None when the rank cannot match."""
    if spec.tail is None:
        return list(enumerate(spec.head)) if len(shape) == len(spec.head) else None
    if len(shape) < len(spec.head) + len(spec.tail):
        return None
    start = len(shape) - len(spec.tail)
    return list(enumerate(spec.head)) + [(start + i, t) for i, t in enumerate(spec.tail)]


def _match(spec: _Spec, shape: tuple[int, ...], bound: dict[str, dict[str, Any]], where: str) -> dict[str, Any] | None:
    """None when ``shape`` satisfies ``spec`` (new names are then bound); otherwise what disagrees."""
    pairs = _pairs(spec, shape)
    if pairs is None:
        need = f"{len(spec.head)}" if spec.tail is None else f"at least {len(spec.head) + len(spec.tail)}"
        return {"reason": f"rank {len(shape)}, '{spec.text}' needs {need} axes", "axis": None}
    new: dict[str, dict[str, Any]] = {}
    for axis, token in pairs:
        size = shape[axis]
        if isinstance(token, int):
            if size != token:
                return {"reason": f"axis {axis} is {size}, the contract says {token}", "axis": axis}
            continue
        known = bound.get(token) or new.get(token)
        if known is not None and known["size"] != size:
            return {"reason": f"axis {axis} is {size} but {token}={known['size']} (bound at {known['at'] or '(model)'} "
                              f"axis {known['axis']})", "axis": axis, "name": token, "bound": known["size"],
                    "bound_at": known["at"]}
        new.setdefault(token, {"size": size, "at": where, "axis": axis})
    for token, info in new.items():
        bound.setdefault(token, info)
    return None


def _expected(spec: _Spec, bound: dict[str, dict[str, Any]]) -> str:
    def show(t: str | int) -> str:
        return str(t) if isinstance(t, int) or t not in bound else f"{t}={bound[t]['size']}"
    parts = [show(t) for t in spec.head] + ([] if spec.tail is None else ["..."] + [show(t) for t in spec.tail])
    return f"'{spec.text}' ({', '.join(parts)})"


def _between(rows: list[Row], start: int, stop: int, inside: str) -> list[str]:
    """Where the value went between two contract boundaries, outside the module now being checked."""
    def within(path: str) -> bool:
        return path == inside or path.startswith(inside + ".") if inside else True
    seen = [Recorder.where(r) for r in rows[start + 1:stop] if r[0] != "input" and not within(r[1])]
    return list(dict.fromkeys(seen))[-8:]


def _contract_checks(rows: list[Row], specs: dict[str, list[_Spec]]) -> tuple[list[tuple[int, Check]], dict]:
    bound: dict[str, dict[str, Any]] = {}
    out: list[tuple[int, Check]] = []
    calls: dict[str, int] = {}
    failed: set[str] = set()
    last_ok = -1
    for i, row in enumerate(rows):
        if row[0] != "output" or row[1] not in specs:
            continue
        slot = int(row[3] or 0)
        if slot >= len(specs[row[1]]):
            continue
        key, spec, shape = row[1], specs[row[1]][slot], row[4]
        problem = _match(spec, shape, bound, key)
        calls[key] = calls.get(key, 0) + (slot == 0)
        ev = {"contract": spec.text, "shape": list(shape), "output": slot, "call": calls[key]}
        if problem is None:
            last_ok = i
            if calls[key] == 1 and slot == 0:
                out.append((i, check(key, "contract.axes", Status.PASS, f"{key or '(model)'} output {list(shape)} "
                                     f"matches '{spec.text}'", ev)))
            continue
        if key in failed:
            continue
        failed.add(key)
        since = _between(rows, last_ok, i, key)
        ev.update(problem, ops_since_last_match=since)
        ev.pop("reason")
        after = Recorder.where(rows[last_ok]) or "(model)" if last_ok >= 0 else "the inputs"
        out.append((i, check(key, "contract.axis_mismatch", Status.FAIL,
                             f"{key or '(model)'} output {list(shape)} violates '{spec.text}': {problem['reason']}", ev,
                             expected=_expected(spec, bound), observed=list(shape),
                             hint=f"the axes changed meaning between {after} and {key or '(model)'} (outside it: "
                                  f"{', '.join(since) or 'nothing'}); look for the transpose/permute/reshape there and "
                                  "repair the producer, do not reshape here")))
    for key in specs:
        if key not in calls:
            out.append((len(rows), check(key, "contract.not_reached", Status.WARN,
                                         f"{key or '(model)'} never returned a tensor in this forward pass, so its "
                                         f"contract '{specs[key][0].text}' was not checked", {"contract": specs[key][0].text})))
    return out, {k: v["size"] for k, v in bound.items()}


# --- layout: values moved across axes ------------------------------------------------------------------------------


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
    that is not that axis (module docstring, probe 1); None when every value stays on its axes."""
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


def _moved_by_map(in_shape: tuple[int, ...], index_map: torch.Tensor) -> dict[str, Any] | None:
    """The same criterion on an exact map ``output position -> input flat index`` (module docstring, probe 2)."""
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


class _ReshapeWatch:
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
            self.flagged.append((len(self.rows) - 1, _moved_check(path, found)))


def _moved_check(path: str, found: dict[str, Any]) -> Check:
    a, b = found["input_axis"], found["output_axis"]
    msg = (f"{found.get('op', path or '(model)')}: {found['chain_input_shape']} -> {found['output_shape']} puts input "
           f"axis {a} (size {found['size']}) across output axes {found['input_axis_spread_over_output_axes']}, while "
           f"output axis {b} (size {found['size']}) holds input axes {found['output_axis_holds_input_axes']}; "
           f"{found['example']}")
    return check(path, "layout.values_moved", Status.FAIL, msg, found,
                 expected=f"output axis {b} (size {found['size']}) walks input axis {a}",
                 observed=f"{found['example']} (values from input axes {found['output_axis_holds_input_axes']})",
                 hint=_HINT_MOVED)


def _arange_probe(root: nn.Module, args: tuple, kwargs: dict, order: dict[str, int]) -> tuple[list[tuple[int, Check]], dict]:
    """Probe 2 on a deep copy: user modules whose output rearranges an input are re-run on arange values."""
    try:
        twin, (a2, k2) = copy.deepcopy(root), copy.deepcopy((args, kwargs))
    except Exception as exc:  # noqa: BLE001 - an uncopyable model only skips the probe
        return [], {"skipped": f"the model could not be deep-copied ({exception_line(exc)})"}
    stats: dict[str, Any] = {"modules_probed": 0, "rearrangements": []}
    found: list[tuple[int, Check]] = []
    busy = [False]

    def hook(path: str) -> Callable[..., None]:
        def after(module: nn.Module, m_args: tuple, m_kwargs: dict, output: Any) -> None:
            if busy[0]:
                return
            busy[0] = True
            try:
                hit = _probe_module(path, module, m_args, m_kwargs, output, stats)
            except Exception as exc:  # noqa: BLE001 - a module that cannot run on arange values is not probed
                stats["errors"] = [*stats.get("errors", []), f"{path or '(model)'}: {exception_line(exc)}"][:5]
                hit = None
            finally:
                busy[0] = False
            if hit is not None and not any(c.finding.where == path for _, c in found):
                hit.update(op=path or "(model)")
                found.append((order.get(path, 0), _moved_check(path, hit)))
        return after

    for m in twin.modules():  # the user's hooks stay on the user's model: a copy must not run them a second time
        for name in _USER_HOOKS:
            getattr(m, name).clear()
    handles = [m.register_forward_hook(hook(p), with_kwargs=True) for p, m in twin.named_modules() if not is_builtin(m)]
    try:
        with torch.no_grad():
            twin(*a2, **k2)
    except Exception as exc:  # noqa: BLE001 - the trace already reports the failure; the probe stops there
        stats["stopped"] = exception_line(exc)
    finally:
        for h in handles:
            h.remove()
    return found, stats


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


# --- the report ----------------------------------------------------------------------------------------------------


def _model(model: Any) -> tuple[Callable[..., Any], nn.Module | None]:
    if isinstance(model, nn.Module):
        return model, model
    if not callable(model):
        raise InvalidArgument(f"Expected `model` to be a torch.nn.Module or a callable but got "
                              f"{'None' if model is None else type(model).__name__}")
    owner = getattr(model, "__self__", None)  # a bound method of a module, e.g. model.generate
    return model, owner if isinstance(owner, nn.Module) else None


def _failure_check(rec: Recorder, exc: Exception) -> Check:
    stack = rec.stack_at(exc)
    where = stack[-1] if stack else ""
    ev: dict[str, Any] = {"exception": exception_line(exc), "module_stack": stack, "rows_recorded": len(rec.rows),
                          "last_rows": [f"{r['where']} {r['event']} {r['shape']} {r['dtype']}"
                                        for r in Recorder.plain(rec.rows[-5:], max(0, len(rec.rows) - 5))]}
    if rec.failure is not None:
        ev.update(failing_op=f"op:{rec.failure['op']}@{rec.failure['module']}", op_input_shapes=rec.failure["input_shapes"])
    return check(where, "trace.forward_raised", Status.FAIL,
                 f"forward raised inside {where or '(model)'}: {ev['exception']}", ev,
                 expected="the forward pass completes", observed=ev["exception"],
                 hint="the ledger up to the failure is in details['rows']; find the first row whose shape or layout "
                      "disagrees with what you intended, not the row that raised")


def tensor_trace(model: nn.Module | Callable[..., Any], inputs: Any, *, contracts: dict[str, Any] | None = None,
                 layout_probe: bool = True) -> Report:
    """Trace one forward pass: shape, dtype, device, stride and contiguity at every module boundary and
    functional op; check named-axis contracts; report the first tensor whose axes or layout diverge.

    Args:
        model: an ``nn.Module`` or any callable (then only functional ops are seen, unless it is a bound
            method of a module).
        inputs: a tensor (``model(x)``), a tuple of positional args or a dict of keyword args.
        contracts: ``{module path: "B T D"}`` on that module's output (``""`` = the model's output); a list of
            strings checks a module's several output tensors in order.
        layout_probe: also run the arange probe on a deep copy (module docstring, probe 2).

    Returns a Report whose ``details["rows"]`` is the ledger (JSON-safe rows: ``where``, ``event``, ``op``,
    ``shape``, ``dtype``, ``device``, ``stride``, ``contiguous``), ``details["bindings"]`` the axis sizes bound.
    """
    fn, root = _model(model)
    args, kwargs = call_args(inputs)
    specs = _contracts(contracts, root)
    if not isinstance(layout_probe, bool):
        raise InvalidArgument(f"Expected `layout_probe` to be a bool but got {type(layout_probe).__name__}")
    rec = Recorder(root)
    reshapes = _ReshapeWatch(rec.rows)
    rec.watch = reshapes.watch()
    with guarded(*([root] if root is not None else [])):
        output, exc = rec.run(fn, args, kwargs)
        if exc is None and fn is not root:
            rec.record_output(output)
        order = {}
        for i, row in enumerate(rec.rows):
            if row[0] == "output":
                order.setdefault(row[1], i)
        probe_found, probe = _arange_probe(root, args, kwargs, order) if layout_probe and root is not None else ([], {})
    return _report(rec, exc, specs, reshapes, probe_found, probe, layout_probe)


def _report(rec: Recorder, exc: Exception | None, specs: dict, reshapes: _ReshapeWatch,
            probe_found: list[tuple[int, Check]], probe: dict, layout_probe: bool) -> Report:
    rows = rec.rows
    ordered, bindings = _contract_checks(rows, specs)
    flagged_paths = {c.finding.where for _, c in reshapes.flagged}
    ordered += reshapes.flagged + [(i, c) for i, c in probe_found if c.finding.where not in flagged_paths]
    modules = sum(r[0] == "output" for r in rows)
    ops = sum(r[0] == "op" for r in rows)
    ordered.append((-1, check("", "trace.forward", Status.PASS,
                              f"{modules} module outputs and {ops} op outputs recorded"
                              + ("" if exc is None else " before the failure"),
                              {"module_outputs": modules, "op_outputs": ops, "rows": len(rows)})))
    if not reshapes.flagged:
        ordered.append((len(rows), check("", "layout.reshapes", Status.PASS,
                                         f"{reshapes.checked} reshape/view ops checked: none moved values across axes",
                                         {"checked": reshapes.checked})))
    if layout_probe and probe:
        status = Status.SKIPPED if "skipped" in probe else Status.PASS
        text = probe.get("skipped") or (f"arange probe on a deep copy: {len(probe['rearrangements'])} module(s) rearrange "
                                        f"an input ({', '.join(probe['rearrangements'][:5]) or 'none'}), "
                                        f"{len(probe_found)} moved values across axes"
                                        + ("; stopped where the forward raised" if "stopped" in probe else ""))
        ordered.append((len(rows), check("", "layout.probe", status, text, probe)))
    if exc is not None:
        ordered.append((len(rows) + 1, _failure_check(rec, exc)))
    if rec.internal_errors:
        ordered.append((len(rows) + 2, check("", "trace.internal", Status.SKIPPED, "some checks could not run: "
                                             + "; ".join(rec.internal_errors[:3]), {"errors": rec.internal_errors[:10]})))
    ordered.sort(key=lambda pair: pair[0])
    details = {"rows": Recorder.plain(rows[:_MAX_DETAIL_ROWS]), "rows_total": len(rows), "bindings": bindings,
               "contracts": {k: [s.text for s in v] for k, v in specs.items()}, "raised": exc is not None}
    return compose(_NAME, [c for _, c in ordered], "none", details)
