"""UNet++ (Nested U-Net) binary nucleus segmentation trained by the repository's train.py with its defaults
(``python train.py --dataset dsb2018_96 --arch NestedUNet``): VGG blocks with batch norm, dense nested skip
pathways, bilinear upsampling, ``BCEDiceLoss`` (0.5 * BCE-with-logits + soft dice on the sigmoid), SGD lr 1e-3
momentum 0.9 weight decay 1e-4 over the parameters that require grad, CosineAnnealingLR stepped per epoch,
validation by loss and IoU.

Source: https://github.com/4uiiurz1/pytorch-nested-unet
Commit: 557ea02f0b5d45ec171aae2282d2cd21562a633e
Files: train.py, archs.py, losses.py, metrics.py, dataset.py, utils.py, README.md
License: MIT (Copyright (c) 2018 Takato Kimura)
Domain: semantic segmentation (binary, UNet++)

Deviations from the original:
- sizes: ``nb_filter`` [32, 64, 128, 256, 512] -> [4, 8, 8, 16, 16] (a module constant instead of the literal
  inside ``__init__``), input 96x96 -> 16x16, batch size 16 -> 8, epochs 100 -> 4 (the cosine schedule's T_max);
- data: the 2018 Data Science Bowl images are replaced by synthetic 3-channel uint8 images made from ``seed``
  (dark noisy background with 1-3 bright elliptic "nuclei"; the mask is 255 inside the nuclei), kept in memory
  instead of read by cv2 from png files; the ``Dataset`` class keeps its ``__getitem__`` conversion (float /255,
  HWC -> CHW) as written;
- albumentations is not available: the train transform's RandomRotate90 and Flip are written out in numpy, the
  colour jitter OneOf (HueSaturationValue / RandomBrightness / RandomContrast) is left out, Resize is the
  identity (the synthetic images are made at the input size) and Normalize is written out with albumentations'
  defaults (ImageNet mean/std, max_pixel_value 255; the dataset's later /255 is kept as written);
- ``.cuda()`` calls, cudnn.benchmark, tqdm, the yaml/csv logging, checkpointing and early stopping are dropped;
- one ``train_step`` is one iteration of ``train()``'s loop (forward, criterion, zero_grad, backward, step);
  ``model.train()`` runs at each epoch start and the scheduler is stepped after every ``len(train_loader)`` steps,
  as the epoch loop does; ``eval_fn`` is ``validate()``'s body on a given batch (loss and IoU), after which the
  model is put back in train mode.
"""
# ruff: noqa: PLR0402  (the original imports are kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NB_FILTER = [4, 8, 8, 16, 16]
INPUT_HW = 16

# ---- train.py parse_args defaults (sizes changed as listed above) -------------------------------------------------
CONFIG = {
    'epochs': 4, 'batch_size': 8, 'arch': 'NestedUNet', 'deep_supervision': False, 'input_channels': 3,
    'num_classes': 1, 'input_w': INPUT_HW, 'input_h': INPUT_HW, 'loss': 'BCEDiceLoss', 'optimizer': 'SGD',
    'lr': 1e-3, 'momentum': 0.9, 'weight_decay': 1e-4, 'nesterov': False, 'scheduler': 'CosineAnnealingLR',
    'min_lr': 1e-5,
}


# ---- archs.py ---------------------------------------------------------------------------------------------------

class VGGBlock(nn.Module):
    def __init__(self, in_channels, middle_channels, out_channels):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, middle_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(middle_channels)
        self.conv2 = nn.Conv2d(middle_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        return out


class NestedUNet(nn.Module):
    def __init__(self, num_classes, input_channels=3, deep_supervision=False, **kwargs):
        super().__init__()

        nb_filter = NB_FILTER

        self.deep_supervision = deep_supervision

        self.pool = nn.MaxPool2d(2, 2)
        self.up = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True)

        self.conv0_0 = VGGBlock(input_channels, nb_filter[0], nb_filter[0])
        self.conv1_0 = VGGBlock(nb_filter[0], nb_filter[1], nb_filter[1])
        self.conv2_0 = VGGBlock(nb_filter[1], nb_filter[2], nb_filter[2])
        self.conv3_0 = VGGBlock(nb_filter[2], nb_filter[3], nb_filter[3])
        self.conv4_0 = VGGBlock(nb_filter[3], nb_filter[4], nb_filter[4])

        self.conv0_1 = VGGBlock(nb_filter[0]+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_1 = VGGBlock(nb_filter[1]+nb_filter[2], nb_filter[1], nb_filter[1])
        self.conv2_1 = VGGBlock(nb_filter[2]+nb_filter[3], nb_filter[2], nb_filter[2])
        self.conv3_1 = VGGBlock(nb_filter[3]+nb_filter[4], nb_filter[3], nb_filter[3])

        self.conv0_2 = VGGBlock(nb_filter[0]*2+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_2 = VGGBlock(nb_filter[1]*2+nb_filter[2], nb_filter[1], nb_filter[1])
        self.conv2_2 = VGGBlock(nb_filter[2]*2+nb_filter[3], nb_filter[2], nb_filter[2])

        self.conv0_3 = VGGBlock(nb_filter[0]*3+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_3 = VGGBlock(nb_filter[1]*3+nb_filter[2], nb_filter[1], nb_filter[1])

        self.conv0_4 = VGGBlock(nb_filter[0]*4+nb_filter[1], nb_filter[0], nb_filter[0])

        if self.deep_supervision:
            self.final1 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final2 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final3 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final4 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
        else:
            self.final = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)


    def forward(self, input):
        x0_0 = self.conv0_0(input)
        x1_0 = self.conv1_0(self.pool(x0_0))
        x0_1 = self.conv0_1(torch.cat([x0_0, self.up(x1_0)], 1))

        x2_0 = self.conv2_0(self.pool(x1_0))
        x1_1 = self.conv1_1(torch.cat([x1_0, self.up(x2_0)], 1))
        x0_2 = self.conv0_2(torch.cat([x0_0, x0_1, self.up(x1_1)], 1))

        x3_0 = self.conv3_0(self.pool(x2_0))
        x2_1 = self.conv2_1(torch.cat([x2_0, self.up(x3_0)], 1))
        x1_2 = self.conv1_2(torch.cat([x1_0, x1_1, self.up(x2_1)], 1))
        x0_3 = self.conv0_3(torch.cat([x0_0, x0_1, x0_2, self.up(x1_2)], 1))

        x4_0 = self.conv4_0(self.pool(x3_0))
        x3_1 = self.conv3_1(torch.cat([x3_0, self.up(x4_0)], 1))
        x2_2 = self.conv2_2(torch.cat([x2_0, x2_1, self.up(x3_1)], 1))
        x1_3 = self.conv1_3(torch.cat([x1_0, x1_1, x1_2, self.up(x2_2)], 1))
        x0_4 = self.conv0_4(torch.cat([x0_0, x0_1, x0_2, x0_3, self.up(x1_3)], 1))

        if self.deep_supervision:
            output1 = self.final1(x0_1)
            output2 = self.final2(x0_2)
            output3 = self.final3(x0_3)
            output4 = self.final4(x0_4)
            return [output1, output2, output3, output4]

        else:
            output = self.final(x0_4)
            return output


# ---- losses.py --------------------------------------------------------------------------------------------------

class BCEDiceLoss(nn.Module):
    def __init__(self, bug=None):
        super().__init__()
        self.bug = bug

    def forward(self, input, target):
        bce = F.binary_cross_entropy_with_logits(input, target)
        smooth = 1e-5
        if self.bug != "dice_on_logits":
            input = torch.sigmoid(input)
        num = target.size(0)
        input = input.view(num, -1)
        target = target.view(num, -1)
        intersection = (input * target)
        dice = (2. * intersection.sum(1) + smooth) / (input.sum(1) + target.sum(1) + smooth)
        dice = 1 - dice.sum() / num
        return 0.5 * bce + dice


# ---- metrics.py -------------------------------------------------------------------------------------------------

def iou_score(output, target):
    smooth = 1e-5

    if torch.is_tensor(output):
        output = torch.sigmoid(output).data.cpu().numpy()
    if torch.is_tensor(target):
        target = target.data.cpu().numpy()
    output_ = output > 0.5
    target_ = target > 0.5
    intersection = (output_ & target_).sum()
    union = (output_ | target_).sum()

    return (intersection + smooth) / (union + smooth)


# ---- synthetic stand-in for dsb2018_96 (images/<id>.png, masks/0/<id>.png) ---------------------------------------

def make_images(rng, n):
    imgs, masks = [], []
    yy, xx = np.mgrid[0:INPUT_HW, 0:INPUT_HW]
    for _ in range(n):
        img = rng.integers(0, 60, size=(INPUT_HW, INPUT_HW, 3)).astype(np.float64)
        mask = np.zeros((INPUT_HW, INPUT_HW), dtype=bool)
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(2, INPUT_HW - 3, size=2)
            ry, rx = rng.uniform(1.5, 4.0, size=2)
            mask |= ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        tint = rng.uniform(150, 230, size=3)
        img[mask] = tint + rng.normal(0, 12, size=(int(mask.sum()), 3))
        imgs.append(np.clip(img, 0, 255).astype(np.uint8))
        masks.append(mask.astype(np.uint8)[..., None] * 255)
    return imgs, masks


def normalize(img):
    # albumentations.Normalize() defaults: (img - mean * 255) / (std * 255)
    mean = np.array([0.485, 0.456, 0.406]) * 255.0
    std = np.array([0.229, 0.224, 0.225]) * 255.0
    return ((img.astype(np.float32) - mean) / std).astype(np.float32)


def make_train_transform(rng):
    def transform(image, mask):
        k = int(rng.integers(0, 4))  # RandomRotate90
        image, mask = np.rot90(image, k, axes=(0, 1)), np.rot90(mask, k, axes=(0, 1))
        if rng.random() < 0.5:  # Flip: horizontal, vertical or both
            d = int(rng.integers(-1, 2))
            if d == -1:
                image, mask = image[::-1, ::-1], mask[::-1, ::-1]
            else:
                image, mask = np.flip(image, 1 - d), np.flip(mask, 1 - d)
        return {'image': normalize(np.ascontiguousarray(image)), 'mask': np.ascontiguousarray(mask)}
    return transform


def val_transform(image, mask):
    return {'image': normalize(image), 'mask': mask}


# ---- dataset.py -------------------------------------------------------------------------------------------------

class Dataset(torch.utils.data.Dataset):
    def __init__(self, img_ids, images, masks, num_classes, transform=None, bug=None):
        self.img_ids = img_ids
        self.images = images
        self.masks = masks
        self.num_classes = num_classes
        self.transform = transform
        self.bug = bug

    def __len__(self):
        return len(self.img_ids)

    def __getitem__(self, idx):
        img_id = self.img_ids[idx]

        img = self.images[img_id]

        mask = []
        for i in range(self.num_classes):
            mask.append(self.masks[img_id][..., 0][..., None])
        mask = np.dstack(mask)

        if self.transform is not None:
            augmented = self.transform(image=img, mask=mask)
            img = augmented['image']
            mask = augmented['mask']

        img = img.astype('float32') / 255
        img = img.transpose(2, 0, 1)
        mask = mask.astype('float32') / 255
        if self.bug == "mask_axes_swapped":
            # (C, W, H) instead of (C, H, W): the mask is the transpose of its image
            mask = mask.transpose(2, 1, 0)
        else:
            mask = mask.transpose(2, 0, 1)

        return img, mask, {'img_id': img_id}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = dict(CONFIG)

    criterion = BCEDiceLoss(bug=bug)

    model = NestedUNet(config['num_classes'], config['input_channels'], config['deep_supervision'])

    params = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = optim.SGD(params, lr=config['lr'], momentum=config['momentum'],
                          nesterov=config['nesterov'], weight_decay=config['weight_decay'])
    scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=config['epochs'], eta_min=config['min_lr'])

    images, masks = make_images(rng, 80)
    img_ids = list(range(80))
    order = rng.permutation(80)  # train_test_split(img_ids, test_size=0.2, random_state=41)
    train_img_ids, val_img_ids = [img_ids[i] for i in order[:64]], [img_ids[i] for i in order[64:]]

    train_dataset = Dataset(train_img_ids, images, masks, config['num_classes'],
                            transform=make_train_transform(rng), bug=bug)
    val_dataset = Dataset(val_img_ids, images, masks, config['num_classes'], transform=val_transform, bug=bug)
    gen = torch.Generator().manual_seed(seed)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=config['batch_size'], shuffle=True,
                                               drop_last=True, generator=gen)
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=config['batch_size'], shuffle=False,
                                             drop_last=False)

    def batches():
        while True:
            model.train()
            yield from train_loader
            scheduler.step()  # end of epoch: if config['scheduler'] == 'CosineAnnealingLR'

    it = batches()

    def train_step():
        input, target, _ = next(it)

        # compute output
        output = model(input)
        loss = criterion(output, target)

        # compute gradient and do optimizing step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        input, target = batch[0], batch[1]
        with torch.no_grad():
            output = model(input)
            loss = criterion(output, target)
            iou = iou_score(output, target)
        model.train()
        return {'loss': float(loss), 'iou': float(iou)}

    first = next(iter(val_loader))
    return Program(name="nestedunet_dsb2018", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the sigmoid of BCEDiceLoss's dice half left out, so the soft dice is computed on raw logits
    # (unbounded "probabilities"; the dice term is minimised by pushing logits anywhere, not by matching the mask).
    Bug("dice_on_logits", functools.partial(_build, bug="dice_on_logits"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the mask's HWC -> CHW conversion written as transpose(2, 1, 0), so every mask is the transpose of
    # its image (square images: no shape error).
    Bug("mask_axes_swapped", functools.partial(_build, bug="mask_axes_swapped"), "learning_ledger", ("TASK",)),
]
