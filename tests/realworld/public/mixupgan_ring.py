"""The GAN experiment of mixup (Zhang, Cisse, Dauphin & Lopez-Paz, "mixup: Beyond Empirical Risk Minimization", ICLR
2018) from the authors' demo repository: a generator MLP maps Gaussian noise to 2-d points, a discriminator MLP
separates them from samples of a ring of 8 Gaussians; each iteration makes 5 discriminator updates on batches of
real + fake points shuffled together, mixed with a second such batch by per-example weights alpha ~ U(0, mixup)
(inputs and 0/1 labels alike), under ``binary_cross_entropy_with_logits``, then one generator update that maximizes
the same cross-entropy on an unmixed batch (``lossG = - bce(...)``); both nets use Adam at its defaults.

Source: https://github.com/hongyi-zhang/mixup
Commit: 80000cea340bf829a52481ae45a317a487ce2deb
Files: ``gan/example_gan.py``
License: BSD-3-Clause (Copyright (c) 2017; full text in LICENSES/hongyi-zhang-mixup.txt)
Domain: GAN (minimax MLP GAN on a 2-d mixture of Gaussians, discriminator trained with mixup)

Kept as written: ``Perceptron``, ``means_circle``, ``means_grid``, ``sample_real`` (std 0.01), ``sample_noise``
(both with ``requires_grad=True`` as the script makes them), ``mixup_batch`` (``one_batch``: real and generated
points concatenated with ones/zeros and permuted together; the second batch mixed in with ``alpha``), the loop body
(``extraD`` 5 discriminator steps: ``zero_grad``, ``bce(netD(data), labels)``, backward, step; then the generator
step on ``mixup_batch(0)`` with ``lossG = - bce(netD(data), labels)``), the two ``torch.optim.Adam`` at defaults,
n_layers 3, bs 128.

Deviations from the original:
- the script sweeps ``shape`` in ring/grid, ``n_latent`` in 2/5/10 and ``mixup`` in 0/0.1/0.2/0.5/1, redefining
  everything inside the three loops; one cell of the sweep is ported at module level: ring, n_latent 2, mixup 0.2;
- sizes for 2 CPU cores: n_hidden 512 -> 128; n_iterations 20001 is the length of a run, not of a step;
- ``use_cuda`` False; ``Variable`` (a no-op in this torch) is kept where the script calls it; the sampling of
  ``sample_real``/``sample_noise`` runs on torch's global generator, seeded from ``seed``; the matplotlib plots,
  the saved samples, ``tqdm`` and the ``samples`` folder are dropped;
- one ``train_step`` is one iteration of the loop (5 discriminator steps, 1 generator step), returning the last
  discriminator loss; the Program's model is ``netD`` with ``optD``, its batch one mixed batch from
  ``mixup_batch(mixup)`` (the generated points detached) and its ``loss_fn`` the script's ``bce``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch.autograd import Variable
from torch.nn.functional import binary_cross_entropy_with_logits as bce

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

n_iterations = 20001
n_latent = 2
n_layers = 3
n_hidden = 128  # (port) 512
bs = 128
extraD = 5
use_cuda = False  # (port) True
shape, mixup = 'ring', 0.2  # (port) one cell of the sweep


class Perceptron(torch.nn.Module):
    def __init__(self, sizes, final=None):
        super(Perceptron, self).__init__()
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i != (len(sizes) - 2):
                layers.append(torch.nn.ReLU(inplace=True))
        if final is not None:
            layers.append(final())
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def means_circle(k=8):
    p = 3.14159265359
    t = torch.linspace(0, 2 * p - (2 * p / k), k)
    m = torch.cat((torch.sin(t).view(-1, 1),
                   torch.cos(t).view(-1, 1)), 1)
    return m


def means_grid(k=25):
    m = torch.zeros(k, 2)
    s = int(torch.sqrt(torch.Tensor([k]))[0] / 2)
    cnt = 0
    for i in range(- s, s + 1):
        for j in range(- s, s + 1):
            m[cnt][0] = i
            m[cnt][1] = j
            cnt += 1
    return m / s


def sample_real(n, shape, std=0.01):
    if shape == 'ring':
        m = means_circle()
    else:
        m = means_grid()
    i = torch.zeros(n).random_(m.size(0)).long()
    s = torch.randn(n, 2) * std + m[i]
    s = Variable(s, requires_grad=True)
    if use_cuda:
        s = s.cuda()
    return s


def sample_noise(bs, d):
    z = torch.randn(bs, d)
    z = Variable(z, requires_grad=True)
    if use_cuda:
        z = z.cuda()
    return z


def _build(seed, bug=None):
    torch.manual_seed(seed)
    netD = Perceptron([2] + [n_hidden] * n_layers + [1])
    netG = Perceptron([n_latent] + [n_hidden] * n_layers + [2])

    optD = torch.optim.Adam(netD.parameters())
    optG = torch.optim.Adam(netG.parameters())

    def mixup_batch(mixup=0.0):
        def one_batch():
            real = sample_real(bs, shape)
            fake = netG(sample_noise(bs, n_latent))
            data = torch.cat((real, fake))
            ones = Variable(torch.ones(real.size(0), 1))
            zeros = Variable(torch.zeros(fake.size(0), 1))
            perm = torch.randperm(data.size(0)).view(-1).long()
            labels = torch.cat((ones, zeros))
            if bug == "labels_not_permuted":
                return data[perm], labels
            return data[perm], labels[perm]

        d1, l1 = one_batch()
        if mixup == 0:
            return d1, l1
        d2, l2 = one_batch()
        alpha = Variable(torch.randn(d1.size(0), 1).uniform_(0, mixup))
        d = alpha * d1 + (1. - alpha) * d2
        l = alpha * l1 + (1. - alpha) * l2
        return d, l

    def train_step():  # one iteration of ``for iteration in tqdm(range(n_iterations))``
        for extra in range(extraD):
            data, labels = mixup_batch(mixup)

            if bug != "zero_grad_dropped":
                optD.zero_grad()
            lossD = bce(netD(data), labels)
            lossD.backward()
            optD.step()

        data, labels = mixup_batch(0)

        optG.zero_grad()
        if bug == "generator_loss_sign_dropped":
            lossG = bce(netD(data), labels)
        else:
            lossG = - bce(netD(data), labels)
        lossG.backward()
        optG.step()
        return lossD.detach()

    state = torch.get_rng_state()
    data, labels = mixup_batch(mixup)
    torch.set_rng_state(state)
    return Program(name="mixupgan_ring", model=netD, batch=(data.detach(), labels), loss_fn=bce, optimizer=optD,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the minus of ``lossG = - bce(netD(data), labels)`` dropped: the generator minimizes the discriminator's
    # loss, pulling its points away from the data the discriminator calls real.
    Bug("generator_loss_sign_dropped", functools.partial(_build, bug="generator_loss_sign_dropped"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: ``data[perm], labels`` in ``one_batch``: the points are shuffled and the labels are not, so the
    # discriminator's targets no longer say which point is real.
    Bug("labels_not_permuted", functools.partial(_build, bug="labels_not_permuted"), "learning_ledger", ("TASK",)),
    # classic: ``optD.zero_grad()`` dropped from the discriminator's inner loop: every step applies the sum of all
    # past discriminator gradients (and the generator step's, which lands in netD's .grad too).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
