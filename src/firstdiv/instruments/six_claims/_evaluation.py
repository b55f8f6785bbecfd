"""The EVALUATION claim: ``eval_fn`` runs twice on a deep copy, with pre-hooks on every Dropout/BatchNorm module (also
inside Hugging Face blocks, an EMA's ``.module``, and every module eval_fn reaches through its closure, such as an
``AveragedModel`` it evaluates instead of its argument); one that ran in training mode FAILs. eval_fn returning a
non-finite metric FAILs, and so does the model's eval-mode output going non-finite on the batch where training mode
stays finite; so does eval_fn changing the model's parameters or buffers when its two calls on the same batch
disagree (an EMA codebook updated in eval mode); two calls disagreeing with no module to blame WARN. An ``eval_fn`` that raises leaves
the claim unchecked: a SKIPPED finding with the error's first line, and the report WARNs."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...report import Status
from .._core.checks import Check
from .._core.modes import mode_dependent
from ._eval_probes import (
    EvalRun,
    closure_modules,
    disagree,
    eval_forwards_differ,
    eval_mode_non_finite,
    non_finite_metric,
    run_eval,
)
from ._verdict import claim, skip
from ._written_dropout import describe, intended

NAME, CHECK = "EVALUATION", "claim.evaluation"
NOT_CHECKED = "claim.evaluation.not_checked"  # eval_fn raised: the report WARNs
NON_FINITE = "claim.evaluation.non_finite"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _observe(model: nn.Module, batch: Any, eval_fn: Any, modules: list[Any]) -> tuple[EvalRun, list[str]]:
    run = run_eval(model, batch, eval_fn, train_first=False, repeat=2)
    already_eval = not model.training or any(not m.training for _, m in closure_modules(eval_fn, model))
    again = not run.train and modules and already_eval
    return run, run_eval(model, batch, eval_fn, train_first=True).train if again else []


def _drop_path_fail(model: nn.Module, batch: Any, run: EvalRun, ev: dict[str, Any],
                    differ: tuple[float, float] | None) -> Check | None:
    """A module built with a drop rate drew random numbers while it was in eval mode, and the model's eval-mode output
    on the same batch changes with the seed (confirmed on a copy): evaluation drops paths."""
    if not run.drop_draws:
        return None
    try:
        confirmed = bool(differ) or eval_forwards_differ(model, batch)
    except Exception:  # noqa: BLE001 - user code: unconfirmed, no finding
        return None
    if not confirmed:
        return None
    first, count = next(iter(run.drop_draws.items()))
    ev["eval_mode_drop_draws"] = dict(list(run.drop_draws.items())[:8])
    return claim(NAME, Status.FAIL, "claim.evaluation.random_masks",
                 f"{first} is in eval mode but drew {count} random tensor(s) while eval_fn ran ({len(run.drop_draws)} such "
                 "module(s)), and two eval-mode forwards of the same batch under different seeds differ: it drops paths "
                 "during evaluation", ev, "no random drop in eval mode: the same output for the same batch",
                 "pass training=self.training to the drop function (a drop path or F.dropout)")


def _train_mode_fail(run: EvalRun, ev: dict[str, Any], differ: tuple[float, float] | None) -> Check:
    first = run.train[0]
    owner = f", in {run.owners[first]}, which eval_fn reaches through its closure" if first in run.owners else ""
    repeat = f"; two calls on the same batch returned {differ[0]:.4g} and {differ[1]:.4g}" if differ else ""
    return claim(NAME, Status.FAIL, "claim.evaluation.train_mode",
                 f"eval_fn ran {len(run.train)} of {len(run.train) + len(run.evald)} Dropout/BatchNorm modules in training "
                 f"mode (first: {first}{owner}): dropout stays on and BatchNorm uses batch statistics during "
                 f"evaluation{repeat}", ev, "Dropout/BatchNorm in eval mode during evaluation",
                 "call .eval() on the module eval_fn evaluates (and .train() after)")


def _writes_model(run: EvalRun, ev: dict[str, Any], differ: tuple[float, float] | None) -> Check | None:
    """eval_fn changed the model's parameters or buffers with every Dropout/BatchNorm module in eval mode, and its
    second call on the same batch returned another metric: evaluation writes into the model it measures."""
    if not (run.written and differ):
        return None
    ev["written_by_eval_fn"] = run.written[:8]
    return claim(NAME, Status.FAIL, "claim.evaluation.writes_model",
                 f"eval_fn changed {len(run.written)} of the model's tensors (first: {run.written[0]}) with every "
                 f"Dropout/BatchNorm module in eval mode, and two calls on the same batch returned {differ[0]:.6g} and "
                 f"{differ[1]:.6g}: evaluation writes into the model it measures", ev,
                 "the model's parameters and buffers unchanged by evaluation",
                 "guard the in-forward update (an EMA codebook, a queue, a running estimate) with `if self.training:`")


def _non_finite(model: nn.Module, batch: Any, run: EvalRun, ev: dict[str, Any]) -> Check | None:
    bad = non_finite_metric(run.results)
    if bad is not None:
        return claim(NAME, Status.FAIL, NON_FINITE, f"eval_fn returned a non-finite metric ({bad}) on the batch", ev,
                     "a finite evaluation metric")
    seen = eval_mode_non_finite(model, batch)
    if seen is None:
        return None
    ev.update(seen)
    at = f", first at {seen['first_module']}" if seen["first_module"] else ""
    return claim(NAME, Status.FAIL, NON_FINITE,
                 f"in eval mode the model's output on the batch holds {seen['non_finite_outputs']} non-finite values of "
                 f"{seen['outputs']}{at}, while in training mode it is finite: evaluation computes NaN/inf", ev,
                 "finite outputs in eval mode", "compare the eval-mode path (masks, fused kernels, running statistics)")


def evaluation(model: nn.Module, batch: Any, eval_fn: Any) -> Check:
    if eval_fn is None:
        return skip(NAME, CHECK, "pass eval_fn=(model, batch) -> metric to check that evaluation runs in eval mode")
    modules = mode_dependent(model) + [x for _, m in closure_modules(eval_fn, model) for x in mode_dependent(m)]
    try:
        run, train2 = _observe(model, batch, eval_fn, modules)
    except Exception as exc:  # noqa: BLE001 - user code failed; the other claims still stand
        return claim(NAME, Status.SKIPPED, NOT_CHECKED, f"EVALUATION could not be checked: eval_fn raised {_one_line(exc)}",
                     {"error": _one_line(exc)})
    differ = disagree(run.results)
    ev = {"mode_dependent_modules": len(modules), "ran_in_train_mode": run.train[:8], "ran_in_eval_mode": len(run.evald),
          "model_calls": run.calls, "model_was_training": bool(model.training), "repeat_differs": differ}
    if run.calls == 0 or (modules and not (run.train or run.evald)):
        return skip(NAME, CHECK, "eval_fn did not run the model it was given (pass a function of its `model` argument)", **ev)
    if run.train:
        return _train_mode_fail(run, ev, differ)
    failed = _non_finite(model, batch, run, ev) or _writes_model(run, ev, differ)
    if failed is not None:
        return failed
    ev["random_masks_drawn"] = run.masks
    written = intended(run.mask_sites)
    if written:
        ev["dropout_written_on"] = written
        return claim(NAME, Status.WARN, "claim.evaluation.random_masks", describe(written, run.masks), ev)
    if differ and run.masks:  # the op and the outcome agree: random masks drawn inside evaluation change its result
        return claim(NAME, Status.FAIL, "claim.evaluation.random_masks",
                     f"eval_fn drew {run.masks} random masks (dropout in training mode or a bernoulli drop path) with "
                     f"every Dropout/BatchNorm module in eval mode, and two calls on the same batch returned "
                     f"{differ[0]:.6g} and {differ[1]:.6g}: a functional dropout or drop path ignores eval mode", ev,
                     "the same metric from two calls on the same batch, no random mask in evaluation",
                     "pass training=self.training to F.dropout / the drop-path function (its default is training=True)")
    drawn = _drop_path_fail(model, batch, run, ev, differ)
    if drawn is not None:
        return drawn
    if run.masks:
        return claim(NAME, Status.WARN, "claim.evaluation.random_masks", f"eval_fn drew {run.masks} random masks "
                     "(dropout in training mode or a bernoulli drop path) with every Dropout/BatchNorm module in eval "
                     "mode; two calls on the same batch happened to agree", ev)
    if differ:
        drawn = (f"; eval_fn drew {run.masks_outside} bernoulli samples outside the model's forward (its data or "
                 "sampling: no mask of the model)") if run.masks_outside else ""
        ev["random_draws_outside_model"] = run.masks_outside
        return claim(NAME, Status.WARN, "claim.evaluation.not_repeatable", f"two calls of eval_fn on the same batch returned "
                     f"{differ[0]:.6g} and {differ[1]:.6g} with every Dropout/BatchNorm module in eval mode: evaluation "
                     f"is random or keeps state between calls{drawn}", ev)
    if not modules:
        return claim(NAME, Status.PASS, CHECK, "the model has no Dropout (p>0) or BatchNorm module; train and eval mode "
                     f"compute the same function (eval_fn called the model {run.calls} times)", ev)
    if train2:
        ev["relies_on_caller"] = train2[:8]
        return claim(NAME, Status.WARN, CHECK, f"eval_fn ran in eval mode only because the model already was; started "
                     f"from train mode it ran {len(train2)} modules in training mode", ev)
    return claim(NAME, Status.PASS, CHECK, f"eval_fn ran all {len(run.evald)} Dropout/BatchNorm modules in eval mode", ev)
