"""DDPM of explainingai-code/DDPM-Pytorch (``tools/train_ddpm.py`` with ``config/default.yaml``): a linear beta
schedule (1e-4 -> 0.02 over 1000 steps) in ``LinearNoiseScheduler.add_noise``, a U-Net of time-embedded ResNet blocks
with GroupNorm and self-attention (``nn.MultiheadAttention``) in every down, mid and up block, sinusoidal time
embeddings projected by an MLP; the loss is ``MSELoss`` between the predicted and the drawn noise at a uniform
timestep; Adam lr 1e-4; MNIST images scaled to [-1, 1].

Source: https://github.com/explainingai-code/DDPM-Pytorch
Commit: b524321c101af13f28a5d1f4fbcca1a847c19924
Files: tools/train_ddpm.py, models/unet_base.py, scheduler/linear_noise_scheduler.py, dataset/mnist_dataset.py,
config/default.yaml
License: MIT (Copyright (c) 2024 ExplainingAI; full text in LICENSES/explainingai-code-DDPM-Pytorch.txt)
Domain: vision, diffusion (DDPM epsilon prediction, attention U-Net)

Deviations from the original:
- sizes (the config's ``model_params``): im_size 28 -> 16; down_channels [32, 64, 128, 256] -> [16, 32, 64, 64],
  mid_channels [256, 256, 128] -> [64, 64, 64] (the U-Net's asserts hold), time_emb_dim 128 -> 32,
  num_down/mid/up_layers 2 -> 1; down_sample [True, True, False], num_heads 4 and the final 16 channels unchanged;
  batch_size 64 -> 16; lr 1e-4 -> 1e-3 so that 30 steps show the loss falling (the original trains 40 epochs);
  num_timesteps 1000, beta_start / beta_end unchanged;
- data: the MNIST png folders (``MnistDataset``) are replaced by 512 synthetic 16x16 "digits" made from ``seed``
  (10 classes of 2-3 bar strokes, each shifted by up to one pixel, with pixel noise) in [0, 1], scaled to [-1, 1]
  by ``MnistDataset.__getitem__``'s ``2 * x - 1``; no workers;
- the yaml file is the dict it loads; ``device`` moves, tqdm, the per-epoch print and the checkpoint save / load are
  left out;
- one ``train_step`` is one iteration of the batch loop; the Program's batch is one draw of the loop's
  ``(noisy_im, t)`` with its ``noise``; ``eval_fn`` is the loss on a fixed held-out draw under ``no_grad`` (the
  original has no evaluation in training);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP034  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
from torch.optim import Adam
from torch.utils.data import DataLoader
from torch.utils.data.dataset import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16
CONFIG = {
    'diffusion_params': {'num_timesteps': 1000, 'beta_start': 0.0001, 'beta_end': 0.02},
    'model_params': {'im_channels': 1, 'im_size': IMG, 'down_channels': [16, 32, 64, 64], 'mid_channels': [64, 64, 64],
                     'down_sample': [True, True, False], 'time_emb_dim': 32, 'num_down_layers': 1,
                     'num_mid_layers': 1, 'num_up_layers': 1, 'num_heads': 4},
    'train_params': {'task_name': 'default', 'batch_size': 16, 'num_epochs': 40, 'lr': 0.001},
}


# ---- scheduler/linear_noise_scheduler.py ---------------------------------------------------------------------------

class LinearNoiseScheduler:
    r"""
    Class for the linear noise scheduler that is used in DDPM.
    """
    def __init__(self, num_timesteps, beta_start, beta_end):
        self.num_timesteps = num_timesteps
        self.beta_start = beta_start
        self.beta_end = beta_end
        
        self.betas = torch.linspace(beta_start, beta_end, num_timesteps)
        self.alphas = 1. - self.betas
        self.alpha_cum_prod = torch.cumprod(self.alphas, dim=0)
        self.sqrt_alpha_cum_prod = torch.sqrt(self.alpha_cum_prod)
        self.sqrt_one_minus_alpha_cum_prod = torch.sqrt(1 - self.alpha_cum_prod)
        
    def add_noise(self, original, noise, t):
        r"""
        Forward method for diffusion
        :param original: Image on which noise is to be applied
        :param noise: Random Noise Tensor (from normal dist)
        :param t: timestep of the forward process of shape -> (B,)
        :return:
        """
        original_shape = original.shape
        batch_size = original_shape[0]
        
        sqrt_alpha_cum_prod = self.sqrt_alpha_cum_prod.to(original.device)[t].reshape(batch_size)
        sqrt_one_minus_alpha_cum_prod = self.sqrt_one_minus_alpha_cum_prod.to(original.device)[t].reshape(batch_size)
        
        # Reshape till (B,) becomes (B,1,1,1) if image is (B,C,H,W)
        for _ in range(len(original_shape) - 1):
            sqrt_alpha_cum_prod = sqrt_alpha_cum_prod.unsqueeze(-1)
        for _ in range(len(original_shape) - 1):
            sqrt_one_minus_alpha_cum_prod = sqrt_one_minus_alpha_cum_prod.unsqueeze(-1)
        
        # Apply and Return Forward process equation
        return (sqrt_alpha_cum_prod.to(original.device) * original
                + sqrt_one_minus_alpha_cum_prod.to(original.device) * noise)
        
    def sample_prev_timestep(self, xt, noise_pred, t):
        r"""
            Use the noise prediction by model to get
            xt-1 using xt and the noise predicted
        :param xt: current timestep sample
        :param noise_pred: model noise prediction
        :param t: current timestep we are at
        :return:
        """
        x0 = ((xt - (self.sqrt_one_minus_alpha_cum_prod.to(xt.device)[t] * noise_pred)) /
              torch.sqrt(self.alpha_cum_prod.to(xt.device)[t]))
        x0 = torch.clamp(x0, -1., 1.)
        
        mean = xt - ((self.betas.to(xt.device)[t]) * noise_pred) / (self.sqrt_one_minus_alpha_cum_prod.to(xt.device)[t])
        mean = mean / torch.sqrt(self.alphas.to(xt.device)[t])
        
        if t == 0:
            return mean, x0
        else:
            variance = (1 - self.alpha_cum_prod.to(xt.device)[t - 1]) / (1.0 - self.alpha_cum_prod.to(xt.device)[t])
            variance = variance * self.betas.to(xt.device)[t]
            sigma = variance ** 0.5
            z = torch.randn(xt.shape).to(xt.device)
            
            # OR
            # variance = self.betas[t]
            # sigma = variance ** 0.5
            # z = torch.randn(xt.shape).to(xt.device)
            return mean + sigma * z, x0


# ---- models/unet_base.py ---------------------------------------------------------------------------------------

def get_time_embedding(time_steps, temb_dim):
    r"""
    Convert time steps tensor into an embedding using the
    sinusoidal time embedding formula
    :param time_steps: 1D tensor of length batch size
    :param temb_dim: Dimension of the embedding
    :return: BxD embedding representation of B time steps
    """
    assert temb_dim % 2 == 0, "time embedding dimension must be divisible by 2"
    
    # factor = 10000^(2i/d_model)
    factor = 10000 ** ((torch.arange(
        start=0, end=temb_dim // 2, dtype=torch.float32, device=time_steps.device) / (temb_dim // 2))
    )
    
    # pos / factor
    # timesteps B -> B, 1 -> B, temb_dim
    t_emb = time_steps[:, None].repeat(1, temb_dim // 2) / factor
    t_emb = torch.cat([torch.sin(t_emb), torch.cos(t_emb)], dim=-1)
    return t_emb


class DownBlock(nn.Module):
    r"""
    Down conv block with attention.
    Sequence of following block
    1. Resnet block with time embedding
    2. Attention block
    3. Downsample using 2x2 average pooling
    """
    def __init__(self, in_channels, out_channels, t_emb_dim,
                 down_sample=True, num_heads=4, num_layers=1):
        super().__init__()
        self.num_layers = num_layers
        self.down_sample = down_sample
        self.resnet_conv_first = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, in_channels if i == 0 else out_channels),
                    nn.SiLU(),
                    nn.Conv2d(in_channels if i == 0 else out_channels, out_channels,
                              kernel_size=3, stride=1, padding=1),
                )
                for i in range(num_layers)
            ]
        )
        self.t_emb_layers = nn.ModuleList([
            nn.Sequential(
                nn.SiLU(),
                nn.Linear(t_emb_dim, out_channels)
            )
            for _ in range(num_layers)
        ])
        self.resnet_conv_second = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, out_channels),
                    nn.SiLU(),
                    nn.Conv2d(out_channels, out_channels,
                              kernel_size=3, stride=1, padding=1),
                )
                for _ in range(num_layers)
            ]
        )
        self.attention_norms = nn.ModuleList(
            [nn.GroupNorm(8, out_channels)
             for _ in range(num_layers)]
        )
        
        self.attentions = nn.ModuleList(
            [nn.MultiheadAttention(out_channels, num_heads, batch_first=True)
             for _ in range(num_layers)]
        )
        self.residual_input_conv = nn.ModuleList(
            [
                nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, kernel_size=1)
                for i in range(num_layers)
            ]
        )
        self.down_sample_conv = nn.Conv2d(out_channels, out_channels,
                                          4, 2, 1) if self.down_sample else nn.Identity()
    
    def forward(self, x, t_emb):
        out = x
        for i in range(self.num_layers):
            
            # Resnet block of Unet
            resnet_input = out
            out = self.resnet_conv_first[i](out)
            out = out + self.t_emb_layers[i](t_emb)[:, :, None, None]
            out = self.resnet_conv_second[i](out)
            out = out + self.residual_input_conv[i](resnet_input)
            
            # Attention block of Unet
            batch_size, channels, h, w = out.shape
            in_attn = out.reshape(batch_size, channels, h * w)
            in_attn = self.attention_norms[i](in_attn)
            in_attn = in_attn.transpose(1, 2)
            out_attn, _ = self.attentions[i](in_attn, in_attn, in_attn)
            out_attn = out_attn.transpose(1, 2).reshape(batch_size, channels, h, w)
            out = out + out_attn
            
        out = self.down_sample_conv(out)
        return out


class MidBlock(nn.Module):
    r"""
    Mid conv block with attention.
    Sequence of following blocks
    1. Resnet block with time embedding
    2. Attention block
    3. Resnet block with time embedding
    """
    def __init__(self, in_channels, out_channels, t_emb_dim, num_heads=4, num_layers=1):
        super().__init__()
        self.num_layers = num_layers
        self.resnet_conv_first = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, in_channels if i == 0 else out_channels),
                    nn.SiLU(),
                    nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, kernel_size=3, stride=1,
                              padding=1),
                )
                for i in range(num_layers+1)
            ]
        )
        self.t_emb_layers = nn.ModuleList([
            nn.Sequential(
                nn.SiLU(),
                nn.Linear(t_emb_dim, out_channels)
            )
            for _ in range(num_layers + 1)
        ])
        self.resnet_conv_second = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, out_channels),
                    nn.SiLU(),
                    nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=1, padding=1),
                )
                for _ in range(num_layers+1)
            ]
        )
        
        self.attention_norms = nn.ModuleList(
            [nn.GroupNorm(8, out_channels)
                for _ in range(num_layers)]
        )
        
        self.attentions = nn.ModuleList(
            [nn.MultiheadAttention(out_channels, num_heads, batch_first=True)
                for _ in range(num_layers)]
        )
        self.residual_input_conv = nn.ModuleList(
            [
                nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, kernel_size=1)
                for i in range(num_layers+1)
            ]
        )
    
    def forward(self, x, t_emb):
        out = x
        
        # First resnet block
        resnet_input = out
        out = self.resnet_conv_first[0](out)
        out = out + self.t_emb_layers[0](t_emb)[:, :, None, None]
        out = self.resnet_conv_second[0](out)
        out = out + self.residual_input_conv[0](resnet_input)
        
        for i in range(self.num_layers):
            
            # Attention Block
            batch_size, channels, h, w = out.shape
            in_attn = out.reshape(batch_size, channels, h * w)
            in_attn = self.attention_norms[i](in_attn)
            in_attn = in_attn.transpose(1, 2)
            out_attn, _ = self.attentions[i](in_attn, in_attn, in_attn)
            out_attn = out_attn.transpose(1, 2).reshape(batch_size, channels, h, w)
            out = out + out_attn
            
            # Resnet Block
            resnet_input = out
            out = self.resnet_conv_first[i+1](out)
            out = out + self.t_emb_layers[i+1](t_emb)[:, :, None, None]
            out = self.resnet_conv_second[i+1](out)
            out = out + self.residual_input_conv[i+1](resnet_input)
        
        return out


class UpBlock(nn.Module):
    r"""
    Up conv block with attention.
    Sequence of following blocks
    1. Upsample
    1. Concatenate Down block output
    2. Resnet block with time embedding
    3. Attention Block
    """
    def __init__(self, in_channels, out_channels, t_emb_dim, up_sample=True, num_heads=4, num_layers=1):
        super().__init__()
        self.num_layers = num_layers
        self.up_sample = up_sample
        self.resnet_conv_first = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, in_channels if i == 0 else out_channels),
                    nn.SiLU(),
                    nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, kernel_size=3, stride=1,
                              padding=1),
                )
                for i in range(num_layers)
            ]
        )
        self.t_emb_layers = nn.ModuleList([
            nn.Sequential(
                nn.SiLU(),
                nn.Linear(t_emb_dim, out_channels)
            )
            for _ in range(num_layers)
        ])
        self.resnet_conv_second = nn.ModuleList(
            [
                nn.Sequential(
                    nn.GroupNorm(8, out_channels),
                    nn.SiLU(),
                    nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=1, padding=1),
                )
                for _ in range(num_layers)
            ]
        )
        
        self.attention_norms = nn.ModuleList(
            [
                nn.GroupNorm(8, out_channels)
                for _ in range(num_layers)
            ]
        )
        
        self.attentions = nn.ModuleList(
            [
                nn.MultiheadAttention(out_channels, num_heads, batch_first=True)
                for _ in range(num_layers)
            ]
        )
        self.residual_input_conv = nn.ModuleList(
            [
                nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, kernel_size=1)
                for i in range(num_layers)
            ]
        )
        self.up_sample_conv = nn.ConvTranspose2d(in_channels // 2, in_channels // 2,
                                                 4, 2, 1) \
            if self.up_sample else nn.Identity()
    
    def forward(self, x, out_down, t_emb):
        x = self.up_sample_conv(x)
        x = torch.cat([x, out_down], dim=1)
        
        out = x
        for i in range(self.num_layers):
            resnet_input = out
            out = self.resnet_conv_first[i](out)
            out = out + self.t_emb_layers[i](t_emb)[:, :, None, None]
            out = self.resnet_conv_second[i](out)
            out = out + self.residual_input_conv[i](resnet_input)
            
            batch_size, channels, h, w = out.shape
            in_attn = out.reshape(batch_size, channels, h * w)
            in_attn = self.attention_norms[i](in_attn)
            in_attn = in_attn.transpose(1, 2)
            out_attn, _ = self.attentions[i](in_attn, in_attn, in_attn)
            out_attn = out_attn.transpose(1, 2).reshape(batch_size, channels, h, w)
            out = out + out_attn

        return out


class Unet(nn.Module):
    r"""
    Unet model comprising
    Down blocks, Midblocks and Uplocks
    """
    def __init__(self, model_config):
        super().__init__()
        im_channels = model_config['im_channels']
        self.down_channels = model_config['down_channels']
        self.mid_channels = model_config['mid_channels']
        self.t_emb_dim = model_config['time_emb_dim']
        self.down_sample = model_config['down_sample']
        self.num_down_layers = model_config['num_down_layers']
        self.num_mid_layers = model_config['num_mid_layers']
        self.num_up_layers = model_config['num_up_layers']
        
        assert self.mid_channels[0] == self.down_channels[-1]
        assert self.mid_channels[-1] == self.down_channels[-2]
        assert len(self.down_sample) == len(self.down_channels) - 1
        
        # Initial projection from sinusoidal time embedding
        self.t_proj = nn.Sequential(
            nn.Linear(self.t_emb_dim, self.t_emb_dim),
            nn.SiLU(),
            nn.Linear(self.t_emb_dim, self.t_emb_dim)
        )

        self.up_sample = list(reversed(self.down_sample))
        self.conv_in = nn.Conv2d(im_channels, self.down_channels[0], kernel_size=3, padding=(1, 1))
        
        self.downs = nn.ModuleList([])
        for i in range(len(self.down_channels)-1):
            self.downs.append(DownBlock(self.down_channels[i], self.down_channels[i+1], self.t_emb_dim,
                                        down_sample=self.down_sample[i], num_layers=self.num_down_layers))
        
        self.mids = nn.ModuleList([])
        for i in range(len(self.mid_channels)-1):
            self.mids.append(MidBlock(self.mid_channels[i], self.mid_channels[i+1], self.t_emb_dim,
                                      num_layers=self.num_mid_layers))
        
        self.ups = nn.ModuleList([])
        for i in reversed(range(len(self.down_channels)-1)):
            self.ups.append(UpBlock(self.down_channels[i] * 2, self.down_channels[i-1] if i != 0 else 16,
                                    self.t_emb_dim, up_sample=self.down_sample[i], num_layers=self.num_up_layers))
        
        self.norm_out = nn.GroupNorm(8, 16)
        self.conv_out = nn.Conv2d(16, im_channels, kernel_size=3, padding=1)
    
    def forward(self, x, t):
        # Shapes assuming downblocks are [C1, C2, C3, C4]
        # Shapes assuming midblocks are [C4, C4, C3]
        # Shapes assuming downsamples are [True, True, False]
        # B x C x H x W
        out = self.conv_in(x)
        # B x C1 x H x W
        
        # t_emb -> B x t_emb_dim
        t_emb = get_time_embedding(torch.as_tensor(t).long(), self.t_emb_dim)
        t_emb = self.t_proj(t_emb)
        
        down_outs = []
        
        for idx, down in enumerate(self.downs):
            down_outs.append(out)
            out = down(out, t_emb)
        # down_outs  [B x C1 x H x W, B x C2 x H/2 x W/2, B x C3 x H/4 x W/4]
        # out B x C4 x H/4 x W/4
            
        for mid in self.mids:
            out = mid(out, t_emb)
        # out B x C3 x H/4 x W/4
        
        for up in self.ups:
            down_out = down_outs.pop()
            out = up(out, down_out, t_emb)
            # out [B x C2 x H/4 x W/4, B x C1 x H/2 x W/2, B x 16 x H x W]
        out = self.norm_out(out)
        out = nn.SiLU()(out)
        out = self.conv_out(out)
        # out B x C x H x W
        return out


# ---- dataset/mnist_dataset.py (on synthetic digits) -------------------------------------------------------------

def make_digits(seed, n=512):
    """10 classes of 16x16 bar patterns (2-3 strokes each), shifted by up to one pixel, with pixel noise, in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, IMG, IMG)
    for c in range(10):
        for _ in range(2 + c % 2):
            k = int(torch.randint(3, IMG - 3, (), generator=gen))
            lo, hi = sorted(torch.randint(2, IMG - 2, (2,), generator=gen).tolist())
            hi = max(hi, lo + 6)
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k - 1:k + 1, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 1:k + 1] = 1.0
    labels = torch.arange(n) % 10
    shifts = torch.randint(-1, 2, (n, 2), generator=gen)
    imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                        for c, sh in zip(labels, shifts)])
    return (0.9 * imgs + 0.1 * torch.rand(n, IMG, IMG, generator=gen)).clamp(0, 1).unsqueeze(1), labels


class MnistDataset(Dataset):
    r"""
    Nothing special here. Just a simple dataset class for mnist images.
    """
    def __init__(self, split, images):
        self.split = split
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        im_tensor = self.images[index]  # torchvision.transforms.ToTensor()(Image.open(...))

        # Convert input to -1 to 1 range.
        im_tensor = (2 * im_tensor) - 1
        return im_tensor


# ---- tools/train_ddpm.py -----------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = CONFIG
    diffusion_config = config['diffusion_params']
    model_config = config['model_params']
    train_config = config['train_params']

    # Create the noise scheduler
    scheduler = LinearNoiseScheduler(num_timesteps=diffusion_config['num_timesteps'],
                                     beta_start=diffusion_config['beta_start'],
                                     beta_end=diffusion_config['beta_end'])

    # Create the dataset
    images, _labels = make_digits(seed)
    mnist = MnistDataset('train', images)
    mnist_loader = DataLoader(mnist, batch_size=train_config['batch_size'], shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))

    # Instantiate the model
    model = Unet(model_config)
    model.train()

    optimizer = Adam(model.parameters(), lr=train_config['lr'])
    criterion = torch.nn.MSELoss()

    state = {"it": iter(mnist_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(mnist_loader)
            return next(state["it"])

    def train_step():
        im = next_batch()
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        im = im.float()

        # Sample random noise
        noise = torch.randn_like(im)

        # Sample timestep
        t = torch.randint(0, diffusion_config['num_timesteps'], (im.shape[0],))

        # Add noise to images according to timestep
        noisy_im = scheduler.add_noise(im, noise, t)
        if bug == "timestep_not_fed":
            # the model called with a constant timestep (classic): it cannot know how much noise to take out
            noise_pred = model(noisy_im, torch.zeros_like(t))
        else:
            noise_pred = model(noisy_im, t)

        if bug == "noise_target_redrawn":
            # the target drawn afresh instead of the noise that was added (classic): nothing links it to the input
            loss = criterion(noise_pred, torch.randn_like(im))
        else:
            loss = criterion(noise_pred, noise)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    # one draw of the loop's inputs (the Program's batch) and a held-out draw for eval_fn
    def draw(ims, g):
        noise = torch.randn(ims.shape, generator=g)
        t = torch.randint(0, diffusion_config['num_timesteps'], (ims.shape[0],), generator=g)
        return (scheduler.add_noise(ims, noise, t), t), noise

    first = torch.stack([mnist[i] for i in range(train_config['batch_size'])])
    batch = draw(first, torch.Generator().manual_seed(seed + 1))
    held_ims = 2 * make_digits(seed + 1000, n=32)[0] - 1
    held = draw(held_ims, torch.Generator().manual_seed(seed + 2))

    def loss_fn(noise_pred, noise):
        return criterion(noise_pred, noise)

    def eval_fn(m, _batch):
        m.eval()
        with torch.no_grad():
            (x, t), noise = held
            out = float(criterion(m(x, t), noise))
        m.train()
        return out

    return Program(name="explainingaiddpm_mnist", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=mnist_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the U-Net given a constant timestep (classic): the noise level is unknown to it.
    Bug("timestep_not_fed", functools.partial(_build, bug="timestep_not_fed"), "learning_ledger", ("DEPENDENCY",)),
    # the regression target is fresh noise, not the noise mixed into the input (classic).
    Bug("noise_target_redrawn", functools.partial(_build, bug="noise_target_redrawn"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() moved after backward() (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
