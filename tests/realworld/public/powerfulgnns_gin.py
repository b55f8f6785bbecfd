"""Graph Isomorphism Network (GIN-0) of weihua916/powerful-gnns for whole-graph classification: ``GraphCNN`` with
sum neighbour pooling through a block-diagonal sparse adjacency (``torch.spmm``), self-loops when ``learn_eps`` is
off, MLPs with BatchNorm, sum graph pooling through a sparse pooling matrix, a prediction head on every layer's
representation with dropout, ``CrossEntropyLoss``, Adam(lr 0.01) with StepLR(step_size 50, gamma 0.5) stepped at the
start of every epoch, minibatches of 32 graphs drawn by ``np.random.permutation`` each iteration.

Source: https://github.com/weihua916/powerful-gnns
Commit: 9a2ce8ac3e99278307093a464a95caf0fb04b602
Files: main.py (train, pass_data_iteratively, main), models/graphcnn.py, models/mlp.py, util.py (S2VGraph, load_data)
License: MIT (Copyright (c) 2021 Weihua Hu; full text in LICENSES/weihua916-powerful-gnns.txt)
Domain: GNN (graph classification, plain torch sparse ops)

Deviations from the original:
- sizes: num_layers 5 -> 3, hidden_dim 64 -> 32, iters_per_epoch 50 -> 10 (num_mlp_layers 2, batch_size 32, lr 0.01,
  final_dropout 0.5, sum/sum pooling, learn_eps off unchanged);
- data: instead of the MUTAG text file, 200 synthetic undirected graphs made from ``seed`` (6-12 nodes, 3 node tags
  one-hot as ``load_data`` builds them); a graph is "dense" (edge probability 0.55, label 1) or "sparse" (0.15,
  label 0); networkx is not installed, so ``S2VGraph.g`` is a plain node list and the edge list, ``neighbors``,
  ``max_neighbor`` and ``edge_mat`` are built as ``load_data`` does from it; the 10-fold ``separate_data`` split
  (sklearn) is replaced by a seeded 90/10 split;
- ``torch.sparse.FloatTensor(...)`` (deprecated) is written ``torch.sparse_coo_tensor(...)``, same arguments;
- ``np.random`` is a ``np.random.RandomState(seed)``; no GPU; tqdm and printing are dropped;
- one ``train_step`` is one iteration of ``train()``'s loop; ``scheduler.step()`` runs before every epoch of
  ``iters_per_epoch`` iterations as ``main`` does; ``eval_fn`` is ``test()``'s accuracy on a list of graphs
  (``pass_data_iteratively`` puts the model in eval mode; ``train()`` puts it back in train mode at the next epoch,
  here at the next step, as the epoch loop does).
"""
# ruff: noqa: PLR0402, UP004, UP008, UP034  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

criterion = nn.CrossEntropyLoss()
NUM_LAYERS, NUM_MLP_LAYERS, HIDDEN_DIM, FINAL_DROPOUT = 3, 2, 32, 0.5
BATCH_SIZE, ITERS_PER_EPOCH, LR = 32, 10, 0.01


# ---- models/mlp.py -----------------------------------------------------------------------------------------------

###MLP with lienar output
class MLP(nn.Module):
    def __init__(self, num_layers, input_dim, hidden_dim, output_dim):
        super(MLP, self).__init__()

        self.linear_or_not = True #default is linear model
        self.num_layers = num_layers

        if num_layers < 1:
            raise ValueError("number of layers should be positive!")
        elif num_layers == 1:
            #Linear model
            self.linear = nn.Linear(input_dim, output_dim)
        else:
            #Multi-layer model
            self.linear_or_not = False
            self.linears = torch.nn.ModuleList()
            self.batch_norms = torch.nn.ModuleList()

            self.linears.append(nn.Linear(input_dim, hidden_dim))
            for layer in range(num_layers - 2):
                self.linears.append(nn.Linear(hidden_dim, hidden_dim))
            self.linears.append(nn.Linear(hidden_dim, output_dim))

            for layer in range(num_layers - 1):
                self.batch_norms.append(nn.BatchNorm1d((hidden_dim)))

    def forward(self, x):
        if self.linear_or_not:
            #If linear model
            return self.linear(x)
        else:
            #If MLP
            h = x
            for layer in range(self.num_layers - 1):
                h = F.relu(self.batch_norms[layer](self.linears[layer](h)))
            return self.linears[self.num_layers - 1](h)


# ---- models/graphcnn.py (the sum/sum, learn_eps-off path; max pooling kept) ------------------------------------

class GraphCNN(nn.Module):
    def __init__(self, num_layers, num_mlp_layers, input_dim, hidden_dim, output_dim, final_dropout, learn_eps, graph_pooling_type, neighbor_pooling_type, device, bug=None):
        super(GraphCNN, self).__init__()

        self.final_dropout = final_dropout
        self.device = device
        self.num_layers = num_layers
        self.graph_pooling_type = graph_pooling_type
        self.neighbor_pooling_type = neighbor_pooling_type
        self.learn_eps = learn_eps
        self.eps = nn.Parameter(torch.zeros(self.num_layers-1))
        self.bug = bug

        ###List of MLPs
        self.mlps = torch.nn.ModuleList()

        ###List of batchnorms applied to the output of MLP (input of the final prediction linear layer)
        self.batch_norms = torch.nn.ModuleList()

        for layer in range(self.num_layers-1):
            if layer == 0:
                self.mlps.append(MLP(num_mlp_layers, input_dim, hidden_dim, hidden_dim))
            else:
                self.mlps.append(MLP(num_mlp_layers, hidden_dim, hidden_dim, hidden_dim))

            self.batch_norms.append(nn.BatchNorm1d(hidden_dim))

        #Linear function that maps the hidden representation at dofferemt layers into a prediction score
        self.linears_prediction = torch.nn.ModuleList()
        for layer in range(num_layers):
            if layer == 0:
                self.linears_prediction.append(nn.Linear(input_dim, output_dim))
            else:
                self.linears_prediction.append(nn.Linear(hidden_dim, output_dim))

    def __preprocess_neighbors_sumavepool(self, batch_graph):
        ###create block diagonal sparse matrix

        edge_mat_list = []
        start_idx = [0]
        for i, graph in enumerate(batch_graph):
            start_idx.append(start_idx[i] + len(graph.g))
            if self.bug == "edge_offsets_missing":
                edge_mat_list.append(graph.edge_mat)  # every graph's edges indexed as if it were the first
            else:
                edge_mat_list.append(graph.edge_mat + start_idx[i])
        Adj_block_idx = torch.cat(edge_mat_list, 1)
        Adj_block_elem = torch.ones(Adj_block_idx.shape[1])

        #Add self-loops in the adjacency matrix if learn_eps is False, i.e., aggregate center nodes and neighbor nodes altogether.

        if not self.learn_eps:
            num_node = start_idx[-1]
            self_loop_edge = torch.LongTensor([range(num_node), range(num_node)])
            elem = torch.ones(num_node)
            Adj_block_idx = torch.cat([Adj_block_idx, self_loop_edge], 1)
            Adj_block_elem = torch.cat([Adj_block_elem, elem], 0)

        Adj_block = torch.sparse_coo_tensor(Adj_block_idx, Adj_block_elem, torch.Size([start_idx[-1],start_idx[-1]]))

        return Adj_block.to(self.device)

    def __preprocess_graphpool(self, batch_graph):
        ###create sum or average pooling sparse matrix over entire nodes in each graph (num graphs x num nodes)

        start_idx = [0]

        #compute the padded neighbor list
        for i, graph in enumerate(batch_graph):
            start_idx.append(start_idx[i] + len(graph.g))

        idx = []
        elem = []
        for i, graph in enumerate(batch_graph):
            ###average pooling
            if self.graph_pooling_type == "average":
                elem.extend([1./len(graph.g)]*len(graph.g))

            else:
            ###sum pooling
                elem.extend([1]*len(graph.g))

            idx.extend([[i, j] for j in range(start_idx[i], start_idx[i+1], 1)])
        elem = torch.FloatTensor(elem)
        idx = torch.LongTensor(idx).transpose(0,1)
        graph_pool = torch.sparse_coo_tensor(idx, elem, torch.Size([len(batch_graph), start_idx[-1]]))

        return graph_pool.to(self.device)

    def next_layer(self, h, layer, padded_neighbor_list = None, Adj_block = None):
        ###pooling neighboring nodes and center nodes altogether

        #If sum or average pooling
        pooled = torch.spmm(Adj_block, h)
        if self.neighbor_pooling_type == "average":
            #If average pooling
            degree = torch.spmm(Adj_block, torch.ones((Adj_block.shape[0], 1)).to(self.device))
            pooled = pooled/degree

        #representation of neighboring and center nodes
        pooled_rep = self.mlps[layer](pooled)

        h = self.batch_norms[layer](pooled_rep)

        #non-linearity
        h = F.relu(h)
        return h

    def forward(self, batch_graph):
        X_concat = torch.cat([graph.node_features for graph in batch_graph], 0).to(self.device)
        graph_pool = self.__preprocess_graphpool(batch_graph)

        Adj_block = self.__preprocess_neighbors_sumavepool(batch_graph)

        #list of hidden representation at each layer (including input)
        hidden_rep = [X_concat]
        h = X_concat

        for layer in range(self.num_layers-1):
            h = self.next_layer(h, layer, Adj_block = Adj_block)

            hidden_rep.append(h)

        score_over_layer = 0

        #perform pooling over all nodes in each graph in every layer
        for layer, h in enumerate(hidden_rep):
            pooled_h = torch.spmm(graph_pool, h)
            score_over_layer += F.dropout(self.linears_prediction[layer](pooled_h), self.final_dropout, training = self.training)

        return score_over_layer


# ---- util.py: S2VGraph and what load_data builds, on synthetic graphs -------------------------------------------

class S2VGraph(object):
    def __init__(self, g, label, node_tags=None, node_features=None):
        self.label = label
        self.g = g
        self.node_tags = node_tags
        self.neighbors = []
        self.node_features = 0
        self.edge_mat = 0

        self.max_neighbor = 0


def make_graphs(seed, n_graphs=200, n_tags=3):
    rs = np.random.RandomState(seed)
    g_list = []
    for _ in range(n_graphs):
        n = rs.randint(6, 13)
        label = int(rs.rand() < 0.5)
        p = 0.55 if label == 1 else 0.15
        edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rs.rand() < p]
        if not edges:
            edges = [(0, 1)]
        graph = S2VGraph(list(range(n)), label, list(rs.randint(0, n_tags, size=n)))
        # what load_data does with g.edges()
        graph.neighbors = [[] for i in range(len(graph.g))]
        for i, j in edges:
            graph.neighbors[i].append(j)
            graph.neighbors[j].append(i)
        graph.max_neighbor = max(len(nb) for nb in graph.neighbors)
        edge_pairs = [list(pair) for pair in edges]
        edge_pairs.extend([[i, j] for j, i in edge_pairs])
        graph.edge_mat = torch.LongTensor(edge_pairs).transpose(0,1)
        graph.node_features = torch.zeros(len(graph.node_tags), n_tags)
        graph.node_features[range(len(graph.node_tags)), graph.node_tags] = 1
        g_list.append(graph)
    return g_list


def label_rule(batch_graph):
    """The synthetic data's rule: a graph is labelled 1 when its edge density is above 0.35."""
    dens = [g.edge_mat.shape[1] / 2 / (len(g.g) * (len(g.g) - 1) / 2) for g in batch_graph]
    return torch.LongTensor([int(d > 0.35) for d in dens])


# ---- main.py -----------------------------------------------------------------------------------------------------

###pass data to model with minibatch during testing to avoid memory overflow (does not perform backpropagation)
def pass_data_iteratively(model, graphs, minibatch_size = 64):
    model.eval()
    output = []
    idx = np.arange(len(graphs))
    for i in range(0, len(graphs), minibatch_size):
        sampled_idx = idx[i:i+minibatch_size]
        if len(sampled_idx) == 0:
            continue
        output.append(model([graphs[j] for j in sampled_idx]).detach())
    return torch.cat(output, 0)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = np.random.RandomState(seed)
    device = torch.device("cpu")
    graphs = make_graphs(seed)
    num_classes = 2
    perm = rs.permutation(len(graphs))
    train_graphs = [graphs[i] for i in perm[:180]]
    test_graphs = [graphs[i] for i in perm[180:]]  # noqa: F841  (test() is eval_fn)

    model = GraphCNN(NUM_LAYERS, NUM_MLP_LAYERS, train_graphs[0].node_features.shape[1], HIDDEN_DIM, num_classes, FINAL_DROPOUT, False, "sum", "sum", device, bug=bug).to(device)

    optimizer = optim.Adam(model.parameters(), lr=LR)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)

    state = {"pos": 0}

    def train_step():
        if state["pos"] % ITERS_PER_EPOCH == 0:
            scheduler.step()
            model.train()
        state["pos"] += 1

        selected_idx = rs.permutation(len(train_graphs))[:BATCH_SIZE]

        batch_graph = [train_graphs[idx] for idx in selected_idx]
        output = model(batch_graph)

        if bug == "labels_from_unpermuted_graphs":
            labels = torch.LongTensor([graph.label for graph in train_graphs[:BATCH_SIZE]]).to(device)
        else:
            labels = torch.LongTensor([graph.label for graph in batch_graph]).to(device)

        #compute loss
        loss = criterion(output, labels)

        #backprop
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        return loss.detach()

    def eval_fn(model, batch):
        graphs, labels = batch
        output = pass_data_iteratively(model, graphs)
        pred = output.max(1, keepdim=True)[1]
        correct = pred.eq(labels.view_as(pred)).sum().cpu().item()
        model.train()
        return correct / float(len(graphs))

    first = train_graphs[:BATCH_SIZE]
    batch = (first, torch.LongTensor([graph.label for graph in first]))
    return Program(name="powerfulgnns_gin", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=label_rule, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # the per-graph node offset is not added to the edge indices when the block-diagonal adjacency is assembled:
    # every graph's edges land on the first graph's nodes, so a node aggregates over another graph's neighbours
    # (classic batching slip of hand-written graph batching).
    Bug("edge_offsets_missing", functools.partial(_build, bug="edge_offsets_missing"), "learning_ledger",
        ("DEPENDENCY",)),
    # the labels are read from the first BATCH_SIZE training graphs instead of the sampled ones (classic: labels
    # not permuted with the inputs).
    Bug("labels_from_unpermuted_graphs", functools.partial(_build, bug="labels_from_unpermuted_graphs"),
        "learning_ledger", ("TASK",)),
]
