"""OBJECTIVE's padding check, ``objective.padding_in_loss``: the loss moves when the predictions at padding positions
move. Which positions are padding is read from the program's own batch, never assumed:

- a ``decoder_attention_mask`` shaped like the targets, or an ``attention_mask`` shaped like them when the token
  inputs are (a language model), marks them with 0;
- else a trailing run of one token id that ends at least half the rows with runs of different lengths, is rare before
  them, and runs two or more long in far more rows than chance repeats make (a pad id, not a class id that ends two
  rows of a few-shot episode by chance); the first token of each run is left out (it may be a real end-of-sequence
  target);
- else such a run at either edge (left padding: a recommender's item history), read as ``pad_runs`` does,
  along the sequence axis (``batch_axis=1``: time first);
- in structured targets, the positions a 0/1 weight beside token ids of the same shape switches off (a masked LM's
  ``masked_weights``), where flipping the weights moves the loss (the loss reads them).

The predictions may be ``[B, T, V]`` scores or one score per position (``[B, T]``, as a recommender's positive-item
logits), and the targets a tensor or an integer numpy array.

Confirmed by a counterfactual: the user's loss_fn on the same outputs with only the padding positions' predictions
replaced by the predictions at other, real positions (so they stay values the loss accepts: a pointer-generator's
probabilities stay probabilities). A loss that does not move ignores the padding (PASS); one that moves trains the model
to predict padding; one that turns NaN or infinite shows nothing either way.

A loss computed inside the model (``outputs.loss`` from ``labels=``) cannot be handed other predictions: there the
loss's own gradient at the predictions is read instead, on a seeded forward of the ledger's copy. A prediction the loss
pulls toward the padding target it is aligned with (at the same position, or at the next one: a causal model shifts
its labels itself) is trained to predict padding. Changing the padding targets instead would prove nothing: a loss
that ignores a pad id by its value stops ignoring the changed ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._core.checks import Check
from .._core.examples import logits_of
from .._core.task import Ctx, input_ids, is_int
from ._common import failed, g4
from ._dependency import seeded_loss
from ._masks import flip, replace_target, target_leaves
from ._objective._calls import call
from ._padding_intent import padding_known
from ._sequence import pulled_toward, read_sequences

_MASK_KEYS = ("decoder_attention_mask", "attention_mask")


def _from_mask(ctx: Ctx, t: torch.Tensor) -> torch.Tensor | None:
    x = ctx.batch.inputs if isinstance(ctx.batch.inputs, dict) else {}
    ids = input_ids(ctx.batch)
    for key in _MASK_KEYS:
        m = x.get(key)
        if not torch.is_tensor(m) or tuple(m.shape) != tuple(t.shape):
            continue
        if key == "attention_mask" and (ids is None or tuple(ids.shape) != tuple(t.shape)):
            continue
        pad = m == 0
        if bool(pad.any()) and bool((~pad).any()):
            return pad
    return None


def _from_runs(ctx: Ctx, t: torch.Tensor) -> torch.Tensor | None:
    last = t[:, -1]
    v = int(last.mode().values)
    if v == ctx.ignore_index or float((last == v).float().mean()) < 0.5:
        return None
    tail = torch.zeros_like(t, dtype=torch.bool)
    lengths = []
    for i in range(t.shape[0]):
        n = 0
        while n < t.shape[1] and int(t[i, -1 - n]) == v:
            n += 1
        lengths.append(n)
        if n >= 2:
            tail[i, t.shape[1] - n + 1:] = True  # the run's first token may be a real end-of-sequence target
    body = ~tail & (t != ctx.ignore_index)
    rare = float((t[body] == v).float().mean()) if bool(body.any()) else 1.0
    # runs of two or more in far more rows than chance repeats make (a few-shot episode's class ids, K ~ 5, end two
    # rows in a row with v about once in K), as pad_runs requires
    long = sum(n >= 2 for n in lengths) / len(lengths)
    if len(set(lengths)) < 2 or rare > 0.2 or long < max(0.25, 3 * rare) or not bool(tail.any()):
        return None
    return tail


def _positions(ctx: Ctx, t: torch.Tensor) -> tuple[torch.Tensor | None, str]:
    """The padding positions in ``t``'s own layout; runs are read along the sequence axis (``batch_axis=1``: time
    first, as a seq2seq loop's ``[T, B]`` targets)."""
    pad = _from_mask(ctx, t)
    if pad is not None:
        return pad, "the batch's attention mask"
    seq_first = ctx.batch_axis == 1
    rows = t.transpose(0, 1) if seq_first else t
    pad, how = _from_runs(ctx, rows), "a trailing run of one token id (a pad id)"
    if pad is None:
        runs = pad_runs(rows)
        if runs is None:
            return None, ""
        pad, how = runs[0], f"a run of the id {runs[1]} at the edge of the sequences (a pad id)"
    return (pad.transpose(0, 1) if seq_first else pad), how


def _from_weights(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> tuple[torch.Tensor | None, str]:
    """Structured targets holding per-position token ids and a 0/1 weight of the same shape (a masked LM's
    ``masked_ids`` and ``masked_weights``) that the loss reads (flipping it moves the loss): positions weighted 0."""
    leaves = [(name, torch.as_tensor(v)) for name, v in target_leaves(ctx.batch.targets)]
    ids = [v for _, v in leaves if is_int(v) and v.dim() == 2 and bool((v > 1).any())]
    for name, w in leaves:
        if w.dim() != 2 or tuple(od.shape[:2]) != tuple(w.shape) or not any(tuple(i.shape) == tuple(w.shape) for i in ids):
            continue
        values = w.reshape(-1)
        if not bool(((values == 0) | (values == 1)).all()) or not bool((values == 0).any()) or not bool((values == 1).any()):
            continue
        flipped = call(ctx, od, replace_target(ctx.batch.targets, name, flip(ctx.batch.targets, name)), ev,
                       "the weights flipped")
        if flipped is not None and abs(flipped - value) > 1e-6 * max(1.0, abs(value)):  # the loss reads them
            return w == 0, f"the positions {name} weights 0"
    return None, ""


def _perturbed(od: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """The predictions with those at padding positions replaced by the predictions at other, real positions (values
    the loss accepts: probabilities stay probabilities), or shifted by noise when every position is padding."""
    g = torch.Generator().manual_seed(0)
    other = od.detach().clone()
    real = other[~pad]
    n = int(pad.sum())
    if len(real):
        other[pad] = real[torch.randint(0, len(real), (n,), generator=g)]
    else:
        other[pad] += torch.randn(other[pad].shape, generator=g, dtype=torch.float32).to(od.dtype) * 3.0
    return other


def padding_in_loss(ctx: Ctx, od: torch.Tensor, value: float, ev: dict[str, Any]) -> Check | None:
    """The loss moving with the predictions at padding positions (module docstring)."""
    given = ctx.batch.targets
    t = torch.from_numpy(given) if isinstance(given, np.ndarray) and given.dtype.kind in "iu" else given
    if isinstance(given, (tuple, list, dict)) and od.dim() in (2, 3):
        pad, how = _from_weights(ctx, od, value, ev)
    elif not is_int(t) or t.dim() != 2 or od.dim() not in (2, 3) or tuple(od.shape[:2]) != tuple(t.shape):
        return None
    else:
        pad, how = _positions(ctx, t)
    if pad is None:
        return None
    if torch.is_tensor(t):
        pad = pad & (t != ctx.ignore_index)
    if not bool(pad.any()):
        return None
    moved = call(ctx, _perturbed(od, pad), given, ev, "padding reaches the loss")
    if moved is None and torch.is_tensor(t) and ctx.notes.get("pack") is None:
        return _pulled_inside(ctx, t, pad, how, ev)
    if moved is None:
        return None
    if not np.isfinite(moved):  # the perturbed predictions left the loss's domain: nothing shown either way
        ev["loss_with_padding_perturbed"] = moved
        return None
    ev.update(padding_positions=int(pad.sum()), padding_from=how, loss_with_padding_perturbed=moved)
    if abs(moved - value) <= 1e-6 * max(1.0, abs(value)):
        ev["padding_ignored"] = True
        return None
    if not _known(ctx, pad, how, ev, t):
        return None
    return _finding(f"the loss moves ({g4(value)} -> {g4(moved)}) when only the predictions at {int(pad.sum())} "
                    f"padding positions (from {how}) change: the model is trained to predict padding", ev,
                    f"loss {g4(value)} -> {g4(moved)} with only padding predictions changed")


def _known(ctx: Ctx, pad: torch.Tensor, how: str, ev: dict[str, Any], ids: Any = None) -> bool:
    """The premise (``_padding_intent``): the program treats these positions (of the ids ``ids``) as padding; else a
    note, never a FAIL."""
    values = ids[pad].unique() if torch.is_tensor(ids) and tuple(ids.shape) == tuple(pad.shape) else torch.tensor([])
    known = padding_known(ctx, pad, how, int(values[0]) if values.numel() == 1 else None)
    if known is not None:
        ev["padding_known_from"] = known
        return True
    note = (f"note: the loss moves with the predictions at {int(pad.sum())} padding positions (from {how}), but the "
            "program shows no padding of its own (no attention mask in its batch, no embedding padding_idx, no "
            "ignore_index or zero class weight in its loss): fixed-length rows counted on purpose look the same, so "
            "this is not judged; set the padding targets to the loss's ignore_index if they should not count")
    if note not in ctx.report_notes:
        ctx.report_notes.append(note)
    return False


def _finding(message: str, ev: dict[str, Any], observed: str) -> Check:
    return failed("OBJECTIVE", "objective.padding_in_loss", message, ev,
                  expected="a loss that ignores padding positions (ignore_index, or a mask applied to the loss)",
                  observed=observed,
                  hint="set the targets at padding positions to the loss's ignore_index (-100), or multiply the "
                       "per-token loss by the mask before reducing")


def loss_pull(ctx: Ctx, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Where the loss's gradient pulls a ``[B, T, V]`` prediction aligned with the ``[B, T]`` targets ``t``, and the
    class it pulls up there (a cross-entropy's target), on a seeded forward of the ledger's copy (cached); None when
    the loss does not reach such a prediction."""
    if "loss_pull" not in ctx.notes:
        ctx.notes["loss_pull"] = _pull(ctx, t)
    return ctx.notes["loss_pull"]


def _pull(ctx: Ctx, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    run = seeded_loss(ctx, ctx.batch, grad=True)
    logits = logits_of(run[0]) if run is not None else None
    loss = run[1] if run is not None else None
    if logits is None or not torch.is_tensor(loss) or loss.numel() != 1 or not loss.requires_grad \
            or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(t.shape) or not logits.requires_grad:
        return None
    (g,) = torch.autograd.grad(loss.reshape(()), logits, allow_unused=True)
    if g is None:
        return None
    return pulled_toward(g.detach())


def pulls_next(ctx: Ctx, t: torch.Tensor, match: float) -> bool:
    """The loss's own gradient asks the prediction at t for ``labels[:, t + 1]`` (at >= ``match`` of the positions
    it pulls, and more than for ``labels[:, t]``): a loss that shifts inside and ignores padding by another value than
    the ignore index the values above were compared with."""
    pull = loss_pull(ctx, t)
    if pull is None or not bool(pull[0].any()):
        return False
    pulled, toward = pull
    n = int(pulled[:, :-1].sum())
    nxt = float(((toward[:, :-1] == t[:, 1:]) & pulled[:, :-1]).sum()) / max(1, n)
    same = float(((toward == t) & pulled).sum()) / int(pulled.sum())
    return nxt >= match and nxt > same


def _pulled_inside(ctx: Ctx, t: torch.Tensor, pad: torch.Tensor, how: str, ev: dict[str, Any]) -> Check | None:
    """A loss computed inside the model: the padding targets its gradient pulls predictions toward (module
    docstring), or None."""
    pull = loss_pull(ctx, t)
    if pull is None:
        return None
    pulled, toward = pull
    same = pulled & pad & (toward == t)
    nxt = pulled[:, :-1] & pad[:, 1:] & (toward[:, :-1] == t[:, 1:])
    hit, shift = max((same, 0), (nxt, 1), key=lambda h: int(h[0].sum()))
    if not bool(hit.any()):
        ev["padding_ignored"] = True
        return None
    n = int(hit.sum())
    if not _known(ctx, pad, how, ev, t):
        return None
    ev.update(padding_positions=int(pad.sum()), padding_from=how, padding_targets_pulled=n, read_from="the loss's "
              "gradient at the predictions (the loss is computed inside the model)", target_shift=shift)
    at = "the next position's" if shift else "their own"
    return _finding(f"the loss (computed inside the model) pulls {n} predictions toward {at} target at padding "
                    f"positions (from {how}; {int(pad.sum())} padding targets not ignored): the model is trained "
                    "to predict padding", ev, f"nonzero loss gradient toward the target at {n} padding positions")


def pad_runs(ids: torch.Tensor) -> tuple[torch.Tensor, int] | None:
    """Positions holding padding: a run of one id ending (or starting) most rows, of different lengths, rare elsewhere,
    and longer than one token in far more rows than chance repeats of a start or end token make. A trailing run's first
    token is left out (it may be a real end-of-sequence token)."""
    for end in (-1, 0):
        edge = ids[:, end]
        v = int(edge.mode().values)
        if float((edge == v).float().mean()) < 0.75:
            continue
        rev = ids if end == 0 else ids.flip(1)
        run = (rev == v).int().cumprod(1).bool()  # the run from that edge
        lengths = run.sum(1)
        pad = run.clone()
        if end == -1:
            first = (lengths - 1).clamp(min=0)
            pad[torch.arange(ids.shape[0]), first] &= lengths == 0  # the run's first token is not padding
            pad = pad.flip(1)
        body = ~(run.flip(1) if end == -1 else run)
        rare = float((ids[body] == v).float().mean()) if bool(body.any()) else 1.0
        long = float((lengths >= 2).float().mean())  # a start/end token repeats by chance at about `rare`
        if len(set(lengths.tolist())) >= 2 and rare <= 0.2 and long >= max(0.25, 3 * rare) and bool(pad.any()):
            return pad, v
    return None


def padding_pulled(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """``objective.padding_in_loss`` read from the loss's gradient: positions whose asked-for token is padding (a run
    of one id at the edge of the sequence) are pulled by the loss: the model is trained to predict padding."""
    for s in read_sequences(ctx):
        runs = pad_runs(s.ids) if s.pulled is not None else None
        if runs is None:
            continue
        pad, v = runs
        asked = pad[:, 1:] if s.relation == "next" else pad
        rows = s.pulled[:, : asked.shape[1]]
        hit = rows & asked[:, : rows.shape[1]]
        if not bool(hit.any()) or not _known(ctx, pad, f"a run of {v} at the end of the rows of '{s.key}'", ev, s.ids):
            continue
        ev.update(sequence_input=s.key, pad_id=v, padding_positions_pulled=int(hit.sum()), read_from=s.source)
        return failed("OBJECTIVE", "objective.padding_in_loss",
                      f"the loss pulls the prediction toward the padding id {v} at {int(hit.sum())} positions whose "
                      f"token in '{s.key}' is padding (a run of {v} at the end of the rows, read from {s.source}): the "
                      "model is trained to predict padding", ev,
                      expected="a loss that ignores padding positions (ignore_index, or a mask applied to the loss)",
                      observed=f"nonzero loss gradient at {int(hit.sum())} padding positions",
                      hint="set the labels at padding positions to the loss's ignore_index (-100), or multiply the "
                           "per-token loss by the mask before reducing")
    return None
