"""DiffPool (soft-assign hierarchical pooling) for whole-graph classification, from the DiffPool authors' code:
``SoftPoolingGcnEncoder`` with dense ``GraphConv`` layers (``adj @ x @ W``, L2-normalized embeddings, a fresh
``BatchNorm1d`` built at every call as ``apply_bn`` does), an assignment GCN whose softmax gives the cluster
assignment ``S``, pooled features ``S^T Z`` and adjacency ``S^T A S``, max readout of every level concatenated into an
MLP head, cross-entropy plus the link-prediction side objective (``--linkpred``: binary cross-entropy between ``A`` and
``S S^T`` over the real nodes), Adam(lr 0.001) with gradient-norm clipping at 2.0; the ``syn1v2`` task (one
Barabasi-Albert graph against two Barabasi-Albert communities joined by random edges, constant node features).

Source: https://github.com/RexYing/diffpool
Commit: 8dfb97cf60c2376ac804761837b9966f1d302acb
Files: train.py (train, evaluate, prepare_data, syn_community1v2, arg_parse defaults), encoders.py (GraphConv,
GcnEncoderGraph, SoftPoolingGcnEncoder), graph_sampler.py (GraphSampler), gen/data.py (gen_ba, gen_2community_ba),
gen/feat.py (ConstFeatureGen)
License: MIT (Copyright (c) 2018 Rex Ying; full text in LICENSES/RexYing-diffpool.txt)
Domain: GNN, graph classification (hierarchical soft-assignment pooling with a link-prediction side objective; plain
torch, dense batched adjacency)

The dense ``GraphConv`` is the repository's own (``torch.matmul(adj, x)`` then ``@ weight`` on batched dense
matrices, xavier init with the ReLU gain); it is not derived from tkipf/pygcn.

Deviations from the original:
- sizes: ``syn_community1v2`` makes 500 + 500 graphs; here 40 + 40 (40-59 nodes for class 0, 2 x 20-29 nodes for
  class 1, BA ``m`` 4, inter-community probability 0.3 unchanged); hidden/output dim 20, 3 GC layers, input_dim 10,
  assign_ratio 0.1, one pooling level, batch_size 20, lr 0.001, clip 2.0, train_ratio 0.8 / test_ratio 0.1
  unchanged; the run is ``--method=soft-assign --linkpred`` (the soft-assign model with the side objective the paper
  describes; ``--linkpred`` is off by default);
- data: networkx is not used; ``nx.barabasi_albert_graph`` (star seed graph, targets drawn by preferential attachment
  from the repeated-node list) and ``nx.disjoint_union``/``to_numpy_matrix`` are written out in numpy, seeded by
  ``seed`` (``np.random`` and ``random`` become one ``np.random.RandomState(seed)``); one ``max_num_nodes`` (the
  largest graph) pads every split (``prepare_data`` lets each split pad to its own largest graph);
- no GPU: every ``.cuda()`` is dropped; ``Variable`` wrappers are kept; tensorboard logging, plots and printing are
  dropped; ``DataLoader`` has ``num_workers=0`` and a seeded generator;
- ``evaluate`` computes the accuracy with numpy (sklearn is not installed) and reports it alone;
- one ``train_step`` is one iteration of ``train()``'s batch loop over a cycling loader; ``model.train()`` runs at
  the start of each epoch as the epoch loop does; ``eval_fn`` is ``evaluate`` on the given batch (it puts the model in
  eval mode; the next epoch's ``model.train()`` is applied at its end, as the epoch loop does after evaluating).
"""
# ruff: noqa: B006, PLR0402, RUF059, SIM102, SIM401, UP004, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# train.py arg_parse defaults (hidden_dim, output_dim, num_gc_layers, input_dim, batch_size, lr, clip) and the run's
# flags (--method=soft-assign --linkpred, assign_ratio 0.1, num_pool 1); 40 graphs per class instead of 500
HIDDEN_DIM, OUTPUT_DIM, NUM_GC_LAYERS, INPUT_DIM = 20, 20, 3, 10
BATCH_SIZE, LR, CLIP, TRAIN_RATIO, TEST_RATIO = 20, 0.001, 2.0, 0.8, 0.1
ASSIGN_RATIO, NUM_POOL, NUM_CLASSES = 0.1, 1, 2
N_GRAPHS_PER_CLASS = 40


# ---- encoders.py -------------------------------------------------------------------------------------------------

# GCN basic operation
class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, add_self=False, normalize_embedding=False,
            dropout=0.0, bias=True):
        super(GraphConv, self).__init__()
        self.add_self = add_self
        self.dropout = dropout
        if dropout > 0.001:
            self.dropout_layer = nn.Dropout(p=dropout)
        self.normalize_embedding = normalize_embedding
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.weight = nn.Parameter(torch.FloatTensor(input_dim, output_dim))
        if bias:
            self.bias = nn.Parameter(torch.FloatTensor(output_dim))
        else:
            self.bias = None

    def forward(self, x, adj):
        if self.dropout > 0.001:
            x = self.dropout_layer(x)
        y = torch.matmul(adj, x)
        if self.add_self:
            y += x
        y = torch.matmul(y,self.weight)
        if self.bias is not None:
            y = y + self.bias
        if self.normalize_embedding:
            y = F.normalize(y, p=2, dim=2)
            #print(y[0][0])
        return y

class GcnEncoderGraph(nn.Module):
    def __init__(self, input_dim, hidden_dim, embedding_dim, label_dim, num_layers,
            pred_hidden_dims=[], concat=True, bn=True, dropout=0.0, args=None):
        super(GcnEncoderGraph, self).__init__()
        self.concat = concat
        add_self = not concat
        self.bn = bn
        self.num_layers = num_layers
        self.num_aggs=1

        self.bias = True
        if args is not None:
            self.bias = args.bias

        self.conv_first, self.conv_block, self.conv_last = self.build_conv_layers(
                input_dim, hidden_dim, embedding_dim, num_layers,
                add_self, normalize=True, dropout=dropout)
        self.act = nn.ReLU()
        self.label_dim = label_dim

        if concat:
            self.pred_input_dim = hidden_dim * (num_layers - 1) + embedding_dim
        else:
            self.pred_input_dim = embedding_dim
        self.pred_model = self.build_pred_layers(self.pred_input_dim, pred_hidden_dims,
                label_dim, num_aggs=self.num_aggs)

        for m in self.modules():
            if isinstance(m, GraphConv):
                m.weight.data = init.xavier_uniform(m.weight.data, gain=nn.init.calculate_gain('relu'))
                if m.bias is not None:
                    m.bias.data = init.constant(m.bias.data, 0.0)

    def build_conv_layers(self, input_dim, hidden_dim, embedding_dim, num_layers, add_self,
            normalize=False, dropout=0.0):
        conv_first = GraphConv(input_dim=input_dim, output_dim=hidden_dim, add_self=add_self,
                normalize_embedding=normalize, bias=self.bias)
        conv_block = nn.ModuleList(
                [GraphConv(input_dim=hidden_dim, output_dim=hidden_dim, add_self=add_self,
                        normalize_embedding=normalize, dropout=dropout, bias=self.bias)
                 for i in range(num_layers-2)])
        conv_last = GraphConv(input_dim=hidden_dim, output_dim=embedding_dim, add_self=add_self,
                normalize_embedding=normalize, bias=self.bias)
        return conv_first, conv_block, conv_last

    def build_pred_layers(self, pred_input_dim, pred_hidden_dims, label_dim, num_aggs=1):
        pred_input_dim = pred_input_dim * num_aggs
        if len(pred_hidden_dims) == 0:
            pred_model = nn.Linear(pred_input_dim, label_dim)
        else:
            pred_layers = []
            for pred_dim in pred_hidden_dims:
                pred_layers.append(nn.Linear(pred_input_dim, pred_dim))
                pred_layers.append(self.act)
                pred_input_dim = pred_dim
            pred_layers.append(nn.Linear(pred_dim, label_dim))
            pred_model = nn.Sequential(*pred_layers)
        return pred_model

    def construct_mask(self, max_nodes, batch_num_nodes):
        ''' For each num_nodes in batch_num_nodes, the first num_nodes entries of the
        corresponding column are 1's, and the rest are 0's (to be masked out).
        Dimension of mask: [batch_size x max_nodes x 1]
        '''
        # masks
        packed_masks = [torch.ones(int(num)) for num in batch_num_nodes]
        batch_size = len(batch_num_nodes)
        out_tensor = torch.zeros(batch_size, max_nodes)
        for i, mask in enumerate(packed_masks):
            out_tensor[i, :batch_num_nodes[i]] = mask
        return out_tensor.unsqueeze(2)

    def apply_bn(self, x):
        ''' Batch normalization of 3D tensor x
        '''
        bn_module = nn.BatchNorm1d(x.size()[1])
        return bn_module(x)

    def gcn_forward(self, x, adj, conv_first, conv_block, conv_last, embedding_mask=None):

        ''' Perform forward prop with graph convolution.
        Returns:
            Embedding matrix with dimension [batch_size x num_nodes x embedding]
        '''

        x = conv_first(x, adj)
        x = self.act(x)
        if self.bn:
            x = self.apply_bn(x)
        x_all = [x]
        #out_all = []
        #out, _ = torch.max(x, dim=1)
        #out_all.append(out)
        for i in range(len(conv_block)):
            x = conv_block[i](x,adj)
            x = self.act(x)
            if self.bn:
                x = self.apply_bn(x)
            x_all.append(x)
        x = conv_last(x,adj)
        x_all.append(x)
        # x_tensor: [batch_size x num_nodes x embedding]
        x_tensor = torch.cat(x_all, dim=2)
        if embedding_mask is not None:
            x_tensor = x_tensor * embedding_mask
        return x_tensor

    def loss(self, pred, label, type='softmax'):
        # softmax + CE
        if type == 'softmax':
            return F.cross_entropy(pred, label, reduction='mean')
        elif type == 'margin':
            batch_size = pred.size()[0]
            label_onehot = torch.zeros(batch_size, self.label_dim).long()
            label_onehot.scatter_(1, label.view(-1,1), 1)
            return torch.nn.MultiLabelMarginLoss()(pred, label_onehot)

        #return F.binary_cross_entropy(F.sigmoid(pred[:,0]), label.float())


class SoftPoolingGcnEncoder(GcnEncoderGraph):
    def __init__(self, max_num_nodes, input_dim, hidden_dim, embedding_dim, label_dim, num_layers,
            assign_hidden_dim, assign_ratio=0.25, assign_num_layers=-1, num_pooling=1,
            pred_hidden_dims=[50], concat=True, bn=True, dropout=0.0, linkpred=True,
            assign_input_dim=-1, args=None, bug=None):
        '''
        Args:
            num_layers: number of gc layers before each pooling
            num_nodes: number of nodes for each graph in batch
            linkpred: flag to turn on link prediction side objective
        '''

        super(SoftPoolingGcnEncoder, self).__init__(input_dim, hidden_dim, embedding_dim, label_dim,
                num_layers, pred_hidden_dims=pred_hidden_dims, concat=concat, args=args)
        add_self = not concat
        self.num_pooling = num_pooling
        self.linkpred = linkpred
        self.assign_ent = True

        # GC
        self.conv_first_after_pool = nn.ModuleList()
        self.conv_block_after_pool = nn.ModuleList()
        self.conv_last_after_pool = nn.ModuleList()
        for i in range(num_pooling):
            # use self to register the modules in self.modules()
            conv_first2, conv_block2, conv_last2 = self.build_conv_layers(
                    self.pred_input_dim, hidden_dim, embedding_dim, num_layers,
                    add_self, normalize=True, dropout=dropout)
            self.conv_first_after_pool.append(conv_first2)
            self.conv_block_after_pool.append(conv_block2)
            self.conv_last_after_pool.append(conv_last2)

        # assignment
        assign_dims = []
        if assign_num_layers == -1:
            assign_num_layers = num_layers
        if assign_input_dim == -1:
            assign_input_dim = input_dim

        self.assign_conv_first_modules = nn.ModuleList()
        self.assign_conv_block_modules = nn.ModuleList()
        self.assign_conv_last_modules = nn.ModuleList()
        if bug == "assign_pred_in_plain_list":
            self.assign_pred_modules = []  # a plain list: the assignment heads are never registered
        else:
            self.assign_pred_modules = nn.ModuleList()
        assign_dim = int(max_num_nodes * assign_ratio)
        for i in range(num_pooling):
            assign_dims.append(assign_dim)
            assign_conv_first, assign_conv_block, assign_conv_last = self.build_conv_layers(
                    assign_input_dim, assign_hidden_dim, assign_dim, assign_num_layers, add_self,
                    normalize=True)
            assign_pred_input_dim = assign_hidden_dim * (num_layers - 1) + assign_dim if concat else assign_dim
            assign_pred = self.build_pred_layers(assign_pred_input_dim, [], assign_dim, num_aggs=1)


            # next pooling layer
            assign_input_dim = self.pred_input_dim
            assign_dim = int(assign_dim * assign_ratio)

            self.assign_conv_first_modules.append(assign_conv_first)
            self.assign_conv_block_modules.append(assign_conv_block)
            self.assign_conv_last_modules.append(assign_conv_last)
            self.assign_pred_modules.append(assign_pred)

        self.pred_model = self.build_pred_layers(self.pred_input_dim * (num_pooling+1), pred_hidden_dims,
                label_dim, num_aggs=self.num_aggs)

        for m in self.modules():
            if isinstance(m, GraphConv):
                m.weight.data = init.xavier_uniform(m.weight.data, gain=nn.init.calculate_gain('relu'))
                if m.bias is not None:
                    m.bias.data = init.constant(m.bias.data, 0.0)

    def forward(self, x, adj, batch_num_nodes, **kwargs):
        if 'assign_x' in kwargs:
            x_a = kwargs['assign_x']
        else:
            x_a = x

        # mask
        max_num_nodes = adj.size()[1]
        if batch_num_nodes is not None:
            embedding_mask = self.construct_mask(max_num_nodes, batch_num_nodes)
        else:
            embedding_mask = None

        out_all = []

        #self.assign_tensor = self.gcn_forward(x_a, adj,
        #        self.assign_conv_first_modules[0], self.assign_conv_block_modules[0], self.assign_conv_last_modules[0],
        #        embedding_mask)
        ## [batch_size x num_nodes x next_lvl_num_nodes]
        #self.assign_tensor = nn.Softmax(dim=-1)(self.assign_pred(self.assign_tensor))
        #if embedding_mask is not None:
        #    self.assign_tensor = self.assign_tensor * embedding_mask
        # [batch_size x num_nodes x embedding_dim]
        embedding_tensor = self.gcn_forward(x, adj,
                self.conv_first, self.conv_block, self.conv_last, embedding_mask)

        out, _ = torch.max(embedding_tensor, dim=1)
        out_all.append(out)
        if self.num_aggs == 2:
            out = torch.sum(embedding_tensor, dim=1)
            out_all.append(out)

        for i in range(self.num_pooling):
            if batch_num_nodes is not None and i == 0:
                embedding_mask = self.construct_mask(max_num_nodes, batch_num_nodes)
            else:
                embedding_mask = None

            self.assign_tensor = self.gcn_forward(x_a, adj,
                    self.assign_conv_first_modules[i], self.assign_conv_block_modules[i], self.assign_conv_last_modules[i],
                    embedding_mask)
            # [batch_size x num_nodes x next_lvl_num_nodes]
            self.assign_tensor = nn.Softmax(dim=-1)(self.assign_pred_modules[i](self.assign_tensor))
            if embedding_mask is not None:
                self.assign_tensor = self.assign_tensor * embedding_mask

            # update pooled features and adj matrix
            x = torch.matmul(torch.transpose(self.assign_tensor, 1, 2), embedding_tensor)
            adj = torch.transpose(self.assign_tensor, 1, 2) @ adj @ self.assign_tensor
            x_a = x

            embedding_tensor = self.gcn_forward(x, adj,
                    self.conv_first_after_pool[i], self.conv_block_after_pool[i],
                    self.conv_last_after_pool[i])


            out, _ = torch.max(embedding_tensor, dim=1)
            out_all.append(out)
            if self.num_aggs == 2:
                #out = torch.mean(embedding_tensor, dim=1)
                out = torch.sum(embedding_tensor, dim=1)
                out_all.append(out)


        if self.concat:
            output = torch.cat(out_all, dim=1)
        else:
            output = out
        ypred = self.pred_model(output)
        return ypred

    def loss(self, pred, label, adj=None, batch_num_nodes=None, adj_hop=1):
        '''
        Args:
            batch_num_nodes: numpy array of number of nodes in each graph in the minibatch.
        '''
        eps = 1e-7
        loss = super(SoftPoolingGcnEncoder, self).loss(pred, label)
        if self.linkpred:
            max_num_nodes = adj.size()[1]
            pred_adj0 = self.assign_tensor @ torch.transpose(self.assign_tensor, 1, 2)
            tmp = pred_adj0
            pred_adj = pred_adj0
            for adj_pow in range(adj_hop-1):
                tmp = tmp @ pred_adj0
                pred_adj = pred_adj + tmp
            pred_adj = torch.min(pred_adj, torch.ones(1, dtype=pred_adj.dtype))
            #print('adj1', torch.sum(pred_adj0) / torch.numel(pred_adj0))
            #print('adj2', torch.sum(pred_adj) / torch.numel(pred_adj))
            #self.link_loss = F.nll_loss(torch.log(pred_adj), adj)
            self.link_loss = -adj * torch.log(pred_adj+eps) - (1-adj) * torch.log(1-pred_adj+eps)
            if batch_num_nodes is None:
                num_entries = max_num_nodes * max_num_nodes * adj.size()[0]
                # print('Warning: calculating link pred loss without masking')
            else:
                num_entries = np.sum(batch_num_nodes * batch_num_nodes)
                embedding_mask = self.construct_mask(max_num_nodes, batch_num_nodes)
                adj_mask = embedding_mask @ torch.transpose(embedding_mask, 1, 2)
                self.link_loss[(1-adj_mask).bool()] = 0.0

            self.link_loss = torch.sum(self.link_loss) / float(num_entries)
            #print('linkloss: ', self.link_loss)
            return loss + self.link_loss
        return loss


# ---- gen/feat.py, gen/data.py (networkx written out in numpy) ----------------------------------------------------

class Graph(object):
    """What the code reads of a networkx graph: node count, edges, node features, the graph label."""

    def __init__(self, n, edges):
        self.n = n
        self.edges = set()
        for u, v in edges:
            self.add_edge(u, v)
        self.feat = None
        self.label = None

    def add_edge(self, u, v):
        if u != v:
            self.edges.add((min(u, v), max(u, v)))

    def number_of_nodes(self):
        return self.n

    def to_numpy(self):
        adj = np.zeros((self.n, self.n))
        for u, v in self.edges:
            adj[u, v] = adj[v, u] = 1.0
        return adj


def barabasi_albert_graph(n, m, rs):
    # nx.barabasi_albert_graph: a star on m + 1 nodes, then each new node attaches to m distinct targets drawn from
    # the list of nodes repeated once per degree
    edges = [(0, i) for i in range(1, m + 1)]
    repeated_nodes = [0] * m + list(range(1, m + 1))
    source = m + 1
    while source < n:
        targets = set()
        while len(targets) < m:
            targets.add(repeated_nodes[rs.randint(len(repeated_nodes))])
        edges.extend((source, t) for t in targets)
        repeated_nodes.extend(targets)
        repeated_nodes.extend([source] * m)
        source += 1
    return Graph(n, edges)


class ConstFeatureGen(object):
    def __init__(self, val):
        self.val = val

    def gen_node_features(self, G):
        G.feat = np.tile(self.val, (G.n, 1))


def gen_ba(n_range, m_range, num_graphs, rs, feature_generator=None):
    graphs = []
    for i in rs.choice(n_range, num_graphs):
        for j in rs.choice(m_range, 1):
            graphs.append(barabasi_albert_graph(i, j, rs))

    for G in graphs:
        feature_generator.gen_node_features(G)
    return graphs


def gen_2community_ba(n_range, m_range, num_graphs, inter_prob, feature_generators, rs):
    ''' Each community is a BA graph.
    Args:
        inter_prob: probability of one node connecting to any node in the other community.
    '''
    fg0 = feature_generators[0]
    fg1 = feature_generators[1] if len(feature_generators) > 1 else feature_generators[0]

    graphs0 = gen_ba(n_range, m_range, num_graphs, rs, fg0)
    graphs1 = gen_ba(n_range, m_range, num_graphs, rs, fg1)
    graphs = []
    for i in range(num_graphs):
        n0 = graphs0[i].number_of_nodes()
        # nx.disjoint_union: the second graph's nodes follow the first's
        G = Graph(n0 + graphs1[i].n, list(graphs0[i].edges) + [(u + n0, v + n0) for u, v in graphs1[i].edges])
        G.feat = np.concatenate([graphs0[i].feat, graphs1[i].feat], 0)
        for j in range(n0):
            if rs.rand() < inter_prob:
                target = rs.choice(G.number_of_nodes() - n0) + n0
                G.add_edge(j, target)
        graphs.append(G)
    return graphs


# ---- graph_sampler.py (features='default', normalize=False, assign_feat='default') -------------------------------

class GraphSampler(torch.utils.data.Dataset):
    ''' Sample graphs and nodes in graph
    '''
    def __init__(self, G_list, max_num_nodes=0):
        self.adj_all = []
        self.len_all = []
        self.feature_all = []
        self.label_all = []

        self.assign_feat_all = []

        if max_num_nodes == 0:
            self.max_num_nodes = max([G.number_of_nodes() for G in G_list])
        else:
            self.max_num_nodes = max_num_nodes

        self.feat_dim = G_list[0].feat.shape[1]

        for G in G_list:
            adj = G.to_numpy()
            self.adj_all.append(adj)
            self.len_all.append(G.number_of_nodes())
            self.label_all.append(G.label)
            # feat matrix: max_num_nodes x feat_dim
            f = np.zeros((self.max_num_nodes, self.feat_dim), dtype=float)
            for i in range(G.n):
                f[i,:] = G.feat[i]
            self.feature_all.append(f)
            self.assign_feat_all.append(self.feature_all[-1])

        self.feat_dim = self.feature_all[0].shape[1]
        self.assign_feat_dim = self.assign_feat_all[0].shape[1]

    def __len__(self):
        return len(self.adj_all)

    def __getitem__(self, idx):
        adj = self.adj_all[idx]
        num_nodes = adj.shape[0]
        adj_padded = np.zeros((self.max_num_nodes, self.max_num_nodes))
        adj_padded[:num_nodes, :num_nodes] = adj

        # use all nodes for aggregation (baseline)

        return {'adj':adj_padded,
                'feats':self.feature_all[idx].copy(),
                'label':self.label_all[idx],
                'num_nodes': num_nodes,
                'assign_feats':self.assign_feat_all[idx].copy()}


# ---- train.py ----------------------------------------------------------------------------------------------------

def evaluate(dataset, model, name='Validation', max_num_examples=None):
    model.eval()

    labels = []
    preds = []
    for batch_idx, data in enumerate(dataset):
        adj = Variable(data['adj'].float(), requires_grad=False)
        h0 = Variable(data['feats'].float())
        labels.append(data['label'].long().numpy())
        batch_num_nodes = data['num_nodes'].int().numpy()
        assign_input = Variable(data['assign_feats'].float(), requires_grad=False)

        ypred = model(h0, adj, batch_num_nodes, assign_x=assign_input)
        _, indices = torch.max(ypred, 1)
        preds.append(indices.cpu().data.numpy())

        if max_num_examples is not None:
            if (batch_idx+1)*BATCH_SIZE > max_num_examples:
                break

    labels = np.hstack(labels)
    preds = np.hstack(preds)

    result = {'acc': float(np.mean(labels == preds))}
    return result


def prepare_data(graphs, rs, max_nodes=0):
    perm = rs.permutation(len(graphs))  # random.shuffle(graphs)
    graphs = [graphs[i] for i in perm]
    train_idx = int(len(graphs) * TRAIN_RATIO)
    test_idx = int(len(graphs) * (1-TEST_RATIO))
    train_graphs = graphs[:train_idx]
    val_graphs = graphs[train_idx: test_idx]
    test_graphs = graphs[test_idx:]
    return train_graphs, val_graphs, test_graphs


def syn_community1v2(rs):
    # data
    graphs1 = gen_ba(range(40, 60), range(4, 5), N_GRAPHS_PER_CLASS, rs,
            ConstFeatureGen(np.ones(INPUT_DIM, dtype=float)))
    for G in graphs1:
        G.label = 0

    graphs2 = gen_2community_ba(range(20, 30), range(4, 5), N_GRAPHS_PER_CLASS, 0.3,
            [ConstFeatureGen(np.ones(INPUT_DIM, dtype=float))], rs)
    for G in graphs2:
        G.label = 1

    graphs = graphs1 + graphs2
    return graphs


def _to_inputs(data, mask_nodes=True):
    adj = Variable(data['adj'].float(), requires_grad=False)
    h0 = Variable(data['feats'].float(), requires_grad=False)
    label = Variable(data['label'].long())
    batch_num_nodes = data['num_nodes'].int().numpy() if mask_nodes else None
    assign_input = Variable(data['assign_feats'].float(), requires_grad=False)
    return {"x": h0, "adj": adj, "batch_num_nodes": batch_num_nodes, "assign_x": assign_input}, label


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = np.random.RandomState(seed)
    graphs = syn_community1v2(rs)
    max_num_nodes = max(G.number_of_nodes() for G in graphs)
    train_graphs, val_graphs, test_graphs = prepare_data(graphs, rs, max_nodes=max_num_nodes)

    dataset_sampler = GraphSampler(train_graphs, max_num_nodes=max_num_nodes)
    train_dataset = torch.utils.data.DataLoader(
            dataset_sampler,
            batch_size=BATCH_SIZE,
            shuffle=True,
            num_workers=0,
            generator=torch.Generator().manual_seed(seed))
    input_dim, assign_input_dim = dataset_sampler.feat_dim, dataset_sampler.assign_feat_dim

    model = SoftPoolingGcnEncoder(
            max_num_nodes,
            input_dim, HIDDEN_DIM, OUTPUT_DIM, NUM_CLASSES, NUM_GC_LAYERS,
            HIDDEN_DIM, assign_ratio=ASSIGN_RATIO, num_pooling=NUM_POOL,
            bn=True, linkpred=True, assign_input_dim=assign_input_dim, bug=bug)

    # train()
    mask_nodes = bug != "padding_mask_off"
    optimizer = torch.optim.Adam(filter(lambda p : p.requires_grad, model.parameters()), lr=LR)

    state = {"it": None, "batch_idx": 0}

    def next_data():
        if state["it"] is None:
            state["it"] = iter(train_dataset)
            state["batch_idx"] = 0
            model.train()  # for epoch in range(args.num_epochs): ... model.train()
        try:
            data = next(state["it"])
        except StopIteration:
            state["it"] = None
            return next_data()
        state["batch_idx"] += 1
        return data

    def train_step():
        data = next_data()
        if bug != "zero_grad_dropped":
            model.zero_grad()
        adj = Variable(data['adj'].float(), requires_grad=False)
        h0 = Variable(data['feats'].float(), requires_grad=False)
        label = Variable(data['label'].long())
        batch_num_nodes = data['num_nodes'].int().numpy() if mask_nodes else None
        assign_input = Variable(data['assign_feats'].float(), requires_grad=False)

        ypred = model(h0, adj, batch_num_nodes, assign_x=assign_input)
        loss = model.loss(ypred, label, adj, batch_num_nodes)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        return loss.detach()

    first = next(iter(torch.utils.data.DataLoader(dataset_sampler, batch_size=BATCH_SIZE, shuffle=False)))
    inputs, labels = _to_inputs(first, mask_nodes=mask_nodes)

    def loss_fn(ypred, label):
        # how train() applies the model's loss to its output: model.loss(ypred, label, adj, batch_num_nodes)
        return model.loss(ypred, label, inputs["adj"], inputs["batch_num_nodes"])

    def eval_fn(model, batch):
        inputs, labels = batch
        num_nodes = inputs["batch_num_nodes"]
        if num_nodes is None:  # the padded rows have no edges (every BA node has one)
            num_nodes = (inputs["adj"].sum(-1) > 0).sum(-1).numpy()
        data = {'adj': inputs["adj"], 'feats': inputs["x"], 'label': labels,
                'num_nodes': torch.as_tensor(num_nodes), 'assign_feats': inputs["assign_x"]}
        result = evaluate([data], model, name='Validation')
        model.train()
        return result['acc']

    return Program(name="diffpool_softassign", model=model, batch=(inputs, labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # the assignment heads held in a plain Python list instead of an nn.ModuleList (classic; the original marks the
    # pitfall itself: "use self to register the modules in self.modules()"): they run in every forward but are not
    # registered, so model.parameters() and the optimizer never see them and the cluster assignment never learns.
    Bug("assign_pred_in_plain_list", functools.partial(_build, bug="assign_pred_in_plain_list"), "four_structures",
        ("assign_pred_modules",)),
    # train()'s own mask_nodes=False (classic: padding mask not applied): batch_num_nodes is None, so the padded nodes
    # enter the embeddings, the max readout, the assignment and the link loss of every graph.
    Bug("padding_mask_off", functools.partial(_build, bug="padding_mask_off"), "learning_ledger",
        ("DEPENDENCY",)),
    # model.zero_grad() dropped from the top of the batch loop (classic): gradients accumulate over every step.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
