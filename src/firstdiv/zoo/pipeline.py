"""The ``pipeline`` reference: a segmentation preprocessing pipeline on one synthetic sample, written the way
a user writes it, for :func:`firstdiv.stage_trace`.

The sample is the "file" as an OpenCV-style loader stores it (uint8 HWC, BGR), a mask covering an
asymmetric L-shaped object, a class label, and ``meta`` stating the contract: the pipeline must produce
RGB, and a pure-red box ``[y0, y1, x0, x1]`` is a known colour. Stages: ``decode`` (BGR file -> RGB uint8
HWC tensor), ``to_float`` (/255), ``flip`` (augmentation: horizontal flip of image and mask, drawn from
torch's global RNG with p=1.0 so every trace exercises it), ``normalize`` (per-channel mean/std fitted on
synthetic train images, ``fitted_on="train"``), ``to_chw`` (permute).

``build(seed, fault)`` returns ``{"sample", "stages", "probes", "contracts"}``; ``FAULTS`` maps each fault to
``(origin, description, expected where, expected kind)``. Everything is drawn from a local generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

REFERENCE = "pipeline"
H, W = 24, 32
BOX = [3, 9, 20, 28]          # the known red box, half-open [y0, y1, x0, x1], away from the object
RED = [255, 0, 0]
STAT_IMAGES = 16

FAULTS: dict[str, tuple[str, str, str, str]] = {
    "chw_view": ("book", "HWC->CHW done with .reshape instead of .permute: same shape, scrambled pixels",
                 "to_chw", "stage.structure"),
    "channels_swapped": ("book", "the decoder returns the file's BGR channels as if they were RGB",
                         "decode", "stage.semantics"),
    "double_normalization": ("book", "a model wrapper normalizes the already normalized image again",
                             "model_normalize", "stage.numeric"),
    "label_not_flipped": ("book", "the flip augmentation flips the image but not its mask",
                          "flip", "stage.relationships"),
    "val_statistics": ("book", "normalization statistics fitted on the validation split",
                       "normalize", "stage.provenance"),
}

Sample = dict[str, Any]
Stage = Callable[[Sample], Sample]


# ---- synthetic data -------------------------------------------------------------------------------

def _images(gen: torch.Generator, n: int) -> np.ndarray:
    """``n`` textured RGB uint8 images (n, H, W, 3): smooth gradients plus noise, each with the known red box."""
    ys, xs = torch.meshgrid(torch.linspace(0, 1, H), torch.linspace(0, 1, W), indexing="ij")
    base = torch.stack([0.3 + 0.4 * xs, 0.6 - 0.3 * ys, 0.2 + 0.3 * xs * ys], dim=-1)
    noisy = (base + 0.12 * torch.randn(n, H, W, 3, generator=gen)).clamp(0, 1)
    img = (noisy * 255 + 0.5).to(torch.uint8).numpy()
    img[:, BOX[0]:BOX[1], BOX[2]:BOX[3]] = RED
    return img


def _mask() -> np.ndarray:
    """An L-shaped object on the left: no flip or rotation maps it onto itself."""
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[8:20, 3:7] = 1
    mask[16:20, 3:15] = 1
    return mask


def _fit(gen: torch.Generator) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of float (0..1) pixels over a split of synthetic images."""
    pixels = torch.from_numpy(_images(gen, STAT_IMAGES)).double() / 255
    return pixels.mean(dim=(0, 1, 2)).tolist(), pixels.std(dim=(0, 1, 2)).tolist()


# ---- the user's stages ----------------------------------------------------------------------------

def decode(sample: Sample) -> Sample:
    """The file holds BGR (as OpenCV writes it); the model expects RGB."""
    image = torch.from_numpy(np.ascontiguousarray(sample["file"][..., ::-1]))
    return {"image": image, "mask": torch.from_numpy(sample["mask"]), "label": sample["label"], "meta": sample["meta"]}


def decode_bgr(sample: Sample) -> Sample:
    image = torch.from_numpy(np.ascontiguousarray(sample["file"]))  # BGR read as RGB
    return {"image": image, "mask": torch.from_numpy(sample["mask"]), "label": sample["label"], "meta": sample["meta"]}


def to_float(sample: Sample) -> Sample:
    return {**sample, "image": sample["image"].float() / 255}


class RandomHorizontalFlip:
    """Flip ``keys`` along the width axis (dim 1 of HWC images and HW masks) with probability ``p``."""

    def __init__(self, p: float = 1.0, keys: tuple[str, ...] = ("image", "mask")) -> None:
        self.p, self.keys = p, keys

    def __call__(self, sample: Sample) -> Sample:
        if float(torch.rand(())) < self.p:  # the global RNG, as torchvision's transforms draw
            sample = {**sample, **{k: sample[k].flip(1) for k in self.keys}}
        return sample


class Normalize:
    """(x - mean) / std per channel; ``fitted_on`` records the split the statistics came from."""

    def __init__(self, mean: list[float], std: list[float], fitted_on: str, channel_axis: int = -1) -> None:
        self.mean, self.std, self.fitted_on, self.channel_axis = mean, std, fitted_on, channel_axis

    def __call__(self, sample: Sample) -> Sample:
        image = sample["image"]
        shape = [1] * image.dim()
        shape[self.channel_axis] = len(self.mean)
        mean = torch.tensor(self.mean, dtype=image.dtype).view(shape)
        std = torch.tensor(self.std, dtype=image.dtype).view(shape)
        return {**sample, "image": (image - mean) / std}


def to_chw(sample: Sample) -> Sample:
    return {**sample, "image": sample["image"].permute(2, 0, 1).contiguous()}


def to_chw_view(sample: Sample) -> Sample:
    h, w, c = sample["image"].shape
    return {**sample, "image": sample["image"].reshape(c, h, w)}


def label_kept(before: Any, after: Any, stage: str) -> str | None:
    """A user probe: preprocessing never changes the class label."""
    if isinstance(before, dict) and isinstance(after, dict) and before.get("label") != after.get("label"):
        return f"label changed from {before.get('label')!r} to {after.get('label')!r}"
    return None


# ---- the reference and its faults -----------------------------------------------------------------

def build(seed: int, fault: str | None) -> dict[str, Any]:
    """The clean pipeline (``fault=None``) or one with ``fault`` (a key of ``FAULTS``) injected."""
    if fault is not None and fault not in FAULTS:
        raise KeyError(f"unknown pipeline fault {fault!r}; known: {', '.join(FAULTS)}")
    gen = torch.Generator().manual_seed(seed)
    rgb = _images(gen, 1)[0]
    train = _fit(torch.Generator().manual_seed(10_000 + seed))
    val = _fit(torch.Generator().manual_seed(20_000 + seed))
    sample = {"file": np.ascontiguousarray(rgb[..., ::-1]), "mask": _mask(), "label": 1,
              "meta": {"id": f"synthetic-{seed:04d}", "channel_order": "RGB",
                       "known_colour": {"box": list(BOX), "rgb": list(RED)}}}
    mean, std = val if fault == "val_statistics" else train
    stages: list[tuple[str, Stage]] = [
        ("decode", decode_bgr if fault == "channels_swapped" else decode),
        ("to_float", to_float),
        ("flip", RandomHorizontalFlip(1.0, ("image",) if fault == "label_not_flipped" else ("image", "mask"))),
        ("normalize", Normalize(mean, std, "val" if fault == "val_statistics" else "train")),
        ("to_chw", to_chw_view if fault == "chw_view" else to_chw),
    ]
    if fault == "double_normalization":
        stages.append(("model_normalize", Normalize(*train, fitted_on="train", channel_axis=0)))
    contracts = {"to_chw": {"image": {"dtype": "float32", "shape": [3, H, W], "layout": "CHW"}, "mask": {"shape": [H, W]}}}
    return {"sample": sample, "stages": stages, "probes": {"label kept": ("relationships", label_kept)}, "contracts": contracts}
