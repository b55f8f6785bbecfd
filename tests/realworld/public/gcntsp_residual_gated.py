# ruff: noqa: UP008, PLR0402
"""Residual gated graph ConvNet predicting which edges of a 2-d TSP instance belong to the optimal tour, from
chaitjo/graph-convnet-tsp (Joshi, Laurent & Bresson, "An Efficient Graph Convolutional Network Technique for the
Travelling Salesman Problem", 2019): node and edge embeddings, residual gated GCN layers with edge gates, mean
aggregation and batch norm, an MLP edge classifier, class-weighted NLL on the tour adjacency, Adam.

Source: https://github.com/chaitjo/graph-convnet-tsp
Commit: 35c36a96132488eb8a331943342b081a0f47e174
Files: ``main.ipynb`` (``train_one_epoch``, ``test``, the network and optimizer cells), ``models/gcn_model.py``,
``models/gcn_layers.py``, ``utils/model_utils.py`` (``loss_edges``), ``utils/graph_utils.py``
(``mean_tour_len_edges``), ``utils/google_tsp_reader.py``, ``config.py``, ``configs/default.json``
License: MIT (Copyright (c) 2019 Chaitanya Joshi, Thomas Laurent, Xavier Bresson; full text in
LICENSES/chaitjo-graph-convnet-tsp.txt)
Domain: GNN in plain torch, edge classification on dense graphs (combinatorial optimization: TSP tour edges)

Kept as written: ``ResidualGatedGCNModel`` (``nodes_coord_embedding``, ``edges_values_embedding`` and the
``edges_embedding`` of the k-NN/self-loop tags concatenated, the GCN layers, ``mlp_edges``, the loss computed inside
``forward``), ``ResidualGatedGCNLayer``/``NodeFeatures``/``EdgeFeatures``/``BatchNormNode``/``BatchNormEdge``
(``track_running_stats=False``)/``MLP``, ``loss_edges`` (log_softmax over the edge classes, ``NLLLoss`` with class
weights), ``GoogleTSPReader.process_batch`` (pdist distances, k-NN adjacency with the self-loop tag 2, the tour's
edge targets and length), the default configuration (10 nodes, 5 neighbours, hidden 50, 3 layers, 2 MLP layers,
mean aggregation, batch 20, ``Adam(lr=0.001)``), the ``nn.DataParallel`` wrapper (a pass-through without GPUs) and
``train_one_epoch``'s loop body (the batch as tensors, ``compute_class_weight("balanced")`` on the batch's edge
labels, forward, ``loss.mean()``, division by ``accumulation_steps`` 1, backward, step, zero_grad,
``mean_tour_len_edges``).

Deviations from the original:
- the Concorde-labelled files (``data/tsp10_*_concorde.txt``) are not here: the lines are written in the same
  format (``x1 y1 ... output t1 ... tn t1``) from ``seed``: uniform points in the unit square, the tour the best
  of a nearest-neighbour start from every node followed by 2-opt (on 10 nodes, the optimum or very near it).
  400 training and 60 validation lines. ``sklearn.utils.shuffle`` of the lines is ``rng.permutation`` and
  scikit-learn's ``compute_class_weight("balanced")`` is written out (``n / (n_classes * bincount)``): scikit-learn
  is not installed here.
- ``loss_edges`` makes the permuted log-probabilities ``.contiguous()`` before ``NLLLoss``: torch 2.13's CPU
  ``nll_loss2d`` backward raises "grad_input must be contiguous" on the permuted view (same values).
- CUDA, tensorboardX, fastprogress, plotting, the beam search and the checkpoints are dropped; ``Variable`` wrappers
  are plain tensors.
- ``train_step`` is one batch of ``train_one_epoch`` (a new epoch, with a freshly shuffled reader, starts when the
  reader runs out) and returns the loss; the running statistics are kept in the step but not printed; ``main``'s
  validation every 5 epochs and its learning-rate decay on the validation loss fall outside the 30 steps of the
  self-check and are left out; ``eval_fn`` is ``test(mode='val')``'s average loss on the validation lines.
- the Program's model is the wrapped network; its batch is the first training batch's six inputs with the edge
  targets; ``loss_fn`` applies ``loss_edges`` to the predictions with that batch's class weights.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.spatial.distance import pdist, squareform

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

dtypeFloat = torch.FloatTensor
dtypeLong = torch.LongTensor


class DotDict(dict):
    def __init__(self, **kwds):
        self.update(kwds)
        self.__dict__ = self


# ----------------------------------------------------------------------------------------- models/gcn_layers.py
class BatchNormNode(nn.Module):
    """Batch normalization for node features.
    """

    def __init__(self, hidden_dim):
        super(BatchNormNode, self).__init__()
        self.batch_norm = nn.BatchNorm1d(hidden_dim, track_running_stats=False)

    def forward(self, x):
        x_trans = x.transpose(1, 2).contiguous()  # Reshape input: (batch_size, hidden_dim, num_nodes)
        x_trans_bn = self.batch_norm(x_trans)
        x_bn = x_trans_bn.transpose(1, 2).contiguous()  # Reshape to original shape
        return x_bn


class BatchNormEdge(nn.Module):
    """Batch normalization for edge features.
    """

    def __init__(self, hidden_dim):
        super(BatchNormEdge, self).__init__()
        self.batch_norm = nn.BatchNorm2d(hidden_dim, track_running_stats=False)

    def forward(self, e):
        e_trans = e.transpose(1, 3).contiguous()  # Reshape input: (batch_size, num_nodes, num_nodes, hidden_dim)
        e_trans_bn = self.batch_norm(e_trans)
        e_bn = e_trans_bn.transpose(1, 3).contiguous()  # Reshape to original
        return e_bn


class NodeFeatures(nn.Module):
    """Convnet features for nodes.

    Using `sum` aggregation:
        x_i = U*x_i +  sum_j [ gate_ij * (V*x_j) ]

    Using `mean` aggregation:
        x_i = U*x_i + ( sum_j [ gate_ij * (V*x_j) ] / sum_j [ gate_ij] )
    """

    def __init__(self, hidden_dim, aggregation="mean"):
        super(NodeFeatures, self).__init__()
        self.aggregation = aggregation
        self.U = nn.Linear(hidden_dim, hidden_dim, True)
        self.V = nn.Linear(hidden_dim, hidden_dim, True)

    def forward(self, x, edge_gate):
        Ux = self.U(x)  # B x V x H
        Vx = self.V(x)  # B x V x H
        Vx = Vx.unsqueeze(1)  # extend Vx from "B x V x H" to "B x 1 x V x H"
        gateVx = edge_gate * Vx  # B x V x V x H
        if self.aggregation=="mean":
            x_new = Ux + torch.sum(gateVx, dim=2) / (1e-20 + torch.sum(edge_gate, dim=2))  # B x V x H
        elif self.aggregation=="sum":
            x_new = Ux + torch.sum(gateVx, dim=2)  # B x V x H
        return x_new


class EdgeFeatures(nn.Module):
    """Convnet features for edges.

    e_ij = U*e_ij + V*(x_i + x_j)
    """

    def __init__(self, hidden_dim):
        super(EdgeFeatures, self).__init__()
        self.U = nn.Linear(hidden_dim, hidden_dim, True)
        self.V = nn.Linear(hidden_dim, hidden_dim, True)

    def forward(self, x, e):
        Ue = self.U(e)
        Vx = self.V(x)
        Wx = Vx.unsqueeze(1)  # Extend Vx from "B x V x H" to "B x V x 1 x H"
        Vx = Vx.unsqueeze(2)  # extend Vx from "B x V x H" to "B x 1 x V x H"
        e_new = Ue + Vx + Wx
        return e_new


class ResidualGatedGCNLayer(nn.Module):
    """Convnet layer with gating and residual connection.
    """

    def __init__(self, hidden_dim, aggregation="sum"):
        super(ResidualGatedGCNLayer, self).__init__()
        self.node_feat = NodeFeatures(hidden_dim, aggregation)
        self.edge_feat = EdgeFeatures(hidden_dim)
        self.bn_node = BatchNormNode(hidden_dim)
        self.bn_edge = BatchNormEdge(hidden_dim)

    def forward(self, x, e):
        e_in = e
        x_in = x
        # Edge convolution
        e_tmp = self.edge_feat(x_in, e_in)  # B x V x V x H
        # Compute edge gates
        edge_gate = F.sigmoid(e_tmp)
        # Node convolution
        x_tmp = self.node_feat(x_in, edge_gate)
        # Batch normalization
        e_tmp = self.bn_edge(e_tmp)
        x_tmp = self.bn_node(x_tmp)
        # ReLU Activation
        e = F.relu(e_tmp)
        x = F.relu(x_tmp)
        # Residual connection
        x_new = x_in + x
        e_new = e_in + e
        return x_new, e_new


class MLP(nn.Module):
    """Multi-layer Perceptron for output prediction.
    """

    def __init__(self, hidden_dim, output_dim, L=2):
        super(MLP, self).__init__()
        self.L = L
        U = []
        for layer in range(self.L - 1):
            U.append(nn.Linear(hidden_dim, hidden_dim, True))
        self.U = nn.ModuleList(U)
        self.V = nn.Linear(hidden_dim, output_dim, True)

    def forward(self, x):
        Ux = x
        for U_i in self.U:
            Ux = U_i(Ux)  # B x H
            Ux = F.relu(Ux)  # B x H
        y = self.V(Ux)  # B x O
        return y


# ---------------------------------------------------------------------------------------- utils/model_utils.py
def loss_edges(y_pred_edges, y_edges, edge_cw, bug=None):
    # Edge loss
    if bug == "log_softmax_over_nodes":
        y = F.log_softmax(y_pred_edges, dim=2)
    else:
        y = F.log_softmax(y_pred_edges, dim=3)  # B x V x V x voc_edges
    y = y.permute(0, 3, 1, 2).contiguous()  # B x voc_edges x V x V; (port) .contiguous(), see the docstring
    loss_edges = nn.NLLLoss(edge_cw)(y, y_edges)
    return loss_edges


# ---------------------------------------------------------------------------------------- utils/graph_utils.py
def mean_tour_len_edges(x_edges_values, y_pred_edges):
    y = F.softmax(y_pred_edges, dim=3)  # B x V x V x voc_edges
    y = y.argmax(dim=3)  # B x V x V
    # Divide by 2 because edges_values is symmetric
    tour_lens = (y.float() * x_edges_values.float()).sum(dim=1).sum(dim=1) / 2
    mean_tour_len = tour_lens.sum().to(dtype=torch.float).item() / tour_lens.numel()
    return mean_tour_len


# ----------------------------------------------------------------------------------------- models/gcn_model.py
class ResidualGatedGCNModel(nn.Module):
    """Residual Gated GCN Model for outputting predictions as edge adjacency matrices.

    References:
        Paper: https://arxiv.org/pdf/1711.07553v2.pdf
        Code: https://github.com/xbresson/spatial_graph_convnets
    """

    def __init__(self, config, dtypeFloat, dtypeLong, bug=None):
        super(ResidualGatedGCNModel, self).__init__()
        self.bug = bug
        self.dtypeFloat = dtypeFloat
        self.dtypeLong = dtypeLong
        # Define net parameters
        self.num_nodes = config.num_nodes
        self.node_dim = config.node_dim
        self.voc_nodes_in = config['voc_nodes_in']
        self.voc_nodes_out = config['num_nodes']  # config['voc_nodes_out']
        self.voc_edges_in = config['voc_edges_in']
        self.voc_edges_out = config['voc_edges_out']
        self.hidden_dim = config['hidden_dim']
        self.num_layers = config['num_layers']
        self.mlp_layers = config['mlp_layers']
        self.aggregation = config['aggregation']
        # Node and edge embedding layers/lookups
        self.nodes_coord_embedding = nn.Linear(self.node_dim, self.hidden_dim, bias=False)
        self.edges_values_embedding = nn.Linear(1, self.hidden_dim//2, bias=False)
        self.edges_embedding = nn.Embedding(self.voc_edges_in, self.hidden_dim//2)
        # Define GCN Layers
        gcn_layers = []
        for layer in range(self.num_layers):
            gcn_layers.append(ResidualGatedGCNLayer(self.hidden_dim, self.aggregation))
        self.gcn_layers = nn.ModuleList(gcn_layers)
        # Define MLP classifiers
        self.mlp_edges = MLP(self.hidden_dim, self.voc_edges_out, self.mlp_layers)
        # self.mlp_nodes = MLP(self.hidden_dim, self.voc_nodes_out, self.mlp_layers)

    def forward(self, x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges, edge_cw):
        # Node and edge embedding
        x = self.nodes_coord_embedding(x_nodes_coord)  # B x V x H
        e_vals = self.edges_values_embedding(x_edges_values.unsqueeze(3))  # B x V x V x H
        e_tags = self.edges_embedding(x_edges)  # B x V x V x H
        e = torch.cat((e_vals, e_tags), dim=3)
        # GCN layers
        for layer in range(self.num_layers):
            x, e = self.gcn_layers[layer](x, e)  # B x V x H, B x V x V x H
        # MLP classifier
        y_pred_edges = self.mlp_edges(e)  # B x V x V x voc_edges_out
        # y_pred_nodes = self.mlp_nodes(x)  # B x V x voc_nodes_out

        # Compute loss
        edge_cw = torch.Tensor(edge_cw).type(self.dtypeFloat)  # Convert to tensors
        loss = loss_edges(y_pred_edges, y_edges, edge_cw, bug=self.bug)

        return y_pred_edges, loss


# ---------------------------------------------------------------------------------- utils/google_tsp_reader.py
class GoogleTSPReader:
    """Iterator that reads TSP dataset files and yields mini-batches.
    Format expected as in Vinyals et al., 2015: https://arxiv.org/abs/1506.03134, http://goo.gl/NDcOIG
    """

    def __init__(self, num_nodes, num_neighbors, batch_size, filepath, rng=None, bug=None):
        self.num_nodes = num_nodes
        self.num_neighbors = num_neighbors
        self.batch_size = batch_size
        self.filepath = filepath
        self.bug = bug
        # Always shuffle upon reading data; (port) the file's lines, sklearn's shuffle as a permutation
        self.filedata = [filepath[k] for k in rng.permutation(len(filepath))]
        self.max_iter = (len(self.filedata) // batch_size)

    def __iter__(self):
        for batch in range(self.max_iter):
            start_idx = batch * self.batch_size
            end_idx = (batch + 1) * self.batch_size
            yield self.process_batch(self.filedata[start_idx:end_idx])

    def process_batch(self, lines):
        """Helper function to convert raw lines into a mini-batch as a DotDict.
        """
        batch_edges = []
        batch_edges_values = []
        batch_edges_target = []  # Binary classification targets (0/1)
        batch_nodes = []
        batch_nodes_target = []  # Multi-class classification targets (`num_nodes` classes)
        batch_nodes_coord = []
        batch_tour_nodes = []
        batch_tour_len = []

        for line_num, line in enumerate(lines):
            line = line.split(" ")  # Split into list

            # Compute signal on nodes
            nodes = np.ones(self.num_nodes)  # All 1s for TSP...

            # Convert node coordinates to required format
            nodes_coord = []
            for idx in range(0, 2 * self.num_nodes, 2):
                nodes_coord.append([float(line[idx]), float(line[idx + 1])])

            # Compute distance matrix
            W_val = squareform(pdist(nodes_coord, metric='euclidean'))

            # Compute adjacency matrix
            if self.num_neighbors == -1:
                W = np.ones((self.num_nodes, self.num_nodes))  # Graph is fully connected
            else:
                W = np.zeros((self.num_nodes, self.num_nodes))
                # Determine k-nearest neighbors for each node
                knns = np.argpartition(W_val, kth=self.num_neighbors, axis=-1)[:, self.num_neighbors::-1]
                # Make connections
                for idx in range(self.num_nodes):
                    W[idx][knns[idx]] = 1
            np.fill_diagonal(W, 2)  # Special token for self-connections

            # Convert tour nodes to required format
            # Don't add final connection for tour/cycle
            tour_nodes = [int(node) - 1 for node in line[line.index('output') + 1:-1]][:-1]

            # Compute node and edge representation of tour + tour_len
            tour_len = 0
            nodes_target = np.zeros(self.num_nodes)
            edges_target = np.zeros((self.num_nodes, self.num_nodes))
            for idx in range(len(tour_nodes) - 1):
                i = tour_nodes[idx]
                j = tour_nodes[idx + 1]
                nodes_target[i] = idx  # node targets: ordering of nodes in tour
                edges_target[i][j] = 1
                edges_target[j][i] = 1
                tour_len += W_val[i][j]

            # Add final connection of tour in edge target
            nodes_target[j] = len(tour_nodes) - 1
            edges_target[j][tour_nodes[0]] = 1
            edges_target[tour_nodes[0]][j] = 1
            tour_len += W_val[j][tour_nodes[0]]

            if self.bug == "coords_permuted_apart":
                # the coordinates reordered after the targets were computed from the original order
                nodes_coord = [nodes_coord[k] for k in np.roll(np.arange(self.num_nodes), 1)]

            # Concatenate the data
            batch_edges.append(W)
            batch_edges_values.append(W_val)
            batch_edges_target.append(edges_target)
            batch_nodes.append(nodes)
            batch_nodes_target.append(nodes_target)
            batch_nodes_coord.append(nodes_coord)
            batch_tour_nodes.append(tour_nodes)
            batch_tour_len.append(tour_len)

        # From list to tensors as a DotDict
        batch = DotDict()
        batch.edges = np.stack(batch_edges, axis=0)
        batch.edges_values = np.stack(batch_edges_values, axis=0)
        batch.edges_target = np.stack(batch_edges_target, axis=0)
        batch.nodes = np.stack(batch_nodes, axis=0)
        batch.nodes_target = np.stack(batch_nodes_target, axis=0)
        batch.nodes_coord = np.stack(batch_nodes_coord, axis=0)
        batch.tour_nodes = np.stack(batch_tour_nodes, axis=0)
        batch.tour_len = np.stack(batch_tour_len, axis=0)
        return batch


# ------------------------------------------------------------------------------------------------ (port) data
def compute_class_weight(class_weight, classes, y):
    """scikit-learn's ``compute_class_weight("balanced")``: ``n_samples / (n_classes * np.bincount(y))``."""
    assert class_weight == "balanced"
    y = np.asarray(y).astype(np.int64)
    counts = np.array([np.sum(y == c) for c in classes])
    return len(y) / (len(classes) * counts)


def _tour_length(d, tour):
    return sum(d[tour[k], tour[(k + 1) % len(tour)]] for k in range(len(tour)))


def _solve_tsp(pts):
    """The best of a nearest-neighbour tour from every node followed by 2-opt."""
    d = squareform(pdist(pts))
    n = len(pts)
    best = None
    for start in range(n):
        tour, left = [start], set(range(n)) - {start}
        while left:
            nxt = min(left, key=lambda j: d[tour[-1], j])
            tour.append(nxt)
            left.remove(nxt)
        improved = True
        while improved:
            improved = False
            for a in range(1, n - 1):
                for b in range(a + 1, n):
                    new = tour[:a] + tour[a:b + 1][::-1] + tour[b + 1:]
                    if _tour_length(d, new) < _tour_length(d, tour) - 1e-12:
                        tour, improved = new, True
        if best is None or _tour_length(d, tour) < _tour_length(d, best):
            best = tour
    return best


def synthetic_tsp_lines(rng, n_lines, num_nodes):
    lines = []
    for _ in range(n_lines):
        pts = rng.random((num_nodes, 2))
        tour = _solve_tsp(pts)
        coords = " ".join(f"{x:.6f} {y:.6f}" for x, y in pts)
        lines.append(coords + " output " + " ".join(str(t + 1) for t in tour + [tour[0]]) + " \n")
    return lines


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = DotDict(expt_name="deafult", num_nodes=10, num_neighbors=5, node_dim=2, voc_nodes_in=2, voc_nodes_out=2,
                     voc_edges_in=3, voc_edges_out=2, beam_size=10, hidden_dim=50, num_layers=3, mlp_layers=2,
                     aggregation="mean", max_epochs=10, val_every=5, test_every=10, batch_size=20,
                     batches_per_epoch=500, accumulation_steps=1, learning_rate=0.001, decay_rate=1.01)
    config.train_filepath = synthetic_tsp_lines(rng, 400, config.num_nodes)  # (port) the file's lines
    config.val_filepath = synthetic_tsp_lines(rng, 60, config.num_nodes)

    # Instantiate the network
    net = nn.DataParallel(ResidualGatedGCNModel(config, dtypeFloat, dtypeLong, bug=bug))
    # Define optimizer
    learning_rate = config.learning_rate
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)

    num_nodes = config.num_nodes
    num_neighbors = config.num_neighbors
    batch_size = config.batch_size
    accumulation_steps = config.accumulation_steps
    train_filepath = config.train_filepath
    st = {"dataset": None, "batch_num": 0, "edge_cw": None, "running_loss": 0.0, "running_nb_data": 0}

    def to_tensors(batch):
        x_edges = torch.LongTensor(batch.edges).type(dtypeLong)
        x_edges_values = torch.FloatTensor(batch.edges_values).type(dtypeFloat)
        x_nodes = torch.LongTensor(batch.nodes).type(dtypeLong)
        x_nodes_coord = torch.FloatTensor(batch.nodes_coord).type(dtypeFloat)
        y_edges = torch.LongTensor(batch.edges_target).type(dtypeLong)
        return x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges

    def train_step():
        # one batch of train_one_epoch(net, optimizer, config, master_bar)
        if st["dataset"] is None:
            net.train()
            dataset = GoogleTSPReader(num_nodes, num_neighbors, batch_size, train_filepath, rng=rng, bug=bug)
            st["dataset"], st["batch_num"], st["edge_cw"] = iter(dataset), 0, None
        try:
            batch = next(st["dataset"])
        except StopIteration:
            st["dataset"] = None
            return train_step()
        batch_num = st["batch_num"]
        x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges = to_tensors(batch)
        # Compute class weights (if uncomputed)
        edge_cw = st["edge_cw"]
        if type(edge_cw) != torch.Tensor:
            edge_labels = y_edges.cpu().numpy().flatten()
            edge_cw = compute_class_weight("balanced", classes=np.unique(edge_labels), y=edge_labels)
            st["edge_cw"] = edge_cw
        # Forward pass
        y_preds, loss = net.forward(x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges, edge_cw)
        loss = loss.mean()  # Take mean of loss across multiple GPUs
        loss = loss / accumulation_steps  # Scale loss by accumulation steps
        loss.backward()
        # Backward pass
        if (batch_num+1) % accumulation_steps == 0:
            if bug == "zero_grad_before_step":
                optimizer.zero_grad()
                optimizer.step()
            else:
                optimizer.step()
                optimizer.zero_grad()
        # Compute error metrics and mean tour lengths
        pred_tour_len = mean_tour_len_edges(x_edges_values, y_preds)  # noqa: F841
        st["running_nb_data"] += batch_size
        st["running_loss"] += batch_size * loss.data.item() * accumulation_steps  # Re-scale loss
        st["batch_num"] += 1
        return loss.item()

    def test(net, _batch=None):
        # test(net, config, master_bar, mode='val'): the average loss
        was_training = net.training
        net.eval()
        dataset = GoogleTSPReader(num_nodes, num_neighbors, batch_size, config.val_filepath,
                                  rng=np.random.default_rng(0))
        edge_cw = None
        running_loss, running_nb_data = 0.0, 0
        with torch.no_grad():
            for batch in dataset:
                x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges = to_tensors(batch)
                if type(edge_cw) != torch.Tensor:
                    edge_labels = y_edges.cpu().numpy().flatten()
                    edge_cw = compute_class_weight("balanced", classes=np.unique(edge_labels), y=edge_labels)
                _y_preds, loss = net.forward(x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges, edge_cw)
                loss = loss.mean()
                running_nb_data += batch_size
                running_loss += batch_size * loss.data.item()
        net.train(was_training)
        return running_loss / running_nb_data

    first = GoogleTSPReader(num_nodes, num_neighbors, batch_size, train_filepath[:batch_size],
                            rng=np.random.default_rng(0), bug=bug)
    x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges = to_tensors(next(iter(first)))
    cw0 = compute_class_weight("balanced", classes=np.unique(y_edges.numpy().flatten()), y=y_edges.numpy().flatten())

    def loss_fn(out, y):
        y_preds, _ = out
        return loss_edges(y_preds, y, torch.Tensor(cw0).type(dtypeFloat), bug=bug)

    batch = ((x_edges, x_edges_values, x_nodes, x_nodes_coord, y_edges, cw0), y_edges)
    return Program(name="gcntsp_residual_gated", model=net, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=test)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic wrong axis: log_softmax over a node axis (dim=2) instead of the edge classes (dim=3) before NLLLoss.
    Bug("log_softmax_over_nodes", functools.partial(_build, bug="log_softmax_over_nodes"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the coordinates reordered (rolled by one node) after the distance matrix and the tour targets were
    # computed in the file's order, so node embeddings and edge targets disagree.
    Bug("coords_permuted_apart", functools.partial(_build, bug="coords_permuted_apart"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() moved before optimizer.step(): every step applies a zero gradient.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
