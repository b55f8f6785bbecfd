"""Darts' N-BEATS (generic architecture): ``_NBEATSModule`` (stacks of blocks; each block a stack of fully
connected layers forking into backcast / forecast expansion coefficients and linear waveform generators; doubly
residual: each block's backcast is subtracted from its input, forecasts are summed), the last block's backcast
branch frozen as written; trained by darts' ``PLForecastingModule``: ``training_step`` -> ``_train_val_step``
(``_process_input_batch`` concatenates the past features, the forward, ``_compute_loss``: ``MSELoss`` on
``output.squeeze(dim=-1)``), ``configure_optimizers`` (Adam, torch defaults), under Lightning's automatic
optimization, batches of 32 shuffled input/output windows of one series.

Source: https://github.com/unit8co/darts
Commit: 2be8e43fbdc1265209f33bbe8bae81f3e4d9146f
Files: darts/models/forecasting/nbeats.py, darts/models/forecasting/pl_forecasting_module.py,
  darts/models/forecasting/torch_forecasting_model.py (defaults: batch_size 32, Adam, MSELoss)
License: Apache-2.0 (full text in LICENSES/unit8co-darts.txt)
Domain: time-series forecasting (N-BEATS, Lightning module)

Deviations from the original:
- darts is not installed here: ``_NBEATSModule`` and the parts of ``PLForecastingModule`` the training loop runs
  (``__init__``'s criteria and optimizer settings, ``io_processor`` without reversible instance norm,
  ``training_step``, ``validation_step``, ``_train_val_step``, ``_compute_loss``, ``configure_optimizers``
  without a scheduler, ``_produce_train_output``, ``_process_input_batch``) are copied into one module class;
  torchmetrics (none configured by default), likelihoods, prediction, checkpoints and ``MonteCarloDropout``
  (``dropout`` is 0.0 by default, so no dropout layer is built) are left out;
- ``NBEATSModel`` (the wrapper) is not ported: its defaults are written in (``generic_architecture=True``,
  ``num_blocks=1``, ``expansion_coefficient_dim=5``, ``batch_norm=False`` as ``NBEATSModel.__init__`` forces,
  ``activation="ReLU"``); sizes: ``num_stacks`` 30 -> 4, ``num_layers`` 4 -> 2, ``layer_widths`` 256 -> 32,
  ``input_chunk_length=24``, ``output_chunk_length=12`` (no default in darts);
- data: one synthetic univariate series of 400 points made from ``seed`` (two sines of random phase, a slow trend
  and noise), float32 (darts trains in the series' dtype); the training dataset is written out as every window of
  24 past and the next 12 future points (darts' sequential training dataset, without covariates or sample weights;
  its sampling order is not kept: the DataLoader shuffles anyway), batches of
  ``(past_target, None, None, None, None, None, future_target)`` like darts' collate gives without covariates;
- Lightning's automatic optimization is driven one batch at a time (``training_step`` inside the optimizer closure,
  ``optimizer_zero_grad``, ``backward``, ``optimizer_step``); a ``Trainer(barebones=True)`` is attached so
  ``self.log`` works (barebones makes it a no-op); the validation epoch is the ``eval_fn`` (``validation_step``
  over windows of a held-out continuation of the series); the declared batch's inputs are what
  ``_produce_train_output`` hands the module in training, ``(x_past, None, None, future_target)`` (darts passes
  the future target to every module; N-BEATS's forward ignores it);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B008, C408, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import logging
import pathlib
import sys
import warnings
from enum import Enum
from functools import wraps
from typing import NewType

import numpy as np
import torch
import torch.nn as nn
from pytorch_lightning import LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
INPUT_CHUNK_LENGTH, OUTPUT_CHUNK_LENGTH, BATCH_SIZE = 24, 12, 32


# ---- darts/models/forecasting/pl_forecasting_module.py ---------------------------------------------------------

def io_processor(forward):
    """Applies some input / output processing to PLForecastingModule.forward (reversible instance norm: off)."""

    @wraps(forward)
    def forward_wrapper(self, x_in, *args, **kwargs):
        if not self.use_reversible_instance_norm:
            return forward(self, x_in, *args, **kwargs)
        raise NotImplementedError("reversible instance norm is not ported")

    return forward_wrapper


class PLForecastingModule(LightningModule):
    def __init__(
        self,
        input_chunk_length: int,
        output_chunk_length: int,
        output_chunk_shift: int = 0,
        train_sample_shape: tuple | None = None,
        loss_fn: nn.modules.loss._Loss = nn.MSELoss(),
        likelihood=None,
        optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam,
        optimizer_kwargs: dict | None = None,
        use_reversible_instance_norm: bool | dict = False,
        bug=None,
    ) -> None:
        super().__init__()
        self.bug = bug
        self.input_chunk_length = input_chunk_length
        self._output_chunk_length = output_chunk_length
        self.output_chunk_shift = output_chunk_shift

        # define the loss function
        self.criterion = loss_fn
        self.train_criterion = copy.deepcopy(loss_fn)
        self.val_criterion = copy.deepcopy(loss_fn)
        # reduction will be set to `None` when calling `TFM._optimized_historical_forecasts()`
        self.train_criterion_reduction: str | None = None
        self.val_criterion_reduction: str | None = None

        # by default models are deterministic (i.e. not probabilistic)
        self.likelihood = likelihood

        # saved in checkpoint to be able to instantiate a model without calling fit_from_dataset
        self.train_sample_shape = train_sample_shape
        self.n_targets = (
            train_sample_shape[0][1] if train_sample_shape is not None else 1
        )

        # persist optimiser and LR scheduler parameters
        self.optimizer_cls = optimizer_cls
        self.optimizer_kwargs = dict() if optimizer_kwargs is None else optimizer_kwargs

        self.use_reversible_instance_norm = use_reversible_instance_norm
        self.rin = None

    @property
    def output_chunk_length(self) -> int | None:
        return self._output_chunk_length

    def training_step(self, train_batch, batch_idx: int) -> torch.Tensor:
        """performs the training step"""
        return self._train_val_step(
            batch=train_batch,
            name="train",
            criterion=self.train_criterion,
            metrics=None,
        )

    def validation_step(self, val_batch, batch_idx: int) -> torch.Tensor:
        """performs the validation step"""
        return self._train_val_step(
            batch=val_batch,
            name="val",
            criterion=self.val_criterion,
            metrics=None,
        )

    def _train_val_step(
        self,
        batch,
        name: str,
        criterion,
        metrics,
    ) -> torch.Tensor:
        """performs a training or validation step"""
        (
            past_target,
            past_covariates,
            historic_future_covariates,
            future_covariates,
            static_covariates,
            sample_weight,
            future_target,
        ) = batch

        # the target is only provided to the model during training
        output = self._produce_train_output(
            (
                past_target,
                past_covariates,
                historic_future_covariates,
                future_covariates,
                static_covariates,
                future_target if name == "train" else None,
            ),
        )
        loss = self._compute_loss(output, future_target, criterion, sample_weight)
        self.log(
            f"{name}_loss",
            loss,
            batch_size=past_target.shape[0],
            prog_bar=True,
            sync_dist=True,
        )
        return loss

    def _compute_loss(self, output, target, criterion, sample_weight):
        # output is of shape (batch_size, n_timesteps, n_components, n_params)
        if self.likelihood:
            loss = self.likelihood.compute_loss(output, target, sample_weight)
        else:
            # If there's no likelihood, nr_params=1, and we need to squeeze out the
            # last dimension of model output, for properly computing the loss.
            loss = criterion(output.squeeze(dim=-1), target)
            if sample_weight is not None:
                loss = (loss * sample_weight).mean()
        return loss

    def configure_optimizers(self):
        """configures optimizers and learning rate schedulers for model optimization."""

        # A utility function to create optimizer and lr scheduler from desired classes
        def _create_from_cls_and_kwargs(cls, kws):
            return cls(**kws)

        # Create the optimizer and (optionally) the learning rate scheduler
        # we have to create copies because we cannot save model.parameters into object state (not serializable)
        optimizer_kws = {k: v for k, v in self.optimizer_kwargs.items()}
        optimizer_kws["params"] = self.parameters()

        optimizer = _create_from_cls_and_kwargs(self.optimizer_cls, optimizer_kws)
        return optimizer

    def _produce_train_output(self, input_batch):
        return self(self._process_input_batch(input_batch))

    def _process_input_batch(self, input_batch):
        (
            past_target,
            past_covariates,
            historic_future_covariates,
            future_covariates,
            static_covariates,
            future_target,
        ) = input_batch
        dim_comp = 2

        x_past = torch.cat(
            [
                tensor
                for tensor in [
                    past_target,
                    past_covariates,
                    historic_future_covariates,
                ]
                if tensor is not None
            ],
            dim=dim_comp,
        )
        return x_past, future_covariates, static_covariates, future_target


# ---- darts/models/forecasting/nbeats.py ------------------------------------------------------------------------

ACTIVATIONS = [
    "ReLU",
    "RReLU",
    "PReLU",
    "ELU",
    "Softplus",
    "Tanh",
    "SELU",
    "LeakyReLU",
    "Sigmoid",
    "GELU",
]


class _GType(Enum):
    GENERIC = 1
    TREND = 2
    SEASONALITY = 3


GTypes = NewType("GTypes", _GType)


class _TrendGenerator(nn.Module):
    def __init__(self, expansion_coefficient_dim, target_length):
        super().__init__()

        # basis is of size (expansion_coefficient_dim, target_length)
        basis = torch.stack(
            [
                (torch.arange(target_length) / target_length) ** i
                for i in range(expansion_coefficient_dim)
            ],
            dim=1,
        ).T

        self.basis = nn.Parameter(basis, requires_grad=False)

    def forward(self, x):
        return torch.matmul(x, self.basis)


class _SeasonalityGenerator(nn.Module):
    def __init__(self, target_length):
        super().__init__()
        half_minus_one = int(target_length / 2 - 1)
        cos_vectors = [
            torch.cos(torch.arange(target_length) / target_length * 2 * np.pi * i)
            for i in range(1, half_minus_one + 1)
        ]
        sin_vectors = [
            torch.sin(torch.arange(target_length) / target_length * 2 * np.pi * i)
            for i in range(1, half_minus_one + 1)
        ]

        # basis is of size (2 * int(target_length / 2 - 1) + 1, target_length)
        basis = torch.stack(
            [torch.ones(target_length)] + cos_vectors + sin_vectors, dim=1
        ).T

        self.basis = nn.Parameter(basis, requires_grad=False)

    def forward(self, x):
        return torch.matmul(x, self.basis)


class _Block(nn.Module):
    def __init__(
        self,
        num_layers: int,
        layer_width: int,
        nr_params: int,
        expansion_coefficient_dim: int,
        input_chunk_length: int,
        target_length: int,
        g_type: GTypes,
        batch_norm: bool,
        dropout: float,
        activation: str,
    ):
        super().__init__()

        self.num_layers = num_layers
        self.layer_width = layer_width
        self.target_length = target_length
        self.nr_params = nr_params
        self.g_type = g_type
        self.dropout = dropout
        self.batch_norm = batch_norm

        if activation not in ACTIVATIONS:
            raise ValueError(f"'{activation}' is not in {ACTIVATIONS}.")

        self.activation = getattr(nn, activation)()

        # fully connected stack before fork
        self.linear_layer_stack_list = [nn.Linear(input_chunk_length, layer_width)]
        for _ in range(num_layers - 1):
            self.linear_layer_stack_list.append(nn.Linear(layer_width, layer_width))

            if self.batch_norm:
                self.linear_layer_stack_list.append(
                    nn.BatchNorm1d(num_features=self.layer_width)
                )

            if self.dropout > 0:
                raise NotImplementedError("MonteCarloDropout is not ported (dropout defaults to 0.0)")

        self.fc_stack = nn.ModuleList(self.linear_layer_stack_list)

        # Fully connected layer producing forecast/backcast expansion coefficients (waveform generator parameters).
        # The coefficients are emitted for each parameter of the likelihood.
        if g_type == _GType.SEASONALITY:
            self.backcast_linear_layer = nn.Linear(
                layer_width, 2 * int(input_chunk_length / 2 - 1) + 1
            )
            self.forecast_linear_layer = nn.Linear(
                layer_width, nr_params * (2 * int(target_length / 2 - 1) + 1)
            )
        else:
            self.backcast_linear_layer = nn.Linear(
                layer_width, expansion_coefficient_dim
            )
            self.forecast_linear_layer = nn.Linear(
                layer_width, nr_params * expansion_coefficient_dim
            )

        # waveform generator functions
        if g_type == _GType.GENERIC:
            self.backcast_g = nn.Linear(expansion_coefficient_dim, input_chunk_length)
            self.forecast_g = nn.Linear(expansion_coefficient_dim, target_length)
        elif g_type == _GType.TREND:
            self.backcast_g = _TrendGenerator(
                expansion_coefficient_dim, input_chunk_length
            )
            self.forecast_g = _TrendGenerator(expansion_coefficient_dim, target_length)
        else:  # _GType.SEASONALITY
            self.backcast_g = _SeasonalityGenerator(input_chunk_length)
            self.forecast_g = _SeasonalityGenerator(target_length)

    def forward(self, x):
        batch_size = x.shape[0]

        # fully connected layer stack
        for layer in self.linear_layer_stack_list:
            x = self.activation(layer(x))

        # forked linear layers producing waveform generator parameters
        theta_backcast = self.backcast_linear_layer(x)
        theta_forecast = self.forecast_linear_layer(x)

        # set the expansion coefs in last dimension for the forecasts
        theta_forecast = theta_forecast.view(batch_size, self.nr_params, -1)

        # waveform generator applications (project the expansion coefs onto basis vectors)
        x_hat = self.backcast_g(theta_backcast)
        y_hat = self.forecast_g(theta_forecast)

        # Set the distribution parameters as the last dimension
        y_hat = y_hat.reshape(x.shape[0], self.target_length, self.nr_params)

        return x_hat, y_hat


class _Stack(nn.Module):
    def __init__(
        self,
        num_blocks: int,
        num_layers: int,
        layer_width: int,
        nr_params: int,
        expansion_coefficient_dim: int,
        input_chunk_length: int,
        target_length: int,
        g_type: GTypes,
        batch_norm: bool,
        dropout: float,
        activation: str,
    ):
        super().__init__()

        self.input_chunk_length = input_chunk_length
        self.target_length = target_length
        self.nr_params = nr_params
        self.dropout = dropout
        self.batch_norm = batch_norm
        self.activation = activation

        if g_type == _GType.GENERIC:
            self.blocks_list = [
                _Block(
                    num_layers,
                    layer_width,
                    nr_params,
                    expansion_coefficient_dim,
                    input_chunk_length,
                    target_length,
                    g_type,
                    batch_norm=(
                        self.batch_norm and i == 0
                    ),  # batch norm only on first block of first stack
                    dropout=self.dropout,
                    activation=self.activation,
                )
                for i in range(num_blocks)
            ]
        else:
            # same block instance is used for weight sharing
            interpretable_block = _Block(
                num_layers,
                layer_width,
                nr_params,
                expansion_coefficient_dim,
                input_chunk_length,
                target_length,
                g_type,
                batch_norm=self.batch_norm,
                dropout=self.dropout,
                activation=self.activation,
            )
            self.blocks_list = [interpretable_block] * num_blocks

        self.blocks = nn.ModuleList(self.blocks_list)

    def forward(self, x):
        # One forecast vector per parameter in the distribution
        stack_forecast = torch.zeros(
            x.shape[0],
            self.target_length,
            self.nr_params,
            device=x.device,
            dtype=x.dtype,
        )

        for block in self.blocks_list:
            # pass input through block
            x_hat, y_hat = block(x)

            # add block forecast to stack forecast
            stack_forecast = stack_forecast + y_hat

            # subtract backcast from input to produce residual
            x = x - x_hat

        stack_residual = x

        return stack_residual, stack_forecast


class _NBEATSModule(PLForecastingModule):
    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        nr_params: int,
        generic_architecture: bool,
        num_stacks: int,
        num_blocks: int,
        num_layers: int,
        layer_widths: list[int],
        expansion_coefficient_dim: int,
        trend_polynomial_degree: int,
        batch_norm: bool,
        dropout: float,
        activation: str,
        **kwargs,
    ):
        super().__init__(**kwargs)

        self.input_dim = input_dim
        self.output_dim = output_dim
        self.nr_params = nr_params
        self.input_chunk_length_multi = self.input_chunk_length * input_dim
        self.target_length = self.output_chunk_length * input_dim
        self.dropout = dropout
        self.batch_norm = batch_norm
        self.activation = activation

        if generic_architecture:
            self.stacks_list = [
                _Stack(
                    num_blocks,
                    num_layers,
                    layer_widths[i],
                    nr_params,
                    expansion_coefficient_dim,
                    self.input_chunk_length_multi,
                    self.target_length,
                    _GType.GENERIC,
                    batch_norm=(
                        self.batch_norm and i == 0
                    ),  # batch norm only on first block of first stack
                    dropout=self.dropout,
                    activation=self.activation,
                )
                for i in range(num_stacks)
            ]
        else:
            num_stacks = 2
            trend_stack = _Stack(
                num_blocks,
                num_layers,
                layer_widths[0],
                nr_params,
                trend_polynomial_degree + 1,
                self.input_chunk_length_multi,
                self.target_length,
                _GType.TREND,
                batch_norm=self.batch_norm,
                dropout=self.dropout,
                activation=self.activation,
            )
            seasonality_stack = _Stack(
                num_blocks,
                num_layers,
                layer_widths[1],
                nr_params,
                -1,
                self.input_chunk_length_multi,
                self.target_length,
                _GType.SEASONALITY,
                batch_norm=self.batch_norm,
                dropout=self.dropout,
                activation=self.activation,
            )
            self.stacks_list = [trend_stack, seasonality_stack]

        self.stacks = nn.ModuleList(self.stacks_list)

        # setting the last backcast "branch" to be not trainable (without next block/stack, it doesn't need to be
        # backpropagated). Removing this lines would cause logtensorboard to crash, since no gradient is stored
        # on this params (the last block backcast is not part of the final output of the net).
        if self.bug == "first_stack_backcast_frozen":
            # the index slip 0 for -1: the first stack's backcast branch, which every later stack depends on,
            # stays at its initialization
            self.stacks_list[0].blocks[-1].backcast_linear_layer.requires_grad_(False)
            self.stacks_list[0].blocks[-1].backcast_g.requires_grad_(False)
        else:
            self.stacks_list[-1].blocks[-1].backcast_linear_layer.requires_grad_(False)
            self.stacks_list[-1].blocks[-1].backcast_g.requires_grad_(False)

    @io_processor
    def forward(self, x_in):
        x, _, _, _ = x_in

        # if x1, x2,... y1, y2... is one multivariate ts containing x and y, and a1, a2... one covariate ts
        # we reshape into x1, y1, a1, x2, y2, a2... etc
        x = torch.reshape(x, (x.shape[0], self.input_chunk_length_multi, 1))
        # squeeze last dimension (because model is univariate)
        x = x.squeeze(dim=2)

        # One vector of length target_length per parameter in the distribution
        y = torch.zeros(
            x.shape[0],
            self.target_length,
            self.nr_params,
            device=x.device,
            dtype=x.dtype,
        )

        for stack in self.stacks_list:
            # compute stack output
            stack_residual, stack_forecast = stack(x)

            # add stack forecast to final output
            y = y + stack_forecast
            # set current stack residual as input for next stack
            x = stack_residual

        # In multivariate case, we get a result [x1_param1, x1_param2], [y1_param1, y1_param2], [x2..], [y2..], ...
        # We want to reshape to original format. We also get rid of the covariates and keep only the target dimensions.
        # The covariates are by construction added as extra time series on the right side. So we need to get rid of this
        # right output (keeping only :self.output_dim).
        y = y.view(
            y.shape[0], self.output_chunk_length, self.input_dim, self.nr_params
        )[:, :, : self.output_dim, :]

        return y


# ---- the training dataset (darts' sequential windows, written out) ---------------------------------------------

class WindowDataset(Dataset):
    """Every (24 past, 12 future) window of a (T, 1) series; items as darts' past-covariates training samples."""

    def __init__(self, series, icl, ocl, bug=None):
        self.series, self.icl, self.ocl, self.bug = series, icl, ocl, bug

    def __len__(self):
        return len(self.series) - self.icl - self.ocl + 1

    def __getitem__(self, idx):
        past_end = idx + self.icl
        past_target = self.series[idx:past_end]
        if self.bug == "future_target_overlaps_input":
            # the output window cut back from the input window's end instead of forward from it: the 12
            # "future" points are the last 12 input points
            future_target = self.series[past_end - self.ocl:past_end]
        else:
            future_target = self.series[past_end:past_end + self.ocl]
        return past_target, None, None, None, None, None, future_target


def collate(samples):
    return tuple(None if col[0] is None else torch.stack(col) for col in zip(*samples))


def make_series(seed, n):
    g = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    p1, p2 = g.uniform(0, 2 * np.pi, 2)
    values = (np.sin(2 * np.pi * t / 12 + p1) + 0.5 * np.sin(2 * np.pi * t / 30 + p2) + 0.002 * t
              + 0.1 * g.standard_normal(n))
    return torch.from_numpy(values.astype(np.float32)).unsqueeze(-1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    series = make_series(seed, 460)
    train_series, val_series = series[:400], series[400 - INPUT_CHUNK_LENGTH:]

    num_stacks = 4
    module = _NBEATSModule(
        input_dim=1,
        output_dim=1,
        nr_params=1,
        generic_architecture=True,
        num_stacks=num_stacks,
        num_blocks=1,
        num_layers=2,
        layer_widths=[32] * num_stacks,
        expansion_coefficient_dim=5,
        trend_polynomial_degree=2,
        batch_norm=False,
        dropout=0.0,
        activation="ReLU",
        input_chunk_length=INPUT_CHUNK_LENGTH,
        output_chunk_length=OUTPUT_CHUNK_LENGTH,
        train_sample_shape=((INPUT_CHUNK_LENGTH, 1), None, None, None, None, (OUTPUT_CHUNK_LENGTH, 1)),
        loss_fn=nn.MSELoss(),
        optimizer_cls=torch.optim.Adam,
        optimizer_kwargs=None,
        bug=bug,
    )

    train_dataset = WindowDataset(train_series, INPUT_CHUNK_LENGTH, OUTPUT_CHUNK_LENGTH, bug=bug)
    val_dataset = WindowDataset(val_series, INPUT_CHUNK_LENGTH, OUTPUT_CHUNK_LENGTH, bug=bug)
    train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=False,
                              collate_fn=collate)
    val_loader = DataLoader(val_dataset, batch_size=BATCH_SIZE, shuffle=False, collate_fn=collate)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=100)
    trainer.strategy.connect(module)
    module.trainer = trainer
    optimizer = module.configure_optimizers()

    train_step = automatic_step(module, optimizer, train_loader)  # the fit loop's automatic optimization

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            losses = [float(model.validation_step(b, i)) for i, b in enumerate(val_loader)]
        model.train()
        return sum(losses) / len(losses)

    first = collate([train_dataset[i] for i in range(BATCH_SIZE)])
    past_target, _, _, _, _, _, future_target = first
    inputs = {"x_in": (module._process_input_batch((past_target, None, None, None, None, future_target)))}

    def loss_fn(output, target):
        return module._compute_loss(output, target, module.train_criterion, None)

    last = f"stacks.{num_stacks - 1}.blocks.0"
    return Program(name="darts_nbeats", model=module, batch=(inputs, future_target), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader,
                   frozen=(f"{last}.backcast_linear_layer.*", f"{last}.backcast_g.*"))


build = functools.partial(_build, bug=None)

BUGS = [
    # the output window cut from inside the input window (classic window-indexing slip): the "future" target is
    # the last 12 points the model is given, a copy task.
    Bug("future_target_overlaps_input", functools.partial(_build, bug="future_target_overlaps_input"),
        "learning_ledger", ("TASK",)),
    # the last-backcast freeze applied to stack 0 instead of stack -1 (classic index slip): a branch the output
    # depends on is never trained, while the program declares only the last stack's backcast frozen.
    Bug("first_stack_backcast_frozen", functools.partial(_build, bug="first_stack_backcast_frozen"),
        "four_structures", ("stacks.0.blocks.0.backcast_linear_layer",)),
]
