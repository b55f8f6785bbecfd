# ruff: noqa: UP008, PLR0402, UP031, RUF059
"""RawNet2 anti-spoofing (bona fide vs spoofed speech from the raw waveform), from eurecom-asp/rawnet2-antispoofing.

Source: https://github.com/eurecom-asp/rawnet2-antispoofing, commit e259c539afd0252028b2d7d273db567f7f2d9a0f, files
``main.py`` (``pad``, ``train_epoch``, ``evaluate_accuracy``, the optimizer), ``model.py`` (``SincConv``,
``Residual_block``, ``RawNet``), ``model_config_RawNet2.yaml`` and ``data_utils_LA.py`` (the label rule
``key = int(tokens[4] == 'bonafide')``). License: MIT (Copyright (c) 2021 eurecom-asp; full text in
LICENSES/eurecom-asp-rawnet2-antispoofing.txt).

Kept as written: ``SincConv`` (fixed mel-spaced band-pass sinc filters with a Hamming window, rebuilt in numpy at
every forward, not parameters), the first BatchNorm and SELU after ``max_pool1d(abs(.), 3)``, six
``Residual_block``s each followed by the filter-wise sigmoid attention ``x * y + y``, BatchNorm + SELU before a
3-layer GRU read at its last step, ``fc1_gru``/``fc2_gru`` (logits in training, softmax with ``is_test``), Adam
(lr 1e-4, weight decay 1e-4) over ``model.parameters()``, the weighted cross-entropy ``[1.0, 9.0]`` (bona fide is
class 1), the loop body of ``train_epoch`` (forward, loss, argmax accuracy, zero_grad, backward, step) with
``model.train()`` at the start of each epoch and ``evaluate_accuracy`` (``model.eval()``) after it, ``pad``
(tiling a short clip to ``max_len``). ``init_weights`` is defined in main.py but never applied: not applied here
either.

Deviations:
- sizes (the yaml's model section): filts ``[16, [16, 16], [16, 32], [32, 32]]`` (``[128, [128, 128], [128,
  512], [512, 512]]``), gru_node 32 and nb_fc_node 32 (1024), first_conv 128 as written (odd-forced to 129),
  clips of 8000 samples (``pad``'s max_len 64600), batch 12 (32), an epoch of 6 batches, 16 validation clips.
- the data: ASVspoof 2019 LA is replaced by synthetic clips made from ``seed``: bona fide clips are harmonic
  "voiced" tones with a random pitch and a slow amplitude envelope plus noise; spoofed clips are the same with a
  vocoder-like artefact (a band of high-frequency buzz) added, 3 spoofed clips per bona fide one.
- ``device`` is the CPU; the tensorboard writer, checkpoints and printing are dropped; ``np.random.seed`` and
  ``torch.manual_seed`` take ``seed``; the data loader reshuffles with a generator seeded from ``seed``.
- left out as never called in training: ``SincConv``'s ``Inverse-mel`` branch, ``RawNet.summary`` and
  ``_make_layer``, ``produce_evaluation_file``; the dataset yields ``(x, y)`` without the protocol metadata.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

MAX_LEN = 8000
BATCHES_PER_EPOCH = 6


# ---- model.py ----------------------------------------------------------------------------------------------------
class SincConv(nn.Module):
    @staticmethod
    def to_mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    @staticmethod
    def to_hz(mel):
        return 700 * (10 ** (mel / 2595) - 1)

    def __init__(self, device, out_channels, kernel_size, in_channels=1, sample_rate=16000,
                 stride=1, padding=0, dilation=1, bias=False, groups=1, freq_scale='Mel'):

        super(SincConv, self).__init__()

        if in_channels != 1:

            msg = "SincConv only support one input channel (here, in_channels = {%i})" % (in_channels)
            raise ValueError(msg)

        self.out_channels = out_channels+1
        self.kernel_size = kernel_size
        self.sample_rate = sample_rate

        # Forcing the filters to be odd (i.e, perfectly symmetrics)
        if kernel_size % 2 == 0:
            self.kernel_size = self.kernel_size+1

        self.device = device
        self.stride = stride
        self.padding = padding
        self.dilation = dilation

        if bias:
            raise ValueError('SincConv does not support bias.')
        if groups > 1:
            raise ValueError('SincConv does not support groups.')

        # initialize filterbanks using Mel scale
        NFFT = 512
        f = int(self.sample_rate/2)*np.linspace(0, 1, int(NFFT/2)+1)

        if freq_scale == 'Mel':
            fmel = self.to_mel(f)  # Hz to mel conversion
            fmelmax = np.max(fmel)
            fmelmin = np.min(fmel)
            filbandwidthsmel = np.linspace(fmelmin, fmelmax, self.out_channels+2)
            filbandwidthsf = self.to_hz(filbandwidthsmel)  # Mel to Hz conversion
            self.freq = filbandwidthsf[:self.out_channels]
        else:
            fmelmax = np.max(f)
            fmelmin = np.min(f)
            filbandwidthsmel = np.linspace(fmelmin, fmelmax, self.out_channels+2)
            self.freq = filbandwidthsmel[:self.out_channels]

        self.hsupp = torch.arange(-(self.kernel_size-1)/2, (self.kernel_size-1)/2+1)
        self.band_pass = torch.zeros(self.out_channels-1, self.kernel_size)

    def forward(self, x):
        for i in range(len(self.freq)-1):
            fmin = self.freq[i]
            fmax = self.freq[i+1]
            hHigh = (2*fmax/self.sample_rate)*np.sinc(2*fmax*self.hsupp/self.sample_rate)
            hLow = (2*fmin/self.sample_rate)*np.sinc(2*fmin*self.hsupp/self.sample_rate)
            hideal = hHigh-hLow

            self.band_pass[i, :] = Tensor(np.hamming(self.kernel_size))*Tensor(hideal)

        band_pass_filter = self.band_pass.to(self.device)

        self.filters = (band_pass_filter).view(self.out_channels-1, 1, self.kernel_size)

        return F.conv1d(x, self.filters, stride=self.stride,
                        padding=self.padding, dilation=self.dilation,
                        bias=None, groups=1)


class Residual_block(nn.Module):
    def __init__(self, nb_filts, first=False):
        super(Residual_block, self).__init__()
        self.first = first

        if not self.first:
            self.bn1 = nn.BatchNorm1d(num_features=nb_filts[0])

        self.lrelu = nn.LeakyReLU(negative_slope=0.3)

        self.conv1 = nn.Conv1d(in_channels=nb_filts[0],
                               out_channels=nb_filts[1],
                               kernel_size=3,
                               padding=1,
                               stride=1)

        self.bn2 = nn.BatchNorm1d(num_features=nb_filts[1])
        self.conv2 = nn.Conv1d(in_channels=nb_filts[1],
                               out_channels=nb_filts[1],
                               padding=1,
                               kernel_size=3,
                               stride=1)

        if nb_filts[0] != nb_filts[1]:
            self.downsample = True
            self.conv_downsample = nn.Conv1d(in_channels=nb_filts[0],
                                             out_channels=nb_filts[1],
                                             padding=0,
                                             kernel_size=1,
                                             stride=1)

        else:
            self.downsample = False
        self.mp = nn.MaxPool1d(3)

    def forward(self, x):
        identity = x
        if not self.first:
            out = self.bn1(x)
            out = self.lrelu(out)
        else:
            out = x

        out = self.conv1(out)
        out = self.bn2(out)
        out = self.lrelu(out)
        out = self.conv2(out)

        if self.downsample:
            identity = self.conv_downsample(identity)

        out += identity
        out = self.mp(out)
        return out


class RawNet(nn.Module):
    def __init__(self, d_args, device, bug=None):
        super(RawNet, self).__init__()

        self.device = device
        self.bug = bug

        self.Sinc_conv = SincConv(device=self.device,
                                  out_channels=d_args['filts'][0],
                                  kernel_size=d_args['first_conv'],
                                  in_channels=d_args['in_channels'], freq_scale='Mel'
                                  )

        self.first_bn = nn.BatchNorm1d(num_features=d_args['filts'][0])
        self.selu = nn.SELU(inplace=True)
        self.block0 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][1], first=True))
        self.block1 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][1]))
        self.block2 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][2]))
        d_args['filts'][2][0] = d_args['filts'][2][1]
        self.block3 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][2]))
        self.block4 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][2]))
        self.block5 = nn.Sequential(Residual_block(nb_filts=d_args['filts'][2]))
        self.avgpool = nn.AdaptiveAvgPool1d(1)

        self.fc_attention0 = self._make_attention_fc(in_features=d_args['filts'][1][-1],
                                                     l_out_features=d_args['filts'][1][-1])
        self.fc_attention1 = self._make_attention_fc(in_features=d_args['filts'][1][-1],
                                                     l_out_features=d_args['filts'][1][-1])
        self.fc_attention2 = self._make_attention_fc(in_features=d_args['filts'][2][-1],
                                                     l_out_features=d_args['filts'][2][-1])
        self.fc_attention3 = self._make_attention_fc(in_features=d_args['filts'][2][-1],
                                                     l_out_features=d_args['filts'][2][-1])
        self.fc_attention4 = self._make_attention_fc(in_features=d_args['filts'][2][-1],
                                                     l_out_features=d_args['filts'][2][-1])
        self.fc_attention5 = self._make_attention_fc(in_features=d_args['filts'][2][-1],
                                                     l_out_features=d_args['filts'][2][-1])

        self.bn_before_gru = nn.BatchNorm1d(num_features=d_args['filts'][2][-1])
        self.gru = nn.GRU(input_size=d_args['filts'][2][-1],
                          hidden_size=d_args['gru_node'],
                          num_layers=d_args['nb_gru_layer'],
                          batch_first=True)

        self.fc1_gru = nn.Linear(in_features=d_args['gru_node'],
                                 out_features=d_args['nb_fc_node'])

        self.fc2_gru = nn.Linear(in_features=d_args['nb_fc_node'],
                                 out_features=d_args['nb_classes'], bias=True)

        self.sig = nn.Sigmoid()

    def forward(self, x, y=None, is_test=False):

        nb_samp = x.shape[0]
        len_seq = x.shape[1]
        x = x.view(nb_samp, 1, len_seq)

        x = self.Sinc_conv(x)    # Fixed sinc filters convolution
        x = F.max_pool1d(torch.abs(x), 3)
        x = self.first_bn(x)
        x = self.selu(x)

        x0 = self.block0(x)
        y0 = self.avgpool(x0).view(x0.size(0), -1)  # torch.Size([batch, filter])
        y0 = self.fc_attention0(y0)
        y0 = self.sig(y0).view(y0.size(0), y0.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x0 * y0 + y0  # (batch, filter, time) x (batch, filter, 1)

        x1 = self.block1(x)
        y1 = self.avgpool(x1).view(x1.size(0), -1)  # torch.Size([batch, filter])
        y1 = self.fc_attention1(y1)
        y1 = self.sig(y1).view(y1.size(0), y1.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x1 * y1 + y1  # (batch, filter, time) x (batch, filter, 1)

        x2 = self.block2(x)
        y2 = self.avgpool(x2).view(x2.size(0), -1)  # torch.Size([batch, filter])
        y2 = self.fc_attention2(y2)
        y2 = self.sig(y2).view(y2.size(0), y2.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x2 * y2 + y2  # (batch, filter, time) x (batch, filter, 1)

        x3 = self.block3(x)
        y3 = self.avgpool(x3).view(x3.size(0), -1)  # torch.Size([batch, filter])
        y3 = self.fc_attention3(y3)
        y3 = self.sig(y3).view(y3.size(0), y3.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x3 * y3 + y3  # (batch, filter, time) x (batch, filter, 1)

        x4 = self.block4(x)
        y4 = self.avgpool(x4).view(x4.size(0), -1)  # torch.Size([batch, filter])
        y4 = self.fc_attention4(y4)
        y4 = self.sig(y4).view(y4.size(0), y4.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x4 * y4 + y4  # (batch, filter, time) x (batch, filter, 1)

        x5 = self.block5(x)
        y5 = self.avgpool(x5).view(x5.size(0), -1)  # torch.Size([batch, filter])
        y5 = self.fc_attention5(y5)
        y5 = self.sig(y5).view(y5.size(0), y5.size(1), -1)  # torch.Size([batch, filter, 1])
        x = x5 * y5 + y5  # (batch, filter, time) x (batch, filter, 1)

        x = self.bn_before_gru(x)
        x = self.selu(x)
        x = x.permute(0, 2, 1)  # (batch, filt, time) >> (batch, time, filt)
        self.gru.flatten_parameters()
        x, _ = self.gru(x)
        if self.bug == "gru_read_at_first_step":
            x = x[:, 0, :]
        else:
            x = x[:, -1, :]
        x = self.fc1_gru(x)
        x = self.fc2_gru(x)

        if not is_test:
            output = x
            return output

        else:
            output = F.softmax(x, dim=1)
            return output

    def _make_attention_fc(self, in_features, l_out_features):

        l_fc = []

        l_fc.append(nn.Linear(in_features=in_features,
                              out_features=l_out_features))

        return nn.Sequential(*l_fc)


# ---- main.py -----------------------------------------------------------------------------------------------------
def pad(x, max_len=64600):

    x_len = x.shape[0]
    if x_len >= max_len:
        return x[:max_len]
    # need to pad
    num_repeats = int(max_len / x_len)+1
    padded_x = np.tile(x, (1, num_repeats))[:, :max_len][0]

    return padded_x


def make_clips(seed, n, sr=16000):
    """(port) ASVspoof LA stand-in: voiced harmonic clips; spoofed ones (key 0) carry a high-band vocoder buzz."""
    rng = np.random.default_rng(seed)
    keys = (np.arange(n) % 4 == 0).astype(np.int64)  # 1 bona fide : 3 spoof
    rng.shuffle(keys)
    clips = []
    for key in keys:
        length = int(rng.integers(5000, 9000))
        t = np.arange(length) / sr
        f0 = rng.uniform(100, 250)
        env = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(2, 5) * t + rng.uniform(0, 2 * np.pi))
        x = sum(np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 2 * np.pi)) / h for h in range(1, 6)) * env
        if key == 0:
            fb = rng.uniform(3000, 6000)
            x = x + 0.5 * np.sign(np.sin(2 * np.pi * fb * t)) * (0.5 + 0.5 * np.sin(2 * np.pi * 60 * t))
        x = 0.3 * x + 0.05 * rng.standard_normal(length)
        clips.append(Tensor(pad(x.astype(np.float32), max_len=MAX_LEN)))
    return torch.stack(clips), torch.from_numpy(keys)


def evaluate_accuracy(data_loader, model, device):
    num_correct = 0.0
    num_total = 0.0
    model.eval()
    for batch_x, batch_y in data_loader:

        batch_size = batch_x.size(0)
        num_total += batch_size
        batch_x = batch_x.to(device)
        batch_y = batch_y.view(-1).type(torch.int64).to(device)
        batch_out = model(batch_x, batch_y)
        _, batch_pred = batch_out.max(dim=1)
        num_correct += (batch_pred == batch_y).sum(dim=0).item()
    return 100 * (num_correct / num_total)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = 'cpu'
    d_args = {'margin': 2, 'nb_samp': MAX_LEN, 'first_conv': 128, 'in_channels': 1,
              'filts': [16, [16, 16], [16, 32], [32, 32]], 'blocks': [2, 4], 'nb_fc_node': 32, 'gru_node': 32,
              'nb_gru_layer': 3, 'nb_classes': 2}
    args_lr, args_weight_decay, batch_size = 0.0001, 0.0001, 12

    model = RawNet(d_args, device, bug=bug).to(device)

    # Adam optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=args_lr, weight_decay=args_weight_decay)

    train_x, train_y = make_clips(seed, 192)
    dev_x, dev_y = make_clips(seed + 1000, 16)
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    dev_loader = DataLoader(TensorDataset(dev_x, dev_y), batch_size=batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(seed + 1))

    weight = torch.FloatTensor([1.0, 9.0]).to(device)
    criterion = nn.CrossEntropyLoss(weight=weight)
    state = {"it": None, "ii": 0}

    def next_batch():
        if state["it"] is None or state["ii"] == BATCHES_PER_EPOCH:
            if state["it"] is not None:  # end of train_epoch: the epoch's validation
                evaluate_accuracy(dev_loader, model, device)
            model.train()
            state["it"] = iter(train_loader)
            state["ii"] = 0
        state["ii"] += 1
        return next(state["it"])

    def train_step():
        batch_x, batch_y = next_batch()
        batch_x = batch_x.to(device)
        batch_y = batch_y.view(-1).type(torch.int64).to(device)
        batch_out = model(batch_x, batch_y, is_test=(bug == "softmax_output_into_loss"))
        batch_loss = criterion(batch_out, batch_y)
        _, batch_pred = batch_out.max(dim=1)
        if bug == "zero_grad_after_backward":
            batch_loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            batch_loss.backward()
        optimizer.step()
        return batch_loss.detach()

    def eval_fn(m, _batch):
        with torch.no_grad():
            acc = evaluate_accuracy(dev_loader, m, device)
        m.train()
        return acc

    batch = (train_x[:batch_size], train_y[:batch_size])
    return Program(name="rawnet2antispoof_la", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the scoring path's output (is_test=True: softmax probabilities) fed to CrossEntropyLoss, which applies
    # log-softmax again (classic: the flag the evaluation uses left on in training).
    Bug("softmax_output_into_loss", functools.partial(_build, bug="softmax_output_into_loss"), "learning_ledger",
        ("OBJECTIVE",)),
    # the GRU read at its first time step (x[:, 0, :]) instead of its last: the utterance summary sees only the
    # first frame of the sequence (classic).
    Bug("gru_read_at_first_step", functools.partial(_build, bug="gru_read_at_first_step"), "learning_ledger",
        ("DEPENDENCY",)),
    # optimizer.zero_grad() moved after backward: every step applies a zeroed gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
