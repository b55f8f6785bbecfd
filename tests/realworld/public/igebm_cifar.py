"""Rosinality's igebm-pytorch: an implicit-generation energy-based model (IGEBM, Du & Mordatch 2019) on CIFAR-10.
The energy network is a spectrally normalized ResNet (its own ``SpectralNorm`` hook, the second convolution of each
block bounded and initialized at std 1e-10, class-conditional scale and shift from an embedding, LeakyReLU 0.2,
average-pool downsampling, summed spatial features into a linear energy); negatives come from a replay buffer (95%)
or uniform noise and are refined by Langevin dynamics under ``model.eval()`` (noise std 0.005, gradients clamped to
0.01, step size 10, clamped to [0, 1]); the loss is ``alpha * (pos_out ** 2 + neg_out ** 2) + (pos_out - neg_out)``
averaged, Adam lr 1e-4 with betas (0.0, 0.999) and the repository's ``clip_grad`` (each gradient clipped to three
times Adam's bias-corrected second-moment root plus 0.1).

Source: https://github.com/rosinality/igebm-pytorch
Commit: 3c4f104af8781f232fd994759c60b7c19f13eba7
Files: train.py, model.py (the model in the helper ``_igebm_lib.py``)
License: MIT (Copyright (c) 2019 Kim Seonghyeon; full text in LICENSES/rosinality-igebm-pytorch.txt)
Domain: generative, energy-based model (contrastive divergence with Langevin sampling and a replay buffer)

Kept as written: ``model.py`` (``SpectralNorm``, ``spectral_norm``, ``ResBlock``, ``IGEBM``), ``train.py``'s
``SampleBuffer``, ``sample_buffer``, ``sample_data``, ``requires_grad``, ``clip_grad`` and the loop body of ``train``
(including ``parameters = model.parameters()``: a generator, so the optimizer consumes it and the two
``requires_grad(parameters, ...)`` calls iterate nothing, as upstream; ``model.zero_grad()`` clears what the Langevin
steps left on the weights).

Deviations from the original:
- sizes for 2 CPU cores: images 3x32x32 -> 3x8x8, channels 128/256 -> 16/32 (the six blocks and their downsamplings
  kept; the last downsampling brings 2x2 to 1x1), batch 128 -> 16, Langevin ``sample_step`` 60 -> 5, buffer
  ``max_samples`` 10000 -> 1000; Adam's lr 1e-4 -> 1e-3 so 30 steps show the loss falling;
- data: CIFAR-10 (torchvision download, ``ToTensor``) is replaced by synthetic 8x8 RGB images in [0, 1] made from
  ``seed``: ten classes, each a colour and a gradient direction, with pixel noise; ``sample_data`` cycles a
  DataLoader shuffled by a ``torch.Generator(seed)``;
- ``device='cuda'`` is ``'cpu'``; the buffer's ``random.choices`` and ``np.random.rand`` draw from ``random.Random``
  and ``np.random.RandomState`` seeded from ``seed`` instead of the global generators;
  ``neg_img.data.add_(-step_size, grad)`` (a signature this torch refuses) is ``add_(grad, alpha=-step_size)``;
- tqdm, the loss description and the sample images (``utils.save_image``) are dropped;
- one ``train_step`` is one iteration of ``train``'s loop and returns its loss; the Program's batch is the step's
  positives and negatives with their class ids, its ``loss_fn`` the loop's loss on the energies of both;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch import optim
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _igebm_lib import IGEBM

IMG, BATCH = 8, 16
RNG = {"py": random.Random(0), "np": np.random.RandomState(0)}


# ---- train.py ----------------------------------------------------------------------------------------------------

class SampleBuffer:
    def __init__(self, max_samples=1000):  # (port) 10000
        self.max_samples = max_samples
        self.buffer = []

    def __len__(self):
        return len(self.buffer)

    def push(self, samples, class_ids=None):
        samples = samples.detach().to('cpu')
        class_ids = class_ids.detach().to('cpu')

        for sample, class_id in zip(samples, class_ids):
            self.buffer.append((sample.detach(), class_id))

            if len(self.buffer) > self.max_samples:
                self.buffer.pop(0)

    def get(self, n_samples, device='cpu'):
        items = RNG["py"].choices(self.buffer, k=n_samples)
        samples, class_ids = zip(*items)
        samples = torch.stack(samples, 0)
        class_ids = torch.tensor(class_ids)
        samples = samples.to(device)
        class_ids = class_ids.to(device)

        return samples, class_ids


def sample_buffer(buffer, batch_size=128, p=0.95, device='cpu'):
    if len(buffer) < 1:
        return (
            torch.rand(batch_size, 3, IMG, IMG, device=device),
            torch.randint(0, 10, (batch_size,), device=device),
        )

    n_replay = (RNG["np"].rand(batch_size) < p).sum()

    replay_sample, replay_id = buffer.get(n_replay)
    random_sample = torch.rand(batch_size - n_replay, 3, IMG, IMG, device=device)
    random_id = torch.randint(0, 10, (batch_size - n_replay,), device=device)

    return (
        torch.cat([replay_sample, random_sample], 0),
        torch.cat([replay_id, random_id], 0),
    )


def sample_data(loader):
    loader_iter = iter(loader)

    while True:
        try:
            yield next(loader_iter)

        except StopIteration:
            loader_iter = iter(loader)

            yield next(loader_iter)


def requires_grad(parameters, flag=True):
    for p in parameters:
        p.requires_grad = flag


def clip_grad(parameters, optimizer):
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group['params']:
                state = optimizer.state[p]

                if 'step' not in state or state['step'] < 1:
                    continue

                step = state['step']
                exp_avg_sq = state['exp_avg_sq']
                _, beta2 = group['betas']

                bound = 3 * torch.sqrt(exp_avg_sq / (1 - beta2 ** step)) + 0.1
                p.grad.data.copy_(torch.max(torch.min(p.grad.data, bound), -bound))


def ebm_loss(pos_out, neg_out, alpha=1, bug=None):
    loss = alpha * (pos_out ** 2 + neg_out ** 2)
    if bug == "contrastive_sign_flipped":
        loss = loss + (neg_out - pos_out)
    else:
        loss = loss + (pos_out - neg_out)
    return loss.mean()


def synthetic_cifar(seed, n=640):
    """Ten classes of 8x8 RGB images in [0, 1]: a class colour times a class gradient direction, plus noise."""
    gen = torch.Generator().manual_seed(seed)
    colours = 0.3 + 0.7 * torch.rand(10, 3, 1, 1, generator=gen)
    angles = torch.rand(10, generator=gen) * 6.2832
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
    labels = torch.arange(n) % 10
    ramps = (torch.cos(angles)[:, None, None] * xs + torch.sin(angles)[:, None, None] * ys + 1) / 2
    images = colours[labels] * ramps[labels].unsqueeze(1)
    images = (images + 0.05 * torch.randn(n, 3, IMG, IMG, generator=gen)).clamp(0, 1)
    return images, labels


def _langevin(model, neg_img, neg_id, noise, step_size, sample_step):
    for _k in range(sample_step):
        if noise.shape[0] != neg_img.shape[0]:
            noise = torch.randn(neg_img.shape[0], 3, IMG, IMG)

        noise.normal_(0, 0.005)
        neg_img.data.add_(noise.data)

        neg_out = model(neg_img, neg_id)
        neg_out.sum().backward()
        neg_img.grad.data.clamp_(-0.01, 0.01)

        neg_img.data.add_(neg_img.grad.data, alpha=-step_size)  # (port) add_(-step_size, grad)

        neg_img.grad.detach_()
        neg_img.grad.zero_()

        neg_img.data.clamp_(0, 1)
    return noise


def _first_batch(images, labels, bug):
    """The first step's batch: data positives with their class ids, and the empty buffer's uniform negatives."""
    pos_img, pos_id = images[:BATCH], labels[:BATCH]
    if bug == "class_ids_misaligned":
        pos_id = torch.roll(pos_id, 1)
    neg_img, neg_id = torch.rand(BATCH, 3, IMG, IMG), torch.randint(0, 10, (BATCH,))
    return (torch.cat([pos_img, neg_img]), torch.cat([pos_id, neg_id])), BATCH


def _build(seed, bug=None):
    torch.manual_seed(seed)
    RNG["py"], RNG["np"] = random.Random(seed), np.random.RandomState(seed)
    images, labels = synthetic_cifar(seed)
    loader = DataLoader(TensorDataset(images, labels), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    data = sample_data(loader)
    model = IGEBM(10)
    alpha, step_size, sample_step = 1, 10, 5  # (port) sample_step 60

    buffer = SampleBuffer()
    state = {"noise": torch.randn(BATCH, 3, IMG, IMG)}

    parameters = model.parameters()
    optimizer = optim.Adam(parameters, lr=1e-3, betas=(0.0, 0.999))  # (port) lr 1e-4

    def train_step():
        pos_img, pos_id = next(data)
        if bug == "class_ids_misaligned":
            pos_id = torch.roll(pos_id, 1)

        neg_img, neg_id = sample_buffer(buffer, pos_img.shape[0])
        neg_img.requires_grad = True

        requires_grad(parameters, False)
        model.eval()

        state["noise"] = _langevin(model, neg_img, neg_id, state["noise"], step_size, sample_step)

        neg_img = neg_img.detach()

        requires_grad(parameters, True)
        model.train()

        if bug != "zero_grad_dropped":
            model.zero_grad()

        pos_out = model(pos_img, pos_id)
        neg_out = model(neg_img, neg_id)

        loss = ebm_loss(pos_out, neg_out, alpha, bug)
        loss.backward()

        clip_grad(parameters, optimizer)

        optimizer.step()

        buffer.push(neg_img, neg_id)
        return loss.detach()

    def loss_fn(out, n_pos):  # the loop's loss on the energies of cat([positives, negatives])
        return ebm_loss(out[:n_pos], out[n_pos:], alpha, bug)

    return Program(name="igebm_cifar", model=model, batch=_first_batch(images, labels, bug), loss_fn=loss_fn,
                   optimizer=optimizer,
                   train_step=train_step, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the contrastive term written neg_out - pos_out: the data is pushed to high energy and the
    # Langevin negatives to low energy, the opposite of what the sampler descends.
    Bug("contrastive_sign_flipped", functools.partial(_build, bug="contrastive_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the class ids of the data batch shifted by one against their images (a collate/unpacking slip): the
    # conditional energy learns images under the wrong class embedding.
    Bug("class_ids_misaligned", functools.partial(_build, bug="class_ids_misaligned"), "learning_ledger",
        ("TASK",)),
    # classic: ``model.zero_grad()`` left out: the weights' gradients from the five Langevin backward passes (the
    # ``requires_grad(parameters, False)`` above them iterates a spent generator) and from every earlier step add
    # up into each update.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
