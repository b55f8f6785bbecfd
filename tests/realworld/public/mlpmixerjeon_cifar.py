"""MLP-Mixer fine-tuning on CIFAR-10 (Tolstikhin et al.), jeonsworld's MLP-Mixer-Pytorch: a patch-embedding
``stem`` convolution, Mixer blocks (pre-LayerNorm token-mixing MLP on the transposed tokens, post-LayerNorm
channel-mixing MLP, both residual), a final LayerNorm, mean over tokens and a zero-initialized ``head``; the loss is
computed inside ``forward`` when labels are given (``CrossEntropyLoss``); SGD (momentum 0.9) with a warmup-cosine
``LambdaLR`` stepped before the optimizer, gradient clipping at 1.0, validation accuracy.

Source: https://github.com/jeonsworld/MLP-Mixer-Pytorch
Commit: 793ccdeb73fd482e3fd5dacbb1cfc075af54fcd7
Files: train.py, models/modeling.py, models/configs.py, utils/scheduler.py, utils/data_utils.py
License: MIT (Copyright (c) 2021 Eunkwang Jeon; full text in LICENSES/jeonsworld-MLP-Mixer-Pytorch.txt)
Domain: vision, image classification (MLP-Mixer)

Kept as written: ``MlpBlock``, ``MixerBlock``, ``MlpMixer`` (``forward`` with the loss on labels), the zero head
of ``load_from``'s ``zero_head`` branch, ``WarmupCosineSchedule``, ``AverageMeter``, ``simple_accuracy``, ``train``'s
optimizer (``SGD(model.parameters(), lr, momentum=0.9, weight_decay)``) and loop body (``model(x, y)``, the
accumulation division, backward, and at each update ``clip_grad_norm_``, ``scheduler.step()``, ``optimizer.step()``,
``optimizer.zero_grad()``), ``valid``'s accuracy.

Deviations from the original:
- no pretrained checkpoint: ``setup`` calls ``model.load_from(np.load(pretrained_dir))``; here the weights are
  PyTorch's default random init and only ``load_from``'s ``zero_head`` lines run (the head zeroed);
- sizes for 2 CPU cores: ``Mixer-B_16`` (hidden 768, 12 blocks, token MLP 384, channel MLP 3072) -> hidden 64, 2
  blocks, token MLP 32, channel MLP 128; ``img_size`` 224 -> 32 with patch 16 -> 4 (64 patches); train batch
  512 -> 32, eval batch 512 -> 64; ``num_steps`` 10000 -> 300, ``warmup_steps`` 500 -> 5; lr 3e-2 kept;
  ``gradient_accumulation_steps`` 1 kept;
- data: CIFAR-10 (torchvision download) is replaced by synthetic 32x32 RGB images in [0, 1] made from ``seed``:
  10 classes, each a colour and an oriented grating, with a random phase and pixel noise (1024 train, 256 test);
  torchvision's ``RandomResizedCrop((32, 32), scale=(0.05, 1.0))``, ``Resize``, ``ToTensor`` and ``Normalize(0.5,
  0.5)`` are written out in plain torch (the crop: the torchvision sampling of area and log-ratio, 10 tries, then a
  center crop, bilinear resize); the ``RandomSampler`` is a shuffling ``DataLoader`` with a
  ``torch.Generator(seed)``, no workers;
- ``valid``'s ``logits = model(x)[0]`` (a leftover of ViT-pytorch, whose model returns ``(logits, weights)``: here
  it would take the first row) is ``model(x)``; ``valid`` returns the accuracy; tqdm, logging, tensorboard,
  checkpoints, apex/fp16 and distributed training are dropped;
- one ``train_step`` is one iteration of ``train``'s inner loop (returning the loss); ``model.train()`` runs at
  the start of every epoch as written and after each ``valid``; ``eval_fn`` is ``valid`` on the test set;
  the Program's ``loss_fn`` is the same ``CrossEntropyLoss`` on ``model(x)``'s logits;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.nn.modules.utils import _pair
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class Config:  # (port) models/configs.py's ml_collections.ConfigDict, sizes shrunk
    name = 'Mixer-B_16'
    hidden_dim = 64  # 768
    num_blocks = 2  # 12
    tokens_mlp_dim = 32  # 384
    channels_mlp_dim = 128  # 3072


class args:  # train.py's defaults, sizes shrunk
    img_size = 32  # 224
    train_batch_size = 32  # 512
    eval_batch_size = 64  # 512
    learning_rate = 3e-2
    weight_decay = 0
    num_steps = 300  # 10000
    decay_type = "cosine"
    warmup_steps = 5  # 500
    max_grad_norm = 1.0
    gradient_accumulation_steps = 1
    seed = 42
    device = torch.device("cpu")


# models/modeling.py
class MlpBlock(nn.Module):
    def __init__(self, hidden_dim, ff_dim):
        super(MlpBlock, self).__init__()
        self.fc0 = nn.Linear(hidden_dim, ff_dim, bias=True)
        self.fc1 = nn.Linear(ff_dim, hidden_dim, bias=True)
        self.act_fn = nn.GELU()

    def forward(self, x):
        x = self.fc0(x)
        x = self.act_fn(x)
        x = self.fc1(x)
        return x


class MixerBlock(nn.Module):
    def __init__(self, config):
        super(MixerBlock, self).__init__()
        self.token_mlp_block = MlpBlock(config.n_patches, config.tokens_mlp_dim)
        self.channel_mlp_block = MlpBlock(config.hidden_dim, config.channels_mlp_dim)
        self.pre_norm = nn.LayerNorm(config.hidden_dim, eps=1e-6)
        self.post_norm = nn.LayerNorm(config.hidden_dim, eps=1e-6)

    def forward(self, x):
        h = x
        x = self.pre_norm(x)
        x = x.transpose(-1, -2)
        x = self.token_mlp_block(x)
        x = x.transpose(-1, -2)
        x = x + h

        h = x
        x = self.post_norm(x)
        x = self.channel_mlp_block(x)
        x = x + h
        return x


class MlpMixer(nn.Module):
    def __init__(self, config, img_size=224, num_classes=1000, patch_size=16, zero_head=False):
        super(MlpMixer, self).__init__()
        self.zero_head = zero_head
        self.num_classes = num_classes
        patch_size = _pair(patch_size)
        n_patches = (img_size // patch_size[0]) * (img_size // patch_size[1])
        config.n_patches = n_patches

        self.stem = nn.Conv2d(in_channels=3,
                              out_channels=config.hidden_dim,
                              kernel_size=patch_size,
                              stride=patch_size)
        self.head = nn.Linear(config.hidden_dim, num_classes, bias=True)
        self.pre_head_ln = nn.LayerNorm(config.hidden_dim, eps=1e-6)

        self.layer = nn.ModuleList()
        for _ in range(config.num_blocks):
            layer = MixerBlock(config)
            self.layer.append(copy.deepcopy(layer))

    def forward(self, x, labels=None):
        x = self.stem(x)
        x = x.flatten(2)
        x = x.transpose(-1, -2)

        for block in self.layer:
            x = block(x)
        x = self.pre_head_ln(x)
        x = torch.mean(x, dim=1)
        logits = self.head(x)

        if labels is not None:
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(logits.view(-1, self.num_classes), labels.view(-1))
            return loss
        else:
            return logits

    def load_from(self, weights):  # (port) only the zero_head lines: no checkpoint here
        with torch.no_grad():
            if self.zero_head:
                nn.init.zeros_(self.head.weight)
                nn.init.zeros_(self.head.bias)


# utils/scheduler.py
class WarmupCosineSchedule(LambdaLR):
    """ Linear warmup and then cosine decay."""
    def __init__(self, optimizer, warmup_steps, t_total, cycles=.5, last_epoch=-1):
        self.warmup_steps = warmup_steps
        self.t_total = t_total
        self.cycles = cycles
        super(WarmupCosineSchedule, self).__init__(optimizer, self.lr_lambda, last_epoch=last_epoch)

    def lr_lambda(self, step):
        if step < self.warmup_steps:
            return float(step) / float(max(1.0, self.warmup_steps))
        # progress after warmup
        progress = float(step - self.warmup_steps) / float(max(1, self.t_total - self.warmup_steps))
        return max(0.0, 0.5 * (1. + math.cos(math.pi * float(self.cycles) * 2.0 * progress)))


# train.py
class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def simple_accuracy(preds, labels):
    return (preds == labels).mean()


# --------------------------------------------------------------------------- (port) torchvision transforms, data
def random_resized_crop(img, size, scale, gen, ratio=(3. / 4., 4. / 3.)):
    _, height, width = img.shape
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=gen).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=gen)).item()
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,), generator=gen).item()
            j = torch.randint(0, width - w + 1, size=(1,), generator=gen).item()
            break
    else:
        h, w = height, width
        i, j = 0, 0
    crop = img[:, i:i + h, j:j + w]
    return nn.functional.interpolate(crop[None], size=size, mode="bilinear", align_corners=False)[0]


def normalize(t):
    return (t - 0.5) / 0.5


class SyntheticCIFAR(Dataset):
    """10 classes: a class colour and an oriented grating, random phase, pixel noise; images CHW in [0, 1]."""

    def __init__(self, n, seed, train, bug=None):
        g = torch.Generator().manual_seed(seed)
        self.train = train
        self.targets = torch.randint(0, 10, (n,), generator=g)
        colours = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1], [1, .5, 0],
                                [.5, 0, 1], [0, .5, .5], [.5, .5, .5]], dtype=torch.float32)
        ys, xs = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing="ij")
        imgs = []
        for c in self.targets.tolist():
            angle = math.pi * (c % 5) / 5
            phase = torch.rand(1, generator=g).item() * 2 * math.pi
            freq = 0.35 + 0.15 * (c // 5)
            grating = 0.5 + 0.5 * torch.sin(freq * (xs * math.cos(angle) + ys * math.sin(angle)) + phase)
            img = 0.55 * grating[None] * colours[c][:, None, None] + 0.25 * colours[c][:, None, None]
            img = img + 0.1 * torch.randn(3, 32, 32, generator=g)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)
        if bug == "labels_shuffled_apart" and train:
            self.targets = self.targets[torch.randperm(n, generator=g)]
        self.gen = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.data[i]
        if self.train:  # transform_train
            img = random_resized_crop(img, (args.img_size, args.img_size), scale=(0.05, 1.0), gen=self.gen)
        # transform_test's Resize((32, 32)) is the identity on 32x32 images; ToTensor: already in [0, 1]
        return normalize(img), self.targets[i]


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    config = Config()
    num_classes = 10

    model = MlpMixer(config, args.img_size, num_classes=num_classes, patch_size=4, zero_head=True)  # (port) 16
    model.load_from(None)
    model.to(args.device)

    trainset = SyntheticCIFAR(1024, seed, train=True, bug=bug)
    testset = SyntheticCIFAR(256, seed + 1000, train=False)
    train_loader = DataLoader(trainset, batch_size=args.train_batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(testset, batch_size=args.eval_batch_size, shuffle=False)

    # Prepare optimizer and scheduler
    if bug == "head_left_out_of_optimizer":
        params = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    else:
        params = model.parameters()
    optimizer = torch.optim.SGD(params,
                                lr=args.learning_rate,
                                momentum=0.9,
                                weight_decay=args.weight_decay)
    t_total = args.num_steps
    scheduler = WarmupCosineSchedule(optimizer, warmup_steps=args.warmup_steps, t_total=t_total)

    model.zero_grad()
    losses = AverageMeter()
    st = {"it": None, "step": 0, "global_step": 0}

    def valid(model, _batch=None):
        model.eval()
        all_preds, all_label = [], []
        loss_fct = torch.nn.CrossEntropyLoss()
        for step, batch in enumerate(test_loader):
            batch = tuple(t.to(args.device) for t in batch)
            x, y = batch
            with torch.no_grad():
                logits = model(x)  # (port) model(x)[0]

                eval_loss = loss_fct(logits, y)  # noqa: F841 (the meter)

                preds = torch.argmax(logits, dim=-1)

            if len(all_preds) == 0:
                all_preds.append(preds.detach().cpu().numpy())
                all_label.append(y.detach().cpu().numpy())
            else:
                all_preds[0] = np.append(
                    all_preds[0], preds.detach().cpu().numpy(), axis=0
                )
                all_label[0] = np.append(
                    all_label[0], y.detach().cpu().numpy(), axis=0
                )
        all_preds, all_label = all_preds[0], all_label[0]
        accuracy = simple_accuracy(all_preds, all_label)
        model.train()  # train(): ``model.train()`` right after each ``valid``
        return float(accuracy)

    def train_step():
        if st["it"] is None:  # a new pass of ``while True``
            model.train()
            st["it"], st["step"] = iter(train_loader), 0
            losses.reset()
        try:
            batch = next(st["it"])
        except StopIteration:
            st["it"] = None
            return train_step()
        step = st["step"]
        st["step"] += 1
        batch = tuple(t.to(args.device) for t in batch)
        x, y = batch
        loss = model(x, y)

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps
        loss.backward()

        if (step + 1) % args.gradient_accumulation_steps == 0:
            losses.update(loss.item()*args.gradient_accumulation_steps)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scheduler.step()
            optimizer.step()
            optimizer.zero_grad()
            st["global_step"] += 1
        return loss.item()

    def loss_fn(logits, y):
        return nn.CrossEntropyLoss()(logits.view(-1, num_classes), y.view(-1))

    def loader():
        yield from train_loader

    x0, y0 = next(iter(DataLoader(trainset, batch_size=args.train_batch_size, shuffle=False)))
    return Program(name="mlpmixerjeon_cifar", model=model, batch=(x0, y0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=valid, loader=loader())


build = functools.partial(_build, bug=None)

BUGS = [
    # the train set's labels permuted apart from its images (classic: targets shuffled separately from data).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # the optimizer built over every parameter but the head (classic): the zero-initialized head never moves, so
    # the logits stay zero.
    Bug("head_left_out_of_optimizer", functools.partial(_build, bug="head_left_out_of_optimizer"),
        "four_structures", ("head",)),
]
