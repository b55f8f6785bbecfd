"""Premises confirmed before a FAIL, found at the first contact of batch public-32 (each new-behaviour test fails on
the code that measured it): ``step.norm_statistics_never_estimated`` does not read an eval-mode pass of a batch norm
that the same step also runs in train mode (TRADES: the adversarial example is searched under ``model.eval()``, then
``model.train()`` and the training forward) as a model trained in eval mode; without the ``model.train()`` it still
FAILs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


def _trades(restore_train_mode: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 4))
    x, y = torch.rand(16, 3, 8, 8), torch.randint(0, 4, (16,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train_step() -> torch.Tensor:
        model.train()
        model.eval()  # the attack: the gradient with respect to the input, under eval mode
        x_adv = (x + 0.001 * torch.randn_like(x)).requires_grad_()
        loss_kl = F.kl_div(F.log_softmax(model(x_adv), 1), F.softmax(model(x), 1), reduction="sum")
        x_adv = (x_adv + 0.01 * torch.autograd.grad(loss_kl, [x_adv])[0].sign()).clamp(0, 1).detach()
        if restore_train_mode:
            model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) + F.kl_div(F.log_softmax(model(x_adv), 1), F.softmax(model(x), 1),
                                                      reduction="batchmean")
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, (x, y), optimizer, train_step


@pytest.mark.parametrize("restore", [True, False], ids=["train_mode_restored", "train_mode_not_restored"])
def test_an_attack_under_eval_mode_before_the_training_forward_is_no_eval_mode_training(restore: bool) -> None:
    model, batch, optimizer, step = _trades(restore)
    r = firstdiv.step_probe(model, batch, F.cross_entropy, optimizer, train_step=step)
    norms = [f for f in r.findings if f.check == "step.norm_statistics_never_estimated" and f.status is Status.FAIL]
    assert bool(norms) is (not restore), [(f.check, f.message) for f in r.findings if f.status is not Status.PASS]


def test_reachability_leaves_no_gradient_on_a_tensor_the_loss_holds() -> None:
    """ProxyNCA: the proxies are a parameter of the loss (its closure), owned by the user's optimizer beside the model;
    the backward that reads gradients a custom function would write (for a parameter the graph walk does not reach)
    wrote the proxies' .grad and left it there."""
    torch.manual_seed(0)
    model = nn.Linear(4, 8)
    model.unused = nn.Parameter(torch.zeros(2))  # off the graph walk: the full backward runs
    proxies = nn.Parameter(torch.randn(3, 8))
    optimizer = torch.optim.Adam([{"params": model.parameters()}, {"params": [proxies], "lr": 1.0}])

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(-torch.cdist(out, proxies), y)

    firstdiv.reachability(model, (torch.randn(16, 4), torch.randint(0, 3, (16,))), loss_fn, optimizer=optimizer)
    assert proxies.grad is None and all(p.grad is None for p in model.parameters())
