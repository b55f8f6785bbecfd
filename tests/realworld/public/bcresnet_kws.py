"""BC-ResNet keyword spotter of Qualcomm-AI-research/bcresnet: log-mel features (``LogMel``: a 40-band mel
spectrogram of the 16 kHz waveform, n_fft 512, win 480, hop 160, ``log(mel + 1e-6)``) computed in the training step by
``Preprocess`` (background-noise mixing and time-shift augmentation), the broadcasted-residual network
``BCResNets(8)`` (BC-ResNet-1: frequency-wise depthwise convs with SubSpectralNorm, time-wise dilated depthwise convs
on the frequency-averaged map, 12 classes), ``F.cross_entropy``, SGD(momentum 0.9, weight_decay 1e-3) with the loop's
own linear warmup + cosine learning rate written into the param groups every iteration, ``model.zero_grad()`` after
``optimizer.step()``.

Source: https://github.com/Qualcomm-AI-research/bcresnet
Commit: 656f947a2a757ab5f36f649ed303ea0191cf553e
Files: main.py (Trainer.__call__, Trainer.Test, _load_data, _load_model), bcresnet.py, subspectralnorm.py, utils.py
       (Preprocess, LogMel, Padding)
License: BSD-3-Clause-Clear (Copyright (c) 2023 Qualcomm Technologies, Inc.; full text in
         LICENSES/Qualcomm-AI-research-bcresnet.txt)
Domain: audio (keyword spotting on log-mel spectrograms)

Deviations from the original:
- sizes: batch_size 100 -> 32, total_epoch 200 -> 20, clips of 1 s -> 0.5 s (8000 samples at SR 16000: 51 frames),
  ``tau`` 1 (BC-ResNet-1, no SpecAugment) as the default; warmup_epoch 5, init_lr 0.1, the optimizer unchanged;
- torchaudio is not installed: ``torchaudio.transforms.MelSpectrogram`` (its defaults: hann window of win_length
  padded to n_fft, ``center=True``, reflect padding, power 2, HTK mel scale, f_min 0, f_max SR/2, no filter-bank
  norm) is written out with ``torch.stft`` and the filter bank of ``torchaudio.functional.melscale_fbanks``;
- data: instead of Google Speech Commands (download, 12-class split), synthetic clips made from ``seed``: class 0
  ("_silence_") is empty, class 1 ("_unknown_") a random pair of tones, classes 2-11 each two fixed tone frequencies
  with random phases, amplitudes and onsets, plus low noise; ``Padding`` runs as the dataset transform; the
  ``_background_noise_`` wav files are replaced by six seeded noise clips (white and low-passed) of 2 s;
- ``random`` / ``np.random`` in ``Preprocess`` are ``random.Random(seed)`` / ``np.random.RandomState(seed)``
  instances (the original uses the global generators); no GPU; tqdm and printing are left out;
- one ``train_step`` is one iteration of ``Trainer.__call__``'s inner loop (lr written into the param groups,
  ``preprocess_train(inputs, labels, augment=True)``, forward, ``F.cross_entropy``, backward, step,
  ``model.zero_grad()``); ``model.train()`` runs at the start of each epoch as in the loop; ``eval_fn`` is
  ``Trainer.Test`` on one batch (under ``no_grad`` and ``model.eval()``, as the validation does, with
  ``augment=False`` as the final test) and restores ``model.train()`` as the next epoch does; the declared batch
  holds the preprocessed (log-mel) inputs the network is called on.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random as _random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SR = 16000
CLIP = 8000  # samples per clip (the original: SR, one second)
N_TRAIN, N_VALID = 320, 64


# ---- subspectralnorm.py ------------------------------------------------------------------------------------------

class SubSpectralNorm(nn.Module):
    def __init__(self, num_features, spec_groups=16, affine="Sub", batch=True, dim=2):
        super().__init__()
        self.spec_groups = spec_groups
        self.affine_all = False
        affine_norm = False
        if (
            affine == "Sub"
        ):  # affine transform for each sub group. use affine of torch implementation
            affine_norm = True
        elif affine == "All":
            self.affine_all = True
            self.weight = nn.Parameter(torch.ones((1, num_features, 1, 1)))
            self.bias = nn.Parameter(torch.zeros((1, num_features, 1, 1)))
        if batch:
            self.ssnorm = nn.BatchNorm2d(num_features * spec_groups, affine=affine_norm)
        else:
            self.ssnorm = nn.InstanceNorm2d(num_features * spec_groups, affine=affine_norm)
        self.sub_dim = dim

    def forward(self, x):  # when dim h is frequency dimension
        if self.sub_dim in (3, -1):
            x = x.transpose(2, 3)
            x = x.contiguous()
        b, c, h, w = x.size()
        assert h % self.spec_groups == 0
        x = x.view(b, c * self.spec_groups, h // self.spec_groups, w)
        x = self.ssnorm(x)
        x = x.view(b, c, h, w)
        if self.affine_all:
            x = x * self.weight + self.bias
        if self.sub_dim in (3, -1):
            x = x.transpose(2, 3)
            x = x.contiguous()
        return x


# ---- bcresnet.py ----------------------------------------------------------------------------------------------------

class ConvBNReLU(nn.Module):
    def __init__(
        self,
        in_plane,
        out_plane,
        idx,
        kernel_size=3,
        stride=1,
        groups=1,
        use_dilation=False,
        activation=True,
        swish=False,
        BN=True,
        ssn=False,
    ):
        super().__init__()

        def get_padding(kernel_size, use_dilation):
            rate = 1  # dilation rate
            padding_len = (kernel_size - 1) // 2
            if use_dilation and kernel_size > 1:
                rate = int(2**self.idx)
                padding_len = rate * padding_len
            return padding_len, rate

        self.idx = idx

        # padding and dilation rate
        if isinstance(kernel_size, (list, tuple)):
            padding = []
            rate = []
            for k_size in kernel_size:
                temp_padding, temp_rate = get_padding(k_size, use_dilation)
                rate.append(temp_rate)
                padding.append(temp_padding)
        else:
            padding, rate = get_padding(kernel_size, use_dilation)

        # convbnrelu block
        layers = []
        layers.append(
            nn.Conv2d(in_plane, out_plane, kernel_size, stride, padding, rate, groups, bias=False)
        )
        if ssn:
            layers.append(SubSpectralNorm(out_plane, 5))
        elif BN:
            layers.append(nn.BatchNorm2d(out_plane))
        if swish:
            layers.append(nn.SiLU(True))
        elif activation:
            layers.append(nn.ReLU(True))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return self.block(x)


class BCResBlock(nn.Module):
    def __init__(self, in_plane, out_plane, idx, stride):
        super().__init__()
        self.transition_block = in_plane != out_plane
        kernel_size = (3, 3)

        # 2D part (f2)
        layers = []
        if self.transition_block:
            layers.append(ConvBNReLU(in_plane, out_plane, idx, 1, 1))
            in_plane = out_plane
        layers.append(
            ConvBNReLU(
                in_plane,
                out_plane,
                idx,
                (kernel_size[0], 1),
                (stride[0], 1),
                groups=in_plane,
                ssn=True,
                activation=False,
            )
        )
        self.f2 = nn.Sequential(*layers)
        self.avg_gpool = nn.AdaptiveAvgPool2d((1, None))

        # 1D part (f1)
        self.f1 = nn.Sequential(
            ConvBNReLU(
                out_plane,
                out_plane,
                idx,
                (1, kernel_size[1]),
                (1, stride[1]),
                groups=out_plane,
                swish=True,
                use_dilation=True,
            ),
            nn.Conv2d(out_plane, out_plane, 1, bias=False),
            nn.Dropout2d(0.1),
        )

    def forward(self, x):
        # 2D part
        shortcut = x
        x = self.f2(x)
        aux_2d_res = x
        x = self.avg_gpool(x)

        # 1D part
        x = self.f1(x)
        x = x + aux_2d_res
        if not self.transition_block:
            x = x + shortcut
        x = F.relu(x, True)
        return x


def BCBlockStage(num_layers, last_channel, cur_channel, idx, use_stride):
    stage = nn.ModuleList()
    channels = [last_channel] + [cur_channel] * num_layers
    for i in range(num_layers):
        stride = (2, 1) if use_stride and i == 0 else (1, 1)
        stage.append(BCResBlock(channels[i], channels[i + 1], idx, stride))
    return stage


class BCResNets(nn.Module):
    def __init__(self, base_c, num_classes=12, bug=None):
        super().__init__()
        self.num_classes = num_classes
        self.bug = bug
        self.n = [2, 2, 4, 4]  # identical modules repeated n times
        self.c = [
            base_c * 2,
            base_c,
            int(base_c * 1.5),
            base_c * 2,
            int(base_c * 2.5),
            base_c * 4,
        ]  # num channels
        self.s = [1, 2]  # stage using stride
        self._build_network()

    def _build_network(self):
        # Head: (Conv-BN-ReLU)
        self.cnn_head = nn.Sequential(
            nn.Conv2d(1, self.c[0], 5, (2, 1), 2, bias=False),
            nn.BatchNorm2d(self.c[0]),
            nn.ReLU(True),
        )
        # Body: BC-ResBlocks
        self.BCBlocks = nn.ModuleList([])
        for idx, n in enumerate(self.n):
            use_stride = idx in self.s
            self.BCBlocks.append(BCBlockStage(n, self.c[idx], self.c[idx + 1], idx, use_stride))

        # Classifier
        self.classifier = nn.Sequential(
            nn.Conv2d(
                self.c[-2], self.c[-2], (5, 5), bias=False, groups=self.c[-2], padding=(0, 2)
            ),
            nn.Conv2d(self.c[-2], self.c[-1], 1, bias=False),
            nn.BatchNorm2d(self.c[-1]),
            nn.ReLU(True),
            nn.AdaptiveAvgPool2d((1, 1)),
            nn.Conv2d(self.c[-1], self.num_classes, 1),
        )

    def forward(self, x):
        x = self.cnn_head(x)
        for i, num_modules in enumerate(self.n):
            for j in range(num_modules):
                x = self.BCBlocks[i][j](x)
        x = self.classifier(x)
        x = x.view(-1, x.shape[1])
        if self.bug == "softmax_before_cross_entropy":
            x = F.softmax(x, dim=-1)  # "the classifier outputs probabilities"
        return x


# ---- utils.py: Preprocess, LogMel (torchaudio's MelSpectrogram written out), Padding -------------------------------

def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    """torchaudio.functional.melscale_fbanks with norm=None, mel_scale='htk'."""
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min = 2595.0 * math.log10(1.0 + (f_min / 700.0))
    m_max = 2595.0 * math.log10(1.0 + (f_max / 700.0))
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))


class MelSpectrogram(nn.Module):
    """torchaudio.transforms.MelSpectrogram(sample_rate, n_fft, win_length, hop_length, n_mels) with its defaults."""

    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, n_mels=128):
        super().__init__()
        self.n_fft, self.win_length = n_fft, win_length or n_fft
        self.hop_length = hop_length or self.win_length // 2
        self.register_buffer("window", torch.hann_window(self.win_length))
        self.register_buffer("fb", melscale_fbanks(n_fft // 2 + 1, 0.0, float(sample_rate // 2), n_mels, sample_rate))

    def forward(self, waveform):
        shape = waveform.size()
        waveform = waveform.reshape(-1, shape[-1])
        spec = torch.stft(waveform, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, pad_mode="reflect", normalized=False, onesided=True,
                          return_complex=True)
        spec = spec.abs().pow(2.0)
        spec = spec.reshape(shape[:-1] + spec.shape[-2:])
        return torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)


class Preprocess:
    def __init__(
        self,
        background_noise,
        device,
        hop_length=160,
        win_length=480,
        n_fft=512,
        n_mels=40,
        specaug=False,
        sample_rate=SR,
        frequency_masking_para=7,
        time_masking_para=20,
        frequency_mask_num=2,
        time_mask_num=2,
        seed=0,
    ):
        self.background_noise = background_noise  # [torchaudio.load(f)[0] for f in glob(noise_loc + "/*.wav")]
        self.feature = LogMel(
            device,
            sample_rate=sample_rate,
            hop_length=hop_length,
            win_length=win_length,
            n_fft=n_fft,
            n_mels=n_mels,
        )
        self.sample_len = CLIP
        self.specaug = specaug
        self.device = device
        self.random = _random.Random(seed)
        self.np_random = np.random.RandomState(seed)
        if self.specaug:
            raise NotImplementedError("spec_augment (tau >= 1.5) is not ported")

    def __call__(self, x, labels, augment=True, noise_prob=0.8, is_train=True):
        assert len(x.shape) == 3
        if augment:
            for idx in range(x.shape[0]):
                if labels[idx] != 0 and (not is_train or self.random.random() > noise_prob):
                    continue
                noise_amp = (
                    self.np_random.uniform(0, 0.1) if labels[idx] != 0 else self.np_random.uniform(0, 1)
                )
                noise = self.random.choice(self.background_noise).to(self.device)
                sample_loc = self.random.randint(0, noise.shape[-1] - self.sample_len)
                noise = noise_amp * noise[:, sample_loc : sample_loc + CLIP]

                if is_train:
                    x_shift = int(self.np_random.uniform(-0.1, 0.1) * SR)
                    zero_padding = torch.zeros(1, np.abs(x_shift)).to(self.device)
                    if x_shift < 0:
                        temp_x = torch.cat([zero_padding, x[idx, :, :x_shift]], dim=-1)
                    else:
                        temp_x = torch.cat([x[idx, :, x_shift:], zero_padding], dim=-1)
                    x[idx] = temp_x + noise
                else:  # valid
                    x[idx] = x[idx] + noise
                x[idx] = torch.clamp(x[idx], -1.0, 1.0)

        x = self.feature(x)
        return x


class LogMel:
    def __init__(
        self, device, sample_rate=SR, hop_length=160, win_length=480, n_fft=512, n_mels=40
    ):
        self.mel = MelSpectrogram(
            sample_rate=sample_rate,
            hop_length=hop_length,
            n_fft=n_fft,
            win_length=win_length,
            n_mels=n_mels,
        )
        self.device = device

    def __call__(self, x):
        self.mel = self.mel.to(self.device)
        output = (self.mel(x) + 1e-6).log()
        return output


class Padding:
    """zero pad to have 1 sec len"""

    def __init__(self):
        self.output_len = CLIP

    def __call__(self, x):
        pad_len = self.output_len - x.shape[-1]
        if pad_len > 0:
            x = torch.cat([x, torch.zeros([x.shape[0], pad_len])], dim=-1)
        elif pad_len < 0:
            raise ValueError("no sample exceed 1sec in GSC.")
        return x


# ---- synthetic "speech commands" and background noise --------------------------------------------------------------

class SyntheticCommands(Dataset):
    """SpeechCommand's (waveform [1, T], label) pairs, made from ``seed``."""

    def __init__(self, n, seed, transform=None):
        g = np.random.RandomState(seed)
        tones = np.random.RandomState(1234).uniform(200, 3500, size=(12, 2))  # the same words for every seed
        t = np.arange(CLIP) / SR
        self.data = []
        for _ in range(n):
            label = int(g.randint(0, 12))
            length = g.randint(CLIP // 2, CLIP + 1)
            wav = np.zeros(length)
            if label != 0:
                f = tones[label] if label != 1 else g.uniform(200, 3500, size=2)
                onset = g.randint(0, length // 4)
                dur = length - onset
                env = np.hanning(dur)
                for k in range(2):
                    wav[onset:] += g.uniform(0.2, 0.4) * env * np.sin(2 * np.pi * f[k] * t[:dur] + g.uniform(0, 6.3))
            wav += 0.005 * g.standard_normal(length)
            self.data.append((torch.tensor(wav, dtype=torch.float32)[None], label))
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        sample, label = self.data[idx]
        if self.transform:
            sample = self.transform(sample)
        return sample, label


def make_background_noise(seed):
    g = torch.Generator().manual_seed(seed + 77)
    noises = []
    for k in range(6):
        n = torch.randn(1, 2 * SR, generator=g) * 0.3
        if k % 2:
            n = F.avg_pool1d(n[None], 9, stride=1, padding=4)[0]
        noises.append(n.clamp(-1, 1))
    return noises


# ---- main.py: Trainer ----------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    tau = 1
    transform = Padding()
    train_dataset = SyntheticCommands(N_TRAIN, seed, transform=transform)
    train_loader = DataLoader(train_dataset, batch_size=32, shuffle=True, num_workers=0, drop_last=False,
                              generator=torch.Generator().manual_seed(seed))
    background_noise = make_background_noise(seed)
    specaugment = tau >= 1.5
    frequency_masking_para = {1: 0, 1.5: 1, 2: 3, 3: 5, 6: 7, 8: 7}
    preprocess_train = Preprocess(background_noise, device, specaug=specaugment,
                                  frequency_masking_para=frequency_masking_para[tau], seed=seed)
    preprocess_test = Preprocess(background_noise, device, seed=seed + 1)
    model = BCResNets(int(tau * 8), bug=bug).to(device)

    # train hyperparameters
    total_epoch = 20
    warmup_epoch = 5
    init_lr = 1e-1
    lr_lower_limit = 0

    # optimizer
    optimizer = torch.optim.SGD(model.parameters(), lr=0, weight_decay=1e-3, momentum=0.9)
    n_step_warmup = len(train_loader) * warmup_epoch
    total_iter = len(train_loader) * total_epoch
    state = {"iterations": 0, "it": None}

    def next_sample():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        sample = next_sample()
        # lr cos schedule
        state["iterations"] += 1
        iterations = state["iterations"]
        if iterations < n_step_warmup:
            lr = init_lr * iterations / n_step_warmup
        else:
            lr = lr_lower_limit + 0.5 * (init_lr - lr_lower_limit) * (
                1
                + np.cos(
                    np.pi * (iterations - n_step_warmup) / (total_iter - n_step_warmup)
                )
            )
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        inputs, labels = sample
        inputs = inputs.to(device)
        labels = labels.to(device)
        inputs = preprocess_train(inputs, labels, augment=True)
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, labels)
        loss.backward()
        if bug == "zero_grad_before_step":
            model.zero_grad()
            optimizer.step()
        else:
            optimizer.step()
            model.zero_grad()
        return loss.detach()

    def Test(model, batch):
        """Trainer.Test on one batch of preprocessed inputs: accuracy in percent."""
        inputs, labels = batch
        with torch.no_grad():
            model.eval()
            outputs = model(inputs)
            prediction = torch.argmax(outputs, dim=-1)
            true_count = torch.sum(prediction == labels).detach().cpu().numpy()
        model.train()
        return float(true_count / float(len(labels)) * 100.0)  # percentage

    valid = SyntheticCommands(N_VALID, seed + 1000, transform=transform)
    x0, y0 = next(iter(DataLoader(valid, batch_size=32)))
    batch = (preprocess_test(x0.clone(), y0, is_train=False, augment=False), y0)
    return Program(name="bcresnet_kws", model=model, batch=batch, loss_fn=F.cross_entropy, optimizer=optimizer,
                   train_step=train_step, eval_fn=Test, task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # model.zero_grad() moved between backward() and step(): SGD only ever sees zero gradients (weight decay and
    # momentum of nothing), while the loss is reported as usual (classic misplaced zero_grad).
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe",
        ("cnn_head.0.weight",)),
    # a softmax appended to the classifier, then F.cross_entropy on the probabilities (classic: the loss applies
    # log_softmax itself).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
]
