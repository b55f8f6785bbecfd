"""Improved Consistency Training (Song & Dhariwal, "Improved Techniques for Training Consistency Models"), Kinyugo's
consistency_models: a UNet (GroupNorm/SiLU blocks with a Fourier noise-level embedding, self-attention in the middle
blocks, pixel-unshuffle downsampling) wrapped with the EDM skip/output scalings, trained from scratch on pairs of
noise levels adjacent on a Karras schedule (levels drawn from the lognormal distribution, shared noise, the lower
level's output under ``no_grad`` as the target), pseudo-Huber loss weighted by ``1 / (sigma_{i+1} - sigma_i)``; a
Lightning module with Adam (betas 0.9/0.995) and a per-step LinearLR warmup, an EMA model updated after each batch.

Source: https://github.com/Kinyugo/consistency_models
Commit: 2e6618d4b908f7ef7f5424d83afe0eb5c6c85957
Files: notebooks/improved_techniques_for_consistency_training_example.ipynb, consistency_models/consistency_models.py,
consistency_models/utils.py
License: MIT (Copyright (c) 2023 Kinyugo Maina; full text in LICENSES/Kinyugo-consistency_models.txt)
Domain: vision, generative model (consistency training, Lightning module)

Kept as written: the notebook's ``GroupNorm``, ``SelfAttention``, ``UNetBlock``, ``UNetBlockWithSelfAttention``,
``Downsample``, ``Upsample``, ``NoiseLevelEmbedding``, ``UNetConfig``/``UNet`` (block construction and forward),
``LitImprovedConsistencyModelConfig``, ``LitImprovedConsistencyModel`` (``training_step``, ``on_train_batch_end``,
``configure_optimizers``) and ``run_training``'s model/EMA creation (``ImprovedConsistencyTraining(final_timesteps=
11)``, ``lr_scheduler_iters``); the library's ``ImprovedConsistencyTraining.__call__``,
``improved_timesteps_schedule``, ``karras_schedule``, ``lognormal_timestep_distribution``,
``improved_loss_weighting``, ``pseudo_huber_loss``, ``skip_scaling``, ``output_scaling``, ``model_forward_wrapper``,
``pad_dims_like`` and ``update_ema_model_``. Also as written: ``on_train_batch_end`` calls
``update_ema_model_(self.model, self.ema_model, rate)`` although the signature is ``(ema_model, online_model,
rate)``, so the trained model is pulled toward the frozen EMA copy by ``1 - 0.99993`` per step and the EMA copy
never moves (the classic consistency-training notebook of the same repository passes them in the documented order);
a report of it is a true finding about the notebook.

Deviations from the original:
- einops is not here: the ``Rearrange`` layers and ``rearrange`` are written out as ``view``/``permute`` (kept as
  modules at the same ``nn.Sequential`` positions, so parameter names are the notebook's);
- sizes for 2 CPU cores: images 32x32 -> 16x16, batch 32 kept; ``UNetConfig`` ``noise_level_channels`` 256 -> 32,
  ``n_heads`` 8 -> 2, ``top_blocks_channels`` (128, 128) -> (16, 16), ``mid_blocks_channels`` (256, 512) ->
  (32, 32), blocks per resolution (2, 2)/(4, 4) -> (1, 1)/(1, 1) (resampling and dropout as in the notebook);
  ``lr`` 1e-4 -> 1e-3 and ``lr_scheduler_iters`` 1000 -> 10 so that 30 steps show the loss falling (the notebook
  runs 10000 steps; ``max_steps`` 10000 is kept for the timestep schedule);
- data: the butterflies ``ImageFolder`` (a gdown download) is replaced by 256 synthetic 16x16 RGB "butterflies" made
  from ``seed`` (two mirrored coloured wing blobs on a plain background); torchvision's ``Resize`` (identity here),
  ``RandomHorizontalFlip``, ``ToTensor`` and the ``x * 2 - 1`` Lambda are written out; the DataLoader shuffles with a
  ``torch.Generator(seed)``, no workers;
- Lightning: ``Trainer.fit`` is not run; a ``Trainer(barebones=True, max_steps=10000)`` is attached (so
  ``self.log_dict`` is a no-op and ``self.trainer.max_steps`` exists) and ``train_step`` drives one step of
  automatic optimization by hand: ``optimizer.step(closure)`` with the closure running ``training_step``,
  ``zero_grad`` and ``backward``, then the per-step scheduler, the trainer's global step counter advanced, and
  ``on_train_batch_end``; ``precision="16-mixed"`` is dropped (CPU float32); sampling/logging images
  (``__sample_and_log_samples``, tensorboard) is left out, as are ``seed_everything`` (``torch.manual_seed(seed)``)
  and ``save_pretrained``;
- the Program's ``model`` is the trained UNet, its ``batch`` one draw of ``ImprovedConsistencyTraining``'s inputs
  ``(next_noisy_x, next_sigmas)`` with the wrapper's inputs, target and weights for ``loss_fn``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP035, UP045, UP007, RUF007

from __future__ import annotations

import functools
import math
import pathlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

import pytorch_lightning as pl
import torch
from pytorch_lightning import LightningModule
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16  # (port) 32


# --------------------------------------------------------------------------------- consistency_models/utils.py
def pad_dims_like(x: Tensor, other: Tensor) -> Tensor:
    ndim = other.ndim - x.ndim
    return x.view(*x.shape, *((1,) * ndim))


def _update_ema_weights(
    ema_weight_iter: Iterator[Tensor],
    online_weight_iter: Iterator[Tensor],
    ema_decay_rate: float,
) -> None:
    for ema_weight, online_weight in zip(ema_weight_iter, online_weight_iter):
        if ema_weight.data is None:
            ema_weight.data.copy_(online_weight.data)
        else:
            ema_weight.data.lerp_(online_weight.data, 1.0 - ema_decay_rate)


def update_ema_model_(
    ema_model: nn.Module, online_model: nn.Module, ema_decay_rate: float
) -> nn.Module:
    # Update parameters
    _update_ema_weights(
        ema_model.parameters(), online_model.parameters(), ema_decay_rate
    )
    # Update buffers
    _update_ema_weights(ema_model.buffers(), online_model.buffers(), ema_decay_rate)

    return ema_model


# ---------------------------------------------------------------------- consistency_models/consistency_models.py
def improved_timesteps_schedule(
    current_training_step: int,
    total_training_steps: int,
    initial_timesteps: int = 10,
    final_timesteps: int = 1280,
) -> int:
    total_training_steps_prime = math.floor(
        total_training_steps
        / (math.log2(math.floor(final_timesteps / initial_timesteps)) + 1)
    )
    num_timesteps = initial_timesteps * math.pow(
        2, math.floor(current_training_step / total_training_steps_prime)
    )
    num_timesteps = min(num_timesteps, final_timesteps) + 1

    return num_timesteps


def karras_schedule(
    num_timesteps: int,
    sigma_min: float = 0.002,
    sigma_max: float = 80.0,
    rho: float = 7.0,
    device: torch.device = None,
) -> Tensor:
    rho_inv = 1.0 / rho
    # Clamp steps to 1 so that we don't get nans
    steps = torch.arange(num_timesteps, device=device) / max(num_timesteps - 1, 1)
    sigmas = sigma_min**rho_inv + steps * (
        sigma_max**rho_inv - sigma_min**rho_inv
    )
    sigmas = sigmas**rho

    return sigmas


def lognormal_timestep_distribution(
    num_samples: int,
    sigmas: Tensor,
    mean: float = -1.1,
    std: float = 2.0,
) -> Tensor:
    pdf = torch.erf((torch.log(sigmas[1:]) - mean) / (std * math.sqrt(2))) - torch.erf(
        (torch.log(sigmas[:-1]) - mean) / (std * math.sqrt(2))
    )
    pdf = pdf / pdf.sum()

    timesteps = torch.multinomial(pdf, num_samples, replacement=True)

    return timesteps


def improved_loss_weighting(sigmas: Tensor) -> Tensor:
    return 1 / (sigmas[1:] - sigmas[:-1])


def pseudo_huber_loss(input: Tensor, target: Tensor) -> Tensor:
    c = 0.00054 * math.sqrt(math.prod(input.shape[1:]))
    return torch.sqrt((input - target) ** 2 + c**2) - c


def skip_scaling(
    sigma: Tensor, sigma_data: float = 0.5, sigma_min: float = 0.002
) -> Tensor:
    return sigma_data**2 / ((sigma - sigma_min) ** 2 + sigma_data**2)


def output_scaling(
    sigma: Tensor, sigma_data: float = 0.5, sigma_min: float = 0.002
) -> Tensor:
    return (sigma_data * (sigma - sigma_min)) / (sigma_data**2 + sigma**2) ** 0.5


def model_forward_wrapper(
    model: nn.Module,
    x: Tensor,
    sigma: Tensor,
    sigma_data: float = 0.5,
    sigma_min: float = 0.002,
    **kwargs: Any,
) -> Tensor:
    c_skip = skip_scaling(sigma, sigma_data, sigma_min)
    c_out = output_scaling(sigma, sigma_data, sigma_min)

    # Pad dimensions as broadcasting will not work
    c_skip = pad_dims_like(c_skip, x)
    c_out = pad_dims_like(c_out, x)

    return c_skip * x + c_out * model(x, sigma, **kwargs)


@dataclass
class ConsistencyTrainingOutput:
    predicted: Tensor
    target: Tensor
    num_timesteps: int
    sigmas: Tensor
    loss_weights: Optional[Tensor] = None


class ImprovedConsistencyTraining:
    def __init__(
        self,
        sigma_min: float = 0.002,
        sigma_max: float = 80.0,
        rho: float = 7.0,
        sigma_data: float = 0.5,
        initial_timesteps: int = 10,
        final_timesteps: int = 1280,
        lognormal_mean: float = -1.1,
        lognormal_std: float = 2.0,
        bug: Optional[str] = None,
    ) -> None:
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.rho = rho
        self.sigma_data = sigma_data
        self.initial_timesteps = initial_timesteps
        self.final_timesteps = final_timesteps
        self.lognormal_mean = lognormal_mean
        self.lognormal_std = lognormal_std
        self.bug = bug

    def __call__(
        self,
        model: nn.Module,
        x: Tensor,
        current_training_step: int,
        total_training_steps: int,
        **kwargs: Any,
    ) -> ConsistencyTrainingOutput:
        num_timesteps = improved_timesteps_schedule(
            current_training_step,
            total_training_steps,
            self.initial_timesteps,
            self.final_timesteps,
        )
        sigmas = karras_schedule(
            num_timesteps, self.sigma_min, self.sigma_max, self.rho, x.device
        )
        noise = torch.randn_like(x)

        timesteps = lognormal_timestep_distribution(
            x.shape[0], sigmas, self.lognormal_mean, self.lognormal_std
        )

        current_sigmas = sigmas[timesteps]
        next_sigmas = sigmas[timesteps + 1]

        next_noisy_x = x + pad_dims_like(next_sigmas, x) * noise
        next_x = model_forward_wrapper(
            model,
            next_noisy_x,
            next_sigmas,
            self.sigma_data,
            self.sigma_min,
            **kwargs,
        )

        if self.bug == "noise_not_shared":
            noise = torch.randn_like(x)
        if self.bug == "target_not_detached":
            current_noisy_x = x + pad_dims_like(current_sigmas, x) * noise
            current_x = model_forward_wrapper(
                model, current_noisy_x, current_sigmas, self.sigma_data, self.sigma_min, **kwargs,
            )
        else:
            with torch.no_grad():
                current_noisy_x = x + pad_dims_like(current_sigmas, x) * noise
                current_x = model_forward_wrapper(
                    model,
                    current_noisy_x,
                    current_sigmas,
                    self.sigma_data,
                    self.sigma_min,
                    **kwargs,
                )

        loss_weights = pad_dims_like(improved_loss_weighting(sigmas)[timesteps], next_x)

        self.last_inputs = (next_noisy_x.detach(), next_sigmas, current_x.detach(), loss_weights)  # (port)
        return ConsistencyTrainingOutput(
            next_x, current_x, num_timesteps, sigmas, loss_weights
        )


# -------------------------------------------------------------------------------------------- the notebook
class _Rearrange(nn.Module):  # (port) einops.layers.torch.Rearrange, written out for the patterns used here
    def __init__(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


def GroupNorm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=min(32, channels // 4), num_channels=channels)


class SelfAttention(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        n_heads: int = 8,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()

        self.dropout = dropout

        def qkv(t, h=n_heads):  # "b (i h d) x y -> i b h (x y) d", i=3, h=n_heads
            b, c, xx, yy = t.shape
            return t.reshape(b, 3, h, c // (3 * h), xx * yy).permute(1, 0, 2, 4, 3)

        def merge_heads(t):  # "b h l d -> b l (h d)"
            b, h, l_, d = t.shape
            return t.permute(0, 2, 1, 3).reshape(b, l_, h * d)

        self.qkv_projection = nn.Sequential(
            GroupNorm(in_channels),
            nn.Conv2d(in_channels, 3 * in_channels, kernel_size=1, bias=False),
            _Rearrange(qkv),
        )
        self.output_projection = nn.Sequential(
            _Rearrange(merge_heads),
            nn.Linear(in_channels, out_channels, bias=False),
            _Rearrange(lambda t: t.transpose(1, 2)),  # "b l d -> b d l"
            GroupNorm(out_channels),
            nn.Dropout1d(dropout),
        )
        self.residual_projection = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv_projection(x).unbind(dim=0)

        output = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=False
        )
        output = self.output_projection(output)
        # rearrange(output, "b c (x y) -> b c x y", x=x.shape[-2], y=x.shape[-1])
        output = output.reshape(output.shape[0], output.shape[1], x.shape[-2], x.shape[-1])

        return output + self.residual_projection(x)


class UNetBlock(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        noise_level_channels: int,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()

        self.input_projection = nn.Sequential(
            GroupNorm(in_channels),
            nn.SiLU(),
            nn.Conv2d(in_channels, out_channels, kernel_size=3, padding="same"),
            nn.Dropout2d(dropout),
        )
        self.noise_level_projection = nn.Sequential(
            nn.SiLU(),
            nn.Conv2d(noise_level_channels, out_channels, kernel_size=1),
        )
        self.output_projection = nn.Sequential(
            GroupNorm(out_channels),
            nn.SiLU(),
            nn.Conv2d(out_channels, out_channels, kernel_size=3, padding="same"),
            nn.Dropout2d(dropout),
        )
        self.residual_projection = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x: Tensor, noise_level: Tensor) -> Tensor:
        h = self.input_projection(x)
        h = h + self.noise_level_projection(noise_level)

        return self.output_projection(h) + self.residual_projection(x)


class UNetBlockWithSelfAttention(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        noise_level_channels: int,
        n_heads: int = 8,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()

        self.unet_block = UNetBlock(
            in_channels, out_channels, noise_level_channels, dropout
        )
        self.self_attention = SelfAttention(
            out_channels, out_channels, n_heads, dropout
        )

    def forward(self, x: Tensor, noise_level: Tensor) -> Tensor:
        return self.self_attention(self.unet_block(x, noise_level))


def _space_to_depth(t: Tensor) -> Tensor:  # "b c (h ph) (w pw) -> b (c ph pw) h w", ph=2, pw=2
    b, c, hh, ww = t.shape
    return t.reshape(b, c, hh // 2, 2, ww // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(b, c * 4, hh // 2, ww // 2)


class Downsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()

        self.projection = nn.Sequential(
            _Rearrange(_space_to_depth),
            nn.Conv2d(4 * channels, channels, kernel_size=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(x)


class Upsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()

        self.projection = nn.Sequential(
            nn.Upsample(scale_factor=2.0, mode="nearest"),
            nn.Conv2d(channels, channels, kernel_size=3, padding="same"),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(x)


class NoiseLevelEmbedding(nn.Module):
    def __init__(self, channels: int, scale: float = 16.0) -> None:
        super().__init__()

        self.W = nn.Parameter(torch.randn(channels // 2) * scale, requires_grad=False)

        self.projection = nn.Sequential(
            nn.Linear(channels, 4 * channels),
            nn.SiLU(),
            nn.Linear(4 * channels, channels),
            _Rearrange(lambda t: t[:, :, None, None]),  # "b c -> b c () ()"
        )

    def forward(self, x: Tensor) -> Tensor:
        h = x[:, None] * self.W[None, :] * 2 * torch.pi
        h = torch.cat([torch.sin(h), torch.cos(h)], dim=-1)

        return self.projection(h)


@dataclass
class UNetConfig:
    channels: int = 3
    noise_level_channels: int = 32  # (port) 256
    noise_level_scale: float = 0.02
    n_heads: int = 2  # (port) 8
    top_blocks_channels: Tuple[int, ...] = (16, 16)  # (port) (128, 128)
    top_blocks_n_blocks_per_resolution: Tuple[int, ...] = (1, 1)  # (port) (2, 2)
    top_blocks_has_resampling: Tuple[bool, ...] = (True, True)
    top_blocks_dropout: Tuple[float, ...] = (0.0, 0.0)
    mid_blocks_channels: Tuple[int, ...] = (32, 32)  # (port) (256, 512)
    mid_blocks_n_blocks_per_resolution: Tuple[int, ...] = (1, 1)  # (port) (4, 4)
    mid_blocks_has_resampling: Tuple[bool, ...] = (True, False)
    mid_blocks_dropout: Tuple[float, ...] = (0.0, 0.3)


class UNet(nn.Module):
    def __init__(self, config: UNetConfig) -> None:
        super().__init__()

        self.config = config

        self.input_projection = nn.Conv2d(
            config.channels,
            config.top_blocks_channels[0],
            kernel_size=3,
            padding="same",
        )
        self.noise_level_embedding = NoiseLevelEmbedding(
            config.noise_level_channels, config.noise_level_scale
        )
        self.top_encoder_blocks = self._make_encoder_blocks(
            self.config.top_blocks_channels + self.config.mid_blocks_channels[:1],
            self.config.top_blocks_n_blocks_per_resolution,
            self.config.top_blocks_has_resampling,
            self.config.top_blocks_dropout,
            self._make_top_block,
        )
        self.mid_encoder_blocks = self._make_encoder_blocks(
            self.config.mid_blocks_channels + self.config.mid_blocks_channels[-1:],
            self.config.mid_blocks_n_blocks_per_resolution,
            self.config.mid_blocks_has_resampling,
            self.config.mid_blocks_dropout,
            self._make_mid_block,
        )
        self.mid_decoder_blocks = self._make_decoder_blocks(
            self.config.mid_blocks_channels + self.config.mid_blocks_channels[-1:],
            self.config.mid_blocks_n_blocks_per_resolution,
            self.config.mid_blocks_has_resampling,
            self.config.mid_blocks_dropout,
            self._make_mid_block,
        )
        self.top_decoder_blocks = self._make_decoder_blocks(
            self.config.top_blocks_channels + self.config.mid_blocks_channels[:1],
            self.config.top_blocks_n_blocks_per_resolution,
            self.config.top_blocks_has_resampling,
            self.config.top_blocks_dropout,
            self._make_top_block,
        )
        self.output_projection = nn.Conv2d(
            config.top_blocks_channels[0],
            config.channels,
            kernel_size=3,
            padding="same",
        )

    def forward(self, x: Tensor, noise_level: Tensor) -> Tensor:
        h = self.input_projection(x)
        noise_level = self.noise_level_embedding(noise_level)

        top_encoder_embeddings = []
        for block in self.top_encoder_blocks:
            if isinstance(block, UNetBlock):
                h = block(h, noise_level)
                top_encoder_embeddings.append(h)
            else:
                h = block(h)

        mid_encoder_embeddings = []
        for block in self.mid_encoder_blocks:
            if isinstance(block, UNetBlockWithSelfAttention):
                h = block(h, noise_level)
                mid_encoder_embeddings.append(h)
            else:
                h = block(h)

        for block in self.mid_decoder_blocks:
            if isinstance(block, UNetBlockWithSelfAttention):
                h = torch.cat((h, mid_encoder_embeddings.pop()), dim=1)
                h = block(h, noise_level)
            else:
                h = block(h)

        for block in self.top_decoder_blocks:
            if isinstance(block, UNetBlock):
                h = torch.cat((h, top_encoder_embeddings.pop()), dim=1)
                h = block(h, noise_level)
            else:
                h = block(h)

        return self.output_projection(h)

    def _make_encoder_blocks(
        self,
        channels: Tuple[int, ...],
        n_blocks_per_resolution: Tuple[int, ...],
        has_resampling: Tuple[bool, ...],
        dropout: Tuple[float, ...],
        block_fn: Callable[[], nn.Module],
    ) -> nn.ModuleList:
        blocks = nn.ModuleList()

        channel_pairs = list(zip(channels[:-1], channels[1:]))
        for idx, (in_channels, out_channels) in enumerate(channel_pairs):
            for _ in range(n_blocks_per_resolution[idx]):
                blocks.append(block_fn(in_channels, out_channels, dropout[idx]))
                in_channels = out_channels

            if has_resampling[idx]:
                blocks.append(Downsample(out_channels))

        return blocks

    def _make_decoder_blocks(
        self,
        channels: Tuple[int, ...],
        n_blocks_per_resolution: Tuple[int, ...],
        has_resampling: Tuple[bool, ...],
        dropout: Tuple[float, ...],
        block_fn: Callable[[], nn.Module],
    ) -> nn.ModuleList:
        blocks = nn.ModuleList()

        channel_pairs = list(zip(channels[:-1], channels[1:]))[::-1]
        for idx, (out_channels, in_channels) in enumerate(channel_pairs):
            if has_resampling[::-1][idx]:
                blocks.append(Upsample(in_channels))

            inner_blocks = []
            for _ in range(n_blocks_per_resolution[::-1][idx]):
                inner_blocks.append(
                    block_fn(in_channels * 2, out_channels, dropout[::-1][idx])
                )
                out_channels = in_channels
            blocks.extend(inner_blocks[::-1])

        return blocks

    def _make_top_block(
        self, in_channels: int, out_channels: int, dropout: float
    ) -> UNetBlock:
        return UNetBlock(
            in_channels,
            out_channels,
            self.config.noise_level_channels,
            dropout,
        )

    def _make_mid_block(
        self,
        in_channels: int,
        out_channels: int,
        dropout: float,
    ) -> UNetBlockWithSelfAttention:
        return UNetBlockWithSelfAttention(
            in_channels,
            out_channels,
            self.config.noise_level_channels,
            self.config.n_heads,
            dropout,
        )


@dataclass
class LitImprovedConsistencyModelConfig:
    ema_decay_rate: float = 0.99993
    lr: float = 1e-3  # (port) 1e-4
    betas: Tuple[float, float] = (0.9, 0.995)
    lr_scheduler_start_factor: float = 1e-5
    lr_scheduler_iters: int = 10_000
    sample_every_n_steps: int = 10_000
    num_samples: int = 8


class LitImprovedConsistencyModel(LightningModule):
    def __init__(
        self,
        consistency_training: ImprovedConsistencyTraining,
        consistency_sampling: Any,
        model: UNet,
        ema_model: UNet,
        config: LitImprovedConsistencyModelConfig,
    ) -> None:
        super().__init__()

        self.consistency_training = consistency_training
        self.consistency_sampling = consistency_sampling
        self.model = model
        self.ema_model = ema_model
        self.config = config

        # Freeze the EMA model and set it to eval mode
        for param in self.ema_model.parameters():
            param.requires_grad = False
        self.ema_model = self.ema_model.eval()

    def training_step(self, batch: Union[Tensor, List[Tensor]], batch_idx: int) -> None:
        if isinstance(batch, list):
            batch = batch[0]

        output = self.consistency_training(
            self.model, batch, self.global_step, self.trainer.max_steps
        )

        loss = (
            pseudo_huber_loss(output.predicted, output.target) * output.loss_weights
        ).mean()

        self.log_dict({"train_loss": loss, "num_timesteps": output.num_timesteps})

        return loss

    def on_train_batch_end(
        self, outputs: Any, batch: Union[Tensor, List[Tensor]], batch_idx: int
    ) -> None:
        update_ema_model_(self.model, self.ema_model, self.config.ema_decay_rate)
        # (port) the samples logged every sample_every_n_steps are left out

    def configure_optimizers(self):
        opt = torch.optim.Adam(
            self.model.parameters(), lr=self.config.lr, betas=self.config.betas
        )
        sched = torch.optim.lr_scheduler.LinearLR(
            opt,
            start_factor=self.config.lr_scheduler_start_factor,
            total_iters=self.config.lr_scheduler_iters,
        )
        sched = {"scheduler": sched, "interval": "step", "frequency": 1}

        return [opt], [sched]


# ---------------------------------------------------------------------------------------------- (port) data
class SyntheticButterflies(Dataset):
    """Two mirrored coloured wing blobs on a plain background, HWC-free: CHW float in [0, 1]."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        ys, xs = torch.meshgrid(torch.arange(IMG, dtype=torch.float32), torch.arange(IMG, dtype=torch.float32),
                                indexing="ij")
        imgs = []
        for _ in range(n):
            bg = 0.2 + 0.6 * torch.rand(3, 1, 1, generator=g)
            wing = torch.rand(3, 1, 1, generator=g)
            cy = IMG / 2 + (torch.rand(1, generator=g).item() - 0.5) * 4
            dx = 2 + torch.rand(1, generator=g).item() * 3
            r = 2 + torch.rand(1, generator=g).item() * 2
            m = torch.zeros(IMG, IMG)
            for cx in (IMG / 2 - 0.5 - dx, IMG / 2 - 0.5 + dx):
                m = torch.maximum(m, torch.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * r * r)))
            body = torch.exp(-((xs - IMG / 2 + 0.5) ** 2) / 0.8) * (abs(ys - cy) < 4).float()
            img = bg * (1 - m) + wing * m
            img = img * (1 - 0.8 * body)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)
        self.gen = torch.Generator().manual_seed(seed + 1)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        x = self.data[i]  # T.Resize((16, 16)): the identity here; T.ToTensor(): already CHW in [0, 1]
        if torch.rand(1, generator=self.gen).item() < 0.5:  # T.RandomHorizontalFlip()
            x = x.flip(-1)
        x = (x * 2) - 1  # T.Lambda(lambda x: (x * 2) - 1)
        return x, 0  # ImageFolder's (image, class)


def _build(seed: int, bug: Optional[str] = None) -> Program:
    torch.manual_seed(seed)
    dataset = SyntheticButterflies(256, seed)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))

    # Create model and its EMA
    unet_config = UNetConfig()
    model = UNet(unet_config)
    ema_model = UNet(unet_config)
    ema_model.load_state_dict(model.state_dict())

    consistency_training = ImprovedConsistencyTraining(final_timesteps=11, bug=bug)
    lit_icm = LitImprovedConsistencyModel(
        consistency_training,
        None,
        model,
        ema_model,
        LitImprovedConsistencyModelConfig(sample_every_n_steps=1000, lr_scheduler_iters=10),  # (port) 1000
    )
    trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_steps=10_000, logger=False)
    trainer.strategy.connect(lit_icm)
    lit_icm.trainer = trainer
    optimizers, schedulers = lit_icm.configure_optimizers()
    optimizer, scheduler = optimizers[0], schedulers[0]["scheduler"]
    progress = trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total
    st: dict[str, Any] = {"it": None, "batch_idx": 0}

    def train_step():
        try:
            batch = next(st["it"])
        except (StopIteration, TypeError):
            lit_icm.train()
            lit_icm.ema_model.eval()  # (port) what the module's eval() in __init__ gave it; train() resets it
            st["it"], st["batch_idx"] = iter(loader), 0
            batch = next(st["it"])
        batch = list(batch)
        batch_idx = st["batch_idx"]
        st["batch_idx"] += 1
        result = {}

        def closure():
            loss = lit_icm.training_step(batch, batch_idx)
            optimizer.zero_grad()
            loss.backward()
            result["loss"] = loss.detach()
            return loss

        optimizer.step(closure)
        scheduler.step()
        progress.completed += 1  # (port) the trainer's global_step
        lit_icm.on_train_batch_end(result["loss"], batch, batch_idx)
        return result["loss"]

    # the Program's batch: one draw of the training pair on the first images
    x0 = torch.stack([dataset[i][0] for i in range(32)])
    with torch.no_grad():
        consistency_training(model, x0, 0, trainer.max_steps)
    next_noisy_x, next_sigmas, current_x, loss_weights = consistency_training.last_inputs

    def loss_fn(out, targets):
        noisy_x, sigmas, target, weights = targets
        c_skip = pad_dims_like(skip_scaling(sigmas), noisy_x)
        c_out = pad_dims_like(output_scaling(sigmas), noisy_x)
        predicted = c_skip * noisy_x + c_out * out
        return (pseudo_huber_loss(predicted, target) * weights).mean()

    batch = ((next_noisy_x, next_sigmas), (next_noisy_x, next_sigmas, current_x, loss_weights))
    return Program(name="kinyugocm_ict", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the lower noise level's output computed with gradients (classic: the stop-gradient on the consistency
    # target dropped): the loss is minimized by moving the target as well as the prediction.
    Bug("target_not_detached", functools.partial(_build, bug="target_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # a fresh noise drawn for the lower noise level (classic: the pair must share one noise draw): the target is
    # the output on an unrelated noisy image, no longer the same trajectory's point.
    Bug("noise_not_shared", functools.partial(_build, bug="noise_not_shared"), "learning_ledger", ("TASK",)),
]
