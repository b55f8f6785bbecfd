# ruff: noqa: UP008, UP032, PLR0402, C408
"""Glow (Kingma & Dhariwal, 2018) from Christopher Chute's PyTorch implementation: a multi-scale normalizing flow
on dequantized logits of images (``_pre_process``: uniform dequantization, bounds 0.9, logit, its log-determinant),
squeeze, ``num_levels`` levels of ``num_steps`` flow steps (ActNorm with data-dependent initialization, invertible
1x1 convolution with a ``slogdet`` log-determinant, affine coupling with ``scale * tanh(s)`` from a BatchNorm conv
net whose last convolution starts at zero), half of the channels split off after each level; trained by maximum
likelihood (``NLLLoss``: standard-normal prior, ``- log(k) * D`` for k = 256 levels, minus the summed
log-determinants), Adam and a linear lr warm-up ``LambdaLR`` stepped with the number of images seen.

Source: https://github.com/chrischute/glow
Commit: faffa5ba02f878902a211db76c0bd4ea074b39f7
Files (the model and util pieces without a bug switch are in ``_chrischuteglow_lib.py``): ``train.py`` (``main``, ``train``, ``test``, the argparse defaults), ``models/glow/glow.py`` (``Glow``,
``_Glow``, ``_FlowStep``, ``squeeze``), ``models/glow/act_norm.py``, ``models/glow/coupling.py``,
``models/glow/inv_conv.py``, ``util/optim_util.py`` (``NLLLoss``, ``clip_grad_norm``, ``bits_per_dim``),
``util/array_util.py`` (``mean_dim``)
License: MIT (Copyright (c) 2019 Christopher Chute; full text in LICENSES/chrischute-glow.txt)
Domain: generative model, normalizing flow (Glow: actnorm, invertible 1x1 convolutions, affine coupling, multi-scale)

Kept as written: the model files above (the orthogonal ``np.linalg.qr`` initialization of ``InvConv``, the zero
initialization of the coupling net's last convolution, the ``[0, 1]`` range check of ``Glow.forward``), ``NLLLoss``
(k=256), ``train``'s loop body (zero_grad, ``net(x, reverse=False)``, loss, backward, ``clip_grad_norm`` when
``max_grad_norm > 0`` (the default -1 skips it), ``optimizer.step()``, ``scheduler.step(global_step)``, ``global_step
+= x.size(0)``), Adam at the default lr 1e-3 and ``LambdaLR(lambda s: min(1., s / args.warm_up))``, the train
transform's random horizontal flip, ``test``'s evaluation in ``net.eval()`` under ``no_grad``.

Deviations from the original:
- CIFAR-10 (torchvision download) is replaced by 256 synthetic 16x16 RGB images made from ``seed``: a smooth
  two-colour vertical or horizontal gradient with a bright square at a random place, quantized to 256 levels as
  ``ToTensor`` gives (values k/255); the flip is written in plain torch (torchvision is not here); 64 more images
  of the same rule are the test split;
- sizes for 2 CPU cores: images 32x32 -> 16x16, num_channels 512 -> 16, num_steps 32 -> 4 (num_levels 3 kept),
  batch_size 64 -> 16; warm_up 500000 images (10 CIFAR-10 epochs) -> 2560 images (10 epochs of the 256 here);
  device cpu (the DataParallel and cudnn lines are not taken);
- the script's module-global ``global_step`` is kept in the build's state (one per build); one ``train_step`` is
  one iteration of ``train``'s batch loop (tqdm, the loss meter and the printed bits per dimension are left out); ``eval_fn`` is ``test`` on the
  test split returning the mean NLL instead of saving checkpoints and sample grids;
- the Program's model is the Glow net, its batch ``(x,)`` a fixed test batch, ``loss_fn`` ``NLLLoss`` on the net's
  ``(z, sldj)``; the build sets a ``bug`` attribute on ``NLLLoss`` and each ``Coupling`` for the variants;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.optim.lr_scheduler as sched
import torch.utils.data as data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _chrischuteglow_lib import NN, ActNorm, InvConv, clip_grad_norm, squeeze

N_TRAIN, N_TEST, SIZE = 256, 64, 16  # (port) synthetic data


# ---- util/optim_util.py --------------------------------------------------------------------------------------------

class NLLLoss(nn.Module):
    def __init__(self, k=256):
        super(NLLLoss, self).__init__()
        self.k = k

    def forward(self, z, sldj):
        prior_ll = -0.5 * (z ** 2 + np.log(2 * np.pi))
        prior_ll = prior_ll.flatten(1).sum(-1) \
            - np.log(self.k) * np.prod(z.size()[1:])
        ll = prior_ll + sldj
        if getattr(self, "bug", None) == "sldj_subtracted":  # (port) set at build
            ll = prior_ll - sldj  # sign slip: the log-determinant subtracted
        nll = -ll.mean()

        return nll


# ---- models/glow/coupling.py ---------------------------------------------------------------------------------------

class Coupling(nn.Module):
    def __init__(self, in_channels, mid_channels):
        super(Coupling, self).__init__()
        self.nn = NN(in_channels, mid_channels, 2 * in_channels)
        self.scale = nn.Parameter(torch.ones(in_channels, 1, 1))

    def forward(self, x, ldj, reverse=False):
        x_change, x_id = x.chunk(2, dim=1)

        st = self.nn(x_id)
        if getattr(self, "bug", None) == "coupling_conditioned_on_changed_half":  # (port) set at build
            st = self.nn(x_change)  # the net reads the half it transforms: the Jacobian is no longer triangular
        s, t = st[:, 0::2, ...], st[:, 1::2, ...]
        s = self.scale * torch.tanh(s)

        # Scale and translate
        if reverse:
            x_change = x_change * s.mul(-1).exp() - t
            ldj = ldj - s.flatten(1).sum(-1)
        else:
            x_change = (x_change + t) * s.exp()
            ldj = ldj + s.flatten(1).sum(-1)

        x = torch.cat((x_change, x_id), dim=1)

        return x, ldj


# ---- models/glow/glow.py -------------------------------------------------------------------------------------------

class Glow(nn.Module):
    def __init__(self, num_channels, num_levels, num_steps):
        super(Glow, self).__init__()

        # Use bounds to rescale images before converting to logits, not learned
        self.register_buffer('bounds', torch.tensor([0.9], dtype=torch.float32))
        self.flows = _Glow(in_channels=4 * 3,  # RGB image after squeeze
                           mid_channels=num_channels,
                           num_levels=num_levels,
                           num_steps=num_steps)

    def forward(self, x, reverse=False):
        if reverse:
            sldj = torch.zeros(x.size(0), device=x.device)
        else:
            # Expect inputs in [0, 1]
            if x.min() < 0 or x.max() > 1:
                raise ValueError('Expected x in [0, 1], got min/max {}/{}'
                                 .format(x.min(), x.max()))

            # De-quantize and convert to logits
            x, sldj = self._pre_process(x)

        x = squeeze(x)
        x, sldj = self.flows(x, sldj, reverse)
        x = squeeze(x, reverse=True)

        return x, sldj

    def _pre_process(self, x):
        y = (x * 255. + torch.rand_like(x)) / 256.
        y = (2 * y - 1) * self.bounds
        y = (y + 1) / 2
        y = y.log() - (1. - y).log()

        # Save log-determinant of Jacobian of initial transform
        ldj = F.softplus(y) + F.softplus(-y) \
            - F.softplus((1. - self.bounds).log() - self.bounds.log())
        sldj = ldj.flatten(1).sum(-1)

        return y, sldj


class _Glow(nn.Module):
    def __init__(self, in_channels, mid_channels, num_levels, num_steps):
        super(_Glow, self).__init__()
        self.steps = nn.ModuleList([_FlowStep(in_channels=in_channels,
                                              mid_channels=mid_channels)
                                    for _ in range(num_steps)])

        if num_levels > 1:
            self.next = _Glow(in_channels=2 * in_channels,
                              mid_channels=mid_channels,
                              num_levels=num_levels - 1,
                              num_steps=num_steps)
        else:
            self.next = None

    def forward(self, x, sldj, reverse=False):
        if not reverse:
            for step in self.steps:
                x, sldj = step(x, sldj, reverse)

        if self.next is not None:
            x = squeeze(x)
            x, x_split = x.chunk(2, dim=1)
            x, sldj = self.next(x, sldj, reverse)
            x = torch.cat((x, x_split), dim=1)
            x = squeeze(x, reverse=True)

        if reverse:
            for step in reversed(self.steps):
                x, sldj = step(x, sldj, reverse)

        return x, sldj


class _FlowStep(nn.Module):
    def __init__(self, in_channels, mid_channels):
        super(_FlowStep, self).__init__()

        # Activation normalization, invertible 1x1 convolution, affine coupling
        self.norm = ActNorm(in_channels, return_ldj=True)
        self.conv = InvConv(in_channels)
        self.coup = Coupling(in_channels // 2, mid_channels)

    def forward(self, x, sldj=None, reverse=False):
        if reverse:
            x, sldj = self.coup(x, sldj, reverse)
            x, sldj = self.conv(x, sldj, reverse)
            x, sldj = self.norm(x, sldj, reverse)
        else:
            x, sldj = self.norm(x, sldj, reverse)
            x, sldj = self.conv(x, sldj, reverse)
            x, sldj = self.coup(x, sldj, reverse)

        return x, sldj


# ---- (port) the data: synthetic images in place of torchvision's CIFAR-10 -----------------------------------------

def synthetic_images(n, seed):
    """Smooth two-colour gradients (vertical or horizontal) with a bright 4x4 square, quantized to k/255."""
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0, 1, SIZE)
    c0, c1 = torch.rand(n, 3, 1, 1, generator=g) * 0.6, torch.rand(n, 3, 1, 1, generator=g) * 0.6
    vertical = torch.rand(n, generator=g) < 0.5
    t = torch.where(vertical.view(n, 1, 1, 1), ramp.view(1, 1, SIZE, 1), ramp.view(1, 1, 1, SIZE))
    x = c0 + (c1 - c0) * t
    pos = torch.randint(0, SIZE - 4, (n, 2), generator=g)
    for i in range(n):
        r, c = pos[i].tolist()
        x[i, :, r:r + 4, c:c + 4] = 0.95
    return (x.clamp(0, 1) * 255).round() / 255


class ImageSet(data.Dataset):
    def __init__(self, images, flip):
        self.images, self.flip = images, flip

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if self.flip and torch.rand(()) < 0.5:  # transforms.RandomHorizontalFlip()
            x = x.flip(-1)
        return x, 0


# ---- train.py ------------------------------------------------------------------------------------------------------

ARGS = dict(batch_size=16, lr=1e-3, max_grad_norm=-1., num_channels=16, num_levels=3, num_steps=4,
            warm_up=10 * N_TRAIN)  # (port) sizes; the script's defaults: 64, 1e-3, -1., 512, 3, 32, 500000


def test(net, testloader, device, loss_fn, bug=None):
    net.eval()
    if bug == "test_in_train_mode":
        net.train()  # the evaluation left in train mode: batch statistics of the test batch
    loss_sum, count = 0., 0
    with torch.no_grad():
        for x, _ in testloader:
            x = x.to(device)
            z, sldj = net(x, reverse=False)
            loss = loss_fn(z, sldj)
            loss_sum, count = loss_sum + loss.item() * x.size(0), count + x.size(0)
    return loss_sum / count


def _build(seed, bug=None):
    device = 'cpu'
    np.random.seed(seed)
    torch.manual_seed(seed)

    trainset = ImageSet(synthetic_images(N_TRAIN, seed), flip=True)
    trainloader = data.DataLoader(trainset, batch_size=ARGS['batch_size'], shuffle=True, num_workers=0,
                                  generator=torch.Generator().manual_seed(seed))
    testset = ImageSet(synthetic_images(N_TEST, seed + 1000), flip=False)
    testloader = data.DataLoader(testset, batch_size=ARGS['batch_size'], shuffle=False, num_workers=0)

    net = Glow(num_channels=ARGS['num_channels'], num_levels=ARGS['num_levels'], num_steps=ARGS['num_steps'])
    net = net.to(device)

    loss_fn = NLLLoss().to(device)
    loss_fn.bug = bug  # (port) the variant
    for m in net.modules():
        if isinstance(m, Coupling):
            m.bug = bug  # (port) the variant
    optimizer = optim.Adam(net.parameters(), lr=ARGS['lr'])
    scheduler = sched.LambdaLR(optimizer, lambda s: min(1., s / ARGS['warm_up']))
    state = {"it": iter(trainloader), "global_step": 0}

    def train_step():  # one iteration of train()'s batch loop
        try:
            x, _ = next(state["it"])
        except StopIteration:  # the next epoch
            net.train()
            state["it"] = iter(trainloader)
            x, _ = next(state["it"])
        net.train()
        x = x.to(device)
        optimizer.zero_grad()
        z, sldj = net(x, reverse=False)
        loss = loss_fn(z, sldj)
        loss.backward()
        if ARGS['max_grad_norm'] > 0:
            clip_grad_norm(optimizer, ARGS['max_grad_norm'])
        optimizer.step()
        scheduler.step(state["global_step"])
        state["global_step"] += x.size(0)
        return loss.detach()

    def program_loss(outputs, _targets):  # loss_fn on the net's (z, sldj)
        z, sldj = outputs
        return loss_fn(z, sldj)

    def eval_fn(model, batch):
        was_training = model.training
        out = test(model, testloader, device, loss_fn, bug=bug)
        model.train(was_training)
        return out

    batch = (next(iter(testloader))[0],)
    return Program(name="chrischuteglow_cifar", model=net, batch=batch, loss_fn=program_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the flow's summed log-determinant subtracted from the prior log-likelihood instead of added;
    # the loss rewards contracting the data.
    Bug("sldj_subtracted", functools.partial(_build, bug="sldj_subtracted"), "learning_ledger", ("OBJECTIVE",)),
    # classic coupling slip: the scale/translation net reads the half it transforms (x_change) instead of the half
    # passed through (x_id); the Jacobian is no longer triangular, so the summed s is not its log-determinant and the
    # flow is not invertible: the loss is no longer the data's negative log-likelihood.
    Bug("coupling_conditioned_on_changed_half", functools.partial(_build, bug="coupling_conditioned_on_changed_half"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: test() without net.eval(); BatchNorm normalizes the test batch by its own statistics (and updates the
    # running ones) while evaluating.
    Bug("test_in_train_mode", functools.partial(_build, bug="test_in_train_mode"), "six_claims", ("EVALUATION",)),
]
