"""StarGAN (Choi et al. 2018), yunjey/stargan: one generator ``G(x, c)`` translating an image to the target domain
labels ``c`` (labels tiled spatially and concatenated to the image; conv + InstanceNorm down-sampling, residual
bottleneck, transposed-conv up-sampling, tanh), a PatchGAN discriminator with two heads (``out_src`` real/fake map,
``out_cls`` domain logits); ``Solver.train`` on CelebA: target labels a random permutation of the batch's labels,
the D step ``-mean(D(x_real)) + mean(D(G(x, c_trg).detach())) + lambda_cls * BCE(cls(x_real), label_org) +
lambda_gp * GP`` (WGAN-GP on random interpolates), the G step every ``n_critic`` iterations
``-mean(D(x_fake)) + lambda_rec * L1(x_real, G(x_fake, c_org)) + lambda_cls * BCE(cls(x_fake), label_trg)``, Adam
(1e-4, betas 0.5/0.999) for each, ``reset_grad`` clearing both optimizers before every backward, the lr decayed
linearly over the last ``num_iters_decay`` iterations.

Source: https://github.com/yunjey/stargan
Commit: 94dd002e93a2863d9b987a937b85925b80f7a19f
Files: solver.py (``Solver.build_model``, ``reset_grad``, ``gradient_penalty``, ``classification_loss``, ``train``),
model.py, data_loader.py, main.py
License: MIT (Copyright (c) 2017, holder left blank in the file; full text in LICENSES/yunjey-stargan.txt)
Domain: vision, GAN (multi-domain image-to-image translation, WGAN-GP with an auxiliary attribute classifier)

Deviations from the original:
- sizes: image_size 128 -> 16, g_conv_dim 64 -> 8, g_repeat_num 6 -> 1, d_conv_dim 64 -> 8, d_repeat_num 6 -> 3
  (so ``conv2``'s kernel ``image_size / 2**repeat_num`` is 2), batch_size 16 -> 8, num_iters 200000 and
  num_iters_decay 100000 kept (the decay never starts in a short run); n_critic 5, lambda_cls 1, lambda_rec 10,
  lambda_gp 10, the lrs and betas unchanged;
- data: CelebA (crop 178, resize 128) and its attribute file are replaced by synthetic 16x16 RGB "faces" made
  from ``seed`` with the five default ``selected_attrs`` (Black_Hair, Blond_Hair, Brown_Hair, Male, Young): the top
  rows take the hair colour (black, blond or brown, one of them, or none), "Male" draws a dark horizontal bar in
  the lower half, "Young" brightens the face region, plus noise; the attribute vector is read off the picture as the
  label file would give it. ``get_loader``'s transforms are written out in plain torch (RandomHorizontalFlip and
  ``Normalize(0.5, 0.5)``; crop and resize are not needed at 16x16); the DataLoader shuffles with a
  ``torch.Generator(seed)``, no workers; ``torch.randperm``/``torch.rand`` draw from the seeded global generator;
- ``F.binary_cross_entropy_with_logits(..., size_average=False)`` is written ``reduction='sum'`` (the same loss);
  CUDA, tensorboard logging, printing, the fixed-image samples (``save_image``), checkpoints and resume are dropped;
  the RaFD / ``Both`` branches are not copied;
- one ``train_step`` is one iteration ``i`` of ``train``'s loop (the D step, and the G step when
  ``(i+1) % n_critic == 0``); it returns ``d_loss``. The Program's model is the discriminator (the network every
  iteration trains), its optimizer ``d_optimizer``, its batch the real images with their labels and one batch of
  fakes, and ``loss_fn`` the D loss on them;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, E722, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class _Config:
    c_dim = 5
    image_size = 16  # 128
    g_conv_dim = 8  # 64
    d_conv_dim = 8  # 64
    g_repeat_num = 1  # 6
    d_repeat_num = 3  # 6
    lambda_cls = 1
    lambda_rec = 10
    lambda_gp = 10
    dataset = 'CelebA'
    batch_size = 8  # 16
    num_iters = 200000
    num_iters_decay = 100000
    g_lr = 0.0001
    d_lr = 0.0001
    n_critic = 5
    beta1 = 0.5
    beta2 = 0.999
    resume_iters = None
    selected_attrs = ['Black_Hair', 'Blond_Hair', 'Brown_Hair', 'Male', 'Young']  # noqa: RUF012
    lr_update_step = 1000


# ---- model.py --------------------------------------------------------------------------------------------------

class ResidualBlock(nn.Module):
    """Residual Block with instance normalization."""
    def __init__(self, dim_in, dim_out):
        super(ResidualBlock, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(dim_in, dim_out, kernel_size=3, stride=1, padding=1, bias=False),
            nn.InstanceNorm2d(dim_out, affine=True, track_running_stats=True),
            nn.ReLU(inplace=True),
            nn.Conv2d(dim_out, dim_out, kernel_size=3, stride=1, padding=1, bias=False),
            nn.InstanceNorm2d(dim_out, affine=True, track_running_stats=True))

    def forward(self, x):
        return x + self.main(x)


class Generator(nn.Module):
    """Generator network."""
    def __init__(self, conv_dim=64, c_dim=5, repeat_num=6):
        super(Generator, self).__init__()

        layers = []
        layers.append(nn.Conv2d(3+c_dim, conv_dim, kernel_size=7, stride=1, padding=3, bias=False))
        layers.append(nn.InstanceNorm2d(conv_dim, affine=True, track_running_stats=True))
        layers.append(nn.ReLU(inplace=True))

        # Down-sampling layers.
        curr_dim = conv_dim
        for i in range(2):
            layers.append(nn.Conv2d(curr_dim, curr_dim*2, kernel_size=4, stride=2, padding=1, bias=False))
            layers.append(nn.InstanceNorm2d(curr_dim*2, affine=True, track_running_stats=True))
            layers.append(nn.ReLU(inplace=True))
            curr_dim = curr_dim * 2

        # Bottleneck layers.
        for i in range(repeat_num):
            layers.append(ResidualBlock(dim_in=curr_dim, dim_out=curr_dim))

        # Up-sampling layers.
        for i in range(2):
            layers.append(nn.ConvTranspose2d(curr_dim, curr_dim//2, kernel_size=4, stride=2, padding=1, bias=False))
            layers.append(nn.InstanceNorm2d(curr_dim//2, affine=True, track_running_stats=True))
            layers.append(nn.ReLU(inplace=True))
            curr_dim = curr_dim // 2

        layers.append(nn.Conv2d(curr_dim, 3, kernel_size=7, stride=1, padding=3, bias=False))
        layers.append(nn.Tanh())
        self.main = nn.Sequential(*layers)

    def forward(self, x, c):
        # Replicate spatially and concatenate domain information.
        # Note that this type of label conditioning does not work at all if we use reflection padding in Conv2d.
        # This is because instance normalization ignores the shifting (or bias) effect.
        c = c.view(c.size(0), c.size(1), 1, 1)
        c = c.repeat(1, 1, x.size(2), x.size(3))
        x = torch.cat([x, c], dim=1)
        return self.main(x)


class Discriminator(nn.Module):
    """Discriminator network with PatchGAN."""
    def __init__(self, image_size=128, conv_dim=64, c_dim=5, repeat_num=6):
        super(Discriminator, self).__init__()
        layers = []
        layers.append(nn.Conv2d(3, conv_dim, kernel_size=4, stride=2, padding=1))
        layers.append(nn.LeakyReLU(0.01))

        curr_dim = conv_dim
        for i in range(1, repeat_num):
            layers.append(nn.Conv2d(curr_dim, curr_dim*2, kernel_size=4, stride=2, padding=1))
            layers.append(nn.LeakyReLU(0.01))
            curr_dim = curr_dim * 2

        kernel_size = int(image_size / np.power(2, repeat_num))
        self.main = nn.Sequential(*layers)
        self.conv1 = nn.Conv2d(curr_dim, 1, kernel_size=3, stride=1, padding=1, bias=False)
        self.conv2 = nn.Conv2d(curr_dim, c_dim, kernel_size=kernel_size, bias=False)

    def forward(self, x):
        h = self.main(x)
        out_src = self.conv1(h)
        out_cls = self.conv2(h)
        return out_src, out_cls.view(out_cls.size(0), out_cls.size(1))


# ---- data_loader.py (CelebA replaced by synthetic attribute pictures) -------------------------------------------

HAIR = torch.tensor([[0.05, 0.05, 0.05], [0.95, 0.85, 0.35], [0.45, 0.25, 0.1]])  # black, blond, brown


def make_faces(seed, n=128, size=16):
    gen = torch.Generator().manual_seed(seed)
    hair = torch.randint(0, 4, (n,), generator=gen)  # 3: no listed hair colour
    male = torch.rand(n, generator=gen) < 0.5
    young = torch.rand(n, generator=gen) < 0.5
    img = 0.5 + 0.08 * torch.randn(n, 3, size, size, generator=gen)
    for i in range(n):
        if hair[i] < 3:
            img[i, :, :4, :] = HAIR[hair[i]].view(3, 1, 1) + 0.05 * torch.randn(3, 4, size, generator=gen)
        if young[i]:
            img[i, :, 4:, 3:13] += 0.3
        if male[i]:
            img[i, :, 11:13, 4:12] = 0.1
    label = torch.zeros(n, 5, dtype=torch.bool)
    label[:, :3] = torch.nn.functional.one_hot(hair, 4)[:, :3].bool()
    label[:, 3], label[:, 4] = male, young
    return img.clamp(0, 1), label


class CelebA(data.Dataset):
    """Dataset class for the CelebA dataset."""

    def __init__(self, seed, mode):
        self.images, labels = make_faces(seed)
        self.train_dataset = [[i, labels[i].tolist()] for i in range(len(labels))]
        self.mode = mode
        self.gen = torch.Generator().manual_seed(seed + 3)
        self.num_images = len(self.train_dataset)

    def transform(self, image):
        if self.mode == 'train' and torch.rand((), generator=self.gen) < 0.5:  # T.RandomHorizontalFlip()
            image = image.flip(-1)
        return (image - 0.5) / 0.5  # T.ToTensor(), T.Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))

    def __getitem__(self, index):
        """Return one image and its corresponding attribute label."""
        dataset = self.train_dataset
        filename, label = dataset[index]
        image = self.images[filename]
        return self.transform(image), torch.FloatTensor(label)

    def __len__(self):
        """Return the number of images."""
        return self.num_images


# ---- solver.py -------------------------------------------------------------------------------------------------

class Solver(object):
    """Solver for training and testing StarGAN."""

    def __init__(self, celeba_loader, config, bug=None):
        """Initialize configurations."""
        self.bug = bug
        self.celeba_loader = celeba_loader

        # Model configurations.
        self.c_dim = config.c_dim
        self.image_size = config.image_size
        self.g_conv_dim = config.g_conv_dim
        self.d_conv_dim = config.d_conv_dim
        self.g_repeat_num = config.g_repeat_num
        self.d_repeat_num = config.d_repeat_num
        self.lambda_cls = config.lambda_cls
        self.lambda_rec = config.lambda_rec
        self.lambda_gp = config.lambda_gp

        # Training configurations.
        self.dataset = config.dataset
        self.batch_size = config.batch_size
        self.num_iters = config.num_iters
        self.num_iters_decay = config.num_iters_decay
        self.g_lr = config.g_lr
        self.d_lr = config.d_lr
        self.n_critic = config.n_critic
        self.beta1 = config.beta1
        self.beta2 = config.beta2
        self.resume_iters = config.resume_iters
        self.selected_attrs = config.selected_attrs

        self.device = torch.device('cpu')
        self.lr_update_step = config.lr_update_step

        # Build the model and tensorboard.
        self.build_model()

    def build_model(self):
        """Create a generator and a discriminator."""
        self.G = Generator(self.g_conv_dim, self.c_dim, self.g_repeat_num)
        self.D = Discriminator(self.image_size, self.d_conv_dim, self.c_dim, self.d_repeat_num)

        self.g_optimizer = torch.optim.Adam(self.G.parameters(), self.g_lr, [self.beta1, self.beta2])
        self.d_optimizer = torch.optim.Adam(self.D.parameters(), self.d_lr, [self.beta1, self.beta2])

        self.G.to(self.device)
        self.D.to(self.device)

    def update_lr(self, g_lr, d_lr):
        """Decay learning rates of the generator and discriminator."""
        for param_group in self.g_optimizer.param_groups:
            param_group['lr'] = g_lr
        for param_group in self.d_optimizer.param_groups:
            param_group['lr'] = d_lr

    def reset_grad(self):
        """Reset the gradient buffers."""
        self.g_optimizer.zero_grad()
        self.d_optimizer.zero_grad()

    def gradient_penalty(self, y, x):
        """Compute gradient penalty: (L2_norm(dy/dx) - 1)**2."""
        weight = torch.ones(y.size()).to(self.device)
        dydx = torch.autograd.grad(outputs=y,
                                   inputs=x,
                                   grad_outputs=weight,
                                   retain_graph=True,
                                   create_graph=self.bug != "gp_without_create_graph",
                                   # ^ create_graph left out (classic): the penalty is a constant to D's weights
                                   only_inputs=True)[0]

        dydx = dydx.view(dydx.size(0), -1)
        dydx_l2norm = torch.sqrt(torch.sum(dydx**2, dim=1))
        return torch.mean((dydx_l2norm-1)**2)

    def classification_loss(self, logit, target, dataset='CelebA'):
        """Compute binary or softmax cross entropy loss."""
        if dataset == 'CelebA':
            return F.binary_cross_entropy_with_logits(logit, target, reduction='sum') / logit.size(0)
        elif dataset == 'RaFD':
            return F.cross_entropy(logit, target)

    def d_loss_on(self, x_real, label_org, x_fake, alpha):
        """The D step's loss (as written in ``train``), shared by the loop and the Program's ``loss_fn``."""
        # Compute loss with real images.
        out_src, out_cls = self.D(x_real)
        d_loss_real = - torch.mean(out_src)
        d_loss_cls = self.classification_loss(out_cls, label_org, self.dataset)

        # Compute loss with fake images.
        out_src, out_cls = self.D(x_fake.detach())
        d_loss_fake = torch.mean(out_src)

        # Compute loss for gradient penalty.
        x_hat = (alpha * x_real.data + (1 - alpha) * x_fake.data).requires_grad_(True)
        out_src, _ = self.D(x_hat)
        d_loss_gp = self.gradient_penalty(out_src, x_hat)

        # Backward and optimize.
        d_loss = d_loss_real + d_loss_fake + self.lambda_cls * d_loss_cls + self.lambda_gp * d_loss_gp
        return d_loss

    def start(self):
        data_loader = self.celeba_loader
        self.data_iter = iter(data_loader)
        self.g_lr_cur = self.g_lr
        self.d_lr_cur = self.d_lr
        self.i = 0

    def train_iteration(self):
        """One iteration ``i`` of ``train``'s loop."""
        data_loader = self.celeba_loader
        i = self.i

        # =================================================================================== #
        #                             1. Preprocess input data                                #
        # =================================================================================== #

        # Fetch real images and labels.
        try:
            x_real, label_org = next(self.data_iter)
        except:
            self.data_iter = iter(data_loader)
            x_real, label_org = next(self.data_iter)

        # Generate target domain labels randomly.
        rand_idx = torch.randperm(label_org.size(0))
        label_trg = label_org[rand_idx]

        c_org = label_org.clone()
        c_trg = label_trg.clone()

        x_real = x_real.to(self.device)           # Input images.
        c_org = c_org.to(self.device)             # Original domain labels.
        c_trg = c_trg.to(self.device)             # Target domain labels.
        label_org = label_org.to(self.device)     # Labels for computing classification loss.
        label_trg = label_trg.to(self.device)     # Labels for computing classification loss.

        # =================================================================================== #
        #                             2. Train the discriminator                              #
        # =================================================================================== #

        # Compute loss with real images.
        out_src, out_cls = self.D(x_real)
        d_loss_real = - torch.mean(out_src)
        if self.bug == "d_cls_on_target_labels":
            # the real images classified against the shuffled target labels (classic copy slip from the G step)
            d_loss_cls = self.classification_loss(out_cls, label_trg, self.dataset)
        else:
            d_loss_cls = self.classification_loss(out_cls, label_org, self.dataset)

        # Compute loss with fake images.
        x_fake = self.G(x_real, c_trg)
        out_src, out_cls = self.D(x_fake.detach())
        d_loss_fake = torch.mean(out_src)

        # Compute loss for gradient penalty.
        alpha = torch.rand(x_real.size(0), 1, 1, 1).to(self.device)
        x_hat = (alpha * x_real.data + (1 - alpha) * x_fake.data).requires_grad_(True)
        out_src, _ = self.D(x_hat)
        d_loss_gp = self.gradient_penalty(out_src, x_hat)

        # Backward and optimize.
        d_loss = d_loss_real + d_loss_fake + self.lambda_cls * d_loss_cls + self.lambda_gp * d_loss_gp
        self.reset_grad()
        d_loss.backward()
        self.d_optimizer.step()

        # =================================================================================== #
        #                               3. Train the generator                                #
        # =================================================================================== #

        if (i+1) % self.n_critic == 0:
            # Original-to-target domain.
            x_fake = self.G(x_real, c_trg)
            out_src, out_cls = self.D(x_fake)
            g_loss_fake = - torch.mean(out_src)
            g_loss_cls = self.classification_loss(out_cls, label_trg, self.dataset)

            # Target-to-original domain.
            if self.bug == "reconstruct_with_target_labels":
                # the cycle fed the target labels again (classic copy slip): G is asked to undo a translation
                # while being told to keep the target domain
                x_reconst = self.G(x_fake, c_trg)
            else:
                x_reconst = self.G(x_fake, c_org)
            g_loss_rec = torch.mean(torch.abs(x_real - x_reconst))

            # Backward and optimize.
            g_loss = g_loss_fake + self.lambda_rec * g_loss_rec + self.lambda_cls * g_loss_cls
            self.reset_grad()
            g_loss.backward()
            self.g_optimizer.step()

        # Decay learning rates.
        if (i+1) % self.lr_update_step == 0 and (i+1) > (self.num_iters - self.num_iters_decay):
            self.g_lr_cur -= (self.g_lr / float(self.num_iters_decay))
            self.d_lr_cur -= (self.d_lr / float(self.num_iters_decay))
            self.update_lr(self.g_lr_cur, self.d_lr_cur)

        self.i += 1
        return d_loss.detach()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = _Config()
    dataset = CelebA(seed, 'train')
    celeba_loader = data.DataLoader(dataset=dataset, batch_size=config.batch_size, shuffle=True, num_workers=0,
                                    generator=torch.Generator().manual_seed(seed))
    solver = Solver(celeba_loader, config, bug=bug)
    solver.start()

    x_real, label_org = next(iter(data.DataLoader(CelebA(seed, 'test'), batch_size=config.batch_size)))
    gen = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        c_trg = label_org[torch.randperm(label_org.size(0), generator=gen)]
        x_fake = solver.G(x_real, c_trg)
    alpha = torch.rand(x_real.size(0), 1, 1, 1, generator=gen)

    def loss_fn(out, targets):  # the D step's loss; ``out`` (D on the real images) is recomputed inside
        x_real_, label_org_, x_fake_ = targets
        return solver.d_loss_on(x_real_, label_org_, x_fake_, alpha)

    return Program(name="stargan_celeba", model=solver.D, batch=(x_real, (x_real, label_org, x_fake)),
                   loss_fn=loss_fn, optimizer=solver.d_optimizer, train_step=solver.train_iteration,
                   loader=celeba_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # D's attribute classifier trained on the real images against the permuted target labels (classic copy slip
    # from the G step's ``label_trg``): the labels no longer follow from the images.
    Bug("d_cls_on_target_labels", functools.partial(_build, bug="d_cls_on_target_labels"), "learning_ledger",
        ("TASK",)),
    # ``create_graph`` dropped from ``torch.autograd.grad`` in ``gradient_penalty`` (classic): the penalty is
    # computed and logged but carries no gradient to D's weights, so the Lipschitz constraint is never trained.
    Bug("gp_without_create_graph", functools.partial(_build, bug="gp_without_create_graph"), "learning_ledger",
        ("OBJECTIVE",)),
    # the reconstruction ``G(x_fake, c_trg)`` instead of ``G(x_fake, c_org)`` (classic): the cycle loss asks G to
    # return to the source image while conditioned on the target domain.
    Bug("reconstruct_with_target_labels", functools.partial(_build, bug="reconstruct_with_target_labels"),
        "learning_ledger", ("OBJECTIVE",)),
]
