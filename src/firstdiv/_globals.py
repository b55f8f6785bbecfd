"""Process-wide state that firstdiv may touch and must give back: the global RNGs and thread count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


@contextmanager
def preserved_globals(*, seed: int | None = None, threads: int | None = None) -> Iterator[None]:
    """Restore torch's, numpy's legacy and Python's global RNG states and torch's intra-op thread
    count on exit, also when the body raises. Inside, optionally seed all three RNGs from ``seed``
    and run at ``threads`` threads."""
    import torch

    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate(), torch.get_num_threads())
    try:
        if seed is not None:
            torch.manual_seed(seed)
            np.random.seed(seed % (1 << 32))
            random.seed(seed)
        if threads is not None:
            torch.set_num_threads(int(threads))
        yield
    finally:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])
        torch.set_num_threads(saved[3])
