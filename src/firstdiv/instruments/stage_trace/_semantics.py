"""The SEMANTICS, RELATIONSHIPS and PROVENANCE probes of ``stage_trace`` (appendix section 7): does the known
colour still read as itself (channel order), did the image and its mask undergo the same spatial transform, and
were fitted statistics fitted on the training split?

The relationships probe also moves the known-colour box along with the image (``Track.box``), so it runs before
the semantics probe. Each probe returns :class:`~firstdiv.instruments.stage_trace._probes.Outcome` objects.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import torch

from ._probes import MASK_KEYS, POOL, Outcome, Seen, Track

COLOUR_TOL = 64.0          # max per-channel distance (0..255 scale) of the known colour
MATCH_CORR = 0.999         # per-channel correlation for "this candidate transform explains the change"
RESIZE_CORR = 0.98         # per-channel correlation of an output with the bilinearly resized input: a resize
LEAK = {"val", "valid", "validation", "dev", "test", "testing", "eval", "evaluation", "holdout", "trainval", "all", "full"}


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
    """Candidate spatial transforms T with T(before) == after up to a per-channel affine map of the values and
    a reordering of the channels (a BGR->RGB swap keeps the geometry; compared on pooled views; ``hw_*`` are the full sizes). None when nothing can be said (channel count
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
        corrs = _best_corrs(moved, after)
        informative = informative or bool(corrs)
        if corrs and min(corrs) > MATCH_CORR:
            found.append(name)
    return found if informative else None


def _unit_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each channel centred and scaled to unit norm (rows), and which channels vary (finite, non-zero norm)."""
    rows = x.reshape(x.shape[0], -1)
    rows = rows - rows.mean(dim=1, keepdim=True)
    norm = rows.norm(dim=1)
    ok = torch.isfinite(norm) & (norm > 0)
    return rows / torch.where(ok, norm, torch.ones_like(norm)).unsqueeze(1), ok


def _best_corrs(moved: torch.Tensor, after: torch.Tensor) -> list[float]:
    """For each varying channel of ``after``, its best correlation with a varying channel of ``moved``."""
    a, ok_a = _unit_rows(moved)
    b, ok_b = _unit_rows(after)
    if not bool(ok_a.any()):
        return []
    corr = (b @ a.T)[:, ok_a]
    return [float(v) for v in corr.max(dim=1).values[ok_b]]


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
    if img_moves is None and hw_b != hw_a and track.box is not None and resized(before.view, after.view):
        track.box = scale_box(track.box, hw_b, hw_a)
        track.box_note = "" if track.box else f"the known colour box is too small after the resize at {stage!r}"
    else:
        _move_track(track, img_moves, hw_b, hw_a, stage)
    if before.mask is None or after.mask is None or before.mask_hw is None or after.mask_hw is None:
        return []
    name = after.mask[0]
    ev: dict[str, Any] = {"image_hw_before": list(hw_b), "image_hw_after": list(hw_a),
                          "mask_hw_before": list(before.mask_hw), "mask_hw_after": list(after.mask_hw)}
    why = _unaligned_why(name, before.mask[1])
    if before.mask_hw == hw_b and after.mask_hw != hw_a:
        return [Outcome("relationships", "mask_alignment", False,
                        f"image and {name} had the same spatial size {list(hw_b)}; after the stage image "
                        f"{list(hw_a)} vs {name} {list(after.mask_hw)}", ev,
                        expected="image and mask with the same spatial size",
                        observed=f"image {list(hw_a)}, {name} {list(after.mask_hw)}", unconfirmed=why)]
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
                    observed=f"{name}: {', '.join(mask_moves)}", unconfirmed=why)]


LABEL_MAP_VALUES = 256  # a spatial target with at most this many distinct integral values is a label map


def _unaligned_why(name: str, target: torch.Tensor) -> str:
    """The premise that ``name`` must stay pixel-aligned with the image, confirmed when it is held under a mask's key
    (mask/masks/segmentation/seg) or is a label map (integral values, few of them); '' then, else why not: a float
    target under label/target/y may be an image of its own (a super-resolution target kept at full size)."""
    if name.rsplit(".", 1)[-1] in MASK_KEYS:
        return ""
    t = target.detach()
    integral = not t.is_floating_point() or bool((t == t.round()).all())
    if integral and t.numel() and torch.unique(t).numel() <= LABEL_MAP_VALUES:
        return ""
    return (f"{name} is a float map, not a label map, and its key does not name a mask: whether it must stay "
            "pixel-aligned with the image is inferred from the key, not declared (a super-resolution target kept at "
            "full size looks the same); declare the relationship with a probe ('relationships', fn)")


def _name(moves: list[str]) -> str:
    return "unchanged in place" if moves == ["identity"] else "/".join(moves)


def resized(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Is ``after`` (C, H', W') the image ``before`` (C, H, W) resized (each channel correlating > RESIZE_CORR with
    the interpolated input, compared on pooled views)?"""
    if before.shape[0] != after.shape[0] or before.is_complex() or not bool(torch.isfinite(after.double()).all()):
        return False
    size = tuple(after.shape[1:])
    guess = torch.nn.functional.interpolate(before.double()[None], size=size, mode="bilinear", align_corners=False)[0]
    small = tuple(min(POOL, n) for n in size)
    pool = torch.nn.functional.adaptive_avg_pool2d
    corrs = _best_corrs(pool(guess[None], small)[0], pool(after.double()[None], small)[0])
    return bool(corrs) and min(corrs) > RESIZE_CORR


def scale_box(box: list[int], hw_b: tuple[int, ...], hw_a: tuple[int, ...]) -> list[int] | None:
    """The box's inner part after a resize from ``hw_b`` to ``hw_a`` (one pixel in from each scaled edge, where
    interpolation mixes in the neighbours); None when nothing is left."""
    sy, sx = hw_a[0] / hw_b[0], hw_a[1] / hw_b[1]
    y0, y1, x0, x1 = math.ceil(box[0] * sy) + 1, math.floor(box[1] * sy) - 1, math.ceil(box[2] * sx) + 1, math.floor(box[3] * sx) - 1
    return [y0, y1, x0, x1] if y0 < y1 and x0 < x1 else None


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
