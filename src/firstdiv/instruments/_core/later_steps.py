"""Whether a parameter the optimizer's first step left in place is moved by its next steps.

``step.not_updated`` and ``claim.update.not_updated`` rest on the premise that an optimizer owning a parameter at a
positive lr moves it when it steps. An optimizer that computes a schedule inside its own ``step`` (a warmup from 0
applied to the update, as BERT's Adam does, while ``param_groups[i]['lr']`` keeps the base lr) holds every parameter
on its first call only. The confirmation steps the same copy again on the same gradients: a parameter the next steps
move is not stuck (a note); one they leave in place too confirms the finding.

A schedule that starts from a tiny lr (a linear warmup from 1e-8) gives an update below float32's resolution next to the
weights: the step is real and leaves them bit-identical. So can a plain lr on a tiny gradient (SGD at lr 8e-4 on a
bias whose gradient is 2e-6 moves it by 1.5e-9, under half a float32 step of a weight near 0.1). Where the next steps
leave a parameter in place and its group's lr is at most ``TINY_LR`` (any positive lr with ``any_lr``: the callers
that step a copy of the optimizer on the measured gradient), the copy steps once more with that lr raised
``RAISE``-fold and to at least ``RAISED_LR`` (a one-cycle schedule's ``div_factor`` of 1e16 starts near 1e-19, where
10^4-fold is still no update): a parameter that moves then is updatable, held only by the size of the update at this
step (a note); one that still does not confirms the finding."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import torch

from .lr import lr_of

LATER_STEPS = 2
TINY_LR = 1e-6  # at or below it, an update may fall below float32's resolution next to the weights
RAISE = 1e4
RAISED_LR = 1.0  # ... and to at least this: whether the update rule reaches the parameter, not how far it goes


def moved_later(optimizer: torch.optim.Optimizer, params: Mapping[Hashable, torch.Tensor],
                steps: int = LATER_STEPS, *, any_lr: bool = False) -> set[Hashable]:
    """The keys of ``params`` (tensors of a copy the optimizer owns, their ``.grad`` still set) that up to ``steps``
    more ``optimizer.step()`` calls move, or one more at a raised lr (module docstring; ``any_lr``: whatever the
    group's positive lr, not only a tiny one). Runs on copies only: it steps ``optimizer``."""
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
    return moved | _moved_at_raised_lr(optimizer, {k: p for k, p in params.items() if k not in moved},
                                       float("inf") if any_lr else TINY_LR)


def _moved_at_raised_lr(optimizer: torch.optim.Optimizer, params: Mapping[Hashable, torch.Tensor],
                        limit: float) -> set[Hashable]:
    """The keys of ``params`` that one more step moves with the lr of their groups raised ``RAISE``-fold (to at least
    ``RAISED_LR``), for groups whose lr is positive and at most ``limit`` (module docstring); the lrs are put back
    after."""
    ids = {id(p) for p in params.values()}
    tiny = [g for g in optimizer.param_groups if any(id(p) in ids for p in g["params"])
            and 0 < lr_of(g) <= limit]
    if not params or not tiny:
        return set()
    start = {k: p.detach().clone() for k, p in params.items()}
    saved = [g["lr"] for g in tiny]
    try:
        for g in tiny:
            g["lr"] = g["lr"] * max(RAISE, RAISED_LR / lr_of(g))  # a tensor lr stays a tensor
        optimizer.step()
    except Exception:  # noqa: BLE001 - nothing confirmed either way
        return set()
    finally:
        for g, lr in zip(tiny, saved):
            g["lr"] = lr
    return {k for k, p in params.items() if not torch.equal(start[k], p.detach())}
