"""The public corpus gate's worker pool, shared by ``tests/conftest.py`` (which starts it when collection ends) and
``test_public_gate.py`` (whose tests wait on it)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing

import _public_jobs as jobs

WORKERS = 2
_POOL: dict = {}


def start(keys) -> dict:
    """Submit the jobs of ``keys`` (in the order the tests will wait for them) to two spawned workers, each key once;
    the futures by key."""
    if "futures" not in _POOL:
        ex = concurrent.futures.ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn"))
        _POOL.update(executor=ex, futures={})
    run = {"correct": jobs.correct, "bug": jobs.bug, "learns": jobs.learns, "steps": jobs.steps}
    futures = _POOL["futures"]
    for k in keys:
        if k not in futures:
            futures[k] = _POOL["executor"].submit(run[k[0]], *k[1:])
    return futures


def stop() -> None:
    """Cancel what has not started and wait for the workers to end (nothing the gate starts outlives the run)."""
    ex = _POOL.pop("executor", None)
    _POOL.pop("futures", None)
    if ex is not None:
        ex.shutdown(wait=True, cancel_futures=True)
