"""Token sequences the user's own ``train_step`` feeds its model, and what the loss it backpropagates asks of each
position (``_sequence``'s premise read from the step rather than from ``loss_fn`` and the declared batch).

A loop often builds its targets itself: ``criterion(predicted[:, :-1], target_sequences[:, :-1])`` inside the step,
with a ``loss_fn`` and a declared batch that say what was meant. What trains is the step. So the relation is read from
one guarded call of it (``_step_loss.step_outputs``: the float outputs ``[B, L, V]`` of the model's first forward
aligned with an integer ``[B, T]`` argument, and the gradient the step's backward gave them), the same way as from
``loss_fn``: the index each position's gradient pulls up, against the argument's tokens (``next`` or ``same`` at >= 90 %
of the pulled positions). The counterfactual that confirms it (change ``ids[:, j]`` only: do earlier outputs move? does
position ``j``?) runs on the ledger's copy with the step's own arguments, forward only, in eval mode, RNG reseeded.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._globals import preserved_globals
from .._core.batch import fresh
from .._core.task import Ctx
from .._core.trace import tensors
from ._perturbed import eval_mode
from ._step_loss import step_fed, step_outputs

SOURCE = "the gradient of the loss train_step backpropagates"


def fed_ids(ctx: Ctx) -> list[tuple[str, int | str, torch.Tensor]]:
    """(name, position or keyword, ids batch first) for the integer ``[B, T]`` arguments (T >= 4) of the model's first
    forward in ``train_step``."""
    fed = step_fed(ctx)
    if fed is None:
        return []
    (args, kwargs), _ = fed
    items = [(f"train_step's model argument {i}", i, v) for i, v in enumerate(args)]
    items += [(f"train_step's model argument {k}=", k, v) for k, v in kwargs.items()]
    out = []
    for name, slot, v in items:
        if torch.is_tensor(v) and v.dim() == 2 and not v.is_floating_point() and not v.is_complex() and v.dtype != torch.bool:
            ids = v.transpose(0, 1) if ctx.batch_axis == 1 else v
            if ids.shape[1] >= 4:
                out.append((name, slot, ids))
    return out


def pulled_sites(ctx: Ctx) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The step's aligned outputs with a gradient that pulls somewhere: (site, output, gradient), batch first."""
    return [(site, out, g) for site, out, g in step_outputs(ctx) if out.shape[-1] >= 2 and bool((g != 0).any())]


def fed_forward(ctx: Ctx, slot: int | str, ids: torch.Tensor, site: str) -> torch.Tensor | None:
    """The output at ``site`` of the ledger's copy run on the step's own arguments with the sequence at ``slot``
    replaced by ``ids`` (batch first); forward only, eval mode, every global RNG reseeded. None where it raised."""
    fed = step_fed(ctx)
    if fed is None:
        return None
    (args, kwargs), _ = fed
    value = ids.transpose(0, 1).contiguous() if ctx.batch_axis == 1 else ids
    args = tuple(value if i == slot else a for i, a in enumerate(args))
    kwargs = {k: value if k == slot else v for k, v in kwargs.items()}
    name, _, k = site.partition("#")
    module = dict(ctx.work.named_modules()).get(name)
    if module is None:
        return None
    kept: list[torch.Tensor] = []

    def hook(_m: Any, _i: Any, out: Any) -> None:
        items, index = list(tensors(out))[:4], int(k) if k else 0
        if not kept and index < len(items):
            t = items[index]
            kept.append((t.transpose(0, 1) if ctx.batch_axis == 1 and t.dim() == 3 else t).detach().float())

    handle = module.register_forward_hook(hook)
    try:
        with eval_mode(ctx.work), preserved_globals(seed=0), torch.no_grad():
            ctx.work(*fresh(args), **fresh(kwargs))
    except Exception:  # noqa: BLE001 - user code on the step's own arguments: nothing is confirmed
        return None
    finally:
        handle.remove()
    return kept[0] if kept else None


def fed_moves(ctx: Ctx, fed: tuple[int | str, str], ids: torch.Tensor, changed: torch.Tensor, rows: torch.Tensor,
              j: int) -> tuple[float, float, float] | None:
    """``_sequence.moves`` on the arguments ``train_step`` fed its model: how much the outputs before ``j`` and at
    ``j`` move when ``ids`` becomes ``changed`` (beyond what they move with nothing changed), and their scale."""
    slot, site = fed
    a, b, c = (fed_forward(ctx, slot, x, site) for x in (ids, changed, ids))
    if a is None or b is None or c is None or not a.shape == b.shape == c.shape or a.shape[1] <= j:
        return None
    a, b, c = a[rows], b[rows], c[rows]
    noise, noise_at = float((a[:, :j] - c[:, :j]).abs().max()), float((a[:, j] - c[:, j]).abs().max())
    before = max(0.0, float((a[:, :j] - b[:, :j]).abs().max()) - 2 * noise)
    at = max(0.0, float((a[:, j] - b[:, j]).abs().max()) - 2 * noise_at)
    return before, at, max(float(a.abs().max()), 1e-12)
