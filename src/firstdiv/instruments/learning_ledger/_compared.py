"""Whether the loss compares an output with a given tensor: the premise of ``task.target_in_input`` when the targets
the loss receives hold several tensors.

With one targets tensor, the calling contract says what it is (``loss_fn(outputs, targets)``). With several (an
actor-critic's ``(states, actions, rewards, next_states, dones)``, from which the loss computes its own regression
target), a tensor among them may be context the loss reads, not what it fits: a critic's actions sit in its input by
design. Confirmed on the ledger's copy, with every RNG reseeded alike and no gradient: the loss with the aligned output
set to that tensor is lower than with it nudged either way (a float target: plus and minus a tenth of its spread), or,
for class ids, lower with confident scores for those ids than for the ids of the next example. Anything that cannot
be built or run is unconfirmed.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._globals import preserved_globals
from .._core.task import Ctx


def compares(ctx: Ctx, outputs: Any, path: str, t: torch.Tensor, named: Any, replaced: Any) -> bool:
    """Whether ``loss_fn`` is lowest with the output at ``path`` (of ``outputs``) equal to ``t`` (see the module
    docstring); ``named(outputs)`` lists ``(path, tensor)`` and ``replaced(outputs, old, new)`` swaps one."""
    o = dict(named(outputs, "outputs")).get(path)
    if o is None or not o.is_floating_point():
        return False
    if t.is_floating_point() and o.numel() == t.numel():
        at = t.reshape(o.shape).to(o.dtype)
        spread = float(at.std()) if at.numel() > 1 else 0.0
        step = 0.1 * spread if spread > 0 else 0.1
        sign = torch.randint(0, 2, at.shape, generator=torch.Generator().manual_seed(0)).to(o.dtype) * 2 - 1
        cands = [at, at + step * sign, at - step * sign]
    elif not t.is_floating_point() and o.dim() >= 2 and o.shape[0] == t.shape[0] and \
            o[0].numel() == t[0].numel() * o.shape[-1] and int(t.min()) >= 0 and int(t.max()) < o.shape[-1]:
        hot = [torch.nn.functional.one_hot(ids.long(), o.shape[-1]).to(o.dtype) * 10.0 for ids in (t, t.roll(1, 0))]
        cands = [h.reshape(o.shape) for h in hot]
    else:
        return False
    losses = [_loss(ctx, replaced(outputs, o, c)) for c in cands]
    return all(v is not None for v in losses) and all(losses[0] < v for v in losses[1:])


def _loss(ctx: Ctx, outputs: Any) -> float | None:
    try:
        with preserved_globals(seed=0), torch.no_grad():
            value = ctx.loss_fn(outputs, ctx.batch.targets)
        value = float(value.detach().reshape(-1)[0]) if torch.is_tensor(value) and value.numel() == 1 else None
    except Exception:  # noqa: BLE001 - the user's loss on a changed output: unconfirmed
        return None
    return value if value is not None and math.isfinite(value) else None
