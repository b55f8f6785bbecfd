"""Adaptive SAM (sharpness-aware minimization) training a Wide-ResNet on CIFAR-10 with label smoothing, as the
repository's example runs it: two forward-backward passes per batch (the first at ``w`` with BatchNorm running
statistics on, ``first_step`` climbing to ``w + e(w)``; the second with the running statistics bypassed,
``second_step`` restoring ``w`` and letting SGD with momentum and weight decay take the step), label-smoothed
cross-entropy written as a KL divergence to a smoothed one-hot target, a piecewise-constant lr schedule called every
batch, random-crop + flip + normalize + cutout augmentation.

Source: https://github.com/davda54/sam
Commit: 3c3afdbd71cff2462ec91c734b3d1170bd0f3707
Files: sam.py, example/train.py, example/model/wide_res_net.py, example/model/smooth_cross_entropy.py,
example/utility/bypass_bn.py, example/utility/step_lr.py, example/utility/initialize.py, example/utility/cutout.py,
example/data/cifar.py
License: MIT (Copyright (c) 2021 David Samuel; full text in LICENSES/davda54-sam.txt)
Domain: vision, image classification (WRN, label smoothing, SAM/ASAM two-pass optimizer)

Deviations from the original:
- sizes: WRN depth 16 -> 10 (one unit per block), width_factor 8 -> 1, batch_size 128 -> 32 (adaptive True, rho
  2.0, lr 0.1, momentum 0.9, weight decay 5e-4, label_smoothing 0.1, epochs 200 for the schedule unchanged);
- data: CIFAR-10 (torchvision download) is replaced by synthetic 32x32 RGB images made from ``seed``: 10 classes,
  each a random colour plus a low-frequency pattern, a sample its template plus noise (320 training images);
  torchvision's transforms (RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor, Normalize by the training
  set's per-channel mean/std) are written out in plain torch in the dataset's ``__getitem__``; ``Cutout`` is copied;
- ``initialize`` seeds ``random`` and torch from ``seed`` (cudnn flags dropped); CPU only; ``num_workers`` 0;
- ``Log`` (progress printing and accuracy bookkeeping) is left out; one ``train_step`` is one iteration of the batch
  loop (both passes, then ``scheduler(epoch)``), with ``model.train()`` (the epoch's) repeated at each step so
  an evaluation in between does not leave the model in eval mode; ``eval_fn`` is the evaluation loop's body on one batch
  (model.eval(), no_grad, loss and accuracy);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 20  # two forward-backward passes of a WRN per step


class _Args:
    adaptive = True
    batch_size = 32
    depth = 10
    dropout = 0.0
    epochs = 200
    label_smoothing = 0.1
    learning_rate = 0.1
    momentum = 0.9
    rho = 2.0
    weight_decay = 0.0005
    width_factor = 1


# ---- sam.py ----------------------------------------------------------------------------------------------------

class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"

        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super(SAM, self).__init__(params, defaults)

        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)

            for p in group["params"]:
                if p.grad is None: continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"

        if zero_grad: self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None: continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"

        self.base_optimizer.step()  # do the actual "sharpness-aware" update

        if zero_grad: self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
        closure = torch.enable_grad()(closure)  # the closure should do a full forward-backward pass

        self.first_step(zero_grad=True)
        closure()
        self.second_step()

    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device  # put everything on the same device, in case of model parallelism
        norm = torch.norm(
                    torch.stack([
                        ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
                        for group in self.param_groups for p in group["params"]
                        if p.grad is not None
                    ]),
                    p=2
               )
        return norm

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.base_optimizer.param_groups = self.param_groups


# ---- example/model/smooth_cross_entropy.py ---------------------------------------------------------------------

def smooth_crossentropy(pred, gold, smoothing=0.1, bug=None):
    n_class = pred.size(1)

    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    if bug == "kl_div_on_probabilities":
        # kl_div's input given as probabilities, not log-probabilities
        log_prob = F.softmax(pred, dim=1)
    else:
        log_prob = F.log_softmax(pred, dim=1)

    return F.kl_div(input=log_prob, target=one_hot, reduction='none').sum(-1)


# ---- example/model/wide_res_net.py -----------------------------------------------------------------------------

class BasicUnit(nn.Module):
    def __init__(self, channels: int, dropout: float):
        super(BasicUnit, self).__init__()
        self.block = nn.Sequential(OrderedDict([
            ("0_normalization", nn.BatchNorm2d(channels)),
            ("1_activation", nn.ReLU(inplace=True)),
            ("2_convolution", nn.Conv2d(channels, channels, (3, 3), stride=1, padding=1, bias=False)),
            ("3_normalization", nn.BatchNorm2d(channels)),
            ("4_activation", nn.ReLU(inplace=True)),
            ("5_dropout", nn.Dropout(dropout, inplace=True)),
            ("6_convolution", nn.Conv2d(channels, channels, (3, 3), stride=1, padding=1, bias=False)),
        ]))

    def forward(self, x):
        return x + self.block(x)


class DownsampleUnit(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float):
        super(DownsampleUnit, self).__init__()
        self.norm_act = nn.Sequential(OrderedDict([
            ("0_normalization", nn.BatchNorm2d(in_channels)),
            ("1_activation", nn.ReLU(inplace=True)),
        ]))
        self.block = nn.Sequential(OrderedDict([
            ("0_convolution", nn.Conv2d(in_channels, out_channels, (3, 3), stride=stride, padding=1, bias=False)),
            ("1_normalization", nn.BatchNorm2d(out_channels)),
            ("2_activation", nn.ReLU(inplace=True)),
            ("3_dropout", nn.Dropout(dropout, inplace=True)),
            ("4_convolution", nn.Conv2d(out_channels, out_channels, (3, 3), stride=1, padding=1, bias=False)),
        ]))
        self.downsample = nn.Conv2d(in_channels, out_channels, (1, 1), stride=stride, padding=0, bias=False)

    def forward(self, x):
        x = self.norm_act(x)
        return self.block(x) + self.downsample(x)


class Block(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, depth: int, dropout: float):
        super(Block, self).__init__()
        self.block = nn.Sequential(
            DownsampleUnit(in_channels, out_channels, stride, dropout),
            *(BasicUnit(out_channels, dropout) for _ in range(depth))
        )

    def forward(self, x):
        return self.block(x)


class WideResNet(nn.Module):
    def __init__(self, depth: int, width_factor: int, dropout: float, in_channels: int, labels: int):
        super(WideResNet, self).__init__()

        self.filters = [16, 1 * 16 * width_factor, 2 * 16 * width_factor, 4 * 16 * width_factor]
        self.block_depth = (depth - 4) // (3 * 2)

        self.f = nn.Sequential(OrderedDict([
            ("0_convolution", nn.Conv2d(in_channels, self.filters[0], (3, 3), stride=1, padding=1, bias=False)),
            ("1_block", Block(self.filters[0], self.filters[1], 1, self.block_depth, dropout)),
            ("2_block", Block(self.filters[1], self.filters[2], 2, self.block_depth, dropout)),
            ("3_block", Block(self.filters[2], self.filters[3], 2, self.block_depth, dropout)),
            ("4_normalization", nn.BatchNorm2d(self.filters[3])),
            ("5_activation", nn.ReLU(inplace=True)),
            ("6_pooling", nn.AvgPool2d(kernel_size=8)),
            ("7_flattening", nn.Flatten()),
            ("8_classification", nn.Linear(in_features=self.filters[3], out_features=labels)),
        ]))

        self._initialize()

    def _initialize(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight.data, mode="fan_in", nonlinearity="relu")
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.data.zero_()
                m.bias.data.zero_()

    def forward(self, x):
        return self.f(x)


# ---- example/utility/bypass_bn.py ------------------------------------------------------------------------------

def disable_running_stats(model):
    def _disable(module):
        if isinstance(module, _BatchNorm):
            module.backup_momentum = module.momentum
            module.momentum = 0

    model.apply(_disable)

def enable_running_stats(model):
    def _enable(module):
        if isinstance(module, _BatchNorm) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum

    model.apply(_enable)


# ---- example/utility/step_lr.py --------------------------------------------------------------------------------

class StepLR:
    def __init__(self, optimizer, learning_rate: float, total_epochs: int):
        self.optimizer = optimizer
        self.total_epochs = total_epochs
        self.base = learning_rate

    def __call__(self, epoch):
        if epoch < self.total_epochs * 3/10:
            lr = self.base
        elif epoch < self.total_epochs * 6/10:
            lr = self.base * 0.2
        elif epoch < self.total_epochs * 8/10:
            lr = self.base * 0.2 ** 2
        else:
            lr = self.base * 0.2 ** 3

        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr

    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


# ---- example/utility/cutout.py ---------------------------------------------------------------------------------

class Cutout:
    def __init__(self, size=16, p=0.5):
        self.size = size
        self.half_size = size // 2
        self.p = p

    def __call__(self, image):
        if torch.rand([1]).item() > self.p:
            return image

        left = torch.randint(-self.half_size, image.size(1) - self.half_size, [1]).item()
        top = torch.randint(-self.half_size, image.size(2) - self.half_size, [1]).item()
        right = min(image.size(1), left + self.size)
        bottom = min(image.size(2), top + self.size)

        image[:, max(0, left): right, max(0, top): bottom] = 0
        return image


# ---- example/data/cifar.py (synthetic images; torchvision transforms written out) ------------------------------

def make_images(seed, n_per_class=32, n_classes=10):
    gen = torch.Generator().manual_seed(seed)
    colours = torch.rand(n_classes, 3, 1, 1, generator=gen)
    patterns = F.interpolate(torch.rand(n_classes, 3, 2, 2, generator=gen), size=(32, 32), mode="bilinear",
                             align_corners=False)
    templates = 0.6 * colours + 0.4 * patterns
    labels = torch.arange(n_classes).repeat_interleave(n_per_class)
    images = (templates[labels] + 0.05 * torch.randn(len(labels), 3, 32, 32, generator=gen)).clamp(0, 1)
    return images, labels


class SyntheticCifar(torch.utils.data.Dataset):
    def __init__(self, images, labels, mean, std, train):
        self.images, self.labels, self.mean, self.std, self.train = images, labels, mean, std, train
        self.cutout = Cutout()

    def __getitem__(self, i):
        image = self.images[i]
        if self.train:
            # torchvision.transforms.RandomCrop(size=(32, 32), padding=4)
            padded = F.pad(image, (4, 4, 4, 4))
            top, left = torch.randint(0, 9, (2,)).tolist()
            image = padded[:, top:top + 32, left:left + 32]
            # torchvision.transforms.RandomHorizontalFlip()
            if torch.rand(1).item() < 0.5:
                image = image.flip(-1)
        # transforms.Normalize(mean, std)
        image = (image - self.mean[:, None, None]) / self.std[:, None, None]
        if self.train:
            image = self.cutout(image.clone())
        return image, int(self.labels[i])

    def __len__(self):
        return len(self.labels)


class Cifar:
    def __init__(self, batch_size, threads, seed):
        images, labels = make_images(seed)
        mean, std = self._get_statistics(images)
        train_set = SyntheticCifar(images, labels, mean, std, train=True)
        test_images, test_labels = make_images(seed + 1, n_per_class=8)
        test_set = SyntheticCifar(test_images, test_labels, mean, std, train=False)

        self.train = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=threads)
        self.test = torch.utils.data.DataLoader(test_set, batch_size=batch_size, shuffle=False, num_workers=threads)

        self.classes = ('plane', 'car', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')

    def _get_statistics(self, data):
        return data.mean(dim=[0, 2, 3]), data.std(dim=[0, 2, 3])


# ---- example/train.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    args = _Args()
    random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device("cpu")

    dataset = Cifar(args.batch_size, 0, seed)
    model = WideResNet(args.depth, args.width_factor, args.dropout, in_channels=3, labels=10).to(device)

    base_optimizer = torch.optim.SGD
    optimizer = SAM(model.parameters(), base_optimizer, rho=args.rho, adaptive=args.adaptive, lr=args.learning_rate, momentum=args.momentum, weight_decay=args.weight_decay)
    scheduler = StepLR(optimizer, args.learning_rate, args.epochs)

    def loss_of(pred, targets, smoothing=0.1):
        return smooth_crossentropy(pred, targets, smoothing=smoothing, bug=bug)

    state = {"epoch": 0, "it": None}

    def next_batch():
        if state["it"] is None:
            model.train()
            state["it"] = iter(dataset.train)
        try:
            return next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            state["it"] = None
            return next_batch()

    def train_step():
        epoch = state["epoch"]
        batch = next_batch()
        model.train()
        inputs, targets = (b.to(device) for b in batch)

        # first forward-backward step
        enable_running_stats(model)
        predictions = model(inputs)
        loss = loss_of(predictions, targets, smoothing=args.label_smoothing)
        loss.mean().backward()
        if bug == "first_step_keeps_gradient":
            # the gradient at w left in .grad: the second backward adds the gradient at w + e(w) onto it
            optimizer.first_step(zero_grad=False)
        else:
            optimizer.first_step(zero_grad=True)

        # second forward-backward step
        disable_running_stats(model)
        loss_of(model(inputs), targets, smoothing=args.label_smoothing).mean().backward()
        optimizer.second_step(zero_grad=True)

        with torch.no_grad():
            scheduler(epoch)
        return loss.mean().detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            inputs, targets = batch
            predictions = model(inputs)
            loss = loss_of(predictions, targets)
            correct = torch.argmax(predictions, 1) == targets
        return {"loss": float(loss.mean()), "accuracy": float(correct.float().mean())}

    first = next(iter(torch.utils.data.DataLoader(dataset.train.dataset, batch_size=args.batch_size, shuffle=True,
                                                  generator=torch.Generator().manual_seed(seed))))
    return Program(name="sam_wrn_cifar", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda pred, t: loss_of(pred, t, smoothing=args.label_smoothing).mean(),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=dataset.train)


build = functools.partial(_build)

BUGS = [
    # kl_div fed probabilities where it expects log-probabilities (classic; F.kl_div's documented pitfall): the
    # smoothed cross-entropy becomes a different, near-flat objective.
    Bug("kl_div_on_probabilities", functools.partial(_build, bug="kl_div_on_probabilities"), "learning_ledger",
        ("OBJECTIVE",)),
    # first_step without zero_grad (the slip asked about in https://github.com/rollovd/LookSAM/issues/3 for a
    # SAM loop of the same shape): the base step applies grad(w) + grad(w + e(w)), not the sharpness-aware one.
    Bug("first_step_keeps_gradient", functools.partial(_build, bug="first_step_keeps_gradient"), "step_probe", (),
        kind="step.grad_accumulation"),
]
