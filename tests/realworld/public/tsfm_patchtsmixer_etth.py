"""PatchTSMixer (Ekambaram et al., KDD 2023) trained from scratch for multivariate forecasting with the Hugging Face
``Trainer``, as IBM's tsfm getting-started notebook does on ETTh1: the seven series are split by index into train /
validation (the validation start moved back by one context), standard-scaled per column with statistics of the
training rows (``TimeSeriesPreprocessor``), cut into sliding windows of ``context_length`` past and
``prediction_length`` future steps (``ForecastDFDataset``), and ``PatchTSMixerForPrediction`` (common-channel MLP
mixer over patches, per-window std scaling, MSE on ``future_values``) is trained by ``Trainer`` (AdamW, linear decay).

Source: https://github.com/IBM/tsfm
Commit: f4c811e0318712b7da777b45ad0fdf3e86a5b915
Files: ``notebooks/hfdemo/patch_tsmixer_getting_started.ipynb`` (the direct forecasting part: the split indices,
``TimeSeriesPreprocessor``, ``ForecastDFDataset``, ``PatchTSMixerConfig``, ``TrainingArguments``, ``Trainer``),
``tsfm_public/toolkit/dataset.py`` (``ForecastDFDataset.BaseForecastDFDataset.__getitem__``, ``__len__``),
``tsfm_public/toolkit/time_series_preprocessor.py`` (``train``, ``preprocess``: the per-column ``StandardScaler``),
``tsfm_public/toolkit/util.py`` (``select_by_index``)
License: Apache-2.0 (full text in LICENSES/IBM-tsfm.txt)
Domain: time series, long-term multivariate forecasting (patch MLP mixer, HF Trainer)

Kept as written: the notebook's config (patch_length 8 = patch_stride, expansion_factor 3, dropout 0.5,
head_dropout 0.7, mode ``common_channel``, scaling ``std``), the split rule (train rows up to ``train_end_index``,
validation from ``train_end_index - context_length``), the preprocessor's scaling (mean and population std of each
target column over the training rows, applied to every split), ``__getitem__`` (``past_values`` the ``context_length``
rows from ``index * stride``, ``future_values`` the ``prediction_length`` rows after them, the observed masks from
``~isnan``), ``TrainingArguments`` (learning_rate, per-device batch size, ``label_names=["future_values"]``),
``Trainer(model, args, train_dataset, eval_dataset)`` and the model itself (transformers' ``PatchTSMixerForPrediction``,
used as the notebook does).

Deviations from the original:
- ETTh1.csv is not downloaded: seven series made from ``seed`` (daily and half-daily cycles with per-channel phases
  and amplitudes, shared between channels through a random mixing, a slow drift, AR(1) noise), 1600 hourly rows, the
  ETT borders scaled from 12 / 4 months to 1000 / 300 rows; the ``date`` column is not made (a ``timestamp_column``
  only orders rows and stamps samples); pandas / sklearn are replaced by arrays and the scaler written out;
- sizes for 2 CPU cores: context_length 512 -> 64, forecast_horizon 96 -> 16, d_model 48 -> 16, num_layers 3 -> 2,
  batch_size 32 -> 16, num_workers 8 -> 0; learning_rate 1e-4 -> 1e-3 so the 30 steps of the self-check show learning;
- the pretrained-model evaluation, the test split, the channel-subset second run, the early-stopping callback,
  checkpoints and tensorboard are dropped (``eval_strategy``, ``save_strategy`` "no"); ``use_cpu=True``;
- ``train_step`` is one update of ``Trainer._run_epoch`` (``get_batch_samples``, ``training_step``,
  ``_clip_grad_norm``, ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``), a new epoch iterator when one
  ends, as ``trainer.train()`` runs it; ``eval_fn`` is ``trainer.prediction_step`` in eval mode on a batch (MSE);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch
from transformers import PatchTSMixerConfig, PatchTSMixerForPrediction, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()
forecast_columns = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def _etth(seed, n=1600, c=7):  # (port) the stand-in for ETTh1.csv
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    base = np.concatenate([np.sin(2 * np.pi * t / 24 + rng.uniform(0, 2 * np.pi, (1, 3))),
                           np.sin(2 * np.pi * t / 12 + rng.uniform(0, 2 * np.pi, (1, 2)))], axis=1)
    x = base @ rng.normal(0, 1, (5, c)) + 0.002 * t * rng.uniform(-1, 1, (1, c)) + rng.uniform(-3, 3, (1, c))
    noise = np.zeros((n, c))
    for i in range(1, n):
        noise[i] = 0.6 * noise[i - 1] + 0.15 * rng.standard_normal(c)
    return (x + noise).astype(np.float64)


class TimeSeriesPreprocessor:  # (port) toolkit/time_series_preprocessor.py, scaling of the target columns only
    def __init__(self, target_columns, scaling=True):
        self.target_columns, self.scaling = target_columns, scaling

    def train(self, data):
        self.mean_, self.scale_ = data.mean(0), data.std(0)  # sklearn StandardScaler: population std
        return self

    def preprocess(self, data):
        return (data - self.mean_) / self.scale_ if self.scaling else data


class ForecastDFDataset(torch.utils.data.Dataset):  # (port) toolkit/dataset.py, one group, stride 1
    def __init__(self, data, target_columns, context_length=1, prediction_length=1, stride=1, fill_value=0.0,
                 future_data=None, bug=None):
        self.X = data
        self.y = data if future_data is None else future_data
        self.context_length, self.prediction_length = context_length, prediction_length
        self.stride, self.fill_value, self.bug = stride, fill_value, bug

    def __getitem__(self, index):
        # seq_x: batch_size x seq_len x num_x_cols

        time_id = index * self.stride

        seq_x = self.X[time_id : time_id + self.context_length].copy()

        # seq_y: batch_size x pred_len x num_x_cols
        if self.bug == "future_window_from_context_start":
            seq_y = self.y[time_id : time_id + self.prediction_length].copy()
        else:
            seq_y = self.y[
                time_id + self.context_length : time_id + self.context_length + self.prediction_length
            ].copy()

        return {
            "past_values": torch.from_numpy(np.nan_to_num(seq_x, nan=self.fill_value)).float(),
            "future_values": torch.from_numpy(np.nan_to_num(seq_y, nan=self.fill_value)).float(),
            "past_observed_mask": torch.from_numpy(~np.isnan(seq_x)),
            "future_observed_mask": torch.from_numpy(~np.isnan(seq_y)),
        }

    def __len__(self):
        return (len(self.X) - self.context_length - self.prediction_length) // self.stride + 1


def _datasets(seed, context_length, forecast_horizon, bug):
    data = _etth(seed)
    train_end_index = 1000  # (port) 12 * 30 * 24
    # we shift the start of the validation/test period back by context length so that
    # the first validation/test timestamp is immediately following the training data
    valid_start_index = 1000 - context_length
    valid_end_index = 1000 + 300  # (port) 12 * 30 * 24 + 4 * 30 * 24
    train_data = data[:train_end_index]
    valid_data = data[valid_start_index:valid_end_index]

    tsp = TimeSeriesPreprocessor(target_columns=forecast_columns, scaling=True)
    tsp.train(train_data)
    # classic slip: the future windows read from the raw frame while the past windows are scaled
    raw = bug == "future_values_not_scaled"
    train_dataset = ForecastDFDataset(tsp.preprocess(train_data), target_columns=forecast_columns,
                                      context_length=context_length, prediction_length=forecast_horizon,
                                      future_data=train_data if raw else None, bug=bug)
    valid_dataset = ForecastDFDataset(tsp.preprocess(valid_data), target_columns=forecast_columns,
                                      context_length=context_length, prediction_length=forecast_horizon)
    return train_dataset, valid_dataset


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = 16  # (port) 32
    context_length = 64  # (port) 512
    forecast_horizon = 16  # (port) 96
    patch_length = 8
    train_dataset, valid_dataset = _datasets(seed, context_length, forecast_horizon, bug)

    config = PatchTSMixerConfig(
        context_length=context_length,
        prediction_length=forecast_horizon,
        patch_length=patch_length,
        num_input_channels=len(forecast_columns),
        patch_stride=patch_length,
        d_model=16,  # (port) 48
        num_layers=2,  # (port) 3
        expansion_factor=3,
        dropout=0.5,
        head_dropout=0.7,
        mode="common_channel",  # change it `mix_channel` if we need to explicitly model channel correlations
        scaling="std",
    )
    model = PatchTSMixerForPrediction(config=config)

    train_args = TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "checkpoint/patchtsmixer/direct/train/output/"),
        learning_rate=0.001,  # (port) 0.0001
        num_train_epochs=100,
        do_eval=True,
        eval_strategy="no",  # (port) "epoch"
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        dataloader_num_workers=0,  # (port) 8
        report_to="none",  # (port) "tensorboard"
        save_strategy="no",  # (port) "epoch"
        label_names=["future_values"],
        use_cpu=True,
        seed=seed,
    )
    optimizers = (None, None)
    if bug == "optimizer_over_backbone_only":
        # the user's own optimizer handed to the Trainer, built over the mixer backbone alone: the forecasting head
        # (the flatten-and-project linear layer) stays at its random initialization
        optimizers = (torch.optim.AdamW(model.model.parameters(), lr=0.001), None)

    trainer = Trainer(
        model=model,
        args=train_args,
        train_dataset=train_dataset,
        eval_dataset=valid_dataset,
        optimizers=optimizers,
    )
    return _program(trainer, model)


def _program(trainer, model):
    # trainer.train(): the set-up of Trainer._inner_training_loop
    args = trainer.args
    trainer.is_in_train = True
    train_dataloader = trainer.get_train_dataloader()
    (num_train_epochs, num_update_steps_per_epoch, _num_examples, _num_train_samples, _total_train_batch_size,
     steps_in_epoch, max_steps) = trainer.set_initial_training_values(args, train_dataloader)
    trainer._init_training_state(max_steps, num_update_steps_per_epoch, num_train_epochs, None, None)
    wrapped, train_dataloader = trainer._prepare_for_training(max_steps, train_dataloader, None)
    trainer._tr_loss = torch.tensor(0.0, device=args.device)
    wrapped.zero_grad()
    loop = {"epoch": -1, "iterator": None, "update_step": num_update_steps_per_epoch, "step": -1}

    def train_step():
        """One optimizer update of Trainer._run_epoch."""
        if loop["update_step"] >= num_update_steps_per_epoch:  # the next epoch of _inner_training_loop
            loop["epoch"] += 1
            loop["iterator"], loop["update_step"], loop["step"] = iter(train_dataloader), 0, -1
        remainder = steps_in_epoch % args.gradient_accumulation_steps or args.gradient_accumulation_steps
        num_batches = (
            args.gradient_accumulation_steps if loop["update_step"] != (num_update_steps_per_epoch - 1) else remainder
        )
        batch_samples, num_items_in_batch = trainer.get_batch_samples(loop["iterator"], num_batches, args.device)
        trainer.current_gradient_accumulation_steps = len(batch_samples)
        losses = []
        for inputs in batch_samples:
            loop["step"] += 1
            step = loop["step"]
            do_sync_step = (step + 1) % args.gradient_accumulation_steps == 0 or (step + 1) == steps_in_epoch
            trainer.accelerator.gradient_state._set_sync_gradients(do_sync_step)
            tr_loss_step = trainer.training_step(wrapped, inputs, num_items_in_batch)
            trainer._tr_loss += tr_loss_step
            losses.append(tr_loss_step)
            if do_sync_step:
                if args.max_grad_norm > 0:
                    trainer._clip_grad_norm(wrapped)
                trainer.optimizer.step()
                if not trainer.accelerator.optimizer_step_was_skipped:
                    trainer.lr_scheduler.step()
                wrapped.zero_grad()
                trainer.state.global_step += 1
                trainer.state.epoch = loop["epoch"] + (step + 1) / steps_in_epoch
        loop["update_step"] += 1
        return torch.stack(losses).sum()

    def eval_fn(m, batch):
        m.eval()  # as Trainer.evaluation_loop does before its prediction steps
        loss, _preds, _labels = trainer.prediction_step(m, batch, prediction_loss_only=False)
        m.train()
        return {"eval_loss": float(loss)}

    first = next(iter(trainer.get_eval_dataloader(trainer.train_dataset)))
    return Program(name="tsfm_patchtsmixer_etth", model=model, batch=first,
                   loss_fn=lambda outputs, labels: outputs.loss, optimizer=trainer.optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic window slip: future_values sliced from the window's start (inside the context) instead of the
    # prediction_length rows after it, so the model is taught to "forecast" what it already sees.
    Bug("future_window_from_context_start", functools.partial(_build, bug="future_window_from_context_start"),
        "learning_ledger", ("TASK",)),
    # classic: the future windows read from the unscaled frame while past_values are standard-scaled, so the MSE
    # compares the model's forecasts (in the scaled inputs' units) with targets in the raw units.
    Bug("future_values_not_scaled", functools.partial(_build, bug="future_values_not_scaled"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the optimizer passed to Trainer(optimizers=...) covers model.model only; the head never moves.
    Bug("optimizer_over_backbone_only", functools.partial(_build, bug="optimizer_over_backbone_only"),
        "four_structures", ("head",)),
]
