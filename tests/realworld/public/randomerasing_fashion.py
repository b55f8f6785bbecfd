"""Random Erasing data augmentation (Zhong et al., "Random Erasing Data Augmentation") on Fashion-MNIST, from the
authors' repository: a pre-activation-free CIFAR-style ResNet (3x3 stem on one channel, three stages of basic blocks
at 16/32/64 channels, 7x7 average pool, Linear head) trained with random crop + flip, normalization and
``RandomErasing`` (probability ``--p 0.5``, area 0.02-0.4 of the image, aspect ratio 0.3-1/0.3, filled with 0.4914),
cross-entropy, SGD (lr 0.1, momentum 0.9, weight decay 5e-4), the lr multiplied by 0.1 at epochs 150 and 225.

Source: https://github.com/zhunzhong07/Random-Erasing
Commit: ed05424dcb2fd502eafb41b2b1151fb7cd16cbcd
Files: fashionmnist.py (README: ``python fashionmnist.py --dataset fashionmnist --arch resnet --depth 20 --p 0.5``),
       models/fashion/resnet.py, transforms.py, utils/eval.py
License: Apache-2.0 (full text in LICENSES/zhunzhong07-Random-Erasing.txt)
Domain: vision, image classification with a random erasing data augmentation

Kept as written: ``RandomErasing.__call__`` (on Python's global ``random``, seeded as ``fashionmnist.py`` seeds it),
``ResNet``/``BasicBlock`` of models/fashion/resnet.py (its init), ``accuracy``, ``train``'s loop body (forward,
``criterion``, ``accuracy`` top-1/top-5, ``zero_grad``, ``backward``, ``step``), ``test``'s evaluation
(``model.eval()``), ``adjust_learning_rate`` at the start of every epoch, the optimizer and the transforms' order.

Deviations from the original:
- sizes for 2 CPU cores: ``--depth 20`` -> 8 (one basic block per stage, a depth the ``6n+2`` rule allows),
  ``--train-batch`` 128 -> 32, ``--test-batch`` 100 -> 64; 640 training and 128 test images; the schedule [150, 225]
  is kept (never reached in a short run);
- Python 3: ``n = (depth - 2) / 6`` is ``(depth - 2) // 6`` (a float count of blocks is an error in ``range``);
  ``targets.cuda(async=True)``, ``Variable`` and ``volatile=True`` (no-ops or errors in this torch) are dropped;
- data: torchvision's Fashion-MNIST download is replaced by synthetic 28x28 grey-level "items" made from ``seed``
  (10 classes of bar and block patterns, shifted by up to two pixels, with pixel noise) in [0, 1] (what ToTensor
  gives); torchvision's RandomCrop(28, padding=4), RandomHorizontalFlip and Normalize((0.1307,), (0.3081,)) are
  written out in plain torch per image; the DataLoader shuffles with a ``torch.Generator(seed)``, no workers;
- CUDA, DataParallel, cudnn.benchmark, the progress bar, the Logger and its plot, checkpoints and resume are
  dropped;
- one ``train_step`` is one iteration of ``train``'s loop; at the end of an epoch ``test`` runs and the next epoch
  starts with ``adjust_learning_rate``, as in ``main``; ``eval_fn`` is ``test``'s top-1 accuracy on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, RUF046, RUF059

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# the parser's defaults and the README command
TRAIN_BATCH, TEST_BATCH = 32, 64  # (port) 128, 100
LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.9, 5e-4
SCHEDULE, GAMMA = [150, 225], 0.1
DEPTH = 8  # (port) 20
P, SH, R1 = 0.5, 0.4, 0.3
N_TRAIN, N_TEST = 640, 128


# transforms.py
class RandomErasing(object):
    '''
    Class that performs Random Erasing in Random Erasing Data Augmentation by Zhong et al.
    -------------------------------------------------------------------------------------
    probability: The probability that the operation will be performed.
    sl: min erasing area
    sh: max erasing area
    r1: min aspect ratio
    mean: erasing value
    -------------------------------------------------------------------------------------
    '''
    def __init__(self, probability = 0.5, sl = 0.02, sh = 0.4, r1 = 0.3, mean=[0.4914, 0.4822, 0.4465]):  # noqa: B006
        self.probability = probability
        self.mean = mean
        self.sl = sl
        self.sh = sh
        self.r1 = r1

    def __call__(self, img):

        if random.uniform(0, 1) > self.probability:
            return img

        for attempt in range(100):
            area = img.size()[1] * img.size()[2]

            target_area = random.uniform(self.sl, self.sh) * area
            aspect_ratio = random.uniform(self.r1, 1/self.r1)

            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))

            if w < img.size()[2] and h < img.size()[1]:
                x1 = random.randint(0, img.size()[1] - h)
                y1 = random.randint(0, img.size()[2] - w)
                if img.size()[0] == 3:
                    img[0, x1:x1+h, y1:y1+w] = self.mean[0]
                    img[1, x1:x1+h, y1:y1+w] = self.mean[1]
                    img[2, x1:x1+h, y1:y1+w] = self.mean[2]
                else:
                    img[0, x1:x1+h, y1:y1+w] = self.mean[0]
                return img

        return img


# (port) torchvision's transforms, written out for one (C, H, W) tensor
def random_crop(img, size=28, padding=4):
    padded = F.pad(img, (padding, padding, padding, padding))
    i = random.randint(0, 2 * padding)
    j = random.randint(0, 2 * padding)
    return padded[:, i:i + size, j:j + size]


def random_horizontal_flip(img):
    return img.flip(-1) if random.random() < 0.5 else img


def normalize(img):
    return (img - 0.1307) / 0.3081


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


# models/fashion/resnet.py
def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class ResNet(nn.Module):

    def __init__(self, depth, num_classes=1000):
        super(ResNet, self).__init__()
        # Model type specifies number of layers for CIFAR-10 model
        assert (depth - 2) % 6 == 0, 'depth should be 6n+2'
        n = (depth - 2) // 6  # (port) / 6

        block = BasicBlock  # (port) Bottleneck if depth >=44 else BasicBlock (depth 8 < 44)

        self.inplanes = 16
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, 16, n)
        self.layer2 = self._make_layer(block, 32, n, stride=2)
        self.layer3 = self._make_layer(block, 64, n, stride=2)
        self.avgpool = nn.AvgPool2d(7)
        self.fc = nn.Linear(64 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)    # 32x32

        x = self.layer1(x)  # 32x32
        x = self.layer2(x)  # 16x16
        x = self.layer3(x)  # 8x8

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


# utils/eval.py
def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


class BlockItems(torch.utils.data.Dataset):
    """(port) Fashion-MNIST's stand-in: 10 classes of 28x28 bar and block patterns, shifted by up to two pixels, with
    pixel noise, in [0, 1] (what ToTensor gives)."""

    def __init__(self, gen, templates, n, transform):
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        yy, xx = torch.meshgrid(torch.arange(28), torch.arange(28), indexing="ij")
        rows = (yy.unsqueeze(0) - shifts[:, 0].view(n, 1, 1)) % 28
        cols = (xx.unsqueeze(0) - shifts[:, 1].view(n, 1, 1)) % 28
        imgs = templates[self.labels.view(n, 1, 1), rows, cols]
        self.images = (0.85 * imgs + 0.15 * torch.rand(n, 28, 28, generator=gen)).clamp(0, 1).unsqueeze(1)
        self.transform = transform

    def __getitem__(self, i):
        return self.transform(self.images[i].clone()), self.labels[i]

    def __len__(self):
        return len(self.labels)


def make_templates(gen):
    templates = torch.zeros(10, 28, 28)
    for c in range(10):
        for _ in range(2 + c % 2):
            k = int(torch.randint(6, 22, (), generator=gen))
            lo = int(torch.randint(4, 12, (), generator=gen))
            hi = lo + int(torch.randint(8, 14, (), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k - 2:k + 1, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 2:k + 1] = 1.0
    return templates


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = make_templates(gen)

    transform_train = Compose([
        random_crop,
        random_horizontal_flip,
        normalize,
        RandomErasing(probability = P, sh = SH, r1 = R1, mean = [0.4914]),
    ])
    transform_test = Compose([
        normalize,
    ])

    num_classes = 10
    trainset = BlockItems(gen, templates, N_TRAIN, transform_train)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=TRAIN_BATCH, shuffle=True, num_workers=0,
                                              generator=torch.Generator().manual_seed(seed))
    testset = BlockItems(gen, templates, N_TEST, transform_test)
    testloader = torch.utils.data.DataLoader(testset, batch_size=TEST_BATCH, shuffle=False, num_workers=0)

    model = ResNet(num_classes=num_classes, depth=DEPTH)

    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    state = {'lr': LR}

    def adjust_learning_rate(optimizer, epoch):
        if epoch in SCHEDULE:
            state['lr'] *= GAMMA
            for param_group in optimizer.param_groups:
                param_group['lr'] = state['lr']

    def test(testloader, model, criterion):
        # switch to evaluate mode
        model.eval()
        correct, total = 0.0, 0
        with torch.no_grad():
            for inputs, targets in testloader:
                outputs = model(inputs)
                loss = criterion(outputs, targets)  # noqa: F841
                prec1, prec5 = accuracy(outputs.data, targets.data, topk=(1, 5))
                correct, total = correct + prec1.item() * inputs.size(0), total + inputs.size(0)
        return correct / total

    loop = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(loop["it"])
        except (StopIteration, TypeError):
            if loop["it"] is not None:  # the end of an epoch in main()
                test(testloader, model, criterion)
                loop["epoch"] += 1
            adjust_learning_rate(optimizer, loop["epoch"])
            # switch to train mode
            model.train()
            loop["it"] = iter(trainloader)
            return next(loop["it"])

    def train_step():
        inputs, targets = next_batch()

        # compute output
        outputs = model(inputs)
        if bug == "softmax_before_cross_entropy":
            loss = criterion(F.softmax(outputs, dim=1), targets)
        else:
            loss = criterion(outputs, targets)

        # measure accuracy and record loss
        prec1, prec5 = accuracy(outputs.data, targets.data, topk=(1, 5))

        # compute gradient and do SGD step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        acc = test([batch], model, criterion)
        model.train()
        return acc

    known = (torch.stack([normalize(x) for x in testset.images]), testset.labels)
    first = next(iter(torch.utils.data.DataLoader(trainset, batch_size=TRAIN_BATCH)))
    return Program(name="randomerasing_fashion", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=known,
                   task="classification", loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: softmax applied to the logits before nn.CrossEntropyLoss (which applies log-softmax itself): the loss
    # saturates near log(10) - 1 and its gradients vanish as the probabilities sharpen.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() moved between backward and step: every step applies only the momentum and the
    # weight decay, never the new gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
