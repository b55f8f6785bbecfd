"""Cutout regularization (DeVries & Taylor, "Improved Regularization of Convolutional Neural Networks with Cutout"):
a CIFAR ResNet-18 trained with random crop + flip, normalization and one 16x16 hole cut out of every training image,
cross-entropy, SGD (lr 0.1, momentum 0.9, Nesterov, weight decay 5e-4) with MultiStepLR (60/120/160, gamma 0.2).

Source: https://github.com/uoguelph-mlrg/Cutout
Commit: 287f934ea5fa00d4345c2cccecf3552e2b1c33e3
Files: train.py (``--dataset cifar10 --model resnet18 --data_augmentation --cutout --length 16``), model/resnet.py,
util/cutout.py
License: ECL-2.0 (Educational Community License 2.0, Apache 2.0 with a narrower patent grant; full text in
LICENSES/uoguelph-mlrg-Cutout.txt)
Domain: vision, image classification with a cutout data augmentation

Kept as written: ``ResNet``/``BasicBlock`` (3x3 stem, four stages, ``avg_pool2d(out, 4)``, Linear head),
``Cutout.__call__`` (numpy hole centre, clipped square, mask expanded over the channels), the training loop body
(``cnn.zero_grad()``, forward, ``CrossEntropyLoss``, backward, ``cnn_optimizer.step()``, running accuracy),
``test()`` (``cnn.eval()``, argmax accuracy, ``cnn.train()``), the optimizer and the scheduler stepped once per epoch
with ``scheduler.step(epoch)`` as in the original.

Deviations from the original:
- sizes for 2 CPU cores: ResNet-18's widths 64/128/256/512 -> 4/8/16/32 (the stem 64 -> 4; ``in_planes`` follows),
  the blocks [2, 2, 2, 2] and the 32x32 images kept; batch_size 128 -> 16; 640 training and 128 test images;
- data: torchvision's CIFAR-10 download is replaced by synthetic 32x32 colour images made from ``seed`` (10 classes,
  each a colour and a stripe orientation, with pixel noise); torchvision's RandomCrop(32, padding=4),
  RandomHorizontalFlip, ToTensor and Normalize (the CIFAR mean/std of the original) are written out in plain torch
  per image; ``Cutout`` runs as written on numpy's global generator, seeded with ``seed`` in ``build``; the
  DataLoader shuffles with a ``torch.Generator(seed)``, no workers, no pin_memory;
- CUDA, cudnn.benchmark, tqdm, the CSV logger and the checkpoint are dropped; the progress bar's postfix is dropped
  (the running loss and accuracy are still computed);
- ``train_step`` is one iteration of the inner loop; at the end of an epoch ``test(test_loader)`` and
  ``scheduler.step(epoch)`` run as in the original; ``eval_fn`` is ``test()`` on the given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, PLR1704

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH = 4  # (port) 64
BATCH_SIZE = 16  # (port) 128
LEARNING_RATE = 0.1
N_TRAIN, N_TEST = 640, 128
MEAN = torch.tensor([x / 255.0 for x in [125.3, 123.0, 113.9]]).view(3, 1, 1)
STD = torch.tensor([x / 255.0 for x in [63.0, 62.1, 66.7]]).view(3, 1, 1)


# util/cutout.py
class Cutout(object):
    """Randomly mask out one or more patches from an image.

    Args:
        n_holes (int): Number of patches to cut out of each image.
        length (int): The length (in pixels) of each square patch.
    """
    def __init__(self, n_holes, length, bug=None):
        self.n_holes = n_holes
        self.length = length
        self.bug = bug

    def __call__(self, img):
        """
        Args:
            img (Tensor): Tensor image of size (C, H, W).
        Returns:
            Tensor: Image with n_holes of dimension length x length cut out of it.
        """
        h = img.size(1)
        w = img.size(2)

        mask = np.ones((h, w), np.float32)

        for n in range(self.n_holes):
            y = np.random.randint(h)
            x = np.random.randint(w)

            y1 = np.clip(y - self.length // 2, 0, h)
            y2 = np.clip(y + self.length // 2, 0, h)
            x1 = np.clip(x - self.length // 2, 0, w)
            x2 = np.clip(x + self.length // 2, 0, w)

            mask[y1: y2, x1: x2] = 0.

        mask = torch.from_numpy(mask)
        mask = mask.expand_as(img)
        img = img * mask

        return img


# model/resnet.py
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
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
    def __init__(self, block, num_blocks, num_classes=10):
        super(ResNet, self).__init__()
        self.in_planes = WIDTH

        self.conv1 = conv3x3(3, WIDTH)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        self.layer1 = self._make_layer(block, WIDTH, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2 * WIDTH, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * WIDTH, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * WIDTH, num_blocks[3], stride=2)
        self.linear = nn.Linear(8 * WIDTH * block.expansion, num_classes)

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


def ResNet18(num_classes=10):
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


# (port) torchvision's transforms, written out for one (C, H, W) tensor
def random_crop(img, size=32, padding=4):
    padded = F.pad(img, (padding, padding, padding, padding))
    i, j = (int(v) for v in torch.randint(0, 2 * padding + 1, (2,)))
    return padded[:, i:i + size, j:j + size]


def random_horizontal_flip(img):
    return img.flip(-1) if float(torch.rand(())) < 0.5 else img


def normalize(img):
    return (img - MEAN) / STD


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class StripeImages(torch.utils.data.Dataset):
    """(port) CIFAR-10's stand-in: 10 classes, each a colour and a stripe orientation/period, with pixel noise, in
    [0, 1] (what ToTensor gives)."""

    def __init__(self, gen, n, colours, transform):
        self.labels = torch.arange(n) % 10
        yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
        phase = torch.rand(n, 1, 1, generator=gen) * 6.28
        coord = torch.where((self.labels % 2 == 0).view(n, 1, 1), yy, xx)
        freq = (0.4 + 0.15 * (self.labels // 2)).view(n, 1, 1).float()
        stripes = 0.5 + 0.5 * torch.sin(coord * freq + phase)
        imgs = colours[self.labels].view(n, 3, 1, 1) * (0.5 + 0.5 * stripes).unsqueeze(1)
        self.images = (imgs + 0.08 * torch.randn(n, 3, 32, 32, generator=gen)).clamp(0, 1)
        self.transform = transform

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = 0.2 + 0.8 * torch.rand(10, 3, generator=gen)

    train_transform = Compose([])
    train_transform.transforms.append(random_crop)
    train_transform.transforms.append(random_horizontal_flip)
    train_transform.transforms.append(normalize)
    train_transform.transforms.append(Cutout(n_holes=1, length=16))

    test_transform = Compose([normalize])

    num_classes = 10
    train_dataset = StripeImages(gen, N_TRAIN, colours, train_transform)
    test_dataset = StripeImages(gen, N_TEST, colours, test_transform)

    train_loader = torch.utils.data.DataLoader(dataset=train_dataset,
                                               batch_size=BATCH_SIZE,
                                               shuffle=True,
                                               num_workers=0,
                                               generator=torch.Generator().manual_seed(seed))

    test_loader = torch.utils.data.DataLoader(dataset=test_dataset,
                                              batch_size=BATCH_SIZE,
                                              shuffle=False,
                                              num_workers=0)

    cnn = ResNet18(num_classes=num_classes)
    criterion = nn.CrossEntropyLoss()
    if bug == "linear_left_out_of_optimizer":
        params = [p for n, p in cnn.named_parameters() if not n.startswith("linear.")]
    else:
        params = cnn.parameters()
    cnn_optimizer = torch.optim.SGD(params, lr=LEARNING_RATE,
                                    momentum=0.9, nesterov=True, weight_decay=5e-4)

    scheduler = torch.optim.lr_scheduler.MultiStepLR(cnn_optimizer, milestones=[60, 120, 160], gamma=0.2)

    def test(loader):
        if bug != "test_without_eval":
            cnn.eval()    # Change model to 'eval' mode (BN uses moving mean/var).
        correct = 0.
        total = 0.
        for images, labels in loader:
            with torch.no_grad():
                pred = cnn(images)

            pred = torch.max(pred.data, 1)[1]
            total += labels.size(0)
            correct += (pred == labels).sum().item()

        val_acc = correct / total
        cnn.train()
        return val_acc

    state = {"it": iter(train_loader), "epoch": 0, "xentropy_loss_avg": 0., "correct": 0., "total": 0., "i": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            test(test_loader)
            scheduler.step(state["epoch"])  # Use this line for PyTorch <1.4
            state.update(epoch=state["epoch"] + 1, xentropy_loss_avg=0., correct=0., total=0., i=0)
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        images, labels = next_batch()

        if bug != "no_zero_grad":
            cnn.zero_grad()
        pred = cnn(images)

        xentropy_loss = criterion(pred, labels)
        xentropy_loss.backward()
        cnn_optimizer.step()

        state["xentropy_loss_avg"] += xentropy_loss.item()

        # Calculate running average of accuracy
        pred = torch.max(pred.data, 1)[1]
        state["total"] += labels.size(0)
        state["correct"] += (pred == labels.data).sum().item()
        state["i"] += 1
        return xentropy_loss.detach()

    def eval_fn(model, batch):
        return test([batch])

    known = (test_dataset.images[:BATCH_SIZE * 2], test_dataset.labels[:BATCH_SIZE * 2])
    known = (torch.stack([normalize(x) for x in known[0]]), known[1])
    first = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=BATCH_SIZE)))
    return Program(name="cutout_resnet18", model=cnn, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=cnn_optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=known,
                   task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # test() without cnn.eval(): the evaluation's BatchNorm normalizes with the test batch's own statistics (and
    # updates the running ones), so the reported accuracy is not the trained model's.
    Bug("test_without_eval", functools.partial(_build, bug="test_without_eval"), "six_claims", ("EVALUATION",)),
    # the Linear head left out of the optimizer's parameters: it stays at its random initialization.
    Bug("linear_left_out_of_optimizer", functools.partial(_build, bug="linear_left_out_of_optimizer"),
        "four_structures", ("linear",)),
    # cnn.zero_grad() dropped: every step applies the sum of all gradients so far.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
