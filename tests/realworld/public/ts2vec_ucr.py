# ruff: noqa: SIM102, F841
"""TS2Vec (Yue et al., "TS2Vec: Towards Universal Representation of Time Series"): a dilated-convolution encoder
over timestamps, trained by the hierarchical contrastive loss (instance-wise and temporal contrast at every
max-pooled scale) between two overlapping random crops of each series, with binomial timestamp masking in the
encoder; AdamW, an SWA ``AveragedModel`` of the encoder kept for inference, evaluated on a UCR-style univariate
classification set by full-series max-pooled representations.

Source: https://github.com/yuezhihan/ts2vec
Commit: b0088e14a99706c05451316dc6db8d3da9351163
Files: ts2vec.py, models/encoder.py, models/dilated_conv.py, models/losses.py, utils.py, train.py,
tasks/classification.py, tasks/_eval_protocols.py, scripts/ucr.sh
License: MIT (Copyright (c) 2022 Zhihan Yue; full text in LICENSES/yuezhihan-ts2vec.txt)
Domain: time series, self-supervised representation learning (hierarchical contrastive loss) for classification

Kept as written: ``TSEncoder`` (input linear, binomial mask in training, NaN mask, ``DilatedConvEncoder`` of
``ConvBlock``s with ``SamePadConv`` and dilation ``2 ** i``, a final projector, representation dropout 0.1),
``hierarchical_contrastive_loss`` / ``instance_contrastive_loss`` / ``temporal_contrastive_loss`` (alpha 0.5,
``temporal_unit`` 0), ``take_per_row``, ``TS2Vec.fit``'s loop body (the random crop ``crop_l`` with its extended
left / right context and a per-row ``crop_offset``, zero_grad, the two encoder passes, ``out1[:, -crop_l:]`` and
``out2[:, :crop_l]``, the loss, backward, step, ``self.net.update_parameters(self._net)``), the configuration of
scripts/ucr.sh (batch size 8, lr 0.001, AdamW at its defaults), ``init_dl_program``'s seeding, and
``encode(..., encoding_window='full_series')`` on the averaged model in eval mode.

Deviations from the original:
- sizes for 2 CPU cores: ``repr_dims`` 320 -> 32, ``hidden_dims`` 64 -> 16, ``depth`` 10 -> 3; series of 48
  timestamps, 64 training and 32 test series;
- data: the UCR archive's tsv files are not here: ``load_UCR`` is replaced by synthetic univariate series made
  from ``seed`` (three classes: a sine of class-dependent frequency with a random phase and amplitude, plus noise),
  normalized over the whole dataset like ``load_UCR``; no NaNs, so ``centerize_vary_length_series`` and
  ``split_with_nan`` are no-ops and are not copied; ``max_train_length`` (3000) never crops;
- the DataLoader shuffles with a ``torch.Generator(seed)``; CUDA is dropped (CPU);
- evaluation: sklearn is not here, so ``eval_classification``'s ``fit_knn`` protocol (StandardScaler then a 1-NN
  classifier) is written out in torch; the svm protocol of train.py is not used; ``eval_fn`` returns the accuracy;
- one ``train_step`` is one iteration of ``fit``'s inner loop (the next epoch starts when the loader runs out);
  the Program's model is the trained encoder ``_net``, its batch the two crops of the first batch (the loss runs
  the encoder on the second crop as the loop does);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

T_LEN = 48
N_TRAIN = 64
N_TEST = 32


# models/dilated_conv.py
class SamePadConv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation=1, groups=1):
        super().__init__()
        self.receptive_field = (kernel_size - 1) * dilation + 1
        padding = self.receptive_field // 2
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size,
            padding=padding,
            dilation=dilation,
            groups=groups
        )
        self.remove = 1 if self.receptive_field % 2 == 0 else 0

    def forward(self, x):
        out = self.conv(x)
        if self.remove > 0:
            out = out[:, :, : -self.remove]
        return out


class ConvBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation, final=False):
        super().__init__()
        self.conv1 = SamePadConv(in_channels, out_channels, kernel_size, dilation=dilation)
        self.conv2 = SamePadConv(out_channels, out_channels, kernel_size, dilation=dilation)
        self.projector = nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels or final else None

    def forward(self, x):
        residual = x if self.projector is None else self.projector(x)
        x = F.gelu(x)
        x = self.conv1(x)
        x = F.gelu(x)
        x = self.conv2(x)
        return x + residual


class DilatedConvEncoder(nn.Module):
    def __init__(self, in_channels, channels, kernel_size):
        super().__init__()
        self.net = nn.Sequential(*[
            ConvBlock(
                channels[i-1] if i > 0 else in_channels,
                channels[i],
                kernel_size=kernel_size,
                dilation=2**i,
                final=(i == len(channels)-1)
            )
            for i in range(len(channels))
        ])

    def forward(self, x):
        return self.net(x)


# models/encoder.py
def generate_continuous_mask(B, T, n=5, l=0.1):
    res = torch.full((B, T), True, dtype=torch.bool)
    if isinstance(n, float):
        n = int(n * T)
    n = max(min(n, T // 2), 1)

    if isinstance(l, float):
        l = int(l * T)
    l = max(l, 1)

    for i in range(B):
        for _ in range(n):
            t = np.random.randint(T-l+1)
            res[i, t:t+l] = False
    return res


def generate_binomial_mask(B, T, p=0.5):
    return torch.from_numpy(np.random.binomial(1, p, size=(B, T))).to(torch.bool)


class TSEncoder(nn.Module):
    def __init__(self, input_dims, output_dims, hidden_dims=64, depth=10, mask_mode='binomial'):
        super().__init__()
        self.input_dims = input_dims
        self.output_dims = output_dims
        self.hidden_dims = hidden_dims
        self.mask_mode = mask_mode
        self.input_fc = nn.Linear(input_dims, hidden_dims)
        self.feature_extractor = DilatedConvEncoder(
            hidden_dims,
            [hidden_dims] * depth + [output_dims],
            kernel_size=3
        )
        self.repr_dropout = nn.Dropout(p=0.1)

    def forward(self, x, mask=None):  # x: B x T x input_dims
        nan_mask = ~x.isnan().any(axis=-1)
        x[~nan_mask] = 0
        x = self.input_fc(x)  # B x T x Ch

        # generate & apply mask
        if mask is None:
            if self.training:
                mask = self.mask_mode
            else:
                mask = 'all_true'

        if mask == 'binomial':
            mask = generate_binomial_mask(x.size(0), x.size(1)).to(x.device)
        elif mask == 'continuous':
            mask = generate_continuous_mask(x.size(0), x.size(1)).to(x.device)
        elif mask == 'all_true':
            mask = x.new_full((x.size(0), x.size(1)), True, dtype=torch.bool)
        elif mask == 'all_false':
            mask = x.new_full((x.size(0), x.size(1)), False, dtype=torch.bool)
        elif mask == 'mask_last':
            mask = x.new_full((x.size(0), x.size(1)), True, dtype=torch.bool)
            mask[:, -1] = False

        mask &= nan_mask
        x[~mask] = 0

        # conv encoder
        x = x.transpose(1, 2)  # B x Ch x T
        x = self.repr_dropout(self.feature_extractor(x))  # B x Co x T
        x = x.transpose(1, 2)  # B x T x Co

        return x


# models/losses.py
def hierarchical_contrastive_loss(z1, z2, alpha=0.5, temporal_unit=0, bug=None):
    loss = torch.tensor(0., device=z1.device)
    d = 0
    while z1.size(1) > 1:
        if alpha != 0:
            loss += alpha * instance_contrastive_loss(z1, z2, bug=bug)
        if d >= temporal_unit:
            if 1 - alpha != 0:
                loss += (1 - alpha) * temporal_contrastive_loss(z1, z2)
        d += 1
        z1 = F.max_pool1d(z1.transpose(1, 2), kernel_size=2).transpose(1, 2)
        z2 = F.max_pool1d(z2.transpose(1, 2), kernel_size=2).transpose(1, 2)
    if z1.size(1) == 1:
        if alpha != 0:
            loss += alpha * instance_contrastive_loss(z1, z2, bug=bug)
        d += 1
    return loss / d


def instance_contrastive_loss(z1, z2, bug=None):
    B, T = z1.size(0), z1.size(1)
    if B == 1:
        return z1.new_tensor(0.)
    z = torch.cat([z1, z2], dim=0)  # 2B x T x C
    z = z.transpose(0, 1)  # T x 2B x C
    sim = torch.matmul(z, z.transpose(1, 2))  # T x 2B x 2B
    logits = torch.tril(sim, diagonal=-1)[:, :, :-1]    # T x 2B x (2B-1)
    logits += torch.triu(sim, diagonal=1)[:, :, 1:]
    if bug == "log_softmax_over_anchors":
        # classic: the softmax taken over the anchors (dim 1) instead of over each anchor's candidates
        logits = -F.log_softmax(logits, dim=1)
    else:
        logits = -F.log_softmax(logits, dim=-1)

    i = torch.arange(B, device=z1.device)
    loss = (logits[:, i, B + i - 1].mean() + logits[:, B + i, i].mean()) / 2
    return loss


def temporal_contrastive_loss(z1, z2):
    B, T = z1.size(0), z1.size(1)
    if T == 1:
        return z1.new_tensor(0.)
    z = torch.cat([z1, z2], dim=1)  # B x 2T x C
    sim = torch.matmul(z, z.transpose(1, 2))  # B x 2T x 2T
    logits = torch.tril(sim, diagonal=-1)[:, :, :-1]    # B x 2T x (2T-1)
    logits += torch.triu(sim, diagonal=1)[:, :, 1:]
    logits = -F.log_softmax(logits, dim=-1)

    t = torch.arange(T, device=z1.device)
    loss = (logits[:, t, T + t - 1].mean() + logits[:, T + t, t].mean()) / 2
    return loss


# utils.py
def take_per_row(A, indx, num_elem):
    all_indx = indx[:, None] + np.arange(num_elem)
    return A[torch.arange(all_indx.shape[0])[:, None], all_indx]


def init_dl_program(seed=None):
    if seed is not None:
        random.seed(seed)
        seed += 1
        np.random.seed(seed)
        seed += 1
        torch.manual_seed(seed)


def load_synthetic_ucr(seed):
    """UCR-style univariate classification: class c is a sine of frequency (c + 1) / 12 per step with a random phase
    and amplitude, plus noise; normalized over the whole dataset (train statistics) as load_UCR does."""
    rng = np.random.RandomState(seed)

    def make(n):
        labels = rng.randint(0, 3, size=n)
        t = np.arange(T_LEN)[None, :]
        phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
        amp = rng.uniform(0.7, 1.3, size=(n, 1))
        x = amp * np.sin(2 * np.pi * (labels[:, None] + 1) / 12 * t + phase) + 0.2 * rng.randn(n, T_LEN)
        return x, labels

    train, train_labels = make(N_TRAIN)
    test, test_labels = make(N_TEST)
    mean = np.nanmean(train)
    std = np.nanstd(train)
    train = (train - mean) / std
    test = (test - mean) / std
    return train[..., np.newaxis], train_labels, test[..., np.newaxis], test_labels


def _build(seed, bug=None):
    init_dl_program(seed=seed)
    train_data, train_labels, test_data, test_labels = load_synthetic_ucr(seed)

    # TS2Vec.__init__ (scripts/ucr.sh: --batch-size 8 --repr-dims 320 -> 32)
    batch_size = 8
    lr = 0.001
    temporal_unit = 0
    max_train_length = 3000
    _net = TSEncoder(input_dims=train_data.shape[-1], output_dims=32, hidden_dims=16, depth=3)
    net = torch.optim.swa_utils.AveragedModel(_net)
    net.update_parameters(_net)

    # TS2Vec.fit
    train_data = train_data[~np.isnan(train_data).all(axis=2).all(axis=1)]
    train_dataset = TensorDataset(torch.from_numpy(train_data).to(torch.float))
    train_loader = DataLoader(train_dataset, batch_size=min(batch_size, len(train_dataset)), shuffle=True,
                              drop_last=True, generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.AdamW(_net.parameters(), lr=lr)

    state = {"it": iter(train_loader), "n_iters": 0, "n_epochs": 0}

    def crops(x):
        ts_l = x.size(1)
        crop_l = np.random.randint(low=2 ** (temporal_unit + 1), high=ts_l+1)
        crop_left = np.random.randint(ts_l - crop_l + 1)
        crop_right = crop_left + crop_l
        crop_eleft = np.random.randint(crop_left + 1)
        crop_eright = np.random.randint(low=crop_right, high=ts_l + 1)
        crop_offset = np.random.randint(low=-crop_eleft, high=ts_l - crop_eright + 1, size=x.size(0))
        x1 = take_per_row(x, crop_offset + crop_eleft, crop_right - crop_eleft)
        x2 = take_per_row(x, crop_offset + crop_left, crop_eright - crop_left)
        return x1, x2, crop_l

    def slice_views(out1, out2, crop_l):
        out1 = out1[:, -crop_l:]
        if bug == "second_view_from_wrong_end":
            # classic slicing slip: the second view's overlap taken from its end, so the positives of the
            # instance and temporal contrast are other timestamps
            out2 = out2[:, -crop_l:]
        else:
            out2 = out2[:, :crop_l]
        return out1, out2

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["n_epochs"] += 1
            state["it"] = iter(train_loader)
            batch = next(state["it"])

        x = batch[0]
        if max_train_length is not None and x.size(1) > max_train_length:
            window_offset = np.random.randint(x.size(1) - max_train_length + 1)
            x = x[:, window_offset : window_offset + max_train_length]

        x1, x2, crop_l = crops(x)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        out1 = _net(x1)
        out2 = _net(x2)
        out1, out2 = slice_views(out1, out2, crop_l)

        loss = hierarchical_contrastive_loss(
            out1,
            out2,
            temporal_unit=temporal_unit,
            bug=bug,
        )

        loss.backward()
        optimizer.step()
        if bug != "swa_model_never_updated":
            net.update_parameters(_net)

        state["n_iters"] += 1
        return loss.detach()

    def encode(data):
        # TS2Vec.encode(data, encoding_window='full_series') (no sliding)
        org_training = net.training
        net.eval()
        loader = DataLoader(TensorDataset(torch.from_numpy(data).to(torch.float)), batch_size=batch_size)
        with torch.no_grad():
            output = []
            for b in loader:
                out = net(b[0], None)
                out = F.max_pool1d(out.transpose(1, 2), kernel_size=out.size(1)).transpose(1, 2)
                output.append(out.squeeze(1))
            output = torch.cat(output, dim=0)
        net.train(org_training)
        return output

    def eval_fn(model, batch):
        # tasks.eval_classification(..., eval_protocol='knn'): StandardScaler then 1-NN, accuracy on the test set
        train_repr = encode(train_data)
        test_repr = encode(test_data)
        mu = train_repr.mean(0)
        sd = train_repr.std(0, unbiased=False)
        sd = torch.where(sd == 0, torch.ones_like(sd), sd)
        tr = (train_repr - mu) / sd
        te = (test_repr - mu) / sd
        nearest = torch.cdist(te, tr).argmin(1)
        pred = torch.as_tensor(train_labels)[nearest]
        return float((pred == torch.as_tensor(test_labels)).float().mean())

    # the Program's batch: the two crops of one training batch, as the loop makes them
    x0 = train_dataset.tensors[0][:batch_size]
    x1, x2, crop_l0 = crops(x0)

    def loss_fn(out1, targets):
        x2_, crop_l = targets
        o1, o2 = slice_views(out1, _net(x2_.clone()), crop_l)
        return hierarchical_contrastive_loss(o1, o2, temporal_unit=temporal_unit, bug=bug)

    return Program(name="ts2vec_ucr", model=_net, batch=(x1, (x2, crop_l0)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("second_view_from_wrong_end", functools.partial(_build, bug="second_view_from_wrong_end"),
        "learning_ledger", ("OBJECTIVE",)),
    Bug("log_softmax_over_anchors", functools.partial(_build, bug="log_softmax_over_anchors"), "learning_ledger",
        ("OBJECTIVE",)),
    Bug("swa_model_never_updated", functools.partial(_build, bug="swa_model_never_updated"), "six_claims",
        ("EVALUATION",)),
]
