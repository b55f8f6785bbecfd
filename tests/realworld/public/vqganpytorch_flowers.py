"""VQGAN from dome272's VQGAN-pytorch: a convolutional encoder (residual blocks with GroupNorm and Swish, a non-local
attention block), a codebook quantizer (nearest embedding, codebook + commitment loss, straight-through estimator),
quant/post-quant 1x1 convolutions and a decoder, trained on L1 + LPIPS reconstruction and the codebook loss, with a
PatchGAN discriminator (hinge loss) switched on after ``disc_start`` steps and its generator term weighted by the
adaptive ``lambda`` (ratio of the two losses' gradient norms at the decoder's last layer); Adam (betas (0.5, 0.9))
for each part.

Source: https://github.com/dome272/VQGAN-pytorch
Commit: aa648485da07fd7ebe6f85da2fdbae69db329c58
Files: training_vqgan.py, vqgan.py, encoder.py, decoder.py, codebook.py, helper.py, discriminator.py, lpips.py,
utils.py
License: MIT (Copyright (c) 2022 Dominic Rampas; full text in LICENSES/dome272-VQGAN-pytorch.txt)
Domain: vision, generative (VQGAN: vector-quantized autoencoder with perceptual and adversarial losses)

Kept as written: ``TrainVQGAN.configure_optimizers`` (``opt_vq`` over encoder, decoder, codebook, quant_conv and
post_quant_conv; ``opt_disc`` over the discriminator; lr, eps 1e-8, betas (0.5, 0.9)), ``weights_init`` on the
discriminator, the LPIPS module in eval mode, ``train``'s loop body (the forward, ``adopt_weight``, the perceptual
+ L1 reconstruction loss, ``g_loss = -mean(disc_fake)``, ``calculate_lambda``, the hinge losses, the two backward
passes (the first with ``retain_graph=True``) and the two steps in that order), ``VQGAN``, ``Codebook`` (its loss with
``beta`` on the second term, as written), ``ResidualBlock``, ``NonLocalBlock``, ``DownSampleBlock``,
``UpSampleBlock``, ``GroupNorm`` (32 groups), ``Swish``, the PatchGAN ``Discriminator`` and the LPIPS forward
(scaling layer, channel-normalized feature differences, 1x1 linear layers, spatial average).

Deviations from the original:
- sizes for 2 CPU cores: images 256x256 -> 16x16; the encoder's channels [128, 128, 128, 256, 256, 512] -> [32, 32,
  64] (one down-sampling to 8x8) with ``num_res_blocks`` 2 -> 1 and ``resolution`` 16 (so the attention block
  after the first stage's residual block runs at 16x16 as ``attn_resolutions = [16]`` asks); the decoder's
  channels [512, 256, 256, 128, 128] -> [64, 32] (one up-sampling) with ``num_res_blocks`` 3 -> 1 and
  ``resolution`` 8; latent_dim 256 -> 32, num_codebook_vectors 1024 -> 64, batch_size 6 -> 4; the
  discriminator's ``num_filters_last`` 64 -> 8 and ``n_layers`` 3 -> 2; lr 2.25e-5 -> 5e-4 so that the 30 steps of the self-check show
  learning; ``disc_start`` 10000 -> 100 (about the same share of a run: the first 30 steps, like the original's first
  10000, train the autoencoder alone while the discriminator's loss is multiplied by 0);
- LPIPS: the pretrained VGG16 (torchvision download) and the linear layers' checkpoint (a download) are not here:
  ``VGG16`` is torchvision's ``vgg16().features`` layer list written out with random weights and its widths
  divided by 8 (8, 16, 32, 64, 64), the ``NetLinLayer`` weights stay at their random initialization (the original's
  checkpoint does not load into them either: https://github.com/dome272/VQGAN-pytorch/issues/25), every LPIPS
  parameter frozen as in the original;
- data: the flowers folder (PIL, albumentations resize + centre crop) is replaced by 64 synthetic 16x16 colour
  images in [-1, 1] made from ``seed`` (soft discs and bars of random colours on a colour gradient); the DataLoader
  keeps ``shuffle=False``;
- the device is the CPU; tqdm, the image grids, ``prepare_training``'s folders and the checkpoints are left out;
- one ``train_step`` is one iteration of ``train``'s inner loop (a new epoch restarts the loader), returning
  ``vq_loss``; the Program's model is the VQGAN, its optimizer ``opt_vq``, its batch ``(imgs, imgs)`` and
  ``loss_fn`` the VQGAN's objective before the discriminator starts (``perceptual_rec_loss + q_loss``) on the
  model's outputs ``(decoded_images, indices, q_loss)``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIZE = 16  # (port) 256
N_IMAGES = 64


# ---- helper.py -----------------------------------------------------------------------------------------------------

class GroupNorm(nn.Module):
    def __init__(self, channels):
        super(GroupNorm, self).__init__()  # noqa: UP008
        self.gn = nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6, affine=True)

    def forward(self, x):
        return self.gn(x)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class ResidualBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(ResidualBlock, self).__init__()  # noqa: UP008
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.block = nn.Sequential(
            GroupNorm(in_channels),
            Swish(),
            nn.Conv2d(in_channels, out_channels, 3, 1, 1),
            GroupNorm(out_channels),
            Swish(),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1)
        )

        if in_channels != out_channels:
            self.channel_up = nn.Conv2d(in_channels, out_channels, 1, 1, 0)

    def forward(self, x):
        if self.in_channels != self.out_channels:
            return self.channel_up(x) + self.block(x)
        else:
            return x + self.block(x)


class UpSampleBlock(nn.Module):
    def __init__(self, channels):
        super(UpSampleBlock, self).__init__()  # noqa: UP008
        self.conv = nn.Conv2d(channels, channels, 3, 1, 1)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=2.0)
        return self.conv(x)


class DownSampleBlock(nn.Module):
    def __init__(self, channels):
        super(DownSampleBlock, self).__init__()  # noqa: UP008
        self.conv = nn.Conv2d(channels, channels, 3, 2, 0)

    def forward(self, x):
        pad = (0, 1, 0, 1)
        x = F.pad(x, pad, mode="constant", value=0)
        return self.conv(x)


class NonLocalBlock(nn.Module):
    def __init__(self, channels):
        super(NonLocalBlock, self).__init__()  # noqa: UP008
        self.in_channels = channels

        self.gn = GroupNorm(channels)
        self.q = nn.Conv2d(channels, channels, 1, 1, 0)
        self.k = nn.Conv2d(channels, channels, 1, 1, 0)
        self.v = nn.Conv2d(channels, channels, 1, 1, 0)
        self.proj_out = nn.Conv2d(channels, channels, 1, 1, 0)

    def forward(self, x):
        h_ = self.gn(x)
        q = self.q(h_)
        k = self.k(h_)
        v = self.v(h_)

        b, c, h, w = q.shape

        q = q.reshape(b, c, h*w)
        q = q.permute(0, 2, 1)
        k = k.reshape(b, c, h*w)
        v = v.reshape(b, c, h*w)

        attn = torch.bmm(q, k)
        attn = attn * (int(c)**(-0.5))
        attn = F.softmax(attn, dim=2)
        attn = attn.permute(0, 2, 1)

        A = torch.bmm(v, attn)
        A = A.reshape(b, c, h, w)

        return x + A


# ---- encoder.py / decoder.py ---------------------------------------------------------------------------------------

class Encoder(nn.Module):
    def __init__(self, args):
        super(Encoder, self).__init__()  # noqa: UP008
        channels = [32, 32, 64]  # (port) [128, 128, 128, 256, 256, 512]
        attn_resolutions = [16]
        num_res_blocks = 1  # (port) 2
        resolution = 16  # (port) 256
        layers = [nn.Conv2d(args.image_channels, channels[0], 3, 1, 1)]
        for i in range(len(channels)-1):
            in_channels = channels[i]
            out_channels = channels[i + 1]
            for _j in range(num_res_blocks):
                layers.append(ResidualBlock(in_channels, out_channels))
                in_channels = out_channels
                if resolution in attn_resolutions:
                    layers.append(NonLocalBlock(in_channels))
            if i != len(channels)-2:
                layers.append(DownSampleBlock(channels[i+1]))
                resolution //= 2
        layers.append(ResidualBlock(channels[-1], channels[-1]))
        layers.append(NonLocalBlock(channels[-1]))
        layers.append(ResidualBlock(channels[-1], channels[-1]))
        layers.append(GroupNorm(channels[-1]))
        layers.append(Swish())
        layers.append(nn.Conv2d(channels[-1], args.latent_dim, 3, 1, 1))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class Decoder(nn.Module):
    def __init__(self, args):
        super(Decoder, self).__init__()  # noqa: UP008
        channels = [64, 32]  # (port) [512, 256, 256, 128, 128]
        attn_resolutions = [16]
        num_res_blocks = 1  # (port) 3
        resolution = 8  # (port) 16

        in_channels = channels[0]
        layers = [nn.Conv2d(args.latent_dim, in_channels, 3, 1, 1),
                  ResidualBlock(in_channels, in_channels),
                  NonLocalBlock(in_channels),
                  ResidualBlock(in_channels, in_channels)]

        for i in range(len(channels)):
            out_channels = channels[i]
            for _j in range(num_res_blocks):
                layers.append(ResidualBlock(in_channels, out_channels))
                in_channels = out_channels
                if resolution in attn_resolutions:
                    layers.append(NonLocalBlock(in_channels))
            if i != 0:
                layers.append(UpSampleBlock(in_channels))
                resolution *= 2

        layers.append(GroupNorm(in_channels))
        layers.append(Swish())
        layers.append(nn.Conv2d(in_channels, args.image_channels, 3, 1, 1))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


# ---- codebook.py ---------------------------------------------------------------------------------------------------

class Codebook(nn.Module):
    def __init__(self, args):
        super(Codebook, self).__init__()  # noqa: UP008
        self.num_codebook_vectors = args.num_codebook_vectors
        self.latent_dim = args.latent_dim
        self.beta = args.beta

        self.embedding = nn.Embedding(self.num_codebook_vectors, self.latent_dim)
        self.embedding.weight.data.uniform_(-1.0 / self.num_codebook_vectors, 1.0 / self.num_codebook_vectors)

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()
        z_flattened = z.view(-1, self.latent_dim)

        d = torch.sum(z_flattened**2, dim=1, keepdim=True) + \
            torch.sum(self.embedding.weight**2, dim=1) - \
            2*(torch.matmul(z_flattened, self.embedding.weight.t()))

        min_encoding_indices = torch.argmin(d, dim=1)
        z_q = self.embedding(min_encoding_indices).view(z.shape)

        loss = torch.mean((z_q.detach() - z)**2) + self.beta * torch.mean((z_q - z.detach())**2)

        z_q = z + (z_q - z).detach()

        z_q = z_q.permute(0, 3, 1, 2)

        return z_q, min_encoding_indices, loss


# ---- vqgan.py ------------------------------------------------------------------------------------------------------

class VQGAN(nn.Module):
    def __init__(self, args):
        super(VQGAN, self).__init__()  # noqa: UP008
        self.encoder = Encoder(args).to(device=args.device)
        self.decoder = Decoder(args).to(device=args.device)
        self.codebook = Codebook(args).to(device=args.device)
        self.quant_conv = nn.Conv2d(args.latent_dim, args.latent_dim, 1).to(device=args.device)
        self.post_quant_conv = nn.Conv2d(args.latent_dim, args.latent_dim, 1).to(device=args.device)

    def forward(self, imgs):
        encoded_images = self.encoder(imgs)
        quant_conv_encoded_images = self.quant_conv(encoded_images)
        codebook_mapping, codebook_indices, q_loss = self.codebook(quant_conv_encoded_images)
        post_quant_conv_mapping = self.post_quant_conv(codebook_mapping)
        decoded_images = self.decoder(post_quant_conv_mapping)

        return decoded_images, codebook_indices, q_loss

    def calculate_lambda(self, perceptual_loss, gan_loss):
        last_layer = self.decoder.model[-1]
        last_layer_weight = last_layer.weight
        perceptual_loss_grads = torch.autograd.grad(perceptual_loss, last_layer_weight, retain_graph=True)[0]
        gan_loss_grads = torch.autograd.grad(gan_loss, last_layer_weight, retain_graph=True)[0]

        λ = torch.norm(perceptual_loss_grads) / (torch.norm(gan_loss_grads) + 1e-4)
        λ = torch.clamp(λ, 0, 1e4).detach()
        return 0.8 * λ

    @staticmethod
    def adopt_weight(disc_factor, i, threshold, value=0.):
        if i < threshold:
            disc_factor = value
        return disc_factor


# ---- discriminator.py ----------------------------------------------------------------------------------------------

class Discriminator(nn.Module):
    def __init__(self, args, num_filters_last=8, n_layers=2):  # (port) 64, 3
        super(Discriminator, self).__init__()  # noqa: UP008

        layers = [nn.Conv2d(args.image_channels, num_filters_last, 4, 2, 1), nn.LeakyReLU(0.2)]
        num_filters_mult = 1

        for i in range(1, n_layers + 1):
            num_filters_mult_last = num_filters_mult
            num_filters_mult = min(2 ** i, 8)
            layers += [
                nn.Conv2d(num_filters_last * num_filters_mult_last, num_filters_last * num_filters_mult, 4,
                          2 if i < n_layers else 1, 1, bias=False),
                nn.BatchNorm2d(num_filters_last * num_filters_mult),
                nn.LeakyReLU(0.2, True)
            ]

        layers.append(nn.Conv2d(num_filters_last * num_filters_mult, 1, 4, 1, 1))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


# ---- lpips.py ------------------------------------------------------------------------------------------------------

class LPIPS(nn.Module):
    def __init__(self):
        super(LPIPS, self).__init__()  # noqa: UP008
        self.scaling_layer = ScalingLayer()
        self.channels = [8, 16, 32, 64, 64]  # (port) [64, 128, 256, 512, 512]
        self.vgg = VGG16()
        self.lins = nn.ModuleList([
            NetLinLayer(self.channels[0]),
            NetLinLayer(self.channels[1]),
            NetLinLayer(self.channels[2]),
            NetLinLayer(self.channels[3]),
            NetLinLayer(self.channels[4])
        ])

        # (port) self.load_from_pretrained(): a download; the weights stay random

        for param in self.parameters():
            param.requires_grad = False

    def forward(self, real_x, fake_x):
        features_real = self.vgg(self.scaling_layer(real_x))
        features_fake = self.vgg(self.scaling_layer(fake_x))
        diffs = {}

        for i in range(len(self.channels)):
            diffs[i] = (norm_tensor(features_real[i]) - norm_tensor(features_fake[i])) ** 2

        return sum([spatial_average(self.lins[i].model(diffs[i])) for i in range(len(self.channels))])


class ScalingLayer(nn.Module):
    def __init__(self):
        super(ScalingLayer, self).__init__()  # noqa: UP008
        self.register_buffer("shift", torch.Tensor([-.030, -.088, -.188])[None, :, None, None])
        self.register_buffer("scale", torch.Tensor([.458, .448, .450])[None, :, None, None])

    def forward(self, x):
        return (x - self.shift) / self.scale


class NetLinLayer(nn.Module):
    def __init__(self, in_channels, out_channels=1):
        super(NetLinLayer, self).__init__()  # noqa: UP008
        self.model = nn.Sequential(
            nn.Dropout(),
            nn.Conv2d(in_channels, out_channels, 1, 1, 0, bias=False)
        )


def _vgg16_features():
    """torchvision's ``vgg16().features`` (configuration "D") with the widths divided by 8 (port)."""
    layers, in_c = [], 3
    for v in [8, 8, "M", 16, 16, "M", 32, 32, 32, "M", 64, 64, 64, "M", 64, 64, 64, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(in_c, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            in_c = v
    return nn.Sequential(*layers)


class VGG16(nn.Module):
    def __init__(self):
        super(VGG16, self).__init__()  # noqa: UP008
        vgg_pretrained_features = _vgg16_features()  # (port) vgg16(pretrained=True).features
        slices = [vgg_pretrained_features[i] for i in range(30)]
        self.slice1 = nn.Sequential(*slices[0:4])
        self.slice2 = nn.Sequential(*slices[4:9])
        self.slice3 = nn.Sequential(*slices[9:16])
        self.slice4 = nn.Sequential(*slices[16:23])
        self.slice5 = nn.Sequential(*slices[23:30])

        for param in self.parameters():
            param.requires_grad = False

    def forward(self, x):
        h = self.slice1(x)
        h_relu1 = h
        h = self.slice2(h)
        h_relu2 = h
        h = self.slice3(h)
        h_relu3 = h
        h = self.slice4(h)
        h_relu4 = h
        h = self.slice5(h)
        h_relu5 = h
        vgg_outputs = namedtuple("VGGOutputs", ['relu1_2', 'relu2_2', 'relu3_3', 'relu4_3', 'relu5_3'])
        return vgg_outputs(h_relu1, h_relu2, h_relu3, h_relu4, h_relu5)


def norm_tensor(x):
    """
    Normalize images by their length to make them unit vector?
    :param x: batch of images
    :return: normalized batch of images
    """
    norm_factor = torch.sqrt(torch.sum(x**2, dim=1, keepdim=True))
    return x / (norm_factor + 1e-10)


def spatial_average(x):
    """
     imgs have: batch_size x channels x width x height --> average over width and height channel
    :param x: batch of images
    :return: averaged images along width and height
    """
    return x.mean([2, 3], keepdim=True)


# ---- utils.py ------------------------------------------------------------------------------------------------------

class SyntheticFlowers(Dataset):
    """Stands in for ``ImagePaths``: 16x16 colour images in [-1, 1] (``image / 127.5 - 1``), CHW float32: a soft disc
    or a bar of a random colour on a random colour gradient."""

    def __init__(self, n, seed):
        gen = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, SIZE), torch.linspace(0, 1, SIZE), indexing="ij")
        images = []
        for _ in range(n):
            c0, c1, cf = (torch.rand(3, 1, 1, generator=gen) for _ in range(3))
            bg = c0 * (1 - yy) + c1 * yy
            cy, cx = (0.25 + 0.5 * torch.rand(2, generator=gen)).tolist()
            if float(torch.rand((), generator=gen)) < 0.5:
                r = 0.15 + 0.15 * float(torch.rand((), generator=gen))
                m = torch.sigmoid((r - ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()) * 30)
            else:
                m = torch.sigmoid((0.1 - (xx - cx).abs()) * 30)
            img = bg * (1 - m) + cf * m
            images.append(img * 2.0 - 1.0)
        self.images = torch.stack(images).float()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i]


def load_data(args):
    train_data = SyntheticFlowers(N_IMAGES, args.seed)  # (port) ImagePaths(args.dataset_path, size=256)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=False)
    return train_loader


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


# ---- training_vqgan.py ---------------------------------------------------------------------------------------------

def get_args(seed, bug):
    """The argparse defaults with the sizes above."""
    return types.SimpleNamespace(latent_dim=32, image_size=SIZE, num_codebook_vectors=64, beta=0.25, image_channels=3,
                                 device="cpu", batch_size=4, epochs=100, learning_rate=5e-4, beta1=0.5, beta2=0.9,
                                 disc_start=100, disc_factor=1., rec_loss_factor=1., perceptual_loss_factor=1.,
                                 seed=seed, bug=bug)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = get_args(seed, bug)

    vqgan = VQGAN(args).to(device=args.device)
    discriminator = Discriminator(args).to(device=args.device)
    discriminator.apply(weights_init)
    perceptual_loss_fn = LPIPS().eval().to(device=args.device)

    lr = args.learning_rate
    vq_params = (list(vqgan.encoder.parameters()) +
                 list(vqgan.decoder.parameters()) +
                 list(vqgan.codebook.parameters()) +
                 list(vqgan.quant_conv.parameters()) +
                 list(vqgan.post_quant_conv.parameters()))
    if bug == "codebook_left_out_of_opt_vq":
        vq_params = (list(vqgan.encoder.parameters()) +
                     list(vqgan.decoder.parameters()) +
                     list(vqgan.quant_conv.parameters()) +
                     list(vqgan.post_quant_conv.parameters()))
    opt_vq = torch.optim.Adam(
        vq_params,
        lr=lr, eps=1e-08, betas=(args.beta1, args.beta2)
    )
    opt_disc = torch.optim.Adam(discriminator.parameters(),
                                lr=lr, eps=1e-08, betas=(args.beta1, args.beta2))

    train_dataset = load_data(args)
    steps_per_epoch = len(train_dataset)
    st = {"it": iter(train_dataset), "epoch": 0, "i": 0}

    def train_step():  # one iteration of TrainVQGAN.train's inner loop
        try:
            imgs = next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            st["i"] = 0
            st["it"] = iter(train_dataset)
            imgs = next(st["it"])
        epoch, i = st["epoch"], st["i"]
        imgs = imgs.to(device=args.device)
        decoded_images, _, q_loss = vqgan(imgs)

        disc_real = discriminator(imgs)
        disc_fake = discriminator(decoded_images)

        disc_factor = vqgan.adopt_weight(args.disc_factor, epoch*steps_per_epoch+i, threshold=args.disc_start)

        perceptual_loss = perceptual_loss_fn(imgs, decoded_images)
        rec_loss = torch.abs(imgs - decoded_images)
        perceptual_rec_loss = args.perceptual_loss_factor * perceptual_loss + args.rec_loss_factor * rec_loss
        perceptual_rec_loss = perceptual_rec_loss.mean()
        g_loss = -torch.mean(disc_fake)

        λ = vqgan.calculate_lambda(perceptual_rec_loss, g_loss)
        if bug == "q_loss_dropped":
            vq_loss = perceptual_rec_loss + disc_factor * λ * g_loss
        else:
            vq_loss = perceptual_rec_loss + q_loss + disc_factor * λ * g_loss

        d_loss_real = torch.mean(F.relu(1. - disc_real))
        d_loss_fake = torch.mean(F.relu(1. + disc_fake))
        gan_loss = disc_factor * 0.5*(d_loss_real + d_loss_fake)

        if bug != "opt_vq_zero_grad_dropped":
            opt_vq.zero_grad()
        vq_loss.backward(retain_graph=True)

        opt_disc.zero_grad()
        gan_loss.backward()

        opt_vq.step()
        opt_disc.step()
        st["i"] += 1
        return vq_loss.detach()

    def loss_fn(outputs, imgs):  # the VQGAN's objective before disc_start
        decoded_images, _, q_loss = outputs
        perceptual_loss = perceptual_loss_fn(imgs, decoded_images)
        rec_loss = torch.abs(imgs - decoded_images)
        perceptual_rec_loss = args.perceptual_loss_factor * perceptual_loss + args.rec_loss_factor * rec_loss
        perceptual_rec_loss = perceptual_rec_loss.mean()
        if bug == "q_loss_dropped":
            return perceptual_rec_loss
        return perceptual_rec_loss + q_loss

    imgs = train_dataset.dataset.images[:args.batch_size]
    return Program(name="vqganpytorch_flowers", model=vqgan, batch=(imgs, imgs), loss_fn=loss_fn, optimizer=opt_vq,
                   train_step=train_step, loader=train_dataset)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic copy slip: the codebook's parameters left out of opt_vq's list; its embedding gets gradients from the
    # codebook loss and never moves.
    Bug("codebook_left_out_of_opt_vq", functools.partial(_build, bug="codebook_left_out_of_opt_vq"),
        "four_structures", ("codebook.embedding.weight",)),
    # classic: q_loss left out of vq_loss; the straight-through estimator detaches the codebook from the
    # reconstruction path, so the codebook's value reaches the loss through a cut and its embedding never learns.
    Bug("q_loss_dropped", functools.partial(_build, bug="q_loss_dropped"), "reachability",
        ("codebook.embedding.weight",)),
    # classic: opt_vq.zero_grad() dropped; the autoencoder's gradients accumulate over iterations (whole-model slip).
    Bug("opt_vq_zero_grad_dropped", functools.partial(_build, bug="opt_vq_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
