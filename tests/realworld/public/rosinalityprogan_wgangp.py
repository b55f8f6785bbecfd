# ruff: noqa: SIM118, PLC0206, UP028, RUF059  (the original's style is kept as written)
"""Progressive growing of GANs with the WGAN-GP loss, from rosinality/progressive-gan-pytorch: a generator and a
critic that grow from 4x4 images by fading in a new resolution block, equalized learning rate, pixel norm, a
minibatch standard-deviation channel, the drift term, the gradient penalty, and a running-average generator.

Source: https://github.com/rosinality/progressive-gan-pytorch, commit 672f27ef154944284ee6077c856fb98671ae0bea, files
``model.py`` (``EqualLR``, ``equal_lr``, ``PixelNorm``, ``EqualConv2d``, ``ConvBlock``, ``Generator``,
``Discriminator``) and ``train.py`` (the set-up, ``requires_grad``, ``accumulate``, ``sample_data``, ``train``).
License: MIT (Copyright (c) 2018 Kim Seonghyeon; full text in LICENSES/rosinality-progressive-gan-pytorch.txt).

Kept as written: the model classes (equalized learning rate by a forward pre-hook, pixel norm, the generator's
4x4-from-1x1 first block, nearest up-sampling, ``to_rgb`` per resolution and the fade-in ``(1 - alpha) * skip_rgb +
alpha * out``; the critic's ``from_rgb`` per resolution, average-pool down-sampling, the std-dev channel at 4x4, the
final linear to ``1 + n_label`` outputs), the set-up (``n_label`` 1, ``code_size = 512 - n_label``, batch size 16,
``n_critic`` 1, Adam lr 0.001 betas (0.0, 0.99) for both, ``g_running`` in eval mode with ``accumulate(g_running,
generator, 0)`` first) and ``train``'s loop body: the phase logic (alpha ramp, stabilize, step growth), the critic
step (``real_predict.mean() - 0.001 * (real_predict ** 2).mean()`` backpropagated with ``mone``, the fake scores with
``one``, the gradient penalty of weight 10 on interpolates, ``d_optimizer.step()``), the generator step every
``n_critic`` iterations with ``requires_grad`` toggling (``-predict.mean()``, ``g_optimizer.step()``, ``accumulate``
with decay 0.999), and the transform (resize, center crop, normalize to [-1, 1]).

Deviations:
- CelebA is replaced by 160 synthetic 16x16 RGB "faces" made from ``seed`` (a skin-coloured ellipse with two dark eyes
  and a mouth at jittered places on a random background), all labelled 0 as ``ImageFolder`` labels one folder;
  torchvision is not available, so ``Resize`` + ``CenterCrop`` to ``4 * 2 ** step`` is an area interpolation of the
  16x16 images and the normalization is written out; the loader is a shuffled ``DataLoader``.
- sizes for 2 CPU cores: every 512 / 256 / 128 channel width of the generator and the critic is divided by 32 (16, 8,
  4; ``code_size = 16 - n_label``, the critic's std-dev block takes 17 channels), and the progression schedule is
  shortened with its ratios kept: 50000 iterations before the stabilized loader -> 20, 100000 per phase -> 40, alpha's
  ramp 0.00002 per iteration -> 0.05 (alpha reaches 1 when the phase stabilizes, as in the original), and the last step
  5 (128x128) -> 2 (16x16).
- ``.cuda()`` and ``Variable`` are dropped; ``one`` is the 0-dim ``torch.tensor(1.0)`` instead of
  ``FloatTensor([1])`` (this torch refuses a [1]-shaped gradient for the 0-dim scores the loop backpropagates); ``grad_penalty.data[0]`` and the two ``.data[0]`` of the logged values
  are ``.item()`` (a 0-dim tensor cannot be indexed in this torch); the sample images and checkpoints every 100 /
  10000 iterations and tqdm are dropped; ``train_step`` is one iteration of the loop and returns the critic's objective
  as backpropagated (``fake - real`` scores plus the penalty). The unused ``SpectralNorm`` classes and ``init_*``
  helpers are left out.
- the Program's model is the critic; its batch a real batch and a generated one at step 0, its ``loss_fn`` the critic
  loss without the penalty.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from math import sqrt

import numpy as np
import torch
from torch import nn, optim
from torch.autograd import grad
from torch.nn import functional as F
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

W = 32  # (port) the channel divisor
SIZE = 16
PHASE, STABILIZE, ALPHA_RATE, LAST_STEP = 40, 20, 0.05, 2  # (port) 100000, 50000, 0.00002, 5


# ===== model.py =====
class EqualLR:
    def __init__(self, name):
        self.name = name

    def compute_weight(self, module):
        weight = getattr(module, self.name + '_orig')
        fan_in = weight.data.size(1) * weight.data[0][0].numel()

        return weight * sqrt(2 / fan_in)

    @staticmethod
    def apply(module, name):
        fn = EqualLR(name)

        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + '_orig', nn.Parameter(weight.data))
        module.register_forward_pre_hook(fn)

        return fn

    def __call__(self, module, input):
        weight = self.compute_weight(module)
        setattr(module, self.name, weight)


def equal_lr(module, name='weight'):
    EqualLR.apply(module, name)

    return module


class PixelNorm(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, input):
        return input / torch.sqrt(torch.mean(input ** 2, dim=1, keepdim=True)
                                  + 1e-8)


class EqualConv2d(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

        conv = nn.Conv2d(*args, **kwargs)
        conv.weight.data.normal_()
        conv.bias.data.zero_()
        self.conv = equal_lr(conv)

    def forward(self, input):
        return self.conv(input)


class ConvBlock(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size,
                 padding,
                 kernel_size2=None, padding2=None,
                 pixel_norm=True, spectral_norm=False):
        super().__init__()

        pad1 = padding
        pad2 = padding
        if padding2 is not None:
            pad2 = padding2

        kernel1 = kernel_size
        kernel2 = kernel_size
        if kernel_size2 is not None:
            kernel2 = kernel_size2

        if pixel_norm:
            self.conv = nn.Sequential(EqualConv2d(in_channel, out_channel,
                                                  kernel1, padding=pad1),
                                      PixelNorm(),
                                      nn.LeakyReLU(0.2),
                                      EqualConv2d(out_channel, out_channel,
                                                  kernel2, padding=pad2),
                                      PixelNorm(),
                                      nn.LeakyReLU(0.2))

        else:
            self.conv = nn.Sequential(EqualConv2d(in_channel, out_channel,
                                                  kernel1, padding=pad1),
                                      nn.LeakyReLU(0.2),
                                      EqualConv2d(out_channel, out_channel,
                                                  kernel2, padding=pad2),
                                      nn.LeakyReLU(0.2))

    def forward(self, input):
        out = self.conv(input)

        return out


class Generator(nn.Module):
    def __init__(self, code_dim=512 - 10, n_label=10):
        super().__init__()

        self.label_embed = nn.Embedding(n_label, n_label)
        self.code_norm = PixelNorm()
        self.label_embed.weight.data.normal_()
        self.progression = nn.ModuleList([ConvBlock(512 // W, 512 // W, 4, 3, 3, 1),
                                          ConvBlock(512 // W, 512 // W, 3, 1),
                                          ConvBlock(512 // W, 512 // W, 3, 1),
                                          ConvBlock(512 // W, 512 // W, 3, 1),
                                          ConvBlock(512 // W, 256 // W, 3, 1),
                                          ConvBlock(256 // W, 128 // W, 3, 1)])

        self.to_rgb = nn.ModuleList([nn.Conv2d(512 // W, 3, 1),
                                     nn.Conv2d(512 // W, 3, 1),
                                     nn.Conv2d(512 // W, 3, 1),
                                     nn.Conv2d(512 // W, 3, 1),
                                     nn.Conv2d(256 // W, 3, 1),
                                     nn.Conv2d(128 // W, 3, 1)])

    def forward(self, input, label, step=0, alpha=-1):
        input = self.code_norm(input)
        label = self.label_embed(label)
        out = torch.cat([input, label], 1).unsqueeze(2).unsqueeze(3)

        for i, (conv, to_rgb) in enumerate(zip(self.progression, self.to_rgb)):
            if i > 0 and step > 0:
                upsample = F.interpolate(out, scale_factor=2)  # (port) F.upsample, its deprecated alias
                out = conv(upsample)

            else:
                out = conv(out)

            if i == step:
                out = to_rgb(out)

                if i > 0 and 0 <= alpha < 1:
                    skip_rgb = self.to_rgb[i - 1](upsample)
                    out = (1 - alpha) * skip_rgb + alpha * out

                break

        return out


class Discriminator(nn.Module):
    def __init__(self, n_label=10):
        super().__init__()

        self.progression = nn.ModuleList([ConvBlock(128 // W, 256 // W, 3, 1,
                                                    pixel_norm=False,
                                                    spectral_norm=False),
                                          ConvBlock(256 // W, 512 // W, 3, 1,
                                                    pixel_norm=False,
                                                    spectral_norm=False),
                                          ConvBlock(512 // W, 512 // W, 3, 1,
                                                    pixel_norm=False,
                                                    spectral_norm=False),
                                          ConvBlock(512 // W, 512 // W, 3, 1,
                                                    pixel_norm=False,
                                                    spectral_norm=False),
                                          ConvBlock(512 // W, 512 // W, 3, 1,
                                                    pixel_norm=False,
                                                    spectral_norm=False),
                                          ConvBlock(512 // W + 1, 512 // W, 3, 1, 4, 0,
                                                    pixel_norm=False,
                                                    spectral_norm=False)])

        self.from_rgb = nn.ModuleList([nn.Conv2d(3, 128 // W, 1),
                                       nn.Conv2d(3, 256 // W, 1),
                                       nn.Conv2d(3, 512 // W, 1),
                                       nn.Conv2d(3, 512 // W, 1),
                                       nn.Conv2d(3, 512 // W, 1),
                                       nn.Conv2d(3, 512 // W, 1)])

        self.n_layer = len(self.progression)

        self.linear = nn.Linear(512 // W, 1 + n_label)

    def forward(self, input, step=0, alpha=-1):
        for i in range(step, -1, -1):
            index = self.n_layer - i - 1

            if i == step:
                out = self.from_rgb[index](input)

            if i == 0:
                mean_std = input.std(0).mean()
                mean_std = mean_std.expand(input.size(0), 1, 4, 4)
                out = torch.cat([out, mean_std], 1)

            out = self.progression[index](out)

            if i > 0:
                out = F.avg_pool2d(out, 2)

                if i == step and 0 <= alpha < 1:
                    skip_rgb = F.avg_pool2d(input, 2)
                    skip_rgb = self.from_rgb[index + 1](skip_rgb)
                    out = (1 - alpha) * skip_rgb + alpha * out

        out = out.squeeze(2).squeeze(2)
        out = self.linear(out)

        return out[:, 0], out[:, 1:]


# ===== train.py =====
n_label = 1
code_size = 512 // W - n_label  # (port) 512 - n_label
batch_size = 16
n_critic = 1


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def accumulate(model1, model2, decay=0.999):
    par1 = dict(model1.named_parameters())
    par2 = dict(model2.named_parameters())

    for k in par1.keys():
        par1[k].data.mul_(decay).add_(1 - decay, par2[k].data)


def _faces(seed, n):
    g = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE] / (SIZE - 1.0)
    imgs = np.zeros((n, 3, SIZE, SIZE), dtype=np.float32)
    for i in range(n):
        bg = g.uniform(0.0, 1.0, size=(3, 1, 1))
        cy, cx = 0.5 + g.uniform(-0.08, 0.08), 0.5 + g.uniform(-0.08, 0.08)
        face = ((yy - cy) / 0.4) ** 2 + ((xx - cx) / 0.3) ** 2 < 1
        skin = np.array([0.9, 0.7, 0.55])[:, None, None] * g.uniform(0.7, 1.0)
        img = np.where(face[None], skin, bg)
        for ex in (-0.12, 0.12):
            eye = (yy - (cy - 0.1)) ** 2 + (xx - (cx + ex)) ** 2 < 0.004
            img = np.where(eye[None], 0.1, img)
        mouth = (np.abs(yy - (cy + 0.18)) < 0.03) & (np.abs(xx - cx) < 0.12)
        imgs[i] = np.where(mouth[None], 0.3, img)
    return torch.from_numpy(imgs)


def celeba_loader(images, seed):
    def loader(transform):
        data = torch.utils.data.TensorDataset(transform(images), torch.zeros(len(images), dtype=torch.long))
        data_loader = DataLoader(data, shuffle=True, batch_size=batch_size,
                                 num_workers=0, generator=torch.Generator().manual_seed(seed))

        return data_loader

    return loader


def sample_data(dataloader, image_size=4):
    def transform(x):  # (port) Resize(image_size), CenterCrop(image_size), ToTensor(), Normalize((0.5,)*3, (0.5,)*3)
        x = F.interpolate(x, size=(image_size, image_size), mode="area")
        return (x - 0.5) / 0.5

    loader = dataloader(transform)

    for img, label in loader:
        yield img, label


def _build(seed, bug=None):
    torch.manual_seed(seed)
    generator = Generator(code_size, n_label)
    discriminator = Discriminator(n_label)
    g_running = Generator(code_size, n_label)
    g_running.train(False)

    g_optimizer = optim.Adam(generator.parameters(), lr=0.001, betas=(0.0, 0.99))
    d_optimizer = optim.Adam(
        discriminator.parameters(), lr=0.001, betas=(0.0, 0.99))

    accumulate(g_running, generator, 0)
    loader = celeba_loader(_faces(seed, 160), seed)

    # train(generator, discriminator, loader), unrolled: the state before the loop
    st = {"step": 0, "alpha": 0, "iteration": 0, "stabilize": False, "i": 0}
    st["dataset"] = sample_data(loader, 4 * 2 ** st["step"])

    requires_grad(generator, False)
    requires_grad(discriminator, True)

    one = torch.tensor(1.0)  # (port) torch.FloatTensor([1]).cuda(): see the docstring
    mone = one * -1

    def train_step():
        i = st["i"]
        if bug != "critic_zero_grad_dropped":
            discriminator.zero_grad()

        st["alpha"] = min(1, ALPHA_RATE * st["iteration"])

        if st["stabilize"] is False and st["iteration"] > STABILIZE:
            st["dataset"] = sample_data(loader, 4 * 2 ** st["step"])
            st["stabilize"] = True

        if st["iteration"] > PHASE:
            st["alpha"] = 0
            st["iteration"] = 0
            st["step"] += 1
            st["stabilize"] = False
            if st["step"] > LAST_STEP:
                st["alpha"] = 1
                st["step"] = LAST_STEP
            st["dataset"] = sample_data(loader, 4 * 2 ** st["step"])
        step, alpha = st["step"], st["alpha"]

        try:
            real_image, label = next(st["dataset"])

        except (OSError, StopIteration):
            st["dataset"] = sample_data(loader, 4 * 2 ** step)
            real_image, label = next(st["dataset"])

        st["iteration"] += 1

        b_size = real_image.size(0)
        real_predict, real_class_predict = discriminator(
            real_image, step, alpha)
        real_predict = real_predict.mean() \
            - 0.001 * (real_predict ** 2).mean()
        if bug == "critic_signs_swapped":
            real_predict.backward(one)
        else:
            real_predict.backward(mone)

        fake_image = generator(
            torch.randn(b_size, code_size),
            label, step, alpha)
        fake_predict, fake_class_predict = discriminator(
            fake_image, step, alpha)
        fake_predict = fake_predict.mean()
        if bug == "critic_signs_swapped":
            fake_predict.backward(mone)
        else:
            fake_predict.backward(one)

        eps = torch.rand(b_size, 1, 1, 1)
        x_hat = eps * real_image.data + (1 - eps) * fake_image.data
        x_hat = x_hat.requires_grad_(True)
        hat_predict, _ = discriminator(x_hat, step, alpha)
        grad_x_hat = grad(
            outputs=hat_predict.sum(), inputs=x_hat, create_graph=True)[0]
        grad_penalty = ((grad_x_hat.view(grad_x_hat.size(0), -1)
                         .norm(2, dim=1) - 1)**2).mean()
        grad_penalty = 10 * grad_penalty
        grad_penalty.backward()
        grad_loss_val = grad_penalty.item()
        disc_loss_val = (real_predict - fake_predict).item()

        d_optimizer.step()

        if (i + 1) % n_critic == 0:
            generator.zero_grad()

            requires_grad(generator, True)
            requires_grad(discriminator, False)

            input_class = torch.multinomial(
                torch.ones(n_label), batch_size, replacement=True)
            fake_image = generator(
                torch.randn(batch_size, code_size),
                input_class, step, alpha)

            predict, class_predict = discriminator(fake_image, step, alpha)

            loss = -predict.mean()
            gen_loss_val = loss.item()  # noqa: F841

            loss.backward()
            g_optimizer.step()
            accumulate(g_running, generator)

            requires_grad(generator, False)
            requires_grad(discriminator, True)

        st["i"] += 1
        return -disc_loss_val + grad_loss_val

    first = next(sample_data(celeba_loader(_faces(seed + 1, batch_size), seed + 1), 4))[0]
    with torch.no_grad():
        fake0 = generator(torch.randn(batch_size, code_size), torch.zeros(batch_size, dtype=torch.long), 0, 0)

    def loss_fn(outputs, fake):  # the critic's loss at step 0 (drift term included, penalty left out)
        real_predict = outputs[0]
        real_predict = real_predict.mean() - 0.001 * (real_predict ** 2).mean()
        fake_predict = discriminator(fake, 0, 0)[0].mean()
        if bug == "critic_signs_swapped":
            return real_predict - fake_predict
        return fake_predict - real_predict

    return Program(name="rosinalityprogan_wgangp", model=discriminator, batch=(first, fake0), loss_fn=loss_fn,
                   optimizer=d_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic WGAN sign slip: ``real_predict.backward(one)`` and ``fake_predict.backward(mone)``: the critic learns to
    # score the generated images above the real ones.
    Bug("critic_signs_swapped", functools.partial(_build, bug="critic_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``discriminator.zero_grad()`` left out of the loop (classic): the critic's gradients accumulate over iterations.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
