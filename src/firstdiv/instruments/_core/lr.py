"""Learning rates a probe can step with. A warmup schedule (``get_linear_schedule_with_warmup``, a
``LambdaLR`` starting at 0) leaves ``lr == 0`` on the first step although the group trains at its base
rate a step later; a probe that steps a copy at that instant sees nothing move and would blame the model.
A group whose base rate (``initial_lr``, which every ``torch.optim.lr_scheduler`` records) is itself 0 is
a real bug (a typo in a parameter group) and is left alone.
"""

from __future__ import annotations

import torch

__all__ = ["lr_of", "step_at_base_lr"]


def step_at_base_lr(optimizer: torch.optim.Optimizer | None) -> list[str]:
    """On a COPY of the user's optimizer: each group whose ``lr`` is 0 while its schedule's ``initial_lr`` is not
    gets ``lr = initial_lr``; returns one note per group changed (empty when none)."""
    notes = []
    for i, group in enumerate(optimizer.param_groups if optimizer is not None else []):
        lr, base = group.get("lr"), group.get("initial_lr")
        if isinstance(lr, (int, float)) and lr == 0 and isinstance(base, (int, float)) and base > 0:
            group["lr"] = float(base)
            notes.append(f"note: param_group {i}: the schedule's lr is 0 at this step (warmup); the probe stepped "
                         f"at the group's base lr {base:g}")
    return notes


def lr_of(group: dict) -> float:
    """A param group's lr as a float (a one-element tensor lr read out); nan where it has none or it is not a
    scalar."""
    lr = group.get("lr", float("nan"))
    if torch.is_tensor(lr):
        return float(lr.item()) if lr.numel() == 1 else float("nan")
    return float(lr) if isinstance(lr, (int, float)) else float("nan")
