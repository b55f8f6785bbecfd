"""Prototypical Networks (Snell et al.) on miniImageNet, Yinbo Chen's prototypical-network-pytorch: a 4-block
Conv-64 encoder, class prototypes as the mean of the support embeddings, logits the negative squared Euclidean
distance of each query embedding to each prototype, cross-entropy on ``arange(way).repeat(query)``, Adam lr 1e-3
with StepLR(20, 0.5), episodes drawn by ``CategoriesSampler`` (30-way 1-shot 15-query training).

Source: https://github.com/cyvius96/prototypical-network-pytorch
Commit: 36ecfe600f381c2bc19993138ab42fd8cc8a48ea
Files: train.py, convnet.py, samplers.py, utils.py, mini_imagenet.py
License: MIT (Copyright (c) 2019 Yinbo Chen; full text in LICENSES/cyvius96-prototypical-network-pytorch.txt)
Domain: metric / few-shot learning (prototypical networks, episodic training)

Kept as written: ``conv_block`` / ``Convnet`` (BatchNorm weights ``uniform_``), ``CategoriesSampler`` (random
classes, ``n_per`` random images each, stacked and transposed so the batch is shot-major then query-major),
``euclidean_metric``, ``count_acc``, ``Averager``, train.py's optimizer and scheduler, its loop body (the first
``shot * way`` images as the support, prototypes by ``reshape(shot, way, -1).mean(0)``, the labels
``arange(way).repeat(query)``, cross-entropy, accuracy, zero_grad / backward / step) and the validation loop's body.

Deviations from the original:
- miniImageNet (``./materials/images`` and the csv split files) is not here: the images are synthetic, made from
  ``seed`` (each class a faint smooth random colour pattern around grey, each image that pattern shifted by up to two pixels with
  strong pixel noise), 40 training classes and 16 validation classes of 30 images (64 / 16 of 600 in the original), at
  28x28 instead of ``Resize(84)`` / ``CenterCrop(84)``; ``Normalize`` with the ImageNet mean and std is kept, as
  tensor arithmetic (no torchvision). The encoder's output is 64 (1600 at 84x84).
- sizes for 2 CPU cores: train_way 30 -> 10, query 15 -> 5 (shot 1 and test_way 5 kept); 100 training episodes
  per epoch kept, validation episodes 400 -> 20; CUDA, ``num_workers=8``, ``pin_memory``, the prints, timer,
  trlog and checkpoint saving are dropped.
- ``train_step`` is one episode of the epoch loop (``lr_scheduler.step()`` and ``model.train()`` run when an
  epoch starts, as in the original's epoch loop); ``eval_fn`` is the validation loop's accuracy, after which the
  model is put back in training mode (the original's next epoch does that with ``model.train()``).
- seeding: ``torch.manual_seed(seed)`` (the sampler draws from torch's generator).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- convnet.py -------------------------------------------------------------------------------------------------

def conv_block(in_channels, out_channels):
    bn = nn.BatchNorm2d(out_channels)
    nn.init.uniform_(bn.weight) # for pytorch 1.2 or later
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        bn,
        nn.ReLU(),
        nn.MaxPool2d(2)
    )


class Convnet(nn.Module):

    def __init__(self, x_dim=3, hid_dim=64, z_dim=64):
        super().__init__()
        self.encoder = nn.Sequential(
            conv_block(x_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, z_dim),
        )
        self.out_channels = 1600

    def forward(self, x):
        x = self.encoder(x)
        return x.view(x.size(0), -1)


# ---- samplers.py ------------------------------------------------------------------------------------------------

class CategoriesSampler:

    def __init__(self, label, n_batch, n_cls, n_per):
        self.n_batch = n_batch
        self.n_cls = n_cls
        self.n_per = n_per

        label = np.array(label)
        self.m_ind = []
        for i in range(max(label) + 1):
            ind = np.argwhere(label == i).reshape(-1)
            ind = torch.from_numpy(ind)
            self.m_ind.append(ind)

    def __len__(self):
        return self.n_batch

    def __iter__(self):
        for i_batch in range(self.n_batch):
            batch = []
            classes = torch.randperm(len(self.m_ind))[:self.n_cls]
            for c in classes:
                l = self.m_ind[c]
                pos = torch.randperm(len(l))[:self.n_per]
                batch.append(l[pos])
            batch = torch.stack(batch).t().reshape(-1)
            yield batch


# ---- utils.py ---------------------------------------------------------------------------------------------------

class Averager:

    def __init__(self):
        self.n = 0
        self.v = 0

    def add(self, x):
        self.v = (self.v * self.n + x) / (self.n + 1)
        self.n += 1

    def item(self):
        return self.v


def count_acc(logits, label):
    pred = torch.argmax(logits, dim=1)
    return (pred == label).float().mean().item()  # (port) .type(torch.cuda.FloatTensor)


def euclidean_metric(a, b, bug=None):
    n = a.shape[0]
    m = b.shape[0]
    a = a.unsqueeze(1).expand(n, m, -1)
    b = b.unsqueeze(0).expand(n, m, -1)
    if bug == "distance_sign_flipped":
        return ((a - b)**2).sum(dim=2)
    logits = -((a - b)**2).sum(dim=2)
    return logits


# ---- mini_imagenet.py (synthetic images in place of the files) ----------------------------------------------------

_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def _synthetic_split(gen, n_cls, n_img, size=28):
    images, labels = [], []
    for c in range(n_cls):
        base = 0.5 + 0.2 * (torch.rand(3, 4, 4, generator=gen) - 0.5)
        pattern = F.interpolate(base[None], size=(size + 4, size + 4), mode="bilinear", align_corners=False)[0]
        for _ in range(n_img):
            dy, dx = torch.randint(0, 5, (2,), generator=gen).tolist()
            img = pattern[:, dy:dy + size, dx:dx + size] + 0.3 * torch.randn(3, size, size, generator=gen)
            images.append(img.clamp(0, 1))
            labels.append(c)
    return images, labels


class MiniImageNet(Dataset):

    def __init__(self, setname, gen):
        n_cls = 40 if setname == 'train' else 16  # (port) the csv files' 64 / 16 classes of 600 images
        self.data, self.label = _synthetic_split(gen, n_cls, 30)
        # (port) Resize(84), CenterCrop(84), ToTensor: the images are made at 28x28 in [0, 1]
        self.transform = lambda image: (image - _MEAN) / _STD  # transforms.Normalize(ImageNet mean, std)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        image, label = self.data[i], self.label[i]
        image = self.transform(image)
        return image, label


# ---- train.py ---------------------------------------------------------------------------------------------------

class Args:
    max_epoch = 200
    save_epoch = 20
    shot = 1
    query = 5  # (port) 15
    train_way = 10  # (port) 30
    test_way = 5


def _build(seed, bug=None):
    args = Args()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    trainset = MiniImageNet('train', gen)
    train_sampler = CategoriesSampler(trainset.label, 100,
                                      args.train_way, args.shot + args.query)
    train_loader = DataLoader(dataset=trainset, batch_sampler=train_sampler)

    valset = MiniImageNet('val', gen)
    val_sampler = CategoriesSampler(valset.label, 20,  # (port) 400
                                    args.test_way, args.shot + args.query)
    val_loader = DataLoader(dataset=valset, batch_sampler=val_sampler)

    model = Convnet()

    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)

    def train_labels():
        if bug == "labels_repeat_interleaved":
            return torch.arange(args.train_way).repeat_interleave(args.query)
        return torch.arange(args.train_way).repeat(args.query)

    st = {"it": None, "epoch": 0, "tl": None, "ta": None}

    def train_step():
        if st["it"] is None:  # for epoch in range(1, args.max_epoch + 1):
            st["epoch"] += 1
            lr_scheduler.step()
            model.train()
            st["tl"], st["ta"] = Averager(), Averager()
            st["it"] = iter(train_loader)
        try:
            batch = next(st["it"])
        except StopIteration:
            st["it"] = None
            return train_step()
        tl, ta = st["tl"], st["ta"]

        data, _ = [_ for _ in batch]
        p = args.shot * args.train_way
        data_shot, data_query = data[:p], data[p:]

        proto = model(data_shot)
        proto = proto.reshape(args.shot, args.train_way, -1).mean(dim=0)

        label = train_labels()
        label = label.type(torch.LongTensor)

        logits = euclidean_metric(model(data_query), proto, bug=bug)
        loss = F.cross_entropy(logits, label)
        acc = count_acc(logits, label)

        tl.add(loss.item())
        ta.add(acc)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        return loss.item()

    def eval_fn(model, _batch=None):
        model.eval()

        vl = Averager()
        va = Averager()

        with torch.no_grad():
            for i, batch in enumerate(val_loader, 1):
                data, _ = [_ for _ in batch]
                p = args.shot * args.test_way
                data_shot, data_query = data[:p], data[p:]

                proto = model(data_shot)
                proto = proto.reshape(args.shot, args.test_way, -1).mean(dim=0)

                label = torch.arange(args.test_way).repeat(args.query)
                label = label.type(torch.LongTensor)

                logits = euclidean_metric(model(data_query), proto, bug=bug)
                loss = F.cross_entropy(logits, label)
                acc = count_acc(logits, label)

                vl.add(loss.item())
                va.add(acc)
        model.train()  # (port) the next epoch's model.train()
        return va.item()

    def loss_fn(embeddings, label):
        p = args.shot * args.train_way
        proto = embeddings[:p].reshape(args.shot, args.train_way, -1).mean(dim=0)
        logits = euclidean_metric(embeddings[p:], proto, bug=bug)
        return F.cross_entropy(logits, label)

    # the Program's batch: one training episode (support then queries) and its query labels
    first = torch.stack([trainset[int(i)][0] for i in next(iter(CategoriesSampler(
        trainset.label, 1, args.train_way, args.shot + args.query)))])
    torch.manual_seed(seed)
    return Program(name="cyviusprotonet_miniimagenet", model=model, batch=(first, train_labels()), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the query labels built with repeat_interleave (classic: class-major labels for the sampler's query-major
    # batch, whose transpose puts one image of every class after another).
    Bug("labels_repeat_interleaved", functools.partial(_build, bug="labels_repeat_interleaved"), "learning_ledger",
        ("TASK",)),
    # the squared distance used as the logit without its minus sign (classic): the nearest prototype gets the
    # lowest score.
    Bug("distance_sign_flipped", functools.partial(_build, bug="distance_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped (classic): gradients accumulate across episodes.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
