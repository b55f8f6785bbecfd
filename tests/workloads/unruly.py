"""Workloads that go wrong the ways the run tests need: runs that diverge to NaN/inf, a workload that
calls sys.exit, validate hooks that raise, and keys that legitimately take infinity."""

import math
import sys

import firstdiv


@firstdiv.workload(defaults={"diverge_seeds": [0], "diverge_epoch": 1, "value": "nan", "epochs": 3, "shift": 0.0,
                             "eval_split": "val"}, eval_keys=("eval_split",))
def diverge(seed, config, rec):
    """val_loss = 1 + shift + seed noise; on ``diverge_seeds`` it becomes ``value`` (nan, inf or -inf)
    from epoch ``diverge_epoch`` on, as a blown-up training run's loss does."""
    rec.eval_contract(indices=range(10), split=config["eval_split"], reduction="mean", mode="eval")
    base = 1.0 + config["shift"] + 0.01 * ((seed * 7919) % 13)
    for epoch in range(config["epochs"]):
        bad = seed in config["diverge_seeds"] and epoch >= config["diverge_epoch"]
        loss = float(config["value"]) if bad else base + 0.1 / (epoch + 1)
        rec.log(val_loss=loss, val_acc=0.5)


@firstdiv.workload(defaults={"exit_seed": 1, "code": 3, "epochs": 2})
def exits(seed, config, rec):
    """Calls sys.exit(code) on ``exit_seed``; other seeds log a finite loss."""
    if seed == config["exit_seed"]:
        sys.exit(config["code"])
    for epoch in range(config["epochs"]):
        rec.log(val_loss=1.0 + 0.01 * seed + 0.1 / (epoch + 1))


def _typed_check(config):
    if config["limit"] > 0:  # a string limit makes this comparison raise TypeError
        pass


@firstdiv.workload(defaults={"limit": None}, validate=_typed_check)
def picky(seed, config, rec):
    rec.log(val_loss=1.0 + 0.01 * seed)


@firstdiv.workload(defaults={"max_grad_norm": math.inf, "scale": 1.0, "lr": 0.1}, nonfinite=("scale",))
def clipped(seed, config, rec):
    """max_grad_norm defaults to inf (no clipping), and ``scale`` is declared to accept inf."""
    rec.log(val_loss=1.0 + 0.01 * seed + (0.0 if math.isfinite(config["scale"]) else 1.0))


@firstdiv.workload(defaults={"epochs": 1})
def interrupted(seed, config, rec):
    """Ctrl-C arriving while seed 1 trains."""
    if seed == 1:
        raise KeyboardInterrupt
    rec.log(val_loss=1.0)
