"""Whose failure a geometry instrument's raised forward is, when firstdiv chose the call.

``diagnose`` hands ``shape_ledger`` and ``tensor_trace`` the inputs it read from the batch. A forward that raises on
them (or a layer that refuses them just before) is the program's divergence only when the program itself calls its
model that way. Where the user gave no ``inputs=`` but a ``train_step``, that is confirmed by running one step of the
user's loop on the user's objects, under the guard that restores them: a step that raises too confirms the FAIL (the
evidence says so); a step that completes means the loop feeds the model something else (a Lightning
``training_step`` that flattens the images first, a loop that unpacks the batch its own way), and the report becomes
SKIPPED with the reason and the argument that declares the call, never a FAIL blamed on the program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._step_call import batch_consumer
from .report import Report, Status, skipped


def confirmed_by_step(name: str, run: Callable[[dict[str, Any]], Report]) -> Callable[[dict[str, Any], Any], Report]:
    """``run`` (a geometry instrument on diagnose's evidence) with its raised-forward FAIL confirmed by ``train_step``."""

    def call(ev: dict[str, Any], _reports: Any) -> Report:
        report = run(ev)
        if report.status is not Status.FAIL or not report.details.get("raised") or "inputs" in ev \
                or ev.get("train_step") is None:
            return report
        error = _step_error(ev)
        if error is not None:
            report.details["confirmed_by_train_step"] = f"your train_step raises too: {error}"
            return report
        failed = next((f for f in report.findings if f.status is Status.FAIL), None)
        what = f"{failed.check} at {failed.where or '(model)'}: {failed.message[:160]}" if failed else "the forward raised"
        return skipped(name, f"not checked: the model raised on the inputs as read from the batch ({what}), while one "
                             "step of your train_step runs on the same objects: your loop does not call the model this "
                             "way; pass inputs= as your loop calls the model", firstdiv_call_raised=what,
                       train_step_ran=True, **{k: v for k, v in report.details.items() if k in ("ledger", "raised")})

    return call


def _step_error(ev: dict[str, Any]) -> str | None:
    """One call of the user's step on their objects, restored afterwards: its error line, or None when it completes."""
    from .instruments._core.state import guarded

    step, model, optimizer = ev["train_step"], ev.get("model"), ev.get("optimizer")
    consume = batch_consumer(step)
    batch = ev.get("batch")
    try:
        with guarded(*(o for o in (model, optimizer, step) if o is not None)):
            consume(batch)
    except Exception as exc:  # noqa: BLE001 - the user's step: its failure is the confirmation
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    return None
