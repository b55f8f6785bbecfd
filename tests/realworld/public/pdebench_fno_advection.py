"""PDEBench's FNO baseline on 1D advection (``pdebench/models/fno/train.py``, ``run_training`` with
``config/args/config_Adv.yaml``): an ``FNO1d`` (lift of the last ``initial_step`` = 10 frames and the grid, four
spectral-conv + 1x1-conv layers with GELU, 12 Fourier modes, width 20, projection 128 -> 1) trained autoregressively:
for every target frame after the first ten, the model predicts the next frame from the last ten, the MSE of that
frame is added to the loss, and the prediction is appended to the input window; Adam lr 1e-3 with weight decay 1e-4
and StepLR (100 epochs, gamma 0.5).

Source: https://github.com/pdebench/PDEBench
Commit: 9754b4c0ee2bcb967233a89d1c8a6a58bf7f7bc9
Files: pdebench/models/fno/train.py, pdebench/models/fno/fno.py (``SpectralConv1d``, ``FNO1d``; the file's header
credits zongyi-li/fourier_neural_operator, MIT), pdebench/models/fno/utils.py (``FNODatasetSingle``, 1D scalar
branch), pdebench/models/config/args/config_Adv.yaml, pdebench/data_gen/data_gen_NLE/AdvectionEq/config/args/
beta4e0.yaml
License: MIT (Copyright 2022 NEC Labs Europe GmbH, Stuttgart University, CSIRO and PDEbench contributors; full text
in LICENSES/pdebench-PDEBench.txt)
Domain: scientific ML, neural operator (autoregressive Fourier neural operator on a 1D advection equation)

Kept as written: ``SpectralConv1d`` (complex weights scaled by ``1 / (in * out)``, ``rfft``, the first ``modes1``
modes multiplied by ``einsum("bix,iox->box")``, ``irfft(n=...)``), ``FNO1d`` (``fc0`` on ``initial_step *
num_channels + 1`` inputs, padding 2, the four layers, ``fc1``/``fc2``, ``unsqueeze(-2)``), the dataset's item
``(data[..., :initial_step, :], data, grid)`` in ``[x, t, channel]`` layout, ``run_training``'s optimizer, scheduler
and ``nn.MSELoss(reduction="mean")``, and the autoregressive branch of its batch loop (``pred`` seeded with the first
frames, ``inp_shape``, the per-frame loss sum, ``pred``/``xx`` updated with ``im``, ``l2_full``, ``zero_grad``,
backward, step); config_Adv's settings (initial_step 10, modes 12, width 20, lr 1e-3, scheduler step 100 / gamma
0.5, ``training_type`` autoregressive).

Deviations from the original:
- data: the 1D_Advection_Sols_beta4.0.hdf5 file (a download) is replaced by 96 exact solutions of u_t + 4 u_x = 0
  on the periodic [0, 1] (beta 4.0 as in beta4e0.yaml, t in [0, 2]) made from ``seed``: each initial condition a sum
  of two sine waves with random integer wavenumbers (1-3), amplitudes and phases, advected exactly,
  ``u(x, t) = u0(x - 4 t)``; 64 grid cells (1024 with ``reduced_resolution`` 4 -> 256 in the config) and 15
  frames 0.05 apart as the config's (201 saved every 0.01 with ``reduced_resolution_t`` 5 -> 41, ``t_train`` 200
  -> 41), so 5 autoregressive steps per batch instead of 31; the first 16 series held out as
  ``FNODatasetSingle``'s test split is (``test_ratio`` 0.1 -> 1/6);
- batch 50 -> 16; ``.to(device)``, the checkpoint, the validation pass, ``metrics`` and plotting are left out;
  one ``train_step`` is one batch of the epoch loop (the StepLR stepped when an epoch ends, as ``scheduler.step()``
  after the loop does) and returns ``loss.item()``;
- the Program's ``loss_fn(outputs, targets)`` is the single-step MSE of the first autoregressive step (the model's
  forward takes ``(inp, grid)``); the loop's loss is the sum over the rollout;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ARGS = types.SimpleNamespace(batch_size=16, t_train=200, initial_step=10, modes=12, width=20, num_channels=1,
                             learning_rate=1.e-3, scheduler_step=100, scheduler_gamma=0.5, epochs=500,
                             training_type="autoregressive")

# ---- pdebench/models/fno/fno.py -----------------------------------------------------------------------------------


class SpectralConv1d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1):
        super().__init__()

        """
        1D Fourier layer. It does FFT, linear transform, and Inverse FFT.
        """

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.modes1 = (
            # Number of Fourier modes to multiply, at most floor(N/2) + 1
            modes1
        )

        self.scale = 1 / (in_channels * out_channels)
        self.weights1 = nn.Parameter(
            self.scale
            * torch.rand(in_channels, out_channels, self.modes1, dtype=torch.cfloat)
        )

    # Complex multiplication
    def compl_mul1d(self, input, weights):
        # (batch, in_channel, x ), (in_channel, out_channel, x) -> (batch, out_channel, x)
        return torch.einsum("bix,iox->box", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        # Compute Fourier coefficients up to factor of e^(- something constant)
        x_ft = torch.fft.rfft(x)

        # Multiply relevant Fourier modes
        out_ft = torch.zeros(
            batchsize,
            self.out_channels,
            x.size(-1) // 2 + 1,
            device=x.device,
            dtype=torch.cfloat,
        )
        out_ft[:, :, : self.modes1] = self.compl_mul1d(
            x_ft[:, :, : self.modes1], self.weights1
        )

        # Return to physical space
        return torch.fft.irfft(out_ft, n=x.size(-1))


class FNO1d(nn.Module):
    def __init__(self, num_channels, modes=16, width=64, initial_step=10):
        super().__init__()

        self.modes1 = modes
        self.width = width
        self.padding = 2  # pad the domain if input is non-periodic
        self.fc0 = nn.Linear(
            initial_step * num_channels + 1, self.width
        )  # input channel is 2: (a(x), x)

        self.conv0 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv1 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv2 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv3 = SpectralConv1d(self.width, self.width, self.modes1)
        self.w0 = nn.Conv1d(self.width, self.width, 1)
        self.w1 = nn.Conv1d(self.width, self.width, 1)
        self.w2 = nn.Conv1d(self.width, self.width, 1)
        self.w3 = nn.Conv1d(self.width, self.width, 1)

        self.fc1 = nn.Linear(self.width, 128)
        self.fc2 = nn.Linear(128, num_channels)

    def forward(self, x, grid):
        # x dim = [b, x1, t*v]
        x = torch.cat((x, grid), dim=-1)
        x = self.fc0(x)
        x = x.permute(0, 2, 1)

        # pad the domain if input is non-periodic
        x = F.pad(x, [0, self.padding])

        x1 = self.conv0(x)
        x2 = self.w0(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv1(x)
        x2 = self.w1(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv2(x)
        x2 = self.w2(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv3(x)
        x2 = self.w3(x)
        x = x1 + x2

        x = x[..., : -self.padding]
        x = x.permute(0, 2, 1)
        x = self.fc1(x)
        x = F.gelu(x)
        x = self.fc2(x)
        return x.unsqueeze(-2)


# ---- pdebench/models/fno/utils.py (FNODatasetSingle, 1D scalar branch; synthetic advection data) ------------------


def _advection_solutions(n, nx, nt, beta, t_max, gen):
    x = (torch.arange(nx, dtype=torch.float32) + 0.5) / nx  # cell centres on [0, 1]
    t = torch.linspace(0.0, t_max, nt)
    k = torch.randint(1, 4, (n, 2), generator=gen).float()
    amp = 0.2 + 0.8 * torch.rand(n, 2, generator=gen)
    phs = 2 * math.pi * torch.rand(n, 2, generator=gen)
    xi = x[None, None, :] - beta * t[None, :, None]  # [1, t, x]
    u = sum(amp[:, j, None, None] * torch.sin(2 * math.pi * k[:, j, None, None] * xi + phs[:, j, None, None])
            for j in range(2))  # [n, t, x]
    return u, x


class FNODatasetSingle(torch.utils.data.Dataset):
    def __init__(self, tensor, x_coordinate, initial_step=10, if_test=False, test_ratio=0.1, num_samples_max=-1):
        # data dim = [batch, time, x] -> [batch, x, t, ch]
        _data = tensor.permute(0, 2, 1)
        self.data = _data[:, :, :, None]  # batch, x, t, ch
        self.grid = x_coordinate.unsqueeze(-1)

        test_idx = int(self.data.shape[0] * test_ratio)
        if if_test:
            self.data = self.data[:test_idx]
        else:
            self.data = self.data[test_idx:]
        self.initial_step = initial_step

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.data[idx, ..., : self.initial_step, :], self.data[idx], self.grid


# ---- pdebench/models/fno/train.py (run_training, autoregressive) --------------------------------------------------


def _build(seed, bug=None):
    args = ARGS
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    tensor, x_coordinate = _advection_solutions(96, 64, 15, 4.0, 0.7, gen)
    initial_step = args.initial_step
    train_data = FNODatasetSingle(tensor, x_coordinate, initial_step=initial_step, test_ratio=1 / 6)
    train_loader = torch.utils.data.DataLoader(
        train_data, batch_size=args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )

    _, _data, _ = next(iter(train_loader))
    model = FNO1d(
        num_channels=args.num_channels,
        width=args.width,
        modes=args.modes,
        initial_step=initial_step,
    )
    t_train = min(args.t_train, _data.shape[-2])

    optimizer = torch.optim.Adam(
        model.parameters(), lr=args.learning_rate, weight_decay=1e-4
    )
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=args.scheduler_step, gamma=args.scheduler_gamma
    )

    loss_fn = nn.MSELoss(reduction="mean")
    state = {"it": None}

    def train_step():
        model.train()
        if state["it"] is None:
            state["it"] = iter(train_loader)
        try:
            xx, yy, grid = next(state["it"])
        except StopIteration:
            scheduler.step()
            state["it"] = iter(train_loader)
            xx, yy, grid = next(state["it"])

        loss = 0
        pred = yy[..., :initial_step, :]
        inp_shape = list(xx.shape)
        inp_shape = inp_shape[:-2]
        inp_shape.append(-1)

        for t in range(initial_step, t_train):
            inp = xx.reshape(inp_shape)
            if bug == "target_frame_off_by_one":
                # the frame the window already ends with, not the next one
                y = yy[..., t - 1 : t, :]
            else:
                y = yy[..., t : t + 1, :]
            im = model(inp, grid)
            _batch = im.size(0)
            if bug == "loss_not_accumulated":
                # ``=`` for ``+=``: only the rollout's last frame is left in the loss
                loss = loss_fn(im.reshape(_batch, -1), y.reshape(_batch, -1))
            else:
                loss += loss_fn(im.reshape(_batch, -1), y.reshape(_batch, -1))
            pred = torch.cat((pred, im), -2)
            xx = torch.cat((xx[..., 1:, :], im), dim=-2)

        _batch = yy.size(0)
        _yy = yy[..., :t_train, :]  # if t_train is not -1
        l2_full = loss_fn(pred.reshape(_batch, -1), _yy.reshape(_batch, -1))  # noqa: F841
        if bug == "zero_grad_between_backward_and_step":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.item()

    xx0, yy0, grid0 = next(iter(train_loader))
    inp0 = xx0.reshape(list(xx0.shape)[:-2] + [-1])
    return Program(name="pdebench_fno_advection", model=model,
                   batch=((inp0, grid0), yy0[..., initial_step:initial_step + 1, :]),
                   loss_fn=lambda im, y: loss_fn(im.reshape(im.size(0), -1), y.reshape(y.size(0), -1)),
                   optimizer=optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic off-by-one: each step's target is ``yy[..., t-1:t]``, the frame the input window already ends with,
    # so the operator is trained to copy its last input instead of advancing the solution by one step.
    Bug("target_frame_off_by_one", functools.partial(_build, bug="target_frame_off_by_one"), "learning_ledger",
        ("TASK",)),
    # classic: ``loss = ...`` for ``loss += ...`` in the rollout loop: only the last autoregressive frame is trained.
    Bug("loss_not_accumulated", functools.partial(_build, bug="loss_not_accumulated"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``optimizer.zero_grad()`` between ``loss.backward()`` and ``optimizer.step()``: the step sees no
    # gradient and only the weight decay moves the weights.
    Bug("zero_grad_between_backward_and_step", functools.partial(_build, bug="zero_grad_between_backward_and_step"),
        "step_probe", (), kind="step.zero_grad_before_step"),  # whole-model slip: its mechanism (README rule 6)
]
