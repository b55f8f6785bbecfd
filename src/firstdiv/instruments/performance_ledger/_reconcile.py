"""performance_ledger's phases reconciled with the whole step: the phases (input wait, transfer, forward, loss,
backward, optimizer on a detached copy) decompose one iteration, so the sum of their medians should be about the
whole-iteration median (the user's step plus its input wait).

``ratio = sum of phase medians / (step median + input-wait median)``. They agree when ``LOW <= ratio <= HIGH`` or
the difference is under ``NOISE_FLOOR_S`` (timer and loop overhead of a microsecond step). The spreads (IQRs) are
recorded but excuse nothing: on a loaded machine they grow with the load, and a median of the phases against a
median of the step is already robust to the stalls that widen them; the repeats are what absorbs noise. While they
disagree, both are measured again (at most ``ROUNDS`` measurements in all); the last measurement is the one
reported. Still disagreeing, the finding ``perf.reconcile`` is a WARN with the numbers: the phases measure work
the step does not do (a step that runs another model, no backward, a different batch), or the step does work
the phases do not see (logging, extra forwards); the dominant phase then describes the copy, not the step.
Never a FAIL: timing evidence alone cannot prove the step wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...report import Status
from .._core.checks import Check, check
from . import _timing as pt

LOW, HIGH = 0.5, 2.0
NOISE_FLOOR_S = 2e-4
ROUNDS = 3


def compare(step: list[float], wait: list[float], phases: dict[str, list[float]]) -> dict[str, Any]:
    """The numbers of one comparison (seconds), and whether they agree."""
    s, w = pt.spread(step), pt.spread(wait)
    stats = {name: pt.spread(v) for name, v in phases.items()}
    whole = s["median"] + w["median"]
    total = sum(p["median"] for p in stats.values())
    spread_s = s["iqr"] + w["iqr"] + sum(p["iqr"] for p in stats.values())
    ratio = total / whole if whole > 0 else None
    agree = abs(total - whole) <= NOISE_FLOOR_S or (ratio is not None and LOW <= ratio <= HIGH)
    return {"phase_sum_s": total, "step_plus_wait_s": whole, "ratio": ratio, "noise_s": NOISE_FLOOR_S,
            "iqr_sum_s": spread_s, "agree": agree}


def reconcile(step: list[float], wait: list[float], phases: dict[str, list[float]],
              again: Callable[[], tuple[list[float], list[float], dict[str, list[float]]] | None]) -> tuple[
                  list[float], list[float], dict[str, list[float]], list[dict[str, Any]]]:
    """Compare, measuring again while they disagree (``again()`` returns None when it could not); the last
    measurement and every comparison."""
    rounds = [compare(step, wait, phases)]
    while not rounds[-1]["agree"] and len(rounds) < ROUNDS:
        got = again()
        if got is None:
            break
        step, wait, phases = got
        rounds.append(compare(step, wait, phases))
    return step, wait, phases, rounds


def reconcile_check(rounds: list[dict[str, Any]]) -> Check:
    last = rounds[-1]
    ev = dict(last, rounds=len(rounds), bounds=[LOW, HIGH],
              ratios=[None if r["ratio"] is None else round(r["ratio"], 4) for r in rounds])
    nums = (f"phases sum to {last['phase_sum_s'] * 1e3:.3f} ms, the step plus its input wait is "
            f"{last['step_plus_wait_s'] * 1e3:.3f} ms (ratio {last['ratio']:.2f})" if last["ratio"] is not None else
            f"phases sum to {last['phase_sum_s'] * 1e3:.3f} ms, the step measured 0 s")
    again = f" after {len(rounds)} measurements" if len(rounds) > 1 else ""
    if last["agree"]:
        return check("step", "perf.reconcile", Status.PASS,
                     f"phases and step agree{again}: {nums}, within {LOW}-{HIGH} or "
                     f"{last['noise_s'] * 1e3:.3f} ms", ev)
    side = ("the phases measure work the step does not do (another model, a different batch, no backward?)"
            if last["ratio"] is None or last["ratio"] > HIGH else
            "the step does work the phases do not see (logging, extra forwards, data work inside the step?)")
    return check("step", "perf.reconcile", Status.WARN,
                 f"phases and step disagree{again}: {nums}, outside {LOW}-{HIGH} and more than "
                 f"{last['noise_s'] * 1e3:.3f} ms apart: {side}; the phase split describes the detached copy, not your step",
                 ev, hint="pass the model, optimizer and loss_fn your step uses, and a batch like the ones it gets")
