"""What a failing check of :func:`~firstdiv.instruments.attention_check.attention_check` says is wrong, in the
divergence's ``kind`` and ``observed``.

With the user's model (``module="blocks.0.attn"``) every finding's ``where`` is that module path and its ``kind`` the
diagnosis (``attention.missing_scale``, ``attention.wrong_scale``, ``attention.future_visible``,
``attention.padding_visible``, ``attention.head_split_merge``, ``attention.softmax_axis``, ``attention.eval_dropout``
...); the level (``LEVEL_1``..``LEVEL_4``) moves to ``evidence['level']``. With the attention module alone (its path in
a model unknown) ``where`` stays the level and ``kind`` the level's check, as before; the diagnosis is then in
``observed`` and ``evidence['diagnosis']``.
"""

from __future__ import annotations

from ...report import Finding, Status
from .._core.checks import Check
from ._levels import FORBIDDEN, REFERENCE, ROWS
from ._probes import AXIS, CAUSALITY

MISSING_SCALE, WRONG_SCALE = "attention.missing_scale", "attention.wrong_scale"
FUTURE, PADDING, MASKED = "attention.future_visible", "attention.padding_visible", "attention.masked_key_visible"
HEADS, SOFTMAX_AXIS = "attention.head_split_merge", "attention.softmax_axis"


def _reference(f: Finding, observed: str) -> tuple[str, str]:
    fit, want = f.evidence.get("scale_fit"), f.evidence.get("scale_reference")
    if not fit or want is None:
        return f.check, observed
    meant = "scale=" if f.evidence.get("scale_declared") else "1/sqrt(Dh)="
    if fit["scale"] == "1":
        return MISSING_SCALE, f"scores are q·k with scale 1 ({meant}{want:.4g} missing); {observed}"
    return WRONG_SCALE, f"scores are q·k scaled by {fit['scale']}={fit['value']:.4g}, not {meant}{want:.4g}; {observed}"


def _forbidden(f: Finding, observed: str) -> tuple[str, str]:
    by = f.evidence.get("forbidden_by", "")
    first = f.evidence.get("first")
    at = f"query {first[2]} attends to key {first[3]}" if first else "a forbidden key gets weight"
    if by.startswith("future"):
        return FUTURE, f"the causal mask lets a query see future keys: {at} with weight {observed}"
    if by.startswith("padding"):
        return PADDING, f"padding keys are attended: {at} (batch {first[0]}) with weight {observed}"
    return MASKED, f"a masked key is attended: {at} with weight {observed}"


def _axes(f: Finding, observed: str) -> tuple[str, str]:
    probe = f.evidence.get("probe", "")
    what = {"merge_split": "heads split/merged with the wrong reshape/permute: merge(split(x)) != x",
            "batch_isolation": "heads split/merged through the batch axis: one batch element changes another",
            "time_isolation": "heads split/merged with the wrong reshape/permute: values move across time"}.get(probe, "")
    return (HEADS, f"{what}; {observed}") if what else (f.check, observed)


def diagnose(c: Check) -> tuple[str, str]:
    """(kind naming the problem, observed saying it) for a failing check; the check's own kind otherwise."""
    f = c.finding
    observed = str(c.observed)
    if f.status is not Status.FAIL:
        return f.check, observed
    if f.check == REFERENCE:
        return _reference(f, observed)
    if f.check == FORBIDDEN:
        return _forbidden(f, observed)
    if f.check == CAUSALITY:
        return FUTURE, f"a future token changes an earlier output: {observed}"
    if f.check == AXIS:
        return _axes(f, observed)
    if f.check == ROWS and f.evidence.get("columns_sum_to_1"):
        return SOFTMAX_AXIS, f"softmax taken over the query axis (columns sum to 1): {observed}"
    return f.check, observed


def relabel(checks: list[Check], path: str | None) -> list[Check]:
    """Every finding at the module ``path`` with its diagnosis as kind (level in the evidence); without a path, the
    level stays ``where`` and the diagnosis goes to ``observed`` and ``evidence['diagnosis']``."""
    out = []
    for c in checks:
        f = c.finding
        kind, observed = diagnose(c)
        if path is None:
            evidence = {**f.evidence, "diagnosis": kind} if f.status is Status.FAIL else f.evidence
            finding = Finding(f.where, f.check, f.status, f.message, evidence)
        else:
            finding = Finding(path, kind, f.status, f.message, {**f.evidence, "level": f.where, "check": f.check})
        out.append(Check(finding, c.expected, observed if f.status is Status.FAIL else c.observed, c.hint))
    return out
