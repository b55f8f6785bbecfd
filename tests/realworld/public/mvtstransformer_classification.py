# ruff: noqa: UP008, UP032, UP045, C408, RUF059
"""Multivariate time-series classification with a transformer encoder (BatchNorm instead of LayerNorm, learnable
positions, a linear layer over the flattened, padding-masked final embeddings), from George Zerveas'
mvts_transformer ("A Transformer-based Framework for Multivariate Time Series Representation Learning").

Source: https://github.com/gzerveas/mvts_transformer
Commit: 3f2e378bc77d02e82a44671f20cf15bc7761671a
Files: ``src/models/ts_transformer.py``, ``src/models/loss.py``, ``src/running.py`` (``SupervisedRunner``),
``src/datasets/dataset.py`` (``collate_superv``, ``padding_mask``), ``src/datasets/data.py`` (``Normalizer``),
``src/optimizers.py`` (``RAdam``), ``src/main.py``, ``src/options.py``, README's classification-from-scratch command
License: MIT (Copyright (c) 2021 George Zerveas; full text in LICENSES/gzerveas-mvts_transformer.txt). The repository's
``RAdam`` carries the note "from LiyuanLucasLiu/RAdam" (Apache-2.0).
Domain: time series, multivariate classification (SpokenArabicDigits-shaped: 13 MFCC channels, variable lengths,
10 classes)

Kept as written: ``TSTransformerEncoderClassiregressor`` (input projection scaled by ``sqrt(d_model)``,
``LearnablePositionalEncoding`` (the README command's ``--pos_encoding learnable``), ``nn.TransformerEncoder`` of
``TransformerBatchNormEncoderLayer`` (the default ``--normalization_layer BatchNorm``), the key padding mask
inverted, GELU, dropout, padding embeddings zeroed, flattened over ``max_len``, one linear output layer),
``NoFussCrossEntropyLoss(reduction='none')``, ``l2_reg_loss`` (``--l2_reg`` default 0: off),
``SupervisedRunner.train_epoch``'s body (per-sample losses summed and divided by their count, zero_grad, backward,
``clip_grad_norm_(max_norm=4.0)``, step) and ``evaluate``'s loss under ``model.eval()``, ``collate_superv`` and
``padding_mask`` (zero padding to ``max_len``), the ``standardization`` ``Normalizer`` fitted on the training rows,
``RAdam`` (the README command's ``--optimizer RAdam``, ``--lr 0.001``), the option defaults (GELU, dropout 0.1).

Deviations from the original:
- the UEA archive's ``.ts`` files are not here: SpokenArabicDigits-shaped samples are made from ``seed`` (13
  channels, lengths 12-24, each class a smooth template trajectory, time-warped and noisy), 320 training and 96
  test samples; pandas is not used (``Normalizer``'s mean/std over all training rows in numpy); ``max_seq_len`` is
  the longest sample (24).
- sizes for 2 CPU cores: ``d_model`` 64 -> 32, ``num_heads`` 8 -> 4, ``num_layers`` 3 -> 2, ``dim_feedforward``
  256 -> 64, ``batch_size`` 64 -> 32.
- ``RAdam.step``'s deprecated positional-scalar calls (``addcmul_(1 - beta2, grad, grad)``, ``add_(1 - beta1,
  grad)``, ``add_(-step_size * lr, exp_avg)``, ``addcdiv_(-step_size * lr, exp_avg, denom)``) are written with the
  ``value=`` / ``alpha=`` keywords torch accepts today; the arithmetic is unchanged.
- one ``train_step`` is one batch of ``train_epoch``'s loop (a shuffling DataLoader, next epoch when it runs out);
  the metrics printing, lr steps (``--lr_step`` default 1000000: never), checkpoints and the analyzer are dropped;
  ``eval_fn`` is ``evaluate``'s average loss on the test samples.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules import BatchNorm1d, Dropout, Linear, MultiheadAttention
from torch.optim.optimizer import Optimizer
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# src/models/ts_transformer.py
def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    elif activation == "gelu":
        return F.gelu
    raise ValueError("activation should be relu/gelu, not {}".format(activation))


class LearnablePositionalEncoding(nn.Module):

    def __init__(self, d_model, dropout=0.1, max_len=1024):
        super(LearnablePositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
        # Each position gets its own embedding
        # Since indices are always 0 ... max_len, we don't have to do a look-up
        self.pe = nn.Parameter(torch.empty(max_len, 1, d_model))  # requires_grad automatically set to True
        nn.init.uniform_(self.pe, -0.02, 0.02)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


def get_pos_encoder(pos_encoding):
    if pos_encoding == "learnable":
        return LearnablePositionalEncoding
    # (port) "fixed" (FixedPositionalEncoding) is not the configuration ported and is left out

    raise NotImplementedError("pos_encoding should be 'learnable'/'fixed', not '{}'".format(pos_encoding))


class TransformerBatchNormEncoderLayer(nn.modules.Module):
    r"""This transformer encoder layer block is made up of self-attn and feedforward network.
    It differs from TransformerEncoderLayer in torch/nn/modules/transformer.py in that it replaces LayerNorm
    with BatchNorm.
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu"):
        super(TransformerBatchNormEncoderLayer, self).__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout)
        # Implementation of Feedforward model
        self.linear1 = Linear(d_model, dim_feedforward)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model)

        self.norm1 = BatchNorm1d(d_model, eps=1e-5)  # normalizes each feature across batch samples and time steps
        self.norm2 = BatchNorm1d(d_model, eps=1e-5)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

        self.activation = _get_activation_fn(activation)

    def forward(self, src: Tensor, src_mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None, **kwargs) -> Tensor:
        # (port) **kwargs: today's nn.TransformerEncoder also passes is_causal
        src2 = self.self_attn(src, src, src, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)  # (seq_len, batch_size, d_model)
        src = src.permute(1, 2, 0)  # (batch_size, d_model, seq_len)
        # src = src.reshape([src.shape[0], -1])  # (batch_size, seq_length * d_model)
        src = self.norm1(src)
        src = src.permute(2, 0, 1)  # restore (seq_len, batch_size, d_model)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)  # (seq_len, batch_size, d_model)
        src = src.permute(1, 2, 0)  # (batch_size, d_model, seq_len)
        src = self.norm2(src)
        src = src.permute(2, 0, 1)  # restore (seq_len, batch_size, d_model)
        return src


class TSTransformerEncoderClassiregressor(nn.Module):
    """
    Simplest classifier/regressor. Can be either regressor or classifier because the output does not include
    softmax. Concatenates final layer embeddings and uses 0s to ignore padding embeddings in final output layer.
    """

    def __init__(self, feat_dim, max_len, d_model, n_heads, num_layers, dim_feedforward, num_classes,
                 dropout=0.1, pos_encoding='fixed', activation='gelu', norm='BatchNorm', freeze=False):
        super(TSTransformerEncoderClassiregressor, self).__init__()

        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads

        self.project_inp = nn.Linear(feat_dim, d_model)
        self.pos_enc = get_pos_encoder(pos_encoding)(d_model, dropout=dropout*(1.0 - freeze), max_len=max_len)

        if norm == 'LayerNorm':
            encoder_layer = nn.TransformerEncoderLayer(d_model, self.n_heads, dim_feedforward,
                                                       dropout*(1.0 - freeze), activation=activation)
        else:
            encoder_layer = TransformerBatchNormEncoderLayer(d_model, self.n_heads, dim_feedforward,
                                                             dropout*(1.0 - freeze), activation=activation)

        self.transformer_encoder = nn.TransformerEncoder(encoder_layer, num_layers, enable_nested_tensor=False)

        self.act = _get_activation_fn(activation)

        self.dropout1 = nn.Dropout(dropout)

        self.feat_dim = feat_dim
        self.num_classes = num_classes
        self.output_layer = self.build_output_module(d_model, max_len, num_classes)

    def build_output_module(self, d_model, max_len, num_classes):
        output_layer = nn.Linear(d_model * max_len, num_classes)
        # no softmax (or log softmax), because CrossEntropyLoss does this internally. If probabilities are needed,
        # add F.log_softmax and use NLLoss
        return output_layer

    def forward(self, X, padding_masks):
        # permute because pytorch convention for transformers is [seq_length, batch_size, feat_dim]. padding_masks [batch_size, feat_dim]
        inp = X.permute(1, 0, 2)
        inp = self.project_inp(inp) * math.sqrt(
            self.d_model)  # [seq_length, batch_size, d_model] project input vectors to d_model dimensional space
        inp = self.pos_enc(inp)  # add positional encoding
        # NOTE: logic for padding masks is reversed to comply with definition in MultiHeadAttention, TransformerEncoderLayer
        output = self.transformer_encoder(inp, src_key_padding_mask=~padding_masks)  # (seq_length, batch_size, d_model)
        output = self.act(output)  # the output transformer encoder/decoder embeddings don't include non-linearity
        output = output.permute(1, 0, 2)  # (batch_size, seq_length, d_model)
        output = self.dropout1(output)

        # Output
        output = output * padding_masks.unsqueeze(-1)  # zero-out padding embeddings
        output = output.reshape(output.shape[0], -1)  # (batch_size, seq_length * d_model)
        output = self.output_layer(output)  # (batch_size, num_classes)

        return output


# src/models/loss.py
def l2_reg_loss(model):
    """Returns the squared L2 norm of output layer of given model"""

    for name, param in model.named_parameters():
        if name == 'output_layer.weight':
            return torch.sum(torch.square(param))


class NoFussCrossEntropyLoss(nn.CrossEntropyLoss):
    """
    pytorch's CrossEntropyLoss is fussy: 1) needs Long (int64) targets only, and 2) only 1D.
    This function satisfies these requirements
    """

    def forward(self, inp, target):
        return F.cross_entropy(inp, target.long().squeeze(), weight=self.weight,
                               ignore_index=self.ignore_index, reduction=self.reduction)


# src/optimizers.py (from https://github.com/LiyuanLucasLiu/RAdam/blob/master/radam/radam.py)
class RAdam(Optimizer):

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, degenerated_to_sgd=True):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))

        self.degenerated_to_sgd = degenerated_to_sgd
        if isinstance(params, (list, tuple)) and len(params) > 0 and isinstance(params[0], dict):
            for param in params:
                if 'betas' in param and (param['betas'][0] != betas[0] or param['betas'][1] != betas[1]):
                    param['buffer'] = [[None, None, None] for _ in range(10)]
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        buffer=[[None, None, None] for _ in range(10)])
        super(RAdam, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(RAdam, self).__setstate__(state)

    def step(self, closure=None):

        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data.float()
                if grad.is_sparse:
                    raise RuntimeError('RAdam does not support sparse gradients')

                p_data_fp32 = p.data.float()

                state = self.state[p]

                if len(state) == 0:
                    state['step'] = 0
                    state['exp_avg'] = torch.zeros_like(p_data_fp32)
                    state['exp_avg_sq'] = torch.zeros_like(p_data_fp32)
                else:
                    state['exp_avg'] = state['exp_avg'].type_as(p_data_fp32)
                    state['exp_avg_sq'] = state['exp_avg_sq'].type_as(p_data_fp32)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['betas']

                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)

                state['step'] += 1
                buffered = group['buffer'][int(state['step'] % 10)]
                if state['step'] == buffered[0]:
                    N_sma, step_size = buffered[1], buffered[2]
                else:
                    buffered[0] = state['step']
                    beta2_t = beta2 ** state['step']
                    N_sma_max = 2 / (1 - beta2) - 1
                    N_sma = N_sma_max - 2 * state['step'] * beta2_t / (1 - beta2_t)
                    buffered[1] = N_sma

                    # more conservative since it's an approximated value
                    if N_sma >= 5:
                        step_size = math.sqrt(
                            (1 - beta2_t) * (N_sma - 4) / (N_sma_max - 4) * (N_sma - 2) / N_sma * N_sma_max / (
                                        N_sma_max - 2)) / (1 - beta1 ** state['step'])
                    elif self.degenerated_to_sgd:
                        step_size = 1.0 / (1 - beta1 ** state['step'])
                    else:
                        step_size = -1
                    buffered[2] = step_size

                # more conservative since it's an approximated value
                if N_sma >= 5:
                    if group['weight_decay'] != 0:
                        p_data_fp32.add_(p_data_fp32, alpha=-group['weight_decay'] * group['lr'])
                    denom = exp_avg_sq.sqrt().add_(group['eps'])
                    p_data_fp32.addcdiv_(exp_avg, denom, value=-step_size * group['lr'])
                    p.data.copy_(p_data_fp32)
                elif step_size > 0:
                    if group['weight_decay'] != 0:
                        p_data_fp32.add_(p_data_fp32, alpha=-group['weight_decay'] * group['lr'])
                    p_data_fp32.add_(exp_avg, alpha=-step_size * group['lr'])
                    p.data.copy_(p_data_fp32)

        return loss


# src/datasets/dataset.py
def padding_mask(lengths, max_len=None):
    """
    Used to mask padded positions: creates a (batch_size, max_len) boolean mask from a tensor of sequence lengths,
    where 1 means keep element at this position (time step)
    """
    batch_size = lengths.numel()
    max_len = max_len or lengths.max_val()  # trick works because of overloading of 'or' operator for non-boolean types
    return (torch.arange(0, max_len, device=lengths.device)
            .type_as(lengths)
            .repeat(batch_size, 1)
            .lt(lengths.unsqueeze(1)))


def collate_superv(data, max_len=None, bug=None):
    batch_size = len(data)
    features, labels, IDs = zip(*data)

    # Stack and pad features and masks (convert 2D to 3D tensors, i.e. add batch dimension)
    lengths = [X.shape[0] for X in features]  # original sequence length for each time series
    if max_len is None:
        max_len = max(lengths)
    X = torch.zeros(batch_size, max_len, features[0].shape[-1])  # (batch_size, padded_length, feat_dim)
    for i in range(batch_size):
        end = min(lengths[i], max_len)
        X[i, :end, :] = features[i][:end, :]

    targets = torch.stack(labels, dim=0)  # (batch_size, num_labels)
    if bug == "labels_misaligned":
        targets = targets.roll(1, dims=0)

    padding_masks = padding_mask(torch.tensor(lengths, dtype=torch.int16),
                                 max_len=max_len)  # (batch_size, padded_length) boolean tensor, "1" means keep

    return X, targets, padding_masks, IDs


class ClassiregressionDataset(Dataset):

    def __init__(self, samples, labels, indices):
        super(ClassiregressionDataset, self).__init__()
        self.samples = samples  # (port) data.feature_df grouped by sample ID
        self.labels = labels  # (port) data.labels_df
        self.IDs = indices  # list of data IDs, but also mapping between integer index and ID

    def __getitem__(self, ind):
        X = self.samples[self.IDs[ind]]  # (seq_length, feat_dim) array
        y = self.labels[self.IDs[ind]]  # (num_labels,) array
        return torch.from_numpy(X), torch.from_numpy(y), self.IDs[ind]

    def __len__(self):
        return len(self.IDs)


# ----------------------------------------------------------------------------------------------- (port) data
N_CLASSES, FEAT_DIM = 10, 13


def synthetic_digits(rng, n, templates):
    """SpokenArabicDigits-shaped samples: each class a smooth 13-channel trajectory, time-warped, with noise."""
    samples, labels = [], []
    for _ in range(n):
        c = int(rng.integers(0, N_CLASSES))
        length = int(rng.integers(12, 25))
        warp = np.sort(rng.uniform(0, 1, length))
        t = np.linspace(0, 1, length) * 0.7 + warp * 0.3
        freqs, phases, amps = templates[c]
        x = amps * np.sin(2 * np.pi * freqs * t[:, None] + phases) + rng.normal(0, 0.3, (length, FEAT_DIM))
        samples.append((x * 3 + 5).astype(np.float32))
        labels.append(np.array([c], dtype=np.float32))
    return samples, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    templates = [(rng.uniform(0.5, 2.0, FEAT_DIM), rng.uniform(0, 2 * np.pi, FEAT_DIM),
                  rng.uniform(0.5, 1.5, FEAT_DIM)) for _ in range(N_CLASSES)]
    train_samples, train_labels = synthetic_digits(rng, 320, templates)
    test_samples, test_labels = synthetic_digits(rng, 96, templates)

    # Normalizer("standardization") fitted on all training rows, applied to train and test
    rows = np.concatenate(train_samples, axis=0)
    mean, std = rows.mean(axis=0), rows.std(axis=0, ddof=1)
    train_samples = [((x - mean) / (std + np.finfo(float).eps)).astype(np.float32) for x in train_samples]
    test_samples = [((x - mean) / (std + np.finfo(float).eps)).astype(np.float32) for x in test_samples]
    max_seq_len = max(len(x) for x in train_samples + test_samples)

    config = dict(d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.1,  # (port) 64, 8, 3, 256
                  pos_encoding='learnable', activation='gelu', normalization_layer='BatchNorm', freeze=False,
                  lr=0.001, l2_reg=0, global_reg=False, batch_size=32)  # (port) batch_size 64
    model = TSTransformerEncoderClassiregressor(FEAT_DIM, max_seq_len, config['d_model'], config['num_heads'],
                                                config['num_layers'], config['dim_feedforward'],
                                                num_classes=N_CLASSES, dropout=config['dropout'],
                                                pos_encoding=config['pos_encoding'],
                                                activation=config['activation'],
                                                norm=config['normalization_layer'], freeze=config['freeze'])
    loss_module = NoFussCrossEntropyLoss(reduction='none')  # outputs loss for each batch sample

    # main.py: Initialize optimizer
    if config['global_reg']:
        weight_decay = config['l2_reg']
        output_reg = None
    else:
        weight_decay = 0
        output_reg = config['l2_reg']
    optimizer = RAdam(model.parameters(), lr=config['lr'], weight_decay=weight_decay)

    train_dataset = ClassiregressionDataset(train_samples, train_labels, list(range(len(train_samples))))
    test_dataset = ClassiregressionDataset(test_samples, test_labels, list(range(len(test_samples))))
    train_loader = DataLoader(dataset=train_dataset, batch_size=config['batch_size'], shuffle=True,
                              generator=torch.Generator().manual_seed(seed),
                              collate_fn=lambda x: collate_superv(x, max_len=model.max_len, bug=bug))
    test_loader = DataLoader(dataset=test_dataset, batch_size=config['batch_size'], shuffle=False,
                             collate_fn=lambda x: collate_superv(x, max_len=model.max_len))
    st = {"it": None}

    def next_batch():
        if st["it"] is None:
            st["it"] = iter(train_loader)
        try:
            return next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            return next(st["it"])

    def train_step():
        # SupervisedRunner.train_epoch, one batch
        model.train()
        X, targets, padding_masks, IDs = next_batch()
        predictions = model(X, padding_masks)

        loss = loss_module(predictions, targets)  # (batch_size,) loss for each sample in the batch
        batch_loss = torch.sum(loss)
        mean_loss = batch_loss / len(loss)  # mean loss (over samples) used for optimization

        if output_reg:
            total_loss = mean_loss + output_reg * l2_reg_loss(model)
        else:
            total_loss = mean_loss

        # Zero gradients, perform a backward pass, and update the weights.
        optimizer.zero_grad()
        total_loss.backward()

        # torch.nn.utils.clip_grad_value_(self.model.parameters(), clip_value=1.0)
        if bug == "clip_after_step":
            optimizer.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)
            optimizer.step()
        return mean_loss.item()

    def evaluate(model, _batch=None):
        # SupervisedRunner.evaluate: the average per-sample loss
        if bug != "evaluate_in_train_mode":
            model = model.eval()
        epoch_loss = 0  # total loss of epoch
        total_samples = 0  # total samples in epoch
        with torch.no_grad():
            for batch in test_loader:
                X, targets, padding_masks, IDs = batch
                predictions = model(X, padding_masks)
                loss = loss_module(predictions, targets)  # (batch_size,) loss for each sample in the batch
                batch_loss = torch.sum(loss).cpu().item()
                total_samples += len(loss)
                epoch_loss += batch_loss  # add total loss of batch
        model.train()
        return epoch_loss / total_samples  # average loss per element for whole epoch

    X, targets, padding_masks, _ = collate_superv([train_dataset[i] for i in range(config['batch_size'])],
                                                  max_len=model.max_len)

    def loss_fn(predictions, targets):
        return torch.sum(loss_module(predictions, targets)) / len(targets)

    return Program(name="mvtstransformer_classification", model=model, batch=((X, padding_masks), targets),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=evaluate,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # collate_superv's targets rolled by one against the features (classic: labels paired with the wrong samples).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # evaluate() without model.eval(): dropout on and BatchNorm on batch statistics at test time (classic).
    Bug("evaluate_in_train_mode", functools.partial(_build, bug="evaluate_in_train_mode"), "six_claims",
        ("EVALUATION",)),
    # clip_grad_norm_ after optimizer.step(): the clipping never reaches the update (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
