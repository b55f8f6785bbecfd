"""Whether a program treats its padding as padding, read from its own objects: the premise of
``objective.padding_in_loss``. A loss that moves with the predictions at padding positions trains the model to predict
padding; that is a defect only where the program means those positions to count for nothing. A sentence VAE fed
fixed-length rows "filled with a huge amount of padding tokens", its loss scaled by the padded length on purpose, or
a CRF without a mask that learns the pad tag's transitions, count them by design.

The program says it knows its padding when (any of):

- the padding was read from the batch's own attention mask, or from 0/1 weights beside the targets that its loss reads;
- a module of the model embeds with a ``padding_idx`` (an embedding that keeps the pad id's vector at zero), or holds
  the pad id itself under a name that says so (``pad_idx``, ``trg_pad_idx``, a config's ``pad_token_id``: a model that
  builds its masks from the ids);
- a 0/1 or boolean tensor the batch hands the model or the loss marks the same positions (a ``src_mask``, a
  ``key_padding_mask``, a ``[B, 1, T]`` or ``[B, T, T]`` mask whose last query row is the key padding);
- its loss declares something to ignore: an ``ignore_index`` other than PyTorch's default, or class weights with a zero
  (on ``loss_fn`` itself or on a loss module its closure holds).

None of these: the padding in the loss is noted, never a FAIL (the check cannot tell a dropped mask from a design).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .._core.closure import closure_state, tensors_in
from .._core.task import IGNORE_INDEX, Ctx
from ._masks import target_leaves

AGREE = 0.9  # a mask marks the padding when it flags at least this share of its positions ...
ELSEWHERE = 0.2  # ... and at most this share of the real positions


def padding_known(ctx: Ctx, pad: torch.Tensor, how: str, pad_id: int | None) -> str | None:
    """How the program shows it treats the positions ``pad`` (``[B, T]``, holding ``pad_id`` where known) as padding,
    or None (module docstring)."""
    if how.startswith(("the batch's attention mask", "the positions")):  # its own mask, or 0/1 weights its loss reads
        return how
    return _in_model(ctx.model, pad_id) or _mask_in_batch(ctx, pad) or _loss_ignores(ctx)


def _in_model(model: nn.Module, pad_id: int | None) -> str | None:
    for name, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.padding_idx is not None:
            return f"the model's embedding {name or 'model'} has padding_idx={m.padding_idx}"
        if pad_id is None:
            continue
        config = getattr(m, "config", None)
        for owner, attrs in ((name, vars(m)), (f"{name}.config" if name else "config", _attrs(config))):
            key = next((k for k, v in attrs.items() if "pad" in k.lower() and _is_id(v) and v == pad_id), None)
            if key is not None:
                return f"the model's {owner or 'model'}.{key} is the pad id {pad_id}"
    return None


def _attrs(obj: Any) -> dict[str, Any]:
    try:
        return dict(vars(obj)) if obj is not None else {}
    except TypeError:
        return {}


def _is_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_rows(m: torch.Tensor, rows: int) -> torch.Tensor | None:
    """A mask as ``[B, T']``: ``[B, T]`` as is, ``[B, 1, T]`` / ``[B, 1, 1, T]`` squeezed, ``[B, ..., T, T]`` its last
    query row (a causal mask combined with the key padding)."""
    if m.dim() < 2 or m.shape[0] != rows:
        return None
    return m.reshape(rows, -1, m.shape[-1])[:, -1, :]


def _zero_one(m: Any) -> torch.Tensor | None:
    if isinstance(m, np.ndarray):
        m = torch.from_numpy(m) if m.dtype.kind in "biuf" else None
    if not torch.is_tensor(m) or m.is_complex() or m.numel() == 0:
        return None
    if m.dtype == torch.bool:
        return m
    if not bool(((m == 0) | (m == 1)).all()):
        return None
    return m != 0


def _mask_in_batch(ctx: Ctx, pad: torch.Tensor) -> str | None:
    leaves = [("inputs", t) for t in tensors_in(ctx.batch.inputs)] + \
             [(f"targets {name}", v) for name, v in target_leaves(ctx.batch.targets)]
    for where, value in leaves:
        m = _zero_one(value)
        rows = _as_rows(m, pad.shape[0]) if m is not None else None
        if rows is None or rows.shape[1] < 2:
            continue
        n = min(rows.shape[1], pad.shape[1])
        p, r = pad[:, :n], rows[:, :n]
        if not bool(p.any()) or not bool((~p).any()):
            continue
        for flagged in (~r, r):  # 0 at padding (an attention mask) or True at padding (a key_padding_mask)
            if float(flagged[p].float().mean()) >= AGREE and float(flagged[~p].float().mean()) <= ELSEWHERE:
                return f"a mask in the batch's {where} ({tuple(value.shape)}) marks the same positions"
    return None


def _loss_ignores(ctx: Ctx) -> str | None:
    for obj in [ctx.loss_fn, *closure_state(ctx.loss_fn)]:
        ignore = getattr(obj, "ignore_index", None)
        if _is_id(ignore) and ignore != IGNORE_INDEX:
            return f"the loss {type(obj).__name__} ignores the index {ignore}"
        weight = getattr(obj, "weight", None) if isinstance(obj, nn.modules.loss._WeightedLoss) else None
        if torch.is_tensor(weight) and bool((weight == 0).any()):
            return f"the loss {type(obj).__name__} weighs class {int((weight == 0).nonzero()[0])} 0"
    return None
