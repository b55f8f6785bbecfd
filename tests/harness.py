"""The leave-no-trace harness: every instrument, on every program of the fault catalog, must leave
the user's objects exactly as it found them (DESIGN.md), also when the user's code raises half-way.

Instruments join by adding one line to ``CALLS``: how to call them with a zoo Program's evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import firstdiv
from firstdiv.instruments._state import Snapshot

#: instrument name -> how to call it on a zoo Program (the evidence a user would have at hand)
CALLS: dict[str, Callable[[Any], Any]] = {
    "step_probe": lambda p: firstdiv.step_probe(p.model, p.batch, p.loss_fn, p.optimizer, train_step=p.train_step),
    "reachability": lambda p: firstdiv.reachability(p.model, p.batch, p.loss_fn),
    "four_structures": lambda p: firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn),
    "six_claims": lambda p: firstdiv.six_claims(p.model, p.batch, p.loss_fn, p.optimizer, eval_fn=p.eval_fn),
    "learning_ledger": lambda p: firstdiv.learning_ledger(p.model, p.batch, p.loss_fn, p.optimizer,
                                                          task_probe=p.task_probe, overfit_steps=60),
    "evidence_packet": lambda p: firstdiv.evidence_packet(**p.evidence()),
}


class Injected(RuntimeError):
    """The failure the harness injects into user code."""


def watched(program: Any) -> list[Any]:
    """The user's objects: model and optimizer (a snapshot of the model also covers the tensors and
    modules it holds outside PyTorch's registry, see ``_state.hidden_objects``)."""
    return [program.model, program.optimizer]


def raising_after(fn: Callable[..., Any], calls: int) -> Callable[..., Any]:
    """``fn`` that raises :class:`Injected` on its ``calls``-th call (counting from 1)."""
    count = 0

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        if count >= calls:
            raise Injected(f"injected failure on call {count}")
        return fn(*args, **kwargs)

    return wrapped


def assert_no_trace(call: Callable[[], Any], objects: list[Any]) -> Any:
    """Run ``call``; assert ``objects`` and the global state are unchanged whether it returned or raised.
    Returns the result, or the exception it raised."""
    before = Snapshot.take(*objects)
    try:
        out: Any = call()
    except Exception as exc:  # noqa: BLE001 - the harness checks state after any failure
        out = exc
    changed = before.diff(Snapshot.take(*objects))
    assert changed == [], f"instrument left a trace: {changed[:8]}"
    return out
