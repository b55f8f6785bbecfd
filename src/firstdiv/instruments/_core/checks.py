"""What the instruments share: a check with its divergence, the two ways checks become a report
(:func:`compose` for independent checks, :func:`walk` then :func:`compose` for ordered links), the
per-parameter gradient vocabulary (tied weights once, gradient state, rounding), and the leaves an
autograd graph reaches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...report import Divergence, Finding, Report, Status


@dataclass
class Check:
    """A finding plus, for failures, what was expected and observed (becomes the Divergence)."""

    finding: Finding
    expected: Any = ""
    observed: Any = ""
    hint: str = ""


@dataclass
class Collected:
    """The checks one probe gathered, its details, and why it could not run ('' when it ran)."""

    checks: list[Check] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


def check(where: str, kind: str, status: Status | str, message: str, evidence: dict | None = None, *,
          expected: Any = "", observed: Any = "", hint: str = "") -> Check:
    return Check(Finding(where, kind, Status(status), message, evidence or {}), expected, observed, hint)


def compose(instrument: str, checks: list[Check], side_effects: str, details: dict, reason: str = "", *,
            none_checked: str = "", skipped_warns: bool = False,
            diverges: Callable[[Check], bool] | None = None) -> Report:
    """Status from the findings (FAIL > WARN > PASS); the first FAIL becomes the first divergence.

    ``reason`` makes the report SKIPPED. ``none_checked``: when every check is SKIPPED the report is SKIPPED
    too, its reason ``none_checked`` followed by each check's message. ``skipped_warns``: a SKIPPED check
    makes the report WARN when nothing failed (a link that could not run leaves the chain unproven).
    ``diverges``: which FAIL checks may become the divergence (default every one): the first FAIL check it
    accepts is the divergence, while any FAIL still makes the report FAIL (e.g. summary rows that FAIL
    because an item below them does, the item being the divergence)."""
    findings = tuple(c.finding for c in checks)
    failing = [c for c in checks if c.finding.status is Status.FAIL]
    first = next((c for c in failing if diverges is None or diverges(c)), None)
    if none_checked and checks and all(f.status is Status.SKIPPED for f in findings):
        reason = f"{none_checked}: " + "; ".join(f.message for f in findings)
    warning = (Status.WARN, Status.SKIPPED) if skipped_warns else (Status.WARN,)
    if reason:
        status = Status.SKIPPED
    elif failing:
        status = Status.FAIL
    elif any(f.status in warning for f in findings):
        status = Status.WARN
    else:
        status = Status.PASS
    div = None
    if first is not None:
        div = Divergence(first.finding.where, first.finding.check, first.expected, first.observed, first.hint)
    return Report(instrument, status, div, findings, side_effects, reason, details)


def not_reached(where: str, why: str) -> Check:
    """A link that did not run: SKIPPED ``not_reached``, its message ``not reached: <why>``."""
    return check(where, "not_reached", Status.SKIPPED, f"not reached: {why}")


def walk(links: Iterable[tuple[str, Callable[[], Check]]]) -> list[Check]:
    """Run ordered links (``(where, run)``, each ``run()`` giving that link's check) and stop at the first FAIL:
    every later link becomes a SKIPPED ``not_reached`` check naming the link that failed."""
    out: list[Check] = []
    failed = ""
    for where, run in links:
        if failed:
            out.append(not_reached(where, f"an earlier link failed ({failed})"))
            continue
        out.append(run())
        if out[-1].finding.status is Status.FAIL:
            failed = out[-1].finding.where
    return out


def reached(checks: list[Check]) -> dict[str, str]:
    """``{where: status}`` of walked links, ``"not reached"`` for those after the first FAIL."""
    return {c.finding.where: "not reached" if c.finding.check == "not_reached" else c.finding.status.value for c in checks}


def unique_params(model: nn.Module) -> list[tuple[nn.Parameter, list[str]]]:
    """Each parameter object once, in ``named_parameters`` order, with every name it has (tied weights)."""
    seen: dict[int, tuple[nn.Parameter, list[str]]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        seen.setdefault(id(p), (p, []))[1].append(name)
    return list(seen.values())


def label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} (tied: also {', '.join(names[1:])})"


def norm(t: torch.Tensor) -> float:
    return float(t.detach().double().norm()) if t.numel() else 0.0


def grad_state(g: torch.Tensor | None) -> tuple[str, float | None]:
    """('none' | 'nonfinite' | 'zero' | 'nonzero', norm or None) for a gradient tensor."""
    if g is None:
        return "none", None
    if g.is_sparse:
        g = g.coalesce().values()
    if g.is_floating_point() and not bool(torch.isfinite(g).all()):
        return "nonfinite", None
    n = norm(g)
    return ("zero" if n == 0.0 else "nonzero"), n


_ROUNDING_MARGIN = 64.0  # momentum/averaging can shrink a step well below lr*|grad|; below this margin, silence


def below_rounding(before: torch.Tensor, grad: torch.Tensor, group: dict | None) -> bool:
    """True when the parameter is owned with lr > 0 but ``lr * |grad|`` is within 64x of float rounding of every
    element, so even a correct step may leave it bit-identical (e.g. a conv bias followed by BatchNorm)."""
    if group is None or not before.is_floating_point() or float(group["lr"]) == 0.0:
        return False
    step = float(group["lr"]) * grad.to_dense().detach().abs().to(before.dtype)
    return not bool((step > _ROUNDING_MARGIN * torch.finfo(before.dtype).eps * before.detach().abs()).any())


def graph_leaves(roots: list[Any]) -> dict[int, torch.Tensor]:
    """Leaf tensors (``AccumulateGrad.variable``) reachable from the given ``grad_fn`` nodes, by id."""
    stack, seen, leaves = [r for r in roots if r is not None], set(), {}
    while stack:
        node = stack.pop()
        if node in seen:  # the nodes themselves, not their ids: a freed node's id can be reused
            continue
        seen.add(node)
        var = getattr(node, "variable", None)
        if isinstance(var, torch.Tensor):
            leaves[id(var)] = var
        stack.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)
    return leaves


def controlled_grads(loss: torch.Tensor, params: list[nn.Parameter], checks: list[Check]) -> dict[int, Any]:
    """Gradients of ``loss`` (summed if not a scalar) for ``params`` by ``torch.autograd.grad``, by id (no ``.grad``
    written; the graph kept); a backward that raises appends a SKIPPED ``reachability.controlled_backward``."""
    if not params or not loss.requires_grad:
        return {}
    target = loss if loss.numel() == 1 else loss.sum()
    try:
        found = torch.autograd.grad(target.reshape(()), params, allow_unused=True, retain_graph=True)
    except RuntimeError as exc:
        msg = str(exc).splitlines()[0][:300]
        checks.append(check("loss", "reachability.controlled_backward", Status.SKIPPED,
                            f"controlled backward failed, gradients unknown: {msg}"))
        return {}
    return {id(p): g for p, g in zip(params, found)}


def nested_grads(loss: torch.Tensor, params: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """The nonzero gradients a full ``backward`` writes to ``params``' ``.grad`` (``.grad`` put back afterwards; the
    graph kept). A custom autograd Function that rebuilds its graph in its own backward (reversible layers,
    checkpointing) writes them there and returns them to nobody: ``autograd.grad`` misses them, and skips the
    function altogether when none of its inputs leads to a requested tensor."""
    if not params or not torch.is_tensor(loss) or not loss.requires_grad:
        return {}
    # every leaf the backward writes, not only ``params``: a tensor the loss reads from loss_fn's own closure (ProxyNCA's
    # proxies, owned by the user's optimizer) gets its .grad back too
    touched = list({**graph_leaves([loss.grad_fn]), **{id(p): p for p in params}}.values())
    saved = [t.grad for t in touched]
    try:
        for p in params:
            p.grad = None
        (loss if loss.numel() == 1 else loss.sum()).reshape(()).backward(retain_graph=True)
        return {id(p): p.grad.detach().clone() for p in params if p.grad is not None and bool(p.grad.ne(0).any())}
    except RuntimeError:
        return {}
    finally:
        for t, g in zip(touched, saved):
            t.grad = g
