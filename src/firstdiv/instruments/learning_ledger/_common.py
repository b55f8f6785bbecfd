"""Shared pieces of the learning ledger: the links, a link's check (a :class:`Check` named by the link; its
kind is the link's name in lower case unless it fails) and small tensor helpers (the context
every link reads and task inference are in :mod:`firstdiv.instruments._core.task`). The links themselves
live in ``_task``, ``_objective`` and ``_links``; ``learning_ledger`` composes them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ...report import Status
from .._core.batch import Batch, rebuild
from .._core.checks import Check, check
from .._core.task import Ctx, is_int

LINKS = ("TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE", "CAPABILITY")


def passed(link: str, message: str, evidence: dict[str, Any]) -> Check:
    return check(link, link.lower(), Status.PASS, message, evidence)


def warned(link: str, message: str, evidence: dict[str, Any], kind: str = "") -> Check:
    """A WARN of ``link``; ``kind`` names a fault the link names without confirming it (evidence before FAIL)."""
    return check(link, kind or link.lower(), Status.WARN, message, evidence)


def skipped_link(link: str, message: str, evidence: dict[str, Any]) -> Check:
    return check(link, link.lower(), Status.SKIPPED, message, evidence)


def failed(link: str, kind: str, message: str, evidence: dict[str, Any], *, expected: Any, observed: Any,
           hint: str) -> Check:
    return check(link, kind, Status.FAIL, message, evidence, expected=expected, observed=observed, hint=hint)


def g4(x: Any) -> str:
    """A number for a message: 4 significant digits."""
    return f"{float(x):.4g}"


def first_tensor(x: Any) -> torch.Tensor | None:
    if torch.is_tensor(x):
        return x
    values = x.values() if isinstance(x, Mapping) else x if isinstance(x, (list, tuple)) else ()
    for v in values:
        t = first_tensor(v)
        if t is not None:
            return t
    return None


def take(x: Any, index: slice) -> Any:
    """Slice every tensor in ``x`` (nested dicts/lists) along its first dimension."""
    if torch.is_tensor(x):
        return x[index] if x.dim() > 0 else x
    if isinstance(x, Mapping):
        return {k: take(v, index) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return rebuild(x, (take(v, index) for v in x))
    return x


def take_batch(b: Batch, index: slice) -> Batch:
    return Batch(take(b.inputs, index), take(b.targets, index), b.as_kwargs)


def batch_size(b: Batch) -> int | None:
    t = first_tensor(b.targets) if b.targets is not None else None
    t = t if t is not None and t.dim() > 0 else first_tensor(b.inputs)
    return int(t.shape[0]) if t is not None and t.dim() > 0 else None


def supervised(ctx: Ctx) -> torch.Tensor | None:
    """Boolean mask of target elements that count (not ``ignore_index``), for integer targets."""
    t = ctx.batch.targets
    return (t != ctx.ignore_index) if is_int(t) else None


def isclose(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-6) -> bool:
    return math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def to_logits_2d(ctx: Ctx, outputs: torch.Tensor) -> torch.Tensor:
    """Outputs with the class axis moved last and flattened: ``[elements, K]``."""
    assert ctx.class_dim is not None
    return outputs.movedim(ctx.class_dim, -1).reshape(-1, outputs.shape[ctx.class_dim])


def manual_ce(ctx: Ctx, outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Cross-entropy of ``outputs`` read as raw logits, mean over supervised elements (NaN when none)."""
    with torch.no_grad():
        z = to_logits_2d(ctx, outputs.float())
        return float(torch.nn.functional.cross_entropy(z, targets.reshape(-1).long(), ignore_index=ctx.ignore_index))


def sparse_in(x: Any) -> str | None:
    """The layout of the first sparse tensor in ``x`` (nested tuples, lists and dicts), else None."""
    if torch.is_tensor(x):
        return None if x.layout is torch.strided else str(x.layout).replace("torch.", "")
    items = x.values() if isinstance(x, Mapping) else x if isinstance(x, (tuple, list)) else ()
    return next((found for v in items if (found := sparse_in(v))), None)
