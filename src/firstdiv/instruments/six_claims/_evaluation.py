"""The EVALUATION claim: ``eval_fn`` runs on a deep copy, with pre-hooks on every Dropout/BatchNorm module (also
inside Hugging Face blocks or an EMA's ``.module``); one that ran in training mode FAILs. An ``eval_fn`` that
raises leaves the claim unchecked: a SKIPPED finding with the error's first line, and the report WARNs."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...report import Status
from .._core.checks import Check
from ._model_probes import mode_dependent, run_eval
from ._verdict import claim, skip

NAME, CHECK = "EVALUATION", "claim.evaluation"
NOT_CHECKED = "claim.evaluation.not_checked"  # eval_fn raised: the report WARNs


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def evaluation(model: nn.Module, batch: Any, eval_fn: Any) -> Check:
    if eval_fn is None:
        return skip(NAME, CHECK, "pass eval_fn=(model, batch) -> metric to check that evaluation runs in eval mode")
    modules = mode_dependent(model)
    try:
        train, evald, calls = run_eval(model, batch, eval_fn, train_first=False)
        train2 = run_eval(model, batch, eval_fn, train_first=True)[0] if not train and modules and not model.training else []
    except Exception as exc:  # noqa: BLE001 - user code failed; the other claims still stand
        return claim(NAME, Status.SKIPPED, NOT_CHECKED, f"EVALUATION could not be checked: eval_fn raised {_one_line(exc)}",
                     {"error": _one_line(exc)})
    ev = {"mode_dependent_modules": len(modules), "ran_in_train_mode": train[:8], "ran_in_eval_mode": len(evald),
          "model_calls": calls, "model_was_training": bool(model.training)}
    if calls == 0 or (modules and not (train or evald)):
        return skip(NAME, CHECK, "eval_fn did not run the model it was given (pass a function of its `model` argument)", **ev)
    if not modules:
        return claim(NAME, Status.PASS, CHECK, "the model has no Dropout (p>0) or BatchNorm module; train and eval mode "
                     f"compute the same function (eval_fn called the model {calls} times)", ev)
    if train:
        return claim(NAME, Status.FAIL, "claim.evaluation.train_mode",
                     f"eval_fn ran {len(train)} of {len(train) + len(evald)} Dropout/BatchNorm modules in training mode "
                     f"(first: {train[0]}): dropout stays on and BatchNorm uses batch statistics during evaluation", ev,
                     "Dropout/BatchNorm in eval mode during evaluation", "call model.eval() in eval_fn (and model.train() after)")
    if train2:
        ev["relies_on_caller"] = train2[:8]
        return claim(NAME, Status.WARN, CHECK, f"eval_fn ran in eval mode only because the model already was; started "
                     f"from train mode it ran {len(train2)} modules in training mode", ev)
    return claim(NAME, Status.PASS, CHECK, f"eval_fn ran all {len(evald)} Dropout/BatchNorm modules in eval mode", ev)
