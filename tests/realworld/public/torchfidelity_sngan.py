# ruff: noqa: UP008
"""SN-GAN with the hinge loss as torch-fidelity's example ``examples/sngan_cifar10.py`` trains it: a DCGAN-like
generator (ConvTranspose + BatchNorm + ReLU, Tanh; in eval mode it returns uint8 images) and a seven-conv
discriminator with ``torch.nn.utils.spectral_norm`` on every layer (LeakyReLU 0.1, linear head); per step one
generator update (``G.requires_grad_(True)``, ``D.requires_grad_(False)``, both optimizers zeroed, hinge generator
loss ``-D(G(z)).mean()``), then ``num_dis_updates`` (5) discriminator updates on fresh noise with the hinge loss
``relu(1 - D(real)).mean() + relu(1 + D(fake)).mean()``; Adam (lr 2e-4, betas (0.0, 0.9)) for both, each with a
LambdaLR decaying linearly to 0 over ``num_total_steps``, stepped every step.

Source: https://github.com/toshas/torch-fidelity
Commit: 5e211a950a7b45206bd4976813ffd6aed6cf4ccc
Files: ``examples/sngan_cifar10.py`` (``Generator``, ``Discriminator``, ``hinge_loss_dis``, ``hinge_loss_gen``,
``train``, ``main``'s defaults)
License: Apache-2.0 (Copyright 2020 Anton Obukhov; full text in LICENSES/toshas-torch-fidelity.txt)
Domain: vision, GAN (unconditional image generation, spectral normalization, hinge loss, n_dis = 5)

Kept as written: ``Generator`` and ``Discriminator`` (layer order, kernel sizes, strides, paddings, the
eval-mode uint8 output), both hinge losses with their shape asserts, the CIFAR-10 transform's
``Normalize((0.5,)*3, (0.5,)*3)``, the ``drop_last=True`` shuffled loader re-iterated on ``StopIteration``, the
optimizers and LambdaLRs, and ``train``'s step body (the ``requires_grad_`` toggles, both ``zero_grad`` calls
before each update, the generator update, the five discriminator updates, both scheduler steps); ``main``'s
defaults (lr 2e-4, 100000 total steps, 5 discriminator updates, spectral norm on).

Deviations from the original:
- CIFAR-10 is not here: 512 synthetic 3x32x32 images made from ``seed`` (a soft disk of one of four colours at a
  random place on a darker two-colour gradient background, in [0, 1]), then ``ToTensor`` + ``Normalize`` written
  out (``x * 2 - 1``); the real labels the loop reads are the colour indices (unused, as in the original);
- sizes for 2 CPU cores: ``batch_size`` 64 -> 16, ``z_size`` 128 -> 32 (its ``choices=(128,)`` aside), every
  channel width divided by 8 (generator 512/256/128/64 -> 64/32/16/8, discriminator 64/128/256/512 -> 8/16/32/64,
  the head ``Linear(4 * 4 * 64, 1)``; a ``width`` divisor argument);
- CPU only (the ``device`` expression gives cpu); tqdm, tensorboard, the torch-fidelity metrics (ISC/FID/KID/PPL/
  PRC/MIND every ``num_epoch_steps``) with the sample grids and the jit/onnx export of the best generator are
  dropped, so there is no ``eval_fn``;
- one ``train_step`` is one iteration of ``train``'s ``for step`` loop, returning the last discriminator loss;
  ``Program.model`` is the discriminator (its ``batch`` a real batch and a generated one);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 512  # (port) synthetic CIFAR-10 stand-in


class Generator(torch.nn.Module):
    # Adapted from https://github.com/christiancosgrove/pytorch-spectral-normalization-gan
    def __init__(self, z_size, width=1):
        super(Generator, self).__init__()
        w = width  # (port) channel divisor
        self.z_size = z_size
        self.model = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(z_size, 512 // w, 4, stride=1),
            torch.nn.BatchNorm2d(512 // w),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(512 // w, 256 // w, 4, stride=2, padding=(1, 1)),
            torch.nn.BatchNorm2d(256 // w),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(256 // w, 128 // w, 4, stride=2, padding=(1, 1)),
            torch.nn.BatchNorm2d(128 // w),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(128 // w, 64 // w, 4, stride=2, padding=(1, 1)),
            torch.nn.BatchNorm2d(64 // w),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(64 // w, 3, 3, stride=1, padding=(1, 1)),
            torch.nn.Tanh(),
        )

    def forward(self, z):
        fake = self.model(z.view(-1, self.z_size, 1, 1))
        if not self.training:
            fake = 255 * (fake.clamp(-1, 1) * 0.5 + 0.5)
            fake = fake.to(torch.uint8)
        return fake


class Discriminator(torch.nn.Module):
    # Adapted from https://github.com/christiancosgrove/pytorch-spectral-normalization-gan
    def __init__(self, sn=True, width=1):
        super(Discriminator, self).__init__()
        w = width  # (port) channel divisor
        self.c = 512 // w
        sn_fn = torch.nn.utils.spectral_norm if sn else lambda x: x
        self.conv1 = sn_fn(torch.nn.Conv2d(3, 64 // w, 3, stride=1, padding=(1, 1)))
        self.conv2 = sn_fn(torch.nn.Conv2d(64 // w, 64 // w, 4, stride=2, padding=(1, 1)))
        self.conv3 = sn_fn(torch.nn.Conv2d(64 // w, 128 // w, 3, stride=1, padding=(1, 1)))
        self.conv4 = sn_fn(torch.nn.Conv2d(128 // w, 128 // w, 4, stride=2, padding=(1, 1)))
        self.conv5 = sn_fn(torch.nn.Conv2d(128 // w, 256 // w, 3, stride=1, padding=(1, 1)))
        self.conv6 = sn_fn(torch.nn.Conv2d(256 // w, 256 // w, 4, stride=2, padding=(1, 1)))
        self.conv7 = sn_fn(torch.nn.Conv2d(256 // w, 512 // w, 3, stride=1, padding=(1, 1)))
        self.fc = sn_fn(torch.nn.Linear(4 * 4 * self.c, 1))
        self.act = torch.nn.LeakyReLU(0.1)

    def forward(self, x):
        m = self.act(self.conv1(x))
        m = self.act(self.conv2(m))
        m = self.act(self.conv3(m))
        m = self.act(self.conv4(m))
        m = self.act(self.conv5(m))
        m = self.act(self.conv6(m))
        m = self.act(self.conv7(m))
        return self.fc(m.view(-1, 4 * 4 * self.c))


def hinge_loss_dis(fake, real):
    assert fake.dim() == 2 and fake.shape[1] == 1 and real.shape == fake.shape, f"{fake.shape} {real.shape}"
    loss = torch.nn.functional.relu(1.0 - real).mean() + \
           torch.nn.functional.relu(1.0 + fake).mean()  # fmt: skip
    return loss


def hinge_loss_gen(fake):
    assert fake.dim() == 2 and fake.shape[1] == 1
    loss = -fake.mean()
    return loss


def _synthetic_cifar(seed, bug=None):
    """(port) Soft disks of one of four colours on darker gradients, [0, 1], then ToTensor + Normalize((0.5,)*3)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    colours = torch.tensor([[0.9, 0.2, 0.2], [0.2, 0.9, 0.2], [0.2, 0.3, 0.9], [0.9, 0.8, 0.2]])
    labels = torch.randint(0, 4, (N_IMAGES,), generator=g)
    cy, cx = (8 + 16 * torch.rand(2, N_IMAGES, 1, 1, generator=g))
    disk = torch.sigmoid(2.0 * (6.0 - ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt())).unsqueeze(1)
    bg = 0.3 * torch.rand(N_IMAGES, 3, 1, 1, generator=g) * (xx / 31.0) + 0.3 * torch.rand(
        N_IMAGES, 3, 1, 1, generator=g) * (yy / 31.0)
    images = disk * colours[labels][:, :, None, None] + (1 - disk) * bg
    if bug == "normalize_dropped":
        return torch.utils.data.TensorDataset(images, labels)
    return torch.utils.data.TensorDataset((images - 0.5) / 0.5, labels)


def _train_setup(args, seed, bug):
    """(port) ``train`` up to its step loop."""
    ds_instance = _synthetic_cifar(seed, bug=bug)
    loader = torch.utils.data.DataLoader(ds_instance, batch_size=args.batch_size, drop_last=True, shuffle=True)
    device = "cpu"  # (port) "cuda" if torch.cuda.is_available() else "cpu"
    G = Generator(args.z_size, width=8).to(device).train()
    D = Discriminator(not args.disable_sn, width=8).to(device).train()
    optim_G = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.0, 0.9))
    optim_D = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.0, 0.9))
    scheduler_G = torch.optim.lr_scheduler.LambdaLR(optim_G, lambda step: 1.0 - step / args.num_total_steps)
    scheduler_D = torch.optim.lr_scheduler.LambdaLR(optim_D, lambda step: 1.0 - step / args.num_total_steps)
    return types.SimpleNamespace(loader=loader, loader_iter=iter(loader), device=device, G=G, D=D, optim_G=optim_G,
                                 optim_D=optim_D, scheduler_G=scheduler_G, scheduler_D=scheduler_D)


def _train_one_step(args, t, bug=None):
    """(port) One iteration of ``train``'s ``for step in range(args.num_total_steps)`` loop, as written."""
    G, D, optim_G, optim_D, device = t.G, t.D, t.optim_G, t.optim_D, t.device
    # read next batch
    try:
        real_img, real_label = next(t.loader_iter)
    except StopIteration:
        t.loader_iter = iter(t.loader)
        real_img, real_label = next(t.loader_iter)
    real_img = real_img.to(device)
    real_label = real_label.to(device)

    # update Generator
    G.requires_grad_(True)
    D.requires_grad_(False)
    z = torch.randn(args.batch_size, args.z_size, device=device)
    optim_D.zero_grad()
    optim_G.zero_grad()
    fake = G(z)
    loss_G = hinge_loss_gen(D(fake))
    loss_G.backward()
    optim_G.step()

    # update Discriminator
    G.requires_grad_(False)
    D.requires_grad_(True)
    if bug == "dis_zero_grad_outside_loop":
        optim_D.zero_grad()
    for d_iter in range(args.num_dis_updates):
        z = torch.randn(args.batch_size, args.z_size, device=device)
        if bug != "dis_zero_grad_outside_loop":
            optim_D.zero_grad()
        optim_G.zero_grad()
        fake = G(z)
        if bug == "dis_loss_arguments_swapped":
            loss_D = hinge_loss_dis(D(real_img), D(fake))
        else:
            loss_D = hinge_loss_dis(D(fake), D(real_img))
        loss_D.backward()
        optim_D.step()

    # decay LR
    t.scheduler_G.step()
    t.scheduler_D.step()
    return loss_D.item()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(batch_size=16, num_total_steps=100000, num_epoch_steps=5000, num_dis_updates=5,
                                 lr=2e-4, z_size=32, disable_sn=False)  # main's defaults, sizes as in the docstring
    t = _train_setup(args, seed, bug)

    def train_step():
        return _train_one_step(args, t, bug=bug)

    real = next(iter(t.loader))[0]
    with torch.no_grad():
        fake = t.G(torch.randn(args.batch_size, args.z_size))

    def loss_fn(d_real, fake):
        """The discriminator's hinge loss: its output for the real batch (the model's output for ``batch``) and the
        generated batch (the target) through the discriminator, as the loop computes it."""
        return hinge_loss_dis(t.D(fake), d_real)

    return Program(name="torchfidelity_sngan", model=t.D, batch=(real, fake), loss_fn=loss_fn, optimizer=t.optim_D,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic argument-order slip: hinge_loss_dis(fake, real) called as (D(real), D(fake)), so the discriminator is
    # trained to score real images low and generated ones high, and the generator's -D(G(z)) follows it.
    Bug("dis_loss_arguments_swapped", functools.partial(_build, bug="dis_loss_arguments_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic zero_grad slip: optim_D.zero_grad() hoisted out of the num_dis_updates loop, so the five
    # discriminator updates step on accumulated gradients (whole discriminator).
    Bug("dis_zero_grad_outside_loop", functools.partial(_build, bug="dis_zero_grad_outside_loop"), "step_probe", (),
        kind="step.grad_accumulation"),
    # classic data slip: the Normalize((0.5,)*3, (0.5,)*3) of the dataset transform left out, so real images lie in
    # [0, 1] while the Tanh generator draws in [-1, 1]; the discriminator can tell them apart by range alone.
    Bug("normalize_dropped", functools.partial(_build, bug="normalize_dropped"), "learning_ledger", ("TASK",)),
]
