"""Block Neural Autoregressive Flow (De Cao, Titov & Aziz, "Block Neural Autoregressive Flow"), Nicola De Cao's
BNAF: 2-D density estimation on the 8-Gaussians toy by maximum likelihood. The flow is a block-masked MLP whose
diagonal blocks are kept positive through ``exp`` and whose weights are weight-normalized; every layer carries the
log diagonal blocks of the Jacobian along (``logsumexp`` over the block products), so the log-determinant is exact.
Adam with AMSGrad at lr 0.1, gradient-norm clipping at 0.1, ReduceLROnPlateau on the training loss.

Source: https://github.com/nicola-decao/BNAF
Commit: da43f564aa335a5a32922118316c70bb5c3d861c
Files: ``toy2d.py`` (``create_model``, ``compute_log_p_x``, ``train_density2d``, ``main``), ``bnaf.py``,
``data/generate2d.py``
License: MIT (Copyright (c) 2019 Nicola De Cao; full text in LICENSES/nicola-decao-BNAF.txt)
Domain: normalizing flow (density estimation, exact log-determinant through block-triangular Jacobians)

Kept as written: ``Sequential``, ``BNAF`` (with its ``res`` options, none used by a single flow), ``Permutation``,
``MaskedWeight`` (xavier blocks, ``log U(0, 1)`` diagonal scale, ``mask_d`` / ``mask_o``, ``exp`` on the diagonal
blocks, weight normalization, the log diagonal blocks ``wpl``), ``Tanh`` with its log-derivative, ``create_model``
(the defaults: 1 flow, 3 layers, hidden_dim 50 per dimension), ``compute_log_p_x`` (standard normal base),
``train_density2d``'s loop body (a fresh batch of ``sample2d``, ``-log p(x)`` averaged, backward,
``clip_grad_norm_(max_norm=0.1)``, step, zero_grad, ``scheduler.step(loss)``), ``sample2d``'s "8gaussians"
branch, and ``main``'s optimizer and scheduler (Adam ``amsgrad=True`` at 1e-1, ReduceLROnPlateau factor 0.5,
patience 2000, min_lr 5e-4, ``threshold_mode='abs'``).

Deviations from the original:
- ``sample2d`` draws from ``np.random.RandomState()`` (unseeded) on every call; here one ``RandomState(seed)`` is
  made at build time and passed in, so the same seed gives the same batches (``sklearn`` imported there and
  unused is dropped, as are the other toy branches and the energy targets);
- ``bnaf.py`` uses ``np`` in ``Permutation`` without importing it; the import is added here;
- ReduceLROnPlateau's ``verbose=True`` is dropped (no longer accepted by torch); CPU instead of ``cuda:0``;
- one ``train_step`` is one iteration of ``train_density2d``'s loop, returning the loss; the tqdm progress bar,
  argument parsing, checkpoints and plots are dropped; ``eval_fn`` is the mean negative log-likelihood of a fixed
  held-out sample of 1000 points;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, RUF013

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# -------------------------------------------------------------------------------------------------- bnaf.py
class Sequential(torch.nn.Sequential):
    """
    Class that extends ``torch.nn.Sequential`` for computing the output of
    the function alongside with the log-det-Jacobian of such transformation.
    """

    def forward(self, inputs: torch.Tensor):
        log_det_jacobian = 0.0
        for i, module in enumerate(self._modules.values()):
            inputs, log_det_jacobian_ = module(inputs)
            log_det_jacobian = log_det_jacobian + log_det_jacobian_
        return inputs, log_det_jacobian


class BNAF(torch.nn.Sequential):
    """
    Class that extends ``torch.nn.Sequential`` for constructing a Block Neural
    Normalizing Flow.
    """

    def __init__(self, *args, res: str = None):
        super(BNAF, self).__init__(*args)

        self.res = res

        if res == "gated":
            self.gate = torch.nn.Parameter(torch.nn.init.normal_(torch.Tensor(1)))

    def forward(self, inputs: torch.Tensor):
        outputs = inputs
        grad = None

        for module in self._modules.values():
            outputs, grad = module(outputs, grad)

            grad = grad if len(grad.shape) == 4 else grad.view(grad.shape + [1, 1])

        assert inputs.shape[-1] == outputs.shape[-1]

        if self.res == "normal":
            return inputs + outputs, torch.nn.functional.softplus(grad.squeeze()).sum(
                -1
            )
        elif self.res == "gated":
            return self.gate.sigmoid() * outputs + (1 - self.gate.sigmoid()) * inputs, (
                torch.nn.functional.softplus(grad.squeeze() + self.gate)
                - torch.nn.functional.softplus(self.gate)
            ).sum(-1)
        else:
            return outputs, grad.squeeze().sum(-1)

    def _get_name(self):
        return "BNAF(res={})".format(self.res)


class Permutation(torch.nn.Module):
    """
    Module that outputs a permutation of its input.
    """

    def __init__(self, in_features: int, p: list = None):
        super(Permutation, self).__init__()

        self.in_features = in_features

        if p is None:
            self.p = np.random.permutation(in_features)
        elif p == "flip":
            self.p = list(reversed(range(in_features)))
        else:
            self.p = p

    def forward(self, inputs: torch.Tensor):
        return inputs[:, self.p], 0

    def __repr__(self):
        return "Permutation(in_features={}, p={})".format(self.in_features, self.p)


class MaskedWeight(torch.nn.Module):
    """
    Module that implements a linear layer with block matrices with positive diagonal blocks.
    Moreover, it uses Weight Normalization (https://arxiv.org/abs/1602.07868) for stability.
    """

    def __init__(
        self, in_features: int, out_features: int, dim: int, bias: bool = True, bug=None
    ):
        super(MaskedWeight, self).__init__()
        self.in_features, self.out_features, self.dim = in_features, out_features, dim
        self.bug = bug

        weight = torch.zeros(out_features, in_features)
        for i in range(dim):
            weight[
                i * out_features // dim : (i + 1) * out_features // dim,
                0 : (i + 1) * in_features // dim,
            ] = torch.nn.init.xavier_uniform_(
                torch.Tensor(out_features // dim, (i + 1) * in_features // dim)
            )

        self._weight = torch.nn.Parameter(weight)
        self._diag_weight = torch.nn.Parameter(
            torch.nn.init.uniform_(torch.Tensor(out_features, 1)).log()
        )

        self.bias = (
            torch.nn.Parameter(
                torch.nn.init.uniform_(
                    torch.Tensor(out_features),
                    -1 / math.sqrt(out_features),
                    1 / math.sqrt(out_features),
                )
            )
            if bias
            else 0
        )

        mask_d = torch.zeros_like(weight)
        for i in range(dim):
            mask_d[
                i * (out_features // dim) : (i + 1) * (out_features // dim),
                i * (in_features // dim) : (i + 1) * (in_features // dim),
            ] = 1

        self.register_buffer("mask_d", mask_d)

        mask_o = torch.ones_like(weight)
        for i in range(dim):
            mask_o[
                i * (out_features // dim) : (i + 1) * (out_features // dim),
                i * (in_features // dim) :,
            ] = 0
        if bug == "upper_blocks_unmasked":
            mask_o = 1 - mask_d  # the blocks above the diagonal kept: the Jacobian is no longer block-triangular

        self.register_buffer("mask_o", mask_o)

    def get_weights(self):
        """
        Computes the weight matrix using masks and weight normalization.
        It also compute the log diagonal blocks of it.
        """

        w = torch.exp(self._weight) * self.mask_d + self._weight * self.mask_o

        w_squared_norm = (w ** 2).sum(-1, keepdim=True)

        w = self._diag_weight.exp() * w / w_squared_norm.sqrt()

        wpl = self._diag_weight + self._weight - 0.5 * torch.log(w_squared_norm)

        return w.t(), wpl.t()[self.mask_d.bool().t()].view(
            self.dim, self.in_features // self.dim, self.out_features // self.dim
        )

    def forward(self, inputs, grad: torch.Tensor = None):
        w, wpl = self.get_weights()

        g = wpl.transpose(-2, -1).unsqueeze(0).repeat(inputs.shape[0], 1, 1, 1)

        return (
            inputs.matmul(w) + self.bias,
            torch.logsumexp(g.unsqueeze(-2) + grad.transpose(-2, -1).unsqueeze(-3), -1)
            if grad is not None
            else g,
        )

    def __repr__(self):
        return "MaskedWeight(in_features={}, out_features={}, dim={}, bias={})".format(
            self.in_features,
            self.out_features,
            self.dim,
            not isinstance(self.bias, int),
        )


class Tanh(torch.nn.Tanh):
    """
    Class that extends ``torch.nn.Tanh`` additionally computing the log diagonal
    blocks of the Jacobian.
    """

    def __init__(self, bug=None):
        super().__init__()
        self.bug = bug

    def forward(self, inputs, grad: torch.Tensor = None):
        if self.bug == "tanh_logdet_sign_flipped":
            g = 2 * (inputs - math.log(2) + torch.nn.functional.softplus(-2 * inputs))
        else:
            g = -2 * (inputs - math.log(2) + torch.nn.functional.softplus(-2 * inputs))
        return (
            torch.tanh(inputs),
            (g.view(grad.shape) + grad) if grad is not None else g,
        )


# ---------------------------------------------------------------------------------------- data/generate2d.py
def sample2d(data, batch_size=200, rng=None):

    rng = rng if rng is not None else np.random.RandomState()  # (port) one seeded RandomState passed in

    if data == "8gaussians":
        scale = 4.0
        centers = [
            (1, 0),
            (-1, 0),
            (0, 1),
            (0, -1),
            (1.0 / np.sqrt(2), 1.0 / np.sqrt(2)),
            (1.0 / np.sqrt(2), -1.0 / np.sqrt(2)),
            (-1.0 / np.sqrt(2), 1.0 / np.sqrt(2)),
            (-1.0 / np.sqrt(2), -1.0 / np.sqrt(2)),
        ]
        centers = [(scale * x, scale * y) for x, y in centers]

        dataset = []
        for i in range(batch_size):
            point = rng.randn(2) * 0.5
            idx = rng.randint(8)
            center = centers[idx]
            point[0] += center[0]
            point[1] += center[1]
            dataset.append(point)
        dataset = np.array(dataset, dtype="float32")
        dataset /= 1.414
        return dataset

    else:
        raise RuntimeError


# ---------------------------------------------------------------------------------------------------- toy2d.py
def create_model(args, verbose=False, bug=None):

    flows = []
    for f in range(args.flows):
        layers = []
        for _ in range(args.layers - 1):
            layers.append(MaskedWeight(2 * args.hidden_dim, 2 * args.hidden_dim, dim=2, bug=bug))
            layers.append(Tanh(bug=bug))

        flows.append(
            BNAF(
                *(
                    [MaskedWeight(2, 2 * args.hidden_dim, dim=2, bug=bug), Tanh(bug=bug)]
                    + layers
                    + [MaskedWeight(2 * args.hidden_dim, 2, dim=2, bug=bug)]
                ),
                res="gated" if f < args.flows - 1 else False
            )
        )

        if f < args.flows - 1:
            flows.append(Permutation(2, "flip"))

    model = Sequential(*flows).to(args.device)
    return model


def compute_log_p_x(model, x_mb):
    y_mb, log_diag_j_mb = model(x_mb)
    log_p_y_mb = (
        torch.distributions.Normal(torch.zeros_like(y_mb), torch.ones_like(y_mb))
        .log_prob(y_mb)
        .sum(-1)
    )
    return log_p_y_mb + log_diag_j_mb


class _Args:
    """``main``'s argparse defaults for the density2d experiment."""
    device = "cpu"  # (port) cuda:0
    dataset = "8gaussians"
    experiment = "density2d"
    learning_rate = 1e-1
    batch_dim = 200
    clip_norm = 0.1
    steps = 20000
    patience = 2000
    decay = 0.5
    flows = 1
    layers = 3
    hidden_dim = 50


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = _Args()
    data_rng = np.random.RandomState(seed)

    model = create_model(args, bug=bug)

    optimizer = torch.optim.Adam(
        model.parameters(), lr=args.learning_rate, amsgrad=True
    )

    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer,
        factor=args.decay,
        patience=args.patience,
        min_lr=5e-4,
        threshold_mode="abs",
    )

    def train_step():
        # one iteration of train_density2d's loop
        x_mb = (
            torch.from_numpy(sample2d(args.dataset, args.batch_dim, rng=data_rng))
            .float()
            .to(args.device)
        )

        loss = -compute_log_p_x(model, x_mb).mean()

        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip_norm)

        optimizer.step()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        scheduler.step(loss)
        return loss.item()

    held_out = torch.from_numpy(sample2d(args.dataset, 1000, rng=np.random.RandomState(seed + 1000))).float()

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            return float(-compute_log_p_x(model, held_out).mean())

    def loss_fn(outputs, _targets=None):
        y_mb, log_diag_j_mb = outputs
        log_p_y_mb = (
            torch.distributions.Normal(torch.zeros_like(y_mb), torch.ones_like(y_mb))
            .log_prob(y_mb)
            .sum(-1)
        )
        return -(log_p_y_mb + log_diag_j_mb).mean()

    batch = (torch.from_numpy(sample2d(args.dataset, args.batch_dim, rng=np.random.RandomState(seed + 1))).float(),)
    return Program(name="bnaf_toy2d", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sign of Tanh's log-derivative flipped: the flow is credited with log(1/(1 - tanh^2)) instead of
    # log(1 - tanh^2), so the "likelihood" rewards saturating the tanh (classic sign slip of a log-det term).
    Bug("tanh_logdet_sign_flipped", functools.partial(_build, bug="tanh_logdet_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # mask_o built as 1 - mask_d: the blocks above the diagonal are kept, the output of a dimension depends on the
    # later dimension and the log-det computed from the diagonal blocks is no longer the Jacobian's (classic
    # autoregressive mask slip).
    Bug("upper_blocks_unmasked", functools.partial(_build, bug="upper_blocks_unmasked"), "learning_ledger",
        ("DEPENDENCY",)),
    # optimizer.zero_grad() dropped from the loop: gradients accumulate over the steps (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
