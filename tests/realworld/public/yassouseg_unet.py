"""UNet of yassouali/pytorch-segmentation trained by the repository's trainer with its ``config.json`` (arch
switched to ``UNet``, the from-scratch model of ``models/unet.py``): ``x2conv`` blocks (conv-BN-ReLU twice, inner
width half the output), four ``encoder`` stages with ceil-mode max pooling, a middle ``x2conv``, four ``decoder``
stages (``ConvTranspose2d`` up, bilinear resize when the sizes differ, concatenation with the skip, ``x2conv``), a 1x1
classifier; Kaiming-normal init. ``base/base_trainer.py`` builds SGD(lr 0.01, momentum 0.9, weight_decay 1e-4) with
``differential_lr`` (decoder params at lr, backbone params -- none for UNet -- at lr/10) and the ``Poly`` scheduler of
``utils/lr_scheduler.py`` (``(1 - T/N) ** 0.9`` over epochs x iterations); ``trainer.py``'s ``_train_epoch`` calls
``lr_scheduler.step(epoch=epoch-1)`` before every batch, then ``zero_grad``, ``CrossEntropyLoss2d`` (``ignore_index``
255), ``backward``, ``step``; ``_valid_epoch`` runs under ``eval()`` and ``no_grad`` every ``val_per_epochs``.
``base/base_dataset.py``'s ``_augmentation`` scales the long side to a random size in [0.5, 2] x ``base_size``,
rotates by a random integer angle in [-10, 10], zero-pads to the crop size, crops at random and flips at random.

Source: https://github.com/yassouali/pytorch-segmentation
Commit: 33434fa987bbf348c961473c15f044b85e32ca7f
Files: train.py, trainer.py, config.json, base/base_trainer.py, base/base_dataset.py, base/base_model.py,
models/unet.py, utils/losses.py, utils/lr_scheduler.py, utils/metrics.py
License: MIT (LICENSES/yassouali-pytorch-segmentation.txt)
Domain: semantic segmentation (multi-class UNet, ignore label, poly lr)

Deviations from the original:
- sizes: the UNet widths 64/128/256/512/1024 -> 8/16/32/64/128; ``base_size`` 400 -> 32 and ``crop_size`` 380 ->
  32; batch size 8 kept; 19 CityScapes classes -> 4; 96 training and 16 validation images; 80 epochs kept (the poly
  schedule's horizon);
- data: CityScapes is replaced by synthetic scenes made from ``seed`` (a noisy background, class 0, with a disc of
  class 1, a square of class 2 and a horizontal bar of class 3, each with its own colour; the one-pixel outlines of
  the objects are labelled 255, the ignore label, as VOC/CityScapes borders are); cv2, PIL and torchvision are not
  available, so ``cv2.resize`` (linear / nearest), ``cv2.warpAffine`` (linear / nearest, zero border),
  ``copyMakeBorder``, ``ToTensor`` and ``Normalize`` are written out in plain torch; ``random`` is a
  ``random.Random(seed)``; the validation set uses ``_val_augmentation`` (a no-op at this size);
- the logger, tensorboard writer, tqdm bar, checkpointing, early stopping and the visualization transforms are
  dropped; ``prefetch`` is off (CPU, as the trainer does itself); ``eval_metrics`` keeps only the pixel accuracy;
- one ``train_step`` is one batch of ``_train_epoch``; when the loader is exhausted the epoch ends as in
  ``BaseTrainer.train``: ``_valid_epoch`` every ``val_per_epochs`` (5) epochs, then the next ``_train_epoch``'s
  ``model.train()``; ``eval_fn`` is the pixel accuracy on a batch under ``eval()``.
"""
# ruff: noqa: UP008, SIM101, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH = 8  # 64 in models/unet.py
NUM_CLASSES, IMG, BASE_SIZE, CROP_SIZE, BATCH_SIZE, N_TRAIN, N_VAL = 4, 32, 32, 32, 8, 96, 16
CONFIG = {"optimizer": {"differential_lr": True, "args": {"lr": 0.01, "weight_decay": 1e-4, "momentum": 0.9}},
          "ignore_index": 255, "trainer": {"epochs": 80, "val_per_epochs": 5}}
MEAN, STD = [0.28689529, 0.32513294, 0.28389176], [0.17613647, 0.18099176, 0.17772235]  # CityScapes' MEAN/STD


# ---- models/unet.py ------------------------------------------------------------------------------------------

def x2conv(in_channels, out_channels, inner_channels=None):
    inner_channels = out_channels // 2 if inner_channels is None else inner_channels
    down_conv = nn.Sequential(
        nn.Conv2d(in_channels, inner_channels, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(inner_channels),
        nn.ReLU(inplace=True),
        nn.Conv2d(inner_channels, out_channels, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True))
    return down_conv

class encoder(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(encoder, self).__init__()
        self.down_conv = x2conv(in_channels, out_channels)
        self.pool = nn.MaxPool2d(kernel_size=2, ceil_mode=True)

    def forward(self, x):
        x = self.down_conv(x)
        x = self.pool(x)
        return x

class decoder(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(decoder, self).__init__()
        self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
        self.up_conv = x2conv(in_channels, out_channels)

    def forward(self, x_copy, x, interpolate=True):
        x = self.up(x)

        if (x.size(2) != x_copy.size(2)) or (x.size(3) != x_copy.size(3)):
            if interpolate:
                # Iterpolating instead of padding
                x = F.interpolate(x, size=(x_copy.size(2), x_copy.size(3)),
                                mode="bilinear", align_corners=True)
            else:
                # Padding in case the incomping volumes are of different sizes
                diffY = x_copy.size()[2] - x.size()[2]
                diffX = x_copy.size()[3] - x.size()[3]
                x = F.pad(x, (diffX // 2, diffX - diffX // 2,
                                diffY // 2, diffY - diffY // 2))

        # Concatenate
        x = torch.cat([x_copy, x], dim=1)
        x = self.up_conv(x)
        return x


class UNet(nn.Module):  # BaseModel adds only a logger and summaries
    def __init__(self, num_classes, in_channels=3, freeze_bn=False, **_):
        super(UNet, self).__init__()
        w = WIDTH

        self.start_conv = x2conv(in_channels, w)
        self.down1 = encoder(w, w * 2)
        self.down2 = encoder(w * 2, w * 4)
        self.down3 = encoder(w * 4, w * 8)
        self.down4 = encoder(w * 8, w * 16)

        self.middle_conv = x2conv(w * 16, w * 16)

        self.up1 = decoder(w * 16, w * 8)
        self.up2 = decoder(w * 8, w * 4)
        self.up3 = decoder(w * 4, w * 2)
        self.up4 = decoder(w * 2, w)
        self.final_conv = nn.Conv2d(w, num_classes, kernel_size=1)
        self._initialize_weights()

        if freeze_bn:
            self.freeze_bn()

    def _initialize_weights(self):
        for module in self.modules():
            if isinstance(module, nn.Conv2d) or isinstance(module, nn.Linear):
                nn.init.kaiming_normal_(module.weight)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.BatchNorm2d):
                module.weight.data.fill_(1)
                module.bias.data.zero_()

    def forward(self, x):
        x1 = self.start_conv(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.middle_conv(self.down4(x4))

        x = self.up1(x4, x)
        x = self.up2(x3, x)
        x = self.up3(x2, x)
        x = self.up4(x1, x)

        x = self.final_conv(x)
        return x

    def get_backbone_params(self):
        # There is no backbone for unet, all the parameters are trained from scratch
        return []

    def get_decoder_params(self):
        return self.parameters()

    def freeze_bn(self):
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d): module.eval()


# ---- utils/losses.py, utils/lr_scheduler.py ------------------------------------------------------------------

class CrossEntropyLoss2d(nn.Module):
    def __init__(self, weight=None, ignore_index=255, reduction='mean'):
        super(CrossEntropyLoss2d, self).__init__()
        self.CE =  nn.CrossEntropyLoss(weight=weight, ignore_index=ignore_index, reduction=reduction)

    def forward(self, output, target):
        loss = self.CE(output, target)
        return loss


class Poly(_LRScheduler):
    def __init__(self, optimizer, num_epochs, iters_per_epoch=0, warmup_epochs=0, last_epoch=-1):
        self.iters_per_epoch = iters_per_epoch
        self.cur_iter = 0
        self.N = num_epochs * iters_per_epoch
        self.warmup_iters = warmup_epochs * iters_per_epoch
        super(Poly, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        T = self.last_epoch * self.iters_per_epoch + self.cur_iter
        factor =  pow((1 - 1.0 * T / self.N), 0.9)
        if self.warmup_iters > 0 and T < self.warmup_iters:
            factor = 1.0 * T / self.warmup_iters

        self.cur_iter %= self.iters_per_epoch
        self.cur_iter += 1
        return [base_lr * factor for base_lr in self.base_lrs]


# ---- data: synthetic scenes and base/base_dataset.py's _augmentation in plain torch --------------------------

def synthetic_scenes(gen, n):
    """uint8 HWC images and int32 labels (0..3, 255 on the objects' outlines)."""
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    colours = gen.uniform(40, 215, (NUM_CLASSES, 3))
    images, labels = [], []
    for _ in range(n):
        label = np.zeros((IMG, IMG), np.int32)
        cy, cx, r = gen.uniform(6, 26), gen.uniform(6, 26), gen.uniform(4, 8)
        label[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = 1
        sy, sx, s = int(gen.integers(0, 22)), int(gen.integers(0, 22)), int(gen.integers(6, 10))
        label[sy:sy + s, sx:sx + s] = 2
        by = int(gen.integers(0, 29))
        label[by:by + 3, 4:28] = 3
        image = colours[label] + gen.normal(0, 12, (IMG, IMG, 3))
        edge = np.zeros_like(label, bool)
        edge[1:, :] |= label[1:, :] != label[:-1, :]
        edge[:, 1:] |= label[:, 1:] != label[:, :-1]
        label[edge] = 255
        images.append(np.clip(image, 0, 255).astype(np.uint8))
        labels.append(label)
    return images, labels


def _resize(arr, h, w, nearest):
    t = torch.from_numpy(np.ascontiguousarray(arr)).float()
    t = t[None, None] if t.dim() == 2 else t.permute(2, 0, 1)[None]
    if nearest:
        out = F.interpolate(t, size=(h, w), mode="nearest")
    else:
        out = F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)
    out = out[0, 0] if arr.ndim == 2 else out[0].permute(1, 2, 0)
    return out.numpy()


def _warp_affine(arr, angle, nearest):
    """cv2.warpAffine with getRotationMatrix2D(center, angle, 1.0), zero border."""
    t = torch.from_numpy(np.ascontiguousarray(arr)).float()
    t = t[None, None] if t.dim() == 2 else t.permute(2, 0, 1)[None]
    h, w = t.shape[-2:]
    a = math.radians(angle)
    mat = torch.tensor([[math.cos(a), math.sin(a) * h / w, 0.0], [-math.sin(a) * w / h, math.cos(a), 0.0]])[None]
    grid = F.affine_grid(mat, list(t.shape), align_corners=False)
    out = F.grid_sample(t, grid, mode="nearest" if nearest else "bilinear", padding_mode="zeros",
                        align_corners=False)
    out = out[0, 0] if arr.ndim == 2 else out[0].permute(1, 2, 0)
    return out.numpy()


class SyntheticSegDataset(Dataset):
    def __init__(self, images, labels, rng, augment=True, val=False, base_size=None, crop_size=321, scale=True,
                 flip=True, rotate=False, bug=None):
        self.images, self.labels = images, labels  # _set_files + _load_data
        self.rng = rng
        self.augment, self.val = augment, val
        self.base_size, self.crop_size = base_size, crop_size
        self.scale, self.flip, self.rotate = scale, flip, rotate
        self.mean = torch.tensor(MEAN)[:, None, None]
        self.std = torch.tensor(STD)[:, None, None]
        self.bug = bug

    def _augmentation(self, image, label):
        random = self.rng
        h, w, _ = image.shape
        # Scaling, we set the bigger to base size, and the smaller
        # one is rescaled to maintain the same ratio, if we don't have any obj in the image, re-do the processing
        if self.base_size:
            if self.scale:
                longside = random.randint(int(self.base_size*0.5), int(self.base_size*2.0))
            else:
                longside = self.base_size
            h, w = (longside, int(1.0 * longside * w / h + 0.5)) if h > w else (int(1.0 * longside * h / w + 0.5), longside)
            image = _resize(image, h, w, nearest=False)
            label = _resize(label, h, w, nearest=True)
        h, w, _ = image.shape
        # Rotate the image with an angle between -10 and 10
        if self.rotate:
            angle = random.randint(-10, 10)
            image = _warp_affine(image, angle, nearest=False)
            label = _warp_affine(label, angle, nearest=True)
        # Padding to return the correct crop size
        if self.crop_size:
            pad_h = max(self.crop_size - h, 0)
            pad_w = max(self.crop_size - w, 0)
            if pad_h > 0 or pad_w > 0:
                image = np.pad(image, ((0, pad_h), (0, pad_w), (0, 0)))
                label = np.pad(label, ((0, pad_h), (0, pad_w)))
            # Cropping
            h, w, _ = image.shape
            start_h = random.randint(0, h - self.crop_size)
            start_w = random.randint(0, w - self.crop_size)
            end_h = start_h + self.crop_size
            end_w = start_w + self.crop_size
            image = image[start_h:end_h, start_w:end_w]
            label = label[start_h:end_h, start_w:end_w]
        # Random H flip
        if self.flip:
            if self.bug == "label_flip_drawn_separately":
                if random.random() > 0.5:
                    image = np.fliplr(image).copy()
                if random.random() > 0.5:
                    label = np.fliplr(label).copy()
            elif random.random() > 0.5:
                image = np.fliplr(image).copy()
                label = np.fliplr(label).copy()
        return image, label

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image, label = self.images[index], self.labels[index]
        if self.val:
            pass  # _val_augmentation: the images already have the crop size
        elif self.augment:
            image, label = self._augmentation(image, label)
        label = torch.from_numpy(np.array(label, dtype=np.int32)).long()
        image = torch.from_numpy(np.uint8(np.clip(np.asarray(image), 0, 255))).float().permute(2, 0, 1) / 255.0
        return (image - self.mean) / self.std, label  # self.normalize(self.to_tensor(image))


# ---- base/base_trainer.py + trainer.py -----------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = np.random.default_rng(seed)
    train_images, train_labels = synthetic_scenes(gen, N_TRAIN)
    val_images, val_labels = synthetic_scenes(gen, N_VAL)
    train_set = SyntheticSegDataset(train_images, train_labels, random.Random(seed), augment=True,
                                    base_size=BASE_SIZE, crop_size=CROP_SIZE, scale=True, flip=True, rotate=True,
                                    bug=bug)
    val_set = SyntheticSegDataset(val_images, val_labels, random.Random(seed + 1), augment=False, val=True,
                                  crop_size=CROP_SIZE)
    train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(val_set, batch_size=BATCH_SIZE, shuffle=False)

    model = UNet(num_classes=NUM_CLASSES, freeze_bn=False)
    if bug == "softmax_before_cross_entropy":
        ce = CrossEntropyLoss2d(ignore_index=CONFIG['ignore_index'])
        loss = lambda output, target: ce(F.softmax(output, dim=1), target)
    else:
        loss = CrossEntropyLoss2d(ignore_index=CONFIG['ignore_index'])

    config = CONFIG
    if config['optimizer']['differential_lr']:
        trainable_params = [{'params': filter(lambda p:p.requires_grad, model.get_decoder_params())},
                            {'params': filter(lambda p:p.requires_grad, model.get_backbone_params()),
                            'lr': config['optimizer']['args']['lr'] / 10}]
    else:
        trainable_params = filter(lambda p:p.requires_grad, model.parameters())
    optimizer = torch.optim.SGD(trainable_params, **config['optimizer']['args'])
    epochs = config['trainer']['epochs']
    lr_scheduler = Poly(optimizer, epochs, len(train_loader))

    def _valid_epoch(epoch):
        model.eval()
        correct, labeled = 0, 0
        with torch.no_grad():
            for data, target in val_loader:
                output = model(data)
                pred = output.max(1)[1]
                mask = target != 255
                correct += int(((pred == target) & mask).sum())
                labeled += int(mask.sum())
        return correct / max(labeled, 1)

    state = {"it": None, "epoch": 1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in BaseTrainer.train()
                if state["epoch"] % config['trainer']['val_per_epochs'] == 0:
                    _valid_epoch(state["epoch"])
                state["epoch"] += 1
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, target = next_batch()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation of step(epoch), as written
            lr_scheduler.step(epoch=state["epoch"]-1)

        # LOSS & OPTIMIZE
        if bug == "zero_grad_after_backward":
            output = model(data)
            l = loss(output, target)
            l.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            output = model(data)
            l = loss(output, target)
            l.backward()
        optimizer.step()
        return l.detach()

    def eval_fn(model, batch):
        data, target = batch
        model.eval()
        with torch.no_grad():
            pred = model(data).max(1)[1]
        model.train()
        mask = target != 255
        return float(((pred == target) & mask).sum()) / max(int(mask.sum()), 1)

    first = next(iter(DataLoader(train_set, batch_size=BATCH_SIZE)))
    return Program(name="yassouseg_unet", model=model, batch=(first[0], first[1]), loss_fn=loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the horizontal flip drawn twice, once for the image and once for the label: half the labels are mirrored
    # relative to their image.
    Bug("label_flip_drawn_separately", functools.partial(_build, bug="label_flip_drawn_separately"),
        "learning_ledger", ("TASK",)),
    # softmax applied before CrossEntropyLoss2d, which applies log_softmax itself: the loss saturates.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # zero_grad moved between backward and step: SGD steps on weight decay alone.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
