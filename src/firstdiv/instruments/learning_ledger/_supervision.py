"""Which position a target supervises, read from the loss's gradient, for programs whose logits are never visible.

``_sequence`` reads the token each position is asked for from the gradient on an aligned output of vocabulary size.
Many programs never show one: a recurrent LM whose decoder runs inside the loss (a split or adaptive softmax given the
decoder's weights), a model that computes its own loss from a ``target`` input. There the question "is each position
asked for the token it reads?" is answered by a counterfactual on the ledger's copy instead:

1. a target sequence equal to the token input at >= 90 % of its positions (the declared targets, flattened or not, in
   the batch's layout, or another integer input of the same shape), and not equal to it shifted by one;
2. change only that target at position ``j`` (another example's token) and run forward and backward again: the last
   output aligned with the sequence (the hidden state the head reads) changes its gradient only at the position that
   supervises target ``j``. When that is ``j`` itself, position ``j`` is asked for ``tokens[j]``, the token it reads. A
   model that shifts inside its loss (labels equal to the inputs by its contract) supervises target ``j`` at ``j - 1``:
   no finding;
3. the model is causal on the tokens (changing ``tokens[j]`` moves the output at ``j`` and none before it,
   ``_sequence.moves``): every position copies its own input -- ``task.target_not_shifted``. A model that reads the
   whole sequence (an autoencoder) is left to the checks that name that reading.

Nothing is concluded when no output is aligned with the sequence, the gradient does not reach it, or the change moves
no position or several.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .._core.batch import Batch
from .._core.checks import Check
from .._core.task import Ctx, is_int
from ._dependency import named_items, with_input
from ._sequence import MATCH, Seq, batch_first, copy_finding, int_sequences, moves, run_captured


@dataclass
class _Target:
    name: str  # "the declared targets" or the input's key
    values: torch.Tensor  # [B, T] in the batch-first layout of the token input
    put: Any  # values [B, T] -> the batch with this target replaced


def _declared(ctx: Ctx, ids_raw: torch.Tensor, n: int, length: int) -> _Target | None:
    t = ctx.batch.targets
    if not is_int(t) or t.numel() != n * length:
        return None
    raw_shape = tuple(ids_raw.shape)
    if t.dim() == 2 and tuple(t.shape) != raw_shape:
        return None
    shaped = t.reshape(raw_shape)
    keys = [k for k, v in named_items(ctx.batch.inputs) if v is t]  # a model that takes its target as an input

    def put(values: torch.Tensor) -> Batch:
        new = batch_first(values, ctx.batch_axis).contiguous().reshape(t.shape).to(t.dtype)
        b = Batch(ctx.batch.inputs, new, ctx.batch.as_kwargs)
        for k in keys:
            b = with_input(b, k, new)
        return b
    return _Target("the declared targets", batch_first(shaped, ctx.batch_axis), put)


def _candidates(ctx: Ctx, key: str, ids: torch.Tensor) -> list[_Target]:
    n, length = ids.shape
    raw = dict(named_items(ctx.batch.inputs))[key]
    found = [c for c in [_declared(ctx, raw, n, length)] if c is not None]
    for other, v in named_items(ctx.batch.inputs):
        if other != key and torch.is_tensor(v) and is_int(v) and tuple(v.shape) == tuple(raw.shape) and \
                v is not ctx.batch.targets:
            found.append(_Target(f"input '{other}'", batch_first(v, ctx.batch_axis),
                                 lambda values, k=other, like=v: with_input(ctx.batch, k, batch_first(values, ctx.batch_axis)
                                                                           .contiguous().to(like.dtype))))
    return found


def _equal_unshifted(ids: torch.Tensor, t: torch.Tensor, ignore: int) -> float | None:
    keep = t != ignore
    if int(keep.sum()) < 4:
        return None
    same = float((t == ids)[keep].float().mean())
    nxt = float((t[:, :-1] == ids[:, 1:])[keep[:, :-1]].float().mean()) if bool(keep[:, :-1].any()) else 0.0
    return same if same >= MATCH and same > nxt else None


def _gradient_rows(ctx: Ctx, batch: Batch, n: int, length: int) -> dict[tuple[str, int], torch.Tensor]:
    run = run_captured(ctx, batch, {length, length - 1}, n, grad=True)
    if run is None:
        return {}
    return {site: batch_first(out.grad, ctx.batch_axis).detach().float() for site, out in run[2].kept.items()
            if out.grad is not None and out.dim() == 3}


def _supervises(ctx: Ctx, target: _Target, n: int, length: int, j: int) -> tuple[list[int], tuple[str, int]] | None:
    """The positions whose gradient at the last aligned output moves when only target[:, j] changes."""
    before = _gradient_rows(ctx, target.put(target.values), n, length)
    changed = target.values.clone()
    changed[:, j] = target.values[:, j].roll(1, 0)
    moved_rows = changed[:, j] != target.values[:, j]
    if not bool(moved_rows.any()) or not before:
        return None
    after = _gradient_rows(ctx, target.put(changed), n, length)
    site = next((s for s in reversed(list(before)) if s in after and before[s].shape == after[s].shape), None)
    if site is None:
        return None
    delta = (after[site] - before[site]).abs()[moved_rows].amax(dim=(0, 2))
    scale = float(before[site].abs().max())
    if scale == 0:
        return None
    return [p for p in range(delta.shape[0]) if float(delta[p]) > 1e-6 * scale], site


def _fed_the_targets(ctx: Ctx, ids: torch.Tensor) -> bool:
    """A token input equal to the declared targets beside other inputs, the targets not themselves an input."""
    t = ctx.batch.targets
    items = named_items(ctx.batch.inputs)
    return (torch.is_tensor(t) and len(items) >= 2 and not any(v is t for _, v in items)
            and tuple(batch_first(t, ctx.batch_axis).shape) == tuple(ids.shape) and torch.equal(batch_first(t, ctx.batch_axis), ids))


def target_copy(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """``task.target_not_shifted`` read from where each target is supervised (module docstring), else None."""
    for key, ids in int_sequences(ctx):
        n, length = ids.shape
        if _fed_the_targets(ctx, ids):  # teacher forcing without the shift: DEPENDENCY's target_as_input names it
            continue
        for target in _candidates(ctx, key, ids):
            agreement = _equal_unshifted(ids, target.values, ctx.ignore_index)
            if agreement is None:
                continue
            j = length // 2
            found = _supervises(ctx, target, n, length, j)
            if found is None or found[0] != [j]:
                continue
            seq = Seq(key, ids, "same", agreement, f"{target.name} (a change of target {j} moves the gradient at "
                      f"position {j} only)", found[1])
            moved = moves(ctx, seq)
            if moved is None:
                continue
            earlier, at, scale = moved
            if earlier <= 1e-6 * scale and at > 1e-5 * scale:
                ev.update(sequence_input=key, target=target.name, agreement=round(agreement, 4), changed_position=j,
                          earlier_outputs_change=earlier, output_change_at_position=at)
                return copy_finding(seq, j, at, ev)
    return None
