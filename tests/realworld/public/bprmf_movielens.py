# ruff: noqa: UP004, UP008, UP031, PLR0402
"""BPR-MF on MovieLens-100K from rdz98/bprmf-pytorch: matrix factorization (user and item embeddings, dot-product
scores) trained with the Bayesian personalized ranking loss ``-log sigmoid(s_pos - s_neg)`` on one sampled positive
and one sampled unobserved negative item per drawn user, Adam; evaluated by the AUC of each user's held-out last item
against 99 sampled unobserved items.

Source: https://github.com/rdz98/bprmf-pytorch
Commit: 08c1ffc28c1e8ae5dbeb2802aced298da07bbe75
Files: ``bprmf.py`` (``BprMF``), ``data.py`` (``DataLoader``: ``generate_data``, ``evaluate``), ``main.py``
(``main``), ``pre.py`` (the leave-last-out split)
License: MIT (Copyright (c) 2021 rdz98; full text in LICENSES/rdz98-bprmf-pytorch.txt)
Domain: recommendation, implicit-feedback matrix factorization with sampled negatives (BPR)

Kept as written: ``BprMF`` (embeddings drawn from N(0, 0.01), ``bpr_loss`` as the mean of ``log sigmoid`` of the
score difference, negated; ``forward`` as dot products; ``reg`` stored and unused, ``0`` in ``main``), ``DataLoader``
(``generate_data``: ``cnt`` users drawn with replacement of which the first ``n_user`` are batched, a random
positive of each user and a rejection-sampled negative; ``evaluate``'s AUC over 99 sampled negatives), ``main``'s
loop body (tensors from the lists, ``bpr_loss``, ``zero_grad``, ``backward``, ``step``; ``model.train()`` at each
epoch, ``model.eval()`` and ``no_grad`` around ``evaluate``), dim 32, Adam lr 0.001.

Deviations from the original:
- MovieLens-100K (``data/train.txt``, ``data/test.txt``, made by ``pre.py``) is replaced by synthetic interactions
  made from ``seed``: 64 users and 96 items in 4 hidden groups; each user has 9 items of its group (a permutation
  of the groups maps users to item groups), the last of them held out as the test item as ``pre.py`` does; the rule
  is learnable (a user's held-out item is in the group of its other items). ``DataLoader`` takes the two files'
  lines as lists instead of reading them;
- sizes for 2 CPU cores: batch size 256 -> 32 (with 64 users an epoch has 2 batches); from the N(0, 0.01)
  initialization at lr 0.001 the loss leaves log 2 slowly, so the self-check runs 120 steps (``SELF_CHECK_STEPS``);
- the epoch loop is unrolled: one ``train_step`` is one batch of ``generate_data`` (``model.train()`` and a new
  generator when an epoch starts); it returns ``loss.item()``; ``eval_fn`` is ``evaluate`` under ``model.eval()`` and
  ``no_grad`` (the AUC), the printing is dropped; ``device`` is the CPU;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_USER, M_ITEM, N_GROUPS, PER_USER = 64, 96, 4, 9  # (port) synthetic interactions
SELF_CHECK_STEPS = 120  # 60 epochs of 2 batches


# bprmf.py
class BprMF(nn.Module):
    def __init__(self, n_user, m_item, dim, reg, bug=None):
        super(BprMF, self).__init__()
        self.n_user = n_user
        self.m_item = m_item
        self.dim = dim
        self.reg = reg
        self.bug = bug

        self.Embedding_User = nn.Embedding(n_user, dim)
        self.Embedding_Item = nn.Embedding(m_item, dim)
        nn.init.normal_(self.Embedding_User.weight, std=0.01)
        nn.init.normal_(self.Embedding_Item.weight, std=0.01)

    def bpr_loss(self, users, pos_items, neg_items):
        users_emb = self.Embedding_User(users)
        pos_items_emb = self.Embedding_Item(pos_items)
        neg_items_emb = self.Embedding_Item(neg_items)

        pos_scores = torch.sum(users_emb * pos_items_emb, dim=-1)
        neg_scores = torch.sum(users_emb * neg_items_emb, dim=-1)
        if self.bug == "score_difference_reversed":
            pos_scores, neg_scores = neg_scores, pos_scores
        loss = (pos_scores - neg_scores).sigmoid().log().mean()
        return -loss

    def forward(self, users, items):
        users_emb = self.Embedding_User(users)
        items_emb = self.Embedding_Item(items)
        scores = torch.sum(users_emb * items_emb, dim=-1)
        return scores


# data.py (the two files' lines passed in as lists)
class DataLoader(object):
    def __init__(self, train_lines, test_lines, bug=None):
        self.bug = bug
        self.allPos = []
        self.testPos = []
        self.m_item = 0
        self.cnt = 0
        for line in train_lines:
            x = list(map(int, line.split(' ')))
            self.allPos.append([])
            for item_id in x[1:]:
                self.m_item = max(self.m_item, item_id + 1)
                self.cnt += 1
                self.allPos[-1].append(item_id)
        self.n_user = len(self.allPos)

        for line in test_lines:
            x = list(map(int, line.split(' ')))
            self.testPos.append(x[1])

    def generate_data(self, batch_size):
        users = np.random.randint(0, self.n_user, self.cnt)

        for i in range(0, self.n_user, batch_size):
            pos_items, neg_items = [], []
            for user in users[i: i+batch_size]:
                pos_items.append(np.random.choice(self.allPos[user]))
                t = np.random.randint(self.m_item)
                while t in self.allPos[user]:
                    t = np.random.randint(self.m_item)
                neg_items.append(t)
            if self.bug == "users_sliced_off_by_one":
                yield users[i + 1: i + 1 + batch_size], pos_items, neg_items
                continue
            yield users[i: i+batch_size], pos_items, neg_items

    def evaluate(self, model, device):
        auc = []
        for user_id in range(self.n_user):
            users = [user_id] * 100
            items = [self.testPos[user_id]]
            for i in range(99):
                t = np.random.randint(self.m_item)
                while t in self.allPos[user_id] or t == items[0]:
                    t = np.random.randint(self.m_item)
                items.append(t)
            users = torch.Tensor(users).long().to(device)
            items = torch.Tensor(items).long().to(device)
            scores = model.forward(users, items).cpu().numpy()
            s = 0
            for score in scores[1:]:
                if scores[0] > score:
                    s += 1
            auc.append(s / 99)
        return np.mean(auc)


def _synthetic_files(seed):
    """(port) train.txt / test.txt lines: each user's 9 items from its group, the last one held out (pre.py)."""
    rng = np.random.RandomState(seed)
    item_group = rng.permutation(M_ITEM) % N_GROUPS
    user_group = rng.permutation(N_USER) % N_GROUPS
    perm = rng.permutation(N_GROUPS)
    train, test = [], []
    for u in range(N_USER):
        items = rng.choice(np.flatnonzero(item_group == perm[user_group[u]]), PER_USER, replace=False)
        train.append("%d " % u + " ".join("%d" % i for i in items[:-1]))
        test.append("%d %d" % (u, items[-1]))
    return train, test


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = "cpu"
    batch_size = 32  # (port) 256 in main.py

    # main()
    dl = DataLoader(*_synthetic_files(seed), bug=bug)
    model = BprMF(dl.n_user, dl.m_item, 32, 0, bug=bug).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    state = {"gen": None}

    def train_step():
        nonlocal model
        for _ in range(2):
            if state["gen"] is None:  # an epoch starts
                model = model.train()
                state["gen"] = dl.generate_data(batch_size=batch_size)
            try:
                users, pos_items, neg_items = next(state["gen"])
                break
            except StopIteration:
                state["gen"] = None
        users = torch.Tensor(users).long().to(device)
        pos_items = torch.Tensor(pos_items).long().to(device)
        neg_items = torch.Tensor(neg_items).long().to(device)

        loss = model.bpr_loss(users, pos_items, neg_items)

        if bug != "zero_grad_dropped":
            opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.cpu().item()

    def eval_fn(model, _batch=None):
        was = model.training
        with torch.no_grad():
            model = model.eval()
            auc = dl.evaluate(model, device)
        model.train(was)
        return float(auc)

    users, pos_items, neg_items = next(DataLoader(*_synthetic_files(seed)).generate_data(batch_size=batch_size))
    batch = (torch.Tensor(users).long(), torch.Tensor(pos_items).long(), torch.Tensor(neg_items).long())
    loss_fn = lambda _out, b: model.bpr_loss(*b)
    return Program(name="bprmf_movielens", model=model, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the positive and negative scores trade places in the BPR difference, so the model is
    # trained to rank every unobserved item above the user's own items.
    Bug("score_difference_reversed", functools.partial(_build, bug="score_difference_reversed"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic misalignment: the yielded users are sliced one position later than the users whose positives and
    # negatives were sampled, so every (user, positive, negative) triple pairs a user with another user's items.
    Bug("users_sliced_off_by_one", functools.partial(_build, bug="users_sliced_off_by_one"), "learning_ledger",
        ("TASK",)),
    # classic: opt.zero_grad() left out of the loop: every step applies the sum of all past gradients.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
