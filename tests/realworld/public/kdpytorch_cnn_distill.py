"""Knowledge distillation of the repository's 5-layer CNN student (``model/net.py`` ``Net``: three conv + BN +
max-pool + ReLU blocks, FC + BN1d + dropout, FC head) from a fixed ResNet-18 teacher (``model/resnet.py``), as
``train.py`` runs the ``cnn_distill`` experiment: ``train_kd`` puts the student in train mode and the teacher in eval
mode, computes the teacher's outputs under ``no_grad`` for each batch, and minimizes ``loss_fn_kd`` (``KLDivLoss`` of
the student's ``log_softmax(outputs/T)`` against the teacher's ``softmax(teacher_outputs/T)``, times
``alpha * T * T``, plus ``cross_entropy(outputs, labels) * (1 - alpha)``) with Adam (lr 1e-3) and the ``StepLR(100,
0.2)`` stepped once per epoch; ``experiments/cnn_distill/params.json``: alpha 0.9, temperature 20.

Source: https://github.com/haitongli/knowledge-distillation-pytorch
Commit: 9937528f0be0efa979c745174fbcbe9621cea8b7
Files: train.py, model/net.py, model/resnet.py, model/data_loader.py, experiments/cnn_distill/params.json,
       experiments/base_resnet18/params.json
License: MIT (Copyright (c) 2018 Haitong Li; LICENSES/haitongli-knowledge-distillation-pytorch.txt)
Domain: knowledge distillation (KD loss with temperature, fixed teacher)

Deviations from the original:
- the teacher checkpoint (``experiments/base_resnet18/best.pth.tar``) cannot be downloaded: the teacher is trained
  at build time by the script's own non-KD path (``train``: ``resnet.loss_fn``, SGD lr 0.1 momentum 0.9 weight decay
  5e-4, as ``base_resnet18``) for 40 batches on the same synthetic data, then frozen (``teacher_model.eval()``, no
  optimizer), as ``utils.load_checkpoint`` would leave it;
- sizes: the student's ``num_channels`` 32 -> 8, batch 128 -> 32; the teacher ResNet-18's widths 64/128/256/512 ->
  8/16/32/64 (a ``width`` argument added to ``ResNet``; blocks, strides and the 4x4 average pool unchanged);
- data: CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (10 classes, each a fixed smooth
  random pattern, with a random brightness and noise), 1024 training images; torchvision is not available, so the
  ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip`` and ``Normalize`` of ``data_loader.py`` are written out in
  plain torch; shuffled training DataLoader, no workers, no CUDA;
- ``Variable``, ``.cuda(async=True)``, tqdm, the metric summaries, checkpointing and logging are dropped;
  ``loss.data[0]`` is not used;
- one ``train_step`` is one iteration of ``train_kd``'s batch loop; at the end of each epoch ``scheduler.step()``
  runs (the original steps it at the start of each epoch, before ``train_kd``: the same schedule); ``eval_fn`` is
  ``evaluate_kd``'s accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, PLR1704, UP008  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

warnings.filterwarnings("ignore", message=".*reduction: 'mean' divides the total loss.*")


class Params:
    """utils.Params loaded from experiments/cnn_distill/params.json (sizes shrunk, see the docstring)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---- model/net.py ----------------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, params):
        super(Net, self).__init__()
        self.num_channels = params.num_channels

        # each of the convolution layers below have the arguments (input_channels, output_channels, filter_size,
        # stride, padding). We also include batch normalisation layers that help stabilise training.
        self.conv1 = nn.Conv2d(3, self.num_channels, 3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(self.num_channels)
        self.conv2 = nn.Conv2d(self.num_channels, self.num_channels*2, 3, stride=1, padding=1)
        self.bn2 = nn.BatchNorm2d(self.num_channels*2)
        self.conv3 = nn.Conv2d(self.num_channels*2, self.num_channels*4, 3, stride=1, padding=1)
        self.bn3 = nn.BatchNorm2d(self.num_channels*4)

        # 2 fully connected layers to transform the output of the convolution layers to the final output
        self.fc1 = nn.Linear(4*4*self.num_channels*4, self.num_channels*4)
        self.fcbn1 = nn.BatchNorm1d(self.num_channels*4)
        self.fc2 = nn.Linear(self.num_channels*4, 10)
        self.dropout_rate = params.dropout_rate

    def forward(self, s):
        #                                                  -> batch_size x 3 x 32 x 32
        # we apply the convolution layers, followed by batch normalisation, maxpool and relu x 3
        s = self.bn1(self.conv1(s))                         # batch_size x num_channels x 32 x 32
        s = F.relu(F.max_pool2d(s, 2))                      # batch_size x num_channels x 16 x 16
        s = self.bn2(self.conv2(s))                         # batch_size x num_channels*2 x 16 x 16
        s = F.relu(F.max_pool2d(s, 2))                      # batch_size x num_channels*2 x 8 x 8
        s = self.bn3(self.conv3(s))                         # batch_size x num_channels*4 x 8 x 8
        s = F.relu(F.max_pool2d(s, 2))                      # batch_size x num_channels*4 x 4 x 4

        # flatten the output for each image
        s = s.view(-1, 4*4*self.num_channels*4)             # batch_size x 4*4*num_channels*4

        # apply 2 fully connected layers with dropout
        s = F.dropout(F.relu(self.fcbn1(self.fc1(s))),
            p=self.dropout_rate, training=self.training)    # batch_size x self.num_channels*4
        s = self.fc2(s)                                     # batch_size x 10

        return s


def loss_fn_kd(outputs, labels, teacher_outputs, params, bug=None):
    """
    Compute the knowledge-distillation (KD) loss given outputs, labels.
    "Hyperparameters": temperature and alpha

    NOTE: the KL Divergence for PyTorch comparing the softmaxs of teacher
    and student expects the input tensor to be log probabilities! See Issue #2
    """
    alpha = params.alpha
    T = params.temperature
    if bug == "kl_on_probabilities":
        # the student's softmax handed to KLDivLoss, as if it compared two distributions (issue #2)
        KD_loss = nn.KLDivLoss()(F.softmax(outputs/T, dim=1),
                                 F.softmax(teacher_outputs/T, dim=1)) * (alpha * T * T) + \
                  F.cross_entropy(outputs, labels) * (1. - alpha)
        return KD_loss
    KD_loss = nn.KLDivLoss()(F.log_softmax(outputs/T, dim=1),
                             F.softmax(teacher_outputs/T, dim=1)) * (alpha * T * T) + \
              F.cross_entropy(outputs, labels) * (1. - alpha)

    return KD_loss


def accuracy(outputs, labels):
    outputs = np.argmax(outputs, axis=1)
    return np.sum(outputs==labels)/float(labels.size)


# ---- model/resnet.py -------------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion*planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion*planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, width=64):
        super(ResNet, self).__init__()
        self.in_planes = width

        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, width*2, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, width*4, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, width*8, num_blocks[3], stride=2)
        self.linear = nn.Linear(width*8*block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1]*(num_blocks-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet18(width=64):
    return ResNet(BasicBlock, [2,2,2,2], width=width)


def resnet_loss_fn(outputs, labels):
    return nn.CrossEntropyLoss()(outputs, labels)


# ---- model/data_loader.py on synthetic images ------------------------------------------------------------------

MEAN = torch.tensor((0.4914, 0.4822, 0.4465)).view(3, 1, 1)
STD = torch.tensor((0.247, 0.243, 0.261)).view(3, 1, 1)


def make_images(seed, n):
    """10 classes, each a fixed smooth random RGB pattern; an image is its class pattern, scaled, plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate((torch.rand(10, 3, 4, 4, generator=g) < 0.5).float(), size=32, mode="bilinear", align_corners=False)
    labels = torch.randint(10, (n,), generator=g)
    scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
    images = (templates[labels] * scale + 0.1 * torch.rand(n, 3, 32, 32, generator=g)).clamp(0, 1)
    return images, labels


class SyntheticCIFAR(Dataset):
    """CIFAR10(train=True, transform=train_transformer) on the synthetic images: RandomCrop(32, padding=4),
    RandomHorizontalFlip(), ToTensor(), Normalize(...) written out."""

    def __init__(self, images, labels, augment):
        self.images, self.labels, self.augment = images, labels, augment

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.augment:
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,)))
            img = padded[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
        return (img - MEAN) / STD, self.labels[i]


_TEACHERS = {}


def pretrained_teacher(seed, trainloader):
    """train.py's non-KD path for ``base_resnet18`` (train(): model.train(), zero_grad/backward/step), 40 batches."""
    if seed not in _TEACHERS:
        torch.manual_seed(seed + 1)
        teacher_model = ResNet18(width=8)
        optimizer = optim.SGD(teacher_model.parameters(), lr=1e-1, momentum=0.9, weight_decay=5e-4)
        teacher_model.train()
        done = 0
        while done < 40:
            for train_batch, labels_batch in trainloader:
                output_batch = teacher_model(train_batch)
                loss = resnet_loss_fn(output_batch, labels_batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                done += 1
                if done == 40:
                    break
        for p in teacher_model.parameters():
            p.requires_grad_(False)
        _TEACHERS[seed] = teacher_model.state_dict()
    teacher_model = ResNet18(width=8)
    teacher_model.load_state_dict(copy.deepcopy(_TEACHERS[seed]))  # utils.load_checkpoint(teacher_checkpoint, ...)
    return teacher_model


# ---- train.py (cnn_distill) ------------------------------------------------------------------------------------

def fetch_teacher_outputs(teacher_model, dataloader, params):
    """The helper of the repository's earlier train.py (before PR #17): one pass of the teacher over the loader."""
    # set teacher_model to evaluation mode
    teacher_model.eval()
    teacher_outputs = []
    for i, (train_batch, labels_batch) in enumerate(dataloader):
        with torch.no_grad():
            output_teacher_batch = teacher_model(train_batch).data
        teacher_outputs.append(output_teacher_batch)

    return teacher_outputs


def _build(seed, bug=None):
    params = Params(model_version="cnn_distill", subset_percent=1.0, augmentation="yes", teacher="resnet18",
                    alpha=0.9, temperature=20, learning_rate=1e-3, batch_size=32, num_epochs=30, dropout_rate=0.5,
                    num_channels=8, save_summary_steps=100, num_workers=0, cuda=False)
    images, labels = make_images(seed, 1024)
    trainset = SyntheticCIFAR(images, labels, augment=params.augmentation == "yes")
    teacher_loader = DataLoader(trainset, batch_size=params.batch_size, shuffle=True,
                                generator=torch.Generator().manual_seed(seed + 2))
    teacher_model = pretrained_teacher(seed, teacher_loader)

    torch.manual_seed(seed)
    train_dl = DataLoader(trainset, batch_size=params.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))

    model = Net(params)
    optimizer = optim.Adam(model.parameters(), lr=params.learning_rate)
    scheduler = StepLR(optimizer, step_size=100, gamma=0.2)

    teacher_outputs = None
    if bug == "teacher_outputs_from_shuffled_epoch":
        # the repository's earlier train.py: the teacher's outputs computed once, over one shuffled pass, then read
        # back by batch index in later (reshuffled) epochs (issues #4 and #23)
        teacher_outputs = fetch_teacher_outputs(teacher_model, train_dl, params)

    state = {"it": None, "i": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                scheduler.step()
            state["it"], state["i"] = iter(train_dl), 0
            return next(state["it"])

    def train_step():
        # set model to training mode
        model.train()
        teacher_model.eval()

        train_batch, labels_batch = next_batch()
        i = state["i"]
        state["i"] += 1

        # compute model output, fetch teacher output, and compute KD loss
        output_batch = model(train_batch)

        # get one batch output from teacher_outputs list
        if teacher_outputs is not None:
            output_teacher_batch = teacher_outputs[i]
        else:
            with torch.no_grad():
                output_teacher_batch = teacher_model(train_batch)

        loss = loss_fn_kd(output_batch, labels_batch, output_teacher_batch, params, bug)

        # clear previous gradients, compute gradients of all variables wrt loss
        optimizer.zero_grad()
        loss.backward()

        # performs updates using calculated gradients
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            output_batch = model(batch[0])
        model.train()
        return float(accuracy(output_batch.numpy(), batch[1][0].numpy()))

    first_x, first_y = next(iter(DataLoader(trainset, batch_size=params.batch_size)))
    teacher_model.eval()
    if teacher_outputs is not None:
        first_t = teacher_outputs[0]  # what the loop pairs with its first batch
    else:
        with torch.no_grad():
            first_t = teacher_model(first_x)

    def loss_fn(outputs, targets):
        labels_batch, output_teacher_batch = targets
        return loss_fn_kd(outputs, labels_batch, output_teacher_batch, params, bug)

    return Program(name="kdpytorch_cnn_distill", model=model, batch=(first_x, (first_y, first_t)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # the repository's own earlier train.py: teacher outputs precomputed over one shuffled pass and indexed by batch
    # number in later epochs, so the student is distilled toward another batch's teacher outputs
    # (https://github.com/haitongli/knowledge-distillation-pytorch/issues/4,
    # https://github.com/haitongli/knowledge-distillation-pytorch/issues/23; fixed by PR #17).
    Bug("teacher_outputs_from_shuffled_epoch", functools.partial(_build, bug="teacher_outputs_from_shuffled_epoch"),
        "learning_ledger", ("TASK",)),
    # KLDivLoss fed the student's probabilities instead of its log-probabilities (the pitfall of
    # https://github.com/haitongli/knowledge-distillation-pytorch/issues/2, noted in loss_fn_kd's docstring).
    Bug("kl_on_probabilities", functools.partial(_build, bug="kl_on_probabilities"), "learning_ledger",
        ("OBJECTIVE",)),
]
