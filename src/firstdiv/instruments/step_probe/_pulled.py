"""``step.soft_update_reversed``: after the optimizer's step, the user's ``train_step`` writes the trained parameters
again, each exactly ``p + tau * (q - p)`` for the same-shaped parameter ``q`` of a target network (a module the step
reaches and forwards, which the optimizer does not own), while that network never moves: a Polyak/soft update with
its target and source swapped, so training is dragged back toward a frozen copy. Measured on the user's own calls: a
post-step hook keeps each trained parameter's value after the last step, forward pre-hooks count the candidate
networks' calls; all removed on exit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, check
from .._core.closure import innermost

#: how exactly the write must be an interpolation toward the target (relative residual, plus this many roundings of
#: the written values), and the largest tau
_RESIDUAL, _ULPS, _MAX_TAU = 1e-3, 4, 0.5


class PullWatch:
    """The trained parameters' values after the optimizer's last step, the candidate target networks' values before
    the calls and how often they ran a forward; ``found()`` after the calls."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, reached: Iterable[Any]) -> None:
        owned = {id(p) for g in optimizer.param_groups for p in g["params"]} if optimizer is not None else set()
        mine = {id(p) for p in model.parameters()}
        self.model, self.opt = model, optimizer
        self.params = [(n, p) for n, p in model.named_parameters() if id(p) in owned]
        shapes = {tuple(p.shape) for _, p in self.params}
        self.targets = _candidates(reached, model, mine | owned, shapes)
        self.start = {id(q): q.detach().clone() for m in self.targets for q in m.parameters()}
        self.runs = {id(m): 0 for m in self.targets}
        self.after_step: dict[int, torch.Tensor] = {}
        self.handles: list[Any] = []

    def __enter__(self) -> Self:
        if self.opt is not None and self.targets and self.params:
            self.handles.append(innermost(self.opt).register_step_post_hook(self._stepped))
            self.handles += [m.register_forward_pre_hook(lambda mod, _i: self.runs.__setitem__(id(mod), self.runs[id(mod)] + 1))
                             for m in self.targets]
        return self

    def __exit__(self, *_: object) -> None:
        for h in self.handles:
            h.remove()

    def _stepped(self, *_: Any) -> None:
        self.after_step = {id(p): p.detach().clone() for _, p in self.params}

    def found(self) -> dict[str, Any] | None:
        """The evidence of a reversed soft update, or None."""
        hits = []
        for name, p in self.params:
            before = self.after_step.get(id(p))
            if before is None or torch.equal(before, p.detach()):
                continue
            hit = self._pulled_toward(name, before.double(), p.detach().double())
            if hit is not None:
                hits.append(hit)
        return {"parameters": [h["parameter"] for h in hits[:10]], "count": len(hits), **hits[0]} if hits else None

    def _pulled_toward(self, name: str, before: torch.Tensor, after: torch.Tensor) -> dict[str, Any] | None:
        moved = after - before
        for m in self.targets:
            if not self.runs[id(m)]:
                continue  # not a network the step computes with
            for qname, q in sorted(m.named_parameters(), key=lambda item: item[0] != name):  # its namesake first
                if q.shape != before.shape or not torch.equal(self.start[id(q)], q.detach()):
                    continue
                toward = q.detach().double() - before
                denom = float((toward * toward).sum())
                if denom == 0:
                    continue
                tau = float((moved * toward).sum()) / denom
                off = float((moved - tau * toward).norm())  # float rounding of the written values allowed
                allowed = _RESIDUAL * float(moved.norm()) + _ULPS * torch.finfo(q.dtype).eps * float(after.norm())
                if 0 < tau <= _MAX_TAU and off <= allowed:
                    return {"parameter": name, "target": f"{type(m).__name__}.{qname}", "tau": round(tau, 6),
                            "residual": off / max(float(moved.norm()), 1e-30), "target_forwards": self.runs[id(m)]}
        return None


def _candidates(reached: Iterable[Any], model: nn.Module, trained: set[int], shapes: set[tuple[int, ...]]) -> list[nn.Module]:
    """The networks the step reaches that hold none of the trained parameters and some of their shapes: a reached
    module itself, or its largest submodules that qualify (an agent module holding the online and the target network
    side by side)."""
    out: list[nn.Module] = []
    seen: set[int] = set()
    for top in (m for m in reached if isinstance(m, nn.Module) and m is not model):
        inside: list[str] = []
        for name, m in top.named_modules():
            if id(m) in seen or m is model or any(name.startswith(f"{n}.") for n in inside):
                continue
            params = list(m.parameters())
            if params and not any(id(q) in trained for q in params) and any(tuple(q.shape) in shapes for q in params):
                out.append(m)
                seen.add(id(m))
                inside.append(name)
    return out


def pulled_check(found: dict[str, Any] | None) -> Check | None:
    """The FAIL for what ``PullWatch.found`` returned, or None."""
    if found is None:
        return None
    name, target, tau = found["parameter"], found["target"], found["tau"]
    return check(name, "step.soft_update_reversed", Status.FAIL,
                 f"after the optimizer's step, train_step rewrote {found['count']} trained parameter(s) (first: {name}) "
                 f"as p + {tau:g} * (q - p) toward {target}, a network the step computes with, that the optimizer does "
                 "not own and that never moved: the soft update runs backwards (its target and source swapped), so "
                 "training is pulled back toward a frozen copy", found,
                 expected=f"the target network moved toward the trained one: q <- q + tau * ({name} - q)",
                 observed=f"{name} <- {name} + {tau:g} * ({target} - {name}); {target} unchanged",
                 hint="swap the arguments of the soft/Polyak update: the target network's parameters are the ones "
                      "written (target.mul_(1 - tau).add_(tau * online))")
