"""``ownership.unowned`` with its evidence: a parameter with requires_grad=True that no watched optimizer holds is
meant to train only if the program computes its gradient, and it goes untrained only if nothing else updates it.

At a check step each such parameter is looked at: without a gradient at the measured optimizer step (the loss may
not use it) it is a WARN; with one, a copy is kept and compared at the next ``w.step()``, when every optimizer of
that iteration has stepped: unchanged, nothing trains it (FAIL, at the check step); changed, an unwatched optimizer or
a hand-written update does (WARN). Until that next step the report holds it as a WARN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._checks import Event
from ._judge import Judge

KIND = "ownership.unowned"


@dataclass
class Unowned:
    """Unowned parameters with a gradient, waiting for the next step: name -> (check step, parameter, copy)."""

    pending: dict[str, tuple[int, torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def check(self, judge: Judge, idx: int, named: list[tuple[str, torch.nn.Parameter]], held: set[int],
              frozen: dict[int, str], graded: set[str] | None) -> None:
        """At check step ``idx``: ``graded`` names the parameters that had a gradient at its measured optimizer step
        (None when no step was measured: the gradients present now are read instead)."""
        for name, p in named:
            if id(p) in frozen or not p.requires_grad or id(p) in held or name in self.pending or (KIND, name) in judge.seen:
                continue
            if name in graded if graded is not None else p.grad is not None:
                with torch.no_grad():
                    self.pending[name] = (idx, p, p.detach().clone())
            else:
                judge.add(idx, KIND, name, "WARN",
                          f"{name} requires grad but no watched optimizer holds it, and it had no gradient at step {idx}: "
                          "not confirmed that it is meant to train (the loss may not use it); if it is not, set "
                          "requires_grad_(False) or declare it in frozen=")

    def settle(self, judge: Judge, idx: int) -> None:
        """At step ``idx``: the verdict on every parameter kept at an earlier check step."""
        for name, (k, p, old) in list(self.pending.items()):
            if k >= idx:
                continue
            del self.pending[name]
            with torch.no_grad():
                same = old.shape == p.shape and torch.equal(old, p.detach())
            if same:
                judge.add(k, KIND, name, "FAIL",
                          f"{name} requires grad and had a gradient at step {k}, but no watched optimizer holds it and it "
                          f"was unchanged at step {idx}: it never trains", expected="held by an optimizer that steps it",
                          observed="not held, unchanged",
                          hint="build the optimizer after the model is complete, over model.parameters()")
            else:
                judge.add(k, KIND, name, "WARN",
                          f"{name} requires grad and no watched optimizer holds it, but it changed by step {idx}: an "
                          "unwatched optimizer or a hand-written update trains it; pass that optimizer to watch() to "
                          "check its steps too")

    def unsettled(self) -> list[Event]:
        """The parameters still waiting for their next step, as WARNs."""
        return [Event(k, KIND, name, "WARN", f"{name} requires grad and had a gradient at step {k}, but no watched "
                      "optimizer holds it; whether anything else trains it shows at the next step, not reached yet")
                for name, (k, _, _) in self.pending.items()]
