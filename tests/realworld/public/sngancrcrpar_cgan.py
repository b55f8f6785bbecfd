# ruff: noqa: UP032
"""cGANs with a projection discriminator (Miyato & Koyama, ICLR 2018), crcrpar's unofficial PyTorch port for 64x64
images (``train_64.py --cGAN``): a ResNet generator with categorical conditional batch norm, a spectrally normalized
ResNet discriminator whose output adds the inner product of a spectrally normalized class embedding with the pooled
features, hinge losses, Adam (lr 2e-4, betas 0 / 0.9) for both, ``n_dis`` = 5 discriminator updates per iteration
with the generator updated at the first of them, real images rescaled to [-1, 1] with uniform dequantization noise,
the learning rate decayed linearly to 0 after ``lr_decay_start``.

Source: https://github.com/crcrpar/pytorch.sngan_projection
Commit: 74f05987b65b3c0bceaf0430b0ba6c6288cf3f68
Files: train_64.py, losses.py, utils.py (``sample_z``, ``sample_pseudo_labels``), and (in the helper
``_sngancrcrpar.py``) links/conditional_batchnorm.py, models/generators/, models/discriminators/
License: MIT (Copyright (c) 2018 Masaki Kozuki; full text in LICENSES/crcrpar-pytorch.sngan_projection.txt)
Domain: vision, class-conditional GAN (projection discriminator, spectral norm, conditional BN, hinge loss)

Kept as written: ``losses.py`` (``dis_hinge`` / ``gen_hinge``, ``DisLoss`` / ``GenLoss`` with ``loss_type``
``hinge``, not relativistic), ``sample_z`` / ``sample_pseudo_labels``, ``InfiniteSamplerWrapper``, ``decay_lr``,
``sample_from_data`` / ``sample_from_gen``, ``main``'s model and optimizer construction and the training loop's
body (the ``i == 0`` generator step with ``gen.zero_grad()``, then per ``i`` a fresh fake batch and a real batch,
``dis_criterion(dis_fake, dis_real)``, ``dis.zero_grad()``, backward, step), the argparse defaults (``--lr`` 2e-4,
``--beta1`` 0, ``--beta2`` 0.9, ``--n_dis`` 5, ``--gen_dim_z`` 128, ``--loss_type`` hinge, ``--lr_decay_start``
50000 of ``--max_iteration`` 100000) with ``--cGAN``.

Deviations from the original:
- data: tiny-imagenet's ``ImageFolder`` is replaced by synthetic 32x32 RGB images of 4 classes made from ``seed``
  (class = a colour family and a pattern: stripes, checks, a disk, a ring; random phase, scale and shade), 256 of
  them, passed through the script's ``ToTensor`` (written out), ``_rescale`` and ``_noise_adder``;
- sizes for 2 CPU cores: ``--batch_size`` 64 -> 8, ``--gen_num_features`` and ``--dis_num_features`` 64 -> 4,
  ``--gen_bottom_width`` 4 -> 2 (so the 64x64 networks make and read 32x32 images), ``--num_workers`` 0;
- ``InfiniteSampler``'s ``np.random.seed()`` (a reseed from the OS, as in the AdaIN sampler it copies) is dropped so
  a build is reproducible; the CUDA requirement, ``set_default_tensor_type``, tensorboard, image previews,
  checkpoints, the FID evaluation (``--calc_FID`` is off by default) and the prints are dropped;
- one ``train_step`` is one ``n_iter`` of the loop and returns the mean discriminator loss of its ``n_dis``
  updates (the value the script logs as ``cumulative_loss_dis``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy
import numpy as np
import torch
import torch.nn.functional as F
from torch import optim
from torch.utils import data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _sngancrcrpar import ResNetGenerator, SNResNetProjectionDiscriminator

SELF_CHECK_STEPS = 20  # (port) one step is n_dis + 1 updates and six generator passes

# losses.py

AVAILABLE_LOSSES = ["hinge", "dcgan"]


def dis_hinge(dis_fake, dis_real):
    loss = torch.mean(torch.relu(1. - dis_real)) +\
        torch.mean(torch.relu(1. + dis_fake))
    return loss


def gen_hinge(dis_fake, dis_real=None):
    return -torch.mean(dis_fake)


def dis_dcgan(dis_fake, dis_real):
    loss = torch.mean(F.softplus(-dis_real)) + torch.mean(F.softplus(dis_fake))
    return loss


def gen_dcgan(dis_fake, dis_real=None):
    return torch.mean(F.softplus(-dis_fake))


class _Loss:

    """GAN Loss base class.

    Args:
        loss_type (str)
        is_relativistic (bool)

    """

    def __init__(self, loss_type, is_relativistic=False):
        assert loss_type in AVAILABLE_LOSSES, "Invalid loss. Choose from {}".format(AVAILABLE_LOSSES)
        self.loss_type = loss_type
        self.is_relativistic = is_relativistic

    def _preprocess(self, dis_fake, dis_real):
        C_xf_tilde = torch.mean(dis_fake, dim=0, keepdim=True).expand_as(dis_fake)
        C_xr_tilde = torch.mean(dis_real, dim=0, keepdim=True).expand_as(dis_real)
        return dis_fake - C_xr_tilde, dis_real - C_xf_tilde


class DisLoss(_Loss):

    """Discriminator Loss."""

    def __call__(self, dis_fake, dis_real, **kwargs):
        if not self.is_relativistic:
            if self.loss_type == "hinge":
                if getattr(self, "bug", None) == "dis_hinge_args_swapped":  # (port) the BUGS variant
                    return dis_hinge(dis_real, dis_fake)
                return dis_hinge(dis_fake, dis_real)
            elif self.loss_type == "dcgan":
                return dis_dcgan(dis_fake, dis_real)
        else:
            d_xf, d_xr = self._preprocess(dis_fake, dis_real)
            if self.loss_type == "hinge":
                return dis_hinge(d_xf, d_xr)
            elif self.loss_type == "dcgan":
                D_xf = torch.sigmoid(d_xf)
                D_xr = torch.sigmoid(d_xr)
                return -torch.log(D_xr) - torch.log(1.0 - D_xf)
            else:
                raise NotImplementedError


class GenLoss(_Loss):

    """Generator Loss."""

    def __call__(self, dis_fake, dis_real=None, **kwargs):
        if not self.is_relativistic:
            if self.loss_type == "hinge":
                return gen_hinge(dis_fake, dis_real)
            elif self.loss_type == "dcgan":
                return gen_dcgan(dis_fake, dis_real)
        else:
            assert dis_real is not None, "Relativistic Generator loss requires `dis_real`."
            d_xf, d_xr = self._preprocess(dis_fake, dis_real)
            if self.loss_type == "hinge":
                return dis_hinge(d_xr, d_xf)
            elif self.loss_type == "dcgan":
                D_xf = torch.sigmoid(d_xf)
                D_xr = torch.sigmoid(d_xr)
                return -torch.log(D_xf) - torch.log(1.0 - D_xr)
            else:
                raise NotImplementedError


# utils.py
def sample_z(batch_size, dim_z, device, distribution=None):
    """Sample random noises."""
    if distribution is None:
        distribution = 'normal'
    if distribution == 'normal':
        return torch.empty(batch_size, dim_z, dtype=torch.float32, device=device).normal_()
    else:
        return torch.empty(batch_size, dim_z, dtype=torch.float32, device=device).uniform_()


def sample_pseudo_labels(num_classes, batch_size, device):
    """Sample pseudo-labels."""
    pseudo_labels = torch.from_numpy(
        numpy.random.randint(low=0, high=num_classes, size=(batch_size))
    )
    pseudo_labels = pseudo_labels.type(torch.long).to(device)
    return pseudo_labels


# train_64.py
# Copied from https://github.com/naoto0804/pytorch-AdaIN/blob/master/sampler.py#L5-L15
def InfiniteSampler(n):
    # i = 0
    i = n - 1
    order = np.random.permutation(n)
    while True:
        yield order[i]
        i += 1
        if i >= n:
            # (port) np.random.seed() dropped: the build stays reproducible from its seed
            order = np.random.permutation(n)
            i = 0


# Copied from https://github.com/naoto0804/pytorch-AdaIN/blob/master/sampler.py#L18-L26
class InfiniteSamplerWrapper(data.sampler.Sampler):
    def __init__(self, data_source):
        self.num_samples = len(data_source)

    def __iter__(self):
        return iter(InfiniteSampler(self.num_samples))

    def __len__(self):
        return 2 ** 31


def decay_lr(opt, max_iter, start_iter, initial_lr):
    """Decay learning rate linearly till 0."""
    coeff = -initial_lr / (max_iter - start_iter)
    for pg in opt.param_groups:
        pg['lr'] += coeff


class args:  # (port) get_args()'s defaults with --cGAN, sizes shrunk
    cGAN = True
    batch_size = 8  # 64
    num_workers = 0  # 8
    gen_num_features = 4  # 64
    gen_dim_z = 128
    gen_bottom_width = 2  # 4
    gen_distribution = 'normal'
    dis_num_features = 4  # 64
    lr = 0.0002
    beta1 = 0.0
    beta2 = 0.9
    lr_decay_start = 50000
    max_iteration = 100000
    n_dis = 5
    loss_type = 'hinge'
    relativistic_loss = False


def sample_from_data(args, device, data_loader):
    """Sample real images and labels from data_loader."""
    real, y = next(data_loader)
    real, y = real.to(device), y.to(device)
    if not args.cGAN:
        y = None
    return real, y


def sample_from_gen(args, device, num_classes, gen):
    """Sample fake images and labels from generator."""
    z = sample_z(
        args.batch_size, args.gen_dim_z, device, args.gen_distribution
    )
    if args.cGAN:
        pseudo_y = sample_pseudo_labels(
            num_classes, args.batch_size, device
        )
    else:
        pseudo_y = None

    fake = gen(z, pseudo_y)
    return fake, pseudo_y, z


class _ImageFolder(data.Dataset):
    """(port) datasets.ImageFolder over synthetic class-patterned images, with the script's transforms."""

    def __init__(self, seed, n=256, size=32):
        rng = np.random.RandomState(seed)
        self.classes = ["stripes", "checks", "disk", "ring"]
        yy, xx = np.mgrid[0:size, 0:size] / size
        self.samples = []
        for k in range(n):
            c = k % 4
            f, ph = 2 + 3 * rng.rand(), 2 * np.pi * rng.rand()
            cy, cx = 0.3 + 0.4 * rng.rand(2)
            r = 0.15 + 0.15 * rng.rand()
            d = np.hypot(yy - cy, xx - cx)
            stripes = np.sin(2 * np.pi * f * xx + ph) > 0
            m = [stripes, stripes ^ (np.sin(2 * np.pi * f * yy) > 0), d < r, np.abs(d - r) < 0.06][c].astype(np.float64)
            fg = np.eye(3)[c % 3] * 0.7 + 0.2 + 0.1 * rng.rand(3)
            img = m[..., None] * fg + (1 - m[..., None]) * (0.15 + 0.1 * rng.rand(3))
            self.samples.append((np.clip(img, 0, 1).astype(np.float32), c))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        img, target = self.samples[index]
        img = torch.from_numpy(img).permute(2, 0, 1).contiguous()  # transforms.ToTensor()
        img = img * 2.0 - 1.0  # _rescale
        img = torch.empty_like(img, dtype=img.dtype).uniform_(0.0, 1/128.0) + img  # _noise_adder
        return img, target



def _models(num_classes, device, bug):
    # initialize models.
    _n_cls = num_classes if args.cGAN else 0
    gen = ResNetGenerator(
        args.gen_num_features, args.gen_dim_z, args.gen_bottom_width,
        activation=F.relu, num_classes=_n_cls, distribution=args.gen_distribution
    ).to(device)
    dis = SNResNetProjectionDiscriminator(
        args.dis_num_features, _n_cls, F.relu).to(device)
    opt_gen = optim.Adam(gen.parameters(), args.lr, (args.beta1, args.beta2))
    opt_dis = optim.Adam(dis.parameters(), args.lr, (args.beta1, args.beta2))
    gen_criterion = GenLoss(args.loss_type, args.relativistic_loss)
    dis_criterion = DisLoss(args.loss_type, args.relativistic_loss)
    dis_criterion.bug = bug
    return gen, dis, opt_gen, opt_dis, gen_criterion, dis_criterion


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    device = torch.device('cpu')  # (port) cuda
    train_dataset = _ImageFolder(seed)
    train_loader = iter(data.DataLoader(
        train_dataset, args.batch_size,
        sampler=InfiniteSamplerWrapper(train_dataset),
        num_workers=args.num_workers)
    )
    num_classes = len(train_dataset.classes)
    args.num_classes = num_classes
    gen, dis, opt_gen, opt_dis, gen_criterion, dis_criterion = _models(num_classes, device, bug)
    st = {"n_iter": 1}

    def train_step():
        n_iter = st["n_iter"]
        if n_iter >= args.lr_decay_start:
            decay_lr(opt_gen, args.max_iteration, args.lr_decay_start, args.lr)
            decay_lr(opt_dis, args.max_iteration, args.lr_decay_start, args.lr)
        _l_g = .0
        cumulative_loss_dis = .0
        for i in range(args.n_dis):
            if i == 0:
                fake, pseudo_y, _ = sample_from_gen(args, device, num_classes, gen)
                dis_fake = dis(fake, pseudo_y)
                dis_real = None
                loss_gen = gen_criterion(dis_fake, dis_real)
                gen.zero_grad()
                loss_gen.backward()
                opt_gen.step()
                _l_g += loss_gen.item()

            fake, pseudo_y, _ = sample_from_gen(args, device, num_classes, gen)
            real, y = sample_from_data(args, device, train_loader)
            if bug == "real_paired_with_pseudo_labels":
                y = pseudo_y  # the sampled labels of the fake batch reused for the real batch

            dis_fake, dis_real = dis(fake, pseudo_y), dis(real, y)
            loss_dis = dis_criterion(dis_fake, dis_real)

            if bug != "dis_zero_grad_dropped":
                dis.zero_grad()
            loss_dis.backward()
            opt_dis.step()

            cumulative_loss_dis += loss_dis.item()
        st["n_iter"] = n_iter + 1
        return cumulative_loss_dis / args.n_dis

    real0, y0 = next(iter(data.DataLoader(train_dataset, args.batch_size)))
    with torch.no_grad():
        fake0, pseudo0, _ = sample_from_gen(args, device, num_classes, gen)
    return Program(name="sngancrcrpar_cgan", model=dis, batch=((real0, y0), (fake0, pseudo0)),
                   loss_fn=lambda dis_real, fake_and_y: dis_criterion(dis(*fake_and_y), dis_real),
                   optimizer=opt_dis, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic cGAN pairing slip: the real batch scored with the fake batch's sampled labels instead of its own, so
    # the projection discriminator learns no class evidence from real images.
    Bug("real_paired_with_pseudo_labels", functools.partial(_build, bug="real_paired_with_pseudo_labels"),
        "learning_ledger", ("TASK",)),
    # classic: dis_hinge's arguments swapped in the discriminator loss (fakes pushed above +1, reals below -1).
    Bug("dis_hinge_args_swapped", functools.partial(_build, bug="dis_hinge_args_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: dis.zero_grad() dropped, so the discriminator's gradients pile up over its n_dis updates and across
    # iterations (together with those the generator step leaves on it). Every discriminator parameter alike.
    Bug("dis_zero_grad_dropped", functools.partial(_build, bug="dis_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
