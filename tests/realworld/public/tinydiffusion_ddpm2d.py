"""A DDPM on a 2-D point cloud from tanelp's tiny-diffusion: an ``MLP`` of sinusoidal embeddings (the two coordinates
scaled by 25, the timestep) concatenated and fed to a residual GELU MLP that predicts the noise; a linear beta
schedule over 50 timesteps, ``add_noise`` with ``sqrt(alphas_cumprod)`` and ``sqrt(1 - alphas_cumprod)``, MSE between
the predicted and the drawn noise, AdamW (lr 1e-3), gradient norm clipped at 1, batch 32.

Source: https://github.com/tanelp/tiny-diffusion
Commit: 86975ff89ebe73a6e1e16171b969db7a18d9da68 (the commit adding LICENSE; ``ddpm.py`` and the rest are those of
726b6bbbf2c9e3d23dff9eaea2fda10d0af6a78c)
Files: ddpm.py (MLP, Block, NoiseScheduler, the training loop of ``__main__``), positional_embeddings.py
(SinusoidalEmbedding, PositionalEmbedding), datasets.py (circle_dataset)
License: MIT (Copyright (c) 2024 tanelp; full text in LICENSES/tanelp-tiny-diffusion.txt)
Domain: generative, diffusion (DDPM epsilon prediction on 2-D data)

Kept as written: the model (``hidden_size`` 128, ``hidden_layers`` 3, ``emb_size`` 128, sinusoidal time and input
embeddings, the inputs' ``scale=25.0``), ``NoiseScheduler`` (the parts the training loop uses: betas, alphas,
``alphas_cumprod`` and the ``add_noise`` coefficients), the loop body (fresh ``randn`` noise, ``randint`` timesteps,
``add_noise``, ``F.mse_loss(noise_pred, noise)``, ``backward``, ``clip_grad_norm_(..., 1.0)``, ``optimizer.step()``,
``optimizer.zero_grad()``), AdamW at lr 1e-3, batch 32 with ``shuffle=True, drop_last=True``, 50 timesteps.

Deviations from the original:
- data: the default ``dino`` dataset reads a TSV file that is not here; the script's ``circle`` dataset (pure numpy)
  is used instead, with its RNG seeded from ``seed`` (42 in the original) and 1024 points (8000);
- sizes: none changed;
- the sampling loop for the frames (``NoiseScheduler.step`` and the posterior terms it needs), tqdm, matplotlib,
  the saved model, frames and losses are left out (``step``/``q_posterior`` are not on the training path);
- one ``train_step`` is one iteration of the loop, the loader restarted at the end of an epoch; ``model.train()``
  is called once at build (once per epoch in the original); the Program's batch is one fixed draw
  ``({"x": noisy, "t": timesteps}, noise)`` made at build, ``loss_fn`` the loop's ``F.mse_loss``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- positional_embeddings.py ------------------------------------------------------------------------------------


class SinusoidalEmbedding(nn.Module):
    def __init__(self, size: int, scale: float = 1.0):
        super().__init__()
        self.size = size
        self.scale = scale

    def forward(self, x: torch.Tensor):
        x = x * self.scale
        half_size = self.size // 2
        emb = torch.log(torch.Tensor([10000.0])) / (half_size - 1)
        emb = torch.exp(-emb * torch.arange(half_size))
        emb = x.unsqueeze(-1) * emb.unsqueeze(0)
        emb = torch.cat((torch.sin(emb), torch.cos(emb)), dim=-1)
        return emb

    def __len__(self):
        return self.size


class PositionalEmbedding(nn.Module):
    def __init__(self, size: int, type: str, **kwargs):
        super().__init__()

        if type == "sinusoidal":
            self.layer = SinusoidalEmbedding(size, **kwargs)
        else:  # (port) the linear/learnable/zero/identity options are not used by the default run
            raise ValueError(f"Unknown positional embedding type: {type}")

    def forward(self, x: torch.Tensor):
        return self.layer(x)


# ---- ddpm.py -----------------------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, size: int):
        super().__init__()

        self.ff = nn.Linear(size, size)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor):
        return x + self.act(self.ff(x))


class MLP(nn.Module):
    def __init__(self, hidden_size: int = 128, hidden_layers: int = 3, emb_size: int = 128,
                 time_emb: str = "sinusoidal", input_emb: str = "sinusoidal"):
        super().__init__()

        self.time_mlp = PositionalEmbedding(emb_size, time_emb)
        self.input_mlp1 = PositionalEmbedding(emb_size, input_emb, scale=25.0)
        self.input_mlp2 = PositionalEmbedding(emb_size, input_emb, scale=25.0)

        concat_size = len(self.time_mlp.layer) + \
            len(self.input_mlp1.layer) + len(self.input_mlp2.layer)
        layers = [nn.Linear(concat_size, hidden_size), nn.GELU()]
        for _ in range(hidden_layers):
            layers.append(Block(hidden_size))
        layers.append(nn.Linear(hidden_size, 2))
        self.joint_mlp = nn.Sequential(*layers)

    def forward(self, x, t):
        x1_emb = self.input_mlp1(x[:, 0])
        x2_emb = self.input_mlp2(x[:, 1])
        t_emb = self.time_mlp(t)
        x = torch.cat((x1_emb, x2_emb, t_emb), dim=-1)
        x = self.joint_mlp(x)
        return x


class NoiseScheduler():  # noqa: UP039  (as written)
    def __init__(self,
                 num_timesteps=1000,
                 beta_start=0.0001,
                 beta_end=0.02,
                 beta_schedule="linear",
                 bug=None):

        self.num_timesteps = num_timesteps
        if beta_schedule == "linear":
            self.betas = torch.linspace(
                beta_start, beta_end, num_timesteps, dtype=torch.float32)
        elif beta_schedule == "quadratic":
            self.betas = torch.linspace(
                beta_start ** 0.5, beta_end ** 0.5, num_timesteps, dtype=torch.float32) ** 2

        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, axis=0)
        self.alphas_cumprod_prev = F.pad(
            self.alphas_cumprod[:-1], (1, 0), value=1.)

        # required for self.add_noise
        self.sqrt_alphas_cumprod = self.alphas_cumprod ** 0.5
        self.sqrt_one_minus_alphas_cumprod = (1 - self.alphas_cumprod) ** 0.5
        self.bug = bug

    def add_noise(self, x_start, x_noise, timesteps):
        s1 = self.sqrt_alphas_cumprod[timesteps]
        s2 = self.sqrt_one_minus_alphas_cumprod[timesteps]

        s1 = s1.reshape(-1, 1)
        s2 = s2.reshape(-1, 1)

        if self.bug == "noise_coefficients_swapped":
            # the two coefficients exchanged: the data is scaled by sqrt(1 - abar) and the noise by sqrt(abar)
            return s2 * x_start + s1 * x_noise
        return s1 * x_start + s2 * x_noise

    def __len__(self):
        return self.num_timesteps


# ---- datasets.py -------------------------------------------------------------------------------------------------


def circle_dataset(n=8000, seed=42):
    rng = np.random.default_rng(seed)  # (port) seeded from build's seed
    x = np.round(rng.uniform(-0.5, 0.5, n)/2, 1)*2
    y = np.round(rng.uniform(-0.5, 0.5, n)/2, 1)*2
    norm = np.sqrt(x**2 + y**2) + 1e-10
    x /= norm
    y /= norm
    theta = 2 * np.pi * rng.uniform(0, 1, n)
    r = rng.uniform(0, 0.03, n)
    x += r * np.cos(theta)
    y += r * np.sin(theta)
    X = np.stack((x, y), axis=1)
    X *= 3
    return TensorDataset(torch.from_numpy(X.astype(np.float32)))


# ---- the run -----------------------------------------------------------------------------------------------------


def _build(seed, bug=None):
    torch.manual_seed(seed)
    # the argparse defaults
    train_batch_size = 32
    learning_rate = 1e-3
    num_timesteps = 50
    beta_schedule = "linear"
    embedding_size = 128
    hidden_size = 128
    hidden_layers = 3

    dataset = circle_dataset(n=1024, seed=seed)
    dataloader = DataLoader(
        dataset, batch_size=train_batch_size, shuffle=True, drop_last=True,
        generator=torch.Generator().manual_seed(seed))

    model = MLP(
        hidden_size=hidden_size,
        hidden_layers=hidden_layers,
        emb_size=embedding_size,
        time_emb="sinusoidal",
        input_emb="sinusoidal")

    noise_scheduler = NoiseScheduler(
        num_timesteps=num_timesteps,
        beta_schedule=beta_schedule,
        bug=bug)

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=learning_rate,
    )

    model.train()
    state = {"it": iter(dataloader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(dataloader)
            return next(state["it"])

    def train_step():  # one iteration of `for step, batch in enumerate(dataloader)`
        batch = next_batch()
        batch = batch[0]
        noise = torch.randn(batch.shape)
        timesteps = torch.randint(
            0, noise_scheduler.num_timesteps, (batch.shape[0],)
        ).long()

        noisy = noise_scheduler.add_noise(batch, noise, timesteps)
        noise_pred = model(noisy, timesteps)
        loss = F.mse_loss(noise_pred, noise)
        loss.backward()

        if bug == "zero_grad_before_step":
            # the two last lines exchanged: the gradients are cleared before the step uses them
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.zero_grad()
            optimizer.step()
        else:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        return loss.detach()

    g = torch.Generator().manual_seed(seed + 1)
    x0 = dataset.tensors[0][:train_batch_size]
    noise = torch.randn(x0.shape, generator=g)
    timesteps = torch.randint(0, num_timesteps, (x0.shape[0],), generator=g).long()
    noisy = noise_scheduler.add_noise(x0, noise, timesteps)

    return Program(name="tinydiffusion_ddpm2d", model=model, batch=({"x": noisy, "t": timesteps}, noise),
                   loss_fn=F.mse_loss, optimizer=optimizer, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

SELF_CHECK_STEPS = 200  # one batch of 32 points at a random timestep: the loss is noisy step to step

BUGS = [
    # classic: add_noise's two coefficients exchanged (x_t = sqrt(1 - abar) x0 + sqrt(abar) eps): the noisy input is
    # almost pure noise at small t and almost clean data at large t, so the regression target no longer follows the
    # forward process the sampler inverts.
    Bug("noise_coefficients_swapped", functools.partial(_build, bug="noise_coefficients_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() moved before optimizer.step(): every step applies a zero gradient (AdamW's decay
    # alone moves the weights).
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
