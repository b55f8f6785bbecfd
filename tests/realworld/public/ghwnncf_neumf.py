# ruff: noqa: C408
"""Neural matrix factorization (NeuMF: GMF + MLP towers, He et al. 2017) on implicit feedback with sampled
negatives, from ghwn/neural-collaborative-filtering.

Source: https://github.com/ghwn/neural-collaborative-filtering
Commit: 1be33ac0c71a8ef0a57d104f7bb3d9b855ed560a
Files: ``models.py``, ``datasets.py``, ``train.py``
License: MIT (Copyright (c) 2021 Jihwan Lim; full text in LICENSES/ghwn-neural-collaborative-filtering.txt)
Domain: recommendation, collaborative filtering (implicit feedback, pointwise BCE with 4 sampled negatives per
interaction)

Kept as written: ``GMF`` (user/item embeddings, elementwise product, ``Linear(latent_dim, 1)`` and a sigmoid),
``MLP`` (its own embeddings, concatenation, ``n_mlp_layers`` halving Linear + ReLU layers), ``NeuMF`` (the GMF's
sigmoid output concatenated with the MLP's output, ``Linear(mlp_out_dim + 1, 1)``, sigmoid), ``MovieLensDataset``'s
training data (ids mapped to indices in order of appearance, the interaction matrix, ``num_negatives`` = 4
negatives per interaction drawn with ``np.random.randint`` until an unobserved item), and ``train``'s defaults
(gmf and mlp latent dims 32, 4 MLP layers, ``BCELoss``, ``Adam`` over all parameters, ``DataLoader(shuffle=True)``) and loop
body (zero_grad, ``neumf(user, item).squeeze()``, loss, backward, step).

Deviations from the original:
- MovieLens (``ml-latest-small``, downloaded by ``datasets.py``) is not here: ``ratings.csv`` is replaced by
  synthetic ``(userId, movieId, rating, timestamp)`` rows made from ``seed``: 150 users and 200 movies with hidden
  8-d tastes, each user rating 12 movies drawn with probability rising with the taste match. The loader of the
  file (pandas, whose ``Series.iteritems`` the script calls is gone from pandas 2) is replaced by the same
  ``drop_duplicates`` order of ids written out in plain Python.
- sizes for 2 CPU cores: batch_size 256 -> 128; Adam's lr 1e-4 -> 1e-3 so that the 30 steps of the self-check
  show the loss falling (the original runs 200 epochs).
- ``train_step`` is one step of the epoch loop (the next epoch starts when the loader runs out) and returns the
  loss; the progress prints, the per-epoch average and ``torch.save`` of the model are dropped; ``eval_fn`` is the
  BCE on 200 held-out (user, item, label) pairs built the same way (the original has no evaluation).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# ---------------------------------------------------------------------------------------------------- models.py
class GMF(torch.nn.Module):
    def __init__(self, n_users, n_items, latent_dim):
        super().__init__()
        self.user_embedding_layer = torch.nn.Embedding(n_users, latent_dim)
        self.item_embedding_layer = torch.nn.Embedding(n_items, latent_dim)
        self.h = torch.nn.Linear(latent_dim, 1)
        self.a = torch.nn.Sigmoid()

    def forward(self, user_vector, item_vector):
        user_embedding = self.user_embedding_layer(user_vector)
        item_embedding = self.item_embedding_layer(item_vector)
        mf = torch.mul(user_embedding, item_embedding)
        out = self.a(self.h(mf))
        return out


class MLP(torch.nn.Module):
    def __init__(self, n_users, n_items, latent_dim, n_mlp_layers):
        super().__init__()
        self.user_embedding_layer = torch.nn.Embedding(n_users, latent_dim)
        self.item_embedding_layer = torch.nn.Embedding(n_items, latent_dim)

        self.mlp_layers = torch.nn.ModuleList()
        units = latent_dim * 2
        for _ in range(n_mlp_layers):
            self.mlp_layers.append(torch.nn.Linear(units, units // 2))
            self.mlp_layers.append(torch.nn.ReLU())
            units //= 2

    def forward(self, user_vector, item_vector):
        user_embedding = self.user_embedding_layer(user_vector)
        item_embedding = self.item_embedding_layer(item_vector)
        concatenated = torch.cat([user_embedding, item_embedding], dim=1)
        out = concatenated
        for mlp_layer in self.mlp_layers:
            out = mlp_layer(out)
        return out


class NeuMF(torch.nn.Module):
    def __init__(self, n_users, n_items, gmf_latent_dim, mlp_latent_dim, n_mlp_layers):
        super().__init__()
        self.gmf = GMF(n_users, n_items, gmf_latent_dim)
        self.mlp = MLP(n_users, n_items, mlp_latent_dim, n_mlp_layers)
        mlp_out_dim = mlp_latent_dim // (2 ** (n_mlp_layers - 1))
        self.neumf_layer = torch.nn.Linear(mlp_out_dim + 1, 1)

    def forward(self, user_vector, item_vector):
        gmf_out = self.gmf(user_vector, item_vector)
        mlp_out = self.mlp(user_vector, item_vector)
        concatenated = torch.cat([gmf_out, mlp_out], dim=1)
        neumf = self.neumf_layer(concatenated)
        out = torch.sigmoid(neumf)
        return out


# -------------------------------------------------------------------------------------------------- datasets.py
class MovieLensDataset(torch.utils.data.Dataset):
    def __init__(self, num_negatives, dataset, bug=None):
        super().__init__()
        df_values = dataset  # (port) the ratings.csv rows
        user_ids = list(dict.fromkeys(r[0] for r in df_values))  # (port) df["userId"].drop_duplicates()
        movie_ids = list(dict.fromkeys(r[1] for r in df_values))
        user_id_to_index = {user_id: index for index, user_id in enumerate(user_ids)}
        movie_id_to_index = {movie_id: index for index, movie_id in enumerate(movie_ids)}

        self.num_users = len(user_ids)
        self.num_items = len(movie_ids)

        matrix = np.zeros((self.num_users, self.num_items), dtype=np.float32)
        interactions = []
        for user_id, movie_id, rating, timestamp in df_values:
            u = user_id_to_index[user_id]
            i = movie_id_to_index[movie_id]
            matrix[u, i] = 1.0
            interactions.append((u, i))

        self.user_inputs = []
        self.item_inputs = []
        self.labels = []

        for u, i in interactions:
            if matrix[u, i] == 1.0:
                self.user_inputs.append(u)
                self.item_inputs.append(i)
                self.labels.append(1)

                for _ in range(num_negatives):
                    j = np.random.randint(self.num_items)
                    while matrix[u, j] != 0.0:
                        j = np.random.randint(self.num_items)
                    self.user_inputs.append(u)
                    self.item_inputs.append(j)
                    self.labels.append(0)
        if bug == "labels_shuffled_apart":
            np.random.shuffle(self.labels)
        self.user_id_to_index, self.movie_id_to_index, self.matrix = user_id_to_index, movie_id_to_index, matrix

    def __len__(self):
        return len(self.user_inputs)

    def __getitem__(self, index):
        user_input = self.user_inputs[index]
        item_input = self.item_inputs[index]
        label = self.labels[index]
        return (
            torch.tensor(user_input, dtype=torch.long),
            torch.tensor(item_input, dtype=torch.long),
            torch.tensor(label, dtype=torch.float),
        )


# ------------------------------------------------------------------------------------------------ (port) data
def synthetic_ratings(rng, n_users=150, n_items=200, per_user=13):
    """ratings.csv rows: each user rates ``per_user`` movies drawn by a softmax of the taste match."""
    pu, qi = rng.normal(size=(n_users, 8)), rng.normal(size=(n_items, 8))
    user_ids = rng.permutation(np.arange(1, 10 * n_users))[:n_users]
    movie_ids = rng.permutation(np.arange(1, 50 * n_items))[:n_items]
    rows = []
    for u in range(n_users):
        s = pu[u] @ qi.T
        p = np.exp(s - s.max())
        items = rng.choice(n_items, size=per_user, replace=False, p=p / p.sum())
        for t, i in enumerate(items):
            rows.append((int(user_ids[u]), int(movie_ids[i]), float(rng.integers(3, 6)), 964982703 + t))
    return rows


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    args = dict(num_negatives=4, gmf_latent_dim=32, mlp_latent_dim=32, batch_size=128, num_mlp_layers=4,
                learning_rate=1e-3, num_workers=0)  # (port) batch_size 256, learning_rate 1e-4
    rows = synthetic_ratings(rng)
    held = [rows[k] for k in range(12, len(rows), 13)]  # (port) one rating per user held out
    train_rows = [r for k, r in enumerate(rows) if k % 13 != 12]
    device = "cpu"

    dataset = MovieLensDataset(args['num_negatives'], train_rows, bug=bug)
    data_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args['batch_size'],
        shuffle=True,
        num_workers=args['num_workers'],
        generator=torch.Generator().manual_seed(seed),
    )

    neumf = NeuMF(
        dataset.num_users,
        dataset.num_items,
        args['gmf_latent_dim'],
        args['mlp_latent_dim'],
        args['num_mlp_layers'],
    ).to(device)

    criterion = torch.nn.BCELoss()
    if bug == "optimizer_over_mlp_only":
        optimizer = torch.optim.Adam(list(neumf.mlp.parameters()) + list(neumf.neumf_layer.parameters()),
                                     lr=args['learning_rate'])
    else:
        optimizer = torch.optim.Adam(neumf.parameters(), lr=args['learning_rate'])

    st = {"it": iter(data_loader)}

    def train_step():
        try:
            user_vector, item_vector, labels = next(st["it"])
        except StopIteration:
            st["it"] = iter(data_loader)
            user_vector, item_vector, labels = next(st["it"])
        user_vector = user_vector.to(device)
        item_vector = item_vector.to(device)
        labels = labels.to(device)

        if bug != "no_zero_grad":
            optimizer.zero_grad()

        outputs = neumf(user_vector, item_vector).squeeze()
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    # held-out pairs: each held-out rating (of a movie seen in training) and 4 unobserved movies
    eu, ei, el = [], [], []
    for user_id, movie_id, _, _ in held:
        if movie_id not in dataset.movie_id_to_index:
            continue
        u, i = dataset.user_id_to_index[user_id], dataset.movie_id_to_index[movie_id]
        eu.append(u), ei.append(i), el.append(1.)
        for j in rng.choice(np.flatnonzero(dataset.matrix[u] == 0), size=4, replace=False):
            eu.append(u), ei.append(int(j)), el.append(0.)
    ev = (torch.tensor(eu), torch.tensor(ei), torch.tensor(el))

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            return float(criterion(model(ev[0], ev[1]).squeeze(), ev[2]))

    u0, i0, l0 = next(iter(torch.utils.data.DataLoader(dataset, batch_size=args['batch_size'], shuffle=False)))
    return Program(name="ghwnncf_neumf", model=neumf, batch=((u0, i0), l0),
                   loss_fn=lambda out, y: criterion(out.squeeze(), y), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the labels shuffled on their own after the dataset is built, apart from the (user, item) pairs.
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # classic: the optimizer built over the MLP tower and the output layer only; the GMF tower never moves.
    Bug("optimizer_over_mlp_only", functools.partial(_build, bug="optimizer_over_mlp_only"), "four_structures",
        ("gmf",)),
    # classic: optimizer.zero_grad() left out: the gradients pile up across steps.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
