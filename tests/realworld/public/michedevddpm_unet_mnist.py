# ruff: noqa: RUF059, C408
"""Michedev's DDPMs-Pytorch: a Lightning ``GaussianDDPM`` (Ho et al.'s noise-prediction loss; the Improved-DDPM
variational term is off in the default config, ``vlb: false``) around ``UNetTimeStep`` (residual blocks with GroupNorm,
GELU, dropout and a learned projection of a sinusoidal time embedding, max-pool down-sampling, one self-attention
layer after the third block, nearest up-sampling with skip concatenations, and twice the input channels out: the
noise and the variance coefficients); linear beta schedule (2.5e-5 to 5e-3 over T 4000), Adam lr 1e-4, and the
repository's ``EMA`` callback (run at every batch start, it writes the moving average back into the parameters).

Source: https://github.com/Michedev/DDPMs-Pytorch
Commit: 4cdb52d5cee7070ddc243ecb781c9fe5e68d0ba8
Files: model/ddpm.py, model/unet.py, model/distributions.py (``x0_to_xt``), variance_scheduler/linear.py,
callbacks/ema.py, train.py, config/ (train.yaml, model/unet_paper.yaml, model_dataset/unet_paper-mnist.yaml,
scheduler/linear.yaml, optimizer/adam_ddpm.yaml, dataset/mnist.yaml)
License: MIT (Copyright (c) 2023 Michele De Vita; full text in LICENSES/Michedev-DDPMs-Pytorch.txt)
Domain: generative, diffusion (DDPM, epsilon prediction, Lightning module with an EMA callback)

Kept as written: ``timestep_embedding``, ``ResBlockTimeEmbed``, ``ImageSelfAttention`` (including its ``reshape`` of
``[b, c, w, h]`` to ``[b, w * h, c]`` and the sequence-first ``nn.MultiheadAttention``), ``UNetTimeStep`` (including
``channels[0] *= 2``), ``LinearScheduler``, ``x0_to_xt``, ``GaussianDDPM.__init__``/``forward``/``training_step``/
``configure_optimizers`` (``variational_loss``, used only with ``vlb`` true, is not ported: the branch raises),
``EMA`` (``on_train_start`` and
``on_train_batch_start``); the step is Lightning's automatic optimization for one optimizer without gradient
clipping (``gradient_clip_val`` 0.0): the EMA hook, then ``optimizer.step(closure)`` whose closure runs
``training_step``, ``zero_grad`` and ``backward``.

Deviations from the original:
- sizes for 2 CPU cores: images 1x28x28 -> 1x16x16, the UNet's channels [1, 32, 64, 64, 96] -> [1, 8, 16, 16, 24]
  (GroupNorm groups follow ``find_max_num_groups`` as written), ``time_embed_size`` 100 -> 32, batch 128 -> 16;
  T 4000, the schedule, dropout 0.1, EMA decay 0.99 and Adam lr 1e-4 kept;
- data: torchvision's MNIST with ``ToTensor`` is replaced by synthetic 16x16 digit-like images in [0, 1] made from
  ``seed`` (ten classes, each a fixed set of strokes, with jitter and pixel noise) and their class labels; the
  DataLoader is not shuffled, as in ``train.py``;
- Hydra, ``pl.seed_everything`` (``torch.manual_seed(seed)``), the Trainer, ``ModelCheckpoint``,
  ``EarlyStopping``, ``LoggerCallback``, validation and image generation are dropped; the Trainer's step is
  written out as above, the ``EMA`` hooks called by hand; the unused ``pytorch_lightning`` module stays the base
  class;
- one ``train_step`` is one training batch and returns ``training_step``'s ``loss``; the Program's batch is the
  first batch, its ``loss_fn`` the noise MSE (the model's ``training_step`` draws its own t and noise, so the
  declared batch is ``(x_t, t)`` from the first images with the noise as target);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

IMG, BATCH, N_IMAGES = 16, 16, 320
BUG = {"name": None}


# ---- model/unet.py -----------------------------------------------------------------------------------------------

def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
    ).to(device=timesteps.device)
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding.to(timesteps.device)


class ResBlockTimeEmbed(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, time_embed_size, p_dropout):
        super().__init__()
        num_groups_in = self.find_max_num_groups(in_channels)
        self.conv = nn.Sequential(
            nn.GroupNorm(num_groups_in, in_channels),
            nn.GELU(),
            nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding))
        self.relu = nn.ReLU()
        self.l_embedding = nn.Sequential(
            nn.GELU(),
            nn.Linear(time_embed_size, out_channels)
        )
        num_groups_out = self.find_max_num_groups(out_channels)
        self.out_layer = nn.Sequential(
            nn.GroupNorm(num_groups_out, out_channels),
            nn.GELU(),
            nn.Dropout(p_dropout),
            nn.Conv2d(out_channels, out_channels, kernel_size, stride, padding),
        )
        self.skip_connection = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding)

    def find_max_num_groups(self, in_channels):
        for i in range(4, 0, -1):
            if in_channels % i == 0:
                return i
        raise Exception()  # noqa: TRY002

    def forward(self, x, time_embed):
        h = self.conv(x)
        time_embed = self.l_embedding(time_embed)
        time_embed = time_embed.view(time_embed.shape[0], time_embed.shape[1], 1, 1)
        h = h + time_embed
        return self.out_layer(h) + self.skip_connection(x)


class ImageSelfAttention(nn.Module):
    def __init__(self, num_channels, num_heads=1):
        super().__init__()
        self.channels = num_channels
        self.heads = num_heads
        self.attn_layer = nn.MultiheadAttention(num_channels, num_heads=num_heads)

    def forward(self, x):
        b, c, w, h = x.shape
        x = x.reshape(b, w * h, c)
        attn_output, _ = self.attn_layer(x, x, x)
        return attn_output.reshape(b, c, w, h)


class UNetTimeStep(nn.Module):
    def __init__(self, channels, kernel_sizes, strides, paddings, downsample, p_dropouts, time_embed_size):
        super().__init__()
        assert len(channels) == (len(kernel_sizes) + 1) == (len(strides) + 1) == (len(paddings) + 1) == \
               (len(p_dropouts) + 1)
        self.channels = channels
        self.time_embed_size = time_embed_size
        self.downsample_blocks = nn.ModuleList([
            ResBlockTimeEmbed(channels[i], channels[i + 1], kernel_sizes[i], strides[i], paddings[i], time_embed_size, p_dropouts[i]) for i in range(len(channels) - 1)
        ])
        self.use_downsample = downsample
        self.downsample_op = nn.MaxPool2d(kernel_size=2)
        self.middle_block = ResBlockTimeEmbed(channels[-1], channels[-1], kernel_sizes[-1], strides[-1], paddings[-1], time_embed_size, p_dropouts[-1])
        channels[0] *= 2 # because the output is the image plus the estimated variance coefficients
        self.upsample_blocks = nn.ModuleList([
            ResBlockTimeEmbed((2 if i != 0 else 1) * channels[-i - 1], channels[-i - 2], kernel_sizes[-i - 1],
                              strides[-i - 1],
                              paddings[-i - 1], time_embed_size, p_dropouts[-i - 1]) for i in range(len(channels) - 1)
        ])
        self.dropouts = nn.ModuleList([nn.Dropout2d(p) for p in p_dropouts])
        self.p_dropouts = p_dropouts
        self.self_attn = ImageSelfAttention(channels[3])
        self.time_embed = nn.Sequential(
            nn.Linear(self.time_embed_size, self.time_embed_size),
            nn.SiLU(),
            nn.Linear(self.time_embed_size, self.time_embed_size),
        )

    def forward(self, x, t):
        x_channels = x.shape[1]
        time_embedding = self.time_embed(timestep_embedding(t, self.time_embed_size))
        hs = []
        h = x
        for i, downsample_block in enumerate(self.downsample_blocks):
            h = downsample_block(h, time_embedding)
            if i == 2:
                h = self.self_attn(h)
            h = self.dropouts[i](h)
            if i != (len(self.downsample_blocks) - 1): hs.append(h)
            if self.use_downsample and i != (len(self.downsample_blocks) - 1):
                h = self.downsample_op(h)
        h = self.middle_block(h, time_embedding)
        for i, upsample_block in enumerate(self.upsample_blocks):
            if i != 0:
                h = torch.cat([h, hs[-i]], dim=1)
            h = upsample_block(h, time_embedding)
            if self.use_downsample and (i != (len(self.upsample_blocks) - 1)):
                h = F.interpolate(h, size=hs[-i - 1].shape[-2:], mode='nearest')
        x_recon, v = h[:, :x_channels], h[:, x_channels:]
        return x_recon, v


# ---- variance_scheduler/linear.py, model/distributions.py ---------------------------------------------------------

class LinearScheduler:  # (port) the abstract base Scheduler holds only abstract methods
    def __init__(self, T, beta_start, beta_end):
        self.T = T
        self.beta_start = beta_start
        self.beta_end = beta_end
        self._beta = torch.linspace(beta_start, beta_end, T)
        self._alpha = 1.0 - self._beta
        self._alpha_hat = torch.cumprod(self._alpha, dim=0)
        self._alpha_hat_t_minus_1 = torch.roll(self._alpha_hat, shifts=1, dims=0)
        self._alpha_hat_t_minus_1[0] = self._alpha_hat_t_minus_1[1]
        self._beta_hat = (1 - self._alpha_hat_t_minus_1) / (1 - self._alpha_hat) * self._beta

    def get_alpha_hat(self):
        return self._alpha_hat

    def get_alphas(self):
        return self._alpha

    def get_betas(self):
        return self._beta

    def get_betas_hat(self):
        return self._beta_hat


def x0_to_xt(x_0, alpha_hat_t, eps=None):
    if eps is None:
        eps = torch.randn_like(x_0)
    if BUG["name"] == "x0_and_noise_coefficients_swapped":
        return torch.sqrt(alpha_hat_t) * eps + torch.sqrt(1 - alpha_hat_t) * x_0
    return torch.sqrt(alpha_hat_t) * x_0 + torch.sqrt(1 - alpha_hat_t) * eps


# ---- model/ddpm.py -----------------------------------------------------------------------------------------------

class GaussianDDPM(pl.LightningModule):
    def __init__(self, denoiser_module, opt, T, variance_scheduler, lambda_variational, width, height,
                 input_channels, logging_freq, vlb, init_step_vlb, bug=None):
        super().__init__()
        self.input_channels = input_channels
        self.denoiser_module = denoiser_module
        self.T = T
        self.opt_class = opt

        self.var_scheduler = variance_scheduler
        self.lambda_variational = lambda_variational
        self.alphas_hat = self.var_scheduler.get_alpha_hat().to(self.device)
        self.alphas = self.var_scheduler.get_alphas().to(self.device)
        self.betas = self.var_scheduler.get_betas().to(self.device)
        self.betas_hat = self.var_scheduler.get_betas_hat().to(self.device)
        self.mse = nn.MSELoss()
        self.width = width
        self.height = height
        self.logging_freq = logging_freq
        self.vlb = vlb
        self.init_step_vlb = init_step_vlb
        self.iteration = 0
        self.init_step_vlb = max(1, self.init_step_vlb) # make sure that init_step_vlb is at least 1
        self.bug = bug  # (port)

    def forward(self, x, t):
        return self.denoiser_module(x, t)

    def training_step(self, batch, batch_idx):
        X, y = batch
        with torch.no_grad():
            # Map image values from [0, 1] to [-1, 1]
            X = X * 2 - 1
        # Sample a random time step t from 0 to T-1 for each image in the batch
        t = torch.randint(0, self.T - 1, (X.shape[0],), device=X.device)  # todo add importance sampling
        # Compute alpha_hat for the selected time steps
        alpha_hat = self.alphas_hat[t].reshape(-1, 1, 1, 1)
        # Sample noise eps from a normal distribution with the same shape as X
        eps = torch.randn_like(X)
        # Compute the intermediate image x_t from the original image X, alpha_hat, and eps
        x_t = x0_to_xt(X, alpha_hat, eps)  # go from x_0 to x_t with the formula
        if self.bug == "t_redrawn_for_model":
            t = torch.randint(0, self.T - 1, (X.shape[0],), device=X.device)
        # Run the intermediate image x_t through the model to obtain predicted noise and scale vectors (pred_eps, v)
        pred_eps, v = self(x_t, t)
        # Compute the loss for the predicted noise
        loss = 0.0
        noise_loss = self.mse(eps, pred_eps)
        loss = loss + noise_loss
        # If using the VLB loss, compute the VLB loss and add it to the total loss
        use_vlb = self.iteration >= self.init_step_vlb and self.vlb
        if use_vlb:
            raise NotImplementedError("(port) vlb is false in the config; variational_loss is not ported")

        self.iteration += 1

        return dict(loss=loss, noise_loss=noise_loss, vlb_loss=None)

    def configure_optimizers(self):
        return self.opt_class(params=self.parameters())


# ---- callbacks/ema.py --------------------------------------------------------------------------------------------

class EMA(pl.Callback):
    def __init__(self, decay_factor):
        assert 0.0 <= decay_factor <= 1.0
        self.decay_factor = decay_factor
        self.dict_params = dict()

    @torch.no_grad()
    def on_train_start(self, trainer, pl_module):
        for n, p in pl_module.named_parameters():
            self.dict_params[n] = p

    @torch.no_grad()
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, unused=0):
        for n, p in pl_module.named_parameters():
            self.dict_params[n] = self.dict_params[n] * (1.0 - self.decay_factor) + p * self.decay_factor
            p[:] = self.dict_params[n][:]


# ---- data (port) -------------------------------------------------------------------------------------------------

def synthetic_digits(seed, n=N_IMAGES):
    """Ten stroke patterns on 16x16 (one per class), shifted by up to one pixel, with pixel noise, in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    protos = torch.zeros(10, IMG, IMG)
    for k in range(10):
        for _s in range(3):
            r0, c0 = torch.randint(2, IMG - 6, (2,), generator=gen).tolist()
            if torch.rand(1, generator=gen).item() < 0.5:
                protos[k, r0, c0:c0 + 6] = 1.0
                protos[k, r0 + 1, c0:c0 + 6] = 1.0
            else:
                protos[k, r0:r0 + 6, c0] = 1.0
                protos[k, r0:r0 + 6, c0 + 1] = 1.0
    labels = torch.arange(n) % 10
    shifts = torch.randint(-1, 2, (n, 2), generator=gen)
    images = torch.stack([torch.roll(protos[labels[i]], tuple(shifts[i].tolist()), (0, 1)) for i in range(n)])
    images = (images + 0.05 * torch.randn(n, IMG, IMG, generator=gen)).clamp(0, 1)
    return images.unsqueeze(1), labels


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    BUG["name"] = bug
    torch.manual_seed(seed)
    noise_steps = 4_000
    scheduler = LinearScheduler(T=noise_steps, beta_start=0.000025, beta_end=0.005)
    opt = functools.partial(torch.optim.Adam, lr=0.0001, weight_decay=0.0)
    denoiser = UNetTimeStep(channels=[1, 8, 16, 16, 24], kernel_sizes=[3, 3, 3, 3], strides=[1, 1, 1, 1],
                            paddings=[1, 1, 1, 1], p_dropouts=[0.1, 0.1, 0.1, 0.1], time_embed_size=32,
                            downsample=True)  # (port) channels [1, 32, 64, 64, 96], time_embed_size 100
    model = GaussianDDPM(denoiser, opt, T=noise_steps, variance_scheduler=scheduler, lambda_variational=0.0001,
                         width=IMG, height=IMG, input_channels=1, logging_freq=1_000, vlb=False,
                         init_step_vlb=1_000, bug=bug)
    images, labels = synthetic_digits(seed)
    train_dl = DataLoader(TensorDataset(images, labels), batch_size=BATCH, pin_memory=False)
    optimizer = model.configure_optimizers()
    ema = EMA(0.99)
    ema.on_train_start(None, model)
    state = {"it": iter(train_dl), "batch_idx": 0}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"], state["batch_idx"] = iter(train_dl), 0
            batch = next(state["it"])
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        model.train()
        ema.on_train_batch_start(None, model, batch, batch_idx)
        out = {}

        def closure():
            loss = model.training_step(batch, batch_idx)["loss"]
            optimizer.zero_grad()
            loss.backward()
            out["loss"] = loss.detach()
            return loss

        optimizer.step(closure)
        return out["loss"]

    # the declared batch: the first images noised at t drawn from a copy of the generator, the noise as target
    gen = torch.Generator().manual_seed(seed + 1)
    X = images[:BATCH] * 2 - 1
    t = torch.randint(0, noise_steps - 1, (BATCH,), generator=gen)
    eps = torch.randn(X.shape, generator=gen)
    x_t = x0_to_xt(X, model.alphas_hat[t].reshape(-1, 1, 1, 1), eps)

    def loss_fn(out, target):  # training_step's noise MSE on the model's (pred_eps, v)
        return model.mse(target, out[0])

    return Program(name="michedevddpm_unet_mnist", model=model, batch=((x_t, t), eps), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=train_dl)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the time step drawn a second time for the network call: the UNet is told a noise level other than the
    # one that made x_t, so the time embedding carries no information about the noise it must predict.
    Bug("t_redrawn_for_model", functools.partial(_build, bug="t_redrawn_for_model"), "learning_ledger", ("TASK",)),
    # classic: ``x0_to_xt`` written ``sqrt(alpha_hat) * eps + sqrt(1 - alpha_hat) * x_0``: at small t x_t is almost
    # the noise itself (the target read off the input), at large t almost the clean image (the noise invisible).
    Bug("x0_and_noise_coefficients_swapped", functools.partial(_build, bug="x0_and_noise_coefficients_swapped"),
        "learning_ledger", ("TASK",)),
]
