# ruff: noqa: F841, PLR0402, RUF059, UP008
"""Variational graph auto-encoder (VGAE) for link prediction: a two-layer graph convolution encoder over the
symmetrically normalized adjacency of the training graph (held-out validation and test edges removed), a Gaussian
latent per node sampled by reparameterization, an inner-product decoder through a sigmoid, and a loss of
``norm * BCE`` against the training adjacency with self-loops (positive entries weighted by ``pos_weight``) minus the
KL term scaled by ``0.5 / N``; full-graph Adam, one step per epoch.

Source: https://github.com/DaehanKim/vgae_pytorch
Commit: 568c20f5b88adeafd3b8bcfadffd340dc0bf06b8
Files: ``model.py`` (``VGAE``, ``GraphConvSparse``, ``dot_product_decode``, ``glorot_init``), ``train.py``,
``preprocessing.py`` (``sparse_to_tuple``, ``preprocess_graph``, ``mask_test_edges``), ``args.py``.
License: MIT (Copyright (c) 2019 DaehanKim; full text in LICENSES/DaehanKim-vgae_pytorch.txt)
Domain: GNN, link prediction (variational graph auto-encoder)

Kept as written: the model (Glorot-initialized ``GraphConvSparse`` layers ``X W`` then ``A_norm (X W)``, ReLU base
layer, linear mean and log-std layers, ``z = noise * exp(logstd) + mean``, ``sigmoid(Z Z^T)``), the preprocessing
(diagonal removed, 5% validation and 10% test edges held out with sampled non-edges, ``D^-1/2 (A + I) D^-1/2``,
``adj_label = adj_train + I``), ``pos_weight`` and ``norm``, the weight tensor, the loss (``norm *
F.binary_cross_entropy(A_pred.view(-1), adj_label.to_dense().view(-1), weight=weight_tensor)`` minus ``0.5 / N *
(1 + 2 logstd - mean^2 - exp(logstd)^2).sum(1).mean()``), Adam with ``learning_rate`` 0.01, the loop body (forward,
``zero_grad``, loss, backward, step) and ``get_scores`` / ``get_acc``.

Deviations from the original:
- data: Cora (``input_data.load_data``, the Planetoid pickles) is replaced by a synthetic citation-like graph made
  from ``seed``: 200 nodes in 4 communities (edge probability 0.12 within, 0.005 across), each node with a sparse
  64-dimensional binary bag of words drawn mostly from its community's words, so links are predictable from the
  features and the neighbourhood. ``args.input_dim`` is 64 (1433 for Cora); ``hidden1_dim`` 32 and
  ``hidden2_dim`` 16 are kept.
- ``args.model`` is set to ``'VGAE'`` (the file's default is ``'GAE'``; the repository is the VGAE implementation and
  ``args.py`` is where the user picks it). ``args`` is a class in this module instead of the ``args.py`` module.
- ``torch.sparse.FloatTensor(indices, values, size)`` is written ``torch.sparse_coo_tensor(indices, values, size)``
  (the same sparse tensor; the legacy constructor is deprecated).
- scikit-learn is not available: ``get_scores`` computes ROC-AUC from ranks (and leaves AP out); its double
  ``sigmoid`` of ``A_pred`` is kept (monotone, the AUC is unchanged).
- ``np.random`` is seeded with ``seed`` (``mask_test_edges`` draws from it) and ``torch.manual_seed(seed)``.
- ``train_step`` is one epoch of the loop (forward, zero_grad, loss, backward, step); the per-epoch accuracy,
  validation scores and printing go to ``eval_fn`` (``get_acc`` and ``get_scores`` on the validation edges).
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
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- args.py -----------------------------------------------------------------------------------------------------

class args:
    dataset = 'synthetic'
    model = 'VGAE'

    input_dim = 64
    hidden1_dim = 32
    hidden2_dim = 16
    use_feature = True

    num_epoch = 200
    learning_rate = 0.01


# ---- model.py ----------------------------------------------------------------------------------------------------

class VGAE(nn.Module):
    def __init__(self, adj):
        super(VGAE,self).__init__()
        self.base_gcn = GraphConvSparse(args.input_dim, args.hidden1_dim, adj)
        self.gcn_mean = GraphConvSparse(args.hidden1_dim, args.hidden2_dim, adj, activation=lambda x:x)
        self.gcn_logstddev = GraphConvSparse(args.hidden1_dim, args.hidden2_dim, adj, activation=lambda x:x)

    def encode(self, X):
        hidden = self.base_gcn(X)
        self.mean = self.gcn_mean(hidden)
        self.logstd = self.gcn_logstddev(hidden)
        gaussian_noise = torch.randn(X.size(0), args.hidden2_dim)
        sampled_z = gaussian_noise*torch.exp(self.logstd) + self.mean
        return sampled_z

    def forward(self, X):
        Z = self.encode(X)
        A_pred = dot_product_decode(Z)
        return A_pred


class GraphConvSparse(nn.Module):
    def __init__(self, input_dim, output_dim, adj, activation = F.relu, **kwargs):
        super(GraphConvSparse, self).__init__(**kwargs)
        self.weight = glorot_init(input_dim, output_dim)
        self.adj = adj
        self.activation = activation

    def forward(self, inputs):
        x = inputs
        x = torch.mm(x,self.weight)
        x = torch.mm(self.adj, x)
        outputs = self.activation(x)
        return outputs


def dot_product_decode(Z):
    A_pred = torch.sigmoid(torch.matmul(Z,Z.t()))
    return A_pred


def glorot_init(input_dim, output_dim):
    init_range = np.sqrt(6.0/(input_dim + output_dim))
    initial = torch.rand(input_dim, output_dim)*2*init_range - init_range
    return nn.Parameter(initial)


# ---- preprocessing.py --------------------------------------------------------------------------------------------

def sparse_to_tuple(sparse_mx):
    if not sp.isspmatrix_coo(sparse_mx):
        sparse_mx = sparse_mx.tocoo()
    coords = np.vstack((sparse_mx.row, sparse_mx.col)).transpose()
    values = sparse_mx.data
    shape = sparse_mx.shape
    return coords, values, shape


def preprocess_graph(adj):
    adj = sp.coo_matrix(adj)
    adj_ = adj + sp.eye(adj.shape[0])
    rowsum = np.array(adj_.sum(1))
    degree_mat_inv_sqrt = sp.diags(np.power(rowsum, -0.5).flatten())
    adj_normalized = adj_.dot(degree_mat_inv_sqrt).transpose().dot(degree_mat_inv_sqrt).tocoo()
    return sparse_to_tuple(adj_normalized)


def mask_test_edges(adj):
    # Remove diagonal elements
    adj = adj - sp.dia_matrix((adj.diagonal()[np.newaxis, :], [0]), shape=adj.shape)
    adj.eliminate_zeros()
    # Check that diag is zero:
    assert np.diag(adj.todense()).sum() == 0

    adj_triu = sp.triu(adj)
    adj_tuple = sparse_to_tuple(adj_triu)
    edges = adj_tuple[0]
    edges_all = sparse_to_tuple(adj)[0]
    num_test = int(np.floor(edges.shape[0] / 10.))
    num_val = int(np.floor(edges.shape[0] / 20.))

    all_edge_idx = list(range(edges.shape[0]))
    np.random.shuffle(all_edge_idx)
    val_edge_idx = all_edge_idx[:num_val]
    test_edge_idx = all_edge_idx[num_val:(num_val + num_test)]
    test_edges = edges[test_edge_idx]
    val_edges = edges[val_edge_idx]
    train_edges = np.delete(edges, np.hstack([test_edge_idx, val_edge_idx]), axis=0)

    def ismember(a, b, tol=5):
        rows_close = np.all(np.round(a - b[:, None], tol) == 0, axis=-1)
        return np.any(rows_close)

    test_edges_false = []
    while len(test_edges_false) < len(test_edges):
        idx_i = np.random.randint(0, adj.shape[0])
        idx_j = np.random.randint(0, adj.shape[0])
        if idx_i == idx_j:
            continue
        if ismember([idx_i, idx_j], edges_all):
            continue
        if test_edges_false:
            if ismember([idx_j, idx_i], np.array(test_edges_false)):
                continue
            if ismember([idx_i, idx_j], np.array(test_edges_false)):
                continue
        test_edges_false.append([idx_i, idx_j])

    val_edges_false = []
    while len(val_edges_false) < len(val_edges):
        idx_i = np.random.randint(0, adj.shape[0])
        idx_j = np.random.randint(0, adj.shape[0])
        if idx_i == idx_j:
            continue
        if ismember([idx_i, idx_j], train_edges):
            continue
        if ismember([idx_j, idx_i], train_edges):
            continue
        if ismember([idx_i, idx_j], val_edges):
            continue
        if ismember([idx_j, idx_i], val_edges):
            continue
        if val_edges_false:
            if ismember([idx_j, idx_i], np.array(val_edges_false)):
                continue
            if ismember([idx_i, idx_j], np.array(val_edges_false)):
                continue
        val_edges_false.append([idx_i, idx_j])

    assert ~ismember(test_edges_false, edges_all)
    assert ~ismember(val_edges_false, edges_all)
    assert ~ismember(val_edges, train_edges)
    assert ~ismember(test_edges, train_edges)
    assert ~ismember(val_edges, test_edges)

    data = np.ones(train_edges.shape[0])

    # Re-build adj matrix
    adj_train = sp.csr_matrix((data, (train_edges[:, 0], train_edges[:, 1])), shape=adj.shape)
    adj_train = adj_train + adj_train.T

    # NOTE: these edge lists only contain single direction of edge!
    return adj_train, train_edges, val_edges, val_edges_false, test_edges, test_edges_false


# ---- the data (stands in for input_data.load_data) ---------------------------------------------------------------

def load_data(seed, n=200, k=4):
    """(port) a 4-community graph whose nodes carry bag-of-words features mostly from their community's words."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, k, size=n)
    p = np.where(comm[:, None] == comm[None, :], 0.12, 0.005)
    upper = np.triu(rng.random((n, n)) < p, 1)
    dense = (upper | upper.T).astype(np.float64)
    adj = sp.csr_matrix(dense)
    words = args.input_dim // k
    feats = np.zeros((n, args.input_dim))
    for i in range(n):
        own = comm[i] * words + rng.choice(words, size=5, replace=False)
        other = rng.choice(args.input_dim, size=2, replace=False)
        feats[i, own] = 1
        feats[i, other] = 1
    return adj, sp.lil_matrix(feats)


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    adj, features = load_data(seed)

    # Store original adjacency matrix (without diagonal entries) for later
    adj_orig = adj
    adj_orig = adj_orig - sp.dia_matrix((adj_orig.diagonal()[np.newaxis, :], [0]), shape=adj_orig.shape)
    adj_orig.eliminate_zeros()

    adj_train, train_edges, val_edges, val_edges_false, test_edges, test_edges_false = mask_test_edges(adj)
    adj = adj_train

    # Some preprocessing
    adj_norm = preprocess_graph(adj)

    features = sparse_to_tuple(features.tocoo())

    # Create Model
    pos_weight = float(adj.shape[0] * adj.shape[0] - adj.sum()) / adj.sum()
    norm = adj.shape[0] * adj.shape[0] / float((adj.shape[0] * adj.shape[0] - adj.sum()) * 2)

    if bug == "adj_label_from_full_graph":
        adj_label = adj_orig + sp.eye(adj_orig.shape[0])
    else:
        adj_label = adj_train + sp.eye(adj_train.shape[0])
    adj_label = sparse_to_tuple(adj_label)

    adj_norm = torch.sparse_coo_tensor(torch.LongTensor(adj_norm[0].T),
                                       torch.FloatTensor(adj_norm[1]),
                                       torch.Size(adj_norm[2]))
    adj_label = torch.sparse_coo_tensor(torch.LongTensor(adj_label[0].T),
                                        torch.FloatTensor(adj_label[1]),
                                        torch.Size(adj_label[2]))
    features = torch.sparse_coo_tensor(torch.LongTensor(features[0].T),
                                       torch.FloatTensor(features[1]),
                                       torch.Size(features[2]))

    weight_mask = adj_label.to_dense().view(-1) == 1
    weight_tensor = torch.ones(weight_mask.size(0))
    weight_tensor[weight_mask] = pos_weight

    # init model and optimizer
    model = VGAE(adj_norm)
    optimizer = Adam(model.parameters(), lr=args.learning_rate)

    def get_scores(edges_pos, edges_neg, adj_rec):

        def sigmoid(x):
            return 1 / (1 + np.exp(-x))

        # Predict on test set of edges
        preds = []
        pos = []
        for e in edges_pos:
            preds.append(sigmoid(adj_rec[e[0], e[1]].item()))
            pos.append(adj_orig[e[0], e[1]])

        preds_neg = []
        neg = []
        for e in edges_neg:
            preds_neg.append(sigmoid(adj_rec[e[0], e[1]].item()))
            neg.append(adj_orig[e[0], e[1]])

        # (port) roc_auc_score written out from ranks
        preds_all = np.hstack([preds, preds_neg])
        ranks = preds_all.argsort().argsort() + 1
        n_pos, n_neg = len(preds), len(preds_neg)
        roc_score = (ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
        return roc_score

    def get_acc(adj_rec, adj_label):
        labels_all = adj_label.to_dense().view(-1).long()
        preds_all = (adj_rec > 0.5).view(-1).long()
        accuracy = (preds_all == labels_all).sum().float() / labels_all.size(0)
        return accuracy

    def compute_loss(A_pred, adj_label):
        loss = log_lik = norm*F.binary_cross_entropy(A_pred.view(-1), adj_label.to_dense().view(-1), weight = weight_tensor)
        if args.model == 'VGAE':
            if bug == "kl_std_not_squared":
                # the line before https://github.com/DaehanKim/vgae_pytorch/issues/2 was fixed
                kl_divergence = 0.5/ A_pred.size(0) * (1 + 2*model.logstd - model.mean**2 - torch.exp(model.logstd)).sum(1).mean()
            else:
                kl_divergence = 0.5/ A_pred.size(0) * (1 + 2*model.logstd - model.mean**2 - torch.exp(model.logstd)**2).sum(1).mean()
            loss -= kl_divergence
        return loss

    def train_step():
        A_pred = model(features)
        optimizer.zero_grad()
        loss = compute_loss(A_pred, adj_label)

        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        with torch.no_grad():
            A_pred = model(batch[0])
        return {"train_acc": float(get_acc(A_pred, adj_label)), "val_roc": float(get_scores(val_edges, val_edges_false, A_pred))}

    return Program(name="vgaepytorch_linkpred", model=model, batch=(features, adj_label), loss_fn=compute_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/DaehanKim/vgae_pytorch/issues/2: the KL term with ``exp(logstd)`` (the std) where the
    # variance ``exp(logstd)**2`` belongs, the line as it stood before the fix (the ported commit).
    Bug("kl_std_not_squared", functools.partial(_build, bug="kl_std_not_squared"), "learning_ledger",
        ("OBJECTIVE",)),
    # the reconstruction target built from the full adjacency (``adj_orig``) instead of the training adjacency
    # (classic target leak): the held-out validation and test links are in the labels the model is fitted to.
    Bug("adj_label_from_full_graph", functools.partial(_build, bug="adj_label_from_full_graph"), "learning_ledger",
        ("TASK",)),
]
