"""Workloads that misbehave the way real ones do in worker processes: they kill the interpreter,
or wait for the driver, to test the parallel backends."""

import os
import time
from pathlib import Path

import numpy as np

import firstdiv


@firstdiv.workload(defaults={"crash_seed": -1, "exit_code": 3, "attempts": "", "sleep": 0.0, "epochs": 2})
def train(seed, config, rec):
    """Like tiny.train, but ``crash_seed`` ends its whole process with os._exit (no exception, no
    cleanup), after adding a line to the file ``attempts`` (when given) to count how often it ran."""
    if seed == config["crash_seed"]:
        if config["attempts"]:
            with open(config["attempts"], "a") as fh:
                fh.write(f"seed {seed} pid {os.getpid()}\n")
        os._exit(config["exit_code"])
    rng = np.random.default_rng(seed)
    rec.eval_contract(indices=range(10), reduction="mean", mode="eval")
    base = 1.0 + 0.05 * rng.standard_normal()
    for epoch in range(config["epochs"]):
        time.sleep(config["sleep"])
        rec.log(val_loss=base + 0.1 / (epoch + 1))


@firstdiv.workload(defaults={"gate": "", "gated_seed": 1, "patience": 60.0})
def gated(seed, config, rec):
    """``gated_seed`` finishes only once the file ``gate`` exists: a backend that reports records only
    at the end of the sweep (instead of as runs finish) never creates it and the seed fails."""
    deadline = time.monotonic() + config["patience"]
    if seed == config["gated_seed"]:
        while not Path(config["gate"]).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"seed {seed}: no record of the other seeds reached the driver in time")
            time.sleep(0.02)
    rec.log(val_loss=float(seed))
