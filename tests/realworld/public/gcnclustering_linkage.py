# ruff: noqa: UP008, B006, C403, UP032, RUF059, PLR0402, C408
"""Linkage-based face clustering with a GCN over instance pivot subgraphs (link prediction between a pivot and its
one-hop neighbours), from Zhongdao/gcn_clustering.

Source: https://github.com/Zhongdao/gcn_clustering
Commit: 3068dba9b12caf3f3cb4968c8045a2f1602171a5
Files: ``model/gcn.py``, ``train.py``, ``feeder/feeder.py``, ``utils/__init__.py``
License: MIT (Copyright (c) 2019 ZhongdaoWang; full text in LICENSES/Zhongdao-gcn_clustering.txt)
Domain: GNN, link prediction (Instance Pivot Subgraphs built from a kNN graph: features minus the pivot's feature,
row-normalized adjacency over ``active_connection`` neighbours, padded to a fixed size; four mean-aggregation
``GraphConv`` layers on ``[x, A x]``, a PReLU MLP classifying each pivot-to-one-hop link; cross-entropy, SGD with
momentum and weight decay, lr x0.1 at epochs 1-4).

Kept as written: ``MeanAggregator``, ``GraphConv`` (xavier weight on the concatenation, zero bias, ReLU), ``gcn``
(affine-free BatchNorm on the inputs, conv1..conv4, the classifier, the one-hop edge features gathered per
subgraph), the ``Feeder``'s subgraph construction (hops, unique nodes, feature centering, adjacency, padding,
edge labels), ``train``'s loop body (forward, ``make_labels``, the loss, ``accuracy``, ``zero_grad``/``backward``/
``step``), ``adjust_lr``, SGD(lr 1e-2, momentum 0.9, weight decay 1e-4), batch size 16, shuffled loader.

Deviations from the original:
- sizes: feature dimension 512 -> 32 (bn0, conv1, conv2 in and out), 256 -> 16 (conv3, conv4, classifier), k_at_hop
  [200, 10] -> [8, 3], active_connection 10 -> 3, 480 samples (one epoch is 30 steps).
- data: CASIA face features, their kd-tree kNN graph and labels are replaced by synthetic identity clusters made
  from ``seed`` (80 identities x 6 samples, each a noisy copy of an identity centre, L2-normalized), with the
  exact kNN graph (self first) computed in numpy; the feeder reads them from arrays instead of ``.npy`` paths.
- the ``.cuda()`` calls stay on the CPU; ``sklearn.metrics`` (not installed here) precision and recall in
  ``accuracy`` are written out in numpy.
- ``train_step`` is one pass of ``train``'s loop body on the next loader batch, and calls ``adjust_lr`` at the
  start of each new epoch as ``main`` does; it returns the loss. Meters, printing, the ``Logger`` and checkpoints are
  dropped; ``args`` is a namespace per build.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data
from torch.nn import init
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

FEAT_DIM, HID_DIM = 32, 16

# ----- model/gcn.py -----

class MeanAggregator(nn.Module):
    def __init__(self):
        super(MeanAggregator, self).__init__()
    def forward(self, features, A ):
        x = torch.bmm(A, features)
        return x

class GraphConv(nn.Module):
    def __init__(self, in_dim, out_dim, agg):
        super(GraphConv, self).__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.weight = nn.Parameter(
                torch.FloatTensor(in_dim *2, out_dim))
        self.bias = nn.Parameter(torch.FloatTensor(out_dim))
        init.xavier_uniform_(self.weight)
        init.constant_(self.bias, 0)
        self.agg = agg()

    def forward(self, features, A):
        b, n, d = features.shape
        assert(d==self.in_dim)
        agg_feats = self.agg(features,A)
        cat_feats = torch.cat([features, agg_feats], dim=2)
        out = torch.einsum('bnd,df->bnf', (cat_feats, self.weight))
        out = F.relu(out + self.bias)
        return out


class gcn(nn.Module):
    def __init__(self):
        super(gcn, self).__init__()
        self.bn0 = nn.BatchNorm1d(FEAT_DIM, affine=False)
        self.conv1 = GraphConv(FEAT_DIM, FEAT_DIM, MeanAggregator)
        self.conv2 = GraphConv(FEAT_DIM, FEAT_DIM, MeanAggregator)
        self.conv3 = GraphConv(FEAT_DIM, HID_DIM, MeanAggregator)
        self.conv4 = GraphConv(HID_DIM, HID_DIM,MeanAggregator)

        self.classifier = nn.Sequential(
                            nn.Linear(HID_DIM, HID_DIM),
                            nn.PReLU(HID_DIM),
                            nn.Linear(HID_DIM, 2))

    def forward(self, x, A, one_hop_idcs, train=True):
        # data normalization l2 -> bn
        B,N,D = x.shape
        #xnorm = x.norm(2,2,keepdim=True) + 1e-8
        #xnorm = xnorm.expand_as(x)
        #x = x.div(xnorm)

        x = x.view(-1, D)
        x = self.bn0(x)
        x = x.view(B,N,D)


        x = self.conv1(x,A)
        x = self.conv2(x,A)
        x = self.conv3(x,A)
        x = self.conv4(x,A)
        k1 = one_hop_idcs.size(-1)
        dout = x.size(-1)
        edge_feat = torch.zeros(B,k1,dout)
        for b in range(B):
            edge_feat[b,:,:] = x[b, one_hop_idcs[b]]
        edge_feat = edge_feat.view(-1,dout)
        pred = self.classifier(edge_feat)

        # shape: (B*k1)x2
        return pred

# ----- feeder/feeder.py -----

class Feeder(data.Dataset):
    '''
    Generate a sub-graph from the feature graph centered at some node,
    and now the sub-graph has a fixed depth, i.e. 2
    '''
    def __init__(self, features, knn_graph, labels, seed=1,
                 k_at_hop=[200,5], active_connection=5, train=True, bug=None):
        np.random.seed(seed)
        random.seed(seed)
        self.features = features
        self.knn_graph = knn_graph[:,:k_at_hop[0]+1]
        self.labels = labels
        self.num_samples = len(self.features)
        self.depth = len(k_at_hop)
        self.k_at_hop = k_at_hop
        self.active_connection = active_connection
        self.train = train
        self.bug = bug
        assert np.mean(k_at_hop)>=active_connection

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        '''
        return the vertex feature and the adjacent matrix A, together
        with the indices of the center node and its 1-hop nodes
        '''
        # hops[0] for 1-hop neighbors, hops[1] for 2-hop neighbors
        hops = list()
        center_node = index
        hops.append(set(self.knn_graph[center_node][1:]))

        # Actually we dont need the loop since the depth is fixed here,
        # But we still remain the code for further revision
        for d in range(1,self.depth):
            hops.append(set())
            for h in hops[-2]:
                hops[-1].update(set(self.knn_graph[h][1:self.k_at_hop[d]+1]))


        hops_set = set([h for hop in hops for h in hop])
        hops_set.update([center_node,])
        unique_nodes_list = list(hops_set)
        unique_nodes_map = {j:i for i,j in enumerate(unique_nodes_list)}

        center_idx = torch.Tensor([unique_nodes_map[center_node],]).type(torch.long)
        one_hop_idcs = torch.Tensor([unique_nodes_map[i] for i in hops[0]]).type(torch.long)
        center_feat = torch.Tensor(self.features[center_node]).type(torch.float)
        feat = torch.Tensor(self.features[unique_nodes_list]).type(torch.float)
        feat = feat - center_feat

        max_num_nodes = self.k_at_hop[0] * (self.k_at_hop[1] + 1) + 1
        num_nodes = len(unique_nodes_list)
        A = torch.zeros(num_nodes, num_nodes)

        _, fdim = feat.shape
        feat = torch.cat([feat, torch.zeros(max_num_nodes - num_nodes, fdim)], dim=0)

        for node in unique_nodes_list:
            neighbors = self.knn_graph[node, 1:self.active_connection+1]
            for n in neighbors:
                if n in unique_nodes_list:
                    A[unique_nodes_map[node], unique_nodes_map[n]] = 1
                    A[unique_nodes_map[n], unique_nodes_map[node]] = 1

        D = A.sum(1, keepdim=True)
        A = A.div(D)
        A_ = torch.zeros(max_num_nodes,max_num_nodes)
        A_[:num_nodes,:num_nodes] = A


        labels = self.labels[np.asarray(unique_nodes_list)]
        labels = torch.from_numpy(labels).type(torch.long)
        #edge_labels = labels.expand(num_nodes,num_nodes).eq(
        #        labels.expand(num_nodes,num_nodes).t())
        one_hop_labels = labels[one_hop_idcs]
        if self.bug == "center_label_from_first_node":
            center_label = labels[0]
        else:
            center_label = labels[center_idx]
        edge_labels = (center_label == one_hop_labels).long()

        if self.train:
            return (feat, A_, center_idx, one_hop_idcs), edge_labels

        # Testing
        unique_nodes_list = torch.Tensor(unique_nodes_list)
        unique_nodes_list = torch.cat(
                [unique_nodes_list, torch.zeros(max_num_nodes-num_nodes)], dim=0)
        return(feat, A_, center_idx, one_hop_idcs, unique_nodes_list), edge_labels

# ----- utils/__init__.py -----

def to_numpy(tensor):
    if torch.is_tensor(tensor):
        return tensor.cpu().numpy()
    elif type(tensor).__module__ != 'numpy':
        raise ValueError("Cannot convert {} to numpy array"
                         .format(type(tensor)))
    return tensor

# ----- train.py -----

def make_labels(gtmat):
    return gtmat.view(-1)

def adjust_lr(opt, epoch, args):
    scale = 0.1
    if epoch in [1,2,3,4]:
        args.lr *=0.1
        for param_group in opt.param_groups:
            param_group['lr'] = param_group['lr'] * scale


def precision_score(label, pred):
    tp = np.sum((pred == 1) & (label == 1))
    return tp / max(np.sum(pred == 1), 1)


def recall_score(label, pred):
    tp = np.sum((pred == 1) & (label == 1))
    return tp / max(np.sum(label == 1), 1)


def accuracy(pred, label):
    pred = torch.argmax(pred, dim=1).long()
    acc = torch.mean((pred == label).float())
    pred = to_numpy(pred)
    label = to_numpy(label)
    p = precision_score(label, pred)
    r = recall_score(label, pred)
    return p,r,acc


def synthetic_faces(seed, identities=80, per_identity=6, dim=FEAT_DIM):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(identities, dim))
    labels = np.repeat(np.arange(identities), per_identity)
    feats = centres[labels] + 0.5 * rng.normal(size=(len(labels), dim))
    feats = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    order = rng.permutation(len(labels))
    feats, labels = feats[order].astype(np.float32), labels[order]
    dist = ((feats[:, None, :] - feats[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(dist, -1.0)
    knn_graph = np.argsort(dist, axis=1)
    return feats, knn_graph, labels


def _build(seed, bug=None):
    args = types.SimpleNamespace(seed=seed, lr=1e-2, momentum=0.9, weight_decay=1e-4, batch_size=16,
                                 k_at_hop=[8, 3], active_connection=3)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    feats, knn_graph, labels = synthetic_faces(seed)
    trainset = Feeder(feats, knn_graph, labels, args.seed, args.k_at_hop, args.active_connection, bug=bug)
    trainloader = DataLoader(
            trainset, batch_size=args.batch_size,
            num_workers=0, shuffle=True, generator=torch.Generator().manual_seed(seed))

    net = gcn()
    opt = torch.optim.SGD(net.parameters(), args.lr,
                          momentum=args.momentum,
                          weight_decay=args.weight_decay)

    criterion = nn.CrossEntropyLoss()

    def batches():
        epoch = 0
        while True:
            adjust_lr(opt, epoch, args)
            net.train()
            yield from trainloader
            epoch += 1

    it = batches()

    def train_step():
        (feat, adj, cid, h1id), gtmat = next(it)
        pred = net(feat, adj, h1id)
        labels = make_labels(gtmat).long()
        loss = crit(pred, labels)
        p,r, acc = accuracy(pred, labels)

        if bug == "zero_grad_after_backward":
            loss.backward()
            opt.zero_grad()
        else:
            opt.zero_grad()
            loss.backward()
        opt.step()
        return loss

    crit = criterion
    (feat, adj, cid, h1id), gtmat = next(iter(DataLoader(trainset, batch_size=args.batch_size, shuffle=True,
                                                          generator=torch.Generator().manual_seed(seed + 1))))
    batch = ({"x": feat, "A": adj, "one_hop_idcs": h1id}, make_labels(gtmat).long())
    return Program(name="gcnclustering_linkage", model=net, batch=batch, loss_fn=criterion, optimizer=opt,
                   train_step=train_step, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic index slip in the feeder: the pivot's label is read at position 0 of the subgraph's node list (an
    # arbitrary node of the set) instead of at center_idx, so the link labels compare the neighbours with the wrong
    # identity.
    Bug("center_label_from_first_node", functools.partial(_build, bug="center_label_from_first_node"),
        "learning_ledger", ("TASK",)),
    # classic: opt.zero_grad() after loss.backward(): every step applies a zero gradient (weight decay only).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
