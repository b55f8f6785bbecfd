"""``claim.evaluation.mode_not_restored``: after ``eval_fn`` the program's own ``train_step`` runs mode-dependent
modules (Dropout, BatchNorm) in eval mode that it ran in training mode before: evaluation switched the model to eval
mode and nothing switches it back, so every step after the first evaluation trains without dropout and with frozen
statistics. Observed on the user's objects under the caller's guard (values, modes and RNG states restored): one
``train_step`` from the program's state, one ``eval_fn``, one more ``train_step``, with forward pre-hooks recording
each module's mode. A module that train_step itself keeps in eval mode (frozen batch norm) is in eval mode both times:
no finding."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...report import Status
from .._core.checks import Check
from ._model_probes import mode_dependent
from ._verdict import claim


def _modes(modules: list[tuple[str, nn.Module]], call: Any) -> dict[str, bool]:
    seen: dict[str, bool] = {}

    def hook(name: str) -> Any:
        def record(mod: nn.Module, _inputs: Any) -> None:
            seen.setdefault(name, mod.training)
        return record
    handles = [m.register_forward_pre_hook(hook(n)) for n, m in modules]
    try:
        call()
    finally:
        for h in handles:
            h.remove()
    return seen


def mode_not_restored(model: nn.Module, batch: Any, eval_fn: Any, train_step: Any) -> Check | None:
    """The FAIL when evaluation leaves the training step in eval mode (module docstring), else None. User code that
    raises is no evidence: None."""
    modules = mode_dependent(model)
    if eval_fn is None or train_step is None or not modules or not model.training:
        return None
    try:
        before = _modes(modules, train_step)
        eval_fn(model, batch)
        after = _modes(modules, train_step)
    except Exception:  # noqa: BLE001 - user code; the EVALUATION probes report an eval_fn that raises
        return None
    stale = [n for n, m in modules if before.get(n) is True and after.get(n) is False]
    if not stale:
        return None
    ev = {"modules_left_in_eval_mode": stale[:8], "count": len(stale)}
    return claim("EVALUATION", Status.FAIL, "claim.evaluation.mode_not_restored",
                 f"after eval_fn, train_step runs {len(stale)} Dropout/BatchNorm module(s) in eval mode that it ran in "
                 f"training mode before (first: {stale[0]}): evaluation leaves the model in eval mode and train_step "
                 "never calls .train(), so every step after the first evaluation trains in eval mode", ev,
                 "train_step runs the model in training mode whatever eval_fn did",
                 "call model.train() at the start of each training step (or after every evaluation)")
