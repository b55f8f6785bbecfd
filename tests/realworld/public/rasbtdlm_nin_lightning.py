"""Network in Network (Lin et al.) trained on CIFAR-10 as a LightningModule by the notebook
``pytorch-lightning_ipynb/cnn/cnn-nin-cifar10.ipynb`` of rasbt/deeplearning-models: ``PyTorchNiN`` (three mlpconv
blocks -- a spatial convolution followed by two 1x1 convolutions, ReLU, pooling and Dropout(0.5) -- ending in a
10-channel map global-average-pooled into the logits) wrapped by the notebook's generic ``LightningModel``
(``_shared_step`` with ``cross_entropy``; ``training_step`` recomputing the batch's predictions in eval mode under
``no_grad`` for the training accuracy, then switching back to train mode; Adam at lr 5e-4), a ``DataModule`` with a
45000 / 5000 ``random_split`` and ``Normalize(0.5, 0.5)``, and ``Trainer.fit`` with a validation pass each epoch.

Source: https://github.com/rasbt/deeplearning-models
Commit: 18e046926551378cd691fd871dda0f21dcd272ab (the notebook last changed in 51e549597ba225e377bb4e9dca9a48ad65763abb)
Files: pytorch-lightning_ipynb/cnn/cnn-nin-cifar10.ipynb
License: MIT (Copyright (c) 2019-2022 Sebastian Raschka; full text in LICENSES/rasbt-deeplearning-models.txt)
Domain: Lightning module (CNN image classifier, Network in Network, dropout, eval-mode training accuracy)

Kept as written: ``PyTorchNiN`` (layer order, kernel sizes, paddings, the ReLU before the final average pool, the
``view`` to ``[B, num_classes]``), ``LightningModel`` (``_shared_step``, ``training_step`` with its eval/train
switch, ``validation_step``, ``configure_optimizers``), the ``DataModule``'s transforms and ``random_split``, the
notebook's ``LEARNING_RATE = 0.0005`` and ``torch.manual_seed`` before the data module.

Deviations from the original:
- CIFAR-10 is not here (no download, no torchvision): synthetic 32x32 RGB images made from ``seed``, 10 classes, each a
  random 4x4 colour pattern upsampled to 32x32 (bilinear) plus per-image noise (std 0.1), in [0, 1] as ``ToTensor``
  gives; ``Normalize(0.5, 0.5)`` is written out; the 50000 training images become 320 split 288 / 32 by ``random_split``
  (45000 / 5000 upstream); the test split and ``test_step`` are not run;
- sizes for 2 CPU cores: the NiN widths 192 / 160 / 96 -> 48 / 40 / 24 (the 10-channel output layer kept); ``BATCH_SIZE
  256 -> 32``, ``NUM_WORKERS 4 -> 0``; the self-check runs 60 steps (``SELF_CHECK_STEPS``): the loss stays near log(10)
  for its first 30 or so;
- ``torchmetrics.Accuracy()`` (no ``task``, refused by current torchmetrics) -> ``Accuracy(task="multiclass",
  num_classes=10)``; ``self.log`` runs without a trainer attached (Lightning ignores it), the checkpoint callback, the
  CSV logger, the plots and the label counters are left out;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it
  (``_lightning_loop.automatic_step``: ``training_step`` in the optimizer closure, the ``optimizer_zero_grad`` hook,
  ``backward``, ``optimizer_step``); when a training epoch ends the validation loop runs (eval mode, ``no_grad``,
  ``validation_step`` over the validation loader); ``eval_fn`` is the accuracy on a given batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written."""

from __future__ import annotations

import functools
import logging
import pathlib
import sys

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataset import random_split

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

BATCH_SIZE = 32  # (port) 256
NUM_EPOCHS = 100
LEARNING_RATE = 0.0005
NUM_WORKERS = 0  # (port) 4
W1, W2, W3 = 48, 40, 24  # (port) the widths 192, 160, 96
SELF_CHECK_STEPS = 60  # (port) the NiN sits on its initial plateau for about 30 steps


class PyTorchNiN(nn.Module):

    def __init__(self, num_classes, bug=None):
        super().__init__()

        self.num_classes = num_classes
        self.bug = bug

        self.classifier = nn.Sequential(
                nn.Conv2d(3, W1, kernel_size=5, stride=1, padding=2),
                nn.ReLU(inplace=True),
                nn.Conv2d(W1, W2, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.Conv2d(W2,  W3, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
                nn.Dropout(0.5),

                nn.Conv2d(W3, W1, kernel_size=5, stride=1, padding=2),
                nn.ReLU(inplace=True),
                nn.Conv2d(W1, W1, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.Conv2d(W1, W1, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.AvgPool2d(kernel_size=3, stride=2, padding=1),
                nn.Dropout(0.5),

                nn.Conv2d(W1, W1, kernel_size=3, stride=1, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(W1, W1, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.Conv2d(W1,  10, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.AvgPool2d(kernel_size=8, stride=1, padding=0),
                )

    def forward(self, x):
        x = self.classifier(x)
        logits = x.view(x.size(0), self.num_classes)
        if self.bug == "softmax_in_forward":
            return torch.softmax(logits, dim=1)
        return logits


# LightningModule that receives a PyTorch model as input
class LightningModel(pl.LightningModule):
    def __init__(self, model, learning_rate, bug=None):
        super().__init__()

        self.learning_rate = learning_rate
        # The inherited PyTorch module
        self.model = model
        self.bug = bug

        # Save settings and hyperparameters to the log directory
        # but skip the model parameters
        self.save_hyperparameters(ignore=['model', 'bug'])

        # Set up attributes for computing the accuracy  (port) task= and num_classes= added
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.valid_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)

    # Defining the forward method is only necessary
    # if you want to use a Trainer's .predict() method (optional)
    def forward(self, x):
        return self.model(x)

    # A common forward step to compute the loss and labels
    # this is used for training, validation, and testing below
    def _shared_step(self, batch):
        features, true_labels = batch
        logits = self(features)
        loss = torch.nn.functional.cross_entropy(logits, true_labels)
        predicted_labels = torch.argmax(logits, dim=1)

        return loss, true_labels, predicted_labels

    def training_step(self, batch, batch_idx):
        loss, true_labels, predicted_labels = self._shared_step(batch)
        self.log("train_loss", loss)

        # To account for Dropout behavior during evaluation
        self.model.eval()
        with torch.no_grad():
            _, true_labels, predicted_labels = self._shared_step(batch)
        self.train_acc.update(predicted_labels, true_labels)
        self.log("train_acc", self.train_acc, on_epoch=True, on_step=False)
        if self.bug != "train_mode_not_restored":
            self.model.train()
        return loss  # this is passed to the optimzer for training

    def validation_step(self, batch, batch_idx):
        loss, true_labels, predicted_labels = self._shared_step(batch)
        self.log("valid_loss", loss)
        self.valid_acc(predicted_labels, true_labels)
        self.log("valid_acc", self.valid_acc,
                 on_epoch=True, on_step=False, prog_bar=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.learning_rate)
        return optimizer


def _synthetic_cifar(seed, n=320):
    """(port) Ten classes, each a random 4x4 colour pattern upsampled to 32x32, plus noise; values in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    protos = F.interpolate(torch.rand(10, 3, 4, 4, generator=g), size=(32, 32), mode="bilinear",
                           align_corners=False)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = (protos[labels] + 0.1 * torch.randn(n, 3, 32, 32, generator=g)).clamp(0, 1)
    return TensorDataset((images - 0.5) / 0.5, labels)  # Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


class DataModule(pl.LightningDataModule):
    def __init__(self, seed):
        super().__init__()
        self.seed = seed

    def setup(self, stage=None):
        train = _synthetic_cifar(self.seed)  # (port) datasets.CIFAR10(train=True, transform=train_transform)
        self.train, self.valid = random_split(train, lengths=[288, 32])  # (port) [45000, 5000]

    def train_dataloader(self):
        train_loader = DataLoader(dataset=self.train,
                                  batch_size=BATCH_SIZE,
                                  drop_last=True,
                                  shuffle=True,
                                  num_workers=NUM_WORKERS)
        return train_loader

    def val_dataloader(self):
        valid_loader = DataLoader(dataset=self.valid,
                                  batch_size=BATCH_SIZE,
                                  drop_last=False,
                                  shuffle=False,
                                  num_workers=NUM_WORKERS)
        return valid_loader


def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) torch.manual_seed(1)
    data_module = DataModule(seed)
    data_module.setup("fit")

    pytorch_model = PyTorchNiN(num_classes=10, bug=bug)

    lightning_model = LightningModel(
        pytorch_model, learning_rate=LEARNING_RATE, bug=bug)
    optimizer = lightning_model.configure_optimizers()
    train_loader, val_loader = data_module.train_dataloader(), data_module.val_dataloader()

    def validation_loop():  # fit's validation pass at the end of each training epoch
        lightning_model.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_loader):
                lightning_model.validation_step(batch, batch_idx)

    train_step = automatic_step(lightning_model, optimizer, train_loader, epoch_end=validation_loop)

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            acc = float((model(batch[0]).argmax(1) == batch[1]).float().mean())
        model.train(was)
        return acc

    first = next(iter(val_loader))
    return Program(name="rasbtdlm_nin_lightning", model=lightning_model, batch=(first[0], first[1]),
                   loss_fn=F.cross_entropy, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic, from the notebook's own pattern: training_step switches the model to eval mode for its accuracy
    # pass and the switch back (self.model.train()) is forgotten, so from the second step on the model trains with
    # both Dropout(0.5) layers off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("model.classifier.7",), kind="step.trained_in_eval_mode"),
    # classic: the network returns softmax probabilities and _shared_step still applies cross_entropy (which
    # applies log_softmax again): the loss saturates near log(10) and its gradient is squashed.
    Bug("softmax_in_forward", functools.partial(_build, bug="softmax_in_forward"), "learning_ledger",
        ("OBJECTIVE",)),
]
