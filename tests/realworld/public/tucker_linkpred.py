# ruff: noqa: UP008, UP031, C403, C414, PLR1704, RUF059
"""TuckER (Balazevic, Allen & Hospedales, EMNLP 2019): knowledge-graph link prediction by a Tucker decomposition of
the binary tensor of triples. The head entity's embedding (batch-normed, dropped out) is multiplied by the core
tensor ``W`` contracted with the relation's embedding (dropped out), batch-normed and dropped out again, then scored
against every entity's embedding; a sigmoid and ``BCELoss`` against the multi-hot row of all true tails of the
(head, relation) pair, with label smoothing, Adam and ExponentialLR (1-N scoring, reverse triples added).

Source: https://github.com/ibalazevic/TuckER
Commit: 23aff592115ee91e099ce490cdbea28ef026fc54
Files: ``model.py`` (``TuckER``), ``main.py`` (``Experiment``: ``get_data_idxs``, ``get_er_vocab``, ``get_batch``,
``evaluate``, ``train_and_eval``; the argparse defaults and the README's table of hyperparameters), ``load_data.py``
(``Data``)
License: MIT (Copyright (c) 2019 Ivana Balazevic; full text in LICENSES/ibalazevic-TuckER.txt)
Domain: link prediction on a knowledge graph (embedding model in plain torch, 1-N multi-label BCE)

Kept as written: ``TuckER`` (the core ``W`` drawn from ``np.random.uniform(-1, 1)``, xavier-normal embeddings via
``init()``, bn0 / input dropout / ``W_mat`` from ``r @ W`` / hidden dropout 1 / bmm / bn1 / hidden dropout 2 / scores
against ``E.weight`` / sigmoid, ``BCELoss``), ``Data`` (reverse triples ``<t, r_reverse, h>`` added, entity and
relation vocabularies sorted), the ``Experiment`` methods (``er_vocab`` of (head, relation) -> tails,
``get_batch``'s multi-hot targets, the filtered ranking of ``evaluate``), ``train_and_eval``'s loop body (shuffled
``er_vocab_pairs`` every epoch, zero_grad, forward, ``targets = (1 - ls) * targets + 1 / n_entities``,
``model.loss``, backward, step; ``scheduler.step()`` per epoch; ``model.eval()`` before evaluating), the README's
WN18 row of hyperparameters (lr 0.005, decay rate 0.995, input dropout 0.2, hidden dropouts 0.1 / 0.2, label
smoothing 0.1, batch 128).

Deviations from the original:
- WN18 is not here: ``Data`` is given synthetic triples made from ``seed``: 96 entities and 6
  relations; every entity has one of 8 hidden types and relation ``k`` links a head of type ``c`` to 4 random
  entities of type ``perm_k(c)`` (types, permutations and tails drawn from the seed); 10% of the triples are held
  out as the validation split (``valid.txt``), the test split is dropped. The rule is learnable: a held-out tail
  has the type the head's other triples reveal;
- sizes for 2 CPU cores: ent_vec_dim 200 -> 32, rel_vec_dim 30 -> 16; the ``device="cuda"`` of ``W`` and the ``.cuda()``
  calls are dropped (CPU);
- the global ``d`` that ``get_batch`` and ``evaluate`` read is the experiment's ``self.d``;
- ``train_and_eval``'s epoch loop is unrolled: one ``train_step`` is one batch of it (``model.train()`` and a new
  shuffle at the start of an epoch, ``scheduler.step()`` when it ends); ``eval_fn`` is ``model.eval()`` then
  ``evaluate`` on the validation triples under ``no_grad``, returning the filtered mean reciprocal rank instead of
  printing hits and ranks; the timing prints are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import defaultdict

import numpy as np
import torch
from torch.nn.init import xavier_normal_
from torch.optim.lr_scheduler import ExponentialLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ENTITIES, N_RELATIONS, N_TYPES = 96, 6, 8  # (port) synthetic graph


# model.py
class TuckER(torch.nn.Module):
    def __init__(self, d, d1, d2, bug=None, **kwargs):
        super(TuckER, self).__init__()
        self.bug = bug

        self.E = torch.nn.Embedding(len(d.entities), d1)
        self.R = torch.nn.Embedding(len(d.relations), d2)
        self.W = torch.nn.Parameter(torch.tensor(np.random.uniform(-1, 1, (d2, d1, d1)),
                                    dtype=torch.float, requires_grad=True))  # (port) device="cuda" dropped

        self.input_dropout = torch.nn.Dropout(kwargs["input_dropout"])
        self.hidden_dropout1 = torch.nn.Dropout(kwargs["hidden_dropout1"])
        self.hidden_dropout2 = torch.nn.Dropout(kwargs["hidden_dropout2"])
        self.loss = torch.nn.BCELoss()
        if bug == "sigmoid_then_bce_with_logits":
            self.loss = torch.nn.BCEWithLogitsLoss()

        self.bn0 = torch.nn.BatchNorm1d(d1)
        self.bn1 = torch.nn.BatchNorm1d(d1)

    def init(self):
        xavier_normal_(self.E.weight.data)
        xavier_normal_(self.R.weight.data)

    def forward(self, e1_idx, r_idx):
        e1 = self.E(e1_idx)
        x = self.bn0(e1)
        x = self.input_dropout(x)
        x = x.view(-1, 1, e1.size(1))

        r = self.R(r_idx)
        W_mat = torch.mm(r, self.W.view(r.size(1), -1))
        W_mat = W_mat.view(-1, e1.size(1), e1.size(1))
        W_mat = self.hidden_dropout1(W_mat)

        x = torch.bmm(x, W_mat)
        x = x.view(-1, e1.size(1))
        x = self.bn1(x)
        x = self.hidden_dropout2(x)
        x = torch.mm(x, self.E.weight.transpose(1,0))
        pred = torch.sigmoid(x)
        return pred


# load_data.py (the file reads replaced by the synthetic triples)
class Data:

    def __init__(self, splits, reverse=False):
        self.train_data = self.load_data(splits, "train", reverse=reverse)
        self.valid_data = self.load_data(splits, "valid", reverse=reverse)
        self.data = self.train_data + self.valid_data
        self.entities = self.get_entities(self.data)
        self.train_relations = self.get_relations(self.train_data)
        self.valid_relations = self.get_relations(self.valid_data)
        self.relations = self.train_relations + [i for i in self.valid_relations \
                if i not in self.train_relations]

    def load_data(self, splits, data_type="train", reverse=False):
        data = [list(t) for t in splits[data_type]]  # (port) instead of reading data_dir/<type>.txt
        if reverse:
            data += [[i[2], i[1]+"_reverse", i[0]] for i in data]
        return data

    def get_relations(self, data):
        relations = sorted(list(set([d[1] for d in data])))
        return relations

    def get_entities(self, data):
        entities = sorted(list(set([d[0] for d in data]+[d[2] for d in data])))
        return entities


def _synthetic_splits(seed):
    """(port) Typed triples: relation k links a head of type c to 4 random entities of type perm_k(c)."""
    rng = np.random.RandomState(seed)
    types = rng.permutation(N_ENTITIES) % N_TYPES
    members = [np.flatnonzero(types == c) for c in range(N_TYPES)]
    triples = []
    for k in range(N_RELATIONS):
        perm = rng.permutation(N_TYPES)
        for h in range(N_ENTITIES):
            for t in rng.choice(members[perm[types[h]]], size=4, replace=False):
                triples.append(("e%03d" % h, "r%d" % k, "e%03d" % t))
    order = rng.permutation(len(triples))
    n_valid = len(triples) // 10
    return {"valid": [triples[i] for i in order[:n_valid]], "train": [triples[i] for i in order[n_valid:]]}


# main.py
class Experiment:

    def __init__(self, d, learning_rate=0.0005, ent_vec_dim=200, rel_vec_dim=200,
                 num_iterations=500, batch_size=128, decay_rate=0., cuda=False,
                 input_dropout=0.3, hidden_dropout1=0.4, hidden_dropout2=0.5,
                 label_smoothing=0., bug=None):
        self.d = d
        self.bug = bug
        self.learning_rate = learning_rate
        self.ent_vec_dim = ent_vec_dim
        self.rel_vec_dim = rel_vec_dim
        self.num_iterations = num_iterations
        self.batch_size = batch_size
        self.decay_rate = decay_rate
        self.label_smoothing = label_smoothing
        self.cuda = cuda
        self.kwargs = {"input_dropout": input_dropout, "hidden_dropout1": hidden_dropout1,
                       "hidden_dropout2": hidden_dropout2}

    def get_data_idxs(self, data):
        data_idxs = [(self.entity_idxs[data[i][0]], self.relation_idxs[data[i][1]], \
                      self.entity_idxs[data[i][2]]) for i in range(len(data))]
        return data_idxs

    def get_er_vocab(self, data):
        er_vocab = defaultdict(list)
        for triple in data:
            er_vocab[(triple[0], triple[1])].append(triple[2])
        return er_vocab

    def get_batch(self, er_vocab, er_vocab_pairs, idx):
        batch = er_vocab_pairs[idx:idx+self.batch_size]
        targets = np.zeros((len(batch), len(self.d.entities)))
        for idx, pair in enumerate(batch):
            if self.bug == "targets_are_head_entity":
                targets[idx, pair[0]] = 1.
                continue
            targets[idx, er_vocab[pair]] = 1.
        targets = torch.FloatTensor(targets)
        return np.array(batch), targets

    def evaluate(self, model, data):
        ranks = []
        test_data_idxs = self.get_data_idxs(data)
        er_vocab = self.get_er_vocab(self.get_data_idxs(self.d.data))

        for i in range(0, len(test_data_idxs), self.batch_size):
            data_batch, _ = self.get_batch(er_vocab, test_data_idxs, i)
            e1_idx = torch.tensor(data_batch[:,0])
            r_idx = torch.tensor(data_batch[:,1])
            e2_idx = torch.tensor(data_batch[:,2])
            predictions = model.forward(e1_idx, r_idx)

            for j in range(data_batch.shape[0]):
                filt = er_vocab[(data_batch[j][0], data_batch[j][1])]
                target_value = predictions[j,e2_idx[j]].item()
                predictions[j, filt] = 0.0
                predictions[j, e2_idx[j]] = target_value

            sort_values, sort_idxs = torch.sort(predictions, dim=1, descending=True)

            sort_idxs = sort_idxs.cpu().numpy()
            for j in range(data_batch.shape[0]):
                rank = np.where(sort_idxs[j]==e2_idx[j].item())[0][0]
                ranks.append(rank+1)
        return float(np.mean(1./np.array(ranks)))  # (port) the printed mean reciprocal rank, returned


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    d = Data(_synthetic_splits(seed), reverse=True)
    # the README's WN18 row of hyperparameters, sizes as listed in the docstring
    self = Experiment(d, num_iterations=500, batch_size=128, learning_rate=0.005, decay_rate=0.995,
                      ent_vec_dim=32, rel_vec_dim=16, cuda=False, input_dropout=0.2, hidden_dropout1=0.1,
                      hidden_dropout2=0.2, label_smoothing=0.1, bug=bug)

    # train_and_eval, up to the epoch loop
    self.entity_idxs = {d.entities[i]:i for i in range(len(d.entities))}
    self.relation_idxs = {d.relations[i]:i for i in range(len(d.relations))}
    train_data_idxs = self.get_data_idxs(d.train_data)
    model = TuckER(d, self.ent_vec_dim, self.rel_vec_dim, bug=bug, **self.kwargs)
    model.init()
    opt = torch.optim.Adam(model.parameters(), lr=self.learning_rate)
    if self.decay_rate:
        scheduler = ExponentialLR(opt, self.decay_rate)
    er_vocab = self.get_er_vocab(train_data_idxs)
    er_vocab_pairs = list(er_vocab.keys())
    st = {"j": 0}

    def train_step():
        if st["j"] == 0:
            model.train()
            np.random.shuffle(er_vocab_pairs)
        j = st["j"]
        data_batch, targets = self.get_batch(er_vocab, er_vocab_pairs, j)
        opt.zero_grad()
        e1_idx = torch.tensor(data_batch[:,0])
        r_idx = torch.tensor(data_batch[:,1])
        predictions = model.forward(e1_idx, r_idx)
        if self.label_smoothing:
            targets = ((1.0-self.label_smoothing)*targets) + (1.0/targets.size(1))
        loss = model.loss(predictions, targets)
        loss.backward()
        opt.step()
        st["j"] = j + self.batch_size
        if st["j"] >= len(er_vocab_pairs):  # the epoch ends
            st["j"] = 0
            if self.decay_rate:
                scheduler.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        if bug != "evaluated_in_train_mode":
            model.eval()
        with torch.no_grad():
            mrr = self.evaluate(model, d.valid_data)
        model.train(was)
        return mrr

    data_batch, targets = self.get_batch(er_vocab, er_vocab_pairs, 0)
    batch = ((torch.tensor(data_batch[:, 0]), torch.tensor(data_batch[:, 1])),
             ((1.0 - self.label_smoothing) * targets) + (1.0 / targets.size(1)))
    return Program(name="tucker_linkpred", model=model, batch=batch, loss_fn=model.loss, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic target misalignment: get_batch marks the head entity of the (head, relation) pair as the target
    # instead of the pair's tails, so the model learns to score the query's own entity.
    Bug("targets_are_head_entity", functools.partial(_build, bug="targets_are_head_entity"), "learning_ledger",
        ("TASK",)),
    # classic: the forward already ends in a sigmoid, and the loss is swapped for BCEWithLogitsLoss, which applies
    # a second sigmoid: the scores live in (0.5, 0.73) and the gradient is squashed.
    Bug("sigmoid_then_bce_with_logits", functools.partial(_build, bug="sigmoid_then_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic eval-mode slip: model.eval() left out before evaluate, so the three dropouts stay on and both
    # batch norms use (and update) the evaluation batch's statistics while ranking.
    Bug("evaluated_in_train_mode", functools.partial(_build, bug="evaluated_in_train_mode"), "six_claims",
        ("EVALUATION",)),
]
