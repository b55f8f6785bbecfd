"""The LightningModule of huyvnphan/PyTorch_CIFAR10: ``CIFAR10Module`` wrapping the repository's CIFAR ResNet-18
(``cifar10_models/resnet.py``: torchvision's ResNet with a 3x3 stride-1 stem), ``CrossEntropyLoss`` and an
``Accuracy`` metric computed in ``forward(batch)``; ``configure_optimizers`` builds SGD (lr 1e-2, weight decay 1e-2,
momentum 0.9, Nesterov) over ``self.model.parameters()`` and the repository's ``WarmupCosineLR`` (``schduler.py``:
linear warmup over 30% of the total steps, then cosine annealing, chainable form) stepped every batch
(``"interval": "step"``); ``train.py``'s defaults (classifier resnet18, batch 256).

Source: https://github.com/huyvnphan/PyTorch_CIFAR10
Commit: 641cac24371b17052b9bb6e56af1c83b5e97cd7f
Files: module.py, schduler.py, train.py, data.py, cifar10_models/resnet.py
License: MIT (Copyright (c) 2019 Huy Phan; LICENSES/huyvnphan-PyTorch_CIFAR10.txt)
Domain: Lightning module (image classification, SGD + warmup-cosine per step)

Deviations from the original:
- Lightning 2: ``self.hparams = hparams`` is no longer allowed; ``self.save_hyperparameters(hparams)`` stores the
  same namespace. ``pytorch_lightning.metrics.Accuracy`` was moved out of Lightning: torchmetrics'
  ``Accuracy(task="multiclass", num_classes=10)`` is used;
- ``all_classifiers`` builds every model of the zoo at import time; only the chosen ``resnet18`` is built here;
- sizes: ResNet-18 widths 64/128/256/512 -> 8/16/32/64 (a ``width`` argument added to ``ResNet``; blocks, stem,
  max-pool and head unchanged); batch 256 -> 32; max_epochs 100 -> 4;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it
  (``training_step`` inside the optimizer closure, ``optimizer_zero_grad``, ``backward``, ``optimizer_step``), then
  the step-interval scheduler steps; at the end of an epoch the validation loop runs (``eval()``, ``no_grad``,
  ``validation_step``). A ``Trainer(barebones=True)`` is attached so that ``self.log`` works (a no-op there); the
  datamodule's ``train_dataloader`` is what ``self.train_dataloader()`` returns, as the Trainer of the original's
  Lightning version patched it onto the module; callbacks, checkpointing, loggers and the test phase are left out;
- data: CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (10 classes, each a fixed smooth
  random pattern, with a random brightness and noise), 512 training and 128 validation images; torchvision is not
  available, so ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize(mean, std)``
  of ``data.py`` are written out in plain torch; shuffled, ``drop_last=True``, no workers, no GPU;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP006, UP008, UP032, UP035  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import logging
import math
import pathlib
import sys
import warnings
from typing import List

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from pytorch_lightning import Trainer
from torch.optim import Optimizer
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader, Dataset
from torchmetrics import Accuracy

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
N_TRAIN, N_VAL = 512, 128


# ---- cifar10_models/resnet.py ----------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self,
        inplanes,
        planes,
        stride=1,
        downsample=None,
        groups=1,
        base_width=64,
        dilation=1,
        norm_layer=None,
    ):
        super(BasicBlock, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        # Both self.conv1 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):
    def __init__(
        self,
        block,
        layers,
        num_classes=10,
        zero_init_residual=False,
        groups=1,
        width_per_group=64,
        replace_stride_with_dilation=None,
        norm_layer=None,
        width=64,
    ):
        super(ResNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer

        self.inplanes = width
        self.dilation = 1
        if replace_stride_with_dilation is None:
            # each element in the tuple indicates if we should replace
            # the 2x2 stride with a dilated convolution instead
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError(
                "replace_stride_with_dilation should be None "
                "or a 3-element tuple, got {}".format(replace_stride_with_dilation)
            )
        self.groups = groups
        self.base_width = width_per_group

        # CIFAR10: kernel_size 7 -> 3, stride 2 -> 1, padding 3->1
        self.conv1 = nn.Conv2d(
            3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False
        )
        # END

        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(
            block, width * 2, layers[1], stride=2, dilate=replace_stride_with_dilation[0]
        )
        self.layer3 = self._make_layer(
            block, width * 4, layers[2], stride=2, dilate=replace_stride_with_dilation[1]
        )
        self.layer4 = self._make_layer(
            block, width * 8, layers[3], stride=2, dilate=replace_stride_with_dilation[2]
        )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves like an identity.
        # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(
            block(
                self.inplanes,
                planes,
                stride,
                downsample,
                self.groups,
                self.base_width,
                previous_dilation,
                norm_layer,
            )
        )
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(
                block(
                    self.inplanes,
                    planes,
                    groups=self.groups,
                    base_width=self.base_width,
                    dilation=self.dilation,
                    norm_layer=norm_layer,
                )
            )

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = x.reshape(x.size(0), -1)
        x = self.fc(x)

        return x


def _resnet(arch, block, layers, pretrained, progress, device, **kwargs):
    model = ResNet(block, layers, **kwargs)
    return model


def resnet18(pretrained=False, progress=True, device="cpu", **kwargs):
    return _resnet(
        "resnet18", BasicBlock, [2, 2, 2, 2], pretrained, progress, device, **kwargs
    )


# ---- schduler.py -----------------------------------------------------------------------------------------------

class WarmupCosineLR(_LRScheduler):
    """
    Sets the learning rate of each parameter group to follow a linear warmup schedule
    between warmup_start_lr and base_lr followed by a cosine annealing schedule between
    base_lr and eta_min.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_epochs: int,
        max_epochs: int,
        warmup_start_lr: float = 1e-8,
        eta_min: float = 1e-8,
        last_epoch: int = -1,
    ) -> None:

        self.warmup_epochs = warmup_epochs
        self.max_epochs = max_epochs
        self.warmup_start_lr = warmup_start_lr
        self.eta_min = eta_min

        super(WarmupCosineLR, self).__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        """
        Compute learning rate using chainable form of the scheduler
        """
        if not self._get_lr_called_within_step:
            warnings.warn(
                "To get the last learning rate computed by the scheduler, "
                "please use `get_last_lr()`.",
                UserWarning,
            )

        if self.last_epoch == 0:
            return [self.warmup_start_lr] * len(self.base_lrs)
        elif self.last_epoch < self.warmup_epochs:
            return [
                group["lr"]
                + (base_lr - self.warmup_start_lr) / (self.warmup_epochs - 1)
                for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups)
            ]
        elif self.last_epoch == self.warmup_epochs:
            return self.base_lrs
        elif (self.last_epoch - 1 - self.max_epochs) % (
            2 * (self.max_epochs - self.warmup_epochs)
        ) == 0:
            return [
                group["lr"]
                + (base_lr - self.eta_min)
                * (1 - math.cos(math.pi / (self.max_epochs - self.warmup_epochs)))
                / 2
                for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups)
            ]

        return [
            (
                1
                + math.cos(
                    math.pi
                    * (self.last_epoch - self.warmup_epochs)
                    / (self.max_epochs - self.warmup_epochs)
                )
            )
            / (
                1
                + math.cos(
                    math.pi
                    * (self.last_epoch - self.warmup_epochs - 1)
                    / (self.max_epochs - self.warmup_epochs)
                )
            )
            * (group["lr"] - self.eta_min)
            + self.eta_min
            for group in self.optimizer.param_groups
        ]


# ---- module.py -------------------------------------------------------------------------------------------------

class CIFAR10Module(pl.LightningModule):
    def __init__(self, hparams, bug=None):
        super().__init__()
        self.save_hyperparameters(hparams)  # self.hparams = hparams
        self.bug = bug

        self.criterion = torch.nn.CrossEntropyLoss()
        self.accuracy = Accuracy(task="multiclass", num_classes=10)

        self.model = resnet18(width=8)  # all_classifiers[self.hparams.classifier]

    def forward(self, batch):
        images, labels = batch
        predictions = self.model(images)
        loss = self.criterion(predictions, labels)
        accuracy = self.accuracy(predictions, labels)
        return loss, accuracy * 100

    def training_step(self, batch, batch_nb):
        loss, accuracy = self.forward(batch)
        self.log("loss/train", loss)
        self.log("acc/train", accuracy)
        return loss

    def validation_step(self, batch, batch_nb):
        loss, accuracy = self.forward(batch)
        self.log("loss/val", loss)
        self.log("acc/val", accuracy)

    def configure_optimizers(self):
        if self.bug == "optimizer_over_fc_only":
            # the head-only optimizer of a fine-tuning run (from the pretrained state_dicts) left in
            params = self.model.fc.parameters()
        else:
            params = self.model.parameters()
        optimizer = torch.optim.SGD(
            params,
            lr=self.hparams.learning_rate,
            weight_decay=self.hparams.weight_decay,
            momentum=0.9,
            nesterov=True,
        )
        total_steps = self.hparams.max_epochs * len(self.train_dataloader())
        scheduler = {
            "scheduler": WarmupCosineLR(
                optimizer, warmup_epochs=total_steps * 0.3, max_epochs=total_steps
            ),
            "interval": "epoch" if self.bug == "scheduler_interval_epoch" else "step",
            "name": "learning_rate",
        }
        return [optimizer], [scheduler]


# ---- data.py on synthetic images -------------------------------------------------------------------------------

MEAN = torch.tensor((0.4914, 0.4822, 0.4465)).view(3, 1, 1)
STD = torch.tensor((0.2471, 0.2435, 0.2616)).view(3, 1, 1)


def make_images(seed):
    """10 classes, each a fixed smooth random RGB pattern; an image is its class pattern, scaled, plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate((torch.rand(10, 3, 4, 4, generator=g) < 0.5).float(), size=32, mode="bilinear",
                              align_corners=False)

    def sample(n):
        labels = torch.randint(10, (n,), generator=g)
        scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
        images = (templates[labels] * scale + 0.1 * torch.rand(n, 3, 32, 32, generator=g)).clamp(0, 1)
        return images, labels

    return sample(N_TRAIN), sample(N_VAL)


class SyntheticCIFAR10(Dataset):
    """CIFAR10(root, train=..., transform=T.Compose([...])) on the synthetic images, the transforms written out."""

    def __init__(self, images, labels, train):
        self.images, self.labels, self.train = images, labels, train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:  # T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,)))
            img = padded[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
        return (img - MEAN) / STD, self.labels[i]  # T.ToTensor(), T.Normalize(self.mean, self.std)


def _build(seed, bug=None):
    torch.manual_seed(seed)  # seed_everything(0)
    args = argparse.Namespace(data_dir="", download_weights=0, test_phase=0, dev=0, logger="tensorboard",
                              classifier="resnet18", pretrained=0, precision=32, batch_size=32, max_epochs=4,
                              num_workers=0, gpu_id="", learning_rate=1e-2, weight_decay=1e-2)
    (train_x, train_y), (val_x, val_y) = make_images(seed)
    train_set = SyntheticCIFAR10(train_x, train_y, train=True)
    train_dl = DataLoader(train_set, batch_size=args.batch_size, num_workers=0, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(seed))
    val_dl = DataLoader(SyntheticCIFAR10(val_x, val_y, train=False), batch_size=args.batch_size, num_workers=0,
                        drop_last=True)

    model = CIFAR10Module(args, bug=bug)
    model.train_dataloader = lambda: train_dl  # the datamodule's loader, as the Trainer patched it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=args.max_epochs,
                          deterministic=False)
    trainer.strategy.connect(model)
    model.trainer = trainer
    [optimizer], [sched_config] = model.configure_optimizers()
    scheduler, interval = sched_config["scheduler"], sched_config["interval"]

    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def validation_epoch():
        model.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dl):
                model.validation_step(batch, batch_idx)
        model.train()

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch
                validation_epoch()
                if interval == "epoch":
                    scheduler.step()
                state["epoch"] += 1
            model.train()
            state["it"], state["batch_idx"] = iter(train_dl), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            loss = model.training_step(batch, batch_idx)
            model.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            model.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        model.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        if interval == "step":
            scheduler.step()
        return result["loss"]

    def eval_fn(module, batch):
        module.eval()
        with torch.no_grad():
            _loss, accuracy = module.forward(batch)
        module.train()
        return float(accuracy)

    first = next(iter(DataLoader(SyntheticCIFAR10(train_x, train_y, train=False), batch_size=args.batch_size)))
    return Program(name="pytorchcifar10_module", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda predictions, labels: model.criterion(predictions, labels), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # the scheduler declared with Lightning's default interval ("epoch") while its lengths are counted in steps: the
    # warmup lasts 30% of total_steps *epochs*, so the learning rate stays near warmup_start_lr (1e-8) all run.
    Bug("scheduler_interval_epoch", functools.partial(_build, bug="scheduler_interval_epoch"), "learning_ledger",
        ("PARAMETER_UPDATE",)),
    # the optimizer built over the classifier head only (a fine-tuning leftover): the backbone never trains.
    Bug("optimizer_over_fc_only", functools.partial(_build, bug="optimizer_over_fc_only"), "four_structures",
        ("model.conv1.weight",)),
]
