"""The cheap invariants of the learning chain, measured on one optimizer step of the real run.

A check step's measurement is taken around one ``optimizer.step()``: before it, the facts of the gradients
(missing, non-finite) and a copy of the trainable parameters; after it, the size of that one step's update per
parameter. Everything is read under ``torch.no_grad()`` from detached views, so no version counter moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Event", "Measurement", "grad_facts", "norm_of", "ownership", "snapshot", "update_sizes"]


def norm_of(t: torch.Tensor) -> float:
    """The 2-norm of a dense, sparse or complex tensor, in float32, as a Python float."""
    t = t.detach()
    if t.is_sparse:
        t = t.coalesce().values()
    if t.is_complex():
        t = torch.view_as_real(t)
    return float(torch.linalg.vector_norm(t, dtype=torch.float32))


@dataclass(frozen=True)
class Event:
    """One broken (or doubtful) invariant, first seen at ``step``."""

    step: int
    kind: str
    where: str
    status: str  # "FAIL" or "WARN"
    message: str
    expected: Any = None
    observed: Any = None
    hint: str = ""


@dataclass
class Measurement:
    """What one check step saw: gradient facts before the optimizer step and update sizes after it."""

    missing_grad: list[str] = field(default_factory=list)
    held_trainable: int = 0
    closure: bool = False  # the step was given a closure (LBFGS): gradients come inside the step
    nonfinite_grad: list[tuple[str, float]] = field(default_factory=list)
    moved: dict[str, bool] = field(default_factory=dict)
    ratio: dict[str, float] = field(default_factory=dict)
    dims2: set[str] = field(default_factory=set)
    training: bool = True
    before: dict[str, torch.Tensor] = field(default_factory=dict)
    graded: set[str] = field(default_factory=set)  # every parameter with a gradient at the measured step


def ownership(named: list[tuple[str, torch.nn.Parameter]], held: set[int], n_held: int,
              frozen: dict[int, str], declared: bool) -> list[tuple[str, str, str, str]]:
    """``(kind, where, status, message)`` for parameters frozen without a declaration and optimizer parameters that are
    not the model's (trainable parameters no optimizer holds: :mod:`._unowned`)."""
    out = []
    in_model = {id(p) for _, p in named}
    for name, p in named:
        if id(p) in frozen:
            continue
        if not p.requires_grad:  # trainable but unowned: ownership.unowned, judged with its evidence (._unowned)
            status = "FAIL" if declared else "WARN"
            out.append(("ownership.undeclared_frozen", name, status,
                        f"{name} has requires_grad=False but is not declared in frozen="))
    extra = n_held - len(held & in_model)
    if extra:
        out.append(("ownership.foreign", "optimizer", "WARN",
                    (f"the optimizer holds {extra} tensor(s) that are not parameters of the model (a learnable "
                     "temperature outside the model is fine; a stale copy of a rebuilt model is not)")))
    return out


def grad_facts(named: list[tuple[str, torch.nn.Parameter]], held: set[int], m: Measurement) -> None:
    """Missing and non-finite gradients of the parameters the optimizer is about to update."""
    with torch.no_grad():
        for name, p in named:
            if id(p) not in held or not p.requires_grad:
                continue
            m.held_trainable += 1
            g = p.grad
            if g is None:
                m.missing_grad.append(name)
                continue
            norm = norm_of(g)
            if not math.isfinite(norm):
                m.nonfinite_grad.append((name, norm))


def snapshot(named: list[tuple[str, torch.nn.Parameter]], held: set[int], frozen: dict[int, str]) -> dict[str, torch.Tensor]:
    """Copies of the parameters an update could move (held by the optimizer, or declared frozen)."""
    with torch.no_grad():
        return {name: p.detach().clone() for name, p in named if id(p) in held or id(p) in frozen}


def update_sizes(named: list[tuple[str, torch.nn.Parameter]], m: Measurement) -> None:
    """Per parameter: did this step move it, and ``||delta|| / ||weight||`` (weights with >= 2 dims and a
    non-zero norm only: a zero-initialised bias has no meaningful ratio)."""
    with torch.no_grad():
        for name, p in named:
            old = m.before.get(name)
            if old is None:
                continue
            new = p.detach()
            delta = norm_of(new - old)
            m.moved[name] = delta > 0 or not math.isfinite(delta)
            if old.dim() >= 2:
                m.dims2.add(name)
                scale = norm_of(old)
                if scale > 0 and math.isfinite(scale):
                    m.ratio[name] = delta / scale if math.isfinite(delta) else math.inf
    m.before = {}
