"""RotatE knowledge-graph embedding trained by DeepGraphLearning/KnowledgeGraphEmbedding's ``codes/run.py``:
``KGEModel`` (entity embeddings of twice the hidden size read as complex numbers, relation embeddings read as phases,
score ``gamma - |h o r - t|``), ``TrainDataset`` drawing filtered negative heads or tails per positive triple with the
word2vec-like subsampling weight, ``BidirectionalOneShotIterator`` alternating head-batch and tail-batch, the static
``train_step`` (self-adversarial negative sampling with the softmax weights detached, ``logsigmoid`` losses on
positive and negative scores, subsampling-weighted means), Adam rebuilt at a tenth of the rate at ``warm_up_steps``
(which then triples), and the filtered MRR of ``test_step``.

Source: https://github.com/DeepGraphLearning/KnowledgeGraphEmbedding
Commit: 2e440e0f9c687314d5ff67ead68ce985dc446e3a
Files: codes/model.py, codes/dataloader.py, codes/run.py, run.sh, best_config.sh
License: MIT (Copyright (c) 2019 Edward-Sun)
Domain: graphs, knowledge-graph link prediction (RotatE, self-adversarial negative sampling)

Deviations from the original:
- sizes: best_config.sh's wn18 line (``-b 512 -n 1024 -d 500 -g 12.0 -a 0.5 -lr 0.0001 -de -adv``) scaled down:
  batch 512 -> 32, negative_sample_size 1024 -> 16, hidden_dim 500 -> 16, gamma 12.0 -> 6.0 (wn18rr's value),
  adversarial_temperature 0.5 kept, learning_rate 1e-4 -> 1e-2 (30 steps instead of 80000), max_steps 80000 -> 2000
  (warm_up_steps = max_steps // 2 as in ``run.py``);
- only the RotatE scoring function is copied (TransE, DistMult, ComplEx and pRotatE are left out of ``KGEModel``),
  and the regularization branch (``-r``, 0 for RotatE) and the countries AUC-PR evaluation are left out;
- data: WN18 is replaced by a synthetic graph made from ``seed``: 48 entities, 4 relations, each relation a random
  permutation of the entities (tail = perm_r[head]); 176 training triples, 16 held out for the filtered MRR;
- ``TrainDataset`` and ``BidirectionalOneShotIterator`` live in the helper ``_kge_rotate_lib.py`` (``np.in1d`` written
  as ``np.isin``); DataLoaders without workers; no CUDA; one ``train_step`` is one iteration of ``run.py``'s training loop (the
  static ``KGEModel.train_step`` plus the learning-rate drop); logging, checkpoints and validation scheduling are
  left out; ``eval_fn`` is ``test_step``'s filtered MRR on the held-out triples.
- the ``batch`` given to the evidence is the 'single' mode input: true triples then the same triples with a
  corrupted tail, with 1/0 targets; ``loss_fn`` is ``train_step``'s uniform (``--uni_weight``, non-adversarial) loss
  on those two halves.
"""
# ruff: noqa: UP008, PLR0402, UP031

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _kge_rotate_lib import BidirectionalOneShotIterator, TrainDataset

NENTITY, NRELATION, NTEST = 48, 4, 16
BATCH_SIZE, NEGATIVE_SAMPLE_SIZE, HIDDEN_DIM = 32, 16, 16
GAMMA, ADVERSARIAL_TEMPERATURE, LEARNING_RATE, MAX_STEPS = 6.0, 0.5, 1e-2, 2000


# ---- codes/model.py ---------------------------------------------------------------------------------------------

class KGEModel(nn.Module):
    def __init__(self, model_name, nentity, nrelation, hidden_dim, gamma,
                 double_entity_embedding=False, double_relation_embedding=False):
        super(KGEModel, self).__init__()
        self.model_name = model_name
        self.nentity = nentity
        self.nrelation = nrelation
        self.hidden_dim = hidden_dim
        self.epsilon = 2.0

        self.gamma = nn.Parameter(
            torch.Tensor([gamma]),
            requires_grad=False
        )

        self.embedding_range = nn.Parameter(
            torch.Tensor([(self.gamma.item() + self.epsilon) / hidden_dim]),
            requires_grad=False
        )

        self.entity_dim = hidden_dim*2 if double_entity_embedding else hidden_dim
        self.relation_dim = hidden_dim*2 if double_relation_embedding else hidden_dim

        self.entity_embedding = nn.Parameter(torch.zeros(nentity, self.entity_dim))
        nn.init.uniform_(
            tensor=self.entity_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        self.relation_embedding = nn.Parameter(torch.zeros(nrelation, self.relation_dim))
        nn.init.uniform_(
            tensor=self.relation_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        if model_name == 'RotatE' and (not double_entity_embedding or double_relation_embedding):
            raise ValueError('RotatE should use --double_entity_embedding')

    def forward(self, sample, mode='single'):
        if mode == 'single':
            head = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=sample[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 2]).unsqueeze(1)

        elif mode == 'head-batch':
            tail_part, head_part = sample
            batch_size, negative_sample_size = head_part.size(0), head_part.size(1)

            head = torch.index_select(
                self.entity_embedding, dim=0, index=head_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=tail_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=tail_part[:, 2]).unsqueeze(1)

        elif mode == 'tail-batch':
            head_part, tail_part = sample
            batch_size, negative_sample_size = tail_part.size(0), tail_part.size(1)

            head = torch.index_select(self.entity_embedding, dim=0, index=head_part[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=head_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(
                self.entity_embedding, dim=0, index=tail_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)

        else:
            raise ValueError('mode %s not supported' % mode)

        model_func = {
            'RotatE': self.RotatE,
        }

        if self.model_name in model_func:
            score = model_func[self.model_name](head, relation, tail, mode)
        else:
            raise ValueError('model %s not supported' % self.model_name)

        return score

    def RotatE(self, head, relation, tail, mode):
        pi = 3.14159265358979323846

        re_head, im_head = torch.chunk(head, 2, dim=2)
        re_tail, im_tail = torch.chunk(tail, 2, dim=2)

        #Make phases of relations uniformly distributed in [-pi, pi]

        phase_relation = relation/(self.embedding_range.item()/pi)

        re_relation = torch.cos(phase_relation)
        im_relation = torch.sin(phase_relation)

        if mode == 'head-batch':
            re_score = re_relation * re_tail + im_relation * im_tail
            im_score = re_relation * im_tail - im_relation * re_tail
            re_score = re_score - re_head
            im_score = im_score - im_head
        else:
            re_score = re_head * re_relation - im_head * im_relation
            im_score = re_head * im_relation + im_head * re_relation
            re_score = re_score - re_tail
            im_score = im_score - im_tail

        score = torch.stack([re_score, im_score], dim = 0)
        score = score.norm(dim = 0)

        score = self.gamma.item() - score.sum(dim = 2)
        return score

    @staticmethod
    def train_step(model, optimizer, train_iterator, args):
        '''
        A single train step. Apply back-propation and return the loss
        '''

        model.train()

        if args.bug != "zero_grad_dropped":
            optimizer.zero_grad()

        positive_sample, negative_sample, subsampling_weight, mode = next(train_iterator)

        negative_score = model((positive_sample, negative_sample), mode=mode)

        if args.negative_adversarial_sampling:
            #In self-adversarial sampling, we do not apply back-propagation on the sampling weight
            if args.bug == "adversarial_weights_not_detached":
                weights = F.softmax(negative_score * args.adversarial_temperature, dim = 1)
            else:
                weights = F.softmax(negative_score * args.adversarial_temperature, dim = 1).detach()
            negative_score = (weights * F.logsigmoid(-negative_score)).sum(dim = 1)
        else:
            negative_score = F.logsigmoid(-negative_score).mean(dim = 1)

        positive_score = model(positive_sample)

        if args.bug == "positive_logsigmoid_negated":
            positive_score = F.logsigmoid(-positive_score).squeeze(dim = 1)
        else:
            positive_score = F.logsigmoid(positive_score).squeeze(dim = 1)

        if args.uni_weight:
            positive_sample_loss = - positive_score.mean()
            negative_sample_loss = - negative_score.mean()
        else:
            positive_sample_loss = - (subsampling_weight * positive_score).sum()/subsampling_weight.sum()
            negative_sample_loss = - (subsampling_weight * negative_score).sum()/subsampling_weight.sum()

        loss = (positive_sample_loss + negative_sample_loss)/2

        loss.backward()

        optimizer.step()

        return loss.detach()


# ---- codes/model.py test_step (filtered MRR) and codes/run.py ---------------------------------------------------

def filtered_mrr(model, test_triples, all_true_triples, nentity):
    """``test_step``'s filtered MRR (TestDataset's candidates and filter bias, head-batch then tail-batch)."""
    model.eval()
    triple_set = set(all_true_triples)
    mrr = []
    with torch.no_grad():
        for mode in ('head-batch', 'tail-batch'):
            for head, relation, tail in test_triples:
                if mode == 'head-batch':
                    tmp = [(0, rand_head) if (rand_head, relation, tail) not in triple_set
                           else (-1, head) for rand_head in range(nentity)]
                    tmp[head] = (0, head)
                else:
                    tmp = [(0, rand_tail) if (head, relation, rand_tail) not in triple_set
                           else (-1, tail) for rand_tail in range(nentity)]
                    tmp[tail] = (0, tail)
                tmp = torch.LongTensor(tmp)
                filter_bias, negative_sample = tmp[:, 0].float()[None], tmp[:, 1][None]
                positive_sample = torch.LongTensor((head, relation, tail))[None]
                score = model((positive_sample, negative_sample), mode)
                score += filter_bias
                argsort = torch.argsort(score, dim = 1, descending=True)
                positive_arg = positive_sample[:, 0] if mode == 'head-batch' else positive_sample[:, 2]
                ranking = 1 + (argsort[0, :] == positive_arg[0]).nonzero().item()
                mrr.append(1.0 / ranking)
    return float(np.mean(mrr))


def make_triples(seed):
    g = np.random.RandomState(seed)
    perms = [g.permutation(NENTITY) for _ in range(NRELATION)]
    triples = [(h, r, int(perms[r][h])) for r in range(NRELATION) for h in range(NENTITY)]
    order = g.permutation(len(triples))
    triples = [triples[i] for i in order]
    return triples[NTEST:], triples[:NTEST], triples


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    train_triples, test_triples, all_true_triples = make_triples(seed)
    args = SimpleNamespace(negative_adversarial_sampling=True, adversarial_temperature=ADVERSARIAL_TEMPERATURE,
                           uni_weight=False, bug=bug)
    kge_model = KGEModel(model_name='RotatE', nentity=NENTITY, nrelation=NRELATION, hidden_dim=HIDDEN_DIM,
                         gamma=GAMMA, double_entity_embedding=True, double_relation_embedding=False)

    train_dataloader_head = DataLoader(
        TrainDataset(train_triples, NENTITY, NRELATION, NEGATIVE_SAMPLE_SIZE, 'head-batch'),
        batch_size=BATCH_SIZE, shuffle=True, num_workers=0, collate_fn=TrainDataset.collate_fn)
    train_dataloader_tail = DataLoader(
        TrainDataset(train_triples, NENTITY, NRELATION, NEGATIVE_SAMPLE_SIZE, 'tail-batch'),
        batch_size=BATCH_SIZE, shuffle=True, num_workers=0, collate_fn=TrainDataset.collate_fn)
    train_iterator = BidirectionalOneShotIterator(train_dataloader_head, train_dataloader_tail)

    state = {"lr": LEARNING_RATE, "warm_up_steps": MAX_STEPS // 2, "step": 0}
    state["optimizer"] = torch.optim.Adam(filter(lambda p: p.requires_grad, kge_model.parameters()), lr=state["lr"])

    def train_step():
        loss = kge_model.train_step(kge_model, state["optimizer"], train_iterator, args)
        if state["step"] >= state["warm_up_steps"]:
            state["lr"] = state["lr"] / 10
            state["optimizer"] = torch.optim.Adam(
                filter(lambda p: p.requires_grad, kge_model.parameters()), lr=state["lr"])
            state["warm_up_steps"] = state["warm_up_steps"] * 3
        state["step"] += 1
        return loss

    # the evidence: true triples, then the same triples with a corrupted tail ('single' mode), targets 1 / 0
    g = np.random.RandomState(seed + 1)
    pos = torch.LongTensor([train_triples[i] for i in g.choice(len(train_triples), BATCH_SIZE, replace=False)])
    neg = pos.clone()
    neg[:, 2] = (pos[:, 2] + torch.from_numpy(g.randint(1, NENTITY, BATCH_SIZE))) % NENTITY
    batch = (torch.cat([pos, neg]), torch.cat([torch.ones(BATCH_SIZE), torch.zeros(BATCH_SIZE)]))

    def loss_fn(score, target):
        score = score.squeeze(1)
        positive_sample_loss = - F.logsigmoid(score[target == 1]).mean()
        negative_sample_loss = - F.logsigmoid(-score[target == 0]).mean()
        return (positive_sample_loss + negative_sample_loss) / 2

    def eval_fn(model, _batch):
        return filtered_mrr(model, test_triples, all_true_triples, NENTITY)

    return Program(name="kge_rotate", model=kge_model, batch=batch, loss_fn=loss_fn, optimizer=state["optimizer"],
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the self-adversarial weights left in the graph: the comment above the line says the sampling weight takes no
    # back-propagation; without .detach() the loss also pushes the softmax over negatives, not just their scores.
    Bug("adversarial_weights_not_detached", functools.partial(_build, bug="adversarial_weights_not_detached"),
        "learning_ledger", ("OBJECTIVE",)),
    # logsigmoid(-score) on the positives (the negatives' line copied): true triples are pushed down with the
    # corrupted ones.
    Bug("positive_logsigmoid_negated", functools.partial(_build, bug="positive_logsigmoid_negated"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from the static train_step: every step adds its gradient to all earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
