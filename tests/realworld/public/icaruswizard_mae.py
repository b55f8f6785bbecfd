# ruff: noqa: PLR0402, RUF059
"""Masked autoencoder (MAE) pre-training of a tiny ViT, from IcarusWizard/MAE: random patch shuffling keeps 25% of
the patches for the encoder, a light decoder with a mask token reconstructs every patch, and the loss is the pixel
MSE on the masked patches only, with AdamW, a per-epoch warm-up + cosine schedule and gradient accumulation.

Source: https://github.com/IcarusWizard/MAE
Commit: 11c21fcbdb4d26a7ef84cf4d95679921c958105a
Files: model.py (random_indexes, take_indexes, PatchShuffle, MAE_Encoder, MAE_Decoder, MAE_ViT), mae_pretrain.py
(arguments, the training loop), utils.py (setup_seed)
License: MIT (Copyright (c) 2021 IcarusWizard; full text in LICENSES/IcarusWizard-MAE.txt)
Domain: self-supervised (masked image modeling, ViT)

Kept as written: ``PatchShuffle`` (numpy permutations per sample, forward / backward indexes, keep the first
``T * (1 - ratio)``), ``MAE_Encoder`` (conv patchify, learned positional embedding, shuffle, cls token, transformer
blocks, LayerNorm, ``trunc_normal_(std=.02)`` init), ``MAE_Decoder`` (mask tokens appended, unshuffled with the
backward indexes, positional embedding, blocks, the cls feature dropped, linear head to pixels, the mask image
built the same way), ``MAE_ViT``; mae_pretrain.py's defaults (base_learning_rate 1.5e-4 scaled by batch_size / 256,
weight_decay 0.05, AdamW betas (0.9, 0.95), mask_ratio 0.75, ``lr_func`` warm-up then cosine in epochs, LambdaLR
stepped once per epoch), ``Normalize(0.5, 0.5)`` on the images, ``setup_seed``, and the loop body
(``loss = torch.mean((predicted_img - img) ** 2 * mask) / args.mask_ratio``, backward every micro-batch, step and
zero_grad every ``steps_per_update`` micro-batches).

Deviations from the original:
- timm is not installed: ``timm.models.vision_transformer.Block`` (timm 0.4.12, as requirements.txt pins: pre-norm
  multi-head attention with a fused qkv Linear without bias, scale head_dim ** -0.5, and a GELU Mlp of ratio 4, no
  dropout or drop path at its defaults) is written out below; ``timm.models.layers.trunc_normal_`` is
  ``torch.nn.init.trunc_normal_`` (the same truncation at +-2 absolute).
- einops is not installed: ``repeat(indexes, 't b -> t b c')`` is ``unsqueeze(-1).expand``, the ``rearrange`` calls
  are flatten / permute / transpose, and the decoder's ``Rearrange('(h w) b (c p1 p2) -> b c (h p1) (w p2)')`` layer is
  written out as a module doing view + permute + reshape.
- sizes for 2 CPU cores: images 32x32 -> 16x16 and patch_size 2 -> 4 (16 patches, 4 visible), emb_dim 192 -> 32,
  encoder 12 layers / 3 heads -> 2 layers / 2 heads, decoder 4 layers / 3 heads -> 1 layer / 2 heads; batch_size
  4096 -> 1024 and max_device_batch_size 512 -> 128 (8 micro-batches per update, as 4096 / 512 gives 8; the lr is
  1.5e-4 * 1024 / 256); total_epoch 2000 -> 50 and warmup_epoch 200 -> 5 (the same 10:1 shape, one update per epoch).
- data: CIFAR-10 (``torchvision.datasets.CIFAR10``, a download) is replaced by 1024 synthetic 16x16 RGB images made
  from the seed (smooth low-frequency colour waves plus a bright square, so a masked patch is predictable from its
  neighbours), in [0, 1] before ``Normalize(0.5, 0.5)``; ``num_workers`` 4 -> 0; the shuffling DataLoader draws from
  a generator seeded from the seed. No GPU.
- the per-epoch visualisation on the validation set, the TensorBoard writer, tqdm, the model saving and LambdaLR's
  ``verbose=True`` (deprecated in this torch) are dropped; ``setup_seed``'s CUDA lines do nothing without a GPU and
  are dropped.
- ``train_step`` runs the loop body until the next optimizer step (``steps_per_update`` micro-batches, the epoch's
  ``lr_scheduler.step()`` when its data is used up) and returns the last micro-batch's loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

trunc_normal_ = torch.nn.init.trunc_normal_


# ---- timm 0.4.12's vision_transformer.Block, written out (port: timm is not installed) --------------------------

class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]

        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop=0., attn_drop=0.,
                 drop_path=0., act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(
            dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale, attn_drop=attn_drop, proj_drop=drop)
        # NOTE: drop path for stochastic depth (drop_path is 0 here: the identity)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class Rearrange(nn.Module):
    """einops' Rearrange('(h w) b (c p1 p2) -> b c (h p1) (w p2)', p1=, p2=, h=), written out."""

    def __init__(self, pattern, p1, p2, h):
        super().__init__()
        self.p1, self.p2, self.h = p1, p2, h

    def forward(self, x):
        hw, b, cpp = x.shape
        h, w = self.h, hw // self.h
        c = cpp // (self.p1 * self.p2)
        x = x.view(h, w, b, c, self.p1, self.p2).permute(2, 3, 0, 4, 1, 5)
        return x.reshape(b, c, h * self.p1, w * self.p2)


# ---- utils.py ---------------------------------------------------------------------------------------------------

def setup_seed(seed=42):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


# ---- model.py ---------------------------------------------------------------------------------------------------

def random_indexes(size : int):
    forward_indexes = np.arange(size)
    np.random.shuffle(forward_indexes)
    backward_indexes = np.argsort(forward_indexes)
    return forward_indexes, backward_indexes

def take_indexes(sequences, indexes):
    return torch.gather(sequences, 0, indexes.unsqueeze(-1).expand(-1, -1, sequences.shape[-1]))  # repeat(indexes, 't b -> t b c', c=sequences.shape[-1])

class PatchShuffle(torch.nn.Module):
    def __init__(self, ratio) -> None:
        super().__init__()
        self.ratio = ratio

    def forward(self, patches : torch.Tensor):
        T, B, C = patches.shape
        remain_T = int(T * (1 - self.ratio))

        indexes = [random_indexes(T) for _ in range(B)]
        forward_indexes = torch.as_tensor(np.stack([i[0] for i in indexes], axis=-1), dtype=torch.long).to(patches.device)
        backward_indexes = torch.as_tensor(np.stack([i[1] for i in indexes], axis=-1), dtype=torch.long).to(patches.device)

        patches = take_indexes(patches, forward_indexes)
        patches = patches[:remain_T]

        return patches, forward_indexes, backward_indexes

class MAE_Encoder(torch.nn.Module):
    def __init__(self,
                 image_size=32,
                 patch_size=2,
                 emb_dim=192,
                 num_layer=12,
                 num_head=3,
                 mask_ratio=0.75,
                 ) -> None:
        super().__init__()

        self.cls_token = torch.nn.Parameter(torch.zeros(1, 1, emb_dim))
        self.pos_embedding = torch.nn.Parameter(torch.zeros((image_size // patch_size) ** 2, 1, emb_dim))
        self.shuffle = PatchShuffle(mask_ratio)

        self.patchify = torch.nn.Conv2d(3, emb_dim, patch_size, patch_size)

        self.transformer = torch.nn.Sequential(*[Block(emb_dim, num_head) for _ in range(num_layer)])

        self.layer_norm = torch.nn.LayerNorm(emb_dim)

        self.init_weight()

    def init_weight(self):
        trunc_normal_(self.cls_token, std=.02)
        trunc_normal_(self.pos_embedding, std=.02)

    def forward(self, img):
        patches = self.patchify(img)
        patches = patches.flatten(2).permute(2, 0, 1)  # rearrange(patches, 'b c h w -> (h w) b c')
        patches = patches + self.pos_embedding

        patches, forward_indexes, backward_indexes = self.shuffle(patches)

        patches = torch.cat([self.cls_token.expand(-1, patches.shape[1], -1), patches], dim=0)
        patches = patches.transpose(0, 1)  # rearrange(patches, 't b c -> b t c')
        features = self.layer_norm(self.transformer(patches))
        features = features.transpose(0, 1)  # rearrange(features, 'b t c -> t b c')

        return features, backward_indexes

class MAE_Decoder(torch.nn.Module):
    def __init__(self,
                 image_size=32,
                 patch_size=2,
                 emb_dim=192,
                 num_layer=4,
                 num_head=3,
                 ) -> None:
        super().__init__()

        self.mask_token = torch.nn.Parameter(torch.zeros(1, 1, emb_dim))
        self.pos_embedding = torch.nn.Parameter(torch.zeros((image_size // patch_size) ** 2 + 1, 1, emb_dim))

        self.transformer = torch.nn.Sequential(*[Block(emb_dim, num_head) for _ in range(num_layer)])

        self.head = torch.nn.Linear(emb_dim, 3 * patch_size ** 2)
        self.patch2img = Rearrange('(h w) b (c p1 p2) -> b c (h p1) (w p2)', p1=patch_size, p2=patch_size, h=image_size//patch_size)

        self.init_weight()

    def init_weight(self):
        trunc_normal_(self.mask_token, std=.02)
        trunc_normal_(self.pos_embedding, std=.02)

    def forward(self, features, backward_indexes):
        T = features.shape[0]
        backward_indexes = torch.cat([torch.zeros(1, backward_indexes.shape[1]).to(backward_indexes), backward_indexes + 1], dim=0)
        features = torch.cat([features, self.mask_token.expand(backward_indexes.shape[0] - features.shape[0], features.shape[1], -1)], dim=0)
        features = take_indexes(features, backward_indexes)
        features = features + self.pos_embedding

        features = features.transpose(0, 1)  # rearrange(features, 't b c -> b t c')
        features = self.transformer(features)
        features = features.transpose(0, 1)  # rearrange(features, 'b t c -> t b c')
        features = features[1:] # remove global feature

        patches = self.head(features)
        mask = torch.zeros_like(patches)
        mask[T-1:] = 1
        mask = take_indexes(mask, backward_indexes[1:] - 1)
        img = self.patch2img(patches)
        mask = self.patch2img(mask)

        return img, mask

class MAE_ViT(torch.nn.Module):
    def __init__(self,
                 image_size=32,
                 patch_size=2,
                 emb_dim=192,
                 encoder_layer=12,
                 encoder_head=3,
                 decoder_layer=4,
                 decoder_head=3,
                 mask_ratio=0.75,
                 ) -> None:
        super().__init__()

        self.encoder = MAE_Encoder(image_size, patch_size, emb_dim, encoder_layer, encoder_head, mask_ratio)
        self.decoder = MAE_Decoder(image_size, patch_size, emb_dim, decoder_layer, decoder_head)

    def forward(self, img):
        features, backward_indexes = self.encoder(img)
        predicted_img, mask = self.decoder(features,  backward_indexes)
        return predicted_img, mask


# ---- data: synthetic images (port: no CIFAR-10 download) --------------------------------------------------------

def make_images(gen, n, size=16):
    """Smooth low-frequency colour waves plus a bright square, in [0, 1] (what ToTensor gives)."""
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    freq = torch.randint(0, 3, (n, 3, 2), generator=gen).float()
    phase = torch.rand(n, 3, 1, 1, generator=gen) * 2 * math.pi
    waves = torch.cos(2 * math.pi * (freq[..., 0, None, None] * xx + freq[..., 1, None, None] * yy) / size + phase)
    img = 0.5 + 0.3 * waves
    corner = torch.randint(0, size - 5, (n, 2), generator=gen)
    for i in range(n):
        y, x = corner[i].tolist()
        img[i, :, y:y + 5, x:x + 5] = 0.95
    return img.clamp(0, 1)


class ImageDataset(torch.utils.data.Dataset):
    def __init__(self, images, transform):
        self.images, self.transform = images, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), 0


# ---- mae_pretrain.py --------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    args = types.SimpleNamespace(seed=seed, batch_size=1024, max_device_batch_size=128, base_learning_rate=1.5e-4,
                                 weight_decay=0.05, mask_ratio=0.75, total_epoch=50, warmup_epoch=5)

    setup_seed(args.seed)

    batch_size = args.batch_size
    load_batch_size = min(args.max_device_batch_size, batch_size)

    assert batch_size % load_batch_size == 0
    steps_per_update = batch_size // load_batch_size

    normalize = lambda x: (x - 0.5) / 0.5  # Compose([ToTensor(), Normalize(0.5, 0.5)])
    train_dataset = ImageDataset(make_images(torch.Generator().manual_seed(seed), 1024), normalize)
    dataloader = torch.utils.data.DataLoader(train_dataset, load_batch_size, shuffle=True, num_workers=0,
                                             generator=torch.Generator().manual_seed(seed + 1))

    model = MAE_ViT(image_size=16, patch_size=4, emb_dim=32, encoder_layer=2, encoder_head=2, decoder_layer=1,
                    decoder_head=2, mask_ratio=args.mask_ratio)
    optim = torch.optim.AdamW(model.parameters(), lr=args.base_learning_rate * args.batch_size / 256, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    lr_func = lambda epoch: min((epoch + 1) / (args.warmup_epoch + 1e-8), 0.5 * (math.cos(epoch / args.total_epoch * math.pi) + 1))
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optim, lr_lambda=lr_func)

    def loop():
        step_count = 0
        optim.zero_grad()
        for e in range(args.total_epoch):
            model.train()
            losses = []
            for img, label in iter(dataloader):
                step_count += 1
                if bug == "zero_grad_every_micro_batch":
                    optim.zero_grad()  # the accumulated gradients of the earlier micro-batches are wiped
                predicted_img, mask = model(img)
                if bug == "loss_over_all_patches":
                    loss = torch.mean((predicted_img - img) ** 2) / args.mask_ratio  # the mask left out
                else:
                    loss = torch.mean((predicted_img - img) ** 2 * mask) / args.mask_ratio
                loss.backward()
                if step_count % steps_per_update == 0:
                    optim.step()
                    optim.zero_grad()
                    yield loss.detach()  # (port) one train_step per optimizer update
                losses.append(loss.item())
            lr_scheduler.step()

    first = next(iter(dataloader))[0]

    def loss_fn(outputs, img):
        predicted_img, mask = outputs
        if bug == "loss_over_all_patches":
            return torch.mean((predicted_img - img) ** 2) / args.mask_ratio
        return torch.mean((predicted_img - img) ** 2 * mask) / args.mask_ratio

    steps = loop()
    return Program(name="icaruswizard_mae", model=model, batch=(first, first), loss_fn=loss_fn, optimizer=optim,
                   train_step=lambda: next(steps), loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the reconstruction loss taken over every patch, the 25% the encoder saw included: the mask never reaches the
    # loss (classic: the mask left out of a masked objective).
    Bug("loss_over_all_patches", functools.partial(_build, bug="loss_over_all_patches"), "learning_ledger",
        ("OBJECTIVE",)),
    # optim.zero_grad() at the top of every micro-batch: each update uses only the last of the 8 accumulated
    # micro-batches' gradients (classic misplaced zero_grad under gradient accumulation).
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
