"""What compare_outputs, variants and DiagnosticSet share: how fixed inputs are passed to a variant, how a
nested output is split into named leaves, and how two outputs are compared leaf by leaf under a tolerance.

Calling convention (``split_inputs``): a tuple is the positional arguments, a dict the keyword arguments,
anything else (a tensor, a list, a string) the single positional argument. Wrap a tuple meant as one
argument in another tuple: ``((a, b),)``.

Leaves (``leaves``): tensors, numbers, strings, None; containers (tuples, lists, namedtuples, dicts and
mappings such as Hugging Face ``ModelOutput``) are walked, and each leaf is named by its path
(``output``, ``output[0]``, ``output['logits']``). A key/value cache object (a transformers ``Cache``:
``DynamicCache``, ``EncoderDecoderCache`` ...; see ``is_cache``) is not compared by value (it has no ``==``
over its tensors): ``cache_tree`` turns it into a dict of its tensors (``output['cache']['layers'][0]['keys']``),
and ``leaves(..., caches=[])`` lists the paths where that happened, so the report can say so. Sparse and
other non-strided tensors are compared as dense tensors.

Tolerance (``Tolerance``): an element passes when ``|v - r| <= atol + rtol * s`` where ``s = |r|`` (the
element itself, as ``torch.allclose``) when ``relative_to == "element"``, or ``s = max |r|`` over the leaf
tensor (its output scale) when ``relative_to == "scale"`` -- the honest tolerance for lossy variants such
as int8, whose error is a fraction of the tensor's range, not of each element.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from .batch import describe_error
from .state import guarded

RELATIVE_TO = ("element", "scale")
_MAX_PROBLEMS = 5


@dataclass(frozen=True)
class Tolerance:
    """Per-variant tolerance: ``|v - r| <= atol + rtol * s`` with ``s = |r|`` ("element") or ``max |r|`` of
    the leaf tensor ("scale")."""

    rtol: float = 1e-4
    atol: float = 1e-5
    relative_to: str = "element"

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidArgument(f"Expected `{name}` to be a finite number >= 0 but got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.relative_to not in RELATIVE_TO:
            raise InvalidArgument(f"Expected `relative_to` to be 'element' or 'scale' but got {self.relative_to!r}")

    def describe(self) -> str:
        s = "|r|" if self.relative_to == "element" else "max|r| of the tensor"
        return f"|v - r| <= {self.atol:g} + {self.rtol:g} * {s}"

    def to_dict(self) -> dict[str, Any]:
        return {"rtol": self.rtol, "atol": self.atol, "relative_to": self.relative_to}


def as_tolerance(value: Any, name: str) -> Tolerance:
    """A Tolerance from a Tolerance, ``(rtol, atol)``, ``(rtol, atol, relative_to)`` or a dict of those keys."""
    if isinstance(value, Tolerance):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"rtol", "atol", "relative_to"}
        if not unknown:
            return Tolerance(**value)
    elif isinstance(value, (tuple, list)) and len(value) in (2, 3):
        return Tolerance(*value)
    raise InvalidArgument(f"Expected tolerance for {name!r} to be (rtol, atol), (rtol, atol, 'scale') or a Tolerance "
                          f"but got {value!r}")


def split_inputs(inputs: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` for the calling convention in the module docstring."""
    if isinstance(inputs, tuple) and not hasattr(inputs, "_fields"):
        return tuple(inputs), {}
    if isinstance(inputs, dict):
        bad = next((k for k in inputs if not isinstance(k, str)), None)
        if bad is not None:
            raise InvalidArgument(f"Expected a dict of inputs to have str keys (keyword arguments) but got key {bad!r}")
        return (), dict(inputs)
    return (inputs,), {}


def clone_tree(value: Any) -> Any:
    """A copy of ``value`` whose tensors are detached clones (so a variant that writes into its inputs, or an
    in-place op after a hook, cannot change what was recorded)."""
    if torch.is_tensor(value):
        return value.detach().clone()
    if is_cache(value):
        return copy.deepcopy(value)  # a cache passed in (past_key_values) is written into by the model
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(clone_tree(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(clone_tree(v) for v in value)
    if isinstance(value, Mapping):
        return {k: clone_tree(v) for k, v in value.items()}
    return value


_CACHE_BASES = ("Cache", "CacheLayerMixin", "LinearAttentionCacheLayerMixin")


def is_cache(value: Any) -> bool:
    """A transformers key/value cache (or one of its layers): a class named ``Cache``/``CacheLayerMixin`` from
    ``transformers`` in its MRO, or an object with ``key_cache``/``value_cache`` lists (older transformers)."""
    if isinstance(value, type) or torch.is_tensor(value):
        return False
    if any(c.__name__ in _CACHE_BASES and c.__module__.startswith("transformers") for c in type(value).__mro__):
        return True
    return isinstance(getattr(value, "key_cache", None), list) and isinstance(getattr(value, "value_cache", None), list)


def cache_tree(value: Any, depth: int = 0) -> dict[str, Any]:
    """The tensors a cache holds, as nested dicts/lists named by attribute (``{'layers': [{'keys': t, ...}]}``);
    non-tensor attributes (flags, devices, configs) are left out."""
    out: dict[str, Any] = {}
    for key, item in sorted(vars(value).items()) if hasattr(value, "__dict__") else ():
        kept = _cache_item(item, depth + 1)
        if kept is not None:
            out[key] = kept
    return out


def _cache_item(item: Any, depth: int) -> Any:
    if torch.is_tensor(item):
        return item
    if depth > 6:
        return None
    if is_cache(item):
        return cache_tree(item, depth)
    if isinstance(item, (list, tuple)):
        kept = [_cache_item(x, depth + 1) for x in item]
        return kept if any(x is not None for x in kept) else None
    return None


def leaves(value: Any, path: str = "output", caches: list[str] | None = None) -> dict[str, Any]:
    """``{path: leaf}`` in traversal order (see the module docstring); the paths of cache objects turned into
    their tensors are appended to ``caches`` when given."""
    if torch.is_tensor(value) or value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return {path: value}
    if is_cache(value):
        if caches is not None:
            caches.append(path)
        value = cache_tree(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(leaves(v, f"{path}[{k!r}]", caches))
        return out
    if isinstance(value, (tuple, list)):
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}[{i}]", caches))
        return out
    to_tuple = getattr(value, "to_tuple", None)
    if callable(to_tuple):
        return leaves(to_tuple(), path, caches)
    return {path: value}


@dataclass
class LeafError:
    """Error of one leaf against the reference. ``ratio`` = max over elements of error / allowed error
    (> 1 means outside tolerance); ``problem`` explains a structural mismatch."""

    path: str
    elements: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    violations: int = 0
    problem: str = ""


def _as_number(value: Any) -> torch.Tensor | None:
    if isinstance(value, (bool, int, float)):
        return torch.tensor(float(value), dtype=torch.float64)
    return None


def _tensor_error(path: str, r: torch.Tensor, v: torch.Tensor, tol: Tolerance) -> LeafError:
    if tuple(r.shape) != tuple(v.shape):
        return LeafError(path, ratio=math.inf, problem=f"shape {list(v.shape)} vs reference {list(r.shape)}")
    kind = torch.complex128 if (r.is_complex() or v.is_complex()) else torch.float64
    r64, v64 = _dense(r).to("cpu", kind), _dense(v).to("cpu", kind)
    if r64.numel() == 0:
        return LeafError(path)
    diff = (v64 - r64).abs()
    same = (r64 == v64) | (r64.isnan() & v64.isnan())  # equal infinities and NaN where NaN is expected
    diff = torch.where(same, torch.zeros_like(diff), diff.nan_to_num(nan=math.inf, posinf=math.inf))
    mag = r64.abs()
    finite = mag[mag.isfinite()]
    scale = mag if tol.relative_to == "element" else (finite.max() if finite.numel() else torch.tensor(0.0, dtype=torch.float64))
    bound = tol.atol + tol.rtol * scale
    over = diff > bound
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / bound)
    nz = mag > 0
    rel = float((diff[nz] / mag[nz]).max()) if bool(nz.any()) else (0.0 if float(diff.max()) == 0 else math.inf)
    return LeafError(path, r64.numel(), float(diff.max()), float(diff[diff.isfinite()].sum()), rel,
                     float(ratio.max()), int(over.sum()))


def _dense(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_quantized:
        t = t.dequantize()
    return t


def leaf_error(path: str, r: Any, v: Any, tol: Tolerance) -> LeafError:
    """Compare one leaf of the variant (``v``) with the reference's (``r``)."""
    if torch.is_tensor(r) and torch.is_tensor(v):
        return _tensor_error(path, r, v, tol)
    rn, vn = _as_number(r), _as_number(v)
    if rn is not None and vn is not None:
        return _tensor_error(path, rn, vn, tol)
    if torch.is_tensor(r) != torch.is_tensor(v):
        what = f"{type(v).__name__} vs reference {type(r).__name__}"
        return LeafError(path, ratio=math.inf, problem=what)
    try:
        equal = bool(r == v)
    except Exception:  # noqa: BLE001 - objects without a usable == are compared by identity
        equal = r is v
    return LeafError(path, 1, ratio=0.0 if equal else math.inf, violations=0 if equal else 1,
                     problem="" if equal else f"value {v!r:.60} vs reference {r!r:.60}")


@dataclass
class Comparison:
    """Every leaf of a variant's output against the reference's, and the aggregate numbers."""

    leaves: list[LeafError] = field(default_factory=list)
    caches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(leaf.ratio <= 1.0 and not leaf.problem for leaf in self.leaves)

    @property
    def worst(self) -> LeafError | None:
        return max(self.leaves, key=lambda leaf: (bool(leaf.problem), leaf.ratio), default=None)

    def summary(self) -> dict[str, Any]:
        n = sum(leaf.elements for leaf in self.leaves)
        worst = self.worst
        problems = [f"{leaf.path}: {leaf.problem}" for leaf in self.leaves if leaf.problem][:_MAX_PROBLEMS]
        out = {"max_abs_error": _num(max((leaf.max_abs for leaf in self.leaves), default=0.0)),
               "mean_abs_error": _num(sum(leaf.sum_abs for leaf in self.leaves) / n if n else 0.0),
               "max_rel_error": _num(max((leaf.max_rel for leaf in self.leaves), default=0.0)),
               "tolerance_ratio": _num(worst.ratio if worst else 0.0),
               "worst_leaf": worst.path if worst else "",
               "elements": n, "violations": sum(leaf.violations for leaf in self.leaves)}
        if problems:
            out["problems"] = problems
        return out


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def compare(reference: Any, observed: Any, tol: Tolerance) -> Comparison:
    """Leaf-by-leaf comparison; a leaf missing on either side is a problem leaf. ``caches`` lists the paths
    where the reference's output held a cache object (compared by its tensors)."""
    caches: list[str] = []
    ref, obs = leaves(reference, caches=caches), leaves(observed)
    out = Comparison(caches=caches)
    for path, r in ref.items():
        if path not in obs:
            out.leaves.append(LeafError(path, ratio=math.inf, problem="missing from the variant's output"))
        else:
            out.leaves.append(leaf_error(path, r, obs[path], tol))
    for path in obs:
        if path not in ref:
            out.leaves.append(LeafError(path, ratio=math.inf, problem="not in the reference output"))
    return out


@dataclass
class Run:
    """One call of a variant: its output, or the one-line error it raised, and the wall time."""

    output: Any = None
    error: str = ""
    seconds: float = 0.0
    grads: dict[str, Any] | None = None  # mode="train" with a loss: {parameter name: gradient or None}
    grad_error: str = ""  # why there are no gradients


def call_once(variant: Any, args: tuple, kwargs: dict) -> Run:
    """Run once under no_grad on cloned inputs inside ``guarded`` (a module's values, buffers, hooks and train flags,
    the RNG states and grad mode are restored), so observing leaves no trace."""
    module = variant if isinstance(variant, nn.Module) else None
    start = time.perf_counter()
    try:
        with guarded(*([module] if module is not None else [])), torch.no_grad():
            out = variant(*clone_tree(args), **clone_tree(kwargs))
    except Exception as exc:  # noqa: BLE001 - a variant that raises on the fixed inputs is a finding
        return Run(error=describe_error(exc), seconds=time.perf_counter() - start)
    return Run(out, "", time.perf_counter() - start)
