"""Variational graph autoencoder (GCN encoder with mu / log-sigma heads, inner-product decoder) trained for link
prediction by zfjsail/gae-pytorch: ``gae/train.py`` (``--model gcn_vae``: hidden1 32, hidden2 16, lr 0.01, dropout
0, Adam, full-graph steps), ``loss_function`` (``norm * binary_cross_entropy_with_logits(pos_weight)`` on the
adjacency with self loops plus the KL term scaled by ``1 / n_nodes``), ``mask_test_edges`` (10 % test / 5 % val
edges held out of the training graph) and ``preprocess_graph`` (symmetric normalization of ``A + I``).

Source: https://github.com/zfjsail/gae-pytorch
Commit: c0b95cac8eb2928d0b5d6d65fee938fe97f60262
Files: gae/model.py, gae/layers.py, gae/optimizer.py, gae/train.py, gae/utils.py
License: MIT (Copyright (c) 2018 zfjsail; full text in LICENSES/zfjsail-gae-pytorch.txt)
Domain: GNN, graph autoencoder / link prediction (VGAE)

Deviations from the original:
- data: Cora (``load_data`` reads data/ind.cora.*) is replaced by a synthetic graph made from ``seed``: 96 nodes in
  4 communities (edge probability 0.2 inside a community, 0.01 across, symmetric, no self loops), 32 binary
  bag-of-words features with community topic words (p 0.35 own topic, 0.03 otherwise), so links are predictable
  from the features and the graph;
- ``mask_test_edges`` draws from a ``np.random.RandomState(seed)`` passed in (the original uses the global
  ``np.random``), so that a build is reproducible; its body is unchanged;
- ``pos_weight`` is wrapped in a tensor (``torch.tensor(pos_weight)``): current PyTorch refuses the float the
  script passes; ``torch.sparse.FloatTensor`` (removed) is written ``torch.sparse_coo_tensor``;
- sklearn is not available: ``roc_auc_score`` / ``average_precision_score`` in ``get_roc_score`` are written out in
  numpy (rank AUC; AP as the mean precision at each positive);
- one ``train_step`` is one epoch of ``gae_for`` (train(), zero_grad, forward, loss, backward, step, the
  validation score on ``mu``); printing and the final test score are left out; ``eval_fn`` is ``get_roc_score``
  on the validation edges (ROC AUC);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.nn.modules.module import Module
from torch.nn.parameter import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_NODES, N_FEAT, N_COMM = 96, 32, 4
HIDDEN1, HIDDEN2, LR, DROPOUT = 32, 16, 0.01, 0.


# ---- gae/layers.py -------------------------------------------------------------------------------------------

class GraphConvolution(Module):
    """
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    """

    def __init__(self, in_features, out_features, dropout=0., act=F.relu):
        super(GraphConvolution, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.dropout = dropout
        self.act = act
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.weight)

    def forward(self, input, adj):
        input = F.dropout(input, self.dropout, self.training)
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        output = self.act(output)
        return output

    def __repr__(self):
        return self.__class__.__name__ + ' (' \
               + str(self.in_features) + ' -> ' \
               + str(self.out_features) + ')'


# ---- gae/model.py --------------------------------------------------------------------------------------------

class GCNModelVAE(nn.Module):
    def __init__(self, input_feat_dim, hidden_dim1, hidden_dim2, dropout):
        super(GCNModelVAE, self).__init__()
        self.gc1 = GraphConvolution(input_feat_dim, hidden_dim1, dropout, act=F.relu)
        self.gc2 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.gc3 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.dc = InnerProductDecoder(dropout, act=lambda x: x)

    def encode(self, x, adj):
        hidden1 = self.gc1(x, adj)
        return self.gc2(hidden1, adj), self.gc3(hidden1, adj)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)
        else:
            return mu

    def forward(self, x, adj):
        mu, logvar = self.encode(x, adj)
        z = self.reparameterize(mu, logvar)
        return self.dc(z), mu, logvar


class InnerProductDecoder(nn.Module):
    """Decoder for using inner product for prediction."""

    def __init__(self, dropout, act=torch.sigmoid):
        super(InnerProductDecoder, self).__init__()
        self.dropout = dropout
        self.act = act

    def forward(self, z):
        z = F.dropout(z, self.dropout, training=self.training)
        adj = self.act(torch.mm(z, z.t()))
        return adj


# ---- gae/optimizer.py ----------------------------------------------------------------------------------------

def weighted_binary_cross_entropy(output, target, pos_weight):
    # the loss as it was before commit 3a98122 ("fix loss function"): the negatives' term is sigmoid(1 - output)
    if pos_weight is not None:
        loss = (target * torch.sigmoid(output).log()) * pos_weight + \
               ((1 - target) * torch.sigmoid(1 - output).log())
    else:
        loss = target * torch.log(output) + (1 - target) * torch.log(1 - output)
    loss = torch.neg(torch.mean(loss))
    return loss


def loss_function(preds, labels, mu, logvar, n_nodes, norm, pos_weight, bug=None):
    if bug == "weighted_bce_before_fix":
        cost = norm * torch.mean(weighted_binary_cross_entropy(preds, labels, pos_weight))
    else:
        cost = norm * F.binary_cross_entropy_with_logits(preds, labels, pos_weight=pos_weight)

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    if bug == "kl_logstd_as_logvar":
        # the log-variance form of the KL on a head the model uses as a log standard deviation
        KLD = -0.5 / n_nodes * torch.mean(torch.sum(
            1 + logvar - mu.pow(2) - logvar.exp(), 1))
    else:
        KLD = -0.5 / n_nodes * torch.mean(torch.sum(
            1 + 2 * logvar - mu.pow(2) - logvar.exp().pow(2), 1))
    return cost + KLD


# ---- gae/utils.py --------------------------------------------------------------------------------------------

def sparse_to_tuple(sparse_mx):
    if not sp.isspmatrix_coo(sparse_mx):
        sparse_mx = sparse_mx.tocoo()
    coords = np.vstack((sparse_mx.row, sparse_mx.col)).transpose()
    values = sparse_mx.data
    shape = sparse_mx.shape
    return coords, values, shape


def mask_test_edges(adj, rng):
    # Function to build test set with 10% positive links
    # NOTE: Splits are randomized and results might slightly deviate from reported numbers in the paper.

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
    rng.shuffle(all_edge_idx)
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
        idx_i = rng.randint(0, adj.shape[0])
        idx_j = rng.randint(0, adj.shape[0])
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
        idx_i = rng.randint(0, adj.shape[0])
        idx_j = rng.randint(0, adj.shape[0])
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


def preprocess_graph(adj):
    adj = sp.coo_matrix(adj)
    adj_ = adj + sp.eye(adj.shape[0])
    rowsum = np.array(adj_.sum(1))
    degree_mat_inv_sqrt = sp.diags(np.power(rowsum, -0.5).flatten())
    adj_normalized = adj_.dot(degree_mat_inv_sqrt).transpose().dot(degree_mat_inv_sqrt).tocoo()
    # return sparse_to_tuple(adj_normalized)
    return sparse_mx_to_torch_sparse_tensor(adj_normalized)


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)


def roc_auc_score(labels, scores):
    """sklearn's ROC AUC, written out (ties count one half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean())


def average_precision_score(labels, scores):
    """sklearn's average precision, written out (mean precision at each positive, by descending score)."""
    order = np.argsort(-scores, kind="mergesort")
    hits = labels[order] == 1
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float(precision[hits].mean())


def get_roc_score(emb, adj_orig, edges_pos, edges_neg):
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    # Predict on test set of edges
    adj_rec = np.dot(emb, emb.T)
    preds = []
    pos = []
    for e in edges_pos:
        preds.append(sigmoid(adj_rec[e[0], e[1]]))
        pos.append(adj_orig[e[0], e[1]])

    preds_neg = []
    neg = []
    for e in edges_neg:
        preds_neg.append(sigmoid(adj_rec[e[0], e[1]]))
        neg.append(adj_orig[e[0], e[1]])

    preds_all = np.hstack([preds, preds_neg])
    labels_all = np.hstack([np.ones(len(preds)), np.zeros(len(preds_neg))])
    roc_score = roc_auc_score(labels_all, preds_all)
    ap_score = average_precision_score(labels_all, preds_all)

    return roc_score, ap_score


def load_data(seed):
    """The synthetic stand-in for Cora: community graph and community topic-word features."""
    g = np.random.RandomState(seed)
    comm = g.randint(0, N_COMM, N_NODES)
    same = comm[:, None] == comm[None, :]
    upper = np.triu(g.rand(N_NODES, N_NODES) < np.where(same, 0.2, 0.01), 1)
    dense = (upper | upper.T).astype(np.float64)
    topic = np.arange(N_FEAT) % N_COMM
    feats = (g.rand(N_NODES, N_FEAT) < np.where(topic[None, :] == comm[:, None], 0.35, 0.03)).astype(np.float32)
    adj = sp.csr_matrix(dense)
    features = torch.FloatTensor(feats)
    return adj, features


# ---- gae/train.py --------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    adj, features = load_data(seed)
    n_nodes, feat_dim = features.shape

    # Store original adjacency matrix (without diagonal entries) for later
    adj_orig = adj
    adj_orig = adj_orig - sp.dia_matrix((adj_orig.diagonal()[np.newaxis, :], [0]), shape=adj_orig.shape)
    adj_orig.eliminate_zeros()

    adj_train, train_edges, val_edges, val_edges_false, test_edges, test_edges_false = mask_test_edges(adj, rng)
    adj = adj_train

    # Some preprocessing
    adj_norm = preprocess_graph(adj)
    adj_label = adj_train + sp.eye(adj_train.shape[0])
    # adj_label = sparse_to_tuple(adj_label)
    adj_label = torch.FloatTensor(adj_label.toarray())

    pos_weight = float(adj.shape[0] * adj.shape[0] - adj.sum()) / adj.sum()
    norm = adj.shape[0] * adj.shape[0] / float((adj.shape[0] * adj.shape[0] - adj.sum()) * 2)
    pos_weight = torch.tensor(pos_weight)

    model = GCNModelVAE(feat_dim, HIDDEN1, HIDDEN2, DROPOUT)
    optimizer = optim.Adam(model.parameters(), lr=LR)

    state = {"hidden_emb": None, "val": None}

    def train_step():
        model.train()
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        recovered, mu, logvar = model(features, adj_norm)
        loss = loss_function(preds=recovered, labels=adj_label,
                             mu=mu, logvar=logvar, n_nodes=n_nodes,
                             norm=norm, pos_weight=pos_weight, bug=bug)
        loss.backward()
        cur_loss = loss.item()
        optimizer.step()

        hidden_emb = mu.data.numpy()
        state["hidden_emb"] = hidden_emb
        state["val"] = get_roc_score(hidden_emb, adj_orig, val_edges, val_edges_false)
        return cur_loss

    def loss_fn(outputs, targets):
        recovered, mu, logvar = outputs
        return loss_function(preds=recovered, labels=targets, mu=mu, logvar=logvar, n_nodes=n_nodes,
                             norm=norm, pos_weight=pos_weight, bug=bug)

    def eval_fn(model, batch):
        inputs, _ = batch
        model.eval()
        with torch.no_grad():
            _, mu, _ = model(**inputs)
        roc_curr, ap_curr = get_roc_score(mu.data.numpy(), adj_orig, val_edges, val_edges_false)
        return roc_curr

    return Program(name="gaepytorch_vgae", model=model, batch=({"x": features, "adj": adj_norm}, adj_label),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the repository's own loss before commit 3a98122 ("fix loss function",
    # https://github.com/zfjsail/gae-pytorch/commit/3a98122561d1a4434aea550581b8b021049d44bc): the non-edges' term is
    # log sigmoid(1 - logit) instead of log sigmoid(-logit), so non-edges are pushed towards logit 1, not below 0.
    Bug("weighted_bce_before_fix", functools.partial(_build, bug="weighted_bce_before_fix"), "learning_ledger",
        ("OBJECTIVE",)),
    # the log-variance KL (as in https://github.com/pyg-team/pytorch_geometric/pull/1368, before that fix) on a head
    # that reparameterize uses as a log standard deviation: the prior term pulls sigma to the wrong value.
    Bug("kl_logstd_as_logvar", functools.partial(_build, bug="kl_logstd_as_logvar"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from the epoch loop: full-graph gradients accumulate over epochs.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("gc1.weight",)),
]
