# ruff: noqa: UP008, PLR0402, C408, RUF059, PLR1730
"""VAE with a VampPrior from jmtomczak/vae_vampprior (``experiment.py`` defaults: ``--model_name vae --prior
vampprior``, dynamically binarized MNIST): an MLP encoder and decoder of gated dense layers (``GatedDense``), a
Hardtanh-bounded posterior log-variance, a Bernoulli decoder, and the VampPrior ``p(z) = 1/K sum_k q(z | u_k)``
whose K pseudo-inputs ``u_k`` are a learned ``NonLinear`` layer (Hardtanh(0, 1)) applied to an identity "idle
input"; the loss is ``-RE + beta * KL`` with the single-sample KL ``-(log p(z) - log q(z | x))`` (log-sum-exp over
the components), ``beta`` warmed up linearly over the first epochs, optimized with the repository's
``AdamNormGrad`` (Adam on each parameter's gradient divided by its L2 norm), lr 5e-4, He init.

Source: https://github.com/jmtomczak/vae_vampprior
Commit: bb6ff3e58036adbea448e82d7bc55593d605b52c
Files: ``experiment.py`` (defaults, ``run``), ``models/VAE.py`` (``VAE``), ``models/Model.py`` (``Model``),
``utils/nn.py`` (``he_init``, ``normal_init``, ``NonLinear``, ``GatedDense``), ``utils/distributions.py``
(``log_Normal_diag``, ``log_Bernoulli``), ``utils/optimizer.py`` (``AdamNormGrad``), ``utils/training.py``
(``train_vae``), ``utils/load_data.py`` (``load_dynamic_mnist``: the binarization, the pseudo-input init)
License: MIT (Copyright (c) 2018 Jakub Tomczak; full text in LICENSES/jmtomczak-vae_vampprior.txt)
Domain: generative (VAE with a learned mixture prior: VampPrior pseudo-inputs, KL warm-up)

Kept as written: ``VAE.__init__`` (the binary branch), ``calculate_loss``, ``q_z``, ``p_x``, ``log_p_z`` (the
VampPrior branch, its max-shifted log-sum-exp), ``forward``; ``Model.add_pseudoinputs`` and ``reparameterize``;
``GatedDense``, ``NonLinear``, ``he_init``, ``normal_init``, ``log_Normal_diag``, ``log_Bernoulli``;
``AdamNormGrad.step`` (with its deprecated positional ``add_``/``addcmul_``/``addcdiv_`` calls, which still run);
``train_vae``'s beta warm-up (``epoch / warmup``, capped at 1) and loop body (``torch.bernoulli`` dynamic
binarization, zero_grad, ``calculate_loss(x, beta, average=True)``, backward, step); ``load_dynamic_mnist``'s
pseudo-input init (mean 0.05, std 0.01) and its test set binarized once.

Deviations from the original:
- MNIST (torchvision download) is not here: the images are synthetic, made from ``seed``: 8x8 grey images, each
  one of six random smoothed glyphs with per-image noise, in [0.05, 0.95]; 1024 training and 256 test images;
  ``input_size`` [1, 28, 28] -> [1, 8, 8];
- sizes for 2 CPU cores: the 300 hidden units -> 64, ``z1_size`` 40 -> 8, ``number_components`` 500 -> 32,
  ``batch_size`` 100 -> 32;
- ``Variable`` wrappers are dropped (no-ops) and ``torch.FloatTensor(size).normal_()`` is drawn with ``torch.randn``
  (the same draw on CPU); ``calculate_likelihood``, ``calculate_lower_bound``, ``generate_x``, the standard-prior
  and gray-input branches, validation, early stopping, plots and snapshots are left out;
- ``train_step`` is one iteration of ``train_vae``'s loop (the epoch, hence beta, advancing when the loader is
  exhausted), returning the loss; ``eval_fn`` is the averaged loss (beta 1) on the test images;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data_utils
from torch.nn import Linear
from torch.optim import Optimizer

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST = 1024, 256
HIDDEN = 64  # (port) 300

# utils/distributions.py
min_epsilon = 1e-5
max_epsilon = 1.-1e-5

def log_Normal_diag(x, mean, log_var, average=False, dim=None):
    log_normal = -0.5 * ( log_var + torch.pow( x - mean, 2 ) / torch.exp( log_var ) )
    if average:
        return torch.mean( log_normal, dim )
    else:
        return torch.sum( log_normal, dim )

def log_Bernoulli(x, mean, average=False, dim=None):
    probs = torch.clamp( mean, min=min_epsilon, max=max_epsilon )
    log_bernoulli = x * torch.log( probs ) + (1. - x ) * torch.log( 1. - probs )
    if average:
        return torch.mean( log_bernoulli, dim )
    else:
        return torch.sum( log_bernoulli, dim )


# utils/nn.py
def he_init(m):
    s =  np.sqrt( 2. / m.in_features )
    m.weight.data.normal_(0, s)

def normal_init(m, mean=0., std=0.01):
    m.weight.data.normal_(mean, std)

class NonLinear(nn.Module):
    def __init__(self, input_size, output_size, bias=True, activation=None):
        super(NonLinear, self).__init__()
        self.activation = activation
        self.linear = nn.Linear(int(input_size), int(output_size), bias=bias)

    def forward(self, x):
        h = self.linear(x)
        if self.activation is not None:
            h = self.activation( h )
        return h

class GatedDense(nn.Module):
    def __init__(self, input_size, output_size, activation=None):
        super(GatedDense, self).__init__()
        self.activation = activation
        self.sigmoid = nn.Sigmoid()
        self.h = nn.Linear(input_size, output_size)
        self.g = nn.Linear(input_size, output_size)

    def forward(self, x):
        h = self.h(x)
        if self.activation is not None:
            h = self.activation( self.h( x ) )
        g = self.sigmoid( self.g( x ) )
        return h * g


# utils/optimizer.py
class AdamNormGrad(Optimizer):
    """Implements Adam algorithm (on gradients normalized by their L2 norm)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0):
        defaults = dict(lr=lr, betas=betas, eps=eps,
                        weight_decay=weight_decay)
        super(AdamNormGrad, self).__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                #############################################
                # normalize grdients
                grad = grad / ( torch.norm(grad,2) + 1.e-7 )
                #############################################
                state = self.state[p]
                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = grad.new().resize_as_(grad).zero_()
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = grad.new().resize_as_(grad).zero_()
                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['betas']
                state['step'] += 1
                if group['weight_decay'] != 0:
                    grad = grad.add(group['weight_decay'], p.data)
                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)
                denom = exp_avg_sq.sqrt().add_(group['eps'])
                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']
                step_size = group['lr'] * math.sqrt(bias_correction2) / bias_correction1
                p.data.addcdiv_(-step_size, exp_avg, denom)
        return loss


# models/Model.py
class Model(nn.Module):
    def __init__(self, args):
        super(Model, self).__init__()
        self.args = args

    # AUXILIARY METHODS
    def add_pseudoinputs(self):
        nonlinearity = nn.Hardtanh(min_val=0.0, max_val=1.0)
        self.means = NonLinear(self.args.number_components, np.prod(self.args.input_size), bias=False, activation=nonlinearity)
        # init pseudo-inputs
        if self.args.use_training_data_init:
            self.means.linear.weight.data = self.args.pseudoinputs_mean
        else:
            normal_init(self.means.linear, self.args.pseudoinputs_mean, self.args.pseudoinputs_std)
        # create an idle input for calling pseudo-inputs
        self.idle_input = torch.eye(self.args.number_components, self.args.number_components)

    def reparameterize(self, mu, logvar):
        std = logvar.mul(0.5).exp_()
        eps = torch.randn(std.size())  # (port) torch.FloatTensor(std.size()).normal_()
        return eps.mul(std).add_(mu)


# models/VAE.py
class VAE(Model):
    def __init__(self, args):
        super(VAE, self).__init__(args)
        # encoder: q(z | x)
        self.q_z_layers = nn.Sequential(
            GatedDense(np.prod(self.args.input_size), HIDDEN),
            GatedDense(HIDDEN, HIDDEN)
        )
        self.q_z_mean = Linear(HIDDEN, self.args.z1_size)
        self.q_z_logvar = NonLinear(HIDDEN, self.args.z1_size, activation=nn.Hardtanh(min_val=-6.,max_val=2.))
        # decoder: p(x | z)
        self.p_x_layers = nn.Sequential(
            GatedDense(self.args.z1_size, HIDDEN),
            GatedDense(HIDDEN, HIDDEN)
        )
        self.p_x_mean = NonLinear(HIDDEN, np.prod(self.args.input_size), activation=nn.Sigmoid())
        # weights initialization
        for m in self.modules():
            if isinstance(m, nn.Linear):
                he_init(m)
        # add pseudo-inputs if VampPrior
        if self.args.prior == 'vampprior':
            self.add_pseudoinputs()

    # AUXILIARY METHODS
    def calculate_loss(self, x, beta=1., average=False):
        # pass through VAE
        x_mean, x_logvar, z_q, z_q_mean, z_q_logvar = self.forward(x)
        # RE
        RE = log_Bernoulli(x, x_mean, dim=1)
        # KL
        log_p_z = self.log_p_z(z_q)
        log_q_z = log_Normal_diag(z_q, z_q_mean, z_q_logvar, dim=1)
        if self.args.bug == "kl_sign_flipped":
            KL = log_p_z - log_q_z
        else:
            KL = -(log_p_z - log_q_z)
        loss = - RE + beta * KL
        if average:
            loss = torch.mean(loss)
            RE = torch.mean(RE)
            KL = torch.mean(KL)
        return loss, RE, KL

    # THE MODEL: VARIATIONAL POSTERIOR
    def q_z(self, x):
        x = self.q_z_layers(x)
        z_q_mean = self.q_z_mean(x)
        z_q_logvar = self.q_z_logvar(x)
        return z_q_mean, z_q_logvar

    # THE MODEL: GENERATIVE DISTRIBUTION
    def p_x(self, z):
        z = self.p_x_layers(z)
        x_mean = self.p_x_mean(z)
        x_logvar = 0.
        return x_mean, x_logvar

    # the prior
    def log_p_z(self, z):
        # z - MB x M
        C = self.args.number_components
        # calculate params
        X = self.means(self.idle_input)
        if self.args.bug == "pseudo_inputs_detached":
            X = X.detach()
        # calculate params for given data
        z_p_mean, z_p_logvar = self.q_z(X)  # C x M
        # expand z
        z_expand = z.unsqueeze(1)
        means = z_p_mean.unsqueeze(0)
        logvars = z_p_logvar.unsqueeze(0)
        a = log_Normal_diag(z_expand, means, logvars, dim=2) - math.log(C)  # MB x C
        a_max, _ = torch.max(a, 1)  # MB x 1
        # calculte log-sum-exp
        if self.args.bug == "logsumexp_max_not_added_back":
            return torch.log(torch.sum(torch.exp(a - a_max.unsqueeze(1)), 1))
        log_prior = a_max + torch.log(torch.sum(torch.exp(a - a_max.unsqueeze(1)), 1))  # MB x 1
        return log_prior

    # THE MODEL: FORWARD PASS
    def forward(self, x):
        # z ~ q(z | x)
        z_q_mean, z_q_logvar = self.q_z(x)
        z_q = self.reparameterize(z_q_mean, z_q_logvar)
        # x_mean = p(x|z)
        x_mean, x_logvar = self.p_x(z_q)
        return x_mean, x_logvar, z_q, z_q_mean, z_q_logvar


def _images(gen, n, glyphs):
    """(port) Synthetic grey 8x8 images: one of the glyphs, with per-image noise, in [0.05, 0.95]."""
    k = torch.randint(len(glyphs), (n,), generator=gen)
    x = glyphs[k] + 0.15 * torch.randn(n, 64, generator=gen)
    return x.clamp(0.05, 0.95)


def _build(seed, bug=None):
    args = types.SimpleNamespace(batch_size=32, test_batch_size=100, epochs=2000, lr=0.0005, warmup=100, cuda=False,
                                 seed=seed, z1_size=8, input_size=[1, 8, 8], number_components=32,
                                 pseudoinputs_mean=0.05, pseudoinputs_std=0.01, use_training_data_init=False,
                                 model_name='vae', prior='vampprior', input_type='binary',
                                 dataset_name='dynamic_mnist', dynamic_binarization=True, bug=bug)  # (port) sizes
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(seed)
    glyphs = F.avg_pool2d(torch.rand(6, 1, 10, 10, generator=gen), 3, 1).flatten(1)
    glyphs = (glyphs > glyphs.median(1, keepdim=True).values).float() * 0.9 + 0.05
    x_train, x_test = _images(gen, N_TRAIN, glyphs), _images(gen, N_TEST, glyphs)
    x_test = torch.bernoulli(x_test, generator=gen)  # (port) np.random.binomial(1, x_test) with seed 777
    train = data_utils.TensorDataset(x_train, torch.zeros(N_TRAIN, dtype=torch.long))
    train_loader = data_utils.DataLoader(train, batch_size=args.batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))

    model = VAE(args)
    optimizer = AdamNormGrad(model.parameters(), lr=args.lr)
    model.train()
    st = {"stream": None, "epoch": 0}

    def train_step():
        try:
            batch_idx, (data, target) = next(st["stream"])
        except (StopIteration, TypeError):
            st["epoch"] += 1
            st["stream"] = enumerate(train_loader)
            batch_idx, (data, target) = next(st["stream"])
        epoch = st["epoch"]
        if args.warmup == 0:
            beta = 1.
        else:
            beta = 1.* epoch / args.warmup
            if beta > 1.:
                beta = 1.
        # dynamic binarization
        if args.dynamic_binarization:
            x = torch.bernoulli(data)
        else:
            x = data
        # reset gradients
        optimizer.zero_grad()
        # loss evaluation (forward pass)
        loss, RE, KL = model.calculate_loss(x, beta, average=True)
        # backward pass
        loss.backward()
        # optimization
        optimizer.step()
        return loss.item()

    def loss_fn(_output, x):
        return model.calculate_loss(x, 1., average=True)[0]

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            return float(model.calculate_loss(x_test, 1., average=True)[0])

    batch = (x_test[:32], x_test[:32])
    return Program(name="vampprior_vae", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: KL written log p(z) - log q(z | x), so the loss rewards moving the posterior samples away
    # from the VampPrior (and the pseudo-inputs away from the data).
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the pseudo-inputs detached before they are encoded, so the prior's components never learn
    # (``means.linear.weight`` gets no gradient and stays at its 0.05 init).
    Bug("pseudo_inputs_detached", functools.partial(_build, bug="pseudo_inputs_detached"), "reachability",
        ("means",)),
    # classic log-sum-exp slip: the shift ``a_max`` subtracted inside the exp and not added back, so log p(z) is
    # off by a per-example term that carries the prior's whole dependence on z.
    Bug("logsumexp_max_not_added_back", functools.partial(_build, bug="logsumexp_max_not_added_back"),
        "learning_ledger", ("OBJECTIVE",)),
]
