"""LightGCN of RecBole trained by RecBole's ``Trainer``: user and item embeddings propagated ``n_layers`` times over the
symmetrically normalised user-item adjacency ``D^-1/2 A D^-1/2`` (a sparse matrix product, no weights, no
non-linearity), the layer outputs averaged; the loss is ``BPRLoss`` on (user, positive item, sampled negative item)
triples of the propagated embeddings plus ``reg_weight * EmbLoss`` on the initial (ego) embeddings of the batch;
Adam(lr 1e-3), one uniform negative per positive, ``Trainer._train_epoch``'s body per batch (``zero_grad``,
``calculate_loss``, ``backward``, ``step``), the model's cached full-sort embeddings for evaluation.

Source: https://github.com/RUCAIBox/RecBole
Commit: 7b02be5ec80a88310f2d04a27a82adfcbb5dc211
Files: recbole/model/general_recommender/lightgcn.py, recbole/model/loss.py, recbole/model/init.py,
  recbole/model/abstract_recommender.py, recbole/trainer/trainer.py, recbole/properties/model/LightGCN.yaml,
  recbole/properties/overall.yaml
License: MIT (Copyright (c) 2020 RUCAIBox)
Domain: recommendation (graph collaborative filtering, BPR with L2 on the initial embeddings)

Substituted: the brief named gusye1234/LightGCN-PyTorch, which has no license file (nothing to copy under); RecBole's
LightGCN (MIT) is the same model and loss (BPR + weight decay on the layer-0 embeddings).

Deviations from the original:
- sizes: train_batch_size 2048 -> 64, embedding_size 64 -> 32; n_layers 2, reg_weight 1e-5, require_pow False,
  lr 1e-3, Adam unchanged;
- data: the atomic-file dataset (``ml-100k``) is replaced by a synthetic implicit-feedback set made from ``seed``:
  60 users and 80 items in 4 taste groups, each user interacting with items of their own group far more often; ids
  start at 1 (0 is RecBole's padding id, counted in ``n_users`` / ``n_items``); 80% of each user's interactions are
  for training, the rest held out for ``eval_fn``; a minimal ``Dataset`` stands in for RecBole's (``num``,
  ``inter_matrix(form="coo")``) and a shuffled loop over the training pairs with one uniform negative per pair,
  drawn from the items the user has not interacted with, stands in for ``TrainDataLoader`` + ``Sampler``;
- scipy 1.17 has no ``dok_matrix._update``: ``get_norm_adj_mat`` fills the DOK matrix with ``A._dict.update``
  (the same dictionary update); ``torch.sparse.FloatTensor`` is kept (deprecated, still works);
- the ``Interaction`` object is a dict of tensors; logging, AMP/GradScaler (disabled by default), gradient-clip
  (None by default), distributed hooks and the ``_check_nan`` guard are left out;
- ``calculate_loss``'s body is split in two, unchanged: the cache clearing and ``forward()`` stay in
  ``calculate_loss``, the BPR + EmbLoss lines move to ``loss_from_embeddings(outputs, interaction)``, which the
  program declares as its ``loss_fn``; one ``train_step`` is one batch of ``_train_epoch``; the program's ``batch``
  is the model's own input (none: ``forward()`` propagates all embeddings) with a batch of triples as targets; ``eval_fn`` is RecBole's full-sort evaluation reduced to
  Recall@10 on the held-out items (training items masked), through ``full_sort_predict``.
"""
# ruff: noqa: PLR0402, SIM102, UP008  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
from torch.nn.init import constant_, xavier_uniform_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_USERS = 60
NUM_ITEMS = 80
GROUPS = 4
TRAIN_BATCH_SIZE = 64

CONFIG = {
    "USER_ID_FIELD": "user_id",
    "ITEM_ID_FIELD": "item_id",
    "NEG_PREFIX": "neg_",
    "device": torch.device("cpu"),
    "embedding_size": 32,
    "n_layers": 2,
    "reg_weight": 1e-05,
    "require_pow": False,
    "learning_rate": 0.001,
}


# ---- recbole/model/init.py ---------------------------------------------------------------------------------------

def xavier_uniform_initialization(module):
    if isinstance(module, nn.Embedding):
        xavier_uniform_(module.weight.data)
    elif isinstance(module, nn.Linear):
        xavier_uniform_(module.weight.data)
        if module.bias is not None:
            constant_(module.bias.data, 0)


# ---- recbole/model/loss.py ---------------------------------------------------------------------------------------

class BPRLoss(nn.Module):
    def __init__(self, gamma=1e-10, bug=None):
        super(BPRLoss, self).__init__()
        self.gamma = gamma
        self.bug = bug

    def forward(self, pos_score, neg_score):
        if self.bug == "bpr_sign_flipped":
            # the score difference taken the wrong way round: negatives are ranked above positives
            return -torch.log(self.gamma + torch.sigmoid(neg_score - pos_score)).mean()
        loss = -torch.log(self.gamma + torch.sigmoid(pos_score - neg_score)).mean()
        return loss


class EmbLoss(nn.Module):
    """EmbLoss, regularization on embeddings"""

    def __init__(self, norm=2):
        super(EmbLoss, self).__init__()
        self.norm = norm

    def forward(self, *embeddings, require_pow=False):
        if require_pow:
            emb_loss = torch.zeros(1).to(embeddings[-1].device)
            for embedding in embeddings:
                emb_loss += torch.pow(
                    input=torch.norm(embedding, p=self.norm), exponent=self.norm
                )
            emb_loss /= embeddings[-1].shape[0]
            emb_loss /= self.norm
            return emb_loss
        else:
            emb_loss = torch.zeros(1).to(embeddings[-1].device)
            for embedding in embeddings:
                emb_loss += torch.norm(embedding, p=self.norm)
            emb_loss /= embeddings[-1].shape[0]
            return emb_loss


# ---- recbole/model/abstract_recommender.py -----------------------------------------------------------------------

class GeneralRecommender(nn.Module):
    def __init__(self, config, dataset):
        super(GeneralRecommender, self).__init__()

        # load dataset info
        self.USER_ID = config["USER_ID_FIELD"]
        self.ITEM_ID = config["ITEM_ID_FIELD"]
        self.NEG_ITEM_ID = config["NEG_PREFIX"] + self.ITEM_ID
        self.n_users = dataset.num(self.USER_ID)
        self.n_items = dataset.num(self.ITEM_ID)

        # load parameters info
        self.device = config["device"]


# ---- recbole/model/general_recommender/lightgcn.py ---------------------------------------------------------------

class LightGCN(GeneralRecommender):
    r"""LightGCN is a GCN-based recommender model.

    LightGCN includes only the most essential component in GCN — neighborhood aggregation — for
    collaborative filtering. Specifically, LightGCN learns user and item embeddings by linearly
    propagating them on the user-item interaction graph, and uses the weighted sum of the embeddings
    learned at all layers as the final embedding.

    We implement the model following the original author with a pairwise training mode.
    """

    def __init__(self, config, dataset, bug=None):
        super(LightGCN, self).__init__(config, dataset)
        self.bug = bug

        # load dataset info
        self.interaction_matrix = dataset.inter_matrix(form="coo").astype(np.float32)

        # load parameters info
        self.latent_dim = config[
            "embedding_size"
        ]  # int type:the embedding size of lightGCN
        self.n_layers = config["n_layers"]  # int type:the layer num of lightGCN
        self.reg_weight = config[
            "reg_weight"
        ]  # float32 type: the weight decay for l2 normalization
        self.require_pow = config["require_pow"]

        # define layers and loss
        self.user_embedding = torch.nn.Embedding(
            num_embeddings=self.n_users, embedding_dim=self.latent_dim
        )
        self.item_embedding = torch.nn.Embedding(
            num_embeddings=self.n_items, embedding_dim=self.latent_dim
        )
        self.mf_loss = BPRLoss(bug=bug)
        self.reg_loss = EmbLoss()

        # storage variables for full sort evaluation acceleration
        self.restore_user_e = None
        self.restore_item_e = None

        # generate intermediate data
        self.norm_adj_matrix = self.get_norm_adj_mat().to(self.device)

        # parameters initialization
        self.apply(xavier_uniform_initialization)
        self.other_parameter_name = ["restore_user_e", "restore_item_e"]

    def get_norm_adj_mat(self):
        r"""Get the normalized interaction matrix of users and items.

        Construct the square matrix from the training data and normalize it
        using the laplace matrix.

        .. math::
            A_{hat} = D^{-0.5} \times A \times D^{-0.5}

        Returns:
            Sparse tensor of the normalized interaction matrix.
        """
        # build adj matrix
        A = sp.dok_matrix(
            (self.n_users + self.n_items, self.n_users + self.n_items), dtype=np.float32
        )
        inter_M = self.interaction_matrix
        inter_M_t = self.interaction_matrix.transpose()
        if self.bug == "item_ids_not_offset":
            # the item ids used as node ids without the n_users offset: item j lands on user node j
            data_dict = dict(
                zip(zip(inter_M.row, inter_M.col), [1] * inter_M.nnz)
            )
            data_dict.update(
                dict(
                    zip(
                        zip(inter_M_t.row, inter_M_t.col),
                        [1] * inter_M_t.nnz,
                    )
                )
            )
        else:
            data_dict = dict(
                zip(zip(inter_M.row, inter_M.col + self.n_users), [1] * inter_M.nnz)
            )
            data_dict.update(
                dict(
                    zip(
                        zip(inter_M_t.row + self.n_users, inter_M_t.col),
                        [1] * inter_M_t.nnz,
                    )
                )
            )
        A._dict.update(data_dict)
        # norm adj matrix
        sumArr = (A > 0).sum(axis=1)
        # add epsilon to avoid divide by zero Warning
        diag = np.array(sumArr.flatten())[0] + 1e-7
        diag = np.power(diag, -0.5)
        D = sp.diags(diag)
        L = D * A * D
        # covert norm_adj matrix to tensor
        L = sp.coo_matrix(L)
        row = L.row
        col = L.col
        i = torch.LongTensor(np.array([row, col]))
        data = torch.FloatTensor(L.data)
        SparseL = torch.sparse.FloatTensor(i, data, torch.Size(L.shape))
        return SparseL

    def get_ego_embeddings(self):
        r"""Get the embedding of users and items and combine to an embedding matrix.

        Returns:
            Tensor of the embedding matrix. Shape of [n_items+n_users, embedding_dim]
        """
        user_embeddings = self.user_embedding.weight
        item_embeddings = self.item_embedding.weight
        ego_embeddings = torch.cat([user_embeddings, item_embeddings], dim=0)
        return ego_embeddings

    def forward(self):
        all_embeddings = self.get_ego_embeddings()
        embeddings_list = [all_embeddings]

        for layer_idx in range(self.n_layers):
            all_embeddings = torch.sparse.mm(self.norm_adj_matrix, all_embeddings)
            embeddings_list.append(all_embeddings)
        lightgcn_all_embeddings = torch.stack(embeddings_list, dim=1)
        lightgcn_all_embeddings = torch.mean(lightgcn_all_embeddings, dim=1)

        user_all_embeddings, item_all_embeddings = torch.split(
            lightgcn_all_embeddings, [self.n_users, self.n_items]
        )
        return user_all_embeddings, item_all_embeddings

    def calculate_loss(self, interaction):
        # clear the storage variable when training
        if self.bug != "prediction_cache_not_cleared":
            if self.restore_user_e is not None or self.restore_item_e is not None:
                self.restore_user_e, self.restore_item_e = None, None

        user_all_embeddings, item_all_embeddings = self.forward()
        return self.loss_from_embeddings((user_all_embeddings, item_all_embeddings), interaction)

    def loss_from_embeddings(self, outputs, interaction):
        user_all_embeddings, item_all_embeddings = outputs
        user = interaction[self.USER_ID]
        pos_item = interaction[self.ITEM_ID]
        neg_item = interaction[self.NEG_ITEM_ID]

        u_embeddings = user_all_embeddings[user]
        pos_embeddings = item_all_embeddings[pos_item]
        neg_embeddings = item_all_embeddings[neg_item]

        # calculate BPR Loss
        pos_scores = torch.mul(u_embeddings, pos_embeddings).sum(dim=1)
        neg_scores = torch.mul(u_embeddings, neg_embeddings).sum(dim=1)
        mf_loss = self.mf_loss(pos_scores, neg_scores)

        # calculate regularization Loss
        u_ego_embeddings = self.user_embedding(user)
        pos_ego_embeddings = self.item_embedding(pos_item)
        neg_ego_embeddings = self.item_embedding(neg_item)

        reg_loss = self.reg_loss(
            u_ego_embeddings,
            pos_ego_embeddings,
            neg_ego_embeddings,
            require_pow=self.require_pow,
        )

        loss = mf_loss + self.reg_weight * reg_loss

        return loss

    def full_sort_predict(self, interaction):
        user = interaction[self.USER_ID]
        if self.restore_user_e is None or self.restore_item_e is None:
            self.restore_user_e, self.restore_item_e = self.forward()
        # get user embedding from storage variable
        u_embeddings = self.restore_user_e[user]

        # dot with all item embedding to accelerate
        scores = torch.matmul(u_embeddings, self.restore_item_e.transpose(0, 1))

        return scores.view(-1)


# ---- data: a minimal stand-in for RecBole's Dataset, TrainDataLoader and Sampler --------------------------------

class Dataset:
    def __init__(self, users, items, n_users, n_items):
        self.users, self.items = users, items
        self._num = {"user_id": n_users, "item_id": n_items}

    def num(self, field):
        return self._num[field]

    def inter_matrix(self, form="coo"):
        assert form == "coo"
        data = np.ones(len(self.users))
        return sp.coo_matrix((data, (self.users, self.items)), shape=(self._num["user_id"], self._num["item_id"]))


def make_interactions(seed):
    """60 users x 80 items in 4 taste groups; ids from 1 (0 is the padding id). Returns train and held-out pairs."""
    rng = np.random.RandomState(seed)
    user_group = rng.randint(0, GROUPS, NUM_USERS + 1)
    item_group = rng.randint(0, GROUPS, NUM_ITEMS + 1)
    p = np.where(user_group[:, None] == item_group[None, :], 0.35, 0.02)
    inter = rng.rand(NUM_USERS + 1, NUM_ITEMS + 1) < p
    inter[0, :] = False
    inter[:, 0] = False
    users, items = inter.nonzero()
    held = rng.rand(len(users)) < 0.2
    return (users[~held], items[~held]), (users[held], items[held])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    (train_u, train_i), (test_u, test_i) = make_interactions(seed)
    dataset = Dataset(train_u, train_i, NUM_USERS + 1, NUM_ITEMS + 1)
    config = CONFIG

    model = LightGCN(config, dataset, bug=bug)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"])

    used = [set() for _ in range(NUM_USERS + 1)]
    for u, i in zip(train_u, train_i):
        used[u].add(i)

    def sample_negatives(users):
        neg = np.empty(len(users), dtype=np.int64)
        for k, u in enumerate(users):
            j = rng.randint(1, NUM_ITEMS + 1)
            while j in used[u]:
                j = rng.randint(1, NUM_ITEMS + 1)
            neg[k] = j
        return neg

    def epoch_batches():
        while True:
            order = rng.permutation(len(train_u))
            for start in range(0, len(order), TRAIN_BATCH_SIZE):
                idx = order[start:start + TRAIN_BATCH_SIZE]
                users = train_u[idx]
                yield {
                    "user_id": torch.from_numpy(users).long(),
                    "item_id": torch.from_numpy(train_i[idx]).long(),
                    "neg_item_id": torch.from_numpy(sample_negatives(users)).long(),
                }

    batches = epoch_batches()
    probe_interaction = next(epoch_batches())

    def train_step():
        # one batch of Trainer._train_epoch
        model.train()
        interaction = next(batches)
        optimizer.zero_grad()
        losses = model.calculate_loss(interaction)
        loss = losses
        loss.backward()
        optimizer.step()
        return loss.detach()

    held_out = [set() for _ in range(NUM_USERS + 1)]
    for u, i in zip(test_u, test_i):
        held_out[u].add(i)
    eval_users = torch.tensor([u for u in range(1, NUM_USERS + 1) if held_out[u]])

    def eval_fn(model, batch):
        # full-sort evaluation: Recall@10 of the held-out items, the training items masked out
        model.eval()
        with torch.no_grad():
            scores = model.full_sort_predict({"user_id": eval_users}).view(len(eval_users), -1)
        scores[:, 0] = -np.inf
        for row, u in enumerate(eval_users.tolist()):
            scores[row, list(used[u])] = -np.inf
        top = scores.topk(10, dim=1).indices
        recalls = [len(held_out[u] & set(top[row].tolist())) / len(held_out[u])
                   for row, u in enumerate(eval_users.tolist())]
        return float(np.mean(recalls))

    return Program(name="recbole_lightgcn", model=model, batch=((), probe_interaction),
                   loss_fn=model.loss_from_embeddings, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the BPR difference taken as neg - pos (classic sign slip): the model learns to rank sampled negatives first.
    Bug("bpr_sign_flipped", functools.partial(_build, bug="bpr_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # item ids not offset by n_users when the bipartite adjacency is built (classic): interactions become
    # user-user edges, the propagated item embeddings never see their users.
    Bug("item_ids_not_offset", functools.partial(_build, bug="item_ids_not_offset"), "learning_ledger",
        ("DEPENDENCY",)),
    # calculate_loss no longer clears the full-sort cache (restore_user_e / restore_item_e, kept for evaluation
    # speed): every evaluation after the first scores with the embeddings of the first one.
    Bug("prediction_cache_not_cleared", functools.partial(_build, bug="prediction_cache_not_cleared"), "six_claims",
        ("EVALUATION",)),
]
