"""Brandon Amos's DenseNet-BC on CIFAR-10: ``DenseNet`` (3x3 stem conv, three dense blocks of BN-ReLU-1x1-BN-ReLU-3x3
``Bottleneck`` layers whose outputs are concatenated to their inputs, ``Transition`` layers halving the channels and
the resolution, final BN-ReLU, 8x8 average pooling, linear, ``log_softmax``; He-normal conv init), trained by
``train.py`` with ``F.nll_loss``, SGD (lr 0.1, momentum 0.9, weight decay 1e-4) and ``adjust_opt``'s step schedule,
random crop (padding 4) and horizontal flip, CIFAR normalization, and ``test``'s error under ``net.eval()``.

Source: https://github.com/bamos/densenet.pytorch
Commit: d1cd5e1957975628286e516512c6d1c14430f810
Files: train.py, densenet.py
License: Apache-2.0 (the LICENSE holds the license text with no copyright line; the repository is Brandon Amos's;
full text in LICENSES/bamos-densenet.pytorch.txt)
Domain: vision, image classification (DenseNet-BC, CIFAR-10)

Kept as written: ``Bottleneck``, ``SingleLayer``, ``Transition``, ``DenseNet`` (with ``bottleneck=True`` and
``reduction=0.5``), the ``--opt sgd`` optimizer, ``adjust_opt`` (called at every epoch start), ``train``'s loop body
(``net.train()`` per epoch, zero_grad, forward, ``F.nll_loss``, backward, step, the batch error) and ``test`` (eval
mode, summed ``nll_loss`` over batches divided by their count, error); the normalization constants.

Deviations from the original:
- sizes for 2 CPU cores: ``depth`` 100 -> 16 (2 bottleneck layers per dense block instead of 16), ``growthRate``
  12 -> 6; ``--batchSz`` 64 -> 32; 32x32 inputs kept (the final ``avg_pool2d(..., 8)`` needs them);
- data: CIFAR-10 is replaced by synthetic 32x32 uint8 images made from ``seed`` (each class a colour and a stripe
  orientation, with noise; 256 training, 128 test); torchvision's ``RandomCrop(32, padding=4)``,
  ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize`` are written out on the HWC arrays (torch RNG);
- ``F.log_softmax`` without ``dim`` (the implicit choice, dim 1 for these 2-D logits) is written with ``dim=1``;
  ``Variable(..., volatile=True)`` (a no-op today) is written as ``torch.no_grad()`` in ``test``; ``loss.data[0]``
  -> ``loss.item()``; no CUDA, ``setproctitle``, csv files, ``torch.save`` of the model, the ``plot.py`` call or
  prints;
- one ``train_step`` is one iteration of ``train``'s batch loop; ``adjust_opt`` and ``net.train()`` run before an
  epoch's first batch and ``test`` after its last; ``eval_fn`` is ``test`` (the error in percent);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF046, PLW0127

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

GROWTH_RATE, DEPTH, BATCH_SZ, N_TRAIN, N_TEST = 6, 16, 32, 256, 128

# ---- densenet.py -------------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    def __init__(self, nChannels, growthRate):
        super(Bottleneck, self).__init__()
        interChannels = 4*growthRate
        self.bn1 = nn.BatchNorm2d(nChannels)
        self.conv1 = nn.Conv2d(nChannels, interChannels, kernel_size=1,
                               bias=False)
        self.bn2 = nn.BatchNorm2d(interChannels)
        self.conv2 = nn.Conv2d(interChannels, growthRate, kernel_size=3,
                               padding=1, bias=False)

    def forward(self, x):
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        out = torch.cat((x, out), 1)
        return out


class SingleLayer(nn.Module):
    def __init__(self, nChannels, growthRate):
        super(SingleLayer, self).__init__()
        self.bn1 = nn.BatchNorm2d(nChannels)
        self.conv1 = nn.Conv2d(nChannels, growthRate, kernel_size=3,
                               padding=1, bias=False)

    def forward(self, x):
        out = self.conv1(F.relu(self.bn1(x)))
        out = torch.cat((x, out), 1)
        return out


class Transition(nn.Module):
    def __init__(self, nChannels, nOutChannels):
        super(Transition, self).__init__()
        self.bn1 = nn.BatchNorm2d(nChannels)
        self.conv1 = nn.Conv2d(nChannels, nOutChannels, kernel_size=1,
                               bias=False)

    def forward(self, x):
        out = self.conv1(F.relu(self.bn1(x)))
        out = F.avg_pool2d(out, 2)
        return out


class DenseNet(nn.Module):
    def __init__(self, growthRate, depth, reduction, nClasses, bottleneck, bug=None):
        super(DenseNet, self).__init__()
        self.bug = bug  # (port) the variant being built

        nDenseBlocks = (depth-4) // 3
        if bottleneck:
            nDenseBlocks //= 2

        nChannels = 2*growthRate
        self.conv1 = nn.Conv2d(3, nChannels, kernel_size=3, padding=1,
                               bias=False)
        self.dense1 = self._make_dense(nChannels, growthRate, nDenseBlocks, bottleneck)
        nChannels += nDenseBlocks*growthRate
        nOutChannels = int(math.floor(nChannels*reduction))
        self.trans1 = Transition(nChannels, nOutChannels)

        nChannels = nOutChannels
        self.dense2 = self._make_dense(nChannels, growthRate, nDenseBlocks, bottleneck)
        nChannels += nDenseBlocks*growthRate
        nOutChannels = int(math.floor(nChannels*reduction))
        self.trans2 = Transition(nChannels, nOutChannels)

        nChannels = nOutChannels
        self.dense3 = self._make_dense(nChannels, growthRate, nDenseBlocks, bottleneck)
        nChannels += nDenseBlocks*growthRate

        self.bn1 = nn.BatchNorm2d(nChannels)
        self.fc = nn.Linear(nChannels, nClasses)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def _make_dense(self, nChannels, growthRate, nDenseBlocks, bottleneck):
        layers = []
        for i in range(int(nDenseBlocks)):
            if bottleneck:
                layers.append(Bottleneck(nChannels, growthRate))
            else:
                layers.append(SingleLayer(nChannels, growthRate))
            nChannels += growthRate
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv1(x)
        out = self.trans1(self.dense1(out))
        out = self.trans2(self.dense2(out))
        out = self.dense3(out)
        out = torch.squeeze(F.avg_pool2d(F.relu(self.bn1(out)), 8))
        # the variant normalizes over the batch (dim 0) instead of the classes
        out = F.log_softmax(self.fc(out), dim=0 if self.bug == "log_softmax_over_batch" else 1)
        return out


# ---- train.py: data (CIFAR-10 and torchvision's transforms written out) ---------------------------------------

normMean = [0.49139968, 0.48215827, 0.44653124]
normStd = [0.24703233, 0.24348505, 0.26158768]


def _to_tensor_normalize(img):
    """transforms.ToTensor() then transforms.Normalize(normMean, normStd) on an HWC uint8 array."""
    x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div(255)
    return (x - torch.tensor(normMean)[:, None, None]) / torch.tensor(normStd)[:, None, None]


def trainTransform(img):
    """transforms.RandomCrop(32, padding=4), RandomHorizontalFlip(), ToTensor(), normTransform."""
    padded = np.pad(img, ((4, 4), (4, 4), (0, 0)))
    i, j = (int(v) for v in torch.randint(0, 9, (2,)))
    img = padded[i:i + 32, j:j + 32]
    if torch.rand(1) < 0.5:
        img = img[:, ::-1]
    return _to_tensor_normalize(img)


def testTransform(img):
    return _to_tensor_normalize(img)


class SyntheticCIFAR10(Dataset):
    """(port) 32x32 uint8 images: a class colour and a class stripe orientation, plus noise."""

    def __init__(self, gen, n, transform, colours):
        self.targets = torch.randint(10, (n,), generator=gen)
        angles = torch.arange(10) * math.pi / 10
        yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing='ij')
        a = angles[self.targets][:, None, None]
        stripes = torch.sin((xx * torch.cos(a) + yy * torch.sin(a)) * 0.8)
        base = torch.stack([colours[self.targets], 1 - colours[self.targets], 0.5 + 0 * colours[self.targets]], 1)
        imgs = base[:, :, None, None] * 0.6 + 0.2 * stripes[:, None] + 0.08 * torch.randn(n, 3, 32, 32, generator=gen)
        self.data = (imgs.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return self.transform(self.data[index]), int(self.targets[index])


# ---- train.py ----------------------------------------------------------------------------------------------------

def train_batch(net, optimizer, data, target, bug=None):
    """The body of ``train``'s ``for batch_idx, (data, target) in enumerate(trainLoader)`` loop."""
    optimizer.zero_grad()
    output = net(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    if bug == "zero_grad_after_backward":
        optimizer.zero_grad()  # moved between the backward and the step: every update is zero
    optimizer.step()
    pred = output.data.max(1)[1] # get the index of the max log-probability
    incorrect = pred.ne(target.data).cpu().sum()
    err = 100.*incorrect/len(data)  # noqa: F841  (logged by the original)
    return loss.item()


def test(net, testLoader, bug=None):
    if bug != "test_in_train_mode":  # the variant leaves net.eval() out: BatchNorm measures on batch statistics
        net.eval()
    test_loss = 0
    incorrect = 0
    with torch.no_grad():
        for data, target in testLoader:
            output = net(data)
            test_loss += F.nll_loss(output, target).item()
            pred = output.data.max(1)[1] # get the index of the max log-probability
            incorrect += pred.ne(target.data).cpu().sum()

    test_loss = test_loss
    test_loss /= len(testLoader) # loss function already averages over batch size
    nTotal = len(testLoader.dataset)
    err = 100.*incorrect/nTotal
    return float(err)


def adjust_opt(optAlg, optimizer, epoch):
    if optAlg == 'sgd':
        if epoch < 150: lr = 1e-1
        elif epoch == 150: lr = 1e-2
        elif epoch == 225: lr = 1e-3
        else: return

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = torch.linspace(0.1, 0.9, 10)[torch.randperm(10, generator=gen)]
    trainLoader = DataLoader(SyntheticCIFAR10(gen, N_TRAIN, trainTransform, colours), batch_size=BATCH_SZ,
                             shuffle=True)
    testLoader = DataLoader(SyntheticCIFAR10(gen, N_TEST, testTransform, colours), batch_size=BATCH_SZ, shuffle=False)

    net = DenseNet(growthRate=GROWTH_RATE, depth=DEPTH, reduction=0.5,
                   bottleneck=True, nClasses=10, bug=bug)
    optimizer = optim.SGD(net.parameters(), lr=1e-1,
                          momentum=0.9, weight_decay=1e-4)
    st = {"epoch": 1, "it": None, "i": 0}

    def train_step():
        if st["it"] is None:  # for epoch in range(1, nEpochs + 1): adjust_opt(...); train(...) starts
            adjust_opt('sgd', optimizer, st["epoch"])
            net.train()
            st["it"], st["i"] = iter(trainLoader), 0
        data, target = next(st["it"])
        loss = train_batch(net, optimizer, data, target, bug=bug)
        st["i"] += 1
        if st["i"] == len(trainLoader):  # train(...) ends: test(...), then the next epoch
            test(net, testLoader, bug=bug)
            st["epoch"], st["it"] = st["epoch"] + 1, None
        return loss

    def eval_fn(model, _batch=None):
        return test(model, testLoader, bug=bug)

    batch = next(iter(DataLoader(trainLoader.dataset, batch_size=BATCH_SZ)))
    return Program(name="bamosdensenet_cifar", model=net, batch=batch, loss_fn=F.nll_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=trainLoader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: log_softmax over the batch (dim 0) instead of the classes, the axis the original leaves implicit.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: net.eval() left out of test(): BatchNorm normalizes the test batches by their own statistics and
    # updates its running averages while measuring.
    Bug("test_in_train_mode", functools.partial(_build, bug="test_in_train_mode"), "six_claims", ("EVALUATION",)),
    # classic: optimizer.zero_grad() moved between backward() and step(): every update is zero.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
