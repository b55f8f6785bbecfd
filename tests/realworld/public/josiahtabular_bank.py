# ruff: noqa: UP008, UP006, UP035, RUF046, RUF059
"""Tabular neural network (categorical embeddings + batch-normed continuous inputs, BN feed-forward blocks) on
bank-marketing data, from josiahdavis/tabular.

Source: https://github.com/josiahdavis/tabular
Commit: 5b6586024ab014d255d7b0e298aaf2817b631893
Files: ``examples/train_neural_net/train_neural_net.ipynb``
License: Apache-2.0 (full text in LICENSES/josiahdavis-tabular.txt)
Domain: tabular, binary classification (bank term-deposit subscription: 9 categorical columns through
``nn.Embedding`` with ``min(50, (n+1)//2)`` dimensions and dropout, 6 continuous columns through ``BatchNorm1d``, a
Linear-ReLU-BatchNorm input mapper, two feed-forward blocks, a 2-way head; the model returns ``(logits,
cross_entropy)``; AdamW lr 3e-4, one random batch per step, a validation batch in eval mode after every step).

Kept as written: the column lists (``_CAT_COLS``, ``_CONT_COLS``, ``_TARGET_COL``), ``read_data``'s derived
``contacted_previously`` column, ``BankingData``, ``get_dataloader``, ``InputMapper``, ``FeedForward``,
``NeuralNetwork`` (out_size 100, dropout 0.1, 2 layers), the embedding-size rule, the optimizer, and the training
loop body (``model.train()``, ``next(iter(train_dataloader))``, forward, ``zero_grad(set_to_none=True)``,
``backward``, ``step``, then ``model.eval()`` and the validation batch under ``no_grad``).

Deviations from the original:
- data: ``bank-full.csv`` is replaced by a synthetic bank-marketing table made from ``seed`` (the same columns,
  with the original's cardinalities; ``y`` is "yes" with a logistic probability of a fixed rule over
  ``poutcome``, ``housing``, ``contact``, ``balance``, ``pdays`` and ``age``; ``duration``, which the original leaves
  out, is generated like the real column: longer calls for the "yes" rows). 1200 rows, split 80/20 with a
  ``numpy`` permutation in place of ``train_test_split``.
- scikit-learn is not installed here: ``OrdinalEncoder`` (sorted categories), ``StandardScaler`` and
  ``LabelEncoder`` in ``preproc_fit``/``preproc_transform`` are written out in numpy with the same fitted behaviour;
  the preprocessing works on a dict of numpy columns instead of a pandas DataFrame.
- sizes: batch size 400 -> 64.
- the DataLoaders shuffle with generators seeded by ``seed``; ``np.random.seed``/``torch.manual_seed`` take
  ``seed`` instead of 1516.
- ``train_step`` is one iteration of the ``for step in range(2000)`` loop and returns the training loss; the
  running-mean printing, plots and the XGBoost comparison are dropped. ``eval_fn`` is the loop's validation lines.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written. For
  ``train_mode_never_restored`` the build runs the loop body once (the notebook cell's first iteration), so the
  declared program is the one a user has after the first step.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from typing import List, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_CAT_COLS = ["marital", "education", "default", "poutcome", "contacted_previously", "housing", "loan", "contact", "job"]
_CONT_COLS = ["age", "balance", "day", "campaign", "pdays", "previous"]
_TARGET_COL = "y"

_CARDINALITY = {"marital": 3, "education": 4, "default": 2, "poutcome": 4, "housing": 2, "loan": 2, "contact": 3,
                "job": 12}


def synthetic_bank(seed, n=1200):
    rng = np.random.default_rng(seed)
    data = {col: np.array([f"{col}{v}" for v in rng.integers(0, k, size=n)]) for col, k in _CARDINALITY.items()}
    data["age"] = rng.integers(18, 90, size=n).astype(float)
    data["balance"] = np.round(rng.lognormal(6, 1.5, size=n) - 300)
    data["day"] = rng.integers(1, 32, size=n).astype(float)
    data["campaign"] = rng.integers(1, 10, size=n).astype(float)
    contacted = rng.random(n) < 0.3
    data["pdays"] = np.where(contacted, rng.integers(1, 400, size=n), -1).astype(float)
    data["previous"] = np.where(contacted, rng.integers(1, 6, size=n), 0).astype(float)
    score = (2.0 * (data["poutcome"] == "poutcome1") - 1.5 * (data["housing"] == "housing1")
             + 1.0 * (data["contact"] == "contact0") + 0.8 * (data["balance"] > 500)
             + 0.01 * (data["age"] - 50) + 0.004 * np.maximum(data["pdays"], 0) - 0.8)
    yes = rng.random(n) < 1 / (1 + np.exp(-2 * score))
    data["y"] = np.where(yes, "yes", "no")
    data["duration"] = np.round(np.where(yes, rng.normal(550, 120, size=n), rng.normal(220, 90, size=n)).clip(0))
    return data


def read_data(seed):
    data = synthetic_bank(seed)
    data["contacted_previously"] = data["pdays"] != -1
    data["positive_balance"] = data["balance"] > 0
    return data


def train_test_split(data, test_size, seed):
    n = len(data[_TARGET_COL])
    order = np.random.default_rng(seed).permutation(n)
    cut = int(round(n * (1 - test_size)))
    return ({k: v[order[:cut]] for k, v in data.items()}, {k: v[order[cut:]] for k, v in data.items()})


def preproc_fit(df, cont_cols=_CONT_COLS):
    # make_column_transformer((OrdinalEncoder(categories="auto"), _CAT_COLS), remainder="drop"), written out
    cat_preproc = {col: {v: i for i, v in enumerate(np.unique(df[col]))} for col in _CAT_COLS}
    # make_column_transformer((StandardScaler(), _CONT_COLS), remainder="drop"), written out
    cont_preproc = {col: (df[col].astype(float).mean(), df[col].astype(float).std()) for col in cont_cols}
    # LabelEncoder(), written out
    label_preproc = {v: i for i, v in enumerate(np.unique(df[_TARGET_COL]))}
    return cat_preproc, cont_preproc, label_preproc


def preproc_transform(df, cat_preproc, cont_preproc, label_preproc):
    X_cat_preprocess = np.stack([[cat_preproc[col][v] for v in df[col]] for col in _CAT_COLS], axis=1)
    X_cont_preprocess = np.stack([(df[col].astype(float) - m) / s for col, (m, s) in cont_preproc.items()], axis=1)
    y_preprocess = np.array([label_preproc[v] for v in df[_TARGET_COL]])

    return X_cat_preprocess, X_cont_preprocess, y_preprocess

class BankingData(Dataset):

    def __init__(self, X_cat, X_cont, y):
        self.X_cat = X_cat
        self.X_cont = X_cont
        self.y = y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        return self.X_cat[idx], self.X_cont[idx], self.y[idx]

def get_dataloader(df, batch_size: int, shuffle: bool, preprocs = Tuple, seed=0) -> DataLoader:
    X_cat, X_cont, y = preproc_transform(df, *preprocs)
    X_cat_tensor = torch.tensor(X_cat, dtype = torch.long)
    X_cont_tensor = torch.tensor(X_cont, dtype = torch.float32)
    y_tensor = torch.tensor(y, dtype = torch.long)

    dataset = BankingData(X_cat_tensor, X_cont_tensor, y_tensor)
    return DataLoader(dataset, batch_size = batch_size, shuffle=shuffle, generator=torch.Generator().manual_seed(seed))


class InputMapper(nn.Module):

    def __init__(self, num_cont_features: int, emb_input_outputs: List[Tuple[int,int]], out_size: int, dropout: float):
        super(InputMapper, self).__init__()
        self.category_input1 = nn.ModuleList([nn.Embedding(ni, nf) for ni,nf in emb_input_outputs])
        self.category_input2 = nn.Dropout(dropout)
        embeding_output_dim = sum([eio[1] for eio in emb_input_outputs])
        self.continuous_input = nn.BatchNorm1d(num_cont_features)
        self.combined_input = nn.Sequential(
            nn.Linear(embeding_output_dim + num_cont_features, out_size),
            nn.ReLU(),
            nn.BatchNorm1d(out_size),
        )

    def forward(self, X_cat, X_cont):
        X_cat = torch.cat([emb(X_cat[:,i]) for i,emb in enumerate(self.category_input1)], 1)
        X_cat = self.category_input2(X_cat)
        X_cont = self.continuous_input(X_cont)
        return self.combined_input(torch.cat([X_cat, X_cont], dim=1))

class FeedForward(nn.Module):

    def __init__(self, in_features, out_features):
        super(FeedForward, self).__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, out_features),
            nn.ReLU(),
            nn.BatchNorm1d(out_features)
        )

    def forward(self, x):
        return self.net(x)

class NeuralNetwork(nn.Module):

    def __init__(self, num_cont_features: int, emb_input_outputs: List[Tuple[int,int]], out_size: int, dropout: float, n_layers = 2, bug=None):
        super(NeuralNetwork, self).__init__()
        self.input = InputMapper(num_cont_features, emb_input_outputs, out_size, dropout)
        self.feedforward = nn.Sequential(*[FeedForward(out_size, out_size) for _ in range(n_layers)])
        self.output = nn.Linear(out_size, 2)
        self.bug = bug

    def forward(self, X_cat, X_cont, y):
        X = self.input(X_cat, X_cont)
        X = self.feedforward(X)
        logits = self.output(X)
        if self.bug == "cross_entropy_on_softmax":
            loss = F.cross_entropy(F.softmax(logits, dim=1), y)
        else:
            loss = F.cross_entropy(logits, y)
        return logits, loss


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    data = read_data(seed)
    train, valid = train_test_split(data, test_size = 0.2, seed=seed)

    cont_cols = _CONT_COLS + ["duration"] if bug == "duration_leaks_target" else _CONT_COLS
    preprocs = preproc_fit(train, cont_cols)

    train_dataloader = get_dataloader(train, batch_size=64, shuffle=True, preprocs = preprocs, seed=seed)
    valid_dataloader = get_dataloader(valid, batch_size=64, shuffle=True, preprocs = preprocs, seed=seed + 1)

    cat_szs = [len(np.unique(train[col])) for col in _CAT_COLS]
    emb_ios = [(size, min(50, (size+1)//2)) for size in cat_szs]

    model = NeuralNetwork(num_cont_features = len(cont_cols), emb_input_outputs = emb_ios, out_size = 100, dropout = 0.1, n_layers = 2, bug=bug)

    optimizer = torch.optim.AdamW(model.parameters(), lr = 3e-4)

    train_losses = []
    valid_losses = []

    def train_step():
        if bug != "train_mode_never_restored":
            model.train()
        xb_cat, xb_cont, yb = next(iter(train_dataloader))
        logits, loss = model(xb_cat, xb_cont, yb)

        train_losses.append(loss.item())

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            xb_cat_valid, xb_cont_valid, yb_valid = next(iter(valid_dataloader))
            logits_valid, loss_valid = model(xb_cat_valid, xb_cont_valid, yb_valid)

            valid_losses.append(loss_valid)
        return loss

    def eval_fn(model, batch):
        inputs, _ = batch
        model.eval()
        with torch.no_grad():
            logits_valid, loss_valid = model(**inputs)
        return loss_valid

    xb_cat, xb_cont, yb = next(iter(get_dataloader(train, batch_size=64, shuffle=True, preprocs=preprocs,
                                                   seed=seed + 2)))
    batch = ({"X_cat": xb_cat, "X_cont": xb_cont, "y": yb}, yb)
    if bug == "train_mode_never_restored":
        # the notebook's loop body ran once before the declared step: the model is left in eval mode.
        train_step()
    return Program(name="josiahtabular_bank", model=model, batch=batch, loss_fn=lambda out, _t: out[1],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic target leak of this very dataset: the call ``duration`` (known only after the call, and nearly
    # deciding ``y``) is added to the continuous columns.
    Bug("duration_leaks_target", functools.partial(_build, bug="duration_leaks_target"), "learning_ledger",
        ("TASK",)),
    # classic: cross_entropy applied to softmax probabilities instead of the logits.
    Bug("cross_entropy_on_softmax", functools.partial(_build, bug="cross_entropy_on_softmax"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: model.train() left out of the loop: after the first validation batch's model.eval() every training
    # step runs in eval mode (dropout off, BatchNorm on running statistics that never update).
    Bug("train_mode_never_restored", functools.partial(_build, bug="train_mode_never_restored"), "step_probe",
        ("input",)),
]
