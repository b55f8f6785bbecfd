"""DDPM on CIFAR-10 of zoubohao/DenoisingDiffusionProbabilityModel-ddpm-: the UNet of ``Diffusion/Model.py``
(sinusoidal time embedding from ``nn.Embedding.from_pretrained`` + two linears, GroupNorm-Swish ResBlocks with the
time projection added, self-attention blocks, strided-conv down- and nearest up-sampling, skip concatenation,
Xavier init with the output conv at gain 1e-5); ``GaussianDiffusionTrainer`` (linear betas in double precision,
``x_t`` from ``sqrt_alphas_bar`` and ``sqrt_one_minus_alphas_bar``, per-element MSE between the predicted and the
drawn noise); ``Train.train``: ``optimizer.zero_grad()``, ``loss = trainer(x_0).sum() / 1000.``, ``backward``,
``clip_grad_norm_`` (1.0), ``step``; AdamW (lr 1e-4, weight decay 1e-4) with ``GradualWarmupScheduler``
(multiplier 2, warm-up a tenth of the epochs) handing over to ``CosineAnnealingLR``, stepped per epoch;
``RandomHorizontalFlip`` + ``Normalize(0.5, 0.5)`` on the images.

Source: https://github.com/zoubohao/DenoisingDiffusionProbabilityModel-ddpm-
Commit: 54532d61d4007cd743d414db500414499300325a
Files: Diffusion/Model.py, Diffusion/Diffusion.py, Diffusion/Train.py, Scheduler.py, Main.py
License: MIT (Copyright (c) 2022 ZOUbohao; full text in LICENSES/zoubohao-DenoisingDiffusionProbabilityModel-ddpm-.txt)
Domain: diffusion (unconditional DDPM, epsilon prediction, UNet with attention)

Deviations from the original:
- sizes (2 CPU cores): channel 128 -> 32 (GroupNorm(32, .) needs a multiple of 32), channel_mult [1, 2, 3, 4] ->
  [1, 2], attn [2] -> [1], num_res_blocks 2 -> 1, batch_size 80 -> 8, images 32x32 -> 8x8, epoch 200 -> 40
  (so the warm-up lasts 4 epochs); T 1000, beta_1 1e-4, beta_T 0.02, dropout 0.15, lr 1e-4, multiplier 2,
  grad_clip 1.0 unchanged.
- data: torchvision's CIFAR10 download is replaced by 32 synthetic 8x8 RGB images made from ``seed`` (a
  coloured square on a two-colour vertical gradient), scaled to [0, 1] as ``ToTensor`` gives them; the
  transforms (``RandomHorizontalFlip``, ``Normalize((0.5,)*3, (0.5,)*3)``) are written out in plain torch (there
  is no torchvision here); DataLoader with shuffle and drop_last, no workers, no pin_memory.
- ``.to(device)`` / cuda, tqdm, checkpoint saving and loading are left out.
- one ``train_step`` is one iteration of the inner ``for images, labels in tqdmDataLoader`` loop; at the end of
  each pass over the loader ``warmUpScheduler.step()`` runs, as after the original's inner loop. It returns the
  loss.
- the program declares the UNet as the model; its batch is one ``(x_t, t)`` drawn as the trainer draws it, the
  target the drawn noise, and ``loss_fn`` the trainer's MSE with the loop's ``.sum() / 1000.``.
- ``Scheduler.GradualWarmupScheduler`` is copied as written (its ``super().__init__`` call on a recent torch).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, C419, RUF059  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn
from torch.nn import init
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

modelConfig = {
    "state": "train",
    "epoch": 40,
    "batch_size": 8,
    "T": 1000,
    "channel": 32,
    "channel_mult": [1, 2],
    "attn": [1],
    "num_res_blocks": 1,
    "dropout": 0.15,
    "lr": 1e-4,
    "multiplier": 2.,
    "beta_1": 1e-4,
    "beta_T": 0.02,
    "img_size": 8,
    "grad_clip": 1.,
}
N_IMAGES = 32


# ---- Diffusion/Model.py --------------------------------------------------------------------------------------

class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class TimeEmbedding(nn.Module):
    def __init__(self, T, d_model, dim):
        assert d_model % 2 == 0
        super().__init__()
        emb = torch.arange(0, d_model, step=2) / d_model * math.log(10000)
        emb = torch.exp(-emb)
        pos = torch.arange(T).float()
        emb = pos[:, None] * emb[None, :]
        assert list(emb.shape) == [T, d_model // 2]
        emb = torch.stack([torch.sin(emb), torch.cos(emb)], dim=-1)
        assert list(emb.shape) == [T, d_model // 2, 2]
        emb = emb.view(T, d_model)

        self.timembedding = nn.Sequential(
            nn.Embedding.from_pretrained(emb),
            nn.Linear(d_model, dim),
            Swish(),
            nn.Linear(dim, dim),
        )
        self.initialize()

    def initialize(self):
        for module in self.modules():
            if isinstance(module, nn.Linear):
                init.xavier_uniform_(module.weight)
                init.zeros_(module.bias)

    def forward(self, t):
        emb = self.timembedding(t)
        return emb


class DownSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.main = nn.Conv2d(in_ch, in_ch, 3, stride=2, padding=1)
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.main.weight)
        init.zeros_(self.main.bias)

    def forward(self, x, temb):
        x = self.main(x)
        return x


class UpSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.main = nn.Conv2d(in_ch, in_ch, 3, stride=1, padding=1)
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.main.weight)
        init.zeros_(self.main.bias)

    def forward(self, x, temb):
        _, _, H, W = x.shape
        x = F.interpolate(
            x, scale_factor=2, mode='nearest')
        x = self.main(x)
        return x


class AttnBlock(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.group_norm = nn.GroupNorm(32, in_ch)
        self.proj_q = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_k = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_v = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.initialize()

    def initialize(self):
        for module in [self.proj_q, self.proj_k, self.proj_v, self.proj]:
            init.xavier_uniform_(module.weight)
            init.zeros_(module.bias)
        init.xavier_uniform_(self.proj.weight, gain=1e-5)

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x)
        q = self.proj_q(h)
        k = self.proj_k(h)
        v = self.proj_v(h)

        q = q.permute(0, 2, 3, 1).view(B, H * W, C)
        k = k.view(B, C, H * W)
        w = torch.bmm(q, k) * (int(C) ** (-0.5))
        assert list(w.shape) == [B, H * W, H * W]
        w = F.softmax(w, dim=-1)

        v = v.permute(0, 2, 3, 1).view(B, H * W, C)
        h = torch.bmm(w, v)
        assert list(h.shape) == [B, H * W, C]
        h = h.view(B, H, W, C).permute(0, 3, 1, 2)
        h = self.proj(h)

        return x + h


class ResBlock(nn.Module):
    def __init__(self, in_ch, out_ch, tdim, dropout, attn=False):
        super().__init__()
        self.block1 = nn.Sequential(
            nn.GroupNorm(32, in_ch),
            Swish(),
            nn.Conv2d(in_ch, out_ch, 3, stride=1, padding=1),
        )
        self.temb_proj = nn.Sequential(
            Swish(),
            nn.Linear(tdim, out_ch),
        )
        self.block2 = nn.Sequential(
            nn.GroupNorm(32, out_ch),
            Swish(),
            nn.Dropout(dropout),
            nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1),
        )
        if in_ch != out_ch:
            self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride=1, padding=0)
        else:
            self.shortcut = nn.Identity()
        if attn:
            self.attn = AttnBlock(out_ch)
        else:
            self.attn = nn.Identity()
        self.initialize()

    def initialize(self):
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                init.xavier_uniform_(module.weight)
                init.zeros_(module.bias)
        init.xavier_uniform_(self.block2[-1].weight, gain=1e-5)

    def forward(self, x, temb):
        h = self.block1(x)
        h += self.temb_proj(temb)[:, :, None, None]
        h = self.block2(h)

        h = h + self.shortcut(x)
        h = self.attn(h)
        return h


class UNet(nn.Module):
    def __init__(self, T, ch, ch_mult, attn, num_res_blocks, dropout):
        super().__init__()
        assert all([i < len(ch_mult) for i in attn]), 'attn index out of bound'
        tdim = ch * 4
        self.time_embedding = TimeEmbedding(T, ch, tdim)

        self.head = nn.Conv2d(3, ch, kernel_size=3, stride=1, padding=1)
        self.downblocks = nn.ModuleList()
        chs = [ch]  # record output channel when dowmsample for upsample
        now_ch = ch
        for i, mult in enumerate(ch_mult):
            out_ch = ch * mult
            for _ in range(num_res_blocks):
                self.downblocks.append(ResBlock(
                    in_ch=now_ch, out_ch=out_ch, tdim=tdim,
                    dropout=dropout, attn=(i in attn)))
                now_ch = out_ch
                chs.append(now_ch)
            if i != len(ch_mult) - 1:
                self.downblocks.append(DownSample(now_ch))
                chs.append(now_ch)

        self.middleblocks = nn.ModuleList([
            ResBlock(now_ch, now_ch, tdim, dropout, attn=True),
            ResBlock(now_ch, now_ch, tdim, dropout, attn=False),
        ])

        self.upblocks = nn.ModuleList()
        for i, mult in reversed(list(enumerate(ch_mult))):
            out_ch = ch * mult
            for _ in range(num_res_blocks + 1):
                self.upblocks.append(ResBlock(
                    in_ch=chs.pop() + now_ch, out_ch=out_ch, tdim=tdim,
                    dropout=dropout, attn=(i in attn)))
                now_ch = out_ch
            if i != 0:
                self.upblocks.append(UpSample(now_ch))
        assert len(chs) == 0

        self.tail = nn.Sequential(
            nn.GroupNorm(32, now_ch),
            Swish(),
            nn.Conv2d(now_ch, 3, 3, stride=1, padding=1)
        )
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.head.weight)
        init.zeros_(self.head.bias)
        init.xavier_uniform_(self.tail[-1].weight, gain=1e-5)
        init.zeros_(self.tail[-1].bias)

    def forward(self, x, t):
        # Timestep embedding
        temb = self.time_embedding(t)
        # Downsampling
        h = self.head(x)
        hs = [h]
        for layer in self.downblocks:
            h = layer(h, temb)
            hs.append(h)
        # Middle
        for layer in self.middleblocks:
            h = layer(h, temb)
        # Upsampling
        for layer in self.upblocks:
            if isinstance(layer, ResBlock):
                h = torch.cat([h, hs.pop()], dim=1)
            h = layer(h, temb)
        h = self.tail(h)

        assert len(hs) == 0
        return h



# ---- Diffusion/Diffusion.py -----------------------------------------------------------------------------------
def extract(v, t, x_shape):
    """
    Extract some coefficients at specified timesteps, then reshape to
    [batch_size, 1, 1, 1, 1, ...] for broadcasting purposes.
    """
    device = t.device
    out = torch.gather(v, index=t, dim=0).float().to(device)
    return out.view([t.shape[0]] + [1] * (len(x_shape) - 1))


class GaussianDiffusionTrainer(nn.Module):
    def __init__(self, model, beta_1, beta_T, T, bug=None):
        super().__init__()
        self.bug = bug

        self.model = model
        self.T = T

        self.register_buffer(
            'betas', torch.linspace(beta_1, beta_T, T).double())
        alphas = 1. - self.betas
        alphas_bar = torch.cumprod(alphas, dim=0)

        # calculations for diffusion q(x_t | x_{t-1}) and others
        self.register_buffer(
            'sqrt_alphas_bar', torch.sqrt(alphas_bar))
        self.register_buffer(
            'sqrt_one_minus_alphas_bar', torch.sqrt(1. - alphas_bar))

    def forward(self, x_0):
        """
        Algorithm 1.
        """
        t = torch.randint(self.T, size=(x_0.shape[0], ), device=x_0.device)
        noise = torch.randn_like(x_0)
        if self.bug == "coefficients_swapped":
            x_t = (
                extract(self.sqrt_one_minus_alphas_bar, t, x_0.shape) * x_0 +
                extract(self.sqrt_alphas_bar, t, x_0.shape) * noise)
        else:
            x_t = (
                extract(self.sqrt_alphas_bar, t, x_0.shape) * x_0 +
                extract(self.sqrt_one_minus_alphas_bar, t, x_0.shape) * noise)
        loss = F.mse_loss(self.model(x_t, t), noise, reduction='none')
        return loss



# ---- Scheduler.py -------------------------------------------------------------------------------------------

class GradualWarmupScheduler(_LRScheduler):
    def __init__(self, optimizer, multiplier, warm_epoch, after_scheduler=None):
        self.multiplier = multiplier
        self.total_epoch = warm_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        self.last_epoch = None
        self.base_lrs = None
        super().__init__(optimizer)

    def get_lr(self):
        if self.last_epoch > self.total_epoch:
            if self.after_scheduler:
                if not self.finished:
                    self.after_scheduler.base_lrs = [base_lr * self.multiplier for base_lr in self.base_lrs]
                    self.finished = True
                return self.after_scheduler.get_lr()
            return [base_lr * self.multiplier for base_lr in self.base_lrs]
        return [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]


    def step(self, epoch=None, metrics=None):
        if self.finished and self.after_scheduler:
            if epoch is None:
                self.after_scheduler.step(None)
            else:
                self.after_scheduler.step(epoch - self.total_epoch)
        else:
            return super(GradualWarmupScheduler, self).step(epoch)


# ---- data: CIFAR10 stand-in and the transforms written out ------------------------------------------------------

def make_images(gen, n, size):
    """A coloured square on a two-colour vertical gradient, values in [0, 1] (as ``ToTensor`` gives them)."""
    ramp = torch.linspace(0, 1, size).view(1, size, 1)
    imgs = torch.empty(n, 3, size, size)
    for i in range(n):
        top, bottom, fg = torch.rand(3, 3, generator=gen)
        img = top.view(3, 1, 1) * (1 - ramp) + bottom.view(3, 1, 1) * ramp
        img = img.expand(3, size, size).clone()
        s = int(torch.randint(2, 5, (1,), generator=gen))
        r, c = (int(v) for v in torch.randint(0, size - s, (2,), generator=gen))
        img[:, r:r + s, c:c + s] = fg.view(3, 1, 1)
        imgs[i] = img
    return imgs


class SyntheticCIFAR(Dataset):
    """``CIFAR10(train=True, transform=Compose([RandomHorizontalFlip(), ToTensor(), Normalize(...)]))``."""

    def __init__(self, images):
        self.images = images
        self.labels = torch.zeros(len(images), dtype=torch.long)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i]
        if torch.rand(1) < 0.5:  # transforms.RandomHorizontalFlip()
            img = img.flip(-1)
        img = (img - 0.5) / 0.5  # transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
        return img, self.labels[i]


# ---- Diffusion/Train.py: train --------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    # dataset
    dataset = SyntheticCIFAR(make_images(gen, N_IMAGES, modelConfig["img_size"]))
    dataloader = DataLoader(
        dataset, batch_size=modelConfig["batch_size"], shuffle=True, num_workers=0, drop_last=True,
        generator=torch.Generator().manual_seed(seed))

    # model setup
    net_model = UNet(T=modelConfig["T"], ch=modelConfig["channel"], ch_mult=modelConfig["channel_mult"], attn=modelConfig["attn"],
                     num_res_blocks=modelConfig["num_res_blocks"], dropout=modelConfig["dropout"])
    optimizer = torch.optim.AdamW(
        net_model.parameters(), lr=modelConfig["lr"], weight_decay=1e-4)
    cosineScheduler = optim.lr_scheduler.CosineAnnealingLR(
        optimizer=optimizer, T_max=modelConfig["epoch"], eta_min=0, last_epoch=-1)
    warmUpScheduler = GradualWarmupScheduler(
        optimizer=optimizer, multiplier=modelConfig["multiplier"], warm_epoch=modelConfig["epoch"] // 10, after_scheduler=cosineScheduler)
    trainer = GaussianDiffusionTrainer(
        net_model, modelConfig["beta_1"], modelConfig["beta_T"], modelConfig["T"], bug=bug)

    state = {"it": None}

    def next_images():
        while True:
            if state["it"] is None:
                state["it"] = iter(dataloader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None
                warmUpScheduler.step()

    def train_step():
        images, labels = next_images()
        # train
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        x_0 = images
        loss = trainer(x_0).sum() / 1000.
        loss.backward()
        if bug == "clip_after_step":
            optimizer.step()
            torch.nn.utils.clip_grad_norm_(
                net_model.parameters(), modelConfig["grad_clip"])
        else:
            torch.nn.utils.clip_grad_norm_(
                net_model.parameters(), modelConfig["grad_clip"])
            optimizer.step()
        return loss.detach()

    # one batch as the UNet sees it inside the trainer: x_t and t in, the drawn noise as target
    x_0 = (dataset.images[:modelConfig["batch_size"]] - 0.5) / 0.5
    g = torch.Generator().manual_seed(seed + 1)
    t = torch.randint(modelConfig["T"], size=(x_0.shape[0], ), generator=g)
    noise = torch.randn(x_0.shape, generator=g)
    if bug == "coefficients_swapped":
        x_t = (extract(trainer.sqrt_one_minus_alphas_bar, t, x_0.shape) * x_0 +
               extract(trainer.sqrt_alphas_bar, t, x_0.shape) * noise)
    else:
        x_t = (extract(trainer.sqrt_alphas_bar, t, x_0.shape) * x_0 +
               extract(trainer.sqrt_one_minus_alphas_bar, t, x_0.shape) * noise)

    def loss_fn(output, noise):
        return F.mse_loss(output, noise, reduction='none').sum() / 1000.

    return Program(name="zoubohaoddpm_unet", model=net_model, batch=({"x": x_t, "t": t}, noise), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the two coefficients of q(x_t | x_0) swapped (classic schedule slip): at most timesteps x_t is nearly the clean
    # image and the noise to be predicted is hardly in the input.
    Bug("coefficients_swapped", functools.partial(_build, bug="coefficients_swapped"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() dropped from the loop (classic): the gradients of every batch accumulate.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
    # clip_grad_norm_ moved after optimizer.step() (classic): the update uses the unclipped gradient.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
