"""VDVAE (very deep hierarchical VAE) trained by ``train.py`` with the ``cifar10`` hyperparameters: a bottom-up
residual encoder of bottleneck blocks with average-pool downsampling, a top-down decoder of ``DecBlock``s (each a
posterior from the decoder state and the encoder's activations at its resolution, a prior with a residual feature
path, a diagonal-Gaussian latent drawn by reparameterization, analytical KL), learned biases at each resolution,
a discretized mixture-of-logistics output (``DmolNet``), the negative ELBO per dimension; AdamW (betas 0.9, 0.9),
linear warm-up (``LambdaLR``), gradient-norm clipping with an update skipped on NaNs or a norm over
``skip_threshold``, an EMA copy of the model updated after each update and used for evaluation.

Source: https://github.com/openai/vdvae
Commit: ea35b490313bc33e7f8ac63dd8132f3cc1a729b4
Files: train.py (training_step, train_loop, eval_step), train_helpers.py (load_vaes, load_opt, linear_warmup,
       update_ema), hps.py (the cifar10 set and the defaults), data.py (the cifar10 branch, preprocess_func)
       (the model, from vae.py and vae_helpers.py, in the helper ``_vdvae_lib.py``)
License: MIT (Copyright (c) 2020 OpenAI; full text in LICENSES/openai-vdvae.txt)
Domain: generative, hierarchical VAE (top-down latents, discretized logistic mixture likelihood, EMA)

Deviations from the original:
- sizes: images 32x32 -> 8x8, dec_blocks "1x1,4m1,4x2,8m4,8x5,16m8,16x10,32m16,32x21" -> "1x1,4m1,4x2,8m4,8x2",
  enc_blocks "32x11,32d2,16x6,16d2,8x6,8d2,4x3,4d4,1x3" -> "8x2,8d2,4x2,4d4,1x2" (the same resolutions' pattern,
  from 8 down), width 384 -> 16, zdim 16 -> 4, num_mixtures 10 -> 2; lr 2e-4 -> 2e-3 and warmup_iters 100 -> 5
  (30 steps); the rest as given (n_batch 16, wd 0.01, ema_rate 0.9999, grad_clip 200, skip_threshold 400,
  adam betas (0.9, 0.9), bottleneck_multiple 0.25, no_bias_above 64);
- data: CIFAR-10 is replaced by 512 synthetic 8x8 RGB images (NHWC, 0..255 integers) made from ``seed`` (a smooth
  colour gradient per image with coupled channels), and 64 more for validation; ``preprocess_func``'s cifar10
  branch runs as written (input shifted by -120.63838 and scaled by 1 / 64.16736, the loss target mapped to
  [-1, 1]);
- no MPI / DDP, no CUDA (``.cuda()`` dropped, ``get_cpu_stats_over_ranks`` is the identity on one process, its
  ``.item()`` reads kept), no logging, image writing or checkpoints; ``H`` is ``hps.py``'s ``Hyperparams``;
- one ``train_step`` is one iteration of ``train_loop`` (``training_step`` then ``scheduler.step()``);
- ``eval_fn`` is ``eval_step``: the EMA model's ELBO on a validation batch;
- the ``bug`` switches select the variants in ``BUGS`` (two are read from ``H.bug`` inside the helper); with
  ``bug=None`` the copied lines run as written.
"""

# ruff: noqa: C408

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch.optim import AdamW
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _vdvae_lib import VAE

N_TRAIN, N_VALID, IMAGE_SIZE = 512, 64, 8


# ---- hps.py ---------------------------------------------------------------------------------------------------

class Hyperparams(dict):
    def __getattr__(self, attr):
        try:
            return self[attr]
        except KeyError:
            return None

    def __setattr__(self, attr, value):
        self[attr] = value


def cifar10_hps(bug=None):
    H = Hyperparams()
    # the argparse defaults the cifar10 set does not override
    H.custom_width_str, H.bottleneck_multiple, H.no_bias_above, H.num_mixtures = '', 0.25, 64, 2
    H.grad_clip, H.skip_threshold, H.adam_beta1, H.adam_beta2 = 200.0, 400.0, 0.9, 0.9
    # cifar10 (sizes changed, see the header)
    H.width = 16
    H.lr = 0.002
    H.zdim = 4
    H.wd = 0.01
    H.dec_blocks = "1x1,4m1,4x2,8m4,8x2"
    H.enc_blocks = "8x2,8d2,4x2,4d4,1x2"
    H.warmup_iters = 5
    H.dataset = 'cifar10'
    H.n_batch = 16
    H.ema_rate = 0.9999
    H.bug = bug
    return H


# ---- data.py --------------------------------------------------------------------------------------------------

def make_images(gen, n):
    """Per image a colour gradient along a random direction, channels coupled; NHWC, integers 0..255."""
    coords = torch.linspace(-1, 1, IMAGE_SIZE)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    angle = torch.rand(n, 1, 1, generator=gen) * 2 * np.pi
    ramp = torch.cos(angle) * xx + torch.sin(angle) * yy
    base = torch.rand(n, 1, 1, 3, generator=gen) * 0.4 + 0.3
    gain = torch.rand(n, 1, 1, 3, generator=gen) * 0.2 + 0.05
    return torch.round((base + gain * ramp[..., None]).clamp(0, 1) * 255)


def set_up_data(H, gen):
    shift_loss = -127.5
    scale_loss = 1. / 127.5
    trX, vaX = make_images(gen, N_TRAIN), make_images(gen, N_VALID)
    H.image_size = IMAGE_SIZE
    H.image_channels = 3
    shift = -120.63838
    scale = 1. / 64.16736

    do_low_bit = H.dataset in ['ffhq_256']

    def preprocess_func(x):
        'takes in a data example and returns the preprocessed input'
        'as well as the input processed for the loss'
        inp = x[0].float()
        out = inp.clone()
        inp.add_(shift).mul_(scale)
        if do_low_bit:
            # 5 bits of precision
            out.mul_(1. / 8.).floor_().mul_(8.)
        out.add_(shift_loss).mul_(scale_loss)
        return inp, out

    return H, TensorDataset(trX), TensorDataset(vaX), preprocess_func


# ---- train_helpers.py, train.py -------------------------------------------------------------------------------

def update_ema(vae, ema_vae, ema_rate):
    for p1, p2 in zip(vae.parameters(), ema_vae.parameters()):
        p2.data.mul_(ema_rate)
        p2.data.add_(p1.data * (1 - ema_rate))


def linear_warmup(warmup_iters):
    def f(iteration):
        return 1.0 if iteration > warmup_iters else iteration / warmup_iters
    return f


def load_vaes(H):
    vae = VAE(H)
    ema_vae = VAE(H)
    ema_vae.load_state_dict(vae.state_dict())
    ema_vae.requires_grad_(False)
    return vae, ema_vae


def training_step(H, data_input, target, vae, ema_vae, optimizer, iterate):
    if H.bug != "zero_grad_dropped":
        vae.zero_grad()
    stats = vae.forward(data_input, target)
    stats['elbo'].backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(vae.parameters(), H.grad_clip).item()
    distortion_nans = torch.isnan(stats['distortion']).sum()
    rate_nans = torch.isnan(stats['rate']).sum()
    stats.update(dict(rate_nans=0 if rate_nans == 0 else 1, distortion_nans=0 if distortion_nans == 0 else 1))
    stats = {k: (v.item() if torch.is_tensor(v) else v) for k, v in stats.items()}  # get_cpu_stats_over_ranks

    skipped_updates = 1
    # only update if no rank has a nan and if the grad norm is below a specific threshold
    if stats['distortion_nans'] == 0 and stats['rate_nans'] == 0 and (H.skip_threshold == -1 or grad_norm < H.skip_threshold):
        optimizer.step()
        skipped_updates = 0
        update_ema(vae, ema_vae, H.ema_rate)

    stats.update(skipped_updates=skipped_updates, grad_norm=grad_norm)
    return stats


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    H, data_train, data_valid, preprocess_fn = set_up_data(cifar10_hps(bug), gen)
    vae, ema_vae = load_vaes(H)
    optimizer = AdamW(vae.parameters(), weight_decay=H.wd, lr=H.lr, betas=(H.adam_beta1, H.adam_beta2))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=linear_warmup(H.warmup_iters))
    H.ema_rate = torch.as_tensor(H.ema_rate)
    loader = DataLoader(data_train, batch_size=H.n_batch, drop_last=True, shuffle=True)

    def train_loop():
        iterate = 0
        for _epoch in range(10 ** 6):
            for x in loader:
                data_input, target = preprocess_fn(x)
                training_stats = training_step(H, data_input, target, vae, ema_vae, optimizer, iterate)
                scheduler.step()
                iterate += 1
                yield training_stats['elbo']

    def eval_fn(model, batch):
        # eval_step(data_input, target, ema_vae)
        with torch.no_grad():
            stats = ema_vae.forward(*batch)
        return float(stats['elbo'])

    data_input, target = preprocess_fn(next(iter(DataLoader(data_valid, batch_size=H.n_batch))))
    steps = train_loop()
    return Program(name="vdvae_cifar", model=vae, batch=({"x": data_input, "x_target": target}, target),
                   loss_fn=lambda stats, _target: stats['elbo'], optimizer=optimizer, train_step=lambda: next(steps),
                   eval_fn=lambda model, batch: eval_fn(model, (data_input, target)), loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # each DecBlock's posterior fed the decoder state twice instead of [state, encoder activations]: the latents
    # carry nothing about the image and the reconstruction cannot depend on it.
    Bug("posterior_ignores_encoder", functools.partial(_build, bug="posterior_ignores_encoder"), "learning_ledger",
        ("DEPENDENCY",)),
    # the KL rate subtracted from the distortion: the "ELBO" rewards posteriors far from their priors.
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # vae.zero_grad() left out of training_step: every step's gradient is added to all the earlier ones (clipped at
    # 200, and the update skipped once the accumulated norm passes 400).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
