"""PhyCRNet on the 2D Burgers equation (isds-neu/PhyCRNet ``Codes/PhyCRNet_burgers.py``): a physics-informed
convolutional-recurrent network (weight-normed strided conv encoder, a ConvLSTM cell with circular padding, pixel
shuffle back to the grid, a 5x5 output conv, the forward-Euler residual ``x = xt + dt * x``) rolled out from the
initial condition, trained with no data at all: the loss is the mean square of the Burgers residuals computed with
fixed high-order finite-difference convolutions (Laplacian, d/dx, d/dy; a central difference in time) on the outputs
padded periodically; Adam with ``StepLR(step_size=100, gamma=0.97)``, one ``zero_grad`` per epoch, a backward per time
batch with ``retain_graph=True`` and the hidden states detached between time batches.

Source: https://github.com/isds-neu/PhyCRNet
Commit: 2616db51536e127ffc98e944c82f7760606fc4ed
Files: Codes/PhyCRNet_burgers.py, Datasets/random_fields.py, Datasets/Burgers_2d_solver_[HighOrder].py
License: MIT (Copyright (c) 2021 Pu Ren)
Domain: scientific ML, physics-informed PDE solving (2D Burgers, no labels)

Deviations from the original:
- sizes: the 128 x 128 grid -> 32 x 32 (dx = 1/128 -> 1/32), encoder ``hidden_channels [8, 32, 128] + ConvLSTM 128``
  -> ``[8, 16] + 32`` with ``num_layers [3, 1] -> [2, 1]`` and ``upscale_factor 8 -> 4`` (the ConvLSTM output must
  hold 2 x upscale^2 channels for the pixel shuffle), kernels ``[4, 4, 4, 3] -> [4, 4, 3]``; the initial hidden state
  ``randn(1, 128, 16, 16)`` -> ``randn(1, 32, 8, 8)``; ``time_batch_size 1000 -> 8`` (9 steps, one time batch);
  dt 0.002 kept; lr 1e-4 -> 1e-3 (the value the script's comment gives, ``lr_adam = 1e-4 #1e-3``), 30 steps instead
  of 2000 epochs;
- the network is in the helper ``_phycrnet_lib.py``; ``initialize_weights`` keeps the script's constant
  ``3 * 3 * 320`` fan;
- data: the .mat ground truth (loaded only for its first frame, the initial condition) is replaced by the solver's
  own recipe for it: ``GaussianRF(2, M, alpha=2, tau=5).sample(2)`` from ``Datasets/random_fields.py``, made from
  ``seed`` (``torch.ifft`` written with ``torch.fft.ifftn``; the real part kept as the old API did);
- no CUDA (the ``.cuda()`` calls and ``Variable`` wrappers dropped), no pretrained checkpoint loaded
  (``load_checkpoint`` of ``checkpoint500.pt``), no checkpoint saving, plotting or post-processing;
- one ``train_step`` is one epoch of ``train()`` (one time batch); ``eval_fn`` is the physics loss of a rollout under
  ``no_grad`` (the script's own error needs the reference solution);
- the evidence ``batch`` is the model's inputs (the initial hidden states and the initial condition) and no target:
  the loss is the physics residual of the rollout with the initial condition prepended, as ``train()`` computes it.
"""
# ruff: noqa: UP008, PLR0402, UP004, PIE808

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _phycrnet_lib import PhyCRNet

M, TIME_BATCH_SIZE, DT, DX, LR_ADAM = 32, 8, 0.002, 1.0 / 32, 1e-3

# define the high-order finite difference kernels
lapl_op = [[[[    0,   0, -1/12,   0,     0],
             [    0,   0,   4/3,   0,     0],
             [-1/12, 4/3,    -5, 4/3, -1/12],
             [    0,   0,   4/3,   0,     0],
             [    0,   0, -1/12,   0,     0]]]]

partial_y = [[[[0, 0, 0, 0, 0],
               [0, 0, 0, 0, 0],
               [1/12, -8/12, 0, 8/12, -1/12],
               [0, 0, 0, 0, 0],
               [0, 0, 0, 0, 0]]]]

partial_x = [[[[0, 0, 1/12, 0, 0],
               [0, 0, -8/12, 0, 0],
               [0, 0, 0, 0, 0],
               [0, 0, 8/12, 0, 0],
               [0, 0, -1/12, 0, 0]]]]



class Conv2dDerivative(nn.Module):
    def __init__(self, DerFilter, resol, kernel_size=3, name=''):
        super(Conv2dDerivative, self).__init__()

        self.resol = resol  # constant in the finite difference
        self.name = name
        self.input_channels = 1
        self.output_channels = 1
        self.kernel_size = kernel_size

        self.padding = int((kernel_size - 1) / 2)
        self.filter = nn.Conv2d(self.input_channels, self.output_channels, self.kernel_size,
            1, padding=0, bias=False)

        # Fixed gradient operator
        self.filter.weight = nn.Parameter(torch.FloatTensor(DerFilter), requires_grad=False)

    def forward(self, input):
        derivative = self.filter(input)
        return derivative / self.resol


class Conv1dDerivative(nn.Module):
    def __init__(self, DerFilter, resol, kernel_size=3, name=''):
        super(Conv1dDerivative, self).__init__()

        self.resol = resol  # $\delta$*constant in the finite difference
        self.name = name
        self.input_channels = 1
        self.output_channels = 1
        self.kernel_size = kernel_size

        self.padding = int((kernel_size - 1) / 2)
        self.filter = nn.Conv1d(self.input_channels, self.output_channels, self.kernel_size,
            1, padding=0, bias=False)

        # Fixed gradient operator
        self.filter.weight = nn.Parameter(torch.FloatTensor(DerFilter), requires_grad=False)

    def forward(self, input):
        derivative = self.filter(input)
        return derivative / self.resol


class loss_generator(nn.Module):
    ''' Loss generator for physics loss '''

    def __init__(self, dt = (10.0/200), dx = (20.0/128), bug=None):
        ''' Construct the derivatives, X = Width, Y = Height '''

        super(loss_generator, self).__init__()
        self.bug = bug
        if bug == "derivative_kernels_swapped":  # d/dx built from the kernel along the other grid axis, and back
            kx, ky = partial_y, partial_x
        else:
            kx, ky = partial_x, partial_y

        # spatial derivative operator
        self.laplace = Conv2dDerivative(DerFilter = lapl_op, resol = (dx**2), kernel_size = 5,
                                        name = 'laplace_operator')
        self.dx = Conv2dDerivative(DerFilter = kx, resol = (dx*1), kernel_size = 5, name = 'dx_operator')
        self.dy = Conv2dDerivative(DerFilter = ky, resol = (dx*1), kernel_size = 5, name = 'dy_operator')

        # temporal derivative operator
        self.dt = Conv1dDerivative(DerFilter = [[[-1, 0, 1]]], resol = (dt*2), kernel_size = 3, name = 'partial_t')

    def time_derivative(self, output, c):
        u = output[:, c:c + 1, 2:-2, 2:-2]
        lent = u.shape[0]
        lenx = u.shape[3]
        leny = u.shape[2]
        u_conv1d = u.permute(2, 3, 1, 0)  # [height(Y), width(X), c, step]
        u_conv1d = u_conv1d.reshape(lenx*leny,1,lent)
        u_t = self.dt(u_conv1d)  # lent-2 due to no-padding
        u_t = u_t.reshape(leny, lenx, 1, lent-2)
        return u_t.permute(3, 2, 0, 1)  # [step-2, c, height(Y), width(X)]

    def get_phy_Loss(self, output):

        # spatial derivatives
        laplace_u = self.laplace(output[1:-1, 0:1, :, :])  # [t,c,h,w]
        laplace_v = self.laplace(output[1:-1, 1:2, :, :])

        u_x = self.dx(output[1:-1, 0:1, :, :])
        u_y = self.dy(output[1:-1, 0:1, :, :])
        v_x = self.dx(output[1:-1, 1:2, :, :])
        v_y = self.dy(output[1:-1, 1:2, :, :])

        # temporal derivatives of u and v
        u_t = self.time_derivative(output, 0)
        v_t = self.time_derivative(output, 1)

        u = output[1:-1, 0:1, 2:-2, 2:-2]  # [t, c, height(Y), width(X)]
        v = output[1:-1, 1:2, 2:-2, 2:-2]  # [t, c, height(Y), width(X)]

        assert laplace_u.shape == u_t.shape
        assert u_t.shape == v_t.shape
        assert laplace_u.shape == u.shape
        assert laplace_v.shape == v.shape

        R = 200.0

        # 2D burgers eqn
        if self.bug == "viscous_term_sign_flipped":
            f_u = u_t + u * u_x + v * u_y + (1/R) * laplace_u
            f_v = v_t + u * v_x + v * v_y + (1/R) * laplace_v
        else:
            f_u = u_t + u * u_x + v * u_y - (1/R) * laplace_u
            f_v = v_t + u * v_x + v * v_y - (1/R) * laplace_v

        return f_u, f_v


def compute_loss(output, loss_func):
    ''' calculate the phycis loss '''

    # Padding x axis due to periodic boundary condition
    # shape: [t, c, h, w]
    output = torch.cat((output[:, :, :, -2:], output, output[:, :, :, 0:3]), dim=3)

    # Padding y axis due to periodic boundary condition
    # shape: [t, c, h, w]
    output = torch.cat((output[:, :, -2:, :], output, output[:, :, 0:3, :]), dim=2)

    # get physics loss
    mse_loss = nn.MSELoss()
    f_u, f_v = loss_func.get_phy_Loss(output)
    loss =  mse_loss(f_u, torch.zeros_like(f_u)) + mse_loss(f_v, torch.zeros_like(f_v))

    return loss


# ---- Datasets/random_fields.py (the initial condition of Datasets/Burgers_2d_solver_[HighOrder].py) ---------------

class GaussianRF(object):

    def __init__(self, dim, size, alpha=2, tau=3, sigma=None, boundary="periodic", device=None):
        self.dim = dim
        self.device = device
        if sigma is None:
            sigma = tau**(0.5*(2*alpha - self.dim))
        k_max = size//2
        wavenumers = torch.cat((torch.arange(start=0, end=k_max, step=1, device=device),
                                torch.arange(start=-k_max, end=0, step=1, device=device)), 0).repeat(size,1)
        k_x = wavenumers.transpose(0,1)
        k_y = wavenumers
        self.sqrt_eig = (size**2)*math.sqrt(2.0)*sigma*((4*(math.pi**2)*(k_x**2 + k_y**2) + tau**2)**(-alpha/2.0))
        self.sqrt_eig[0,0] = 0.0
        self.size = tuple(size for _ in range(self.dim))

    def sample(self, N, generator=None):
        coeff = torch.randn(N, *self.size, 2, device=self.device, generator=generator)
        coeff[...,0] = self.sqrt_eig*coeff[...,0]
        coeff[...,1] = self.sqrt_eig*coeff[...,1]
        u = torch.fft.ifftn(torch.complex(coeff[..., 0], coeff[..., 1]), dim=(-2, -1), norm="backward")
        return u.real


# ---- Codes/PhyCRNet_burgers.py: train() and __main__ --------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    GRF = GaussianRF(2, M, alpha=2, tau=5)
    U, V = GRF.sample(2, generator=gen)
    input = torch.stack([U, V])[None].float()  # uv[0:1, ...]: [t=1, c, h, w]

    (h0, c0) = (torch.randn(1, 32, M // 4, M // 4, generator=gen), torch.randn(1, 32, M // 4, M // 4, generator=gen))
    initial_state = [(h0, c0)]

    steps = TIME_BATCH_SIZE + 1
    model = PhyCRNet(input_channels = 2, hidden_channels = [8, 16, 32], input_kernel_size = [4, 4, 3],
                     input_stride = [2, 2, 1], input_padding = [1, 1, 1], dt = DT, num_layers = [2, 1],
                     upscale_factor = 4, step = steps, effective_step = list(range(0, steps)))

    optimizer = optim.Adam(model.parameters(), lr=LR_ADAM)
    scheduler = StepLR(optimizer, step_size=100, gamma=0.97)
    loss_func = loss_generator(DT, DX, bug=bug)

    def rollout_loss(outputs, u0):
        output = torch.cat(tuple(outputs), dim=0)  # [t, c, height (Y), width (X)]
        output = torch.cat((u0, output), dim=0)  # the initial state before the output, for central diff
        return compute_loss(output, loss_func)

    def train_step():
        """One epoch of ``train()`` (num_time_batch = 1)."""
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        hidden_state, u0 = initial_state, input
        output, _second_last_state = model(hidden_state, u0)
        loss = rollout_loss(output, u0)
        loss.backward(retain_graph=True)
        batch_loss = loss.item()
        optimizer.step()
        scheduler.step()
        return torch.tensor(batch_loss)

    def loss_fn(outputs, _target):
        return rollout_loss(outputs[0], input)

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            return float(rollout_loss(model(initial_state, input)[0], input))

    return Program(name="phycrnet_burgers", model=model, batch=({"initial_state": initial_state, "x": input}, None),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the viscous term added instead of subtracted: the residual is that of an anti-diffusive Burgers equation,
    # which the rollout is then trained to satisfy.
    Bug("viscous_term_sign_flipped", functools.partial(_build, bug="viscous_term_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # d/dx and d/dy built from each other's kernel (the kernels' names read against the [h, w] = [y, x] layout):
    # the advection terms differentiate along the wrong axis.
    Bug("derivative_kernels_swapped", functools.partial(_build, bug="derivative_kernels_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from the epoch: every epoch's gradient adds to all earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
