"""The controlled step's ``step.not_updated`` confirmed by the optimizer's next steps (``_core.later_steps``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...report import Status
from .._core.batch import UserCodeError, describe_error
from .._core.checks import check
from .._core.later_steps import LATER_STEPS, moved_later


def confirm_not_updated(out: Any, params: list, copt: torch.optim.Optimizer) -> None:
    """Each FAIL ``step.not_updated`` of a parameter the optimizer owns at a positive lr becomes a PASS note when
    the copy's next steps on the same gradients move it (the optimizer's own schedule held its first step), or one
    more at a raised lr does (the update was below float32's resolution: ``_core.later_steps``)."""
    by_name = {names[0]: p for p, names in params}
    stuck = {i: by_name[c.finding.where] for i, c in enumerate(out.checks)
             if c.finding.check == "step.not_updated" and c.finding.status is Status.FAIL
             and c.finding.evidence.get("in_optimizer") and c.finding.where in by_name}
    if not stuck:
        return
    moved = moved_later(copt, stuck, any_lr=True)
    for i in moved:
        f = out.checks[i].finding
        out.checks[i] = check(f.where, "step.update", Status.PASS,
                              f"note: {f.where} did not move on the optimizer's first step (lr {f.evidence.get('lr')}), "
                              f"but its next steps on the same gradient move it: {type(copt).__name__}'s own step holds "
                              "the first update (a warmup computed inside step?), or the update at this lr and "
                              "gradient is below float32's resolution next to the weights (a larger lr moves it); the "
                              "update was not checked",
                              {**f.evidence, "moved_on_later_steps": True, "later_steps": LATER_STEPS})
    for i in set(stuck) - moved:
        out.checks[i].finding.evidence["moved_on_later_steps"] = False


def step_copy(copt: torch.optim.Optimizer, closure: Callable[[], torch.Tensor]) -> None:
    """One step of the optimizer's copy on the gradients set in ``.grad``. An optimizer that re-evaluates the loss
    itself (LBFGS, sharpness-aware minimization's two-pass step) gets the closure it needs: LBFGS always, any other
    when its plain step refuses to run without one. A step that fails both ways is firstdiv's call failing on the
    program's optimizer: :class:`UserCodeError` (the controlled step is then not judged; train_step still is)."""
    if isinstance(copt, torch.optim.LBFGS):
        copt.step(closure)
        return
    try:
        copt.step()
    except Exception as plain:  # noqa: BLE001 - a custom optimizer refusing a step without a closure
        try:
            copt.step(closure)
        except Exception:  # noqa: BLE001
            raise UserCodeError(f"the optimizer's step raised {describe_error(plain)} on the controlled copy, with "
                                "and without a closure") from plain

