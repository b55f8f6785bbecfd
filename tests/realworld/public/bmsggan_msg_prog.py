# ruff: noqa: UP008, B008, C417  (the original's style is kept as written)
"""MSG-GAN (multi-scale gradients GAN): a ProGAN-style generator emitting an RGB image at every scale and a
discriminator reading all of them, trained with the relativistic average hinge loss, from akanimax/BMSG-GAN.

Source: https://github.com/akanimax/BMSG-GAN, commit 863b1f370c12010a57812fb55e2f1b625e64e5a4, files
``sourcecode/MSG_GAN/GAN.py`` (``Generator``, ``Discriminator``, ``MSG_GAN.optimize_discriminator``,
``optimize_generator``, ``train``), ``sourcecode/MSG_GAN/CustomLayers.py`` (equalized conv / deconv, ``PixelwiseNorm``,
``GenInitialBlock``, ``GenGeneralConvBlock``, ``update_average``, ``MinibatchStdDev``, ``DisFinalBlock``,
``DisGeneralConvBlock``), ``sourcecode/MSG_GAN/Losses.py`` (``GANLoss``, ``RelativisticAverageHingeGAN``),
``sourcecode/train.py`` (the defaults and the optimizers), ``sourcecode/data_processing/DataLoader.py``
(``get_transform``, ``get_data_loader``). License: MIT (Copyright (c) 2018 Animesh Karnewar; full text in
LICENSES/akanimax-BMSG-GAN.txt).

Kept as written: every layer class above (equalized learning rate by run-time weight scaling, pixelwise feature
normalization, nearest up-sampling, average-pool down-sampling, the minibatch standard-deviation channel), the
``Generator`` (initial 4x4 block then ``depth - 1`` general blocks, a 1x1 ToRGB per scale) and ``Discriminator``
(FromRGB per scale concatenated with the features of the scale above, ``final_block`` to one logit), ``MSG_GAN``'s
EMA shadow generator (``update_average`` with ``ema_decay`` 0.999, initialised with beta 0), the relativistic average
hinge loss (the default ``--loss_function``), the two Adam optimizers (lr 0.003, betas (0, 0.99)), and the body of
``train``'s batch loop: the real batch's pyramid by ``avg_pool2d`` over powers of 2, reversed; normalized latents
(``gan_input / norm * sqrt(latent_size)``); ``optimize_discriminator`` (fakes detached, zero_grad / backward / step)
then ``optimize_generator`` (zero_grad / backward / step, then the EMA update); the images transform (random
horizontal flip, the ``--flip_augment`` default; Normalize((0.5,)*3, (0.5,)*3)); the shuffled DataLoader.

Deviations:
- the image folder is replaced by 200 synthetic 32x32 RGB images made from ``seed`` (a bright disk of a random
  colour at a random place on a dark gradient background), already at the training size (no ``Resize``);
  torchvision is not available, so the flip and the normalization are written out on tensors.
- sizes for 2 CPU cores: ``--depth`` 6 -> 4 (images 2^(depth+1) = 32 instead of 128; below 4 the
  discriminator's last-converter line raises) and ``--latent_size`` 512 -> 8 (the discriminator's ``feature_size``
  is the latent size, as in ``MSG_GAN``); ``--batch_size`` 20 -> 10; num_workers 0, CPU only.
- ``--adam_beta1``'s default is the int 0 (argparse does not apply ``type`` to defaults); this torch refuses betas of
  mixed int and float, so it is written 0.0.
- ``train``'s epoch loop is unrolled: ``train_step`` takes the next batch (a new shuffled epoch when the loader runs
  out) and runs the discriminator step then the generator step, returning the discriminator's loss; the feedback
  prints, sample grids, log file and checkpoints are dropped.
- the Program's model is the discriminator, its batch the first real pyramid with a generated one, its ``loss_fn``
  the relativistic average hinge discriminator loss on them.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import torch as th
from torch.nn.functional import avg_pool2d

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# ===== MSG_GAN/CustomLayers.py =====
class _equalized_conv2d(th.nn.Module):
    """ conv2d with the concept of equalized learning rate """

    def __init__(self, c_in, c_out, k_size, stride=1, pad=0, bias=True):
        from numpy import prod, sqrt
        from torch.nn.modules.utils import _pair

        super().__init__()

        # define the weight and bias if to be used
        self.weight = th.nn.Parameter(th.nn.init.normal_(
            th.empty(c_out, c_in, *_pair(k_size))
        ))

        self.use_bias = bias
        self.stride = stride
        self.pad = pad

        if self.use_bias:
            self.bias = th.nn.Parameter(th.FloatTensor(c_out).fill_(0))

        fan_in = prod(_pair(k_size)) * c_in  # value of fan_in
        self.scale = sqrt(2) / sqrt(fan_in)

    def forward(self, x):
        from torch.nn.functional import conv2d

        return conv2d(input=x,
                      weight=self.weight * self.scale,  # scale the weight on runtime
                      bias=self.bias if self.use_bias else None,
                      stride=self.stride,
                      padding=self.pad)

    def extra_repr(self):
        return ", ".join(map(str, self.weight.shape))


class _equalized_deconv2d(th.nn.Module):
    """ Transpose convolution using the equalized learning rate """

    def __init__(self, c_in, c_out, k_size, stride=1, pad=0, bias=True):
        from numpy import sqrt
        from torch.nn.modules.utils import _pair

        super().__init__()

        # define the weight and bias if to be used
        self.weight = th.nn.Parameter(th.nn.init.normal_(
            th.empty(c_in, c_out, *_pair(k_size))
        ))

        self.use_bias = bias
        self.stride = stride
        self.pad = pad

        if self.use_bias:
            self.bias = th.nn.Parameter(th.FloatTensor(c_out).fill_(0))

        fan_in = c_in  # value of fan_in for deconv
        self.scale = sqrt(2) / sqrt(fan_in)

    def forward(self, x):
        from torch.nn.functional import conv_transpose2d

        return conv_transpose2d(input=x,
                                weight=self.weight * self.scale,  # scale the weight on runtime
                                bias=self.bias if self.use_bias else None,
                                stride=self.stride,
                                padding=self.pad)

    def extra_repr(self):
        return ", ".join(map(str, self.weight.shape))


class PixelwiseNorm(th.nn.Module):
    def __init__(self):
        super(PixelwiseNorm, self).__init__()

    def forward(self, x, alpha=1e-8):
        y = x.pow(2.).mean(dim=1, keepdim=True).add(alpha).sqrt()  # [N1HW]
        y = x / y  # normalize the input x volume
        return y


class GenInitialBlock(th.nn.Module):
    """ Module implementing the initial block of the Generator """

    def __init__(self, in_channels, use_eql=True):
        from torch.nn import Conv2d, ConvTranspose2d, LeakyReLU

        super().__init__()

        if use_eql:
            self.conv_1 = _equalized_deconv2d(in_channels, in_channels,
                                              (4, 4), bias=True)
            self.conv_2 = _equalized_conv2d(in_channels, in_channels,
                                            (3, 3), pad=1, bias=True)

        else:
            self.conv_1 = ConvTranspose2d(in_channels, in_channels,
                                          (4, 4), bias=True)
            self.conv_2 = Conv2d(in_channels, in_channels, (3, 3),
                                 padding=(1, 1), bias=True)

        # Pixelwise feature vector normalization operation
        self.pixNorm = PixelwiseNorm()

        # leaky_relu:
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        # convert the tensor shape:
        y = x.view(*x.shape, 1, 1)  # add two dummy dimensions for
        # convolution operation

        # perform the forward computations:
        y = self.lrelu(self.conv_1(y))
        y = self.lrelu(self.conv_2(y))

        # apply pixel norm
        y = self.pixNorm(y)

        return y


class GenGeneralConvBlock(th.nn.Module):
    """ Module implementing a general convolutional block """

    def __init__(self, in_channels, out_channels, use_eql=True):
        from torch.nn import Conv2d, LeakyReLU

        super().__init__()

        if use_eql:
            self.conv_1 = _equalized_conv2d(in_channels, out_channels, (3, 3),
                                            pad=1, bias=True)
            self.conv_2 = _equalized_conv2d(out_channels, out_channels, (3, 3),
                                            pad=1, bias=True)
        else:
            self.conv_1 = Conv2d(in_channels, out_channels, (3, 3),
                                 padding=1, bias=True)
            self.conv_2 = Conv2d(out_channels, out_channels, (3, 3),
                                 padding=1, bias=True)

        # Pixelwise feature vector normalization operation
        self.pixNorm = PixelwiseNorm()

        # leaky_relu:
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        from torch.nn.functional import interpolate

        y = interpolate(x, scale_factor=2)
        y = self.pixNorm(self.lrelu(self.conv_1(y)))
        y = self.pixNorm(self.lrelu(self.conv_2(y)))

        return y


def update_average(model_tgt, model_src, beta):
    """ update the model_target using exponential moving averages """

    # utility function for toggling the gradient requirements of the models
    def toggle_grad(model, requires_grad):
        for p in model.parameters():
            p.requires_grad_(requires_grad)

    # turn off gradient calculation
    toggle_grad(model_tgt, False)
    toggle_grad(model_src, False)

    param_dict_src = dict(model_src.named_parameters())

    for p_name, p_tgt in model_tgt.named_parameters():
        p_src = param_dict_src[p_name]
        assert (p_src is not p_tgt)
        p_tgt.copy_(beta * p_tgt + (1. - beta) * p_src)

    # turn back on the gradient calculation
    toggle_grad(model_tgt, True)
    toggle_grad(model_src, True)


class MinibatchStdDev(th.nn.Module):
    """ Minibatch standard deviation layer for the discriminator """

    def __init__(self):
        super().__init__()

    def forward(self, x, alpha=1e-8):
        batch_size, _, height, width = x.shape

        # [B x C x H x W] Subtract mean over batch.
        y = x - x.mean(dim=0, keepdim=True)

        # [1 x C x H x W]  Calc standard deviation over batch
        y = th.sqrt(y.pow(2.).mean(dim=0, keepdim=False) + alpha)

        # [1]  Take average over feature_maps and pixels.
        y = y.mean().view(1, 1, 1, 1)

        # [B x 1 x H x W]  Replicate over group and pixels.
        y = y.repeat(batch_size, 1, height, width)

        # [B x C x H x W]  Append as new feature map.
        y = th.cat([x, y], 1)

        # return the computed values:
        return y


class DisFinalBlock(th.nn.Module):
    """ Final block for the Discriminator """

    def __init__(self, in_channels, use_eql=True):
        from torch.nn import Conv2d, LeakyReLU

        super().__init__()

        # declare the required modules for forward pass
        self.batch_discriminator = MinibatchStdDev()

        if use_eql:
            self.conv_1 = _equalized_conv2d(in_channels + 1, in_channels, (3, 3),
                                            pad=1, bias=True)
            self.conv_2 = _equalized_conv2d(in_channels, in_channels, (4, 4),
                                            bias=True)

            # final layer emulates the fully connected layer
            self.conv_3 = _equalized_conv2d(in_channels, 1, (1, 1), bias=True)

        else:
            # modules required:
            self.conv_1 = Conv2d(in_channels + 1, in_channels, (3, 3), padding=1, bias=True)
            self.conv_2 = Conv2d(in_channels, in_channels, (4, 4), bias=True)

            # final conv layer emulates a fully connected layer
            self.conv_3 = Conv2d(in_channels, 1, (1, 1), bias=True)

        # leaky_relu:
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        # minibatch_std_dev layer
        y = self.batch_discriminator(x)

        # define the computations
        y = self.lrelu(self.conv_1(y))
        y = self.lrelu(self.conv_2(y))

        # fully connected layer
        y = self.conv_3(y)  # This layer has linear activation

        # flatten the output raw discriminator scores
        return y.view(-1)


class DisGeneralConvBlock(th.nn.Module):
    """ General block in the discriminator  """

    def __init__(self, in_channels, out_channels, use_eql=True):
        from torch.nn import AvgPool2d, Conv2d, LeakyReLU

        super().__init__()

        if use_eql:
            self.conv_1 = _equalized_conv2d(in_channels, in_channels, (3, 3),
                                            pad=1, bias=True)
            self.conv_2 = _equalized_conv2d(in_channels, out_channels, (3, 3),
                                            pad=1, bias=True)
        else:
            # convolutional modules
            self.conv_1 = Conv2d(in_channels, in_channels, (3, 3),
                                 padding=1, bias=True)
            self.conv_2 = Conv2d(in_channels, out_channels, (3, 3),
                                 padding=1, bias=True)

        self.downSampler = AvgPool2d(2)  # downsampler

        # leaky_relu:
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        # define the computations
        y = self.lrelu(self.conv_1(x))
        y = self.lrelu(self.conv_2(y))
        y = self.downSampler(y)

        return y


# ===== MSG_GAN/GAN.py =====
class Generator(th.nn.Module):
    """ Generator of the GAN network """

    def __init__(self, depth=7, latent_size=512, use_eql=True):
        from torch.nn import Conv2d, ModuleList

        super().__init__()

        assert latent_size != 0 and ((latent_size & (latent_size - 1)) == 0), \
            "latent size not a power of 2"
        if depth >= 4:
            assert latent_size >= np.power(2, depth - 4), "latent size will diminish to zero"

        # state of the generator:
        self.use_eql = use_eql
        self.depth = depth
        self.latent_size = latent_size

        # register the modules required for the Generator Below ...
        # create the ToRGB layers for various outputs:
        if self.use_eql:
            def to_rgb(in_channels):
                return _equalized_conv2d(in_channels, 3, (1, 1), bias=True)
        else:
            def to_rgb(in_channels):
                return Conv2d(in_channels, 3, (1, 1), bias=True)

        # create a module list of the other required general convolution blocks
        self.layers = ModuleList([GenInitialBlock(self.latent_size, use_eql=self.use_eql)])
        self.rgb_converters = ModuleList([to_rgb(self.latent_size)])

        # create the remaining layers
        for i in range(self.depth - 1):
            if i <= 2:
                layer = GenGeneralConvBlock(self.latent_size, self.latent_size,
                                            use_eql=self.use_eql)
                rgb = to_rgb(self.latent_size)
            else:
                layer = GenGeneralConvBlock(
                    int(self.latent_size // np.power(2, i - 3)),
                    int(self.latent_size // np.power(2, i - 2)),
                    use_eql=self.use_eql
                )
                rgb = to_rgb(int(self.latent_size // np.power(2, i - 2)))
            self.layers.append(layer)
            self.rgb_converters.append(rgb)

    def forward(self, x):
        outputs = []  # initialize to empty list

        y = x  # start the computational pipeline
        for block, converter in zip(self.layers, self.rgb_converters):
            y = block(y)
            outputs.append(converter(y))

        return outputs


class Discriminator(th.nn.Module):
    """ Discriminator of the GAN """

    def __init__(self, depth=7, feature_size=512,
                 use_eql=True, gpu_parallelize=False):
        from torch.nn import Conv2d, ModuleList

        super().__init__()

        assert feature_size != 0 and ((feature_size & (feature_size - 1)) == 0), \
            "latent size not a power of 2"
        if depth >= 4:
            assert feature_size >= np.power(2, depth - 4), \
                "feature size cannot be produced"

        # create state of the object
        self.gpu_parallelize = gpu_parallelize
        self.use_eql = use_eql
        self.depth = depth
        self.feature_size = feature_size

        # create the fromRGB layers for various inputs:
        if self.use_eql:
            def from_rgb(out_channels):
                return _equalized_conv2d(3, out_channels, (1, 1), bias=True)
        else:
            def from_rgb(out_channels):
                return Conv2d(3, out_channels, (1, 1), bias=True)

        self.rgb_to_features = ModuleList()
        self.final_converter = from_rgb(self.feature_size // 2)

        # create a module list of the other required general convolution blocks
        self.layers = ModuleList()
        self.final_block = DisFinalBlock(self.feature_size, use_eql=self.use_eql)

        # create the remaining layers
        for i in range(self.depth - 1):
            if i > 2:
                layer = DisGeneralConvBlock(
                    int(self.feature_size // np.power(2, i - 2)),
                    int(self.feature_size // np.power(2, i - 2)),
                    use_eql=self.use_eql
                )
                rgb = from_rgb(int(self.feature_size // np.power(2, i - 1)))
            else:
                layer = DisGeneralConvBlock(self.feature_size, self.feature_size // 2,
                                            use_eql=self.use_eql)
                rgb = from_rgb(self.feature_size // 2)

            self.layers.append(layer)
            self.rgb_to_features.append(rgb)

        # just replace the last converter
        self.rgb_to_features[self.depth - 2] = \
            from_rgb(self.feature_size // np.power(2, i - 2))

    def forward(self, inputs):
        assert len(inputs) == self.depth, \
            "Mismatch between input and Network scales"

        y = self.rgb_to_features[self.depth - 2](inputs[self.depth - 1])
        y = self.layers[self.depth - 2](y)
        for x, block, converter in \
                zip(reversed(inputs[1:-1]),
                    reversed(self.layers[:-1]),
                    reversed(self.rgb_to_features[:-1])):
            input_part = converter(x)  # convert the input:
            y = th.cat((input_part, y), dim=1)  # concatenate the inputs:
            y = block(y)  # apply the block

        # calculate the final block:
        input_part = self.final_converter(inputs[0])
        y = th.cat((input_part, y), dim=1)
        y = self.final_block(y)

        # return calculated y
        return y


# ===== MSG_GAN/Losses.py =====
class GANLoss:
    """ Base class for all losses """

    def __init__(self, dis):
        self.dis = dis

    def dis_loss(self, real_samps, fake_samps):
        raise NotImplementedError("dis_loss method has not been implemented")

    def gen_loss(self, real_samps, fake_samps):
        raise NotImplementedError("gen_loss method has not been implemented")


class RelativisticAverageHingeGAN(GANLoss):

    def __init__(self, dis, bug=None):
        super().__init__(dis)
        self.bug = bug

    def dis_loss(self, real_samps, fake_samps):
        # Obtain predictions
        r_preds = self.dis(real_samps)
        f_preds = self.dis(fake_samps)

        # difference between real and fake:
        r_f_diff = r_preds - th.mean(f_preds)

        # difference between fake and real samples
        f_r_diff = f_preds - th.mean(r_preds)

        # return the loss
        loss = (th.mean(th.nn.ReLU()(1 - r_f_diff))
                + th.mean(th.nn.ReLU()(1 + f_r_diff)))

        return loss

    def gen_loss(self, real_samps, fake_samps):
        # Obtain predictions
        r_preds = self.dis(real_samps)
        f_preds = self.dis(fake_samps)

        # difference between real and fake:
        r_f_diff = r_preds - th.mean(f_preds)

        # difference between fake and real samples
        f_r_diff = f_preds - th.mean(r_preds)

        # return the loss
        if self.bug == "gen_loss_copied_from_dis":
            return (th.mean(th.nn.ReLU()(1 - r_f_diff))
                    + th.mean(th.nn.ReLU()(1 + f_r_diff)))
        return (th.mean(th.nn.ReLU()(1 + r_f_diff))
                + th.mean(th.nn.ReLU()(1 - f_r_diff)))


class MSG_GAN:
    """ Unconditional TeacherGAN """

    def __init__(self, depth=7, latent_size=512,
                 use_eql=True, use_ema=True, ema_decay=0.999,
                 device=th.device("cpu")):
        self.gen = Generator(depth, latent_size, use_eql=use_eql).to(device)
        self.dis = Discriminator(depth, latent_size, use_eql=True).to(device)

        # state of the object
        self.use_ema = use_ema
        self.ema_decay = ema_decay
        self.use_eql = use_eql
        self.latent_size = latent_size
        self.depth = depth
        self.device = device

        if self.use_ema:
            # create a shadow copy of the generator
            self.gen_shadow = copy.deepcopy(self.gen)

            # updater function:
            self.ema_updater = update_average

            # initialize the gen_shadow weights equal to the
            # weights of gen
            self.ema_updater(self.gen_shadow, self.gen, beta=0)

        # by default the generator and discriminator are in eval mode
        self.gen.eval()
        self.dis.eval()
        if self.use_ema:
            self.gen_shadow.eval()

    def optimize_discriminator(self, dis_optim, noise, real_batch, loss_fn):
        # generate a batch of samples
        fake_samples = self.gen(noise)
        fake_samples = list(map(lambda x: x.detach(), fake_samples))

        loss = loss_fn.dis_loss(real_batch, fake_samples)

        # optimize discriminator
        dis_optim.zero_grad()
        loss.backward()
        dis_optim.step()

        return loss.item()

    def optimize_generator(self, gen_optim, noise, real_batch, loss_fn):
        # generate a batch of samples
        fake_samples = self.gen(noise)

        loss = loss_fn.gen_loss(real_batch, fake_samples)

        # optimize discriminator
        gen_optim.zero_grad()
        loss.backward()
        gen_optim.step()

        # if self.use_ema is true, apply the moving average here:
        if self.use_ema:
            self.ema_updater(self.gen_shadow, self.gen, self.ema_decay)

        return loss.item()


# ===== the data: synthetic images under data_processing/DataLoader.py's transform =====
class _SyntheticImages(th.utils.data.Dataset):
    def __init__(self, seed, n, size):
        g = np.random.RandomState(seed)
        yy, xx = np.mgrid[0:size, 0:size] / (size - 1.0)
        imgs = []
        for _ in range(n):
            bg = 0.15 * (yy if g.rand() < 0.5 else xx)[None] + 0.05
            cy, cx, r = g.uniform(0.25, 0.75), g.uniform(0.25, 0.75), g.uniform(0.15, 0.3)
            disk = ((yy - cy) ** 2 + (xx - cx) ** 2 < r * r)[None]
            color = g.uniform(0.5, 1.0, size=(3, 1, 1))
            imgs.append(np.where(disk, color, bg).astype(np.float32))
        self.images = th.from_numpy(np.stack(imgs))
        self.g = th.Generator().manual_seed(seed)

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, idx):
        img = self.images[idx]
        if th.rand((), generator=self.g) < 0.5:  # RandomHorizontalFlip(p=0.5)
            img = img.flip(-1)
        return (img - 0.5) / 0.5  # ToTensor(), Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def get_data_loader(dataset, batch_size, num_workers, seed):
    from torch.utils.data import DataLoader

    dl = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        generator=th.Generator().manual_seed(seed),  # (port) seeded
    )

    return dl


class _Args:
    loss_function = "relativistic-hinge"
    depth = 4  # (port) 6
    latent_size = 8  # (port) 512
    batch_size = 10  # (port) 20
    g_lr = 0.003
    d_lr = 0.003
    adam_beta1 = 0.0  # (port) 0: see the docstring
    adam_beta2 = 0.99
    use_eql = True
    use_ema = True
    ema_decay = 0.999
    num_workers = 0  # (port) 3


def _build(seed, bug=None):
    th.manual_seed(seed)
    np.random.seed(seed)
    args = _Args()
    device = th.device("cpu")

    dataset = _SyntheticImages(seed, 200, int(np.power(2, args.depth + 1)))
    data = get_data_loader(dataset, args.batch_size, args.num_workers, seed)

    # create a gan from these
    msg_gan = MSG_GAN(depth=args.depth,
                      latent_size=args.latent_size,
                      use_eql=args.use_eql,
                      use_ema=args.use_ema,
                      ema_decay=args.ema_decay,
                      device=device)

    # create optimizer for generator:
    gen_optim = th.optim.Adam(msg_gan.gen.parameters(), args.g_lr,
                              [args.adam_beta1, args.adam_beta2])

    if bug == "dis_optim_over_gen":
        dis_optim = th.optim.Adam(msg_gan.gen.parameters(), args.d_lr,
                                  [args.adam_beta1, args.adam_beta2])
    else:
        dis_optim = th.optim.Adam(msg_gan.dis.parameters(), args.d_lr,
                                  [args.adam_beta1, args.adam_beta2])

    loss_fn = RelativisticAverageHingeGAN(msg_gan.dis, bug=bug)
    normalize_latents = True

    # turn the generator and discriminator into train mode
    msg_gan.gen.train()
    msg_gan.dis.train()

    def pyramid(images):
        # create a list of downsampled images from the real images:
        images = [images] + [avg_pool2d(images, int(np.power(2, i)))
                             for i in range(1, msg_gan.depth)]
        images = list(reversed(images))
        return images

    def latents(extracted_batch_size):
        # sample some random latent points
        gan_input = th.randn(
            extracted_batch_size, msg_gan.latent_size).to(msg_gan.device)

        # normalize them if asked
        if normalize_latents:
            gan_input = (gan_input
                         / gan_input.norm(dim=-1, keepdim=True)
                         * (msg_gan.latent_size ** 0.5))
        return gan_input

    state = {"it": iter(data)}

    def train_step():
        batch = next(state["it"], None)
        if batch is None:
            state["it"] = iter(data)
            batch = next(state["it"])

        # extract current batch of data for training
        images = batch.to(msg_gan.device)
        extracted_batch_size = images.shape[0]

        images = pyramid(images)
        gan_input = latents(extracted_batch_size)

        # optimize the discriminator:
        dis_loss = msg_gan.optimize_discriminator(dis_optim, gan_input,
                                                  images, loss_fn)

        # optimize the generator:
        gen_loss = msg_gan.optimize_generator(gen_optim, gan_input,  # noqa: F841
                                              images, loss_fn)
        return dis_loss

    first = next(iter(get_data_loader(dataset, args.batch_size, 0, seed + 1)))
    real = pyramid(first)
    with th.no_grad():
        fake = msg_gan.gen(latents(first.shape[0]))

    def program_loss(_d_out, targets):  # the discriminator's loss on the real and generated pyramids
        real_samps, fake_samps = targets
        return loss_fn.dis_loss(real_samps, fake_samps)

    return Program(name="bmsggan_msg_prog", model=msg_gan.dis, batch=(real, (real, fake)),
                   loss_fn=program_loss, optimizer=dis_optim, train_step=train_step, loader=data)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic copy-paste slip: the generator's relativistic hinge loss written with the discriminator's signs
    # (``relu(1 - r_f_diff) + relu(1 + f_r_diff)``): the generator is trained to make its fakes easier to tell apart.
    Bug("gen_loss_copied_from_dis", functools.partial(_build, bug="gen_loss_copied_from_dis"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the discriminator's Adam built over ``msg_gan.gen.parameters()`` (copied from the line above): the
    # discriminator never moves, and its steps move the generator instead.
    Bug("dis_optim_over_gen", functools.partial(_build, bug="dis_optim_over_gen"), "four_structures",
        ("rgb_to_features.0.weight",)),
]
