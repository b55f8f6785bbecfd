"""PixelCNN (van den Oord, Kalchbrenner & Kavukcuoglu, "Pixel Recurrent Neural Networks", ICML 2016) on MNIST from
jzbontar/pixelcnn-pytorch's ``main.py``: a stack of eight 7x7 masked convolutions (one type-A mask that hides the
centre pixel, seven type-B masks that keep it; the mask is multiplied into ``weight.data`` at every forward), each
followed by batch norm and ReLU, and a 1x1 convolution to 256 logits per pixel; the target is the input's grey level
as an integer 0-255 and the loss a 256-way ``F.cross_entropy`` per pixel; Adam at its defaults; after each epoch the
test NLL in eval mode and 144 samples drawn pixel by pixel.

Source: https://github.com/jzbontar/pixelcnn-pytorch
Commit: 14c9414602e0694692c77a5e0d87188adcded118
Files: ``main.py``
License: MIT (Copyright (c) 2020 Jure Zbontar; full text in LICENSES/jzbontar-pixelcnn-pytorch.txt)
Domain: vision, autoregressive image generation (PixelCNN, 256-way softmax per pixel)

Kept as written: ``MaskedConv2d`` (the mask buffer cloned from the weight, the A/B rule, ``self.weight.data *=
self.mask`` in ``forward``), the ``nn.Sequential`` net (kernel 7, padding 3, no conv bias, BatchNorm2d, ReLU, the
1x1 conv to 256), the train loop body (``target = (input.data[:,0] * 255).long()``, ``F.cross_entropy(net(input),
target)``, ``zero_grad``, backward, step), ``net.train(True)`` at every epoch and ``net.train(False)`` for the test
pass and the sampling, ``optim.Adam(net.parameters())``.

Deviations from the original:
- MNIST is not here: the 28x28 images are synthetic "digits" made from ``seed`` (one to three thick strokes between
  random points, blurred, in [0, 1] and quantized to multiples of 1/255 as ``ToTensor`` gives), 512 training and
  64 test images; the sampling step (144 samples) and ``utils.save_image`` are dropped;
- sizes for 2 CPU cores: ``fm`` 64 -> 16, batch size 128 -> 16, no workers;
- Python 3 and this torch: ``print net`` / ``print '...'`` dropped, ``Variable(..., volatile=True)`` is
  ``torch.no_grad()``, ``loss.data[0]`` is ``loss.item()``, ``.cuda(async=True)`` and ``cuda.synchronize()`` dropped;
- the module-level script is wrapped in ``build(seed)``: one ``train_step`` is one iteration of the loop over ``tr``
  (at the end of an epoch the test pass runs and the next epoch sets ``net.train(True)``); ``eval_fn`` is the test
  NLL on a batch; the Program's batch is ``(input, target)`` of the first training batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, BATCH = 512, 64, 16  # (port) MNIST's 60000 / 10000, batch_size 128


class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, bug=None, **kwargs):
        super(MaskedConv2d, self).__init__(*args, **kwargs)
        assert mask_type in {'A', 'B'}
        self.register_buffer('mask', self.weight.data.clone())
        _, _, kH, kW = self.weight.size()
        self.mask.fill_(1)
        if bug == "mask_types_swapped":
            self.mask[:, :, kH // 2, kW // 2 + (mask_type == 'A'):] = 0
        else:
            self.mask[:, :, kH // 2, kW // 2 + (mask_type == 'B'):] = 0
        self.mask[:, :, kH // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super(MaskedConv2d, self).forward(x)


def make_net(fm, bug=None):
    M = functools.partial(MaskedConv2d, bug=bug)
    net = nn.Sequential(
        M('A', 1,  fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        M('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        nn.Conv2d(fm, 256, 1))
    return net


# (port) synthetic MNIST-like strokes, [N, 1, 28, 28] in multiples of 1/255
def make_digits(gen, n):
    ys, xs = torch.meshgrid(torch.arange(28.), torch.arange(28.), indexing='ij')
    imgs = torch.zeros(n, 28, 28)
    for k in range(n):
        for _ in range(1 + int(torch.randint(0, 3, (1,), generator=gen))):
            (x0, y0), (x1, y1) = (4 + 20 * torch.rand(2, 2, generator=gen)).tolist()
            dx, dy = x1 - x0, y1 - y0
            t = (((xs - x0) * dx + (ys - y0) * dy) / (dx * dx + dy * dy + 1e-6)).clamp(0, 1)
            d = torch.sqrt((xs - x0 - t * dx) ** 2 + (ys - y0 - t * dy) ** 2)
            imgs[k] = torch.maximum(imgs[k], (1.8 - d).clamp(0, 1))
    return (imgs.unsqueeze(1) * 255).round() / 255.


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    fm = 16  # (port) 64
    net = make_net(fm, bug)
    train_x, test_x = make_digits(gen, N_TRAIN), make_digits(gen, N_TEST)
    tr = data.DataLoader(data.TensorDataset(train_x, torch.zeros(N_TRAIN)), batch_size=BATCH, shuffle=True,
                         generator=torch.Generator().manual_seed(seed))
    te = data.DataLoader(data.TensorDataset(test_x, torch.zeros(N_TEST)), batch_size=BATCH, shuffle=False)
    optimizer = optim.Adam(net.parameters())
    loop = {"it": None}

    def to_target(input):
        if bug == "target_not_scaled":
            return (input.data[:, 0]).long()
        return (input.data[:, 0] * 255).long()

    def criterion(out, target):
        if bug == "softmax_before_cross_entropy":
            return F.cross_entropy(F.softmax(out, dim=1), target)
        return F.cross_entropy(out, target)

    def test(batches):
        err_te = []
        net.train(False)
        with torch.no_grad():
            for input, _ in batches:
                target = to_target(input)
                loss = criterion(net(input), target)
                err_te.append(loss.item())
        return np.mean(err_te)

    def next_batch():
        try:
            return next(loop["it"])
        except (StopIteration, TypeError):
            if loop["it"] is not None:  # the end of an epoch: the test pass (and the sampling, dropped)
                test(te)
            net.train(True)
            loop["it"] = iter(tr)
            return next(loop["it"])

    def train_step():
        input, _ = next_batch()
        target = to_target(input)
        loss = criterion(net(input), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        out = test([(batch[0], None)])
        net.train(True)
        return -out

    first = next(iter(tr))[0]
    return Program(name="jzbontarpixelcnn_mnist", model=net, batch=(first, to_target(first)), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=tr)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the A and B rules swapped (``kW // 2 + (mask_type == 'A')``): the first layer sees the very pixel it
    # predicts, the loss falls by copying the input and the model learns no autoregressive density.
    Bug("mask_types_swapped", functools.partial(_build, bug="mask_types_swapped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the grey level taken as ``input[:, 0].long()`` without the * 255: every target is 0 except the pure
    # white pixels, which become class 1.
    Bug("target_not_scaled", functools.partial(_build, bug="target_not_scaled"), "learning_ledger", ("TASK",)),
    # classic: softmax applied to the 256 logits before F.cross_entropy (which applies log-softmax itself).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
]
