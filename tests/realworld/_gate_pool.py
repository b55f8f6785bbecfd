"""The public corpus gate's worker pool, shared by ``tests/conftest.py`` (which starts it when collection ends) and
``test_public_gate.py`` (whose tests wait on it).

Under pytest-xdist (``make test`` runs the suite on two workers) every worker collects every test but runs only those
the scheduler hands it, so nothing is submitted ahead: each xdist worker keeps one spawned process and a job starts
when its test asks for it (the two xdist workers already keep both cores busy)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from typing import Any

import _public_jobs as jobs

WORKERS = 2
_POOL: dict = {}


def under_xdist() -> bool:
    """Whether this process is a pytest-xdist worker."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


class _OnDemand(dict):
    """Futures by key, each job submitted when its test first asks for it."""

    def __missing__(self, key):
        future = self[key] = _POOL["executor"].submit(_timed, *key)
        return future


def start(keys) -> dict:
    """Submit the jobs of ``keys`` (in the order the tests will wait for them) to two spawned workers, each key once;
    the futures by key. Under xdist: one spawned worker, and nothing submitted before a test asks for its job."""
    lazy = under_xdist()
    if "futures" not in _POOL:
        ex = concurrent.futures.ProcessPoolExecutor(1 if lazy else WORKERS, mp_context=multiprocessing.get_context("spawn"))
        _POOL.update(executor=ex, futures=_OnDemand() if lazy else {})
    futures = _POOL["futures"]
    for k in [] if lazy else keys:
        if k not in futures:
            futures[k] = _POOL["executor"].submit(_timed, *k)
    return futures


def _timed(kind: str, *args: Any) -> dict[str, Any]:
    """In the worker: the job, with the CPU seconds it took (``cpu_seconds``; the suite's summary adds them up)."""
    run = {"correct": jobs.correct, "bug": jobs.bug, "learns": jobs.learns, "steps": jobs.steps}[kind]
    t0 = time.process_time()
    out = run(*args)
    return {**out, "cpu_seconds": time.process_time() - t0}


def stop() -> None:
    """Cancel what has not started and wait for the workers to end (nothing the gate starts outlives the run); the
    CPU seconds of the jobs that finished stay for :func:`cost_lines`."""
    ex = _POOL.pop("executor", None)
    futures = _POOL.pop("futures", None) or {}
    if ex is not None:
        ex.shutdown(wait=True, cancel_futures=True)
    _POOL["cpu"] = {k: f.result().get("cpu_seconds", 0.0) for k, f in futures.items()
                    if f.done() and not f.cancelled() and f.exception() is None}


def plain_cpu() -> list[list]:
    """What the finished jobs cost, as plain values (a pytest-xdist worker sends them to the controller):
    ``[[kind, name, ...], cpu_seconds]`` per job (after :func:`stop`)."""
    return [[list(k), v] for k, v in (_POOL.get("cpu") or {}).items()]


def cost_lines(rows: list[list]) -> list[str]:
    """What the gate's workers spent (``rows`` from :func:`plain_cpu`, of one process or of every xdist worker), per
    kind of job, and its five costliest jobs."""
    cpu = {tuple(k): v for k, v in rows}
    if not cpu:
        return []
    kinds: dict[str, list[float]] = {}
    for k, v in cpu.items():
        kinds.setdefault(k[0], []).append(v)
    lines = [f"gate workers: {sum(cpu.values()):.0f} CPU s over {len(cpu)} jobs; "
             + ", ".join(f"{k} {sum(v):.0f} s ({len(v)})" for k, v in sorted(kinds.items()))]
    top = sorted(cpu.items(), key=lambda kv: -kv[1])[:5]
    return lines + ["  costliest: " + ", ".join(f"{'/'.join(map(str, k))} {v:.1f} s" for k, v in top)]
