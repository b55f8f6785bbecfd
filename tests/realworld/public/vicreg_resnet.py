# ruff: noqa: C408, F841, PLR0402, RUF012, UP004, UP008, UP032
"""VICReg: a ResNet backbone and an MLP expander trained on two augmented views with the variance-invariance-
covariance loss (25 * MSE between the views + 25 * hinge on each embedding dimension's std + 1 * squared
off-diagonal covariance), the LARS optimizer and a warm-up + cosine learning-rate schedule.

Source: https://github.com/facebookresearch/vicreg
Commit: 4e12602fd495af83efd1631fbe82523e6db092e0
Files: main_vicreg.py (get_arguments' defaults, main's loop body, adjust_learning_rate, VICReg, Projector,
exclude_bias_and_norm, off_diagonal, LARS, FullGatherLayer), resnet.py (conv3x3, conv1x1, BasicBlock, ResNet),
augmentations.py (GaussianBlur, Solarization, TrainTransform)
License: MIT (Copyright (c) Facebook, Inc. and its affiliates; full text in LICENSES/facebookresearch-vicreg.txt)
Domain: self-supervised (variance-invariance-covariance regularization, two views, LARS)

Kept as written: ``VICReg.forward`` (``repr_loss = F.mse_loss(x, y)``, the gathered embeddings centred,
``std = sqrt(var + 1e-4)``, ``mean(relu(1 - std)) / 2`` per branch, covariance ``x.T @ x / (batch_size - 1)``, the
squared off-diagonal summed and divided by ``num_features``, coefficients sim 25, std 25, cov 1); ``Projector``
(Linear / BatchNorm1d / ReLU blocks, a last Linear without bias); ``off_diagonal``; ``exclude_bias_and_norm``;
``LARS`` (weight decay and trust-ratio adaptation skipped for 1-d parameters, eta 0.001, momentum 0.9);
``LARS(model.parameters(), lr=0, weight_decay=1e-6, ...)``; ``adjust_learning_rate`` (10 warm-up epochs, cosine to
0.001 of base, base = base_lr * batch_size / 256 with base_lr 0.2); resnet.py's ``ResNet`` (the padding layer, 7x7
stride-2 stem with padding 2, max-pool, four stages, average pool, Kaiming init, ``zero_init_residual=True``) and
``BasicBlock``; the two view pipelines of ``TrainTransform`` (blur p=1.0 / p=0.1, solarization p=0.0 / p=0.2); the
loop body (adjust the lr, zero_grad, autocast forward, ``scaler.scale(loss).backward()``, ``scaler.step``,
``scaler.update``).

Deviations from the original:
- one process, no GPU: ``init_distributed_mode``, ``SyncBatchNorm``, ``DistributedDataParallel`` and the
  ``DistributedSampler`` (a seeded ``RandomSampler`` here, so ``sampler.set_epoch`` is dropped) are left out;
  ``FullGatherLayer`` is its one-process arithmetic (``all_gather`` of one process gives the tensor itself,
  ``all_reduce`` of one gradient is that gradient); ``torch.cuda.amp`` (autocast, GradScaler) becomes ``torch.amp``
  on the CPU, disabled.
- sizes for 2 CPU cores: the backbone is resnet.py's ``ResNet`` with ``BasicBlock`` (the ``resnet34`` family) at
  one block per stage ([1, 1, 1, 1] instead of resnet50's Bottleneck [3, 4, 6, 3]) and width_per_group 8 instead of
  64, so the representation has 64 features; ``BasicBlock``'s check that ``base_width`` is 64 is relaxed to let the
  narrow width build. The expander ``--mlp`` 8192-8192-8192 -> 128-128-128; batch_size 2048 -> 32 (the lr formula
  gives base_lr * 32 / 256); epochs 100 (the schedule's length) kept.
- data: ImageNet (``datasets.ImageFolder``) is replaced by 64 synthetic 32x32 RGB images made from the seed (a
  coloured square, disk, cross or stripes at a random place on a noisy background); crop size 224 -> 32.
- torchvision and PIL are not installed: the transforms are written out on tensors in [0, 1]: RandomResizedCrop
  (scale 0.08-1, ratio 3/4-4/3, 10 tries then the centre crop, bicubic), RandomHorizontalFlip, RandomApply of
  ColorJitter(0.4, 0.4, 0.2, 0.1) with p 0.8 (the four adjustments in a random order, hue shifted in HSV),
  RandomGrayscale(p=0.2), the blur (PIL's ``GaussianBlur(sigma)`` as a separable Gaussian kernel of std sigma,
  reflect padding), ``ImageOps.solarize`` (threshold 128 of 255), ToTensor's range and Normalize. Their random draws
  (np.random in augmentations.py, the torch RNG in torchvision) come from one torch generator seeded from the seed.
- ``train_step`` runs one iteration of the epoch/step loop (a generator over the same two loops); the json stats
  printing, the checkpoint resume/save and the final backbone save are dropped; ``num_workers`` 10 -> 0, no
  pin_memory.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# get_arguments()'s defaults, sizes scaled down where the docstring says
ARGS = dict(arch="resnet", mlp="128-128-128", epochs=100, batch_size=32, base_lr=0.2, wd=1e-6, sim_coeff=25.0,
            std_coeff=25.0, cov_coeff=1.0, num_workers=0)
N_IMAGES = 64
CROP = 32


# ---- resnet.py --------------------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1
    __constants__ = ["downsample"]

    def __init__(
        self,
        inplanes,
        planes,
        stride=1,
        downsample=None,
        groups=1,
        base_width=64,
        dilation=1,
        norm_layer=None,
        last_activation="relu",
    ):
        super(BasicBlock, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1:  # (port) `or base_width != 64` relaxed for the narrow width
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        # Both self.conv1 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):
    def __init__(
        self,
        block,
        layers,
        num_channels=3,
        zero_init_residual=False,
        groups=1,
        widen=1,
        width_per_group=64,
        replace_stride_with_dilation=None,
        norm_layer=None,
        last_activation="relu",
    ):
        super(ResNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer
        # self._last_activation = last_activation

        self.padding = nn.ConstantPad2d(1, 0.0)

        self.inplanes = width_per_group * widen
        self.dilation = 1
        if replace_stride_with_dilation is None:
            # each element in the tuple indicates if we should replace
            # the 2x2 stride with a dilated convolution instead
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError(
                "replace_stride_with_dilation should be None "
                "or a 3-element tuple, got {}".format(replace_stride_with_dilation)
            )
        self.groups = groups
        self.base_width = width_per_group

        # change padding 3 -> 2 compared to original torchvision code because added a padding layer
        num_out_filters = width_per_group * widen
        self.conv1 = nn.Conv2d(
            num_channels,
            num_out_filters,
            kernel_size=7,
            stride=2,
            padding=2,
            bias=False,
        )
        self.bn1 = norm_layer(num_out_filters)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, num_out_filters, layers[0])
        num_out_filters *= 2
        self.layer2 = self._make_layer(
            block,
            num_out_filters,
            layers[1],
            stride=2,
            dilate=replace_stride_with_dilation[0],
        )
        num_out_filters *= 2
        self.layer3 = self._make_layer(
            block,
            num_out_filters,
            layers[2],
            stride=2,
            dilate=replace_stride_with_dilation[1],
        )
        num_out_filters *= 2
        self.layer4 = self._make_layer(
            block,
            num_out_filters,
            layers[3],
            stride=2,
            dilate=replace_stride_with_dilation[2],
            last_activation=last_activation,
        )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves like an identity.
        # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(
        self, block, planes, blocks, stride=1, dilate=False, last_activation="relu"
    ):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(
            block(
                self.inplanes,
                planes,
                stride,
                downsample,
                self.groups,
                self.base_width,
                previous_dilation,
                norm_layer,
                last_activation=(last_activation if blocks == 1 else "relu"),
            )
        )
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(
                block(
                    self.inplanes,
                    planes,
                    groups=self.groups,
                    base_width=self.base_width,
                    dilation=self.dilation,
                    norm_layer=norm_layer,
                    last_activation=(last_activation if i == blocks - 1 else "relu"),
                )
            )

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.padding(x)

        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)

        return x


def resnet(**kwargs):
    # (port) the resnet34 family (BasicBlock) at one block per stage and width 8: 8 * 8 = 64 features
    return ResNet(BasicBlock, [1, 1, 1, 1], width_per_group=8, **kwargs), 64


# ---- main_vicreg.py ---------------------------------------------------------------------------------------------

def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 10 * len(loader)
    base_lr = args.base_lr * args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


class VICReg(nn.Module):
    def __init__(self, args, bug=None):
        super().__init__()
        self.args = args
        self.bug = bug
        self.num_features = int(args.mlp.split("-")[-1])
        self.backbone, self.embedding = {"resnet": resnet}[args.arch](
            zero_init_residual=True
        )
        self.projector = Projector(args, self.embedding)

    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))

        repr_loss = F.mse_loss(x, y)

        x = torch.cat(FullGatherLayer.apply(x), dim=0)
        y = torch.cat(FullGatherLayer.apply(y), dim=0)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)

        if self.bug == "std_over_features":
            # the std taken across each sample's features instead of across the batch for each feature
            std_x = torch.sqrt(x.var(dim=1) + 0.0001)
            std_y = torch.sqrt(y.var(dim=1) + 0.0001)
        else:
            std_x = torch.sqrt(x.var(dim=0) + 0.0001)
            std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2

        cov_x = (x.T @ x) / (self.args.batch_size - 1)
        cov_y = (y.T @ y) / (self.args.batch_size - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(
            self.num_features
        ) + off_diagonal(cov_y).pow_(2).sum().div(self.num_features)

        loss = (
            self.args.sim_coeff * repr_loss
            + self.args.std_coeff * std_loss
            + self.args.cov_coeff * cov_loss
        )
        return loss


def Projector(args, embedding):
    mlp_spec = f"{embedding}-{args.mlp}"
    layers = []
    f = list(map(int, mlp_spec.split("-")))
    for i in range(len(f) - 2):
        layers.append(nn.Linear(f[i], f[i + 1]))
        layers.append(nn.BatchNorm1d(f[i + 1]))
        layers.append(nn.ReLU(True))
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)


def exclude_bias_and_norm(p):
    return p.ndim == 1


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class LARS(optim.Optimizer):
    def __init__(
        self,
        params,
        lr,
        weight_decay=0,
        momentum=0.9,
        eta=0.001,
        weight_decay_filter=None,
        lars_adaptation_filter=None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            eta=eta,
            weight_decay_filter=weight_decay_filter,
            lars_adaptation_filter=lars_adaptation_filter,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad

                if dp is None:
                    continue

                if g["weight_decay_filter"] is None or not g["weight_decay_filter"](p):
                    dp = dp.add(p, alpha=g["weight_decay"])

                if g["lars_adaptation_filter"] is None or not g[
                    "lars_adaptation_filter"
                ](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(
                        param_norm > 0.0,
                        torch.where(
                            update_norm > 0, (g["eta"] * param_norm / update_norm), one
                        ),
                        one,
                    )
                    dp = dp.mul(q)

                param_state = self.state[p]
                if "mu" not in param_state:
                    param_state["mu"] = torch.zeros_like(p)
                mu = param_state["mu"]
                mu.mul_(g["momentum"]).add_(dp)

                p.add_(mu, alpha=-g["lr"])


class FullGatherLayer(torch.autograd.Function):
    """
    Gather tensors from all process and support backward propagation
    for the gradients across processes.

    (port) one process: all_gather gives the tensor itself, all_reduce of one gradient is that gradient.
    """

    @staticmethod
    def forward(ctx, x):
        output = [torch.zeros_like(x) for _ in range(1)]
        output[0].copy_(x)
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        all_gradients = torch.stack(grads)
        return all_gradients[0]


# ---- augmentations.py, written out on tensors (port: no torchvision / PIL) -------------------------------------

def _rand(g):
    return float(torch.rand((), generator=g))


def _uniform(g, lo, hi):
    return lo + (hi - lo) * _rand(g)


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]).unsqueeze(0)


def random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, height, width = img.shape
    area = height * width
    for _ in range(10):
        target_area = area * _uniform(g, *scale)
        aspect = math.exp(_uniform(g, math.log(ratio[0]), math.log(ratio[1])))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, (1,), generator=g))
            j = int(torch.randint(0, width - w + 1, (1,), generator=g))
            break
    else:  # the centre crop
        h, w = height, width
        i, j = 0, 0
    crop = img[:, i:i + h, j:j + w].unsqueeze(0)
    return F.interpolate(crop, size=(size, size), mode="bicubic", align_corners=False)[0].clamp(0, 1)


def _rgb_to_hsv(img):
    r, g_, b = img
    maxc, _ = img.max(0)
    minc, _ = img.min(0)
    v = maxc
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / maxc.clamp(min=1e-8), torch.zeros_like(maxc))
    dc = delta.clamp(min=1e-8)
    rc, gc, bc = (maxc - r) / dc, (maxc - g_) / dc, (maxc - b) / dc
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g_, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(delta > 0, (h / 6.0) % 1.0, torch.zeros_like(h))
    return h, s, v


def _hsv_to_rgb(h, s, v):
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.long() % 6
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros(3, *h.shape)
    for k, (r, g_, b) in enumerate(choices):
        sel = i == k
        out[0][sel], out[1][sel], out[2][sel] = r[sel], g_[sel], b[sel]
    return out


def color_jitter(img, g, brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1):
    order = torch.randperm(4, generator=g).tolist()
    b = _uniform(g, 1 - brightness, 1 + brightness)
    c = _uniform(g, 1 - contrast, 1 + contrast)
    s = _uniform(g, 1 - saturation, 1 + saturation)
    h = _uniform(g, -hue, hue)
    for k in order:
        if k == 0:
            img = (img * b).clamp(0, 1)
        elif k == 1:
            img = (img * c + _gray(img).mean() * (1 - c)).clamp(0, 1)
        elif k == 2:
            img = (img * s + _gray(img) * (1 - s)).clamp(0, 1)
        else:
            hh, ss, vv = _rgb_to_hsv(img)
            img = _hsv_to_rgb((hh + h) % 1.0, ss, vv)
    return img


def gaussian_blur(img, sigma):
    radius = max(1, math.ceil(3 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-x ** 2 / (2 * sigma ** 2))
    k = k / k.sum()
    out = F.pad(img.unsqueeze(0), (radius, radius, 0, 0), mode="reflect")
    out = F.conv2d(out, k.view(1, 1, 1, -1).repeat(3, 1, 1, 1), groups=3)
    out = F.pad(out, (0, 0, radius, radius), mode="reflect")
    out = F.conv2d(out, k.view(1, 1, -1, 1).repeat(3, 1, 1, 1), groups=3)
    return out[0]


class GaussianBlur(object):
    def __init__(self, p, g):
        self.p = p
        self.g = g

    def __call__(self, img):
        if _rand(self.g) < self.p:
            sigma = _rand(self.g) * 1.9 + 0.1
            return gaussian_blur(img, sigma)
        else:
            return img


class Solarization(object):
    def __init__(self, p, g):
        self.p = p
        self.g = g

    def __call__(self, img):
        if _rand(self.g) < self.p:
            return torch.where(img >= 128 / 255, 1 - img, img)  # ImageOps.solarize
        else:
            return img


class TrainTransform(object):
    def __init__(self, g, bug=None):
        self.g = g
        self.bug = bug
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

        def pipeline(blur_p, solarize_p):
            blur, solarize = GaussianBlur(p=blur_p, g=g), Solarization(p=solarize_p, g=g)

            def transform(img):
                img = random_resized_crop(img, CROP, g)  # RandomResizedCrop(224, BICUBIC)
                if _rand(g) < 0.5:  # RandomHorizontalFlip(p=0.5)
                    img = img.flip(-1)
                if _rand(g) < 0.8:  # RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)
                    img = color_jitter(img, g)
                if _rand(g) < 0.2:  # RandomGrayscale(p=0.2)
                    img = _gray(img).expand(3, -1, -1)
                img = blur(img)
                img = solarize(img)
                return (img - mean) / std  # ToTensor's [0, 1], Normalize
            return transform

        self.transform = pipeline(1.0, 0.0)
        self.transform_prime = pipeline(0.1, 0.2)

    def __call__(self, sample):
        x1 = self.transform(sample)
        if self.bug == "one_view_twice":
            return x1, x1  # the first view handed out as both
        x2 = self.transform_prime(sample)
        return x1, x2


# ---- data: synthetic images (port: no ImageNet) -----------------------------------------------------------------

def make_images(gen, n):
    """Coloured squares, disks, crosses or stripes at random places on a noisy background, values in [0, 1]."""
    yy, xx = torch.meshgrid(torch.arange(CROP), torch.arange(CROP), indexing="ij")
    images, labels = [], []
    for _ in range(n):
        img = 0.2 + 0.1 * torch.rand(3, CROP, CROP, generator=gen)
        kind = int(torch.randint(0, 4, (1,), generator=gen))
        cy, cx = (int(v) for v in torch.randint(8, CROP - 8, (2,), generator=gen))
        r = int(torch.randint(4, 8, (1,), generator=gen))
        if kind == 0:
            mask = ((yy - cy).abs() <= r) & ((xx - cx).abs() <= r)
        elif kind == 1:
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        elif kind == 2:
            mask = (((yy - cy).abs() <= 1) & ((xx - cx).abs() <= r)) | (((xx - cx).abs() <= 1) & ((yy - cy).abs() <= r))
        else:
            mask = ((xx // 3) % 2 == 0) & ((yy - cy).abs() <= r)
        color = torch.rand(3, 1, 1, generator=gen) * 0.8 + 0.2
        img = torch.where(mask, color.expand(3, CROP, CROP), img)
        images.append(img)
        labels.append(kind)
    return torch.stack(images), torch.tensor(labels)


class ImageDataset(torch.utils.data.Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


# ---- main() -----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    args = types.SimpleNamespace(**ARGS)

    transforms = TrainTransform(torch.Generator().manual_seed(seed + 1), bug=bug)

    images, labels = make_images(gen, N_IMAGES)
    dataset = ImageDataset(images, labels, transforms)
    sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed + 2))
    assert args.batch_size % 1 == 0
    per_device_batch_size = args.batch_size // 1
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=per_device_batch_size,
        num_workers=args.num_workers,
        sampler=sampler,
    )

    model = VICReg(args, bug=bug)
    optimizer = LARS(
        model.parameters(),
        lr=0,
        weight_decay=args.wd,
        weight_decay_filter=exclude_bias_and_norm,
        lars_adaptation_filter=exclude_bias_and_norm,
    )

    start_epoch = 0
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def loop():
        for epoch in range(start_epoch, args.epochs):
            for step, ((x, y), _) in enumerate(loader, start=epoch * len(loader)):
                lr = adjust_learning_rate(args, optimizer, loader, step)

                optimizer.zero_grad()
                with torch.autocast("cpu", enabled=False):
                    loss = model.forward(x, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                yield loss.detach()

    (x, y), _ = next(iter(loader))
    steps = loop()
    return Program(name="vicreg_resnet", model=model, batch=({"x": x, "y": y},), loss_fn=lambda loss, _targets: loss,
                   optimizer=optimizer, train_step=lambda: next(steps), loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the variance term's std taken over each embedding's features (dim=1) instead of over the batch for each feature
    # (dim=0): the hinge no longer keeps any feature from collapsing across samples (classic wrong reduction axis).
    Bug("std_over_features", functools.partial(_build, bug="std_over_features"), "learning_ledger", ("OBJECTIVE",)),
    # the transform hands the first view out twice: both branches see the same crop, so the invariance term asks for
    # nothing (classic two-view pipeline slip).
    Bug("one_view_twice", functools.partial(_build, bug="one_view_twice"), "learning_ledger", ("TASK",)),
]
