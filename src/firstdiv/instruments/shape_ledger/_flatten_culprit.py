"""Deriving backward in ``shape_ledger``: which earlier layer changed the count a later layer disagrees with.

"mat1 and mat2 shapes cannot be multiplied" at a Linear after a flatten: ``in_features`` is compared with the
flattened C*H*W that arrived, the factorizations ``in_features`` admits given the recorded H, W (or C) say whether
the channel count or the spatial size differs, and the last earlier layer that set that quantity is the
``culprit`` (e.g. ``conv2``). Never repair the final Linear first.

API (for ``shape_ledger``):

- ``input_check(entries, entry) -> Check`` — the finding for an entry whose input disagrees with what its layer
  declares (``shape.flatten_mismatch`` or ``shape.mismatch``, with the culprit).
- ``functional_linear(rec, entries) -> Check | None`` — the same for a crash in ``F.linear`` in the model's forward.
"""

from __future__ import annotations

import math
from typing import Any

from ...report import Status
from .._core.checks import Check, check
from .._core.trace import Recorder
from ._geometry import AXES, Entry

_NEVER = "Never repair the final Linear first"


def _setter(entries: list[Entry], before: int, what: str) -> Entry | None:
    """The last entry before ``before`` that set the channel count ("C"), the spatial size ("spatial") or the
    feature count ("features")."""
    for e in reversed(entries[:before]):
        out, inp = e.observed_output or e.expected_output, e.observed_input
        if out is None:
            continue
        if what == "spatial" and len(out) >= 3 and len(inp) == len(out) and out[2:] != inp[2:]:
            return e
        if what == "C" and (e.declares == "C" or (e.declares == "features" and len(out) == 2)):
            return e
        if what == "features" and (e.declares == "features" or (out and inp and out[-1] != inp[-1])):
            return e
    return None


def _pooling_culprit(entries: list[Entry], before: int, implied: list[int]) -> Entry | None:
    """When more spatial positions arrive than ``in_features`` implies: the pooling layer between the last layer that
    changed the spatial size and the flatten whose output is not the implied size, or an ``nn.Identity`` there (a
    removed pooling layer, ``model.avgpool = nn.Identity()``)."""
    for e in reversed(entries[:before]):
        out, inp = e.observed_output, e.observed_input
        if out is None:
            continue
        if e.operation == "Identity":
            return e
        pooling = "Pool" in e.operation or e.operation.startswith(("adaptive_", "max_pool", "avg_pool"))
        if pooling and len(out) >= 3 and out[2:] != implied:
            return e
        if len(out) >= 3 and len(inp) == len(out) and out[2:] != inp[2:]:
            return None
    return None


def _culprit_name(e: Entry | None) -> str:
    return e.stage if e is not None else "inputs"


def _flatten_source(entries: list[Entry], linear: Entry) -> Entry | None:
    """The flatten whose output is what the Linear received (from an input of rank >= 3)."""
    for e in reversed(entries[:linear.index]):
        if e.flatten_start is not None and e.observed_output == linear.observed_input and len(e.observed_input) >= 3:
            return e
    return None


def _hypotheses(in_features: int, c: int, spatial: list[int], names: tuple[str, ...]) -> list[tuple[str, dict[str, int]]]:
    """What ``in_features`` implies if only C changed, then if only the spatial size changed (square for 2-d), each
    kept when ``in_features`` factorizes that way."""
    hypotheses = []
    if spatial and in_features % math.prod(spatial) == 0:
        hypotheses.append(("C", {"C": in_features // math.prod(spatial), **dict(zip(names, spatial))}))
    if in_features % c == 0 and spatial:
        area = in_features // c
        side = math.isqrt(area)
        if len(spatial) == 1:
            hypotheses.append(("spatial", {"C": c, names[0]: area}))
        elif len(spatial) == 2 and side * side == area:
            hypotheses.append(("spatial", {"C": c, names[0]: side, names[1]: side}))
    return hypotheses


def _backward(entries: list[Entry], linear: Entry, in_features: int) -> dict[str, Any] | None:
    """Why the arriving features differ from the ``in_features`` a Linear after a flatten expects: which of C or the
    spatial size differs (the factorizations ``in_features`` admits), and the last layer that set it."""
    src = _flatten_source(entries, linear)
    if src is None:
        return None
    flat = src.observed_input[src.flatten_start:]
    c, spatial = flat[0], flat[1:]
    names = AXES.get(len(spatial), tuple(f"S{i}" for i in range(len(spatial))))
    observed = {"C": c, **dict(zip(names, spatial))}
    hypotheses = _hypotheses(in_features, c, spatial, names)
    if not hypotheses:
        culprit = next((e for e in reversed(entries[:src.index]) if e.observed_output != e.observed_input), None)
        return {"flattened_from": src.observed_input, "flatten": src.stage, "observed": observed, "implied": None,
                "changed": "C and spatial", "culprit": _culprit_name(culprit)}
    pooling = None
    for i, (what, implied) in enumerate(hypotheses):  # a removed or changed pooling layer explains it exactly
        implied_spatial = [implied[n] for n in names]
        if what == "spatial" and math.prod(spatial) > math.prod(implied_spatial):
            pooling = _pooling_culprit(entries, src.index, implied_spatial)
            if pooling is not None:
                hypotheses.insert(0, hypotheses.pop(i))
                break
    changed, implied = hypotheses[0]
    culprit = pooling or _setter(entries, src.index, changed)
    out = {"flattened_from": src.observed_input, "flatten": src.stage, "observed": observed, "implied": implied,
           "changed": changed, "culprit": _culprit_name(culprit),
           "culprit_operation": culprit.operation if culprit is not None else "the model inputs"}
    if len(hypotheses) > 1:
        out["also_consistent"] = {"changed": hypotheses[1][0], "implied": hypotheses[1][1],
                                  "culprit": _culprit_name(_setter(entries, src.index, hypotheses[1][0]))}
    return out


def _formula(d: dict[str, int]) -> str:
    return "*".join(str(v) for v in d.values())


def _axes(d: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _what_culprit_did(back: dict[str, Any]) -> str:
    if back["changed"] == "C":
        return "set C"
    if back.get("culprit_operation") == "Identity":
        return "is an nn.Identity where a pooling layer would reduce the spatial size"
    if "Pool" in back.get("culprit_operation", "") or back.get("culprit_operation", "").startswith("adaptive_"):
        return "is the pooling layer whose output size differs"
    return "set the spatial size"


def _flatten_check(e: Entry, in_features: int, back: dict[str, Any]) -> Check:
    """A Linear after a flatten whose ``in_features`` is not the arriving C*H*W: say which quantity changed where."""
    arriving = e.observed_input[-1]
    ev = {"in_features": in_features, "arriving_features": arriving, **back}
    culprit = back["culprit"]
    if back["implied"] is None:
        return check(e.stage, "shape.flatten_mismatch", Status.FAIL,
                     f"{e.stage}: in_features={in_features} is not C*H*W for the arriving {_axes(back['observed'])}; "
                     f"last layer that changed the geometry: {culprit}", ev,
                     expected=f"{in_features} features", observed=f"{arriving} features",
                     hint=f"{_NEVER}: find which change upstream of {culprit} was intended")
    also = back.get("also_consistent")
    hint = (f"{_NEVER}: {e.stage} expects {in_features} = {_formula(back['implied'])} features but "
            f"{arriving} = {_formula(back['observed'])} arrive; {culprit} "
            f"{_what_culprit_did(back)} "
            f"({_axes(back['observed'])} where in_features implies {_axes(back['implied'])})"
            + (f"; also consistent: {_axes(also['implied'])} (last change at {also['culprit']})" if also else "")
            + f". Changing in_features is correct only if the change at {culprit} was intended")
    return check(e.stage, "shape.flatten_mismatch", Status.FAIL,
                 f"{e.stage}: in_features={in_features} but the flatten at {back['flatten']} delivers "
                 f"{arriving} = {_formula(back['observed'])}; culprit {culprit}", ev,
                 expected=f"{in_features} features ({_formula(back['implied'])})",
                 observed=f"{arriving} features ({_formula(back['observed'])})", hint=hint)


def input_check(entries: list[Entry], e: Entry) -> Check:
    """The input disagrees with what the layer declares: a flatten mismatch, or the last layer that set the count."""
    shape = e.observed_input
    in_features = e.extra.get("in_features")
    back = _backward(entries, e, in_features) if in_features is not None and shape else None
    if back is not None:
        return _flatten_check(e, in_features, back)
    what = "features" if e.declares == "features" or e.operation.startswith("LayerNorm") else "C"
    culprit = _culprit_name(_setter(entries, e.index, what))
    ev = {"observed_input": shape, "operation": e.operation, "culprit": culprit}
    hint = f"the last layer that set {what} before {e.stage} is {culprit}; repair there if that change was not intended"
    if "in_channels" in e.extra and len(shape) >= 3 and shape[-1] == e.extra["in_channels"] != shape[1]:
        hint = ("the batch looks channels-last (NHWC): permute it to channels-first (x.permute(0, 3, 1, 2)); never "
                "change in_channels to match an NHWC batch")
    return check(e.stage, "shape.mismatch", Status.FAIL, f"{e.stage} {e.operation}: {e.problem}", ev,
                 expected=e.problem.split(" but ")[0], observed=f"input {shape}", hint=hint)


def functional_linear(rec: Recorder, entries: list[Entry]) -> Check | None:
    """A crash in ``F.linear`` called in the model's own forward: derive backward like for an nn.Linear."""
    fail = rec.failure
    if fail is None or fail["op"] != "linear" or len(fail["input_shapes"]) < 2:
        return None
    x, w = fail["input_shapes"][0], fail["input_shapes"][1]
    stage = f"op:linear@{fail['module']}"
    entry = Entry(len(entries), stage, f"linear({w[-1]}->{w[0]})", x, x[:-1] + [w[0]],
                  f"in_features={w[-1]} but {x[-1]} features arrive (last axis)", "features", extra={"in_features": w[-1]})
    found = input_check(entries + [entry], entry)
    return found if found.finding.check == "shape.flatten_mismatch" else None
