# ruff: noqa: UP008, B006, RUF059, PLR0402
"""DeepMatch-Torch's FM matching model as ``examples/run_fm_dssm.py`` trains it: a Lightning module whose user tower
(user id, gender, age, occupation, zip, the mean-pooled watch history sharing the movie embedding) and item tower
(movie id) give field embeddings scored by a factorization machine plus a linear part, fitted by ``F.mse_loss`` to 1
for the next watched movie and 0 for 3 sampled unwatched ones, Adam.

Source: https://github.com/bbruceyuan/DeepMatch-Torch
Commit: 498a6fd8e9af23a4c712b5b6f3aa33e8fd6fa222
Files: ``examples/run_fm_dssm.py``, ``examples/preprocess.py``, ``deepmatch_torch/`` (``models/fm.py``,
``models/PLBaseModel.py``, ``layers/interaction.py``, ``inputs.py``); from https://github.com/shenweichen/DeepCTR-Torch
(f6854257b1fc29caab655ce72c6b5528b7432574) the input pieces it imports (``inputs.py``, ``layers/sequence.py``)
License: MIT (Copyright (c) 2022 Chaofa Yuan; LICENSES/bbruceyuan-DeepMatch-Torch.txt); DeepCTR-Torch: Apache-2.0
Domain: recommendation, two-tower matching (FM on user/item field embeddings, sampled negatives)

Kept as written: the script (label encoding + 1, user profile, SEQ_LEN 50, negsample 3, embedding_dim 8, feature
columns, ``FM(..., optimizer='Adam')``), ``gen_data_set``, ``gen_model_input``, ``FM``, ``PLBaseModel`` (default
``criterion=F.mse_loss``, Adam at its default lr), ``Linear``, ``FactorizationMachines``, lookups and pooling.

Deviations from the original:
- no MovieLens (nor the repository's sample file): a synthetic table with the same columns from ``seed``: 60 users,
  120 movies in 6 clusters, each user watching 10 of their cluster's (popularity 1/rank) and 2 others;
- no sklearn / tensorflow / tqdm: ``LabelEncoder`` is ``np.unique(return_inverse=True)``, keras' ``pad_sequences``
  ('post', 'post') is written out; tqdm and prints dropped; no GPU (batch_size 128 kept: the model is tiny);
- branches unused here (dense features, hashing, scaler, scheduler, cross-entropy), the registered-but-never-added
  L2 terms, ``batches_seen`` and the retrieval part (``full_predict``) are dropped; ``list(filter(...))`` column
  selections are written as comprehensions;
- ``model.fit`` is driven by hand (``_lightning_loop.automatic_step``, one batch per ``train_step``) with a barebones
  ``Trainer`` connected to the module and given the loader (``training_step`` reads its ``train_dataloader``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import warnings
from collections import OrderedDict, namedtuple

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _lightning_loop import automatic_step


# deepctr_torch/inputs.py
class SparseFeat(namedtuple('SparseFeat', ['name', 'vocabulary_size', 'embedding_dim', 'use_hash', 'dtype',
                                           'embedding_name', 'group_name'])):
    def __new__(cls, name, vocabulary_size, embedding_dim=4, use_hash=False, dtype="int32", embedding_name=None,
                group_name="default_group"):
        if embedding_name is None:
            embedding_name = name
        return super(SparseFeat, cls).__new__(cls, name, vocabulary_size, embedding_dim, use_hash, dtype, embedding_name,
                                              group_name)


class VarLenSparseFeat(namedtuple('VarLenSparseFeat', ['sparsefeat', 'maxlen', 'combiner', 'length_name'])):
    name = property(lambda self: self.sparsefeat.name)  # (port) the properties read here; no __new__/__slots__/__hash__
    vocabulary_size = property(lambda self: self.sparsefeat.vocabulary_size)
    embedding_dim = property(lambda self: self.sparsefeat.embedding_dim)
    embedding_name = property(lambda self: self.sparsefeat.embedding_name)


def build_input_features(feature_columns):
    features = OrderedDict()
    start = 0
    for feat in feature_columns:
        feat_name = feat.name
        if feat_name in features:
            continue
        if isinstance(feat, SparseFeat):
            features[feat_name] = (start, start + 1)
            start += 1
        elif isinstance(feat, VarLenSparseFeat):
            features[feat_name] = (start, start + feat.maxlen)
            start += feat.maxlen
            if feat.length_name is not None and feat.length_name not in features:
                features[feat.length_name] = (start, start + 1)
                start += 1
    return features


def varlen_embedding_lookup(X, embedding_dict, sequence_input_dict, varlen_sparse_feature_columns):
    varlen_embedding_vec_dict = {}
    for fc in varlen_sparse_feature_columns:
        feature_name = fc.name
        embedding_name = fc.embedding_name
        lookup_idx = sequence_input_dict[feature_name]
        varlen_embedding_vec_dict[feature_name] = embedding_dict[embedding_name](X[:, lookup_idx[0]:lookup_idx[1]].long())
    return varlen_embedding_vec_dict


def get_varlen_pooling_list(embedding_dict, features, feature_index, varlen_sparse_feature_columns, device, bug=None):
    varlen_sparse_embedding_list = []
    for feat in varlen_sparse_feature_columns:
        seq_emb = embedding_dict[feat.name]
        seq_length = features[:, feature_index[feat.length_name][0]:feature_index[feat.length_name][1]].long()
        if bug == "history_length_ignored":
            seq_length = torch.full_like(seq_length, seq_emb.shape[1])
        emb = SequencePoolingLayer(mode=feat.combiner, supports_masking=False, device=device)([seq_emb, seq_length])
        varlen_sparse_embedding_list.append(emb)
    return varlen_sparse_embedding_list


# deepctr_torch/layers/sequence.py
class SequencePoolingLayer(nn.Module):
    def __init__(self, mode='mean', supports_masking=False, device='cpu'):
        super(SequencePoolingLayer, self).__init__()
        self.mode = mode
        self.eps = torch.FloatTensor([1e-8]).to(device)

    def _sequence_mask(self, lengths, maxlen=None, dtype=torch.bool):
        row_vector = torch.arange(0, maxlen, 1).to(lengths.device)
        matrix = torch.unsqueeze(lengths, dim=-1)
        mask = row_vector < matrix
        return mask  # (port) the no-op ``mask.type(dtype)`` left out

    def forward(self, seq_value_len_list):
        uiseq_embed_list, user_behavior_length = seq_value_len_list  # [B, T, E], [B, 1]
        mask = self._sequence_mask(user_behavior_length, maxlen=uiseq_embed_list.shape[1], dtype=torch.float32)  # [B, 1, maxlen]
        mask = torch.transpose(mask, 1, 2)  # [B, maxlen, 1]
        embedding_size = uiseq_embed_list.shape[-1]
        mask = torch.repeat_interleave(mask, embedding_size, dim=2)  # [B, maxlen, E]
        hist = uiseq_embed_list * mask.float()
        hist = torch.sum(hist, dim=1, keepdim=False)
        if self.mode == 'mean':
            hist = torch.div(hist, user_behavior_length.type(torch.float32) + self.eps)
        hist = torch.unsqueeze(hist, dim=1)
        return hist


# deepmatch_torch/inputs.py
def create_embedding_matrix(feature_columns, init_std=0.001, linear=False, sparse=False, device='cpu'):
    sparse_feature_columns = [x for x in feature_columns if isinstance(x, SparseFeat)]
    varlen_sparse_feature_columns = [x for x in feature_columns if isinstance(x, VarLenSparseFeat)]
    embedding_dict = nn.ModuleDict(
        {feat.embedding_name: nn.Embedding(feat.vocabulary_size, feat.embedding_dim if not linear else 1, sparse=sparse)
         for feat in sparse_feature_columns + varlen_sparse_feature_columns})
    for tensor in embedding_dict.values():
        nn.init.normal_(tensor.weight, mean=0, std=init_std)
    return embedding_dict


# deepmatch_torch/layers/interaction.py
class FactorizationMachines(nn.Module):
    def forward(self, X):
        square_of_sum = torch.pow(torch.sum(X, dim=1,), 2)
        sum_of_square = torch.sum(torch.pow(X, 2), dim=1,)
        return 0.5 * torch.sum(square_of_sum - sum_of_square, dim=1, keepdim=True)


# deepmatch_torch/models/PLBaseModel.py
class Linear(nn.Module):
    def __init__(self, feature_columns, feature_index, init_std=0.0001, device='cpu', bug=None):
        super(Linear, self).__init__()
        self.my_device = device
        self.feature_index = feature_index
        self.bug = bug
        self.sparse_feature_columns = [x for x in feature_columns if isinstance(x, SparseFeat)]
        self.varlen_sparse_feature_columns = [x for x in feature_columns if isinstance(x, VarLenSparseFeat)]
        self.embedding_dict = create_embedding_matrix(feature_columns, init_std, linear=True, sparse=False,)
        for tensor in self.embedding_dict.values():
            nn.init.normal_(tensor.weight, mean=0, std=init_std)

    def forward(self, X, sparse_feat_refine_weight=None):
        sparse_embedding_list = [self.embedding_dict[feat.embedding_name](
            X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]].long()) for
            feat in self.sparse_feature_columns]
        sequence_embed_dict = varlen_embedding_lookup(X, self.embedding_dict, self.feature_index,
                                                      self.varlen_sparse_feature_columns)
        varlen_embedding_list = get_varlen_pooling_list(sequence_embed_dict, X, self.feature_index,
                                                        self.varlen_sparse_feature_columns, self.my_device, self.bug)
        sparse_embedding_list += varlen_embedding_list
        linear_logit = torch.zeros([X.shape[0], 1]).to(sparse_embedding_list[0].device)
        if len(sparse_embedding_list) > 0:
            sparse_embedding_cat = torch.cat(sparse_embedding_list, dim=-1)
            sparse_feat_logit = torch.sum(sparse_embedding_cat, dim=-1, keepdim=False)
            linear_logit += sparse_feat_logit
        return linear_logit


class PLBaseModel(LightningModule):
    def __init__(self, user_feature_columns, item_feature_columns, optimizer=None, optimizer_args=None,
                 criterion=F.mse_loss, criterion_args=None, scheduler=None, scheduler_args=None, scaler=None,
                 config={}, bug=None, **kwargs):
        super().__init__()
        self.bug = bug
        self.user_feature_columns = user_feature_columns
        self.item_feature_columns = item_feature_columns
        self.config = config
        self.config.update(kwargs)
        self.mode = self.config.get('mode', 'train')
        self.linear_feature_columns = self.dnn_feature_columns = user_feature_columns + item_feature_columns
        self.feature_index = build_input_features(self.linear_feature_columns)
        self.embedding_dict = create_embedding_matrix(self.dnn_feature_columns, self.config.get("init_std"), sparse=False, )
        self.linear_model = Linear(self.linear_feature_columns, self.feature_index, device=self.device, bug=bug)
        self.criterion = criterion
        self.optimizer = self.init_optimizer(optimizer)

    def _step(self, batch, batch_idx, num_batches):
        x, y = batch  # (port) prepare_batch returns the batch
        pred = self(x)
        loss = self.criterion(pred, y)  # (port) the cross-entropy and criterion_args branches are unused here
        return loss

    def training_step(self, batch, batch_idx):
        train_loss = self._step(batch, batch_idx, len(self.trainer.train_dataloader))
        self.log("train_loss", train_loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return train_loss

    def configure_optimizers(self):
        return self.optimizer(self.parameters())  # (port) ``optimizer = ...; return optimizer`` (no scheduler given)

    def init_optimizer(self, optimizer_or_name):
        if isinstance(optimizer_or_name, str):
            return {"Adam": torch.optim.Adam, "SGD": torch.optim.SGD}[optimizer_or_name]
        return optimizer_or_name

    def construct_input(self, x, y):
        if isinstance(x, dict):
            x = [x[feature] for feature in self.feature_index]
        for i in range(len(x)):
            if len(x[i].shape) == 1:
                x[i] = np.expand_dims(x[i], axis=1)
        x = torch.from_numpy(np.concatenate(x, axis=-1))
        y = torch.tensor(y, dtype=torch.float32)
        return x, y

    def input_from_feature_columns(self, X, feature_columns, embedding_dict, support_dense=True):
        sparse_feature_columns = [x for x in feature_columns if isinstance(x, SparseFeat)]
        varlen_sparse_feature_columns = [x for x in feature_columns if isinstance(x, VarLenSparseFeat)]
        sparse_embedding_list = [embedding_dict[feat.embedding_name](
            X[:, self.feature_index[feat.name][0]:self.feature_index[feat.name][1]].long()) for
            feat in sparse_feature_columns]
        sequence_embed_dict = varlen_embedding_lookup(X, self.embedding_dict, self.feature_index, varlen_sparse_feature_columns)
        varlen_sparse_embedding_list = get_varlen_pooling_list(sequence_embed_dict, X, self.feature_index,
                                                               varlen_sparse_feature_columns, self.device, self.bug)
        return sparse_embedding_list + varlen_sparse_embedding_list, []  # (port) no dense features


# deepmatch_torch/models/fm.py
class FM(PLBaseModel):
    def __init__(self, user_feature_columns, item_feature_columns, l2_reg_linear=0.00001, l2_reg_embedding=0.00001,
                 init_std=0.0001, seed=1024, task='binary', device='cpu', gpus=None, **kwargs):
        super().__init__(user_feature_columns, item_feature_columns, l2_reg_linear=l2_reg_linear,
                         l2_reg_embedding=l2_reg_embedding, init_std=init_std, seed=seed, task=task, device=device, gpus=gpus,
                         **kwargs)
        self.fm = FactorizationMachines()

    def forward(self, X):
        if self.mode == 'train':
            linear_logit = self.linear_model(X)
        user_fm_input = self.user_tower(X)
        item_fm_input = self.item_tower(X)
        if self.mode == "user_representation":
            return user_fm_input
        if self.mode == "item_representation":
            return item_fm_input
        fm_input = torch.cat([user_fm_input, item_fm_input], dim=1)
        fm_logit = self.fm(fm_input)
        res = linear_logit + fm_logit
        res = res.squeeze()
        return res

    def item_tower(self, X):
        if self.mode == "user_representation":
            return None
        item_columns = self.user_feature_columns if self.bug == "item_tower_from_user_columns" else self.item_feature_columns
        sparse_embedding_list, dense_value_list = self.input_from_feature_columns(X, item_columns, self.embedding_dict)
        fm_input = torch.cat(sparse_embedding_list, dim=1)
        return fm_input

    def user_tower(self, X):
        if self.mode == "item_representation":
            return None
        sparse_embedding_list, dense_value_list = self.input_from_feature_columns(X, self.user_feature_columns,
                                                                                  self.embedding_dict)
        fm_input = torch.cat(sparse_embedding_list, dim=1)
        return fm_input


# examples/preprocess.py
def gen_data_set(data, negsample=0, bug=None):
    data.sort_values("timestamp", inplace=True)
    item_ids = data['movie_id'].unique()
    train_set, test_set = [], []
    for reviewerID, hist in data.groupby('user_id'):
        pos_list = hist['movie_id'].tolist()
        rating_list = hist['rating'].tolist()
        if negsample > 0:
            candidate_set = list(set(item_ids) - set(pos_list))
            neg_list = np.random.choice(candidate_set, size=len(pos_list)*negsample, replace=True)
        for i in range(1, len(pos_list)):
            hist = pos_list[:i]
            if i != len(pos_list) - 1:
                train_set.append((reviewerID, hist[::-1], pos_list[i], 1, len(hist[::-1]), rating_list[i]))
                for negi in range(negsample):
                    train_set.append((reviewerID, hist[::-1], neg_list[i*negsample+negi], 0, len(hist[::-1])))
            else:
                test_set.append((reviewerID, hist[::-1], pos_list[i], 1, len(hist[::-1]), rating_list[i]))
    labels_before_shuffle = [line[3] for line in train_set]
    random.shuffle(train_set)
    random.shuffle(test_set)
    if bug == "labels_misaligned":
        train_set = [line[:3] + (label,) + line[4:] for line, label in zip(train_set, labels_before_shuffle)]
    return train_set, test_set


def pad_sequences(sequences, maxlen, padding='post', truncating='post', value=0):
    out = np.full((len(sequences), maxlen), value, dtype=np.int32)
    for i, seq in enumerate(sequences):
        seq = list(seq)[:maxlen]
        out[i, :len(seq)] = seq
    return out


def gen_model_input(train_set, user_profile, seq_max_len):
    train_uid = np.array([line[0] for line in train_set])
    train_seq = [line[1] for line in train_set]
    train_iid = np.array([line[2] for line in train_set])
    train_label = np.array([line[3] for line in train_set])
    train_hist_len = np.array([line[4] for line in train_set])
    train_seq_pad = pad_sequences(train_seq, maxlen=seq_max_len, padding='post', truncating='post', value=0)
    train_model_input = {"user_id": train_uid, "movie_id": train_iid, "hist_movie_id": train_seq_pad, "hist_len": train_hist_len}
    for key in ["gender", "age", "occupation", "zip"]:
        train_model_input[key] = user_profile.loc[train_model_input['user_id']][key].values
    return train_model_input, train_label


def make_ratings(seed, n_users=60, n_movies=120, n_clusters=6, per_user=12):
    """(port) A MovieLens-shaped table: each user watches mostly movies of their own cluster."""
    rng = np.random.default_rng(seed)
    movie_ids = rng.permutation(np.arange(1, 4000))[:n_movies]
    cluster = np.arange(n_movies) % n_clusters
    rows = []
    for u in range(n_users):
        own, other = np.flatnonzero(cluster == u % n_clusters), np.flatnonzero(cluster != u % n_clusters)
        pop = 1.0 / np.arange(1, len(own) + 1)  # a few popular movies per cluster
        watched = np.concatenate([rng.choice(own, 10, replace=False, p=pop / pop.sum()), rng.choice(other, 2, replace=False)])
        rng.shuffle(watched)
        profile = (rng.choice(["F", "M"]), rng.choice([1, 18, 25, 35, 45, 50, 56]), rng.integers(21), rng.integers(10000, 99999))
        for t, m in enumerate(watched):
            rows.append((5000 + u * 7, movie_ids[m], int(rng.integers(1, 6)), 978300000 + 1000 * t + u) + profile)
    return pd.DataFrame(rows, columns=["user_id", "movie_id", "rating", "timestamp", "gender", "age", "occupation", "zip"])


def _build(seed, bug=None):
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    data = make_ratings(seed)
    SEQ_LEN, negsample, embedding_dim = 50, 3, 8
    features = ['user_id', 'movie_id', 'gender', 'age', 'occupation', 'zip']
    feature_max_idx = {}
    for feature in features:
        data[feature] = np.unique(data[feature], return_inverse=True)[1] + 1  # LabelEncoder().fit_transform + 1
        feature_max_idx[feature] = data[feature].max() + 1
    user_profile = data[["user_id", "gender", "age", "occupation", "zip"]].drop_duplicates('user_id')
    user_profile.set_index("user_id", inplace=True)
    train_set, test_set = gen_data_set(data, negsample, bug=bug)
    train_model_input, train_label = gen_model_input(train_set, user_profile, SEQ_LEN)
    user_feature_columns = [SparseFeat(f, feature_max_idx[f], embedding_dim) for f in ["user_id", "gender", "age",
                                                                                "occupation", "zip"]] + [
        VarLenSparseFeat(SparseFeat('hist_movie_id', feature_max_idx['movie_id'], embedding_dim, embedding_name="movie_id"),
                         SEQ_LEN, 'mean', 'hist_len')]
    item_feature_columns = [SparseFeat('movie_id', feature_max_idx['movie_id'], embedding_dim)]
    model = FM(user_feature_columns, item_feature_columns, optimizer='Adam', config={}, bug=bug)  # (port) no gpus
    x, y = model.construct_input(train_model_input, train_label)  # model.fit(..., max_epochs=1, batch_size=128)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
    with warnings.catch_warnings(action="ignore"):
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=1)
    trainer.strategy.connect(model)
    trainer.fit_loop._combined_loader, model.trainer = CombinedLoader(loader), trainer
    optimizer = model.configure_optimizers()
    return Program(name="deepmatchtorch_fm", model=model, batch=(x[:128], y[:128]), loss_fn=F.mse_loss,
                   optimizer=optimizer, train_step=automatic_step(model, optimizer, loader), loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the labels read from the training set before it was shuffled, the features after (labels misaligned).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # classic copy-paste slip: the item tower built from the user feature columns (the FM never sees the movie).
    Bug("item_tower_from_user_columns", functools.partial(_build, bug="item_tower_from_user_columns"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the history length not used by the mean pooling, so the padding's embedding (index 0) is averaged in.
    Bug("history_length_ignored", functools.partial(_build, bug="history_length_ignored"), "learning_ledger",
        ("DEPENDENCY",)),
]
