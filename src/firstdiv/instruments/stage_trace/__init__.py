"""Stage trace (appendix section 7): walk one known sample through named preprocessing stages and find the
first stage where one of the five input-contract categories fails.

One sample, one process, no batching, controlled randomness: torch's CPU generator (and CUDA's when it is
initialized), numpy's global RNG and ``random`` are seeded with ``seed`` for the walk and restored afterwards,
so a random augmentation draws the same numbers on every call. Each stage runs on a copy of the sample
(in-place stages cannot corrupt the trace or the caller's sample). After each stage, comparing the sample
before and after it:

- STRUCTURE (``stage.structure``): the stage returned a sample; an array whose shape changed but whose values
  did not must be an axis permutation (with flips) of its input - a HWC->CHW done with ``reshape``/``view``
  keeps the values and scrambles their positions; contracts ``dtype``/``shape``/``layout``.
- NUMERIC INTERPRETATION (``stage.numeric``): uint8 0..255 / float 0..1 / normalized ~N(0,1); non-finite
  values appearing; a stage named like ``to_float``/``to_tensor`` turning an integer image into a float
  image above 1; an already normalized image (min < 0, |mean| < 0.5, std in (0.5, 2)) whose std changes by
  more than x2 (or mean by more than 1 std): normalized twice; contracts ``range``.
- SEMANTICS (``stage.semantics``): the known-colour protocol. The input sample's ``meta`` may carry
  ``{"channel_order": "RGB", "known_colour": {"box": [y0, y1, x0, x1], "rgb": [255, 0, 0]}}`` (box half-open,
  in the coordinates of the first image; rgb on the 0..255 scale; ``channel_order`` is the order the
  pipeline must produce, default RGB). After each stage whose image has 3 channels in a display range
  (integer 0..255 or float 0..1), the box's mean colour must be within 64 of the expected colour; a
  channel permutation that fits instead is reported as that order (e.g. BGR). The box follows the image
  through flips, rotations and resizes (a bilinear resize of the input explains the output).
- RELATIONSHIPS (``stage.relationships``): the image's spatial transform, found among identity, flip-h,
  flip-v, rot90/180/270 and transpose (up to a per-channel affine change of values), must be one the mask
  underwent too (``mask``/``masks``/``segmentation``/``seg``, or ``label``/``target``/``y`` when spatial);
  image and mask must keep equal spatial sizes.
- PROVENANCE (``stage.provenance``): a stage callable (or a bound method's object, or a partial's function)
  with a ``fitted_on`` or ``provenance`` attribute, or ``meta["provenance"] = {stage name: split}``, declares
  where its statistics came from; a split named val/valid/validation/dev/test/eval/holdout/trainval/all/full
  fails.

The sample may be the ``(input, target)`` tuple (or list) a ``Dataset`` returns, and containers may nest: leaves
are named by dict key, tuple position ("0", "1") or ``fields=("image", "label")``, joined by "."; a tuple's first
element with >= 2 dims is its image. Leaves the probes cannot read (sparse, quantized, nested, meta tensors) give
a ``stage.unread`` SKIPPED finding naming the leaf and the reason. Declarations add probes:

- a stage named like a normalization with ``mean``/``std`` (or the contract ``normalized``): its output must be
  ``(x - mean) / std`` of its input, per channel, with statistics on the input's scale (``stage.numeric.
  normalization``); channel means far from 0 that a channel permutation explains: ``stage.semantics.
  channel_order``;
- ``class_to_idx`` / ``label_rule`` / ``label_key``: the stage that changes the label must give the declared class
  (``stage.semantics.label_map``), and no stage may turn a class label into a non-integral number
  (``stage.semantics.label_changed``);
- ``eval_stages`` (with ``augmentations``): the evaluation pipeline on the same sample must agree with the train
  one; ``stage.train_eval`` at the first stage where they part (an eval stage ``eval:<name>``, or the train
  stage the eval pipeline lacks).

A stage that raises gives ``stage.raised`` with the trace up to it. User probes and contracts add to the
categories. Categories no probe could check are listed as SKIPPED findings: an all-green metadata report
is not a clean bill of health.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.checks import Check, check, compose
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from . import _args as ar
from . import _compare
from . import _labels as lb
from . import _probes as sp
from ._args import Probe
from ._contracts import check_contracts, contract_outcomes
from ._normalize import declared_scale, normalization
from ._semantics import provenance, relationships, semantics
from ._structure import numeric, structure

__all__ = ["stage_trace"]

_NAME = "stage_trace"
_HINTS = {
    "structure": "compare the stage's reshape/view with the permute it meant, and what it returns",
    "numeric": "scale once (/255), normalize once, with the statistics the model was trained with",
    "semantics": "check the decoder's channel order (OpenCV reads BGR) against the order the model expects",
    "relationships": "apply one geometric transform (one random draw) to the image and its mask together",
    "provenance": "refit the statistics on the training split only",
}
_MISSING = {
    "structure": "no array changed shape and no contract was given: add contracts={stage: {key: {'shape': ..., 'layout': ...}}}",
    "numeric": "no image found (keys image/img/pixels/pixel_values/input/x): add contracts with 'range'",
    "semantics": "give sample['meta'] (or meta=) {'channel_order': 'RGB', 'known_colour': {'box': [y0, y1, x0, x1], "
                 "'rgb': [r, g, b]}}, class_to_idx= / label_rule= for the label, or a probe ('semantics', fn)",
    "relationships": "give a 'mask' aligned with the image, or a probe ('relationships', fn)",
    "provenance": "set fitted_on='train' on fitted stages (normalize) or sample['meta']['provenance'] = {stage: split}",
}
@reports_user_hooks
def stage_trace(sample: Any, stages: Any, *, probes: dict[str, Any] | None = None,
                contracts: dict[str, dict[str, dict[str, Any]]] | None = None, seed: int = 0,
                fields: tuple[str, ...] | None = None, meta: dict[str, Any] | None = None,
                class_to_idx: dict[Any, int] | None = None, label_rule: Callable[[Any], Any] | None = None,
                label_key: str | None = None, eval_stages: Any = None, augmentations: Any = None) -> Report:
    """Walk ``sample`` (a tensor, numpy array, dict like ``{"image", "mask", "label", "meta"}``, or the
    ``(input, target)`` tuple/list a ``Dataset`` returns, nested containers allowed) through ``stages`` (a list
    of ``(name, callable)`` or a dict name -> callable, each mapping a sample to the next) and report the first
    stage where a contract category fails (where = stage name, kind
    ``stage.structure|numeric|semantics|relationships|provenance|raised``, with a suffix such as
    ``.normalization``, ``.channel_order``, ``.label_map`` for the declared-statistics and label probes).

    ``probes``: ``{name: fn}`` (category semantics) or ``{name: (category, fn)}``; ``fn(before, after,
    stage_name)`` gets copies and returns None (ok) or a failure message. ``contracts``: ``{stage: {key:
    {"dtype": ..., "shape": [...], "range": (lo, hi), "layout": "CHW", "normalized": {"mean": [...], "std":
    [...]}}}}`` checked after that stage (key "" or "sample" for a bare tensor sample; a tuple's elements are
    "0", "1", ... or the names in ``fields``, nested keys joined by "."). A stage with ``mean``/``std``
    attributes declares its normalization too. ``meta``: the meta contract (channel order, known colour,
    provenance) for a sample that cannot carry ``sample["meta"]``. ``class_to_idx`` / ``label_rule(record)``
    / ``label_key``: the class the label must become at the stage that encodes it. ``eval_stages``: the
    evaluation pipeline, run on the same sample and compared with the train one (``augmentations``: train
    stage names allowed to differ from it and to move the label, e.g. mixup). ``seed`` seeds the global RNGs during the walk only.
    """
    if not isinstance(sample, (torch.Tensor, np.ndarray, dict, tuple, list)):
        raise InvalidArgument("Expected `sample` to be a tensor, a numpy array, a dict like {'image': ..., 'mask': ...} or an "
                              f"(input, target) tuple (wrap raw text as {{'text': ...}}) but got {type(sample).__name__}")
    named = ar.check_stages(stages)
    names = [n for n, _ in named]
    evals = None if eval_stages is None else ar.check_stages(eval_stages)
    decl = _Declared(ar.check_fields(fields), set(ar.check_augmentations(augmentations, names)))
    ar.check_labels(class_to_idx, label_rule, label_key)
    user = ar.check_probes(probes)
    wants = check_contracts(contracts, names)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise InvalidArgument(f"Expected `seed` to be an int in [0, 2**32) but got {seed!r}")
    walk = _Walk(ar.track(sample, meta), user, wants, decl)
    current, seen = walk.start(sample)
    with guarded():
        _seed(seed)
        if class_to_idx is not None or label_rule is not None or label_key is not None:
            decl.labels = _labels(sp.clone(current), decl.fields, label_key, class_to_idx, label_rule)
        if decl.labels is not None and (decl.labels.note or decl.labels.info):
            walk.checks.append(check("(input)", "stage.label", Status.SKIPPED,
                                     f"label not checked: {decl.labels.note or decl.labels.info}"))
        walk.run(named, current, seen)
        if evals is not None:
            _seed(seed)
            walk.checks.append(_eval_check(walk, evals, sp.clone(sample), named, seed))
    return _report(walk, seed, names)


@dataclass
class _Declared:
    """The declarations beyond probes and contracts: tuple field names, train augmentations, the label."""

    fields: tuple[str, ...]
    augmentations: set[str]
    labels: lb.Labels | None = None


def _labels(sample: Any, fields: tuple[str, ...], key: str | None, class_to_idx: Any, rule: Any) -> lb.Labels:
    try:
        return lb.start(sample, fields, key, class_to_idx, rule)
    except Exception as exc:  # noqa: BLE001 - a label the probe cannot read is a note, never a crash
        return lb.Labels(key, class_to_idx, note=f"the label could not be read: {_error(exc)}")


def _eval_check(walk: _Walk, evals: list[tuple[str, Callable]], sample: Any, named: list[tuple[str, Callable]],
                seed: int) -> Check:
    if len(walk.outputs) != len(walk.rows):
        return check("(eval_stages)", _compare.KIND, Status.SKIPPED, "eval pipeline not compared: the train walk stopped at "
                     f"{walk.rows[-1]['stage']!r}")
    outs, error = _compare.run_eval(evals, sample)
    try:
        fields, declared = walk.declared.fields, walk.declared.augmentations
        return _compare.verdict(walk.outputs, outs, error, fields, declared, lambda: _compare.random_stages(
            walk.outputs, named, fields, declared, lambda k: _seed((seed + k) % 2**32)))
    except Exception as exc:  # noqa: BLE001 - samples the comparison cannot read are not a verdict
        return check("(eval_stages)", _compare.KIND, Status.SKIPPED, f"eval pipeline not compared: {_error(exc)}")


# ---- contracts and user probes --------------------------------------------------------------------

def _user(stage: str, before: Any, after: Any, probes: dict[str, tuple[str, Probe]]) -> list[sp.Outcome]:
    out = []
    for name, (category, fn) in probes.items():
        try:
            verdict = fn(sp.clone(before), sp.clone(after), stage)
        except Exception as exc:  # noqa: BLE001 - a broken probe is reported, not blamed on the stage
            out.append(sp.Outcome(category, f"user:{name}", None, f"probe {name!r} raised {type(exc).__name__}: {exc}"))
            continue
        if isinstance(verdict, (bool, np.bool_)):
            verdict = None if verdict else "returned False"
        if verdict is None or (isinstance(verdict, str) and not verdict):
            out.append(sp.Outcome(category, f"user:{name}", True, f"probe {name!r}: ok"))
        elif isinstance(verdict, str):
            out.append(sp.Outcome(category, f"user:{name}", False, f"probe {name!r}: {verdict}", {"message": verdict},
                                  expected=f"probe {name!r} passes", observed=verdict))
        else:
            out.append(sp.Outcome(category, f"user:{name}", None,
                                  f"probe {name!r} returned {type(verdict).__name__}; expected None or a failure message"))
    return out


# ---- the walk -------------------------------------------------------------------------------------

def _row(stage: str, sample: Any, seen: sp.Seen, track: sp.Track, notes: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"stage": stage, "type": type(sample).__name__}
    if isinstance(sample, dict):
        row["keys"] = [str(k) for k in sample]
    if seen.image is not None and seen.stats is not None:
        row["image"] = {"key": seen.image[0] or "sample", **seen.stats}
    if seen.mask is not None:
        t = seen.mask[1]
        row["mask"] = {"key": seen.mask[0], "shape": list(t.shape), "dtype": sp.dtype_name(t.dtype),
                       "layout": sp.layout(t)}
    row["image_transform"] = track.moves
    row["notes"] = notes
    return row


def _describe(row: dict[str, Any]) -> str:
    parts = []
    for label in ("image", "mask"):
        if label in row:
            s = row[label]
            parts.append(f"{s['key']} {s['shape']} {s['dtype']} {s['layout'] or 'layout ambiguous'}"
                         + (f" {s['interpretation']}" if label == "image" and "interpretation" in s else ""))
    moved = row.get("image_transform")
    if moved:
        parts.append(f"image transform {'/'.join(moved)}")
    return "; ".join(parts) or f"{row['type']} (no image recognised)"


def _probe_stage(stage: str, fn: Callable, samples: tuple[Any, Any], seen: tuple[sp.Seen, sp.Seen | None], track: sp.Track,
                 probes: dict[str, tuple[str, Probe]], contract: dict[str, Any], decl: _Declared) -> list[sp.Outcome]:
    before, after = seen
    outs = _safely("structure", structure, stage, before, after)
    if after is None:
        return outs
    outs += _safely("structure", contract_outcomes, stage, after, contract)
    outs += _safely("numeric", numeric, stage, before, after, track)
    outs += _safely("relationships", relationships, stage, before, after, track)  # moves the known-colour box
    outs += _safely("semantics", semantics, stage, after, track)
    outs += _safely("provenance", provenance, stage, fn, track)
    outs += _safely("numeric", normalization, stage, fn, before, after, contract, track.channel_order)
    if decl.labels is not None and stage not in decl.augmentations:  # mixup/label smoothing may move the label
        outs += _safely("semantics", lb.label_outcomes, stage, samples[0], samples[1], decl.fields, decl.labels)
    outs += _user(stage, *samples, probes)
    return outs


def _safely(category: str, probe: Callable[..., list[sp.Outcome]], *args: Any) -> list[sp.Outcome]:
    """A built-in probe that cannot read an unusual sample says so instead of crashing the trace."""
    try:
        return probe(*args)
    except Exception as exc:  # noqa: BLE001
        return [sp.Outcome(category, f"builtin:{category}", None, f"{category} probe could not run: {type(exc).__name__}: {exc}")]


def _findings(stage: str, outs: list[sp.Outcome], failed: dict[str, str], checked: dict[str, list[str]]) -> list[Check]:
    """One finding per category that had an applicable probe; a probe failing again after an earlier
    stage is a WARN ("still failing since ..."), so the FAIL marks where it started."""
    rows = []
    for cat in sp.CATEGORIES:
        applied = [o for o in outs if o.category == cat and o.ok is not None]
        if not applied:
            continue
        checked[cat].append(stage)
        new = [o for o in applied if o.ok is False and not o.unconfirmed and o.probe not in failed]
        again = [o for o in applied if o.ok is False and not o.unconfirmed and o.probe in failed]
        doubt = [o for o in applied if o.ok is False and o.unconfirmed]  # named, premise not confirmed: a WARN
        msgs = [o.message for o in new] + [f"{o.message} (failing since {failed[o.probe]})" for o in again] + \
               [f"{o.message}; not confirmed: {o.unconfirmed}" for o in doubt] + [o.message for o in applied if o.ok]
        evidence = {o.probe: o.evidence for o in applied}
        status = Status.FAIL if new else Status.WARN if again or doubt else Status.PASS
        first = new[0] if new else None
        kind = f"stage.{cat}" + (f".{first.subkind}" if first and first.subkind else "")
        rows.append(check(stage, kind, status, "; ".join(msgs), evidence,
                          expected=first.expected if first else "", observed=first.observed if first else "",
                          hint=_HINTS[cat] if first else ""))
        for o in new:
            failed[o.probe] = stage
    return rows


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _raised(stage: str, exc: BaseException, before: Any, seen: sp.Seen) -> Check:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {frame.filename}:{frame.lineno} in {frame.name}" if frame else ""
    ev = {"exception": type(exc).__name__, "message": str(exc)[:300], "location": at.strip(),
          "input": {"key": seen.image[0] or "sample", **seen.stats} if seen.image and seen.stats else type(before).__name__}
    return check(stage, "stage.raised", Status.FAIL, f"{_error(exc)}{at}", ev,
                 expected="the stage returns the next sample", observed=_error(exc),
                 hint="details['trace'] shows the sample as it entered this stage")


@dataclass
class _Walk:
    """The walk's state: what the probes carry between stages, the findings and trace rows so far, where each
    failing probe first failed and which stages checked each category."""

    track: sp.Track
    probes: dict[str, tuple[str, Probe]]
    contracts: dict[str, dict[str, dict[str, Any]]]
    declared: _Declared
    checks: list[Check] = field(default_factory=list)
    outputs: list[tuple[str, Any, bool]] = field(default_factory=list)  # (stage, sample after it, after an augmentation)
    unread: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    checked: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in sp.CATEGORIES})

    def start(self, sample: Any) -> tuple[Any, sp.Seen]:
        """The caller's sample copied, read, and recorded as the "(input)" row."""
        current = sp.clone(sample)
        seen = sp.look(current, self.declared.fields)
        self.rows.append(_row("(input)", sample, seen, self.track, []))
        self.outputs.append(("(input)", current, False))
        self._unread("(input)", seen)
        return current, seen

    def run(self, named: list[tuple[str, Callable]], current: Any, seen: sp.Seen) -> None:
        self.track.scales = [declared_scale(n, fn, self.contracts.get(n, {})) for n, fn in named]
        self.track.augmentations = self.declared.augmentations
        for i, (name, fn) in enumerate(named):
            self.track.at = i
            nxt = self.step(name, fn, current, seen)
            if nxt is None:
                break
            current, seen = nxt

    def step(self, name: str, fn: Callable, current: Any, seen: sp.Seen) -> tuple[Any, sp.Seen] | None:
        """Run one stage on a copy and probe it; the next sample, or None when the walk stops here."""
        try:
            after = fn(sp.clone(current))
        except Exception as exc:  # noqa: BLE001 - the user's stage raising is the finding
            self.checks.append(_raised(name, exc, current, seen))
            self.rows.append({"stage": name, "raised": _error(exc)})
            return None
        self.track.moves = None
        seen_after = None if after is None else sp.look(after, self.declared.fields)
        outs = _probe_stage(name, fn, (current, after), (seen, seen_after), self.track, self.probes,
                            self.contracts.get(name, {}), self.declared)
        if seen_after is not None:
            self.outputs.append((name, after, self.outputs[-1][2] or name in self.declared.augmentations))
            self._unread(name, seen_after)
        notes = [o.message for o in outs if o.ok is None]
        if seen_after is None:
            self.rows.append({"stage": name, "type": "NoneType", "notes": notes})
        else:
            self.rows.append(_row(name, after, seen_after, self.track, notes))
        self.checks.append(check(name, "stage.trace", Status.PASS, _describe(self.rows[-1]), {"row": len(self.rows) - 1}))
        self.checks += _findings(name, outs, self.failed, self.checked)
        return None if after is None or seen_after is None else (after, seen_after)

    def _unread(self, stage: str, seen: sp.Seen) -> None:
        for key, why in seen.unread.items():
            if key not in self.unread:
                self.unread[key] = why
                self.checks.append(check(stage, "stage.unread", Status.SKIPPED, f"{key} not checked: {why}", {"key": key}))


def _seed(seed: int) -> None:
    torch.default_generator.manual_seed(seed)  # CPU only: torch.manual_seed would queue a CUDA seed for later
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    np.random.seed(seed)
    random.seed(seed)


def _report(walk: _Walk, seed: int, names: list[str]) -> Report:
    """The walk's findings, then one SKIPPED finding per category no probe could check."""
    unverified = [c for c in sp.CATEGORIES if not walk.checked[c]]
    checks = walk.checks + [check("(all stages)", "stage.unverified", Status.SKIPPED, f"{c.upper()} not verified: {_MISSING[c]}")
                            for c in unverified]
    details = {"seed": seed, "stages": names, "trace": walk.rows, "checked": walk.checked, "unverified": unverified}
    effects = (f"none: each stage ran once on a copy of the sample with the global RNGs seeded ({seed}) and restored "
               "afterwards; state kept inside your stage objects is not restored")
    return compose(_NAME, checks, effects, details)
