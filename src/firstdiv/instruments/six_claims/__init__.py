"""Six-claim audit of a raw network (appendix section 4, "ask which of six claims is failing").

Missing nonlinearity, symmetric or zero initialization, a wrong objective, a detached parameter, a
healthy gradient on a parameter that is never updated, and evaluation in train mode look alike from a
loss curve; no single gradient statistic separates them. Each claim gets its own evidence:

- REPRESENTATION: the output is not affine in the input (``f(a x1 + (1-a) x2)`` vs
  ``a f(x1) + (1-a) f(x2)`` on an eval-mode copy, tolerance from the output dtype's eps) ->
  ``claim.representation.affine`` only when >1 linear layer is stacked AND the task needs more (the batch's
  targets are not fit linearly, or ``self.act = nn.Identity()``); a linear model gets a note. An output identical
  for every input even after perturbing the weights -> ``claim.representation.constant_output``;
- COMPUTATION: hidden units of every Linear/Conv layer differ (weight rows not all zero / identical,
  or, if they are, their gradient rows differ) -> ``claim.computation.zero_init`` / ``symmetric_init``;
- OBJECTIVE: the loss is finite and scalar, does not take probabilities as logits, and falls when the
  outputs move toward the targets and when the parameters take a small step along -grad ->
  ``claim.objective.nonfinite_loss`` (a loss that is not a scalar float tensor breaks loss_fn's
  contract: SKIPPED) / ``probabilities_as_logits`` / ``wrong_sign`` /
  ``wrong_direction`` / ``not_descended``;
- DIFFERENTIATION: every trainable parameter gets a finite gradient -> ``claim.differentiation.detached``
  / ``nonfinite`` (an all-zero gradient is a WARN, ``claim.differentiation.zero_gradient``);
- UPDATE: every parameter with a healthy gradient moves in one optimizer step (on a copy), or, with
  ``optimizer=None``, in one call of your ``train_step`` (on your objects, restored) -> ``claim.update.not_updated``;
- EVALUATION: ``eval_fn`` runs Dropout/BatchNorm in eval mode, on the model and on what its closure reaches (an EMA
  copy) -> ``claim.evaluation.train_mode``; a non-finite metric, or eval-mode output going non-finite where
  training mode stays finite -> ``claim.evaluation.non_finite``; two calls disagreeing on one batch WARN.

User code that raises (``eval_fn``, ``train_step``) leaves its claim SKIPPED (``*.not_checked``, the error's first
line) and the report WARNs; notes (PASS findings whose message starts with ``note: ``) are also listed in
``details["notes"]``.

Everything else that runs the model runs on deep copies, inside a guard that restores your objects, the RNGs
and grad mode. A claim without evidence is SKIPPED with the reason, never PASS.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.batch import (
    LOSS_CONTRACT,
    Batch,
    UserCodeError,
    check_callable,
    check_loss_fn,
    check_model,
    check_step_source,
    loss_problem,
    split_batch,
)
from .._core.checks import Check, compose
from .._core.closure import closure_state, step_optimizers, tensors_in, trained_elsewhere
from .._core.elsewhere import other_objective_note, split_other
from .._core.examples import batch_axis as _batch_axis
from .._core.examples import logits_of
from .._core.invariance import sort_gradless, unused_message
from .._core.python_graph import hidden_modules
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from ._computation import computation
from ._evaluation import evaluation
from ._measured_step import Measured, held_by_lr, measure, step_moves
from ._objective_probes import Recording, class_checks, descent, infer_task, regression_checks
from ._representation import AFFINE_RTOL, representation
from ._verdict import NOTE, claim, skip

__all__ = ["AFFINE_RTOL", "CLAIMS", "six_claims"]

INSTRUMENT = "six_claims"
CLAIMS = ("REPRESENTATION", "COMPUTATION", "OBJECTIVE", "DIFFERENTIATION", "UPDATE", "EVALUATION")
NOT_CHECKED_SUFFIX = ".not_checked"  # user code (eval_fn, train_step) raised: that claim is SKIPPED, the report WARNs
HEALTHY_RGRAD = 1e-6  # a gradient below this fraction of the largest weight is rounding noise, not "healthy"


@reports_user_hooks
def six_claims(model: nn.Module, batch: Any, loss_fn: Any, optimizer: torch.optim.Optimizer | None = None, *,
               eval_fn: Any = None, train_step: Any = None, batch_axis: int | None = None) -> Report:
    """Audit the six claims of a raw network, one finding per claim, in order; the first failing claim
    is the first divergence.

    ``batch`` is a tuple ``(inputs, targets)`` or a dict (see :mod:`firstdiv.instruments._core.batch`);
    ``loss_fn(outputs, targets)`` returns a scalar loss; ``eval_fn(model, batch)`` is optional (EVALUATION
    is SKIPPED without it). ``optimizer`` may be None when ``train_step`` (a zero-argument closure doing one
    step of your loop, e.g. manual ``p.add_(p.grad, alpha=-lr)`` updates) is given: UPDATE is then judged from
    the parameter deltas of one ``train_step()`` on your objects, restored afterwards. ``batch_axis``: the axis
    of the examples (None infers it; 1 for sequence-first inputs). Everything else runs on deep copies.
    If the first forward pass or loss raises, the report is SKIPPED with the reason (everything restored); a
    probe that raises later leaves its claim SKIPPED with the error as the reason.
    """
    check_model(model)
    b = split_batch(batch, model)
    check_loss_fn(loss_fn)
    optimizer = check_step_source(optimizer, train_step)
    for value, key in ((eval_fn, "eval_fn"), (train_step, "train_step")):
        if value is not None:
            check_callable(value, key)
    if batch_axis is not None and (not isinstance(batch_axis, int) or isinstance(batch_axis, bool) or batch_axis < 0):
        raise InvalidArgument(f"Expected `batch_axis` to be a non-negative int or None but got {batch_axis!r}")
    axis = _batch_axis(b, batch_axis)
    # the user's objects train_step and eval_fn reach (an EMA copy, the model itself): restored afterwards
    extra = [m for f in (train_step, eval_fn) if f is not None for m in closure_state(f)]
    with guarded(model, optimizer, *hidden_modules(model), *extra, tensors_in(batch)):
        try:
            run = measure(model, optimizer, b, loss_fn)
        except UserCodeError as exc:
            return Report(INSTRUMENT, Status.SKIPPED, reason=f"{exc}; the six claims need one forward pass and loss "
                                                             "that run")
        # manual updates, or several optimizers (a SparseAdam beside the dense one): only the user's step steps them all
        opts = step_optimizers(train_step, optimizer, model) if train_step is not None else []
        stepped = (optimizer is None or len(opts) > 1) and run.loss_problem is None
        if stepped:
            lr_at_step: dict[int, float] = {}
            with guarded(model, train_step, *extra):  # the user's own step, on the user's objects: restored
                run.moved, run.step_error = step_moves(model, train_step, tuple(opts), lr_at_step)
            run.elsewhere = trained_elsewhere(train_step, optimizer, model)
            run.moved_later = held_by_lr(model, opts, run, [n for n, m in run.moved.items() if not m], lr_at_step)
            run.moved.update(dict.fromkeys(run.moved_later, True))
        probed = not stepped and train_step is not None and run.loss_problem is None and not all(
            run.owned.get(n) for n in run.trainable)
        if probed:
            with guarded(model, train_step, *extra):  # does the step update what the optimizer does not own by hand?
                run.by_step = step_moves(model, train_step)[0]
        claims = [representation(model, b, axis), computation(model, run, (optimizer, b, loss_fn)), _objective(model, b, loss_fn, run),
                  _differentiation(run, model, b, loss_fn), _update(run, stepped), evaluation(model, batch, eval_fn)]
    return _report(claims, eval_fn is not None, stepped, probed)


# ---- OBJECTIVE (probes: ._objective_probes) ----------------------------------------------------

def _objective(model: nn.Module, batch: Batch, loss_fn: Any, run: Measured) -> Check:
    name = "OBJECTIVE"
    if run.loss_problem is not None and run.loss is None:  # loss_fn computes nothing from what it is handed
        return skip(name, "claim.objective", f"{run.loss_problem} on the measured copy (a loss_fn that reads a loss "
                    "stored on your model gives nothing on a copy): make loss_fn compute the loss from (outputs, targets)")
    if run.loss_problem is not None and not (torch.is_tensor(run.loss) and loss_problem(run.loss) is None):
        # not a scalar float tensor: the evidence's loss_fn breaks its contract, which says nothing of the program
        return skip(name, "claim.objective" + NOT_CHECKED_SUFFIX, f"{run.loss_problem} on the measured copy; {LOSS_CONTRACT}")
    if run.loss_problem is not None:
        return claim(name, Status.FAIL, "claim.objective.nonfinite_loss", run.loss_problem,
                     {"loss_problem": run.loss_problem}, "a finite scalar floating-point loss",
                     "check the loss: reduction, masking, log of zero")
    loss0 = float(run.loss.reshape(()))
    loss_fn = Recording(loss_fn)
    out = logits_of(run.outputs) if isinstance(run.outputs, dict) else run.outputs  # a ModelOutput's logits
    task, dim, k = infer_task(out, batch.targets)
    kind, message, ev = "", "", {"loss": loss0, "task": task or "unknown"}
    head = run.head
    if head:  # loss_fn applies trainable parameters of its own: the outputs are not what it compares with the targets
        task = None
        ev["head_inside_loss"] = len(head)
    if task == "class":
        kind, message, ev = class_checks(out, batch.targets, dim, k, loss_fn, loss0)
    elif task == "regression":
        kind, message, ev = regression_checks(out, batch.targets, loss_fn, loss0)
    if not kind:
        kind, dev = descent(model, batch, loss_fn, run.grads)
        ev.update(dev)
        if kind:
            message = (f"a small step along -grad did not lower the loss ({dev['loss_before_step']:.6g} -> "
                       f"{dev['loss_after_steps']}): the gradient does not descend the objective it came from")
    if kind:
        return claim(name, Status.FAIL, kind, message, ev, "an objective minimized by correct outputs",
                     "check the loss's sign, what the model outputs (logits vs probabilities) and what the loss expects")
    if loss_fn.errors:
        ev["probe_errors"] = loss_fn.errors[:3]
    probes = [ev.get("loss_after_raising_correct_logit"), ev.get("loss_one_percent_closer"), *ev.get("loss_after_steps", [])]
    ran = [v for v in probes if v is not None]
    if not ran:
        why = loss_fn.errors[0] if loss_fn.errors else ("targets do not index or match the outputs and the loss has "
                                                         "no gradient to follow")
        return skip(name, "claim.objective", f"no probe could run ({why})", **ev)
    return claim(name, Status.PASS, "claim.objective", f"loss {loss0:.4g} is finite, falls when outputs move toward "
                 f"the targets and along -grad ({len(ran)} probes)", ev)


# ---- DIFFERENTIATION / UPDATE ------------------------------------------------------------------

def _differentiation(run: Measured, model: nn.Module, b: Batch, loss_fn: Any) -> Check:
    name, check = "DIFFERENTIATION", "claim.differentiation"
    if run.loss_problem is not None:
        return skip(name, check, f"no valid loss to differentiate ({run.loss_problem}); see OBJECTIVE")
    if not run.trainable:
        return claim(name, Status.WARN, "claim.differentiation.no_trainable",
                     "the model has no trainable parameters (every requires_grad is False): nothing can learn",
                     {"trainable": 0}, "trainable parameters", "unfreeze what should train (requires_grad_(True))")
    missing = [n for n in run.trainable if run.grads.get(n) is None]
    bad = [n for n in run.trainable if n not in missing and not bool(torch.isfinite(run.grads[n]).all())]
    zero = [n for n in run.trainable if n not in missing and n not in bad and not bool(run.grads[n].any())]
    ev = {"trainable": len(run.trainable), "none": missing[:8], "nonfinite": bad[:8], "zero": zero[:8],
          "with_gradient": len(run.trainable) - len(missing)}
    cut, unused, unknown = sort_gradless(model, b, loss_fn, missing) if missing else ([], [], [])
    # another objective: a declared optimizer that does not own it, another one train_step reaches that does
    cut, other = split_other(cut, run.elsewhere if any(run.owned.values()) else set())
    ev.update(cut=cut[:8], unused=unused[:8], unconfirmed=unknown[:8], another_objective=other[:8])
    if cut:
        return claim(name, Status.FAIL, "claim.differentiation.detached",
                     f"{len(cut)} of {len(run.trainable)} trainable parameters get no gradient (None) after backward "
                     f"although the loss depends on them (perturbing them on a copy moves it; first: {cut[0]}): the "
                     "gradient path is cut", ev, "every parameter the loss depends on gets a gradient",
                     "run reachability to find where the path stops (.detach(), no_grad, integer cast)")
    if bad:
        return claim(name, Status.FAIL, "claim.differentiation.nonfinite",
                     f"{len(bad)} parameters get non-finite gradients (first: {bad[0]})", ev, "finite gradients")
    if unused or unknown:
        return claim(name, Status.WARN, "claim.differentiation.unused", unused_message(unused, unknown), ev,
                     "every trainable parameter gets a gradient", "wire the module into the loss, or declare it")
    if zero:
        return claim(name, Status.WARN, "claim.differentiation.zero_gradient",
                     f"{len(zero)} parameters get an all-zero gradient (first: {zero[0]}); the others: finite, nonzero", ev)
    if other:
        return claim(name, Status.PASS, check, other_objective_note(other), ev)
    return claim(name, Status.PASS, check, f"all {len(run.trainable)} trainable parameters get a finite, nonzero gradient", ev)


def _healthy(grad: torch.Tensor | None, value: torch.Tensor | None) -> bool:
    """Finite, and large enough not to be float32 rounding noise next to the weights it would move."""
    if grad is None or value is None or not bool(torch.isfinite(grad).all()):
        return False
    scale = float(value.abs().max()) if value.numel() else 0.0
    return float(grad.abs().max()) > HEALTHY_RGRAD * max(scale, 1e-3)


def _update(run: Measured, stepped: bool) -> Check:
    name, check = "UPDATE", "claim.update"
    if run.loss_problem is not None:
        return skip(name, check, f"no valid loss to step on ({run.loss_problem}); see OBJECTIVE")
    if run.step_error and stepped:  # the user's own step raised: a claim that could not be checked, and the report WARNs
        return claim(name, Status.SKIPPED, "claim.update.not_checked", f"UPDATE could not be checked: {run.step_error}")
    if run.step_error:
        return skip(name, check, run.step_error)
    healthy = [n for n in run.trainable if _healthy(run.grads.get(n), run.values.get(n))]
    if not healthy:
        return skip(name, check, f"no parameter got a finite gradient above {HEALTHY_RGRAD:g} x its largest weight; "
                    "see DIFFERENTIATION")
    stuck = [n for n in healthy if not run.moved.get(n, False)]
    step = "one call of train_step" if stepped else "one optimizer step"
    told = [n for n in stuck if not stepped and run.owned.get(n) and run.lr.get(n) == 0.0]  # lr 0 now: a warmup
    by_hand = [n for n in stuck if run.by_step.get(n) or n in run.elsewhere]  # train_step or another optimizer trains them
    stuck = [n for n in stuck if n not in told and n not in by_hand]
    ev = {"healthy_gradients": len(healthy), "moved": len(healthy) - len(stuck), "not_moved": stuck[:8],
          "healthy_threshold": HEALTHY_RGRAD, "judged_from": "train_step on your objects" if stepped else "optimizer copy",
          "moved_by_train_step": by_hand[:8]}
    if stuck:
        first = stuck[0]
        ev["grad_norm"] = float(run.grads[first].norm())
        if stepped:
            why = ("no parameter moved: the update never reaches the parameters (rebinding `p = p - lr * p.grad` instead "
                   "of updating in place?)" if len(stuck) == len(healthy) else "train_step leaves it out")
            hint = "update every trainable parameter in place (with torch.no_grad(): p.add_(p.grad, alpha=-lr))"
        else:
            ev.update({"owned_by_optimizer": run.owned.get(first, False), "lr": run.lr.get(first)})
            why = ("it is not owned by the optimizer" if not run.owned.get(first) else f"its param group has lr={run.lr.get(first)}")
            hint = "give the optimizer every trainable parameter (optimizer = Opt(model.parameters(), ...)) with lr > 0"
        return claim(name, Status.FAIL, "claim.update.not_updated",
                     f"{len(stuck)} parameters with a healthy gradient did not move in {step} (first: {first}, "
                     f"grad norm {ev['grad_norm']:.3g}; {why})", ev, "every parameter with a nonzero gradient moves in a step",
                     hint)
    if told and any(v for v in run.lr.values()):  # some groups at lr 0, others not: frozen by lr, or a slip
        ev.update(lr=0.0, lr_zero=told[:8])
        return claim(name, Status.WARN, "claim.update.lr_zero", f"{len(told)} parameters with a healthy gradient did not "
                     f"move in {step}: their param group's lr is 0 while other groups' is not (first: {told[0]}); they "
                     "never train unless a schedule raises it", ev, "a positive lr for groups meant to train",
                     "set the group's lr, or freeze those parameters (requires_grad_(False)) if that is the intent")
    if told:
        return claim(name, Status.PASS, check, f"note: {len(told)} parameters did not move in {step} because every param "
                     "group's lr is 0 at this step (a warmup written by hand?)", ev)
    if run.moved_later and stepped:
        ev["moved_at_a_raised_lr"] = run.moved_later[:8]
        return claim(name, Status.PASS, check, f"note: {len(run.moved_later)} parameters did not move in {step}: their "
                     "param group's lr at that step was at most 1e-6 (a warmup's start), and a step of a copy of their "
                     "optimizer at a larger lr moves them (the update was below float32's resolution next to the "
                     f"weights; first: {run.moved_later[0]})", ev)
    if run.moved_later:
        ev["moved_on_later_steps"] = run.moved_later[:8]
        return claim(name, Status.PASS, check, f"note: {len(run.moved_later)} parameters did not move on the optimizer's "
                     "first step but its next steps on the same gradient move them (its own step holds the first "
                     "update: a warmup computed inside step?), or one at a larger lr does (at this lr and gradient the "
                     f"update is below float32's resolution next to the weights; first: {run.moved_later[0]})", ev)
    return claim(name, Status.PASS, check, f"all {len(healthy)} parameters with a healthy gradient moved in {step}", ev)


# ---- the report --------------------------------------------------------------------------------

def _report(claims: list[Check], evaluated: bool, stepped: bool, probed: bool = False) -> Report:
    side = (("" if stepped else "deep copies only: ") + "forward/backward passes" + ("" if stepped else " and one sacrificial optimizer step") + " on a deep copy of "
            "model and optimizer" + ("; eval_fn called on a deep copy" if evaluated else "")
            + ("; train_step called once on your objects, every value, .grad, optimizer/scheduler/scaler state, mode "
               "and RNG state restored afterwards" if stepped or probed else "")
            + "; your objects, RNG states and grad mode restored")
    details: dict[str, Any] = {c.finding.where: c.finding.status.value for c in claims}
    notes = [c.finding.message for c in claims if c.finding.status is Status.PASS and c.finding.message.startswith(NOTE)]
    if notes:
        details["notes"] = notes
    report = compose(INSTRUMENT, claims, side, details, none_checked="no claim could be checked")
    unchecked = [c.finding.message for c in claims if c.finding.check.endswith(NOT_CHECKED_SUFFIX)]
    if unchecked and report.status is Status.PASS:  # a claim that could not run leaves the audit unproven
        report = Report(INSTRUMENT, Status.WARN, report.first_divergence, report.findings, report.side_effects,
                        report.reason, {**report.details, "warnings": unchecked})
    return report
