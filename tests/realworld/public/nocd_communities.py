"""Neural Overlapping Community Detection (Shchur & Guennemann, "Overlapping Community Detection with Graph Neural
Networks"), Oleksandr Shchur's nocd: a two-layer GCN (batch norm, dropout) whose ReLU outputs are nonnegative
community affiliations ``Z``, trained by the Bernoulli-Poisson (BerPo) likelihood of a batch of sampled edges and
non-edges (balanced), plus an L2 penalty on the GCN weights, Adam; validated by the full-graph BerPo loss.

Source: https://github.com/shchur/overlapping-community-detection
Commit: 414856fd0d8f61d5bbeec06deb60c3e7b477a342
Files: ``interactive.ipynb`` (the training cells), ``nocd/nn/gcn.py``, ``nocd/nn/decoder.py``, ``nocd/sampler.py``,
``nocd/utils.py``, ``nocd/generate.py``, ``nocd/train.py``
License: MIT (Copyright (c) 2019 Oleksandr Shchur; full text in LICENSES/shchur-overlapping-community-detection.txt)
Domain: GNN in plain torch (node level, unsupervised overlapping community detection by edge likelihood)

Kept as written: ``GraphConvolution`` / ``GCN`` (xavier weights, zero biases, dropout before every layer, ReLU and
the affine-free, statistics-free ``BatchNorm1d`` after hidden layers, ``normalize_adj`` with self-loops and the
symmetric degree normalization), ``BerpoDecoder`` (``eps = -log(1 - density)``, ``loss_batch`` and ``loss_full``,
balanced), ``EdgeSampler`` (``np.random.seed(key)`` per batch, uniform edges, rejection-sampled non-edges) with its
``collate_fn`` and DataLoader, ``l2_reg_loss`` over the weight matrices, ``ModelSaver`` and ``NoImprovementStopping`` (mode min), the notebook's
hyperparameters (hidden [128] shrunk as below, weight decay 1e-2 as the L2 scale, dropout 0.5, batch norm, lr 1e-3
raised as below, balanced stochastic loss) and its loop body (validation every 25 batches under ``no_grad`` in eval
mode with ``loss_full``, early stopping, then ``gnn.train()``, zero_grad, ``Z = F.relu(gnn(x_norm, adj_norm))``,
``loss_batch`` + L2, backward, step).

Deviations from the original:
- the MAG-CS graph is not here: the graph is drawn by the repository's own ``generate_bigclam`` from a synthetic
  affiliation matrix made from ``seed`` (300 nodes, 6 communities, each node in one or two), the node attributes are
  sparse binary words, each community with its own vocabulary (plus noise), so features and edges share the rule;
- sizes for 2 CPU cores: hidden [128] -> [64], batch_size 20000 -> 1000; lr 1e-3 -> 1e-2 so the 30 steps of the
  self-check show the loss falling;
- CPU only (no ``set_default_tensor_type(torch.cuda.FloatTensor)``, no ``.cuda()``); the sparse tensors are built with
  ``torch.sparse_coo_tensor`` (``torch.sparse.FloatTensor`` is deprecated); the node features stay a dense tensor (so
  ``sparse_or_dense_dropout`` takes its dense branch); sklearn's ``normalize`` (row L2) is written out;
  ``np.bool`` -> ``bool`` (removed from numpy); the sampler runs without workers;
- one ``train_step`` is one iteration of the notebook's ``for epoch, batch in enumerate(sampler)`` loop (the
  validation block included when ``epoch % 25 == 0``), returning the batch loss; ``eval_fn`` is the full-graph
  validation loss; the plots, the overlapping NMI and the unsupervised metrics are dropped; the loop's ``break``
  on ``max_epochs`` and on early stopping is not taken (the self-check never gets that far);
  ``BernoulliDecoder``'s abstract stubs, ``EarlyStopping``'s base classes and ``NoImprovementStopping``'s 'max' and
  relative modes (unused here) are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys
from copy import deepcopy

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributions as td
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data_utils

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---------------------------------------------------------------------------------------------- nocd/utils.py
def l2_reg_loss(model, scale=1e-5):
    """Get L2 loss for model weights."""
    loss = 0.0
    for w in model.get_weights():
        loss += w.pow(2.).sum()
    return loss * scale


def to_sparse_tensor(matrix, cuda=False):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    if sp.issparse(matrix):
        coo = matrix.tocoo()
        indices = torch.LongTensor(np.vstack([coo.row, coo.col]))
        values = torch.FloatTensor(coo.data)
        shape = torch.Size(coo.shape)
        sparse_tensor = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)  # (port) torch.sparse.FloatTensor
    elif torch.is_tensor(matrix):
        row, col = matrix.nonzero().t()
        indices = torch.stack([row, col])
        values = matrix[row, col]
        shape = torch.Size(matrix.shape)
        sparse_tensor = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)
    else:
        raise ValueError(f"matrix must be scipy.sparse or torch.Tensor (got {type(matrix)} instead).")
    return sparse_tensor.coalesce()


def normalize(X):
    """sklearn.preprocessing.normalize (norm='l2', rows) on a scipy sparse matrix (port: no sklearn here)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    norms = np.sqrt(np.ravel(X.multiply(X).sum(1)))
    norms[norms == 0.0] = 1.0
    return sp.csr_matrix(X.multiply(1 / norms[:, None]))


# ------------------------------------------------------------------------------------------- nocd/generate.py
def generate_bigclam(F, B=None, D=None, p_no_comm=0, seed=None):
    """Produce the graph according to the BigCLAM model."""
    N, K = F.shape
    if B is None and D is not None:
        raise ValueError("Can only use D if B is provided.")
    if B is None:
        B = np.eye(K)
    if np.any(F < 0):
        raise ValueError("F must be nonnegative.")
    if np.any(B < 0):
        raise ValueError("B must be nonnegative.")
    if D is not None:
        D[D == 0]= 1
        if np.any(D < 0):
            raise ValueError("D must be nonnegative.")
        F = F * D[:, None]

    if seed is not None:
        np.random.seed(seed)
    eps = np.log(1 / (1 - p_no_comm))
    probas = 1 - np.exp(-F @ B @ F.T - eps)
    A = np.tril(np.random.binomial(1, probas))
    A = A + A.T
    np.fill_diagonal(A, 0)
    return A


# --------------------------------------------------------------------------------------------- nocd/nn/gcn.py
def sparse_or_dense_dropout(x, p=0.5, training=True):
    if x.is_sparse:  # (port) isinstance(x, (torch.sparse.FloatTensor, torch.cuda.sparse.FloatTensor))
        new_values = F.dropout(x.values(), p=p, training=training)
        return torch.sparse_coo_tensor(x.indices(), new_values, x.size(), check_invariants=True)
    else:
        return F.dropout(x, p=p, training=training)


class GraphConvolution(nn.Module):
    """Graph convolution layer."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x, adj):
        return adj @ (x @ self.weight) + self.bias


class GCN(nn.Module):
    """Graph convolution network."""
    def __init__(self, input_dim, hidden_dims, output_dim, dropout=0.5, batch_norm=False):
        super().__init__()
        self.dropout = dropout
        layer_dims = np.concatenate([hidden_dims, [output_dim]]).astype(np.int32)
        self.layers = nn.ModuleList([GraphConvolution(input_dim, layer_dims[0])])
        for idx in range(len(layer_dims) - 1):
            self.layers.append(GraphConvolution(layer_dims[idx], layer_dims[idx + 1]))
        if batch_norm:
            self.batch_norm = [
                nn.BatchNorm1d(dim, affine=False, track_running_stats=False) for dim in hidden_dims
            ]
        else:
            self.batch_norm = None

    @staticmethod
    def normalize_adj(adj : sp.csr_matrix):
        """Normalize adjacency matrix and convert it to a sparse tensor."""
        if sp.isspmatrix(adj):
            adj = adj.tolil()
            adj.setdiag(1)
            adj = adj.tocsr()
            deg = np.ravel(adj.sum(1))
            deg_sqrt_inv = 1 / np.sqrt(deg)
            adj_norm = adj.multiply(deg_sqrt_inv[:, None]).multiply(deg_sqrt_inv[None, :])
        elif torch.is_tensor(adj):
            deg = adj.sum(1)
            deg_sqrt_inv = 1 / torch.sqrt(deg)
            adj_norm = adj * deg_sqrt_inv[:, None] * deg_sqrt_inv[None, :]
        return to_sparse_tensor(adj_norm)

    def forward(self, x, adj):
        for idx, gcn in enumerate(self.layers):
            if self.dropout != 0:
                x = sparse_or_dense_dropout(x, p=self.dropout, training=self.training)
            x = gcn(x, adj)
            if idx != len(self.layers) - 1:
                x = F.relu(x)
                if self.batch_norm is not None:
                    x = self.batch_norm[idx](x)
        return x

    def get_weights(self):
        """Return the weight matrices of the model."""
        return [w for n, w in self.named_parameters() if 'bias' not in n]

    def get_biases(self):
        """Return the bias vectors of the model."""
        return [w for n, w in self.named_parameters() if 'bias' in n]


# ----------------------------------------------------------------------------------------- nocd/nn/decoder.py
class BernoulliDecoder(nn.Module):
    def __init__(self, num_nodes, num_edges, balance_loss=False):
        super().__init__()
        self.num_nodes = num_nodes
        self.num_edges = num_edges
        self.num_possible_edges = num_nodes**2 - num_nodes
        self.num_nonedges = self.num_possible_edges - self.num_edges
        self.balance_loss = balance_loss


class BerpoDecoder(BernoulliDecoder):
    def __init__(self, num_nodes, num_edges, balance_loss=False, bug=None):
        super().__init__(num_nodes, num_edges, balance_loss)
        edge_proba = num_edges / (num_nodes**2 - num_nodes)
        self.eps = -np.log(1 - edge_proba)
        self.bug = bug

    def forward_batch(self, emb, idx):
        e1, e2 = idx.t()
        logits = torch.sum(emb[e1] * emb[e2], dim=1)
        logits += self.eps
        probs = 1 - torch.exp(-logits)
        return td.Bernoulli(probs=probs)

    def forward_full(self, emb):
        logits = emb @ emb.t()
        logits += self.eps
        probs = 1 - torch.exp(-logits)
        return td.Bernoulli(probs=probs)

    def loss_batch(self, emb, ones_idx, zeros_idx):
        """Compute BerPo loss for a batch of edges and non-edges."""
        # Loss for edges
        e1, e2 = ones_idx[:, 0], ones_idx[:, 1]
        edge_dots = torch.sum(emb[e1] * emb[e2], dim=1)
        if self.bug == "edge_loss_sign_flipped":
            loss_edges = torch.mean(torch.log(-torch.expm1(-self.eps - edge_dots)))
        else:
            loss_edges = -torch.mean(torch.log(-torch.expm1(-self.eps - edge_dots)))

        # Loss for non-edges
        ne1, ne2 = zeros_idx[:, 0], zeros_idx[:, 1]
        loss_nonedges = torch.mean(torch.sum(emb[ne1] * emb[ne2], dim=1))
        if self.balance_loss:
            neg_scale = 1.0
        else:
            neg_scale = self.num_nonedges / self.num_edges
        return (loss_edges + neg_scale * loss_nonedges) / (1 + neg_scale)

    def loss_full(self, emb, adj):
        """Compute BerPo loss for all edges & non-edges in a graph."""
        e1, e2 = adj.nonzero()
        edge_dots = torch.sum(emb[e1] * emb[e2], dim=1)
        loss_edges = -torch.sum(torch.log(-torch.expm1(-self.eps - edge_dots)))

        # Correct for overcounting F_u * F_v for edges and nodes with themselves
        self_dots_sum = torch.sum(emb * emb)
        correction = self_dots_sum + torch.sum(edge_dots)
        sum_emb = torch.sum(emb, dim=0, keepdim=True).t()
        loss_nonedges = torch.sum(emb @ sum_emb) - correction

        if self.balance_loss:
            neg_scale = 1.0
        else:
            neg_scale = self.num_nonedges / self.num_edges
        return (loss_edges / self.num_edges + neg_scale * loss_nonedges / self.num_nonedges) / (1 + neg_scale)


# -------------------------------------------------------------------------------------------- nocd/sampler.py
class EdgeSampler(data_utils.Dataset):
    """Sample edges and non-edges uniformly from a graph."""
    def __init__(self, A, num_pos=1000, num_neg=1000):
        self.num_pos = num_pos
        self.num_neg = num_neg
        self.A = A
        self.edges = np.transpose(A.nonzero())
        self.num_nodes = A.shape[0]
        self.num_edges = self.edges.shape[0]

    def __getitem__(self, key):
        np.random.seed(key)
        edges_idx = np.random.randint(0, self.num_edges, size=self.num_pos, dtype=np.int64)
        next_edges = self.edges[edges_idx, :]

        # Select num_neg non-edges
        generated = False
        while not generated:
            candidate_ne = np.random.randint(0, self.num_nodes, size=(2*self.num_neg, 2), dtype=np.int64)
            cne1, cne2 = candidate_ne[:, 0], candidate_ne[:, 1]
            to_keep = (1 - self.A[cne1, cne2]).astype(bool).A1 * (cne1 != cne2)  # (port) np.bool
            next_nonedges = candidate_ne[to_keep][:self.num_neg]
            generated = to_keep.sum() >= self.num_neg
        return torch.LongTensor(next_edges), torch.LongTensor(next_nonedges)

    def __len__(self):
        return 2**32


def collate_fn(batch):
    edges, nonedges = batch[0]
    return (edges, nonedges)


def get_edge_sampler(A, num_pos=1000, num_neg=1000, num_workers=2):
    data_source = EdgeSampler(A, num_pos, num_neg)
    return data_utils.DataLoader(data_source, num_workers=num_workers, collate_fn=collate_fn)


# ----------------------------------------------------------------------------------------- nocd/train.py
class ModelSaver:
    """In-memory saver for model parameters."""
    def __init__(self, model):
        self.model = model

    def save(self):
        self.state_dict = deepcopy(self.model.state_dict())

    def restore(self):
        self.model.load_state_dict(self.state_dict)


class NoImprovementStopping:
    """Stop training when the validation metric stops improving (mode 'min', absolute tolerance)."""
    def __init__(self, validation_fn, patience=10, tolerance=0.0):
        self.validation_fn = validation_fn
        self.patience = patience
        self.tolerance = tolerance
        self._is_better = lambda new, best: new < best - tolerance
        self.reset()

    def reset(self):
        self._best_value = self.validation_fn()
        self._num_bad_epochs = 0
        self._time_to_save = False

    def next_step(self):
        last_value = self.validation_fn()
        if self._is_better(last_value, self._best_value):
            self._time_to_save = True
            self._best_value = last_value
            self._num_bad_epochs = 0
        else:
            self._num_bad_epochs += 1

    def should_save(self):
        if self._time_to_save:
            self._time_to_save = False
            return True
        else:
            return False

    def should_stop(self):
        return self._num_bad_epochs > self.patience


# ------------------------------------------------------------------------------------------ (port) the data
def synthetic_graph(rng, seed, N=300, K=6, D=60, bug=None):
    """A BigCLAM graph from affiliations (one or two communities per node) and community-worded binary features."""
    Z_gt = np.zeros([N, K], dtype=np.float32)
    Z_gt[np.arange(N), rng.integers(0, K, N)] = 1
    second = rng.random(N) < 0.3
    Z_gt[np.arange(N)[second], rng.integers(0, K, second.sum())] = 1
    Fm = Z_gt * rng.uniform(0.4, 0.7, size=(N, K))
    A = sp.csr_matrix(generate_bigclam(Fm, p_no_comm=0.002, seed=seed).astype(np.float32))
    vocab = rng.permutation(D).reshape(K, D // K)
    P = np.full([N, D], 0.03)
    for k in range(K):
        P[np.ix_(Z_gt[:, k] > 0, vocab[k])] = 0.4
    X = (rng.random([N, D]) < P).astype(np.float32)
    if bug == "features_misaligned":
        X = X[rng.permutation(N)]  # the attribute rows in another node order than the adjacency
    return A, sp.csr_matrix(X), Z_gt


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    A, X, Z_gt = synthetic_graph(rng, seed, bug=bug)
    N, K = Z_gt.shape

    hidden_sizes = [64]     # hidden sizes of the GNN  (port) [128]
    weight_decay = 1e-2     # strength of L2 regularization on GNN weights
    dropout = 0.5           # whether to use dropout
    batch_norm = True       # whether to use batch norm
    lr = 1e-2               # learning rate  (port) 1e-3
    max_epochs = 500        # number of epochs to train
    balance_loss = True     # whether to use balanced loss
    stochastic_loss = True  # whether to use stochastic or full-batch training
    batch_size = 1000       # batch size (only for stochastic training)  (port) 20000

    x_norm = normalize(X)  # node features
    x_norm = torch.FloatTensor(x_norm.toarray())  # (port) dense: nocd.utils.to_sparse_tensor(x_norm).cuda()

    sampler = get_edge_sampler(A, batch_size, batch_size, num_workers=0)
    gnn = GCN(x_norm.shape[1], hidden_sizes, K, batch_norm=batch_norm, dropout=dropout)
    adj_norm = gnn.normalize_adj(A)
    decoder = BerpoDecoder(N, A.nnz, balance_loss=balance_loss, bug=bug)
    opt = torch.optim.Adam(gnn.parameters(), lr=lr)

    st = {"val_loss": np.inf, "epoch": 0, "it": iter(sampler)}
    validation_fn = lambda: st["val_loss"]
    early_stopping = NoImprovementStopping(validation_fn, patience=10)
    model_saver = ModelSaver(gnn)

    def train_step():
        epoch, batch = st["epoch"], next(st["it"])
        st["epoch"] += 1
        if epoch > max_epochs:
            pass  # (port) the notebook breaks here; the self-check never gets this far
        if epoch % 25 == 0:
            with torch.no_grad():
                gnn.eval()
                # Compute validation loss
                Z = F.relu(gnn(x_norm, adj_norm))
                st["val_loss"] = decoder.loss_full(Z, A)

                # Check if it's time for early stopping / to save the model
                early_stopping.next_step()
                if early_stopping.should_save():
                    model_saver.save()

        # Training step
        if bug != "train_mode_not_restored":
            gnn.train()
        opt.zero_grad()
        Z = F.relu(gnn(x_norm, adj_norm))
        ones_idx, zeros_idx = batch
        if stochastic_loss:
            loss = decoder.loss_batch(Z, ones_idx, zeros_idx)
        else:
            loss = decoder.loss_full(Z, A)
        loss += l2_reg_loss(gnn, scale=weight_decay)
        loss.backward()
        opt.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was_training = model.training
        with torch.no_grad():
            model.eval()
            Z = F.relu(model(x_norm, adj_norm))
            val_loss = decoder.loss_full(Z, A)
        model.train(was_training)
        return float(val_loss)

    def loss_fn(out, idx):
        ones_idx, zeros_idx = idx
        Z = F.relu(out)
        return decoder.loss_batch(Z, ones_idx, zeros_idx) + l2_reg_loss(gnn, scale=weight_decay)

    state = np.random.get_state()
    batch = ((x_norm, adj_norm), sampler.dataset[10**6 + seed])
    np.random.set_state(state)
    return Program(name="nocd_communities", model=gnn, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn, loader=sampler)


build = functools.partial(_build, bug=None)

BUGS = [
    # the minus of the edge term dropped: the likelihood of the observed edges is minimized (classic sign slip).
    Bug("edge_loss_sign_flipped", functools.partial(_build, bug="edge_loss_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the node attribute rows in another node order than the adjacency matrix (classic misalignment).
    Bug("features_misaligned", functools.partial(_build, bug="features_misaligned"), "learning_ledger", ("TASK",)),
    # gnn.train() left out after the validation block: from the first validation on, every step trains in eval
    # mode, without dropout (classic).
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.trained_in_eval_mode"),
]
