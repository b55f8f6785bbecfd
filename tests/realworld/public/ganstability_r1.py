"""GAN training with the R1 gradient penalty, from LMescheder/GAN_stability ("Which Training Methods for GANs do
actually Converge?"): the repository's class-conditional ``resnet2`` generator and discriminator (pre-activation
ResNet blocks with the 0.1-scaled residual, label embedding normalized and concatenated to z, the discriminator's
output picked at the label's column), ``gan_training/train.py``'s ``Trainer`` (``toggle_grad``, the non-saturating
``binary_cross_entropy_with_logits`` losses, R1 on the real data by ``compute_grad2`` with ``create_graph``,
``reg_param`` 10, backwards taken one by one), ``build_optimizers``' RMSprop (lr 1e-4, alpha 0.99, eps 1e-8) for
both, ``build_lr_scheduler``'s StepLR stepped each iteration, and ``train.py``'s loop (one discriminator step, then
a generator step every ``d_steps``, then ``update_average`` of the test generator with beta 0.999).

Source: https://github.com/LMescheder/GAN_stability
Commit: c1f64c9efeac371453065e5ce71860f4c2b97357
Files: train.py, gan_training/train.py, gan_training/config.py, gan_training/models/resnet2.py,
gan_training/distributions.py, gan_training/inputs.py, gan_training/utils.py, gan_training/eval.py,
configs/default.yaml, configs/imagenet.yaml
License: MIT (Copyright (c) 2018 Lars Mescheder; full text in LICENSES/LMescheder-GAN_stability.txt)
Domain: vision, generative adversarial network (class-conditional ResNet GAN, non-saturating loss, R1 penalty,
generator weight averaging)

Deviations from the original:
- configuration: ``configs/imagenet.yaml`` over ``configs/default.yaml`` (``gan_type`` standard, ``reg_type`` real,
  ``reg_param`` 10, rmsprop, ``d_steps`` 1, ``take_model_average`` with beta 0.999, ``lr_anneal`` 1), with sizes
  for 2 CPU cores: ``img_size`` 128 -> 32 (``s0 = size // 32`` = 1), ``nfilter`` 64 -> 4 (so the 16 * nf widths
  are 64), ``embed_size`` 256 -> 32, ``z_dist.dim`` 256 -> 32, ``batch_size`` 128 -> 16, ``nlabels`` 1000 -> 4;
- data: the ImageNet ``ImageFolder`` is replaced by a synthetic folder of 256 32x32 images in 4 classes made from
  ``seed`` (each class a colour and a shape: disc, bar, ring or cross, at a random place and size); torchvision is
  not available, so ``get_dataset``'s transform (Resize and CenterCrop, here no-ops, RandomHorizontalFlip,
  ToTensor, Normalize to [-1, 1], the 1/128 uniform dequantization noise) is written out in plain torch;
- ``.to(device)`` is the CPU; ``DataParallel`` without GPUs calls its module directly; ``Variable`` is a tensor;
  the logger, checkpoints, sampling, inception score and the restart timer are dropped;
- one ``train_step`` is one iteration of the ``while True`` / ``for x_real, y in train_loader`` loop (the
  schedulers' ``step()``, the discriminator step, the generator step and the model average), returning the
  iteration's ``dloss`` as the original logs it; the loader restarts when exhausted (the next epoch); the
  ``Program`` declares the discriminator with its optimizer and its loss on a batch of real and generated images;
  ``SELF_CHECK_STEPS`` is 20: the discriminator's loss falls over its first iterations, then oscillates as the
  generator catches up;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, F841, RUF059  (the original code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import torch
import torch.utils.data
from torch import autograd, distributions, nn, optim
from torch.nn import functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 256
#: the discriminator's loss falls over its first iterations, then oscillates as the generator catches up
SELF_CHECK_STEPS = 20

# configs/default.yaml updated by configs/imagenet.yaml (sizes shrunk for the port)
config = {
    'data': {'type': 'image', 'img_size': 32, 'nlabels': 4},  # 128, 1000
    'generator': {'name': 'resnet2', 'kwargs': {'nfilter': 4, 'nfilter_max': 1024, 'embed_size': 32}},  # 64, 256
    'discriminator': {'name': 'resnet2', 'kwargs': {'nfilter': 4, 'nfilter_max': 1024, 'embed_size': 32}},
    'z_dist': {'type': 'gauss', 'dim': 32},  # 256
    'training': {
        'gan_type': 'standard', 'reg_type': 'real', 'reg_param': 10., 'batch_size': 16,  # 128
        'take_model_average': True, 'model_average_beta': 0.999, 'model_average_reinit': False,
        'optimizer': 'rmsprop', 'lr_g': 0.0001, 'lr_d': 0.0001, 'lr_anneal': 1., 'lr_anneal_every': 150000,
        'd_steps': 1, 'equalize_lr': False,
    },
}


# ---- gan_training/models/resnet2.py ----------------------------------------------------------------------------

class Generator(nn.Module):
    def __init__(self, z_dim, nlabels, size, embed_size=256, nfilter=64, **kwargs):
        super().__init__()
        s0 = self.s0 = size // 32
        nf = self.nf = nfilter
        self.z_dim = z_dim

        # Submodules
        self.embedding = nn.Embedding(nlabels, embed_size)
        self.fc = nn.Linear(z_dim + embed_size, 16*nf*s0*s0)

        self.resnet_0_0 = ResnetBlock(16*nf, 16*nf)
        self.resnet_0_1 = ResnetBlock(16*nf, 16*nf)

        self.resnet_1_0 = ResnetBlock(16*nf, 16*nf)
        self.resnet_1_1 = ResnetBlock(16*nf, 16*nf)

        self.resnet_2_0 = ResnetBlock(16*nf, 8*nf)
        self.resnet_2_1 = ResnetBlock(8*nf, 8*nf)

        self.resnet_3_0 = ResnetBlock(8*nf, 4*nf)
        self.resnet_3_1 = ResnetBlock(4*nf, 4*nf)

        self.resnet_4_0 = ResnetBlock(4*nf, 2*nf)
        self.resnet_4_1 = ResnetBlock(2*nf, 2*nf)

        self.resnet_5_0 = ResnetBlock(2*nf, 1*nf)
        self.resnet_5_1 = ResnetBlock(1*nf, 1*nf)

        self.conv_img = nn.Conv2d(nf, 3, 3, padding=1)

    def forward(self, z, y):
        assert(z.size(0) == y.size(0))
        batch_size = z.size(0)

        if y.dtype is torch.int64:
            yembed = self.embedding(y)
        else:
            yembed = y

        yembed = yembed / torch.norm(yembed, p=2, dim=1, keepdim=True)

        yz = torch.cat([z, yembed], dim=1)
        out = self.fc(yz)
        out = out.view(batch_size, 16*self.nf, self.s0, self.s0)

        out = self.resnet_0_0(out)
        out = self.resnet_0_1(out)

        out = F.interpolate(out, scale_factor=2)
        out = self.resnet_1_0(out)
        out = self.resnet_1_1(out)

        out = F.interpolate(out, scale_factor=2)
        out = self.resnet_2_0(out)
        out = self.resnet_2_1(out)

        out = F.interpolate(out, scale_factor=2)
        out = self.resnet_3_0(out)
        out = self.resnet_3_1(out)

        out = F.interpolate(out, scale_factor=2)
        out = self.resnet_4_0(out)
        out = self.resnet_4_1(out)

        out = F.interpolate(out, scale_factor=2)
        out = self.resnet_5_0(out)
        out = self.resnet_5_1(out)

        out = self.conv_img(actvn(out))
        out = torch.tanh(out)

        return out


class Discriminator(nn.Module):
    def __init__(self, z_dim, nlabels, size, embed_size=256, nfilter=64, **kwargs):
        super().__init__()
        self.embed_size = embed_size
        s0 = self.s0 = size // 32
        nf = self.nf = nfilter
        ny = nlabels

        # Submodules
        self.conv_img = nn.Conv2d(3, 1*nf, 3, padding=1)

        self.resnet_0_0 = ResnetBlock(1*nf, 1*nf)
        self.resnet_0_1 = ResnetBlock(1*nf, 2*nf)

        self.resnet_1_0 = ResnetBlock(2*nf, 2*nf)
        self.resnet_1_1 = ResnetBlock(2*nf, 4*nf)

        self.resnet_2_0 = ResnetBlock(4*nf, 4*nf)
        self.resnet_2_1 = ResnetBlock(4*nf, 8*nf)

        self.resnet_3_0 = ResnetBlock(8*nf, 8*nf)
        self.resnet_3_1 = ResnetBlock(8*nf, 16*nf)

        self.resnet_4_0 = ResnetBlock(16*nf, 16*nf)
        self.resnet_4_1 = ResnetBlock(16*nf, 16*nf)

        self.resnet_5_0 = ResnetBlock(16*nf, 16*nf)
        self.resnet_5_1 = ResnetBlock(16*nf, 16*nf)

        self.fc = nn.Linear(16*nf*s0*s0, nlabels)


    def forward(self, x, y):
        assert(x.size(0) == y.size(0))
        batch_size = x.size(0)

        out = self.conv_img(x)

        out = self.resnet_0_0(out)
        out = self.resnet_0_1(out)

        out = F.avg_pool2d(out, 3, stride=2, padding=1)
        out = self.resnet_1_0(out)
        out = self.resnet_1_1(out)

        out = F.avg_pool2d(out, 3, stride=2, padding=1)
        out = self.resnet_2_0(out)
        out = self.resnet_2_1(out)

        out = F.avg_pool2d(out, 3, stride=2, padding=1)
        out = self.resnet_3_0(out)
        out = self.resnet_3_1(out)

        out = F.avg_pool2d(out, 3, stride=2, padding=1)
        out = self.resnet_4_0(out)
        out = self.resnet_4_1(out)

        out = F.avg_pool2d(out, 3, stride=2, padding=1)
        out = self.resnet_5_0(out)
        out = self.resnet_5_1(out)

        out = out.view(batch_size, 16*self.nf*self.s0*self.s0)
        out = self.fc(actvn(out))

        index = torch.LongTensor(range(out.size(0)))
        if y.is_cuda:
            index = index.cuda()
        out = out[index, y]

        return out


class ResnetBlock(nn.Module):
    def __init__(self, fin, fout, fhidden=None, is_bias=True):
        super().__init__()
        # Attributes
        self.is_bias = is_bias
        self.learned_shortcut = (fin != fout)
        self.fin = fin
        self.fout = fout
        if fhidden is None:
            self.fhidden = min(fin, fout)
        else:
            self.fhidden = fhidden

        # Submodules
        self.conv_0 = nn.Conv2d(self.fin, self.fhidden, 3, stride=1, padding=1)
        self.conv_1 = nn.Conv2d(self.fhidden, self.fout, 3, stride=1, padding=1, bias=is_bias)
        if self.learned_shortcut:
            self.conv_s = nn.Conv2d(self.fin, self.fout, 1, stride=1, padding=0, bias=False)


    def forward(self, x):
        x_s = self._shortcut(x)
        dx = self.conv_0(actvn(x))
        dx = self.conv_1(actvn(dx))
        out = x_s + 0.1*dx

        return out

    def _shortcut(self, x):
        if self.learned_shortcut:
            x_s = self.conv_s(x)
        else:
            x_s = x
        return x_s


def actvn(x):
    out = F.leaky_relu(x, 2e-1)
    return out


# ---- gan_training/train.py -------------------------------------------------------------------------------------

class Trainer(object):
    def __init__(self, generator, discriminator, g_optimizer, d_optimizer,
                 gan_type, reg_type, reg_param, bug=None):
        self.generator = generator
        self.discriminator = discriminator
        self.g_optimizer = g_optimizer
        self.d_optimizer = d_optimizer

        self.gan_type = gan_type
        self.reg_type = reg_type
        self.reg_param = reg_param
        self.bug = bug

    def generator_trainstep(self, y, z):
        assert(y.size(0) == z.size(0))
        toggle_grad(self.generator, True)
        toggle_grad(self.discriminator, False)
        self.generator.train()
        self.discriminator.train()
        self.g_optimizer.zero_grad()

        x_fake = self.generator(z, y)
        d_fake = self.discriminator(x_fake, y)
        gloss = self.compute_loss(d_fake, 1)
        gloss.backward()

        self.g_optimizer.step()

        return gloss.item()

    def discriminator_trainstep(self, x_real, y, z):
        toggle_grad(self.generator, False)
        toggle_grad(self.discriminator, True)
        self.generator.train()
        self.discriminator.train()
        if self.bug != "d_zero_grad_dropped":
            self.d_optimizer.zero_grad()

        # On real data
        x_real.requires_grad_()

        d_real = self.discriminator(x_real, y)
        dloss_real = self.compute_loss(d_real, 1)

        if self.reg_type == 'real' or self.reg_type == 'real_fake':
            dloss_real.backward(retain_graph=True)
            reg = self.reg_param * compute_grad2(d_real, x_real).mean()
            reg.backward()
        else:
            dloss_real.backward()

        # On fake data
        with torch.no_grad():
            x_fake = self.generator(z, y)

        x_fake.requires_grad_()
        d_fake = self.discriminator(x_fake, y)
        dloss_fake = self.compute_loss(d_fake, 1 if self.bug == "d_fake_target_one" else 0)

        if self.reg_type == 'fake' or self.reg_type == 'real_fake':
            dloss_fake.backward(retain_graph=True)
            reg = self.reg_param * compute_grad2(d_fake, x_fake).mean()
            reg.backward()
        else:
            dloss_fake.backward()

        self.d_optimizer.step()

        toggle_grad(self.discriminator, False)

        # Output
        dloss = (dloss_real + dloss_fake)

        if self.reg_type == 'none':
            reg = torch.tensor(0.)

        return dloss.item(), reg.item()

    def compute_loss(self, d_out, target):
        targets = d_out.new_full(size=d_out.size(), fill_value=target)

        if self.gan_type == 'standard':
            loss = F.binary_cross_entropy_with_logits(d_out, targets)
        elif self.gan_type == 'wgan':
            loss = (2*target - 1) * d_out.mean()
        else:
            raise NotImplementedError

        return loss


# Utility functions
def toggle_grad(model, requires_grad):
    for p in model.parameters():
        p.requires_grad_(requires_grad)


def compute_grad2(d_out, x_in):
    batch_size = x_in.size(0)
    grad_dout = autograd.grad(
        outputs=d_out.sum(), inputs=x_in,
        create_graph=True, retain_graph=True, only_inputs=True
    )[0]
    grad_dout2 = grad_dout.pow(2)
    assert(grad_dout2.size() == x_in.size())
    reg = grad_dout2.view(batch_size, -1).sum(1)
    return reg


def update_average(model_tgt, model_src, beta):
    toggle_grad(model_src, False)
    toggle_grad(model_tgt, False)

    param_dict_src = dict(model_src.named_parameters())

    for p_name, p_tgt in model_tgt.named_parameters():
        p_src = param_dict_src[p_name]
        assert(p_src is not p_tgt)
        p_tgt.copy_(beta*p_tgt + (1. - beta)*p_src)


# ---- gan_training/config.py, distributions.py ------------------------------------------------------------------

def build_models(config):
    generator = Generator(
        z_dim=config['z_dist']['dim'],
        nlabels=config['data']['nlabels'],
        size=config['data']['img_size'],
        **config['generator']['kwargs']
    )
    discriminator = Discriminator(
        config['discriminator']['name'],
        nlabels=config['data']['nlabels'],
        size=config['data']['img_size'],
        **config['discriminator']['kwargs']
    )

    return generator, discriminator


def build_optimizers(generator, discriminator, config):
    lr_g = config['training']['lr_g']
    lr_d = config['training']['lr_d']

    toggle_grad(generator, True)
    toggle_grad(discriminator, True)

    g_params = generator.parameters()
    d_params = discriminator.parameters()

    # Optimizers (optimizer: rmsprop)
    g_optimizer = optim.RMSprop(g_params, lr=lr_g, alpha=0.99, eps=1e-8)
    d_optimizer = optim.RMSprop(d_params, lr=lr_d, alpha=0.99, eps=1e-8)

    return g_optimizer, d_optimizer


def build_lr_scheduler(optimizer, config, last_epoch=-1):
    lr_scheduler = optim.lr_scheduler.StepLR(
        optimizer,
        step_size=config['training']['lr_anneal_every'],
        gamma=config['training']['lr_anneal'],
        last_epoch=last_epoch
    )
    return lr_scheduler


def get_zdist(dist_name, dim, device=None):
    mu = torch.zeros(dim, device=device)
    scale = torch.ones(dim, device=device)
    zdist = distributions.Normal(mu, scale)

    # Add dim attribute
    zdist.dim = dim

    return zdist


def get_ydist(nlabels, device=None):
    logits = torch.zeros(nlabels, device=device)
    ydist = distributions.categorical.Categorical(logits=logits)

    # Add nlabels attribute
    ydist.nlabels = nlabels

    return ydist


# ---- (port) the image folder and get_dataset's transform -------------------------------------------------------

class ShapesFolder(torch.utils.data.Dataset):
    """4 classes of 32x32 RGB images: a coloured disc, bar, ring or cross on a dark background (class = shape and
    colour), at a random place and size; ``__getitem__`` applies get_dataset's transform."""

    COLOURS = torch.tensor([[0.9, 0.2, 0.2], [0.2, 0.8, 0.3], [0.25, 0.35, 0.95], [0.95, 0.85, 0.2]])

    def __init__(self, seed, n, size):
        gen = torch.Generator().manual_seed(seed)
        self.targets = torch.arange(n) % 4
        yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing='ij')
        imgs = []
        for c in self.targets.tolist():
            cy, cx = (size * (0.3 + 0.4 * torch.rand(2, generator=gen))).tolist()
            r = float(size * (0.15 + 0.12 * torch.rand((), generator=gen)))
            d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
            if c == 0:
                m = d < r
            elif c == 1:
                m = ((yy - cy).abs() < r / 3) & ((xx - cx).abs() < r * 1.2)
            elif c == 2:
                m = (d < r) & (d > r * 0.6)
            else:
                m = (((yy - cy).abs() < r / 4) & ((xx - cx).abs() < r)) | (((xx - cx).abs() < r / 4) & ((yy - cy).abs() < r))
            img = 0.08 + 0.05 * torch.rand(3, size, size, generator=gen)
            img = torch.where(m[None], self.COLOURS[c].view(3, 1, 1).expand(3, size, size), img)
            imgs.append(img)
        self.data = torch.stack(imgs)
        self.classes = ['disc', 'bar', 'ring', 'cross']

    def transform(self, x):
        if torch.rand(()) < 0.5:  # RandomHorizontalFlip (Resize, CenterCrop: the images already have the size)
            x = x.flip(-1)
        x = (x - 0.5) / 0.5  # ToTensor, Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
        return x + 1./128 * torch.rand(x.size())  # transforms.Lambda

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]

    def __len__(self):
        return len(self.targets)


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    batch_size = config['training']['batch_size']
    d_steps = config['training']['d_steps']

    train_dataset = ShapesFolder(seed, N_IMAGES, config['data']['img_size'])
    nlabels = len(train_dataset.classes)
    train_loader = torch.utils.data.DataLoader(
            train_dataset,
            batch_size=batch_size,
            shuffle=True, sampler=None, drop_last=True,
            generator=torch.Generator().manual_seed(seed),
    )

    # Number of labels
    nlabels = min(nlabels, config['data']['nlabels'])

    # Create models
    generator, discriminator = build_models(config)

    # Put models on gpu if needed
    generator = generator.to(device)
    discriminator = discriminator.to(device)

    g_optimizer, d_optimizer = build_optimizers(
        generator, discriminator, config
    )

    # Use multiple GPUs if possible
    generator = nn.DataParallel(generator)
    discriminator = nn.DataParallel(discriminator)

    # Distributions
    ydist = get_ydist(nlabels, device=device)
    zdist = get_zdist(config['z_dist']['type'], config['z_dist']['dim'],
                      device=device)

    # Test generator
    if config['training']['take_model_average']:
        generator_test = copy.deepcopy(generator)
    else:
        generator_test = generator

    it = epoch_idx = -1

    # Learning rate anneling
    g_scheduler = build_lr_scheduler(g_optimizer, config, last_epoch=it)
    d_scheduler = build_lr_scheduler(d_optimizer, config, last_epoch=it)

    # Trainer
    trainer = Trainer(
        generator, discriminator, g_optimizer, d_optimizer,
        gan_type=config['training']['gan_type'],
        reg_type=config['training']['reg_type'],
        reg_param=config['training']['reg_param'],
        bug=bug,
    )

    st = {"it": it, "epoch_idx": epoch_idx, "loader": None}

    def train_step():
        # one iteration of: while True: epoch_idx += 1; for x_real, y in train_loader: ...
        if st["loader"] is None:
            st["epoch_idx"] += 1
            st["loader"] = iter(train_loader)
        try:
            x_real, y = next(st["loader"])
        except StopIteration:
            st["epoch_idx"] += 1
            st["loader"] = iter(train_loader)
            x_real, y = next(st["loader"])
        if bug == "labels_shuffled_apart":
            y = y[torch.randperm(y.size(0))]
        st["it"] += 1
        it = st["it"]
        g_scheduler.step()
        d_scheduler.step()

        x_real, y = x_real.to(device), y.to(device)
        y.clamp_(None, nlabels-1)

        # Discriminator updates
        z = zdist.sample((batch_size,))
        dloss, reg = trainer.discriminator_trainstep(x_real, y, z)

        # Generators updates
        if ((it + 1) % d_steps) == 0:
            z = zdist.sample((batch_size,))
            gloss = trainer.generator_trainstep(y, z)

            if config['training']['take_model_average']:
                update_average(generator_test, generator,
                               beta=config['training']['model_average_beta'])
        return torch.tensor(dloss)

    # the Program's batch: real images with their labels, and the generator's images for the same labels
    gen = torch.Generator().manual_seed(seed + 1)
    idx = torch.randperm(N_IMAGES, generator=gen)[:batch_size]
    x0 = torch.stack([train_dataset[int(i)][0] for i in idx])
    y0 = train_dataset.targets[idx]
    with torch.no_grad():
        x_fake0 = generator(torch.randn(batch_size, config['z_dist']['dim'], generator=gen), y0)

    def loss_fn(d_real, fake_and_labels):
        """discriminator_trainstep's dloss: the real images called real and the generated ones fake."""
        x_fake, y = fake_and_labels
        return trainer.compute_loss(d_real, 1) + trainer.compute_loss(
            discriminator(x_fake, y), 1 if bug == "d_fake_target_one" else 0)

    return Program(name="ganstability_r1", model=discriminator, batch=((x0, y0), (x_fake0, y0)), loss_fn=loss_fn,
                   optimizer=d_optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic conditional-GAN data slip: the labels shuffled apart from their images before both steps
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # classic copy-paste slip: the generated images' loss in the discriminator step given the real target
    Bug("d_fake_target_one", functools.partial(_build, bug="d_fake_target_one"), "learning_ledger",
        ("OBJECTIVE",)),
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
