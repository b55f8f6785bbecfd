# ruff: noqa: UP008, PLR0402, C408
"""Proxy Anchor loss for deep metric learning (Kim, Kim, Cho & Kwak, CVPR 2020), from tjddus9597/Proxy-Anchor-CVPR2020:
a ResNet backbone with global average + max pooling, a linear embedding and l2 normalization, one learnable proxy per
class, the proxy-anchor log-sum-exp loss over the proxies with positives in the batch, AdamW with the proxies at 100x
the learning rate, gradient value clipping, frozen BatchNorm, a warm-up that trains only the embedding and the
proxies, StepLR, Recall@K by cosine on held-out classes.

Source: https://github.com/tjddus9597/Proxy-Anchor-CVPR2020
Commit: 51db57031e38f75c03f69bbdfad1a3233afd9787
Files: ``code/train.py`` (README command for ResNet-50 on CUB: ``--loss Proxy_Anchor --embedding-size 512
--batch-size 120 --lr 1e-4 --warm 5 --bn-freeze 1 --lr-decay-step 5``), ``code/losses.py`` (``binarize``,
``l2_norm``, ``Proxy_Anchor``), ``code/net/resnet.py`` (``Resnet18``), ``code/utils.py`` (``predict_batchwise``,
``evaluate_cos``, ``calc_recall_at_k``), ``code/dataset/utils.py`` (``make_transform``), ``code/dataset/base.py``
License: MIT (Copyright (c) 2020 Sungyeon Kim; full text in LICENSES/tjddus9597-Proxy-Anchor-CVPR2020.txt)
Domain: metric learning (proxy-based loss, image retrieval by cosine similarity)

Kept as written: ``Proxy_Anchor`` (kaiming-normal fan_out proxies, mrg 0.1, alpha 32, the positive and negative
exponentials, the sums over proxies with positives and over all classes), ``binarize`` and ``l2_norm``, the
``Resnet18`` wrapper (``gap`` + ``gmp`` summed, ``embedding`` kaiming-initialized, ``l2_norm`` output, BatchNorm
frozen: ``eval()`` and no grad for its weights), the parameter groups (backbone; embedding at lr; proxies at
100 x lr), ``AdamW(lr=1e-4, weight_decay=1e-4)``, ``StepLR(step_size=5, gamma=0.5)`` per epoch, the epoch's
``model.train()`` then BatchNorm ``eval()``, the warm-up that sets ``requires_grad=False`` on everything but the
embedding and the proxies in epoch 0 and back at epoch ``warm``, and the loop body (forward, criterion, zero_grad,
backward, ``clip_grad_value_`` on the model and the proxies at 10, step).

Deviations from the original:
- the backbone is ``Resnet18`` (the same wrapper code as ``Resnet50``) over ``_tv_resnet.resnet18`` with width 64
  -> 16 and random weights: torchvision and ImageNet weights are not here (``pretrained=True`` in the original).
- CUB-200-2011 is not here: the images are synthetic 3x32x32 pictures made from ``seed`` (each class one of the
  28 combinations of 4 colours and 7 stripe orientations; random shift and pixel noise), 20 training classes x 16
  images and the 8 other combinations held out for evaluation x 8 images (CUB also evaluates on unseen classes). ``make_transform``'s train pipeline keeps
  ``RandomHorizontalFlip`` and ``Normalize`` (written out on tensors); ``RandomResizedCrop(224)`` and the eval
  ``Resize``/``CenterCrop`` are dropped at this size.
- sizes for 2 CPU cores: embedding 512 -> 64, batch 120 -> 32; no IPC balanced sampler (the README command does not
  set it), so the loader is the random-sampling ``DataLoader(shuffle=True, drop_last=True)`` with a seeded generator.
- CUDA, wandb, tqdm, the log folder and checkpointing are dropped; ``binarize`` returns a CPU tensor and is
  written with ``F.one_hot`` (scikit-learn's ``label_binarize``, the same matrix for more than two classes, is not
  installed here); ``train_step``
  is one batch of the epoch loop (the next epoch, with the warm-up switch and ``scheduler.step()``, starts when the
  loader runs out) and returns the loss; ``eval_fn`` is ``evaluate_cos`` on the held-out classes (Recall@1; the
  prints dropped), followed by the next epoch's BatchNorm ``eval()`` (``predict_batchwise`` ends in
  ``model.train()``; the original evaluates only at the end of an epoch). The 30 steps of the self-check fall in the warm-up epochs, as the original's first batches do.
- the Program declares ``frozen`` the parameters the warm-up and ``bn_freeze`` set ``requires_grad=False`` on.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import resnet18

WIDTH = 16  # (port) torchvision's 64


# ---------------------------------------------------------------------------------------------- code/losses.py
def binarize(T, nb_classes):
    T = T.cpu()
    T = F.one_hot(T.long(), nb_classes)  # (port) sklearn.preprocessing.label_binarize(T, classes=range(0, nb_classes))
    T = torch.FloatTensor(T.float())  # (port) .cuda()
    return T


def l2_norm(input, bug=None):
    input_size = input.size()
    buffer = torch.pow(input, 2)
    if bug == "l2_norm_over_batch":
        normp = torch.sum(buffer, 0).add_(1e-12)
        return torch.div(input, torch.sqrt(normp).view(1, -1).expand_as(input)).view(input_size)
    normp = torch.sum(buffer, 1).add_(1e-12)
    norm = torch.sqrt(normp)
    _output = torch.div(input, norm.view(-1, 1).expand_as(input))
    output = _output.view(input_size)
    return output


class Proxy_Anchor(torch.nn.Module):
    def __init__(self, nb_classes, sz_embed, mrg = 0.1, alpha = 32, bug=None):
        torch.nn.Module.__init__(self)
        # Proxy Anchor Initialization
        self.proxies = torch.nn.Parameter(torch.randn(nb_classes, sz_embed))  # (port) .cuda()
        nn.init.kaiming_normal_(self.proxies, mode='fan_out')

        self.nb_classes = nb_classes
        self.sz_embed = sz_embed
        self.mrg = mrg
        self.alpha = alpha
        self.bug = bug

    def forward(self, X, T):
        P = self.proxies

        cos = F.linear(l2_norm(X, self.bug), l2_norm(P, self.bug))  # Calcluate cosine similarity
        P_one_hot = binarize(T = T, nb_classes = self.nb_classes)
        N_one_hot = 1 - P_one_hot
        if self.bug == "one_hot_masks_swapped":
            P_one_hot, N_one_hot = N_one_hot, P_one_hot

        pos_exp = torch.exp(-self.alpha * (cos - self.mrg))
        neg_exp = torch.exp(self.alpha * (cos + self.mrg))

        with_pos_proxies = torch.nonzero(P_one_hot.sum(dim = 0) != 0).squeeze(dim = 1)   # The set of positive proxies of data in the batch
        num_valid_proxies = len(with_pos_proxies)   # The number of positive proxies

        P_sim_sum = torch.where(P_one_hot == 1, pos_exp, torch.zeros_like(pos_exp)).sum(dim=0)
        N_sim_sum = torch.where(N_one_hot == 1, neg_exp, torch.zeros_like(neg_exp)).sum(dim=0)

        pos_term = torch.log(1 + P_sim_sum).sum() / num_valid_proxies
        neg_term = torch.log(1 + N_sim_sum).sum() / self.nb_classes
        loss = pos_term + neg_term

        return loss


# ------------------------------------------------------------------------------------------ code/net/resnet.py
class Resnet18(nn.Module):
    def __init__(self,embedding_size, pretrained=True, is_norm=True, bn_freeze = True):
        super(Resnet18, self).__init__()

        self.model = resnet18(pretrained, width=WIDTH)  # (port) torchvision's resnet18(pretrained)
        self.is_norm = is_norm
        self.embedding_size = embedding_size
        self.num_ftrs = self.model.fc.in_features
        self.model.gap = nn.AdaptiveAvgPool2d(1)
        self.model.gmp = nn.AdaptiveMaxPool2d(1)

        self.model.embedding = nn.Linear(self.num_ftrs, self.embedding_size)
        self._initialize_weights()

        if bn_freeze:
            for m in self.model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
                    m.weight.requires_grad_(False)
                    m.bias.requires_grad_(False)

    def l2_norm(self,input):
        input_size = input.size()
        buffer = torch.pow(input, 2)

        normp = torch.sum(buffer, 1).add_(1e-12)
        norm = torch.sqrt(normp)

        _output = torch.div(input, norm.view(-1, 1).expand_as(input))

        output = _output.view(input_size)

        return output

    def forward(self, x):
        x = self.model.conv1(x)
        x = self.model.bn1(x)
        x = self.model.relu(x)
        x = self.model.maxpool(x)
        x = self.model.layer1(x)
        x = self.model.layer2(x)
        x = self.model.layer3(x)
        x = self.model.layer4(x)

        avg_x = self.model.gap(x)
        max_x = self.model.gmp(x)

        x = max_x + avg_x

        x = x.view(x.size(0), -1)
        x = self.model.embedding(x)

        if self.is_norm:
            x = self.l2_norm(x)

        return x

    def _initialize_weights(self):
        init.kaiming_normal_(self.model.embedding.weight, mode='fan_out')
        init.constant_(self.model.embedding.bias, 0)


# ------------------------------------------------------------------------------------------------ code/utils.py
def calc_recall_at_k(T, Y, k):
    s = 0
    for t,y in zip(T,Y):
        if t in torch.Tensor(y).long()[:k]:
            s += 1
    return s / (1. * len(T))


def predict_batchwise(model, dataloader):
    model_is_training = model.training
    model.eval()

    ds = dataloader.dataset
    A = [[] for i in range(len(ds[0]))]
    with torch.no_grad():
        # extract batches (A becomes list of samples)
        for batch in dataloader:
            for i, J in enumerate(batch):
                if i == 0:
                    # move images to device of model (approximate device)
                    J = model(J)
                for j in J:
                    A[i].append(j)
    model.train()
    model.train(model_is_training) # revert to previous training state

    return [torch.stack(A[i]) for i in range(len(A))]


def evaluate_cos(model, dataloader):
    # calculate embeddings with model and get targets
    X, T = predict_batchwise(model, dataloader)
    X = l2_norm(X)

    # get predictions by assigning nearest 8 neighbors with cosine
    K = 32
    cos_sim = F.linear(X, X)
    Y = T[cos_sim.topk(1 + K)[1][:,1:]]
    Y = Y.float().cpu()

    recall = []
    for k in [1, 2, 4, 8, 16, 32]:
        r_at_k = calc_recall_at_k(T, Y, k)
        recall.append(r_at_k)
    return recall


# ------------------------------------------------------------------------------------------------- (port) data
resnet_mean = [0.485, 0.456, 0.406]
resnet_std = [0.229, 0.224, 0.225]


class SyntheticImages(torch.utils.data.Dataset):
    """BaseDataset's interface over synthetic pictures: a class is a colour and a stripe orientation/frequency."""

    def __init__(self, rng, classes, per_class, is_train):
        self.classes = list(range(len(classes)))
        self.is_train = is_train
        self.rng = np.random.default_rng(int(rng.integers(1 << 31)))
        ims, ys = [], []
        yy, xx = np.mgrid[0:40, 0:40] / 40.
        for y, (colour, angle, freq) in enumerate(classes):
            wave = 0.5 + 0.5 * np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy))
            for _ in range(per_class):
                r, c = rng.integers(0, 8, size=2)
                im = colour[:, None, None] * wave[None, r:r + 32, c:c + 32]
                im = im + rng.normal(0, 0.1, size=im.shape)
                ims.append(np.clip(im, 0, 1).astype(np.float32))
                ys.append(y)
        self.ims, self.ys = ims, ys

    def nb_classes(self):
        assert set(self.ys) == set(self.classes)
        return len(self.classes)

    def __len__(self):
        return len(self.ys)

    def __getitem__(self, index):
        im = torch.from_numpy(self.ims[index])
        if self.is_train and self.rng.random() < 0.5:  # RandomHorizontalFlip
            im = im.flip(-1)
        im = (im - torch.tensor(resnet_mean)[:, None, None]) / torch.tensor(resnet_std)[:, None, None]  # Normalize
        return im, self.ys[index]


def _classes(rng):
    """28 classes: the combinations of 4 colours and 7 stripe orientations, shuffled (20 to train, 8 held out)."""
    colours = rng.uniform(0.1, 1.0, size=(4, 3))
    combos = [(colours[i], np.pi * j / 7, 2.5) for i in range(4) for j in range(7)]
    order = rng.permutation(len(combos))
    return [combos[k] for k in order[:20]], [combos[k] for k in order[20:]]


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = dict(sz_embedding=64, sz_batch=32, lr=1e-4, weight_decay=1e-4, lr_decay_step=5, lr_decay_gamma=0.5,
                alpha=32, mrg=0.1, warm=5, bn_freeze=1, l2_norm=1, gpu_id=0, loss='Proxy_Anchor')  # (port) 512, 120

    trn_classes, ev_classes = _classes(rng)
    trn_dataset = SyntheticImages(rng, trn_classes, 16, is_train=True)
    ev_dataset = SyntheticImages(rng, ev_classes, 8, is_train=False)
    dl_tr = torch.utils.data.DataLoader(trn_dataset, batch_size=args['sz_batch'], shuffle=True, drop_last=True,
                                        generator=torch.Generator().manual_seed(seed))
    dl_ev = torch.utils.data.DataLoader(ev_dataset, batch_size=args['sz_batch'], shuffle=False)

    nb_classes = trn_dataset.nb_classes()
    model = Resnet18(embedding_size=args['sz_embedding'], pretrained=False, is_norm=args['l2_norm'],
                     bn_freeze=args['bn_freeze'])  # (port) pretrained=True
    criterion = Proxy_Anchor(nb_classes=nb_classes, sz_embed=args['sz_embedding'], mrg=args['mrg'],
                             alpha=args['alpha'], bug=bug)

    # Train Parameters
    param_groups = [
        {'params': list(set(model.parameters()).difference(set(model.model.embedding.parameters())))},
        {'params': model.model.embedding.parameters(), 'lr': float(args['lr']) * 1},
    ]
    if bug == "embedding_group_dropped":
        param_groups = param_groups[:1]
    param_groups.append({'params': criterion.parameters(), 'lr': float(args['lr']) * 100})
    opt = torch.optim.AdamW(param_groups, lr=float(args['lr']), weight_decay=args['weight_decay'])
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=args['lr_decay_step'], gamma=args['lr_decay_gamma'])

    st = {"epoch": -1, "it": None}

    def start_epoch():
        st["epoch"] += 1
        epoch = st["epoch"]
        if epoch > 0:
            scheduler.step()
        model.train()
        bn_freeze = args['bn_freeze']
        if bn_freeze:
            modules = model.model.modules()
            for m in modules:
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        # Warmup: Train only new params, helps stabilize learning.
        if args['warm'] > 0:
            unfreeze_model_param = list(model.model.embedding.parameters()) + list(criterion.parameters())
            if epoch == 0:
                for param in list(set(model.parameters()).difference(set(unfreeze_model_param))):
                    param.requires_grad = False
            if epoch == args['warm']:
                for param in list(set(model.parameters()).difference(set(unfreeze_model_param))):
                    param.requires_grad = True
        st["it"] = iter(dl_tr)

    start_epoch()

    def train_step():
        try:
            x, y = next(st["it"])
        except StopIteration:
            start_epoch()
            x, y = next(st["it"])
        m = model(x.squeeze())
        loss = criterion(m, y.squeeze())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 10)
        if args['loss'] == 'Proxy_Anchor':
            torch.nn.utils.clip_grad_value_(criterion.parameters(), 10)
        opt.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        recall = evaluate_cos(model, dl_ev)[0]
        # (port) predict_batchwise leaves the frozen BatchNorms in train mode; the original evaluates at the end of
        # an epoch and the next epoch's start puts them back in eval mode, which is done here at once
        if args['bn_freeze']:
            for m in model.model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return recall

    xb, yb = next(iter(torch.utils.data.DataLoader(trn_dataset, batch_size=args['sz_batch'], shuffle=False)))
    frozen = ("model.conv1.*", "model.bn1.*", "model.layer*", "model.fc.*")
    return Program(name="proxyanchor_resnet", model=model, batch=(xb, yb), loss_fn=criterion, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn, frozen=frozen)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the embedding's parameter group left out of the optimizer (the backbone group is the set difference
    # that excludes it), so during the warm-up only the proxies move.
    Bug("embedding_group_dropped", functools.partial(_build, bug="embedding_group_dropped"), "four_structures",
        ("model.embedding",)),
    # classic: the positive and negative masks swapped, so each sample is pulled to every other class's proxy.
    Bug("one_hot_masks_swapped", functools.partial(_build, bug="one_hot_masks_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic wrong axis: l2_norm divides by the norm over the batch (dim 0) instead of each row's.
    Bug("l2_norm_over_batch", functools.partial(_build, bug="l2_norm_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
]
