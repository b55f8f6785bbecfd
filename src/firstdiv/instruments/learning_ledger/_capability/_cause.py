"""CAPABILITY's "cannot fit" verdict and the counterfactual a plateau needs before it is one.

A copy that plateaus at the same loss at every lr with its weights moving is not, by itself, a model that cannot
represent the batch: real objectives have floors of their own (a GAN's, a photometric loss's, a BERT from config that
needs more steps than the budget), and at first contact on public code such plateaus were false FAILs far more often
than faults. The premise, that the model cannot express these targets, is confirmed on a copy of the user's own model
and optimizer: the same copy with a learnable offset and scale on its output (per feature of the last axis, added to
the optimizer as a group of its own at the round's lr) trains for the same steps at the rounds' lrs, from the largest
down until one does not diverge (at most three). When
that copy fits (reaches the criterion the rounds missed), the missing piece is shown: an offset or scale the model
cannot produce (a bias removed, an output squashed into the wrong range) -- a FAIL. When it does not, or the outputs
are not one floating tensor, nothing was shown: a WARN. Weights that barely moved at any lr need no counterfactual:
the step size itself is shown to be the cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..._core.checks import Check
from ..._core.task import Ctx
from ..._core.trace import tensors
from .._common import failed, g4, passed, warned

#: ``retry(prepare)`` trains a copy that ``prepare(model, optimizer)`` changed first, at the rounds' lrs from the largest
#: down until a round does not diverge; it returns (outcome, first loss, best loss, lr text) of the last round run, or
#: None when none could run
Retry = Callable[[Callable[[nn.Module, torch.optim.Optimizer], None]], "tuple[str, float, float, str] | None"]


def with_output_offset(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """A learnable offset and scale per feature of the last axis on ``model``'s tensor output (created at its first
    forward, added to ``opt`` at its first group's lr); outputs of any other kind pass unchanged."""
    made: dict[str, nn.Parameter] = {}

    def hook(_m: nn.Module, _args: Any, out: Any) -> Any:
        if not (torch.is_tensor(out) and out.is_floating_point() and out.dim() >= 1):
            return None
        if not made:
            n = out.shape[-1]
            made.update(scale=nn.Parameter(torch.ones(n, dtype=out.dtype, device=out.device)),
                        offset=nn.Parameter(torch.zeros(n, dtype=out.dtype, device=out.device)))
            opt.add_param_group({"params": [made["scale"], made["offset"]], "lr": opt.param_groups[0]["lr"]})
        return out * made["scale"] + made["offset"]

    model.register_forward_hook(hook)


FLOOR_RTOL = 0.005  # a loss within this fraction of the soft targets' entropy is at that floor


def soft_floor(targets: Any) -> list[float]:
    """For each floating target tensor whose rows along the last axis are probability distributions (>= 0, summing to
    1, not all one-hot), their entropy summed and averaged over the rows: the floor of a cross-entropy against them
    (the sum or the mean reduction). Empty when no target is such."""
    out: list[float] = []
    for t in tensors(targets):
        if not t.is_floating_point() or t.dim() < 2 or t.shape[-1] < 2 or t.numel() == 0:
            continue
        t = t.detach().double()
        if bool((t < 0).any()) or not bool(torch.allclose(t.sum(-1), torch.ones((), dtype=t.dtype), atol=1e-3)):
            continue
        h = -(t * t.clamp(min=1e-300).log()).sum(-1)
        if float(h.max()) > 1e-6:
            out += [float(h.sum()), float(h.mean())]
    return out


def cannot(ctx: Ctx, ev: dict[str, Any], what: str, first: float, top_lrs: str, stuck: bool, fit: float,
           retry: Retry | None) -> Check:
    """The FAIL ``capability.cannot_overfit`` with its cause, or a WARN where the plateau's counterfactual shows none."""
    observed = f"loss {g4(first)} -> best {g4(ev['best_loss'])} ({ev['fell_by']:.2%} down) at every lr"
    expected = (f"a tiny fixed batch fitted within {ctx.overfit_steps} steps at some lr (loss down {fit:.0%} or 100% "
                "accuracy)")
    head = (f"on {what}, {ev['steps']} steps over {len(ev['rounds'])} lr rounds took the loss from {g4(first)} to best "
            f"{g4(ev['best_loss'])} ({ev['fell_by']:.2%} down); ")
    at_floor = [f for f in ev.get("soft_target_floor") or () if abs(ev["best_loss"] - f) <= FLOOR_RTOL * max(abs(f), 1e-6)]
    if at_floor:
        return passed("CAPABILITY", f"note: {head}that is the entropy of the soft targets ({g4(at_floor[0])}), the "
                      "least a cross-entropy against distributions can reach: the batch is fitted", ev)
    if stuck:
        return failed("CAPABILITY", "capability.cannot_overfit", head + (
            f"the parameters barely moved at every lr up to {top_lrs} (relative change {ev['parameter_change']:.1e}): "
            "the step size is far too small for this model"), ev, expected=expected, observed=observed,
            hint="earlier links hold and the weights hardly change even at 1000x the lr: raise the learning rate by "
                 "orders of magnitude, or check for a gradient scaled down to nothing")
    try:
        shown = retry(with_output_offset) if retry is not None else None
    except Exception:  # noqa: BLE001 - the counterfactual could not run (an optimizer without param groups to add)
        shown = None
    ev["offset_counterfactual"] = (None if shown is None else
                                   {"outcome": shown[0], "initial_loss": shown[1], "best_loss": shown[2], "lr": shown[3]})
    below = [f for f in ev.get("soft_target_floor") or () if shown is not None and shown[2] < f - FLOOR_RTOL * max(abs(f), 1e-6)]
    if shown is None or shown[0] not in ("fitted", "learning") or below:
        why = ("could not be trained on these outputs (not one floating tensor)" if shown is None else
               f"goes below the entropy of the soft targets ({g4(below[0])}), which no distribution can: its offset "
               "left the outputs' range" if below else f"plateaus too (loss {g4(shown[1])} -> best {g4(shown[2])})")
        return warned("CAPABILITY", "inconclusive: " + head + (
            f"the weights moved at every lr up to {top_lrs} and the loss plateaued; the same copy with a learnable "
            f"offset and scale on its outputs {why}: nothing the model lacks was shown, and the objective may have a "
            "floor it does not pass in these steps"), ev)
    return failed("CAPABILITY", "capability.cannot_overfit", head + (
        f"at every lr up to {top_lrs} the parameters moved and the loss plateaued, while the same copy with a learnable "
        f"offset and scale on its outputs fits (loss {g4(shown[1])} -> best {g4(shown[2])} at lr {shown[3]}): the "
        "model cannot express an offset or scale of its outputs"), ev, expected=expected, observed=observed,
        hint="the model lacks what a learnable output offset and scale add: a bias removed from the last layer, an "
             "output squashed into the wrong range (a sigmoid or tanh before a regression target), a fixed scale")
