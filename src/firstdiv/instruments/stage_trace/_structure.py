"""The STRUCTURE and NUMERIC INTERPRETATION probes of ``stage_trace`` (appendix section 7): did the stage keep the
sample's arrays as arrays of the same values in a legitimate arrangement, and do its image's numbers still mean
what they meant (scale, normalization, finiteness)?

Each probe compares the sample before a stage with the sample after it and returns
:class:`~firstdiv.instruments.stage_trace._probes.Outcome` objects.
"""

from __future__ import annotations

import itertools
import re

import torch

from ._probes import Outcome, Seen, layout

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

def numeric(stage: str, before: Seen, after: Seen) -> list[Outcome]:
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
        return [Outcome("numeric", "to_float", False,
                        f"{key}: integer image became float with max {now['max']:.4g} after {stage!r}: still on the 0..255 "
                        "scale (the division by 255 is missing)", ev,
                        expected="float image in [0, 1] after a to_float/to_tensor stage",
                        observed=f"float in [{now['min']:.4g}, {now['max']:.4g}]")]
    if was is not None and was["interpretation"] == "normalized ~N(0,1)" and t.is_floating_point() and "std" in now:
        ratio, shift = now["std"] / was["std"], abs(now["mean"] - was["mean"]) / was["std"]
        ev.update(mean_before=was["mean"], std_before=was["std"], mean_after=now["mean"], std_after=now["std"],
                  std_ratio=ratio, mean_shift_in_std=shift)
        if ratio > JUMP_FACTOR or ratio < 1 / JUMP_FACTOR or shift > 1.0:
            return [Outcome("numeric", "renormalized", False,
                            f"{key} was already normalized (mean {was['mean']:.3f}, std {was['std']:.3f}); {stage!r} moved "
                            f"it to mean {now['mean']:.3f}, std {now['std']:.3f} (std x{ratio:.2f}): normalized twice?", ev,
                            expected=f"a normalized image stays ~N(0,1) (std within x{JUMP_FACTOR:g}, mean within 1 std)",
                            observed=f"mean {now['mean']:.3f}, std {now['std']:.3f}")]
    return [Outcome("numeric", "range", True, f"{key}: {ev['before'] or '(no image before)'} -> {now['interpretation']}", ev)]
