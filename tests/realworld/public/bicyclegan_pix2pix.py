"""pix2pix (conditional GAN: a U-Net generator ``G(A)``, a multi-scale PatchGAN discriminator on ``(A, B)`` pairs,
``GANLoss`` in ``vanilla`` mode (``BCEWithLogitsLoss`` against real/fake label maps) plus ``lambda_L1 * L1(G(A),
B)``) as the ``Pix2PixModel`` of junyanz/BicycleGAN trains it with ``train.py --model pix2pix``: per iteration
``forward``, then D's update (``set_requires_grad(netD, True)``, zero_grad, ``backward_D`` on the detached fake pair
and the real pair, step), then G's update (``set_requires_grad(netD, False)``, zero_grad, ``backward_G``, step); Adam
(lr 2e-4, beta1 0.5) for both, the ``linear`` lr policy stepped once per epoch.

Source: https://github.com/junyanz/BicycleGAN
Commit: 40b9d52c27b9831f56c1c7c7a6ddde8bc9149067
Files: models/pix2pix_model.py, models/networks.py, models/base_model.py, train.py, options/base_options.py,
       options/train_options.py, data/aligned_dataset.py, data/base_dataset.py
License: BSD-2-Clause (Copyright (c) 2017, Jun-Yan Zhu, Richard Zhang, and Deepak Pathak; LICENSES/junyanz-BicycleGAN.txt)
Domain: conditional GAN (image-to-image translation, GANLoss + L1)

Substitution: the batch asked for junyanz/pytorch-CycleGAN-and-pix2pix; its snapshot (3 GB) is over what can be
fetched here, and the stored single files of that repository come from a mixture of forks, so no commit could be
named for them. BicycleGAN, by the same authors and under the same BSD license, carries the same pix2pix model
(``Pix2PixModel``, ``GANLoss``, U-Net, PatchGAN, the same ``optimize_parameters``) and was fetched whole.

Deviations from the original:
- sizes: ``ngf`` and ``ndf`` 64 -> 8; ``netG`` ``unet_256`` -> ``unet_128`` and ``load_size`` / ``crop_size``
  286 / 256 -> 144 / 128 (the U-Net needs 2^7 pixels for 7 downsamplings); ``batch_size`` 2 (unchanged);
  ``num_Ds`` 2, ``netD2`` ``basic_256_multi``, ``norm`` batch, ``init_type`` xavier (gain 0.02), ``gan_mode``
  vanilla and ``lambda_L1`` (10: the model's ``set_defaults(lambda_l1=100.0)`` names another option) as parsed;
- data: the aligned ``A|B`` image files (facades) are replaced by synthetic pairs made from ``seed``: ``A`` a label
  map of random rectangles of 4 classes drawn in 4 fixed colours, ``B`` the "photo" of it (a fixed colour per class
  plus a fixed per-class stripe texture); torchvision and PIL are not used: ``resize_and_crop`` (the same random
  crop for A and B), the shared flip and ``Normalize((0.5,)*3, (0.5,)*3)`` are written out in plain torch; 64
  pairs, a shuffled DataLoader (``serial_batches`` off), no workers, no GPU (``gpu_ids`` empty);
- visdom/HTML display, printing, checkpoints and the network printout are left out;
- one ``train_step`` is one iteration of ``train.py``'s inner loop (``set_input``, ``optimize_parameters``) and
  returns ``loss_G``; at the end of an epoch ``update_learning_rate`` runs. The declared ``model`` is ``netG``, its
  ``batch`` ``(real_A, (real_A, real_B))``, and ``loss_fn`` ``backward_G``'s loss without the backward (the GAN term
  needs ``real_A`` for the conditional discriminator);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B006, F841, PLR0402, RUF046, UP008, UP031  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import random
import sys

import torch
import torch.nn as nn
from torch.nn import init
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- models/networks.py ----------------------------------------------------------------------------------------

def init_weights(net, init_type='normal', init_gain=0.02):
    def init_func(m):  # define the initialization function
        classname = m.__class__.__name__
        if hasattr(m, 'weight') and (classname.find('Conv') != -1 or classname.find('Linear') != -1):
            if init_type == 'normal':
                init.normal_(m.weight.data, 0.0, init_gain)
            elif init_type == 'xavier':
                init.xavier_normal_(m.weight.data, gain=init_gain)
            elif init_type == 'kaiming':
                init.kaiming_normal_(m.weight.data, a=0, mode='fan_in')
            elif init_type == 'orthogonal':
                init.orthogonal_(m.weight.data, gain=init_gain)
            else:
                raise NotImplementedError('initialization method [%s] is not implemented' % init_type)
            if hasattr(m, 'bias') and m.bias is not None:
                init.constant_(m.bias.data, 0.0)
        elif classname.find('BatchNorm2d') != -1:  # BatchNorm Layer's weight is not a matrix; only normal distribution applies.
            init.normal_(m.weight.data, 1.0, init_gain)
            init.constant_(m.bias.data, 0.0)

    net.apply(init_func)  # apply the initialization function <init_func>


def init_net(net, init_type='normal', init_gain=0.02, gpu_ids=[]):
    init_weights(net, init_type, init_gain=init_gain)
    return net


def get_scheduler(optimizer, opt):
    if opt.lr_policy == 'linear':
        def lambda_rule(epoch):
            lr_l = 1.0 - max(0, epoch + opt.epoch_count - opt.niter) / float(opt.niter_decay + 1)
            return lr_l
        scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)
    elif opt.lr_policy == 'step':
        scheduler = lr_scheduler.StepLR(optimizer, step_size=opt.lr_decay_iters, gamma=0.1)
    else:
        return NotImplementedError('learning rate policy [%s] is not implemented', opt.lr_policy)
    return scheduler


def get_norm_layer(norm_type='instance'):
    if norm_type == 'batch':
        norm_layer = functools.partial(nn.BatchNorm2d, affine=True, track_running_stats=True)
    elif norm_type == 'instance':
        norm_layer = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)
    elif norm_type == 'none':
        norm_layer = None
    else:
        raise NotImplementedError('normalization layer [%s] is not found' % norm_type)
    return norm_layer


def get_non_linearity(layer_type='relu'):
    if layer_type == 'relu':
        nl_layer = functools.partial(nn.ReLU, inplace=True)
    elif layer_type == 'lrelu':
        nl_layer = functools.partial(
            nn.LeakyReLU, negative_slope=0.2, inplace=True)
    elif layer_type == 'elu':
        nl_layer = functools.partial(nn.ELU, inplace=True)
    else:
        raise NotImplementedError(
            'nonlinearity activitation [%s] is not found' % layer_type)
    return nl_layer


def define_G(input_nc, output_nc, nz, ngf, netG='unet_128', norm='batch', nl='relu',
             use_dropout=False, init_type='xavier', init_gain=0.02, gpu_ids=[], where_add='input', upsample='bilinear'):
    net = None
    norm_layer = get_norm_layer(norm_type=norm)
    nl_layer = get_non_linearity(layer_type=nl)

    if nz == 0:
        where_add = 'input'

    if netG == 'unet_128' and where_add == 'input':
        net = G_Unet_add_input(input_nc, output_nc, nz, 7, ngf, norm_layer=norm_layer, nl_layer=nl_layer,
                               use_dropout=use_dropout, upsample=upsample)
    elif netG == 'unet_256' and where_add == 'input':
        net = G_Unet_add_input(input_nc, output_nc, nz, 8, ngf, norm_layer=norm_layer, nl_layer=nl_layer,
                               use_dropout=use_dropout, upsample=upsample)
    else:
        raise NotImplementedError('Generator model name [%s] is not recognized' % net)

    return init_net(net, init_type, init_gain, gpu_ids)


def define_D(input_nc, ndf, netD, norm='batch', nl='lrelu', init_type='xavier', init_gain=0.02, num_Ds=1, gpu_ids=[],
             bug=None):
    net = None
    norm_layer = get_norm_layer(norm_type=norm)
    nl = 'lrelu'  # use leaky relu for D

    if netD == 'basic_128_multi':
        net = D_NLayersMulti(input_nc=input_nc, ndf=ndf, n_layers=2, norm_layer=norm_layer, num_D=num_Ds, bug=bug)
    elif netD == 'basic_256_multi':
        net = D_NLayersMulti(input_nc=input_nc, ndf=ndf, n_layers=3, norm_layer=norm_layer, num_D=num_Ds, bug=bug)
    else:
        raise NotImplementedError('Discriminator model name [%s] is not recognized' % net)
    return init_net(net, init_type, init_gain, gpu_ids)


class D_NLayersMulti(nn.Module):
    def __init__(self, input_nc, ndf=64, n_layers=3,
                 norm_layer=nn.BatchNorm2d, num_D=1, bug=None):
        super(D_NLayersMulti, self).__init__()
        self.bug = bug
        self.num_D = num_D
        if num_D == 1:
            layers = self.get_layers(input_nc, ndf, n_layers, norm_layer)
            self.model = nn.Sequential(*layers)
        else:
            layers = self.get_layers(input_nc, ndf, n_layers, norm_layer)
            self.add_module("model_0", nn.Sequential(*layers))
            self.down = nn.AvgPool2d(3, stride=2, padding=[
                                     1, 1], count_include_pad=False)
            for i in range(1, num_D):
                ndf_i = int(round(ndf / (2**i)))
                layers = self.get_layers(input_nc, ndf_i, n_layers, norm_layer)
                self.add_module("model_%d" % i, nn.Sequential(*layers))

    def get_layers(self, input_nc, ndf=64, n_layers=3, norm_layer=nn.BatchNorm2d):
        kw = 4
        padw = 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw,
                              stride=2, padding=padw), nn.LeakyReLU(0.2, True)]

        nf_mult = 1
        nf_mult_prev = 1
        for n in range(1, n_layers):
            nf_mult_prev = nf_mult
            nf_mult = min(2**n, 8)
            sequence += [
                nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult,
                          kernel_size=kw, stride=2, padding=padw),
                norm_layer(ndf * nf_mult),
                nn.LeakyReLU(0.2, True)
            ]

        nf_mult_prev = nf_mult
        nf_mult = min(2**n_layers, 8)
        sequence += [
            nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult,
                      kernel_size=kw, stride=1, padding=padw),
            norm_layer(ndf * nf_mult),
            nn.LeakyReLU(0.2, True)
        ]

        sequence += [nn.Conv2d(ndf * nf_mult, 1,
                               kernel_size=kw, stride=1, padding=padw)]
        if self.bug == "sigmoid_in_discriminator":
            sequence += [nn.Sigmoid()]  # "the discriminator should output a probability" (asked in #269, #1358)

        return sequence

    def forward(self, input):
        if self.num_D == 1:
            return self.model(input)
        result = []
        down = input
        for i in range(self.num_D):
            model = getattr(self, "model_%d" % i)
            result.append(model(down))
            if i != self.num_D - 1:
                down = self.down(down)
        return result


class GANLoss(nn.Module):
    """Define different GAN objectives.

    The GANLoss class abstracts away the need to create the target label tensor
    that has the same size as the input.
    """

    def __init__(self, gan_mode, target_real_label=1.0, target_fake_label=0.0):
        """
        Note: Do not use sigmoid as the last layer of Discriminator.
        LSGAN needs no sigmoid. vanilla GANs will handle it with BCEWithLogitsLoss.
        """
        super(GANLoss, self).__init__()
        self.register_buffer('real_label', torch.tensor(target_real_label))
        self.register_buffer('fake_label', torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        if gan_mode == 'lsgan':
            self.loss = nn.MSELoss()
        elif gan_mode == 'vanilla':
            self.loss = nn.BCEWithLogitsLoss()
        elif gan_mode in ['wgangp']:
            self.loss = None
        else:
            raise NotImplementedError('gan mode %s not implemented' % gan_mode)

    def get_target_tensor(self, prediction, target_is_real):
        if target_is_real:
            target_tensor = self.real_label
        else:
            target_tensor = self.fake_label
        return target_tensor.expand_as(prediction)

    def __call__(self, predictions, target_is_real):
        all_losses = []
        for prediction in predictions:
            if self.gan_mode in ['lsgan', 'vanilla']:
                target_tensor = self.get_target_tensor(prediction, target_is_real)
                loss = self.loss(prediction, target_tensor)
            elif self.gan_mode == 'wgangp':
                if target_is_real:
                    loss = -prediction.mean()
                else:
                    loss = prediction.mean()
            all_losses.append(loss)
        total_loss = sum(all_losses)
        return total_loss, all_losses


class G_Unet_add_input(nn.Module):
    def __init__(self, input_nc, output_nc, nz, num_downs, ngf=64,
                 norm_layer=None, nl_layer=None, use_dropout=False,
                 upsample='basic'):
        super(G_Unet_add_input, self).__init__()
        self.nz = nz
        max_nchn = 8
        # construct unet structure
        unet_block = UnetBlock(ngf * max_nchn, ngf * max_nchn, ngf * max_nchn,
                               innermost=True, norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample)
        for i in range(num_downs - 5):
            unet_block = UnetBlock(ngf * max_nchn, ngf * max_nchn, ngf * max_nchn, unet_block,
                                   norm_layer=norm_layer, nl_layer=nl_layer, use_dropout=use_dropout, upsample=upsample)
        unet_block = UnetBlock(ngf * 4, ngf * 4, ngf * max_nchn, unet_block,
                               norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample)
        unet_block = UnetBlock(ngf * 2, ngf * 2, ngf * 4, unet_block,
                               norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample)
        unet_block = UnetBlock(ngf, ngf, ngf * 2, unet_block,
                               norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample)
        unet_block = UnetBlock(input_nc + nz, output_nc, ngf, unet_block,
                               outermost=True, norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample)

        self.model = unet_block

    def forward(self, x, z=None):
        if self.nz > 0:
            z_img = z.view(z.size(0), z.size(1), 1, 1).expand(
                z.size(0), z.size(1), x.size(2), x.size(3))
            x_with_z = torch.cat([x, z_img], 1)
        else:
            x_with_z = x  # no z

        return self.model(x_with_z)


def upsampleLayer(inplanes, outplanes, upsample='basic', padding_type='zero'):
    # padding_type = 'zero'
    if upsample == 'basic':
        upconv = [nn.ConvTranspose2d(
            inplanes, outplanes, kernel_size=4, stride=2, padding=1)]
    elif upsample == 'bilinear':
        upconv = [nn.Upsample(scale_factor=2, mode='bilinear'),
                  nn.ReflectionPad2d(1),
                  nn.Conv2d(inplanes, outplanes, kernel_size=3, stride=1, padding=0)]
    else:
        raise NotImplementedError(
            'upsample layer [%s] not implemented' % upsample)
    return upconv


# Defines the submodule with skip connection.
# X -------------------identity---------------------- X
#   |-- downsampling -- |submodule| -- upsampling --|
class UnetBlock(nn.Module):
    def __init__(self, input_nc, outer_nc, inner_nc,
                 submodule=None, outermost=False, innermost=False,
                 norm_layer=None, nl_layer=None, use_dropout=False, upsample='basic', padding_type='zero'):
        super(UnetBlock, self).__init__()
        self.outermost = outermost
        p = 0
        downconv = []
        if padding_type == 'reflect':
            downconv += [nn.ReflectionPad2d(1)]
        elif padding_type == 'replicate':
            downconv += [nn.ReplicationPad2d(1)]
        elif padding_type == 'zero':
            p = 1
        else:
            raise NotImplementedError(
                'padding [%s] is not implemented' % padding_type)
        downconv += [nn.Conv2d(input_nc, inner_nc,
                               kernel_size=4, stride=2, padding=p)]
        # downsample is different from upsample
        downrelu = nn.LeakyReLU(0.2, True)
        downnorm = norm_layer(inner_nc) if norm_layer is not None else None
        uprelu = nl_layer()
        upnorm = norm_layer(outer_nc) if norm_layer is not None else None

        if outermost:
            upconv = upsampleLayer(
                inner_nc * 2, outer_nc, upsample=upsample, padding_type=padding_type)
            down = downconv
            up = [uprelu] + upconv + [nn.Tanh()]
            model = down + [submodule] + up
        elif innermost:
            upconv = upsampleLayer(
                inner_nc, outer_nc, upsample=upsample, padding_type=padding_type)
            down = [downrelu] + downconv
            up = [uprelu] + upconv
            if upnorm is not None:
                up += [upnorm]
            model = down + up
        else:
            upconv = upsampleLayer(
                inner_nc * 2, outer_nc, upsample=upsample, padding_type=padding_type)
            down = [downrelu] + downconv
            if downnorm is not None:
                down += [downnorm]
            up = [uprelu] + upconv
            if upnorm is not None:
                up += [upnorm]

            if use_dropout:
                model = down + [submodule] + up + [nn.Dropout(0.5)]
            else:
                model = down + [submodule] + up

        self.model = nn.Sequential(*model)

    def forward(self, x):
        if self.outermost:
            return self.model(x)
        else:
            return torch.cat([self.model(x), x], 1)


# ---- models/base_model.py + models/pix2pix_model.py ------------------------------------------------------------

class Pix2PixModel:
    """ This class implements the pix2pix model, for learning a mapping from input images to output images given paired data.
    """

    def __init__(self, opt, bug=None):
        # BaseModel.__init__(self, opt)
        self.opt = opt
        self.gpu_ids = opt.gpu_ids
        self.isTrain = opt.isTrain
        self.device = torch.device('cpu')
        self.optimizers = []
        self.bug = bug
        # specify the training losses you want to print out. The training/test scripts will call <BaseModel.get_current_losses>
        self.loss_names = ['G_GAN', 'G_L1', 'D_real', 'D_fake']
        self.visual_names = ['real_A', 'fake_B', 'real_B']
        if self.isTrain:
            self.model_names = ['G', 'D']
        else:  # during test time, only load G
            self.model_names = ['G']
        # define networks (both generator and discriminator)
        self.netG = define_G(opt.input_nc, opt.output_nc, opt.nz, opt.ngf, netG=opt.netG,
                             norm=opt.norm, nl=opt.nl, use_dropout=opt.use_dropout, init_type=opt.init_type, init_gain=opt.init_gain,
                             gpu_ids=self.gpu_ids, where_add=opt.where_add, upsample=opt.upsample)

        if self.isTrain:  # define a discriminator; conditional GANs need to take both input and output images; Therefore, #channels for D is input_nc + output_nc
            self.netD = define_D(opt.input_nc + opt.output_nc, opt.ndf, netD=opt.netD2, norm=opt.norm, nl=opt.nl,
                                 init_type=opt.init_type, init_gain=opt.init_gain, num_Ds=opt.num_Ds, gpu_ids=self.gpu_ids,
                                 bug=bug)

        if self.isTrain:
            # define loss functions
            self.criterionGAN = GANLoss(opt.gan_mode).to(self.device)
            self.criterionL1 = torch.nn.L1Loss()
            # initialize optimizers; schedulers will be automatically created by function <BaseModel.setup>.
            self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizers.append(self.optimizer_G)
            self.optimizers.append(self.optimizer_D)

    def setup(self, opt):
        if self.isTrain:
            self.schedulers = [get_scheduler(optimizer, opt) for optimizer in self.optimizers]

    def update_learning_rate(self):
        """Update learning rates for all the networks; called at the end of every epoch"""
        for scheduler in self.schedulers:
            scheduler.step()

    def set_requires_grad(self, nets, requires_grad=False):
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def is_train(self):
        """check if the current batch is good for training."""
        return True

    def set_input(self, input):
        AtoB = self.opt.direction == 'AtoB'
        self.real_A = input['A' if AtoB else 'B'].to(self.device)
        self.real_B = input['B' if AtoB else 'A'].to(self.device)
        self.image_paths = input['A_paths' if AtoB else 'B_paths']

    def forward(self):
        """Run forward pass; called by both functions <optimize_parameters> and <test>."""
        self.fake_B = self.netG(self.real_A)  # G(A)

    def backward_D(self):
        """Calculate GAN loss for the discriminator"""
        # Fake; stop backprop to the generator by detaching fake_B
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)  # we use conditional GANs; we need to feed both input and output to the discriminator
        pred_fake = self.netD(fake_AB.detach())
        self.loss_D_fake, _ = self.criterionGAN(pred_fake, False)
        # Real
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        pred_real = self.netD(real_AB)
        self.loss_D_real, _ = self.criterionGAN(pred_real, True)
        # combine loss and calculate gradients
        self.loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        self.loss_D.backward()

    def generator_loss(self, real_A, fake_B, real_B):
        """backward_G's loss: the GAN term on the conditional pair and lambda_L1 * L1."""
        # First, G(A) should fake the discriminator
        fake_AB = torch.cat((real_A, fake_B), 1)
        pred_fake = self.netD(fake_AB)
        self.loss_G_GAN, _ = self.criterionGAN(pred_fake, True)
        # Second, G(A) = B
        if self.bug == "l1_against_input":
            self.loss_G_L1 = self.criterionL1(fake_B, real_A) * self.opt.lambda_L1  # real_A for real_B
        else:
            self.loss_G_L1 = self.criterionL1(fake_B, real_B) * self.opt.lambda_L1
        # combine loss and calculate gradients
        return self.loss_G_GAN + self.loss_G_L1

    def backward_G(self):
        """Calculate GAN and L1 loss for the generator"""
        self.loss_G = self.generator_loss(self.real_A, self.fake_B, self.real_B)
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()                   # compute fake images: G(A)
        # update D
        self.set_requires_grad(self.netD, True)  # enable backprop for D
        self.optimizer_D.zero_grad()     # set D's gradients to zero
        self.backward_D()                # calculate gradients for D
        self.optimizer_D.step()          # update D's weights
        # update G
        self.set_requires_grad(self.netD, False)  # D requires no gradients when optimizing G
        if self.bug != "generator_zero_grad_dropped":
            self.optimizer_G.zero_grad()        # set G's gradients to zero
        self.backward_G()                   # calculate graidents for G
        self.optimizer_G.step()             # udpate G's weights


# ---- data/aligned_dataset.py + data/base_dataset.py on synthetic pairs -----------------------------------------

def make_pairs(seed, n, size):
    """A: rectangles of 4 classes in 4 fixed label colours; B: per class a fixed colour and stripe texture."""
    g = torch.Generator().manual_seed(seed)
    label_colours = torch.rand(4, 3, generator=g)
    photo_colours = torch.rand(4, 3, generator=g)
    freqs = 0.2 + 0.6 * torch.rand(4, generator=g)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    pairs = []
    for _ in range(n):
        labels = torch.zeros(size, size, dtype=torch.long)
        for _r in range(6):
            c = int(torch.randint(1, 4, (1,), generator=g))
            y0, x0 = (int(v) for v in torch.randint(0, size - 24, (2,), generator=g))
            h, w = (int(v) for v in torch.randint(16, 64, (2,), generator=g))
            labels[y0:y0 + h, x0:x0 + w] = c
        A = label_colours[labels].permute(2, 0, 1)
        texture = 0.15 * torch.sin(freqs[labels] * (xx + yy))
        B = (photo_colours[labels].permute(2, 0, 1) + texture).clamp(0, 1)
        pairs.append((A, B))
    return pairs


class AlignedDataset(Dataset):
    def __init__(self, opt, pairs):
        self.opt = opt
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        A, B = self.pairs[index]
        AB_path = 'synthetic_%d' % index
        # get_params: the same crop position and flip for A and B
        x = random.randint(0, max(0, self.opt.load_size - self.opt.crop_size))
        y = random.randint(0, max(0, self.opt.load_size - self.opt.crop_size))
        flip = random.random() > 0.5

        def transform(img):
            img = img[:, y:y + self.opt.crop_size, x:x + self.opt.crop_size]
            if not self.opt.no_flip and flip:
                img = img.flip(-1)
            return (img - 0.5) / 0.5  # transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))

        return {'A': transform(A), 'B': transform(B), 'A_paths': AB_path, 'B_paths': AB_path}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    # TrainOptions().parse() with --model pix2pix (Pix2PixModel.modify_commandline_options) and shrunk sizes
    opt = argparse.Namespace(isTrain=True, batch_size=2, load_size=144, crop_size=128, input_nc=3, output_nc=3, nz=0,
                             gpu_ids=[], preprocess='resize_and_crop', dataset_mode='aligned', model='pix2pix',
                             direction='AtoB', serial_batches=False, use_dropout=False, no_flip=False, num_Ds=2,
                             netD='basic_256_multi', netD2='basic_256_multi', netG='unet_128', ngf=8, ndf=8,
                             norm='batch', upsample='basic', nl='relu', where_add='input', init_type='xavier',
                             init_gain=0.02, gan_mode='vanilla', niter=100, niter_decay=100, epoch_count=1,
                             lr=0.0002, lr_policy='linear', beta1=0.5, lr_decay_iters=100, lambda_L1=10.0,
                             lambda_l1=100.0)
    dataset = AlignedDataset(opt, make_pairs(seed, 64, opt.load_size))
    dataloader = DataLoader(dataset, batch_size=opt.batch_size, shuffle=not opt.serial_batches, num_workers=0,
                            generator=torch.Generator().manual_seed(seed))

    model = Pix2PixModel(opt, bug=bug)  # create_model(opt)
    model.setup(opt)

    state = {"it": None}

    def next_data():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                model.update_learning_rate()  # update learning rates at the end of every epoch.
            state["it"] = iter(dataloader)
            return next(state["it"])

    def train_step():
        data = next_data()
        model.set_input(data)         # unpack data from dataset and apply preprocessing
        model.optimize_parameters()   # calculate loss functions, get gradients, update network weights
        return model.loss_G.detach()

    first = next(iter(DataLoader(dataset, batch_size=opt.batch_size)))
    real_A, real_B = first['A'], first['B']

    def loss_fn(fake_B, targets):
        real_A, real_B = targets
        return model.generator_loss(real_A, fake_B, real_B)

    return Program(name="bicyclegan_pix2pix", model=model.netG, batch=(real_A, (real_A, real_B)), loss_fn=loss_fn,
                   optimizer=model.optimizer_G, train_step=train_step, loader=dataloader)


build = functools.partial(_build)

BUGS = [
    # the L1 term written against the input image (real_A for real_B): G is pulled toward copying A (classic slip).
    Bug("l1_against_input", functools.partial(_build, bug="l1_against_input"), "learning_ledger", ("TASK",)),
    # a Sigmoid appended to the discriminator while GANLoss('vanilla') is BCEWithLogitsLoss: the logits loss on
    # probabilities (the question of https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/269 and
    # https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/1358, answered by GANLoss's note).
    Bug("sigmoid_in_discriminator", functools.partial(_build, bug="sigmoid_in_discriminator"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer_G.zero_grad() dropped from optimize_parameters: G's gradients accumulate over iterations (classic).
    Bug("generator_zero_grad_dropped", functools.partial(_build, bug="generator_zero_grad_dropped"), "step_probe",
        ("model.model.0.weight",)),
]
