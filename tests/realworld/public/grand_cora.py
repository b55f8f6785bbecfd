"""GRAND (Graph Random Neural Network, Feng et al. NeurIPS 2020), THUDM/GRAND's semi-supervised node
classification: DropNode on the node features, mixed-order propagation ``(X + AX + ... + A^5 X) / 6`` with the
symmetric normalized adjacency (no parameters), an MLP on each of K=4 propagated samples, the supervised NLL averaged
over the samples plus the consistency loss towards their sharpened mean (temperature 0.5), Adam lr 0.01 with weight
decay 5e-4; validation on the deterministic propagation (features scaled by ``1 - dropnode_rate``).

Source: https://github.com/THUDM/GRAND
Commit: 7a2fd6e7c3f20ca2c84b06ec1c5dc7f227dbfe2b
Files: ``train_grand.py``, ``pygcn/models.py`` (``MLP``), ``pygcn/layers.py`` (``MLPLayer``), ``pygcn/utils.py``
(``load_data``'s normalizations, ``normalize``, ``accuracy``)
License: MIT (Copyright (c) 2020 Grand20; full text in LICENSES/THUDM-GRAND.txt)
Domain: GNN, semi-supervised node classification (random propagation + consistency regularization, plain torch)

Kept as written: ``propagate`` (``torch.spmm`` powers accumulated in place, divided by ``order + 1``, detached),
``rand_prop`` (a Bernoulli DropNode mask per node in training, the ``1 - drop_rate`` scaling otherwise),
``consis_loss``, ``train``'s body (``model.train()``, zero_grad, K DropNode samples, log-softmax outputs, the NLL on
``idx_train`` averaged over K, plus ``consis_loss``, backward, step, then ``model.eval()`` and the validation
forward), ``test`` as the evaluation, ``MLP`` and ``MLPLayer`` (its ``weight.data.normal_(-stdv, stdv)`` init),
the script's defaults (hidden 32, input/hidden dropout 0.5, dropnode 0.5, order 5, sample 4, tem 0.5, lam 1.0,
lr 0.01, weight decay 5e-4, no BatchNorm) and ``load_data``'s preprocessing (row-normalized features, symmetrized
adjacency plus self-loops normalized as ``D^-1/2 (A + I) D^-1/2``, a sparse tensor).

Deviations from the original:
- Cora (the Planetoid ``ind.cora.*`` pickles, networkx, scipy) is not here: the graph is a synthetic citation graph
  made from ``seed`` -- 7 classes, 700 nodes, a stochastic block model (within-class edges far likelier than
  across), sparse binary bag-of-words features (300 words, each class favouring its own words, much noise) -- with
  Planetoid's split shape: the first 140 nodes (20 per class) for training, the next 200 for validation, the last
  300 for test. The normalizations are written with torch instead of scipy.sparse (same formulas).
- ``masks.cuda()`` is ``masks`` (CPU only); ``torch.cuda.set_device`` and the other CUDA lines are dropped.
- ``train_step`` is one ``train(epoch)`` (the epoch's prints dropped), returning the training loss; ``Train``'s
  early stopping, the checkpoint written and reloaded, and the 5000 epochs are the caller's, not the step's.
- the Program's batch is one DropNode sample's propagated features with the labels; its ``loss_fn`` is the
  supervised term on ``idx_train`` (the consistency term needs the K samples, which ``train_step`` draws).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

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
from torch.nn.modules.module import Module
from torch.nn.parameter import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class _Args:
    """(port) the parser's defaults."""
    fastmode = False
    lr = 0.01
    weight_decay = 5e-4
    hidden = 32
    input_droprate = 0.5
    hidden_droprate = 0.5
    dropnode_rate = 0.5
    order = 5
    sample = 4
    tem = 0.5
    lam = 1.
    use_bn = False


# pygcn/layers.py
class MLPLayer(Module):
    def __init__(self, in_features, out_features, bias=True):
        super(MLPLayer, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        if bias:
            self.bias = Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.normal_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.normal_(-stdv, stdv)

    def forward(self, input):
        output = torch.mm(input, self.weight)
        if self.bias is not None:
            return output + self.bias
        else:
            return output

    def __repr__(self):
        return self.__class__.__name__ + ' (' \
               + str(self.in_features) + ' -> ' \
               + str(self.out_features) + ')'


# pygcn/models.py
class MLP(nn.Module):
    def __init__(self, nfeat, nhid, nclass, input_droprate, hidden_droprate, is_cuda=True, use_bn =False):
        super(MLP, self).__init__()

        self.layer1 = MLPLayer(nfeat, nhid)
        self.layer2 = MLPLayer(nhid, nclass)

        self.input_droprate = input_droprate
        self.hidden_droprate = hidden_droprate
        self.is_cuda = is_cuda
        self.bn1 = nn.BatchNorm1d(nfeat)
        self.bn2 = nn.BatchNorm1d(nhid)
        self.use_bn = use_bn

    def forward(self, x):

        if self.use_bn:
            x = self.bn1(x)
        x = F.dropout(x, self.input_droprate, training=self.training)
        x = F.relu(self.layer1(x))
        if self.use_bn:
            x = self.bn2(x)
        x = F.dropout(x, self.hidden_droprate, training=self.training)
        x = self.layer2(x)

        return x


# pygcn/utils.py
def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def load_data(seed, n=700, n_class=7, n_words=300):
    """(port) a synthetic citation graph in place of Cora, preprocessed as ``load_data`` does."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % n_class
    labels = labels[torch.randperm(n, generator=g)]
    labels[:140] = torch.arange(140) % n_class  # 20 training nodes per class, as in Planetoid
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, torch.tensor(0.012), torch.tensor(0.0008))
    adj = (torch.rand(n, n, generator=g) < p).float().triu(1)
    adj = adj + adj.T  # symmetrized
    word_class = torch.randint(0, n_class, (n_words,), generator=g)
    pw = torch.where(word_class[None, :] == labels[:, None], torch.tensor(0.08), torch.tensor(0.01))
    features = (torch.rand(n, n_words, generator=g) < pw).float()
    features[features.sum(1) == 0, 0] = 1.0
    # normalize(features): row-normalized
    rowsum = features.sum(1)
    r_inv = rowsum.pow(-1)
    r_inv[torch.isinf(r_inv)] = 0.
    features = r_inv[:, None] * features
    # adj + I, D^-1/2 (A + I) D^-1/2
    adj = adj + torch.eye(n)
    D1 = adj.sum(1).pow(-0.5)
    D2 = adj.sum(0).pow(-0.5)
    A = D2[:, None] * adj * D1[None, :]
    A = A.to_sparse()
    idx_train = torch.LongTensor(range(140))
    idx_val = torch.LongTensor(range(140, 140 + 200))
    idx_test = torch.LongTensor(range(n - 300, n))
    return A, features, labels, idx_train, idx_val, idx_test


def _build(seed, bug=None):
    args = _Args()
    np.random.seed(seed)
    torch.manual_seed(seed)

    # Load data
    A, features, labels, idx_train, idx_val, idx_test = load_data(seed)
    idx_unlabel = torch.arange(idx_train.shape[0], labels.shape[0], dtype=int)  # (port) torch.range(.., N - 1)
    del idx_unlabel

    # Model and optimizer
    model = MLP(nfeat=features.shape[1],
                nhid=args.hidden,
                nclass=labels.max().item() + 1,
                input_droprate=args.input_droprate,
                hidden_droprate=args.hidden_droprate,
                use_bn = args.use_bn)
    optimizer = optim.Adam(model.parameters(),
                           lr=args.lr, weight_decay=args.weight_decay)

    def propagate(feature, A, order):
        #feature = F.dropout(feature, args.dropout, training=training)
        x = feature
        y = feature
        for i in range(order):
            x = torch.spmm(A, x).detach_()
            #print(y.add_(x))
            y.add_(x)

        return y.div_(order+1.0).detach_()

    def rand_prop(features, training):
        n = features.shape[0]
        drop_rate = args.dropnode_rate
        drop_rates = torch.FloatTensor(np.ones(n) * drop_rate)

        if training:

            masks = torch.bernoulli(1. - drop_rates).unsqueeze(1)

            features = masks * features  # (port) masks.cuda()

        else:

            features = features * (1. - drop_rate)
        features = propagate(features, A, args.order)
        return features

    def consis_loss(logps, temp=args.tem):
        ps = [torch.exp(p) for p in logps]
        sum_p = 0.
        for p in ps:
            sum_p = sum_p + p
        avg_p = sum_p/len(ps)
        #p2 = torch.exp(logp2)

        sharp_p = (torch.pow(avg_p, 1./temp) / torch.sum(torch.pow(avg_p, 1./temp), dim=1, keepdim=True))
        if bug != "sharpened_target_not_detached":
            sharp_p = sharp_p.detach()
        loss = 0.
        for p in ps:
            loss += torch.mean((p-sharp_p).pow(2).sum(1))
        loss = loss/len(ps)
        return args.lam * loss

    def train(epoch):
        X = features

        model.train()
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        X_list = []
        K = args.sample
        for k in range(K):
            X_list.append(rand_prop(X, training=True))

        output_list = []
        for k in range(K):
            output_list.append(torch.log_softmax(model(X_list[k]), dim=-1))

        loss_train = 0.
        for k in range(K):
            loss_train += F.nll_loss(output_list[k][idx_train], labels[idx_train])

        loss_train = loss_train/K
        loss_consis = consis_loss(output_list)

        loss_train = loss_train + loss_consis
        acc_train = accuracy(output_list[0][idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()

        if not args.fastmode:
            if bug != "eval_without_model_eval":
                model.eval()
            X = rand_prop(X,training=False)
            output = model(X)
            output = torch.log_softmax(output, dim=-1)

        loss_val = F.nll_loss(output[idx_val], labels[idx_val])
        acc_val = accuracy(output[idx_val], labels[idx_val])
        del acc_train
        return loss_train.detach(), loss_val.item(), acc_val.item()  # (port) the training loss first

    st = {"epoch": 0}

    def train_step():
        loss_train, _, _ = train(st["epoch"])
        st["epoch"] += 1
        return loss_train

    def test(m=None, batch=None):
        if bug != "eval_without_model_eval":
            model.eval()
        X = features
        X = rand_prop(X, training=False)
        output = model(X)
        output = torch.log_softmax(output, dim=-1)
        loss_test = F.nll_loss(output[idx_test], labels[idx_test])
        acc_test = accuracy(output[idx_test], labels[idx_test])
        del loss_test
        return float(acc_test)

    def loss_fn(output, target):
        return F.nll_loss(torch.log_softmax(output, dim=-1)[idx_train], target[idx_train])

    gen = torch.get_rng_state()
    batch = (rand_prop(features, training=True), labels)
    torch.set_rng_state(gen)

    return Program(name="grand_cora", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=test)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sharpened mean prediction used as the consistency target without .detach() (classic: the stop-gradient
    # dropped, so each sample's prediction and the target are pulled towards each other).
    Bug("sharpened_target_not_detached", functools.partial(_build, bug="sharpened_target_not_detached"),
        "learning_ledger", ("OBJECTIVE",)),
    # validation and test run with model.eval() left out (classic): dropout stays on at evaluation.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
    # optimizer.zero_grad() left out of train (classic): gradients accumulate over epochs.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
