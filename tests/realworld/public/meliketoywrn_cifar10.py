"""Wide ResNet on CIFAR-10 from meliketoy's wide-resnet.pytorch: pre-activation ``wide_basic`` blocks (BN - ReLU -
conv - dropout - BN - ReLU - strided conv, a 1x1 convolution shortcut where the shape changes), ``conv_init``
(xavier-uniform with gain sqrt(2), zero biases), the final BatchNorm with ``momentum=0.9``, 8x8 average pooling and a
linear head; cross-entropy; SGD (momentum 0.9, weight decay 5e-4) rebuilt at every epoch with config.py's step
schedule (lr 0.1, x0.2 after epochs 60, 120, 160); random crop (padding 4) and horizontal flip, CIFAR-10
mean/std normalization.

Source: https://github.com/meliketoy/wide-resnet.pytorch
Commit: 292b3ede0651e349dd566f9c23408aa572f1bd92
Files: main.py, config.py, networks/wide_resnet.py, scripts/cifar10_train.sh
License: MIT (Copyright (c) 2018 Bumsoo Kim; full text in LICENSES/meliketoy-wide-resnet.pytorch.txt)
Domain: vision, image classification (Wide ResNet, SGD with a step schedule)

Kept as written: ``wide_basic``, ``Wide_ResNet`` (the stride on each block's second convolution, the final BN's
momentum 0.9), ``conv_init`` applied with ``net.apply``, ``train``'s loop body (``optimizer.zero_grad()``, forward,
``nn.CrossEntropyLoss``, backward, step), the optimizer made anew at the start of every epoch with
``cf.learning_rate(args.lr, epoch)``, ``test``'s body (``net.eval()``, no_grad, top-1 accuracy), the flags of
scripts/cifar10_train.sh (lr 0.1, dropout 0, cifar10).

Deviations from the original:
- sizes for 2 CPU cores: depth 28 -> 10 (one block per stage), widen_factor 10 -> 1 (stages 16/16/32/64);
  batch_size 128 -> 16, the test batch 100 -> 64; images 32x32 -> 16x16, so the final average pooling is 4x4
  (``F.avg_pool2d(out, 4)`` for ``8``) and the random crop's padding 4 -> 2;
- data: torchvision's CIFAR-10 download is replaced by synthetic 16x16 colour images made from ``seed`` (each of the
  10 classes a fixed low-resolution colour pattern, upsampled, with a random brightness and pixel noise); the
  transforms (RandomCrop(16, padding=2), RandomHorizontalFlip, ToTensor, Normalize with config.py's cifar10
  mean/std) are written out in plain torch, per image, from the global torch RNG; the DataLoader shuffles with a
  seeded generator, no workers;
- the device is the CPU (no DataParallel, no cudnn); argparse, the prints, the timing, checkpoints, resuming and
  ``--testOnly`` are left out; ``Variable`` wrappers are dropped (no-ops since torch 0.4); the constructor's print
  is dropped;
- one ``train_step`` is one iteration of ``train(epoch)``'s loop; when the loader runs out the next epoch begins
  (``net.train()`` and a new optimizer at that epoch's lr, as ``train`` does); the Program's ``optimizer`` is the
  first epoch's; ``eval_fn`` is ``test``'s body on one test batch, returning the top-1 accuracy and putting the
  network back in training mode afterwards (``train`` would at its next epoch);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN = 320
N_TEST = 64


# ---- config.py -----------------------------------------------------------------------------------------------------

start_epoch = 1
num_epochs = 200
batch_size = 16  # (port) 128
optim_type = 'SGD'

mean = {
    'cifar10': (0.4914, 0.4822, 0.4465),
    'cifar100': (0.5071, 0.4867, 0.4408),
}

std = {
    'cifar10': (0.2023, 0.1994, 0.2010),
    'cifar100': (0.2675, 0.2565, 0.2761),
}


def learning_rate(init, epoch):
    optim_factor = 0
    if(epoch > 160):
        optim_factor = 3
    elif(epoch > 120):
        optim_factor = 2
    elif(epoch > 60):
        optim_factor = 1

    return init*math.pow(0.2, optim_factor)


# ---- networks/wide_resnet.py ---------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=True)


def conv_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        init.xavier_uniform_(m.weight, gain=np.sqrt(2))
        init.constant_(m.bias, 0)
    elif classname.find('BatchNorm') != -1:
        init.constant_(m.weight, 1)
        init.constant_(m.bias, 0)


class wide_basic(nn.Module):
    def __init__(self, in_planes, planes, dropout_rate, stride=1):
        super(wide_basic, self).__init__()  # noqa: UP008
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, bias=True)
        self.dropout = nn.Dropout(p=dropout_rate)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=True)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=True),
            )

    def forward(self, x):
        out = self.dropout(self.conv1(F.relu(self.bn1(x))))
        out = self.conv2(F.relu(self.bn2(out)))
        out += self.shortcut(x)

        return out


class Wide_ResNet(nn.Module):
    def __init__(self, depth, widen_factor, dropout_rate, num_classes):
        super(Wide_ResNet, self).__init__()  # noqa: UP008
        self.in_planes = 16

        assert ((depth-4)%6 ==0), 'Wide-resnet depth should be 6n+4'
        n = (depth-4)/6
        k = widen_factor

        nStages = [16, 16*k, 32*k, 64*k]

        self.conv1 = conv3x3(3,nStages[0])
        self.layer1 = self._wide_layer(wide_basic, nStages[1], n, dropout_rate, stride=1)
        self.layer2 = self._wide_layer(wide_basic, nStages[2], n, dropout_rate, stride=2)
        self.layer3 = self._wide_layer(wide_basic, nStages[3], n, dropout_rate, stride=2)
        self.bn1 = nn.BatchNorm2d(nStages[3], momentum=0.9)
        self.linear = nn.Linear(nStages[3], num_classes)

    def _wide_layer(self, block, planes, num_blocks, dropout_rate, stride):
        strides = [stride] + [1]*(int(num_blocks)-1)
        layers = []

        for stride in strides:  # noqa: PLR1704
            layers.append(block(self.in_planes, planes, dropout_rate, stride))
            self.in_planes = planes

        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv1(x)
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = F.relu(self.bn1(out))
        out = F.avg_pool2d(out, 4)  # (port) 8: the images are 16x16 here
        out = out.view(out.size(0), -1)
        out = self.linear(out)

        return out


# ---- the data (port) -----------------------------------------------------------------------------------------------

def _synthetic_cifar(n, seed, templates):
    """Images in [0, 1] (what ToTensor gives): the class's 4x4 colour pattern upsampled to 16x16, times a random
    brightness, plus pixel noise."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=gen)
    imgs = F.interpolate(templates[labels], size=(16, 16), mode="nearest")
    imgs = imgs * (0.7 + 0.3 * torch.rand(n, 1, 1, 1, generator=gen)) + 0.15 * torch.rand(n, 3, 16, 16, generator=gen)
    return imgs.clamp(0, 1), labels


class CIFARLike(torch.utils.data.Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]

    def __len__(self):
        return len(self.labels)


def _normalize(x, dataset='cifar10'):  # transforms.Normalize(cf.mean[args.dataset], cf.std[args.dataset])
    return (x - torch.tensor(mean[dataset]).view(3, 1, 1)) / torch.tensor(std[dataset]).view(3, 1, 1)


def transform_train(x):  # RandomCrop(16, padding=2) (port: 32, 4), RandomHorizontalFlip(), ToTensor(), Normalize
    padded = F.pad(x, (2, 2, 2, 2))
    i, j = (int(v) for v in torch.randint(0, 5, (2,)))
    x = padded[:, i:i + 16, j:j + 16]
    if float(torch.rand(())) < 0.5:
        x = x.flip(-1)
    return _normalize(x)


def transform_test(x):  # ToTensor(), Normalize
    return _normalize(x)


# ---- main.py -------------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    lr, depth, widen_factor, dropout = 0.1, 10, 1, 0.0  # scripts/cifar10_train.sh (depth 28, width 10 -> sizes)
    num_classes = 10

    templates = torch.rand(10, 3, 4, 4, generator=torch.Generator().manual_seed(1234))
    tr_x, tr_y = _synthetic_cifar(N_TRAIN, seed, templates)
    te_x, te_y = _synthetic_cifar(N_TEST, seed + 1000, templates)
    trainset = CIFARLike(tr_x, tr_y, transform_train)
    testset = CIFARLike(te_x, te_y, transform_test)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=batch_size, shuffle=True,
                                              generator=torch.Generator().manual_seed(seed))
    testloader = torch.utils.data.DataLoader(testset, batch_size=64, shuffle=False)

    net = Wide_ResNet(depth, widen_factor, dropout, num_classes)
    net.apply(conv_init)

    criterion = nn.CrossEntropyLoss()

    def new_epoch(epoch):
        net.train()
        net.training = True
        st["optimizer"] = optim.SGD(net.parameters(), lr=learning_rate(lr, epoch), momentum=0.9, weight_decay=5e-4)
        st["it"] = iter(trainloader)

    st = {"epoch": start_epoch}
    new_epoch(st["epoch"])
    first_optimizer = st["optimizer"]

    def train_step():  # one iteration of train(epoch)'s loop
        try:
            inputs, targets = next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            new_epoch(st["epoch"])
            inputs, targets = next(st["it"])
        optimizer = st["optimizer"]
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        outputs = net(inputs)               # Forward Propagation
        if bug == "softmax_before_cross_entropy":
            loss = criterion(F.softmax(outputs, dim=1), targets)
        else:
            loss = criterion(outputs, targets)  # Loss
        loss.backward()  # Backward Propagation
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step() # Optimizer update
        return loss.item()

    def eval_fn(model, batch=None):  # test(epoch)'s body on one test batch: top-1 accuracy
        if bug != "test_without_eval":
            model.eval()
            model.training = False
        correct = 0
        total = 0
        with torch.no_grad():
            inputs, targets = next(iter(testloader))
            outputs = model(inputs)
            _, predicted = torch.max(outputs.data, 1)
            total += targets.size(0)
            correct += predicted.eq(targets.data).cpu().sum()
        acc = 100.*correct/total
        model.train()
        return float(acc)

    def loss_fn(outputs, targets):
        if bug == "softmax_before_cross_entropy":
            return criterion(F.softmax(outputs, dim=1), targets)
        return criterion(outputs, targets)

    batch = (torch.stack([transform_test(x) for x in tr_x[:batch_size]]), tr_y[:batch_size])
    return Program(name="meliketoywrn_cifar10", model=net, batch=batch, loss_fn=loss_fn, optimizer=first_optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: a softmax on the logits before nn.CrossEntropyLoss (which applies log-softmax itself).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() after loss.backward(): every step is taken on a zeroed gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic: test() without net.eval(): the BatchNorm layers normalize the test batch by its own statistics
    # (and update their running statistics from test data).
    Bug("test_without_eval", functools.partial(_build, bug="test_without_eval"), "six_claims", ("EVALUATION",)),
]
