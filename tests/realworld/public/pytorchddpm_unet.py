"""DDPM (epsilon prediction, linear beta schedule, T = 1000) trained by the repository's ``main.py --train
--flagfile ./config/CIFAR10.txt``: ``GaussianDiffusionTrainer`` (Algorithm 1: a uniform timestep, ``x_t`` from the
closed-form ``q(x_t | x_0)``, per-element MSE against the noise), the DDPM U-Net (sinusoidal time embedding
through an ``nn.Embedding.from_pretrained`` table, GroupNorm/Swish residual blocks with dropout, self-attention at
one level, skip concatenations), Adam lr 2e-4 with a ``LambdaLR`` linear warmup stepped each update, gradient norm
clipping at 1.0, and an EMA copy of the network updated after every step.

Source: https://github.com/w86763777/pytorch-ddpm
Commit: f804ccbd58a758b07f79a3b9ecdfb1beb67258f6
Files: main.py, diffusion.py, model.py, config/CIFAR10.txt
License: WTFPL (Version 2; LICENSES/w86763777-pytorch-ddpm.txt: do what you want, copying included)
Domain: generative, diffusion (DDPM epsilon objective, U-Net with attention, warmup, clipping, EMA)

Deviations from the original:
- sizes: ch 128 -> 32 (GroupNorm(32, .) needs a multiple of 32), ch_mult [1, 2, 2, 2] -> [1, 2], attn [1]
  unchanged, num_res_blocks 2 -> 1, img_size 32 -> 16, batch_size 128 -> 8, warmup 5000 -> 10 steps; T, betas,
  lr, dropout, grad_clip, ema_decay unchanged;
- flags (absl) are a namespace built in ``_build``; sample_step 1000 -> 0 and save_step 5000 -> 0 (the sampling
  branch runs the T-step reverse chain at step 0 and the checkpoint writes files: both off, so
  ``GaussianDiffusionSampler`` and the FID/IS evaluation are not copied); tensorboardX, tqdm, the log directory and
  the model-size print are left out; no GPU (``device`` is cpu);
- data: CIFAR-10 is replaced by synthetic 16x16 RGB images made from ``seed`` (smooth colour gradients with one
  bright square), ``RandomHorizontalFlip`` + ``ToTensor`` + ``Normalize((0.5,) * 3, (0.5,) * 3)`` written out in
  plain torch; ``infiniteloop`` is kept;
- one ``train_step`` is one iteration of the ``for step in pbar`` body (zero_grad, loss, backward, clip, step,
  sched.step, ema); the declared model is the ``GaussianDiffusionTrainer`` (it holds the U-Net and returns the
  per-element loss, reduced by ``.mean()`` as the loop does); ``eval_fn`` is the EMA network's loss on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C419, RUF059, SIM118  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import copy
import functools
import math
import pathlib
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 64


# ---- model.py ----------------------------------------------------------------------------------------------------

class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class TimeEmbedding(nn.Module):
    def __init__(self, T, d_model, dim):
        assert d_model % 2 == 0
        super().__init__()
        emb = torch.arange(0, d_model, step=2) / d_model * math.log(10000)
        emb = torch.exp(-emb)
        pos = torch.arange(T).float()
        emb = pos[:, None] * emb[None, :]
        assert list(emb.shape) == [T, d_model // 2]
        emb = torch.stack([torch.sin(emb), torch.cos(emb)], dim=-1)
        assert list(emb.shape) == [T, d_model // 2, 2]
        emb = emb.view(T, d_model)

        self.timembedding = nn.Sequential(
            nn.Embedding.from_pretrained(emb),
            nn.Linear(d_model, dim),
            Swish(),
            nn.Linear(dim, dim),
        )
        self.initialize()

    def initialize(self):
        for module in self.modules():
            if isinstance(module, nn.Linear):
                init.xavier_uniform_(module.weight)
                init.zeros_(module.bias)

    def forward(self, t):
        emb = self.timembedding(t)
        return emb


class DownSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.main = nn.Conv2d(in_ch, in_ch, 3, stride=2, padding=1)
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.main.weight)
        init.zeros_(self.main.bias)

    def forward(self, x, temb):
        x = self.main(x)
        return x


class UpSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.main = nn.Conv2d(in_ch, in_ch, 3, stride=1, padding=1)
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.main.weight)
        init.zeros_(self.main.bias)

    def forward(self, x, temb):
        _, _, H, W = x.shape
        x = F.interpolate(
            x, scale_factor=2, mode='nearest')
        x = self.main(x)
        return x


class AttnBlock(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.group_norm = nn.GroupNorm(32, in_ch)
        self.proj_q = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_k = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_v = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.initialize()

    def initialize(self):
        for module in [self.proj_q, self.proj_k, self.proj_v, self.proj]:
            init.xavier_uniform_(module.weight)
            init.zeros_(module.bias)
        init.xavier_uniform_(self.proj.weight, gain=1e-5)

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x)
        q = self.proj_q(h)
        k = self.proj_k(h)
        v = self.proj_v(h)

        q = q.permute(0, 2, 3, 1).view(B, H * W, C)
        k = k.view(B, C, H * W)
        w = torch.bmm(q, k) * (int(C) ** (-0.5))
        assert list(w.shape) == [B, H * W, H * W]
        w = F.softmax(w, dim=-1)

        v = v.permute(0, 2, 3, 1).view(B, H * W, C)
        h = torch.bmm(w, v)
        assert list(h.shape) == [B, H * W, C]
        h = h.view(B, H, W, C).permute(0, 3, 1, 2)
        h = self.proj(h)

        return x + h


class ResBlock(nn.Module):
    def __init__(self, in_ch, out_ch, tdim, dropout, attn=False):
        super().__init__()
        self.block1 = nn.Sequential(
            nn.GroupNorm(32, in_ch),
            Swish(),
            nn.Conv2d(in_ch, out_ch, 3, stride=1, padding=1),
        )
        self.temb_proj = nn.Sequential(
            Swish(),
            nn.Linear(tdim, out_ch),
        )
        self.block2 = nn.Sequential(
            nn.GroupNorm(32, out_ch),
            Swish(),
            nn.Dropout(dropout),
            nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1),
        )
        if in_ch != out_ch:
            self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride=1, padding=0)
        else:
            self.shortcut = nn.Identity()
        if attn:
            self.attn = AttnBlock(out_ch)
        else:
            self.attn = nn.Identity()
        self.initialize()

    def initialize(self):
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                init.xavier_uniform_(module.weight)
                init.zeros_(module.bias)
        init.xavier_uniform_(self.block2[-1].weight, gain=1e-5)

    def forward(self, x, temb):
        h = self.block1(x)
        h += self.temb_proj(temb)[:, :, None, None]
        h = self.block2(h)

        h = h + self.shortcut(x)
        h = self.attn(h)
        return h


class UNet(nn.Module):
    def __init__(self, T, ch, ch_mult, attn, num_res_blocks, dropout):
        super().__init__()
        assert all([i < len(ch_mult) for i in attn]), 'attn index out of bound'
        tdim = ch * 4
        self.time_embedding = TimeEmbedding(T, ch, tdim)

        self.head = nn.Conv2d(3, ch, kernel_size=3, stride=1, padding=1)
        self.downblocks = nn.ModuleList()
        chs = [ch]  # record output channel when dowmsample for upsample
        now_ch = ch
        for i, mult in enumerate(ch_mult):
            out_ch = ch * mult
            for _ in range(num_res_blocks):
                self.downblocks.append(ResBlock(
                    in_ch=now_ch, out_ch=out_ch, tdim=tdim,
                    dropout=dropout, attn=(i in attn)))
                now_ch = out_ch
                chs.append(now_ch)
            if i != len(ch_mult) - 1:
                self.downblocks.append(DownSample(now_ch))
                chs.append(now_ch)

        self.middleblocks = nn.ModuleList([
            ResBlock(now_ch, now_ch, tdim, dropout, attn=True),
            ResBlock(now_ch, now_ch, tdim, dropout, attn=False),
        ])

        self.upblocks = nn.ModuleList()
        for i, mult in reversed(list(enumerate(ch_mult))):
            out_ch = ch * mult
            for _ in range(num_res_blocks + 1):
                self.upblocks.append(ResBlock(
                    in_ch=chs.pop() + now_ch, out_ch=out_ch, tdim=tdim,
                    dropout=dropout, attn=(i in attn)))
                now_ch = out_ch
            if i != 0:
                self.upblocks.append(UpSample(now_ch))
        assert len(chs) == 0

        self.tail = nn.Sequential(
            nn.GroupNorm(32, now_ch),
            Swish(),
            nn.Conv2d(now_ch, 3, 3, stride=1, padding=1)
        )
        self.initialize()

    def initialize(self):
        init.xavier_uniform_(self.head.weight)
        init.zeros_(self.head.bias)
        init.xavier_uniform_(self.tail[-1].weight, gain=1e-5)
        init.zeros_(self.tail[-1].bias)

    def forward(self, x, t):
        # Timestep embedding
        temb = self.time_embedding(t)
        # Downsampling
        h = self.head(x)
        hs = [h]
        for layer in self.downblocks:
            h = layer(h, temb)
            hs.append(h)
        # Middle
        for layer in self.middleblocks:
            h = layer(h, temb)
        # Upsampling
        for layer in self.upblocks:
            if isinstance(layer, ResBlock):
                h = torch.cat([h, hs.pop()], dim=1)
            h = layer(h, temb)
        h = self.tail(h)

        assert len(hs) == 0
        return h



# ---- diffusion.py (the trainer) --------------------------------------------------------------------------------

def extract(v, t, x_shape):
    """
    Extract some coefficients at specified timesteps, then reshape to
    [batch_size, 1, 1, 1, 1, ...] for broadcasting purposes.
    """
    out = torch.gather(v, index=t, dim=0).float()
    return out.view([t.shape[0]] + [1] * (len(x_shape) - 1))


class GaussianDiffusionTrainer(nn.Module):
    def __init__(self, model, beta_1, beta_T, T, bug=None):
        super().__init__()

        self.model = model
        self.T = T
        self.bug = bug

        self.register_buffer(
            'betas', torch.linspace(beta_1, beta_T, T).double())
        alphas = 1. - self.betas
        alphas_bar = torch.cumprod(alphas, dim=0)

        # calculations for diffusion q(x_t | x_{t-1}) and others
        self.register_buffer(
            'sqrt_alphas_bar', torch.sqrt(alphas_bar))
        self.register_buffer(
            'sqrt_one_minus_alphas_bar', torch.sqrt(1. - alphas_bar))

    def forward(self, x_0):
        """
        Algorithm 1.
        """
        t = torch.randint(self.T, size=(x_0.shape[0], ), device=x_0.device)
        noise = torch.randn_like(x_0)
        if self.bug == "noise_coefficients_swapped":
            # the two coefficients of q(x_t | x_0) exchanged: x_t is mostly noise at small t, mostly data at large t
            x_t = (
                extract(self.sqrt_one_minus_alphas_bar, t, x_0.shape) * x_0 +
                extract(self.sqrt_alphas_bar, t, x_0.shape) * noise)
        else:
            x_t = (
                extract(self.sqrt_alphas_bar, t, x_0.shape) * x_0 +
                extract(self.sqrt_one_minus_alphas_bar, t, x_0.shape) * noise)
        if self.bug == "timestep_not_passed":
            # the network is never told the noise level: every example is embedded as timestep 0
            loss = F.mse_loss(self.model(x_t, torch.zeros_like(t)), noise, reduction='none')
        else:
            loss = F.mse_loss(self.model(x_t, t), noise, reduction='none')
        return loss


# ---- main.py (train(): one iteration of the loop per call) ----------------------------------------------------

def get_flags():
    return argparse.Namespace(
        train=True, eval=False, ch=32, ch_mult=[1, 2], attn=[1], num_res_blocks=1, dropout=0.1, beta_1=1e-4,
        beta_T=0.02, T=1000, mean_type='epsilon', var_type='fixedlarge', lr=2e-4, grad_clip=1., total_steps=800000,
        img_size=16, warmup=10, batch_size=8, num_workers=0, ema_decay=0.9999, parallel=False, sample_size=64,
        sample_step=0, save_step=0, eval_step=0,
    )


FLAGS = get_flags()

device = torch.device('cpu')


def ema(source, target, decay):
    source_dict = source.state_dict()
    target_dict = target.state_dict()
    for key in source_dict.keys():
        target_dict[key].data.copy_(
            target_dict[key].data * decay +
            source_dict[key].data * (1 - decay))


def infiniteloop(dataloader):
    while True:
        for x, y in iter(dataloader):
            yield x


def warmup_lr(step):
    return min(step, FLAGS.warmup) / FLAGS.warmup


class SyntheticImages(torch.utils.data.Dataset):
    """CIFAR10 stand-in: smooth colour gradients with one bright square; RandomHorizontalFlip, ToTensor and
    Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)) written out."""

    def __init__(self, n, size, seed):
        gen = torch.Generator().manual_seed(seed)
        ramp = torch.linspace(0, 1, size)
        self.images = []
        for _ in range(n):
            c0, c1 = torch.rand(3, 1, 1, generator=gen), torch.rand(3, 1, 1, generator=gen)
            img = c0 * ramp.view(1, 1, -1) * 0.6 + c1 * ramp.view(1, -1, 1) * 0.4
            s = int(torch.randint(3, 7, (1,), generator=gen))
            y, x = torch.randint(0, size - s + 1, (2,), generator=gen).tolist()
            img[:, y:y + s, x:x + s] = 1.0
            self.images.append(img.clamp(0, 1))
        self.flip = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        img = self.images[index]
        if torch.rand(1, generator=self.flip) < 0.5:
            img = img.flip(-1)
        return (img - 0.5) / 0.5, 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    # dataset
    dataset = SyntheticImages(N_IMAGES, FLAGS.img_size, seed)
    dataloader = torch.utils.data.DataLoader(
        dataset, batch_size=FLAGS.batch_size, shuffle=True,
        num_workers=FLAGS.num_workers, drop_last=True, generator=torch.Generator().manual_seed(seed))
    datalooper = infiniteloop(dataloader)

    # model setup
    net_model = UNet(
        T=FLAGS.T, ch=FLAGS.ch, ch_mult=FLAGS.ch_mult, attn=FLAGS.attn,
        num_res_blocks=FLAGS.num_res_blocks, dropout=FLAGS.dropout)
    ema_model = copy.deepcopy(net_model)
    optim = torch.optim.Adam(net_model.parameters(), lr=FLAGS.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_lambda=warmup_lr)
    trainer = GaussianDiffusionTrainer(
        net_model, FLAGS.beta_1, FLAGS.beta_T, FLAGS.T, bug=bug).to(device)

    state = {"step": 0}

    def train_step():
        step = state["step"]
        state["step"] += 1
        # train
        optim.zero_grad()
        x_0 = next(datalooper).to(device)
        loss = trainer(x_0).mean()
        loss.backward()
        if bug == "clip_after_step":
            # the clipping moved after the update: the step uses the unclipped gradients
            optim.step()
            torch.nn.utils.clip_grad_norm_(
                net_model.parameters(), FLAGS.grad_clip)
        else:
            torch.nn.utils.clip_grad_norm_(
                net_model.parameters(), FLAGS.grad_clip)
            optim.step()
        sched.step()
        ema(net_model, ema_model, FLAGS.ema_decay)

        # sample (FLAGS.sample_step == 0: off), save (FLAGS.save_step == 0: off)
        if FLAGS.sample_step > 0 and step % FLAGS.sample_step == 0:
            raise NotImplementedError("sampling is off in the port")
        return loss.detach()

    def eval_fn(model, batch):
        ema_trainer = GaussianDiffusionTrainer(ema_model, FLAGS.beta_1, FLAGS.beta_T, FLAGS.T)
        ema_model.eval()
        with torch.no_grad():
            loss = float(ema_trainer(batch[0]).mean())
        return loss

    first = next(iter(torch.utils.data.DataLoader(dataset, batch_size=FLAGS.batch_size)))[0]

    return Program(name="pytorchddpm_unet", model=trainer, batch=(first,), loss_fn=lambda loss, _t: loss.mean(),
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=dataloader)


build = functools.partial(_build)

BUGS = [
    # the U-Net is given timestep 0 for every example: its prediction cannot depend on the noise level
    Bug("timestep_not_passed", functools.partial(_build, bug="timestep_not_passed"), "learning_ledger",
        ("DEPENDENCY",)),
    # sqrt(alpha_bar) and sqrt(1 - alpha_bar) exchanged in q(x_t | x_0): the noised input does not match t
    Bug("noise_coefficients_swapped", functools.partial(_build, bug="noise_coefficients_swapped"),
        "learning_ledger", ("TASK",)),
    # clip_grad_norm_ after optim.step(): the update uses the unclipped gradient (whole-model step slip)
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]
