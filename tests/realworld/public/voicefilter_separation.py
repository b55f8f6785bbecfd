# ruff: noqa: C408, PLR0402, TRY002, UP008
"""maum-ai's VoiceFilter (Wang et al., "VoiceFilter: Targeted Voice Separation by Speaker-Conditioned Spectrogram
Masking"): a frozen d-vector ``SpeechEmbedder`` (LSTM over sliding mel windows, last frame, linear projection,
L2-normalized, averaged) embeds a reference utterance of the target speaker; ``VoiceFilter`` runs eight dilated
convolutions (BatchNorm + ReLU) over the mixed magnitude spectrogram, concatenates the d-vector to every frame, a
bidirectional LSTM, two linear layers and a sigmoid mask. ``utils/train.py``: the d-vectors computed one by one with
the embedder in ``eval()`` and detached, ``output = mixed_mag * mask``, ``MSELoss(output, target_mag)``, Adam
(config ``adam: 0.001``), ``zero_grad(); backward(); step()``, a loss-explosion guard, and every
``checkpoint_interval`` steps ``validate`` (the model under ``eval()`` + ``no_grad`` on one test example).

Source: https://github.com/maum-ai/voicefilter
Commit: 7db2930dacd94f33d44380bf07001fc7cab80e55
Files: model/model.py, model/embedder.py, utils/train.py, utils/evaluation.py, datasets/dataloader.py,
config/default.yaml
License: Apache-2.0 (stated in README.md; the repository has no LICENSE file), LICENSES/maum-ai-voicefilter.txt
Domain: speech (speaker-conditioned source separation, spectrogram masking)

Deviations from the original:
- sizes (config/default.yaml): ``n_fft`` 1200 -> 64 (``num_freq`` = ``fc2_dim`` 601 -> 33), 3 s of audio (301
  frames) -> 24 frames, the convolutions' 64 channels -> 8 (the last layer's 8 kept), ``lstm_dim`` 400 -> 32,
  ``fc1_dim`` 600 -> 32; embedder ``num_mels`` 40 -> 12, ``emb_dim`` 256 -> 16, ``lstm_hidden`` 768 -> 24,
  ``lstm_layers`` 3 -> 1, ``window`` 80 -> 8, ``stride`` 40 -> 4; ``batch_size`` 8, Adam lr 0.001 kept;
  ``checkpoint_interval`` 1000 -> 20;
- the pretrained embedder checkpoint (``--embedder_path``) cannot be downloaded: the ``SpeechEmbedder`` keeps its
  random initialization from ``seed`` (still frozen: only the VoiceFilter's parameters are in Adam, and the d-vector is
  detached, as written);
- data: LibriSpeech mixtures made by ``generator.py`` (librosa STFTs saved as ``.pt``) cannot be made here: 4
  synthetic speakers from ``seed``, each a set of harmonic frequency bins and a mel "timbre"; a target magnitude
  spectrogram is one speaker's harmonics switched on and off over time (level 0.6-1.0), the mixture adds another
  speaker's at a lower level (0.2-0.5, clipped to 1), the reference mel is another utterance of the target speaker
  (its timbre plus noise); collated by ``train_collate_fn`` as written;
- ``validate``'s SDR (mir_eval, ``spec2wav``) and the tensorboard writer left out: ``validate`` computes the test
  MSE only; no GPU, no checkpoint files, no AdaBound branch (the config selects Adam); one ``train_step`` is one
  batch of the loop; ``eval_fn`` is ``validate``'s MSE on one batch.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 40
N_FRAMES = 24
N_REF_FRAMES = 32
N_SPEAKERS = 4
CH = 8  # the convolutions' width (64 in the original)


# ---- model/model.py ------------------------------------------------------------------------------------------------

class VoiceFilter(nn.Module):
    def __init__(self, hp, bug=None):
        super(VoiceFilter, self).__init__()
        self.hp = hp
        self.bug = bug
        assert hp.audio.n_fft // 2 + 1 == hp.audio.num_freq == hp.model.fc2_dim, \
            "stft-related dimension mismatch"

        self.conv = nn.Sequential(
            # cnn1
            nn.ZeroPad2d((3, 3, 0, 0)),
            nn.Conv2d(1, CH, kernel_size=(1, 7), dilation=(1, 1)),
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn2
            nn.ZeroPad2d((0, 0, 3, 3)),
            nn.Conv2d(CH, CH, kernel_size=(7, 1), dilation=(1, 1)),
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn3
            nn.ZeroPad2d(2),
            nn.Conv2d(CH, CH, kernel_size=(5, 5), dilation=(1, 1)),
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn4
            nn.ZeroPad2d((2, 2, 4, 4)),
            nn.Conv2d(CH, CH, kernel_size=(5, 5), dilation=(2, 1)), # (9, 5)
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn5
            nn.ZeroPad2d((2, 2, 8, 8)),
            nn.Conv2d(CH, CH, kernel_size=(5, 5), dilation=(4, 1)), # (17, 5)
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn6
            nn.ZeroPad2d((2, 2, 16, 16)),
            nn.Conv2d(CH, CH, kernel_size=(5, 5), dilation=(8, 1)), # (33, 5)
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn7
            nn.ZeroPad2d((2, 2, 32, 32)),
            nn.Conv2d(CH, CH, kernel_size=(5, 5), dilation=(16, 1)), # (65, 5)
            nn.BatchNorm2d(CH), nn.ReLU(),

            # cnn8
            nn.Conv2d(CH, 8, kernel_size=(1, 1), dilation=(1, 1)),
            nn.BatchNorm2d(8), nn.ReLU(),
        )

        self.lstm = nn.LSTM(
            8*hp.audio.num_freq + hp.embedder.emb_dim,
            hp.model.lstm_dim,
            batch_first=True,
            bidirectional=True)

        self.fc1 = nn.Linear(2*hp.model.lstm_dim, hp.model.fc1_dim)
        self.fc2 = nn.Linear(hp.model.fc1_dim, hp.model.fc2_dim)

    def forward(self, x, dvec):
        # x: [B, T, num_freq]
        x = x.unsqueeze(1)
        # x: [B, 1, T, num_freq]
        x = self.conv(x)
        # x: [B, 8, T, num_freq]
        if self.bug == "channels_viewed_into_time":
            # the transpose left out: view() folds channels and frames together, so "frame" t of the LSTM input
            # holds pieces of several channels and frames
            x = x.contiguous()
        else:
            x = x.transpose(1, 2).contiguous()
        # x: [B, T, 8, num_freq]
        x = x.view(x.size(0), x.size(2) if self.bug == "channels_viewed_into_time" else x.size(1), -1)
        # x: [B, T, 8*num_freq]

        # dvec: [B, emb_dim]
        dvec = dvec.unsqueeze(1)
        dvec = dvec.repeat(1, x.size(1), 1)
        # dvec: [B, T, emb_dim]

        x = torch.cat((x, dvec), dim=2) # [B, T, 8*num_freq + emb_dim]

        x, _ = self.lstm(x) # [B, T, 2*lstm_dim]
        x = F.relu(x)
        x = self.fc1(x) # x: [B, T, fc1_dim]
        x = F.relu(x)
        x = self.fc2(x) # x: [B, T, fc2_dim], fc2_dim == num_freq
        x = torch.sigmoid(x)
        return x


# ---- model/embedder.py ---------------------------------------------------------------------------------------------

class LinearNorm(nn.Module):
    def __init__(self, hp):
        super(LinearNorm, self).__init__()
        self.linear_layer = nn.Linear(hp.embedder.lstm_hidden, hp.embedder.emb_dim)

    def forward(self, x):
        return self.linear_layer(x)


class SpeechEmbedder(nn.Module):
    def __init__(self, hp):
        super(SpeechEmbedder, self).__init__()
        self.lstm = nn.LSTM(hp.embedder.num_mels,
                            hp.embedder.lstm_hidden,
                            num_layers=hp.embedder.lstm_layers,
                            batch_first=True)
        self.proj = LinearNorm(hp)
        self.hp = hp

    def forward(self, mel):
        # (num_mels, T)
        mels = mel.unfold(1, self.hp.embedder.window, self.hp.embedder.stride) # (num_mels, T', window)
        mels = mels.permute(1, 2, 0) # (T', window, num_mels)
        x, _ = self.lstm(mels) # (T', window, lstm_hidden)
        x = x[:, -1, :] # (T', lstm_hidden), use last frame only
        x = self.proj(x) # (T', emb_dim)
        x = x / torch.norm(x, p=2, dim=1, keepdim=True) # (T', emb_dim)
        x = x.sum(0) / x.size(0) # (emb_dim), average pooling over time frames
        return x


# ---- datasets/dataloader.py (train mode) ---------------------------------------------------------------------------

def train_collate_fn(batch):
    dvec_list = list()
    target_mag_list = list()
    mixed_mag_list = list()

    for dvec_mel, target_mag, mixed_mag in batch:
        dvec_list.append(dvec_mel)
        target_mag_list.append(target_mag)
        mixed_mag_list.append(mixed_mag)
    target_mag_list = torch.stack(target_mag_list, dim=0)
    mixed_mag_list = torch.stack(mixed_mag_list, dim=0)

    return dvec_list, target_mag_list, mixed_mag_list


class SyntheticVFDataset(Dataset):
    """Stands in for VFDataset: (reference mel of the target speaker, target magnitude, mixed magnitude)."""

    def __init__(self, hp, rng, n):
        F_ = hp.audio.num_freq
        M = hp.embedder.num_mels
        harm = np.zeros((N_SPEAKERS, F_), dtype=np.float32)
        timbre = np.zeros((N_SPEAKERS, M), dtype=np.float32)
        for s in range(N_SPEAKERS):
            f0 = int(rng.integers(3, 7))
            for k in range(1, F_ // f0 + 1):
                harm[s, min(F_ - 1, k * f0 + int(rng.integers(0, 2)))] = 0.5 + 0.5 * rng.random()
            timbre[s] = 3.0 * rng.standard_normal(M)
        self.items = []
        for _ in range(n):
            a, b = rng.choice(N_SPEAKERS, size=2, replace=False)
            on_a = (rng.random(N_FRAMES) < 0.7).astype(np.float32)[:, None]
            on_b = (rng.random(N_FRAMES) < 0.7).astype(np.float32)[:, None]
            target = on_a * harm[a] * (0.6 + 0.4 * rng.random((N_FRAMES, 1)))
            interf = on_b * harm[b] * (0.2 + 0.3 * rng.random((N_FRAMES, 1)))
            mixed = np.clip(target + interf, 0.0, 1.0)
            ref = timbre[a][:, None] + 0.3 * rng.standard_normal((M, N_REF_FRAMES))
            self.items.append((torch.from_numpy(ref.astype(np.float32)), torch.from_numpy(target.astype(np.float32)),
                               torch.from_numpy(mixed.astype(np.float32))))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


def make_hp():
    return SimpleNamespace(
        audio=SimpleNamespace(n_fft=64, num_freq=33, sample_rate=16000, hop_length=160, win_length=400,
                              power=0.30),
        model=SimpleNamespace(lstm_dim=32, fc1_dim=32, fc2_dim=33),
        train=SimpleNamespace(batch_size=8, num_workers=0, optimizer='adam', adam=0.001, summary_interval=1,
                              checkpoint_interval=20),
        embedder=SimpleNamespace(num_mels=12, n_fft=512, emb_dim=16, lstm_hidden=24, lstm_layers=1, window=8,
                                 stride=4))


# ---- utils/evaluation.py + utils/train.py --------------------------------------------------------------------------

def validate(model, embedder, testloader):
    model.eval()

    criterion = nn.MSELoss()
    with torch.no_grad():
        for batch in testloader:
            dvec_mel, target_mag, mixed_mag = batch[0]

            target_mag = target_mag.unsqueeze(0)
            mixed_mag = mixed_mag.unsqueeze(0)

            dvec = embedder(dvec_mel)
            dvec = dvec.unsqueeze(0)
            est_mask = model(mixed_mag, dvec)
            est_mag = est_mask * mixed_mag
            test_loss = criterion(target_mag, est_mag).item()
            break

    model.train()
    return test_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    hp = make_hp()
    trainloader = DataLoader(dataset=SyntheticVFDataset(hp, rng, 256), batch_size=hp.train.batch_size, shuffle=True,
                             num_workers=hp.train.num_workers, collate_fn=train_collate_fn, drop_last=True)
    testloader = DataLoader(dataset=SyntheticVFDataset(hp, rng, 8), collate_fn=lambda batch: batch, batch_size=1,
                            shuffle=False, num_workers=0)

    # load embedder
    embedder = SpeechEmbedder(hp)
    embedder.eval()

    model = VoiceFilter(hp, bug=bug)
    optimizer = torch.optim.Adam(model.parameters(),
                                 lr=hp.train.adam)
    criterion = nn.MSELoss()
    state = {"step": 0, "it": iter(trainloader)}
    model.train()

    def train_step():
        batch = next(state["it"], None)
        if batch is None:  # the while loop's next pass over the loader
            model.train()
            state["it"] = iter(trainloader)
            batch = next(state["it"])
        dvec_mels, target_mag, mixed_mag = batch

        dvec_list = list()
        for mel in dvec_mels:
            dvec = embedder(mel)
            dvec_list.append(dvec)
        dvec = torch.stack(dvec_list, dim=0)
        dvec = dvec.detach()

        mask = model(mixed_mag, dvec)
        output = mixed_mag * mask

        if bug == "loss_against_mixed":
            # the copy-paste slip: the masked mixture compared with the mixture itself
            loss = criterion(output, mixed_mag)
        else:
            loss = criterion(output, target_mag)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state["step"] += 1

        value = loss.item()
        if value > 1e8 or math.isnan(value):
            raise Exception("Loss exploded")

        if state["step"] % hp.train.checkpoint_interval == 0:
            validate(model, embedder, testloader)
        return loss.detach()

    first = next(iter(DataLoader(trainloader.dataset, batch_size=hp.train.batch_size, shuffle=False,
                                 collate_fn=train_collate_fn)))
    with torch.no_grad():
        first_dvec = torch.stack([embedder(mel) for mel in first[0]], dim=0)
    first_mixed = first[2]

    first_target = first_mixed if bug == "loss_against_mixed" else first[1]

    def loss_fn(mask, target_mag):
        # output = mixed_mag * mask on the declared batch's mixture, as the loop computes it
        return criterion(first_mixed * mask, target_mag)

    def eval_fn(model, batch):
        (mixed, dvec), target = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            est = model(mixed, dvec) * mixed
        model.train(was_training)
        return float(criterion(target, est))

    return Program(name="voicefilter_separation", model=model, batch=((first_mixed, first_dvec), first_target),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic copy-paste slip: criterion(output, mixed_mag): the mask is trained to pass the whole mixture, the
    # target speaker's spectrogram never enters the loss.
    Bug("loss_against_mixed", functools.partial(_build, bug="loss_against_mixed"), "learning_ledger", ("TASK",)),
    # classic: the transpose before view() dropped: [B, 8, T, F] viewed as [B, T, 8 * F] mixes channels and frames
    # in each LSTM input step.
    Bug("channels_viewed_into_time", functools.partial(_build, bug="channels_viewed_into_time"), "tensor_trace",
        ("lstm",)),
]
