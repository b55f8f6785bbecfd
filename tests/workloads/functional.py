"""A user's workloads described functionally: they run in every backend, and --backend vectorized
trains many of their seeds at once."""

import functools

import torch

import firstdiv
from firstdiv.lab.functional import Functional, vectorizable


def _blobs(config):
    """Three noisy classes in 6 dimensions; a pure function of data_seed."""
    g = torch.Generator().manual_seed(config["data_seed"])
    n = config["n"]
    x = torch.randn(n, 6, generator=g)
    y = (x @ torch.randn(6, 3, generator=g)).argmax(1)
    flip = torch.rand(n, generator=g) < 0.2
    y = torch.where(flip, torch.randint(0, 3, (n,), generator=g), y)
    cut = n * 3 // 4
    return x[:cut], y[:cut], x[cut:], y[cut:]


def _init(gen, hidden):
    return [torch.randn(6, hidden, generator=gen) * 0.4, torch.zeros(hidden),
            torch.randn(hidden, 3, generator=gen) * 0.4, torch.zeros(3)]


def _apply(params, x, keep):
    """One seed: x [B, 6] -> logits [B, 3]; ``keep`` holds dropout multipliers, None at evaluation."""
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    if keep is not None:
        h = h * keep
    return h @ w2 + b2


def _dropout(gen, n, hidden, p):
    return torch.rand(n, hidden, generator=gen).ge_(p).div_(1 - p)


@firstdiv.workload(defaults={"lr": 0.05, "epochs": 4, "batch_size": 32, "hidden": 8, "n": 400, "data_seed": 0,
                             "dropout": 0.2, "fail": False})
@vectorizable
def train(config):
    if config["fail"]:
        raise RuntimeError("the spec refused this config")
    return Functional(data=_blobs(config), init=functools.partial(_init, hidden=config["hidden"]), apply=_apply,
                      draws=functools.partial(_dropout, hidden=config["hidden"], p=config["dropout"]),
                      epochs=config["epochs"], batch_size=config["batch_size"], lr=config["lr"], weight_decay=1e-4)


def _line(params, x):
    return x @ params[0] + params[1]


def _huber(out, y):
    return torch.nn.functional.huber_loss(out, y)


@firstdiv.workload(defaults={"lr": 0.05, "epochs": 3, "loss": "mse"})
@vectorizable
def regress(config):
    """Linear regression with SGD and no random draws; loss "mse" or a user callable (Huber)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g)
    y = x @ torch.randn(5, 2, generator=g) + 0.1 * torch.randn(200, 2, generator=g)
    return Functional(data=(x[:150], y[:150], x[150:], y[150:]),
                      init=lambda gen: [torch.randn(5, 2, generator=gen), torch.zeros(2)], apply=_line,
                      loss=_huber if config["loss"] == "huber" else "mse", optimizer="sgd",
                      epochs=config["epochs"], batch_size=16, lr=config["lr"])


def _dies_in_a_stack_of(params, x, size):
    """Stacked apply that ends its interpreter in a stack of exactly ``size`` seeds (a segfault, say)."""
    import os

    if params[0].shape[0] == size:
        os._exit(3)
    return torch.bmm(x, params[0]) + params[1].unsqueeze(1)


@firstdiv.workload(defaults={"lr": 0.05, "epochs": 2, "crash_stack": 3})
@vectorizable
def crash_stack(config):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = (x @ torch.randn(4, 2, generator=g)).argmax(1)
    return Functional(data=(x[:48], y[:48], x[48:], y[48:]),
                      init=lambda gen: [torch.randn(4, 2, generator=gen), torch.zeros(2)],
                      apply=functools.partial(_dies_in_a_stack_of, size=config["crash_stack"]), stacked=True,
                      epochs=config["epochs"], batch_size=16, lr=config["lr"])
