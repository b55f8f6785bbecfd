"""CAPABILITY: can the controlled system overfit a tiny fixed batch?

A second deep copy of the model and optimizer (same optimizer class, param groups and hyperparameters;
its state - momentum, Adam moments - reset so the test starts clean) trains on the first ``TINY``
examples of the batch (or ``overfit_batch``), no shuffling, up to ``overfit_steps`` steps, in the
model's current train/eval mode. It stops as soon as the criterion is met.

Criterion (why these numbers): *fit* = the loss fell by ``FIT`` (90%) of its initial value, or, for
classification and language models, every supervised element of the tiny batch is predicted right
(100% accuracy: losses with a floor, such as label smoothing, cannot fall by 90%). A healthy small
model fits 8 examples within a few dozen steps; lr 1e-7 leaves the loss unchanged to ~1e-5, and a model
that cannot represent the batch (a linear map without bias against targets offset by +20) plateaus
within a few percent of its initial loss. Between the two, a loss that fell by at least ``PROGRESS``
(25%) without fitting is WARN ("learning, slowly: raise overfit_steps"), never FAIL; so is a budget
under ``MIN_BUDGET`` (20) steps in which the weights did move. A loss already ~0 at step 0 counts as
fitted. The FAIL message tells the two mechanisms apart by the relative parameter change over the run:
below 1e-3 the step size is too small; above it the model moves but cannot represent the batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from .._core.batch import Batch, compute_loss, loss_problem
from .._core.checks import Check
from .._core.state import detached_copy
from .._core.task import Ctx, err, is_int
from ._common import batch_size, failed, g4, passed, skipped_link, take_batch, to_logits_2d, warned
from ._links import lr_of, step, trainable

TINY = 8
FIT = 0.9
PROGRESS = 0.25
MIN_BUDGET = 20  # below this many steps a loss that has not fallen is a verdict only when the weights did not move


def _accuracy(ctx: Ctx, outputs: Any, targets: Any) -> float | None:
    if ctx.class_dim is None or not is_int(targets) or not torch.is_tensor(outputs) or outputs.dim() <= ctx.class_dim:
        return None
    if outputs.shape[ctx.class_dim] != ctx.num_classes:
        return None
    with torch.no_grad():
        pred = to_logits_2d(ctx, outputs.detach()).argmax(-1)
        flat = targets.reshape(-1)
        m = flat != ctx.ignore_index
        return float((pred[m] == flat[m]).float().mean()) if bool(m.any()) else None


def _tiny(ctx: Ctx) -> Batch:
    if ctx.overfit_batch is not None:
        return ctx.overfit_batch
    n = batch_size(ctx.batch)
    return ctx.batch if n is None else take_batch(ctx.batch, slice(0, min(TINY, n)))


def check_capability(ctx: Ctx) -> Check:
    tiny = _tiny(ctx)
    model, opt = detached_copy(ctx.model, ctx.optimizer)
    opt.state.clear()
    start = [p.detach().clone() for _, p in trainable(model)]
    ev: dict[str, Any] = {"examples": batch_size(tiny), "budget": ctx.overfit_steps, "optimizer": type(opt).__name__,
                          "lr": [lr_of(g) for g in opt.param_groups], "mode": "train" if model.training else "eval",
                          "criterion": f"loss falls by {FIT:.0%} of its initial value, or 100% accuracy"}
    t0 = time.perf_counter()
    losses, accs, outcome = _train(ctx, model, opt, tiny, ev)
    ev.update(seconds=round(time.perf_counter() - t0, 4), steps=max(len(losses) - 1, 0))
    if outcome is not None:
        return outcome()
    moved = _relative_change(start, [p.detach() for _, p in trainable(model)])
    first, best = losses[0], min(losses)
    progress = (first - best) / abs(first) if first != 0 else 0.0
    ev.update(initial_loss=first, final_loss=losses[-1], best_loss=best, fell_by=progress, parameter_change=moved,
              initial_accuracy=accs[0], final_accuracy=accs[-1])
    what = f"{ev['examples']} fixed examples, {type(opt).__name__} lr {', '.join(g4(v) for v in ev['lr'])}"
    if _fit(first, losses[-1], accs[-1]):
        how = f"accuracy {accs[-1]:.0%}" if accs[-1] == 1.0 else f"loss {g4(first)} -> {g4(losses[-1])}"
        return passed("CAPABILITY", f"fitted {what} in {ev['steps']} steps ({how})", ev)
    if progress >= PROGRESS:
        return warned("CAPABILITY", f"learning but not fitted: on {what}, loss {g4(first)} -> best {g4(best)} ({progress:.0%} down) "
                      f"in {ev['steps']} steps; raise overfit_steps to see whether it fits", ev)
    stuck = moved < 1e-3
    if not stuck and ev["steps"] < MIN_BUDGET:
        return warned("CAPABILITY", f"inconclusive: {ev['steps']} steps on {what} took the loss {g4(first)} -> {g4(losses[-1])} "
                      f"({progress:.0%} down) with the weights moving (relative change {g4(moved)}); give overfit_steps "
                      f">= {MIN_BUDGET} for a verdict", ev)
    cause = (f"the parameters barely moved (relative change {moved:.1e}): the step size is too small for this model"
             if stuck else
             f"the parameters moved (relative change {g4(moved)}) but the loss plateaued: the model cannot represent "
             f"this batch (missing bias/offset? output range? capacity?)")
    hint = ("earlier links hold and the weights hardly change: raise the learning rate (try 10x, 100x) and rerun"
            if stuck else
            "earlier links hold and the weights move without fitting 8 examples: check whether the model can express "
            "the targets at all (a bias for an offset, the output range, initialisation) before adding capacity")
    return failed("CAPABILITY", "capability.cannot_overfit",
                  f"on {what}, {ev['steps']} steps took the loss from {g4(first)} to {g4(losses[-1])} "
                  f"(best {g4(best)}, {progress:.2%} down); {cause}", ev,
                  expected=f"a tiny fixed batch fitted within {ctx.overfit_steps} steps (loss down {FIT:.0%} or 100% accuracy)",
                  observed=f"loss {g4(first)} -> {g4(losses[-1])} ({progress:.2%} down) in {ev['steps']} steps",
                  hint=hint)


def _fit(first: float, last: float, acc: float | None) -> bool:
    if acc == 1.0 or abs(first) <= 1e-8:
        return True
    return math.isfinite(last) and (first - last) >= FIT * abs(first)


def _train(ctx: Ctx, model: torch.nn.Module, opt: torch.optim.Optimizer, tiny: Batch,
           ev: dict[str, Any]) -> tuple[list[float], list[float | None], Callable[[], Check] | None]:
    """Train the copy: the losses, the accuracies and, when training stopped short, how to build the link's
    check (built by the caller once the run's time and steps are in ``ev``)."""
    losses: list[float] = []
    accs: list[float | None] = []

    def closure() -> Any:
        opt.zero_grad()
        loss = compute_loss(model, tiny, ctx.loss_fn)[1]
        loss.backward()
        return loss

    for i in range(ctx.overfit_steps + 1):
        opt.zero_grad(set_to_none=True)
        try:
            outputs, loss = compute_loss(model, tiny, ctx.loss_fn)
        except Exception as exc:  # noqa: BLE001 - user code
            return losses, accs, partial(skipped_link, "CAPABILITY", f"could not train the copy: step {i} raised {err(exc)}", ev)
        problem = loss_problem(loss)
        if problem is not None:
            return losses, accs, partial(skipped_link, "CAPABILITY", f"could not train the copy: {problem}", ev)
        losses.append(float(loss.detach()))
        accs.append(_accuracy(ctx, outputs, tiny.targets))
        if not math.isfinite(losses[-1]):
            ev.update(initial_loss=losses[0], diverged_at_step=i)
            return losses, accs, partial(failed, "CAPABILITY", "capability.cannot_overfit",
                                         f"the loss became {losses[-1]} at step {i} while fitting {ev['examples']} examples "
                                         f"(initial {g4(losses[0])})", ev,
                                         expected="a finite loss that falls on a tiny fixed batch",
                                         observed=f"loss {losses[-1]} at step {i}",
                                         hint="the updates diverge: lower the learning rate, check for exploding gradients")
        if _fit(losses[0], losses[-1], accs[-1]) or i == ctx.overfit_steps:
            break
        try:
            loss.backward()
            step(opt, closure)
        except Exception as exc:  # noqa: BLE001 - user code
            return losses, accs, partial(skipped_link, "CAPABILITY",
                                         f"could not train the copy: backward/step {i} raised {err(exc)}", ev)
    return losses, accs, None


def _relative_change(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    num = sum(float((a.float() - b.float()).pow(2).sum()) for a, b in zip(after, before))
    den = sum(float(b.float().pow(2).sum()) for b in before)
    return math.sqrt(num) / max(math.sqrt(den), 1e-12)
