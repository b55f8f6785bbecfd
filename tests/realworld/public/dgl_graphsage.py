"""GraphSAGE full-graph node classification of DGL's ``examples/pytorch/graphsage/train_full.py``: two ``SAGEConv``
layers with the ``"gcn"`` aggregator (hidden size 16, ReLU, dropout 0.5 on the input and between the layers) on a
citation-style graph with self-loops added; ``CrossEntropyLoss`` on the training nodes only, Adam(lr 1e-2,
weight_decay 5e-4), 200 full-graph epochs each followed by an ``evaluate`` of the validation accuracy in eval mode.

Source: https://github.com/dmlc/dgl
Commit: 3d16000b4170fa741ed9e9667f22ba84d3493026
Files: examples/pytorch/graphsage/train_full.py, python/dgl/nn/pytorch/conv/sageconv.py, python/dgl/transforms/module.py
License: Apache-2.0 (Copyright DGL contributors)
Domain: GNN (GraphSAGE-gcn, full-graph semi-supervised node classification, DGL layers in plain torch)

Deviations from the original:
- dgl is not installed: the graph is a small edge-list ``Graph`` (``src``, ``dst``, ``num_nodes``, ``in_degrees()``)
  and ``dglnn.SAGEConv`` is written out in plain torch with the same parameters (``fc_neigh`` without bias, a
  separate ``bias``, ``feat_drop``), the same initialisation (xavier-uniform with the ReLU gain) and the same
  ``"gcn"`` forward (``lin_before_mp``; ``update_all(copy_u, sum)`` as an ``index_add_`` over the destination nodes;
  the sum plus the node's own features divided by ``in_degree + 1``); the other aggregators, edge weights, blocks
  and bipartite inputs are left out; ``AddSelfLoop`` is written out (self-loops removed, then one added per node);
- data: Cora is replaced by a synthetic citation-style graph made from ``seed``: 300 nodes in 5 classes, a
  stochastic block model (edges mostly within a class), symmetric edges, sparse binary bag-of-words features
  (64 words, each class favouring its own words) row-normalised as DGL's citation datasets are; 10 training, 30
  validation and the rest test nodes per class (Cora: 140 / 500 / 1000); hidden size 16, dropout, lr and weight
  decay unchanged; the bfloat16 option is left out;
- one ``train_step`` is one epoch of ``train``'s loop (forward, loss on the training mask, step, then the
  validation ``evaluate``); printing is left out; ``eval_fn`` is ``evaluate`` on the validation mask.
"""
# ruff: noqa: PLR0402, UP008  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_NODES = 300
NUM_CLASSES = 5
NUM_WORDS = 64


# ---- a minimal graph (stands in for dgl.DGLGraph) ----------------------------------------------------------------

class Graph:
    def __init__(self, src, dst, num_nodes):
        self.src, self.dst, self._num_nodes = src, dst, num_nodes

    def num_nodes(self):
        return self._num_nodes

    def num_edges(self):
        return self.src.shape[0]

    def in_degrees(self):
        return torch.bincount(self.dst, minlength=self._num_nodes)


def add_self_loop(g):
    """dgl.AddSelfLoop(): remove the existing self-loops, then add one per node."""
    keep = g.src != g.dst
    nodes = torch.arange(g.num_nodes())
    return Graph(torch.cat([g.src[keep], nodes]), torch.cat([g.dst[keep], nodes]), g.num_nodes())


# ---- python/dgl/nn/pytorch/conv/sageconv.py ("gcn" aggregator) ----------------------------------------------------

class SAGEConv(nn.Module):
    def __init__(
        self,
        in_feats,
        out_feats,
        aggregator_type,
        feat_drop=0.0,
        bias=True,
        norm=None,
        activation=None,
        bug=None,
    ):
        super(SAGEConv, self).__init__()
        assert aggregator_type == "gcn"
        self._in_src_feats, self._in_dst_feats = in_feats, in_feats
        self._out_feats = out_feats
        self._aggre_type = aggregator_type
        self.norm = norm
        self.feat_drop = nn.Dropout(feat_drop)
        self.activation = activation
        self.bug = bug
        self.fc_neigh = nn.Linear(self._in_src_feats, out_feats, bias=False)
        if aggregator_type != "gcn":
            self.fc_self = nn.Linear(self._in_dst_feats, out_feats, bias=bias)
        elif bias:
            self.bias = nn.parameter.Parameter(torch.zeros(self._out_feats))
        else:
            self.register_buffer("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        gain = nn.init.calculate_gain("relu")
        if self._aggre_type != "gcn":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def forward(self, graph, feat):
        feat_src = feat_dst = self.feat_drop(feat)
        # Determine whether to apply linear transformation before message passing A(XW)
        lin_before_mp = self._in_src_feats > self._out_feats
        # Message Passing ("gcn")
        h_src = self.fc_neigh(feat_src) if lin_before_mp else feat_src
        h_dst = h_src
        # graph.update_all(fn.copy_u("h", "m"), fn.sum("m", "neigh"))
        if self.bug == "messages_from_destination":
            # the message gathered at the edge's destination instead of its source
            m = h_src[graph.dst]
        else:
            m = h_src[graph.src]
        neigh = torch.zeros(graph.num_nodes(), m.shape[1], dtype=m.dtype).index_add_(0, graph.dst, m)
        # divide in_degrees
        degs = graph.in_degrees().to(feat_dst)
        h_neigh = (neigh + h_dst) / (degs.unsqueeze(-1) + 1)
        if not lin_before_mp:
            h_neigh = self.fc_neigh(h_neigh)
        # GraphSAGE GCN does not require fc_self.
        rst = h_neigh
        # add bias manually for GCN
        if self.bias is not None:
            rst = rst + self.bias
        # activation
        if self.activation is not None:
            rst = self.activation(rst)
        # normalization
        if self.norm is not None:
            rst = self.norm(rst)
        return rst


# ---- examples/pytorch/graphsage/train_full.py ---------------------------------------------------------------------

class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size, bug=None):
        super().__init__()
        self.layers = nn.ModuleList()
        # two-layer GraphSAGE-mean
        self.layers.append(SAGEConv(in_size, hid_size, "gcn", bug=bug))
        self.layers.append(SAGEConv(hid_size, out_size, "gcn", bug=bug))
        self.dropout = nn.Dropout(0.5)

    def forward(self, graph, x):
        h = self.dropout(x)
        for l, layer in enumerate(self.layers):
            h = layer(graph, h)
            if l != len(self.layers) - 1:
                h = F.relu(h)
                h = self.dropout(h)
        return h


def evaluate(g, features, labels, mask, model):
    model.eval()
    with torch.no_grad():
        logits = model(g, features)
        logits = logits[mask]
        labels = labels[mask]
        _, indices = torch.max(logits, dim=1)
        correct = torch.sum(indices == labels)
        return correct.item() * 1.0 / len(labels)


def make_graph(seed):
    """A stochastic-block citation graph: 300 nodes, 5 classes, row-normalised sparse bag-of-words features."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(NUM_NODES) % NUM_CLASSES
    labels = labels[torch.randperm(NUM_NODES, generator=gen)]
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, torch.tensor(0.05), torch.tensor(0.004))
    upper = torch.triu(torch.rand(NUM_NODES, NUM_NODES, generator=gen) < p, diagonal=1)
    src, dst = upper.nonzero(as_tuple=True)
    g = Graph(torch.cat([src, dst]), torch.cat([dst, src]), NUM_NODES)
    word_class = torch.arange(NUM_WORDS) % NUM_CLASSES
    p_word = torch.where(word_class[None, :] == labels[:, None], torch.tensor(0.25), torch.tensor(0.05))
    feat = (torch.rand(NUM_NODES, NUM_WORDS, generator=gen) < p_word).float()
    feat = feat / feat.sum(1, keepdim=True).clamp(min=1)
    train_mask = torch.zeros(NUM_NODES, dtype=torch.bool)
    val_mask = torch.zeros(NUM_NODES, dtype=torch.bool)
    for c in range(NUM_CLASSES):
        idx = (labels == c).nonzero(as_tuple=True)[0]
        train_mask[idx[:10]] = True
        val_mask[idx[10:40]] = True
    test_mask = ~(train_mask | val_mask)
    return g, feat, labels, train_mask, val_mask, test_mask


def _build(seed, bug=None):
    torch.manual_seed(seed)

    # load and preprocess dataset
    g, feat, label, train_mask, val_mask, _test_mask = make_graph(seed)
    g = add_self_loop(g)
    features = feat
    labels = label
    masks = train_mask, val_mask

    # create GraphSAGE model
    in_size = features.shape[1]
    out_size = NUM_CLASSES
    model = SAGE(in_size, 16, out_size, bug=bug)

    # define train/val samples, loss function and optimizer
    train_mask, val_mask = masks
    loss_fcn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4)

    if bug == "train_mode_set_once":
        model.train()

    def train_step():
        # one epoch of the training loop
        if bug != "train_mode_set_once":
            model.train()
        logits = model(g, features)
        if bug == "nll_loss_on_logits":
            # F.nll_loss on the raw logits (the log_softmax of CrossEntropyLoss left out)
            loss = F.nll_loss(logits[train_mask], labels[train_mask])
        else:
            loss = loss_fcn(logits[train_mask], labels[train_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        evaluate(g, features, labels, val_mask, model)
        return loss.detach()

    def loss_fn(logits, labels):
        if bug == "nll_loss_on_logits":
            return F.nll_loss(logits[train_mask], labels[train_mask])
        return loss_fcn(logits[train_mask], labels[train_mask])

    def eval_fn(model, batch):
        inputs, labels = batch
        return evaluate(inputs["graph"], inputs["x"], labels, val_mask, model)

    return Program(name="dgl_graphsage", model=model, batch=({"graph": g, "x": features}, labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # model.train() hoisted out of the epoch loop (classic): after the first validation evaluate() the model stays in
    # eval mode, so every later epoch trains with dropout off.
    Bug("train_mode_set_once", functools.partial(_build, bug="train_mode_set_once"), "step_probe", ("dropout",)),
    # F.nll_loss on the raw logits instead of CrossEntropyLoss (classic): the loss is unbounded below.
    Bug("nll_loss_on_logits", functools.partial(_build, bug="nll_loss_on_logits"), "learning_ledger", ("OBJECTIVE",)),
    # the copy_u message gathered by the destination index (classic message-passing slip): each node aggregates
    # (deg + 1) copies of itself, the neighbours never reach the output.
    Bug("messages_from_destination", functools.partial(_build, bug="messages_from_destination"), "learning_ledger",
        ("DEPENDENCY",)),
]
