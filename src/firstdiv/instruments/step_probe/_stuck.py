"""The first parameter a watched ``train_step`` left in place although it had a gradient to move it
(``step.not_updated`` on the user's own steps), for :class:`._train_step_watch.StepWatch`."""

from __future__ import annotations

from typing import Any

import torch

from ...report import Status
from .._core.checks import Check, below_rounding, check, grad_state, label
from . import _descent


def first_stuck(watch: Any) -> Check | None:
    """The first parameter that held a nonzero gradient at an optimizer.step (a manual loop: that its backward
    produced) and still did not move."""
    if watch.opt is None:
        return _first_stuck_manual(watch)
    stuck = []  # (step index, param) where a nonzero .grad at a positive lr left the parameter in place
    for i, rec in enumerate(watch.steps):
        for p, names in watch.params:
            state, gnorm = grad_state(rec.grads[id(p)])
            lr = rec.lrs.get(id(p))
            if state == "nonzero" and lr != 0.0 and not below_rounding(watch.values[rec.call - 1][id(p)],
                                                                       rec.grads[id(p)], None if lr is None else {"lr": lr}):
                stuck.append((i, names, gnorm, torch.equal(watch.values[rec.call][id(p)],
                                                           watch.values[rec.call - 1][id(p)])))
    # a parameter a later watched step moves is not stuck: an optimizer whose own step holds its first update (a
    # warmup computed inside step) moves it on the next call
    moved = {names[0] for _, names, _, still in stuck if not still}
    for i, names, gnorm, still in sorted(stuck, key=lambda r: r[0]):
        if still and names[0] not in moved and names[0] not in watch.elsewhere:  # its own optimizer: other calls
            call = watch.steps[i].call
            return check(names[0], "step.not_updated", Status.FAIL,
                         f"{label(names)}: .grad norm {gnorm:.4g} at optimizer.step (call {call}) "
                         "but the parameter did not move at any watched step", {"call": call, "grad_norm": gnorm},
                         expected="parameter moves after optimizer.step()", observed="unchanged",
                         hint="is this parameter object in the optimizer's param groups?")
    return None

def _first_stuck_manual(watch: Any) -> Check | None:
    for call in (1, 2):
        rows = watch._rows(call, watch.call_grads.get(call, {}))
        lr = _descent.implied_lr([d for _, d, _ in rows], [g for _, _, g in rows])[0]
        if lr is None or lr <= 0:
            continue  # nothing moved (reported as not_updated) or the update ascends (step.train_step_ascends)
        for p, names in watch.params:
            g = watch.call_grads[call].get(id(p))
            state, gnorm = grad_state(g)
            before = watch.values[call - 1][id(p)]
            if state == "nonzero" and torch.equal(watch.values[call][id(p)], before) and not below_rounding(
                    before, g, {"lr": lr}):
                return check(names[0], "step.not_updated", Status.FAIL,
                             f"{label(names)}: backward gave grad norm {gnorm:.4g} in train_step call {call} but the "
                             f"parameter did not move, while the others moved with implied lr {lr:.4g}",
                             {"call": call, "grad_norm": gnorm, "implied_lr": lr},
                             expected="every parameter with a gradient is updated", observed="unchanged",
                             hint="update every parameter: for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)")
    return None
