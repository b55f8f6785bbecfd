# ruff: noqa: UP004, UP008, PLR0402
"""Fourier Neural Operator for the 1-d (time-independent) Burgers problem, from zongyi-li/fourier_neural_operator.

Source: https://github.com/zongyi-li/fourier_neural_operator (now redirected to neuraloperator/neuraloperator)
Commit: e12ed83d2baeea55ef572ac0dda6247b04489032
Files: fourier_1d.py (SpectralConv1d, FNO1d, the configuration and the training loop), utilities3.py (LpLoss)
License: MIT (Copyright (c) 2020 Zongyi Li; full text in LICENSES/zongyi-li-fourier_neural_operator.txt)
Domain: scientific ML (neural operator: FFT, learned complex weights on the low modes, pointwise 1x1 conv path)

Kept as written: ``SpectralConv1d`` (rfft, einsum with complex weights on the first ``modes1`` modes, irfft),
``FNO1d`` (grid concatenated to the input, fc0 lift, four Fourier + 1x1-conv layers with GELU, fc1/fc2 projection),
``LpLoss(size_average=False)`` (relative L2, summed over the batch) as the training loss, the MSE computed alongside,
Adam(lr 1e-3, weight_decay 1e-4), StepLR(step_size 50, gamma 0.5) stepped per epoch, the loop body (train(),
zero_grad, forward, ``l2.backward()``, step) and the evaluation with ``torch.no_grad``.

Deviations from the original:
- data: ``burgers_data_R10.mat`` (MatReader) is replaced by a synthetic operator made from ``seed``: ``a(x)`` is a
  random smooth periodic function (6 random Fourier modes) on s=64 points and ``u`` is ``a`` evolved by a
  viscous linear advection-diffusion step solved exactly in Fourier space (each mode damped by exp(-nu k^2 T) and
  shifted by c T), plus a small quadratic term ``0.1 a^2``; ntrain 100, ntest 20 (original: 1000 / 100 at s=1024);
- sizes: modes 8, width 16 (original 16 / 64), fc1 width 128 kept; batch_size 20 kept;
- ``from Adam import Adam`` (the repository's copy of torch's Adam, written for complex parameters) is replaced by
  ``torch.optim.Adam``, which handles complex parameters in this torch; ``.cuda()`` calls dropped; printing and
  the final per-sample prediction loop are dropped;
- one call of ``train_step`` is one iteration of the inner ``for x, y in train_loader`` loop; the scheduler steps
  and the test pass run at the end of each epoch, as in the original;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

SELF_CHECK_STEPS = 30


# ---------------------------------------------------------------- utilities3.py
class LpLoss(object):
    def __init__(self, d=2, p=2, size_average=True, reduction=True):
        super(LpLoss, self).__init__()

        #Dimension and Lp-norm type are postive
        assert d > 0 and p > 0

        self.d = d
        self.p = p
        self.reduction = reduction
        self.size_average = size_average

    def abs(self, x, y):
        num_examples = x.size()[0]

        #Assume uniform mesh
        h = 1.0 / (x.size()[1] - 1.0)

        all_norms = (h**(self.d/self.p))*torch.norm(x.view(num_examples,-1) - y.view(num_examples,-1), self.p, 1)

        if self.reduction:
            if self.size_average:
                return torch.mean(all_norms)
            else:
                return torch.sum(all_norms)

        return all_norms

    def rel(self, x, y):
        num_examples = x.size()[0]

        diff_norms = torch.norm(x.reshape(num_examples,-1) - y.reshape(num_examples,-1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples,-1), self.p, 1)

        if self.reduction:
            if self.size_average:
                return torch.mean(diff_norms/y_norms)
            else:
                return torch.sum(diff_norms/y_norms)

        return diff_norms/y_norms

    def __call__(self, x, y):
        return self.rel(x, y)


# ---------------------------------------------------------------- fourier_1d.py
################################################################
#  1d fourier layer
################################################################
class SpectralConv1d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1):
        super(SpectralConv1d, self).__init__()

        """
        1D Fourier layer. It does FFT, linear transform, and Inverse FFT.
        """

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.modes1 = modes1  #Number of Fourier modes to multiply, at most floor(N/2) + 1

        self.scale = (1 / (in_channels*out_channels))
        self.weights1 = nn.Parameter(self.scale * torch.rand(in_channels, out_channels, self.modes1, dtype=torch.cfloat))

    # Complex multiplication
    def compl_mul1d(self, input, weights):
        # (batch, in_channel, x ), (in_channel, out_channel, x) -> (batch, out_channel, x)
        return torch.einsum("bix,iox->box", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        #Compute Fourier coeffcients up to factor of e^(- something constant)
        x_ft = torch.fft.rfft(x)

        # Multiply relevant Fourier modes
        out_ft = torch.zeros(batchsize, self.out_channels, x.size(-1)//2 + 1,  device=x.device, dtype=torch.cfloat)
        out_ft[:, :, :self.modes1] = self.compl_mul1d(x_ft[:, :, :self.modes1], self.weights1)

        #Return to physical space
        x = torch.fft.irfft(out_ft, n=x.size(-1))
        return x

class FNO1d(nn.Module):
    def __init__(self, modes, width, bug=None):
        super(FNO1d, self).__init__()

        """
        The overall network. It contains 4 layers of the Fourier layer.
        1. Lift the input to the desire channel dimension by self.fc0 .
        2. 4 layers of the integral operators u' = (W + K)(u).
            W defined by self.w; K defined by self.conv .
        3. Project from the channel space to the output space by self.fc1 and self.fc2 .

        input: the solution of the initial condition and location (a(x), x)
        input shape: (batchsize, x=s, c=2)
        output: the solution of a later timestep
        output shape: (batchsize, x=s, c=1)
        """

        self.bug = bug
        self.modes1 = modes
        self.width = width
        self.padding = 2 # pad the domain if input is non-periodic
        self.fc0 = nn.Linear(2, self.width) # input channel is 2: (a(x), x)

        self.conv0 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv1 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv2 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv3 = SpectralConv1d(self.width, self.width, self.modes1)
        self.w0 = nn.Conv1d(self.width, self.width, 1)
        self.w1 = nn.Conv1d(self.width, self.width, 1)
        self.w2 = nn.Conv1d(self.width, self.width, 1)
        self.w3 = nn.Conv1d(self.width, self.width, 1)

        self.fc1 = nn.Linear(self.width, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.fc0(x)
        if self.bug == "lift_viewed_not_permuted":  # classic layout slip: (b, s, c) viewed as (b, c, s)
            x = x.reshape(x.shape[0], x.shape[2], x.shape[1])
        else:
            x = x.permute(0, 2, 1)
        # x = F.pad(x, [0,self.padding]) # pad the domain if input is non-periodic

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

        # x = x[..., :-self.padding] # pad the domain if input is non-periodic
        x = x.permute(0, 2, 1)
        x = self.fc1(x)
        x = F.gelu(x)
        x = self.fc2(x)
        return x

    def get_grid(self, shape, device):
        batchsize, size_x = shape[0], shape[1]
        gridx = torch.tensor(np.linspace(0, 1, size_x), dtype=torch.float)
        gridx = gridx.reshape(1, size_x, 1).repeat([batchsize, 1, 1])
        return gridx.to(device)


def _synthetic_burgers(seed, n, s):
    """The stand-in for burgers_data_R10.mat: fields 'a' (n, s) and 'u' (n, s)."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, s, endpoint=False)
    k = np.arange(1, 7)
    amp = rng.normal(0, 1, (n, 6)) / k
    phase = rng.uniform(0, 2 * np.pi, (n, 6))
    a = (amp[:, :, None] * np.sin(2 * np.pi * k[None, :, None] * x[None, None, :] + phase[:, :, None])).sum(1)
    a_ft = np.fft.rfft(a, axis=1)
    kk = np.arange(a_ft.shape[1])
    nu, c, T = 0.01, 0.5, 1.0
    u_ft = a_ft * np.exp(-nu * (2 * np.pi * kk) ** 2 * T) * np.exp(-2j * np.pi * kk * c * T)
    u = np.fft.irfft(u_ft, n=s, axis=1) + 0.1 * a ** 2
    return torch.tensor(a, dtype=torch.float), torch.tensor(u, dtype=torch.float)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)

    ################################################################
    #  configurations
    ################################################################
    ntrain = 100
    ntest = 20

    s = 64

    batch_size = 20
    learning_rate = 0.001

    step_size = 50
    gamma = 0.5

    modes = 8
    width = 16

    ################################################################
    # read data
    ################################################################

    # Data is of the shape (number of samples, grid size)
    x_data, y_data = _synthetic_burgers(seed, ntrain + ntest, s)

    x_train = x_data[:ntrain,:]
    if bug == "targets_from_test_rows":  # classic slicing slip: the training targets taken from the other end
        y_train = y_data[-ntrain:,:]
    else:
        y_train = y_data[:ntrain,:]
    x_test = x_data[-ntest:,:]
    y_test = y_data[-ntest:,:]

    x_train = x_train.reshape(ntrain,s,1)
    x_test = x_test.reshape(ntest,s,1)

    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_test, y_test), batch_size=batch_size, shuffle=False)

    # model
    model = FNO1d(modes, width, bug=bug)

    ################################################################
    # training and evaluation
    ################################################################
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=gamma)

    myloss = LpLoss(size_average=False)
    state = {"it": None}

    def test_pass():
        model.eval()
        test_l2 = 0.0
        with torch.no_grad():
            for x, y in test_loader:
                out = model(x)
                test_l2 += myloss(out.view(batch_size, -1), y.view(batch_size, -1)).item()
        test_l2 /= ntest
        return test_l2

    def train_step():
        if state["it"] is None:
            model.train()
            state["it"] = iter(train_loader)
        try:
            x, y = next(state["it"])
        except StopIteration:
            scheduler.step()
            test_pass()
            model.train()
            state["it"] = iter(train_loader)
            x, y = next(state["it"])

        if bug != "no_zero_grad":  # classic: zero_grad left out, gradients pile up over the steps
            optimizer.zero_grad()
        out = model(x)

        mse = F.mse_loss(out.view(batch_size, -1), y.view(batch_size, -1), reduction='mean')
        l2 = myloss(out.view(batch_size, -1), y.view(batch_size, -1))
        l2.backward() # use the l2 relative loss

        optimizer.step()
        mse.item()
        return l2.detach()

    def loss_fn(out, y):
        return myloss(out.view(batch_size, -1), y.view(batch_size, -1))

    def eval_fn(model, batch):
        return test_pass()

    xb, yb = x_train[:batch_size], y_train[:batch_size]
    return Program(name="fno_burgers1d", model=model, batch=(xb, yb), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic slicing slip: y_train sliced from the end of the data (y_data[-ntrain:]) while x_train is from the start.
    Bug("targets_from_test_rows", functools.partial(_build, bug="targets_from_test_rows"), "learning_ledger", ("TASK",)),
    # classic layout slip: the lifted (batch, s, width) tensor reshaped instead of permuted before the Fourier layers.
    Bug("lift_viewed_not_permuted", functools.partial(_build, bug="lift_viewed_not_permuted"), "tensor_trace",
        ("conv0",)),
    # classic: optimizer.zero_grad() left out of the loop body.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe",
        (), kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
