"""The built-in probes of :func:`~firstdiv.instruments.stage_trace.stage_trace`: what one sample looks
like after a stage (image, mask, layout, interpretation of its numbers) and which of the five input
contract categories (appendix section 7) the stage broke.

Every probe compares the sample *before* a stage with the sample *after* it, so a failure is charged
to the stage that caused it. A probe returns :class:`Outcome` objects; ``ok=None`` means it did not
apply (nothing was verified).
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

CATEGORIES = ("structure", "numeric", "semantics", "relationships", "provenance")
IMAGE_KEYS = ("image", "img", "pixels", "pixel_values", "input", "x")
MASK_KEYS = ("mask", "masks", "segmentation", "seg")
SPATIAL_LABEL_KEYS = ("label", "target", "y")  # a mask when it is an array with >= 2 dims
COLOUR_TOL = 64.0          # max per-channel distance (0..255 scale) of the known colour
MATCH_CORR = 0.999         # per-channel correlation for "this candidate transform explains the change"
NORMALIZED = {"abs_mean": 0.5, "std": (0.5, 2.0)}
POOL = 64                  # transforms are matched on views pooled to at most POOL x POOL
JUMP_FACTOR = 2.0          # a normalized image whose std changes by this factor (or mean by 1 std) was re-normalized
LEAK = {"val", "valid", "validation", "dev", "test", "testing", "eval", "evaluation", "holdout", "trainval", "all", "full"}


@dataclass
class Outcome:
    category: str
    probe: str
    ok: bool | None            # None: did not apply
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    expected: Any = ""
    observed: Any = ""


@dataclass
class Track:
    """What the probes carry from stage to stage: the contract stated by the input sample's meta."""

    channel_order: str = "RGB"
    colour: list[float] | None = None        # known colour in the expected channel order (0..255)
    box: list[int] | None = None             # its box [y0, y1, x0, x1] in the current image's coordinates
    box_note: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)
    moves: list[str] | None = None           # the image's spatial transform found at the current stage


# ---- reading a sample -----------------------------------------------------------------------------

def clone(obj: Any) -> Any:
    """A copy the stage may mutate freely (tensors detached and cloned, arrays copied, containers rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        out = {k: clone(v) for k, v in obj.items()}
        if type(obj) is not dict:
            try:
                return type(obj)(out)
            except Exception:  # noqa: BLE001 - an exotic mapping: a plain dict holds the same items
                return out
        return out
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(clone(v) for v in obj)
    try:
        return copy.deepcopy(obj)
    except Exception:  # noqa: BLE001 - uncopyable objects are shared read-only
        return obj


def as_tensor(value: Any) -> torch.Tensor | None:
    """A CPU tensor of an array-valued entry (probes compare samples across a device move)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray) and (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
        return torch.from_numpy(np.ascontiguousarray(value))
    return None


def arrays(sample: Any) -> dict[str, torch.Tensor]:
    """Array-valued entries of a sample by key ('' for a bare tensor/array sample)."""
    if isinstance(sample, dict):
        return {str(k): t for k, v in sample.items() if (t := as_tensor(v)) is not None}
    t = as_tensor(sample)
    return {} if t is None else {"": t}


def layout(t: torch.Tensor) -> str | None:
    """HW, CHW/HWC, NCHW/NHWC from where the 1/3/4-sized channel axis sits; None when ambiguous."""
    if t.dim() == 2:
        return "HW"
    if t.dim() not in (3, 4):
        return None
    lead, last = t.shape[t.dim() - 3] in (1, 3, 4), t.shape[-1] in (1, 3, 4)
    if lead == last:
        return None
    return ("C" if lead else "") + "HW" + ("" if lead else "C") if t.dim() == 3 else ("NCHW" if lead else "NHWC")


def stats(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, layout, finite min/max/mean/std and what the numbers mean: integer 0..255, float 0..1,
    normalized ~N(0,1) (min < 0, |mean| < 0.5, std in (0.5, 2)), float 0..255, non-finite or other."""
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "layout": layout(t)}
    if t.numel() == 0 or t.is_complex():
        return {**out, "interpretation": "empty" if t.numel() == 0 else "complex"}
    x = t.double()
    finite = torch.isfinite(x)
    nonfinite = int(finite.numel() - finite.sum())
    fin = x[finite] if nonfinite else x.flatten()
    if fin.numel():
        out.update(min=float(fin.min()), max=float(fin.max()), mean=float(fin.mean()), std=float(fin.std()) if fin.numel() > 1 else 0.0)
    out["nonfinite"] = nonfinite
    out["interpretation"] = _interpretation(t.is_floating_point(), out)
    return out


def _interpretation(floating: bool, s: dict[str, Any]) -> str:
    if s["nonfinite"]:
        return "non-finite"
    lo, hi = s["min"], s["max"]
    if not floating:
        return "integer 0..255" if 0 <= lo and hi <= 255 else f"integer {lo:.0f}..{hi:.0f}"
    if lo >= -1e-6 and hi <= 1 + 1e-6:
        return "float 0..1"
    if lo < 0 and abs(s["mean"]) < NORMALIZED["abs_mean"] and NORMALIZED["std"][0] < s["std"] < NORMALIZED["std"][1]:
        return "normalized ~N(0,1)"
    return "float 0..255" if lo >= -1e-6 and hi <= 255.5 else "float other"


def spatial(t: torch.Tensor, lay: str | None) -> torch.Tensor | None:
    """(C, H, W) view of an image or mask, or None when its layout is unknown or batched."""
    if lay is None or t.is_complex():
        return None
    if lay.startswith("N"):
        if t.shape[0] != 1:
            return None
        t, lay = t[0], lay[1:]
    if lay == "HW":
        return t.unsqueeze(0)
    return t if lay == "CHW" else t.permute(2, 0, 1)


def _pooled(s: torch.Tensor | None) -> torch.Tensor | None:
    """float64, at most POOL x POOL per channel by adaptive average pooling, which commutes with flips and
    rotations (and with per-channel affine maps), so transforms are identified on the small view."""
    if s is None:
        return None
    x = s.double()
    if max(x.shape[1:]) > POOL:
        x = torch.nn.functional.adaptive_avg_pool2d(x.unsqueeze(0), (min(POOL, x.shape[1]), min(POOL, x.shape[2])))[0]
    return x


@dataclass
class Seen:
    """One sample as the probes read it, computed once: its arrays, image, mask and the image's statistics."""

    arrays: dict[str, torch.Tensor]
    image: tuple[str, torch.Tensor] | None
    mask: tuple[str, torch.Tensor] | None
    stats: dict[str, Any] | None
    view: torch.Tensor | None        # the image as (C, H, W), full size
    small: torch.Tensor | None       # ... pooled for transform matching
    mask_small: torch.Tensor | None  # the mask as (C, H, W), pooled the same way
    mask_hw: tuple[int, ...] | None  # the mask's full spatial size


def look(sample: Any) -> Seen:
    """The sample as the probes read it; one the probes cannot read (an exotic tensor type) shows no arrays."""
    try:
        return _look(sample)
    except Exception:  # noqa: BLE001 - reading must never crash the trace
        return Seen({}, None, None, None, None, None, None, None)


def _look(sample: Any) -> Seen:
    found = arrays(sample)
    image = ("", found[""]) if "" in found else next(((k, found[k]) for k in IMAGE_KEYS if k in found and found[k].dim() >= 2), None)
    key = next((k for k in MASK_KEYS if k in found), None) or next(
        (k for k in SPATIAL_LABEL_KEYS if k in found and found[k].dim() >= 2), None)
    mask = None if key is None else (key, found[key])
    view = spatial(image[1], layout(image[1])) if image is not None else None
    mask_view = None
    if mask is not None and view is not None:
        mask_view = spatial(mask[1], _mask_layout(mask[1], tuple(view.shape[1:])))
    return Seen(found, image, mask, stats(image[1]) if image is not None else None, view, _pooled(view), _pooled(mask_view),
                tuple(mask_view.shape[1:]) if mask_view is not None else None)


def _mask_layout(mask: torch.Tensor, image_hw: tuple[int, ...]) -> str | None:
    if mask.dim() == 2:
        return "HW"
    if mask.dim() == 3:
        if tuple(mask.shape[1:]) == image_hw:
            return "CHW"
        if tuple(mask.shape[:2]) == image_hw:
            return "HWC"
    return layout(mask)


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
    if became_float and re.search(r"float|tensor", stage, re.IGNORECASE) and now.get("max", 0) > 1 + 1e-6:
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


# ---- SEMANTICS: the known colour --------------------------------------------------------------------

def _display_scale(t: torch.Tensor, s: dict[str, Any]) -> float | None:
    """Multiplier to the 0..255 scale when the image is in a display range, else None."""
    if s.get("nonfinite", 1) or "min" not in s:
        return None
    if not t.is_floating_point():
        return 1.0 if s["min"] >= 0 and s["max"] <= 255 else None
    return 255.0 if s["min"] >= -1e-3 and s["max"] <= 1 + 1e-3 else None


def semantics(stage: str, after: Seen, track: Track) -> list[Outcome]:
    if track.colour is None or after.image is None or after.stats is None:
        return []
    key, t, view = after.image[0] or "sample", after.image[1], after.view
    if track.box is None:
        return [Outcome("semantics", "known_colour", None, f"known colour not checked: {track.box_note}")]
    scale = _display_scale(t, after.stats)
    if view is None or view.shape[0] != 3 or scale is None:
        return []
    y0, y1, x0, x1 = track.box
    if not (y1 <= view.shape[1] and x1 <= view.shape[2]):
        return [Outcome("semantics", "known_colour", None, f"box {track.box} outside the image {list(view.shape[1:])}")]
    seen = [float(v) * scale for v in view[:, y0:y1, x0:x1].double().mean(dim=(1, 2))]
    want = track.colour
    dist = max(abs(a - b) for a, b in zip(seen, want))
    ev = {"key": key, "box": track.box, "observed": seen, "expected": want, "channel_order": track.channel_order, "distance": dist}
    if dist <= COLOUR_TOL:
        return [Outcome("semantics", "known_colour", True, f"{key}: known colour box reads {_rgb(seen)} "
                        f"(expected {_rgb(want)} in {track.channel_order})", ev)]
    for order in _orders(track.channel_order):
        perm = [track.channel_order.index(c) for c in order]
        if max(abs(seen[i] - want[perm[i]]) for i in range(3)) <= COLOUR_TOL:
            ev["reads_as"] = order
            return [Outcome("semantics", "channel_order", False,
                            f"{key}: known colour box reads {_rgb(seen)}, which is {_rgb(want)} with channels in {order} "
                            f"order: the image is {order}, the contract says {track.channel_order}", ev,
                            expected=f"{track.channel_order}: box colour {_rgb(want)}", observed=f"{order}: box colour {_rgb(seen)}")]
    return [Outcome("semantics", "known_colour", False, f"{key}: known colour box reads {_rgb(seen)}, expected {_rgb(want)} "
                    f"(distance {dist:.0f} > {COLOUR_TOL:.0f} on the 0..255 scale)", ev,
                    expected=f"box colour {_rgb(want)}", observed=f"box colour {_rgb(seen)}")]


def _orders(order: str) -> list[str]:
    rev = order[::-1]
    return [rev] + ["".join(p) for p in itertools.permutations(order) if "".join(p) not in (order, rev)]


def _rgb(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.0f}" for v in values) + ")"


# ---- RELATIONSHIPS: image and mask move together -----------------------------------------------------

TRANSFORMS = {
    "identity": lambda x: x,
    "flip-h": lambda x: x.flip(-1),
    "flip-v": lambda x: x.flip(-2),
    "rot90": lambda x: x.rot90(1, (-2, -1)),
    "rot180": lambda x: x.rot90(2, (-2, -1)),
    "rot270": lambda x: x.rot90(3, (-2, -1)),
    "transpose": lambda x: x.transpose(-2, -1),
}
_SWAPS = {"rot90", "rot270", "transpose"}  # transforms that exchange height and width


def matching(before: torch.Tensor, after: torch.Tensor, hw_before: tuple[int, ...], hw_after: tuple[int, ...]) -> list[str] | None:
    """Candidate spatial transforms T with T(before) == after up to a per-channel affine map of the values
    (compared on pooled views; ``hw_*`` are the full sizes). None when nothing can be said (channel count
    changed, or no channel varies)."""
    if before.shape[0] != after.shape[0]:
        return None
    found, informative = [], False
    for name, fn in TRANSFORMS.items():
        if (hw_before[::-1] if name in _SWAPS else hw_before) != hw_after:
            continue
        moved = fn(before)
        if moved.shape != after.shape:
            continue
        corrs = [c for m, a in zip(moved, after) if (c := _corr(m, a)) is not None]
        informative = informative or bool(corrs)
        if corrs and min(corrs) > MATCH_CORR:
            found.append(name)
    return found if informative else None


def _corr(a: torch.Tensor, b: torch.Tensor) -> float | None:
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    na, nb = float(a.norm()), float(b.norm())
    if na == 0 or nb == 0 or not (np.isfinite(na) and np.isfinite(nb)):
        return None
    return float(a @ b) / (na * nb)


def move_box(box: list[int], name: str, h: int, w: int) -> list[int]:
    """Where box [y0, y1, x0, x1] (half-open, in an H x W image) lands under transform ``name``."""
    y0, y1, x0, x1 = box
    return {"identity": [y0, y1, x0, x1], "flip-h": [y0, y1, w - x1, w - x0], "flip-v": [h - y1, h - y0, x0, x1],
            "rot90": [w - x1, w - x0, y0, y1], "rot180": [h - y1, h - y0, w - x1, w - x0],
            "rot270": [x0, x1, h - y1, h - y0], "transpose": [x0, x1, y0, y1]}[name]


def relationships(stage: str, before: Seen, after: Seen, track: Track) -> list[Outcome]:
    """Find the image's spatial transform among TRANSFORMS, and the mask's; they must agree. Also moves the
    known-colour box along with the image."""
    if before.view is None or after.view is None or before.small is None or after.small is None:
        track.moves = None
        return []
    hw_b, hw_a = tuple(before.view.shape[1:]), tuple(after.view.shape[1:])
    img_moves = track.moves = matching(before.small, after.small, hw_b, hw_a)
    _move_track(track, img_moves, hw_b, hw_a, stage)
    if before.mask is None or after.mask is None or before.mask_hw is None or after.mask_hw is None:
        return []
    name = after.mask[0]
    ev: dict[str, Any] = {"image_hw_before": list(hw_b), "image_hw_after": list(hw_a),
                          "mask_hw_before": list(before.mask_hw), "mask_hw_after": list(after.mask_hw)}
    if before.mask_hw == hw_b and after.mask_hw != hw_a:
        return [Outcome("relationships", "mask_alignment", False,
                        f"image and {name} had the same spatial size {list(hw_b)}; after the stage image "
                        f"{list(hw_a)} vs {name} {list(after.mask_hw)}", ev,
                        expected="image and mask with the same spatial size",
                        observed=f"image {list(hw_a)}, {name} {list(after.mask_hw)}")]
    mask_moves = matching(before.mask_small, after.mask_small, before.mask_hw, after.mask_hw)  # type: ignore[arg-type]
    ev.update(image_transform=img_moves, mask_transform=mask_moves)
    if not img_moves or not mask_moves:
        return [Outcome("relationships", "mask_alignment", None, f"{'image' if not img_moves else name} transform not identified", ev)]
    common = [m for m in img_moves if m in mask_moves]
    if common:
        return [Outcome("relationships", "mask_alignment", True, f"image and {name} both {_name(common)}", ev)]
    return [Outcome("relationships", "mask_alignment", False,
                    f"image {_name(img_moves)} but {name} {_name(mask_moves)}: the augmentation moved one without the other",
                    ev, expected=f"{name} transformed like the image ({', '.join(img_moves)})",
                    observed=f"{name}: {', '.join(mask_moves)}")]


def _name(moves: list[str]) -> str:
    return "unchanged in place" if moves == ["identity"] else "/".join(moves)


def _move_track(track: Track, moves: list[str] | None, hw_b: tuple[int, ...], hw_a: tuple[int, ...], stage: str) -> None:
    if track.box is None or (moves is None and hw_b == hw_a):
        return  # no box, or channels changed (e.g. to grayscale) but not the geometry
    boxes = {tuple(move_box(track.box, m, *hw_b)) for m in moves or []}
    if len(boxes) == 1:
        track.box = list(boxes.pop())
    else:
        track.box, track.box_note = None, f"stage {stage!r} moved the image in a way the probe cannot follow"


# ---- PROVENANCE: where fitted statistics came from ------------------------------------------------------

def declared(stage: str, fn: Any, track: Track) -> list[tuple[str, str]]:
    """(source, split) records for a stage: ``fitted_on``/``provenance`` attributes of the callable (or of a
    bound method's object, or a functools.partial's function) and ``meta["provenance"][stage]``."""
    out = []
    for obj, label in ((fn, "stage"), (getattr(fn, "__self__", None), "stage object"), (getattr(fn, "func", None), "partial")):
        for attr in ("fitted_on", "provenance"):
            value = getattr(obj, attr, None) if obj is not None else None
            if value is not None and not callable(value):
                out.append((f"{label}.{attr}", _split(value)))
    if stage in track.provenance:
        out.append((f"meta['provenance'][{stage!r}]", _split(track.provenance[stage])))
    return out


def _split(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("fitted_on", value.get("split", value))
    return str(value)


def provenance(stage: str, fn: Any, track: Track) -> list[Outcome]:
    out = []
    for source, split in declared(stage, fn, track):
        tokens = set(re.split(r"[^a-z0-9]+", split.lower())) - {""}
        leak = sorted(tokens & LEAK)
        ev = {"source": source, "fitted_on": split}
        if leak:
            out.append(Outcome("provenance", "fitted_on", False,
                               f"{source} says the statistics were fitted on {split!r}: data the model is evaluated on", ev,
                               expected="statistics fitted on the training split", observed=f"fitted on {split!r}"))
        else:
            out.append(Outcome("provenance", "fitted_on", True, f"{source}: fitted on {split!r}", ev))
    return out
