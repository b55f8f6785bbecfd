"""Scale-aware triplet network on MNIST of 4uiiurz1/pytorch-scale-aware-triplet: the repository's ``BNNet`` (zero
padding to 32x32, three conv-BN-ReLU-max-pool stages of 16 / 32 / 64 channels, a 256-unit BN-ReLU layer and a 2-d
embedding under an affine-free ``BatchNorm1d``), trained by ``mnist_train.py`` with ``MixedContextLoss`` (the mixed
context loss of Keller et al., CVPR 2018: the two embeddings of a class-aware pair are anchor and positive, the
negative of each anchor is the nearest positive of another class in the batch (``scale_aware``), the margin
``theta`` mixes the local scale ``(d_p + d_n) / 2`` and ``theta_glo`` by ``gamma``, and the loss is the mean of the
two ``logsigmoid`` terms scaled by ``delta``); the loader is ``ClassAwareMNIST``: each item draws a class from a
shuffled class cycle and two images of that class from per-class shuffled cycles; SGD over the parameters that
require grad (lr 0.1, momentum 0.5, weight decay 1e-4), ``ExponentialLR`` from ``lr`` to ``min_lr`` over the epochs
stepped at the start of every epoch, each epoch a train pass then ``validate`` (``eval()``, ``no_grad``, the loss
on the test pairs); ``ToTensor`` and ``Normalize((0.1307,), (0.3081,))``.

Source: https://github.com/4uiiurz1/pytorch-scale-aware-triplet
Commit: b050ab8a6936c04fd1d894ae6e35f499a5ee3655
Files: mnist_train.py, archs.py, mixed_context_loss.py, dataset.py, utils.py, README.md
License: MIT (Copyright (c) 2018 Takato Kimura; full text in LICENSES/4uiiurz1-pytorch-scale-aware-triplet.txt)
Domain: metric learning on images (descriptor learning with a scale-aware triplet / siamese mixed loss)

Deviations from the original:
- sizes: batch 128 -> 32; MNIST's 60000 / 10000 images -> 640 / 128 synthetic ones (``__len__`` is half of them as
  written, so an epoch is 10 batches); the network's widths halved (conv 16 / 32 / 64 -> 8 / 16 / 32, the 256-unit
  layer -> 128); 10 epochs as written;
- data: ``datasets.MNIST`` (a download) is replaced by synthetic 28x28 uint8 "digits" made from ``seed``: each class
  a template of three random strokes, each image its class template shifted by up to 2 pixels, with a random
  intensity and noise; PIL's ``Image.fromarray`` and ``ToTensor`` / ``Normalize`` are written out on the arrays;
  ``random.shuffle`` in ``RandomCycleIter`` uses a seeded ``random.Random``; DataLoader without workers;
- ``.cuda()`` / ``cudnn.benchmark`` are dropped (CPU); the tqdm bars, the pandas log, ``joblib`` / args files and
  checkpoint saving are dropped; ``parse_args``' defaults are written as values;
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``validate``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``;
  ``eval_fn`` is ``validate``'s loss on one batch of pairs; the declared ``batch`` is the two images of each pair
  stacked with the pair's class, and ``loss_fn`` splits the stacked embeddings back into anchor and positive;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF007, C408, F841  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, N_CLASSES, BATCH_SIZE, EPOCHS = 640, 128, 10, 32, 10
W = (8, 16, 32, 128)  # 16, 32, 64 and 256 in the original
SELF_CHECK_STEPS = 30


# ---- archs.py ------------------------------------------------------------------------------------------------

class BNNet(nn.Module):
    def __init__(self):
        super().__init__()

        self.features = nn.Sequential(
            nn.ZeroPad2d(2),
            nn.Conv2d(1, W[0], 3, padding=1),
            nn.BatchNorm2d(W[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(W[0], W[1], 3, padding=1),
            nn.BatchNorm2d(W[1]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(W[1], W[2], 3, padding=1),
            nn.BatchNorm2d(W[2]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
        )

        self.classifier = nn.Sequential(
            nn.Linear(4*4*W[2], W[3]),
            nn.BatchNorm1d(W[3]),
            nn.ReLU(inplace=True),
            nn.Linear(W[3], 2),
            nn.BatchNorm1d(2, affine=False),
        )

    def forward(self, input):
        x = self.features(input)
        x = x.view(x.shape[0], -1)
        output = self.classifier(x)

        return output


# ---- mixed_context_loss.py -----------------------------------------------------------------------------------

class MixedContextLoss(nn.Module):
    def __init__(self, theta_glo=1.15, delta=5, gamma=0.5, scale_aware=True, bug=None):
        super(MixedContextLoss, self).__init__()
        self.theta_glo = theta_glo
        self.delta = delta
        self.gamma = gamma
        self.scale_aware = scale_aware
        self.bug = bug

    def forward(self, y_a, y_p, targets):
        y_n = []
        for i in range(len(y_a)):
            cand_yn = y_p[targets!=targets[i]]
            if self.scale_aware:
                d_n_ik = F.pairwise_distance(y_a[i].unsqueeze(dim=0).repeat(len(cand_yn), 1), cand_yn)
                if self.bug == "negative_farthest":
                    # the mining direction flipped: the easiest (farthest) negative instead of the nearest
                    y_n.append(cand_yn[d_n_ik.argmax()].unsqueeze(dim=0))
                else:
                    y_n.append(cand_yn[d_n_ik.argmin()].unsqueeze(dim=0))
            else:
                y_n.append(cand_yn[random.randrange(len(cand_yn))].unsqueeze(dim=0))
        y_n = torch.cat(y_n, dim=0)

        d_p = F.pairwise_distance(y_a, y_p)
        d_n = F.pairwise_distance(y_a, y_n)

        theta = self.gamma*(d_p + d_n)/2 + (1 - self.gamma)*self.theta_glo
        loss = -(1/(2*self.delta)*F.logsigmoid(2*self.delta*(theta - d_p))
                 + 1/(2*self.delta)*F.logsigmoid(2*self.delta*(d_n - theta)))
        loss = torch.mean(loss)

        return loss


# ---- synthetic MNIST (torchvision's download replaced) -------------------------------------------------------

def _templates(rng):
    """(10, 28, 28) stroke templates: three connected random segments per class, two pixels thick."""
    out = np.zeros((N_CLASSES, 28, 28), np.float32)
    for c in range(N_CLASSES):
        pts = rng.uniform(7, 21, (4, 2))
        for a, b in zip(pts[:-1], pts[1:]):
            for t in np.linspace(0, 1, 40):
                y, x = np.round(a + t * (b - a)).astype(int)
                out[c, y - 1:y + 1, x - 1:x + 1] = 1.0
    return out


def synthetic_mnist(rng, templates, n):
    labels = rng.integers(0, N_CLASSES, n)
    imgs = np.empty((n, 28, 28), np.uint8)
    for k in range(n):
        dy, dx = rng.integers(-2, 3, 2)
        img = np.roll(templates[labels[k]], (dy, dx), axis=(0, 1)) * rng.uniform(0.7, 1.0)
        img = img + 0.1 * rng.standard_normal((28, 28))
        imgs[k] = (np.clip(img, 0, 1) * 255).astype(np.uint8)
    return imgs, labels


def transform(img):
    """``transforms.ToTensor()`` then ``transforms.Normalize((0.1307,), (0.3081,))`` on a uint8 (28, 28) array."""
    return (torch.from_numpy(img).float().div(255.).unsqueeze(0) - 0.1307) / 0.3081


# ---- dataset.py ----------------------------------------------------------------------------------------------

class RandomCycleIter:
    """Randomly iterate element in each cycle
    Example:
        >>> rand_cyc_iter = RandomCycleIter([1, 2, 3])
        >>> [next(rand_cyc_iter) for _ in range(10)]
        [2, 1, 3, 2, 3, 1, 1, 2, 3, 2]
    """
    def __init__(self, data, rnd):
        self.data_list = list(data)
        self.length = len(self.data_list)
        self.i = self.length - 1
        self.rnd = rnd

    def next(self):
        self.i += 1
        if self.i == self.length:
            self.i = 0
            self.rnd.shuffle(self.data_list)
        return self.data_list[self.i]


class ClassAwareMNIST(Dataset):
    def __init__(self, imgs, labels, rnd, transform=None, target_transform=None, bug=None):
        self.transform = transform
        self.target_transform = target_transform
        self.imgs, self.labels = imgs, labels
        self.bug = bug

        n_classes = len(np.unique(self.labels))
        self.class_iter = RandomCycleIter(range(n_classes), rnd)
        class_data_list = [list() for _ in range(n_classes)]
        for i, label in enumerate(self.labels):
            class_data_list[label].append(i)
        self.data_iter_list = [RandomCycleIter(x, rnd) for x in class_data_list]

    def __getitem__(self, index):
        target = self.class_iter.next()
        img1 = self.imgs[self.data_iter_list[target].next()]
        if self.bug == "positive_from_next_class":
            # the class cycle advanced a second time for the positive: the pair's two images differ in class
            img2 = self.imgs[self.data_iter_list[self.class_iter.next()].next()]
        else:
            img2 = self.imgs[self.data_iter_list[target].next()]

        if self.transform is not None:
            img1 = self.transform(img1)
            img2 = self.transform(img2)

        if self.target_transform is not None:
            target = self.target_transform(target)

        return img1, img2, target

    def __len__(self):
        return len(self.imgs) // 2


# ---- mnist_train.py ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    templates = _templates(rng)
    train_imgs, train_labels = synthetic_mnist(rng, templates, N_TRAIN)
    test_imgs, test_labels = synthetic_mnist(rng, templates, N_TEST)

    lr, min_lr, epochs = 1e-1, 1e-3, EPOCHS
    criterion = MixedContextLoss(1.15, 5, 0.5, True, bug=bug)

    train_set = ClassAwareMNIST(train_imgs, train_labels, random.Random(seed + 1), transform=transform, bug=bug)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=0, generator=torch.Generator().manual_seed(seed + 2))

    test_set = ClassAwareMNIST(test_imgs, test_labels, random.Random(seed + 3), transform=transform)
    test_loader = torch.utils.data.DataLoader(
        test_set,
        batch_size=BATCH_SIZE,
        shuffle=False,
        num_workers=0)

    # create model
    model = BNNet()

    optimizer = optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=lr,
        momentum=0.5, weight_decay=1e-4, nesterov=False)

    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=(min_lr/lr)**(1/(epochs-1)))

    def validate():
        # switch to evaluate mode
        model.eval()

        with torch.no_grad():
            for i, (input1, input2, target) in enumerate(test_loader):
                output1 = model(input1)
                output2 = model(input2)

                loss = criterion(output1, output2, target)

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): validate, then the next epoch
                validate()
            scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input1, input2, target = next_batch()

        output1 = model(input1)
        output2 = model(input2)

        loss = criterion(output1, output2, target)

        # compute gradient and do optimizing step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, target):
        n = len(target)
        return criterion(outputs[:n], outputs[n:], target)

    def eval_fn(model, batch):
        inputs, target = batch
        n = len(target)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss = criterion(model(inputs[:n]), model(inputs[n:]), target)
        model.train(was_training)
        return float(loss)

    input1, input2, target = next(iter(DataLoader(
        ClassAwareMNIST(train_imgs, train_labels, random.Random(seed + 4), transform=transform),
        batch_size=BATCH_SIZE)))
    return Program(name="scaleawaretriplet_mnist", model=model, batch=(torch.cat([input1, input2]), target),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic hard-negative mining slip: argmax for argmin over the anchor-to-candidate distances, so each anchor is
    # pushed from the negative that is already farthest and the nearby classes are never separated.
    Bug("negative_farthest", functools.partial(_build, bug="negative_farthest"), "learning_ledger", ("OBJECTIVE",)),
    # classic sampler slip: the class cycle advanced again for the second image, so the "positive" of every pair is
    # an image of another class, labelled with the anchor's class.
    Bug("positive_from_next_class", functools.partial(_build, bug="positive_from_next_class"), "learning_ledger",
        ("TASK",)),
]
