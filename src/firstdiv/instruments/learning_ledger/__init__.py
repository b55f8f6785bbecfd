"""The learning ledger (appendix section 11): training runs but does not learn — walk the learning chain

    TASK -> OBJECTIVE -> DEPENDENCY -> GRADIENT -> OPTIMIZER_OWNERSHIP -> PARAMETER_UPDATE -> CAPABILITY

and stop at the first expected consequence that fails to appear. Each link is one finding with its
evidence; the first failing link is the report's first divergence (``where`` = the link's name) and
the links after it are reported as not reached. "Do not tune learning rate, architecture, precision or
regularization while an earlier link remains unsupported": CAPABILITY, where tuning belongs, is last.

The ledger is a state-mutating probe (backward, ``optimizer.step()``, training), so every mutation
happens on deep copies; the user's model, optimizer and the global RNGs are left exactly as found.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status, skipped
from .._core.batch import (
    LOSS_CONTRACT,
    check_callable,
    check_loss_fn,
    check_model,
    check_step_source,
    describe,
    describe_error,
    forward,
    loss_problem,
    on_first_output,
    split_batch,
    unfed_message,
    unfed_target,
)
from .._core.checks import Check, compose, not_reached, reached, walk
from .._core.closure import closure_state, tensors_in
from .._core.copy_origin import reading
from .._core.copying import restarting
from .._core.examples import batch_axis as infer_batch_axis
from .._core.lr import step_at_base_lr
from .._core.state import detached_copy, guarded
from .._core.task import TASKS, Ctx, err, infer_task, seed_copies, shape
from .._core.user_hooks import reports_user_hooks
from ._capability import check_capability
from ._common import LINKS, skipped_link, sparse_in
from ._links import check_dependency, check_gradient, check_update
from ._objective import check_objective
from ._ownership import check_ownership
from ._task import check_task
from ._user_step import check_user_step

__all__ = ["learning_ledger"]

_NAME = "learning_ledger"
_CHECKS: dict[str, Callable[[Ctx], Check]] = {
    "TASK": check_task, "OBJECTIVE": check_objective, "DEPENDENCY": check_dependency, "GRADIENT": check_gradient,
    "OPTIMIZER_OWNERSHIP": check_ownership,
    "PARAMETER_UPDATE": lambda ctx: check_user_step(ctx) if ctx.train_step is not None else check_update(ctx),
    "CAPABILITY": check_capability,
}


@reports_user_hooks
def learning_ledger(model: nn.Module, batch: Any, loss_fn: Callable[[Any, Any], torch.Tensor],
                    optimizer: torch.optim.Optimizer | None = None, *, task_probe: Any = None, task: str = "auto",
                    overfit_steps: int = 200, overfit_batch: Any = None,
                    reference_loss: Callable[[Any, Any], torch.Tensor] | None = None,
                    train_step: Callable[[], Any] | None = None, batch_axis: int | None = None) -> Report:
    """Walk the learning chain on one batch and stop at the first failing link.

    Args:
        model: the user's ``nn.Module`` (left untouched; the ledger works on deep copies).
        batch: ``(inputs, targets)`` or a dict (see ``firstdiv.instruments._core.batch``); ``targets`` are
            class ids ``[N]`` / ``[N, ...]``, next-token ids ``[B, T]`` or float values.
        loss_fn: ``(outputs, targets) -> scalar loss tensor``.
        optimizer: the user's optimizer (its class, groups and hyperparameters are reused on copies); None when
            ``train_step`` updates the parameters by hand (CAPABILITY then overfits with plain SGD on a copy).
        task_probe: the ground-truth labelling rule: a callable ``inputs -> expected targets`` (labels or
            scores), or ``(known_inputs, known_targets)`` matched row by row against the batch. Without
            it TASK is WARN "unverified" after its structural checks.
        task: "auto" (infer from shapes/dtypes, and say so), "classification", "regression" or
            "language_model".
        overfit_steps: CAPABILITY's step budget (0 skips the link); it stops as soon as the batch is fitted.
        overfit_batch: the tiny batch to overfit; default the first ``min(8, N)`` examples of ``batch``.
        reference_loss: the objective you intend, written by hand ``(outputs, targets) -> loss`` (a focal
            loss, say). OBJECTIVE then checks ``loss_fn`` against it, on the batch and on single examples,
            instead of against cross-entropy (which flags any other classification objective).
        train_step: a zero-argument closure doing one full step of your own loop on your own objects. When
            given, PARAMETER_UPDATE runs it (a few times, under a guard that restores every value, ``.grad``,
            optimizer/scheduler/scaler state and RNG state afterwards) and reads which parameters it moved,
            whether the move descends the loss on ``batch`` and whether the loss diverges.
        batch_axis: the axis of the examples in ``batch`` (None infers: 1 for sequence-first ``[T, B, ...]``
            inputs whose targets are ``[B]``); CAPABILITY takes its tiny batch along it.

    Returns:
        A Report: FAIL at the first failing link (``first_divergence.where`` = link name, ``kind`` e.g.
        ``objective.sum_reduction``); WARN when no link failed but one is unverified, slow or could not
        run; PASS when every link held.
    """
    ctx = _validated(model, batch, loss_fn, optimizer, task_probe, task, overfit_steps, overfit_batch, train_step)
    if reference_loss is not None:
        ctx.reference_loss = check_callable(reference_loss, "reference_loss")
    if batch_axis is not None and (isinstance(batch_axis, bool) or not isinstance(batch_axis, int) or batch_axis < 0):
        raise InvalidArgument(f"Expected `batch_axis` to be None (infer) or an integer >= 0 but got {batch_axis!r}")
    ctx.batch_axis = infer_batch_axis(ctx.batch, batch_axis)
    reached_by_step = closure_state(train_step) if train_step is not None else []
    with guarded(model, optimizer, train_step, reached_by_step, tensors_in(batch)), torch.enable_grad():
        seed_copies()  # dropout and friends on the copies: reproducible; the guard restores the RNG states
        try:
            ctx.work, ctx.work_opt = detached_copy(model, optimizer)
            _read_copy(ctx)
            restarting(ctx.work)
            ctx.report_notes += step_at_base_lr(ctx.work_opt)
        except Exception as exc:  # noqa: BLE001 - the copy is how the ledger leaves no trace
            return skipped(_NAME, f"could not deep-copy the model and optimizer "
                                  f"({err(exc)}); the ledger steps only copies: make copy.deepcopy((model, optimizer)) work")
        try:
            ctx.outputs = forward(ctx.work, ctx.batch)
        except Exception as exc:  # noqa: BLE001 - user code
            return skipped(_NAME, f"the model raised {err(exc)} on inputs "
                                  f"{shape(ctx.batch.inputs)}; the ledger needs one forward pass that runs")
        infer_task(ctx)
        return _walk(ctx)


def _read_copy(ctx: Ctx) -> None:
    """A loss reading the model through its closure reads the ledger's copy (``_core.copy_origin``), noted."""
    rebound = reading(ctx.loss_fn, ctx.work)
    ctx.notes["loss_reads_model"], ctx.loss_fn = rebound is not ctx.loss_fn, rebound


def _validated(model: Any, batch: Any, loss_fn: Any, optimizer: Any, task_probe: Any, task: Any, overfit_steps: Any,
               overfit_batch: Any, train_step: Any) -> Ctx:
    check_model(model)
    check_loss_fn(loss_fn)
    if train_step is not None:
        check_callable(train_step, "train_step")
    check_step_source(optimizer, train_step)
    if task not in TASKS:
        raise InvalidArgument(f"Expected `task` to be one of {', '.join(map(repr, TASKS))} but got {task!r}")
    if isinstance(overfit_steps, bool) or not isinstance(overfit_steps, int) or overfit_steps < 0:
        raise InvalidArgument(f"Expected `overfit_steps` to be an integer >= 0 but got {overfit_steps!r}")
    if task_probe is not None and not callable(task_probe) and not (isinstance(task_probe, (tuple, list)) and len(task_probe) == 2):
        raise InvalidArgument("Expected `task_probe` to be a callable inputs -> expected targets or a tuple "
                              f"(known_inputs, known_targets) but got {type(task_probe).__name__}")
    b = split_batch(batch, model)
    ob = split_batch(overfit_batch, model) if overfit_batch is not None else None
    return Ctx(model=model, optimizer=optimizer, work=model, work_opt=optimizer, loss_fn=loss_fn, batch=b, outputs=None,
               task_probe=task_probe, requested_task=task, overfit_steps=overfit_steps, overfit_batch=ob,
               train_step=train_step)


def _walk(ctx: Ctx) -> Report:
    """TASK, then the loss the later links need (a loss_fn that raises makes the report SKIPPED), then the
    rest of the chain, each link timed, up to the first FAIL."""
    seconds: dict[str, float] = {}
    task = _timed("TASK", ctx, seconds)
    loss_error = _compute_loss(ctx) if task.finding.status is not Status.FAIL else None
    if loss_error is not None:
        rest = [not_reached(link, "no loss to follow on the batch (the reason above)") for link in LINKS[1:]]
        return compose(_NAME, [task, *rest], "none",
                       {"task": ctx.task, "task_inferred": ctx.task_note, "links": reached([task])}, loss_error)
    checks = walk([("TASK", lambda: task), *((link, lambda link=link: _timed(link, ctx, seconds)) for link in LINKS[1:])])
    first = next((c.finding.where for c in checks if c.finding.status is Status.FAIL), None)
    return compose(_NAME, checks, _side_effects(ctx),
                   {"task": ctx.task, "task_inferred": ctx.task_note, "links": reached(checks),
                    "first_failing_link": first, "seconds": seconds, "notes": list(ctx.report_notes)}, skipped_warns=True)


def _side_effects(ctx: Ctx) -> str:
    steps = ctx.overfit_steps
    copies = (f"backward{' and one optimizer step' if ctx.train_step is None else ''} and up to {steps} overfit steps "
              f"per learning-rate round on deep copies")
    ran = sum(ctx.notes.get(k, 0) for k in ("ran_train_step", "ownership_ran_train_step", "objective_ran_train_step"))
    if ran:
        return (f"{copies}; train_step ran {ran} times on your objects, and every parameter, .grad, "
                f"optimizer/scheduler/scaler state, mode and RNG state was restored afterwards")
    return f"{copies}; the originals untouched"


def _timed(link: str, ctx: Ctx, seconds: dict[str, float]) -> Check:
    """One link's check, its run time in ``seconds``."""
    t0 = time.perf_counter()
    sparse = sparse_in(ctx.batch.targets) if link in ("TASK", "OBJECTIVE") else None
    if link == "CAPABILITY" and ctx.overfit_steps == 0:
        out = skipped_link(link, "not tested: overfit_steps=0; pass overfit_steps > 0 to overfit a tiny batch", {})
    elif sparse is not None:  # a sparse adjacency as targets (link prediction): loss_fn takes it, these checks cannot
        out = skipped_link(link, f"not checked: the targets are a {sparse} tensor, and the {link} checks read dense "
                                 "targets (their values, ranges and alignment)", {"targets_layout": sparse})
    else:
        try:
            out = _CHECKS[link](ctx)
        except Exception as exc:  # noqa: BLE001 - a link that raises is firstdiv's bug: could not check, never a crash
            out = skipped_link(link, f"could not check: the {link} check raised {err(exc)} on this program (no evidence about "
                                     f"the program; report it to firstdiv if the program is correct); the later links still ran",
                               {"error": err(exc)})
    seconds[link] = round(time.perf_counter() - t0, 4)
    return out


def _compute_loss(ctx: Ctx) -> str | None:
    """The loss of the ledger's forward pass (kept, with its graph, for OBJECTIVE..GRADIENT); a reason when it raises.
    A loss that reads what the copy's forward stored (``model.last_loss``) gets that forward run again first: TASK's
    forwards without grad stored theirs since."""
    if ctx.notes.get("loss_reads_model"):
        seed_copies()
        ctx.outputs = forward(ctx.work, ctx.batch)
    try:
        ctx.loss = ctx.loss_fn(ctx.outputs, ctx.batch.targets)
    except Exception as exc:  # noqa: BLE001 - user code
        adapted = on_first_output(ctx.loss_fn, ctx.outputs, ctx.batch.targets)
        if adapted is not None:
            ctx.loss_fn, ctx.loss = adapted
            ctx.report_notes.append(f"note: the model returns {describe(ctx.outputs)} and loss_fn takes its first item "
                                    "(the prediction), as the program's own loop does; the ledger applies it so")
            return None
        return (f"loss_fn raised {describe_error(exc)} on outputs {describe(ctx.outputs)} and targets "
                f"{describe(ctx.batch.targets)}; the ledger needs loss_fn(outputs, targets) to return the training loss")
    problem = loss_problem(ctx.loss) if ctx.loss is not None else None
    if problem is None:  # a None loss (one read from the model) is OBJECTIVE's to explain
        return None
    unfed = unfed_target(ctx.model, ctx.batch)  # the evidence's call, not the program: never a FAIL of it
    return unfed_message(ctx.loss, unfed) if unfed is not None else f"{problem} on the batch; {LOSS_CONTRACT}"
