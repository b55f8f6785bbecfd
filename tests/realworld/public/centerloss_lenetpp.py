"""Center loss on LeNet++ from KaiyangZhou/pytorch-center-loss: the repository's ``ConvNet`` (LeNet++ of the
Center Loss paper: three stages of two 5x5 convs with PReLU and max-pooling, a 2-d feature layer with PReLU, a
linear classifier; ``forward`` returns ``(features, logits)``), ``CenterLoss`` (squared distances of each feature
to every class center by ``addmm_``, masked to the sample's own class, clamped, summed over the batch / batch
size), trained by ``main.py``'s loop: ``CrossEntropyLoss`` on the logits + ``weight_cent`` x center loss on the
features, SGD(lr 0.001, momentum 0.9, weight_decay 5e-4) over the model, a second SGD(lr 0.5) over the centers,
the centers' gradient rescaled by ``1 / weight_cent`` before their step, ``StepLR(step_size=20, gamma=0.5)`` per
epoch, ``test`` (``eval()``, no_grad, accuracy) every ``eval_freq`` epochs.

Source: https://github.com/KaiyangZhou/pytorch-center-loss
Commit: 082ffa21c065426843f26129be51bb1cfd554806
Files: main.py, center_loss.py, models.py, datasets.py
License: MIT (Copyright (c) 2018 Kaiyang; full text in LICENSES/KaiyangZhou-pytorch-center-loss.txt)
Domain: vision, metric learning (softmax + center loss, two optimizers)

Deviations from the original:
- sizes: the convs' widths 32/64/128 -> 8/16/32 (so ``fc1`` takes 32*3*3), batch 128 -> 32, 60000 training images
  -> 512; no test set is made (``eval_fn`` is ``test``'s accuracy on the batch it is given); the 28x28 input,
  the depth, the 2-d feature and every hyperparameter are kept;
- data: MNIST is replaced by synthetic 28x28 grey images made from ``seed``: each class has a smooth random
  template, an image is its class's template times a random contrast plus noise, normalized with the script's
  (0.1307,), (0.3081,); the label is the template the image correlates with most (torchvision is not available;
  ToTensor/Normalize are written out); DataLoader without workers;
- ``distmat.addmm_(1, -2, x, self.centers.t())`` (the positional beta/alpha form, removed from torch) is written
  ``distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)``: the same computation;
- ``.cuda()``, ``DataParallel``, the ``Logger``, ``AverageMeter`` bookkeeping, printing and plotting are dropped
  (CPU; ``use_gpu=False``);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()`` (``scheduler.step()``, then the next ``train()``'s ``model.train()``); ``eval_fn`` is ``test``'s
  accuracy on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059, SIM102, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE, N_TRAIN, NUM_CLASSES = 32, 512, 10
C1, C2, C3 = 8, 16, 32


class _Args:
    lr_model = 0.001
    lr_cent = 0.5
    weight_cent = 1
    stepsize = 20
    gamma = 0.5


args = _Args()


# ---- center_loss.py ----------------------------------------------------------------------------------------------

class CenterLoss(nn.Module):
    """Center loss.

    Reference:
    Wen et al. A Discriminative Feature Learning Approach for Deep Face Recognition. ECCV 2016.

    Args:
        num_classes (int): number of classes.
        feat_dim (int): feature dimension.
    """
    def __init__(self, num_classes=10, feat_dim=2, use_gpu=True, bug=None):
        super(CenterLoss, self).__init__()
        self.num_classes = num_classes
        self.feat_dim = feat_dim
        self.use_gpu = use_gpu
        self.bug = bug

        if self.use_gpu:
            self.centers = nn.Parameter(torch.randn(self.num_classes, self.feat_dim).cuda())
        else:
            self.centers = nn.Parameter(torch.randn(self.num_classes, self.feat_dim))

    def forward(self, x, labels):
        """
        Args:
            x: feature matrix with shape (batch_size, feat_dim).
            labels: ground truth labels with shape (batch_size).
        """
        batch_size = x.size(0)
        distmat = torch.pow(x, 2).sum(dim=1, keepdim=True).expand(batch_size, self.num_classes) + \
                  torch.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(self.num_classes, batch_size).t()
        distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)

        classes = torch.arange(self.num_classes).long()
        if self.use_gpu: classes = classes.cuda()
        labels = labels.unsqueeze(1).expand(batch_size, self.num_classes)
        mask = labels.eq(classes.expand(batch_size, self.num_classes))

        if self.bug == "class_mask_not_applied":
            dist = distmat
        else:
            dist = distmat * mask.float()
        loss = dist.clamp(min=1e-12, max=1e+12).sum() / batch_size

        return loss


# ---- models.py ---------------------------------------------------------------------------------------------------

class ConvNet(nn.Module):
    """LeNet++ as described in the Center Loss paper."""
    def __init__(self, num_classes):
        super(ConvNet, self).__init__()
        self.conv1_1 = nn.Conv2d(1, C1, 5, stride=1, padding=2)
        self.prelu1_1 = nn.PReLU()
        self.conv1_2 = nn.Conv2d(C1, C1, 5, stride=1, padding=2)
        self.prelu1_2 = nn.PReLU()

        self.conv2_1 = nn.Conv2d(C1, C2, 5, stride=1, padding=2)
        self.prelu2_1 = nn.PReLU()
        self.conv2_2 = nn.Conv2d(C2, C2, 5, stride=1, padding=2)
        self.prelu2_2 = nn.PReLU()

        self.conv3_1 = nn.Conv2d(C2, C3, 5, stride=1, padding=2)
        self.prelu3_1 = nn.PReLU()
        self.conv3_2 = nn.Conv2d(C3, C3, 5, stride=1, padding=2)
        self.prelu3_2 = nn.PReLU()

        self.fc1 = nn.Linear(C3*3*3, 2)
        self.prelu_fc1 = nn.PReLU()
        self.fc2 = nn.Linear(2, num_classes)

    def forward(self, x):
        x = self.prelu1_1(self.conv1_1(x))
        x = self.prelu1_2(self.conv1_2(x))
        x = F.max_pool2d(x, 2)

        x = self.prelu2_1(self.conv2_1(x))
        x = self.prelu2_2(self.conv2_2(x))
        x = F.max_pool2d(x, 2)

        x = self.prelu3_1(self.conv3_1(x))
        x = self.prelu3_2(self.conv3_2(x))
        x = F.max_pool2d(x, 2)

        x = x.view(-1, C3*3*3)
        x = self.prelu_fc1(self.fc1(x))
        y = self.fc2(x)

        return x, y


# ---- synthetic MNIST-shaped data (datasets.py's transform: ToTensor, Normalize((0.1307,), (0.3081,))) -----------

def _templates(gen):
    coarse = torch.rand(NUM_CLASSES, 1, 7, 7, generator=gen)
    return F.interpolate(coarse, size=(28, 28), mode="bilinear", align_corners=False)[:, 0]


def _label(raw, templates):
    flat = raw.flatten(1) - raw.flatten(1).mean(1, keepdim=True)
    t = templates.flatten(1) - templates.flatten(1).mean(1, keepdim=True)
    corr = (flat @ t.t()) / (flat.norm(dim=1, keepdim=True) * t.norm(dim=1)[None] + 1e-8)
    return corr.argmax(dim=1)


def _images(gen, templates, n):
    cls = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    contrast = 0.6 + 0.4 * torch.rand(n, 1, 1, generator=gen)
    raw = (templates[cls] * contrast + 0.15 * torch.randn(n, 28, 28, generator=gen)).clamp(0, 1)
    labels = _label(raw, templates)
    x = ((raw - 0.1307) / 0.3081).unsqueeze(1)
    return x, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = _templates(gen)
    train_x, train_y = _images(gen, templates, N_TRAIN)
    trainloader = DataLoader(TensorDataset(train_x, train_y), batch_size=BATCH_SIZE, shuffle=True, generator=gen)
    use_gpu = False

    model = ConvNet(num_classes=NUM_CLASSES)

    criterion_xent = nn.CrossEntropyLoss()
    criterion_cent = CenterLoss(num_classes=NUM_CLASSES, feat_dim=2, use_gpu=use_gpu, bug=bug)
    optimizer_model = torch.optim.SGD(model.parameters(), lr=args.lr_model, weight_decay=5e-04, momentum=0.9)
    optimizer_centloss = torch.optim.SGD(criterion_cent.parameters(), lr=args.lr_cent)

    if args.stepsize > 0:
        scheduler = lr_scheduler.StepLR(optimizer_model, step_size=args.stepsize, gamma=args.gamma)

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                if args.stepsize > 0: scheduler.step()
            model.train()
            state["it"] = iter(trainloader)
            return next(state["it"])

    def train_step():
        data, labels = next_batch()
        features, outputs = model(data)
        loss_xent = criterion_xent(outputs, labels)
        loss_cent = criterion_cent(features, labels)
        loss_cent *= args.weight_cent
        loss = loss_xent + loss_cent
        if bug != "model_zero_grad_dropped":
            optimizer_model.zero_grad()
        optimizer_centloss.zero_grad()
        loss.backward()
        optimizer_model.step()
        # by doing so, weight_cent would not impact on the learning of centers
        for param in criterion_cent.parameters():
            param.grad.data *= (1. / args.weight_cent)
        if bug != "centers_not_stepped":
            optimizer_centloss.step()
        return loss.detach()

    def loss_fn(outputs, labels):
        features, logits = outputs
        loss_cent = criterion_cent(features, labels) * args.weight_cent
        return criterion_xent(logits, labels) + loss_cent

    def eval_fn(model, batch):
        data, labels = batch
        model.eval()
        with torch.no_grad():
            features, outputs = model(data)
            predictions = outputs.data.max(1)[1]
            acc = (predictions == labels.data).float().mean()
        model.train()
        return float(acc)

    def task_probe(x):
        """The labelling rule: the class template the (de-normalized) image correlates with most."""
        return _label((x[:, 0] * 0.3081 + 0.1307), templates)

    batch = (train_x[:BATCH_SIZE], train_y[:BATCH_SIZE])
    return Program(name="centerloss_lenetpp", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer_model,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, task="classification",
                   loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the class mask never reaches the center loss: every feature is pulled toward every class's center, so the
    # auxiliary objective collapses all features onto the centers' mean instead of separating the classes (classic:
    # mask not applied to the loss).
    Bug("class_mask_not_applied", functools.partial(_build, bug="class_mask_not_applied"), "learning_ledger",
        ("OBJECTIVE",)),
    # the model's optimizer is never cleared: its gradients accumulate over every step (classic; whole model).
    Bug("model_zero_grad_dropped", functools.partial(_build, bug="model_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
    # the centers are never updated, they stay at their random init while the features are pulled toward them; the
    # fix reported in https://github.com/KaiyangZhou/pytorch-center-loss/issues/11 ("the center loss parameters need
    # to be added to the optimizer"). Here the centers' optimizer step is left out.
    Bug("centers_not_stepped", functools.partial(_build, bug="centers_not_stepped"), "four_structures",
        ("centers",)),
]
