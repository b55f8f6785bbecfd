"""The declared-normalization probe of ``stage_trace`` (NUMERIC INTERPRETATION, and SEMANTICS for a channel
order that the per-channel statistics expose).

A stage named like a normalization (normalize, standardize, norm, zscore, whiten: its stage name, class or
function name) declares the mean/std it normalizes with by ``mean``/``std`` attributes (on the callable, a bound
method's object, a partial's function or keywords, variables a closure captured or globals it reads such as
IMAGENET_MEAN/IMAGENET_STD); any stage by the contract
``{stage: {key: {"normalized": {"mean": [...], "std": [...]}}}}``. From the input's per-channel mean m and std s,
the output of ``(k * x - mean) / std`` has mean ``(k * m - mean) / std`` and std ``k * s / std`` (k = 1, or 1/255
for a stage that also scales an integer image); an output far from every such prediction fails, naming the
channel. When it matches, statistics on the other value scale (0..255 statistics on a 0..1 image or the reverse)
fail, and an output whose channel means sit far from 0 where a permutation of the input channels would put them
near 0 is reported as a channel order problem.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import torch

from ._probes import Outcome, Seen

MEAN_TOL = 0.05      # |observed - predicted| mean, in predicted standard deviations
STD_TOL = 0.05       # relative error of the predicted standard deviation
LOW_PRECISION = (torch.float16, torch.bfloat16)
NAMED = re.compile(r"normali[sz]|standardi[sz]|norm(?![a-z])|z_?score|whiten", re.IGNORECASE)
SWAP_FAR = 2.0       # a channel mean this far from 0 after normalizing, that a channel permutation brings within 0.5


def numbers(value: Any) -> np.ndarray | None:
    """A 1-D float64 array of a scalar/list/array/tensor of numbers, else None."""
    if callable(value) or value is None or isinstance(value, (str, bytes, bool)):
        return None
    try:
        arr = np.asarray(value.detach().cpu().double() if isinstance(value, torch.Tensor) else value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    return arr if arr.size and np.isfinite(arr).all() else None


def declared(fn: Any, spec: Any, names: list[str]) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(source, mean, std) a stage declares, or None. Attributes count only for a stage whose name (or its
    callable's class or function name, among ``names``) says it normalizes."""
    if isinstance(spec, dict):
        return "contract 'normalized'", numbers(spec["mean"]), numbers(spec["std"])  # validated up front
    if not any(NAMED.search(n) for n in names):
        return None  # mean/std of something else (an AddGaussianNoise(mean, std) augmentation)
    holders = [(fn, "stage"), (getattr(fn, "__self__", None), "stage object"), (getattr(fn, "func", None), "partial function")]
    for obj, label in holders:
        if obj is not None:
            mean, std = numbers(getattr(obj, "mean", None)), numbers(getattr(obj, "std", None))
            if mean is not None and std is not None:
                return f"{label}.mean/std", mean, std
    keywords = getattr(fn, "keywords", None)
    if isinstance(keywords, dict) and (m := numbers(keywords.get("mean"))) is not None and (s := numbers(keywords.get("std"))) is not None:
        return "partial keywords mean/std", m, s
    return _from_code(fn)


def _from_code(fn: Any) -> tuple[str, np.ndarray, np.ndarray] | None:
    """mean/std a function captured (closure variables ``mean``/``std``) or reads as globals (one global named
    like ``*mean*`` and one like ``*std*``, e.g. IMAGENET_MEAN / IMAGENET_STD)."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    captured = dict(zip(getattr(code, "co_freevars", ()), cells))
    try:
        m, s = (numbers(captured[n].cell_contents) if n in captured else None for n in ("mean", "std"))
    except ValueError:  # an empty cell
        return None
    if m is not None and s is not None:
        return "closure mean/std", m, s
    space = getattr(fn, "__globals__", {})
    found = {}
    for part in ("mean", "std"):
        hits = [n for n in getattr(code, "co_names", ()) if part in n.lower() and n in space]
        found[part] = numbers(space[hits[0]]) if len(hits) == 1 else None
    if found["mean"] is not None and found["std"] is not None:
        return "globals mean/std", found["mean"], found["std"]
    return None


def _channels(t: torch.Tensor, view: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """(n, -1) float64 values per channel: the image's channels, a vector's elements, or everything (n = 1)."""
    if n == 1:
        return t.double().reshape(1, -1)
    if view is not None and view.shape[0] == n:
        return view.double().reshape(n, -1)
    if t.dim() >= 1 and t.shape[-1] == n:
        return t.double().reshape(-1, n).T
    return None


def _far(pm: np.ndarray, ps: np.ndarray, om: np.ndarray, os_: np.ndarray, loose: float) -> np.ndarray:
    scale = np.maximum(np.maximum(ps, os_), 1e-3 * (1 + np.abs(pm)))
    mean_bad = np.abs(om - pm) / scale > MEAN_TOL * loose
    std_bad = (ps > 1e-9) & (np.abs(os_ / np.maximum(ps, 1e-12) - 1) > STD_TOL * loose)
    return mean_bad | std_bad


def _stage_names(stage: str, fn: Any) -> list[str]:
    owner = getattr(fn, "__self__", None) or getattr(fn, "func", None) or fn
    return [stage, type(fn).__name__, type(owner).__name__, getattr(fn, "__name__", ""), getattr(owner, "__name__", "")]


def declared_scale(stage: str, fn: Any, contract: dict[str, Any]) -> float | None:
    """The largest |mean| ``stage`` declares normalizing with (contract 'normalized' or mean/std of a stage named like
    a normalization), or None: above ~1.5 it expects values on the 0..255 scale, else on 0..1."""
    specs = [s["normalized"] for s in contract.values() if isinstance(s, dict) and "normalized" in s]
    try:
        found = declared(fn, specs[0] if specs else None, _stage_names(stage, fn))
    except Exception:  # noqa: BLE001 - a stage whose attributes cannot be read declares nothing readable
        return None
    return None if found is None or found[1] is None else float(np.abs(found[1]).max())


def normalization(stage: str, fn: Any, before: Seen, after: Seen, contract: dict[str, Any], order: str) -> list[Outcome]:
    """The declared normalization of ``stage`` checked against its output (see the module docstring)."""
    specs = [(k, s["normalized"]) for k, s in contract.items() if isinstance(s, dict) and "normalized" in s]
    key, spec = specs[0] if specs else ((after.image[0] if after.image else None), None)
    found = declared(fn, spec, _stage_names(stage, fn))
    if found is None or key is None:
        return []
    key = "" if key == "sample" else key
    src, mean, std = found
    x, y = before.arrays.get(key), after.arrays.get(key)
    is_image = after.image is not None and after.image[0] == key and before.image is not None and before.image[0] == key
    if is_image and before.view is not None and after.view is not None and before.view.shape == after.view.shape:
        x, y = before.view, after.view  # (C, H, W) both: the stage may also move the channel axis
    if x is None or y is None or x.shape != y.shape or not y.is_floating_point():
        return [Outcome("numeric", "normalization", None, f"{stage}: declared {src} not checked: "
                        f"{key or 'sample'} {'missing' if x is None or y is None else 'changed shape or is not float'}")]
    if not specs and x.dtype == y.dtype and torch.equal(x, y) and _others_changed(before, after, key):
        return [Outcome("numeric", "normalization", None, f"{stage}: declared {src} not checked: {key or 'sample'} is "
                        "unchanged while other arrays changed (name the normalized key with contracts 'normalized')")]
    n = max(mean.size, std.size)
    xc, yc = _channels(x, x if is_image else None, n), _channels(y, y if is_image else None, n)
    if xc is None or yc is None or (mean.size not in (1, n)) or (std.size not in (1, n)) or (std == 0).any():
        return [Outcome("numeric", "normalization", None, f"{stage}: declared {src} ({n} values) does not fit {key or 'sample'} "
                        f"{list(y.shape)}")]
    return _judge(stage, key or "sample", src, (mean, std), (xc, yc, x), y.dtype in LOW_PRECISION, order if is_image else "")


def _others_changed(before: Seen, after: Seen, key: str) -> bool:
    for k, t in after.arrays.items():
        prior = before.arrays.get(k)
        if k != key and (prior is None or prior.shape != t.shape or prior.dtype != t.dtype or not torch.equal(prior, t)):
            return True
    return False


def _judge(stage: str, key: str, src: str, stats: tuple[np.ndarray, np.ndarray], data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
           low: bool, order: str) -> list[Outcome]:
    (mean, std), (xc, yc, x) = stats, data
    m, s = xc.mean(1).numpy(), (xc.std(1, unbiased=False) if xc.shape[1] > 1 else torch.zeros(xc.shape[0])).numpy()
    om, os_ = yc.mean(1).numpy(), (yc.std(1, unbiased=False) if yc.shape[1] > 1 else torch.zeros(yc.shape[0])).numpy()
    integer = not x.is_floating_point() or float(xc.max()) > 1.5
    scales = [1.0, 1 / 255] if integer else [1.0]
    preds = [((k * m - mean) / std, k * s / std, k) for k in scales]
    fits = [(pm, ps, k) for pm, ps, k in preds if not _far(pm, ps, om, os_, 2.0 if low else 1.0).any()]
    word = "channel" if order else "element"
    names = list(order) if order and len(order) == len(om) else [str(i) for i in range(len(om))]
    ev = {"key": key, "source": src, "declared_mean": mean.tolist(), "declared_std": std.tolist(), "input_mean": m.tolist(),
          "input_std": s.tolist(), "output_mean": om.tolist(), "output_std": os_.tolist()}
    if not fits:
        pm, ps, k = preds[-1] if not x.is_floating_point() else preds[0]
        c = int(np.argmax(np.abs(om - pm) / np.maximum(np.maximum(ps, os_), 1e-6) + np.abs(np.log((os_ + 1e-12) / (ps + 1e-12)))))
        return [Outcome("numeric", "normalization", False,
                        f"{key} {word} {names[c]}: {stage!r} declares {src} mean {mean.tolist()}, std {std.tolist()}, so from the "
                        f"input (mean {m[c]:.4g}, std {s[c]:.4g}) the output should have mean {pm[c]:.4g}, std {ps[c]:.4g}; it has "
                        f"mean {om[c]:.4g}, std {os_[c]:.4g}: the stage does not compute (x - mean) / std", {**ev, "channel": names[c]},
                        expected=f"{word} {names[c]} mean {pm[c]:.4g}, std {ps[c]:.4g}",
                        observed=f"{word} {names[c]} mean {om[c]:.4g}, std {os_[c]:.4g}", subkind="normalization")]
    k = fits[0][2]
    if order and float(xc.min()) >= 0:
        wrong = _wrong_scale(k, float(xc.max()) * k, mean, std)
        if wrong:
            return [Outcome("numeric", "normalization", False, f"{key}: {stage!r} applies {src} mean {mean.tolist()}, std "
                            f"{std.tolist()} to values on the {wrong}: output mean {om.round(3).tolist()}, std {os_.round(4).tolist()}",
                            ev, expected="statistics on the scale of the stage's input", observed=wrong, subkind="normalization")]
        swap = _swapped(m * k, s * k, mean, std, om, names)
        if swap:
            return [Outcome("semantics", "channel_order", False, f"{key}: after {stage!r} the channel means are "
                            f"{om.round(2).tolist()}; with the input's channels in order {swap} they would be near 0: the "
                            f"channels entering {stage!r} are not in the order its statistics assume ({order})",
                            {**ev, "reads_as": swap}, expected=f"channels in {order} order", observed=f"channels in {swap} order",
                            subkind="channel_order")]
    return [Outcome("numeric", "normalization", True, f"{key}: {stage!r} output matches (x{'/255' if k != 1 else ''} - mean) / std "
                    f"of its input with {src}", ev)]


def _wrong_scale(k: float, top: float, mean: np.ndarray, std: np.ndarray) -> str:
    """The mismatch between the declared statistics' scale and the (scaled) input's, or ''."""
    if 0.2 <= top <= 1 + 1e-3 and (mean.max() > 1.5 or std.max() > 1.5):
        return "0..1 scale with statistics on the 0..255 scale"
    if top > 1.5 and mean.max() <= 1 and std.max() <= 1:
        return "0..255 scale with statistics on the 0..1 scale (the /255 is missing)"
    return ""


def _swapped(m: np.ndarray, s: np.ndarray, mean: np.ndarray, std: np.ndarray, om: np.ndarray, names: list[str]) -> str:
    """A channel order under which the output channel means would be near 0 while they are far from it now."""
    if len(om) != 3 or mean.size != 3 or np.abs(om).max() <= SWAP_FAR:
        return ""
    std3 = std if std.size == 3 else np.repeat(std, 3)
    for perm in itertools.permutations(range(3)):
        if perm != (0, 1, 2) and np.abs((m[list(perm)] - mean) / std3).max() < 0.5:
            return "".join(names[p] for p in perm)
    return ""
