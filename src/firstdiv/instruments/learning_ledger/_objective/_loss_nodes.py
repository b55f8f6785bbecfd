"""What the loss's own graph shows at its loss nodes, in ``loss_fn``'s graph and in every backward ``train_step`` runs:

- ``objective.shape_broadcast``: an elementwise regression loss node (mse, smooth L1, Huber) whose prediction was
  expanded along an axis it had as 1 to the length of another of its axes (``[N, 1]`` against ``[N]`` targets:
  ``[N, N]``), so every prediction meets every example's target. In ``loss_fn`` the length is the batch's example
  count; in a backward ``train_step`` runs (its own data, e.g. a value net's loss on a rollout) the prediction's own
  axes carry it;
- ``objective.target_out_of_range``: a binary cross-entropy that reduces its elements (mean or sum) with targets
  outside [0, 1] at a nonzero weight (padding marked -1 left in the loss): the loss has no floor there."""

from __future__ import annotations

from typing import Any

import torch

from ..._core.checks import Check
from ..._core.loss_graph import bce_target_outside, broadcast_into_loss
from ..._core.task import Ctx
from .._common import failed, g4
from .._step_loss import step_bce_outside, step_broadcast


def _crossed(small: list[int], wide: list[int], n: int | None) -> bool:
    """An axis of size 1 in the prediction expanded to ``n`` (to a length another of its axes has, where ``n`` is
    None), the prediction holding that length on another axis."""
    padded = [1] * (len(wide) - len(small)) + small
    return any(a == 1 and b >= 2 and (b == n if n is not None else True) and b in padded[:i] + padded[i + 1:]
               for i, (a, b) in enumerate(zip(padded, wide)))


def broadcast_inside(ctx: Ctx, od: torch.Tensor, ev: dict[str, Any]) -> Check | None:
    """loss_fn reshapes the prediction itself (``output.squeeze()`` against ``[B, 1]`` targets): the loss node's graph
    shows the prediction expanded along a new axis as long as the batch, so every prediction meets every example's
    target."""
    found = broadcast_into_loss(ctx.loss)
    n = od.shape[ctx.notes.get("example_axis", 0)] if od.dim() else 0
    if found is None or n < 2:
        return None
    small, wide = found
    if not _crossed(small, wide, n):
        return None
    ev.update(prediction_shape=small, broadcast_to=wide)
    return failed("OBJECTIVE", "objective.shape_broadcast",
                  f"inside loss_fn the prediction {small} is broadcast to {wide} against targets of another shape: "
                  f"every prediction is compared with the targets of all {n} examples", ev,
                  expected="prediction and target of the same shape at the loss",
                  observed=f"prediction {small} expanded to {wide} at the loss node",
                  hint="squeeze the targets too (or keep both [B, 1]): target.squeeze(-1), or output.view_as(target)")


def broadcast_in_step(ctx: Ctx, value: float, ev: dict[str, Any]) -> Check | None:
    """The same, in a backward ``train_step`` runs itself (loss_fn's own graph shows none)."""
    if broadcast_into_loss(ctx.loss) is not None:
        return None  # loss_fn's own graph shows one: broadcast_inside judges it with the batch's example count
    found = step_broadcast(ctx)
    if found is None or not _crossed(*found, None):
        return None
    small, wide = found
    ev.update(prediction_shape=small, broadcast_to=wide, in_train_step=True)
    return failed("OBJECTIVE", "objective.shape_broadcast",
                  f"loss {g4(value)}: in a loss train_step backpropagates (loss_fn's is sound), the prediction {small} is "
                  f"broadcast to {wide} against targets of another shape: every prediction is compared with every target", ev,
                  expected="prediction and target of the same shape at the loss",
                  observed=f"prediction {small} expanded to {wide} at the loss node",
                  hint="squeeze the prediction (v.squeeze(-1)) or unsqueeze the targets so the shapes match")


def bce_outside(ctx: Ctx, value: float, ev: dict[str, Any]) -> Check | None:
    """A binary cross-entropy node, in loss_fn's graph or a backward of train_step, reducing targets outside [0, 1]."""
    found, in_step = bce_target_outside(ctx.loss), False
    if found is None:
        found, in_step = step_bce_outside(ctx), True
    if found is None:
        return None
    ev.update(found, in_train_step=in_step)
    where = "in a loss train_step backpropagates (loss_fn's is sound), " if in_step else ""
    return failed("OBJECTIVE", "objective.target_out_of_range",
                  f"loss {g4(value)}: {where}a binary cross-entropy reducing its elements ({found['reduction']}) is given "
                  f"{found['targets_outside_0_1']} of {found['target_elements']} targets outside [0, 1] (e.g. "
                  f"{found['values_outside'][:3]}) at a nonzero weight: its loss has no floor there (y log p with y < 0 "
                  "falls without bound as p -> 0)", ev,
                  expected="binary targets in [0, 1]; positions that are not supervised dropped or weighted 0",
                  observed=f"{found['targets_outside_0_1']} targets outside [0, 1] counted by {found['loss_node']}",
                  hint="mask the padded or unlabelled positions out before the loss (reduction='none', then select or "
                       "weight them 0)")
