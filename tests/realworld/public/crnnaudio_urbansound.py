# ruff: noqa: B006, PLR0402, UP004, UP008
"""Convolutional-recurrent audio classifier (AudioCRNN) on mel spectrograms, from
ksanjeevan/crnn-audio-classification.

Source: https://github.com/ksanjeevan/crnn-audio-classification
Commit: f09449b87ed61d28b82931c7055d033a7b69160b
Files: ``net/model.py`` (``AudioCRNN``), ``net/audio.py`` (``MelspectrogramStretch``, ``RandomTimeStretch``,
``SpecNormalization``), ``crnn.cfg`` (the layers), ``config.json`` (optimizer, scheduler, transforms, loader),
``net/loss.py`` (``nll_loss``), ``data/transforms.py`` (``ProcessChannels``, ``AdditiveNoise``,
``RandomCropLength``, ``ToTensorAudio``), ``data/data_manager.py`` (``pad_seq``), ``train/trainer.py``
(``_train_epoch``), ``run.py``.
License: MIT (Copyright (c) 2019 Kiran Sanjeevan; full text in LICENSES/ksanjeevan-crnn-audio-classification.txt).
Domain: audio classification (UrbanSound8K-style clips: STFT, random phase-vocoder time stretch, power mel
spectrogram with per-example whitening, CNN + packed bi-LSTM read at each clip's last valid frame, log-softmax,
NLL, Adam with amsgrad and weight decay, StepLR).

Kept as written: ``AudioCRNN`` (its ``forward``, ``_many_to_one``, ``modify_lengths``), ``MelspectrogramStretch``
(``forward``: stft, frame lengths, the time stretch with probability 0.4 while training, complex norm, mel scale,
whitening), ``RandomTimeStretch``, ``SpecNormalization`` ('whiten'), the layers of ``crnn.cfg`` (conv 32 /
BN / ELU / maxpool 3 / dropout 0.1, twice conv 64 / BN / ELU / maxpool 4 / dropout 0.1; 2-layer bidirectional LSTM
of 64; dropout 0.3 / BatchNorm1d / Linear), the train transforms of ``config.json`` (channels "avg", additive
noise [0.3, 0.001], random crop [0.4, 0.25]), ``pad_seq`` (sorted by length, zero-padded, lengths), the optimizer
(Adam lr 0.002, weight_decay 0.01, amsgrad over the trainable parameters), StepLR(10, 0.5) stepped after each
epoch, ``nll_loss`` and the loop body of ``_train_epoch``.

Deviations from the original:
- torchaudio is not installed here: ``Spectrogram`` (power=None, the (..., freq, time, 2) real layout of the
  torchaudio of the time), ``MelSpectrogram``'s ``MelScale`` with its HTK filter bank (``create_fb_matrix``),
  ``ComplexNorm`` and ``TimeStretch`` (``phase_vocoder``) are written out in plain torch after torchaudio 0.4's
  code; torchparse is not installed: ``parse_cfg(crnn.cfg)`` is written out as the ``ModuleDict`` it builds
  (``convs``, ``recur``, ``dense``; the LSTM's input size computed as torchparse does).
- UrbanSound8K is replaced by synthetic mono clips made from ``seed``: 4 classes (instead of 10), each a tone at
  its own frequency with a harmonic, random phase, amplitude and background noise, 1.8-2.6 s at 16 kHz (44.1 kHz
  4 s clips in the data set); the mel front end uses sample_rate 16000, fft_length 512 and num_mels 96 (44100,
  2048 and 128; 96 is about the fewest mel bands the three valid convs and pools leave a frequency row for).
  48 training clips, batch_size 8 (24 in ``config.json``), shuffled, drop_last.
- numpy's global random state in the transforms is replaced by a ``np.random.RandomState(seed)``.
- logging, metrics, tensorboard, validation and checkpointing are dropped; ``train_step`` is one iteration of
  ``_train_epoch``'s loop, the loader cycled, ``lr_scheduler.step()`` at each epoch's end.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Uniform
from torch.utils import data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

SAMPLE_RATE = 16000
FFT_LENGTH = 512
CLASSES = ["tone_a", "tone_b", "tone_c", "tone_d"]
N_TRAIN = 48
SELF_CHECK_STEPS = 15  # a CNN over 96 x ~130 mel frames per clip: few steps on 2 CPU cores


# ---- torchaudio 0.4 pieces (written out)
def create_fb_matrix(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min = 2595.0 * math.log10(1.0 + (f_min / 700.0))
    m_max = 2595.0 * math.log10(1.0 + (f_max / 700.0))
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]  # (n_mels + 1)
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)  # (n_freqs, n_mels + 2)
    zero = torch.zeros(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]  # (n_freqs, n_mels)
    up_slopes = slopes[:, 2:] / f_diff[1:]  # (n_freqs, n_mels)
    fb = torch.max(zero, torch.min(down_slopes, up_slopes))
    return fb


class Spectrogram(nn.Module):
    def __init__(self, n_fft=400, win_length=None, hop_length=None, pad=0, power=2, normalized=False):
        super().__init__()
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.register_buffer("window", torch.hann_window(self.win_length))
        self.pad = pad
        self.power = power
        self.normalized = normalized

    def forward(self, waveform):
        if self.pad > 0:
            waveform = F.pad(waveform, (self.pad, self.pad), "constant")
        shape = waveform.size()
        waveform = waveform.reshape(-1, shape[-1])
        spec_f = torch.view_as_real(torch.stft(waveform, self.n_fft, self.hop_length, self.win_length, self.window,
                                               center=True, pad_mode="reflect", normalized=self.normalized,
                                               onesided=True, return_complex=True))
        spec_f = spec_f.reshape(shape[:-1] + spec_f.shape[-3:])
        if self.power is not None:
            spec_f = spec_f.pow(2.).sum(-1).pow(self.power / 2.)
        return spec_f


class MelScale(nn.Module):
    def __init__(self, n_mels=128, sample_rate=16000, f_min=0., f_max=None):
        super().__init__()
        self.n_mels = n_mels
        self.sample_rate = sample_rate
        self.f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.f_min = f_min
        self.register_buffer("fb", torch.empty(0))

    def forward(self, specgram):
        shape = specgram.size()
        specgram = specgram.reshape(-1, shape[-2], shape[-1])
        if self.fb.numel() == 0:
            tmp_fb = create_fb_matrix(specgram.size(1), self.f_min, self.f_max, self.n_mels, self.sample_rate)
            self.fb.resize_(tmp_fb.size())
            self.fb.copy_(tmp_fb)
        mel_specgram = torch.matmul(specgram.transpose(1, 2), self.fb).transpose(1, 2)
        return mel_specgram.reshape(shape[:-2] + mel_specgram.shape[-2:])


class MelSpectrogram(nn.Module):
    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, f_min=0., f_max=None,
                 pad=0, n_mels=128):
        super().__init__()
        self.sample_rate = sample_rate
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.pad = pad
        self.n_mels = n_mels
        self.spectrogram = Spectrogram(n_fft=self.n_fft, win_length=self.win_length, hop_length=self.hop_length,
                                       pad=self.pad, power=2, normalized=False)
        self.mel_scale = MelScale(self.n_mels, self.sample_rate, f_min, f_max)


class ComplexNorm(nn.Module):
    def __init__(self, power=1.0):
        super().__init__()
        self.power = power

    def forward(self, complex_tensor):
        return torch.norm(complex_tensor, 2, -1).pow(self.power)


def _angle(complex_tensor):
    return torch.atan2(complex_tensor[..., 1], complex_tensor[..., 0])


def phase_vocoder(complex_specgrams, rate, phase_advance):
    time_steps = torch.arange(0, complex_specgrams.size(-2), rate, device=complex_specgrams.device,
                              dtype=complex_specgrams.dtype)
    alphas = time_steps % 1.0
    phase_0 = _angle(complex_specgrams[..., :1, :])
    # Time Padding
    complex_specgrams = F.pad(complex_specgrams, [0, 0, 0, 2])
    # (new_bins, freq, 2)
    complex_specgrams_0 = complex_specgrams.index_select(-2, time_steps.long())
    complex_specgrams_1 = complex_specgrams.index_select(-2, (time_steps + 1).long())
    angle_0 = _angle(complex_specgrams_0)
    angle_1 = _angle(complex_specgrams_1)
    norm_0 = torch.norm(complex_specgrams_0, p=2, dim=-1)
    norm_1 = torch.norm(complex_specgrams_1, p=2, dim=-1)
    phase = angle_1 - angle_0 - phase_advance
    phase = phase - 2 * math.pi * torch.round(phase / (2 * math.pi))
    # Compute Phase Accum
    phase = phase + phase_advance
    phase = torch.cat([phase_0, phase[..., :-1]], dim=-1)
    phase_acc = torch.cumsum(phase, -1)
    mag = alphas * norm_1 + (1 - alphas) * norm_0
    real_stretch = mag * torch.cos(phase_acc)
    imag_stretch = mag * torch.sin(phase_acc)
    return torch.stack([real_stretch, imag_stretch], dim=-1)


class TimeStretch(nn.Module):
    def __init__(self, hop_length=None, n_freq=201, fixed_rate=None):
        super().__init__()
        self.fixed_rate = fixed_rate
        n_fft = (n_freq - 1) * 2
        hop_length = hop_length if hop_length is not None else n_fft // 2
        self.register_buffer("phase_advance", torch.linspace(0, math.pi * hop_length, n_freq)[..., None])

    def forward(self, complex_specgrams, overriding_rate=None):
        rate = self.fixed_rate if overriding_rate is None else overriding_rate
        if rate == 1.0:
            return complex_specgrams
        return phase_vocoder(complex_specgrams, rate, self.phase_advance)


# ---- net/audio.py
def _num_stft_bins(lengths, fft_length, hop_length, pad):
    return (lengths + 2 * pad - fft_length + hop_length) // hop_length


class MelspectrogramStretch(MelSpectrogram):

    def __init__(self, hop_length=None,
                 sample_rate=44100,
                 num_mels=128,
                 fft_length=2048,
                 norm='whiten',
                 stretch_param=[0.4, 0.4]):

        super(MelspectrogramStretch, self).__init__(sample_rate=sample_rate,
                                                    n_fft=fft_length,
                                                    hop_length=hop_length,
                                                    n_mels=num_mels)

        self.stft = Spectrogram(n_fft=self.n_fft, win_length=self.win_length,
                                hop_length=self.hop_length, pad=self.pad,
                                power=None, normalized=False)

        # Augmentation
        self.prob = stretch_param[0]
        self.random_stretch = RandomTimeStretch(stretch_param[1],
                                                self.hop_length,
                                                self.n_fft//2+1,
                                                fixed_rate=None)

        # Normalization (pot spec processing)
        self.complex_norm = ComplexNorm(power=2.)
        self.norm = SpecNormalization(norm)

    def forward(self, x, lengths=None):
        x = self.stft(x)

        if lengths is not None:
            lengths = _num_stft_bins(lengths, self.n_fft, self.hop_length, self.n_fft//2)
            lengths = lengths.long()

        if torch.rand(1)[0] <= self.prob and self.training:
            # Stretch spectrogram in time using Phase Vocoder
            x, rate = self.random_stretch(x)
            # Modify the rate accordingly
            lengths = (lengths.float()/rate).long()+1

        x = self.complex_norm(x)
        x = self.mel_scale(x)

        # Normalize melspectrogram
        x = self.norm(x)

        if lengths is not None:
            return x, lengths
        return x

    def __repr__(self):
        return self.__class__.__name__ + '()'


class RandomTimeStretch(TimeStretch):

    def __init__(self, max_perc, hop_length=None, n_freq=201, fixed_rate=None):

        super(RandomTimeStretch, self).__init__(hop_length, n_freq, fixed_rate)
        self._dist = Uniform(1.-max_perc, 1+max_perc)

    def forward(self, x):
        rate = self._dist.sample().item()
        return super(RandomTimeStretch, self).forward(x, rate), rate


class SpecNormalization(nn.Module):

    def __init__(self, norm_type, top_db=80.0):

        super(SpecNormalization, self).__init__()

        if 'whiten' == norm_type:
            self._norm = lambda x: self.z_transform(x)
        else:
            self._norm = lambda x: x

    def z_transform(self, x):
        # Independent mean, std per batch
        non_batch_inds = [1, 2, 3]
        mean = x.mean(non_batch_inds, keepdim=True)
        std = x.std(non_batch_inds, keepdim=True)
        x = (x - mean)/std
        return x

    def forward(self, x):
        return self._norm(x)


# ---- crnn.cfg, as torchparse's parse_cfg builds it
def parse_cfg(cfg, in_shape):
    in_chan, n_freq, _time = in_shape
    convs = nn.Sequential(
        nn.Conv2d(in_chan, 32, kernel_size=3, stride=1, padding=0), nn.BatchNorm2d(32), nn.ELU(),
        nn.MaxPool2d(kernel_size=3, stride=3), nn.Dropout(p=0.1),
        nn.Conv2d(32, 64, kernel_size=3, stride=1, padding=0), nn.BatchNorm2d(64), nn.ELU(),
        nn.MaxPool2d(kernel_size=4, stride=4), nn.Dropout(p=0.1),
        nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=0), nn.BatchNorm2d(64), nn.ELU(),
        nn.MaxPool2d(kernel_size=4, stride=4), nn.Dropout(p=0.1),
    )
    freq = (((n_freq - 2) // 3 - 2) // 4 - 2) // 4
    recur = nn.LSTM(64 * freq, hidden_size=64, num_layers=2, bidirectional=True, batch_first=True)
    dense = nn.Sequential(nn.Dropout(p=0.3), nn.BatchNorm1d(128), nn.Linear(128, cfg["n_classes"]))
    return nn.ModuleDict({"convs": convs, "recur": recur, "dense": dense})


# ---- net/model.py
class AudioCRNN(nn.Module):
    def __init__(self, classes, config={}, state_dict=None, bug=None):
        super(AudioCRNN, self).__init__()

        in_chan = 2 if config['transforms']['args']['channels'] == 'stereo' else 1

        self.classes = classes
        self.lstm_units = 64
        self.lstm_layers = 2
        self.spec = MelspectrogramStretch(hop_length=None,
                                          sample_rate=SAMPLE_RATE,
                                          num_mels=96,
                                          fft_length=FFT_LENGTH,
                                          norm='whiten',
                                          stretch_param=[0.4, 0.4])

        # shape -> (channel, freq, token_time)
        self.net = parse_cfg(config['cfg'], in_shape=[in_chan, self.spec.n_mels, 400])
        self.bug = bug

    def _many_to_one(self, t, lengths):
        if self.bug == "last_padded_frame":
            return t[:, -1]
        return t[torch.arange(t.size(0)), lengths - 1]

    def modify_lengths(self, lengths):
        def safe_param(elem):
            return elem if isinstance(elem, int) else elem[0]

        for name, layer in self.net['convs'].named_children():
            # if name.startswith(('conv2d','maxpool2d')):
            if isinstance(layer, (nn.Conv2d, nn.MaxPool2d)):
                p, k, s = map(safe_param, [layer.padding, layer.kernel_size, layer.stride])
                lengths = ((lengths + 2*p - k)//s + 1).long()

        return torch.where(lengths > 0, lengths, torch.tensor(1, device=lengths.device))

    def forward(self, batch):
        # x-> (batch, time, channel)
        x, lengths, _ = batch  # unpacking seqs, lengths and srs
        # x-> (batch, channel, time)
        xt = x.float().transpose(1, 2)
        # xt -> (batch, channel, freq, time)
        xt, lengths = self.spec(xt, lengths)

        # (batch, channel, freq, time)
        xt = self.net['convs'](xt)
        lengths = self.modify_lengths(lengths)

        # xt -> (batch, time, freq, channel)
        x = xt.transpose(1, -1)

        # xt -> (batch, time, channel*freq)
        batch, time = x.size()[:2]
        x = x.reshape(batch, time, -1)
        x_pack = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)

        # x -> (batch, time, lstm_out)
        x_pack, hidden = self.net['recur'](x_pack)  # noqa: RUF059
        x, _ = torch.nn.utils.rnn.pad_packed_sequence(x_pack, batch_first=True)

        # (batch, lstm_out)
        x = self._many_to_one(x, lengths)
        # (batch, classes)
        x = self.net['dense'](x)

        if self.bug == "log_softmax_over_batch":
            x = F.log_softmax(x, dim=0)
        else:
            x = F.log_softmax(x, dim=1)

        return x


# ---- net/loss.py
def nll_loss(output, target):
    # loss for log_softmax
    return F.nll_loss(output, target)


# ---- data/transforms.py (the train branch of AudioTransforms)
class ProcessChannels(object):

    def __init__(self, mode):
        self.mode = mode

    def _modify_channels(self, audio, mode):
        if mode == 'mono':
            new_audio = audio if audio.ndim == 1 else audio[:, :1]
        elif mode == 'stereo':
            new_audio = np.stack([audio]*2).T if audio.ndim == 1 else audio
        elif mode == 'avg':
            new_audio = audio.mean(axis=1) if audio.ndim > 1 else audio
            new_audio = new_audio[:, None]
        else:
            new_audio = audio
        return new_audio

    def __call__(self, tensor):
        return self._modify_channels(tensor, self.mode)


class ToTensorAudio(object):

    def __call__(self, tensor):
        return torch.from_numpy(tensor)


class AugmentationTransform(object):

    def __init__(self, prob=None, sig=None, dist_type='uniform', rs=None):
        self.rs = rs
        self.sig, self.dist_type = sig, dist_type
        self.dist = self._get_dist(sig, dist_type)
        self.prob = prob

    def _get_dist(self, sig, dist_type):
        dist = None
        if dist_type == 'normal':
            dist = lambda x: self.rs.normal(0, sig, x)
        elif dist_type == 'uniform':
            dist = lambda x: self.rs.uniform(-sig, sig, x)
        elif dist_type == 'half':
            dist = lambda x: np.clip(
                                np.abs(
                                    self.rs.normal(0, sig, x)),
                                a_min=0.0,
                                a_max=0.8)
        else:
            raise ValueError('Unimplemented distribution')
        return dist

    def __call__(self, tensor):
        if self.rs.rand() <= self.prob:
            return self.transform(tensor)
        return tensor

    def transform(self, tensor):
        raise NotImplementedError


class AdditiveNoise(AugmentationTransform):

    def __init__(self, prob, sig, dist_type='normal', rs=None):
        super(AdditiveNoise, self).__init__(prob, sig, dist_type, rs)

    def _noise(self, length):
        return self.dist(length)

    def transform(self, tensor):
        noise = self._noise(tensor.shape[0])[:, None]
        return tensor + noise


class RandomCropLength(AugmentationTransform):

    def __init__(self, prob, sig, dist_type='half', rs=None):
        super(RandomCropLength, self).__init__(prob, sig, dist_type, rs)

    def transform(self, tensor):
        ind_start, ind_end, _perc = self._crop_inds(tensor.shape[0])
        return self._check_zero(tensor[ind_start:ind_end])

    def _check_zero(self, tensor):
        return tensor + 1e-8 if tensor.sum() == 0 else tensor

    def _crop_inds(self, length):
        d = self.dist(1)[0]
        assert d < 0.9

        perc = 1 - d
        new_length = np.round(length * perc).astype(int)
        max_start = length - new_length + 1
        ind_start = self.rs.randint(0, max_start)
        ind_end = ind_start + new_length
        return ind_start, ind_end, perc


class SyntheticUrbanSound(data.Dataset):
    """Stand-in for the UrbanSound8K folds: (audio (time, channel), sr) -> transforms -> (tensor, sr, label)."""

    def __init__(self, seed, n, transforms):
        rs = np.random.RandomState(seed)
        self.items = []
        base = [220.0, 520.0, 1200.0, 2600.0]
        for i in range(n):
            label = i % len(CLASSES)
            t = np.arange(int(rs.uniform(1.8, 2.6) * SAMPLE_RATE)) / SAMPLE_RATE
            f0 = base[label] * rs.uniform(0.95, 1.05)
            audio = rs.uniform(0.3, 1.0) * (np.sin(2 * np.pi * f0 * t + rs.uniform(0, 2 * np.pi))
                                            + 0.5 * np.sin(4 * np.pi * f0 * t))
            audio = audio + 0.3 * rs.randn(t.size)
            self.items.append((audio[:, None].astype(np.float32), SAMPLE_RATE, label))
        self.transforms = transforms

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        audio, sr, label = self.items[index]
        return self.transforms(audio), sr, label


# ---- data/data_manager.py
def pad_seq(batch):
    # sort_ind should point to length
    sort_ind = 0
    sorted_batch = sorted(batch, key=lambda x: x[0].size(sort_ind), reverse=True)
    seqs, srs, labels = zip(*sorted_batch)
    lengths, srs, labels = map(torch.LongTensor, [[x.size(sort_ind) for x in seqs], srs, labels])
    # seqs_pad -> (batch, time, channel)
    seqs_pad = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
    return seqs_pad, lengths, srs, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = {
        "cfg": {"n_classes": len(CLASSES)},
        "transforms": {"args": {"channels": "avg", "noise": [0.3, 0.001], "crop": [0.4, 0.25]}},
        "optimizer": {"args": {"lr": 0.002, "weight_decay": 0.01, "amsgrad": True}},
        "lr_scheduler": {"args": {"step_size": 10, "gamma": 0.5}},
        "loader": {"shuffle": True, "batch_size": 8, "drop_last": True},
    }
    rs = np.random.RandomState(seed)
    args = config["transforms"]["args"]
    chain = [ProcessChannels(args['channels']), AdditiveNoise(*args['noise'], rs=rs),
             RandomCropLength(*args['crop'], rs=rs), ToTensorAudio()]

    def t_transforms(audio):
        for f in chain:
            audio = f(audio)
        return audio

    dataset = SyntheticUrbanSound(seed, N_TRAIN, t_transforms)
    t_loader = data.DataLoader(dataset=dataset, **config["loader"], collate_fn=pad_seq,
                               generator=torch.Generator().manual_seed(seed))

    model = AudioCRNN(CLASSES, config=config, bug=bug)
    loss = nll_loss
    trainable_params = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = torch.optim.Adam(trainable_params, **config["optimizer"]["args"])
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, **config["lr_scheduler"]["args"])

    state = {"it": None}

    def next_batch():
        if state["it"] is not None:
            try:
                return next(state["it"])
            except StopIteration:
                lr_scheduler.step()  # at the end of _train_epoch
        model.train()
        state["it"] = iter(t_loader)
        return next(state["it"])

    def train_step():
        batch = next_batch()
        batch = [b for b in batch]
        data_, target = batch[:-1], batch[-1]
        data_ = data_ if len(data_) > 1 else data_[0]

        optimizer.zero_grad()
        output = model(data_)

        loss_ = loss(output, target)
        loss_.backward()
        optimizer.step()
        return loss_.detach()

    def eval_fn(model, batch):
        inputs, target = batch
        model.eval()
        with torch.no_grad():
            out = model(inputs)
        model.train()
        return float((out.argmax(1) == target).float().mean())

    first = pad_seq([dataset[i] for i in range(8)])
    return Program(name="crnnaudio_urbansound", model=model, batch=(list(first[:-1]), first[-1]),
                   loss_fn=nll_loss, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=t_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # log_softmax over dim 0, the batch, instead of the classes (classic): nll_loss then reads per-clip scores
    # normalized across the clips of the batch.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # _many_to_one reads the padded LSTM output's last frame, t[:, -1], instead of each clip's last valid frame
    # (classic): every clip shorter than the longest in its batch is read from zero padding.
    Bug("last_padded_frame", functools.partial(_build, bug="last_padded_frame"), "learning_ledger", ("DEPENDENCY",)),
]
