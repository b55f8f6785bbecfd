"""Score-based generative modelling as a plug-in reverse SDE (Huang, Lim & Courville, "A Variational Perspective on
Diffusion-Based Generative Models and Score Matching"), Chin-Wei Huang's sdeflow-light: images dequantized and
mapped to the real line by a logit transform, a variance-preserving SDE (beta 0.1 -> 20, T 1), a DDPM-style UNet as
the drift ``a(y, t)`` of the plug-in reverse SDE, trained by denoising score matching
``sum((a * std / g + eps) ** 2) / 2`` at a uniform ``t``, Adam lr 1e-4; evaluation by the ELBO in bits per dim
(Hutchinson trace estimator at a random ``t``).

Source: https://github.com/CW-Huang/sdeflow-light
Commit: 524650bc5ad69522b3e0905672deef0650374512
Files: train_img.py, lib/sdes.py, lib/models/unet.py, lib/flows/elemwise.py, lib/utils.py
License: MIT (Copyright (c) 2021 Chin-Wei Huang; full text in LICENSES/CW-Huang-sdeflow-light.txt)
Domain: generative model, score-based diffusion (VP SDE, denoising score matching, ELBO)

Deviations from the original:
- sizes (the MNIST configuration): images 28x28 -> 8x8; UNet ``ch`` 32 kept (GroupNorm's 32 groups need it),
  ``ch_mult`` (1, 2, 2) -> (1, 2), ``num_res_blocks`` 2 -> 1, ``attn_resolutions`` (16,) kept (as on MNIST's 28/14
  levels it matches no level here: attention runs in the middle block only); batch_size 64 -> 8, test_batch_size 256 -> 8; Adam's lr 1e-4 -> 1e-3 so that the 30 steps of the self-check show
  the loss falling (the original runs 10000 iterations);
- data: torchvision's MNIST download is replaced by synthetic 8x8 "digits" in [0, 1] made from ``seed`` (10 classes
  of bar patterns, each shifted by up to one pixel, with pixel noise); the DataLoader shuffles with a
  ``torch.Generator(seed)``, no workers; ``ToTensor`` is the identity on these tensors;
- CUDA, tensorboard, the folder/argument bookkeeping, sampling grids and checkpoints are dropped (CPU only);
  ``lib/utils.py``'s ``sample_vp_truncated_q`` (only used with ``--debias True``, default False) is left out, so
  ``sample_debiasing_t`` is not copied;
- one ``train_step`` is one iteration of the ``while not_finished`` loop's body (dequantize, logit transform,
  ``gen_sde.dsm(x).mean()``, zero_grad/backward/step); ``eval_fn`` is ``evaluate()`` on one test batch (bits per dim);
  the Program's model is the drift network ``drift_q`` the optimizer trains (through ``gen_sde.parameters()``, which
  also holds the fixed ``T``), its batch one draw of ``dsm``'s inputs ``(y, t)`` with ``(eps, std, g)`` for the loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP032, PLR0402, C408, PLW0127, PLW0133, RUF059, B008

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# noinspection PyProtectedMember
from torch.nn.init import _calculate_fan_in_and_fan_out

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 8
LR = 0.001  # the original 0.0001, raised so 30 steps show learning
BATCH = 8


# lib/models/unet.py
class Swish(nn.Module):
    def __init__(self):
        super().__init__()

    # noinspection PyMethodMayBeStatic
    def forward(self, x):
        return torch.sigmoid(x) * x


def group_norm(out_ch):
    return nn.GroupNorm(num_groups=32, num_channels=out_ch, eps=1e-6, affine=True)


def upsample(in_ch, with_conv):
    up = nn.Sequential()
    up.add_module('up_nn', nn.Upsample(scale_factor=2, mode='nearest'))
    if with_conv:
        up.add_module('up_conv', conv2d(in_ch, in_ch, kernel_size=(3, 3), stride=1))
    return up


def downsample(in_ch, with_conv):
    if with_conv:
        down = conv2d(in_ch, in_ch, kernel_size=(3, 3), stride=2)
    else:
        down = nn.AvgPool2d(2, 2)
    return down


class ResidualBlock(nn.Module):
    def __init__(self, in_ch, temb_ch, out_ch=None, conv_shortcut=False, dropout=0., normalize=group_norm, act=Swish()):
        super().__init__()
        self.in_ch = in_ch
        self.temb_ch = temb_ch
        self.out_ch = out_ch if out_ch is not None else in_ch
        self.conv_shortcut = conv_shortcut
        self.dropout = dropout
        self.act = act

        self.temb_proj = dense(temb_ch, out_ch)
        self.norm1 = normalize(in_ch) if normalize is not None else nn.Identity()
        self.conv1 = conv2d(in_ch, out_ch)
        self.norm2 = normalize(out_ch) if normalize is not None else nn.Identity()
        self.dropout = nn.Dropout2d(p=dropout) if dropout > 0. else nn.Identity()
        self.conv2 = conv2d(out_ch, out_ch, init_scale=0.)
        if in_ch != out_ch:
            if conv_shortcut:
                self.shortcut = conv2d(in_ch, out_ch)
            else:
                self.shortcut = conv2d(in_ch, out_ch, kernel_size=(1, 1), padding=0)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x, temb):
        # forward conv1
        h = x
        h = self.act(self.norm1(h))
        h = self.conv1(h)

        # add in timestep embedding
        h = h + self.temb_proj(self.act(temb))[:, :, None, None]

        # forward conv2
        h = self.act(self.norm2(h))
        h = self.dropout(h)
        h = self.conv2(h)

        # shortcut
        x = self.shortcut(x)

        # combine and return
        assert x.shape == h.shape
        return x + h


class SelfAttention(nn.Module):
    """
    copied modified from https://github.com/voletiv/self-attention-GAN-pytorch/blob/master/sagan_models.py#L29
    copied modified from https://github.com/hojonathanho/diffusion/blob/master/diffusion_tf/models/unet.py#L66
    """

    def __init__(self, in_channels, normalize=group_norm):
        super().__init__()
        self.in_channels = in_channels
        self.attn_q = conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.attn_k = conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.attn_v = conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.proj_out = conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0, init_scale=0.)
        self.softmax = nn.Softmax(dim=-1)
        if normalize is not None:
            self.norm = normalize(in_channels)
        else:
            self.norm = nn.Identity()

    # noinspection PyUnusedLocal
    def forward(self, x, temp=None):
        """ t is not used """
        _, C, H, W = x.size()

        h = self.norm(x)
        q = self.attn_q(h).view(-1, C, H * W)
        k = self.attn_k(h).view(-1, C, H * W)
        v = self.attn_v(h).view(-1, C, H * W)

        attn = torch.bmm(q.permute(0, 2, 1), k) * (int(C) ** (-0.5))
        attn = self.softmax(attn)

        h = torch.bmm(v, attn.permute(0, 2, 1))
        h = h.view(-1, C, H, W)
        h = self.proj_out(h)

        assert h.shape == x.shape
        return x + h


def _calculate_correct_fan(tensor, mode):
    """
    copied and modified from https://github.com/pytorch/pytorch/blob/master/torch/nn/init.py#L337
    """
    mode = mode.lower()
    valid_modes = ['fan_in', 'fan_out', 'fan_avg']
    if mode not in valid_modes:
        raise ValueError("Mode {} not supported, please use one of {}".format(mode, valid_modes))

    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == 'fan_in' else fan_out


def kaiming_uniform_(tensor, gain=1., mode='fan_in'):
    r"""Fills the input `Tensor` with values according to the method
    described in `Delving deep into rectifiers: Surpassing human-level
    performance on ImageNet classification` - He, K. et al. (2015), using a
    uniform distribution. The resulting tensor will have values sampled from
    :math:`\mathcal{U}(-\text{bound}, \text{bound})` where

    .. math::
        \text{bound} = \text{gain} \times \sqrt{\frac{3}{\text{fan\_mode}}}

    Also known as He initialization.

    Args:
        tensor: an n-dimensional `torch.Tensor`
        gain: multiplier to the dispersion
        mode: either ``'fan_in'`` (default) or ``'fan_out'``. Choosing ``'fan_in'``
            preserves the magnitude of the variance of the weights in the
            forward pass. Choosing ``'fan_out'`` preserves the magnitudes in the
            backwards pass.
    Examples:
        >>> w = torch.empty(3, 5)
        >>> nn.init.kaiming_uniform_(w, mode='fan_in')
    """
    fan = _calculate_correct_fan(tensor, mode)
    # gain = calculate_gain(nonlinearity, a)
    var = gain / max(1., fan)
    bound = math.sqrt(3.0 * var)  # Calculate uniform bounds from standard deviation
    with torch.no_grad():
        return tensor.uniform_(-bound, bound)


def variance_scaling_init_(tensor, scale):
    return kaiming_uniform_(tensor, gain=1e-10 if scale == 0 else scale, mode='fan_avg')


def dense(in_channels, out_channels, init_scale=1.):
    lin = nn.Linear(in_channels, out_channels)
    variance_scaling_init_(lin.weight, scale=init_scale)
    nn.init.zeros_(lin.bias)
    return lin


def conv2d(in_planes, out_planes, kernel_size=(3, 3), stride=1, dilation=1, padding=1, bias=True, padding_mode='zeros',
           init_scale=1.):
    conv = nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
                     bias=bias, padding_mode=padding_mode)
    variance_scaling_init_(conv.weight, scale=init_scale)
    if bias:
        nn.init.zeros_(conv.bias)
    return conv


def get_sinusoidal_positional_embedding(timesteps: torch.LongTensor, embedding_dim: int):
    """
    Copied and modified from
        https://github.com/hojonathanho/diffusion/blob/1e0dceb3b3495bbe19116a5e1b3596cd0706c543/diffusion_tf/nn.py#L90

    From Fairseq in
        https://github.com/pytorch/fairseq/blob/master/fairseq/modules/sinusoidal_positional_embedding.py#L15
    Build sinusoidal embeddings.
    This matches the implementation in tensor2tensor, but differs slightly
    from the description in Section 3.5 of "Attention Is All You Need".
    """
    assert len(timesteps.size()) == 1
    timesteps = timesteps.to(torch.get_default_dtype())
    device = timesteps.device

    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float, device=device) * -emb)
    emb = timesteps[:, None] * emb[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)  # bsz x embd
    if embedding_dim % 2 == 1:  # zero pad
        emb = F.pad(emb, (0, 1), "constant", 0)
    assert list(emb.size()) == [timesteps.size(0), embedding_dim]
    return emb


class TimestepEmbedding(nn.Module):
    def __init__(self, embedding_dim, hidden_dim, output_dim, act=Swish()):
        super().__init__()

        self.embedding_dim = embedding_dim
        self.output_dim = output_dim
        self.hidden_dim = hidden_dim

        self.main = nn.Sequential(
            dense(embedding_dim, hidden_dim),
            act,
            dense(hidden_dim, output_dim),
        )

    def forward(self, temp):
        temb = get_sinusoidal_positional_embedding(temp, self.embedding_dim)
        temb = self.main(temb)
        return temb


class UNet(nn.Module):
    def __init__(self,
                 input_channels,
                 input_height,
                 ch,
                 output_channels=None,
                 ch_mult=(1, 2, 4, 8),
                 num_res_blocks=2,
                 attn_resolutions=(16,),
                 dropout=0.,
                 resamp_with_conv=True,
                 act=Swish(),
                 normalize=group_norm,
                 ):
        super().__init__()
        self.input_channels = input_channels
        self.input_height = input_height
        self.ch = ch
        self.output_channels = output_channels = input_channels if output_channels is None else output_channels
        self.ch_mult = ch_mult
        self.num_res_blocks = num_res_blocks
        self.attn_resolutions = attn_resolutions
        self.dropout = dropout
        self.resamp_with_conv = resamp_with_conv
        self.act = act
        self.normalize = normalize

        # init
        self.num_resolutions = num_resolutions = len(ch_mult)
        in_ht = input_height
        in_ch = input_channels
        temb_ch = ch * 4
        assert in_ht % 2 ** (num_resolutions - 1) == 0, "input_height doesn't satisfy the condition"

        # Timestep embedding
        self.temb_net = TimestepEmbedding(
            embedding_dim=ch,
            hidden_dim=temb_ch,
            output_dim=temb_ch,
            act=act,
        )

        # Downsampling
        self.begin_conv = conv2d(in_ch, ch)
        unet_chs = [ch]
        in_ht = in_ht
        in_ch = ch
        down_modules = []
        for i_level in range(num_resolutions):
            # Residual blocks for this resolution
            block_modules = {}
            out_ch = ch * ch_mult[i_level]
            for i_block in range(num_res_blocks):
                block_modules['{}a_{}a_block'.format(i_level, i_block)] = \
                    ResidualBlock(
                        in_ch=in_ch,
                        temb_ch=temb_ch,
                        out_ch=out_ch,
                        dropout=dropout,
                        act=act,
                        normalize=normalize,
                    )
                if in_ht in attn_resolutions:
                    block_modules['{}a_{}b_attn'.format(i_level, i_block)] = SelfAttention(out_ch, normalize=normalize)
                unet_chs += [out_ch]
                in_ch = out_ch
            # Downsample
            if i_level != num_resolutions - 1:
                block_modules['{}b_downsample'.format(i_level)] = downsample(out_ch, with_conv=resamp_with_conv)
                in_ht //= 2
                unet_chs += [out_ch]
            # convert list of modules to a module list, and append to a list
            down_modules += [nn.ModuleDict(block_modules)]
        # conver to a module list
        self.down_modules = nn.ModuleList(down_modules)

        # Middle
        mid_modules = []
        mid_modules += [
            ResidualBlock(in_ch, temb_ch=temb_ch, out_ch=in_ch, dropout=dropout, act=act, normalize=normalize)]
        mid_modules += [SelfAttention(in_ch, normalize=normalize)]
        mid_modules += [
            ResidualBlock(in_ch, temb_ch=temb_ch, out_ch=in_ch, dropout=dropout, act=act, normalize=normalize)]
        self.mid_modules = nn.ModuleList(mid_modules)

        # Upsampling
        up_modules = []
        for i_level in reversed(range(num_resolutions)):
            # Residual blocks for this resolution
            block_modules = {}
            out_ch = ch * ch_mult[i_level]
            for i_block in range(num_res_blocks + 1):
                block_modules['{}a_{}a_block'.format(i_level, i_block)] = \
                    ResidualBlock(
                        in_ch=in_ch + unet_chs.pop(),
                        temb_ch=temb_ch,
                        out_ch=out_ch,
                        dropout=dropout,
                        act=act,
                        normalize=normalize)
                if in_ht in attn_resolutions:
                    block_modules['{}a_{}b_attn'.format(i_level, i_block)] = SelfAttention(out_ch, normalize=normalize)
                in_ch = out_ch
            # Upsample
            if i_level != 0:
                block_modules['{}b_upsample'.format(i_level)] = upsample(out_ch, with_conv=resamp_with_conv)
                in_ht *= 2
            # convert list of modules to a module list, and append to a list
            up_modules += [nn.ModuleDict(block_modules)]
        # conver to a module list
        self.up_modules = nn.ModuleList(up_modules)
        assert not unet_chs

        # End
        self.end_conv = nn.Sequential(
            normalize(in_ch),
            self.act,
            conv2d(in_ch, output_channels, init_scale=0.),
        )

    # noinspection PyMethodMayBeStatic
    def _compute_cond_module(self, module, x, temp):
        for m in module:
            x = m(x, temp)
        return x

    # noinspection PyArgumentList,PyShadowingNames
    def forward(self, x, temp):
        # Init
        B, C, H, W = x.size()

        # Timestep embedding
        temb = self.temb_net(temp)
        assert list(temb.shape) == [B, self.ch * 4]

        # Downsampling
        hs = [self.begin_conv(x)]
        for i_level in range(self.num_resolutions):
            # Residual blocks for this resolution
            block_modules = self.down_modules[i_level]
            for i_block in range(self.num_res_blocks):
                resnet_block = block_modules['{}a_{}a_block'.format(i_level, i_block)]
                h = resnet_block(hs[-1], temb)
                if h.size(2) in self.attn_resolutions:
                    attn_block = block_modules['{}a_{}b_attn'.format(i_level, i_block)]
                    h = attn_block(h, temb)
                hs.append(h)
            # Downsample
            if i_level != self.num_resolutions - 1:
                downsample = block_modules['{}b_downsample'.format(i_level)]
                hs.append(downsample(hs[-1]))

        # Middle
        h = hs[-1]
        h = self._compute_cond_module(self.mid_modules, h, temb)

        # Upsampling
        for i_idx, i_level in enumerate(reversed(range(self.num_resolutions))):
            # Residual blocks for this resolution
            block_modules = self.up_modules[i_idx]
            for i_block in range(self.num_res_blocks + 1):
                resnet_block = block_modules['{}a_{}a_block'.format(i_level, i_block)]
                h = resnet_block(torch.cat([h, hs.pop()], axis=1), temb)
                if h.size(2) in self.attn_resolutions:
                    attn_block = block_modules['{}a_{}b_attn'.format(i_level, i_block)]
                    h = attn_block(h, temb)
            # Upsample
            if i_level != 0:
                upsample = block_modules['{}b_upsample'.format(i_level)]
                h = upsample(h)
        assert not hs

        # End
        h = self.end_conv(h)
        assert list(h.size()) == [x.size(0), self.output_channels, x.size(2), x.size(3)]
        return h


# lib/utils.py
def log_standard_normal(x):
    return - 0.5 * x ** 2 - np.log(2 * np.pi) / 2


def sample_rademacher(shape):
    return (torch.rand(*shape).ge(0.5)).float() * 2 - 1


def sample_gaussian(shape):
    return torch.randn(*shape)


def sample_v(shape, vtype='rademacher'):
    if vtype == 'rademacher':
        return sample_rademacher(shape)
    elif vtype == 'normal' or vtype == 'gaussian':
        return sample_gaussian(shape)
    else:
        Exception(f'vtype {vtype} not supported')


Log2PI = float(np.log(2 * np.pi))


def log_normal(x, mean, log_var, eps=0.00001):
    z = - 0.5 * Log2PI
    return - (x - mean) ** 2 / (2. * torch.exp(log_var) + eps) - log_var / 2. + z


# lib/flows/elemwise.py
# noinspection PyUnusedLocal
class LogitTransform(nn.Module):
    """
    The proprocessing step used in Real NVP:
    y = sigmoid(x) - a / (1 - 2a)
    x = logit(a + (1 - 2a)*y)
    """

    def __init__(self, alpha):
        nn.Module.__init__(self)
        self.alpha = alpha

    def forward_transform(self, x, logpx=None):
        s = self.alpha + (1 - 2 * self.alpha) * x
        y = torch.log(s) - torch.log(1 - s)
        if logpx is None:
            return y
        return y, logpx + self._logdetgrad(x).view(x.size(0), -1).sum(1)

    def reverse(self, y, logpy=None, **kwargs):
        x = (torch.sigmoid(y) - self.alpha) / (1 - 2 * self.alpha)
        if logpy is None:
            return x
        return x, logpy - self._logdetgrad(x).view(x.size(0), -1).sum(1)

    def _logdetgrad(self, x):
        s = self.alpha + (1 - 2 * self.alpha) * x
        logdetgrad = -torch.log(s - s * s) + math.log(1 - 2 * self.alpha)
        return logdetgrad

    def __repr__(self):
        return '{name}({alpha})'.format(name=self.__class__.__name__, **self.__dict__)


# lib/sdes.py
class VariancePreservingSDE(torch.nn.Module):
    """
    Implementation of the variance preserving SDE proposed by Song et al. 2021
    See eq (32-33) of https://openreview.net/pdf?id=PxTIG12RRHS
    """
    def __init__(self, beta_min=0.1, beta_max=20.0, T=1.0, t_epsilon=0.001, bug=None):
        super().__init__()
        self.bug = bug
        self.beta_min = beta_min
        self.beta_max = beta_max
        self.T = T
        self.t_epsilon = t_epsilon

    def beta(self, t):
        return self.beta_min + (self.beta_max-self.beta_min)*t

    def mean_weight(self, t):
        return torch.exp(-0.25 * t**2 * (self.beta_max-self.beta_min) - 0.5 * t * self.beta_min)

    def var(self, t):
        return 1. - torch.exp(-0.5 * t**2 * (self.beta_max-self.beta_min) - t * self.beta_min)

    def f(self, t, y):
        return - 0.5 * self.beta(t) * y

    def g(self, t, y):
        beta_t = self.beta(t)
        return torch.ones_like(y) * beta_t**0.5

    def sample(self, t, y0, return_noise=False):
        """
        sample yt | y0
        if return_noise=True, also return std and g for reweighting the denoising score matching loss
        """
        mu = self.mean_weight(t) * y0
        std = self.var(t) ** 0.5
        epsilon = torch.randn_like(y0)
        yt = epsilon * std + mu
        if not return_noise:
            return yt
        else:
            if self.bug == "target_is_fresh_noise":
                epsilon = torch.randn_like(y0)
            return yt, epsilon, std, self.g(t, yt)


class PluginReverseSDE(torch.nn.Module):
    """
    inverting a given base sde with drift `f` and diffusion `g`, and an inference sde's drift `a` by
    f <- g a - f
    g <- g
    (time is inverted)
    """

    def __init__(self, base_sde, drift_a, T, vtype='rademacher', debias=False, bug=None):
        super().__init__()
        self.bug = bug
        self.base_sde = base_sde
        self.a = drift_a
        self.T = T
        self.vtype = vtype
        self.debias = debias

    # Drift
    def mu(self, t, y, lmbd=0.):
        return (1. - 0.5 * lmbd) * self.base_sde.g(self.T-t, y) * self.a(y, self.T - t.squeeze()) - \
               self.base_sde.f(self.T - t, y)

    # Diffusion
    def sigma(self, t, y, lmbd=0.):
        return (1. - lmbd) ** 0.5 * self.base_sde.g(self.T-t, y)

    @torch.enable_grad()
    def dsm(self, x):
        """
        denoising score matching loss
        """
        if self.debias:
            t_ = self.base_sde.sample_debiasing_t([x.size(0), ] + [1 for _ in range(x.ndim - 1)])
        else:
            t_ = torch.rand([x.size(0), ] + [1 for _ in range(x.ndim - 1)]).to(x) * self.T
        y, target, std, g = self.base_sde.sample(t_, x, return_noise=True)
        a = self.a(y, t_.squeeze())

        if self.bug == "weight_inverted":
            return ((a * g / std + target) ** 2).view(x.size(0), -1).sum(1, keepdim=False) / 2
        return ((a * std / g + target) ** 2).view(x.size(0), -1).sum(1, keepdim=False) / 2

    @torch.enable_grad()
    def elbo_random_t_slice(self, x):
        """
        estimating the ELBO of the plug-in reverse SDE by sampling t uniformly between [0, T], and by estimating
        div(mu) using the Hutchinson trace estimator
        """
        t_ = torch.rand([x.size(0), ] + [1 for _ in range(x.ndim - 1)]).to(x) * self.T
        qt = 1 / self.T
        y = self.base_sde.sample(t_, x).requires_grad_()

        a = self.a(y, t_.squeeze())
        mu = self.base_sde.g(t_, y) * a - self.base_sde.f(t_, y)

        v = sample_v(x.shape, vtype=self.vtype).to(y)

        Mu = - (
              torch.autograd.grad(mu, y, v, create_graph=self.training)[0] * v
        ).view(x.size(0), -1).sum(1, keepdim=False) / qt

        Nu = - (a ** 2).view(x.size(0), -1).sum(1, keepdim=False) / 2 / qt
        yT = self.base_sde.sample(torch.ones_like(t_) * self.base_sde.T, x)
        lp = log_normal(yT, torch.zeros_like(yT), torch.zeros_like(yT)).view(x.size(0), -1).sum(1)

        return lp + Mu + Nu


class BarDigits(torch.utils.data.Dataset):
    """10 classes of 8x8 bar patterns (each class a fixed set of 2-3 horizontal/vertical strokes), shifted by up to
    one pixel, with pixel noise, in [0, 1]."""

    def __init__(self, seed, n=320):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(10, IMG, IMG)
        for c in range(10):
            for _ in range(2 + c % 2):
                k = int(torch.randint(2, IMG - 1, (), generator=gen))
                lo, hi = sorted(torch.randint(1, IMG - 1, (2,), generator=gen).tolist())
                hi = max(hi, lo + 3)
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k - 1:k + 1, lo:hi] = 1.0
                else:
                    templates[c, lo:hi, k - 1:k + 1] = 1.0
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-1, 2, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                            for c, sh in zip(self.labels, shifts)])
        self.images = (0.9 * imgs + 0.05 + 0.05 * torch.rand(n, IMG, IMG, generator=gen)).clamp(0, 1).unsqueeze(1)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)

    input_channels = 1
    input_height = IMG
    dimx = input_channels * input_height ** 2

    trainset = BarDigits(seed)
    testset = BarDigits(seed + 1000, n=BATCH)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=BATCH, shuffle=True,
                                              generator=torch.Generator().manual_seed(seed))
    testloader = torch.utils.data.DataLoader(testset, batch_size=BATCH, shuffle=True,
                                             generator=torch.Generator().manual_seed(seed + 1))

    drift_q = UNet(
        input_channels=input_channels,
        input_height=input_height,
        ch=32,
        ch_mult=(1, 2),
        num_res_blocks=1,
        attn_resolutions=(16,),
        resamp_with_conv=True,
    )

    T = torch.nn.Parameter(torch.FloatTensor([1.0]), requires_grad=False)

    inf_sde = VariancePreservingSDE(beta_min=0.1, beta_max=20.0, T=T, bug=bug)
    gen_sde = PluginReverseSDE(inf_sde, drift_q, T, vtype='rademacher', debias=False, bug=bug)

    optim = torch.optim.Adam(gen_sde.parameters(), lr=LR)

    logit = LogitTransform(alpha=0.05)
    real = True

    @torch.no_grad()
    def evaluate():
        test_bpd = list()
        gen_sde.eval()
        for x_test, _ in testloader:
            x_test = x_test * 255 / 256 + torch.rand_like(x_test) / 256
            if real:
                x_test, ldj = logit.forward_transform(x_test, 0)
                elbo_test = gen_sde.elbo_random_t_slice(x_test)
                elbo_test += ldj
            else:
                elbo_test = gen_sde.elbo_random_t_slice(x_test)

            test_bpd.extend(- (elbo_test.data.cpu().numpy() / dimx) / np.log(2) + 8)
        gen_sde.train()
        test_bpd = np.array(test_bpd)
        return test_bpd.mean(), test_bpd.std() / len(testloader.dataset) ** 0.5

    state = {"it": iter(trainloader)}

    def train_step():
        try:
            x, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(trainloader)
            x, _ = next(state["it"])
        x = x * 255 / 256 + torch.rand_like(x) / 256
        if real:
            x, _ = logit.forward_transform(x, 0)

        loss = gen_sde.dsm(x).mean()

        if bug != "zero_grad_after_backward":
            optim.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optim.zero_grad()
        optim.step()
        return loss.detach()

    def eval_fn(model, batch):
        return float(evaluate()[0])

    # one draw of dsm's inputs for the Program's batch (as dsm makes them)
    x0 = trainset.images[:BATCH]
    x0 = x0 * 255 / 256 + torch.rand_like(x0) / 256
    x0, _ = logit.forward_transform(x0, 0)
    t_ = torch.rand([x0.size(0), ] + [1 for _ in range(x0.ndim - 1)]).to(x0) * T
    y, target, std, g = inf_sde.sample(t_.detach(), x0, return_noise=True)

    def loss_fn(a, targets):
        target, std, g = targets
        if bug == "weight_inverted":
            return (((a * g / std + target) ** 2).view(a.size(0), -1).sum(1, keepdim=False) / 2).mean()
        return (((a * std / g + target) ** 2).view(a.size(0), -1).sum(1, keepdim=False) / 2).mean()

    return Program(name="sdeflowlight_vpsde", model=drift_q, batch=((y.detach(), t_.detach().squeeze()),
                                                                   (target, std.detach(), g.detach())),
                   loss_fn=loss_fn, optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("weight_inverted", functools.partial(_build, bug="weight_inverted"), "learning_ledger", ("OBJECTIVE",)),
    Bug("target_is_fresh_noise", functools.partial(_build, bug="target_is_fresh_noise"), "learning_ledger",
        ("TASK",)),
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
