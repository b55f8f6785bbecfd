"""Tongzhou Wang's align_uniform: contrastive representation learning by optimizing alignment and uniformity on the
hypersphere directly (Wang & Isola 2020), the repository's STL-10 example: a small AlexNet (five BatchNorm conv
blocks, two BatchNorm fully connected layers, a linear head and an L2 normalization) encodes two augmentations of
each image in one forward; the loss is ``align_loss(x, y, alpha=2) + (uniform_loss(x, t=2) + uniform_loss(y, t=2))
/ 2``, SGD with momentum 0.9, weight decay 1e-4, lr ``0.12 * batch_size / 256`` and ``MultiStepLR`` per epoch.

Source: https://github.com/ssnl/align_uniform
Commit: 78ccdb19af60126564ef60c84443722ae2fda28d
Files: align_uniform/__init__.py, examples/stl10/main.py, examples/stl10/encoder.py (itself adapted from
HobbitLong/CMC's ``models/alexnet.py``), examples/stl10/util.py
License: MIT (Copyright (c) 2020 Tongzhou Wang; full text in LICENSES/ssnl-align_uniform.txt)
Domain: self-supervised, contrastive (alignment and uniformity losses, two views)

Kept as written: ``align_loss``, ``uniform_loss``, ``L2Norm``, ``SmallAlexNet`` (its blocks, ``init_weights_`` and
``layer_index`` forward), ``TwoAugUnsupervisedDataset``, ``main``'s optimizer, scheduler and loop body
(``zero_grad``, one encoder call on ``cat([im_x, im_y])`` chunked in two, the weighted sum, ``backward``, ``step``).

Deviations from the original:
- sizes for 2 CPU cores: images 64x64 -> 32x32 (so the flattened features are 3x3, not 7x7), conv widths
  96/192/384 -> 16/32/32, fully connected 4096 -> 64, ``feat_dim`` 128 -> 32, batch 768 -> 32 (the lr follows the
  script's rule: 0.12 * 32 / 256); milestones [155, 170, 185] of 200 epochs -> [2, 3] of 4;
- data: STL-10's ``train+unlabeled`` split (torchvision download) is replaced by synthetic 32x32 RGB images made
  from ``seed`` (sixteen prototypes of coloured blobs, each image a prototype shifted and noised);
  torchvision's augmentation is written out in torch (``RandomResizedCrop`` with scale (0.08, 1) and ratio (3/4,
  4/3) by bilinear resizing of the crop, horizontal flip, ``ColorJitter(0.4, 0.4, 0.4, 0.4)`` applied in a fixed
  order with the hue shift as a rotation of the YIQ chroma plane, ``RandomGrayscale(0.2)``, ``Normalize`` with the
  script's STL-10 statistics), drawing from a ``torch.Generator`` seeded from ``seed``;
- blank lines inside ``SmallAlexNet.__init__`` removed (layout only); no ``nn.DataParallel``, CUDA, ``num_workers``, ``pin_memory``, meters, prints or checkpoint; the loader shuffles
  with a ``torch.Generator(seed)``;
- one ``train_step`` is one iteration of the inner loop (``scheduler.step()`` when a pass over the loader ends) and
  returns the loss; the Program's batch is one pair of augmented views and its ``loss_fn`` the loop's loss on the
  encoder's output for ``cat([im_x, im_y])``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, C1, C2, C3, FC, FEAT, BATCH = 32, 16, 32, 32, 64, 32, 32
MEAN = (0.44087801806139126, 0.42790631331699347, 0.3867879370752931)
STD = (0.26826768628079806, 0.2610450402318512, 0.26866836876860795)


# ---- align_uniform/__init__.py --------------------------------------------------------------------------------------

def align_loss(x, y, alpha=2):
    return (x - y).norm(p=2, dim=1).pow(alpha).mean()


def uniform_loss(x, t=2):
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()


# ---- examples/stl10/encoder.py --------------------------------------------------------------------------------------

class L2Norm(nn.Module):
    def forward(self, x):
        return x / x.norm(p=2, dim=1, keepdim=True)


class SmallAlexNet(nn.Module):
    def __init__(self, in_channel=3, feat_dim=128):
        super(SmallAlexNet, self).__init__()
        blocks = []
        # conv_block_1
        blocks.append(nn.Sequential(
            nn.Conv2d(in_channel, C1, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(C1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
        ))
        # conv_block_2
        blocks.append(nn.Sequential(
            nn.Conv2d(C1, C2, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(C2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
        ))
        # conv_block_3
        blocks.append(nn.Sequential(
            nn.Conv2d(C2, C3, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(C3),
            nn.ReLU(inplace=True),
        ))
        # conv_block_4
        blocks.append(nn.Sequential(
            nn.Conv2d(C3, C3, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(C3),
            nn.ReLU(inplace=True),
        ))
        # conv_block_5
        blocks.append(nn.Sequential(
            nn.Conv2d(C3, C2, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(C2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
        ))
        # fc6
        blocks.append(nn.Sequential(
            nn.Flatten(),
            nn.Linear(C2 * 3 * 3, FC, bias=False),  # (port) 192 * 7 * 7 for 64 * 64
            nn.BatchNorm1d(FC),
            nn.ReLU(inplace=True),
        ))
        # fc7
        blocks.append(nn.Sequential(
            nn.Linear(FC, FC, bias=False),
            nn.BatchNorm1d(FC),
            nn.ReLU(inplace=True),
        ))
        # fc8
        blocks.append(nn.Sequential(
            nn.Linear(FC, feat_dim),
            L2Norm(),
        ))
        self.blocks = nn.ModuleList(blocks)
        self.init_weights_()

    def init_weights_(self):
        def init(m):
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.normal_(m.weight, 0, 0.02)
                if getattr(m, 'bias', None) is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
                if getattr(m, 'weight', None) is not None:
                    nn.init.ones_(m.weight)
                if getattr(m, 'bias', None) is not None:
                    nn.init.zeros_(m.bias)

        self.apply(init)

    def forward(self, x, *, layer_index=-1):
        if layer_index < 0:
            layer_index += len(self.blocks)
        for layer in self.blocks[:(layer_index + 1)]:
            x = layer(x)
        return x


# ---- examples/stl10/util.py, and torchvision's transforms written out ----------------------------------------------

class TwoAugUnsupervisedDataset(torch.utils.data.Dataset):
    r"""Returns two augmentation and no labels."""
    def __init__(self, dataset, transform):
        self.dataset = dataset
        self.transform = transform

    def __getitem__(self, index):
        image, _ = self.dataset[index]
        return self.transform(image), self.transform(image)

    def __len__(self):
        return len(self.dataset)


class SyntheticSTL(torch.utils.data.Dataset):
    """32x32 RGB images in [0, 1]: one of sixteen prototypes (three coloured Gaussian blobs), rolled by up to 3
    pixels, plus noise; the label (the prototype) is returned and unused, as STL-10's is."""

    def __init__(self, seed, n=512):
        gen = torch.Generator().manual_seed(seed)
        ys, xs = torch.meshgrid(torch.arange(IMG).float(), torch.arange(IMG).float(), indexing="ij")
        protos = torch.zeros(16, 3, IMG, IMG)
        for k in range(16):
            for _ in range(3):
                cy, cx = (torch.rand(2, generator=gen) * IMG).tolist()
                blob = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * 4.0 ** 2))
                protos[k] += torch.rand(3, 1, 1, generator=gen) * blob
        self.labels = torch.arange(n) % 16
        shifts = torch.randint(-3, 4, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(protos[int(c)], tuple(s.tolist()), dims=(1, 2))
                            for c, s in zip(self.labels, shifts)])
        self.images = (imgs + 0.05 * torch.randn(imgs.shape, generator=gen)).clamp(0, 1)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def make_transform(gen):
    """RandomResizedCrop(32, scale=(0.08, 1)), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4, 0.4),
    RandomGrayscale(p=0.2), ToTensor (the images already are), Normalize(STL-10 mean, std)."""
    def u(lo, hi):
        return lo + (hi - lo) * float(torch.rand((), generator=gen))

    def transform(img):
        for _ in range(10):
            area = IMG * IMG * u(0.08, 1)
            ratio = math.exp(u(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= IMG and 0 < h <= IMG:
                break
        else:
            w = h = IMG
        top, left = int(u(0, IMG - h + 1)), int(u(0, IMG - w + 1))
        img = F.interpolate(img[None, :, top:top + h, left:left + w], size=(IMG, IMG), mode="bilinear",
                            align_corners=False)[0]
        if u(0, 1) < 0.5:
            img = img.flip(2)
        img = (img * u(0.6, 1.4)).clamp(0, 1)                                           # brightness
        img = ((img - _gray(img).mean()) * u(0.6, 1.4) + _gray(img).mean()).clamp(0, 1)  # contrast
        img = ((img - _gray(img)) * u(0.6, 1.4) + _gray(img)).clamp(0, 1)                # saturation
        yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
        a = u(-0.4, 0.4) * 2 * math.pi                                                    # hue
        rot = torch.tensor([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
        img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
        if u(0, 1) < 0.2:
            img = _gray(img).expand(3, -1, -1)
        return (img - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    return transform


# ---- examples/stl10/main.py -----------------------------------------------------------------------------------------

def the_loss(out, opt, bug=None):
    if bug == "views_interleaved":
        x, y = out[0::2], out[1::2]  # the two halves of cat([im_x, im_y]) taken as alternate rows
    else:
        x, y = out.chunk(2)
    align_loss_val = align_loss(x, y, alpha=opt["align_alpha"])
    unif_t = -opt["unif_t"] if bug == "uniformity_t_negated" else opt["unif_t"]
    unif_loss_val = (uniform_loss(x, t=unif_t) + uniform_loss(y, t=unif_t)) / 2
    return align_loss_val * opt["align_w"] + unif_loss_val * opt["unif_w"]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    opt = {"align_w": 1, "unif_w": 1, "align_alpha": 2, "unif_t": 2, "batch_size": BATCH, "momentum": 0.9,
           "weight_decay": 1e-4, "lr_decay_rate": 0.1, "lr_decay_epochs": [2, 3], "feat_dim": FEAT}
    opt["lr"] = 0.12 * (opt["batch_size"] / 256)

    encoder = SmallAlexNet(feat_dim=opt["feat_dim"])

    optim = torch.optim.SGD(encoder.parameters(), lr=opt["lr"],
                            momentum=opt["momentum"], weight_decay=opt["weight_decay"])
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optim, gamma=opt["lr_decay_rate"],
                                                     milestones=opt["lr_decay_epochs"])

    dataset = TwoAugUnsupervisedDataset(SyntheticSTL(seed), transform=make_transform(
        torch.Generator().manual_seed(seed)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=opt["batch_size"], shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    if bug == "encoder_left_in_eval_mode":
        encoder.eval()  # a feature check (as linear_eval.py does) before training, never undone
    state = {"it": iter(loader)}

    def train_step():
        try:
            im_x, im_y = next(state["it"])
        except StopIteration:
            scheduler.step()
            state["it"] = iter(loader)
            im_x, im_y = next(state["it"])
        optim.zero_grad()
        loss = the_loss(encoder(torch.cat([im_x, im_y])), opt, bug)
        loss.backward()
        optim.step()
        return loss.detach()

    im_x, im_y = next(iter(torch.utils.data.DataLoader(dataset, batch_size=opt["batch_size"])))
    return Program(name="alignuniform_stl10", model=encoder, batch=(torch.cat([im_x, im_y]), None),
                   loss_fn=lambda out, _: the_loss(out, opt, bug), optimizer=optim, train_step=train_step,
                   loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the encoder's output for cat([im_x, im_y]) split as alternate rows instead of ``chunk(2)``: the
    # "positive" pairs are two different images' views, so alignment pulls unrelated images together.
    Bug("views_interleaved", functools.partial(_build, bug="views_interleaved"), "learning_ledger", ("TASK",)),
    # classic sign slip: ``uniform_loss``'s ``mul(-t)`` fed a negative t: the loss now rewards pairwise distances
    # shrinking, so uniformity's term and alignment's agree on collapsing the features.
    Bug("uniformity_t_negated", functools.partial(_build, bug="uniformity_t_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``encoder.eval()`` from a feature check left on: the loop never calls ``train()``, so every BatchNorm
    # normalizes with its initial running statistics while training.
    Bug("encoder_left_in_eval_mode", functools.partial(_build, bug="encoder_left_in_eval_mode"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]
