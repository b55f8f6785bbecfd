"""``task.target_misaligned``: dense targets (a label map, heatmaps, a target image) that sit at other positions than
the input they describe.

A segmentation or keypoint program pairs each input pixel with the target at the same place. An augmentation applied to
the image alone (a random flip that skips the mask), or a label map read in (W, H) order, breaks the pairing silently:
the loss still falls, slowly, towards a blurred answer. The premise is confirmed on the program's own batch by a
counterfactual: how well do the input's pixels explain the targets as given, and how well the same targets flipped
left-right, flipped upside down or transposed?

1. A 4-D floating input [B, C, H, W] (C <= 8: an image, not feature maps) and a target that a dense prediction is
   compared with (declared targets on the grid of a 4-D output, or the target a loss node of ``train_step`` saved: a
   second view of the images, fed to an encoder, is none) with the same examples on a grid of at least 12 x 12 whose
   size divides the input's or is divided by it, by the same factor on both axes: a class map [B, h, w] (one channel
   per class of the outputs; ids outside them are unsupervised) or floating maps [B, K, h, w] or [B, h, w]. Both are
   brought to the smaller grid by average pooling, unless the input is the smaller one and under 12 x 12 (a
   super-resolution's low-resolution crop): then it is upsampled (bilinear) to the targets' grid.
2. For each alignment (as given, and each of the others), each example's target pixels predicted from the other
   examples: the mean target of the pixels whose 3 x 3 neighbourhood of (standardized) input values is nearest (R^2).
3. Examples whose targets one other alignment explains with R^2 >= 0.1, at least 0.2 better than as given, where the
   targets as given are not explained (R^2 <= 0.1), at least two of them and a fifth of the batch:
   ``task.target_misaligned``. Misaligned examples also blur the references the others are predicted from: an
   alignment that wins somewhere is scored again with the winners' references realigned, and the pass that explains
   more examples counts. Symmetric images explain both alignments alike and count for neither; targets the
   input's local values do not explain (real photographs of objects) give no finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .._core.checks import Check
from .._core.task import Ctx, is_int
from ._common import failed, first_tensor
from ._step_loss import step_fed

MIN_SIDE = 12  # the smallest target grid the fit reads
MAX_CHANNELS = 8  # more input channels are feature maps, not an image
MAX_TARGET_CHANNELS = 16
R2_EXPLAINED = 0.1  # an alignment "explains" an example's targets at this R^2
R2_MARGIN = 0.2  # ... by this much more than the targets as given
R2_UNEXPLAINED = 0.1  # ... which the input explains no better than this
NEIGHBOURS = 8
MAX_REFERENCE, MAX_QUERY = 4096, 1024  # pixels sampled (seeded) for the neighbour search

_OTHERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "flipped left-right": lambda y: y.flip(-1),
    "flipped upside down": lambda y: y.flip(-2),
    "transposed": lambda y: y.transpose(-1, -2),
}


def _tensors(x: Any, name: str) -> list[tuple[str, torch.Tensor]]:
    """The tensors of nested dicts, lists and tuples, each with its path."""
    if torch.is_tensor(x):
        return [(name, x)]
    if isinstance(x, dict):
        return [item for k, v in x.items() for item in _tensors(v, str(k))]
    if isinstance(x, (list, tuple)):
        return [item for i, v in enumerate(x) for item in _tensors(v, f"{name}[{i}]")]
    return []


def _image(inputs: Any) -> tuple[str, torch.Tensor] | None:
    for name, v in _tensors(inputs, "inputs"):
        if v.dim() == 4 and v.is_floating_point() and 1 <= v.shape[1] <= MAX_CHANNELS:
            return name, v.detach().float()
    return None


def _dense_target(ctx: Ctx, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The target as float channels [B, K, h, w] and its supervised pixels [B, 1, h, w]."""
    t = t.detach()
    if is_int(t) and t.dim() == 3:
        out = ctx.outputs
        k = ctx.num_classes or (out.shape[1] if torch.is_tensor(out) and out.dim() == 4 else int(t.max().clamp(min=0)) + 1)
        if not 2 <= k <= MAX_TARGET_CHANNELS:
            return None
        keep = (t >= 0) & (t < k)
        return F.one_hot(t.clamp(0, k - 1), k).permute(0, 3, 1, 2).float() * keep[:, None], keep[:, None].float()
    if not t.is_floating_point() or t.dim() not in (3, 4):
        return None
    y = t.float() if t.dim() == 4 else t.float()[:, None]
    if y.shape[1] > MAX_TARGET_CHANNELS or not torch.isfinite(y).all():
        return None
    return y, torch.ones_like(y[:, :1])


def _same_grid(x: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    """Input and targets on one grid: the larger pooled to the smaller, or (a super-resolution's low-resolution input
    under ``MIN_SIDE``) the input upsampled to the targets' grid."""
    (hx, wx), (hy, wy) = x.shape[-2:], y.shape[-2:]
    if min(hy, wy) < MIN_SIDE:
        return None
    if hx % hy == 0 and wx % wy == 0 and hx // hy == wx // wy:
        return F.avg_pool2d(x, hx // hy) if hx != hy else x, y, keep
    if hy % hx == 0 and wy % wx == 0 and hy // hx == wy // wx:
        if min(hx, wx) < MIN_SIDE:
            return F.interpolate(x, size=(hy, wy), mode="bilinear", align_corners=False), y, keep
        f = hy // hx
        return x, F.avg_pool2d(y, f), (F.avg_pool2d(keep, f) > 0.999).float()
    return None


def _scores(feats: torch.Tensor, y: torch.Tensor, keep: torch.Tensor,
            ref: tuple[torch.Tensor, torch.Tensor] | None = None, cache: dict | None = None) -> torch.Tensor:
    """Each example's R^2 for targets ``y`` [B, K, P]: each supervised pixel predicted by the mean target of the
    ``NEIGHBOURS`` pixels of the other examples that look most alike (3 x 3 neighbourhoods, ``feats`` [B, F, P]), against
    the other examples' mean target (an example of one class is not explained by its own mean). ``ref``: the other
    examples' targets and supervised pixels to predict from, when not ``y`` and ``keep`` themselves. ``cache``: where
    every pixel is supervised, the neighbours depend on ``feats`` alone, so each alignment reuses the first one's."""
    b = feats.shape[0]
    ref_all, ref_all_keep = ref if ref is not None else (y, keep)
    full = cache is not None and bool((ref_all_keep > 0).all()) and bool((keep > 0).all())
    gen = torch.Generator().manual_seed(0)
    out = torch.full((b,), float("nan"), dtype=torch.float64)
    for i in range(b):
        others = [j for j in range(b) if j != i]
        ref_y = ref_all[others].permute(0, 2, 1).reshape(-1, y.shape[1])
        own = keep[i, 0] > 0
        q_y = y[i].T[own]
        if full and i in cache:
            ref_pick, q_pick, near = cache[i]
        else:
            ref_x = feats[others].permute(0, 2, 1).reshape(-1, feats.shape[1])
            ref_pick = torch.nonzero(ref_all_keep[others].reshape(-1) > 0).reshape(-1)
            if len(ref_pick) > MAX_REFERENCE:
                ref_pick = ref_pick[torch.randperm(len(ref_pick), generator=gen)[:MAX_REFERENCE]]
            q_x = feats[i].T[own]
            q_pick = torch.randperm(len(q_x), generator=gen)[:MAX_QUERY] if len(q_x) > MAX_QUERY else None
            q_x = q_x if q_pick is None else q_x[q_pick]
            near = None
            if len(ref_pick) >= NEIGHBOURS and len(q_x) >= 2:
                near = torch.cdist(q_x, ref_x[ref_pick]).topk(NEIGHBOURS, largest=False).indices
            if full:
                cache[i] = (ref_pick, q_pick, near)
        if near is None:
            continue
        ref_y, q_y = ref_y[ref_pick], (q_y if q_pick is None else q_y[q_pick])
        pred = ref_y[near].mean(dim=1)
        sst = ((q_y - ref_y.mean(dim=0)) ** 2).sum()  # skill over the batch's mean target
        if sst > 1e-9:
            out[i] = 1 - ((q_y - pred) ** 2).sum() / sst
    return out


def target_misaligned(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """On the declared batch, then on what ``train_step`` feeds (its model's first input and the target its loss
    saved: an augmentation inside the step's loader never shows in the declared batch)."""
    if ctx.batch_axis != 0:
        return None
    image, t = _image(ctx.batch.inputs), first_tensor(ctx.batch.targets)
    found = _pair(ctx, ev, image, t, "") if _predicted_densely(ctx, t) else None
    if found is not None or image is None:
        return found
    fed = step_fed(ctx)
    if fed is None:
        return None
    step_image = _image(fed[0])
    return next((c for t in fed[1] if (c := _pair(ctx, ev, step_image, t, " in the batches train_step feeds"))), None)


def _predicted_densely(ctx: Ctx, t: Any) -> bool:
    """The declared targets are what a dense output is compared with: the outputs hold a 4-D tensor on the targets'
    grid (a second view of the images, handed to an encoder, is no target map)."""
    if not torch.is_tensor(t) or t.dim() < 3:
        return False
    outs = _tensors(ctx.outputs, "outputs")
    return any(o.dim() == 4 and o.shape[0] == t.shape[0] and tuple(o.shape[-2:]) == tuple(t.shape[-2:]) for _, o in outs)


def _pair(ctx: Ctx, ev: dict[str, Any], image: tuple[str, torch.Tensor] | None, t: Any, where: str) -> Check | None:
    if image is None or not torch.is_tensor(t):
        return None
    name, x = image
    if t.dim() == 0 or t.shape[0] != x.shape[0] or x.shape[0] < 2:
        return None
    dense = _dense_target(ctx, t)
    grid = _same_grid(x, *dense) if dense is not None else None
    return _compare(ev, name, where, *grid) if grid is not None else None


def _wins(given: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
    g = given.nan_to_num(0.0)
    return (r2 >= R2_EXPLAINED) & (r2 - g >= R2_MARGIN) & (g <= R2_UNEXPLAINED)


def _best(feats: torch.Tensor, flat: Callable[[torch.Tensor], torch.Tensor], y: torch.Tensor, keep: torch.Tensor,
          given: torch.Tensor, others: dict[str, torch.Tensor], cache: dict) -> tuple[str, Any, torch.Tensor, torch.Tensor]:
    """The alignment that explains the most examples better than as given. Where some examples are misaligned, they
    also blur the references the others are predicted from: each alignment that wins somewhere is scored again with
    the winners' references put in that alignment (a second pass), and the pass that explains more examples counts."""
    best_name, best, better = "", None, torch.zeros(given.shape[0], dtype=torch.bool)
    for k, r2 in others.items():
        wins = _wins(given, r2)
        if not bool(wins.any()):
            continue
        f, m = wins[:, None, None, None], _OTHERS[k]
        ref = (flat(torch.where(f, m(y), y)), flat(torch.where(f, m(keep), keep)))
        given2, r2b = _scores(feats, flat(y), flat(keep), ref, cache), _scores(feats, flat(m(y)), flat(m(keep)), ref, cache)
        wins2 = _wins(given2, r2b)
        for g, r, w in ((given, r2, wins), (given2, r2b, wins2)):
            if int(w.sum()) > int(better.sum()):
                best_name, best, better, chosen = k, r, w, g
    return best_name, best, better, (chosen if best is not None else given)


def _compare(ev: dict[str, Any], name: str, where: str, x: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> Check | None:
    b, (h, w) = x.shape[0], y.shape[-2:]
    x = (x - x.mean(dim=(0, 2, 3), keepdim=True)) / x.std(dim=(0, 2, 3), keepdim=True).clamp(min=1e-6)
    feats = F.unfold(x.double(), 3, padding=1)  # [B, 9C, h*w]
    flat = lambda v: v.double().reshape(b, v.shape[1], h * w)
    cache: dict = {}
    with torch.no_grad():
        given = _scores(feats, flat(y), flat(keep), cache=cache)
        others = {k: _scores(feats, flat(f(y)), flat(f(keep)), cache=cache) for k, f in _OTHERS.items()
                  if k != "transposed" or h == w}
        best_name, best, better, given = _best(feats, flat, y, keep, given, others, cache)
    n = int(better.sum())
    ev["target_alignment"] = {"input": name + where, "grid": [h, w], "r2_as_given": [round(float(v), 3) for v in given],
                              **({best_name: [round(float(v), 3) for v in best]} if best is not None else {})}
    if n < max(2, math.ceil(0.2 * b)):
        return None
    i = int(torch.nonzero(better)[0])
    return failed("TASK", "task.target_misaligned",
                  f"{n} of {b} examples' targets{where} are explained by their input {name!r} far better {best_name} than as "
                  f"given (example {i}: R^2 {float(best[i]):.2f} vs {float(given[i]):.2f}, a fit of each target pixel "
                  "from the input around it): the targets are not aligned with the inputs", ev,
                  expected="each target at the position of the input it describes (R^2 as given >= any other alignment)",
                  observed=f"{n}/{b} examples better {best_name}",
                  hint="apply every spatial transform (flip, crop, rotation) to the image and its target together, and "
                       "read label maps and keypoints in the image's (H, W) order")


def realigned_probe(expected: torch.Tensor, observed: torch.Tensor, ignore: int, agree: float,
                    ev: dict[str, Any]) -> Check | None:
    """task_probe's labels (the user's own rule) against dense class targets ``[B, h, w]``: where the targets flipped or
    transposed agree with the rule (>= 90 %, and clearly more than as given), they sit at other positions than the
    inputs they describe: ``task.target_misaligned``. None otherwise."""
    if observed.dim() < 3 or expected.shape != observed.shape or min(observed.shape[-2:]) < MIN_SIDE:
        return None
    for name, realign in _OTHERS.items():
        if name == "transposed" and observed.shape[-1] != observed.shape[-2]:
            continue
        o = realign(observed)
        m = o != ignore
        a = float((expected[m] == o[m]).float().mean()) if bool(m.any()) else 0.0
        if a >= 0.9 and a >= agree + 0.1:
            ev.update(probe_agreement_realigned=a, realigned=name)
            return failed("TASK", "task.target_misaligned",
                          f"task_probe agrees with {agree:.1%} of the targets as given and with {a:.1%} of them {name}: "
                          "the targets sit at other positions than the inputs they describe", ev,
                          expected="targets on the input's grid (task_probe agrees as given)",
                          observed=f"task_probe agrees {agree:.1%} as given, {a:.1%} {name}",
                          hint=f"the targets are {name} relative to their inputs: apply the same transform to image and "
                               "target, or read the target's axes in the image's order ((H, W), not (W, H))")
    return None
