"""step_probe's observer of the user's own ``train_step``: called twice on the user's objects, watched
through tensor gradient hooks, an optimizer step pre-hook and wrapped ``zero_grad`` methods, to see
whether old gradients leak into the next step and whether gradients are cleared between backward and
``optimizer.step``. Every hook and wrapper is removed in ``finally``; the caller restores values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, Collected, below_rounding, check, grad_state, label, norm, unique_params


@dataclass
class _StepRecord:
    call: int
    grads: dict[int, torch.Tensor | None]
    produced: dict[int, torch.Tensor]


class StepWatch:
    """Call ``train_step`` twice on the user's objects and record, per parameter, the gradient already in
    ``.grad`` when each call's first backward reaches it, the gradient each backward contributed, and the
    gradient present when ``optimizer.step`` runs. Every hook and wrapper is removed in ``finally``."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.opt = model, optimizer
        self.params = [(p, names) for p, names in unique_params(model) if p.requires_grad]
        self.call = 0
        self.events: list[str] = []
        self.prior: dict[tuple[int, int], torch.Tensor | None] = {}
        self.pending: dict[int, torch.Tensor] = {}
        self.steps: list[_StepRecord] = []
        self.values: list[dict[int, torch.Tensor]] = []
        self.losses: list[float | None] = []

    def _event(self, name: str) -> None:
        tag = f"call {self.call}: {name}"
        if not self.events or self.events[-1] != tag:
            self.events.append(tag)

    def _grad_hook(self, p: nn.Parameter) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:  # runs before the gradient is accumulated into p.grad
            self.prior.setdefault((self.call, id(p)), None if p.grad is None else p.grad.detach().clone())
            prev = self.pending.get(id(p))
            self.pending[id(p)] = grad.detach().clone() if prev is None else prev + grad.detach()
            self._event("backward")
        return hook

    def _pre_step(self, *_: Any) -> None:
        grads = {id(p): (None if p.grad is None else p.grad.detach().clone()) for p, _ in self.params}
        self.steps.append(_StepRecord(self.call, grads, dict(self.pending)))
        self.pending.clear()
        self._event("optimizer.step")

    def _wrap(self, obj: Any, attr: str, tag: str, undo: list) -> None:
        had, old, orig = attr in vars(obj), vars(obj).get(attr), getattr(obj, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._event(tag)
            return orig(*args, **kwargs)
        setattr(obj, attr, wrapper)
        undo.append(lambda: setattr(obj, attr, old) if had else delattr(obj, attr))

    def run(self, train_step: Callable[[], Any]) -> Collected:
        handles: list[Any] = []
        undo: list[Callable[[], None]] = []
        try:
            for p, _ in unique_params(self.model):
                p.grad = None
            handles += [p.register_hook(self._grad_hook(p)) for p, _ in self.params]
            handles.append(self.opt.register_step_pre_hook(self._pre_step))
            self._wrap(self.opt, "zero_grad", "optimizer.zero_grad", undo)
            self._wrap(self.model, "zero_grad", "model.zero_grad", undo)
            self.values.append({id(p): p.detach().clone() for p, _ in self.params})
            for call in (1, 2):
                self.call = call
                out = train_step()
                self.losses.append(float(out.detach().reshape(())) if torch.is_tensor(out) and out.numel() == 1 else
                                   float(out) if isinstance(out, (int, float)) else None)
                self.values.append({id(p): p.detach().clone() for p, _ in self.params})
        finally:
            for h in handles:
                h.remove()
            for fn in reversed(undo):
                fn()
        return self._analyse()

    def _analyse(self) -> Collected:
        out = Collected(details={"events": self.events, "losses": self.losses,
                                 "optimizer_steps": [sum(r.call == c for r in self.steps) for c in (1, 2)]})
        if not self.params:
            return out
        self._check_cleared_before_step(out)
        self._check_accumulation(out)
        self._check_steps_and_moves(out)
        return out

    def _check_cleared_before_step(self, out: Collected) -> None:
        for rec in self.steps:
            produced = [(p, n) for p, n in self.params if grad_state(rec.produced.get(id(p)))[0] == "nonzero"]
            cleared = [(p, n) for p, n in produced if grad_state(rec.grads[id(p)])[0] in ("none", "zero")]
            if not cleared:
                continue
            p, names = cleared[0]
            status = Status.FAIL if len(cleared) == len(produced) else Status.WARN
            ev = {"call": rec.call, "backward_grad_norm": grad_state(rec.produced[id(p)])[1],
                  "grad_at_step": grad_state(rec.grads[id(p)])[0], "cleared": len(cleared), "produced": len(produced),
                  "events": self.events}
            out.checks.append(check(names[0], "step.zero_grad_before_step", status,
                                    f"{label(names)}: backward gave grad norm {ev['backward_grad_norm']:.4g} but at "
                                    f"optimizer.step (call {rec.call}) .grad was {ev['grad_at_step']}; {len(cleared)} of "
                                    f"{len(produced)} parameters cleared between backward and step", ev,
                                    expected="optimizer.step sees the gradient backward produced",
                                    observed=f".grad {ev['grad_at_step']} at optimizer.step",
                                    hint="call optimizer.zero_grad() before loss.backward() (or after step), never between"))
            return
        if self.steps:
            out.checks.append(check("optimizer.step", "step.zero_grad_before_step", Status.PASS,
                                    f"at each of {len(self.steps)} optimizer.step calls .grad held what backward produced"))

    def _check_accumulation(self, out: Collected) -> None:
        carried = [(p, n) for p, n in self.params if grad_state(self.prior.get((2, id(p))))[0] in ("nonzero", "nonfinite")]
        reached = sum((2, id(p)) in self.prior for p, _ in self.params)
        if not carried:
            if reached:
                out.checks.append(check("optimizer.zero_grad", "step.grad_accumulation", Status.PASS,
                                        f"before step 2's backward .grad was None or zero for all {reached} parameters "
                                        "it reached", {"reached": reached}))
            return
        p, names = carried[0]
        prior = self.prior[(2, id(p))]
        step2 = next((r for r in self.steps if r.call == 2), None)
        ev: dict[str, Any] = {"grad_before_step2_backward_norm": grad_state(prior)[1], "carried": len(carried),
                              "reached": reached, "events": self.events}
        if step2 is not None and step2.grads[id(p)] is not None and id(p) in step2.produced:
            total, seen = prior + step2.produced[id(p)], step2.grads[id(p)]
            ev["step2_grad_vs_g1_plus_g2_relative_error"] = norm(seen - total) / max(norm(total), 1e-300)
            ev["step2_backward_grad_norm"] = norm(step2.produced[id(p)])
        out.checks.append(check(names[0], "step.grad_accumulation", Status.FAIL,
                                f"{label(names)}: before step 2's backward .grad already held norm "
                                f"{ev['grad_before_step2_backward_norm']:.4g} from step 1 ({len(carried)} of {reached} "
                                "parameters); step 2 used grad1 + grad2", ev,
                                expected=".grad None or zero before each step's backward",
                                observed="step 1's gradient still in .grad",
                                hint="call optimizer.zero_grad() once per step, before loss.backward()"))

    def _check_steps_and_moves(self, out: Collected) -> None:
        if not self.steps:
            out.checks.append(check("optimizer.step", "step.no_optimizer_step", Status.FAIL,
                                    "train_step called optimizer.step() 0 times in 2 calls",
                                    {"events": self.events}, expected="one optimizer.step() per call",
                                    observed="0 calls", hint="call optimizer.step() after loss.backward()"))
            return
        moved = [sum(not torch.equal(self.values[c][id(p)], self.values[c - 1][id(p)]) for p, _ in self.params) for c in (1, 2)]
        out.details["moved_per_call"] = moved
        if not any(e.endswith(": backward") for e in self.events) and sum(moved) == 0:
            out.checks.append(self._no_backward_check())
            return
        stuck = self._first_stuck_check()
        if stuck is not None:
            out.checks.append(stuck)
            return
        if sum(moved) == 0:
            names = self.params[0][1]
            out.checks.append(check(names[0], "step.not_updated", Status.FAIL,
                                    f"no trainable parameter moved in 2 calls of train_step ({len(self.steps)} optimizer "
                                    "steps)", {"moved_per_call": moved, "trainable": len(self.params)},
                                    expected="parameters move after optimizer.step()", observed="no parameter moved"))
            return
        out.checks.append(check("optimizer.step", "step.moved", Status.PASS,
                                f"train_step moved {moved[0]} then {moved[1]} of {len(self.params)} trainable parameters",
                                {"moved_per_call": moved, "trainable": len(self.params)}))

    def _no_backward_check(self) -> Check:
        names = self.params[0][1]
        return check(names[0], "step.no_gradient", Status.FAIL,
                     f"train_step ran optimizer.step() {len(self.steps)} times but no backward pass reached "
                     f"any of {len(self.params)} trainable parameters, and none moved",
                     {"events": self.events}, expected="loss.backward() before optimizer.step()",
                     observed="no gradient reached any parameter", hint="call loss.backward() in train_step")

    def _first_stuck_check(self) -> Check | None:
        """The first parameter that held a nonzero gradient at an optimizer.step and still did not move."""
        group_of = {id(p): g for g in self.opt.param_groups for p in g["params"]}
        for rec in self.steps:
            for p, names in self.params:
                state, gnorm = grad_state(rec.grads[id(p)])
                still = torch.equal(self.values[rec.call][id(p)], self.values[rec.call - 1][id(p)])
                if state == "nonzero" and still and not below_rounding(self.values[rec.call - 1][id(p)],
                                                                       rec.grads[id(p)], group_of.get(id(p))):
                    return check(names[0], "step.not_updated", Status.FAIL,
                                 f"{label(names)}: .grad norm {gnorm:.4g} at optimizer.step (call {rec.call}) "
                                 "but the parameter did not move", {"call": rec.call, "grad_norm": gnorm},
                                 expected="parameter moves after optimizer.step()", observed="unchanged",
                                 hint="is this parameter object in the optimizer's param groups?")
        return None
