"""Producer/consumer timing (appendix section 6, chapter 31 "When the GPU is mostly idle"): is the training
loop waiting for batches, and if so, which phase of making them is the limit?

The measurement: ``warmup + batches`` rounds of ``t0; batch = next(it); t1; step(batch); t2`` over the loader
as given, ``wait = t1 - t0`` and ``work = t2 - t1`` (with CUDA in use, the device is synchronized after the
step). A finished epoch starts a fresh iterator, whose teardown and worker start-up count in the next wait.
Steady batches are those after warm-up that are not the first batch of an iterator that started worker
processes (a start-up batch). Then, in the main process on the indices the loader draws first (same sampler,
same generator state), ``dataset[i]`` for each index of up to 3 batches - fewer once 1 s is spent -
(read_decode_transform, G per batch) and ``collate_fn`` on their results (collate, C per batch); with CUDA in
use, the copy of those batches to the device (host_to_device, H). A ``sweep`` rebuilds a DataLoader over ``loader.dataset`` per setting with one
control changed (same batch size, collate_fn, sampler kind - a RandomSampler gets its own seeded generator)
and measures it the same way.

Rules (W = median steady wait, K = median steady work, all per batch, in ms):

- process start-up per epoch ``S = max(0, first-batch wait - max(W, G + C))`` (with workers only), and per
  batch ``S / batches per epoch`` (``len(loader)``, or the batches measured when it has no length; 0 with
  ``persistent_workers``: paid once per run, reported anyway);
- effective wait ``E = W + S / batches per epoch``;
- **starved** when a step is given and ``E >= 0.5 ms`` and (``E > 0.5 x K``, or at least 25% of steady
  batches waited longer than their own work and longer than 1 ms: the tail rule - a low median with
  repeated long stalls still starves the consumer). Sub-0.5 ms waits are timer and scheduler noise here;
- the **limiting phase** when starved (FAIL, first divergence ``loader.starved`` where = the phase), first
  match of: ``cpu_contention`` when a num_workers sweep shows it (below); ``process_startup`` when workers
  are used and ``S / batches per epoch > W``; ``read_decode_transform`` when ``G >= C``; ``collate`` when
  ``C > G``; ``producer`` when the producer could not be split (a plain iterable, or timing it raised);
- not starved: ``host_to_device`` (WARN) when CUDA is in use and ``H > 0.5 x K``, else ``consumer_compute``
  (PASS). Without a step nothing consumes, so starvation is not judged (a SKIPPED finding) and the limiting
  phase is that of the loader's own throughput (the same ordering as when starved);
- **cpu_contention** (a WARN finding; the limiting phase when starved): in a num_workers sweep, a setting
  with more workers than the fewest whose median wait fell by >= 20% and >= 0.5 ms while median work rose by
  >= 20% and >= 0.5 ms and end-to-end examples/s stayed within 15%: the workers compete with the consumer
  for the same CPU, and more of them cannot create more of it.

Busy machines (``_reconcile``): a starved verdict at read_decode_transform or collate must be explained by the
producer's own measured cost per batch, a phase that cannot be split must be starved twice in a row; while not,
it is measured again (at most 3 times); a wait the producer's cost cannot explain is scheduler noise (PASS, with
the numbers). The machine's load is in ``details["machine"]`` and the ``loader.machine`` finding. A FAIL names the phase in
your names (``<Dataset>.__getitem__``, the collate_fn) in its message, observed and ``in_your_code``.

Leave no trace: the loader's generators (its own and its samplers') and the global RNGs are given back; a
persistent-workers iterator the loader did not have is shut down; the modules and optimizers ``step``
reaches through its closure, defaults, named globals, bound object or partial arguments are restored
afterwards (anything else it changes stays changed, and ``side_effects`` says so). A one-shot iterator
cannot be rewound: the batches taken from it are gone.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ...report import Report, Status
from .._core.checks import Check, check, compose
from .._core.closure import closure_state
from .._core.progress import progress
from .._core.state import Snapshot, guarded
from .._core.user_hooks import reports_user_hooks
from . import _checks as lc
from . import _reconcile as rc
from ._measure import (
    PRODUCER_BATCHES,
    Producer,
    Run,
    measure,
    shutdown,
    split_run,
    summarize,
    time_host_to_device,
    time_producer,
)
from ._setup import check_consumer, check_count, check_loader, check_sweep, kept_loader, rebuild

__all__ = ["loader_timing"]

_NAME = "loader_timing"


@reports_user_hooks
def loader_timing(loader: Any, step: Callable[[Any], Any] | None = None, *, batches: int = 20,
                  sweep: dict[str, list[Any]] | None = None, warmup: int = 1,
                  train_step: Callable[[Any], Any] | None = None) -> Report:
    """Time the wait for each batch against the work done on it, split the producer into its phases, and
    name the limiting phase (module docstring: the rules). ``step(batch)`` is the consumer (default: none);
    ``train_step(batch)``, the step of your own loop, is the same consumer under its usual name.

    ``loader``: a ``DataLoader`` (or any iterable of batches: then no producer split and no sweep);
    ``batches``: steady batches measured after ``warmup`` batches; ``sweep``: ``{control: [values]}`` over
    ``num_workers``, ``pin_memory``, ``batch_size``, ``prefetch_factor``, ``persistent_workers``, one control
    at a time. Returns FAIL (``loader.starved`` at the phase) only when the consumer is starved by a phase
    whose measured cost explains the wait (``_reconcile``: repeated while the evidence disagrees).
    """
    check_loader(loader)
    step = check_consumer(step, train_step)
    check_count(batches, "batches", 1)
    check_count(warmup, "warmup", 0)
    controls = check_sweep(sweep)
    objects = closure_state(step) if step is not None else []
    with guarded(*objects, step), kept_loader(loader) as rewind:  # step: the schedulers and scalers it holds
        with progress(f"loader_timing: {batches + warmup} batches", total=None) as tick:
            tries = _tries(loader, step, batches, warmup, rewind, tick)
        main = tries[-1].main
        calls = sum(t.calls for t in tries)
        if main.run.error_in:
            return _could_not_run(main, _side_effects(step, objects, calls, main))
        is_dl = isinstance(loader, DataLoader)
        rows = [_sweep_row(loader, step, c, v, batches, warmup) for c, vs in controls.items() for v in vs] if is_dl else []
        calls += sum(r.get("calls", 0) for r in rows)
    return _report(loader, tries, rows, controls, _side_effects(step, objects, calls, main), warmup,
                   getattr(step, rc.SURROGATE, ""))


@dataclass
class _Try:
    """One measurement: the wait/work loop, the producer split, the copies, the machine's load, the verdict."""

    main: _Main
    producer: Producer | None
    h2d: dict[str, Any]
    load: dict[str, Any]
    numbers: lc.Numbers | None
    verdict: lc.Verdict | None
    calls: int
    settled: str = ""


def _tries(loader: Any, step: Any, batches: int, warmup: int, rewind: Callable[[], None], tick: Any) -> list[_Try]:
    """Measure until the verdict is settled (``_reconcile.settled``), at most ``_reconcile.TRIES`` times."""
    rng, out = Snapshot.take(), []
    is_dl = isinstance(loader, DataLoader)
    for _ in range(rc.TRIES):
        load = rc.Load.begin()
        main = _measure_main(loader, step, batches, warmup, tick)
        facts = load.end().facts()
        calls = len(main.run.waits) + (main.run.error_in == "step")
        rewind()
        rng.restore()
        if main.run.error_in:
            return [*out, _Try(main, None, {}, facts, None, None, calls)]
        if out and main.persistent and main.summary["first_wait_ms"] is None:  # started once, in the first try
            main.summary.update({k: out[0].main.summary[k] for k in ("first_wait_ms", "startup_batches")})
        producer = time_producer(loader, min(PRODUCER_BATCHES, batches)) if is_dl else None
        rewind()
        rng.restore()
        h2d = _host_to_device(loader, producer)
        n = _numbers(main, producer, h2d)
        out.append(_Try(main, producer, h2d, facts, n, lc.decide(n, None), calls))
        done, why = rc.settled([(t.numbers, t.verdict) for t in out], not main.one_shot)
        out[-1].settled = why
        if done:
            break
    return out


def _numbers(main: _Main, producer: Producer | None, h2d: dict[str, Any]) -> lc.Numbers:
    s = main.summary
    split = producer is not None and not producer.error and bool(producer.getitem)
    g = _median_ms(producer.getitem) if split else None
    c = _median_ms(producer.collate) if split else None
    return lc.Numbers(s["wait_ms"]["median"], s["work_ms"]["median"], s["stall_share"] or 0.0, s["first_wait_ms"], g, c,
                      _median_ms(h2d.get("seconds", [])), main.workers, main.persistent,
                      main.epoch_batches or s["batches_measured"], main.step_given)


@dataclass
class _Main:
    run: Run
    summary: dict[str, Any]
    workers: int
    persistent: bool
    epoch_batches: int | None
    one_shot: bool
    step_given: bool


def _epoch_batches(loader: Any) -> int | None:
    if isinstance(loader, DataLoader) and isinstance(loader.dataset, IterableDataset):
        return None  # len() of such a loader records a length it then enforces: do not touch it
    try:
        return len(loader) or None
    except TypeError:
        return None


def _measure_main(loader: Any, step: Any, batches: int, warmup: int, tick: Any = None) -> _Main:
    is_dl = isinstance(loader, DataLoader)
    workers = loader.num_workers if is_dl else 0
    persistent = bool(is_dl and loader.persistent_workers)
    had = bool(is_dl and loader._iterator is not None)
    one_shot = isinstance(loader, Iterator)
    run = measure(loader, step, warmup + batches, restartable=not one_shot,
                  collated=not is_dl or loader._auto_collation, keep_iterator=persistent, tick=tick)
    split = split_run(run, warmup, lambda i: workers > 0 and (not persistent or (i == 0 and not had)))
    summary = summarize(run, split) if run.waits else {}
    return _Main(run, summary, workers, persistent, _epoch_batches(loader), one_shot, step is not None)


def _host_to_device(loader: Any, producer: Producer | None) -> dict[str, Any]:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {"reason": "CUDA is not in use in this process" if torch.cuda.is_available() else "no CUDA device"}
    if producer is None or not producer.batches:
        return {"reason": "no batch was made in this process to copy (a plain iterable, or the producer raised)"}
    try:
        return {"seconds": time_host_to_device(producer.batches, bool(loader.pin_memory)), "pinned": bool(loader.pin_memory)}
    except Exception as exc:  # noqa: BLE001 - e.g. a batch holding objects .to() rejects; reported
        return {"reason": f"copying a batch to the device raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def _sweep_row(loader: DataLoader, step: Any, control: str, value: Any, batches: int, warmup: int) -> dict[str, Any]:
    row: dict[str, Any] = {"control": control, "value": value, "status": "ok", "notes": []}
    built, why = rebuild(loader, control, value)
    if built is None:
        return dict(row, status="skipped", reason=why)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run = measure(built, step, warmup + batches, restartable=True, collated=built._auto_collation,
                          keep_iterator=built.persistent_workers)
        finally:
            if built.persistent_workers and built._iterator is not None:
                shutdown(built._iterator)
                built._iterator = None
    notes = sorted({str(w.message).strip().splitlines()[0][:200] for w in caught})
    if control == "pin_memory" and value and not torch.cuda.is_available():
        notes.insert(0, "no CUDA device: pin_memory has no effect here (it only speeds host-to-device copies)")
    row.update(notes=notes, calls=len(run.waits) + (run.error_in == "step"))
    if run.error_in:
        return dict(row, status="error" if run.error else "skipped", reason=run.error or "the loader yielded no batches")
    persistent = built.persistent_workers
    s = summarize(run, split_run(run, warmup, lambda i: built.num_workers > 0 and (not persistent or i == 0)))
    return dict(row, examples_per_s=s["end_to_end"], unit=s["unit"], wait_ms=s["wait_ms"], work_ms=s["work_ms"],
                first_wait_ms=s["first_wait_ms"], steady_batches=s["steady_batches"])


def _side_effects(step: Any, objects: list[Any], calls: int, main: _Main) -> str:
    parts = []
    if step is not None:
        if objects:
            names = ", ".join(type(o).__name__ for o in objects[:6]) + (", ..." if len(objects) > 6 else "")
            parts.append(f"step called {calls} times on your objects; the {len(objects)} modules/optimizers it reaches "
                         f"({names}), their gradients, the LR schedulers and GradScalers it holds and the RNG states "
                         f"restored afterwards; anything else it changes (counters, lists) stays changed")
        else:
            parts.append(f"step called {calls} times; no module or optimizer found in what it closes over, so whatever "
                         f"it changes stays changed (the RNG states, LR schedulers and GradScalers are restored)")
    if main.one_shot:
        parts.append(f"took {len(main.run.waits)} batches from your iterator (an iterator cannot be rewound)")
    return "; ".join(parts) or "none"


def _could_not_run(main: _Main, side_effects: str) -> Report:
    run = main.run
    fixes = {"step": "fix step, or call loader_timing(loader) without step to time the loader alone",
             "loader": "fix the dataset or collate_fn (firstdiv.stage_trace walks one sample through preprocessing)",
             "empty": "the loader yielded no batches: an empty dataset, or drop_last=True with fewer examples than batch_size"}
    reason = f"{run.error}; {fixes[run.error_in]}" if run.error else fixes[run.error_in]
    details = {"batches_before_error": len(run.waits), "error_in": run.error_in,
               "wait_ms_before_error": [round(w * 1e3, 4) for w in run.waits],
               "work_ms_before_error": [round(w * 1e3, 4) for w in run.works]}
    return Report(_NAME, Status.SKIPPED, side_effects=side_effects, reason=reason, details=details)


def _median_ms(values: list[float]) -> float | None:
    return round(float(np.median(values)) * 1e3, 4) if values else None


def _report(loader: Any, tries: list[_Try], rows: list[dict[str, Any]], controls: dict[str, list[Any]],
            side_effects: str, warmup: int, surrogate: str) -> Report:
    last = tries[-1]
    main, producer, h2d, n = last.main, last.producer, last.h2d, last.numbers
    s, plain = main.summary, not isinstance(loader, DataLoader)
    split = n.getitem is not None
    found = lc.contention(rows)
    v = lc.decide(n, found)
    ok, why = rc.explained(n, v)
    if ok is False:
        v = rc.noise_verdict(n, v, why, len(tries))
    throughput = _throughput(s, producer if split else None, main.workers, main.step_given)
    checks = lc.producer_checks(producer)
    if not plain:
        checks.append(lc.startup_check(v, s["first_wait_ms"], main.workers, main.persistent, n.epoch_batches))
    checks += [_wait_check(s, main), lc.h2d_check(h2d, n.h2d), _work_check(s, main.step_given),
               _throughput_check(throughput, main.workers)]
    checks += lc.sweep_checks(rows, controls, plain)
    checks += lc.contention_check(rows, found)
    checks.append(rc.machine_check([(t.load, t.settled) for t in tries]))
    repeated = len(tries) >= 2 and bool(tries[-2].verdict and tries[-2].verdict.starved)
    unconfirmed = rc.unconfirmed(v, ok, main.one_shot and not repeated, surrogate)
    checks.append(rc.verdict_check(v, n, s, rc.phase_where(loader, v.phase), unconfirmed))
    details = _details(loader, main, producer, h2d, rows, found, v, warmup, throughput)
    details["machine"] = last.load
    details["measurements"] = [{"wait_ms": t.main.summary.get("wait_ms", {}).get("median"),
                                "work_ms": t.main.summary.get("work_ms", {}).get("median"),
                                "starved": t.verdict.starved if t.verdict else None,
                                "phase": t.verdict.phase if t.verdict else None, "settled": t.settled,
                                "machine": t.load} for t in tries]
    return compose(_NAME, checks, side_effects, details)


def _wait_check(s: dict[str, Any], main: _Main) -> Check:
    w = s["wait_ms"]
    ev = dict(w, first_wait_ms=s["first_wait_ms"], idle_share=s["idle_share"], stall_share=s["stall_share"],
              batches_measured=s["batches_measured"], exhausted=main.run.exhausted)
    first = f"; first batch of a worker start {s['first_wait_ms']} ms" if s["first_wait_ms"] is not None else ""
    ran_out = " (the iterator ran out early)" if main.run.exhausted else ""
    return check("batch_wait", "loader.wait", Status.PASS,
                 f"blocked in next(): median {w['median']} ms, p95 {w['p95']} ms, max {w['max']} ms over {w['n']} steady "
                 f"batches{ran_out}{first}", ev)


def _work_check(s: dict[str, Any], step_given: bool) -> Check:
    if not step_given:
        return check("consumer_compute", "loader.work", Status.SKIPPED,
                     "no step given: pass step=lambda batch: ... (your train step on one batch) to time the consumer")
    k = s["work_ms"]
    return check("consumer_compute", "loader.work", Status.PASS,
                 f"step(batch): median {k['median']} ms, p95 {k['p95']} ms, max {k['max']} ms over {k['n']} steady batches", k)


def _throughput(s: dict[str, Any], producer: Producer | None, workers: int, step_given: bool) -> dict[str, Any]:
    single = None
    if producer is not None:
        single = round(sum(producer.examples) / max(1e-12, sum(producer.getitem) + sum(producer.collate)), 3)
    return {"unit": s["unit"], "producer_one_process": single,
            "producer_ideal_with_workers": round(single * workers, 3) if single is not None and workers > 0 else None,
            "consumer": s["consumer"] if step_given else None, "end_to_end": s["end_to_end"]}


def _throughput_check(t: dict[str, Any], workers: int) -> Check:
    unit = t["unit"]
    prod = "producer not timed apart" if t["producer_one_process"] is None else \
        f"producer {t['producer_one_process']} {unit} in one process" + \
        (f" (at most {t['producer_ideal_with_workers']} with {workers} worker{'s' * (workers > 1)})" if workers else "")
    cons = "consumer not timed (no step)" if t["consumer"] is None else f"consumer {t['consumer']} {unit}"
    return check("end_to_end", "loader.throughput", Status.PASS, f"{prod}; {cons}; end to end {t['end_to_end']} {unit}", t)


def _loader_facts(loader: Any) -> dict[str, Any]:
    if not isinstance(loader, DataLoader):
        return {"type": type(loader).__name__}
    return {"type": type(loader).__name__, "dataset": type(loader.dataset).__name__, "batch_size": loader.batch_size,
            "num_workers": loader.num_workers, "pin_memory": bool(loader.pin_memory), "prefetch_factor": loader.prefetch_factor,
            "persistent_workers": bool(loader.persistent_workers), "sampler": type(loader.sampler).__name__,
            "collate_fn": getattr(loader.collate_fn, "__name__", type(loader.collate_fn).__name__)}


def _details(loader: Any, main: _Main, producer: Producer | None, h2d: dict[str, Any], rows: list[dict[str, Any]],
             found: dict[str, Any] | None, v: lc.Verdict, warmup: int, throughput: dict[str, Any]) -> dict[str, Any]:
    s = main.summary
    prod = None if producer is None else {
        "getitem_ms": [round(x * 1e3, 4) for x in producer.getitem], "collate_ms": [round(x * 1e3, 4) for x in producer.collate],
        "examples": producer.examples, "source": producer.source, "error": producer.error}
    return {"limiting_phase": v.phase, "starved": v.starved, "rule": v.rule, "warmup": warmup,
            "batches_measured": s["batches_measured"], "steady_batches": s["steady_batches"],
            "startup_batches": s["startup_batches"], "exhausted": main.run.exhausted, "first_batch": main.run.first_batch,
            "wait_ms": s["wait_ms"], "work_ms": s["work_ms"], "first_wait_ms": s["first_wait_ms"],
            "effective_wait_ms": v.effective_wait, "startup_per_epoch_ms": v.startup_per_epoch,
            "startup_per_batch_ms": v.startup_per_batch, "idle_share": s["idle_share"], "stall_share": s["stall_share"],
            "throughput": throughput, "producer": prod,
            "host_to_device_ms": [round(x * 1e3, 4) for x in h2d["seconds"]] if "seconds" in h2d else None,
            "loader": _loader_facts(loader), "sweep": rows, "cpu_contention": found,
            "thresholds": {"floor_ms": lc.FLOOR_MS, "wait_ratio": lc.WAIT_RATIO, "stall_share": lc.STALL_SHARE,
                           "h2d_ratio": lc.H2D_RATIO, "contention": {"wait_fell": lc.FELL, "work_rose": lc.ROSE,
                                                                     "throughput_flat": lc.FLAT}},
            "timing": "time.perf_counter around next() and step(); torch.cuda.synchronize() after step when CUDA is in use"}
