# ruff: noqa: UP008, C408
"""Self-supervised relational reasoning (Patacchiola & Storkey, NeurIPS 2020), the repository's essential script:
K random augmentations of every image of a mini-batch go through a Conv4 backbone; for every pair of augmentation
slots the features of the same image are concatenated into a positive pair and those of an image with another image
of the batch (the second slot rolled by a shift that grows with the pair index) into a negative pair; a relation
head (linear, batch norm, leaky ReLU, linear) scores each pair and is trained with BCE-with-logits on ones and zeros,
the backbone and the head under one Adam.

Source: https://github.com/mpatacchiola/self-supervised-relational-reasoning
Commit: 70bf129ee7e857528ed3f83814e82c62902221df
Files: ``essential_script.py`` (``MultiCIFAR10``, ``Conv4``, ``RelationalReasoning`` with ``aggregate`` and
``train``, ``main``'s hyper-parameters and transforms)
License: MIT (Copyright (c) 2020 Massimiliano Patacchiola; full text in
LICENSES/mpatacchiola-self-supervised-relational-reasoning.txt)
Domain: self-supervised representation learning (relational reasoning: 'cat' aggregation of augmentation pairs,
rolled negatives, BCE relation head)

Kept as written: ``Conv4`` (four conv-BN-ReLU stages with average pooling, global pooling, He-normal conv init, BN
weights 1 and biases 0), ``RelationalReasoning`` (relation head ``Linear(2 * 64, 256)``, ``BatchNorm1d``,
``LeakyReLU``, ``Linear(256, 1)``; ``aggregate`` with its shifts counter reset before it reaches the batch size),
``train``'s body (Adam over two parameter groups at the default lr, ``BCEWithLogitsLoss``, ``backbone.train()`` and
``relation_head.train()``, the augmentations concatenated along the batch, zero_grad, backbone, aggregate, head,
``squeeze()``, loss, backward, step, the accuracy estimate), ``MultiCIFAR10.__getitem__`` (K independent transforms
of one image), ``main``'s K = 4 and feature_size 64, the transform pipeline's order (random resized crop with scale
(0.08, 1), horizontal flip, colour jitter with p 0.8, random grayscale with p 0.2, normalization with the CIFAR-10
statistics).

Deviations from the original:
- CIFAR-10 (torchvision download) is not here: ``_synthetic_cifar`` makes 16x16 colour images from ``seed``: every
  image is a random arrangement of three coloured rectangles on a coloured background, drawn from one of 10 class
  palettes (the classes are used only by ``eval_fn``); 512 training and 128 held-out images. The rule is learnable:
  two augmentations of one image share its layout and colours, two different images do not;
- torchvision's transforms are written out in torch on a ``[3, H, W]`` tensor (``_transform``): the random resized
  crop samples area and log-ratio as torchvision does and resizes bilinearly; the colour jitter applies brightness,
  contrast and saturation in a random order (the hue jitter of 0.2 is left out); grayscale uses the ITU-R 601 weights;
- sizes for 2 CPU cores: 32x32 images -> 16x16, batch_size 64 -> 32;
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch of it (a new shuffled loader pass at the end of
  an epoch), the optimizer and the loss are created at build with the same calls; the print is dropped and the step
  returns the loss;
- ``RelationalReasoning`` overrides ``nn.Module.train`` and has no ``forward``, so the declared model is
  ``RelationView``, a module holding the same backbone and relation head whose forward is the backbone, ``aggregate``
  and the head on the K augmentations concatenated; ``loss_fn`` is the BCE on ``aggregate``'s targets; ``eval_fn``
  is the 1-nearest-neighbour accuracy of the backbone's features (eval mode) of the held-out images against the
  training images' classes;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SIDE, N_TRAIN, N_HELD = 16, 512, 128  # (port) synthetic CIFAR
MEAN, STD = torch.tensor([0.491, 0.482, 0.447]), torch.tensor([0.247, 0.243, 0.262])


class MultiCIFAR10(torch.utils.data.Dataset):
  """(port) The repository's ``MultiCIFAR10.__getitem__`` on synthetic images."""
  def __init__(self, K, data, targets, transform=None, bug=None):
    super().__init__()
    self.K = K # tot number of augmentations
    self.data, self.targets, self.transform, self.bug = data, targets, transform, bug

  def __len__(self):
    return len(self.targets)

  def __getitem__(self, index):
    img, target = self.data[index], self.targets[index]
    pic = img  # (port) Image.fromarray(img): a float tensor here
    img_list = list()
    if self.transform is not None:
      for _ in range(self.K):
        img_transformed = self.transform(pic.clone())
        img_list.append(img_transformed)
      if self.bug == "one_augmentation_repeated":
        # classic: the transform drawn once and the same view repeated K times, positives are identical copies
        img_list = [img_list[0]] * self.K
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
  def __init__(self, backbone, feature_size=64, bug=None):
    super(RelationalReasoning, self).__init__()
    self.bug = bug
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
    roll_dim = 1 if self.bug == "negatives_rolled_over_features" else 0
    for index_1 in range(0, size*K, size):
      for index_2 in range(index_1+size, size*K, size):
        # Using the 'cat' aggregation function by default
        pos_pair = torch.cat([features[index_1:index_1+size],
                              features[index_2:index_2+size]], 1)
        # Shuffle without collisions by rolling the mini-batch (negatives)
        neg_pair = torch.cat([
                     features[index_1:index_1+size],
                     torch.roll(features[index_2:index_2+size],
                     shifts=shifts_counter, dims=roll_dim)], 1)
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


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]).unsqueeze(0)


def _random_resized_crop(img, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
    """(port) transforms.RandomResizedCrop on a tensor: torchvision's sampling of area and log-ratio, bilinear."""
    _, H, W = img.shape
    i, j, h, w = 0, 0, H, W
    for _ in range(10):
        area = H * W * float(torch.empty(1).uniform_(*scale))
        aspect = math.exp(float(torch.empty(1).uniform_(math.log(ratio[0]), math.log(ratio[1]))))
        cw, ch = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < cw <= W and 0 < ch <= H:
            i, j, h, w = int(torch.randint(0, H - ch + 1, (1,))), int(torch.randint(0, W - cw + 1, (1,))), ch, cw
            break
    crop = img[:, i:i + h, j:j + w].unsqueeze(0)
    return F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False)[0]


def _color_jitter(img, brightness=0.8, contrast=0.8, saturation=0.8):
    """(port) transforms.ColorJitter without the hue term, the three adjustments in a random order."""
    for k in torch.randperm(3).tolist():
        if k == 0:
            img = (img * float(torch.empty(1).uniform_(1 - brightness, 1 + brightness))).clamp(0, 1)
        elif k == 1:
            m = _gray(img).mean()
            img = ((img - m) * float(torch.empty(1).uniform_(1 - contrast, 1 + contrast)) + m).clamp(0, 1)
        else:
            g = _gray(img)
            img = ((img - g) * float(torch.empty(1).uniform_(1 - saturation, 1 + saturation)) + g).clamp(0, 1)
    return img


def _transform(img):
    """(port) Compose([rnd_rcrop, rnd_hflip, rnd_color_jitter, rnd_gray, ToTensor(), normalize])."""
    img = _random_resized_crop(img, size=SIDE)
    if float(torch.rand(1)) < 0.5:
        img = img.flip(-1)
    if float(torch.rand(1)) < 0.8:
        img = _color_jitter(img)
    if float(torch.rand(1)) < 0.2:
        img = _gray(img).repeat(3, 1, 1)
    return (img - MEAN[:, None, None]) / STD[:, None, None]


def _synthetic_cifar(seed, n):
    """(port) Three coloured rectangles on a background, colours from one of 10 class palettes."""
    rng = np.random.RandomState(seed)
    palettes = rng.uniform(0, 1, size=(10, 4, 3))
    targets = rng.randint(10, size=n)
    data = np.zeros((n, 3, SIDE, SIDE))
    for k, c in enumerate(targets):
        data[k] = palettes[c, 0][:, None, None]
        for r in range(1, 4):
            h, w = rng.randint(3, 9, size=2)
            i, j = rng.randint(0, SIDE - h), rng.randint(0, SIDE - w)
            data[k, :, i:i + h, j:j + w] = palettes[c, r][:, None, None]
    data = np.clip(data + rng.normal(0, 0.03, size=data.shape), 0, 1)
    return torch.tensor(data, dtype=torch.float), torch.tensor(targets)


class RelationView(torch.nn.Module):
    """(port) The backbone, ``aggregate`` and the relation head of the same model, on K concatenated views."""

    def __init__(self, model, K):
        super().__init__()
        self.backbone, self.relation_head = model.backbone, model.relation_head
        self._aggregate, self.K = model.aggregate, K

    def forward(self, x):
        relation_pairs, _ = self._aggregate(self.backbone(x), self.K)
        return self.relation_head(relation_pairs).squeeze()


def _knn_eval(view, batch, data, targets):
    """(port) 1-nearest-neighbour accuracy of the held-out images' features against the training images' classes."""
    view.eval()
    with torch.no_grad():
        norm = lambda x: (x - MEAN[:, None, None]) / STD[:, None, None]
        ref, held = view.backbone(norm(data[:N_TRAIN])), view.backbone(norm(data[N_TRAIN:]))
        nearest = torch.cdist(held, ref).argmin(1)
    view.train()
    return float((targets[:N_TRAIN][nearest] == targets[N_TRAIN:]).float().mean())


def _build(seed, bug=None):
    torch.manual_seed(seed)
    K = 4 # tot augmentations, in the paper K=32 for CIFAR10/100
    batch_size = 32 # (port) 64
    feature_size = 64 # number of units for the Conv4 backbone
    data, targets = _synthetic_cifar(seed, N_TRAIN + N_HELD)

    backbone = Conv4() # simple CNN with 64 linear output units
    model = RelationalReasoning(backbone, feature_size, bug=bug)
    train_set = MultiCIFAR10(K=K, data=data[:N_TRAIN], targets=targets[:N_TRAIN], transform=_transform, bug=bug)
    train_loader = torch.utils.data.DataLoader(train_set,
                                               batch_size=batch_size,
                                               shuffle=True)

    groups = [{'params': model.backbone.parameters()}, {'params': model.relation_head.parameters()}]
    if bug == "backbone_not_optimized":
        # classic: the backbone's group left out of the optimizer, only the relation head learns
        groups = groups[1:]
    optimizer = torch.optim.Adam(groups)  # RelationalReasoning.train(tot_epochs, train_loader), loops unrolled
    BCE = torch.nn.BCEWithLogitsLoss()
    state = {"it": None}

    def train_step():
        if state["it"] is None:
            model.backbone.train()
            model.relation_head.train()
            state["it"] = iter(train_loader)
        try:
            data_augmented, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            data_augmented, _ = next(state["it"])
        K = len(data_augmented) # tot augmentations
        x = torch.cat(data_augmented, 0)
        optimizer.zero_grad()
        # forward pass (backbone)
        features = model.backbone(x)
        # aggregation function
        relation_pairs, targets = model.aggregate(features, K)
        # forward pass (relation head)
        score = model.relation_head(relation_pairs).squeeze()
        # cross-entropy loss and backward
        loss = BCE(score, targets)
        loss.backward()
        optimizer.step()
        # estimate the accuracy
        predicted = torch.round(torch.sigmoid(score))
        correct = predicted.eq(targets.view_as(predicted)).sum()
        accuracy = (100.0 * correct / float(len(targets)))  # noqa: F841 (printed every 100 batches upstream)
        return loss.detach()

    def loss_fn(score, targets):
        return BCE(score, targets)

    x = torch.cat(next(iter(train_loader))[0], 0)
    _, pair_targets = model.aggregate(torch.zeros(x.shape[0], feature_size), K)
    return Program(name="relationalreasoning_conv4", model=RelationView(model, K), batch=(x, pair_targets),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=functools.partial(
                       _knn_eval, data=data, targets=targets), loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic wrong axis: the negatives rolled along the feature dimension instead of the batch, so a "negative" is
    # the same image's other view with its features rotated and the targets no longer say which pairs differ
    Bug("negatives_rolled_over_features", functools.partial(_build, bug="negatives_rolled_over_features"),
        "learning_ledger", ("TASK",)),
    # classic: one augmentation repeated K times, every positive pair is two copies of the same view
    Bug("one_augmentation_repeated", functools.partial(_build, bug="one_augmentation_repeated"), "learning_ledger",
        ("TASK",)),
    # classic: the backbone's parameter group left out of Adam
    Bug("backbone_not_optimized", functools.partial(_build, bug="backbone_not_optimized"), "four_structures",
        ("backbone",)),
]
