# ruff: noqa: UP008, B006, PLR0402, PLW0127, RUF059
"""The node classifier of GNNExplainer (Ying et al., NeurIPS 2019), trained on its synthetic BA-Shapes graph:
a Barabasi-Albert graph of 300 nodes with 80 five-node "house" motifs attached (labels: the base, and the house's
bottom, middle and top), 1% random edges added, constant node features. ``GcnEncoderNode`` stacks three dense
graph convolutions (``adj @ x @ W + b`` on the raw adjacency, each output L2-normalized per node, ReLU between), the
three layers' embeddings concatenated and a linear prediction layer; full-batch cross-entropy on the training nodes,
Adam with weight decay, gradient-norm clipping.

Source: https://github.com/RexYing/gnn-model-explainer
Commit: bc984829f4f4829e93c760e9bbdc8e73f96e2cc1
Files: ``train.py`` (``syn_task1``, ``train_node_classifier``, ``evaluate_node``), ``models.py`` (``GraphConv``,
``GcnEncoderGraph``, ``GcnEncoderNode``), ``gengraph.py`` (``perturb``, ``preprocess_input_graph``, ``gen_syn1``),
``utils/synthetic_structsim.py`` (``ba``, ``house``, ``build_graph``), ``utils/featgen.py`` (``ConstFeatureGen``),
``utils/train_utils.py`` (``build_optimizer``), ``configs.py`` (``arg_parse``'s defaults)
License: Apache-2.0 (full text in LICENSES/RexYing-gnn-model-explainer.txt)
Domain: GNN in plain torch, node classification (dense GCN on a synthetic motif graph, structural roles)

Kept as written: ``GraphConv`` (``FloatTensor`` weights re-initialized by the encoder: Xavier-uniform with the ReLU
gain, zero bias; ``normalize_embedding``), ``GcnEncoderGraph`` (``build_conv_layers`` with ``normalize=True``,
``build_pred_layers``, ``gcn_forward``, ``concat``),
``GcnEncoderNode`` (``forward``, ``loss`` transposing to ``[B, C, N]`` for ``CrossEntropyLoss``), ``gen_syn1``
(80 houses, a BA basis of 300 with m = 5, shapes plugged in at regular spacing, ``perturb`` by 1%),
``preprocess_input_graph``, ``ConstFeatureGen(np.ones(input_dim))``, ``build_optimizer`` (Adam, no scheduler),
``train_node_classifier``'s body (the shuffled 80/20 node split, ``model.train()``, ``model.zero_grad()``, forward,
``ypred[:, train_idx, :]``, ``model.loss``, backward, ``clip_grad_norm`` to ``args.clip``, step, ``evaluate_node``),
the configs' defaults (lr 0.001, clip 2.0, weight decay 0.005, input_dim 10, hidden_dim 20, output_dim 20, 3 graph
convolutions, no batch norm, bias on, method "base").

Deviations from the original:
- none in the data: BA-Shapes is generated as the repository does (networkx), seeded from ``seed`` (Python's and
  numpy's global generators, which the repository leaves unseeded); ``nx.to_numpy_matrix`` (removed in networkx 3)
  is ``nx.to_numpy_array``; the matplotlib figure, the feature generator's prints and ``tensorboardX`` are dropped;
- ``nn.utils.clip_grad_norm`` (removed) is ``clip_grad_norm_``; CPU (``args.gpu`` False, as by default);
- what the default configuration never runs is left out (and the long signatures and calls are joined on fewer
  lines): ``GraphConv``'s dropout (0), ``add_self`` and ``att`` (method "base") branches and their inits,
  ``build_pred_layers``' hidden layers (``pred_hidden_dims`` empty), ``apply_bn`` and its calls (``bn`` False),
  ``construct_mask`` (no ``batch_num_nodes``), ``GcnEncoderGraph``'s graph-level ``forward`` and ``loss``
  (overridden by ``GcnEncoderNode``), the other shapes and bases of ``build_graph`` and its random-plugin and
  random-edge options, ``preprocess_input_graph``'s ``normalize_adj`` branch (False);
- the epoch loop (1000 epochs) is unrolled: one ``train_step`` is one epoch of it and returns the loss; the
  per-epoch ``evaluate_node`` keeps the accuracies only (sklearn's ``accuracy_score`` written out; precision,
  recall and confusion matrices dropped), the prints and the checkpoint are dropped; ``eval_fn`` is
  ``model.eval()``, a forward, and ``evaluate_node``'s test accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types

import networkx as nx
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 60


# models.py (the branches the default configuration never takes are left out: see the module docstring)
class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, add_self=False, normalize_embedding=False, dropout=0.0, bias=True,
                 gpu=True, att=False):
        super(GraphConv, self).__init__()
        self.att = att
        self.add_self = add_self
        self.dropout = dropout
        self.normalize_embedding = normalize_embedding
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.weight = nn.Parameter(torch.FloatTensor(input_dim, output_dim))  # (port) the not-gpu branch
        if bias:
            self.bias = nn.Parameter(torch.FloatTensor(output_dim))
        else:
            self.bias = None

    def forward(self, x, adj):
        y = torch.matmul(adj, x)
        y = torch.matmul(y, self.weight)
        if self.bias is not None:
            y = y + self.bias
        if self.normalize_embedding:
            y = F.normalize(y, p=2, dim=2)
        return y, adj


class GcnEncoderGraph(nn.Module):
    def __init__(self, input_dim, hidden_dim, embedding_dim, label_dim, num_layers, pred_hidden_dims=[],
                 concat=True, bn=True, dropout=0.0, add_self=False, args=None):
        super(GcnEncoderGraph, self).__init__()
        self.concat = concat
        add_self = add_self
        self.bn = bn
        self.num_layers = num_layers
        self.num_aggs = 1
        self.bias = True
        self.gpu = args.gpu
        if args.method == "att":
            self.att = True
        else:
            self.att = False
        if args is not None:
            self.bias = args.bias
        self.conv_first, self.conv_block, self.conv_last = self.build_conv_layers(
            input_dim, hidden_dim, embedding_dim, num_layers, add_self, normalize=True, dropout=dropout)
        self.act = nn.ReLU()
        self.label_dim = label_dim
        if concat:
            self.pred_input_dim = hidden_dim * (num_layers - 1) + embedding_dim
        else:
            self.pred_input_dim = embedding_dim
        self.pred_model = self.build_pred_layers(self.pred_input_dim, pred_hidden_dims, label_dim,
                                                 num_aggs=self.num_aggs)
        for m in self.modules():
            if isinstance(m, GraphConv):
                init.xavier_uniform_(m.weight.data, gain=nn.init.calculate_gain("relu"))
                if m.bias is not None:
                    init.constant_(m.bias.data, 0.0)

    def build_conv_layers(self, input_dim, hidden_dim, embedding_dim, num_layers, add_self, normalize=False,
                          dropout=0.0):
        conv_first = GraphConv(input_dim=input_dim, output_dim=hidden_dim, add_self=add_self,
                               normalize_embedding=normalize, bias=self.bias, gpu=self.gpu, att=self.att)
        conv_block = nn.ModuleList([GraphConv(input_dim=hidden_dim, output_dim=hidden_dim, add_self=add_self,
                                              normalize_embedding=normalize, dropout=dropout, bias=self.bias,
                                              gpu=self.gpu, att=self.att) for i in range(num_layers - 2)])
        conv_last = GraphConv(input_dim=hidden_dim, output_dim=embedding_dim, add_self=add_self,
                              normalize_embedding=normalize, bias=self.bias, gpu=self.gpu, att=self.att)
        return conv_first, conv_block, conv_last

    def build_pred_layers(self, pred_input_dim, pred_hidden_dims, label_dim, num_aggs=1):
        pred_input_dim = pred_input_dim * num_aggs
        pred_model = nn.Linear(pred_input_dim, label_dim)  # (port) pred_hidden_dims is empty
        return pred_model

    def gcn_forward(self, x, adj, conv_first, conv_block, conv_last, embedding_mask=None):
        x, adj_att = conv_first(x, adj)
        x = self.act(x)
        x_all = [x]
        adj_att_all = [adj_att]
        for i in range(len(conv_block)):
            x, _ = conv_block[i](x, adj)
            x = self.act(x)
            x_all.append(x)
            adj_att_all.append(adj_att)
        x, adj_att = conv_last(x, adj)
        x_all.append(x)
        adj_att_all.append(adj_att)
        # x_tensor: [batch_size x num_nodes x embedding]
        x_tensor = torch.cat(x_all, dim=2)
        if embedding_mask is not None:
            x_tensor = x_tensor * embedding_mask
        self.embedding_tensor = x_tensor
        # adj_att_tensor: [batch_size x num_nodes x num_nodes x num_gc_layers]
        adj_att_tensor = torch.stack(adj_att_all, dim=3)
        return x_tensor, adj_att_tensor


class GcnEncoderNode(GcnEncoderGraph):
    def __init__(self, input_dim, hidden_dim, embedding_dim, label_dim, num_layers, pred_hidden_dims=[],
                 concat=True, bn=True, dropout=0.0, args=None):
        super(GcnEncoderNode, self).__init__(input_dim, hidden_dim, embedding_dim, label_dim, num_layers,
                                             pred_hidden_dims, concat, bn, dropout, args=args)
        if hasattr(args, "loss_weight"):
            self.celoss = nn.CrossEntropyLoss(weight=args.loss_weight)
        else:
            self.celoss = nn.CrossEntropyLoss()

    def forward(self, x, adj, batch_num_nodes=None, **kwargs):
        embedding_mask = None  # (port) batch_num_nodes is None: no construct_mask

        self.adj_atts = []
        self.embedding_tensor, adj_att = self.gcn_forward(x, adj, self.conv_first, self.conv_block,
                                                          self.conv_last, embedding_mask)
        pred = self.pred_model(self.embedding_tensor)
        return pred, adj_att

    def loss(self, pred, label):
        pred = torch.transpose(pred, 1, 2)
        return self.celoss(pred, label)


# utils/synthetic_structsim.py
def ba(start, width, role_start=0, m=5):
    graph = nx.barabasi_albert_graph(width, m)
    graph.add_nodes_from(range(start, start + width))
    nids = sorted(graph)
    mapping = {nid: start + i for i, nid in enumerate(nids)}
    graph = nx.relabel_nodes(graph, mapping)
    roles = [role_start for i in range(width)]
    return graph, roles


def house(start, role_start=0):
    graph = nx.Graph()
    graph.add_nodes_from(range(start, start + 5))
    graph.add_edges_from([(start, start + 1), (start + 1, start + 2), (start + 2, start + 3), (start + 3, start)])
    graph.add_edges_from([(start + 4, start), (start + 4, start + 1)])
    roles = [role_start, role_start, role_start + 1, role_start + 1, role_start + 2]
    return graph, roles


def build_graph(width_basis, basis_type, list_shapes, start=0, m=5):
    """(port) The ``rdm_basis_plugins=False``, ``add_random_edges=0`` path; ``eval(name)`` as a lookup."""
    shapes = {"ba": ba, "house": house}
    basis, role_id = shapes[basis_type](start, width_basis, m=m)
    n_basis, n_shapes = nx.number_of_nodes(basis), len(list_shapes)
    start += n_basis  # indicator of the id of the next node
    spacing = math.floor(n_basis / n_shapes)
    plugins = [int(k * spacing) for k in range(n_shapes)]
    seen_shapes = {"basis": [0, n_basis]}

    for shape_id, shape in enumerate(list_shapes):
        shape_type = shape[0]
        args = [start]
        if len(shape) > 1:
            args += shape[1:]
        args += [0]
        graph_s, roles_graph_s = shapes[shape_type](*args)
        n_s = nx.number_of_nodes(graph_s)
        try:
            col_start = seen_shapes[shape_type][0]
        except KeyError:
            col_start = np.max(role_id) + 1
            seen_shapes[shape_type] = [col_start, n_s]
        # Attach the shape to the basis
        basis.add_nodes_from(graph_s.nodes())
        basis.add_edges_from(graph_s.edges())
        basis.add_edges_from([(start, plugins[shape_id])])
        temp_labels = [r + col_start for r in roles_graph_s]
        role_id += temp_labels
        start += n_s
    return basis, role_id, plugins


# gengraph.py
def perturb(graph_list, p):
    perturbed_graph_list = []
    for G_original in graph_list:
        G = G_original.copy()
        edge_count = int(G.number_of_edges() * p)
        # randomly add the edges between a pair of nodes without an edge.
        for _ in range(edge_count):
            while True:
                u = np.random.randint(0, G.number_of_nodes())
                v = np.random.randint(0, G.number_of_nodes())
                if (not G.has_edge(u, v)) and (u != v):
                    break
            G.add_edge(u, v)
        perturbed_graph_list.append(G)
    return perturbed_graph_list


def preprocess_input_graph(G, labels, normalize_adj=False):
    adj = np.array(nx.to_numpy_array(G))  # (port) nx.to_numpy_matrix; normalize_adj is False
    existing_node = list(G.nodes)[-1]
    feat_dim = G.nodes[existing_node]["feat"].shape[0]
    f = np.zeros((G.number_of_nodes(), feat_dim), dtype=float)
    for i, u in enumerate(G.nodes()):
        f[i, :] = G.nodes[u]["feat"]
    # add batch dim
    adj = np.expand_dims(adj, axis=0)
    f = np.expand_dims(f, axis=0)
    labels = np.expand_dims(labels, axis=0)
    return {"adj": adj, "feat": f, "labels": labels}


def gen_syn1(nb_shapes=80, width_basis=300, feature_generator=None, m=5):
    basis_type = "ba"
    list_shapes = [["house"]] * nb_shapes

    G, role_id, _ = build_graph(width_basis, basis_type, list_shapes, start=0, m=5)
    G = perturb([G], 0.01)[0]
    feature_generator.gen_node_features(G)

    name = basis_type + "_" + str(width_basis) + "_" + str(nb_shapes)
    return G, role_id, name


# utils/featgen.py
class ConstFeatureGen:
    """Constant Feature class."""
    def __init__(self, val):
        self.val = val

    def gen_node_features(self, G):
        feat_dict = {i:{'feat': np.array(self.val, dtype=np.float32)} for i in G.nodes()}
        nx.set_node_attributes(G, feat_dict)


# train.py
def evaluate_node(ypred, labels, train_idx, test_idx):
    _, pred_labels = torch.max(ypred, 2)
    pred_labels = pred_labels.numpy()

    pred_train = np.ravel(pred_labels[:, train_idx])
    pred_test = np.ravel(pred_labels[:, test_idx])
    labels_train = np.ravel(labels[:, train_idx])
    labels_test = np.ravel(labels[:, test_idx])

    result_train = {"acc": float(np.mean(labels_train == pred_train))}  # (port) metrics.accuracy_score
    result_test = {"acc": float(np.mean(labels_test == pred_test))}
    return result_train, result_test


def _data(seed, args, bug):
    """(port) syn_task1's graph and model, and the split and tensors of train_node_classifier."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    G, labels, name = gen_syn1(feature_generator=ConstFeatureGen(np.ones(args.input_dim, dtype=float)))
    num_classes = max(labels) + 1
    model = GcnEncoderNode(args.input_dim, args.hidden_dim, args.output_dim, num_classes, args.num_gc_layers,
                           bn=args.bn, args=args)
    # train/test split only for nodes
    num_nodes = G.number_of_nodes()
    num_train = int(num_nodes * args.train_ratio)
    idx = [i for i in range(num_nodes)]
    np.random.shuffle(idx)
    train_idx = idx[:num_train]
    test_idx = idx[num_train:]
    data = preprocess_input_graph(G, labels)
    labels_train = torch.tensor(data["labels"][:, train_idx], dtype=torch.long)
    if bug == "labels_from_unshuffled_idx":
        # classic: the training labels taken from the first num_train nodes, not from the shuffled train_idx
        labels_train = torch.tensor(data["labels"][:, :num_train], dtype=torch.long)
    adj = torch.tensor(data["adj"], dtype=torch.float)
    x = torch.tensor(data["feat"], requires_grad=True, dtype=torch.float)
    return model, data, train_idx, test_idx, labels_train, adj, x


def _build(seed, bug=None):
    args = types.SimpleNamespace(opt="adam", opt_scheduler="none", lr=0.001, clip=2.0, num_epochs=1000,
                                 train_ratio=0.8, input_dim=10, hidden_dim=20, output_dim=20, num_gc_layers=3,
                                 bn=False, bias=True, gpu=False, weight_decay=0.005, method="base")
    model, data, train_idx, test_idx, labels_train, adj, x = _data(seed, args, bug)
    params = model.parameters()
    if bug == "optimizer_over_convolutions_only":
        # classic: the optimizer built before / without the prediction layer, pred_model keeps its init
        params = [p for n, p in model.named_parameters() if not n.startswith("pred_model")]
    # train_utils.build_optimizer, opt "adam", opt_scheduler "none"
    filter_fn = filter(lambda p : p.requires_grad, params)
    scheduler, optimizer = None, optim.Adam(filter_fn, lr=args.lr, weight_decay=args.weight_decay)
    model.train()

    def train_step():
        model.zero_grad()
        ypred, adj_att = model(x, adj)
        ypred_train = ypred[:, train_idx, :]
        loss = model.loss(ypred_train, labels_train)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        if bug == "zero_grad_after_backward":
            model.zero_grad()
        optimizer.step()
        result_train, result_test = evaluate_node(ypred.cpu(), data["labels"], train_idx, test_idx)
        if scheduler is not None:
            scheduler.step()
        return loss.detach()

    def loss_fn(outputs, labels_train):
        return model.loss(outputs[0][:, train_idx, :], labels_train)

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            ypred, _ = model(x, adj)
        model.train()
        return evaluate_node(ypred.cpu(), data["labels"], train_idx, test_idx)[1]["acc"]

    return Program(name="gnnexplainer_bashapes", model=model, batch=((x, adj), labels_train), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: labels indexed by the first num_train node ids while the predictions use the shuffled train_idx
    Bug("labels_from_unshuffled_idx", functools.partial(_build, bug="labels_from_unshuffled_idx"),
        "learning_ledger", ("TASK",)),
    # classic: the prediction layer's parameters left out of the optimizer
    Bug("optimizer_over_convolutions_only", functools.partial(_build, bug="optimizer_over_convolutions_only"),
        "four_structures", ("pred_model",)),
    # classic: zero_grad between backward and step, the step uses no gradient
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
