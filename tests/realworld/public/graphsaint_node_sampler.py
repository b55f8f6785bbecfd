# ruff: noqa: RUF059
"""GraphSAINT (Zeng et al., ICLR 2020): graph-sampling based GNN training. Each minibatch is a node-induced subgraph
of the training graph drawn by a sampler; the loss of each node and the aggregation weight of each edge are
normalized by coefficients estimated from a warm-up of sampled subgraphs (``sample_coverage``), so the minibatch
loss is an unbiased estimate of the full-graph one. The model stacks ``HighOrderAggregator`` layers (GraphSAGE-style
0-hop and 1-hop linear transforms, concatenated, with per-node feature normalization), L2-normalizes the
embeddings and classifies them with an order-0 layer; loss-normalized softmax cross-entropy, Adam, gradient norm
clipped at 5; full-batch evaluation on the validation nodes by micro-F1.

Source: https://github.com/GraphSAINT/GraphSAINT
Commit: c9b1e340d7b951465ac4a9251eef93832e68b003
Files (all but ``train.py``, ``metric.py`` and the config in the helper ``_graphsaint.py``):
``graphsaint/pytorch_version/train.py`` (``prepare``, ``train``, ``evaluate_full_batch``),
``graphsaint/pytorch_version/models.py`` (``GraphSAINT``), ``graphsaint/pytorch_version/layers.py``
(``HighOrderAggregator``, ``F_ACT``), ``graphsaint/pytorch_version/minibatch.py`` (``Minibatch``,
``_coo_scipy2torch``), ``graphsaint/graph_samplers.py`` (``GraphSampler._helper_extract_subgraph``,
``NodeSamplingVanillaPython``), ``graphsaint/norm_aggr.pyx``, ``graphsaint/utils.py`` (``adj_norm``,
``parse_layer_yml``), ``graphsaint/metric.py`` (``calc_f1``), ``train_config/table2/flickr2_n.yml``
License: MIT (Copyright (c) 2020 Hanqing Zeng, Hongkuan Zhou; full text in LICENSES/GraphSAINT-GraphSAINT.txt)
Domain: GNN in plain torch (sparse ``torch.sparse.mm``), graph-sampling minibatches, node classification

Kept as written: ``GraphSAINT`` (the aggregator choice, ``set_dims``/``set_idx_conv``, ``forward`` with
``F.normalize`` of the embeddings, ``_loss`` as the ``norm_loss``-weighted sum of per-node cross-entropies,
``train_step`` with ``self.train()``, ``zero_grad``, ``clip_grad_norm(..., 5)`` and the Adam created inside the
model, ``eval_step``), ``HighOrderAggregator`` (``bias='norm'``: per-node normalization with learned scale and
offset; ``aggr='concat'``), ``Minibatch`` (the warm-up until ``sample_coverage`` times the training nodes are
sampled, the loss and aggregation normalization coefficients, ``one_batch``, ``shuffle``, ``end``), the pure-Python
node sampler ``NodeSamplingVanillaPython`` with ``_helper_extract_subgraph``, ``adj_norm`` (random-walk
normalization by the training degrees), the Flickr node-sampler row of ``table2`` (arch ``1-1-0``, concat, softmax
loss, ``bias: norm``, relu, lr 0.01, dropout 0.2, sample_coverage 25), ``train``'s loop body.

Deviations from the original:
- Flickr is not here: a synthetic graph made from ``seed``: 300 nodes in 5 classes, 16 features (a class centroid
  plus noise of the same scale), each node linked to 3 nodes of its own class and 1 random node (undirected); 60%
  training, 20% validation and 20% test nodes; ``adj_train`` keeps the edges between training nodes (the
  transductive split of the repository's data format); the rule is learnable (labels follow features and edges);
- sizes for 2 CPU cores: dim 256 -> 32, size_subgraph 8000 -> 64; the sampler is the repository's pure-Python
  ``vanilla_node_python`` (the compiled Cython samplers and ``norm_aggr`` are not built here; ``norm_aggr``'s
  OpenMP loop is written as the numpy gather it performs); ``args_global`` is replaced by CPU defaults (no GPU,
  no ``cpu_eval`` copy of the model); ``calc_f1`` computes micro-F1 in numpy (no scikit-learn here);
- ``train``'s epoch and phase loops are unrolled: one ``train_step`` is one ``model.train_step`` on the next
  sampled subgraph (``minibatch.shuffle()`` when ``minibatch.end()``); it returns the loss; ``eval_fn`` is
  ``evaluate_full_batch(model, minibatch, mode='val')``'s micro-F1; printing, logging and checkpoints are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _graphsaint import GraphSAINT, Minibatch, adj_norm

N_NODES, N_CLASSES, N_FEAT = 300, 5, 16  # (port) synthetic graph

# metric.py (micro-F1 of the softmax case in numpy: it equals the accuracy)
def calc_f1(y_true, y_pred,is_sigmoid):
    if not is_sigmoid:
        y_true = np.argmax(y_true, axis=1)
        y_pred = np.argmax(y_pred, axis=1)
    return float(np.mean(y_true == y_pred))




def _synthetic_data(seed):
    """(port) train_data as prepare() receives it: (adj_full, adj_train, feat_full, class_arr, role)."""
    rng = np.random.RandomState(seed)
    y = rng.permutation(N_NODES) % N_CLASSES
    centroids = rng.normal(size=(N_CLASSES, N_FEAT))
    feat_full = centroids[y] + rng.normal(size=(N_NODES, N_FEAT))
    rows, cols = [], []
    for v in range(N_NODES):
        same = rng.choice(np.flatnonzero((y == y[v]) & (np.arange(N_NODES) != v)), 3, replace=False)
        for u in list(same) + [rng.randint(N_NODES)]:
            if u != v:
                rows += [v, u]
                cols += [u, v]
    adj_full = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(N_NODES, N_NODES))
    adj_full.data[:] = 1.0
    order = rng.permutation(N_NODES)
    n_tr, n_va = int(0.6 * N_NODES), int(0.2 * N_NODES)
    role = {'tr': sorted(order[:n_tr]), 'va': sorted(order[n_tr:n_tr + n_va]), 'te': sorted(order[n_tr + n_va:])}
    is_tr = np.zeros(N_NODES)
    is_tr[role['tr']] = 1
    adj_train = sp.csr_matrix(sp.diags(is_tr) @ adj_full @ sp.diags(is_tr))
    adj_train.eliminate_zeros()
    return adj_full, adj_train, feat_full, np.eye(N_CLASSES)[y], role


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    # train_config/table2/flickr2_n.yml, sizes and sampler as listed in the docstring
    arch_gcn = {'dim': 32, 'aggr': 'concat', 'loss': 'softmax', 'arch': '1-1-0', 'bias': 'norm', 'act': 'relu'}
    train_params = {'lr': 0.01, 'dropout': 0.2, 'weight_decay': 0.0, 'sample_coverage': 25}
    phase = {'end': 30, 'sampler': 'vanilla_node_python', 'size_subgraph': 64}

    # prepare()
    adj_full, adj_train, feat_full, class_arr, role = _synthetic_data(seed)
    adj_full = adj_full.astype(np.int32)
    adj_train = adj_train.astype(np.int32)
    adj_full_norm = adj_norm(adj_full)
    num_classes = class_arr.shape[1]
    minibatch = Minibatch(adj_full_norm, adj_train, role, train_params)
    model = GraphSAINT(num_classes, arch_gcn, train_params, feat_full, class_arr, bug=bug)

    # train(): one phase, minibatch_eval = minibatch and model_eval = model (no cpu_eval)
    minibatch.set_sampler(phase)
    minibatch.shuffle()

    def train_step():
        if minibatch.end():  # the epoch ends: the next one starts
            minibatch.shuffle()
        loss_train,preds_train,labels_train = model.train_step(*minibatch.one_batch(mode='train'))
        return loss_train.item()

    def eval_fn(model, _batch=None):
        # evaluate_full_batch(model_eval, minibatch_eval, mode='val')
        was = model.training
        loss,preds,labels = model.eval_step(*minibatch.one_batch(mode='val'))
        n = minibatch.node_val
        f1mic = calc_f1(labels[n].numpy(), preds[n].numpy(), model.sigmoid_loss)
        model.train(was)
        return f1mic

    node_subgraph, adj, norm_loss = minibatch.one_batch(mode='train')
    minibatch.batch_num = -1
    loss_fn = lambda out, batch: model._loss(out[0], out[2], batch[2])
    return Program(name="graphsaint_node_sampler", model=model, batch=(node_subgraph, adj, norm_loss),
                   loss_fn=loss_fn, optimizer=model.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic label misalignment: the subgraph's labels are taken from the first len(node_subgraph) nodes of the
    # graph instead of the sampled node ids, so each sampled node is trained toward another node's class.
    Bug("labels_of_first_nodes", functools.partial(_build, bug="labels_of_first_nodes"), "learning_ledger",
        ("TASK",)),
    # classic wrong axis: F.normalize over dim=0 scales each embedding column over the subgraph's nodes instead of
    # each node's embedding, so a node's prediction depends on which other nodes were sampled with it.
    Bug("normalize_over_nodes", functools.partial(_build, bug="normalize_over_nodes"), "learning_ledger",
        ("OBJECTIVE",)),
]
