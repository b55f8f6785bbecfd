"""One seed after another, in this process."""

from __future__ import annotations

from typing import Any

from ..identity import RunIdentity
from ..runner import run_seed
from ..workload import Workload
from . import Done


def run(workload: Workload, seeds: list[int], ident: RunIdentity, *, workers: int | None, done: Done,
        options: dict[str, Any]) -> None:
    for seed in seeds:
        done(run_seed(workload, seed, ident))
