# ruff: noqa: UP008
"""GraphRNN (You, Ying, Ren, Hamilton & Leskovec, ICML 2018), the ``GraphRNN_RNN`` variant on the ``grid_small``
graphs, from JiaxuanYou/graph-generation: every graph is node-permuted, ordered by a BFS from a random node and
encoded as the sequence of its adjacency rows (each truncated to the ``max_prev_node`` previous nodes); a graph-level
GRU reads the rows, its hidden state seeds an edge-level GRU that emits every row's edges one by one (teacher forced),
sigmoid + binary cross-entropy, Adam with MultiStepLR stepped every batch.

Source: https://github.com/JiaxuanYou/graph-generation
Commit: 3444b8ad2fd7ecb6ade45086b4c75f8e2e9f29d1
Files: ``main.py`` (split, dataset, sampler, ``GraphRNN_RNN`` models), ``train.py`` (``train``,
``train_rnn_epoch``), ``model.py`` (``GRU_plain``, ``binary_cross_entropy_weight``), ``data.py`` (``bfs_seq``,
``encode_adj``, ``Graph_sequence_sampler_pytorch``), ``create_graphs.py`` (``grid_small``), ``args.py``
License: MIT (Copyright (c) 2017 Jiaxuan You, Rex Ying; full text in LICENSES/JiaxuanYou-graph-generation.txt)
Domain: GNN / graph generation (autoregressive graph-level + edge-level RNNs over BFS-ordered adjacency rows)

Kept as written: ``GRU_plain`` (input Linear + ReLU, 4-layer GRU, output MLP; biases 0.25, xavier init), the two
``GRU_plain`` of ``GraphRNN_RNN`` (graph level: input ``max_prev_node``, embedding 32, hidden 64, output 16; edge
level: input 1, embedding 8, hidden 16, output 1; the ``small`` graph types halve the sizes in ``args.py``),
``create_graphs`` for ``grid_small`` (2..4 x 2..5 grids, ``max_prev_node = 15``), the split (``random.seed(123)``,
shuffle, first 80% for training), ``Graph_sequence_sampler_pytorch`` (random permutation, BFS from a random node,
``encode_adj``, x shifted one row behind y with an all-ones first row), the ``WeightedRandomSampler`` of
``batch_size * batch_ratio`` draws, ``train_rnn_epoch``'s loop body (zero_grad of both modules, sort by length,
``pack_padded_sequence`` of y reversed for the edge-level batch, ``output_x`` = y shifted right with a leading 1,
the per-length ``output_y_len``, the graph-level hidden states packed, reversed and put under the edge-level GRU's
first layer, sigmoid, ``binary_cross_entropy_weight``, both steps and both schedulers), lr 0.003, milestones
[400, 1000], gamma 0.3, batch 32.

Deviations from the original:
- the two Adam optimizers (``optimizer_rnn``, ``optimizer_output``) and their two identical MultiStepLR schedulers are
  one Adam over both modules' parameters with one MultiStepLR: Adam is per parameter, so the updates are the same,
  and the Program has one optimizer to name;
- the two modules are held by a small ``GraphRNN`` container (``rnn``, ``output``, the names of main.py) whose
  ``forward`` holds the model lines of ``train_rnn_epoch`` (hidden init through the cleaned ``y_pred``), so that the
  Program's model is one module and its forward starts from a fresh hidden state;
- CUDA (``.cuda()``, ``Variable``) is dropped; ``nn.init.constant`` / ``xavier_uniform`` are written with their
  trailing underscores, ``F.sigmoid`` as ``torch.sigmoid``; networkx 3's ``to_numpy_array`` / ``from_numpy_array``
  replace ``to_numpy_matrix`` / ``from_numpy_matrix``;
- the data loader runs in the main process (``num_workers`` 4 -> 0), the sampler takes a generator seeded from
  ``seed``, ``numpy.random`` (the permutations and BFS roots) is seeded from ``seed``; batch_ratio 32 -> 8;
- one ``train_step`` is one iteration of ``train_rnn_epoch``'s loop (the loader restarted when it runs out), returning
  the loss; logging, tensorboard, the periodic graph sampling (``test_rnn_epoch``) and the checkpoints are dropped;
  the Program's batch is one prepared batch ``((x, y_len, output_x, output_y_len), output_y)``, its ``loss_fn``
  ``binary_cross_entropy_weight``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types
from random import shuffle

import networkx as nx
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.optim.lr_scheduler import MultiStepLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# args.py with graph_type 'grid_small' (parameter_shrink 2); batch_ratio as listed in the docstring
args = types.SimpleNamespace(note='GraphRNN_RNN', graph_type='grid_small', hidden_size_rnn=64,
                             hidden_size_rnn_output=16, embedding_size_rnn=32, embedding_size_rnn_output=8,
                             batch_size=32, num_layers=4, batch_ratio=8, lr=0.003, milestones=[400, 1000],
                             lr_rate=0.3, max_prev_node=None, max_num_node=None)


# model.py
def binary_cross_entropy_weight(y_pred, y, has_weight=False, weight_length=1, weight_max=10):
    if has_weight:
        weight = torch.ones(y.size(0), y.size(1), y.size(2))
        weight_linear = torch.arange(1, weight_length + 1) / weight_length * weight_max
        weight_linear = weight_linear.view(1, weight_length, 1).repeat(y.size(0), 1, y.size(2))
        weight[:, -1 * weight_length:, :] = weight_linear
        loss = F.binary_cross_entropy(y_pred, y, weight=weight)
    else:
        loss = F.binary_cross_entropy(y_pred, y)
    return loss


class GRU_plain(nn.Module):
    def __init__(self, input_size, embedding_size, hidden_size, num_layers, has_input=True, has_output=False, output_size=None):
        super(GRU_plain, self).__init__()
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.has_input = has_input
        self.has_output = has_output

        if has_input:
            self.input = nn.Linear(input_size, embedding_size)
            self.rnn = nn.GRU(input_size=embedding_size, hidden_size=hidden_size, num_layers=num_layers,
                              batch_first=True)
        else:
            self.rnn = nn.GRU(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers, batch_first=True)
        if has_output:
            self.output = nn.Sequential(
                nn.Linear(hidden_size, embedding_size),
                nn.ReLU(),
                nn.Linear(embedding_size, output_size)
            )

        self.relu = nn.ReLU()
        # initialize
        self.hidden = None  # need initialize before forward run

        for name, param in self.rnn.named_parameters():
            if 'bias' in name:
                nn.init.constant_(param, 0.25)
            elif 'weight' in name:
                nn.init.xavier_uniform_(param, gain=nn.init.calculate_gain('sigmoid'))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data = nn.init.xavier_uniform_(m.weight.data, gain=nn.init.calculate_gain('relu'))

    def init_hidden(self, batch_size):
        return torch.zeros(self.num_layers, batch_size, self.hidden_size)

    def forward(self, input_raw, pack=False, input_len=None):
        if self.has_input:
            input = self.input(input_raw)
            input = self.relu(input)
        else:
            input = input_raw
        if pack:
            input = pack_padded_sequence(input, input_len, batch_first=True)
        output_raw, self.hidden = self.rnn(input, self.hidden)
        if pack:
            output_raw = pad_packed_sequence(output_raw, batch_first=True)[0]
        if self.has_output:
            output_raw = self.output(output_raw)
        # return hidden state at each time step
        return output_raw


# data.py
def bfs_seq(G, start_id):
    dictionary = dict(nx.bfs_successors(G, start_id))
    start = [start_id]
    output = [start_id]
    while len(start) > 0:
        next = []
        while len(start) > 0:
            current = start.pop(0)
            neighbor = dictionary.get(current)
            if neighbor is not None:
                next = next + neighbor
        output = output + next
        start = next
    return output


def encode_adj(adj, max_prev_node=10, is_full=False):
    if is_full:
        max_prev_node = adj.shape[0] - 1

    # pick up lower tri
    adj = np.tril(adj, k=-1)
    n = adj.shape[0]
    adj = adj[1:n, 0:n - 1]

    # use max_prev_node to truncate
    # note: now adj is a (n-1)*(n-1) matrix
    adj_output = np.zeros((adj.shape[0], max_prev_node))
    for i in range(adj.shape[0]):
        input_start = max(0, i - max_prev_node + 1)
        input_end = i + 1
        output_start = max_prev_node + input_start - input_end
        output_end = max_prev_node
        adj_output[i, output_start:output_end] = adj[i, input_start:input_end]
        adj_output[i, :] = adj_output[i, :][::-1]  # reverse order

    return adj_output


class Graph_sequence_sampler_pytorch(torch.utils.data.Dataset):
    def __init__(self, G_list, max_num_node=None, max_prev_node=None, iteration=20000):
        self.adj_all = []
        self.len_all = []
        for G in G_list:
            self.adj_all.append(np.asarray(nx.to_numpy_array(G)))
            self.len_all.append(G.number_of_nodes())
        if max_num_node is None:
            self.n = max(self.len_all)
        else:
            self.n = max_num_node
        self.max_prev_node = max_prev_node  # (port) given by create_graphs for grid_small

    def __len__(self):
        return len(self.adj_all)

    def __getitem__(self, idx):
        adj_copy = self.adj_all[idx].copy()
        x_batch = np.zeros((self.n, self.max_prev_node))  # here zeros are padded for small graph
        x_batch[0, :] = 1  # the first input token is all ones
        y_batch = np.zeros((self.n, self.max_prev_node))  # here zeros are padded for small graph
        # generate input x, y pairs
        len_batch = adj_copy.shape[0]
        x_idx = np.random.permutation(adj_copy.shape[0])
        adj_copy = adj_copy[np.ix_(x_idx, x_idx)]
        G = nx.from_numpy_array(adj_copy)
        # then do bfs in the permuted G
        start_idx = np.random.randint(adj_copy.shape[0])
        x_idx = np.array(bfs_seq(G, start_idx))
        adj_copy = adj_copy[np.ix_(x_idx, x_idx)]
        adj_encoded = encode_adj(adj_copy.copy(), max_prev_node=self.max_prev_node)
        # get x and y and adj
        # for small graph the rest are zero padded
        y_batch[0:adj_encoded.shape[0], :] = adj_encoded
        x_batch[1:adj_encoded.shape[0] + 1, :] = adj_encoded
        return {'x': x_batch, 'y': y_batch, 'len': len_batch}


# create_graphs.py
def create(args):
    graphs = []
    for i in range(2, 5):
        for j in range(2, 6):
            graphs.append(nx.grid_2d_graph(i, j))
    args.max_prev_node = 15
    return graphs


def prepare(data, bug=None):
    """(port) the data lines of ``train_rnn_epoch``: sort by length, the edge-level inputs and targets."""
    x_unsorted = data['x'].float()
    y_unsorted = data['y'].float()
    y_len_unsorted = data['len']
    y_len_max = max(y_len_unsorted)
    x_unsorted = x_unsorted[:, 0:y_len_max, :]
    y_unsorted = y_unsorted[:, 0:y_len_max, :]

    # sort input
    y_len, sort_index = torch.sort(y_len_unsorted, 0, descending=True)
    y_len = y_len.numpy().tolist()
    x = torch.index_select(x_unsorted, 0, sort_index)
    y = torch.index_select(y_unsorted, 0, sort_index)

    # input, output for output rnn module
    # a smart use of pytorch builtin function: pack variable--b1_l1,b2_l1,...,b1_l2,b2_l2,...
    y_reshape = pack_padded_sequence(y, y_len, batch_first=True).data
    # reverse y_reshape, so that their lengths are sorted, add dimension
    idx = [i for i in range(y_reshape.size(0) - 1, -1, -1)]
    idx = torch.LongTensor(idx)
    y_reshape = y_reshape.index_select(0, idx)
    y_reshape = y_reshape.view(y_reshape.size(0), y_reshape.size(1), 1)

    if bug == "output_x_not_shifted":
        output_x = y_reshape
    else:
        output_x = torch.cat((torch.ones(y_reshape.size(0), 1, 1), y_reshape[:, 0:-1, 0:1]), dim=1)
    output_y = y_reshape
    # batch size for output module: sum(y_len)
    output_y_len = []
    output_y_len_bin = np.bincount(np.array(y_len))
    for i in range(len(output_y_len_bin) - 1, 0, -1):
        count_temp = np.sum(output_y_len_bin[i:])  # count how many y_len is above i
        output_y_len.extend([min(i, y.size(2))] * count_temp)  # put them in output_y_len; max value should not exceed y.size(2)
    # clean
    output_y = pack_padded_sequence(output_y, output_y_len, batch_first=True)
    output_y = pad_packed_sequence(output_y, batch_first=True)[0]
    return (x, y_len, output_x, output_y_len), output_y


class GraphRNN(nn.Module):
    """(port) the two modules of main.py, and the model lines of ``train_rnn_epoch`` as the forward."""

    def __init__(self, rnn, output, bug=None):
        super().__init__()
        self.rnn = rnn
        self.output = output
        self.bug = bug

    def forward(self, x, y_len, output_x, output_y_len):
        rnn, output = self.rnn, self.output
        # initialize lstm hidden state according to batch size
        rnn.hidden = rnn.init_hidden(batch_size=x.size(0))
        # if using ground truth to train
        h = rnn(x, pack=True, input_len=y_len)
        h = pack_padded_sequence(h, y_len, batch_first=True).data  # get packed hidden vector
        # reverse h
        if self.bug != "h_not_reversed":
            idx = [i for i in range(h.size(0) - 1, -1, -1)]
            idx = torch.LongTensor(idx)
            h = h.index_select(0, idx)
        hidden_null = torch.zeros(args.num_layers - 1, h.size(0), h.size(1))
        output.hidden = torch.cat((h.view(1, h.size(0), h.size(1)), hidden_null), dim=0)  # num_layers, batch_size, hidden_size
        y_pred = output(output_x, pack=True, input_len=output_y_len)
        y_pred = torch.sigmoid(y_pred)
        # clean
        y_pred = pack_padded_sequence(y_pred, output_y_len, batch_first=True)
        y_pred = pad_packed_sequence(y_pred, batch_first=True)[0]
        return y_pred


def _data(seed):
    graphs = create(args)
    # split datasets
    random.seed(123)
    shuffle(graphs)
    graphs_len = len(graphs)
    graphs_train = graphs[0:int(0.8 * graphs_len)]
    args.max_num_node = max([graphs[i].number_of_nodes() for i in range(len(graphs))])
    np.random.seed(seed)
    dataset = Graph_sequence_sampler_pytorch(graphs_train, max_prev_node=args.max_prev_node, max_num_node=args.max_num_node)
    sample_strategy = torch.utils.data.sampler.WeightedRandomSampler([1.0 / len(dataset) for i in range(len(dataset))],
                                                                     num_samples=args.batch_size * args.batch_ratio, replacement=True,
                                                                     generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, num_workers=0, sampler=sample_strategy)


def _build(seed, bug=None):
    dataset_loader = _data(seed)
    torch.manual_seed(seed)
    rnn = GRU_plain(input_size=args.max_prev_node, embedding_size=args.embedding_size_rnn,
                    hidden_size=args.hidden_size_rnn, num_layers=args.num_layers, has_input=True,
                    has_output=True, output_size=args.hidden_size_rnn_output)
    output = GRU_plain(input_size=1, embedding_size=args.embedding_size_rnn_output,
                       hidden_size=args.hidden_size_rnn_output, num_layers=args.num_layers, has_input=True,
                       has_output=True, output_size=1)
    model = GraphRNN(rnn, output, bug=bug)
    optimizer = optim.Adam(list(rnn.parameters()) + list(output.parameters()), lr=args.lr)
    scheduler = MultiStepLR(optimizer, milestones=args.milestones, gamma=args.lr_rate)

    batch = prepare(next(iter(dataset_loader)), bug)
    st = {"it": iter(dataset_loader)}

    def train_step():
        rnn.train()
        output.train()
        try:
            data = next(st["it"])
        except StopIteration:
            st["it"] = iter(dataset_loader)
            data = next(st["it"])
        rnn.zero_grad()
        if bug != "output_zero_grad_dropped":
            output.zero_grad()
        inputs, output_y = prepare(data, bug)
        y_pred = model(*inputs)
        # use cross entropy loss
        loss = binary_cross_entropy_weight(y_pred, output_y)
        loss.backward()
        # update deterministic and lstm
        optimizer.step()
        scheduler.step()
        return loss.item()

    return Program(name="graphrnn_grid", model=model, batch=batch, loss_fn=binary_cross_entropy_weight,
                   optimizer=optimizer, train_step=train_step, loader=dataset_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic teacher-forcing slip: the edge-level GRU's input is the target sequence itself instead of the target
    # shifted right behind a leading 1, so every edge is predicted from itself.
    Bug("output_x_not_shifted", functools.partial(_build, bug="output_x_not_shifted"), "learning_ledger",
        ("TASK",)),
    # classic alignment slip: the packed graph-level states are not reversed to the order of the reversed packed
    # targets, so each row's edges are generated from another graph's (or another row's) state.
    Bug("h_not_reversed", functools.partial(_build, bug="h_not_reversed"), "learning_ledger", ("DEPENDENCY",)),
    # classic: output.zero_grad() left out of the loop body: the edge-level GRU's gradients pile up across batches
    # while the graph-level GRU's are cleared (confined to one module, so it keeps a module place).
    Bug("output_zero_grad_dropped", functools.partial(_build, bug="output_zero_grad_dropped"), "step_probe",
        ("output",)),
]
