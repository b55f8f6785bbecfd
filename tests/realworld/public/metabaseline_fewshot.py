"""Meta-Baseline few-shot classification (Chen et al., "Meta-Baseline: Exploring Simple Meta-Learning for Few-Shot
Learning"), Yinbo Chen's few-shot-meta-baseline: the meta stage, an encoder whose query features are scored by cosine
similarity to the mean of each way's shot features, times a learnable temperature (10), cross-entropy over the ways
of each episode; episodes drawn by ``CategoriesSampler`` (several episodes per batch), SGD momentum 0.9 with weight
decay.

Source: https://github.com/yinboc/few-shot-meta-baseline
Commit: 779fae39dad3537e7c801049c858923e2a352dfe
Files: ``train_meta.py``, ``models/meta_baseline.py``, ``models/convnet4.py``, ``models/models.py``,
``utils/__init__.py``, ``utils/few_shot.py``, ``datasets/samplers.py``, ``datasets/mini_imagenet.py``,
``configs/train_meta_mini.yaml``
License: MIT (Copyright (c) 2020 Yinbo Chen; full text in LICENSES/yinboc-few-shot-meta-baseline.txt)
Domain: few-shot / meta-learning (episodic training of a cosine nearest-centroid classifier)

Kept as written: ``MetaBaseline`` (encoder on shot and query images together, shot features averaged over the shot
axis, both normalized, ``compute_logits`` with the 'dot' metric times ``self.temp``, a ``nn.Parameter`` at 10),
``ConvNet4`` (four conv-BN-ReLU-maxpool blocks, the repository's own encoder option), ``split_shot_query``,
``make_nk_label``, ``compute_acc``, ``CategoriesSampler`` (classes and examples drawn with ``np.random``, batches of
``ep_per_batch`` episodes, class-major), ``make_optimizer`` (SGD momentum 0.9 with weight decay; no milestones, so no
scheduler), the configuration of ``train_meta_mini.yaml`` (5-way 1-shot, ``ep_per_batch`` 4, lr 0.001 raised as
below, weight decay 5e-4), the train loop body (split, labels, ``model(x_shot, x_query).view(-1, n_train_way)``,
``F.cross_entropy``, zero_grad / backward / step) and the evaluation (``model.eval()``, episodes of the validation
classes, ``np.random.seed(0)``, loss and accuracy under ``no_grad``).

Deviations from the original:
- mini-ImageNet's pickles are not here: the datasets are synthetic 3x16x16 images made from ``seed`` (each class a
  smooth random pattern, each image that pattern shifted by up to two pixels with pixel noise), 24 training and 8
  validation classes of 20 images each; ``MiniImageNet``'s ``ToTensor`` + ``Normalize`` with the ImageNet mean/std
  is kept (on tensors already in [0, 1]), ``Resize(80)`` is dropped (the images are 16x16);
- the configuration's encoder is ResNet-12, initialized from the classifier stage's checkpoint (``load_encoder``);
  here the repository's ``convnet4`` encoder (``hid_dim`` 64 -> 32, ``z_dim`` 64 -> 32) starts from random weights, so
  the classifier stage is not run; sizes for 2 CPU cores: ``n_query`` 15 -> 5, ``ep_per_batch`` 4 -> 2, validation
  episodes 200 -> 4; lr 0.001 -> 0.01 so the 30 steps of the self-check show learning from scratch;
- the DataLoader runs without workers or pinned memory; ``.cuda()`` is dropped (CPU); tensorboard, logging, timers,
  checkpoints and the tval split are dropped; ``models.make``/``datasets.make`` registries are replaced by direct
  construction;
- one ``train_step`` is one iteration of the train loop (a new epoch, with ``np.random.seed(epoch)``, starts when
  the loader runs out), returning the loss; ``eval_fn`` is the validation pass returning the mean loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, B006, UP039, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import SGD, Adam
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16  # (port) image_size 80


# ------------------------------------------------------------------------------------------ models/convnet4.py
def conv_block(in_channels, out_channels):
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(2)
    )


class ConvNet4(nn.Module):

    def __init__(self, x_dim=3, hid_dim=64, z_dim=64):
        super().__init__()
        self.encoder = nn.Sequential(
            conv_block(x_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, z_dim),
        )
        self.out_dim = 1600

    def forward(self, x):
        x = self.encoder(x)
        return x.view(x.shape[0], -1)


# --------------------------------------------------------------------------------------- utils/__init__.py
def compute_logits(feat, proto, metric='dot', temp=1.0):
    assert feat.dim() == proto.dim()

    if feat.dim() == 2:
        if metric == 'dot':
            logits = torch.mm(feat, proto.t())
        elif metric == 'cos':
            logits = torch.mm(F.normalize(feat, dim=-1),
                              F.normalize(proto, dim=-1).t())
        elif metric == 'sqr':
            logits = -(feat.unsqueeze(1) -
                       proto.unsqueeze(0)).pow(2).sum(dim=-1)

    elif feat.dim() == 3:
        if metric == 'dot':
            logits = torch.bmm(feat, proto.permute(0, 2, 1))
        elif metric == 'cos':
            logits = torch.bmm(F.normalize(feat, dim=-1),
                               F.normalize(proto, dim=-1).permute(0, 2, 1))
        elif metric == 'sqr':
            logits = -(feat.unsqueeze(2) -
                       proto.unsqueeze(1)).pow(2).sum(dim=-1)

    return logits * temp


def compute_acc(logits, label, reduction='mean'):
    ret = (torch.argmax(logits, dim=1) == label).float()
    if reduction == 'none':
        return ret.detach()
    elif reduction == 'mean':
        return ret.mean().item()


def make_optimizer(params, name, lr, weight_decay=None, milestones=None):
    if weight_decay is None:
        weight_decay = 0.
    if name == 'sgd':
        optimizer = SGD(params, lr, momentum=0.9, weight_decay=weight_decay)
    elif name == 'adam':
        optimizer = Adam(params, lr, weight_decay=weight_decay)
    if milestones:
        lr_scheduler = MultiStepLR(optimizer, milestones)
    else:
        lr_scheduler = None
    return optimizer, lr_scheduler


# -------------------------------------------------------------------------------------- utils/few_shot.py
def split_shot_query(data, way, shot, query, ep_per_batch=1, bug=None):
    img_shape = data.shape[1:]
    if bug == "episodes_viewed_shot_major":
        data = data.view(ep_per_batch, shot + query, way, *img_shape).transpose(1, 2)
    else:
        data = data.view(ep_per_batch, way, shot + query, *img_shape)
    x_shot, x_query = data.split([shot, query], dim=2)
    x_shot = x_shot.contiguous()
    x_query = x_query.contiguous().view(ep_per_batch, way * query, *img_shape)
    return x_shot, x_query


def make_nk_label(n, k, ep_per_batch=1, bug=None):
    if bug == "labels_way_interleaved":
        label = torch.arange(n).repeat(k)
    else:
        label = torch.arange(n).unsqueeze(1).expand(n, k).reshape(-1)
    label = label.repeat(ep_per_batch)
    return label


# ------------------------------------------------------------------------------------ models/meta_baseline.py
class MetaBaseline(nn.Module):

    def __init__(self, encoder, encoder_args={}, method='cos',
                 temp=10., temp_learnable=True):
        super().__init__()
        self.encoder = encoder(**encoder_args)  # (port) models.make(encoder, **encoder_args)
        self.method = method

        if temp_learnable:
            self.temp = nn.Parameter(torch.tensor(temp))
        else:
            self.temp = temp

    def forward(self, x_shot, x_query):
        shot_shape = x_shot.shape[:-3]
        query_shape = x_query.shape[:-3]
        img_shape = x_shot.shape[-3:]

        x_shot = x_shot.view(-1, *img_shape)
        x_query = x_query.view(-1, *img_shape)
        x_tot = self.encoder(torch.cat([x_shot, x_query], dim=0))
        x_shot, x_query = x_tot[:len(x_shot)], x_tot[-len(x_query):]
        x_shot = x_shot.view(*shot_shape, -1)
        x_query = x_query.view(*query_shape, -1)

        if self.method == 'cos':
            x_shot = x_shot.mean(dim=-2)
            x_shot = F.normalize(x_shot, dim=-1)
            x_query = F.normalize(x_query, dim=-1)
            metric = 'dot'
        elif self.method == 'sqr':
            x_shot = x_shot.mean(dim=-2)
            metric = 'sqr'

        logits = compute_logits(
                x_query, x_shot, metric=metric, temp=self.temp)
        return logits


# -------------------------------------------------------------------------------------- datasets/samplers.py
class CategoriesSampler():

    def __init__(self, label, n_batch, n_cls, n_per, ep_per_batch=1):
        self.n_batch = n_batch
        self.n_cls = n_cls
        self.n_per = n_per
        self.ep_per_batch = ep_per_batch

        label = np.array(label)
        self.catlocs = []
        for c in range(max(label) + 1):
            self.catlocs.append(np.argwhere(label == c).reshape(-1))

    def __len__(self):
        return self.n_batch

    def __iter__(self):
        for i_batch in range(self.n_batch):
            batch = []
            for i_ep in range(self.ep_per_batch):
                episode = []
                classes = np.random.choice(len(self.catlocs), self.n_cls,
                                           replace=False)
                for c in classes:
                    l = np.random.choice(self.catlocs[c], self.n_per,
                                         replace=False)
                    episode.append(torch.from_numpy(l))
                episode = torch.stack(episode)
                batch.append(episode)
            batch = torch.stack(batch) # bs * n_cls * n_per
            yield batch.view(-1)


# ------------------------------------------------------------- datasets/mini_imagenet.py (port: synthetic images)
class MiniImageNet(Dataset):

    def __init__(self, data, label):
        self.data = data
        self.label = label
        self.n_classes = max(self.label) + 1

        norm_params = {'mean': [0.485, 0.456, 0.406],
                       'std': [0.229, 0.224, 0.225]}
        mean = torch.tensor(norm_params['mean']).view(3, 1, 1)
        std = torch.tensor(norm_params['std']).view(3, 1, 1)
        self.transform = lambda x: (x - mean) / std  # (port) ToTensor + Normalize

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.label[i]


def synthetic_split(gen, n_classes, per_class):
    """Smooth random class patterns in [0, 1], each image the pattern shifted by up to 2 pixels, with noise."""
    coarse = torch.rand(n_classes, 3, 4, 4, generator=gen)
    patterns = F.interpolate(coarse, size=(IMG, IMG), mode='bilinear', align_corners=False)
    data, label = [], []
    for c in range(n_classes):
        for _ in range(per_class):
            dx, dy = torch.randint(-2, 3, (2,), generator=gen).tolist()
            img = torch.roll(patterns[c], shifts=(dx, dy), dims=(1, 2))
            img = (img + 0.1 * torch.randn(img.shape, generator=gen)).clamp(0, 1)
            data.append(img)
            label.append(c)
    return data, label


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = {
        'model': 'meta-baseline', 'model_args': {'encoder': 'convnet4',
                                                 'encoder_args': {'hid_dim': 32, 'z_dim': 32}},
        'n_way': 5, 'n_shot': 1, 'n_query': 5, 'train_batches': 200, 'ep_per_batch': 2,  # (port) 15, 4
        'max_epoch': 20, 'optimizer': 'sgd', 'optimizer_args': {'lr': 0.01, 'weight_decay': 5.e-4},  # (port) 0.001
    }

    #### Dataset ####

    n_way, n_shot = config['n_way'], config['n_shot']
    n_query = config['n_query']
    n_train_way = n_way
    n_train_shot = n_shot
    ep_per_batch = config['ep_per_batch']

    train_dataset = MiniImageNet(*synthetic_split(gen, 24, 20))
    train_sampler = CategoriesSampler(
            train_dataset.label, config['train_batches'],
            n_train_way, n_train_shot + n_query,
            ep_per_batch=ep_per_batch)
    train_loader = DataLoader(train_dataset, batch_sampler=train_sampler,
                              num_workers=0)

    val_dataset = MiniImageNet(*synthetic_split(gen, 8, 20))
    val_sampler = CategoriesSampler(
            val_dataset.label, 4,  # (port) 200
            n_way, n_shot + n_query,
            ep_per_batch=4)
    val_loader = DataLoader(val_dataset, batch_sampler=val_sampler,
                            num_workers=0)

    #### Model and optimizer ####

    model = MetaBaseline(ConvNet4, **{k: v for k, v in config['model_args'].items() if k != 'encoder'})

    optimizer, lr_scheduler = make_optimizer(
            model.parameters(),
            config['optimizer'], **config['optimizer_args'])

    st = {"epoch": 0, "it": None}

    def train_step():
        if st["it"] is None:
            st["epoch"] += 1
            model.train()
            np.random.seed(st["epoch"])
            st["it"] = iter(train_loader)
        try:
            data, _ = next(st["it"])
        except StopIteration:
            st["it"] = None
            return train_step()
        x_shot, x_query = split_shot_query(
                data, n_train_way, n_train_shot, n_query,
                ep_per_batch=ep_per_batch, bug=bug)
        label = make_nk_label(n_train_way, n_query,
                ep_per_batch=ep_per_batch, bug=bug)

        logits = model(x_shot, x_query).view(-1, n_train_way)
        loss = F.cross_entropy(logits, label)
        acc = compute_acc(logits, label)  # noqa: F841

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # eval
        was_training = model.training
        model.eval()
        state = np.random.get_state()
        np.random.seed(0)
        losses = []
        for data, _ in val_loader:
            x_shot, x_query = split_shot_query(
                    data, n_way, n_shot, n_query,
                    ep_per_batch=4, bug=bug)
            label = make_nk_label(n_way, n_query,
                    ep_per_batch=4, bug=bug)

            with torch.no_grad():
                logits = model(x_shot, x_query).view(-1, n_way)
                loss = F.cross_entropy(logits, label)
            losses.append(loss.item())
        np.random.set_state(state)
        model.train(was_training)
        return float(np.mean(losses))

    def loss_fn(logits, label):
        return F.cross_entropy(logits.view(-1, n_train_way), label)

    # the Program's batch: one training episode batch, drawn with a fixed seed
    state = np.random.get_state()
    np.random.seed(seed + 1000)
    data, _ = next(iter(train_loader))
    np.random.set_state(state)
    x_shot, x_query = split_shot_query(data, n_train_way, n_train_shot, n_query, ep_per_batch=ep_per_batch, bug=bug)
    label = make_nk_label(n_train_way, n_query, ep_per_batch=ep_per_batch, bug=bug)

    return Program(name="metabaseline_fewshot", model=model, batch=((x_shot, x_query), label), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # make_nk_label written as arange(n).repeat(k): the labels cycle over the ways while the sampler's episodes are
    # class-major, so most query labels name another way (classic).
    Bug("labels_way_interleaved", functools.partial(_build, bug="labels_way_interleaved"), "learning_ledger",
        ("TASK",)),
    # split_shot_query viewing the class-major batch as shot-major: "shots" and "queries" of a way come from several
    # classes (classic view-order slip).
    Bug("episodes_viewed_shot_major", functools.partial(_build, bug="episodes_viewed_shot_major"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() after loss.backward(): every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
