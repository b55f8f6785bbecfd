# ruff: noqa: UP008, UP035, UP006, PLR0402, RUF059
"""CLMR's supervised baseline (``main.py --supervised 1``): music auto-tagging from the raw waveform with SampleCNN
(a stride-3 frame convolution, then nine conv / BatchNorm / ReLU / max-pool blocks down to one frame, a last
convolution, dropout and a linear layer), ``BCEWithLogitsLoss`` on MagnaTagATune's multi-hot tags, SGD with
Nesterov momentum and ``ReduceLROnPlateau`` on the validation loss, as a LightningModule (``SupervisedLearning``)
fed by ``ContrastiveDataset`` with one ``RandomResizedCrop`` of each clip.

Source: https://github.com/Spijkervet/CLMR
Commit: 423414d086350d04fd46e48bc74af30a208eff90
Files: ``main.py``, ``config/config.yaml``, ``clmr/models/sample_cnn.py``, ``clmr/models/model.py``,
``clmr/modules/supervised_learning.py``, ``clmr/data.py``, ``clmr/datasets/magnatagatune.py``, ``clmr/evaluation.py``
License: Apache-2.0 (Copyright Janne Spijkervet; full text in LICENSES/Spijkervet-CLMR.txt)
Domain: audio, multi-label music tagging on raw waveforms (SampleCNN, Lightning module)

Kept as written: ``SampleCNN`` (layer order, kernel = stride per block with padding 1, the max-pools, the last
conv block, ``Dropout(0.5)`` when supervised, the ``reshape`` to ``[B, C * T]`` and ``fc``), ``SupervisedLearning``
(``forward`` taking ``x[:, 0, :]``, ``training_step``, ``validation_step``, ``configure_criterion``:
``BCEWithLogitsLoss`` for magnatagatune, ``configure_optimizers``: SGD lr ``learning_rate``, momentum 0.9,
weight decay 1e-6, Nesterov, ``ReduceLROnPlateau(factor=0.2, patience=5)`` on ``Valid/loss``), ``ContrastiveDataset``
(too-short clips skipped, the transform applied), ``main.py``'s supervised path (``RandomResizedCrop(n_samples=
audio_length)`` as the only transform, ``num_augmented_samples=1``, ``drop_last=True``, shuffled training loader),
the dataset's ``(audio, FloatTensor(multi-hot))`` items.

Deviations from the original:
- MagnaTagATune is not here (no download, no torchaudio): a synthetic tagging set made from ``seed``: 192 training
  and 48 validation clips of 4608 samples, 8 tags (50 upstream); each tag is a tone of its own frequency, present
  with p 0.3 (at least one per clip) with a random phase and amplitude, plus Gaussian noise; the tags are the
  multi-hot of the tones present;
- sizes for 2 CPU cores: the channel widths 128 / 256 / 512 -> 16 / 32 / 64; ``strides=[3] * 9`` -> ``[2] * 9``
  (a constructor argument) with ``audio_length`` 59049 -> 1536 (= 3 * 2 ** 9, so the blocks still end on one
  frame); ``batch_size`` 48 -> 16, ``workers`` 0 as configured; the config's ``learning_rate`` 0.0003 -> 0.003
  (the ``--learning_rate`` option): at 0.0003 the BCE barely moves in the few hundred steps run here;
- ``torchaudio_augmentations`` is not installed: ``RandomResizedCrop`` (a random window of ``n_samples``) and
  ``ComposeMany`` (the transforms stacked ``num_augmented_samples`` times) are written out;
- ``torchmetrics.AveragePrecision(pos_label=1)`` is refused by current torchmetrics: the ``Train/pr_auc`` and
  ``Valid/pr_auc`` logs are dropped; ``self.log`` runs without a trainer attached (Lightning ignores it);
- ``Trainer.fit`` is driven one batch at a time as Lightning's automatic optimization runs it
  (``_lightning_loop.automatic_step``); when an epoch ends the validation loop runs (eval mode, ``no_grad``) and
  its mean loss steps ``ReduceLROnPlateau`` as the ``monitor`` does; the early stopping, logger and the test
  evaluation (scikit-learn's ROC/PR-AUC, not installed) are left out; ``eval_fn`` is the tag accuracy at 0.5 on a
  batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import sys
from typing import List, Tuple

import numpy as np
import torch
import torch.nn as nn
from pytorch_lightning import LightningModule
from torch import FloatTensor, Tensor
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

CONFIG = {"batch_size": 16, "dataset": "magnatagatune", "supervised": 1, "learning_rate": 0.003,
          "audio_length": 1536, "sample_rate": 22050, "seed": 42}
N_TAGS, CLIP_LEN, N_TRAIN, N_VALID = 8, 4608, 192, 48


# ---------------------------------------------------------------- clmr/models/model.py, sample_cnn.py
class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def initialize(self, m):
        if isinstance(m, (nn.Conv1d)):
            nn.init.kaiming_uniform_(m.weight, mode="fan_in", nonlinearity="relu")


class SampleCNN(Model):
    def __init__(self, strides, supervised, out_dim):
        super(SampleCNN, self).__init__()

        self.strides = strides
        self.supervised = supervised
        self.sequential = [
            nn.Sequential(
                nn.Conv1d(1, 16, kernel_size=3, stride=3, padding=0),  # (port) 128 channels upstream
                nn.BatchNorm1d(16),
                nn.ReLU(),
            )
        ]

        self.hidden = [  # (port) 128 / 256 / 512 upstream, divided by 8
            [16, 16],
            [16, 16],
            [16, 32],
            [32, 32],
            [32, 32],
            [32, 32],
            [32, 32],
            [32, 32],
            [32, 64],
        ]

        assert len(self.hidden) == len(
            self.strides
        ), "Number of hidden layers and strides are not equal"
        for stride, (h_in, h_out) in zip(self.strides, self.hidden):
            self.sequential.append(
                nn.Sequential(
                    nn.Conv1d(h_in, h_out, kernel_size=stride, stride=1, padding=1),
                    nn.BatchNorm1d(h_out),
                    nn.ReLU(),
                    nn.MaxPool1d(stride, stride=stride),
                )
            )

        # 1 x 512
        self.sequential.append(
            nn.Sequential(
                nn.Conv1d(64, 64, kernel_size=3, stride=1, padding=1),
                nn.BatchNorm1d(64),
                nn.ReLU(),
            )
        )

        self.sequential = nn.Sequential(*self.sequential)

        if self.supervised:
            self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(64, out_dim)

    def forward(self, x):
        out = self.sequential(x)
        if self.supervised:
            out = self.dropout(out)

        out = out.reshape(x.shape[0], out.size(1) * out.size(2))
        logit = self.fc(out)
        return logit


# ---------------------------------------------------------------- clmr/modules/supervised_learning.py
class SupervisedLearning(LightningModule):
    def __init__(self, args, encoder: nn.Module, output_dim: int, bug=None):
        super().__init__()
        self.save_hyperparameters(args)
        self.encoder = encoder
        self.bug = bug

        self.encoder.fc.out_features = output_dim
        self.output_dim = output_dim
        self.model = self.encoder
        self.criterion = self.configure_criterion()

    def forward(self, x, y):
        x = x[:, 0, :]  # we only have 1 sample, no augmentations
        preds = self.model(x)
        loss = self.criterion(preds, y)
        return loss, preds

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss, preds = self.forward(x, y)
        self.log("Train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss, preds = self.forward(x, y)
        self.log("Valid/loss", loss)
        return loss

    def configure_criterion(self):
        if self.hparams.dataset in ["magnatagatune"] and self.bug != "cross_entropy_on_multilabel_tags":
            criterion = nn.BCEWithLogitsLoss()
        else:
            criterion = nn.CrossEntropyLoss()
        return criterion

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=self.hparams.learning_rate,
            momentum=0.9,
            weight_decay=1e-6,
            nesterov=True,
        )

        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=0.2, patience=5
        )  # (port) verbose=True is deprecated

        if scheduler:
            return {
                "optimizer": optimizer,
                "lr_scheduler": scheduler,
                "monitor": "Valid/loss",
            }
        else:
            return {"optimizer": optimizer}


# ---------------------------------------------------------------- clmr/data.py, torchaudio_augmentations
class RandomResizedCrop(torch.nn.Module):
    """(port) torchaudio_augmentations.RandomResizedCrop: a random window of n_samples."""

    def __init__(self, n_samples):
        super().__init__()
        self.n_samples = n_samples

    def forward(self, audio):
        max_samples = audio.shape[-1]
        start_idx = int(np.random.randint(0, max_samples - self.n_samples))
        return audio[..., start_idx : start_idx + self.n_samples]


class ComposeMany:
    """(port) torchaudio_augmentations.ComposeMany: the transforms applied num_augmented_samples times, stacked."""

    def __init__(self, transforms, num_augmented_samples):
        self.transforms, self.num_augmented_samples = transforms, num_augmented_samples

    def __call__(self, x):
        samples = []
        for _ in range(self.num_augmented_samples):
            y = x
            for t in self.transforms:
                y = t(y)
            samples.append(y.unsqueeze(dim=0).clone())
        return torch.cat(samples, dim=0)


class ContrastiveDataset(TorchDataset):
    def __init__(self, dataset: TorchDataset, input_shape: List[int], transform: ComposeMany):
        self.dataset = dataset
        self.transform = transform
        self.input_shape = input_shape
        self.ignore_idx = []

    def __getitem__(self, idx) -> Tuple[Tensor, Tensor]:
        if idx in self.ignore_idx:
            return self[idx + 1]

        audio, label = self.dataset[idx]

        if audio.shape[1] < self.input_shape[1]:
            self.ignore_idx.append(idx)
            return self[idx + 1]

        if self.transform:
            audio = self.transform(audio)
        return audio, label

    def __len__(self) -> int:
        return len(self.dataset)


class SyntheticTagging(TorchDataset):
    """(port) MagnaTagATune-shaped: each tag a tone of its own frequency; items are (audio [1, T], multi-hot)."""

    def __init__(self, n, rng, freqs, bug=None):
        self.binary = (rng.rand(n, N_TAGS) < 0.3).astype(np.float32)
        self.binary[np.arange(n), rng.randint(0, N_TAGS, n)] = 1.0
        t = np.arange(CLIP_LEN) / CONFIG["sample_rate"]
        phase = rng.rand(n, N_TAGS, 1) * 2 * np.pi
        amp = 0.5 + rng.rand(n, N_TAGS, 1)
        tones = amp * np.sin(2 * np.pi * freqs[None, :, None] * t[None, None, :] + phase)
        self.audio = (self.binary[:, :, None] * tones).sum(1) + 0.3 * rng.randn(n, CLIP_LEN)
        self.n_classes, self.bug = N_TAGS, bug

    def __getitem__(self, n):
        label = self.binary[(n + 1) % len(self) if self.bug == "labels_off_by_one" else n]
        audio = torch.from_numpy(self.audio[n]).float().unsqueeze(0)
        label = FloatTensor(label)
        return audio, label

    def __len__(self):
        return len(self.binary)


# ---------------------------------------------------------------- main.py (the supervised path)
# (the Program's batch is {"x", "y"} for SupervisedLearning.forward(x, y), which returns (loss, preds))
def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) pl.seed_everything(args.seed)
    np.random.seed(seed)
    args = dict(CONFIG)
    rng = np.random.RandomState(seed)
    freqs = rng.uniform(300.0, 4000.0, N_TAGS)
    train_dataset = SyntheticTagging(N_TRAIN, rng, freqs, bug)
    valid_dataset = SyntheticTagging(N_VALID, rng, freqs)
    train_transform = [RandomResizedCrop(n_samples=args["audio_length"])]
    num_augmented_samples = 1
    contrastive_train_dataset = ContrastiveDataset(
        train_dataset, input_shape=(1, args["audio_length"]),
        transform=ComposeMany(train_transform, num_augmented_samples=num_augmented_samples))
    contrastive_valid_dataset = ContrastiveDataset(
        valid_dataset, input_shape=(1, args["audio_length"]),
        transform=ComposeMany(train_transform, num_augmented_samples=num_augmented_samples))
    train_loader = DataLoader(contrastive_train_dataset, batch_size=args["batch_size"], num_workers=0,
                              drop_last=True, shuffle=True)
    valid_loader = DataLoader(contrastive_valid_dataset, batch_size=args["batch_size"], num_workers=0,
                              drop_last=True, shuffle=False)

    encoder = SampleCNN(strides=[2, 2, 2, 2, 2, 2, 2, 2, 2], supervised=args["supervised"],
                        out_dim=train_dataset.n_classes)
    module = SupervisedLearning(args, encoder, output_dim=train_dataset.n_classes, bug=bug)
    conf = module.configure_optimizers()
    optimizer, scheduler = conf["optimizer"], conf["lr_scheduler"]

    def validation_loop():  # fit's validation pass after each epoch, then the plateau scheduler on its monitor
        module.eval()
        with torch.no_grad():
            losses = [float(module.validation_step(b, i)) for i, b in enumerate(valid_loader)]
        scheduler.step(float(np.mean(losses)))

    train_step = automatic_step(module, optimizer, train_loader, epoch_end=validation_loop)

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            _, preds = model(**batch[0])
            acc = float(((preds > 0).float() == batch[1]).float().mean())
        model.train(was)
        return acc

    first = next(iter(valid_loader))
    return Program(name="clmr_samplecnn_tagging", model=module, batch=({"x": first[0], "y": first[1]}, first[1]),
                   loss_fn=lambda out, y: module.criterion(out[1], y), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn,                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # configure_criterion keeps BCEWithLogitsLoss for "magnatagatune" only and falls back to CrossEntropyLoss for
    # every other dataset, the multi-label "msd" included (evaluation.py scores msd with a sigmoid per tag): with
    # multi-hot targets the tags compete in one softmax. Here the same fallback runs on the multi-hot tags.
    Bug("cross_entropy_on_multilabel_tags", functools.partial(_build, bug="cross_entropy_on_multilabel_tags"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic labels misaligned with inputs: the dataset's __getitem__ returns the tags of the next clip.
    Bug("labels_off_by_one", functools.partial(_build, bug="labels_off_by_one"), "learning_ledger", ("TASK",)),
]
