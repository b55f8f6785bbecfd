"""Small workloads for the tests: fast, deterministic, with knobs for failure and slowness."""

import time

import numpy as np
import torch

import firstdiv


@firstdiv.workload(defaults={"shift": 0.0, "noise": 0.05, "sleep": 0.0, "fail_seed": -1, "epochs": 3,
                             "eval_split": "val"},
                   eval_keys=("eval_split",))
def train(seed, config, rec):
    """A 'loss' that is 1 + shift + seed noise, drawn from the seed's own generator."""
    rng = np.random.default_rng(seed)
    rec.data_identity("tiny-v1")
    rec.eval_contract(indices=range(100), split=config["eval_split"], reduction="mean", mode="eval")
    if seed == config["fail_seed"]:
        raise RuntimeError(f"seed {seed} exploded")
    base = 1.0 + config["shift"] + config["noise"] * rng.standard_normal()
    for epoch in range(config["epochs"]):
        time.sleep(config["sleep"])
        rec.log(train_loss=base + 0.1 / (epoch + 1), val_loss=base + 0.1 / (epoch + 1),
                val_acc=0.5 - 0.1 * config["shift"])
    rec.examples(100 * config["epochs"])


def free(seed, config, rec):
    """No declared defaults: --set values are parsed as JSON."""
    torch.manual_seed(seed)
    value = float(torch.rand(()).item()) + float(config.get("offset", 0.0))
    rec.log(val_loss=value)
    return {"score": value}
