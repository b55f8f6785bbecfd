# ruff: noqa: UP008, C408, RUF059, RUF046, F841
"""Self-supervised relational reasoning from mpatacchiola/self-supervised-relational-reasoning
(``essential_script.py``): K augmentations of every image of a mini-batch go through a Conv4 backbone; the
``aggregate`` function pairs the features of every two augmentation blocks ('cat' aggregation): the aligned rows are
positives (the same image) and the second block rolled by a shift that cycles through 1..size-1 gives negatives
(different images, never an identity pair); a relation head (Linear-BN-LeakyReLU-Linear) scores each pair, trained
with ``BCEWithLogitsLoss`` against 1/0 targets; one Adam (defaults) over the backbone's and the head's parameter
groups.

Source: https://github.com/mpatacchiola/self-supervised-relational-reasoning
Commit: 70bf129ee7e857528ed3f83814e82c62902221df
Files: ``essential_script.py`` (``MultiCIFAR10``, ``Conv4``, ``RelationalReasoning``, ``main``)
License: MIT (Copyright (c) 2020 Massimiliano Patacchiola; full text in
LICENSES/mpatacchiola-self-supervised-relational-reasoning.txt)
Domain: self-supervised representation learning (relational reasoning: augmented-view pairs, BCE relation head)

Kept as written: ``Conv4`` (its layers and init), ``RelationalReasoning.__init__`` and ``aggregate``, the body of
``RelationalReasoning.train`` (the optimizer over the two parameter groups, ``BCEWithLogitsLoss``, both parts in
train mode, ``torch.cat(data_augmented, 0)``, zero_grad, features, aggregate, ``score = relation_head(...)
.squeeze()``, loss, backward, step, the accuracy estimate), ``main``'s K = 4 and feature_size 64,
``MultiCIFAR10.__getitem__`` (K transformed copies of each image).

Deviations from the original:
- CIFAR-10 (torchvision download) is not here: the images are synthetic, made from ``seed``: 1024 images 3x16x16,
  each a smoothed random colour field (every image its own pattern), as uint8 HWC arrays like CIFAR's ``data``;
- torchvision/PIL are not here: the transform of ``main`` (RandomResizedCrop(scale (0.08, 1)), RandomHorizontalFlip,
  RandomApply(ColorJitter(0.8, 0.8, 0.8, 0.2), p=0.8), RandomGrayscale(0.2), ToTensor, Normalize with the CIFAR-10
  statistics) is written out in plain torch per image (``_train_transform``): the crop resized bilinearly, the
  jitter's brightness/contrast/saturation in a random order, its hue shift left out;
- sizes for 2 CPU cores: images 32x32 -> 16x16 (crop size 16), batch_size 64 -> 32;
- ``RelationalReasoning.train(tot_epochs, train_loader)`` (which shadows ``nn.Module.train``) is unrolled: its first
  lines run at build time and one iteration of its inner loop is ``train_step`` (returning the loss); printing is
  dropped; the module has no ``forward`` upstream: the port adds one (backbone, ``aggregate``, relation head) for the
  Program, whose batch is one augmented batch drawn at build time with the pair targets, its loss the same BCE;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES, SIZE = 1024, 16
SELF_CHECK_STEPS = 60
MEAN, STD = torch.tensor([0.491, 0.482, 0.447]), torch.tensor([0.247, 0.243, 0.262])  # CIFAR10


def _rand(lo=0.0, hi=1.0):
    return float(torch.empty(1).uniform_(lo, hi))


def _random_resized_crop(img, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
    """(port) torchvision's RandomResizedCrop.get_params and a bilinear resize, on a CHW float tensor."""
    _, H, W = img.shape
    area = H * W
    for _ in range(10):
        target_area = area * _rand(*scale)
        aspect = math.exp(_rand(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target_area * aspect))), int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= W and 0 < h <= H:
            i, j = int(torch.randint(0, H - h + 1, (1,))), int(torch.randint(0, W - w + 1, (1,)))
            break
    else:
        h, w, i, j = H, W, 0, 0
    crop = img[:, i:i + h, j:j + w].unsqueeze(0)
    return F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False)[0]


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]).expand(3, -1, -1)


def _train_transform(pic):
    """(port) main's train_transform on a uint8 HWC image: crop, flip, jitter (p=0.8), grayscale (0.2), normalize."""
    img = torch.as_tensor(pic).permute(2, 0, 1).float() / 255.  # (ToTensor)
    img = _random_resized_crop(img, SIZE)
    if _rand() < 0.5:
        img = img.flip(-1)
    if _rand() < 0.8:
        for k in torch.randperm(3).tolist():
            f = _rand(0.2, 1.8)
            if k == 0:
                img = (img * f).clamp(0, 1)
            elif k == 1:
                img = (f * img + (1 - f) * _gray(img).mean()).clamp(0, 1)
            else:
                img = (f * img + (1 - f) * _gray(img)).clamp(0, 1)
    if _rand() < 0.2:
        img = _gray(img).clone()
    return (img - MEAN[:, None, None]) / STD[:, None, None]


class MultiCIFAR10(torch.utils.data.Dataset):
    """Given K total augmentations, returns a list of length K with different augmentations of the input."""

    def __init__(self, K, data, targets, transform=None):
        self.K = K  # tot number of augmentations
        self.data, self.targets, self.transform = data, targets, transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], self.targets[index]
        pic = img.copy()  # (port) Image.fromarray(img)
        img_list = list()
        if self.transform is not None:
            for _ in range(self.K):
                img_transformed = self.transform(pic.copy())
                img_list.append(img_transformed)
        else:
            img_list = img
        return img_list, target
class Conv4(torch.nn.Module):
    """A simple 4 layers CNN.
    Used as backbone.    
    """
    def __init__(self):
        super(Conv4, self).__init__()
        self.feature_size = 64
        self.name = "conv4"

        self.layer1 = torch.nn.Sequential(
          torch.nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False),
          torch.nn.BatchNorm2d(8),
          torch.nn.ReLU(),
          torch.nn.AvgPool2d(kernel_size=2, stride=2)
        )

        self.layer2 = torch.nn.Sequential(
          torch.nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1, bias=False),
          torch.nn.BatchNorm2d(16),
          torch.nn.ReLU(),
          torch.nn.AvgPool2d(kernel_size=2, stride=2)
        )

        self.layer3 = torch.nn.Sequential(
          torch.nn.Conv2d(16, 32, kernel_size=3, stride=1, padding=1, bias=False),
          torch.nn.BatchNorm2d(32),
          torch.nn.ReLU(),
          torch.nn.AvgPool2d(kernel_size=2, stride=2)
        )

        self.layer4 = torch.nn.Sequential(
          torch.nn.Conv2d(32, 64, kernel_size=3, stride=1, padding=1, bias=False),
          torch.nn.BatchNorm2d(64),
          torch.nn.ReLU(),
          torch.nn.AdaptiveAvgPool2d(1)
        )

        self.flatten = torch.nn.Flatten()

        for m in self.modules():
            if isinstance(m, torch.nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, x):
        h = self.layer1(x)
        h = self.layer2(h)
        h = self.layer3(h)
        h = self.layer4(h)
        h = self.flatten(h)
        return h


class RelationalReasoning(torch.nn.Module):
  """Self-Supervised Relational Reasoning.
  Essential implementation of the method, which uses
  the 'cat' aggregation function (the most effective),
  and can be used with any backbone.
  """
  def __init__(self, backbone, feature_size=64):
    super(RelationalReasoning, self).__init__()
    self.bug = None  # (port) the variant switch
    self.backbone = backbone
    self.relation_head = torch.nn.Sequential(
                             torch.nn.Linear(feature_size*2, 256),
                             torch.nn.BatchNorm1d(256),
                             torch.nn.LeakyReLU(),
                             torch.nn.Linear(256, 1))

  def aggregate(self, features, K):
    relation_pairs_list = list()
    targets_list = list()
    size = int(features.shape[0] / K)
    shifts_counter=1
    for index_1 in range(0, size*K, size):
      for index_2 in range(index_1+size, size*K, size):
        # Using the 'cat' aggregation function by default
        pos_pair = torch.cat([features[index_1:index_1+size], 
                              features[index_2:index_2+size]], 1)
        # Shuffle without collisions by rolling the mini-batch (negatives)
        neg_pair = torch.cat([
                     features[index_1:index_1+size], 
                     torch.roll(features[index_2:index_2+size],
                     shifts=0 if self.bug == "negatives_not_rolled" else shifts_counter, dims=0)], 1)
        relation_pairs_list.append(pos_pair)
        relation_pairs_list.append(neg_pair)
        targets_list.append(torch.ones(size, dtype=torch.float32))
        targets_list.append(torch.zeros(size, dtype=torch.float32))
        shifts_counter+=1
        if(shifts_counter>=size): 
            shifts_counter=1 # avoid identity pairs
    relation_pairs = torch.cat(relation_pairs_list, 0)
    targets = torch.cat(targets_list, 0)
    return relation_pairs, targets

  def forward(self, x):  # (port) the whole model for the Program: backbone, aggregate (K = self.K), relation head
    relation_pairs, _ = self.aggregate(self.backbone(x), self.K)
    return self.relation_head(relation_pairs).squeeze()



def _images(gen, n):
    """(port) Synthetic CIFAR-like uint8 HWC images: a smoothed random colour field per image."""
    x = F.avg_pool2d(torch.rand(n, 3, SIZE + 6, SIZE + 6, generator=gen), 7, 1)
    x = (x - x.amin((1, 2, 3), keepdim=True)) / (x.amax((1, 2, 3), keepdim=True) - x.amin((1, 2, 3), keepdim=True))
    return (x * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    # Hyper-parameters of the simulation
    K = 4  # tot augmentations, in the paper K=32 for CIFAR10/100
    batch_size = 32  # (port) 64
    feature_size = 64  # number of units for the Conv4 backbone
    backbone = Conv4()  # simple CNN with 64 linear output units
    model = RelationalReasoning(backbone, feature_size)
    model.bug, model.K = bug, K  # (port) the variant switch; K for the port's forward
    train_set = MultiCIFAR10(K=K, data=_images(gen, N_IMAGES), targets=[0] * N_IMAGES, transform=_train_transform)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))
    # RelationalReasoning.train(tot_epochs, train_loader), its lines before the loop
    self = model
    if bug == "relation_head_not_optimized":
        optimizer = torch.optim.Adam([{'params': self.backbone.parameters()}])
    else:
        optimizer = torch.optim.Adam([{'params': self.backbone.parameters()},
                                      {'params': self.relation_head.parameters()}])
    BCE = torch.nn.BCEWithLogitsLoss()
    self.backbone.train()
    self.relation_head.train()
    st = {"stream": None}

    def train_step():
        try:
            i, (data_augmented, _) = next(st["stream"])
        except (StopIteration, TypeError):
            st["stream"] = enumerate(train_loader)
            i, (data_augmented, _) = next(st["stream"])
        K = len(data_augmented)  # tot augmentations
        x = torch.cat(data_augmented, 0)
        optimizer.zero_grad()
        # forward pass (backbone)
        features = self.backbone(x)
        if bug == "features_detached":
            features = features.detach()
        # aggregation function
        relation_pairs, targets = self.aggregate(features, K)
        # forward pass (relation head)
        score = self.relation_head(relation_pairs).squeeze()
        # cross-entropy loss and backward
        loss = BCE(score, targets)
        loss.backward()
        optimizer.step()
        # estimate the accuracy
        predicted = torch.round(torch.sigmoid(score))
        correct = predicted.eq(targets.view_as(predicted)).sum()
        accuracy = (100.0 * correct / float(len(targets)))
        return loss.item()

    x = torch.cat(next(iter(torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=False)))[0], 0)
    _, targets = model.aggregate(torch.zeros(len(x), feature_size), K)

    def loss_fn(score, targets):
        return BCE(score, targets)

    return Program(name="relationalreasoning_conv4", model=model, batch=(x, targets), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the negatives built from the second block without the roll (shift 0), so every "negative" pair is
    # the very pair that is also labelled positive: the targets contradict the inputs.
    Bug("negatives_not_rolled", functools.partial(_build, bug="negatives_not_rolled"), "learning_ledger",
        ("TASK",)),
    # classic: the backbone's features detached before the aggregation, so only the relation head learns.
    Bug("features_detached", functools.partial(_build, bug="features_detached"), "reachability", ("backbone",)),
    # classic: the relation head's parameter group left out of the optimizer.
    Bug("relation_head_not_optimized", functools.partial(_build, bug="relation_head_not_optimized"),
        "four_structures", ("relation_head",)),
]
