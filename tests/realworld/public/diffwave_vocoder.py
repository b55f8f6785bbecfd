"""DiffWave, a diffusion vocoder conditioned on mel spectrograms (Kong et al.), from LMNT's implementation: a
non-causal WaveNet-like stack of gated residual blocks with dilations cycling through powers of two, a sinusoidal
diffusion-step embedding through two SiLU projections, a two-layer transposed-convolution spectrogram upsampler
(x256 in time), epsilon prediction under an L1 loss on a linear beta schedule of 50 steps, Adam 2e-4.

Source: https://github.com/lmnt-com/diffwave
Commit: 0594106093b8d8c444de8bd8cd26482f653c569f
Files: src/diffwave/model.py, src/diffwave/learner.py, src/diffwave/params.py, src/diffwave/dataset.py,
src/diffwave/preprocess.py, src/diffwave/__main__.py
License: Apache-2.0 (Copyright 2020 LMNT, Inc.; full text in LICENSES/lmnt-com-diffwave.txt)
Domain: audio, neural vocoder (conditional diffusion on waveforms)

Kept as written: ``DiffusionEmbedding``, ``SpectrogramUpsampler``, ``ResidualBlock`` and ``DiffWave`` (kaiming
init of every ``Conv1d``, the zero-initialized output projection, ``(x + residual) / sqrt(2)``, the skip sum over
``sqrt(len(residual_layers))``); ``params`` apart from the sizes below (``max_grad_norm``
None so the clip is at 1e9, ``hop_samples`` 256, the 50-step ``noise_schedule`` linspace(1e-4, 0.05)); the
``Collator.collate`` crop of ``crop_mel_frames`` spectrogram frames and the matching ``hop_samples``-scaled audio
window (``random.randint``); ``DiffWaveLearner.train_step`` (gradients set to None, a uniform ``t``,
``noise_level = cumprod(1 - beta)``, ``noisy_audio = sqrt(noise_scale) * audio + sqrt(1 - noise_scale) * noise``,
``nn.L1Loss()(noise, predicted.squeeze(1))``, the scaler's backward / unscale / clip / step) and the loop's NaN
check; ``_train_impl``'s ``Adam(model.parameters(), lr=params.learning_rate)``.

Deviations from the original:
- sizes for 2 CPU cores: ``residual_layers`` 30 -> 6, ``residual_channels`` 64 -> 16, ``dilation_cycle_length``
  10 -> 3, ``n_mels`` 80 -> 16, ``crop_mel_frames`` 62 -> 2 (512 samples), ``batch_size`` 16 -> 4;
  ``learning_rate`` 2e-4 -> 1e-3 so that the 30 steps of the self-check show the loss falling;
- data: LJSpeech's wav files are not here: the clips are synthetic "voiced" sounds made from ``seed`` (a few
  harmonics of a gliding fundamental under a syllable-like envelope, plus a little noise, 22050 Hz, 12 frames
  long), held in memory instead of read by ``torchaudio.load``; ``preprocess.transform``'s spectrogram is computed
  once per clip in plain torch (torchaudio is not installed): ``torch.stft`` with a Hann window of
  ``4 * hop_samples``, ``normalized=True``, centered with reflect padding, magnitude (power 1), an HTK mel
  filterbank from 20 Hz to ``sr / 2`` (torchaudio's ``melscale_fbanks`` written out), then the same
  ``20 * log10(clamp(., 1e-5)) - 20`` and ``clamp((. + 100) / 100, 0, 1)``;
- the DataLoader keeps ``shuffle=True``, ``drop_last=True`` and the collator, with a ``torch.Generator(seed)``, no
  workers and no pinned memory; Python's ``random`` is seeded for the collator's crops;
- CPU only: the CUDA autocast and ``GradScaler`` are constructed disabled (``fp16`` False, as by default), so the
  scaler's calls are the plain backward and ``optimizer.step()``; checkpoints, tensorboard summaries and tqdm are
  dropped; the model is not ``.cuda()``'d;
- one ``train_step`` is one iteration of ``DiffWaveLearner.train``'s loop (the next batch, ``train_step``, the NaN
  check, ``step += 1``); the Program's batch is one draw of the model's inputs (``noisy_audio``, ``t``,
  ``spectrogram``) with the noise as the target;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, RUF059

from __future__ import annotations

import contextlib
import functools
import math
import pathlib
import random
import sys
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# src/diffwave/params.py
class AttrDict(dict):
    def __init__(self, *args, **kwargs):
        super(AttrDict, self).__init__(*args, **kwargs)
        self.__dict__ = self


def make_params():
    return AttrDict(
        # Training params
        batch_size=4,  # (port) 16
        learning_rate=1e-3,  # (port) 2e-4, raised so 30 steps show learning
        max_grad_norm=None,

        # Data params
        sample_rate=22050,
        n_mels=16,  # (port) 80
        n_fft=1024,
        hop_samples=256,
        crop_mel_frames=2,  # (port) 62

        # Model params
        residual_layers=6,  # (port) 30
        residual_channels=16,  # (port) 64
        dilation_cycle_length=3,  # (port) 10
        unconditional=False,
        noise_schedule=np.linspace(1e-4, 0.05, 50).tolist(),
        inference_noise_schedule=[0.0001, 0.001, 0.01, 0.05, 0.2, 0.5],
    )


# src/diffwave/model.py
Linear = nn.Linear
ConvTranspose2d = nn.ConvTranspose2d


def Conv1d(*args, **kwargs):
    layer = nn.Conv1d(*args, **kwargs)
    nn.init.kaiming_normal_(layer.weight)
    return layer


def silu(x):  # (port) @torch.jit.script dropped
    return x * torch.sigmoid(x)


class DiffusionEmbedding(nn.Module):
    def __init__(self, max_steps):
        super().__init__()
        self.register_buffer('embedding', self._build_embedding(max_steps), persistent=False)
        self.projection1 = Linear(128, 512)
        self.projection2 = Linear(512, 512)

    def forward(self, diffusion_step):
        if diffusion_step.dtype in [torch.int32, torch.int64]:
            x = self.embedding[diffusion_step]
        else:
            x = self._lerp_embedding(diffusion_step)
        x = self.projection1(x)
        x = silu(x)
        x = self.projection2(x)
        x = silu(x)
        return x

    def _lerp_embedding(self, t):
        low_idx = torch.floor(t).long()
        high_idx = torch.ceil(t).long()
        low = self.embedding[low_idx]
        high = self.embedding[high_idx]
        return low + (high - low) * (t - low_idx)

    def _build_embedding(self, max_steps):
        steps = torch.arange(max_steps).unsqueeze(1)  # [T,1]
        dims = torch.arange(64).unsqueeze(0)          # [1,64]
        table = steps * 10.0**(dims * 4.0 / 63.0)     # [T,64]
        table = torch.cat([torch.sin(table), torch.cos(table)], dim=1)
        return table


class SpectrogramUpsampler(nn.Module):
    def __init__(self, n_mels):
        super().__init__()
        self.conv1 = ConvTranspose2d(1, 1, [3, 32], stride=[1, 16], padding=[1, 8])
        self.conv2 = ConvTranspose2d(1, 1,  [3, 32], stride=[1, 16], padding=[1, 8])

    def forward(self, x):
        x = torch.unsqueeze(x, 1)
        x = self.conv1(x)
        x = F.leaky_relu(x, 0.4)
        x = self.conv2(x)
        x = F.leaky_relu(x, 0.4)
        x = torch.squeeze(x, 1)
        return x


class ResidualBlock(nn.Module):
    def __init__(self, n_mels, residual_channels, dilation, uncond=False):
        '''
        :param n_mels: inplanes of conv1x1 for spectrogram conditional
        :param residual_channels: audio conv
        :param dilation: audio conv dilation
        :param uncond: disable spectrogram conditional
        '''
        super().__init__()
        self.dilated_conv = Conv1d(residual_channels, 2 * residual_channels, 3, padding=dilation, dilation=dilation)
        self.diffusion_projection = Linear(512, residual_channels)
        if not uncond:  # conditional model
            self.conditioner_projection = Conv1d(n_mels, 2 * residual_channels, 1)
        else:  # unconditional model
            self.conditioner_projection = None

        self.output_projection = Conv1d(residual_channels, 2 * residual_channels, 1)

    def forward(self, x, diffusion_step, conditioner=None):
        assert (conditioner is None and self.conditioner_projection is None) or \
               (conditioner is not None and self.conditioner_projection is not None)

        diffusion_step = self.diffusion_projection(diffusion_step).unsqueeze(-1)
        y = x + diffusion_step
        if self.conditioner_projection is None:  # using a unconditional model
            y = self.dilated_conv(y)
        else:
            conditioner = self.conditioner_projection(conditioner)
            y = self.dilated_conv(y) + conditioner

        gate, filter = torch.chunk(y, 2, dim=1)
        y = torch.sigmoid(gate) * torch.tanh(filter)

        y = self.output_projection(y)
        residual, skip = torch.chunk(y, 2, dim=1)
        return (x + residual) / sqrt(2.0), skip


class DiffWave(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.input_projection = Conv1d(1, params.residual_channels, 1)
        self.diffusion_embedding = DiffusionEmbedding(len(params.noise_schedule))
        if self.params.unconditional:  # use unconditional model
            self.spectrogram_upsampler = None
        else:
            self.spectrogram_upsampler = SpectrogramUpsampler(params.n_mels)

        self.residual_layers = nn.ModuleList([
            ResidualBlock(params.n_mels, params.residual_channels, 2**(i % params.dilation_cycle_length),
                          uncond=params.unconditional)
            for i in range(params.residual_layers)
        ])
        self.skip_projection = Conv1d(params.residual_channels, params.residual_channels, 1)
        self.output_projection = Conv1d(params.residual_channels, 1, 1)
        nn.init.zeros_(self.output_projection.weight)

    def forward(self, audio, diffusion_step, spectrogram=None):
        assert (spectrogram is None and self.spectrogram_upsampler is None) or \
               (spectrogram is not None and self.spectrogram_upsampler is not None)
        x = audio.unsqueeze(1)
        x = self.input_projection(x)
        x = F.relu(x)

        diffusion_step = self.diffusion_embedding(diffusion_step)
        if self.spectrogram_upsampler:  # use conditional model
            spectrogram = self.spectrogram_upsampler(spectrogram)

        skip = None
        for layer in self.residual_layers:
            x, skip_connection = layer(x, diffusion_step, spectrogram)
            skip = skip_connection if skip is None else skip_connection + skip

        x = skip / sqrt(len(self.residual_layers))
        x = self.skip_projection(x)
        x = F.relu(x)
        x = self.output_projection(x)
        return x


# src/diffwave/dataset.py (the clips in memory instead of wav files)
class ConditionalDataset(torch.utils.data.Dataset):
    def __init__(self, clips):
        super().__init__()
        self.clips = clips  # (port) [(signal, spectrogram)] instead of glob(f'{path}/**/*.wav')

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, idx):
        signal, spectrogram = self.clips[idx]
        return {
            'audio': signal,
            'spectrogram': spectrogram.T
        }


class Collator:
    def __init__(self, params, bug=None):
        self.params = params
        self.bug = bug

    def collate(self, minibatch):
        samples_per_frame = self.params.hop_samples
        for record in minibatch:
            # Filter out records that aren't long enough.
            if len(record['spectrogram']) < self.params.crop_mel_frames:
                del record['spectrogram']
                del record['audio']
                continue

            start = random.randint(0, record['spectrogram'].shape[0] - self.params.crop_mel_frames)
            end = start + self.params.crop_mel_frames
            record['spectrogram'] = record['spectrogram'][start:end].T

            if self.bug == "audio_crop_not_scaled_to_samples":
                # the frame index used as a sample index: the audio window is not the spectrogram's
                end = start + self.params.crop_mel_frames * samples_per_frame
            else:
                start *= samples_per_frame
                end *= samples_per_frame
            record['audio'] = record['audio'][start:end]
            record['audio'] = np.pad(record['audio'], (0, (end - start) - len(record['audio'])), mode='constant')

        audio = np.stack([record['audio'] for record in minibatch if 'audio' in record])
        spectrogram = np.stack([record['spectrogram'] for record in minibatch if 'spectrogram' in record])
        return {
            'audio': torch.from_numpy(audio),
            'spectrogram': torch.from_numpy(spectrogram),
        }


# src/diffwave/preprocess.py's transform, torchaudio's MelSpectrogram written out (port)
def _hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))  # [n_freqs, n_mels]


def transform(audio, params, sr):
    audio = torch.clamp(audio, -1.0, 1.0)
    win_length = params.hop_samples * 4
    window = torch.hann_window(win_length)
    with torch.no_grad():
        spec = torch.stft(audio, params.n_fft, hop_length=params.hop_samples, win_length=win_length, window=window,
                          center=True, pad_mode='reflect', normalized=True, return_complex=True).abs()
        fb = melscale_fbanks(params.n_fft // 2 + 1, 20.0, sr / 2.0, params.n_mels, sr)
        spectrogram = torch.matmul(spec.transpose(-1, -2), fb).transpose(-1, -2)  # [n_mels, frames]
        spectrogram = 20 * torch.log10(torch.clamp(spectrogram, min=1e-5)) - 20
        spectrogram = torch.clamp((spectrogram + 100) / 100, 0.0, 1.0)
    return spectrogram.numpy()


def synthetic_clips(rng, n, params, frames=12):
    """Voiced clips: harmonics of a gliding f0 under a syllable envelope, a little noise (port)."""
    sr, length = params.sample_rate, frames * params.hop_samples
    tt = np.arange(length) / sr
    clips = []
    for _ in range(n):
        f0 = rng.uniform(110, 330) * np.exp(rng.uniform(-0.4, 0.4) * tt / tt[-1])
        phase = 2 * np.pi * np.cumsum(f0) / sr
        amps = rng.dirichlet(np.ones(4)) * rng.uniform(0.3, 0.6)
        sig = sum(a * np.sin((k + 1) * phase + rng.uniform(0, 2 * np.pi)) for k, a in enumerate(amps))
        env = 0.5 + 0.5 * np.sin(np.pi * (rng.uniform(1, 3) * tt / tt[-1]) + rng.uniform(0, np.pi)) ** 2
        sig = (sig * env + 0.01 * rng.standard_normal(length)).astype(np.float32)
        spec = transform(torch.from_numpy(sig), params, sr)
        clips.append((sig, spec))  # (port) as the .spec.npy holds it: [n_mels, frames]
    return clips


# src/diffwave/learner.py
def _nested_map(struct, map_fn):
    if isinstance(struct, tuple):
        return tuple(_nested_map(x, map_fn) for x in struct)
    if isinstance(struct, list):
        return [_nested_map(x, map_fn) for x in struct]
    if isinstance(struct, dict):
        return {k: _nested_map(v, map_fn) for k, v in struct.items()}
    return map_fn(struct)


class DiffWaveLearner:
    def __init__(self, model_dir, model, dataset, optimizer, params, *args, **kwargs):
        self.model_dir = model_dir
        self.model = model
        self.dataset = dataset
        self.optimizer = optimizer
        self.params = params
        self.autocast = contextlib.nullcontext()  # (port) torch.cuda.amp.autocast(enabled=False)
        self.scaler = torch.amp.GradScaler("cuda", enabled=kwargs.get('fp16', False))
        self.step = 0
        self.is_master = True
        self.bug = kwargs.get('bug')

        beta = np.array(self.params.noise_schedule)
        if self.bug == "noise_level_not_cumulative":
            noise_level = 1 - beta
        else:
            noise_level = np.cumprod(1 - beta)
        self.noise_level = torch.tensor(noise_level.astype(np.float32))
        self.loss_fn = nn.L1Loss()
        self.summary_writer = None

    def train_step(self, features):
        for param in self.model.parameters():
            param.grad = None

        audio = features['audio']
        spectrogram = features['spectrogram']

        N, T = audio.shape
        device = audio.device
        self.noise_level = self.noise_level.to(device)

        with self.autocast:
            t = torch.randint(0, len(self.params.noise_schedule), [N], device=audio.device)
            noise_scale = self.noise_level[t].unsqueeze(1)
            noise_scale_sqrt = noise_scale**0.5
            noise = torch.randn_like(audio)
            noisy_audio = noise_scale_sqrt * audio + (1.0 - noise_scale)**0.5 * noise

            predicted = self.model(noisy_audio, t, spectrogram)
            if self.bug == "output_not_squeezed":
                # [N, 1, T] against [N, T]: L1Loss broadcasts to [N, N, T], every clip's noise against every output
                loss = self.loss_fn(noise, predicted)
            else:
                loss = self.loss_fn(noise, predicted.squeeze(1))

        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.params.max_grad_norm or 1e9)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    params = make_params()
    clips = synthetic_clips(rng, 32, params)

    dataset = torch.utils.data.DataLoader(
        ConditionalDataset(clips),
        batch_size=params.batch_size,
        collate_fn=Collator(params, bug=bug).collate,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        num_workers=0,  # (port) os.cpu_count()
        drop_last=True)

    model = DiffWave(params)
    opt = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    learner = DiffWaveLearner('', model, dataset, opt, params, fp16=False, bug=bug)
    device = next(model.parameters()).device
    state = {"it": None}

    def next_features():
        while True:
            if state["it"] is None:
                state["it"] = iter(learner.dataset)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        # one iteration of DiffWaveLearner.train's loop
        features = next_features()
        features = _nested_map(features, lambda x: x.to(device) if isinstance(x, torch.Tensor) else x)
        loss = learner.train_step(features)
        if torch.isnan(loss).any():
            raise RuntimeError(f'Detected NaN loss at step {learner.step}.')
        learner.step += 1
        return loss.detach()

    # one draw of the model's inputs: the noisy first batch at uniform steps, the noise as the target
    features = Collator(params, bug=bug).collate([dict(ConditionalDataset(clips)[i]) for i in range(params.batch_size)])
    gen = torch.Generator().manual_seed(seed + 1)
    audio = features['audio']
    t = torch.randint(0, len(params.noise_schedule), [audio.shape[0]], generator=gen)
    noise_scale = learner.noise_level[t].unsqueeze(1)
    noise = torch.randn(audio.shape, generator=gen)
    noisy_audio = noise_scale ** 0.5 * audio + (1.0 - noise_scale) ** 0.5 * noise

    def loss_fn(predicted, noise):
        if bug == "output_not_squeezed":
            return nn.L1Loss()(noise, predicted)
        return nn.L1Loss()(noise, predicted.squeeze(1))

    return Program(name="diffwave_vocoder", model=model,
                   batch=({"audio": noisy_audio, "diffusion_step": t, "spectrogram": features['spectrogram']}, noise),
                   loss_fn=loss_fn, optimizer=opt, train_step=train_step, loader=dataset)


build = functools.partial(_build, bug=None)

BUGS = [
    # the predicted noise left [N, 1, T] against the [N, T] noise (classic: the squeeze(1) dropped): L1Loss broadcasts
    # to [N, N, T] and every output is pulled toward the average of all the clips' noises.
    Bug("output_not_squeezed", functools.partial(_build, bug="output_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # the noise level taken from the per-step 1 - beta instead of its cumulative product (classic schedule slip): the
    # noisy audio is almost clean at every t, and the model is trained on a corruption it will never be asked to undo.
    Bug("noise_level_not_cumulative", functools.partial(_build, bug="noise_level_not_cumulative"), "learning_ledger",
        ("TASK",)),
    # the collator's audio window starts at the frame index, not frame * hop_samples (classic): the audio a
    # spectrogram conditions is not the audio it was computed from.
    Bug("audio_crop_not_scaled_to_samples", functools.partial(_build, bug="audio_crop_not_scaled_to_samples"),
        "learning_ledger", ("TASK",)),
]
