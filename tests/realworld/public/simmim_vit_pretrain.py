"""SimMIM pre-training of a vision transformer (``main_simmim.py`` with the ``vit_base`` pre-training config):
``MaskGenerator`` masks 60% of 32-pixel squares (in model-patch units), the encoder replaces the masked patch
embeddings by a learned ``mask_token`` and runs the BEiT-style ViT (LayerScale ``init_values`` 0.1, shared relative
position bias, no absolute position embedding, drop path 0.1), a 1x1 convolution + ``PixelShuffle`` decoder
predicts the pixels, and the loss is the L1 error on the masked pixels only; AdamW (weight decay 0.05 except 1-d
parameters, biases and ``no_weight_decay`` names), learning rate scaled by batch size / 512, warm-up then multi-step
decay stepped per iteration (``step_update``), gradient clipping at 5.

Source: https://github.com/microsoft/SimMIM
Commit: d3e29bcac950b83edc34ca33fe4404f38309052c
Files: main_simmim.py, models/simmim.py, models/vision_transformer.py, data/data_simmim.py, optimizer.py,
       lr_scheduler.py, config.py, configs/vit_base__800ep/simmim_pretrain__vit_base__img224__800ep.yaml
       (the vision transformer in the helper ``_simmim_vit.py``)
License: MIT (Copyright (c) Microsoft Corporation; full text in LICENSES/microsoft-SimMIM.txt)
Domain: self-supervised, masked image modeling (ViT, mask token, linear pixel decoder, L1 on masked pixels)

Deviations from the original:
- sizes: IMG_SIZE 224 -> 32, VIT.PATCH_SIZE 16 -> 4 (the encoder stride with it, 16 -> 4), MASK_PATCH_SIZE
  32 -> 8 (two model patches per mask square, as 32 / 16), EMBED_DIM 768 -> 32, DEPTH 12 -> 2, NUM_HEADS 12 -> 2,
  batch size 128 -> 16; BASE_LR 1e-4 -> 3.2e-2 (1e-3 after the script's linear scaling by 16 / 512: 30 steps
  instead of 800 epochs), WARMUP_EPOCHS 10 -> 0.5 (5 iterations), EPOCHS 800 -> 100, MULTISTEPS [700] -> [90];
  the other settings are the config's (MASK_RATIO 0.6, DROP_PATH_RATE 0.1, INIT_VALUES 0.1, QKV_BIAS, USE_APE
  False, USE_RPB False, USE_SHARED_RPB True, USE_MEAN_POOLING False, WEIGHT_DECAY 0.05, WARMUP_LR 5e-7, CLIP_GRAD 5,
  AdamW eps 1e-8 betas (0.9, 0.999));
- data: the ImageNet ``ImageFolder`` is replaced by 160 synthetic 32x32 RGB images made from ``seed`` (each a sum
  of three low-frequency 2-D cosines with random phases and colours, so a masked square is predictable from its
  neighbours), normalized with the ImageNet mean and std as the transform does; ``RandomResizedCrop`` is left out
  (the images are made at their final size), the horizontal flip is kept; ``MaskGenerator`` and ``collate_fn``
  run as written (``np.random`` seeded from ``seed``);
- no DDP, no apex AMP (the fp32 path with ``ACCUMULATION_STEPS`` 0), no ``torch.cuda.synchronize``; timm's
  ``Scheduler`` base is written out (``step_update`` sets each group's ``lr`` from ``_get_lr``), and timm's
  ``trunc_normal_``, ``DropPath``, ``to_2tuple`` in the helper;
- one ``train_step`` is one iteration of ``train_one_epoch`` (meters, logging and checkpoints left out; the
  data loader is iterated across epochs, ``epoch * num_steps + idx`` kept for the scheduler);
- ``eval_fn`` is the masked-pixel L1 of the model in eval mode on a fixed batch (the repository has no evaluation
  in pre-training);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402

from __future__ import annotations

import functools
import pathlib
import sys
from bisect import bisect_right
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _simmim_vit import VisionTransformer, trunc_normal_

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)

# config.py defaults with the vit_base pre-training yaml on top (sizes changed, see the header)
IMG_SIZE, MASK_PATCH_SIZE, MASK_RATIO, BATCH_SIZE, N_IMAGES = 32, 8, 0.6, 16, 160
PATCH_SIZE, IN_CHANS, EMBED_DIM, DEPTH, NUM_HEADS, MLP_RATIO = 4, 3, 32, 2, 2, 4
QKV_BIAS, INIT_VALUES, USE_APE, USE_RPB, USE_SHARED_RPB, USE_MEAN_POOLING = True, 0.1, False, False, True, False
DROP_RATE, DROP_PATH_RATE = 0.0, 0.1
EPOCHS, WARMUP_EPOCHS, BASE_LR, WARMUP_LR, WEIGHT_DECAY, CLIP_GRAD = 100, 0.5, 3.2e-2, 5e-7, 0.05, 5.0
MULTISTEPS, GAMMA, EPS, BETAS = [90], 0.1, 1e-8, (0.9, 0.999)


# ---- models/simmim.py -----------------------------------------------------------------------------------------

class VisionTransformerForSimMIM(VisionTransformer):
    def __init__(self, bug=None, **kwargs):
        super().__init__(**kwargs)

        assert self.num_classes == 0

        self.mask_token = nn.Parameter(torch.zeros(1, 1, self.embed_dim))
        self._trunc_normal_(self.mask_token, std=.02)
        self.bug = bug

    def _trunc_normal_(self, tensor, mean=0., std=1.):
        trunc_normal_(tensor, mean=mean, std=std, a=-std, b=std)

    def forward(self, x, mask):
        x = self.patch_embed(x)

        assert mask is not None
        B, L, _ = x.shape

        mask_token = self.mask_token.expand(B, L, -1)
        w = mask.flatten(1).unsqueeze(-1).type_as(mask_token)
        if self.bug != "mask_token_not_applied":  # the masked patches' embeddings left in place
            x = x * (1 - w) + mask_token * w

        cls_tokens = self.cls_token.expand(B, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_tokens, x), dim=1)

        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.pos_drop(x)

        rel_pos_bias = self.rel_pos_bias() if self.rel_pos_bias is not None else None
        for blk in self.blocks:
            x = blk(x, rel_pos_bias=rel_pos_bias)
        x = self.norm(x)

        x = x[:, 1:]
        B, L, C = x.shape
        H = W = int(L ** 0.5)
        if self.bug == "tokens_reshaped_not_permuted":  # [B, L, C] read as [B, C, H, W] without the permute
            return x.reshape(B, C, H, W)
        x = x.permute(0, 2, 1).reshape(B, C, H, W)
        return x


class SimMIM(nn.Module):
    def __init__(self, encoder, encoder_stride, bug=None):
        super().__init__()
        self.encoder = encoder
        self.encoder_stride = encoder_stride

        self.decoder = nn.Sequential(
            nn.Conv2d(
                in_channels=self.encoder.num_features,
                out_channels=self.encoder_stride ** 2 * 3, kernel_size=1),
            nn.PixelShuffle(self.encoder_stride),
        )

        self.in_chans = self.encoder.in_chans
        self.patch_size = self.encoder.patch_size
        self.bug = bug

    def forward(self, x, mask):
        z = self.encoder(x, mask)
        x_rec = self.decoder(z)

        mask = mask.repeat_interleave(self.patch_size, 1).repeat_interleave(self.patch_size, 2).unsqueeze(1).contiguous()
        if self.bug == "loss_on_visible_pixels":  # the mask inverted: the error counted where the input is seen
            mask = 1 - mask
        loss_recon = F.l1_loss(x, x_rec, reduction='none')
        loss = (loss_recon * mask).sum() / (mask.sum() + 1e-5) / self.in_chans
        return loss

    @torch.jit.ignore
    def no_weight_decay(self):
        if hasattr(self.encoder, 'no_weight_decay'):
            return {'encoder.' + i for i in self.encoder.no_weight_decay()}
        return {}

    @torch.jit.ignore
    def no_weight_decay_keywords(self):
        if hasattr(self.encoder, 'no_weight_decay_keywords'):
            return {'encoder.' + i for i in self.encoder.no_weight_decay_keywords()}
        return {}


def build_simmim(bug=None):
    encoder = VisionTransformerForSimMIM(
        img_size=IMG_SIZE, patch_size=PATCH_SIZE, in_chans=IN_CHANS, num_classes=0, embed_dim=EMBED_DIM,
        depth=DEPTH, num_heads=NUM_HEADS, mlp_ratio=MLP_RATIO, qkv_bias=QKV_BIAS, drop_rate=DROP_RATE,
        drop_path_rate=DROP_PATH_RATE, norm_layer=partial(nn.LayerNorm, eps=1e-6), init_values=INIT_VALUES,
        use_abs_pos_emb=USE_APE, use_rel_pos_bias=USE_RPB, use_shared_rel_pos_bias=USE_SHARED_RPB,
        use_mean_pooling=USE_MEAN_POOLING, bug=bug)
    encoder_stride = PATCH_SIZE  # 16 for vit_base's 16-pixel patches

    model = SimMIM(encoder=encoder, encoder_stride=encoder_stride, bug=bug)

    return model


# ---- data/data_simmim.py --------------------------------------------------------------------------------------

class MaskGenerator:
    def __init__(self, input_size=192, mask_patch_size=32, model_patch_size=4, mask_ratio=0.6):
        self.input_size = input_size
        self.mask_patch_size = mask_patch_size
        self.model_patch_size = model_patch_size
        self.mask_ratio = mask_ratio
        assert self.input_size % self.mask_patch_size == 0
        assert self.mask_patch_size % self.model_patch_size == 0
        self.rand_size = self.input_size // self.mask_patch_size
        self.scale = self.mask_patch_size // self.model_patch_size
        self.token_count = self.rand_size ** 2
        self.mask_count = int(np.ceil(self.token_count * self.mask_ratio))

    def __call__(self):
        mask_idx = np.random.permutation(self.token_count)[:self.mask_count]
        mask = np.zeros(self.token_count, dtype=int)
        mask[mask_idx] = 1
        mask = mask.reshape((self.rand_size, self.rand_size))
        mask = mask.repeat(self.scale, axis=0).repeat(self.scale, axis=1)
        return mask


class SimMIMTransform:
    def __init__(self):
        mean = torch.tensor(IMAGENET_DEFAULT_MEAN)[:, None, None]
        std = torch.tensor(IMAGENET_DEFAULT_STD)[:, None, None]
        # T.RandomHorizontalFlip(), T.Normalize(mean, std) (RandomResizedCrop left out, see the header)
        self.transform_img = lambda img: ((img.flip(-1) if np.random.rand() < 0.5 else img) - mean) / std
        self.mask_generator = MaskGenerator(
            input_size=IMG_SIZE,
            mask_patch_size=MASK_PATCH_SIZE,
            model_patch_size=PATCH_SIZE,
            mask_ratio=MASK_RATIO,
        )

    def __call__(self, img):
        img = self.transform_img(img)
        mask = self.mask_generator()
        return img, mask


def collate_fn(batch):
    if not isinstance(batch[0][0], tuple):
        return default_collate(batch)
    else:
        batch_num = len(batch)
        ret = []
        for item_idx in range(len(batch[0][0])):
            if batch[0][0][item_idx] is None:
                ret.append(None)
            else:
                ret.append(default_collate([batch[i][0][item_idx] for i in range(batch_num)]))
        ret.append(default_collate([batch[i][1] for i in range(batch_num)]))
        return ret


class SmoothImages(Dataset):
    """Stands in for ImageFolder: (transform(image), 0) pairs of smooth synthetic RGB images in [0, 1]."""

    def __init__(self, seed, transform):
        g = torch.Generator().manual_seed(seed)
        coords = torch.linspace(0, 1, IMG_SIZE)
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        freq = torch.randint(0, 3, (N_IMAGES, 3, 2), generator=g).float() * np.pi
        phase = torch.rand(N_IMAGES, 3, 1, 1, generator=g) * 2 * np.pi
        colour = torch.rand(N_IMAGES, 3, 3, 1, 1, generator=g)  # wave, channel
        waves = torch.cos(freq[..., 0, None, None] * yy + freq[..., 1, None, None] * xx + phase)  # [N, 3, H, W]
        self.images = (0.5 + 0.25 * (waves[:, :, None] * (colour - 0.5) * 2).sum(1)).clamp(0, 1)
        self.transform = transform

    def __len__(self):
        return N_IMAGES

    def __getitem__(self, i):
        return self.transform(self.images[i]), 0


# ---- optimizer.py, lr_scheduler.py ----------------------------------------------------------------------------

def check_keywords_in_name(name, keywords=()):
    isin = False
    for keyword in keywords:
        if keyword in name:
            isin = True
    return isin


def get_pretrain_param_groups(model, skip_list=(), skip_keywords=()):
    has_decay = []
    no_decay = []

    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if len(param.shape) == 1 or name.endswith(".bias") or (name in skip_list) or \
                check_keywords_in_name(name, skip_keywords):
            no_decay.append(param)
        else:
            has_decay.append(param)
    return [{'params': has_decay},
            {'params': no_decay, 'weight_decay': 0.}]


def build_pretrain_optimizer(model, base_lr):
    skip = model.no_weight_decay()
    skip_keywords = model.no_weight_decay_keywords()
    parameters = get_pretrain_param_groups(model, skip, skip_keywords)
    return torch.optim.AdamW(parameters, eps=EPS, betas=BETAS, lr=base_lr, weight_decay=WEIGHT_DECAY)


class MultiStepLRScheduler:
    """lr_scheduler.py's ``MultiStepLRScheduler`` on timm's ``Scheduler`` base (written out: ``base_values`` from
    each group's ``initial_lr``, ``update_groups`` sets ``lr``)."""

    def __init__(self, optimizer, milestones, gamma=0.1, warmup_t=0, warmup_lr_init=0, t_in_epochs=True):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault('initial_lr', group['lr'])
        self.base_values = [group['initial_lr'] for group in optimizer.param_groups]
        self.milestones = milestones
        self.gamma = gamma
        self.warmup_t = warmup_t
        self.warmup_lr_init = warmup_lr_init
        self.t_in_epochs = t_in_epochs
        if self.warmup_t:
            self.warmup_steps = [(v - warmup_lr_init) / self.warmup_t for v in self.base_values]
            self.update_groups(self.warmup_lr_init)
        else:
            self.warmup_steps = [1 for _ in self.base_values]
        assert self.warmup_t <= min(self.milestones)

    def _get_lr(self, t):
        if t < self.warmup_t:
            lrs = [self.warmup_lr_init + t * s for s in self.warmup_steps]
        else:
            lrs = [v * (self.gamma ** bisect_right(self.milestones, t)) for v in self.base_values]
        return lrs

    def get_update_values(self, num_updates: int):
        if not self.t_in_epochs:
            return self._get_lr(num_updates)
        else:
            return None

    def step_update(self, num_updates: int):
        values = self.get_update_values(num_updates)
        if values is not None:
            self.update_groups(values)

    def update_groups(self, values):
        if not isinstance(values, (list, tuple)):
            values = [values] * len(self.optimizer.param_groups)
        for group, value in zip(self.optimizer.param_groups, values):
            group['lr'] = value


# ---- main_simmim.py -------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    data_loader_train = DataLoader(SmoothImages(seed, SimMIMTransform()), BATCH_SIZE, shuffle=True, drop_last=True,
                                   collate_fn=collate_fn)
    # linear scale the learning rate according to total batch size, may not be optimal
    linear_scaled_lr = BASE_LR * BATCH_SIZE / 512.0
    linear_scaled_warmup_lr = WARMUP_LR * BATCH_SIZE / 512.0

    model = build_simmim(bug=bug)
    optimizer = build_pretrain_optimizer(model, linear_scaled_lr)
    n_iter_per_epoch = len(data_loader_train)
    lr_scheduler = MultiStepLRScheduler(
        optimizer, milestones=[i * n_iter_per_epoch for i in MULTISTEPS], gamma=GAMMA,
        warmup_lr_init=linear_scaled_warmup_lr, warmup_t=int(WARMUP_EPOCHS * n_iter_per_epoch), t_in_epochs=False)

    def train_epochs():
        for epoch in range(EPOCHS):
            # train_one_epoch(config, model, data_loader_train, optimizer, epoch, lr_scheduler)
            model.train()
            optimizer.zero_grad()
            num_steps = len(data_loader_train)
            for idx, (img, mask, _) in enumerate(data_loader_train):
                loss = model(img, mask)

                optimizer.zero_grad()
                loss.backward()
                if CLIP_GRAD:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD)
                optimizer.step()
                lr_scheduler.step_update(epoch * num_steps + idx)
                yield loss.detach()

    img, mask, _ = next(iter(DataLoader(SmoothImages(seed + 1, SimMIMTransform()), BATCH_SIZE,
                                        collate_fn=collate_fn)))
    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            out = float(model(**batch[0]))
        model.train()
        return out
    steps = train_epochs()
    return Program(name="simmim_vit_pretrain", model=model, batch=({"x": img, "mask": mask}, None),
                   loss_fn=lambda loss, _target: loss, optimizer=optimizer, train_step=lambda: next(steps),
                   eval_fn=eval_fn, loader=data_loader_train)


build = functools.partial(_build, bug=None)

BUGS = [
    # the mask-token blend left out of the encoder: the masked patches' own pixels reach the model, and the loss on
    # them is a copy of the input.
    Bug("mask_token_not_applied", functools.partial(_build, bug="mask_token_not_applied"), "learning_ledger",
        ("DEPENDENCY",)),
    # the pixel mask inverted in the loss: the error is counted on the visible pixels and the masked ones are free.
    Bug("loss_on_visible_pixels", functools.partial(_build, bug="loss_on_visible_pixels"), "learning_ledger",
        ("OBJECTIVE",)),
    # the encoder's [B, L, C] tokens reshaped to [B, C, H, W] without the permute: the decoder reads channels of
    # scattered tokens as pixels of one patch.
    Bug("tokens_reshaped_not_permuted", functools.partial(_build, bug="tokens_reshaped_not_permuted"),
        "tensor_trace", ("encoder",)),
]
