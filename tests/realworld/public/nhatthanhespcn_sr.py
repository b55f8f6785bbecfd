"""ESPCN super-resolution of Nhat-Thanh/ESPCN-Pytorch: the repository's ``ESPCN_model`` (5x5 conv to 64, tanh, 3x3
conv to 32, tanh, 3x3 conv to 3 r^2 channels, ``PixelShuffle``, output clipped to [0, 1]; every weight drawn from
N(0, 0.001)), trained by ``train.py`` through the ``ESPCN`` wrapper of ``model.py`` at scale 2 on the ``dataset``
class's patches (34x34 HR crops taken with a stride of 33, the LR input made by a Gaussian blur (sigma 0.7) and a
bicubic resize to 17x17, both converted to YCbCr and divided by 255; ``get_batch`` walks the patches in order and
reshuffles them, data and labels together, when an epoch ends): MSE ``loss(hr, sr)``, Adam lr 2e-4, PSNR metric.

Source: https://github.com/Nhat-Thanh/ESPCN-Pytorch
Commit: 86370ec715d6e30c7915d4f4a7bb2e46cd56f4de
Files: ``train.py``, ``model.py`` (``ESPCN.train``, ``train_step``, ``evaluate``, ``predict``), ``neuralnet.py``
(``ESPCN_model``), ``utils/dataset.py`` (``dataset.generate``, ``get_batch``), ``utils/common.py`` (``rgb2ycbcr``,
``norm01``, ``PSNR``, ``shuffle``, ``gaussian_blur``, ``resize_bicubic``)
License: MIT (Copyright (c) 2022 VuNguyenNhatThanh; full text in LICENSES/Nhat-Thanh-ESPCN-Pytorch.txt)
Domain: vision, single-image super-resolution (sub-pixel convolution)

Deviations from the original:
- the T91 / General100 images are not here: 8 HR images of 102x102 are made from ``seed`` (smooth random colour
  fields: bilinearly upsampled noise plus a few sharp-edged rectangles, uint8 RGB), cut into 9 patches each as
  ``generate`` does; the ``.npy`` cache files are not written (the arrays are kept in memory);
- no torchvision: ``transforms.GaussianBlur(3, 0.7)`` is written out (separable 3-tap Gaussian, reflect padding, as
  torchvision does) and ``transforms.Resize(BICUBIC)`` is ``F.interpolate(mode='bicubic', antialias=True)`` with a
  round to uint8; ``io.read_image`` is the in-memory image;
- ``np.random.shuffle`` in ``shuffle`` draws from a seeded ``np.random.RandomState``;
- sizes for 2 CPU cores: batch 128 -> 24, 100000 steps -> what the test runs; the validation every
  ``save_every`` steps, the checkpoints and the logs are left out;
- one ``train_step`` is one iteration of ``ESPCN.train``'s loop (``get_batch``, then ``ESPCN.train_step``);
  ``eval_fn`` is ``evaluate``'s PSNR on a batch (``predict``: ``model.train(False)``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES, IMG, BATCH = 8, 102, 24


# ---- neuralnet.py --------------------------------------------------------------------------------------------

class ESPCN_model(nn.Module):
    def __init__(self, scale : int) -> None:
        super().__init__()
        self.conv_1 = nn.Conv2d(in_channels=3, out_channels=64, kernel_size=5, padding=2)
        nn.init.normal_(self.conv_1.weight, mean=0, std=0.001)
        nn.init.zeros_(self.conv_1.bias)

        self.tanh = nn.Tanh()

        self.conv_2 = nn.Conv2d(in_channels=64, out_channels=32, kernel_size=3, padding=1)
        nn.init.normal_(self.conv_2.weight, mean=0, std=0.001)
        nn.init.zeros_(self.conv_2.bias)

        self.conv_3 = nn.Conv2d(in_channels=32, out_channels=(3 * scale * scale), kernel_size=3, padding=1)
        nn.init.normal_(self.conv_3.weight, mean=0, std=0.001)
        nn.init.zeros_(self.conv_3.bias)

        self.pixel_shuffle = nn.PixelShuffle(scale)

    def forward(self, X_in):
        X = self.tanh(self.conv_1(X_in))
        X = self.tanh(self.conv_2(X))
        X = self.conv_3(X)
        X = self.pixel_shuffle(X)
        X_out = torch.clip(X, 0.0, 1.0)
        return X_out


# ---- utils/common.py (torchvision written out) ---------------------------------------------------------------

def rgb2ycbcr(src):
    R = src[0]
    G = src[1]
    B = src[2]

    ycbcr = torch.zeros(size=src.shape)
    # *Intel IPP specific for the JPEG codec
    ycbcr[0] =  0.299 * R + 0.587 * G + 0.114 * B
    ycbcr[1] =  -0.16874 * R - 0.33126 * G + 0.5 * B + 128
    ycbcr[2] =  0.5 * R - 0.41869 * G - 0.08131 * B + 128

    # Y in range [16, 235]
    ycbcr[0] = torch.clip(ycbcr[0], 16, 235)
    # Cb, Cr in range [16, 240]
    ycbcr[[1, 2]] = torch.clip(ycbcr[[1, 2]], 16, 240)
    ycbcr = ycbcr.type(torch.uint8)
    return ycbcr


def resize_bicubic(src, h, w):
    """(port) ``transforms.Resize((h, w), BICUBIC)`` on a uint8 CHW tensor."""
    out = F.interpolate(src[None].float(), size=(h, w), mode='bicubic', align_corners=False, antialias=True)[0]
    return out.round().clamp(0, 255).to(torch.uint8)


def gaussian_blur(src, ksize=3, sigma=0.5):
    """(port) ``transforms.GaussianBlur(kernel_size=ksize, sigma=sigma)`` on a uint8 CHW tensor."""
    x = torch.arange(ksize, dtype=torch.float32) - (ksize - 1) / 2
    k1 = torch.exp(-0.5 * (x / sigma) ** 2)
    k1 = k1 / k1.sum()
    kernel = (k1[:, None] * k1[None, :]).expand(src.shape[0], 1, ksize, ksize)
    img = F.pad(src[None].float(), [ksize // 2] * 4, mode='reflect')
    out = F.conv2d(img, kernel, groups=src.shape[0])[0]
    return out.round().clamp(0, 255).to(torch.uint8)


def norm01(src):
    return src / 255


def PSNR(y_true, y_pred, max_val=1.0):
    y_true = y_true.type(torch.float32)
    y_pred = y_pred.type(torch.float32)
    MSE = torch.mean(torch.square(y_true - y_pred))
    return 10 * torch.log10(max_val * max_val / MSE)


def shuffle(X, Y, np_random):
    if X.shape[0] != Y.shape[0]:
        raise ValueError("X and Y must have the same number of elements")
    indices = np.arange(0, X.shape[0])
    np_random.shuffle(indices)
    X = torch.index_select(X, dim=0, index=torch.as_tensor(indices))
    Y = torch.index_select(Y, dim=0, index=torch.as_tensor(indices))
    return X, Y


def tensor2numpy(tensor):
    return tensor.detach().cpu().numpy()


# ---- utils/dataset.py ----------------------------------------------------------------------------------------

def _images(gen, n):
    """(port) ``n`` HR RGB images (uint8, 3 x IMG x IMG): upsampled colour noise plus sharp rectangles."""
    imgs = F.interpolate(torch.rand(n, 3, 8, 8, generator=gen), size=(IMG, IMG), mode='bilinear',
                         align_corners=False) * 160 + 40
    for i in range(n):
        for _ in range(6):
            y, x = torch.randint(0, IMG - 20, (2,), generator=gen).tolist()
            h, w = torch.randint(6, 20, (2,), generator=gen).tolist()
            imgs[i, :, y:y + h, x:x + w] = torch.rand(3, 1, 1, generator=gen) * 255
    return imgs.round().clamp(0, 255).to(torch.uint8)


class dataset:
    def __init__(self, images, subset, seed, bug=None):
        self.images = images
        self.subset = subset
        self.data = torch.Tensor([])
        self.labels = torch.Tensor([])
        self.cur_idx = 0
        self.np_random = np.random.RandomState(seed)
        self.bug = bug

    def generate(self, lr_crop_size, hr_crop_size, transform=False):
        data = []
        labels = []
        step = hr_crop_size - 1

        for hr_image in self.images:  # (port) in place of read_image over the subset's files
            h = hr_image.shape[1]
            w = hr_image.shape[2]
            for x in np.arange(start=0, stop=h-hr_crop_size, step=step):
                for y in np.arange(start=0, stop=w-hr_crop_size, step=step):
                    subim_label  = hr_image[:, x : x + hr_crop_size, y : y + hr_crop_size]

                    subim_data = gaussian_blur(subim_label, sigma=0.7)
                    subim_data = resize_bicubic(subim_data, lr_crop_size, lr_crop_size)

                    subim_label = rgb2ycbcr(subim_label)
                    subim_data = rgb2ycbcr(subim_data)

                    if self.bug != "target_not_normalized":
                        subim_label = norm01(subim_label)
                    subim_data = norm01(subim_data)

                    data.append(subim_data.numpy())
                    labels.append(subim_label.numpy())

        self.data = torch.as_tensor(np.array(data)).float()  # (port) load_data without the .npy files
        self.labels = torch.as_tensor(np.array(labels)).float()

    def get_batch(self, batch_size, shuffle_each_epoch=True):
        # Ignore remaining dataset because of
        # shape error when run torch.mean()
        isEnd = False
        if self.cur_idx + batch_size > self.data.shape[0]:
            isEnd = True
            self.cur_idx = 0
            if shuffle_each_epoch:
                if self.bug == "labels_shuffled_apart":
                    self.data, _ = shuffle(self.data, self.labels, self.np_random)
                    _, self.labels = shuffle(self.data, self.labels, self.np_random)
                else:
                    self.data, self.labels = shuffle(self.data, self.labels, self.np_random)

        data = self.data[self.cur_idx : self.cur_idx + batch_size]
        labels = self.labels[self.cur_idx : self.cur_idx + batch_size]
        self.cur_idx += batch_size

        return data, labels, isEnd


# ---- model.py (ESPCN) / train.py -----------------------------------------------------------------------------

class ESPCN:
    def __init__(self, scale, device, bug=None):
        self.device = device
        self.model = ESPCN_model(scale).to(device)
        self.optimizer = None
        self.loss =  None
        self.metric = None
        self.bug = bug

    def setup(self, optimizer, loss, metric):
        self.optimizer = optimizer
        self.loss = loss
        self.metric = metric

    def predict(self, lr):
        self.model.train(False)
        sr = self.model(lr)
        return sr

    def train_step(self, lr, hr):
        self.model.train(True)
        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()

        lr, hr = lr.to(self.device), hr.to(self.device)
        sr = self.model(lr)

        loss = self.loss(hr, sr)
        metric = self.metric(hr, sr)
        loss.backward()
        self.optimizer.step()

        return loss, metric


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    scale = 2
    lr_crop_size = 17
    hr_crop_size = 17 * 2

    train_set = dataset(_images(gen, N_IMAGES), "train", seed, bug=bug)
    train_set.generate(lr_crop_size, hr_crop_size)
    valid_set = dataset(_images(gen, 2), "validation", seed + 1)
    valid_set.generate(lr_crop_size, hr_crop_size)

    device = 'cpu'
    espcn = ESPCN(scale, device, bug=bug)
    espcn.setup(optimizer=torch.optim.Adam(espcn.model.parameters(), lr=2e-4),
                loss=torch.nn.MSELoss(), metric=PSNR)

    def train_step():
        lr, hr, _ = train_set.get_batch(BATCH)
        loss, metric = espcn.train_step(lr, hr)
        return float(tensor2numpy(loss))

    def eval_fn(model, batch):
        lr, hr = batch
        with torch.no_grad():
            sr = espcn.predict(lr)
            metric = espcn.metric(hr, sr)
        return float(metric)

    batch = (valid_set.data[:BATCH], valid_set.labels[:BATCH])
    return Program(name="nhatthanhespcn_sr", model=espcn.model, batch=batch,
                   loss_fn=lambda sr, hr: espcn.loss(hr, sr), optimizer=espcn.optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # ``get_batch``'s epoch-end reshuffle permutes the inputs and the targets with two different draws: from the
    # second epoch on every LR patch is paired with another patch's HR target.
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # ``norm01`` dropped from the HR labels: the targets stay in 16..240 while the inputs are in [0, 1] and the
    # model's output is clipped to [0, 1].
    Bug("target_not_normalized", functools.partial(_build, bug="target_not_normalized"), "learning_ledger",
        ("TASK",)),
    # ``optimizer.zero_grad()`` dropped from ``ESPCN.train_step``: gradients accumulate across steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
