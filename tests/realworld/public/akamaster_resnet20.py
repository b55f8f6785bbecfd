"""CIFAR ResNet-20 of akamaster/pytorch_resnet_cifar10: the repository's ``resnet20`` (3x3 stem, three stages of
BasicBlocks with BatchNorm and the option-A shortcut: a strided slice zero-padded along the channels, global average
pool, linear head, Kaiming-normal init), wrapped in ``torch.nn.DataParallel`` as ``trainer.py`` does, trained by the
script's loop: ``CrossEntropyLoss``, SGD(lr 0.1, momentum 0.9, weight_decay 1e-4), ``MultiStepLR(milestones=[100,
150])`` stepped once per epoch, ``zero_grad``/``backward``/``step`` per batch, ``validate`` (``eval()``, no_grad,
precision@1) after each epoch.

Source: https://github.com/akamaster/pytorch_resnet_cifar10
Commit: d5489e8995e81e91ce6b1d69dcc98ad579b0b153
Files: resnet.py, trainer.py, run.sh
License: BSD-2-Clause (Copyright (c) 2018, Yerlan Idelbayev)
Domain: image classification (CIFAR-style residual CNN, step schedule)

Deviations from the original:
- the weiaicunzai/pytorch-cifar100 repository named in the brief has no license, so this permissively licensed CIFAR
  training repository is used instead; ``resnet20`` (the first model ``run.sh`` trains) is ported, so the warm-up
  branch of ``trainer.py`` (taken for resnet110/resnet1202 only) does not run, as in the original;
- sizes: images 32x32 -> 16x16 (the network is size-agnostic: it average-pools whatever is left), batch 128 -> 32,
  50000 training images -> 512, 10000 validation images -> 64; the network's widths and depth are unchanged;
- ``.cuda()``, ``cudnn.benchmark``, ``--half``, checkpoint saving and printing are dropped (CPU; ``DataParallel``
  without GPUs calls its module directly);
- data: CIFAR-10 is replaced by synthetic RGB images made from ``seed`` (each class has its own colour, plus smooth
  noise); torchvision is not available, so the transforms (RandomHorizontalFlip, RandomCrop(size, padding 4),
  ToTensor, Normalize with the script's mean/std) are written out in plain torch; DataLoader without workers;
- one ``train_step`` is one batch of ``train()``'s loop (forward, loss, ``zero_grad``, ``backward``, ``step``); when
  the loader is exhausted the epoch ends as in ``main()``: ``lr_scheduler.step()``, ``validate`` on the held-out set,
  then the next ``train()`` call's ``model.train()``; ``eval_fn`` is ``validate``'s precision@1 on a batch.
"""
# ruff: noqa: F841, PLR0402, PLR1704, SIM101, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.utils.data
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_VAL, BATCH_SIZE, NUM_CLASSES = 16, 512, 64, 32, 10
LR, MOMENTUM, WEIGHT_DECAY, START_EPOCH = 0.1, 0.9, 1e-4, 0


# ---- resnet.py -----------------------------------------------------------------------------------------------

def _weights_init(m):
    classname = m.__class__.__name__
    #print(classname)
    if isinstance(m, nn.Linear) or isinstance(m, nn.Conv2d):
        init.kaiming_normal_(m.weight)

class LambdaLayer(nn.Module):
    def __init__(self, lambd):
        super(LambdaLayer, self).__init__()
        self.lambd = lambd

    def forward(self, x):
        return self.lambd(x)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, option='A'):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            if option == 'A':
                """
                For CIFAR10 ResNet paper uses option A.
                """
                self.shortcut = LambdaLayer(lambda x:
                                            F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, planes//4, planes//4), "constant", 0))
            elif option == 'B':
                self.shortcut = nn.Sequential(
                     nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                     nn.BatchNorm2d(self.expansion * planes)
                )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super(ResNet, self).__init__()
        self.in_planes = 16

        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._make_layer(block, 16, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 32, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 64, num_blocks[2], stride=2)
        self.linear = nn.Linear(64, num_classes)

        self.apply(_weights_init)

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
        out = F.avg_pool2d(out, out.size()[3])
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def resnet20():
    return ResNet(BasicBlock, [3, 3, 3])


# ---- data: synthetic CIFAR-like images and the script's transforms in plain torch -----------------------------

MEAN = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
STD = torch.tensor([0.229, 0.224, 0.225])[:, None, None]


def normalize(x):
    """transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])."""
    return (x - MEAN) / STD


def random_horizontal_flip(x, gen):
    return x.flip(-1) if float(torch.rand(1, generator=gen)) < 0.5 else x


def random_crop(x, gen, size, padding):
    """transforms.RandomCrop(size, padding): zero-pad, then a uniformly placed size x size window."""
    x = F.pad(x, (padding, padding, padding, padding))
    i = int(torch.randint(0, x.shape[-2] - size + 1, (1,), generator=gen))
    j = int(torch.randint(0, x.shape[-1] - size + 1, (1,), generator=gen))
    return x[:, i:i + size, j:j + size]


def make_colours(gen):
    """Ten colours at least 0.25 apart (rejection sampling)."""
    colours = []
    while len(colours) < NUM_CLASSES:
        c = torch.rand(3, generator=gen) * 0.8 + 0.1
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    return torch.stack(colours)


class ColourImages(Dataset):
    """CIFAR-10 stand-in: the ToTensor output ([0, 1], CHW) of a class colour plus smooth noise."""

    def __init__(self, gen, n, colours, train):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(0.35 * torch.randn(n, 3, IMG // 4, IMG // 4, generator=gen), size=(IMG, IMG),
                              mode="bilinear", align_corners=False)
        self.images = (colours[self.labels][:, :, None, None] + noise).clamp(0, 1)
        self.train = train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = random_crop(random_horizontal_flip(x, self.gen), self.gen, IMG, 4)
        return normalize(x), self.labels[idx]


# ---- trainer.py ----------------------------------------------------------------------------------------------

def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].view(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    train_set = ColourImages(gen, N_TRAIN, colours, train=True)
    val_set = ColourImages(gen, N_VAL, colours, train=False)

    model = torch.nn.DataParallel(resnet20())

    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
        generator=torch.Generator().manual_seed(seed))

    val_loader = torch.utils.data.DataLoader(val_set, batch_size=128, shuffle=False, num_workers=0)

    # define loss function (criterion) and optimizer
    if bug == "nll_loss_on_logits":
        criterion = nn.NLLLoss()  # "the network ends in log-probabilities" -- it ends in a Linear layer
    else:
        criterion = nn.CrossEntropyLoss()

    optimizer = torch.optim.SGD(model.parameters(), LR,
                                momentum=MOMENTUM,
                                weight_decay=WEIGHT_DECAY)

    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer,
                                                        milestones=[100, 150], last_epoch=START_EPOCH - 1)

    def validate(val_loader, model, criterion):
        # switch to evaluate mode
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for i, (input, target) in enumerate(val_loader):
                # compute output
                output = model(input)
                loss = criterion(output, target)

                output = output.float()
                loss = loss.float()

                # measure accuracy and record loss
                prec1 = accuracy(output.data, target)[0]
                total, n = total + prec1.item() * input.size(0), n + input.size(0)
        return total / n

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                lr_scheduler.step()
                validate(val_loader, model, criterion)
            # switch to train mode
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target = next_batch()
        target_var = target
        input_var = input

        # compute output
        output = model(input_var)
        loss = criterion(output, target_var)

        # compute gradient and do SGD step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        input, target = batch
        model.eval()
        with torch.no_grad():
            prec1 = accuracy(model(input).data, target)[0]
        model.train()
        return float(prec1)

    def true_labels(x):
        """The labelling rule: the class whose colour is nearest to the image's mean colour (the crop's zero
        padding left out)."""
        raw = x * STD + MEAN
        keep = (raw.abs().sum(dim=1, keepdim=True) > 1e-4).float()
        mean = (raw * keep).sum(dim=(2, 3)) / keep.sum(dim=(2, 3)).clamp(min=1)
        return torch.cdist(mean, colours).argmin(dim=1)

    first = next(iter(torch.utils.data.DataLoader(train_set, batch_size=BATCH_SIZE)))
    return Program(name="akamaster_resnet20", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=true_labels,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # NLLLoss instead of CrossEntropyLoss on a network that ends in a Linear layer: the "log-probabilities" are raw
    # logits, so the loss falls by pushing the target logit up without bound, never normalized against the others.
    Bug("nll_loss_on_logits", functools.partial(_build, bug="nll_loss_on_logits"), "learning_ledger", ("OBJECTIVE",)),
    # zero_grad moved between backward and step: every step applies only the weight decay, never the gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("conv1.weight",)),
]
