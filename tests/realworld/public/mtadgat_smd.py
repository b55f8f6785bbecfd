# ruff: noqa: UP008
"""MTAD-GAT (Zhao et al., ICDM 2020): multivariate time-series anomaly detection by joint forecasting and
reconstruction: a 1-D convolution, a feature-oriented and a time-oriented GATv2 layer concatenated with the input
into a GRU; its last hidden state feeds a 3-layer MLP forecaster of the next step and a GRU decoder reconstructing
the window; loss ``sqrt(MSE(forecast)) + sqrt(MSE(recon))``, Adam, sliding windows with a shuffled 10% validation.

Source: https://github.com/ML4ITS/mtad-gat-pytorch
Commit: a3719416527d57e0e364f9b489c5368ade1bc8e7
Files: ``mtad_gat.py``, ``modules.py``, ``training.py`` (``Trainer.fit``, ``evaluate``), ``train.py``, ``utils.py``
(``normalize_data``, ``get_target_dims``, ``SlidingWindowDataset``, ``create_data_loaders``), ``args.py``
License: MIT (Copyright (c) 2021 Axel Harstad & William Kvaale; full text in LICENSES/ML4ITS-mtad-gat-pytorch.txt)
Domain: time series anomaly detection (graph attention over features and time, forecasting + reconstruction)

Kept as written: the modules of ``modules.py`` and ``MTAD_GAT`` (with ``ReconstructionModel``'s
``repeat_interleave(...).view(...)`` and the GRU's ``h[-1]``), ``SlidingWindowDataset``, ``create_data_loaders``
(numpy-shuffled indices, two ``SubsetRandomSampler`` loaders), ``Trainer.fit``'s batch body (zero_grad, forward,
the SMD branch with ``target_dims`` None, squeezes, both ``torch.sqrt(MSELoss)`` terms summed, backward, step),
``Trainer.evaluate``, ``train.py``'s SMD path and the ``args.py`` defaults other than sizes (GATv2, kernel 7,
fc_n_layers 3, dropout 0.3, alpha 0.2, Adam lr 1e-3, val_split 0.1, normalize).

Deviations from the original:
- the SMD machine files are not here: a synthetic series made from ``seed`` (8 channels of sinusoids with random
  periods and phases, coupled by a random mixing matrix, plus noise; 640 steps), MinMax-normalized as
  ``normalize_data`` does with the scaler written out (no scikit-learn here);
- sizes for 2 CPU cores: 38 features -> 8, lookback 100 -> 20, gru / fc / recon hidden 150 -> 32, batch 256 -> 32;
- the docstrings of ``modules.py`` and its original-GAT branches (``use_gatv2=False``, not taken) are dropped; so
  are CUDA, tensorboard, model saving, plotting and the prediction / POT thresholding after training;
- one ``train_step`` is one batch of ``fit``'s epoch loop, returning ``loss``; ``eval_fn`` is ``evaluate``'s total;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, SubsetRandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FEATURES, N_STEPS = 8, 640  # (port) synthetic series


# modules.py

class ConvLayer(nn.Module):
    def __init__(self, n_features, kernel_size=7):
        super(ConvLayer, self).__init__()
        self.padding = nn.ConstantPad1d((kernel_size - 1) // 2, 0.0)
        self.conv = nn.Conv1d(in_channels=n_features, out_channels=n_features, kernel_size=kernel_size)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = x.permute(0, 2, 1)
        x = self.padding(x)
        x = self.relu(self.conv(x))
        return x.permute(0, 2, 1)  # Permute back


class FeatureAttentionLayer(nn.Module):
    def __init__(self, n_features, window_size, dropout, alpha, embed_dim=None, use_gatv2=True, use_bias=True):
        super(FeatureAttentionLayer, self).__init__()
        self.n_features = n_features
        self.window_size = window_size
        self.dropout = dropout
        self.embed_dim = embed_dim if embed_dim is not None else window_size
        self.use_gatv2 = use_gatv2
        self.num_nodes = n_features
        self.use_bias = use_bias
        if self.use_gatv2:
            self.embed_dim *= 2
            lin_input_dim = 2 * window_size
            a_input_dim = self.embed_dim
        self.lin = nn.Linear(lin_input_dim, self.embed_dim)
        self.a = nn.Parameter(torch.empty((a_input_dim, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        if self.use_bias:
            self.bias = nn.Parameter(torch.zeros(n_features, n_features))
        self.leakyrelu = nn.LeakyReLU(alpha)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        # x shape (b, n, k): b - batch size, n - window size, k - number of features
        x = x.permute(0, 2, 1)
        if self.use_gatv2:  # 'Dynamic' GAT attention (Brody et al., 2021)
            a_input = self._make_attention_input(x)                 # (b, k, k, 2*window_size)
            a_input = self.leakyrelu(self.lin(a_input))             # (b, k, k, embed_dim)
            e = torch.matmul(a_input, self.a).squeeze(3)            # (b, k, k, 1)
        if self.use_bias:
            e += self.bias
        # Attention weights
        attention = torch.softmax(e, dim=2)
        attention = torch.dropout(attention, self.dropout, train=self.training)
        # Computing new node features using the attention
        h = self.sigmoid(torch.matmul(attention, x))
        return h.permute(0, 2, 1)

    def _make_attention_input(self, v):
        K = self.num_nodes
        blocks_repeating = v.repeat_interleave(K, dim=1)  # Left-side of the matrix
        blocks_alternating = v.repeat(1, K, 1)  # Right-side of the matrix
        combined = torch.cat((blocks_repeating, blocks_alternating), dim=2)  # (b, K*K, 2*window_size)
        if self.use_gatv2:
            return combined.view(v.size(0), K, K, 2 * self.window_size)


class TemporalAttentionLayer(nn.Module):
    bug = None  # (port) the variant switch

    def __init__(self, n_features, window_size, dropout, alpha, embed_dim=None, use_gatv2=True, use_bias=True):
        super(TemporalAttentionLayer, self).__init__()
        self.n_features = n_features
        self.window_size = window_size
        self.dropout = dropout
        self.use_gatv2 = use_gatv2
        self.embed_dim = embed_dim if embed_dim is not None else n_features
        self.num_nodes = window_size
        self.use_bias = use_bias
        if self.use_gatv2:
            self.embed_dim *= 2
            lin_input_dim = 2 * n_features
            a_input_dim = self.embed_dim
        self.lin = nn.Linear(lin_input_dim, self.embed_dim)
        self.a = nn.Parameter(torch.empty((a_input_dim, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        if self.use_bias:
            self.bias = nn.Parameter(torch.zeros(window_size, window_size))
        self.leakyrelu = nn.LeakyReLU(alpha)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        # x shape (b, n, k): b - batch size, n - window size, k - number of features
        if self.use_gatv2:  # 'Dynamic' GAT attention (Brody et al., 2021)
            a_input = self._make_attention_input(x)              # (b, n, n, 2*n_features)
            a_input = self.leakyrelu(self.lin(a_input))          # (b, n, n, embed_dim)
            e = torch.matmul(a_input, self.a).squeeze(3)         # (b, n, n, 1)
        if self.use_bias:
            e += self.bias  # (b, n, n, 1)
        # Attention weights
        attention = torch.softmax(e, dim=2)
        if self.bug == "attention_dropout_always_on":
            attention = torch.dropout(attention, self.dropout, train=True)
        else:
            attention = torch.dropout(attention, self.dropout, train=self.training)
        h = self.sigmoid(torch.matmul(attention, x))    # (b, n, k)
        return h

    def _make_attention_input(self, v):
        K = self.num_nodes
        blocks_repeating = v.repeat_interleave(K, dim=1)  # Left-side of the matrix
        blocks_alternating = v.repeat(1, K, 1)  # Right-side of the matrix
        combined = torch.cat((blocks_repeating, blocks_alternating), dim=2)
        if self.use_gatv2:
            return combined.view(v.size(0), K, K, 2 * self.n_features)


class GRULayer(nn.Module):
    def __init__(self, in_dim, hid_dim, n_layers, dropout):
        super(GRULayer, self).__init__()
        self.hid_dim = hid_dim
        self.n_layers = n_layers
        self.dropout = 0.0 if n_layers == 1 else dropout
        self.gru = nn.GRU(in_dim, hid_dim, num_layers=n_layers, batch_first=True, dropout=self.dropout)

    def forward(self, x):
        out, h = self.gru(x)
        out, h = out[-1, :, :], h[-1, :, :]  # Extracting from last layer
        return out, h


class RNNDecoder(nn.Module):
    def __init__(self, in_dim, hid_dim, n_layers, dropout):
        super(RNNDecoder, self).__init__()
        self.in_dim = in_dim
        self.dropout = 0.0 if n_layers == 1 else dropout
        self.rnn = nn.GRU(in_dim, hid_dim, n_layers, batch_first=True, dropout=self.dropout)

    def forward(self, x):
        decoder_out, _ = self.rnn(x)
        return decoder_out


class ReconstructionModel(nn.Module):
    def __init__(self, window_size, in_dim, hid_dim, out_dim, n_layers, dropout):
        super(ReconstructionModel, self).__init__()
        self.window_size = window_size
        self.decoder = RNNDecoder(in_dim, hid_dim, n_layers, dropout)
        self.fc = nn.Linear(hid_dim, out_dim)

    def forward(self, x):
        # x will be last hidden state of the GRU layer
        h_end = x
        h_end_rep = h_end.repeat_interleave(self.window_size, dim=1).view(x.size(0), self.window_size, -1)
        decoder_out = self.decoder(h_end_rep)
        out = self.fc(decoder_out)
        return out


class Forecasting_Model(nn.Module):
    def __init__(self, in_dim, hid_dim, out_dim, n_layers, dropout):
        super(Forecasting_Model, self).__init__()
        layers = [nn.Linear(in_dim, hid_dim)]
        for _ in range(n_layers - 1):
            layers.append(nn.Linear(hid_dim, hid_dim))
        layers.append(nn.Linear(hid_dim, out_dim))
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)
        self.relu = nn.ReLU()

    def forward(self, x):
        for i in range(len(self.layers) - 1):
            x = self.relu(self.layers[i](x))
            x = self.dropout(x)
        return self.layers[-1](x)


# mtad_gat.py
class MTAD_GAT(nn.Module):
    def __init__(self, n_features, window_size, out_dim, kernel_size=7, feat_gat_embed_dim=None,
                 time_gat_embed_dim=None, use_gatv2=True, gru_n_layers=1, gru_hid_dim=150, forecast_n_layers=1,
                 forecast_hid_dim=150, recon_n_layers=1, recon_hid_dim=150, dropout=0.2, alpha=0.2):
        super(MTAD_GAT, self).__init__()
        self.conv = ConvLayer(n_features, kernel_size)
        self.feature_gat = FeatureAttentionLayer(n_features, window_size, dropout, alpha, feat_gat_embed_dim, use_gatv2)
        self.temporal_gat = TemporalAttentionLayer(n_features, window_size, dropout, alpha, time_gat_embed_dim, use_gatv2)
        self.gru = GRULayer(3 * n_features, gru_hid_dim, gru_n_layers, dropout)
        self.forecasting_model = Forecasting_Model(gru_hid_dim, forecast_hid_dim, out_dim, forecast_n_layers, dropout)
        self.recon_model = ReconstructionModel(window_size, gru_hid_dim, recon_hid_dim, out_dim, recon_n_layers, dropout)

    def forward(self, x):
        # x shape (b, n, k): b - batch size, n - window size, k - number of features
        x = self.conv(x)
        h_feat = self.feature_gat(x)
        h_temp = self.temporal_gat(x)
        h_cat = torch.cat([x, h_feat, h_temp], dim=2)  # (b, n, 3k)
        _, h_end = self.gru(h_cat)
        h_end = h_end.view(x.shape[0], -1)   # Hidden state for last timestamp
        predictions = self.forecasting_model(h_end)
        recons = self.recon_model(h_end)
        return predictions, recons


# utils.py
def normalize_data(data, scaler=None):
    data = np.asarray(data, dtype=np.float32)
    if np.any(sum(np.isnan(data))):
        data = np.nan_to_num(data)
    if scaler is None:  # (port) MinMaxScaler written out
        scaler = (data.min(0), data.max(0) - data.min(0))
    data = (data - scaler[0]) / np.where(scaler[1] == 0, 1.0, scaler[1])
    return data, scaler


def _synthetic_series(seed):  # (port) mixed sinusoids coupled across channels, plus noise
    rng = np.random.RandomState(seed)
    t = np.arange(N_STEPS)[:, None]
    periods = rng.uniform(12, 60, size=(1, N_FEATURES))
    base = np.sin(2 * np.pi * t / periods + rng.uniform(0, 2 * np.pi, size=(1, N_FEATURES)))
    mix = np.eye(N_FEATURES) + 0.4 * rng.randn(N_FEATURES, N_FEATURES)
    return base @ mix + 0.05 * rng.randn(N_STEPS, N_FEATURES)


class SlidingWindowDataset(Dataset):
    def __init__(self, data, window, target_dim=None, horizon=1, bug=None):
        self.data = data
        self.window = window
        self.target_dim = target_dim
        self.horizon = horizon
        self.bug = bug

    def __getitem__(self, index):
        x = self.data[index : index + self.window]
        if self.bug == "target_inside_window":
            y = self.data[index + self.window - 1 : index + self.window - 1 + self.horizon]
            return x, y
        y = self.data[index + self.window : index + self.window + self.horizon]
        return x, y

    def __len__(self):
        return len(self.data) - self.window


def create_data_loaders(train_dataset, batch_size, val_split=0.1, shuffle=True, test_dataset=None):
    dataset_size = len(train_dataset)
    indices = list(range(dataset_size))
    split = int(np.floor(val_split * dataset_size))
    if shuffle:
        np.random.shuffle(indices)
    train_indices, val_indices = indices[split:], indices[:split]
    train_sampler = SubsetRandomSampler(train_indices)
    valid_sampler = SubsetRandomSampler(val_indices)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, sampler=train_sampler)
    val_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, sampler=valid_sampler)
    return train_loader, val_loader, None


def _trainer_loss(self, x, y, preds, recons):
    # Trainer.fit's and Trainer.evaluate's shared lines
    if self.target_dims is not None:
        x = x[:, :, self.target_dims]
        y = y[:, :, self.target_dims].squeeze(-1)
    if preds.ndim == 3:
        preds = preds.squeeze(1)
    if y.ndim == 3:
        y = y.squeeze(1)
    forecast_loss = torch.sqrt(self.forecast_criterion(y, preds))
    recon_loss = torch.sqrt(self.recon_criterion(x, recons))
    return forecast_loss, recon_loss


def _loop(self, train_loader, val_loader, bug):
    st = {"it": None}

    def train_step():
        # one batch of Trainer.fit's epoch loop (model.train() where an epoch starts)
        if st["it"] is None:
            self.model.train()
            st["it"] = iter(train_loader)
        x_y = next(st["it"], None)
        if x_y is None:
            self.model.train()
            st["it"] = iter(train_loader)
            x_y = next(st["it"])
        x, y = x_y
        self.optimizer.zero_grad()
        preds, recons = self.model(x)
        forecast_loss, recon_loss = _trainer_loss(self, x, y, preds, recons)
        loss = forecast_loss + recon_loss
        loss.backward()
        if bug == "zero_grad_after_backward":
            self.optimizer.zero_grad()
        self.optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # Trainer.evaluate on the validation loader; the total loss
        was = model.training
        model.eval()
        losses = []
        with torch.no_grad():
            for x, y in val_loader:
                preds, recons = model(x)
                losses.append([v.item() for v in _trainer_loss(self, x, y, preds, recons)])
        model.train(was)
        return float(np.sqrt((np.array(losses) ** 2).mean(0)).sum())
    return train_step, eval_fn


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    # args.py defaults, sizes as listed in the docstring
    args = types.SimpleNamespace(dataset="SMD", lookback=20, normalize=True, kernel_size=7, use_gatv2=True,
                                 feat_gat_embed_dim=None, time_gat_embed_dim=None, gru_n_layers=1, gru_hid_dim=32,
                                 fc_n_layers=3, fc_hid_dim=32, recon_n_layers=1, recon_hid_dim=32, alpha=0.2,
                                 val_split=0.1, bs=32, init_lr=1e-3, shuffle_dataset=True, dropout=0.3)
    window_size = args.lookback
    x_train = torch.from_numpy(normalize_data(_synthetic_series(seed))[0]).float()
    n_features = x_train.shape[1]
    target_dims, out_dim = None, n_features  # get_target_dims("SMD") is None
    train_dataset = SlidingWindowDataset(x_train, window_size, target_dims, bug=bug)
    train_loader, val_loader, _ = create_data_loaders(train_dataset, args.bs, args.val_split, args.shuffle_dataset)
    model = MTAD_GAT(n_features, window_size, out_dim, kernel_size=args.kernel_size, use_gatv2=args.use_gatv2,
                     feat_gat_embed_dim=args.feat_gat_embed_dim, time_gat_embed_dim=args.time_gat_embed_dim,
                     gru_n_layers=args.gru_n_layers, gru_hid_dim=args.gru_hid_dim,
                     forecast_n_layers=args.fc_n_layers, forecast_hid_dim=args.fc_hid_dim,
                     recon_n_layers=args.recon_n_layers, recon_hid_dim=args.recon_hid_dim,
                     dropout=args.dropout, alpha=args.alpha)
    model.temporal_gat.bug = bug
    optimizer = torch.optim.Adam(model.parameters(), lr=args.init_lr)
    self = types.SimpleNamespace(model=model, optimizer=optimizer, target_dims=target_dims,
                                 forecast_criterion=nn.MSELoss(), recon_criterion=nn.MSELoss())
    train_step, eval_fn = _loop(self, train_loader, val_loader, bug)
    x0, y0 = next(iter(train_loader))
    loss_fn = lambda outputs, target: sum(_trainer_loss(self, target[1], target[0], *outputs))
    return Program(name="mtadgat_smd", model=model, batch=(x0, (y0, x0)), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic window slip: the target is the window's own last step (index + window - 1), not the next one.
    Bug("target_inside_window", functools.partial(_build, bug="target_inside_window"), "learning_ledger",
        ("TASK",)),
    # classic: the temporal attention's dropout called with train=True, so it stays on in Trainer.evaluate.
    Bug("attention_dropout_always_on", functools.partial(_build, bug="attention_dropout_always_on"), "six_claims",
        ("EVALUATION",)),
    # classic: zero_grad moved between backward and step, Adam steps on zero gradients.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
