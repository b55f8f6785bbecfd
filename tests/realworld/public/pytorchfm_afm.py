"""Attentional Factorization Machine for click-through-rate prediction, from pytorch-fm: one shared embedding
table over all categorical fields (per-field offsets), a linear term (``FeaturesLinear``), every pair of field
embeddings multiplied elementwise, an attention network weighting the pairs (softmax over pairs, dropout on the
scores and on the pooled vector), a projection, and a sigmoid; trained by ``examples/main.py`` with
``BCELoss`` on the probabilities, Adam (lr 0.001, weight_decay 1e-6), ``model.zero_grad()`` per batch, an AUC
evaluation on the validation split after every epoch and an ``EarlyStopper`` (2 trials). The model is main.py's
``get_model('afm', ...)``: embed_dim 16, attn_size 16, dropouts (0.2, 0.2).

Source: https://github.com/rixwew/pytorch-fm
Commit: f74ad19771eda104e99874d19dc892e988ec53fa
Files: torchfm/model/afm.py, torchfm/layer.py (FeaturesLinear, FeaturesEmbedding, AttentionalFactorizationMachine),
       examples/main.py (get_model, EarlyStopper, train, test, main), torchfm/dataset/criteo.py (__getitem__)
License: MIT (Copyright (c) 2019 rixwew; full text in LICENSES/rixwew-pytorch-fm.txt)
Domain: recommendation / CTR prediction (factorization machine with attention)

Deviations from the original:
- sizes: batch_size 2048 -> 256 (embed_dim, attn_size, dropouts, lr, weight_decay as main.py sets them);
- data: the Criteo lmdb cache is replaced by a synthetic click log made from ``seed``: 8000 rows of 8
  categorical fields (5 to 15 values each), stored as Criteo's cache stores them (``uint32`` rows ``[label,
  field_1, ..., field_8]``, read back by the dataset's ``__getitem__`` as written); a click is drawn with the
  probability ``sigmoid`` of per-value weights of 4 fields plus two pairwise interaction tables (fields 0x1 and
  2x3), so both the linear and the interaction terms carry signal. ``random_split`` 80/10/10 uses a generator
  seeded from ``seed``;
- ``np.long`` (removed from numpy) is ``np.int64`` in ``FeaturesLinear``, ``FeaturesEmbedding`` and
  ``__getitem__`` (the failure reported in https://github.com/rixwew/pytorch-fm/issues/38);
- sklearn is not installed: ``roc_auc_score`` is written out (the rank statistic, ties averaged, with
  ``scipy.stats.rankdata``); tqdm progress bars and printing are dropped; no CUDA; the DataLoaders have no worker
  processes (num_workers 8 -> 0); ``EarlyStopper`` keeps the best model as an in-memory copy instead of
  ``torch.save`` and stopping does not end the loop (the loop is the caller's);
- one ``train_step`` is one batch of ``train()`` (``model.train()`` at the epoch's start); when an epoch of the
  training loader ends, ``test(model, valid_data_loader)`` and the early stopper run, as ``main`` does. ``eval_fn``
  is ``test`` on one batch (the AUC); ``self_check`` runs 150 steps (``SELF_CHECK_STEPS``): at lr 0.001 the loss
  falls slowly from the linear term's N(0, 1) initialization (``nn.Embedding``'s default);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, RUF059, UP004  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import rankdata
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS = 8000
SELF_CHECK_STEPS = 150  # lr 0.001 against the linear term's N(0, 1) init: the loss falls slowly but steadily
FIELD_DIMS = (5, 6, 7, 8, 9, 10, 12, 15)


# ---- torchfm/layer.py --------------------------------------------------------------------------------------

class FeaturesLinear(torch.nn.Module):

    def __init__(self, field_dims, output_dim=1):
        super().__init__()
        self.fc = torch.nn.Embedding(sum(field_dims), output_dim)
        self.bias = torch.nn.Parameter(torch.zeros((output_dim,)))
        self.offsets = np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.int64)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return torch.sum(self.fc(x), dim=1) + self.bias


class FeaturesEmbedding(torch.nn.Module):

    def __init__(self, field_dims, embed_dim):
        super().__init__()
        self.embedding = torch.nn.Embedding(sum(field_dims), embed_dim)
        self.offsets = np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.int64)
        torch.nn.init.xavier_uniform_(self.embedding.weight.data)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return self.embedding(x)


class AttentionalFactorizationMachine(torch.nn.Module):

    def __init__(self, embed_dim, attn_size, dropouts, bug=None):
        super().__init__()
        self.attention = torch.nn.Linear(embed_dim, attn_size)
        self.projection = torch.nn.Linear(attn_size, 1)
        self.fc = torch.nn.Linear(embed_dim, 1)
        self.dropouts = dropouts
        self.bug = bug

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, num_fields, embed_dim)``
        """
        num_fields = x.shape[1]
        row, col = list(), list()
        for i in range(num_fields - 1):
            for j in range(i + 1, num_fields):
                row.append(i), col.append(j)
        p, q = x[:, row], x[:, col]
        inner_product = p * q
        attn_scores = F.relu(self.attention(inner_product))
        attn_scores = F.softmax(self.projection(attn_scores), dim=1)
        if self.bug == "dropout_in_eval":
            # the lines before the fix of https://github.com/rixwew/pytorch-fm/issues/21: F.dropout's `training`
            # defaults to True, so the attention dropout also runs in model.eval()
            attn_scores = F.dropout(attn_scores, p=self.dropouts[0])
            attn_output = torch.sum(attn_scores * inner_product, dim=1)
            attn_output = F.dropout(attn_output, p=self.dropouts[1])
        else:
            attn_scores = F.dropout(attn_scores, p=self.dropouts[0], training=self.training)
            attn_output = torch.sum(attn_scores * inner_product, dim=1)
            attn_output = F.dropout(attn_output, p=self.dropouts[1], training=self.training)
        return self.fc(attn_output)


# ---- torchfm/model/afm.py ----------------------------------------------------------------------------------

class AttentionalFactorizationMachineModel(torch.nn.Module):
    """
    A pytorch implementation of Attentional Factorization Machine.

    Reference:
        J Xiao, et al. Attentional Factorization Machines: Learning the Weight of Feature Interactions via Attention Networks, 2017.
    """

    def __init__(self, field_dims, embed_dim, attn_size, dropouts, bug=None):
        super().__init__()
        self.num_fields = len(field_dims)
        self.embedding = FeaturesEmbedding(field_dims, embed_dim)
        self.linear = FeaturesLinear(field_dims)
        self.afm = AttentionalFactorizationMachine(embed_dim, attn_size, dropouts, bug=bug)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = self.linear(x) + self.afm(self.embedding(x))
        return torch.sigmoid(x.squeeze(1))


# ---- torchfm/dataset/criteo.py (the cached rows and __getitem__), on a synthetic click log ------------------

class SyntheticCriteoDataset(torch.utils.data.Dataset):
    """CriteoDataset's storage and ``__getitem__``: uint32 rows ``[label, field_1, ..., field_n]``; the rows come
    from a generator instead of the lmdb cache built from train.txt."""

    def __init__(self, seed, bug=None):
        rng = np.random.RandomState(seed)
        self.field_dims = np.array(FIELD_DIMS, dtype=np.uint32)
        fields = np.stack([rng.randint(d, size=N_ROWS) for d in FIELD_DIMS], axis=1)
        value_w = [rng.randn(d) * 0.8 for d in FIELD_DIMS[:4]]
        pair_01 = rng.randn(FIELD_DIMS[0], FIELD_DIMS[1]) * 1.2
        pair_23 = rng.randn(FIELD_DIMS[2], FIELD_DIMS[3]) * 1.2
        logit = sum(value_w[i][fields[:, i]] for i in range(4)) + pair_01[fields[:, 0], fields[:, 1]] \
            + pair_23[fields[:, 2], fields[:, 3]]
        labels = (rng.rand(N_ROWS) < 1 / (1 + np.exp(-2 * logit))).astype(np.uint32)
        self.rows = np.concatenate([labels[:, None], fields], axis=1).astype(np.uint32)
        self.length = N_ROWS
        self.bug = bug

    def __getitem__(self, index):
        np_array = self.rows[index].astype(dtype=np.int64)
        if self.bug == "label_in_fields":
            # the slice off by one: the label is read as the first field and the last field is dropped (silent
            # here because the fields' sizes grow, so every shifted value stays inside its new field's range)
            return np_array[:-1], np_array[0]
        return np_array[1:], np_array[0]

    def __len__(self):
        return self.length


# ---- examples/main.py --------------------------------------------------------------------------------------

class EarlyStopper(object):

    def __init__(self, num_trials, save_path):
        self.num_trials = num_trials
        self.trial_counter = 0
        self.best_accuracy = 0
        self.save_path = save_path

    def is_continuable(self, model, accuracy):
        if accuracy > self.best_accuracy:
            self.best_accuracy = accuracy
            self.trial_counter = 0
            self.save_path["model"] = copy.deepcopy(model.state_dict())  # torch.save(model, self.save_path)
            return True
        elif self.trial_counter + 1 < self.num_trials:
            self.trial_counter += 1
            return True
        else:
            return False


def roc_auc_score(targets, predicts):
    """sklearn.metrics.roc_auc_score for binary targets: the Mann-Whitney rank statistic (ties averaged)."""
    targets, predicts = np.asarray(targets), np.asarray(predicts)
    ranks = rankdata(predicts)
    n_pos = int(targets.sum())
    n_neg = len(targets) - n_pos
    return (ranks[targets == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def test(model, data_loader, device):
    model.eval()
    targets, predicts = list(), list()
    with torch.no_grad():
        for fields, target in data_loader:
            fields, target = fields.to(device), target.to(device)
            y = model(fields)
            targets.extend(target.tolist())
            predicts.extend(y.tolist())
    return roc_auc_score(targets, predicts)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device('cpu')
    learning_rate, batch_size, weight_decay = 0.001, 256, 1e-6
    dataset = SyntheticCriteoDataset(seed, bug=bug)
    train_length = int(len(dataset) * 0.8)
    valid_length = int(len(dataset) * 0.1)
    test_length = len(dataset) - train_length - valid_length
    train_dataset, valid_dataset, test_dataset = torch.utils.data.random_split(
        dataset, (train_length, valid_length, test_length), generator=torch.Generator().manual_seed(seed))
    train_data_loader = DataLoader(train_dataset, batch_size=batch_size, num_workers=0)
    valid_data_loader = DataLoader(valid_dataset, batch_size=batch_size, num_workers=0)
    field_dims = dataset.field_dims
    model = AttentionalFactorizationMachineModel(field_dims, embed_dim=16, attn_size=16, dropouts=(0.2, 0.2),
                                                 bug=bug).to(device)
    criterion = torch.nn.BCELoss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    early_stopper = EarlyStopper(num_trials=2, save_path={})

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of train(): main's validation and early stopping
                auc = test(model, valid_data_loader, device)
                early_stopper.is_continuable(model, auc)
                state["epoch"] += 1
            model.train()
            state["it"] = iter(train_data_loader)
            return next(state["it"])

    def train_step():
        fields, target = next_batch()
        fields, target = fields.to(device), target.to(device)
        y = model(fields)
        loss = criterion(y, target.float())
        model.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        return float(test(model, [batch], device))

    first = next(iter(DataLoader(train_dataset, batch_size=batch_size)))
    return Program(name="pytorchfm_afm", model=model, batch=(first[0], first[1].float()), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # F.dropout without `training=self.training` in AttentionalFactorizationMachine: the attention dropout stays on
    # in model.eval(), so the validation AUC is computed on a randomly thinned model
    # (https://github.com/rixwew/pytorch-fm/issues/21, fixed in commit 8ac848d).
    Bug("dropout_in_eval", functools.partial(_build, bug="dropout_in_eval"), "six_claims", ("EVALUATION",)),
    # __getitem__ sliced off by one (classic): the click label enters the model as the first field's value, a
    # target leak the model learns instead of the fields' rule.
    Bug("label_in_fields", functools.partial(_build, bug="label_in_fields"), "learning_ledger", ("TASK",)),
]
