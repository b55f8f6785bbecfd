"""FixMatch semi-supervised classification: a WideResNet (leaky ReLU, BatchNorm momentum 0.001) trained on a labelled
batch and ``mu`` times as many unlabelled images, each seen under a weak augmentation (flip + reflect-padded crop) and a
strong one (the same plus RandAugmentMC(2, 10) and Cutout); the three are concatenated, ``interleave``d (so BatchNorm
sees a mix in every slice), run in one forward, ``de_interleave``d; the loss is the labelled cross-entropy plus
``lambda_u`` times the cross-entropy of the strong view's logits against the weak view's hard pseudo-labels, masked to
those whose confidence reaches the threshold 0.95; SGD (lr 0.03, momentum 0.9, Nesterov, weight decay 5e-4 except
biases and BatchNorm) with the cosine schedule, and an EMA copy of the model (decay 0.999) used for testing.

Source: https://github.com/kekmodel/FixMatch-pytorch
Commit: 040be3b8950300b052f810df31a0c6c09561e09f
Files: train.py (main, train, test, interleave, de_interleave, get_cosine_schedule_with_warmup), models/wideresnet.py,
models/ema.py, dataset/cifar.py (x_u_split, TransformFixMatch, CIFAR10SSL), dataset/randaugment.py
(fixmatch_augment_pool, RandAugmentMC, CutoutAbs), utils/misc.py (accuracy)
License: MIT (Copyright (c) 2019 Jungdae Kim, Qing Yu; full text in LICENSES/kekmodel-FixMatch-pytorch.txt)
Domain: semi-supervised image classification (FixMatch: pseudo-labels with a confidence threshold, weak/strong
augmentation, EMA model)

Deviations from the original:
- sizes for 2 CPU cores: WideResNet-28-2 on 32x32 CIFAR-10 -> WideResNet-10-1 (depth 10, widen_factor 1) on 16x16
  images; batch_size 64 -> 8 (mu 7 kept: 8 labelled + 2 x 56 unlabelled images per step); num_labeled 4000 -> 80 of
  512 images; CutoutAbs's ``int(32*0.5)`` -> ``int(16*0.5)`` (half the image side, as in the original); lr, momentum,
  weight decay, threshold, T, lambda_u, ema_decay, total_steps (2**20, the cosine schedule's length) and eval_step
  (1024) unchanged;
- data: CIFAR-10 (torchvision download) is replaced by 512 synthetic 16x16 RGB uint8 images made from ``seed``: class
  ``c`` (0-9) is a colour of a fixed palette filling a square of random size and place on a dark noisy background;
  ``CIFAR10SSL`` keeps its indexing of ``data``/``targets`` (the base class is a plain Dataset here); no test set is
  built (``eval_fn`` takes the batch it is given);
- torchvision and PIL are not used: the transforms are written out on uint8 ``H x W x 3`` numpy arrays --
  RandomHorizontalFlip, RandomCrop with reflect padding, ToTensor + Normalize (cifar10 mean/std), and the fourteen ops
  of ``fixmatch_augment_pool`` with the same parameter scaling (``_float_parameter`` / ``_int_parameter``): PIL's
  ImageOps (autocontrast, equalize, posterize, solarize), ImageEnhance (Brightness, Color, Contrast, Sharpness as
  blends with black, the grey image, its mean and the SMOOTH-filtered image) and the affine transforms (rotate about
  the centre, shear, translate) with nearest sampling and black fill, as PIL's defaults are;
  RandAugmentMC and CutoutAbs keep their ``random`` / ``np.random`` draws; flip and crop draw from torch's RNG as
  torchvision's do;
- no GPU, no DistributedDataParallel, no apex AMP; ``num_workers`` 0; the data loaders' RandomSampler takes a seeded
  generator; ``labeled_iter.next()`` (Python 2 iterator style, failing on current PyTorch) is ``next(labeled_iter)``
  as the comments beside it say; ``set_seed`` seeds ``random``, ``numpy`` and ``torch`` with the build's ``seed``;
- ``train`` is not run as one loop: ``train_step`` is one iteration of its ``for batch_idx`` body (from the batch
  fetch to ``model.zero_grad()``) and returns ``loss``; AverageMeter bookkeeping, tqdm, tensorboard, checkpoints and
  logging are left out; ``eval_fn`` is ``test``'s body on the model it is given (the script passes the EMA copy) and
  returns the top-1 accuracy, putting a training model back in train mode afterwards;
- the Program's batch is one step's interleaved inputs with the labelled targets, and ``loss_fn`` the step's
  ``Lx + lambda_u * Lu`` on the model's logits for it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import math
import pathlib
import random
import sys
import types
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset, RandomSampler

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

logger = logging.getLogger(__name__)

SIZE = 16
N_IMAGES = 512
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                    [145, 30, 180], [70, 240, 240], [240, 50, 230], [250, 190, 190], [128, 128, 0]], dtype=np.float64)


# ---- torchvision.transforms, written out on uint8 H x W x 3 numpy images -----------------------------------------

def random_horizontal_flip(img, p=0.5):
    if torch.rand(1) < p:
        return img[:, ::-1].copy()
    return img


def random_crop(img, size, padding, padding_mode='reflect'):
    img = np.pad(img, ((padding, padding), (padding, padding), (0, 0)), mode=padding_mode)
    h, w = img.shape[:2]
    i = int(torch.randint(0, h - size + 1, size=(1,)))
    j = int(torch.randint(0, w - size + 1, size=(1,)))
    return img[i:i + size, j:j + size]


def to_tensor_normalize(img, mean, std):
    x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div(255)
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


def _blend(degenerate, img, factor):
    return np.clip(degenerate + factor * (img.astype(np.float64) - degenerate), 0, 255).astype(np.uint8)


def _grey(img):
    return img.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def _affine(img, a, b, c, d, e, f):
    """PIL's Image.transform(AFFINE, (a, b, c, d, e, f)): output (x, y) takes input (a x + b y + c, d x + e y + f),
    nearest neighbour, black outside."""
    h, w = img.shape[:2]
    y, x = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    xs = np.floor(a * x + b * y + c).astype(int)
    ys = np.floor(d * x + e * y + f).astype(int)
    ok = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
    out = np.zeros_like(img)
    out[ok] = img[ys[ok], xs[ok]]
    return out


# ---- dataset/randaugment.py (the ops of fixmatch_augment_pool, on numpy images) ----------------------------------
# code in this file is adpated from
# https://github.com/ildoonet/pytorch-randaugment/blob/master/RandAugment/augmentations.py
# https://github.com/google-research/fixmatch/blob/master/third_party/auto_augment/augmentations.py
# https://github.com/google-research/fixmatch/blob/master/libml/ctaugment.py

PARAMETER_MAX = 10


def AutoContrast(img, **kwarg):
    out = np.empty_like(img)
    for ch in range(3):
        lo, hi = int(img[..., ch].min()), int(img[..., ch].max())
        if hi <= lo:
            out[..., ch] = img[..., ch]
        else:
            out[..., ch] = np.clip((img[..., ch].astype(np.float64) - lo) * 255.0 / (hi - lo), 0, 255).astype(np.uint8)
    return out


def Brightness(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    return _blend(np.zeros(img.shape), img, v)


def Color(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    return _blend(_grey(img)[..., None], img, v)


def Contrast(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    return _blend(np.full(img.shape, int(_grey(img).mean() + 0.5), dtype=np.float64), img, v)


def CutoutAbs(img, v, **kwarg):
    h, w = img.shape[:2]
    x0 = np.random.uniform(0, w)
    y0 = np.random.uniform(0, h)
    x0 = int(max(0, x0 - v / 2.))
    y0 = int(max(0, y0 - v / 2.))
    x1 = int(min(w, x0 + v))
    y1 = int(min(h, y0 + v))
    # gray
    color = (127, 127, 127)
    img = img.copy()
    img[y0:y1 + 1, x0:x1 + 1] = color  # PIL's rectangle includes its far corner
    return img


def Equalize(img, **kwarg):
    out = np.empty_like(img)
    for ch in range(3):
        hist = np.bincount(img[..., ch].ravel(), minlength=256)
        nonzero = hist[hist > 0]
        step = (nonzero.sum() - nonzero[-1]) // 255 if len(nonzero) else 0
        if step == 0:
            out[..., ch] = img[..., ch]
            continue
        lut = (np.cumsum(hist) - hist + step // 2) // step
        out[..., ch] = np.clip(lut, 0, 255).astype(np.uint8)[img[..., ch]]
    return out


def Identity(img, **kwarg):
    return img


def Posterize(img, v, max_v, bias=0):
    v = _int_parameter(v, max_v) + bias
    return img & np.uint8(~(2 ** (8 - v) - 1) & 0xFF)


def Rotate(img, v, max_v, bias=0):
    v = _int_parameter(v, max_v) + bias
    if random.random() < 0.5:
        v = -v
    h, w = img.shape[:2]
    th = math.radians(v)
    cx, cy = w / 2.0, h / 2.0
    a, b, d, e = math.cos(th), math.sin(th), -math.sin(th), math.cos(th)
    return _affine(img, a, b, cx - a * cx - b * cy, d, e, cy - d * cx - e * cy)


def Sharpness(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    k = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float64) / 13.0
    f = img.astype(np.float64)
    smooth = f.copy()
    h, w = img.shape[:2]
    acc = np.zeros((h - 2, w - 2, 3))
    for dy in range(3):
        for dx in range(3):
            acc += k[dy, dx] * f[dy:dy + h - 2, dx:dx + w - 2]
    smooth[1:-1, 1:-1] = acc
    return _blend(smooth, img, v)


def ShearX(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    if random.random() < 0.5:
        v = -v
    return _affine(img, 1, v, 0, 0, 1, 0)


def ShearY(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    if random.random() < 0.5:
        v = -v
    return _affine(img, 1, 0, 0, v, 1, 0)


def Solarize(img, v, max_v, bias=0):
    v = _int_parameter(v, max_v) + bias
    threshold = 256 - v
    return np.where(img < threshold, img, 255 - img).astype(np.uint8)


def TranslateX(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    if random.random() < 0.5:
        v = -v
    v = int(v * img.shape[1])
    return _affine(img, 1, 0, v, 0, 1, 0)


def TranslateY(img, v, max_v, bias=0):
    v = _float_parameter(v, max_v) + bias
    if random.random() < 0.5:
        v = -v
    v = int(v * img.shape[0])
    return _affine(img, 1, 0, 0, 0, 1, v)


def _float_parameter(v, max_v):
    return float(v) * max_v / PARAMETER_MAX


def _int_parameter(v, max_v):
    return int(v * max_v / PARAMETER_MAX)


def fixmatch_augment_pool():
    # FixMatch paper
    augs = [(AutoContrast, None, None),
            (Brightness, 0.9, 0.05),
            (Color, 0.9, 0.05),
            (Contrast, 0.9, 0.05),
            (Equalize, None, None),
            (Identity, None, None),
            (Posterize, 4, 4),
            (Rotate, 30, 0),
            (Sharpness, 0.9, 0.05),
            (ShearX, 0.3, 0),
            (ShearY, 0.3, 0),
            (Solarize, 256, 0),
            (TranslateX, 0.3, 0),
            (TranslateY, 0.3, 0)]
    return augs


class RandAugmentMC(object):
    def __init__(self, n, m):
        assert n >= 1
        assert 1 <= m <= 10
        self.n = n
        self.m = m
        self.augment_pool = fixmatch_augment_pool()

    def __call__(self, img):
        ops = random.choices(self.augment_pool, k=self.n)
        for op, max_v, bias in ops:
            v = np.random.randint(1, self.m)
            if random.random() < 0.5:
                img = op(img, v=v, max_v=max_v, bias=bias)
        img = CutoutAbs(img, int(SIZE*0.5))
        return img


# ---- dataset/cifar.py --------------------------------------------------------------------------------------------

cifar10_mean = (0.4914, 0.4822, 0.4465)
cifar10_std = (0.2471, 0.2435, 0.2616)


def x_u_split(args, labels):
    label_per_class = args.num_labeled // args.num_classes
    labels = np.array(labels)
    labeled_idx = []
    # unlabeled data: all data (https://github.com/kekmodel/FixMatch-pytorch/issues/10)
    unlabeled_idx = np.array(range(len(labels)))
    for i in range(args.num_classes):
        idx = np.where(labels == i)[0]
        idx = np.random.choice(idx, label_per_class, False)
        labeled_idx.extend(idx)
    labeled_idx = np.array(labeled_idx)
    assert len(labeled_idx) == args.num_labeled

    if args.expand_labels or args.num_labeled < args.batch_size:
        num_expand_x = math.ceil(
            args.batch_size * args.eval_step / args.num_labeled)
        labeled_idx = np.hstack([labeled_idx for _ in range(num_expand_x)])
    np.random.shuffle(labeled_idx)
    return labeled_idx, unlabeled_idx


class TransformLabeled(object):
    """transforms.Compose([RandomHorizontalFlip(), RandomCrop(size, padding=int(size*0.125), padding_mode='reflect'),
    ToTensor(), Normalize(mean=cifar10_mean, std=cifar10_std)])"""

    def __call__(self, x):
        x = random_horizontal_flip(x)
        x = random_crop(x, size=SIZE, padding=int(SIZE*0.125), padding_mode='reflect')
        return to_tensor_normalize(x, cifar10_mean, cifar10_std)


class TransformFixMatch(object):
    def __init__(self, mean, std):
        self.randaugment = RandAugmentMC(n=2, m=10)
        self.mean, self.std = mean, std

    def weak(self, x):
        x = random_horizontal_flip(x)
        return random_crop(x, size=SIZE, padding=int(SIZE*0.125), padding_mode='reflect')

    def strong(self, x):
        return self.randaugment(self.weak(x))

    def normalize(self, x):
        return to_tensor_normalize(x, self.mean, self.std)

    def __call__(self, x):
        weak = self.weak(x)
        strong = self.strong(x)
        return self.normalize(weak), self.normalize(strong)


def make_images(gen, n):
    """Class c: a square of palette colour c (random side 6-12, random place) on a dark noisy background."""
    targets = gen.integers(0, 10, size=n)
    data = gen.integers(0, 40, size=(n, SIZE, SIZE, 3)).astype(np.float64)
    for k, c in enumerate(targets):
        side = int(gen.integers(6, 13))
        y, x = gen.integers(0, SIZE - side + 1, size=2)
        data[k, y:y + side, x:x + side] = PALETTE[c] * gen.uniform(0.8, 1.0)
    return data.astype(np.uint8), targets.tolist()


class CIFAR10SSL(Dataset):
    def __init__(self, base, indexs, transform=None, target_transform=None):
        self.data, self.targets = base
        self.transform = transform
        self.target_transform = target_transform
        if indexs is not None:
            self.data = self.data[indexs]
            self.targets = np.array(self.targets)[indexs]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], self.targets[index]

        if self.transform is not None:
            img = self.transform(img)

        if self.target_transform is not None:
            target = self.target_transform(target)

        return img, target


# ---- models/wideresnet.py ----------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, drop_rate=0.0, activate_before_residual=False):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes, momentum=0.001)
        self.relu1 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes, momentum=0.001)
        self.relu2 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1,
                               padding=1, bias=False)
        self.drop_rate = drop_rate
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                                                                padding=0, bias=False) or None
        self.activate_before_residual = activate_before_residual

    def forward(self, x):
        if not self.equalInOut and self.activate_before_residual == True:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, drop_rate=0.0, activate_before_residual=False):
        super(NetworkBlock, self).__init__()
        self.layer = self._make_layer(
            block, in_planes, out_planes, nb_layers, stride, drop_rate, activate_before_residual)

    def _make_layer(self, block, in_planes, out_planes, nb_layers, stride, drop_rate, activate_before_residual):
        layers = []
        for i in range(int(nb_layers)):
            layers.append(block(i == 0 and in_planes or out_planes, out_planes,
                                i == 0 and stride or 1, drop_rate, activate_before_residual))
        return nn.Sequential(*layers)

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    def __init__(self, num_classes, depth=28, widen_factor=2, drop_rate=0.0):
        super(WideResNet, self).__init__()
        channels = [16, 16*widen_factor, 32*widen_factor, 64*widen_factor]
        assert((depth - 4) % 6 == 0)
        n = (depth - 4) / 6
        block = BasicBlock
        # 1st conv before any network block
        self.conv1 = nn.Conv2d(3, channels[0], kernel_size=3, stride=1,
                               padding=1, bias=False)
        # 1st block
        self.block1 = NetworkBlock(
            n, channels[0], channels[1], block, 1, drop_rate, activate_before_residual=True)
        # 2nd block
        self.block2 = NetworkBlock(
            n, channels[1], channels[2], block, 2, drop_rate)
        # 3rd block
        self.block3 = NetworkBlock(
            n, channels[2], channels[3], block, 2, drop_rate)
        # global average pooling and classifier
        self.bn1 = nn.BatchNorm2d(channels[3], momentum=0.001)
        self.relu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.fc = nn.Linear(channels[3], num_classes)
        self.channels = channels[3]

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight,
                                        mode='fan_out',
                                        nonlinearity='leaky_relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1.0)
                nn.init.constant_(m.bias, 0.0)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.constant_(m.bias, 0.0)

    def forward(self, x):
        out = self.conv1(x)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(-1, self.channels)
        return self.fc(out)


def build_wideresnet(depth, widen_factor, dropout, num_classes):
    logger.info(f"Model: WideResNet {depth}x{widen_factor}")
    return WideResNet(depth=depth,
                      widen_factor=widen_factor,
                      drop_rate=dropout,
                      num_classes=num_classes)


# ---- models/ema.py -----------------------------------------------------------------------------------------------

class ModelEMA(object):
    def __init__(self, args, model, decay):
        self.ema = deepcopy(model)
        self.ema.to(args.device)
        self.ema.eval()
        self.decay = decay
        self.ema_has_module = hasattr(self.ema, 'module')
        # Fix EMA. https://github.com/valencebond/FixMatch_pytorch thank you!
        self.param_keys = [k for k, _ in self.ema.named_parameters()]
        self.buffer_keys = [k for k, _ in self.ema.named_buffers()]
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        needs_module = hasattr(model, 'module') and not self.ema_has_module
        with torch.no_grad():
            msd = model.state_dict()
            esd = self.ema.state_dict()
            for k in self.param_keys:
                if needs_module:
                    j = 'module.' + k
                else:
                    j = k
                model_v = msd[j].detach()
                ema_v = esd[k]
                esd[k].copy_(ema_v * self.decay + (1. - self.decay) * model_v)

            for k in self.buffer_keys:
                if needs_module:
                    j = 'module.' + k
                else:
                    j = k
                esd[k].copy_(msd[j])


# ---- utils/misc.py -----------------------------------------------------------------------------------------------

def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.reshape(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


# ---- train.py ----------------------------------------------------------------------------------------------------

def set_seed(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)


def get_cosine_schedule_with_warmup(optimizer,
                                    num_warmup_steps,
                                    num_training_steps,
                                    num_cycles=7./16.,
                                    last_epoch=-1):
    def _lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        no_progress = float(current_step - num_warmup_steps) / \
            float(max(1, num_training_steps - num_warmup_steps))
        return max(0., math.cos(math.pi * num_cycles * no_progress))

    return LambdaLR(optimizer, _lr_lambda, last_epoch)


def interleave(x, size):
    s = list(x.shape)
    return x.reshape([-1, size] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])


def de_interleave(x, size):
    s = list(x.shape)
    return x.reshape([size, -1] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])


def fixmatch_loss(args, logits, batch_size, targets_x, bug=None):
    """The loss lines of train()'s loop body, from the model's logits."""
    if bug == "logits_not_deinterleaved":
        pass
    else:
        logits = de_interleave(logits, 2*args.mu+1)
    logits_x = logits[:batch_size]
    logits_u_w, logits_u_s = logits[batch_size:].chunk(2)
    del logits

    Lx = F.cross_entropy(logits_x, targets_x, reduction='mean')

    pseudo_label = torch.softmax(logits_u_w.detach()/args.T, dim=-1)
    max_probs, targets_u = torch.max(pseudo_label, dim=-1)
    mask = max_probs.ge(args.threshold).float()

    if bug == "threshold_mask_dropped":
        Lu = (F.cross_entropy(logits_u_s, targets_u,
                              reduction='none')).mean()
    else:
        Lu = (F.cross_entropy(logits_u_s, targets_u,
                              reduction='none') * mask).mean()

    loss = Lx + args.lambda_u * Lu
    return loss, Lx, Lu, mask


def _build(seed, bug=None):
    args = types.SimpleNamespace(
        dataset='cifar10', num_labeled=80, expand_labels=False, arch='wideresnet', total_steps=2**20,
        eval_step=1024, start_epoch=0, batch_size=8, lr=0.03, warmup=0, wdecay=5e-4, nesterov=True, use_ema=True,
        ema_decay=0.999, mu=7, lambda_u=1, T=1, threshold=0.95, seed=seed, amp=False, local_rank=-1,
        no_progress=True, device=torch.device('cpu'), world_size=1, n_gpu=0)
    set_seed(args)

    def create_model(args):
        model = build_wideresnet(depth=args.model_depth,
                                 widen_factor=args.model_width,
                                 dropout=0,
                                 num_classes=args.num_classes)
        return model

    args.num_classes = 10
    args.model_depth = 10
    args.model_width = 1

    gen = np.random.default_rng(seed)
    base = make_images(gen, N_IMAGES)
    train_labeled_idxs, train_unlabeled_idxs = x_u_split(args, base[1])
    labeled_dataset = CIFAR10SSL(base, train_labeled_idxs, transform=TransformLabeled())
    unlabeled_dataset = CIFAR10SSL(base, train_unlabeled_idxs,
                                   transform=TransformFixMatch(mean=cifar10_mean, std=cifar10_std))

    labeled_trainloader = DataLoader(
        labeled_dataset,
        sampler=RandomSampler(labeled_dataset, generator=torch.Generator().manual_seed(seed)),
        batch_size=args.batch_size,
        num_workers=0,
        drop_last=True)

    unlabeled_trainloader = DataLoader(
        unlabeled_dataset,
        sampler=RandomSampler(unlabeled_dataset, generator=torch.Generator().manual_seed(seed + 1)),
        batch_size=args.batch_size*args.mu,
        num_workers=0,
        drop_last=True)

    model = create_model(args)
    model.to(args.device)

    no_decay = ['bias', 'bn']
    grouped_parameters = [
        {'params': [p for n, p in model.named_parameters() if not any(
            nd in n for nd in no_decay)], 'weight_decay': args.wdecay},
        {'params': [p for n, p in model.named_parameters() if any(
            nd in n for nd in no_decay)], 'weight_decay': 0.0}
    ]
    optimizer = optim.SGD(grouped_parameters, lr=args.lr,
                          momentum=0.9, nesterov=args.nesterov)

    scheduler = get_cosine_schedule_with_warmup(
        optimizer, args.warmup, args.total_steps)

    ema_model = ModelEMA(args, model, args.ema_decay)

    model.zero_grad()

    # train(): the loop's state
    it = {"labeled": iter(labeled_trainloader), "unlabeled": iter(unlabeled_trainloader)}
    model.train()

    def next_batches():
        try:
            inputs_x, targets_x = next(it["labeled"])
        except StopIteration:
            it["labeled"] = iter(labeled_trainloader)
            inputs_x, targets_x = next(it["labeled"])
        try:
            (inputs_u_w, inputs_u_s), _ = next(it["unlabeled"])
        except StopIteration:
            it["unlabeled"] = iter(unlabeled_trainloader)
            (inputs_u_w, inputs_u_s), _ = next(it["unlabeled"])
        return inputs_x, targets_x, inputs_u_w, inputs_u_s

    def train_step():
        inputs_x, targets_x, inputs_u_w, inputs_u_s = next_batches()

        batch_size = inputs_x.shape[0]
        inputs = interleave(
            torch.cat((inputs_x, inputs_u_w, inputs_u_s)), 2*args.mu+1).to(args.device)
        targets_x = targets_x.to(args.device)
        logits = model(inputs)
        loss, Lx, Lu, mask = fixmatch_loss(args, logits, batch_size, targets_x, bug=bug)

        loss.backward()

        optimizer.step()
        scheduler.step()
        if args.use_ema:
            ema_model.update(model)
        model.zero_grad()
        return loss.detach()

    # the Program's batch: one step's interleaved inputs (drawn from loaders of their own, same data and transforms)
    probe_l = next(iter(DataLoader(labeled_dataset, batch_size=args.batch_size, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed + 2))))
    probe_u = next(iter(DataLoader(unlabeled_dataset, batch_size=args.batch_size*args.mu, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed + 3))))
    (probe_u_w, probe_u_s), _ = probe_u
    probe_inputs = interleave(torch.cat((probe_l[0], probe_u_w, probe_u_s)), 2*args.mu+1)

    def loss_fn(logits, targets_x):
        return fixmatch_loss(args, logits, targets_x.shape[0], targets_x, bug=bug)[0]

    def eval_fn(model, batch):
        """test()'s body on one labelled batch: top-1 accuracy."""
        inputs, targets = batch
        was_training = model.training
        with torch.no_grad():
            model.eval()
            outputs = model(inputs)
            prec1, prec5 = accuracy(outputs, targets, topk=(1, 5))
        model.train(was_training)
        return float(prec1)

    return Program(name="fixmatch_wideresnet", model=model, batch=(probe_inputs, probe_l[1]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=labeled_trainloader)


build = functools.partial(_build, bug=None)


BUGS = [
    # the confidence mask left out of the unlabelled loss: every pseudo-label is trained on, however unsure (classic:
    # the mask not reaching the loss).
    Bug("threshold_mask_dropped", functools.partial(_build, bug="threshold_mask_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the logits are not de-interleaved: logits[:batch_size] belong to other images than targets_x, and the weak and
    # strong chunks are mixed up (classic: labels misaligned by a layout step left out).
    Bug("logits_not_deinterleaved", functools.partial(_build, bug="logits_not_deinterleaved"), "learning_ledger",
        ("TASK",)),
]
