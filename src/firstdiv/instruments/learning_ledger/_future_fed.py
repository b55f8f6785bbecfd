"""``dependency.future_visible`` on the call ``train_step`` makes. The declared batch is called the way the model's
signature defaults say (``model(x)``); a loop may call it otherwise (``model(x, mask=False)``: the causal mask left
off in training only). Where the step's first forward takes a token sequence whose loss targets are that sequence
shifted by one, the same counterfactual runs on the step's own arguments, on the ledger's copy in eval mode with the
RNGs reseeded: the token at the middle position changes, and the predictions before it must not move."""

from __future__ import annotations

from typing import Any

import torch

from .._core.checks import Check
from .._core.examples import logits_of
from .._core.task import Ctx, is_int
from ._common import failed, g4
from ._leak import ModelCall, named_tensors
from ._step_loss import step_fed

NEXT = 0.9  # the share of positions whose target is the next token


def _next_of(ids: torch.Tensor, targets: list[torch.Tensor], ignore: int) -> bool:
    for t in targets:
        if not is_int(t) or t.numel() != ids.numel():
            continue
        t = t.reshape(ids.shape)
        keep = t[:, :-1] != ignore
        if bool(keep.any()) and float((t[:, :-1] == ids[:, 1:])[keep].float().mean()) >= NEXT:
            return True
    return False


def _described(args: tuple, kwargs: dict) -> str:
    """``model(<tensor>, mask=False)``: the step's call with its non-tensor arguments written out."""
    parts = ["<tensor>" if torch.is_tensor(a) else repr(a) for a in args]
    parts += [f"{k}=<tensor>" if torch.is_tensor(v) else f"{k}={v!r}" for k, v in kwargs.items()]
    return f"model({', '.join(parts)})"[:160]


def fed_future_visible(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """The module docstring's finding, or None."""
    fed = step_fed(ctx) if ctx.batch_axis == 0 else None
    if fed is None:
        return None
    (args, kwargs), targets = fed
    call = ModelCall(ctx, tuple(args), dict(kwargs))
    for _, ids in named_tensors((call.args, call.kwargs), ""):
        if not is_int(ids) or ids.dim() != 2 or ids.shape[1] < 4 or not _next_of(ids, targets, ctx.ignore_index):
            continue
        base = logits_of(call())
        if base is None or base.dim() != 3 or tuple(base.shape[:2]) != tuple(ids.shape):
            continue
        j = ids.shape[1] // 2
        changed = ids.clone()
        changed[:, j] = (ids[:, j] + 1) % base.shape[-1]
        moved = logits_of(call(ids, changed))
        if moved is None or moved.shape != base.shape:
            continue
        before, after = float((base[:, :j] - moved[:, :j]).abs().max()), float((base[:, j:] - moved[:, j:]).abs().max())
        if before <= 1e-5 * max(float(base.abs().max()), 1e-12) or after == 0.0:
            return None
        how = _described(args, kwargs)
        ev.update(changed_position=j, earlier_predictions_change=before, later_predictions_change=after,
                  train_step_call=how)
        return failed("DEPENDENCY", "dependency.future_visible",
                      f"next-token prediction in the call train_step makes ({how}), and the predictions before position "
                      f"{j} change (by up to {g4(before)}) when only the token at {j} changes: in training each position "
                      "sees the tokens after it, including the one it must predict (the declared batch's call is causal)",
                      ev, expected=f"predictions at positions < {j} independent of the token at {j} (a causal mask)",
                      observed=f"predictions before {j} move by {g4(before)} in {how}",
                      hint="pass the causal mask in the training loop's call as the default call does (is_causal=True, "
                           "mask=True)")
    return None
