"""ViT-CIFAR: a small Vision Transformer trained from scratch on CIFAR-10 by a LightningModule, as the repository's
README runs it (``python main.py --dataset c10 --label-smoothing --autoaugment``): ``Net`` wraps ``ViT`` (8x8
patches unfolded into words, a linear embedding, a cls token and learned position embedding, pre-norm encoder
blocks of multi-head self-attention and a GELU MLP, a LayerNorm + Linear head on the cls token), trains
``LabelSmoothingCrossEntropyLoss(smoothing=0.1)`` with Adam (lr 1e-3, betas (0.9, 0.999), weight decay 5e-5), and
a ``GradualWarmupScheduler`` (multiplier 1, 5 warmup epochs) in front of ``CosineAnnealingLR`` stepped each epoch.

Source: https://github.com/omihub777/ViT-CIFAR
Commit: ab9043ea44cfe8311d30295fc0e0467d676187f1
Files: main.py, vit.py, layers.py, criterions.py, utils.py (and the scheduler it imports,
  https://github.com/ildoonet/pytorch-gradual-warmup-lr ``warmup_scheduler/scheduler.py`` at
  7021d63a49106e22c79b40564a7d39930e7b0f53, MIT, Copyright (c) 2019 Ildoo Kim)
License: MIT (Copyright (c) 2021 Omiita; LICENSES/omihub777-ViT-CIFAR.txt; the scheduler's in
  LICENSES/ildoonet-pytorch-gradual-warmup-lr.txt)
Domain: vision transformer (image classification, Lightning module, label smoothing, warmup + cosine per epoch)

Deviations from the original:
- sizes: hidden 384 -> 32, mlp_hidden 384 -> 32 (the default keeps mlp_hidden == hidden), num_layers 7 -> 2, head
  12 -> 4; patch 8 (8x8 words of 4x4 pixels on a 32x32 image) unchanged; batch 128 -> 16; max_epochs 200 -> 20 and
  warmup_epoch 5 -> 2 (so the warmup ends within a short run); the scheduler is unchanged, so the first epoch trains
  at lr 0 as the original's does (multiplier 1.0 starts from 0);
- main.py reads ``args`` at module level (argparse); here the same namespace is built in ``_build``;
  ``get_criterion(args)`` inside ``Net.__init__`` is given the hparams namespace (the same values); comet_ml, the
  CSV logger, ``_log_image`` (torchvision's make_grid; it runs only with an api key) and ``torchsummary`` are left
  out; ``training_epoch_end`` (Lightning 1.x, it only logs the lr) is left out; precision 32 (the original falls back
  to 32 without a GPU);
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it
  (``training_step`` inside the optimizer closure, ``optimizer_zero_grad``, ``backward``, ``optimizer_step``); at the
  end of an epoch the validation loop runs and the epoch-interval scheduler steps. A ``Trainer(barebones=True)`` is
  attached so that ``self.log`` works (a no-op there); checkpointing and the saved weights are left out;
- data: CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (10 classes, each a fixed smooth
  random pattern, with a random brightness and noise), 64 training and 32 validation images; torchvision is not
  available, so ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize(mean, std)``
  of ``get_transform`` are written out in plain torch; AutoAugment's ``CIFAR10Policy`` (PIL image operations) is
  left out; no workers, no GPU; at lr 0 for the first epoch and a short warmup the loss falls slowly:
  ``SELF_CHECK_STEPS`` is 60;
- ``--cutmix`` / ``--mixup`` are off in the README's command: ``da.py``'s ``CutMix`` / ``MixUp`` are not copied and
  their branches in ``Net.__init__`` / ``training_step`` raise instead;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059, SIM210, UP008  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import warnings

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from pytorch_lightning import Trainer
from torch.optim.lr_scheduler import ReduceLROnPlateau, _LRScheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN = 64
N_VAL = 32
SELF_CHECK_STEPS = 60


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


# ---- criterions.py -------------------------------------------------------------------------------------------

class LabelSmoothingCrossEntropyLoss(nn.Module):
    def __init__(self, classes, smoothing=0.0, dim=-1, bug=None):
        super(LabelSmoothingCrossEntropyLoss, self).__init__()
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.cls = classes
        self.dim = dim
        self.bug = bug

    def forward(self, pred, target):
        if self.bug != "smoothing_on_raw_logits":
            pred = pred.log_softmax(dim=self.dim)
        with torch.no_grad():
            true_dist = torch.zeros_like(pred)
            true_dist.fill_(self.smoothing / (self.cls - 1))
            true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        return torch.mean(torch.sum(-true_dist * pred, dim=self.dim))


# ---- layers.py -----------------------------------------------------------------------------------------------

class TransformerEncoder(nn.Module):
    def __init__(self, feats:int, mlp_hidden:int, head:int=8, dropout:float=0., bug=None):
        super(TransformerEncoder, self).__init__()
        self.la1 = nn.LayerNorm(feats)
        self.msa = MultiHeadSelfAttention(feats, head=head, dropout=dropout, bug=bug)
        self.la2 = nn.LayerNorm(feats)
        self.mlp = nn.Sequential(
            nn.Linear(feats, mlp_hidden),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_hidden, feats),
            nn.GELU(),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        out = self.msa(self.la1(x)) + x
        out = self.mlp(self.la2(out)) + out
        return out


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, feats:int, head:int=8, dropout:float=0., bug=None):
        super(MultiHeadSelfAttention, self).__init__()
        self.head = head
        self.feats = feats
        self.sqrt_d = self.feats**0.5
        self.bug = bug

        self.q = nn.Linear(feats, feats)
        self.k = nn.Linear(feats, feats)
        self.v = nn.Linear(feats, feats)

        self.o = nn.Linear(feats, feats)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, f = x.size()
        q = self.q(x).view(b, n, self.head, self.feats//self.head).transpose(1,2)
        k = self.k(x).view(b, n, self.head, self.feats//self.head).transpose(1,2)
        v = self.v(x).view(b, n, self.head, self.feats//self.head).transpose(1,2)

        score = F.softmax(torch.einsum("bhif, bhjf->bhij", q, k)/self.sqrt_d, dim=-1) #(b,h,n,n)
        if self.bug == "heads_merged_without_transpose":
            # the heads merged by a reshape of (b,h,n,f//h): tokens and heads are interleaved
            attn = torch.einsum("bhij, bhjf->bhif", score, v).reshape(b, n, self.head, -1) #(b,n,h,f//h)
        else:
            attn = torch.einsum("bhij, bhjf->bihf", score, v) #(b,n,h,f//h)
        o = self.dropout(self.o(attn.flatten(2)))
        return o


# ---- vit.py --------------------------------------------------------------------------------------------------

class ViT(nn.Module):
    def __init__(self, in_c:int=3, num_classes:int=10, img_size:int=32, patch:int=8, dropout:float=0., num_layers:int=7, hidden:int=384, mlp_hidden:int=384*4, head:int=8, is_cls_token:bool=True, bug=None):
        super(ViT, self).__init__()
        # hidden=384

        self.patch = patch # number of patches in one row(or col)
        self.is_cls_token = is_cls_token
        self.patch_size = img_size//self.patch
        f = (img_size//self.patch)**2*3 # 48 # patch vec length
        num_tokens = (self.patch**2)+1 if self.is_cls_token else (self.patch**2)

        self.emb = nn.Linear(f, hidden) # (b, n, f)
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden)) if is_cls_token else None
        self.pos_emb = nn.Parameter(torch.randn(1,num_tokens, hidden))
        enc_list = [TransformerEncoder(hidden,mlp_hidden=mlp_hidden, dropout=dropout, head=head, bug=bug) for _ in range(num_layers)]
        self.enc = nn.Sequential(*enc_list)
        self.fc = nn.Sequential(
            nn.LayerNorm(hidden),
            nn.Linear(hidden, num_classes) # for cls_token
        )


    def forward(self, x):
        out = self._to_words(x)
        out = self.emb(out)
        if self.is_cls_token:
            out = torch.cat([self.cls_token.repeat(out.size(0),1,1), out],dim=1)
        out = out + self.pos_emb
        out = self.enc(out)
        if self.is_cls_token:
            out = out[:,0]
        else:
            out = out.mean(1)
        out = self.fc(out)
        return out

    def _to_words(self, x):
        """
        (b, c, h, w) -> (b, n, f)
        """
        out = x.unfold(2, self.patch_size, self.patch_size).unfold(3, self.patch_size, self.patch_size).permute(0,2,3,4,5,1)
        out = out.reshape(x.size(0), self.patch**2 ,-1)
        return out


# ---- utils.py ------------------------------------------------------------------------------------------------

def get_criterion(args):
    if args.criterion=="ce":
        if args.label_smoothing:
            criterion = LabelSmoothingCrossEntropyLoss(args.num_classes, smoothing=args.smoothing, bug=args.bug)
        else:
            criterion = nn.CrossEntropyLoss()
    else:
        raise ValueError(f"{args.criterion}?")

    return criterion

def get_model(args):
    if args.model_name == 'vit':
        net = ViT(
            args.in_c,
            args.num_classes,
            img_size=args.size,
            patch=args.patch,
            dropout=args.dropout,
            mlp_hidden=args.mlp_hidden,
            num_layers=args.num_layers,
            hidden=args.hidden,
            head=args.head,
            is_cls_token=args.is_cls_token,
            bug=args.bug,
            )
    else:
        raise NotImplementedError(f"{args.model_name} is not implemented yet...")

    return net


MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)


def make_images(seed):
    """10 classes, each a fixed smooth random RGB pattern; an image is its class pattern, scaled, plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate((torch.rand(10, 3, 4, 4, generator=g) < 0.5).float(), size=32, mode="bilinear",
                              align_corners=False)

    def sample(n):
        labels = torch.randint(10, (n,), generator=g)
        scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
        images = (templates[labels] * scale + 0.1 * torch.rand(n, 3, 32, 32, generator=g)).clamp(0, 1)
        return images, labels

    return templates, sample(N_TRAIN), sample(N_VAL)


class SyntheticCIFAR10(Dataset):
    """CIFAR10(root, train=..., transform=...) on the synthetic images, get_transform's transforms written out."""

    def __init__(self, images, labels, train):
        self.images, self.labels, self.train = images, labels, train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:  # transforms.RandomCrop(size=32, padding=4), transforms.RandomHorizontalFlip()
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,)))
            img = padded[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
        return (img - MEAN) / STD, self.labels[i]  # transforms.ToTensor(), transforms.Normalize(mean, std)


# ---- main.py -------------------------------------------------------------------------------------------------

class Net(pl.LightningModule):
    def __init__(self, hparams):
        super(Net, self).__init__()
        # self.hparams = hparams
        self.hparams.update(vars(hparams))
        self.model = get_model(hparams)
        self.criterion = get_criterion(hparams)
        if hparams.cutmix:
            raise NotImplementedError("CutMix is not configured in this port")
        if hparams.mixup:
            raise NotImplementedError("MixUp is not configured in this port")
        self.log_image_flag = hparams.api_key is None

    def forward(self, x):
        return self.model(x)

    def configure_optimizers(self):
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.hparams.lr, betas=(self.hparams.beta1, self.hparams.beta2), weight_decay=self.hparams.weight_decay)
        self.base_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=self.hparams.max_epochs, eta_min=self.hparams.min_lr)
        self.scheduler = GradualWarmupScheduler(self.optimizer, multiplier=1., total_epoch=self.hparams.warmup_epoch, after_scheduler=self.base_scheduler)
        return [self.optimizer], [self.scheduler]

    def training_step(self, batch, batch_idx):
        img, label = batch
        if self.hparams.cutmix or self.hparams.mixup:
            raise NotImplementedError("CutMix / MixUp are not configured in this port")
        else:
            out = self(img)
            loss = self.criterion(out, label)

        acc = torch.eq(out.argmax(-1), label).float().mean()
        self.log("loss", loss)
        self.log("acc", acc)
        return loss

    def validation_step(self, batch, batch_idx):
        img, label = batch
        out = self(img)
        loss = self.criterion(out, label)
        acc = torch.eq(out.argmax(-1), label).float().mean()
        self.log("val_loss", loss)
        self.log("val_acc", acc)
        return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = argparse.Namespace(
        api_key=None, dataset="c10", num_classes=10, model_name="vit", patch=8, batch_size=16, eval_batch_size=32,
        lr=1e-3, min_lr=1e-5, beta1=0.9, beta2=0.999, off_benchmark=False, max_epochs=20, dry_run=False,
        weight_decay=5e-5, warmup_epoch=2, precision=32, autoaugment=True, criterion="ce", label_smoothing=True,
        smoothing=0.1, rcpaste=False, cutmix=False, mixup=False, dropout=0.0, head=4, num_layers=2, hidden=32,
        mlp_hidden=32, off_cls_token=False, seed=seed, project_name="VisionTransformer", bug=bug)
    args.benchmark = True if not args.off_benchmark else False
    args.gpus = 0
    args.num_workers = 0
    args.is_cls_token = True if not args.off_cls_token else False
    # get_dataset(args): the CIFAR-10 settings
    args.in_c, args.num_classes, args.size, args.padding = 3, 10, 32, 4
    templates, (train_x, train_y), (val_x, val_y) = make_images(seed)
    train_ds = SyntheticCIFAR10(train_x, train_y, train=True)
    test_ds = SyntheticCIFAR10(val_x, val_y, train=False)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                                           num_workers=args.num_workers, generator=torch.Generator().manual_seed(seed))
    test_dl = torch.utils.data.DataLoader(test_ds, batch_size=args.eval_batch_size, num_workers=args.num_workers)

    net = Net(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=args.max_epochs,
                          deterministic=False)
    trainer.strategy.connect(net)
    net.trainer = trainer
    [optimizer], [scheduler] = net.configure_optimizers()

    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def validation_epoch():
        net.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(test_dl):
                net.validation_step(batch, batch_idx)
        net.train()

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch
                validation_epoch()
                scheduler.step()  # Lightning's default interval: "epoch"
                state["epoch"] += 1
            net.train()
            state["it"], state["batch_idx"] = iter(train_dl), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            loss = net.training_step(batch, batch_idx)
            net.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            net.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        net.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    def eval_fn(module, batch):
        img, label = batch
        module.eval()
        with torch.no_grad():
            out = module(img)
        module.train()
        return float(torch.eq(out.argmax(-1), label).float().mean())

    flat_templates = ((templates - MEAN) / STD).flatten(1)

    def task_probe(img):
        """The labelling rule: the class whose pattern the (normalized) image is closest to in direction."""
        x = img.flatten(1)
        return F.cosine_similarity(x[:, None] - x.mean(1, keepdim=True)[:, None],
                                   flat_templates[None] - flat_templates.mean(1, keepdim=True)[None], dim=-1).argmax(-1)

    first = next(iter(DataLoader(SyntheticCIFAR10(train_x, train_y, train=False), batch_size=args.batch_size)))
    return Program(name="vitcifar_lightning", model=net, batch=(first[0], first[1]),
                   loss_fn=lambda out, label: net.criterion(out, label), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # the label-smoothing loss fed the raw logits (the log_softmax line dropped): -sum(q * z) is unbounded below and
    # is no cross-entropy (classic).
    Bug("smoothing_on_raw_logits", functools.partial(_build, bug="smoothing_on_raw_logits"), "learning_ledger",
        ("OBJECTIVE",)),
    # the attention output's heads merged by a reshape of (b, h, n, d) instead of moving the head axis next to the
    # feature axis: tokens and heads are interleaved (classic layout slip).
    Bug("heads_merged_without_transpose", functools.partial(_build, bug="heads_merged_without_transpose"),
        "tensor_trace", ("model.enc.0.msa",)),
]
