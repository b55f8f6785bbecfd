"""Whether an exactly-zero gradient is a cancellation or no signal at all: a counterfactual on the program's own graph.

A parameter's gradient is the sum of what each of its uses contributes (one per call of its module: a discriminator
scoring a real and a generated batch) over every example and position a use broadcasts it to. A zero means either
that no signal reaches its uses (a dead ReLU, a rounding, a zero factor, a custom backward returning zeros: the path
carries nothing) or that the signals reaching them sum to zero at these weights (the hinge loss
``relu(1 - D(real)).mean() + relu(1 + D(fake)).mean()`` with every hinge active gives D's final bias ``-1 + 1``, a
WGAN critic's final bias always). The two are told apart on the loss's own autograd graph: the controlled backward is
run again with the gradient arriving at each use (the output gradient of every autograd node that takes the parameter
as a direct input) multiplied elementwise by seeded positive factors in [0.5, 1.5]. A sum that cancels no longer does;
a path that carries nothing still carries nothing, and a node whose own backward gives the parameter nothing
(multiplied by zero) still gives nothing. Only the parameter's own uses are reweighted: a cancellation further down
the graph (``x - x``) is not taken for one. Nothing is written to ``.grad``; the RNGs are not drawn from.
"""

from __future__ import annotations

from typing import Any

import torch

from ...report import Status
from .checks import Check, check

__all__ = ["cancelled", "cancelled_check"]

_SEED = 20261206


def _uses(loss: torch.Tensor, params: list[torch.Tensor]) -> dict[int, list[Any]]:
    """id(param) -> the autograd nodes of ``loss``'s graph that take it as a direct input (its AccumulateGrad)."""
    wanted = {id(p) for p in params}
    out: dict[int, list[Any]] = {i: [] for i in wanted}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for nxt, _ in getattr(node, "next_functions", ()):
            var = getattr(nxt, "variable", None)
            if var is not None and id(var) in wanted:
                out[id(var)].append(node)
            elif nxt is not None:
                stack.append(nxt)
    return out


def _reweigh(generator: torch.Generator) -> Any:
    def hook(grad_outputs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(g * (0.5 + torch.rand(g.shape, generator=generator, dtype=torch.float64)).to(g.dtype).to(g.device)
                     if torch.is_tensor(g) and g.is_floating_point() and not g.is_sparse else g for g in grad_outputs)
    return hook


def cancelled(loss: torch.Tensor, params: list[torch.Tensor]) -> dict[int, tuple[bool | None, int]]:
    """id(param) -> (verdict, uses): True when reweighting the gradient arriving at each of its uses makes its
    gradient nonzero (its zero is a cancellation), False when it stays exactly zero (no signal reaches it), None when
    the counterfactual could not run (the graph was freed, a hook refused); ``loss``'s graph must still be there."""
    out: dict[int, tuple[bool | None, int]] = {id(p): (None, 0) for p in params}
    if not params or not torch.is_tensor(loss) or loss.grad_fn is None:
        return out
    uses = _uses(loss, params)
    generator = torch.Generator().manual_seed(_SEED)
    handles = []
    try:
        for node in {n for nodes in uses.values() for n in nodes}:
            handles.append(node.register_prehook(_reweigh(generator)))
        target = (loss if loss.numel() == 1 else loss.sum()).reshape(())
        found = torch.autograd.grad(target, params, allow_unused=True, retain_graph=True)
    except RuntimeError:
        return out
    finally:
        for h in handles:
            h.remove()
    for p, g in zip(params, found, strict=True):
        nonzero = g is not None and bool(torch.isfinite(g).all()) and bool(g.ne(0).any())
        out[id(p)] = (nonzero, len(uses[id(p)]))
    return out


def cancelled_check(where: str, label: str, ev: dict[str, Any], uses: int, kind: str = "reachability.zero_gradient") -> Check:
    """The WARN for a parameter whose exactly-zero gradient is a cancellation: the signal reaches its uses."""
    ev.update(cause="cancelled", uses=uses, cancels=True)
    return check(where, kind, Status.WARN,
                 f"{label}: its gradient is exactly zero, but the loss's signal reaches its {uses} use(s): with the "
                 "gradient arriving at each use reweighted (seeded factors 0.5..1.5) it is nonzero, so what its uses "
                 "contribute cancels at these weights (loss terms or examples that balance: a hinge or WGAN critic's "
                 "final bias); not a cut path", ev)
