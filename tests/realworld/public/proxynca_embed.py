"""Proxy-NCA deep metric learning trained by dichotomies/proxy-nca's ``train.py``: a backbone whose classifier is
replaced by an embedding layer (``net.embed``: features, global pool, a linear embedding with a truncated-normal
init, L2-normalized output), one learned proxy per training class (``ProxyNCA``: proxies and embeddings normalized
and scaled, squared ``cdist``, label-smoothed targets, ``sum(-T * log_softmax(-D))`` with the positive kept in the
denominator), Adam over three parameter groups (backbone, embedding layer, proxies at their own rate, ``eps=1.0``),
``ExponentialLR(0.94)`` stepped at the start of each epoch, and Recall@k on the held-out classes by nearest
neighbours of the embeddings (``utils.evaluate``, under ``eval()``).

Source: https://github.com/dichotomies/proxy-nca
Commit: ad9880a497a40cf588f30206f560676694694530
Files: train.py, proxynca.py, net/embed.py, utils.py, config.json, dataset/base.py, dataset/utils.py,
  evaluation/recall.py
License: MIT (Copyright (c) 2018 Vadim Tschernezki)
Domain: metric learning (proxy-based, retrieval on unseen classes)

Deviations from the original:
- the backbone: ImageNet-pretrained BN-Inception (``net/bn_inception.py`` with its weight file) cannot be loaded
  here; it is replaced by a small randomly initialized BN-Inception-shaped stem with the attributes ``embed`` uses
  (``features``: three conv-BN-ReLU blocks 3 -> 16 -> 32 -> 64 channels, ``global_pool``, an unused
  ``last_linear``), so ``net.embed`` is copied unchanged;
- sizes: 32x32 images instead of 227x227 crops, batch size 32 and sz_embedding 64 kept; the argparse defaults are
  what ``train.py`` runs (scaling_x 1, scaling_p 3, proxy lr 1, overriding config.json), the base lr 0.045 and
  ``eps=1.0`` from config.json kept;
- data: CUB-200-2011 is replaced by synthetic images made from ``seed``: 24 classes (16 for training, 8 held out as
  the eval classes, as CUB's 100/100 split), each a fixed smooth colour pattern, 40 images per class with a random
  shift, brightness and noise; ``make_transform``'s random crop and flip become a random horizontal flip
  (torchvision is not here); the dataset still returns ``(image, label, index)``;
- ``binarize_and_smooth_labels`` builds the smoothed one-hot with ``F.one_hot`` instead of sklearn's
  ``label_binarize`` (same values), and ``bn_inception_weight_init`` uses ``torch.nn.init.trunc_normal_`` for
  scipy's ``truncnorm(-2, 2, scale=0.001)``;
- no CUDA, logging, JSON logs or NMI; one ``train_step`` is one batch of the epoch loop (the scheduler stepped
  when an epoch starts, ``evaluate`` run when it ends); ``eval_fn`` is Recall@1 of a given batch's embeddings by
  ``assign_by_euclidian_at_k``.
"""
# ruff: noqa: PIE800, PIE808

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN_CLASSES, N_EVAL_CLASSES, PER_CLASS, SIZE = 16, 8, 40, 32
SZ_EMBEDDING, SZ_BATCH = 64, 32
CONFIG = {"criterion": {"smoothing_const": 0.1, "scaling_x": 1.0, "scaling_p": 3.0},
          "opt": {"embedding": {"weight_decay": 0.0}, "backbone": {"weight_decay": 0.0},
                  "proxynca": {"weight_decay": 0.0, "lr": 1.0}, "base": {"lr": 0.045, "eps": 1.0}},
          "lr_scheduler": {"gamma": 0.94}}


# ---- proxynca.py --------------------------------------------------------------------------------------------------

def binarize_and_smooth_labels(T, nb_classes, smoothing_const = 0.1):
    # Optional: BNInception uses label smoothing, apply it for retraining also
    # "Rethinking the Inception Architecture for Computer Vision", p. 6
    T = F.one_hot(T, nb_classes).float()  # sklearn.preprocessing.label_binarize
    T = T * (1 - smoothing_const)
    T[T == 0] = smoothing_const / (nb_classes - 1)
    return T


class ProxyNCA(torch.nn.Module):
    def __init__(self,
        nb_classes,
        sz_embedding,
        smoothing_const = 0.1,
        scaling_x = 1,
        scaling_p = 3,
        bug = None,
    ):
        torch.nn.Module.__init__(self)
        # initialize proxies s.t. norm of each proxy ~1 through div by 8
        # i.e. proxies.norm(2, dim=1)) should be close to [1,1,...,1]
        # TODO: use norm instead of div 8, because of embedding size
        self.proxies = Parameter(torch.randn(nb_classes, sz_embedding) / 8)
        self.smoothing_const = smoothing_const
        self.scaling_x = scaling_x
        self.scaling_p = scaling_p
        self.bug = bug

    def forward(self, X, T):
        P = F.normalize(self.proxies, p = 2, dim = -1) * self.scaling_p
        X = F.normalize(X, p = 2, dim = -1) * self.scaling_x
        D = torch.cdist(X, P) ** 2
        T = binarize_and_smooth_labels(T, len(P), self.smoothing_const)
        # note that compared to proxy nca, positive included in denominator
        if self.bug == "distance_sign_flipped":
            loss = torch.sum(-T * F.log_softmax(D, -1), -1)  # the distances used as similarities
        else:
            loss = torch.sum(-T * F.log_softmax(-D, -1), -1)
        return loss.mean()


# ---- net/ (a small stand-in for bn_inception, and embed.py as written) -------------------------------------------

class SmallInception(torch.nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        blocks = []
        for cin, cout in ((3, 16), (16, 32), (32, 64)):
            blocks += [torch.nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(cout),
                       torch.nn.ReLU(inplace=True)]
        self.feats = torch.nn.Sequential(*blocks)
        self.global_pool = torch.nn.AdaptiveAvgPool2d(1)
        self.last_linear = torch.nn.Linear(64, num_classes)

    def features(self, x):
        return self.feats(x)

    def forward(self, x):
        x = self.global_pool(self.features(x))
        return self.last_linear(x.view(x.size(0), -1))


def make_embedding_layer(in_features, sz_embedding, weight_init = None):
    embedding_layer = torch.nn.Linear(in_features, sz_embedding)
    if weight_init != None:
        weight_init(embedding_layer.weight)
    return embedding_layer


def bn_inception_weight_init(weight):
    stddev = 0.001
    torch.nn.init.trunc_normal_(weight.data, std=stddev, a=-2 * stddev, b=2 * stddev)


def embed(model, sz_embedding, normalize_output = True):
    model.embedding_layer = make_embedding_layer(
        model.last_linear.in_features,
        sz_embedding,
        weight_init = bn_inception_weight_init
    )
    def forward(x):
        # split up original logits and forward methods
        x = model.features(x)
        x = model.global_pool(x)
        x = x.view(x.size(0), -1)
        x = model.embedding_layer(x)
        if normalize_output == True:
            x = torch.nn.functional.normalize(x, p = 2, dim = 1)
        return x
    model.forward = forward


# ---- dataset/ on synthetic images ---------------------------------------------------------------------------------

class SyntheticDataset(torch.utils.data.Dataset):
    """BaseDataset's interface (``ys``, ``nb_classes``, ``(image, label, index)`` items) on generated images."""

    def __init__(self, patterns, classes, seed, is_train=True):
        g = torch.Generator().manual_seed(seed)
        self.classes, self.is_train = classes, is_train
        self.ys = [c - classes.start for c in classes for _ in range(PER_CLASS)]
        ims = []
        for c in classes:
            shift = torch.randint(-3, 4, (PER_CLASS, 2), generator=g)
            for k in range(PER_CLASS):
                im = torch.roll(patterns[c], tuple(shift[k].tolist()), dims=(1, 2))
                ims.append(im * (0.8 + 0.4 * torch.rand(1, generator=g)) + 0.2 * torch.randn(im.shape, generator=g))
        self.ims = torch.stack(ims)
        self.I = list(range(len(self.ys)))

    def nb_classes(self):
        assert set(self.ys) == set(range(len(self.classes)))
        return len(self.classes)

    def __len__(self):
        return len(self.ys)

    def __getitem__(self, index):
        im = self.ims[index]
        if self.is_train and torch.rand(1) < 0.5:  # transforms.RandomHorizontalFlip()
            im = im.flip(-1)
        return im, self.ys[index], index


def make_patterns(seed):
    g = torch.Generator().manual_seed(seed)
    low = torch.randn(N_TRAIN_CLASSES + N_EVAL_CLASSES, 3, 4, 4, generator=g)
    return F.interpolate(low, size=(SIZE, SIZE), mode="bilinear", align_corners=False)


# ---- evaluation/recall.py and utils.py ----------------------------------------------------------------------------

def assign_by_euclidian_at_k(X, T, k):
    distances = torch.cdist(X, X)
    # get nearest points
    indices = distances.topk(k + 1, largest=False)[1][:, 1: k + 1]
    return np.array([[T[i] for i in ii] for ii in indices])


def calc_recall_at_k(T, Y, k):
    s = sum([1 for t, y in zip(T, Y) if t in y[:k]])
    return s / (1. * len(T))


def predict_batchwise(model, dataloader):
    model_is_training = model.training
    model.eval()
    ds = dataloader.dataset
    A = [[] for i in range(len(ds[0]))]
    with torch.no_grad():
        for batch in dataloader:
            for i, J in enumerate(batch):
                if i == 0:
                    J = model(J).cpu()
                for j in J:
                    A[i].append(j)
    model.train()
    model.train(model_is_training) # revert to previous training state
    return [torch.stack(A[i]) for i in range(len(A))]


def evaluate(model, dataloader):
    X, T, *_ = predict_batchwise(model, dataloader)
    Y = torch.from_numpy(assign_by_euclidian_at_k(X, T, 8))
    return [calc_recall_at_k(T, Y, k) for k in [1, 2, 4, 8]]


# ---- train.py -----------------------------------------------------------------------------------------------------

def make_optimizer(model, criterion, bug=None):
    """train.py's `opt = config['opt']['type']([...], **config['opt']['args']['base'])`."""
    groups = [
        { # inception parameters, excluding embedding layer
            **{'params': list(set(model.parameters()).difference(set(model.embedding_layer.parameters())))},
            **CONFIG['opt']['backbone']
        },
        { # embedding parameters
            **{'params': model.embedding_layer.parameters()},
            **CONFIG['opt']['embedding']
        },
        { # proxy nca parameters
            **{'params': criterion.parameters()},
            **CONFIG['opt']['proxynca']
        }
    ]
    if bug == "embedding_layer_left_out":
        del groups[1]  # the group list edited down to backbone and proxies
    return torch.optim.Adam(groups, **CONFIG['opt']['base'])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    patterns = make_patterns(seed)
    ds_tr = SyntheticDataset(patterns, range(0, N_TRAIN_CLASSES), seed)
    ds_ev = SyntheticDataset(patterns, range(N_TRAIN_CLASSES, N_TRAIN_CLASSES + N_EVAL_CLASSES), seed + 1,
                             is_train=False)
    dl_tr = torch.utils.data.DataLoader(ds_tr, batch_size=SZ_BATCH, shuffle=True, num_workers=0, drop_last=True)
    dl_ev = torch.utils.data.DataLoader(ds_ev, batch_size=SZ_BATCH, shuffle=False, num_workers=0)

    model = SmallInception()
    embed(model, sz_embedding=SZ_EMBEDDING)
    criterion = ProxyNCA(nb_classes=dl_tr.dataset.nb_classes(), sz_embedding=SZ_EMBEDDING, bug=bug,
                         **CONFIG['criterion'])
    opt = make_optimizer(model, criterion, bug)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(opt, **CONFIG['lr_scheduler'])
    state = {"e": 0, "it": None, "recall": []}

    def train_step():
        if state["it"] is None:
            scheduler.step(state["e"])
            state["it"] = iter(dl_tr)
        x, y, index = next(state["it"], (None, None, None))
        if x is None:  # the epoch ended: evaluate, then the next epoch
            with torch.no_grad():
                state["recall"].append(evaluate(model, dl_ev))
            state["e"], state["it"] = state["e"] + 1, None
            return train_step()
        if bug == "labels_from_index":
            y = index % N_TRAIN_CLASSES  # `for x, _, y in dl_tr`: the sample index taken for the label
        opt.zero_grad()
        m = model(x)
        loss = criterion(m, y)
        loss.backward()
        opt.step()
        return loss.detach()

    first = next(iter(torch.utils.data.DataLoader(ds_tr, batch_size=SZ_BATCH, shuffle=True,
                                                  generator=torch.Generator().manual_seed(seed))))

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            X = model(batch[0])
        model.train(was)
        Y = torch.from_numpy(assign_by_euclidian_at_k(X, batch[1], 1))
        return calc_recall_at_k(batch[1], Y, 1)

    return Program(name="proxynca_embed", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=opt, train_step=train_step, eval_fn=eval_fn, loader=dl_tr)


build = functools.partial(_build)

BUGS = [
    # the batch unpacked as `for x, _, y in dl_tr`: each image's dataset index taken for its class (folded into the
    # proxies' range), so every proxy collects unrelated images.
    Bug("labels_from_index", functools.partial(_build, bug="labels_from_index"), "learning_ledger", ("TASK",)),
    # `log_softmax(D)` instead of `log_softmax(-D)`: the squared distances scored as similarities, the embedding
    # pushed away from its own proxy.
    Bug("distance_sign_flipped", functools.partial(_build, bug="distance_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the embedding layer's parameter group dropped from the optimizer: the layer that makes the embedding keeps
    # its initial weights.
    Bug("embedding_layer_left_out", functools.partial(_build, bug="embedding_layer_left_out"), "four_structures",
        ("embedding_layer",)),
]
