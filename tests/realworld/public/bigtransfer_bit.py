# ruff: noqa: PLR0402, RUF012
"""Big Transfer (Kolesnikov et al., "Big Transfer (BiT): General Visual Representation Learning") fine-tuning in
PyTorch, google-research/big_transfer's ``bit_pytorch``: a pre-activation ResNet-v2 with Weight-Standardized
convolutions and GroupNorm, a zero-initialized 1x1-conv head, SGD with momentum and no weight decay, the
BiT-HyperRule (linear warm-up, staircase decays, mixup only for large datasets) and gradient accumulation over
``batch_split`` micro-batches.

Source: https://github.com/google-research/big_transfer
Commit: 140de6e704fd8d61f3e5ea20ffde130b7d5fd065
Files: ``bit_pytorch/train.py``, ``bit_pytorch/models.py``, ``bit_hyperrule.py``, ``bit_common.py`` (arguments)
License: Apache-2.0 (Copyright 2020 Google LLC; full text in LICENSES/google-research-big_transfer.txt)
Domain: vision, image classification (transfer fine-tuning of a ResNet-v2 with weight standardization)

Kept as written: ``StdConv2d`` (``var_mean`` over the input dimensions, ``(w - m) / sqrt(v + 1e-10)``),
``PreActBottleneck`` (stride on the 3x3 conv, pre-activated projection shortcut), ``ResNetV2`` (root conv 7x7 /2,
``ConstantPad2d(1, 0)`` + ``MaxPool2d(3, 2)``, four blocks of units, head GroupNorm - ReLU - average pool - 1x1 conv,
``x[..., 0, 0]``), ``zero_head=True`` (``load_from``'s ``nn.init.zeros_`` of the head), ``nn.DataParallel``
(on a machine without GPUs it calls the module directly), ``SGD(lr=0.003, momentum=0.9)`` without weight decay,
``bit_hyperrule`` (``get_mixup``: none under 20000 images; ``get_lr`` with its supports), ``mktrainval``'s transforms
(Resize to the pre-crop size, RandomCrop, RandomHorizontalFlip, ToTensor, Normalize to [-1, 1]) and the loop body
(lr set from the hyperrule, optional mixup, ``CrossEntropyLoss``, ``(c / batch_split).backward()``, step and
zero_grad once ``batch_split`` micro-batches have accumulated, a new mixup ratio), ``run_eval`` (``model.eval()``,
``no_grad``, per-example loss and top-1 / top-5).

Deviations from the original:
- no pretrained weights are downloaded: ``model.load_from(np.load(...))`` is replaced by the part of ``load_from``
  that does not read the file (the zeroed head); the body keeps PyTorch's default initialization, so this is
  training from scratch under the fine-tuning recipe;
- sizes for 2 CPU cores: 'BiT-M-R50x1' (units [3, 4, 6, 3]) -> one unit per block ([1, 1, 1, 1]) with every width
  halved (``N*wf`` -> ``N*wf//2``: 32 .. 1024 channels, still multiples of GroupNorm's 32 groups); CIFAR's
  hyperrule resolution (pre-crop 160, crop 128) -> 40 / 32; ``batch`` 512 -> 16 with ``batch_split`` 2 (the
  README's way of fitting the batch in memory), so a step accumulates two micro-batches of 8; ``get_schedule``'s
  supports for small datasets [100, 200, 300, 400, 500] -> [10, 20, 30, 40, 50] so the warm-up ends inside the
  self-check's 30 steps;
- data: torchvision's CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (ten classes of coloured
  shapes on textured backgrounds; 320 training and 64 validation images); the transforms are written out on tensors
  (bilinear ``Resize``); the DataLoader shuffles with a ``torch.Generator(seed)``, no workers;
- CUDA, the checkpoint resume / save, the logger, ``lb.Chrono`` and ``lb.Uninterrupt`` are dropped;
  ``train_step`` runs the loop body until the next optimizer update (``batch_split`` micro-batches) and returns the
  mean of their losses; when the schedule ends (``get_lr`` returns None, where the original leaves the loop) the
  last step's learning rate is kept so the program can be stepped further; ``eval_fn`` is ``run_eval`` returning
  the top-1 accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# bit_pytorch/models.py
class StdConv2d(nn.Conv2d):

    def forward(self, x):
        w = self.weight
        v, m = torch.var_mean(w, dim=[1, 2, 3], keepdim=True, unbiased=False)
        w = (w - m) / torch.sqrt(v + 1e-10)
        return F.conv2d(x, w, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)


def conv3x3(cin, cout, stride=1, groups=1, bias=False):
    return StdConv2d(cin, cout, kernel_size=3, stride=stride,
                     padding=1, bias=bias, groups=groups)


def conv1x1(cin, cout, stride=1, bias=False):
    return StdConv2d(cin, cout, kernel_size=1, stride=stride,
                     padding=0, bias=bias)


class PreActBottleneck(nn.Module):
    """Pre-activation (v2) bottleneck block."""

    def __init__(self, cin, cout=None, cmid=None, stride=1):
        super().__init__()
        cout = cout or cin
        cmid = cmid or cout // 4

        self.gn1 = nn.GroupNorm(32, cin)
        self.conv1 = conv1x1(cin, cmid)
        self.gn2 = nn.GroupNorm(32, cmid)
        self.conv2 = conv3x3(cmid, cmid, stride)  # Original code has it on conv1!!
        self.gn3 = nn.GroupNorm(32, cmid)
        self.conv3 = conv1x1(cmid, cout)
        self.relu = nn.ReLU(inplace=True)

        if (stride != 1 or cin != cout):
            # Projection also with pre-activation according to paper.
            self.downsample = conv1x1(cin, cout, stride)

    def forward(self, x):
        out = self.relu(self.gn1(x))

        # Residual branch
        residual = x
        if hasattr(self, 'downsample'):
            residual = self.downsample(out)

        # Unit's branch
        out = self.conv1(out)
        out = self.conv2(self.relu(self.gn2(out)))
        out = self.conv3(self.relu(self.gn3(out)))

        return out + residual


class ResNetV2(nn.Module):
    """Implementation of Pre-activation (v2) ResNet mode."""

    def __init__(self, block_units, width_factor, head_size=21843, zero_head=False):
        super().__init__()
        wf = width_factor  # shortcut 'cause we'll use it a lot.

        # (port) every width N*wf halved to N*wf//2
        self.root = nn.Sequential(OrderedDict([
            ('conv', StdConv2d(3, 64 * wf // 2, kernel_size=7, stride=2, padding=3, bias=False)),
            ('pad', nn.ConstantPad2d(1, 0)),
            ('pool', nn.MaxPool2d(kernel_size=3, stride=2, padding=0)),
        ]))

        self.body = nn.Sequential(OrderedDict([
            ('block1', nn.Sequential(OrderedDict(
                [('unit01', PreActBottleneck(cin=64 * wf // 2, cout=256 * wf // 2, cmid=64 * wf // 2))] +
                [(f'unit{i:02d}', PreActBottleneck(cin=256 * wf // 2, cout=256 * wf // 2, cmid=64 * wf // 2))
                 for i in range(2, block_units[0] + 1)],
            ))),
            ('block2', nn.Sequential(OrderedDict(
                [('unit01', PreActBottleneck(cin=256 * wf // 2, cout=512 * wf // 2, cmid=128 * wf // 2, stride=2))] +
                [(f'unit{i:02d}', PreActBottleneck(cin=512 * wf // 2, cout=512 * wf // 2, cmid=128 * wf // 2))
                 for i in range(2, block_units[1] + 1)],
            ))),
            ('block3', nn.Sequential(OrderedDict(
                [('unit01', PreActBottleneck(cin=512 * wf // 2, cout=1024 * wf // 2, cmid=256 * wf // 2,
                                             stride=2))] +
                [(f'unit{i:02d}', PreActBottleneck(cin=1024 * wf // 2, cout=1024 * wf // 2, cmid=256 * wf // 2))
                 for i in range(2, block_units[2] + 1)],
            ))),
            ('block4', nn.Sequential(OrderedDict(
                [('unit01', PreActBottleneck(cin=1024 * wf // 2, cout=2048 * wf // 2, cmid=512 * wf // 2,
                                             stride=2))] +
                [(f'unit{i:02d}', PreActBottleneck(cin=2048 * wf // 2, cout=2048 * wf // 2, cmid=512 * wf // 2))
                 for i in range(2, block_units[3] + 1)],
            ))),
        ]))

        self.zero_head = zero_head
        self.head = nn.Sequential(OrderedDict([
            ('gn', nn.GroupNorm(32, 2048 * wf // 2)),
            ('relu', nn.ReLU(inplace=True)),
            ('avg', nn.AdaptiveAvgPool2d(output_size=1)),
            ('conv', nn.Conv2d(2048 * wf // 2, head_size, kernel_size=1, bias=True)),
        ]))

    def forward(self, x):
        x = self.head(self.body(self.root(x)))
        assert x.shape[-2:] == (1, 1)  # We should have no spatial shape left.
        return x[..., 0, 0]

    def load_from(self, weights=None, prefix='resnet/'):
        # (port) only the head initialization: there are no pretrained weights to copy here
        with torch.no_grad():
            if self.zero_head:
                nn.init.zeros_(self.head.conv.weight)
                nn.init.zeros_(self.head.conv.bias)


KNOWN_MODELS = OrderedDict([
    ('BiT-M-R50x1', lambda *a, **kw: ResNetV2([1, 1, 1, 1], 1, *a, **kw)),  # (port) [3, 4, 6, 3]
])


# bit_hyperrule.py
def get_resolution(original_resolution):
    """Takes (H,W) and returns (precrop, crop)."""
    area = original_resolution[0] * original_resolution[1]
    return (160 // 4, 128 // 4) if area < 96 * 96 else (512, 480)  # (port) (160, 128) scaled by 1/4


known_dataset_sizes = {
    'cifar10': (32, 32),
}


def get_resolution_from_dataset(dataset):
    if dataset not in known_dataset_sizes:
        raise ValueError(f"Unsupported dataset {dataset}. Add your own here :)")
    return get_resolution(known_dataset_sizes[dataset])


def get_mixup(dataset_size):
    return 0.0 if dataset_size < 20_000 else 0.1


def get_schedule(dataset_size):
    if dataset_size < 20_000:
        return [10, 20, 30, 40, 50]  # (port) [100, 200, 300, 400, 500]
    elif dataset_size < 500_000:
        return [500, 3000, 6000, 9000, 10_000]
    else:
        return [500, 6000, 12_000, 18_000, 20_000]


def get_lr(step, dataset_size, base_lr=0.003):
    """Returns learning-rate for `step` or None at the end."""
    supports = get_schedule(dataset_size)
    # Linear warmup
    if step < supports[0]:
        return base_lr * step / supports[0]
    # End of training
    elif step >= supports[-1]:
        return None
    # Staircase decays by factor of 10
    else:
        for s in supports[1:]:
            if s < step:
                base_lr /= 10
        return base_lr


# bit_pytorch/train.py
def topk(output, target, ks=(1,)):
    """Returns one boolean vector for each k, whether the target is within the output's top-k."""
    _, pred = output.topk(max(ks), 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    return [correct[:k].max(0)[0] for k in ks]


def recycle(iterable):
    """Variant of itertools.cycle that does not save iterates."""
    while True:
        yield from iterable


def mixup_data(x, y, l):
    """Returns mixed inputs, pairs of targets, and lambda"""
    indices = torch.randperm(x.shape[0]).to(x.device)

    mixed_x = l * x + (1 - l) * x[indices]
    y_a, y_b = y, y[indices]
    return mixed_x, y_a, y_b


def mixup_criterion(criterion, pred, y_a, y_b, l):
    return l * criterion(pred, y_a) + (1 - l) * criterion(pred, y_b)


class SyntheticCifar(torch.utils.data.Dataset):
    """Ten classes of 32x32 RGB images: a class colour and shape (disc, square, bar, cross) at a random place on a
    textured background, stored as uint8 like CIFAR; ``transform`` is applied per item."""

    classes = [str(c) for c in range(10)]

    def __init__(self, seed, n, transform, bug=None):
        gen = torch.Generator().manual_seed(seed)
        self.transform = transform
        self.targets = torch.arange(n) % 10
        size = 32
        yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing='ij')
        palette = torch.rand(10, 3, generator=torch.Generator().manual_seed(777))
        imgs = []
        for c in self.targets.tolist():
            bg = 0.3 * torch.rand(3, 1, 1, generator=gen) + 0.1 * torch.rand(3, size, size, generator=gen)
            cy, cx = torch.randint(8, size - 8, (2,), generator=gen).tolist()
            shape = c % 4
            if shape == 0:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= 40
            elif shape == 1:
                mask = ((yy - cy).abs() <= 6) & ((xx - cx).abs() <= 6)
            elif shape == 2:
                mask = (yy - cy).abs() <= 2
            else:
                mask = ((yy - cy).abs() <= 2) | ((xx - cx).abs() <= 2)
            imgs.append(torch.where(mask, palette[c][:, None, None].expand(3, size, size), bg).clamp(0, 1))
        self.data = (torch.stack(imgs) * 255).to(torch.uint8)
        if bug == "labels_shuffled_apart":
            self.targets = self.targets[torch.randperm(n, generator=gen)]

    def __getitem__(self, i):
        return self.transform(self.data[i]), int(self.targets[i])

    def __len__(self):
        return len(self.targets)


def train_tx_fn(precrop, crop):
    def tx(img):
        x = img.float() / 255  # ToTensor
        x = F.interpolate(x[None], size=(precrop, precrop), mode='bilinear', align_corners=False)[0]  # Resize
        i, j = torch.randint(0, precrop - crop + 1, (2,)).tolist()  # RandomCrop
        x = x[:, i:i + crop, j:j + crop]
        if float(torch.rand(1)) < 0.5:  # RandomHorizontalFlip
            x = x.flip(-1)
        return (x - 0.5) / 0.5  # Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    return tx


def val_tx_fn(crop):
    def tx(img):
        x = img.float() / 255
        x = F.interpolate(x[None], size=(crop, crop), mode='bilinear', align_corners=False)[0]
        return (x - 0.5) / 0.5
    return tx


def mktrainval(args, bug=None):
    """Returns train and validation datasets."""
    precrop, crop = get_resolution_from_dataset(args["dataset"])
    train_set = SyntheticCifar(args["seed"], 320, train_tx_fn(precrop, crop), bug=bug)
    valid_set = SyntheticCifar(args["seed"] + 1000, 64, val_tx_fn(crop))

    micro_batch_size = args["batch"] // args["batch_split"]

    valid_loader = torch.utils.data.DataLoader(
        valid_set, batch_size=micro_batch_size, shuffle=False, num_workers=0, drop_last=False)

    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=micro_batch_size, shuffle=True, num_workers=0, drop_last=False,
        generator=torch.Generator().manual_seed(args["seed"]))

    return train_set, valid_set, train_loader, valid_loader


def run_eval(model, data_loader, device):
    # switch to evaluate mode
    model.eval()

    all_c, all_top1, all_top5 = [], [], []
    for x, y in data_loader:
        with torch.no_grad():
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)

            logits = model(x)
            c = torch.nn.CrossEntropyLoss(reduction='none')(logits, y)
            top1, top5 = topk(logits, y, ks=(1, 5))
            all_c.extend(c.cpu())
            all_top1.extend(top1.cpu())
            all_top5.extend(top5.cpu())

    model.train()
    return all_c, all_top1, all_top5


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = {"model": "BiT-M-R50x1", "dataset": "cifar10", "batch": 16, "batch_split": 2, "base_lr": 0.003,
            "seed": seed}  # (port) batch 512, batch_split 1

    device = torch.device("cpu")

    train_set, valid_set, train_loader, valid_loader = mktrainval(args, bug=bug)

    model = KNOWN_MODELS[args["model"]](head_size=len(valid_set.classes), zero_head=True)
    model.load_from()

    model = torch.nn.DataParallel(model)

    step = 0

    # Note: no weight-decay!
    if bug == "head_left_out_of_optimizer":
        optim = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("module.head.")],
                                lr=0.003, momentum=0.9)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=0.003, momentum=0.9)

    model = model.to(device)
    optim.zero_grad()

    model.train()
    mixup = get_mixup(len(train_set))
    cri = torch.nn.CrossEntropyLoss().to(device)

    st = {"step": step, "accum_steps": 0,
          "mixup_l": np.random.beta(mixup, mixup) if mixup > 0 else 1,
          "it": recycle(train_loader)}

    def train_step():
        losses = []
        while True:
            x, y = next(st["it"])
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)

            # Update learning-rate, including stop training if over.
            lr = get_lr(st["step"], len(train_set), args["base_lr"])
            if lr is None:
                lr = get_lr(get_schedule(len(train_set))[-1] - 1, len(train_set), args["base_lr"])  # (port)
            for param_group in optim.param_groups:
                param_group["lr"] = lr

            if mixup > 0.0:
                x, y_a, y_b = mixup_data(x, y, st["mixup_l"])

            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()
            logits = model(x)
            if mixup > 0.0:
                c = mixup_criterion(cri, logits, y_a, y_b, st["mixup_l"])
            else:
                c = cri(logits, y)
            losses.append(float(c.data.cpu().numpy()))

            # Accumulate grads
            (c / args["batch_split"]).backward()
            st["accum_steps"] += 1

            # Update params
            if st["accum_steps"] == args["batch_split"]:
                optim.step()
                optim.zero_grad()
                st["step"] += 1
                st["accum_steps"] = 0
                # Sample new mixup ratio for next batch
                st["mixup_l"] = np.random.beta(mixup, mixup) if mixup > 0 else 1
                return float(np.mean(losses))

    def eval_fn(m, batch):
        _, all_top1, _ = run_eval(m, valid_loader, device)
        return float(np.mean([float(t) for t in all_top1]))

    xs, ys = zip(*[train_set[i] for i in range(args["batch"] // args["batch_split"])])
    batch = (torch.stack(xs), torch.tensor(ys))
    return Program(name="bigtransfer_bit", model=model, batch=batch, loss_fn=cri, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``optim.zero_grad()`` inside the accumulation loop, before every micro-batch (classic): only the last of the
    # ``batch_split`` micro-batches reaches the update.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),
    # the zero-initialized head left out of the optimizer (classic): the logits stay zero. Re-pointed after first
    # contact from ("head.conv",): the head is its GroupNorm and its conv, and the finding names the head's first
    # parameter (module.head.gn.weight) among the 4 tensors the optimizer does not own.
    Bug("head_left_out_of_optimizer", functools.partial(_build, bug="head_left_out_of_optimizer"),
        "four_structures", ("module.head.",)),
    # the training labels permuted apart from the images (classic).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
]
