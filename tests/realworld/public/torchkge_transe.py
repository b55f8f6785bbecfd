"""TransE trained with TorchKGE as its tutorial "Simplest training" does it: entity and relation embeddings
(Xavier uniform, entities L2-normalized at init and the relations once), the score ``-||h + r - t||_2^2`` on
normalized head and tail embeddings, one Bernoulli-corrupted negative per fact (head or tail replaced, the side drawn
with the relation's tails-per-head / heads-per-tail ratio), ``MarginLoss`` (``MarginRankingLoss`` summed, margin
0.5), Adam(lr 4e-4, weight decay 1e-5) over the model, minibatches of the facts in their stored order, and
``model.normalize_parameters()`` after training.

Source: https://github.com/torchkge-team/torchkge
Commit: 3adb9344dec974fc29d158025c014b0dcb48118c
Files: docs/tutorials/transe.rst (the training script), torchkge/models/translation.py (TransEModel),
       torchkge/models/interfaces.py (Model.forward, TranslationModel), torchkge/utils/dissimilarities.py,
       torchkge/utils/modeling.py (init_embedding), torchkge/utils/losses.py (MarginLoss),
       torchkge/sampling.py (NegativeSampler, BernoulliNegativeSampler), torchkge/utils/operations.py
       (get_bernoulli_probs, get_tph, get_hpt), torchkge/utils/data.py (DataLoader)
License: BSD-3-Clause (Copyright (c) 2022, TorchKGE developers)
Domain: knowledge graphs, link prediction (translational embeddings, negative sampling)

Deviations from the original:
- sizes: emb_dim 100 -> 32, b_size 32768 -> 128 (FB15k's 483k facts -> 360 here); lr, weight decay, margin,
  the L2 dissimilarity and one negative per fact kept;
- data: ``load_fb15k()`` is replaced by a synthetic graph made from ``seed``: 80 entities in 8 groups of 10,
  6 relations, each moving an entity's group by a shift and its slot by a permutation drawn from ``seed``, 60 facts
  per relation, stored in a shuffled order; ``KnowledgeGraph`` is replaced by the four fields the script and the
  sampler read (``head_idx``, ``tail_idx``, ``relations``, ``n_ent`` / ``n_rel`` / ``n_facts``);
- ``get_tph`` / ``get_hpt`` count with numpy instead of a pandas ``groupby`` (same numbers: the mean number of
  tails per (head, relation) and of heads per (relation, tail), per relation);
- no CUDA, no tqdm; only the L2 dissimilarity and the TransE model are kept; ``inference_prepare_candidates`` and
  the evaluation helpers are left out; one ``train_step`` is one batch of the epoch loop (a new epoch restarts the
  loader, which does not shuffle, as written); ``normalize_parameters`` runs once after training in the script, so
  not here; ``eval_fn`` is the fraction of a given batch's facts scored above their corrupted copies, under
  ``no_grad``.
"""

# ruff: noqa: SIM118  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import bernoulli, ones_like, randint, tensor
from torch.nn import Embedding, MarginRankingLoss, Module
from torch.nn.functional import normalize
from torch.nn.init import xavier_uniform_
from torch.optim import Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_GROUPS, N_SLOTS, N_REL, FACTS_PER_REL = 8, 10, 6, 60


# ---- torchkge/utils/dissimilarities.py, modeling.py, losses.py -------------------------------------------------

def l2_dissimilarity(a, b):
    assert len(a.shape) == len(b.shape)
    return (a-b).norm(p=2, dim=-1)**2


def init_embedding(n_vectors, dim):
    entity_embeddings = Embedding(n_vectors, dim)
    xavier_uniform_(entity_embeddings.weight.data)

    return entity_embeddings


class MarginLoss(Module):
    def __init__(self, margin):
        super().__init__()
        self.loss = MarginRankingLoss(margin=margin, reduction='sum')

    def forward(self, positive_triplets, negative_triplets):
        return self.loss(positive_triplets, negative_triplets,
                         target=ones_like(positive_triplets))


# ---- torchkge/models/interfaces.py, translation.py -------------------------------------------------------------

class Model(Module):
    def __init__(self, n_entities, n_relations):
        super().__init__()
        self.n_ent = n_entities
        self.n_rel = n_relations

    def forward(self, heads, tails, relations, negative_heads, negative_tails, negative_relations=None):
        pos = self.scoring_function(heads, tails, relations)

        if negative_relations is None:
            negative_relations = relations

        if negative_heads.shape[0] > negative_relations.shape[0]:
            # in that case, several negative samples are sampled from each fact
            n_neg = int(negative_heads.shape[0] / negative_relations.shape[0])
            pos = pos.repeat(n_neg)
            neg = self.scoring_function(negative_heads,
                                        negative_tails,
                                        negative_relations.repeat(n_neg))
        else:
            neg = self.scoring_function(negative_heads,
                                        negative_tails,
                                        negative_relations)

        return pos, neg


class TranslationModel(Model):
    def __init__(self, n_entities, n_relations, dissimilarity_type):
        super().__init__(n_entities, n_relations)

        assert dissimilarity_type in ['L2']
        if dissimilarity_type == 'L2':
            self.dissimilarity = l2_dissimilarity


class TransEModel(TranslationModel):
    def __init__(self, emb_dim, n_entities, n_relations, dissimilarity_type='L2'):

        super().__init__(n_entities, n_relations, dissimilarity_type)

        self.emb_dim = emb_dim
        self.ent_emb = init_embedding(self.n_ent, self.emb_dim)
        self.rel_emb = init_embedding(self.n_rel, self.emb_dim)

        self.normalize_parameters()
        self.rel_emb.weight.data = normalize(self.rel_emb.weight.data, p=2, dim=1)

    def scoring_function(self, h_idx, t_idx, r_idx):
        h = normalize(self.ent_emb(h_idx), p=2, dim=1)
        t = normalize(self.ent_emb(t_idx), p=2, dim=1)
        r = self.rel_emb(r_idx)

        return - self.dissimilarity(h + r, t)

    def normalize_parameters(self):
        self.ent_emb.weight.data = normalize(self.ent_emb.weight.data,
                                             p=2, dim=1)


# ---- torchkge/utils/operations.py (pandas groupby counted with numpy) ------------------------------------------

def _mean_count_per_rel(key, rel):
    pairs = np.unique(np.stack([key, rel], 1), axis=0, return_counts=True)
    out = {}
    for (_, r), c in zip(pairs[0], pairs[1]):
        out.setdefault(int(r), []).append(c)
    return {r: float(np.mean(v)) for r, v in out.items()}


def get_tph(t):
    t = t.numpy()
    return _mean_count_per_rel(t[:, 0], t[:, 2])


def get_hpt(t):
    t = t.numpy()
    return _mean_count_per_rel(t[:, 1], t[:, 2])


def get_bernoulli_probs(kg):
    t = torch.cat((kg.head_idx.view(-1, 1),
                   kg.tail_idx.view(-1, 1),
                   kg.relations.view(-1, 1)), dim=1)

    hpt = get_hpt(t)
    tph = get_tph(t)

    assert hpt.keys() == tph.keys()

    for k in tph.keys():
        tph[k] = tph[k] / (tph[k] + hpt[k])

    return tph


# ---- torchkge/sampling.py --------------------------------------------------------------------------------------

class NegativeSampler:
    def __init__(self, kg, kg_val=None, kg_test=None, n_neg=1):
        self.kg = kg
        self.n_ent = kg.n_ent
        self.n_facts = kg.n_facts

        self.kg_val = kg_val
        self.kg_test = kg_test

        self.n_neg = n_neg


class BernoulliNegativeSampler(NegativeSampler):
    def __init__(self, kg, kg_val=None, kg_test=None, n_neg=1):
        super().__init__(kg, kg_val, kg_test, n_neg)
        self.bern_probs = self.evaluate_probabilities()

    def evaluate_probabilities(self):
        bern_probs = get_bernoulli_probs(self.kg)

        tmp = []
        for i in range(self.kg.n_rel):
            if i in bern_probs.keys():
                tmp.append(bern_probs[i])
            else:
                tmp.append(0.5)

        return tensor(tmp).float()

    def corrupt_batch(self, heads, tails, relations, n_neg=None):
        if n_neg is None:
            n_neg = self.n_neg

        device = heads.device
        assert (device == tails.device)

        batch_size = heads.shape[0]
        neg_heads = heads.repeat(n_neg)
        neg_tails = tails.repeat(n_neg)

        # Randomly choose which samples will have head/tail corrupted
        self.bern_probs = self.bern_probs.to(device)
        mask = bernoulli(self.bern_probs[relations].repeat(n_neg)).double()
        n_h_cor = int(mask.sum().item())
        neg_heads[mask == 1] = randint(1, self.n_ent,
                                       (n_h_cor,),
                                       device=device)
        neg_tails[mask == 0] = randint(1, self.n_ent,
                                       (batch_size * n_neg - n_h_cor,),
                                       device=device)

        return neg_heads.long(), neg_tails.long()


# ---- torchkge/utils/data.py ------------------------------------------------------------------------------------

class DataLoader:
    def __init__(self, kg, batch_size, use_cuda=None):
        self.h = kg.head_idx
        self.t = kg.tail_idx
        self.r = kg.relations
        self.batch_size = batch_size

    def __len__(self):
        return (len(self.h) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        for i in range(len(self)):
            yield (self.h[i * self.batch_size: (i + 1) * self.batch_size],
                   self.t[i * self.batch_size: (i + 1) * self.batch_size],
                   self.r[i * self.batch_size: (i + 1) * self.batch_size])


class _KG:
    def __init__(self, heads, tails, relations, n_ent, n_rel):
        self.head_idx, self.tail_idx, self.relations = heads, tails, relations
        self.n_ent, self.n_rel, self.n_facts = n_ent, n_rel, len(heads)


def make_kg(seed):
    g = np.random.RandomState(seed)
    shifts = g.randint(1, N_GROUPS, size=N_REL)
    perms = [g.permutation(N_SLOTS) for _ in range(N_REL)]
    facts = []
    for r in range(N_REL):
        for e in g.choice(N_GROUPS * N_SLOTS, FACTS_PER_REL, replace=False):
            c, s = divmod(int(e), N_SLOTS)
            facts.append((e, ((c + shifts[r]) % N_GROUPS) * N_SLOTS + perms[r][s], r))
    facts = np.array(sorted(set(facts)))
    facts = facts[g.permutation(len(facts))]
    t = torch.from_numpy(facts).long()
    return _KG(t[:, 0].clone(), t[:, 1].clone(), t[:, 2].clone(), N_GROUPS * N_SLOTS, N_REL)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    kg_train = make_kg(seed)

    # Define some hyper-parameters for training
    emb_dim = 32
    lr = 0.0004
    b_size = 128
    margin = 0.5

    # Define the model and criterion
    model = TransEModel(emb_dim, kg_train.n_ent, kg_train.n_rel, dissimilarity_type='L2')
    criterion = MarginLoss(margin)

    # Define the torch optimizer to be used
    if bug == "optimizer_over_entities_only":
        optimizer = Adam(model.ent_emb.parameters(), lr=lr, weight_decay=1e-5)
    else:
        optimizer = Adam(model.parameters(), lr=lr, weight_decay=1e-5)

    sampler = BernoulliNegativeSampler(kg_train)
    dataloader = DataLoader(kg_train, batch_size=b_size, use_cuda='all')

    def batches():
        while True:  # for epoch in iterator:
            for i, batch in enumerate(dataloader):
                yield batch

    loader = batches()

    def train_step():
        batch = next(loader)
        h, t, r = batch[0], batch[1], batch[2]
        n_h, n_t = sampler.corrupt_batch(h, t, r)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        # forward + backward + optimize
        pos, neg = model(h, t, r, n_h, n_t)
        if bug == "margin_loss_arguments_swapped":
            loss = criterion(neg, pos)
        else:
            loss = criterion(pos, neg)
        loss.backward()
        optimizer.step()
        return loss.detach()

    h, t, r = kg_train.head_idx[:b_size], kg_train.tail_idx[:b_size], kg_train.relations[:b_size]
    n_h, n_t = BernoulliNegativeSampler(kg_train).corrupt_batch(h, t, r)
    batch = ((h, t, r, n_h, n_t), None)

    def loss_fn(scores, _targets):
        pos, neg = scores
        if bug == "margin_loss_arguments_swapped":
            return criterion(neg, pos)
        return criterion(pos, neg)

    def eval_fn(model, batch):
        inputs, _ = batch
        with torch.no_grad():
            pos, neg = model(*inputs)
        return float((pos > neg).float().mean())

    return Program(name="torchkge_transe", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # MarginLoss called as criterion(neg, pos): the ranking loss now asks the corrupted facts to score a margin
    # above the true ones.
    Bug("margin_loss_arguments_swapped", functools.partial(_build, bug="margin_loss_arguments_swapped"),
        "learning_ledger", ("OBJECTIVE",)),
    # Adam built over the entity embeddings only: the relation translations stay at their random initialization.
    Bug("optimizer_over_entities_only", functools.partial(_build, bug="optimizer_over_entities_only"),
        "four_structures", ("rel_emb",)),
    # optimizer.zero_grad() left out of the batch loop: every step applies the sum of all gradients so far.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
