# ruff: noqa: UP004, UP008, E722, F841, RUF059, PLR0402
"""MixMatch semi-supervised training (WRN, label guessing + sharpening, mixup, interleaved batch norm, EMA model),
from YU1ut/MixMatch-pytorch.

Source: https://github.com/YU1ut/MixMatch-pytorch
Commit: cc7ef42cffe61288d06eec1428268b384674009a
Files: ``train.py`` (``train``, ``validate``, ``SemiLoss``, ``WeightEMA``, ``linear_rampup``, ``interleave``),
``models/wideresnet.py``, ``dataset/cifar10.py`` (``TransformTwice``, ``RandomPadandCrop``, ``RandomFlip``,
``ToTensor``, ``normalize``, ``transpose``, ``train_val_split``).
License: MIT (Copyright (c) 2019 Qing Yu; full text in LICENSES/YU1ut-MixMatch-pytorch.txt).
Domain: semi-supervised learning (MixMatch: two augmentations of each unlabeled image, guessed label sharpened
with T = 0.5, mixup with Beta(0.75, 0.75) over labeled + unlabeled, cross-entropy on soft labels + lambda_u-weighted
MSE with linear ramp-up, Adam, EMA model with decoupled weight decay, validation on the EMA model).

Kept as written: ``WideResNet`` / ``NetworkBlock`` / ``BasicBlock`` (LeakyReLU 0.1, BN momentum 0.001), the body of
``train``'s loop (label guessing under ``no_grad``, sharpening, mixup with ``max(l, 1 - l)``, ``interleave`` of
the split batches, the per-split forward passes, ``SemiLoss``, ``loss = Lx + w * Lu``, zero_grad / backward /
step, ``ema_optimizer.step()``), ``WeightEMA`` (over the state_dict values, buffers included, with
``wd = 0.02 * lr``), ``linear_rampup``, Adam(lr=0.002), alpha 0.75, lambda_u 75, T 0.5, ema-decay 0.999, the
augmentations and ``validate`` on the EMA model.

Deviations from the original:
- CIFAR-10 (torchvision download) is replaced by synthetic 32x32 RGB images made from ``seed``: 10 classes, each a
  fixed random low-frequency pattern plus noise, as uint8 HWC arrays run through the copied ``normalize`` and
  ``transpose``; 40 labeled (4 per class, split by the copied ``train_val_split`` with 20 validation images per
  class instead of 500), 200 unlabeled.
- sizes for 2 CPU cores: WRN depth 10, widen factor 1 (WRN-28-2), batch size 4 (64), ``train_iteration`` 8 per
  epoch (1024); ``epochs`` stays 1024 (it is the ramp-up length of ``lambda_u``).
- the global ``np.random`` is seeded from ``seed`` at build (the script seeds it with ``manualSeed``); the
  DataLoaders shuffle with seeded ``torch.Generator`` s; ``.cuda()``, ``cudnn.benchmark``, the progress bar, the
  logger, TensorBoard and checkpoints are dropped; ``iterator.next()`` is written ``next(iterator)`` (Python 3).
- ``train_step`` is one iteration of ``train``'s loop (the epoch counter advances every ``train_iteration`` steps);
  ``eval_fn`` is ``validate``'s accuracy of the EMA model on the whole validation split.
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
import torch.utils.data as data
from torch import nn, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class _Args:
    epochs = 1024
    batch_size = 4
    lr = 0.002
    n_labeled = 40
    train_iteration = 8
    alpha = 0.75
    lambda_u = 75
    T = 0.5
    ema_decay = 0.999


args = _Args()
N_UNLABELED = 200
N_VAL_PER_CLASS = 20


# models/wideresnet.py
class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, dropRate=0.0, activate_before_residual=False):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes, momentum=0.001)
        self.relu1 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes, momentum=0.001)
        self.relu2 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1,
                               padding=1, bias=False)
        self.droprate = dropRate
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                               padding=0, bias=False) or None
        self.activate_before_residual = activate_before_residual
    def forward(self, x):
        if not self.equalInOut and self.activate_before_residual == True:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)

class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, dropRate=0.0, activate_before_residual=False):
        super(NetworkBlock, self).__init__()
        self.layer = self._make_layer(block, in_planes, out_planes, nb_layers, stride, dropRate, activate_before_residual)
    def _make_layer(self, block, in_planes, out_planes, nb_layers, stride, dropRate, activate_before_residual):
        layers = []
        for i in range(int(nb_layers)):
            layers.append(block(i == 0 and in_planes or out_planes, out_planes, i == 0 and stride or 1, dropRate, activate_before_residual))
        return nn.Sequential(*layers)
    def forward(self, x):
        return self.layer(x)

class WideResNet(nn.Module):
    def __init__(self, num_classes, depth=28, widen_factor=2, dropRate=0.0):
        super(WideResNet, self).__init__()
        nChannels = [16, 16*widen_factor, 32*widen_factor, 64*widen_factor]
        assert((depth - 4) % 6 == 0)
        n = (depth - 4) / 6
        block = BasicBlock
        # 1st conv before any network block
        self.conv1 = nn.Conv2d(3, nChannels[0], kernel_size=3, stride=1,
                               padding=1, bias=False)
        # 1st block
        self.block1 = NetworkBlock(n, nChannels[0], nChannels[1], block, 1, dropRate, activate_before_residual=True)
        # 2nd block
        self.block2 = NetworkBlock(n, nChannels[1], nChannels[2], block, 2, dropRate)
        # 3rd block
        self.block3 = NetworkBlock(n, nChannels[2], nChannels[3], block, 2, dropRate)
        # global average pooling and classifier
        self.bn1 = nn.BatchNorm2d(nChannels[3], momentum=0.001)
        self.relu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.fc = nn.Linear(nChannels[3], num_classes)
        self.nChannels = nChannels[3]

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight.data)
                m.bias.data.zero_()

    def forward(self, x):
        out = self.conv1(x)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, 8)
        out = out.view(-1, self.nChannels)
        return self.fc(out)


# dataset/cifar10.py
class TransformTwice:
    def __init__(self, transform):
        self.transform = transform

    def __call__(self, inp):
        out1 = self.transform(inp)
        out2 = self.transform(inp)
        return out1, out2


def train_val_split(labels, n_labeled_per_class):
    labels = np.array(labels)
    train_labeled_idxs = []
    train_unlabeled_idxs = []
    val_idxs = []

    for i in range(10):
        idxs = np.where(labels == i)[0]
        np.random.shuffle(idxs)
        train_labeled_idxs.extend(idxs[:n_labeled_per_class])
        train_unlabeled_idxs.extend(idxs[n_labeled_per_class:-N_VAL_PER_CLASS])
        val_idxs.extend(idxs[-N_VAL_PER_CLASS:])
    np.random.shuffle(train_labeled_idxs)
    np.random.shuffle(train_unlabeled_idxs)
    np.random.shuffle(val_idxs)

    return train_labeled_idxs, train_unlabeled_idxs, val_idxs

cifar10_mean = (0.4914, 0.4822, 0.4465) # equals np.mean(train_set.train_data, axis=(0,1,2))/255
cifar10_std = (0.2471, 0.2435, 0.2616) # equals np.std(train_set.train_data, axis=(0,1,2))/255

def normalize(x, mean=cifar10_mean, std=cifar10_std):
    x, mean, std = [np.array(a, np.float32) for a in (x, mean, std)]
    x -= mean*255
    x *= 1.0/(255*std)
    return x

def transpose(x, source='NHWC', target='NCHW'):
    return x.transpose([source.index(d) for d in target])

def pad(x, border=4):
    return np.pad(x, [(0, 0), (border, border), (border, border)], mode='reflect')

class RandomPadandCrop(object):
    def __init__(self, output_size):
        assert isinstance(output_size, (int, tuple))
        if isinstance(output_size, int):
            self.output_size = (output_size, output_size)
        else:
            assert len(output_size) == 2
            self.output_size = output_size

    def __call__(self, x):
        x = pad(x, 4)

        h, w = x.shape[1:]
        new_h, new_w = self.output_size

        top = np.random.randint(0, h - new_h)
        left = np.random.randint(0, w - new_w)

        x = x[:, top: top + new_h, left: left + new_w]

        return x

class RandomFlip(object):
    def __call__(self, x):
        if np.random.rand() < 0.5:
            x = x[:, :, ::-1]

        return x.copy()

class ToTensor(object):
    def __call__(self, x):
        x = torch.from_numpy(x)
        return x


class Compose:
    """torchvision.transforms.Compose written out."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class SyntheticCIFAR(data.Dataset):
    """CIFAR10_labeled / CIFAR10_unlabeled over synthetic uint8 HWC images (normalize + transpose as written)."""

    def __init__(self, images, targets, indexs, transform=None, unlabeled=False):
        self.data = images[indexs]
        self.targets = np.array(targets)[indexs]
        self.data = transpose(normalize(self.data))
        self.transform = transform
        if unlabeled:
            self.targets = np.array([-1 for i in range(len(self.targets))])

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], self.targets[index]

        if self.transform is not None:
            img = self.transform(img)

        return img, target


def _synthetic_cifar(seed):
    rng = np.random.RandomState(seed)
    n_per_class = 4 + N_UNLABELED // 10 + N_VAL_PER_CLASS
    low = rng.uniform(0, 255, size=(10, 4, 4, 3))
    protos = low.repeat(8, axis=1).repeat(8, axis=2)
    labels = np.repeat(np.arange(10), n_per_class)
    imgs = protos[labels] + rng.normal(0, 40, size=(len(labels), 32, 32, 3))
    return np.clip(imgs, 0, 255).astype(np.uint8), labels


# train.py
def linear_rampup(current, rampup_length=args.epochs):
    if rampup_length == 0:
        return 1.0
    else:
        current = np.clip(current / rampup_length, 0.0, 1.0)
        return float(current)

class SemiLoss(object):
    def __call__(self, outputs_x, targets_x, outputs_u, targets_u, epoch):
        probs_u = torch.softmax(outputs_u, dim=1)

        Lx = -torch.mean(torch.sum(F.log_softmax(outputs_x, dim=1) * targets_x, dim=1))
        Lu = torch.mean((probs_u - targets_u)**2)

        return Lx, Lu, args.lambda_u * linear_rampup(epoch)

class WeightEMA(object):
    def __init__(self, model, ema_model, alpha=0.999, bug=None):
        self.model = model
        self.ema_model = ema_model
        self.alpha = alpha
        if bug == "ema_over_parameters_only":
            # the Mean-Teacher update asked about in issue #16: parameters only, the BN running stats of the EMA
            # model are never averaged
            self.params = [p.data for p in model.parameters()]
            self.ema_params = [p.data for p in ema_model.parameters()]
        else:
            self.params = list(model.state_dict().values())
            self.ema_params = list(ema_model.state_dict().values())
        self.wd = 0.02 * args.lr

        for param, ema_param in zip(self.params, self.ema_params):
            param.data.copy_(ema_param.data)

    def step(self):
        one_minus_alpha = 1.0 - self.alpha
        for param, ema_param in zip(self.params, self.ema_params):
            if ema_param.dtype==torch.float32:
                ema_param.mul_(self.alpha)
                ema_param.add_(param * one_minus_alpha)
                # customized weight decay
                param.mul_(1 - self.wd)

def interleave_offsets(batch, nu):
    groups = [batch // (nu + 1)] * (nu + 1)
    for x in range(batch - sum(groups)):
        groups[-x - 1] += 1
    offsets = [0]
    for g in groups:
        offsets.append(offsets[-1] + g)
    assert offsets[-1] == batch
    return offsets


def interleave(xy, batch):
    nu = len(xy) - 1
    offsets = interleave_offsets(batch, nu)
    xy = [[v[offsets[p]:offsets[p + 1]] for p in range(nu + 1)] for v in xy]
    for i in range(1, nu + 1):
        xy[0][i], xy[i][i] = xy[i][i], xy[0][i]
    return [torch.cat(v, dim=0) for v in xy]


def accuracy(output, target, topk=(1,)):
    """utils/eval.py's accuracy (top-k precision in percent)."""
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


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    np.random.seed(seed)
    images, labels = _synthetic_cifar(seed)
    transform_train = Compose([
        RandomPadandCrop(32),
        RandomFlip(),
        ToTensor(),
    ])
    transform_val = Compose([
        ToTensor(),
    ])
    train_labeled_idxs, train_unlabeled_idxs, val_idxs = train_val_split(labels, int(args.n_labeled/10))
    train_labeled_set = SyntheticCIFAR(images, labels, train_labeled_idxs, transform=transform_train)
    train_unlabeled_set = SyntheticCIFAR(images, labels, train_unlabeled_idxs, transform=TransformTwice(transform_train),
                                         unlabeled=True)
    val_set = SyntheticCIFAR(images, labels, val_idxs, transform=transform_val)
    labeled_trainloader = data.DataLoader(train_labeled_set, batch_size=args.batch_size, shuffle=True, num_workers=0,
                                          drop_last=True, generator=torch.Generator().manual_seed(seed))
    unlabeled_trainloader = data.DataLoader(train_unlabeled_set, batch_size=args.batch_size, shuffle=True,
                                            num_workers=0, drop_last=True,
                                            generator=torch.Generator().manual_seed(seed + 1))

    def create_model(ema=False):
        model = WideResNet(num_classes=10, depth=10, widen_factor=1)
        if ema:
            for param in model.parameters():
                param.detach_()

        return model

    model = create_model()
    ema_model = create_model(ema=True)

    train_criterion = SemiLoss()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    ema_optimizer= WeightEMA(model, ema_model, alpha=args.ema_decay, bug=bug)

    state = {"step": 0, "labeled": iter(labeled_trainloader), "unlabeled": iter(unlabeled_trainloader)}

    def train_step():
        epoch, batch_idx = divmod(state["step"], args.train_iteration)
        state["step"] += 1
        model.train()
        try:
            inputs_x, targets_x = next(state["labeled"])
        except:
            state["labeled"] = iter(labeled_trainloader)
            inputs_x, targets_x = next(state["labeled"])

        try:
            (inputs_u, inputs_u2), _ = next(state["unlabeled"])
        except:
            state["unlabeled"] = iter(unlabeled_trainloader)
            (inputs_u, inputs_u2), _ = next(state["unlabeled"])

        batch_size = inputs_x.size(0)

        # Transform label to one-hot
        targets_x = torch.zeros(batch_size, 10).scatter_(1, targets_x.view(-1,1).long(), 1)

        with torch.no_grad():
            # compute guessed labels of unlabel samples
            outputs_u = model(inputs_u)
            outputs_u2 = model(inputs_u2)
            p = (torch.softmax(outputs_u, dim=1) + torch.softmax(outputs_u2, dim=1)) / 2
            pt = p**(1/args.T)
            targets_u = pt / pt.sum(dim=1, keepdim=True)
            targets_u = targets_u.detach()

        # mixup
        all_inputs = torch.cat([inputs_x, inputs_u, inputs_u2], dim=0)
        all_targets = torch.cat([targets_x, targets_u, targets_u], dim=0)

        l = np.random.beta(args.alpha, args.alpha)

        l = max(l, 1-l)

        idx = torch.randperm(all_inputs.size(0))

        input_a, input_b = all_inputs, all_inputs[idx]
        if bug == "mixup_targets_not_permuted":
            # classic: the inputs are mixed with their permuted partners, the targets with themselves
            target_a, target_b = all_targets, all_targets
        else:
            target_a, target_b = all_targets, all_targets[idx]

        mixed_input = l * input_a + (1 - l) * input_b
        mixed_target = l * target_a + (1 - l) * target_b

        # interleave labeled and unlabed samples between batches to get correct batchnorm calculation
        mixed_input = list(torch.split(mixed_input, batch_size))
        mixed_input = interleave(mixed_input, batch_size)

        logits = [model(mixed_input[0])]
        for input in mixed_input[1:]:
            logits.append(model(input))

        # put interleaved samples back
        logits = interleave(logits, batch_size)
        logits_x = logits[0]
        logits_u = torch.cat(logits[1:], dim=0)

        Lx, Lu, w = train_criterion(logits_x, mixed_target[:batch_size], logits_u, mixed_target[batch_size:], epoch+batch_idx/args.train_iteration)

        loss = Lx + w * Lu

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema_optimizer.step()
        return loss.item()

    val_x, val_y = next(iter(data.DataLoader(val_set, batch_size=len(val_set))))

    def eval_fn(_model, _batch):
        """validate(val_loader, ema_model, ...)'s top-1 accuracy: the EMA model, in eval mode, on the val split."""
        ema_model.eval()
        with torch.no_grad():
            outputs = ema_model(val_x)
            prec1, prec5 = accuracy(outputs, val_y, topk=(1, 5))
        return float(prec1)

    x0, y0 = next(iter(data.DataLoader(train_labeled_set, batch_size=args.batch_size, shuffle=True,
                                       generator=torch.Generator().manual_seed(seed + 2))))
    onehot0 = torch.zeros(x0.size(0), 10).scatter_(1, y0.view(-1, 1).long(), 1)

    def loss_fn(outputs_x, targets_x):
        return -torch.mean(torch.sum(F.log_softmax(outputs_x, dim=1) * targets_x, dim=1))

    return Program(name="mixmatch_wideresnet", model=model, batch=(x0, onehot0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=labeled_trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/YU1ut/MixMatch-pytorch/issues/16: the Mean-Teacher EMA update (model.parameters() only)
    # put in WeightEMA "completely failed"; the EMA model's BatchNorm running statistics are never averaged, so
    # the evaluated model normalizes with its initial statistics.
    Bug("ema_over_parameters_only", functools.partial(_build, bug="ema_over_parameters_only"), "six_claims",
        ("EVALUATION",)),
    # classic mixup slip: the targets are not permuted with the inputs, each mixed image keeps its own label.
    Bug("mixup_targets_not_permuted", functools.partial(_build, bug="mixup_targets_not_permuted"),
        "learning_ledger", ("TASK",)),
]
