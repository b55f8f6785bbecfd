# ruff: noqa: F841, UP039
"""BYOL (an online encoder + predictor regressing an EMA target encoder's projections of another view) from
byol-pytorch, trained by the README's loop.

Source: https://github.com/lucidrains/byol-pytorch, commit 0c3ab5409181852f8495ef924dce9186f94d9126 (release 0.8.2),
files ``byol_pytorch/byol_pytorch.py`` (copied whole below) and ``README.md`` (the usage loop). License: MIT
(Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-byol-pytorch.txt).

Kept as written: all of byol_pytorch.py (NetWrapper with its forward hook on the hidden layer, the lazily built
projector, the predictor MLP, the target encoder made by deepcopy with requires_grad off, EMA 0.99, the symmetric
``2 - 2 cos`` loss, the default augmentation); the README loop: ``BYOL(resnet, image_size, hidden_layer='avgpool')``,
``Adam(learner.parameters(), lr=3e-4)``, then per step ``loss = learner(images)``, zero_grad, backward, step,
``learner.update_moving_average()``.

Deviations:
- torchvision is not installed: ``models.resnet50(pretrained=True)`` becomes the written-out ResNet-18 of
  ``_tv_resnet.py`` (same module names, randomly initialized, channel widths / 8), and the transforms of the default
  augmentation (``T.ColorJitter``, ``T.RandomGrayscale``, ``T.RandomHorizontalFlip``, ``T.GaussianBlur``,
  ``T.RandomResizedCrop``, ``T.Normalize``) are written out below as modules on image batches, drawing from the
  global torch RNG and applying one draw to the whole batch as torchvision does on a batched tensor (ColorJitter's hue
  shift is a rotation in YIQ space instead of HSV).
- sizes for 2 CPU cores: image_size 256 -> 32, projection_size 256 -> 64, projection_hidden_size 4096 -> 256, 8
  images per step (README: 20).
- ``sample_unlabelled_images()`` (``torch.randn`` in the README) draws 16 of 32 synthetic 32x32 images made from the
  seed (a coloured square, disk or stripe pattern at a random place on a noisy background).
- ``build(seed)`` seeds torch and Python's ``random`` (RandomApply draws from it). The module's imports are
  regrouped at the top (the same names).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys
import types
from functools import wraps

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet as models
from _api import Bug, Program


# ---------------------------------------------------------------- torchvision.transforms, written out on batches
def _gray(x):
    return (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def _uniform(lo, hi):
    return float(torch.empty(1).uniform_(lo, hi))


class _ColorJitter(nn.Module):
    def __init__(self, brightness, contrast, saturation, hue):
        super().__init__()
        self.b, self.c, self.s, self.h = brightness, contrast, saturation, hue

    def forward(self, x):
        for op in torch.randperm(4).tolist():
            if op == 0:
                x = (x * _uniform(1 - self.b, 1 + self.b)).clamp(0, 1)
            elif op == 1:
                mean = _gray(x).mean(dim=(-3, -2, -1), keepdim=True)
                x = ((x - mean) * _uniform(1 - self.c, 1 + self.c) + mean).clamp(0, 1)
            elif op == 2:
                x = ((x - _gray(x)) * _uniform(1 - self.s, 1 + self.s) + _gray(x)).clamp(0, 1)
            else:
                theta = 2 * math.pi * _uniform(-self.h, self.h)
                yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
                rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(theta), -math.sin(theta)],
                                    [0.0, math.sin(theta), math.cos(theta)]])
                x = torch.einsum("ij,bjhw->bihw", torch.linalg.inv(yiq) @ rot @ yiq, x).clamp(0, 1)
        return x


class _RandomGrayscale(nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _gray(x).expand_as(x).contiguous() if torch.rand(1) < self.p else x


class _RandomHorizontalFlip(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return x.flip(-1) if torch.rand(1) < self.p else x


class _GaussianBlur(nn.Module):
    def __init__(self, kernel_size, sigma):
        super().__init__()
        self.k, self.sigma = kernel_size[0], sigma

    def forward(self, x):
        sigma = _uniform(*self.sigma)
        r = self.k // 2
        w = torch.exp(-torch.arange(-r, r + 1, dtype=x.dtype) ** 2 / (2 * sigma ** 2))
        w = w / w.sum()
        c = x.shape[1]
        x = F.pad(x, (r, r, r, r), mode="reflect")
        x = F.conv2d(x, w.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
        return F.conv2d(x, w.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)


class _RandomResizedCrop(nn.Module):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        super().__init__()
        self.size, self.scale, self.ratio = size, scale, ratio

    def forward(self, x):
        h, w = x.shape[-2:]
        top, left, ch, cw = 0, 0, h, w
        for _ in range(10):
            area = h * w * _uniform(*self.scale)
            aspect = math.exp(_uniform(math.log(self.ratio[0]), math.log(self.ratio[1])))
            tw, th = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < tw <= w and 0 < th <= h:
                top = int(torch.randint(0, h - th + 1, size=(1,)))
                left = int(torch.randint(0, w - tw + 1, size=(1,)))
                ch, cw = th, tw
                break
        crop = x[..., top:top + ch, left:left + cw]
        return F.interpolate(crop, size=self.size, mode="bilinear", align_corners=False, antialias=True)


class _Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, x):
        return (x - self.mean.view(-1, 1, 1)) / self.std.view(-1, 1, 1)


T = types.SimpleNamespace(ColorJitter=_ColorJitter, RandomGrayscale=_RandomGrayscale,
                          RandomHorizontalFlip=_RandomHorizontalFlip, GaussianBlur=_GaussianBlur,
                          RandomResizedCrop=_RandomResizedCrop, Normalize=_Normalize)


# ---------------------------------------------------------------- byol_pytorch/byol_pytorch.py (0.8.2), as written
# helper functions

def default(val, def_val):
    return def_val if val is None else val

def flatten(t):
    return t.reshape(t.shape[0], -1)

def singleton(cache_key):
    def inner_fn(fn):
        @wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance

            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance
        return wrapper
    return inner_fn

def get_module_device(module):
    return next(module.parameters()).device

def set_requires_grad(model, val):
    for p in model.parameters():
        p.requires_grad = val

def MaybeSyncBatchnorm(is_distributed = None):
    is_distributed = default(is_distributed, dist.is_initialized() and dist.get_world_size() > 1)
    return nn.SyncBatchNorm if is_distributed else nn.BatchNorm1d

# loss fn

def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)

# augmentation utils

class RandomApply(nn.Module):
    def __init__(self, fn, p):
        super().__init__()
        self.fn = fn
        self.p = p
    def forward(self, x):
        if random.random() > self.p:
            return x
        return self.fn(x)

# exponential moving average

class EMA():
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

def update_moving_average(ema_updater, ma_model, current_model):
    for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
        old_weight, up_weight = ma_params.data, current_params.data
        ma_params.data = ema_updater.update_average(old_weight, up_weight)

# MLP class for projector and predictor

def MLP(dim, projection_size, hidden_size=4096, sync_batchnorm=None):
    return nn.Sequential(
        nn.Linear(dim, hidden_size),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace=True),
        nn.Linear(hidden_size, projection_size)
    )

def SimSiamMLP(dim, projection_size, hidden_size=4096, sync_batchnorm=None):
    return nn.Sequential(
        nn.Linear(dim, hidden_size, bias=False),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace=True),
        nn.Linear(hidden_size, hidden_size, bias=False),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace=True),
        nn.Linear(hidden_size, projection_size, bias=False),
        MaybeSyncBatchnorm(sync_batchnorm)(projection_size, affine=False)
    )

# a wrapper class for the base neural network
# will manage the interception of the hidden layer output
# and pipe it into the projecter and predictor nets

class NetWrapper(nn.Module):
    def __init__(self, net, projection_size, projection_hidden_size, layer = -2, use_simsiam_mlp = False, sync_batchnorm = None):
        super().__init__()
        self.net = net
        self.layer = layer

        self.projector = None
        self.projection_size = projection_size
        self.projection_hidden_size = projection_hidden_size

        self.use_simsiam_mlp = use_simsiam_mlp
        self.sync_batchnorm = sync_batchnorm

        self.hidden = {}
        self.hook_registered = False

    def _find_layer(self):
        if type(self.layer) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(self.layer, None)
        elif type(self.layer) == int:
            children = [*self.net.children()]
            return children[self.layer]
        return None

    def _hook(self, _, input, output):
        device = input[0].device
        self.hidden[device] = flatten(output)

    def _register_hook(self):
        layer = self._find_layer()
        assert layer is not None, f'hidden layer ({self.layer}) not found'
        handle = layer.register_forward_hook(self._hook)
        self.hook_registered = True

    @singleton('projector')
    def _get_projector(self, hidden):
        _, dim = hidden.shape
        create_mlp_fn = MLP if not self.use_simsiam_mlp else SimSiamMLP
        projector = create_mlp_fn(dim, self.projection_size, self.projection_hidden_size, sync_batchnorm = self.sync_batchnorm)
        return projector.to(hidden)

    def get_representation(self, x):
        if self.layer == -1:
            return self.net(x)

        if not self.hook_registered:
            self._register_hook()

        self.hidden.clear()
        _ = self.net(x)
        hidden = self.hidden[x.device]
        self.hidden.clear()

        assert hidden is not None, f'hidden layer {self.layer} never emitted an output'
        return hidden

    def forward(self, x, return_projection = True):
        representation = self.get_representation(x)

        if not return_projection:
            return representation

        projector = self._get_projector(representation)
        projection = projector(representation)
        return projection, representation

# main class

class BYOL(nn.Module):
    def __init__(
        self,
        net,
        image_size,
        hidden_layer = -2,
        projection_size = 256,
        projection_hidden_size = 4096,
        augment_fn = None,
        augment_fn2 = None,
        moving_average_decay = 0.99,
        use_momentum = True,
        sync_batchnorm = None
    ):
        super().__init__()
        self.net = net

        # default SimCLR augmentation

        DEFAULT_AUG = torch.nn.Sequential(
            RandomApply(
                T.ColorJitter(0.8, 0.8, 0.8, 0.2),
                p = 0.3
            ),
            T.RandomGrayscale(p=0.2),
            T.RandomHorizontalFlip(),
            RandomApply(
                T.GaussianBlur((3, 3), (1.0, 2.0)),
                p = 0.2
            ),
            T.RandomResizedCrop((image_size, image_size)),
            T.Normalize(
                mean=torch.tensor([0.485, 0.456, 0.406]),
                std=torch.tensor([0.229, 0.224, 0.225])),
        )

        self.augment1 = default(augment_fn, DEFAULT_AUG)
        self.augment2 = default(augment_fn2, self.augment1)

        self.online_encoder = NetWrapper(
            net,
            projection_size,
            projection_hidden_size,
            layer = hidden_layer,
            use_simsiam_mlp = not use_momentum,
            sync_batchnorm = sync_batchnorm
        )

        self.use_momentum = use_momentum
        self.target_encoder = None
        self.target_ema_updater = EMA(moving_average_decay)

        self.online_predictor = MLP(projection_size, projection_size, projection_hidden_size)

        # get device of network and make wrapper same device
        device = get_module_device(net)
        self.to(device)

        # send a mock image tensor to instantiate singleton parameters
        self.forward(torch.randn(2, 3, image_size, image_size, device=device))

    @singleton('target_encoder')
    def _get_target_encoder(self):
        target_encoder = copy.deepcopy(self.online_encoder)
        set_requires_grad(target_encoder, False)
        return target_encoder

    def reset_moving_average(self):
        del self.target_encoder
        self.target_encoder = None

    def update_moving_average(self):
        assert self.use_momentum, 'you do not need to update the moving average, since you have turned off momentum for the target encoder'
        assert self.target_encoder is not None, 'target encoder has not been created yet'
        update_moving_average(self.target_ema_updater, self.target_encoder, self.online_encoder)

    def forward(
        self,
        x,
        return_embedding = False,
        return_projection = True
    ):
        assert not (self.training and x.shape[0] == 1), 'you must have greater than 1 sample when training, due to the batchnorm in the projection layer'

        if return_embedding:
            return self.online_encoder(x, return_projection = return_projection)

        image_one, image_two = self.augment1(x), self.augment2(x)

        images = torch.cat((image_one, image_two), dim = 0)

        online_projections, _ = self.online_encoder(images)
        online_predictions = self.online_predictor(online_projections)

        online_pred_one, online_pred_two = online_predictions.chunk(2, dim = 0)

        with torch.no_grad():
            target_encoder = self._get_target_encoder() if self.use_momentum else self.online_encoder

            target_projections, _ = target_encoder(images)
            target_projections = target_projections.detach()

            target_proj_one, target_proj_two = target_projections.chunk(2, dim = 0)

        loss_one = loss_fn(online_pred_one, target_proj_two.detach())
        loss_two = loss_fn(online_pred_two, target_proj_one.detach())

        loss = loss_one + loss_two
        return loss.mean()


# ---------------------------------------------------------------- README usage loop
N_IMAGES, IMAGE_SIZE, BATCH = 32, 32, 8


def make_images(seed):
    """32 images of 4 kinds (square, disk, horizontal stripes, vertical stripes) in random colours and places."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
    images = []
    for i in range(N_IMAGES):
        kind = i % 4
        bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        color = torch.rand(3, 1, 1, generator=g)
        cy, cx = torch.randint(8, IMAGE_SIZE - 8, (2,), generator=g).tolist()
        if kind == 0:
            mask = ((yy - cy).abs() < 6) & ((xx - cx).abs() < 6)
        elif kind == 1:
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 < 49
        elif kind == 2:
            mask = (yy // 4) % 2 == 0
        else:
            mask = (xx // 4) % 2 == 0
        images.append(torch.where(mask, color, bg).clamp(0, 1))
    return torch.stack(images)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    pool = make_images(seed)
    g = torch.Generator().manual_seed(seed)

    def sample_unlabelled_images():
        return pool[torch.randperm(N_IMAGES, generator=g)[:BATCH]]

    resnet = models.resnet18(pretrained=False, width=8)

    learner = BYOL(
        resnet,
        image_size = IMAGE_SIZE,
        hidden_layer = 'avgpool',
        projection_size = 64,
        projection_hidden_size = 256,
    )

    if bug == "optimizer_over_backbone_only":
        opt = torch.optim.Adam(resnet.parameters(), lr=3e-4)
    else:
        opt = torch.optim.Adam(learner.parameters(), lr=3e-4)

    def train_step():
        images = sample_unlabelled_images()
        loss = learner(images)
        if bug == "zero_grad_before_step":
            loss.backward()
            opt.zero_grad()
            opt.step()
        else:
            opt.zero_grad()
            loss.backward()
            opt.step()
        learner.update_moving_average() # update moving average of target encoder
        return loss

    return Program(name="byol_resnet", model=learner, batch=(sample_unlabelled_images(),),
                   loss_fn=lambda loss, _targets: loss, optimizer=opt, train_step=train_step,
                   frozen=("target_encoder.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    # gradients cleared between backward and step (reported for this repository's trainer.py:
    # https://github.com/lucidrains/byol-pytorch/issues/93, fixed in 0c3ab54): Adam steps on zero gradients.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe",
        ("net.conv1.weight",)),
    # the optimizer is built over the ResNet only (the network the README saves), so the projector and the
    # predictor BYOL adds never train (classic).
    Bug("optimizer_over_backbone_only", functools.partial(_build, bug="optimizer_over_backbone_only"), "four_structures",
        ("online_encoder.projector",)),
]
