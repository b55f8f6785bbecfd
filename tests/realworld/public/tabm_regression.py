"""TabM (a parameter-efficient ensemble of k MLPs with BatchEnsemble linear layers) trained by the repository's
``example.ipynb`` on a regression task: ``TabM.make(n_num_features, cat_cardinalities=[], d_out=1)`` (defaults:
k 32, 3 blocks without numerical embeddings, dropout 0.1, ReLU, 'random-signs' first scaling initialized by
feature chunks), standardized training labels, AdamW(lr 2e-3, weight_decay 3e-4), gradient clipping at norm 1.0,
``share_training_batches=True``: every one of the k predictions is trained on the same batch with
``mse_loss(y_pred.flatten(0, 1), y_true.repeat_interleave(k))``; the evaluation averages the k de-standardized
predictions and reports -RMSE.

Source: https://github.com/yandex-research/tabm
Commit: 28e47ae301c92ec37787dde1ce923a0793f405b4
Files: tabm.py, example.ipynb
License: Apache-2.0 (full text in LICENSES/yandex-research-tabm.txt)
Domain: tabular deep learning (regression, parameter-efficient ensemble)

Deviations from the original:
- data: ``sklearn.datasets.fetch_california_housing()`` (a download) is replaced by 2,560 synthetic rows of 8
  numerical features made from ``seed`` with a fixed nonlinear target (products, a sine, a threshold and noise);
  the split keeps the notebook's shape (80 % train+val / 20 % test, then 80 % train / 20 % val), drawn with a
  ``np.random.RandomState(seed)`` instead of ``sklearn.model_selection.train_test_split``;
- preprocessing: sklearn is not installed; the notebook's "simple preprocessing strategy" (its commented
  alternative, ``StandardScaler`` fitted on the training part) is written out in numpy instead of the
  ``QuantileTransformer`` it runs;
- ``rtdl_num_embeddings`` is not installed: the notebook's first option, ``num_embeddings = None`` ("No
  embeddings"), is used instead of the piecewise-linear embeddings it ends with, so ``TabM.make`` picks 3 blocks
  and the 'random-signs' scaling, as the library does without embeddings;
- sizes: d_block 512 -> 64 (k 32, batch_size 256, dropout, lr, weight decay and clipping unchanged);
- ``tabm.py`` is reduced to what the 'tabm' architecture with numerical features only runs: the categorical
  one-hot module, the 'tabm-mini' / 'tabm-packed' backbones, the ensemble normalization layers, the layer
  replacement helpers and most argument checks are left out; the copied lines are unchanged;
- AMP and torch.compile are off in the notebook and are dropped; no CUDA; the early-stopping loop (patience 16,
  checkpoints) is not run: one ``train_step`` is one batch of the epoch loop, a new epoch draws a new permutation
  (from a generator seeded from ``seed``); ``eval_fn`` is ``evaluate('val')``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

# ruff: noqa: PLC0206, PLR0402, UP045  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from typing import Literal, NamedTuple, Optional

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.parameter import Parameter

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS, N_NUM_FEATURES, D_BLOCK = 2560, 8, 64

_INTERNAL_ERROR_MESSAGE = (
    'Internal error (this code must be unreachable; please, report a bug)'
)


# ---- tabm.py: initialization ---------------------------------------------------------------------------------

def _init_rsqrt_uniform_(tensor: Tensor, d: int) -> Tensor:
    assert d > 0, _INTERNAL_ERROR_MESSAGE
    d_rsqrt = d**-0.5
    return nn.init.uniform_(tensor, -d_rsqrt, d_rsqrt)


@torch.inference_mode()
def _init_random_signs_(tensor: Tensor) -> Tensor:
    return tensor.bernoulli_(0.5).mul_(2).add_(-1)


ScalingRandomInitialization = Literal['random-signs', 'normal']
ScalingInitialization = Literal[ScalingRandomInitialization, 'ones']


def init_scaling_(
    x: Tensor,
    distribution: ScalingInitialization,
    chunks: Optional[list[int]] = None,
) -> Tensor:
    if distribution == 'ones':
        if chunks is not None:
            raise ValueError(f'When {distribution=}, chunks must be None')
        init_fn = nn.init.ones_
    elif distribution == 'normal':
        init_fn = nn.init.normal_
    elif distribution == 'random-signs':
        init_fn = _init_random_signs_
    else:
        raise ValueError(f'Unknown {distribution=}')

    if chunks is None:
        return init_fn(x)

    else:
        if sum(chunks) != x.shape[-1]:
            raise ValueError(
                'The tensor shape and chunks are incompatible:'
                f' {x.shape[-1]=} != {sum(chunks)=}'
            )
        with torch.inference_mode():
            chunk_start = 0
            for chunk_size in chunks:
                x[..., chunk_start : chunk_start + chunk_size] = init_fn(
                    torch.empty(*x.shape[:-1], 1)
                )
                chunk_start += chunk_size
        return x


# ---- tabm.py: ensemble modules -------------------------------------------------------------------------------

def ensemble_view(x: Tensor, k: int, training: bool) -> Tensor:
    if x.ndim == 2:
        x = x.unsqueeze(-2).expand(-1, k, -1)

    elif x.ndim == 3:
        if x.shape[-2] != k:
            raise ValueError(
                f'The penultimate input dimension must be equal to k={k},'
                f' however: {x.shape[-2]=}'
            )

    else:
        raise ValueError(
            f'The must must have either two or three dimensions, however: {x.ndim=}'
        )

    return x


class EnsembleView(nn.Module):
    """Turn a tensor to a valid ensemble input."""

    def __init__(self, *, k: int) -> None:
        super().__init__()
        self._k = k

    @property
    def k(self) -> int:
        """The ensemble size."""
        return self._k

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        return ensemble_view(x, self.k, self.training)


class LinearEnsemble(nn.Module):
    """An ensemble of k linear layers applied in parallel to k inputs."""

    bias: Optional[Tensor]

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, k: int) -> None:
        super().__init__()
        self.weight = Parameter(torch.empty(k, in_features, out_features))
        self.register_parameter(
            'bias',
            Parameter(torch.empty(k, out_features)) if bias else None,
        )
        self.reset_parameters()

    @property
    def in_features(self) -> int:
        """The input dimension."""
        return self.weight.shape[-2]

    @property
    def out_features(self) -> int:
        """The output dimension."""
        return self.weight.shape[-1]

    @property
    def k(self) -> int:
        """The ensemble size."""
        return self.weight.shape[0]

    def reset_parameters(self):
        d = self.in_features
        _init_rsqrt_uniform_(self.weight, d)
        if self.bias is not None:
            _init_rsqrt_uniform_(self.bias, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Do the forward pass."""
        x = x.transpose(0, 1)
        x = x @ self.weight
        x = x.transpose(0, 1)
        if self.bias is not None:
            x = x + self.bias
        return x


class LinearBatchEnsemble(nn.Module):
    """A parameter-efficient ensemble of $k$ linear layers applied in parallel to $k$ inputs."""

    bias: Optional[Tensor]

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, k: int, scaling_init,
                 first_scaling_init_chunks: Optional[list[int]] = None):
        super().__init__()
        self.weight = Parameter(torch.empty(out_features, in_features))
        self.r = Parameter(  # R
            torch.empty(k, in_features)
        )
        self.s = Parameter(  # S
            torch.empty(k, out_features)
        )
        self.register_parameter(
            'bias',
            Parameter(torch.empty(k, out_features)) if bias else None,
        )
        self.in_features = in_features
        self.out_features = out_features
        self.k = k
        if isinstance(scaling_init, tuple):
            self._first_scaling_init = scaling_init[0]
            self._second_scaling_init = scaling_init[1]
        else:
            self._first_scaling_init = scaling_init
            self._second_scaling_init = scaling_init
        self._first_scaling_init_chunks = first_scaling_init_chunks

        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init_rsqrt_uniform_(self.weight, self.in_features)
        init_scaling_(self.r, self._first_scaling_init, self._first_scaling_init_chunks)
        init_scaling_(self.s, self._second_scaling_init, None)

        if self.bias is not None:
            bias_init = torch.empty(
                # NOTE
                # All k biases have the same initialization (this is why the shape of
                # bias_init is (out_features,) instead of (k, out_features)).
                self.out_features,
                dtype=self.weight.dtype,
                device=self.weight.device,
            )
            bias_init = _init_rsqrt_uniform_(bias_init, self.in_features)
            with torch.inference_mode():
                self.bias.copy_(bias_init)

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        # >>> Equation (5) from the BatchEnsemble paper (arXiv v2).
        x = x * self.r
        x = x @ self.weight.T
        x = x * self.s
        # <<<
        if self.bias is not None:
            x = x + self.bias
        return x


# ---- tabm.py: backbones --------------------------------------------------------------------------------------

class MLPBackboneBatchEnsemble(nn.Module):
    """A parameter-efficient ensemble of $k$ MLP backbones applied in parallel (BatchEnsemble, TabM init)."""

    def __init__(self, *, d_in, n_blocks, d_block, dropout, activation='ReLU', k, tabm_init, scaling_init,
                 start_scaling_init_chunks):
        Activation = getattr(nn, activation)
        super().__init__()
        self._k = k
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(
                    LinearBatchEnsemble(
                        d_in if i == 0 else d_block,
                        d_block,
                        k=k,
                        scaling_init=(
                            ((scaling_init, 'ones') if i == 0 else 'ones')
                            if tabm_init
                            else scaling_init
                        ),
                        first_scaling_init_chunks=(
                            start_scaling_init_chunks if i == 0 else None
                        ),
                    ),
                    Activation(),
                    nn.Dropout(dropout),
                )
                for i in range(n_blocks)
            ]
        )

    @property
    def k(self) -> int:
        """The ensemble size."""
        return self._k

    def get_original_output_shape(self) -> torch.Size:
        return torch.Size((self.blocks[-1][0].weight.shape[0],))

    def forward(self, x: Tensor) -> Tensor:
        """Do the forward pass."""
        for block in self.blocks:
            x = block(x)
        return x


def make_tabm_backbone(*, d_in, n_blocks, d_block, dropout, activation='ReLU', k, arch_type='tabm',
                       start_scaling_init, start_scaling_init_chunks):
    mlp_ensemble_kwargs = {
        'd_in': d_in,
        'n_blocks': n_blocks,
        'd_block': d_block,
        'dropout': dropout,
        'activation': activation,
        'k': k,
    }
    if arch_type == 'tabm':
        assert start_scaling_init is not None, _INTERNAL_ERROR_MESSAGE
        backbone = MLPBackboneBatchEnsemble(
            **mlp_ensemble_kwargs,  # type: ignore[arg-type]
            tabm_init=True,
            scaling_init=start_scaling_init,
            start_scaling_init_chunks=start_scaling_init_chunks,
        )
    else:
        raise ValueError(f'Unknown {arch_type=}')
    return backbone


# ---- tabm.py: TabM -------------------------------------------------------------------------------------------

class TabM(nn.Module):
    """TabM -- a Tabular DL model that makes Multiple predictions."""

    def __init__(self, *, n_num_features: int = 0, cat_cardinalities=None, d_out, num_embeddings=None,
                 **backbone_kwargs) -> None:
        if cat_cardinalities is None:
            cat_cardinalities = []
        assert not cat_cardinalities and num_embeddings is None, 'not ported'
        super().__init__()

        d_features: list[int] = []  # Representation sizes of all features.

        d_features.extend(1 for _ in range(n_num_features))
        self.num_module = num_embeddings
        self.cat_module = None

        self.ensemble_view = EnsembleView(k=backbone_kwargs['k'])
        self.backbone = make_tabm_backbone(
            d_in=sum(d_features),  # Flat representation size.
            start_scaling_init_chunks=(
                None
                if backbone_kwargs['start_scaling_init'] is None
                else d_features
            ),
            **backbone_kwargs,  # type: ignore[misc]
        )
        self.output = (
            None
            if d_out is None
            else LinearEnsemble(
                self.backbone.get_original_output_shape()[0], d_out, k=self.backbone.k
            )
        )

        self._n_num_features = n_num_features
        self._n_cat_features = len(cat_cardinalities)

    @classmethod
    def make(cls, **kwargs) -> TabM:
        has_num_embeddings = kwargs.get('num_embeddings') is not None
        default_arch_type = 'tabm'
        defaults = {
            'n_blocks': 2 if has_num_embeddings else 3,
            'd_block': 512,
            'dropout': 0.1,
            'activation': 'ReLU',
            'k': 32,
            'arch_type': default_arch_type,
            'start_scaling_init': (
                None
                if kwargs.get('arch_type', default_arch_type) == 'tabm-packed'
                else 'normal'
                if has_num_embeddings
                else 'random-signs'
            ),
        }
        return TabM(**(defaults | kwargs))

    @property
    def k(self) -> int:
        """The number of submodels."""
        return self.backbone.k

    def forward(self, x_num: Optional[Tensor] = None, x_cat: Optional[Tensor] = None) -> Tensor:
        batch_size, ndim = len(x_num), x_num.ndim
        if x_num.ndim == 3:
            x_num = x_num.flatten(0, -2)

        x_: list[Tensor] = []
        if x_num is not None:
            x_.append(x_num if self.num_module is None else self.num_module(x_num))
        x = torch.column_stack([x.flatten(1, -1) for x in x_])

        if ndim == 3:
            # Unflatten the first dimension back to the original shape.
            x = x.unflatten(0, (batch_size, self.backbone.k))  # (B * K, D) -> (B, K, D)

        x = self.ensemble_view(x)
        x = self.backbone(x)
        if self.output is not None:
            x = self.output(x)
        return x


# ---- example.ipynb -------------------------------------------------------------------------------------------

class RegressionLabelStats(NamedTuple):
    mean: float
    std: float


def make_dataset(seed):
    """The stand-in for California housing: 8 numerical features and a fixed nonlinear target."""
    g = np.random.RandomState(seed)
    X_num = g.randn(N_ROWS, N_NUM_FEATURES) * np.array([1, 2, 0.5, 1, 3, 1, 1, 0.2]) + np.arange(N_NUM_FEATURES)
    z = (X_num - np.arange(N_NUM_FEATURES)) / np.array([1, 2, 0.5, 1, 3, 1, 1, 0.2])
    Y = (2.0 + z[:, 0] * z[:, 1] + np.sin(2 * z[:, 2]) + 1.5 * (z[:, 3] > 0.3) + 0.5 * z[:, 4]
         + 0.1 * g.randn(N_ROWS))
    return X_num, Y


def _build(seed, bug=None):
    torch.manual_seed(seed + 2)
    g = np.random.RandomState(seed + 1)

    # >>> Dataset.
    task_type = 'regression'
    n_classes = None
    X_num, Y = make_dataset(seed)
    task_is_regression = task_type == 'regression'

    # >>> Numerical (continuous) features.
    X_num: np.ndarray = X_num.astype(np.float32)
    n_num_features = X_num.shape[1]

    # >>> Categorical features.
    cat_cardinalities = []

    # >>> Labels.
    Y = Y.astype(np.float32)

    # >>> Split the dataset.
    all_idx = g.permutation(len(Y))
    trainval_idx, test_idx = all_idx[: int(0.8 * len(Y))], all_idx[int(0.8 * len(Y)):]
    train_idx, val_idx = trainval_idx[: int(0.8 * len(trainval_idx))], trainval_idx[int(0.8 * len(trainval_idx)):]
    data_numpy = {
        'train': {'x_num': X_num[train_idx], 'y': Y[train_idx]},
        'val': {'x_num': X_num[val_idx], 'y': Y[val_idx]},
        'test': {'x_num': X_num[test_idx], 'y': Y[test_idx]},
    }

    # Simple preprocessing strategy (StandardScaler, written out).
    mean = data_numpy['train']['x_num'].mean(0)
    std = data_numpy['train']['x_num'].std(0)
    for part in data_numpy:
        data_numpy[part]['x_num'] = (data_numpy[part]['x_num'] - mean) / std

    Y_train = data_numpy['train']['y'].copy()
    # For regression tasks, it is highly recommended to standardize the training labels.
    regression_label_stats = RegressionLabelStats(
        Y_train.mean().item(), Y_train.std().item()
    )
    Y_train = (Y_train - regression_label_stats.mean) / regression_label_stats.std

    device = torch.device('cpu')
    data = {
        part: {k: torch.as_tensor(v, device=device) for k, v in data_numpy[part].items()}
        for part in data_numpy
    }
    Y_train = torch.as_tensor(Y_train, device=device)
    for part in data:
        data[part]['y'] = data[part]['y'].float()
    Y_train = Y_train.float()

    # No embeddings.
    num_embeddings = None

    model = TabM.make(
        n_num_features=n_num_features,
        cat_cardinalities=cat_cardinalities,
        d_out=1 if n_classes is None else n_classes,
        num_embeddings=num_embeddings,
        d_block=D_BLOCK,
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=3e-4)
    gradient_clipping_norm: Optional[float] = 1.0
    evaluation_mode = torch.inference_mode

    share_training_batches = True

    def apply_model(part: str, idx: Tensor) -> Tensor:
        return (
            model(
                data[part]['x_num'][idx],
                data[part]['x_cat'][idx] if 'x_cat' in data[part] else None,
            )
            .squeeze(-1)  # Remove the last dimension for regression tasks.
            .float()
        )

    base_loss_fn = (
        nn.functional.mse_loss if task_is_regression else nn.functional.cross_entropy
    )

    def loss_fn(y_pred: Tensor, y_true: Tensor) -> Tensor:
        # TabM produces k predictions. Each of them must be trained separately.

        # Regression:     (batch_size, k)            -> (batch_size * k,)
        y_pred = y_pred.flatten(0, 1)

        if share_training_batches:
            # (batch_size,) -> (batch_size * k,)
            if bug == "labels_repeated_not_interleaved":
                # the batch tiled k times ([y0, y1, ..., y0, y1, ...]) against predictions laid out per object
                y_true = y_true.repeat(model.backbone.k)
            else:
                y_true = y_true.repeat_interleave(model.backbone.k)
        else:
            # (batch_size, k) -> (batch_size * k,)
            y_true = y_true.flatten(0, 1)

        return base_loss_fn(y_pred, y_true)

    @evaluation_mode()
    def evaluate(part: str) -> float:
        if bug != "eval_without_model_eval":
            model.eval()

        eval_batch_size = 8096
        y_pred: np.ndarray = (
            torch.cat(
                [
                    apply_model(part, idx)
                    for idx in torch.arange(len(data[part]['y']), device=device).split(
                        eval_batch_size
                    )
                ]
            )
            .cpu()
            .numpy()
        )
        # Transform the predictions back to the original label space.
        assert regression_label_stats is not None
        y_pred = y_pred * regression_label_stats.std + regression_label_stats.mean

        # Compute the mean of the k predictions.
        y_pred = y_pred.mean(1)

        y_true = data[part]['y'].cpu().numpy()
        score = -(float(np.mean((y_true - y_pred) ** 2)) ** 0.5)
        return float(score)  # The higher -- the better.

    train_size = len(train_idx)
    batch_size = 256
    perm_gen = torch.Generator().manual_seed(seed)

    def batch_stream():
        while True:
            batches = (
                # Create one standard batch sequence.
                torch.randperm(train_size, device=device, generator=perm_gen).split(batch_size)
            )
            yield from batches

    stream = batch_stream()

    def train_step():
        batch_idx = next(stream)
        model.train()
        optimizer.zero_grad()
        loss = loss_fn(apply_model('train', batch_idx), Y_train[batch_idx])

        loss.backward()

        if gradient_clipping_norm is not None:
            torch.nn.utils.clip_grad.clip_grad_norm_(
                model.parameters(), gradient_clipping_norm
            )

        optimizer.step()
        return loss.detach()

    first = torch.arange(batch_size)
    batch = ({"x_num": data['train']['x_num'][first]}, Y_train[first])

    def declared_loss(outputs, y_true):
        return loss_fn(outputs.squeeze(-1).float(), y_true)

    return Program(name="tabm_regression", model=model, batch=batch, loss_fn=declared_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda model, batch: evaluate('val'), task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    # the shared batch's labels tiled with repeat() instead of repeat_interleave(): the flattened (batch, k)
    # predictions of object i are compared with the labels of other objects.
    Bug("labels_repeated_not_interleaved", functools.partial(_build, bug="labels_repeated_not_interleaved"),
        "learning_ledger", ("TASK",)),
    # evaluate() without model.eval(): the blocks' dropout stays on while the validation score is computed.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
]
