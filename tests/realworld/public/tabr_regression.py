"""TabR (Gorishniy et al., "TabR: Tabular Deep Learning Meets Nearest Neighbors", ICLR 2024) from
yandex-research/tabular-dl-tabr, on a California-housing-like regression: a linear encoder of the quantile-normalized
features, a key projection, retrieval of the ``context_size`` nearest training objects by squared L2 distance between
keys (the batch itself put back among the candidates and each object's own index removed), softmax similarity
weights with context dropout, values from a label encoder plus ``T(k - context_k)``, a residual predictor block and a
LayerNorm-ReLU-Linear head; MSE on standardized targets, AdamW, random batches of the training indices.

Source: https://github.com/yandex-research/tabular-dl-tabr
Commit: 17baa9082506f8e7a0f8d11bb1e08212926a1507
Files: ``bin/tabr.py``, ``lib/deep.py``, ``lib/data.py``, ``exp/tabr/california/0-evaluation/0.toml``
License: MIT (Copyright (c) 2023 Authors of "TabR: Unlocking the Power of Retrieval-Augmented Tabular Deep
Learning"; full text in LICENSES/yandex-research-tabular-dl-tabr.txt)
Domain: tabular deep learning (retrieval-augmented model, regression)

Kept as written: ``Model`` (``__init__`` with ``make_block``, ``reset_parameters``, ``_encode``, ``forward``: the
candidate keys, the batch prepended to the candidates during training, the search for ``context_size + 1``
neighbours, the own index's distance set to ``inf`` and the farthest dropped, the similarities, softmax, context
dropout, ``label_encoder``, ``T``, the predictor blocks and the head), ``main``'s ``zero_wd_condition``,
``get_Xy``, ``apply_model`` (the batch removed from the candidates by ``torch.isin``) and ``evaluate``,
``lib.deep``'s ``get_d_out``, ``default_zero_weight_decay_condition``, ``make_parameter_groups`` (with its known
weight-decay grouping slip, tabular-dl-tabr#19, kept as written), ``make_optimizer``, ``get_loss_fn``,
``make_random_batches`` and ``train_step``; ``lib.data``'s ``y_policy = "standard"``; the California evaluation
config (``encoder_n_blocks`` 0, ``predictor_n_blocks`` 1, ``mixer_normalization`` "auto", ``d_multiplier`` 2,
the two dropouts, LayerNorm, ReLU, AdamW with weight decay 0).

Deviations from the original:
- the California housing files are not here: the data is synthetic, 8 numeric features from ``seed`` with a smooth
  nonlinear target plus noise (1000 train, 300 val, 300 test); ``num_policy = "quantile"``'s scikit-learn
  ``QuantileTransformer(output_distribution='normal')`` (with its 1e-3 training noise) is written out in numpy and
  torch (piecewise-linear empirical quantiles of the noised training columns, then the normal inverse CDF), since
  scikit-learn is not installed here.
- faiss is not here: ``faiss.IndexFlatL2`` (exact search) is written as the exact squared distances and
  ``torch.topk(largest=False)``, which return the same sorted neighbours.
- sizes for 2 CPU cores: ``d_main`` 303 -> 64, ``context_size`` 96 -> 32, ``batch_size`` 256 -> 128; AdamW's lr
  2.8e-4 -> 1e-3 so that the 30 steps of the self-check show the loss falling (the original trains with patience
  16 over an unbounded number of epochs).
- ``delu`` is not used: ``delu.random.seed`` is ``torch``/``numpy``/``random`` seeding from ``seed``,
  ``delu.nn.Lambda`` a small module, and ``train_step``'s OOM retry (``delu.random`` state restore and chunking) is
  left out since the batch always fits; loguru, tqdm, tensorboard, the reports and checkpoints are dropped.
- ``train_step`` is one batch of the epoch loop (a new permutation when the epoch's batches run out) and returns the
  loss; ``eval_fn`` is ``evaluate`` on the validation part, as its RMSE in standardized units.
- the Program's ``batch`` is the first training batch ``(idx, Y_train[idx])`` and its ``model`` a thin module
  whose ``forward(idx)`` is ``apply_model('train', idx, True)`` (the TabR ``Model`` is its ``model`` attribute, so
  its parameters are named ``model.*``); ``loss_fn`` is ``get_loss_fn``'s ``mse_loss``; the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied
  lines run as written.
"""
# ruff: noqa: PLR0402, RUF034, RUF059

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class _Lambda(nn.Module):  # (port) delu.nn.Lambda
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# lib/deep.py
class OneHotEncoder(nn.Module):
    cardinalities: Tensor

    def __init__(self, cardinalities: list[int]) -> None:
        # cardinalities[i]`` is the number of unique values for the i-th categorical feature.
        super().__init__()
        self.register_buffer('cardinalities', torch.tensor(cardinalities))

    def forward(self, x: Tensor) -> Tensor:
        encoded_columns = [
            F.one_hot(x[..., column], cardinality)
            for column, cardinality in zip(range(x.shape[-1]), self.cardinalities)
        ]

        return torch.cat(encoded_columns, -1)


def get_d_out(n_classes: int | None) -> int:
    return 1 if n_classes is None or n_classes == 2 else n_classes


def default_zero_weight_decay_condition(
    module_name: str, module: nn.Module, parameter_name: str, parameter
):
    del module_name, parameter
    return parameter_name.endswith('bias') or isinstance(
        module,
        (
            nn.BatchNorm1d,
            nn.LayerNorm,
            nn.InstanceNorm1d,
        ),
    )


def make_parameter_groups(
    model: nn.Module,
    zero_weight_decay_condition,
    custom_groups,
):
    custom_fullnames = set()
    custom_fullnames.update(*custom_groups)
    assert sum(map(len, custom_groups)) == len(
        custom_fullnames
    ), 'Custom parameter groups must not intersect'

    parameters_info = {}  # fullname -> (parameter, needs_wd)
    for module_name, module in model.named_modules():
        for name, parameter in module.named_parameters():
            fullname = f'{module_name}.{name}' if module_name else name
            parameters_info.setdefault(fullname, (parameter, []))[1].append(
                not zero_weight_decay_condition(module_name, module, name, parameter)
            )
    parameters_info = {k: (v[0], all(v[1])) for k, v in parameters_info.items()}

    params_with_wd = {'params': []}
    params_without_wd = {'params': [], 'weight_decay': 0.0}
    custom_params = {k: {'params': []} | v for k, v in custom_groups.items()}

    for fullname, (parameter, needs_wd) in parameters_info.items():
        for fullnames, group in custom_params.items():
            if fullname in fullnames:
                custom_fullnames.remove(fullname)
                group['params'].append(parameter)
                break
        else:
            # NOTE
            # The line below always appends to `params_with_wd` regardless of
            # `needs_wd`. This is a bug: the `else` branch should append to
            # `params_without_wd` instead. However, this bug is not fixed
            # to keep the results compatible with what is reported in the paper.
            # The bug was originally reported here:
            # https://github.com/yandex-research/tabular-dl-tabr/issues/19
            (params_with_wd if needs_wd else params_with_wd)['params'].append(parameter)
    assert (
        not custom_fullnames
    ), f'Some of the custom parameters were not found in the model: {custom_fullnames}'
    return [params_with_wd, params_without_wd] + list(custom_params.values())


def make_optimizer(
    module: nn.Module,
    type: str,
    *,
    zero_weight_decay_condition=default_zero_weight_decay_condition,
    custom_parameter_groups=None,
    **optimizer_kwargs,
) -> torch.optim.Optimizer:
    if custom_parameter_groups is None:
        custom_parameter_groups = {}
    Optimizer = getattr(optim, type)
    parameter_groups = make_parameter_groups(
        module, zero_weight_decay_condition, custom_parameter_groups
    )
    return Optimizer(parameter_groups, **optimizer_kwargs)


def get_loss_fn(task_type: str, **kwargs):
    loss_fn = (
        F.binary_cross_entropy_with_logits
        if task_type == 'binclass'
        else F.cross_entropy
        if task_type == 'multiclass'
        else F.mse_loss
    )
    return functools.partial(loss_fn, **kwargs) if kwargs else loss_fn


def make_random_batches(
    train_size: int, batch_size: int, device: torch.device | None = None
) -> list[Tensor]:
    permutation = torch.randperm(train_size, device=device)
    batches = permutation.split(batch_size)
    # Below, we check that we do not face this issue:
    # https://github.com/pytorch/vision/issues/3816
    assert torch.equal(
        torch.arange(train_size, device=device), permutation.sort().values
    )
    return batches  # type: ignore[code]


def lib_train_step(optimizer, step_fn, batch, chunk_size: int):
    """The standard training step (``lib.train_step``; the OOM retry left out, the batch always fits)."""
    batch_size = len(batch)
    optimizer.zero_grad()
    if batch_size <= chunk_size:
        loss = step_fn(batch)
        loss.backward()
    else:
        raise NotImplementedError  # (port) the chunked path is never taken here
    optimizer.step()
    return loss, chunk_size


# bin/tabr.py
class Model(nn.Module):
    def __init__(
        self,
        *,
        n_num_features: int,
        n_bin_features: int,
        cat_cardinalities: list[int],
        n_classes: int | None,
        num_embeddings: dict | None,  # lib.deep.ModuleSpec
        d_main: int,
        d_multiplier: float,
        encoder_n_blocks: int,
        predictor_n_blocks: int,
        mixer_normalization: bool | Literal['auto'],
        context_dropout: float,
        dropout0: float,
        dropout1: float | Literal['dropout0'],
        normalization: str,
        activation: str,
        #
        # The following options should be used only when truly needed.
        memory_efficient: bool = False,
        candidate_encoding_batch_size: int | None = None,
        bug=None,
    ) -> None:
        if not memory_efficient:
            assert candidate_encoding_batch_size is None
        if mixer_normalization == 'auto':
            mixer_normalization = encoder_n_blocks > 0
        if encoder_n_blocks == 0:
            assert not mixer_normalization
        super().__init__()
        if dropout1 == 'dropout0':
            dropout1 = dropout0
        self.bug = bug

        self.one_hot_encoder = (
            OneHotEncoder(cat_cardinalities) if cat_cardinalities else None
        )
        assert num_embeddings is None  # (port) the California config has none
        self.num_embeddings = None

        # >>> E
        d_in = (
            n_num_features
            * (1 if num_embeddings is None else num_embeddings['d_embedding'])
            + n_bin_features
            + sum(cat_cardinalities)
        )
        d_block = int(d_main * d_multiplier)
        Normalization = getattr(nn, normalization)
        Activation = getattr(nn, activation)

        def make_block(prenorm: bool) -> nn.Sequential:
            return nn.Sequential(
                *([Normalization(d_main)] if prenorm else []),
                nn.Linear(d_main, d_block),
                Activation(),
                nn.Dropout(dropout0),
                nn.Linear(d_block, d_main),
                nn.Dropout(dropout1),
            )

        self.linear = nn.Linear(d_in, d_main)
        self.blocks0 = nn.ModuleList(
            [make_block(i > 0) for i in range(encoder_n_blocks)]
        )

        # >>> R
        self.normalization = Normalization(d_main) if mixer_normalization else None
        self.label_encoder = (
            nn.Linear(1, d_main)
            if n_classes is None
            else nn.Sequential(
                nn.Embedding(n_classes, d_main), _Lambda(lambda x: x.squeeze(-2))
            )
        )
        self.K = nn.Linear(d_main, d_main)
        self.T = nn.Sequential(
            nn.Linear(d_main, d_block),
            Activation(),
            nn.Dropout(dropout0),
            nn.Linear(d_block, d_main, bias=False),
        )
        self.dropout = nn.Dropout(context_dropout)

        # >>> P
        self.blocks1 = nn.ModuleList(
            [make_block(True) for _ in range(predictor_n_blocks)]
        )
        self.head = nn.Sequential(
            Normalization(d_main),
            Activation(),
            nn.Linear(d_main, get_d_out(n_classes)),
        )

        # >>>
        self.search_index = None
        self.memory_efficient = memory_efficient
        self.candidate_encoding_batch_size = candidate_encoding_batch_size
        self.reset_parameters()

    def reset_parameters(self):
        if isinstance(self.label_encoder, nn.Linear):
            bound = 1 / math.sqrt(2.0)
            nn.init.uniform_(self.label_encoder.weight, -bound, bound)  # type: ignore[code]
            nn.init.uniform_(self.label_encoder.bias, -bound, bound)  # type: ignore[code]
        else:
            assert isinstance(self.label_encoder[0], nn.Embedding)
            nn.init.uniform_(self.label_encoder[0].weight, -1.0, 1.0)  # type: ignore[code]

    def _encode(self, x_: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        x_num = x_.get('num')
        x_bin = x_.get('bin')
        x_cat = x_.get('cat')
        del x_

        x = []
        if x_num is None:
            assert self.num_embeddings is None
        else:
            x.append(
                x_num
                if self.num_embeddings is None
                else self.num_embeddings(x_num).flatten(1)
            )
        if x_bin is not None:
            x.append(x_bin)
        if x_cat is None:
            assert self.one_hot_encoder is None
        else:
            assert self.one_hot_encoder is not None
            x.append(self.one_hot_encoder(x_cat))
        assert x
        x = torch.cat(x, dim=1)

        x = self.linear(x)
        for block in self.blocks0:
            x = x + block(x)
        k = self.K(x if self.normalization is None else self.normalization(x))
        return x, k

    def forward(
        self,
        *,
        x_: dict[str, Tensor],
        y: Tensor | None,
        candidate_x_: dict[str, Tensor],
        candidate_y: Tensor,
        context_size: int,
        is_train: bool,
    ) -> Tensor:
        # >>>
        with torch.set_grad_enabled(
            torch.is_grad_enabled() and not self.memory_efficient
        ):
            candidate_k = self._encode(candidate_x_)[1]
        x, k = self._encode(x_)
        if is_train:
            # NOTE: here, we add the training batch back to the candidates after the
            # function `apply_model` removed them. The further code relies
            # on the fact that the first batch_size candidates come from the
            # training batch.
            assert y is not None
            candidate_k = torch.cat([k, candidate_k])
            if self.bug == "batch_labels_appended":
                candidate_y = torch.cat([candidate_y, y])
            else:
                candidate_y = torch.cat([y, candidate_y])
        else:
            assert y is None

        # >>>
        batch_size, d_main = k.shape
        device = k.device
        with torch.no_grad():
            # (port) faiss.IndexFlatL2(d_main): the exact search, written out
            all_distances = (
                k.square().sum(-1, keepdim=True) - 2 * k @ candidate_k.T + candidate_k.square().sum(-1)
            )
            distances: Tensor
            context_idx: Tensor
            distances, context_idx = torch.topk(
                all_distances, context_size + (1 if is_train else 0), dim=-1, largest=False, sorted=True
            )
            if is_train:
                if self.bug == "own_row_kept_in_context":
                    context_idx = context_idx[:, :-1]
                else:
                    # NOTE: to avoid leakage, the index i must be removed from the i-th row,
                    # (because of how candidate_k is constructed).
                    distances[
                        context_idx == torch.arange(batch_size, device=device)[:, None]
                    ] = torch.inf
                    # Not the most elegant solution to remove the argmax, but anyway.
                    context_idx = context_idx.gather(-1, distances.argsort()[:, :-1])

        context_k = candidate_k[context_idx]

        similarities = (
            -k.square().sum(-1, keepdim=True)
            + (2 * (k[..., None, :] @ context_k.transpose(-1, -2))).squeeze(-2)
            - context_k.square().sum(-1)
        )
        probs = F.softmax(similarities, dim=-1)
        probs = self.dropout(probs)

        context_y_emb = self.label_encoder(candidate_y[context_idx][..., None])
        values = context_y_emb + self.T(k[:, None] - context_k)
        context_x = (probs[:, None] @ values).squeeze(1)
        x = x + context_x

        # >>>
        for block in self.blocks1:
            x = x + block(x)
        x = self.head(x)
        return x


# ------------------------------------------------------------------------------------------------ (port) data
def synthetic_california(rng, n):
    X = rng.standard_normal((n, 8))
    X[:, 0] = np.exp(0.5 * X[:, 0])  # skewed, like median income
    X[:, 5] = rng.integers(1, 6, size=n)  # a few unique values, like house age buckets
    y = (np.log1p(X[:, 0]) * 1.5 + np.sin(X[:, 1] * 1.3) + 0.5 * X[:, 2] * X[:, 3] - 0.3 * X[:, 5]
         + 0.2 * rng.standard_normal(n))
    return X.astype(np.float64), y.astype(np.float64)


def quantile_normal(X: dict, seed: int) -> dict:
    """QuantileTransformer(output_distribution='normal', n_quantiles=max(min(n // 30, 1000), 10)) fitted on the
    training part with lib.data's 1e-3 noise, written out (port: no scikit-learn here)."""
    X_train = X['train']
    noise = 1e-3
    stds = np.std(X_train, axis=0, keepdims=True)
    noise_std = noise / np.maximum(stds, noise)
    X_train = X_train + noise_std * np.random.default_rng(seed).standard_normal(X_train.shape)
    n_quantiles = max(min(X['train'].shape[0] // 30, 1000), 10)
    refs = np.linspace(0, 1, n_quantiles)
    quantiles = np.quantile(X_train, refs, axis=0)
    out = {}
    for part, v in X.items():
        u = np.stack([np.interp(v[:, j], quantiles[:, j], refs) for j in range(v.shape[1])], axis=1)
        u = np.clip(u, 1e-7, 1 - 1e-7)
        out[part] = (math.sqrt(2) * torch.erfinv(torch.from_numpy(2 * u - 1))).numpy()
    return out


def _build(seed, bug=None):
    # delu.random.seed(C.seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device('cpu')
    rng = np.random.default_rng(seed)
    context_size, batch_size = 32, 128  # (port) 96, 256

    Xs, Ys = {}, {}
    for part, n in (('train', 1000), ('val', 300), ('test', 300)):
        Xs[part], Ys[part] = synthetic_california(rng, n)
    Xs = quantile_normal(Xs, seed)
    mean, std = Ys['train'].mean(), Ys['train'].std()  # y_policy = "standard"
    Ys = {k: (v - mean) / std for k, v in Ys.items()}
    data = {'X_num': {k: torch.as_tensor(v, dtype=torch.float32) for k, v in Xs.items()}}
    Y = {k: torch.as_tensor(v).float() for k, v in Ys.items()}
    Y_train = Y['train'].to(torch.float)

    model = Model(
        n_num_features=8,
        n_bin_features=0,
        cat_cardinalities=[],
        n_classes=None,
        num_embeddings=None,
        d_main=64,  # (port) 303
        context_dropout=0.23258422826138023,
        d_multiplier=2.0,
        encoder_n_blocks=0,
        predictor_n_blocks=1,
        mixer_normalization='auto',
        dropout0=0.5508268685197037,
        dropout1=0.0,
        normalization='LayerNorm',
        activation='ReLU',
        bug=bug,
    )
    model.to(device)

    def zero_wd_condition(
        module_name: str,
        module: nn.Module,
        parameter_name: str,
        parameter,
    ):
        return (
            'label_encoder' in module_name
            or 'label_encoder' in parameter_name
            or default_zero_weight_decay_condition(
                module_name, module, parameter_name, parameter
            )
        )

    optimizer = make_optimizer(
        model, type='AdamW', lr=0.001, weight_decay=0.0,  # (port) lr 0.000280842117039655
        zero_weight_decay_condition=zero_wd_condition
    )
    loss_fn = get_loss_fn('regression')

    train_size = Y['train'].shape[0]
    train_indices = torch.arange(train_size, device=device)

    def get_Xy(part: str, idx):
        batch = (
            {
                key[2:]: data[key][part]
                for key in data
                if key.startswith('X_')
            },
            Y[part],
        )
        return (
            batch
            if idx is None
            else ({k: v[idx] for k, v in batch[0].items()}, batch[1][idx])
        )

    def apply_model(part: str, idx: Tensor, training: bool):
        x, y = get_Xy(part, idx)

        candidate_indices = train_indices
        is_train = part == 'train'
        if is_train:
            # NOTE: here, the training batch is removed from the candidates.
            # It will be added back inside the model's forward pass.
            candidate_indices = candidate_indices[~torch.isin(candidate_indices, idx)]
        candidate_x, candidate_y = get_Xy(
            'train',
            # This condition is here for historical reasons, it could be just
            # the unconditional `candidate_indices`.
            None if candidate_indices is train_indices else candidate_indices,
        )

        out = model(
            x_=x,
            y=y if is_train else None,
            candidate_x_=candidate_x,
            candidate_y=candidate_y,
            context_size=context_size,
            is_train=is_train,
        )
        return out if bug == "output_not_squeezed" else out.squeeze(-1)

    @torch.inference_mode()
    def evaluate(_model=None, _batch=None, part='val', eval_batch_size=32768):
        model.eval()
        pred = torch.cat(
            [
                apply_model(part, idx, False)
                for idx in torch.arange(
                    Y[part].shape[0], device=device
                ).split(eval_batch_size)
            ]
        )
        model.train()
        return float(((pred.reshape(-1) - Y[part]) ** 2).mean().sqrt())

    st = {"batches": []}

    def train_step():
        if not st["batches"]:
            model.train()
            st["batches"] = list(make_random_batches(train_size, batch_size, device))
        batch_idx = st["batches"].pop(0)
        loss, _new_chunk_size = lib_train_step(
            optimizer,
            lambda idx: loss_fn(apply_model('train', idx, True), Y_train[idx]),
            batch_idx,
            batch_size,
        )
        return loss.detach()

    first_idx = torch.arange(batch_size)

    class _Applied(nn.Module):
        """``apply_model('train', idx, True)`` as a module over the batch's indices (the Program's model)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, idx):
            return apply_model('train', idx, True)

    model.train()
    return Program(name="tabr_regression", model=_Applied(), batch=(first_idx, Y_train[first_idx]),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=evaluate)


build = functools.partial(_build, bug=None)

BUGS = [
    # the own-index removal skipped: the top context_size + 1 are cut to context_size with each training object
    # still among its own neighbours (classic target leak, the one the forward pass's NOTE guards against); the
    # model learns to read its label back from the context, which no validation object can do.
    Bug("own_row_kept_in_context", functools.partial(_build, bug="own_row_kept_in_context"), "learning_ledger",
        ("TASK",)),
    # the batch's keys prepended to the candidates but its labels appended (classic order slip): every context
    # label is read batch_size rows away from its key.
    Bug("batch_labels_appended", functools.partial(_build, bug="batch_labels_appended"),
        "learning_ledger", ("TASK",)),
    # apply_model's squeeze(-1) left out (classic): mse_loss broadcasts the [B, 1] predictions against the [B]
    # targets, every prediction pulled toward the batch mean.
    Bug("output_not_squeezed", functools.partial(_build, bug="output_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
]
