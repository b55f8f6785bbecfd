# ruff: noqa: B010, UP039
"""lucidrains/pixel-level-contrastive-learning's helpers, moved out of ``pixelcl_pixpro.py`` to keep the port
readable: the helper functions, ``RandomApply``, ``EMA``, ``update_moving_average``, ``loss_fn``, ``MLP``,
``ConvMLP``, ``PPM`` and ``NetWrapper`` copied as written. kornia is not available here: the augmentations that
``PixelCL``'s default augmentation takes from it are written out at the end (see below).

Source: https://github.com/lucidrains/pixel-level-contrastive-learning
Commit: 0c60e93df73b0ec351f2104839c4d4748f3d38a2
Files: ``pixel_level_contrastive_learning/pixel_level_contrastive_learning.py``
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-pixel-level-contrastive-learning.txt)

Written here, not copied (kornia 0.x's semantics, simplified): ``ColorJitter`` (per image, each of brightness,
contrast, saturation drawn from ``[max(0, 1 - v), 1 + v]`` and hue from ``[-h, h]`` turns of the chroma plane,
applied in that fixed order), ``RandomGrayscale`` (per image with probability p, ITU-R 601 luma),
``GaussianBlur2d`` (separable, reflect padding), ``RandomSolarize`` (per image with probability p: threshold 0.5
+- 0.1 and an addition of +- 0.1, as kornia's defaults) and ``Normalize``.
"""

import random
from functools import wraps
from math import floor

import torch
import torch.nn.functional as F
from torch import einsum, nn

# helper functions

def identity(t):
    return t

def default(val, def_val):
    return def_val if val is None else val

def rand_true(prob):
    return random.random() < prob

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

def cutout_coordinates(image, ratio_range = (0.6, 0.8)):
    _, _, orig_h, orig_w = image.shape

    ratio_lo, ratio_hi = ratio_range
    random_ratio = ratio_lo + random.random() * (ratio_hi - ratio_lo)
    w, h = floor(random_ratio * orig_w), floor(random_ratio * orig_h)
    coor_x = floor((orig_w - w) * random.random())
    coor_y = floor((orig_h - h) * random.random())
    return ((coor_y, coor_y + h), (coor_x, coor_x + w)), random_ratio

def cutout_and_resize(image, coordinates, output_size = None, mode = 'nearest'):
    shape = image.shape
    output_size = default(output_size, shape[2:])
    (y0, y1), (x0, x1) = coordinates
    cutout_image = image[:, :, y0:y1, x0:x1]
    return F.interpolate(cutout_image, size = output_size, mode = mode)

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

# loss fn

def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)

# classes

class MLP(nn.Module):
    def __init__(self, chan, chan_out = 256, inner_dim = 2048):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(chan, inner_dim),
            nn.BatchNorm1d(inner_dim),
            nn.ReLU(),
            nn.Linear(inner_dim, chan_out)
        )

    def forward(self, x):
        return self.net(x)

class ConvMLP(nn.Module):
    def __init__(self, chan, chan_out = 256, inner_dim = 2048):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(chan, inner_dim, 1),
            nn.BatchNorm2d(inner_dim),
            nn.ReLU(),
            nn.Conv2d(inner_dim, chan_out, 1)
        )

    def forward(self, x):
        return self.net(x)

class PPM(nn.Module):
    def __init__(
        self,
        *,
        chan,
        num_layers = 1,
        gamma = 2):
        super().__init__()
        self.gamma = gamma

        if num_layers == 0:
            self.transform_net = nn.Identity()
        elif num_layers == 1:
            self.transform_net = nn.Conv2d(chan, chan, 1)
        elif num_layers == 2:
            self.transform_net = nn.Sequential(
                nn.Conv2d(chan, chan, 1),
                nn.BatchNorm2d(chan),
                nn.ReLU(),
                nn.Conv2d(chan, chan, 1)
            )
        else:
            raise ValueError('num_layers must be one of 0, 1, or 2')

    def forward(self, x):
        xi = x[:, :, :, :, None, None]
        xj = x[:, :, None, None, :, :]
        similarity = F.relu(F.cosine_similarity(xi, xj, dim = 1)) ** self.gamma

        transform_out = self.transform_net(x)
        out = einsum('b x y h w, b c h w -> b c x y', similarity, transform_out)
        return out

# a wrapper class for the base neural network
# will manage the interception of the hidden layer output
# and pipe it into the projecter and predictor nets

class NetWrapper(nn.Module):
    def __init__(
        self,
        *,
        net,
        projection_size,
        projection_hidden_size,
        layer_pixel = -2,
        layer_instance = -2
    ):
        super().__init__()
        self.net = net
        self.layer_pixel = layer_pixel
        self.layer_instance = layer_instance

        self.pixel_projector = None
        self.instance_projector = None

        self.projection_size = projection_size
        self.projection_hidden_size = projection_hidden_size

        self.hidden_pixel = None
        self.hidden_instance = None
        self.hook_registered = False

    def _find_layer(self, layer_id):
        if type(layer_id) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(layer_id, None)
        elif type(layer_id) == int:
            children = [*self.net.children()]
            return children[layer_id]
        return None

    def _hook_pixel(self, _, __, output):
        setattr(self, 'hidden_pixel', output)

    def _hook_instance(self, _, __, output):
        setattr(self, 'hidden_instance', output)

    def _register_hook(self):
        pixel_layer = self._find_layer(self.layer_pixel)
        instance_layer = self._find_layer(self.layer_instance)

        assert pixel_layer is not None, f'hidden layer ({self.layer_pixel}) not found'
        assert instance_layer is not None, f'hidden layer ({self.layer_instance}) not found'

        pixel_layer.register_forward_hook(self._hook_pixel)
        instance_layer.register_forward_hook(self._hook_instance)
        self.hook_registered = True

    @singleton('pixel_projector')
    def _get_pixel_projector(self, hidden):
        _, dim, *_ = hidden.shape
        projector = ConvMLP(dim, self.projection_size, self.projection_hidden_size)
        return projector.to(hidden)

    @singleton('instance_projector')
    def _get_instance_projector(self, hidden):
        _, dim = hidden.shape
        projector = MLP(dim, self.projection_size, self.projection_hidden_size)
        return projector.to(hidden)

    def get_representation(self, x):
        if not self.hook_registered:
            self._register_hook()

        _ = self.net(x)
        hidden_pixel = self.hidden_pixel
        hidden_instance = self.hidden_instance
        self.hidden_pixel = None
        self.hidden_instance = None
        assert hidden_pixel is not None, f'hidden pixel layer {self.layer_pixel} never emitted an output'
        assert hidden_instance is not None, f'hidden instance layer {self.layer_instance} never emitted an output'
        return hidden_pixel, hidden_instance

    def forward(self, x):
        pixel_representation, instance_representation = self.get_representation(x)
        instance_representation = instance_representation.flatten(1)

        pixel_projector = self._get_pixel_projector(pixel_representation)
        instance_projector = self._get_instance_projector(instance_representation)

        pixel_projection = pixel_projector(pixel_representation)
        instance_projection = instance_projector(instance_representation)
        return pixel_projection, instance_projection


# kornia.augmentation / kornia.filters, written out (see the module docstring)

class ColorJitter(nn.Module):
    def __init__(self, brightness, contrast, saturation, hue):
        super().__init__()
        self.b, self.c, self.s, self.h = brightness, contrast, saturation, hue

    def forward(self, x):
        n = x.shape[0]
        u = lambda lo, hi: (torch.rand(n, 1, 1, 1) * (hi - lo) + lo)
        gray = lambda t: (0.299 * t[:, 0:1] + 0.587 * t[:, 1:2] + 0.114 * t[:, 2:3])
        x = (x * u(max(0., 1 - self.b), 1 + self.b)).clamp(0, 1)
        x = ((x - gray(x).mean((2, 3), keepdim=True)) * u(max(0., 1 - self.c), 1 + self.c)
             + gray(x).mean((2, 3), keepdim=True)).clamp(0, 1)
        x = ((x - gray(x)) * u(max(0., 1 - self.s), 1 + self.s) + gray(x)).clamp(0, 1)
        # hue: rotate the chroma plane of YIQ by an angle of up to h turns
        yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
        t = torch.einsum('ij,bjhw->bihw', yiq, x)
        theta = u(-self.h, self.h)[:, 0] * 2 * torch.pi
        i, q = t[:, 1:2], t[:, 2:3]
        cos, sin = torch.cos(theta)[..., None], torch.sin(theta)[..., None]
        t = torch.cat([t[:, 0:1], i * cos - q * sin, i * sin + q * cos], 1)
        return torch.einsum('ij,bjhw->bihw', torch.linalg.inv(yiq), t).clamp(0, 1)


class RandomGrayscale(nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.p = p

    def forward(self, x):
        gray = (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]).expand_as(x)
        pick = (torch.rand(x.shape[0], 1, 1, 1) < self.p).float()
        return pick * gray + (1 - pick) * x


class GaussianBlur2d(nn.Module):
    def __init__(self, kernel_size, sigma):
        super().__init__()
        k, s = kernel_size[0], sigma[0]
        g = torch.exp(-((torch.arange(k) - (k - 1) / 2) ** 2) / (2 * s ** 2))
        self.register_buffer('kernel', g / g.sum())

    def forward(self, x):
        c, k = x.shape[1], self.kernel.numel()
        x = F.pad(x, (k // 2,) * 4, mode='reflect')
        x = F.conv2d(x, self.kernel.view(1, 1, 1, k).repeat(c, 1, 1, 1), groups=c)
        return F.conv2d(x, self.kernel.view(1, 1, k, 1).repeat(c, 1, 1, 1), groups=c)


class RandomSolarize(nn.Module):
    def __init__(self, thresholds=0.1, additions=0.1, p=0.5):
        super().__init__()
        self.t, self.a, self.p = thresholds, additions, p

    def forward(self, x):
        n = x.shape[0]
        thr = 0.5 + (torch.rand(n, 1, 1, 1) * 2 - 1) * self.t
        add = (torch.rand(n, 1, 1, 1) * 2 - 1) * self.a
        xa = (x + add).clamp(0, 1)
        sol = torch.where(xa < thr, xa, 1 - xa)
        pick = (torch.rand(n, 1, 1, 1) < self.p).float()
        return pick * sol + (1 - pick) * x


class Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer('mean', mean.view(1, -1, 1, 1))
        self.register_buffer('std', std.view(1, -1, 1, 1))

    def forward(self, x):
        return (x - self.mean) / self.std
