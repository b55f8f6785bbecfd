"""FlowNetS optical flow (Dosovitskiy et al.), Clément Pinard's FlowNetPytorch: the two frames concatenated on
channels into a six-channel input, the FlowNetS encoder (strided LeakyReLU convolutions) and refinement decoder
(deconvolutions, a flow predicted at each of five scales and upsampled into the next), trained with the multiscale
EPE (the target flow area-downsampled to each prediction, weights 0.005-0.32 from the finest scale), Adam
(betas 0.9/0.999, lr 1e-4, weight decay 4e-4 on weights and 0 on biases), MultiStepLR halving per epoch; the
validation EPE on the finest prediction upsampled, times ``div_flow``.

Source: https://github.com/ClementPinard/FlowNetPytorch
Commit: d5f3292a738209d5f3ea450cf714265034fd033a
Files: main.py, multiscaleloss.py, models/FlowNetS.py, models/util.py, flow_transforms.py, datasets/listdataset.py,
util.py
License: MIT (Copyright (c) 2017 Clément Pinard; full text in LICENSES/ClementPinard-FlowNetPytorch.txt)
Domain: vision, optical flow (FlowNetS, multiscale end-point error)

Kept as written: ``FlowNetS`` (``conv``/``deconv``/``predict_flow``/``crop_like``, the kaiming init with 0.1, five
flows in training and ``flow2`` alone in eval mode, ``weight_parameters``/``bias_parameters``), ``flownets``
(``batchNorm=False``, the default arch), ``multiscaleloss.py`` (``EPE``, ``multiscaleEPE``, ``realEPE``; the
sparse paths kept but unused, as for Flying Chairs), the input and target transforms (``ArrayToTensor``, the
``/255`` and mean normalization, the target divided by ``div_flow`` 20), the ``RandomVerticalFlip`` and
``RandomHorizontalFlip`` co-transforms, ``ListDataset.__getitem__``, the param groups and Adam, ``train``'s loop
body (``torch.cat(input, 1)``, ``multiscaleEPE``, the ``realEPE`` meter, zero_grad/backward/step) and
``validate``'s EPE.

Deviations from the original:
- sizes for 2 CPU cores: every channel count of FlowNetS divided by 8 (64..1024 -> 8..128; the concatenations'
  widths follow: 1026 -> 130, 770 -> 98, 386 -> 50, 194 -> 26); frames 320x448 crops -> 64x64; batch_size 8 kept;
  Adam's lr 1e-4 -> 1e-3 so that 30 steps show the loss falling (the original runs 300 epochs); an epoch is the 64
  training pairs (8 steps), the MultiStepLR milestones [100, 150, 200] -> [10, 15, 20] epochs;
- data: Flying Chairs (``.ppm`` pairs and ``.flo`` files) is replaced by 80 synthetic pairs made from ``seed``: a
  smooth random RGB texture in [0, 255] as the first frame, a random smooth flow (translation of up to 4 px plus a
  small rotation/zoom) and the second frame as the first warped by it (``grid_sample``), so that
  ``img1(x) = img2(x + flow(x))``; 64 train and 16 validation pairs; ``default_loader`` returns copies of the
  in-memory arrays instead of reading files;
- co-transforms: ``RandomTranslate``, ``RandomRotate`` and ``RandomCrop(320, 448)`` are dropped (the synthetic
  frames are already 64x64; rotation needs ``scipy.ndimage``); the flips run with ``random`` seeded from ``seed``;
  torchvision's ``transforms.Compose``/``Normalize`` are written out (``(x - mean) / std`` per channel);
- CUDA/DataParallel, tensorboard, timing meters, printing and checkpoints are dropped; the DataLoader has no
  workers and shuffles with a ``torch.Generator(seed)``;
- one ``train_step`` is one iteration of ``train``'s loop (returning the loss); ``model.train()`` runs at the
  start of every step (the original runs it at the start of each epoch's ``train``, after ``validate`` left the
  model in eval mode); ``scheduler.step()`` runs at each epoch's end as in ``main``; ``eval_fn`` is ``validate``
  on the validation pairs (mean EPE in pixels, under ``no_grad``); ``loader`` yields ``(input, target)`` with the
  frames already concatenated;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, RUF012, SIM101, RUF059

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data
from torch.nn.init import constant_, kaiming_normal_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

D = 8  # (port) every channel count divided by D
SIZE = 32
N_TRAIN, N_VAL = 64, 16
device = torch.device("cpu")


class args:  # main.py's defaults (``--arch flownets --dataset flying_chairs``)
    solver = "adam"
    epochs = 300
    epoch_size = 0  # (port) 1000: the 8 batches of the synthetic set
    batch_size = 8
    lr = 0.001  # (port) 0.0001
    momentum = 0.9
    beta = 0.999
    weight_decay = 4e-4
    bias_decay = 0
    multiscale_weights = [0.005, 0.01, 0.02, 0.08, 0.32]
    sparse = False
    div_flow = 20
    milestones = [10, 15, 20]  # (port) [100, 150, 200]


# models/util.py
def conv(batchNorm, in_planes, out_planes, kernel_size=3, stride=1):
    if batchNorm:
        return nn.Sequential(
            nn.Conv2d(
                in_planes,
                out_planes,
                kernel_size=kernel_size,
                stride=stride,
                padding=(kernel_size - 1) // 2,
                bias=False,
            ),
            nn.BatchNorm2d(out_planes),
            nn.LeakyReLU(0.1, inplace=True),
        )
    else:
        return nn.Sequential(
            nn.Conv2d(
                in_planes,
                out_planes,
                kernel_size=kernel_size,
                stride=stride,
                padding=(kernel_size - 1) // 2,
                bias=True,
            ),
            nn.LeakyReLU(0.1, inplace=True),
        )


def predict_flow(in_planes):
    return nn.Conv2d(in_planes, 2, kernel_size=3, stride=1, padding=1, bias=False)


def deconv(in_planes, out_planes):
    return nn.Sequential(
        nn.ConvTranspose2d(
            in_planes, out_planes, kernel_size=4, stride=2, padding=1, bias=False
        ),
        nn.LeakyReLU(0.1, inplace=True),
    )


def crop_like(input, target):
    if input.size()[2:] == target.size()[2:]:
        return input
    else:
        return input[:, :, : target.size(2), : target.size(3)]


# models/FlowNetS.py
class FlowNetS(nn.Module):
    expansion = 1

    def __init__(self, batchNorm=True):
        super(FlowNetS, self).__init__()

        self.batchNorm = batchNorm
        self.conv1 = conv(self.batchNorm, 6, 64 // D, kernel_size=7, stride=2)
        self.conv2 = conv(self.batchNorm, 64 // D, 128 // D, kernel_size=5, stride=2)
        self.conv3 = conv(self.batchNorm, 128 // D, 256 // D, kernel_size=5, stride=2)
        self.conv3_1 = conv(self.batchNorm, 256 // D, 256 // D)
        self.conv4 = conv(self.batchNorm, 256 // D, 512 // D, stride=2)
        self.conv4_1 = conv(self.batchNorm, 512 // D, 512 // D)
        self.conv5 = conv(self.batchNorm, 512 // D, 512 // D, stride=2)
        self.conv5_1 = conv(self.batchNorm, 512 // D, 512 // D)
        self.conv6 = conv(self.batchNorm, 512 // D, 1024 // D, stride=2)
        self.conv6_1 = conv(self.batchNorm, 1024 // D, 1024 // D)

        self.deconv5 = deconv(1024 // D, 512 // D)
        self.deconv4 = deconv(1024 // D + 2, 256 // D)  # 1026
        self.deconv3 = deconv(768 // D + 2, 128 // D)  # 770
        self.deconv2 = deconv(384 // D + 2, 64 // D)  # 386

        self.predict_flow6 = predict_flow(1024 // D)
        self.predict_flow5 = predict_flow(1024 // D + 2)
        self.predict_flow4 = predict_flow(768 // D + 2)
        self.predict_flow3 = predict_flow(384 // D + 2)
        self.predict_flow2 = predict_flow(192 // D + 2)  # 194

        self.upsampled_flow6_to_5 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)
        self.upsampled_flow5_to_4 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)
        self.upsampled_flow4_to_3 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)
        self.upsampled_flow3_to_2 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)

        for m in self.modules():
            if isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
                kaiming_normal_(m.weight, 0.1)
                if m.bias is not None:
                    constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                constant_(m.weight, 1)
                constant_(m.bias, 0)

    def forward(self, x):
        out_conv2 = self.conv2(self.conv1(x))
        out_conv3 = self.conv3_1(self.conv3(out_conv2))
        out_conv4 = self.conv4_1(self.conv4(out_conv3))
        out_conv5 = self.conv5_1(self.conv5(out_conv4))
        out_conv6 = self.conv6_1(self.conv6(out_conv5))

        flow6 = self.predict_flow6(out_conv6)
        flow6_up = crop_like(self.upsampled_flow6_to_5(flow6), out_conv5)
        out_deconv5 = crop_like(self.deconv5(out_conv6), out_conv5)

        concat5 = torch.cat((out_conv5, out_deconv5, flow6_up), 1)
        flow5 = self.predict_flow5(concat5)
        flow5_up = crop_like(self.upsampled_flow5_to_4(flow5), out_conv4)
        out_deconv4 = crop_like(self.deconv4(concat5), out_conv4)

        concat4 = torch.cat((out_conv4, out_deconv4, flow5_up), 1)
        flow4 = self.predict_flow4(concat4)
        flow4_up = crop_like(self.upsampled_flow4_to_3(flow4), out_conv3)
        out_deconv3 = crop_like(self.deconv3(concat4), out_conv3)

        concat3 = torch.cat((out_conv3, out_deconv3, flow4_up), 1)
        flow3 = self.predict_flow3(concat3)
        flow3_up = crop_like(self.upsampled_flow3_to_2(flow3), out_conv2)
        out_deconv2 = crop_like(self.deconv2(concat3), out_conv2)

        concat2 = torch.cat((out_conv2, out_deconv2, flow3_up), 1)
        flow2 = self.predict_flow2(concat2)

        if self.training:
            return flow2, flow3, flow4, flow5, flow6
        else:
            return flow2

    def weight_parameters(self):
        return [param for name, param in self.named_parameters() if "weight" in name]

    def bias_parameters(self):
        return [param for name, param in self.named_parameters() if "bias" in name]


def flownets(data=None):
    model = FlowNetS(batchNorm=False)
    if data is not None:
        model.load_state_dict(data["state_dict"])
    return model


# multiscaleloss.py
def make_loss(bug=None):
    def EPE(input_flow, target_flow, sparse=False, mean=True):
        if bug == "epe_norm_over_batch":
            EPE_map = torch.norm(target_flow - input_flow, 2, 0)
        else:
            EPE_map = torch.norm(target_flow - input_flow, 2, 1)
        batch_size = EPE_map.size(0)
        if sparse:
            # invalid flow is defined with both flow coordinates to be exactly 0
            mask = (target_flow[:, 0] == 0) & (target_flow[:, 1] == 0)

            EPE_map = EPE_map[~mask]
        if mean:
            return EPE_map.mean()
        else:
            return EPE_map.sum() / batch_size

    def sparse_max_pool(input, size):
        positive = (input > 0).float()
        negative = (input < 0).float()
        output = F.adaptive_max_pool2d(input * positive, size) - F.adaptive_max_pool2d(
            -input * negative, size
        )
        return output

    def multiscaleEPE(network_output, target_flow, weights=None, sparse=False):
        def one_scale(output, target, sparse):

            b, _, h, w = output.size()

            if sparse:
                target_scaled = sparse_max_pool(target, (h, w))
            else:
                target_scaled = F.interpolate(target, (h, w), mode="area")
            return EPE(output, target_scaled, sparse, mean=False)

        if type(network_output) not in [tuple, list]:
            network_output = [network_output]
        if weights is None:
            weights = [0.005, 0.01, 0.02, 0.08, 0.32]  # as in original article
        assert len(weights) == len(network_output)

        loss = 0
        for output, weight in zip(network_output, weights):
            loss += weight * one_scale(output, target_flow, sparse)
        return loss

    def realEPE(output, target, sparse=False):
        b, _, h, w = target.size()
        upsampled_output = F.interpolate(
            output, (h, w), mode="bilinear", align_corners=False
        )
        return EPE(upsampled_output, target, sparse, mean=True)

    return multiscaleEPE, realEPE


# flow_transforms.py
class Compose(object):
    def __init__(self, co_transforms):
        self.co_transforms = co_transforms

    def __call__(self, input, target):
        for t in self.co_transforms:
            input, target = t(input, target)
        return input, target


class ArrayToTensor(object):
    """Converts a numpy.ndarray (H x W x C) to a torch.FloatTensor of shape (C x H x W)."""

    def __call__(self, array):
        assert isinstance(array, np.ndarray)
        array = np.transpose(array, (2, 0, 1))
        # handle numpy array
        tensor = torch.from_numpy(array)
        # put it from HWC to CHW format
        return tensor.float()


class Normalize(object):  # (port) torchvision.transforms.Normalize written out
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, tensor):
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return (tensor - mean) / std


class TCompose(object):  # (port) torchvision.transforms.Compose written out
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


def make_flips(bug=None):
    class RandomHorizontalFlip(object):
        """Randomly horizontally flips the given PIL.Image with a probability of 0.5"""

        def __call__(self, inputs, target):
            if random.random() < 0.5:
                inputs[0] = np.copy(np.fliplr(inputs[0]))
                inputs[1] = np.copy(np.fliplr(inputs[1]))
                target = np.copy(np.fliplr(target))
                if bug != "hflip_flow_sign_kept":
                    target[:, :, 0] *= -1
            return inputs, target

    class RandomVerticalFlip(object):
        """Randomly horizontally flips the given PIL.Image with a probability of 0.5"""

        def __call__(self, inputs, target):
            if random.random() < 0.5:
                inputs[0] = np.copy(np.flipud(inputs[0]))
                inputs[1] = np.copy(np.flipud(inputs[1]))
                target = np.copy(np.flipud(target))
                target[:, :, 1] *= -1
            return inputs, target

    return RandomHorizontalFlip, RandomVerticalFlip


# datasets/listdataset.py
class ListDataset(data.Dataset):
    def __init__(
        self,
        root,
        path_list,
        transform=None,
        target_transform=None,
        co_transform=None,
        loader=None,
    ):

        self.root = root
        self.path_list = path_list
        self.transform = transform
        self.target_transform = target_transform
        self.co_transform = co_transform
        self.loader = loader

    def __getitem__(self, index):
        inputs, target = self.path_list[index]

        inputs, target = self.loader(self.root, inputs, target)
        if self.co_transform is not None:
            inputs, target = self.co_transform(inputs, target)
        if self.transform is not None:
            inputs[0] = self.transform(inputs[0])
            inputs[1] = self.transform(inputs[1])
        if self.target_transform is not None:
            target = self.target_transform(target)
        return inputs, target

    def __len__(self):
        return len(self.path_list)


# ----------------------------------------------------------------------------------------------------- (port) data
def synthetic_pairs(gen, n):
    """(img1, img2) HxWx3 float32 in [0, 255] and the flow HxWx2 with img1(x) = img2(x + flow(x))."""
    pairs = []
    ys, xs = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32),
                            indexing="ij")
    c = (SIZE - 1) / 2
    for _ in range(n):
        low = torch.rand(1, 3, 8, 8, generator=gen)
        mid = torch.rand(1, 3, 16, 16, generator=gen)
        tex = (0.6 * F.interpolate(low, (SIZE, SIZE), mode="bicubic", align_corners=False)
               + 0.4 * F.interpolate(mid, (SIZE, SIZE), mode="bilinear", align_corners=False))
        tex = tex.clamp(0, 1) * 255
        t = (torch.rand(2, generator=gen) * 2 - 1) * 4.0
        a = (torch.rand(2, generator=gen) * 2 - 1) * 0.04  # rotation, zoom
        u = t[0] + a[1] * (xs - c) - a[0] * (ys - c)
        v = t[1] + a[0] * (xs - c) + a[1] * (ys - c)
        # img2 sampled so that img2(x + flow(x)) = img1(x), approximately: img2(y) = img1(y - flow(y))
        gx = (xs - u) / c - 1
        gy = (ys - v) / c - 1
        grid = torch.stack((gx, gy), -1)[None]
        img2 = F.grid_sample(tex, grid, mode="bilinear", padding_mode="border", align_corners=True)
        img1 = tex
        flow = torch.stack((u, v), -1)
        pairs.append(([img1[0].permute(1, 2, 0).numpy().astype(np.float32),
                       img2[0].permute(1, 2, 0).numpy().astype(np.float32)],
                      flow.numpy().astype(np.float32)))
    return pairs


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pairs = synthetic_pairs(gen, N_TRAIN + N_VAL)
    multiscaleEPE, realEPE = make_loss(bug)
    RandomHorizontalFlip, RandomVerticalFlip = make_flips(bug)

    def default_loader(root, path_imgs, path_flo):  # (port) the arrays in memory, copied
        return [np.array(img, dtype=np.float32) for img in path_imgs], np.array(path_flo)

    # Data loading code
    input_transform = TCompose(
        [
            ArrayToTensor(),
            Normalize(mean=[0, 0, 0], std=[255, 255, 255]),
            Normalize(mean=[0.45, 0.432, 0.411], std=[1, 1, 1]),
        ]
    )
    target_transform = TCompose(
        [
            ArrayToTensor(),
            Normalize(mean=[0, 0], std=[args.div_flow, args.div_flow]),
        ]
    )
    co_transform = Compose(
        [
            RandomVerticalFlip(),
            RandomHorizontalFlip(),
        ]
    )
    train_set = ListDataset(None, pairs[:N_TRAIN], transform=input_transform, target_transform=target_transform,
                            co_transform=co_transform, loader=default_loader)
    test_set = ListDataset(None, pairs[N_TRAIN:], transform=input_transform, target_transform=target_transform,
                           co_transform=None, loader=default_loader)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=args.batch_size,
        num_workers=0,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    val_loader = torch.utils.data.DataLoader(
        test_set,
        batch_size=args.batch_size,
        num_workers=0,
        shuffle=False,
    )

    model = flownets(None).to(device)

    param_groups = [
        {"params": model.bias_parameters(), "weight_decay": args.bias_decay},
        {"params": model.weight_parameters(), "weight_decay": args.weight_decay},
    ]
    optimizer = torch.optim.Adam(
        param_groups, args.lr, betas=(args.momentum, args.beta)
    )
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=args.milestones, gamma=0.5
    )
    epoch_size = (
        len(train_loader)
        if args.epoch_size == 0
        else min(len(train_loader), args.epoch_size)
    )
    st = {"it": None, "i": 0}

    def train_step():
        if st["it"] is None:
            st["it"], st["i"] = iter(train_loader), 0
        # switch to train mode
        model.train()
        input, target = next(st["it"])
        i = st["i"]

        target = target.to(device)
        input = torch.cat(input, 1).to(device)

        # compute output
        output = model(input)
        if args.sparse:
            h, w = target.size()[-2:]
            output = [F.interpolate(output[0], (h, w)), *output[1:]]

        loss = multiscaleEPE(
            output, target, weights=args.multiscale_weights, sparse=args.sparse
        )
        flow2_EPE = args.div_flow * realEPE(output[0], target, sparse=args.sparse)  # noqa: F841 (the meter)

        # compute gradient and do optimization step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        st["i"] += 1
        if i + 1 >= epoch_size:  # the epoch's end: main's scheduler.step(), a fresh shuffled pass
            scheduler.step()
            st["it"] = None
        return loss.item()

    def validate(model, _batch=None):
        # switch to evaluate mode
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i, (input, target) in enumerate(val_loader):
                target = target.to(device)
                input = torch.cat(input, 1).to(device)

                # compute output
                output = model(input)
                flow2_EPE = args.div_flow * realEPE(output, target, sparse=args.sparse)
                total += flow2_EPE.item() * target.size(0)
                count += target.size(0)
        return total / count

    def loss_fn(output, target):
        return multiscaleEPE(output, target, weights=args.multiscale_weights, sparse=args.sparse)

    def loader():
        for input, target in train_loader:
            yield torch.cat(input, 1), target

    inp, tgt = next(iter(torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=False)))
    batch = (torch.cat(inp, 1), tgt)
    return Program(name="flownetpytorch_flownets", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=validate, loader=loader())


build = functools.partial(_build, bug=None)

BUGS = [
    # RandomHorizontalFlip flips both frames and the flow field but keeps the sign of its horizontal component
    # (classic co-transform slip: a mirrored motion points the other way): on half of the pairs the target's u is
    # the opposite of the motion the frames show.
    Bug("hflip_flow_sign_kept", functools.partial(_build, bug="hflip_flow_sign_kept"), "learning_ledger",
        ("TASK",)),
    # EPE's norm taken over dim 0 (the batch) instead of dim 1 (the flow's two components) (classic axis slip):
    # the loss no longer measures each pixel's end-point error.
    Bug("epe_norm_over_batch", functools.partial(_build, bug="epe_norm_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
]
