"""``task.mask_unread``: a 0/1 mask the program hands its loss, that the loss never reads.

Structured targets (a tuple, list or dict: a replay sample ``(action, reward, next_state, done_mask)``, a detection
target with its regression mask) carry masks whose only purpose is to gate a term: stop the bootstrap at an episode's
end, keep the regression loss to the objects that exist. A mask dropped from the loss trains without an error. The
premise is read from the program: on the ledger's copy (same seed, no gradient), flipping the mask (``1 - mask``) leaves
the loss bit-identical, while changing another target component (rolled across the batch) moves it -- the loss reads
its targets, just not this one -- and the mask filled with NaN leaves it bit-identical too: a mask the loss reads only
through a factor that is zero at this state (TD7's bootstrap ``not_done * gamma * Q.clamp(lo, hi)`` while the clamp
range is still [0, 0]) carries the NaN into the loss, or makes it raise, and is read. A mask that is read (even
through a wrong formula) is no finding; a component that is
not 0/1 valued is not judged, nor is one of a single value unless it is one per example (``[B]``, ``[B, 1]``: a done
mask of a sample with no episode end still changes a loss that reads it when flipped)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._core.batch import Batch
from .._core.checks import Check
from .._core.task import Ctx
from ._common import batch_size, failed
from ._dependency import seeded_loss


def _array(v: Any) -> bool:
    return torch.is_tensor(v) or (isinstance(v, np.ndarray) and v.dtype.kind in "biuf")


def target_leaves(t: Any) -> list[tuple[str, Any]]:
    if isinstance(t, dict):
        return [(f"targets[{k!r}]", v) for k, v in t.items() if _array(v)]
    if isinstance(t, (tuple, list)):
        fields = getattr(t, "_fields", None)
        return [(f"targets.{fields[i]}" if fields else f"targets[{i}]", v) for i, v in enumerate(t) if _array(v)]
    return []


def replace_target(t: Any, name: str, value: Any) -> Any:
    if isinstance(t, dict):
        return {k: (value if f"targets[{k!r}]" == name else v) for k, v in t.items()}
    fields = getattr(t, "_fields", None)
    items = [value if (f"targets.{fields[i]}" if fields else f"targets[{i}]") == name else v for i, v in enumerate(t)]
    return type(t)(*items) if fields else type(t)(items)


def _binary(v: Any, n: int | None) -> bool:
    """0/1 values; of both values, or of one value in a per-example shape (``[B]``, ``[B, 1]``: a done mask of a batch
    with no episode end)."""
    v = torch.as_tensor(v)
    if v.numel() < 2 or v.is_complex():
        return False
    values = v.detach().reshape(-1)
    zeros, ones = values == 0, values == 1
    if not bool((zeros | ones).all()):
        return False
    per_example = n is not None and v.shape[0] == n and (v.dim() == 1 or (v.dim() == 2 and v.shape[1] == 1))
    return (bool(zeros.any()) and bool(ones.any())) or per_example


def flip(t: Any, name: str) -> Any:
    """The target component ``name`` of ``t`` flipped (``1 - mask``)."""
    return _flipped(dict(target_leaves(t))[name])


def _flipped(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ~v if v.dtype == bool else (1 - v).astype(v.dtype)
    return ~v if v.dtype == torch.bool else (1 - v).to(v.dtype)


def _poisoned(v: Any) -> Any:
    """``v`` filled with NaN (float32): whatever arithmetic reads it carries the NaN into the loss."""
    if isinstance(v, np.ndarray):
        return np.full(v.shape, np.nan, dtype=np.float32)
    return torch.full(v.shape, float("nan"), dtype=torch.float32, device=v.device)


def _rolled(v: Any) -> Any:
    return np.roll(v, 1, axis=0) if isinstance(v, np.ndarray) else v.roll(1, 0)


def _loss(ctx: Ctx, targets: Any) -> float | None:
    out = seeded_loss(ctx, Batch(ctx.batch.inputs, targets, ctx.batch.as_kwargs))
    loss = None if out is None else out[1]
    return float(loss.detach().double().reshape(())) if torch.is_tensor(loss) and loss.numel() == 1 else None


def mask_unread(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """The FAIL for the first 0/1 target component the loss never reads (module docstring), else None."""
    t = ctx.batch.targets
    leaves = target_leaves(t)
    n = batch_size(ctx.batch)
    masks = [(name, v) for name, v in leaves if _binary(v, n)]
    if len(leaves) < 2 or not masks:
        return None
    base = _loss(ctx, t)
    if base is None:
        return None
    for name, mask in masks:
        if _loss(ctx, replace_target(t, name, _flipped(mask))) != base:
            continue
        if _loss(ctx, replace_target(t, name, _poisoned(mask))) != base:  # read, through a factor zero at this state
            continue
        read = next((other for other, v in leaves if other != name and v.ndim >= 1 and v.shape[0] >= 2
                     and _loss(ctx, replace_target(t, other, _rolled(v))) not in (None, base)), None)
        if read is None:
            return None
        size = int(np.prod(mask.shape))
        zeros = size - int(torch.as_tensor(mask).count_nonzero())
        ev.update(unread_mask=name, mask_zeros=zeros, mask_size=size, read_component=read)
        return failed("TASK", "task.mask_unread",
                      f"the loss never reads {name}, a 0/1 mask ({zeros} of {size} zeros): flipping it, or filling "
                      f"it with NaN, leaves the loss bit-identical ({base:.6g}) while changing {read} moves it; the "
                      "mask gates nothing (a "
                      "done mask dropped from a bootstrapped target, a loss mask left out)", ev,
                      expected=f"the loss depends on {name}", observed=f"loss unchanged when {name} is flipped",
                      hint=f"apply {name} where the loss needs it (e.g. target = r + gamma * next_value * not_done)")
    return None
