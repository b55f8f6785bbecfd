"""Eager vs compiled outputs, leaf by leaf, and the inputs each call gets.

``compare(eager, compiled, rtol, atol)`` walks both outputs together: tensors in tuples, lists, dicts
(``ModelOutput`` is a dict), dataclasses and named tuples are compared leaf by leaf; a key/value cache object
(a transformers ``Cache``) by the tensors it holds (its paths are listed in ``caches``); sparse tensors as dense. A tensor leaf passes when
``|compiled - eager| <= atol + rtol * |eager|`` everywhere (NaN where eager has NaN counts as equal); its
max abs error and max relative error (``|compiled - eager| / |eager|`` over nonzero ``eager``) are recorded.
A different structure, shape or dtype is a mismatch named by its path (``out[0]['logits']``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .._core.outputs import cache_tree, is_cache


@dataclass
class Comparison:
    """One input's eager-vs-compiled comparison. ``problem`` is '' when every leaf matched in structure."""

    leaves: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: str = ""  # path of the leaf with the largest violation (or the largest error when none)
    bad_elements: int = 0
    problem: str = ""
    caches: list[str] = field(default_factory=list)
    _worst_excess: float = field(default=-math.inf, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problem and self.bad_elements == 0


def _tensor(path: str, a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, out: Comparison) -> None:
    out.leaves += 1
    if a.shape != b.shape or a.dtype != b.dtype:
        out.problem = out.problem or (f"{path}: eager {list(a.shape)} {str(a.dtype).replace('torch.', '')} vs compiled "
                                      f"{list(b.shape)} {str(b.dtype).replace('torch.', '')}")
        return
    if a.numel() == 0:
        return
    a, b = _dense(a).to("cpu"), _dense(b).to("cpu")
    if not (a.is_floating_point() or a.is_complex()):
        bad = int((a != b).sum())
        err, rel, excess = (float((a.double() - b.double()).abs().max()) if bad else 0.0), (math.inf if bad else 0.0), bad
    else:
        a64 = a.to(torch.complex128 if a.is_complex() else torch.float64)
        b64 = b.to(a64.dtype)
        both_nan = a64.isnan() & b64.isnan()
        diff = (b64 - a64).abs().masked_fill(both_nan, 0.0).nan_to_num(nan=math.inf)
        scale = a64.abs().nan_to_num(nan=0.0)
        allowed = atol + rtol * scale
        bad_mask = diff > allowed
        bad = int(bad_mask.sum())
        err = float(diff.max())
        nz = scale > 0
        rel = float((diff[nz] / scale[nz]).max()) if bool(nz.any()) else (0.0 if err == 0 else math.inf)
        excess = float((diff - allowed).max())
    out.bad_elements += bad
    out.max_abs, out.max_rel = max(out.max_abs, err), max(out.max_rel, rel)
    if excess > out._worst_excess:
        out._worst_excess, out.worst = excess, path


def _dense(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.to_dense() if t.layout != torch.strided else t


def _walk(path: str, a: Any, b: Any, rtol: float, atol: float, out: Comparison, depth: int) -> None:
    if out.problem or depth > 20:
        return
    if is_cache(a) and is_cache(b):
        out.caches.append(path)
        a, b = cache_tree(a), cache_tree(b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            out.problem = f"{path}: eager gave {type(a).__name__}, compiled gave {type(b).__name__}"
            return
        _tensor(path, a, b, rtol, atol, out)
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        if list(a.keys()) != list(b.keys()):
            out.problem = f"{path}: eager keys {list(a.keys())} vs compiled keys {list(b.keys())}"
            return
        for k in a:
            _walk(f"{path}[{k!r}]", a[k], b[k], rtol, atol, out, depth + 1)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.problem = f"{path}: eager has {len(a)} items, compiled {len(b)}"
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(f"{path}[{i}]", x, y, rtol, atol, out, depth + 1)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        for f in dataclasses.fields(a):
            _walk(f"{path}.{f.name}", getattr(a, f.name), getattr(b, f.name), rtol, atol, out, depth + 1)
    else:
        _scalar(path, a, b, rtol, atol, out)


def _scalar(path: str, a: Any, b: Any, rtol: float, atol: float, out: Comparison) -> None:
    out.leaves += 1
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        err = abs(a - b) if not (math.isnan(a) and math.isnan(b)) else 0.0
        if err > atol + rtol * abs(a) or (math.isnan(a) != math.isnan(b)):
            out.bad_elements += 1
            out.worst = out.worst or path
        out.max_abs = max(out.max_abs, err if not math.isnan(err) else math.inf)
        return
    try:
        same = bool(a == b)
    except Exception:  # noqa: BLE001 - objects that refuse comparison are compared by type only
        same = type(a) is type(b)
    if not same:
        out.problem = f"{path}: eager gave {a!r:.60} and compiled gave {b!r:.60}"


def compare(eager: Any, compiled: Any, rtol: float, atol: float) -> Comparison:
    """Eager (the reference) vs compiled outputs, leaf by leaf (see the module docstring)."""
    out = Comparison()
    _walk("out", eager, compiled, rtol, atol, out, 0)
    return out


# --- inputs ---------------------------------------------------------------------------------------------------


def _clone_tensor(t: torch.Tensor) -> torch.Tensor:
    c = t.detach().clone()
    if t.requires_grad:
        c.requires_grad_(True)
    for key, value in vars(t).items():  # torch._dynamo.mark_dynamic / mark_static marks travel with the clone
        if key.startswith("_dynamo"):
            setattr(c, key, copy.copy(value))
    return c


def clone_args(value: Any, depth: int = 0) -> Any:
    """A private copy of every tensor in the inputs, so a function that writes into its inputs can neither change
    the user's tensors nor feed the compiled run what the eager run wrote."""
    if isinstance(value, torch.Tensor):
        return _clone_tensor(value)
    if is_cache(value):  # past_key_values passed in: the model appends to it, so each run gets its own
        return copy.deepcopy(value)
    if depth > 10:
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(clone_args(v, depth + 1) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(clone_args(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return {k: clone_args(v, depth + 1) for k, v in value.items()}
    return value


def describe_call(args: tuple, kwargs: dict) -> str:
    """``([2, 5, 8] float32, 3)`` — shapes and dtypes of tensors, values of small Python scalars."""
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"{list(v.shape)} {str(v.dtype).replace('torch.', '')}" + ("" if v.device.type == "cpu" else f" {v.device}")
        if isinstance(v, (bool, int, float)) or v is None:
            return repr(v)
        if isinstance(v, str):
            return repr(v[:20])
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(x) for x in v[:6]) + (", ..." if len(v) > 6 else "") + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {one(x)}" for k, x in list(v.items())[:6]) + "}"
        return type(v).__name__
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"
