"""The model, scheduler and EMA of filipbasara0/simple-diffusion, for the port ``simplediffusion_ddim.py``: the UNet
(``model/unet.py``: time-embedded GroupNorm residual blocks, space-to-depth downsampling, linear-free attention with an
RMSNorm pre-norm at the lower resolutions, nearest upsampling, skip concatenation), ``model/_attention.py``,
``scheduler/ddim.py`` (cosine betas, ``add_noise``; the sampler left out) and ``ema.py`` (lerp EMA with a cosine
gamma schedule), as written except for einops (written out below) and the switch of the port's EMA bug.

Source: https://github.com/filipbasara0/simple-diffusion
Commit: c123f983b111937976bf7c484ef0178f9f9ce8cd
Files: simple_diffusion/model/unet.py, simple_diffusion/model/_attention.py, simple_diffusion/scheduler/ddim.py,
simple_diffusion/ema.py
License: MIT (Copyright (c) 2022 Filip Basara; full text in LICENSES/filipbasara0-simple-diffusion.txt)

einops written out: ``Rearrange('b c (h p1) (w p2) -> b (c p1 p2) h w', p1=2, p2=2)`` is ``nn.PixelUnshuffle(2)``
(the same channel order); the attention's ``rearrange`` calls are ``reshape``/``transpose`` and its ``einsum`` calls
``torch.einsum`` with the same subscripts.
"""
# ruff: noqa: UP008, B006, RUF059

import copy
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# ---- model/_attention.py ------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):

    def __init__(self, dim):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1, dim, 1, 1))

    def forward(self, x):
        return F.normalize(x, dim=1) * self.g * (x.shape[1]**0.5)


class Attention(nn.Module):

    def __init__(self, dim, heads=4, dim_head=32, use_flash_attn=False):
        super().__init__()
        self.scale = dim_head**-0.5
        self.heads = heads
        hidden_dim = dim_head * heads
        self.use_flash_attn = use_flash_attn

        self.to_qkv = nn.Conv2d(dim, hidden_dim * 3, 1, bias=False)
        self.to_out = nn.Conv2d(hidden_dim, dim, 1)

        self.norm = RMSNorm(dim)

    def forward(self, x):
        b, c, h, w = x.shape

        qkv = self.to_qkv(self.norm(x)).chunk(3, dim=1)
        # (port) rearrange(t, 'b (h c) x y -> b h c (x y)', h=self.heads)
        q, k, v = (t.reshape(b, self.heads, -1, h * w) for t in qkv)

        q = q * self.scale
        sim = torch.einsum('b h d i, b h d j -> b h i j', q, k)
        attn = sim.softmax(dim=-1)
        out = torch.einsum('b h i j, b h d j -> b h i d', attn, v)
        # (port) rearrange(out, 'b h (x y) d -> b (h d) x y', x=h, y=w)
        out = out.transpose(2, 3).reshape(b, -1, h, w)

        return self.to_out(out) + x


# ---- model/unet.py ------------------------------------------------------------------------------------------------

def get_downsample_layer(in_dim, hidden_dim, is_last):
    if not is_last:
        return nn.Sequential(
            nn.PixelUnshuffle(2),  # (port) Rearrange('b c (h p1) (w p2) -> b (c p1 p2) h w', p1=2, p2=2)
            nn.Conv2d(in_dim * 4, hidden_dim, 1))
    else:
        return nn.Conv2d(in_dim, hidden_dim, 3, padding=1)


def get_attn_layer(in_dim, use_full_attn, use_flash_attn):
    if use_full_attn:
        return Attention(in_dim, use_flash_attn=use_flash_attn)
    else:
        return nn.Identity()


def get_upsample_layer(in_dim, hidden_dim, is_last):
    if not is_last:
        return nn.Sequential(nn.Upsample(scale_factor=2, mode='nearest'),
                             nn.Conv2d(in_dim, hidden_dim, 3, padding=1))
    else:
        return nn.Conv2d(in_dim, hidden_dim, 3, padding=1)


def sinusoidal_embedding(timesteps, dim):
    half_dim = dim // 2
    exponent = -math.log(10000) * torch.arange(
        start=0, end=half_dim, dtype=torch.float32)
    exponent = exponent / (half_dim - 1.0)

    emb = torch.exp(exponent).to(device=timesteps.device)
    emb = timesteps[:, None].float() * emb[None, :]

    return torch.cat([emb.sin(), emb.cos()], dim=-1)


class ResidualBlock(nn.Module):

    def __init__(self, in_channels, out_channels, temb_channels, kernel_size=3, stride=1, padding=1, groups=8):
        super(ResidualBlock, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels

        self.time_emb_proj = nn.Sequential(
            nn.SiLU(), torch.nn.Linear(temb_channels, out_channels))

        self.residual_conv = nn.Conv2d(
            in_channels, out_channels=out_channels,
            kernel_size=1) if in_channels != out_channels else nn.Identity()

        self.conv1 = nn.Conv2d(in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                               padding=padding)
        self.conv2 = nn.Conv2d(out_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                               padding=padding)

        self.norm1 = nn.GroupNorm(num_channels=out_channels, num_groups=groups)
        self.norm2 = nn.GroupNorm(num_channels=out_channels, num_groups=groups)
        self.nonlinearity = nn.SiLU()

    def forward(self, x, temb):
        residual = self.residual_conv(x)

        x = self.conv1(x)
        x = self.norm1(x)
        x = self.nonlinearity(x)

        temb = self.time_emb_proj(temb)
        x += temb[:, :, None, None]

        x = self.conv2(x)
        x = self.norm2(x)
        x = self.nonlinearity(x)

        return x + residual


class UNet(nn.Module):

    def __init__(self, in_channels, hidden_dims=[64, 128, 256, 512], image_size=64, use_flash_attn=False):
        super(UNet, self).__init__()

        self.sample_size = image_size
        self.in_channels = in_channels
        self.hidden_dims = hidden_dims

        timestep_input_dim = hidden_dims[0]
        time_embed_dim = timestep_input_dim * 4

        self.time_embedding = nn.Sequential(
            nn.Linear(timestep_input_dim, time_embed_dim), nn.SiLU(),
            nn.Linear(time_embed_dim, time_embed_dim))

        self.init_conv = nn.Conv2d(in_channels, out_channels=hidden_dims[0], kernel_size=3, stride=1, padding=1)

        down_blocks = []

        in_dim = hidden_dims[0]
        for idx, hidden_dim in enumerate(hidden_dims[1:]):
            is_last = idx >= (len(hidden_dims) - 2)
            is_first = idx == 0
            use_attn = True if use_flash_attn else not is_first
            down_blocks.append(
                nn.ModuleList([
                    ResidualBlock(in_dim, in_dim, time_embed_dim),
                    ResidualBlock(in_dim, in_dim, time_embed_dim),
                    get_attn_layer(in_dim, use_attn, use_flash_attn),
                    get_downsample_layer(in_dim, hidden_dim, is_last)
                ]))
            in_dim = hidden_dim

        self.down_blocks = nn.ModuleList(down_blocks)

        mid_dim = hidden_dims[-1]
        self.mid_block1 = ResidualBlock(mid_dim, mid_dim, time_embed_dim)
        self.mid_attn = Attention(mid_dim)
        self.mid_block2 = ResidualBlock(mid_dim, mid_dim, time_embed_dim)

        up_blocks = []
        in_dim = mid_dim
        for idx, hidden_dim in enumerate(list(reversed(hidden_dims[:-1]))):
            is_last = idx >= (len(hidden_dims) - 2)
            use_attn = True if use_flash_attn else not is_last
            up_blocks.append(
                nn.ModuleList([
                    ResidualBlock(in_dim + hidden_dim, in_dim, time_embed_dim),
                    ResidualBlock(in_dim + hidden_dim, in_dim, time_embed_dim),
                    get_attn_layer(in_dim, use_attn, use_flash_attn),
                    get_upsample_layer(in_dim, hidden_dim, is_last)
                ]))
            in_dim = hidden_dim

        self.up_blocks = nn.ModuleList(up_blocks)

        self.out_block = ResidualBlock(hidden_dims[0] * 2, hidden_dims[0], time_embed_dim)
        self.conv_out = nn.Conv2d(hidden_dims[0], out_channels=3, kernel_size=1)

    def forward(self, sample, timesteps):
        if not torch.is_tensor(timesteps):
            timesteps = torch.tensor([timesteps], dtype=torch.long, device=sample.device)

        timesteps = torch.flatten(timesteps)
        timesteps = timesteps.broadcast_to(sample.shape[0])

        t_emb = sinusoidal_embedding(timesteps, self.hidden_dims[0])
        t_emb = self.time_embedding(t_emb)

        x = self.init_conv(sample)
        r = x.clone()

        skips = []
        for block1, block2, attn, downsample in self.down_blocks:
            x = block1(x, t_emb)
            skips.append(x)

            x = block2(x, t_emb)
            x = attn(x)
            skips.append(x)

            x = downsample(x)

        x = self.mid_block1(x, t_emb)
        x = self.mid_attn(x)
        x = self.mid_block2(x, t_emb)

        for block1, block2, attn, upsample in self.up_blocks:
            x = torch.cat((x, skips.pop()), dim=1)
            x = block1(x, t_emb)

            x = torch.cat((x, skips.pop()), dim=1)
            x = block2(x, t_emb)
            x = attn(x)

            x = upsample(x)

        x = self.out_block(torch.cat((x, r), dim=1), t_emb)
        out = self.conv_out(x)
        return {"sample": out}


# ---- scheduler/ddim.py (training side) ----------------------------------------------------------------------------

def cosine_beta_schedule(timesteps, beta_start=0.0, beta_end=0.999, s=0.008):
    steps = timesteps + 1
    x = torch.linspace(0, timesteps, steps, dtype=torch.float32)
    alphas_cumprod = torch.cos(((x / timesteps) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, beta_start, beta_end)


class DDIMScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="cosine",
                 clip_sample=True, set_alpha_to_one=True):
        self.num_train_timesteps = num_train_timesteps
        self.clip_sample = clip_sample
        self.betas = (
            cosine_beta_schedule(num_train_timesteps, beta_start, beta_end)
            if beta_schedule == "cosine"
            else torch.linspace(
                beta_start, beta_end, num_train_timesteps, dtype=torch.float32
            )
        )
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        self.final_alpha_cumprod = (
            torch.tensor(1.0) if set_alpha_to_one else self.alphas_cumprod[0]
        )
        self.timesteps = np.arange(num_train_timesteps)[::-1]

    def add_noise(self, original_samples, noise, timesteps):
        self.alphas_cumprod = self.alphas_cumprod.to(timesteps.device)
        sqrt_alpha_prod = self.alphas_cumprod[timesteps] ** 0.5
        sqrt_one_minus_alpha_prod = (1 - self.alphas_cumprod[timesteps]) ** 0.5
        return (
            sqrt_alpha_prod[:, None, None, None] * original_samples
            + sqrt_one_minus_alpha_prod[:, None, None, None] * noise
        )

    def __len__(self):
        return self.num_train_timesteps


# ---- ema.py -------------------------------------------------------------------------------------------------------

class EMA:
    def __init__(self, model, base_gamma, total_steps, bug=None):
        super().__init__()
        self.online_model = model

        self.ema_model = copy.deepcopy(self.online_model)
        self.ema_model.requires_grad_(False)

        self.base_gamma = base_gamma
        self.total_steps = total_steps
        self.bug = bug  # (port) the variant's switch

    def update_params(self, gamma):
        with torch.no_grad():
            valid_types = [torch.float, torch.float16]
            for o_param, t_param in self._get_params():
                if o_param.dtype in valid_types and t_param.dtype in valid_types:
                    if self.bug == "ema_update_reversed":
                        o_param.data.lerp_(t_param.data, 1. - gamma)
                    else:
                        t_param.data.lerp_(o_param.data, 1. - gamma)

            for o_buffer, t_buffer in self._get_buffers():
                if o_buffer.dtype in valid_types and t_buffer.dtype in valid_types:
                    t_buffer.data.lerp_(o_buffer.data, 1. - gamma)

    def _get_params(self):
        return zip(self.online_model.parameters(),
                   self.ema_model.parameters())

    def _get_buffers(self):
        return zip(self.online_model.buffers(),
                   self.ema_model.buffers())

    # cosine EMA schedule (increase from base_gamma to 1)
    # k -> current training step, K -> maximum number of training steps
    def update_gamma(self, current_step):
        k = torch.tensor(current_step, dtype=torch.float32)
        K = torch.tensor(self.total_steps, dtype=torch.float32)

        tau = 1 - (1 - self.base_gamma) * (torch.cos(torch.pi * k / K) + 1) / 2
        return tau.item()
