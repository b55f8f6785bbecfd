"""Training-loop probe (appendix section 1): separate forward, backward and update, and prove each.

A controlled step runs on a deep copy of the model and optimizer (starting from ``.grad = None``):
forward (loss value, finite?), backward (per parameter: gradient None / zero / non-finite / norm),
update (which parameters moved, by how much, and for plain SGD whether ``delta == -lr * grad``).
When a ``train_step`` closure is given it is called twice on the user's own objects under
:func:`~firstdiv.instruments._core.state.guarded`, watched through tensor gradient hooks, optimizer step
hooks and a wrapped ``zero_grad``, to see whether old gradients leak into the next step and whether
gradients are cleared between backward and ``optimizer.step``; and, from the parameters' deltas and the loss on
the batch re-evaluated between calls, whether its update descends (``step.train_step_ascends``) at a step size
training survives (``step.diverges``, also on the controlled step). With ``optimizer=None`` (a manual update
``p.data.add_(p.grad, alpha=-lr)``) the update is judged from ``train_step`` alone and its implied lr reported.
Thresholds and the measurements behind them: :mod:`._descent`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status, skipped
from .._core import batch as _batch
from .._core.cancelling import cancelled, cancelled_check
from .._core.checks import (
    Check,
    Collected,
    below_rounding,
    check,
    compose,
    grad_state,
    graph_leaves,
    label,
    nested_grads,
    norm,
    unique_params,
)
from .._core.closure import closure_state, tensors_in
from .._core.invariance import loss_depends
from .._core.state import detached_copy, guarded
from .._core.trace import tensors
from .._core.user_hooks import reports_user_hooks
from ._descent import CONTROLLED, controlled_divergence, divergence_check, eval_loss, relative_updates, step_hooks
from ._later import confirm_not_updated, step_copy
from ._modes import ModeTrail, NormWatch, drop_check, norm_check, switch_check
from ._pulled import PullWatch, pulled_check
from ._rule import rule_error
from ._train_step_watch import StepWatch
from ._untrained import never_trained

__all__ = ["step_probe"]

_NAME = "step_probe"
_COPY_EFFECT = "one sacrificial optimizer step on a deep copy of the model and optimizer"
_COPY_EFFECT_MANUAL = "one forward and backward pass on a deep copy of the model"
_WATCH_EFFECT = ("; train_step called twice on your objects, a third time when the second leaves the model in eval mode "
                 "(.grad set to None first, the loss on the batch evaluated before and after each call); every parameter, .grad, "
                 "optimizer state, train flag and RNG state restored afterwards, and so are the other models, optimizers, "
                 "LR schedulers and GradScalers it holds (closure, globals it names, attributes of its object); other objects it "
                 "reaches (loader iterators, lists, loggers, schedulers held only inside those) are not")


@reports_user_hooks
def step_probe(model: nn.Module, batch: Any, loss_fn: Callable[[Any, Any], torch.Tensor],
               optimizer: torch.optim.Optimizer | None = None, *, train_step: Callable[[], Any] | None = None,
               lr_rtol: float = 1e-4) -> Report:
    """Separate forward, backward and update for one step, and name the parameter that breaks each.

    ``batch`` is ``(inputs, targets)`` or a dict (see :mod:`firstdiv.instruments._core.batch`); ``loss_fn``
    maps ``(outputs, targets)`` to a scalar loss. The controlled step runs on a deep copy. If
    ``train_step`` (a zero-argument closure doing one full step on your objects) is given, it is called
    twice under a guard that restores every value afterwards, to check gradient clearing between steps and that
    its update descends the loss at a step size training survives. ``optimizer`` may be None when ``train_step``
    updates the parameters by hand (``p.data.add_(p.grad, alpha=-lr)``): the update is then judged from
    ``train_step`` alone, by the parameters' deltas against the gradients its backward produced.
    ``lr_rtol`` is the relative tolerance of the plain-SGD check ``delta == -lr * grad``.
    """
    _batch.check_model(model)
    _batch.check_loss_fn(loss_fn)
    _batch.check_step_source(optimizer, train_step)
    if train_step is not None:
        _batch.check_callable(train_step, "train_step")
    _batch.split_batch(batch, model)
    if not isinstance(lr_rtol, (int, float)) or not lr_rtol > 0:
        raise InvalidArgument(f"Expected `lr_rtol` to be a positive number but got {lr_rtol!r}")
    params = unique_params(model)
    if not params:
        return skipped(_NAME, "the model has no parameters, so there is nothing to step; pass the module that owns "
                              "the trainable parameters")
    effects = _COPY_EFFECT if optimizer is not None else _COPY_EFFECT_MANUAL
    # a GAN's other model and optimizer; a hand-written momentum buffer
    shapes = {tuple(p.shape) for p, _ in params}
    reached = [*closure_state(train_step), *_closure_tensors(train_step, shapes)] if train_step is not None else []
    with guarded(model, optimizer, train_step, *reached, tensors_in(batch)):  # train_step: the schedulers and scalers it steps
        norms = NormWatch(model)  # filled by the controlled step (the copy keeps the modules' names) and the watch
        try:
            ctl = _controlled_step(model, batch, loss_fn, optimizer, float(lr_rtol), norms)
        except _batch.UserCodeError as exc:
            if train_step is None:
                return skipped(_NAME, f"{exc}; step_probe needs one forward pass and loss that run")
            ctl = Collected(reason=str(exc), details={"_uncopyable": True})
        checks, details, reason = list(ctl.checks), dict(ctl.details), ctl.reason
        ref_grads, uncopyable = details.pop("_ref", []), details.pop("_uncopyable", False) or bool(reason)
        if train_step is not None and uncopyable:  # the user's own steps can still be judged
            checks.append(check("model", "step.controlled_step", Status.SKIPPED, f"controlled step not run: {reason}"))
            reason, effects = "", "none on copies (the controlled step on a copy could not run)"
        if train_step is not None and not reason:
            ref = {id(p): g for (p, _), g in zip(params, ref_grads) if g is not None}
            with NormWatch(model, dropout=True) as user_norms, ModeTrail(model) as trail, \
                    PullWatch(model, optimizer, reached) as pulls:
                checks, effects = _watch(model, optimizer, batch, loss_fn, train_step, ref, checks, details, effects, trail)
                if trail.left_in_eval() and (raised := trail.one_more(train_step)):  # does the next call train in eval?
                    details["third_call_raised"] = raised
            norms.hits = user_norms.hits  # the controlled step ran in the mode the model was handed over in; the
            # user's own step sets its mode itself (model.train() at its start): its forward is the one judged
            first = [c for c in (pulled_check(pulls.found()), switch_check(trail), drop_check(user_norms.drops)) if c]
            checks = controlled_divergence([*first, *checks])
        found = norm_check(norms.hits, "a training forward")
        checks = [found, *checks] if found is not None else checks
    return compose(_NAME, checks, effects, details, reason)


def _closure_tensors(fn: Any, shapes: set[tuple[int, ...]]) -> list[torch.Tensor]:
    """Dense tensors shaped like a parameter that ``fn`` holds in its closure cells or the globals it names, alone or
    in a list/tuple/dict (a hand-written momentum buffer): its steps write them, the guard puts them back. Data
    tensors (other shapes, sparse) are left alone: they are not state and copying a dataset would cost its size."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    values = [c.cell_contents for c in cells if _filled(c)]
    if code is not None:
        values += [fn.__globals__[n] for n in code.co_names if n in getattr(fn, "__globals__", {})]
    out: list[torch.Tensor] = []
    for v in values:
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]
        out += [t for t in items if torch.is_tensor(t) and not isinstance(t, nn.Parameter) and t.is_leaf
                and t.layout == torch.strided and tuple(t.shape) in shapes]
    return out


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _watch(model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
           train_step: Callable[[], Any], ref: dict, checks: list[Check], details: dict, effects: str,
           trail: ModeTrail) -> tuple[list, str]:
    """Run the user's ``train_step`` twice under the caller's guard and merge what it shows into ``checks``."""
    probe = list(tensors(_batch.split_batch(batch, model).inputs))
    watch = trail.clock = StepWatch(model, optimizer, lambda: eval_loss(model, batch, loss_fn), ref, probe)
    try:
        watched = watch.run(train_step)
    except Exception as exc:  # noqa: BLE001 - user code: its failure is reported, every value restored
        return checks + [check("train_step", "step.train_step_raised", Status.SKIPPED,
                               f"train_step raised {_batch.describe_error(exc)}; gradient clearing between "
                               "steps was not observed")], effects + _WATCH_EFFECT
    checks = [_moved_elsewhere(c) if c.finding.check == "step.not_updated" and c.finding.where in watch.moved_names | watch.elsewhere
              and c.finding.evidence.get("in_optimizer") is False else c for c in checks]
    seen = {(c.finding.check, c.finding.where) for c in checks if c.finding.status is Status.FAIL}
    checks += [c for c in watched.checks if (c.finding.check, c.finding.where) not in seen]
    checks = never_trained(checks, watch, optimizer)
    notes = [c.finding.message for c in checks if c.finding.message.startswith("note: ")]
    if notes:
        details["notes"] = notes
    details["train_step"] = {k: v for k, v in watched.details.items() if k != "notes"}
    return checks, effects + _WATCH_EFFECT


def _moved_elsewhere(c: Check) -> Check:
    """A parameter outside ``optimizer`` that ``train_step`` moves (a second optimizer, a manual update) is fine."""
    f = c.finding
    return check(f.where, "step.update", Status.PASS,
                 f"note: {f.where} is not in the optimizer passed in, but train_step moves it or another optimizer it "
                 "reaches owns it (a manual update, an alternating schedule); its update rule was not checked", f.evidence)


# --- the controlled step on a copy -------------------------------------------------------------------------------


def _forward(cmodel: nn.Module, batch: Any, loss_fn: Callable, out: Collected) -> torch.Tensor | None:
    with torch.enable_grad():
        _, loss = _batch.compute_loss(cmodel, batch, loss_fn)
    problem = _batch.loss_problem(loss)
    if problem:
        out.checks.append(check("loss", "step.loss", Status.SKIPPED, problem))
        out.reason = f"{problem}. step_probe needs loss_fn(outputs, targets) to return a scalar loss tensor."
        return None
    value = float(loss.detach().reshape(()))
    out.details["loss"] = value if math.isfinite(value) else str(value)
    ev = {"loss": str(value) if not math.isfinite(value) else value, "requires_grad": bool(loss.requires_grad),
          "grad_fn": type(loss.grad_fn).__name__ if loss.grad_fn is not None else "None"}
    if not math.isfinite(value):
        out.checks.append(check("loss", "step.nonfinite_loss", Status.FAIL, f"forward produced loss {value}", ev,
                                expected="a finite loss", observed=str(value),
                                hint="look for log(0), division by zero, overflow, or NaN in the inputs"))
    else:
        out.checks.append(check("loss", "step.nonfinite_loss", Status.PASS, f"forward produced finite loss {value:.6g}", ev))
    return loss


def _gradient_checks(params: list, grads: dict[int, torch.Tensor | None], out: Collected,
                     depends: dict[str, bool | None], cancels: dict[int, tuple[bool | None, int]]) -> None:
    if not any(p.requires_grad for p, _ in params):
        out.checks.append(check(params[0][1][0], "step.requires_grad_false", Status.WARN,
                                f"all {len(params)} parameters have requires_grad=False: nothing can learn",
                                {"parameters": len(params), "trainable": 0}))
    for p, names in params:
        where, ev = names[0], {"names": names} if len(names) > 1 else {}
        if not p.requires_grad:
            out.checks.append(check(where, "step.gradient", Status.PASS,
                                    f"{label(names)}: requires_grad=False, not expected to get a gradient", ev))
            continue
        state, gnorm = grad_state(grads.get(id(p)))
        ev.update({"grad": state, "grad_norm": gnorm})
        if state in ("none", "zero") and depends.get(where) is not True:
            why = ("the loss does not depend on it (perturbing it on a copy leaves the loss unchanged): unused by this "
                   "objective, by design or a module left out of forward" if depends.get(where) is False else
                   "whether the loss depends on it could not be checked")
            out.checks.append(check(where, "step.unused_parameter", Status.WARN,
                                    f"{label(names)}: gradient is {'None' if state == 'none' else 'exactly zero'} after "
                                    f"backward, and {why}", {**ev, "loss_depends": depends.get(where)},
                                    hint="declare it with frozen=[...] if that is by design, else use it in the loss"))
        elif state == "none":
            out.checks.append(check(where, "step.no_gradient", Status.FAIL,
                                    f"{label(names)}: gradient is None after backward from .grad=None, although the loss "
                                    "depends on it (perturbing it on a copy moves the loss)", ev,
                                    expected="a gradient tensor", observed="None",
                                    hint="the gradient path to this parameter is cut; run reachability() to find where"))
        elif state == "zero" and cancels.get(id(p), (None, 0))[0]:
            out.checks.append(cancelled_check(where, label(names), ev, cancels[id(p)][1], "step.zero_gradient"))
        elif state == "zero":
            out.checks.append(check(where, "step.zero_gradient", Status.FAIL,
                                    f"{label(names)}: gradient is exactly zero ({p.numel()} elements), although the loss "
                                    "depends on it (perturbing it on a copy moves the loss)", ev,
                                    expected="a nonzero gradient", observed="all zeros",
                                    hint="dead units, a multiplication by zero, or a constant output downstream"))
        elif state == "nonfinite":
            out.checks.append(check(where, "step.nonfinite_gradient", Status.FAIL,
                                    f"{label(names)}: gradient has non-finite values", ev,
                                    expected="finite gradient", observed="NaN/inf in gradient"))
        else:
            out.checks.append(check(where, "step.gradient", Status.PASS, f"{label(names)}: grad norm {gnorm:.4g}", ev))


def _plain_sgd(opt: torch.optim.Optimizer, group: dict) -> str:
    """'' when the group follows delta = -lr * grad exactly; otherwise why not."""
    if not isinstance(opt, torch.optim.SGD):
        return f"{type(opt).__name__} is not plain SGD (stateful update rule)"
    for key, plain in (("momentum", 0), ("weight_decay", 0), ("nesterov", False), ("maximize", False)):
        if group.get(key, plain) != plain:
            return f"SGD with {key}={group.get(key)} is not plain SGD"
    return ""


def _update_check(names: list[str], group: dict | None, before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor,
                  gnorm: float, copt: torch.optim.Optimizer, rtol: float) -> tuple[Check, bool]:
    """The check for one parameter that got a nonzero gradient, and whether the step moved it."""
    where = names[0]
    dnorm, pnorm = norm(after - before), norm(before)
    ev = {"grad_norm": gnorm, "delta_norm": dnorm, "relative_delta": dnorm / pnorm if pnorm else dnorm,
          "in_optimizer": group is not None, "lr": float(group["lr"]) if group is not None else None}
    if dnorm == 0.0 and below_rounding(before, grad, group):
        return check(where, "step.update", Status.PASS,
                     f"{label(names)}: did not move, as expected: lr*|grad| (grad norm {gnorm:.3g}) is "
                     "within float rounding of every element", ev), False
    if dnorm == 0.0 and group is not None and float(group["lr"]) == 0.0 and group.get("initial_lr") == 0:
        gi = next(i for i, g in enumerate(copt.param_groups) if g is group)
        ev.update(param_group=gi, initial_lr=0.0, group_params=len(group["params"]))
        return check(where, "step.lr_zero", Status.FAIL,
                     f"{label(names)}: param_group {gi} ({len(group['params'])} tensors) has base lr 0 (its schedule's "
                     "initial_lr is 0, so every scheduled lr is 0 too): it never moves", ev,
                     expected="a positive base lr for every group that holds trainable parameters",
                     observed=f"param_group {gi}: lr 0, initial_lr 0",
                     hint=f"set param_group {gi}'s 'lr' (a typo in the group's dict? a value meant for another key)"), False
    if dnorm == 0.0 and group is not None and float(group["lr"]) == 0.0:
        return check(where, "step.update", Status.PASS,
                     f"note: {label(names)}: its param group's lr is 0 now (a warmup schedule at its first step?), so it "
                     "did not move; the update was not checked", ev), False
    if dnorm == 0.0:
        why = "is not in any optimizer param group" if group is None else f"is in the optimizer with lr {ev['lr']:.3g}"
        return check(where, "step.not_updated", Status.FAIL,
                     f"{label(names)}: grad norm {gnorm:.4g} but the step moved it by 0; it {why}", ev,
                     expected="parameter moves after optimizer.step()", observed="delta norm 0",
                     hint="build the optimizer from the current model.parameters() (after any module swap)"), False
    if group is not None and not _plain_sgd(copt, group):
        if type(copt) is not torch.optim.SGD or step_hooks(copt):
            ev["own_step"] = f"{type(copt).__name__} has {'its own step' if type(copt) is not torch.optim.SGD else 'a step hook'}"
        return _rule_check(names, ev, before, after, grad, float(group["lr"]), rtol), True
    return check(where, "step.update", Status.PASS,
                 f"{label(names)}: moved by {dnorm:.4g} ({ev['relative_delta']:.3g} of its norm)", ev), True


def _rule_check(names: list[str], ev: dict, before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor, lr: float,
                rtol: float) -> Check:
    """Plain SGD: did the parameter move by exactly ``-lr * grad``?"""
    rel, bad = rule_error(before, after, grad, lr, rtol)
    ev["max_relative_error"] = rel
    own = ev.get("own_step", "")  # a subclass's own step or a step hook may change the update on purpose: unconfirmed
    status = (Status.WARN if own else Status.FAIL) if bad else Status.PASS
    msg = (f"{label(names)}: delta vs -lr*grad max relative error {rel:.3g} (rtol {rtol:g}); "
           f"moved by {ev['delta_norm']:.4g} ({ev['relative_delta']:.3g} of its norm)"
           + (f"; {own}: its rule may be its own by design" if own and bad else ""))
    return check(names[0], "step.update_rule" if bad else "step.update", status, msg, ev,
                 expected=f"delta = -lr*grad (lr {lr:.3g})", observed=f"max relative error {rel:.3g}",
                 hint="the optimizer's step is not plain SGD: a subclass, a hook, or a rescaled gradient")


def _update_checks(params: list, copt: torch.optim.Optimizer, grads: dict, before: dict, rtol: float,
                   out: Collected) -> None:
    group_of = {id(p): g for g in copt.param_groups for p in g["params"]}
    reasons = sorted({r for g in copt.param_groups if (r := _plain_sgd(copt, g))})
    moved_count = 0
    for p, names in params:
        state, gnorm = grad_state(grads.get(id(p)))
        if not p.requires_grad or state != "nonzero":
            continue
        found, moved = _update_check(names, group_of.get(id(p)), before[id(p)], p.detach(), grads[id(p)], gnorm, copt,
                                     rtol)
        out.checks.append(found)
        moved_count += moved
    out.details["moved"] = moved_count
    if reasons:
        out.checks.append(check("optimizer", "step.update_rule", Status.SKIPPED,
                                f"update rule check skipped: {'; '.join(reasons)}", {"reasons": reasons}))


def _reevaluate(cmodel: nn.Module, copt: torch.optim.Optimizer, batch: Any, loss_fn: Callable) -> torch.Tensor:
    copt.zero_grad()
    with torch.enable_grad():
        loss = _batch.compute_loss(cmodel, batch, loss_fn)[1].reshape(())
        loss.backward()
    return loss


def _controlled_step(model: nn.Module, batch: Any, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                     rtol: float, norms: NormWatch) -> Collected:
    out = Collected()
    try:
        cmodel, copt = detached_copy(model, optimizer)
    except Exception as exc:  # noqa: BLE001 - any deepcopy failure means the controlled step cannot run
        out.reason = (f"could not deep-copy the model and optimizer together ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); step_probe steps a copy, so make them "
                      "deep-copyable (copy.deepcopy((model, optimizer)))")
        out.details["_uncopyable"] = True
        return out
    params = unique_params(cmodel)
    for p, _ in params:
        p.grad = None
    with NormWatch(cmodel) as copy_norms:
        loss = _forward(cmodel, batch, loss_fn, out)
    norms.hits.update(copy_norms.hits)
    if loss is None:
        return out
    trainable = [p for p, _ in params if p.requires_grad]
    grads: dict[int, torch.Tensor | None] = {}
    if loss.requires_grad and trainable:
        missing = [p for p in trainable if id(p) not in set(graph_leaves([loss.grad_fn]))] if loss.grad_fn else []
        nested = nested_grads(loss, missing)  # written by a custom autograd function's own backward
        try:
            found = torch.autograd.grad(loss.reshape(()), trainable, allow_unused=True, retain_graph=True)
        except RuntimeError:  # reentrant checkpointing refuses .grad(): a full backward of a new forward instead
            if (loss := _forward(cmodel, batch, loss_fn, out)) is None:
                return out
            loss.reshape(()).backward(retain_graph=True)
            found = [p.grad for p in trainable]
        grads = {id(p): (None if g is None else g.detach()) for p, g in zip(trainable, found)}
        grads.update({k: v for k, v in nested.items() if grads.get(k) is None})
    empty = [names[0] for p, names in params if p.requires_grad and grad_state(grads.get(id(p)))[0] in ("none", "zero")]
    depends = loss_depends(cmodel, batch, loss_fn, empty) if empty else {}  # a zero it depends on: cut or cancelled
    zero = [p for p, n in params if depends.get(n[0]) is True and grad_state(grads.get(id(p)))[0] == "zero"]
    _gradient_checks(params, grads, out, depends, cancelled(loss, zero) if zero and loss.grad_fn is not None else {})
    out.details["_ref"] = [grads.get(id(p)) for p, _ in params]  # the train_step watch judges descent against these
    if copt is None:
        return out
    before = {id(p): p.detach().clone() for p in trainable}
    for p in trainable:
        p.grad = grads.get(id(p))
    step_copy(copt, lambda: _reevaluate(cmodel, copt, batch, loss_fn))
    _update_checks(params, copt, grads, before, rtol, out)
    diverged = _diverges(params, copt, before, float(loss.detach().float().reshape(())), eval_loss(cmodel, batch, loss_fn))
    if diverged is not None:
        out.checks.append(diverged)
    confirm_not_updated(out, params, copt)  # steps the copy again: after every read of the first step
    return out


def _diverges(params: list, copt: torch.optim.Optimizer, before: dict, loss0: float, loss1: float | None) -> Check | None:
    """The controlled step's loss blown up by an update larger than the parameters (``step.diverges``), or None."""
    group_of = {id(p): i for i, g in enumerate(copt.param_groups) for p in g["params"]}
    rows = [(names, group_of[id(p)], before[id(p)], p.detach()) for p, names in params
            if id(p) in before and id(p) in group_of]
    groups = relative_updates(rows)
    return divergence_check(loss0, loss1, groups, lambda i: f"param_group {i} (lr={float(copt.param_groups[i]['lr']):g})",
                            CONTROLLED)
