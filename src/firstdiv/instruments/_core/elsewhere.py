"""Parameters another objective trains: evidence before a "no gradient from this loss" FAIL.

A program may train some parameters with a second optimizer on a second objective inside its own step (FQF's
fraction network on its own loss beside the quantile loss, a critic beside an actor, a GAN's other player). The
declared ``loss_fn`` then reads those parameters through a ``.detach()`` by design: the loss depends on their values
and no gradient of it reaches them. That is a cut only if this loss was meant to train them, and the program says
otherwise: the declared optimizer does not own them and another optimizer its ``train_step`` steps does, at an lr
above 0; or both own them and the other one finds a gradient on them when it steps (one call of the step, watched).
Such a finding becomes a note naming the premise it could not confirm and how to check that objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...report import Status
from .checks import Check, check
from .closure import closure_state, innermost, step_optimizers, trained_elsewhere
from .state import guarded


def other_objective(train_step: Any, optimizer: torch.optim.Optimizer | None, model: nn.Module) -> set[str]:
    """Names of ``model``'s parameters trained by another optimizer ``train_step`` reaches and not by the declared
    ``optimizer``, or by both where the other one finds a gradient on them when the step runs (``_co_trained``); empty
    without a declared optimizer (then the step's optimizers are the only ones, not "another")."""
    if optimizer is None or train_step is None:
        return set()
    try:
        return trained_elsewhere(train_step, optimizer, model) | _co_trained(train_step, optimizer, model)
    except Exception:  # noqa: BLE001 - reading the user's closure is best effort: no evidence, no exemption
        return set()


def _co_trained(train_step: Any, optimizer: torch.optim.Optimizer, model: nn.Module) -> set[str]:
    """Parameters the declared optimizer owns that another optimizer ``train_step`` steps owns too (at an lr above 0)
    and finds a nonzero gradient on when it steps, in one call of the step on the user's objects (everything restored):
    a second objective trains them (TD-MPC's policy, read under no_grad by the model loss, trained by its own optimizer
    on its own loss while the model's optimizer is built over every parameter)."""
    others = [innermost(o) for o in step_optimizers(train_step, optimizer, model)[1:]]
    mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
    shared = {id(p) for o in others for g in o.param_groups if float(g.get("lr", 1.0) or 0.0) > 0
              for p in g["params"] if id(p) in mine}
    if not shared:
        return set()
    seen: set[int] = set()

    def stepping(opt: torch.optim.Optimizer, *_: Any) -> None:
        seen.update(id(p) for g in opt.param_groups for p in g["params"]
                    if id(p) in shared and p.grad is not None and bool(p.grad.detach().abs().sum() > 0))

    hooks = [o.register_step_pre_hook(stepping) for o in others]
    try:
        with guarded(model, optimizer, *others, train_step, closure_state(train_step)), torch.enable_grad():
            train_step()
    except Exception:  # noqa: BLE001 - the user's step: no evidence, no exemption (restored by the guard)
        return set()
    finally:
        for h in hooks:
            h.remove()
    return {n for n, p in model.named_parameters() if id(p) in seen}


def other_objective_note(names: list[str]) -> str:
    """The note that replaces a no-gradient FAIL on parameters another objective trains."""
    return (f"note: {len(names)} parameter(s) this loss gives no gradient to (first: {names[0]}) are trained by another "
            "optimizer train_step reaches, not by the optimizer passed in: another objective trains them, so reading "
            "them detached here is no evidence of a cut (check that objective by passing its loss_fn and optimizer)")


def split_other(names: list[str], other: set[str]) -> tuple[list[str], list[str]]:
    """``(kept, noted)``: the names whose missing gradient still counts against this loss, and the others."""
    return [n for n in names if n not in other], [n for n in names if n in other]


def noted_other(checks: list[Check], other: set[str] | Callable[[], set[str]], prefixes: tuple[str, ...]) -> list[Check]:
    """Each FAIL of a kind starting with one of ``prefixes`` at a parameter in ``other`` becomes a PASS note;
    ``other`` may be a callable, called only when such a FAIL exists (reading the step's closure costs a walk)."""
    if not any(c.finding.status is Status.FAIL and c.finding.check.startswith(prefixes) for c in checks):
        return checks
    other = other() if callable(other) else other
    out = []
    for c in checks:
        f = c.finding
        if f.status is Status.FAIL and f.where in other and f.check.startswith(prefixes):
            c = check(f.where, f.check.rpartition(".")[0] + ".another_objective", Status.PASS,
                      f"{other_objective_note([f.where])}; was: {f.message}", f.evidence)
        out.append(c)
    return out
