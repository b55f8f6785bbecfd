"""Speaker recognition with clovaai's voxceleb_trainer (``configs/ResNetSE34L_AM.yaml``): ``SpeakerNet`` = a
``ResNetSE34L`` (log-mel 40 filterbank under ``no_grad`` + InstanceNorm, squeeze-excitation residual blocks,
self-attentive pooling, linear embedding) and the AM-softmax loss (cosine logits against a learnable ``W``, margin
0.3 on the target class, scale 30, cross-entropy); Adam over the ``SpeakerNet``'s parameters (the loss's ``W``
included), StepLR per epoch; the per-speaker sampler that keeps one utterance of a speaker per batch.

Source: https://github.com/clovaai/voxceleb_trainer
Commit: f51bab870672a9b0b50fa158b4e30f329e7866d7
Files: trainSpeakerNet.py, SpeakerNet.py, models/ResNetSE34L.py, models/ResNetBlocks.py, loss/amsoftmax.py, utils.py,
  optimizer/adam.py, scheduler/steplr.py, DatasetLoader.py, configs/ResNetSE34L_AM.yaml
License: MIT (Copyright (c) 2020-present NAVER Corp.; full text in LICENSES/clovaai-voxceleb_trainer.txt;
  loss/amsoftmax.py notes it is adapted from CoinCheung/pytorch-loss, MIT)
Domain: audio, speaker recognition (speaker classification training of a verification embedding)

Deviations from the original:
- sizes: num_filters [16, 32, 64, 128] -> [8, 8, 16, 16] (the SE reduction 8 needs at least 8 channels), layers
  [3, 4, 6, 3] -> [1, 1, 1, 1], nOut 512 -> 32, nClasses 5994 -> 12, batch_size 200 -> 8, max_frames 200 -> 20
  (3440 samples); scale 30, margin 0.3, lr 0.001, weight_decay 0, lr_decay 0.95, test_interval 10 unchanged;
- torchaudio is not available: ``torchaudio.transforms.MelSpectrogram`` (n_fft 512, win 400, hop 160, hamming
  window, power 2, HTK mel scale, no filter normalization, centered reflect padding) is written out with
  ``torch.stft`` and the triangular filterbank torchaudio builds;
- data: VoxCeleb2 wav files are replaced by synthetic utterances made from ``seed`` (each speaker a fundamental
  frequency and a formant envelope over its harmonics, random phase and noise per utterance), read through the
  original ``loadWAV`` crop logic on arrays instead of soundfile; the MUSAN/RIR augmentation is off (as without
  ``--augment``); the sampler is the original's non-distributed path;
- CPU only: ``.cuda()``, ``WrappedModel``/DDP, mixed precision (``--mixedprec`` off) and the ``autocast("cuda")``
  context are left out; the ``print`` calls in constructors are dropped; logging and tqdm dropped;
- one ``train_step`` is one iteration of ``ModelTrainer.train_network``'s loop (the StepLR steps once per epoch of
  the loader, as ``lr_step == "epoch"``; ``train_network``'s ``model.train()``, run once per epoch after the
  between-epoch evaluation, runs at the top of each step); ``eval_fn`` is the loss/accuracy on a given batch in eval mode (the
  verification EER over trial lists is left out);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, PLR0402

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ARGS = dict(max_frames=20, batch_size=8, max_seg_per_spk=500, seed=10, test_interval=10, max_epoch=500,
            trainfunc="amsoftmax", optimizer="adam", scheduler="steplr", lr=0.001, lr_decay=0.95, weight_decay=0,
            margin=0.3, scale=30, nPerSpeaker=1, nClasses=12, n_mels=40, log_input=True, model="ResNetSE34L",
            encoder_type="SAP", nOut=32, distributed=False)
N_UTT_PER_SPK = 12


# ---- torchaudio.transforms.MelSpectrogram, written out -----------------------------------------------------------

def _hz_to_mel(freq):
    return 2595.0 * math.log10(1.0 + (freq / 700.0))


def _mel_to_hz(mels):
    return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)


def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min = _hz_to_mel(f_min)
    m_max = _hz_to_mel(f_max)
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = _mel_to_hz(m_pts)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    zero = torch.zeros(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(zero, torch.min(down_slopes, up_slopes))


class MelSpectrogram(nn.Module):
    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, window_fn=torch.hann_window,
                 n_mels=128):
        super().__init__()
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.register_buffer("window", window_fn(self.win_length))
        self.register_buffer("fb", melscale_fbanks(n_fft // 2 + 1, 0.0, float(sample_rate // 2), n_mels, sample_rate))

    def forward(self, waveform):
        spec = torch.stft(waveform, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, pad_mode="reflect", normalized=False, onesided=True,
                          return_complex=True).abs().pow(2.0)
        return torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)


# ---- utils.py ----------------------------------------------------------------------------------------------------

def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


# ---- models/ResNetBlocks.py ----------------------------------------------------------------------------------------

class SEBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, reduction=8):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.se = SELayer(planes, reduction)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.relu(out)
        out = self.bn1(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.se(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)
        return out


class SELayer(nn.Module):
    def __init__(self, channel, reduction=8):
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
                nn.Linear(channel, channel // reduction),
                nn.ReLU(inplace=True),
                nn.Linear(channel // reduction, channel),
                nn.Sigmoid()
        )

    def forward(self, x):
        b, c, _, _ = x.size()
        y = self.avg_pool(x).view(b, c)
        y = self.fc(y).view(b, c, 1, 1)
        return x * y


# ---- models/ResNetSE34L.py ---------------------------------------------------------------------------------------

class ResNetSE(nn.Module):
    def __init__(self, block, layers, num_filters, nOut, encoder_type='SAP', n_mels=40, log_input=True, **kwargs):
        super().__init__()

        self.inplanes   = num_filters[0]
        self.encoder_type = encoder_type
        self.n_mels     = n_mels
        self.log_input  = log_input

        self.conv1 = nn.Conv2d(1, num_filters[0] , kernel_size=7, stride=(2, 1), padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(num_filters[0])
        self.relu = nn.ReLU(inplace=True)

        self.layer1 = self._make_layer(block, num_filters[0], layers[0])
        self.layer2 = self._make_layer(block, num_filters[1], layers[1], stride=(2, 2))
        self.layer3 = self._make_layer(block, num_filters[2], layers[2], stride=(2, 2))
        self.layer4 = self._make_layer(block, num_filters[3], layers[3], stride=(1, 1))

        self.instancenorm   = nn.InstanceNorm1d(n_mels)
        self.torchfb        = MelSpectrogram(sample_rate=16000, n_fft=512, win_length=400, hop_length=160, window_fn=torch.hamming_window, n_mels=n_mels)

        if self.encoder_type == "SAP":
            self.sap_linear = nn.Linear(num_filters[3] * block.expansion, num_filters[3] * block.expansion)
            self.attention = self.new_parameter(num_filters[3] * block.expansion, 1)
            out_dim = num_filters[3] * block.expansion
        elif self.encoder_type == "ASP":
            self.sap_linear = nn.Linear(num_filters[3] * block.expansion, num_filters[3] * block.expansion)
            self.attention = self.new_parameter(num_filters[3] * block.expansion, 1)
            out_dim = num_filters[3] * block.expansion * 2
        else:
            raise ValueError('Undefined encoder')

        self.fc = nn.Linear(out_dim, nOut)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def new_parameter(self, *size):
        out = nn.Parameter(torch.FloatTensor(*size))
        nn.init.xavier_normal_(out)
        return out

    def forward(self, x):

        with torch.no_grad():
            x = self.torchfb(x)+1e-6
            if self.log_input: x = x.log()
            x = self.instancenorm(x).unsqueeze(1).detach()

        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = torch.mean(x, dim=2, keepdim=True)

        if self.encoder_type == "SAP":
            x = x.permute(0,3,1,2).squeeze(-1)
            h = torch.tanh(self.sap_linear(x))
            w = torch.matmul(h, self.attention).squeeze(dim=2)
            w = F.softmax(w, dim=1).view(x.size(0), x.size(1), 1)
            x = torch.sum(x * w, dim=1)
        elif self.encoder_type == "ASP":
            x = x.permute(0,3,1,2).squeeze(-1)
            h = torch.tanh(self.sap_linear(x))
            w = torch.matmul(h, self.attention).squeeze(dim=2)
            w = F.softmax(w, dim=1).view(x.size(0), x.size(1), 1)
            mu = torch.sum(x * w, dim=1)
            rh = torch.sqrt( ( torch.sum((x**2) * w, dim=1) - mu**2 ).clamp(min=1e-5) )
            x = torch.cat((mu,rh),1)

        x = x.view(x.size()[0], -1)
        x = self.fc(x)

        return x


def MainModel(nOut=256, **kwargs):
    # Number of filters
    num_filters = [8, 8, 16, 16]
    model = ResNetSE(SEBasicBlock, [1, 1, 1, 1], num_filters, nOut, **kwargs)
    return model


# ---- loss/amsoftmax.py -------------------------------------------------------------------------------------------

class LossFunction(nn.Module):
    def __init__(self, nOut, nClasses, margin=0.3, scale=15, bug=None, **kwargs):
        super().__init__()

        self.test_normalize = True

        self.m = margin
        self.s = scale
        self.in_feats = nOut
        self.W = torch.nn.Parameter(torch.randn(nOut, nClasses), requires_grad=True)
        self.ce = nn.CrossEntropyLoss()
        nn.init.xavier_normal_(self.W, gain=1)
        self.bug = bug

    def forward(self, x, label=None):

        assert x.size()[0] == label.size()[0]
        assert x.size()[1] == self.in_feats

        x_norm = torch.norm(x, p=2, dim=1, keepdim=True).clamp(min=1e-12)
        x_norm = torch.div(x, x_norm)
        w_norm = torch.norm(self.W, p=2, dim=0, keepdim=True).clamp(min=1e-12)
        w_norm = torch.div(self.W, w_norm)
        costh = torch.mm(x_norm, w_norm)
        label_view = label.view(-1, 1)
        delt_costh = torch.zeros(costh.size(), device=x.device).scatter_(1, label_view, self.m)
        if self.bug == "margin_added_to_target":
            # the margin's sign flipped: the target's cosine is raised, the task made easier instead of harder
            costh_m = costh + delt_costh
        else:
            costh_m = costh - delt_costh
        costh_m_s = self.s * costh_m
        loss    = self.ce(costh_m_s, label)
        prec1   = accuracy(costh_m_s.detach(), label.detach(), topk=(1,))[0]
        return loss, prec1


# ---- SpeakerNet.py -----------------------------------------------------------------------------------------------

class SpeakerNet(nn.Module):
    def __init__(self, model, optimizer, trainfunc, nPerSpeaker, bug=None, **kwargs):
        super().__init__()

        self.__S__ = MainModel(**kwargs)

        self.__L__ = LossFunction(bug=bug, **kwargs)

        self.nPerSpeaker = nPerSpeaker

    def forward(self, data, label=None):

        data = data.reshape(-1, data.size()[-1]).to(next(self.parameters()).device)
        outp = self.__S__.forward(data)

        if label is None:
            return outp

        else:

            outp = outp.reshape(self.nPerSpeaker, -1, outp.size()[-1]).transpose(1, 0).squeeze(1)

            nloss, prec1 = self.__L__.forward(outp, label)

            return nloss, prec1


def Optimizer(parameters, lr, weight_decay, **kwargs):
    return torch.optim.Adam(parameters, lr = lr, weight_decay = weight_decay)


def Scheduler(optimizer, test_interval, max_epoch, lr_decay, **kwargs):
    sche_fn = torch.optim.lr_scheduler.StepLR(optimizer, step_size=test_interval, gamma=lr_decay)
    lr_step = 'epoch'
    return sche_fn, lr_step


class ModelTrainer:
    def __init__(self, speaker_model, optimizer, scheduler, bug=None, **kwargs):

        self.__model__ = speaker_model

        if bug == "loss_weights_left_out_of_optimizer":
            # the optimizer built over the embedding network only: the AM-softmax class weights W never move
            self.__optimizer__ = Optimizer(self.__model__.__S__.parameters(), **kwargs)
        else:
            self.__optimizer__ = Optimizer(self.__model__.parameters(), **kwargs)

        self.__scheduler__, self.lr_step = Scheduler(self.__optimizer__, **kwargs)

        self.bug = bug

        assert self.lr_step in ["epoch", "iteration"]

    def train_step(self, data, data_label):
        """One iteration of ``train_network``'s loop (mixed precision off)."""
        self.__model__.train()

        data = data.transpose(1, 0)

        if self.bug != "zero_grad_dropped":
            self.__model__.zero_grad()

        label = torch.LongTensor(data_label)

        nloss, prec1 = self.__model__(data, label)
        nloss.backward()
        self.__optimizer__.step()

        if self.lr_step == "iteration":
            self.__scheduler__.step()

        return nloss.detach(), prec1.detach()


# ---- DatasetLoader.py, on synthetic utterances ---------------------------------------------------------------------

def round_down(num, divisor):
    return num - (num%divisor)


def loadWAV(audio, max_frames, rng, evalmode=True, num_eval=10):

    # Maximum audio length
    max_audio = max_frames * 160 + 240

    audiosize = audio.shape[0]

    if audiosize <= max_audio:
        shortage    = max_audio - audiosize + 1
        audio       = numpy.pad(audio, (0, shortage), 'wrap')
        audiosize   = audio.shape[0]

    if evalmode:
        startframe = numpy.linspace(0,audiosize-max_audio,num=num_eval)
    else:
        startframe = numpy.array([numpy.int64(rng.random()*(audiosize-max_audio))])

    feats = []
    if evalmode and max_frames == 0:
        feats.append(audio)
    else:
        for asf in startframe:
            feats.append(audio[int(asf):int(asf)+max_audio])

    feat = numpy.stack(feats,axis=0).astype(numpy.float64)

    return feat


def make_utterances(seed, nClasses, n_per_spk, length=6400, sr=16000):
    """Each speaker: a fundamental frequency (100-300 Hz) and a formant envelope (two peaks) over 20 harmonics;
    each utterance: that voice with jittered pitch, random phases, a slow amplitude contour and noise."""
    rng = numpy.random.default_rng(seed)
    t = numpy.arange(length) / sr
    audios, labels = [], []
    for spk in range(nClasses):
        f0 = rng.uniform(100, 300)
        formants = rng.uniform(300, 3500, 2)
        for _ in range(n_per_spk):
            f = f0 * rng.uniform(0.97, 1.03)
            wav = numpy.zeros(length)
            for k in range(1, 21):
                fk = k * f
                gain = sum(numpy.exp(-((fk - fm) / 300.0) ** 2) for fm in formants) + 0.02
                wav += gain * numpy.sin(2 * numpy.pi * fk * t + rng.uniform(0, 2 * numpy.pi))
            wav *= 0.5 + 0.5 * numpy.sin(2 * numpy.pi * rng.uniform(1, 4) * t + rng.uniform(0, 6.28)) ** 2
            wav += 0.05 * rng.standard_normal(length)
            audios.append((wav / numpy.abs(wav).max()).astype(numpy.float64))
            labels.append(spk)
    return audios, labels


class train_dataset_loader(torch.utils.data.Dataset):
    def __init__(self, audios, labels, max_frames, seed, **kwargs):
        self.max_frames = max_frames
        self.data_list  = audios
        self.data_label = labels
        self.rng = random.Random(seed)

    def __getitem__(self, indices):

        feat = []

        for index in indices:

            audio = loadWAV(self.data_list[index], self.max_frames, self.rng, evalmode=False)

            feat.append(audio)

        feat = numpy.concatenate(feat, axis=0)

        return torch.FloatTensor(feat), self.data_label[index]

    def __len__(self):
        return len(self.data_list)


class train_dataset_sampler(torch.utils.data.Sampler):
    def __init__(self, data_source, nPerSpeaker, max_seg_per_spk, batch_size, distributed, seed, **kwargs):

        self.data_label         = data_source.data_label
        self.nPerSpeaker        = nPerSpeaker
        self.max_seg_per_spk    = max_seg_per_spk
        self.batch_size         = batch_size
        self.epoch              = 0
        self.seed               = seed
        self.distributed        = distributed
        self.num_samples        = 0

    def __iter__(self):

        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        indices = torch.randperm(len(self.data_label), generator=g).tolist()

        data_dict = {}

        # Sort into dictionary of file indices for each ID
        for index in indices:
            speaker_label = self.data_label[index]
            if not (speaker_label in data_dict):
                data_dict[speaker_label] = []
            data_dict[speaker_label].append(index)


        ## Group file indices for each class
        dictkeys = list(data_dict.keys())
        dictkeys.sort()

        lol = lambda lst, sz: [lst[i:i+sz] for i in range(0, len(lst), sz)]

        flattened_list = []
        flattened_label = []

        for findex, key in enumerate(dictkeys):
            data    = data_dict[key]
            numSeg  = round_down(min(len(data),self.max_seg_per_spk),self.nPerSpeaker)

            rp      = lol(numpy.arange(numSeg),self.nPerSpeaker)
            flattened_label.extend([findex] * (len(rp)))
            for indices in rp:
                flattened_list.append([data[i] for i in indices])

        ## Mix data in random order
        mixid           = torch.randperm(len(flattened_label), generator=g).tolist()
        mixlabel        = []
        mixmap          = []

        ## Prevent two pairs of the same speaker in the same batch
        for ii in mixid:
            startbatch = round_down(len(mixlabel), self.batch_size)
            if flattened_label[ii] not in mixlabel[startbatch:]:
                mixlabel.append(flattened_label[ii])
                mixmap.append(ii)

        mixed_list = [flattened_list[i] for i in mixmap]

        total_size = round_down(len(mixed_list), self.batch_size)
        self.num_samples = total_size
        return iter(mixed_list[:total_size])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


# ---- trainSpeakerNet.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = dict(ARGS, seed=seed)

    s = SpeakerNet(bug=bug, **args)

    audios, labels = make_utterances(seed, args["nClasses"], N_UTT_PER_SPK)
    train_dataset = train_dataset_loader(audios, labels, **args)
    train_sampler = train_dataset_sampler(train_dataset, **args)
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=args["batch_size"],
        num_workers=0,
        sampler=train_sampler,
        pin_memory=False,
        drop_last=True,
    )

    trainer = ModelTrainer(s, bug=bug, **args)

    state = {"it": None, "epoch": 1}

    def next_batch():
        if state["it"] is not None:
            try:
                return next(state["it"])
            except StopIteration:
                if trainer.lr_step == "epoch":
                    trainer.__scheduler__.step()
                state["epoch"] += 1
        train_sampler.set_epoch(state["epoch"])
        state["it"] = iter(train_loader)
        return next(state["it"])

    first_data, first_label = next(iter(train_loader))

    def train_step():
        data, data_label = next_batch()
        nloss, _prec1 = trainer.train_step(data, data_label)
        return nloss

    def eval_fn(model, batch):
        data, label = batch
        model.eval()
        with torch.no_grad():
            nloss, prec1 = model(data, label)
        return {"loss": float(nloss), "top1": float(prec1)}

    batch = [first_data.transpose(1, 0), torch.LongTensor(first_label)]
    return Program(name="voxceleb_resnetse34l", model=s, batch=batch, loss_fn=lambda outputs, _targets: outputs[0],
                   optimizer=trainer.__optimizer__, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the optimizer built over the embedding network (`__S__`) only: the AM-softmax class weights in the loss
    # module are never trained (classic for losses that own parameters).
    Bug("loss_weights_left_out_of_optimizer", functools.partial(_build, bug="loss_weights_left_out_of_optimizer"),
        "four_structures", ("__L__.W",)),
    # the additive margin added to the target cosine instead of subtracted (classic sign slip).
    Bug("margin_added_to_target", functools.partial(_build, bug="margin_added_to_target"), "learning_ledger",
        ("OBJECTIVE",)),
    # `self.__model__.zero_grad()` dropped from the loop: every update adds all earlier gradients (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
