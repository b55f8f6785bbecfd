# ruff: noqa: PLR0402, UP039
"""ST-GCN (spatial temporal graph convolutional networks) for skeleton action recognition: a BatchNorm over joints x
coordinates, ten st_gcn blocks (a graph convolution over the skeleton's spatially partitioned adjacency, weighted by
learnable edge importances, then a temporal convolution, with residuals), global pooling over time, joints and
persons, a 1x1 conv classifier, cross-entropy, SGD with Nesterov momentum and a step lr.

Source: https://github.com/yysijie/st-gcn
Commit: 221c0e152054b8da593774c0d483e59befdb9061
Files: ``net/st_gcn.py`` (``Model``, ``st_gcn``), ``net/utils/tgcn.py`` (``ConvTemporalGraphical``),
``net/utils/graph.py`` (``Graph``, ``get_hop_distance``, ``normalize_digraph``), ``processor/recognition.py``
(``weights_init``, ``load_model``, ``load_optimizer``, ``adjust_lr``, ``train``), ``processor/processor.py`` (the
train DataLoader), ``config/st_gcn/ntu-xsub/train.yaml``.
License: BSD-2-Clause (Copyright (c) 2018, Multimedia Laboratary, The Chinese University of Hong Kong; full text in
LICENSES/yysijie-st-gcn.txt)
Domain: GNN, spatio-temporal graph convolution (skeleton graph, NTU RGB+D layout, spatial partitioning)

Kept as written: ``Graph`` (the 'ntu-rgb+d' layout and the 'spatial' strategy: root / closer / further partitions
of the 1-hop neighbourhood, ``normalize_digraph``), ``ConvTemporalGraphical`` (1x1 conv to ``K * C`` channels, then
``einsum('nkctv,kvw->nctw')``), ``st_gcn`` (gcn, BN-ReLU-temporal conv (9 x 1)-BN-Dropout, the three residual
kinds), ``Model`` (``data_bn`` over ``V * C`` after the permute, the ten blocks with strides 1/2, edge importance
``ParameterList`` multiplying ``A``, average pooling, mean over persons, ``fcn``), ``weights_init``, the loss
(``nn.CrossEntropyLoss``), the optimizer (SGD, momentum 0.9, Nesterov, weight decay 1e-4, base_lr 0.1),
``adjust_lr`` (x0.1 at epochs 10 and 50), the train loop body (forward, loss, zero_grad, backward, step), the
config's dropout 0.5 and edge importance weighting.

Deviations from the original:
- the NTU RGB+D data (``Feeder`` over ``train_data.npy`` / ``train_label.pkl``) is replaced by synthetic skeleton
  sequences made from ``seed``: 96 sequences of shape (C=3, T=16, V=25, M=2) (T=300 in NTU), a random rest pose per
  sequence plus noise, the class (6 of them; 60 in NTU) deciding which body part (the arms, the legs, the torso and
  head) swings vertically (amplitude 2) and at which of two frequencies; the second person is all zeros, as in single-actor NTU clips.
- sizes for 2 CPU cores: block widths 16/32/64 (64/128/256), batch_size 16 (64); ``num_class`` 6.
- the DataLoader (``shuffle=True, drop_last=True``) is a seeded permutation over the tensors; the epoch counter
  advances when the permutation is exhausted (``adjust_lr`` is called at each epoch's start, as ``train()`` does).
  ``train_step`` is one iteration of ``train()``'s loop and returns the loss. Logging, the torchlight IO and the
  multi-GPU device list are dropped; ``import_class`` is the direct class.
- unused pieces are left out: ``Graph``'s 'ntu_edge' layout, ``normalize_undigraph``, ``Model.extract_feature``,
  the Adam branch of ``load_optimizer``, ``test()`` / ``show_topk``; the long docstrings are shortened.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

C1, C2, C3 = 16, 32, 64  # (port) 64, 128, 256 in the original
NUM_CLASS, N_SEQ, T_LEN, BATCH_SIZE = 6, 96, 16, 16


# ---- net/utils/graph.py ----

class Graph():
    """ The Graph to model the skeletons extracted by the openpose

    Args:
        strategy (string): must be one of the follow candidates
        - uniform: Uniform Labeling
        - distance: Distance Partitioning
        - spatial: Spatial Configuration
        For more information, please refer to the section 'Partition Strategies'
            in our paper (https://arxiv.org/abs/1801.07455).

        layout (string): must be one of the follow candidates
        - openpose: Is consists of 18 joints. For more information, please
            refer to https://github.com/CMU-Perceptual-Computing-Lab/openpose#output
        - ntu-rgb+d: Is consists of 25 joints. For more information, please
            refer to https://github.com/shahroudy/NTURGB-D

        max_hop (int): the maximal distance between two connected nodes
        dilation (int): controls the spacing between the kernel points

    """

    def __init__(self,
                 layout='openpose',
                 strategy='uniform',
                 max_hop=1,
                 dilation=1):
        self.max_hop = max_hop
        self.dilation = dilation

        self.get_edge(layout)
        self.hop_dis = get_hop_distance(
            self.num_node, self.edge, max_hop=max_hop)
        self.get_adjacency(strategy)

    def __str__(self):
        return self.A

    def get_edge(self, layout):
        if layout == 'openpose':
            self.num_node = 18
            self_link = [(i, i) for i in range(self.num_node)]
            neighbor_link = [(4, 3), (3, 2), (7, 6), (6, 5), (13, 12), (12,
                                                                        11),
                             (10, 9), (9, 8), (11, 5), (8, 2), (5, 1), (2, 1),
                             (0, 1), (15, 0), (14, 0), (17, 15), (16, 14)]
            self.edge = self_link + neighbor_link
            self.center = 1
        elif layout == 'ntu-rgb+d':
            self.num_node = 25
            self_link = [(i, i) for i in range(self.num_node)]
            neighbor_1base = [(1, 2), (2, 21), (3, 21), (4, 3), (5, 21),
                              (6, 5), (7, 6), (8, 7), (9, 21), (10, 9),
                              (11, 10), (12, 11), (13, 1), (14, 13), (15, 14),
                              (16, 15), (17, 1), (18, 17), (19, 18), (20, 19),
                              (22, 23), (23, 8), (24, 25), (25, 12)]
            neighbor_link = [(i - 1, j - 1) for (i, j) in neighbor_1base]
            self.edge = self_link + neighbor_link
            self.center = 21 - 1
        else:
            raise ValueError("Do Not Exist This Layout.")

    def get_adjacency(self, strategy):
        valid_hop = range(0, self.max_hop + 1, self.dilation)
        adjacency = np.zeros((self.num_node, self.num_node))
        for hop in valid_hop:
            adjacency[self.hop_dis == hop] = 1
        normalize_adjacency = normalize_digraph(adjacency)

        if strategy == 'uniform':
            A = np.zeros((1, self.num_node, self.num_node))
            A[0] = normalize_adjacency
            self.A = A
        elif strategy == 'distance':
            A = np.zeros((len(valid_hop), self.num_node, self.num_node))
            for i, hop in enumerate(valid_hop):
                A[i][self.hop_dis == hop] = normalize_adjacency[self.hop_dis ==
                                                                hop]
            self.A = A
        elif strategy == 'spatial':
            A = []
            for hop in valid_hop:
                a_root = np.zeros((self.num_node, self.num_node))
                a_close = np.zeros((self.num_node, self.num_node))
                a_further = np.zeros((self.num_node, self.num_node))
                for i in range(self.num_node):
                    for j in range(self.num_node):
                        if self.hop_dis[j, i] == hop:
                            if self.hop_dis[j, self.center] == self.hop_dis[
                                    i, self.center]:
                                a_root[j, i] = normalize_adjacency[j, i]
                            elif self.hop_dis[j, self.
                                              center] > self.hop_dis[i, self.
                                                                     center]:
                                a_close[j, i] = normalize_adjacency[j, i]
                            else:
                                a_further[j, i] = normalize_adjacency[j, i]
                if hop == 0:
                    A.append(a_root)
                else:
                    A.append(a_root + a_close)
                    A.append(a_further)
            A = np.stack(A)
            self.A = A
        else:
            raise ValueError("Do Not Exist This Strategy")


def get_hop_distance(num_node, edge, max_hop=1):
    A = np.zeros((num_node, num_node))
    for i, j in edge:
        A[j, i] = 1
        A[i, j] = 1

    # compute hop steps
    hop_dis = np.zeros((num_node, num_node)) + np.inf
    transfer_mat = [np.linalg.matrix_power(A, d) for d in range(max_hop + 1)]
    arrive_mat = (np.stack(transfer_mat) > 0)
    for d in range(max_hop, -1, -1):
        hop_dis[arrive_mat[d]] = d
    return hop_dis


def normalize_digraph(A):
    Dl = np.sum(A, 0)
    num_node = A.shape[0]
    Dn = np.zeros((num_node, num_node))
    for i in range(num_node):
        if Dl[i] > 0:
            Dn[i, i] = Dl[i]**(-1)
    AD = np.dot(A, Dn)
    return AD


# ---- net/utils/tgcn.py ----

class ConvTemporalGraphical(nn.Module):
    r"""The basic module for applying a graph convolution.

    Shape:
        - Input[0]: Input graph sequence in :math:`(N, in_channels, T_{in}, V)` format
        - Input[1]: Input graph adjacency matrix in :math:`(K, V, V)` format
        - Output[0]: Outpu graph sequence in :math:`(N, out_channels, T_{out}, V)` format
        - Output[1]: Graph adjacency matrix for output data in :math:`(K, V, V)` format
    """

    def __init__(self,
                 in_channels,
                 out_channels,
                 kernel_size,
                 t_kernel_size=1,
                 t_stride=1,
                 t_padding=0,
                 t_dilation=1,
                 bias=True):
        super().__init__()

        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(
            in_channels,
            out_channels * kernel_size,
            kernel_size=(t_kernel_size, 1),
            padding=(t_padding, 0),
            stride=(t_stride, 1),
            dilation=(t_dilation, 1),
            bias=bias)

    def forward(self, x, A):
        assert A.size(0) == self.kernel_size

        x = self.conv(x)

        n, kc, t, v = x.size()
        x = x.view(n, self.kernel_size, kc//self.kernel_size, t, v)
        x = torch.einsum('nkctv,kvw->nctw', (x, A))

        return x.contiguous(), A


# ---- net/st_gcn.py ----

class Model(nn.Module):
    r"""Spatial temporal graph convolutional networks.

    Shape:
        - Input: :math:`(N, in_channels, T_{in}, V_{in}, M_{in})`
        - Output: :math:`(N, num_class)`
    """

    def __init__(self, in_channels, num_class, graph_args,
                 edge_importance_weighting, bug=None, **kwargs):
        super().__init__()
        self.bug = bug

        # load graph
        self.graph = Graph(**graph_args)
        A = torch.tensor(self.graph.A, dtype=torch.float32, requires_grad=False)
        self.register_buffer('A', A)

        # build networks
        spatial_kernel_size = A.size(0)
        temporal_kernel_size = 9
        kernel_size = (temporal_kernel_size, spatial_kernel_size)
        self.data_bn = nn.BatchNorm1d(in_channels * A.size(1))
        kwargs0 = {k: v for k, v in kwargs.items() if k != 'dropout'}
        self.st_gcn_networks = nn.ModuleList((
            st_gcn(in_channels, C1, kernel_size, 1, residual=False, **kwargs0),
            st_gcn(C1, C1, kernel_size, 1, **kwargs),
            st_gcn(C1, C1, kernel_size, 1, **kwargs),
            st_gcn(C1, C1, kernel_size, 1, **kwargs),
            st_gcn(C1, C2, kernel_size, 2, **kwargs),
            st_gcn(C2, C2, kernel_size, 1, **kwargs),
            st_gcn(C2, C2, kernel_size, 1, **kwargs),
            st_gcn(C2, C3, kernel_size, 2, **kwargs),
            st_gcn(C3, C3, kernel_size, 1, **kwargs),
            st_gcn(C3, C3, kernel_size, 1, **kwargs),
        ))

        # initialize parameters for edge importance weighting
        if edge_importance_weighting:
            if bug == "edge_importance_plain_list":
                self.edge_importance = [
                    nn.Parameter(torch.ones(self.A.size()))
                    for i in self.st_gcn_networks
                ]
            else:
                self.edge_importance = nn.ParameterList([
                    nn.Parameter(torch.ones(self.A.size()))
                    for i in self.st_gcn_networks
                ])
        else:
            self.edge_importance = [1] * len(self.st_gcn_networks)

        # fcn for prediction
        self.fcn = nn.Conv2d(C3, num_class, kernel_size=1)

    def forward(self, x):

        # data normalization
        N, C, T, V, M = x.size()
        if self.bug == "data_bn_viewed_not_permuted":
            x = x.contiguous()
        else:
            x = x.permute(0, 4, 3, 1, 2).contiguous()
        x = x.view(N * M, V * C, T)
        x = self.data_bn(x)
        x = x.view(N, M, V, C, T)
        x = x.permute(0, 1, 3, 4, 2).contiguous()
        x = x.view(N * M, C, T, V)

        # forwad
        for gcn, importance in zip(self.st_gcn_networks, self.edge_importance):
            x, _ = gcn(x, self.A * importance)

        # global pooling
        x = F.avg_pool2d(x, x.size()[2:])
        x = x.view(N, M, -1, 1, 1).mean(dim=1)

        # prediction
        x = self.fcn(x)
        x = x.view(x.size(0), -1)

        return x


class st_gcn(nn.Module):
    r"""Applies a spatial temporal graph convolution over an input graph sequence.

    Shape:
        - Input[0]: Input graph sequence in :math:`(N, in_channels, T_{in}, V)` format
        - Input[1]: Input graph adjacency matrix in :math:`(K, V, V)` format
        - Output[0]: Outpu graph sequence in :math:`(N, out_channels, T_{out}, V)` format
        - Output[1]: Graph adjacency matrix for output data in :math:`(K, V, V)` format
    """

    def __init__(self,
                 in_channels,
                 out_channels,
                 kernel_size,
                 stride=1,
                 dropout=0,
                 residual=True):
        super().__init__()

        assert len(kernel_size) == 2
        assert kernel_size[0] % 2 == 1
        padding = ((kernel_size[0] - 1) // 2, 0)

        self.gcn = ConvTemporalGraphical(in_channels, out_channels,
                                         kernel_size[1])

        self.tcn = nn.Sequential(
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(
                out_channels,
                out_channels,
                (kernel_size[0], 1),
                (stride, 1),
                padding,
            ),
            nn.BatchNorm2d(out_channels),
            nn.Dropout(dropout, inplace=True),
        )

        if not residual:
            self.residual = lambda x: 0

        elif (in_channels == out_channels) and (stride == 1):
            self.residual = lambda x: x

        else:
            self.residual = nn.Sequential(
                nn.Conv2d(
                    in_channels,
                    out_channels,
                    kernel_size=1,
                    stride=(stride, 1)),
                nn.BatchNorm2d(out_channels),
            )

        self.relu = nn.ReLU(inplace=True)

    def forward(self, x, A):

        res = self.residual(x)
        x, A = self.gcn(x, A)
        x = self.tcn(x) + res

        return self.relu(x), A


# ---- processor/recognition.py ----

def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv1d') != -1 or classname.find('Conv2d') != -1:
        m.weight.data.normal_(0.0, 0.02)
        if m.bias is not None:
            m.bias.data.fill_(0)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


# arms (shoulder..hand tips), legs (hip..foot), torso and head: NTU joints, 0-based
_PARTS = [[4, 5, 6, 7, 8, 9, 10, 11, 21, 22, 23, 24], [12, 13, 14, 15, 16, 17, 18, 19], [0, 1, 2, 3, 20]]


def synthetic_skeletons(g):
    """(port) N_SEQ sequences (3, T, 25, 2): a rest pose plus noise; class = (body part, frequency) of a swing."""
    labels = torch.randint(0, NUM_CLASS, (N_SEQ,), generator=g)
    data = torch.zeros(N_SEQ, 3, T_LEN, 25, 2)
    t = torch.arange(T_LEN, dtype=torch.float32)
    for n in range(N_SEQ):
        c = int(labels[n])
        pose = torch.randn(3, 1, 25, generator=g) * 0.3
        seq = pose.expand(3, T_LEN, 25).clone() + 0.05 * torch.randn(3, T_LEN, 25, generator=g)
        part, freq = _PARTS[c % 3], (1.0 if c < 3 else 3.0)
        phase = float(torch.rand((), generator=g)) * 2 * math.pi
        swing = 2.0 * torch.sin(2 * math.pi * freq * t / T_LEN + phase)
        seq[1, :, part] += swing[:, None]
        data[n, :, :, :, 0] = seq
    return data, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    data_all, label_all = synthetic_skeletons(g)

    arg_base_lr, arg_step, arg_nesterov, arg_weight_decay = 0.1, [10, 50], True, 0.0001

    # load_model
    model = Model(in_channels=3, num_class=NUM_CLASS, dropout=0.5, edge_importance_weighting=True,
                  graph_args={'layout': 'ntu-rgb+d', 'strategy': 'spatial'}, bug=bug)
    model.apply(weights_init)
    loss = nn.CrossEntropyLoss()

    # load_optimizer ('SGD')
    optimizer = optim.SGD(
        model.parameters(),
        lr=arg_base_lr,
        momentum=0.9,
        nesterov=arg_nesterov,
        weight_decay=arg_weight_decay)

    meta_info = {'epoch': 0, 'iter': 0}

    def adjust_lr():
        lr = arg_base_lr * (
            0.1**np.sum(meta_info['epoch']>= np.array(arg_step)))
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    def loader():
        """(port) DataLoader(shuffle=True, drop_last=True) over the synthetic feeder."""
        perm = torch.randperm(N_SEQ, generator=g)
        for k in range(0, N_SEQ - BATCH_SIZE + 1, BATCH_SIZE):
            idx = perm[k:k + BATCH_SIZE]
            yield data_all[idx], label_all[idx]

    def epochs():
        while True:
            model.train()
            adjust_lr()
            yield from loader()
            meta_info['epoch'] += 1

    stream = epochs()
    batch = next(loader())

    def train_step():
        data, label = next(stream)

        # get data
        data = data.float()
        label = label.long()

        # forward
        output = model(data)
        l = loss(output, label)

        # backward
        optimizer.zero_grad()
        l.backward()
        optimizer.step()

        meta_info['iter'] += 1
        return l

    return Program(name="stgcn_skeleton", model=model, batch=batch, loss_fn=loss, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the permute before ``data_bn`` left out (classic: view instead of permute): ``view(N * M, V * C, T)`` on the
    # (N, C, T, V, M) input scrambles coordinates, frames, joints and persons before the BatchNorm, and the later
    # ``view(N, M, V, C, T)`` hands the graph convolutions a skeleton whose joints are not the graph's nodes.
    Bug("data_bn_viewed_not_permuted", functools.partial(_build, bug="data_bn_viewed_not_permuted"), "tensor_trace",
        ("data_bn",)),
    # the edge importances kept in a plain Python list of Parameters instead of a ParameterList (classic): they are
    # not registered, so ``model.parameters()`` -- and the optimizer -- never see them; they stay at one.
    Bug("edge_importance_plain_list", functools.partial(_build, bug="edge_importance_plain_list"), "four_structures",
        ("edge_importance",)),
]
