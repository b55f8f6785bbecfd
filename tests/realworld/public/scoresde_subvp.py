# ruff: noqa: UP032, C408, RUF059, PLR0402
"""Score-based generative modelling through SDEs (Song et al.), as yang-song/score_sde_pytorch trains its DDPM
score network with the sub-VP SDE in continuous time (``configs/subvp/cifar10_ddpm_continuous.py``): a time ``t ~
U(eps, 1)`` per image, the sub-VP marginal ``mean = exp(log_mean_coeff) x``, ``std = 1 - exp(2 log_mean_coeff)``, the
score ``-model(x_t, 999 t) / std``, the denoising score-matching loss ``mean((score * std + z)^2)`` (reduce_mean,
no likelihood weighting), Adam(lr 2e-4) with linear warmup and ``clip_grad_norm_(1)``, and an EMA of the weights
(rate 0.9999 with the num_updates ramp) that the evaluation step swaps in.

Source: https://github.com/yang-song/score_sde_pytorch
Commit: cb1f359f4aadf0ff9a5e122fe8fffc9451fd6e44
Files: run_lib.py (``train``), losses.py (``get_optimizer``, ``optimization_manager``, ``get_sde_loss_fn``,
``get_step_fn``), sde_lib.py (SDE, subVPSDE), models/ddpm.py (DDPM), models/layers.py (``get_act``,
``variance_scaling``, ``default_init``, ``ddpm_conv3x3``, ``get_timestep_embedding``, ``_einsum``,
``contract_inner``, NIN, AttnBlock, Upsample, Downsample, ResnetBlockDDPM), models/utils.py (``register_model``,
``get_model``, ``get_sigmas``, ``create_model``, ``get_model_fn``, ``get_score_fn``), models/ema.py
(ExponentialMovingAverage), datasets.py (``get_data_scaler``), configs/default_cifar10_configs.py,
configs/subvp/cifar10_ddpm_continuous.py
License: Apache-2.0 (Copyright 2020 The Google Research Authors; full text in LICENSES/yang-song-score_sde_pytorch.txt)
Domain: generative model, score-based diffusion (continuous-time sub-VP SDE, denoising score matching, EMA)

Kept as written: every class and function listed above (the DDPM U-Net with its module list walked by index, the
timestep embedding of ``999 t``, GroupNorm(32), swish, dropout 0.1, attention at the configured resolution, the
DDPM ``default_init``), the loss, the step function (``zero_grad``, loss, ``backward``, ``optimize_fn`` with warmup
and clipping, ``step += 1``, ``ema.update``), the evaluation step (EMA ``store`` / ``copy_to`` / loss under
``no_grad`` / ``restore``), the config values not listed below (Adam beta1 0.9, eps 1e-8, weight_decay 0, grad_clip
1, beta_min 0.1, beta_max 20, num_scales 1000, ema_rate 0.9999, centered data with the ``x * 2 - 1`` scaler, random
flips), the model wrapped in ``torch.nn.DataParallel`` as ``create_model`` does (on the CPU it calls the module).

Deviations from the original:
- data: CIFAR-10 (a tensorflow_datasets pipeline) is replaced by 256 synthetic 16x16 RGB images in [0, 1] made from
  ``seed`` (a 4x4 grid of 4-pixel blocks, each block one of 8 palette colours, plus a little noise), drawn in
  shuffled batches with the random horizontal flip ``data.random_flip`` asks for, NHWC as tfds gives them (the loop's
  ``permute(0, 3, 1, 2)`` and ``scaler`` are kept).
- sizes for 2 CPU cores: image_size 32 -> 16, batch_size 128 -> 8, nf 128 -> 32, ch_mult (1, 2, 2, 2) -> (1, 2),
  num_res_blocks 2 -> 1, attn_resolutions (16,) -> (8,) (the same place relative to the smaller image), n_iters
  1300001 -> unbounded; the warmup 5000 -> 20 steps (with 5000 the learning rate of a short run stays near 0).
- one ``train_step`` is one iteration of ``train``'s loop (a batch, ``train_step_fn``); logging, tensorboard,
  checkpoints, the periodic evaluation and sampling are left out; ``eval_fn`` is ``eval_step_fn`` (the EMA loss) on
  the batch it is given. The Program's ``loss_fn`` is the SDE loss on the model's output for ``batch``, which carries
  the perturbed images and their time labels (``(x_t, 999 t)``) as inputs and ``(z, std, t)`` as targets, drawn once
  at build by the loss function's own lines (``t``, ``z``, ``marginal_prob``, the perturbation).
- ml_collections' ConfigDict is a SimpleNamespace tree; no GPU (``config.device`` is the CPU).
- only what this config uses is ported: the VP / VE SDEs (and ``get_score_fn``'s branches for them), the SDE base
  class's sampling methods (``discretize``, ``reverse``), the NCSN / DDPM++ models, the discrete (SMLD / DDPM)
  losses, the EMA's ``state_dict``, the sampling and likelihood code and the other layers are left out;
  ``get_sde_loss_fn``'s loss is split into two inner functions (the perturbation and the weighting, same lines) so
  the Program's batch and ``loss_fn`` reuse them.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import abc
import functools
import math
import pathlib
import string
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---------------------------------------------------------------- sde_lib.py
class SDE(abc.ABC):
  """SDE abstract class. Functions are designed for a mini-batch of inputs."""

  def __init__(self, N):
    """Construct an SDE.

    Args:
      N: number of discretization time steps.
    """
    super().__init__()
    self.N = N

  @property
  @abc.abstractmethod
  def T(self):
    """End time of the SDE."""

  @abc.abstractmethod
  def sde(self, x, t):
    pass

  @abc.abstractmethod
  def marginal_prob(self, x, t):
    """Parameters to determine the marginal distribution of the SDE, $p_t(x)$."""


class subVPSDE(SDE):
  def __init__(self, beta_min=0.1, beta_max=20, N=1000):
    """Construct the sub-VP SDE that excels at likelihoods.

    Args:
      beta_min: value of beta(0)
      beta_max: value of beta(1)
      N: number of discretization steps
    """
    super().__init__(N)
    self.beta_0 = beta_min
    self.beta_1 = beta_max
    self.N = N

  @property
  def T(self):
    return 1

  def sde(self, x, t):
    beta_t = self.beta_0 + t * (self.beta_1 - self.beta_0)
    drift = -0.5 * beta_t[:, None, None, None] * x
    discount = 1. - torch.exp(-2 * self.beta_0 * t - (self.beta_1 - self.beta_0) * t ** 2)
    diffusion = torch.sqrt(beta_t * discount)
    return drift, diffusion

  def marginal_prob(self, x, t):
    log_mean_coeff = -0.25 * t ** 2 * (self.beta_1 - self.beta_0) - 0.5 * t * self.beta_0
    mean = torch.exp(log_mean_coeff)[:, None, None, None] * x
    std = 1 - torch.exp(2. * log_mean_coeff)
    return mean, std

  def prior_sampling(self, shape):
    return torch.randn(*shape)

  def prior_logp(self, z):
    shape = z.shape
    N = np.prod(shape[1:])
    return -N / 2. * np.log(2 * np.pi) - torch.sum(z ** 2, dim=(1, 2, 3)) / 2.


# ---------------------------------------------------------------- models/layers.py
def get_act(config):
  """Get activation functions from the config file."""

  if config.model.nonlinearity.lower() == 'elu':
    return nn.ELU()
  elif config.model.nonlinearity.lower() == 'relu':
    return nn.ReLU()
  elif config.model.nonlinearity.lower() == 'lrelu':
    return nn.LeakyReLU(negative_slope=0.2)
  elif config.model.nonlinearity.lower() == 'swish':
    return nn.SiLU()
  else:
    raise NotImplementedError('activation function does not exist!')


def variance_scaling(scale, mode, distribution,
                     in_axis=1, out_axis=0,
                     dtype=torch.float32,
                     device='cpu'):
  """Ported from JAX. """

  def _compute_fans(shape, in_axis=1, out_axis=0):
    receptive_field_size = np.prod(shape) / shape[in_axis] / shape[out_axis]
    fan_in = shape[in_axis] * receptive_field_size
    fan_out = shape[out_axis] * receptive_field_size
    return fan_in, fan_out

  def init(shape, dtype=dtype, device=device):
    fan_in, fan_out = _compute_fans(shape, in_axis, out_axis)
    if mode == "fan_in":
      denominator = fan_in
    elif mode == "fan_out":
      denominator = fan_out
    elif mode == "fan_avg":
      denominator = (fan_in + fan_out) / 2
    else:
      raise ValueError(
        "invalid mode for variance scaling initializer: {}".format(mode))
    variance = scale / denominator
    if distribution == "normal":
      return torch.randn(*shape, dtype=dtype, device=device) * np.sqrt(variance)
    elif distribution == "uniform":
      return (torch.rand(*shape, dtype=dtype, device=device) * 2. - 1.) * np.sqrt(3 * variance)
    else:
      raise ValueError("invalid distribution for variance scaling initializer")

  return init


def default_init(scale=1.):
  """The same initialization used in DDPM."""
  scale = 1e-10 if scale == 0 else scale
  return variance_scaling(scale, 'fan_avg', 'uniform')


def ddpm_conv3x3(in_planes, out_planes, stride=1, bias=True, dilation=1, init_scale=1., padding=1):
  """3x3 convolution with DDPM initialization."""
  conv = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=padding,
                   dilation=dilation, bias=bias)
  conv.weight.data = default_init(init_scale)(conv.weight.data.shape)
  nn.init.zeros_(conv.bias)
  return conv


def get_timestep_embedding(timesteps, embedding_dim, max_positions=10000):
  assert len(timesteps.shape) == 1  # and timesteps.dtype == tf.int32
  half_dim = embedding_dim // 2
  # magic number 10000 is from transformers
  emb = math.log(max_positions) / (half_dim - 1)
  # emb = math.log(2.) / (half_dim - 1)
  emb = torch.exp(torch.arange(half_dim, dtype=torch.float32, device=timesteps.device) * -emb)
  # emb = tf.range(num_embeddings, dtype=jnp.float32)[:, None] * emb[None, :]
  # emb = tf.cast(timesteps, dtype=jnp.float32)[:, None] * emb[None, :]
  emb = timesteps.float()[:, None] * emb[None, :]
  emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)
  if embedding_dim % 2 == 1:  # zero pad
    emb = F.pad(emb, (0, 1), mode='constant')
  assert emb.shape == (timesteps.shape[0], embedding_dim)
  return emb


def _einsum(a, b, c, x, y):
  einsum_str = '{},{}->{}'.format(''.join(a), ''.join(b), ''.join(c))
  return torch.einsum(einsum_str, x, y)


def contract_inner(x, y):
  """tensordot(x, y, 1)."""
  x_chars = list(string.ascii_lowercase[:len(x.shape)])
  y_chars = list(string.ascii_lowercase[len(x.shape):len(y.shape) + len(x.shape)])
  y_chars[0] = x_chars[-1]  # first axis of y and last of x get summed
  out_chars = x_chars[:-1] + y_chars[1:]
  return _einsum(x_chars, y_chars, out_chars, x, y)


class NIN(nn.Module):
  def __init__(self, in_dim, num_units, init_scale=0.1):
    super().__init__()
    self.W = nn.Parameter(default_init(scale=init_scale)((in_dim, num_units)), requires_grad=True)
    self.b = nn.Parameter(torch.zeros(num_units), requires_grad=True)

  def forward(self, x):
    x = x.permute(0, 2, 3, 1)
    y = contract_inner(x, self.W) + self.b
    return y.permute(0, 3, 1, 2)


class AttnBlock(nn.Module):
  """Channel-wise self-attention block."""
  def __init__(self, channels):
    super().__init__()
    self.GroupNorm_0 = nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6)
    self.NIN_0 = NIN(channels, channels)
    self.NIN_1 = NIN(channels, channels)
    self.NIN_2 = NIN(channels, channels)
    self.NIN_3 = NIN(channels, channels, init_scale=0.)

  def forward(self, x):
    B, C, H, W = x.shape
    h = self.GroupNorm_0(x)
    q = self.NIN_0(h)
    k = self.NIN_1(h)
    v = self.NIN_2(h)

    w = torch.einsum('bchw,bcij->bhwij', q, k) * (int(C) ** (-0.5))
    w = torch.reshape(w, (B, H, W, H * W))
    w = F.softmax(w, dim=-1)
    w = torch.reshape(w, (B, H, W, H, W))
    h = torch.einsum('bhwij,bcij->bchw', w, v)
    h = self.NIN_3(h)
    return x + h


class Upsample(nn.Module):
  def __init__(self, channels, with_conv=False):
    super().__init__()
    if with_conv:
      self.Conv_0 = ddpm_conv3x3(channels, channels)
    self.with_conv = with_conv

  def forward(self, x):
    B, C, H, W = x.shape
    h = F.interpolate(x, (H * 2, W * 2), mode='nearest')
    if self.with_conv:
      h = self.Conv_0(h)
    return h


class Downsample(nn.Module):
  def __init__(self, channels, with_conv=False):
    super().__init__()
    if with_conv:
      self.Conv_0 = ddpm_conv3x3(channels, channels, stride=2, padding=0)
    self.with_conv = with_conv

  def forward(self, x):
    B, C, H, W = x.shape
    # Emulate 'SAME' padding
    if self.with_conv:
      x = F.pad(x, (0, 1, 0, 1))
      x = self.Conv_0(x)
    else:
      x = F.avg_pool2d(x, kernel_size=2, stride=2, padding=0)

    assert x.shape == (B, C, H // 2, W // 2)
    return x


class ResnetBlockDDPM(nn.Module):
  """The ResNet Blocks used in DDPM."""
  def __init__(self, act, in_ch, out_ch=None, temb_dim=None, conv_shortcut=False, dropout=0.1):
    super().__init__()
    if out_ch is None:
      out_ch = in_ch
    self.GroupNorm_0 = nn.GroupNorm(num_groups=32, num_channels=in_ch, eps=1e-6)
    self.act = act
    self.Conv_0 = ddpm_conv3x3(in_ch, out_ch)
    if temb_dim is not None:
      self.Dense_0 = nn.Linear(temb_dim, out_ch)
      self.Dense_0.weight.data = default_init()(self.Dense_0.weight.data.shape)
      nn.init.zeros_(self.Dense_0.bias)

    self.GroupNorm_1 = nn.GroupNorm(num_groups=32, num_channels=out_ch, eps=1e-6)
    self.Dropout_0 = nn.Dropout(dropout)
    self.Conv_1 = ddpm_conv3x3(out_ch, out_ch, init_scale=0.)
    if in_ch != out_ch:
      if conv_shortcut:
        self.Conv_2 = ddpm_conv3x3(in_ch, out_ch)
      else:
        self.NIN_0 = NIN(in_ch, out_ch)
    self.out_ch = out_ch
    self.in_ch = in_ch
    self.conv_shortcut = conv_shortcut

  def forward(self, x, temb=None):
    B, C, H, W = x.shape
    assert C == self.in_ch
    out_ch = self.out_ch if self.out_ch else self.in_ch
    h = self.act(self.GroupNorm_0(x))
    h = self.Conv_0(h)
    # Add bias to each feature map conditioned on the time embedding
    if temb is not None:
      h += self.Dense_0(self.act(temb))[:, :, None, None]
    h = self.act(self.GroupNorm_1(h))
    h = self.Dropout_0(h)
    h = self.Conv_1(h)
    if C != out_ch:
      if self.conv_shortcut:
        x = self.Conv_2(x)
      else:
        x = self.NIN_0(x)
    return x + h


# ---------------------------------------------------------------- models/utils.py
_MODELS = {}


def register_model(cls=None, *, name=None):
  """A decorator for registering model classes."""

  def _register(cls):
    if name is None:
      local_name = cls.__name__
    else:
      local_name = name
    if local_name in _MODELS:
      raise ValueError(f'Already registered model with name: {local_name}')
    _MODELS[local_name] = cls
    return cls

  if cls is None:
    return _register
  else:
    return _register(cls)


def get_model(name):
  return _MODELS[name]


def get_sigmas(config):
  """Get sigmas --- the set of noise levels for SMLD from config files.
  Args:
    config: A ConfigDict object parsed from the config file
  Returns:
    sigmas: a jax numpy arrary of noise levels
  """
  sigmas = np.exp(
    np.linspace(np.log(config.model.sigma_max), np.log(config.model.sigma_min), config.model.num_scales))

  return sigmas


def create_model(config):
  """Create the score model."""
  model_name = config.model.name
  score_model = get_model(model_name)(config)
  score_model = score_model.to(config.device)
  score_model = torch.nn.DataParallel(score_model)
  return score_model


def get_model_fn(model, train=False):
  """Create a function to give the output of the score-based model.

  Args:
    model: The score model.
    train: `True` for training and `False` for evaluation.

  Returns:
    A model function.
  """

  def model_fn(x, labels):
    """Compute the output of the score-based model.

    Args:
      x: A mini-batch of input data.
      labels: A mini-batch of conditioning variables for time steps. Should be interpreted differently
        for different models.

    Returns:
      A tuple of (model output, new mutable states)
    """
    if not train:
      model.eval()
      return model(x, labels)
    else:
      model.train()
      return model(x, labels)

  return model_fn


def get_score_fn(sde, model, train=False, continuous=False, bug=None):
  """Wraps `score_fn` so that the model output corresponds to a real time-dependent score function.

  Args:
    sde: An `sde_lib.SDE` object that represents the forward SDE.
    model: A score model.
    train: `True` for training and `False` for evaluation.
    continuous: If `True`, the score-based model is expected to directly take continuous time steps.

  Returns:
    A score function.
  """
  model_fn = get_model_fn(model, train=train)

  if isinstance(sde, subVPSDE):  # (port) the VPSDE / VESDE branches are not ported
    def score_fn(x, t):
      # Scale neural network output by standard deviation and flip sign
      if continuous or isinstance(sde, subVPSDE):
        # For VP-trained models, t=0 corresponds to the lowest noise level
        # The maximum value of time embedding is assumed to 999 for
        # continuously-trained models.
        if bug == "time_labels_not_scaled":
          # the continuous time passed as it is: the sinusoidal embedding of t in [0, 1] hardly changes with t
          labels = t
        else:
          labels = t * 999
        score = model_fn(x, labels)
        std = sde.marginal_prob(torch.zeros_like(x), t)[1]

      if bug == "score_not_divided_by_std":
        # the network output taken as the score itself (the VE wrapper's convention, the difference asked about
        # in https://github.com/yang-song/score_sde_pytorch/issues/49)
        score = -score
      else:
        score = -score / std[:, None, None, None]
      return score

  else:
    raise NotImplementedError(f"SDE class {sde.__class__.__name__} not yet supported.")

  return score_fn


# ---------------------------------------------------------------- models/ddpm.py
conv3x3 = ddpm_conv3x3
default_initializer = default_init


@register_model(name='ddpm')
class DDPM(nn.Module):
  def __init__(self, config):
    super().__init__()
    self.act = act = get_act(config)
    self.register_buffer('sigmas', torch.tensor(get_sigmas(config)))

    self.nf = nf = config.model.nf
    ch_mult = config.model.ch_mult
    self.num_res_blocks = num_res_blocks = config.model.num_res_blocks
    self.attn_resolutions = attn_resolutions = config.model.attn_resolutions
    dropout = config.model.dropout
    resamp_with_conv = config.model.resamp_with_conv
    self.num_resolutions = num_resolutions = len(ch_mult)
    self.all_resolutions = all_resolutions = [config.data.image_size // (2 ** i) for i in range(num_resolutions)]

    AttnBlock_ = functools.partial(AttnBlock)  # (port) named AttnBlock in the original, shadowing layers.AttnBlock
    self.conditional = conditional = config.model.conditional
    ResnetBlock = functools.partial(ResnetBlockDDPM, act=act, temb_dim=4 * nf, dropout=dropout)
    if conditional:
      # Condition on noise levels.
      modules = [nn.Linear(nf, nf * 4)]
      modules[0].weight.data = default_initializer()(modules[0].weight.data.shape)
      nn.init.zeros_(modules[0].bias)
      modules.append(nn.Linear(nf * 4, nf * 4))
      modules[1].weight.data = default_initializer()(modules[1].weight.data.shape)
      nn.init.zeros_(modules[1].bias)

    self.centered = config.data.centered
    channels = config.data.num_channels

    # Downsampling block
    modules.append(conv3x3(channels, nf))
    hs_c = [nf]
    in_ch = nf
    for i_level in range(num_resolutions):
      # Residual blocks for this resolution
      for i_block in range(num_res_blocks):
        out_ch = nf * ch_mult[i_level]
        modules.append(ResnetBlock(in_ch=in_ch, out_ch=out_ch))
        in_ch = out_ch
        if all_resolutions[i_level] in attn_resolutions:
          modules.append(AttnBlock_(channels=in_ch))
        hs_c.append(in_ch)
      if i_level != num_resolutions - 1:
        modules.append(Downsample(channels=in_ch, with_conv=resamp_with_conv))
        hs_c.append(in_ch)

    in_ch = hs_c[-1]
    modules.append(ResnetBlock(in_ch=in_ch))
    modules.append(AttnBlock_(channels=in_ch))
    modules.append(ResnetBlock(in_ch=in_ch))

    # Upsampling block
    for i_level in reversed(range(num_resolutions)):
      for i_block in range(num_res_blocks + 1):
        out_ch = nf * ch_mult[i_level]
        modules.append(ResnetBlock(in_ch=in_ch + hs_c.pop(), out_ch=out_ch))
        in_ch = out_ch
      if all_resolutions[i_level] in attn_resolutions:
        modules.append(AttnBlock_(channels=in_ch))
      if i_level != 0:
        modules.append(Upsample(channels=in_ch, with_conv=resamp_with_conv))

    assert not hs_c
    modules.append(nn.GroupNorm(num_channels=in_ch, num_groups=32, eps=1e-6))
    modules.append(conv3x3(in_ch, channels, init_scale=0.))
    self.all_modules = nn.ModuleList(modules)

    self.scale_by_sigma = config.model.scale_by_sigma

  def forward(self, x, labels):
    modules = self.all_modules
    m_idx = 0
    if self.conditional:
      # timestep/scale embedding
      timesteps = labels
      temb = get_timestep_embedding(timesteps, self.nf)
      temb = modules[m_idx](temb)
      m_idx += 1
      temb = modules[m_idx](self.act(temb))
      m_idx += 1
    else:
      temb = None

    if self.centered:
      # Input is in [-1, 1]
      h = x
    else:
      # Input is in [0, 1]
      h = 2 * x - 1.

    # Downsampling block
    hs = [modules[m_idx](h)]
    m_idx += 1
    for i_level in range(self.num_resolutions):
      # Residual blocks for this resolution
      for i_block in range(self.num_res_blocks):
        h = modules[m_idx](hs[-1], temb)
        m_idx += 1
        if h.shape[-1] in self.attn_resolutions:
          h = modules[m_idx](h)
          m_idx += 1
        hs.append(h)
      if i_level != self.num_resolutions - 1:
        hs.append(modules[m_idx](hs[-1]))
        m_idx += 1

    h = hs[-1]
    h = modules[m_idx](h, temb)
    m_idx += 1
    h = modules[m_idx](h)
    m_idx += 1
    h = modules[m_idx](h, temb)
    m_idx += 1

    # Upsampling block
    for i_level in reversed(range(self.num_resolutions)):
      for i_block in range(self.num_res_blocks + 1):
        h = modules[m_idx](torch.cat([h, hs.pop()], dim=1), temb)
        m_idx += 1
      if h.shape[-1] in self.attn_resolutions:
        h = modules[m_idx](h)
        m_idx += 1
      if i_level != 0:
        h = modules[m_idx](h)
        m_idx += 1

    assert not hs
    h = self.act(modules[m_idx](h))
    m_idx += 1
    h = modules[m_idx](h)
    m_idx += 1
    assert m_idx == len(modules)

    if self.scale_by_sigma:
      # Divide the output by sigmas. Useful for training with the NCSN loss.
      # The DDPM loss scales the network output by sigma in the loss function,
      # so no need of doing it here.
      used_sigmas = self.sigmas[labels, None, None, None]
      h = h / used_sigmas

    return h


# ---------------------------------------------------------------- models/ema.py
class ExponentialMovingAverage:
  """
  Maintains (exponential) moving average of a set of parameters.
  """

  def __init__(self, parameters, decay, use_num_updates=True):
    """
    Args:
      parameters: Iterable of `torch.nn.Parameter`; usually the result of
        `model.parameters()`.
      decay: The exponential decay.
      use_num_updates: Whether to use number of updates when computing
        averages.
    """
    if decay < 0.0 or decay > 1.0:
      raise ValueError('Decay must be between 0 and 1')
    self.decay = decay
    self.num_updates = 0 if use_num_updates else None
    self.shadow_params = [p.clone().detach()
                          for p in parameters if p.requires_grad]
    self.collected_params = []

  def update(self, parameters):
    """
    Update currently maintained parameters.

    Call this every time the parameters are updated, such as the result of
    the `optimizer.step()` call.

    Args:
      parameters: Iterable of `torch.nn.Parameter`; usually the same set of
        parameters used to initialize this object.
    """
    decay = self.decay
    if self.num_updates is not None:
      self.num_updates += 1
      decay = min(decay, (1 + self.num_updates) / (10 + self.num_updates))
    one_minus_decay = 1.0 - decay
    with torch.no_grad():
      parameters = [p for p in parameters if p.requires_grad]
      for s_param, param in zip(self.shadow_params, parameters):
        s_param.sub_(one_minus_decay * (s_param - param))

  def copy_to(self, parameters):
    """
    Copy current parameters into given collection of parameters.

    Args:
      parameters: Iterable of `torch.nn.Parameter`; the parameters to be
        updated with the stored moving averages.
    """
    parameters = [p for p in parameters if p.requires_grad]
    for s_param, param in zip(self.shadow_params, parameters):
      if param.requires_grad:
        param.data.copy_(s_param.data)

  def store(self, parameters):
    """
    Save the current parameters for restoring later.

    Args:
      parameters: Iterable of `torch.nn.Parameter`; the parameters to be
        temporarily stored.
    """
    self.collected_params = [param.clone() for param in parameters]

  def restore(self, parameters):
    """
    Restore the parameters stored with the `store` method.
    Useful to validate the model with EMA parameters without affecting the
    original optimization process. Store the parameters before the
    `copy_to` method. After validation (or model saving), use this to
    restore the former parameters.

    Args:
      parameters: Iterable of `torch.nn.Parameter`; the parameters to be
        updated with the stored parameters.
    """
    for c_param, param in zip(self.collected_params, parameters):
      param.data.copy_(c_param.data)


# ---------------------------------------------------------------- losses.py
def get_optimizer(config, params):
  """Returns a flax optimizer object based on `config`."""
  if config.optim.optimizer == 'Adam':
    optimizer = optim.Adam(params, lr=config.optim.lr, betas=(config.optim.beta1, 0.999), eps=config.optim.eps,
                           weight_decay=config.optim.weight_decay)
  else:
    raise NotImplementedError(
      f'Optimizer {config.optim.optimizer} not supported yet!')

  return optimizer


def optimization_manager(config):
  """Returns an optimize_fn based on `config`."""

  def optimize_fn(optimizer, params, step, lr=config.optim.lr,
                  warmup=config.optim.warmup,
                  grad_clip=config.optim.grad_clip):
    """Optimizes with warmup and gradient clipping (disabled if negative)."""
    if warmup > 0:
      for g in optimizer.param_groups:
        g['lr'] = lr * np.minimum(step / warmup, 1.0)
    if grad_clip >= 0:
      torch.nn.utils.clip_grad_norm_(params, max_norm=grad_clip)
    optimizer.step()

  return optimize_fn


def get_sde_loss_fn(sde, train, reduce_mean=True, continuous=True, likelihood_weighting=True, eps=1e-5, bug=None):
  """Create a loss function for training with arbirary SDEs.

  Args:
    sde: An `sde_lib.SDE` object that represents the forward SDE.
    train: `True` for training loss and `False` for evaluation loss.
    reduce_mean: If `True`, average the loss across data dimensions. Otherwise sum the loss across data dimensions.
    continuous: `True` indicates that the model is defined to take continuous time steps. Otherwise it requires
      ad-hoc interpolation to take continuous time steps.
    likelihood_weighting: If `True`, weight the mixture of score matching losses
      according to https://arxiv.org/abs/2101.09258; otherwise use the weighting recommended in our paper.
    eps: A `float` number. The smallest time step to sample from.

  Returns:
    A loss function.
  """
  reduce_op = torch.mean if reduce_mean else lambda *args, **kwargs: 0.5 * torch.sum(*args, **kwargs)

  def perturb(batch):
    """(port) the loss function's first five lines, shared with the Program's batch."""
    t = torch.rand(batch.shape[0], device=batch.device) * (sde.T - eps) + eps
    z = torch.randn_like(batch)
    mean, std = sde.marginal_prob(batch, t)
    if bug == "perturbation_std_dropped":
      # the noise added at unit scale whatever t is: the input no longer matches the noise level its time says
      perturbed_data = mean + z
    else:
      perturbed_data = mean + std[:, None, None, None] * z
    return t, z, std, perturbed_data

  def weighted_loss(score, z, std, t, batch_like):
    """(port) the loss function's last lines, shared with the Program's ``loss_fn``."""
    if not likelihood_weighting:
      losses = torch.square(score * std[:, None, None, None] + z)
      losses = reduce_op(losses.reshape(losses.shape[0], -1), dim=-1)
    else:
      g2 = sde.sde(torch.zeros_like(batch_like), t)[1] ** 2
      losses = torch.square(score + z / std[:, None, None, None])
      losses = reduce_op(losses.reshape(losses.shape[0], -1), dim=-1) * g2

    loss = torch.mean(losses)
    return loss

  def loss_fn(model, batch):
    """Compute the loss function.

    Args:
      model: A score model.
      batch: A mini-batch of training data.

    Returns:
      loss: A scalar that represents the average loss value across the mini-batch.
    """
    score_fn = get_score_fn(sde, model, train=train, continuous=continuous, bug=bug)
    t, z, std, perturbed_data = perturb(batch)
    score = score_fn(perturbed_data, t)
    return weighted_loss(score, z, std, t, batch)

  loss_fn.perturb = perturb
  loss_fn.weighted_loss = weighted_loss
  return loss_fn


def get_step_fn(sde, train, optimize_fn=None, reduce_mean=False, continuous=True, likelihood_weighting=False,
                bug=None):
  """Create a one-step training/evaluation function.

  Args:
    sde: An `sde_lib.SDE` object that represents the forward SDE.
    optimize_fn: An optimization function.
    reduce_mean: If `True`, average the loss across data dimensions. Otherwise sum the loss across data dimensions.
    continuous: `True` indicates that the model is defined to take continuous time steps.
    likelihood_weighting: If `True`, weight the mixture of score matching losses according to
      https://arxiv.org/abs/2101.09258; otherwise use the weighting recommended by our paper.

  Returns:
    A one-step function for training or evaluation.
  """
  assert continuous  # (port) the discrete SMLD / DDPM losses are not ported
  loss_fn = get_sde_loss_fn(sde, train, reduce_mean=reduce_mean,
                            continuous=True, likelihood_weighting=likelihood_weighting, bug=bug)

  def step_fn(state, batch):
    """Running one step of training or evaluation.

    This function will undergo `jax.lax.scan` so that multiple steps can be pmapped and jit-compiled together
    for faster execution.

    Args:
      state: A dictionary of training information, containing the score model, optimizer,
       EMA status, and number of optimization steps.
      batch: A mini-batch of training/evaluation data.

    Returns:
      loss: The average loss value of this state.
    """
    model = state['model']
    if train:
      optimizer = state['optimizer']
      optimizer.zero_grad()
      loss = loss_fn(model, batch)
      loss.backward()
      optimize_fn(optimizer, model.parameters(), step=state['step'])
      state['step'] += 1
      state['ema'].update(model.parameters())
    else:
      with torch.no_grad():
        ema = state['ema']
        ema.store(model.parameters())
        ema.copy_to(model.parameters())
        loss = loss_fn(model, batch)
        ema.restore(model.parameters())

    return loss

  step_fn.loss_fn = loss_fn
  return step_fn


# ---------------------------------------------------------------- configs (default_cifar10_configs + subvp/cifar10_ddpm_continuous)
def get_config(seed):
  ns = types.SimpleNamespace
  training = ns(batch_size=8, n_iters=None, snapshot_freq=50000, log_freq=50, eval_freq=100,
                snapshot_freq_for_preemption=10000, snapshot_sampling=True, likelihood_weighting=False,
                continuous=True, reduce_mean=True, sde='subvpsde')
  data = ns(dataset='synthetic', image_size=16, random_flip=True, centered=True, uniform_dequantization=False,
            num_channels=3)
  model = ns(sigma_min=0.01, sigma_max=50, num_scales=1000, beta_min=0.1, beta_max=20., dropout=0.1,
             embedding_type='fourier', name='ddpm', scale_by_sigma=False, ema_rate=0.9999, normalization='GroupNorm',
             nonlinearity='swish', nf=32, ch_mult=(1, 2), num_res_blocks=1, attn_resolutions=(8,),
             resamp_with_conv=True, conditional=True)
  optim_ = ns(weight_decay=0, optimizer='Adam', lr=2e-4, beta1=0.9, eps=1e-8, warmup=20, grad_clip=1.)
  return ns(training=training, data=data, model=model, optim=optim_, seed=seed, device=torch.device('cpu'))


# ---------------------------------------------------------------- datasets.py (the data, see the docstring)
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [250, 250, 250]], dtype=np.float64)


def get_data_scaler(config):
  """Data normalizer. Assume data are always in [0, 1]."""
  if config.data.centered:
    # Rescale to [-1, 1]
    return lambda x: x * 2. - 1.
  else:
    return lambda x: x


def synthetic_train_iter(config, seed, n=256):
  """NHWC float images in [0, 1], shuffled batches, random horizontal flips, repeated forever."""
  rng = np.random.default_rng(seed)
  blocks = rng.integers(0, len(PALETTE), size=(n, 4, 4))
  images = PALETTE[blocks].repeat(4, axis=1).repeat(4, axis=2) + rng.normal(0.0, 6.0, size=(n, 16, 16, 3))
  images = (np.clip(images, 0, 255) / 255.0).astype(np.float32)
  bs = config.training.batch_size
  while True:
    order = rng.permutation(n)
    for k in range(0, n - bs + 1, bs):
      batch = images[order[k:k + bs]]
      if config.data.random_flip:
        flip = rng.random(bs) < 0.5
        batch = np.where(flip[:, None, None, None], batch[:, :, ::-1], batch)
      yield {'image': np.ascontiguousarray(batch)}


# ---------------------------------------------------------------- run_lib.py
def _build(seed, bug=None):
  config = get_config(seed)
  torch.manual_seed(config.seed)

  # Initialize model.
  score_model = create_model(config)
  ema = ExponentialMovingAverage(score_model.parameters(), decay=config.model.ema_rate)
  optimizer = get_optimizer(config, score_model.parameters())
  state = dict(optimizer=optimizer, model=score_model, ema=ema, step=0)
  initial_step = int(state['step'])

  # Build data iterators
  train_iter = synthetic_train_iter(config, seed)
  # Create data normalizer and its inverse
  scaler = get_data_scaler(config)

  # Setup SDEs
  sde = subVPSDE(beta_min=config.model.beta_min, beta_max=config.model.beta_max, N=config.model.num_scales)

  # Build one-step training and evaluation functions
  optimize_fn = optimization_manager(config)
  continuous = config.training.continuous
  reduce_mean = config.training.reduce_mean
  likelihood_weighting = config.training.likelihood_weighting
  train_step_fn = get_step_fn(sde, train=True, optimize_fn=optimize_fn,
                              reduce_mean=reduce_mean, continuous=continuous,
                              likelihood_weighting=likelihood_weighting, bug=bug)
  eval_step_fn = get_step_fn(sde, train=False, optimize_fn=optimize_fn,
                             reduce_mean=reduce_mean, continuous=continuous,
                             likelihood_weighting=likelihood_weighting, bug=bug)

  def next_batch():
    batch = torch.from_numpy(next(train_iter)['image']).to(config.device).float()
    batch = batch.permute(0, 3, 1, 2)
    batch = scaler(batch)
    return batch

  def loop():
    step = initial_step
    while True:
      batch = next_batch()
      # Execute one training step
      loss = train_step_fn(state, batch)
      yield loss.detach()
      step += 1

  # (port) the Program's batch: one data batch perturbed as the loss perturbs it
  loss_fn_ = train_step_fn.loss_fn
  x0 = next_batch()
  t, z, std, perturbed_data = loss_fn_.perturb(x0)
  labels = t if bug == "time_labels_not_scaled" else t * 999

  def loss_fn(model_output, targets):
    """get_sde_loss_fn's loss on the network's output for ``(x_t, 999 t)``: the score ``-output / std``, then
    ``mean((score * std + z)^2)``."""
    z, std, t = targets
    if bug == "score_not_divided_by_std":
      score = -model_output
    else:
      score = -model_output / std[:, None, None, None]
    return loss_fn_.weighted_loss(score, z, std, t, z)

  def eval_fn(model, batch):
    """eval_step_fn (the EMA weights swapped in, the loss under no_grad, the weights restored) on the clean images
    behind ``batch``."""
    return float(eval_step_fn(dict(state, model=model), x0))

  steps = loop()
  return Program(name="scoresde_subvp", model=score_model, batch=((perturbed_data, labels), (z, std, t)),
                 loss_fn=loss_fn, optimizer=optimizer, train_step=lambda: next(steps), eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
  # the sub-VP score wrapper without the division by the marginal std (the VE wrapper's convention; the difference
  # is the question of https://github.com/yang-song/score_sde_pytorch/issues/49): the loss then asks the network for
  # z / std, a target that blows up as t -> 0.
  Bug("score_not_divided_by_std", functools.partial(_build, bug="score_not_divided_by_std"), "learning_ledger",
      ("OBJECTIVE",)),
  # classic: the continuous time fed to the embedding unscaled (``labels = t`` instead of ``t * 999``); the
  # network's output hardly depends on the noise level.
  Bug("time_labels_not_scaled", functools.partial(_build, bug="time_labels_not_scaled"), "learning_ledger",
      ("DEPENDENCY",)),
  # classic: the perturbation without its std (``mean + z``); the noisy input no longer has the noise level its time
  # label says, so the (input, time) -> noise rule is not the SDE's.
  Bug("perturbation_std_dropped", functools.partial(_build, bug="perturbation_std_dropped"), "learning_ledger",
      ("TASK",)),
]
