# ruff: noqa: LOG015, PLR0402, UP008
"""Class-conditional DDPM (UNet with self-attention, sinusoidal time embedding plus a label embedding,
classifier-free-guidance label dropout, an EMA copy) from Diffusion-Models-pytorch.

Source: https://github.com/dome272/Diffusion-Models-pytorch, commit be352208d0576039fec061238c0e4385a562a2d4, files
``ddpm_conditional.py`` (Diffusion, train, launch) and ``modules.py`` (EMA, SelfAttention, DoubleConv, Down, Up,
UNet_conditional). License: Apache-2.0 (the repository's LICENSE, which names no copyright holder and has no
NOTICE file; full text in LICENSES/dome272-Diffusion-Models-pytorch.txt). The changes are listed below.

Kept as written: EMA (beta 0.995, reset to the model for the first 2000 steps), SelfAttention, DoubleConv, Down, Up,
UNet_conditional's structure and forward (``t += self.label_emb(y)``), Diffusion (1000 steps, linear betas 1e-4 to
0.02, ``noise_images``, ``sample_timesteps`` from 1, ``sample`` with cfg_scale, kept though not run here), and the
loop body: timesteps, noised images, labels dropped with probability 0.1, ``mse(noise, predicted_noise)``,
zero_grad, backward, AdamW step (lr 3e-4), ``ema.step_ema``.

Deviations:
- the CIFAR-10 64x64 ImageFolder is replaced by 80 synthetic 10x10 images made from the seed, 8 per class of 10
  classes (class k: a shape of the class's kind and colour at a random place, noise on top), scaled to [-1, 1] as
  Normalize((0.5,) * 3, (0.5,) * 3) does; ``get_data``'s Resize + RandomResizedCrop(scale=(0.8, 1.0)) + ToTensor +
  Normalize are written out in torch (a crop of 80-100% of the area resized to 8x8, bilinear).
- sizes for 2 CPU cores: image_size 64 -> 8, batch_size 14 -> 8, UNet_conditional's channel widths / 8 (64, 128,
  256, 512 -> 8, 16, 32, 64) with the SelfAttention sizes that follow from 8x8 inputs (32, 16, 8, 16, 32, 64 ->
  4, 2, 1, 2, 4, 8); time_dim stays 256.
- device "cuda" -> "cpu" (UNet_conditional and Diffusion take it as an argument).
- ``np.random.random()`` (the label drop) draws from ``numpy.random.default_rng(seed)``; the loader shuffles with a
  seeded generator.
- ``train`` runs as ``train_step``: one iteration of its inner loop per call (epochs counted by the loader);
  the sampling, image saving, checkpoints, tensorboard and tqdm of the epoch end are dropped (``sample`` itself is
  kept, without its tqdm progress bar).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import logging
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

N_CLASSES, PER_CLASS, RAW, IMAGE_SIZE, BATCH = 10, 8, 10, 8, 8


# ---------------------------------------------------------------- modules.py
class EMA:
    def __init__(self, beta):
        super().__init__()
        self.beta = beta
        self.step = 0

    def update_model_average(self, ma_model, current_model):
        for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
            old_weight, up_weight = ma_params.data, current_params.data
            ma_params.data = self.update_average(old_weight, up_weight)

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

    def step_ema(self, ema_model, model, step_start_ema=2000):
        if self.step < step_start_ema:
            self.reset_parameters(ema_model, model)
            self.step += 1
            return
        self.update_model_average(ema_model, model)
        self.step += 1

    def reset_parameters(self, ema_model, model):
        ema_model.load_state_dict(model.state_dict())


class SelfAttention(nn.Module):
    def __init__(self, channels, size):
        super(SelfAttention, self).__init__()
        self.channels = channels
        self.size = size
        self.mha = nn.MultiheadAttention(channels, 4, batch_first=True)
        self.ln = nn.LayerNorm([channels])
        self.ff_self = nn.Sequential(
            nn.LayerNorm([channels]),
            nn.Linear(channels, channels),
            nn.GELU(),
            nn.Linear(channels, channels),
        )

    def forward(self, x):
        x = x.view(-1, self.channels, self.size * self.size).swapaxes(1, 2)
        x_ln = self.ln(x)
        attention_value, _ = self.mha(x_ln, x_ln, x_ln)
        attention_value = attention_value + x
        attention_value = self.ff_self(attention_value) + attention_value
        return attention_value.swapaxes(2, 1).view(-1, self.channels, self.size, self.size)


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None, residual=False):
        super().__init__()
        self.residual = residual
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(1, mid_channels),
            nn.GELU(),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(1, out_channels),
        )

    def forward(self, x):
        if self.residual:
            return F.gelu(x + self.double_conv(x))
        else:
            return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels, emb_dim=256):
        super().__init__()
        self.maxpool_conv = nn.Sequential(
            nn.MaxPool2d(2),
            DoubleConv(in_channels, in_channels, residual=True),
            DoubleConv(in_channels, out_channels),
        )

        self.emb_layer = nn.Sequential(
            nn.SiLU(),
            nn.Linear(
                emb_dim,
                out_channels
            ),
        )

    def forward(self, x, t):
        x = self.maxpool_conv(x)
        emb = self.emb_layer(t)[:, :, None, None].repeat(1, 1, x.shape[-2], x.shape[-1])
        return x + emb


class Up(nn.Module):
    def __init__(self, in_channels, out_channels, emb_dim=256):
        super().__init__()

        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = nn.Sequential(
            DoubleConv(in_channels, in_channels, residual=True),
            DoubleConv(in_channels, out_channels, in_channels // 2),
        )

        self.emb_layer = nn.Sequential(
            nn.SiLU(),
            nn.Linear(
                emb_dim,
                out_channels
            ),
        )

    def forward(self, x, skip_x, t):
        x = self.up(x)
        x = torch.cat([skip_x, x], dim=1)
        x = self.conv(x)
        emb = self.emb_layer(t)[:, :, None, None].repeat(1, 1, x.shape[-2], x.shape[-1])
        return x + emb


# ---------------------------------------------------------------- modules.py: UNet_conditional (sizes scaled)
class UNet_conditional(nn.Module):
    def __init__(self, c_in=3, c_out=3, time_dim=256, num_classes=None, device="cuda"):
        super().__init__()
        self.device = device
        self.time_dim = time_dim
        self.inc = DoubleConv(c_in, 8)
        self.down1 = Down(8, 16)
        self.sa1 = SelfAttention(16, 4)
        self.down2 = Down(16, 32)
        self.sa2 = SelfAttention(32, 2)
        self.down3 = Down(32, 32)
        self.sa3 = SelfAttention(32, 1)

        self.bot1 = DoubleConv(32, 64)
        self.bot2 = DoubleConv(64, 64)
        self.bot3 = DoubleConv(64, 32)

        self.up1 = Up(64, 16)
        self.sa4 = SelfAttention(16, 2)
        self.up2 = Up(32, 8)
        self.sa5 = SelfAttention(8, 4)
        self.up3 = Up(16, 8)
        self.sa6 = SelfAttention(8, 8)
        self.outc = nn.Conv2d(8, c_out, kernel_size=1)

        if num_classes is not None:
            self.label_emb = nn.Embedding(num_classes, time_dim)

    def pos_encoding(self, t, channels):
        inv_freq = 1.0 / (
            10000
            ** (torch.arange(0, channels, 2, device=self.device).float() / channels)
        )
        pos_enc_a = torch.sin(t.repeat(1, channels // 2) * inv_freq)
        pos_enc_b = torch.cos(t.repeat(1, channels // 2) * inv_freq)
        pos_enc = torch.cat([pos_enc_a, pos_enc_b], dim=-1)
        return pos_enc

    def forward(self, x, t, y):
        t = t.unsqueeze(-1).type(torch.float)
        t = self.pos_encoding(t, self.time_dim)

        if y is not None:
            t += self.label_emb(y)

        x1 = self.inc(x)
        x2 = self.down1(x1, t)
        x2 = self.sa1(x2)
        x3 = self.down2(x2, t)
        x3 = self.sa2(x3)
        x4 = self.down3(x3, t)
        x4 = self.sa3(x4)

        x4 = self.bot1(x4)
        x4 = self.bot2(x4)
        x4 = self.bot3(x4)

        x = self.up1(x4, x3, t)
        x = self.sa4(x)
        x = self.up2(x, x2, t)
        x = self.sa5(x)
        x = self.up3(x, x1, t)
        x = self.sa6(x)
        output = self.outc(x)
        return output


# ---------------------------------------------------------------- ddpm_conditional.py
class Diffusion:
    def __init__(self, noise_steps=1000, beta_start=1e-4, beta_end=0.02, img_size=256, device="cuda"):
        self.noise_steps = noise_steps
        self.beta_start = beta_start
        self.beta_end = beta_end

        self.beta = self.prepare_noise_schedule().to(device)
        self.alpha = 1. - self.beta
        self.alpha_hat = torch.cumprod(self.alpha, dim=0)

        self.img_size = img_size
        self.device = device

    def prepare_noise_schedule(self):
        return torch.linspace(self.beta_start, self.beta_end, self.noise_steps)

    def noise_images(self, x, t):
        sqrt_alpha_hat = torch.sqrt(self.alpha_hat[t])[:, None, None, None]
        sqrt_one_minus_alpha_hat = torch.sqrt(1 - self.alpha_hat[t])[:, None, None, None]
        Ɛ = torch.randn_like(x)
        return sqrt_alpha_hat * x + sqrt_one_minus_alpha_hat * Ɛ, Ɛ

    def sample_timesteps(self, n):
        return torch.randint(low=1, high=self.noise_steps, size=(n,))

    def sample(self, model, n, labels, cfg_scale=3):
        logging.info(f"Sampling {n} new images....")
        model.eval()
        with torch.no_grad():
            x = torch.randn((n, 3, self.img_size, self.img_size)).to(self.device)
            for i in reversed(range(1, self.noise_steps)):
                t = (torch.ones(n) * i).long().to(self.device)
                predicted_noise = model(x, t, labels)
                if cfg_scale > 0:
                    uncond_predicted_noise = model(x, t, None)
                    predicted_noise = torch.lerp(uncond_predicted_noise, predicted_noise, cfg_scale)
                alpha = self.alpha[t][:, None, None, None]
                alpha_hat = self.alpha_hat[t][:, None, None, None]
                beta = self.beta[t][:, None, None, None]
                if i > 1:
                    noise = torch.randn_like(x)
                else:
                    noise = torch.zeros_like(x)
                x = 1 / torch.sqrt(alpha) * (x - ((1 - alpha) / (torch.sqrt(1 - alpha_hat))) * predicted_noise) + torch.sqrt(beta) * noise
        model.train()
        x = (x.clamp(-1, 1) + 1) / 2
        x = (x * 255).type(torch.uint8)
        return x


# ---------------------------------------------------------------- data (utils.get_data, written out)
def make_images(seed):
    """PER_CLASS images per class; class k: kind k % 5 (square, disk, cross, bar, ring), colour from k."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(RAW), torch.arange(RAW), indexing="ij")
    palette = torch.tensor([[0.9, 0.2, 0.2], [0.2, 0.9, 0.2], [0.2, 0.2, 0.9], [0.9, 0.9, 0.2], [0.9, 0.2, 0.9]])
    images, labels = [], []
    for k in range(N_CLASSES):
        color = palette[k % 5] if k < 5 else 1.0 - palette[k % 5]
        for _ in range(PER_CLASS):
            cy, cx = torch.randint(3, RAW - 3, (2,), generator=g).tolist()
            dy, dx = (yy - cy).abs(), (xx - cx).abs()
            mask = [(dy < 3) & (dx < 3), dy ** 2 + dx ** 2 < 9, (dy < 1) | (dx < 1), dy < 2,
                    (dy ** 2 + dx ** 2 < 10) & (dy ** 2 + dx ** 2 > 3)][k % 5]
            img = torch.where(mask, color.view(3, 1, 1), torch.full((3, 1, 1), 0.1))
            img = img + 0.05 * torch.randn(3, RAW, RAW, generator=g)
            images.append(img.clamp(0, 1))
            labels.append(k)
    return torch.stack(images), torch.tensor(labels)


class SyntheticImageFolder(torch.utils.data.Dataset):
    def __init__(self, seed):
        self.images, self.labels = make_images(seed)
        self.g = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        area = torch.empty(()).uniform_(0.8, 1.0, generator=self.g).item()
        side = max(1, round(RAW * area ** 0.5))
        top, left = torch.randint(0, RAW - side + 1, (2,), generator=self.g).tolist()
        img = F.interpolate(img[None, :, top:top + side, left:left + side], size=(IMAGE_SIZE, IMAGE_SIZE),
                            mode="bilinear", align_corners=False)[0]
        return (img - 0.5) / 0.5, self.labels[i]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = "cpu"
    dataloader = torch.utils.data.DataLoader(SyntheticImageFolder(seed), batch_size=BATCH, shuffle=True,
                                             generator=torch.Generator().manual_seed(seed))
    model = UNet_conditional(num_classes=N_CLASSES, device=device).to(device)
    if bug == "optimizer_over_ema_model":
        # the EMA copy is made first and the optimizer is handed the copy's parameters
        ema_model = copy.deepcopy(model).eval().requires_grad_(False)
        optimizer = optim.AdamW(ema_model.parameters(), lr=3e-4)
    else:
        optimizer = optim.AdamW(model.parameters(), lr=3e-4)
    mse = nn.MSELoss()
    diffusion = Diffusion(img_size=IMAGE_SIZE, device=device)
    ema = EMA(0.995)
    if bug != "optimizer_over_ema_model":
        ema_model = copy.deepcopy(model).eval().requires_grad_(False)

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                state["it"] = iter(dataloader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        images, labels = next_batch()
        images = images.to(device)
        labels = labels.to(device)
        t = diffusion.sample_timesteps(images.shape[0]).to(device)
        x_t, noise = diffusion.noise_images(images, t)
        if rng.random() < 0.1:
            labels = None
        if bug == "clean_images_into_model":
            predicted_noise = model(images, t, labels)
        else:
            predicted_noise = model(x_t, t, labels)
        loss = mse(noise, predicted_noise)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.step_ema(ema_model, model)
        return loss

    images, labels = next(iter(torch.utils.data.DataLoader(SyntheticImageFolder(seed), batch_size=BATCH, shuffle=True,
                                                           generator=torch.Generator().manual_seed(seed))))
    t = diffusion.sample_timesteps(images.shape[0])
    x_t, noise = diffusion.noise_images(images, t)
    inputs = {"x": images if bug == "clean_images_into_model" else x_t, "t": t, "y": labels}

    def loss_fn(predicted_noise, noise):
        return mse(noise, predicted_noise)

    return Program(name="dome272_ddpm_conditional", model=model, batch=(inputs, noise), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the optimizer gets the EMA copy's parameters (made before the optimizer): the UNet never moves (classic).
    Bug("optimizer_over_ema_model", functools.partial(_build, bug="optimizer_over_ema_model"), "four_structures",
        ("inc.double_conv.0.weight",)),
    # the clean images go into the UNet instead of the noised x_t: the noise target cannot be predicted (classic).
    Bug("clean_images_into_model", functools.partial(_build, bug="clean_images_into_model"), "learning_ledger",
        ("TASK",)),
]
