# ruff: noqa: PLR0402, UP008
"""Spatio-temporal graph convolutional network (STGCN, Yu et al.) for traffic-speed forecasting, from
FelixOpolka/STGCN-PyTorch: two ST-Conv blocks (gated temporal convolution, graph convolution with the degree-normalized
adjacency by ``einsum``, temporal convolution, BatchNorm over nodes), a last temporal block and a linear head to the
next 3 steps of every sensor, MSE, Adam.

Source: https://github.com/FelixOpolka/STGCN-PyTorch
Commit: 846d511416b209c446310c1e4889c710f64ea6d7
Files: ``stgcn.py`` (``TimeBlock``, ``STGCNBlock``, ``STGCN``), ``main.py`` (``train_epoch``, the validation pass),
``utils.py`` (``load_metr_la_data``'s z-scoring, ``get_normalized_adj``, ``generate_dataset``).
License: MIT (Copyright (c) 2018 Felix Opolka; full text in LICENSES/FelixOpolka-STGCN-PyTorch.txt)
Domain: GNN, spatio-temporal forecasting (traffic sensors on a road graph)

Kept as written: the three modules (channels 64, spatial channels 16, kernel 3, ``BatchNorm2d(num_nodes)``, the
``fully`` layer over ``(num_timesteps_input - 2 * 5) * 64``), ``num_timesteps_input`` 12, ``num_timesteps_output``
3, ``batch_size`` 50, Adam lr 1e-3, ``nn.MSELoss``, the 60/20/20 split along time, ``get_normalized_adj``,
``generate_dataset``, the per-feature z-scoring, ``train_epoch``'s body (``net.train()``, zero_grad, forward on
``A_wave``, MSE, backward, step) with a fresh ``torch.randperm`` every epoch, the validation pass.

Deviations from the original:
- METR-LA (207 sensors, ``data/METR-LA.zip``) is replaced by a synthetic road graph made from ``seed``: 12 sensors at
  random positions, the adjacency a thresholded Gaussian kernel of their distances (METR-LA's construction), and
  600 five-minute steps of two features per sensor like ``node_values.npy`` (speed, time of day): each sensor's
  speed follows a daily profile (period 48 steps) with its own phase, mixed with its neighbours' previous speeds
  through the adjacency, plus noise. ``load_metr_la_data``'s z-scoring runs on it as written.
- ``train_epoch``'s loop body is ``train_step`` (one batch; a new permutation when an epoch's batches are used up);
  it returns the batch loss. The per-epoch validation runs as ``eval_fn`` (MSE on the validation windows, as in
  main.py, in ``net.eval()`` under ``no_grad``, with the de-normalized MAE; it returns both). Plotting, printing, pickling losses and ``np.asscalar`` (removed
  from numpy) are dropped; the device is the CPU; ``torch.manual_seed(seed)`` replaces ``torch.manual_seed(7)``.
- the modules' ``:param:`` docstrings are left out (the code is unchanged).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

num_timesteps_input = 12
num_timesteps_output = 3

epochs = 1000
batch_size = 50

NUM_NODES = 12      # (port) METR-LA has 207
NUM_STEPS = 600     # (port) synthetic time steps
PERIOD = 48         # (port) the daily profile's period


# ---- stgcn.py
class TimeBlock(nn.Module):
    """
    Neural network block that applies a temporal convolution to each node of
    a graph in isolation.
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, bug=None):
        super(TimeBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))
        self.conv2 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))
        self.conv3 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))
        self.bug = bug

    def forward(self, X):
        # Convert into NCHW format for pytorch to perform convolutions.
        if self.bug == "nhwc_reshaped_not_permuted":
            X = X.reshape(X.shape[0], X.shape[3], X.shape[1], X.shape[2])
        else:
            X = X.permute(0, 3, 1, 2)
        temp = self.conv1(X) + torch.sigmoid(self.conv2(X))
        out = F.relu(temp + self.conv3(X))
        # Convert back from NCHW to NHWC
        out = out.permute(0, 2, 3, 1)
        return out


class STGCNBlock(nn.Module):
    """
    Neural network block that applies a temporal convolution on each node in
    isolation, followed by a graph convolution, followed by another temporal
    convolution on each node.
    """

    def __init__(self, in_channels, spatial_channels, out_channels,
                 num_nodes, bug=None):
        super(STGCNBlock, self).__init__()
        self.temporal1 = TimeBlock(in_channels=in_channels,
                                   out_channels=out_channels, bug=bug)
        self.Theta1 = nn.Parameter(torch.FloatTensor(out_channels,
                                                     spatial_channels))
        self.temporal2 = TimeBlock(in_channels=spatial_channels,
                                   out_channels=out_channels)
        self.batch_norm = nn.BatchNorm2d(num_nodes)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.Theta1.shape[1])
        self.Theta1.data.uniform_(-stdv, stdv)

    def forward(self, X, A_hat):
        t = self.temporal1(X)
        lfs = torch.einsum("ij,jklm->kilm", [A_hat, t.permute(1, 0, 2, 3)])
        # t2 = F.relu(torch.einsum("ijkl,lp->ijkp", [lfs, self.Theta1]))
        t2 = F.relu(torch.matmul(lfs, self.Theta1))
        t3 = self.temporal2(t2)
        return self.batch_norm(t3)
        # return t3


class STGCN(nn.Module):
    """
    Spatio-temporal graph convolutional network as described in
    https://arxiv.org/abs/1709.04875v3 by Yu et al.
    Input should have shape (batch_size, num_nodes, num_input_time_steps,
    num_features).
    """

    def __init__(self, num_nodes, num_features, num_timesteps_input,
                 num_timesteps_output, bug=None):
        super(STGCN, self).__init__()
        self.block1 = STGCNBlock(in_channels=num_features, out_channels=64,
                                 spatial_channels=16, num_nodes=num_nodes, bug=bug)
        self.block2 = STGCNBlock(in_channels=64, out_channels=64,
                                 spatial_channels=16, num_nodes=num_nodes)
        self.last_temporal = TimeBlock(in_channels=64, out_channels=64)
        self.fully = nn.Linear((num_timesteps_input - 2 * 5) * 64,
                               num_timesteps_output)

    def forward(self, A_hat, X):
        out1 = self.block1(X, A_hat)
        out2 = self.block2(out1, A_hat)
        out3 = self.last_temporal(out2)
        out4 = self.fully(out3.reshape((out3.shape[0], out3.shape[1], -1)))
        return out4


# ---- utils.py
def load_metr_la_data(seed):
    """(port) the synthetic road graph and sensor series in METR-LA's layout; the z-scoring lines as written."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0.0, 1.0, size=(NUM_NODES, 2))
    dist = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1))
    A = np.exp(-(dist / dist.std()) ** 2).astype(np.float32)
    A[A < 0.3] = 0.0
    np.fill_diagonal(A, 0.0)
    deg = A.sum(1, keepdims=True) + 1.0
    phase = rng.uniform(0, 2 * np.pi, size=NUM_NODES)
    speed = np.zeros((NUM_NODES, NUM_STEPS), dtype=np.float32)
    speed[:, 0] = 60.0
    for t in range(1, NUM_STEPS):
        profile = 60.0 - 15.0 * np.sin(2 * np.pi * t / PERIOD + phase)
        neigh = (A @ speed[:, t - 1] + speed[:, t - 1]) / deg[:, 0]
        speed[:, t] = 0.5 * profile + 0.5 * neigh + rng.normal(0.0, 1.0, size=NUM_NODES)
    tod = np.tile((np.arange(NUM_STEPS) % PERIOD) / PERIOD, (NUM_NODES, 1)).astype(np.float32)
    X = np.stack([speed, tod], axis=1)  # (num_vertices, num_features, num_timesteps)
    X = X.astype(np.float32)

    # Normalization using Z-score method
    means = np.mean(X, axis=(0, 2))
    X = X - means.reshape(1, -1, 1)
    stds = np.std(X, axis=(0, 2))
    X = X / stds.reshape(1, -1, 1)

    return A, X, means, stds


def get_normalized_adj(A):
    """
    Returns the degree normalized adjacency matrix.
    """
    A = A + np.diag(np.ones(A.shape[0], dtype=np.float32))
    D = np.array(np.sum(A, axis=1)).reshape((-1,))
    D[D <= 10e-5] = 10e-5    # Prevent infs
    diag = np.reciprocal(np.sqrt(D))
    A_wave = np.multiply(np.multiply(diag.reshape((-1, 1)), A),
                         diag.reshape((1, -1)))
    return A_wave


def generate_dataset(X, num_timesteps_input, num_timesteps_output, bug=None):
    """
    Takes node features for the graph and divides them into multiple samples
    along the time-axis by sliding a window of size (num_timesteps_input+
    num_timesteps_output) across it in steps of 1.
    """
    # Generate the beginning index and the ending index of a sample, which
    # contains (num_points_for_training + num_points_for_predicting) points
    indices = [(i, i + (num_timesteps_input + num_timesteps_output)) for i
               in range(X.shape[2] - (
                num_timesteps_input + num_timesteps_output) + 1)]

    # Save samples
    features, target = [], []
    for i, j in indices:
        features.append(
            X[:, :, i: i + num_timesteps_input].transpose(
                (0, 2, 1)))
        if bug == "target_window_not_offset":
            target.append(X[:, 0, i: i + num_timesteps_output])
        else:
            target.append(X[:, 0, i + num_timesteps_input: j])

    return torch.from_numpy(np.array(features)), \
           torch.from_numpy(np.array(target))


# ---- main.py
def _build(seed, bug=None):
    torch.manual_seed(seed)

    A, X, means, stds = load_metr_la_data(seed)

    split_line1 = int(X.shape[2] * 0.6)
    split_line2 = int(X.shape[2] * 0.8)

    train_original_data = X[:, :, :split_line1]
    val_original_data = X[:, :, split_line1:split_line2]

    training_input, training_target = generate_dataset(train_original_data,
                                                       num_timesteps_input=num_timesteps_input,
                                                       num_timesteps_output=num_timesteps_output, bug=bug)
    val_input, val_target = generate_dataset(val_original_data,
                                             num_timesteps_input=num_timesteps_input,
                                             num_timesteps_output=num_timesteps_output, bug=bug)

    A_wave = get_normalized_adj(A)
    A_wave = torch.from_numpy(A_wave)

    net = STGCN(A_wave.shape[0],
                training_input.shape[3],
                num_timesteps_input,
                num_timesteps_output, bug=bug)

    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_criterion = nn.MSELoss()

    state = {"permutation": None, "i": 0}

    def train_step():
        """One pass of train_epoch's loop body."""
        if state["permutation"] is None or state["i"] >= training_input.shape[0]:
            state["permutation"] = torch.randperm(training_input.shape[0])
            state["i"] = 0
        permutation, i = state["permutation"], state["i"]
        state["i"] = i + batch_size

        net.train()
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        indices = permutation[i:i + batch_size]
        X_batch, y_batch = training_input[indices], training_target[indices]

        out = net(A_wave, X_batch)
        loss = loss_criterion(out, y_batch)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        # Run validation
        with torch.no_grad():
            model.eval()
            out = model(A_wave, val_input)
            val_loss = loss_criterion(out, val_target).to(device="cpu")

            out_unnormalized = out.detach().cpu().numpy()*stds[0]+means[0]
            target_unnormalized = val_target.detach().cpu().numpy()*stds[0]+means[0]
            mae = np.mean(np.absolute(out_unnormalized - target_unnormalized))
        return float(val_loss), float(mae)

    batch = ((A_wave, training_input[:batch_size]), training_target[:batch_size])
    return Program(name="stgcnpytorch_traffic", model=net, batch=batch, loss_fn=loss_criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # generate_dataset's target slice starts at the window's start instead of after the input steps: the "forecast"
    # is the first 3 input steps of sensor speed, already in the input (classic off-by-window slip).
    Bug("target_window_not_offset", functools.partial(_build, bug="target_window_not_offset"), "learning_ledger",
        ("TASK",)),
    # the first TimeBlock's NHWC -> NCHW conversion written as a reshape: nodes, time and features are scrambled
    # into the channel/height/width axes (classic view-for-permute slip).
    Bug("nhwc_reshaped_not_permuted", functools.partial(_build, bug="nhwc_reshaped_not_permuted"), "tensor_trace",
        ("block1.temporal1",)),
    # optimizer.zero_grad() moved between loss.backward() and optimizer.step(): every step applies a zero gradient
    # (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
