# ruff: noqa: PLR0402, UP008, UP032
"""Graph attention network (dense GAT, 8 heads, transductive node classification) from pyGAT.

Source: https://github.com/Diego999/pyGAT (now diegoantognini/pyGAT), commit 3664f2dc90cbf971564c0bf186dc794f12446d0c,
files ``layers.py`` (GraphAttentionLayer), ``models.py`` (GAT), ``utils.py`` (normalize_adj, normalize_features,
accuracy), ``train.py`` (the loop). License: MIT (Copyright (c) 2018 Diego Antognini; full text in
LICENSES/Diego999-pyGAT.txt).

Kept as written: ``GraphAttentionLayer`` (W, a, LeakyReLU(alpha), masking by ``adj > 0`` with -9e15, softmax,
attention dropout), ``GAT`` (heads registered with ``add_module``, dropout, ELU, ``log_softmax``), the default
arguments (lr 0.005, weight_decay 5e-4, hidden 8, nb_heads 8, dropout 0.6, alpha 0.2), Adam, ``F.nll_loss`` on the
training nodes, ``train(epoch)``: model.train(), zero_grad, forward, loss, backward, step, then the validation
pass with model.eval() (fastmode off); the symmetric adjacency with self loops, ``normalize_adj`` and
``normalize_features`` (scipy.sparse).

Deviations:
- Cora (``load_data`` reads data/cora) is replaced by a synthetic citation graph made from the seed: 120 nodes,
  40 bag-of-words features, 4 classes; each class has its own topic words (drawn with p 0.35, others with p 0.03;
  every node has at least one of its class's words) and edges fall mostly inside a class (p 0.08 inside, 0.004
  across); the node features and the graph carry the labelling rule. The splits keep Cora's shape, scaled:
  train range(24), val range(40, 80), test range(80, 120) (Cora: 140 / 200-500 / 500-1500 of 2708).
- ``train(epoch)`` returns the training loss (the original returns the validation loss for its patience loop, which
  is not run here: 10000 epochs, checkpoint files); printing is dropped (``compute_test`` returns its accuracy).
  ``eval_fn`` is the validation accuracy in eval mode, as train() computes it.
- the sparse variant (SpGAT, ``--sparse``) is not ported.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

N_NODES, N_FEAT, N_CLASS = 120, 40, 4


# ---------------------------------------------------------------- layers.py
class GraphAttentionLayer(nn.Module):
    """
    Simple GAT layer, similar to https://arxiv.org/abs/1710.10903
    """
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super(GraphAttentionLayer, self).__init__()
        self.dropout = dropout
        self.in_features = in_features
        self.out_features = out_features
        self.alpha = alpha
        self.concat = concat

        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2*out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)

        self.leakyrelu = nn.LeakyReLU(self.alpha)

    def forward(self, h, adj):
        Wh = torch.mm(h, self.W) # h.shape: (N, in_features), Wh.shape: (N, out_features)
        e = self._prepare_attentional_mechanism_input(Wh)

        zero_vec = -9e15*torch.ones_like(e)
        attention = torch.where(adj > 0, e, zero_vec)
        attention = F.softmax(attention, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)

        if self.concat:
            return F.elu(h_prime)
        else:
            return h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        # Wh.shape (N, out_feature)
        # self.a.shape (2 * out_feature, 1)
        # Wh1&2.shape (N, 1)
        # e.shape (N, N)
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        # broadcast add
        e = Wh1 + Wh2.T
        return self.leakyrelu(e)

    def __repr__(self):
        return self.__class__.__name__ + ' (' + str(self.in_features) + ' -> ' + str(self.out_features) + ')'


# ---------------------------------------------------------------- models.py
class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads, bug=None):
        """Dense version of GAT."""
        super(GAT, self).__init__()
        self.dropout = dropout
        self.bug = bug

        self.attentions = [GraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha, concat=True) for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module('attention_{}'.format(i), attention)

        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha, concat=False)

    def forward(self, x, adj):
        if self.bug == "dropout_always_on":  # F.dropout's default training=True: dropout stays on in eval()
            x = F.dropout(x, self.dropout)
            x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
            x = F.dropout(x, self.dropout)
        else:
            x = F.dropout(x, self.dropout, training=self.training)
            x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
            x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        if self.bug == "nll_on_raw_outputs":
            return x
        return F.log_softmax(x, dim=1)


# ---------------------------------------------------------------- utils.py
def normalize_adj(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv_sqrt = np.power(rowsum, -0.5).flatten()
    r_inv_sqrt[np.isinf(r_inv_sqrt)] = 0.
    r_mat_inv_sqrt = sp.diags(r_inv_sqrt)
    return mx.dot(r_mat_inv_sqrt).transpose().dot(r_mat_inv_sqrt)


def normalize_features(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def load_data(seed):
    """A synthetic stand-in for load_data(): same outputs (adj, features, labels, idx_train, idx_val, idx_test)."""
    rng = np.random.default_rng(seed)
    labels_raw = rng.integers(0, N_CLASS, N_NODES)
    topic = np.repeat(np.arange(N_CLASS), N_FEAT // N_CLASS)  # word w belongs to class topic[w]
    p_word = np.where(topic[None, :] == labels_raw[:, None], 0.35, 0.03)
    words = rng.random((N_NODES, N_FEAT)) < p_word
    words[np.arange(N_NODES), labels_raw * (N_FEAT // N_CLASS) + rng.integers(0, N_FEAT // N_CLASS, N_NODES)] = True
    features = sp.csr_matrix(words.astype(np.float32))
    same = labels_raw[:, None] == labels_raw[None, :]
    upper = np.triu(rng.random((N_NODES, N_NODES)) < np.where(same, 0.08, 0.004), k=1)
    rows, cols = np.nonzero(upper)
    adj = sp.coo_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(N_NODES, N_NODES), dtype=np.float32)

    # build symmetric adjacency matrix
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)

    features = normalize_features(features)
    adj = normalize_adj(adj + sp.eye(adj.shape[0]))

    idx_train = range(24)
    idx_val = range(40, 80)
    idx_test = range(80, 120)

    adj = torch.FloatTensor(np.array(adj.todense()))
    features = torch.FloatTensor(np.array(features.todense()))
    labels = torch.LongTensor(labels_raw)

    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    return adj, features, labels, idx_train, idx_val, idx_test


# ---------------------------------------------------------------- train.py
def _build(seed, bug=None):
    torch.manual_seed(seed)
    hidden, nb_heads, dropout, alpha, lr, weight_decay = 8, 8, 0.6, 0.2, 0.005, 5e-4

    adj, features, labels, idx_train, idx_val, idx_test = load_data(seed)
    model = GAT(nfeat=features.shape[1],
                nhid=hidden,
                nclass=int(labels.max()) + 1,
                dropout=dropout,
                nheads=nb_heads,
                alpha=alpha,
                bug=bug)
    optimizer = optim.Adam(model.parameters(),
                           lr=lr,
                           weight_decay=weight_decay)

    features, adj, labels = Variable(features), Variable(adj), Variable(labels)

    def train(epoch):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        accuracy(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()

        # Evaluate validation set performance separately,
        # deactivates dropout during validation run.
        model.eval()
        output = model(features, adj)

        F.nll_loss(output[idx_val], labels[idx_val])
        accuracy(output[idx_val], labels[idx_val])
        return loss_train

    def compute_test():
        model.eval()
        output = model(features, adj)
        F.nll_loss(output[idx_test], labels[idx_test])
        return accuracy(output[idx_test], labels[idx_test])

    state = {"epoch": 0}

    def train_step():
        state["epoch"] += 1
        return train(state["epoch"] - 1)

    def loss_fn(output, labels):
        return F.nll_loss(output[idx_train], labels[idx_train])

    def eval_fn(model, batch):
        inputs, labels = batch
        model.eval()
        output = model(**inputs)
        return accuracy(output[idx_val], labels[idx_val]).item()

    return Program(name="pygat_gat", model=model, batch=({"x": features, "adj": adj}, labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # log_softmax dropped from GAT.forward: F.nll_loss gets the raw ELU outputs (classic nll_loss on raw outputs).
    Bug("nll_on_raw_outputs", functools.partial(_build, bug="nll_on_raw_outputs"), "learning_ledger", ("OBJECTIVE",)),
    # F.dropout without training=self.training: dropout stays on in the eval-mode validation pass (classic).
    Bug("dropout_always_on", functools.partial(_build, bug="dropout_always_on"), "six_claims", ("EVALUATION",)),
]
