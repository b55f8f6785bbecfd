"""Parameters the program writes itself by rebinding them: a model whose forward assigns a new ``nn.Parameter`` to its
own attribute (an EMA codebook, ``self._ema_w = nn.Parameter(self._ema_w * decay + ...)``). Such a tensor is updated
by the program, not by gradients, so an optimizer slot holding its first object, or no gradient path from the loss,
is its design and not a broken link. Read from the program: the slot holds another object after one forward."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ...report import Status
from .batch import forward
from .checks import Check, check
from .modes import set_mode


def rebound(model: nn.Module, params: Iterable[tuple[nn.Parameter, list[str]]]) -> set[str]:
    """Names whose slot in ``model`` now holds another object than the parameter captured in ``params``."""
    now = dict(model.named_parameters())
    return {names[0] for p, names in params if names[0] in now and now[names[0]] is not p}


def rebound_in_forward(model: nn.Module, batch: Any) -> set[str]:
    """Names of the parameters one training forward of a deep copy replaces by new objects; empty when it cannot run."""
    try:
        twin = set_mode(copy.deepcopy(model), True)
        before = [(p, [n]) for n, p in twin.named_parameters()]
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            forward(twin, batch)
    except Exception:  # noqa: BLE001 - user code: no evidence either way
        return set()
    return rebound(twin, before)


def written_by_program(checks: list[Check], names: set[str]) -> list[Check]:
    """Each FAIL at a parameter in ``names`` becomes a WARN saying the program rewrites that parameter itself."""
    out = []
    for c in checks:
        f = c.finding
        if f.status is Status.FAIL and f.where in names:
            c = check(f.where, f.check, Status.WARN, f"{f.message}; but the model's own forward replaces {f.where} with a "
                      "new parameter object (an EMA-style update written by the program): not trained by gradients, so "
                      "not confirmed as a defect", f.evidence)
        out.append(c)
    return out
