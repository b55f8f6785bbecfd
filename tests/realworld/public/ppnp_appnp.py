"""APPNP (predict then propagate: a two-layer MLP on the sparse bag-of-words attributes gives local logits, ten power
iterations of personalized PageRank with teleport alpha 0.1 over the symmetrically normalised adjacency with self
loops propagate them, log-softmax) trained by the repository's ``train_model``: semi-supervised node classification
with 20 labelled nodes per class, Adam lr 0.01, ``F.nll_loss`` plus an L2 penalty (``reg_lambda / 2``) on the first
layer's weights only, a full-batch train phase and an early-stopping phase every epoch.

Source: https://github.com/klicperajo/ppnp
Commit: 394425a9eeffbd95c09d68d6f0e1473ac9c2fd4a
Files: ppnp/pytorch/ppnp.py, ppnp/pytorch/propagation.py, ppnp/pytorch/utils.py, ppnp/pytorch/training.py,
ppnp/pytorch/earlystopping.py, ppnp/preprocessing.py, simple_example_pytorch.ipynb (the run)
License: MIT (Copyright (c) 2019 Johannes Klicpera; full text in LICENSES/klicperajo-ppnp.txt)
Domain: GNN (node classification, personalized-PageRank propagation)

Kept as written: ``PPNP`` (``MixedLinear`` first layer on the sparse attribute matrix, ``MixedDropout`` before both
linear layers, ``reg_params`` = the first layer's parameters), ``PPRPowerIteration`` and ``calc_A_hat``,
``SparseDropout``, ``MixedDropout``, ``MixedLinear``, ``sparse_matrix_to_torch`` / ``matrix_to_torch``
(``torch.sparse.FloatTensor``, deprecated but working), ``normalize_attributes``, ``gen_splits`` /
``known_unknown_split`` / ``train_stopping_split`` / ``exclude_idx`` (their fixed seeds), ``get_dataloaders``
(one shuffled batch per phase), ``EarlyStopping`` and ``stopping_args``, ``train_model``'s loop body
(``zero_grad``, ``set_grad_enabled(phase == 'train')``, the loss, backward and step in the train phase, statistics);
the notebook's run (APPNP: ``PPRPowerIteration(alpha=0.1, niter=10)``, hiddenunits [64], drop_prob 0.5,
reg_lambda 5e-3, learning_rate 0.01).

Deviations from the original:
- data: Cora-ML is replaced by a synthetic citation-like graph made from ``seed``: 240 nodes in 4 classes, a sparse
  binary bag-of-words attribute matrix (120 words, 12 words a node, 60% from its class's topic words) and an
  undirected unweighted homophilous graph (a ring through each class plus a few random edges, most within the
  class) with no self loops and one connected component, so ``graph.standardize(select_lcc=True)`` has nothing to
  do and is left out (the ``SparseGraph`` container and ``load_dataset`` with it);
- sizes: the split ``ntrain_per_class`` 20 -> 10, ``nstopping`` 500 -> 40, ``nknown`` 1500 -> 160; hidden units
  64 -> 32;
- the device is the CPU; ``torch_seed`` is the build's ``seed``;
- ``PPNP.__init__``'s ``if drop_prob is 0`` is written ``== 0`` (the same test for the literal 0, without Python's
  SyntaxWarning);
- ``train_model``'s epoch loop is not run to its end: one ``train_step`` is one epoch (the train phase, then the
  early-stopping phase and ``early_stopping.check``); the reload of the best state, the final predictions and
  logging are left out; ``eval_fn`` is the stopping phase's loss on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, PLC0206, PLR0402, RUF013, RUF059, SIM118, SIM201, UP006, UP032, UP034, UP035
# (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import math
import operator
import pathlib
import sys
from enum import Enum, auto
from typing import Dict, List, Tuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Module
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- ppnp/pytorch/utils.py ------------------------------------------------------------------------------------

class SparseDropout(nn.Module):
    def __init__(self, p, bug=None):
        super().__init__()
        self.p = p
        self.bug = bug

    def forward(self, input):
        input_coal = input.coalesce()
        if self.bug == "sparse_dropout_without_training_flag":
            # F.dropout's training argument defaults to True: the attributes are dropped in eval mode as well
            drop_val = F.dropout(input_coal._values(), self.p)
        else:
            drop_val = F.dropout(input_coal._values(), self.p, self.training)
        return torch.sparse.FloatTensor(input_coal._indices(), drop_val, input.shape)


class MixedDropout(nn.Module):
    def __init__(self, p, bug=None):
        super().__init__()
        self.dense_dropout = nn.Dropout(p)
        self.sparse_dropout = SparseDropout(p, bug=bug)

    def forward(self, input):
        if input.is_sparse:
            return self.sparse_dropout(input)
        else:
            return self.dense_dropout(input)


class MixedLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.Tensor(in_features, out_features))
        if bias:
            self.bias = nn.Parameter(torch.Tensor(out_features))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        # Our fan_in is interpreted by PyTorch as fan_out (swapped dimensions)
        nn.init.kaiming_uniform_(self.weight, mode='fan_out', a=math.sqrt(5))
        if self.bias is not None:
            _, fan_out = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_out)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        if self.bias is None:
            if input.is_sparse:
                res = torch.sparse.mm(input, self.weight)
            else:
                res = input.matmul(self.weight)
        else:
            if input.is_sparse:
                res = torch.sparse.addmm(self.bias.expand(input.shape[0], -1), input, self.weight)
            else:
                res = torch.addmm(self.bias, input, self.weight)
        return res

    def extra_repr(self):
        return 'in_features={}, out_features={}, bias={}'.format(
                self.in_features, self.out_features, self.bias is not None)


def sparse_matrix_to_torch(X):
    coo = X.tocoo()
    indices = np.array([coo.row, coo.col])
    return torch.sparse.FloatTensor(
            torch.LongTensor(indices),
            torch.FloatTensor(coo.data),
            coo.shape)


def matrix_to_torch(X):
    if sp.issparse(X):
        return sparse_matrix_to_torch(X)
    else:
        return torch.FloatTensor(X)


# ---- ppnp/pytorch/propagation.py ------------------------------------------------------------------------------

def calc_A_hat(adj_matrix: sp.spmatrix) -> sp.spmatrix:
    nnodes = adj_matrix.shape[0]
    A = adj_matrix + sp.eye(nnodes)
    D_vec = np.sum(A, axis=1).A1
    D_vec_invsqrt_corr = 1 / np.sqrt(D_vec)
    D_invsqrt_corr = sp.diags(D_vec_invsqrt_corr)
    return D_invsqrt_corr @ A @ D_invsqrt_corr


class PPRPowerIteration(nn.Module):
    def __init__(self, adj_matrix: sp.spmatrix, alpha: float, niter: int, drop_prob: float = None, bug=None):
        super().__init__()
        self.alpha = alpha
        self.niter = niter
        self.bug = bug

        M = calc_A_hat(adj_matrix)
        self.register_buffer('A_hat', sparse_matrix_to_torch((1 - alpha) * M))

        if drop_prob is None or drop_prob == 0:
            self.dropout = lambda x: x
        else:
            self.dropout = MixedDropout(drop_prob)

    def forward(self, local_preds: torch.FloatTensor, idx: torch.LongTensor):
        preds = local_preds
        for _ in range(self.niter):
            A_drop = self.dropout(self.A_hat)
            preds = A_drop @ preds + self.alpha * local_preds
        if self.bug == "returns_local_preds":
            # the propagated predictions computed and the local ones returned: no node sees its neighbourhood
            return local_preds[idx]
        return preds[idx]


# ---- ppnp/pytorch/ppnp.py -------------------------------------------------------------------------------------

class PPNP(nn.Module):
    def __init__(self, nfeatures: int, nclasses: int, hiddenunits: List[int], drop_prob: float,
                 propagation: nn.Module, bias: bool = False, bug=None):
        super().__init__()

        fcs = [MixedLinear(nfeatures, hiddenunits[0], bias=bias)]
        for i in range(1, len(hiddenunits)):
            fcs.append(nn.Linear(hiddenunits[i - 1], hiddenunits[i], bias=bias))
        fcs.append(nn.Linear(hiddenunits[-1], nclasses, bias=bias))
        self.fcs = nn.ModuleList(fcs)

        self.reg_params = list(self.fcs[0].parameters())

        if drop_prob == 0:  # (port) ``drop_prob is 0`` in the original: the same test for the int literal 0
            self.dropout = lambda x: x
        else:
            self.dropout = MixedDropout(drop_prob, bug=bug)
        self.act_fn = nn.ReLU()

        self.propagation = propagation
        self.bug = bug

    def _transform_features(self, attr_matrix: torch.sparse.FloatTensor):
        layer_inner = self.act_fn(self.fcs[0](self.dropout(attr_matrix)))
        for fc in self.fcs[1:-1]:
            layer_inner = self.act_fn(fc(layer_inner))
        res = self.fcs[-1](self.dropout(layer_inner))
        return res

    def forward(self, attr_matrix: torch.sparse.FloatTensor, idx: torch.LongTensor):
        local_logits = self._transform_features(attr_matrix)
        final_logits = self.propagation(local_logits, idx)
        if self.bug == "log_softmax_dropped":
            # the raw logits returned while train_model applies F.nll_loss to them
            return final_logits
        return F.log_softmax(final_logits, dim=-1)


# ---- ppnp/pytorch/earlystopping.py ----------------------------------------------------------------------------

class StopVariable(Enum):
    LOSS = auto()
    ACCURACY = auto()
    NONE = auto()


class Best(Enum):
    RANKED = auto()
    ALL = auto()


stopping_args = dict(
        stop_varnames=[StopVariable.ACCURACY, StopVariable.LOSS],
        patience=100, max_epochs=10000, remember=Best.RANKED)


class EarlyStopping:
    def __init__(
            self, model: Module, stop_varnames: List[StopVariable],
            patience: int = 10, max_epochs: int = 200, remember: Best = Best.ALL):
        self.model = model
        self.comp_ops = []
        self.stop_vars = []
        self.best_vals = []
        for stop_varname in stop_varnames:
            if stop_varname is StopVariable.LOSS:
                self.stop_vars.append('loss')
                self.comp_ops.append(operator.le)
                self.best_vals.append(np.inf)
            elif stop_varname is StopVariable.ACCURACY:
                self.stop_vars.append('acc')
                self.comp_ops.append(operator.ge)
                self.best_vals.append(-np.inf)
        self.remember = remember
        self.remembered_vals = copy.copy(self.best_vals)
        self.max_patience = patience
        self.patience = self.max_patience
        self.max_epochs = max_epochs
        self.best_epoch = None
        self.best_state = None

    def check(self, values: List[np.floating], epoch: int) -> bool:
        checks = [self.comp_ops[i](val, self.best_vals[i])
                  for i, val in enumerate(values)]
        if any(checks):
            self.best_vals = np.choose(checks, [self.best_vals, values])
            self.patience = self.max_patience

            comp_remembered = [
                    self.comp_ops[i](val, self.remembered_vals[i])
                    for i, val in enumerate(values)]
            if self.remember is Best.ALL:
                if all(comp_remembered):
                    self.best_epoch = epoch
                    self.remembered_vals = copy.copy(values)
                    self.best_state = {
                            key: value.cpu() for key, value
                            in self.model.state_dict().items()}
            elif self.remember is Best.RANKED:
                for i, comp in enumerate(comp_remembered):
                    if comp:
                        if not(self.remembered_vals[i] == values[i]):
                            self.best_epoch = epoch
                            self.remembered_vals = copy.copy(values)
                            self.best_state = {
                                    key: value.cpu() for key, value
                                    in self.model.state_dict().items()}
                            break
                    else:
                        break
        else:
            self.patience -= 1
        return self.patience == 0


# ---- ppnp/preprocessing.py ------------------------------------------------------------------------------------

def exclude_idx(idx: np.ndarray, idx_exclude_list: List[np.ndarray]) -> np.ndarray:
    idx_exclude = np.concatenate(idx_exclude_list)
    return np.array([i for i in idx if i not in idx_exclude])


def known_unknown_split(
        idx: np.ndarray, nknown: int = 1500, seed: int = 4143496719) -> Tuple[np.ndarray, np.ndarray]:
    rnd_state = np.random.RandomState(seed)
    known_idx = rnd_state.choice(idx, nknown, replace=False)
    unknown_idx = exclude_idx(idx, [known_idx])
    return known_idx, unknown_idx


def train_stopping_split(
        idx: np.ndarray, labels: np.ndarray, ntrain_per_class: int = 20,
        nstopping: int = 500, seed: int = 2413340114) -> Tuple[np.ndarray, np.ndarray]:
    rnd_state = np.random.RandomState(seed)
    train_idx_split = []
    for i in range(max(labels) + 1):
        train_idx_split.append(rnd_state.choice(
                idx[labels == i], ntrain_per_class, replace=False))
    train_idx = np.concatenate(train_idx_split)
    stopping_idx = rnd_state.choice(
            exclude_idx(idx, [train_idx]),
            nstopping, replace=False)
    return train_idx, stopping_idx


def gen_splits(
        labels: np.ndarray, idx_split_args: Dict[str, int],
        test: bool = False) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    all_idx = np.arange(len(labels))
    known_idx, unknown_idx = known_unknown_split(
            all_idx, idx_split_args['nknown'])
    _, cnts = np.unique(labels[known_idx], return_counts=True)
    stopping_split_args = copy.copy(idx_split_args)
    del stopping_split_args['nknown']
    train_idx, stopping_idx = train_stopping_split(
            known_idx, labels[known_idx], **stopping_split_args)
    if test:
        val_idx = unknown_idx
    else:
        val_idx = exclude_idx(known_idx, [train_idx, stopping_idx])
    return train_idx, stopping_idx, val_idx


def normalize_attributes(attr_matrix):
    epsilon = 1e-12
    if isinstance(attr_matrix, sp.csr_matrix):
        attr_norms = spla.norm(attr_matrix, ord=1, axis=1)
        attr_invnorms = 1 / np.maximum(attr_norms, epsilon)
        attr_mat_norm = attr_matrix.multiply(attr_invnorms[:, np.newaxis])
    else:
        attr_norms = np.linalg.norm(attr_matrix, ord=1, axis=1)
        attr_invnorms = 1 / np.maximum(attr_norms, epsilon)
        attr_mat_norm = attr_matrix * attr_invnorms[:, np.newaxis]
    return attr_mat_norm


# ---- ppnp/pytorch/training.py ---------------------------------------------------------------------------------

def get_dataloaders(idx, labels_np, batch_size=None):
    labels = torch.LongTensor(labels_np)
    if batch_size is None:
        batch_size = max((val.numel() for val in idx.values()))
    datasets = {phase: TensorDataset(ind, labels[ind]) for phase, ind in idx.items()}
    dataloaders = {phase: DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True)
                   for phase, dataset in datasets.items()}
    return dataloaders


def make_graph(seed, nnodes=240, nclasses=4, nwords=120, words_per_node=12):
    """(port) the synthetic Cora-ML stand-in: (adj_matrix csr, attr_matrix csr, labels)."""
    rng = np.random.RandomState(seed)
    labels = rng.permutation(np.arange(nnodes) % nclasses)
    topic = np.arange(nwords) % nclasses
    rows, cols = [], []
    for c in range(nclasses):  # a ring through each class
        members = rng.permutation(np.flatnonzero(labels == c))
        rows += list(members)
        cols += list(np.roll(members, 1))
    for i in range(nnodes):  # random extra edges: 3 in 4 within the class
        for _ in range(2):
            same = rng.rand() < 0.75
            pool = np.flatnonzero((labels == labels[i]) == same)
            j = int(rng.choice(pool))
            if j != i:
                rows.append(i)
                cols.append(j)
    adj = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(nnodes, nnodes))
    adj = ((adj + adj.T) > 0).astype(np.float64).tocsr()
    attr = np.zeros((nnodes, nwords))
    for i in range(nnodes):
        n_topic = round(words_per_node * 0.6)
        on_topic = rng.choice(np.flatnonzero(topic == labels[i]), n_topic, replace=False)
        off_topic = rng.choice(np.flatnonzero(topic != labels[i]), words_per_node - n_topic, replace=False)
        attr[i, on_topic] = 1.0
        attr[i, off_topic] = 1.0
    assert sp.csgraph.connected_components(adj)[0] == 1
    return adj, sp.csr_matrix(attr), labels


def _build(seed, bug=None):
    adj_matrix, attr_matrix, labels_all = make_graph(seed)

    # the notebook's run
    prop_appnp = PPRPowerIteration(adj_matrix, alpha=0.1, niter=10, bug=bug)
    model_args = {
        'hiddenunits': [32],
        'drop_prob': 0.5,
        'propagation': prop_appnp}
    idx_split_args = {'ntrain_per_class': 10, 'nstopping': 40, 'nknown': 160, 'seed': 2413340114}
    reg_lambda = 5e-3
    learning_rate = 0.01
    test = False
    device = 'cpu'
    torch_seed = seed

    # train_model, before the epoch loop
    idx_np = {}
    idx_np['train'], idx_np['stopping'], idx_np['valtest'] = gen_splits(
            labels_all, idx_split_args, test=test)
    idx_all = {key: torch.LongTensor(val) for key, val in idx_np.items()}

    torch.manual_seed(seed=torch_seed)

    nfeatures = attr_matrix.shape[1]
    nclasses = max(labels_all) + 1
    model = PPNP(nfeatures, nclasses, **model_args, bug=bug).to(device)

    reg_lambda = torch.tensor(reg_lambda, device=device)

    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    dataloaders = get_dataloaders(idx_all, labels_all)
    early_stopping = EarlyStopping(model, **stopping_args)
    attr_mat_norm_np = normalize_attributes(attr_matrix)
    attr_mat_norm = matrix_to_torch(attr_mat_norm_np).to(device)

    epoch_stats = {'train': {}, 'stopping': {}}
    state = {"epoch": 0}

    def train_step():
        epoch = state["epoch"]
        for phase in epoch_stats.keys():

            if phase == 'train':
                model.train()  # Set model to training mode
            else:
                model.eval()  # Set model to evaluate mode

            running_loss = 0
            running_corrects = 0

            for idx, labels in dataloaders[phase]:
                idx = idx.to(device)
                labels = labels.to(device)

                optimizer.zero_grad()

                with torch.set_grad_enabled(phase == 'train'):
                    log_preds = model(attr_mat_norm, idx)
                    preds = torch.argmax(log_preds, dim=1)

                    # Calculate loss
                    cross_entropy_mean = F.nll_loss(log_preds, labels)
                    l2_reg = sum((torch.sum(param ** 2) for param in model.reg_params))
                    loss = cross_entropy_mean + reg_lambda / 2 * l2_reg

                    if phase == 'train':
                        loss.backward()
                        optimizer.step()
                        train_loss = loss.detach()

                    # Collect statistics
                    running_loss += loss.item() * idx.size(0)
                    running_corrects += torch.sum(preds == labels)

            # Collect statistics
            epoch_stats[phase]['loss'] = running_loss / len(dataloaders[phase].dataset)
            epoch_stats[phase]['acc'] = running_corrects.item() / len(dataloaders[phase].dataset)

        if len(early_stopping.stop_vars) > 0:
            stop_vars = [epoch_stats['stopping'][key]
                         for key in early_stopping.stop_vars]
            early_stopping.check(stop_vars, epoch)
        state["epoch"] += 1
        return train_loss

    def loss_fn(log_preds, labels):
        cross_entropy_mean = F.nll_loss(log_preds, labels)
        l2_reg = sum((torch.sum(param ** 2) for param in model.reg_params))
        return cross_entropy_mean + reg_lambda / 2 * l2_reg

    def eval_fn(model, batch):
        (attr, idx), labels = batch
        model.eval()
        with torch.set_grad_enabled(False):
            log_preds = model(attr, idx)
            loss = loss_fn(log_preds, labels)
        return float(loss)

    idx, labels = next(iter(dataloaders['train']))
    batch = ((attr_mat_norm, idx), labels)
    return Program(name="ppnp_appnp", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=dataloaders['train'])


build = functools.partial(_build, bug=None)

BUGS = [
    # PPNP.forward returns the propagated logits without the log-softmax while train_model still applies
    # F.nll_loss (classic: nll on raw logits, an unbounded objective).
    Bug("log_softmax_dropped", functools.partial(_build, bug="log_softmax_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # PPRPowerIteration runs its ten iterations and returns the local predictions: a node's output no longer
    # depends on its neighbours' attributes (classic slip of the returned variable).
    Bug("returns_local_preds", functools.partial(_build, bug="returns_local_preds"), "learning_ledger",
        ("DEPENDENCY",)),
    # SparseDropout calls F.dropout without ``self.training``: the attribute dropout stays on in eval mode, so the
    # early-stopping phase and the predictions are made on randomly dropped attributes (classic).
    Bug("sparse_dropout_without_training_flag",
        functools.partial(_build, bug="sparse_dropout_without_training_flag"), "six_claims", ("EVALUATION",)),
]
