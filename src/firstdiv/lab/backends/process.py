"""Worker processes on this machine; each runs whole seeds, one at a time, at the sweep's thread count.

The workers are :mod:`._pool`'s: started once per sweep (forked from a fork server that has torch and the
runner already imported, where the platform has one), each handed its next seed as soon as it reports the
last. A worker that dies costs only the seed it held; on Ctrl-C the parent stops them and re-raises, every
finished run already recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..identity import RunIdentity
from ..record import RunRecord
from ..workload import Workload
from . import Done, cpus
from ._pool import run_jobs, warm

__all__ = ["run", "seed_trainer", "warm"]


def run(workload: Workload, seeds: list[int], ident: RunIdentity, *, workers: int | None, done: Done,
        options: dict[str, Any]) -> None:
    threads = ident.threads
    run_jobs(workload, [(seed,) for seed in seeds], ident, workers=workers or max(1, cpus() // threads), done=done,
             trainer=seed_trainer)


def seed_trainer(workload: Workload, ident: RunIdentity) -> Callable[[list[int]], list[RunRecord]]:
    """What a worker runs for each job: the one seed, exactly as the serial backend runs it."""
    from ..runner import run_seed

    return lambda seeds: [run_seed(workload, seeds[0], ident)]
