"""SimCLR as trained by the repository's ``main.py`` (config/config.yaml defaults: ResNet-18 encoder with its fc
replaced by ``Identity``, a bias-free MLP projector to ``projection_dim`` 64, ``NT_Xent`` with temperature 0.5 built
from a correlated-samples mask and ``CrossEntropyLoss(reduction="sum") / N``, Adam lr 3e-4 from
``load_optimizer``, ``drop_last`` loader of two augmented views per image, the loop body ``zero_grad``, forward of
both views, loss on ``z_i, z_j``, ``backward``, ``step``).

Source: https://github.com/Spijkervet/SimCLR
Commit: 2738efae85b3ca1b70b7919c5d7a7837d9d75235
Files: main.py, model.py (load_optimizer), simclr/simclr.py, simclr/modules/nt_xent.py, simclr/modules/resnet.py,
simclr/modules/identity.py, simclr/modules/transformations/simclr.py, config/config.yaml
License: MIT (Copyright (c) 2020 Janne Spijkervet)
Domain: self-supervised contrastive learning (SimCLR, two views, NT-Xent)

Deviations from the original:
- sizes: batch_size 128 -> 8, image_size 224 -> 32, ResNet-18 channel widths / 4 (``_tv_resnet.resnet18(width=16)``,
  torchvision's module names; torchvision is not installed), workers 8 -> 0; world_size 1 (no DDP, no GatherLayer);
- data: CIFAR-10 download replaced by 64 synthetic 32x32 RGB images made from ``seed`` (two-colour oriented gratings of
  random orientation, frequency and phase, with noise); the label is unused, as in the original;
- ``TransformsSimCLR``'s torchvision pipeline is written out in torch on tensors, its random draws from a seeded
  generator: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, bilinear), RandomHorizontalFlip,
  RandomApply([ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8) with brightness, contrast and saturation (the hue jitter is
  left out), RandomGrayscale(p=0.2);
- ``.cuda()`` calls, the SummaryWriter, prints and checkpointing are dropped; one ``train_step`` is one iteration of
  ``train()``'s loop (the Adam configuration has no scheduler);
- ``batch`` is one pair of views ``{"x_i", "x_j"}`` of the first 8 images; ``loss_fn`` is ``criterion(z_i, z_j)`` on
  the model's outputs ``(h_i, h_j, z_i, z_j)``; ``SELF_CHECK_STEPS`` is 60 (the loss falls slowly under the
  augmentations at lr 3e-4).
"""
# ruff: noqa: UP008, RUF059, SIM118  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet as torchvision_models
from _api import Bug, Program

N_IMAGES, SIZE = 64, 32
SELF_CHECK_STEPS = 60  # the augmented views make the contrastive loss fall slowly at lr 3e-4


# ---- simclr/modules/nt_xent.py -----------------------------------------------------------------------------------

class NT_Xent(nn.Module):
    def __init__(self, batch_size, temperature, world_size, bug=None):
        super(NT_Xent, self).__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.world_size = world_size
        self.bug = bug

        self.mask = self.mask_correlated_samples(batch_size, world_size)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")
        self.similarity_f = nn.CosineSimilarity(dim=2)

    def mask_correlated_samples(self, batch_size, world_size):
        N = 2 * batch_size * world_size
        mask = torch.ones((N, N), dtype=bool)
        mask = mask.fill_diagonal_(0)
        for i in range(batch_size * world_size):
            mask[i, batch_size * world_size + i] = 0
            mask[batch_size * world_size + i, i] = 0
        return mask

    def forward(self, z_i, z_j):
        """
        We do not sample negative examples explicitly.
        Instead, given a positive pair, similar to (Chen et al., 2017), we treat the other 2(N − 1) augmented examples within a minibatch as negative examples.
        """
        N = 2 * self.batch_size * self.world_size

        if self.bug == "rank_interleaved_views":
            # the layout of the gathered views before PR #46: per rank [z_i^r, z_j^r], concatenated rank after rank
            # (two ranks of half the batch), while the mask and the diagonals assume [all z_i, all z_j]
            h = z_i.shape[0] // 2
            z = torch.cat((z_i[:h], z_j[:h], z_i[h:], z_j[h:]), dim=0)
        else:
            z = torch.cat((z_i, z_j), dim=0)

        sim = self.similarity_f(z.unsqueeze(1), z.unsqueeze(0)) / self.temperature

        sim_i_j = torch.diag(sim, self.batch_size * self.world_size)
        sim_j_i = torch.diag(sim, -self.batch_size * self.world_size)

        # We have 2N samples, but with Distributed training every GPU gets N examples too, resulting in: 2xNxN
        positive_samples = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)
        negative_samples = sim[self.mask].reshape(N, -1)

        labels = torch.zeros(N).to(positive_samples.device).long()
        logits = torch.cat((positive_samples, negative_samples), dim=1)
        loss = self.criterion(logits, labels)
        loss /= N
        return loss


# ---- simclr/modules/identity.py, simclr/simclr.py ----------------------------------------------------------------

class Identity(nn.Module):
    def __init__(self):
        super(Identity, self).__init__()

    def forward(self, x):
        return x


class SimCLR(nn.Module):
    """
    We opt for simplicity and adopt the commonly used ResNet (He et al., 2016) to obtain hi = f(x ̃i) = ResNet(x ̃i) where hi ∈ Rd is the output after the average pooling layer.
    """

    def __init__(self, encoder, projection_dim, n_features):
        super(SimCLR, self).__init__()

        self.encoder = encoder
        self.n_features = n_features

        # Replace the fc layer with an Identity function
        self.encoder.fc = Identity()

        # We use a MLP with one hidden layer to obtain z_i = g(h_i) = W(2)σ(W(1)h_i) where σ is a ReLU non-linearity.
        self.projector = nn.Sequential(
            nn.Linear(self.n_features, self.n_features, bias=False),
            nn.ReLU(),
            nn.Linear(self.n_features, projection_dim, bias=False),
        )

    def forward(self, x_i, x_j):
        h_i = self.encoder(x_i)
        h_j = self.encoder(x_j)

        z_i = self.projector(h_i)
        z_j = self.projector(h_j)
        return h_i, h_j, z_i, z_j


# ---- simclr/modules/resnet.py ------------------------------------------------------------------------------------

def get_resnet(name, pretrained=False):
    resnets = {
        "resnet18": torchvision_models.resnet18(pretrained=pretrained, width=16),
    }
    if name not in resnets.keys():
        raise KeyError(f"{name} is not a valid ResNet version")
    return resnets[name]


# ---- simclr/modules/transformations/simclr.py (torchvision transforms written out in torch) ----------------------

def _u(g, lo, hi):
    return lo + (hi - lo) * float(torch.rand(1, generator=g))


def random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, H, W = img.shape
    for _ in range(10):
        area = H * W * _u(g, *scale)
        r = math.exp(_u(g, math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(area * r)), round(math.sqrt(area / r))
        if 0 < w <= W and 0 < h <= H:
            i, j = int(torch.randint(0, H - h + 1, (1,), generator=g)), int(torch.randint(0, W - w + 1, (1,), generator=g))
            break
    else:
        h, w, i, j = H, W, 0, 0
    crop = img[:, i:i + h, j:j + w].unsqueeze(0)
    return F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False)[0]


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]).unsqueeze(0)


def color_jitter(img, g, brightness, contrast, saturation):
    for t in torch.randperm(3, generator=g).tolist():
        if t == 0:
            img = (img * _u(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif t == 1:
            img = ((img - _gray(img).mean()) * _u(g, 1 - contrast, 1 + contrast) + _gray(img).mean()).clamp(0, 1)
        else:
            img = ((img - _gray(img)) * _u(g, 1 - saturation, 1 + saturation) + _gray(img)).clamp(0, 1)
    return img


class TransformsSimCLR:
    """
    A stochastic data augmentation module that transforms any given data example randomly
    resulting in two correlated views of the same example,
    denoted x ̃i and x ̃j, which we consider as a positive pair.
    """

    def __init__(self, size, g):
        s = 1
        self.size, self.s, self.g = size, s, g

    def train_transform(self, x):
        g, s = self.g, self.s
        x = random_resized_crop(x, self.size, g)
        if float(torch.rand(1, generator=g)) < 0.5:
            x = x.flip(-1)
        if float(torch.rand(1, generator=g)) < 0.8:
            x = color_jitter(x, g, 0.8 * s, 0.8 * s, 0.8 * s)
        if float(torch.rand(1, generator=g)) < 0.2:
            x = _gray(x).expand(3, -1, -1).clone()
        return x

    def __call__(self, x):
        return self.train_transform(x), self.train_transform(x)


class SyntheticImages(torch.utils.data.Dataset):
    """Coloured oriented gratings (random orientation, frequency, phase and two colours) with noise; the label (the
    orientation bin) is unused by SimCLR."""

    def __init__(self, seed, transform):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE).float(), torch.arange(SIZE).float(), indexing="ij")
        self.images, self.labels = [], []
        for _ in range(N_IMAGES):
            theta = float(torch.rand(1, generator=g)) * math.pi
            freq = 0.15 + 0.5 * float(torch.rand(1, generator=g))
            phase = 2 * math.pi * float(torch.rand(1, generator=g))
            wave = 0.5 + 0.5 * torch.sin(freq * (math.cos(theta) * xx + math.sin(theta) * yy) + phase)
            c1, c2 = torch.rand(3, 1, 1, generator=g), torch.rand(3, 1, 1, generator=g)
            img = wave * c1 + (1 - wave) * c2 + 0.05 * torch.randn(3, SIZE, SIZE, generator=g)
            self.images.append(img.clamp(0, 1))
            self.labels.append(int(theta / math.pi * 4))
        self.transform = transform

    def __len__(self):
        return N_IMAGES

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


# ---- main.py -----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    batch_size, image_size, projection_dim, temperature, world_size = 8, SIZE, 64, 0.5, 1
    torch.manual_seed(seed)

    g = torch.Generator().manual_seed(seed + 1)
    train_dataset = SyntheticImages(seed, transform=TransformsSimCLR(size=image_size, g=g))
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed),
    )

    # initialize ResNet
    encoder = get_resnet("resnet18", pretrained=False)
    n_features = encoder.fc.in_features  # get dimensions of fc layer

    # initialize model
    model = SimCLR(encoder, projection_dim, n_features)

    # optimizer / loss
    if bug == "projector_not_optimized":
        # the optimizer built over the encoder only: the projection head stays at its initialization
        optimizer = torch.optim.Adam(model.encoder.parameters(), lr=3e-4)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)  # TODO: LARS
    criterion = NT_Xent(batch_size, temperature, world_size, bug=bug)

    state = {"it": iter(train_loader)}

    def train_step():
        model.train()
        try:
            (x_i, x_j), _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            (x_i, x_j), _ = next(state["it"])
        optimizer.zero_grad()

        # positive pair, with encoding
        h_i, h_j, z_i, z_j = model(x_i, x_j)

        loss = criterion(z_i, z_j)
        loss.backward()

        optimizer.step()
        return loss.detach()

    views = [train_dataset[i][0] for i in range(batch_size)]
    batch = ({"x_i": torch.stack([v[0] for v in views]), "x_j": torch.stack([v[1] for v in views])},)
    return Program(name="spijkervetsimclr_ntxent", model=model, batch=batch,
                   loss_fn=lambda outputs, _targets: criterion(outputs[2], outputs[3]), optimizer=optimizer,
                   train_step=train_step, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # https://github.com/Spijkervet/SimCLR/issues/30, /issues/37, fixed by https://github.com/Spijkervet/SimCLR/pull/46:
    # the views laid out rank by rank ([z_i^1, z_j^1, z_i^2, z_j^2]) while the mask and the positive diagonals assume
    # [z_i, z_j]; the "positives" are partly other images ("the loss going down" but no useful representation).
    Bug("rank_interleaved_views", functools.partial(_build, bug="rank_interleaved_views"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: parameters missing from the optimizer (the projection head left out).
    Bug("projector_not_optimized", functools.partial(_build, bug="projector_not_optimized"), "four_structures",
        ("projector",)),
]
