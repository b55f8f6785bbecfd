"""The ResNet for tabular data of the ``rtdl`` package (Yura52/rtdl), ``ResNet.make_baseline`` (Linear -> residual
Blocks of BatchNorm1d, Linear, ReLU, Dropout, Linear, Dropout -> Head of BatchNorm1d, ReLU, Linear), trained by the
package's example notebook on a regression task: features standardized, the target standardized with the training
mean and std, AdamW(lr 1e-3, weight_decay 0), ``F.mse_loss`` on ``apply_model(x_batch).squeeze(1)``, shuffled index
batches of 256 (``zero.data.IndexLoader``), ``model.train()`` at every iteration and ``evaluate`` (eval mode,
``no_grad``, RMSE in target units) after every epoch.

Source: https://github.com/Yura52/rtdl
Commit: b130dd2e596c17109bef825bc9c8608e1ae617cc
Files: rtdl/modules.py (ResNet, _make_nn_module), examples/rtdl.ipynb
License: MIT (Copyright (c) 2022 rtld authors; full text in LICENSES/Yura52-rtdl.txt)
Domain: tabular (regression, ResNet baseline)

Deviations from the original:
- the notebook's default model is the FT-Transformer (already in the corpus from Yura52/tabular-dl-revisiting-models);
  its commented ResNet alternative is used here, with its sizes (d_main 128, n_blocks 2, dropout_first 0.2,
  dropout_second 0.0, lr 1e-3, weight_decay 0, batch_size 256) and ``d_hidden=256`` for the notebook's
  ``d_intermidiate=256`` (a keyword ``make_baseline`` does not have);
- data: instead of ``sklearn.datasets.fetch_california_housing`` (a download), 2000 synthetic rows of 8 features made
  from ``seed`` with a smooth nonlinear target plus noise; sklearn is not installed, so ``train_test_split`` (0.8,
  then 0.8) is a seeded permutation split and ``StandardScaler`` is written out; the notebook calls
  ``preprocess.fit_transform(v)`` on every part (refitting the scaler on val and test), which is kept as written;
- ``zero`` (libzero) is not installed: ``zero.improve_reproducibility`` is ``torch.manual_seed``,
  ``zero.data.IndexLoader`` a shuffled ``torch.randperm`` split into batches of 256 (the last one partial),
  ``zero.iter_batches`` a slice loop; the ``ProgressTracker`` early stopping and printing are left out;
- one ``train_step`` is one iteration of the epoch loop; ``eval_fn`` is ``evaluate`` on a given (x, y) batch
  (``sklearn.metrics.mean_squared_error`` written out) and does not restore train mode, as in the notebook, whose
  loop calls ``model.train()`` at every iteration.
"""
# ruff: noqa: PLR0402, UP006, UP007, UP035, UP037  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from typing import Callable, Type, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- rtdl/modules.py ---------------------------------------------------------------------------------------------

ModuleType = Union[str, Callable[..., nn.Module]]


def _make_nn_module(module_type: ModuleType, *args) -> nn.Module:
    if isinstance(module_type, str):
        try:
            cls = getattr(nn, module_type)
        except AttributeError as err:
            raise ValueError(
                f'Failed to construct the module {module_type} with the arguments {args}'
            ) from err
        return cls(*args)
    else:
        return module_type(*args)


class ResNet(nn.Module):
    """The ResNet model used in [gorishniy2021revisiting].

    The following scheme describes the architecture:

    .. code-block:: text

        ResNet: (in) -> Linear -> Block -> ... -> Block -> Head -> (out)

                 |-> Norm -> Linear -> Activation -> Dropout -> Linear -> Dropout ->|
                 |                                                                  |
         Block: (in) ------------------------------------------------------------> Add -> (out)

          Head: (in) -> Norm -> Activation -> Linear -> (out)

    Examples:
        .. testcode::

            x = torch.randn(4, 2)
            module = ResNet.make_baseline(
                d_in=x.shape[1],
                n_blocks=2,
                d_main=3,
                d_hidden=4,
                dropout_first=0.25,
                dropout_second=0.0,
                d_out=1
            )
            assert module(x).shape == (len(x), 1)

    References:
        * [gorishniy2021revisiting] Yury Gorishniy, Ivan Rubachev, Valentin Khrulkov, Artem Babenko, "Revisiting Deep Learning Models for Tabular Data", 2021
    """

    class Block(nn.Module):
        """The main building block of `ResNet`."""

        def __init__(
            self,
            *,
            d_main: int,
            d_hidden: int,
            bias_first: bool,
            bias_second: bool,
            dropout_first: float,
            dropout_second: float,
            normalization: ModuleType,
            activation: ModuleType,
            skip_connection: bool,
        ) -> None:
            super().__init__()
            self.normalization = _make_nn_module(normalization, d_main)
            self.linear_first = nn.Linear(d_main, d_hidden, bias_first)
            self.activation = _make_nn_module(activation)
            self.dropout_first = nn.Dropout(dropout_first)
            self.linear_second = nn.Linear(d_hidden, d_main, bias_second)
            self.dropout_second = nn.Dropout(dropout_second)
            self.skip_connection = skip_connection

        def forward(self, x: Tensor) -> Tensor:
            x_input = x
            x = self.normalization(x)
            x = self.linear_first(x)
            x = self.activation(x)
            x = self.dropout_first(x)
            x = self.linear_second(x)
            x = self.dropout_second(x)
            if self.skip_connection:
                x = x_input + x
            return x

    class Head(nn.Module):
        """The final module of `ResNet`."""

        def __init__(
            self,
            *,
            d_in: int,
            d_out: int,
            bias: bool,
            normalization: ModuleType,
            activation: ModuleType,
        ) -> None:
            super().__init__()
            self.normalization = _make_nn_module(normalization, d_in)
            self.activation = _make_nn_module(activation)
            self.linear = nn.Linear(d_in, d_out, bias)

        def forward(self, x: Tensor) -> Tensor:
            if self.normalization is not None:
                x = self.normalization(x)
            x = self.activation(x)
            x = self.linear(x)
            return x

    def __init__(
        self,
        *,
        d_in: int,
        n_blocks: int,
        d_main: int,
        d_hidden: int,
        dropout_first: float,
        dropout_second: float,
        normalization: ModuleType,
        activation: ModuleType,
        d_out: int,
    ) -> None:
        """
        Note:
            `make_baseline` is the recommended constructor.
        """
        super().__init__()

        self.first_layer = nn.Linear(d_in, d_main)
        if d_main is None:
            d_main = d_in
        self.blocks = nn.Sequential(
            *[
                ResNet.Block(
                    d_main=d_main,
                    d_hidden=d_hidden,
                    bias_first=True,
                    bias_second=True,
                    dropout_first=dropout_first,
                    dropout_second=dropout_second,
                    normalization=normalization,
                    activation=activation,
                    skip_connection=True,
                )
                for _ in range(n_blocks)
            ]
        )
        self.head = ResNet.Head(
            d_in=d_main,
            d_out=d_out,
            bias=True,
            normalization=normalization,
            activation=activation,
        )

    @classmethod
    def make_baseline(
        cls: Type['ResNet'],
        *,
        d_in: int,
        n_blocks: int,
        d_main: int,
        d_hidden: int,
        dropout_first: float,
        dropout_second: float,
        d_out: int,
    ) -> 'ResNet':
        """Create a "baseline" `ResNet`.

        This variation of ResNet was used in [gorishniy2021revisiting]. Features:

        * :code:`Activation` = :code:`ReLU`
        * :code:`Norm` = :code:`BatchNorm1d`

        Args:
            d_in: the input size
            n_blocks: the number of Blocks
            d_main: the input size (or, equivalently, the output size) of each Block
            d_hidden: the output size of the first linear layer in each Block
            dropout_first: the dropout rate of the first dropout layer in each Block.
            dropout_second: the dropout rate of the second dropout layer in each Block.

        References:
            * [gorishniy2021revisiting] Yury Gorishniy, Ivan Rubachev, Valentin Khrulkov, Artem Babenko, "Revisiting Deep Learning Models for Tabular Data", 2021
        """
        return cls(
            d_in=d_in,
            n_blocks=n_blocks,
            d_main=d_main,
            d_hidden=d_hidden,
            dropout_first=dropout_first,
            dropout_second=dropout_second,
            normalization='BatchNorm1d',
            activation='ReLU',
            d_out=d_out,
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.first_layer(x)
        x = self.blocks(x)
        x = self.head(x)
        return x


# ---- examples/rtdl.ipynb -----------------------------------------------------------------------------------------

def make_data(seed, n=2000, d=8):
    g = np.random.default_rng(seed)
    X_all = g.standard_normal((n, d)).astype('float32') * g.uniform(0.5, 3.0, d).astype('float32') + 5.0
    z = (X_all - 5.0) / 2.0
    y_all = (np.sin(z[:, 0]) + 0.5 * z[:, 1] * z[:, 2] + np.abs(z[:, 3]) + 0.3 * z[:, 4]
             + 0.1 * g.standard_normal(n)).astype('float32') * 1.5 + 2.0
    return X_all, y_all


def _build(seed, bug=None):
    device = torch.device('cpu')
    torch.manual_seed(seed)  # zero.improve_reproducibility(seed=123456)
    task_type = 'regression'
    X_all, y_all = make_data(seed)
    n_classes = None

    # sklearn.model_selection.train_test_split(..., train_size=0.8), twice
    g = np.random.default_rng(seed + 1)
    perm = g.permutation(len(X_all))
    n_trainval = int(0.8 * len(X_all))
    trainval, test = perm[:n_trainval], perm[n_trainval:]
    n_train = int(0.8 * len(trainval))
    parts = {'train': trainval[:n_train], 'val': trainval[n_train:], 'test': test}
    X = {k: X_all[v] for k, v in parts.items()}
    y = {k: y_all[v] for k, v in parts.items()}

    def fit_transform(v):  # sklearn.preprocessing.StandardScaler().fit_transform(v)
        return (v - v.mean(0)) / v.std(0)

    # not the best way to preprocess features, but enough for the demonstration
    X = {
        k: torch.tensor(fit_transform(v), device=device)
        for k, v in X.items()
    }
    y = {k: torch.tensor(v, device=device) for k, v in y.items()}

    # !!! CRUCIAL for neural networks when solving regression problems !!!
    if task_type == 'regression':
        y_mean = y['train'].mean().item()
        y_std = y['train'].std().item()
        y = {k: (v - y_mean) / y_std for k, v in y.items()}
    else:
        y_std = y_mean = None

    if task_type != 'multiclass':
        y = {k: v.float() for k, v in y.items()}

    d_out = n_classes or 1

    model = ResNet.make_baseline(
        d_in=X_all.shape[1],
        d_main=128,
        d_hidden=256,
        dropout_first=0.2,
        dropout_second=0.0,
        n_blocks=2,
        d_out=d_out,
    )
    lr = 0.001
    weight_decay = 0.0

    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = (
        F.binary_cross_entropy_with_logits
        if task_type == 'binclass'
        else F.cross_entropy
        if task_type == 'multiclass'
        else F.mse_loss
    )

    def apply_model(x_num, x_cat=None):
        assert x_cat is None
        return model(x_num)

    @torch.no_grad()
    def evaluate(model, batch):
        x_part, y_part = batch
        model.eval()
        prediction = []
        for i in range(0, len(x_part), 1024):  # zero.iter_batches(X[part], 1024)
            prediction.append(model(x_part[i:i + 1024]))
        prediction = torch.cat(prediction).squeeze(1).cpu().numpy()
        target = y_part.cpu().numpy()
        score = float(np.mean((target - prediction) ** 2)) ** 0.5 * y_std
        return score

    batch_size = 256
    n_train = len(X['train'])
    state = {"batches": []}

    def next_batch_idx():  # zero.data.IndexLoader(len(X['train']), batch_size, device=device)
        if not state["batches"]:
            state["batches"] = list(torch.randperm(n_train, device=device).split(batch_size))
        return state["batches"].pop(0)

    def train_step():
        batch_idx = next_batch_idx()
        model.train()
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        x_batch = X['train'][batch_idx]
        y_batch = y['train'][batch_idx]
        if bug == "target_not_squeezed":
            loss = loss_fn(apply_model(x_batch), y_batch)  # [B, 1] against [B]: broadcast to [B, B]
        else:
            loss = loss_fn(apply_model(x_batch).squeeze(1), y_batch)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def declared_loss(outputs, targets):
        if bug == "target_not_squeezed":
            return loss_fn(outputs, targets)
        return loss_fn(outputs.squeeze(1), targets)

    batch = (X['train'][:batch_size], y['train'][:batch_size])
    return Program(name="rtdl_resnet", model=model, batch=batch, loss_fn=declared_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    # the model's [B, 1] output is not squeezed before F.mse_loss against the [B] target: the difference broadcasts
    # to [B, B] and the loss compares every prediction with every target (classic; torch only warns).
    Bug("target_not_squeezed", functools.partial(_build, bug="target_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() moved between backward() and step(): every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("first_layer.weight",)),
]
