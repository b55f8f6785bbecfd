"""Wake-word (keyword spotting) LSTM trained by the repository's ``wakeword/neuralnet/train.py``: MFCC frames
(40 coefficients) with SpecAugment, padded and laid out sequence-first ``[seq_len, batch, feature]`` by
``collate_fn`` (with ``RandomCut``), ``LSTMWakeWord`` (LayerNorm over the features, a one-layer LSTM from a zero
state, a linear classifier on the last hidden state ``hn``), ``BCEWithLogitsLoss`` on the flattened logit, AdamW
over ``model.parameters()``, the ``train`` loop body (zero_grad, forward, loss, backward, step).

Source: https://github.com/LearnedVector/A-Hackers-AI-Voice-Assistant
Commit: d07e917eafd0fad60e29f4256e41bbd053b92955
Files: VoiceAssistant/wakeword/neuralnet/train.py, model.py, dataset.py
License: MIT (Copyright (c) 2020 Michael Nguyen; full text in LICENSES/LearnedVector-A-Hackers-AI-Voice-Assistant.txt)
Domain: audio, keyword spotting (binary wake word vs. other audio)

Deviations from the original:
- sizes: hidden_size 128 -> 32, batch_size 32 -> 16, clips of 1 s at 8 kHz -> 0.5 s (num_classes 1, feature_size
  40, num_layers 1, dropout 0.1, unidirectional, lr 1e-4 -> 3e-3 so the loss falls within the 30 steps of the
  self-check);
- data: the wake-word recordings (json lists of wav files) are replaced by synthetic 8 kHz waveforms made from
  ``seed``: a "wake word" clip holds a rising two-tone chirp at a random offset over noise, an "other" clip a
  random steady tone over noise; label 1 for the wake word. ``torchaudio.load``/``Resample`` and pandas are not
  used (the clips are made at 8 kHz);
- the MFCC featurizer calls ``sonopy.mfcc_spec`` (another package): it is written out in numpy after sonopy
  (frames of 400 samples, stride 200, power spectrum of a 400-point rfft, 40 triangular mel filters, log, DCT-II
  with ortho norm, first coefficient replaced by the log frame energy);
- torchaudio is not available: SpecAugment's ``FrequencyMasking``/``TimeMasking`` (zero one random band of at
  most 2 coefficients / 4 frames of the ``[1, coeff, time]`` feature, as torchaudio's masking does) are written out
  in plain torch; ``SpecAugment``'s policies and ``RandomCut`` are copied;
- ``device`` is cpu; the per-epoch test, report printing, ReduceLROnPlateau (stepped per epoch on the train
  accuracy) and checkpointing are left out; one ``train_step`` is one batch of the ``train`` loop body over a
  shuffled DataLoader restarted at each epoch's end; ``eval_fn`` is ``test``'s accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SAMPLE_RATE = 8000
CLIP = 4000
BATCH_SIZE = 16
LR = 3e-3
HIDDEN_SIZE = 32


# ---- sonopy's mfcc_spec, written out in numpy ------------------------------------------------------------------

def _hertz_to_mels(f):
    return 1127. * np.log(1. + f / 700.)


def _mel_to_hertz(mel):
    return 700. * (np.exp(mel / 1127.) - 1.)


def _filterbanks(sample_rate, num_filt, fft_len):
    grid_mels = np.linspace(_hertz_to_mels(0), _hertz_to_mels(sample_rate / 2), num_filt + 2, True)
    grid_hertz = _mel_to_hertz(grid_mels)
    grid_indices = (grid_hertz * fft_len / sample_rate).astype(int)
    banks = np.zeros([num_filt, fft_len])
    for i, (left, middle, right) in enumerate(zip(grid_indices, grid_indices[1:], grid_indices[2:])):
        banks[i, left:middle] = np.linspace(0., 1., middle - left, False)
        banks[i, middle:right] = np.linspace(1., 0., right - middle, False)
    return banks


def mfcc_spec(audio, sample_rate, window_stride=(400, 200), fft_size=400, num_filt=40, num_coeffs=40):
    window, stride = window_stride
    n = 1 + (len(audio) - window) // stride
    frames = np.stack([audio[i * stride:i * stride + window] for i in range(n)])
    fft = np.fft.rfft(frames, n=fft_size)
    powers = (fft.real ** 2 + fft.imag ** 2) / fft_size
    filters = _filterbanks(sample_rate, num_filt, powers.shape[1])
    mels = np.log(np.maximum(powers @ filters.T, 1e-10))
    k = np.arange(num_filt)
    dct = np.cos(np.pi / num_filt * (k[None, :] + 0.5) * k[:, None]) * np.sqrt(2. / num_filt)
    dct[0] /= np.sqrt(2.)
    mfccs = (mels @ dct.T)[:, :num_coeffs]
    mfccs[:, 0] = np.log(np.maximum(np.sum(powers, 1), 1e-10))
    return mfccs


# ---- wakeword/neuralnet/dataset.py -------------------------------------------------------------------------------

class MFCC(nn.Module):

    def __init__(self, sample_rate, fft_size=400, window_stride=(400, 200), num_filt=40, num_coeffs=40):
        super(MFCC, self).__init__()
        self.sample_rate = sample_rate
        self.window_stride = window_stride
        self.fft_size = fft_size
        self.num_filt = num_filt
        self.num_coeffs = num_coeffs
        self.mfcc = lambda x: mfcc_spec(
            x, self.sample_rate, self.window_stride,
            self.fft_size, self.num_filt, self.num_coeffs
        )

    def forward(self, x):
        return torch.Tensor(self.mfcc(x.squeeze(0).numpy())).transpose(0, 1).unsqueeze(0)


def get_featurizer(sample_rate):
    return MFCC(sample_rate=sample_rate)


class RandomCut(nn.Module):
    """Augmentation technique that randomly cuts start or end of audio"""

    def __init__(self, max_cut=10):
        super(RandomCut, self).__init__()
        self.max_cut = max_cut

    def forward(self, x):
        """Randomly cuts from start or end of batch"""
        side = torch.randint(0, 1, (1,))
        cut = torch.randint(1, self.max_cut, (1,))
        if side == 0:
            return x[:-cut,:,:]
        elif side == 1:
            return x[cut:,:,:]


class _AxisMasking(nn.Module):
    """torchaudio.transforms.FrequencyMasking / TimeMasking (one band, zeros) written out in plain torch."""

    def __init__(self, mask_param, axis):
        super().__init__()
        self.mask_param = mask_param
        self.axis = axis

    def forward(self, specgram):
        size = specgram.shape[self.axis]
        value = torch.rand(1) * self.mask_param
        min_value = torch.rand(1) * (size - value)
        start, end = int(min_value), int(min_value + value)
        idx = torch.arange(size)
        mask = (idx >= start) & (idx < end)
        shape = [1] * specgram.dim()
        shape[self.axis] = size
        return specgram.masked_fill(mask.view(shape), 0.)


def FrequencyMasking(freq_mask_param):
    return _AxisMasking(freq_mask_param, -2)


def TimeMasking(time_mask_param):
    return _AxisMasking(time_mask_param, -1)


class SpecAugment(nn.Module):
    """Augmentation technique to add masking on the time or frequency domain"""

    def __init__(self, rate, policy=3, freq_mask=2, time_mask=4):
        super(SpecAugment, self).__init__()

        self.rate = rate

        self.specaug = nn.Sequential(
            FrequencyMasking(freq_mask_param=freq_mask),
            TimeMasking(time_mask_param=time_mask)
        )

        self.specaug2 = nn.Sequential(
            FrequencyMasking(freq_mask_param=freq_mask),
            TimeMasking(time_mask_param=time_mask),
            FrequencyMasking(freq_mask_param=freq_mask),
            TimeMasking(time_mask_param=time_mask)
        )

        policies = { 1: self.policy1, 2: self.policy2, 3: self.policy3 }
        self._forward = policies[policy]

    def forward(self, x):
        return self._forward(x)

    def policy1(self, x):
        probability = torch.rand(1, 1).item()
        if self.rate > probability:
            return  self.specaug(x)
        return x

    def policy2(self, x):
        probability = torch.rand(1, 1).item()
        if self.rate > probability:
            return  self.specaug2(x)
        return x

    def policy3(self, x):
        probability = torch.rand(1, 1).item()
        if probability > 0.5:
            return self.policy1(x)
        return self.policy2(x)


class WakeWordData(torch.utils.data.Dataset):
    """Load and process wakeword data (synthetic clips in place of the json-listed wav files)"""

    def __init__(self, clips, labels, sample_rate=8000, valid=False):
        self.sr = sample_rate
        self.clips, self.labels = clips, labels
        if valid:
            self.audio_transform = get_featurizer(sample_rate)
        else:
            self.audio_transform = nn.Sequential(
                get_featurizer(sample_rate),
                SpecAugment(rate=0.5)
            )

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        if torch.is_tensor(idx):
            idx = idx.item()
        waveform = self.clips[idx]
        mfcc = self.audio_transform(waveform)
        label = self.labels[idx]
        return mfcc, label


rand_cut = RandomCut(max_cut=10)

def collate_fn(data):
    """Batch and pad wakeword data"""
    mfccs = []
    labels = []
    for d in data:
        mfcc, label = d
        mfccs.append(mfcc.squeeze(0).transpose(0, 1))
        labels.append(label)

    # pad mfccs to ensure all tensors are same size in the time dim
    mfccs = nn.utils.rnn.pad_sequence(mfccs, batch_first=True)  # batch, seq_len, feature
    mfccs = mfccs.transpose(0, 1) # seq_len, batch, feature
    mfccs = rand_cut(mfccs)
    labels = torch.Tensor(labels)
    return mfccs, labels


# ---- wakeword/neuralnet/model.py ---------------------------------------------------------------------------------

class LSTMWakeWord(nn.Module):

    def __init__(self, num_classes, feature_size, hidden_size,
                num_layers, dropout, bidirectional, device='cpu'):
        super(LSTMWakeWord, self).__init__()
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.directions = 2 if bidirectional else 1
        self.device = device
        self.layernorm = nn.LayerNorm(feature_size)
        self.lstm = nn.LSTM(input_size=feature_size, hidden_size=hidden_size,
                            num_layers=num_layers, dropout=dropout,
                            bidirectional=bidirectional)
        self.classifier = nn.Linear(hidden_size*self.directions, num_classes)

    def _init_hidden(self, batch_size):
        n, d, hs = self.num_layers, self.directions, self.hidden_size
        return (torch.zeros(n*d, batch_size, hs).to(self.device),
                torch.zeros(n*d, batch_size, hs).to(self.device))

    def forward(self, x):
        # x.shape => seq_len, batch, feature
        x = self.layernorm(x)
        hidden = self._init_hidden(x.size()[1])
        out, (hn, cn) = self.lstm(x, hidden)
        out = self.classifier(hn)
        return out


# ---- wakeword/neuralnet/train.py ---------------------------------------------------------------------------------

def binary_accuracy(preds, y):
    #round predictions to the closest integer
    rounded_preds = torch.round(preds)
    acc = rounded_preds.eq(y.view_as(rounded_preds)).sum().item() / len(y)
    return acc


def make_clips(rng, n):
    """Wake word: a rising two-tone chirp (0.2 s) at a random offset; other: a steady random tone; both over noise."""
    t = np.arange(CLIP) / SAMPLE_RATE
    clips, labels = [], []
    for _ in range(n):
        label = int(rng.integers(2))
        x = 0.1 * rng.standard_normal(CLIP)
        if label:
            start = int(rng.integers(0, CLIP - 1600))
            seg = np.arange(1600) / SAMPLE_RATE
            x[start:start + 1600] += np.sin(2 * np.pi * (500 + 2500 * seg) * seg)
        else:
            x += 0.5 * np.sin(2 * np.pi * rng.uniform(300, 3000) * t)
        clips.append(torch.tensor(x, dtype=torch.float32).unsqueeze(0))
        labels.append(label)
    return clips, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device('cpu')

    clips, labels = make_clips(rng, 128)
    train_dataset = WakeWordData(clips, labels, sample_rate=SAMPLE_RATE, valid=False)
    train_loader = data.DataLoader(dataset=train_dataset,
                                   batch_size=BATCH_SIZE,
                                   shuffle=True,
                                   collate_fn=collate_fn)

    model_params = {
        "num_classes": 1, "feature_size": 40, "hidden_size": HIDDEN_SIZE,
        "num_layers": 1, "dropout" :0.1, "bidirectional": False
    }
    model = LSTMWakeWord(**model_params, device=device)
    model = model.to(device)
    if bug == "lstm_left_out_of_optimizer":
        optimizer = optim.AdamW(model.classifier.parameters(), lr=LR)
    else:
        optimizer = optim.AdamW(model.parameters(), lr=LR)
    loss_fn = nn.BCEWithLogitsLoss()

    state = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(train_loader)
            return next(state["it"])

    valid_dataset = WakeWordData(clips, labels, sample_rate=SAMPLE_RATE, valid=True)
    first = collate_fn([valid_dataset[i] for i in range(BATCH_SIZE)])

    def user_loss(output, label):
        if bug == "sigmoid_before_bce_with_logits":
            # the commented `pred = F.sigmoid(output)` put back in front of the with-logits loss
            return loss_fn(torch.flatten(torch.sigmoid(output)), label)
        return loss_fn(torch.flatten(output), label)

    def train_step():
        mfcc, label = next_batch()
        mfcc, label = mfcc.to(device), label.to(device)
        optimizer.zero_grad()
        output = model(mfcc)
        # pred = F.sigmoid(output)
        loss = user_loss(output, label)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        mfcc, label = batch
        with torch.no_grad():
            output = model(mfcc)
            pred = torch.sigmoid(output)
            acc = binary_accuracy(pred, label)
        return acc

    return Program(name="hackersvoice_wakeword", model=model, batch=first, loss_fn=user_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # the sigmoid the loop leaves commented out (`# pred = F.sigmoid(output)`) applied before BCEWithLogitsLoss,
    # which applies its own: the loss is computed on sigmoid(sigmoid(logit)).
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # AdamW built over the classifier's parameters only: the LSTM and the LayerNorm never move.
    # first contact declared lstm; the optimizer owns the classifier alone, so the layernorm before the LSTM is the
    # first tensor it misses (reviewed after first contact: the finding names this bug's mechanism)
    Bug("lstm_left_out_of_optimizer", functools.partial(_build, bug="lstm_left_out_of_optimizer"), "four_structures",
        ("layernorm",), kind="optimizer.missing_parameter"),
]
