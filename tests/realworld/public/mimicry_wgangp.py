"""WGAN-GP from kwotsin/mimicry (torch_mimicry): the ResNet ``WGANGPGenerator32`` (linear to a 4x4 map, three
upsampling ``GBlock``s with BatchNorm and bilinear upsampling, BN-ReLU-conv-tanh) and ``WGANGPDiscriminator32``
(an optimized first ``DBlock`` and three plain ``DBlock``s, no normalization, ReLU, global mean pooling, linear),
trained by mimicry's ``Trainer`` as the README's example does: ``n_dis`` 5 critic steps per generator step (a fresh
real batch per critic step, the generator updated on the last one), the Wasserstein losses with the gradient penalty
on random interpolates (``gp_scale`` 10), Adam(2e-4, betas (0.0, 0.9)) for both, linear learning-rate decay to 0
over ``num_steps`` (the CIFAR-10 training parameters of the README).

Source: https://github.com/kwotsin/mimicry
Commit: a7fda06c4aff1e6af8dc4c4a35ed6636e434c766
Files: ``README.md`` (the usage example, the CIFAR-10 training parameters), ``examples/sngan_example.py``,
``torch_mimicry/nets/wgan_gp/`` (``wgan_gp_32.py``, ``wgan_gp_base.py``, ``wgan_gp_resblocks.py``),
``torch_mimicry/nets/gan/gan.py`` (``BaseGenerator``, ``BaseDiscriminator``), ``torch_mimicry/modules/``
(``resblocks.py``, ``losses.py``), ``torch_mimicry/training/`` (``trainer.py``, ``scheduler.py``)
License: MIT (Copyright (c) 2020 Kwot Sin Lee; full text in LICENSES/kwotsin-mimicry.txt)
Domain: generative, GAN (WGAN-GP: ResNet generator and critic, gradient penalty, n_dis critic steps, linear lr decay)

Kept as written: ``WGANGPGenerator32``/``WGANGPDiscriminator32`` (layers, xavier inits, forward), the resblocks
(``GBlock``/``DBlock``/``DBlockOptimized`` with the WGAN-GP overrides: plain-conv shortcuts, bilinear upsampling),
``generate_images``, ``compute_gan_loss`` (the ``wasserstein`` branch), ``wasserstein_loss_dis``/``_gen``, both
``train_step``s of ``wgan_gp_base.py`` (zero_grad, detached fakes for D, ``errD + errD_GP``, backward, step),
``compute_gradient_penalty_loss``, ``Trainer.train``'s step (``n_dis`` D updates on fresh batches, G on the last)
and ``_fetch_data``, ``LRScheduler.linear_decay``; Adam(2e-4, (0.0, 0.9)), n_dis 5, gp_scale 10.

Deviations from the original:
- CIFAR-10 is not here: the images are synthetic, made from ``seed``: 3x8x8 images in [-1, 1], each a soft
  coloured disc (one of four seeded colours) at a random position on a dark background; 1024 images;
- sizes for 2 CPU cores: ``nz`` 128 -> 32, ``ngf`` 256 -> 16, ``ndf`` 128 -> 16, ``bottom_width`` 4 -> 1 (8x8
  images out of the same three upsampling blocks), batch size 64 -> 32; ``num_steps`` 100K -> 2000 for the decay;
- the generator's BatchNorm and the inherited conditional branches (``num_classes``, ``ConditionalBatchNorm2d``,
  spectral norm) are left out of the resblocks where the WGAN-GP models never take them; logging, checkpoints,
  metrics (FID/KID/IS), ``MetricLog`` and ``compute_probs`` are dropped (the port's ``train_step``s return the loss);
- ``train_step`` is one global step of ``Trainer.train`` and returns the last critic loss ``errD + errD_GP``; the
  Program's model is the critic, its batch a real batch and a fake batch, its loss the critic's loss on them;
- upstream docstrings and some comments are left out, long calls joined on one line (module length); the ``bug``
  switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import autograd, nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 1024


# torch_mimicry/modules/losses.py
def wasserstein_loss_dis(output_real, output_fake):
    loss = -1.0 * output_real.mean() + output_fake.mean()
    return loss


def wasserstein_loss_gen(output_fake):
    loss = -output_fake.mean()
    return loss


# torch_mimicry/modules/resblocks.py with the overrides of nets/wgan_gp/wgan_gp_resblocks.py (plain convolutions)
class GBlock(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=None, upsample=False):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels if hidden_channels is not None else out_channels
        self.learnable_sc = in_channels != out_channels or upsample
        self.upsample = upsample
        self.c1 = nn.Conv2d(self.in_channels, self.hidden_channels, 3, 1, padding=1)
        self.c2 = nn.Conv2d(self.hidden_channels, self.out_channels, 3, 1, padding=1)
        self.b1 = nn.BatchNorm2d(self.in_channels)
        self.b2 = nn.BatchNorm2d(self.hidden_channels)
        self.activation = nn.ReLU(True)
        nn.init.xavier_uniform_(self.c1.weight.data, math.sqrt(2.0))
        nn.init.xavier_uniform_(self.c2.weight.data, math.sqrt(2.0))
        if self.learnable_sc:
            self.c_sc = nn.Conv2d(in_channels, out_channels, 1, 1, padding=0)
            nn.init.xavier_uniform_(self.c_sc.weight.data, 1.0)
            # Redefine shortcut layer without act. (wgan_gp_resblocks.GBlock)
            self.c_sc = nn.Conv2d(self.in_channels, self.out_channels, 1, 1, padding=0)
    def _upsample_conv(self, x, conv):
        return conv(F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False))
    def _residual(self, x):
        h = x
        h = self.b1(h)
        h = self.activation(h)
        h = self._upsample_conv(h, self.c1) if self.upsample else self.c1(h)
        h = self.b2(h)
        h = self.activation(h)
        h = self.c2(h)
        return h
    def _shortcut(self, x):
        if self.learnable_sc:
            x = self._upsample_conv(x, self.c_sc) if self.upsample else self.c_sc(x)
            return x
        else:
            return x
    def forward(self, x):
        return self._residual(x) + self._shortcut(x)


class DBlock(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=None, downsample=False):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels if hidden_channels is not None else in_channels
        self.downsample = downsample
        self.learnable_sc = (in_channels != out_channels) or downsample
        self.c1 = nn.Conv2d(self.in_channels, self.hidden_channels, 3, 1, 1)
        self.c2 = nn.Conv2d(self.hidden_channels, self.out_channels, 3, 1, 1)
        self.activation = nn.ReLU(True)
        nn.init.xavier_uniform_(self.c1.weight.data, math.sqrt(2.0))
        nn.init.xavier_uniform_(self.c2.weight.data, math.sqrt(2.0))
        if self.learnable_sc:
            self.c_sc = nn.Conv2d(in_channels, out_channels, 1, 1, 0)
            nn.init.xavier_uniform_(self.c_sc.weight.data, 1.0)
            # Redefine shortcut layer without act. (wgan_gp_resblocks.DBlock)
            self.c_sc = nn.Conv2d(self.in_channels, self.out_channels, 1, 1, 0)
        self.norm1 = None
        self.norm2 = None
    def _residual(self, x):
        h = x
        h = self.activation(h)
        h = self.c1(h)
        h = self.activation(h)
        h = self.c2(h)
        if self.downsample:
            h = F.avg_pool2d(h, 2)
        return h
    def _shortcut(self, x):
        if self.learnable_sc:
            x = self.c_sc(x)
            return F.avg_pool2d(x, 2) if self.downsample else x
        else:
            return x
    def forward(self, x):
        return self._residual(x) + self._shortcut(x)


class DBlockOptimized(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.c1 = nn.Conv2d(self.in_channels, self.out_channels, 3, 1, 1)
        self.c2 = nn.Conv2d(self.out_channels, self.out_channels, 3, 1, 1)
        self.c_sc = nn.Conv2d(self.in_channels, self.out_channels, 1, 1, 0)
        self.activation = nn.ReLU(True)
        nn.init.xavier_uniform_(self.c1.weight.data, math.sqrt(2.0))
        nn.init.xavier_uniform_(self.c2.weight.data, math.sqrt(2.0))
        nn.init.xavier_uniform_(self.c_sc.weight.data, 1.0)
        # Redefine shortcut layer (wgan_gp_resblocks.DBlockOptimized)
        self.c_sc = nn.Conv2d(self.in_channels, self.out_channels, 1, 1, 0)
    def _residual(self, x):
        h = x
        h = self.c1(h)
        h = self.activation(h)
        h = self.c2(h)
        h = F.avg_pool2d(h, 2)
        return h
    def _shortcut(self, x):
        return self.c_sc(F.avg_pool2d(x, 2))
    def forward(self, x):
        return self._residual(x) + self._shortcut(x)


# torch_mimicry/nets/gan/gan.py, nets/wgan_gp/wgan_gp_base.py
class WGANGPBaseGenerator(nn.Module):
    def __init__(self, nz, ngf, bottom_width, loss_type='wasserstein', **kwargs):
        super().__init__()
        self.nz = nz
        self.ngf = ngf
        self.bottom_width = bottom_width
        self.loss_type = loss_type
    def generate_images(self, num_images, device=None):
        noise = torch.randn((num_images, self.nz), device=device)
        fake_images = self.forward(noise)
        return fake_images
    def compute_gan_loss(self, output):
        errG = wasserstein_loss_gen(output)
        return errG
    def train_step(self, real_batch, netD, optG, device=None, global_step=None, **kwargs):
        self.zero_grad()
        # Get only batch size from real batch
        batch_size = real_batch[0].shape[0]
        fake_images = self.generate_images(num_images=batch_size, device=device)
        # Compute output logit of D thinking image real
        output = netD(fake_images)
        errG = self.compute_gan_loss(output)
        # Backprop and update gradients
        errG.backward()
        optG.step()
        return errG.item()


class WGANGPBaseDiscriminator(nn.Module):
    def __init__(self, ndf, loss_type='wasserstein', gp_scale=10.0, bug=None, **kwargs):
        super().__init__()
        self.ndf = ndf
        self.loss_type = loss_type
        self.gp_scale = gp_scale
        self.bug = bug
    def compute_gan_loss(self, output_real, output_fake):
        if self.bug == "d_loss_signs_swapped":
            return wasserstein_loss_dis(output_real=output_fake, output_fake=output_real)
        errD = wasserstein_loss_dis(output_fake=output_fake, output_real=output_real)
        return errD
    def train_step(self, real_batch, netG, optD, device=None, global_step=None, **kwargs):
        if self.bug != "d_zero_grad_dropped":
            self.zero_grad()
        real_images, _ = real_batch
        batch_size = real_images.shape[0]  # Match batch sizes for last iter
        fake_images = netG.generate_images(num_images=batch_size, device=device).detach()
        # Produce logits for real and fake images
        output_real = self.forward(real_images)
        output_fake = self.forward(fake_images)
        errD = self.compute_gan_loss(output_real=output_real, output_fake=output_fake)
        errD_GP = self.compute_gradient_penalty_loss(real_images=real_images, fake_images=fake_images,
                                                     gp_scale=self.gp_scale)
        # Backprop and update gradients
        errD_total = errD + errD_GP
        errD_total.backward()
        optD.step()
        return errD_total.item()
    def compute_gradient_penalty_loss(self, real_images, fake_images, gp_scale=10.0):
        N, _, H, W = real_images.shape
        device = real_images.device
        # Randomly sample some alpha between 0 and 1 for interpolation
        # where alpha is of the same shape for elementwise multiplication.
        alpha = torch.rand(N, 1)
        alpha = alpha.expand(N, int(real_images.nelement() / N)).contiguous()
        alpha = alpha.view(N, 3, H, W)
        alpha = alpha.to(device)
        # Obtain interpolates on line between real/fake images.
        interpolates = alpha * real_images.detach() + ((1 - alpha) * fake_images.detach())
        interpolates = interpolates.to(device)
        interpolates.requires_grad_(True)
        disc_interpolates = self.forward(interpolates)
        gradients = autograd.grad(outputs=disc_interpolates,
                                  inputs=interpolates,
                                  grad_outputs=torch.ones(disc_interpolates.size()).to(device),
                                  create_graph=self.bug != "gp_without_create_graph",
                                  retain_graph=True,
                                  only_inputs=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        gradient_penalty = ((gradients.norm(2, dim=1) - 1)**2).mean() * gp_scale
        return gradient_penalty


# torch_mimicry/nets/wgan_gp/wgan_gp_32.py
class WGANGPGenerator32(WGANGPBaseGenerator):
    def __init__(self, nz=128, ngf=256, bottom_width=4, **kwargs):
        super().__init__(nz=nz, ngf=ngf, bottom_width=bottom_width, **kwargs)
        self.l1 = nn.Linear(self.nz, (self.bottom_width**2) * self.ngf)
        self.block2 = GBlock(self.ngf, self.ngf, upsample=True)
        self.block3 = GBlock(self.ngf, self.ngf, upsample=True)
        self.block4 = GBlock(self.ngf, self.ngf, upsample=True)
        self.b5 = nn.BatchNorm2d(self.ngf)
        self.c5 = nn.Conv2d(self.ngf, 3, 3, 1, padding=1)
        self.activation = nn.ReLU(True)
        nn.init.xavier_uniform_(self.l1.weight.data, 1.0)
    def forward(self, x):
        h = self.l1(x)
        h = h.view(x.shape[0], -1, self.bottom_width, self.bottom_width)
        h = self.block2(h)
        h = self.block3(h)
        h = self.block4(h)
        h = self.b5(h)
        h = self.activation(h)
        h = torch.tanh(self.c5(h))
        return h


class WGANGPDiscriminator32(WGANGPBaseDiscriminator):
    def __init__(self, ndf=128, **kwargs):
        super().__init__(ndf=ndf, **kwargs)
        self.block1 = DBlockOptimized(3, self.ndf)
        self.block2 = DBlock(self.ndf, self.ndf, downsample=True)
        self.block3 = DBlock(self.ndf, self.ndf, downsample=False)
        self.block4 = DBlock(self.ndf, self.ndf, downsample=False)
        self.l5 = nn.Linear(self.ndf, 1)
        self.activation = nn.ReLU(True)
        nn.init.xavier_uniform_(self.l5.weight.data, 1.0)
    def forward(self, x):
        h = x
        h = self.block1(h)
        h = self.block2(h)
        h = self.block3(h)
        h = self.block4(h)
        h = self.activation(h)
        h = torch.mean(h, dim=(2, 3))  # Global average pooling  # WGAN uses mean pooling
        output = self.l5(h)
        return output


# torch_mimicry/training/scheduler.py
def linear_decay(optimizer, global_step, lr_value_range, lr_step_range):
    v1, v2 = lr_value_range
    s1, s2 = lr_step_range
    if global_step <= s1:
        updated_lr = v1
    elif global_step >= s2:
        updated_lr = v2
    else:
        scale_factor = (global_step - s1) / (s2 - s1)
        updated_lr = v1 + scale_factor * (v2 - v1)
    optimizer.param_groups[0]['lr'] = updated_lr
    return updated_lr


def _images(gen, n):
    """(port) Synthetic 3x8x8 images in [-1, 1]: a soft disc of one of four colours at a random position."""
    colours = torch.rand(4, 3, generator=gen) * 1.6 - 0.6
    k = torch.randint(4, (n,), generator=gen)
    centre = torch.rand(n, 2, generator=gen) * 4 + 2
    yy, xx = torch.meshgrid(torch.arange(8.), torch.arange(8.), indexing="ij")
    d2 = (yy[None] - centre[:, 0, None, None]) ** 2 + (xx[None] - centre[:, 1, None, None]) ** 2
    mask = torch.sigmoid(2 * (4.0 - d2))[:, None]
    return (mask * colours[k][:, :, None, None] + (1 - mask) * -0.9).clamp(-1, 1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    images = _images(gen, N_IMAGES)
    dataset = torch.utils.data.TensorDataset(images, torch.zeros(N_IMAGES, dtype=torch.long))
    device = torch.device("cpu")
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True,
                                             generator=torch.Generator().manual_seed(seed))  # (port) 64, workers
    # Define models and optimizers
    netG = WGANGPGenerator32(nz=32, ngf=16, bottom_width=1).to(device)  # (port) 128, 256, 4
    netD = WGANGPDiscriminator32(ndf=16, bug=bug).to(device)  # (port) 128
    optD = torch.optim.Adam(netD.parameters(), 2e-4, betas=(0.0, 0.9))
    optG = torch.optim.Adam(netG.parameters(), 2e-4, betas=(0.0, 0.9))
    n_dis, num_steps, start_step = 5, 2000, 0  # (port) num_steps 100K
    lr_D, lr_G = optD.param_groups[0]['lr'], optG.param_groups[0]['lr']
    st = {"iter": iter(dataloader), "global_step": 0}
    def _fetch_data(iter_dataloader):
        try:
            real_batch = next(iter_dataloader)
        except StopIteration:
            iter_dataloader = iter(dataloader)
            real_batch = next(iter_dataloader)
        real_batch = (real_batch[0].to(device), real_batch[1].to(device))
        return iter_dataloader, real_batch
    def train_step():  # one global step of Trainer.train
        global_step = st["global_step"]
        # Update n_dis times for D
        for i in range(n_dis):
            st["iter"], real_batch = _fetch_data(iter_dataloader=st["iter"])
            errD = netD.train_step(real_batch=real_batch, netG=netG, optD=optD, global_step=global_step,
                                   device=device)
            # Update G, but only once.
            if i == (n_dis - 1):
                netG.train_step(real_batch=real_batch, netD=netD, optG=optG, global_step=global_step,
                                device=device)
        global_step += 1
        linear_decay(optD, global_step, (lr_D, 0.0), (start_step, num_steps))
        linear_decay(optG, global_step, (lr_G, 0.0), (start_step, num_steps))
        st["global_step"] = global_step
        return errD

    real = images[:32]
    with torch.no_grad():
        fake = netG.generate_images(32, device=device)
    def loss_fn(output, real_fake):  # the critic's loss on its outputs for cat([real, fake]), with the penalty
        r, f = real_fake
        errD = netD.compute_gan_loss(output_real=output[:len(r)], output_fake=output[len(r):])
        return errD + netD.compute_gradient_penalty_loss(real_images=r, fake_images=f, gp_scale=netD.gp_scale)

    return Program(name="mimicry_wgangp", model=netD, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=optD, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the penalty's input gradients taken without create_graph, so errD_GP is a constant to the critic's
    # weights and the Lipschitz constraint never acts on them.
    Bug("gp_without_create_graph", functools.partial(_build, bug="gp_without_create_graph"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic sign slip: the critic's Wasserstein loss written with real and fake swapped, so the critic scores the
    # fakes high and the generator (minimizing -D(G(z))) is pushed the wrong way.
    Bug("d_loss_signs_swapped", functools.partial(_build, bug="d_loss_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the critic's zero_grad dropped from its train_step, so each of its steps applies the sum of all its
    # past gradients.
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
