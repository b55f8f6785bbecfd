# ruff: noqa: UP008, UP032, SIM101
"""VQ-VAE (van den Oord et al., 2017) as nadavbh12/VQ-VAE trains it on MNIST (``--model vqvae --dataset mnist``): a
convolutional encoder (two stride-2 convolutions, two residual blocks, batch norms) whose output vectors are replaced
by their nearest codebook atoms (``NearestEmbed``: a custom autograd ``Function`` with the straight-through gradient
to the input and an averaged gradient to the chosen atoms), a transposed-convolution decoder ending in ``tanh``;
loss ``MSE(recon, x) + vq_coef * ||sg(z_e) - e||^2 + commit_coef * ||z_e - sg(e)||^2``, Adam, StepLR per epoch.

Source: https://github.com/nadavbh12/VQ-VAE
Commit: a360e77d43ec43dd5a989f057cbf8e0843bb9b1f
Files: ``vq_vae/nearest_embed.py`` (``NearestEmbedFunc``, ``nearest_embed``, ``NearestEmbed``),
``vq_vae/auto_encoder.py`` (``ResBlock``, ``VQ_CVAE``), ``main.py`` (``main``, ``train``, ``test_net``, the mnist
defaults)
License: BSD-3-Clause (Copyright (c) 2017, nadavbh12; full text in LICENSES/nadavbh12-VQ-VAE.txt)
Domain: generative (vector-quantized autoencoder, straight-through estimator, codebook + commitment losses)

Kept as written: ``NearestEmbedFunc`` (nearest atom by L2 over the channel axis, the result permuted back,
``backward``: the output gradient passed to the input, the atoms' gradient averaged over the vectors that chose
them), ``NearestEmbed`` (``weight_sg`` detaching the codebook), ``ResBlock``, ``VQ_CVAE`` (layers, the init loop
with its no-op ``torch.fmod``, the encoder's last BN weight filled with 1/40, ``forward``: ``z_q`` from the
codebook with ``weight_sg=True``, ``emb`` from ``z_e.detach()``; ``loss_function`` with vq_coef 1, commit_coef 0.5),
``train``'s batch body (zero_grad, forward, ``model.loss_function(data, *outputs)``, backward, step),
``test_net`` (``model.eval()``, ``no_grad``, the loss averaged over batches), ``main``'s mnist path (``ToTensor``
images in [0, 1], ``default_hyperparams['mnist']``: lr 1e-4, k 10; Adam; ``StepLR(optimizer, 30, 0.5)`` stepped
per epoch). The VAE / CVAE classes of ``auto_encoder.py`` are not used by this path and are not ported.

Deviations from the original:
- MNIST (torchvision download) is not here: 320 synthetic 16x16 greyscale digits-like images made from ``seed``
  (one of 10 stroke templates, randomly shifted by up to 2 pixels, with intensity noise), 256 train, 64 test;
- sizes for 2 CPU cores: hidden 64 -> 32 channels, batch 128 -> 32; CUDA, tensorboard, image saving, checkpoints,
  the atom histogram logging and the per-interval loss printing are dropped;
- ``ctx.saved_variables`` (removed from torch) is ``ctx.saved_tensors``;
- one ``train_step`` is one batch of ``train`` (a new epoch, with ``model.train()`` and the scheduler step after
  the previous epoch's ``test_net``, when the loader runs out), returning the loss; ``eval_fn`` is ``test_net``'s
  total loss (mse + vq + commitment averaged over batches);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.autograd import Function

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIDE, N_TRAIN, N_TEST = 16, 256, 64  # (port) synthetic images


# vq_vae/nearest_embed.py
class NearestEmbedFunc(Function):
    """
    Input:
    ------
    x - (batch_size, emb_dim, *)
        Last dimensions may be arbitrary
    emb - (emb_dim, num_emb)
    """
    @staticmethod
    def forward(ctx, input, emb):
        if input.size(1) != emb.size(0):
            raise RuntimeError('invalid argument: input.size(1) ({}) must be equal to emb.size(0) ({})'.
                               format(input.size(1), emb.size(0)))

        # save sizes for backward
        ctx.batch_size = input.size(0)
        ctx.num_latents = int(np.prod(np.array(input.size()[2:])))
        ctx.emb_dim = emb.size(0)
        ctx.num_emb = emb.size(1)
        ctx.input_type = type(input)
        ctx.dims = list(range(len(input.size())))

        # expand to be broadcast-able
        x_expanded = input.unsqueeze(-1)
        num_arbitrary_dims = len(ctx.dims) - 2
        if num_arbitrary_dims:
            emb_expanded = emb.view(
                emb.shape[0], *([1] * num_arbitrary_dims), emb.shape[1])
        else:
            emb_expanded = emb

        # find nearest neighbors
        dist = torch.norm(x_expanded - emb_expanded, 2, 1)
        _, argmin = dist.min(-1)
        shifted_shape = [input.shape[0], *
                         list(input.shape[2:]), input.shape[1]]
        result = emb.t().index_select(0, argmin.view(-1)
                                      ).view(shifted_shape).permute(0, ctx.dims[-1], *ctx.dims[1:-1])

        ctx.save_for_backward(argmin)
        return result.contiguous(), argmin

    @staticmethod
    def backward(ctx, grad_output, argmin=None):
        grad_input = grad_emb = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output

        if ctx.needs_input_grad[1]:
            argmin, = ctx.saved_tensors  # (port) ctx.saved_variables
            latent_indices = torch.arange(ctx.num_emb).type_as(argmin)
            idx_choices = (argmin.view(-1, 1) ==
                           latent_indices.view(1, -1)).type_as(grad_output.data)
            n_idx_choice = idx_choices.sum(0)
            n_idx_choice[n_idx_choice == 0] = 1
            idx_avg_choices = idx_choices / n_idx_choice
            grad_output = grad_output.permute(0, *ctx.dims[2:], 1).contiguous()
            grad_output = grad_output.view(
                ctx.batch_size * ctx.num_latents, ctx.emb_dim)
            grad_emb = torch.sum(grad_output.data.view(-1, ctx.emb_dim, 1) *
                                 idx_avg_choices.view(-1, 1, ctx.num_emb), 0)
        return grad_input, grad_emb, None, None


def nearest_embed(x, emb):
    return NearestEmbedFunc().apply(x, emb)


class NearestEmbed(nn.Module):
    def __init__(self, num_embeddings, embeddings_dim):
        super(NearestEmbed, self).__init__()
        self.weight = nn.Parameter(torch.rand(embeddings_dim, num_embeddings))

    def forward(self, x, weight_sg=False):
        """Input:
        ---------
        x - (batch_size, emb_size, *)
        """
        return nearest_embed(x, self.weight.detach() if weight_sg else self.weight)


# vq_vae/auto_encoder.py
class ResBlock(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None, bn=False):
        super(ResBlock, self).__init__()

        if mid_channels is None:
            mid_channels = out_channels

        layers = [
            nn.ReLU(),
            nn.Conv2d(in_channels, mid_channels,
                      kernel_size=3, stride=1, padding=1),
            nn.ReLU(),
            nn.Conv2d(mid_channels, out_channels,
                      kernel_size=1, stride=1, padding=0)
        ]
        if bn:
            layers.insert(2, nn.BatchNorm2d(out_channels))
        self.convs = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.convs(x)


class VQ_CVAE(nn.Module):
    def __init__(self, d, k=10, bn=True, vq_coef=1, commit_coef=0.5, num_channels=3, bug=None, **kwargs):
        super(VQ_CVAE, self).__init__()

        self.bug = bug
        self.encoder = nn.Sequential(
            nn.Conv2d(num_channels, d, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(d),
            nn.ReLU(inplace=True),
            nn.Conv2d(d, d, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(d),
            nn.ReLU(inplace=True),
            ResBlock(d, d, bn=bn),
            nn.BatchNorm2d(d),
            ResBlock(d, d, bn=bn),
            nn.BatchNorm2d(d),
        )
        self.decoder = nn.Sequential(
            ResBlock(d, d),
            nn.BatchNorm2d(d),
            ResBlock(d, d),
            nn.ConvTranspose2d(d, d, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(d),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(
                d, num_channels, kernel_size=4, stride=2, padding=1),
        )
        self.d = d
        self.emb = NearestEmbed(k, d)
        self.vq_coef = vq_coef
        self.commit_coef = commit_coef
        self.mse = 0
        self.vq_loss = torch.zeros(1)
        self.commit_loss = 0

        for l in self.modules():
            if isinstance(l, nn.Linear) or isinstance(l, nn.Conv2d):
                l.weight.detach().normal_(0, 0.02)
                torch.fmod(l.weight, 0.04)
                nn.init.constant_(l.bias, 0)

        self.encoder[-1].weight.detach().fill_(1 / 40)

        self.emb.weight.detach().normal_(0, 0.02)
        torch.fmod(self.emb.weight, 0.04)

    def encode(self, x):
        return self.encoder(x)

    def decode(self, x):
        return torch.tanh(self.decoder(x))

    def forward(self, x):
        z_e = self.encode(x)
        self.f = z_e.shape[-1]
        z_q, argmin = self.emb(z_e, weight_sg=True)
        emb, _ = self.emb(z_e.detach())
        return self.decode(z_q), z_e, emb, argmin

    def loss_function(self, x, recon_x, z_e, emb, argmin):
        self.mse = F.mse_loss(recon_x, x)

        if self.bug == "codebook_commitment_swapped":
            self.vq_loss = torch.mean(torch.norm((emb.detach() - z_e)**2, 2, 1))
            self.commit_loss = torch.mean(
                torch.norm((emb - z_e.detach())**2, 2, 1))
        else:
            self.vq_loss = torch.mean(torch.norm((emb - z_e.detach())**2, 2, 1))
            self.commit_loss = torch.mean(
                torch.norm((emb.detach() - z_e)**2, 2, 1))

        return self.mse + self.vq_coef*self.vq_loss + self.commit_coef*self.commit_loss

    def latest_losses(self):
        return {'mse': self.mse, 'vq': self.vq_loss, 'commitment': self.commit_loss}


def _synthetic_digits(seed):
    """(port) (image, label) pairs: 10 random stroke templates, shifted and noised, in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    templates = []
    for _ in range(10):
        t = torch.zeros(SIDE, SIDE)
        for _ in range(3):
            r, c = torch.randint(3, SIDE - 3, (2,), generator=g).tolist()
            if torch.rand((), generator=g) < 0.5:
                t[r, 3:SIDE - 3] = 1.0
            else:
                t[3:SIDE - 3, c] = 1.0
        templates.append(t)
    items = []
    for i in range(N_TRAIN + N_TEST):
        label = i % 10
        dy, dx = torch.randint(-2, 3, (2,), generator=g).tolist()
        img = torch.roll(templates[label], (dy, dx), (0, 1)) * (0.7 + 0.3 * torch.rand(SIDE, SIDE, generator=g))
        items.append((img[None], label))
    return items[:N_TRAIN], items[N_TRAIN:]


# main.py
def _test_net(model, test_loader, bug=None):
    # test_net: the losses averaged over the batches (the logging and image saving dropped)
    if bug != "test_net_in_train_mode":
        model.eval()
    loss_dict = model.latest_losses()
    losses = {k + '_test': 0 for k, v in loss_dict.items()}
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            outputs = model(data)
            model.loss_function(data, *outputs)
            latest_losses = model.latest_losses()
            for key in latest_losses:
                losses[key + '_test'] += float(latest_losses[key])
    for key in losses:
        losses[key] /= (len(test_loader.dataset) / test_loader.batch_size)
    return losses


def _build(seed, bug=None):
    lr, k, hidden, num_channels, batch_size = 1e-4, 10, 32, 1, 32  # default_hyperparams['mnist'], sizes
    torch.manual_seed(seed)
    model = VQ_CVAE(hidden, k=k, num_channels=num_channels, bug=bug)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    scheduler = optim.lr_scheduler.StepLR(optimizer, 30, 0.5,)
    train_set, test_set = _synthetic_digits(seed)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=batch_size, shuffle=False)
    st = {"it": None}

    def train_step():
        # one batch of train(epoch, ...); the epoch loop's test_net and scheduler.step() between epochs
        data_ = next(st["it"], None) if st["it"] is not None else None
        if data_ is None:
            if st["it"] is not None:
                _test_net(model, test_loader, bug)
                scheduler.step()
            model.train()
            st["it"] = iter(train_loader)
            data_ = next(st["it"])
        data, _ = data_
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        outputs = model(data)
        loss = model.loss_function(data, *outputs)
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model_, _batch=None):
        was = model_.training
        losses = _test_net(model_, test_loader, bug)
        model_.train(was)
        return sum(losses.values())

    data0, _ = next(iter(train_loader))
    loss_fn = lambda outputs, data: model.loss_function(data, *outputs)
    return Program(name="nadavbh12vqvae_mnist", model=model, batch=(data0, data0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the stop-gradients of the two VQ terms swapped, so vq_coef weighs the encoder's commitment and
    # commit_coef the codebook's update (the mix-up of karpathy/deep-vector-quantization#2 and
    # CompVis/taming-transformers#57).
    Bug("codebook_commitment_swapped", functools.partial(_build, bug="codebook_commitment_swapped"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: test_net without model.eval(); the batch norms use (and update) the test batches' statistics.
    Bug("test_net_in_train_mode", functools.partial(_build, bug="test_net_in_train_mode"), "six_claims",
        ("EVALUATION",)),
    # classic: optimizer.zero_grad() left out of train(); gradients accumulate across batches.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
