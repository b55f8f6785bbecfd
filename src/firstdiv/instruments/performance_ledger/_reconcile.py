"""performance_ledger's phases reconciled with the whole step: the phases (input wait, transfer, forward, loss,
backward, optimizer on a detached copy) decompose one iteration, so the sum of their medians should be about the
whole-iteration median (the user's step plus its input wait).

``ratio = sum of phase medians / (step median + input-wait median)``. They agree when ``LOW <= ratio <= HIGH`` or
the difference is under ``NOISE_FLOOR_S`` (timer and loop overhead of a microsecond step). On a CPU device the
same comparison is made in process CPU time: a loaded machine stretches wall-clock medians (a 4 ms step read as 8
or 20 ms while other processes hold the cores) but not the CPU time the work takes. The spreads (IQRs) are
recorded but excuse nothing: on a loaded machine they grow with the load, and a median of the phases against a
median of the step is already robust to the stalls that widen them; the repeats are what absorbs noise. While they
disagree in wall-clock time and in CPU time, both are measured again (at most ``ROUNDS`` measurements in all); the
last measurement is the one reported, and CPU times more than ``FAR`` times outside the bounds are not measured again
(the step and the phases do different work; the CPU time of the same work does not change). Disagreeing in wall-clock time but agreeing in CPU time, it is a PASS saying so
(the load, not the step), with no second measurement: on a loaded machine the wall clock would only be stretched
again; disagreeing in both (or with no CPU time to check), the finding ``perf.reconcile`` is a WARN with the
numbers: the phases measure work the step does not do (a step that runs another model, no backward, a different batch), or the step does work
the phases do not see (logging, extra forwards); the dominant phase then describes the copy, not the step.
Never a FAIL: timing evidence alone cannot prove the step wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...report import Status
from .._core.checks import Check, check
from . import _timing as pt

LOW, HIGH = 0.5, 2.0
NOISE_FLOOR_S = 2e-4
ROUNDS = 3
FAR = 2.0  # a CPU-time ratio beyond LOW / FAR or HIGH * FAR is the work itself, not noise: not measured again


@dataclass
class Measured:
    """One measurement of the step and of the phases: wall-clock seconds, and process CPU seconds of the same
    regions (empty when not recorded)."""

    step: list[float]
    wait: list[float]
    phases: dict[str, list[float]]
    step_cpu: list[float] = field(default_factory=list)
    wait_cpu: list[float] = field(default_factory=list)
    phases_cpu: dict[str, list[float]] = field(default_factory=dict)


def _compare(step: list[float], wait: list[float], phases: dict[str, list[float]]) -> dict[str, Any]:
    s, w = pt.spread(step), pt.spread(wait)
    stats = {name: pt.spread(v) for name, v in phases.items()}
    whole = s["median"] + w["median"]
    total = sum(p["median"] for p in stats.values())
    ratio = total / whole if whole > 0 else None
    agree = abs(total - whole) <= NOISE_FLOOR_S or (ratio is not None and LOW <= ratio <= HIGH)
    return {"phase_sum_s": total, "step_plus_wait_s": whole, "ratio": ratio, "noise_s": NOISE_FLOOR_S,
            "iqr_sum_s": s["iqr"] + w["iqr"] + sum(p["iqr"] for p in stats.values()), "agree": agree}


def compare(m: Measured, use_cpu: bool = False) -> dict[str, Any]:
    """The wall-clock comparison, and (``use_cpu``: a CPU device, where CPU time is the work) the CPU-time one."""
    out = _compare(m.step, m.wait, m.phases)
    if use_cpu and m.step_cpu and m.phases_cpu:
        cpu = _compare(m.step_cpu, m.wait_cpu, m.phases_cpu)
        out["cpu"] = {k: cpu[k] for k in ("phase_sum_s", "step_plus_wait_s", "ratio", "agree")}
    return out


def reconcile(m: Measured, again: Callable[[], Measured | None], use_cpu: bool = False) -> tuple[
        Measured, list[dict[str, Any]]]:
    """Compare, measuring again while the wall-clock times disagree and the CPU times (where compared) do too
    (``again()`` returns None when it could not); the last measurement and every comparison."""
    rounds = [compare(m, use_cpu)]
    while not (rounds[-1]["agree"] or rounds[-1].get("cpu", {}).get("agree") or _the_work(rounds[-1])) \
            and len(rounds) < ROUNDS:
        got = again()
        if got is None:
            break
        m = got
        rounds.append(compare(m, use_cpu))
    return m, rounds


def _the_work(r: dict[str, Any]) -> bool:
    """CPU times more than ``FAR`` times outside the bounds: the work differs (a step that runs two players, several
    epochs or no backward), which measuring again cannot change; near the bounds, noise may still flip them."""
    cpu = r.get("cpu", {}).get("ratio")
    return cpu is not None and not LOW / FAR <= cpu <= HIGH * FAR


def _numbers(r: dict[str, Any], clock: str = "") -> str:
    if r["ratio"] is None:
        return f"phases sum to {r['phase_sum_s'] * 1e3:.3f} ms{clock}, the step measured 0 s"
    return (f"phases sum to {r['phase_sum_s'] * 1e3:.3f} ms{clock}, the step plus its input wait is "
            f"{r['step_plus_wait_s'] * 1e3:.3f} ms (ratio {r['ratio']:.2f})")


def reconcile_check(rounds: list[dict[str, Any]]) -> Check:
    last = rounds[-1]
    ev = dict(last, rounds=len(rounds), bounds=[LOW, HIGH],
              ratios=[None if r["ratio"] is None else round(r["ratio"], 4) for r in rounds])
    again = f" after {len(rounds)} measurements" if len(rounds) > 1 else ""
    if last["agree"]:
        return check("step", "perf.reconcile", Status.PASS,
                     f"phases and step agree{again}: {_numbers(last)}, within {LOW}-{HIGH} or "
                     f"{last['noise_s'] * 1e3:.3f} ms", ev)
    cpu = last.get("cpu")
    if cpu and cpu["agree"]:
        return check("step", "perf.reconcile", Status.PASS,
                     f"the wall-clock times disagree{again} ({_numbers(last)}) but the CPU time agrees "
                     f"({_numbers(cpu, ' of CPU')}): the machine's load stretched the wall-clock, not the step; "
                     f"compare timings on a quieter machine", ev)
    side = ("the phases measure work the step does not do (another model, a different batch, no backward?)"
            if last["ratio"] is None or last["ratio"] > HIGH else
            "the step does work the phases do not see (logging, extra forwards, data work inside the step?)")
    return check("step", "perf.reconcile", Status.WARN,
                 f"phases and step disagree{again}: {_numbers(last)}, outside {LOW}-{HIGH} and more than "
                 f"{last['noise_s'] * 1e3:.3f} ms apart{' (in CPU time too)' if cpu else ''}: {side}; the phase "
                 f"split describes the detached copy, not your step", ev,
                 hint="pass the model, optimizer and loss_fn your step uses, and a batch like the ones it gets")
