"""Hill and Nijkamp's "anatomy of MCMC-based maximum likelihood learning of energy-based models": the 2-D toy
experiment (``train_toy.py``). The energy ``ToyNet`` (1x1 convolutions 2->32->64->64->64->1 with LeakyReLU 0.05 on
states shaped ``[B, 2, 1, 1]``) is trained by maximum likelihood with short-run Langevin negatives drawn from a
persistent state bank initialized uniform in [-1, 1]; the loss is the energy difference
``d_s_t = f(x_q).mean() - f(x_s_t).mean()`` scaled by ``2 / epsilon ** 2``, SGD with the learning rate scaled by
``epsilon ** 2 / 2`` (config ``rings_convergent.json``: lr 0.1, epsilon 0.125, no decay), data from four concentric
Gaussian rings.

Source: https://github.com/point0bar1/ebm-anatomy
Commit: 24c819b7239f554c8edc46c09085e129922962d2
Files: train_toy.py, nets.py (``ToyNet``), utils.py (``ToyDataset.sample_toy_data``), config_locker/rings_convergent.json
License: MIT (Copyright (c) 2019 Mitch Hill and Erik Nijkamp; full text in LICENSES/point0bar1-ebm-anatomy.txt)
Domain: generative, energy-based model (maximum likelihood with short-run persistent Langevin MCMC)

Kept as written: ``ToyNet``; the optimizer set-up (``optim_bank``, the lr scaling by ``epsilon ** 2 / 2`` for SGD);
the persistent bank ``s_t_0 = 2 * t.rand([s_t_0_size, 2, 1, 1]) - 1``; ``sample_state_set``, ``sample_q``,
``sample_s_t`` (persistent init, ``L`` Langevin updates ``x_s_t.data += - f_prime + epsilon * randn``, the bank
update, the gradient-magnitude record ``r_s_t``); the loop body (positives, negatives, ``d_s_t``, its scaling,
``zero_grad``/``backward``/``step``, the lr annealing ``max(lr_min, lr * lr_decay)``); ``sample_toy_data`` for rings.

Deviations from the original:
- sizes for 2 CPU cores: ``num_mcmc_steps`` 500 -> 20, ``s_t_0_size`` 10000 -> 1000 (batch 100 and the network
  kept); the rings' radius step 1.0 and sd 0.15 kept;
- data: the toy distribution is the repository's own synthetic rings (four rings, radii 1..4), drawn from a
  ``np.random.RandomState(seed)`` instead of the global numpy generator; the torch generator is seeded with ``seed``
  (config seed 123 replaced); ``ToyDataset``'s scipy density/KDE set-up (plots only) is dropped;
- ``t.Tensor(...)`` is ``torch.tensor(..., dtype=torch.float32)``; ``t.autograd.Variable(x, requires_grad=True)``
  is ``x.requires_grad_(True)`` (the same leaf); device is the CPU;
- the experiment folder, code copy, checkpoints, diagnostic records, printing and plots are dropped;
- ``SELF_CHECK_STEPS`` is 8: ``d_s_t`` falls while the persistent samples still sit in [-1, 1], then oscillates
  around 0 once they reach the rings (the convergent regime the paper describes), so 30 steps do not end lower;
- one ``train_step`` is one iteration of the training loop and returns ``d_s_t``; the Program's batch is the first
  step's positives and negatives concatenated with the number of positives, its ``loss_fn`` the scaled energy
  difference on the energies of both;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch as t
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

SELF_CHECK_STEPS = 8  # the energy difference falls, then oscillates around 0 once the samples reach the rings

CONFIG = {
    "num_train_iters": 200000, "batch_size": 100, "toy_type": "rings", "toy_groups": 4, "toy_sd": 1.5e-1,
    "toy_radius": 1.0, "net_type": "toy", "optimizer_type": "sgd", "lr_init": 1e-1, "lr_min": 1e-1,
    "lr_decay": 1.0, "epsilon": 1.25e-1,
    "num_mcmc_steps": 20,  # (port) 500
    "init_type": "persistent",
    "s_t_0_size": 1000,  # (port) 10000
}


# ---- nets.py -----------------------------------------------------------------------------------------------------

class ToyNet(nn.Module):
    def __init__(self, dim=2, n_f=32, leak=0.05):
        super(ToyNet, self).__init__()  # noqa: UP008
        self.f = nn.Sequential(
            nn.Conv2d(dim, n_f, 1, 1, 0),
            nn.LeakyReLU(leak),
            nn.Conv2d(n_f, n_f * 2, 1, 1, 0),
            nn.LeakyReLU(leak),
            nn.Conv2d(n_f * 2, n_f * 2, 1, 1, 0),
            nn.LeakyReLU(leak),
            nn.Conv2d(n_f * 2, n_f * 2, 1, 1, 0),
            nn.LeakyReLU(leak),
            nn.Conv2d(n_f * 2, 1, 1, 1, 0))

    def forward(self, x):
        return self.f(x).squeeze()


# ---- utils.py: ToyDataset.sample_toy_data (rings) ----------------------------------------------------------------

class ToyDataset:
    def __init__(self, toy_type='gmm', toy_groups=8, toy_sd=0.15, toy_radius=1, rng=None):
        self.toy_type = toy_type
        self.toy_groups = toy_groups
        self.toy_sd = toy_sd
        self.toy_radius = toy_radius
        self.weights = np.ones(toy_groups) / toy_groups
        self.rng = rng  # (port) the global np.random

    def sample_toy_data(self, num_samples):
        toy_sample = np.zeros(0).reshape(0, 2, 1, 1)
        sample_group_sz = self.rng.multinomial(num_samples, self.weights)
        for i in range(self.toy_groups):
            sample_radii = self.toy_radius*(i+1) + self.toy_sd * self.rng.randn(sample_group_sz[i])
            sample_thetas = 2 * np.pi * self.rng.random_sample(sample_group_sz[i])
            sample_x = sample_radii.reshape(-1, 1) * np.cos(sample_thetas).reshape(-1, 1)
            sample_y = sample_radii.reshape(-1, 1) * np.sin(sample_thetas).reshape(-1, 1)
            sample_group = np.concatenate((sample_x, sample_y), axis=1)
            toy_sample = np.concatenate((toy_sample, sample_group.reshape(-1, 2, 1, 1)), axis=0)
        return toy_sample


# ---- train_toy.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    config = dict(CONFIG)
    t.manual_seed(seed)
    device = t.device('cpu')

    net_bank = {'toy': ToyNet}
    f = net_bank[config['net_type']]().to(device)
    optim_bank = {'adam': t.optim.Adam, 'sgd': t.optim.SGD}
    if config['optimizer_type'] == 'sgd' and config['epsilon'] > 0:
        # scale learning rate according to langevin noise for invariant tuning
        config['lr_init'] *= (config['epsilon'] ** 2) / 2
        config['lr_min'] *= (config['epsilon'] ** 2) / 2
    if bug == "optimizer_over_fresh_net":
        optim = optim_bank[config['optimizer_type']](net_bank[config['net_type']]().parameters(), lr=config['lr_init'])
    else:
        optim = optim_bank[config['optimizer_type']](f.parameters(), lr=config['lr_init'])

    q = ToyDataset(config['toy_type'], config['toy_groups'], config['toy_sd'], config['toy_radius'],
                   rng=np.random.RandomState(seed))

    s_t_0 = 2 * t.rand([config['s_t_0_size'], 2, 1, 1]).to(device) - 1

    def sample_state_set(state_set, batch_size=config['batch_size']):
        rand_inds = t.randperm(state_set.shape[0])[0:batch_size]
        return state_set[rand_inds], rand_inds

    def sample_q(batch_size=config['batch_size']):
        return t.tensor(q.sample_toy_data(batch_size), dtype=t.float32).to(device)

    def sample_s_t(batch_size, L=config['num_mcmc_steps'], init_type=config['init_type'], update_s_t_0=True):
        def sample_s_t_0():
            if init_type == 'persistent':
                return sample_state_set(s_t_0, batch_size)
            raise RuntimeError('(port) only the persistent init of rings_convergent.json is kept')

        x_s_t_0, s_t_0_inds = sample_s_t_0()

        x_s_t = x_s_t_0.clone().requires_grad_(True)
        r_s_t = t.zeros(1).to(device)
        for _ell in range(L):
            f_prime = t.autograd.grad(f(x_s_t).sum(), [x_s_t])[0]
            if bug == "langevin_climbs_energy":
                x_s_t.data += f_prime + config['epsilon'] * t.randn_like(x_s_t)
            else:
                x_s_t.data += - f_prime + config['epsilon'] * t.randn_like(x_s_t)
            r_s_t += f_prime.view(f_prime.shape[0], -1).norm(dim=1).mean()

        if init_type == 'persistent' and update_s_t_0:
            s_t_0.data[s_t_0_inds] = x_s_t.detach().data.clone()

        return x_s_t.detach(), r_s_t.squeeze() / L

    def scaled_difference(f_q, f_s_t):
        if bug == "energy_difference_flipped":
            d_s_t = f_s_t.mean() - f_q.mean()
        else:
            d_s_t = f_q.mean() - f_s_t.mean()
        if config['epsilon'] > 0:
            d_s_t *= 2 / (config['epsilon'] ** 2)
        return d_s_t

    def train_step():
        x_q = sample_q()
        x_s_t, r_s_t = sample_s_t(batch_size=config['batch_size'])  # noqa: RUF059

        d_s_t = scaled_difference(f(x_q), f(x_s_t))
        optim.zero_grad()
        d_s_t.backward()
        optim.step()

        for lr_gp in optim.param_groups:
            lr_gp['lr'] = max(config['lr_min'], lr_gp['lr'] * config['lr_decay'])
        return d_s_t.detach()

    # the first step's batch, drawn from copies of the generators so the loop's own draws are unchanged
    state_torch, state_np = t.get_rng_state(), q.rng.get_state()
    bank = s_t_0.clone()
    x_q0 = sample_q()
    x_s0, _ = sample_s_t(batch_size=config['batch_size'], update_s_t_0=False)
    t.set_rng_state(state_torch)
    q.rng.set_state(state_np)
    s_t_0.copy_(bank)
    f.zero_grad(set_to_none=True)

    def loss_fn(out, n_pos):  # the loop's scaled energy difference on the energies of cat([x_q, x_s_t])
        return scaled_difference(out[:n_pos], out[n_pos:])

    return Program(name="ebmanatomy_toy_rings", model=f, batch=(t.cat([x_q0, x_s0]), x_q0.shape[0]),
                   loss_fn=loss_fn, optimizer=optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip in the sampler: the Langevin update written ``x += f_prime + eps * noise``: the negatives climb
    # the energy instead of descending it, so ``d_s_t`` no longer compares the data with samples of the model and the
    # weights are pushed by an objective that is not the likelihood's gradient.
    Bug("langevin_climbs_energy", functools.partial(_build, bug="langevin_climbs_energy"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic sign slip in the loss: ``d_s_t = f(x_s_t).mean() - f(x_q).mean()``: the data is pushed to high energy
    # and the short-run samples to low energy, the opposite of what the sampler descends.
    Bug("energy_difference_flipped", functools.partial(_build, bug="energy_difference_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: the optimizer built over ``net_bank[...]().parameters()``, a second ToyNet, instead of
    # ``f.parameters()``: the energy that samples and scores never moves.
    Bug("optimizer_over_fresh_net", functools.partial(_build, bug="optimizer_over_fresh_net"), "four_structures",
        ("f.0.weight",)),
]
