"""WGAN-GP on MNIST from chapter 17 of Raschka et al.'s "Machine Learning with PyTorch and Scikit-Learn": a
transposed-convolution generator with InstanceNorm and LeakyReLU 0.2 (tanh output), a convolutional critic with
InstanceNorm (its sigmoid output kept, as the book writes it), uniform noise in [-1, 1]; the critic is trained five
times per batch on ``D(G(z)).mean() - D(x).mean()`` plus the gradient penalty (lambda 10, on random interpolates of
``x.data`` and ``g_output.data``), the generator on ``-D(G(z)).mean()``; Adam (lr 2e-4) for both.

Source: https://github.com/rasbt/machine-learning-book
Commit: 35ab3774e8e249c43a98209d8efd94c060102003
Files: ch17/ch17_part2.py (the script export of ch17/ch17_part2.ipynb): the data cells, ``create_noise``,
``make_generator_network_wgan``, ``DiscriminatorWGAN``, ``gradient_penalty``, ``d_train_wgan``, ``g_train_wgan`` and
the WGAN training loop
License: MIT (Copyright (c) 2021-2025 Sebastian Raschka; full text in LICENSES/rasbt-machine-learning-book.txt)
Domain: vision, generative adversarial network (Wasserstein GAN with gradient penalty)

Kept as written: both networks' layers (kernel sizes, strides, ``bias=False``, InstanceNorm, the critic's final
sigmoid and ``output.view(-1, 1).squeeze(0)``), ``create_noise`` with ``mode_z = 'uniform'``, ``gradient_penalty``
(``alpha`` with ``requires_grad=True``, ``torch.autograd.grad`` with ``create_graph``, per-sample norms),
``d_train_wgan`` and ``g_train_wgan`` (each network's ``zero_grad`` on the module, the critic's fakes not detached),
``lambda_gp = 10.0``, ``critic_iterations = 5`` on the same batch, both optimizers (Adam, lr 2e-4), z size 100.

Deviations from the original:
- sizes for 2 CPU cores: ``n_filters`` 32 -> 8 and ``batch_size`` 64 -> 16 (the 28x28 image and z size 100 stay);
- data: torchvision's MNIST (ToTensor, Normalize(0.5, 0.5)) is replaced by 640 synthetic 28x28 one-channel "digits"
  made from ``seed`` (a fixed pair of thick strokes per class, shifted by up to two pixels, with pixel noise), scaled
  to [-1, 1] as the Normalize gives; the DataLoader (``shuffle=True, drop_last=True``) shuffles with a seeded
  generator; ``torch.manual_seed(1)``/``np.random.seed(1)`` become ``torch.manual_seed(seed)``;
- the device is the CPU; the package check, the prints, the per-epoch samples and the plots are left out;
  ``gen_model.train()`` is called once at build (once per epoch in the original);
- one ``train_step`` is one iteration of the epoch loop (five ``d_train_wgan(x)`` then ``g_train_wgan(x)``),
  returning the last critic loss; the Program's model is the critic, its batch ``(cat([real, fake]), (real,
  fake))`` and ``loss_fn`` the critic's loss (with the penalty) on its outputs for that batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn  # noqa: PLR0402  (as written)
from torch.autograd import grad as torch_grad
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 640

# ---- ch17/ch17_part2.py ------------------------------------------------------------------------------------------


def make_generator_network_wgan(input_size, n_filters):
    model = nn.Sequential(
        nn.ConvTranspose2d(input_size, n_filters*4, 4, 1, 0,
                           bias=False),
        nn.InstanceNorm2d(n_filters*4),
        nn.LeakyReLU(0.2),
        nn.ConvTranspose2d(n_filters*4, n_filters*2, 3, 2, 1, bias=False),
        nn.InstanceNorm2d(n_filters*2),
        nn.LeakyReLU(0.2),
        nn.ConvTranspose2d(n_filters*2, n_filters, 4, 2, 1, bias=False),
        nn.InstanceNorm2d(n_filters),
        nn.LeakyReLU(0.2),
        nn.ConvTranspose2d(n_filters, 1, 4, 2, 1, bias=False),
        nn.Tanh())
    return model


class DiscriminatorWGAN(nn.Module):
    def __init__(self, n_filters):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(1, n_filters, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2),
            nn.Conv2d(n_filters, n_filters*2, 4, 2, 1, bias=False),
            nn.InstanceNorm2d(n_filters * 2),
            nn.LeakyReLU(0.2),
            nn.Conv2d(n_filters*2, n_filters*4, 3, 2, 1, bias=False),
            nn.InstanceNorm2d(n_filters*4),
            nn.LeakyReLU(0.2),
            nn.Conv2d(n_filters*4, 1, 4, 1, 0, bias=False),
            nn.Sigmoid())

    def forward(self, input):
        output = self.network(input)
        return output.view(-1, 1).squeeze(0)


def create_noise(batch_size, z_size, mode_z):
    if mode_z == 'uniform':
        input_z = torch.rand(batch_size, z_size, 1, 1)*2 - 1
    elif mode_z == 'normal':
        input_z = torch.randn(batch_size, z_size, 1, 1)
    return input_z


# ---- the data (port) ---------------------------------------------------------------------------------------------


def synthetic_digits(n, seed, s=28):
    """Stands in for MNIST: 28x28 one-channel images in [-1, 1]; class c is a fixed pair of thick strokes, shifted by
    up to two pixels, with pixel noise."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, s, s)
    for c in range(10):
        for _ in range(2):
            k = int(torch.randint(6, s - 6, (), generator=gen))
            lo = int(torch.randint(3, s // 2, (), generator=gen))
            hi = lo + int(torch.randint(7, s // 2, (), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k - 2:k + 2, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 2:k + 2] = 1.0
    labels = torch.arange(n) % 10
    shifts = torch.randint(-2, 3, (n, 2), generator=gen)
    imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                        for c, sh in zip(labels, shifts)])
    imgs = (0.9 * imgs + 0.1 * torch.rand(n, s, s, generator=gen)).clamp(0, 1)
    return TensorDataset(((imgs - 0.5) / 0.5).unsqueeze(1), labels)


# ---- the run -----------------------------------------------------------------------------------------------------


def _build(seed, bug=None):
    device = "cpu"
    batch_size = 16  # (port) 64
    torch.manual_seed(seed)
    ## Set up the dataset
    mnist_dl = DataLoader(synthetic_digits(N_IMAGES, seed), batch_size=batch_size,
                          shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed))

    z_size = 100
    n_filters = 8  # (port) 32
    mode_z = 'uniform'

    gen_model = make_generator_network_wgan(z_size, n_filters).to(device)
    disc_model = DiscriminatorWGAN(n_filters).to(device)

    g_optimizer = torch.optim.Adam(gen_model.parameters(), 0.0002)
    d_optimizer = torch.optim.Adam(disc_model.parameters(), 0.0002)

    lambda_gp = 10.0
    critic_iterations = 5

    def gradient_penalty(real_data, generated_data):
        batch_size = real_data.size(0)

        # Calculate interpolation
        alpha = torch.rand(real_data.shape[0], 1, 1, 1, requires_grad=True, device=device)
        interpolated = alpha * real_data + (1 - alpha) * generated_data

        # Calculate probability of interpolated examples
        proba_interpolated = disc_model(interpolated)

        # Calculate gradients of probabilities with respect to examples
        gradients = torch_grad(outputs=proba_interpolated, inputs=interpolated,
                               grad_outputs=torch.ones(proba_interpolated.size(), device=device),
                               create_graph=True, retain_graph=True)[0]

        gradients = gradients.view(batch_size, -1)
        if bug == "gp_norm_over_whole_batch":
            # the norm taken over the whole batch's gradients at once (dim=1 left out): one norm pushed to 1
            gradients_norm = gradients.norm(2)
        else:
            gradients_norm = gradients.norm(2, dim=1)
        return lambda_gp * ((gradients_norm - 1)**2).mean()

    ## Train the discriminator
    def d_train_wgan(x):
        if bug != "critic_zero_grad_dropped":
            disc_model.zero_grad()

        batch_size = x.size(0)
        x = x.to(device)

        # Calculate probabilities on real and generated data
        d_real = disc_model(x)
        input_z = create_noise(batch_size, z_size, mode_z).to(device)
        g_output = gen_model(input_z)
        d_generated = disc_model(g_output)
        d_loss = d_generated.mean() - d_real.mean() + gradient_penalty(x.data, g_output.data)
        d_loss.backward()
        d_optimizer.step()

        return d_loss.data.item()

    ## Train the generator
    def g_train_wgan(x):
        gen_model.zero_grad()

        batch_size = x.size(0)
        input_z = create_noise(batch_size, z_size, mode_z).to(device)
        g_output = gen_model(input_z)

        d_generated = disc_model(g_output)
        g_loss = -d_generated.mean()

        # gradient backprop & optimize ONLY G's parameters
        g_loss.backward()
        g_optimizer.step()

        return g_loss.data.item()

    gen_model.train()
    state = {"it": iter(mnist_dl)}

    def train_step():  # one iteration of `for i, (x, _) in enumerate(mnist_dl)`
        try:
            x, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(mnist_dl)
            x, _ = next(state["it"])
        for _ in range(critic_iterations):
            d_loss = d_train_wgan(x)
        g_train_wgan(x)
        return d_loss

    g = torch.Generator().manual_seed(seed + 1)
    real = mnist_dl.dataset.tensors[0][:batch_size]
    with torch.no_grad():
        fake = gen_model(torch.rand(batch_size, z_size, 1, 1, generator=g) * 2 - 1)

    def loss_fn(d_out, targets):  # d_train_wgan's d_loss on the critic's outputs for cat([real, fake])
        real, fake = targets
        return d_out[len(real):].mean() - d_out[:len(real)].mean() + gradient_penalty(real, fake)

    return Program(name="mlbook_wgangp_mnist", model=disc_model, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=d_optimizer, train_step=train_step, loader=mnist_dl)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: `gradients.norm(2)` without `dim=1`: one norm over the whole batch's input gradients is pushed to 1
    # instead of each sample's, so the penalty no longer enforces the per-sample Lipschitz constraint.
    Bug("gp_norm_over_whole_batch", functools.partial(_build, bug="gp_norm_over_whole_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: disc_model.zero_grad() dropped from d_train_wgan: the critic's gradients accumulate over the five
    # critic iterations, the batches, and the generator's backward through it.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
