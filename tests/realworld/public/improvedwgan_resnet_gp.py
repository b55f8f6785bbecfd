# ruff: noqa: UP008, TRY002
"""jalola's improved-wgan-pytorch: WGAN-GP with the ResNet generator and critic of Gulrajani et al. (``GoodGenerator``
and ``GoodDiscriminator``: residual blocks with depth-to-space up-sampling and BatchNorm in the generator, mean-pool
down-sampling and LayerNorm in the critic), trained on an image folder. Each iteration first takes one generator
step with the critic frozen (``gen_cost.backward(mone)``), then unfreezes the critic and takes ``critic_iters`` (5)
critic steps on ``disc_fake - disc_real + gradient_penalty`` (lambda 10, per-example interpolates); Adam lr 1e-4 with
betas (0, 0.9) for both.

Source: https://github.com/jalola/improved-wgan-pytorch
Commit: 5bb0b729809152d9129ef72a9dd28b3ff83021a2
Files: train.py, models/wgan.py, training_utils.py (``weights_init``, ``gen_rand_noise``, ``calc_gradient_penalty``)
License: MIT (Copyright (c) [year] [fullname], as written upstream; full text in
LICENSES/jalola-improved-wgan-pytorch.txt)
Domain: generative, GAN (WGAN-GP, ResNet generator and critic)

Kept as written: ``MyConvo2d``, ``ConvMeanPool``, ``MeanPoolConv``, ``DepthToSpace``, ``UpSampleConv``,
``ResidualBlock``, ``GoodGenerator``, ``GoodDiscriminator``, ``weights_init``, ``gen_rand_noise``,
``calc_gradient_penalty``; the optimizers, ``one``/``mone``, and the loop body of ``train`` (the generator iteration
with the critic's ``requires_grad_(False)``, the ``requires_grad_(True)`` reset, the critic iterations with the fake
data detached, the ``next(dataiter, None)`` restart, the cost and ``w_dist``).

Deviations from the original:
- sizes for 2 CPU cores: ``dim`` 64 -> 16 (the image side: the generator starts at 1x1 and four up-samplings reach
  16x16; the critic's four down-samplings reach 1x1); the channel width, upstream ``dim`` too, is a ``width``
  argument set to 8 (so 64/32/16/8 channels), batch 64 -> 8,
  ``critic_iters`` 5 -> 2 (one iteration of five critic steps takes 0.6 s here), 1 generator iteration and lr 1e-4
  kept;
- data: the LSUN / ImageFolder images (``Resize``, ``RandomCrop``, ``ToTensor``, ``Normalize(0.5, 0.5)``) are
  replaced by synthetic 3x16x16 images in [-1, 1] made from ``seed``: each a coloured Gaussian blob at a random
  position on a dark background with pixel noise; a ``DataLoader`` shuffled by a ``torch.Generator(seed)`` with
  ``drop_last=True`` (no workers, no pinned memory);
- Adam's ``betas=(0,0.9)`` is ``(0.0,0.9)`` (this torch refuses an int beta with a float one);
- ``GoodGenerator.forward``'s last ``output.view(-1, 3 * dim * dim)`` is ``reshape``: the depth-to-space permutes
  hand the convolutions a channels-last tensor, whose output this torch will not ``view`` flat;
- ``torch.nn.DataParallel`` and ``.to(device)`` are dropped (CPU); ``dataiter.next()`` (Python 2) is
  ``next(dataiter)``; ``noisy_label_prob`` is its default 0, so the flipping branch is not taken and is left out;
- click options, timers, prints, tensorboardX, ``lib.plot``, validation, sample images and checkpoints are dropped;
  ``gpustat`` is not imported;
- one ``train_step`` is one iteration of the loop and returns the last critic iteration's ``disc_cost``; the
  Program's model is the critic, its batch the dataset's first 8 images with 8 fakes from the initial generator,
  its ``loss_fn`` ``disc_cost`` on the critic's outputs;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import autograd, nn
from torch.nn import init
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

DIM, WIDTH, BATCH = 16, 8, 8  # (port) dim 64 (side and width), batch_size 64


# ---- models/wgan.py ----------------------------------------------------------------------------------------------

class MyConvo2d(nn.Module):
    def __init__(self, input_dim, output_dim, kernel_size, he_init = True,  stride = 1, bias = True):
        super(MyConvo2d, self).__init__()
        self.he_init = he_init
        self.padding = int((kernel_size - 1)/2)
        self.conv = nn.Conv2d(input_dim, output_dim, kernel_size, stride=1, padding=self.padding, bias = bias)

    def forward(self, input):
        output = self.conv(input)
        return output


class ConvMeanPool(nn.Module):
    def __init__(self, input_dim, output_dim, kernel_size, he_init = True):
        super(ConvMeanPool, self).__init__()
        self.he_init = he_init
        self.conv = MyConvo2d(input_dim, output_dim, kernel_size, he_init = self.he_init)

    def forward(self, input):
        output = self.conv(input)
        output = (output[:,:,::2,::2] + output[:,:,1::2,::2] + output[:,:,::2,1::2] + output[:,:,1::2,1::2]) / 4
        return output


class MeanPoolConv(nn.Module):
    def __init__(self, input_dim, output_dim, kernel_size, he_init = True):
        super(MeanPoolConv, self).__init__()
        self.he_init = he_init
        self.conv = MyConvo2d(input_dim, output_dim, kernel_size, he_init = self.he_init)

    def forward(self, input):
        output = input
        output = (output[:,:,::2,::2] + output[:,:,1::2,::2] + output[:,:,::2,1::2] + output[:,:,1::2,1::2]) / 4
        output = self.conv(output)
        return output


class DepthToSpace(nn.Module):
    def __init__(self, block_size):
        super(DepthToSpace, self).__init__()
        self.block_size = block_size
        self.block_size_sq = block_size*block_size

    def forward(self, input):
        output = input.permute(0, 2, 3, 1)
        (batch_size, input_height, input_width, input_depth) = output.size()
        output_depth = int(input_depth / self.block_size_sq)
        output_width = int(input_width * self.block_size)
        output_height = int(input_height * self.block_size)
        t_1 = output.reshape(batch_size, input_height, input_width, self.block_size_sq, output_depth)
        spl = t_1.split(self.block_size, 3)
        stacks = [t_t.reshape(batch_size,input_height,output_width,output_depth) for t_t in spl]
        output = torch.stack(stacks,0).transpose(0,1).permute(0,2,1,3,4).reshape(batch_size,output_height,output_width,output_depth)
        output = output.permute(0, 3, 1, 2)
        return output


class UpSampleConv(nn.Module):
    def __init__(self, input_dim, output_dim, kernel_size, he_init = True, bias=True):
        super(UpSampleConv, self).__init__()
        self.he_init = he_init
        self.conv = MyConvo2d(input_dim, output_dim, kernel_size, he_init = self.he_init, bias=bias)
        self.depth_to_space = DepthToSpace(2)

    def forward(self, input):
        output = input
        output = torch.cat((output, output, output, output), 1)
        output = self.depth_to_space(output)
        output = self.conv(output)
        return output


class ResidualBlock(nn.Module):
    def __init__(self, input_dim, output_dim, kernel_size, resample=None, hw=64):
        super(ResidualBlock, self).__init__()

        self.input_dim = input_dim
        self.output_dim = output_dim
        self.kernel_size = kernel_size
        self.resample = resample
        self.bn1 = None
        self.bn2 = None
        self.relu1 = nn.ReLU()
        self.relu2 = nn.ReLU()
        if resample == 'down':
            self.bn1 = nn.LayerNorm([input_dim, hw, hw])
            self.bn2 = nn.LayerNorm([input_dim, hw, hw])
        elif resample == 'up':
            self.bn1 = nn.BatchNorm2d(input_dim)
            self.bn2 = nn.BatchNorm2d(output_dim)
        elif resample == None:
            #TODO: ????
            self.bn1 = nn.BatchNorm2d(output_dim)
            self.bn2 = nn.LayerNorm([input_dim, hw, hw])
        else:
            raise Exception('invalid resample value')

        if resample == 'down':
            self.conv_shortcut = MeanPoolConv(input_dim, output_dim, kernel_size = 1, he_init = False)
            self.conv_1 = MyConvo2d(input_dim, input_dim, kernel_size = kernel_size, bias = False)
            self.conv_2 = ConvMeanPool(input_dim, output_dim, kernel_size = kernel_size)
        elif resample == 'up':
            self.conv_shortcut = UpSampleConv(input_dim, output_dim, kernel_size = 1, he_init = False)
            self.conv_1 = UpSampleConv(input_dim, output_dim, kernel_size = kernel_size, bias = False)
            self.conv_2 = MyConvo2d(output_dim, output_dim, kernel_size = kernel_size)
        elif resample == None:
            self.conv_shortcut = MyConvo2d(input_dim, output_dim, kernel_size = 1, he_init = False)
            self.conv_1 = MyConvo2d(input_dim, input_dim, kernel_size = kernel_size, bias = False)
            self.conv_2 = MyConvo2d(input_dim, output_dim, kernel_size = kernel_size)
        else:
            raise Exception('invalid resample value')

    def forward(self, input):
        if self.input_dim == self.output_dim and self.resample == None:
            shortcut = input
        else:
            shortcut = self.conv_shortcut(input)

        output = input
        output = self.bn1(output)
        output = self.relu1(output)
        output = self.conv_1(output)
        output = self.bn2(output)
        output = self.relu2(output)
        output = self.conv_2(output)

        return shortcut + output


class GoodGenerator(nn.Module):
    def __init__(self, dim=64, output_dim=3*64*64, width=None):
        super(GoodGenerator, self).__init__()

        self.dim = dim
        self.w = w = width or dim  # (port) the channel width, upstream always dim

        self.ssize = self.dim // 16
        self.ln1 = nn.Linear(128, self.ssize*self.ssize*8*w)
        self.rb1 = ResidualBlock(8*w, 8*w, 3, resample = 'up')
        self.rb2 = ResidualBlock(8*w, 4*w, 3, resample = 'up')
        self.rb3 = ResidualBlock(4*w, 2*w, 3, resample = 'up')
        self.rb4 = ResidualBlock(2*w, 1*w, 3, resample = 'up')
        self.bn  = nn.BatchNorm2d(w)

        self.conv1 = MyConvo2d(1*w, 3, 3)
        self.relu = nn.ReLU()
        self.tanh = nn.Tanh()

    def forward(self, input):
        output = self.ln1(input.contiguous())
        output = output.view(-1, 8*self.w, self.ssize, self.ssize)
        output = self.rb1(output)
        output = self.rb2(output)
        output = self.rb3(output)
        output = self.rb4(output)

        output = self.bn(output)
        output = self.relu(output)
        output = self.conv1(output)
        output = self.tanh(output)
        output = output.reshape(-1, 3 * self.dim * self.dim)  # (port) view: see the docstring
        return output


class GoodDiscriminator(nn.Module):
    def __init__(self, dim=64, width=None):
        super(GoodDiscriminator, self).__init__()

        self.dim = dim
        self.w = w = width or dim  # (port) the channel width, upstream always dim

        self.ssize = self.dim // 16
        self.conv1 = MyConvo2d(3, w, 3, he_init = False)
        self.rb1 = ResidualBlock(w, 2*w, 3, resample = 'down', hw=self.dim)
        self.rb2 = ResidualBlock(2*w, 4*w, 3, resample = 'down', hw=int(self.dim/2))
        self.rb3 = ResidualBlock(4*w, 8*w, 3, resample = 'down', hw=int(self.dim/4))
        self.rb4 = ResidualBlock(8*w, 8*w, 3, resample = 'down', hw=int(self.dim/8))
        self.ln1 = nn.Linear(self.ssize*self.ssize*8*w, 1)

    def forward(self, input):
        output = input.contiguous()
        output = output.view(-1, 3, self.dim, self.dim)
        output = self.conv1(output)
        output = self.rb1(output)
        output = self.rb2(output)
        output = self.rb3(output)
        output = self.rb4(output)
        output = output.view(-1, self.ssize*self.ssize*8*self.w)
        output = self.ln1(output)
        output = output.view(-1)
        return output


# ---- training_utils.py -------------------------------------------------------------------------------------------

def weights_init(m):
    if isinstance(m, MyConvo2d):
        if m.conv.weight is not None:
            if m.he_init:
                init.kaiming_uniform_(m.conv.weight)
            else:
                init.xavier_uniform_(m.conv.weight)
        if m.conv.bias is not None:
            init.constant_(m.conv.bias, 0.0)
    if isinstance(m, nn.Linear):
        if m.weight is not None:
            init.xavier_uniform_(m.weight)
        if m.bias is not None:
            init.constant_(m.bias, 0.0)


def gen_rand_noise(batch_size, ):
    noise = torch.randn(batch_size, 128)
    return noise


def calc_gradient_penalty(netD, real_data, fake_data, batch_size, dim, device, gp_lambda, bug=None):
    if bug == "gp_alpha_per_pixel":
        alpha = torch.rand(batch_size, 3, dim, dim)
    else:
        alpha = torch.rand(batch_size, 1)
        alpha = alpha.expand(batch_size, int(real_data.nelement()/batch_size)).contiguous()
        alpha = alpha.view(batch_size, 3, dim, dim)
    alpha = alpha.to(device)

    fake_data = fake_data.view(batch_size, 3, dim, dim)
    interpolates = alpha * real_data.detach() + ((1 - alpha) * fake_data.detach())

    interpolates = interpolates.to(device)
    interpolates.requires_grad_(True)

    disc_interpolates = netD(interpolates)

    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size()).to(device),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]

    gradients = gradients.view(gradients.size(0), -1)
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * gp_lambda
    return gradient_penalty


# ---- data (port) -------------------------------------------------------------------------------------------------

def synthetic_images(seed, n=256):
    """Coloured Gaussian blobs at random positions on a dark background, in [-1, 1] as after Normalize(0.5, 0.5)."""
    gen = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(DIM).float(), torch.arange(DIM).float(), indexing="ij")
    centres = 3 + (DIM - 6) * torch.rand(n, 2, generator=gen)
    colours = 0.4 + 0.6 * torch.rand(n, 3, generator=gen)
    blob = torch.exp(-((xs - centres[:, 0, None, None]) ** 2 + (ys - centres[:, 1, None, None]) ** 2) / 8.0)
    images = colours[:, :, None, None] * blob[:, None]
    images = (images + 0.03 * torch.randn(n, 3, DIM, DIM, generator=gen)).clamp(0, 1)
    return (images - 0.5) / 0.5, torch.zeros(n, dtype=torch.long)


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    dim, lr, critic_iters, gen_iters, batch_size, gp_lambda = DIM, 1e-4, 2, 1, BATCH, 10  # (port) critic_iters 5
    device = torch.device("cpu")

    aG = GoodGenerator(dim, dim*dim*3, width=WIDTH)
    aD = GoodDiscriminator(dim, width=WIDTH)
    aG.apply(weights_init)
    aD.apply(weights_init)

    optimizer_g = torch.optim.Adam(aG.parameters(), lr=lr, betas=(0.0,0.9))  # (port) (0,0.9): this torch wants two floats
    optimizer_d = torch.optim.Adam(aD.parameters(), lr=lr, betas=(0.0,0.9))  # (port) (0,0.9): this torch wants two floats
    one = torch.tensor(1, dtype=torch.float)
    mone = one * -1

    images, labels = synthetic_images(seed)
    dataloader = DataLoader(TensorDataset(images, labels), batch_size=batch_size, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(seed))
    state = {"dataiter": iter(dataloader)}

    def train_step():
        #---------------------TRAIN G------------------------
        for p in aD.parameters():
            p.requires_grad_(False)  # freeze D

        gen_cost = None
        for _i in range(gen_iters):
            aG.zero_grad()
            noise = gen_rand_noise(batch_size).to(device)
            noise.requires_grad_(True)
            fake_data = aG(noise)
            gen_cost = aD(fake_data)
            gen_cost = gen_cost.mean()
            if bug == "generator_backward_one":
                gen_cost.backward(one)
            else:
                gen_cost.backward(mone)
            gen_cost = -gen_cost

        optimizer_g.step()
        #---------------------TRAIN D------------------------
        if bug != "critic_left_frozen":
            for p in aD.parameters():  # reset requires_grad
                p.requires_grad_(True)  # they are set to False below in training G
        for _i in range(critic_iters):
            aD.zero_grad()

            noise = gen_rand_noise(batch_size).to(device)
            with torch.no_grad():
                noisev = noise  # totally freeze G, training D
            fake_data = aG(noisev).detach()
            batch = next(state["dataiter"], None)
            if batch is None:
                state["dataiter"] = iter(dataloader)
                batch = next(state["dataiter"])  # (port) dataiter.next()
            batch = batch[0] #batch[1] contains labels
            real_data = batch.to(device)

            # train with real data
            disc_real = aD(real_data)
            disc_real = disc_real.mean()

            # train with fake data
            disc_fake = aD(fake_data)
            disc_fake = disc_fake.mean()

            gradient_penalty = calc_gradient_penalty(aD, real_data, fake_data, batch_size, dim, device, gp_lambda,
                                                     bug=bug)

            # final disc cost
            disc_cost = disc_fake - disc_real + gradient_penalty
            disc_cost.backward()
            w_dist = disc_fake  - disc_real  # noqa: F841
            optimizer_d.step()
        return disc_cost.detach()

    real = images[:batch_size]
    with torch.no_grad():
        fake = aG(gen_rand_noise(batch_size)).view(batch_size, 3, dim, dim)

    def loss_fn(d_out, targets):  # disc_cost on the critic's outputs for cat([real, fake])
        real_, fake_ = targets
        disc_real = d_out[:len(real_)].mean()
        disc_fake = d_out[len(real_):].mean()
        gradient_penalty = calc_gradient_penalty(aD, real_, fake_, len(real_), dim, device, gp_lambda, bug=bug)
        return disc_fake - disc_real + gradient_penalty

    return Program(name="improvedwgan_resnet_gp", model=aD, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=optimizer_d, train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the generator's ``gen_cost.backward(one)`` instead of ``mone``: the generator descends the
    # critic's score of its images, i.e. learns to make them look fake, while the critic is trained as written.
    Bug("generator_backward_one", functools.partial(_build, bug="generator_backward_one"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the ``requires_grad_(True)`` reset after the generator step left out: the critic frozen for the
    # generator stays frozen, its five steps per iteration compute a cost whose backward reaches no critic weight.
    Bug("critic_left_frozen", functools.partial(_build, bug="critic_left_frozen"), "four_structures",
        ("conv1.conv",)),
    # classic: the interpolation coefficient drawn per pixel (``torch.rand(batch_size, 3, dim, dim)``) instead of per
    # example: the penalty is taken at points off the lines between real and generated images, so it no longer
    # constrains the critic's gradient where the Wasserstein estimate needs it.
    Bug("gp_alpha_per_pixel", functools.partial(_build, bug="gp_alpha_per_pixel"), "learning_ledger",
        ("OBJECTIVE",)),
]
