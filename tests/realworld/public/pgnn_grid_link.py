# ruff: noqa: UP008, PLR0402, C408
"""Position-aware graph neural network (P-GNN, You, Ying & Leskovec, ICML 2019) for link prediction on the grid
graph: each node's message to every anchor set is its feature concatenated with the feature of the set's closest
member scaled by a learned function of ``1 / (shortest-path distance + 1)``; the per-anchor-set scores form the
position-aware embedding; links are scored by the dot product of the L2-normalized embeddings of the two end
nodes, ``BCEWithLogitsLoss`` against positive and sampled negative links; anchor sets are redrawn every epoch.

Source: https://github.com/JiaxuanYou/P-GNN
Commit: 74a7d3ed4af435d74dccc7bb8751d3f1789c5bce
Files: ``model.py`` (``PGNN_layer``, ``Nonlinear``, ``PGNN``), ``utils.py`` (link masks, negative sampling, edge
splits, ``precompute_dist_data``, ``get_random_anchorset``, ``get_dist_max``, ``preselect_anchor``), ``dataset.py``
(``load_graphs('grid')``, ``nx_to_tg_data``, ``get_tg_dataset`` for the ``link`` task), ``main.py`` (the loop),
``args.py`` (the defaults); the ``utils.py`` and ``dataset.py`` code is in the helper ``_pgnn.py``
License: MIT (Copyright (c) 2019 Jiaxuan You; full text in LICENSES/JiaxuanYou-P-GNN.txt)
Domain: GNN in plain torch, link prediction (position-aware anchor-set message passing, negative sampling)

Kept as written: ``PGNN_layer`` / ``Nonlinear`` / ``PGNN`` (xavier-uniform init with the ReLU gain, the
``# x = F.relu(x) # Note: optional!`` left out as upstream), the data path of the ``grid`` dataset
(``nx.grid_2d_graph`` with identity features, both edge directions, 20% of the links removed by
``split_edges`` into val / test halves, one exact negative sample per positive link, shortest-path distances on the
training links only, the training graph's edges as ``edge_index``), ``preselect_anchor`` (``get_random_anchorset``
with ``c=1``), ``args.py``'s defaults for ``--model PGNN`` (layer_num 2, feature/hidden/output dim 32, anchor_num
64, dropout and feature_pre on, permute on, lr 1e-2, weight decay 5e-4, batch_size 8 clipped to the one graph),
and ``main.py``'s epoch: lr divided by 10 at epoch 200, ``model.train()``, ``zero_grad``, shuffle, per graph the
anchor sets redrawn, forward, dot-product link scores on the train mask, ``BCEWithLogitsLoss``, backward, step when
``id % batch_size == batch_size - 1`` (with the gradient division when ``batch_size > 1``).

Deviations from the original:
- ``torch_geometric.data.Data`` is not installed: a plain attribute holder stands in for it (``x``, ``edge_index``,
  ``num_nodes``, the masks); ``graph.selfloop_edges()`` (removed from networkx) is ``nx.selfloop_edges(graph)``;
- ``precompute_dist_data`` uses the ``nx.all_pairs_shortest_path_length`` line the upstream keeps commented out
  instead of the multiprocessing pool (same distances);
- sizes for 2 CPU cores: the ``grid`` graph is 10 x 10 instead of 20 x 20 (100 nodes, identity features, 36
  anchor sets instead of 64 by ``get_random_anchorset``'s ``int(log2 n)`` rule);
- the data is the upstream's own ``grid`` graph (no download); the link split, negatives and anchors come from
  ``seed`` (upstream: unseeded ``np.random.seed()``);
- ``main.py``'s epoch loop is unrolled: one ``train_step`` is one epoch (one graph, so one optimizer step); the
  evaluation every 10 epochs (``roc_auc_score`` from scikit-learn, not installed here, TensorBoard writers) is
  ``eval_fn``: the validation AUC in eval mode computed with a rank formula in torch; the result files are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from random import shuffle

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _pgnn import get_tg_dataset_link, preselect_anchor

ARGS = dict(layer_num=2, feature_dim=32, hidden_dim=32, output_dim=32, anchor_num=64, lr=1e-2, batch_size=8,
            remove_link_ratio=0.2, permute=True, feature_pre=True, dropout=True, approximate=-1)


# ---------------------------------------------------------------- model.py
class PGNN_layer(nn.Module):
    def __init__(self, input_dim, output_dim,dist_trainable=True):
        super(PGNN_layer, self).__init__()
        self.input_dim = input_dim
        self.dist_trainable = dist_trainable

        if self.dist_trainable:
            self.dist_compute = Nonlinear(1, output_dim, 1)

        self.linear_hidden = nn.Linear(input_dim*2, output_dim)
        self.linear_out_position = nn.Linear(output_dim,1)
        self.act = nn.ReLU()

        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data = init.xavier_uniform_(m.weight.data, gain=nn.init.calculate_gain('relu'))
                if m.bias is not None:
                    m.bias.data = init.constant_(m.bias.data, 0.0)

    def forward(self, feature, dists_max, dists_argmax):
        if self.dist_trainable:
            dists_max = self.dist_compute(dists_max.unsqueeze(-1)).squeeze()

        subset_features = feature[dists_argmax.flatten(), :]
        subset_features = subset_features.reshape((dists_argmax.shape[0], dists_argmax.shape[1],
                                                   feature.shape[1]))
        messages = subset_features * dists_max.unsqueeze(-1)

        self_feature = feature.unsqueeze(1).repeat(1, dists_max.shape[1], 1)
        messages = torch.cat((messages, self_feature), dim=-1)

        messages = self.linear_hidden(messages).squeeze()
        messages = self.act(messages) # n*m*d

        out_position = self.linear_out_position(messages).squeeze(-1)  # n*m_out
        out_structure = torch.mean(messages, dim=1)  # n*d

        return out_position, out_structure


class Nonlinear(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim):
        super(Nonlinear, self).__init__()

        self.linear1 = nn.Linear(input_dim, hidden_dim)
        self.linear2 = nn.Linear(hidden_dim, output_dim)

        self.act = nn.ReLU()

        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data = init.xavier_uniform_(m.weight.data, gain=nn.init.calculate_gain('relu'))
                if m.bias is not None:
                    m.bias.data = init.constant_(m.bias.data, 0.0)

    def forward(self, x):
        x = self.linear1(x)
        x = self.act(x)
        x = self.linear2(x)
        return x


class PGNN(torch.nn.Module):
    def __init__(self, input_dim, feature_dim, hidden_dim, output_dim,
                 feature_pre=True, layer_num=2, dropout=True, bug=None, **kwargs):
        super(PGNN, self).__init__()
        self.feature_pre = feature_pre
        self.layer_num = layer_num
        self.dropout = dropout
        self.bug = bug
        if layer_num == 1:
            hidden_dim = output_dim
        if feature_pre:
            self.linear_pre = nn.Linear(input_dim, feature_dim)
            self.conv_first = PGNN_layer(feature_dim, hidden_dim)
        else:
            self.conv_first = PGNN_layer(input_dim, hidden_dim)
        if layer_num>1:
            self.conv_hidden = nn.ModuleList([PGNN_layer(hidden_dim, hidden_dim) for i in range(layer_num - 2)])
            self.conv_out = PGNN_layer(hidden_dim, output_dim)

    def forward(self, data):
        x = data.x
        if self.feature_pre:
            x = self.linear_pre(x)
        x_position, x = self.conv_first(x, data.dists_max, data.dists_argmax)
        if self.layer_num == 1:
            return x_position
        # x = F.relu(x) # Note: optional!
        if self.dropout:
            if self.bug == "dropout_always_on":
                x = F.dropout(x)
            else:
                x = F.dropout(x, training=self.training)
        for i in range(self.layer_num-2):
            _, x = self.conv_hidden[i](x, data.dists_max, data.dists_argmax)
            if self.dropout:
                x = F.dropout(x, training=self.training)
        x_position, x = self.conv_out(x, data.dists_max, data.dists_argmax)
        x_position = F.normalize(x_position, p=2, dim=-1)
        return x_position


def link_pred(out, data, split, bug=None):
    """main.py's scoring of one split's positive and negative links (repeated inline upstream)."""
    edge_mask = np.concatenate((getattr(data, 'mask_link_positive_' + split),
                                getattr(data, 'mask_link_negative_' + split)), axis=-1)
    nodes_first = torch.index_select(out, 0, torch.from_numpy(edge_mask[0,:]).long())
    nodes_second = torch.index_select(out, 0, torch.from_numpy(edge_mask[1,:]).long())
    pred = torch.sum(nodes_first * nodes_second, dim=-1)
    label_positive = torch.ones([getattr(data, 'mask_link_positive_' + split).shape[1],], dtype=pred.dtype)
    label_negative = torch.zeros([getattr(data, 'mask_link_negative_' + split).shape[1],], dtype=pred.dtype)
    label = torch.cat((label_positive,label_negative))
    if bug == "labels_negative_first" and split == 'train':
        label = torch.cat((label_negative,label_positive))
    return pred, label


def _auc(label, score):
    """(port) roc_auc_score by the rank formula (scikit-learn is not installed)."""
    ranks = torch.empty_like(score)
    ranks[torch.argsort(score)] = torch.arange(1, len(score) + 1, dtype=score.dtype)
    n_pos = float(label.sum())
    n_neg = len(label) - n_pos
    return float((ranks[label == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ---------------------------------------------------------------- main.py
def _make_train_step(args, data_list, model, optimizer, loss_func, out_act, bug):
    st = {"epoch": 0}

    def train_step():
        epoch = st["epoch"]
        if epoch==200:
            for param_group in optimizer.param_groups:
                param_group['lr'] /= 10
        model.train()
        optimizer.zero_grad()
        shuffle(data_list)
        effective_len = len(data_list)//args['batch_size']*len(data_list)
        for id, data in enumerate(data_list[:effective_len]):
            if args['permute']:
                preselect_anchor(data, layer_num=args['layer_num'], anchor_num=args['anchor_num'], device='cpu')
            out = model(data)
            pred, label = link_pred(out, data, 'train', bug)
            if bug == "sigmoid_before_bce_with_logits":
                pred = out_act(pred)
            loss = loss_func(pred, label)

            # update
            loss.backward()
            if id % args['batch_size'] == args['batch_size']-1:
                if args['batch_size']>1:
                    for p in model.parameters():
                        if p.grad is not None:
                            p.grad /= args['batch_size']
                optimizer.step()
                optimizer.zero_grad()
        st["epoch"] = epoch + 1
        return loss.item()

    return train_step


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = dict(ARGS)
    data_list = get_tg_dataset_link(args)
    num_features = data_list[0].x.shape[1]
    args['batch_size'] = min(args['batch_size'], len(data_list))
    for i,data in enumerate(data_list):
        preselect_anchor(data, layer_num=args['layer_num'], anchor_num=args['anchor_num'], device='cpu')
        data_list[i] = data

    model = PGNN(input_dim=num_features, feature_dim=args['feature_dim'], hidden_dim=args['hidden_dim'],
                 output_dim=args['output_dim'], feature_pre=args['feature_pre'], layer_num=args['layer_num'],
                 dropout=args['dropout'], bug=bug)
    optimizer = torch.optim.Adam(model.parameters(), lr=args['lr'], weight_decay=5e-4)
    loss_func = nn.BCEWithLogitsLoss()
    out_act = nn.Sigmoid()
    train_step = _make_train_step(args, data_list, model, optimizer, loss_func, out_act, bug)

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        with torch.no_grad():
            auc_val = np.mean([_auc(*reversed(link_pred(model(d), d, 'val', bug))) for d in data_list])
        model.train(was)
        return float(auc_val)

    data = data_list[0]

    def loss_fn(out, label):
        pred, _ = link_pred(out, data, 'train', bug)
        if bug == "sigmoid_before_bce_with_logits":
            pred = out_act(pred)
        return loss_func(pred, label)

    _, label = link_pred(torch.zeros(data.num_nodes, 1), data, 'train', bug)
    return Program(name="pgnn_grid_link", model=model, batch=(data, label), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the link scores go through the sigmoid (main.py's out_act, meant for the AUC) before
    # BCEWithLogitsLoss, which applies its own: the logits live in (0.5, 0.73) and the gradient is squashed.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: F.dropout without training=self.training stays on in model.eval(), so the validation AUC is
    # computed on dropped-out embeddings.
    Bug("dropout_always_on", functools.partial(_build, bug="dropout_always_on"), "six_claims", ("EVALUATION",)),
    # classic labels misaligned with inputs: the training labels are concatenated negatives first while the edge
    # mask lists the positive links first, so (equal counts) every true link is trained towards 0 and every
    # sampled non-link towards 1.
    Bug("labels_negative_first", functools.partial(_build, bug="labels_negative_first"), "learning_ledger",
        ("TASK",)),
]
