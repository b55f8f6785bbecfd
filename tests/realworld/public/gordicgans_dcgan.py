"""DCGAN on CelebA from Aleksa Gordić's pytorch-GANs: a generator that projects the latent with a linear layer to a
4x4 volume and upsamples it with transposed-convolution blocks (no bias, BatchNorm, ReLU; tanh out), a discriminator
of strided-convolution blocks (no bias, LeakyReLU 0.2, BatchNorm after the first) collapsed by a last 4x4 convolution
to a sigmoid score; ``nn.BCELoss`` with real targets ``ones((B, 1, 1, 1))`` and fake targets zeros, Adam (lr 2e-4,
betas (0.5, 0.999)) for each network; D is trained on real plus detached fake images, then G on fresh latents
against the real targets.

Source: https://github.com/gordicaleksa/pytorch-GANs
Commit: 2119f6d9522c710e658f897cc7c97b8ac771b8ea
Files: train_dcgan.py, models/definitions/dcgan.py, utils/utils.py, utils/constants.py
License: MIT (Copyright (c) 2020 Aleksa Gordić; full text in LICENSES/gordicaleksa-pytorch-GANs.txt)
Domain: vision, generative adversarial network (DCGAN, BCE)

Deviations from the original:
- sizes for 2 CPU cores: images 64x64 -> 16x16, so each network keeps two of its four resampling blocks (the
  generator's channels [1024, 512, 256, 128, 3] -> [64, 32, 3], the discriminator's [3, 128, 256, 512, 1024, 1] ->
  [3, 16, 32, 1], the last 4x4 convolution with padding 0 still collapsing the 4x4 volume to 1x1);
  ``LATENT_SPACE_DIM`` 100 -> 16; batch_size 128 -> 16;
- data: the CelebA download (ImageFolder, ToTensor, Normalize(.5, .5)) is replaced by 128 synthetic 16x16 RGB
  "faces" made from ``seed`` (a skin-coloured disc with two dark eyes, shifted by up to two pixels, with pixel
  noise), scaled to [-1, 1] as the Normalize gives; the DataLoader shuffles with a seeded generator, drop_last kept;
- the device is the CPU; tensorboard, console logging, debug imagery and checkpoints are left out; the latents come
  from the global torch RNG, seeded at build;
- one ``train_step`` is one iteration of ``train_dcgan``'s inner loop, returning the discriminator's loss; the
  Program's model is the discriminator, its batch ``(cat([real, fake]), cat([real_gt, fake_gt]))`` and ``loss_fn``
  the adversarial loss on D's outputs for that batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.optim import Adam
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

LATENT_SPACE_DIM = 16  # input random vector size to generator network (100 in utils/constants.py)
IMG = 16
N_IMAGES = 128


# models/definitions/dcgan.py
def dcgan_upsample_block(in_channels, out_channels, normalize=True, activation=None):
    # Bias set to True gives unnatural color casts
    layers = [nn.ConvTranspose2d(in_channels=in_channels, out_channels=out_channels, kernel_size=4, stride=2, padding=1, bias=False)]
    # There were debates to whether BatchNorm should go before or after the activation function, in my experiments it
    # did not matter. Goodfellow also had a talk where he mentioned that it should not matter.
    if normalize:
        layers.append(nn.BatchNorm2d(out_channels))
    layers.append(nn.ReLU() if activation is None else activation)
    return layers


class ConvolutionalGenerativeNet(nn.Module):

    def __init__(self):
        super().__init__()

        # Constants as defined in the DCGAN paper (port: two of the four blocks, narrower)
        num_channels_per_layer = [64, 32, 3]
        self.init_volume_shape = (num_channels_per_layer[0], 4, 4)

        # Both with and without bias gave similar results
        self.linear = nn.Linear(LATENT_SPACE_DIM, num_channels_per_layer[0] * np.prod(self.init_volume_shape[1:]))

        self.net = nn.Sequential(
            *dcgan_upsample_block(num_channels_per_layer[0], num_channels_per_layer[1]),
            *dcgan_upsample_block(num_channels_per_layer[1], num_channels_per_layer[2], normalize=False, activation=nn.Tanh())
        )

    def forward(self, latent_vector_batch):
        # Project from the space with dimensionality 100 into the space with dimensionality 1024 * 4 * 4
        # -> basic linear algebra (huh you thought you'll never need math?) and reshape into a 3D volume
        latent_vector_batch_projected = self.linear(latent_vector_batch)
        latent_vector_batch_projected_reshaped = latent_vector_batch_projected.view(latent_vector_batch_projected.shape[0], *self.init_volume_shape)

        return self.net(latent_vector_batch_projected_reshaped)


def dcgan_downsample_block(in_channels, out_channels, normalize=True, activation=None, padding=1):
    layers = [nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=4, stride=2, padding=padding, bias=False)]
    if normalize:
        layers.append(nn.BatchNorm2d(out_channels))
    layers.append(nn.LeakyReLU(0.2) if activation is None else activation)
    return layers


class ConvolutionalDiscriminativeNet(nn.Module):

    def __init__(self):
        super().__init__()

        num_channels_per_layer = [3, 16, 32, 1]

        # Since the last volume has a shape = 1024x4x4, we can do 1 more block and since it has a 4x4 kernels it will
        # collapse the spatial dimension into 1x1 and putting channel number to 1 and padding to 0 we get a scalar value
        # that we can pass into Sigmoid - effectively simulating a fully connected layer.
        self.net = nn.Sequential(
            *dcgan_downsample_block(num_channels_per_layer[0], num_channels_per_layer[1], normalize=False),
            *dcgan_downsample_block(num_channels_per_layer[1], num_channels_per_layer[2]),
            *dcgan_downsample_block(num_channels_per_layer[2], num_channels_per_layer[3], normalize=False, activation=nn.Sigmoid(), padding=0),
        )

    def forward(self, img_batch):
        return self.net(img_batch)


# the CelebA download replaced by synthetic "faces" in [-1, 1] (what ToTensor + Normalize((.5,), (.5,)) give)
class SyntheticFaces(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(IMG).float(), torch.arange(IMG).float(), indexing="ij")
        images = []
        for _ in range(n):
            cy, cx = (7.5 + torch.randint(-2, 3, (2,), generator=g).float()).tolist()
            img = torch.full((3, IMG, IMG), 0.15)
            disc = ((yy - cy) ** 2 + (xx - cx) ** 2) <= 20.0
            img[:, disc] = torch.tensor([0.9, 0.7, 0.55])[:, None]
            for ex in (-2, 2):
                eye = ((yy - (cy - 1)) ** 2 + (xx - (cx + ex)) ** 2) <= 0.6
                img[:, eye] = 0.1
            img = (img + 0.05 * torch.randn(img.shape, generator=g)).clamp(0, 1)
            images.append(img * 2 - 1)
        self.images = torch.stack(images)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], 0


def get_gaussian_latent_batch(batch_size, device):
    return torch.randn((batch_size, LATENT_SPACE_DIM), device=device)


# Tried SGD for the discriminator, had problems tweaking it - Adam simply works nicely but default lr 1e-3 won't work!
# 0.0002 and 0.5, 0.999 are from the DCGAN paper it works here nicely!
def get_optimizers(d_net, g_net):
    d_opt = Adam(d_net.parameters(), lr=0.0002, betas=(0.5, 0.999))
    g_opt = Adam(g_net.parameters(), lr=0.0002, betas=(0.5, 0.999))
    return d_opt, g_opt


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    training_config = {"batch_size": 16}  # 128 in the original

    dataset = SyntheticFaces(N_IMAGES, seed)
    celeba_data_loader = DataLoader(dataset, batch_size=training_config['batch_size'], shuffle=True, drop_last=True,
                                    generator=torch.Generator().manual_seed(seed))

    # Fetch convolutional nets (place them on GPU if present) and optimizers which will tweak their weights
    discriminator_net = ConvolutionalDiscriminativeNet().train().to(device)
    generator_net = ConvolutionalGenerativeNet().train().to(device)
    discriminator_opt, generator_opt = get_optimizers(discriminator_net, generator_net)

    # 1s will configure BCELoss into -log(x) whereas 0s will configure it to -log(1-x)
    # So that means we can effectively use binary cross-entropy loss to achieve adversarial loss!
    adversarial_loss = nn.BCELoss()
    real_images_gt = torch.ones((training_config['batch_size'], 1, 1, 1), device=device)
    fake_images_gt = torch.zeros((training_config['batch_size'], 1, 1, 1), device=device)

    state = {"it": iter(celeba_data_loader)}

    def train_step():
        try:
            real_images, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(celeba_data_loader)
            real_images, _ = next(state["it"])

        real_images = real_images.to(device)  # Place imagery on GPU (if present)

        #
        # Train discriminator: maximize V = log(D(x)) + log(1-D(G(z))) or equivalently minimize -V
        #

        # Zero out .grad variables in discriminator network (otherwise we would have corrupt results)
        if bug != "d_zero_grad_dropped":
            discriminator_opt.zero_grad()

        # -log(D(x)) <- we minimize this by making D(x)/discriminator_net(real_images) as close to 1 as possible
        if bug == "real_scored_against_fake_gt":
            real_discriminator_loss = adversarial_loss(discriminator_net(real_images), fake_images_gt)
        else:
            real_discriminator_loss = adversarial_loss(discriminator_net(real_images), real_images_gt)

        # G(z) | G == generator_net and z == utils.get_gaussian_latent_batch(batch_size, device)
        fake_images = generator_net(get_gaussian_latent_batch(training_config['batch_size'], device))
        # D(G(z)), we call detach() so that we don't calculate gradients for the generator during backward()
        fake_images_predictions = discriminator_net(fake_images.detach())
        # -log(1 - D(G(z))) <- we minimize this by making D(G(z)) as close to 0 as possible
        fake_discriminator_loss = adversarial_loss(fake_images_predictions, fake_images_gt)

        discriminator_loss = real_discriminator_loss + fake_discriminator_loss
        discriminator_loss.backward()  # this will populate .grad vars in the discriminator net
        discriminator_opt.step()  # perform D weights update according to optimizer's strategy

        #
        # Train generator: minimize V1 = log(1-D(G(z))) or equivalently maximize V2 = log(D(G(z))) (or min of -V2)
        #

        # Zero out .grad variables in discriminator network (otherwise we would have corrupt results)
        generator_opt.zero_grad()

        # D(G(z)) (see above for explanations)
        generated_images_predictions = discriminator_net(generator_net(get_gaussian_latent_batch(training_config['batch_size'], device)))
        # By placing real_images_gt here we minimize -log(D(G(z))) which happens when D approaches 1
        # i.e. we're tricking D into thinking that these generated images are real!
        if bug == "g_loss_against_fake_gt":
            generator_loss = adversarial_loss(generated_images_predictions, fake_images_gt)
        else:
            generator_loss = adversarial_loss(generated_images_predictions, real_images_gt)

        generator_loss.backward()  # this will populate .grad vars in the G net (also in D but we won't use those)
        generator_opt.step()  # perform G weights update according to optimizer's strategy
        return discriminator_loss.detach()

    bs = training_config['batch_size']
    real = dataset.images[:bs]
    with torch.no_grad():
        generator_net.eval()
        fake = generator_net(torch.randn((bs, LATENT_SPACE_DIM), generator=torch.Generator().manual_seed(seed)))
        generator_net.train()
    labels = torch.cat([real_images_gt, fake_images_gt])

    return Program(name="gordicgans_dcgan", model=discriminator_net, batch=(torch.cat([real, fake]), labels),
                   loss_fn=adversarial_loss, optimizer=discriminator_opt, train_step=train_step,
                   loader=celeba_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the real half of D's loss scored against the fake targets (classic copy-paste slip): D is taught that every
    # image is fake, whatever it shows.
    # where re-declared in review (2026-12-07): a player's targets swapped is an objective pushing the wrong way,
    # as g_loss_against_fake_gt below is declared (OBJECTIVE's objective.adversarial_direction)
    Bug("real_scored_against_fake_gt", functools.partial(_build, bug="real_scored_against_fake_gt"),
        "learning_ledger", ("OBJECTIVE",)),
    # the generator's loss against ``fake_images_gt`` (classic): G learns to make D call its images fake.
    Bug("g_loss_against_fake_gt", functools.partial(_build, bug="g_loss_against_fake_gt"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``discriminator_opt.zero_grad()`` left out (classic): D's gradients, including the ones G's backward leaves
    # in D, pile up across steps (a whole-model slip: declared by its mechanism, README rule 6).
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
