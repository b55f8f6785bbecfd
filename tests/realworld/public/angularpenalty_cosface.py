"""Angular-margin softmax losses (CosFace / additive margin) on a small ConvNet with a 3-d embedding, from
cvqluu/Angular-Penalty-Softmax-Losses-Pytorch's Fashion-MNIST experiment.

Source: https://github.com/cvqluu/Angular-Penalty-Softmax-Losses-Pytorch
Commit: c41d599622b6a6ba7e5be6faf3a01da1202024ea
Files: ``loss_functions.py``, ``models.py``, ``train_fMNIST.py``
License: MIT (Copyright (c) 2020 Chau Luu; full text in LICENSES/cvqluu-Angular-Penalty-Softmax-Losses-Pytorch.txt)
Domain: metric learning (angular-margin softmax: CosFace, s=30, m=0.4, on L2-normalized 3-d embeddings)

Kept as written: ``AngularPenaltySMLoss`` (its three loss types, the defaults of ``s`` and ``m``, the bias-free
``fc``, the loop ``for W in self.fc.parameters(): W = F.normalize(W, p=2, dim=1)`` that normalizes nothing -- the
repository's open issue #3 -- kept as it is, the embeddings L2-normalized, the numerator from the target column,
the denominator built from ``excl`` with the target column removed), ``ConvAngularPen`` (the ConvNet embedding,
the loss module inside the model, ``forward(x, labels)`` returning the loss), ``ConvNet`` (five conv - ReLU -
BatchNorm blocks, max pools after the third and fifth, a linear projection to 3 dimensions), ``train_am``'s loop
body (``loss = model(feats, labels=labels)``, zero_grad, backward, step; Adam at ``args.lr`` 0.01; the lr divided
by 4 every 8 epochs) and ``get_embeds`` (eval mode, normalized embeddings) as the evaluation.

Deviations from the original:
- Fashion-MNIST (torchvision download) is replaced by synthetic 28x28 "garments" made from ``seed``: 10 classes,
  each a fixed template of blocks, shifted by up to two pixels, scaled in brightness, with pixel noise, normalized
  with the script's mean/std (0.1307, 0.3081); 1024 training images. No torchvision: the DataLoader reads tensors.
- sizes for 2 CPU cores: the ConvNet's channels 32/64/128/256/512 -> 4/8/16/32/64 (the 28x28 input, kernels,
  pools and the 3-d projection kept, so the last max pool still sees 8x8); batch_size 512 -> 32.
- ``main`` trains the baseline and then each of ``['cosface', 'sphereface', 'arcface']``; the port is the first
  angular-margin run, ``train_am(train_loader, 'cosface')``. ``train_step`` is one batch of its loop (the lr
  schedule applied when an epoch of the loader ends); tqdm, the prints and the plotting are dropped; CPU only.
- ``eval_fn`` is the nearest-class-mean accuracy of ``get_embeds``' normalized embeddings on 200 held-out images
  (the original plots them instead).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 32  # (port) 512
NUM_EPOCHS = 40
LR = 0.01
C = (4, 8, 16, 32, 64)  # (port) (32, 64, 128, 256, 512)


# loss_functions.py
class AngularPenaltySMLoss(nn.Module):

    def __init__(self, in_features, out_features, loss_type='arcface', eps=1e-7, s=None, m=None, bug=None):
        '''
        Angular Penalty Softmax Loss

        Three 'loss_types' available: ['arcface', 'sphereface', 'cosface']
        These losses are described in the following papers:

        ArcFace: https://arxiv.org/abs/1801.07698
        SphereFace: https://arxiv.org/abs/1704.08063
        CosFace/Ad Margin: https://arxiv.org/abs/1801.05599

        '''
        super(AngularPenaltySMLoss, self).__init__()
        self.bug = bug
        loss_type = loss_type.lower()
        assert loss_type in  ['arcface', 'sphereface', 'cosface']
        if loss_type == 'arcface':
            self.s = 64.0 if not s else s
            self.m = 0.5 if not m else m
        if loss_type == 'sphereface':
            self.s = 64.0 if not s else s
            self.m = 1.35 if not m else m
        if loss_type == 'cosface':
            self.s = 30.0 if not s else s
            self.m = 0.4 if not m else m
        self.loss_type = loss_type
        self.in_features = in_features
        self.out_features = out_features
        self.fc = nn.Linear(in_features, out_features, bias=False)
        self.eps = eps

    def forward(self, x, labels):
        '''
        input shape (N, in_features)
        '''
        assert len(x) == len(labels)
        assert torch.min(labels) >= 0
        assert torch.max(labels) < self.out_features

        for W in self.fc.parameters():
            W = F.normalize(W, p=2, dim=1)

        x = F.normalize(x, p=2, dim=1)

        wf = self.fc(x)
        if self.loss_type == 'cosface':
            numerator = self.s * (torch.diagonal(wf.transpose(0, 1)[labels]) - self.m)
        if self.loss_type == 'arcface':
            numerator = self.s * torch.cos(torch.acos(torch.clamp(torch.diagonal(wf.transpose(0, 1)[labels]), -1.+self.eps, 1-self.eps)) + self.m)
        if self.loss_type == 'sphereface':
            numerator = self.s * torch.cos(self.m * torch.acos(torch.clamp(torch.diagonal(wf.transpose(0, 1)[labels]), -1.+self.eps, 1-self.eps)))

        if self.bug == "excl_keeps_target":
            excl = wf
        else:
            excl = torch.cat([torch.cat((wf[i, :y], wf[i, y+1:])).unsqueeze(0) for i, y in enumerate(labels)], dim=0)
        denominator = torch.exp(numerator) + torch.sum(torch.exp(self.s * excl), dim=1)
        L = numerator - torch.log(denominator)
        return -torch.mean(L)


# models.py
class ConvAngularPen(nn.Module):
    def __init__(self, num_classes=10, loss_type='arcface', bug=None):
        super(ConvAngularPen, self).__init__()
        self.convlayers = ConvNet()
        self.adms_loss = AngularPenaltySMLoss(3, num_classes, loss_type=loss_type, bug=bug)

    def forward(self, x, labels=None, embed=False):
        x = self.convlayers(x)
        if embed:
            return x
        L = self.adms_loss(x, labels)
        return L


class ConvNet(nn.Module):

    def __init__(self):
        super(ConvNet, self).__init__()
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, C[0], kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(C[0]))
        self.layer2 = nn.Sequential(
            nn.Conv2d(C[0], C[1], kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(C[1]))
        self.layer3 = nn.Sequential(
            nn.Conv2d(C[1], C[2], kernel_size=3, stride=1, padding=1),
            nn.ReLU(),
            nn.BatchNorm2d(C[2]),
            nn.MaxPool2d(kernel_size=2, stride=2))
        self.layer4 = nn.Sequential(
            nn.Conv2d(C[2], C[3], kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(C[3]))
        self.layer5 = nn.Sequential(
            nn.Conv2d(C[3], C[4], kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            nn.BatchNorm2d(C[4]),
            nn.MaxPool2d(kernel_size=8, stride=1))
        self.fc_projection = nn.Linear(C[4], 3)

    def forward(self, x, embed=False):
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.layer5(x)
        x = x.reshape(x.size(0), -1)
        x = self.fc_projection(x)
        return x


# (port) data: synthetic Fashion-MNIST-like images
class SyntheticGarments(torch.utils.data.Dataset):
    """10 classes of 28x28 block templates, shifted by up to 2 pixels, brightness-scaled, noisy, normalized like
    the script's ``transforms.Normalize(mean=(0.1307,), std=(0.3081,))``."""

    def __init__(self, seed, n, templates_seed, bug=None):
        tg = torch.Generator().manual_seed(templates_seed)
        templates = torch.zeros(10, 28, 28)
        for c in range(10):
            for _ in range(3):
                r0, c0 = torch.randint(2, 18, (2,), generator=tg).tolist()
                h, w = torch.randint(4, 10, (2,), generator=tg).tolist()
                templates[c, r0:r0 + h, c0:c0 + w] = 1.0
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        shifts = torch.randint(-2, 3, (n, 2), generator=g)
        bright = 0.6 + 0.4 * torch.rand(n, generator=g)
        imgs = torch.stack([torch.roll(templates[int(y)], tuple(s.tolist()), dims=(0, 1)) for y, s in
                            zip(self.labels, shifts)]) * bright[:, None, None]
        imgs = (imgs + 0.15 * torch.rand(n, 28, 28, generator=g)).clamp(0, 1)
        self.images = ((imgs - 0.1307) / 0.3081).unsqueeze(1)
        if bug == "labels_shuffled_apart":
            self.labels = self.labels[torch.randperm(n, generator=g)]

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    train_ds = SyntheticGarments(seed, 1024, templates_seed=seed, bug=bug)
    test_ds = SyntheticGarments(seed + 1000, 200, templates_seed=seed)
    train_loader = torch.utils.data.DataLoader(dataset=train_ds, batch_size=BATCH_SIZE, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))

    loss_type = 'cosface'
    model = ConvAngularPen(loss_type=loss_type, bug=bug).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    st = {"epoch": 0, "it": iter(train_loader)}

    def train_step():
        try:
            feats, labels = next(st["it"])
        except StopIteration:
            epoch = st["epoch"]
            if((epoch+1) % 8 == 0):
                for param_group in optimizer.param_groups:
                    param_group['lr'] = param_group['lr']/4
            st["epoch"] += 1
            st["it"] = iter(train_loader)
            feats, labels = next(st["it"])
        feats = feats.to(device)
        labels = labels.to(device)
        loss = model(feats, labels=labels)
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def get_embeds(model, feats_all):
        model = model.to(device).eval()
        with torch.no_grad():
            embeds = model(feats_all, embed=True)
            full_embeds = F.normalize(embeds.detach().cpu())
        model.train()
        return full_embeds

    def eval_fn(model, batch=None):
        # nearest class mean of the normalized embeddings (port: the original plots them)
        emb = get_embeds(model, test_ds.images)
        means = torch.stack([emb[test_ds.labels == c].mean(0) if (test_ds.labels == c).any() else torch.zeros(3)
                             for c in range(10)])
        pred = (emb @ F.normalize(means, dim=1).T).argmax(1)
        return float((pred == test_ds.labels).float().mean())

    def loss_fn(loss, _labels=None):
        return loss

    # the model's forward takes (feats, labels) and returns the loss, as ConvAngularPen does
    batch = ((train_ds.images[:BATCH_SIZE], train_ds.labels[:BATCH_SIZE]), train_ds.labels[:BATCH_SIZE])

    return Program(name="angularpenalty_cosface", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the denominator keeps the target column (classic: ``excl`` left as the full ``wf``), so the margin logit
    # competes with its own unmargined copy.
    Bug("excl_keeps_target", functools.partial(_build, bug="excl_keeps_target"), "learning_ledger", ("OBJECTIVE",)),
    # the dataset's labels permuted apart from its images (classic).
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # zero_grad between backward and step (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
