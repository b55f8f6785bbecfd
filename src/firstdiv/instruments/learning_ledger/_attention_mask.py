"""``dependency.padding_read``: a padded token batch whose model reads the padding, although it takes a mask.

Padding is found in the program's own batch: per row, a run at the end (or the start) of the sequence, marked by
the batch's mask or filled with the model's pad token. Two shapes of the slip, each confirmed by counterfactual runs of the ledger's copy
(every RNG seeded alike):

- *a mask is handed over and the padding still reaches the real tokens*: an input named ``*mask*`` of the token
  ids' shape, one of whose two values marks a run at the end (or the start) of every padded row, and noise added to
  the token embeddings inside that padding only (the ids untouched, so masking or sampling keyed on them is the same)
  changes the outputs at the real positions (or the pooled output). Only for attention models without recurrent or 1-d convolution layers: those read their padding by
  design, attention with its mask applied cannot. The claim is then confirmed on the attention modules themselves:
  where none of their outputs at a real position moves, the mask works and the padding is read after attention (a
  CRF's forward algorithm over the padded length, a pooling): a note, not a finding;
- *no mask is passed to a model that takes one*: the model's ``forward`` has an ``attention_mask`` parameter the
  batch does not fill (or fills with ones only, beside runs of the pad id of different lengths, some longer than one
  token), the padding id is the model's own ``config.pad_token_id``, and passing the mask of the runs
  changes the outputs at the real positions.

A model without a mask parameter (a CNN or an RNN over padded text) reads its padding by design: no finding.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from .._core.batch import Batch
from .._core.checks import Check
from .._core.examples import logits_of
from .._core.task import Ctx, input_ids
from ._common import failed, g4
from ._dependency import named_items, seeded_loss

_MOVES = 1e-4  # an output change beyond this fraction of the output's scale is a change


def _run(eq: torch.Tensor) -> torch.Tensor | None:
    """``eq`` [..., T] when, in every row, its True positions are one run at the end (or all at the start), in at
    least one row and never a whole row; else None."""
    rows = eq.reshape(-1, eq.shape[-1])
    tail = rows.flip(1).cumprod(1).flip(1).bool()
    head = rows.cumprod(1).bool()
    for run in (tail, head):
        if bool(run.any()) and not bool(run.all(1).any()) and torch.equal(rows, run):
            return run.reshape(eq.shape)
    return None


def _mask_key(ctx: Ctx, ids: torch.Tensor) -> tuple[str, torch.Tensor] | None:
    """The input named like a mask, of the token ids' shape, two-valued, one of whose values marks a run at the end
    (or the start) of the rows: ``(key, padding)``."""
    for k, v in named_items(ctx.batch.inputs):
        if not (torch.is_tensor(v) and "mask" in k.lower() and tuple(v.shape) == tuple(ids.shape)):
            continue
        vals = torch.unique(v)
        if vals.numel() == 2:
            pad = next((r for r in (_run(v == vals[0]), _run(v == vals[1])) if r is not None), None)
            if pad is not None:
                return k, pad
    return None


def _attends(model: torch.nn.Module) -> bool:
    """An attention model that reads no sequence by recurrence or convolution: with its mask applied, what sits in the
    padding cannot reach a real position."""
    kinds = [type(m) for m in model.modules()]
    return any("attention" in k.__name__.lower() for k in kinds) and not any(
        issubclass(k, (torch.nn.RNNBase, torch.nn.Conv1d)) for k in kinds)


def _outputs(ctx: Ctx, batch: Batch) -> torch.Tensor | None:
    r = seeded_loss(ctx, batch)
    return None if r is None else logits_of(r[0])


def _real_change(a: torch.Tensor, b: torch.Tensor, pad: torch.Tensor) -> float | None:
    if a.shape != b.shape:
        return None
    if a.dim() >= pad.dim() and tuple(a.shape[:pad.dim()]) == tuple(pad.shape):
        a, b = a[~pad], b[~pad]
    scale = max(float(a.abs().max()), 1e-12) if a.numel() else 1.0
    return float((a - b).abs().max()) / scale if a.numel() else 0.0


def padding_read(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """The module docstring's two shapes, or None."""
    ids = input_ids(ctx.batch)
    if ids is None or ids.dim() < 2 or ctx.batch_axis != 0 or ids.shape[-1] < 3:
        return None
    base = _outputs(ctx, ctx.batch)
    if base is None:
        return None
    given = _mask_key(ctx, ids)
    if given is not None:
        return _padding_leaks(ctx, ids, base, given, ev) if _attends(ctx.work) else None
    return _mask_not_passed(ctx, ids, base, ev)


@contextlib.contextmanager
def _noisy_padding(model: torch.nn.Module, ids: torch.Tensor, pad: torch.Tensor) -> Iterator[list[int]]:
    """Forward hooks on the copy's embedding layers that read tensors of the token ids' shape (or their rows
    flattened): noise of the
    embeddings' own spread added at the padding positions (the ids, and so any logic keyed on them, stay as they
    are). Yields the list the hooks count their calls in; removed on exit."""
    calls: list[int] = []
    g = torch.Generator().manual_seed(0)

    def hook(_m: torch.nn.Module, inputs: tuple, out: torch.Tensor) -> torch.Tensor | None:
        x = inputs[0] if inputs else None
        if not (torch.is_tensor(x) and torch.is_tensor(out) and x.numel() == pad.numel() and x.dim() >= 2
                and x.shape[-1] == pad.shape[-1]):  # the ids, or their rows flattened ([B, 2, T] -> [2B, T])
            return None
        calls.append(1)
        noise = torch.randn(out.shape, generator=g).to(out) * out.detach().float().std().clamp_min(1e-3).to(out)
        return out + noise * pad.reshape(x.shape).unsqueeze(-1).to(out)
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _attention_outputs(model: torch.nn.Module, pad: torch.Tensor) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Forward hooks on the copy's attention modules (class named ``*attention*``) keeping, per call, the first output
    tensor laid out ``[examples, positions, ...]`` (or ``[positions, examples, ...]``, transposed) like the padding."""
    seen: list[tuple[str, torch.Tensor]] = []

    def keep(name: str) -> Any:
        def hook(_m: torch.nn.Module, _inputs: tuple, out: Any) -> None:
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if torch.is_tensor(t) and t.dim() > pad.dim() and t.is_floating_point():
                    if tuple(t.shape[:2]) == tuple(pad.shape[::-1]) and pad.dim() == 2 and pad.shape[0] != pad.shape[1]:
                        t = t.transpose(0, 1)
                    if tuple(t.shape[:pad.dim()]) == tuple(pad.shape):
                        seen.append((name, t.detach().clone()))
                        return
        return hook
    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules()
               if "attention" in type(m).__name__.lower()]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def _attention_kept_out(ctx: Ctx, ids: torch.Tensor, pad: torch.Tensor) -> bool:
    """The counterfactual behind the finding's premise: with the padding's embeddings perturbed, the attention modules'
    outputs at the real positions stay put in every call (the mask keeps the padding out of attention; whatever reads
    it comes after, e.g. a CRF or a pooling over the padded length). False where no attention output was seen."""
    with _attention_outputs(ctx.work, pad) as base:
        _outputs(ctx, ctx.batch)
    with _attention_outputs(ctx.work, pad) as noisy, _noisy_padding(ctx.work, ids, pad):
        _outputs(ctx, ctx.batch)
    if not base or len(base) != len(noisy):
        return False
    return all((_real_change(a, b, pad) or 0.0) <= _MOVES for (_, a), (_, b) in zip(base, noisy, strict=True))


def _padding_leaks(ctx: Ctx, ids: torch.Tensor, base: torch.Tensor, given: tuple, ev: dict[str, Any]) -> Check | None:
    key, pad = given
    with _noisy_padding(ctx.work, ids, pad) as calls:
        moved = _outputs(ctx, ctx.batch)
    leak = None if moved is None or not calls else _real_change(base, moved, pad)
    if leak is None or leak <= _MOVES:
        return None
    if _attention_kept_out(ctx, ids, pad):
        ctx.report_notes.append(f"note: the outputs at the real tokens change (by {g4(leak)} of their scale) when only "
                                f"the embeddings inside the padding '{key}' marks change, but no attention module's "
                                "output at a real position does: the mask keeps the padding out of attention, and what "
                                "reads it comes after (a CRF or a pooling over the padded length); not judged")
        return None
    ev.update(mask_input=key, padding_positions=int(pad.sum()), change_when_padding_tokens_change=leak)
    return failed("DEPENDENCY", "dependency.padding_read",
                  f"input '{key}' marks {int(pad.sum())} padding positions, yet the outputs at the real tokens change "
                  f"(by {g4(leak)} of their scale) when only the embeddings inside the padding change: the mask does not "
                  "keep the padding out of the model's attention", ev,
                  expected=f"outputs at real tokens independent of what the padding holds ('{key}' applied)",
                  observed=f"padding content moves the real outputs by {g4(leak)}",
                  hint=f"pass '{key}' down to every attention layer (attention_mask= / key_padding_mask=)")


def _no_mask(mask: Any) -> bool:
    """No attention_mask, or one that masks nothing (all ones: a collator that rebuilt it without the padding)."""
    return mask is None or (torch.is_tensor(mask) and mask.numel() > 0 and bool((mask != 0).all()))


def _mask_not_passed(ctx: Ctx, ids: torch.Tensor, base: torch.Tensor, ev: dict[str, Any]) -> Check | None:
    pad_id = getattr(getattr(ctx.work, "config", None), "pad_token_id", None)
    x = ctx.batch.inputs
    if not isinstance(pad_id, int) or not isinstance(x, dict) or not _no_mask(x.get("attention_mask")):
        return None
    try:
        params = inspect.signature(ctx.work.forward).parameters
    except (TypeError, ValueError):
        return None
    pad = _run(ids == pad_id)
    if "attention_mask" not in params or pad is None:
        return None
    lengths = pad.reshape(-1, pad.shape[-1]).sum(1)
    if "attention_mask" in x and (len(set(lengths.tolist())) < 2 or int(lengths.max()) < 2):
        return None  # an all-ones mask beside a pad id that ends rows once (an end token sharing it) is not padding
    mask = (~pad).to(ids.dtype)
    masked = _outputs(ctx, Batch({**x, "attention_mask": mask}, ctx.batch.targets, ctx.batch.as_kwargs))
    change = None if masked is None else _real_change(base, masked, pad)
    if change is None or change <= _MOVES:
        return None
    given = "an attention_mask of all ones" if "attention_mask" in x else "no attention_mask"
    ev.update(padding_positions=int(pad.sum()), pad_token_id=pad_id, change_when_mask_passed=change, mask_given=given)
    return failed("DEPENDENCY", "dependency.padding_read",
                  f"the batch pads {int(pad.sum())} positions with pad_token_id {pad_id} and passes {given}, "
                  f"though the model takes one; passing the mask of that padding changes the outputs at the real tokens "
                  f"(by {g4(change)} of their scale): every token attends to the padding", ev,
                  expected="outputs at real tokens independent of the padding (attention_mask passed)",
                  observed=f"{given}; with the padding's mask the real outputs move by {g4(change)}",
                  hint="keep the tokenizer's attention_mask in the batch and pass it to the model")
