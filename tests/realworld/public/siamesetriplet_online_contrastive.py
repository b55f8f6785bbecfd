# ruff: noqa: UP008, PLR0402
"""Online contrastive loss with hard negative pair mining, from adambielski/siamese-triplet.

Source: https://github.com/adambielski/siamese-triplet
Commit: 0c719f9e8f59fa386e8c59d10b2ddde9fac46276
Files: ``networks.py`` (``EmbeddingNet``), ``losses.py`` (``OnlineContrastiveLoss``), ``utils.py`` (``pdist``,
``HardNegativePairSelector``), ``datasets.py`` (``BalancedBatchSampler``), ``trainer.py`` (``train_epoch``),
``Experiments_MNIST.ipynb`` (the "Online pair selection" cell: margin 1, Adam lr 1e-3 weight_decay 1e-4,
StepLR(8, 0.1)).
License: BSD-3-Clause (Copyright (c) 2019, Adam Bielski; full text in LICENSES/adambielski-siamese-triplet.txt).
Domain: contrastive metric learning (2-d embeddings, all positive pairs + hardest negative pairs mined in the batch,
Hadsell contrastive loss).

Kept as written: ``EmbeddingNet`` (conv 1->32->64 with PReLU and max-pooling, fc 1024->256->256->2), ``pdist``,
``HardNegativePairSelector`` (all positive pairs, as many negatives of smallest distance), ``OnlineContrastiveLoss``,
``BalancedBatchSampler``, the body of ``train_epoch`` (zero_grad, forward, loss over ``outputs + target``,
backward, step), Adam(lr=1e-3, weight_decay=1e-4) and StepLR(8, gamma=0.1) stepped per epoch.

Deviations from the original:
- MNIST (download, torchvision transforms) is replaced by synthetic 28x28 one-channel images made from ``seed``:
  each of 10 classes has a fixed random prototype, an example is its prototype plus noise (the learnable rule),
  normalized as the notebook's (mean 0.1307, std 0.3081 written out).
- sizes for 2 CPU cores: 600 training images, batches of ``n_classes=4`` x ``n_samples=6`` (the notebook: 10 x 25).
- ``BalancedBatchSampler`` takes a ``np.random.RandomState(seed)`` instead of the global numpy generator so a build
  is reproducible; ``HardNegativePairSelector`` keeps ``cpu=True``, the ``.cuda()`` branches are dropped (no GPU).
- ``train_step`` is one iteration of ``train_epoch``'s loop on the next batch of the sampler (StepLR stepped when
  the sampler's epoch ends, as ``fit`` does at each epoch); metrics, logging and ``test_epoch`` are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from itertools import combinations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data.sampler import BatchSampler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_TRAIN = 600
N_CLASSES = 4
N_SAMPLES = 6


# networks.py
class EmbeddingNet(nn.Module):
    def __init__(self):
        super(EmbeddingNet, self).__init__()
        self.convnet = nn.Sequential(nn.Conv2d(1, 32, 5), nn.PReLU(),
                                     nn.MaxPool2d(2, stride=2),
                                     nn.Conv2d(32, 64, 5), nn.PReLU(),
                                     nn.MaxPool2d(2, stride=2))

        self.fc = nn.Sequential(nn.Linear(64 * 4 * 4, 256),
                                nn.PReLU(),
                                nn.Linear(256, 256),
                                nn.PReLU(),
                                nn.Linear(256, 2)
                                )

    def forward(self, x):
        output = self.convnet(x)
        output = output.view(output.size()[0], -1)
        output = self.fc(output)
        return output

    def get_embedding(self, x):
        return self.forward(x)


# utils.py
def pdist(vectors):
    distance_matrix = -2 * vectors.mm(torch.t(vectors)) + vectors.pow(2).sum(dim=1).view(1, -1) + vectors.pow(2).sum(
        dim=1).view(-1, 1)
    return distance_matrix


class PairSelector:
    def __init__(self):
        pass

    def get_pairs(self, embeddings, labels):
        raise NotImplementedError


class HardNegativePairSelector(PairSelector):
    """
    Creates all possible positive pairs. For negative pairs, pairs with smallest distance are taken into consideration,
    matching the number of positive pairs.
    """

    def __init__(self, cpu=True, bug=None):
        super(HardNegativePairSelector, self).__init__()
        self.cpu = cpu
        self.bug = bug

    def get_pairs(self, embeddings, labels):
        if self.cpu:
            embeddings = embeddings.cpu()
        distance_matrix = pdist(embeddings)

        labels = labels.cpu().data.numpy()
        all_pairs = np.array(list(combinations(range(len(labels)), 2)))
        all_pairs = torch.LongTensor(all_pairs)
        positive_pairs = all_pairs[(labels[all_pairs[:, 0]] == labels[all_pairs[:, 1]]).nonzero()]
        negative_pairs = all_pairs[(labels[all_pairs[:, 0]] != labels[all_pairs[:, 1]]).nonzero()]

        negative_distances = distance_matrix[negative_pairs[:, 0], negative_pairs[:, 1]]
        negative_distances = negative_distances.cpu().data.numpy()
        if self.bug == "easiest_negatives_mined":
            # the initial release's line (commit 4ed17ef), fixed for issue #3: the farthest negatives
            top_negatives = np.argpartition(negative_distances, -len(positive_pairs))[-len(positive_pairs):]
        else:
            top_negatives = np.argpartition(negative_distances, len(positive_pairs))[:len(positive_pairs)]
        top_negative_pairs = negative_pairs[torch.LongTensor(top_negatives)]

        return positive_pairs, top_negative_pairs


# losses.py
class OnlineContrastiveLoss(nn.Module):
    """
    Online Contrastive loss
    Takes a batch of embeddings and corresponding labels.
    Pairs are generated using pair_selector object that take embeddings and targets and return indices of positive
    and negative pairs
    """

    def __init__(self, margin, pair_selector):
        super(OnlineContrastiveLoss, self).__init__()
        self.margin = margin
        self.pair_selector = pair_selector

    def forward(self, embeddings, target):
        positive_pairs, negative_pairs = self.pair_selector.get_pairs(embeddings, target)
        positive_loss = (embeddings[positive_pairs[:, 0]] - embeddings[positive_pairs[:, 1]]).pow(2).sum(1)
        negative_loss = F.relu(
            self.margin - (embeddings[negative_pairs[:, 0]] - embeddings[negative_pairs[:, 1]]).pow(2).sum(
                1).sqrt()).pow(2)
        loss = torch.cat([positive_loss, negative_loss], dim=0)
        return loss.mean()


# datasets.py
class BalancedBatchSampler(BatchSampler):
    """
    BatchSampler - from a MNIST-like dataset, samples n_classes and within these classes samples n_samples.
    Returns batches of size n_classes * n_samples
    """

    def __init__(self, labels, n_classes, n_samples, rng):
        self.random = rng
        self.labels = labels
        self.labels_set = list(set(self.labels.numpy()))
        self.label_to_indices = {label: np.where(self.labels.numpy() == label)[0]
                                 for label in self.labels_set}
        for l in self.labels_set:
            self.random.shuffle(self.label_to_indices[l])
        self.used_label_indices_count = {label: 0 for label in self.labels_set}
        self.count = 0
        self.n_classes = n_classes
        self.n_samples = n_samples
        self.n_dataset = len(self.labels)
        self.batch_size = self.n_samples * self.n_classes

    def __iter__(self):
        self.count = 0
        while self.count + self.batch_size < self.n_dataset:
            classes = self.random.choice(self.labels_set, self.n_classes, replace=False)
            indices = []
            for class_ in classes:
                indices.extend(self.label_to_indices[class_][
                               self.used_label_indices_count[class_]:self.used_label_indices_count[
                                                                         class_] + self.n_samples])
                self.used_label_indices_count[class_] += self.n_samples
                if self.used_label_indices_count[class_] + self.n_samples > len(self.label_to_indices[class_]):
                    self.random.shuffle(self.label_to_indices[class_])
                    self.used_label_indices_count[class_] = 0
            yield indices
            self.count += self.n_classes * self.n_samples

    def __len__(self):
        return self.n_dataset // self.batch_size


def _make_data(seed):
    g = torch.Generator().manual_seed(seed)
    protos = torch.rand(10, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (N_TRAIN,), generator=g)
    images = (protos[labels] + 0.35 * torch.randn(N_TRAIN, 1, 28, 28, generator=g)).clamp(0, 1)
    images = (images - 0.1307) / 0.3081
    return images, labels


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    images, labels = _make_data(seed)
    train_batch_sampler = BalancedBatchSampler(labels, n_classes=N_CLASSES, n_samples=N_SAMPLES,
                                               rng=np.random.RandomState(seed))
    online_train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                                      batch_sampler=train_batch_sampler)

    margin = 1.
    embedding_net = EmbeddingNet()
    model = embedding_net
    loss_fn = OnlineContrastiveLoss(margin, HardNegativePairSelector(bug=bug))
    lr = 1e-3
    optimizer = optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    scheduler = lr_scheduler.StepLR(optimizer, 8, gamma=0.1, last_epoch=-1)

    state = {"it": iter(online_train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            scheduler.step()
            state["it"] = iter(online_train_loader)
            return next(state["it"])

    def train_step():
        model.train()
        data, target = next_batch()
        if bug == "labels_of_previous_batch":
            # classic prefetch slip: the images of this batch paired with the labels of the previous one
            target, state["prev"] = state["prev"], target
        target = target if len(target) > 0 else None
        if not type(data) in (tuple, list):
            data = (data,)

        optimizer.zero_grad()
        outputs = model(*data)

        if type(outputs) not in (tuple, list):
            outputs = (outputs,)

        loss_inputs = outputs
        if target is not None:
            target = (target,)
            loss_inputs += target

        loss_outputs = loss_fn(*loss_inputs)
        loss = loss_outputs[0] if type(loss_outputs) in (tuple, list) else loss_outputs
        loss.backward()
        optimizer.step()
        return loss.item()

    batch = next(iter(online_train_loader))
    state["prev"] = batch[1]
    if bug == "labels_of_previous_batch":
        batch = [next(iter(online_train_loader))[0], batch[1]]

    return Program(name="siamesetriplet_online_contrastive", model=model, batch=tuple(batch),
                   loss_fn=lambda outputs, targets: loss_fn(outputs, targets), optimizer=optimizer,
                   train_step=train_step, loader=online_train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/adambielski/siamese-triplet/issues/3 (fixed in PR #4, commit 9512643): the initial
    # HardNegativePairSelector kept the negative pairs of LARGEST distance, the ones the margin already ignores.
    Bug("easiest_negatives_mined", functools.partial(_build, bug="easiest_negatives_mined"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic prefetch slip: each batch's images paired with the previous batch's labels; the pairs are mined from
    # labels that do not belong to the images.
    Bug("labels_of_previous_batch", functools.partial(_build, bug="labels_of_previous_batch"), "learning_ledger",
        ("TASK",)),
]
