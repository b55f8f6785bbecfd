# ruff: noqa: PLR0402, TRY002, PIE808
"""ProxyNCA++ (metric learning with class proxies), from euwern/proxynca_pp.

Source: https://github.com/euwern/proxynca_pp, commit 217233d29a89a89766658396a598b896d17a5814, files ``train.py``,
``loss.py`` (``ProxyNCA_prob``, ``binarize_and_smooth_labels``), ``similarity.py`` (``pairwise_distance``),
``networks.py`` (``Feature``, ``Feat_resnet50_max_n``), ``dataset/utils.py`` (``BalancedBatchSampler``),
``evaluation/recall.py``, ``utils.py`` (``evaluate``) and ``config/cub.json``. License: MIT (Copyright (c) 2021 Eu
Wern Teh; full text in LICENSES/euwern-proxynca_pp.txt).

Kept as written: ``ProxyNCA_prob`` (proxies ``randn / 8``, scale 3 on both L2-normalized proxies and embeddings,
squared pairwise distances from ``pairwise_distance``, cross-entropy of ``log_softmax(-D)`` against the binarized
labels), the model ``Sequential(feat, emb)`` (feature extractor with max pooling and a LayerNorm without affine, a
linear embedding sized by a probe forward in eval mode), cub.json's optimizers (Adam, base lr 4e-3, eps 1.0, weight
decay 0 for every group; the proxies' group at lr 4e2; the warm-up optimizer with the backbone's lr 0), the
warm-up loop body and the training loop body (``criterion(model(x), y)``, ``backward``,
``clip_grad_value_(model.parameters(), 10)``, ``opt.step()``, ``opt.zero_grad()``, with the ``opt.zero_grad()``
at the start of each epoch), ``ReduceLROnPlateau(mode='max', patience=4)`` stepped once per epoch with the
validation hmean (NMI off in ``train`` mode, so ``nmi = 1``), ``BalancedBatchSampler`` (8 classes per batch),
Recall@k by Euclidean nearest neighbours.

Deviations:
- the backbone: torchvision's pretrained ResNet-50 is not available; ``_tv_resnet.py``'s ResNet-18 written out
  (width 8, random init) takes its place inside ``Feature`` with the same forward (conv1..layer4, max pool,
  flatten, LayerNorm without affine). The LayerNorm's size is the feature size (``2048`` hardcoded for ResNet-50).
- sizes: 32x32 images, batch 32 (8 classes x 4), embedding 64 (2048), 16 training classes and 8 disjoint validation
  classes (CUB: 50 and 50), an epoch of 6 batches; the warm-up (5 epochs in the script) is 5 batches run at build
  time, before the first ``train_step``.
- ``Feat_resnet50_max_n`` is named ``Feat_resnet_max_n`` here (the same max pooling and LayerNorm, the
  ResNet-18 above).
- the data: CUB-200 is replaced by synthetic smooth per-class prototypes plus per-image brightness and pixel noise,
  drawn from ``seed``; no augmentation (``make_transform``).
- ``binarize_and_smooth_labels``: sklearn is not installed here; ``label_binarize`` over ``range(nb_classes)`` is
  written out with ``F.one_hot`` (same matrix), and ``.cuda()`` is dropped everywhere; no DataParallel, no apex.
- ``utils.evaluate`` and ``evaluation.assign_by_euclidian_at_k``: sklearn's ``pairwise_distances`` is
  ``torch.cdist``; only Recall@1 is computed for the hmean (the other k only log).
- ``numpy.random``'s global state seeds the sampler as in the script (``np.random.seed(args.seed)``).
- logging, checkpoints and the results json are dropped; ``train_step`` returns the loss.
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
from torch.utils.data import BatchSampler, DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import resnet18

N_TRAIN_CLASSES = 16
N_VAL_CLASSES = 8
PER_CLASS = 12
WARMUP_K = 5
BATCHES_PER_EPOCH = 6


# ---- similarity.py -------------------------------------------------------------------------------------------
def pairwise_distance(a, squared=False):
    """Computes the pairwise distance matrix with numerical stability."""
    pairwise_distances_squared = torch.add(
        a.pow(2).sum(dim=1, keepdim=True).expand(a.size(0), -1),
        torch.t(a).pow(2).sum(dim=0, keepdim=True).expand(a.size(0), -1)
    ) - 2 * (
        torch.mm(a, torch.t(a))
    )

    # Deal with numerical inaccuracies. Set small negatives to zero.
    pairwise_distances_squared = torch.clamp(
        pairwise_distances_squared, min=0.0
    )

    # Get the mask where the zero distances are at.
    error_mask = torch.le(pairwise_distances_squared, 0.0)
    # Optionally take the sqrt.
    if squared:
        pairwise_distances = pairwise_distances_squared
    else:
        pairwise_distances = torch.sqrt(
            pairwise_distances_squared + error_mask.float() * 1e-16
        )

    # Undo conditionally adding 1e-16.
    pairwise_distances = torch.mul(
        pairwise_distances,
        (error_mask == False).float()
    )

    # Explicitly set diagonals to zero.
    mask_offdiagonals = 1 - torch.eye(
        *pairwise_distances.size(),
        device=pairwise_distances.device
    )
    pairwise_distances = torch.mul(pairwise_distances, mask_offdiagonals)

    return pairwise_distances


# ---- loss.py ---------------------------------------------------------------------------------------------------
def binarize_and_smooth_labels(T, nb_classes, smoothing_const=0):
    # sklearn.preprocessing.label_binarize(T, classes=range(0, nb_classes)), written out
    T = F.one_hot(T, nb_classes).numpy()
    T = T * (1 - smoothing_const)
    T[T == 0] = smoothing_const / (nb_classes - 1)
    T = torch.FloatTensor(T)

    return T


class ProxyNCA_prob(torch.nn.Module):
    def __init__(self, nb_classes, sz_embed, scale, bug=None, **kwargs):
        torch.nn.Module.__init__(self)
        self.proxies = torch.nn.Parameter(torch.randn(nb_classes, sz_embed) / 8)
        self.scale = scale
        self.bug = bug

    def forward(self, X, T):
        P = self.proxies
        # note: self.scale is equal to sqrt(1/T)
        # in the paper T = 1/9, therefore, scale = sart(1/(1/9)) = sqrt(9) = 3
        #  we need to apply sqrt because the pairwise distance is calculated as norm^2

        P = self.scale * F.normalize(P, p=2, dim=-1)
        X = self.scale * F.normalize(X, p=2, dim=-1)

        D = pairwise_distance(
            torch.cat(
                [X, P]
            ),
            squared=True
        )[:X.size()[0], X.size()[0]:]

        T = binarize_and_smooth_labels(
            T=T, nb_classes=len(P), smoothing_const=0
        )

        if self.bug == "log_softmax_over_batch":
            loss = torch.sum(- T * F.log_softmax(-D, 0), -1)
        else:
            loss = torch.sum(- T * F.log_softmax(-D, -1), -1)
        loss = loss.mean()
        return loss


# ---- networks.py -------------------------------------------------------------------------------------------------
class Feature(nn.Module):
    def __init__(self, model='resnet18', pool='avg', use_lnorm=False):
        nn.Module.__init__(self)
        self.model = model

        self.base = resnet18(width=8)
        if pool == 'avg':
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
        elif pool == 'max':
            self.pool = nn.AdaptiveMaxPool2d((1, 1))
        else:
            raise Exception('pool: %s pool must be avg or max', str(pool))

        self.lnorm = None
        if use_lnorm:
            self.lnorm = nn.LayerNorm(self.base.fc.in_features, elementwise_affine=False)

    def forward(self, x):
        x = self.base.conv1(x)
        x = self.base.bn1(x)
        x = self.base.relu(x)
        x = self.base.maxpool(x)

        x = self.base.layer1(x)
        x = self.base.layer2(x)
        x = self.base.layer3(x)
        x = self.base.layer4(x)
        x1 = self.pool(x)
        x = x1
        x = x.reshape(x.size(0), -1)

        if self.lnorm != None:
            x = self.lnorm(x)

        return x


class Feat_resnet_max_n(Feature):
    def __init__(self):
        Feature.__init__(self, model='resnet18', pool='max', use_lnorm=True)


# ---- dataset/utils.py ----------------------------------------------------------------------------------------------
class BalancedBatchSampler(BatchSampler):
    """
    BatchSampler - from a MNIST-like dataset, samples n_classes and within these classes samples n_samples.
    Returns batches of size n_classes * n_samples
    """

    def __init__(self, labels, n_classes, n_samples):
        self.labels = labels
        self.labels_set = list(set(self.labels.numpy()))
        self.label_to_indices = {label: np.where(self.labels.numpy() == label)[0]
                                 for label in self.labels_set}
        for l in self.labels_set:
            np.random.shuffle(self.label_to_indices[l])
        self.used_label_indices_count = {label: 0 for label in self.labels_set}
        self.count = 0
        self.n_classes = n_classes
        self.n_samples = n_samples
        self.n_dataset = len(self.labels)
        self.batch_size = self.n_samples * self.n_classes

    def __iter__(self):
        self.count = 0
        while self.count + self.batch_size < self.n_dataset:
            classes = np.random.choice(self.labels_set, self.n_classes, replace=False)
            indices = []
            for class_ in classes:
                indices.extend(self.label_to_indices[class_][
                               self.used_label_indices_count[class_]:self.used_label_indices_count[
                                                                         class_] + self.n_samples])
                self.used_label_indices_count[class_] += self.n_samples
                if self.used_label_indices_count[class_] + self.n_samples > len(self.label_to_indices[class_]):
                    np.random.shuffle(self.label_to_indices[class_])
                    self.used_label_indices_count[class_] = 0
            yield indices
            self.count += self.n_classes * self.n_samples

    def __len__(self):
        return self.n_dataset // self.batch_size


class SyntheticBirds(Dataset):
    """CUB stand-in: smooth per-class prototypes plus brightness and pixel noise (the ``(x, y, index)`` triple)."""

    def __init__(self, seed, classes, draw=0):
        g = torch.Generator().manual_seed(seed)
        coarse = torch.randn(N_TRAIN_CLASSES + N_VAL_CLASSES, 3, 4, 4, generator=g)
        protos = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
        g.manual_seed(seed * 1000 + 7 + draw)
        classes = list(classes)
        labels = torch.tensor(classes).repeat_interleave(PER_CLASS)
        self.xs = (protos[labels] + 0.3 * torch.randn(len(labels), 1, 1, 1, generator=g)
                   + 0.8 * torch.randn(len(labels), 3, 32, 32, generator=g))
        self.ys = labels - classes[0]
        self._nb_classes = len(classes)

    def nb_classes(self):
        return self._nb_classes

    def __getitem__(self, index):
        return self.xs[index], self.ys[index], index

    def __len__(self):
        return len(self.ys)


# ---- utils.py / evaluation/recall.py ------------------------------------------------------------------------------
def assign_by_euclidian_at_k(X, T, k):
    distances = torch.cdist(X, X)
    # get nearest points
    indices = np.argsort(distances.numpy(), axis=1)[:, 1: k + 1]
    return np.array([[T[i] for i in ii] for ii in indices])


def calc_recall_at_k(T, Y, k):
    s = sum([1 for t, y in zip(T, Y) if t in y[:k]])
    return s / (1. * len(T))


def evaluate(model, dataloader, eval_nmi=False, recall_list=(1, 2, 4, 8)):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        X = torch.cat([model(x) for x, _y, _ in dataloader])
    T = torch.cat([y for _x, y, _ in dataloader]).tolist()
    model.train(was_training)
    nmi = 1
    Y = assign_by_euclidian_at_k(X, T, max(recall_list))
    recall = [calc_recall_at_k(T, Y, k) for k in recall_list]
    return nmi, recall


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    sz_batch, sz_embedding, num_class_per_batch = 32, 64, 8

    feat = Feat_resnet_max_n()
    feat.eval()
    in_sz = feat(torch.rand(1, 3, 32, 32)).squeeze().size(0)
    feat.train()
    emb = torch.nn.Linear(in_sz, sz_embedding)
    model = torch.nn.Sequential(feat, emb)

    tr_dataset = SyntheticBirds(seed, range(0, N_TRAIN_CLASSES))
    val_dataset = SyntheticBirds(seed, range(N_TRAIN_CLASSES, N_TRAIN_CLASSES + N_VAL_CLASSES), draw=1)
    batch_sampler = BalancedBatchSampler(torch.Tensor(tr_dataset.ys), num_class_per_batch,
                                         int(sz_batch / num_class_per_batch))
    dl_tr = DataLoader(tr_dataset, batch_sampler=batch_sampler, num_workers=0)
    dl_val = DataLoader(val_dataset, batch_size=sz_batch, shuffle=False, num_workers=0)

    criterion = ProxyNCA_prob(nb_classes=dl_tr.dataset.nb_classes(), sz_embed=sz_embedding, scale=3, bug=bug)

    base = {"lr": 4e-3, "eps": 1.0}
    opt_warmup = torch.optim.Adam(
        [
            {'params': list(feat.parameters()), 'lr': 0},
            {'params': list(emb.parameters()), 'weight_decay': 0},
            {'params': criterion.parameters(), 'weight_decay': 0, 'lr': 4e2},
        ],
        **base
    )
    opt = torch.optim.Adam(
        [
            {'params': list(feat.parameters()), 'weight_decay': 0},
            {'params': list(emb.parameters()), 'weight_decay': 0},
            {'params': criterion.parameters(), 'weight_decay': 0, 'lr': 4e2},
        ],
        **base
    )
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode='max', patience=4)

    state = {"it": iter(dl_tr), "ct": 0}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(dl_tr)
            return next(state["it"])

    # warm up training (5 epochs in the script; here WARMUP_K batches, at build time)
    for _e in range(WARMUP_K):
        x, y, _ = next_batch()
        opt_warmup.zero_grad()
        m = model(x)
        loss = criterion(m, y)
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 10)
        opt_warmup.step()

    train_opt = opt_warmup if bug == "warmup_optimizer_kept" else opt
    first_x, first_y, _ = next(iter(DataLoader(tr_dataset, batch_sampler=BalancedBatchSampler(
        torch.Tensor(tr_dataset.ys), num_class_per_batch, int(sz_batch / num_class_per_batch)))))

    def train_step():
        if state["ct"] % BATCHES_PER_EPOCH == 0:
            train_opt.zero_grad()
        x, y, _ = next_batch()
        m = model(x)

        loss1 = criterion(m, y)
        loss = loss1

        loss.backward()

        torch.nn.utils.clip_grad_value_(model.parameters(), 10)

        if (state["ct"] + 1) % 1 == 0:
            train_opt.step()
            train_opt.zero_grad()
        state["ct"] += 1

        if state["ct"] % BATCHES_PER_EPOCH == 0:
            # end of epoch: validation and the plateau scheduler
            with torch.no_grad():
                nmi, recall = evaluate(model, dl_val)
            chmean = (2 * nmi * recall[0]) / (nmi + recall[0])
            scheduler.step(chmean)
        return loss.detach()

    def eval_fn(m, _batch):
        return evaluate(m, dl_val)[1][0]

    return Program(name="proxyncapp_cub", model=model, batch=(first_x, first_y), loss_fn=criterion,
                   optimizer=train_opt, train_step=train_step, eval_fn=eval_fn, loader=dl_tr)


build = functools.partial(_build, bug=None)

BUGS = [
    # the softmax over the proxies taken over the batch axis (log_softmax(-D, 0)): each example's loss is
    # normalized against the other examples' distances to its proxy, not against the other proxies (classic
    # wrong-axis slip).
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # the training loop keeps the warm-up optimizer (backbone group at lr 0): after warm-up only the embedding
    # and the proxies ever move, the backbone stays at its initialization (classic).
    Bug("warmup_optimizer_kept", functools.partial(_build, bug="warmup_optimizer_kept"), "step_probe",
        ("0.base",)),
]
