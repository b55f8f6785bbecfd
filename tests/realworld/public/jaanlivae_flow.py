"""Jaan Altosaar's variational-autoencoder, the PyTorch script ``train_variational_autoencoder_pytorch.py`` with
``--variational flow``: a Bernoulli decoder MLP with a standard normal prior, and an approximate posterior whose
inference MLP gives a location, a softplus scale and a context ``h``, followed by ``flow_depth`` inverse
autoregressive flow blocks (a MADE with a context input, LSTM-type gated update ``sigmoid * z + (1 - sigmoid) * m``,
``-log_sigmoid(s)`` per dimension) each followed by a reversal; the loss is the negative single-sample ELBO summed
over the batch, one centered RMSprop (lr 1e-3) over both networks' parameters.

Source: https://github.com/jaanli/variational-autoencoder
Commit: 7e8c661d1d91d415c0222a96f791ee64b7ce7a23
Files: train_variational_autoencoder_pytorch.py, data.py, flow.py and masks.py (in the helper ``_jaanlivae_lib.py``)
License: MIT (Copyright (c) 2016 Jaan Altosaar; full text in LICENSES/jaanli-variational-autoencoder.txt)
Domain: generative, variational autoencoder with a normalizing-flow posterior (IAF)

Kept as written: ``Model``, ``VariationalFlow``, ``NeuralNetwork``, ``NormalLogProb``,
``BernoulliLogProb``, ``cycle``, ``evaluate``, the loop body (``model.zero_grad()``, ``variational.zero_grad()``,
the ELBO averaged over the sample dimension, ``loss = -elbo.sum(0)``, ``backward``, ``step``) and the optimizer;
``flow.py``'s ``InverseAutoregressiveFlow``, ``FlowSequential``, ``MaskedLinear``, ``MADE``, ``Reverse``;
``masks.py``'s ``create_input_order``, ``create_degrees``, ``create_masks``.

Deviations from the original:
- only the ``--variational flow`` path is copied (``VariationalMeanField`` is left out);
- sizes for 2 CPU cores: ``data_size`` 784 -> 64 (8x8 images), ``latent_size`` 128 -> 16, batch 128 -> 32,
  ``n_samples`` for the importance-sampled evaluation 1000 -> 16;
- data: binarized MNIST (downloaded to an HDF5 file by ``data.py``) is replaced by synthetic binary 8x8 images made
  from ``seed`` (ten stroke templates, shifted by up to a pixel, 3% of pixels flipped); the loaders are
  ``data.load_binary_mnist``'s ``TensorDataset`` loaders, the training one shuffled with a ``torch.Generator(seed)``;
- the script's ``__main__`` is ``_build``: the two networks are held by a small ``VAE`` module (``model`` and
  ``variational`` as attributes, its ``forward(x)`` the loop's two calls returning the per-example ELBO) so the
  Program has one model; the loop's lines themselves call ``variational`` and ``model`` as upstream;
- logging, timing, the best-state checkpoint and the final test evaluation are dropped (``eval_fn`` is
  ``evaluate``'s ELBO on the validation split);
- one ``train_step`` is one iteration of the loop and returns its loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP028

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.utils.data
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _jaanlivae_lib as flow
from _api import Bug, Program

LATENT, DATA, BATCH, N_SAMPLES = 16, 64, 32, 16


# ---- train_variational_autoencoder_pytorch.py ---------------------------------------------------------------------

class Model(nn.Module):
    """Variational autoencoder, parameterized by a generative network."""

    def __init__(self, latent_size, data_size):
        super().__init__()
        self.register_buffer("p_z_loc", torch.zeros(latent_size))
        self.register_buffer("p_z_scale", torch.ones(latent_size))
        self.log_p_z = NormalLogProb()
        self.log_p_x = BernoulliLogProb()
        self.generative_network = NeuralNetwork(
            input_size=latent_size, output_size=data_size, hidden_size=latent_size * 2
        )

    def forward(self, z, x):
        """Return log probability of model."""
        log_p_z = self.log_p_z(self.p_z_loc, self.p_z_scale, z).sum(-1, keepdim=True)
        logits = self.generative_network(z)
        # unsqueeze sample dimension
        logits, x = torch.broadcast_tensors(logits, x.unsqueeze(1))
        log_p_x = self.log_p_x(logits, x).sum(-1, keepdim=True)
        return log_p_z + log_p_x


class VariationalFlow(nn.Module):
    """Approximate posterior parameterized by a flow (https://arxiv.org/abs/1606.04934)."""

    def __init__(self, latent_size, data_size, flow_depth):
        super().__init__()
        hidden_size = latent_size * 2
        self.inference_network = NeuralNetwork(
            input_size=data_size,
            # loc, scale, and context
            output_size=latent_size * 3,
            hidden_size=hidden_size,
        )
        modules = []
        for _ in range(flow_depth):
            modules.append(
                flow.InverseAutoregressiveFlow(
                    num_input=latent_size,
                    num_hidden=hidden_size,
                    num_context=latent_size,
                )
            )
            modules.append(flow.Reverse(latent_size))
        self.q_z_flow = flow.FlowSequential(*modules)
        self.log_q_z_0 = NormalLogProb()
        self.softplus = nn.Softplus()

    def forward(self, x, n_samples=1):
        """Return sample of latent variable and log prob."""
        loc, scale_arg, h = torch.chunk(
            self.inference_network(x).unsqueeze(1), chunks=3, dim=-1
        )
        scale = self.softplus(scale_arg)
        eps = torch.randn((loc.shape[0], n_samples, loc.shape[-1]), device=loc.device)
        z_0 = loc + scale * eps  # reparameterization
        log_q_z_0 = self.log_q_z_0(loc, scale, z_0)
        z_T, log_q_z_flow = self.q_z_flow(z_0, context=h)
        log_q_z = (log_q_z_0 + log_q_z_flow).sum(-1, keepdim=True)
        return z_T, log_q_z


class NeuralNetwork(nn.Module):
    def __init__(self, input_size, output_size, hidden_size):
        super().__init__()
        modules = [
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, output_size),
        ]
        self.net = nn.Sequential(*modules)

    def forward(self, input):
        return self.net(input)


class NormalLogProb(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, loc, scale, z):
        var = torch.pow(scale, 2)
        return -0.5 * torch.log(2 * np.pi * var) - torch.pow(z - loc, 2) / (2 * var)


class BernoulliLogProb(nn.Module):
    def __init__(self):
        super().__init__()
        self.bce_with_logits = nn.BCEWithLogitsLoss(reduction="none")

    def forward(self, logits, target):
        # bernoulli log prob is equivalent to negative binary cross entropy
        return -self.bce_with_logits(logits, target)


def cycle(iterable):
    while True:
        for x in iterable:
            yield x


@torch.no_grad()
def evaluate(n_samples, model, variational, eval_data):
    model.eval()
    total_log_p_x = 0.0
    total_elbo = 0.0
    for batch in eval_data:
        x = batch[0].to(next(model.parameters()).device)
        z, log_q_z = variational(x, n_samples)
        log_p_x_and_z = model(z, x)
        # importance sampling of approximate marginal likelihood with q(z)
        # as the proposal, and logsumexp in the sample dimension
        elbo = log_p_x_and_z - log_q_z
        log_p_x = torch.logsumexp(elbo, dim=1) - np.log(n_samples)
        # average over sample dimension, sum over minibatch
        total_elbo += elbo.cpu().numpy().mean(1).sum()
        # sum over minibatch
        total_log_p_x += log_p_x.cpu().numpy().sum()
    n_data = len(eval_data.dataset)
    return total_elbo / n_data, total_log_p_x / n_data


# ---- the port: data, the two networks as one module, one loop iteration -------------------------------------------

def synthetic_binary_images(seed, n):
    """Binary 8x8 images: ten stroke templates, rolled by up to one pixel, 3% of the pixels flipped."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, 8, 8)
    for c in range(10):
        for _ in range(2):
            k, lo = int(torch.randint(1, 7, (), generator=gen)), int(torch.randint(0, 3, (), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k, lo:lo + 5] = 1.0
            else:
                templates[c, lo:lo + 5, k] = 1.0
    labels = torch.randint(0, 10, (n,), generator=gen)
    shifts = torch.randint(-1, 2, (n, 2), generator=gen)
    imgs = torch.stack([torch.roll(templates[int(c)], tuple(s.tolist()), dims=(0, 1)) for c, s in zip(labels, shifts)])
    flips = (torch.rand(imgs.shape, generator=gen) < 0.03).float()
    return (imgs + flips).remainder(2).view(n, -1)


class VAE(nn.Module):
    """(port) The script's two networks held as one module; ``forward(x)`` is the loop's per-example ELBO."""

    def __init__(self, model, variational):
        super().__init__()
        self.model = model
        self.variational = variational

    def forward(self, x):
        z, log_q_z = self.variational(x, n_samples=1)
        log_p_x_and_z = self.model(z, x)
        return (log_p_x_and_z - log_q_z).mean(1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    flow.BUG["which"] = bug
    try:
        model = Model(latent_size=LATENT, data_size=DATA)
        variational = VariationalFlow(latent_size=LATENT, data_size=DATA, flow_depth=2)
    finally:
        flow.BUG["which"] = None
    for block in variational.modules():
        if isinstance(block, flow.InverseAutoregressiveFlow):
            block.bug = bug
    params = list(model.parameters()) if bug == "optimizer_over_model_only" else (
        list(model.parameters()) + list(variational.parameters()))
    optimizer = torch.optim.RMSprop(params, lr=0.001, centered=True)

    x_train, x_val = synthetic_binary_images(seed, 640), synthetic_binary_images(seed + 1000, 64)
    train_data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train), batch_size=BATCH,
                                             shuffle=True, generator=torch.Generator().manual_seed(seed))
    valid_data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_val), batch_size=BATCH, shuffle=False)
    train_ds = cycle(train_data)
    vae = VAE(model, variational)

    def train_step():
        batch = next(train_ds)
        x = batch[0]
        model.zero_grad()
        variational.zero_grad()
        z, log_q_z = variational(x, n_samples=1)
        log_p_x_and_z = model(z, x)
        # average over sample dimension
        elbo = (log_p_x_and_z - log_q_z).mean(1)
        # sum over batch dimension
        loss = -elbo.sum(0)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(m, _batch):
        valid_elbo, _ = evaluate(N_SAMPLES, m.model, m.variational, valid_data)
        m.train()  # (port) evaluate leaves model.eval() on; the script has no dropout or norm layers
        return float(valid_elbo)

    return Program(name="jaanlivae_flow", model=vae, batch=(x_train[:BATCH], None),
                   loss_fn=lambda elbo, _: -elbo.sum(0), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_data)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the optimizer built over ``model.parameters()`` alone (the ``+ list(variational.parameters())``
    # left out): the inference network and the IAF blocks get gradients and never move.
    Bug("optimizer_over_model_only", functools.partial(_build, bug="optimizer_over_model_only"), "four_structures",
        ("variational",)),
    # classic sign slip: the IAF block returns ``log_sigmoid(s)`` instead of ``-log_sigmoid(s)``: log q(z) counts the
    # flow's volume change backwards and the "ELBO" is no longer a bound the posterior can tighten.
    Bug("iaf_log_det_sign_flipped", functools.partial(_build, bug="iaf_log_det_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: MADE's hidden->output mask built with ``<=`` instead of ``<``: each output sees its own input, the IAF
    # Jacobian is no longer triangular and ``-log_sigmoid(s)`` is not its log-determinant.
    Bug("made_output_mask_includes_diagonal", functools.partial(_build, bug="made_output_mask_includes_diagonal"),
        "learning_ledger", ("DEPENDENCY",)),
]
