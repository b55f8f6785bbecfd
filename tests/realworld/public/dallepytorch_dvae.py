"""The discrete VAE of lucidrains' DALLE-pytorch, trained by its ``train_vae.py``: a strided-convolution encoder to
``num_tokens`` logits per position (with residual blocks), a Gumbel-softmax relaxation (temperature ``temp``) over
the token axis mixing a learned codebook, a transposed-convolution decoder, the reconstruction loss (MSE) on
images normalized to [-1, 1] inside the model plus a KL to the uniform prior (weight 0 by default); Adam (lr 1e-3)
with ``ExponentialLR`` (gamma 0.98) and the temperature annealed every 100 iterations.

Source: https://github.com/lucidrains/DALLE-pytorch
Commit: 58c1e1a4fef10725a79bd45cdb5581c03e3e59e7
Files: train_vae.py, dalle_pytorch/dalle_pytorch.py (``ResBlock``, ``DiscreteVAE``, helpers)
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-DALLE-pytorch.txt)
Domain: vision, generative (discrete VAE with a Gumbel-softmax bottleneck, the image tokenizer of DALL-E)

Kept as written: ``DiscreteVAE`` (encoder and decoder layer lists, ``ResBlock``, the codebook, ``norm``,
``forward`` with ``F.gumbel_softmax(logits, tau=temp, dim=1, hard=self.straight_through)``, the einsum with the
codebook, the reconstruction loss and the KL term with its weight), train_vae.py's argparse defaults (lr 1e-3,
lr_decay_rate 0.98, starting_temp 1, temp_min 0.5, anneal_rate 1e-6, kl_loss_weight 0, no smooth L1) and its loop
body (``distr_opt.zero_grad()``, ``loss.backward()``, ``distr_opt.step()``; every 100th iteration the temperature
anneal ``temp = max(temp * exp(-ANNEAL_RATE * global_step), TEMP_MIN)`` and ``distr_sched.step()``;
``global_step += 1``).

Deviations from the original:
- sizes for 2 CPU cores: image_size 128 -> 16, num_layers 3 -> 2 (a 4x4 token grid), num_tokens 8192 -> 64,
  emb_dim (codebook_dim) 512 -> 32, hidden_dim 256 -> 16, num_resnet_blocks 2 -> 1; batch_size 8 kept;
- data: the ``ImageFolder`` (Resize, CenterCrop, ToTensor) is replaced by 128 synthetic 16x16 RGB images in [0, 1]
  made from ``seed`` (a soft disc or bar of a random colour on a greyish colour gradient); the DataLoader shuffles with a
  seeded generator;
- einops' ``rearrange`` is written out with ``view``/``permute`` (the same layouts); CUDA, the distributed backends
  (the non-DeepSpeed path is the one copied: ``distr_vae``, ``distr_opt`` and ``distr_sched`` are the plain
  objects), wandb, the image grids, the printing and the checkpoints are left out;
- one ``train_step`` is one iteration of the epoch loop (a new epoch restarts the loader), returning the loss; the
  Program's model is the VAE, its batch ``(images, images)`` and ``loss_fn`` the VAE's loss on its output
  (``loss_fn(norm(images), out)`` plus the KL term, at weight 0);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from math import log2, sqrt

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.optim import Adam
from torch.optim.lr_scheduler import ExponentialLR
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIZE = 16  # (port) 128
N_IMAGES = 128


# ---- dalle_pytorch/dalle_pytorch.py --------------------------------------------------------------------------------

def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def eval_decorator(fn):
    def inner(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        out = fn(model, *args, **kwargs)
        model.train(was_training)
        return out
    return inner


def log(t, eps = 1e-20):
    return torch.log(t.clamp(min = eps))


class ResBlock(nn.Module):
    def __init__(self, chan):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(chan, chan, 3, padding = 1),
            nn.ReLU(),
            nn.Conv2d(chan, chan, 3, padding = 1),
            nn.ReLU(),
            nn.Conv2d(chan, chan, 1)
        )

    def forward(self, x):
        return self.net(x) + x


class DiscreteVAE(nn.Module):
    def __init__(
        self,
        image_size = 256,
        num_tokens = 512,
        codebook_dim = 512,
        num_layers = 3,
        num_resnet_blocks = 0,
        hidden_dim = 64,
        channels = 3,
        smooth_l1_loss = False,
        temperature = 0.9,
        straight_through = False,
        reinmax = False,
        kl_div_loss_weight = 0.,
        normalization = ((*((0.5,) * 3), 0), (*((0.5,) * 3), 1)),
        bug = None,
    ):
        super().__init__()
        assert log2(image_size).is_integer(), 'image size must be a power of 2'
        assert num_layers >= 1, 'number of layers must be greater than or equal to 1'
        has_resblocks = num_resnet_blocks > 0

        self.channels = channels
        self.image_size = image_size
        self.num_tokens = num_tokens
        self.num_layers = num_layers
        self.temperature = temperature
        self.straight_through = straight_through
        self.reinmax = reinmax
        self.bug = bug

        self.codebook = nn.Embedding(num_tokens, codebook_dim)

        enc_chans = [hidden_dim] * num_layers
        dec_chans = list(reversed(enc_chans))

        enc_chans = [channels, *enc_chans]

        dec_init_chan = codebook_dim if not has_resblocks else dec_chans[0]
        dec_chans = [dec_init_chan, *dec_chans]

        enc_chans_io, dec_chans_io = (list(zip(t[:-1], t[1:])) for t in (enc_chans, dec_chans))  # noqa: RUF007

        enc_layers = []
        dec_layers = []

        for (enc_in, enc_out), (dec_in, dec_out) in zip(enc_chans_io, dec_chans_io):
            enc_layers.append(nn.Sequential(nn.Conv2d(enc_in, enc_out, 4, stride = 2, padding = 1), nn.ReLU()))
            dec_layers.append(nn.Sequential(nn.ConvTranspose2d(dec_in, dec_out, 4, stride = 2, padding = 1), nn.ReLU()))

        for _ in range(num_resnet_blocks):
            dec_layers.insert(0, ResBlock(dec_chans[1]))
            enc_layers.append(ResBlock(enc_chans[-1]))

        if num_resnet_blocks > 0:
            dec_layers.insert(0, nn.Conv2d(codebook_dim, dec_chans[1], 1))

        enc_layers.append(nn.Conv2d(enc_chans[-1], num_tokens, 1))
        dec_layers.append(nn.Conv2d(dec_chans[-1], channels, 1))

        self.encoder = nn.Sequential(*enc_layers)
        self.decoder = nn.Sequential(*dec_layers)

        self.loss_fn = F.smooth_l1_loss if smooth_l1_loss else F.mse_loss
        self.kl_div_loss_weight = kl_div_loss_weight

        # take care of normalization within class
        self.normalization = tuple(t[:channels] for t in normalization)

    def norm(self, images):
        if not exists(self.normalization):
            return images

        means, stds = (torch.as_tensor(t).to(images) for t in self.normalization)
        means, stds = (t.view(1, -1, 1, 1) for t in (means, stds))  # rearrange(t, 'c -> () c () ()')
        images = images.clone()
        images.sub_(means).div_(stds)
        return images

    @torch.no_grad()
    @eval_decorator
    def get_codebook_indices(self, images):
        logits = self(images, return_logits = True)
        codebook_indices = logits.argmax(dim = 1).flatten(1)
        return codebook_indices

    def decode(
        self,
        img_seq
    ):
        image_embeds = self.codebook(img_seq)
        b, n, d = image_embeds.shape
        h = w = int(sqrt(n))

        image_embeds = image_embeds.view(b, h, w, d).permute(0, 3, 1, 2)  # 'b (h w) d -> b d h w'
        images = self.decoder(image_embeds)
        return images

    def forward(
        self,
        img,
        return_loss = False,
        return_recons = False,
        return_logits = False,
        temp = None
    ):
        device, num_tokens, image_size, kl_div_loss_weight = img.device, self.num_tokens, self.image_size, self.kl_div_loss_weight
        assert img.shape[-1] == image_size and img.shape[-2] == image_size, f'input must have the correct image size {image_size}'

        img = self.norm(img)

        logits = self.encoder(img)

        if return_logits:
            return logits # return logits for getting hard image indices for DALL-E training

        temp = default(temp, self.temperature)

        if self.bug == "logits_detached_before_gumbel":
            one_hot = F.gumbel_softmax(logits.detach(), tau = temp, dim = 1, hard = self.straight_through)
        else:
            one_hot = F.gumbel_softmax(logits, tau = temp, dim = 1, hard = self.straight_through)

        if self.straight_through and self.reinmax:
            # use reinmax for better second-order accuracy - https://arxiv.org/abs/2304.08612
            # algorithm 2
            one_hot = one_hot.detach()
            π0 = logits.softmax(dim = 1)
            π1 = (one_hot + (logits / temp).softmax(dim = 1)) / 2
            π1 = ((log(π1) - logits).detach() + logits).softmax(dim = 1)
            π2 = 2 * π1 - 0.5 * π0
            one_hot = π2 - π2.detach() + one_hot

        sampled = einsum('b n h w, n d -> b d h w', one_hot, self.codebook.weight)
        out = self.decoder(sampled)

        if not return_loss:
            return out

        # reconstruction loss

        recon_loss = self.loss_fn(img, out)

        # kl divergence

        logits = logits.flatten(2).transpose(1, 2)  # rearrange(logits, 'b n h w -> b (h w) n')
        log_qy = F.log_softmax(logits, dim = -1)
        log_uniform = torch.log(torch.tensor([1. / num_tokens], device = device))
        kl_div = F.kl_div(log_uniform, log_qy, None, None, 'batchmean', log_target = True)

        loss = recon_loss + (kl_div * kl_div_loss_weight)

        if not return_recons:
            return loss

        return loss, out


# ---- the data (port) -----------------------------------------------------------------------------------------------

class SyntheticImages(Dataset):
    """Stands in for the ImageFolder: 16x16 RGB images in [0, 1] (what ToTensor gives), a soft disc or bar of a
    random colour on a
    greyish colour gradient."""

    def __init__(self, n, seed):
        gen = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, SIZE), torch.linspace(0, 1, SIZE), indexing="ij")
        images = []
        for _ in range(n):
            c0, c1 = (0.4 + 0.2 * torch.rand(3, 1, 1, generator=gen) for _ in range(2))
            cf = torch.rand(3, 1, 1, generator=gen)
            bg = c0 * (1 - yy) + c1 * yy
            cy, cx = (0.25 + 0.5 * torch.rand(2, generator=gen)).tolist()
            if float(torch.rand((), generator=gen)) < 0.5:
                r = 0.15 + 0.15 * float(torch.rand((), generator=gen))
                m = torch.sigmoid((r - ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()) * 30)
            else:
                m = torch.sigmoid((0.1 - (xx - cx).abs()) * 30)
            images.append(bg * (1 - m) + cf * m)
        self.images = torch.stack(images).float()
        self.labels = torch.zeros(n, dtype=torch.long)  # ImageFolder's class index, unused

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


# ---- train_vae.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)

    IMAGE_SIZE = SIZE
    EPOCHS = 20
    BATCH_SIZE = 8
    LEARNING_RATE = 1e-3
    LR_DECAY_RATE = 0.98

    NUM_TOKENS = 64  # (port) 8192
    NUM_LAYERS = 2  # (port) 3
    NUM_RESNET_BLOCKS = 1  # (port) 2
    SMOOTH_L1_LOSS = False
    EMB_DIM = 32  # (port) 512
    HIDDEN_DIM = 16  # (port) 256
    KL_LOSS_WEIGHT = 0.

    CHANNELS = 3

    STARTING_TEMP = 1.
    TEMP_MIN = 0.5
    ANNEAL_RATE = 1e-6

    ds = SyntheticImages(N_IMAGES, seed)
    dl = DataLoader(ds, BATCH_SIZE, shuffle = True, generator=torch.Generator().manual_seed(seed))

    vae_params = dict(  # noqa: C408
        image_size = IMAGE_SIZE,
        num_layers = NUM_LAYERS,
        num_tokens = NUM_TOKENS,
        channels = CHANNELS,
        codebook_dim = EMB_DIM,
        hidden_dim   = HIDDEN_DIM,
        num_resnet_blocks = NUM_RESNET_BLOCKS
    )

    vae = DiscreteVAE(
        **vae_params,
        smooth_l1_loss = SMOOTH_L1_LOSS,
        kl_div_loss_weight = KL_LOSS_WEIGHT,
        bug = bug,
    )

    opt = Adam(vae.parameters(), lr = LEARNING_RATE)
    sched = ExponentialLR(optimizer = opt, gamma = LR_DECAY_RATE)
    distr_vae, distr_opt, distr_dl, distr_sched = vae, opt, dl, sched

    st = {"global_step": 0, "temp": STARTING_TEMP, "epoch": 0, "i": 0, "it": iter(distr_dl)}

    def train_step():  # one iteration of ``for i, (images, _) in enumerate(distr_dl)``
        try:
            images, _ = next(st["it"])
        except StopIteration:
            st["epoch"] = min(st["epoch"] + 1, EPOCHS - 1)
            st["i"] = 0
            st["it"] = iter(distr_dl)
            images, _ = next(st["it"])
        i, temp = st["i"], st["temp"]

        loss, recons = distr_vae(  # noqa: RUF059
            images,
            return_loss = True,
            return_recons = True,
            temp = temp
        )

        if bug != "no_zero_grad":
            distr_opt.zero_grad()
        loss.backward()
        distr_opt.step()

        if i % 100 == 0:
            # temperature anneal

            temp = max(temp * math.exp(-ANNEAL_RATE * st["global_step"]), TEMP_MIN)

            # lr decay

            distr_sched.step()

        st["global_step"] += 1
        st["i"] += 1
        st["temp"] = temp
        return loss.detach()

    def loss_fn(out, images):  # DiscreteVAE's loss on its output for these images (the KL at weight 0)
        return vae.loss_fn(vae.norm(images), out)

    images = ds.images[:BATCH_SIZE]
    return Program(name="dallepytorch_dvae", model=vae, batch=(images, images), loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, loader=dl)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the encoder's logits detached before the Gumbel-softmax (e.g. to "sample" the tokens without
    # gradient); with the KL weight at 0 no loss term reaches the encoder any more.
    Bug("logits_detached_before_gumbel", functools.partial(_build, bug="logits_detached_before_gumbel"),
        "reachability", ("encoder",)),
    # classic: distr_opt.zero_grad() dropped; the gradients accumulate over iterations (whole-model slip).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
