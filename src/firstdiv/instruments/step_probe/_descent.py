"""step_probe's judgement of an update from parameter deltas: does it descend the loss, and is its size one
training survives? Used on the user's own ``train_step`` (manual ``p.data.add_(p.grad, alpha=-lr)`` loops
have no optimizer to inspect) and on the controlled step.

Thresholds (measured on the programs of tests/instruments/test_step_probe_real.py, 2-3 seeds each):

- ascent (``ASCENT_COSINE``): FAIL only when a cosine is below -0.3 AND the loss on the probe's batch rose at both
  steps. With an optimizer the cosine is train_step's gradient against the probe batch's gradient at the same
  parameters (same batch: +1.0 correct, -1.0 for ``(-loss).backward()``; a stream of other, noisy batches: down to
  -0.26 on a correct program, whose loss then fell), never the update itself: momentum after 150 steps at lr 0.5
  moved against the current gradient (cosine -0.4 to -0.8) while the loss rose on a correct program. A manual
  update (stateless) is also judged by its delta: +1.0 (clipped word-LM SGD, regression), -1.0 with the sign flipped.
- divergence: the loss non-finite or multiplied by more than ``DIVERGE_LOSS_RATIO`` (10) after one step, AND one
  parameter group's ||delta|| / ||param|| above ``DIVERGE_RELATIVE_UPDATE`` (1). Correct programs: at most 0.50
  (word-LM manual SGD lr=20 with clip_grad_norm_(0.25), which does not bite on that 40-word batch), 0.011 (SGD 0.1 momentum), 0.0035
  (Adam 1e-3), 0.0004 (AdamW 1e-4); loss ratio at most 1.0. SGD lr=500 on inputs of scale 10: 410x, loss 1.75 ->
  1.8e8.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core import batch as _batch
from .._core.checks import Check, check, label
from .._core.examples import dense as densified

ASCENT_COSINE = 0.3
DIVERGE_LOSS_RATIO = 10.0
DIVERGE_RELATIVE_UPDATE = 1.0


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` densified, detached, in float64 and flat: the vectors the descent checks take inner products of."""
    return densified(t).detach().double().reshape(-1)


def eval_loss(model: nn.Module, batch: Any, loss_fn: Callable) -> float | None:
    """The loss on ``batch`` now, with a fixed dropout seed and the model's buffers (BatchNorm running stats) put
    back afterwards; None when it cannot be computed. The caller's guard restores RNG and every value."""
    saved = [(b, b.detach().clone()) for b in model.buffers() if b is not None]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            loss = _batch.compute_loss(model, batch, loss_fn)[1]
        if _batch.loss_problem(loss):
            return None
        return float(loss.detach().float().reshape(()))
    except Exception:  # noqa: BLE001 - no loss value means no descent judgement; reported as a note
        return None
    finally:
        with torch.no_grad():
            for b, v in saved:
                if b.shape == v.shape:
                    b.copy_(v)


def cosine(deltas: list[torch.Tensor], grads: list[torch.Tensor]) -> float | None:
    """Aggregate cosine of the concatenated update with ``-grad``; None when either is all zero."""
    dot = sum(float(-(d * g).sum()) for d, g in zip(deltas, grads))
    dn = math.sqrt(sum(float((d * d).sum()) for d in deltas))
    gn = math.sqrt(sum(float((g * g).sum()) for g in grads))
    return dot / (dn * gn) if dn > 0 and gn > 0 else None


def implied_lr(deltas: list[torch.Tensor], grads: list[torch.Tensor]) -> tuple[float | None, float | None]:
    """Least-squares ``lr`` per parameter for ``delta = -lr * grad``: (median, spread max/min - 1) over parameters."""
    lrs = [float(-(d * g).sum() / (g * g).sum()) for d, g in zip(deltas, grads) if float((g * g).sum()) > 0]
    lrs = [v for v in lrs if v != 0.0]
    if not lrs:
        return None, None
    med = float(torch.tensor(lrs).median())
    spread = (max(lrs) / min(lrs) - 1.0) if min(lrs) > 0 else math.inf
    return med, spread


def ascent_check(names: list[list[str]], deltas: list[torch.Tensor], grads: list[torch.Tensor], losses: list[float | None],
                 source: str, monotone: bool = False) -> Check | None:
    """FAIL ``step.train_step_ascends`` when the update points up ``grads`` and the loss went up (``monotone``: at
    every step, so a momentum step carried against one batch's gradient is not mistaken for ascent); else None."""
    cos = cosine(deltas, grads)
    if cos is None or cos > -ASCENT_COSINE or len(losses) < 2 or None in losses[:2]:
        return None
    last = losses[-1]
    if last is None or (math.isfinite(last) and last <= losses[0]):
        return None
    if monotone and not all(b is not None and not (math.isfinite(b) and b <= a) for a, b in pairwise(losses)):
        return None
    against = [n for n, d, g in zip(names, deltas, grads) if float(-(d * g).sum()) < 0]
    where = against[0][0] if against else names[0][0]
    l0, l1 = losses[0], last
    ev = {"cosine_update_vs_minus_grad": cos, "gradient": source, "losses": losses, "parameters_against": len(against),
          "parameters": len(names), "first": where}
    return check(where, "step.train_step_ascends", Status.FAIL,
                 f"train_step moves the parameters up the gradient (loss {l0:.6g} -> {l1:.6g}): the loss is maximized, "
                 f"e.g. (-loss).backward() or an update with the wrong sign; {label(against[0] if against else names[0])} "
                 f"and {max(len(against) - 1, 0)} more move against -grad (cosine {cos:.3g})", ev,
                 expected="the update descends: cosine(delta, -grad) > 0 and the loss goes down",
                 observed=f"cosine {cos:.3g}, loss {l0:.6g} -> {l1:.6g}",
                 hint="backpropagate the loss itself (not -loss) and subtract lr * grad (p.data.add_(p.grad, alpha=-lr))")


def relative_updates(rows: list[tuple[list[str], Any, torch.Tensor, torch.Tensor]]) -> dict[Any, dict[str, Any]]:
    """Per group key: the group's ||delta|| / ||param|| and its parameter with the largest relative update.
    ``rows`` are (names, group key, before, after)."""
    out: dict[Any, dict[str, Any]] = {}
    for names, key, before, after in rows:
        b, a = dense(before), dense(after)
        dn, pn = float((a - b).norm()), float(b.norm())
        g = out.setdefault(key, {"delta_sq": 0.0, "param_sq": 0.0, "top": None, "top_rel": -1.0})
        g["delta_sq"] += dn * dn
        g["param_sq"] += pn * pn
        rel = dn / pn if pn > 0 else (0.0 if dn == 0 else math.inf)
        if pn > 0 and rel > g["top_rel"]:
            g["top"], g["top_rel"] = names[0], rel
    for g in out.values():
        g["relative"] = math.sqrt(g["delta_sq"]) / math.sqrt(g["param_sq"]) if g["param_sq"] > 0 else 0.0
    return out


def divergence_check(loss0: float | None, loss1: float | None, groups: dict[Any, dict[str, Any]],
                     describe_group: Callable[[Any], str], source: str) -> Check | None:
    """FAIL ``step.diverges`` when one step made the loss non-finite or many-fold larger with an update larger than
    the parameters themselves; else None."""
    if loss0 is None or loss1 is None or not math.isfinite(loss0):
        return None
    blew = not math.isfinite(loss1) or (loss0 > 0 and loss1 > DIVERGE_LOSS_RATIO * loss0)
    big = [(k, g) for k, g in groups.items() if g["relative"] > DIVERGE_RELATIVE_UPDATE]
    if not blew or not big:
        return None
    key, g = max(big, key=lambda kg: kg[1]["relative"])
    where = describe_group(key)
    shown = str(loss1) if not math.isfinite(loss1) else f"{loss1:.6g}"
    ev = {"loss_before": loss0, "loss_after": shown, "relative_update": g["relative"], "largest_parameter": g["top"],
          "largest_parameter_relative_update": g["top_rel"], "step": source}
    return check(where, "step.diverges", Status.FAIL,
                 f"{where}: one step ({source}) moved the parameters by {g['relative']:.3g}x their norm and the loss went "
                 f"{loss0:.6g} -> {shown}; the step size makes training diverge (largest: {g['top']}, {g['top_rel']:.3g}x)",
                 ev, expected=f"an update well below the parameters' norm (<= {DIVERGE_RELATIVE_UPDATE:g}x) and a loss "
                 f"that does not grow {DIVERGE_LOSS_RATIO:g}-fold", observed=f"{g['relative']:.3g}x, loss {loss0:.6g} -> {shown}",
                 hint="lower the learning rate (or clip gradients / normalise the inputs)")


CONTROLLED = "the controlled step on a copy"


def controlled_divergence(checks: list[Check]) -> list[Check]:
    """The controlled step applies optimizer.step to the raw gradient; a loop that clips or scales does not. When the
    user's own train_step was watched and did not diverge, the controlled step's divergence is a WARN."""
    own = [c for c in checks if c.finding.check == "step.diverges" and c.finding.evidence.get("step") != CONTROLLED]
    if any(c.finding.status is Status.FAIL for c in own):
        return checks
    out = []
    for c in checks:
        f = c.finding
        if f.check == "step.diverges" and f.status is Status.FAIL and f.evidence.get("step") == CONTROLLED:
            c = check(f.where, f.check, Status.WARN, f"{f.message}; but train_step's own steps did not diverge (its loop "
                      "may clip the gradients or scale the loss): not shown for the program", f.evidence)
        out.append(c)
    return out


def step_hooks(opt: torch.optim.Optimizer) -> bool:
    """Whether a step hook (the optimizer's own or a global one) may change the update."""
    from torch.optim import optimizer as _optim
    return bool(getattr(opt, "_optimizer_step_pre_hooks", None) or getattr(opt, "_optimizer_step_post_hooks", None)
                or _optim._global_optimizer_pre_hooks or _optim._global_optimizer_post_hooks)
