"""WGAN-GP on MNIST from Emilien Dupont's wgan-gp: a DCGAN-style generator (linear to 8*dim feature maps, four
stride-2 transposed convolutions with ReLU then BatchNorm, sigmoid output) and a critic (four stride-2 convolutions
with LeakyReLU and a sigmoid, a linear layer and a sigmoid), the critic trained every iteration on
``d_generated.mean() - d_real.mean() + gradient_penalty`` (penalty weight 10 on interpolates, the gradient norm
computed with a 1e-12 epsilon), the generator every 5th iteration on ``-d_generated.mean()``; Adam lr 1e-4,
betas (0.9, 0.99) for both.

Source: https://github.com/EmilienDupont/wgan-gp
Commit: ef82364f2a2ec452a52fbf4a739f95039ae76fe3
Files: main.py, models.py, training.py, dataloaders.py
License: MIT (Copyright (c) 2020 Emilien Dupont; full text in LICENSES/EmilienDupont-wgan-gp.txt)
Domain: vision, GAN (WGAN-GP with a DCGAN-style generator and critic)

Kept as written: ``models.py`` (``Generator``, ``Discriminator``, their sigmoids included), ``training.py``'s
``Trainer`` (``_critic_train_iteration``, ``_generator_train_iteration``, ``_gradient_penalty`` with
``torch_grad(..., create_graph=True, retain_graph=True)``, ``_train_epoch``'s loop body with the
``num_steps % critic_iterations`` schedule, ``sample_generator``), ``main.py``'s optimizers and configuration
(``latent_dim`` 100, ``gp_weight`` 10, ``critic_iterations`` 5, betas (.9, .99)).

Deviations from the original:
- sizes for 2 CPU cores: images 32x32 -> 16x16 (so ``feature_sizes`` is 1x1), ``dim`` 16 -> 8, batch_size 64 ->
  16; Adam's lr 1e-4 -> 1e-3 so that 30 steps of the self-check show the critic's loss falling (the original runs
  200 epochs);
- ``feature_sizes`` and ``output_size`` are made ints (``img_size / 16`` is a float, which this torch's
  ``nn.Linear`` and ``view`` refuse); ``.data[0]`` on the 0-dim losses (an error since torch 0.5) is ``.item()``;
  ``Variable`` wrappers are dropped (no-ops since torch 0.4);
- data: torchvision's MNIST download (``Resize(32)``, ``ToTensor``) is replaced by synthetic 16x16 "digits" in
  [0, 1] made from ``seed`` (10 classes of stroke patterns, shifted by up to one pixel, with pixel noise); the
  DataLoader shuffles with a ``torch.Generator(seed)``;
- CUDA, the prints, the training gif (``make_grid``, ``imageio``) and saving the models are dropped;
- one ``train_step`` is one iteration of ``_train_epoch``'s loop (the critic step, and the generator step every
  5th iteration) and returns the critic's ``d_loss``; the Program's model is the critic, its batch one real batch
  and one generated batch, its loss the critic's loss on them;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP039, D419, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd import grad as torch_grad

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16


# models.py
class Generator(nn.Module):
    def __init__(self, img_size, latent_dim, dim):
        super(Generator, self).__init__()

        self.dim = dim
        self.latent_dim = latent_dim
        self.img_size = img_size
        self.feature_sizes = (self.img_size[0] // 16, self.img_size[1] // 16)  # (port) / -> //

        self.latent_to_features = nn.Sequential(
            nn.Linear(latent_dim, 8 * dim * self.feature_sizes[0] * self.feature_sizes[1]),
            nn.ReLU()
        )

        self.features_to_image = nn.Sequential(
            nn.ConvTranspose2d(8 * dim, 4 * dim, 4, 2, 1),
            nn.ReLU(),
            nn.BatchNorm2d(4 * dim),
            nn.ConvTranspose2d(4 * dim, 2 * dim, 4, 2, 1),
            nn.ReLU(),
            nn.BatchNorm2d(2 * dim),
            nn.ConvTranspose2d(2 * dim, dim, 4, 2, 1),
            nn.ReLU(),
            nn.BatchNorm2d(dim),
            nn.ConvTranspose2d(dim, self.img_size[2], 4, 2, 1),
            nn.Sigmoid()
        )

    def forward(self, input_data):
        # Map latent into appropriate size for transposed convolutions
        x = self.latent_to_features(input_data)
        # Reshape
        x = x.view(-1, 8 * self.dim, self.feature_sizes[0], self.feature_sizes[1])
        # Return generated image
        return self.features_to_image(x)

    def sample_latent(self, num_samples):
        return torch.randn((num_samples, self.latent_dim))


class Discriminator(nn.Module):
    def __init__(self, img_size, dim):
        """
        img_size : (int, int, int)
            Height and width must be powers of 2.  E.g. (32, 32, 1) or
            (64, 128, 3). Last number indicates number of channels, e.g. 1 for
            grayscale or 3 for RGB
        """
        super(Discriminator, self).__init__()

        self.img_size = img_size

        self.image_to_features = nn.Sequential(
            nn.Conv2d(self.img_size[2], dim, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(dim, 2 * dim, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(2 * dim, 4 * dim, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(4 * dim, 8 * dim, 4, 2, 1),
            nn.Sigmoid()
        )

        # 4 convolutions of stride 2, i.e. halving of size everytime
        # So output size will be 8 * (img_size / 2 ^ 4) * (img_size / 2 ^ 4)
        output_size = 8 * dim * (img_size[0] // 16) * (img_size[1] // 16)  # (port) / -> //
        self.features_to_prob = nn.Sequential(
            nn.Linear(output_size, 1),
            nn.Sigmoid()
        )

    def forward(self, input_data):
        batch_size = input_data.size()[0]
        x = self.image_to_features(input_data)
        x = x.view(batch_size, -1)
        return self.features_to_prob(x)


# training.py
class Trainer():
    def __init__(self, generator, discriminator, gen_optimizer, dis_optimizer,
                 gp_weight=10, critic_iterations=5, print_every=50,
                 use_cuda=False, bug=None):
        self.G = generator
        self.G_opt = gen_optimizer
        self.D = discriminator
        self.D_opt = dis_optimizer
        self.losses = {'G': [], 'D': [], 'GP': [], 'gradient_norm': []}
        self.num_steps = 0
        self.use_cuda = use_cuda
        self.gp_weight = gp_weight
        self.critic_iterations = critic_iterations
        self.print_every = print_every
        self.bug = bug

    def _critic_train_iteration(self, data):
        """ """
        # Get generated data
        batch_size = data.size()[0]
        generated_data = self.sample_generator(batch_size)

        # Calculate probabilities on real and generated data
        d_real = self.D(data)
        d_generated = self.D(generated_data)

        # Get gradient penalty
        gradient_penalty = self._gradient_penalty(data, generated_data)
        self.losses['GP'].append(gradient_penalty.item())

        # Create total loss and optimize
        self.D_opt.zero_grad()
        if self.bug == "critic_signs_flipped":
            d_loss = d_real.mean() - d_generated.mean() + gradient_penalty
        else:
            d_loss = d_generated.mean() - d_real.mean() + gradient_penalty
        d_loss.backward()

        self.D_opt.step()

        # Record loss
        self.losses['D'].append(d_loss.item())
        return d_loss.detach()

    def _generator_train_iteration(self, data):
        """ """
        self.G_opt.zero_grad()

        # Get generated data
        batch_size = data.size()[0]
        generated_data = self.sample_generator(batch_size)

        # Calculate loss and optimize
        d_generated = self.D(generated_data)
        g_loss = - d_generated.mean()
        g_loss.backward()
        self.G_opt.step()

        # Record loss
        self.losses['G'].append(g_loss.item())

    def _gradient_penalty(self, real_data, generated_data):
        batch_size = real_data.size()[0]

        # Calculate interpolation
        alpha = torch.rand(batch_size, 1, 1, 1)
        alpha = alpha.expand_as(real_data)
        interpolated = alpha * real_data.data + (1 - alpha) * generated_data.data
        interpolated = interpolated.requires_grad_(True)

        # Calculate probability of interpolated examples
        prob_interpolated = self.D(interpolated)

        # Calculate gradients of probabilities with respect to examples
        gradients = torch_grad(outputs=prob_interpolated, inputs=interpolated,
                               grad_outputs=torch.ones(prob_interpolated.size()),
                               create_graph=self.bug != "gp_without_create_graph", retain_graph=True)[0]

        # Gradients have shape (batch_size, num_channels, img_width, img_height),
        # so flatten to easily take norm per example in batch
        gradients = gradients.view(batch_size, -1)
        self.losses['gradient_norm'].append(gradients.norm(2, dim=1).mean().item())

        # Derivatives of the gradient close to 0 can cause problems because of
        # the square root, so manually calculate norm and add epsilon
        gradients_norm = torch.sqrt(torch.sum(gradients ** 2, dim=1) + 1e-12)

        # Return gradient penalty
        return self.gp_weight * ((gradients_norm - 1) ** 2).mean()

    def train_iteration(self, data):
        # one iteration of _train_epoch's loop
        self.num_steps += 1
        d_loss = self._critic_train_iteration(data[0])
        # Only update generator every |critic_iterations| iterations
        if self.num_steps % self.critic_iterations == 0:
            self._generator_train_iteration(data[0])
        return d_loss

    def sample_generator(self, num_samples):
        latent_samples = self.G.sample_latent(num_samples)
        generated_data = self.G(latent_samples)
        return generated_data


class StrokeDigits(torch.utils.data.Dataset):
    """10 classes of 16x16 stroke patterns (2-3 bars each), shifted by up to one pixel, with pixel noise, in [0, 1]."""

    def __init__(self, seed, n=640):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(10, IMG, IMG)
        for c in range(10):
            for _ in range(2 + c % 2):
                k = int(torch.randint(3, IMG - 3, (), generator=gen))
                lo = int(torch.randint(2, IMG // 2, (), generator=gen))
                hi = lo + int(torch.randint(5, IMG // 2, (), generator=gen))
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k - 1:k + 1, lo:hi] = 1.0
                else:
                    templates[c, lo:hi, k - 1:k + 1] = 1.0
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-1, 2, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                            for c, sh in zip(self.labels, shifts)])
        self.images = (0.9 * imgs + 0.1 * torch.rand(n, IMG, IMG, generator=gen)).clamp(0, 1).unsqueeze(1)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_data = StrokeDigits(seed)
    data_loader = torch.utils.data.DataLoader(train_data, batch_size=16, shuffle=True,
                                              generator=torch.Generator().manual_seed(seed))
    img_size = (IMG, IMG, 1)

    generator = Generator(img_size=img_size, latent_dim=100, dim=8)
    discriminator = Discriminator(img_size=img_size, dim=8)

    # Initialize optimizers
    lr = 1e-3  # (port) 1e-4
    betas = (.9, .99)
    G_optimizer = optim.Adam(generator.parameters(), lr=lr, betas=betas)
    if bug == "D_optimizer_over_generator":
        D_optimizer = optim.Adam(generator.parameters(), lr=lr, betas=betas)
    else:
        D_optimizer = optim.Adam(discriminator.parameters(), lr=lr, betas=betas)

    trainer = Trainer(generator, discriminator, G_optimizer, D_optimizer, use_cuda=False, bug=bug)

    state = {"it": iter(data_loader)}

    def train_step():
        try:
            data = next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            data = next(state["it"])
        return trainer.train_iteration(data)

    real = train_data.images[:16]
    with torch.no_grad():
        fake = trainer.sample_generator(16)

    def loss_fn(d_out, targets):  # the critic's d_loss on its outputs for cat([real, fake])
        real_, fake_ = targets
        d_real = d_out[:len(real_)]
        d_generated = d_out[len(real_):]
        gradient_penalty = trainer._gradient_penalty(real_, fake_)
        if bug == "critic_signs_flipped":
            return d_real.mean() - d_generated.mean() + gradient_penalty
        return d_generated.mean() - d_real.mean() + gradient_penalty

    return Program(name="dupontwgangp_mnist", model=discriminator, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=D_optimizer, train_step=train_step, loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the penalty's gradient taken without create_graph=True: the gradient norms are constants to autograd,
    # so the penalty adds a number to d_loss and nothing to the critic's gradient (no Lipschitz constraint).
    Bug("gp_without_create_graph", functools.partial(_build, bug="gp_without_create_graph"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the critic's two terms swapped (d_real - d_generated) while the generator keeps -d_generated: the
    # critic now scores generated images as real, and the generator is pushed away from the data.
    Bug("critic_signs_flipped", functools.partial(_build, bug="critic_signs_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: D_optimizer = optim.Adam(generator.parameters(), ...): the critic never moves.
    Bug("D_optimizer_over_generator", functools.partial(_build, bug="D_optimizer_over_generator"),
        "four_structures", ("image_to_features.0",)),
]
