"""RealMLP-TD-S (Holzmueller et al., "Better by Default: Strong Pre-Tuned MLPs and Boosted Trees on Tabular Data"),
David Holzmueller's standalone implementation: one-hot encoding with missing / unknown categories as zeros and
binary categories as +-1, robust scaling with smooth clipping, then a learnable per-feature scaling layer and a
3x256 MLP of neural-tangent-parametrized linear layers (SELU for classification, zero-initialized output layer),
cross-entropy with label smoothing 0.1, Adam (betas 0.9, 0.95) over three parameter groups (scale, weights, biases)
whose learning rates are set at every step from a log-periodic cosine schedule (6x for the scale, 0.1x for biases),
the best epoch on the validation set restored at the end.

Source: https://github.com/dholzmueller/realmlp-td-s_standalone
Commit: a8c73f75dbeae4ab1ba5bc92372c444ffa0f766e
Files: ``mlp.py`` (``ScalingLayer``, ``NTPLinear``, ``SimpleMLP.fit``, ``Standalone_RealMLP_TD_S_Classifier``),
``preprocessing.py``, ``check_mlp.py`` (``get_dataset``, the split of ``check_equality``)
License: MIT (Copyright (c) 2024- David Holzmueller; full text in LICENSES/dholzmueller-realmlp-td-s_standalone.txt)
Domain: tabular (deep tabular MLP with its own preprocessing and schedule; binary classification with numeric and
categorical features)

Kept as written: ``ScalingLayer``, ``NTPLinear``, ``Mish``, ``SimpleMLP.fit`` for classification (the ordinal class
encoding, the model, ``CrossEntropyLoss(label_smoothing=0.1)``, the three Adam groups from ``params[0]``,
``params[1::2]``, ``params[2::2]``, ``n_epochs`` 256, batch size ``min(256, n_train)`` with ``shuffle`` and
``drop_last``, ``base_lr`` 0.04, the schedule ``0.5 - 0.5 * cos(2 pi log2(1 + 15 t))`` written into the groups at every
step, forward / loss / backward / step / zero_grad, the per-epoch validation error count and the best-epoch
parameters), ``RobustScaleSmoothClipTransform``, ``CustomOneHotEncoder``'s encoding, and ``check_mlp.py``'s dataset
(``randn ** 3`` numeric columns, two categorical columns with missing values, label ``fmod(x0, 1) > 0.5``) and sizes
(512 train, 20 validation, 300 test).

Deviations from the original:
- scikit-learn is not here: ``OrdinalEncoder``, ``ColumnTransformer`` / ``make_column_selector`` and
  ``train_test_split`` are written out in numpy / pandas (sorted categories, missing and unknown values to NaN; the
  categorical columns first, then the rest; a seeded permutation for the split), the sklearn base classes are
  dropped; ``np.NaN`` / ``np.Inf`` -> ``np.nan`` / ``np.inf`` (removed from numpy 2);
- the dataset and the split are drawn from ``seed`` (``get_dataset``'s own ``np.random.seed(0)`` and its
  ``print(x_ds.head())`` are dropped); the integer category columns are cast to float before the missing values
  are written into them (what pandas 1/2 did implicitly; pandas 3 refuses the assignment); the DataLoader shuffles
  with a ``torch.Generator(seed)``;
- ``fit``'s body is split: building the encoders, model, optimizer and loaders happens in ``build``, one
  ``train_step`` is one iteration of the inner ``for batch_idx, (x_batch, y_batch) in enumerate(train_dl)`` loop
  (the per-epoch validation / best-parameter block runs when an epoch's loader is exhausted), returning the loss;
  ``eval_fn`` is the validation error count the loop computes; the final restore of the best parameters and the
  predict methods are not part of the step;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059, C408

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ------------------------------------------------------------------------------------ (port) sklearn written out
class OrdinalEncoder:
    """sklearn's OrdinalEncoder as used here: sorted categories per column; missing and (with
    ``handle_unknown='use_encoded_value'``) unknown values to ``unknown_value``."""

    def __init__(self, dtype=np.float64, unknown_value=None, encoded_missing_value=np.nan, handle_unknown='error'):
        self.dtype = dtype
        self.unknown_value = unknown_value

    def fit(self, X):
        X = np.asarray(X, dtype=object)
        self.categories_ = []
        for j in range(X.shape[1]):
            vals = [v for v in X[:, j] if not (isinstance(v, float) and np.isnan(v))]
            self.categories_.append(np.array(sorted(set(vals))))
        return self

    def transform(self, X):
        X = np.asarray(X, dtype=object)
        out = np.full(X.shape, np.nan)
        for j, cats in enumerate(self.categories_):
            index = {v: i for i, v in enumerate(cats.tolist())}
            for i, v in enumerate(X[:, j]):
                out[i, j] = index.get(v, np.nan if self.unknown_value is None else self.unknown_value)
        return out.astype(self.dtype)

    def fit_transform(self, X):
        return self.fit(X).transform(X)


# ------------------------------------------------------------------------------------------- preprocessing.py
class CustomOneHotEncoder:
    def fit(self, X, y=None):
        self.ordinal_enc_ = OrdinalEncoder(unknown_value=np.nan, encoded_missing_value=np.nan,
                                           handle_unknown='use_encoded_value')
        self.ordinal_enc_.fit(X)
        self.cat_sizes_ = []
        for cat_arr in self.ordinal_enc_.categories_:
            has_nan = np.any([isinstance(val, (float, np.float32, np.float64)) and np.isnan(val) for val in cat_arr])
            self.cat_sizes_.append(len(cat_arr) - int(has_nan))

        return self

    def transform(self, X, y=None):
        x_enc = self.ordinal_enc_.transform(X)
        n_samples = x_enc.shape[0]
        out_arrs = []
        for i, cat_size in enumerate(self.cat_sizes_):
            column = x_enc[:, i]
            idxs = np.arange(n_samples)
            isnan = np.isnan(column)
            out_arr = np.zeros(shape=(n_samples, cat_size))
            # do one-hot encoding, encode nan (missing or unknown) values to all zeros
            out_arr[idxs[~isnan], column[~isnan].astype(np.int64)] = 1.

            if cat_size == 2:
                # binary: encode to single feature being -1, 1 or 0 (for missing or unknown values)
                out_arr = out_arr[:, 0:1] - out_arr[:, 1:2]

            out_arrs.append(out_arr)

        return np.concatenate(out_arrs, axis=-1)


class CustomOneHotPipeline:
    """
    Apply CustomOneHotEncoder only to categorical features.
    """

    def fit(self, X, y=None):
        X = pd.DataFrame(X)
        # (port) ColumnTransformer with make_column_selector(dtype_include=["string", "object", "category"])
        self.cat_cols_ = [c for c in X.columns if X[c].dtype.name in ("string", "object", "category")]
        self.rest_cols_ = [c for c in X.columns if c not in self.cat_cols_]
        self.enc_ = CustomOneHotEncoder().fit(X[self.cat_cols_].astype(object).where(X[self.cat_cols_].notna(),
                                                                                     np.nan).to_numpy())
        return self

    def transform(self, X, y=None):
        X = pd.DataFrame(X)
        cat = X[self.cat_cols_].astype(object).where(X[self.cat_cols_].notna(), np.nan).to_numpy()
        return np.concatenate([self.enc_.transform(cat), X[self.rest_cols_].to_numpy(dtype=np.float64)], axis=1)


class RobustScaleSmoothClipTransform:
    def fit(self, X, y=None):
        # don't deal with dataframes for simplicity
        assert isinstance(X, np.ndarray)
        self._median = np.median(X, axis=-2)
        quant_diff = np.quantile(X, 0.75, axis=-2) - np.quantile(X, 0.25, axis=-2)
        max = np.max(X, axis=-2)
        min = np.min(X, axis=-2)
        idxs = quant_diff == 0.0
        # on indexes where the quantile difference is zero, do min-max scaling instead
        quant_diff[idxs] = 0.5 * (max[idxs] - min[idxs])
        factors = 1.0 / (quant_diff + 1e-30)
        # if feature is constant on the training data,
        # set factor to zero so that it is also constant at prediction time
        factors[quant_diff == 0.0] = 0.0
        self._factors = factors
        return self

    def transform(self, X, y=None):
        x_scaled = self._factors[None, :] * (X - self._median[None, :])
        return x_scaled / np.sqrt(1 + (x_scaled / 3) ** 2)


class _Pipeline:
    """(port) sklearn.pipeline.Pipeline of the two steps."""

    def __init__(self, steps):
        self.steps = steps

    def fit_transform(self, X):
        for _, step in self.steps:
            X = step.fit(X).transform(X)
        return X

    def transform(self, X):
        for _, step in self.steps:
            X = step.transform(X)
        return X


def get_realmlp_td_s_pipeline():
    return _Pipeline([('one_hot', CustomOneHotPipeline()),
                      ('rssc', RobustScaleSmoothClipTransform())])


# ----------------------------------------------------------------------------------------------------- mlp.py
class ScalingLayer(nn.Module):
    def __init__(self, n_features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale[None, :]


class NTPLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, zero_init: bool = False):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        factor = 0.0 if zero_init else 1.0
        self.weight = nn.Parameter(factor * torch.randn(in_features, out_features))
        self.bias = nn.Parameter(factor * torch.randn(1, out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (1. / np.sqrt(self.in_features)) * (x @ self.weight) + self.bias


class Mish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(torch.tanh(torch.nn.functional.softplus(x)))


# ---------------------------------------------------------------------------------------------- check_mlp.py
def get_dataset(n_samples: int, classification: bool):
    x = np.random.randn(n_samples, 3) ** 3
    x_ds = pd.DataFrame(x, columns=['a', 'b', 'c'])
    x_ds['cat_a'] = np.random.randint(3, size=(n_samples,))
    x_ds['cat_b'] = np.random.randint(4, size=(n_samples,))
    x_ds['cat_a'] = x_ds['cat_a'].astype(float)
    x_ds['cat_b'] = x_ds['cat_b'].astype(float)
    x_ds.loc[x_ds['cat_a'] == 0, 'cat_a'] = np.nan
    x_ds.loc[x_ds['cat_b'] == 0, 'cat_b'] = np.nan
    x_ds['cat_a'] = x_ds['cat_a'].astype('category')
    x_ds['cat_b'] = x_ds['cat_b'].astype('category')

    if classification:
        y = np.array(np.fmod(x[:, 0], 1) > 0.5, dtype=np.int32)
    else:
        y = x[:, 0]
    return x_ds, y


def train_test_split(x, y, test_size, rng, bug=None):
    """(port) sklearn's train_test_split for a frame and an array: a seeded permutation, the last test_size rows
    of it for the test part."""
    perm = rng.permutation(len(y))
    tr, te = perm[:-test_size], perm[-test_size:]
    if bug == "labels_not_split_with_features":
        return x.iloc[tr], x.iloc[te], y[:len(tr)], y[len(tr):]
    return x.iloc[tr], x.iloc[te], y[tr], y[te]


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    n_train = 512
    n_valid = 20
    n_test = 300
    n_samples = n_train + n_valid + n_test
    x, y = get_dataset(n_samples, classification=True)
    x_trainval, x_test, y_trainval, y_test = train_test_split(x, y, test_size=n_test, rng=rng, bug=bug)
    x_train, x_val, y_train, y_val = train_test_split(x_trainval, y_trainval, test_size=n_valid, rng=rng, bug=bug)

    # Standalone_RealMLP_TD_S_Classifier.fit
    prep_ = get_realmlp_td_s_pipeline()
    X = prep_.fit_transform(x_train)
    X_val = prep_.transform(x_val)

    # SimpleMLP.fit (is_classification=True)
    input_dim = X.shape[1]
    is_classification = True

    class_enc_ = OrdinalEncoder(dtype=np.int64)
    y = class_enc_.fit_transform(y_train[:, None])[:, 0]
    output_dim = len(class_enc_.categories_[0])
    y_val = class_enc_.transform(y_val[:, None])[:, 0]

    act = nn.SELU if is_classification else Mish
    model = nn.Sequential(
        ScalingLayer(input_dim),
        NTPLinear(input_dim, 256), act(),
        NTPLinear(256, 256), act(),
        NTPLinear(256, 256), act(),
        NTPLinear(256, output_dim, zero_init=True),
    )

    criterion = nn.CrossEntropyLoss(label_smoothing=0.1) if is_classification else nn.MSELoss()
    params = list(model.parameters())
    scale_params = [params[0]]
    weights = params[1::2]
    biases = params[2::2]
    if bug == "scale_params_left_out":
        opt = torch.optim.Adam([dict(params=weights), dict(params=biases)], betas=(0.9, 0.95))
    else:
        opt = torch.optim.Adam([dict(params=scale_params), dict(params=weights), dict(params=biases)],
                               betas=(0.9, 0.95))

    x_train = torch.as_tensor(X, dtype=torch.float32)
    y_train = torch.as_tensor(y, dtype=torch.int64 if is_classification else torch.float32)
    x_valid = torch.as_tensor(X_val, dtype=torch.float32)
    y_valid = torch.as_tensor(y_val, dtype=torch.int64 if is_classification else torch.float32)

    train_ds = TensorDataset(x_train, y_train)
    valid_ds = TensorDataset(x_valid, y_valid)
    n_train = x_train.shape[0]
    n_valid = x_valid.shape[0]
    n_epochs = 256
    train_batch_size = min(256, n_train)
    valid_batch_size = max(1, min(1024, n_valid))

    def valid_metric(y_pred: torch.Tensor, y: torch.Tensor):
        if is_classification:
            # unnormalized classification error, could also convert to float and then take the mean
            return torch.sum(torch.argmax(y_pred, dim=-1) != y)
        else:
            # MSE
            return (y_pred - y).square().mean()

    train_dl = DataLoader(train_ds, batch_size=train_batch_size, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(seed))
    valid_dl = DataLoader(valid_ds, batch_size=valid_batch_size, shuffle=False)

    n_train_batches = len(train_dl)
    base_lr = 0.04 if is_classification else 0.07
    st = {"epoch": 0, "batch_idx": 0, "it": iter(train_dl), "best_valid_loss": np.inf, "best_valid_params": None}

    def validate():
        # save parameters if validation score improves
        with torch.no_grad():
            if x_valid.shape[0] > 0.0:
                y_pred_valid = torch.cat([model(x_batch).detach() for x_batch, _ in valid_dl], dim=0)
                valid_loss = valid_metric(y_pred_valid, y_valid).cpu().item()
            else:
                valid_loss = 0.0
            if valid_loss <= st["best_valid_loss"]:  # use <= for last best epoch
                st["best_valid_loss"] = valid_loss
                st["best_valid_params"] = [p.detach().clone() for p in model.parameters()]
        return valid_loss

    def train_step():
        batch = next(st["it"], None)
        if batch is None:  # the epoch is over: its validation block, then the next epoch
            validate()
            st["epoch"] += 1
            st["batch_idx"] = 0
            st["it"] = iter(train_dl)
            batch = next(st["it"])
        epoch, batch_idx = st["epoch"], st["batch_idx"]
        x_batch, y_batch = batch
        # set learning rates according to schedule
        t = (epoch * n_train_batches + batch_idx) / (n_epochs * n_train_batches)
        lr_sched_value = 0.5 - 0.5 * np.cos(2 * np.pi * np.log2(1 + 15 * t))
        lr = base_lr * lr_sched_value
        if bug == "scale_params_left_out":
            opt.param_groups[0]['lr'] = lr  # for weights
            opt.param_groups[1]['lr'] = 0.1 * lr  # for biases
        else:
            opt.param_groups[0]['lr'] = 6 * lr  # for scale
            opt.param_groups[1]['lr'] = lr  # for weights
            opt.param_groups[2]['lr'] = 0.1 * lr  # for biases

        # optimization
        y_pred = model(x_batch)
        loss = criterion(y_pred, y_batch)
        loss.backward()
        opt.step()
        if bug != "zero_grad_dropped":
            opt.zero_grad()
        st["batch_idx"] += 1
        return loss.item()

    def eval_fn(m, _batch=None):
        with torch.no_grad():
            y_pred_valid = torch.cat([m(x_batch).detach() for x_batch, _ in valid_dl], dim=0)
            return float(valid_metric(y_pred_valid, y_valid))

    return Program(name="realmlp_tds", model=model, batch=(x_train[:train_batch_size], y_train[:train_batch_size]),
                   loss_fn=criterion, optimizer=opt, train_step=train_step, eval_fn=eval_fn, loader=train_dl)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels split with their own slice instead of the features' permutation: every row's label belongs to
    # another row (classic split misalignment).
    Bug("labels_not_split_with_features", functools.partial(_build, bug="labels_not_split_with_features"),
        "learning_ledger", ("TASK",)),
    # the ScalingLayer's group left out of Adam (the groups built from params[1::2] and params[2::2] only): the
    # per-feature scales never move (classic).
    Bug("scale_params_left_out", functools.partial(_build, bug="scale_params_left_out"), "four_structures",
        ("0.scale",)),
    # opt.zero_grad() dropped after opt.step(): gradients accumulate over the steps (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
