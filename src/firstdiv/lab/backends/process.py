"""A pool of worker processes; each worker runs whole seeds at the sweep's thread count."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from typing import Any

from ..record import RunRecord
from ..runner import run_seed
from ..workload import Workload, resolve
from . import Done, crashed


def run(workload: Workload, seeds: list[int], ident: dict[str, Any], *, workers: int | None, done: Done,
        options: dict[str, Any]) -> None:
    if len(seeds) <= 1:
        for seed in seeds:
            done(run_seed(workload, seed, ident))
        return
    n = min(workers or os.cpu_count() or 1, len(seeds))
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker,
                                initargs=(int(ident["env"]["threads"]),)) as pool:
        futures = {pool.submit(_run_in_worker, workload.target, seed, ident): seed for seed in seeds}
        for fut in cf.as_completed(futures):
            try:
                rec = fut.result()
            except Exception as exc:  # the worker died: record the seed as failed, keep going
                rec = crashed(workload, futures[fut], ident, f"worker crashed: {type(exc).__name__}: {exc}")
            done(rec)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _run_in_worker(target: str, seed: int, ident: dict[str, Any]) -> RunRecord:
    return run_seed(resolve(target), seed, ident)
