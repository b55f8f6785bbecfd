"""MelGAN of descriptinc/melgan-neurips trained by its ``scripts/train.py``: a weight-normalised fully convolutional
``Generator`` (mel frames -> waveform by transposed convolutions with ratios 8, 8, 2, 2 and dilated residual
stacks, tanh output) and a multi-scale ``Discriminator`` (``num_D`` ``NLayerDiscriminator``s with grouped strided
convolutions, each scale on an average-pooled copy of the audio, every layer's feature map returned); the
discriminator's hinge loss (``relu(1 + D(fake)) + relu(1 - D(real))`` per scale), the generator's hinge loss
(``-D(fake)``) plus ``lambda_feat`` (10) times the L1 feature-matching loss over the discriminator's layers, both
networks with Adam (lr 1e-4, betas 0.5 / 0.9); the mel input is ``Audio2Mel`` (reflect pad, ``torch.stft``,
magnitude, mel filterbank, ``log10(clamp(., 1e-5))``) of the real audio.

Source: https://github.com/descriptinc/melgan-neurips
Commit: 6488045bfba1975602288de07a58570c7b4d66ea
Files: scripts/train.py, mel2wav/modules.py, mel2wav/dataset.py
License: MIT (Copyright (c) 2019 Descript Inc.)
Domain: audio generation (GAN vocoder: multi-scale hinge loss + feature matching, mel via STFT)

Deviations from the original:
- sizes (drastically shrunk for 2 CPU cores): n_mel_channels 80 -> 16, ngf 32 -> 4, n_residual_layers 3 -> 1,
  num_D 3 -> 2, batch_size 16 -> 4, seq_len 8192 -> 2048; the STFT (n_fft 1024, hop 256, window 1024, 22050 Hz),
  the generator's ratios, lambda_feat 10 and the optimizers are unchanged; ndf 16, n_layers_D 4 and
  downsamp_factor 4 are kept because ``NLayerDiscriminator``'s second-to-last layer takes ``nf_prev`` input
  channels, which equals the channels it receives only once the 1024-channel cap is reached (smaller settings fail
  with a shape error);
- librosa is not installed: ``librosa.filters.mel`` (Slaney mel scale, Slaney area normalisation, the defaults the
  original gets) is written out in numpy, and ``AudioDataset``'s ``librosa.core.load`` + ``librosa.util.normalize``
  are replaced by synthetic clips peak-normalised in numpy (``0.95 * x / max|x|``); ``torch.stft`` without
  ``return_complex`` is an error in this torch: it is called with ``return_complex=True`` and ``torch.view_as_real``
  gives the same (real, imaginary) last axis the original unbinds; ``torch.nn.utils.weight_norm`` (deprecated) is
  kept;
- data: the LJSpeech wav files are replaced by 32 synthetic 4096-sample clips made from ``seed`` (a harmonic tone
  with a random fundamental between 110 and 440 Hz, three decaying harmonics and an attack/decay envelope, plus a
  little noise); ``AudioDataset`` takes random 2048-sample segments and the random-amplitude augmentation as
  written; its ``random`` draws (the file shuffle, the segment starts) come from a ``random.Random(1234)`` (the
  original seeds the global ``random`` with 1234) and the amplitude from ``np.random.RandomState(seed)`` instead of
  the global generators; the DataLoader does not shuffle, as written;
- ``.cuda()`` calls, tensorboard, yaml dumping, checkpoints, the test-sample audio files and logging are left out;
- the two losses' lines are gathered into ``discriminator_objective`` and ``generator_objective`` (the same lines,
  called where the loop has them); the mel L1 error ``s_error`` is computed and dropped (it only fed tensorboard);
- one ``train_step`` is one iteration of the inner loop (discriminator step, then generator step); it returns the
  discriminator's hinge loss ``loss_D`` (what ``optD`` minimizes; the generator's objective rises as D learns, as
  in any GAN); the Program's model is the discriminator, its batch ``cat([x_fake, x_real])`` for a batch of real
  audio and the generator's (detached) output for its mel, and ``loss_fn`` is ``loss_D`` on the discriminator's
  outputs for the two halves; ``SELF_CHECK_STEPS`` is 10 (the discriminator's 1024 x 1024 x 5 layer makes a step
  cost about half a second here).
"""
# ruff: noqa: PERF102, PLR0402, RUF059, UP031  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import weight_norm
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SAMPLING_RATE = 22050
N_CLIPS = 32
SELF_CHECK_STEPS = 10
CLIP_LEN = 4096


class Args:
    n_mel_channels = 16
    ngf = 4
    n_residual_layers = 1
    ndf = 16
    num_D = 2
    n_layers_D = 4
    downsamp_factor = 4
    lambda_feat = 10
    batch_size = 4
    seq_len = 2048


# ---- librosa.filters.mel (Slaney mel scale and normalisation), written out ---------------------------------------

def _hz_to_mel(frequencies):
    f_min, f_sp = 0.0, 200.0 / 3
    frequencies = np.asanyarray(frequencies, dtype=float)
    mels = (frequencies - f_min) / f_sp
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    log_t = frequencies >= min_log_hz
    mels = np.where(log_t, min_log_mel + np.log(np.maximum(frequencies, 1e-10) / min_log_hz) / logstep, mels)
    return mels


def _mel_to_hz(mels):
    f_min, f_sp = 0.0, 200.0 / 3
    mels = np.asanyarray(mels, dtype=float)
    freqs = f_min + f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    log_t = mels >= min_log_mel
    return np.where(log_t, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freqs)


def librosa_mel_fn(sr, n_fft, n_mels=128, fmin=0.0, fmax=None):
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
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


# ---- mel2wav/modules.py ------------------------------------------------------------------------------------------

def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm2d") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


def WNConv1d(*args, **kwargs):
    return weight_norm(nn.Conv1d(*args, **kwargs))


def WNConvTranspose1d(*args, **kwargs):
    return weight_norm(nn.ConvTranspose1d(*args, **kwargs))


class Audio2Mel(nn.Module):
    def __init__(
        self,
        n_fft=1024,
        hop_length=256,
        win_length=1024,
        sampling_rate=22050,
        n_mel_channels=80,
        mel_fmin=0.0,
        mel_fmax=None,
    ):
        super().__init__()
        ##############################################
        # FFT Parameters                              #
        ##############################################
        window = torch.hann_window(win_length).float()
        mel_basis = librosa_mel_fn(
            sampling_rate, n_fft, n_mel_channels, mel_fmin, mel_fmax
        )
        mel_basis = torch.from_numpy(mel_basis).float()
        self.register_buffer("mel_basis", mel_basis)
        self.register_buffer("window", window)
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.win_length = win_length
        self.sampling_rate = sampling_rate
        self.n_mel_channels = n_mel_channels

    def forward(self, audio):
        p = (self.n_fft - self.hop_length) // 2
        audio = F.pad(audio, (p, p), "reflect").squeeze(1)
        fft = torch.view_as_real(torch.stft(
            audio,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self.window,
            center=False,
            return_complex=True,
        ))
        real_part, imag_part = fft.unbind(-1)
        magnitude = torch.sqrt(real_part ** 2 + imag_part ** 2)
        mel_output = torch.matmul(self.mel_basis, magnitude)
        log_mel_spec = torch.log10(torch.clamp(mel_output, min=1e-5))
        return log_mel_spec


class ResnetBlock(nn.Module):
    def __init__(self, dim, dilation=1):
        super().__init__()
        self.block = nn.Sequential(
            nn.LeakyReLU(0.2),
            nn.ReflectionPad1d(dilation),
            WNConv1d(dim, dim, kernel_size=3, dilation=dilation),
            nn.LeakyReLU(0.2),
            WNConv1d(dim, dim, kernel_size=1),
        )
        self.shortcut = WNConv1d(dim, dim, kernel_size=1)

    def forward(self, x):
        return self.shortcut(x) + self.block(x)


class Generator(nn.Module):
    def __init__(self, input_size, ngf, n_residual_layers):
        super().__init__()
        ratios = [8, 8, 2, 2]
        self.hop_length = np.prod(ratios)
        mult = int(2 ** len(ratios))

        model = [
            nn.ReflectionPad1d(3),
            WNConv1d(input_size, mult * ngf, kernel_size=7, padding=0),
        ]

        # Upsample to raw audio scale
        for i, r in enumerate(ratios):
            model += [
                nn.LeakyReLU(0.2),
                WNConvTranspose1d(
                    mult * ngf,
                    mult * ngf // 2,
                    kernel_size=r * 2,
                    stride=r,
                    padding=r // 2 + r % 2,
                    output_padding=r % 2,
                ),
            ]

            for j in range(n_residual_layers):
                model += [ResnetBlock(mult * ngf // 2, dilation=3 ** j)]

            mult //= 2

        model += [
            nn.LeakyReLU(0.2),
            nn.ReflectionPad1d(3),
            WNConv1d(ngf, 1, kernel_size=7, padding=0),
            nn.Tanh(),
        ]

        self.model = nn.Sequential(*model)
        self.apply(weights_init)

    def forward(self, x):
        return self.model(x)


class NLayerDiscriminator(nn.Module):
    def __init__(self, ndf, n_layers, downsampling_factor):
        super().__init__()
        model = nn.ModuleDict()

        model["layer_0"] = nn.Sequential(
            nn.ReflectionPad1d(7),
            WNConv1d(1, ndf, kernel_size=15),
            nn.LeakyReLU(0.2, True),
        )

        nf = ndf
        stride = downsampling_factor
        for n in range(1, n_layers + 1):
            nf_prev = nf
            nf = min(nf * stride, 1024)

            model["layer_%d" % n] = nn.Sequential(
                WNConv1d(
                    nf_prev,
                    nf,
                    kernel_size=stride * 10 + 1,
                    stride=stride,
                    padding=stride * 5,
                    groups=nf_prev // 4,
                ),
                nn.LeakyReLU(0.2, True),
            )

        nf = min(nf * 2, 1024)
        model["layer_%d" % (n_layers + 1)] = nn.Sequential(
            WNConv1d(nf_prev, nf, kernel_size=5, stride=1, padding=2),
            nn.LeakyReLU(0.2, True),
        )

        model["layer_%d" % (n_layers + 2)] = WNConv1d(
            nf, 1, kernel_size=3, stride=1, padding=1
        )

        self.model = model

    def forward(self, x):
        results = []
        for key, layer in self.model.items():
            x = layer(x)
            results.append(x)
        return results


class Discriminator(nn.Module):
    def __init__(self, num_D, ndf, n_layers, downsampling_factor):
        super().__init__()
        self.model = nn.ModuleDict()
        for i in range(num_D):
            self.model[f"disc_{i}"] = NLayerDiscriminator(
                ndf, n_layers, downsampling_factor
            )

        self.downsample = nn.AvgPool1d(4, stride=2, padding=1, count_include_pad=False)
        self.apply(weights_init)

    def forward(self, x):
        results = []
        for key, disc in self.model.items():
            results.append(disc(x))
            x = self.downsample(x)
        return results


# ---- mel2wav/dataset.py (synthetic clips in place of the wav files) ---------------------------------------------

def make_clips(seed):
    rng = np.random.RandomState(seed)
    t = np.arange(CLIP_LEN) / SAMPLING_RATE
    clips = []
    for _ in range(N_CLIPS):
        f0 = rng.uniform(110, 440)
        x = sum(rng.uniform(0.3, 1.0) / k * np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 2 * np.pi))
                for k in (1, 2, 3))
        env = np.minimum(1.0, t / 0.01) * np.exp(-t * rng.uniform(2, 12))
        clips.append((x * env + 0.01 * rng.randn(CLIP_LEN)).astype(np.float32))
    return clips


class AudioDataset(torch.utils.data.Dataset):
    """
    This is the main class that calculates the spectrogram and returns the
    spectrogram, audio pair.
    """

    def __init__(self, clips, segment_length, sampling_rate, augment=True, seed=0):
        self.sampling_rate = sampling_rate
        self.segment_length = segment_length
        self.audio_files = list(clips)
        self.random = random.Random(1234)
        self.random.shuffle(self.audio_files)
        self.np_random = np.random.RandomState(seed)
        self.augment = augment

    def __getitem__(self, index):
        # Read audio
        data = self.audio_files[index]
        audio, sampling_rate = self.load_wav_to_torch(data)
        # Take segment
        if audio.size(0) >= self.segment_length:
            max_audio_start = audio.size(0) - self.segment_length
            audio_start = self.random.randint(0, max_audio_start)
            audio = audio[audio_start : audio_start + self.segment_length]
        else:
            audio = F.pad(
                audio, (0, self.segment_length - audio.size(0)), "constant"
            ).data

        # audio = audio / 32768.0
        return audio.unsqueeze(0)

    def __len__(self):
        return len(self.audio_files)

    def load_wav_to_torch(self, data):
        """
        Loads wavdata into torch array
        """
        data = 0.95 * (data / np.abs(data).max())  # librosa.util.normalize
        sampling_rate = self.sampling_rate

        if self.augment:
            amplitude = self.np_random.uniform(low=0.3, high=1.0)
            data = data * amplitude

        return torch.from_numpy(data).float(), sampling_rate


# ---- scripts/train.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = Args()

    #######################
    # Load PyTorch Models #
    #######################
    netG = Generator(args.n_mel_channels, args.ngf, args.n_residual_layers)
    netD = Discriminator(
        args.num_D, args.ndf, args.n_layers_D, args.downsamp_factor
    )
    fft = Audio2Mel(n_mel_channels=args.n_mel_channels)

    #####################
    # Create optimizers #
    #####################
    optG = torch.optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))
    optD = torch.optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))

    #######################
    # Create data loaders #
    #######################
    train_set = AudioDataset(make_clips(seed), args.seq_len, sampling_rate=22050, seed=seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, num_workers=0)

    def generator_objective(x_pred_t, D_real):
        D_fake = netD(x_pred_t)

        loss_G = 0
        for scale in D_fake:
            loss_G += -scale[-1].mean()

        loss_feat = 0
        feat_weights = 4.0 / (args.n_layers_D + 1)
        D_weights = 1.0 / args.num_D
        wt = D_weights * feat_weights
        for i in range(args.num_D):
            for j in range(len(D_fake[i]) - 1):
                loss_feat += wt * F.l1_loss(D_fake[i][j], D_real[i][j].detach())
        return loss_G, loss_feat

    def discriminator_objective(D_fake_det, D_real):
        loss_D = 0
        for scale in D_fake_det:
            if bug == "hinge_signs_swapped":
                # the hinge margins written the wrong way round: fakes pushed above +1, reals below -1
                loss_D += F.relu(1 - scale[-1]).mean()
            else:
                loss_D += F.relu(1 + scale[-1]).mean()

        for scale in D_real:
            if bug == "hinge_signs_swapped":
                loss_D += F.relu(1 + scale[-1]).mean()
            else:
                loss_D += F.relu(1 - scale[-1]).mean()
        return loss_D

    state = {"it": iter(train_loader), "steps": 0}

    def train_step():
        # one iteration of `for iterno, x_t in enumerate(train_loader)`
        try:
            x_t = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            x_t = next(state["it"])

        s_t = fft(x_t).detach()
        x_pred_t = netG(s_t)

        with torch.no_grad():
            s_pred_t = fft(x_pred_t.detach())
            F.l1_loss(s_t, s_pred_t).item()

        #######################
        # Train Discriminator #
        #######################
        if bug == "real_audio_as_fake":
            # copy-paste slip: the real batch given to the discriminator where the generated one belongs
            D_fake_det = netD(x_t.detach())
        else:
            D_fake_det = netD(x_pred_t.detach())
        D_real = netD(x_t)

        loss_D = discriminator_objective(D_fake_det, D_real)

        if bug == "zero_grad_on_generator":
            # netG.zero_grad() where netD.zero_grad() belongs: the discriminator's gradients (its own and those the
            # generator's backward leaves in it) are never cleared
            netG.zero_grad()
        else:
            netD.zero_grad()
        loss_D.backward()
        optD.step()

        ###################
        # Train Generator #
        ###################
        loss_G, loss_feat = generator_objective(x_pred_t, D_real)

        netG.zero_grad()
        (loss_G + args.lambda_feat * loss_feat).backward()
        optG.step()

        state["steps"] += 1
        return loss_D.detach()

    # the evidence: the discriminator on a batch of generated audio followed by the real audio it came from
    x_first = next(iter(DataLoader(AudioDataset(make_clips(seed), args.seq_len, sampling_rate=22050, seed=seed),
                                   batch_size=args.batch_size)))
    with torch.no_grad():
        x_fake = netG(fft(x_first))
    if bug == "real_audio_as_fake":
        x_fake = x_first.clone()
    n_fake = x_fake.shape[0]

    def loss_fn(D_out, _targets):
        D_fake_det = [[f[:n_fake] for f in scale] for scale in D_out]
        D_real = [[f[n_fake:] for f in scale] for scale in D_out]
        return discriminator_objective(D_fake_det, D_real)

    return Program(name="melgan_vocoder", model=netD, batch=(torch.cat([x_fake, x_first]), (x_fake, x_first)),
                   loss_fn=loss_fn, optimizer=optD, train_step=train_step, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # copy-paste slip (classic): the real batch passed where the generated one belongs in the discriminator's
    # step, so "fake" and "real" are the same audio and nothing can be learned about the generator's output.
    Bug("real_audio_as_fake", functools.partial(_build, bug="real_audio_as_fake"), "learning_ledger", ("TASK",)),
    # netG.zero_grad() before the discriminator's backward instead of netD.zero_grad() (classic): the
    # discriminator's gradients accumulate across steps, the generator's backward through D adding to them.
    Bug("zero_grad_on_generator", functools.partial(_build, bug="zero_grad_on_generator"), "step_probe",
        ("model.disc_0.model.layer_0.1",)),
    # the hinge margins with swapped signs (classic): the discriminator is trained to score fakes as real and
    # reals as fake.
    Bug("hinge_signs_swapped", functools.partial(_build, bug="hinge_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
]
