"""Evidence before FAIL for the FROZEN and OPTIMIZER items: what the program does with the parameters a finding is
about, observed on its own behaviour with every value restored afterwards.

- :func:`graph_after_train`: the leaves the loss's graph reaches after ``model.train()`` (one forward and loss on
  the user's model inside ``guarded``, no backward): whether parameters a ``train()`` override unfroze get a
  gradient;
- :func:`step_once`: one call of the user's ``train_step`` on their objects inside ``guarded`` (every value,
  ``.grad``, optimizer state, mode and RNG state restored, also when it raises): which parameters it moved and,
  per optimizer, which tensors held a gradient when its ``step`` ran (a step pre-hook on the optimizer that really
  updates, removed in ``finally``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._core.batch import compute_loss
from .._core.checks import graph_leaves
from .._core.closure import closure_state, innermost
from .._core.modes import set_mode
from .._core.state import guarded


@dataclass
class StepRun:
    """One observed call of ``train_step``: ids of the parameters it changed; per optimizer (its index among the
    owners) the ids of the tensors that held a gradient at each of its steps; why it could not run ('' if it ran)."""

    moved: set[int] = field(default_factory=set)
    graded: dict[int, set[int]] = field(default_factory=dict)
    error: str = ""
    with_grad: set[int] = field(default_factory=set)  # parameters holding a nonzero .grad when the call returned


def _recorder(graded: dict[int, set[int]], index: int) -> Any:
    def hook(opt: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        graded.setdefault(index, set()).update(id(p) for g in opt.param_groups for p in g["params"] if p.grad is not None)
    return hook


def step_once(model: nn.Module, optimizer: Any, train_step: Any, opts: list[torch.optim.Optimizer]) -> StepRun:
    """Call ``train_step()`` once on the user's objects inside ``guarded`` and observe it (see the module doc)."""
    params = list(model.parameters())
    before = {id(p): p.detach().clone() for p in params}
    run = StepRun()
    try:
        with guarded(model, optimizer, train_step, closure_state(train_step)), torch.enable_grad():
            handles = [innermost(o).register_step_pre_hook(_recorder(run.graded, k)) for k, o in enumerate(opts)]
            try:
                train_step()
                run.moved = {id(p) for p in params if not torch.equal(before[id(p)], p.detach())}
                run.with_grad = {id(p) for p in params if p.grad is not None and bool(p.grad.ne(0).any())}
            finally:
                for handle in handles:
                    handle.remove()
    except Exception as exc:  # noqa: BLE001 - the user's step raised: its evidence is missing, restored by the guard
        text = str(exc).strip().splitlines()
        run.error = f"train_step raised {type(exc).__name__}: {text[0] if text else ''}"
    return run


def graph_after_train(model: nn.Module, optimizer: Any, batch: Any, loss_fn: Any) -> dict[int, torch.Tensor] | None:
    """Leaves the loss's graph reaches once ``model.train()`` ran (None when the loss could not be built), on the
    user's model inside ``guarded``; no backward."""
    try:
        with guarded(model, optimizer), torch.enable_grad():
            set_mode(model, True)
            _, loss = compute_loss(model, batch, loss_fn)
            if not torch.is_tensor(loss) or loss.grad_fn is None:
                return None if not torch.is_tensor(loss) else {}
            return graph_leaves([loss.grad_fn])
    except Exception:  # noqa: BLE001 - user code failed: no evidence, the finding says so
        return None
