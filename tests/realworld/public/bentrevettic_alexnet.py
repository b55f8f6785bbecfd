# ruff: noqa: UP008, PLR0402, PLR1730
"""AlexNet on CIFAR-10 from bentrevett/pytorch-image-classification (``3_alexnet.ipynb``): a CIFAR-sized AlexNet
(five convolutions with max-pooling, a dropout / Linear / ReLU classifier that returns the logits and the flattened
features), Kaiming-normal convolutions and Xavier-normal linears with zero biases, the notebook's learning-rate range
test (``LRFinder`` with an exponential schedule, the model reset to its initial parameters afterwards), then Adam at
the found rate and cross-entropy, the training set split 90/10 into train and validation, augmentation on the
training images only.

Source: https://github.com/bentrevett/pytorch-image-classification
Commit: 33c9cfdb9097bc65b5800c1996f199f0ba520888
Files: ``3_alexnet.ipynb`` (its code cells: the means and stds, the transforms, ``random_split`` and the deep-copied
validation subset, ``AlexNet``, ``initialize_parameters``, ``LRFinder``, ``ExponentialLR``, ``IteratorWrapper``,
``calculate_accuracy``, ``train``, ``evaluate``)
License: MIT (Copyright (c) 2018 Ben Trevett; full text in LICENSES/bentrevett-pytorch-image-classification.txt)
Domain: vision, image classification (CNN, Adam at a rate picked by a range test)

Kept as written: ``AlexNet`` (the layer order conv / max-pool / ReLU, the forward returning ``(x, h)``),
``initialize_parameters`` applied with ``model.apply``, ``LRFinder.range_test`` and ``_train_batch`` (the smoothed
loss, the divergence stop, the reset of the model to its initial parameters), the custom
``ExponentialLR``, ``IteratorWrapper``, ``START_LR = 1e-7`` / ``END_LR = 10``, ``FOUND_LR = 1e-3`` and the new Adam
made with it, ``nn.CrossEntropyLoss``, ``calculate_accuracy``, the loop body of ``train`` (zero_grad, forward,
criterion, accuracy, backward, step) and ``evaluate`` (``model.eval()`` under ``no_grad``), the 90/10 split with the
validation subset deep-copied before its transform is swapped, means and stds computed from the training images.

Deviations from the original:
- CIFAR-10 is not here: 32x32 RGB images made from ``seed``: 10 class templates (a 4x4 random pattern upsampled and
  made left-right symmetric) plus noise; an image's class is the template it correlates with most (``task_probe``);
- torchvision is not here: the transforms (``RandomRotation(5)``, ``RandomHorizontalFlip(0.5)``,
  ``RandomCrop(32, padding=2)``, ``ToTensor``, ``Normalize``) are written out in plain torch in ``_Transforms``;
  ``datasets.CIFAR10`` is a small in-memory dataset with the same ``(image, label)`` items;
- sizes for 2 CPU cores: the convolutions' channels 64/192/384/256/256 -> 16/32/48/32/32, the hidden linears 4096 ->
  128, batch 256 -> 32, 640 training images before the split, the range test's ``NUM_ITER`` 100 -> 30;
- ``LRFinder`` keeps the initial parameters in memory (a ``state_dict`` deep copy) instead of ``init_params.pt``,
  resets ``self.model`` (the notebook's global ``model``, the same object) and drops its "Stopping early" print;
  ``.to(device)`` calls dropped (CPU); the plots, tqdm bars, timing, checkpoint saving and the analysis cells after
  the training loop are dropped;
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch of it (``model.train()`` and a new shuffle at
  the start of an epoch, ``evaluate`` on the validation split when it ends); ``eval_fn`` is ``evaluate``'s accuracy
  on one batch;
- the blank lines inside ``range_test``, ``_train_batch`` and ``evaluate`` are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from torch.optim.lr_scheduler import _LRScheduler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES, N_CLASSES, C1, C2, C3, HIDDEN = 640, 10, 16, 32, 48, 128  # (port) sizes
SELF_CHECK_STEPS = 40


class _CIFARLike(data.Dataset):
    """(port) In place of ``datasets.CIFAR10``: uint8 HWC images in ``.data``, integer labels, a ``transform``."""

    def __init__(self, images, labels, transform=None):
        self.data, self.targets, self.transform = images, labels, transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        image = self.data[i]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[i])


class _Transforms:
    """(port) torchvision's RandomRotation(5), RandomHorizontalFlip(0.5), RandomCrop(32, padding=2), ToTensor and
    Normalize written out (the random ones only when ``train``)."""

    def __init__(self, means, stds, train):
        self.means = torch.tensor(means, dtype=torch.float32).view(3, 1, 1)
        self.stds = torch.tensor(stds, dtype=torch.float32).view(3, 1, 1)
        self.train = train

    def __call__(self, image):
        x = torch.as_tensor(image).permute(2, 0, 1).float() / 255  # ToTensor
        if self.train:
            angle = math.radians(float(torch.empty(1).uniform_(-5, 5)))
            theta = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0]])
            grid = F.affine_grid(theta[None], [1, 3, 32, 32], align_corners=False)
            x = F.grid_sample(x[None], grid, mode="nearest", align_corners=False)[0]
            if torch.rand(1) < 0.5:
                x = x.flip(-1)
            i, j = torch.randint(0, 5, (2,)).tolist()
            x = F.pad(x, [2, 2, 2, 2])[:, i:i + 32, j:j + 32]
        return (x - self.means) / self.stds  # Normalize


def _templates(gen):
    t = torch.rand(N_CLASSES, 3, 4, 4, generator=gen)
    t = F.interpolate(t, size=(32, 32), mode="bilinear", align_corners=False)
    t = (t + t.flip(-1)) / 2
    return t - t.mean(dim=(1, 2, 3), keepdim=True)


def _synthetic_images(gen, templates):
    labels = torch.randint(0, N_CLASSES, (N_IMAGES,), generator=gen)
    x = 0.5 + 1.5 * templates[labels] + 0.08 * torch.randn(N_IMAGES, 3, 32, 32, generator=gen)
    images = (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
    return images, labels.numpy()


class AlexNet(nn.Module):
    def __init__(self, output_dim, bug=None):
        super().__init__()
        self.bug = bug

        self.features = nn.Sequential(
            nn.Conv2d(3, C1, 3, 2, 1),  # in_channels, out_channels, kernel_size, stride, padding
            nn.MaxPool2d(2),  # kernel_size
            nn.ReLU(inplace=True),
            nn.Conv2d(C1, C2, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(inplace=True),
            nn.Conv2d(C2, C3, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(C3, C2, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(C2, C2, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(inplace=True)
        )

        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(C2 * 2 * 2, HIDDEN),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(inplace=True),
            nn.Linear(HIDDEN, output_dim),
        )

    def forward(self, x):
        x = self.features(x)
        if self.bug == "flatten_across_batch":
            h = x.transpose(0, 1).reshape(x.shape[0], -1)
        else:
            h = x.view(x.shape[0], -1)
        x = self.classifier(h)
        if self.bug == "softmax_in_forward":
            x = F.softmax(x, dim=-1)
        return x, h


def initialize_parameters(m):
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight.data, nonlinearity='relu')
        nn.init.constant_(m.bias.data, 0)
    elif isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight.data, gain=nn.init.calculate_gain('relu'))
        nn.init.constant_(m.bias.data, 0)


class LRFinder:
    def __init__(self, model, optimizer, criterion, device):

        self.optimizer = optimizer
        self.model = model
        self.criterion = criterion
        self.device = device

        self.init_params = copy.deepcopy(model.state_dict())  # (port) instead of torch.save('init_params.pt')

    def range_test(self, iterator, end_lr=10, num_iter=100,
                   smooth_f=0.05, diverge_th=5):
        lrs = []
        losses = []
        best_loss = float('inf')
        lr_scheduler = ExponentialLR(self.optimizer, end_lr, num_iter)
        iterator = IteratorWrapper(iterator)
        for iteration in range(num_iter):
            loss = self._train_batch(iterator)
            lrs.append(lr_scheduler.get_last_lr()[0])
            # update lr
            lr_scheduler.step()
            if iteration > 0:
                loss = smooth_f * loss + (1 - smooth_f) * losses[-1]
            if loss < best_loss:
                best_loss = loss
            losses.append(loss)
            if loss > diverge_th * best_loss:
                break
        # reset model to initial parameters
        self.model.load_state_dict(self.init_params)  # (port) the notebook's global `model` is this model
        return lrs, losses

    def _train_batch(self, iterator):
        self.model.train()
        self.optimizer.zero_grad()
        x, y = iterator.get_batch()
        y_pred, _ = self.model(x)
        loss = self.criterion(y_pred, y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


class ExponentialLR(_LRScheduler):
    def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
        self.end_lr = end_lr
        self.num_iter = num_iter
        super(ExponentialLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        curr_iter = self.last_epoch
        r = curr_iter / self.num_iter
        return [base_lr * (self.end_lr / base_lr) ** r
                for base_lr in self.base_lrs]


class IteratorWrapper:
    def __init__(self, iterator):
        self.iterator = iterator
        self._iterator = iter(iterator)

    def __next__(self):
        try:
            inputs, labels = next(self._iterator)
        except StopIteration:
            self._iterator = iter(self.iterator)
            inputs, labels, *_ = next(self._iterator)

        return inputs, labels

    def get_batch(self):
        return next(self)


def calculate_accuracy(y_pred, y):
    top_pred = y_pred.argmax(1, keepdim=True)
    correct = top_pred.eq(y.view_as(top_pred)).sum()
    acc = correct.float() / y.shape[0]
    return acc


def evaluate(model, iterator, criterion, device):
    epoch_loss = 0
    epoch_acc = 0
    model.eval()
    with torch.no_grad():
        for (x, y) in iterator:
            y_pred, _ = model(x)
            loss = criterion(y_pred, y)
            acc = calculate_accuracy(y_pred, y)
            epoch_loss += loss.item()
            epoch_acc += acc.item()
    return epoch_loss / len(iterator), epoch_acc / len(iterator)


def _data(seed):
    """The notebook's data cells on the synthetic images: means and stds, transforms, the 90/10 split."""
    gen = torch.Generator().manual_seed(seed)
    templates = _templates(gen)
    images, labels = _synthetic_images(gen, templates)
    means = images.mean(axis=(0, 1, 2)) / 255
    stds = images.std(axis=(0, 1, 2)) / 255
    train_transforms = _Transforms(means, stds, train=True)
    test_transforms = _Transforms(means, stds, train=False)
    train_data = _CIFARLike(images, labels, transform=train_transforms)

    VALID_RATIO = 0.9
    n_train_examples = int(len(train_data) * VALID_RATIO)
    n_valid_examples = len(train_data) - n_train_examples
    train_data, valid_data = data.random_split(train_data, [n_train_examples, n_valid_examples],
                                               generator=torch.Generator().manual_seed(seed))
    valid_data = copy.deepcopy(valid_data)
    valid_data.dataset.transform = test_transforms
    return templates, (means, stds), train_data, valid_data


def _build(seed, bug=None):
    torch.manual_seed(seed)
    templates, (means, stds), train_data, valid_data = _data(seed)
    BATCH_SIZE = 32
    train_iterator = data.DataLoader(train_data, shuffle=True, batch_size=BATCH_SIZE,
                                     generator=torch.Generator().manual_seed(seed))
    valid_iterator = data.DataLoader(valid_data, batch_size=BATCH_SIZE)

    model = AlexNet(N_CLASSES, bug=bug)
    model.apply(initialize_parameters)
    device = torch.device('cpu')
    criterion = nn.CrossEntropyLoss()

    START_LR, END_LR, NUM_ITER = 1e-7, 10, 30
    optimizer = optim.Adam(model.parameters(), lr=START_LR)
    lr_finder = LRFinder(model, optimizer, criterion, device)
    lr_finder.range_test(train_iterator, END_LR, NUM_ITER)

    FOUND_LR = 1e-3
    optimizer = optim.Adam(model.parameters(), lr=FOUND_LR)
    return _program(seed, bug, model, optimizer, criterion, train_iterator, valid_iterator, templates,
                    (means, stds), device)


def _program(seed, bug, model, optimizer, criterion, train_iterator, valid_iterator, templates, stats, device):
    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch: the notebook evaluates on the validation split
                evaluate(model, valid_iterator, criterion, device)
            model.train()
            state["it"] = iter(train_iterator)
            return next(state["it"])

    def train_step():
        x, y = next_batch()
        if bug == "zero_grad_after_backward":
            y_pred, _ = model(x)
            loss = criterion(y_pred, y)
            acc = calculate_accuracy(y_pred, y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            return loss.detach()

        optimizer.zero_grad()

        y_pred, _ = model(x)

        loss = criterion(y_pred, y)

        acc = calculate_accuracy(y_pred, y)  # noqa: F841

        loss.backward()

        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        _, acc = evaluate(model, [batch], criterion, device)
        model.train()
        return acc

    means = torch.tensor(stats[0], dtype=torch.float32).view(1, 3, 1, 1)
    stds = torch.tensor(stats[1], dtype=torch.float32).view(1, 3, 1, 1)

    def true_labels(x):
        """The labelling rule: the template the (un-normalized) image correlates with most."""
        raw = x * stds + means - 0.5
        return torch.einsum("bchw,kchw->bk", raw, templates).argmax(dim=1)

    first = next(iter(data.DataLoader(train_iterator.dataset, batch_size=32)))
    return Program(name="bentrevettic_alexnet", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda out, y: criterion(out[0], y), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, task_probe=true_labels, task="classification", loader=train_iterator)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: a softmax left at the end of the forward while the loss is nn.CrossEntropyLoss, which applies
    # log-softmax itself: the loss sees probabilities as logits and its gradient is squashed.
    Bug("softmax_in_forward", functools.partial(_build, bug="softmax_in_forward"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the feature maps flattened after moving the channel axis first, so each row of h mixes the features
    # of different images of the batch and the classifier no longer sees one image per row.
    Bug("flatten_across_batch", functools.partial(_build, bug="flatten_across_batch"), "tensor_trace",
        ("classifier",)),
    # classic: zero_grad moved between backward and step: Adam steps on zero gradients, nothing learns.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
