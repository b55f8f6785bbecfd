"""Workloads with known structure for the lab's experiments (bisection, determinism)."""

import os

import numpy as np
import torch

import firstdiv


@firstdiv.workload(defaults={"a": 0, "b": 0, "c": 0, "d": 0, "noise": 0.01})
def interact(seed, config, rec):
    """val_loss rises by 0.5 only when a and b are both on; c and d do nothing."""
    rng = np.random.default_rng(seed)
    value = 1.0 + 0.5 * (config["a"] and config["b"]) + config["noise"] * rng.standard_normal()
    rec.log(val_loss=value)


@firstdiv.workload(defaults={"epochs": 4, "unseeded": False, "thread_sensitive": False})
def jitter(seed, config, rec):
    """Deterministic unless asked: `unseeded` draws from the OS; `thread_sensitive` reads the thread count."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, generator=g)
    for epoch in range(config["epochs"]):
        value = float(w.sum()) + epoch
        if config["unseeded"] and epoch >= 2:
            value += int.from_bytes(os.urandom(2), "little") * 1e-9
        if config["thread_sensitive"] and epoch >= 1:
            value += 1e-7 * torch.get_num_threads()
        rec.log(val_loss=value)
    rec.state(w)
