"""AdaCos on MNIST of 4uiiurz1/pytorch-adacos: the repository's ``MNISTNet`` (three VGG blocks of two 3x3
conv-BN-ReLU each with 2x2 max pooling, BatchNorm2d, Dropout2d 0.5, a Linear to 512 features and BatchNorm1d) and its
``AdaCos`` head (features and class weights L2-normalized, cosine logits, the scale ``s`` re-estimated on every
labelled forward from the non-target logits' mean exponential and the median target angle, under ``no_grad``),
trained by ``mnist_train.py`` with its defaults (``--metric adacos``): ``CrossEntropyLoss`` on the scaled logits, SGD
(lr 1e-2, momentum 0.5, weight decay 1e-4), ``CosineAnnealingLR(T_max=epochs, eta_min=1e-3)`` stepped at the start of
each epoch, ``train`` (``model.train()``, ``metric_fc.train()``, forward, loss, ``zero_grad`` / ``backward`` /
``step``) then ``validate`` (``eval()``, ``no_grad``, the head still given the targets) every epoch.

Source: https://github.com/4uiiurz1/pytorch-adacos
Commit: 35c086cc07087657595e1d10eaddefb3b3a46f35
Files: mnist_train.py, mnist/archs.py, metrics.py, utils.py
License: MIT (Copyright (c) 2019 Takato Kimura)
Domain: image classification with a normalized-softmax metric-learning head (MNIST)

Deviations from the original:
- the fix of the repository's issue https://github.com/4uiiurz1/pytorch-adacos/issues/10 is applied: the script
  builds SGD over ``model.parameters()`` only, so the AdaCos class weights ``W`` stay at their Xavier init; here
  SGD is built over the parameters of both ``model`` and ``metric_fc`` (as the issue asks), and the line as written
  is the bug ``metric_fc_not_in_optimizer``; the two modules are held in one ``nn.Module`` (``net``, with the
  attributes ``model`` and ``metric_fc``) so that the program has one model to declare; its forward (used only
  outside the loop) is the unlabelled head's cosine logits times the current scale ``s``, scored with the script's
  ``CrossEntropyLoss``;
- sizes: batch 128 -> 32; 60000 / 10000 MNIST images -> 320 / 128 synthetic ones; the network is as written
  (28x28 inputs, 512 features);
- data: ``torchvision.datasets.MNIST`` (a download) is replaced by synthetic digits made from ``seed``: ten smooth
  random stroke templates, each image its class's template shifted by up to 2 pixels with noise, in [0, 1];
  ``ToTensor`` + ``Normalize((0.1307,), (0.3081,))`` written out; DataLoader without workers;
- ``.cuda()``, ``cudnn.benchmark``, tqdm, the pandas log, joblib and checkpoint saving are dropped;
- one ``train_step`` is one batch of ``train()``; when the loader is exhausted the epoch ends as in ``main()``:
  ``validate``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()`` /
  ``metric_fc.train()``; ``eval_fn`` is the top-1 accuracy of the unlabelled head's cosine logits under ``eval()``.
"""
# ruff: noqa: F841, PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import itertools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn import Parameter
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, BATCH_SIZE, NUM_FEATURES, EPOCHS = 320, 128, 32, 512, 100
LR, MIN_LR, MOMENTUM, WEIGHT_DECAY = 1e-2, 1e-3, 0.5, 1e-4


# ---- metrics.py ----------------------------------------------------------------------------------------------

class AdaCos(nn.Module):
    def __init__(self, num_features, num_classes, m=0.50):
        super(AdaCos, self).__init__()
        self.num_features = num_features
        self.n_classes = num_classes
        self.s = math.sqrt(2) * math.log(num_classes - 1)
        self.m = m
        self.W = Parameter(torch.FloatTensor(num_classes, num_features))
        nn.init.xavier_uniform_(self.W)

    def forward(self, input, label=None):
        # normalize features
        x = F.normalize(input)
        # normalize weights
        W = F.normalize(self.W)
        # dot product
        logits = F.linear(x, W)
        if label is None:
            return logits
        # feature re-scale
        theta = torch.acos(torch.clamp(logits, -1.0 + 1e-7, 1.0 - 1e-7))
        one_hot = torch.zeros_like(logits)
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        with torch.no_grad():
            B_avg = torch.where(one_hot < 1, torch.exp(self.s * logits), torch.zeros_like(logits))
            B_avg = torch.sum(B_avg) / input.size(0)
            # print(B_avg)
            theta_med = torch.median(theta[one_hot == 1])
            self.s = torch.log(B_avg) / torch.cos(torch.min(math.pi/4 * torch.ones_like(theta_med), theta_med))
        output = self.s * logits

        return output


# ---- mnist/archs.py ------------------------------------------------------------------------------------------

class VGGBlock(nn.Module):
    def __init__(self, in_channels, middle_channels, out_channels):
        super(VGGBlock, self).__init__()
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, middle_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(middle_channels)
        self.conv2 = nn.Conv2d(middle_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, input):
        x = self.conv1(input)
        x = self.bn1(x)
        x = self.relu(x)

        x = self.conv2(x)
        x = self.bn2(x)
        output = self.relu(x)

        return output


class MNISTNet(nn.Module):
    def __init__(self, args):
        super().__init__()

        self.pool = nn.MaxPool2d((2, 2))
        self.features = nn.Sequential(*[
            VGGBlock(1, 16, 16),
            self.pool,
            VGGBlock(16, 32, 32),
            self.pool,
            VGGBlock(32, 64, 64),
            self.pool,
        ])

        self.bn1 = nn.BatchNorm2d(64)
        self.dropout = nn.Dropout2d(0.5)
        self.fc = nn.Linear(3*3*64, args.num_features)
        self.bn2 = nn.BatchNorm1d(args.num_features)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, input):
        x = self.features(input)
        x = self.bn1(x)
        x = self.dropout(x)
        x = x.view(x.shape[0], -1)
        x = self.fc(x)
        output = self.bn2(x)

        return output


# ---- synthetic digits in place of torchvision's MNIST --------------------------------------------------------

def make_digits(gen, templates, n):
    labels = torch.randint(0, 10, (n,), generator=gen)
    images = torch.empty(n, 1, 28, 28)
    for i in range(n):
        dy, dx = (int(v) for v in torch.randint(-2, 3, (2,), generator=gen))
        images[i, 0] = torch.roll(templates[labels[i]], shifts=(dy, dx), dims=(0, 1))
    images = (images + 0.1 * torch.randn(n, 1, 28, 28, generator=gen)).clamp(0, 1)
    return (images - 0.1307) / 0.3081, labels  # transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))


def make_templates(gen):
    """Ten stroke-like templates: a few thick random line segments, blurred, in a 20x20 centre box."""
    templates = torch.zeros(10, 28, 28)
    t = torch.linspace(0, 1, 40)
    for c in range(10):
        pts = 4 + 20 * torch.rand(4, 2, generator=gen)
        for a, b in itertools.pairwise(pts):
            line = a[None] + t[:, None] * (b - a)[None]
            for y, x in line.round().long().clamp(0, 27):
                templates[c, max(y - 1, 0):y + 2, max(x - 1, 0):x + 2] = 1.0
    return F.avg_pool2d(templates[:, None], 3, 1, 1)[:, 0].clamp(0, 1)


class Net(nn.Module):
    """``model`` and ``metric_fc`` in one module (not in the original); its forward is the unlabelled head's cosine
    logits at the current scale ``s``, what ``validate`` would score without the targets."""

    def __init__(self, model, metric_fc):
        super().__init__()
        self.model, self.metric_fc = model, metric_fc

    def forward(self, input):
        return self.metric_fc.s * self.metric_fc(self.model(input))


class _Args:
    num_features = NUM_FEATURES
    metric = 'adacos'


# ---- mnist_train.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = make_templates(gen)
    train_x, train_y = make_digits(gen, templates, N_TRAIN)
    test_x, test_y = make_digits(gen, templates, N_TEST)
    args = _Args()

    criterion = nn.CrossEntropyLoss().cpu()
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=BATCH_SIZE, shuffle=False, num_workers=0)

    # create model
    model = MNISTNet(args)
    metric_fc = AdaCos(num_features=args.num_features, num_classes=10)
    net = Net(model, metric_fc)

    if bug == "metric_fc_not_in_optimizer":
        # as written in mnist_train.py (issue #10): the head's class weights W are never updated
        optimizer = optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=LR,
                momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    else:
        optimizer = optim.SGD(filter(lambda p: p.requires_grad, net.parameters()), lr=LR,
                momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    scheduler = lr_scheduler.CosineAnnealingLR(optimizer,
            T_max=EPOCHS, eta_min=MIN_LR)

    def validate():
        # switch to evaluate mode
        model.eval()
        metric_fc.eval()

        with torch.no_grad():
            for i, (input, target) in enumerate(test_loader):
                input = input.cpu()
                target = target.long().cpu()
                feature = model(input)
                output = metric_fc(feature, target)
                loss = criterion(output, target)

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): validate, then the next epoch
                validate()
            scheduler.step()
            model.train()
            metric_fc.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target = next_batch()
        input = input.cpu()
        target = target.long().cpu()

        feature = model(input)
        output = metric_fc(feature, target)
        loss = criterion(output, target)

        # compute gradient and do optimizing step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.detach()

    def eval_fn(net, batch):
        input, target = batch
        was_training = net.training
        net.eval()
        with torch.no_grad():
            pred = net.metric_fc(net.model(input)).argmax(dim=1)
        net.train(was_training)
        return float((pred == target).float().mean())

    return Program(name="adacos_mnist", model=net, batch=(train_x[:BATCH_SIZE], train_y[:BATCH_SIZE]),
                   loss_fn=criterion, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   task_probe=(test_x, test_y), task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # The script as written: SGD over model.parameters() only, so AdaCos's class weights W keep their random init
    # (https://github.com/4uiiurz1/pytorch-adacos/issues/10).
    Bug("metric_fc_not_in_optimizer", functools.partial(_build, bug="metric_fc_not_in_optimizer"),
        "four_structures", ("metric_fc.W",)),
    # zero_grad moved between backward and step: every step applies only the weight decay and momentum.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
