# ruff: noqa: UP004, UP032, PLR0402, BLE001, S110, RUF059
"""DDIM's diffusion training (``Diffusion.train``: noise-estimation loss, linear beta schedule, antithetic timestep
sampling, Adam with gradient clipping, EMA helper) on the repository's DDPM U-Net (``models/diffusion.py``) at a
tiny configuration, on synthetic images.

Source: https://github.com/ermongroup/ddim
Commit: e8df66cf02e457719930748b5c26e37e3126dfdd
Files: runners/diffusion.py (get_beta_schedule, Diffusion.__init__, Diffusion.train), functions/losses.py,
functions/__init__.py (get_optimizer), models/diffusion.py, models/ema.py, datasets/__init__.py (data_transform),
configs/cifar10.yml, main.py (dict2namespace)
License: MIT (Copyright (c) 2020 Jiaming Song; full text in LICENSES/ermongroup-ddim.txt)
Domain: diffusion (denoising diffusion, epsilon prediction)

Kept as written: the U-Net (``Model``: sinusoidal timestep embedding, ResnetBlocks with swish and GroupNorm(32),
AttnBlock, strided-conv Downsample with asymmetric padding, nearest Upsample + conv, skip concatenation),
``noise_estimation_loss`` (x = x0 sqrt(a) + e sqrt(1 - a) with a the cumulative product of 1 - beta at t; squared
error summed over pixels, mean over the batch), ``get_beta_schedule`` (linear, 1e-4 to 0.02, 1000 steps), the
antithetic sampling of t, ``data_transform`` (rescaled to [-1, 1]), ``get_optimizer`` (Adam lr 2e-4, weight decay
0, beta1 0.9, amsgrad False, eps 1e-8), the loop body (zero_grad, backward, ``clip_grad_norm_(grad_clip=1.0)``,
step, ``ema_helper.update``) and ``EMAHelper`` (mu = ema_rate 0.9999) as in configs/cifar10.yml.

Deviations from the original:
- sizes (configs/cifar10.yml): image_size 32 -> 8, ch 128 -> 32, ch_mult [1, 2, 2, 2] -> [1, 2], num_res_blocks
  2 -> 1, attn_resolutions [16] -> [4], batch_size 128 -> 16 (everything else in the config is kept);
- data: CIFAR-10 (torchvision download) is replaced by synthetic 3x8x8 images made from ``seed`` (a smooth colour
  gradient plus a 3x3 square of another colour at a random place, values in [0, 1]; 256 images);
  ``RandomHorizontalFlip`` (random_flip true) and ``ToTensor`` are written out in torch; ``num_workers`` 4 -> 0;
- ``torch.nn.DataParallel`` (a GPU wrapper) is left out, and the device is the CPU; tensorboard / logging and the
  checkpoint saving are dropped; ``train_step`` is one iteration of the inner ``for i, (x, y)`` loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as data

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

CONFIG = {
    "data": {"dataset": "CIFAR10", "image_size": 8, "channels": 3, "logit_transform": False,
             "uniform_dequantization": False, "gaussian_dequantization": False, "random_flip": True,
             "rescaled": True, "num_workers": 0},
    "model": {"type": "simple", "in_channels": 3, "out_ch": 3, "ch": 32, "ch_mult": [1, 2], "num_res_blocks": 1,
              "attn_resolutions": [4, ], "dropout": 0.1, "var_type": "fixedlarge", "ema_rate": 0.9999, "ema": True,
              "resamp_with_conv": True},
    "diffusion": {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "num_diffusion_timesteps": 1000},
    "training": {"batch_size": 16, "n_epochs": 10000, "n_iters": 5000000, "snapshot_freq": 5000,
                 "validation_freq": 2000},
    "optim": {"weight_decay": 0.000, "optimizer": "Adam", "lr": 0.0002, "beta1": 0.9, "amsgrad": False,
              "eps": 0.00000001, "grad_clip": 1.0},
}


# ---- main.py -----------------------------------------------------------------------------------------------------

def dict2namespace(config):
    namespace = argparse.Namespace()
    for key, value in config.items():
        if isinstance(value, dict):
            new_value = dict2namespace(value)
        else:
            new_value = value
        setattr(namespace, key, new_value)
    return namespace


# ---- functions/losses.py ----------------------------------------------------------------------------------------

def noise_estimation_loss(model,
                          x0: torch.Tensor,
                          t: torch.LongTensor,
                          e: torch.Tensor,
                          b: torch.Tensor, keepdim=False, bug=None):
    if bug == "alphas_not_cumulative":
        # the per-step alpha at t instead of its cumulative product: x_t keeps almost all of x0 and little noise
        a = (1-b).index_select(0, t).view(-1, 1, 1, 1)
    else:
        a = (1-b).cumprod(dim=0).index_select(0, t).view(-1, 1, 1, 1)
    x = x0 * a.sqrt() + e * (1.0 - a).sqrt()
    output = model(x, t.float())
    if keepdim:
        return (e - output).square().sum(dim=(1, 2, 3))
    else:
        return (e - output).square().sum(dim=(1, 2, 3)).mean(dim=0)


loss_registry = {
    'simple': noise_estimation_loss,
}


# ---- functions/__init__.py --------------------------------------------------------------------------------------

def get_optimizer(config, parameters):
    if config.optim.optimizer == 'Adam':
        return torch.optim.Adam(parameters, lr=config.optim.lr, weight_decay=config.optim.weight_decay,
                                betas=(config.optim.beta1, 0.999), amsgrad=config.optim.amsgrad,
                                eps=config.optim.eps)
    elif config.optim.optimizer == 'RMSProp':
        return torch.optim.RMSprop(parameters, lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    elif config.optim.optimizer == 'SGD':
        return torch.optim.SGD(parameters, lr=config.optim.lr, momentum=0.9)
    else:
        raise NotImplementedError(
            'Optimizer {} not understood.'.format(config.optim.optimizer))


# ---- models/ema.py ----------------------------------------------------------------------------------------------

class EMAHelper(object):
    def __init__(self, mu=0.999):
        self.mu = mu
        self.shadow = {}

    def register(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            if param.requires_grad:
                self.shadow[name] = param.data.clone()

    def update(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            if param.requires_grad:
                self.shadow[name].data = (
                    1. - self.mu) * param.data + self.mu * self.shadow[name].data

    def ema(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            if param.requires_grad:
                param.data.copy_(self.shadow[name].data)

    def state_dict(self):
        return self.shadow

    def load_state_dict(self, state_dict):
        self.shadow = state_dict


# ---- models/diffusion.py ----------------------------------------------------------------------------------------

def get_timestep_embedding(timesteps, embedding_dim):
    """
    This matches the implementation in Denoising Diffusion Probabilistic Models:
    From Fairseq.
    Build sinusoidal embeddings.
    This matches the implementation in tensor2tensor, but differs slightly
    from the description in Section 3.5 of "Attention Is All You Need".
    """
    assert len(timesteps.shape) == 1

    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float32) * -emb)
    emb = emb.to(device=timesteps.device)
    emb = timesteps.float()[:, None] * emb[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)
    if embedding_dim % 2 == 1:  # zero pad
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


def nonlinearity(x):
    # swish
    return x*torch.sigmoid(x)


def Normalize(in_channels):
    return torch.nn.GroupNorm(num_groups=32, num_channels=in_channels, eps=1e-6, affine=True)


class Upsample(nn.Module):
    def __init__(self, in_channels, with_conv):
        super().__init__()
        self.with_conv = with_conv
        if self.with_conv:
            self.conv = torch.nn.Conv2d(in_channels,
                                        in_channels,
                                        kernel_size=3,
                                        stride=1,
                                        padding=1)

    def forward(self, x):
        x = torch.nn.functional.interpolate(
            x, scale_factor=2.0, mode="nearest")
        if self.with_conv:
            x = self.conv(x)
        return x


class Downsample(nn.Module):
    def __init__(self, in_channels, with_conv):
        super().__init__()
        self.with_conv = with_conv
        if self.with_conv:
            # no asymmetric padding in torch conv, must do it ourselves
            self.conv = torch.nn.Conv2d(in_channels,
                                        in_channels,
                                        kernel_size=3,
                                        stride=2,
                                        padding=0)

    def forward(self, x):
        if self.with_conv:
            pad = (0, 1, 0, 1)
            x = torch.nn.functional.pad(x, pad, mode="constant", value=0)
            x = self.conv(x)
        else:
            x = torch.nn.functional.avg_pool2d(x, kernel_size=2, stride=2)
        return x


class ResnetBlock(nn.Module):
    def __init__(self, *, in_channels, out_channels=None, conv_shortcut=False,
                 dropout, temb_channels=512):
        super().__init__()
        self.in_channels = in_channels
        out_channels = in_channels if out_channels is None else out_channels
        self.out_channels = out_channels
        self.use_conv_shortcut = conv_shortcut

        self.norm1 = Normalize(in_channels)
        self.conv1 = torch.nn.Conv2d(in_channels,
                                     out_channels,
                                     kernel_size=3,
                                     stride=1,
                                     padding=1)
        self.temb_proj = torch.nn.Linear(temb_channels,
                                         out_channels)
        self.norm2 = Normalize(out_channels)
        self.dropout = torch.nn.Dropout(dropout)
        self.conv2 = torch.nn.Conv2d(out_channels,
                                     out_channels,
                                     kernel_size=3,
                                     stride=1,
                                     padding=1)
        if self.in_channels != self.out_channels:
            if self.use_conv_shortcut:
                self.conv_shortcut = torch.nn.Conv2d(in_channels,
                                                     out_channels,
                                                     kernel_size=3,
                                                     stride=1,
                                                     padding=1)
            else:
                self.nin_shortcut = torch.nn.Conv2d(in_channels,
                                                    out_channels,
                                                    kernel_size=1,
                                                    stride=1,
                                                    padding=0)

    def forward(self, x, temb):
        h = x
        h = self.norm1(h)
        h = nonlinearity(h)
        h = self.conv1(h)

        h = h + self.temb_proj(nonlinearity(temb))[:, :, None, None]

        h = self.norm2(h)
        h = nonlinearity(h)
        h = self.dropout(h)
        h = self.conv2(h)

        if self.in_channels != self.out_channels:
            if self.use_conv_shortcut:
                x = self.conv_shortcut(x)
            else:
                x = self.nin_shortcut(x)

        return x+h


class AttnBlock(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.in_channels = in_channels

        self.norm = Normalize(in_channels)
        self.q = torch.nn.Conv2d(in_channels,
                                 in_channels,
                                 kernel_size=1,
                                 stride=1,
                                 padding=0)
        self.k = torch.nn.Conv2d(in_channels,
                                 in_channels,
                                 kernel_size=1,
                                 stride=1,
                                 padding=0)
        self.v = torch.nn.Conv2d(in_channels,
                                 in_channels,
                                 kernel_size=1,
                                 stride=1,
                                 padding=0)
        self.proj_out = torch.nn.Conv2d(in_channels,
                                        in_channels,
                                        kernel_size=1,
                                        stride=1,
                                        padding=0)

    def forward(self, x):
        h_ = x
        h_ = self.norm(h_)
        q = self.q(h_)
        k = self.k(h_)
        v = self.v(h_)

        # compute attention
        b, c, h, w = q.shape
        q = q.reshape(b, c, h*w)
        q = q.permute(0, 2, 1)   # b,hw,c
        k = k.reshape(b, c, h*w)  # b,c,hw
        w_ = torch.bmm(q, k)     # b,hw,hw    w[b,i,j]=sum_c q[b,i,c]k[b,c,j]
        w_ = w_ * (int(c)**(-0.5))
        w_ = torch.nn.functional.softmax(w_, dim=2)

        # attend to values
        v = v.reshape(b, c, h*w)
        w_ = w_.permute(0, 2, 1)   # b,hw,hw (first hw of k, second of q)
        # b, c,hw (hw of q) h_[b,c,j] = sum_i v[b,c,i] w_[b,i,j]
        h_ = torch.bmm(v, w_)
        h_ = h_.reshape(b, c, h, w)

        h_ = self.proj_out(h_)

        return x+h_


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        ch, out_ch, ch_mult = config.model.ch, config.model.out_ch, tuple(config.model.ch_mult)
        num_res_blocks = config.model.num_res_blocks
        attn_resolutions = config.model.attn_resolutions
        dropout = config.model.dropout
        in_channels = config.model.in_channels
        resolution = config.data.image_size
        resamp_with_conv = config.model.resamp_with_conv
        num_timesteps = config.diffusion.num_diffusion_timesteps
        
        if config.model.type == 'bayesian':
            self.logvar = nn.Parameter(torch.zeros(num_timesteps))
        
        self.ch = ch
        self.temb_ch = self.ch*4
        self.num_resolutions = len(ch_mult)
        self.num_res_blocks = num_res_blocks
        self.resolution = resolution
        self.in_channels = in_channels

        # timestep embedding
        self.temb = nn.Module()
        self.temb.dense = nn.ModuleList([
            torch.nn.Linear(self.ch,
                            self.temb_ch),
            torch.nn.Linear(self.temb_ch,
                            self.temb_ch),
        ])

        # downsampling
        self.conv_in = torch.nn.Conv2d(in_channels,
                                       self.ch,
                                       kernel_size=3,
                                       stride=1,
                                       padding=1)

        curr_res = resolution
        in_ch_mult = (1,)+ch_mult
        self.down = nn.ModuleList()
        block_in = None
        for i_level in range(self.num_resolutions):
            block = nn.ModuleList()
            attn = nn.ModuleList()
            block_in = ch*in_ch_mult[i_level]
            block_out = ch*ch_mult[i_level]
            for i_block in range(self.num_res_blocks):
                block.append(ResnetBlock(in_channels=block_in,
                                         out_channels=block_out,
                                         temb_channels=self.temb_ch,
                                         dropout=dropout))
                block_in = block_out
                if curr_res in attn_resolutions:
                    attn.append(AttnBlock(block_in))
            down = nn.Module()
            down.block = block
            down.attn = attn
            if i_level != self.num_resolutions-1:
                down.downsample = Downsample(block_in, resamp_with_conv)
                curr_res = curr_res // 2
            self.down.append(down)

        # middle
        self.mid = nn.Module()
        self.mid.block_1 = ResnetBlock(in_channels=block_in,
                                       out_channels=block_in,
                                       temb_channels=self.temb_ch,
                                       dropout=dropout)
        self.mid.attn_1 = AttnBlock(block_in)
        self.mid.block_2 = ResnetBlock(in_channels=block_in,
                                       out_channels=block_in,
                                       temb_channels=self.temb_ch,
                                       dropout=dropout)

        # upsampling
        self.up = nn.ModuleList()
        for i_level in reversed(range(self.num_resolutions)):
            block = nn.ModuleList()
            attn = nn.ModuleList()
            block_out = ch*ch_mult[i_level]
            skip_in = ch*ch_mult[i_level]
            for i_block in range(self.num_res_blocks+1):
                if i_block == self.num_res_blocks:
                    skip_in = ch*in_ch_mult[i_level]
                block.append(ResnetBlock(in_channels=block_in+skip_in,
                                         out_channels=block_out,
                                         temb_channels=self.temb_ch,
                                         dropout=dropout))
                block_in = block_out
                if curr_res in attn_resolutions:
                    attn.append(AttnBlock(block_in))
            up = nn.Module()
            up.block = block
            up.attn = attn
            if i_level != 0:
                up.upsample = Upsample(block_in, resamp_with_conv)
                curr_res = curr_res * 2
            self.up.insert(0, up)  # prepend to get consistent order

        # end
        self.norm_out = Normalize(block_in)
        self.conv_out = torch.nn.Conv2d(block_in,
                                        out_ch,
                                        kernel_size=3,
                                        stride=1,
                                        padding=1)

    def forward(self, x, t):
        assert x.shape[2] == x.shape[3] == self.resolution

        # timestep embedding
        temb = get_timestep_embedding(t, self.ch)
        temb = self.temb.dense[0](temb)
        temb = nonlinearity(temb)
        temb = self.temb.dense[1](temb)

        # downsampling
        hs = [self.conv_in(x)]
        for i_level in range(self.num_resolutions):
            for i_block in range(self.num_res_blocks):
                h = self.down[i_level].block[i_block](hs[-1], temb)
                if len(self.down[i_level].attn) > 0:
                    h = self.down[i_level].attn[i_block](h)
                hs.append(h)
            if i_level != self.num_resolutions-1:
                hs.append(self.down[i_level].downsample(hs[-1]))

        # middle
        h = hs[-1]
        h = self.mid.block_1(h, temb)
        h = self.mid.attn_1(h)
        h = self.mid.block_2(h, temb)

        # upsampling
        for i_level in reversed(range(self.num_resolutions)):
            for i_block in range(self.num_res_blocks+1):
                h = self.up[i_level].block[i_block](
                    torch.cat([h, hs.pop()], dim=1), temb)
                if len(self.up[i_level].attn) > 0:
                    h = self.up[i_level].attn[i_block](h)
            if i_level != 0:
                h = self.up[i_level].upsample(h)

        # end
        h = self.norm_out(h)
        h = nonlinearity(h)
        h = self.conv_out(h)
        return h


# ---- datasets/__init__.py ---------------------------------------------------------------------------------------

def data_transform(config, X):
    if config.data.uniform_dequantization:
        X = X / 256.0 * 255.0 + torch.rand_like(X) / 256.0
    if config.data.gaussian_dequantization:
        X = X + torch.randn_like(X) * 0.01

    if config.data.rescaled:
        X = 2 * X - 1.0

    return X


class SyntheticImages(data.Dataset):
    """Replaces CIFAR10: a smooth colour gradient plus a 3x3 square of another colour (values in [0, 1])."""

    def __init__(self, seed, n=256, size=8, random_flip=True):
        gen = torch.Generator().manual_seed(seed)
        ramp = torch.linspace(0, 1, size)
        c0, c1, c2 = (torch.rand(n, 3, 1, 1, generator=gen) for _ in range(3))
        images = (c0 * (1 - ramp.view(1, 1, size, 1)) + c1 * ramp.view(1, 1, size, 1)).expand(n, 3, size, size).clone()
        pos = torch.randint(0, size - 3, (n, 2), generator=gen)
        for i in range(n):
            r, q = pos[i].tolist()
            images[i, :, r:r + 3, q:q + 3] = c2[i]
        self.images = images.clamp(0, 1)
        self.random_flip = random_flip
        self.gen = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if self.random_flip and torch.rand(1, generator=self.gen).item() < 0.5:  # RandomHorizontalFlip(p=0.5)
            x = x.flip(-1)
        return x, 0


# ---- runners/diffusion.py ---------------------------------------------------------------------------------------

def get_beta_schedule(beta_schedule, *, beta_start, beta_end, num_diffusion_timesteps):
    def sigmoid(x):
        return 1 / (np.exp(-x) + 1)

    if beta_schedule == "quad":
        betas = (
            np.linspace(
                beta_start ** 0.5,
                beta_end ** 0.5,
                num_diffusion_timesteps,
                dtype=np.float64,
            )
            ** 2
        )
    elif beta_schedule == "linear":
        betas = np.linspace(
            beta_start, beta_end, num_diffusion_timesteps, dtype=np.float64
        )
    elif beta_schedule == "const":
        betas = beta_end * np.ones(num_diffusion_timesteps, dtype=np.float64)
    elif beta_schedule == "jsd":  # 1/T, 1/(T-1), 1/(T-2), ..., 1
        betas = 1.0 / np.linspace(
            num_diffusion_timesteps, 1, num_diffusion_timesteps, dtype=np.float64
        )
    elif beta_schedule == "sigmoid":
        betas = np.linspace(-6, 6, num_diffusion_timesteps)
        betas = sigmoid(betas) * (beta_end - beta_start) + beta_start
    else:
        raise NotImplementedError(beta_schedule)
    assert betas.shape == (num_diffusion_timesteps,)
    return betas


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = dict2namespace(CONFIG)
    device = torch.device("cpu")

    # Diffusion.__init__
    betas = get_beta_schedule(
        beta_schedule=config.diffusion.beta_schedule,
        beta_start=config.diffusion.beta_start,
        beta_end=config.diffusion.beta_end,
        num_diffusion_timesteps=config.diffusion.num_diffusion_timesteps,
    )
    betas = torch.from_numpy(betas).float().to(device)
    num_timesteps = betas.shape[0]

    # Diffusion.train
    dataset = SyntheticImages(seed, size=config.data.image_size, random_flip=config.data.random_flip)
    train_loader = data.DataLoader(
        dataset,
        batch_size=config.training.batch_size,
        shuffle=True,
        num_workers=config.data.num_workers,
        generator=torch.Generator().manual_seed(seed),
    )
    model = Model(config)

    model = model.to(device)

    optimizer = get_optimizer(config, model.parameters())

    if config.model.ema:
        ema_helper = EMAHelper(mu=config.model.ema_rate)
        ema_helper.register(model)
    else:
        ema_helper = None

    state = {"it": None, "step": 0}

    def next_batch():
        while True:
            if state["it"] is None:
                state["it"] = iter(train_loader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        x, y = next_batch()
        n = x.size(0)
        model.train()
        state["step"] += 1

        x = x.to(device)
        x = data_transform(config, x)
        e = torch.randn_like(x)
        b = betas

        # antithetic sampling
        t = torch.randint(
            low=0, high=num_timesteps, size=(n // 2 + 1,)
        ).to(device)
        t = torch.cat([t, num_timesteps - t - 1], dim=0)[:n]
        loss = loss_registry[config.model.type](model, x, t, e, b, bug=bug)

        optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            # the gradient cleared between backward and step: every update is zero
            optimizer.zero_grad()

        try:
            torch.nn.utils.clip_grad_norm_(
                model.parameters(), config.optim.grad_clip
            )
        except Exception:
            pass
        optimizer.step()

        if config.model.ema:
            ema_helper.update(model)
        return loss.detach()

    # one batch as the model sees it: x_t and t in, the noise e as target
    x0 = data_transform(config, next(iter(data.DataLoader(dataset, batch_size=config.training.batch_size)))[0])
    gen = torch.Generator().manual_seed(seed + 2)
    e = torch.randn(x0.shape, generator=gen)
    t = torch.randint(0, num_timesteps, (x0.shape[0],), generator=gen)
    if bug == "alphas_not_cumulative":
        a = (1 - betas).index_select(0, t).view(-1, 1, 1, 1)
    else:
        a = (1 - betas).cumprod(dim=0).index_select(0, t).view(-1, 1, 1, 1)
    x = x0 * a.sqrt() + e * (1.0 - a).sqrt()

    def loss_fn(output, e):
        return (e - output).square().sum(dim=(1, 2, 3)).mean(dim=0)

    return Program(name="ddim_diffusion", model=model, batch=({"x": x, "t": t.float()}, e), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the noise level taken from the per-step alpha instead of its cumulative product (classic schedule slip): x_t is
    # nearly the clean image, and the noise the model must estimate is barely in its input.
    Bug("alphas_not_cumulative", functools.partial(_build, bug="alphas_not_cumulative"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() repeated after loss.backward() (classic): clipping and the step see a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        (), kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
