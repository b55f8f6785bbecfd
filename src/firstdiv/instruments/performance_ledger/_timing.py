"""performance_ledger's measurements: the synchronization boundary, the timed loops (the user's whole step; the
phases input wait / transfer / forward / loss / backward / optimizer on detached copies), spread statistics,
live-tensor growth over identical iterations, and the profiler's top operators (localization only)."""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .._core import batch as _batch
from .._core.memory import LiveTensors, cuda_memory, rss
from .._core.state import detached_copy

PHASES = ("input_wait", "transfer", "forward", "loss", "backward", "optimizer")
GROWTH_ITERATIONS = 6  # identical iterations of the step watched by the live-tensor tracker


def synchronizer(device: torch.device) -> tuple[Callable[[], None], str]:
    """The completion boundary placed before and after every timed region, and how it reads in the contract."""
    if device.type == "cuda":
        return (lambda: torch.cuda.synchronize(device)), (
            f"torch.cuda.synchronize({device}) before and after every timed region: host wall-clock of completed "
            "device work, not of kernel submission")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.synchronize, ("torch.cuda.synchronize() before and after every timed region (CUDA is "
                                        "initialized in this process, so the step may queue device work)")
    mps = getattr(torch, "mps", None)
    if device.type == "mps" and mps is not None:
        return mps.synchronize, "torch.mps.synchronize() before and after every timed region"
    return (lambda: None), ("none needed: CPU operators finish before they return; host wall-clock "
                            "(time.perf_counter) around each region")


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles, IQR, extremes and IQR/median of a list of seconds."""
    a = np.asarray(values, dtype=float)
    p25, med, p75 = (float(v) for v in np.percentile(a, [25, 50, 75]))
    return {"median": med, "p25": p25, "p75": p75, "iqr": p75 - p25, "min": float(a.min()), "max": float(a.max()),
            "n": int(a.size), "relative_spread": (p75 - p25) / med if med > 0 else 0.0}


def time_empty(repeats: int, sync: Callable[[], None]) -> float:
    """Median seconds of an empty step timed exactly like the user's: the instrument's own overhead."""
    noop = _noop
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        noop(None)
        sync()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _noop(_: Any) -> None:
    return None


@dataclass
class StepRun:
    """The user's step measured: per-iteration wait/step seconds and memory samples, the live-bytes series."""

    wait: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    wait_cpu: list[float] = field(default_factory=list)  # process CPU seconds of the same regions
    step_cpu: list[float] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    live: list[int] = field(default_factory=list)
    survivors: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    first_batch: Any = None
    profile: dict[str, Any] | None = None


def memory_sample(device: torch.device) -> dict[str, Any]:
    size, source = rss()
    out: dict[str, Any] = {"rss": size, "rss_source": source}
    if device.type == "cuda":
        out.update(cuda_memory(device))
    return out


def _no_tick(advance: float = 1) -> None:
    return None


def run_step(step: Callable[[Any], Any], fetch: Callable[[], Any], warmup: int, repeats: int,
             sync: Callable[[], None], device: torch.device, tick: Callable[..., None] = _no_tick) -> StepRun:
    """Warm-up calls, then ``repeats`` timed calls (wait = producing the batch, step = the call), then the
    live-tensor growth watch. Exceptions propagate (the caller reports them)."""
    run = StepRun(calls={"warmup": 0, "timed": 0, "memory": 0})
    for _ in range(warmup):
        b = fetch()
        run.first_batch = b if run.first_batch is None else run.first_batch
        step(b)
        run.calls["warmup"] += 1
        tick()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    run.memory.append(memory_sample(device))
    for _ in range(repeats):
        b = _timed_call(step, fetch, sync, run)
        run.first_batch = b if run.first_batch is None else run.first_batch
        run.calls["timed"] += 1
        del b
        run.memory.append(memory_sample(device))
        tick()
    run.live, run.survivors = watch_growth(step, fetch, run, tick)
    return run


def time_step(step: Callable[[Any], Any], fetch: Callable[[], Any], repeats: int, sync: Callable[[], None],
              tick: Callable[..., None] = _no_tick) -> StepRun:
    """``repeats`` more timed calls exactly like run_step's (no warm-up, memory samples or growth watch)."""
    run = StepRun()
    for _ in range(repeats):
        _timed_call(step, fetch, sync, run)
        tick()
    return run


def _timed_call(step: Callable[[Any], Any], fetch: Callable[[], Any], sync: Callable[[], None], run: StepRun) -> Any:
    """Fetch a batch and run ``step`` on it, appending the wait and the step (wall clock and process CPU time)
    to ``run``; returns the batch."""
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    b = fetch()
    sync()
    t1, c1 = time.perf_counter(), time.process_time()
    step(b)
    sync()
    run.step.append(time.perf_counter() - t1)
    run.step_cpu.append(time.process_time() - c1)
    run.wait.append(t1 - t0)
    run.wait_cpu.append(c1 - c0)
    return b


def watch_growth(step: Callable[[Any], Any], fetch: Callable[[], Any], run: StepRun,
                 tick: Callable[..., None] = _no_tick) -> tuple[list[int], list[dict]]:
    """Live bytes of tensors the step created, after each of up to ``GROWTH_ITERATIONS`` identical iterations (the
    batch is produced outside the tracker; the step's return value is dropped; cycles collected first).

    Growth is judged as live bytes that rise at every iteration, so the watch stops at the first iteration after
    which they did not rise: more iterations cannot change that verdict (the series is as long as it ran)."""
    tracker = LiveTensors(keep_tensors=True)
    series = []
    # Objects that exist now cannot be garbage the step makes: freeze them so each collection scans only what the
    # step created (ms instead of ~0.1 s per full collection); skipped when the user froze objects themselves.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        for i in range(GROWTH_ITERATIONS):
            b = fetch()
            tracker.tag = i
            with tracker:
                step(b)
            run.calls["memory"] += 1
            del b
            gc.collect()
            series.append(tracker.live_bytes())
            tick()
            if i and series[-1] <= series[-2]:
                tick(GROWTH_ITERATIONS - 1 - i)
                break
        survivors = tracker.survivors(range(1, len(series) - 1))
    finally:
        tracker.clear()
        if freeze:
            gc.unfreeze()
    return series, survivors


def profile_top(step: Callable[[Any], Any], fetch: Callable[[], Any], iterations: int, sync: Callable[[], None],
                device: torch.device, top: int = 10) -> dict[str, Any]:
    """torch.profiler over ``iterations`` calls: the top operators by self time (per step), for localization."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    times = []
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            b = fetch()
            sync()
            t0 = time.perf_counter()
            step(b)
            sync()
            times.append(time.perf_counter() - t0)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: float(getattr(e, key, 0.0) or 0.0), reverse=True)
    rows = [{"op": e.key, "calls_per_step": e.count / iterations,
             "self_seconds_per_step": float(getattr(e, key, 0.0) or 0.0) / 1e6 / iterations} for e in events[:top]]
    return {"iterations": iterations, "sorted_by": key, "top_ops": rows, "profiled_step_median": float(np.median(times))}


# --- phases on detached copies ------------------------------------------------------------------------------------


class PhaseError(Exception):
    """A phase of the controlled loop raised or returned something unusable; the message is one line."""


def run_phases(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, fetch: Callable[[], Any],
               warmup: int, repeats: int, sync: Callable[[], None], tick: Callable[..., None] = _no_tick,
               cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """``warmup + repeats`` iterations of wait / transfer / forward / loss / backward / optimizer (step and
    zero_grad) on ``detached_copy(model, optimizer)``; seconds of each phase for the timed iterations (and, into
    ``cpu`` when given, the process CPU seconds of each)."""
    m_copy, o_copy = detached_copy(model, optimizer)
    o_copy.zero_grad(set_to_none=True)
    device = next((p.device for p in m_copy.parameters()), torch.device("cpu"))
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    with torch.enable_grad():
        for i in range(warmup + repeats):
            row, row_cpu = _phase_iteration(m_copy, o_copy, loss_fn, fetch, sync, device)
            if i >= warmup:
                for name, seconds, cpu_s in zip(PHASES, row, row_cpu):
                    times[name].append(seconds)
                    if cpu is not None:
                        cpu.setdefault(name, []).append(cpu_s)
            tick()
    return times


def _phase_iteration(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, fetch: Callable[[], Any],
                     sync: Callable[[], None], device: torch.device) -> tuple[list[float], list[float]]:
    marks, cpu = [], []

    def mark() -> None:
        sync()
        marks.append(time.perf_counter())
        cpu.append(time.process_time())

    mark()
    b = _batch.split_batch(fetch(), model)
    mark()
    b = _batch.Batch(_batch.to_device(b.inputs, device), _batch.to_device(b.targets, device), b.as_kwargs)
    mark()
    try:
        _, loss = _timed_loss(model, b, loss_fn, mark)
    except _batch.UserCodeError as exc:
        raise PhaseError(str(exc)) from exc
    problem = _batch.loss_problem(loss)
    if problem:
        raise PhaseError(problem)
    try:
        loss.reshape(()).backward()
        mark()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mark()
    except Exception as exc:  # user code (custom autograd, optimizer): reported, not raised
        raise PhaseError(f"backward or optimizer.step raised {_batch.describe_error(exc)}") from exc
    return [b - a for a, b in itertools.pairwise(marks)], [b - a for a, b in itertools.pairwise(cpu)]


def _timed_loss(model: nn.Module, b: _batch.Batch, loss_fn: Callable, mark: Callable[[], None]) -> tuple[Any, Any]:
    try:
        outputs = _batch.forward(model, b)
    except Exception as exc:  # the user's model
        raise _batch.UserCodeError(f"the model raised {_batch.describe_error(exc)} on inputs "
                                   f"{_batch.describe(b.inputs)}") from exc
    mark()
    try:
        loss = loss_fn(outputs, b.targets)
    except Exception as exc:  # the user's loss_fn
        raise _batch.UserCodeError(f"loss_fn raised {_batch.describe_error(exc)} on outputs "
                                   f"{_batch.describe(outputs)} and targets {_batch.describe(b.targets)}") from exc
    mark()
    return outputs, loss
