"""ECAPA-TDNN speaker verification (Desplanques et al.), Tao Ruijie's single-repository reproduction: pre-emphasis and
an 80-band log-mel filterbank with mean normalization and SpecAugment-style masking (``FbankAug``) under
``no_grad``, a Conv1d stem, three SE-Res2Net ``Bottle2neck`` blocks with dilations 2/3/4 fed by dense sums,
multi-layer feature aggregation, attentive statistics pooling over time (global context of mean and std), a
BatchNorm'd embedding; additive angular margin softmax (AAM, m 0.2, s 30); Adam with weight decay 2e-5, StepLR per
epoch; evaluation by cosine scoring of trial pairs and the EER.

Source: https://github.com/TaoRuijie/ECAPA-TDNN
Commit: 4904fda6c5da208998321e3ea75e24320bab8aad
Files: model.py, loss.py, ECAPAModel.py, trainECAPAModel.py, dataLoader.py, tools.py
License: MIT (Copyright (c) 2022 Tao Ruijie; full text in LICENSES/TaoRuijie-ECAPA-TDNN.txt)
Domain: audio, speaker recognition (speaker-classification training of an embedding, verification by EER)

Kept as written: ``SEModule``, ``Bottle2neck``, ``PreEmphasis``, ``FbankAug``, ``ECAPA_TDNN.forward`` (the
``no_grad`` front end, ``aug=True`` in training), ``AAMsoftmax`` (with ``accuracy`` from tools.py),
``ECAPAModel.__init__`` (``Adam(self.parameters(), lr, weight_decay=2e-5)`` over the encoder and the AAM weights,
``StepLR(step_size=test_step, gamma=lr_decay)``), ``train_network``'s loop body (``scheduler.step(epoch - 1)`` at
each epoch's start, ``self.zero_grad()``, encoder forward, AAM loss, backward, step), ``train_loader.__getitem__``'s
random segment of ``num_frames * 160 + 240`` samples (wrap-padded when short) and its sorted speaker dictionary,
``eval_network``'s L2-normalized embeddings scored by their dot product, trainECAPAModel.py's settings (lr 0.001,
lr_decay 0.97, test_step 1, m 0.2, s 30, ``drop_last=True``).

Deviations from the original:
- VoxCeleb2 wav files, the MUSAN noise and the RIR sets are not here: the utterances are synthetic 0.5 s, 16 kHz
  voiced signals made from ``seed`` (each speaker a fundamental-frequency range and two formants shaping the
  harmonics; per-utterance pitch, phase and noise vary), read from memory instead of ``soundfile``; the
  augmentation branch always takes ``augtype == 0`` (the original audio) since there is no MUSAN/RIR to add.
- ``torchaudio.transforms.MelSpectrogram`` (no torchaudio here) is written out in plain torch: ``torch.stft``
  (reflect-centered, hamming window of 400, n_fft 512, hop 160), power 2, torchaudio's HTK mel filterbank
  (20 - 7600 Hz, 80 bands, no norm).
- sizes for 2 CPU cores: ``C`` 1024 -> 32; the hard-coded 1536 MFA channels -> 96 (so the attention's 4608 input ->
  288 and ``bn5``'s 3072 -> 192), the embedding 192 -> 32 (``AAMsoftmax``'s weight too); ``num_frames`` 200 ->
  40 (0.415 s segments); ``n_class`` 5994 -> 8 speakers; ``batch_size`` 400 -> 16; a DataLoader without workers,
  shuffled with a ``torch.Generator(seed)``; 8 speakers x 12 training utterances; ``FbankAug``'s mask widths kept.
- the Program's model is the ``ECAPAModel`` (encoder and AAM weights, the module the optimizer is built over); it
  gets a ``forward(data)`` that is ``train_network``'s encoder call (``speaker_encoder.forward(data, aug=True)``),
  and ``loss_fn`` is ``speaker_loss.forward``'s loss.
- ``train_network`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the scheduler stepped
  when an epoch starts), returning the batch loss; the stderr progress line is dropped. ``eval_fn`` is
  ``eval_network`` on 24 held-out utterances (3 per speaker) paired all-against-all, full utterances only (the
  five 3-s crops are longer than these utterances), the EER computed with numpy (no sklearn: the ROC points are
  swept over the sorted scores as ``metrics.roc_curve`` does); minDCF is dropped.
- CUDA calls are dropped (CPU only); checkpoints and score files are not written.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP031, PLR0402, RUF059, RUF046, UP004, C403, UP034

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

C_CHANNELS = 32  # (port) 1024
MFA = 96  # (port) 1536
EMB = 32  # (port) 192
NUM_FRAMES = 40  # (port) 200
N_CLASS = 8  # (port) 5994
BATCH = 16  # (port) 400
N_UTT = 12
SR = 16000


# ---- torchaudio.transforms.MelSpectrogram, written out (port) ----------------------------------------------------
def _hz_to_mel(freq):
    return 2595.0 * math.log10(1.0 + (freq / 700.0))


def _mel_to_hz(mels):
    return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)


def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2)
    f_pts = _mel_to_hz(m_pts)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))


class MelSpectrogram(nn.Module):
    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, f_min=0.0, f_max=None,
                 window_fn=torch.hann_window, n_mels=128):
        super().__init__()
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.register_buffer("window", window_fn(self.win_length))
        f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.register_buffer("fb", melscale_fbanks(n_fft // 2 + 1, f_min, f_max, n_mels, sample_rate))

    def forward(self, waveform):
        spec = torch.stft(waveform, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, pad_mode="reflect", normalized=False, onesided=True,
                          return_complex=True).abs().pow(2.0)
        return torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)


# ---- model.py ------------------------------------------------------------------------------------------------------
class SEModule(nn.Module):
    def __init__(self, channels, bottleneck=128):
        super(SEModule, self).__init__()
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool1d(1),
            nn.Conv1d(channels, bottleneck, kernel_size=1, padding=0),
            nn.ReLU(),
            # nn.BatchNorm1d(bottleneck), # I remove this layer
            nn.Conv1d(bottleneck, channels, kernel_size=1, padding=0),
            nn.Sigmoid(),
            )

    def forward(self, input):
        x = self.se(input)
        return input * x


class Bottle2neck(nn.Module):

    def __init__(self, inplanes, planes, kernel_size=None, dilation=None, scale = 8):
        super(Bottle2neck, self).__init__()
        width       = int(math.floor(planes / scale))
        self.conv1  = nn.Conv1d(inplanes, width*scale, kernel_size=1)
        self.bn1    = nn.BatchNorm1d(width*scale)
        self.nums   = scale -1
        convs       = []
        bns         = []
        num_pad = math.floor(kernel_size/2)*dilation
        for i in range(self.nums):
            convs.append(nn.Conv1d(width, width, kernel_size=kernel_size, dilation=dilation, padding=num_pad))
            bns.append(nn.BatchNorm1d(width))
        self.convs  = nn.ModuleList(convs)
        self.bns    = nn.ModuleList(bns)
        self.conv3  = nn.Conv1d(width*scale, planes, kernel_size=1)
        self.bn3    = nn.BatchNorm1d(planes)
        self.relu   = nn.ReLU()
        self.width  = width
        self.se     = SEModule(planes)

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.relu(out)
        out = self.bn1(out)

        spx = torch.split(out, self.width, 1)
        for i in range(self.nums):
            if i==0:
                sp = spx[i]
            else:
                sp = sp + spx[i]
            sp = self.convs[i](sp)
            sp = self.relu(sp)
            sp = self.bns[i](sp)
            if i==0:
                out = sp
            else:
                out = torch.cat((out, sp), 1)
        out = torch.cat((out, spx[self.nums]),1)

        out = self.conv3(out)
        out = self.relu(out)
        out = self.bn3(out)

        out = self.se(out)
        out += residual
        return out


class PreEmphasis(torch.nn.Module):

    def __init__(self, coef: float = 0.97):
        super().__init__()
        self.coef = coef
        self.register_buffer(
            'flipped_filter', torch.FloatTensor([-self.coef, 1.]).unsqueeze(0).unsqueeze(0)
        )

    def forward(self, input: torch.tensor) -> torch.tensor:
        input = input.unsqueeze(1)
        input = F.pad(input, (1, 0), 'reflect')
        return F.conv1d(input, self.flipped_filter).squeeze(1)


class FbankAug(nn.Module):

    def __init__(self, freq_mask_width = (0, 8), time_mask_width = (0, 10)):
        self.time_mask_width = time_mask_width
        self.freq_mask_width = freq_mask_width
        super().__init__()

    def mask_along_axis(self, x, dim):
        original_size = x.shape
        batch, fea, time = x.shape
        if dim == 1:
            D = fea
            width_range = self.freq_mask_width
        else:
            D = time
            width_range = self.time_mask_width

        mask_len = torch.randint(width_range[0], width_range[1], (batch, 1), device=x.device).unsqueeze(2)
        mask_pos = torch.randint(0, max(1, D - mask_len.max()), (batch, 1), device=x.device).unsqueeze(2)
        arange = torch.arange(D, device=x.device).view(1, 1, -1)
        mask = (mask_pos <= arange) * (arange < (mask_pos + mask_len))
        mask = mask.any(dim=1)

        if dim == 1:
            mask = mask.unsqueeze(2)
        else:
            mask = mask.unsqueeze(1)

        x = x.masked_fill_(mask, 0.0)
        return x.view(*original_size)

    def forward(self, x):
        x = self.mask_along_axis(x, dim=2)
        x = self.mask_along_axis(x, dim=1)
        return x


class ECAPA_TDNN(nn.Module):

    def __init__(self, C):

        super(ECAPA_TDNN, self).__init__()

        self.torchfbank = torch.nn.Sequential(
            PreEmphasis(),
            MelSpectrogram(sample_rate=16000, n_fft=512, win_length=400, hop_length=160, \
                           f_min = 20, f_max = 7600, window_fn=torch.hamming_window, n_mels=80),
            )

        self.specaug = FbankAug() # Spec augmentation

        self.conv1  = nn.Conv1d(80, C, kernel_size=5, stride=1, padding=2)
        self.relu   = nn.ReLU()
        self.bn1    = nn.BatchNorm1d(C)
        self.layer1 = Bottle2neck(C, C, kernel_size=3, dilation=2, scale=8)
        self.layer2 = Bottle2neck(C, C, kernel_size=3, dilation=3, scale=8)
        self.layer3 = Bottle2neck(C, C, kernel_size=3, dilation=4, scale=8)
        # I fixed the shape of the output from MFA layer, that is close to the setting from ECAPA paper.
        self.layer4 = nn.Conv1d(3*C, MFA, kernel_size=1)  # (port) 1536
        self.attention = nn.Sequential(
            nn.Conv1d(3 * MFA, 256, kernel_size=1),  # (port) 4608
            nn.ReLU(),
            nn.BatchNorm1d(256),
            nn.Tanh(), # I add this layer
            nn.Conv1d(256, MFA, kernel_size=1),  # (port) 1536
            nn.Softmax(dim=2),
            )
        self.bn5 = nn.BatchNorm1d(2 * MFA)  # (port) 3072
        self.fc6 = nn.Linear(2 * MFA, EMB)  # (port) 3072, 192
        self.bn6 = nn.BatchNorm1d(EMB)  # (port) 192


    def forward(self, x, aug):
        with torch.no_grad():
            x = self.torchfbank(x)+1e-6
            x = x.log()
            x = x - torch.mean(x, dim=-1, keepdim=True)
            if aug == True:
                x = self.specaug(x)

        x = self.conv1(x)
        x = self.relu(x)
        x = self.bn1(x)

        x1 = self.layer1(x)
        x2 = self.layer2(x+x1)
        x3 = self.layer3(x+x1+x2)

        x = self.layer4(torch.cat((x1,x2,x3),dim=1))
        x = self.relu(x)

        t = x.size()[-1]

        global_x = torch.cat((x,torch.mean(x,dim=2,keepdim=True).repeat(1,1,t), torch.sqrt(torch.var(x,dim=2,keepdim=True).clamp(min=1e-4)).repeat(1,1,t)), dim=1)

        w = self.attention(global_x)

        mu = torch.sum(x * w, dim=2)
        sg = torch.sqrt( ( torch.sum((x**2) * w, dim=2) - mu**2 ).clamp(min=1e-4) )

        x = torch.cat((mu,sg),1)
        x = self.bn5(x)
        x = self.fc6(x)
        x = self.bn6(x)

        return x


# ---- tools.py / loss.py --------------------------------------------------------------------------------------------
def accuracy(output, target, topk=(1,)):

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


class AAMsoftmax(nn.Module):
    def __init__(self, n_class, m, s, bug=None):

        super(AAMsoftmax, self).__init__()
        self.m = m
        self.s = s
        self.weight = torch.nn.Parameter(torch.FloatTensor(n_class, EMB), requires_grad=True)  # (port) 192
        self.ce = nn.CrossEntropyLoss()
        nn.init.xavier_normal_(self.weight, gain=1)
        self.cos_m = math.cos(self.m)
        self.sin_m = math.sin(self.m)
        self.th = math.cos(math.pi - self.m)
        self.mm = math.sin(math.pi - self.m) * self.m
        self.bug = bug

    def forward(self, x, label=None):

        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.mul(cosine, cosine)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where((cosine - self.th) > 0, phi, cosine - self.mm)
        one_hot = torch.zeros_like(cosine)
        one_hot.scatter_(1, label.view(-1, 1), 1)
        if self.bug == "margin_on_non_targets":
            output = ((1.0 - one_hot) * phi) + (one_hot * cosine)
        else:
            output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        output = output * self.s

        loss = self.ce(output, label)
        prec1 = accuracy(output.detach(), label.detach(), topk=(1,))[0]

        return loss, prec1


# ---- ECAPAModel.py -------------------------------------------------------------------------------------------------
class ECAPAModel(nn.Module):
    def __init__(self, lr, lr_decay, C , n_class, m, s, test_step, bug=None, **kwargs):
        super(ECAPAModel, self).__init__()
        ## ECAPA-TDNN
        self.speaker_encoder = ECAPA_TDNN(C = C)
        ## Classifier
        self.speaker_loss    = AAMsoftmax(n_class = n_class, m = m, s = s, bug = bug)

        if bug == "loss_weights_left_out_of_optimizer":
            self.optim       = torch.optim.Adam(self.speaker_encoder.parameters(), lr = lr, weight_decay = 2e-5)
        else:
            self.optim       = torch.optim.Adam(self.parameters(), lr = lr, weight_decay = 2e-5)
        self.scheduler       = torch.optim.lr_scheduler.StepLR(self.optim, step_size = test_step, gamma=lr_decay)

    def forward(self, data):  # (port) train_network's encoder call
        return self.speaker_encoder.forward(data, aug = True)

    def embed(self, data):
        with torch.no_grad():
            embedding = self.speaker_encoder.forward(data, aug = False)
            return F.normalize(embedding, p=2, dim=1)


# ---- dataLoader.py -------------------------------------------------------------------------------------------------
class train_loader(object):
    def __init__(self, lines, audios, num_frames, **kwargs):
        self.num_frames = num_frames
        self.audios = audios  # (port) in memory, not wav files
        # Load data & labels
        self.data_list  = []
        self.data_label = []
        dictkeys = list(set([x.split()[0] for x in lines]))
        dictkeys.sort()
        dictkeys = { key : ii for ii, key in enumerate(dictkeys) }
        for index, line in enumerate(lines):
            speaker_label = dictkeys[line.split()[0]]
            file_name     = line.split()[1]
            self.data_label.append(speaker_label)
            self.data_list.append(file_name)

    def __getitem__(self, index):
        # Read the utterance and randomly select the segment
        audio = self.audios[self.data_list[index]]
        length = self.num_frames * 160 + 240
        if audio.shape[0] <= length:
            shortage = length - audio.shape[0]
            audio = numpy.pad(audio, (0, shortage), 'wrap')
        start_frame = numpy.int64(random.random()*(audio.shape[0]-length))
        audio = audio[start_frame:start_frame + length]
        audio = numpy.stack([audio],axis=0)
        # Data Augmentation: (port) augtype 0 (the original audio) only, no MUSAN / RIR here
        return torch.FloatTensor(audio[0]), self.data_label[index]

    def __len__(self):
        return len(self.data_list)


# ---- (port) synthetic speakers -------------------------------------------------------------------------------------
def synthetic_speakers(rng, n_spk, n_utt, seconds=0.5):
    t = numpy.arange(int(SR * seconds)) / SR
    spk = [(rng.uniform(90, 260), rng.uniform(300, 900), rng.uniform(1000, 2600)) for _ in range(n_spk)]
    audios, lines = {}, []
    for k, (f0, f1, f2) in enumerate(spk):
        for u in range(n_utt):
            pitch = f0 * rng.uniform(0.93, 1.07)
            fh = pitch * numpy.arange(1, int(4000 // pitch))
            amp = numpy.exp(-((fh - f1) / 180.0) ** 2) + 0.7 * numpy.exp(-((fh - f2) / 260.0) ** 2) + 0.03
            phase = rng.uniform(0, 2 * numpy.pi, size=fh.shape)
            x = amp @ numpy.sin(2 * numpy.pi * fh[:, None] * t[None, :] + phase[:, None])
            x = x / numpy.abs(x).max() * 0.5 + rng.normal(0, 0.02, size=t.shape)
            name = "id%05d/utt%02d.wav" % (k, u)
            audios[name] = x.astype(numpy.float64)
            lines.append("id%05d %s" % (k, name))
    return audios, lines


def equal_error_rate(scores, labels):
    """tools.tuneThresholdfromScore's EER, the ROC swept over the sorted scores (port: no sklearn)."""
    scores, labels = numpy.asarray(scores, dtype=float), numpy.asarray(labels)
    order = numpy.argsort(-scores, kind="mergesort")
    labels = labels[order]
    tps = numpy.concatenate([[0], numpy.cumsum(labels)])
    fps = numpy.concatenate([[0], numpy.cumsum(1 - labels)])
    tpr, fpr = tps / max(tps[-1], 1), fps / max(fps[-1], 1)
    fnr = 1 - tpr
    idxE = numpy.nanargmin(numpy.absolute((fnr - fpr)))
    return max(fpr[idxE], fnr[idxE]) * 100


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)
    rng = numpy.random.default_rng(seed)
    audios, lines = synthetic_speakers(rng, N_CLASS, N_UTT + 3)
    train_lines = [ln for ln in lines if int(ln.split("utt")[1][:2]) < N_UTT]
    eval_files = [ln.split()[1] for ln in lines if int(ln.split("utt")[1][:2]) >= N_UTT]

    trainloader = train_loader(train_lines, audios, num_frames=NUM_FRAMES)
    trainLoader = torch.utils.data.DataLoader(trainloader, batch_size = BATCH, shuffle = True, num_workers = 0,
                                              drop_last = True, generator=torch.Generator().manual_seed(seed))
    s = ECAPAModel(lr=0.001, lr_decay=0.97, C=C_CHANNELS, n_class=N_CLASS, m=0.2, s=30, test_step=1, bug=bug)
    st = {"it": None, "epoch": 0}

    def next_batch():
        if st["it"] is not None:
            batch = next(st["it"], None)
            if batch is not None:
                return batch
        st["epoch"] += 1
        epoch = st["epoch"]
        s.train()
        ## Update the learning rate based on the current epcoh
        s.scheduler.step(epoch - 1)
        st["it"] = iter(trainLoader)
        return next(st["it"])

    def train_step():
        data, labels = next_batch()
        s.train()
        if bug != "zero_grad_dropped":
            s.zero_grad()
        labels            = torch.LongTensor(labels)
        speaker_embedding = s.speaker_encoder.forward(data, aug = True)
        nloss, prec       = s.speaker_loss.forward(speaker_embedding, labels)
        nloss.backward()
        s.optim.step()
        return nloss.detach().cpu().numpy()

    def loss_fn(speaker_embedding, labels):
        nloss, prec = s.speaker_loss.forward(speaker_embedding, labels)
        return nloss

    def eval_network(model, _batch=None):
        was_training = model.training
        model.eval()
        embeddings = {}
        for file in eval_files:
            audio = audios[file]
            data_1 = torch.FloatTensor(numpy.stack([audio],axis=0))
            embeddings[file] = model.embed(data_1)
        scores, labels = [], []
        for i, a in enumerate(eval_files):
            for b in eval_files[i + 1:]:
                score = torch.mean(torch.matmul(embeddings[a], embeddings[b].T)) # higher is positive
                scores.append(float(score))
                labels.append(int(a.split("/")[0] == b.split("/")[0]))
        model.train(was_training)
        return equal_error_rate(scores, labels)

    first = [trainloader[i] for i in range(BATCH)]
    batch = (torch.stack([d for d, _ in first]), torch.LongTensor([lab for _, lab in first]))
    return Program(name="ecapatdnn_speaker", model=s, batch=batch, loss_fn=loss_fn, optimizer=s.optim,
                   train_step=train_step, eval_fn=eval_network, loader=trainLoader)


build = functools.partial(_build, bug=None)

BUGS = [
    # Adam built over speaker_encoder.parameters() (classic for losses that own parameters): the AAM class weights
    # stay at their xavier init.
    Bug("loss_weights_left_out_of_optimizer", functools.partial(_build, bug="loss_weights_left_out_of_optimizer"),
        "four_structures", ("speaker_loss.weight",)),
    # the one-hot blend's two arms swapped (classic): the angular margin penalizes every non-target class and the
    # target keeps its plain cosine, so the objective rewards the target less than intended and the others more.
    Bug("margin_on_non_targets", functools.partial(_build, bug="margin_on_non_targets"), "learning_ledger",
        ("OBJECTIVE",)),
    # self.zero_grad() left out of train_network (classic): the gradients of every batch pile up.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
