"""What one sample looks like to the built-in probes of :func:`~firstdiv.instruments.stage_trace.stage_trace`:
its arrays, image, mask, layout and the interpretation of its numbers, read once per stage (:func:`look`), and
what the probes exchange (:class:`Outcome`, :class:`Track`).

The probes themselves, one module per group of the five input contract categories (appendix section 7):
``_structure`` (structure, numeric interpretation) and ``_semantics`` (semantics, relationships,
provenance). Every probe compares the sample *before* a stage with the sample *after* it, so a failure is charged
to the stage that caused it. A probe returns :class:`Outcome` objects; ``ok=None`` means it did not apply
(nothing was verified).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

CATEGORIES = ("structure", "numeric", "semantics", "relationships", "provenance")
IMAGE_KEYS = ("image", "img", "pixels", "pixel_values", "input", "x")
MASK_KEYS = ("mask", "masks", "segmentation", "seg")
SPATIAL_LABEL_KEYS = ("label", "target", "y")  # a mask when it is an array with >= 2 dims
NORMALIZED = {"abs_mean": 0.5, "std": (0.5, 2.0)}
POOL = 64                  # transforms are matched on views pooled to at most POOL x POOL


@dataclass
class Outcome:
    category: str
    probe: str
    ok: bool | None            # None: did not apply
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    expected: Any = ""
    observed: Any = ""
    subkind: str = ""          # appended to the finding's kind (stage.<category>.<subkind>) when it fails first
    unconfirmed: str = ""      # ok False, but the premise is not confirmed (why): a WARN of the kind, never a FAIL


@dataclass
class Track:
    """What the probes carry from stage to stage: the contract stated by the input sample's meta."""

    channel_order: str = "RGB"
    colour: list[float] | None = None        # known colour in the expected channel order (0..255)
    box: list[int] | None = None             # its box [y0, y1, x0, x1] in the current image's coordinates
    box_note: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)
    moves: list[str] | None = None           # the image's spatial transform found at the current stage
    scales: list[float | None] = field(default_factory=list)  # per stage: max |mean| it declares normalizing with
    at: int = -1                             # the index of the stage being probed
    augmentations: set[str] = field(default_factory=set)


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
    if isinstance(obj, (list, tuple)):
        items = [clone(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    try:
        return copy.deepcopy(obj)
    except Exception:  # noqa: BLE001 - uncopyable objects are shared read-only
        return obj


def as_tensor(value: Any) -> torch.Tensor | None:
    """A CPU tensor of an array-valued entry (probes compare samples across a device move); None for what the
    probes cannot read (see :func:`unreadable`)."""
    if isinstance(value, torch.Tensor):
        return None if unreadable(value) else value.detach().cpu()
    if not isinstance(value, np.ndarray) and hasattr(value, "__array_interface__"):  # a PIL image
        try:
            value = np.asarray(value)
        except Exception:  # noqa: BLE001 - not an array after all
            return None
    if isinstance(value, np.ndarray) and (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
        value = np.ascontiguousarray(value)
        return torch.from_numpy(value if value.flags.writeable else value.copy())  # a read-only buffer is copied
    return None


def unreadable(value: Any) -> str | None:
    """Why a tensor leaf cannot be read by the probes (sparse, quantized, nested, meta), else None."""
    if not isinstance(value, torch.Tensor):
        return None
    if value.layout != torch.strided:
        return f"{str(value.layout).replace('torch.', '')} tensor (densify it with .to_dense() or give a probe)"
    if value.is_quantized or value.is_nested or value.is_meta:
        return f"{'quantized' if value.is_quantized else 'nested' if value.is_nested else 'meta'} tensor (give a probe)"
    return None


def _atom(value: Any) -> bool:
    return isinstance(value, (str, bytes, int, float, bool, type(None), np.generic))


def leaves(sample: Any, fields: tuple[str, ...] = (), prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Every leaf of a sample by dotted key: dict keys, tuple/list elements by index (the top-level tuple's by
    ``fields`` when given, a namedtuple's by its field names); '' for a bare leaf. A list of strings or numbers
    (tokens) is one leaf."""
    if isinstance(sample, dict) and depth < 8:
        items = [(str(k), v) for k, v in sample.items()]
    elif isinstance(sample, (list, tuple)) and sample and not all(_atom(v) for v in sample) and depth < 8:
        names = getattr(sample, "_fields", None) or (fields if not prefix and len(fields) == len(sample) else None)
        items = list(zip(names or [str(i) for i in range(len(sample))], sample))
    else:
        return {prefix: sample}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(leaves(v, fields, f"{prefix}.{k}" if prefix else k, depth + 1))
    return out


def arrays(sample: Any, fields: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Array-valued leaves of a sample by key ('' for a bare tensor/array sample)."""
    return {k: t for k, v in leaves(sample, fields).items() if (t := as_tensor(v)) is not None}


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


def dtype_name(dtype: Any) -> str:
    """'float32' for ``torch.float32``."""
    return str(dtype).replace("torch.", "")


def stats(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, layout, finite min/max/mean/std and what the numbers mean: integer 0..255, float 0..1,
    normalized ~N(0,1) (min < 0, |mean| < 0.5, std in (0.5, 2)), float 0..255, non-finite or other."""
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": dtype_name(t.dtype), "layout": layout(t)}
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
    unread: dict[str, str] = field(default_factory=dict)  # leaves the probes cannot read, with the reason


def look(sample: Any, fields: tuple[str, ...] = ()) -> Seen:
    """The sample as the probes read it; one the probes cannot read (an exotic tensor type) shows no arrays."""
    try:
        return _look(sample, fields)
    except Exception as exc:  # noqa: BLE001 - reading must never crash the trace
        return Seen({}, None, None, None, None, None, None, None, {"sample": f"not readable: {type(exc).__name__}: {exc}"})


def _image(found: dict[str, torch.Tensor], tuple_sample: bool) -> tuple[str, torch.Tensor] | None:
    """The bare tensor, else an image key (also as the last part of a nested key), else a tuple's first element."""
    if "" in found:
        return "", found[""]
    for name in IMAGE_KEYS:  # top-level keys first, in IMAGE_KEYS order, then nested ones
        for k, t in found.items():
            if k == name and t.dim() >= 2:
                return k, t
    for k, t in found.items():
        if k.rsplit(".", 1)[-1] in IMAGE_KEYS and t.dim() >= 2:
            return k, t
    first = next(iter(found), None)
    return (first, found[first]) if tuple_sample and first is not None and found[first].dim() >= 2 else None


def _look(sample: Any, fields: tuple[str, ...]) -> Seen:
    every = leaves(sample, fields)
    unread = {k or "sample": why for k, v in every.items() if (why := unreadable(v))}
    found = {k: t for k, v in every.items() if (t := as_tensor(v)) is not None}
    image = _image(found, isinstance(sample, (list, tuple)))
    key = next((k for k in MASK_KEYS if k in found), None) or next(
        (k for k in SPATIAL_LABEL_KEYS if k in found and found[k].dim() >= 2), None)
    mask = None if key is None else (key, found[key])
    view = spatial(image[1], layout(image[1])) if image is not None else None
    mask_view = None
    if mask is not None and view is not None:
        mask_view = spatial(mask[1], _mask_layout(mask[1], tuple(view.shape[1:])))
    return Seen(found, image, mask, stats(image[1]) if image is not None else None, view, _pooled(view), _pooled(mask_view),
                tuple(mask_view.shape[1:]) if mask_view is not None else None, unread)


def _mask_layout(mask: torch.Tensor, image_hw: tuple[int, ...]) -> str | None:
    if mask.dim() == 2:
        return "HW"
    if mask.dim() == 3:
        if tuple(mask.shape[1:]) == image_hw:
            return "CHW"
        if tuple(mask.shape[:2]) == image_hw:
            return "HWC"
    return layout(mask)
