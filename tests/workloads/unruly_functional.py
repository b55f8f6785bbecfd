"""A functional workload (it runs in every backend, vectorized included) that calls sys.exit."""

import sys

import torch

import firstdiv
from firstdiv.lab.functional import Functional, vectorizable


def _line(params, x):
    return x @ params[0] + params[1]


def _exits_in_apply(params, x):
    sys.exit(5)


@firstdiv.workload(defaults={"exit_in": "none", "epochs": 2})
@vectorizable
def stacked(config):
    """A functional workload (every backend, vectorized included) that calls sys.exit while building
    its spec (``exit_in=spec``) or inside training (``exit_in=apply``)."""
    if config["exit_in"] == "spec":
        sys.exit(4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.randn(3, 2, generator=g)
    return Functional(data=(x[:48], y[:48], x[48:], y[48:]),
                      init=lambda gen: [torch.randn(3, 2, generator=gen), torch.zeros(2)],
                      apply=_exits_in_apply if config["exit_in"] == "apply" else _line,
                      loss="mse", optimizer="sgd", epochs=config["epochs"], batch_size=16, lr=0.05)
