"""U-Net for FLAIR abnormality segmentation in brain MRI of mateuszbuda/brain-segmentation-pytorch: the
``UNet`` of ``unet.py`` (four conv-BN-ReLU x2 encoder blocks with max-pooling, a bottleneck, transposed-conv
up-sampling with skip concatenation, a 1x1 conv and a sigmoid), ``DiceLoss`` of ``loss.py`` (``1 - dsc`` with
smooth 1 over the flattened first channel), Adam (lr 1e-4), and ``train.py``'s train phase: ``unet.train()``,
``optimizer.zero_grad()``, forward under ``torch.set_grad_enabled``, ``loss.backward()``, ``optimizer.step()``; the
training set samples a random patient and a slice weighted by its mask area (``BrainSegmentationDataset``) and
augments with ``transforms(scale=0.05, angle=15, flip_prob=0.5)`` (``transform.py``: Scale, Rotate,
HorizontalFlip applied to image and mask together).

Source: https://github.com/mateuszbuda/brain-segmentation-pytorch
Commit: d45f8908ab2f0246ba204c702a6161c9eb25f902
Files: train.py, unet.py, loss.py, transform.py, dataset.py, utils.py
License: MIT (Copyright (c) 2019 mateuszbuda; full text in LICENSES/mateuszbuda-brain-segmentation-pytorch.txt)
Domain: semantic segmentation (binary, medical imaging, Dice loss, paired image/mask augmentation)

Deviations from the original:
- sizes (2 CPU cores): init_features 32 -> 16, image_size 256 -> 32, batch_size 16 -> 4; lr 1e-4, aug_scale 0.05,
  aug_angle 15, flip_prob 0.5 unchanged.
- data: the Kaggle LGG .tif download is replaced by 4 synthetic "patients" of 6 slices, 32x32x3 made from
  ``seed`` (smooth noise in three channels with a bright ellipse, the ellipse as the mask; some slices without
  one); the reading, ``crop_sample``, ``pad_sample`` and ``resize_sample`` steps are skipped (the slices are made
  at ``image_size``, the masks in {0, 1} as ``resize_sample``'s skimage ``resize`` leaves them); ``normalize_volume`` is written out in numpy (skimage's ``rescale_intensity`` from the
  10th..99th percentile to [0, 1], then per-channel standardization). ``__init__``'s slice weights, the channel
  dimension of the masks, the patient/slice index and ``__getitem__`` are copied.
- ``transform.py`` uses skimage (not installed here): ``Scale`` uses ``scipy.ndimage.zoom`` for
  ``skimage.transform.rescale`` (order 1 for the image, 0 for the mask, constant mode) and ``Rotate``
  ``scipy.ndimage.rotate`` (``reshape=False``) for ``skimage.transform.rotate``; their crop/pad logic and
  ``HorizontalFlip`` are copied; torchvision's ``Compose`` is a three-line loop.
- ``np.random`` in the dataset and the transforms is a ``np.random.RandomState(seed)`` of the build (the original
  seeds the workers' global state with ``worker_init``); DataLoader without workers.
- the validation phase, per-volume DSC, logging, image summaries and checkpoints are left out; ``device``
  moves dropped.
- one ``train_step`` is one iteration of the train phase's inner loop (``unet.train()`` run as each train phase
  does); it returns the loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, UP004, RUF017  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import scipy.ndimage
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 4
IMAGE_SIZE = 32
INIT_FEATURES = 16
LR = 0.0001
AUG_SCALE = 0.05
AUG_ANGLE = 15


# ---- unet.py --------------------------------------------------------------------------------------------------




class UNet(nn.Module):

    def __init__(self, in_channels=3, out_channels=1, init_features=32):
        super(UNet, self).__init__()

        features = init_features
        self.encoder1 = UNet._block(in_channels, features, name="enc1")
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.encoder2 = UNet._block(features, features * 2, name="enc2")
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.encoder3 = UNet._block(features * 2, features * 4, name="enc3")
        self.pool3 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.encoder4 = UNet._block(features * 4, features * 8, name="enc4")
        self.pool4 = nn.MaxPool2d(kernel_size=2, stride=2)

        self.bottleneck = UNet._block(features * 8, features * 16, name="bottleneck")

        self.upconv4 = nn.ConvTranspose2d(
            features * 16, features * 8, kernel_size=2, stride=2
        )
        self.decoder4 = UNet._block((features * 8) * 2, features * 8, name="dec4")
        self.upconv3 = nn.ConvTranspose2d(
            features * 8, features * 4, kernel_size=2, stride=2
        )
        self.decoder3 = UNet._block((features * 4) * 2, features * 4, name="dec3")
        self.upconv2 = nn.ConvTranspose2d(
            features * 4, features * 2, kernel_size=2, stride=2
        )
        self.decoder2 = UNet._block((features * 2) * 2, features * 2, name="dec2")
        self.upconv1 = nn.ConvTranspose2d(
            features * 2, features, kernel_size=2, stride=2
        )
        self.decoder1 = UNet._block(features * 2, features, name="dec1")

        self.conv = nn.Conv2d(
            in_channels=features, out_channels=out_channels, kernel_size=1
        )

    def forward(self, x):
        enc1 = self.encoder1(x)
        enc2 = self.encoder2(self.pool1(enc1))
        enc3 = self.encoder3(self.pool2(enc2))
        enc4 = self.encoder4(self.pool3(enc3))

        bottleneck = self.bottleneck(self.pool4(enc4))

        dec4 = self.upconv4(bottleneck)
        dec4 = torch.cat((dec4, enc4), dim=1)
        dec4 = self.decoder4(dec4)
        dec3 = self.upconv3(dec4)
        dec3 = torch.cat((dec3, enc3), dim=1)
        dec3 = self.decoder3(dec3)
        dec2 = self.upconv2(dec3)
        dec2 = torch.cat((dec2, enc2), dim=1)
        dec2 = self.decoder2(dec2)
        dec1 = self.upconv1(dec2)
        dec1 = torch.cat((dec1, enc1), dim=1)
        dec1 = self.decoder1(dec1)
        return torch.sigmoid(self.conv(dec1))

    @staticmethod
    def _block(in_channels, features, name):
        return nn.Sequential(
            OrderedDict(
                [
                    (
                        name + "conv1",
                        nn.Conv2d(
                            in_channels=in_channels,
                            out_channels=features,
                            kernel_size=3,
                            padding=1,
                            bias=False,
                        ),
                    ),
                    (name + "norm1", nn.BatchNorm2d(num_features=features)),
                    (name + "relu1", nn.ReLU(inplace=True)),
                    (
                        name + "conv2",
                        nn.Conv2d(
                            in_channels=features,
                            out_channels=features,
                            kernel_size=3,
                            padding=1,
                            bias=False,
                        ),
                    ),
                    (name + "norm2", nn.BatchNorm2d(num_features=features)),
                    (name + "relu2", nn.ReLU(inplace=True)),
                ]
            )
        )


# ---- loss.py --------------------------------------------------------------------------------------------------

class DiceLoss(nn.Module):

    def __init__(self, bug=None):
        super(DiceLoss, self).__init__()
        self.smooth = 1.0
        self.bug = bug

    def forward(self, y_pred, y_true):
        assert y_pred.size() == y_true.size()
        y_pred = y_pred[:, 0].contiguous().view(-1)
        y_true = y_true[:, 0].contiguous().view(-1)
        intersection = (y_pred * y_true).sum()
        dsc = (2. * intersection + self.smooth) / (
            y_pred.sum() + y_true.sum() + self.smooth
        )
        if self.bug == "dsc_returned_not_loss":
            return dsc
        return 1. - dsc


# ---- transform.py (skimage calls written with scipy.ndimage) ---------------------------------------------------

def transforms(scale=None, angle=None, flip_prob=None, rng=None, bug=None):
    transform_list = []

    if scale is not None:
        transform_list.append(Scale(scale, rng))
    if angle is not None:
        transform_list.append(Rotate(angle, rng))
    if flip_prob is not None:
        transform_list.append(HorizontalFlip(flip_prob, rng, bug))

    return Compose(transform_list)


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, sample):
        for t in self.transforms:
            sample = t(sample)
        return sample


class Scale(object):

    def __init__(self, scale, rng):
        self.scale = scale
        self.random = rng

    def __call__(self, sample):
        image, mask = sample

        img_size = image.shape[0]

        scale = self.random.uniform(low=1.0 - self.scale, high=1.0 + self.scale)

        image = scipy.ndimage.zoom(image, (scale, scale, 1), order=1, mode="constant")
        mask = scipy.ndimage.zoom(mask, (scale, scale, 1), order=0, mode="constant")

        if scale < 1.0:
            diff = (img_size - image.shape[0]) / 2.0
            padding = ((int(np.floor(diff)), int(np.ceil(diff))),) * 2 + ((0, 0),)
            image = np.pad(image, padding, mode="constant", constant_values=0)
            mask = np.pad(mask, padding, mode="constant", constant_values=0)
        else:
            x_min = (image.shape[0] - img_size) // 2
            x_max = x_min + img_size
            image = image[x_min:x_max, x_min:x_max, ...]
            mask = mask[x_min:x_max, x_min:x_max, ...]

        return image, mask


class Rotate(object):

    def __init__(self, angle, rng):
        self.angle = angle
        self.random = rng

    def __call__(self, sample):
        image, mask = sample

        angle = self.random.uniform(low=-self.angle, high=self.angle)
        image = scipy.ndimage.rotate(image, angle, reshape=False, order=1, mode="constant")
        mask = scipy.ndimage.rotate(mask, angle, reshape=False, order=0, mode="constant")
        return image, mask


class HorizontalFlip(object):

    def __init__(self, flip_prob, rng, bug=None):
        self.flip_prob = flip_prob
        self.random = rng
        self.bug = bug

    def __call__(self, sample):
        image, mask = sample

        if self.random.rand() > self.flip_prob:
            return image, mask

        image = np.fliplr(image).copy()
        if self.bug != "mask_not_flipped":
            mask = np.fliplr(mask).copy()

        return image, mask


# ---- utils.py / dataset.py ------------------------------------------------------------------------------------

def normalize_volume(volume):
    p10 = np.percentile(volume, 10)
    p99 = np.percentile(volume, 99)
    volume = np.clip((volume - p10) / (p99 - p10), 0.0, 1.0)  # rescale_intensity(volume, in_range=(p10, p99))
    m = np.mean(volume, axis=(0, 1, 2))
    s = np.std(volume, axis=(0, 1, 2))
    volume = (volume - m) / s
    return volume


def make_volumes(rng, n_patients=4, n_slices=6, size=IMAGE_SIZE):
    """Stand-in for the LGG volumes: smooth noise in 3 channels, a bright ellipse (the mask) in most slices."""
    volumes = []
    yy, xx = np.mgrid[0:size, 0:size]
    for _ in range(n_patients):
        v = np.zeros((n_slices, size, size, 3))
        m = np.zeros((n_slices, size, size))
        for s in range(n_slices):
            v[s] = scipy.ndimage.gaussian_filter(rng.rand(size, size, 3), sigma=(2, 2, 0)) * 100.0
            if s % 3 != 0:
                cy, cx = rng.randint(8, size - 8, size=2)
                ry, rx = rng.randint(3, 7, size=2)
                ell = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
                v[s][ell] += np.array([40.0, 60.0, 30.0])
                m[s][ell] = 1.0
        volumes.append((v, m))
    return volumes


class BrainSegmentationDataset(TorchDataset):
    """Brain MRI dataset for FLAIR abnormality segmentation"""

    in_channels = 3
    out_channels = 1

    def __init__(self, volumes, rng, transform=None, random_sampling=True):
        self.random = rng
        self.volumes = volumes

        # normalize channel-wise
        self.volumes = [(normalize_volume(v), m) for v, m in self.volumes]

        # probabilities for sampling slices based on masks
        self.slice_weights = [m.sum(axis=-1).sum(axis=-1) for v, m in self.volumes]
        self.slice_weights = [
            (s + (s.sum() * 0.1 / len(s))) / (s.sum() * 1.1) for s in self.slice_weights
        ]

        # add channel dimension to masks
        self.volumes = [(v, m[..., np.newaxis]) for (v, m) in self.volumes]

        # create global index for patient and slice (idx -> (p_idx, s_idx))
        num_slices = [v.shape[0] for v, m in self.volumes]
        self.patient_slice_index = list(
            zip(
                sum([[i] * num_slices[i] for i in range(len(num_slices))], []),
                sum([list(range(x)) for x in num_slices], []),
            )
        )

        self.random_sampling = random_sampling

        self.transform = transform

    def __len__(self):
        return len(self.patient_slice_index)

    def __getitem__(self, idx):
        patient = self.patient_slice_index[idx][0]
        slice_n = self.patient_slice_index[idx][1]

        if self.random_sampling:
            patient = self.random.randint(len(self.volumes))
            slice_n = self.random.choice(
                range(self.volumes[patient][0].shape[0]), p=self.slice_weights[patient]
            )

        v, m = self.volumes[patient]
        image = v[slice_n]
        mask = m[slice_n]

        if self.transform is not None:
            image, mask = self.transform((image, mask))

        # fix dimensions (C, H, W)
        image = image.transpose(2, 0, 1)
        mask = mask.transpose(2, 0, 1)

        image_tensor = torch.from_numpy(image.astype(np.float32))
        mask_tensor = torch.from_numpy(mask.astype(np.float32))

        # return tensors
        return image_tensor, mask_tensor


# ---- train.py -------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    Dataset = BrainSegmentationDataset
    dataset_train = Dataset(
        make_volumes(rng),
        rng,
        transform=transforms(scale=AUG_SCALE, angle=AUG_ANGLE, flip_prob=0.5, rng=rng, bug=bug),
    )
    loader_train = DataLoader(
        dataset_train,
        batch_size=BATCH_SIZE,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed),
    )

    unet = UNet(in_channels=Dataset.in_channels, out_channels=Dataset.out_channels, init_features=INIT_FEATURES)

    dsc_loss = DiceLoss(bug=bug)

    optimizer = optim.Adam(unet.parameters(), lr=LR)

    state = {"it": None, "step": 0}

    def next_data():
        while True:
            if state["it"] is None:
                state["it"] = iter(loader_train)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        phase = "train"
        unet.train()
        state["step"] += 1

        x, y_true = next_data()

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        with torch.set_grad_enabled(phase == "train"):
            y_pred = unet(x)

            loss = dsc_loss(y_pred, y_true)

            if phase == "train":
                loss.backward()
                optimizer.step()
        return loss.detach()

    x0, y0 = next(iter(DataLoader(dataset_train, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="brainseg_unet", model=unet, batch=(x0, y0), loss_fn=dsc_loss, optimizer=optimizer,
                   train_step=train_step, loader=loader_train)


build = functools.partial(_build, bug=None)

BUGS = [
    # HorizontalFlip flips the image but not its mask (classic paired-augmentation slip): half the training pairs
    # have the lesion on the wrong side.
    Bug("mask_not_flipped", functools.partial(_build, bug="mask_not_flipped"), "learning_ledger", ("TASK",)),
    # DiceLoss returns the Dice coefficient instead of 1 - dsc (classic sign slip): minimizing it drives the overlap
    # to zero.
    Bug("dsc_returned_not_loss", functools.partial(_build, bug="dsc_returned_not_loss"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped (classic): gradients accumulate across iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
