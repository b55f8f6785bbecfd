"""Compact Convolutional Transformer (CCT, "Escaping the Big Data Paradigm with Compact Transformers", Hassani et
al.) trained by the repository's CIFAR quick training script ``examples/main.py`` with its defaults (``-m cct_2``:
a 2-layer convolutional tokenizer, 2 pre-norm transformer encoder layers of width 128 with stochastic depth, a
learnable positional embedding and sequence pooling -- an attention-weighted mean over the tokens instead of a class
token), ``LabelSmoothingCrossEntropy(0.1)``, AdamW (lr 5e-4, weight decay 3e-2), a per-epoch lr with 5 warm-up
epochs (``lr / (warmup - epoch)``) then a cosine, ``model.train()`` at each epoch's start and an eval-mode validation
after it.

Source: https://github.com/SHI-Labs/Compact-Transformers
Commit: cd11f0912749d376f7465cb83534e768b6701d7d
Files: examples/main.py, examples/utils/losses.py, src/cct.py (``CCT``, ``_cct``, ``cct_2``),
src/utils/tokenizer.py (``Tokenizer``), src/utils/transformers.py (``Attention``, ``TransformerEncoderLayer``,
``TransformerClassifier``), src/utils/stochastic_depth.py (``drop_path``, ``DropPath``)
License: Apache-2.0 (LICENSES/SHI-Labs-Compact-Transformers.txt)
Domain: vision transformer (convolutional tokenizer, sequence pooling, label smoothing, warm-up + cosine lr)

Kept as written: the modules listed above (only the classes ``cct_2`` builds; they live in ``_cct_lib.py``),
``LabelSmoothingCrossEntropy``, ``adjust_learning_rate``, ``accuracy``, the bodies of ``cls_train`` (``model.train()``,
forward, loss, running accuracy, zero_grad, backward, the optional clip, step) and ``cls_validate`` (eval mode,
``no_grad``), the argparse defaults (``--warmup 5``, ``--lr 0.0005``, ``--weight-decay 3e-2``, ``--clip-grad-norm 0``,
``-m cct_2``, ``--positional-embedding learnable``, ``--conv-layers 2``, ``--conv-size 3``), the model built with
the script's call ``models.__dict__[args.model]('', False, False, img_size=..., ...)`` (``cct_2`` called directly).

Deviations from the original:
- CIFAR-10 is not here (no download, no torchvision): synthetic 16x16 RGB images made from ``seed``, 4 classes by
  texture (horizontal stripes, vertical stripes, a checkerboard, a random binary noise pattern), each with a random
  period, phase and colour and added noise; 128 training and 64 validation images; ``DATASETS['cifar10']`` keeps the
  CIFAR-10 mean/std with ``num_classes`` 10 -> 4;
- the default augmentation's ``CIFAR10Policy`` (PIL AutoAugment, ``examples/utils/autoaug.py``) is left out;
  ``RandomCrop(16, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize`` are written out in plain
  torch; the validation ``Resize(16)`` is the identity on 16x16 images;
- sizes for 2 CPU cores: ``img_size`` 32 -> 16 (4x4 = 16 tokens after the tokenizer), ``-b 128 -> 32``, ``--epochs 200
  -> 20`` (4 batches an epoch), ``--workers 4 -> 0``; the model keeps ``cct_2``'s width (128), depth, heads and mlp
  ratio;
- no GPU (``--no-cuda``): the ``.cuda`` calls do not run; the timm registry decorator, ``model_urls`` and the
  pretrained-weights branch of ``_cct`` (``pretrained=False`` here), the other CCT variants, the masked and text
  classes, the prints and the checkpoint saving are left out;
- the epoch loop is unrolled: one ``train_step`` is one iteration of ``cls_train`` (``adjust_learning_rate`` and
  ``model.train()`` when an epoch starts, ``cls_validate`` when it ends, its top-1 kept); ``eval_fn`` is the top-1
  ``accuracy`` on a given batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written."""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cct_lib import cct_2

N_CLASSES, N_TRAIN, N_VAL = 4, 128, 64  # (port) synthetic data
DATASETS = {
    'cifar10': {
        'num_classes': N_CLASSES,  # (port) 10
        'img_size': 16,  # (port) 32
        'mean': [0.4914, 0.4822, 0.4465],
        'std': [0.2470, 0.2435, 0.2616]
    },
}


# ---- examples/utils/losses.py ------------------------------------------------------------------------------------

class LabelSmoothingCrossEntropy(nn.Module):
    """
    NLL loss with label smoothing.
    """
    def __init__(self, smoothing=0.1, bug=None):
        """
        Constructor for the LabelSmoothing module.
        :param smoothing: label smoothing factor
        """
        super(LabelSmoothingCrossEntropy, self).__init__()
        assert smoothing < 1.0
        self.smoothing = smoothing
        self.confidence = 1. - smoothing
        self.bug = bug

    def _compute_losses(self, x, target):
        log_prob = F.log_softmax(x, dim=-1)
        nll_loss = -log_prob.gather(dim=-1, index=target.unsqueeze(1))
        nll_loss = nll_loss.squeeze(1)
        smooth_loss = -log_prob.mean(dim=-1)
        loss = self.confidence * nll_loss + self.smoothing * smooth_loss
        if self.bug == "smoothing_weights_swapped":
            loss = self.smoothing * nll_loss + self.confidence * smooth_loss
        return loss

    def forward(self, x, target):
        return self._compute_losses(x, target).mean()


# ---- examples/main.py --------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    lr = args.lr
    if hasattr(args, 'warmup') and epoch < args.warmup:
        lr = lr / (args.warmup - epoch)
    elif not args.disable_cos:
        lr *= 0.5 * (1. + math.cos(math.pi * (epoch - args.warmup) / (args.epochs - args.warmup)))

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def accuracy(output, target):
    with torch.no_grad():
        batch_size = target.size(0)

        _, pred = output.topk(1, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        correct_k = correct[:1].flatten().float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / batch_size))
        return res


def cls_validate(val_loader, model, criterion, args, epoch=None, time_begin=None):
    model.eval()
    loss_val, acc1_val = 0, 0
    n = 0
    with torch.no_grad():
        for i, (images, target) in enumerate(val_loader):
            output = model(images)
            loss = criterion(output, target)

            acc1 = accuracy(output, target)
            n += images.size(0)
            loss_val += float(loss.item() * images.size(0))
            acc1_val += float(acc1[0] * images.size(0))

    avg_loss, avg_acc1 = (loss_val / n), (acc1_val / n)  # noqa: F841 (the printed loss)
    return avg_acc1


# ---- (port) synthetic CIFAR-like data and the torchvision transforms written out ---------------------------------

def _synthetic(seed, n):
    """Four texture classes: horizontal stripes, vertical stripes, checkerboard, binary noise; random colours."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
    targets = torch.randint(0, N_CLASSES, (n,), generator=g)
    images = torch.empty(n, 3, 16, 16)
    for j in range(n):
        period = float(torch.randint(3, 7, (1,), generator=g))
        phase = float(torch.rand(1, generator=g)) * period
        h = ((yy + phase) % period < period / 2).float()
        v = ((xx + phase) % period < period / 2).float()
        c = int(targets[j])
        pattern = [h, v, (h + v) % 2, (torch.rand(16, 16, generator=g) < 0.5).float()][c]
        fg, bg = torch.rand(3, 1, 1, generator=g), torch.rand(3, 1, 1, generator=g)
        img = fg * pattern + bg * (1 - pattern) + 0.1 * torch.randn(3, 16, 16, generator=g)
        images[j] = img.clamp(0, 1)
    return images, targets


class _Dataset(torch.utils.data.Dataset):
    def __init__(self, seed, n, train):
        self.images, self.targets = _synthetic(seed, n)
        self.train, self.g = train, torch.Generator().manual_seed(seed + 1)
        info = DATASETS['cifar10']
        self.mean = torch.tensor(info['mean']).view(3, 1, 1)
        self.std = torch.tensor(info['std']).view(3, 1, 1)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:  # RandomCrop(16, padding=4), RandomHorizontalFlip()
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,), generator=self.g))
            img = padded[:, top:top + 16, left:left + 16]
            if float(torch.rand(1, generator=self.g)) < 0.5:
                img = img.flip(-1)
        return (img - self.mean) / self.std, int(self.targets[i])  # ToTensor(), Normalize(mean, std)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    # (port) the argparse defaults, sizes as listed in the docstring
    args = argparse.Namespace(dataset='cifar10', workers=0, print_freq=-1, epochs=20, warmup=5, batch_size=32,
                              lr=0.0005, weight_decay=3e-2, clip_grad_norm=0., model='cct_2',
                              positional_embedding='learnable', conv_layers=2, conv_size=3, patch_size=4,
                              disable_cos=False, disable_aug=True, gpu_id=0, no_cuda=True)
    img_size = DATASETS[args.dataset]['img_size']
    num_classes = DATASETS[args.dataset]['num_classes']

    model = cct_2('', False, False, img_size=img_size,
                  num_classes=num_classes,
                  positional_embedding=args.positional_embedding,
                  n_conv_layers=args.conv_layers,
                  kernel_size=args.conv_size,
                  patch_size=args.patch_size, bug=bug)
    criterion = LabelSmoothingCrossEntropy(bug=bug)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=args.weight_decay)

    train_loader = torch.utils.data.DataLoader(
        _Dataset(seed, N_TRAIN, True), batch_size=args.batch_size, shuffle=True,
        num_workers=args.workers, generator=torch.Generator().manual_seed(seed))
    val_loader = torch.utils.data.DataLoader(
        _Dataset(seed + 1000, N_VAL, False),
        batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers)
    st = {"epoch": 0, "it": None, "acc1": None, "i": 0}
    return model, criterion, optimizer, train_loader, val_loader, args, st


def _program(seed, bug=None):
    model, criterion, optimizer, train_loader, val_loader, args, st = _build(seed, bug)

    def train_step():  # one iteration of cls_train
        if st["it"] is None:  # an epoch starts
            adjust_learning_rate(optimizer, st["epoch"], args)
            if bug != "train_mode_not_restored":
                model.train()
            st["it"] = iter(train_loader)
        images, target = next(st["it"])
        output = model(images)

        loss = criterion(output, target)

        acc1 = accuracy(output, target)
        optimizer.zero_grad()
        loss.backward()

        if args.clip_grad_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip_grad_norm, norm_type=2)

        optimizer.step()
        st["acc1"], st["i"] = float(acc1[0]), st["i"] + 1
        if st["i"] % len(train_loader) == 0:  # the epoch ends: validation
            cls_validate(val_loader, model, criterion, args, epoch=st["epoch"])
            st["epoch"], st["it"] = st["epoch"] + 1, None
        return loss.item()

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            acc = float(accuracy(model(batch[0]), batch[1])[0])
        model.train(was)
        return acc

    batch = next(iter(val_loader))
    return Program(name="cct_cifar", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_program, bug=None)

BUGS = [
    # classic wrong axis: the sequence-pooling softmax taken over the last axis (of size 1) instead of the tokens,
    # so every weight is 1 and the "attention pool" becomes an unweighted sum over the tokens; attention_pool gets
    # no gradient.
    Bug("seq_pool_softmax_over_last_axis", functools.partial(_program, bug="seq_pool_softmax_over_last_axis"),
        "tensor_trace", ("classifier.attention_pool",)),
    # classic: the two weights of the label-smoothed loss swapped, 0.1 on the true class and 0.9 on the uniform
    # term: the target is nearly uniform.
    Bug("smoothing_weights_swapped", functools.partial(_program, bug="smoothing_weights_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: model.train() left out of cls_train, so after the first epoch's cls_validate the model trains in
    # eval mode: dropout in attention and stochastic depth are off.
    Bug("train_mode_not_restored", functools.partial(_program, bug="train_mode_not_restored"), "step_probe",
        ("classifier.blocks.0.self_attn.attn_drop",), kind="step.trained_in_eval_mode"),
]
