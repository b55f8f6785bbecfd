"""Prototypical Networks for few-shot classification (Snell et al.), orobix's PyTorch implementation: a 4-block
conv-bn-relu-pool encoder, episodes drawn by ``PrototypicalBatchSampler`` (``classes_per_it`` classes x
``num_support + num_query`` samples, shuffled), ``prototypical_loss`` (class prototypes = mean support embedding,
squared euclidean distances of the queries to the prototypes, ``log_softmax(-dists)``, mean NLL of the true class),
Adam lr 1e-3, StepLR(gamma 0.5, step 20) stepped per epoch.

Source: https://github.com/orobix/Prototypical-Networks-for-Few-shot-Learning-PyTorch
Commit: df89808d708637b769a41f27416b911758b8efb7
Files: src/train.py, src/protonet.py, src/prototypical_loss.py, src/prototypical_batch_sampler.py,
src/parser_util.py, src/omniglot_dataset.py
License: MIT (Copyright (c) 2018 Daniele Ciriello; full text in
LICENSES/orobix-Prototypical-Networks-for-Few-shot-Learning-PyTorch.txt)
Domain: meta-learning, few-shot classification (metric-based episodes)

Deviations from the original:
- sizes: hid_dim/z_dim 64 -> 16; classes_per_it_tr 60 -> 5 (num_support_tr 5, num_query_tr 5 unchanged);
  iterations (episodes per epoch) 100 -> 10;
- data: Omniglot (downloaded, rotated by 0/90/180/270 degrees into extra classes, resized to 28x28) is replaced by
  synthetic 28x28 "characters" made from ``seed``: 40 classes, each a random stroke template, 20 samples per class
  made by shifting the template by up to 2 pixels and adding noise; the dataset is a plain class with the same
  ``y`` attribute and ``__getitem__`` the sampler and loader use (no download, no rotation classes);
- ``.to(device)`` / CUDA seeding dropped (CPU only); ``init_seed`` is ``torch.manual_seed(seed)`` / ``np.random.seed``;
- one ``train_step`` is one episode of the epoch loop's body (zero_grad, forward, ``loss_fn``, backward, step),
  with the epoch's ``model.train()`` repeated at each step (the validation loop leaves the model in eval mode); at the
  end of every ``iterations`` steps the epoch's ``lr_scheduler.step()`` runs; tqdm, printing, the per-epoch averages,
  checkpoint saving and the validation/test loops are left out; ``eval_fn`` is the validation loop's body on one
  episode (model.eval(), accuracy from ``loss_fn``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402, C417, TRY002, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# parser_util.py defaults (sizes shrunk, see the docstring)
learning_rate = 0.001
lr_scheduler_step = 20
lr_scheduler_gamma = 0.5
iterations = 10
classes_per_it_tr = 5
num_support_tr = 5
num_query_tr = 5
classes_per_it_val = 5
num_support_val = 5
num_query_val = 5
HID = 16


# ---- src/protonet.py ------------------------------------------------------------------------------------------

def conv_block(in_channels, out_channels):
    '''
    returns a block conv-bn-relu-pool
    '''
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(2)
    )


class ProtoNet(nn.Module):
    '''
    Model as described in the reference paper,
    source: https://github.com/jakesnell/prototypical-networks/blob/f0c48808e496989d01db59f86d4449d7aee9ab0c/protonets/models/few_shot.py#L62-L84
    '''
    def __init__(self, x_dim=1, hid_dim=64, z_dim=64):
        super(ProtoNet, self).__init__()
        self.encoder = nn.Sequential(
            conv_block(x_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, hid_dim),
            conv_block(hid_dim, z_dim),
        )

    def forward(self, x):
        x = self.encoder(x)
        return x.view(x.size(0), -1)


# ---- src/prototypical_loss.py ----------------------------------------------------------------------------------

def euclidean_dist(x, y):
    '''
    Compute euclidean distance between two tensors
    '''
    # x: N x D
    # y: M x D
    n = x.size(0)
    m = y.size(0)
    d = x.size(1)
    if d != y.size(1):
        raise Exception

    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)

    return torch.pow(x - y, 2).sum(2)


def prototypical_loss(input, target, n_support, bug=None):
    '''
    Compute the barycentres by averaging the features of n_support
    samples for each class in target, computes then the distances from each
    samples' features to each one of the barycentres, computes the
    log_probability for each n_query samples for each one of the current
    classes, of appartaining to a class c, loss and accuracy are then computed
    and returned
    '''
    target_cpu = target.to('cpu')
    input_cpu = input.to('cpu')

    def supp_idxs(c):
        # FIXME when torch will support where as np
        return target_cpu.eq(c).nonzero()[:n_support].squeeze(1)

    # FIXME when torch.unique will be available on cuda too
    classes = torch.unique(target_cpu)
    n_classes = len(classes)
    # FIXME when torch will support where as np
    # assuming n_query, n_target constants
    n_query = target_cpu.eq(classes[0].item()).sum().item() - n_support

    support_idxs = list(map(supp_idxs, classes))

    prototypes = torch.stack([input_cpu[idx_list].mean(0) for idx_list in support_idxs])
    # FIXME when torch will support where as np
    if bug == "queries_are_support":
        # the query slice taken from the front: the queries are the support samples the prototypes average
        query_idxs = torch.stack(list(map(lambda c: target_cpu.eq(c).nonzero()[:n_query], classes))).view(-1)
    else:
        query_idxs = torch.stack(list(map(lambda c: target_cpu.eq(c).nonzero()[n_support:], classes))).view(-1)

    query_samples = input.to('cpu')[query_idxs]
    dists = euclidean_dist(query_samples, prototypes)

    if bug == "distances_not_negated":
        # the minus sign dropped: the farthest prototype gets the largest probability
        log_p_y = F.log_softmax(dists, dim=1).view(n_classes, n_query, -1)
    else:
        log_p_y = F.log_softmax(-dists, dim=1).view(n_classes, n_query, -1)

    target_inds = torch.arange(0, n_classes)
    target_inds = target_inds.view(n_classes, 1, 1)
    target_inds = target_inds.expand(n_classes, n_query, 1).long()

    loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()
    _, y_hat = log_p_y.max(2)
    acc_val = y_hat.eq(target_inds.squeeze(2)).float().mean()

    return loss_val,  acc_val


# ---- src/prototypical_batch_sampler.py -------------------------------------------------------------------------

class PrototypicalBatchSampler(object):
    '''
    PrototypicalBatchSampler: yield a batch of indexes at each iteration.
    Indexes are calculated by keeping in account 'classes_per_it' and 'num_samples',
    In fact at every iteration the batch indexes will refer to  'num_support' + 'num_query' samples
    for 'classes_per_it' random classes.

    __len__ returns the number of episodes per epoch (same as 'self.iterations').
    '''

    def __init__(self, labels, classes_per_it, num_samples, iterations):
        super(PrototypicalBatchSampler, self).__init__()
        self.labels = labels
        self.classes_per_it = classes_per_it
        self.sample_per_class = num_samples
        self.iterations = iterations

        self.classes, self.counts = np.unique(self.labels, return_counts=True)
        self.classes = torch.LongTensor(self.classes)

        # create a matrix, indexes, of dim: classes X max(elements per class)
        # fill it with nans
        # for every class c, fill the relative row with the indices samples belonging to c
        # in numel_per_class we store the number of samples for each class/row
        self.idxs = range(len(self.labels))
        self.indexes = np.empty((len(self.classes), max(self.counts)), dtype=int) * np.nan
        self.indexes = torch.Tensor(self.indexes)
        self.numel_per_class = torch.zeros_like(self.classes)
        for idx, label in enumerate(self.labels):
            label_idx = np.argwhere(self.classes == label).item()
            self.indexes[label_idx, np.where(np.isnan(self.indexes[label_idx]))[0][0]] = idx
            self.numel_per_class[label_idx] += 1

    def __iter__(self):
        '''
        yield a batch of indexes
        '''
        spc = self.sample_per_class
        cpi = self.classes_per_it

        for it in range(self.iterations):
            batch_size = spc * cpi
            batch = torch.LongTensor(batch_size)
            c_idxs = torch.randperm(len(self.classes))[:cpi]
            for i, c in enumerate(self.classes[c_idxs]):
                s = slice(i * spc, (i + 1) * spc)
                # FIXME when torch.argwhere will exists
                label_idx = torch.arange(len(self.classes)).long()[self.classes == c].item()
                sample_idxs = torch.randperm(self.numel_per_class[label_idx])[:spc]
                batch[s] = self.indexes[label_idx][sample_idxs]
            batch = batch[torch.randperm(len(batch))]
            yield batch

    def __len__(self):
        '''
        returns the number of iterations (episodes) per epoch
        '''
        return self.iterations


# ---- synthetic stand-in for src/omniglot_dataset.py ------------------------------------------------------------

class SyntheticCharacters(torch.utils.data.Dataset):
    """40 classes of 28x28 stroke templates; a sample is its class template shifted by up to 2 pixels plus noise."""

    def __init__(self, seed, n_classes=40, per_class=20):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(n_classes, 28, 28)
        for c in range(n_classes):
            for _ in range(3):  # three random strokes (short thick lines)
                r0, c0 = torch.randint(4, 24, (2,), generator=gen).tolist()
                dr, dc = torch.randint(-1, 2, (2,), generator=gen).tolist()
                for t in range(8):
                    r, cc = min(max(r0 + dr * t, 1), 26), min(max(c0 + dc * t, 1), 26)
                    templates[c, r - 1:r + 2, cc - 1:cc + 2] = 1.0
        xs, ys = [], []
        for c in range(n_classes):
            for _ in range(per_class):
                sr, sc = torch.randint(-2, 3, (2,), generator=gen).tolist()
                img = torch.roll(templates[c], shifts=(sr, sc), dims=(0, 1))
                xs.append((img + 0.2 * torch.randn(28, 28, generator=gen)).unsqueeze(0))
                ys.append(c)
        self.x = torch.stack(xs)
        self.y = ys

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]

    def __len__(self):
        return len(self.y)


# ---- src/train.py ----------------------------------------------------------------------------------------------

def init_sampler(labels, mode):
    if 'train' in mode:
        classes_per_it = classes_per_it_tr
        num_samples = num_support_tr + num_query_tr
    else:
        classes_per_it = classes_per_it_val
        num_samples = num_support_val + num_query_val

    return PrototypicalBatchSampler(labels=labels,
                                    classes_per_it=classes_per_it,
                                    num_samples=num_samples,
                                    iterations=iterations)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    dataset = SyntheticCharacters(seed)
    sampler = init_sampler(dataset.y, 'train')
    tr_dataloader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)

    model = ProtoNet(hid_dim=HID, z_dim=HID)
    optim = torch.optim.Adam(params=model.parameters(),
                             lr=learning_rate)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer=optim,
                                                   gamma=lr_scheduler_gamma,
                                                   step_size=lr_scheduler_step)

    def loss_fn(model_output, target, n_support):
        return prototypical_loss(model_output, target, n_support, bug=bug)

    first = next(iter(torch.utils.data.DataLoader(dataset, batch_sampler=init_sampler(dataset.y, 'train'))))
    state = {"it": iter(tr_dataloader), "n": 0}

    def train_step():
        model.train()
        try:
            batch = next(state["it"])
        except StopIteration:  # end of the epoch: the epoch's scheduler step, then a new epoch
            lr_scheduler.step()
            state["it"] = iter(tr_dataloader)
            batch = next(state["it"])
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        x, y = batch
        model_output = model(x)
        loss, acc = loss_fn(model_output, target=y,
                            n_support=num_support_tr)
        loss.backward()
        optim.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        x, y = batch
        model_output = model(x)
        loss, acc = loss_fn(model_output, target=y,
                            n_support=num_support_val)
        return float(acc)

    return Program(name="protonetorobix_omniglot", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda out, y: loss_fn(out, target=y, n_support=num_support_tr)[0],
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=tr_dataloader)


build = functools.partial(_build)

BUGS = [
    # the query slice taken from the front of each class: the queries are the very support samples that make the
    # prototypes, so the episode asks nothing about unseen samples (a support/query leak).
    Bug("queries_are_support", functools.partial(_build, bug="queries_are_support"), "learning_ledger", ("TASK",)),
    # the minus sign of log_softmax(-dists) dropped: the loss rewards the distance to the wrong prototypes.
    Bug("distances_not_negated", functools.partial(_build, bug="distances_not_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # optim.zero_grad() left out of the episode loop: every episode's gradient adds onto all earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
