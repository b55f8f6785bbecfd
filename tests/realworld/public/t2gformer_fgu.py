"""T2G-Former trained by jyansir/t2g-former's ``run_t2g.py``: a tokenizer of numerical and categorical features with
a [Cross-level Readout] token, layers of FR-Graph attention (``MultiheadGEAttention``: symmetric head/tail weights and
a learned diagonal relation embedding give edge weights, L2-normalized column embeddings give a topology score whose
sigmoid is hard-thresholded with the straight-through trick, no self-interaction, no edges into the readout; the
adjacency masks a softmax) and ReGLU feed-forward blocks, pre-norm; the last layer updates only the readout, whose
final LayerNorm + ReLU + linear head gives the logit. AdamW with three parameter groups (weight decay; the column
embeddings at their own ``col_lr`` without decay; tokenizer, norms and biases without decay), BCE with logits for a
binary task, ``model.train()`` at each epoch, ``evaluate`` (accuracy under ``model.eval()`` and
``inference_mode``) after it, early stopping on the validation score.

Source: https://github.com/jyansir/t2g-former
Commit: 3ad093d7967b726b265606251ec267daa0756427
Files: run_t2g.py, bin/t2g_former.py, lib/deep.py, lib/data.py, configs/churn/T2GFormer/cfg.json
License: MIT (Copyright (c) 2023 LionSenSei)
Domain: tabular (binary classification, feature-relation graph transformer)

Deviations from the original:
- sizes: the churn config with d_token 248 -> 32, n_heads 8 -> 4 (d_token / n_heads = 8), n_layers 3 -> 2,
  batch_size 128 -> 64; dropouts, d_ffn_factor, lr, col_lr and weight_decay as in the config;
  ``run_t2g.py``'s defaults for the rest (token_bias, sym_weight True, sym_topology False, nsi True, no
  kv_compression); the model is in the helper ``_t2gformer_lib.py``;
- data: the churn dataset (downloaded archive) is replaced by a synthetic binary task made from ``seed``: 6 numerical
  features and 2 categorical ones (3 and 4 categories), label 1 where ``x0 * x1 + 0.7 * x2 - 0.5 * x3`` plus a
  per-category offset is positive (768 train / 256 val / 256 test rows); ``lib.data.normalize``'s quantile
  normalization (``QuantileTransformer(output_distribution='normal')`` fitted on the train part with 1e-3 noise) is
  written in numpy/torch (no sklearn here): empirical quantiles of the train part, linear interpolation, the normal
  quantile function;
- no CUDA, no DataParallel; one ``train_step`` is one iteration of the training loop, and the end of an epoch runs
  ``evaluate(['val', 'test'])`` and the early-stopping counter (its ``break`` left out: a ``train_step`` keeps
  training); the ``AverageMeter``, result files, printing and ``--froze_later`` are left out; ``make_optimizer`` keeps
  only its Adam, AdamW and SGD entries; ``eval_fn`` is ``evaluate``'s accuracy on a given batch.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _t2gformer_lib import T2GFormer

N_NUM, CARDINALITIES, N_TRAIN, N_VAL, N_TEST, BATCH_SIZE, EARLY_STOP = 6, [3, 4], 768, 256, 256, 64, 16

CFG = {
    "model": {
        "activation": "reglu", "initialization": "kaiming", "n_heads": 4, "prenormalization": True,
        "residual_dropout": 0.0, "attention_dropout": 0.48141325723557316, "d_ffn_factor": 1.7212811218743964,
        "d_token": 32, "ffn_dropout": 0.2752831250225831, "n_layers": 2,
    },
    "training": {
        "batch_size": BATCH_SIZE, "optimizer": "adamw", "weight_decay": 3.3941130438902903e-06,
        "lr": 0.0005818922562890647, "patience": 16, "col_lr": 0.007520245491474753,
    },
}


def make_optimizer(optimizer, parameter_groups, lr, weight_decay):
    Optimizer = {'adam': torch.optim.Adam, 'adamw': torch.optim.AdamW, 'sgd': torch.optim.SGD}[optimizer]
    momentum = (0.9,) if Optimizer is torch.optim.SGD else ()
    return Optimizer(parameter_groups, lr, *momentum, weight_decay=weight_decay)


def quantile_normalize(X, seed):
    """lib/data.py ``normalize(X, 'quantile', seed)``, QuantileTransformer written out."""
    X_train = X['train']
    n_quantiles = max(min(X['train'].shape[0] // 30, 1000), 10)
    noise = 1e-3
    stds = np.std(X_train, axis=0, keepdims=True)
    noise_std = noise / np.maximum(stds, noise)
    X_train = X_train + noise_std * np.random.default_rng(seed).standard_normal(X_train.shape)
    references = np.linspace(0, 1, n_quantiles)
    quantiles = np.quantile(X_train, references, axis=0)
    out = {}
    for k, v in X.items():
        u = np.stack([np.interp(v[:, j], quantiles[:, j], references) for j in range(v.shape[1])], 1)
        u = np.clip(u, 1e-7, 1 - 1e-7)
        out[k] = torch.special.ndtri(torch.from_numpy(u)).numpy().astype(np.float32)
    return out


def make_dataset(seed):
    g = np.random.RandomState(seed)
    n = N_TRAIN + N_VAL + N_TEST
    x_num = g.randn(n, N_NUM) * g.uniform(0.5, 3.0, N_NUM) + g.uniform(-2, 2, N_NUM)
    x_cat = np.stack([g.randint(c, size=n) for c in CARDINALITIES], 1)
    offsets = [g.randn(c) for c in CARDINALITIES]
    z = (x_num - x_num.mean(0)) / x_num.std(0)
    logit = z[:, 0] * z[:, 1] + 0.7 * z[:, 2] - 0.5 * z[:, 3] + offsets[0][x_cat[:, 0]] + offsets[1][x_cat[:, 1]]
    y = (logit > np.median(logit)).astype(np.float32)
    parts = {'train': slice(0, N_TRAIN), 'val': slice(N_TRAIN, N_TRAIN + N_VAL), 'test': slice(N_TRAIN + N_VAL, n)}
    X_num = quantile_normalize({k: x_num[s] for k, s in parts.items()}, seed)
    X_num = {k: torch.from_numpy(v) for k, v in X_num.items()}
    X_cat = {k: torch.from_numpy(x_cat[s]).long() for k, s in parts.items()}
    ys = {k: torch.from_numpy(y[s]) for k, s in parts.items()}
    return X_num, X_cat, ys


def make_model_and_optimizer(cfg):
    cfg['model'].setdefault('kv_compression', None)
    cfg['model'].setdefault('kv_compression_sharing', None)
    cfg['model'].setdefault('token_bias', True)
    # default FR-Graph settings
    cfg['model'].setdefault('sym_weight', True)
    cfg['model'].setdefault('sym_topology', False)
    cfg['model'].setdefault('nsi', True)
    kwargs = {'d_numerical': N_NUM, 'categories': CARDINALITIES, 'd_out': 1, **cfg['model']}
    model = T2GFormer(**kwargs)

    def needs_wd(name):
        return all(x not in name for x in ['tokenizer', '.norm', '.bias'])

    # small learning rate for column embeddings
    # for statble topology learning process
    def needs_small_lr(name):
        return any(x in name for x in ['.col_head', '.col_tail'])

    for x in ['tokenizer', '.norm', '.bias']:
        assert any(x in a for a in (b[0] for b in model.named_parameters()))
    parameters_with_wd = [v for k, v in model.named_parameters() if needs_wd(k) and not needs_small_lr(k)]
    parameters_with_slr = [v for k, v in model.named_parameters() if needs_small_lr(k)]
    parameters_without_wd = [v for k, v in model.named_parameters() if not needs_wd(k)]
    optimizer = make_optimizer(
        cfg['training']['optimizer'],
        (
            [
                {'params': parameters_with_wd},
                {'params': parameters_with_slr, 'lr': cfg['training']['col_lr'], 'weight_decay': 0.0},
                {'params': parameters_without_wd, 'weight_decay': 0.0},
            ]
        ),
        cfg['training']['lr'],
        cfg['training']['weight_decay'],
    )
    return model, optimizer


def _make_loop(model, optimizer, loss_fn, train_loader, dataloaders, bug):
    """run_t2g.py's utility functions and training loop, one iteration per call."""

    def apply_model(x_num, x_cat=None):
        return model(x_num, x_cat)

    @torch.inference_mode()
    def evaluate(parts):
        model.eval()
        scores = {}
        for part in parts:
            predictions, targets = [], []
            for batch in dataloaders[part]:
                x_num, x_cat, y = batch
                predictions.append(apply_model(x_num, x_cat))
                targets.append(y)
            # dataset.calculate_metrics(..., 'logits'): accuracy of the rounded sigmoid for a binary task
            predictions = torch.cat(predictions).sigmoid().round()
            scores[part] = {'score': float((predictions == torch.cat(targets)).float().mean())}
        return scores

    state = {"it": None, "iteration": 0, "epoch": 0, "best_score": -np.inf, "no_improvement": 0}

    def end_of_epoch():
        scores = evaluate(['val', 'test'])
        val_score = scores['val']['score']
        if val_score > state["best_score"]:
            state["best_score"] = val_score
            state["no_improvement"] = 0
        else:
            state["no_improvement"] += 1

    def train_step():
        """One iteration of `for iteration, batch in enumerate(train_loader)`; an epoch's end evaluates."""
        if state["it"] is None:
            state["epoch"] += 1
            if bug != "train_mode_not_restored":
                model.train()
            state["it"], state["iteration"] = iter(train_loader), 0
        batch = next(state["it"])
        state["iteration"] += 1
        x_num, x_cat, y = batch
        optimizer.zero_grad()
        loss = loss_fn(apply_model(x_num, x_cat), y)
        loss.backward()
        optimizer.step()
        if state["iteration"] == len(train_loader):
            state["it"] = None
            end_of_epoch()
        return loss.detach()

    return train_step


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    X_num, X_cat, ys = make_dataset(seed)
    if bug == "labels_shuffled_apart":  # the train labels shuffled on their own, apart from their rows
        ys['train'] = ys['train'][torch.randperm(N_TRAIN)]

    data_list = [X_num, X_cat, ys]
    train_dataset = TensorDataset(*(d['train'] for d in data_list))
    train_loader = DataLoader(dataset=train_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0)
    dataloaders = {part: DataLoader(dataset=TensorDataset(*(d[part] for d in data_list)), batch_size=8192,
                                    shuffle=False, num_workers=0) for part in ('val', 'test')}

    cfg = {k: dict(v) for k, v in CFG.items()}
    model, optimizer = make_model_and_optimizer(cfg)
    if bug == "straight_through_dropped":
        for layer in model.layers:
            layer['attention'].bug = bug

    """Loss Function"""
    loss_fn = F.binary_cross_entropy_with_logits  # dataset.is_binclass
    train_step = _make_loop(model, optimizer, loss_fn, train_loader, dataloaders, bug)

    def eval_fn(model, batch):
        inputs, y = batch
        model.eval()
        with torch.inference_mode():
            return float((model(**inputs).sigmoid().round() == y).float().mean())

    batch = ({"x_num": X_num['train'][:BATCH_SIZE], "x_cat": X_cat['train'][:BATCH_SIZE]}, ys['train'][:BATCH_SIZE])
    return Program(name="t2gformer_fgu", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the straight-through estimator dropped (`adj = (adj_probs > 0.5).float()` while the topology is not frozen,
    # the frozen branch's line): the column embeddings and the topology bias get no gradient and never learn.
    Bug("straight_through_dropped", functools.partial(_build, bug="straight_through_dropped"), "reachability",
        ("layers.0.attention.col_head",)),
    # the train labels shuffled apart from their rows (a shuffle applied to one array only).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # `model.train()` at the top of the epoch dropped: after the first evaluate() the model trains in eval mode,
    # with every dropout off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]
