"""HiFi-GAN (Kong et al., NeurIPS 2020) from jik876/hifi-gan, trained as its ``train.py`` does: a mel-to-waveform
generator (transposed-convolution upsampling, multi-receptive-field residual blocks, weight norm, tanh output)
against a multi-period discriminator (2-D convolutions over the waveform folded by periods 2, 3, 5, 7, 11) and a
multi-scale discriminator (grouped 1-D convolutions on the raw, 2x and 4x average-pooled waveform, the first with
spectral norm); least-squares adversarial losses, feature matching (x2) and the L1 mel-spectrogram loss (x45);
two AdamW optimizers (betas 0.8, 0.99): the discriminators' step on the detached generator output first, then the
generator's step.

Source: https://github.com/jik876/hifi-gan
Commit: 4769534d45265d52a904b850da5a622601885777
Files: ``train.py`` (``train``), ``models.py``, ``meldataset.py`` (``mel_spectrogram``, ``MelDataset``),
``utils.py`` (``init_weights``, ``get_padding``), ``env.py`` (``AttrDict``), ``config_v3.json``
License: MIT (Copyright (c) 2020 Jungil Kong; full text in LICENSES/jik876-hifi-gan.txt)
Domain: speech synthesis, neural vocoder (GAN: mel-spectrogram to waveform)

Kept as written: ``models.py`` (``ResBlock1``, ``ResBlock2``, ``Generator``, ``DiscriminatorP``,
``MultiPeriodDiscriminator``, ``DiscriminatorS``, ``MultiScaleDiscriminator``, ``feature_loss``,
``discriminator_loss``, ``generator_loss``), ``mel_spectrogram`` (reflect padding, Hann window, magnitude, mel
basis, log compression), ``MelDataset.__getitem__`` (the wav scaled by ``MAX_WAV_VALUE``, peak-normalized x 0.95, a
random ``segment_size`` window, the input mel with ``fmax`` and the loss mel with ``fmax_for_loss``), train.py's loop
body (D: ``optim_d.zero_grad()``, both discriminators on ``y`` and ``y_g_hat.detach()``, backward, step; G:
``optim_g.zero_grad()``, ``loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel``, backward, step), the
``ExponentialLR`` schedulers stepped once per epoch, config_v3's resblock "2", learning rate 2e-4, betas, lr_decay.

Deviations from the original:
- LJSpeech is not here: the "wav files" are synthetic int16 clips made from ``seed`` (each a voiced tone: a
  fundamental between 100 and 400 Hz with three decaying harmonics, a slow amplitude envelope and a little noise,
  at 16 kHz); ``load_wav`` reads them from a list instead of ``scipy.io.wavfile``; librosa is not installed:
  ``librosa.util.normalize`` (peak normalization) and ``librosa.filters.mel`` (Slaney mel scale and area
  normalization, librosa's defaults) are written out in numpy;
- ``torch.stft`` is called with ``return_complex=True`` and viewed as real (torch 2 refuses the old real output);
- sizes for 2 CPU cores: segment_size 8192 -> 512, n_fft / win_size 1024 -> 256, hop_size 256 -> 64 (so
  upsample_rates [8, 8, 4] -> [4, 4, 4], upsample_kernel_sizes [16, 16, 8] -> [8, 8, 8]), sampling_rate 22050 ->
  16000, upsample_initial_channel 256 -> 64, batch_size 16 -> 2, the discriminators' channel widths divided by 8
  (``CH_DIV``; groups kept); num_mels 80, fmin 0, fmax 8000, fmax_for_loss None, resblock kernels and dilations
  kept; learning rate 2e-4 -> 1e-3 so that the 30 steps of the self-check show learning;
- CPU only, one process: the distributed setup, checkpoints, tensorboard, validation every
  ``validation_interval`` steps and the prints are dropped; the DataLoader is shuffled (``h.num_gpus`` <= 1) with a
  seeded generator;
- one ``train_step`` is one iteration of the loop over ``train_loader`` (the schedulers stepped when a pass ends),
  returning the generator's mel L1 error as the loop prints it; ``eval_fn`` is the validation mel error over the
  validation clips (whole clips, batch 1, as the validation branch computes it) under ``eval()``;
- the Program's model is the generator, its optimizer ``optim_g``, its batch the first training batch (input mel,
  loss mel), its ``loss_fn`` the L1 mel-spectrogram term (x45) of the generator loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, PLR0402, RUF059, PLW0602, SIM211  (the original's style is kept as written)

from __future__ import annotations

import functools
import itertools
import math
import os
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import AvgPool1d, Conv1d, Conv2d, ConvTranspose1d
from torch.nn.utils import remove_weight_norm, spectral_norm, weight_norm
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CH_DIV = 8  # (port) the discriminators' channel widths divided by 8 for 2 CPU cores


# env.py
class AttrDict(dict):
    def __init__(self, *args, **kwargs):
        super(AttrDict, self).__init__(*args, **kwargs)
        self.__dict__ = self


# utils.py
def init_weights(m, mean=0.0, std=0.01):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(mean, std)


def get_padding(kernel_size, dilation=1):
    return int((kernel_size*dilation - dilation)/2)


# (port) librosa.util.normalize and librosa.filters.mel (htk=False, norm="slaney"), written out
def normalize(S):
    return S / np.max(np.abs(S))


def _hz_to_mel(f):
    f = np.asanyarray(f, dtype=float)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=float)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


def librosa_mel_fn(sr, n_fft, n_mels, fmin, fmax):
    if fmax is None:
        fmax = float(sr) / 2
    weights = np.zeros((n_mels, int(1 + n_fft // 2)), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


_WAVS = {}  # (port) the synthetic "wav files", by name


def load_wav(full_path):
    return _WAVS[full_path], 16000  # (port) scipy.io.wavfile.read on LJSpeech


# meldataset.py
MAX_WAV_VALUE = 32768.0


def dynamic_range_compression(x, C=1, clip_val=1e-5):
    return np.log(np.clip(x, a_min=clip_val, a_max=None) * C)


def dynamic_range_decompression(x, C=1):
    return np.exp(x) / C


def dynamic_range_compression_torch(x, C=1, clip_val=1e-5):
    return torch.log(torch.clamp(x, min=clip_val) * C)


def dynamic_range_decompression_torch(x, C=1):
    return torch.exp(x) / C


def spectral_normalize_torch(magnitudes):
    output = dynamic_range_compression_torch(magnitudes)
    return output


def spectral_de_normalize_torch(magnitudes):
    output = dynamic_range_decompression_torch(magnitudes)
    return output


mel_basis = {}
hann_window = {}


def mel_spectrogram(y, n_fft, num_mels, sampling_rate, hop_size, win_size, fmin, fmax, center=False):
    if torch.min(y) < -1.:
        print('min value is ', torch.min(y))
    if torch.max(y) > 1.:
        print('max value is ', torch.max(y))

    global mel_basis, hann_window
    if fmax not in mel_basis:
        mel = librosa_mel_fn(sampling_rate, n_fft, num_mels, fmin, fmax)
        mel_basis[str(fmax)+'_'+str(y.device)] = torch.from_numpy(mel).float().to(y.device)
        hann_window[str(y.device)] = torch.hann_window(win_size).to(y.device)

    y = torch.nn.functional.pad(y.unsqueeze(1), (int((n_fft-hop_size)/2), int((n_fft-hop_size)/2)), mode='reflect')
    y = y.squeeze(1)

    spec = torch.stft(y, n_fft, hop_length=hop_size, win_length=win_size, window=hann_window[str(y.device)],
                      center=center, pad_mode='reflect', normalized=False, onesided=True,
                      return_complex=True)
    spec = torch.view_as_real(spec)  # (port) torch 2 requires return_complex; the real/imag pairs as before

    spec = torch.sqrt(spec.pow(2).sum(-1)+(1e-9))

    spec = torch.matmul(mel_basis[str(fmax)+'_'+str(y.device)], spec)
    spec = spectral_normalize_torch(spec)

    return spec


class MelDataset(torch.utils.data.Dataset):
    def __init__(self, training_files, segment_size, n_fft, num_mels,
                 hop_size, win_size, sampling_rate,  fmin, fmax, split=True, shuffle=True, n_cache_reuse=1,
                 device=None, fmax_loss=None, fine_tuning=False, base_mels_path=None):
        self.audio_files = training_files
        random.seed(1234)
        if shuffle:
            random.shuffle(self.audio_files)
        self.segment_size = segment_size
        self.sampling_rate = sampling_rate
        self.split = split
        self.n_fft = n_fft
        self.num_mels = num_mels
        self.hop_size = hop_size
        self.win_size = win_size
        self.fmin = fmin
        self.fmax = fmax
        self.fmax_loss = fmax_loss
        self.cached_wav = None
        self.n_cache_reuse = n_cache_reuse
        self._cache_ref_count = 0
        self.device = device
        self.fine_tuning = fine_tuning
        self.base_mels_path = base_mels_path
        self.bug = None  # (port) set by _build for the bug variants

    def __getitem__(self, index):
        filename = self.audio_files[index]
        if self._cache_ref_count == 0:
            audio, sampling_rate = load_wav(filename)
            audio = audio / MAX_WAV_VALUE
            if not self.fine_tuning:
                audio = normalize(audio) * 0.95
            self.cached_wav = audio
            if sampling_rate != self.sampling_rate:
                raise ValueError("{} SR doesn't match target {} SR".format(
                    sampling_rate, self.sampling_rate))
            self._cache_ref_count = self.n_cache_reuse
        else:
            audio = self.cached_wav
            self._cache_ref_count -= 1

        audio = torch.FloatTensor(audio)
        audio = audio.unsqueeze(0)

        if not self.fine_tuning:
            if self.split:
                if audio.size(1) >= self.segment_size:
                    max_audio_start = audio.size(1) - self.segment_size
                    audio_start = random.randint(0, max_audio_start)
                    audio = audio[:, audio_start:audio_start+self.segment_size]
                else:
                    audio = torch.nn.functional.pad(audio, (0, self.segment_size - audio.size(1)), 'constant')

            if self.bug == "mel_from_another_segment":
                whole = torch.FloatTensor(self.cached_wav).unsqueeze(0)
                other = random.randint(0, whole.size(1) - self.segment_size)
                mel = mel_spectrogram(whole[:, other:other+self.segment_size], self.n_fft, self.num_mels,
                                      self.sampling_rate, self.hop_size, self.win_size, self.fmin, self.fmax,
                                      center=False)
            else:
                mel = mel_spectrogram(audio, self.n_fft, self.num_mels,
                                      self.sampling_rate, self.hop_size, self.win_size, self.fmin, self.fmax,
                                      center=False)
        else:
            mel = np.load(
                os.path.join(self.base_mels_path, os.path.splitext(os.path.split(filename)[-1])[0] + '.npy'))
            mel = torch.from_numpy(mel)

            if len(mel.shape) < 3:
                mel = mel.unsqueeze(0)

            if self.split:
                frames_per_seg = math.ceil(self.segment_size / self.hop_size)

                if audio.size(1) >= self.segment_size:
                    mel_start = random.randint(0, mel.size(2) - frames_per_seg - 1)
                    mel = mel[:, :, mel_start:mel_start + frames_per_seg]
                    audio = audio[:, mel_start * self.hop_size:(mel_start + frames_per_seg) * self.hop_size]
                else:
                    mel = torch.nn.functional.pad(mel, (0, frames_per_seg - mel.size(2)), 'constant')
                    audio = torch.nn.functional.pad(audio, (0, self.segment_size - audio.size(1)), 'constant')

        mel_loss = mel_spectrogram(audio, self.n_fft, self.num_mels,
                                   self.sampling_rate, self.hop_size, self.win_size, self.fmin, self.fmax_loss,
                                   center=False)

        return (mel.squeeze(), audio.squeeze(0), filename, mel_loss.squeeze())

    def __len__(self):
        return len(self.audio_files)


# models.py
LRELU_SLOPE = 0.1


class ResBlock1(torch.nn.Module):
    def __init__(self, h, channels, kernel_size=3, dilation=(1, 3, 5)):
        super(ResBlock1, self).__init__()
        self.h = h
        self.convs1 = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[0],
                               padding=get_padding(kernel_size, dilation[0]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[1],
                               padding=get_padding(kernel_size, dilation[1]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[2],
                               padding=get_padding(kernel_size, dilation[2])))
        ])
        self.convs1.apply(init_weights)

        self.convs2 = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1)))
        ])
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for l in self.convs1:
            remove_weight_norm(l)
        for l in self.convs2:
            remove_weight_norm(l)


class ResBlock2(torch.nn.Module):
    def __init__(self, h, channels, kernel_size=3, dilation=(1, 3)):
        super(ResBlock2, self).__init__()
        self.h = h
        self.convs = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[0],
                               padding=get_padding(kernel_size, dilation[0]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[1],
                               padding=get_padding(kernel_size, dilation[1])))
        ])
        self.convs.apply(init_weights)

    def forward(self, x):
        for c in self.convs:
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for l in self.convs:
            remove_weight_norm(l)


class Generator(torch.nn.Module):
    def __init__(self, h):
        super(Generator, self).__init__()
        self.h = h
        self.num_kernels = len(h.resblock_kernel_sizes)
        self.num_upsamples = len(h.upsample_rates)
        self.conv_pre = weight_norm(Conv1d(80, h.upsample_initial_channel, 7, 1, padding=3))
        resblock = ResBlock1 if h.resblock == '1' else ResBlock2

        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(h.upsample_rates, h.upsample_kernel_sizes)):
            self.ups.append(weight_norm(
                ConvTranspose1d(h.upsample_initial_channel//(2**i), h.upsample_initial_channel//(2**(i+1)),
                                k, u, padding=(k-u)//2)))

        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = h.upsample_initial_channel//(2**(i+1))
            for j, (k, d) in enumerate(zip(h.resblock_kernel_sizes, h.resblock_dilation_sizes)):
                self.resblocks.append(resblock(h, ch, k, d))

        self.conv_post = weight_norm(Conv1d(ch, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = self.ups[i](x)
            xs = None
            for j in range(self.num_kernels):
                if xs is None:
                    xs = self.resblocks[i*self.num_kernels+j](x)
                else:
                    xs += self.resblocks[i*self.num_kernels+j](x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        x = torch.tanh(x)

        return x

    def remove_weight_norm(self):
        print('Removing weight norm...')
        for l in self.ups:
            remove_weight_norm(l)
        for l in self.resblocks:
            l.remove_weight_norm()
        remove_weight_norm(self.conv_pre)
        remove_weight_norm(self.conv_post)


class DiscriminatorP(torch.nn.Module):
    def __init__(self, period, kernel_size=5, stride=3, use_spectral_norm=False):
        super(DiscriminatorP, self).__init__()
        self.period = period
        norm_f = weight_norm if use_spectral_norm == False else spectral_norm
        self.convs = nn.ModuleList([
            norm_f(Conv2d(1, 32//CH_DIV, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(32//CH_DIV, 128//CH_DIV, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(128//CH_DIV, 512//CH_DIV, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(512//CH_DIV, 1024//CH_DIV, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(1024//CH_DIV, 1024//CH_DIV, (kernel_size, 1), 1, padding=(2, 0))),
        ])
        self.conv_post = norm_f(Conv2d(1024//CH_DIV, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []

        # 1d to 2d
        b, c, t = x.shape
        if t % self.period != 0: # pad first
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)

        for l in self.convs:
            x = l(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        x = torch.flatten(x, 1, -1)

        return x, fmap


class MultiPeriodDiscriminator(torch.nn.Module):
    def __init__(self):
        super(MultiPeriodDiscriminator, self).__init__()
        self.discriminators = nn.ModuleList([
            DiscriminatorP(2),
            DiscriminatorP(3),
            DiscriminatorP(5),
            DiscriminatorP(7),
            DiscriminatorP(11),
        ])

    def forward(self, y, y_hat):
        y_d_rs = []
        y_d_gs = []
        fmap_rs = []
        fmap_gs = []
        for i, d in enumerate(self.discriminators):
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)

        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class DiscriminatorS(torch.nn.Module):
    def __init__(self, use_spectral_norm=False):
        super(DiscriminatorS, self).__init__()
        norm_f = weight_norm if use_spectral_norm == False else spectral_norm
        self.convs = nn.ModuleList([
            norm_f(Conv1d(1, 128//CH_DIV, 15, 1, padding=7)),
            norm_f(Conv1d(128//CH_DIV, 128//CH_DIV, 41, 2, groups=4, padding=20)),
            norm_f(Conv1d(128//CH_DIV, 256//CH_DIV, 41, 2, groups=16, padding=20)),
            norm_f(Conv1d(256//CH_DIV, 512//CH_DIV, 41, 4, groups=16, padding=20)),
            norm_f(Conv1d(512//CH_DIV, 1024//CH_DIV, 41, 4, groups=16, padding=20)),
            norm_f(Conv1d(1024//CH_DIV, 1024//CH_DIV, 41, 1, groups=16, padding=20)),
            norm_f(Conv1d(1024//CH_DIV, 1024//CH_DIV, 5, 1, padding=2)),
        ])
        self.conv_post = norm_f(Conv1d(1024//CH_DIV, 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for l in self.convs:
            x = l(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        x = torch.flatten(x, 1, -1)

        return x, fmap


class MultiScaleDiscriminator(torch.nn.Module):
    def __init__(self):
        super(MultiScaleDiscriminator, self).__init__()
        self.discriminators = nn.ModuleList([
            DiscriminatorS(use_spectral_norm=True),
            DiscriminatorS(),
            DiscriminatorS(),
        ])
        self.meanpools = nn.ModuleList([
            AvgPool1d(4, 2, padding=2),
            AvgPool1d(4, 2, padding=2)
        ])

    def forward(self, y, y_hat):
        y_d_rs = []
        y_d_gs = []
        fmap_rs = []
        fmap_gs = []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i-1](y)
                y_hat = self.meanpools[i-1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)

        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss += torch.mean(torch.abs(rl - gl))

    return loss*2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    r_losses = []
    g_losses = []
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        r_loss = torch.mean((1-dr)**2)
        g_loss = torch.mean(dg**2)
        loss += (r_loss + g_loss)
        r_losses.append(r_loss.item())
        g_losses.append(g_loss.item())

    return loss, r_losses, g_losses


def generator_loss(disc_outputs):
    loss = 0
    gen_losses = []
    for dg in disc_outputs:
        l = torch.mean((1-dg)**2)
        gen_losses.append(l)
        loss += l

    return loss, gen_losses



# config_v3.json (sizes for 2 CPU cores, see the docstring)
_CONFIG = {
    "resblock": "2",
    "num_gpus": 0,
    "batch_size": 2,
    "learning_rate": 0.001,
    "adam_b1": 0.8,
    "adam_b2": 0.99,
    "lr_decay": 0.999,
    "seed": 1234,

    "upsample_rates": [4,4,4],
    "upsample_kernel_sizes": [8,8,8],
    "upsample_initial_channel": 64,
    "resblock_kernel_sizes": [3,5,7],
    "resblock_dilation_sizes": [[1,2], [2,6], [3,12]],

    "segment_size": 512,
    "num_mels": 80,
    "n_fft": 256,
    "hop_size": 64,
    "win_size": 256,

    "sampling_rate": 16000,

    "fmin": 0,
    "fmax": 8000,
    "fmax_for_loss": None,

    "num_workers": 0,
}


def _clips(rng, prefix, n, length):  # (port) the stand-in for LJSpeech's wavs
    names = []
    t = np.arange(length) / 16000.0
    for i in range(n):
        f0 = rng.uniform(100, 400)
        wav = sum((0.6 ** k) * np.sin(2 * np.pi * f0 * (k + 1) * t + rng.uniform(0, 2 * np.pi)) for k in range(4))
        env = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(1, 4) * t + rng.uniform(0, 2 * np.pi))
        wav = wav * env + 0.02 * rng.standard_normal(length)
        name = f"{prefix}{i:04d}.wav"
        _WAVS[name] = (wav / np.abs(wav).max() * 0.5 * 32767).astype(np.int16)
        names.append(name)
    return names


def _build(seed, bug=None):
    h = AttrDict(_CONFIG)
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device('cpu')

    generator = Generator(h).to(device)
    mpd = MultiPeriodDiscriminator().to(device)
    msd = MultiScaleDiscriminator().to(device)

    optim_g = torch.optim.AdamW(generator.parameters(), h.learning_rate, betas=[h.adam_b1, h.adam_b2])
    optim_d = torch.optim.AdamW(itertools.chain(msd.parameters(), mpd.parameters()),
                                h.learning_rate, betas=[h.adam_b1, h.adam_b2])
    last_epoch = -1
    scheduler_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=h.lr_decay, last_epoch=last_epoch)
    scheduler_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=h.lr_decay, last_epoch=last_epoch)

    training_filelist = _clips(rng, f"s{seed}_train_", 64, 4096)
    validation_filelist = _clips(rng, f"s{seed}_val_", 4, 4096)

    trainset = MelDataset(training_filelist, h.segment_size, h.n_fft, h.num_mels,
                          h.hop_size, h.win_size, h.sampling_rate, h.fmin, h.fmax, n_cache_reuse=0,
                          shuffle=False if h.num_gpus > 1 else True, fmax_loss=h.fmax_for_loss, device=device,
                          fine_tuning=False, base_mels_path=None)
    trainset.bug = bug
    random.seed(seed)  # (port) MelDataset seeds Python's random with 1234; the segments drawn from seed
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(trainset, num_workers=h.num_workers, shuffle=True, generator=gen,
                              batch_size=h.batch_size,
                              drop_last=True)

    validset = MelDataset(validation_filelist, h.segment_size, h.n_fft, h.num_mels,
                          h.hop_size, h.win_size, h.sampling_rate, h.fmin, h.fmax, False, False, n_cache_reuse=0,
                          fmax_loss=h.fmax_for_loss, device=device, fine_tuning=False,
                          base_mels_path=None)
    validation_loader = DataLoader(validset, num_workers=0, shuffle=False,
                                   sampler=None,
                                   batch_size=1,
                                   drop_last=True)

    generator.train()
    mpd.train()
    msd.train()
    st = {"it": iter(train_loader)}

    def train_step():
        try:
            batch = next(st["it"])
        except StopIteration:
            scheduler_g.step()
            scheduler_d.step()
            st["it"] = iter(train_loader)
            batch = next(st["it"])
        x, y, _, y_mel = batch
        x = torch.autograd.Variable(x.to(device, non_blocking=True))
        y = torch.autograd.Variable(y.to(device, non_blocking=True))
        y_mel = torch.autograd.Variable(y_mel.to(device, non_blocking=True))
        y = y.unsqueeze(1)

        y_g_hat = generator(x)
        y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size,
                                      h.fmin, h.fmax_for_loss)

        optim_d.zero_grad()

        # MPD
        y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
        loss_disc_f, losses_disc_f_r, losses_disc_f_g = discriminator_loss(y_df_hat_r, y_df_hat_g)

        # MSD
        y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
        loss_disc_s, losses_disc_s_r, losses_disc_s_g = discriminator_loss(y_ds_hat_r, y_ds_hat_g)

        loss_disc_all = loss_disc_s + loss_disc_f

        loss_disc_all.backward()
        optim_d.step()

        # Generator
        if bug != "g_zero_grad_dropped":
            optim_g.zero_grad()

        # L1 Mel-Spectrogram Loss
        if bug == "mel_loss_detached":
            loss_mel = F.l1_loss(y_mel, y_g_hat_mel.detach()) * 45
        else:
            loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45

        y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
        y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
        loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
        loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
        loss_gen_f, losses_gen_f = generator_loss(y_df_hat_g)
        loss_gen_s, losses_gen_s = generator_loss(y_ds_hat_g)
        loss_gen_all = loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel

        loss_gen_all.backward()
        optim_g.step()

        with torch.no_grad():
            mel_error = F.l1_loss(y_mel, y_g_hat_mel).item()
        return mel_error

    def eval_fn(m, _batch=None):
        was = m.training
        m.eval()
        val_err_tot = 0
        with torch.no_grad():
            for j, batch in enumerate(validation_loader):
                x, y, _, y_mel = batch
                y_g_hat = m(x.to(device))
                y_mel = torch.autograd.Variable(y_mel.to(device, non_blocking=True))
                y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate,
                                              h.hop_size, h.win_size,
                                              h.fmin, h.fmax_for_loss)
                val_err_tot += F.l1_loss(y_mel, y_g_hat_mel).item()
        m.train(was)
        return val_err_tot / (j + 1)

    state = random.getstate()
    first = [trainset[i] for i in range(h.batch_size)]
    random.setstate(state)
    batch = (torch.stack([f[0] for f in first]), torch.stack([f[3] for f in first]))

    def loss_fn(y_g_hat, y_mel):
        y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size,
                                      h.win_size, h.fmin, h.fmax_for_loss)
        return F.l1_loss(y_mel, y_g_hat_mel) * 45

    return Program(name="hifigan_vocoder", model=generator, batch=batch, loss_fn=loss_fn, optimizer=optim_g,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the input mel computed from another random window of the clip than the audio segment returned with
    # it, so the generator is asked for a waveform its mel does not describe.
    Bug("mel_from_another_segment", functools.partial(_build, bug="mel_from_another_segment"), "learning_ledger",
        ("TASK",)),
    # classic: the generated mel detached in the L1 mel loss, so the loss the training leans on carries no gradient
    # to the generator (only the adversarial and feature-matching terms train it).
    Bug("mel_loss_detached", functools.partial(_build, bug="mel_loss_detached"), "learning_ledger", ("OBJECTIVE",)),
    # classic: optim_g.zero_grad() left out: the generator's gradients pile up across steps.
    Bug("g_zero_grad_dropped", functools.partial(_build, bug="g_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
