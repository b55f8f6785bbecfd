"""A pool of worker processes on this machine, shared by the process backend (a job is one seed) and the
vectorized backend (a job is a stack of seeds trained at once); each worker runs one job at a time at the
sweep's thread count, with the trainer the backend passes in (:func:`run_jobs`).

Workers start once per sweep and stay busy: each is handed its next job as soon as it reports the
last, so start-up (importing torch) is paid once per worker, not once per seed.
Where the platform has a fork server, workers are forked from one that has torch and the runner
already imported (started once per Python process and reused by later sweeps); elsewhere they are
spawned.

A worker that dies (``os._exit``, a segfault, the OOM killer) costs only the job it held: its seeds
are recorded as failed with the exit code or signal, a fresh worker takes its place and the sweep
goes on. Workers ignore SIGINT; on Ctrl-C the parent stops them and re-raises, every finished run
already recorded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from ..._format import describe_error
from ...errors import WorkloadError
from ..identity import RunIdentity
from ..record import RunRecord
from ..workload import Workload
from . import Done, crashed, load, portable

#: What the fork server imports once, so that a forked worker starts in milliseconds. As with
#: spawn, each worker still imports the user's script (``__main__``) again: keep its heavy imports
#: inside ``if __name__ == "__main__":``.
PRELOAD = ["torch", "numpy", "firstdiv.lab.runner", "firstdiv.lab.builtin_mlp", "firstdiv.lab.backends._pool",
           "firstdiv.lab.backends.vectorized", "firstdiv.lab.backends.process"]
#: Also preloaded unless the sweep is of a built-in workload: torch._dynamo, which the first
#: torch.optim step of a run imports (0.8 s, in every fresh worker). Built-in workloads never need
#: it, and on the command line the fork server's start is on the critical path.
OPTIM_PRELOAD = ["torch._dynamo", "torch.optim"]
_STOP_SECONDS = 5.0
_START_ATTEMPTS = 3  # consecutive workers dying before they load the workload: the sweep cannot run


#: A job: the seeds one worker trains before it reports, one seed or one stack.
Job = tuple[int, ...]
#: What a worker builds once from the workload and the sweep's identity, then calls with each job's seeds. It
#: is sent to the worker pickled by reference, so it must be a module-level function.
Trainer = Callable[[Workload, RunIdentity], Callable[[list[int]], list[RunRecord]]]


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    job: Job | None = None
    ready: bool = False  # it loaded the workload: a death from now on is the job's doing


def run_jobs(workload: Workload, jobs: list[Job], ident: RunIdentity, *, workers: int, done: Done,
             trainer: Trainer) -> None:
    """Train ``jobs`` on up to ``workers`` processes, passing each record to ``done`` as its job ends.

    ``trainer(workload, ident)`` is built once in each worker and called with each job's seeds: the process
    backend's runs one seed as the serial backend would, the vectorized backend's trains one stack at once.
    """
    threads = ident.threads
    pool = _Pool(workload, ident, threads, trainer)
    queue = deque(jobs)
    try:
        for _ in range(min(workers, len(jobs))):
            pool.give(pool.start(), queue)
        while pool.busy():
            for worker, outcome in pool.outcomes():
                if isinstance(outcome, list):
                    for record in outcome:
                        done(record)
                elif worker.ready:  # it died holding this job: the job's failure, not the sweep's
                    for seed in worker.job or ():
                        done(crashed(workload, seed, ident, _died(worker.job or (), outcome)))
                else:  # it died before it could load the workload: the job goes back in the queue
                    pool.failed_start(outcome, worker.job, queue)
                worker.job = None
                if worker.proc.is_alive():
                    pool.give(worker, queue)
                else:  # a fresh worker takes the remaining jobs
                    pool.drop(worker)
                    if queue:
                        pool.give(pool.start(), queue)
    finally:
        pool.close()


def _died(job: Job, how: str) -> str:
    held = f"seed {job[0]}" if len(job) == 1 else f"the stack of seeds {', '.join(map(str, job))}"
    alone = "that seed" if len(job) == 1 else "one of them"
    return (f"worker process died while running {held} ({how}): the workload ended its interpreter (os._exit, "
            f"a segfault or out of memory); rerun {alone} alone with --backend serial to see where")


def warm(options: dict[str, Any], workers: int | None = None, target: str | None = None) -> None:
    """Start the fork server now, so that it imports torch while the sweep imports the workload."""
    if context(target).get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def context(target: str | None = None) -> Any:
    """A fork server with torch preloaded where there is one (Linux, macOS), else spawn. ``target``:
    the sweep's workload, which decides whether torch.optim's imports are preloaded too."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        builtin = target is not None and target.startswith("builtin:")
        ctx.set_forkserver_preload(PRELOAD if builtin else PRELOAD + OPTIM_PRELOAD)  # read when the server starts
        return ctx
    return mp.get_context("spawn")


class _Pool:
    """Workers, each holding at most one job; a dead worker is noticed by its sentinel or a closed pipe."""

    def __init__(self, workload: Workload, ident: RunIdentity, threads: int, trainer: Trainer) -> None:
        self.ctx = context(workload.target)
        self.target = workload.target
        self.args = (workload.target, portable(workload), ident, threads, dict(os.environ), trainer)
        self.workers: list[_Worker] = []
        self.retired: list[_Worker] = []
        self.start_failures = 0

    def start(self) -> _Worker:
        mine, theirs = self.ctx.Pipe()
        proc = self.ctx.Process(target=_serve, args=(theirs, *self.args), daemon=True, name="firstdiv-worker")
        proc.start()
        theirs.close()
        worker = _Worker(proc, mine)
        self.workers.append(worker)
        return worker

    def give(self, worker: _Worker, queue: deque[Job]) -> None:
        """Hand ``worker`` its next job, or tell it to exit when none is left."""
        worker.job = queue.popleft() if queue else None
        try:
            worker.conn.send(worker.job)
        except OSError:
            pass  # it died between two jobs; its sentinel reports it (with the job it now holds)
        if worker.job is None:  # it exits on its own; joined in close() so the others are not kept waiting
            self.workers.remove(worker)
            self.retired.append(worker)

    def busy(self) -> bool:
        return any(w.job is not None for w in self.workers)

    def outcomes(self) -> list[tuple[_Worker, list[RunRecord] | str]]:
        """Block until some busy worker reports: its job's records, or how it died ('exit code 3')."""
        busy = [w for w in self.workers if w.job is not None]
        ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy]))
        found: list[tuple[_Worker, list[RunRecord] | str]] = []
        for w in busy:
            try:
                records = None
                while records is None and w.conn.poll():  # a closed pipe polls True and raises EOFError
                    msg = w.conn.recv()
                    if isinstance(msg, list):
                        records = msg
                    else:
                        self._hello(w, msg)
                if records is not None:
                    found.append((w, records))
                elif w.proc.sentinel in ready:
                    raise EOFError
            except (EOFError, OSError):
                w.proc.join(_STOP_SECONDS)
                found.append((w, _death(w.proc.exitcode)))
        return found

    def _hello(self, worker: _Worker, msg: tuple[str, str | None]) -> None:
        _, error = msg
        if error is not None:
            raise WorkloadError(f"Worker processes cannot load {self.target} ({error}); it loads in this process, "
                                "so check what differs in a fresh interpreter, or use --backend serial")
        worker.ready = True
        self.start_failures = 0

    def failed_start(self, why: str, job: Job | None, queue: deque[Job]) -> None:
        if job is not None:
            queue.appendleft(job)
        self.start_failures += 1
        if self.start_failures >= _START_ATTEMPTS:
            raise WorkloadError(f"Worker processes die while starting, before any seed runs ({why}); "
                                "each worker imports your main script again: guard it with "
                                "`if __name__ == '__main__':`, or use --backend serial")

    def drop(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        self._kill(worker)

    def close(self) -> None:
        """Stop every worker still running (after an error or Ctrl-C: at once, without waiting for its seed)."""
        while self.workers:
            self.drop(self.workers[-1])
        for worker in self.retired:
            worker.proc.join(_STOP_SECONDS)
            self._kill(worker)
        self.retired.clear()

    @staticmethod
    def _kill(worker: _Worker) -> None:
        if worker.proc.is_alive():
            worker.proc.terminate()
            worker.proc.join(_STOP_SECONDS)
            if worker.proc.is_alive():
                worker.proc.kill()
                worker.proc.join()
        worker.conn.close()


def _death(code: int | None) -> str:
    """How a worker ended: 'exit code 3', 'killed by SIGSEGV'."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _serve(conn: Connection, target: str, located: str, ident: RunIdentity, threads: int,
           environ: dict[str, str], trainer: Trainer) -> None:
    """A worker's life: load the workload once, then train each job it is sent until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops us
    _die_with_parent()
    os.environ.clear()  # the fork server's environment is from when it started; the sweep's is now
    os.environ.update(environ)
    import torch

    torch.set_num_threads(threads)
    try:
        workload = load(target, located)
        train = trainer(workload, ident)
    except Exception as exc:  # noqa: BLE001 (any failure to load is reported, and stops the sweep)
        conn.send(("loaded", describe_error(exc, None)))
        return
    conn.send(("loaded", None))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if job is None:
            return
        conn.send(train(list(job)))


def _die_with_parent() -> None:
    """SIGTERM to this worker as soon as the sweep that started it dies (SIGKILL, the OOM killer): a thread waits on
    the sweep's sentinel (a pipe only the sweep holds open; a worker forked by the fork server is not the sweep's
    child, and keeps the fork server running). A command's worker kills the command's group on SIGTERM."""
    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="firstdiv-sweep-watch", daemon=True).start()
