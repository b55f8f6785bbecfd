"""The STRUCTURE and NUMERIC INTERPRETATION probes of ``stage_trace`` (appendix section 7): did the stage keep the
sample's arrays as arrays of the same values in a legitimate arrangement, and do its image's numbers still mean
what they meant (scale, normalization, finiteness)?

Each probe compares the sample before a stage with the sample after it and returns
:class:`~firstdiv.instruments.stage_trace._probes.Outcome` objects.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import torch

from ._probes import Outcome, Seen, Track, layout

JUMP_FACTOR = 2.0          # a normalized image whose std changes by this factor (or mean by 1 std) was re-normalized


# ---- STRUCTURE --------------------------------------------------------------------------------------

def _zscore(t: torch.Tensor) -> torch.Tensor | None:
    x = t.double()
    std = float(x.std()) if x.numel() > 1 else 0.0
    return None if std == 0 or not bool(torch.isfinite(x).all()) else (x - x.mean()) / std


def rearrangement(before: torch.Tensor, after: torch.Tensor) -> tuple[bool | None, str]:
    """Is ``after`` an axis permutation (with flips) of ``before`` holding the same values? None: not applicable
    (shape unchanged, different sizes, or values changed by more than a global affine map and rounding)."""
    if before.shape == after.shape or before.numel() != after.numel() or before.is_complex() or after.is_complex():
        return None, ""
    b, a = before.squeeze(), after.squeeze()
    if sorted(b.shape) != sorted(a.shape) or b.dim() > 5:
        return None, ""
    zb, za = _zscore(b), _zscore(a)
    if zb is None or za is None:
        return None, ""
    coarse = max(_eps(before.dtype), _eps(after.dtype))
    tol = max(1e-4, 4 * coarse * float(zb.abs().max()))
    if not torch.allclose(zb.flatten().sort().values, za.flatten().sort().values, atol=tol, rtol=0):
        return None, ""
    for flips in (False, True):
        for perm in itertools.permutations(range(b.dim())):
            if tuple(b.shape[p] for p in perm) != tuple(a.shape):
                continue
            moved = zb.permute(perm)
            subsets = itertools.chain.from_iterable(itertools.combinations(range(b.dim()), k)
                                                    for k in range(1, b.dim() + 1)) if flips else [()]
            for dims in subsets:
                if torch.allclose(moved.flip(dims) if dims else moved, za, atol=tol, rtol=0):
                    return True, f"axis permutation {list(perm)}" + (f" with flips of axes {list(dims)}" if dims else "")
    return False, "no axis permutation (or flip) of the input places the values where they are"


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def structure(stage: str, before: Seen, after: Seen | None) -> list[Outcome]:
    if after is None:
        return [Outcome("structure", "returned", False, "stage returned None (an in-place transform that forgot to return?)",
                        {"returned": "None"}, expected="the next sample", observed="None")]
    out = []
    for key in [k for k in after.arrays if k in before.arrays]:
        prior, post = before.arrays[key], after.arrays[key]
        moved, how = rearrangement(prior, post)
        name = key or "sample"
        ev = {"key": name, "shape_before": list(prior.shape), "shape_after": list(post.shape),
              "layout_before": layout(prior), "layout_after": layout(post)}
        if moved is True:
            out.append(Outcome("structure", f"layout:{name}", True,
                               f"{name}: {ev['shape_before']} -> {ev['shape_after']} by {how}", ev))
        elif moved is False:
            out.append(Outcome("structure", f"layout:{name}", False,
                               f"{name}: {ev['shape_before']} -> {ev['shape_after']} keeps the values but {how}: "
                               "a reshape/view where a permute/transpose was meant", ev,
                               expected=f"{name} an axis permutation of {ev['shape_before']}",
                               observed=f"values moved: {ev['shape_after']} is a reshape, not a permutation"))
    return out


# ---- NUMERIC INTERPRETATION -------------------------------------------------------------------------

def numeric(stage: str, before: Seen, after: Seen, track: Track) -> list[Outcome]:
    if after.image is None or after.stats is None or "nonfinite" not in after.stats:
        return []
    key, t, now = after.image[0] or "sample", after.image[1], after.stats
    was = before.stats if before.stats is not None and "nonfinite" in before.stats else None
    ev = {"key": key, "before": was["interpretation"] if was else None, "after": now["interpretation"],
          "min": now.get("min"), "max": now.get("max")}
    if now["nonfinite"] and not (was and was["nonfinite"]):
        return [Outcome("numeric", "finite", False, f"{key}: {now['nonfinite']} non-finite values appeared",
                        {**ev, "nonfinite": now["nonfinite"]}, expected="finite values", observed=f"{now['nonfinite']} NaN/Inf")]
    became_float = was is not None and not before.image[1].is_floating_point() and t.is_floating_point()  # type: ignore[index]
    if became_float and re.search(r"float|tensor", stage, re.IGNORECASE) and now.get("max", 0) > 1 + 1e-6 \
            and now.get("min", 0) >= 0:  # negative values: the stage normalized too (a fused to_tensor + normalize)
        return _to_float(stage, key, now, ev, track)
    if was is not None and was["interpretation"] == "normalized ~N(0,1)" and t.is_floating_point() and "std" in now:
        ratio, shift = now["std"] / was["std"], abs(now["mean"] - was["mean"]) / was["std"]
        ev.update(mean_before=was["mean"], std_before=was["std"], mean_after=now["mean"], std_after=now["std"],
                  std_ratio=ratio, mean_shift_in_std=shift)
        if ratio > JUMP_FACTOR or ratio < 1 / JUMP_FACTOR or shift > 1.0:
            return _renormalized(stage, key, (was, now, ratio), before, after, ev, track)
    return [Outcome("numeric", "range", True, f"{key}: {ev['before'] or '(no image before)'} -> {now['interpretation']}", ev)]


def _to_float(stage: str, key: str, now: dict[str, Any], ev: dict[str, Any], track: Track) -> list[Outcome]:
    """An integer image turned float on the 0..255 scale by a stage named like float/tensor. Confirmed when the next
    stage declaring normalization statistics has them on the 0..1 scale; statistics on the 0..255 scale say the
    pipeline keeps that scale on purpose (mmdet/mmseg); no such stage leaves it unconfirmed."""
    later = [s for s in track.scales[track.at + 1:] if s is not None] if track.at >= 0 else []
    ev["later_normalization_mean_max"] = later[0] if later else None
    if later and later[0] > 1.5:
        return [Outcome("numeric", "range", True, f"{key}: integer 0..255 -> float 0..255 after {stage!r}, the scale the "
                        f"normalization after it declares (mean up to {later[0]:.4g})", ev)]
    reads = f"; the normalization after it declares mean up to {later[0]:.3g}, the 0..1 scale" if later else ""
    return [Outcome("numeric", "to_float", False,
                    f"{key}: integer image became float with max {now['max']:.4g} after {stage!r}: still on the 0..255 "
                    f"scale (the division by 255 is missing){reads}", ev,
                    expected="float image in [0, 1] after a to_float/to_tensor stage",
                    observed=f"float in [{now['min']:.4g}, {now['max']:.4g}]",
                    unconfirmed="" if later else "no later stage declares the mean/std it normalizes with, so nothing "
                    "shows the pipeline reads it as 0..1 (a pipeline may keep 0..255 floats on purpose); declare it with "
                    "contracts={stage: {key: {'range': (0, 1)}}}")]


def _channel_affine(x: torch.Tensor | None, y: torch.Tensor | None) -> bool | None:
    """Whether ``y`` is a per-channel affine map ``a * x + b`` of ``x`` (both (C, H, W)); None when not comparable."""
    if x is None or y is None or x.shape != y.shape or x.dim() != 3 or not y.is_floating_point():
        return None
    xs, ys = x.reshape(x.shape[0], -1).double(), y.reshape(y.shape[0], -1).double()
    xc, yc = xs - xs.mean(1, keepdim=True), ys - ys.mean(1, keepdim=True)
    var = xc.pow(2).mean(1)
    if bool((var == 0).any()):
        return None
    a = (xc * yc).mean(1) / var
    resid = (yc - a[:, None] * xc).abs().amax(1)
    return bool((resid <= 1e-3 * ys.std(1).clamp_min(1e-6)).all())


def _renormalized(stage: str, key: str, stats: tuple[dict[str, Any], dict[str, Any], float], before: Seen,
                  after: Seen, ev: dict[str, Any], track: Track) -> list[Outcome]:
    """An already normalized image whose statistics jump. Confirmed as a second normalization when the output is a
    per-channel affine map of the input; a stage named in augmentations= is exempt; any other change (added noise,
    mixing, a crop) leaves it unconfirmed."""
    was, now, ratio = stats
    if stage in track.augmentations:
        return [Outcome("numeric", "range", True, f"{key}: statistics moved at {stage!r}, a declared augmentation", ev)]
    ev["per_channel_affine"] = affine = _channel_affine(before.view, after.view)
    return [Outcome("numeric", "renormalized", False,
                    f"{key} was already normalized (mean {was['mean']:.3f}, std {was['std']:.3f}); {stage!r} moved "
                    f"it to mean {now['mean']:.3f}, std {now['std']:.3f} (std x{ratio:.2f})"
                    + (" as a per-channel affine map of its input: normalized twice" if affine else ": normalized twice?"),
                    ev, expected=f"a normalized image stays ~N(0,1) (std within x{JUMP_FACTOR:g}, mean within 1 std)",
                    observed=f"mean {now['mean']:.3f}, std {now['std']:.3f}",
                    unconfirmed="" if affine else "its output is not a per-channel affine map of its input (added "
                    "noise, mixing or a crop change the statistics too), so a second normalization is not shown; if it "
                    "is an augmentation, name it in augmentations=")]
