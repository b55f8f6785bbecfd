"""GRACE (deep GRAph Contrastive rEpresentation learning): a two-layer GCN encoder run on two corrupted views of one
graph (edges dropped with ``dropout_adj``, feature columns zeroed with ``drop_feature``, different rates per view),
a two-layer ELU projection head, and the node-level InfoNCE of ``Model.semi_loss`` (cosine similarities over
``tau``, the positive is the same node in the other view, negatives are every other node of both views), averaged
over both directions; Adam with weight decay, one full-graph step per epoch (``train.py``), then a logistic-regression
probe on the embeddings (``eval.py``).

Source: https://github.com/CRIPAC-DIG/GRACE
Commit: b3b5ac3fcbaabbb50e8bd69a075b46cd82a50378
Files: train.py, model.py, eval.py, config.yaml (the ``Cora`` entry)
License: Apache-2.0 (full text in LICENSES/CRIPAC-DIG-GRACE.txt)
Domain: self-supervised, contrastive (graph, two augmented views, InfoNCE)

Deviations from the original:
- sizes: num_hidden 128 -> 32, num_proj_hidden 128 -> 32; learning_rate 0.0005 -> 0.005 (30 steps instead of 200
  epochs); the other ``Cora`` settings are unchanged (relu, 2 layers, drop_edge_rate 0.2 / 0.4, drop_feature_rate
  0.3 / 0.4, tau 0.4, weight_decay 1e-5);
- data: Cora (``Planetoid`` with ``NormalizeFeatures``) is replaced by a synthetic citation graph made from
  ``seed``: 160 nodes, 60 binary bag-of-words features, 4 classes, each class with its own topic words (p 0.3,
  others p 0.03; every node has at least one of its class's words), symmetric edges mostly inside a class
  (p 0.08 inside, 0.004 across), stored as an ``edge_index`` of both directions; features row-normalized as
  ``NormalizeFeatures`` does;
- torch_geometric is not available here: ``GCNConv`` is written out (self loops added, symmetric
  ``D^-1/2 (A + I) D^-1/2`` normalization of the edges present, glorot weight without bias in the linear map, a
  zero-initialized bias added after aggregation, messages from source to target as in PyG), and ``dropout_adj``
  (each directed edge kept with probability 1 - p, ``force_undirected=False``) with it;
- one ``train_step`` is one call of ``train()``; the ``print`` of the loop and ``torch.cuda.set_device`` are dropped;
- ``eval_fn`` is ``test()`` with the probe trained in torch instead of sklearn's grid-searched
  ``LogisticRegression`` (sklearn is not a dependency here): the repository's own ``LogReg`` on l2-normalized
  embeddings of 10% of the nodes (``ratio=0.1``), Adam lr 0.01 for 100 steps, micro-F1 (accuracy) on the rest;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_NODES, N_FEAT, N_CLASS = 160, 60, 4

# config.yaml, Cora (num_hidden / num_proj_hidden and learning_rate changed, see the header)
config = {
    'learning_rate': 0.005,
    'num_hidden': 32,
    'num_proj_hidden': 32,
    'activation': 'relu',
    'base_model': 'GCNConv',
    'num_layers': 2,
    'drop_edge_rate_1': 0.2,
    'drop_edge_rate_2': 0.4,
    'drop_feature_rate_1': 0.3,
    'drop_feature_rate_2': 0.4,
    'tau': 0.4,
    'num_epochs': 200,
    'weight_decay': 0.00001,
}


# ---- torch_geometric, written out ----------------------------------------------------------------------------

class GCNConv(nn.Module):
    """PyG's ``GCNConv`` (add_self_loops, normalize, bias): lin without bias, symmetric normalization, then bias."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n)
        row = torch.cat([edge_index[0], loops])  # source
        col = torch.cat([edge_index[1], loops])  # target
        deg = torch.zeros(n).index_add_(0, col, torch.ones(col.numel()))
        norm = deg.pow(-0.5)[row] * deg.pow(-0.5)[col]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, h[row] * norm[:, None])
        return out + self.bias


def dropout_adj(edge_index, p=0.5):
    """PyG's ``dropout_adj`` with ``force_undirected=False``, ``training=True``: returns (edge_index, edge_attr)."""
    mask = torch.rand(edge_index.size(1)) >= p
    return edge_index[:, mask], None


# ---- model.py -------------------------------------------------------------------------------------------------

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


class Encoder(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int, activation,
                 base_model=GCNConv, k: int = 2):
        super(Encoder, self).__init__()
        self.base_model = base_model

        assert k >= 2
        self.k = k
        self.conv = [base_model(in_channels, 2 * out_channels)]
        for _ in range(1, k-1):
            self.conv.append(base_model(2 * out_channels, 2 * out_channels))
        self.conv.append(base_model(2 * out_channels, out_channels))
        self.conv = nn.ModuleList(self.conv)

        self.activation = activation

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor):
        for i in range(self.k):
            x = self.activation(self.conv[i](x, edge_index))
        return x


class Model(torch.nn.Module):
    def __init__(self, encoder: Encoder, num_hidden: int, num_proj_hidden: int,
                 tau: float = 0.5, bug=None):
        super(Model, self).__init__()
        self.encoder: Encoder = encoder
        self.tau: float = tau

        self.fc1 = torch.nn.Linear(num_hidden, num_proj_hidden)
        self.fc2 = torch.nn.Linear(num_proj_hidden, num_hidden)
        self.bug = bug

    def forward(self, x: torch.Tensor,
                edge_index: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, edge_index)

    def projection(self, z: torch.Tensor) -> torch.Tensor:
        z = F.elu(self.fc1(z))
        return self.fc2(z)

    def sim(self, z1: torch.Tensor, z2: torch.Tensor):
        if self.bug == "normalized_over_nodes":
            # each feature column normalized across the nodes instead of each node's vector: not cosines
            z1 = F.normalize(z1, dim=0)
            z2 = F.normalize(z2, dim=0)
            return torch.mm(z1, z2.t())
        z1 = F.normalize(z1)
        z2 = F.normalize(z2)
        return torch.mm(z1, z2.t())

    def semi_loss(self, z1: torch.Tensor, z2: torch.Tensor):
        f = lambda x: torch.exp(x / self.tau)
        refl_sim = f(self.sim(z1, z1))
        between_sim = f(self.sim(z1, z2))

        return -torch.log(
            between_sim.diag()
            / (refl_sim.sum(1) + between_sim.sum(1) - refl_sim.diag()))

    def loss(self, z1: torch.Tensor, z2: torch.Tensor,
             mean: bool = True, batch_size: int = 0):
        h1 = self.projection(z1)
        h2 = self.projection(z2)

        l1 = self.semi_loss(h1, h2)
        l2 = self.semi_loss(h2, h1)

        ret = (l1 + l2) * 0.5
        ret = ret.mean() if mean else ret.sum()

        return ret


def drop_feature(x, drop_prob):
    drop_mask = torch.empty(
        (x.size(1), ),
        dtype=torch.float32,
        device=x.device).uniform_(0, 1) < drop_prob
    x = x.clone()
    x[:, drop_mask] = 0

    return x


# ---- the data: a synthetic citation graph in Cora's shape ------------------------------------------------------

def load_graph(seed):
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
    src, dst = np.nonzero(upper | upper.T)
    x = x / x.sum(1, keepdims=True)  # T.NormalizeFeatures()
    return torch.from_numpy(x), torch.from_numpy(np.stack([src, dst])).long(), torch.from_numpy(classes).long()


# ---- train.py -------------------------------------------------------------------------------------------------

def test(model: Model, x, edge_index, y):
    """``test()``: embeddings of the whole graph, then ``label_classification(z, y, ratio=0.1)`` (see the header)."""
    model.eval()
    with torch.no_grad():
        z = F.normalize(model(x, edge_index))
    perm = torch.randperm(z.size(0), generator=torch.Generator().manual_seed(0))
    n_train = int(0.1 * z.size(0))
    tr, te = perm[:n_train], perm[n_train:]
    log = LogReg(z.size(1), N_CLASS)
    opt = torch.optim.Adam(log.parameters(), lr=0.01)
    for _ in range(100):
        opt.zero_grad()
        F.cross_entropy(log(z[tr]), y[tr]).backward()
        opt.step()
    model.train()
    return float((log(z[te]).argmax(1) == y[te]).float().mean())


def _build(seed, bug=None):
    torch.manual_seed(seed)
    x, edge_index, y = load_graph(seed)

    learning_rate = config['learning_rate']
    num_hidden = config['num_hidden']
    num_proj_hidden = config['num_proj_hidden']
    activation = ({'relu': F.relu, 'prelu': nn.PReLU()})[config['activation']]
    base_model = ({'GCNConv': GCNConv})[config['base_model']]
    num_layers = config['num_layers']

    drop_edge_rate_1 = config['drop_edge_rate_1']
    drop_edge_rate_2 = config['drop_edge_rate_2']
    drop_feature_rate_1 = config['drop_feature_rate_1']
    drop_feature_rate_2 = config['drop_feature_rate_2']
    tau = config['tau']
    weight_decay = config['weight_decay']

    encoder = Encoder(x.size(1), num_hidden, activation,
                      base_model=base_model, k=num_layers)
    model = Model(encoder, num_hidden, num_proj_hidden, tau, bug=bug)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=learning_rate, weight_decay=weight_decay)

    def views():
        edge_index_1 = dropout_adj(edge_index, p=drop_edge_rate_1)[0]
        edge_index_2 = dropout_adj(edge_index, p=drop_edge_rate_2)[0]
        x_1 = drop_feature(x, drop_feature_rate_1)
        x_2 = drop_feature(x, drop_feature_rate_2)
        if bug == "second_view_nodes_shuffled":
            # DGI's corruption (rows shuffled) taken in as one more augmentation of the second view: node i of
            # view 2 carries another node's features, and the positive pairs are no longer the same node
            x_2 = x_2[torch.randperm(x_2.size(0))]
        return x_1, edge_index_1, x_2, edge_index_2

    def train(model: Model, x, edge_index):
        model.train()
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        x_1, edge_index_1, x_2, edge_index_2 = views()
        z1 = model(x_1, edge_index_1)
        z2 = model(x_2, edge_index_2)

        loss = model.loss(z1, z2, batch_size=0)
        loss.backward()
        optimizer.step()

        return loss.item()

    def loss_fn(z1, view_2):
        return model.loss(z1, model(**view_2), batch_size=0)

    x_1, edge_index_1, x_2, edge_index_2 = views()
    batch = ({"x": x_1, "edge_index": edge_index_1}, {"x": x_2, "edge_index": edge_index_2})
    return Program(name="grace_graph_contrastive", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=lambda: train(model, x, edge_index),
                   eval_fn=lambda model, batch: test(model, x, edge_index, y))


build = functools.partial(_build, bug=None)

BUGS = [
    # F.normalize(z, dim=0): every feature normalized across the nodes instead of every node's vector, so the
    # "similarities" over tau are no longer cosines and the InfoNCE compares unbounded products.
    Bug("normalized_over_nodes", functools.partial(_build, bug="normalized_over_nodes"), "learning_ledger",
        ("OBJECTIVE",)),
    # the second view's node rows shuffled (DGI's corruption reused as an augmentation): the positive of node i is
    # another node's features, a pairing unrelated to the graph.
    Bug("second_view_nodes_shuffled", functools.partial(_build, bug="second_view_nodes_shuffled"),
        "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() left out of train(): every step adds its gradient to all the earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (), kind="step.grad_accumulation"),
]
