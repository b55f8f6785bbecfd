"""A workload whose curves are drawn to order, for exact checks of the factorial and curves reports.

val_loss at epoch e is

    path(e) + level + noise * z0 + gap term

- path: piecewise linear from ``start`` (epoch 0) down to ``low`` at epoch ``min_at``, then to
  ``final`` at the last epoch: the minimum epoch and the final value are config keys;
- level = a * (1 + jitter * z1) + b * (1 + jitter * z2) + [a != 0 and b != 0] * ab * (1 + jitter * z3):
  two factors with per-seed effects and an interaction ``ab`` that exists only when both are on;
- gap term = gap * (1 + jitter * z4) on epochs gap_from <= e < gap_to (gap_to = -1: to the end);

where z0..z4 are standard normal draws of the seed's own generator. val_acc = 1 - val_loss / 4.
"""

import numpy as np

import firstdiv

DEFAULTS = {"epochs": 10, "start": 1.5, "low": 1.0, "min_at": 4, "final": 1.2, "a": 0.0, "b": 0.0, "ab": 0.0,
            "jitter": 0.0, "noise": 0.0625, "gap": 0.0, "gap_from": 0, "gap_to": -1}


def draws(seed):
    """z0..z4 of one seed (the tests rebuild expected values from these)."""
    return np.random.default_rng(seed).standard_normal(5)


def path(e, config):
    last, m = config["epochs"] - 1, config["min_at"]
    if e < m:
        return config["start"] + (config["low"] - config["start"]) * e / m
    return config["low"] + (config["final"] - config["low"]) * (e - m) / max(last - m, 1)


def level(z, config):
    j, a, b = config["jitter"], config["a"], config["b"]
    both = config["ab"] * (1 + j * z[3]) if a != 0 and b != 0 else 0.0
    return a * (1 + j * z[1]) + b * (1 + j * z[2]) + both


@firstdiv.workload(defaults=DEFAULTS)
def train(seed, config, rec):
    z = draws(seed)
    rec.data_identity("curvy-v1")
    rec.eval_contract(indices=range(100), reduction="mean", mode="eval")
    offset = level(z, config) + config["noise"] * z[0]
    gap = config["gap"] * (1 + config["jitter"] * z[4])
    for e in range(config["epochs"]):
        on = config["gap_from"] <= e and (config["gap_to"] < 0 or e < config["gap_to"])
        value = path(e, config) + offset + (gap if on else 0.0)
        rec.log(val_loss=value, val_acc=1 - value / 4)
    rec.examples(100 * config["epochs"])
