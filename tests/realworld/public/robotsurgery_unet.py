"""Binary segmentation of surgical instruments (Shvets, Rakhlin, Kalinin & Iglovikov, "Automatic Instrument
Segmentation in Robot-Assisted Surgery Using Deep Learning", MICCAI EndoVis 2017 winners) from
ternaus/robot-surgery-segmentation, trained as the README's script runs ``train.py --type binary --jaccard-weight 1``
with the default ``--model UNet``: the vanilla U-Net of ``models.py`` (two 3x3 conv + ReLU per level, max-pool 2 and a
bottom max-pool 4, nearest upsampling, skip concatenation, a 1x1 output conv giving one logit map), ``LossBinary``
(``(1 - w) * BCEWithLogits - w * log(soft Jaccard)`` over the whole batch), Adam, albumentations' pad + random crop,
vertical and horizontal flips and ImageNet normalization applied to image and mask together; ``validation_binary``
(eval mode, loss and per-image Jaccard of ``outputs > 0``) after every epoch.

Source: https://github.com/ternaus/robot-surgery-segmentation
Commit: 1d181572647a585477f142a2906b735246276715
Files: ``train.py``, ``models.py`` (``Conv3BN``, ``UNetModule``, ``UNet``), ``loss.py`` (``LossBinary``), ``utils.py``
(``train``), ``validation.py`` (``validation_binary``, ``get_jaccard``), ``dataset.py`` (``RoboticsDataset``,
``load_mask``), ``prepare_data.py`` (``binary_factor``), ``README.rst`` (the training command)
License: MIT (Copyright (c) 2018 Vladimir Iglovikov, Alexey Shvets, Alexandr A. Kalinin, Alexander Rakhlin; full text
in LICENSES/ternaus-robot-surgery-segmentation.txt)
Domain: vision, binary semantic segmentation (U-Net, BCE + log soft-Jaccard loss)

Kept as written: ``UNet`` and its modules (``bn=False``, ``bottom_s`` 4, the upsamplers), ``LossBinary``, ``utils.train``'s
loop body (forward, ``criterion(outputs, targets)``, ``zero_grad``, backward, step; ``model.train()`` at each epoch),
``validation_binary`` and ``get_jaccard``, ``Adam(model.parameters(), lr=lr)``, the README's ``--jaccard-weight 1``,
``lr 0.0001`` and the binary mask scaling (``mask / binary_factor``, a ``[1, H, W]`` float target).

Deviations from the original:
- the EndoVis 2017 frames are not here: the images are synthetic, made from ``seed``: 72x72 RGB scenes of reddish
  tissue texture with one or two grey, elongated, rotated "instrument" bars (the mask: 255 on the bars, as the
  prepared masks are), 96 training and 16 validation scenes; cv2 and albumentations are not installed: PadIfNeeded
  (a no-op at these sizes), RandomCrop / CenterCrop, VerticalFlip(p=0.5), HorizontalFlip(p=0.5) and Normalize
  (ImageNet mean and std, max_pixel_value 255) are written out in torch, applied to the image and the mask together;
- sizes for 2 CPU cores: crops 1024x1280 -> 64x64, ``filters_base`` 32 -> 8, batch size 16 -> 8, no workers;
  lr 0.0001 -> 0.001 so that the self-check's 30 steps show the loss falling;
- CUDA, DataParallel, cudnn.benchmark, the folds of ``get_split``, checkpoints, restore, the json event log and tqdm
  are dropped;
- one ``train_step`` is one iteration of ``utils.train``'s loop (a new epoch runs ``validation_binary`` and
  ``model.train()`` first); ``eval_fn`` is ``validation_binary``'s Jaccard on a batch; the Program's batch is the
  first training batch and its ``loss_fn`` the ``LossBinary`` criterion;
- ``F.sigmoid`` is ``torch.sigmoid`` (the same function, without the deprecation);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# (port) README command and train.py defaults, sizes as listed in the docstring
args = types.SimpleNamespace(jaccard_weight=1.0, batch_size=8, n_epochs=10, lr=0.001, train_crop_height=64,
                             train_crop_width=64, val_crop_height=64, val_crop_width=64, type='binary', model='UNet')
FILTERS_BASE = 8  # (port) 32
N_TRAIN, N_VAL, SIZE = 96, 16, 72
binary_factor = 255


# models.py
def conv3x3(in_, out):
    return nn.Conv2d(in_, out, 3, padding=1)


class Conv3BN(nn.Module):
    def __init__(self, in_: int, out: int, bn=False):
        super().__init__()
        self.conv = conv3x3(in_, out)
        self.bn = nn.BatchNorm2d(out) if bn else None
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        x = self.activation(x)
        return x


class UNetModule(nn.Module):
    def __init__(self, in_: int, out: int):
        super().__init__()
        self.l1 = Conv3BN(in_, out)
        self.l2 = Conv3BN(out, out)

    def forward(self, x):
        x = self.l1(x)
        x = self.l2(x)
        return x


class UNet(nn.Module):
    """
    Vanilla UNet.

    Implementation from https://github.com/lopuhin/mapillary-vistas-2017/blob/master/unet_models.py
    """
    output_downscaled = 1
    module = UNetModule

    def __init__(self,
                 input_channels: int = 3,
                 filters_base: int = 32,
                 down_filter_factors=(1, 2, 4, 8, 16),
                 up_filter_factors=(1, 2, 4, 8, 16),
                 bottom_s=4,
                 num_classes=1,
                 add_output=True):
        super().__init__()
        self.num_classes = num_classes
        assert len(down_filter_factors) == len(up_filter_factors)
        assert down_filter_factors[-1] == up_filter_factors[-1]
        down_filter_sizes = [filters_base * s for s in down_filter_factors]
        up_filter_sizes = [filters_base * s for s in up_filter_factors]
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        self.down.append(self.module(input_channels, down_filter_sizes[0]))
        for prev_i, nf in enumerate(down_filter_sizes[1:]):
            self.down.append(self.module(down_filter_sizes[prev_i], nf))
        for prev_i, nf in enumerate(up_filter_sizes[1:]):
            self.up.append(self.module(
                down_filter_sizes[prev_i] + nf, up_filter_sizes[prev_i]))
        pool = nn.MaxPool2d(2, 2)
        pool_bottom = nn.MaxPool2d(bottom_s, bottom_s)
        upsample = nn.Upsample(scale_factor=2)
        upsample_bottom = nn.Upsample(scale_factor=bottom_s)
        self.downsamplers = [None] + [pool] * (len(self.down) - 1)
        self.downsamplers[-1] = pool_bottom
        self.upsamplers = [upsample] * len(self.up)
        self.upsamplers[-1] = upsample_bottom
        self.add_output = add_output
        if add_output:
            self.conv_final = nn.Conv2d(up_filter_sizes[0], num_classes, 1)

    def forward(self, x):
        xs = []
        for downsample, down in zip(self.downsamplers, self.down):
            x_in = x if downsample is None else downsample(xs[-1])
            x_out = down(x_in)
            xs.append(x_out)

        x_out = xs[-1]
        for x_skip, upsample, up in reversed(
                list(zip(xs[:-1], self.upsamplers, self.up))):
            x_out = upsample(x_out)
            x_out = up(torch.cat([x_out, x_skip], 1))

        if self.add_output:
            x_out = self.conv_final(x_out)
            if self.num_classes > 1:
                x_out = F.log_softmax(x_out, dim=1)
        return x_out


# loss.py
class LossBinary:
    """
    Loss defined as \\alpha BCE - (1 - \\alpha) SoftJaccard
    """

    def __init__(self, jaccard_weight=0, bug=None):
        self.nll_loss = nn.BCEWithLogitsLoss()
        self.jaccard_weight = jaccard_weight
        self.bug = bug

    def __call__(self, outputs, targets):
        loss = (1 - self.jaccard_weight) * self.nll_loss(outputs, targets)

        if self.jaccard_weight:
            eps = 1e-15
            jaccard_target = (targets == 1).float()
            jaccard_output = torch.sigmoid(outputs)

            intersection = (jaccard_output * jaccard_target).sum()
            union = jaccard_output.sum() + jaccard_target.sum()

            if self.bug == "jaccard_sign_flipped":
                loss += self.jaccard_weight * torch.log((intersection + eps) / (union - intersection + eps))
            else:
                loss -= self.jaccard_weight * torch.log((intersection + eps) / (union - intersection + eps))
        return loss


# validation.py
def validation_binary(model, criterion, valid_loader, num_classes=None):
    with torch.no_grad():
        model.eval()
        losses = []

        jaccard = []

        for inputs, targets in valid_loader:
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            losses.append(loss.item())
            jaccard += get_jaccard(targets, (outputs > 0).float())

        valid_loss = np.mean(losses)  # type: float

        valid_jaccard = np.mean(jaccard).astype(np.float64)

        metrics = {'valid_loss': valid_loss, 'jaccard_loss': valid_jaccard}
        return metrics


def get_jaccard(y_true, y_pred):
    epsilon = 1e-15
    intersection = (y_pred * y_true).sum(dim=-2).sum(dim=-1)
    union = y_true.sum(dim=-2).sum(dim=-1) + y_pred.sum(dim=-2).sum(dim=-1)

    return list(((intersection + epsilon) / (union - intersection + epsilon)).data.cpu().numpy())


# (port) synthetic EndoVis-like scenes (uint8 RGB image, 0/255 mask) and the albumentations transforms, written out
def make_scenes(gen, n):
    ys, xs = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32),
                            indexing='ij')
    images, masks = [], []
    for _ in range(n):
        tissue = F.interpolate(torch.rand(1, 1, 9, 9, generator=gen), size=(SIZE, SIZE), mode='bilinear')[0, 0]
        img = torch.stack([0.55 + 0.3 * tissue, 0.2 + 0.15 * tissue, 0.2 + 0.1 * tissue])
        mask = torch.zeros(SIZE, SIZE, dtype=torch.bool)
        for _ in range(1 + int(torch.randint(0, 2, (1,), generator=gen))):
            cx, cy = (torch.rand(2, generator=gen) * 0.6 + 0.2) * SIZE
            t = float(torch.rand(1, generator=gen)) * math.pi
            half_w = 3 + 2 * float(torch.rand(1, generator=gen))
            along = (xs - cx) * math.cos(t) + (ys - cy) * math.sin(t)
            across = -(xs - cx) * math.sin(t) + (ys - cy) * math.cos(t)
            mask |= (across.abs() < half_w) & (along.abs() < 28)
        grey = 0.6 + 0.2 * float(torch.rand(1, generator=gen))
        img = torch.where(mask, torch.tensor(grey), img) + 0.04 * torch.randn(3, SIZE, SIZE, generator=gen)
        images.append((img.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy())
        masks.append(mask.to(torch.uint8).numpy() * binary_factor)
    return images, masks


def make_transform(height, width, train, bug=None):
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

    def transform(image, mask):
        h, w = image.shape[:2]
        if train:  # RandomCrop, VerticalFlip(p=0.5), HorizontalFlip(p=0.5)
            i, j = random.randint(0, h - height), random.randint(0, w - width)
        else:  # CenterCrop
            i, j = (h - height) // 2, (w - width) // 2
        image, mask = image[i:i + height, j:j + width], mask[i:i + height, j:j + width]
        if train and random.random() < 0.5:
            image, mask = image[::-1], (mask if bug == "mask_not_flipped" else mask[::-1])
        if train and random.random() < 0.5:
            image, mask = image[:, ::-1], (mask if bug == "mask_not_flipped" else mask[:, ::-1])
        image = (image.astype(np.float32) / 255. - mean) / std  # Normalize(p=1)
        return {"image": image.astype(np.float32), "mask": np.ascontiguousarray(mask)}
    return transform


def img_to_tensor(im):
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(im, -1, 0)))


# dataset.py
class RoboticsDataset(Dataset):
    def __init__(self, scenes, transform=None, mode='train', problem_type=None):
        self.scenes = scenes  # (port) the decoded (image, mask) pairs instead of file names
        self.transform = transform
        self.mode = mode
        self.problem_type = problem_type

    def __len__(self):
        return len(self.scenes[0])

    def __getitem__(self, idx):
        image = self.scenes[0][idx]
        mask = (self.scenes[1][idx] / binary_factor).astype(np.uint8)  # load_mask

        data = {"image": image, "mask": mask}
        augmented = self.transform(**data)
        image, mask = augmented["image"], augmented["mask"]

        return img_to_tensor(image), torch.from_numpy(np.expand_dims(mask, 0)).float()


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    num_classes = 1
    model = UNet(num_classes=num_classes, filters_base=FILTERS_BASE)
    loss = LossBinary(jaccard_weight=args.jaccard_weight, bug=bug)

    train_scenes, val_scenes = make_scenes(gen, N_TRAIN), make_scenes(gen, N_VAL)
    train_loader = DataLoader(RoboticsDataset(train_scenes, make_transform(args.train_crop_height,
                                                                           args.train_crop_width, True, bug),
                                              problem_type=args.type),
                              shuffle=True, batch_size=args.batch_size, generator=torch.Generator().manual_seed(seed))
    valid_loader = DataLoader(RoboticsDataset(val_scenes, make_transform(args.val_crop_height,
                                                                         args.val_crop_width, False),
                                              problem_type=args.type), batch_size=N_VAL)
    optimizer = Adam(model.parameters(), lr=args.lr)  # init_optimizer(lr)
    criterion = loss
    loop = {"it": None}

    def next_batch():
        try:
            return next(loop["it"])
        except (StopIteration, TypeError):
            if loop["it"] is not None:  # the end of an epoch in utils.train
                validation_binary(model, criterion, valid_loader, num_classes)
            model.train()
            loop["it"] = iter(train_loader)
            return next(loop["it"])

    def train_step():
        inputs, targets = next_batch()
        with torch.no_grad():
            targets = targets.cpu()  # (port) cuda(targets)
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        metrics = validation_binary(model, criterion, [batch], num_classes)
        model.train()
        return metrics['jaccard_loss']

    first = next(iter(DataLoader(train_loader.dataset, batch_size=args.batch_size)))
    return Program(name="robotsurgery_unet", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: ``loss += w * log(soft Jaccard)`` instead of ``-=``: the loss still falls, by driving the
    # predicted masks away from the instruments (the Jaccard towards eps).
    Bug("jaccard_sign_flipped", functools.partial(_build, bug="jaccard_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic pipeline slip: the flips written by hand for the image and not for the mask (albumentations flips both
    # together): three quarters of the training pairs have their instrument masks in the wrong place.
    Bug("mask_not_flipped", functools.partial(_build, bug="mask_not_flipped"), "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() moved between backward and step: every step applies only Adam's moments of the
    # past gradients, never the new gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
