"""MLP-Mixer trained from scratch on CIFAR-style images by the repository's ``Trainer`` (``python main.py --dataset
c10 --model mlp_mixer``, the defaults): a conv patch embedding, mixer layers of a token-mixing MLP (``Conv1d`` over
the patch axis) and a channel-mixing MLP, each pre-norm with a residual, LayerNorm and a mean-pooled linear head;
``CrossEntropyLoss(label_smoothing=0.1)``, Adam (lr 1e-3, betas (0.9, 0.99), weight decay 5e-5), a
``GradualWarmupScheduler`` (multiplier 1, 5 warmup epochs) in front of ``CosineAnnealingLR`` stepped each epoch.

Source: https://github.com/omihub777/MLP-Mixer-CIFAR
Commit: 14213f9bcf8e72e6b1f55788c6cdc4afbae48fd1
Files: main.py, train.py, mlp_mixer.py, utils.py, dataloader.py (and the scheduler it imports,
  https://github.com/ildoonet/pytorch-gradual-warmup-lr ``warmup_scheduler/scheduler.py`` at
  7021d63a49106e22c79b40564a7d39930e7b0f53, MIT, Copyright (c) 2019 Ildoo Kim)
License: MIT (Copyright (c) 2021 Omiita; LICENSES/omihub777-MLP-Mixer-CIFAR.txt; the scheduler's in
  LICENSES/ildoonet-pytorch-gradual-warmup-lr.txt)
Domain: vision MLP (MLP-Mixer image classification, label smoothing, warmup + cosine per epoch)

Deviations from the original:
- sizes: image 32 -> 16 (patch 4 unchanged: 16 patches), hidden_size 128 -> 32, hidden_c 512 -> 64, hidden_s
  64 -> 16, num_layers 8 -> 2, 10 -> 4 classes; batch 128 -> 16; epochs 300 -> 15 and an epoch is 2 batches, so
  the 5 warmup epochs (unchanged; the first epoch trains at lr 0 as the original's does) end within a short run;
- einops is not available: ``Rearrange('b d h w -> b (h w) d')`` is written out as ``flatten(2).transpose(1, 2)``
  in a small module; ``torchsummary`` and wandb logging are left out;
- no GPU: ``torch.cuda.amp.autocast`` and the ``GradScaler`` (a pass-through without CUDA) are left out, so the
  loss is backpropagated and ``optimizer.step()`` called directly; ``clip_grad`` is 0 by default (no clipping) and
  ``cutmix_prob`` is 0 by default, so the CutMix branch never runs (it is kept as written; ``np.int`` is ``int``);
- main.py reads ``args`` at module level (argparse); here the same namespace is built in ``_build``;
- data: CIFAR-10 is replaced by synthetic 16x16 RGB images made from ``seed``: noise plus a bright square in one
  of four quadrants, the quadrant is the label; torchvision's RandomCrop(padding) and Normalize are written out in
  plain torch (the random horizontal flip is left out: it would change the quadrant), AutoAugment is off (the
  default);
- one ``train_step`` is ``Trainer._train_one_step`` on the next batch, and after the last batch of an epoch the
  epoch's ``scheduler.step()`` of ``fit``; ``eval_fn`` is ``_test_one_step``'s accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP004, UP008  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import ReduceLROnPlateau, _LRScheduler
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCHES_PER_EPOCH = 2


# ---- warmup_scheduler/scheduler.py (ildoonet/pytorch-gradual-warmup-lr) ---------------------------------------

class GradualWarmupScheduler(_LRScheduler):
    """ Gradually warm-up(increasing) learning rate in optimizer.
    Proposed in 'Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour'.

    Args:
        optimizer (Optimizer): Wrapped optimizer.
        multiplier: target learning rate = base lr * multiplier if multiplier > 1.0. if multiplier = 1.0, lr starts from 0 and ends up with the base_lr.
        total_epoch: target learning rate is reached at total_epoch, gradually
        after_scheduler: after target_epoch, use this scheduler(eg. ReduceLROnPlateau)
    """

    def __init__(self, optimizer, multiplier, total_epoch, after_scheduler=None):
        self.multiplier = multiplier
        if self.multiplier < 1.:
            raise ValueError('multiplier should be greater thant or equal to 1.')
        self.total_epoch = total_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        super(GradualWarmupScheduler, self).__init__(optimizer)

    def get_lr(self):
        if self.last_epoch > self.total_epoch:
            if self.after_scheduler:
                if not self.finished:
                    self.after_scheduler.base_lrs = [base_lr * self.multiplier for base_lr in self.base_lrs]
                    self.finished = True
                return self.after_scheduler.get_last_lr()
            return [base_lr * self.multiplier for base_lr in self.base_lrs]

        if self.multiplier == 1.0:
            return [base_lr * (float(self.last_epoch) / self.total_epoch) for base_lr in self.base_lrs]
        else:
            return [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]

    def step_ReduceLROnPlateau(self, metrics, epoch=None):
        if epoch is None:
            epoch = self.last_epoch + 1
        self.last_epoch = epoch if epoch != 0 else 1  # ReduceLROnPlateau is called at the end of epoch, whereas others are called at beginning
        if self.last_epoch <= self.total_epoch:
            warmup_lr = [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]
            for param_group, lr in zip(self.optimizer.param_groups, warmup_lr):
                param_group['lr'] = lr
        else:
            if epoch is None:
                self.after_scheduler.step(metrics, None)
            else:
                self.after_scheduler.step(metrics, epoch - self.total_epoch)

    def step(self, epoch=None, metrics=None):
        if type(self.after_scheduler) != ReduceLROnPlateau:
            if self.finished and self.after_scheduler:
                if epoch is None:
                    self.after_scheduler.step(None)
                else:
                    self.after_scheduler.step(epoch - self.total_epoch)
                self.last_epoch = self.after_scheduler.last_epoch + self.total_epoch + 1
                self._last_lr = self.after_scheduler.get_last_lr()
            else:
                return super(GradualWarmupScheduler, self).step(epoch)
        else:
            self.step_ReduceLROnPlateau(metrics, epoch)


# ---- mlp_mixer.py ----------------------------------------------------------------------------------------------

class Rearrange(nn.Module):
    """einops ``Rearrange('b d h w -> b (h w) d')`` written out."""

    def __init__(self, bug=None):
        super().__init__()
        self.bug = bug

    def forward(self, x):
        b, d, h, w = x.shape
        if self.bug == "patches_viewed_not_transposed":
            # the layout slip: the (b, d, h*w) tensor viewed as (b, h*w, d) instead of transposed
            return x.reshape(b, h * w, d)
        return x.flatten(2).transpose(1, 2)


class MLPMixer(nn.Module):
    def __init__(self,in_channels=3,img_size=32, patch_size=4, hidden_size=512, hidden_s=256, hidden_c=2048, num_layers=8, num_classes=10, drop_p=0., off_act=False, is_cls_token=False, bug=None):
        super(MLPMixer, self).__init__()
        num_patches = img_size // patch_size * img_size // patch_size
        # (b, c, h, w) -> (b, d, h//p, w//p) -> (b, h//p*w//p, d)
        self.is_cls_token = is_cls_token

        self.patch_emb = nn.Sequential(
            nn.Conv2d(in_channels, hidden_size ,kernel_size=patch_size, stride=patch_size),
            Rearrange(bug=bug)
        )

        if self.is_cls_token:
            self.cls_token = nn.Parameter(torch.randn(1, 1, hidden_size))
            num_patches += 1


        self.mixer_layers = nn.Sequential(
            *[
                MixerLayer(num_patches, hidden_size, hidden_s, hidden_c, drop_p, off_act)
            for _ in range(num_layers)
            ]
        )
        self.ln = nn.LayerNorm(hidden_size)

        self.clf = nn.Linear(hidden_size, num_classes)


    def forward(self, x):
        out = self.patch_emb(x)
        if self.is_cls_token:
            out = torch.cat([self.cls_token.repeat(out.size(0),1,1), out], dim=1)
        out = self.mixer_layers(out)
        out = self.ln(out)
        out = out[:, 0] if self.is_cls_token else out.mean(dim=1)
        out = self.clf(out)
        return out


class MixerLayer(nn.Module):
    def __init__(self, num_patches, hidden_size, hidden_s, hidden_c, drop_p, off_act):
        super(MixerLayer, self).__init__()
        self.mlp1 = MLP1(num_patches, hidden_s, hidden_size, drop_p, off_act)
        self.mlp2 = MLP2(hidden_size, hidden_c, drop_p, off_act)
    def forward(self, x):
        out = self.mlp1(x)
        out = self.mlp2(out)
        return out

class MLP1(nn.Module):
    def __init__(self, num_patches, hidden_s, hidden_size, drop_p, off_act):
        super(MLP1, self).__init__()
        self.ln = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Conv1d(num_patches, hidden_s, kernel_size=1)
        self.do1 = nn.Dropout(p=drop_p)
        self.fc2 = nn.Conv1d(hidden_s, num_patches, kernel_size=1)
        self.do2 = nn.Dropout(p=drop_p)
        self.act = F.gelu if not off_act else lambda x:x
    def forward(self, x):
        out = self.do1(self.act(self.fc1(self.ln(x))))
        out = self.do2(self.fc2(out))
        return out+x

class MLP2(nn.Module):
    def __init__(self, hidden_size, hidden_c, drop_p, off_act):
        super(MLP2, self).__init__()
        self.ln = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Linear(hidden_size, hidden_c)
        self.do1 = nn.Dropout(p=drop_p)
        self.fc2 = nn.Linear(hidden_c, hidden_size)
        self.do2 = nn.Dropout(p=drop_p)
        self.act = F.gelu if not off_act else lambda x:x
    def forward(self, x):
        out = self.do1(self.act(self.fc1(self.ln(x))))
        out = self.do2(self.fc2(out))
        return out+x


# ---- utils.py --------------------------------------------------------------------------------------------------

def get_model(args, bug=None):
    model = None
    if args.model=='mlp_mixer':
        model = MLPMixer(
            in_channels=3,
            img_size=args.size,
            hidden_size=args.hidden_size,
            patch_size = args.patch_size,
            hidden_c = args.hidden_c,
            hidden_s = args.hidden_s,
            num_layers = args.num_layers,
            num_classes=args.num_classes,
            drop_p=args.drop_p,
            off_act=args.off_act,
            is_cls_token=args.is_cls_token,
            bug=bug,
        )
    else:
        raise ValueError(f"No such model: {args.model}")

    return model.to(args.device)

def rand_bbox(size, lam):
    W = size[2]
    H = size[3]
    cut_rat = np.sqrt(1. - lam)
    cut_w = int(W * cut_rat)
    cut_h = int(H * cut_rat)

    # uniform
    cx = np.random.randint(W)
    cy = np.random.randint(H)

    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)

    return bbx1, bby1, bbx2, bby2


# ---- train.py --------------------------------------------------------------------------------------------------

class Trainer(object):
    def __init__(self, model, args, bug=None):
        self.bug = bug
        self.device = args.device
        self.clip_grad = args.clip_grad
        self.cutmix_beta = args.cutmix_beta
        self.cutmix_prob = args.cutmix_prob
        self.model = model
        if bug == "optimizer_over_mixer_only":
            # the head left out of the optimizer (the optimizer built over the patch embedding and mixer layers)
            params = list(self.model.patch_emb.parameters()) + list(self.model.mixer_layers.parameters()) + list(self.model.ln.parameters())
        else:
            params = self.model.parameters()
        if args.optimizer=='sgd':
            self.optimizer = optim.SGD(params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, nesterov=args.nesterov)
        elif args.optimizer=='adam':
            self.optimizer = optim.Adam(params, lr=args.lr, betas=(args.beta1, args.beta2), weight_decay=args.weight_decay)
        else:
            raise ValueError(f"No such optimizer: {self.optimizer}")

        if args.scheduler=='step':
            self.base_scheduler = optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[args.epochs//2, 3*args.epochs//4], gamma=args.gamma)
        elif args.scheduler=='cosine':
            self.base_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=args.epochs, eta_min=args.min_lr)
        else:
            raise ValueError(f"No such scheduler: {self.scheduler}")


        if args.warmup_epoch:
            self.scheduler = GradualWarmupScheduler(self.optimizer, multiplier=1., total_epoch=args.warmup_epoch, after_scheduler=self.base_scheduler)
        else:
            self.scheduler = self.base_scheduler

        self.epochs = args.epochs
        self.criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

        self.num_steps = 0
        self.epoch_loss, self.epoch_corr, self.epoch_acc = 0., 0., 0.

    def _train_one_step(self, batch):
        self.model.train()
        img, label = batch
        self.num_steps += 1
        img, label = img.to(self.device), label.to(self.device)

        self.optimizer.zero_grad()
        r = np.random.rand(1)
        if self.cutmix_beta > 0 and r < self.cutmix_prob:
            # generate mixed sample
            lam = np.random.beta(self.cutmix_beta, self.cutmix_beta)
            rand_index = torch.randperm(img.size(0)).to(self.device)
            target_a = label
            target_b = label[rand_index]
            bbx1, bby1, bbx2, bby2 = rand_bbox(img.size(), lam)
            img[:, :, bbx1:bbx2, bby1:bby2] = img[rand_index, :, bbx1:bbx2, bby1:bby2]
            # adjust lambda to exactly match pixel ratio
            lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (img.size()[-1] * img.size()[-2]))
            # compute output
            out = self.model(img)
            loss = self.criterion(out, target_a) * lam + self.criterion(out, target_b) * (1. - lam)
        else:
            # compute output
            out = self.model(img)
            if self.bug == "softmax_before_cross_entropy":
                # probabilities handed to a criterion that applies log_softmax itself
                loss = self.criterion(F.softmax(out, dim=-1), label)
            else:
                loss = self.criterion(out, label)

        loss.backward()
        if self.clip_grad:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad)
        self.optimizer.step()

        acc = out.argmax(dim=-1).eq(label).sum(-1)/img.size(0)
        return loss.detach(), acc

    # @torch.no_grad
    def _test_one_step(self, batch):
        self.model.eval()
        img, label = batch
        img, label = img.to(self.device), label.to(self.device)

        with torch.no_grad():
            out = self.model(img)
            loss = self.criterion(out, label)

        self.epoch_loss += loss * img.size(0)
        self.epoch_corr += out.argmax(dim=-1).eq(label).sum(-1)


# ---- dataloader.py (synthetic CIFAR-10 stand-in, transforms in plain torch) ----------------------------------

def make_images(gen, n, size, num_classes):
    """Noise plus a bright 4x4 square in one of the four quadrants; the quadrant is the label."""
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    img = torch.rand(n, 3, size, size, generator=gen) * 0.5
    half = size // 2
    for i in range(n):
        qy, qx = divmod(int(labels[i]), 2)
        oy = qy * half + int(torch.randint(0, half - 4 + 1, (1,), generator=gen))
        ox = qx * half + int(torch.randint(0, half - 4 + 1, (1,), generator=gen))
        img[i, :, oy:oy + 4, ox:ox + 4] += 0.8
    return img, labels


def random_crop(img, size, padding, gen):
    """transforms.RandomCrop(size=(size, size), padding=padding) per image."""
    padded = F.pad(img, (padding, padding, padding, padding))
    out = torch.empty_like(img)
    for i in range(img.size(0)):
        y, x = torch.randint(0, 2 * padding + 1, (2,), generator=gen).tolist()
        out[i] = padded[i, :, y:y + size, x:x + size]
    return out


def get_args():
    args = argparse.Namespace(
        dataset="c10", model="mlp_mixer", batch_size=16, eval_batch_size=32, num_workers=0, seed=3407, epochs=15,
        patch_size=4, hidden_size=32, hidden_c=64, hidden_s=16, num_layers=2, drop_p=0., off_act=False,
        is_cls_token=False, lr=1e-3, min_lr=1e-6, momentum=0.9, optimizer="adam", scheduler="cosine", beta1=0.9,
        beta2=0.99, weight_decay=5e-5, off_nesterov=False, label_smoothing=0.1, gamma=0.1, warmup_epoch=5,
        autoaugment=False, clip_grad=0, cutmix_beta=1.0, cutmix_prob=0.,
    )
    args.device = torch.device("cpu")
    args.nesterov = not args.off_nesterov
    args.size, args.padding, args.num_classes = 16, 2, 4
    args.mean, args.std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    return args


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    args = get_args()
    mean = torch.tensor(args.mean).view(1, 3, 1, 1)
    std = torch.tensor(args.std).view(1, 3, 1, 1)

    train_x, train_y = make_images(gen, args.batch_size * BATCHES_PER_EPOCH, args.size, args.num_classes)
    test_x, test_y = make_images(gen, args.eval_batch_size, args.size, args.num_classes)
    train_ds = TensorDataset((train_x - mean) / std, train_y)
    train_dl = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))

    model = get_model(args, bug=bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(model, args, bug=bug)
    state = {"it": iter(train_dl), "i": 0}

    def train_step():
        try:
            img, label = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_dl)
            img, label = next(state["it"])
        img = random_crop(img, args.size, args.padding, gen)
        loss, _acc = trainer._train_one_step((img, label))
        state["i"] += 1
        if state["i"] % BATCHES_PER_EPOCH == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer.scheduler.step()
        return loss

    def eval_fn(model, batch):
        trainer.model = model
        trainer.epoch_loss, trainer.epoch_corr = 0., 0.
        trainer._test_one_step(batch)
        return float(trainer.epoch_corr) / batch[0].size(0)

    first = next(iter(train_dl))

    return Program(name="mlpmixercifar_mixer", model=model, batch=first, loss_fn=trainer.criterion,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn,
                   task_probe=((test_x - mean) / std, test_y), loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # the patch embedding's (b, d, h*w) output viewed as (b, h*w, d): tokens and channels scrambled
    Bug("patches_viewed_not_transposed", functools.partial(_build, bug="patches_viewed_not_transposed"),
        "tensor_trace", ("patch_emb",)),
    # softmax probabilities into CrossEntropyLoss (which applies log_softmax itself)
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # the classifier head left out of the optimizer: it keeps its random init
    Bug("optimizer_over_mixer_only", functools.partial(_build, bug="optimizer_over_mixer_only"),
        "four_structures", ("clf",)),
]
