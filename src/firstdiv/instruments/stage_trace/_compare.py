"""The training pipeline against the evaluation pipeline on the same record (``eval_stages=``).

Both run on copies of the sample with the same seed. The train outputs form a chain (the input, then one
output per stage); each eval stage's output must equal a train output at or after the one the previous eval
stage matched (an eval stage may do the work of several train stages). Equal means same leaves, shapes, dtypes
and values; after a declared augmentation (``augmentations=``, names of train stages allowed to differ, e.g. a
random flip, crop or colour jitter) only the shapes, dtypes, the lengths of sequences and, for float arrays, the sign
of the minimum (normalized or not), the mean (within 2 std) and the std (within x3) must agree, and
token sequences (integer vectors, lists) share at least half their items. The first eval stage matching no train output fails at ``eval:<stage>``; an eval
pipeline that ends before the train one does (it never produces the final train output) fails at the first
train stage it has no counterpart of (e.g. the normalization it forgot).

Evidence before FAIL (:func:`verdict`): a difference is a FAIL only when the train stages it rests on are
deterministic. Each undeclared train stage is run again on its own input under ``RERUNS`` other seeds; one whose
output changes is random (an undeclared augmentation). If the pipelines agree once those are compared as
augmentations, the finding is a WARN asking to name them in ``augmentations=``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...report import Status
from .._core.checks import Check, check
from ._probes import as_tensor, clone, dtype_name, leaves

KIND = "stage.train_eval"
LOOSE_MEAN, LOOSE_STD = 2.0, 3.0   # after an augmentation (brightness, crops, noise): means within 2 std, std within x3
MIN_SHARED = 0.5   # after an augmentation, token sequences keep at least half their items
HINT = "run the same deterministic stages (resize, scaling, normalization, tokenizer settings) in both pipelines"


def _tensor_diff(key: str, a: torch.Tensor, b: torch.Tensor, loose: bool) -> str:
    if a.shape != b.shape:
        return f"{key} shape {list(a.shape)} vs {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"{key} dtype {dtype_name(a.dtype)} vs {dtype_name(b.dtype)}"
    if a.numel() == 0 or a.is_complex():
        return ""
    x, y = a.double(), b.double()
    if not loose:
        scale = float(x.abs().max()) if bool(torch.isfinite(x).all()) else 1.0
        if not torch.allclose(x, y, rtol=1e-4, atol=1e-5 * (1 + scale), equal_nan=True):
            return f"{key} values differ (max |difference| {float((x - y).abs().nan_to_num(0).max()):.4g})"
        return ""
    if not a.is_floating_point() and a.dim() == 1:  # token ids: an augmentation replaces a few of them
        share = _overlap(a.tolist(), b.tolist())
        return "" if share >= MIN_SHARED else f"{key}: only {share:.0%} of the values in common"
    if not a.is_floating_point() or x.numel() < 2:
        return ""
    ma, mb, sa, sb = float(x.mean()), float(y.mean()), float(x.std()), float(y.std())
    same_sign = (float(x.min()) < 0) == (float(y.min()) < 0)  # normalized (negative values) or not
    close = abs(ma - mb) <= LOOSE_MEAN * max(sa, sb) + 1e-6 * (1 + abs(ma)) and sb / LOOSE_STD - 1e-9 <= sa <= LOOSE_STD * sb + 1e-9
    if not (same_sign and close):
        return f"{key} statistics: mean {ma:.4g}, std {sa:.4g} vs mean {mb:.4g}, std {sb:.4g}"
    return ""


def _overlap(a: Any, b: Any) -> float:
    """The share of ``a``'s items (as a multiset) that ``b`` holds too; 1.0 for items that cannot be counted."""
    try:
        ca, cb = Counter(a), Counter(b)
    except TypeError:
        return 1.0
    return sum((ca & cb).values()) / max(1, len(a))


def _length(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


def difference(a: Any, b: Any, fields: tuple[str, ...], loose: bool) -> str:
    """'' when the train sample ``a`` and eval sample ``b`` agree, else the first difference."""
    la, lb = leaves(a, fields), leaves(b, fields)
    if list(la) != list(lb):
        return f"keys {sorted(la)} vs {sorted(lb)}"
    for key in la:
        va, vb = la[key], lb[key]
        ta, tb = as_tensor(va), as_tensor(vb)
        name = key or "sample"
        if (ta is None) != (tb is None):
            return f"{name}: {type(va).__name__} vs {type(vb).__name__}"
        if ta is not None:
            diff = _tensor_diff(name, ta, tb, loose)
        else:
            try:
                same = type(va) is type(vb) and bool(np.all(va == vb))
            except Exception:  # noqa: BLE001 - values that cannot be compared are compared by their text
                same = repr(va) == repr(vb)
            na, nb = _length(va), _length(vb)
            if loose and not same:  # after an augmentation: the same kind of value, of the same length, mostly shared
                same = type(va) is type(vb) and (isinstance(va, str) or na == nb) and (
                    not isinstance(va, (list, tuple)) or _overlap(va, vb) >= MIN_SHARED)
            diff = "" if same else f"{name}: {va!r:.40} vs {vb!r:.40}" + (f" (length {na} vs {nb})" if na != nb else "")
        if diff:
            return diff
    return ""


def run_eval(named: list[tuple[str, Callable]], sample: Any) -> tuple[list[tuple[str, Any]], str]:
    """Each eval stage's output on a copy, and the error of the stage that raised (or returned None)."""
    outs, current = [], sample
    for name, fn in named:
        try:
            current = fn(clone(current))
        except Exception as exc:  # noqa: BLE001 - reported as the eval pipeline's failure
            return outs, f"eval stage {name!r} raised {type(exc).__name__}: {str(exc)[:160]}"
        if current is None:
            return outs, f"eval stage {name!r} returned None"
        outs.append((name, current))
    return outs, ""


def _missing(stage: str, context: str, pairs: list[list[str]], diff: str) -> Check:
    return check(stage, KIND, Status.FAIL, f"{context}; it has no counterpart of train stage {stage!r}: samples differ: {diff} "
                 f"(if {stage!r} is an augmentation, name it in augmentations=)",
                 {"matched": pairs, "difference": diff}, expected=f"the eval pipeline does what train stage {stage!r} does",
                 observed=f"eval skips it: {diff}", hint=HINT)


def compare(train: list[tuple[str, Any, bool]], evals: list[tuple[str, Any]], error: str, fields: tuple[str, ...],
            augmentations: set[str]) -> Check:
    """One finding: where the eval pipeline parts from the train one (``train``: (stage, output, loose)). An eval
    stage matching no train output may be an intermediate step of the eval pipeline's own (a Resize before its
    CenterCrop): it fails only when no later eval stage rejoins the train chain."""
    if error:
        return check(f"eval:{evals[-1][0]}" if evals else "eval", KIND, Status.FAIL, error, {},
                     expected="the eval pipeline runs", observed=error, hint=HINT)
    prev, pairs, pending = 0, [], None
    for name, out in evals:
        hit = next((i for i in range(prev, len(train)) if not difference(train[i][1], out, fields, train[i][2])), None)
        if hit is not None:
            prev, pending = hit, None
            pairs.append([name, train[hit][0]])
            continue
        near = next((i for i in range(prev + 1, len(train)) if train[i][0] == name), None)
        skipped = [train[k] for k in range(prev + 1, near or prev + 1) if train[k][0] not in augmentations
                   and difference(train[k - 1][1], train[k][1], fields, train[k][2])]
        if skipped and pending is None:
            return _missing(skipped[0][0], f"after train stage {train[prev][0]!r} the eval pipeline goes to {name!r}",
                            pairs, difference(train[near][1], out, fields, train[near][2]))  # type: ignore[index]
        if pending is None:
            near = min(prev + 1, len(train) - 1) if near is None else near
            pending = (name, train[near][0], difference(train[near][1], out, fields, train[near][2]), train[prev][0])
    if pending is not None:
        name, near_name, why, after = pending
        return check(f"eval:{name}", KIND, Status.FAIL,
                     f"eval stage {name!r} gives a sample no train stage gives (after {after!r}) and no later eval stage "
                     f"rejoins the train pipeline; against train {near_name!r}: {why}",
                     {"matched": pairs, "train_stage": near_name, "difference": why},
                     expected=f"the output of train stage {near_name!r}", observed=why, hint=HINT)
    last = train[-1]
    final = difference(last[1], evals[-1][1], fields, last[2]) if evals else "no eval stages"
    if final:
        missing = next((t for t in train[prev + 1:] if t[0] not in augmentations
                        and difference(t[1], train[prev][1], fields, t[2])), last)
        return _missing(missing[0], f"the eval pipeline ends at the output of train stage {train[prev][0]!r}", pairs, final)
    return check("(eval_stages)", KIND, Status.PASS,
                 "eval pipeline agrees with the train pipeline: " + ", ".join(f"{e}={t}" for e, t in pairs), {"matched": pairs})


RERUNS = 8  # other seeds a train stage runs under to show it is random (a flip with p=0.5 hides from 8 with p=1/256)


def random_stages(train: list[tuple[str, Any, bool]], named: list[tuple[str, Callable]], fields: tuple[str, ...],
                  declared: set[str], reseed: Callable[[int], None]) -> list[str]:
    """The train stages not named in augmentations= whose output changes when run again on the same input (a copy of
    what they got in the walk) with the global RNGs seeded otherwise."""
    out = []
    for i, (name, fn) in enumerate(named[: len(train) - 1]):
        if name in declared:
            continue
        for k in range(1, RERUNS + 1):
            reseed(k)
            try:
                again = fn(clone(train[i][1]))
            except Exception:  # noqa: BLE001 - a stage that cannot run again shows nothing
                break
            if again is not None and difference(train[i + 1][1], again, fields, False):
                out.append(name)
                break
    return out


def verdict(train: list[tuple[str, Any, bool]], evals: list[tuple[str, Any]], error: str, fields: tuple[str, ...],
            augmentations: set[str], find_random: Callable[[], list[str]]) -> Check:
    """:func:`compare`, with its FAIL confirmed: the train stages found random (``find_random``) are compared as
    augmentations; a FAIL that goes away then is a WARN naming them."""
    strict = compare(train, evals, error, fields, augmentations)
    if strict.finding.status is not Status.FAIL or error:
        return strict
    found = find_random()
    if not found:
        return strict
    allowed, loose, relaxed = augmentations | set(found), False, []
    for name, out, _ in train:
        loose = loose or name in allowed
        relaxed.append((name, out, loose))
    again = compare(relaxed, evals, error, fields, allowed)
    if again.finding.status is Status.FAIL:
        return again
    f = strict.finding
    return check(f.where, KIND, Status.WARN,
                 f"{f.message}; but train stage(s) {', '.join(map(repr, found))} are random (run again on the same input "
                 "under another seed they give another output) and not named in augmentations=: compared as "
                 "augmentations, the eval pipeline agrees, so a difference between the pipelines is not confirmed; name "
                 "them in augmentations=", {**f.evidence, "random_stages": found})
