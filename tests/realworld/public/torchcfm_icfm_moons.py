"""Independent conditional flow matching (I-CFM) from the repository's flow matching tutorial: a time-conditioned
``MLP`` (SELU, width 64) regresses the conditional vector field ``u_t = x1 - x0`` at ``x_t`` drawn from
``N(t * x1 + (1 - t) * x0, 0.01)`` between a source batch (8 Gaussians) and a target batch (two moons), MSE loss,
Adam with its default learning rate, batch 256.

Source: https://github.com/atong01/conditional-flow-matching
Commit: cacd4dc8a5b6f50de63780e8f73754c9371f15db
Files: examples/2D_tutorials/Flow_matching_tutorial.ipynb (cells 5, 7, 11), torchcfm/models/models.py (MLP),
torchcfm/utils.py (eight_normal_sample, sample_8gaussians, sample_moons)
License: MIT (Copyright (c) 2023 Alexander Tong)
Domain: generative, flow matching (simulation-free continuous normalizing flow)

Deviations from the original:
- sizes: none changed (dim 2, width 64, batch 256, sigma 0.01 as used in the loop); 20000 iterations -> one
  ``train_step`` per iteration;
- ``torchdyn.datasets.generate_moons`` (used by ``sample_moons``) is not available: it is written out in torch
  (two interleaved half circles, uniform noise 0.2 as ``sample_moons`` asks), drawn from the global torch RNG that
  ``build`` seeds; the 8-Gaussian source is copied unchanged;
- the every-5000-steps NeuralODE trajectory plot (torchdyn, matplotlib) is left out;
- ``batch`` is one fixed draw ``(cat([x_t, t]), u_t)`` made at build, so ``loss_fn`` is the loop's
  ``torch.mean((vt - ut) ** 2)`` on the model's output for it; ``train_step`` draws fresh samples as the loop does.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- torchcfm/models/models.py -----------------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self, dim, out_dim=None, w=64, time_varying=False):
        super().__init__()
        self.time_varying = time_varying
        if out_dim is None:
            out_dim = dim
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim + (1 if time_varying else 0), w),
            torch.nn.SELU(),
            torch.nn.Linear(w, w),
            torch.nn.SELU(),
            torch.nn.Linear(w, w),
            torch.nn.SELU(),
            torch.nn.Linear(w, out_dim),
        )

    def forward(self, x):
        return self.net(x)


# ---- torchcfm/utils.py -------------------------------------------------------------------------------------------


def eight_normal_sample(n, dim, scale=1, var=1):
    m = torch.distributions.multivariate_normal.MultivariateNormal(
        torch.zeros(dim), math.sqrt(var) * torch.eye(dim)
    )
    centers = [
        (1, 0),
        (-1, 0),
        (0, 1),
        (0, -1),
        (1.0 / np.sqrt(2), 1.0 / np.sqrt(2)),
        (1.0 / np.sqrt(2), -1.0 / np.sqrt(2)),
        (-1.0 / np.sqrt(2), 1.0 / np.sqrt(2)),
        (-1.0 / np.sqrt(2), -1.0 / np.sqrt(2)),
    ]
    centers = torch.tensor(centers) * scale
    noise = m.sample((n,))
    multi = torch.multinomial(torch.ones(8), n, replacement=True)
    data = []
    for i in range(n):
        data.append(centers[multi[i]] + noise[i])
    data = torch.stack(data)
    return data


def generate_moons(n_samples=100, noise=1e-4):
    """torchdyn.datasets.generate_moons, written out in torch (two interleaved half circles)."""
    n_samples_out = n_samples // 2
    n_samples_in = n_samples - n_samples_out
    outer = torch.linspace(0, math.pi, n_samples_out)
    inner = torch.linspace(0, math.pi, n_samples_in)
    X = torch.cat([torch.stack([torch.cos(outer), torch.sin(outer)], 1),
                   torch.stack([1 - torch.cos(inner), 1 - torch.sin(inner) - 0.5], 1)])
    y = torch.cat([torch.zeros(n_samples_out), torch.ones(n_samples_in)]).long()
    X = X + torch.rand(n_samples, 1) * noise
    return X, y


def sample_moons(n):
    x0, _ = generate_moons(n, noise=0.2)
    return x0 * 3 - 1


def sample_8gaussians(n):
    return eight_normal_sample(n, 2, scale=5, var=0.1).float()


# ---- examples/2D_tutorials/Flow_matching_tutorial.ipynb ----------------------------------------------------------


def sample_conditional_pt(x0, x1, t, sigma, bug=None):
    """
    Draw a sample from the probability path N(t * x1 + (1 - t) * x0, sigma), see (Eq.14) [1].
    """
    t = t.reshape(-1, *([1] * (x0.dim() - 1)))
    if bug == "interpolation_reversed":
        # the path written in the other time convention (t=0 at the data) while the target stays x1 - x0
        mu_t = t * x0 + (1 - t) * x1
    else:
        mu_t = t * x1 + (1 - t) * x0
    epsilon = torch.randn_like(x0)
    return mu_t + sigma * epsilon


def compute_conditional_vector_field(x0, x1):
    """
    Compute the conditional vector field ut(x1|x0) = x1 - x0, see Eq.(15) [1].
    """
    return x1 - x0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)

    sigma = 0.1  # noqa: F841  (set in the notebook; the loop passes sigma=0.01)
    dim = 2
    batch_size = 256
    model = MLP(dim=dim, time_varying=True)
    optimizer = torch.optim.Adam(model.parameters())

    def draw():
        x0 = sample_8gaussians(batch_size)
        x1 = sample_moons(batch_size)

        t = torch.rand(x0.shape[0]).type_as(x0)
        xt = sample_conditional_pt(x0, x1, t, sigma=0.01, bug=bug)
        ut = compute_conditional_vector_field(x0, x1)
        return torch.cat([xt, t[:, None]], dim=-1), ut

    batch = draw()

    def train_step():
        if bug != "no_zero_grad":
            optimizer.zero_grad()

        inputs, ut = draw()

        vt = model(inputs)
        loss = torch.mean((vt - ut) ** 2)

        loss.backward()
        optimizer.step()
        return loss.detach()

    return Program(name="torchcfm_icfm_moons", model=model, batch=batch,
                   loss_fn=lambda vt, ut: torch.mean((vt - ut) ** 2), optimizer=optimizer, train_step=train_step)


build = functools.partial(_build)

BUGS = [
    # classic: the interpolation written in the other time convention (x_t runs from the target at t=0 to the source
    # at t=1) while the regression target stays x1 - x0; the convention pitfall the maintainers of
    # https://github.com/sii-research/tau-0-vla/issues/7 describe (interpolation and velocity must change together).
    Bug("interpolation_reversed", functools.partial(_build, bug="interpolation_reversed"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() left out of the loop: gradients accumulate over every iteration.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
