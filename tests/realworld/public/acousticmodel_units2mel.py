"""The soft-speech-unit acoustic model of bshall/acoustic-model trained by its ``train.py``: speech units (here the
discrete HuBERT units, ``--discrete``: an embedding of 100 ids plus a padding id) pass a dropout pre-net and a conv
stack with instance norm and a 2x transposed-conv upsampling (one unit per two Mel frames); an autoregressive
decoder (pre-net on the previous Mel frame, three residual LSTMs, a linear projection) predicts the next log-Mel
frame under teacher forcing; L1 loss summed per utterance and divided by ``n_mels * mels_lengths``; AdamW(4e-4,
betas (0.8, 0.99), weight decay 1e-5); validation L1 under ``eval()`` and ``no_grad`` every ``VALIDATION_INTERVAL``
steps, then ``train()`` again.

Source: https://github.com/bshall/acoustic-model
Commit: f737482724b0bb50e3183514668743dee20088ab
Files: train.py, acoustic/model.py, acoustic/dataset.py, acoustic/utils.py (Metric)
License: MIT (Copyright (c) 2021 Benjamin van Niekerk)
Domain: audio and speech, voice conversion (speech units -> Mel spectrogram)

Deviations from the original:
- sizes: the widths written into ``model.py`` become module constants: unit embedding / pre-net 256 -> 32, conv
  channels 512 -> 48, LSTM hidden 768 -> 64, Mel bins 128 -> 16, decoder pre-net 256 -> 32 (kernel sizes, the
  upsampling, dropout 0.5 and the residual wiring kept); BATCH_SIZE 32 -> 8, VALIDATION_INTERVAL 1000 -> 10;
  lr, betas and weight decay kept;
- data: LibriSpeech Mels and HuBERT units on disk are replaced by synthetic utterances made from ``seed``: 5 to 9
  unit ids each, every id with its own random 16-bin log-Mel template, the two frames of a unit its template and
  the midpoint towards the next unit's, plus a little noise; ``MelDataset.__getitem__`` (the length cut, the zero
  frame padded in front, ``long`` units) and ``pad_collate`` are copied and read these arrays instead of ``.npy``
  files; 48 training and 8 validation utterances;
- no DDP / process group (one process), no tensorboard writer, logging, checkpoints or spectrogram plots; the
  DataLoader (sampler, ``drop_last``) is a shuffled pass per epoch in the same process; the validation loader's
  stray ``discrete=`` argument (a ``TypeError`` in ``DataLoader``) is left out and its dataset built with
  ``discrete=True`` so the units are ids;
- one ``train_step`` is one batch of the epoch loop (``zero_grad``, teacher-forced forward, the loss, backward,
  ``step``, and the validation block every VALIDATION_INTERVAL steps); ``eval_fn`` is the validation L1 of a given
  batch under ``eval()`` and ``no_grad``.
"""

# ruff: noqa: PLR0402, RUF059, PLR1730  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils.rnn import pad_sequence

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

UNIT, CONV, HIDDEN, N_MELS, DEC_PRE = 32, 48, 64, 16, 32   # 256, 512, 768, 128, 256 in the original
N_UNITS = 100

BATCH_SIZE = 8
LEARNING_RATE = 4e-4
BETAS = (0.8, 0.99)
WEIGHT_DECAY = 1e-5
VALIDATION_INTERVAL = 10


# ---- acoustic/model.py ----------------------------------------------------------------------------------------

class AcousticModel(nn.Module):
    def __init__(self, discrete: bool = False, upsample: bool = True, bug=None):
        super().__init__()
        self.encoder = Encoder(discrete, upsample, bug=bug)
        self.decoder = Decoder()

    def forward(self, x: torch.Tensor, mels: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x)
        return self.decoder(x, mels)


class Encoder(nn.Module):
    def __init__(self, discrete: bool = False, upsample: bool = True, bug=None):
        super().__init__()
        self.bug = bug
        self.embedding = nn.Embedding(N_UNITS + 1, UNIT) if discrete else None
        self.prenet = PreNet(UNIT, UNIT, UNIT)
        self.convs = nn.Sequential(
            nn.Conv1d(UNIT, CONV, 5, 1, 2),
            nn.ReLU(),
            nn.InstanceNorm1d(CONV),
            nn.ConvTranspose1d(CONV, CONV, 4, 2, 1) if upsample else nn.Identity(),
            nn.Conv1d(CONV, CONV, 5, 1, 2),
            nn.ReLU(),
            nn.InstanceNorm1d(CONV),
            nn.Conv1d(CONV, CONV, 5, 1, 2),
            nn.ReLU(),
            nn.InstanceNorm1d(CONV),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        x = self.prenet(x)
        if self.bug == "units_reshaped_not_transposed":
            x = self.convs(x.reshape(x.size(0), x.size(2), x.size(1)))
        else:
            x = self.convs(x.transpose(1, 2))
        return x.transpose(1, 2)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.prenet = PreNet(N_MELS, DEC_PRE, DEC_PRE)
        self.lstm1 = nn.LSTM(CONV + DEC_PRE, HIDDEN, batch_first=True)
        self.lstm2 = nn.LSTM(HIDDEN, HIDDEN, batch_first=True)
        self.lstm3 = nn.LSTM(HIDDEN, HIDDEN, batch_first=True)
        self.proj = nn.Linear(HIDDEN, N_MELS, bias=False)

    def forward(self, x: torch.Tensor, mels: torch.Tensor) -> torch.Tensor:
        mels = self.prenet(mels)
        x, _ = self.lstm1(torch.cat((x, mels), dim=-1))
        res = x
        x, _ = self.lstm2(x)
        x = res + x
        res = x
        x, _ = self.lstm3(x)
        x = res + x
        return self.proj(x)


class PreNet(nn.Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        output_size: int,
        dropout: float = 0.5,
    ):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_size, output_size),
            nn.ReLU(),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# ---- acoustic/dataset.py --------------------------------------------------------------------------------------

class MelDataset:
    def __init__(self, utterances, discrete: bool = False):
        self.discrete = discrete
        self.metadata = utterances  # (mel [frames, n_mels], units [n]) pairs instead of .npy paths

    def __len__(self):
        return len(self.metadata)

    def __getitem__(self, index):
        mel, units = self.metadata[index]

        length = 2 * units.shape[0]

        mel = torch.from_numpy(mel[:length, :])
        mel = F.pad(mel, (0, 0, 1, 0))
        units = torch.from_numpy(units)
        if self.discrete:
            units = units.long()
        return mel, units

    def pad_collate(self, batch):
        mels, units = zip(*batch)

        mels, units = list(mels), list(units)

        mels_lengths = torch.tensor([x.size(0) - 1 for x in mels])
        units_lengths = torch.tensor([x.size(0) for x in units])

        mels = pad_sequence(mels, batch_first=True)
        units = pad_sequence(
            units, batch_first=True, padding_value=100 if self.discrete else 0
        )

        return mels, mels_lengths, units, units_lengths


# ---- acoustic/utils.py ----------------------------------------------------------------------------------------

class Metric:
    def __init__(self):
        self.steps = 0
        self.value = 0

    def update(self, value):
        self.steps += 1
        self.value += (value - self.value) / self.steps
        return self.value

    def reset(self):
        self.steps = 0
        self.value = 0


def make_utterances(seed, n):
    g = np.random.RandomState(seed)
    templates = g.randn(N_UNITS, N_MELS).astype(np.float32)
    out = []
    for _ in range(n):
        units = g.randint(0, N_UNITS, size=g.randint(5, 10))
        frames = []
        for t, u in enumerate(units):
            nxt = units[t + 1] if t + 1 < len(units) else u
            frames += [templates[u], 0.5 * (templates[u] + templates[nxt])]
        mel = np.stack(frames) + 0.05 * g.randn(len(frames), N_MELS).astype(np.float32)
        out.append((mel.astype(np.float32), units.astype(np.int64)))
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    utterances = make_utterances(seed, 56)
    acoustic = AcousticModel(discrete=True, bug=bug)

    optimizer = optim.AdamW(
        acoustic.parameters(),
        lr=LEARNING_RATE,
        betas=BETAS,
        weight_decay=WEIGHT_DECAY,
    )

    train_dataset = MelDataset(utterances[:48], discrete=True)
    validation_dataset = MelDataset(utterances[48:], discrete=True)
    order_rng = np.random.RandomState(seed)

    def train_batches():
        while True:
            acoustic.train()
            order = order_rng.permutation(len(train_dataset))
            for i in range(0, len(order) - BATCH_SIZE + 1, BATCH_SIZE):  # drop_last=True
                yield train_dataset.pad_collate([train_dataset[j] for j in order[i:i + BATCH_SIZE]])

    loader = train_batches()
    state = {"global_step": 0, "best_loss": float("inf")}
    validation_loss = Metric()

    def train_step():
        mels, mels_lengths, units, units_lengths = next(loader)

        optimizer.zero_grad()

        if bug == "mels_not_shifted":
            mels_ = acoustic(units, mels[:, 1:, :])
        else:
            mels_ = acoustic(units, mels[:, :-1, :])

        loss = F.l1_loss(mels_, mels[:, 1:, :], reduction="none")
        loss = torch.sum(loss, dim=(1, 2)) / (mels_.size(-1) * mels_lengths)
        loss = torch.mean(loss)

        loss.backward()
        optimizer.step()

        state["global_step"] += 1
        out = loss.detach()

        if state["global_step"] % VALIDATION_INTERVAL == 0:
            acoustic.eval()
            validation_loss.reset()

            for i in range(len(validation_dataset)):
                mels, units = validation_dataset[i]
                mels, units = mels.unsqueeze(0), units.unsqueeze(0)

                with torch.no_grad():
                    mels_ = acoustic(units, mels[:, :-1, :])
                    loss = F.l1_loss(mels_, mels[:, 1:, :])

                validation_loss.update(loss.item())

            if bug != "train_mode_not_restored":
                acoustic.train()

            if state["best_loss"] > validation_loss.value:
                state["best_loss"] = validation_loss.value
        return out

    mels, mels_lengths, units, units_lengths = train_dataset.pad_collate([train_dataset[j] for j in range(BATCH_SIZE)])
    if bug == "mels_not_shifted":
        batch = ((units, mels[:, 1:, :]), (mels[:, 1:, :], mels_lengths))
    else:
        batch = ((units, mels[:, :-1, :]), (mels[:, 1:, :], mels_lengths))

    def loss_fn(mels_, target):
        target_mels, mels_lengths = target
        loss = F.l1_loss(mels_, target_mels, reduction="none")
        loss = torch.sum(loss, dim=(1, 2)) / (mels_.size(-1) * mels_lengths)
        return torch.mean(loss)

    def eval_fn(model, batch):
        (units, mels_in), (target_mels, _) = batch
        was = model.training
        model.eval()
        with torch.no_grad():
            value = float(F.l1_loss(model(units, mels_in), target_mels))
        model.train(was)
        return value

    return Program(name="acousticmodel_units2mel", model=acoustic, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # teacher forcing fed mels[:, 1:] (the frames the decoder must predict) instead of mels[:, :-1]: the decoder's
    # input at every position is its own target.
    Bug("mels_not_shifted", functools.partial(_build, bug="mels_not_shifted"), "learning_ledger", ("TASK",)),
    # the embedded units reshaped to [batch, channels, time] instead of transposed: the conv stack sees the unit
    # features scrambled across time and channels.
    Bug("units_reshaped_not_transposed", functools.partial(_build, bug="units_reshaped_not_transposed"),
        "tensor_trace", ("encoder",)),
    # `acoustic.train()` after the validation block dropped: from the first validation on, training runs with the
    # pre-nets' dropout off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]
