# ruff: noqa: UP008, PLR0402, SIM211
"""LightGCN (He et al. 2020) as LibRecommender trains it: user and item embeddings propagated over the symmetric
normalized user-item graph ``D^-1/2 A D^-1/2`` (a torch sparse tensor built with scipy) for ``n_layers`` layers,
the layer outputs averaged, the BPR loss on (user, consumed item, random negative item) triples scored by dot
products of the propagated embeddings, the whole graph propagated again for every batch; Adam.

Source: https://github.com/massquantity/LibRecommender
Commit: 7463d9d084bfc6d4cf06dbfc834a255801304d2f
Files: ``libreco/algorithms/torch_modules/lightgcn_module.py`` (``LightGCNModel``), ``libreco/algorithms/lightgcn.py``
(``LightGCN``), ``libreco/training/torch_trainer.py`` (``TorchTrainer.__init__``, ``run``, ``_compute_loss``),
``libreco/torchops/loss.py`` (``bpr_loss``, ``compute_pair_scores``), ``libreco/sampling/negatives.py``
(``negatives_from_random``, ``_check_invalid_negatives``), ``libreco/batch/collators.py`` (``PairwiseCollator``),
``examples/pure_ranking_example.py`` (the LightGCN call)
License: MIT (Copyright 2023 massquantity; full text in LICENSES/massquantity-LibRecommender.txt)
Domain: recommendation, graph-based collaborative filtering (LightGCN, BPR with sampled negatives)

Kept as written: ``LightGCNModel`` (normal(0, 0.1) embeddings, the Laplacian from ``user_consumed`` with scipy,
``embedding_propagation`` with the layer mean and the user/item split, ``sparse_dropout``), ``TorchTrainer``'s
optimizer (Adam with ``eps``, ``weight_decay=reg``, ``amsgrad``; no scheduler without ``lr_decay``) and its batch
loop (``_compute_loss`` on a pairwise batch, ``zero_grad``, ``backward``, ``step``), ``bpr_loss`` and
``compute_pair_scores``, ``negatives_from_random`` (resampling negatives equal to the positive), the example's
arguments (loss_type "bpr", embed_size 16, lr 3e-4, reg 0.0, num_neg 1, dropout_rate 0.0, n_layers 3, sampler
"random").

Deviations from the original:
- the MovieLens sample is not here: 96 users and 64 items made from ``seed``, each user in one of 4 hidden groups
  and consuming 10 items drawn mostly from its group's 16 items; 2 consumed items per user are held out for
  ``eval_fn`` (the rule is learnable: a user's held-out items are those its group consumes);
- sizes for 2 CPU cores: batch_size 2048 -> 32; ``device`` "cpu"; at lr 3e-4 the BPR loss leaves ln 2 slowly, so
  the module's self-check runs 300 batches (``SELF_CHECK_STEPS``, about a second; the held-out AUC goes from about
  0.6 to 0.9 over them);
- the ``DatasetPure`` / ``DataInfo`` / ``get_batch_loader`` machinery is written out: the training interactions are
  shuffled every epoch and cut into batches of 32 (user, item) pairs, and the negatives of a batch come from
  ``negatives_from_random`` as ``PairwiseCollator`` calls it (``num_neg`` 1, no repeated positives);
- ``run``'s epoch loop is unrolled: one ``train_step`` is one batch (``torch_model.train()`` at an epoch's start)
  and returns its loss; ``eval_fn`` is ``set_embeddings``'s propagation without dropout under ``inference_mode``
  and the AUC of held-out items against unconsumed items per user (in place of ``print_metrics``); the tqdm bar,
  the timing and the printing are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy import sparse as ssp
from torch.optim import Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 300  # (port) lr 3e-4 on embeddings of std 0.1: the BPR loss leaves ln 2 slowly (3 ms a step)
N_USERS, N_ITEMS, N_GROUPS, PER_USER, HELD_OUT = 96, 64, 4, 10, 2


# libreco/algorithms/torch_modules/lightgcn_module.py
class LightGCNModel(nn.Module):
    def __init__(
        self,
        n_users,
        n_items,
        embed_size,
        n_layers,
        dropout_rate,
        user_consumed,
        device,
        bug=None,
    ):
        super(LightGCNModel, self).__init__()
        self.n_users = n_users
        self.n_items = n_items
        self.embed_size = embed_size
        self.n_layers = n_layers
        self.dropout_rate = dropout_rate
        self.user_consumed = user_consumed
        self.device = device
        self.bug = bug
        self.user_init_embeds, self.item_init_embeds = self.init_embeds()
        self.laplacian_matrix = self._build_laplacian_matrix()

    def init_embeds(self):
        user_embeds = nn.Embedding(self.n_users, self.embed_size)
        item_embeds = nn.Embedding(self.n_items, self.embed_size)
        nn.init.normal_(user_embeds.weight, 0.0, 0.1)
        nn.init.normal_(item_embeds.weight, 0.0, 0.1)
        return user_embeds.to(self.device), item_embeds.to(self.device)

    def _build_laplacian_matrix(self):
        R = ssp.dok_matrix((self.n_users, self.n_items), dtype=np.float32)
        for u in range(self.n_users):
            items = self.user_consumed[u]
            R[u, items] = 1.0
        R = R.tolil()

        adj_matrix = ssp.lil_matrix(
            (self.n_users + self.n_items, self.n_items + self.n_users), dtype=np.float32
        )
        adj_matrix[: self.n_users, self.n_users :] = R
        adj_matrix[self.n_users :, : self.n_users] = R.T
        adj_matrix = adj_matrix.tocsr()

        row_sum = np.array(adj_matrix.sum(axis=1))
        diag_inv = np.power(row_sum, -0.5).flatten()
        diag_inv[np.isinf(diag_inv)] = 0.0
        diag_matrix_inv = ssp.diags(diag_inv)

        coo = diag_matrix_inv.dot(adj_matrix).dot(diag_matrix_inv).tocoo()
        indices = torch.from_numpy(np.array([coo.row, coo.col]))
        values = torch.from_numpy(coo.data)
        laplacian_matrix = torch.sparse_coo_tensor(
            indices, values, coo.shape, dtype=torch.float32, device=self.device
        )
        return laplacian_matrix

    def forward(self, use_dropout):
        return self.embedding_propagation(use_dropout=use_dropout)

    def embedding_propagation(self, use_dropout):
        if use_dropout and self.dropout_rate > 0:
            laplacian_norm = self.sparse_dropout(
                self.laplacian_matrix, self.laplacian_matrix._nnz()
            )
        else:
            laplacian_norm = self.laplacian_matrix

        all_embeddings = [
            torch.cat(
                [self.user_init_embeds.weight, self.item_init_embeds.weight], dim=0
            )
        ]
        for _ in range(self.n_layers):
            layer_embed = torch.sparse.mm(laplacian_norm, all_embeddings[-1])
            all_embeddings.append(layer_embed)

        all_embeddings = torch.stack(all_embeddings, dim=1)
        all_embeddings = torch.mean(all_embeddings, dim=1)
        if self.bug == "user_item_split_swapped":
            item_embeds, user_embeds = torch.split(
                all_embeddings, [self.n_items, self.n_users]
            )
            return user_embeds, item_embeds
        user_embeds, item_embeds = torch.split(
            all_embeddings, [self.n_users, self.n_items]
        )
        return user_embeds, item_embeds

    def sparse_dropout(self, x, noise_shape):
        keep_prob = 1 - self.dropout_rate
        random_tensor = (torch.rand(noise_shape) + keep_prob).to(x.device)
        dropout_mask = torch.floor(random_tensor).bool()
        indices = x._indices()[:, dropout_mask]
        values = x._values()[dropout_mask] / keep_prob
        return torch.sparse_coo_tensor(indices, values, x.shape, device=x.device)


# libreco/torchops/loss.py
def bpr_loss(pos_scores, neg_scores, bug=None):
    if bug == "bpr_sign_flipped":
        return torch.negative(torch.mean(F.logsigmoid(neg_scores - pos_scores)))
    log_sigmoid = F.logsigmoid(pos_scores - neg_scores)
    return torch.negative(torch.mean(log_sigmoid))


def compute_pair_scores(targets, items_pos, items_neg, repeat_positives=True):
    if len(targets) == len(items_pos) == len(items_neg):
        pos_scores = (targets * items_pos).sum(1)
        neg_scores = (targets * items_neg).sum(1)
        return pos_scores, neg_scores
    raise ValueError("(port) only num_neg == 1 is copied")


# libreco/sampling/negatives.py
def _check_invalid_negatives(negatives, items_pos, items=None):
    if items is not None and len(items) > 0:
        invalid_indices = np.union1d(
            np.where(negatives == items_pos)[0], np.where(negatives == items)[0]
        )
    else:
        invalid_indices = np.where(negatives == items_pos)[0]
    return list(invalid_indices)


def negatives_from_random(
    np_rng, n_items, items_pos, num_neg, items=None, tolerance=10
):
    items_pos = np.repeat(items_pos, num_neg) if num_neg > 1 else items_pos
    items = np.repeat(items, num_neg) if num_neg > 1 and items is not None else items
    replace = False if len(items_pos) < n_items else True
    negatives = np_rng.choice(n_items, size=len(items_pos), replace=replace)
    for _ in range(tolerance):
        invalid_indices = _check_invalid_negatives(negatives, items_pos, items)
        if not invalid_indices:
            break
        negatives[invalid_indices] = np_rng.choice(
            n_items, size=len(invalid_indices), replace=True
        )
    return negatives


class PairwiseBatch:
    """(port) libreco/batch/batch_unit.py's PairwiseBatch, the fields the torch trainer reads."""

    def __init__(self, queries, item_pairs):
        self.queries = torch.as_tensor(queries, dtype=torch.long)
        self.item_pairs = (torch.as_tensor(item_pairs[0], dtype=torch.long),
                           torch.as_tensor(item_pairs[1], dtype=torch.long))


# libreco/training/torch_trainer.py (TorchTrainer: __init__'s optimizer, run's batch loop, _compute_loss)
class TorchTrainer:
    def __init__(self, torch_model, loss_type, lr, lr_decay, epsilon, amsgrad, reg, margin, device, bug=None):
        self.loss_type = loss_type
        self.reg = reg or 0
        self.margin = margin
        self.device = device
        self.torch_model = torch_model
        self.bug = bug
        self.optimizer = Adam(
            params=self.torch_model.parameters(),
            lr=lr,
            eps=epsilon,
            weight_decay=self.reg,
            amsgrad=amsgrad,
        )
        self.lr_scheduler = None  # (port) lr_decay is False

    def train_batch(self, batch_data):
        loss = self._compute_loss(batch_data)
        if self.bug == "zero_grad_after_backward":
            loss.backward()
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad()
            loss.backward()
        self.optimizer.step()
        return loss.detach().cpu().item()

    def _compute_loss(self, data):
        user_embeds, item_embeds = self.torch_model(use_dropout=True)
        users = user_embeds[data.queries]
        items_pos, items_neg = data.item_pairs[0], data.item_pairs[1]
        items_pos, items_neg = item_embeds[items_pos], item_embeds[items_neg]
        pos_scores, neg_scores = compute_pair_scores(users, items_pos, items_neg)
        return bpr_loss(pos_scores, neg_scores, bug=self.bug)


def synthetic_interactions(rng):
    """(port) Users in hidden groups consuming mostly their group's items; the last HELD_OUT per user held out."""
    item_group = rng.permutation(np.arange(N_ITEMS) % N_GROUPS)
    train, held_out = [], {}
    for u in range(N_USERS):
        g = u % N_GROUPS
        own, other = np.flatnonzero(item_group == g), np.flatnonzero(item_group != g)
        items = np.concatenate([rng.choice(own, PER_USER - 2, replace=False), rng.choice(other, 2, replace=False)])
        items = rng.permutation(items)
        held_out[u] = [i for i in items[-HELD_OUT:] if item_group[i] == g] or list(items[-1:])
        train += [(u, int(i)) for i in items[:-HELD_OUT]]
    return np.array(train), held_out


def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    train_data, held_out = synthetic_interactions(rng)
    user_consumed = {u: sorted(train_data[train_data[:, 0] == u, 1].tolist()) for u in range(N_USERS)}
    torch.manual_seed(seed)  # (port) set_torch_seed(self.seed), seed 42
    np_rng = np.random.default_rng(seed)
    torch_model = LightGCNModel(N_USERS, N_ITEMS, embed_size=16, n_layers=3, dropout_rate=0.0,
                                user_consumed=user_consumed, device=torch.device("cpu"), bug=bug)
    trainer = TorchTrainer(torch_model, loss_type="bpr", lr=3e-4, lr_decay=False, epsilon=1e-8, amsgrad=False,
                           reg=0.0, margin=1.0, device=torch.device("cpu"), bug=bug)
    batch_size = 32  # (port) 2048
    state = {"order": [], "pos": 0}

    def next_batch():
        if state["pos"] >= len(state["order"]):  # a new epoch: shuffle=True
            torch_model.train()
            state["order"], state["pos"] = np_rng.permutation(len(train_data)), 0
        rows = train_data[state["order"][state["pos"]:state["pos"] + batch_size]]
        state["pos"] += batch_size
        items_neg = negatives_from_random(np_rng, N_ITEMS, rows[:, 1], 1)
        return PairwiseBatch(queries=rows[:, 0], item_pairs=(rows[:, 1], items_neg))

    def train_step():
        return trainer.train_batch(next_batch())

    def eval_fn(model, batch=None):
        model.eval()
        with torch.inference_mode():
            user_embeds, item_embeds = model.embedding_propagation(use_dropout=False)
            scores = (user_embeds @ item_embeds.T).numpy()
        model.train()
        aucs = []
        for u, pos in held_out.items():
            neg = np.setdiff1d(np.arange(N_ITEMS), np.concatenate([user_consumed[u], pos]))
            aucs.append(float((scores[u, pos][:, None] > scores[u, neg][None, :]).mean()))
        return float(np.mean(aucs))

    first = next_batch()
    state["pos"] = 0  # (port) the declared batch is the first training batch, drawn again by the loop

    def loss_fn(outputs, data):
        user_embeds, item_embeds = outputs
        pos_scores, neg_scores = compute_pair_scores(
            user_embeds[data.queries], item_embeds[data.item_pairs[0]], item_embeds[data.item_pairs[1]])
        return bpr_loss(pos_scores, neg_scores)

    return Program(name="librecommender_lightgcn", model=torch_model, batch=({"use_dropout": True}, first),
                   loss_fn=loss_fn, optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the BPR terms swapped (neg - pos), so the sampled negatives are ranked above the consumed
    # items.
    Bug("bpr_sign_flipped", functools.partial(_build, bug="bpr_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the propagated embeddings split in the wrong order (items first), so "user" rows are item nodes and
    # the other way round; with more users than items every index stays in range.
    Bug("user_item_split_swapped", functools.partial(_build, bug="user_item_split_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: zero_grad moved between backward and step, so every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
