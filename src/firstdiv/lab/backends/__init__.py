"""Sweep backends: how the seeds of one sweep are executed.

A backend is a function ``run(workload, seeds, ident, *, workers, done, options)`` that trains every
seed in ``seeds`` and calls ``done(record)`` once per seed, in the order runs finish, from the
calling thread (the store is written there). A seed's record must not depend on the backend that
ran it nor on which other seeds shared its batch: that is what makes every comparison safe.
A workload failure is a failed record, never an exception; an interrupt (KeyboardInterrupt) stops
the sweep with every finished run already passed to ``done``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol

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
}


def get(name: str) -> Backend:
    if name not in BACKENDS:
        raise InvalidArgument(f"Unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def crashed(workload: Workload, seed: int, ident: dict[str, Any], error: str) -> RunRecord:
    """The record of a seed whose worker died before it could report."""
    from ..record import Recorder, build_record

    return build_record(Recorder(seed, ident["config"]), workload=workload.target, identity=ident, wall=0.0,
                        status="failed", error=error)
