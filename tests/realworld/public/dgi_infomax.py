"""Deep Graph Infomax: a one-layer GCN encoder (PReLU) over the whole graph, an average readout squashed by a
sigmoid into a summary vector, and a bilinear discriminator scoring (node, summary) pairs of the real graph
against a corrupted graph (node features row-shuffled); ``BCEWithLogitsLoss`` against ones for the real nodes
and zeros for the corrupted ones, Adam lr 0.001, full-graph steps (``execute.py``), then a logistic-regression
probe on the frozen embeddings.

Source: https://github.com/PetarV-/DGI
Commit: 61baf67d7052905c77bdeb28c22926f04e182362
Files: execute.py, models/dgi.py, models/logreg.py, layers/gcn.py, layers/readout.py, layers/discriminator.py,
       utils/process.py (preprocess_features, normalize_adj, sparse_to_tuple, sparse_mx_to_torch_sparse_tensor)
License: MIT (Copyright (c) 2018 Petar Veličković; full text in LICENSES/PetarV--DGI.txt)
Domain: graph (self-supervised node embeddings, plain torch GCN)

Substituted for williamleif/graphsage-simple, which carries no license.

Deviations from the original:
- sizes: hid_units 512 -> 64 (lr 0.001, l2_coef 0.0, batch_size 1, sparse True, nonlinearity 'prelu' unchanged);
- data: Cora (``process.load_data`` reads data/ind.cora.*) is replaced by a synthetic citation graph made from
  ``seed``: 160 nodes, 60 binary bag-of-words features, 4 classes, each class with its own topic words (drawn with
  p 0.3, others with p 0.03; every node has at least one of its class's words), edges mostly inside a class
  (p 0.08 inside, 0.004 across), symmetric; the splits keep Cora's shape, scaled: train range(32), val
  range(32, 72), test range(80, 160). ``preprocess_features`` and ``normalize_adj(adj + I)`` run as written;
- ``np.random.permutation`` comes from a ``np.random.RandomState(seed)`` instance so that a build is reproducible;
- one ``train_step`` is one iteration of the epoch loop (train(), zero_grad, corruption, labels, forward, loss, the
  early-stopping bookkeeping, backward, step). The best model is kept as an in-memory state_dict copy instead of
  ``torch.save('best_dgi.pkl')``, and patience is counted but does not end the loop (the loop is the caller's);
  the ``print`` is dropped; no CUDA;
- ``eval_fn`` is the script's evaluation, run once instead of 50 times: ``model.embed`` on the graph, a fresh
  ``LogReg`` trained 100 steps (Adam lr 0.01) on the training nodes' embeddings, the test accuracy (the script
  reloads the best checkpoint first; here the current model is probed);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_NODES, N_FEAT, N_CLASS = 160, 60, 4

# training params (execute.py)
batch_size = 1
nb_epochs = 10000
patience = 20
lr = 0.001
l2_coef = 0.0
drop_prob = 0.0
hid_units = 64
sparse = True
nonlinearity = 'prelu' # special name to separate parameters


# ---- layers/gcn.py -----------------------------------------------------------------------------------------

class GCN(nn.Module):
    def __init__(self, in_ft, out_ft, act, bias=True):
        super(GCN, self).__init__()
        self.fc = nn.Linear(in_ft, out_ft, bias=False)
        self.act = nn.PReLU() if act == 'prelu' else act

        if bias:
            self.bias = nn.Parameter(torch.FloatTensor(out_ft))
            self.bias.data.fill_(0.0)
        else:
            self.register_parameter('bias', None)

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    # Shape of seq: (batch, nodes, features)
    def forward(self, seq, adj, sparse=False):
        seq_fts = self.fc(seq)
        if sparse:
            out = torch.unsqueeze(torch.spmm(adj, torch.squeeze(seq_fts, 0)), 0)
        else:
            out = torch.bmm(adj, seq_fts)
        if self.bias is not None:
            out += self.bias

        return self.act(out)


# ---- layers/readout.py -------------------------------------------------------------------------------------

# Applies an average on seq, of shape (batch, nodes, features)
# While taking into account the masking of msk
class AvgReadout(nn.Module):
    def __init__(self):
        super(AvgReadout, self).__init__()

    def forward(self, seq, msk):
        if msk is None:
            return torch.mean(seq, 1)
        else:
            msk = torch.unsqueeze(msk, -1)
            return torch.sum(seq * msk, 1) / torch.sum(msk)


# ---- layers/discriminator.py -------------------------------------------------------------------------------

class Discriminator(nn.Module):
    def __init__(self, n_h, bug=None):
        super(Discriminator, self).__init__()
        self.f_k = nn.Bilinear(n_h, n_h, 1)
        self.bug = bug

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Bilinear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    def forward(self, c, h_pl, h_mi, s_bias1=None, s_bias2=None):
        c_x = torch.unsqueeze(c, 1)
        c_x = c_x.expand_as(h_pl)

        sc_1 = torch.squeeze(self.f_k(h_pl, c_x), 2)
        sc_2 = torch.squeeze(self.f_k(h_mi, c_x), 2)

        if s_bias1 is not None:
            sc_1 += s_bias1
        if s_bias2 is not None:
            sc_2 += s_bias2

        logits = torch.cat((sc_1, sc_2), 1)
        if self.bug == "sigmoid_in_discriminator":
            # the sigmoid the paper describes, added to the discriminator (issue #6): BCEWithLogitsLoss then
            # applies a second sigmoid to probabilities
            logits = torch.sigmoid(logits)

        return logits


# ---- models/dgi.py -----------------------------------------------------------------------------------------

class DGI(nn.Module):
    def __init__(self, n_in, n_h, activation, bug=None):
        super(DGI, self).__init__()
        self.gcn = GCN(n_in, n_h, activation)
        self.read = AvgReadout()

        self.sigm = nn.Sigmoid()

        self.disc = Discriminator(n_h, bug=bug)

    def forward(self, seq1, seq2, adj, sparse, msk, samp_bias1, samp_bias2):
        h_1 = self.gcn(seq1, adj, sparse)

        c = self.read(h_1, msk)
        c = self.sigm(c)

        h_2 = self.gcn(seq2, adj, sparse)

        ret = self.disc(c, h_1, h_2, samp_bias1, samp_bias2)

        return ret

    # Detach the return variables
    def embed(self, seq, adj, sparse, msk):
        h_1 = self.gcn(seq, adj, sparse)
        c = self.read(h_1, msk)

        return h_1.detach(), c.detach()


# ---- models/logreg.py --------------------------------------------------------------------------------------

class LogReg(nn.Module):
    def __init__(self, ft_in, nb_classes):
        super(LogReg, self).__init__()
        self.fc = nn.Linear(ft_in, nb_classes)

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    def forward(self, seq):
        ret = self.fc(seq)
        return ret


# ---- utils/process.py (the functions execute.py calls) -----------------------------------------------------

def sparse_to_tuple(sparse_mx, insert_batch=False):
    """Convert sparse matrix to tuple representation."""
    """Set insert_batch=True if you want to insert a batch dimension."""
    def to_tuple(mx):
        if not sp.isspmatrix_coo(mx):
            mx = mx.tocoo()
        if insert_batch:
            coords = np.vstack((np.zeros(mx.row.shape[0]), mx.row, mx.col)).transpose()
            values = mx.data
            shape = (1,) + mx.shape
        else:
            coords = np.vstack((mx.row, mx.col)).transpose()
            values = mx.data
            shape = mx.shape
        return coords, values, shape

    if isinstance(sparse_mx, list):
        for i in range(len(sparse_mx)):
            sparse_mx[i] = to_tuple(sparse_mx[i])
    else:
        sparse_mx = to_tuple(sparse_mx)

    return sparse_mx

def preprocess_features(features):
    """Row-normalize feature matrix and convert to tuple representation"""
    rowsum = np.array(features.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    features = r_mat_inv.dot(features)
    return features.todense(), sparse_to_tuple(features)

def normalize_adj(adj):
    """Symmetrically normalize adjacency matrix."""
    adj = sp.coo_matrix(adj)
    rowsum = np.array(adj.sum(1))
    d_inv_sqrt = np.power(rowsum, -0.5).flatten()
    d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
    d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
    return adj.dot(d_mat_inv_sqrt).transpose().dot(d_mat_inv_sqrt).tocoo()

def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse.FloatTensor(indices, values, shape)


# ---- data: what process.load_data returns, for a synthetic citation graph ----------------------------------

def load_data(seed):
    """(adj, features, labels, idx_train, idx_val, idx_test) shaped as process.load_data returns them for Cora:
    a scipy sparse adjacency, a lil feature matrix, one-hot labels, index ranges."""
    rng = np.random.RandomState(seed)
    classes = rng.randint(N_CLASS, size=N_NODES)
    topic = rng.randint(N_CLASS, size=N_FEAT)
    p = np.where(topic[None, :] == classes[:, None], 0.3, 0.03)
    x = (rng.rand(N_NODES, N_FEAT) < p).astype(np.float32)
    for i in range(N_NODES):
        own = np.flatnonzero(topic == classes[i])
        x[i, own[rng.randint(len(own))]] = 1.0
    same = classes[:, None] == classes[None, :]
    upper = np.triu(rng.rand(N_NODES, N_NODES) < np.where(same, 0.08, 0.004), 1)
    adj = sp.csr_matrix((upper | upper.T).astype(np.float32))
    features = sp.lil_matrix(x)
    labels = np.eye(N_CLASS)[classes]
    return adj, features, labels, range(32), range(32, 72), range(80, N_NODES)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)

    adj, features, labels, idx_train, idx_val, idx_test = load_data(seed)
    features, _ = preprocess_features(features)

    nb_nodes = features.shape[0]
    ft_size = features.shape[1]
    nb_classes = labels.shape[1]

    adj = normalize_adj(adj + sp.eye(adj.shape[0]))

    if sparse:
        sp_adj = sparse_mx_to_torch_sparse_tensor(adj)
    else:
        adj = (adj + sp.eye(adj.shape[0])).todense()

    features = torch.FloatTensor(features[np.newaxis])
    if not sparse:
        adj = torch.FloatTensor(adj[np.newaxis])
    labels = torch.FloatTensor(labels[np.newaxis])
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    model = DGI(ft_size, hid_units, nonlinearity, bug=bug)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=l2_coef)

    b_xent = nn.BCEWithLogitsLoss()
    xent = nn.CrossEntropyLoss()
    state = {"cnt_wait": 0, "best": 1e9, "best_t": 0, "epoch": 0, "best_state": None}

    def train_step():
        epoch = state["epoch"]
        model.train()
        optimiser.zero_grad()

        idx = rng.permutation(nb_nodes)
        shuf_fts = features[:, idx, :]

        lbl_1 = torch.ones(batch_size, nb_nodes)
        lbl_2 = torch.zeros(batch_size, nb_nodes)
        lbl = torch.cat((lbl_1, lbl_2), 1)

        logits = model(features, shuf_fts, sp_adj if sparse else adj, sparse, None, None, None)

        loss = b_xent(logits, lbl)

        if bug == "step_before_backward":
            optimiser.step()  # the update moved up next to the bookkeeping: it runs on the zeroed gradients

        if loss < state["best"]:
            state["best"] = loss
            state["best_t"] = epoch
            state["cnt_wait"] = 0
            state["best_state"] = copy.deepcopy(model.state_dict())  # torch.save(model.state_dict(), 'best_dgi.pkl')
        else:
            state["cnt_wait"] += 1

        loss.backward()
        if bug != "step_before_backward":
            optimiser.step()
        state["epoch"] += 1
        return loss.detach()

    def eval_fn(model, batch):
        embeds, _ = model.embed(features, sp_adj if sparse else adj, sparse, None)
        train_embs = embeds[0, idx_train]
        test_embs = embeds[0, idx_test]

        train_lbls = torch.argmax(labels[0, idx_train], dim=1)
        test_lbls = torch.argmax(labels[0, idx_test], dim=1)

        log = LogReg(hid_units, nb_classes)
        opt = torch.optim.Adam(log.parameters(), lr=0.01, weight_decay=0.0)
        for _ in range(100):
            log.train()
            opt.zero_grad()

            logits = log(train_embs)
            loss = xent(logits, train_lbls)

            loss.backward()
            opt.step()

        logits = log(test_embs)
        preds = torch.argmax(logits, dim=1)
        acc = torch.sum(preds == test_lbls).float() / test_lbls.shape[0]
        return float(acc)

    shuf_fts = features[:, rng.permutation(nb_nodes), :]
    lbl = torch.cat((torch.ones(batch_size, nb_nodes), torch.zeros(batch_size, nb_nodes)), 1)
    inputs = {"seq1": features, "seq2": shuf_fts, "adj": sp_adj if sparse else adj, "sparse": sparse, "msk": None,
              "samp_bias1": None, "samp_bias2": None}
    return Program(name="dgi_infomax", model=model, batch=(inputs, lbl), loss_fn=b_xent, optimizer=optimiser,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the logistic sigmoid the paper puts on the discriminator's scores, added to layers/discriminator.py as
    # https://github.com/PetarV-/DGI/issues/6 asks: BCEWithLogitsLoss (which already applies it) then sees
    # probabilities as logits.
    Bug("sigmoid_in_discriminator", functools.partial(_build, bug="sigmoid_in_discriminator"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimiser.step() moved above the early-stopping bookkeeping, before loss.backward() (classic): every step
    # runs on the gradients zero_grad just cleared, so no parameter ever moves while the loss is reported.
    Bug("step_before_backward", functools.partial(_build, bug="step_before_backward"), "step_probe",
        (), kind="step.step_before_backward"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
