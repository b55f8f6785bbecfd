# ruff: noqa: UP008, PLR0402
"""Class-conditional DDPM with classifier-free guidance training on MNIST-shaped images: a small U-Net
(``ContextUnet``: residual conv blocks, time and one-hot class embeddings that scale and shift the decoder) predicts
the noise of ``x_t``, the class is dropped with probability 0.1, MSE loss, Adam with a per-epoch linear lr decay.

Source: https://github.com/TeaPearce/Conditional_Diffusion_MNIST (substituted for cloneofsimo/minDiffusion, which
this script is modified from: minDiffusion carries no license at its newest commit 00a3c80)
Commit: 657b49854bbf844caa5580177243ae607c79339f
Files: script.py (ResidualConvBlock, UnetDown, UnetUp, EmbedFC, ContextUnet, ddpm_schedules, DDPM, train_mnist)
License: MIT (Copyright (c) 2022 Tim Pearce; full text in LICENSES/TeaPearce-Conditional_Diffusion_MNIST.txt)
Domain: diffusion (class-conditional DDPM, classifier-free guidance)

Kept as written: every module of the model, ``ddpm_schedules``, ``DDPM.forward`` (``_ts`` uniform in 1..n_T, x_t,
the Bernoulli context mask with drop_prob 0.1, ``MSELoss(noise, eps_pred)``), ``DDPM.sample``; train_mnist's
hyperparameters except the sizes below (n_T 400, betas (1e-4, 0.02), lrate 1e-4, n_epoch 20, Adam over
``ddpm.parameters()``), and its loop: per epoch ``ddpm.train()``, ``lr = lrate * (1 - ep / n_epoch)``, per batch
zero_grad, ``loss = ddpm(x, c)``, backward, step; ``ddpm.eval()`` at the epoch's end.

Deviations from the original:
- MNIST (``torchvision.datasets.MNIST(download=True)``) is replaced by 64 synthetic 28x28 one-channel images in
  [0, 1] made from the seed: 10 classes, each a fixed stroke pattern (bars and a box at class-set places), jittered
  by a pixel or two and lightly noised; the label is the class, as the digit is.
- sizes for 2 CPU cores: n_feat 128 -> 16, batch_size 256 -> 16, num_workers 5 -> 0; no GPU (device "cpu").
- the end of each epoch keeps ``ddpm.eval()`` but drops its work under ``torch.no_grad()`` (sampling at three
  guidance weights, the image grid and GIF, saving the model): no images are written here. tqdm and printing are
  dropped; the loss EMA for the progress bar is dropped.
- ``train_step`` runs one iteration of the epoch/batch loops (a generator over them); after the 20 epochs it starts
  the loops over, as a second run of train_mnist on the same model would.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_IMAGES = 64


class ResidualConvBlock(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, is_res: bool = False
    ) -> None:
        super().__init__()
        '''
        standard ResNet style convolutional block
        '''
        self.same_channels = in_channels==out_channels
        self.is_res = is_res
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, 1, 1),
            nn.BatchNorm2d(out_channels),
            nn.GELU(),
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(out_channels, out_channels, 3, 1, 1),
            nn.BatchNorm2d(out_channels),
            nn.GELU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_res:
            x1 = self.conv1(x)
            x2 = self.conv2(x1)
            # this adds on correct residual in case channels have increased
            if self.same_channels:
                out = x + x2
            else:
                out = x1 + x2
            return out / 1.414
        else:
            x1 = self.conv1(x)
            x2 = self.conv2(x1)
            return x2


class UnetDown(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(UnetDown, self).__init__()
        '''
        process and downscale the image feature maps
        '''
        layers = [ResidualConvBlock(in_channels, out_channels), nn.MaxPool2d(2)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class UnetUp(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(UnetUp, self).__init__()
        '''
        process and upscale the image feature maps
        '''
        layers = [
            nn.ConvTranspose2d(in_channels, out_channels, 2, 2),
            ResidualConvBlock(out_channels, out_channels),
            ResidualConvBlock(out_channels, out_channels),
        ]
        self.model = nn.Sequential(*layers)

    def forward(self, x, skip):
        x = torch.cat((x, skip), 1)
        x = self.model(x)
        return x


class EmbedFC(nn.Module):
    def __init__(self, input_dim, emb_dim):
        super(EmbedFC, self).__init__()
        '''
        generic one layer FC NN for embedding things
        '''
        self.input_dim = input_dim
        layers = [
            nn.Linear(input_dim, emb_dim),
            nn.GELU(),
            nn.Linear(emb_dim, emb_dim),
        ]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        x = x.view(-1, self.input_dim)
        return self.model(x)


class ContextUnet(nn.Module):
    def __init__(self, in_channels, n_feat = 256, n_classes=10, bug=None):
        super(ContextUnet, self).__init__()

        self.in_channels = in_channels
        self.n_feat = n_feat
        self.n_classes = n_classes
        self.bug = bug

        self.init_conv = ResidualConvBlock(in_channels, n_feat, is_res=True)

        self.down1 = UnetDown(n_feat, n_feat)
        self.down2 = UnetDown(n_feat, 2 * n_feat)

        self.to_vec = nn.Sequential(nn.AvgPool2d(7), nn.GELU())

        self.timeembed1 = EmbedFC(1, 2*n_feat)
        self.timeembed2 = EmbedFC(1, 1*n_feat)
        self.contextembed1 = EmbedFC(n_classes, 2*n_feat)
        self.contextembed2 = EmbedFC(n_classes, 1*n_feat)

        self.up0 = nn.Sequential(
            # nn.ConvTranspose2d(6 * n_feat, 2 * n_feat, 7, 7), # when concat temb and cemb end up w 6*n_feat
            nn.ConvTranspose2d(2 * n_feat, 2 * n_feat, 7, 7), # otherwise just have 2*n_feat
            nn.GroupNorm(8, 2 * n_feat),
            nn.ReLU(),
        )

        self.up1 = UnetUp(4 * n_feat, n_feat)
        self.up2 = UnetUp(2 * n_feat, n_feat)
        self.out = nn.Sequential(
            nn.Conv2d(2 * n_feat, n_feat, 3, 1, 1),
            nn.GroupNorm(8, n_feat),
            nn.ReLU(),
            nn.Conv2d(n_feat, self.in_channels, 3, 1, 1),
        )

    def forward(self, x, c, t, context_mask):
        # x is (noisy) image, c is context label, t is timestep,
        # context_mask says which samples to block the context on

        x = self.init_conv(x)
        down1 = self.down1(x)
        down2 = self.down2(down1)
        hiddenvec = self.to_vec(down2)

        # convert context to one hot embedding
        c = nn.functional.one_hot(c, num_classes=self.n_classes).type(torch.float)

        # mask out context if context_mask == 1
        context_mask = context_mask[:, None]
        context_mask = context_mask.repeat(1,self.n_classes)
        context_mask = (-1*(1-context_mask)) # need to flip 0 <-> 1
        if self.bug != "context_mask_not_applied":
            # (the bug variant builds the mask but never multiplies it in: the class is never dropped)
            c = c * context_mask

        # embed context, time step
        cemb1 = self.contextembed1(c).view(-1, self.n_feat * 2, 1, 1)
        temb1 = self.timeembed1(t).view(-1, self.n_feat * 2, 1, 1)
        cemb2 = self.contextembed2(c).view(-1, self.n_feat, 1, 1)
        temb2 = self.timeembed2(t).view(-1, self.n_feat, 1, 1)

        # could concatenate the context embedding here instead of adaGN
        # hiddenvec = torch.cat((hiddenvec, temb1, cemb1), 1)

        up1 = self.up0(hiddenvec)
        # up2 = self.up1(up1, down2) # if want to avoid add and multiply embeddings
        up2 = self.up1(cemb1*up1+ temb1, down2)  # add and multiply embeddings
        up3 = self.up2(cemb2*up2+ temb2, down1)
        out = self.out(torch.cat((up3, x), 1))
        return out


def ddpm_schedules(beta1, beta2, T):
    """
    Returns pre-computed schedules for DDPM sampling, training process.
    """
    assert beta1 < beta2 < 1.0, "beta1 and beta2 must be in (0, 1)"

    beta_t = (beta2 - beta1) * torch.arange(0, T + 1, dtype=torch.float32) / T + beta1
    sqrt_beta_t = torch.sqrt(beta_t)
    alpha_t = 1 - beta_t
    log_alpha_t = torch.log(alpha_t)
    alphabar_t = torch.cumsum(log_alpha_t, dim=0).exp()

    sqrtab = torch.sqrt(alphabar_t)
    oneover_sqrta = 1 / torch.sqrt(alpha_t)

    sqrtmab = torch.sqrt(1 - alphabar_t)
    mab_over_sqrtmab_inv = (1 - alpha_t) / sqrtmab

    return {
        "alpha_t": alpha_t,  # \alpha_t
        "oneover_sqrta": oneover_sqrta,  # 1/\sqrt{\alpha_t}
        "sqrt_beta_t": sqrt_beta_t,  # \sqrt{\beta_t}
        "alphabar_t": alphabar_t,  # \bar{\alpha_t}
        "sqrtab": sqrtab,  # \sqrt{\bar{\alpha_t}}
        "sqrtmab": sqrtmab,  # \sqrt{1-\bar{\alpha_t}}
        "mab_over_sqrtmab": mab_over_sqrtmab_inv,  # (1-\alpha_t)/\sqrt{1-\bar{\alpha_t}}
    }


class DDPM(nn.Module):
    def __init__(self, nn_model, betas, n_T, device, drop_prob=0.1, bug=None):
        super(DDPM, self).__init__()
        self.nn_model = nn_model.to(device)

        # register_buffer allows accessing dictionary produced by ddpm_schedules
        # e.g. can access self.sqrtab later
        for k, v in ddpm_schedules(betas[0], betas[1], n_T).items():
            self.register_buffer(k, v)

        self.n_T = n_T
        self.device = device
        self.drop_prob = drop_prob
        self.loss_mse = nn.MSELoss()
        self.bug = bug

    def forward(self, x, c):
        """
        this method is used in training, so samples t and noise randomly
        """

        if self.bug == "last_timestep_never_drawn":
            # the line before https://github.com/TeaPearce/Conditional_Diffusion_MNIST/pull/4: randint's high is
            # exclusive, so t = n_T (where sampling starts) is never trained
            _ts = torch.randint(1, self.n_T, (x.shape[0],)).to(self.device)
        else:
            _ts = torch.randint(1, self.n_T+1, (x.shape[0],)).to(self.device)  # t ~ Uniform(0, n_T)
        noise = torch.randn_like(x)  # eps ~ N(0, 1)

        x_t = (
            self.sqrtab[_ts, None, None, None] * x
            + self.sqrtmab[_ts, None, None, None] * noise
        )  # This is the x_t, which is sqrt(alphabar) x_0 + sqrt(1-alphabar) * eps
        # We should predict the "error term" from this x_t. Loss is what we return.

        # dropout context with some probability
        context_mask = torch.bernoulli(torch.zeros_like(c)+self.drop_prob).to(self.device)

        # return MSE between added noise, and our predicted noise
        return self.loss_mse(noise, self.nn_model(x_t, c, _ts / self.n_T, context_mask))

    def sample(self, n_sample, size, device, guide_w = 0.0):
        # we follow the guidance sampling scheme described in 'Classifier-Free Diffusion Guidance'
        # to make the fwd passes efficient, we concat two versions of the dataset,
        # one with context_mask=0 and the other context_mask=1
        # we then mix the outputs with the guidance scale, w
        # where w>0 means more guidance

        x_i = torch.randn(n_sample, *size).to(device)  # x_T ~ N(0, 1), sample initial noise
        c_i = torch.arange(0,10).to(device) # context for us just cycles throught the mnist labels
        c_i = c_i.repeat(int(n_sample/c_i.shape[0]))

        # don't drop context at test time
        context_mask = torch.zeros_like(c_i).to(device)

        # double the batch
        c_i = c_i.repeat(2)
        context_mask = context_mask.repeat(2)
        context_mask[n_sample:] = 1. # makes second half of batch context free

        x_i_store = [] # keep track of generated steps in case want to plot something
        for i in range(self.n_T, 0, -1):
            t_is = torch.tensor([i / self.n_T]).to(device)
            t_is = t_is.repeat(n_sample,1,1,1)

            # double batch
            x_i = x_i.repeat(2,1,1,1)
            t_is = t_is.repeat(2,1,1,1)

            z = torch.randn(n_sample, *size).to(device) if i > 1 else 0

            # split predictions and compute weighting
            eps = self.nn_model(x_i, c_i, t_is, context_mask)
            eps1 = eps[:n_sample]
            eps2 = eps[n_sample:]
            eps = (1+guide_w)*eps1 - guide_w*eps2
            x_i = x_i[:n_sample]
            x_i = (
                self.oneover_sqrta[i] * (x_i - eps * self.mab_over_sqrtmab[i])
                + self.sqrt_beta_t[i] * z
            )
            if i%20==0 or i==self.n_T or i<8:
                x_i_store.append(x_i.detach().cpu().numpy())

        x_i_store = np.array(x_i_store)
        return x_i, x_i_store


class SyntheticDigits(torch.utils.data.Dataset):
    """64 one-channel 28x28 images in [0, 1], 10 classes: class k draws a horizontal bar at row 4 + 2k, a vertical
    bar at column 24 - 2k and, for odd k, a box in the centre; each image shifted by up to 2 pixels and noised."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.images, self.labels = [], []
        for i in range(N_IMAGES):
            k = i % 10
            img = torch.zeros(1, 28, 28)
            img[0, 4 + 2 * k, 4:24] = 1.0
            img[0, 4:24, 24 - 2 * k] = 1.0
            if k % 2:
                img[0, 10:18, 10:18] = 0.6
            dy, dx = torch.randint(-2, 3, (2,), generator=g).tolist()
            img = torch.roll(img, shifts=(dy, dx), dims=(1, 2))
            img = (img + 0.05 * torch.rand(img.shape, generator=g)).clamp(0, 1)
            self.images.append(img)
            self.labels.append(k)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def _build(seed, bug=None):
    torch.manual_seed(seed)

    # hardcoding these here
    n_epoch = 20
    batch_size = 16
    n_T = 400 # 500
    device = "cpu"
    n_classes = 10
    n_feat = 16 # 128 ok, 256 better (but slower)
    lrate = 1e-4

    ddpm = DDPM(nn_model=ContextUnet(in_channels=1, n_feat=n_feat, n_classes=n_classes, bug=bug), betas=(1e-4, 0.02),
                n_T=n_T, device=device, drop_prob=0.1, bug=bug)
    ddpm.to(device)

    dataset = SyntheticDigits(seed)
    dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                            generator=torch.Generator().manual_seed(seed))
    optim = torch.optim.Adam(ddpm.parameters(), lr=lrate)

    def loop():
        while True:
            for ep in range(n_epoch):
                if bug != "train_mode_not_restored":
                    ddpm.train()

                # linear lrate decay
                optim.param_groups[0]['lr'] = lrate*(1-ep/n_epoch)

                for x, c in dataloader:
                    optim.zero_grad()
                    x = x.to(device)
                    c = c.to(device)
                    loss = ddpm(x, c)
                    loss.backward()
                    optim.step()
                    yield loss

                # for eval, save an image of currently generated samples (top rows)
                # followed by real images (bottom rows)
                ddpm.eval()

    steps = loop()
    x, c = next(iter(DataLoader(SyntheticDigits(seed + 1), batch_size=batch_size)))
    return Program(name="teapearce_cfg_diffusion", model=ddpm, batch=({"x": x, "c": c},),
                   loss_fn=lambda loss, _targets: loss, optimizer=optim, train_step=lambda: next(steps),
                   loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # t = n_T is never drawn in training, as before https://github.com/TeaPearce/Conditional_Diffusion_MNIST/pull/4
    # ("thanks for the spot!"): the first denoising step of sampling runs on a timestep the model never saw.
    Bug("last_timestep_never_drawn", functools.partial(_build, bug="last_timestep_never_drawn"), "learning_ledger",
        ("TASK",)),
    # ddpm.train() left out of the epoch loop (classic): after the first epoch's ddpm.eval() every BatchNorm trains
    # on its running statistics.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("nn_model",)),
    # the context mask is computed but not multiplied in (classic: mask not applied): the class is never dropped.
    Bug("context_mask_not_applied", functools.partial(_build, bug="context_mask_not_applied"), "learning_ledger",
        ("DEPENDENCY",)),
]
