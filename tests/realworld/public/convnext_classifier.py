"""ConvNeXt image classifier trained by facebookresearch/ConvNeXt's ``main.py`` / ``engine.train_one_epoch`` with the
ConvNeXt-T recipe of TRAINING.md: the repository's ``ConvNeXt`` (patchify stem, four stages of blocks -- 7x7
depthwise conv, channels-last LayerNorm, 4x MLP with GELU, layer scale ``gamma`` (init 1e-6), stochastic depth
``DropPath`` with rates rising linearly to ``drop_path`` -- LayerNorm + 2x2 strided-conv downsampling, global average
pool, LayerNorm, linear head, truncated-normal init), timm's ``Mixup`` (mixup 0.8 / cutmix 1.0, switch prob 0.5,
per batch, label smoothing 0.1) with ``SoftTargetCrossEntropy``, ``create_optimizer``'s AdamW (lr 4e-3, eps 1e-8)
over parameter groups with weight decay 0.05 except biases and 1-D parameters, per-iteration cosine lr schedule with
linear warm-up and a cosine weight-decay schedule written into the param groups, gradient accumulation
(``update_freq``: loss divided by it, step and zero_grad every ``update_freq`` micro-batches), timm's ``ModelEma``
(decay 0.9999) updated after each step, and ``evaluate`` (``eval()``, no_grad, cross-entropy, top-1) for the model and
its EMA after each epoch.

Source: https://github.com/facebookresearch/ConvNeXt
Commit: 048efcea897d999aed302f2639b6270aedf8d4c8
Files: main.py, engine.py, optim_factory.py, utils.py (cosine_scheduler), models/convnext.py, datasets.py, TRAINING.md
License: MIT (Copyright (c) Meta Platforms, Inc. and affiliates)
Also copied (ConvNeXt imports them from timm 0.3.2, which is not installed here):
  https://github.com/huggingface/pytorch-image-models, commit 6504a42832cb6687e3f595c37e003ea920268365 ("Version
  0.3.2"): timm/data/mixup.py (one_hot, mixup_target, rand_bbox, cutmix_bbox_and_lam, Mixup in 'batch' mode),
  timm/loss/cross_entropy.py (SoftTargetCrossEntropy), timm/models/layers/drop.py (drop_path, DropPath),
  timm/models/layers/weight_init.py (trunc_normal_), timm/utils/model_ema.py (ModelEma), timm/utils/metrics.py
  (accuracy); License: Apache-2.0 (Copyright 2020 Ross Wightman; LICENSES/huggingface-pytorch-image-models.txt)
Domain: image classification (modern CNN: stochastic depth, layer scale, mixup/cutmix, label smoothing, AdamW)

Deviations from the original:
- sizes: convnext_tiny's depths [3, 3, 9, 3] / dims [96, 192, 384, 768] -> depths [1, 1, 3, 1] / dims
  [8, 16, 32, 64]; input_size 224 -> 32 (the CIFAR path of ``build_transform``: RandomCrop(32, padding=4)); 10
  classes (``--data_set image_folder --nb_classes 10``); batch_size 128 -> 8 with update_freq 4 (TRAINING.md's
  single-machine ConvNeXt-T command uses update_freq 4): 32 images per update; 256 training images -> 8 updates per
  epoch; epochs 300 -> 30 and warmup_epochs 20 -> 2 (same 1:15 ratio); lr, min_lr, weight decay, drop_path 0.1,
  smoothing and the mixup settings unchanged;
- timm is not installed: the pieces listed above are copied from timm 0.3.2; ``Mixup.__call__`` passes
  ``device=x.device`` to ``mixup_target`` (timm 0.3.2's default ``device='cuda'`` cannot run on the CPU; later timm
  versions pass the device the same way); only the 'batch' mode that main.py selects is kept;
  ``create_model('convnext_tiny', ...)`` is the ``ConvNeXt(...)`` constructor call;
- data: ImageNet is replaced by synthetic 32x32 RGB images made from ``seed`` (each class has its own colour, plus
  smooth noise); torchvision is not available, so of ``create_transform``'s training pipeline the RandomCrop(32,
  padding=4), the horizontal flip, ToTensor and Normalize(IMAGENET_DEFAULT_MEAN/STD) are written out in plain torch,
  and RandAugment (rand-m9-mstd0.5-inc1), colour jitter and RandomErasing (reprob 0.25) are left out;
  DistributedSampler over one replica, DataLoader without workers;
- CPU, single process: no distributed init, no AMP (``use_amp`` False: the full-precision branch runs), the
  ``torch.cuda.synchronize()`` call is dropped; MetricLogger, tensorboard/wandb logging, printing and checkpointing
  are left out;
- one ``train_step`` is one optimizer update of ``train_one_epoch``'s loop (``update_freq`` micro-batches, each with
  the lr/wd schedule update, mixup, forward, loss / update_freq, backward; step, zero_grad and the EMA update on the
  last), returning the last micro-batch's loss value as the loop logs it; when an epoch's updates are done, the
  epoch ends as in main(): ``evaluate`` on the validation set for the model and its EMA, then the next
  ``train_one_epoch`` call (``model.train(True)``, ``optimizer.zero_grad()``); ``batch`` is a training batch after
  ``mixup_fn`` (the inputs and soft targets the model and ``criterion`` see), so no ``loader`` is declared (its
  batches are the pre-mixup ones); ``eval_fn`` is ``evaluate``'s top-1 on a batch (soft targets read by their
  largest entry); ``evaluate``'s MetricLogger is replaced by a running top-1 sum.
"""
# ruff: noqa: B006, C408, PLC0414, PLR0402, RUF059, SIM223, UP008, UP031, UP032, UP034  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types
import warnings
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL, NUM_CLASSES = 256, 64, 10
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)


def get_args(seed):
    """main.py's argument defaults with TRAINING.md's ConvNeXt-T options (sizes shrunk, see the docstring)."""
    return types.SimpleNamespace(
        batch_size=8, epochs=30, update_freq=4,
        model='convnext_tiny', drop_path=0.1, input_size=32, layer_scale_init_value=1e-6,
        model_ema=True, model_ema_decay=0.9999, model_ema_force_cpu=False, model_ema_eval=True,
        opt='adamw', opt_eps=1e-8, opt_betas=None, clip_grad=None, momentum=0.9, weight_decay=0.05,
        weight_decay_end=None, lr=4e-3, layer_decay=1.0, min_lr=1e-6, warmup_epochs=2, warmup_steps=-1,
        color_jitter=0.4, aa='rand-m9-mstd0.5-inc1', smoothing=0.1, train_interpolation='bicubic',
        reprob=0.25, remode='pixel', recount=1, resplit=False,
        mixup=0.8, cutmix=1.0, cutmix_minmax=None, mixup_prob=1.0, mixup_switch_prob=0.5, mixup_mode='batch',
        head_init_scale=1.0, data_set='image_folder', nb_classes=NUM_CLASSES, imagenet_default_mean_and_std=True,
        seed=seed, start_epoch=0, disable_eval=False, dist_eval=False, num_workers=0, pin_mem=False,
        distributed=False, use_amp=False)


# ---- timm 0.3.2: models/layers/weight_init.py, models/layers/drop.py -----------------------------------------

def _no_grad_trunc_normal_(tensor, mean, std, a, b):
    # Cut & paste from PyTorch official master until it's in a few official releases - RW
    # Method based on https://people.sc.fsu.edu/~jburkardt/presentations/truncated_normal.pdf
    def norm_cdf(x):
        # Computes standard normal cumulative distribution function
        return (1. + math.erf(x / math.sqrt(2.))) / 2.

    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.",
                      stacklevel=2)

    with torch.no_grad():
        # Values are generated by using a truncated uniform distribution and
        # then using the inverse CDF for the normal distribution.
        # Get upper and lower cdf values
        l = norm_cdf((a - mean) / std)
        u = norm_cdf((b - mean) / std)

        # Uniformly fill tensor with values from [l, u], then translate to
        # [2l-1, 2u-1].
        tensor.uniform_(2 * l - 1, 2 * u - 1)

        # Use inverse cdf transform for normal distribution to get truncated
        # standard normal
        tensor.erfinv_()

        # Transform to proper mean, std
        tensor.mul_(std * math.sqrt(2.))
        tensor.add_(mean)

        # Clamp to ensure it's in the proper range
        tensor.clamp_(min=a, max=b)
        return tensor


def trunc_normal_(tensor, mean=0., std=1., a=-2., b=2.):
    # type: (Tensor, float, float, float, float) -> Tensor
    return _no_grad_trunc_normal_(tensor, mean, std, a, b)


def drop_path(x, drop_prob: float = 0., training: bool = False):
    """Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks).
    """
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()  # binarize
    output = x.div(keep_prob) * random_tensor
    return output


class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks).
    """
    def __init__(self, drop_prob=None, bug=None):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
        self.bug = bug

    def forward(self, x):
        if self.bug == "drop_path_at_eval":
            return drop_path(x, self.drop_prob, True)  # "always regularize": paths dropped in eval() as well
        return drop_path(x, self.drop_prob, self.training)


# ---- models/convnext.py --------------------------------------------------------------------------------------

class Block(nn.Module):
    r""" ConvNeXt Block. There are two equivalent implementations:
    (1) DwConv -> LayerNorm (channels_first) -> 1x1 Conv -> GELU -> 1x1 Conv; all in (N, C, H, W)
    (2) DwConv -> Permute to (N, H, W, C); LayerNorm (channels_last) -> Linear -> GELU -> Linear; Permute back
    We use (2) as we find it slightly faster in PyTorch

    Args:
        dim (int): Number of input channels.
        drop_path (float): Stochastic depth rate. Default: 0.0
        layer_scale_init_value (float): Init value for Layer Scale. Default: 1e-6.
    """
    def __init__(self, dim, drop_path=0., layer_scale_init_value=1e-6, bug=None):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim) # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim) # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim)),
                                    requires_grad=True) if layer_scale_init_value > 0 else None
        self.drop_path = DropPath(drop_path, bug=bug) if drop_path > 0. else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1) # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        if self.gamma is not None:
            x = self.gamma * x
        x = x.permute(0, 3, 1, 2) # (N, H, W, C) -> (N, C, H, W)

        x = input + self.drop_path(x)
        return x

class ConvNeXt(nn.Module):
    r""" ConvNeXt
        A PyTorch impl of : `A ConvNet for the 2020s`  -
          https://arxiv.org/pdf/2201.03545.pdf

    Args:
        in_chans (int): Number of input image channels. Default: 3
        num_classes (int): Number of classes for classification head. Default: 1000
        depths (tuple(int)): Number of blocks at each stage. Default: [3, 3, 9, 3]
        dims (int): Feature dimension at each stage. Default: [96, 192, 384, 768]
        drop_path_rate (float): Stochastic depth rate. Default: 0.
        layer_scale_init_value (float): Init value for Layer Scale. Default: 1e-6.
        head_init_scale (float): Init scaling value for classifier weights and biases. Default: 1.
    """
    def __init__(self, in_chans=3, num_classes=1000,
                 depths=[3, 3, 9, 3], dims=[96, 192, 384, 768], drop_path_rate=0.,
                 layer_scale_init_value=1e-6, head_init_scale=1., bug=None,
                 ):
        super().__init__()

        self.downsample_layers = nn.ModuleList() # stem and 3 intermediate downsampling conv layers
        stem = nn.Sequential(
            nn.Conv2d(in_chans, dims[0], kernel_size=4, stride=4),
            LayerNorm(dims[0], eps=1e-6, data_format="channels_first")
        )
        self.downsample_layers.append(stem)
        for i in range(3):
            downsample_layer = nn.Sequential(
                    LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                    nn.Conv2d(dims[i], dims[i+1], kernel_size=2, stride=2),
            )
            self.downsample_layers.append(downsample_layer)

        self.stages = nn.ModuleList() # 4 feature resolution stages, each consisting of multiple residual blocks
        dp_rates=[x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(4):
            stage = nn.Sequential(
                *[Block(dim=dims[i], drop_path=dp_rates[cur + j],
                layer_scale_init_value=layer_scale_init_value, bug=bug) for j in range(depths[i])]
            )
            self.stages.append(stage)
            cur += depths[i]

        self.norm = nn.LayerNorm(dims[-1], eps=1e-6) # final norm layer
        self.head = nn.Linear(dims[-1], num_classes)

        self.apply(self._init_weights)
        self.head.weight.data.mul_(head_init_scale)
        self.head.bias.data.mul_(head_init_scale)

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            trunc_normal_(m.weight, std=.02)
            nn.init.constant_(m.bias, 0)

    def forward_features(self, x):
        for i in range(4):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return self.norm(x.mean([-2, -1])) # global average pooling, (N, C, H, W) -> (N, C)

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x

class LayerNorm(nn.Module):
    r""" LayerNorm that supports two data formats: channels_last (default) or channels_first.
    The ordering of the dimensions in the inputs. channels_last corresponds to inputs with
    shape (batch_size, height, width, channels) while channels_first corresponds to inputs
    with shape (batch_size, channels, height, width).
    """
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape, )

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x


# ---- timm 0.3.2: data/mixup.py, loss/cross_entropy.py, utils/model_ema.py, utils/metrics.py -------------------

def one_hot(x, num_classes, on_value=1., off_value=0., device='cuda'):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=device).scatter_(1, x, on_value)


def mixup_target(target, num_classes, lam=1., smoothing=0.0, device='cuda'):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value, device=device)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value, device=device)
    return y1 * lam + y2 * (1. - lam)


def rand_bbox(img_shape, lam, margin=0., count=None):
    """ Standard CutMix bounding-box
    Generates a random square bbox based on lambda value. This impl includes
    support for enforcing a border margin as percent of bbox dimensions.
    """
    ratio = np.sqrt(1 - lam)
    img_h, img_w = img_shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    margin_y, margin_x = int(margin * cut_h), int(margin * cut_w)
    cy = np.random.randint(0 + margin_y, img_h - margin_y, size=count)
    cx = np.random.randint(0 + margin_x, img_w - margin_x, size=count)
    yl = np.clip(cy - cut_h // 2, 0, img_h)
    yh = np.clip(cy + cut_h // 2, 0, img_h)
    xl = np.clip(cx - cut_w // 2, 0, img_w)
    xh = np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh


def cutmix_bbox_and_lam(img_shape, lam, ratio_minmax=None, correct_lam=True, count=None):
    """ Generate bbox and apply lambda correction.
    """
    yl, yu, xl, xu = rand_bbox(img_shape, lam, count=count)
    if correct_lam or ratio_minmax is not None:
        bbox_area = (yu - yl) * (xu - xl)
        lam = 1. - bbox_area / float(img_shape[-2] * img_shape[-1])
    return (yl, yu, xl, xu), lam


class Mixup:
    """ Mixup/Cutmix that applies different params to each element or whole batch
    """
    def __init__(self, mixup_alpha=1., cutmix_alpha=0., cutmix_minmax=None, prob=1.0, switch_prob=0.5,
                 mode='batch', correct_lam=True, label_smoothing=0.1, num_classes=1000, bug=None):
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.cutmix_minmax = cutmix_minmax
        self.mix_prob = prob
        self.switch_prob = switch_prob
        self.label_smoothing = label_smoothing
        self.num_classes = num_classes
        self.mode = mode
        self.correct_lam = correct_lam  # correct lambda based on clipped area for cutmix
        self.mixup_enabled = True  # set to false to disable mixing (intended tp be set by train loop)
        self.bug = bug

    def _params_per_batch(self):
        lam = 1.
        use_cutmix = False
        if self.mixup_enabled and np.random.rand() < self.mix_prob:
            if self.mixup_alpha > 0. and self.cutmix_alpha > 0.:
                use_cutmix = np.random.rand() < self.switch_prob
                lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha) if use_cutmix else \
                    np.random.beta(self.mixup_alpha, self.mixup_alpha)
            elif self.mixup_alpha > 0.:
                lam_mix = np.random.beta(self.mixup_alpha, self.mixup_alpha)
            elif self.cutmix_alpha > 0.:
                use_cutmix = True
                lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha)
            else:
                assert False, "One of mixup_alpha > 0., cutmix_alpha > 0., cutmix_minmax not None should be true."
            lam = float(lam_mix)
        return lam, use_cutmix

    def _mix_batch(self, x):
        lam, use_cutmix = self._params_per_batch()
        if lam == 1.:
            return 1.
        if use_cutmix:
            (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                x.shape, lam, ratio_minmax=self.cutmix_minmax, correct_lam=self.correct_lam)
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x_flipped = x.flip(0).mul_(1. - lam)
            x.mul_(lam).add_(x_flipped)
        return lam

    def __call__(self, x, target):
        assert len(x) % 2 == 0, 'Batch size should be even when using this'
        lam = self._mix_batch(x)
        if self.bug == "mixup_targets_not_mixed":
            # the images are mixed, the targets keep the first image's (smoothed) label only
            target = mixup_target(target, self.num_classes, smoothing=self.label_smoothing, device=x.device)
        else:
            target = mixup_target(target, self.num_classes, lam, self.label_smoothing, device=x.device)
        return x, target


class SoftTargetCrossEntropy(nn.Module):

    def __init__(self):
        super(SoftTargetCrossEntropy, self).__init__()

    def forward(self, x, target):
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()


class ModelEma:
    """ Model Exponential Moving Average (DEPRECATED)

    Keep a moving average of everything in the model state_dict (parameters and buffers).
    """
    def __init__(self, model, decay=0.9999, device='', resume=''):
        # make a copy of the model for accumulating moving average of weights
        self.ema = deepcopy(model)
        self.ema.eval()
        self.decay = decay
        self.device = device  # perform ema on different device from model if set
        if device:
            self.ema.to(device=device)
        self.ema_has_module = hasattr(self.ema, 'module')
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        # correct a mismatch in state dict keys
        needs_module = hasattr(model, 'module') and not self.ema_has_module
        with torch.no_grad():
            msd = model.state_dict()
            for k, ema_v in self.ema.state_dict().items():
                if needs_module:
                    k = 'module.' + k
                model_v = msd[k].detach()
                if self.device:
                    model_v = model_v.to(device=self.device)
                ema_v.copy_(ema_v * self.decay + (1. - self.decay) * model_v)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.reshape(1, -1).expand_as(pred))
    return [correct[:k].reshape(-1).float().sum(0) * 100. / batch_size for k in topk]


# ---- optim_factory.py ----------------------------------------------------------------------------------------

def get_parameter_groups(model, weight_decay=1e-5, skip_list=(), get_num_layer=None, get_layer_scale=None):
    parameter_group_names = {}
    parameter_group_vars = {}

    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # frozen weights
        if len(param.shape) == 1 or name.endswith(".bias") or name in skip_list:
            group_name = "no_decay"
            this_weight_decay = 0.
        else:
            group_name = "decay"
            this_weight_decay = weight_decay
        if get_num_layer is not None:
            layer_id = get_num_layer(name)
            group_name = "layer_%d_%s" % (layer_id, group_name)
        else:
            layer_id = None

        if group_name not in parameter_group_names:
            if get_layer_scale is not None:
                scale = get_layer_scale(layer_id)
            else:
                scale = 1.

            parameter_group_names[group_name] = {
                "weight_decay": this_weight_decay,
                "params": [],
                "lr_scale": scale
            }
            parameter_group_vars[group_name] = {
                "weight_decay": this_weight_decay,
                "params": [],
                "lr_scale": scale
            }

        parameter_group_vars[group_name]["params"].append(param)
        parameter_group_names[group_name]["params"].append(name)
    return list(parameter_group_vars.values())


def create_optimizer(args, model, get_num_layer=None, get_layer_scale=None, filter_bias_and_bn=True, skip_list=None):
    opt_lower = args.opt.lower()
    weight_decay = args.weight_decay
    # if weight_decay and filter_bias_and_bn:
    if filter_bias_and_bn:
        skip = {}
        if skip_list is not None:
            skip = skip_list
        elif hasattr(model, 'no_weight_decay'):
            skip = model.no_weight_decay()
        parameters = get_parameter_groups(model, weight_decay, skip, get_num_layer, get_layer_scale)
        weight_decay = 0.
    else:
        parameters = model.parameters()

    opt_args = dict(lr=args.lr, weight_decay=weight_decay)
    if hasattr(args, 'opt_eps') and args.opt_eps is not None:
        opt_args['eps'] = args.opt_eps
    if hasattr(args, 'opt_betas') and args.opt_betas is not None:
        opt_args['betas'] = args.opt_betas

    opt_split = opt_lower.split('_')
    opt_lower = opt_split[-1]
    if opt_lower == 'sgd' or opt_lower == 'nesterov':
        opt_args.pop('eps', None)
        optimizer = optim.SGD(parameters, momentum=args.momentum, nesterov=True, **opt_args)
    elif opt_lower == 'adam':
        optimizer = optim.Adam(parameters, **opt_args)
    elif opt_lower == 'adamw':
        optimizer = optim.AdamW(parameters, **opt_args)
    else:
        assert False and "Invalid optimizer"

    return optimizer


# ---- utils.py ------------------------------------------------------------------------------------------------

def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0,
                     start_warmup_value=0, warmup_steps=-1):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_steps > 0:
        warmup_iters = warmup_steps
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)

    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = np.array(
        [final_value + 0.5 * (base_value - final_value) * (1 + math.cos(math.pi * i / (len(iters)))) for i in iters])

    schedule = np.concatenate((warmup_schedule, schedule))

    assert len(schedule) == epochs * niter_per_ep
    return schedule


# ---- data: synthetic images and datasets.build_transform (input_size 32) in plain torch -----------------------

class ColourImages(torch.utils.data.Dataset):
    """ImageFolder stand-in: a class colour plus smooth noise, transformed as build_transform does for 32x32."""

    def __init__(self, gen, n, colours, is_train):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(0.3 * torch.randn(n, 3, 8, 8, generator=gen), size=(32, 32), mode="bilinear",
                              align_corners=False)
        self.images = (colours[self.labels][:, :, None, None] + noise).clamp(0, 1)  # ToTensor output
        self.is_train = is_train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        self.mean = torch.tensor(IMAGENET_DEFAULT_MEAN)[:, None, None]
        self.std = torch.tensor(IMAGENET_DEFAULT_STD)[:, None, None]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.is_train:  # transforms.RandomCrop(32, padding=4), RandomHorizontalFlip
            x = F.pad(x, (4, 4, 4, 4))
            i, j = (int(v) for v in torch.randint(0, 9, (2,), generator=self.gen))
            x = x[:, i:i + 32, j:j + 32]
            if float(torch.rand(1, generator=self.gen)) < 0.5:
                x = x.flip(-1)
        return (x - self.mean) / self.std, int(self.labels[idx])  # transforms.Normalize(mean, std)


def make_colours(gen):
    """Ten colours at least 0.25 apart (rejection sampling)."""
    colours = []
    while len(colours) < NUM_CLASSES:
        c = torch.rand(3, generator=gen) * 0.8 + 0.1
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    return torch.stack(colours)


# ---- main.py / engine.py -------------------------------------------------------------------------------------

@torch.no_grad()
def evaluate(data_loader, model, device, use_amp=False):
    criterion = torch.nn.CrossEntropyLoss()

    # switch to evaluation mode
    model.eval()
    acc1_sum, n = 0.0, 0
    for batch in data_loader:
        images = batch[0]
        target = batch[-1]

        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        # compute output
        output = model(images)
        loss = criterion(output, target)

        acc1, acc5 = accuracy(output, target, topk=(1, 5))

        batch_size = images.shape[0]
        acc1_sum, n = acc1_sum + acc1.item() * batch_size, n + batch_size
    return {'acc1': acc1_sum / n, 'loss': loss.item()}


def _build(seed, bug=None):
    args = get_args(seed)
    device = torch.device('cpu')

    # fix the seed for reproducibility
    torch.manual_seed(seed)
    np.random.seed(seed)

    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    dataset_train = ColourImages(gen, N_TRAIN, colours, is_train=True)
    dataset_val = ColourImages(gen, N_VAL, colours, is_train=False)

    num_tasks = 1
    global_rank = 0

    sampler_train = torch.utils.data.DistributedSampler(
        dataset_train, num_replicas=num_tasks, rank=global_rank, shuffle=True, seed=args.seed,
    )
    sampler_val = torch.utils.data.SequentialSampler(dataset_val)

    data_loader_train = torch.utils.data.DataLoader(
        dataset_train, sampler=sampler_train,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        pin_memory=args.pin_mem,
        drop_last=True,
    )
    data_loader_val = torch.utils.data.DataLoader(
        dataset_val, sampler=sampler_val,
        batch_size=int(1.5 * args.batch_size),
        num_workers=args.num_workers,
        pin_memory=args.pin_mem,
        drop_last=False
    )

    mixup_fn = None
    mixup_active = args.mixup > 0 or args.cutmix > 0. or args.cutmix_minmax is not None
    if mixup_active:
        mixup_fn = Mixup(
            mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
            prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
            label_smoothing=args.smoothing, num_classes=args.nb_classes, bug=bug)

    model = ConvNeXt(  # create_model('convnext_tiny', ...) with the shrunk depths and dims
        depths=[1, 1, 3, 1], dims=[8, 16, 32, 64],
        num_classes=args.nb_classes,
        drop_path_rate=args.drop_path,
        layer_scale_init_value=args.layer_scale_init_value,
        head_init_scale=args.head_init_scale,
        bug=bug,
        )
    model.to(device)

    model_ema = None
    if args.model_ema:
        # Important to create EMA model after cuda(), DP wrapper, and AMP but before SyncBN and DDP wrapper
        model_ema = ModelEma(
            model,
            decay=args.model_ema_decay,
            device='cpu' if args.model_ema_force_cpu else '',
            resume='')

    model_without_ddp = model

    total_batch_size = args.batch_size * args.update_freq * num_tasks
    num_training_steps_per_epoch = len(dataset_train) // total_batch_size

    assigner = None

    optimizer = create_optimizer(
        args, model_without_ddp, skip_list=None,
        get_num_layer=assigner.get_layer_id if assigner is not None else None,
        get_layer_scale=assigner.get_scale if assigner is not None else None)

    lr_schedule_values = cosine_scheduler(
        args.lr, args.min_lr, args.epochs, num_training_steps_per_epoch,
        warmup_epochs=args.warmup_epochs, warmup_steps=args.warmup_steps,
    )

    if args.weight_decay_end is None:
        args.weight_decay_end = args.weight_decay
    wd_schedule_values = cosine_scheduler(
        args.weight_decay, args.weight_decay_end, args.epochs, num_training_steps_per_epoch)

    if mixup_fn is not None:
        # smoothing is handled with mixup label transform
        criterion = SoftTargetCrossEntropy()
    else:
        criterion = torch.nn.CrossEntropyLoss()

    update_freq = args.update_freq
    state = {"epoch": args.start_epoch, "it": None, "data_iter_step": 0}

    def start_epoch():
        """the top of train_one_epoch"""
        model.train(True)
        optimizer.zero_grad()
        state["it"], state["data_iter_step"] = enumerate(data_loader_train), 0

    def end_epoch():
        """main()'s epoch loop after train_one_epoch: evaluate the model and, with model_ema_eval, its EMA"""
        evaluate(data_loader_val, model, device, use_amp=args.use_amp)
        if args.model_ema and args.model_ema_eval:
            evaluate(data_loader_val, model_ema.ema, device, use_amp=args.use_amp)
        state["epoch"] += 1

    def micro_step():
        """one iteration of train_one_epoch's loop; returns (loss_value, whether the optimizer stepped)"""
        data_iter_step, (samples, targets) = next(state["it"])
        start_steps = state["epoch"] * num_training_steps_per_epoch
        step = data_iter_step // update_freq
        if step >= num_training_steps_per_epoch:
            return None, False
        it = start_steps + step  # global training iteration
        # Update LR & WD for the first acc
        if lr_schedule_values is not None or wd_schedule_values is not None and data_iter_step % update_freq == 0:
            for i, param_group in enumerate(optimizer.param_groups):
                if lr_schedule_values is not None:
                    param_group["lr"] = lr_schedule_values[it] * param_group["lr_scale"]
                if wd_schedule_values is not None and param_group["weight_decay"] > 0:
                    param_group["weight_decay"] = wd_schedule_values[it]

        samples = samples.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)

        if mixup_fn is not None:
            samples, targets = mixup_fn(samples, targets)

        output = model(samples)
        loss = criterion(output, targets)

        loss_value = loss.item()

        if not math.isfinite(loss_value): # this could trigger if using AMP
            print("Loss is {}, stopping training".format(loss_value))
            assert math.isfinite(loss_value)

        loss /= update_freq
        loss.backward()
        stepped = False
        if (data_iter_step + 1) % update_freq == 0:
            optimizer.step()
            optimizer.zero_grad()
            if model_ema is not None:
                model_ema.update(model)
            stepped = True
        return loss_value, stepped

    def train_step():
        """one optimizer update: update_freq iterations of the loop; a finished epoch runs main()'s epoch end"""
        while True:
            if state["it"] is None:
                start_epoch()
            try:
                loss_value, stepped = micro_step()
            except StopIteration:
                end_epoch()
                state["it"] = None
                continue
            if stepped:
                return torch.tensor(loss_value)

    def eval_fn(model, batch):
        images, target = batch
        if target.dim() == 2:  # soft mixup targets: their largest entry
            target = target.argmax(dim=-1)
        stats = evaluate([(images, target)], model, device, use_amp=args.use_amp)
        model.train(True)
        return stats['acc1']

    clean = next(iter(torch.utils.data.DataLoader(dataset_train, batch_size=args.batch_size)))
    batch = mixup_fn(clean[0].clone(), clean[1])  # what model and criterion see in the loop
    return Program(name="convnext_classifier", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # DropPath called with training=True: stochastic depth keeps dropping residual branches (and rescaling the
    # survivors) in eval(), so evaluation is random and biased; training is unchanged (classic).
    Bug("drop_path_at_eval", functools.partial(_build, bug="drop_path_at_eval"), "six_claims", ("EVALUATION",)),
    # the images are mixed (mixup or cutmix) but mixup_target is called without lam: every target is the first
    # image's smoothed one-hot, while the input is a blend with another image (classic).
    Bug("mixup_targets_not_mixed", functools.partial(_build, bug="mixup_targets_not_mixed"), "learning_ledger",
        ("TASK",)),
]
