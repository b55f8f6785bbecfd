"""Seeds as Ray tasks, on a cluster (``--address``) or on a Ray started here for the sweep.

One task per seed, reserving as many CPUs as the sweep's thread count (one at the default), so Ray
never packs more threads on a node than it has CPUs. The driver (this process) writes each record
to the store as its task finishes. A task whose worker dies (``os._exit``, a segfault, a lost node)
is retried once by Ray, then recorded as a failed run with Ray's error; a workload that raises is
already a failed record and is not retried.

Without ``--address`` a local Ray is started with ``workers`` x threads CPUs (default: this
machine's) and shut down afterwards; a Ray the caller already initialised is used and left running.
On a multi-machine cluster the workload's file or module must be importable on every node (the same
path, or a ``runtime_env`` given to ``ray.init`` before calling ``sweep``).

A command sweep (``firstdiv sweep --backend ray -- python train.py --seed {seed}``) runs each seed's command on a
Ray worker, exactly as the process backend runs it (:mod:`firstdiv.lab._command_run`). On a Ray started here
the command runs in the sweep's directory with the sweep's environment. With ``--address`` the sweep's directory
travels with the job (Ray's ``runtime_env={"working_dir": ...}``, which leaves out what ``.gitignore`` and
``.rayignore`` list, up to Ray's upload limit) and the command runs in each worker's copy, with the worker's
environment, its arguments that are paths into the directory pointed into the copy. A Ray the caller initialised
is used as it is: with a ``working_dir`` in its runtime_env the command runs in the worker's copy of that, else
in the sweep's directory. On Ctrl-C each running task is interrupted first, so it kills its command's process
group, then cancelled for good.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from collections import deque
from dataclasses import replace
from typing import Any

from ..._format import first_line
from ...errors import InvalidArgument
from ..identity import RunIdentity
from ..record import RunRecord
from ..workload import Workload
from . import Done, cpus, crashed, portable

INSTALL_HINT = "pip install 'firstdiv[ray]'"


def ray_module() -> Any:
    """Import ray, or fail with the install line (an optional extra: never imported unless asked for)."""
    try:
        import ray
    except ImportError:
        raise InvalidArgument(f"--backend ray needs Ray, which is not installed here; install it with: {INSTALL_HINT}") from None
    return ray


def warm(options: dict[str, Any], workers: int | None = None, target: str | None = None) -> None:
    """Called before the store is opened: a missing Ray is a usage error that writes nothing."""
    ray_module()


#: Seconds to wait for a cluster's port to answer. Ray's own connect retries for minutes.
CONNECT_TIMEOUT_S = 5.0


def check(workload: Workload, options: dict[str, Any]) -> None:
    """Before the store is opened: an --address nobody answers on is a usage error that writes nothing."""
    address = options.get("address")
    if address:
        probe(str(address))


def probe(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to a Ray address: ray://HOST[:PORT] (client, default port
    10001) or HOST[:PORT] (the cluster's GCS, default 6379). 'auto' and 'local' are Ray's own lookups."""
    if address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    where = address[len("ray://"):] if client else address
    host, port = _host_port(where.split("/", 1)[0], 10001 if client else 6379, address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise InvalidArgument(f"Cannot reach the Ray cluster at {address!r} ({host}:{port}: {why} within "
                              f"{timeout:g} s); check the address (ray://HOST:10001 or HOST:6379) and that the "
                              "cluster is up, or omit --address to start a local Ray") from None


def _host_port(where: str, default: int, address: str) -> tuple[str, int]:
    if where.startswith("["):  # [IPv6]:port
        host, _, rest = where[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = where.rpartition(":") if ":" in where else (where, "", "")
    try:
        port = int(port_text) if port_text else default
        if not (host and 0 < port < 65536):
            raise ValueError
    except ValueError:
        raise InvalidArgument(f"Expected --address like ray://HOST:10001 or HOST:6379 but got {address!r}") from None
    return host, port


def run(workload: Workload, seeds: list[int], ident: RunIdentity, *, workers: int | None, done: Done,
        options: dict[str, Any]) -> None:
    from ..command import is_command

    ray = ray_module()
    threads = ident.threads
    shipped = workload.fn.cwd if is_command(workload) and options.get("address") else None
    started = _connect(ray, options.get("address"), workers, threads, shipped)
    try:
        _sweep(ray, workload, seeds, ident, threads, workers, done)
    finally:
        if started:
            ray.shutdown()


def _connect(ray: Any, address: str | None, workers: int | None, threads: int, working_dir: str | None) -> bool:
    """Make sure this process is a Ray driver; True when we started (or connected) it and must shut it down.
    ``working_dir``: the directory a command sweep ships to the cluster at ``address`` with its job."""
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "configure_logging": True}
    if address:
        # the run store (.firstdiv/, written while the runs go on) never travels
        shipping = {"runtime_env": {"working_dir": working_dir, "excludes": [".firstdiv"]}} if working_dir else {}
        try:
            ray.init(address=address, **quiet, **shipping)
        except (ConnectionError, ValueError, RuntimeError, ray.exceptions.RuntimeEnvSetupError) as exc:
            _too_large(exc, working_dir)  # the upload of the working directory fails as RuntimeEnvSetupError
            first = first_line(exc)
            raise InvalidArgument(f"Cannot connect to the Ray cluster at {address!r} ({first}); check the address "
                                  "(ray://HOST:10001 or HOST:6379) or omit --address to start a local Ray") from None
    else:
        ray.init(address="local", num_cpus=max(threads, (workers or 0) * threads or cpus()), **quiet)
    total = ray.cluster_resources().get("CPU", 0)
    if total < threads:
        ray.shutdown()
        raise InvalidArgument(f"Each seed needs {threads} CPUs (threads={threads}) but the Ray cluster has {total:g}; "
                              "lower --set threads or add CPUs to the cluster")
    return True


def _too_large(exc: BaseException, working_dir: str | None) -> None:
    """Ray refusing to upload a working directory over its size limit is a usage error naming the fix."""
    found = _TOO_LARGE.search(str(exc)) if working_dir else None
    if found is not None:
        if ray_module().is_initialized():
            ray_module().shutdown()
        raise InvalidArgument(f"The working directory {working_dir} is {found['size']} packed for Ray, over its "
                              f"{found['limit']} limit on a runtime_env working_dir; list what the runs do not need "
                              "(data, checkpoints, .venv) in a .rayignore there, or run the sweep from a smaller "
                              "directory") from None


def _sweep(ray: Any, workload: Workload, seeds: list[int], ident: RunIdentity, threads: int,
           workers: int | None, done: Done) -> None:
    """Keep at most ``workers`` tasks in flight (all of them when None); record each as it finishes."""
    from ..command import is_command

    command = is_command(workload)
    task = ray.remote(_command_seed if command else _train_seed).options(num_cpus=threads, max_retries=1,
                                                                          retry_exceptions=False)
    if command:  # the job's working directory (--address) is this sweep's directory, shipped
        shipped = bool(ray.get_runtime_context().runtime_env.get("working_dir"))
        args: tuple[Any, ...] = (workload.target, ident, workload.fn.cwd, shipped,
                                 None if shipped else dict(os.environ))
    else:
        args = (workload.target, portable(workload), ident, os.getcwd())
    queue, pending = deque(seeds), {}
    limit = workers or len(seeds)
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                seed = queue.popleft()
                pending[task.remote(seed, *args)] = seed
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                seed = pending.pop(ref)
                done(_outcome(ray, ref, workload, seed, ident))
    finally:
        _stop(ray, list(pending), gently=command)


_TOO_LARGE = re.compile(r"Package size \((?P<size>[^)]+)\) exceeds the maximum size of (?P<limit>[\d.]+ ?[KMG]iB)")
#: Seconds an interrupted command task has to kill its command's process group before it is cancelled by force
_CANCEL_GRACE_S = 8.0


def _stop(ray: Any, refs: list[Any], *, gently: bool) -> None:
    """Ctrl-C or an error in the driver: stop what is still running. A command task is interrupted first (it
    kills its command's process group, which a killed worker would leave running), then cancelled by force."""
    if gently and refs:
        for ref in refs:
            ray.cancel(ref, force=False)
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_GRACE_S)
    for ref in refs:
        ray.cancel(ref, force=True)


def _outcome(ray: Any, ref: Any, workload: Workload, seed: int, ident: RunIdentity) -> RunRecord:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        why = lines[0] if lines else ""
        return crashed(workload, seed, ident, f"Ray task for seed {seed} failed and was retried once: "
                                              f"{type(exc).__name__}: {why}")


def _train_seed(seed: int, target: str, located: str, ident: RunIdentity, cwd: str) -> RunRecord:
    """Runs in a Ray worker: load the workload (module targets relative to the driver's directory) and train."""
    from ..runner import run_seed
    from . import load

    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        workload = load(target, located)
    finally:
        if added:
            sys.path.remove(cwd)
    return run_seed(workload, seed, ident)


def _command_seed(seed: int, target: str, ident: RunIdentity, cwd: str, shipped: bool,
                  environ: dict[str, str] | None) -> RunRecord:
    """Runs in a Ray worker: the command of one seed, in ``cwd`` with the sweep's ``environ`` (a Ray started
    here), or in this worker's copy of the shipped directory (``shipped``) with the worker's own environment."""
    from ..runner import run_seed
    from ..workload import resolve

    workload = resolve(target)
    run = workload.fn
    if shipped:
        here = os.getcwd()
        run = replace(run, argv=tuple(_relocated(arg, cwd, here) for arg in run.argv), cwd=here)
    else:
        run = replace(run, cwd=cwd)
    saved = dict(os.environ)
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    try:
        return run_seed(replace(workload, fn=run), seed, ident)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _relocated(arg: str, old: str, new: str) -> str:
    """An argument naming a path inside the sweep's directory ``old``, pointed into its shipped copy ``new``."""
    if arg == old:
        return new
    return new + arg[len(old):] if arg.startswith(old.rstrip(os.sep) + os.sep) else arg
