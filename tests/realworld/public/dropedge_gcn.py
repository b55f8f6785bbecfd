# ruff: noqa: UP008, UP031, PLR0402, RUF059
"""DropEdge on a multi-layer GCN for transductive node classification, from the DropEdge authors' code.

Source: https://github.com/DropEdge/DropEdge, Commit: 390cd71223c73ddb9bba47bd990435dde2de450d,
Files: ``src/train_new.py``, ``src/models.py`` (``GCNModel``), ``src/layers.py`` (``GraphConvolutionBS``,
``GraphBaseBlock``, ``MultiLayerGCNBlock``), ``src/sample.py`` (``Sampler``: ``stub_sampler``,
``randomedge_sampler``, ``get_test_set``), ``src/normalization.py``, ``src/utils.py``, ``src/metric.py``,
``script/cora_GCN.sh``.
License: MIT (Copyright (c) 2019 DropEdge; full text in LICENSES/DropEdge-DropEdge.txt).
Domain: GNN, node classification (sparse normalized adjacency, DropEdge edge sampling every epoch).

Kept as written: ``script/cora_GCN.sh``'s settings (``--type mutigcn --nhiddenlayer 1 --nbaseblocklayer 2
--hidden 128 --lr 0.01 --weight_decay 0.005 --sampling_percent 0.7 --dropout 0.8 --normalization FirstOrderGCN``,
``withbn`` / ``withloop`` off as argparse leaves them), the layers and the model (input GCN layer, the
``nores`` multi-layer block with dropout after each layer, output GCN layer, ``log_softmax``), Adam with weight
decay, the ``MultiStepLR`` built (stepped only with ``--lradjust``, off), the ``randomedge_sampler`` (a random
``percent`` of the nonzeros kept, then normalized), ``train()`` (``model.train()``, zero_grad, forward on the
sampled adjacency, ``F.nll_loss`` on ``idx_train``, backward, step, then validation in ``model.eval()`` on the full
adjacency), the row-normalized features and the ``FirstOrderGCN`` normalization ``I + D^-1/2 A D^-1/2``.

Deviations from the original:
- the Cora files are replaced by a synthetic citation graph made from ``seed``: 150 nodes in 3 classes, a
  stochastic block model (edges mostly within a class, symmetric), binary bag-of-words features (60 words, each
  class with its own frequent words) row-normalized as ``preprocess_citation`` does; the "full" split takes the
  first 90 nodes for training, the next 30 for validation, the last 30 for test. ``data_loader`` /
  ``load_citation`` (pickle files, networkx) are replaced by building the same objects from that graph.
- ``sparse_mx_to_torch_sparse_tensor`` builds its tensor with ``torch.sparse_coo_tensor`` (``torch.sparse.FloatTensor``
  is deprecated); ``np.random`` is a ``np.random.RandomState(seed)`` instance; cpu only (no cuda / mixmode).
- only the ``mutigcn`` block the script uses is copied (the res / dense / inception blocks are left out);
  ``GCNModel`` keeps its structure.
- the early stopping (checkpoint files), tensorboard, timing and printing are dropped; ``train_step`` is one
  epoch of the loop (sampling, then ``train()``), returning the training loss tensor; ``eval_fn`` is ``train()``'s
  validation part. hidden 128 is kept; 400 epochs are not run.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.modules.module import Module
from torch.nn.parameter import Parameter

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class args:
    """``script/cora_GCN.sh`` with argparse's defaults."""
    type = "mutigcn"
    nhiddenlayer = 1
    nbaseblocklayer = 2
    hidden = 128
    lr = 0.01
    weight_decay = 0.005
    sampling_percent = 0.7
    dropout = 0.8
    normalization = "FirstOrderGCN"
    withbn = False
    withloop = False
    inputlayer = "gcn"
    outputlayer = "gcn"
    aggrmethod = "nores"
    lradjust = False
    fastmode = False
    cuda = False
    mixmode = False


# ---- src/normalization.py ----

def gcn(adj):
   adj = sp.coo_matrix(adj)
   row_sum = np.array(adj.sum(1))
   d_inv_sqrt = np.power(row_sum, -0.5).flatten()
   d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
   d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
   return (sp.eye(adj.shape[0]) + d_mat_inv_sqrt.dot(adj).dot(d_mat_inv_sqrt)).tocoo()


def fetch_normalization(type):
   switcher = {
       'FirstOrderGCN': gcn,   # A' = I + D^-1/2 * A * D^-1/2
   }
   func = switcher.get(type, lambda: "Invalid normalization technique.")
   return func


def row_normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


# ---- src/utils.py ----

def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)


# ---- src/metric.py ----

def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


# ---- src/layers.py ----

class GraphConvolutionBS(Module):
    """
    GCN Layer with BN, Self-loop and Res connection.
    """

    def __init__(self, in_features, out_features, activation=lambda x: x, withbn=True, withloop=True, bias=True,
                 res=False):
        super(GraphConvolutionBS, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.sigma = activation
        self.res = res

        # Parameter setting.
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        # Is this the best practice or not?
        if withloop:
            self.self_weight = Parameter(torch.FloatTensor(in_features, out_features))
        else:
            self.register_parameter("self_weight", None)

        if withbn:
            self.bn = torch.nn.BatchNorm1d(out_features)
        else:
            self.register_parameter("bn", None)

        if bias:
            self.bias = Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter('bias', None)

        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.self_weight is not None:
            stdv = 1. / math.sqrt(self.self_weight.size(1))
            self.self_weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)

        # Self-loop
        if self.self_weight is not None:
            output = output + torch.mm(input, self.self_weight)

        if self.bias is not None:
            output = output + self.bias
        # BN
        if self.bn is not None:
            output = self.bn(output)
        # Res
        if self.res:
            return self.sigma(output) + input
        else:
            return self.sigma(output)

    def __repr__(self):
        return self.__class__.__name__ + ' (' \
               + str(self.in_features) + ' -> ' \
               + str(self.out_features) + ')'


class GraphBaseBlock(Module):
    """
    The base block for Multi-layer GCN / ResGCN / Dense GCN
    """

    def __init__(self, in_features, out_features, nbaselayer,
                 withbn=True, withloop=True, activation=F.relu, dropout=True,
                 aggrmethod="concat", dense=False):
        super(GraphBaseBlock, self).__init__()
        self.in_features = in_features
        self.hiddendim = out_features
        self.nhiddenlayer = nbaselayer
        self.activation = activation
        self.aggrmethod = aggrmethod
        self.dense = dense
        self.dropout = dropout
        self.withbn = withbn
        self.withloop = withloop
        self.hiddenlayers = nn.ModuleList()
        self.__makehidden()

        if self.aggrmethod == "concat" and dense == False:
            self.out_features = in_features + out_features
        elif self.aggrmethod == "concat" and dense == True:
            self.out_features = in_features + out_features * nbaselayer
        elif self.aggrmethod == "add":
            if in_features != self.hiddendim:
                raise RuntimeError("The dimension of in_features and hiddendim should be matched in add model.")
            self.out_features = out_features
        elif self.aggrmethod == "nores":
            self.out_features = out_features
        else:
            raise NotImplementedError("The aggregation method only support 'concat','add' and 'nores'.")

    def __makehidden(self):
        # for i in xrange(self.nhiddenlayer):
        for i in range(self.nhiddenlayer):
            if i == 0:
                layer = GraphConvolutionBS(self.in_features, self.hiddendim, self.activation, self.withbn,
                                           self.withloop)
            else:
                layer = GraphConvolutionBS(self.hiddendim, self.hiddendim, self.activation, self.withbn, self.withloop)
            self.hiddenlayers.append(layer)

    def _doconcat(self, x, subx):
        if x is None:
            return subx
        if self.aggrmethod == "concat":
            return torch.cat((x, subx), 1)
        elif self.aggrmethod == "add":
            return x + subx
        elif self.aggrmethod == "nores":
            return x

    def forward(self, input, adj):
        x = input
        denseout = None
        # Here out is the result in all levels.
        for gc in self.hiddenlayers:
            denseout = self._doconcat(denseout, x)
            x = gc(x, adj)
            x = F.dropout(x, self.dropout, training=self.training)

        if not self.dense:
            return self._doconcat(x, input)
        return self._doconcat(x, denseout)

    def get_outdim(self):
        return self.out_features


class MultiLayerGCNBlock(Module):
    """
    Muti-Layer GCN with same hidden dimension.
    """

    def __init__(self, in_features, out_features, nbaselayer,
                 withbn=True, withloop=True, activation=F.relu, dropout=True,
                 aggrmethod=None, dense=None):
        super(MultiLayerGCNBlock, self).__init__()
        self.model = GraphBaseBlock(in_features=in_features,
                                    out_features=out_features,
                                    nbaselayer=nbaselayer,
                                    withbn=withbn,
                                    withloop=withloop,
                                    activation=activation,
                                    dropout=dropout,
                                    dense=False,
                                    aggrmethod="nores")

    def forward(self, input, adj):
        return self.model.forward(input, adj)

    def get_outdim(self):
        return self.model.get_outdim()


# ---- src/models.py ----

class GCNModel(nn.Module):
    """
       The model for the single kind of deepgcn blocks.

       The model architecture likes:
       inputlayer(nfeat)--block(nbaselayer, nhid)--...--outputlayer(nclass)--softmax(nclass)
                           |------  nhidlayer  ----|
       The total layer is nhidlayer*nbaselayer + 2.
       All options are configurable.
    """

    def __init__(self,
                 nfeat,
                 nhid,
                 nclass,
                 nhidlayer,
                 dropout,
                 baseblock="mutigcn",
                 inputlayer="gcn",
                 outputlayer="gcn",
                 nbaselayer=0,
                 activation=lambda x: x,
                 withbn=True,
                 withloop=True,
                 aggrmethod="add",
                 mixmode=False,
                 bug=None):
        super(GCNModel, self).__init__()
        self.mixmode = mixmode
        self.dropout = dropout
        self.bug = bug

        if baseblock == "mutigcn":
            self.BASEBLOCK = MultiLayerGCNBlock
        else:
            raise NotImplementedError("Current baseblock %s is not supported." % (baseblock))
        if inputlayer == "gcn":
            # input gc
            self.ingc = GraphConvolutionBS(nfeat, nhid, activation, withbn, withloop)
            baseblockinput = nhid
        elif inputlayer == "none":
            self.ingc = lambda x: x
            baseblockinput = nfeat
        else:
            raise NotImplementedError("Dense input layer not copied.")

        outactivation = lambda x: x
        if outputlayer == "gcn":
            self.outgc = GraphConvolutionBS(baseblockinput, nclass, outactivation, withbn, withloop)

        # hidden layer
        self.midlayer = nn.ModuleList()
        # Dense is not supported now.
        # for i in xrange(nhidlayer):
        for i in range(nhidlayer):
            gcb = self.BASEBLOCK(in_features=baseblockinput,
                                 out_features=nhid,
                                 nbaselayer=nbaselayer,
                                 withbn=withbn,
                                 withloop=withloop,
                                 activation=activation,
                                 dropout=dropout,
                                 dense=False,
                                 aggrmethod=aggrmethod)
            self.midlayer.append(gcb)
            baseblockinput = gcb.get_outdim()
        # output gc
        outactivation = lambda x: x  # we donot need nonlinear activation here.
        self.outgc = GraphConvolutionBS(baseblockinput, nclass, outactivation, withbn, withloop)

        self.reset_parameters()

    def reset_parameters(self):
        pass

    def forward(self, fea, adj):
        # input
        x = self.ingc(fea, adj)

        x = F.dropout(x, self.dropout, training=self.training)

        # mid block connections
        # for i in xrange(len(self.midlayer)):
        for i in range(len(self.midlayer)):
            midgc = self.midlayer[i]
            x = midgc(x, adj)
        # output, no relu and dropput here.
        x = self.outgc(x, adj)
        if self.bug == "log_softmax_over_nodes":
            x = F.log_softmax(x, dim=0)
        else:
            x = F.log_softmax(x, dim=1)
        return x


# ---- src/sample.py (the parts the script uses) ----

class Sampler:
    """Sampling the input graph data."""
    def __init__(self, graph, rng):
        (self.adj,
         self.train_adj,
         self.features,
         self.train_features,
         self.labels,
         self.idx_train,
         self.idx_val,
         self.idx_test,
         self.learning_type) = graph
        self.np_random = rng

        self.features = torch.FloatTensor(self.features).float()
        self.train_features = torch.FloatTensor(self.train_features).float()

        self.labels_torch = torch.LongTensor(self.labels)
        self.idx_train_torch = torch.LongTensor(self.idx_train)
        self.idx_val_torch = torch.LongTensor(self.idx_val)
        self.idx_test_torch = torch.LongTensor(self.idx_test)

        self.nfeat = self.features.shape[1]
        self.nclass = int(self.labels.max().item() + 1)
        self.trainadj_cache = {}
        self.adj_cache = {}

    def _preprocess_adj(self, normalization, adj, cuda):
        adj_normalizer = fetch_normalization(normalization)
        r_adj = adj_normalizer(adj)
        r_adj = sparse_mx_to_torch_sparse_tensor(r_adj).float()
        return r_adj

    def _preprocess_fea(self, fea, cuda):
        return fea

    def stub_sampler(self, normalization, cuda):
        """
        The stub sampler. Return the original data.
        """
        if normalization in self.trainadj_cache:
            r_adj = self.trainadj_cache[normalization]
        else:
            r_adj = self._preprocess_adj(normalization, self.train_adj, cuda)
            self.trainadj_cache[normalization] = r_adj
        fea = self._preprocess_fea(self.train_features, cuda)
        return r_adj, fea

    def randomedge_sampler(self, percent, normalization, cuda):
        """
        Randomly drop edge and preserve percent% edges.
        """
        "Opt here"
        if percent >= 1.0:
            return self.stub_sampler(normalization, cuda)

        nnz = self.train_adj.nnz
        perm = self.np_random.permutation(nnz)
        preserve_nnz = int(nnz*percent)
        perm = perm[:preserve_nnz]
        r_adj = sp.coo_matrix((self.train_adj.data[perm],
                               (self.train_adj.row[perm],
                                self.train_adj.col[perm])),
                              shape=self.train_adj.shape)
        r_adj = self._preprocess_adj(normalization, r_adj, cuda)
        fea = self._preprocess_fea(self.train_features, cuda)
        return r_adj, fea

    def get_test_set(self, normalization, cuda):
        """
        Return the test set.
        """
        if self.learning_type == "transductive":
            return self.stub_sampler(normalization, cuda)
        else:
            if normalization in self.adj_cache:
                r_adj = self.adj_cache[normalization]
            else:
                r_adj = self._preprocess_adj(normalization, self.adj, cuda)
                self.adj_cache[normalization] = r_adj
            fea = self._preprocess_fea(self.features, cuda)
            return r_adj, fea

    def get_label_and_idxes(self, cuda):
        """
        Return all labels and indexes.
        """
        return self.labels_torch, self.idx_train_torch, self.idx_val_torch, self.idx_test_torch


N_NODES, N_CLASSES, N_WORDS = 150, 3, 60


def synthetic_citation(seed):
    """A citation-like graph standing for Cora (load_citation's objects, "full" split, NoNorm adjacency)."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, N_CLASSES, size=N_NODES)
    same = labels[:, None] == labels[None, :]
    p = np.where(same, 0.06, 0.005)
    upper = np.triu(rng.uniform(size=(N_NODES, N_NODES)) < p, 1)
    adj = sp.coo_matrix((upper | upper.T).astype(np.float32))
    word_class = rng.randint(0, N_CLASSES, size=N_WORDS)
    prob = np.where(word_class[None, :] == labels[:, None], 0.25, 0.04)
    features = (rng.uniform(size=(N_NODES, N_WORDS)) < prob).astype(np.float32)
    features[features.sum(1) == 0, 0] = 1.0
    features = np.array(row_normalize(sp.csr_matrix(features)).todense())
    idx_train, idx_val, idx_test = range(90), range(90, 120), range(120, N_NODES)
    return adj, adj, features, features, labels, list(idx_train), list(idx_val), list(idx_test), "transductive"


def _build(seed, bug=None):
    np_random = np.random.RandomState(seed)
    torch.manual_seed(seed)

    sampler = Sampler(synthetic_citation(seed), np_random)

    # get labels and indexes
    labels, idx_train, idx_val, idx_test = sampler.get_label_and_idxes(args.cuda)
    nfeat = sampler.nfeat
    nclass = sampler.nclass

    # The model
    model = GCNModel(nfeat=nfeat,
                     nhid=args.hidden,
                     nclass=nclass,
                     nhidlayer=args.nhiddenlayer,
                     dropout=args.dropout,
                     baseblock=args.type,
                     inputlayer=args.inputlayer,
                     outputlayer=args.outputlayer,
                     nbaselayer=args.nbaseblocklayer,
                     activation=F.relu,
                     withbn=args.withbn,
                     withloop=args.withloop,
                     aggrmethod=args.aggrmethod,
                     mixmode=args.mixmode,
                     bug=bug)

    optimizer = optim.Adam(model.parameters(),
                           lr=args.lr, weight_decay=args.weight_decay)

    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[200, 300, 400, 500, 600, 700], gamma=0.5)

    def validate(val_adj, val_fea):
        model.eval()
        output = model(val_fea, val_adj)
        loss_val = F.nll_loss(output[idx_val], labels[idx_val]).item()
        acc_val = accuracy(output[idx_val], labels[idx_val]).item()
        return loss_val, acc_val

    # define the training function.
    def train(epoch, train_adj, train_fea, idx_train, val_adj=None, val_fea=None):
        if val_adj is None:
            val_adj = train_adj
            val_fea = train_fea

        model.train()
        optimizer.zero_grad()
        output = model(train_fea, train_adj)
        # special for reddit
        if sampler.learning_type == "inductive" or bug == "loss_over_all_nodes":
            loss_train = F.nll_loss(output, labels)
        else:
            loss_train = F.nll_loss(output[idx_train], labels[idx_train])

        loss_train.backward()
        optimizer.step()

        if not args.fastmode:
            #    # Evaluate validation set performance separately,
            #    # deactivates dropout during validation run.
            validate(val_adj, val_fea)

        if args.lradjust:
            scheduler.step()
        return loss_train

    state = {"epoch": 0}

    def train_step():
        input_idx_train = idx_train
        # randomedge sampling if args.sampling_percent >= 1.0, it behaves the same as stub_sampler.
        (train_adj, train_fea) = sampler.randomedge_sampler(percent=args.sampling_percent,
                                                            normalization=args.normalization, cuda=args.cuda)
        (val_adj, val_fea) = sampler.get_test_set(normalization=args.normalization, cuda=args.cuda)
        loss = train(state["epoch"], train_adj, train_fea, input_idx_train, val_adj, val_fea)
        state["epoch"] += 1
        return loss

    def eval_fn(model, batch):
        (val_adj, val_fea) = sampler.get_test_set(normalization=args.normalization, cuda=args.cuda)
        with torch.no_grad():
            return validate(val_adj, val_fea)

    full_adj, full_fea = sampler.get_test_set(normalization=args.normalization, cuda=args.cuda)

    def loss_fn(output, labels_):
        return F.nll_loss(output[idx_train], labels_[idx_train])

    return Program(name="dropedge_gcn", model=model, batch=((full_fea, full_adj), labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # log_softmax over dim 0 (the nodes) instead of dim 1 (the classes): the nll reads per-node-normalized scores
    # (classic axis slip).
    Bug("log_softmax_over_nodes", functools.partial(_build, bug="log_softmax_over_nodes"), "learning_ledger",
        ("OBJECTIVE",)),
    # the transductive loss is taken over every node (the inductive branch's ``F.nll_loss(output, labels)``): the
    # validation and test labels are trained on (classic label leak).
    Bug("loss_over_all_nodes", functools.partial(_build, bug="loss_over_all_nodes"), "learning_ledger", ("TASK",)),
]
