"""Sweep backends: how the seeds of one sweep are executed.

A backend is a function ``run(workload, seeds, ident, *, workers, done, options)`` (``ident``: the sweep's
:class:`~firstdiv.lab.identity.RunIdentity`) that trains every
seed in ``seeds`` and calls ``done(record)`` once per seed, in the order runs finish, from the
calling thread (the store is written there). A seed's record must not depend on the backend that
ran it nor on which other seeds shared its batch: that is what makes every comparison safe.
A workload failure is a failed record, never an exception; an interrupt (KeyboardInterrupt) stops
the sweep with every finished run already passed to ``done``. A backend module may also define
``warm(options, workers, target)``, called before the workload is imported, to start slow machinery early,
and ``check(workload, options)``. :func:`get` looks a backend up once and returns the three as a :class:`Backend`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import InvalidArgument
from ..identity import RunIdentity
from ..record import RunRecord
from ..workload import Workload

Done = Callable[[RunRecord], None]


class Run(Protocol):
    def __call__(self, workload: Workload, seeds: list[int], ident: RunIdentity, *, workers: int | None,
                 done: Done, options: dict[str, Any]) -> None: ...


def _no_check(workload: Workload, options: dict[str, Any]) -> None:
    return None


def _no_warm(options: dict[str, Any], workers: int | None = None, target: str | None = None) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """One backend, looked up once per sweep: ``run`` trains the seeds; ``check(workload, options)`` refuses a
    workload it cannot run (InvalidArgument) before the store is opened; ``warm(options, workers, target)``
    starts slow machinery early (the process backend's fork server imports torch while the sweep imports the
    workload ``target``). Both are no-ops where the backend module does not define them."""

    name: str
    run: Run
    check: Callable[[Workload, dict[str, Any]], Any] = _no_check
    warm: Callable[..., None] = _no_warm


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
    """Backend ``name`` with its module's ``run``, ``check`` and ``warm`` (imported now, once)."""
    if name not in BACKENDS:
        raise InvalidArgument(f"Unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module_name, _, attr = BACKENDS[name].partition(":")
    module = importlib.import_module(module_name)
    return Backend(name, getattr(module, attr), getattr(module, "check", _no_check), getattr(module, "warm", _no_warm))


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


def crashed(workload: Workload, seed: int, ident: RunIdentity, error: str) -> RunRecord:
    """The record of a seed whose worker died before it could report."""
    from ..record import Recorder, build_record

    return build_record(Recorder(seed, ident.config), workload=workload.target, identity=ident, wall=0.0,
                        status="failed", error=error)
