"""DCGAN on MNIST from Lornatang's DCGAN-PyTorch: a transposed-convolution generator (BatchNorm, ReLU, tanh) and a
strided-convolution discriminator (LeakyReLU 0.2, BatchNorm, a sigmoid output), ``nn.BCELoss`` with real label 1 and
fake label 0, Adam (lr 2e-4, betas (0.5, 0.999)) for each network; the discriminator's loss is backpropagated in two
halves (real, then the detached fake) before its step, then the generator is trained to make D call its fakes real.

Source: https://github.com/Lornatang/DCGAN-PyTorch
Commit: 0ba9234cbc2cfdbcecca765ea1f530ccb7286764
Files: train.py, model.py, config.py
License: Apache-2.0 (Copyright 2021 Dakewe Biotech Corporation; full text in LICENSES/Lornatang-DCGAN-PyTorch.txt)
Domain: vision, generative adversarial network (DCGAN, BCE)

Kept as written: ``train``'s loop body (labels made with ``torch.full([label_size, 1], ...)``, noise
``randn([label_size, 100, 1, 1])``, ``discriminator.zero_grad()``, real and fake halves each backpropagated,
``d_optimizer.step()``, ``generator.zero_grad()``, the generator's loss against ``real_label``,
``g_optimizer.step()``), config.py's criterion and optimizers, both networks' layer pattern (the generator's
``_initialize_weights`` is defined and never called in the original, so it is copied and not called).

Deviations from the original:
- sizes for 2 CPU cores: images 64x64 -> 32x32, so each network loses one of its middle blocks (the discriminator's
  256 -> 512 convolution and the generator's 512 -> 256 transposed convolution), and the channel widths 64/128/256
  are divided by 8 (-> 8/16/32); the latent stays 100-dimensional; batch_size 64 -> 16;
- data: torchvision's MNIST (Resize, ToTensor, Normalize(0.5, 0.5)) is replaced by 256 synthetic 32x32 one-channel
  "digits" made from ``seed`` (one of ten stroke templates per class, shifted by up to two pixels, with pixel noise),
  scaled to [-1, 1] as the Normalize gives; the DataLoader shuffles with a seeded generator;
- config.py's module-level objects are built in ``_build``; the device is the CPU; tensorboard, the prints,
  checkpoints, resuming and the sample grids are left out; the noise comes from the global torch RNG, seeded at build;
- one ``train_step`` is one iteration of ``train``'s loop, returning the discriminator's ``d_loss``; the Program's
  model is the discriminator, its batch ``(cat([real, fake]), cat([real_label, fake_label]))`` and ``loss_fn`` the
  criterion on D's outputs for that batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import Tensor, nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMAGE_SIZE = 32  # (port) 64
N_IMAGES = 256


# ---- model.py -----------------------------------------------------------------------------------------------------

class Discriminator(nn.Module):
    def __init__(self) -> None:
        super(Discriminator, self).__init__()  # noqa: UP008
        self.main = nn.Sequential(
            # Input is 1 x 32 x 32  (port: 64 x 64 in the original)
            nn.Conv2d(1, 8, (4, 4), (2, 2), (1, 1), bias=True),
            nn.LeakyReLU(0.2, True),
            # State size. 8 x 16 x 16
            nn.Conv2d(8, 16, (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(16),
            nn.LeakyReLU(0.2, True),
            # State size. 16 x 8 x 8
            nn.Conv2d(16, 32, (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(32),
            nn.LeakyReLU(0.2, True),
            # State size. 32 x 4 x 4
            nn.Conv2d(32, 1, (4, 4), (1, 1), (0, 0), bias=True),
            nn.Sigmoid()
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.main(x)
        out = torch.flatten(out, 1)

        return out


class Generator(nn.Module):
    def __init__(self) -> None:
        super(Generator, self).__init__()  # noqa: UP008
        self.main = nn.Sequential(
            # Input is 100, going into a convolution.
            nn.ConvTranspose2d(100, 32, (4, 4), (1, 1), (0, 0), bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(True),
            # state size. 32 x 4 x 4
            nn.ConvTranspose2d(32, 16, (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(True),
            # state size. 16 x 8 x 8
            nn.ConvTranspose2d(16, 8, (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(True),
            # state size. 8 x 16 x 16
            nn.ConvTranspose2d(8, 1, (4, 4), (2, 2), (1, 1), bias=True),
            nn.Tanh()
            # state size. 1 x 32 x 32
        )

    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)

    # Support PyTorch.script function.
    def _forward_impl(self, x: Tensor) -> Tensor:
        out = self.main(x)

        return out

    def _initialize_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)


# ---- the data (port) -----------------------------------------------------------------------------------------------

class SyntheticDigits(Dataset):
    """Stands in for MNIST: 32x32 one-channel images in [-1, 1]; class c is a fixed set of 2-3 thick strokes,
    shifted by up to two pixels, with pixel noise."""

    def __init__(self, n, seed):
        gen = torch.Generator().manual_seed(seed)
        s = IMAGE_SIZE
        templates = torch.zeros(10, s, s)
        for c in range(10):
            for _ in range(2 + c % 2):
                k = int(torch.randint(6, s - 6, (), generator=gen))
                lo = int(torch.randint(4, s // 2, (), generator=gen))
                hi = lo + int(torch.randint(8, s // 2, (), generator=gen))
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k - 2:k + 2, lo:hi] = 1.0
                else:
                    templates[c, lo:hi, k - 2:k + 2] = 1.0
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                            for c, sh in zip(self.labels, shifts)])
        imgs = (0.9 * imgs + 0.1 * torch.rand(n, s, s, generator=gen)).clamp(0, 1)
        self.images = ((imgs - 0.5) / 0.5).unsqueeze(1)  # transforms.Normalize([0.5, ], [0.5, ])

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


# ---- config.py + train.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    batch_size = 16  # (port) 64

    discriminator = Discriminator().to(device)  # Load the discriminator model.
    generator = Generator().to(device)      # Load the generative model.

    # Loss function.
    criterion = nn.BCELoss().to(device)                 # Adversarial loss.

    # Optimizer.
    if bug == "d_optimizer_over_generator":
        # copy-paste slip: the discriminator's optimizer is built over the generator's parameters
        d_optimizer = optim.Adam(generator.parameters(), 0.0002, (0.5, 0.999))
    else:
        d_optimizer = optim.Adam(discriminator.parameters(), 0.0002, (0.5, 0.999))  # Discriminator learning rate during adversarial network training.
    g_optimizer = optim.Adam(generator.parameters(), 0.0002, (0.5, 0.999))  # Generator learning rate during adversarial network training.

    dataset = SyntheticDigits(N_IMAGES, seed)
    dataloader = DataLoader(dataset, batch_size, True, generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(dataloader)}

    def train_step():  # one iteration of train(dataloader, epoch)'s loop
        try:
            real, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(dataloader)
            real, _ = next(state["it"])
        discriminator.train()
        generator.train()
        # Copy the data to the specified device.
        real = real.to(device)
        label_size = real.size(0)
        # Create label. Set the real sample label to 1, and the fake sample label to 0.
        real_label = torch.full([label_size, 1], 1.0, dtype=real.dtype, device=device)
        fake_label = torch.full([label_size, 1], 0.0, dtype=real.dtype, device=device)
        # Create an image that conforms to the Gaussian distribution.
        noise = torch.randn([label_size, 100, 1, 1], device=device)

        # Initialize the discriminator model gradient.
        if bug != "d_zero_grad_dropped":
            discriminator.zero_grad()
        # Calculate the loss of the discriminator model on the real image.
        output = discriminator(real)
        d_loss_real = criterion(output, real_label)
        d_loss_real.backward()
        # Generate a fake image.
        fake = generator(noise)
        # Calculate the loss of the discriminator model on the fake image.
        output = discriminator(fake.detach())
        d_loss_fake = criterion(output, fake_label)
        d_loss_fake.backward()
        # Update the weights of the discriminator model.
        d_loss = d_loss_real + d_loss_fake
        d_optimizer.step()

        # Initialize the generator model gradient.
        generator.zero_grad()
        # Calculate the loss of the discriminator model on the fake image.
        output = discriminator(fake)
        # Adversarial loss.
        if bug == "g_loss_against_fake_label":
            # the generator's target copied from the discriminator's fake half: G learns to look fake
            g_loss = criterion(output, fake_label)
        else:
            g_loss = criterion(output, real_label)
        # Update the weights of the generator model.
        g_loss.backward()
        g_optimizer.step()
        return d_loss.detach()

    real = dataset.images[:batch_size]
    with torch.no_grad():
        generator.eval()
        fake = generator(torch.randn([batch_size, 100, 1, 1], generator=torch.Generator().manual_seed(seed)))
        generator.train()
    labels = torch.cat([torch.full([batch_size, 1], 1.0), torch.full([batch_size, 1], 0.0)])

    return Program(name="lornatangdcgan_mnist", model=discriminator, batch=(torch.cat([real, fake]), labels),
                   loss_fn=criterion, optimizer=d_optimizer, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the generator's loss is taken against fake_label (the label of the line above it in the
    # discriminator's half), so G is trained to make D reject its samples: the adversarial objective is inverted.
    Bug("g_loss_against_fake_label", functools.partial(_build, bug="g_loss_against_fake_label"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: discriminator.zero_grad() dropped; D's gradients accumulate over iterations (a whole-model slip of D).
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic copy-paste slip: d_optimizer built over generator.parameters(); the discriminator never moves.
    Bug("d_optimizer_over_generator", functools.partial(_build, bug="d_optimizer_over_generator"),
        "four_structures", ("main.0.weight",)),
]
