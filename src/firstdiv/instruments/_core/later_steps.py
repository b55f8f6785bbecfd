"""Whether a parameter the optimizer's first step left in place is moved by its next steps.

``step.not_updated`` and ``claim.update.not_updated`` rest on the premise that an optimizer owning a parameter at a
positive lr moves it when it steps. An optimizer that computes a schedule inside its own ``step`` (a warmup from 0
applied to the update, as BERT's Adam does, while ``param_groups[i]['lr']`` keeps the base lr) holds every parameter
on its first call only. The confirmation steps the same copy again on the same gradients: a parameter the next steps
move is not stuck (a note); one they leave in place too confirms the finding."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import torch

LATER_STEPS = 2


def moved_later(optimizer: torch.optim.Optimizer, params: Mapping[Hashable, torch.Tensor],
                steps: int = LATER_STEPS) -> set[Hashable]:
    """The keys of ``params`` (tensors of a copy the optimizer owns, their ``.grad`` still set) that up to ``steps``
    more ``optimizer.step()`` calls move. Runs on copies only: it steps ``optimizer``."""
    start = {k: p.detach().clone() for k, p in params.items()}
    moved: set[Hashable] = set()
    for _ in range(steps):
        try:
            optimizer.step()
        except Exception:  # noqa: BLE001 - an optimizer that needs a closure (LBFGS) or raises: nothing confirmed
            break
        moved |= {k for k, p in params.items() if not torch.equal(start[k], p.detach())}
        if len(moved) == len(params):
            break
    return moved
