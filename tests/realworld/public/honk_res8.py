"""Honk: keyword spotting on Speech Commands with the ``res8`` residual CNN (``SpeechResModel``: 3x3 convolutions over
MFCC frames, average pooling after the first, residual connections every two layers, affine-free batch norm after
each, global mean, linear head over 12 labels: silence, unknown and ten words) trained by ``utils/train.py`` with the
README's command (``--lr 0.1 0.01 0.001 --schedule 3000 6000 --weight_decay 0.00001``, momentum 0.9, batch 64):
cross-entropy, SGD re-created with the next lr when the schedule step is passed.

Source: https://github.com/castorini/honk
Commit: c3aae750c428520ba340961bddd526f9c999bb93
Files: utils/train.py, utils/model.py (SpeechResModel, the res8 config, SpeechDataset.splits/collate_fn), README.md
License: MIT (Copyright (c) 2018 Castorini)
Domain: audio, keyword-spotting classifier

Deviations from the original:
- sizes: MFCC frames 101 x 40 -> 32 x 24, n_feature_maps 45 -> 12, batch size 64 -> 32 (n_layers 6, res_pool (4, 3),
  12 labels, lr schedule, momentum, weight decay unchanged);
- data: the Speech Commands wav files (librosa loading, background noise mixing, MFCCs) are replaced by synthetic
  MFCC-like frames made from ``seed``: each word (and "unknown") has a fixed random time-frequency template, an example
  is its template rolled by a random time shift (the dataset's +-100 ms timeshift) plus noise, and silence is
  low-amplitude noise; labels come from ``SpeechDataset.splits``'s own ``words`` mapping (silence 0, unknown 1, the
  wanted words 2..11) over synthetic file names; the collate function stacks the frames as ``collate_fn`` does;
- ``Variable``, ``.cuda()``, printing, saving and the dev/test passes are left out of ``train_step``; ``eval_fn`` is
  the dev loop's accuracy on a given batch; one ``train_step`` is one batch of the epoch loop.
"""
# ruff: noqa: UP032, PLR0402, C408

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data as data
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FRAMES, N_COEFFS = 32, 24
LABEL_SILENCE, LABEL_UNKNOWN = "__silence__", "__unknown__"
WANTED_WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]


# ---- utils/model.py ---------------------------------------------------------------------------------------------

class SerializableModule(nn.Module):
    def __init__(self):
        super().__init__()


class SpeechResModel(SerializableModule):
    def __init__(self, config, bug=None):
        super().__init__()
        n_labels = config["n_labels"]
        n_maps = config["n_feature_maps"]
        self.conv0 = nn.Conv2d(1, n_maps, (3, 3), padding=(1, 1), bias=False)
        if "res_pool" in config:
            self.pool = nn.AvgPool2d(config["res_pool"])

        self.n_layers = n_layers = config["n_layers"]
        dilation = config["use_dilation"]
        if dilation:
            self.convs = [nn.Conv2d(n_maps, n_maps, (3, 3), padding=int(2**(i // 3)), dilation=int(2**(i // 3)),
                bias=False) for i in range(n_layers)]
        else:
            self.convs = [nn.Conv2d(n_maps, n_maps, (3, 3), padding=1, dilation=1,
                bias=False) for _ in range(n_layers)]
        for i, conv in enumerate(self.convs):
            self.add_module("bn{}".format(i + 1), nn.BatchNorm2d(n_maps, affine=False))
            self.add_module("conv{}".format(i + 1), conv)
        self.output = nn.Linear(n_maps, n_labels)
        self.bug = bug

    def forward(self, x):
        x = x.unsqueeze(1)
        for i in range(self.n_layers + 1):
            y = F.relu(getattr(self, "conv{}".format(i))(x))
            if i == 0:
                if hasattr(self, "pool"):
                    y = self.pool(y)
                old_x = y
            if i > 0 and i % 2 == 0:
                x = y + old_x
                old_x = x
            else:
                x = y
            if i > 0:
                x = getattr(self, "bn{}".format(i))(x)
        x = x.view(x.size(0), x.size(1), -1) # shape: (batch, feats, o3)
        x = torch.mean(x, 2)
        if self.bug == "softmax_before_cross_entropy":
            # probabilities returned to a criterion that applies log_softmax itself
            return F.softmax(self.output(x), dim=1)
        return self.output(x)


RES8_CONFIG = dict(n_labels=12, n_layers=6, n_feature_maps=12, res_pool=(4, 3), use_dilation=False)


class SpeechDataset(data.Dataset):
    """The synthetic stand-in for SpeechDataset: ``splits`` keeps the original label mapping."""

    def __init__(self, data, templates, gen):
        super().__init__()
        self.audio_files = list(data.keys())
        self.audio_labels = list(data.values())
        self.kinds = dict(data)
        self.templates = templates
        self.gen = gen

    @classmethod
    def splits(cls, config, templates, gen, bug=None):
        wanted_words = config["wanted_words"]
        if bug == "label_offset_dropped":
            # the +2 for silence and unknown left out: "yes" and "no" share labels 0 and 1 with silence and unknown
            words = {word: i for i, word in enumerate(wanted_words)}
        else:
            words = {word: i + 2 for i, word in enumerate(wanted_words)}
        words.update({LABEL_SILENCE:0, LABEL_UNKNOWN:1})
        train = {}
        # synthetic file names "<folder>/<n>.wav": a word folder gets its word's label, any other folder "unknown"
        for folder_name in [*wanted_words, "bed", "bird", LABEL_SILENCE]:
            if folder_name in words:
                label = words[folder_name]
            else:
                label = words[LABEL_UNKNOWN]
            for n in range(40):
                train["{}/{}.wav".format(folder_name, n)] = label
        return cls(train, templates, gen)

    def load_audio(self, example):
        folder = example.split("/")[0]
        if folder == LABEL_SILENCE:
            return 0.1 * torch.randn(N_FRAMES, N_COEFFS, generator=self.gen)
        shift = int(torch.randint(-2, 3, (1,), generator=self.gen))
        frames = torch.roll(self.templates[folder], shift, dims=0)
        return frames + 0.3 * torch.randn(N_FRAMES, N_COEFFS, generator=self.gen)

    def collate_fn(self, data):
        x = None
        y = []
        for audio_data, label in data:
            audio_tensor = audio_data.reshape(1, -1, N_COEFFS)
            x = audio_tensor if x is None else torch.cat((x, audio_tensor), 0)
            y.append(label)
        return x, torch.tensor(y)

    def __getitem__(self, index):
        return self.load_audio(self.audio_files[index]), self.audio_labels[index]

    def __len__(self):
        return len(self.audio_labels)


# ---- utils/train.py ---------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = {w: torch.randn(N_FRAMES, N_COEFFS, generator=gen)
                 for w in [*WANTED_WORDS, "bed", "bird"]}
    config = dict(RES8_CONFIG, wanted_words=WANTED_WORDS, lr=[0.1, 0.01, 0.001], schedule=[3000, 6000],
                  batch_size=32, use_nesterov=True, momentum=0.9, weight_decay=0.00001)

    train_set = SpeechDataset.splits(config, templates, gen, bug=bug)
    model = SpeechResModel(config, bug=bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"][0], nesterov=config["use_nesterov"], weight_decay=config["weight_decay"], momentum=config["momentum"])
    schedule_steps = config["schedule"]
    schedule_steps.append(np.inf)
    criterion = nn.CrossEntropyLoss()

    train_loader = data.DataLoader(
        train_set,
        batch_size=config["batch_size"],
        shuffle=True, drop_last=True,
        collate_fn=train_set.collate_fn,
        generator=torch.Generator().manual_seed(seed + 1))
    state = {"it": None, "step_no": 0, "sched_idx": 0, "optimizer": optimizer}

    if bug == "train_mode_not_restored":
        # model.train() called once before the epoch loop instead of per batch: after the first epoch's dev pass
        # (model.eval()) the model trains with its batch norms in eval mode
        model.eval()

    def train_step():
        try:
            model_in, labels = next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_loader)
            model_in, labels = next(state["it"])
        optimizer = state["optimizer"]
        if bug != "train_mode_not_restored":
            model.train()
        optimizer.zero_grad()
        scores = model(model_in)
        loss = criterion(scores, labels)
        loss.backward()
        optimizer.step()
        state["step_no"] += 1
        if state["step_no"] > schedule_steps[state["sched_idx"]]:
            state["sched_idx"] += 1
            state["optimizer"] = torch.optim.SGD(model.parameters(), lr=config["lr"][state["sched_idx"]],
                nesterov=config["use_nesterov"], momentum=config["momentum"], weight_decay=config["weight_decay"])
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        model_in, labels = batch
        with torch.no_grad():
            scores = model(model_in)
        batch_size = labels.size(0)
        return float((torch.max(scores, 1)[1].view(batch_size).data == labels.data).float().sum() / batch_size)

    first = next(iter(data.DataLoader(train_set, batch_size=config["batch_size"], shuffle=True,
                                      collate_fn=train_set.collate_fn,
                                      generator=torch.Generator().manual_seed(seed + 2))))
    return Program(name="honk_res8", model=model, batch=first, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the wanted words numbered from 0 (the +2 offset for silence and unknown dropped): "yes" and silence share
    # label 0, "no" and unknown share label 1.
    Bug("label_offset_dropped", functools.partial(_build, bug="label_offset_dropped"), "learning_ledger", ("TASK",)),
    # softmax at the end of forward, then nn.CrossEntropyLoss (which applies log_softmax again).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # model.train() not restored after the dev pass: the affine-free batch norms normalise with running statistics.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", ("bn1",)),
]
