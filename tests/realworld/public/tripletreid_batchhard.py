"""Person re-identification with the batch-hard triplet loss, as trained by CoinCheung/triplet-reid-pytorch's
``train.py``: a ResNet-50-shaped ``EmbedNetwork`` (the repository's own Bottleneck layers, last stage at stride 1,
global average pooling, a Linear + BatchNorm1d + ReLU head and a linear embedding), P x K batches from
``BatchSampler`` (18 identities x 4 images), ``BatchHardTripletSelector`` (hardest positive and hardest negative per
anchor from the detached distance matrix), the soft-margin ``TripletLoss`` (``SoftMarginLoss(an - ap, 1)``) and
``AdamOptimWrapper`` (Adam lr 3e-4; at t0 the betas become (0.5, 0.999) and the rate decays exponentially to a
thousandth at t1); ``net.train()`` each iteration.

Source: https://github.com/CoinCheung/triplet-reid-pytorch
Commit: b32f5df1084c70aeceb5084001f242dce31d0ebb
Files: train.py, backbone.py, loss.py, triplet_selector.py, batch_sampler.py, optimizer.py, utils.py,
  random_erasing.py, datasets/Market1501.py, eval.py
License: Apache-2.0 (the repository's LICENSE file; no copyright line, repository owner CoinCheung)
Domain: metric learning (batch-hard triplet loss, person re-identification)

Deviations from the original:
- sizes (the dataset, sampler, optimizer wrapper and RandomErasing are in the helper ``_tripletreid_lib.py``): the
  Bottleneck widths divided by 8 (mid channels 64/128/256/512 -> 8/16/32/64, so 2048 -> 256 pooled
  features) and one block per stage (3/4/6/3 -> 1/1/1/1), head 2048 -> 1024 becomes 256 -> 64, embedding dims
  128 -> 32; the stem (torchvision ``resnet50().conv1/bn1/relu/maxpool``, written out as the same layers) keeps
  its 7x7 stride-2 conv with 64 -> 8 channels; P x K 18 x 4 -> 6 x 4; images 256 x 128 -> 32 x 16;
  t0 15000 -> 150 and t1 25000 -> 250 steps; lr 3e-4 -> 1e-3 (30 steps instead of 25000);
- no pretrained ResNet-50 weights can be downloaded (``pretrained_base=False``); the head and embedding keep the
  script's Kaiming initialization;
- data: Market-1501 is replaced by synthetic "people" made from ``seed``: 36 identities, 8 images each, each
  identity a top colour and a bottom colour with a random vertical offset and noise, drawn at 36 x 18 (2 more
  images per identity held out as queries); camera ids 1-6 drawn at random. The training transform (Resize(288, 144), RandomCrop(256, 128), RandomHorizontalFlip,
  ToTensor, Normalize, RandomErasing(0.5)) is written in plain torch as a random 32 x 16 crop, a flip, the same
  Normalize and the repository's ``RandomErasing`` (torchvision is not here); no worker processes;
- ``pdist_torch``'s deprecated ``addmm_(1, -2, a, b)`` is written ``addmm_(a, b, beta=1, alpha=-2)``;
- one ``train_step`` is one iteration of the ``while True`` loop; logging and the model dump are left out;
  ``eval_fn`` is ``eval.py``'s rank-1 (CMC top-1) of held-out query images against a gallery, under ``eval()`` and
  ``no_grad``, without the same-camera filtering.
"""
# ruff: noqa: UP008, PLR0402, UP004

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _tripletreid_lib import AdamOptimWrapper, BatchSampler, Market1501, make_people

N_IDS, PER_ID, N_QUERY, N_CLASS, N_NUM = 36, 8, 2, 6, 4
LR, T0, T1, WIDTH = 1e-3, 150, 250, 8


# ---- backbone.py --------------------------------------------------------------------------------------------------

class EmbedNetwork(nn.Module):
    def __init__(self, dims = 32, pretrained_base = False, *args, **kwargs):
        super(EmbedNetwork, self).__init__(*args, **kwargs)
        self.pretrained_base = pretrained_base

        # resnet50 = torchvision.models.resnet50(): its stem, written out (64 -> 8 channels)
        self.conv1 = nn.Conv2d(3, WIDTH, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = create_layer(WIDTH, WIDTH, 1, stride=1)
        self.layer2 = create_layer(4 * WIDTH, 2 * WIDTH, 1, stride=2)
        self.layer3 = create_layer(8 * WIDTH, 4 * WIDTH, 1, stride=2)
        self.layer4 = create_layer(16 * WIDTH, 8 * WIDTH, 1, stride=1)

        self.fc_head = DenseNormReLU(in_feats = 32 * WIDTH, out_feats = 64)
        self.embed = nn.Linear(in_features = 64, out_features = dims)

        for el in self.fc_head.children():
            if isinstance(el, nn.Linear):
                nn.init.kaiming_normal_(el.weight, a=1)
                nn.init.constant_(el.bias, 0)

        nn.init.kaiming_normal_(self.embed.weight, a=1)
        nn.init.constant_(self.embed.bias, 0)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = F.avg_pool2d(x, x.size()[2:])
        x = x.contiguous().view(-1, 32 * WIDTH)
        x = self.fc_head(x)
        x = self.embed(x)
        return x


class Bottleneck(nn.Module):
    def __init__(self, in_chan, mid_chan, stride=1, stride_at_1x1=False, *args, **kwargs):
        super(Bottleneck, self).__init__(*args, **kwargs)

        stride1x1, stride3x3 = (stride, 1) if stride_at_1x1 else (1, stride)

        out_chan = 4 * mid_chan
        self.conv1 = nn.Conv2d(in_chan, mid_chan, kernel_size=1, stride=stride1x1,
                bias=False)
        self.bn1 = nn.BatchNorm2d(mid_chan)
        self.conv2 = nn.Conv2d(mid_chan, mid_chan, kernel_size=3, stride=stride3x3,
                padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid_chan)
        self.conv3 = nn.Conv2d(mid_chan, out_chan, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_chan)
        self.relu = nn.ReLU(inplace=True)

        self.downsample = None
        if in_chan != out_chan or stride != 1:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_chan, out_chan, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_chan))

    def forward(self, x):
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample == None:
            residual = x
        else:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


def create_layer(in_chan, mid_chan, b_num, stride):
    out_chan = mid_chan * 4
    blocks = [Bottleneck(in_chan, mid_chan, stride=stride),]
    for _i in range(1, b_num):
        blocks.append(Bottleneck(out_chan, mid_chan, stride=1))
    return nn.Sequential(*blocks)


class DenseNormReLU(nn.Module):
    def __init__(self, in_feats, out_feats, *args, **kwargs):
        super(DenseNormReLU, self).__init__(*args, **kwargs)
        self.dense = nn.Linear(in_features = in_feats, out_features = out_feats)
        self.bn = nn.BatchNorm1d(out_feats)
        self.relu = nn.ReLU(inplace = True)

    def forward(self, x):
        x = self.dense(x)
        x = self.bn(x)
        x = self.relu(x)
        return x


# ---- loss.py, utils.py, triplet_selector.py -----------------------------------------------------------------------

class TripletLoss(nn.Module):
    '''
    Compute normal triplet loss or soft margin triplet loss given triplets
    '''
    def __init__(self, margin = None):
        super(TripletLoss, self).__init__()
        self.margin = margin
        if self.margin is None:  # use soft-margin
            self.Loss = nn.SoftMarginLoss()
        else:
            self.Loss = nn.TripletMarginLoss(margin = margin, p = 2)

    def forward(self, anchor, pos, neg):
        if self.margin is None:
            num_samples = anchor.shape[0]
            y = torch.ones((num_samples, 1)).view(-1)
            ap_dist = torch.norm(anchor - pos, 2, dim = 1).view(-1)
            an_dist = torch.norm(anchor - neg, 2, dim = 1).view(-1)
            loss = self.Loss(an_dist - ap_dist, y)
        else:
            loss = self.Loss(anchor, pos, neg)

        return loss


def pdist(emb1, emb2):
    '''
    compute the eucilidean distance matrix between embeddings1 and embeddings2
    '''
    m, n = emb1.shape[0], emb2.shape[0]
    emb1_pow = torch.pow(emb1, 2).sum(dim = 1, keepdim = True).expand(m, n)
    emb2_pow = torch.pow(emb2, 2).sum(dim = 1, keepdim = True).expand(n, m).t()
    dist_mtx = emb1_pow + emb2_pow
    dist_mtx = dist_mtx.addmm_(emb1, emb2.t(), beta=1, alpha=-2)
    dist_mtx = dist_mtx.clamp(min = 1e-12).sqrt()
    return dist_mtx


class BatchHardTripletSelector(object):
    '''
    a selector to generate hard batch embeddings from the embedded batch
    '''
    def __init__(self, bug=None, *args, **kwargs):
        super(BatchHardTripletSelector, self).__init__()
        self.bug = bug

    def __call__(self, embeds, labels):
        dist_mtx = pdist(embeds, embeds).detach().cpu().numpy()
        labels = labels.contiguous().cpu().numpy().reshape((-1, 1))
        num = labels.shape[0]
        dia_inds = np.diag_indices(num)
        lb_eqs = labels == labels.T
        lb_eqs[dia_inds] = False
        dist_same = dist_mtx.copy()
        dist_same[lb_eqs == False] = -np.inf
        pos_idxs = np.argmax(dist_same, axis = 1)
        dist_diff = dist_mtx.copy()
        if self.bug != "anchor_chosen_as_negative":  # without it the anchor itself (distance ~0) is the hardest negative
            lb_eqs[dia_inds] = True
        dist_diff[lb_eqs == True] = np.inf
        neg_idxs = np.argmin(dist_diff, axis = 1)
        pos = embeds[pos_idxs].contiguous().view(num, -1)
        neg = embeds[neg_idxs].contiguous().view(num, -1)
        return embeds, pos, neg


# ---- train.py, eval.py --------------------------------------------------------------------------------------------

def _make_eval(imgs, lbs, cams, query_imgs, query_lbs):
    gallery = Market1501(imgs, lbs, cams, is_train = False)
    gallery_batch = (torch.stack([gallery.trans(im) for im in imgs]), torch.tensor(lbs))
    query = Market1501(query_imgs, query_lbs, [1] * len(query_lbs), is_train = False)
    query_batch = (torch.stack([query.trans(im) for im in query_imgs]), torch.tensor(query_lbs))

    def eval_fn(model, batch=None):
        """eval.py's CMC rank-1: each query's nearest gallery embedding has its identity."""
        (q, q_lb), (g, g_lb) = query_batch if batch is None else batch, gallery_batch
        model.eval()
        with torch.no_grad():
            dist_mtx = pdist(model(q), model(g)).numpy()
        model.train()
        indices = np.argsort(dist_mtx, axis = 1)
        return float((g_lb.numpy()[indices[:, 0]] == q_lb.numpy()).mean())

    return eval_fn


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    all_imgs, all_lbs, all_cams = make_people(gen, N_IDS, PER_ID + N_QUERY)
    train = [i for i in range(len(all_lbs)) if i % (PER_ID + N_QUERY) < PER_ID]
    held = [i for i in range(len(all_lbs)) if i % (PER_ID + N_QUERY) >= PER_ID]  # unseen views: the queries
    imgs, lbs, cams = all_imgs[train], [all_lbs[i] for i in train], [all_cams[i] for i in train]
    query_imgs, query_lbs = all_imgs[held], [all_lbs[i] for i in held]
    ds = Market1501(imgs, lbs, cams, is_train = True)

    net = EmbedNetwork()
    triplet_loss = TripletLoss(margin = None) # no margin means soft-margin
    optim = AdamOptimWrapper(net.parameters(), lr = LR, wd = 0, t0 = T0, t1 = T1)
    selector = BatchHardTripletSelector(bug=bug)
    sampler = BatchSampler(ds, N_CLASS, N_NUM)
    dl = DataLoader(ds, batch_sampler = sampler, num_workers = 0)
    state = {"diter": iter(dl)}

    def train_step():
        try:
            imgs, lbs, cams = next(state["diter"])
        except StopIteration:
            state["diter"] = iter(dl)
            imgs, lbs, cams = next(state["diter"])
        if bug == "camera_ids_as_labels":  # `imgs, _, lbs = next(diter)`: the camera ids taken for identities
            lbs = cams

        net.train()
        embds = net(imgs)
        anchor, positives, negatives = selector(embds, lbs)

        loss = triplet_loss(anchor, positives, negatives)
        if bug != "zero_grad_after_backward":
            optim.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optim.zero_grad()
        optim.step()
        return loss.detach()

    def loss_fn(embds, lbs):
        return triplet_loss(*BatchHardTripletSelector()(embds, lbs))

    eval_fn = _make_eval(imgs, lbs, cams, query_imgs, query_lbs)

    first = next(iter(DataLoader(ds, batch_sampler = BatchSampler(ds, N_CLASS, N_NUM))))
    return Program(name="tripletreid_batchhard", model=net, batch=(first[0], first[1]), loss_fn=loss_fn,
                   optimizer=optim.optim, train_step=train_step, eval_fn=eval_fn, loader=dl)


build = functools.partial(_build)

BUGS = [
    # `lb_eqs[dia_inds] = True` left out before the negatives are masked: each anchor's own distance (~0) is the
    # smallest "different identity" one, so the anchor is its own hardest negative and the loss only pulls positives.
    Bug("anchor_chosen_as_negative", functools.partial(_build, bug="anchor_chosen_as_negative"), "learning_ledger",
        ("OBJECTIVE",)),
    # the dataset's (img, id, cam) unpacked as (img, _, id): the camera ids, unrelated to identity, become labels.
    Bug("camera_ids_as_labels", functools.partial(_build, bug="camera_ids_as_labels"), "learning_ledger", ("TASK",)),
    # optim.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
