"""OBJECTIVE's reading of the loss the user's own ``train_step`` backpropagates. ``loss_fn`` is how the user says the
loss is applied, but a loop often computes its loss itself (``criterion(F.softmax(out), y)`` written in the step), and
a loss misfed there (probabilities into a loss that applies its own softmax or sigmoid, raw scores into an NLL) never
reaches ``loss_fn``. One call of ``train_step`` on the user's objects, under :func:`guarded` (everything put back),
reads the graph of every tensor the call backpropagates, before the backward frees it, with the same two-fold
confirmation as ``loss_fn``'s graph (:mod:`.._core.loss_graph`: the graph's nodes and the values the loss node saved).
"""

from __future__ import annotations

import torch

from .._core.closure import closure_state
from .._core.loss_graph import Misfed, misfed_backwards
from .._core.state import guarded
from .._core.task import Ctx


def step_misfed(ctx: Ctx) -> Misfed | None:
    """What the first misfed loss node of ``train_step``'s own backward is, or None (no train_step, nothing misfed, or
    the step raised: other links report a step that raises)."""
    if ctx.train_step is None:
        return None
    if "step_misfed" not in ctx.notes:
        found: list[Misfed] = []
        try:
            with guarded(ctx.model, ctx.optimizer, ctx.train_step, closure_state(ctx.train_step)), \
                    torch.enable_grad(), misfed_backwards(found):
                ctx.train_step()
        except Exception:  # noqa: BLE001 - the user's step: PARAMETER_UPDATE reports a step that raises
            found = []
        ctx.notes["objective_ran_train_step"] = 1
        ctx.notes["step_misfed"] = found[0] if found else None
    return ctx.notes["step_misfed"]
