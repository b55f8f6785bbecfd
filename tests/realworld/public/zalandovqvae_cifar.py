"""VQ-VAE with an EMA codebook trained by the repository's notebook on CIFAR-10: a strided-conv encoder with a
residual stack, a 1x1 pre-quantization conv, ``VectorQuantizerEMA`` (nearest code by squared distance, one-hot
encodings, EMA cluster sizes with Laplace smoothing, EMA codebook reassigned as a fresh ``nn.Parameter`` each
training forward, commitment loss 0.25, straight-through estimator), a transposed-conv decoder, loss
``mse(recon, data) / data_variance + vq_loss``, Adam lr 1e-3, one freshly drawn batch per update
(``next(iter(training_loader))``).

Source: https://github.com/zalandoresearch/pytorch-vq-vae
Commit: b98fde9a8f8f65486dbfaf12958049e8d33184a1
Files: vq-vae.ipynb
License: MIT (Copyright (c) 2018 Zalando Research)
Domain: generative, vector-quantized autoencoder (VQ-VAE, EMA codebook)

Deviations from the original:
- sizes: batch_size 256 -> 16, num_hiddens 128 -> 16, num_residual_hiddens 32 -> 8, embedding_dim 64 -> 8,
  num_embeddings 512 -> 32, images 32x32 -> 16x16 (latents 8x8 -> 4x4); commitment_cost, decay, learning_rate
  and num_residual_layers unchanged;
- data: CIFAR-10 (a torchvision download) is replaced by synthetic 16x16 RGB uint8 images made from ``seed``
  (smooth colour gradients with one or two coloured rectangles), held as ``training_data.data`` the way the
  notebook reads it for ``data_variance``; ``ToTensor`` + ``Normalize((0.5,)*3, (1.0,)*3)`` are written out in
  torch; the labels are dummies as in the notebook's unused ``_``;
- ``.to(device)``, ``pin_memory``, printing, plots, umap and ``make_grid`` are dropped; ``xrange`` is ``range``;
- one ``train_step`` is one iteration of the training loop; ``eval_fn`` is the notebook's validation
  reconstruction (encoder, pre-VQ conv, quantizer, decoder in eval mode) on a given batch, scored by MSE.
"""
# ruff: noqa: UP008, PLR0402  (the original's code is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMAGE_HW = 16


# ---- vq-vae.ipynb -----------------------------------------------------------------------------------------------

class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost, decay, epsilon=1e-5, bug=None):
        super(VectorQuantizerEMA, self).__init__()

        self._embedding_dim = embedding_dim
        self._num_embeddings = num_embeddings

        self._embedding = nn.Embedding(self._num_embeddings, self._embedding_dim)
        self._embedding.weight.data.normal_()
        self._commitment_cost = commitment_cost

        self.register_buffer('_ema_cluster_size', torch.zeros(num_embeddings))
        self._ema_w = nn.Parameter(torch.Tensor(num_embeddings, self._embedding_dim))
        self._ema_w.data.normal_()

        self._decay = decay
        self._epsilon = epsilon
        self._bug = bug

    def forward(self, inputs):
        # convert inputs from BCHW -> BHWC
        if self._bug == "bchw_viewed_not_permuted":
            # a view to the BHWC shape instead of a permute: each "vector" mixes channels and positions
            inputs = inputs.contiguous().view(inputs.shape[0], inputs.shape[2], inputs.shape[3], inputs.shape[1])
        else:
            inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape

        # Flatten input
        flat_input = inputs.view(-1, self._embedding_dim)

        # Calculate distances
        distances = (torch.sum(flat_input**2, dim=1, keepdim=True)
                    + torch.sum(self._embedding.weight**2, dim=1)
                    - 2 * torch.matmul(flat_input, self._embedding.weight.t()))

        # Encoding
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings, device=inputs.device)
        encodings.scatter_(1, encoding_indices, 1)

        # Quantize and unflatten
        quantized = torch.matmul(encodings, self._embedding.weight).view(input_shape)

        # Use EMA to update the embedding vectors
        if self.training:
            self._ema_cluster_size = self._ema_cluster_size * self._decay + \
                                     (1 - self._decay) * torch.sum(encodings, 0)

            # Laplace smoothing of the cluster size
            n = torch.sum(self._ema_cluster_size.data)
            self._ema_cluster_size = (
                (self._ema_cluster_size + self._epsilon)
                / (n + self._num_embeddings * self._epsilon) * n)

            dw = torch.matmul(encodings.t(), flat_input)
            self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)

            self._embedding.weight = nn.Parameter(self._ema_w / self._ema_cluster_size.unsqueeze(1))

        # Loss
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        loss = self._commitment_cost * e_latent_loss

        # Straight Through Estimator
        if self._bug == "straight_through_reversed":
            # the two terms swapped: the forward value is the unquantized input and the reconstruction's gradient
            # goes to the (EMA-replaced) codebook copy instead of the encoder
            quantized = quantized + (inputs - quantized).detach()
        else:
            quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))

        # convert quantized from BHWC -> BCHW
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encodings


class Residual(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_hiddens):
        super(Residual, self).__init__()
        self._block = nn.Sequential(
            nn.ReLU(True),
            nn.Conv2d(in_channels=in_channels,
                      out_channels=num_residual_hiddens,
                      kernel_size=3, stride=1, padding=1, bias=False),
            nn.ReLU(True),
            nn.Conv2d(in_channels=num_residual_hiddens,
                      out_channels=num_hiddens,
                      kernel_size=1, stride=1, bias=False)
        )

    def forward(self, x):
        return x + self._block(x)


class ResidualStack(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_layers, num_residual_hiddens):
        super(ResidualStack, self).__init__()
        self._num_residual_layers = num_residual_layers
        self._layers = nn.ModuleList([Residual(in_channels, num_hiddens, num_residual_hiddens)
                             for _ in range(self._num_residual_layers)])

    def forward(self, x):
        for i in range(self._num_residual_layers):
            x = self._layers[i](x)
        return F.relu(x)


class Encoder(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_layers, num_residual_hiddens):
        super(Encoder, self).__init__()

        self._conv_1 = nn.Conv2d(in_channels=in_channels,
                                 out_channels=num_hiddens//2,
                                 kernel_size=4,
                                 stride=2, padding=1)
        self._conv_2 = nn.Conv2d(in_channels=num_hiddens//2,
                                 out_channels=num_hiddens,
                                 kernel_size=4,
                                 stride=2, padding=1)
        self._conv_3 = nn.Conv2d(in_channels=num_hiddens,
                                 out_channels=num_hiddens,
                                 kernel_size=3,
                                 stride=1, padding=1)
        self._residual_stack = ResidualStack(in_channels=num_hiddens,
                                             num_hiddens=num_hiddens,
                                             num_residual_layers=num_residual_layers,
                                             num_residual_hiddens=num_residual_hiddens)

    def forward(self, inputs):
        x = self._conv_1(inputs)
        x = F.relu(x)

        x = self._conv_2(x)
        x = F.relu(x)

        x = self._conv_3(x)
        return self._residual_stack(x)


class Decoder(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_layers, num_residual_hiddens):
        super(Decoder, self).__init__()

        self._conv_1 = nn.Conv2d(in_channels=in_channels,
                                 out_channels=num_hiddens,
                                 kernel_size=3,
                                 stride=1, padding=1)

        self._residual_stack = ResidualStack(in_channels=num_hiddens,
                                             num_hiddens=num_hiddens,
                                             num_residual_layers=num_residual_layers,
                                             num_residual_hiddens=num_residual_hiddens)

        self._conv_trans_1 = nn.ConvTranspose2d(in_channels=num_hiddens,
                                                out_channels=num_hiddens//2,
                                                kernel_size=4,
                                                stride=2, padding=1)

        self._conv_trans_2 = nn.ConvTranspose2d(in_channels=num_hiddens//2,
                                                out_channels=3,
                                                kernel_size=4,
                                                stride=2, padding=1)

    def forward(self, inputs):
        x = self._conv_1(inputs)

        x = self._residual_stack(x)

        x = self._conv_trans_1(x)
        x = F.relu(x)

        return self._conv_trans_2(x)


batch_size = 16
num_training_updates = 15000

num_hiddens = 16
num_residual_hiddens = 8
num_residual_layers = 2

embedding_dim = 8
num_embeddings = 32

commitment_cost = 0.25

decay = 0.99

learning_rate = 1e-3


class Model(nn.Module):
    def __init__(self, num_hiddens, num_residual_layers, num_residual_hiddens,
                 num_embeddings, embedding_dim, commitment_cost, decay=0, bug=None):
        super(Model, self).__init__()

        self._encoder = Encoder(3, num_hiddens,
                                num_residual_layers,
                                num_residual_hiddens)
        self._pre_vq_conv = nn.Conv2d(in_channels=num_hiddens,
                                      out_channels=embedding_dim,
                                      kernel_size=1,
                                      stride=1)
        self._vq_vae = VectorQuantizerEMA(num_embeddings, embedding_dim,
                                          commitment_cost, decay, bug=bug)
        self._decoder = Decoder(embedding_dim,
                                num_hiddens,
                                num_residual_layers,
                                num_residual_hiddens)

    def forward(self, x):
        z = self._encoder(x)
        z = self._pre_vq_conv(z)
        loss, quantized, perplexity, _ = self._vq_vae(z)
        x_recon = self._decoder(quantized)

        return loss, x_recon, perplexity


# ---- synthetic stand-in for datasets.CIFAR10 ----------------------------------------------------------------------

class SyntheticCIFAR(torch.utils.data.Dataset):
    def __init__(self, rng, n):
        yy, xx = np.mgrid[0:IMAGE_HW, 0:IMAGE_HW] / (IMAGE_HW - 1)
        data = []
        for _ in range(n):
            a, b = rng.uniform(0, 255, size=(2, 3))
            t = xx if rng.random() < 0.5 else yy
            img = a * (1 - t[..., None]) + b * t[..., None]
            for _ in range(rng.integers(1, 3)):
                y0, x0 = rng.integers(0, IMAGE_HW - 5, size=2)
                h, w = rng.integers(3, 7, size=2)
                img[y0:y0 + h, x0:x0 + w] = rng.uniform(0, 255, size=3)
            data.append(np.clip(img, 0, 255).astype(np.uint8))
        self.data = np.stack(data)  # [N, H, W, 3] uint8, as CIFAR10.data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        x = torch.from_numpy(self.data[i]).permute(2, 0, 1).float() / 255.0  # ToTensor
        x = (x - 0.5) / 1.0  # Normalize((0.5,0.5,0.5), (1.0,1.0,1.0))
        return x, 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    training_data = SyntheticCIFAR(rng, 256)
    validation_data = SyntheticCIFAR(rng, 64)
    data_variance = np.var(training_data.data / 255.0)

    gen = torch.Generator().manual_seed(seed)
    training_loader = DataLoader(training_data,
                                 batch_size=batch_size,
                                 shuffle=True,
                                 generator=gen)
    validation_loader = DataLoader(validation_data,
                                   batch_size=32,
                                   shuffle=True,
                                   generator=gen)

    model = Model(num_hiddens, num_residual_layers, num_residual_hiddens,
                  num_embeddings, embedding_dim,
                  commitment_cost, decay, bug=bug)

    optimizer = optim.Adam(model.parameters(), lr=learning_rate, amsgrad=False)

    model.train()
    train_res_recon_error = []
    train_res_perplexity = []

    def train_step():
        (data, _) = next(iter(training_loader))
        if bug != "zero_grad_between_backward_and_step":
            optimizer.zero_grad()

        vq_loss, data_recon, perplexity = model(data)
        recon_error = F.mse_loss(data_recon, data) / data_variance
        loss = recon_error + vq_loss
        loss.backward()
        if bug == "zero_grad_between_backward_and_step":
            # the zero_grad moved down to just before the step: every update is taken on zeroed gradients
            optimizer.zero_grad()

        optimizer.step()

        train_res_recon_error.append(recon_error.item())
        train_res_perplexity.append(perplexity.item())
        return loss.detach()

    def loss_fn(outputs, data):
        vq_loss, data_recon, _perplexity = outputs
        return F.mse_loss(data_recon, data) / data_variance + vq_loss

    def eval_fn(model, batch):
        model.eval()
        valid_originals = batch[0]
        with torch.no_grad():
            vq_output_eval = model._pre_vq_conv(model._encoder(valid_originals))
            _, valid_quantize, _, _ = model._vq_vae(vq_output_eval)
            valid_reconstructions = model._decoder(valid_quantize)
        model.train()
        return {'recon_mse': float(F.mse_loss(valid_reconstructions, valid_originals))}

    (first, _) = next(iter(validation_loader))
    return Program(name="zalandovqvae_cifar", model=model, batch=(first, first), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=training_loader)


build = functools.partial(_build)

BUGS = [
    # classic layout slip: BCHW -> BHWC done with view instead of permute before flattening into code vectors
    Bug("bchw_viewed_not_permuted", functools.partial(_build, bug="bchw_viewed_not_permuted"), "tensor_trace",
        ("_vq_vae",)),
    # classic: the straight-through estimator written the wrong way round (quantized + (inputs - quantized).detach()):
    # the decoder sees unquantized latents and the encoder gets no reconstruction gradient
    Bug("straight_through_reversed", functools.partial(_build, bug="straight_through_reversed"), "learning_ledger",
        ("GRADIENT",)),
    # classic whole-model step slip: zero_grad between backward and step
    Bug("zero_grad_between_backward_and_step", functools.partial(_build, bug="zero_grad_between_backward_and_step"),
        "step_probe", (), kind="step.zero_grad_before_step"),
]
