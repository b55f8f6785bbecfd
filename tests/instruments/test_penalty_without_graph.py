"""``objective.penalty_without_graph``: a gradient penalty built from ``torch.autograd.grad`` without
``create_graph=True`` adds its value to the loss and none of its gradient; confirmed by building the same loss with
``create_graph=True`` and comparing the weights' gradients. A penalty built right, a first-order step on the weights
(taken without create_graph by design) and a gradient the loss does not use give no finding."""

from __future__ import annotations

import torch
from torch import nn

import firstdiv

pytestmark = __import__("pytest").mark.usefixtures("one_thread")


def _critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def _wgan_loss(critic: nn.Module, create_graph: bool, use: bool = True):
    def loss_fn(d_out, targets):
        real, fake = targets
        alpha = torch.rand(len(real), 1, generator=torch.Generator().manual_seed(1))
        x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        out = critic(x_hat)
        grad = torch.autograd.grad(out, x_hat, torch.ones_like(out), create_graph=create_graph, retain_graph=True)[0]
        gp = 10 * (grad.norm(2, dim=1) - 1).pow(2).mean()
        wasserstein = d_out[len(real):].mean() - d_out[:len(real)].mean()
        return wasserstein + gp if use else wasserstein
    return loss_fn


def _objective(create_graph: bool, use: bool = True) -> firstdiv.Finding:
    critic = _critic()
    gen = torch.Generator().manual_seed(0)
    real, fake = torch.randn(16, 4, generator=gen) + 2, torch.randn(16, 4, generator=gen)
    r = firstdiv.learning_ledger(critic, (torch.cat([real, fake]), (real, fake)), _wgan_loss(critic, create_graph, use),
                                 torch.optim.Adam(critic.parameters(), 1e-4, betas=(0.5, 0.9)), overfit_steps=0)
    return next(f for f in r.findings if f.where == "OBJECTIVE")


def test_a_gradient_penalty_without_create_graph_fails():
    f = _objective(create_graph=False)
    assert (f.check, f.status.name) == ("objective.penalty_without_graph", "FAIL"), f.message
    assert f.evidence["penalty_without_graph"]["gradient_change"] > 0.1


def test_a_gradient_penalty_with_create_graph_passes():
    assert _objective(create_graph=True).check != "objective.penalty_without_graph"


def test_a_gradient_the_loss_does_not_use_passes():
    assert _objective(create_graph=False, use=False).check != "objective.penalty_without_graph"


def test_a_first_order_step_on_the_weights_passes():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def loss_fn(out, target):  # first-order MAML: the inner gradient on the weights taken without create_graph
        inner = (out - target).pow(2).mean()
        gw, gb = torch.autograd.grad(inner, (model.weight, model.bias))
        fast = torch.nn.functional.linear(x, model.weight - 0.1 * gw, model.bias - 0.1 * gb)
        return (fast - target).pow(2).mean()

    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.SGD(model.parameters(), 0.01), overfit_steps=0)
    assert next(f for f in r.findings if f.where == "OBJECTIVE").check != "objective.penalty_without_graph"
