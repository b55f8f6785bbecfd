"""Process-wide state that firstdiv may touch and must give back: the global RNGs and thread count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


def rng_state() -> dict[str, Any]:
    """The global RNG states: Python's ``random``, numpy's legacy global generator, torch's CPU generator and,
    when CUDA is initialised, every CUDA device's generator (reading them never initialises CUDA)."""
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Give back the RNG states :func:`rng_state` read (CUDA's only when they were read)."""
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


@contextmanager
def preserved_globals(*, seed: int | None = None, threads: int | None = None) -> Iterator[None]:
    """Restore the global RNG states (:func:`rng_state`: Python's, numpy's legacy, torch's CPU and CUDA) and
    torch's intra-op thread count on exit, also when the body raises. Inside, optionally seed the RNGs from
    ``seed`` (torch's seeds every CUDA device too) and run at ``threads`` threads."""
    import torch

    saved, saved_threads = rng_state(), torch.get_num_threads()
    try:
        if seed is not None:
            torch.manual_seed(seed)
            np.random.seed(seed % (1 << 32))
            random.seed(seed)
        if threads is not None:
            torch.set_num_threads(int(threads))
        yield
    finally:
        restore_rng(saved)
        torch.set_num_threads(saved_threads)
