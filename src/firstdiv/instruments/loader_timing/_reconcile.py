"""loader_timing on a busy machine: a starved verdict is reconciled with the producer's own measured cost before a
phase is blamed, the measurement is repeated while the evidence disagrees, and the machine's load during each
measurement is recorded.

- **explained**: a wait blamed on ``read_decode_transform`` or ``collate`` must be one the producer's measured cost
  per batch (``G + C``, timed in this process: workers can only lower the wait below it) can account for:
  ``G + C >= RECONCILE x W`` (starved by the ratio rule) or ``G + C >= RECONCILE x K`` (by the tail rule alone: a
  batch waits longer than its work only when making it costs about as much). A wait it cannot explain is the
  scheduler or another process holding the CPU, not a slow phase.
- a phase that cannot be split (a plain iterable, worker start-up, cpu contention) is confirmed instead: starved
  in two measurements in a row.
- up to ``TRIES`` measurements; the first that is not starved, or starved and explained (or confirmed), decides.
  When every one is starved but unexplained, the verdict is not starved: machine noise, said in the finding with
  the numbers and the load.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from ...report import Status
from .._core.checks import Check, check
from . import _checks as lc

TRIES = 3
RECONCILE = 0.5
SPLIT_PHASES = ("read_decode_transform", "collate")


@dataclass
class Load:
    """The machine during one measurement: load average, CPUs, and this process's CPU time vs wall time."""

    start_cpu: float
    start_wall: float
    loadavg: tuple[float, float, float] | None = None
    cpus: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @classmethod
    def begin(cls) -> Load:
        return cls(time.process_time(), time.perf_counter())

    def end(self) -> Load:
        self.cpu_s, self.wall_s = time.process_time() - self.start_cpu, time.perf_counter() - self.start_wall
        try:
            self.loadavg = tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[assignment]
        except (OSError, AttributeError):  # not on every platform
            self.loadavg = None
        try:
            self.cpus = len(os.sched_getaffinity(0))
        except AttributeError:
            self.cpus = os.cpu_count()
        return self

    def facts(self) -> dict[str, Any]:
        share = round(self.cpu_s / self.wall_s, 4) if self.wall_s > 0 else None
        per_cpu = round(self.loadavg[0] / self.cpus, 3) if self.loadavg and self.cpus else None
        return {"loadavg": list(self.loadavg) if self.loadavg else None, "cpus": self.cpus,
                "process_cpu_s": round(self.cpu_s, 4), "wall_s": round(self.wall_s, 4), "cpu_share": share,
                "load_per_cpu": per_cpu, "busy": bool(per_cpu is not None and per_cpu > 1.0)}


def text(facts: dict[str, Any]) -> str:
    """One line on the machine's load (the counts are in the facts: the line carries only percentages and times)."""
    per_cpu = facts["load_per_cpu"]
    load = ("no load average on this platform" if per_cpu is None else
            f"the 1-minute load average is {per_cpu:.0%} of the CPUs this process may use")
    share = "" if facts["cpu_share"] is None else \
        f"; this process ran on a CPU for {facts['cpu_share']:.0%} of the {facts['wall_s']:.3g} s measured"
    return load + share


def explained(n: lc.Numbers, v: lc.Verdict) -> tuple[bool | None, str]:
    """(whether the producer's measured cost accounts for the starved wait, why); None when it cannot be judged
    from the split (a phase that is not read_decode_transform/collate, or no split)."""
    if not v.starved or v.phase not in SPLIT_PHASES or n.getitem is None or n.collate is None:
        return None, ""
    cost = n.getitem + n.collate
    by_ratio = v.effective_wait > lc.WAIT_RATIO * n.work
    need, what = (n.wait, "the median wait") if by_ratio else (n.work, "the work a stalled batch outwaited")
    ok = cost >= RECONCILE * need
    why = (f"the producer's measured cost {cost:.4g} ms per batch (__getitem__ {n.getitem:.4g} + collate "
           f"{n.collate:.4g} ms) {'accounts for' if ok else 'cannot explain'} {what} {need:.4g} ms "
           f"(needs >= {RECONCILE} x)")
    return ok, why


def settled(history: list[tuple[lc.Numbers, lc.Verdict]], can_repeat: bool) -> tuple[bool, str]:
    """Whether the latest measurement decides (module docstring), and how."""
    n, v = history[-1]
    if not v.starved:
        return True, "not starved"
    ok, why = explained(n, v)
    if ok:
        return True, why
    if ok is None:
        confirmed = len(history) >= 2 and bool(history[-2][1].starved)
        if confirmed or not can_repeat:
            return True, "starved in two measurements in a row" if confirmed else "could not be repeated (an iterator)"
        return False, "a phase the producer split cannot check: repeated to confirm"
    return (not can_repeat), why


def noise_verdict(n: lc.Numbers, v: lc.Verdict, why: str, tries: int) -> lc.Verdict:
    """The verdict when every measurement was starved by a wait the producer's cost cannot explain."""
    return lc.Verdict(False, "consumer_compute", v.effective_wait, v.startup_per_epoch, v.startup_per_batch,
                      f"a wait of {v.effective_wait:.4g} ms vs work {n.work:.4g} ms in {tries} measurements, but {why}: "
                      f"scheduler or machine noise, not a slow phase")


def machine_check(tries: list[tuple[dict[str, Any], str]]) -> Check:
    """The note on the machine's load during the (last) measurement, and why it was repeated."""
    repeated = (f"; measured {len(tries)} times: the first verdict was starved but unsettled ({tries[0][1]})"
                if len(tries) > 1 else "")
    return check("machine", "loader.machine", Status.PASS, f"during the measurement: {text(tries[-1][0])}{repeated}",
                 dict(tries[-1][0], measurements=len(tries)))


def phase_where(loader: Any, phase: str) -> str:
    """The phase in your names: ``<Dataset>.__getitem__`` (and its transform), the collate_fn; "" for the others."""
    if not isinstance(loader, DataLoader):
        return ""
    if phase == "read_decode_transform":
        ds = loader.dataset
        transform = getattr(ds, "transform", None)
        return f"{type(ds).__name__}.__getitem__" + (f" (transform {_name(transform)})" if callable(transform) else "")
    if phase == "collate":
        return _name(loader.collate_fn)
    return ""


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


#: the attribute a consumer carries when it is not the user's own work per batch (diagnose's stand-in step): what it is
SURROGATE = "_firstdiv_surrogate_step"


def unconfirmed(v: lc.Verdict, ok: bool | None, single_iterator_try: bool, surrogate: str) -> str:
    """Why a starved verdict is not confirmed (a WARN, not a FAIL), or "": a phase the producer's cost cannot split,
    measured once because a one-shot iterator cannot be measured again; or a consumer that is a stand-in for the loop."""
    if not v.starved:
        return ""
    if surrogate:
        return (f"the consumer timed is {surrogate}, not your loop's own work per batch; pass step= (or train_step= to "
                "diagnose) to judge starvation against it")
    if ok is None and single_iterator_try:
        return ("the wait is at a phase the producer's cost cannot split and was measured once: a one-shot iterator "
                "cannot be measured again to confirm it; pass a re-iterable loader (a DataLoader, a list) to confirm")
    return ""


def verdict_check(v: lc.Verdict, n: lc.Numbers, s: dict[str, Any], code: str, why_not: str = "") -> Check:
    """The starvation verdict; ``why_not`` (from :func:`unconfirmed`) turns a starved verdict into a WARN."""
    ev = {"effective_wait_ms": v.effective_wait, "wait_median_ms": n.wait, "work_median_ms": n.work,
          "startup_per_batch_ms": v.startup_per_batch, "stall_share": n.stall_share, "steady_idle_share": s["idle_share"],
          "limiting_phase": v.phase, "in_your_code": code or None, "rule": v.rule}
    text, where = lc.PHASE_TEXT[v.phase] + (f", in your code {code}" if code else ""), v.phase
    if v.starved is None:
        return check(where, "loader.starved", Status.SKIPPED,
                     f"no step given, so starvation is not judged; the loader's own limit is {text}: {v.rule}", ev)
    if not v.starved:
        status = Status.WARN if v.phase == "host_to_device" else Status.PASS
        msg = f"not starved: {v.rule}; the loop's time is {text}"
        return check(where, "loader.starved", status, msg, ev, hint=lc.HINTS.get(v.phase, ""))
    idle = v.effective_wait / (v.effective_wait + n.work)
    msg = f"the consumer waits for data ({idle:.0%} of each batch's time is waiting): {v.rule}; the limit is {text}"
    if why_not:
        return check(where, "loader.starved", Status.WARN, f"{msg}; not a FAIL: {why_not}",
                     {**ev, "premise_confirmed": False}, hint=lc.HINTS[v.phase])
    return check(where, "loader.starved", Status.FAIL, msg, ev,
                 expected=f"median wait per batch below max({lc.FLOOR_MS} ms, {lc.WAIT_RATIO} x median work {n.work} ms) "
                          f"and fewer than {lc.STALL_SHARE:.0%} of batches stalled",
                 observed=f"{code or text}: effective wait {v.effective_wait} ms per batch (steady median {n.wait} ms + start-up "
                          f"{v.startup_per_batch} ms), work {n.work} ms, {n.stall_share:.0%} stalled",
                 hint=lc.HINTS[v.phase])
