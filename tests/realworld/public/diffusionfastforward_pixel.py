"""Pixel-space DDPM as a Lightning module from mikonvergence's DiffusionFastForward (notebook 02, "Pixel Diffusion"):
``PixelDiffusion`` maps images from [0, 1] to [-1, 1] (``input_T``) and trains ``DenoisingDiffusionProcess.p_loss``:
a uniform timestep per image, the Gaussian forward process of a linear beta schedule (1000 steps, 1e-4 to 0.02),
a ConvNeXt-block U-Net with linear attention and a sinusoidal time embedding predicting the noise, MSE to the noise;
AdamW over the trainable parameters (lr 1e-4 from the notebook) under ``Trainer.fit``.

Source: https://github.com/mikonvergence/DiffusionFastForward
Commit: 999ca581eed0f66b59ac10f56f9dd04b73f9c657
Files: 02-Pixel-Diffusion.ipynb, src/PixelDiffusion.py, src/DenoisingDiffusionProcess/DenoisingDiffusionProcess.py,
src/DenoisingDiffusionProcess/forward.py, src/DenoisingDiffusionProcess/beta_schedules.py,
src/DenoisingDiffusionProcess/backbones/unet_convnext.py, src/EMA.py
License: MIT (Copyright (c) 2023 Mikolaj Czerkawski; full text in LICENSES/mikonvergence-DiffusionFastForward.txt)
Domain: vision, generative (denoising diffusion, epsilon prediction, Lightning module)

Kept as written: ``PixelDiffusion`` (``input_T``, ``output_T``, ``training_step``, ``validation_step``,
``configure_optimizers``), ``DenoisingDiffusionProcess.p_loss``, ``GaussianForwardProcess`` and
``linear_beta_schedule``, ``UnetConvNextBlock`` with ``ConvNextBlock``, ``LinearAttention``, ``Residual``,
``PreNorm``, the channel ``LayerNorm`` and ``SinusoidalPosEmb``; the notebook's ``PixelDiffusion(train_ds, lr=1e-4,
batch_size=16)``.

Deviations from the original:
- sizes for 2 CPU cores: the U-Net's ``dim`` 64 -> 16 and ``dim_mults`` (1, 2, 4, 8) -> (1, 2, 4); the notebook's
  ``CROP_SIZE`` 64 -> 16 and batch_size 16 -> 8; lr 1e-4 -> 1e-3 (the module's own default) so that 30 steps show
  the loss falling (the notebook runs 2e5 steps);
- data: the maps dataset (side-by-side image pairs read with skimage, the left half kept as ``paired=True,
  return_pair=False`` gives, kornia's ``RandomCrop((CROP_SIZE, CROP_SIZE))``) is replaced by 128 synthetic 24x24 RGB
  "map tiles" in [0, 1] made from ``seed`` (blocks of a few flat colours crossed by roads), each cropped at a random
  16x16 window per item from the global torch RNG; the loader shuffles with a seeded generator, no workers;
- einops' ``rearrange`` is written out with ``reshape`` and indexing (the same layouts); the U-Net's constructor
  print is dropped; the sampling loops (``forward``, the DDPM/DDIM samplers) are not needed for training and left
  out;
- the notebook's ``EMA(0.9999)`` callback is left out: as written, its ``apply_ema`` tests ``orig_weight.data.shape
  == ema_weight.data`` (a shape against a tensor, always False), so it never changes a weight;
- ``Trainer.fit`` is driven one step at a time (``_lightning_loop.automatic_step``: ``training_step``, the
  ``optimizer_zero_grad`` hook, ``backward``, ``optimizer_step``), a ``Trainer(barebones=True)`` attached so that
  ``self.log`` runs; the Program's model is the U-Net (``module.model.model``) the optimizer trains, its batch one
  draw of ``p_loss``'s inputs ``((output_noisy, t), noise)`` and ``loss_fn`` ``p_loss``'s ``self.loss_fn(noise,
  noise_hat)``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059

from __future__ import annotations

import functools
import logging
import math
import pathlib
import sys
import warnings
from inspect import isfunction

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from pytorch_lightning import Trainer
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

CROP_SIZE = 16  # (port) 64
TILE = 24
N_IMAGES = 128


# ---- src/DenoisingDiffusionProcess/beta_schedules.py ---------------------------------------------------------------

def get_beta_schedule(variant, timesteps):
    if variant=='linear':
        return linear_beta_schedule(timesteps)
    raise NotImplementedError(variant)  # (port) the cosine/quadratic/sigmoid variants are not used


def linear_beta_schedule(timesteps):
    beta_start = 0.0001
    beta_end = 0.02
    return torch.linspace(beta_start, beta_end, timesteps)


# ---- src/DenoisingDiffusionProcess/forward.py ----------------------------------------------------------------------

class ForwardModel(nn.Module):
    """
        (Forward Model Template)
    """

    def __init__(self,
                 num_timesteps=1000,
                 schedule='linear'
                ):

        super().__init__()
        self.schedule=schedule
        self.num_timesteps=num_timesteps


class GaussianForwardProcess(ForwardModel):
    """
        Gassian Forward Model
    """

    def __init__(self,
                 num_timesteps=1000,
                 schedule='linear',
                 bug=None,
                ):

        super().__init__(num_timesteps=num_timesteps,
                         schedule=schedule
                        )
        self.bug = bug

        # get process parameters
        self.register_buffer('betas',get_beta_schedule(self.schedule,self.num_timesteps))
        self.register_buffer('betas_sqrt',self.betas.sqrt())
        self.register_buffer('alphas',1-self.betas)
        self.register_buffer('alphas_cumprod',torch.cumprod(self.alphas,0))
        self.register_buffer('alphas_cumprod_sqrt',self.alphas_cumprod.sqrt())
        self.register_buffer('alphas_one_minus_cumprod_sqrt',(1-self.alphas_cumprod).sqrt())
        self.register_buffer('alphas_sqrt',self.alphas.sqrt())

    @torch.no_grad()
    def forward(self, x_0, t, return_noise=False):
        """
            Get noisy sample at t given x_0

            q(x_t | x_0)=N(x_t; alphas_cumprod_sqrt(t)*x_0, 1-alpha_cumprod(t)*I)
        """
        assert (t<self.num_timesteps).all()

        b=x_0.shape[0]
        if self.bug == "alphas_not_cumulative":
            # the per-step alphas where their cumulative product belongs: x_t stays nearly x_0 at every t
            mean=x_0*self.alphas_sqrt[t].view(b,1,1,1)
            std=self.betas_sqrt[t].view(b,1,1,1)
        else:
            mean=x_0*self.alphas_cumprod_sqrt[t].view(b,1,1,1)
            std=self.alphas_one_minus_cumprod_sqrt[t].view(b,1,1,1)

        noise=torch.randn_like(x_0)
        output=mean+std*noise

        if not return_noise:
            return output
        else:
            return output, noise


# ---- src/DenoisingDiffusionProcess/backbones/unet_convnext.py ------------------------------------------------------

def exists(x):
    return x is not None


def default(val, d):
    if exists(val):
        return val
    return d() if isfunction(d) else d


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs) + x


class SinusoidalPosEmb(nn.Module):
    """
        Based on transformer-like embedding from 'Attention is all you need'
        Note: 10,000 corresponds to the maximum sequence length
    """
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        device = x.device
        half_dim = self.dim // 2
        emb = math.log(10000) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim, device=device) * -emb)
        emb = x[:, None] * emb[None, :]
        emb = torch.cat((emb.sin(), emb.cos()), dim=-1)
        return emb


def Upsample(dim):
    return nn.ConvTranspose2d(dim, dim, 4, 2, 1)


def Downsample(dim):
    return nn.Conv2d(dim, dim, 4, 2, 1)


class LayerNorm(nn.Module):
    def __init__(self, dim, eps = 1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(1, dim, 1, 1))
        self.b = nn.Parameter(torch.zeros(1, dim, 1, 1))

    def forward(self, x):
        var = torch.var(x, dim = 1, unbiased = False, keepdim = True)
        mean = torch.mean(x, dim = 1, keepdim = True)
        return (x - mean) / (var + self.eps).sqrt() * self.g + self.b


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = LayerNorm(dim)

    def forward(self, x):
        x = self.norm(x)
        return self.fn(x)


# building block modules
class ConvNextBlock(nn.Module):
    """ https://arxiv.org/abs/2201.03545 """

    def __init__(self, dim, dim_out, *, time_emb_dim = None, mult = 2, norm = True):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.GELU(),
            nn.Linear(time_emb_dim, dim)
        ) if exists(time_emb_dim) else None

        self.ds_conv = nn.Conv2d(dim, dim, 7, padding = 3, groups = dim)

        self.net = nn.Sequential(
            LayerNorm(dim) if norm else nn.Identity(),
            nn.Conv2d(dim, dim_out * mult, 3, padding = 1),
            nn.GELU(),
            nn.Conv2d(dim_out * mult, dim_out, 3, padding = 1)
        )

        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb = None):
        h = self.ds_conv(x)

        if exists(self.mlp):
            assert exists(time_emb), 'time emb must be passed in'
            condition = self.mlp(time_emb)
            h = h + condition[:, :, None, None]  # rearrange(condition, 'b c -> b c 1 1')

        h = self.net(h)
        return h + self.res_conv(x)


class LinearAttention(nn.Module):
    def __init__(self, dim, heads = 4, dim_head = 32):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        hidden_dim = dim_head * heads
        self.to_qkv = nn.Conv2d(dim, hidden_dim * 3, 1, bias = False)
        self.to_out = nn.Conv2d(hidden_dim, dim, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.to_qkv(x).chunk(3, dim = 1)
        # rearrange(t, 'b (h c) x y -> b h c (x y)', h = self.heads)
        q, k, v = (t.reshape(b, self.heads, -1, h * w) for t in qkv)
        q = q * self.scale

        k = k.softmax(dim = -1)
        context = torch.einsum('b h d n, b h e n -> b h d e', k, v)

        out = torch.einsum('b h d e, b h d n -> b h e n', context, q)
        out = out.reshape(b, -1, h, w)  # rearrange(out, 'b h c (x y) -> b (h c) x y', h = self.heads, x = h, y = w)
        return self.to_out(out)


# Main Model

class UnetConvNextBlock(nn.Module):
    def __init__(
        self,
        dim,
        out_dim = None,
        dim_mults=(1, 2, 4, 8),
        channels = 3,
        with_time_emb = True,
        output_mean_scale = False,
        residual = False
    ):
        super().__init__()
        self.channels = channels
        self.residual = residual
        self.output_mean_scale = output_mean_scale

        dims = [channels, *(dim * m for m in dim_mults)]
        in_out = list(zip(dims[:-1], dims[1:]))  # noqa: RUF007

        if with_time_emb:
            time_dim = dim
            self.time_mlp = nn.Sequential(
                SinusoidalPosEmb(dim),
                nn.Linear(dim, dim * 4),
                nn.GELU(),
                nn.Linear(dim * 4, dim)
            )
        else:
            time_dim = None
            self.time_mlp = None

        self.downs = nn.ModuleList([])
        self.ups = nn.ModuleList([])
        num_resolutions = len(in_out)

        for ind, (dim_in, dim_out) in enumerate(in_out):
            is_last = ind >= (num_resolutions - 1)

            self.downs.append(nn.ModuleList([
                ConvNextBlock(dim_in, dim_out, time_emb_dim = time_dim, norm = ind != 0),
                ConvNextBlock(dim_out, dim_out, time_emb_dim = time_dim),
                Residual(PreNorm(dim_out, LinearAttention(dim_out))),
                Downsample(dim_out) if not is_last else nn.Identity()
            ]))

        mid_dim = dims[-1]
        self.mid_block1 = ConvNextBlock(mid_dim, mid_dim, time_emb_dim = time_dim)
        self.mid_attn = Residual(PreNorm(mid_dim, LinearAttention(mid_dim)))
        self.mid_block2 = ConvNextBlock(mid_dim, mid_dim, time_emb_dim = time_dim)

        for ind, (dim_in, dim_out) in enumerate(reversed(in_out[1:])):
            is_last = ind >= (num_resolutions - 1)

            self.ups.append(nn.ModuleList([
                ConvNextBlock(dim_out * 2, dim_in, time_emb_dim = time_dim),
                ConvNextBlock(dim_in, dim_in, time_emb_dim = time_dim),
                Residual(PreNorm(dim_in, LinearAttention(dim_in))),
                Upsample(dim_in) if not is_last else nn.Identity()
            ]))

        out_dim = default(out_dim, channels)
        self.final_conv = nn.Sequential(
            ConvNextBlock(dim, dim),
            nn.Conv2d(dim, out_dim, 1),
            #nn.Tanh() # ADDED
        )

    def forward(self, x, time=None):
        orig_x = x
        t = None
        if time is not None and exists(self.time_mlp):
            t = self.time_mlp(time)

        original_mean = torch.mean(x, [1, 2, 3], keepdim=True)
        h = []

        for convnext, convnext2, attn, downsample in self.downs:
            x = convnext(x, t)
            x = convnext2(x, t)
            x = attn(x)
            h.append(x)
            x = downsample(x)

        x = self.mid_block1(x, t)
        x = self.mid_attn(x)
        x = self.mid_block2(x, t)

        for convnext, convnext2, attn, upsample in self.ups:
            x = torch.cat((x, h.pop()), dim=1)
            x = convnext(x, t)
            x = convnext2(x, t)
            x = attn(x)
            x = upsample(x)
        if self.residual:
            return self.final_conv(x) + orig_x

        out = self.final_conv(x)
        if self.output_mean_scale:
            out_mean = torch.mean(out, [1,2,3], keepdim=True)
            out = out - original_mean + out_mean

        return out


# ---- src/DenoisingDiffusionProcess/DenoisingDiffusionProcess.py ----------------------------------------------------

class DenoisingDiffusionProcess(nn.Module):

    def __init__(self,
                 generated_channels=3,
                 loss_fn=F.mse_loss,
                 schedule='linear',
                 num_timesteps=1000,
                 sampler=None,
                 bug=None,
                ):
        super().__init__()

        # Basic Params
        self.generated_channels=generated_channels
        self.num_timesteps=num_timesteps
        self.loss_fn=loss_fn
        self.bug=bug

        # Forward Process Used for Training
        self.forward_process=GaussianForwardProcess(num_timesteps=self.num_timesteps,
                                                    schedule=schedule, bug=bug)
        self.model=UnetConvNextBlock(dim=16,  # (port) 64
                                     dim_mults=(1,2,4),  # (port) (1,2,4,8)
                                     channels=self.generated_channels,
                                     out_dim=self.generated_channels,
                                     with_time_emb=True)

        # (port) the DDPM sampler (inference only) is left out

    def p_loss(self,output):
        """
            Assumes output is in [-1,+1] range
        """

        b,c,h,w=output.shape
        device=output.device

        # loss for training

        # input is the optional condition
        t = torch.randint(0, self.forward_process.num_timesteps, (b,), device=device).long()
        output_noisy, noise=self.forward_process(output,t,return_noise=True)

        # reverse pass
        noise_hat = self.model(output_noisy, t)

        # apply loss
        if self.bug == "target_is_clean_image":
            return self.loss_fn(output, noise_hat)
        return self.loss_fn(noise, noise_hat)


# ---- src/PixelDiffusion.py -----------------------------------------------------------------------------------------

class PixelDiffusion(pl.LightningModule):
    def __init__(self,
                 train_dataset,
                 valid_dataset=None,
                 num_timesteps=1000,
                 batch_size=1,
                 lr=1e-3,
                 bug=None):
        super().__init__()
        self.train_dataset = train_dataset
        self.valid_dataset = valid_dataset
        self.lr = lr
        self.batch_size=batch_size
        self.bug = bug

        self.model=DenoisingDiffusionProcess(num_timesteps=num_timesteps, bug=bug)

    def input_T(self, input):
        # By default, let the model accept samples in [0,1] range, and transform them automatically
        return (input.clip(0,1).mul_(2)).sub_(1)

    def output_T(self, input):
        # Inverse transform of model output from [-1,1] to [0,1] range
        return (input.add_(1)).div_(2)

    def training_step(self, batch, batch_idx):
        images=batch
        loss = self.model.p_loss(self.input_T(images))

        self.log('train_loss',loss)

        return loss

    def validation_step(self, batch, batch_idx):
        images=batch
        loss = self.model.p_loss(self.input_T(images))

        self.log('val_loss',loss)

        return loss

    def train_dataloader(self):
        return DataLoader(self.train_dataset,
                          batch_size=self.batch_size,
                          shuffle=True,
                          generator=torch.Generator().manual_seed(self._seed))  # (port) num_workers=4

    def configure_optimizers(self):
        return  torch.optim.AdamW(list(filter(lambda p: p.requires_grad, self.model.parameters())), lr=self.lr)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        if self.bug == "optimizer_zero_grad_overridden":
            # an override meant for gradient accumulation that never zeroes: the gradients pile up over steps
            return
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)


# ---- the data (port) -----------------------------------------------------------------------------------------------

class SyntheticMapTiles(Dataset):
    """Stands in for ``SimpleImageDataset('./data/maps/train', transforms=[RandomCrop((CROP_SIZE, CROP_SIZE))])``:
    24x24 RGB tiles in [0, 1] (blocks of a few flat colours crossed by a horizontal and a vertical road), a random
    16x16 crop of one per item."""

    def __init__(self, n, seed):
        gen = torch.Generator().manual_seed(seed)
        palette = torch.tensor([[0.35, 0.55, 0.3], [0.6, 0.6, 0.55], [0.3, 0.4, 0.6], [0.75, 0.7, 0.5]])
        tiles = []
        for _ in range(n):
            blocks = palette[torch.randint(0, 4, (3, 3), generator=gen)]  # 3x3 blocks of 8x8 pixels
            img = blocks.permute(2, 0, 1).repeat_interleave(8, 1).repeat_interleave(8, 2)
            r, c = (int(v) for v in torch.randint(2, TILE - 3, (2,), generator=gen))
            img[:, r:r + 2, :] = 0.95
            img[:, :, c:c + 2] = 0.95
            tiles.append((img + 0.03 * torch.randn(img.shape, generator=gen)).clamp(0, 1))
        self.tiles = torch.stack(tiles)

    def __len__(self):
        return len(self.tiles)

    def __getitem__(self, idx):
        i, j = (int(v) for v in torch.randint(0, TILE - CROP_SIZE + 1, (2,)))
        return self.tiles[idx, :, i:i + CROP_SIZE, j:j + CROP_SIZE].clone()


# ---- 02-Pixel-Diffusion.ipynb --------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_ds = SyntheticMapTiles(N_IMAGES, seed)

    model=PixelDiffusion(train_ds,
                         lr=1e-3,  # (port) 1e-4
                         batch_size=8,  # (port) 16
                         bug=bug)
    model._seed = seed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_steps=int(2e5))
    trainer.strategy.connect(model)
    model.trainer = trainer
    optimizer = model.configure_optimizers()
    loader = model.train_dataloader()
    train_step = automatic_step(model, optimizer, loader)

    # one draw of p_loss's inputs for the Program's batch (as p_loss makes them)
    gen = torch.Generator().manual_seed(seed + 1)
    output = model.input_T(train_ds.tiles[:8, :, :CROP_SIZE, :CROP_SIZE].clone())
    t = torch.randint(0, model.model.forward_process.num_timesteps, (8,), generator=gen).long()
    torch.manual_seed(seed + 2)
    output_noisy, noise = model.model.forward_process(output, t, return_noise=True)
    torch.manual_seed(seed)
    target = output if bug == "target_is_clean_image" else noise

    def loss_fn(noise_hat, target):  # p_loss's ``self.loss_fn(noise, noise_hat)``
        return model.model.loss_fn(target, noise_hat)

    return Program(name="diffusionfastforward_pixel", model=model.model.model, batch=((output_noisy, t), target),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the loss compares the network's output with the clean image instead of the noise that was added (an
    # x0-prediction target under the epsilon sampler's parameterization).
    Bug("target_is_clean_image", functools.partial(_build, bug="target_is_clean_image"), "learning_ledger",
        ("TASK",)),
    # classic schedule slip: the forward process uses the per-step alphas where their cumulative product belongs;
    # the noisy inputs stay close to the clean images at every t, unlike what the sampler assumes.
    Bug("alphas_not_cumulative", functools.partial(_build, bug="alphas_not_cumulative"), "learning_ledger",
        ("TASK",)),
    # classic Lightning pitfall: optimizer_zero_grad overridden (for accumulation) without ever zeroing; the
    # gradients accumulate over steps (a whole-model slip).
    Bug("optimizer_zero_grad_overridden", functools.partial(_build, bug="optimizer_zero_grad_overridden"),
        "step_probe", (), kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
