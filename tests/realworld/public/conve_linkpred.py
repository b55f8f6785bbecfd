"""ConvE (convolutional 2D knowledge-graph embeddings) trained by TimDettmers/ConvE's ``main.py``: the subject and
relation embeddings reshaped to 2D, stacked, batch-normed, convolved, projected back to the embedding size and
scored against every entity embedding (1-N scoring) plus a per-entity bias, a sigmoid and ``BCELoss`` against the
label-smoothed multi-hot of every known object of ``(e1, rel)``; reverse relations added as in ``wrangle_KG.py``;
Adam; filtered ranking under ``model.eval()`` and ``no_grad`` after the epoch (``evaluation.py``).

Source: https://github.com/TimDettmers/ConvE
Commit: f3c0eb286025410fa5b4c04696c918264163d0ca
Files: main.py, model.py, evaluation.py, wrangle_KG.py
License: MIT (Copyright (c) 2017 Tim Dettmers)
Domain: graphs, knowledge-graph link prediction (1-N scoring)

Deviations from the original:
- sizes: embedding_dim 200 -> 32, embedding_shape1 20 -> 4 (2D embeddings 4x8, stacked 8x8), hidden_size
  9728 -> 1152 (32 channels x 6 x 6, as the README explains to set it), batch size 128 kept, lr 0.003 kept;
  dropouts, label smoothing 0.1 and the other argparse defaults kept (``--use-bias`` off, as the default);
- data: FB15k-237 and spodernet's pipeline are replaced by a synthetic graph made from ``seed``: 80 entities
  in 8 groups of 10 (index 0 kept as spodernet's padding token, padding_idx=0), 4 relations, each moving an
  entity's group by a shift and its slot by a permutation drawn from ``seed``, every triple also added reversed
  (``rel_reverse``) as ``wrangle_KG.py`` does; the batcher (randomized, ``TargetIdx2MultiTarget``) is a shuffled pass over the
  ``(e1, rel) -> {e2}`` keys with a multi-hot built per batch;
- the label smoothing line is copied as written, ``+ 1.0/e2_multi.size(1)`` (issue #55 notes it should be
  ``label_smoothing/size(1)``; kept because it is what the program runs);
- no CUDA, no checkpoint file; one ``train_step`` is one batch of the epoch loop, an epoch's end runs the ranking
  (``ranking_and_hits``: filtered ranks of both directions, MRR) on a held-out fifth of the triples; ``eval_fn``
  is the (unfiltered) MRR of a given batch's known objects under ``eval()`` and ``no_grad``; only the ``conve``
  model is copied.
"""
# ruff: noqa: UP008, C408

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn import Parameter
from torch.nn import functional as F
from torch.nn.init import xavier_normal_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_GROUPS, N_SLOTS, N_REL = 8, 10, 4
N_ENT = 1 + N_GROUPS * N_SLOTS
ARGS = dict(batch_size=128, test_batch_size=128, lr=0.003, l2=0.0, embedding_dim=32, embedding_shape1=4,
            hidden_drop=0.3, input_drop=0.2, feat_drop=0.2, use_bias=False, label_smoothing=0.1, hidden_size=1152)


# ---- model.py (ConvE) ---------------------------------------------------------------------------------------------

class ConvE(torch.nn.Module):
    def __init__(self, args, num_entities, num_relations):
        super(ConvE, self).__init__()
        self.emb_e = torch.nn.Embedding(num_entities, args.embedding_dim, padding_idx=0)
        self.emb_rel = torch.nn.Embedding(num_relations, args.embedding_dim, padding_idx=0)
        self.inp_drop = torch.nn.Dropout(args.input_drop)
        self.hidden_drop = torch.nn.Dropout(args.hidden_drop)
        self.feature_map_drop = torch.nn.Dropout2d(args.feat_drop)
        self.loss = torch.nn.BCELoss()
        self.emb_dim1 = args.embedding_shape1
        self.emb_dim2 = args.embedding_dim // self.emb_dim1

        self.conv1 = torch.nn.Conv2d(1, 32, (3, 3), 1, 0, bias=args.use_bias)
        self.bn0 = torch.nn.BatchNorm2d(1)
        self.bn1 = torch.nn.BatchNorm2d(32)
        self.bn2 = torch.nn.BatchNorm1d(args.embedding_dim)
        self.register_parameter('b', Parameter(torch.zeros(num_entities)))
        self.fc = torch.nn.Linear(args.hidden_size,args.embedding_dim)

    def init(self):
        xavier_normal_(self.emb_e.weight.data)
        xavier_normal_(self.emb_rel.weight.data)

    def forward(self, e1, rel):
        e1_embedded= self.emb_e(e1).view(-1, 1, self.emb_dim1, self.emb_dim2)
        rel_embedded = self.emb_rel(rel).view(-1, 1, self.emb_dim1, self.emb_dim2)

        stacked_inputs = torch.cat([e1_embedded, rel_embedded], 2)

        stacked_inputs = self.bn0(stacked_inputs)
        x= self.inp_drop(stacked_inputs)
        x= self.conv1(x)
        x= self.bn1(x)
        x= F.relu(x)
        x = self.feature_map_drop(x)
        x = x.view(x.shape[0], -1)
        x = self.fc(x)
        x = self.hidden_drop(x)
        x = self.bn2(x)
        x = F.relu(x)
        x = torch.mm(x, self.emb_e.weight.transpose(1,0))
        x += self.b.expand_as(x)
        pred = torch.sigmoid(x)

        return pred


# ---- wrangle_KG.py and the batcher, on a synthetic graph -------------------------------------------------------

def make_graph(seed):
    """Triples (e1, rel, e2) over entities 1..N_ENT-1 and relations 1..N_REL (0 is padding); reverse relation of
    r is r + N_REL. An entity is a (group, slot) pair; relation r moves the group by a shift drawn from ``seed`` and
    the slot by a permutation drawn from ``seed``, so a held-out triple follows from the entity's other triples.
    Returns the train and test triples and the full label graph (both directions)."""
    g = np.random.RandomState(seed)
    shifts, perms = g.randint(1, N_GROUPS, size=N_REL + 1), [g.permutation(N_SLOTS) for _ in range(N_REL + 1)]
    triples = []
    for r in range(1, N_REL + 1):
        for c in range(N_GROUPS):
            for s in range(N_SLOTS):
                triples.append((1 + c * N_SLOTS + s, r, 1 + (c + shifts[r]) % N_GROUPS * N_SLOTS + perms[r][s]))
    g.shuffle(triples)
    n_test = len(triples) // 5
    label_graph = {}
    for e1, r, e2 in triples:
        label_graph.setdefault((e1, r), set()).add(e2)
        label_graph.setdefault((e2, r + N_REL), set()).add(e1)
    return triples[n_test:], triples[:n_test], label_graph


def train_keys(train):
    graph = {}
    for e1, r, e2 in train:
        graph.setdefault((e1, r), set()).add(e2)
        graph.setdefault((e2, r + N_REL), set()).add(e1)
    return sorted(graph.items())


def multi_hot(targets, num_entities):
    """spodernet's TargetIdx2MultiTarget: the indices of the known objects to a binary [batch, entities]."""
    out = torch.zeros(len(targets), num_entities)
    for i, t in enumerate(targets):
        out[i, list(t)] = 1.0
    return out


# ---- evaluation.py (ranking_and_hits, MRR part) -------------------------------------------------------------------

def ranking_mrr(model, triples, label_graph):
    e1 = torch.tensor([t[0] for t in triples]).view(-1, 1)
    rel = torch.tensor([t[1] for t in triples]).view(-1, 1)
    e2 = torch.tensor([t[2] for t in triples]).view(-1, 1)
    rel_reverse = rel + N_REL
    pred1 = model.forward(e1, rel).data
    pred2 = model.forward(e2, rel_reverse).data
    ranks = []
    for i in range(e1.shape[0]):
        filter1 = list(label_graph[(e1[i, 0].item(), rel[i, 0].item())])
        filter2 = list(label_graph[(e2[i, 0].item(), rel_reverse[i, 0].item())])
        target_value1 = pred1[i, e2[i, 0].item()].item()
        target_value2 = pred2[i, e1[i, 0].item()].item()
        pred1[i][filter1] = 0.0
        pred2[i][filter2] = 0.0
        pred1[i][e2[i]] = target_value1
        pred2[i][e1[i]] = target_value2
    _, argsort1 = torch.sort(pred1, 1, descending=True)
    _, argsort2 = torch.sort(pred2, 1, descending=True)
    argsort1, argsort2 = argsort1.cpu().numpy(), argsort2.cpu().numpy()
    for i in range(e1.shape[0]):
        rank1 = np.where(argsort1[i] == e2[i, 0].item())[0][0]
        rank2 = np.where(argsort2[i] == e1[i, 0].item())[0][0]
        ranks.append(rank1 + 1)
        ranks.append(rank2 + 1)
    return float(np.mean(1. / np.array(ranks)))


# ---- main.py ------------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = SimpleNamespace(**ARGS)
    train, test, label_graph = make_graph(seed)
    keys = train_keys(train)
    num_entities = N_ENT
    model = ConvE(args, num_entities, 2 * N_REL + 1)
    model.init()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.l2)
    rng = np.random.RandomState(seed)

    def batch_of(idx):
        e1 = torch.tensor([keys[i][0][0] for i in idx]).view(-1, 1)
        rel = torch.tensor([keys[i][0][1] for i in idx]).view(-1, 1)
        if bug == "targets_from_subject":
            e2_multi = multi_hot([{keys[i][0][0]} for i in idx], num_entities)  # the subject's own index
        else:
            e2_multi = multi_hot([keys[i][1] for i in idx], num_entities)
        return e1, rel, e2_multi

    state = {"order": None, "pos": 0, "epoch": 0, "mrr": []}

    def train_step():
        if state["order"] is None:
            model.train()
            state["order"], state["pos"] = rng.permutation(len(keys)), 0
        idx = state["order"][state["pos"]:state["pos"] + args.batch_size]
        state["pos"] += args.batch_size
        if bug != "zero_grad_dropped":
            opt.zero_grad()
        e1, rel, e2_multi = batch_of(idx)
        # label smoothing
        e2_multi = ((1.0-args.label_smoothing)*e2_multi) + (1.0/e2_multi.size(1))

        pred = model.forward(e1, rel)
        loss = model.loss(pred, e2_multi)
        loss.backward()
        opt.step()
        if state["pos"] >= len(keys):
            state["order"], state["epoch"] = None, state["epoch"] + 1
            if bug != "eval_mode_not_set":
                model.eval()
            with torch.no_grad():
                state["mrr"].append(ranking_mrr(model, test, label_graph))
        return loss.detach()

    e1, rel, e2_multi = batch_of(np.arange(args.batch_size))
    batch = ((e1, rel), ((1.0 - args.label_smoothing) * e2_multi) + (1.0 / e2_multi.size(1)))

    def eval_fn(model, batch):
        """ranking_and_hits' mean reciprocal rank, on a given batch: the rank of each row's best-scored known object."""
        (e1, rel), e2_multi = batch
        was = model.training
        if bug != "eval_mode_not_set":
            model.eval()
        with torch.no_grad():
            pred = model.forward(e1, rel)
        model.train(was)
        target_value = pred.masked_fill(e2_multi < 0.5, -1.0).max(1, keepdim=True).values
        ranks = 1 + (pred > target_value).sum(1).float()
        return float((1.0 / ranks).mean())

    return Program(name="conve_linkpred", model=model, batch=batch, loss_fn=model.loss, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the multi-hot targets built from the batch's subjects instead of their known objects: the model learns to
    # score the subject itself.
    Bug("targets_from_subject", functools.partial(_build, bug="targets_from_subject"), "learning_ledger",
        ("TASK",)),
    # the ranking run without model.eval(): input, feature-map and hidden dropout stay on and the three batch norms
    # use (and update) the evaluation batch's statistics, so the reported MRR is not the trained model's.
    Bug("eval_mode_not_set", functools.partial(_build, bug="eval_mode_not_set"), "six_claims", ("EVALUATION",)),
    # opt.zero_grad() left out of the batch loop: every step applies the sum of all gradients so far.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
