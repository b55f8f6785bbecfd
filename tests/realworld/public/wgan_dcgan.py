# ruff: noqa: UP008, UP030, UP032, PLR0402, F841
"""Wasserstein GAN with weight clipping, as the paper's code trains it: a DCGAN critic (no sigmoid, output averaged
over the batch) and a DCGAN generator with batch norm, both ``weights_init``-ed, RMSprop(lr 5e-5) for each; per
generator iteration the critic is trained ``Diters`` times (100 for the first 25 generator iterations and every 500th,
else 5), each time clamping its weights to [-0.01, 0.01] and backpropagating ``errD_real`` with ``one`` and
``errD_fake`` (on detached generator samples) with ``mone``; then the critic is frozen (``requires_grad = False``)
and the generator backpropagates ``errG = netD(fake)`` with ``one``.

Source: https://github.com/martinarjovsky/WassersteinGAN
Commit: f7a01e82007ea408647c451b9e1c8f1932a3db67
Files: main.py (arguments, data, ``weights_init``, models, optimizers, the training loop), models/dcgan.py
(DCGAN_D, DCGAN_G)
License: BSD-3-Clause (Copyright (c) 2017, Martin Arjovsky (NYU), Soumith Chintala (Facebook), Leon Bottou
(Facebook); full text in LICENSES/martinarjovsky-WassersteinGAN.txt)
Domain: generative model, GAN (WGAN critic with weight clipping, DCGAN architectures)

Kept as written: DCGAN_D and DCGAN_G (their ``add_module`` names, the ``isize``-driven pyramid, ``output.mean(0)``
and ``view(1)`` in the critic), ``weights_init``, the defaults of main.py (Diters 5, clamp +-0.01, lrD = lrG = 5e-5,
RMSprop since ``--adam`` is not given, n_extra_layers 0, batch norm on), the ``one`` / ``mone`` gradients, the
``input`` / ``noise`` buffers with ``resize_as_`` / ``resize_`` / ``normal_``, the loop structure (``gen_iterations``,
``Diters`` schedule, ``while j < Diters and i < len(dataloader)``, clamping before each critic step,
``netD.zero_grad()``, the requires_grad reset and freeze, ``netG.zero_grad()``, a full batch of noise for G).

Deviations from the original:
- data: the LSUN / CIFAR-10 / image-folder datasets (torchvision) are replaced by 256 synthetic 16x16 RGB images
  made from ``seed`` (a 4x4 grid of 4-pixel blocks, each block one of 8 palette colours, plus a little noise), scaled
  to [-1, 1] as ``Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))`` gives, in a TensorDataset with a dummy label; the
  loader shuffles, no worker processes.
- sizes for 2 CPU cores: imageSize 64 -> 16 (the critic's pyramid is then one level, the generator's one level),
  batchSize 64 -> 16, nz 100 -> 16, ngf = ndf 64 -> 8; niter 25 -> unbounded.
- one ``train_step`` is one critic iteration (the body of ``while j < Diters ...``), returning ``errD``; when the
  critic's ``Diters`` iterations (or the epoch) are done, the generator step runs at the start of the next
  ``train_step``, as the loop orders it. The Program's model is the critic, its batch ``(real, fake)`` (a real batch,
  and a generator batch as the input of the target side); ``loss_fn`` is ``errD = errD_real - errD_fake`` (what the
  two backward calls minimize): the critic's output for the real batch minus its output for the fake batch.
- PyTorch API updates: ``data_iter.next()`` -> ``next(data_iter)``; the models' multi-GPU test
  ``isinstance(input.data, torch.cuda.FloatTensor)`` -> ``input.is_cuda`` (false here either way); ``Variable(noise, volatile=True)`` ->
  ``Variable(noise)`` (``volatile`` is gone; ``netG(noisev).data`` detaches as written); ``errD.data[0]`` is only
  printed, and printing, ``cudnn.benchmark``, image saving, checkpoints, the generator config file and the
  ``os.system('mkdir ...')`` are dropped; the seed is ``seed`` instead of ``random.randint(1, 10000)``; no GPU.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---------------------------------------------------------------- models/dcgan.py
class DCGAN_D(nn.Module):
    def __init__(self, isize, nz, nc, ndf, ngpu, n_extra_layers=0):
        super(DCGAN_D, self).__init__()
        self.ngpu = ngpu
        assert isize % 16 == 0, "isize has to be a multiple of 16"

        main = nn.Sequential()
        # input is nc x isize x isize
        main.add_module('initial:{0}-{1}:conv'.format(nc, ndf),
                        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False))
        main.add_module('initial:{0}:relu'.format(ndf),
                        nn.LeakyReLU(0.2, inplace=True))
        csize, cndf = isize / 2, ndf

        # Extra layers
        for t in range(n_extra_layers):
            main.add_module('extra-layers-{0}:{1}:conv'.format(t, cndf),
                            nn.Conv2d(cndf, cndf, 3, 1, 1, bias=False))
            main.add_module('extra-layers-{0}:{1}:batchnorm'.format(t, cndf),
                            nn.BatchNorm2d(cndf))
            main.add_module('extra-layers-{0}:{1}:relu'.format(t, cndf),
                            nn.LeakyReLU(0.2, inplace=True))

        while csize > 4:
            in_feat = cndf
            out_feat = cndf * 2
            main.add_module('pyramid:{0}-{1}:conv'.format(in_feat, out_feat),
                            nn.Conv2d(in_feat, out_feat, 4, 2, 1, bias=False))
            main.add_module('pyramid:{0}:batchnorm'.format(out_feat),
                            nn.BatchNorm2d(out_feat))
            main.add_module('pyramid:{0}:relu'.format(out_feat),
                            nn.LeakyReLU(0.2, inplace=True))
            cndf = cndf * 2
            csize = csize / 2

        # state size. K x 4 x 4
        main.add_module('final:{0}-{1}:conv'.format(cndf, 1),
                        nn.Conv2d(cndf, 1, 4, 1, 0, bias=False))
        self.main = main


    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:  # (port) isinstance(input.data, torch.cuda.FloatTensor)
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        output = output.mean(0)
        return output.view(1)

class DCGAN_G(nn.Module):
    def __init__(self, isize, nz, nc, ngf, ngpu, n_extra_layers=0):
        super(DCGAN_G, self).__init__()
        self.ngpu = ngpu
        assert isize % 16 == 0, "isize has to be a multiple of 16"

        cngf, tisize = ngf//2, 4
        while tisize != isize:
            cngf = cngf * 2
            tisize = tisize * 2

        main = nn.Sequential()
        # input is Z, going into a convolution
        main.add_module('initial:{0}-{1}:convt'.format(nz, cngf),
                        nn.ConvTranspose2d(nz, cngf, 4, 1, 0, bias=False))
        main.add_module('initial:{0}:batchnorm'.format(cngf),
                        nn.BatchNorm2d(cngf))
        main.add_module('initial:{0}:relu'.format(cngf),
                        nn.ReLU(True))

        csize, cndf = 4, cngf
        while csize < isize//2:
            main.add_module('pyramid:{0}-{1}:convt'.format(cngf, cngf//2),
                            nn.ConvTranspose2d(cngf, cngf//2, 4, 2, 1, bias=False))
            main.add_module('pyramid:{0}:batchnorm'.format(cngf//2),
                            nn.BatchNorm2d(cngf//2))
            main.add_module('pyramid:{0}:relu'.format(cngf//2),
                            nn.ReLU(True))
            cngf = cngf // 2
            csize = csize * 2

        # Extra layers
        for t in range(n_extra_layers):
            main.add_module('extra-layers-{0}:{1}:conv'.format(t, cngf),
                            nn.Conv2d(cngf, cngf, 3, 1, 1, bias=False))
            main.add_module('extra-layers-{0}:{1}:batchnorm'.format(t, cngf),
                            nn.BatchNorm2d(cngf))
            main.add_module('extra-layers-{0}:{1}:relu'.format(t, cngf),
                            nn.ReLU(True))

        main.add_module('final:{0}-{1}:convt'.format(cngf, nc),
                        nn.ConvTranspose2d(cngf, nc, 4, 2, 1, bias=False))
        main.add_module('final:{0}:tanh'.format(nc),
                        nn.Tanh())
        self.main = main

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:  # (port) isinstance(input.data, torch.cuda.FloatTensor)
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


# ---------------------------------------------------------------- data (see the docstring)
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [250, 250, 250]], dtype=np.float64)


def synthetic_dataset(seed, n=256):
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, len(PALETTE), size=(n, 4, 4))
    img = PALETTE[blocks].repeat(4, axis=1).repeat(4, axis=2) + rng.normal(0.0, 6.0, size=(n, 16, 16, 3))
    x = torch.from_numpy(np.clip(img, 0, 255) / 255.0).float().permute(0, 3, 1, 2)  # ToTensor
    x = (x - 0.5) / 0.5  # Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    return torch.utils.data.TensorDataset(x, torch.zeros(n, dtype=torch.long))


# ---------------------------------------------------------------- main.py
def _build(seed, bug=None):
    opt = types.SimpleNamespace(dataset='synthetic', dataroot=None, workers=0, batchSize=16, imageSize=16, nc=3,
                                nz=16, ngf=8, ndf=8, niter=None, lrD=0.00005, lrG=0.00005, beta1=0.5, cuda=False,
                                ngpu=1, netG='', netD='', clamp_lower=-0.01, clamp_upper=0.01, Diters=5,
                                noBN=False, mlp_G=False, mlp_D=False, n_extra_layers=0, experiment=None, adam=False)

    opt.manualSeed = seed
    random.seed(opt.manualSeed)
    torch.manual_seed(opt.manualSeed)

    dataset = synthetic_dataset(seed)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize,
                                             shuffle=True, num_workers=int(opt.workers))

    ngpu = int(opt.ngpu)
    nz = int(opt.nz)
    ngf = int(opt.ngf)
    ndf = int(opt.ndf)
    nc = int(opt.nc)
    n_extra_layers = int(opt.n_extra_layers)

    # custom weights initialization called on netG and netD
    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            m.weight.data.normal_(0.0, 0.02)
        elif classname.find('BatchNorm') != -1:
            m.weight.data.normal_(1.0, 0.02)
            m.bias.data.fill_(0)

    netG = DCGAN_G(opt.imageSize, nz, nc, ngf, ngpu, n_extra_layers)
    netG.apply(weights_init)

    netD = DCGAN_D(opt.imageSize, nz, nc, ndf, ngpu, n_extra_layers)
    netD.apply(weights_init)

    input = torch.FloatTensor(opt.batchSize, 3, opt.imageSize, opt.imageSize)
    noise = torch.FloatTensor(opt.batchSize, nz, 1, 1)
    fixed_noise = torch.FloatTensor(opt.batchSize, nz, 1, 1).normal_(0, 1)  # (sampling only)
    one = torch.FloatTensor([1])
    mone = one * -1

    # setup optimizer
    if bug == "optimizerD_over_netG":
        # copy-paste slip: the critic's optimizer built over the generator's parameters
        optimizerD = optim.RMSprop(netG.parameters(), lr = opt.lrD)
    else:
        optimizerD = optim.RMSprop(netD.parameters(), lr = opt.lrD)
    optimizerG = optim.RMSprop(netG.parameters(), lr = opt.lrG)

    if bug == "critic_signs_flipped":
        # the critic's two gradients swapped as https://github.com/martinarjovsky/WassersteinGAN/issues/41 proposes,
        # while the generator keeps errG.backward(one): the generator now moves its samples away from the data
        d_real_grad, d_fake_grad = mone, one
    else:
        d_real_grad, d_fake_grad = one, mone

    def loop():
        gen_iterations = 0
        while True:  # for epoch in range(opt.niter)
            data_iter = iter(dataloader)
            i = 0
            while i < len(dataloader):
                ############################
                # (1) Update D network
                ###########################
                for p in netD.parameters(): # reset requires_grad
                    p.requires_grad = True # they are set to False below in netG update

                # train the discriminator Diters times
                if gen_iterations < 25 or gen_iterations % 500 == 0:
                    Diters = 100
                else:
                    Diters = opt.Diters
                j = 0
                while j < Diters and i < len(dataloader):
                    j += 1

                    # clamp parameters to a cube
                    for p in netD.parameters():
                        p.data.clamp_(opt.clamp_lower, opt.clamp_upper)

                    data = next(data_iter)
                    i += 1

                    # train with real
                    real_cpu, _ = data
                    netD.zero_grad()
                    batch_size = real_cpu.size(0)

                    input.resize_as_(real_cpu).copy_(real_cpu)
                    inputv = Variable(input)

                    errD_real = netD(inputv)
                    errD_real.backward(d_real_grad)

                    # train with fake
                    noise.resize_(opt.batchSize, nz, 1, 1).normal_(0, 1)
                    noisev = Variable(noise) # totally freeze netG
                    fake = Variable(netG(noisev).data)
                    inputv = fake
                    errD_fake = netD(inputv)
                    errD_fake.backward(d_fake_grad)
                    errD = errD_real - errD_fake
                    optimizerD.step()

                    yield errD.detach() if bug != "critic_signs_flipped" else -errD.detach()

                ############################
                # (2) Update G network
                ###########################
                for p in netD.parameters():
                    p.requires_grad = False # to avoid computation
                netG.zero_grad()
                # in case our last batch was the tail batch of the dataloader,
                # make sure we feed a full batch of noise
                noise.resize_(opt.batchSize, nz, 1, 1).normal_(0, 1)
                noisev = Variable(noise)
                fake = netG(noisev)
                errG = netD(fake)
                errG.backward(one)
                optimizerG.step()
                gen_iterations += 1

    steps = loop()

    real = next(iter(dataloader))[0]
    with torch.no_grad():
        fake = netG(torch.randn(opt.batchSize, nz, 1, 1))

    def loss_fn(errD_real, fake):
        """``errD = errD_real - errD_fake`` (``backward(one)`` on the real batch, ``backward(mone)`` on the fake
        batch): the critic's output for the real batch is the model's output for ``batch``, the fake batch (the
        target) goes through the critic here, as the loop runs it separately."""
        errD_fake = netD(fake)
        if bug == "critic_signs_flipped":
            return errD_fake - errD_real
        return errD_real - errD_fake

    return Program(name="wgan_dcgan", model=netD, batch=(real, fake), loss_fn=loss_fn, optimizer=optimizerD,
                   train_step=lambda: next(steps), loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the critic's two signs swapped as https://github.com/martinarjovsky/WassersteinGAN/issues/41 proposes ("I think
    # errD_real.backward(one) should be errD_real.backward(mone) and errD_fake.backward(mone) should be
    # errD_fake.backward(one)"), with the generator's errG.backward(one) kept: the answer (issue #9) is that the
    # critic's and the generator's signs must agree; with only the critic's flipped, the generator is pushed away from
    # the data.
    Bug("critic_signs_flipped", functools.partial(_build, bug="critic_signs_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: ``optimizerD = optim.RMSprop(netG.parameters(), ...)``; the critic never moves, and
    # its steps move the generator along the generator's stale gradients instead.
    Bug("optimizerD_over_netG", functools.partial(_build, bug="optimizerD_over_netG"), "four_structures",
        ("initial:3-8:conv",)),
]
