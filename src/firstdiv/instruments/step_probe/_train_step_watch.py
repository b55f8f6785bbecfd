"""step_probe's observer of the user's own ``train_step``: called twice on the user's objects, watched through tensor
gradient hooks, optimizer step pre- and post-hooks (a ``step(closure)`` is recorded after its closure's backward) and
wrapped ``zero_grad`` methods, to see whether old gradients leak into the next step and whether gradients are cleared
between backward and ``optimizer.step``. Every hook and wrapper is removed in ``finally``; the caller restores values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, Collected, check, grad_state, unique_params
from .._core.closure import innermost, step_optimizers, trained_elsewhere
from .._core.stateful import reachable
from .._core.trace import tensors
from . import _clearing, _descent
from ._clearing import DiscardTracker, carried_check, cleared_before_step, restep_check, step_before_backward, watch_others
from ._clipping import ClipWatch
from ._stuck import first_stuck

#: a manual update is plain SGD (stateless, its sign checkable) when its delta is this parallel to +-grad
_STATELESS_COSINE = 0.9
#: how many of call 1's model input tensors are kept to tell whether train_step stepped on the probe batch
_FED_MAX = 16


@dataclass
class _StepRecord:
    call: int
    grads: dict[int, torch.Tensor | None]
    produced: dict[int, torch.Tensor]
    lrs: dict[int, float]


class StepWatch:
    """Call ``train_step`` twice on the user's objects and record, per parameter, the gradient already in
    ``.grad`` when each call's first backward reaches it, the gradient each backward contributed, and the
    gradient present when ``optimizer.step`` runs. Every hook and wrapper is removed in ``finally``."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                 evaluate: Callable[[], float | None] | None = None, ref: dict[int, torch.Tensor] | None = None,
                 probe_inputs: list[torch.Tensor] | None = None) -> None:
        self.model, self.opt, self.evaluate, self.ref = model, optimizer, evaluate, ref or {}
        self.probe_inputs = probe_inputs or []
        self.fed: list[torch.Tensor] = []  # call 1's model inputs
        self.params = [(p, names) for p, names in unique_params(model) if p.requires_grad]
        self.call = 0
        self.events: list[str] = []
        self.prior: dict[tuple[int, int], torch.Tensor | None] = {}
        self.pending: dict[int, torch.Tensor] = {}
        self.closure_step = False  # inside optimizer.step(closure)
        self.staged: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}  # (.grad before, incoming) per tensor hook
        self.steps: list[_StepRecord] = []
        self.values: list[dict[int, torch.Tensor]] = []
        self.losses: list[float | None] = []
        self.eval_losses: list[float | None] = []
        self.moved_names: set[str] = set()
        self.elsewhere: set[str] = set()  # owned by another optimizer train_step reaches (closure.trained_elsewhere)
        self.cleared_others: set[int] = set()  # other optimizers whose zero_grad the calls ran
        self.stepped_others: set[int] = set()  # other optimizers the calls stepped
        self.after_grads: list[dict[int, torch.Tensor]] = []
        self.scales: list[list[float]] = []  # each GradScaler's scale before call 1 and after each call
        self.call_grads: dict[int, dict[int, torch.Tensor]] = {1: {}, 2: {}}
        self.discard = DiscardTracker()
        self.origins = _clearing.GradOrigins()  # which call began the sum in .grad that each call-2 step used
        self.clips = ClipWatch({id(p): names for p, names in self.params}, lambda: self.call)
        self.ran: set[str] = set()  # modules owning parameters that ran a forward with gradients on in the calls

    def _event(self, name: str) -> None:
        tag = f"call {self.call}: {name}"
        if not self.events or self.events[-1] != tag:
            self.events.append(tag)

    def _grad_hook(self, p: nn.Parameter) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:  # runs before the gradient is accumulated into p.grad
            self.staged[id(p)] = (None if p.grad is None else p.grad.detach().clone(), grad.detach().clone())
        return hook

    def _accumulated(self, p: nn.Parameter) -> None:
        """A backward accumulated into ``p.grad`` (``torch.autograd.grad``, as a MAML inner loop or a penalty on the
        weights calls it, fires the tensor hook but never accumulates: not a backward of the step)."""
        staged = self.staged.pop(id(p), None)
        if staged is None:
            return
        prior, grad = staged
        self.prior.setdefault((self.call, id(p)), prior)
        self.origins.reached(id(p), prior, self.call)
        prev = self.pending.get(id(p))
        self.pending[id(p)] = grad if prev is None else prev + grad
        mine = self.call_grads.setdefault(self.call, {})
        mine[id(p)] = grad.clone() if id(p) not in mine else mine[id(p)] + grad
        self.discard.reached(id(p))
        self._event("backward")
        self.clips.event("backward")

    def _pre_step(self, _opt: Any, args: Any, kwargs: Any) -> None:
        self.closure_step = (args[0] if args else kwargs.get("closure")) is not None  # its backward runs inside
        if not self.closure_step:
            self._record_step()

    def _post_step(self, *_: Any) -> None:
        if self.closure_step:  # step(closure): what the closure's backward produced, recorded as the step's
            self.closure_step = False
            self._record_step()
        self.discard.post_step()
        self.clips.event("stepped")

    def _record_step(self) -> None:
        grads = {id(p): (None if p.grad is None else p.grad.detach().clone()) for p, _ in self.params}
        lrs = {id(p): float(g["lr"]) for g in self.opt.param_groups for p in g["params"]}  # a scheduler moves them
        self.steps.append(_StepRecord(self.call, grads, dict(self.pending), lrs))
        self.pending.clear()
        self.origins.stepped(self.call, self.opt, {id(p): p for p, _ in self.params})
        self.discard.pre_step(self.call)
        self._event("optimizer.step")
        self.clips.event("step")

    def _wrap(self, obj: Any, attr: str, tag: str, undo: list) -> None:
        had, old, orig = attr in vars(obj), vars(obj).get(attr), getattr(obj, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._event(tag)
            result = orig(*args, **kwargs)
            self.discard.cleared(self.call, {id(p): p for p, _ in self.params})
            return result
        setattr(obj, attr, wrapper)
        undo.append(lambda: setattr(obj, attr, old) if had else delattr(obj, attr))

    def run(self, train_step: Callable[[], Any]) -> Collected:
        handles: list[Any] = []
        undo: list[Callable[[], None]] = []
        try:
            for p, _ in unique_params(self.model):
                p.grad = None
            handles += [p.register_hook(self._grad_hook(p)) for p, _ in self.params]
            handles += [p.register_post_accumulate_grad_hook(self._accumulated) for p, _ in self.params]
            handles.append(self.model.register_forward_pre_hook(self._fed, with_kwargs=True))
            handles += [m.register_forward_hook(self._ran(name)) for name, m in self.model.named_modules()
                        if any(p is not None for p in vars(m).get("_parameters", {}).values())]  # parameters() may be overridden
            if self.opt is not None:
                inner = innermost(self.opt)
                handles += [inner.register_step_pre_hook(self._pre_step),
                            inner.register_step_post_hook(self._post_step)]
                self.clips.patch(undo)
                self._wrap(self.opt, "zero_grad", "optimizer.zero_grad", undo)
            self._wrap(self.model, "zero_grad", "model.zero_grad", undo)
            others = step_optimizers(train_step, self.opt, self.model)[1 if self.opt is not None else 0:]
            handles += watch_others(self, others, undo)
            self.values.append({id(p): p.detach().clone() for p, _ in self.params})
            scalers = [o for o in reachable([train_step]) if isinstance(o, torch.amp.GradScaler) and o.is_enabled()]
            self.scales.append([sc.get_scale() for sc in scalers])
            self._evaluate()
            for call in (1, 2):
                self.call = call
                self.pending.clear()  # a GAN's generator backward reaching D after D's step is not D's next step
                self.discard.call_started()  # nor a micro-batch its next call's first zero_grad erases
                out = train_step()
                self.losses.append(float(out.detach().float().reshape(())) if torch.is_tensor(out) and out.numel() == 1
                                   else float(out) if isinstance(out, (int, float)) else None)
                self.values.append({id(p): p.detach().clone() for p, _ in self.params})
                self.after_grads.append({id(p): p.grad.detach().clone() for p, _ in self.params if p.grad is not None})
                self.scales.append([sc.get_scale() for sc in scalers])
                self.call = 0
                self._evaluate()
        finally:
            for h in handles:
                h.remove()
            for fn in reversed(undo):
                fn()
        idle = frozenset(self.cleared_others - self.stepped_others)
        self.elsewhere = trained_elsewhere(train_step, self.opt, self.model, idle)
        return self._analyse()

    def _evaluate(self) -> None:
        if self.evaluate is not None:
            self.eval_losses.append(self.evaluate())

    def _analyse(self) -> Collected:
        out = Collected(details={"events": self.events, "losses": self.losses, "eval_losses": self.eval_losses})
        if self.opt is not None:
            out.details["optimizer_steps"] = [sum(r.call == c for r in self.steps) for c in (1, 2)]
        if not self.params:
            return out
        cleared_before_step(self, out)
        carried_check(self, out)
        restep_check(self, out)
        discarded = self.discard.finding({id(p): names for p, names in self.params}, self.events)
        out.checks += [c for c in (discarded, self.clips.finding()) if c is not None]
        self._check_steps_and_moves(out)
        if not any(c.finding.status is Status.FAIL for c in out.checks) and not self.scaler_skipped():
            self._check_descent(out)
        return out

    def user_grads(self, call: int) -> dict[int, torch.Tensor]:
        """The gradient call ``call`` stepped with: ``.grad`` at its optimizer.step calls (summed) when they held one,
        else what its backward passes produced (a manual update, or an LBFGS closure run inside step)."""
        at_step: dict[int, torch.Tensor] = {}
        for rec in (r for r in self.steps if r.call == call):
            for pid, g in rec.grads.items():
                if g is not None:
                    at_step[pid] = g if pid not in at_step else at_step[pid] + g
        if any(grad_state(g)[0] == "nonzero" for g in at_step.values()):
            return at_step
        return self.call_grads.get(call, {})

    def _rows(self, call: int, grads: dict[int, torch.Tensor]) -> list[tuple[list[str], torch.Tensor, torch.Tensor]]:
        """(names, delta, grad) in float64 for each parameter whose gradient at ``call`` is finite and nonzero."""
        rows = []
        for p, names in self.params:
            g = grads.get(id(p))
            if grad_state(g)[0] != "nonzero" or g.shape != p.shape:
                continue
            delta = _descent.dense(self.values[call][id(p)]) - _descent.dense(self.values[call - 1][id(p)])
            rows.append((names, delta, _descent.dense(g)))
        return rows

    def _check_descent(self, out: Collected) -> None:
        """Ascent (update up the gradient, loss up), divergence (a huge update, loss blown up), and for a manual loop
        the implied learning rate."""
        if self.opt is not None and any(g.get("maximize") for g in self.opt.param_groups):
            note = "note: the optimizer has maximize=True, so whether train_step descends the loss was not checked"
            out.checks.append(check("train_step", "step.descent", Status.PASS, note))
            out.details.setdefault("notes", []).append(note)
            return
        if None in self.eval_losses or len(self.eval_losses) < 3:
            note = "note: the loss on the batch could not be re-evaluated between train_step calls, so descent was not checked"
            out.checks.append(check("train_step", "step.descent", Status.PASS, note))
            out.details.setdefault("notes", []).append(note)
            return
        user = [self._rows(c, self.user_grads(c)) for c in (1, 2)]
        ref = self._rows(1, self.ref)
        found = self._ascent(ref, user) or self._diverges()
        if found is not None:
            out.checks.append(found)
            return
        cos = _descent.cosine([d for _, d, _ in user[0]], [g for _, _, g in user[0]]) if user[0] else None
        ev: dict[str, Any] = {"cosine_update_vs_minus_grad": cos, "eval_losses": self.eval_losses}
        msg = f"train_step descends: loss on the batch {self.eval_losses[0]:.6g} -> {self.eval_losses[-1]:.6g}"
        if cos is not None:
            msg += f", update vs -grad cosine {cos:.3g}"
        if self.opt is None and user[0]:
            lr, spread = _descent.implied_lr([d for _, d, _ in user[0]], [g for _, _, g in user[0]])
            ev.update({"implied_lr": lr, "implied_lr_spread": spread})
            out.details["implied_lr"] = lr
            if lr is not None:
                msg += (f"; implied lr {lr:.4g} (delta = -lr * grad as backward produced it, clipping included), "
                        f"spread {spread:.3g} across {len(user[0])} parameters")
        out.checks.append(check("train_step", "step.descent", Status.PASS, msg, ev))
        flipped = self._flipped()
        agree = _descent.cosine(*[list(x) for x in zip(*flipped)][1:]) if flipped else None
        if agree is not None and abs(agree) < _descent.ASCENT_COSINE:
            note = (f"note: train_step's gradient agrees weakly with the probe batch's (cosine {agree:.3g}): it likely "
                    "steps on other batches, so a loss it backpropagates with the wrong sign ((-loss).backward()) would "
                    "not be seen; pass the batch train_step uses to check that")
            out.checks.append(check("train_step", "step.gradient_agreement", Status.PASS, note, {"cosine": agree}))
            out.details.setdefault("notes", []).append(note)

    def _flipped(self) -> list[tuple[list[str], torch.Tensor, torch.Tensor]]:
        """(names, -train_step's gradient of call 1, the probe batch's gradient at the same parameters)."""
        g_user = self.user_grads(1)
        return [(n, -_descent.dense(g_user[id(p)]), _descent.dense(self.ref[id(p)])) for p, n in self.params
                if grad_state(g_user.get(id(p)))[0] == "nonzero" and id(p) in self.ref
                and g_user[id(p)].shape == self.ref[id(p)].shape]

    def _ascent(self, ref: list, user: list[list]) -> Check | None:
        """An optimizer descends whatever gradient it is given (its state, momentum or Adam moments, may point
        anywhere for a step or two), so with one the question is whether train_step's gradient points up the loss:
        anti-aligned with the probe batch's gradient at the same parameters. A manual update is stateless: its
        delta itself must not point up the gradient."""
        losses, flipped = self.eval_losses, self._flipped()
        candidates = [(flipped, "train_step's gradient against the probe batch's gradient at the same parameters")]
        stateless = self.opt is None and all(rows and abs(_descent.cosine([d for _, d, _ in rows], [g for _, _, g in rows])
                                                          or 0.0) > _STATELESS_COSINE for rows in user)
        if stateless:  # a hand-written momentum (delta not along the gradient) is judged like an optimizer
            candidates.append((ref, "the update against the probe batch's gradient at the same parameters"))
        for rows, source in candidates:
            found = _descent.ascent_check(*[list(x) for x in zip(*rows)], losses, source, monotone=True) if rows else None
            if found is not None and rows is flipped and not self._same_batch():
                f = found.finding  # train_step's gradient came from another batch: anti-aligned is not shown ascent
                return check(f.where, f.check, Status.WARN, f"{f.message}; but train_step did not feed the model the "
                             "probe batch's inputs: it stepped on other data, whose gradient may point against this "
                             "batch's, so ascent is not shown", f.evidence)
            if found is not None:
                return found
        if stateless:
            checks = [_descent.ascent_check(*[list(x) for x in zip(*rows)], losses, "the update against the gradient "
                                            "train_step produced") for rows in user]
            if all(c is not None for c in checks):
                return checks[0]
        return None

    def _ran(self, name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if self.call and torch.is_grad_enabled():
                self.ran.add(name)
        return hook

    def _fed(self, _m: nn.Module, args: tuple, kwargs: dict) -> None:
        if self.call == 1 and len(self.fed) < _FED_MAX:
            self.fed += [t.detach().clone() for t in tensors((args, kwargs))][:_FED_MAX]

    def _same_batch(self) -> bool:
        """Whether train_step's gradient is evidence about the probe's objective: in its first call the model was fed
        the probe batch's input tensors (equal values), so it stepped on that batch. Equal losses are no evidence: at
        initialization every batch of a balanced task has loss ln K, while gradients of batches with other label
        counts point apart."""
        return bool(self.probe_inputs) and all(any(f.shape == t.shape and f.dtype == t.dtype and torch.equal(f, t)
                                                   for f in self.fed) for t in self.probe_inputs)

    def _diverges(self) -> Check | None:
        group_of = {} if self.opt is None else {id(p): i for i, g in enumerate(self.opt.param_groups) for p in g["params"]}
        lrs = {i: float(g["lr"]) for i, g in enumerate(self.opt.param_groups)} if self.opt is not None else {}
        for call in (1, 2):
            rows = [(names, group_of.get(id(p), "none" if self.opt is not None else "train_step"),
                     self.values[call - 1][id(p)], self.values[call][id(p)]) for p, names in self.params]
            groups = _descent.relative_updates(rows)
            grads = self._rows(call, self.call_grads.get(call, {}))
            lr = _descent.implied_lr([d for _, d, _ in grads], [g for _, _, g in grads])[0] if grads else None

            def where(key: Any, lr: float | None = lr) -> str:
                if key == "train_step":
                    return "train_step update" + (f" (implied lr={lr:.4g})" if lr is not None else "")
                return "parameters outside the optimizer" if key == "none" else f"param_group {key} (lr={lrs[key]:g})"
            found = _descent.divergence_check(self.eval_losses[call - 1], self.eval_losses[call], groups, where,
                                              f"train_step call {call}")
            if found is not None:
                return found
        return None

    def scaler_skipped(self) -> list[int]:
        """The calls without an optimizer.step in which a GradScaler lowered its scale: inf/NaN gradients, the step
        skipped on purpose (usual in fp16's first steps)."""
        return [c for c in (1, 2) if self.opt is not None and not any(r.call == c for r in self.steps)
                and any(b > a for a, b in zip(self.scales[c], self.scales[c - 1]))]

    def _check_steps_and_moves(self, out: Collected) -> None:
        skipped = self.scaler_skipped()
        if skipped:
            note = (f"note: the GradScaler skipped optimizer.step in call(s) {skipped} (inf/NaN gradients; its scale went "
                    f"{self.scales[0][0]:.3g} -> {self.scales[-1][0]:.3g}), as it does in fp16's first steps; the update "
                    "of those calls was not checked")
            out.checks.append(check("optimizer.step", "step.moved", Status.PASS, note, {"skipped_calls": skipped}))
            out.details.setdefault("notes", []).append(note)
            if len(skipped) == 2:
                return
        if self.opt is not None and not self.steps:
            out.checks.append(check("optimizer.step", "step.no_optimizer_step", Status.FAIL,
                                    "train_step called optimizer.step() 0 times in 2 calls",
                                    {"events": self.events}, expected="one optimizer.step() per call",
                                    observed="0 calls", hint="call optimizer.step() after loss.backward()"))
            return
        moved = [sum(not torch.equal(self.values[c][id(p)], self.values[c - 1][id(p)]) for p, _ in self.params) for c in (1, 2)]
        out.details["moved_per_call"] = moved
        self.moved_names = {names[0] for p, names in self.params
                            if any(not torch.equal(self.values[c][id(p)], self.values[c - 1][id(p)]) for c in (1, 2))}
        if not any(e.endswith(": backward") for e in self.events) and sum(moved) == 0:
            out.checks.append(self._no_backward_check())
            return
        early = step_before_backward(self)
        if early is not None:
            out.checks.append(early)
            return
        stuck = first_stuck(self)
        if stuck is not None:
            out.checks.append(stuck)
            return
        if sum(moved) == 0 and self.steps and all(lr == 0 for rec in self.steps for lr in rec.lrs.values()):
            out.checks.append(check("optimizer.step", "step.moved", Status.PASS, "note: every param group's lr was 0 at "
                                    f"each of {len(self.steps)} optimizer.step calls (a warmup from 0?): nothing could "
                                    "move, so the update was not judged", {"moved_per_call": moved}))
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
                     (f"train_step ran optimizer.step() {len(self.steps)} times" if self.opt is not None else "in 2 "
                      "calls of train_step") + " no backward pass reached "
                     f"any of {len(self.params)} trainable parameters, and none moved",
                     {"events": self.events}, expected="loss.backward() before optimizer.step()",
                     observed="no gradient reached any parameter", hint="call loss.backward() in train_step")

