"""Universal Vocoding (a WaveRNN-style neural vocoder) trained by bshall/UniversalVocoding's ``train.py``: log-Mel
frames go through a 2-layer bidirectional GRU conditioning network, are upsampled to the sample rate by
``F.interpolate`` (``scale_factor=hop_length``), concatenated with the embedding of the previous mu-law sample and
fed to an autoregressive GRU, two linear layers give logits over the ``2**bits`` mu-law classes; cross-entropy of
``vocoder(audio[:, :-1], mels)`` against ``audio[:, 1:]``, Adam, ``StepLR`` per step, AMP ``GradScaler``; the
preprocessing (``preprocess.py``) computes the pre-emphasized log-Mel spectrogram and the mu-law-compressed wave
aligned to its frames, and ``VocoderDataset`` cuts random ``sample_frames`` windows of both.

Source: https://github.com/bshall/UniversalVocoding
Commit: 3036e3eb11cadc44e9c3256aab08f2d58978f616
Files: train.py, univoc/model.py, univoc/dataset.py, preprocess.py, univoc/config/config.yaml
License: MIT (Copyright (c) 2019, the LICENSE's copyright line leaves the holder's name blank; the repository is
  bshall's)
Domain: audio and speech, neural vocoder (autoregressive mu-law sample prediction conditioned on Mel frames)

Deviations from the original:
- sizes: sr 16000 -> 4000, hop_length 200 -> 16, win_length 800 -> 64, n_fft 2048 -> 128, n_mels 80 -> 16,
  conditioning_size 128 -> 16, embedding_dim 256 -> 32, rnn_size 896 -> 64, fc_size 1024 -> 64, bits 10 -> 8
  (256 mu-law classes: with 1024 the embedding rows are too rarely seen to learn within a few hundred steps),
  batch_size 32 -> 8, sample_frames 24 -> 8 (128 autoregressive steps instead of 4800), StepLR step_size
  25000 -> 500 (gamma 0.5 kept), lr 4e-4 -> 2e-3 (30 steps instead of 150000); fmin 50, preemph 0.97, top_db 80,
  ref_db 20 kept;
- data: the wav files are replaced by 16 synthetic one-second clips made from ``seed`` (a tone with a random
  fundamental between 150 and 600 Hz, two harmonics, a random attack/decay envelope, a little noise, peak 0.9);
  pyloudnorm's loudness normalization is left out; librosa is not here: ``preemphasis``, ``melspectrogram``
  (centred reflect-padded STFT with a Hann window, magnitude, Slaney mel filters with area normalization),
  ``amplitude_to_db`` and ``mu_compress`` (quantized) are written out in numpy; the arrays are kept in memory
  instead of ``.npy`` files and ``VocoderDataset`` reads them; its ``random`` draws come from a
  ``random.Random(seed)``;
- no CUDA: ``amp.autocast`` and ``GradScaler`` are the CPU ones with ``enabled=False`` (the calls kept, the scaling
  a no-op); hydra, tensorboard, tqdm and checkpoints are left out; one ``train_step`` is one batch of the loop;
  ``eval_fn`` is the cross-entropy of a given batch under ``no_grad``; ``generate`` (sampling) is not copied.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CFG = {"preprocess": {"sr": 4000, "hop_length": 16, "win_length": 64, "n_fft": 128, "n_mels": 16, "fmin": 50,
                      "preemph": 0.97, "top_db": 80, "ref_db": 20, "bits": 8},
       "model": {"n_mels": 16, "conditioning_size": 16, "embedding_dim": 32, "rnn_size": 64, "fc_size": 64,
                 "bits": 8, "hop_length": 16, "sr": 4000},
       "train": {"batch_size": 8, "sample_frames": 8, "lr": 2e-3, "step_size": 500, "gamma": 0.5}}
N_CLIPS = 16


# ---- univoc/model.py ----------------------------------------------------------------------------------------------

class Vocoder(nn.Module):
    def __init__(self, n_mels, conditioning_size, embedding_dim, rnn_size, fc_size, bits, hop_length, sr,
                 bug=None):
        super().__init__()
        self.rnn_size = rnn_size
        self.bits = bits
        self.hop_length = hop_length
        self.sr = sr
        self.bug = bug

        self.rnn1 = nn.GRU(
            n_mels,
            conditioning_size,
            num_layers=2,
            batch_first=True,
            bidirectional=True,
        )
        self.embedding = nn.Embedding(2 ** self.bits, embedding_dim)
        self.rnn2 = nn.GRU(
            embedding_dim + 2 * conditioning_size, rnn_size, batch_first=True
        )
        self.fc1 = nn.Linear(rnn_size, fc_size)
        self.fc2 = nn.Linear(fc_size, 2 ** self.bits)

    def forward(self, x, mels):
        mels, _ = self.rnn1(mels)
        if self.bug == "conditioning_detached":
            mels = mels.detach()  # the conditioning features cut from the graph

        mels = F.interpolate(mels.transpose(1, 2), scale_factor=self.hop_length)
        if self.bug == "upsampled_reshaped_not_transposed":
            mels = mels.reshape(mels.size(0), mels.size(2), mels.size(1))  # [B, C, T] read as [B, T, C]
        else:
            mels = mels.transpose(1, 2)

        x = self.embedding(x)

        x, _ = self.rnn2(torch.cat((x, mels), dim=2))

        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return x


# ---- preprocess.py, with librosa's functions written out ----------------------------------------------------------

def _hz_to_mel(frequencies):
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    frequencies = np.asanyarray(frequencies, dtype=float)
    mels = frequencies / f_sp
    log_t = frequencies >= min_log_hz
    return np.where(log_t, min_log_hz / f_sp + np.log(np.maximum(frequencies, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(mels):
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    mels = np.asanyarray(mels, dtype=float)
    min_log_mel = min_log_hz / f_sp
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), f_sp * mels)


def mel_filters(sr, n_fft, n_mels, fmin):
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, norm=1): Slaney mel scale, area-normalized triangles."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(sr / 2), n_mels + 2))
    fdiff, ramps = np.diff(mel_f), np.subtract.outer(mel_f, fftfreqs)
    weights = np.stack([np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
                        for i in range(n_mels)])
    return weights * (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]


def melspectrogram(wav, sr=16000, hop_length=200, win_length=800, n_fft=2048, n_mels=128, fmin=50, preemph=0.97,
                   top_db=80, ref_db=20):
    wav = np.append(wav[0] * (1 - preemph), wav[1:] - preemph * wav[:-1])  # librosa.effects.preemphasis
    padded = np.pad(wav, n_fft // 2, mode="reflect")  # librosa's centred STFT
    window = np.zeros(n_fft)
    lpad = (n_fft - win_length) // 2
    window[lpad:lpad + win_length] = np.hanning(win_length + 1)[:-1]  # periodic Hann, padded to n_fft
    n_frames = 1 + len(wav) // hop_length
    frames = np.stack([padded[i * hop_length:i * hop_length + n_fft] * window for i in range(n_frames)], 1)
    mel = mel_filters(sr, n_fft, n_mels, fmin) @ np.abs(np.fft.rfft(frames, axis=0))  # power=1
    logmel = 20 * np.log10(np.maximum(1e-5, mel)) - ref_db  # librosa.amplitude_to_db(mel, top_db=None)
    logmel = np.maximum(logmel, -top_db)
    return logmel / top_db


def mu_compress(wav, hop_length=200, frame_length=800, bits=8):
    wav = np.pad(wav, (frame_length // 2,), mode="reflect")
    wav = wav[: ((wav.shape[0] - frame_length) // hop_length + 1) * hop_length]
    mu = 2 ** bits - 1
    compressed = np.sign(wav) * np.log1p(mu * np.abs(wav)) / np.log1p(mu)  # librosa.mu_compress(quantize=True)
    quantized = np.digitize(compressed, np.linspace(-1, 1, num=mu + 1), right=True) - (mu + 1) // 2
    wav = 2 ** (bits - 1) + quantized
    return wav


def make_clips(seed, sr):
    g = np.random.RandomState(seed)
    t = np.arange(sr) / sr
    clips = []
    for _ in range(N_CLIPS):
        f0 = g.uniform(150, 600)
        wav = sum(a * np.sin(2 * np.pi * f0 * k * t + g.uniform(0, 2 * np.pi)) for k, a in ((1, 1.), (2, .5), (3, .25)))
        env = np.minimum(t / g.uniform(0.02, 0.1), 1.0) * np.exp(-t / g.uniform(0.3, 1.0))
        wav = wav * env + 0.01 * g.randn(sr)
        clips.append(0.9 * wav / np.abs(wav).max())
    return clips


def process_wav(wav, cfg):
    logmel = melspectrogram(wav, sr=cfg["sr"], hop_length=cfg["hop_length"], win_length=cfg["win_length"],
                            n_fft=cfg["n_fft"], n_mels=cfg["n_mels"], fmin=cfg["fmin"], preemph=cfg["preemph"],
                            top_db=cfg["top_db"], ref_db=cfg["ref_db"])
    wav = mu_compress(wav, hop_length=cfg["hop_length"], frame_length=cfg["win_length"], bits=cfg["bits"])
    return wav, logmel


# ---- univoc/dataset.py --------------------------------------------------------------------------------------------

class VocoderDataset(Dataset):
    def __init__(self, items, sample_frames=24, hop_length=200, seed=0):
        self.items = items  # (mu-law wave, log-Mel) pairs, the .wav.npy / .mel.npy files
        self.sample_frames = sample_frames
        self.hop_length = hop_length
        self.random = random.Random(seed)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        audio, mel = self.items[index]

        pos = self.random.randint(0, mel.shape[-1] - self.sample_frames - 1)
        mel = mel[:, pos : pos + self.sample_frames]

        p, q = pos, pos + self.sample_frames
        audio = audio[p * self.hop_length : q * self.hop_length + 1]

        return torch.LongTensor(audio), torch.FloatTensor(mel.T)


# ---- train.py -----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    cfg = CFG
    items = [process_wav(w, cfg["preprocess"]) for w in make_clips(seed, cfg["preprocess"]["sr"])]
    vocoder = Vocoder(**cfg["model"], bug=bug)
    optimizer = optim.Adam(vocoder.parameters(), lr=cfg["train"]["lr"])
    scheduler = optim.lr_scheduler.StepLR(optimizer, cfg["train"]["step_size"], cfg["train"]["gamma"])
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    dataset = VocoderDataset(items, sample_frames=cfg["train"]["sample_frames"],
                             hop_length=cfg["preprocess"]["hop_length"], seed=seed)
    dataloader = DataLoader(dataset, batch_size=cfg["train"]["batch_size"], shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(dataloader), "global_step": 0}

    def train_step():
        batch = next(state["it"], None)
        if batch is None:
            state["it"] = iter(dataloader)
            batch = next(state["it"])
        audio, mels = batch

        optimizer.zero_grad()

        with torch.autocast("cpu", enabled=False):
            if bug == "targets_not_shifted":
                wav = vocoder(audio[:, 1:], mels)  # the input sample is the one to predict
            else:
                wav = vocoder(audio[:, :-1], mels)
            loss = F.cross_entropy(wav.transpose(1, 2), audio[:, 1:])

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()

        state["global_step"] += 1
        return loss.detach()

    audio, mels = next(iter(DataLoader(VocoderDataset(items, cfg["train"]["sample_frames"],
                                                      cfg["preprocess"]["hop_length"], seed=seed + 1),
                                       batch_size=cfg["train"]["batch_size"])))
    batch = ((audio[:, :-1], mels), audio[:, 1:])

    def loss_fn(wav, target):
        return F.cross_entropy(wav.transpose(1, 2), target)

    def eval_fn(model, batch):
        with torch.no_grad():
            return float(loss_fn(model(*batch[0]), batch[1]))

    return Program(name="univoc_vocoder", model=vocoder, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=dataloader)


build = functools.partial(_build)

BUGS = [
    # the network fed audio[:, 1:], the very samples it must predict: it learns to copy its input embedding.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger",
        ("TASK",)),
    # the upsampled [B, C, T] conditioning reshaped to [B, T, C] instead of transposed: each step's Mel features
    # are scrambled across time and channels before the autoregressive GRU.
    Bug("upsampled_reshaped_not_transposed", functools.partial(_build, bug="upsampled_reshaped_not_transposed"),
        "tensor_trace", ("rnn2",)),
    # the conditioning GRU's output detached: the Mel encoder never trains.
    Bug("conditioning_detached", functools.partial(_build, bug="conditioning_detached"), "reachability",
        ("rnn1",)),
]
