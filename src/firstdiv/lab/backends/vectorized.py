"""Many seeds of a functional workload trained at once, as one stack of parameters.

The workload must describe itself functionally (:mod:`firstdiv.lab.functional`): then the serial
backend trains each seed as a stack of one and this backend trains stacks of many through the same
loop, so a seed's record is the same whichever backend ran it and whichever seeds shared its stack.

``backend_options``: ``chunk``, the most seeds in one stack (default: as many as fit in
:data:`MEMORY_BUDGET` of working memory, estimated from the model and data, at most
:data:`MAX_CHUNK`). Each stack's records reach ``done`` as soon as it finishes.

``workers`` (default 1): with one, the stacks run one after another in this process at the sweep's
thread count, and the caller's thread count and global RNG states are restored afterwards. With N,
the seeds are split into stacks of balanced size (at most ``chunk``, a multiple of N of them) that
N worker processes of the pool (:mod:`._pool`, shared with the process backend) train side by side, each at the sweep's thread count and
holding one stack at a time. Workers pay a start-up (a fork server importing torch, once per Python
process, then building the data once per worker), so they pay off for large sweeps or when the fork
server is already running; a worker that dies fails only the seeds of the stack it held.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..._globals import preserved_globals
from ...errors import InvalidArgument
from .. import functional
from ..identity import RunIdentity
from ..record import Recorder, RunRecord, build_record, timer
from ..runner import describe
from ..workload import Workload
from . import Done

#: Working memory one stack may use, in bytes (parameters, optimizer state, draws, activations).
MEMORY_BUDGET = 256 * 2**20
#: The most seeds in one stack by default: beyond this a bigger stack buys little speed.
MAX_CHUNK = 256
OPTIONS = ("chunk",)


def run(workload: Workload, seeds: list[int], ident: RunIdentity, *, workers: int | None, done: Done,
        options: dict[str, Any]) -> None:
    spec, chunk = check(workload, options)
    with isolated(ident.threads):
        start = timer()
        try:
            fs = functional.build(spec, ident.config)
            size = chunk or default_chunk(fs)  # runs init and one forward: fails where training would
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 (a broken spec, or sys.exit() in it, fails every seed)
            for seed in seeds:
                done(_record(Recorder(seed, ident.config), workload, ident, 0.0, describe(exc), len(seeds), 0))
            return
        stacks = split(seeds, size, workers or 1)
        if workers is not None and workers > 1 and len(stacks) > 1:
            from . import _pool

            _pool.run_jobs(workload, stacks, ident, workers=workers, done=done, trainer=stack_trainer)
            return
        setup = (timer() - start) / len(seeds)  # building the data once serves every seed
        for part in stacks:
            for rec in train_chunk(workload, fs, list(part), ident, size, setup):
                done(rec)


def warm(options: dict[str, Any], workers: int | None = None, target: str | None = None) -> None:
    """With worker processes, start the pool's fork server while the sweep imports the workload."""
    if workers is not None and workers > 1:
        from . import _pool

        _pool.warm(options, workers, target)


def split(seeds: list[int], size: int, workers: int) -> list[tuple[int, ...]]:
    """The stacks of a sweep: runs of at most ``size`` seeds; for several workers, a multiple of
    ``workers`` stacks of balanced size, so that every worker gets the same share."""
    if workers <= 1:
        return [tuple(seeds[i : i + size]) for i in range(0, len(seeds), size)]
    count = min(len(seeds), workers * math.ceil(math.ceil(len(seeds) / size) / workers))
    return [tuple(int(s) for s in part) for part in np.array_split(np.asarray(seeds, dtype=np.int64), count)]


def stack_trainer(workload: Workload, ident: RunIdentity) -> Callable[[list[int]], list[RunRecord]]:
    """What a worker process runs for each stack it is handed: the functional built once, then
    :func:`train_chunk` per stack (the first stack's seeds share the build time)."""
    spec = require_functional(workload)
    start = timer()
    fs = functional.build(spec, ident.config)
    setup = timer() - start

    def train(seeds: list[int]) -> list[RunRecord]:
        nonlocal setup
        with isolated(ident.threads):
            records = train_chunk(workload, fs, seeds, ident, len(seeds), setup / len(seeds), workers=True)
        setup = 0.0
        return records

    return train


def check(workload: Workload, options: dict[str, Any]) -> tuple[functional.SpecFn, int | None]:
    """Usage errors, found before anything trains: a workload that cannot be stacked, a bad option."""
    return require_functional(workload), chunk_option(options)


def require_functional(workload: Workload) -> functional.SpecFn:
    spec = functional.spec_of(workload.fn)
    if spec is None:
        raise InvalidArgument(
            f"{workload.target} is a plain train(seed, config, rec) function, which the vectorized backend cannot "
            "stack across seeds; describe it with @firstdiv.lab.functional.vectorizable (a function config -> "
            "Functional(data, init, apply, ...)) or use --backend serial or process")
    return spec


def chunk_option(options: dict[str, Any]) -> int | None:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidArgument(f"Unknown option {', '.join(map(repr, unknown))} for the vectorized backend; "
                              f"it takes only {', '.join(OPTIONS)} (seeds per stack)")
    chunk = options.get("chunk")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise InvalidArgument(f"Expected backend option `chunk` to be an integer >= 1 but got {chunk!r}")
    return chunk


def isolated(threads: int) -> Any:
    """Run at ``threads`` intra-op threads; restore the caller's thread count and global RNG states."""
    return preserved_globals(threads=threads)


def train_chunk(workload: Workload, fs: functional.Functional, seeds: list[int], ident: RunIdentity,
                size: int, setup: float = 0.0, workers: bool = False) -> list[RunRecord]:
    """Train ``seeds`` as one stack; each record gets an equal share of the stack's wall time."""
    recs = [Recorder(seed, ident.config) for seed in seeds]
    start = timer()
    error = None
    try:
        functional.train_stack(fs, seeds, recs)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 (the stack failed, also by sys.exit(): each seed in it failed)
        error = describe(exc)
    wall = timer() - start
    return [_record(rec, workload, ident, setup + wall / len(seeds), error, len(seeds), wall, size, workers)
            for rec in recs]


def _record(rec: Recorder, workload: Workload, ident: RunIdentity, wall: float, error: str | None,
            batch: int, batch_seconds: float, chunk: int | None = None, workers: bool = False) -> RunRecord:
    out = build_record(rec, workload=workload.target, identity=ident, wall=wall,
                       status="failed" if error else "ok", error=error)
    extra = {"backend": "vectorized", "batch_seeds": batch, "batch_seconds": batch_seconds, "chunk": chunk,
             "where": "worker process" if workers else "sweep process",
             "time_share": "each seed is charged 1/batch_seeds of the stack's time"}
    return replace(out, extra={**out.extra, **extra})


def default_chunk(fs: functional.Functional, budget: int = MEMORY_BUDGET) -> int:
    """How many seeds fit in ``budget`` bytes, from one seed's measured footprint, within [1, MAX_CHUNK]."""
    return max(1, min(MAX_CHUNK, budget // max(1, seed_bytes(fs))))


def seed_bytes(fs: functional.Functional) -> int:
    """Estimated working memory of one seed in a stack: parameters with gradients and optimizer state,
    one epoch's order and draws, and the activations of a training step and of an evaluation."""
    gens = functional.generators(0)
    stack = functional.Stack(fs, [gens])
    param_bytes = stack.flat.numel() * stack.flat.element_size()
    n, n_val, bs = fs.data[0].shape[0], fs.data[2].shape[0], min(fs.batch_size, fs.data[0].shape[0])
    draws = fs.draws(gens["dropout"], bs) if fs.draws is not None else None
    draw_bytes = 0 if draws is None else draws.numel() * draws.element_size() * n // bs
    per_example = _activation_bytes(fs, stack.views(), draws) / bs
    return int(5 * param_bytes + 8 * n + 2 * draw_bytes + per_example * (2 * bs + n_val))


def _activation_bytes(fs: functional.Functional, params: list[torch.Tensor], draws: torch.Tensor | None) -> int:
    """Bytes autograd keeps for one seed's forward on one batch (what backward will read), plus the output."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[id(t)] = t.numel() * t.element_size()
        return t

    bs = min(fs.batch_size, fs.data[0].shape[0])
    x = fs.data[0][:bs].to(fs.device).unsqueeze(0)
    r = None if draws is None else draws.to(fs.device).unsqueeze(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = functional.forward(fs, params, x, r)
    return sum(saved.values()) + out.numel() * out.element_size()
