# ruff: noqa: UP008, PLR0402, UP031, RUF059, RUF046
"""VAE with Householder Sylvester normalizing flows in the encoder, from riannevdberg/sylvester-flows (van den Berg,
Hasenclever, Tomczak & Welling, "Sylvester Normalizing Flows for Variational Inference", UAI 2018): gated
convolutional encoder/decoder, amortized flow parameters (triangular R1, R2 with tanh diagonals, Q a product of
Householder reflections), Bernoulli likelihood on binarized 28x28 images, ELBO with a warmed-up beta, Adamax.

Source: https://github.com/riannevdberg/sylvester-flows
Commit: 32dde9b7d696fee94f946a338182e542779eecfe
Files: ``main_experiment.py`` (README command ``-d mnist -nf 4 --flow householder --num_householder 8``),
``models/VAE.py`` (``VAE``, ``HouseholderSylvesterVAE``), ``models/flows.py`` (``Sylvester``),
``models/layers.py`` (``GatedConv2d``, ``GatedConvTranspose2d``), ``optimization/training.py`` (``train``,
``evaluate``), ``optimization/loss.py`` (``binary_loss_function``, ``calculate_loss``), ``utils/distributions.py``,
``utils/load_data.py`` (``load_static_mnist``)
License: MIT (Copyright (c) 2018 Rianne van den Berg; full text in LICENSES/riannevdberg-sylvester-flows.txt)
Domain: generative model, VAE with normalizing flows (Householder Sylvester flows, ELBO = BCE + beta * (log q(z0) -
log p(zK) - sum log|det J|))

Kept as written: the gated conv encoder and decoder of the binary input type (28x28 input, last kernel 7, softplus
variance, sigmoid means), ``reparameterize``, ``HouseholderSylvesterVAE`` (``amor_d``/``amor_diag1``/
``amor_diag2``/``amor_q``/``amor_b``, the triangular masks, the Householder products, the flows applied to z0),
``Sylvester._forward`` (the log-det from the diagonals), ``binary_loss_function`` (BCELoss summed, ``log_normal_
diag`` at ``z_var.log()``, ``log_normal_standard``, divided by the batch size), ``train``'s loop body (the warm-up
``beta = min(epoch / max(warmup, 1), max_beta)``, zero_grad, forward, ``calculate_loss``, backward, step) and
``Adamax(lr=0.0005, eps=1e-7)``, ``num_flows`` 4, ``num_householder`` 8, warmup 100, max_beta 1.

Deviations from the original:
- the static binarized MNIST files (``data/MNIST_static/*.amat``) are not here: the data are synthetic binarized
  28x28 "digits" made from ``seed`` (10 stroke templates, each shifted by up to two pixels, thickened, with a few
  flipped pixels), flattened to 784 values as the ``.amat`` rows are; ``np.random.shuffle`` of the training rows
  and the DataLoader's shuffling kept (seeded). 512 training and 64 validation images.
- sizes for 2 CPU cores: batch_size 100 -> 16, z_size 64 -> 16 (``amor_d`` alone is 256 x 4 * 64 * 64 at 64), the
  gated convolutions' 32 and 64 channels -> 8 and 16 (``C32``, ``C64``; the 256-channel last encoder layer kept).
- CUDA, the snapshot folders, plotting of reconstructions, early stopping and the final log-likelihood by
  importance sampling are dropped; ``Variable`` wrappers are plain tensors (``torch.autograd.Variable`` is the
  identity on tensors today); the print of the progress is dropped.
- ``train_step`` is one batch of ``train``'s loop (``epoch`` advances when the loader runs out) and returns the
  batch's loss; ``eval_fn`` is ``evaluate(val_loader, ...)`` (model.eval(), the average loss).
- the Program's ``batch`` is the first training batch; its ``loss_fn`` is ``calculate_loss`` on the model's
  outputs (``beta`` of the first epoch).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data_utils

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

BATCH_SIZE = 16  # (port) 100
C32, C64 = 8, 16  # (port) the gated convolutions' 32 and 64 channels
Z_SIZE = 16  # (port) 64


# ------------------------------------------------------------------------------------------ models/layers.py
class GatedConv2d(nn.Module):
    def __init__(self, input_channels, output_channels, kernel_size, stride, padding, dilation=1, activation=None):
        super(GatedConv2d, self).__init__()

        self.activation = activation
        self.sigmoid = nn.Sigmoid()

        self.h = nn.Conv2d(input_channels, output_channels, kernel_size, stride, padding, dilation)
        self.g = nn.Conv2d(input_channels, output_channels, kernel_size, stride, padding, dilation)

    def forward(self, x):
        if self.activation is None:
            h = self.h(x)
        else:
            h = self.activation(self.h(x))

        g = self.sigmoid(self.g(x))

        return h * g


class GatedConvTranspose2d(nn.Module):
    def __init__(self, input_channels, output_channels, kernel_size, stride, padding, output_padding=0, dilation=1,
                 activation=None):
        super(GatedConvTranspose2d, self).__init__()

        self.activation = activation
        self.sigmoid = nn.Sigmoid()

        self.h = nn.ConvTranspose2d(input_channels, output_channels, kernel_size, stride, padding, output_padding,
                                    dilation=dilation)
        self.g = nn.ConvTranspose2d(input_channels, output_channels, kernel_size, stride, padding, output_padding,
                                    dilation=dilation)

    def forward(self, x):
        if self.activation is None:
            h = self.h(x)
        else:
            h = self.activation(self.h(x))

        g = self.sigmoid(self.g(x))

        return h * g


# ------------------------------------------------------------------------------------------- models/flows.py
class Sylvester(nn.Module):
    """
    Sylvester normalizing flow.
    """

    def __init__(self, num_ortho_vecs):

        super(Sylvester, self).__init__()

        self.num_ortho_vecs = num_ortho_vecs

        self.h = nn.Tanh()

        triu_mask = torch.triu(torch.ones(num_ortho_vecs, num_ortho_vecs), diagonal=1).unsqueeze(0)
        diag_idx = torch.arange(0, num_ortho_vecs).long()

        self.register_buffer('triu_mask', triu_mask)
        self.triu_mask.requires_grad = False
        self.register_buffer('diag_idx', diag_idx)

    def der_h(self, x):
        return self.der_tanh(x)

    def der_tanh(self, x):
        return 1 - self.h(x) ** 2

    def _forward(self, zk, r1, r2, q_ortho, b, sum_ldj=True):
        # Amortized flow parameters
        zk = zk.unsqueeze(1)

        # Save diagonals for log_det_j
        diag_r1 = r1[:, self.diag_idx, self.diag_idx]
        diag_r2 = r2[:, self.diag_idx, self.diag_idx]

        r1_hat = r1
        r2_hat = r2

        qr2 = torch.bmm(q_ortho, r2_hat.transpose(2, 1))
        qr1 = torch.bmm(q_ortho, r1_hat)

        r2qzb = torch.bmm(zk, qr2) + b
        z = torch.bmm(self.h(r2qzb), qr1.transpose(2, 1)) + zk
        z = z.squeeze(1)

        # Compute log|det J|
        # Output log_det_j in shape (batch_size) instead of (batch_size,1)
        diag_j = diag_r1 * diag_r2
        diag_j = self.der_h(r2qzb).squeeze(1) * diag_j
        diag_j += 1.
        log_diag_j = diag_j.abs().log()

        if sum_ldj:
            log_det_j = log_diag_j.sum(-1)
        else:
            log_det_j = log_diag_j

        return z, log_det_j

    def forward(self, zk, r1, r2, q_ortho, b, sum_ldj=True):

        return self._forward(zk, r1, r2, q_ortho, b, sum_ldj)


# --------------------------------------------------------------------------------------------- models/VAE.py
class VAE(nn.Module):
    """
    The base VAE class containing gated convolutional encoder and decoder architecture.
    Can be used as a base class for VAE's with normalizing flows.
    """

    def __init__(self, args):
        super(VAE, self).__init__()

        # extract model settings from args
        self.z_size = args.z_size
        self.input_size = args.input_size
        self.input_type = args.input_type

        if self.input_size == [1, 28, 28] or self.input_size == [3, 28, 28]:
            self.last_kernel_size = 7
        elif self.input_size == [1, 28, 20]:
            self.last_kernel_size = (7, 5)
        else:
            raise ValueError('invalid input size!!')

        self.q_z_nn, self.q_z_mean, self.q_z_var = self.create_encoder()
        self.p_x_nn, self.p_x_mean = self.create_decoder()

        self.q_z_nn_output_dim = 256

        # auxiliary
        self.FloatTensor = torch.FloatTensor

        # log-det-jacobian = 0 without flows
        self.log_det_j = self.FloatTensor(1).zero_()

    def create_encoder(self):
        """
        Helper function to create the elemental blocks for the encoder. Creates a gated convnet encoder.
        the encoder expects data as input of shape (batch_size, num_channels, width, height).
        """

        if self.input_type == 'binary':
            q_z_nn = nn.Sequential(
                GatedConv2d(self.input_size[0], C32, 5, 1, 2),
                GatedConv2d(C32, C32, 5, 2, 2),
                GatedConv2d(C32, C64, 5, 1, 2),
                GatedConv2d(C64, C64, 5, 2, 2),
                GatedConv2d(C64, C64, 5, 1, 2),
                GatedConv2d(C64, 256, self.last_kernel_size, 1, 0),

            )
            q_z_mean = nn.Linear(256, self.z_size)
            q_z_var = nn.Sequential(
                nn.Linear(256, self.z_size),
                nn.Softplus(),
            )
            return q_z_nn, q_z_mean, q_z_var
        raise ValueError('(port) only the binary input type is ported')

    def create_decoder(self):
        """
        Helper function to create the elemental blocks for the decoder. Creates a gated convnet decoder.
        """

        if self.input_type == 'binary':
            p_x_nn = nn.Sequential(
                GatedConvTranspose2d(self.z_size, C64, self.last_kernel_size, 1, 0),
                GatedConvTranspose2d(C64, C64, 5, 1, 2),
                GatedConvTranspose2d(C64, C32, 5, 2, 2, 1),
                GatedConvTranspose2d(C32, C32, 5, 1, 2),
                GatedConvTranspose2d(C32, C32, 5, 2, 2, 1),
                GatedConvTranspose2d(C32, C32, 5, 1, 2)
            )

            p_x_mean = nn.Sequential(
                nn.Conv2d(C32, self.input_size[0], 1, 1, 0),
                nn.Sigmoid()
            )
            return p_x_nn, p_x_mean

        else:
            raise ValueError('invalid input type!!')

    def reparameterize(self, mu, var):
        """
        Samples z from a multivariate Gaussian with diagonal covariance matrix using the
         reparameterization trick.
        """

        std = var.sqrt()
        eps = self.FloatTensor(std.size()).normal_()
        z = eps.mul(std).add_(mu)

        return z

    def encode(self, x):
        h = self.q_z_nn(x)
        h = h.view(h.size(0), -1)
        mean = self.q_z_mean(h)
        var = self.q_z_var(h)

        return mean, var

    def decode(self, z):
        """
        Decoder outputs reconstructed image in the following shapes:
        x_mean.shape = (batch_size, num_channels, width, height)
        """

        z = z.view(z.size(0), self.z_size, 1, 1)
        h = self.p_x_nn(z)
        x_mean = self.p_x_mean(h)

        return x_mean


class HouseholderSylvesterVAE(VAE):
    """
    Variational auto-encoder with householder sylvester flows in the encoder.
    """

    def __init__(self, args, bug=None):
        super(HouseholderSylvesterVAE, self).__init__(args)
        self.bug = bug

        # Initialize log-det-jacobian to zero
        self.log_det_j = 0.

        # Flow parameters
        flow = Sylvester
        self.num_flows = args.num_flows
        self.num_householder = args.num_householder
        assert self.num_householder > 0

        identity = torch.eye(self.z_size, self.z_size)
        # Add batch dimension
        identity = identity.unsqueeze(0)
        # Put identity in buffer so that it will be moved to GPU if needed by any call of .cuda
        self.register_buffer('_eye', identity)
        self._eye.requires_grad = False

        # Masks needed for triangular r1 and r2.
        triu_mask = torch.triu(torch.ones(self.z_size, self.z_size), diagonal=1)
        triu_mask = triu_mask.unsqueeze(0).unsqueeze(3)
        diag_idx = torch.arange(0, self.z_size).long()

        self.register_buffer('triu_mask', triu_mask)
        self.triu_mask.requires_grad = False
        self.register_buffer('diag_idx', diag_idx)

        # Amortized flow parameters
        # Diagonal elements of r1 * r2 have to satisfy -1 < r1 * r2 for flow to be invertible
        self.diag_activation = nn.Tanh()

        self.amor_d = nn.Linear(self.q_z_nn_output_dim, self.num_flows * self.z_size * self.z_size)

        self.amor_diag1 = nn.Sequential(
            nn.Linear(self.q_z_nn_output_dim, self.num_flows * self.z_size),
            self.diag_activation
        )
        self.amor_diag2 = nn.Sequential(
            nn.Linear(self.q_z_nn_output_dim, self.num_flows * self.z_size),
            self.diag_activation
        )

        self.amor_q = nn.Linear(self.q_z_nn_output_dim, self.num_flows * self.z_size * self.num_householder)

        self.amor_b = nn.Linear(self.q_z_nn_output_dim, self.num_flows * self.z_size)

        # Normalizing flow layers
        for k in range(self.num_flows):
            flow_k = flow(self.z_size)

            self.add_module('flow_' + str(k), flow_k)

    def batch_construct_orthogonal(self, q):
        # Reshape to shape (num_flows * batch_size * num_householder, z_size)
        q = q.view(-1, self.z_size)

        norm = torch.norm(q, p=2, dim=1, keepdim=True)   # ||v||_2
        v = torch.div(q, norm)  # v / ||v||_2

        # Calculate Householder Matrices
        vvT = torch.bmm(v.unsqueeze(2), v.unsqueeze(1))  # v * v_T : batch_dot( B x L x 1 * B x 1 x L ) = B x L x L

        amat = self._eye - 2 * vvT  # NOTICE: v is already normalized! so there is no need to calculate vvT/vTv

        # Reshaping: first dimension is batch_size * num_flows
        amat = amat.view(-1, self.num_householder, self.z_size, self.z_size)

        tmp = amat[:, 0]
        for k in range(1, self.num_householder):
            tmp = torch.bmm(amat[:, k], tmp)

        amat = tmp.view(-1, self.num_flows, self.z_size, self.z_size)
        amat = amat.transpose(0, 1)

        return amat

    def encode(self, x):
        """
        Encoder that ouputs parameters for base distribution of z and flow parameters.
        """

        batch_size = x.size(0)

        h = self.q_z_nn(x)
        h = h.view(-1, self.q_z_nn_output_dim)
        mean_z = self.q_z_mean(h)
        var_z = self.q_z_var(h)

        # Amortized r1, r2, q, b for all flows
        full_d = self.amor_d(h)
        diag1 = self.amor_diag1(h)
        diag2 = self.amor_diag2(h)

        full_d = full_d.resize(batch_size, self.z_size, self.z_size, self.num_flows)
        diag1 = diag1.resize(batch_size, self.z_size, self.num_flows)
        diag2 = diag2.resize(batch_size, self.z_size, self.num_flows)

        r1 = full_d * self.triu_mask
        r2 = full_d.transpose(2, 1) * self.triu_mask

        r1[:, self.diag_idx, self.diag_idx, :] = diag1
        r2[:, self.diag_idx, self.diag_idx, :] = diag2

        q = self.amor_q(h)

        b = self.amor_b(h)

        # Resize flow parameters to divide over K flows
        b = b.resize(batch_size, 1, self.z_size, self.num_flows)

        return mean_z, var_z, r1, r2, q, b

    def forward(self, x):
        """
        Forward pass with orthogonal flows for the transformation z_0 -> z_1 -> ... -> z_k.
        Log determinant is computed as log_det_j = N E_q_z0[\\sum_k log |det dz_k/dz_k-1| ].
        """

        self.log_det_j = 0.

        z_mu, z_var, r1, r2, q, b = self.encode(x)

        # Orthogonalize all q matrices
        q_ortho = self.batch_construct_orthogonal(q)

        # Sample z_0
        z = [self.reparameterize(z_mu, z_var)]

        # Normalizing flows
        for k in range(self.num_flows):

            flow_k = getattr(self, 'flow_' + str(k))
            q_k = q_ortho[k]

            z_k, log_det_jacobian = flow_k(z[k], r1[:, :, :, k], r2[:, :, :, k], q_k, b[:, :, :, k], sum_ldj=True)

            z.append(z_k)
            self.log_det_j += log_det_jacobian

        if self.bug == "decoded_from_z0":
            x_mean = self.decode(z[0])
        else:
            x_mean = self.decode(z[-1])

        return x_mean, z_mu, z_var, self.log_det_j, z[0], z[-1]


# ------------------------------------------------------------------------------------ utils/distributions.py
def log_normal_diag(x, mean, log_var, average=False, reduce=True, dim=None):
    log_norm = -0.5 * (log_var + (x - mean) * (x - mean) * log_var.exp().reciprocal())
    if reduce:
        if average:
            return torch.mean(log_norm, dim)
        else:
            return torch.sum(log_norm, dim)
    else:
        return log_norm


def log_normal_standard(x, average=False, reduce=True, dim=None):
    log_norm = -0.5 * x * x

    if reduce:
        if average:
            return torch.mean(log_norm, dim)
        else:
            return torch.sum(log_norm, dim)
    else:
        return log_norm


# ---------------------------------------------------------------------------------------- optimization/loss.py
def binary_loss_function(recon_x, x, z_mu, z_var, z_0, z_k, ldj, beta=1., bug=None):
    reconstruction_function = nn.BCELoss(reduction='sum')

    batch_size = x.size(0)

    # - N E_q0 [ ln p(x|z_k) ]
    bce = reconstruction_function(recon_x, x)

    # ln p(z_k)  (not averaged)
    log_p_zk = log_normal_standard(z_k, dim=1)
    # ln q(z_0)  (not averaged)
    if bug == "var_passed_as_log_var":
        log_q_z0 = log_normal_diag(z_0, mean=z_mu, log_var=z_var, dim=1)
    else:
        log_q_z0 = log_normal_diag(z_0, mean=z_mu, log_var=z_var.log(), dim=1)
    # N E_q0[ ln q(z_0) - ln p(z_k) ]
    summed_logs = torch.sum(log_q_z0 - log_p_zk)

    # sum over batches
    summed_ldj = torch.sum(ldj)

    # ldj = N E_q_z0[\sum_k log |det dz_k/dz_k-1| ]
    if bug == "ldj_sign_flipped":
        kl = (summed_logs + summed_ldj)
    else:
        kl = (summed_logs - summed_ldj)
    loss = bce + beta * kl

    loss = loss / float(batch_size)
    bce = bce / float(batch_size)
    kl = kl / float(batch_size)

    return loss, bce, kl


def calculate_loss(x_mean, x, z_mu, z_var, z_0, z_k, ldj, args, beta=1., bug=None):
    """
    Picks the correct loss depending on the input type.
    """

    if args.input_type == 'binary':
        loss, rec, kl = binary_loss_function(x_mean, x, z_mu, z_var, z_0, z_k, ldj, beta=beta, bug=bug)
        bpd = 0.
    else:
        raise ValueError('Invalid input type for calculate loss: %s.' % args.input_type)

    return loss, rec, kl, bpd


# ------------------------------------------------------------------------------------------------ (port) data
def synthetic_binary_digits(rng, n):
    """Binarized 28x28 images: one of 10 stroke templates, shifted by up to 2 pixels, thickened, 1% pixels flipped."""
    templates = np.zeros((10, 28, 28), dtype=np.float32)
    t_rng = np.random.default_rng(1234)
    for c in range(10):
        for _ in range(3):  # three strokes per template
            r0, c0 = t_rng.integers(6, 22, size=2)
            r1, c1 = t_rng.integers(6, 22, size=2)
            for s in np.linspace(0, 1, 40):
                r, cc = int(round(r0 + s * (r1 - r0))), int(round(c0 + s * (c1 - c0)))
                templates[c, r - 1:r + 1, cc - 1:cc + 1] = 1.
    x = np.zeros((n, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=n)
    shifts = rng.integers(-2, 3, size=(n, 2))
    for i in range(n):
        x[i] = np.roll(templates[labels[i]], tuple(shifts[i]), axis=(0, 1))
    flip = rng.random(x.shape) < 0.01
    x = np.where(flip, 1. - x, x)
    return x.reshape(n, 784).astype('float32')


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    args = types.SimpleNamespace(z_size=Z_SIZE, num_flows=4, num_householder=8, learning_rate=0.0005, warmup=100,
                                 max_beta=1., batch_size=BATCH_SIZE, cuda=False)

    # load_static_mnist
    args.dynamic_binarization = False
    args.input_type = 'binary'
    args.input_size = [1, 28, 28]
    x_train = synthetic_binary_digits(rng, 512)
    x_val = synthetic_binary_digits(rng, 64)
    # shuffle train data
    np.random.shuffle(x_train)
    # idle y's
    y_train = np.zeros((x_train.shape[0], 1))
    y_val = np.zeros((x_val.shape[0], 1))
    train = data_utils.TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    train_loader = data_utils.DataLoader(train, batch_size=args.batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    validation = data_utils.TensorDataset(torch.from_numpy(x_val).float(), torch.from_numpy(y_val))
    val_loader = data_utils.DataLoader(validation, batch_size=args.batch_size, shuffle=False)

    model = HouseholderSylvesterVAE(args, bug=bug)
    optimizer = optim.Adamax(model.parameters(), lr=args.learning_rate, eps=1.e-7)

    st = {"epoch": 1, "it": None}

    def train_step():
        # one batch of train(epoch, train_loader, model, opt, args)
        if st["it"] is None:
            model.train()
            st["it"] = iter(train_loader)
        try:
            data, _ = next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            model.train()
            st["it"] = iter(train_loader)
            data, _ = next(st["it"])
        epoch = st["epoch"]
        # set warmup coefficient
        beta = min([(epoch * 1.) / max([args.warmup, 1.]), args.max_beta])

        if args.dynamic_binarization:
            data = torch.bernoulli(data)

        data = data.view(-1, *args.input_size)

        if bug != "no_zero_grad":
            optimizer.zero_grad()
        x_mean, z_mu, z_var, ldj, z0, zk = model(data)

        loss, rec, kl, bpd = calculate_loss(x_mean, data, z_mu, z_var, z0, zk, ldj, args, beta=beta, bug=bug)

        loss.backward()

        optimizer.step()
        return loss.item()

    def evaluate(model, _batch=None):
        model.eval()
        loss = 0.
        with torch.no_grad():
            for data, _ in val_loader:
                data = data.view(-1, *args.input_size)
                x_mean, z_mu, z_var, ldj, z0, zk = model(data)
                batch_loss, rec, kl, batch_bpd = calculate_loss(x_mean, data, z_mu, z_var, z0, zk, ldj, args,
                                                                bug=bug)
                loss += batch_loss.item()
        loss /= len(val_loader)
        model.train()
        return loss

    def loss_fn(out, data):
        x_mean, z_mu, z_var, ldj, z0, zk = out
        beta = min([(st["epoch"] * 1.) / max([args.warmup, 1.]), args.max_beta])
        return calculate_loss(x_mean, data, z_mu, z_var, z0, zk, ldj, args, beta=beta, bug=bug)[0]

    first = torch.from_numpy(x_train[:BATCH_SIZE]).view(-1, *args.input_size)
    return Program(name="sylvesterflows_householder_vae", model=model, batch=(first, first), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the flows' log-det-Jacobian added to the KL instead of subtracted.
    Bug("ldj_sign_flipped", functools.partial(_build, bug="ldj_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the softplus variance handed to log_normal_diag as the log-variance (``z_var`` for ``z_var.log()``).
    Bug("var_passed_as_log_var", functools.partial(_build, bug="var_passed_as_log_var"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the decoder reads z[0], so the flows never reach the reconstruction.
    Bug("decoded_from_z0", functools.partial(_build, bug="decoded_from_z0"), "learning_ledger", ("DEPENDENCY",)),
]
