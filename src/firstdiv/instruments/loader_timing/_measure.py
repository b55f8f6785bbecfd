"""loader_timing's measurements: the wait/work loop over a loader (appendix section 6's smallest useful
measurement), the producer timed directly in the main process (``dataset[i]`` and ``collate_fn`` on the
indices the loader would draw first), host-to-device copies (CUDA only), and the summary statistics.

Times are ``time.perf_counter`` seconds in the records; summaries are in milliseconds. When CUDA is in use
in this process (``torch.cuda.is_initialized()``), the device is synchronized after each step so work is
completed device time, not submission time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from .._core.batch import describe, describe_error

PRODUCER_BATCHES = 3  # batches of indices timed directly in the main process
PRODUCER_BUDGET_S = 1.0  # ... stopping after the batch that crosses this many seconds (at least one batch)


@dataclass
class Run:
    """One pass of the wait/work loop: per batch the wait (blocked in ``next``), the work (``step``),
    the examples it held (None when unknown) and whether it was the first batch of a fresh iterator."""

    waits: list[float] = field(default_factory=list)
    works: list[float] = field(default_factory=list)
    examples: list[int | None] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)
    error: str = ""  # one line: what raised, where
    error_in: str = ""  # "loader" | "step" | "" ; "empty" when the loader yielded nothing
    exhausted: bool = False  # a one-shot iterator ran out before the requested batches
    first_batch: str = ""  # describe() of the first batch, for messages


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _original_error(exc: BaseException) -> str:
    """describe_error, but for an error re-raised from a DataLoader worker: the worker's own last line."""
    text = str(exc)
    if "Original Traceback" in text:
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1].strip()
        return f"{text.splitlines()[0].strip()} {last}"
    return describe_error(exc)


def count_examples(batch: Any, collated: bool = True) -> int | None:
    """Examples in a batch: the leading size of the first tensor/array found (depth first through tuples,
    lists and dicts); 1 when the loader does not batch (``collated`` False); None when nothing tells."""
    if not collated:
        return 1
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, (torch.Tensor, np.ndarray)):
            return int(item.shape[0]) if item.ndim else None
        if isinstance(item, dict):
            stack = list(item.values()) + stack
        elif isinstance(item, (tuple, list)):
            if item and not any(isinstance(v, (torch.Tensor, np.ndarray, dict, tuple, list)) for v in item):
                return len(item)
            stack = list(item) + stack
    return None


def shutdown(it: Any) -> None:
    """Stop a multi-process iterator's workers now (not whenever the garbage collector gets to it)."""
    stop = getattr(it, "_shutdown_workers", None)
    if callable(stop):
        stop()


def measure(source: Iterable, step: Callable[[Any], Any] | None, total: int, *, restartable: bool,
            collated: bool = True, keep_iterator: bool = False, tick: Callable[[], Any] | None = None) -> Run:
    """``total`` rounds of ``t0; batch = next(it); t1; step(batch); t2``. A finished epoch starts a fresh
    iterator (its teardown and start-up count in the next batch's wait) unless ``restartable`` is False.
    Workers are shut down afterwards unless ``keep_iterator`` (a persistent-workers loader owns them)."""
    run, it = Run(), None
    try:
        while len(run.waits) < total:
            t0 = time.perf_counter()
            fresh = False
            try:
                while True:
                    if it is None:
                        it, fresh = iter(source), True
                    try:
                        batch = next(it)
                        break
                    except StopIteration:
                        if fresh or not restartable:
                            run.error_in = "empty" if fresh else ""
                            run.exhausted = not fresh
                            return run
                        if not keep_iterator:
                            shutdown(it)
                        it = None
            except Exception as exc:  # noqa: BLE001 - the user's dataset, collate_fn or a worker raised
                run.error, run.error_in = f"the loader raised {_original_error(exc)}", "loader"
                return run
            t1 = time.perf_counter()
            if not run.first_batch:
                run.first_batch = describe(batch)
            if step is not None:
                try:
                    step(batch)
                    _sync()
                except Exception as exc:  # noqa: BLE001 - user code, reported
                    run.error = f"step raised {describe_error(exc)} on batch {len(run.waits)} ({describe(batch)})"
                    run.error_in = "step"
                    return run
            t2 = time.perf_counter()
            run.waits.append(t1 - t0)
            run.works.append(t2 - t1)
            run.examples.append(count_examples(batch, collated))
            run.fresh.append(fresh)
            del batch
            if tick is not None:
                tick()
    finally:
        if it is not None and not keep_iterator:
            shutdown(it)
    return run


# ---- statistics ----------------------------------------------------------------------------------------

def dist_ms(seconds: list[float]) -> dict[str, float | int | None]:
    """median / p95 / max / mean in milliseconds (4 decimals) and the count."""
    if not seconds:
        return {"median": None, "p95": None, "max": None, "mean": None, "n": 0}
    a = np.asarray(seconds, dtype=float) * 1e3
    return {"median": round(float(np.median(a)), 4), "p95": round(float(np.percentile(a, 95)), 4),
            "max": round(float(a.max()), 4), "mean": round(float(a.mean()), 4), "n": int(a.size)}


def rate(examples: list[int | None], seconds: float) -> tuple[float | None, str]:
    """(examples per second, unit); batches per second when any batch's example count is unknown."""
    if seconds <= 0:
        return None, "examples/s"
    if examples and all(e is not None for e in examples):
        return round(sum(e for e in examples if e is not None) / seconds, 3), "examples/s"
    return round(len(examples) / seconds, 3), "batches/s"


@dataclass
class Split:
    """Which batches of a run are warm-up, which are start-up (first batch of an iterator that started
    worker processes) and which are steady."""

    steady: list[int]
    startup: list[int]


def split_run(run: Run, warmup: int, workers_start: Callable[[int], bool]) -> Split:
    """``workers_start(i)`` says whether batch ``i`` (first of a fresh iterator) paid a worker start-up.
    When nothing is left after warm-up and start-up batches, every start-up batch after warm-up is steady."""
    startup = [i for i, f in enumerate(run.fresh) if f and workers_start(i)]
    steady = [i for i in range(warmup, len(run.waits)) if i not in startup]
    if not steady:
        steady = [i for i in range(warmup, len(run.waits))] or list(range(len(run.waits)))
    return Split(steady, startup)


def summarize(run: Run, split: Split) -> dict[str, Any]:
    """The plain-value summary of a run: wait/work distributions, start-up, throughput, stall share."""
    waits = [run.waits[i] for i in split.steady]
    works = [run.works[i] for i in split.steady]
    examples = [run.examples[i] for i in split.steady]
    e2e, unit = rate(examples, sum(waits) + sum(works))
    consumer, _ = rate(examples, sum(works))
    stalls = sum(1 for w, k in zip(waits, works) if w > max(k, 1e-3))
    first = [run.waits[i] for i in split.startup]
    return {
        "batches_measured": len(run.waits), "steady_batches": len(waits),
        "wait_ms": dist_ms(waits), "work_ms": dist_ms(works),
        "first_wait_ms": round(float(np.median(first)) * 1e3, 4) if first else None,
        "startup_batches": len(first),
        "end_to_end": e2e, "consumer": consumer, "unit": unit,
        "idle_share": round(sum(waits) / (sum(waits) + sum(works)), 4) if waits and (sum(waits) + sum(works)) > 0 else None,
        "stall_share": round(stalls / len(waits), 4) if waits else None,
        "examples_per_batch": examples[0] if examples else None,
    }


# ---- the producer, timed directly in the main process ------------------------------------------------

@dataclass
class Producer:
    """Per batch: seconds in ``dataset[i]`` (or ``__getitems__``), seconds in ``collate_fn``, examples."""

    getitem: list[float] = field(default_factory=list)
    collate: list[float] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)
    batches: list[Any] = field(default_factory=list)  # the collated batches (for the host-to-device timing)
    error: str = ""
    source: str = ""


def _index_batches(loader: DataLoader) -> Iterable[Any]:
    """The indices the loader's next iterator would fetch first: DataLoader draws its workers' base seed
    from ``loader.generator`` (or the global RNG) before the sampler draws, so this draws it too (the
    caller restores every generator afterwards)."""
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    return iter(loader._index_sampler)


def time_producer(loader: DataLoader, n_batches: int) -> Producer:
    """Time ``dataset[i]`` for the indices of the loader's first ``n_batches`` batches and ``collate_fn`` on
    what they return, in this process (for an IterableDataset: items from a fresh iterator of it)."""
    out = Producer()
    auto, dataset = loader._auto_collation, loader.dataset
    iterable = isinstance(dataset, IterableDataset)
    out.source = ("items of a fresh iterator over the IterableDataset" if iterable else
                  "the indices of the loader's first batches (same sampler and generator state)")
    per_batch = (loader.batch_size or 1) if auto else 1
    try:
        keys = iter(dataset) if iterable else _index_batches(loader)
        spent = 0.0
        while len(out.getitem) < n_batches and (not out.getitem or spent < PRODUCER_BUDGET_S):
            t0 = time.perf_counter()
            items = _fetch(dataset, keys, iterable, auto, per_batch, loader.drop_last)
            if items is None:
                break
            t1 = time.perf_counter()
            batch = loader.collate_fn(items)
            t2 = time.perf_counter()
            out.getitem.append(t1 - t0)
            out.collate.append(t2 - t1)
            out.examples.append(len(items) if auto else 1)
            out.batches.append(batch)
            spent += t2 - t0
    except Exception as exc:  # noqa: BLE001 - the user's dataset or collate_fn, reported
        out.error = _original_error(exc)
    return out


def _fetch(dataset: Any, keys: Any, iterable: bool, auto: bool, per_batch: int, drop_last: bool) -> Any:
    """One batch's items as the DataLoader's fetcher gets them; None when the source is exhausted."""
    if iterable:
        items = []
        for _ in range(per_batch if auto else 1):
            try:
                items.append(next(keys))
            except StopIteration:
                break
        if not items or (auto and drop_last and len(items) < per_batch):
            return None
        return items if auto else items[0]
    index = next(keys, None)
    if index is None:
        return None
    if not auto:
        return dataset[index]
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(list(index)) if callable(getitems) else [dataset[i] for i in index]


def _to_device(value: Any, device: torch.device, pin: bool) -> Any:
    if isinstance(value, torch.Tensor):
        src = value.pin_memory() if pin and not value.is_pinned() else value
        return src.to(device, non_blocking=pin)
    if isinstance(value, dict):
        return {k: _to_device(v, device, pin) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device, pin) for v in value) if isinstance(value, list) else \
            tuple(_to_device(v, device, pin) for v in value)
    return value


def time_host_to_device(batches: list[Any], pin: bool) -> list[float]:
    """Seconds to copy each collated batch to the current CUDA device, synchronized before and after
    (pinned first, outside the timing, when the loader pins memory). Only called when CUDA is initialized."""
    device = torch.device("cuda", torch.cuda.current_device())
    out = []
    for batch in batches:
        staged = _to_device(batch, torch.device("cpu"), pin) if pin else batch
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        moved = _to_device(staged, device, pin)
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
        del moved
    return out
