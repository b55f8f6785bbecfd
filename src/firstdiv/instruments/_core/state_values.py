"""Comparing a tensor with its saved copy, and putting the saved values back without leaving a mark.

Giving back a value is not enough: code holding the tensor object (``p.grad`` in DDP bucket views or in
accumulation buffers, optimizer state) must still hold it, and a pending autograd graph that saved the
tensor checks its version counter on ``backward()``. So values are copied into the original object, only
where they differ, and the version counter is wound back once the values are bitwise what they were.
"""

from __future__ import annotations

from typing import Any

import torch

# torch's own hook for restoring a version counter (functionalization uses it); absent in old releases,
# where restoring values still works and only the counter stays advanced
_SET_VERSION = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)


def version_of(t: torch.Tensor) -> int | None:
    """``t._version``, or None for tensors without a counter (inference tensors)."""
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):
        return None


def rewind_version(t: torch.Tensor, version: int | None) -> None:
    """Set ``t``'s version counter back to ``version``. Only call it when ``t`` holds exactly the values it
    held at that version: a graph that saved ``t`` then computes the gradient it would have computed."""
    now = version_of(t)
    if _SET_VERSION is None or version is None or now is None or now == version:
        return
    try:
        _SET_VERSION((t,), (version,))
    except (RuntimeError, TypeError):  # a tensor kind without a settable counter keeps its advanced one
        pass


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Same layout and bitwise-equal values, NaNs in the same places counting as equal."""
    if a is None or b is None:
        return a is None and b is None
    if a.is_meta or b.is_meta:  # no values to compare: layout only
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if a.layout != b.layout:
        return False
    if a.is_sparse:  # a sparse .grad (EmbeddingBag(sparse=True)): the same entries at the same indices
        a, b = a.coalesce(), b.coalesce()
        return a.shape == b.shape and same(a.indices(), b.indices()) and same(a.values(), b.values())
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            and bool(torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                           and torch.equal(a.nan_to_num(), b.nan_to_num()))))


def neq(a: Any, b: Any) -> bool:
    """Whether two saved values (tensors, containers of them, plain values) differ."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return not (torch.is_tensor(a) and torch.is_tensor(b) and same(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) != set(b) or any(neq(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(neq(x, y) for x, y in zip(a, b))
    try:
        return bool(a != b)
    except Exception:  # noqa: BLE001 - incomparable objects count as changed only if not identical
        return a is not b


def put_back(t: torch.Tensor, value: torch.Tensor, version: int | None) -> None:
    """Give ``t`` (the original object) the saved ``value`` and ``version``: copied in only where it differs,
    so an unchanged tensor is not written at all. Call under ``torch.no_grad()``."""
    current = t.detach()
    if not same(current, value):
        if current.shape == value.shape and current.dtype == value.dtype and current.device == value.device:
            t.data.copy_(value)
        else:  # resized, cast or moved: give back the saved layout
            t.data = value.clone()
    rewind_version(t, version)
