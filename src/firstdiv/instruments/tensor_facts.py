"""The first rung's assertion (appendix: "print / assert tensor facts"): the loss on the known batch is a
finite scalar tensor, read from the evidence packet that was captured before anything else ran.

It reads the packet's report only, so it has no side effects of its own; ``diagnose`` runs it right after
``evidence_packet``.
"""

from __future__ import annotations

import math
from typing import Any

from ..report import Divergence, Finding, Report, Status, skipped
from ._core.batch import LOSS_CONTRACT

__all__ = ["tensor_facts"]

_NAME = "tensor_facts"
_ASSERTED = {"asserted": ["the loss on the known batch is a finite scalar tensor"]}


def tensor_facts(packet: Report) -> Report:
    """PASS when the packet's loss is a finite 0-d floating-point tensor, FAIL naming what it is otherwise,
    SKIPPED with the packet's own note when the packet has no loss."""
    loss = packet.details.get("packet", {}).get("loss")
    if loss is None:
        note = (packet.details.get("not_captured") or {}).get("loss", "the packet has no loss section")
        return skipped(_NAME, f"no loss to assert on ({note}); the later instruments localize it")
    value, problem = loss.get("value"), loss.get("problem")
    seen = {"value": value, "requires_grad": loss.get("requires_grad"), "grad_fn": loss.get("grad_fn")}
    if problem and "returned None" in problem:  # loss_fn computes nothing from what it is handed: not checkable
        return Report(_NAME, Status.SKIPPED, reason=f"not checked: {problem} on the packet's batch (a loss_fn that reads "
                      "a loss stored elsewhere gives nothing on a copy)", details=dict(_ASSERTED))
    if problem:  # the evidence's loss_fn, not the program: a loop backpropagates a scalar (or reduces this one first)
        return Report(_NAME, Status.SKIPPED, reason=f"not checked: {problem} on the packet's batch; {LOSS_CONTRACT}",
                      details=dict(_ASSERTED))
    if value is None or not math.isfinite(value):
        return _failed("facts.nonfinite_loss", "a finite loss on the known batch", f"loss = {value}", seen)
    return Report(_NAME, Status.PASS, findings=(Finding("loss", "facts.loss_finite", Status.PASS,
                  f"loss {value:.6g} is a finite scalar (requires_grad {seen['requires_grad']}, grad_fn {seen['grad_fn']})",
                  seen),), details=dict(_ASSERTED))


def _failed(kind: str, expected: str, observed: str, seen: dict[str, Any]) -> Report:
    div = Divergence("loss", kind, expected, observed, "read the evidence packet's loss section; see HYPOTHESES")
    return Report(_NAME, Status.FAIL, div, (Finding("loss", kind, Status.FAIL, f"{expected} expected; {observed}", seen),),
                  details=dict(_ASSERTED))
