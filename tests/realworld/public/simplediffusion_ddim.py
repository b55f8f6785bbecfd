"""Filip Basara's simple-diffusion: ``train.py`` trains a DDIM-sampled diffusion model on images in [-1, 1]: a UNet
(time-embedded GroupNorm residual blocks, attention at the lower resolutions, skip concatenation) predicts the noise
added by a cosine-schedule forward process at a uniformly drawn timestep, under an L1 loss; AdamW (lr 1e-4, betas
(0.9, 0.99)), diffusers' cosine schedule with linear warm-up stepped per batch, the (disabled) ``GradScaler`` and
``autocast`` of the fp16 option, and an EMA copy updated after every step with a gamma that rises from 0.996 to 1 on
a cosine.

Source: https://github.com/filipbasara0/simple-diffusion
Commit: c123f983b111937976bf7c484ef0178f9f9ce8cd
Files: train.py (the model, scheduler and EMA in the helper ``_simplediffusion_lib.py``: model/unet.py,
model/_attention.py, scheduler/ddim.py, ema.py)
License: MIT (Copyright (c) 2022 Filip Basara; full text in LICENSES/filipbasara0-simple-diffusion.txt)
Domain: generative, diffusion (DDPM training for a DDIM sampler, EMA weights)

Kept as written: the loop body of ``main`` (noise, timesteps, ``add_noise``, ``zero_grad``, the L1 loss on
``model(...)["sample"]``, the scaler's backward/step/update, the EMA update and gamma schedule, the clip option after
the step, ``lr_scheduler.step()``), the optimizer, ``total_num_steps`` with its 10% margin, the command-line defaults
(``use_clip_grad`` and ``fp16_precision`` off).

Deviations from the original:
- sizes for 2 CPU cores: ``resolution`` 64 -> 16, ``hidden_dims`` [64, 128, 256, 512] -> [16, 32, 32] (one
  downsampling, attention at 8x8), ``n_timesteps`` 1000 -> 100, batch 16 kept; ``lr_warmup_steps`` 100 -> 5 and the
  lr 1e-4 -> 1e-3 so that the 30 self-check steps train (``num_epochs`` 1 of a 20-batch loader);
- diffusers' ``get_scheduler("cosine", ...)`` is written out as its ``LambdaLR`` (linear warm-up, then half a cosine
  to 0); einops is written out in the helper; ``GradScaler``/``autocast`` are ``torch.amp``'s CPU versions, disabled
  as upstream's default;
- data: the Hugging Face / pickled-dataframe image datasets are replaced by synthetic 16x16 RGB images in [-1, 1]
  made from ``seed`` (smooth colour gradients with a blob), the batches dicts with an ``"image"`` key as upstream's;
  the loader shuffles with a ``torch.Generator(seed)``;
- the seeding at import, ``torchinfo.summary``, tqdm, sampling with the EMA model and saving are left out;
- one ``train_step`` is one iteration of the inner loop and returns the loss; the Program's batch is one step's
  noisy images and timesteps with the noise as target, its ``loss_fn`` the L1 loss on the model's ``"sample"``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _simplediffusion_lib import EMA, DDIMScheduler, UNet

n_timesteps = 100  # (port) 1000
RES, BATCH = 16, 16


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, num_cycles=0.5):
    """diffusers' ``get_scheduler("cosine", ...)`` (transformers' cosine schedule with warm-up), written out."""
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class SyntheticImages(torch.utils.data.Dataset):
    """16x16 RGB images in [-1, 1]: a colour gradient in a random direction plus a Gaussian blob, as dicts."""

    def __init__(self, seed, n=320):
        gen = torch.Generator().manual_seed(seed)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, RES), torch.linspace(-1, 1, RES), indexing="ij")
        ang = torch.rand(n, 1, 1, generator=gen) * 6.2832
        ramp = (torch.cos(ang) * xs + torch.sin(ang) * ys)[:, None]
        c = torch.rand(n, 2, 2, generator=gen) * 1.6 - 0.8
        centre = torch.rand(n, 2, 1, 1, generator=gen) * 1.2 - 0.6
        blob = torch.exp(-((xs - centre[:, 0]) ** 2 + (ys - centre[:, 1]) ** 2) / 0.1)[:, None]
        colour = torch.rand(n, 3, 1, 1, generator=gen) * 2 - 1
        self.images = (c[:, :1, :1, None] + 0.5 * ramp * colour + blob * c[:, 1:, 1:, None]).clamp(-1, 1)

    def __getitem__(self, i):
        return {"image": self.images[i]}

    def __len__(self):
        return len(self.images)


def make_args():
    return {"resolution": RES, "train_batch_size": BATCH, "num_epochs": 1, "gradient_accumulation_steps": 1,
            "learning_rate": 1e-3, "lr_warmup_steps": 5, "adam_beta1": 0.9, "adam_beta2": 0.99,  # (port) 1e-4, 100
            "adam_weight_decay": 0.0, "use_clip_grad": False, "fp16_precision": False, "gamma": 0.996}


def _first_batch(seed, x0, noise_scheduler, bug):
    """One step's evidence: the noisy images and their timesteps as inputs, the noise to predict as target."""
    gen = torch.Generator().manual_seed(seed + 1)
    noise0 = torch.randn(x0.shape, generator=gen)
    t0 = torch.randint(0, n_timesteps, (len(x0),), generator=gen)
    target0 = torch.randn(x0.shape, generator=gen) if bug == "target_noise_redrawn" else noise0
    return (noise_scheduler.add_noise(x0, noise0, t0), t0), target0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = make_args()
    model = UNet(3, image_size=args["resolution"], hidden_dims=[16, 32, 32])  # (port) [64, 128, 256, 512]
    noise_scheduler = DDIMScheduler(num_train_timesteps=n_timesteps, beta_schedule="cosine")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["learning_rate"],
                                  betas=(args["adam_beta1"], args["adam_beta2"]),
                                  weight_decay=args["adam_weight_decay"])
    train_dataloader = torch.utils.data.DataLoader(SyntheticImages(seed), batch_size=args["train_batch_size"],
                                                   shuffle=True, generator=torch.Generator().manual_seed(seed))
    steps_per_epcoch = len(train_dataloader)
    total_num_steps = (steps_per_epcoch * args["num_epochs"]) // args["gradient_accumulation_steps"]
    total_num_steps += int(total_num_steps * 10/100)
    state = {"gamma": args["gamma"], "global_step": 0, "it": iter(train_dataloader)}
    ema = EMA(model, state["gamma"], total_num_steps, bug=bug)
    lr_scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=args["lr_warmup_steps"],
                                                   num_training_steps=total_num_steps)
    scaler = torch.amp.GradScaler("cpu", enabled=args["fp16_precision"])

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_dataloader)
            batch = next(state["it"])
        orig_images = batch["image"]

        batch_size = orig_images.shape[0]
        noise = torch.randn(orig_images.shape)
        timesteps = torch.randint(0, noise_scheduler.num_train_timesteps, (batch_size,)).long()
        noisy_images = noise_scheduler.add_noise(orig_images, noise, timesteps)
        if bug == "target_noise_redrawn":
            noise = torch.randn(orig_images.shape)  # a fresh draw, not the noise that was added

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        with torch.autocast("cpu", enabled=args["fp16_precision"]):
            noise_pred = model(noisy_images, timesteps)["sample"]
            loss = F.l1_loss(noise_pred, noise)

        scaler.scale(loss).backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        scaler.step(optimizer)
        scaler.update()

        ema.update_params(state["gamma"])
        state["gamma"] = ema.update_gamma(state["global_step"])

        if args["use_clip_grad"]:
            clip_grad_norm_(model.parameters(), 1.0)

        lr_scheduler.step()
        state["global_step"] += 1
        return loss.detach()

    batch = _first_batch(seed, train_dataloader.dataset.images[:BATCH], noise_scheduler, bug)
    return Program(name="simplediffusion_ddim", model=model, batch=batch,
                   loss_fn=lambda out, target: F.l1_loss(out["sample"], target), optimizer=optimizer,
                   train_step=train_step, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the target noise drawn again after ``add_noise`` (a second ``torch.randn`` where the first was meant):
    # the model is asked for noise it never saw, and learns to predict zero.
    Bug("target_noise_redrawn", functools.partial(_build, bug="target_noise_redrawn"), "learning_ledger", ("TASK",)),
    # classic: ``lerp_``'s roles swapped in ``EMA.update_params`` (the online weights pulled toward the EMA copy):
    # every step the trained weights are dragged back toward their initial values.
    Bug("ema_update_reversed", functools.partial(_build, bug="ema_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # classic: ``optimizer.zero_grad()`` moved between the backward and the scaler's step: every step applies an
    # all-zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
