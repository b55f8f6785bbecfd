# ruff: noqa: UP031, PLR0402, RUF012
"""TabSurvey's MLP on a binary tabular task (label-encoded categoricals + standardized numericals, 4-layer ReLU MLP,
``BCEWithLogitsLoss``, AdamW), from the benchmark code of "Deep Neural Networks and Tabular Data: A Survey".

Source: https://github.com/kathrinse/TabSurvey, Commit: 454b8b2445450c9cd58b6f1c60fab3e625f58bcd,
Files: ``models/mlp.py``, ``models/basemodel_torch.py`` (``BaseModelTorch.fit``), ``utils/load_data.py``,
``config/adult.yml``, ``config/best_params.yml`` (Adult / MLP).
License: MIT (Copyright (c) 2022 Kathrin Seßler, Tobias Leemann and Vadim Borisov; full text in
LICENSES/kathrinse-TabSurvey.txt).
Domain: tabular, binary classification (Adult-shaped data).

Kept as written: ``MLP_Model`` (input layer, ``n_layers - 1`` hidden ``Linear`` layers, ReLU, output layer, the
softmax only for ``task == "classification"``), the Adult best parameters (hidden_dim 47, n_layers 4,
learning_rate 8.4e-4), ``config/adult.yml`` (objective binary, num_classes 1, num_features 14, the categorical
indices, batch_size 128, val_batch_size 256, scale and target_encode on, one_hot_encode off), ``BaseModelTorch.fit``
(``optim.AdamW`` over ``model.parameters()``, ``nn.BCEWithLogitsLoss`` for binary with float targets, shuffled
``TensorDataset`` loaders, the loop body ``out = model(batch_X)``, ``out.squeeze()``, loss, zero_grad, backward,
step, and the per-epoch validation loss), and ``load_data``'s preprocessing (label encoding of the target and of
each categorical column, ``StandardScaler`` on the numerical columns).

Deviations from the original:
- the Adult download is replaced by synthetic Adult-shaped data made from ``seed``: 1,280 rows, 14 columns (the
  8 categorical columns at ``cat_idx`` with the configured cardinalities as string categories, 6 numerical),
  the target a noisy logistic rule of two numerical and two categorical columns, with the string labels
  ``"<=50K"`` / ``">50K"``; the first 1,024 rows train, the rest validate (train.py's 5-fold split is not run).
- sklearn is not installed: ``LabelEncoder`` and ``StandardScaler`` are written out in numpy (sorted classes;
  mean and population std).
- the loaders use ``num_workers=0`` and a ``torch.Generator`` seeded from ``seed``; cpu only (no DataParallel);
  ``np.float`` (removed from numpy) is ``float``.
- ``train_step`` is one iteration of ``fit``'s inner loop (the next training batch, restarting the shuffled
  loader at an epoch's end); ``eval_fn`` is ``fit``'s validation loss (under ``torch.no_grad``). The early stopping (model files), the loss
  histories and printing are dropped; 1000 epochs are not run.
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
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

SELF_CHECK_STEPS = 60


class args:
    """config/adult.yml (cpu)."""
    dataset = "Adult"
    objective = "binary"
    use_gpu = False
    data_parallel = False
    scale = True
    target_encode = True
    one_hot_encode = False
    batch_size = 128
    val_batch_size = 256
    num_classes = 1
    num_features = 14
    cat_idx = [1, 3, 5, 6, 7, 8, 9, 13]
    cat_dims = [9, 16, 7, 15, 6, 5, 2, 42]


params = {"hidden_dim": 47, "n_layers": 4, "learning_rate": 8.4e-4}   # config/best_params.yml, Adult, MLP


class MLP_Model(nn.Module):

    def __init__(self, n_layers, input_dim, hidden_dim, output_dim, task, bug=None):
        super().__init__()

        self.task = task
        self.bug = bug

        self.layers = nn.ModuleList()

        # Input Layer (= first hidden layer)
        self.input_layer = nn.Linear(input_dim, hidden_dim)

        # Hidden Layers (number specified by n_layers)
        self.layers.extend([nn.Linear(hidden_dim, hidden_dim) for _ in range(n_layers - 1)])

        # Output Layer
        self.output_layer = nn.Linear(hidden_dim, output_dim)

    def forward(self, x):
        x = F.relu(self.input_layer(x))

        # Use ReLU as activation for all hidden layers
        for layer in self.layers:
            x = F.relu(layer(x))

        # No activation function on the output
        x = self.output_layer(x)

        if self.task == "classification":
            x = F.softmax(x, dim=1)
        elif self.bug == "sigmoid_before_bce_with_logits":
            x = torch.sigmoid(x)

        return x


# ---- sklearn.preprocessing stand-ins (numpy) ----

class LabelEncoder:
    def fit_transform(self, y):
        self.classes_, out = np.unique(np.asarray(y), return_inverse=True)
        return out


class StandardScaler:
    def fit_transform(self, X):
        X = np.asarray(X, dtype=float)
        mean, std = X.mean(0), X.std(0)
        std[std == 0] = 1.0
        return (X - mean) / std


N_ROWS, N_TRAIN = 1280, 1024


def synthetic_adult(seed):
    """Adult-shaped raw data: object array of 14 columns and string labels."""
    rng = np.random.RandomState(seed)
    X = np.empty((N_ROWS, args.num_features), dtype=object)
    num_cols = [i for i in range(args.num_features) if i not in args.cat_idx]
    nums = rng.normal(size=(N_ROWS, len(num_cols))) * np.array([13, 1e5, 2.5, 7e3, 400, 12]) \
        + np.array([38, 1.9e5, 10, 1e3, 90, 40])
    for j, i in enumerate(num_cols):
        X[:, i] = nums[:, j]
    cats = []
    for i, d in zip(args.cat_idx, args.cat_dims):
        c = rng.randint(0, d, size=N_ROWS)
        cats.append(c)
        X[:, i] = np.array(["c%d_%d" % (i, v) for v in c], dtype=object)
    z = (nums[:, 0] - 38) / 13 + (nums[:, 2] - 10) / 2.5 + 1.5 * (cats[2] % 2) - 1.0 * (cats[6] == 1)
    p = 1 / (1 + np.exp(-2 * z))
    y = np.where(rng.uniform(size=N_ROWS) < p, ">50K", "<=50K").astype(object)
    return X, y


def load_data(seed):
    X, y = synthetic_adult(seed)

    # Preprocess target
    if args.target_encode:
        le = LabelEncoder()
        y = le.fit_transform(y)

    num_idx = []
    cat_dims = []

    # Preprocess data
    for i in range(args.num_features):
        if args.cat_idx and i in args.cat_idx:
            le = LabelEncoder()
            X[:, i] = le.fit_transform(X[:, i])

            # Setting this?
            cat_dims.append(len(le.classes_))

        else:
            num_idx.append(i)

    if args.scale:
        scaler = StandardScaler()
        X[:, num_idx] = scaler.fit_transform(X[:, num_idx])

    return X, y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    X_all, y_all = load_data(seed)
    X, y = X_all[:N_TRAIN], y_all[:N_TRAIN]
    X_val, y_val = X_all[N_TRAIN:], y_all[N_TRAIN:]

    model = MLP_Model(n_layers=params["n_layers"], input_dim=args.num_features,
                      hidden_dim=params["hidden_dim"], output_dim=args.num_classes,
                      task=args.objective, bug=bug)

    # MLP.fit
    X = np.array(X, dtype=float)
    X_val = np.array(X_val, dtype=float)

    # BaseModelTorch.fit
    optimizer = optim.AdamW(model.parameters(), lr=params["learning_rate"])

    X = torch.tensor(X).float()
    X_val = torch.tensor(X_val).float()

    y = torch.tensor(y)
    y_val = torch.tensor(y_val)

    if args.objective == "regression":
        loss_func = nn.MSELoss()
        y = y.float()
        y_val = y_val.float()
    elif args.objective == "classification":
        loss_func = nn.CrossEntropyLoss()
    else:
        loss_func = nn.BCEWithLogitsLoss()
        y = y.float()
        y_val = y_val.float()

    g = torch.Generator().manual_seed(seed)
    train_dataset = TensorDataset(X, y)
    train_loader = DataLoader(dataset=train_dataset, batch_size=args.batch_size, shuffle=True,
                              num_workers=0, generator=g)

    val_dataset = TensorDataset(X_val, y_val)
    val_loader = DataLoader(dataset=val_dataset, batch_size=args.val_batch_size, shuffle=True, generator=g)

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                state["it"] = iter(train_loader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        batch_X, batch_y = next_batch()

        out = model(batch_X)

        if args.objective == "regression" or args.objective == "binary":
            out = out.squeeze()

        loss = loss_func(out, batch_y)

        optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_before_step":
            optimizer.zero_grad()
        optimizer.step()
        return loss

    def eval_fn(model, batch):
        # Early Stopping
        val_loss = 0.0
        val_dim = 0
        with torch.no_grad():
            for val_i, (batch_val_X, batch_val_y) in enumerate(val_loader):
                out = model(batch_val_X)

                if args.objective == "regression" or args.objective == "binary":
                    out = out.squeeze()

                val_loss += loss_func(out, batch_val_y)
                val_dim += 1

        val_loss /= val_dim
        return val_loss.item()

    bx, by = next(iter(DataLoader(train_dataset, batch_size=args.batch_size)))

    def loss_fn(out, targets):
        return loss_func(out.squeeze(), targets)

    return Program(name="tabsurvey_mlp", model=model, batch=(bx, by), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # a sigmoid on the binary output before ``BCEWithLogitsLoss`` (the binary analogue of the model's own
    # classification branch, which applies a softmax before ``CrossEntropyLoss``): the loss squashes
    # probabilities a second time (classic).
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # ``optimizer.zero_grad()`` moved between ``backward()`` and ``step()``: every step applies a zero gradient
    # (AdamW's decoupled weight decay only) (classic).
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
