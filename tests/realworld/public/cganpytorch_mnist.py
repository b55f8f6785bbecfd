"""Conditional GAN on MNIST from Lornatang's CGAN-PyTorch: an MLP generator (noise 100 + a 10-dim label embedding,
LeakyReLU 0.2, BatchNorm1d, tanh) and an MLP discriminator (flattened image + its own label embedding, LeakyReLU 0.2,
sigmoid), both initialized by ``_initialize_weights`` (Kaiming normal times 0.1); ``nn.MSELoss`` against real label 1
and fake label 0 (a least-squares GAN on a sigmoid output), Adam (lr 2e-4, betas (0.5, 0.999)) for each network. The
discriminator sees the real images with their true labels and the detached fakes with the labels they were drawn
for, each half backpropagated before its step; the generator is then trained to make D call its fakes real.

Source: https://github.com/Lornatang/CGAN-PyTorch
Commit: cb1d27db2a0f975d43f8944ee4c3fea506ca01fc
Files: train.py (``main_worker``), cgan_pytorch/models/generator.py, cgan_pytorch/models/discriminator.py
License: Apache-2.0 (full text in LICENSES/Lornatang-CGAN-PyTorch.txt)
Domain: vision, generative adversarial network (conditional GAN, least-squares loss)

Kept as written: both networks (sizes unchanged: 28x28x1 images, latent 100, widths 128/256/512/1024 and 512/256),
their ``_initialize_weights``, the criterion, both optimizers, batch 64, the loop body (labels made with
``torch.full((batch_size, 1), ...)``, ``randn([batch_size, 100])``, ``randint(0, 10, (batch_size,))`` conditions,
``discriminator.zero_grad()``, the real half with ``target``, the fake half on ``fake.detach()`` with
``conditional``, ``discriminator_optimizer.step()``, ``generator.zero_grad()``, the generator's loss against
``real_label``, ``generator_optimizer.step()``).

Deviations from the original:
- data: torchvision's MNIST (Resize(28), ToTensor, Normalize(0.5, 0.5)) is replaced by 640 synthetic 28x28
  one-channel "digits" made from ``seed`` (one stroke template per class, shifted by up to two pixels, with pixel
  noise), scaled to [-1, 1] as the Normalize gives; the DataLoader shuffles with a seeded generator;
- the device is the CPU (the ``.cuda(args.gpu)`` calls, DataParallel/DistributedDataParallel and cudnn flags are
  left out); tensorboard, the meters, the per-epoch sample grid and the checkpoints are left out; the noise comes
  from the global torch RNG, seeded at build;
- one ``train_step`` is one iteration of the epoch loop (``discriminator.train(); generator.train()`` once at
  build, once per epoch in the original), returning ``d_loss``; the Program's model is the discriminator, its batch
  ``({"inputs": cat([real, fake]), "labels": cat([target, conditional])}, cat([real_label, fake_label]))`` and
  ``loss_fn`` the criterion on D's outputs for that batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn  # noqa: PLR0402  (as written)
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 640

# ---- cgan_pytorch/models/generator.py ----------------------------------------------------------------------------


class Generator(nn.Module):
    def __init__(self, image_size: int = 28, channels: int = 1, num_classes: int = 10) -> None:
        super(Generator, self).__init__()  # noqa: UP008
        self.image_size = image_size
        self.channels = channels

        self.label_embedding = nn.Embedding(num_classes, num_classes)

        self.main = nn.Sequential(
            nn.Linear(100 + num_classes, 128),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(128, 256),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(256, 512),
            nn.BatchNorm1d(512),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(512, 1024),
            nn.BatchNorm1d(1024),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(1024, channels * image_size * image_size),
            nn.Tanh()
        )

        # Initializing all neural network weights.
        self._initialize_weights()

    def forward(self, inputs: torch.Tensor, labels: list = None) -> torch.Tensor:  # noqa: RUF013  (as written)
        conditional_inputs = torch.cat([inputs, self.label_embedding(labels)], dim=-1)
        out = self.main(conditional_inputs)
        out = out.reshape(out.size(0), self.channels, self.image_size, self.image_size)

        return out

    def _initialize_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
                m.weight.data *= 0.1
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                m.weight.data *= 0.1
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight)
                m.weight.data *= 0.1
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)


# ---- cgan_pytorch/models/discriminator.py ------------------------------------------------------------------------


class DiscriminatorForMNIST(nn.Module):
    def __init__(self, image_size: int = 28, channels: int = 1, num_classes: int = 10) -> None:
        super(DiscriminatorForMNIST, self).__init__()  # noqa: UP008

        self.label_embedding = nn.Embedding(num_classes, num_classes)

        self.main = nn.Sequential(
            nn.Linear(channels * image_size * image_size + num_classes, 512),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(512, 256),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),

            nn.Linear(256, 1),
            nn.Sigmoid()
        )

        # Initializing all neural network weights.
        self._initialize_weights()

    def forward(self, inputs: torch.Tensor, labels: list = None) -> torch.Tensor:  # noqa: RUF013  (as written)
        inputs = torch.flatten(inputs, 1)
        conditional = self.label_embedding(labels)
        conditional_inputs = torch.cat([inputs, conditional], dim=-1)
        out = self.main(conditional_inputs)

        return out

    _initialize_weights = Generator._initialize_weights  # (port) the same method, written twice in the original


def discriminator_for_mnist(image_size: int = 28, channels: int = 1) -> DiscriminatorForMNIST:
    model = DiscriminatorForMNIST(image_size, channels)

    return model


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


# ---- train.py ----------------------------------------------------------------------------------------------------


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = 64
    lr = 0.0002

    # create model
    generator = Generator(28, 1)  # configure(args): models.__dict__["cgan"]()
    discriminator = discriminator_for_mnist(28, 1)

    # Loss of original GAN paper.
    adversarial_criterion = nn.MSELoss()

    # All optimizer function and scheduler function.
    generator_optimizer = torch.optim.Adam(generator.parameters(), lr=lr, betas=(0.5, 0.999))
    if bug == "d_optimizer_over_main_only":
        # the discriminator's optimizer built over its MLP alone: its label embedding never moves
        discriminator_optimizer = torch.optim.Adam(discriminator.main.parameters(), lr=lr, betas=(0.5, 0.999))
    else:
        discriminator_optimizer = torch.optim.Adam(discriminator.parameters(), lr=lr, betas=(0.5, 0.999))

    dataset = synthetic_digits(N_IMAGES, seed)
    dataloader = DataLoader(dataset,
                                             batch_size=batch_size,
                                             shuffle=True,
                                             generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(dataloader)}

    # Switch to train mode.
    discriminator.train()
    generator.train()

    def train_step():  # one iteration of `for i, (inputs, target) in enumerate(dataloader)`
        try:
            inputs, target = next(state["it"])
        except StopIteration:
            state["it"] = iter(dataloader)
            inputs, target = next(state["it"])
        batch_size = inputs.size(0)

        # The real sample label is 1, and the generated sample label is 0.
        real_label = torch.full((batch_size, 1), 1, dtype=inputs.dtype)
        fake_label = torch.full((batch_size, 1), 0, dtype=inputs.dtype)

        noise = torch.randn([batch_size, 100])
        conditional = torch.randint(0, 10, (batch_size,))

        ##############################################
        # (1) Update D network: max E(x)[log(D(x))] + E(z)[log(1- D(z))]
        ##############################################
        # Set discriminator gradients to zero.
        if bug != "d_zero_grad_dropped":
            discriminator.zero_grad()

        # Train with real.
        if bug == "real_paired_with_random_labels":
            # the real images shown to D with the freshly drawn `conditional` instead of their own `target`
            real_output = discriminator(inputs, conditional)
        else:
            real_output = discriminator(inputs, target)
        d_loss_real = adversarial_criterion(real_output, real_label)
        d_loss_real.backward()

        # Train with fake.
        fake = generator(noise, conditional)
        fake_output = discriminator(fake.detach(), conditional)
        d_loss_fake = adversarial_criterion(fake_output, fake_label)
        d_loss_fake.backward()

        # Count all discriminator losses.
        d_loss = d_loss_real + d_loss_fake
        discriminator_optimizer.step()

        ##############################################
        # (2) Update G network: min E(z)[log(1- D(z))]
        ##############################################
        # Set generator gradients to zero.
        generator.zero_grad()

        fake_output = discriminator(fake, conditional)
        g_loss = adversarial_criterion(fake_output, real_label)
        g_loss.backward()
        generator_optimizer.step()
        return d_loss.detach()

    g = torch.Generator().manual_seed(seed + 1)
    real, target = dataset.tensors[0][:batch_size], dataset.tensors[1][:batch_size]
    conditional = torch.randint(0, 10, (batch_size,), generator=g)
    with torch.no_grad():
        generator.eval()
        fake = generator(torch.randn([batch_size, 100], generator=g), conditional)
        generator.train()
    labels = torch.cat([torch.full((batch_size, 1), 1.0), torch.full((batch_size, 1), 0.0)])
    batch = ({"inputs": torch.cat([real, fake]), "labels": torch.cat([target, conditional])}, labels)

    return Program(name="cganpytorch_mnist", model=discriminator, batch=batch, loss_fn=adversarial_criterion,
                   optimizer=discriminator_optimizer, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the real half of D's loss pairs the images with the random `conditional` drawn for the fakes instead of
    # their own `target`: the label the discriminator conditions on no longer belongs to the image.
    Bug("real_paired_with_random_labels", functools.partial(_build, bug="real_paired_with_random_labels"),
        "learning_ledger", ("TASK",)),
    # classic: the discriminator's optimizer built over `discriminator.main` only; its label embedding gets gradients
    # that no optimizer applies.
    Bug("d_optimizer_over_main_only", functools.partial(_build, bug="d_optimizer_over_main_only"), "four_structures",
        ("label_embedding",)),
    # classic: discriminator.zero_grad() dropped; D's gradients accumulate over iterations (and the generator's
    # backward through D adds to them).
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
