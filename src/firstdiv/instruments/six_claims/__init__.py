"""Six-claim audit of a raw network (appendix section 4, "ask which of six claims is failing").

Missing nonlinearity, symmetric or zero initialization, a wrong objective, a detached parameter, a
healthy gradient on a parameter that is never updated, and evaluation in train mode look alike from a
loss curve; no single gradient statistic separates them. Each claim gets its own evidence:

- REPRESENTATION: the output is not affine in the input (``f(a x1 + (1-a) x2)`` vs
  ``a f(x1) + (1-a) f(x2)`` on an eval-mode copy) -> ``claim.representation.affine``;
- COMPUTATION: hidden units of every Linear/Conv layer differ (weight rows not all zero / identical,
  or, if they are, their gradient rows differ) -> ``claim.computation.zero_init`` / ``symmetric_init``;
- OBJECTIVE: the loss is finite and scalar, does not take probabilities as logits, and falls when the
  outputs move toward the targets and when the parameters take a small step along -grad ->
  ``claim.objective.invalid_loss`` / ``nonfinite_loss`` / ``probabilities_as_logits`` / ``wrong_sign`` /
  ``wrong_direction`` / ``not_descended``;
- DIFFERENTIATION: every trainable parameter gets a finite gradient -> ``claim.differentiation.detached``
  / ``nonfinite`` (an all-zero gradient is a WARN, ``claim.differentiation.zero_gradient``);
- UPDATE: every parameter with a healthy gradient moves in one optimizer step -> ``claim.update.not_updated``;
- EVALUATION: ``eval_fn`` runs Dropout/BatchNorm in eval mode -> ``claim.evaluation.train_mode``.

Everything that runs the model runs on deep copies, inside a guard that restores your objects, the RNGs
and grad mode. A claim without evidence is SKIPPED with the reason, never PASS.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Report, Status
from .._core.batch import (
    Batch,
    UserCodeError,
    check_callable,
    check_loss_fn,
    check_model,
    check_optimizer,
    loss_problem,
    split_batch,
)
from .._core.checks import Check, compose
from .._core.checks import check as _check
from .._core.copying import model_copy
from .._core.python_graph import hidden_modules
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from ._measured_step import Measured, measure, weighted_layers
from ._model_probes import ALPHA, activations, affine_error, mode_dependent, run_eval
from ._objective_probes import Recording, class_checks, descent, infer_task, regression_checks

__all__ = ["CLAIMS", "six_claims"]

INSTRUMENT = "six_claims"
CLAIMS = ("REPRESENTATION", "COMPUTATION", "OBJECTIVE", "DIFFERENTIATION", "UPDATE", "EVALUATION")
AFFINE_RTOL = 1e-4  # float32 rounding of an affine map is ~1e-7 of the output spread; ReLU/tanh nets are >1e-2
WEIGHT_RTOL = 1e-6  # rows "identical": max |row_i - row_0| <= WEIGHT_RTOL * max |W|
GRAD_RTOL = 1e-5  # gradient rows "identical" (BLAS tiling can differ in the last bits)
HEALTHY_RGRAD = 1e-6  # a gradient below this fraction of the largest weight is rounding noise, not "healthy"


@reports_user_hooks
def six_claims(model: nn.Module, batch: Any, loss_fn: Any, optimizer: torch.optim.Optimizer, *,
               eval_fn: Any = None) -> Report:
    """Audit the six claims of a raw network, one finding per claim, in order; the first failing claim
    is the first divergence.

    ``batch`` is a tuple ``(inputs, targets)`` or a dict (see :mod:`firstdiv.instruments._core.batch`);
    ``loss_fn(outputs, targets)`` returns a scalar loss; ``eval_fn(model, batch)`` is optional (EVALUATION
    is SKIPPED without it). Your model and optimizer are not touched: every pass runs on deep copies.
    If the first forward pass or loss raises, that exception propagates (everything restored); a probe
    that raises later leaves its claim SKIPPED with the error as the reason.
    """
    check_model(model)
    b = split_batch(batch, model)
    check_loss_fn(loss_fn)
    check_optimizer(optimizer)
    if eval_fn is not None:
        check_callable(eval_fn, "eval_fn")
    with guarded(model, optimizer, *hidden_modules(model)):
        try:
            run = measure(model, optimizer, b, loss_fn)
        except UserCodeError as exc:
            return Report(INSTRUMENT, Status.SKIPPED, reason=f"{exc}; the six claims need one forward pass and loss "
                                                             "that run")
        claims = [_representation(model, b), _computation(model, run), _objective(model, b, loss_fn, run),
                  _differentiation(run), _update(run), _evaluation(model, batch, eval_fn)]
    return _report(claims, eval_fn is not None)


def _claim(name: str, status: Status, kind: str, message: str, evidence: dict[str, Any] | None = None,
           expected: str = "", hint: str = "") -> Check:
    """One claim's verdict; ``kind`` names the failure, and a failing claim's message is what was observed."""
    return _check(name, kind, status, message, evidence, expected=expected, observed=message, hint=hint)


def _skip(name: str, check: str, reason: str, **evidence: Any) -> Check:
    return _claim(name, Status.SKIPPED, check, f"no evidence: {reason}", evidence)


def _units(m: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """Weight as one row per output unit: [units, fan_in]."""
    rows = w.detach().transpose(0, 1) if isinstance(m, nn.modules.conv._ConvTransposeNd) else w.detach()
    return rows.reshape(rows.shape[0], -1).float()


# ---- REPRESENTATION ----------------------------------------------------------------------------

def _representation(model: nn.Module, batch: Batch) -> Check:
    name, check = "REPRESENTATION", "claim.representation.affine"
    x = batch.inputs
    if batch.as_kwargs or not torch.is_tensor(x):
        return _skip(name, check, "inputs are not a single tensor; the affine test mixes two input tensors")
    if not x.is_floating_point():
        return _skip(name, check, f"inputs are {x.dtype} (e.g. token ids): a mixture of two inputs is not an input",
                     dtype=str(x.dtype))
    try:
        worst, spread, pairs = affine_error(model_copy(model).eval(), x)
    except Exception as exc:  # noqa: BLE001 - the model refused a mixed input: no evidence, not a crash
        return _skip(name, check, f"the model raised {type(exc).__name__} on a mixture of inputs: {exc}")
    if worst is None:
        return _skip(name, check, "the model's output holds no floating-point tensor")
    ev = {"relative_error": worst, "threshold": AFFINE_RTOL, "alpha": ALPHA, "pairs": pairs, "output_spread": spread,
          "activation_modules": activations(model)}
    if spread == 0:
        return _skip(name, check, "the output does not change with the input (spread 0), so affinity cannot be judged", **ev)
    if worst < AFFINE_RTOL:
        return _claim(name, Status.FAIL, check,
                     f"output is affine in the input: f(a x1+(1-a) x2) matches a f(x1)+(1-a) f(x2) to relative error "
                     f"{worst:.2e} (< {AFFINE_RTOL:g}) over {pairs} input pairs; stacked layers collapse to one linear map",
                     ev, "a nonlinear map of the input (relative error well above 1e-4)",
                     "put a nonlinearity (ReLU, GELU, tanh) between the linear layers")
    return _claim(name, Status.PASS, check, f"output is not affine in the input: relative error {worst:.3g} "
                 f"(affine would be < {AFFINE_RTOL:g})", ev)


# ---- COMPUTATION -------------------------------------------------------------------------------

def _row_spread(rows: torch.Tensor) -> float:
    return float((rows - rows[0]).abs().max())


def _symmetry(lname: str, m: nn.Module, run: Measured) -> tuple[dict[str, Any], bool] | None:
    """Evidence for a layer whose weight rows are identical (or all zero), and whether its gradient rows
    differ (the first update then breaks the tie); None when the weight rows already differ."""
    rows = _units(m, m.weight)
    wmax = float(rows.abs().max())
    wspread = _row_spread(rows)
    if wspread > WEIGHT_RTOL * wmax:
        return None
    ev = {"module": lname, "units": int(rows.shape[0]), "max_abs_weight": wmax, "max_row_difference": wspread,
          "zero": wmax == 0.0}
    grad = run.grads.get(f"{lname}.weight" if lname else "weight")
    if grad is not None:
        grows = _units(m, grad)
        ev["max_grad_row_difference"] = _row_spread(grows)
        ev["max_abs_grad"] = float(grows.abs().max())
    act = run.activations.get(lname)
    axis = -1 if isinstance(m, nn.Linear) else 1  # where the units are: features last, channels second
    if act is not None and act.dim() >= 2 and act.shape[axis] == rows.shape[0]:
        ev["activation_unit_spread"] = _row_spread(act.movedim(axis, 0).reshape(rows.shape[0], -1).float())
    return ev, grad is not None and ev["max_grad_row_difference"] > GRAD_RTOL * ev["max_abs_grad"]


def _computation(model: nn.Module, run: Measured) -> Check:
    name = "COMPUTATION"
    layers = [(n, m) for n, m in weighted_layers(model) if m.weight.numel() and _units(m, m.weight).shape[0] >= 2]
    if not layers:
        return _skip(name, "claim.computation", "no Linear/Conv layer with at least 2 units to compare")
    broken, healed = [], []
    for lname, m in layers:
        found = _symmetry(lname, m, run)
        if found is not None:
            (healed if found[1] else broken).append(found[0])
    summary = {"layers_checked": len(layers), "symmetric_layers": [e["module"] for e in broken + healed],
               "weight_rtol": WEIGHT_RTOL, "grad_rtol": GRAD_RTOL}
    if broken:
        ev = {**broken[0], **summary}
        kind = "claim.computation.zero_init" if ev["zero"] else "claim.computation.symmetric_init"
        what = "all-zero weights" if ev["zero"] else f"{ev['units']} identical weight rows (max difference {ev['max_row_difference']:.2e})"
        grad_note = ("its gradient rows are identical too" if "max_grad_row_difference" in ev
                     else "it gets no gradient to break the tie")
        return _claim(name, Status.FAIL, kind,
                     f"{ev['module']}: {what}; {grad_note}, so its {ev['units']} units compute the same function and "
                     f"cannot differentiate ({len(broken)} such layers)", ev,
                     "hidden units with different weights (random initialization)",
                     "initialize with random weights (nn.init.kaiming_uniform_ / the layer's default reset_parameters())")
    if healed:
        return _claim(name, Status.PASS, "claim.computation",
                     f"{len(healed)} layers start with identical/zero rows ({', '.join(e['module'] for e in healed)}), but "
                     "their gradient rows differ, so the first update breaks the symmetry", {**healed[0], **summary})
    return _claim(name, Status.PASS, "claim.computation",
                 f"all {len(layers)} Linear/Conv layers have distinct weight rows", summary)


# ---- OBJECTIVE (probes: ._objective_probes) ----------------------------------------------------

def _objective(model: nn.Module, batch: Batch, loss_fn: Any, run: Measured) -> Check:
    name = "OBJECTIVE"
    if run.loss_problem is not None:
        finite_issue = torch.is_tensor(run.loss) and loss_problem(run.loss) is None
        kind = "claim.objective.nonfinite_loss" if finite_issue else "claim.objective.invalid_loss"
        return _claim(name, Status.FAIL, kind, run.loss_problem, {"loss_problem": run.loss_problem},
                     "a finite scalar floating-point loss", "check the loss: reduction, masking, log of zero")
    loss0 = float(run.loss.reshape(()))
    loss_fn = Recording(loss_fn)
    task, dim, k = infer_task(run.outputs, batch.targets)
    kind, message, ev = "", "", {"loss": loss0, "task": task or "unknown"}
    if task == "class":
        kind, message, ev = class_checks(run.outputs, batch.targets, dim, k, loss_fn, loss0)
    elif task == "regression":
        kind, message, ev = regression_checks(run.outputs, batch.targets, loss_fn, loss0)
    if not kind:
        kind, dev = descent(model, batch, loss_fn, run.grads)
        ev.update(dev)
        if kind:
            message = (f"a small step along -grad did not lower the loss ({dev['loss_before_step']:.6g} -> "
                       f"{dev['loss_after_steps']}): the gradient does not descend the objective it came from")
    if kind:
        return _claim(name, Status.FAIL, kind, message, ev, "an objective minimized by correct outputs",
                     "check the loss's sign, what the model outputs (logits vs probabilities) and what the loss expects")
    if loss_fn.errors:
        ev["probe_errors"] = loss_fn.errors[:3]
    probes = [ev.get("loss_after_raising_correct_logit"), ev.get("loss_one_percent_closer"), *ev.get("loss_after_steps", [])]
    ran = [v for v in probes if v is not None]
    if not ran:
        why = loss_fn.errors[0] if loss_fn.errors else ("targets do not index or match the outputs and the loss has "
                                                         "no gradient to follow")
        return _skip(name, "claim.objective", f"no probe could run ({why})", **ev)
    return _claim(name, Status.PASS, "claim.objective", f"loss {loss0:.4g} is finite, falls when outputs move toward "
                 f"the targets and along -grad ({len(ran)} probes)", ev)


# ---- DIFFERENTIATION / UPDATE ------------------------------------------------------------------

def _differentiation(run: Measured) -> Check:
    name, check = "DIFFERENTIATION", "claim.differentiation"
    if run.loss_problem is not None:
        return _skip(name, check, f"no valid loss to differentiate ({run.loss_problem}); see OBJECTIVE")
    if not run.trainable:
        return _claim(name, Status.WARN, "claim.differentiation.no_trainable",
                     "the model has no trainable parameters (every requires_grad is False): nothing can learn",
                     {"trainable": 0}, "trainable parameters", "unfreeze what should train (requires_grad_(True))")
    missing = [n for n in run.trainable if run.grads.get(n) is None]
    bad = [n for n in run.trainable if n not in missing and not bool(torch.isfinite(run.grads[n]).all())]
    zero = [n for n in run.trainable if n not in missing and n not in bad and not bool(run.grads[n].any())]
    ev = {"trainable": len(run.trainable), "none": missing[:8], "nonfinite": bad[:8], "zero": zero[:8],
          "with_gradient": len(run.trainable) - len(missing)}
    if missing:
        return _claim(name, Status.FAIL, "claim.differentiation.detached",
                     f"{len(missing)} of {len(run.trainable)} trainable parameters get no gradient (None) after backward "
                     f"(first: {missing[0]}); the loss does not depend on them", ev,
                     "every trainable parameter gets a gradient", "run reachability to find where the path stops "
                     "(.detach(), no_grad, integer cast, unused branch)")
    if bad:
        return _claim(name, Status.FAIL, "claim.differentiation.nonfinite",
                     f"{len(bad)} parameters get non-finite gradients (first: {bad[0]})", ev, "finite gradients")
    if zero:
        return _claim(name, Status.WARN, "claim.differentiation.zero_gradient",
                     f"{len(zero)} parameters get an all-zero gradient (first: {zero[0]}); the others: finite, nonzero", ev)
    return _claim(name, Status.PASS, check, f"all {len(run.trainable)} trainable parameters get a finite, nonzero gradient", ev)


def _healthy(grad: torch.Tensor | None, value: torch.Tensor | None) -> bool:
    """Finite, and large enough not to be float32 rounding noise next to the weights it would move."""
    if grad is None or value is None or not bool(torch.isfinite(grad).all()):
        return False
    scale = float(value.abs().max()) if value.numel() else 0.0
    return float(grad.abs().max()) > HEALTHY_RGRAD * max(scale, 1e-3)


def _update(run: Measured) -> Check:
    name, check = "UPDATE", "claim.update"
    if run.loss_problem is not None:
        return _skip(name, check, f"no valid loss to step on ({run.loss_problem}); see OBJECTIVE")
    if run.step_error:
        return _skip(name, check, run.step_error)
    healthy = [n for n in run.trainable if _healthy(run.grads.get(n), run.values.get(n))]
    if not healthy:
        return _skip(name, check, f"no parameter got a finite gradient above {HEALTHY_RGRAD:g} x its largest weight; "
                     "see DIFFERENTIATION")
    stuck = [n for n in healthy if not run.moved.get(n, False)]
    ev = {"healthy_gradients": len(healthy), "moved": len(healthy) - len(stuck), "not_moved": stuck[:8],
          "healthy_threshold": HEALTHY_RGRAD}
    if stuck:
        first = stuck[0]
        ev.update({"grad_norm": float(run.grads[first].norm()), "owned_by_optimizer": run.owned.get(first, False),
                   "lr": run.lr.get(first)})
        why = ("it is not owned by the optimizer" if not run.owned.get(first) else f"its param group has lr={run.lr.get(first)}")
        return _claim(name, Status.FAIL, "claim.update.not_updated",
                     f"{len(stuck)} parameters with a healthy gradient did not move in one optimizer step (first: {first}, "
                     f"grad norm {ev['grad_norm']:.3g}; {why})", ev,
                     "every parameter with a nonzero gradient moves in a step",
                     "give the optimizer every trainable parameter (optimizer = Opt(model.parameters(), ...)) with lr > 0")
    return _claim(name, Status.PASS, check, f"all {len(healthy)} parameters with a healthy gradient moved in one step", ev)


# ---- EVALUATION (probe: ._model_probes) ------------------------------------------------------

def _evaluation(model: nn.Module, batch: Any, eval_fn: Any) -> Check:
    name, check = "EVALUATION", "claim.evaluation"
    if eval_fn is None:
        return _skip(name, check, "pass eval_fn=(model, batch) -> metric to check that evaluation runs in eval mode")
    modules = mode_dependent(model)
    try:
        train, evald, calls = run_eval(model, batch, eval_fn, train_first=False)
        if not train and modules and model.training is False:
            train2, _, _ = run_eval(model, batch, eval_fn, train_first=True)
        else:
            train2 = []
    except Exception as exc:  # noqa: BLE001 - user code failed; the other claims still stand
        return _skip(name, check, f"eval_fn raised {type(exc).__name__}: {exc}")
    ev = {"mode_dependent_modules": len(modules), "ran_in_train_mode": train[:8], "ran_in_eval_mode": len(evald),
          "model_calls": calls, "model_was_training": bool(model.training)}
    if calls == 0 or (modules and not (train or evald)):
        return _skip(name, check, "eval_fn did not run the model it was given (pass a function of its `model` argument)", **ev)
    if not modules:
        return _claim(name, Status.PASS, check, "the model has no Dropout (p>0) or BatchNorm module; train and eval mode "
                     f"compute the same function (eval_fn called the model {calls} times)", ev)
    if train:
        return _claim(name, Status.FAIL, "claim.evaluation.train_mode",
                     f"eval_fn ran {len(train)} of {len(train) + len(evald)} Dropout/BatchNorm modules in training mode "
                     f"(first: {train[0]}): dropout stays on and BatchNorm uses batch statistics during evaluation", ev,
                     "Dropout/BatchNorm in eval mode during evaluation", "call model.eval() in eval_fn (and model.train() after)")
    if train2:
        ev["relies_on_caller"] = train2[:8]
        return _claim(name, Status.WARN, check, f"eval_fn ran in eval mode only because the model already was; started "
                     f"from train mode it ran {len(train2)} modules in training mode", ev)
    return _claim(name, Status.PASS, check, f"eval_fn ran all {len(evald)} Dropout/BatchNorm modules in eval mode", ev)


# ---- the report --------------------------------------------------------------------------------

def _report(claims: list[Check], evaluated: bool) -> Report:
    side = ("deep copies only: forward/backward passes and one sacrificial optimizer step on a deep copy of model and "
            "optimizer" + ("; eval_fn called on a deep copy" if evaluated else "")
            + "; your objects, RNG states and grad mode restored")
    return compose(INSTRUMENT, claims, side, {c.finding.where: c.finding.status.value for c in claims},
                   none_checked="no claim could be checked")
