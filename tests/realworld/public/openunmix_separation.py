"""Open-Unmix, the music source separation baseline of sigsep (Stöter et al.), trained by its ``scripts/train.py``
on a ``sourcefolder`` dataset: stereo mixtures assembled on the fly from random chunks of a target source and
interferer sources (gain and channel-swap augmentations), an STFT magnitude encoder, a model that standardizes the
bins below the bandwidth with dataset statistics, encodes every frame with fc - BatchNorm - tanh, runs a 3-layer
bidirectional LSTM with a skip connection, decodes with two fc - BatchNorm stages to a non-negative mask (ReLU)
multiplying the mixture's magnitude; MSE against the target's magnitude, Adam with weight decay, ReduceLROnPlateau
on the validation loss.

Source: https://github.com/sigsep/open-unmix-pytorch
Commit: fb672c9584997c2b05e148eeaa65b4c23ed4693b
Files: scripts/train.py, openunmix/model.py, openunmix/transforms.py, openunmix/data.py, openunmix/utils.py
License: MIT (Copyright (c) 2019 Inria (Fabian-Robert Stöter, Antoine Liutkus); full text in
LICENSES/sigsep-open-unmix-pytorch.txt)
Domain: audio, music source separation (spectrogram masking)

Kept as written: ``OpenUnmix`` (the ``input_mean`` / ``input_scale`` parameters from ``-mean`` and ``1 / std``,
``output_scale`` / ``output_mean``, the detached mixture ``mix`` multiplying the ReLU'd output, LSTM dropout 0.4),
``TorchSTFT`` (``center=False``, Hann window as a frozen parameter), ``ComplexNorm`` and ``make_filterbanks``'s
torch path; ``SourceFolderDataset.__getitem__`` (a random track and a random chunk per source through
``random``, the augmentations, the stems summed, the target the last stem; validation re-seeded by index),
``_augment_gain``, ``_augment_channelswap``, ``Compose``; ``bandwidth_to_max_bin``, ``AverageMeter``;
``get_statistics`` (the encoder on each sample without random chunks, downmixed to mono, a running standard
scaler, ``std = max(scale, 1e-4 * max(scale))``); ``train``'s loop body (zero_grad, ``X = encoder(x)``,
``Y_hat = unmix(X)``, ``Y = encoder(y)``, ``mse_loss``, backward, step), ``valid`` (``unmix.eval()``,
``no_grad``), ``Adam(lr=1e-3, weight_decay=1e-5)`` and ``ReduceLROnPlateau(factor=0.3, patience=80,
cooldown=10)`` stepped with the validation loss at each epoch's end; the defaults of ``--target vocals``,
``nb_layers`` 3, ``nb_channels`` 2, bidirectional.

Deviations from the original:
- no audio files: the ``train/`` and ``valid/`` folders of ``vocals``, ``bass`` and ``drums`` are synthetic stereo
  tracks made from ``seed`` and held in memory (``load_info`` / ``load_audio`` become the track's length and a
  slice): "vocals" a gliding harmonic tone with vibrato and syllable envelope, "bass" low sustained sinusoids,
  "drums" decaying noise bursts on a beat; 6 tracks per source and split, 2 s each; ``--source-augmentations gain
  channelswap``;
- sklearn is not here: ``StandardScaler.partial_fit`` is a running sum of the frames (the same population mean and
  standard deviation);
- sizes for 2 CPU cores: sample rate 44100 -> 8000, ``nfft`` 4096 -> 256, ``nhop`` 1024 -> 64, ``bandwidth``
  16000 -> 3000 Hz, ``seq_dur`` 6.0 -> 0.5 s, ``hidden_size`` 512 -> 32, ``batch_size`` 16 -> 8,
  ``nb_train_samples`` 1000 -> 64, ``nb_valid_samples`` 100 -> 8;
- CPU only; tqdm, git, torchaudio's backend, checkpoints, the JSON files and early stopping's bookkeeping are
  dropped;
- one ``train_step`` is one batch of ``train`` (at the end of an epoch ``valid`` and ``scheduler.step(valid_loss)``
  run and the next epoch starts with ``unmix.train()``); ``eval_fn`` is ``valid``, after which the next batch opens a
  new epoch as in the loop; the Program's model is
  ``unmix``, its batch the encoded mixture and target of the first training batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, UP004, B006, UP035, UP006, UP045, RUF059

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from typing import Callable, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn import LSTM, BatchNorm1d, Linear, Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# openunmix/model.py
class OpenUnmix(nn.Module):
    """OpenUnmix Core spectrogram based separation module."""

    def __init__(
        self,
        nb_bins: int = 4096,
        nb_channels: int = 2,
        hidden_size: int = 512,
        nb_layers: int = 3,
        unidirectional: bool = False,
        input_mean: Optional[np.ndarray] = None,
        input_scale: Optional[np.ndarray] = None,
        max_bin: Optional[int] = None,
    ):
        super(OpenUnmix, self).__init__()

        self.nb_output_bins = nb_bins
        if max_bin:
            self.nb_bins = max_bin
        else:
            self.nb_bins = self.nb_output_bins

        self.hidden_size = hidden_size

        self.fc1 = Linear(self.nb_bins * nb_channels, hidden_size, bias=False)

        self.bn1 = BatchNorm1d(hidden_size)

        if unidirectional:
            lstm_hidden_size = hidden_size
        else:
            lstm_hidden_size = hidden_size // 2

        self.lstm = LSTM(
            input_size=hidden_size,
            hidden_size=lstm_hidden_size,
            num_layers=nb_layers,
            bidirectional=not unidirectional,
            batch_first=False,
            dropout=0.4 if nb_layers > 1 else 0,
        )

        fc2_hiddensize = hidden_size * 2
        self.fc2 = Linear(in_features=fc2_hiddensize, out_features=hidden_size, bias=False)

        self.bn2 = BatchNorm1d(hidden_size)

        self.fc3 = Linear(
            in_features=hidden_size,
            out_features=self.nb_output_bins * nb_channels,
            bias=False,
        )

        self.bn3 = BatchNorm1d(self.nb_output_bins * nb_channels)

        if input_mean is not None:
            input_mean = torch.from_numpy(-input_mean[: self.nb_bins]).float()
        else:
            input_mean = torch.zeros(self.nb_bins)

        if input_scale is not None:
            input_scale = torch.from_numpy(1.0 / input_scale[: self.nb_bins]).float()
        else:
            input_scale = torch.ones(self.nb_bins)

        self.input_mean = Parameter(input_mean)
        self.input_scale = Parameter(input_scale)

        self.output_scale = Parameter(torch.ones(self.nb_output_bins).float())
        self.output_mean = Parameter(torch.ones(self.nb_output_bins).float())

    def forward(self, x: Tensor) -> Tensor:
        # permute so that batch is last for lstm
        x = x.permute(3, 0, 1, 2)
        # get current spectrogram shape
        nb_frames, nb_samples, nb_channels, nb_bins = x.data.shape

        mix = x.detach().clone()

        # crop
        x = x[..., : self.nb_bins]
        # shift and scale input to mean=0 std=1 (across all bins)
        x = x + self.input_mean
        x = x * self.input_scale

        # to (nb_frames*nb_samples, nb_channels*nb_bins)
        # and encode to (nb_frames*nb_samples, hidden_size)
        x = self.fc1(x.reshape(-1, nb_channels * self.nb_bins))
        # normalize every instance in a batch
        x = self.bn1(x)
        x = x.reshape(nb_frames, nb_samples, self.hidden_size)
        # squash range ot [-1, 1]
        x = torch.tanh(x)

        # apply 3-layers of stacked LSTM
        lstm_out = self.lstm(x)

        # lstm skip connection
        x = torch.cat([x, lstm_out[0]], -1)

        # first dense stage + batch norm
        x = self.fc2(x.reshape(-1, x.shape[-1]))
        x = self.bn2(x)

        x = F.relu(x)

        # second dense stage + layer norm
        x = self.fc3(x)
        x = self.bn3(x)

        # reshape back to original dim
        x = x.reshape(nb_frames, nb_samples, nb_channels, self.nb_output_bins)

        # apply output scaling
        x *= self.output_scale
        x += self.output_mean

        # since our output is non-negative, we can apply RELU
        x = F.relu(x) * mix
        # permute back to (nb_samples, nb_channels, nb_bins, nb_frames)
        return x.permute(1, 2, 3, 0)


# openunmix/transforms.py
def make_filterbanks(n_fft=4096, n_hop=1024, center=False, sample_rate=44100.0, method="torch"):
    window = nn.Parameter(torch.hann_window(n_fft), requires_grad=False)

    if method == "torch":
        encoder = TorchSTFT(n_fft=n_fft, n_hop=n_hop, window=window, center=center)
        decoder = None  # (port) TorchISTFT is only used at inference
    else:
        raise NotImplementedError
    return encoder, decoder


class TorchSTFT(nn.Module):
    """Multichannel Short-Time-Fourier Forward transform"""

    def __init__(self, n_fft: int = 4096, n_hop: int = 1024, center: bool = False,
                 window: Optional[nn.Parameter] = None):
        super(TorchSTFT, self).__init__()
        if window is None:
            self.window = nn.Parameter(torch.hann_window(n_fft), requires_grad=False)
        else:
            self.window = window
        self.n_fft = n_fft
        self.n_hop = n_hop
        self.center = center

    def forward(self, x: Tensor) -> Tensor:
        shape = x.size()
        nb_samples, nb_channels, nb_timesteps = shape

        # pack batch
        x = x.view(-1, shape[-1])

        complex_stft = torch.stft(
            x,
            n_fft=self.n_fft,
            hop_length=self.n_hop,
            window=self.window,
            center=self.center,
            normalized=False,
            onesided=True,
            pad_mode="reflect",
            return_complex=True,
        )
        stft_f = torch.view_as_real(complex_stft)
        # unpack batch
        stft_f = stft_f.view(shape[:-1] + stft_f.shape[-3:])
        return stft_f


class ComplexNorm(nn.Module):
    r"""Compute the norm of complex tensor input."""

    def __init__(self, mono: bool = False):
        super(ComplexNorm, self).__init__()
        self.mono = mono

    def forward(self, spec: Tensor) -> Tensor:
        # take the magnitude

        spec = torch.abs(torch.view_as_complex(spec))

        # downmix in the mag domain to preserve energy
        if self.mono:
            spec = torch.mean(spec, 1, keepdim=True)

        return spec


# openunmix/utils.py
def bandwidth_to_max_bin(rate: float, n_fft: int, bandwidth: float) -> np.ndarray:
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1, endpoint=True)

    return np.max(np.where(freqs <= bandwidth)[0]) + 1


class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


# openunmix/data.py
class Compose(object):
    """Composes several augmentation transforms."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, audio: torch.Tensor) -> torch.Tensor:
        for t in self.transforms:
            audio = t(audio)
        return audio


def _augment_gain(audio: torch.Tensor, low: float = 0.25, high: float = 1.25) -> torch.Tensor:
    """Applies a random gain between `low` and `high`"""
    g = low + torch.rand(1) * (high - low)
    return audio * g


def _augment_channelswap(audio: torch.Tensor) -> torch.Tensor:
    """Swap channels of stereo signals with a probability of p=0.5"""
    if audio.shape[0] == 2 and torch.tensor(1.0).uniform_() < 0.5:
        return torch.flip(audio, [0])
    else:
        return audio


def aug_from_str(list_of_function_names: list):
    if list_of_function_names:
        return Compose([globals()["_augment_" + aug] for aug in list_of_function_names])
    else:
        return lambda audio: audio


class SourceFolderDataset(torch.utils.data.Dataset):
    def __init__(
        self,
        root: dict,
        split: str = "train",
        target_dir: str = "vocals",
        interferer_dirs: List[str] = ["bass", "drums"],
        ext: str = ".wav",
        nb_samples: int = 1000,
        seq_duration: Optional[float] = None,
        random_chunks: bool = True,
        sample_rate: float = 44100.0,
        source_augmentations: Optional[Callable] = lambda audio: audio,
        seed: int = 42,
    ) -> None:
        self.root = root  # (port) {split: {source: [stereo tracks]}} in memory
        self.split = split
        self.sample_rate = sample_rate
        self.seq_duration = seq_duration
        self.ext = ext
        self.random_chunks = random_chunks
        self.source_augmentations = source_augmentations
        self.target_dir = target_dir
        self.interferer_dirs = interferer_dirs
        self.source_folders = self.interferer_dirs + [self.target_dir]
        self.source_tracks = self.get_tracks()
        self.nb_samples = nb_samples
        self.seed = seed
        random.seed(self.seed)

    def __getitem__(self, index):
        # For each source draw a random sound and mix them together
        audio_sources = []
        for source in self.source_folders:
            if self.split == "valid":
                # provide deterministic behaviour for validation so that
                # each epoch, the same tracks are yielded
                random.seed(index)

            # select a random track for each source
            source_path = random.choice(self.source_tracks[source])
            duration = source_path.shape[-1] / self.sample_rate  # (port) load_info(source_path)["duration"]
            if self.random_chunks:
                # for each source, select a random chunk
                start = random.uniform(0, duration - self.seq_duration)
            else:
                # use center segment
                start = max(duration // 2 - self.seq_duration // 2, 0)

            # (port) load_audio(source_path, start=start, dur=self.seq_duration)
            offset = int(np.floor(start * self.sample_rate))
            num_frames = int(np.floor(self.seq_duration * self.sample_rate)) if self.seq_duration else None
            audio = source_path[:, offset:offset + num_frames] if num_frames else source_path[:, offset:]
            audio = self.source_augmentations(audio)
            audio_sources.append(audio)

        stems = torch.stack(audio_sources)
        # # apply linear mix over source index=0
        x = stems.sum(0)
        # target is always the last element in the list
        y = stems[-1]
        return x, y

    def __len__(self):
        return self.nb_samples

    def get_tracks(self):
        """Loads input and output tracks"""
        p = self.root[self.split]
        source_tracks = {}
        for source_folder in self.source_folders:
            tracks = []
            for source_track_path in p[source_folder]:
                if self.seq_duration is not None:
                    if source_track_path.shape[-1] / self.sample_rate > self.seq_duration:
                        tracks.append(source_track_path)
                else:
                    tracks.append(source_track_path)
            source_tracks[source_folder] = tracks
        return source_tracks


# (port) synthetic source folders
def synthetic_folders(rng, sr, n_tracks=6, dur=2.0):
    t = np.arange(int(sr * dur)) / sr
    out = {}
    for split in ("train", "valid"):
        folders = {"vocals": [], "bass": [], "drums": []}
        for _ in range(n_tracks):
            f0 = rng.uniform(220, 500) * np.exp(rng.uniform(-0.3, 0.3) * t / dur)
            phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.01 * np.sin(2 * np.pi * 5.5 * t))) / sr
            env = np.clip(np.sin(2 * np.pi * rng.uniform(1.5, 3) * t + rng.uniform(0, 6.3)), 0, None) ** 0.5
            voc = env * sum(a * np.sin((k + 1) * phase) for k, a in enumerate(rng.dirichlet(np.ones(5)) * 0.5))
            fb = rng.uniform(40, 110)
            bass = 0.4 * np.sin(2 * np.pi * fb * t + rng.uniform(0, 6.3)) + 0.1 * np.sin(4 * np.pi * fb * t)
            drums = np.zeros_like(t)
            beat = rng.uniform(0.2, 0.4)
            for c in np.arange(rng.uniform(0, beat), dur, beat):
                drums += np.exp(-np.clip(t - c, 0, None) * 40) * (t >= c) * rng.standard_normal(len(t)) * 0.5
            for name, sig in (("vocals", voc), ("bass", bass), ("drums", drums)):
                pan = rng.uniform(0.3, 0.7)
                st = np.stack([sig * pan, sig * (1 - pan)]).astype(np.float32)
                folders[name].append(torch.from_numpy(st))
        out[split] = folders
    return out


class _Args:
    pass


def get_statistics(args, encoder, dataset):
    encoder = copy.deepcopy(encoder).to("cpu")
    # (port) sklearn.preprocessing.StandardScaler's partial_fit as running sums
    n, s1, s2 = 0, 0.0, 0.0

    dataset_scaler = copy.deepcopy(dataset)
    if isinstance(dataset_scaler, SourceFolderDataset):
        dataset_scaler.random_chunks = False
    else:
        dataset_scaler.random_chunks = False
        dataset_scaler.seq_duration = None

    dataset_scaler.samples_per_track = 1
    dataset_scaler.augmentations = None
    dataset_scaler.random_track_mix = False
    dataset_scaler.random_interferer_mix = False

    for ind in range(len(dataset_scaler)):
        x, y = dataset_scaler[ind]
        # downmix to mono channel
        X = encoder(x[None, ...]).mean(1, keepdim=False).permute(0, 2, 1)

        X = np.squeeze(X.numpy(), 0).astype(np.float64)
        n, s1, s2 = n + X.shape[0], s1 + X.sum(0), s2 + (X ** 2).sum(0)

    mean_ = s1 / n
    scale_ = np.sqrt(np.maximum(s2 / n - mean_ ** 2, 0))
    scale_[scale_ == 0] = 1.0  # as StandardScaler's _handle_zeros_in_scale
    # set inital input scaler values
    std = np.maximum(scale_, 1e-4 * np.max(scale_))
    return mean_, std


def _build(seed, bug=None):
    args = _Args()
    args.target, args.batch_size, args.lr, args.weight_decay = "vocals", 8, 0.001, 0.00001  # (port) batch 16
    args.lr_decay_patience, args.lr_decay_gamma, args.seq_dur = 80, 0.3, 0.5  # (port) seq_dur 6.0
    args.nfft, args.nhop, args.hidden_size, args.bandwidth = 256, 64, 32, 3000  # (port) 4096, 1024, 512, 16000
    args.nb_channels, args.unidirectional, args.quiet = 2, False, True
    sample_rate = 8000  # (port) 44100

    torch.manual_seed(seed)
    random.seed(seed)
    device = torch.device("cpu")

    root = synthetic_folders(np.random.default_rng(seed), sample_rate)
    dataset_kwargs = {"root": root, "interferer_dirs": ["bass", "drums"], "target_dir": "vocals", "ext": ".wav"}
    source_augmentations = aug_from_str(["gain", "channelswap"])
    train_dataset = SourceFolderDataset(split="train", source_augmentations=source_augmentations,
                                        random_chunks=True, nb_samples=64, seq_duration=args.seq_dur,
                                        sample_rate=sample_rate, seed=seed, **dataset_kwargs)
    valid_dataset = SourceFolderDataset(split="valid", random_chunks=True, seq_duration=args.seq_dur,
                                        nb_samples=8, sample_rate=sample_rate, seed=seed, **dataset_kwargs)

    train_sampler = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True,
                                                generator=torch.Generator().manual_seed(seed))
    valid_sampler = torch.utils.data.DataLoader(valid_dataset, batch_size=1)

    stft, _ = make_filterbanks(n_fft=args.nfft, n_hop=args.nhop, sample_rate=train_dataset.sample_rate)
    encoder = torch.nn.Sequential(stft, ComplexNorm(mono=args.nb_channels == 1)).to(device)

    scaler_mean, scaler_std = get_statistics(args, encoder, train_dataset)
    random.seed(seed)

    max_bin = bandwidth_to_max_bin(train_dataset.sample_rate, args.nfft, args.bandwidth)

    unmix = OpenUnmix(
        input_mean=scaler_mean,
        input_scale=scaler_std,
        nb_bins=args.nfft // 2 + 1,
        nb_channels=args.nb_channels,
        hidden_size=args.hidden_size,
        max_bin=max_bin,
        unidirectional=args.unidirectional
    ).to(device)

    optimizer = torch.optim.Adam(unmix.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer,
        factor=args.lr_decay_gamma,
        patience=args.lr_decay_patience,
        cooldown=10,
    )

    def valid(unmix, _batch=None):
        losses = AverageMeter()
        if bug != "valid_in_train_mode":
            unmix.eval()
        with torch.no_grad():
            for x, y in valid_sampler:
                x, y = x.to(device), y.to(device)
                X = encoder(x)
                Y_hat = unmix(X)
                Y = encoder(y)
                loss = torch.nn.functional.mse_loss(Y_hat, Y)
                losses.update(loss.item(), Y.size(1))
            return losses.avg

    state = {"it": None, "losses": None}

    def train_step():
        # one batch of train(args, unmix, encoder, device, train_sampler, optimizer)
        if state["it"] is None:
            state["losses"] = AverageMeter()
            unmix.train()
            state["it"] = iter(train_sampler)
        try:
            x, y = next(state["it"])
        except StopIteration:
            valid_loss = valid(unmix)
            scheduler.step(valid_loss)
            state["it"] = None
            return train_step()
        x, y = x.to(device), y.to(device)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        X = encoder(x)
        Y_hat = unmix(X)
        if bug == "target_is_mixture":
            Y = encoder(x)
        else:
            Y = encoder(y)
        loss = torch.nn.functional.mse_loss(Y_hat, Y)
        loss.backward()
        optimizer.step()
        state["losses"].update(loss.item(), Y.size(1))
        return loss.item()

    def eval_fn(unmix, _batch=None):
        valid_loss = valid(unmix)
        state["it"] = None  # (port) as after valid() in the epoch loop: the next batch opens an epoch (unmix.train())
        return valid_loss

    rs = random.getstate()
    x0, y0 = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size)))
    random.setstate(rs)
    with torch.no_grad():
        X0, Y0 = encoder(x0), encoder(x0 if bug == "target_is_mixture" else y0)
    return Program(name="openunmix_separation", model=unmix, batch=(X0, Y0), loss_fn=F.mse_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_sampler)


build = functools.partial(_build, bug=None)

BUGS = [
    # the target's magnitude taken from the mixture, encoder(x) for encoder(y) (classic copy slip): the model learns
    # the identity mask and separates nothing.
    Bug("target_is_mixture", functools.partial(_build, bug="target_is_mixture"), "learning_ledger", ("TASK",)),
    # unmix.eval() left out of valid (classic): BatchNorm on the validation batch's statistics and the LSTM's
    # dropout on while the validation loss drives the scheduler.
    Bug("valid_in_train_mode", functools.partial(_build, bug="valid_in_train_mode"), "six_claims", ("EVALUATION",)),
    # optimizer.zero_grad() left out of the loop (classic): gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
