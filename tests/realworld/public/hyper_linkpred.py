"""HypER (hypernetwork knowledge-graph embeddings) trained by ibalazevic/HypER's ``hyper.py``: a hypernetwork
(``fc1``) turns each relation embedding into a set of 1D convolution filters, the subject embedding is convolved with
its own relation's filters (a grouped ``F.conv2d`` over the batch), batch-normed, projected back to the embedding
size and scored against every entity embedding (1-N scoring) plus a per-entity bias; a sigmoid and ``BCELoss``
against the label-smoothed multi-hot of every known object of ``(e1, r)``; reverse relations added by
``Data(reverse=True)``; Adam with ``ExponentialLR`` per epoch; filtered ranking under ``model.eval()`` and
``no_grad`` after every epoch.

Source: https://github.com/ibalazevic/HypER
Commit: 1688b732047ad96cfae120748debb06a2fb7e209
Files: HypER/hyper.py, HypER/models.py, HypER/load_data.py
License: MIT (Copyright (c) 2019 Ivana Balazevic)
Domain: knowledge graphs, link prediction (1-N scoring)

Deviations from the original:
- sizes: ent_vec_dim and rel_vec_dim 200 -> 32, out_channels 32 -> 8 (filt_h 1, filt_w 9 kept, so ``fc`` takes
  1 x 24 x 8 features), batch_size 128 -> 64; lr 0.001 -> 0.005 (30 steps here are a few epochs, not 800);
  decay_rate 0.99, the three dropouts (0.2, 0.3, 0.2) and label_smoothing 0.1 kept;
- data: FB15k-237's text files are replaced by synthetic triples made from ``seed`` (entity and relation names are
  strings, as read from the files): 60 entities in 6 groups of 10, 4 relations, each moving an entity's group by a
  shift and its slot by a permutation drawn from ``seed``; a fifth of the triples held out as valid and test;
  ``Data.load_data`` reads these lists instead of files and adds the ``_reverse`` triples as written;
- ``get_batch`` and ``evaluate`` read the module-level ``d`` of the script: here it is ``self.d``; ``evaluate``
  returns the mean reciprocal rank instead of printing hits and ranks; only the ``HypER`` model is copied;
- no CUDA; one ``train_step`` is one batch of ``train_and_eval``'s epoch loop; an epoch's end steps the scheduler
  and runs ``evaluate`` on the valid triples under ``eval()`` and ``no_grad``, then ``model.train()`` at the next
  epoch's start as written; ``eval_fn`` is the (unfiltered) MRR of a given batch's known objects under ``eval()``.
"""
# ruff: noqa: UP008, C403, C414, UP031, PLR1704, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import defaultdict

import numpy as np
import torch
from torch.nn import Parameter
from torch.nn import functional as F
from torch.nn.init import xavier_normal_
from torch.optim.lr_scheduler import ExponentialLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_GROUPS, N_SLOTS, N_REL = 6, 10, 4


# ---- load_data.py ---------------------------------------------------------------------------------------------

class Data:

    def __init__(self, splits, reverse=False, bug=None):
        self.bug = bug
        self.train_data = self.load_data(splits, "train", reverse=reverse)
        self.valid_data = self.load_data(splits, "valid", reverse=reverse)
        self.test_data = self.load_data(splits, "test", reverse=reverse)
        self.data = self.train_data + self.valid_data + self.test_data
        self.entities = self.get_entities(self.data)
        self.train_relations = self.get_relations(self.train_data)
        self.valid_relations = self.get_relations(self.valid_data)
        self.test_relations = self.get_relations(self.test_data)
        self.relations = self.train_relations + [i for i in self.valid_relations \
                if i not in self.train_relations] + [i for i in self.test_relations \
                if i not in self.train_relations]

    def load_data(self, splits, data_type="train", reverse=False):
        data = [list(t) for t in splits[data_type]]  # the file's lines, split
        if reverse:
            if self.bug == "reverse_relation_not_renamed":
                data += [[i[2], i[1], i[0]] for i in data]
            else:
                data += [[i[2], i[1]+"_reverse", i[0]] for i in data]
        return data

    def get_relations(self, data):
        relations = sorted(list(set([d[1] for d in data])))
        return relations

    def get_entities(self, data):
        entities = sorted(list(set([d[0] for d in data]+[d[2] for d in data])))
        return entities


# ---- models.py (HypER) ----------------------------------------------------------------------------------------

class HypER(torch.nn.Module):
    def __init__(self, d, d1, d2, bug=None, **kwargs):
        super(HypER, self).__init__()
        self.in_channels = kwargs["in_channels"]
        self.out_channels = kwargs["out_channels"]
        self.filt_h = kwargs["filt_h"]
        self.filt_w = kwargs["filt_w"]
        self.bug = bug

        self.E = torch.nn.Embedding(len(d.entities), d1, padding_idx=0)
        self.R = torch.nn.Embedding(len(d.relations), d2, padding_idx=0)
        self.inp_drop = torch.nn.Dropout(kwargs["input_dropout"])
        self.hidden_drop = torch.nn.Dropout(kwargs["hidden_dropout"])
        self.feature_map_drop = torch.nn.Dropout2d(kwargs["feature_map_dropout"])
        self.loss = torch.nn.BCELoss()

        self.bn0 = torch.nn.BatchNorm2d(self.in_channels)
        self.bn1 = torch.nn.BatchNorm2d(self.out_channels)
        self.bn2 = torch.nn.BatchNorm1d(d1)
        self.register_parameter('b', Parameter(torch.zeros(len(d.entities))))
        fc_length = (1-self.filt_h+1)*(d1-self.filt_w+1)*self.out_channels
        self.fc = torch.nn.Linear(fc_length, d1)
        fc1_length = self.in_channels*self.out_channels*self.filt_h*self.filt_w
        self.fc1 = torch.nn.Linear(d2, fc1_length)


    def init(self):
        xavier_normal_(self.E.weight.data)
        xavier_normal_(self.R.weight.data)


    def forward(self, e1_idx, r_idx):
        e1 = self.E(e1_idx).view(-1, 1, 1, self.E.weight.size(1))
        r = self.R(r_idx)
        x = self.bn0(e1)
        x = self.inp_drop(x)

        k = self.fc1(r)
        if self.bug == "relation_filters_detached":
            k = k.detach()
        k = k.view(-1, self.in_channels, self.out_channels, self.filt_h, self.filt_w)
        k = k.view(e1.size(0)*self.in_channels*self.out_channels, 1, self.filt_h, self.filt_w)

        x = x.permute(1, 0, 2, 3)

        x = F.conv2d(x, k, groups=e1.size(0))
        x = x.view(e1.size(0), 1, self.out_channels, 1-self.filt_h+1, e1.size(3)-self.filt_w+1)
        x = x.permute(0, 3, 4, 1, 2)
        x = torch.sum(x, dim=3)
        x = x.permute(0, 3, 1, 2).contiguous()

        x = self.bn1(x)
        x = self.feature_map_drop(x)
        x = x.view(e1.size(0), -1)
        x = self.fc(x)
        x = self.hidden_drop(x)
        x = self.bn2(x)
        x = F.relu(x)
        x = torch.mm(x, self.E.weight.transpose(1,0))
        x += self.b.expand_as(x)
        pred = F.sigmoid(x)
        return pred


# ---- hyper.py (Experiment) ------------------------------------------------------------------------------------

class Experiment:

    def __init__(self, model_name, d, learning_rate=0.001, ent_vec_dim=200, rel_vec_dim=200,
                 num_iterations=100, batch_size=128, decay_rate=0., cuda=False,
                 input_dropout=0., hidden_dropout=0., feature_map_dropout=0.,
                 in_channels=1, out_channels=32, filt_h=3, filt_w=3, label_smoothing=0., bug=None):
        self.model_name = model_name
        self.d = d
        self.learning_rate = learning_rate
        self.ent_vec_dim = ent_vec_dim
        self.rel_vec_dim = rel_vec_dim
        self.num_iterations = num_iterations
        self.batch_size = batch_size
        self.decay_rate = decay_rate
        self.label_smoothing = label_smoothing
        self.cuda = cuda
        self.bug = bug
        self.kwargs = {"input_dropout": input_dropout, "hidden_dropout": hidden_dropout,
                       "feature_map_dropout": feature_map_dropout, "in_channels":in_channels,
                       "out_channels": out_channels, "filt_h": filt_h, "filt_w": filt_w}

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
        batch = er_vocab_pairs[idx:min(idx+self.batch_size, len(er_vocab_pairs))]
        targets = np.zeros((len(batch), len(self.d.entities)))
        for idx, pair in enumerate(batch):
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
                rank = np.where(sort_idxs[j]==e2_idx[j])[0][0]
                ranks.append(rank+1)
        return float(np.mean(1./np.array(ranks)))

    def setup(self):
        """`train_and_eval` up to its epoch loop."""
        d = self.d
        self.entity_idxs = {d.entities[i]:i for i in range(len(d.entities))}
        self.relation_idxs = {d.relations[i]:i for i in range(len(d.relations))}
        train_data_idxs = self.get_data_idxs(d.train_data)

        model = HypER(d, self.ent_vec_dim, self.rel_vec_dim, bug=self.bug, **self.kwargs)
        model.init()
        opt = torch.optim.Adam(model.parameters(), lr=self.learning_rate)
        if self.decay_rate:
            scheduler = ExponentialLR(opt, self.decay_rate)

        er_vocab = self.get_er_vocab(train_data_idxs)
        er_vocab_pairs = list(er_vocab.keys())
        self.model, self.opt, self.scheduler = model, opt, scheduler
        self.er_vocab, self.er_vocab_pairs = er_vocab, er_vocab_pairs
        self.j, self.mrr = None, []

    def train_batch(self):
        """One batch of `train_and_eval`'s `for it in range(1, self.num_iterations+1)` loop."""
        model, opt, er_vocab, er_vocab_pairs = self.model, self.opt, self.er_vocab, self.er_vocab_pairs
        if self.j is None:
            model.train()
            np.random.shuffle(er_vocab_pairs)
            self.j = 0
        j = self.j
        data_batch, targets = self.get_batch(er_vocab, er_vocab_pairs, j)
        if self.bug != "zero_grad_dropped":
            opt.zero_grad()
        e1_idx = torch.tensor(data_batch[:,0])
        r_idx = torch.tensor(data_batch[:,1])
        predictions = model.forward(e1_idx, r_idx)
        if self.label_smoothing:
            targets = ((1.0-self.label_smoothing)*targets) + (1.0/targets.size(1))
        loss = model.loss(predictions, targets)
        loss.backward()
        opt.step()
        self.j = j + self.batch_size
        if self.j >= len(er_vocab_pairs):
            self.j = None
            if self.decay_rate:
                self.scheduler.step()
            model.eval()
            with torch.no_grad():
                self.mrr.append(self.evaluate(model, self.d.valid_data))
        return loss.detach()


def make_splits(seed):
    """Synthetic triples as the files hold them (strings): entity `/e/<group>_<slot>`, relation `/r/<k>` moves the
    group by a shift and the slot by a permutation drawn from ``seed``."""
    g = np.random.RandomState(seed)
    shifts, perms = g.randint(1, N_GROUPS, size=N_REL), [g.permutation(N_SLOTS) for _ in range(N_REL)]
    triples = []
    for r in range(N_REL):
        for c in range(N_GROUPS):
            for s in range(N_SLOTS):
                triples.append(("/e/%d_%d" % (c, s), "/r/%d" % r, "/e/%d_%d" % ((c + shifts[r]) % N_GROUPS, perms[r][s])))
    g.shuffle(triples)
    n = len(triples) // 10
    return {"train": triples[2 * n:], "valid": triples[:n], "test": triples[n:2 * n]}


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    d = Data(make_splits(seed), reverse=True, bug=bug)
    experiment = Experiment("HypER", d, num_iterations=800, batch_size=64, learning_rate=0.005,
                            decay_rate=0.99, ent_vec_dim=32, rel_vec_dim=32, cuda=False,
                            input_dropout=0.2, hidden_dropout=0.3, feature_map_dropout=0.2,
                            in_channels=1, out_channels=8, filt_h=1, filt_w=9, label_smoothing=0.1, bug=bug)
    experiment.setup()
    model = experiment.model

    pairs = sorted(experiment.er_vocab_pairs)[:experiment.batch_size]
    data_batch, targets = experiment.get_batch(experiment.er_vocab, pairs, 0)
    e1_idx, r_idx = torch.tensor(data_batch[:, 0]), torch.tensor(data_batch[:, 1])
    batch = ((e1_idx, r_idx), ((1.0 - experiment.label_smoothing) * targets) + (1.0 / targets.size(1)))

    def eval_fn(model, batch):
        """evaluate's mean reciprocal rank on a given batch: the rank of each row's best-scored known object."""
        (e1_idx, r_idx), targets = batch
        was = model.training
        model.eval()
        with torch.no_grad():
            predictions = model.forward(e1_idx, r_idx)
        model.train(was)
        target_value = predictions.masked_fill(targets < 0.5, -1.0).max(1, keepdim=True).values
        ranks = 1 + (predictions > target_value).sum(1).float()
        return float((1.0 / ranks).mean())

    return Program(name="hyper_linkpred", model=model, batch=batch, loss_fn=model.loss, optimizer=experiment.opt,
                   train_step=experiment.train_batch, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the relation filters detached from the hypernetwork: fc1 and the relation embeddings never learn, every
    # relation convolves with the random filters fc1 started with.
    Bug("relation_filters_detached", functools.partial(_build, bug="relation_filters_detached"), "reachability",
        ("fc1",)),
    # the reverse triples added under the forward relation's own name (the `+"_reverse"` left out): (e2, r) now
    # also asks for e1, so every relation's targets mix its objects with its subjects.
    Bug("reverse_relation_not_renamed", functools.partial(_build, bug="reverse_relation_not_renamed"),
        "learning_ledger", ("TASK",)),
    # opt.zero_grad() left out of the batch loop: every step applies the sum of all gradients so far.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
