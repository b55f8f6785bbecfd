# ruff: noqa: UP045, PLR1736, PLC0206
"""MLP with piecewise-linear embeddings of the numerical features (MLP-PLE), from rtdl-num-embeddings.

Source: https://github.com/yandex-research/rtdl-num-embeddings, commit a8fc25025c83f2321c63ff127a3bcef83bb1bfb5,
files ``package/example.ipynb`` (the program: data, preprocessing, ``Model``, AdamW, ``apply_model``, ``evaluate``,
the epoch loop) and ``package/rtdl_num_embeddings.py`` (``compute_bins``, ``LinearEmbeddings``, ``_NLinear``,
``_PiecewiseLinearEncodingImpl``, ``PiecewiseLinearEmbeddings``), with the backbone ``MLP`` the notebook imports
from the ``rtdl_revisiting_models`` package (https://github.com/yandex-research/rtdl-revisiting-models, commit
e3ed46cac38568785289d8fa16b8cfa585bde27e, ``package/rtdl_revisiting_models.py``).
License: Apache-2.0 (both packages; full texts in LICENSES/yandex-research-rtdl-num-embeddings.txt and
LICENSES/yandex-research-rtdl-revisiting-models.txt).
Domain: tabular deep learning (regression; quantile bins, piecewise-linear embeddings version "B" = linear
embedding + zero-initialised per-feature linear map of the encoding, MLP backbone with dropout).

Kept as written: the notebook's regression setup (label standardization with Y_mean / Y_std, float labels),
``compute_bins(X_train)`` (48 quantile bins), ``Model`` with ``PiecewiseLinearEmbeddings(bins, 8, activation=False,
version='B')`` and the two categorical features one-hot encoded (the notebook's "uncomment to add two categorical
features" lines, cardinalities 4 and 7), the MLP kwargs (n_blocks 2, d_block 384, dropout 0.4, d_out 1),
``AdamW(lr=3e-4)``, ``apply_model`` (``.squeeze(-1)``), ``loss_fn = F.mse_loss``, ``evaluate`` (eval mode, no grad,
-RMSE * Y_std), "test score before training", batch_size 256 and the loop body (``model.train()``,
``optimizer.zero_grad()``, ``loss_fn(apply_model(batch), batch['y'])``, backward, step).

Deviations from the original:
- ``fetch_california_housing`` (a download) is replaced by synthetic regression data made from ``seed``: 2000
  rows of 8 skewed continuous features and a nonlinear target (thresholds, a product and a sine, plus noise).
- preprocessing: scikit-learn is not installed, so the notebook's option (A) ``StandardScaler`` is used, written
  in numpy (the notebook's default is option (B) ``QuantileTransformer``); the train/val/test split uses a numpy
  permutation with the notebook's 0.8 / 0.8 fractions instead of ``train_test_split``.
- ``delu.iter_batches(data['train'], batch_size, shuffle=True)`` is written out (a ``torch.randperm`` per epoch);
  ``delu.random.seed`` -> ``torch.manual_seed`` / numpy generators; ``scipy``/``sklearn`` metrics -> torch.
- the endless epoch loop with early stopping, the timer, tqdm and printing are dropped: ``train_step`` is one
  batch of the loop (a new shuffled epoch when the batches run out); ``eval_fn`` is ``evaluate('val')``.
- the library modules keep only the code paths this program takes (the quantile branch of ``compute_bins``, its
  input checks; version "B" of ``PiecewiseLinearEmbeddings``); docstrings are shortened.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parameter import Parameter

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_ROWS, N_CONT = 2000, 8


# ---------------------------------------------------------------- rtdl_revisiting_models.MLP
def _named_sequential(*modules) -> nn.Sequential:
    return nn.Sequential(OrderedDict(modules))


class MLP(nn.Module):
    """The MLP model from Section 3.1 in the paper."""

    def __init__(
        self,
        *,
        d_in: int,
        d_out: Optional[int],
        n_blocks: int,
        d_block: int,
        dropout: float,
    ) -> None:
        if n_blocks <= 0:
            raise ValueError(f'n_blocks must be positive, however: {n_blocks=}')

        super().__init__()
        self.blocks = nn.ModuleList(
            [
                _named_sequential(
                    ('linear', nn.Linear(d_block if i else d_in, d_block)),
                    ('activation', nn.ReLU()),
                    ('dropout', nn.Dropout(dropout)),
                )
                for i in range(n_blocks)
            ]
        )
        self.output = None if d_out is None else nn.Linear(d_block, d_out)

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        for block in self.blocks:
            x = block(x)
        if self.output is not None:
            x = self.output(x)
        return x


# ---------------------------------------------------------------- rtdl_num_embeddings
def _check_input_shape(x: Tensor, expected_n_features: int) -> None:
    if x.ndim < 1:
        raise ValueError(
            f'The input must have at least one dimension, however: {x.ndim=}'
        )
    if x.shape[-1] != expected_n_features:
        raise ValueError(
            'The last dimension of the input was expected to be'
            f' {expected_n_features}, however, {x.shape[-1]=}'
        )


class LinearEmbeddings(nn.Module):
    """Linear embeddings for continuous features."""

    def __init__(self, n_features: int, d_embedding: int) -> None:
        if n_features <= 0:
            raise ValueError(f'n_features must be positive, however: {n_features=}')
        if d_embedding <= 0:
            raise ValueError(f'd_embedding must be positive, however: {d_embedding=}')

        super().__init__()
        self.weight = Parameter(torch.empty(n_features, d_embedding))
        self.bias = Parameter(torch.empty(n_features, d_embedding))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        d_rqsrt = self.weight.shape[1] ** -0.5
        nn.init.uniform_(self.weight, -d_rqsrt, d_rqsrt)
        nn.init.uniform_(self.bias, -d_rqsrt, d_rqsrt)

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        _check_input_shape(x, self.weight.shape[0])
        return torch.addcmul(self.bias, self.weight, x[..., None])


class _NLinear(nn.Module):
    """N *separate* linear layers for N feature embeddings."""

    def __init__(
        self, n: int, in_features: int, out_features: int, bias: bool = True
    ) -> None:
        super().__init__()
        self.weight = Parameter(torch.empty(n, in_features, out_features))
        self.bias = Parameter(torch.empty(n, out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        """Reset the parameters."""
        d_in_rsqrt = self.weight.shape[-2] ** -0.5
        nn.init.uniform_(self.weight, -d_in_rsqrt, d_in_rsqrt)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -d_in_rsqrt, d_in_rsqrt)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Do the forward pass."""
        if x.ndim != 3:
            raise ValueError(
                '_NLinear supports only inputs with exactly one batch dimension,'
                ' so `x` must have a shape like (BATCH_SIZE, N_FEATURES, D_EMBEDDING).'
            )
        assert x.shape[-(self.weight.ndim - 1) :] == self.weight.shape[:-1]

        x = x.transpose(0, 1)
        x = x @ self.weight
        x = x.transpose(0, 1)
        if self.bias is not None:
            x = x + self.bias
        return x


def _check_bins(bins: list[Tensor]) -> None:
    if not bins:
        raise ValueError('The list of bins must not be empty')
    for i, feature_bins in enumerate(bins):
        if feature_bins.ndim != 1:
            raise ValueError(
                'Each item of the bin list must have exactly one dimension.'
                f' However, for {i=}: {bins[i].ndim=}'
            )
        if len(feature_bins) < 2:
            raise ValueError(
                'All features must have at least two bin edges.'
                f' However, for {i=}: {len(bins[i])=}'
            )
        if (feature_bins[:-1] >= feature_bins[1:]).any():
            raise ValueError(
                'Bin edges must be sorted.'
                f' However, the for the {i}-th feature, the bin edges are not sorted'
            )


def compute_bins(X: torch.Tensor, n_bins: int = 48) -> list[Tensor]:
    """Compute the bin boundaries for `PiecewiseLinearEmbeddings` (the quantile branch)."""
    if X.ndim != 2:
        raise ValueError(f'X must have exactly two dimensions, however: {X.ndim=}')
    if (X == X[0]).all(dim=0).any():
        raise ValueError(
            'All columns of X must have at least two distinct values.'
            ' However, X contains columns with just one distinct value.'
        )
    if n_bins <= 1 or n_bins >= len(X):
        raise ValueError(
            'n_bins must be more than 1, but less than len(X), however:'
            f' {n_bins=}, {len(X)=}'
        )
    bins = [
        q.unique()
        for q in torch.quantile(
            X, torch.linspace(0.0, 1.0, n_bins + 1).to(X), dim=0
        ).T
    ]
    _check_bins(bins)
    return bins


class _PiecewiseLinearEncodingImpl(nn.Module):
    """Piecewise-linear encoding (no trainable parameters)."""

    weight: Tensor
    bias: Tensor
    single_bin_mask: Optional[Tensor]
    mask: Optional[Tensor]

    def __init__(self, bins: list[Tensor]) -> None:
        assert len(bins) > 0
        super().__init__()

        n_features = len(bins)
        n_bins = [len(x) - 1 for x in bins]
        max_n_bins = max(n_bins)

        self.register_buffer('weight', torch.zeros(n_features, max_n_bins))
        self.register_buffer('bias', torch.zeros(n_features, max_n_bins))

        single_bin_mask = torch.tensor(n_bins) == 1
        self.register_buffer(
            'single_bin_mask', single_bin_mask if single_bin_mask.any() else None
        )

        self.register_buffer(
            'mask',
            # The mask is needed if features have different number of bins.
            None
            if all(len(x) == len(bins[0]) for x in bins)
            else torch.vstack(
                [
                    torch.cat(
                        [
                            # The number of bins for this feature, minus 1:
                            torch.ones((len(x) - 1) - 1, dtype=torch.bool),
                            # Unused components (always zeros):
                            torch.zeros(max_n_bins - (len(x) - 1), dtype=torch.bool),
                            # The last bin:
                            torch.ones(1, dtype=torch.bool),
                        ]
                    )
                    # x is a tensor containing the bin bounds for a given feature.
                    for x in bins
                ]
            ),
        )

        for i, bin_edges in enumerate(bins):
            bin_width = bin_edges.diff()
            w = 1.0 / bin_width
            b = -bin_edges[:-1] / bin_width
            # The last encoding component:
            self.weight[i, -1] = w[-1]
            self.bias[i, -1] = b[-1]
            # The leading encoding components:
            self.weight[i, : n_bins[i] - 1] = w[:-1]
            self.bias[i, : n_bins[i] - 1] = b[:-1]
            # All in-between components will always be zeros,
            # because the weight and bias are initialized with zeros.

    def get_max_n_bins(self) -> int:
        return self.weight.shape[-1]

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        x = torch.addcmul(self.bias, self.weight, x[..., None])
        if x.shape[-1] > 1:
            x = torch.cat(
                [
                    x[..., :1].clamp_max(1.0),
                    x[..., 1:-1].clamp(0.0, 1.0),
                    (
                        x[..., -1:].clamp_min(0.0)
                        if self.single_bin_mask is None
                        else torch.where(
                            self.single_bin_mask[..., None],
                            x[..., -1:],
                            x[..., -1:].clamp_min(0.0),
                        )
                    ),
                ],
                dim=-1,
            )
        return x


class PiecewiseLinearEmbeddings(nn.Module):
    """Piecewise-linear embeddings: ``(batch_size, n_features)`` -> ``(batch_size, n_features, d_embedding)``."""

    def __init__(
        self,
        bins: list[Tensor],
        d_embedding: int,
        *,
        activation: bool,
        version: Optional[str] = None,
    ) -> None:
        if d_embedding <= 0:
            raise ValueError(
                f'd_embedding must be a positive integer, however: {d_embedding=}'
            )
        _check_bins(bins)

        super().__init__()
        n_features = len(bins)
        is_version_B = version == 'B'

        self.linear0 = (
            LinearEmbeddings(n_features, d_embedding) if is_version_B else None
        )
        self.impl = _PiecewiseLinearEncodingImpl(bins)
        self.linear = _NLinear(
            len(bins),
            self.impl.get_max_n_bins(),
            d_embedding,
            # For the version "B", the bias is already presented in self.linear0.
            bias=not is_version_B,
        )
        if is_version_B:
            # Because of the following line, at initialization,
            # the whole embedding behaves like a linear embedding.
            # The piecewise-linear component is incrementally learnt during training.
            nn.init.zeros_(self.linear.weight)
        self.activation = nn.ReLU() if activation else None

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        if x.ndim != 2:
            raise ValueError(
                'For now, only inputs with exactly one batch dimension are supported.'
            )

        x_linear = None if self.linear0 is None else self.linear0(x)

        x_ple = self.impl(x)
        x_ple = self.linear(x_ple)
        if self.activation is not None:
            x_ple = self.activation(x_ple)
        return x_ple if x_linear is None else x_linear + x_ple


# ---------------------------------------------------------------- example.ipynb
class Model(nn.Module):
    def __init__(
        self,
        n_cont_features: int,
        cat_cardinalities: list[int],
        bins: Optional[list[Tensor]],
        mlp_kwargs: dict,
    ) -> None:
        super().__init__()
        self.cat_cardinalities = cat_cardinalities
        # The total representation size for categorical features
        # == the sum of one-hot representation sizes
        # == the sum of the numbers of distinct values of all features.
        d_cat = sum(cat_cardinalities)

        assert bins is not None
        d_embedding = 8
        self.cont_embeddings = PiecewiseLinearEmbeddings(
            bins, d_embedding, activation=False, version='B'
        )
        d_num = n_cont_features * d_embedding

        self.backbone = MLP(d_in=d_num + d_cat, **mlp_kwargs)

    def forward(self, x_cont: Tensor, x_cat: Optional[Tensor]) -> Tensor:
        x = []

        # Step 1. Embed the continuous features.
        # Flattening is needed for MLP-like models.
        x.append(self.cont_embeddings(x_cont).flatten(1))

        # Step 2. Encode the categorical features using any strategy.
        if x_cat is not None:
            x.extend(
                F.one_hot(column, cardinality)
                for column, cardinality in zip(x_cat.T, self.cat_cardinalities)
            )

        # Step 3. Assemble the vector input for the backbone.
        x = torch.column_stack(x)

        # Step 4. Apply the backbone.
        return self.backbone(x)


def make_data(seed):
    """Synthetic regression rows: skewed features, a target with thresholds, a product and a sine."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_ROWS, N_CONT)).astype(np.float32)
    X[:, :3] = np.exp(X[:, :3])  # skewed, like incomes and populations
    y = (2.0 * (X[:, 0] > 1.0) + np.log1p(X[:, 1]) * X[:, 3] + np.sin(2 * X[:, 4]) - 0.5 * X[:, 5] ** 2
         + 0.1 * rng.normal(size=N_ROWS))
    return X, y.astype(np.float32)


def iter_batches(data, batch_size, gen):
    """``delu.iter_batches(data, batch_size, shuffle=True)``: the dict's tensors indexed by shuffled batches."""
    n = len(next(iter(data.values())))
    for idx in torch.randperm(n, generator=gen).split(batch_size):
        yield {k: v[idx] for k, v in data.items()}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    device = torch.device('cpu')

    # >>> Dataset.
    task_type = 'regression'
    n_classes = None
    X_cont, Y = make_data(seed)
    X_cont = X_cont.astype(np.float32)
    n_cont_features = X_cont.shape[1]
    cat_cardinalities = [
        4,  # Allowed values: [0, 1, 2, 3].
        7,  # Allowed values: [0, 1, 2, 3, 4, 5, 6].
    ]
    X_cat = (
        np.column_stack(
            [rng.integers(0, c, (len(X_cont),)) for c in cat_cardinalities]
        )
        if cat_cardinalities
        else None
    )
    Y = Y.astype(np.float32)

    # >>> Split the dataset.
    all_idx = rng.permutation(len(Y))
    n_trainval = int(0.8 * len(Y))
    trainval_idx, test_idx = all_idx[:n_trainval], all_idx[n_trainval:]
    n_train = int(0.8 * len(trainval_idx))
    train_idx, val_idx = trainval_idx[:n_train], trainval_idx[n_train:]
    data_numpy = {
        'train': {'x_cont': X_cont[train_idx], 'y': Y[train_idx]},
        'val': {'x_cont': X_cont[val_idx], 'y': Y[val_idx]},
        'test': {'x_cont': X_cont[test_idx], 'y': Y[test_idx]},
    }
    if X_cat is not None:
        data_numpy['train']['x_cat'] = X_cat[train_idx]
        data_numpy['val']['x_cat'] = X_cat[val_idx]
        data_numpy['test']['x_cat'] = X_cat[test_idx]

    # >>> Feature preprocessing: (A) the StandardScaler strategy, in numpy.
    scaler_mean = data_numpy['train']['x_cont'].mean(0)
    scaler_scale = data_numpy['train']['x_cont'].std(0)
    for part in data_numpy:
        data_numpy[part]['x_cont'] = (data_numpy[part]['x_cont'] - scaler_mean) / scaler_scale

    # >>> Label preprocessing.
    if task_type == 'regression':
        Y_mean = data_numpy['train']['y'].mean().item()
        Y_std = data_numpy['train']['y'].std().item()
        for part in (['train'] if bug == "val_labels_not_standardized" else data_numpy):
            data_numpy[part]['y'] = (data_numpy[part]['y'] - Y_mean) / Y_std

    # >>> Convert data to tensors.
    data = {
        part: {k: torch.as_tensor(v, device=device) for k, v in data_numpy[part].items()}
        for part in data_numpy
    }

    # This is needed only for PiecewiseLinearEncoding and PiecewiseLinearEmbeddings.
    bins = compute_bins(data['train']['x_cont'])
    model = Model(
        n_cont_features,
        cat_cardinalities,
        bins,
        {
            'n_blocks': 2,
            'd_block': 384,
            'dropout': 0.4,
            'd_out': n_classes if task_type == 'multiclass' else 1,
        },
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def apply_model(batch: dict[str, Tensor]) -> Tensor:
        if bug == "output_not_squeezed":
            return model(batch['x_cont'], batch.get('x_cat'))
        return model(batch['x_cont'], batch.get('x_cat')).squeeze(-1)

    loss_fn = (
        F.binary_cross_entropy_with_logits
        if task_type == 'binclass'
        else F.cross_entropy
        if task_type == 'multiclass'
        else F.mse_loss
    )

    @torch.no_grad()
    def evaluate(part: str) -> float:
        model.eval()
        y_pred = apply_model(data[part]).reshape(-1)
        y_true = data[part]['y']
        assert task_type == 'regression'
        score = -(float(((y_true - y_pred) ** 2).mean()) ** 0.5 * Y_std)
        return score  # The higher -- the better.

    evaluate("test")  # print(f'Test score before training: {evaluate("test"):.4f}')

    batch_size = 256
    gen = torch.Generator().manual_seed(seed)
    state = {"it": iter_batches(data['train'], batch_size, gen)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the next epoch (evaluate('val') / evaluate('test') run in between)
            evaluate('val')
            evaluate('test')
            state["it"] = iter_batches(data['train'], batch_size, gen)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        if bug != "model_train_left_out":
            model.train()
        optimizer.zero_grad()
        loss = loss_fn(apply_model(batch), batch['y'])
        loss.backward()
        optimizer.step()
        return loss

    first = next(iter_batches(data['train'], batch_size, torch.Generator().manual_seed(seed + 7)))
    batch = ({"x_cont": first['x_cont'], "x_cat": first['x_cat']}, first['y'])

    def program_loss(output, y):
        if bug == "output_not_squeezed":
            return loss_fn(output, y)
        return loss_fn(output.squeeze(-1), y)

    def eval_fn(model, batch):
        return evaluate('val')

    return Program(name="rtdlnumemb_mlp_ple", model=model, batch=batch, loss_fn=program_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``.squeeze(-1)`` left out of ``apply_model``: the (batch, 1) predictions broadcast against the (batch,) labels
    # and ``F.mse_loss`` averages over every prediction/label pair (classic; PyTorch only warns).
    Bug("output_not_squeezed", functools.partial(_build, bug="output_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``model.train()`` left out of the loop body: the "test score before training" call leaves the model in eval
    # mode, so the whole run trains with dropout off (classic).
    Bug("model_train_left_out", functools.partial(_build, bug="model_train_left_out"), "step_probe",
        ("backbone",)),
    # the labels standardized for the training part only: ``evaluate('val')`` compares standardized predictions with
    # raw labels (classic preprocessing slip).
    Bug("val_labels_not_standardized", functools.partial(_build, bug="val_labels_not_standardized"), "six_claims",
        ("EVALUATION",)),
]
