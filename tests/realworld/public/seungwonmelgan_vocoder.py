# ruff: noqa: PLR0402, UP008, C408, TRY002
"""MelGAN vocoder from seungwonpark/melgan: a weight-normed generator (reflection-padded input conv, four transposed
convolutions upsampling 8x8x2x2 = hop 256, each followed by a dilated ``ResStack``, tanh output) turning a log-mel
spectrogram into a waveform, against a ``MultiScaleDiscriminator`` (three weight-normed grouped-conv discriminators
on the raw, 2x- and 4x-average-pooled waveform). Least-squares GAN losses summed over the scales, the generator's
plus ``feat_match`` (10) times the L1 feature-matching loss over every discriminator layer; Adam lr 1e-4, betas
(0.5, 0.9) for both networks; the generator step on one (mel, audio) pair, then ``rep_discriminator`` discriminator
steps on a second, shuffled pair, as the repository's ``MelFromDisk`` returns them.

Source: https://github.com/seungwonpark/melgan
Commit: aca59909f6dd028ec808f987b154535a7ca3400c
Files: utils/train.py, model/generator.py, model/res_stack.py, model/discriminator.py, model/multiscale.py,
model/identity.py, datasets/dataloader.py, config/default.yaml
License: BSD-3-Clause (Copyright (c) 2019, Seungwon Park; full text in LICENSES/seungwonpark-melgan.txt)
Domain: audio and speech, neural vocoder (GAN, mel-spectrogram to waveform)

Kept as written: ``Generator`` (the layer sequence, kernel sizes, strides, paddings, ``(mel + 5.0) / 5.0``),
``ResStack`` (three blocks of LeakyReLU, reflection pad ``3**i``, dilated conv, LeakyReLU, 1x1 conv, plus a 1x1
weight-normed shortcut), ``Discriminator`` (the seven layers, kernel 15 then 41 with stride 4 and growing groups,
5 and 3; features and score returned), ``MultiScaleDiscriminator`` (``Identity`` then two ``AvgPool1d(4, 2, 1,
count_include_pad=False)`` applied in turn), the loop body of ``train`` (generator: ``optim_g.zero_grad()``, output
cut to ``segment_length``, both scales' scores, ``mean(sum((score_fake - 1)^2))`` plus ``feat_match * mean(|feat_f -
feat_r|)``, backward, step; discriminator: the fake recomputed from ``melD`` and detached, ``rep_discriminator``
steps of ``mean(sum((score_real - 1)^2)) + mean(sum(score_fake^2))``), the hyper-parameters (Adam 1e-4, (0.5, 0.9),
``feat_match`` 10, ``rep_discriminator`` 1, hop 256, ``mel_segment_length = segment_length // hop_length + 2``) and the
dataset's pairing (each item is its own pair and the pair at ``mapping[idx]``, reshuffled every epoch) and its
``(1/32768) * randn`` dithering of the audio.

Deviations from the original:
- sizes: the channel widths of both networks are divided by 8 (generator 512/256/128/64/32 -> 64/32/16/8/4,
  discriminator 16/64/256/1024/1024/1024 -> 2/8/32/128/128/128, its groups 4/16/64/256 -> 2/8/32/32, one or four
  input channels per group where the original has four); ``n_mel_channels`` 80 -> 16, ``segment_length`` 16000 ->
  512 samples (4 mel frames per crop, as the formula gives), batch 16 -> 2;
- data: the LJSpeech-style wav files and their precomputed mels (``preprocess.py``'s ``TacotronSTFT``) are replaced
  by 64 synthetic clips made from ``seed``: 16 sinusoidal bands whose per-frame amplitudes (piecewise constant over
  hop-256 frames) set the audio, and the "mel" is the log of those amplitudes (floored at 1e-5 as ``log(clamp(x,
  1e-5))`` is in the repository's ``TacotronSTFT``): the waveform is a fixed function of the mel; the crops start at
  a random frame as ``my_getitem`` does, drawn from a ``random.Random(seed)``; there are no wav files, so no
  ``pad_short`` padding is needed;
- ``.cuda()``, tqdm, tensorboard, the validation every 5 epochs, the checkpoints and the git-hash bookkeeping are
  left out; the "Loss exploded" guard is kept; one ``train_step`` is one iteration of the loader loop (the mapping is
  reshuffled when the epoch ends) and returns the generator's loss as the loop logs it (``loss_g``);
- the Program's model is the generator (the network the vocoder is trained for) with its optimizer ``optim_g`` and
  ``loss_fn(outputs, audioG)`` the generator's loss on the generator's output for ``melG``;
- ``torch.nn.utils.weight_norm`` is kept as written (deprecated in recent torch, the same reparametrization);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types

import torch
import torch.nn as nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- model/res_stack.py -------------------------------------------------------------------------------------------


class ResStack(nn.Module):
    def __init__(self, channel):
        super(ResStack, self).__init__()

        self.blocks = nn.ModuleList([
            nn.Sequential(
                nn.LeakyReLU(0.2),
                nn.ReflectionPad1d(3**i),
                nn.utils.weight_norm(nn.Conv1d(channel, channel, kernel_size=3, dilation=3**i)),
                nn.LeakyReLU(0.2),
                nn.utils.weight_norm(nn.Conv1d(channel, channel, kernel_size=1)),
            )
            for i in range(3)
        ])

        self.shortcuts = nn.ModuleList([
            nn.utils.weight_norm(nn.Conv1d(channel, channel, kernel_size=1))
            for i in range(3)
        ])

    def forward(self, x):
        for block, shortcut in zip(self.blocks, self.shortcuts):
            x = shortcut(x) + block(x)
        return x


# ---- model/generator.py (widths / 8) ------------------------------------------------------------------------------

G_WIDTHS = (64, 32, 16, 8, 4)  # 512, 256, 128, 64, 32 as written


class Generator(nn.Module):
    def __init__(self, mel_channel):
        super(Generator, self).__init__()
        self.mel_channel = mel_channel
        c0, c1, c2, c3, c4 = G_WIDTHS

        self.generator = nn.Sequential(
            nn.ReflectionPad1d(3),
            nn.utils.weight_norm(nn.Conv1d(mel_channel, c0, kernel_size=7, stride=1)),

            nn.LeakyReLU(0.2),
            nn.utils.weight_norm(nn.ConvTranspose1d(c0, c1, kernel_size=16, stride=8, padding=4)),

            ResStack(c1),

            nn.LeakyReLU(0.2),
            nn.utils.weight_norm(nn.ConvTranspose1d(c1, c2, kernel_size=16, stride=8, padding=4)),

            ResStack(c2),

            nn.LeakyReLU(0.2),
            nn.utils.weight_norm(nn.ConvTranspose1d(c2, c3, kernel_size=4, stride=2, padding=1)),

            ResStack(c3),

            nn.LeakyReLU(0.2),
            nn.utils.weight_norm(nn.ConvTranspose1d(c3, c4, kernel_size=4, stride=2, padding=1)),

            ResStack(c4),

            nn.LeakyReLU(0.2),
            nn.ReflectionPad1d(3),
            nn.utils.weight_norm(nn.Conv1d(c4, 1, kernel_size=7, stride=1)),
            nn.Tanh(),
        )

    def forward(self, mel):
        mel = (mel + 5.0) / 5.0 # roughly normalize spectrogram
        return self.generator(mel)


# ---- model/discriminator.py (widths / 8) --------------------------------------------------------------------------


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()

        self.discriminator = nn.ModuleList([
            nn.Sequential(
                nn.ReflectionPad1d(7),
                nn.utils.weight_norm(nn.Conv1d(1, 2, kernel_size=15, stride=1)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.Sequential(
                nn.utils.weight_norm(nn.Conv1d(2, 8, kernel_size=41, stride=4, padding=20, groups=2)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.Sequential(
                nn.utils.weight_norm(nn.Conv1d(8, 32, kernel_size=41, stride=4, padding=20, groups=8)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.Sequential(
                nn.utils.weight_norm(nn.Conv1d(32, 128, kernel_size=41, stride=4, padding=20, groups=32)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.Sequential(
                nn.utils.weight_norm(nn.Conv1d(128, 128, kernel_size=41, stride=4, padding=20, groups=32)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.Sequential(
                nn.utils.weight_norm(nn.Conv1d(128, 128, kernel_size=5, stride=1, padding=2)),
                nn.LeakyReLU(0.2, inplace=True),
            ),
            nn.utils.weight_norm(nn.Conv1d(128, 1, kernel_size=3, stride=1, padding=1)),
        ])

    def forward(self, x):
        '''
            returns: (list of 6 features, discriminator score)
            we directly predict score without last sigmoid function
            since we're using Least Squares GAN (https://arxiv.org/abs/1611.04076)
        '''
        features = list()
        for module in self.discriminator:
            x = module(x)
            features.append(x)
        return features[:-1], features[-1]


# ---- model/identity.py, model/multiscale.py -----------------------------------------------------------------------


class Identity(nn.Module):
    def __init__(self):
        super(Identity, self).__init__()

    def forward(self, x):
        return x


class MultiScaleDiscriminator(nn.Module):
    def __init__(self):
        super(MultiScaleDiscriminator, self).__init__()

        self.discriminators = nn.ModuleList(
            [Discriminator() for _ in range(3)]
        )

        self.pooling = nn.ModuleList(
            [Identity()] +
            [nn.AvgPool1d(kernel_size=4, stride=2, padding=1, count_include_pad=False) for _ in range(1, 3)]
        )

    def forward(self, x):
        ret = list()

        for pool, disc in zip(self.pooling, self.discriminators):
            x = pool(x)
            ret.append(disc(x))

        return ret # [(feat, score), (feat, score), (feat, score)]


# ---- config/default.yaml (sizes shrunk) ---------------------------------------------------------------------------

HP = types.SimpleNamespace(
    train=types.SimpleNamespace(rep_discriminator=1, batch_size=2,
                                adam=types.SimpleNamespace(lr=0.0001, beta1=0.5, beta2=0.9)),
    audio=types.SimpleNamespace(n_mel_channels=16, segment_length=512, hop_length=256, sampling_rate=22050),
    model=types.SimpleNamespace(feat_match=10.0),
)


# ---- datasets/dataloader.py (synthetic clips in place of wav files and their mels) ---------------------------------


def _synthetic_clips(hp, n_clips, n_frames, gen):
    """Each clip: 16 sinusoidal bands whose amplitudes are constant over each hop-256 frame; its mel is the log of
    those amplitudes (floored at 1e-5 as TacotronSTFT's dynamic range compression is)."""
    n_mel, hop, sr = hp.audio.n_mel_channels, hp.audio.hop_length, hp.audio.sampling_rate
    freqs = torch.linspace(150.0, 4000.0, n_mel)
    active = (torch.rand(n_clips, n_mel, n_frames, generator=gen) < 0.3).float()
    amps = active * (0.02 + 0.1 * torch.rand(n_clips, n_mel, n_frames, generator=gen))
    t = torch.arange(n_frames * hop, dtype=torch.float32) / sr
    phases = 2 * math.pi * torch.rand(n_clips, n_mel, 1, generator=gen)
    carriers = torch.sin(2 * math.pi * freqs[None, :, None] * t[None, None, :] + phases)  # [N, n_mel, T]
    audio = (amps.repeat_interleave(hop, dim=2) * carriers).sum(1, keepdim=True)  # [N, 1, T]
    mel = torch.log(torch.clamp(amps, min=1e-5))
    return mel, audio


class MelFromDisk(torch.utils.data.Dataset):
    def __init__(self, hp, mels, audios, rng):
        self.hp = hp
        self.train = True
        self.mels, self.audios, self.rng = mels, audios, rng
        self.mel_segment_length = hp.audio.segment_length // hp.audio.hop_length + 2
        self.mapping = [i for i in range(len(self.mels))]

    def __len__(self):
        return len(self.mels)

    def __getitem__(self, idx):
        if self.train:
            idx1 = idx
            idx2 = self.mapping[idx1]
            return self.my_getitem(idx1), self.my_getitem(idx2)
        else:
            return self.my_getitem(idx)

    def shuffle_mapping(self):
        self.rng.shuffle(self.mapping)

    def my_getitem(self, idx):
        audio = self.audios[idx]
        mel = self.mels[idx]

        if self.train:
            max_mel_start = mel.size(1) - self.mel_segment_length
            mel_start = self.rng.randint(0, max_mel_start)
            mel_end = mel_start + self.mel_segment_length
            mel = mel[:, mel_start:mel_end]

            audio_start = mel_start * self.hp.audio.hop_length
            audio = audio[:, audio_start:audio_start+self.hp.audio.segment_length]

        audio = audio + (1/32768) * torch.randn_like(audio)
        return mel, audio


# ---- utils/train.py -----------------------------------------------------------------------------------------------


def _build(seed, bug=None):
    hp = HP
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)

    mels, audios = _synthetic_clips(hp, 64, 16, gen)
    dataset = MelFromDisk(hp, mels, audios, rng)
    trainloader = torch.utils.data.DataLoader(dataset=dataset, batch_size=hp.train.batch_size, shuffle=True,
                                              drop_last=True, generator=torch.Generator().manual_seed(seed))

    model_g = Generator(hp.audio.n_mel_channels)
    model_d = MultiScaleDiscriminator()

    if bug == "optim_g_over_discriminator":
        # copy-paste slip: the generator's optimizer built over the discriminator's parameters
        optim_g = torch.optim.Adam(model_d.parameters(),
            lr=hp.train.adam.lr, betas=(hp.train.adam.beta1, hp.train.adam.beta2))
    else:
        optim_g = torch.optim.Adam(model_g.parameters(),
            lr=hp.train.adam.lr, betas=(hp.train.adam.beta1, hp.train.adam.beta2))
    optim_d = torch.optim.Adam(model_d.parameters(),
        lr=hp.train.adam.lr, betas=(hp.train.adam.beta1, hp.train.adam.beta2))

    model_g.train()
    model_d.train()

    def generator_loss(fake_audio, audioG):
        # the generator's loss of the loop on ``model_g(melG)``: output cut to segment_length, LSGAN + feature matching
        fake_audio = fake_audio[:, :, :hp.audio.segment_length]
        disc_fake = model_d(fake_audio)
        disc_real = model_d(audioG)
        loss_g = 0.0
        for (feats_fake, score_fake), (feats_real, _) in zip(disc_fake, disc_real):
            loss_g += torch.mean(torch.sum(torch.pow(score_fake - 1.0, 2), dim=[1, 2]))
            for feat_f, feat_r in zip(feats_fake, feats_real):
                loss_g += hp.model.feat_match * torch.mean(torch.abs(feat_f - feat_r))
        return loss_g

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                trainloader.dataset.shuffle_mapping()
                state["it"] = iter(trainloader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        (melG, audioG), (melD, audioD) = next_batch()

        # generator
        if bug != "g_zero_grad_dropped":
            optim_g.zero_grad()
        fake_audio = model_g(melG)[:, :, :hp.audio.segment_length]
        disc_fake = model_d(fake_audio)
        if bug == "real_audio_from_other_pair":
            # the feature-matching target taken from the discriminator's pair: another clip than melG describes
            disc_real = model_d(audioD)
        else:
            disc_real = model_d(audioG)
        loss_g = 0.0
        for (feats_fake, score_fake), (feats_real, _) in zip(disc_fake, disc_real):
            loss_g += torch.mean(torch.sum(torch.pow(score_fake - 1.0, 2), dim=[1, 2]))
            for feat_f, feat_r in zip(feats_fake, feats_real):
                loss_g += hp.model.feat_match * torch.mean(torch.abs(feat_f - feat_r))

        loss_g.backward()
        optim_g.step()

        # discriminator
        fake_audio = model_g(melD)[:, :, :hp.audio.segment_length]
        fake_audio = fake_audio.detach()
        loss_d_sum = 0.0
        for _ in range(hp.train.rep_discriminator):
            optim_d.zero_grad()
            disc_fake = model_d(fake_audio)
            disc_real = model_d(audioD)
            loss_d = 0.0
            for (_, score_fake), (_, score_real) in zip(disc_fake, disc_real):
                loss_d += torch.mean(torch.sum(torch.pow(score_real - 1.0, 2), dim=[1, 2]))
                loss_d += torch.mean(torch.sum(torch.pow(score_fake, 2), dim=[1, 2]))

            loss_d.backward()
            optim_d.step()
            loss_d_sum += loss_d

        # logging
        loss_g = loss_g.item()
        loss_d_avg = loss_d_sum / hp.train.rep_discriminator
        loss_d_avg = loss_d_avg.item()
        if any([loss_g > 1e8, math.isnan(loss_g), loss_d_avg > 1e8, math.isnan(loss_d_avg)]):
            raise Exception("Loss exploded")
        return torch.tensor(loss_g)

    (melG0, audioG0), _ = next(iter(trainloader))
    return Program(name="seungwonmelgan_vocoder", model=model_g, batch=(melG0, audioG0),
                   loss_fn=generator_loss, optimizer=optim_g,
                   train_step=train_step, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the generator's feature-matching (and score) pass run on the discriminator's pair's real audio
    # (``audioD``), another clip than the mel ``melG`` the generator was given: the waveform target no longer follows
    # the input.
    Bug("real_audio_from_other_pair", functools.partial(_build, bug="real_audio_from_other_pair"), "learning_ledger",
        ("TASK",)),
    # classic copy-paste slip: ``optim_g`` built over ``model_d.parameters()``: the generator is never updated.
    Bug("optim_g_over_discriminator", functools.partial(_build, bug="optim_g_over_discriminator"), "four_structures",
        ("generator",)),
    # classic: ``optim_g.zero_grad()`` dropped: the generator's gradients accumulate over iterations.
    Bug("g_zero_grad_dropped", functools.partial(_build, bug="g_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
