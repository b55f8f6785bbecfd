"""VQ-VAE-2 stage 1 (the hierarchical VQ-VAE) trained as the repository's README runs it (``python train_vqvae.py
[DATASET PATH]``, no ``--sched``): bottom and top encoders, two EMA-codebook quantizers with the straight-through
estimator, the top decoder feeding the bottom quantizer, a decoder over both codes; ``MSELoss`` reconstruction plus
``0.25 *`` the latent (commitment) loss, Adam lr 3e-4, ``model.zero_grad()`` per batch; every 100 batches the
model is put in eval mode for a sample and back in train mode.

Source: https://github.com/rosinality/vq-vae-2-pytorch
Commit: ef5f67c46f93624163776caec9e0d95063910eca
Files: train_vqvae.py, vqvae.py, distributed/distributed.py, README.md
License: MIT (Copyright (c) 2019 Kim Seonghyeon; LICENSES/rosinality-vq-vae-2-pytorch.txt); ``Quantize`` carries
  the Sonnet authors' Apache-2.0 header (kept below)
Domain: generative, vector-quantized autoencoder (VQ-VAE-2: hierarchical codes, EMA codebooks, straight-through)

Deviations from the original:
- sizes: image 256 -> 16, channel 128 -> 16, n_res_block 2 -> 1, n_res_channel 32 -> 8, embed_dim 64 -> 8,
  n_embed 512 -> 32; batch 128 -> 8 (``128 // n_gpu``); lr, latent_loss_weight, decay unchanged;
- ``distributed``: one process; ``all_reduce`` / ``all_gather`` / ``is_primary`` are written out as their
  world-size-1 paths (return the input / ``[data]`` / True); DDP, ``dist.launch`` and the sampler are left out;
- no GPU (``device = "cuda"`` -> cpu); tqdm, the progress description, ``utils.save_image`` of the sample (the
  sample's forward in eval mode under ``no_grad`` is kept) and the checkpoint saving are left out;
- data: ``datasets.ImageFolder`` of FFHQ is replaced by synthetic 16x16 RGB images made from ``seed`` (a smooth
  background gradient plus one to two coloured squares), already in [0, 1]; ``Resize``/``CenterCrop`` are the
  identity at this size, ``ToTensor`` + ``Normalize([0.5]*3, [0.5]*3)`` are written out (x * 2 - 1); the label
  ImageFolder returns is a constant 0;
- one ``train_step`` is one iteration of ``train``'s loop over the loader (the iteration index ``i`` runs over the
  epoch, so the eval/sample branch runs at its first batch); ``eval_fn`` is the reconstruction MSE on a given batch
  in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF059, SIM102  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIZE = 16
BATCH_SIZE = 8
N_IMAGES = 64


# ---- distributed/distributed.py (world size 1) ----------------------------------------------------------------

class dist_fn:
    @staticmethod
    def all_reduce(tensor):
        return tensor

    @staticmethod
    def all_gather(data):
        return [data]

    @staticmethod
    def is_primary():
        return True


dist = dist_fn


# ---- vqvae.py ----------------------------------------------------------------------------------------------------

# Copyright 2018 The Sonnet Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or  implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ============================================================================


# Borrowed from https://github.com/deepmind/sonnet and ported it to PyTorch


class Quantize(nn.Module):
    def __init__(self, dim, n_embed, decay=0.99, eps=1e-5, bug=None):
        super().__init__()

        self.dim = dim
        self.n_embed = n_embed
        self.decay = decay
        self.eps = eps
        self.bug = bug

        embed = torch.randn(dim, n_embed)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.zeros(n_embed))
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, input):
        flatten = input.reshape(-1, self.dim)
        dist = (
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ self.embed
            + self.embed.pow(2).sum(0, keepdim=True)
        )
        _, embed_ind = (-dist).max(1)
        embed_onehot = F.one_hot(embed_ind, self.n_embed).type(flatten.dtype)
        embed_ind = embed_ind.view(*input.shape[:-1])
        quantize = self.embed_code(embed_ind)

        if self.training:
            embed_onehot_sum = embed_onehot.sum(0)
            embed_sum = flatten.transpose(0, 1) @ embed_onehot

            dist_fn.all_reduce(embed_onehot_sum)
            dist_fn.all_reduce(embed_sum)

            self.cluster_size.data.mul_(self.decay).add_(
                embed_onehot_sum, alpha=1 - self.decay
            )
            self.embed_avg.data.mul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
            n = self.cluster_size.sum()
            cluster_size = (
                (self.cluster_size + self.eps) / (n + self.n_embed * self.eps) * n
            )
            embed_normalized = self.embed_avg / cluster_size.unsqueeze(0)
            self.embed.data.copy_(embed_normalized)

        diff = (quantize.detach() - input).pow(2).mean()
        if self.bug != "straight_through_dropped":
            quantize = input + (quantize - input).detach()
        # bug "straight_through_dropped": the codebook vectors go to the decoder as they are, so the
        # reconstruction's gradient stops at the quantizer and never reaches the encoders

        return quantize, diff, embed_ind

    def embed_code(self, embed_id):
        return F.embedding(embed_id, self.embed.transpose(0, 1))


class ResBlock(nn.Module):
    def __init__(self, in_channel, channel):
        super().__init__()

        self.conv = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(in_channel, channel, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, in_channel, 1),
        )

    def forward(self, input):
        out = self.conv(input)
        out += input

        return out


class Encoder(nn.Module):
    def __init__(self, in_channel, channel, n_res_block, n_res_channel, stride):
        super().__init__()

        if stride == 4:
            blocks = [
                nn.Conv2d(in_channel, channel // 2, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(channel // 2, channel, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(channel, channel, 3, padding=1),
            ]

        elif stride == 2:
            blocks = [
                nn.Conv2d(in_channel, channel // 2, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(channel // 2, channel, 3, padding=1),
            ]

        for i in range(n_res_block):
            blocks.append(ResBlock(channel, n_res_channel))

        blocks.append(nn.ReLU(inplace=True))

        self.blocks = nn.Sequential(*blocks)

    def forward(self, input):
        return self.blocks(input)


class Decoder(nn.Module):
    def __init__(
        self, in_channel, out_channel, channel, n_res_block, n_res_channel, stride
    ):
        super().__init__()

        blocks = [nn.Conv2d(in_channel, channel, 3, padding=1)]

        for i in range(n_res_block):
            blocks.append(ResBlock(channel, n_res_channel))

        blocks.append(nn.ReLU(inplace=True))

        if stride == 4:
            blocks.extend(
                [
                    nn.ConvTranspose2d(channel, channel // 2, 4, stride=2, padding=1),
                    nn.ReLU(inplace=True),
                    nn.ConvTranspose2d(
                        channel // 2, out_channel, 4, stride=2, padding=1
                    ),
                ]
            )

        elif stride == 2:
            blocks.append(
                nn.ConvTranspose2d(channel, out_channel, 4, stride=2, padding=1)
            )

        self.blocks = nn.Sequential(*blocks)

    def forward(self, input):
        return self.blocks(input)


class VQVAE(nn.Module):
    def __init__(
        self,
        in_channel=3,
        channel=128,
        n_res_block=2,
        n_res_channel=32,
        embed_dim=64,
        n_embed=512,
        decay=0.99,
        bug=None,
    ):
        super().__init__()

        self.enc_b = Encoder(in_channel, channel, n_res_block, n_res_channel, stride=4)
        self.enc_t = Encoder(channel, channel, n_res_block, n_res_channel, stride=2)
        self.quantize_conv_t = nn.Conv2d(channel, embed_dim, 1)
        self.quantize_t = Quantize(embed_dim, n_embed, bug=bug)
        self.dec_t = Decoder(
            embed_dim, embed_dim, channel, n_res_block, n_res_channel, stride=2
        )
        self.quantize_conv_b = nn.Conv2d(embed_dim + channel, embed_dim, 1)
        self.quantize_b = Quantize(embed_dim, n_embed, bug=bug)
        self.upsample_t = nn.ConvTranspose2d(
            embed_dim, embed_dim, 4, stride=2, padding=1
        )
        self.dec = Decoder(
            embed_dim + embed_dim,
            in_channel,
            channel,
            n_res_block,
            n_res_channel,
            stride=4,
        )

    def forward(self, input):
        quant_t, quant_b, diff, _, _ = self.encode(input)
        dec = self.decode(quant_t, quant_b)

        return dec, diff

    def encode(self, input):
        enc_b = self.enc_b(input)
        enc_t = self.enc_t(enc_b)

        quant_t = self.quantize_conv_t(enc_t).permute(0, 2, 3, 1)
        quant_t, diff_t, id_t = self.quantize_t(quant_t)
        quant_t = quant_t.permute(0, 3, 1, 2)
        diff_t = diff_t.unsqueeze(0)

        dec_t = self.dec_t(quant_t)
        enc_b = torch.cat([dec_t, enc_b], 1)

        quant_b = self.quantize_conv_b(enc_b).permute(0, 2, 3, 1)
        quant_b, diff_b, id_b = self.quantize_b(quant_b)
        quant_b = quant_b.permute(0, 3, 1, 2)
        diff_b = diff_b.unsqueeze(0)

        return quant_t, quant_b, diff_t + diff_b, id_t, id_b

    def decode(self, quant_t, quant_b):
        upsample_t = self.upsample_t(quant_t)
        quant = torch.cat([upsample_t, quant_b], 1)
        dec = self.dec(quant)

        return dec


# ---- train_vqvae.py (train's loop body, one iteration per call) ----------------------------------------------

def make_images(gen, n, size):
    """Smooth coloured backgrounds with one or two coloured squares, values in [0, 1] (ToTensor's range)."""
    ramp = torch.linspace(0, 1, size)
    imgs = []
    for _ in range(n):
        c0, c1 = torch.rand(3, 1, 1, generator=gen), torch.rand(3, 1, 1, generator=gen)
        img = c0 * ramp.view(1, 1, -1) * 0.5 + c1 * ramp.view(1, -1, 1) * 0.5
        for _k in range(int(torch.randint(1, 3, (1,), generator=gen))):
            s = int(torch.randint(3, 7, (1,), generator=gen))
            y, x = torch.randint(0, size - s + 1, (2,), generator=gen).tolist()
            img[:, y:y + s, x:x + s] = torch.rand(3, 1, 1, generator=gen)
        imgs.append(img.clamp(0, 1))
    return torch.stack(imgs)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    device = "cpu"

    raw = make_images(gen, N_IMAGES, SIZE)
    normalized = raw * 2 - 1  # transforms.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]) after ToTensor
    dataset = TensorDataset(normalized, raw, torch.zeros(N_IMAGES, dtype=torch.long))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(seed))

    model = VQVAE(channel=16, n_res_block=1, n_res_channel=8, embed_dim=8, n_embed=32, bug=bug).to(device)

    optimizer = optim.Adam(model.parameters(), lr=3e-4)
    scheduler = None

    criterion = nn.MSELoss()

    latent_loss_weight = 0.25
    sample_size = 25

    state = {"it": None, "i": 0, "mse_sum": 0, "mse_n": 0}

    def train_step():
        if state["it"] is None:
            state["it"], state["i"] = iter(loader), 0
        try:
            img, raw_img, label = next(state["it"])
        except StopIteration:
            state["it"], state["i"] = iter(loader), 0
            img, raw_img, label = next(state["it"])
        i = state["i"]
        state["i"] += 1

        if bug != "zero_grad_missing":
            model.zero_grad()

        img = img.to(device)

        out, latent_loss = model(img)
        if bug == "target_not_normalized":
            # the reconstruction compared with the image before Normalize: inputs in [-1, 1], targets in [0, 1]
            recon_loss = criterion(out, raw_img)
        else:
            recon_loss = criterion(out, img)
        latent_loss = latent_loss.mean()
        loss = recon_loss + latent_loss_weight * latent_loss
        loss.backward()

        if scheduler is not None:
            scheduler.step()
        optimizer.step()

        part_mse_sum = recon_loss.item() * img.shape[0]
        part_mse_n = img.shape[0]
        comm = {"mse_sum": part_mse_sum, "mse_n": part_mse_n}
        comm = dist.all_gather(comm)

        for part in comm:
            state["mse_sum"] += part["mse_sum"]
            state["mse_n"] += part["mse_n"]

        if dist.is_primary():
            if i % 100 == 0:
                model.eval()

                sample = img[:sample_size]

                with torch.no_grad():
                    out, _ = model(sample)

                if bug != "left_in_eval_after_sample":
                    model.train()
                # bug "left_in_eval_after_sample": model.train() dropped after the sample, so the
                # quantizers' EMA codebook updates (``if self.training``) stop for the rest of training

        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            out, _ = model(batch[0])
            mse = float(criterion(out, batch[0]))
        model.train()
        return mse

    first = next(iter(DataLoader(dataset, batch_size=BATCH_SIZE)))[0]

    def loss_fn(outputs, targets):
        out, latent_loss = outputs
        return criterion(out, targets) + latent_loss_weight * latent_loss.mean()

    return Program(name="vqvae2_hierarchical", model=model, batch=(first, first), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=loader)


build = functools.partial(_build)

BUGS = [
    # the straight-through copy ``input + (quantize - input).detach()`` dropped: the reconstruction's gradient stops at
    # the codebook lookup, the encoders learn only from the commitment term
    Bug("straight_through_dropped", functools.partial(_build, bug="straight_through_dropped"),
        "learning_ledger", ("GRADIENT",)),
    # model.train() not restored after the periodic sample: trained in eval mode, the EMA codebooks freeze
    Bug("left_in_eval_after_sample", functools.partial(_build, bug="left_in_eval_after_sample"),
        "step_probe", ("quantize",)),
    # model.zero_grad() left out of the loop: gradients pile up across iterations (whole-model step slip)
    Bug("zero_grad_missing", functools.partial(_build, bug="zero_grad_missing"),
        "step_probe", (), kind="step.grad_accumulation"),
    # the reconstruction target taken before Normalize while the input is normalized
    Bug("target_not_normalized", functools.partial(_build, bug="target_not_normalized"),
        "learning_ledger", ("TASK",)),
]
