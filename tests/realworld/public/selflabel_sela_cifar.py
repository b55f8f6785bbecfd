# ruff: noqa: UP008, UP031
"""Asano, Rupprecht and Vedaldi's self-labelling (SeLa, ICLR 2020) on CIFAR-10: ``cifar.py``. An AlexNet (DeepCluster's,
BatchNorm after each convolution, dropout classifier) with ``hc`` linear heads of ``ncl`` clusters each is trained
with SGD (momentum 0.9, weight decay 5e-4) on the mean over heads of the cross-entropy against pseudo-labels; the
pseudo-labels start as a random equipartition and are re-solved ``nopts`` times during training by the Sinkhorn-Knopp
optimal transport ``optimize_L_sk`` (``PS ** lamb``, lamb 10, equal cluster sizes) on the softmax of one head at a
time, computed over a pass of the training loader with the network switched to return its features.

Source: https://github.com/yukimasano/self-label
Commit: 3891e376a82d1e4ac6de6d39505b692b8885c971
Files: cifar.py, models/alexnet.py, util.py (``py_softmax``), cifar_utils.py (``CIFAR10Instance``), scripts/cifar.sh
License: MIT (Copyright (c) 2021 Yuki M. Asano; full text in LICENSES/yukimasano-self-label.txt)
Domain: self-supervised, clustering by optimal-transport pseudo-labels (self-labelling, multiple heads)

Kept as written: ``feature_return_switch``, ``optimize_L_sk``, ``opt_sk`` (multi-head branch), the pseudo-label
initialization (per head ``_i % numc[nh]`` permuted), ``optimize_times`` (``nopts`` points spread over the epochs,
popped when ``niter * batch_size`` passes them), the SGD optimizer, ``CrossEntropyLoss`` and the body of ``train``'s
batch loop (the label optimization under ``no_grad`` with the feature switch, ``zero_grad``, the mean of the per-head
losses on ``selflabels[h, indexes]``, backward, step); ``AlexNet`` (forward with the ``return_features`` and
``headcount`` switches, ``_initialize_weights``) and ``make_layers_features``. ``adjust_learning_rate`` keeps its
800-epoch branch only (the 200/400/1600-epoch branches and ``restart`` are left out); at 8 epochs none applies.

Deviations from the original:
- sizes for 2 CPU cores: images 3x224x224 (CIFAR resized) -> 3x32x32; the AlexNet configuration is a ``'port'``
  entry of ``CFG`` ((16, 5, 2, 2), M, (32, 3, 1, 1), M, (48, 3, 1, 1), (32, 3, 1, 1), (32, 3, 1, 1), M: 1x1 at the
  end), so ``256 * 6 * 6`` is ``FEAT`` (32) and the classifier's 4096 is ``HID`` (64) (``knn_dim`` likewise);
  ``hc`` 10 -> 2 heads (scripts/cifar.sh), ``ncl`` 128 -> 16 clusters, batch 128 -> 32, 256 training images,
  ``epochs`` 400 -> 8 and ``nopts`` 400 -> 24 so the labels are re-solved within the first steps; lr 0.03 kept;
- data: CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (ten classes, each a colour and a
  gradient direction, with pixel noise; the class is never used, as upstream); ``CIFAR10Instance`` returns
  ``(image, target, index)`` as upstream; the torchvision training transforms (resize, random resized crop, colour
  jitter, grayscale, flip, normalize) are replaced by a random horizontal flip written in torch; the loader is
  shuffled by a ``torch.Generator(seed)``; numpy's permutations come from ``np.random.RandomState(seed)``;
- ``.cuda()`` and ``setup_runtime`` are dropped (CPU); the prints, tensorboardX, kNN evaluation and checkpoints are
  dropped;
- one ``train_step`` is one batch of ``train``'s loop (the epoch's ``adjust_learning_rate`` is called when an epoch
  starts) and returns the loss; the Program's batch is the dataset's first 32 images (unflipped) with the
  initial pseudo-labels and their indexes, its
  ``loss_fn`` the mean per-head cross-entropy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
from scipy.special import logsumexp
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

IMG, N_TRAIN, FEAT, HID = 32, 256, 32, 64


# ---- models/alexnet.py -------------------------------------------------------------------------------------------

CFG = {
    'big': [(96, 11, 4, 2), 'M', (256, 5, 1, 2), 'M', (384, 3, 1, 1), (384, 3, 1, 1), (256, 3, 1, 1), 'M'],
    'small': [(64, 11, 4, 2), 'M', (192, 5, 1, 2), 'M', (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), 'M'],
    'port': [(16, 5, 2, 2), 'M', (32, 3, 1, 1), 'M', (48, 3, 1, 1), (32, 3, 1, 1), (32, 3, 1, 1), 'M'],  # (port)
}


class AlexNet(nn.Module):
    def __init__(self, features, num_classes, init=True):
        super(AlexNet, self).__init__()
        self.features = features
        self.classifier = nn.Sequential(nn.Dropout(0.5),
                            nn.Linear(FEAT, HID),  # (port) 256 * 6 * 6, 4096
                            nn.ReLU(inplace=True),
                            nn.Dropout(0.5),
                            nn.Linear(HID, HID),  # (port) 4096, 4096
                            nn.ReLU(inplace=True))
        self.headcount = len(num_classes)
        self.return_features = False
        if len(num_classes) == 1:
            self.top_layer = nn.Linear(HID, num_classes[0])
        else:
            for a,i in enumerate(num_classes):
                setattr(self, "top_layer%d" % a, nn.Linear(HID, i))
            self.top_layer = None  # this way headcount can act as switch.
        if init:
            self._initialize_weights()

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), FEAT)  # (port) 256 * 6 * 6
        x = self.classifier(x)
        if self.return_features: # switch only used for CIFAR-experiments
            return x
        if self.headcount == 1:
            if self.top_layer: # this way headcount can act as switch.
                x = self.top_layer(x)
            return x
        else:
            outp = []
            for i in range(self.headcount):
                outp.append(getattr(self, "top_layer%d" % i)(x))
            return outp

    def _initialize_weights(self):
        for _y, m in enumerate(self.modules()):
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                for i in range(m.out_channels):
                    m.weight.data[i].normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.data.normal_(0, 0.01)
                m.bias.data.zero_()


def make_layers_features(cfg, input_dim, bn):
    layers = []
    in_channels = input_dim
    for v in cfg:
        if v == 'M':
            layers += [nn.MaxPool2d(kernel_size=3, stride=2)]
        else:
            conv2d = nn.Conv2d(in_channels, v[0], kernel_size=v[1], stride=v[2], padding=v[3])#,bias=False)
            if bn:
                layers += [conv2d, nn.BatchNorm2d(v[0]), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = v[0]
    return nn.Sequential(*layers)


def alexnet(bn=True, num_classes=[1000], init=True, size='big'):  # noqa: B006
    dim = 3
    model = AlexNet(make_layers_features(CFG[size], dim, bn=bn), num_classes, init)
    return model


# ---- util.py -----------------------------------------------------------------------------------------------------

def py_softmax(x, axis=None):
    """stable softmax"""
    return np.exp(x - logsumexp(x, axis=axis, keepdims=True))


# ---- data (port): CIFAR10Instance on synthetic images ------------------------------------------------------------

class SyntheticInstance(Dataset):
    """``CIFAR10Instance``'s ``(img, target, index)`` on synthetic images; a random horizontal flip as transform."""

    def __init__(self, seed, n=N_TRAIN):
        gen = torch.Generator().manual_seed(seed)
        colours = 0.2 + 0.8 * torch.rand(10, 3, 1, 1, generator=gen)
        angles = torch.rand(10, generator=gen) * 6.2832
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
        self.targets = torch.arange(n) % 10
        ramps = (torch.cos(angles)[:, None, None] * xs + torch.sin(angles)[:, None, None] * ys + 1) / 2
        images = colours[self.targets] * ramps[self.targets].unsqueeze(1)
        self.data = (images + 0.1 * torch.randn(n, 3, IMG, IMG, generator=gen) - 0.5) / 0.25
        self.flip = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img = self.data[index]
        if torch.rand(1, generator=self.flip).item() < 0.5:
            img = img.flip(-1)
        return img, self.targets[index], index


# ---- cifar.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    args = types.SimpleNamespace(arch='alexnet', ncl=16, hc=2, lamb=10.0, nopts=24, lr=0.03, momentum=0.9,
                                 epochs=8, batch_size=32, restart=False)  # (port) ncl 128, hc 10, nopts/epochs 400
    device = 'cpu'

    trainset = SyntheticInstance(seed)
    trainloader = DataLoader(trainset, batch_size=args.batch_size, shuffle=True,
                             generator=torch.Generator().manual_seed(seed))

    def feature_return_switch(model, bool=True):
        if bool:
            model.headcount = 1
        else:
            model.headcount = args.hc
        model.return_features = bool

    def optimize_L_sk(PS):
        N, K = PS.shape
        PS = PS.T  # now it is K x N
        r = np.ones((K, 1)) / K
        c = np.ones((N, 1)) / N
        PS **= args.lamb  # K x N
        inv_K = 1. / K
        inv_N = 1. / N
        err = 1e3
        _counter = 0
        while err > 1e-2:
            r = inv_K / (PS @ c)  # (KxN)@(N,1) = K x 1
            c_new = inv_N / (r.T @ PS).T  # ((1,K)@(KxN)).t() = N x 1
            if _counter % 10 == 0:
                err = np.nansum(np.abs(c / c_new - 1))
            c = c_new
            _counter += 1
        PS *= np.squeeze(c)
        PS = PS.T
        PS *= np.squeeze(r)
        PS = PS.T
        argmaxes = np.nanargmax(PS, 0)  # size N
        newL = torch.LongTensor(argmaxes)
        selflabels = newL  # (port) .cuda()
        PS = PS.T
        PS /= np.squeeze(r)
        PS = PS.T
        PS /= np.squeeze(c)
        sol = PS[argmaxes, np.arange(N)]
        np.log(sol, sol)
        cost = -(1. / args.lamb) * np.nansum(sol) / N
        return cost, selflabels

    def opt_sk(model, selflabels_in, epoch):
        PS_pre = np.zeros((len(trainloader.dataset), knn_dim))
        for _batch_idx, (data, _, _selected) in enumerate(trainloader):
            p = model(data)
            PS_pre[_selected, :] = p.detach().cpu().numpy()
        _costs = np.zeros(args.hc)
        nh = epoch % args.hc  # np.random.randint(args.hc)
        tl = getattr(model, "top_layer%d" % nh)
        PS = (PS_pre @ tl.weight.cpu().numpy().T
                   + tl.bias.cpu().numpy())
        PS = py_softmax(PS, 1)
        c, selflabels_ = optimize_L_sk(PS)
        _costs[nh] = c
        selflabels_in[nh] = selflabels_
        selflabels = selflabels_in
        return selflabels

    knn_dim = HID  # (port) 4096
    numc = [args.ncl] * args.hc
    model = alexnet(num_classes=numc, size='port')  # (port) models.__dict__[args.arch]: alexnet, size 'big'

    N = len(trainloader.dataset)
    optimize_times = ((args.epochs + 1.0001)*N*(np.linspace(0, 1, args.nopts))[::-1]).tolist()
    optimize_times = [(args.epochs +10)*N] + optimize_times

    selflabels = np.zeros((args.hc, N), dtype=np.int32)
    for nh in range(args.hc):
        for _i in range(N):
            selflabels[nh, _i] = _i % numc[nh]
        selflabels[nh] = rng.permutation(selflabels[nh])
    selflabels = torch.LongTensor(selflabels)

    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=5e-4)
    model.to(device)
    criterion = nn.CrossEntropyLoss()

    def adjust_learning_rate(optimizer, epoch):
        lr = args.lr
        if args.epochs == 800:
            if epoch >= 320:
                lr = args.lr * (0.1 ** ((epoch - 320) // 160))  # i.e. 480, 640
            for param_group in optimizer.param_groups:
                param_group['lr'] = lr

    def batches():
        epoch = 0
        while True:
            adjust_learning_rate(optimizer, epoch)
            model.train()
            for batch_idx, batch in enumerate(trainloader):
                yield epoch, batch_idx, batch
            epoch += 1

    stream = batches()
    state = {"selflabels": selflabels}

    def per_head_loss(outputs, labels, indexes):
        return torch.mean(torch.stack([criterion(outputs[h], labels[h, indexes]) for h in range(args.hc)]))

    def train_step():
        epoch, batch_idx, (inputs, targets, indexes) = next(stream)
        selflabels = state["selflabels"]
        niter = epoch * len(trainloader) + batch_idx
        if niter * trainloader.batch_size >= optimize_times[-1]:
            with torch.no_grad():
                _ = optimize_times.pop()
                if args.hc >1:
                    feature_return_switch(model, True)
                selflabels = opt_sk(model, selflabels, epoch)
                if args.hc >1:
                    feature_return_switch(model, False)
        state["selflabels"] = selflabels
        inputs, targets, indexes = inputs.to(device), targets.to(device), indexes.to(device)
        if bug == "labels_by_batch_position":
            indexes = torch.arange(inputs.size(0))
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        outputs = model(inputs)
        loss = torch.mean(torch.stack([criterion(outputs[h],
                                                 selflabels[h, indexes]) for h in range(args.hc)]))

        loss.backward()
        optimizer.step()
        return loss.detach()

    first_inputs = trainset.data[:args.batch_size]
    first_indexes = torch.arange(args.batch_size)

    def loss_fn(outputs, target):  # the mean per-head cross-entropy against the current pseudo-labels
        labels, indexes = target
        return per_head_loss(outputs, labels, indexes)

    return Program(name="selflabel_sela_cifar", model=model,
                   batch=(first_inputs, (selflabels.clone(), first_indexes)), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the pseudo-labels looked up by the example's position in the batch (``torch.arange(len(inputs))``)
    # instead of the dataset index the loader returns: every shuffled batch is trained against the labels of the
    # first ``batch_size`` images, which the Sinkhorn-Knopp step assigned to other images.
    Bug("labels_by_batch_position", functools.partial(_build, bug="labels_by_batch_position"), "learning_ledger",
        ("TASK",)),
    # classic: ``optimizer.zero_grad()`` left out of the batch loop: each SGD step applies the sum of every gradient
    # since the start (and momentum on top).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
