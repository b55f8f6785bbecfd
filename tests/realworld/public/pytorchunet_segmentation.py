"""U-Net for semantic segmentation, trained by the loop of the repository's README: ``UNet(n_classes=2,
padding=True, up_mode='upsample')`` (bilinear upsampling + 1x1 conv, center-cropped skip connections, 1x1 output
conv), ``F.cross_entropy`` on ``[N, 2, H, W]`` logits against ``[N, H, W]`` class indices, Adam with its default
learning rate, ``zero_grad`` / ``backward`` / ``step`` per batch.

Source: https://github.com/jvanvugt/pytorch-unet
Commit: 7e577223d048ace32c35c3f1e18f36cc9a8d1971
Files: unet.py, README.md (the usage example)
License: MIT (Copyright (c) 2018 Joris)
Domain: semantic segmentation (encoder-decoder with skip connections, per-pixel cross-entropy)

Deviations from the original:
- sizes: depth 5 -> 3, wf 6 -> 2 (4/8/16 filters), images 24x24, batch 8;
- data: the README leaves ``dataloader = ...``; a synthetic dataset made from ``seed`` stands in: one-channel
  images holding 1-3 axis-aligned rectangles of random size and brightness on a noisy background, the label map is
  1 inside a rectangle, 0 elsewhere (a ``TensorDataset`` in a shuffled ``DataLoader``);
- ``.to(device)`` calls are dropped (CPU); one ``train_step`` is one iteration of the inner loop;
- ``batch`` is the first batch, ``loss_fn`` the loop's ``F.cross_entropy(prediction, y)``.
"""
# ruff: noqa: UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- unet.py -----------------------------------------------------------------------------------------------------
# Adapted from https://discuss.pytorch.org/t/unet-implementation/426


class UNet(nn.Module):
    def __init__(
        self,
        in_channels=1,
        n_classes=2,
        depth=5,
        wf=6,
        padding=False,
        batch_norm=False,
        up_mode='upconv',
    ):
        """
        Implementation of
        U-Net: Convolutional Networks for Biomedical Image Segmentation
        (Ronneberger et al., 2015)
        https://arxiv.org/abs/1505.04597

        Using the default arguments will yield the exact version used
        in the original paper

        Args:
            in_channels (int): number of input channels
            n_classes (int): number of output channels
            depth (int): depth of the network
            wf (int): number of filters in the first layer is 2**wf
            padding (bool): if True, apply padding such that the input shape
                            is the same as the output.
                            This may introduce artifacts
            batch_norm (bool): Use BatchNorm after layers with an
                               activation function
            up_mode (str): one of 'upconv' or 'upsample'.
                           'upconv' will use transposed convolutions for
                           learned upsampling.
                           'upsample' will use bilinear upsampling.
        """
        super(UNet, self).__init__()
        assert up_mode in ('upconv', 'upsample')
        self.padding = padding
        self.depth = depth
        prev_channels = in_channels
        self.down_path = nn.ModuleList()
        for i in range(depth):
            self.down_path.append(
                UNetConvBlock(prev_channels, 2 ** (wf + i), padding, batch_norm)
            )
            prev_channels = 2 ** (wf + i)

        self.up_path = nn.ModuleList()
        for i in reversed(range(depth - 1)):
            self.up_path.append(
                UNetUpBlock(prev_channels, 2 ** (wf + i), up_mode, padding, batch_norm)
            )
            prev_channels = 2 ** (wf + i)

        self.last = nn.Conv2d(prev_channels, n_classes, kernel_size=1)

    def forward(self, x):
        blocks = []
        for i, down in enumerate(self.down_path):
            x = down(x)
            if i != len(self.down_path) - 1:
                blocks.append(x)
                x = F.max_pool2d(x, 2)

        for i, up in enumerate(self.up_path):
            x = up(x, blocks[-i - 1])

        return self.last(x)


class UNetConvBlock(nn.Module):
    def __init__(self, in_size, out_size, padding, batch_norm):
        super(UNetConvBlock, self).__init__()
        block = []

        block.append(nn.Conv2d(in_size, out_size, kernel_size=3, padding=int(padding)))
        block.append(nn.ReLU())
        if batch_norm:
            block.append(nn.BatchNorm2d(out_size))

        block.append(nn.Conv2d(out_size, out_size, kernel_size=3, padding=int(padding)))
        block.append(nn.ReLU())
        if batch_norm:
            block.append(nn.BatchNorm2d(out_size))

        self.block = nn.Sequential(*block)

    def forward(self, x):
        out = self.block(x)
        return out


class UNetUpBlock(nn.Module):
    def __init__(self, in_size, out_size, up_mode, padding, batch_norm):
        super(UNetUpBlock, self).__init__()
        if up_mode == 'upconv':
            self.up = nn.ConvTranspose2d(in_size, out_size, kernel_size=2, stride=2)
        elif up_mode == 'upsample':
            self.up = nn.Sequential(
                nn.Upsample(mode='bilinear', scale_factor=2),
                nn.Conv2d(in_size, out_size, kernel_size=1),
            )

        self.conv_block = UNetConvBlock(in_size, out_size, padding, batch_norm)

    def center_crop(self, layer, target_size):
        _, _, layer_height, layer_width = layer.size()
        diff_y = (layer_height - target_size[0]) // 2
        diff_x = (layer_width - target_size[1]) // 2
        return layer[
            :, :, diff_y : (diff_y + target_size[0]), diff_x : (diff_x + target_size[1])
        ]

    def forward(self, x, bridge):
        up = self.up(x)
        crop1 = self.center_crop(bridge, up.shape[2:])
        out = torch.cat([up, crop1], 1)
        out = self.conv_block(out)

        return out


# ---- README.md usage example -------------------------------------------------------------------------------------


def make_data(gen, n, size=24):
    """Noisy images with 1-3 bright axis-aligned rectangles; the label map is 1 inside a rectangle."""
    X = torch.randn(n, 1, size, size, generator=gen) * 0.3
    y = torch.zeros(n, size, size, dtype=torch.long)
    for k in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            h, w = torch.randint(4, 11, (2,), generator=gen).tolist()
            r, c = int(torch.randint(0, size - h, (1,), generator=gen)), int(torch.randint(0, size - w, (1,), generator=gen))
            X[k, 0, r:r + h, c:c + w] += 0.8 + 0.6 * torch.rand(1, generator=gen)
            y[k, r:r + h, c:c + w] = 1
    return X, y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X_all, y_all = make_data(gen, 64)
    dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_all, y_all), batch_size=8,
                                             shuffle=True, generator=gen)

    model = UNet(n_classes=2, depth=3, wf=2, padding=True, up_mode='upsample')
    if bug == "up_path_not_optimized":
        # the optimizer built over the encoder and the output conv only: the decoder stays at its initialization
        optim = torch.optim.Adam(list(model.down_path.parameters()) + list(model.last.parameters()))
    else:
        optim = torch.optim.Adam(model.parameters())

    def batches():
        while True:
            yield from dataloader

    it = batches()

    def train_step():
        X, y = next(it)
        if bug == "mask_transposed":
            # the label maps read in (W, H) order: each mask is the transpose of its image's
            y = y.transpose(1, 2)
        prediction = model(X)  # [N, 2, H, W]
        if bug == "softmax_before_cross_entropy":
            # probabilities handed to a loss that applies log_softmax itself
            loss = F.cross_entropy(F.softmax(prediction, dim=1), y)
        else:
            loss = F.cross_entropy(prediction, y)

        optim.zero_grad()
        loss.backward()
        optim.step()
        return loss.detach()

    first = next(iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_all, y_all), batch_size=8)))
    if bug == "mask_transposed":
        first = (first[0], first[1].transpose(1, 2))
    if bug == "softmax_before_cross_entropy":
        def loss_fn(prediction, y):
            return F.cross_entropy(F.softmax(prediction, dim=1), y)
    else:
        def loss_fn(prediction, y):
            return F.cross_entropy(prediction, y)
    return Program(name="pytorchunet_segmentation", model=model, batch=tuple(first), loss_fn=loss_fn,
                   optimizer=optim, train_step=train_step, loader=dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the label maps stored/read transposed relative to the images (a wrong layout in the data pipeline).
    Bug("mask_transposed", functools.partial(_build, bug="mask_transposed"), "learning_ledger", ("TASK",)),
    # classic: softmax applied to the logits before F.cross_entropy, which applies log_softmax again.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: parameters missing from the optimizer (the decoder path left out).
    Bug("up_path_not_optimized", functools.partial(_build, bug="up_path_not_optimized"), "four_structures",
        ("up_path",)),
]
