# ruff: noqa: UP008
"""GraphSAGE on ogbn-arxiv from the OGB examples (``examples/nodeproppred/arxiv/gnn.py --use_sage``): three
``SAGEConv`` layers (mean aggregation of the neighbours through ``lin_l`` plus the node's own features through
``lin_r``) over the symmetrized sparse adjacency, BatchNorm1d, ReLU and dropout 0.5 between them, ``log_softmax``
output; full-batch training with ``F.nll_loss`` on the training nodes, Adam lr 0.01, and the example's ``test`` with
the OGB ``Evaluator``'s accuracy on the train/valid/test splits.

Source: https://github.com/snap-stanford/ogb
Commit: 61e9784ca76edeaa6e259ba0f836099608ff0586
Files: examples/nodeproppred/arxiv/gnn.py, ogb/nodeproppred/evaluate.py (``_eval_acc``); torch_geometric's
``SAGEConv`` (the mean-aggregation path the example uses) written out
License: MIT (Copyright (c) 2019 OGB Team; full text in LICENSES/snap-stanford-ogb.txt)
Domain: GNN, node classification (full-batch GraphSAGE, semi-supervised on a citation graph)

Kept as written: ``SAGE`` (``convs``, ``bns``, ``reset_parameters``, the forward: conv, bn, relu,
``F.dropout(..., training=self.training)``, last conv, ``log_softmax(dim=-1)``), ``train`` (``model.train()``,
``zero_grad``, ``model(data.x, data.adj_t)[train_idx]``, ``F.nll_loss`` against ``data.y.squeeze(1)[train_idx]``,
backward, step), ``test`` (argmax predictions, the Evaluator's accuracy per split), ``main``'s settings (3 layers,
dropout 0.5, lr 0.01, Adam, ``model.reset_parameters()`` before the run, ``adj_t.to_symmetric()``) and the
Evaluator's ``_eval_acc``.

Deviations from the original:
- sizes: hidden 256 -> 64; ogbn-arxiv (169,343 papers, 128-dim features, 40 subject areas) -> a synthetic
  citation graph of 800 nodes with 32-dim features and 8 classes made from ``seed`` (features a noisy class
  centroid; about eight directed citations per node, three in ten to a node of the same class, the rest to any
  node), split 60/20/20 into sorted index sets drawn at random (arxiv's split is by publication year, which does
  not follow the node order); one run (``--runs 10``) and no Logger;
- torch_geometric's ``SAGEConv`` (``lin_l`` with bias on the mean of the neighbours, ``lin_r`` without bias on the
  root, no normalization) and torch_sparse's ``SparseTensor`` / ``to_symmetric`` / ``matmul(adj_t, x,
  reduce='mean')`` are written out with a ``torch.sparse`` adjacency and a row-degree division;
  ``T.ToSparseTensor()`` is that adjacency; ``PygNodePropPredDataset`` is replaced by the synthetic data;
- ``.to(device)`` is dropped; one ``train_step`` is one call of ``train`` (one epoch) and returns its loss;
  ``eval_fn`` is ``test``'s validation accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ARGS = types.SimpleNamespace(use_sage=True, num_layers=3, hidden_channels=64, dropout=0.5, lr=0.01, epochs=500,
                             runs=1)


# ---- torch_geometric.nn.SAGEConv (mean aggregation over a SparseTensor adj_t), written out ------------------------


class SAGEConv(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.lin_l = torch.nn.Linear(in_channels, out_channels, bias=True)
        self.lin_r = torch.nn.Linear(in_channels, out_channels, bias=False)

    def reset_parameters(self):
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def forward(self, x, adj_t):
        # matmul(adj_t, x, reduce='mean'): the mean of each row's neighbours
        deg = torch.sparse.sum(adj_t, dim=1).to_dense().clamp(min=1).unsqueeze(-1)
        out = torch.sparse.mm(adj_t, x) / deg
        out = self.lin_l(out)
        out = out + self.lin_r(x)
        return out


def to_symmetric(adj_t):
    # torch_sparse's SparseTensor.to_symmetric(): the union of the edges and their reverses (values summed, 1 here)
    sym = (adj_t + adj_t.t()).coalesce()
    return torch.sparse_coo_tensor(sym.indices(), torch.ones_like(sym.values()), sym.shape).coalesce()


# ---- examples/nodeproppred/arxiv/gnn.py ---------------------------------------------------------------------------


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers,
                 dropout, bug=None):
        super(SAGE, self).__init__()

        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.bns = torch.nn.ModuleList()
        self.bns.append(torch.nn.BatchNorm1d(hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
            self.bns.append(torch.nn.BatchNorm1d(hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

        self.dropout = dropout
        self.bug = bug

    def reset_parameters(self):
        for conv in self.convs:
            conv.reset_parameters()
        for bn in self.bns:
            bn.reset_parameters()

    def forward(self, x, adj_t):
        for i, conv in enumerate(self.convs[:-1]):
            x = conv(x, adj_t)
            x = self.bns[i](x)
            x = F.relu(x)
            if self.bug == "dropout_without_training_flag":
                x = F.dropout(x, p=self.dropout)
            else:
                x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.convs[-1](x, adj_t)
        if self.bug == "softmax_not_log_softmax":
            return x.softmax(dim=-1)
        return x.log_softmax(dim=-1)


def _eval_acc(y_true, y_pred):
    acc_list = []

    for i in range(y_true.shape[1]):
        is_labeled = y_true[:,i] == y_true[:,i]
        correct = y_true[is_labeled,i] == y_pred[is_labeled,i]
        acc_list.append(float(np.sum(correct))/len(correct))

    return {'acc': sum(acc_list)/len(acc_list)}


class Evaluator:
    def __init__(self, name):
        self.name = name

    def eval(self, input_dict):
        return _eval_acc(input_dict['y_true'].numpy(), input_dict['y_pred'].numpy())


def train(model, data, train_idx, optimizer, bug=None):
    model.train()

    optimizer.zero_grad()
    out = model(data.x, data.adj_t)[train_idx]
    if bug == "labels_not_indexed_by_train_idx":
        # the labels sliced by position instead of by the training nodes' indices
        loss = F.nll_loss(out, data.y.squeeze(1)[:len(train_idx)])
    else:
        loss = F.nll_loss(out, data.y.squeeze(1)[train_idx])
    loss.backward()
    optimizer.step()

    return loss.item()


@torch.no_grad()
def test(model, data, split_idx, evaluator):
    model.eval()

    out = model(data.x, data.adj_t)
    y_pred = out.argmax(dim=-1, keepdim=True)

    train_acc = evaluator.eval({
        'y_true': data.y[split_idx['train']],
        'y_pred': y_pred[split_idx['train']],
    })['acc']
    valid_acc = evaluator.eval({
        'y_true': data.y[split_idx['valid']],
        'y_pred': y_pred[split_idx['valid']],
    })['acc']
    test_acc = evaluator.eval({
        'y_true': data.y[split_idx['test']],
        'y_pred': y_pred[split_idx['test']],
    })['acc']

    return train_acc, valid_acc, test_acc


# ---- the synthetic ogbn-arxiv stand-in ----------------------------------------------------------------------------


def _synthetic_arxiv(seed, n=800, d=32, c=8, out_deg=8):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=gen)
    centroids = torch.randn(c, d, generator=gen)
    x = 0.3 * centroids[y] + torch.randn(n, d, generator=gen)
    by_class = [torch.nonzero(y == k).squeeze(1) for k in range(c)]
    src, dst = [], []
    for i in range(n):
        for _ in range(out_deg):
            if float(torch.rand(1, generator=gen)) < 0.3:
                pool = by_class[int(y[i])]
            else:
                pool = torch.arange(n)
            j = int(pool[int(torch.randint(0, len(pool), (1,), generator=gen))])
            if j != i:
                src.append(i)
                dst.append(j)
    adj_t = torch.sparse_coo_tensor(torch.tensor([src, dst]), torch.ones(len(src)), (n, n)).coalesce()
    adj_t = torch.sparse_coo_tensor(adj_t.indices(), torch.ones_like(adj_t.values()), (n, n)).coalesce()
    perm = torch.randperm(n, generator=gen)
    split_idx = {"train": perm[:int(0.6 * n)].sort()[0], "valid": perm[int(0.6 * n):int(0.8 * n)].sort()[0],
                 "test": perm[int(0.8 * n):].sort()[0]}
    data = types.SimpleNamespace(x=x, y=y.unsqueeze(1), adj_t=adj_t, num_features=d)
    return data, split_idx, c


def _build(seed, bug=None):
    args = ARGS
    torch.manual_seed(seed)

    data, split_idx, num_classes = _synthetic_arxiv(seed)
    data.adj_t = to_symmetric(data.adj_t)

    train_idx = split_idx['train']

    model = SAGE(data.num_features, args.hidden_channels,
                 num_classes, args.num_layers,
                 args.dropout, bug=bug)

    evaluator = Evaluator(name='ogbn-arxiv')

    model.reset_parameters()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step():
        return train(model, data, train_idx, optimizer, bug=bug)

    def loss_fn(out, y):
        return F.nll_loss(out[train_idx], y.squeeze(1)[train_idx])

    def eval_fn(model_, batch):
        return test(model_, data, split_idx, evaluator)[1]

    return Program(name="ogb_arxiv_sage", model=model, batch=((data.x, data.adj_t), data.y), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the training nodes' outputs scored against the first len(train_idx) labels
    # (``data.y.squeeze(1)[:len(train_idx)]`` for ``[train_idx]``): the split is not a prefix of the node order, so
    # most outputs are trained toward another node's label.
    Bug("labels_not_indexed_by_train_idx", functools.partial(_build, bug="labels_not_indexed_by_train_idx"),
        "learning_ledger", ("TASK",)),
    # classic: ``softmax`` where ``log_softmax`` belongs: ``F.nll_loss`` then takes minus the probability, not the
    # log-likelihood, and its gradient vanishes as predictions grow confident.
    Bug("softmax_not_log_softmax", functools.partial(_build, bug="softmax_not_log_softmax"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``F.dropout`` without ``training=self.training``: dropout stays on at evaluation.
    Bug("dropout_without_training_flag", functools.partial(_build, bug="dropout_without_training_flag"),
        "six_claims", ("EVALUATION",)),
]
