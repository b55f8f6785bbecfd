"""PANNs audio tagging (Cnn6: log-mel front end, SpecAugment, mixup on the spectrogram, four 5x5 conv blocks with
average pooling and dropout, max + mean pooling over time, sigmoid clipwise output) trained by the repository's
``pytorch/main.py train`` loop: batches of 2 x batch_size clips with ``Mixup(mixup_alpha=1.)`` lambdas, targets mixed
by ``do_mixup``, ``clip_bce`` (binary cross-entropy on the clipwise probabilities), Adam (lr 1e-3, amsgrad),
``loss.backward()``, ``optimizer.step()``, ``optimizer.zero_grad()``.

Source: https://github.com/qiuqiangkong/audioset_tagging_cnn
Commit: d2f4b8c18eab44737fcc0de1248ae21eb43f6aa4
Files: pytorch/main.py, pytorch/models.py (Cnn6), pytorch/losses.py, pytorch/pytorch_utils.py, utils/utilities.py
(Mixup), scripts/4_train.sh
License: MIT (Copyright (c) 2018-2020 Qiuqiang Kong)
Domain: audio, sound event tagging (multi-label audio classification)

Deviations from the original:
- sizes: sample_rate 32000 -> 8000, window_size 1024 -> 512, hop_size 320 -> 80, clips 10 s -> 0.5 s, fmax
  14000 -> 4000 (mel_bins 64, fmin 50 unchanged), Cnn6 channels 64/128/256/512 -> 8/16/32/64 and fc 512 -> 64,
  SpecAugment time_drop_width 64 -> 16 (the clips have 51 frames), classes 527 -> 6, batch_size 32 -> 8
  (16 clips per mixup batch);
- torchlibrosa is not installed: ``Spectrogram`` (power STFT, hann window, center, reflect padding),
  ``LogmelFilterBank`` (librosa's Slaney mel filters, ``power_to_db`` with ref 1.0, amin 1e-10, top_db None) and
  ``SpecAugmentation`` (``DropStripes`` over time and frequency) are written out in plain torch/numpy following
  their definitions, with ``torch.stft`` for the DFT;
- data: the AudioSet hdf5 waveforms and the balanced sampler are replaced by synthetic clips made from ``seed``:
  each clip holds one or two of 6 event types (tones, harmonic stacks, noise bands, chirps at class-specific
  frequencies) at random onsets plus background noise, with a multi-hot target; batches of 16 clips are drawn at
  random (``balanced`` sampling is not needed for balanced synthetic classes);
- ``DataParallel``, CUDA, checkpoints, statistics and the mAP ``Evaluator`` (sklearn) are left out; ``eval_fn`` is
  ``clip_bce`` on held-out clips in eval mode;
- the bug variant in ``clip_bce`` reaches it through a module-level switch ``_BUG`` set by ``build``;
- one ``train_step`` is one iteration of ``for batch_data_dict in train_loader``.
"""
# ruff: noqa: UP008, UP004, TRY002, PLR0402, SIM102, SIM118  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

_BUG = [None]


# ---- torchlibrosa pieces, written out (stft.Spectrogram, stft.LogmelFilterBank, augmentation.SpecAugmentation) ----

def _hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


def _librosa_mel(sr, n_fft, n_mels, fmin, fmax):
    """librosa.filters.mel (htk=False, norm='slaney')."""
    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    return weights * enorm[:, None]


class Spectrogram(nn.Module):
    def __init__(self, n_fft=2048, hop_length=None, win_length=None, window='hann', center=True, pad_mode='reflect',
                 power=2.0, freeze_parameters=True):
        super().__init__()
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length or n_fft
        self.center, self.pad_mode, self.power = center, pad_mode, power
        self.register_buffer("window", torch.hann_window(self.win_length, periodic=True))

    def forward(self, input):
        """input: (batch_size, data_length) -> (batch_size, 1, time_steps, freq_bins)"""
        stft = torch.stft(input, self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=self.center, pad_mode=self.pad_mode, return_complex=True)
        spectrogram = stft.abs() ** self.power
        return spectrogram.transpose(1, 2)[:, None, :, :]


class LogmelFilterBank(nn.Module):
    def __init__(self, sr=22050, n_fft=2048, n_mels=64, fmin=0.0, fmax=None, is_log=True, ref=1.0, amin=1e-10,
                 top_db=80.0, freeze_parameters=True):
        super().__init__()
        self.is_log, self.ref, self.amin, self.top_db = is_log, ref, amin, top_db
        melW = _librosa_mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax).T
        self.register_buffer("melW", torch.tensor(melW, dtype=torch.float32))

    def forward(self, input):
        mel_spectrogram = torch.matmul(input, self.melW)
        if self.is_log:
            return self.power_to_db(mel_spectrogram)
        return mel_spectrogram

    def power_to_db(self, input):
        log_spec = 10.0 * torch.log10(torch.clamp(input, min=self.amin, max=np.inf))
        log_spec -= 10.0 * np.log10(np.maximum(self.amin, self.ref))
        if self.top_db is not None:
            log_spec = torch.clamp(log_spec, min=log_spec.max().item() - self.top_db, max=np.inf)
        return log_spec


class DropStripes(nn.Module):
    def __init__(self, dim, drop_width, stripes_num):
        super().__init__()
        assert dim in [2, 3]
        self.dim, self.drop_width, self.stripes_num = dim, drop_width, stripes_num

    def forward(self, input):
        """input: (batch_size, channels, time_steps, freq_bins)"""
        assert input.ndimension() == 4
        if self.training is False:
            return input
        batch_size = input.shape[0]
        total_width = input.shape[self.dim]
        for n in range(batch_size):
            self.transform_slice(input[n], total_width)
        return input

    def transform_slice(self, e, total_width):
        for _ in range(self.stripes_num):
            distance = torch.randint(low=0, high=self.drop_width, size=(1,))[0]
            bgn = torch.randint(low=0, high=total_width - distance, size=(1,))[0]
            if self.dim == 2:
                e[:, bgn: bgn + distance, :] = 0
            elif self.dim == 3:
                e[:, :, bgn: bgn + distance] = 0


class SpecAugmentation(nn.Module):
    def __init__(self, time_drop_width, time_stripes_num, freq_drop_width, freq_stripes_num):
        super().__init__()
        self.time_dropper = DropStripes(dim=2, drop_width=time_drop_width, stripes_num=time_stripes_num)
        self.freq_dropper = DropStripes(dim=3, drop_width=freq_drop_width, stripes_num=freq_stripes_num)

    def forward(self, input):
        x = self.time_dropper(input)
        x = self.freq_dropper(x)
        return x


# ---- pytorch/models.py, pytorch/pytorch_utils.py, pytorch/losses.py, utils/utilities.py ---------------------------

def init_layer(layer):
    """Initialize a Linear or Convolutional layer. """
    nn.init.xavier_uniform_(layer.weight)

    if hasattr(layer, 'bias'):
        if layer.bias is not None:
            layer.bias.data.fill_(0.)

def init_bn(bn):
    """Initialize a Batchnorm layer. """
    bn.bias.data.fill_(0.)
    bn.weight.data.fill_(1.)


class ConvBlock5x5(nn.Module):
    def __init__(self, in_channels, out_channels):

        super(ConvBlock5x5, self).__init__()

        self.conv1 = nn.Conv2d(in_channels=in_channels,
                              out_channels=out_channels,
                              kernel_size=(5, 5), stride=(1, 1),
                              padding=(2, 2), bias=False)

        self.bn1 = nn.BatchNorm2d(out_channels)

        self.init_weight()

    def init_weight(self):
        init_layer(self.conv1)
        init_bn(self.bn1)

    def forward(self, input, pool_size=(2, 2), pool_type='avg'):

        x = input
        x = F.relu_(self.bn1(self.conv1(x)))
        if pool_type == 'max':
            x = F.max_pool2d(x, kernel_size=pool_size)
        elif pool_type == 'avg':
            x = F.avg_pool2d(x, kernel_size=pool_size)
        elif pool_type == 'avg+max':
            x1 = F.avg_pool2d(x, kernel_size=pool_size)
            x2 = F.max_pool2d(x, kernel_size=pool_size)
            x = x1 + x2
        else:
            raise Exception('Incorrect argument!')

        return x


class Cnn6(nn.Module):
    def __init__(self, sample_rate, window_size, hop_size, mel_bins, fmin,
        fmax, classes_num):

        super(Cnn6, self).__init__()

        window = 'hann'
        center = True
        pad_mode = 'reflect'
        ref = 1.0
        amin = 1e-10
        top_db = None

        # Spectrogram extractor
        self.spectrogram_extractor = Spectrogram(n_fft=window_size, hop_length=hop_size,
            win_length=window_size, window=window, center=center, pad_mode=pad_mode,
            freeze_parameters=True)

        # Logmel feature extractor
        self.logmel_extractor = LogmelFilterBank(sr=sample_rate, n_fft=window_size,
            n_mels=mel_bins, fmin=fmin, fmax=fmax, ref=ref, amin=amin, top_db=top_db,
            freeze_parameters=True)

        # Spec augmenter
        self.spec_augmenter = SpecAugmentation(time_drop_width=16, time_stripes_num=2,
            freq_drop_width=8, freq_stripes_num=2)

        self.bn0 = nn.BatchNorm2d(64)

        self.conv_block1 = ConvBlock5x5(in_channels=1, out_channels=8)
        self.conv_block2 = ConvBlock5x5(in_channels=8, out_channels=16)
        self.conv_block3 = ConvBlock5x5(in_channels=16, out_channels=32)
        self.conv_block4 = ConvBlock5x5(in_channels=32, out_channels=64)

        self.fc1 = nn.Linear(64, 64, bias=True)
        self.fc_audioset = nn.Linear(64, classes_num, bias=True)

        self.init_weight()

    def init_weight(self):
        init_bn(self.bn0)
        init_layer(self.fc1)
        init_layer(self.fc_audioset)

    def forward(self, input, mixup_lambda=None):
        """
        Input: (batch_size, data_length)"""

        x = self.spectrogram_extractor(input)   # (batch_size, 1, time_steps, freq_bins)
        x = self.logmel_extractor(x)    # (batch_size, 1, time_steps, mel_bins)

        x = x.transpose(1, 3)
        x = self.bn0(x)
        x = x.transpose(1, 3)

        if self.training:
            x = self.spec_augmenter(x)

        # Mixup on spectrogram
        if self.training and mixup_lambda is not None:
            x = do_mixup(x, mixup_lambda)

        x = self.conv_block1(x, pool_size=(2, 2), pool_type='avg')
        x = F.dropout(x, p=0.2, training=self.training)
        x = self.conv_block2(x, pool_size=(2, 2), pool_type='avg')
        x = F.dropout(x, p=0.2, training=self.training)
        x = self.conv_block3(x, pool_size=(2, 2), pool_type='avg')
        x = F.dropout(x, p=0.2, training=self.training)
        x = self.conv_block4(x, pool_size=(2, 2), pool_type='avg')
        x = F.dropout(x, p=0.2, training=self.training)
        x = torch.mean(x, dim=3)

        (x1, _) = torch.max(x, dim=2)
        x2 = torch.mean(x, dim=2)
        x = x1 + x2
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu_(self.fc1(x))
        embedding = F.dropout(x, p=0.5, training=self.training)
        clipwise_output = torch.sigmoid(self.fc_audioset(x))

        output_dict = {'clipwise_output': clipwise_output, 'embedding': embedding}

        return output_dict


def do_mixup(x, mixup_lambda):
    """Mixup x of even indexes (0, 2, 4, ...) with x of odd indexes 
    (1, 3, 5, ...).

    Args:
      x: (batch_size * 2, ...)
      mixup_lambda: (batch_size * 2,)

    Returns:
      out: (batch_size, ...)
    """
    out = (x[0 :: 2].transpose(0, -1) * mixup_lambda[0 :: 2] + \
        x[1 :: 2].transpose(0, -1) * mixup_lambda[1 :: 2]).transpose(0, -1)
    return out


def clip_bce(output_dict, target_dict):
    """Binary crossentropy loss.
    """
    if _BUG[0] == "bce_with_logits_on_probabilities":
        # the with-logits loss swapped in for clip_bce (classic): a second sigmoid on the clipwise probabilities
        return F.binary_cross_entropy_with_logits(
            output_dict['clipwise_output'], target_dict['target'])
    return F.binary_cross_entropy(
        output_dict['clipwise_output'], target_dict['target'])


def get_loss_func(loss_type):
    if loss_type == 'clip_bce':
        return clip_bce


class Mixup(object):
    def __init__(self, mixup_alpha, random_seed=1234):
        """Mixup coefficient generator.
        """
        self.mixup_alpha = mixup_alpha
        self.random_state = np.random.RandomState(random_seed)

    def get_lambda(self, batch_size):
        """Get mixup random coefficients.
        Args:
          batch_size: int
        Returns:
          mixup_lambdas: (batch_size,)
        """
        mixup_lambdas = []
        for n in range(0, batch_size, 2):
            lam = self.random_state.beta(self.mixup_alpha, self.mixup_alpha, 1)[0]
            mixup_lambdas.append(lam)
            mixup_lambdas.append(1. - lam)

        return np.array(mixup_lambdas)


# ---- pytorch/main.py ----------------------------------------------------------------------------------------------

SAMPLE_RATE = 8000
CLIP_SAMPLES = SAMPLE_RATE // 2
CLASSES_NUM = 6


def make_clips(rng, n):
    """Synthetic multi-label clips (replaces the AudioSet hdf5s): 1-2 of 6 event types each, plus noise."""
    t = np.arange(CLIP_SAMPLES) / SAMPLE_RATE
    waveform = 0.05 * rng.randn(n, CLIP_SAMPLES)
    target = np.zeros((n, CLASSES_NUM), dtype=np.float32)
    for i in range(n):
        for c in rng.choice(CLASSES_NUM, size=rng.randint(1, 3), replace=False):
            target[i, c] = 1
            onset = rng.randint(0, CLIP_SAMPLES // 2)
            env = np.zeros(CLIP_SAMPLES)
            env[onset:onset + CLIP_SAMPLES // 2] = 1
            if c == 0:
                s = np.sin(2 * np.pi * 300 * t)
            elif c == 1:
                s = np.sin(2 * np.pi * 1200 * t)
            elif c == 2:
                s = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in range(1, 6))
            elif c == 3:
                s = np.sin(2 * np.pi * (500 + 2500 * t) * t)
            elif c == 4:
                s = np.convolve(rng.randn(CLIP_SAMPLES), np.ones(8) / 8, mode='same') * 2
            else:
                s = rng.randn(CLIP_SAMPLES) * np.sin(2 * np.pi * 2500 * t)
            waveform[i] += 0.5 * env * s
    return waveform.astype(np.float32), target


def move_data_to_device(x, device):
    if 'float' in str(x.dtype):
        x = torch.Tensor(x)
    elif 'int' in str(x.dtype):
        x = torch.LongTensor(x)
    else:
        return x

    return x.to(device)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    sample_rate = SAMPLE_RATE
    window_size = 512
    hop_size = 80
    mel_bins = 64
    fmin = 50
    fmax = 4000
    augmentation = 'mixup'
    batch_size = 8
    learning_rate = 1e-3
    device = 'cpu'
    classes_num = CLASSES_NUM
    loss_func = get_loss_func('clip_bce')

    model = Cnn6(sample_rate=sample_rate, window_size=window_size,
        hop_size=hop_size, mel_bins=mel_bins, fmin=fmin, fmax=fmax,
        classes_num=classes_num)

    train_waveform, train_target = make_clips(rng, 256)
    eval_waveform, eval_target = make_clips(rng, 32)

    def train_loader():
        while True:
            idx = rng.choice(len(train_waveform), size=batch_size * 2 if 'mixup' in augmentation else batch_size,
                             replace=False)
            yield {'waveform': train_waveform[idx], 'target': train_target[idx]}

    loader = train_loader()

    if 'mixup' in augmentation:
        mixup_augmenter = Mixup(mixup_alpha=1., random_seed=seed)

    # Optimizer
    optimizer = optim.Adam(model.parameters(), lr=learning_rate,
        betas=(0.9, 0.999), eps=1e-08, weight_decay=0., amsgrad=True)

    def train_step():
        _BUG[0] = bug
        try:
            batch_data_dict = next(loader)

            # Mixup lambda
            if 'mixup' in augmentation:
                batch_data_dict['mixup_lambda'] = mixup_augmenter.get_lambda(
                    batch_size=len(batch_data_dict['waveform']))

            # Move data to device
            for key in batch_data_dict.keys():
                batch_data_dict[key] = move_data_to_device(batch_data_dict[key], device)

            # Forward
            model.train()

            if 'mixup' in augmentation:
                batch_output_dict = model(batch_data_dict['waveform'],
                    batch_data_dict['mixup_lambda'])
                """{'clipwise_output': (batch_size, classes_num), ...}"""
                if bug == "mixup_target_not_mixed":
                    # the targets of the first clip of each pair only (classic: the mixup not applied to the target)
                    batch_target_dict = {'target': batch_data_dict['target'][0::2]}
                else:
                    batch_target_dict = {'target': do_mixup(batch_data_dict['target'],
                        batch_data_dict['mixup_lambda'])}
                """{'target': (batch_size, classes_num)}"""
            else:
                batch_output_dict = model(batch_data_dict['waveform'], None)
                """{'clipwise_output': (batch_size, classes_num), ...}"""
                batch_target_dict = {'target': batch_data_dict['target']}
                """{'target': (batch_size, classes_num)}"""

            # Loss
            loss = loss_func(batch_output_dict, batch_target_dict)

            # Backward
            loss.backward()

            optimizer.step()
            if bug != "zero_grad_dropped":
                optimizer.zero_grad()
            return loss.detach()
        finally:
            _BUG[0] = None

    def eval_fn(model, batch):
        _BUG[0] = bug
        try:
            model.eval()
            with torch.no_grad():
                out = model(torch.Tensor(eval_waveform), None)
                return float(loss_func(out, {'target': torch.Tensor(eval_target)}))
        finally:
            _BUG[0] = None

    def program_loss(output_dict, target):
        _BUG[0] = bug
        try:
            return loss_func(output_dict, {'target': target})
        finally:
            _BUG[0] = None

    batch = (torch.Tensor(train_waveform[:batch_size]), torch.Tensor(train_target[:batch_size]))
    return Program(name="panns_cnn6", model=model, batch=batch, loss_fn=program_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the mixed spectrograms scored against the first clip's target of each pair (classic: mixup applied to the
    # inputs but not to the targets).
    Bug("mixup_target_not_mixed", functools.partial(_build, bug="mixup_target_not_mixed"), "learning_ledger",
        ("TASK",)),
    # F.binary_cross_entropy_with_logits on the sigmoid clipwise output (classic): a second sigmoid inside the loss.
    Bug("bce_with_logits_on_probabilities", functools.partial(_build, bug="bce_with_logits_on_probabilities"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped after the step (classic): gradients accumulate across iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
