# ruff: noqa: UP008, UP032, PLR0402, F841, RUF059  (the original's code style is kept as written)
"""Simple Graph Convolution (SGC: K-step propagation S^K X precomputed, then a logistic regression) from
Tiiiger/SGC, trained by ``citation.py`` with its default arguments (``--model SGC --dataset cora``).

Source: https://github.com/Tiiiger/SGC
Commit: 2c7a2727e82e462d8ef9d6e57f0b08888e16488f
Files: citation.py (train_regression, test_regression, the script), models.py (SGC, get_model), utils.py
       (load_citation, preprocess_citation, sparse_mx_to_torch_sparse_tensor, sgc_precompute, set_seed),
       normalization.py (aug_normalized_adjacency, row_normalize), metrics.py (accuracy), args.py (defaults)
License: MIT (Copyright (c) 2019 Tianyi Zhang; full text in LICENSES/Tiiiger-SGC.txt)
Domain: GNN (SGC, transductive node classification on a citation graph)

Kept as written: ``SGC`` (one ``nn.Linear``), the AugNormAdj normalisation (D+I)^-1/2 (A+I) (D+I)^-1/2, the row
normalisation of the features, ``sgc_precompute`` (degree 2 sparse products), the defaults of ``args.py`` (lr 0.2,
weight_decay 5e-6, epochs 100, degree 2, dropout 0), Adam, and the loop body of ``train_regression`` (train(),
zero_grad, forward on the training features, ``F.cross_entropy``, backward, step), then the validation accuracy
in eval mode under ``no_grad``.

Deviations from the original:
- Cora (``load_citation`` reads the Planetoid pickles with networkx) is replaced by a synthetic citation graph made
  from ``seed``: 300 nodes, 60 bag-of-words features, 5 classes (each with its own topic words, drawn with p 0.2,
  others with p 0.04) and edges mostly inside a class (p 0.05 inside, 0.003 across); the split keeps the script's
  shape (``idx_train = range(len(y))`` = 20 per class, the next nodes for validation, the rest test):
  train range(100), val range(100, 200), test range(200, 300) (Cora: 140 / 500 / 1000). The adjacency is
  symmetrised with the original line;
- ``torch.sparse.FloatTensor`` (deprecated) is ``torch.sparse_coo_tensor``; no CUDA; printing and timing kept only
  where they return values; the tuned weight decay files are not read (``--tuned`` off, as by default);
- one call of ``train_step`` is one epoch of ``train_regression``'s loop; the optimizer is created once, as
  ``train_regression`` does before its loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from time import perf_counter

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

N_NODES, N_FEAT, N_CLASS = 300, 60, 5


# ---------------------------------------------------------------- models.py
class SGC(nn.Module):
    """
    A Simple PyTorch Implementation of Logistic Regression.
    Assuming the features have been preprocessed with k-step graph propagation.
    """
    def __init__(self, nfeat, nclass):
        super(SGC, self).__init__()

        self.W = nn.Linear(nfeat, nclass)

    def forward(self, x):
        return self.W(x)


def get_model(model_opt, nfeat, nclass, nhid=0, dropout=0, cuda=True):
    if model_opt == "SGC":
        model = SGC(nfeat=nfeat,
                    nclass=nclass)
    else:
        raise NotImplementedError('model:{} is not implemented!'.format(model_opt))
    return model


# ---------------------------------------------------------------- normalization.py
def aug_normalized_adjacency(adj):
   adj = adj + sp.eye(adj.shape[0])
   adj = sp.coo_matrix(adj)
   row_sum = np.array(adj.sum(1))
   d_inv_sqrt = np.power(row_sum, -0.5).flatten()
   d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
   d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
   return d_mat_inv_sqrt.dot(adj).dot(d_mat_inv_sqrt).tocoo()

def fetch_normalization(type):
   switcher = {
       'AugNormAdj': aug_normalized_adjacency,  # A' = (D + I)^-1/2 * ( A + I ) * (D + I)^-1/2
   }
   func = switcher.get(type, lambda: "Invalid normalization technique.")
   return func

def row_normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


# ---------------------------------------------------------------- metrics.py
def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


# ---------------------------------------------------------------- utils.py
def preprocess_citation(adj, features, normalization="FirstOrderGCN"):
    adj_normalizer = fetch_normalization(normalization)
    adj = adj_normalizer(adj)
    features = row_normalize(features)
    return adj, features

def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)

def load_citation(seed, normalization="AugNormAdj"):
    """
    Load Citation Networks Datasets. (A synthetic stand-in for the Planetoid pickles: same outputs.)
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, N_CLASS, N_NODES)
    words_per_class = N_FEAT // N_CLASS
    topic = np.repeat(np.arange(N_CLASS), words_per_class)
    words = rng.random((N_NODES, N_FEAT)) < np.where(topic[None, :] == y[:, None], 0.2, 0.04)
    words[np.arange(N_NODES), y * words_per_class + rng.integers(0, words_per_class, N_NODES)] = True
    features = sp.lil_matrix(words.astype(np.float32))
    same = y[:, None] == y[None, :]
    upper = sp.csr_matrix(np.triu(rng.random((N_NODES, N_NODES)) < np.where(same, 0.05, 0.003), k=1).astype(np.float32))
    adj = upper + upper.T
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)
    labels = np.eye(N_CLASS)[y]

    idx_test = list(range(200, 300))
    idx_train = range(100)
    idx_val = range(100, 200)

    adj, features = preprocess_citation(adj, features, normalization)

    # porting to pytorch
    features = torch.FloatTensor(np.array(features.todense())).float()
    labels = torch.LongTensor(labels)
    labels = torch.max(labels, dim=1)[1]
    adj = sparse_mx_to_torch_sparse_tensor(adj).float()
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    return adj, features, labels, idx_train, idx_val, idx_test

def sgc_precompute(features, adj, degree):
    t = perf_counter()
    for i in range(degree):
        features = torch.spmm(adj, features)
    precompute_time = perf_counter()-t
    return features, precompute_time

def set_seed(seed, cuda):
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- citation.py
def _build(seed, bug=None):
    # args.py defaults
    epochs, lr, weight_decay, hidden, dropout, degree = 100, 0.2, 5e-6, 0, 0, 2

    # setting random seeds
    set_seed(seed, False)

    adj, features, labels, idx_train, idx_val, idx_test = load_citation(seed, "AugNormAdj")

    model = get_model("SGC", features.size(1), labels.max().item()+1, hidden, dropout, False)

    raw_features = features
    features, precompute_time = sgc_precompute(features, adj, degree)

    train_features, train_labels = features[idx_train], labels[idx_train]
    if bug == "val_features_not_propagated":  # classic: the validation rows sliced from the features saved before
        val_features, val_labels = raw_features[idx_val], labels[idx_val]  # the precompute
    else:
        val_features, val_labels = features[idx_val], labels[idx_val]

    # train_regression(model, train_features, train_labels, val_features, val_labels, epochs, weight_decay, lr, dropout)
    optimizer = optim.Adam(model.parameters(), lr=lr,
                           weight_decay=weight_decay)

    def train_step():  # one epoch of train_regression's loop
        model.train()
        if bug != "zero_grad_dropped":  # classic: zero_grad left out of the loop
            optimizer.zero_grad()
        output = model(train_features)
        if bug == "softmax_before_cross_entropy":  # classic: probabilities fed to a loss that applies log_softmax
            loss_train = F.cross_entropy(F.softmax(output, dim=1), train_labels)
        else:
            loss_train = F.cross_entropy(output, train_labels)
        loss_train.backward()
        optimizer.step()
        return loss_train.detach()

    def eval_fn(model, batch):
        with torch.no_grad():
            model.eval()
            output = model(val_features)
            acc_val = accuracy(output, val_labels)
        return float(acc_val)

    def loss_fn(output, target):
        if bug == "softmax_before_cross_entropy":
            return F.cross_entropy(F.softmax(output, dim=1), target)
        return F.cross_entropy(output, target)

    return Program(name="sgc_citation", model=model, batch=(train_features, train_labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: F.softmax applied before F.cross_entropy (which applies log_softmax itself).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the validation rows come from the features saved before sgc_precompute; training is right, the
    # reported validation accuracy is of a model fed unpropagated inputs.
    Bug("val_features_not_propagated", functools.partial(_build, bug="val_features_not_propagated"), "six_claims",
        ("EVALUATION",)),
    # classic: optimizer.zero_grad() left out of the epoch loop.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe",
        (), kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
