# ruff: noqa: UP032, F841, RUF059
"""NCSNv2 (Song & Ermon, "Improved Techniques for Training Score-Based Generative Models", NeurIPS 2020): an
unconditional RefineNet score network whose output is divided by the noise level, trained by annealed denoising
score matching (``anneal_dsm_score_estimation``: one of 232 geometric noise levels from 50 to 0.01 drawn per image,
target ``-noise / sigma^2``, squared error summed over pixels and weighted by ``sigma^2``), Adam lr 1e-4, an EMA
of the weights (0.999) used for the periodic test loss, as ``configs/cifar10.yml`` sets it.

Source: https://github.com/ermongroup/ncsnv2
Commit: 1bcea03bd97d76a8357b9d674fa0bae5ff0f1093
Files: ``runners/ncsn_runner.py`` (``get_model``, ``NCSNRunner.train``), ``losses/dsm.py``, ``losses/__init__.py``
(``get_optimizer``), ``models/__init__.py`` (``get_sigmas``), ``models/ncsnv2.py`` (``NCSNv2``),
``datasets/__init__.py`` (``data_transform``, the CIFAR-10 transforms), ``main.py`` (``dict2namespace``),
``configs/cifar10.yml``; in ``_ncsnv2_lib.py``: ``models/layers.py``, ``models/normalization.py``, ``models/ema.py``
License: MIT (Copyright (c) 2020 Yang Song; full text in LICENSES/ermongroup-ncsnv2.txt)
Domain: score-based generative model (noise-conditional score network, annealed denoising score matching, EMA)

Kept as written: ``NCSNv2`` (InstanceNorm++, ELU, residual and dilated blocks, RefineNet blocks, output divided by
``sigmas[y]``), ``anneal_dsm_score_estimation``, ``get_sigmas``, ``get_optimizer``, ``data_transform``, the loop
body of ``train`` (``score.train()``, ``step += 1``, ``data_transform``, the loss with ``anneal_power`` 2, zero_grad,
backward, step, ``ema_helper.update(score)``) and its test loss every 100 steps on an EMA copy in eval mode; the
config's sigma_begin 50, sigma_end 0.01, num_classes 232, geometric sigmas, ema_rate 0.999, lr 1e-4, beta1 0.9,
eps 1e-8, no weight decay, no dequantization, ``rescaled`` and ``logit_transform`` False.

Deviations from the original:
- CIFAR-10 (torchvision download) is replaced by 256 synthetic 16x16 RGB images in [0, 1] made from ``seed`` (a
  coloured disk or bar on a two-colour horizontal gradient) with the config's random horizontal flip written in
  plain torch; 64 more images are the test split;
- sizes for 2 CPU cores: image_size 32 -> 16, ngf 128 -> 8, batch_size 128 -> 16; device cpu and no
  ``DataParallel`` (the EMA helper unwraps it anyway);
- ``n_iters`` / ``n_epochs`` stop rules, tensorboard, logging, checkpoints and sampling are left out; one
  ``train_step`` is one iteration of the batch loop; ``eval_fn`` is the test loss on an EMA copy in eval mode;
- the Program's model is the score network, its batch ``((perturbed_samples, labels), (noise, used_sigmas))`` for
  a fixed draw and ``loss_fn`` the rest of ``anneal_dsm_score_estimation`` on the network's scores;
- the ``bug`` switches (a ``bug`` keyword added to ``anneal_dsm_score_estimation``) select the variants in
  ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _ncsnv2_lib import EMAHelper, RefineBlock, ResidualBlock, get_act, get_normalization

N_TRAIN, N_TEST, SIZE = 256, 64, 16  # (port) synthetic data

CONFIG = {  # configs/cifar10.yml, the keys train() reads (sizes of the header)
    'training': {'batch_size': 16, 'anneal_power': 2, 'log_all_sigmas': False},
    'data': {'dataset': 'CIFAR10', 'image_size': SIZE, 'channels': 3, 'logit_transform': False,
             'uniform_dequantization': False, 'gaussian_dequantization': False, 'random_flip': True,
             'rescaled': False},
    'model': {'sigma_begin': 50, 'num_classes': 232, 'ema': True, 'ema_rate': 0.999, 'spec_norm': False,
              'sigma_dist': 'geometric', 'sigma_end': 0.01, 'normalization': 'InstanceNorm++',
              'nonlinearity': 'elu', 'ngf': 8},
    'optim': {'weight_decay': 0.000, 'optimizer': 'Adam', 'lr': 0.0001, 'beta1': 0.9, 'amsgrad': False,
              'eps': 0.00000001},
}


# ---- main.py -------------------------------------------------------------------------------------------------------

def dict2namespace(config):
    namespace = argparse.Namespace()
    for key, value in config.items():
        if isinstance(value, dict):
            new_value = dict2namespace(value)
        else:
            new_value = value
        setattr(namespace, key, new_value)
    return namespace


# ---- models/__init__.py --------------------------------------------------------------------------------------------

def get_sigmas(config):
    if config.model.sigma_dist == 'geometric':
        sigmas = torch.tensor(
            np.exp(np.linspace(np.log(config.model.sigma_begin), np.log(config.model.sigma_end),
                               config.model.num_classes))).float().to(config.device)
    elif config.model.sigma_dist == 'uniform':
        sigmas = torch.tensor(
            np.linspace(config.model.sigma_begin, config.model.sigma_end, config.model.num_classes)
        ).float().to(config.device)

    else:
        raise NotImplementedError('sigma distribution not supported')

    return sigmas


# ---- losses/__init__.py, losses/dsm.py -----------------------------------------------------------------------------

def get_optimizer(config, parameters):
    if config.optim.optimizer == 'Adam':
        return optim.Adam(parameters, lr=config.optim.lr, weight_decay=config.optim.weight_decay,
                          betas=(config.optim.beta1, 0.999), amsgrad=config.optim.amsgrad,
                          eps=config.optim.eps)
    else:
        raise NotImplementedError('Optimizer {} not understood.'.format(config.optim.optimizer))


def anneal_dsm_score_estimation(scorenet, samples, sigmas, labels=None, anneal_power=2., hook=None, bug=None):
    if labels is None:
        labels = torch.randint(0, len(sigmas), (samples.shape[0],), device=samples.device)
    used_sigmas = sigmas[labels].view(samples.shape[0], *([1] * len(samples.shape[1:])))
    noise = torch.randn_like(samples) * used_sigmas
    perturbed_samples = samples + noise
    target = - 1 / (used_sigmas ** 2) * noise
    if bug == "target_sign_flipped":
        target = 1 / (used_sigmas ** 2) * noise
    if bug == "labels_redrawn_for_model":
        labels = torch.randint(0, len(sigmas), (samples.shape[0],), device=samples.device)
    scores = scorenet(perturbed_samples, labels)
    target = target.view(target.shape[0], -1)
    scores = scores.view(scores.shape[0], -1)
    loss = 1 / 2. * ((scores - target) ** 2).sum(dim=-1) * used_sigmas.squeeze() ** anneal_power

    if hook is not None:
        hook(loss, labels)

    return loss.mean(dim=0)


# ---- datasets/__init__.py ------------------------------------------------------------------------------------------

def data_transform(config, X):
    if config.data.uniform_dequantization:
        X = X / 256. * 255. + torch.rand_like(X) / 256.
    if config.data.gaussian_dequantization:
        X = X + torch.randn_like(X) * 0.01

    if config.data.rescaled:
        X = 2 * X - 1.
    elif config.data.logit_transform:
        X = logit_transform(X)  # noqa: F821 (not taken: logit_transform is False)

    if hasattr(config, 'image_mean'):
        return X - config.image_mean.to(X.device)[None, ...]

    return X


# ---- models/ncsnv2.py ----------------------------------------------------------------------------------------------

class NCSNv2(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.logit_transform = config.data.logit_transform
        self.rescaled = config.data.rescaled
        self.norm = get_normalization(config, conditional=False)
        self.ngf = ngf = config.model.ngf
        self.num_classes = num_classes = config.model.num_classes

        self.act = act = get_act(config)
        self.register_buffer('sigmas', get_sigmas(config))
        self.config = config

        self.begin_conv = nn.Conv2d(config.data.channels, ngf, 3, stride=1, padding=1)

        self.normalizer = self.norm(ngf, self.num_classes)
        self.end_conv = nn.Conv2d(ngf, config.data.channels, 3, stride=1, padding=1)

        self.res1 = nn.ModuleList([
            ResidualBlock(self.ngf, self.ngf, resample=None, act=act,
                          normalization=self.norm),
            ResidualBlock(self.ngf, self.ngf, resample=None, act=act,
                          normalization=self.norm)]
        )

        self.res2 = nn.ModuleList([
            ResidualBlock(self.ngf, 2 * self.ngf, resample='down', act=act,
                          normalization=self.norm),
            ResidualBlock(2 * self.ngf, 2 * self.ngf, resample=None, act=act,
                          normalization=self.norm)]
        )

        self.res3 = nn.ModuleList([
            ResidualBlock(2 * self.ngf, 2 * self.ngf, resample='down', act=act,
                          normalization=self.norm, dilation=2),
            ResidualBlock(2 * self.ngf, 2 * self.ngf, resample=None, act=act,
                          normalization=self.norm, dilation=2)]
        )

        if config.data.image_size == 28:
            self.res4 = nn.ModuleList([
                ResidualBlock(2 * self.ngf, 2 * self.ngf, resample='down', act=act,
                              normalization=self.norm, adjust_padding=True, dilation=4),
                ResidualBlock(2 * self.ngf, 2 * self.ngf, resample=None, act=act,
                              normalization=self.norm, dilation=4)]
            )
        else:
            self.res4 = nn.ModuleList([
                ResidualBlock(2 * self.ngf, 2 * self.ngf, resample='down', act=act,
                              normalization=self.norm, adjust_padding=False, dilation=4),
                ResidualBlock(2 * self.ngf, 2 * self.ngf, resample=None, act=act,
                              normalization=self.norm, dilation=4)]
            )

        self.refine1 = RefineBlock([2 * self.ngf], 2 * self.ngf, act=act, start=True)
        self.refine2 = RefineBlock([2 * self.ngf, 2 * self.ngf], 2 * self.ngf, act=act)
        self.refine3 = RefineBlock([2 * self.ngf, 2 * self.ngf], self.ngf, act=act)
        self.refine4 = RefineBlock([self.ngf, self.ngf], self.ngf, act=act, end=True)

    def _compute_cond_module(self, module, x):
        for m in module:
            x = m(x)
        return x

    def forward(self, x, y):
        if not self.logit_transform and not self.rescaled:
            h = 2 * x - 1.
        else:
            h = x

        output = self.begin_conv(h)

        layer1 = self._compute_cond_module(self.res1, output)
        layer2 = self._compute_cond_module(self.res2, layer1)
        layer3 = self._compute_cond_module(self.res3, layer2)
        layer4 = self._compute_cond_module(self.res4, layer3)

        ref1 = self.refine1([layer4], layer4.shape[2:])
        ref2 = self.refine2([layer3, ref1], layer3.shape[2:])
        ref3 = self.refine3([layer2, ref2], layer2.shape[2:])
        output = self.refine4([layer1, ref3], layer1.shape[2:])

        output = self.normalizer(output)
        output = self.act(output)
        output = self.end_conv(output)

        used_sigmas = self.sigmas[y].view(x.shape[0], *([1] * len(x.shape[1:])))

        output = output / used_sigmas

        return output


# ---- (port) the data: synthetic images in place of torchvision's CIFAR-10 -----------------------------------------

def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    left, right = torch.rand(n, 3, 1, 1, generator=g) * 0.5, torch.rand(n, 3, 1, 1, generator=g) * 0.5
    x = left + (right - left) * (xx.float() / (SIZE - 1))
    colour = torch.rand(n, 3, generator=g) * 0.5 + 0.5
    centre = torch.randint(4, SIZE - 4, (n, 2), generator=g)
    for i in range(n):
        dy, dx = (yy - centre[i, 0]).abs(), (xx - centre[i, 1]).abs()
        mask = dy ** 2 + dx ** 2 < 12 if i % 2 == 0 else (dy < 2) & (dx < 5)
        x[i][:, mask] = colour[i].view(3, 1)
    return x


class ImageSet(Dataset):
    def __init__(self, images, flip):
        self.images, self.flip = images, flip

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if self.flip and torch.rand(()) < 0.5:  # transforms.RandomHorizontalFlip(p=0.5)
            x = x.flip(-1)
        return x, 0


# ---- runners/ncsn_runner.py ----------------------------------------------------------------------------------------

def get_model(config):
    if config.data.dataset == 'CIFAR10' or config.data.dataset == 'CELEBA':
        return NCSNv2(config).to(config.device)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    config = dict2namespace(CONFIG)
    config.device = torch.device('cpu')
    dataset = ImageSet(make_images(N_TRAIN, seed), flip=config.data.random_flip)
    test_dataset = ImageSet(make_images(N_TEST, seed + 1000), flip=False)
    dataloader = DataLoader(dataset, batch_size=config.training.batch_size, shuffle=True, num_workers=0,
                            generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(test_dataset, batch_size=config.training.batch_size, shuffle=True, num_workers=0,
                             drop_last=True, generator=torch.Generator().manual_seed(seed + 1))
    config.input_dim = config.data.image_size ** 2 * config.data.channels

    score = get_model(config)
    optimizer = get_optimizer(config, score.parameters())
    if config.model.ema:
        ema_helper = EMAHelper(mu=config.model.ema_rate)
        ema_helper.register(score)
    sigmas = get_sigmas(config)
    hook = None
    state = {"it": iter(dataloader), "test_iter": iter(test_loader), "step": 0}

    def train_step():  # one iteration of train()'s batch loop
        try:
            X, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(dataloader)
            X, y = next(state["it"])
        score.train()
        state["step"] += 1

        X = X.to(config.device)
        X = data_transform(config, X)

        loss = anneal_dsm_score_estimation(score, X, sigmas, None,
                                           config.training.anneal_power,
                                           hook, bug=bug)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()

        if config.model.ema:
            ema_helper.update(score)
        return loss.detach()

    def eval_fn(model, batch):  # the test loss of train(), every 100 steps there
        test_score = ema_helper.ema_copy(model) if config.model.ema else model
        test_score.eval()
        try:
            test_X, test_y = next(state["test_iter"])
        except StopIteration:
            state["test_iter"] = iter(test_loader)
            test_X, test_y = next(state["test_iter"])
        test_X = data_transform(config, test_X.to(config.device))
        with torch.no_grad():
            test_dsm_loss = anneal_dsm_score_estimation(test_score, test_X, sigmas, None,
                                                        config.training.anneal_power, hook=None, bug=bug)
        return float(test_dsm_loss)

    g = torch.Generator().manual_seed(seed)
    X = data_transform(config, next(iter(DataLoader(test_dataset, batch_size=config.training.batch_size)))[0])
    labels = torch.randint(0, len(sigmas), (X.shape[0],), generator=g)
    used_sigmas = sigmas[labels].view(X.shape[0], 1, 1, 1)
    noise = torch.randn(X.shape, generator=g) * used_sigmas

    def loss_fn(scores, targets):  # the rest of anneal_dsm_score_estimation on the network's scores
        noise, used_sigmas = targets
        target = (- 1 / (used_sigmas ** 2) * noise).view(noise.shape[0], -1)
        if bug == "target_sign_flipped":
            target = -target
        scores = scores.view(scores.shape[0], -1)
        loss = 1 / 2. * ((scores - target) ** 2).sum(dim=-1) * used_sigmas.squeeze() ** config.training.anneal_power
        return loss.mean(dim=0)

    model_labels = labels
    if bug == "labels_redrawn_for_model":
        model_labels = torch.randint(0, len(sigmas), (X.shape[0],), generator=g)
    return Program(name="ncsnv2_cifar", model=score, batch=((X + noise, model_labels), (noise, used_sigmas)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the denoising target written +noise / sigma^2; the network learns to point away from the
    # data.
    Bug("target_sign_flipped", functools.partial(_build, bug="target_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the noise-level labels drawn a second time for the network call, so the score is divided by (and
    # conditioned on) a noise level other than the one that perturbed the image.
    Bug("labels_redrawn_for_model", functools.partial(_build, bug="labels_redrawn_for_model"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() moved after backward(); every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
