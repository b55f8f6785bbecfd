"""Denoising diffusion (Ho et al.) from tqch's ddpm-torch, CIFAR-10 configuration: a linear beta schedule over 1000
steps, epsilon prediction with an unweighted MSE (``train_losses`` with ``loss_type="mse"``,
``model_mean_type="eps"``), the DDPM U-Net (variance-scaling init, GroupNorm 32, SiLU, residual blocks with a
time-embedding projection, attention at the second level and in the middle, conv resampling with TF-style same
padding), Adam with a linear warm-up stepped per iteration, gradient clipping by global norm 1.0, and an EMA of the
weights updated after every optimizer step (the ``Trainer.step`` of ``ddpm_torch/utils/train.py``).

Source: https://github.com/tqch/ddpm-torch
Commit: b60eb8deee899900c28525fd77ff53cdd26d6558
Files: train.py, configs/cifar10.json, ddpm_torch/diffusion.py, ddpm_torch/models/unet.py, ddpm_torch/modules.py,
ddpm_torch/functions.py, ddpm_torch/utils/train.py
License: MIT (Copyright (c) 2022 Tianqi Chen; full text in LICENSES/tqch-ddpm-torch.txt)
Domain: vision, generative model (DDPM: epsilon-prediction MSE, U-Net, warm-up, clipping, EMA)

Deviations from the original:
- sizes for 2 CPU cores: images 32x32 -> 8x8 (3 channels kept); the U-Net's ``hid_channels`` 128 -> 32 (GroupNorm's
  32 groups need it), ``ch_multipliers`` [1, 2, 2, 2] -> [1, 2], ``num_res_blocks`` 2 -> 1, ``apply_attn``
  [false, true, false, false] -> [false, true], ``drop_rate`` 0.1 kept; ``timesteps`` 1000 and the linear betas
  1e-4 -> 0.02 kept; batch_size 128 -> 16; lr 2e-4 -> 2e-3 and ``warmup`` 5000 -> 10 steps so that the 30 steps of
  the self-check show the loss falling; ``grad_norm`` 1.0 and ``ema_decay`` 0.9999 kept; ``num_accum`` 1 (default);
- data: torchvision's CIFAR-10 (ToTensor, Normalize to [-1, 1], random horizontal flip) is replaced by 256
  synthetic 8x8 RGB images made from ``seed`` (a coloured square on a dark background at a random position, with
  pixel noise), in [-1, 1]; the flip is written out as ``torch.flip`` with probability 0.5; the loader shuffles with
  a ``torch.Generator(seed)``, no workers;
- copied from ``GaussianDiffusion`` only what training uses (``__init__``, ``_extract``, ``q_sample``,
  ``train_losses``; the ``mse`` branch and the ``fixed-large`` variance table); sampling, the bpd terms, FID,
  distributed training (DDP, the loss all-reduce), checkpoints, image grids and the running statistics are dropped;
  ``Trainer``'s process-specific ``torch.Generator`` is seeded from ``seed``;
- one ``train_step`` is one ``Trainer.step`` (with ``global_steps`` counted up), returning the mean loss; the
  Program's model is the U-Net, its batch one ``get_input`` draw ``((x_t, t), noise)`` and ``loss_fn`` the
  flattened-mean MSE; ``eval_fn`` is the EMA model's loss on a fixed held-out draw (``with self.ema``, as the
  sampler uses it);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, C417, B008, C404

from __future__ import annotations

import functools
import math
import pathlib
import sys
import weakref
from collections.abc import Iterable
from contextlib import nullcontext
from itertools import repeat

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam, lr_scheduler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 8
N_IMAGES = 256


# ddpm_torch/modules.py
DEFAULT_DTYPE = torch.float32


def DEFAULT_INITIALIZER(x, scale=1.):
    """
    PyTorch Xavier uniform initialization: w ~ Uniform(-a, a), where a = gain * (6 / (fan_in + fan_out)) ** .5
    TensorFlow Variance-Scaling initialization (mode="fan_avg", distribution="uniform"):
    w ~ Uniform(-a, a), where a = (6 * scale / (fan_in + fan_out)) ** .5
    Therefore, gain = scale ** .5
    """
    return nn.init.xavier_uniform_(x, gain=math.sqrt(scale or 1e-10))


def ntuple(n, name="parse"):
    def parse(x):
        if isinstance(x, Iterable):
            return tuple(x)
        else:
            return tuple(repeat(x, n))
    parse.__name__ = name
    return parse


pair = ntuple(2, "pair")


class Linear(nn.Module):
    def __init__(
            self,
            in_features,
            out_features,
            bias=True,
            init_scale=1.
    ):
        super(Linear, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty((out_features, in_features), dtype=DEFAULT_DTYPE))
        if bias:
            self.bias = nn.Parameter(torch.empty((out_features, ), dtype=DEFAULT_DTYPE))
        else:
            self.register_parameter('bias', None)
        self.init_scale = init_scale
        self.reset_parameters()

    def reset_parameters(self):
        DEFAULT_INITIALIZER(self.weight, scale=self.init_scale)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f'in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}'


class Conv2d(nn.Module):
    def __init__(
            self,
            in_channels,
            out_channels,
            kernel_size,
            stride=1,
            padding=0,
            dilation=1,
            groups=1,
            bias=True,
            padding_mode="zeros",
            init_scale=1.
    ):
        super(Conv2d, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size = pair(kernel_size)
        self.weight = nn.Parameter(
            torch.empty((
                out_channels, in_channels // groups, kernel_size[0], kernel_size[1]
            ), dtype=DEFAULT_DTYPE))
        if bias:
            self.bias = nn.Parameter(torch.empty((out_channels, ), dtype=DEFAULT_DTYPE))
        else:
            self.register_parameter("bias", None)
        self.stride = pair(stride)
        self.padding = padding if isinstance(padding, str) else pair(padding)
        self.dilation = pair(dilation)
        self.groups = groups
        self.padding_mode = padding_mode
        self.init_scale = init_scale
        self.reset_parameter()

    def reset_parameter(self):
        DEFAULT_INITIALIZER(self.weight, scale=self.init_scale)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self):
        s = ('{in_channels}, {out_channels}, kernel_size={kernel_size}'
             ', stride={stride}')
        if self.padding != (0,) * len(self.padding):
            s += ', padding={padding}'
        if self.dilation != (1,) * len(self.dilation):
            s += ', dilation={dilation}'
        if self.groups != 1:
            s += ', groups={groups}'
        if self.bias is None:
            s += ', bias=False'
        if self.padding_mode != 'zeros':
            s += ', padding_mode={padding_mode}'
        return s.format(**self.__dict__)

    def forward(self, x):
        return F.conv2d(
            x, self.weight, self.bias, stride=self.stride, padding=self.padding,
            dilation=self.dilation, groups=self.groups)


class SamePad2d(nn.Module):
    def __init__(self, kernel_size, stride, mode="constant", value=0.0):
        super(SamePad2d, self).__init__()
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.mode = mode
        self.value = value

    def forward(self, x):
        _, _, h, w = x.shape
        (k1, k2), (s1, s2) = self.kernel_size, self.stride
        h_pad, w_pad = s1 * math.ceil(h / s1 - 1) + k1 - h, s2 * math.ceil(w / s2 - 1) + k2 - w
        top_pad, bottom_pad = (math.floor(h_pad / 2), math.ceil(h_pad / 2)) if h_pad else (0, 0)
        left_pad, right_pad = (math.floor(w_pad / 2), math.ceil(w_pad / 2)) if w_pad else (0, 0)
        x = F.pad(x, pad=(left_pad, right_pad, top_pad, bottom_pad), mode=self.mode, value=self.value)
        return x


class Sequential(nn.Sequential):
    def forward(self, input, **kwargs):
        for module in self:
            input = module(input, **kwargs)
        return input


# ddpm_torch/functions.py
def get_timestep_embedding(timesteps, embed_dim: int, dtype: torch.dtype = DEFAULT_DTYPE):
    """
    Adapted from fairseq/fairseq/modules/sinusoidal_positional_embedding.py
    The implementation is slightly different from the decription in Section 3.5 of [1]
    [1] Vaswani, Ashish, et al. "Attention is all you need."
     Advances in neural information processing systems 30 (2017).
    """
    half_dim = embed_dim // 2
    embed = math.log(10000) / (half_dim - 1)
    embed = torch.exp(-torch.arange(half_dim, dtype=dtype, device=timesteps.device) * embed)
    embed = torch.outer(timesteps.ravel().to(dtype), embed)
    embed = torch.cat([torch.sin(embed), torch.cos(embed)], dim=1)
    if embed_dim % 2 == 1:
        embed = F.pad(embed, [0, 1])  # padding the last dimension
    assert embed.dtype == dtype
    return embed



def flat_mean(x, start_dim=1):
    reduce_dim = [i for i in range(start_dim, x.ndim)]
    return torch.mean(x, dim=reduce_dim)


# ddpm_torch/diffusion.py
def _warmup_beta(beta_start, beta_end, timesteps, warmup_frac, dtype):
    betas = beta_end * torch.ones(timesteps, dtype=dtype)
    warmup_time = int(timesteps * warmup_frac)
    betas[:warmup_time] = torch.linspace(beta_start, beta_end, warmup_time, dtype=dtype)
    return betas


def get_beta_schedule(beta_schedule, beta_start, beta_end, timesteps, dtype=torch.float64):
    if beta_schedule == 'quad':
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, timesteps, dtype=dtype) ** 2
    elif beta_schedule == 'linear':
        betas = torch.linspace(beta_start, beta_end, timesteps, dtype=dtype)
    elif beta_schedule == 'warmup10':
        betas = _warmup_beta(beta_start, beta_end, timesteps, 0.1, dtype=dtype)
    elif beta_schedule == 'warmup50':
        betas = _warmup_beta(beta_start, beta_end, timesteps, 0.5, dtype=dtype)
    elif beta_schedule == 'const':
        betas = beta_end * torch.ones(timesteps, dtype=dtype)
    elif beta_schedule == 'jsd':  # 1/T, 1/(T-1), 1/(T-2), ..., 1
        betas = 1. / torch.linspace(timesteps, 1, timesteps, dtype=dtype)
    else:
        raise NotImplementedError(beta_schedule)
    assert betas.shape == (timesteps, )
    return betas


class GaussianDiffusion:

    def __init__(
            self,
            betas,
            model_mean_type,
            model_var_type,
            loss_type,
            **kwargs
    ):
        assert isinstance(betas, torch.Tensor) and betas.dtype == torch.float64
        assert (betas > 0).all() and (betas <= 1).all()
        self.betas = betas
        self.model_mean_type = model_mean_type
        self.model_var_type = model_var_type
        self.loss_type = loss_type
        self.bug = kwargs.get("bug")

        self.timesteps = len(betas)

        alphas = 1 - betas
        self.alphas_bar = torch.cumprod(alphas, dim=0)
        alphas_bar_prev = torch.cat([torch.as_tensor([1., ], dtype=torch.float64), self.alphas_bar[:-1]])

        # q(x_t | x_0)
        self.sqrt_alphas_bar = torch.sqrt(self.alphas_bar)
        self.sqrt_one_minus_alphas_bar = torch.sqrt(1. - self.alphas_bar)

        # q(x_{t-1} | x_t, x_0)
        # refer to the formula 1-3 in README.md
        sqrt_alphas_bar_prev = torch.sqrt(alphas_bar_prev)
        self.sqrt_recip_alphas_bar = torch.sqrt(1. / self.alphas_bar)
        self.sqrt_recip_m1_alphas_bar = torch.sqrt(1. / self.alphas_bar - 1.)  # m1: minus 1
        self.posterior_var = betas * (1. - alphas_bar_prev) / (1. - self.alphas_bar)
        self.posterior_logvar_clipped = torch.log(torch.cat([self.posterior_var[[1]], self.posterior_var[1:]]))
        self.posterior_mean_coef1 = betas * sqrt_alphas_bar_prev / (1. - self.alphas_bar)
        self.posterior_mean_coef2 = torch.sqrt(alphas) * (1. - alphas_bar_prev) / (1. - self.alphas_bar)

        # for fixed model_var_type's
        self.fixed_model_var, self.fixed_model_logvar = {
            "fixed-large": (self.betas, torch.log(torch.cat([self.posterior_var[[1]], self.betas[1:]]))),
            "fixed-small": (self.posterior_var, self.posterior_logvar_clipped)
        }[self.model_var_type]

    @staticmethod
    def _extract(
            arr, t, x,
            dtype=torch.float32, device=torch.device("cpu"), ndim=4):
        if x is not None:
            dtype = x.dtype
            device = x.device
            ndim = x.ndim
        out = torch.as_tensor(arr, dtype=dtype, device=device).gather(0, t)
        return out.reshape((-1, ) + (1, ) * (ndim - 1))

    def q_sample(self, x_0, t, noise=None):
        if noise is None:
            noise = torch.randn_like(x_0)
        coef1 = self._extract(self.sqrt_alphas_bar, t, x_0)
        coef2 = self._extract(self.sqrt_one_minus_alphas_bar, t, x_0)
        return coef1 * x_0 + coef2 * noise

    def train_losses(self, denoise_fn, x_0, t, noise=None):
        if noise is None:
            noise = torch.randn_like(x_0)
        x_t = self.q_sample(x_0, t, noise=noise)

        # calculate the loss
        # kl: weighted
        # mse: unweighted
        if self.loss_type == "kl":
            losses = self._loss_term_bpd(
                denoise_fn, x_0=x_0, x_t=x_t, t=t, clip_denoised=False, return_pred=False)
        elif self.loss_type == "mse":
            assert self.model_var_type != "learned"
            if self.model_mean_type == "mean":
                target = self.q_posterior_mean_var(x_0=x_0, x_t=x_t, t=t)[0]
            elif self.model_mean_type == "x_0":
                target = x_0
            elif self.model_mean_type == "eps":
                target = noise
                if self.bug == "target_noise_resampled":
                    target = torch.randn_like(x_0)
            else:
                raise NotImplementedError(self.model_mean_type)
            model_out = denoise_fn(x_t, t)
            losses = flat_mean((target - model_out).pow(2))
        else:
            raise NotImplementedError(self.loss_type)

        return losses


# ddpm_torch/models/unet.py
DEFAULT_NONLINEARITY = nn.SiLU()  # f(x)=x*sigmoid(x)


class DEFAULT_NORMALIZER(nn.GroupNorm):
    def __init__(self, num_channels, num_groups=32):
        super().__init__(num_groups=num_groups, num_channels=num_channels, eps=1e-6)  # PyTorch default eps is 1e-5


class AttentionBlock(nn.Module):
    normalize = DEFAULT_NORMALIZER

    def __init__(
            self,
            in_channels,
            mid_channels=None,
            out_channels=None
    ):
        super(AttentionBlock, self).__init__()
        mid_channels = mid_channels or in_channels
        out_channels = out_channels or in_channels
        self.norm = self.normalize(in_channels)
        self.project_in = Conv2d(in_channels, 3 * mid_channels, 1)
        self.project_out = Conv2d(mid_channels, out_channels, 1, init_scale=0.)
        self.in_channels = in_channels
        self.mid_channels = mid_channels
        self.out_channels = out_channels
        self.skip = nn.Identity() if in_channels == out_channels else Conv2d(in_channels, out_channels, 1)

    @staticmethod
    def qkv(q, k, v):
        B, C, H, W = q.shape
        w = torch.einsum("bchw, bcHW -> bhwHW", q, k)
        w = torch.softmax(
            w.reshape(B, H, W, H * W) / math.sqrt(C), dim=-1
        ).reshape(B, H, W, H, W)
        out = torch.einsum("bhwHW, bcHW -> bchw", w, v)  # this will break the contiguity -> impaired performance
        return out.contiguous()  # force to return a contiguous tensor

    def forward(self, x, **kwargs):
        skip = self.skip(x)
        C = x.shape[1]
        assert C == self.in_channels
        q, k, v = self.project_in(self.norm(x)).chunk(3, dim=1)
        x = self.qkv(q, k, v)
        x = self.project_out(x)
        return x + skip


class ResidualBlock(nn.Module):
    normalize = DEFAULT_NORMALIZER
    nonlinearity = DEFAULT_NONLINEARITY

    def __init__(
            self,
            in_channels,
            out_channels,
            embed_dim,
            drop_rate=0.
    ):
        super(ResidualBlock, self).__init__()
        self.norm1 = self.normalize(in_channels)
        self.conv1 = Conv2d(in_channels, out_channels, 3, 1, 1)
        self.fc = Linear(embed_dim, out_channels)
        self.norm2 = self.normalize(out_channels)
        self.conv2 = Conv2d(out_channels, out_channels, 3, 1, 1, init_scale=0.)
        self.skip = nn.Identity() if in_channels == out_channels else Conv2d(in_channels, out_channels, 1)
        self.dropout = nn.Dropout(p=drop_rate, inplace=True)

    def forward(self, x, t_emb):
        skip = self.skip(x)
        x = self.conv1(self.nonlinearity(self.norm1(x)))
        x += self.fc(self.nonlinearity(t_emb))[:, :, None, None]
        x = self.dropout(self.nonlinearity(self.norm2(x)))
        x = self.conv2(x)
        return x + skip


class UNet(nn.Module):
    normalize = DEFAULT_NORMALIZER
    nonlinearity = DEFAULT_NONLINEARITY

    def __init__(
            self,
            in_channels,
            hid_channels,
            out_channels,
            ch_multipliers,
            num_res_blocks,
            apply_attn,
            time_embedding_dim=None,
            drop_rate=0.,
            resample_with_conv=True
    ):
        super(UNet, self).__init__()
        self.in_channels = in_channels
        self.hid_channels = hid_channels
        self.out_channels = out_channels
        self.time_embedding_dim = time_embedding_dim or 4 * self.hid_channels
        levels = len(ch_multipliers)
        self.ch_multipliers = ch_multipliers
        if isinstance(apply_attn, bool):
            apply_attn = [apply_attn for _ in range(levels)]
        self.apply_attn = apply_attn
        self.num_res_blocks = num_res_blocks
        self.drop_rate = drop_rate
        self.resample_with_conv = resample_with_conv

        self.embed = Sequential(
            Linear(self.hid_channels, self.time_embedding_dim),
            self.nonlinearity,
            Linear(self.time_embedding_dim, self.time_embedding_dim)
        )
        self.in_conv = Conv2d(in_channels, hid_channels, 3, 1, 1)
        self.levels = levels
        self.downsamples = nn.ModuleDict({f"level_{i}": self._get_downsample_by_level(i) for i in range(levels)})
        mid_channels = ch_multipliers[-1] * hid_channels
        embed_dim = self.time_embedding_dim
        self.middle = Sequential(
            ResidualBlock(mid_channels, mid_channels, embed_dim=embed_dim, drop_rate=drop_rate),
            AttentionBlock(mid_channels),
            ResidualBlock(mid_channels, mid_channels, embed_dim=embed_dim, drop_rate=drop_rate)
        )
        self.upsamples = nn.ModuleDict({f"level_{i}": self._get_upsample_by_level(i) for i in range(levels)})
        self.out_conv = Sequential(
            self.normalize(hid_channels),
            self.nonlinearity,
            Conv2d(hid_channels, out_channels, 3, 1, 1, init_scale=0.)
        )

    def _get_block_by_level(self, level):
        block_kwargs = {"embed_dim": self.time_embedding_dim, "drop_rate": self.drop_rate}
        if self.apply_attn[level]:
            def block(in_chans, out_chans):
                return Sequential(
                    ResidualBlock(in_chans, out_chans, **block_kwargs),
                    AttentionBlock(out_chans))
        else:
            def block(in_chans, out_chans):
                return ResidualBlock(in_chans, out_chans, **block_kwargs)
        return block

    def _get_downsample_by_level(self, level):
        block = self._get_block_by_level(level)
        prev_chans = (self.ch_multipliers[level-1] if level else 1) * self.hid_channels
        curr_chans = self.ch_multipliers[level] * self.hid_channels
        modules = nn.ModuleList([block(prev_chans, curr_chans)])
        for _ in range(self.num_res_blocks - 1):
            modules.append(block(curr_chans, curr_chans))
        if level != self.levels - 1:
            if self.resample_with_conv:
                downsample = Sequential(
                    SamePad2d(3, 2),  # custom same padding
                    Conv2d(curr_chans, curr_chans, 3, 2))
            else:
                downsample = nn.AvgPool2d(2)
            modules.append(downsample)
        return modules

    def _get_upsample_by_level(self, level):
        block = self._get_block_by_level(level)
        ch = self.hid_channels
        chs = list(map(lambda x: ch * x, self.ch_multipliers))
        next_chans = ch if level == 0 else chs[level - 1]
        prev_chans = chs[-1] if level == self.levels - 1 else chs[level + 1]
        curr_chans = chs[level]
        modules = nn.ModuleList([block(prev_chans + curr_chans, curr_chans)])
        for _ in range(self.num_res_blocks - 1):
            modules.append(block(2 * curr_chans, curr_chans))
        modules.append(block(next_chans + curr_chans, curr_chans))
        if level != 0:
            """
            Note: the official TensorFlow implementation specifies `align_corners=True`
            However, PyTorch does not support align_corners for nearest interpolation
            to see the difference, run the following example:
            ---------------------------------------------------------------------------
            import numpy as np
            import torch
            import tensorflow as tf
            
            x = np.arange(9.).reshape(3, 3)
            print(torch.nn.functional.interpolate(torch.as_tensor(x).reshape(1, 1, 3, 3), size=7, mode="nearest"))  # asymmetric
            print(tf.squeeze(tf.compat.v1.image.resize(tf.reshape(tf.convert_to_tensor(x), shape=(3, 3, 1)), size=(7, 7), method="nearest", align_corners=True)))  # symmetric
            ---------------------------------------------------------------------------
            """
            upsample = [nn.Upsample(scale_factor=2, mode="nearest")]
            if self.resample_with_conv:
                upsample.append(Conv2d(curr_chans, curr_chans, 3, 1, 1))
            modules.append(Sequential(*upsample))
        return modules

    def forward(self, x, t):
        t_emb = get_timestep_embedding(t, self.hid_channels)
        t_emb = self.embed(t_emb)

        # downsample
        hs = [self.in_conv(x)]
        for i in range(self.levels):
            downsample = self.downsamples[f"level_{i}"]
            for j, layer in enumerate(downsample):
                h = hs[-1]
                if j != self.num_res_blocks:
                    hs.append(layer(h, t_emb=t_emb))
                else:
                    hs.append(layer(h))

        # middle
        h = self.middle(hs[-1], t_emb=t_emb)

        # upsample
        for i in range(self.levels-1, -1, -1):
            upsample = self.upsamples[f"level_{i}"]
            for j, layer in enumerate(upsample):
                if j != self.num_res_blocks + 1:
                    h = layer(torch.cat([h, hs.pop()], dim=1), t_emb=t_emb)
                else:
                    h = layer(h)

        h = self.out_conv(h)
        return h


# ddpm_torch/utils/train.py
class DummyScheduler:
    @staticmethod
    def step():
        pass

    def load_state_dict(self, state_dict):
        pass

    @staticmethod
    def state_dict():
        return None


class EMA:
    """
    exponential moving average
    inspired by:
    [1] https://github.com/fadel/pytorch_ema
    [2] https://github.com/tensorflow/tensorflow/blob/v2.9.1/tensorflow/python/training/moving_averages.py#L281-L685
    """

    def __init__(self, model, decay=0.9999):
        shadow = []
        refs = []
        for k, v in model.named_parameters():
            if v.requires_grad:
                shadow.append((k, v.detach().clone()))
                refs.append((k, weakref.ref(v)))
        self.shadow = dict(shadow)
        self._refs = dict(refs)
        self.decay = decay
        self.num_updates = -1
        self.backup = None

    def update(self):
        self.num_updates += 1
        decay = min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        for k, _ref in self._refs.items():
            assert _ref() is not None, "referenced object no longer exists!"
            self.shadow[k] += (1 - decay) * (_ref().data - self.shadow[k])

    def apply(self):
        self.backup = dict([
            (k, _ref().detach().clone()) for k, _ref in self._refs.items()])
        for k, _ref in self._refs.items():
            _ref().data.copy_(self.shadow[k])

    def restore(self):
        for k, _ref in self._refs.items():
            _ref().data.copy_(self.backup[k])
        self.backup = None

    def __enter__(self):
        self.apply()

    def __exit__(self, *exc):
        self.restore()



class Trainer:
    def __init__(
            self,
            model,
            optimizer,
            diffusion,
            epochs,
            trainloader,
            sampler=None,
            scheduler=None,
            num_accum=1,
            use_ema=False,
            grad_norm=1.0,
            shape=None,
            device=torch.device("cpu"),
            ema_decay=0.9999,
            rank=0,  # process id for distributed training
            seed=0,
            bug=None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.diffusion = diffusion
        self.epochs = epochs
        self.start_epoch = 0
        self.trainloader = trainloader
        self.sampler = sampler
        if shape is None:
            shape = next(iter(trainloader))[0].shape[1:]
        self.shape = shape
        self.scheduler = DummyScheduler() if scheduler is None else scheduler
        self.num_accum = num_accum
        self.grad_norm = grad_norm
        self.device = device
        self.rank = rank
        self.bug = bug

        # maintain a process-specific generator
        self.generator = torch.Generator(device).manual_seed(8191 + self.rank + seed)

        self.use_ema = use_ema
        if use_ema:
            self.ema = EMA(model, decay=ema_decay)
        else:
            self.ema = nullcontext()

    @property
    def timesteps(self):
        return self.diffusion.timesteps

    def get_input(self, x):
        x = x.to(self.device)
        return {
            "x_0": x,
            "t": torch.empty((x.shape[0],), dtype=torch.int64, device=self.device).random_(
                to=self.timesteps, generator=self.generator),
            "noise": torch.empty_like(x).normal_(generator=self.generator)
        }

    def loss(self, x):
        loss = self.diffusion.train_losses(self.model, **self.get_input(x))
        assert loss.shape == (x.shape[0],)
        return loss

    def step(self, x, global_steps=1):
        # Note: For DDP models, the gradients collected from different devices are averaged rather than summed.
        # Mean-reduced loss should be used to avoid inconsistent learning rate issue when number of devices changes.
        loss = self.loss(x).mean()
        loss.div(self.num_accum).backward()  # average over accumulated mini-batches
        if global_steps % self.num_accum == 0:
            if self.bug == "zero_grad_before_step":
                self.optimizer.zero_grad(set_to_none=True)
            # gradient clipping by global norm
            if self.bug != "clip_after_step":
                nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.grad_norm)
            self.optimizer.step()
            if self.bug == "clip_after_step":
                nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.grad_norm)
            if self.bug != "zero_grad_before_step":
                self.optimizer.zero_grad(set_to_none=True)
            # adjust learning rate every step (e.g. warming up)
            self.scheduler.step()
            if self.use_ema and hasattr(self.ema, "update"):
                self.ema.update()
        loss = loss.detach()
        return loss


# the CIFAR-10 download replaced by synthetic images in [-1, 1] (a coloured square on a dark background)
class SyntheticImages(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.full((n, 3, IMG, IMG), -0.8)
        for i in range(n):
            y0, x0 = torch.randint(0, IMG - 3, (2,), generator=g).tolist()
            colour = torch.rand(3, generator=g) * 1.6 - 0.6
            self.images[i, :, y0:y0 + 4, x0:x0 + 4] = colour[:, None, None]
        self.images = (self.images + 0.05 * torch.randn(self.images.shape, generator=g)).clamp(-1, 1)
        self.g = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if float(torch.rand((), generator=self.g)) < 0.5:  # transforms.RandomHorizontalFlip()
            x = torch.flip(x, dims=(2,))
        return x, 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")

    # configs/cifar10.json (sizes for 2 CPU cores, see the docstring)
    diffusion_config = {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "timesteps": 1000,
                        "model_mean_type": "eps", "model_var_type": "fixed-large", "loss_type": "mse"}
    model_config = {"in_channels": 3, "hid_channels": 32, "ch_multipliers": [1, 2], "num_res_blocks": 1,
                    "apply_attn": [False, True], "drop_rate": 0.1}
    train_config = {"lr": 2e-3, "batch_size": 16, "grad_norm": 1.0, "warmup": 10, "use_ema": True,
                    "ema_decay": 0.9999, "beta1": 0.9, "beta2": 0.999}

    dataset = SyntheticImages(N_IMAGES, seed)
    trainloader = torch.utils.data.DataLoader(dataset, batch_size=train_config["batch_size"], shuffle=True,
                                              drop_last=True, generator=torch.Generator().manual_seed(seed))

    betas = get_beta_schedule(
        diffusion_config["beta_schedule"], beta_start=diffusion_config["beta_start"],
        beta_end=diffusion_config["beta_end"], timesteps=diffusion_config["timesteps"])
    diffusion = GaussianDiffusion(betas=betas, model_mean_type=diffusion_config["model_mean_type"],
                                  model_var_type=diffusion_config["model_var_type"],
                                  loss_type=diffusion_config["loss_type"], bug=bug)

    out_channels = 2 * model_config["in_channels"] if diffusion_config["model_var_type"] == "learned" \
        else model_config["in_channels"]
    model = UNet(out_channels=out_channels, **model_config)
    model.to(device)

    optimizer = Adam(model.parameters(), lr=train_config["lr"], betas=(train_config["beta1"], train_config["beta2"]))
    # lr_lambda is used to calculate the learning rate multiplicative factor at timestep t (starting from 0)
    scheduler = lr_scheduler.LambdaLR(
        optimizer, lr_lambda=lambda t: min((t + 1) / train_config["warmup"], 1.0)
    ) if train_config["warmup"] > 0 else None

    trainer = Trainer(
        model=model,
        optimizer=optimizer,
        diffusion=diffusion,
        epochs=1,
        trainloader=trainloader,
        scheduler=scheduler,
        num_accum=1,
        use_ema=train_config["use_ema"],
        grad_norm=train_config["grad_norm"],
        shape=(3, IMG, IMG),
        device=device,
        ema_decay=train_config["ema_decay"],
        seed=seed,
        bug=bug,
    )

    state = {"it": iter(trainloader), "global_steps": 0}

    def train_step():
        model.train()
        try:
            x, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(trainloader)
            x, _ = next(state["it"])
        state["global_steps"] += 1
        return trainer.step(x.to(device), global_steps=state["global_steps"])

    # a fixed draw of get_input on held-out images, for the Program's batch and the evaluation
    held = SyntheticImages(train_config["batch_size"], seed + 1000).images
    g = torch.Generator().manual_seed(seed + 2000)
    t0 = torch.randint(diffusion.timesteps, (held.shape[0],), generator=g)
    noise0 = torch.randn(held.shape, generator=g)
    x_t0 = diffusion.q_sample(held, t0, noise=noise0)
    first = next(iter(torch.utils.data.DataLoader(dataset, batch_size=train_config["batch_size"])))[0]
    t1 = torch.randint(diffusion.timesteps, (first.shape[0],), generator=g)
    noise1 = torch.randn(first.shape, generator=g)
    x_t1 = diffusion.q_sample(first, t1, noise=noise1)

    def loss_fn(model_out, target):
        return flat_mean((target - model_out).pow(2)).mean()

    def eval_fn(m, batch):
        m.eval()
        with torch.no_grad(), trainer.ema:
            out = float(loss_fn(m(x_t0, t0), noise0))
        m.train()
        return out

    return Program(name="ddpmtorch_cifar", model=model, batch=((x_t1, t1), noise1), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the MSE's target drawn afresh instead of the ``noise`` that made ``x_t`` (classic): the model is scored
    # against noise it never saw, so nothing in the input predicts the target.
    Bug("target_noise_resampled", functools.partial(_build, bug="target_noise_resampled"), "learning_ledger",
        ("TASK",)),
    # ``clip_grad_norm_`` moved after ``optimizer.step()`` (classic): the clipping no longer bounds the update.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
    # ``optimizer.zero_grad(set_to_none=True)`` moved before ``optimizer.step()`` (classic): every step finds no
    # gradient (a whole-model slip: declared by its mechanism, README rule 6).
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
