"""Performance ledger (appendix section 12): define the comparison before optimizing.

The report states the measurement contract (workload, input shapes, dtype, device, train/eval mode,
eager/compiled, warm-up, repeats, synchronization boundary, metric) and then measures under it:

- TIME: the user's ``step(batch)`` called ``warmup`` times untimed and ``repeats`` times timed, on the user's
  own objects under :func:`~firstdiv.instruments._core.state.guarded` (everything on ``model``/``optimizer`` and the
  RNG states restored afterwards); with ``model``, ``loss_fn`` and ``optimizer`` it also times the phases input
  wait, transfer, forward, loss, backward and optimizer (step + zero_grad) itself on detached copies, each with
  median and IQR, and names the dominant phase.
- MEMORY: CUDA allocated / reserved / peak allocated / peak reserved on CUDA, process RSS on CPU (psutil,
  else /proc/self/statm, else getrusage), and memory growth across identical iterations: the bytes of live
  tensors the step created, counted after each of 6 more calls with a storage-tracking TorchDispatchMode
  (:class:`~firstdiv.instruments._core.memory.LiveTensors`). Live bytes rising at every one of those iterations is
  ``memory.growth`` (bytes/iteration, least-squares): a FAIL when the kept tensors hold an autograd graph (``loss``
  appended instead of ``loss.item()``), a WARN when they are detached (an epoch's statistics buffer).
- RECONCILE (``_reconcile``): the sum of the phase medians against the step's median plus its input wait;
  while they disagree beyond noise both are measured again (3 measurements at most, the last reported), and a
  disagreement that stays is a WARN (``perf.reconcile``) with the numbers, never a silent PASS and never a FAIL.
- ``profile=True``: torch.profiler's top operators over 3 extra calls (localization only; times are unprofiled). The
  instrument's own overhead: an empty step timed the same way.
``batch`` is passed to ``step`` as is; a callable ``batch`` is a batch factory (its time is the input wait);
``batch=None`` calls ``step()`` with no argument (the ``train_step`` evidence key).
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status, skipped
from .._core import batch as _batch
from .._core.checks import Check, check, compose
from .._core.memory import OOM_ERRORS, fmt_bytes
from .._core.progress import progress
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from . import _reconcile as rcl
from . import _timing as pt

__all__ = ["performance_ledger"]

_NAME = "performance_ledger"
_PROFILED_CALLS = 3
_NOISY = 0.25  # IQR / median above which the timing is called noisy (with the fix: more repeats)


@reports_user_hooks
def performance_ledger(step: Callable[..., Any] | None, batch: Any = None, *, warmup: int = 2, repeats: int = 10,
                       phases: bool = True, model: nn.Module | None = None,
                       optimizer: torch.optim.Optimizer | None = None, loss_fn: Callable[..., Any] | None = None,
                       profile: bool = False) -> Report:
    """Measure ``step(batch)`` under a stated contract: whole-step time (median, IQR), phase times when
    ``model``, ``loss_fn`` and ``optimizer`` are given, memory, growth across identical iterations
    (``memory.growth`` where ``"step"``), the profiler's top ops when ``profile=True``, and the instrument's own
    overhead. See the module docstring for what is run and restored."""
    _validated(step, warmup, repeats, phases, model, optimizer, loss_fn, profile)
    device = _device(model, batch)
    sync, sync_text = pt.synchronizer(device)
    details: dict[str, Any] = {"contract": _contract(step, batch, model, device, warmup, repeats, sync_text)}
    phased = phases and all(v is not None for v in (model, optimizer, loss_fn, batch))
    units = (step is not None) * (warmup + repeats + pt.GROWTH_ITERATIONS + profile * _PROFILED_CALLS) + \
        phased * (warmup + repeats)
    run, times, rounds, checks = None, None, None, []
    with progress("performance_ledger: timing the step", total=units) as tick:
        if step is not None:
            try:
                run = _measure_step(step, batch, model, optimizer, warmup, repeats, profile, sync, device, tick)
            except Exception as exc:  # noqa: BLE001 - the user's step: its failure is the report, everything restored
                return _step_raised(exc)
        cpu: dict[str, list[float]] = {}
        if phased:
            times, skip = _phase_times(model, optimizer, loss_fn, batch, warmup, repeats, sync, tick, cpu)
            checks += skip
        if run is not None and times is not None:
            again = functools.partial(_again, step, batch, model, optimizer, loss_fn, warmup, repeats, sync, run)
            m, rounds = rcl.reconcile(rcl.Measured(run.step, run.wait, times, run.step_cpu, run.wait_cpu, cpu), again,
                                      use_cpu=device.type == "cpu")
            run.step, run.wait, times = m.step, m.wait, m.phases
    given = {"batch": batch, "model": model, "optimizer": optimizer, "warmup": warmup, "repeats": repeats,
             "phases": phases, "phased": phased, "profile": profile, "device": device, "sync": sync}
    return _assemble(run, times, rounds, checks, details, given)


def _assemble(run: pt.StepRun | None, times: dict | None, rounds: list | None, checks: list[Check], details: dict,
              a: dict[str, Any]) -> Report:
    """The findings in order (``a``: performance_ledger's arguments, the device and its synchronizer)."""
    out: list[Check] = []
    if run is not None:
        if a["batch"] is not None:
            details["contract"]["inputs"] = _batch.describe(run.first_batch)
        out += _time_checks(run, a["repeats"], details)
    if a["phases"] and not a["phased"]:
        out.append(check("step", "perf.phase_time", Status.SKIPPED,
                         "phases not timed: pass model=, loss_fn=, optimizer= and a batch to time input wait, transfer, "
                         "forward, loss, backward and optimizer separately"))
    out += checks + (_phase_checks(times, a["repeats"], details) if times is not None else [])
    if rounds is not None:
        details["reconcile"] = rounds
        out.append(rcl.reconcile_check(rounds))
    if run is not None:
        out += _memory_checks(run, a["device"], details)
        out.append(_growth_check(run, a["device"], details))
        if run.profile is not None:
            out.append(_profile_check(run, details))
    if a["profile"] and run is None:
        out.append(check("step", "perf.profile", Status.SKIPPED, "profile=True needs a step to profile: pass step"))
    out.append(_overhead_check(pt.time_empty(a["repeats"], a["sync"]), details))
    effects = _effects(run, a["model"], a["optimizer"], a["phased"], a["device"], a["warmup"], a["repeats"])
    return compose(_NAME, out, effects, details)


def _validated(step: Any, warmup: Any, repeats: Any, phases: Any, model: Any, optimizer: Any, loss_fn: Any,
              profile: Any) -> None:
    if step is not None:
        _batch.check_callable(step, "step")
    elif model is None or optimizer is None or loss_fn is None:
        raise InvalidArgument("Expected `step` to be callable (step(batch) runs one training step) but got None")
    for name, value, low in (("warmup", warmup, 0), ("repeats", repeats, 3)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidArgument(f"Expected `{name}` to be an integer >= {low} but got {value!r}")
    for name, value in (("phases", phases), ("profile", profile)):
        if not isinstance(value, bool):
            raise InvalidArgument(f"Expected `{name}` to be True or False but got {value!r}")
    if model is not None:
        _batch.check_model(model)
    if optimizer is not None:
        _batch.check_optimizer(optimizer)
    if loss_fn is not None:
        _batch.check_loss_fn(loss_fn)


# --- the contract -------------------------------------------------------------------------------------------------


def _tensors(value: Any) -> list[torch.Tensor]:
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _device(model: nn.Module | None, batch: Any) -> torch.device:
    if model is not None:
        for t in (*model.parameters(), *model.buffers()):
            return t.device
    found = _tensors(batch) if not callable(batch) else []
    return found[0].device if found else torch.device("cpu")


def _workload(step: Any, model: nn.Module | None) -> str:
    target = step if step is not None else model
    while isinstance(target, functools.partial):
        target = target.func
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    return f"{module}.{name}" if module and module not in ("__main__", "builtins") else name


def _execution(step: Any, model: nn.Module | None) -> str:
    if "torch._dynamo" not in sys.modules:  # nothing can have been compiled in this process
        return "eager"
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule) or isinstance(step, OptimizedModule):
        return "compiled (torch.compile module)"
    if getattr(step, "_torchdynamo_orig_callable", None) is not None:
        return "compiled (torch.compile function)"
    return "eager"


def _contract(step: Any, batch: Any, model: nn.Module | None, device: torch.device, warmup: int, repeats: int,
              sync_text: str) -> dict[str, Any]:
    floats = [t for t in (*(model.parameters() if model is not None else ()), *_tensors(batch)) if t.is_floating_point()]
    return {"workload": _workload(step, model),
            "inputs": "produced by batch() each call" if callable(batch) else
                      ("none: step() takes no batch" if batch is None else _batch.describe(batch)),
            "device": str(device), "dtype": str(floats[0].dtype).replace("torch.", "") if floats else "n/a",
            "mode": ("train" if model.training else "eval") if model is not None else "unknown (pass model= to record it)",
            "execution": _execution(step, model), "warmup": warmup, "repeats": repeats,
            "synchronization": sync_text, "metric": "seconds per step (median over repeats, host wall-clock)"}


def _examples(batch: Any) -> int | None:
    found = _tensors(batch)
    return int(found[0].shape[0]) if found and found[0].ndim > 0 else None


# --- findings -----------------------------------------------------------------------------------------------------


def _noise(s: dict[str, float], repeats: int) -> str:
    if s["relative_spread"] <= _NOISY:
        return ""
    return (f"; spread (IQR) is {100 * s['relative_spread']:.0f}% of the median: rerun with more repeats "
            f"(repeats={max(2 * repeats, 20)}) or on a quieter machine before comparing")


def _time_checks(run: pt.StepRun, repeats: int, details: dict) -> list[Check]:
    s, w = pt.spread(run.step), pt.spread(run.wait)
    details["step_seconds"], details["input_wait_seconds"] = s, w
    n = _examples(run.first_batch)
    ev = {"median_s": s["median"], "iqr_s": s["iqr"], "min_s": s["min"], "max_s": s["max"], "repeats": s["n"],
          "input_wait_median_s": w["median"]}
    if n:
        details["examples_per_second"] = n / s["median"] if s["median"] > 0 else None
        ev["examples_per_second"] = details["examples_per_second"]
    return [check("step", "perf.step_time", Status.PASS,
                  f"step: median {s['median'] * 1e3:.3f} ms (IQR {s['iqr'] * 1e3:.3f} ms, n={s['n']}); input wait "
                  f"median {w['median'] * 1e3:.3f} ms{_noise(s, repeats)}", ev)]


def _phase_checks(times: dict[str, list[float]], repeats: int, details: dict) -> list[Check]:
    stats = {name: pt.spread(v) for name, v in times.items()}
    total = sum(s["median"] for s in stats.values()) or 1.0
    dominant = max(stats, key=lambda k: stats[k]["median"])
    details["phases"], details["dominant_phase"] = stats, dominant
    out = [check(name, "perf.phase_time", Status.PASS,
                 f"{name}: median {s['median'] * 1e3:.3f} ms (IQR {s['iqr'] * 1e3:.3f} ms), "
                 f"{100 * s['median'] / total:.0f}% of the phase total{_noise(s, repeats) if s['median'] > 1e-4 else ''}",
                 {"median_s": s["median"], "iqr_s": s["iqr"], "fraction": s["median"] / total})
           for name, s in stats.items()]
    out.append(check(dominant, "perf.dominant_phase", Status.PASS,
                     f"dominant phase: {dominant} ({100 * stats[dominant]['median'] / total:.0f}% of "
                     f"{total * 1e3:.3f} ms per step, measured on a detached copy)",
                     {"fraction": stats[dominant]["median"] / total, "phase_total_s": total}))
    return out


def _memory_checks(run: pt.StepRun, device: torch.device, details: dict) -> list[Check]:
    first, last = run.memory[0], run.memory[-1]
    rss_values = [m["rss"] for m in run.memory if m["rss"] is not None]
    mem: dict[str, Any] = {"rss_source": first["rss_source"], "rss_start": first["rss"], "rss_end": last["rss"],
                           "rss_max": max(rss_values) if rss_values else None}
    msg = (f"process RSS {fmt_bytes(first['rss'])} -> {fmt_bytes(last['rss'])} over the timed repeats "
           f"({first['rss_source']})")
    if device.type == "cuda":
        for key in ("allocated", "reserved", "peak_allocated", "peak_reserved"):
            mem[key] = last[key]
        mem["allocated_series"] = [m["allocated"] for m in run.memory]
        msg = (f"CUDA allocated {fmt_bytes(last['allocated'])}, reserved {fmt_bytes(last['reserved'])}, peak allocated "
               f"{fmt_bytes(last['peak_allocated'])}, peak reserved {fmt_bytes(last['peak_reserved'])}; " + msg)
    details["memory"] = mem
    return [check("step", "memory.usage", Status.PASS, msg, {k: v for k, v in mem.items() if not isinstance(v, list)})]


def _rising(series: list[int]) -> tuple[bool, float, list[int]]:
    """(rose at every iteration, least-squares bytes/iteration, increments)."""
    steps = [b - a for a, b in itertools.pairwise(series)]
    # Byte counts are integers: a fit in floating point returns 3.999999999999949 for a steady 4 bytes per
    # iteration, so the slope is fitted on the series relative to its first value and rounded to a micro-byte.
    base = np.asarray(series, dtype=float) - (series[0] if series else 0)
    slope = round(float(np.polyfit(np.arange(len(series)), base, 1)[0]), 6) if len(series) > 1 else 0.0
    return (len(steps) >= 3 and all(d > 0 for d in steps)), slope, steps


def _growth_check(run: pt.StepRun, device: torch.device, details: dict) -> Check:
    rose, slope, steps = _rising(run.live)
    cuda_rose, cuda_slope = False, 0.0
    if device.type == "cuda":
        cuda_rose, cuda_slope, _ = _rising(details["memory"]["allocated_series"][1:])
    graphs = sorted({s["grad_fn"] for s in run.survivors if s["grad_fn"]})
    ev = {"iterations": len(run.live), "live_bytes": run.live, "bytes_per_iteration": slope, "increments": steps,
          "kept_tensors": len(run.survivors), "kept_with_graph": sum(1 for s in run.survivors if s["grad_fn"]),
          "graph_nodes": graphs}
    if device.type == "cuda":
        ev.update({"cuda_allocated_bytes_per_iteration": cuda_slope})
    details["growth"] = dict(ev, survivors=run.survivors[:10])
    if not (rose or cuda_rose):
        return check("step", "memory.growth", Status.PASS,
                     f"live tensor bytes created by the step stay at {fmt_bytes(run.live[-1])} over {len(run.live)} "
                     f"identical iterations (increments {steps}; the watch stops once they do not rise)", ev)
    rate, series = (slope, run.live) if rose else (cuda_slope, details["memory"]["allocated_series"][1:])
    what = "live tensor bytes" if rose else "CUDA allocated bytes"
    if not graphs:  # detached tensors kept: an epoch's statistics buffer is a design, a kept graph is not
        return check("step", "memory.growth", Status.WARN, f"{what} rose at every one of {len(series) - 1} identical "
                     f"iterations: +{fmt_bytes(rate)}/iteration; {len(run.survivors)} tensors of earlier iterations are "
                     "alive, none with an autograd graph (an epoch's buffer of results grows so): not shown a leak", ev)
    kept = f"{ev['kept_with_graph']} tensors of earlier iterations are alive with an autograd graph ({', '.join(graphs)})"
    return check("step", "memory.growth", Status.FAIL,
                 f"{what} rose at every one of {len(series) - 1} identical iterations: +{fmt_bytes(rate)}/iteration "
                 f"({series[0]} -> {series[-1]} bytes); {kept}, whose nodes these tensor bytes do not count", ev,
                 expected=f"the same {what} after every identical iteration",
                 observed=f"+{rate:.0f} bytes/iteration over {len(series)} iterations",
                 hint="something keeps tensors from every step alive: append loss.item() (or loss.detach()) instead of "
                      "loss, and do not keep outputs/logits of every batch; a kept tensor with grad_fn also keeps its "
                      "autograd graph")


# --- measuring ----------------------------------------------------------------------------------------------------


def _fetcher(batch: Any) -> Callable[[], Any]:
    return batch if callable(batch) else (lambda: batch)


def _caller(step: Callable, batch: Any) -> Callable[[Any], Any]:
    return (lambda _b: step()) if batch is None else step


def _measure_step(step: Callable, batch: Any, model: Any, optimizer: Any, warmup: int, repeats: int, profile: bool,
                  sync: Callable[[], None], device: torch.device, tick: Callable[..., None]) -> pt.StepRun:
    call, fetch = _caller(step, batch), _fetcher(batch)
    with guarded(model, optimizer, step):  # step: the LR schedulers and GradScalers it holds
        run = pt.run_step(call, fetch, warmup, repeats, sync, device, tick)
        if profile:
            run.profile = pt.profile_top(call, fetch, _PROFILED_CALLS, sync, device)
            run.calls["profiled"] = _PROFILED_CALLS
            tick(_PROFILED_CALLS)
    return run


def _again(step: Callable, batch: Any, model: Any, optimizer: Any, loss_fn: Any, warmup: int, repeats: int,
           sync: Callable[[], None], run: pt.StepRun) -> rcl.Measured | None:
    """The step and the phases measured once more (the step on your objects under guarded()); None when
    either raised this time."""
    cpu: dict[str, list[float]] = {}
    try:
        with guarded(model, optimizer, step):
            again = pt.time_step(_caller(step, batch), _fetcher(batch), repeats, sync)
        run.calls["reconcile"] = run.calls.get("reconcile", 0) + repeats
        with guarded(model, optimizer):
            times = pt.run_phases(model, optimizer, loss_fn, _fetcher(batch), warmup, repeats, sync, cpu=cpu)
    except Exception:  # noqa: BLE001 - it ran before; a second failure only ends the reconciliation
        return None
    return rcl.Measured(again.step, again.wait, times, again.step_cpu, again.wait_cpu, cpu)


def _effects(run: pt.StepRun | None, model: Any, optimizer: Any, phased: bool, device: torch.device,
             warmup: int, repeats: int) -> str:
    parts = []
    if run is not None:
        n = sum(run.calls.values())
        parts.append(f"step called {n} times on your objects ({', '.join(f'{v} {k}' for k, v in run.calls.items())}) "
                     "inside guarded(): parameters, .grad, optimizer state, train flags, RNG states and grad mode "
                     "restored afterwards, and the LR schedulers and GradScalers the step holds (closure, globals it "
                     "names, attributes of its object); other objects your step appends to or reaches (lists, "
                     "loggers, iterators) are not restored")
        if model is None or optimizer is None:
            parts.append("model=/optimizer= not given, so their state was NOT restored: pass them to have it restored")
    if phased:
        parts.append(f"phases timed on a deep copy of the model and optimizer ({warmup + repeats} optimizer steps on "
                     "the copy)")
    if device.type == "cuda":
        parts.append("CUDA peak memory statistics reset (torch.cuda.reset_peak_memory_stats)")
    return "; ".join(parts) or "none"


def _step_raised(exc: BaseException) -> Report:
    hint = ("; run it inside firstdiv.memory_phases(model, optimizer) to see which phase ran out of memory"
            if isinstance(exc, OOM_ERRORS) else "")
    return skipped(_NAME, f"step raised {_batch.describe_error(exc)}{hint}; performance_ledger needs a step that runs "
                          "(every value on model=/optimizer= was restored)")


def _phase_times(model: Any, optimizer: Any, loss_fn: Any, batch: Any, warmup: int, repeats: int,
                 sync: Callable[[], None], tick: Callable[..., None], cpu: dict) -> tuple[dict | None, list[Check]]:
    """(seconds per phase, []) or (None, [the SKIPPED finding why not]), never raising; CPU seconds into ``cpu``."""
    try:
        with guarded(model, optimizer):
            return pt.run_phases(model, optimizer, loss_fn, _fetcher(batch), warmup, repeats, sync, tick, cpu), []
    except (pt.PhaseError, InvalidArgument) as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. a batch the copy's forward cannot take (sparse, nested)
        why = f"timing the phases raised {_batch.describe_error(exc)}"
    return None, [check("step", "perf.phase_time", Status.SKIPPED, f"phases not timed: {why}")]


def _profile_check(run: pt.StepRun, details: dict) -> Check:
    prof = dict(run.profile or {})
    unprofiled = details["step_seconds"]["median"]
    prof["profiler_slowdown"] = prof["profiled_step_median"] / unprofiled if unprofiled > 0 else None
    details["profile"] = prof
    top = ", ".join(f"{r['op']} {r['self_seconds_per_step'] * 1e3:.3f} ms" for r in prof["top_ops"][:3])
    return check("step", "perf.profile", Status.PASS,
                 f"profiler (localization only; reported times are unprofiled): top self time per step: {top}",
                 {"iterations": prof["iterations"], "profiled_step_median_s": prof["profiled_step_median"],
                  "unprofiled_step_median_s": unprofiled})


def _overhead_check(empty: float, details: dict) -> Check:
    step = details.get("step_seconds", {}).get("median")
    fraction = empty / step if step else None
    details["overhead"] = {"empty_step_seconds": empty, "fraction_of_step": fraction,
                           "how": "an empty step timed with the same loop and synchronization boundary"}
    msg = f"instrument overhead: an empty step measures {empty * 1e6:.2f} us"
    if fraction is not None:
        msg += f" ({100 * fraction:.3f}% of the median step)"
    return check("step", "perf.overhead", Status.PASS, msg, {"empty_step_s": empty, "fraction_of_step": fraction})
