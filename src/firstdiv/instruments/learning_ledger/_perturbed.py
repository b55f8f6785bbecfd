"""How the position counterfactuals (a later token changed: do earlier outputs move?) read the model's wiring rather than
its momentary state. They run the copy in eval mode (``eval_mode``): a batch norm shares batch statistics across
positions in train mode and dropout draws differ, neither of which wires a position to later tokens. And a leak too
small to stand out at the weights the model has now gets a second look (``at_perturbed_weights``): the same
counterfactual on a copy whose parameters carry noise of half their spread (at least 0.1), seeded. A model wired to see later positions (a
spatial gating unit without its causal mask, initialized near the identity) shows the leak as soon as its weights
leave their initial values; a causal model's earlier outputs stay put at any weights, and rounding in a causal
computation (a global stabilizer that cancels) does not grow into a leak."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from .._core.modes import set_mode
from .._core.task import Ctx

T = TypeVar("T")


def at_perturbed_weights(ctx: Ctx, run: Callable[[], T]) -> T | None:
    """``run()`` with ``ctx.work`` swapped for a perturbed deep copy (put back after); None when it cannot be copied."""
    work = ctx.work
    try:
        twin = copy.deepcopy(work)
    except Exception:  # noqa: BLE001 - an uncopyable model: no second look
        return None
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in twin.parameters():
            if p.is_floating_point() and p.numel() > 1:
                spread = max(0.5 * float(p.detach().float().std()), 0.1)
                p.add_(torch.randn(p.shape, generator=g).to(p) * spread)
    ctx.work = twin
    try:
        return run()
    finally:
        ctx.work = work


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """``model`` (the ledger's copy) in eval mode, every module's own mode put back on exit."""
    was = [(m, m.training) for m in model.modules()]
    set_mode(model, False)
    try:
        yield
    finally:
        for m, mode in was:
            m.training = mode
