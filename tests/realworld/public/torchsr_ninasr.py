# ruff: noqa: UP008, SIM101, PLR0402
"""NinaSR-B0 single-image super-resolution (x2) as torchSR's ``scripts/train_ninasr.sh`` trains it: NinaSR (mean
``Rescale``, a head conv, 10 residual blocks with a locally pooled squeeze-excite attention and variance-preserving
in/out scales, a global skip, a sub-pixel tail), wrapped in ``ReplicationPaddedModel`` (4 pixels, removed after the
forward) with weight normalization on every convolution; L1 loss on the HR patch with the border shaved, Adam (lr
1e-3), MultiStepLR at 2/3 and 5/6 of the epochs (decay rate 3), random HR/LR crops at a common location biased
towards the borders and the FlipTurn augmentation; PSNR on a validation patch.

Source: https://github.com/Coloquinte/torchSR
Commit: 64321b8fd9581c9fa27ccdf13ea067d7ab5cb50d
Files: ``torchsr/models/ninasr.py``, ``torchsr/models/utils.py`` (``WrappedModel``, ``ReplicationPaddedModel``,
``run_and_remove_pad``), ``torchsr/train/trainer.py`` (``Trainer``: ``train_iter``, ``val_iter``,
``process_for_eval``, ``train``), ``torchsr/train/helpers.py`` (``get_model``, ``get_optimizer``,
``get_scheduler``, ``get_loss``, ``_get_transform_train``), ``torchsr/train/options.py`` (defaults),
``torchsr/transforms/transforms.py`` (``RandomCrop``, ``get_crop_params``, ``RandomFlipTurn``, ``Compose``),
``torchsr/datasets/common.py`` (``__getitem__``), ``scripts/train_ninasr.sh``
License: MIT (Copyright (c) 2021 Gabriel Gouvine; full text in LICENSES/Coloquinte-torchSR.txt)
Domain: vision, single-image super-resolution (residual CNN with local attention, sub-pixel upsampling, L1)

Kept as written: ``NinaSR`` (``AttentionBlock``, ``ResBlock`` with kaiming init, ``Rescale``, ``make_head`` /
``make_body`` / ``make_tail``, the forward), ``ninasr_b0`` (10 blocks, 16 features), ``ReplicationPaddedModel``,
``get_model``'s order (wrap with the padding, then ``nn.utils.weight_norm`` on every conv), ``get_optimizer`` (Adam
over the wrapped model's parameters), ``get_scheduler`` (MultiStepLR, gamma ``1 / lr_decay_rate``), ``get_loss``
(``nn.L1Loss``), ``train_iter``'s loop body (zero_grad, forward, ``process_for_eval`` on both, loss, backward, no
clipping, step), ``val_iter(final=False)`` (eval, no_grad, clamp), ``RandomCrop(margin=0.5)`` and ``RandomFlipTurn``
on the ``[hr, lr]`` list, the script's NinaSR-B0 x2 arguments (lr 1e-3, 300 epochs, decay steps 200 / 250, decay
rate 3, shave border 2, replication pad 4, weight norm).

Deviations from the original:
- DIV2K is not here: 24 synthetic 64x64 RGB HR images made from ``seed`` (sums of random oriented sinusoid
  gratings and soft blobs in [0, 1]) and their LR images by antialiased bicubic x2 downscaling in torch (DIV2K's
  bicubic track was made with MATLAB's ``imresize``); the dataset returns ``[hr, lr]`` tensors as
  ``Div2K.__getitem__`` does after ``ToTensor``; 4 further images are the validation set (``CenterCrop`` of 384
  is larger than them: the whole image, as ``allow_smaller`` does);
- sizes for 2 CPU cores: ``patch_size`` 48 -> 16 (``--patch-size-train`` ``(16 + 1) * 2`` = 34), ``batch_size``
  16 -> 8, ``dataset_repeat`` 20 -> 2;
- ``crop``, ``F.vflip``, ``F.hflip`` of torchvision are written out on tensors (slicing, ``torch.flip``);
  ``to_tuple``/``check_size_valid`` and the PIL/numpy branches are dropped; ``piq.psnr`` (not installed) is written
  out (``10 log10(1 / mse)`` per image, averaged);
- CPU only, float32; tqdm, AverageMeters, tensorboard and checkpoints are dropped (with them ``WrappedModel``'s
  ``state_dict``/``load_state_dict`` overrides and ``NinaSR``'s pretrained-URL loading);
- one ``train_step`` is one batch of ``train_iter`` (``model.train()`` and a new loader pass when a pass ends;
  ``scheduler.step()`` after ``dataset_repeat`` passes, as ``train`` does per epoch); ``eval_fn`` is
  ``val_iter(final=False)``'s PSNR;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL, HR_SIZE = 24, 4, 64  # (port) synthetic DIV2K stand-in

# torchsr/models/ninasr.py
class AttentionBlock(nn.Module):
    def __init__(self, n_feats, reduction=4, stride=16):
        super(AttentionBlock, self).__init__()
        self.body = nn.Sequential(
            nn.AvgPool2d(
                2 * stride - 1,
                stride=stride,
                padding=stride - 1,
                count_include_pad=False,
            ),
            nn.Conv2d(n_feats, n_feats // reduction, 1, bias=True),
            nn.ReLU(True),
            nn.Conv2d(n_feats // reduction, n_feats, 1, bias=True),
            nn.Sigmoid(),
            nn.Upsample(scale_factor=stride, mode="nearest"),
        )

    def forward(self, x):
        res = self.body(x)
        if res.shape != x.shape:
            res = res[:, :, : x.shape[2], : x.shape[3]]
        return res * x

class ResBlock(nn.Module):
    def __init__(self, n_feats, mid_feats, in_scale, out_scale):
        super(ResBlock, self).__init__()
        self.in_scale = in_scale
        self.out_scale = out_scale
        m = []
        conv1 = nn.Conv2d(n_feats, mid_feats, 3, padding=1, bias=True)
        nn.init.kaiming_normal_(conv1.weight)
        nn.init.zeros_(conv1.bias)
        m.append(conv1)
        m.append(nn.ReLU(True))
        m.append(AttentionBlock(mid_feats))
        conv2 = nn.Conv2d(mid_feats, n_feats, 3, padding=1, bias=False)
        nn.init.kaiming_normal_(conv2.weight)
        m.append(conv2)
        self.body = nn.Sequential(*m)

    def forward(self, x):
        res = self.body(x * self.in_scale) * (2 * self.out_scale)
        res += x
        return res

class Rescale(nn.Module):
    def __init__(self, sign):
        super(Rescale, self).__init__()
        rgb_mean = (0.4488, 0.4371, 0.4040)
        bias = sign * torch.Tensor(rgb_mean).reshape(1, 3, 1, 1)
        self.bias = nn.Parameter(bias, requires_grad=False)

    def forward(self, x):
        return x + self.bias

class NinaSR(nn.Module):
    def __init__(self, n_resblocks, n_feats, scale, pretrained=False, map_location=None, expansion=2.0):
        super(NinaSR, self).__init__()
        self.scale = scale
        self.url = None  # (port) the pretrained URLs are not used
        n_colors = 3
        self.head = NinaSR.make_head(n_colors, n_feats)
        self.body = NinaSR.make_body(n_resblocks, n_feats, expansion)
        self.tail = NinaSR.make_tail(n_colors, n_feats, scale)

    @staticmethod
    def make_head(n_colors, n_feats):
        m_head = [
            Rescale(-1),
            nn.Conv2d(n_colors, n_feats, 3, padding=1, bias=False),
        ]
        return nn.Sequential(*m_head)

    @staticmethod
    def make_body(n_resblocks, n_feats, expansion):
        mid_feats = int(n_feats * expansion)
        out_scale = 4 / n_resblocks
        expected_variance = 1.0
        m_body = []
        for i in range(n_resblocks):
            in_scale = 1.0 / math.sqrt(expected_variance)
            m_body.append(ResBlock(n_feats, mid_feats, in_scale, out_scale))
            expected_variance += out_scale**2
        return nn.Sequential(*m_body)

    @staticmethod
    def make_tail(n_colors, n_feats, scale):
        m_tail = [
            nn.Conv2d(n_feats, n_colors * scale**2, 3, padding=1, bias=True),
            nn.PixelShuffle(scale),
            Rescale(1),
        ]
        return nn.Sequential(*m_tail)

    def forward(self, x, scale=None):
        if scale is not None and scale != self.scale:
            raise ValueError(f"Network scale is {self.scale}, not {scale}")
        x = self.head(x)
        res = self.body(x)
        res += x
        x = self.tail(res)
        return x

def ninasr_b0(scale, pretrained=False):
    model = NinaSR(10, 16, scale, pretrained)
    return model

# torchsr/models/utils.py
class WrappedModel(nn.Module):
    def __init__(self, model):
        super(WrappedModel, self).__init__()
        self.model = model

def run_and_remove_pad(x, model, padding):
    w, h = x.shape[-2:]
    x = model(x)
    sw, sh = x.shape[-2:]
    if padding * sw % w != 0:
        raise ValueError(f"Padding {padding} is incompatible with scaling {w} --> {sw}")
    if padding * sh % h != 0:
        raise ValueError(f"Padding {padding} is incompatible with scaling {h} --> {sh}")
    px = padding * sw // w
    py = padding * sh // h
    return x[..., px:-px, py:-py]

class ReplicationPaddedModel(WrappedModel):
    def __init__(self, model, padding):
        super(ReplicationPaddedModel, self).__init__(model)
        self.padding = padding
        self.padder = nn.ReplicationPad2d(padding)

    def forward(self, x):
        x = self.padder(x)
        return run_and_remove_pad(x, self.model, self.padding)

# torchsr/transforms/transforms.py (tensor branches)
def apply_all(x, func):
    if isinstance(x, list) or isinstance(x, tuple):
        return [func(t) for t in x]
    else:
        return func(x)

def get_image_size(img):
    return (img.shape[-1], img.shape[-2])

def crop(img, top, left, height, width):
    return img[..., top : top + height, left : left + width]  # (port) F.crop on a tensor

def rot90(img):
    return torch.rot90(img, dims=(-2, -1))

def get_crop_params(x, scales):
    sizes = [get_image_size(img) for img in x]
    scaled_widths = [sc[0] * sz[0] for sc, sz in zip(scales, sizes)]
    scaled_heights = [sc[1] * sz[1] for sc, sz in zip(scales, sizes)]
    min_width = min(scaled_widths)
    min_height = min(scaled_heights)
    pixels_x = int(functools.reduce(np.lcm, [sc[0] for sc in scales]))
    pixels_y = int(functools.reduce(np.lcm, [sc[1] for sc in scales]))
    common_size = (min_width // pixels_x, min_height // pixels_y)
    size_ratios = [(pixels_x // sc[0], pixels_y // sc[1]) for sc in scales]
    return common_size, size_ratios

class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x

class RandomCrop(nn.Module):
    def __init__(self, size, scales, margin=0.0):
        super(RandomCrop, self).__init__()
        self.size = (size, size)
        self.scales = [(s, s) for s in scales]
        self.margin = margin

    def forward(self, x):
        scales = self.scales
        common_size, size_ratios = get_crop_params(x, scales)
        crop_ratio = size_ratios[0]
        common_crop_size = (
            self.size[0] // crop_ratio[0],
            self.size[1] // crop_ratio[1],
        )
        w, h = common_size
        tw, th = common_crop_size
        margin_w = int(tw * self.margin)
        margin_h = int(th * self.margin)
        i = torch.randint(-margin_h, h - th + 1 + margin_h, size=(1,)).item()
        j = torch.randint(-margin_w, w - tw + 1 + margin_w, size=(1,)).item()
        i = np.clip(i, 0, h - th)
        j = np.clip(j, 0, w - tw)
        ret = []
        for img, (rw, rh) in zip(x, size_ratios):
            ret.append(crop(img, i * rh, j * rw, th * rh, tw * rw))
        return ret

class RandomFlipTurn(nn.Module):
    def __init__(self, bug=None):
        super(RandomFlipTurn, self).__init__()
        self.bug = bug

    def forward(self, x):
        if self.bug == "flip_turn_drawn_per_image":
            return [self.forward(t) for t in x] if isinstance(x, list) else self._draw(x)
        return self._draw(x)

    def _draw(self, x):
        if torch.rand(1) < 0.5:
            x = apply_all(x, lambda t: torch.flip(t, (-2,)))  # (port) F.vflip
        if torch.rand(1) < 0.5:
            x = apply_all(x, lambda t: torch.flip(t, (-1,)))  # (port) F.hflip
        if torch.rand(1) < 0.5:
            x = apply_all(x, rot90)
        return x

# the dataset (torchsr/datasets/common.py __getitem__ on synthetic images)
def _synthetic_div2k(seed, n):
    """(port) HR images: random oriented gratings plus soft blobs in [0, 1]; LR by antialiased bicubic x2."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(HR_SIZE, dtype=torch.float32), torch.arange(HR_SIZE, dtype=torch.float32),
                            indexing="ij")
    hrs = torch.zeros(n, 3, HR_SIZE, HR_SIZE)
    for k in range(4):
        theta, freq = torch.rand(n, 1, 1, 1, generator=g) * math.pi, 0.1 + 0.5 * torch.rand(n, 1, 1, 1, generator=g)
        amp, phase = torch.rand(n, 3, 1, 1, generator=g), torch.rand(n, 1, 1, 1, generator=g) * 6.3
        hrs += amp * torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
        cy, cx = torch.rand(n, 1, 1, 1, generator=g) * HR_SIZE, torch.rand(n, 1, 1, 1, generator=g) * HR_SIZE
        hrs += 2 * amp.flip(1) * torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 40.0)
    hrs = (hrs - hrs.amin((1, 2, 3), keepdim=True)) / (hrs.amax((1, 2, 3), keepdim=True) - hrs.amin((1, 2, 3), keepdim=True))
    lrs = F.interpolate(hrs, scale_factor=0.5, mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    return [[hr, lr] for hr, lr in zip(hrs, lrs)]

class ImageDataset(torch.utils.data.Dataset):
    def __init__(self, samples, transform=None):
        self.samples, self.transform = samples, transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        images = list(self.samples[index])
        if self.transform is not None:
            images = self.transform(images)
        return images

# torchsr/train/helpers.py
def get_model(args, bug=None):
    model = ninasr_b0(scale=args.scale, pretrained=False)
    if args.replication_pad:
        model = ReplicationPaddedModel(model, args.replication_pad)
    if args.weight_norm and bug != "weight_norm_after_optimizer":
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                m = nn.utils.weight_norm(m)
    return model

def get_optimizer(args, model):
    kwargs = {}
    kwargs["lr"] = args.lr
    if args.weight_decay is not None:
        kwargs["weight_decay"] = args.weight_decay
    return torch.optim.Adam(model.parameters(), **kwargs)

def get_scheduler(args, optimizer):
    return torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=args.lr_decay_steps, gamma=1.0 / args.lr_decay_rate
    )

# torchsr/train/trainer.py
class Trainer:
    def __init__(self, args, loader_train, loader_val, bug=None):
        self.args, self.epoch, self.bug = args, 0, bug
        self.device, self.dtype = "cpu", torch.float32  # setup_device (args.cpu)
        self.loader_train, self.loader_val = loader_train, loader_val  # setup_datasets
        self.model = get_model(args, bug=bug).to(self.device).to(self.dtype)  # setup_model
        self.optimizer = get_optimizer(args, self.model)  # setup_optimizer
        self.scheduler = get_scheduler(args, self.optimizer)  # setup_scheduler
        self.loss_fn = nn.L1Loss()  # setup_loss (get_loss, LossType.L1)
        if bug == "weight_norm_after_optimizer":
            for m in self.model.modules():
                if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                    m = nn.utils.weight_norm(m)

    def train_batch(self, hr, lr):
        """(port) The body of ``train_iter``'s inner loop."""
        args = self.args
        hr, lr = hr.to(self.dtype).to(self.device), lr.to(self.dtype).to(
            self.device
        )
        self.optimizer.zero_grad()
        sr = self.model(lr)
        sr = self.process_for_eval(sr)
        hr = self.process_for_eval(hr)
        loss = self.loss_fn(sr, hr)
        loss.backward()
        if args.gradient_clipping is not None:
            nn.utils.clip_grad_norm_(
                self.model.parameters(), args.gradient_clipping
            )
        self.optimizer.step()
        return loss.item()

    def val_iter(self, final=True):
        with torch.no_grad():
            self.model.eval()
            psnrs = []
            for hr, lr in self.loader_val:
                hr, lr = hr.to(self.dtype).to(self.device), lr.to(self.dtype).to(
                    self.device
                )
                sr = self.model(lr).clamp(0, 1)
                if final:
                    sr = sr.mul(255).round().div(255)
                sr = self.process_for_eval(sr)
                hr = self.process_for_eval(hr)
                mse = ((sr - hr) ** 2).mean(dim=(1, 2, 3))  # (port) piq.psnr(hr, sr), data_range 1
                psnrs.append((10 * torch.log10(1.0 / mse)).mean())
            return float(torch.stack(psnrs).mean())

    def process_for_eval(self, img):
        if self.args.shave_border != 0:
            shave = self.args.shave_border
            img = img[..., shave:-shave, shave:-shave]
        return img

def _build(seed, bug=None):
    torch.manual_seed(seed)
    patch_size = 16  # (port) 48
    args = types.SimpleNamespace(
        arch="ninasr_b0", scale=2, lr=0.001, epochs=300, lr_decay_steps=[300 * 2 // 3, 300 * 5 // 6],
        lr_decay_rate=3.0, patch_size_train=(patch_size + 1) * 2, shave_border=2, replication_pad=4,
        weight_norm=True, batch_size=8, weight_decay=None, gradient_clipping=None, dataset_repeat=2,
    )  # scripts/train_ninasr.sh (NinaSR-B0 x2, the --weight-norm run) over the options.py defaults
    transform_train = Compose([RandomCrop(args.patch_size_train, scales=[1, args.scale], margin=0.5),
                               RandomFlipTurn(bug=bug)])
    loader_train = torch.utils.data.DataLoader(ImageDataset(_synthetic_div2k(seed, N_TRAIN), transform_train),
                                               batch_size=args.batch_size, shuffle=True)
    loader_val = torch.utils.data.DataLoader(ImageDataset(_synthetic_div2k(seed + 1, N_VAL)), batch_size=1,
                                             shuffle=False)
    trainer = Trainer(args, loader_train, loader_val, bug=bug)
    st = {"it": None, "passes": 0}

    def train_step():
        batch = next(st["it"], None) if st["it"] is not None else None
        if batch is None:  # a pass over the loader ends; an epoch is dataset_repeat passes (train_iter, train)
            if st["it"] is not None:
                st["passes"] += 1
                if st["passes"] % args.dataset_repeat == 0:
                    trainer.epoch += 1
                    trainer.scheduler.step()
            trainer.model.train()
            st["it"] = iter(loader_train)
            batch = next(st["it"])
        hr, lr = batch
        return trainer.train_batch(hr, lr)

    def eval_fn(model, _batch=None):
        was = model.training
        psnr = trainer.val_iter(final=False)
        model.train(was)
        return psnr
    hr, lr = next(iter(loader_train))
    return Program(name="torchsr_ninasr", model=trainer.model, batch=(lr, hr),
                   loss_fn=lambda sr, hr: trainer.loss_fn(trainer.process_for_eval(sr), trainer.process_for_eval(hr)),
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn, loader=loader_train)

build = functools.partial(_build, bug=None)

BUGS = [
    Bug("flip_turn_drawn_per_image", functools.partial(_build, bug="flip_turn_drawn_per_image"), "learning_ledger",
        ("TASK",)),
    Bug("weight_norm_after_optimizer", functools.partial(_build, bug="weight_norm_after_optimizer"),
        "four_structures", ("weight_v",)),
]
