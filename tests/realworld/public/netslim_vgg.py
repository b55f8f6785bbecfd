"""Network Slimming of Eric-mingjie/network-slimming: ``main.py`` run as the README's sparsity command
(``python main.py -sr --s 0.0001 --dataset cifar10 --arch vgg --depth 19``): ``models/vgg.py``'s ``vgg`` (conv
without bias + BatchNorm + ReLU per entry of the cfg, max pools, ``nn.AvgPool2d(2)``, one linear classifier; conv
weights normal(0, sqrt(2/n)), BatchNorm scale filled with 0.5), ``F.cross_entropy``, SGD(lr 0.1, momentum 0.9,
weight_decay 1e-4), and ``updateBN()`` after ``backward``: the L1 subgradient ``s * sign(gamma)`` added to every
BatchNorm scale's gradient before ``optimizer.step()``; the lr divided by 10 at 50% and 75% of the epochs; ``test()``
under ``eval()`` after every epoch.

Source: https://github.com/Eric-mingjie/network-slimming
Commit: b395dc07521cbc38f741d971a18fe3f6423c9ab1
Files: main.py, models/vgg.py, README.md
License: MIT (LICENSES/Eric-mingjie-network-slimming.txt)
Domain: image classification (VGG with channel-sparsity regularization on the BatchNorm scales)

Deviations from the original:
- sizes: depth 19 -> 11 (``defaultcfg[11]``, the same module with a shorter cfg) with every width divided by 8
  (``[8, 'M', 16, 'M', 32, 32, 'M', 64, 64, 'M', 64, 64]``, passed as ``cfg=`` as ``--refine`` does); 32x32 images
  kept; batch size 64 -> 32; 50000 training images -> 512, test set -> 128; 160 epochs -> 20 (the lr drops at
  epochs 10 and 15 as ``epoch in [args.epochs*0.5, args.epochs*0.75]`` gives);
- data: CIFAR-10 (``datasets.CIFAR10(download=True)``) is replaced by synthetic RGB images made from ``seed``: each
  class is a colour and one of two stripe orientations, plus smooth noise; torchvision is not available, so
  ``Pad(4)``, ``RandomCrop(32)``, ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize`` are written out in plain
  torch;
- ``Variable``/``volatile`` and ``loss.data[0]`` (PyTorch 0.3) become plain tensors, ``no_grad`` and ``.item()``;
  ``size_average=False`` becomes ``reduction='sum'``; ``.cuda()``, the log prints and ``save_checkpoint`` are
  dropped;
- one ``train_step`` is one batch of ``train(epoch)``; when the loader is exhausted the epoch ends as in the script's
  loop: ``test()``, then the next epoch's lr check and ``train()``'s ``model.train()``; ``eval_fn`` is ``test()``'s
  accuracy on a batch.
"""
# ruff: noqa: UP008, F841, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_TEST, NUM_CLASSES = 32, 512, 128, 10
BATCH_SIZE, TEST_BATCH_SIZE, EPOCHS, LR, MOMENTUM, WEIGHT_DECAY, S, SR = 32, 256, 20, 0.1, 0.9, 1e-4, 0.0001, True
CFG = [8, 'M', 16, 'M', 32, 32, 'M', 64, 64, 'M', 64, 64]  # defaultcfg[11] with the widths divided by 8


# ---- models/vgg.py -------------------------------------------------------------------------------------------

defaultcfg = {
    11 : [64, 'M', 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512],
    13 : [64, 64, 'M', 128, 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512],
    16 : [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512],
    19 : [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 256, 'M', 512, 512, 512, 512, 'M', 512, 512, 512, 512],
}

class vgg(nn.Module):
    def __init__(self, dataset='cifar10', depth=19, init_weights=True, cfg=None):
        super(vgg, self).__init__()
        if cfg is None:
            cfg = defaultcfg[depth]

        self.feature = self.make_layers(cfg, True)

        if dataset == 'cifar10':
            num_classes = 10
        elif dataset == 'cifar100':
            num_classes = 100
        self.classifier = nn.Linear(cfg[-1], num_classes)
        if init_weights:
            self._initialize_weights()

    def make_layers(self, cfg, batch_norm=False):
        layers = []
        in_channels = 3
        for v in cfg:
            if v == 'M':
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1, bias=False)
                if batch_norm:
                    layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                else:
                    layers += [conv2d, nn.ReLU(inplace=True)]
                in_channels = v
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.feature(x)
        x = nn.AvgPool2d(2)(x)
        x = x.view(x.size(0), -1)
        y = self.classifier(x)
        return y

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(0.5)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.data.normal_(0, 0.01)
                m.bias.data.zero_()


# ---- data: synthetic CIFAR-10 stand-in and the transforms in plain torch ------------------------------------

MEAN = torch.tensor([0.4914, 0.4822, 0.4465])[:, None, None]
STD = torch.tensor([0.2023, 0.1994, 0.2010])[:, None, None]


class StripeImages(Dataset):
    """Class c: colour ``colours[c // 2]`` and stripes horizontal (even c) or vertical (odd c), plus smooth noise;
    the ToTensor output in [0, 1], CHW."""

    def __init__(self, gen, n, colours, train):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        ramp = torch.sin(torch.arange(IMG, dtype=torch.float32) * (2 * math.pi / 8))
        horiz = ramp[:, None].expand(IMG, IMG)
        stripes = torch.stack([horiz, horiz.t()])[self.labels % 2]  # [n, H, W]
        noise = F.interpolate(0.25 * torch.randn(n, 3, IMG // 4, IMG // 4, generator=gen), size=(IMG, IMG),
                              mode="bilinear", align_corners=False)
        base = colours[self.labels // 2][:, :, None, None]
        self.images = (base + 0.2 * stripes[:, None] + noise).clamp(0, 1)
        self.train = train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = F.pad(x, (4, 4, 4, 4))  # transforms.Pad(4)
            i, j = (int(v) for v in torch.randint(0, 9, (2,), generator=self.gen))  # transforms.RandomCrop(32)
            x = x[:, i:i + IMG, j:j + IMG]
            if float(torch.rand(1, generator=self.gen)) < 0.5:  # transforms.RandomHorizontalFlip()
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[idx]  # transforms.Normalize(...)


def make_colours(gen):
    colours = []
    while len(colours) < NUM_CLASSES // 2:
        c = torch.rand(3, generator=gen) * 0.6 + 0.2
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    return torch.stack(colours)


# ---- main.py -------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    train_set = StripeImages(gen, N_TRAIN, colours, train=True)
    test_set = StripeImages(gen, N_TEST, colours, train=False)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=TEST_BATCH_SIZE, shuffle=True,
                                              generator=torch.Generator().manual_seed(seed + 1))

    model = vgg(dataset='cifar10', depth=11, cfg=CFG)

    optimizer = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    # additional subgradient descent on the sparsity-induced penalty term
    def updateBN():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.grad.data.add_(S*torch.sign(m.weight.data))  # L1

    def cross_entropy(output, target):
        if bug == "softmax_before_cross_entropy":
            return F.cross_entropy(F.softmax(output, dim=1), target)
        return F.cross_entropy(output, target)

    def test():
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.cross_entropy(output, target, reduction='sum').item() # sum up batch loss
                pred = output.data.max(1, keepdim=True)[1] # get the index of the max log-probability
                correct += pred.eq(target.data.view_as(pred)).cpu().sum()

        test_loss /= len(test_loader.dataset)
        return correct / float(len(test_loader.dataset))

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch: test(), then the next epoch
                test()
                state["epoch"] += 1
            epoch = state["epoch"]
            if epoch in [EPOCHS*0.5, EPOCHS*0.75]:
                for param_group in optimizer.param_groups:
                    param_group['lr'] *= 0.1
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, target = next_batch()
        if bug == "labels_misaligned":
            target = target.roll(1)  # labels paired with the previous image of the batch
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        output = model(data)
        loss = cross_entropy(output, target)
        pred = output.data.max(1, keepdim=True)[1]
        loss.backward()
        if SR:
            updateBN()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        data, target = batch
        model.eval()
        with torch.no_grad():
            pred = model(data).data.max(1, keepdim=True)[1]
        model.train()
        return float(pred.eq(target.view_as(pred)).float().mean())

    def true_labels(x):
        """The labelling rule: the nearest class colour (mean colour, padding left out) and the stripe
        orientation (more variation across rows than across columns: horizontal stripes)."""
        raw = x * STD + MEAN
        keep = (raw.abs().sum(dim=1, keepdim=True) > 1e-4).float()
        mean = (raw * keep).sum(dim=(2, 3)) / keep.sum(dim=(2, 3)).clamp(min=1)
        grey = raw.mean(dim=1)
        dv = (grey[:, 1:, :] - grey[:, :-1, :]).abs().mean(dim=(1, 2))
        dh = (grey[:, :, 1:] - grey[:, :, :-1]).abs().mean(dim=(1, 2))
        return torch.cdist(mean, colours).argmin(dim=1) * 2 + (dh > dv).long()

    first = next(iter(torch.utils.data.DataLoader(train_set, batch_size=BATCH_SIZE)))
    return Program(name="netslim_vgg", model=model, batch=(first[0], first[1]), loss_fn=cross_entropy,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=true_labels,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # labels paired with the previous image of the batch (a classic alignment slip): nothing ties label to image.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # softmax applied before F.cross_entropy, which applies log_softmax itself: the loss saturates.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped: gradients accumulate over every step.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
