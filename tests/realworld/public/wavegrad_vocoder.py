"""WaveGrad (ivanvovk/WaveGrad), a mel-spectrogram-conditioned diffusion vocoder: ``WaveGradNN`` (an upsampling
stream of UBlocks from the mel-spectrogram, a downsampling stream of DBlocks from the noisy waveform, FiLM
scale/shift connections carrying the continuous noise level's sinusoidal encoding, orthogonally initialized
convolutions) inside the ``WaveGrad`` diffusion process, trained by ``train.py``: a 1000-step linear beta schedule
set at every epoch, a continuous noise level ``sqrt(alpha_cumprod)`` drawn uniformly between two adjacent steps,
``q_sample`` in closed form, L1 between the predicted and the added noise, ``clip_grad_norm_`` at 1, Adam lr 1e-3
and ``StepLR(step_size=1, gamma=0.9)``, the log10 mel-spectrogram of ``MelSpectrogramFixed`` as the condition.

Source: https://github.com/ivanvovk/WaveGrad
Commit: 721c37c216132a2ef0a16adc38439f993998e0b7
Files: train.py (run_training's loop, optimizer, scheduler, clipping), model/diffusion_process.py (WaveGrad: the
       schedule, sample_continuous_noise_level, q_sample, compute_loss), model/nn.py, model/upsampling.py,
       model/downsampling.py, model/linear_modulation.py, model/interpolation.py, model/layers.py, model/base.py,
       data.py (MelSpectrogramFixed, AudioDataset's random segments), configs/default.json
License: BSD-3-Clause (Copyright (c) 2020, Ivan Vovk; LICENSES/ivanvovk-WaveGrad.txt)
Domain: audio/speech (neural vocoder, diffusion)

Deviations from the original:
- sizes (config): factors [5, 5, 3, 2, 2] -> [2, 2, 2] (hop_length 300 -> 8), upsampling_preconv_out_channels
  768 -> 48, upsampling_out_channels [512, 512, 256, 128, 128] -> [32, 32, 16] with dilations [[1, 2, 1, 2],
  [1, 2, 4, 8], [1, 2, 4, 8]], downsampling_out_channels [128, 128, 256, 512] -> [16, 32] with dilations
  [[1, 2, 4], [1, 2, 4]] (downsampling_preconv_out_channels 32 kept: ``films`` hard-codes it), n_mels 80 -> 16,
  n_fft = win_length 1024 -> 64, segment_length 7200 -> 256, batch 96 -> 8 (lr, clipping, scheduler and the
  1000-step schedule unchanged);
- torchaudio is not installed: ``MelSpectrogram`` (centered reflect-padded STFT with a periodic Hann window, power
  2, HTK mel filterbank without norm) is written out in torch; ``MelSpectrogramFixed``'s log10, the -inf mask and
  the dropped last frame are as written;
- data: LJSpeech is replaced by synthetic "speech" made from ``seed``: each clip a sum of 3 harmonics of a pitch
  drawn in 100-400 Hz, gliding, under a random amplitude envelope, at 22050 Hz, scaled into [-0.95, 0.95]; random
  ``segment_length`` segments are cut as ``AudioDataset`` does;
- no fp16 (GradScaler) and no GPU or DistributedSampler; ``model.zero_grad()`` as written; no logger, test-time
  sampling or checkpoints;
- one ``train_step`` is one batch of the epoch loop; at an epoch's end ``scheduler.step()`` runs and the noise
  schedule is set again, as the loop does; the Program's ``model`` is the network ``WaveGrad.nn`` (``WaveGrad``'s
  own ``forward`` is the sampler) and its ``batch`` one batch of the network's inputs drawn as ``compute_loss``
  draws them (mel-spectrogram, noisy segment, noise level) with the added noise as the target.
"""
# ruff: noqa: B006, F841, FURB168, UP008  (the original's code
# style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---- model/base.py ---------------------------------------------------------------------------------------
class BaseModule(torch.nn.Module):
    def __init__(self):
        super(BaseModule, self).__init__()
    
    @property
    def nparams(self):
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


# ---- model/layers.py -------------------------------------------------------------------------------------
class Conv1dWithInitialization(BaseModule):
    def __init__(self, **kwargs):
        super(Conv1dWithInitialization, self).__init__()
        self.conv1d = torch.nn.Conv1d(**kwargs)
        torch.nn.init.orthogonal_(self.conv1d.weight.data, gain=1)

    def forward(self, x):
        return self.conv1d(x)


# ---- model/interpolation.py ------------------------------------------------------------------------------
class InterpolationBlock(BaseModule):
    def __init__(self, scale_factor, mode='linear', align_corners=False, downsample=False):
        super(InterpolationBlock, self).__init__()
        self.downsample = downsample
        self.scale_factor = scale_factor
        self.mode = mode
        self.align_corners = align_corners
    
    def forward(self, x):
        outputs = torch.nn.functional.interpolate(
            x,
            size=x.shape[-1] * self.scale_factor \
                if not self.downsample else x.shape[-1] // self.scale_factor,
            mode=self.mode,
            align_corners=self.align_corners,
            recompute_scale_factor=False
        )
        return outputs


# ---- model/linear_modulation.py --------------------------------------------------------------------------
LINEAR_SCALE=5000


class PositionalEncoding(BaseModule):
    def __init__(self, n_channels):
        super(PositionalEncoding, self).__init__()
        self.n_channels = n_channels

    def forward(self, noise_level):
        if len(noise_level.shape) > 1:
            noise_level = noise_level.squeeze(-1)
        half_dim = self.n_channels // 2
        exponents = torch.arange(half_dim, dtype=torch.float32).to(noise_level) / float(half_dim)
        exponents = 1e-4 ** exponents
        exponents = LINEAR_SCALE * noise_level.unsqueeze(1) * exponents.unsqueeze(0)
        return torch.cat([exponents.sin(), exponents.cos()], dim=-1)


class FeatureWiseLinearModulation(BaseModule):
    def __init__(self, in_channels, out_channels, input_dscaled_by):
        super(FeatureWiseLinearModulation, self).__init__()
        self.signal_conv = torch.nn.Sequential(*[
            Conv1dWithInitialization(
                in_channels=in_channels,
                out_channels=in_channels,
                kernel_size=3,
                stride=1,
                padding=1
            ),
            torch.nn.LeakyReLU(0.2)
        ])
        self.positional_encoding = PositionalEncoding(in_channels)
        self.scale_conv = Conv1dWithInitialization(
            in_channels=in_channels,
            out_channels=out_channels,
            kernel_size=3,
            stride=1,
            padding=1
        )
        self.shift_conv = Conv1dWithInitialization(
            in_channels=in_channels,
            out_channels=out_channels,
            kernel_size=3,
            stride=1,
            padding=1
        )

    def forward(self, x, noise_level):
        outputs = self.signal_conv(x)
        outputs = outputs + self.positional_encoding(noise_level).unsqueeze(-1)
        scale, shift = self.scale_conv(outputs), self.shift_conv(outputs)
        return scale, shift


class FeatureWiseAffine(BaseModule):
    def __init__(self):
        super(FeatureWiseAffine, self).__init__()

    def forward(self, x, scale, shift):
        outputs = scale * x + shift
        return outputs


# ---- model/downsampling.py -------------------------------------------------------------------------------
class ConvolutionBlock(BaseModule):
    def __init__(self, in_channels, out_channels, dilation):
        super(ConvolutionBlock, self).__init__()
        self.leaky_relu = torch.nn.LeakyReLU(0.2)
        self.convolution = Conv1dWithInitialization(
            in_channels=in_channels,
            out_channels=out_channels,
            kernel_size=3,
            stride=1,
            padding=dilation,
            dilation=dilation
        )
    
    def forward(self, x):
        outputs = self.leaky_relu(x)
        outputs = self.convolution(outputs)
        return outputs


class DownsamplingBlock(BaseModule):
    def __init__(self, in_channels, out_channels, factor, dilations):
        super(DownsamplingBlock, self).__init__()
        in_sizes = [in_channels] + [out_channels for _ in range(len(dilations) - 1)]
        out_sizes = [out_channels for _ in range(len(in_sizes))]
        self.main_branch = torch.nn.Sequential(*([
            InterpolationBlock(
                scale_factor=factor,
                mode='linear',
                align_corners=False,
                downsample=True
            )
        ] + [
            ConvolutionBlock(in_size, out_size, dilation)
            for in_size, out_size, dilation in zip(in_sizes, out_sizes, dilations)
        ]))
        self.residual_branch = torch.nn.Sequential(*[
            Conv1dWithInitialization(
                in_channels=in_channels,
                out_channels=out_channels,
                kernel_size=1,
                stride=1
            ),
            InterpolationBlock(
                scale_factor=factor,
                mode='linear',
                align_corners=False,
                downsample=True
            )
        ])

    def forward(self, x):
        outputs = self.main_branch(x)
        outputs = outputs + self.residual_branch(x)
        return outputs


# ---- model/upsampling.py ---------------------------------------------------------------------------------
class BasicModulationBlock(BaseModule):
    """
    Linear modulation part of UBlock, represented by sequence of the following layers:
        - Feature-wise Affine
        - LReLU
        - 3x1 Conv
    """
    def __init__(self, n_channels, dilation):
        super(BasicModulationBlock, self).__init__()
        self.featurewise_affine = FeatureWiseAffine()
        self.leaky_relu = torch.nn.LeakyReLU(0.2)
        self.convolution = Conv1dWithInitialization(
            in_channels=n_channels,
            out_channels=n_channels,
            kernel_size=3,
            stride=1,
            padding=dilation,
            dilation=dilation
        )

    def forward(self, x, scale, shift):
        outputs = self.featurewise_affine(x, scale, shift)
        outputs = self.leaky_relu(outputs)
        outputs = self.convolution(outputs)
        return outputs


class UpsamplingBlock(BaseModule):
    def __init__(self, in_channels, out_channels, factor, dilations):
        super(UpsamplingBlock, self).__init__()
        self.first_block_main_branch = torch.nn.ModuleDict({
            'upsampling': torch.nn.Sequential(*[
                torch.nn.LeakyReLU(0.2),
                InterpolationBlock(
                    scale_factor=factor,
                    mode='linear',
                    align_corners=False
                ),
                Conv1dWithInitialization(
                    in_channels=in_channels,
                    out_channels=out_channels,
                    kernel_size=3,
                    stride=1,
                    padding=dilations[0],
                    dilation=dilations[0]
                )
            ]),
            'modulation': BasicModulationBlock(
                out_channels, dilation=dilations[1]
            )
        })
        self.first_block_residual_branch = torch.nn.Sequential(*[
            Conv1dWithInitialization(
                in_channels=in_channels,
                out_channels=out_channels,
                kernel_size=1,
                stride=1
            ),
            InterpolationBlock(
                scale_factor=factor,
                mode='linear',
                align_corners=False
            )
        ])
        self.second_block_main_branch = torch.nn.ModuleDict({
            f'modulation_{idx}': BasicModulationBlock(
                out_channels, dilation=dilations[2 + idx]
            ) for idx in range(2)
        })

    def forward(self, x, scale, shift):
        # First upsampling residual block
        outputs = self.first_block_main_branch['upsampling'](x)
        outputs = self.first_block_main_branch['modulation'](outputs, scale, shift)
        outputs = outputs + self.first_block_residual_branch(x)

        # Second residual block
        residual = self.second_block_main_branch['modulation_0'](outputs, scale, shift)
        outputs = outputs + self.second_block_main_branch['modulation_1'](residual, scale, shift)
        return outputs


# ---- model/nn.py -----------------------------------------------------------------------------------------
class WaveGradNN(BaseModule):
    """
    WaveGrad is a fully-convolutional mel-spectrogram conditional
    vocoder model for waveform generation introduced in
    "WaveGrad: Estimating Gradients for Waveform Generation" paper (link: https://arxiv.org/pdf/2009.00713.pdf).
    The concept is built on the prior work on score matching and diffusion probabilistic models.
    Current implementation follows described architecture in the paper.
    """
    def __init__(self, config):
        super(WaveGradNN, self).__init__()
        # Building upsampling branch (mels -> signal)
        self.ublock_preconv = Conv1dWithInitialization(
            in_channels=config.data_config.n_mels,
            out_channels=config.model_config.upsampling_preconv_out_channels,
            kernel_size=3,
            stride=1,
            padding=1
        )
        upsampling_in_sizes = [config.model_config.upsampling_preconv_out_channels] \
            + config.model_config.upsampling_out_channels[:-1]
        self.ublocks = torch.nn.ModuleList([
            UpsamplingBlock(
                in_channels=in_size,
                out_channels=out_size,
                factor=factor,
                dilations=dilations
            ) for in_size, out_size, factor, dilations in zip(
                upsampling_in_sizes,
                config.model_config.upsampling_out_channels,
                config.model_config.factors,
                config.model_config.upsampling_dilations
            )
        ])
        self.ublock_postconv = Conv1dWithInitialization(
            in_channels=config.model_config.upsampling_out_channels[-1],
            out_channels=1,
            kernel_size=3,
            stride=1,
            padding=1
        )

        # Building downsampling branch (starting from signal)
        self.dblock_preconv = Conv1dWithInitialization(
            in_channels=1,
            out_channels=config.model_config.downsampling_preconv_out_channels,
            kernel_size=5,
            stride=1,
            padding=2
        )
        downsampling_in_sizes = [config.model_config.downsampling_preconv_out_channels] \
            + config.model_config.downsampling_out_channels[:-1]
        self.dblocks = torch.nn.ModuleList([
            DownsamplingBlock(
                in_channels=in_size,
                out_channels=out_size,
                factor=factor,
                dilations=dilations
            ) for in_size, out_size, factor, dilations in zip(
                downsampling_in_sizes,
                config.model_config.downsampling_out_channels,
                config.model_config.factors[1:][::-1],
                config.model_config.downsampling_dilations
            )
        ])

        # Building FiLM connections (in order of downscaling stream)
        film_in_sizes = [32] + config.model_config.downsampling_out_channels
        film_out_sizes = config.model_config.upsampling_out_channels[::-1]
        film_factors = [1] + config.model_config.factors[1:][::-1]
        self.films = torch.nn.ModuleList([
            FeatureWiseLinearModulation(
                in_channels=in_size,
                out_channels=out_size,
                input_dscaled_by=np.prod(film_factors[:i+1])  # for proper positional encodings initialization
            ) for i, (in_size, out_size) in enumerate(
                zip(film_in_sizes, film_out_sizes)
            )
        ])

    def forward(self, mels, yn, noise_level):
        """
        Computes forward pass of neural network.
        :param mels (torch.Tensor): mel-spectrogram acoustic features of shape [B, n_mels, T//hop_length]
        :param yn (torch.Tensor): noised signal `y_n` of shape [B, T]
        :param noise_level (float): level of noise added by diffusion
        :return (torch.Tensor): epsilon noise
        """
        # Prepare inputs
        assert len(mels.shape) == 3  # B, n_mels, T
        yn = yn.unsqueeze(1)
        assert len(yn.shape) == 3  # B, 1, T

        # Downsampling stream + Linear Modulation statistics calculation
        statistics = []
        dblock_outputs = self.dblock_preconv(yn)
        scale, shift = self.films[0](x=dblock_outputs, noise_level=noise_level)
        statistics.append([scale, shift])
        for dblock, film in zip(self.dblocks, self.films[1:]):
            dblock_outputs = dblock(dblock_outputs)
            scale, shift = film(x=dblock_outputs, noise_level=noise_level)
            statistics.append([scale, shift])
        statistics = statistics[::-1]
        
        # Upsampling stream
        ublock_outputs = self.ublock_preconv(mels)
        for i, ublock in enumerate(self.ublocks):
            scale, shift = statistics[i]
            ublock_outputs = ublock(x=ublock_outputs, scale=scale, shift=shift)
        outputs = self.ublock_postconv(ublock_outputs)
        return outputs.squeeze(1)


# ---- model/diffusion_process.py (WaveGrad: the schedule, q_sample and compute_loss) ----
class WaveGrad(BaseModule):
    """
    WaveGrad diffusion process as described in WaveGrad paper
    (link: https://arxiv.org/pdf/2009.00713.pdf).
    Implementation adopted from `Denoising Diffusion Probabilistic Models`
    repository (link: https://github.com/hojonathanho/diffusion,
    paper: https://arxiv.org/pdf/2006.11239.pdf).
    """
    def __init__(self, config):
        super(WaveGrad, self).__init__()
        # Setup noise schedule
        self.noise_schedule_is_set = False

        # Backbone neural network to model noise
        self.total_factor = np.prod(config.model_config.factors)
        assert self.total_factor == config.data_config.hop_length, \
            """Total factor-product should be equal to the hop length of STFT."""
        self.nn = WaveGradNN(config)

    def set_new_noise_schedule(
        self,
        init=torch.linspace,
        init_kwargs={'steps': 50, 'start': 1e-6, 'end': 1e-2}
    ):
        """
        Sets sampling noise schedule. Authors in the paper showed
        that WaveGrad supports variable noise schedules during inference.
        Thanks to the continuous noise level conditioning.
        :param init (callable function, optional): function which initializes betas
        :param init_kwargs (dict, optional): dict of arguments to be pushed to `init` function.
            Should always contain the key `steps` corresponding to the number of iterations to be done by the model.
            This is done so because `torch.linspace` has this argument named as `steps`.
        """
        assert 'steps' in list(init_kwargs.keys()), \
            '`init_kwargs` should always contain the key `steps` corresponding to the number of iterations to be done by the model.'
        n_iter = init_kwargs['steps']

        betas = init(**init_kwargs)
        alphas = 1 - betas
        alphas_cumprod = alphas.cumprod(dim=0)
        alphas_cumprod_prev = torch.cat([torch.FloatTensor([1]), alphas_cumprod[:-1]])
        alphas_cumprod_prev_with_last = torch.cat([torch.FloatTensor([1]), alphas_cumprod])
        self.register_buffer('betas', betas)
        self.register_buffer('alphas', alphas)
        self.register_buffer('alphas_cumprod', alphas_cumprod)
        self.register_buffer('alphas_cumprod_prev', alphas_cumprod_prev)

        # Calculations for posterior q(y_n|y_0)
        sqrt_alphas_cumprod = alphas_cumprod.sqrt()
        # For WaveGrad special continuous noise level conditioning
        self.sqrt_alphas_cumprod_prev = alphas_cumprod_prev_with_last.sqrt().numpy()
        sqrt_recip_alphas_cumprod = (1 / alphas_cumprod).sqrt()
        sqrt_alphas_cumprod_m1 = (1 - alphas_cumprod).sqrt() * sqrt_recip_alphas_cumprod
        self.register_buffer('sqrt_alphas_cumprod', sqrt_alphas_cumprod)
        self.register_buffer('sqrt_recip_alphas_cumprod', sqrt_recip_alphas_cumprod)
        self.register_buffer('sqrt_alphas_cumprod_m1', sqrt_alphas_cumprod_m1)

        # Calculations for posterior q(y_{t-1} | y_t, y_0)
        posterior_variance = betas * (1 - alphas_cumprod_prev) / (1 - alphas_cumprod)
        posterior_variance = torch.stack([posterior_variance, torch.FloatTensor([1e-20] * n_iter)])
        posterior_log_variance_clipped = posterior_variance.max(dim=0).values.log()
        # below: log calculation clipped because the posterior variance is 0 at the beginning of the diffusion chain
        posterior_mean_coef1 = betas * alphas_cumprod_prev.sqrt() / (1 - alphas_cumprod)
        posterior_mean_coef2 = (1 - alphas_cumprod_prev) * alphas.sqrt() / (1 - alphas_cumprod)
        self.register_buffer('posterior_log_variance_clipped', posterior_log_variance_clipped)
        self.register_buffer('posterior_mean_coef1', posterior_mean_coef1)
        self.register_buffer('posterior_mean_coef2', posterior_mean_coef2)
        
        self.n_iter = n_iter
        self.noise_schedule_kwargs = {'init': init, 'init_kwargs': init_kwargs}
        self.noise_schedule_is_set = True

    def sample_continuous_noise_level(self, batch_size, device):
        """
        Samples continuous noise level sqrt(alpha_cumprod).
        This is what makes WaveGrad different from other Denoising Diffusion Probabilistic Models.
        """
        s = np.random.choice(range(1, self.n_iter + 1), size=batch_size)
        continuous_sqrt_alpha_cumprod = torch.FloatTensor(
            np.random.uniform(
                self.sqrt_alphas_cumprod_prev[s-1],
                self.sqrt_alphas_cumprod_prev[s],
                size=batch_size
            )
        ).to(device)
        return continuous_sqrt_alpha_cumprod.unsqueeze(-1)
    
    def q_sample(self, y_0, continuous_sqrt_alpha_cumprod=None, eps=None):
        """
        Efficiently computes diffusion version y_t from y_0 using a closed form expression:
            y_t = sqrt(alpha_cumprod)_t * y_0 + sqrt(1 - alpha_cumprod_t) * eps,
            where eps is sampled from a standard Gaussian.
        """
        batch_size = y_0.shape[0]
        continuous_sqrt_alpha_cumprod \
            = self.sample_continuous_noise_level(batch_size, device=y_0.device) \
                if isinstance(eps, type(None)) else continuous_sqrt_alpha_cumprod
        if isinstance(eps, type(None)):
            eps = torch.randn_like(y_0)
        # Closed form signal diffusion
        outputs = continuous_sqrt_alpha_cumprod * y_0 + (1 - continuous_sqrt_alpha_cumprod**2).sqrt() * eps
        return outputs

    def compute_loss(self, mels, y_0):
        """
        Computes loss between GT Gaussian noise and reconstructed noise by model from diffusion process.
        :param mels (torch.Tensor): mel-spectrograms acoustic features of shape [B, n_mels, T//hop_length]
        :param y_0 (torch.Tensor): GT speech signals
        :return loss (torch.Tensor): loss of diffusion model
        """
        self._verify_noise_schedule_existence()

        # Sample continuous noise level
        batch_size = y_0.shape[0]
        continuous_sqrt_alpha_cumprod \
            = self.sample_continuous_noise_level(batch_size, device=y_0.device)
        eps = torch.randn_like(y_0)

        # Diffuse the signal
        if getattr(self, "bug", None) == "q_sample_own_noise":
            # q_sample called with its defaults: it draws its own noise level and its own eps, so the network is
            # told one noise level and asked for an eps that was never added
            y_noisy = self.q_sample(y_0)
        else:
            y_noisy = self.q_sample(y_0, continuous_sqrt_alpha_cumprod, eps)

        # Reconstruct the added noise
        eps_recon = self.nn(mels, y_noisy, continuous_sqrt_alpha_cumprod)
        loss = torch.nn.L1Loss()(eps_recon, eps)
        return loss

    def _verify_noise_schedule_existence(self):
        if not self.noise_schedule_is_set:
            raise RuntimeError(
                'No noise schedule is found. Specify your noise schedule '
                'by pushing arguments into `set_new_noise_schedule(...)` method. '
                'For example: '
                "`wavegrad.set_new_noise_level(init=torch.linspace, init_kwargs=\\{'steps': 50, 'start': 1e-6, 'end': 1e-2\\})`."
            )


# ---- data.py (MelSpectrogramFixed over torchaudio's MelSpectrogram, written out) ------------------------------

def _hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


class MelSpectrogram(torch.nn.Module):
    """(port) torchaudio.transforms.MelSpectrogram: centered reflect-padded STFT, periodic Hann window, power 2,
    HTK mel filterbank without norm."""

    def __init__(self, sample_rate, n_fft, win_length, hop_length, f_min, f_max, n_mels):
        super().__init__()
        self.n_fft, self.win_length, self.hop_length = n_fft, win_length, hop_length
        self.register_buffer("window", torch.hann_window(win_length))
        all_freqs = torch.linspace(0, sample_rate // 2, n_fft // 2 + 1)
        m_pts = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2)
        f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
        f_diff = f_pts[1:] - f_pts[:-1]
        slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
        down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
        up_slopes = slopes[:, 2:] / f_diff[1:]
        self.register_buffer("fb", torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes)))

    def forward(self, x):
        spec = torch.stft(x, self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, pad_mode="reflect", return_complex=True).abs() ** 2
        return torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)


class MelSpectrogramFixed(torch.nn.Module):
    """In order to remove padding of torchaudio package + add log10 scale."""
    def __init__(self, **kwargs):
        super(MelSpectrogramFixed, self).__init__()
        self.torchaudio_backend = MelSpectrogram(**kwargs)

    def forward(self, x):
        outputs = self.torchaudio_backend(x).log10()
        mask = torch.isinf(outputs)
        outputs[mask] = 0
        return outputs[..., :-1]


def make_clips(seed, n=48, length=4096, sample_rate=22050):
    g = np.random.default_rng(seed)
    t = np.arange(length) / sample_rate
    clips = []
    for _ in range(n):
        f0 = g.uniform(100, 400) * (1 + g.uniform(-0.2, 0.2) * t / t[-1])
        phase = 2 * np.pi * np.cumsum(f0) / sample_rate
        env = np.abs(np.sin(np.pi * (t / t[-1]) * g.uniform(1, 4) + g.uniform(0, np.pi)))
        y = sum(g.uniform(0.3, 1.0) / k * np.sin(k * phase) for k in (1, 2, 3)) * env
        clips.append(0.95 * y / np.abs(y).max())
    return torch.tensor(np.stack(clips), dtype=torch.float32)


class AudioDataset(torch.utils.data.Dataset):
    def __init__(self, clips, segment_length):
        self.clips = clips
        self.segment_length = segment_length

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, index):
        audio = self.clips[index]
        if audio.shape[-1] >= self.segment_length:
            max_audio_start = audio.shape[-1] - self.segment_length
            audio_start = np.random.randint(0, max_audio_start)
            segment = audio[audio_start:audio_start + self.segment_length]
        else:
            segment = torch.nn.functional.pad(audio, (0, self.segment_length - audio.shape[-1]), 'constant').data
        return segment


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    ns = lambda **kw: SimpleNamespace(**kw)
    config = ns(
        model_config=ns(factors=[2, 2, 2], upsampling_preconv_out_channels=48, upsampling_out_channels=[32, 32, 16],
                        upsampling_dilations=[[1, 2, 1, 2], [1, 2, 4, 8], [1, 2, 4, 8]],
                        downsampling_preconv_out_channels=32, downsampling_out_channels=[16, 32],
                        downsampling_dilations=[[1, 2, 4], [1, 2, 4]]),
        data_config=ns(sample_rate=22050, n_fft=64, win_length=64, hop_length=8, f_min=80.0, f_max=8000, n_mels=16),
        training_config=ns(batch_size=8, segment_length=256, lr=1e-3, grad_clip_threshold=1, scheduler_step_size=1,
                           scheduler_gamma=0.9, use_fp16=False,
                           training_noise_schedule=ns(n_iter=1000, betas_range=[1e-6, 0.01])))

    model = WaveGrad(config)
    model.bug = bug
    mel_fn = MelSpectrogramFixed(
        sample_rate=config.data_config.sample_rate,
        n_fft=config.data_config.n_fft,
        win_length=config.data_config.win_length,
        hop_length=config.data_config.hop_length,
        f_min=config.data_config.f_min,
        f_max=config.data_config.f_max,
        n_mels=config.data_config.n_mels
    )
    optimizer = torch.optim.Adam(params=model.parameters(), lr=config.training_config.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer,
        step_size=config.training_config.scheduler_step_size,
        gamma=config.training_config.scheduler_gamma
    )
    train_dataset = AudioDataset(make_clips(seed), config.training_config.segment_length)
    train_dataloader = torch.utils.data.DataLoader(
        train_dataset, batch_size=config.training_config.batch_size, shuffle=True, drop_last=True,
        generator=torch.Generator().manual_seed(seed))

    def set_schedule():
        model.set_new_noise_schedule(
            init=torch.linspace,
            init_kwargs={
                'steps': config.training_config.training_noise_schedule.n_iter,
                'start': config.training_config.training_noise_schedule.betas_range[0],
                'end': config.training_config.training_noise_schedule.betas_range[1]
            }
        )

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of the epoch's body
                scheduler.step()
            # Training step
            model.train()
            set_schedule()
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        model.zero_grad()

        mels = mel_fn(batch)

        loss = model.compute_loss(mels, batch)
        loss.backward()

        if bug == "clip_after_step":
            # the clipping moved below optimizer.step(): the update is made from the unclipped gradient
            optimizer.step()
            torch.nn.utils.clip_grad_norm_(parameters=model.parameters(),
                                           max_norm=config.training_config.grad_clip_threshold)
            return loss.detach()

        grad_norm = torch.nn.utils.clip_grad_norm_(
            parameters=model.parameters(),
            max_norm=config.training_config.grad_clip_threshold
        )

        optimizer.step()
        return loss.detach()

    set_schedule()
    first = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=config.training_config.batch_size)))
    # the network's own inputs for one batch, drawn as compute_loss draws them: (mels, y_noisy, noise level) -> eps
    level = model.sample_continuous_noise_level(first.shape[0], device=first.device)
    eps = torch.randn_like(first)
    inputs = (mel_fn(first), model.q_sample(first, level, eps), level)
    return Program(name="wavegrad_vocoder", model=model.nn, batch=(inputs, eps),
                   loss_fn=lambda eps_recon, eps: torch.nn.L1Loss()(eps_recon, eps),
                   optimizer=optimizer, train_step=train_step, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # q_sample called without the drawn noise level and eps: the network is conditioned on one noise level and
    # regresses an eps that was never added to its input.
    Bug("q_sample_own_noise", functools.partial(_build, bug="q_sample_own_noise"), "learning_ledger", ("TASK",)),
    # clip_grad_norm_ after optimizer.step(): every update uses the unclipped gradient (README rule 6).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
