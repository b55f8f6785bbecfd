"""Kipf & Welling style GCN for semi-supervised node classification: GraphConvolution layers computing
torch.sparse.mm(adj, x @ W) on a symmetric-normalized sparse COO adjacency (D^-1/2 (A+I) D^-1/2), dropout, log_softmax
output, and F.nll_loss over the train_mask nodes only; Adam lr 0.01 weight_decay 5e-4. The whole graph is one batch:
((features, adj), labels), and the model's forward takes the (x, adj) pair."""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_NODES, N_FEATURES, N_CLASSES = 48, 16, 3


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, x, adj):
        support = torch.mm(x, self.weight)
        output = torch.sparse.mm(adj, support)
        return output + self.bias if self.bias is not None else output


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout=0.5, softmax_dim=1):
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout
        self.softmax_dim = softmax_dim

    def forward(self, data):
        x, adj = data
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=self.softmax_dim)


def normalize_adj(edge_index, n):
    a = torch.zeros(n, n)
    a[edge_index[0], edge_index[1]] = 1.0
    a = ((a + a.T) > 0).float() + torch.eye(n)
    d_inv_sqrt = a.sum(1).pow(-0.5)
    return (d_inv_sqrt[:, None] * a * d_inv_sqrt[None, :]).to_sparse_coo()


def make_graph(seed: int):
    """A stochastic block model: nodes of the same class link more often; features are the class mean plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(N_NODES) % N_CLASSES
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, torch.tensor(0.25), torch.tensor(0.02))
    edge_index = (torch.rand(N_NODES, N_NODES, generator=g) < p).nonzero().T
    means = 1.5 * torch.randn(N_CLASSES, N_FEATURES, generator=g)
    features = means[labels] + torch.randn(N_NODES, N_FEATURES, generator=g)
    perm = torch.randperm(N_NODES, generator=g)
    train_mask = torch.zeros(N_NODES, dtype=torch.bool)
    train_mask[perm[: N_NODES // 2]] = True

    def community(data):
        x = data[0]
        return ((x[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)

    return features, normalize_adj(edge_index, N_NODES), labels, train_mask, community


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    features, adj, labels, idx_train, community = make_graph(seed)
    model = GCN(nfeat=N_FEATURES, nhid=16, nclass=N_CLASSES, dropout=0.5, softmax_dim=0 if bug == "log_softmax_dim0" else 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def loss_fn(output, y):
        return F.nll_loss(output[idx_train], y[idx_train])

    def train_step():
        model.train()
        optimizer.zero_grad()
        output = model((features, adj))
        loss_train = loss_fn(output, labels)
        loss_train.backward()
        optimizer.step()
        return loss_train

    def evaluate(net, batch):
        data, y = batch
        net.eval()
        with torch.no_grad():
            pred = net(data).argmax(1)
        net.train()
        return (pred[~idx_train] == y[~idx_train]).float().mean().item()

    return Program(name="gcn_sparse", model=model, batch=((features, adj), labels), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=community, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("log_softmax_dim0", functools.partial(_build, bug="log_softmax_dim0"), "learning_ledger", ("OBJECTIVE",)),
]
