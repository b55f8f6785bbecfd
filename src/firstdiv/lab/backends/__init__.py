"""Sweep backends: how the seeds of one sweep are executed.

A backend is a function ``run(workload, seeds, ident, *, workers, done, options)`` that trains every
seed in ``seeds`` and calls ``done(record)`` once per seed, in the order runs finish, from the
calling thread (the store is written there). A seed's record must not depend on the backend that
ran it nor on which other seeds shared its batch: that is what makes every comparison safe.
A workload failure is a failed record, never an exception; an interrupt (KeyboardInterrupt) stops
the sweep with every finished run already passed to ``done``. A backend module may also define
``warm(options, workers, target)``, called before the workload is imported, to start slow machinery early.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import InvalidArgument
from ..record import RunRecord
from ..workload import Workload

Done = Callable[[RunRecord], None]


class Backend(Protocol):
    def __call__(self, workload: Workload, seeds: list[int], ident: dict[str, Any], *, workers: int | None,
                 done: Done, options: dict[str, Any]) -> None: ...


#: name -> "module:function", imported on first use (ray and torch.func are not loaded otherwise)
BACKENDS = {
    "serial": "firstdiv.lab.backends.serial:run",
    "process": "firstdiv.lab.backends.process:run",
    "vectorized": "firstdiv.lab.backends.vectorized:run",
    "ray": "firstdiv.lab.backends.ray_backend:run",
}


#: The ``backend_options`` each backend reads, and the flag that sets each on the command line. An
#: option a backend does not read would do nothing there, so it is refused rather than ignored.
OPTIONS: dict[str, tuple[str, ...]] = {"serial": (), "process": (), "vectorized": ("chunk",), "ray": ("address",)}


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse an option that backend ``name`` would ignore, naming the backend it is for."""
    accepted = OPTIONS.get(name, ())
    for key in options:
        if key in accepted:
            continue
        owners = [backend for backend, keys in OPTIONS.items() if key in keys]
        if owners:
            raise InvalidArgument(f"--{key} applies only to --backend {' or '.join(owners)}, not {name}: drop it "
                                  f"or use --backend {owners[0]}")
        takes = ", ".join(accepted) if accepted else "no options"
        raise InvalidArgument(f"Unknown option {key!r} for the {name} backend; it takes {takes}")


def get(name: str) -> Backend:
    if name not in BACKENDS:
        raise InvalidArgument(f"Unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def check(name: str, workload: Workload, options: dict[str, Any]) -> None:
    """Let a backend refuse a workload it cannot run before the store is opened (nothing written);
    a backend module opts in with ``check(workload, options)``, raising InvalidArgument."""
    module = importlib.import_module(BACKENDS[name].partition(":")[0])
    refuse = getattr(module, "check", None)
    if refuse is not None:
        refuse(workload, options)


def warm(name: str, options: dict[str, Any], workers: int | None = None, target: str | None = None) -> None:
    """Let a backend start slow machinery early (the process backend's fork server imports torch
    while the sweep imports the workload ``target``); a backend module opts in with
    ``warm(options, workers, target)``."""
    module = importlib.import_module(BACKENDS[name].partition(":")[0])
    start = getattr(module, "warm", None)
    if start is not None:
        start(options, workers, target)


def cpus() -> int:
    """CPUs this process may run on (the affinity mask in a container, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def portable(workload: Workload) -> str:
    """The target another process can resolve from any working directory (file targets made absolute)."""
    where, _, name = workload.target.rpartition(":")
    return f"{workload.source}:{name}" if where.endswith(".py") else workload.target


def load(target: str, located: str) -> Workload:
    """Resolve ``located`` (from :func:`portable`) in a worker; its records keep the user's ``target``."""
    from dataclasses import replace

    from ..workload import resolve

    found = resolve(located)
    return found if found.target == target else replace(found, target=target)


def crashed(workload: Workload, seed: int, ident: dict[str, Any], error: str) -> RunRecord:
    """The record of a seed whose worker died before it could report."""
    from ..record import Recorder, build_record

    return build_record(Recorder(seed, ident["config"]), workload=workload.target, identity=ident, wall=0.0,
                        status="failed", error=error)
