# ruff: noqa: UP004, UP008, PLR0402, RUF059, F841, TRY002  (the original's style is kept as written)
"""Hard Negative Contrastive Learning (Robinson, Chuang, Sra & Jegelka, ICLR 2021) from joshr17/HCL: SimCLR with the
hard-negative importance-sampling estimator: two augmented views of each image go through a ResNet encoder ``f`` (its
first convolution 3x3 stride 1, no max-pool, no fc) and a projection head ``g``; the positive score is the
exponentiated cosine similarity of the two views' projections over the temperature, the negatives are the other 2N - 2
samples of the batch, each reweighted by ``imp = exp(beta * log(neg))`` normalized by its mean, and the debiased
``Ng = (-tau_plus * N * pos + reweight_neg) / (1 - tau_plus)``, clamped at ``N * e^(-1/t)``, replaces the negatives'
sum in ``-log(pos / (pos + Ng))``; Adam (lr 1e-3, weight decay 1e-6); a weighted k-NN monitor on the encoder's
normalized features.

Source: https://github.com/joshr17/HCL
Commit: 7b4647fac271c78a2a9d619fe3f2929ecfaf33df
Files: ``image/main.py`` (``get_negative_mask``, ``criterion``, ``train``, ``test``, the ``__main__`` set-up),
``image/model.py`` (``Model``), ``image/utils.py`` (``STL10Pair``, ``GaussianBlur``, ``train_transform``,
``test_transform``), ``image/launch.sh`` (the STL10 command: batch 256, estimator hard, tau_plus 0.1, beta 1.0)
License: MIT (Copyright (c) 2020 Josh Robinson; full text in LICENSES/joshr17-HCL.txt)
Domain: self-supervised contrastive learning (SimCLR with the hard-negative debiased InfoNCE objective)

HCL's image code grew out of chingyaoc/DCL's (ported as ``dcl_debiased_simclr``): the model, the data pipeline and the
k-NN monitor are the same lines, and this port writes them out the same way; what HCL adds, and what this port is for,
is ``criterion`` with its ``hard`` estimator (the default, and launch.sh's), which is copied as written.

Kept as written: ``Model`` (the encoder from the ResNet's children with ``conv1`` replaced and ``Linear`` /
``MaxPool2d`` dropped; ``g`` = Linear(bias False), BatchNorm1d(512), ReLU, Linear(512, feature_dim); both outputs
L2-normalized), ``get_negative_mask``, ``criterion`` (``neg`` from the masked exponentiated similarity matrix, ``pos``
repeated for both views, the ``hard`` estimator: ``imp``, ``reweight_neg``, ``Ng`` with its clamp; the loss),
``train``'s loop body (``net.train()``, the two forwards, ``criterion``, zero_grad / backward / step), ``test``'s
weighted k-NN (feature bank, top-k similarities, ``exp(sim / temperature)`` weights, top-1 accuracy), the defaults
(feature_dim 128, temperature 0.5, tau_plus 0.1, estimator hard, beta 1.0, no annealing, Adam lr 1e-3 weight decay
1e-6), ``STL10Pair`` (two independent draws of the transform per image), the transforms' parameters
(RandomResizedCrop(32), flip p 0.5, ColorJitter(0.4, 0.4, 0.4, 0.1) p 0.8, RandomGrayscale p 0.2, GaussianBlur with
kernel int(0.1 * 32) and sigma 0.1-2.0 at p 0.5, the CIFAR normalization).

Deviations from the original:
- STL10 (``train+unlabeled``, ``train``, ``test``) is not here: 64 training and 32 test 16x16 RGB images made from
  ``seed`` (a coloured square, disk, horizontal or vertical stripes at a random place on a noisy background: 4 kinds,
  the kind is the label the k-NN monitor reads);
- torchvision and cv2 are not installed: ``resnet50`` is replaced by the ResNet-18 of ``_tv_resnet.py`` at width 4
  (same children names; the encoder's output is 32 features instead of 2048), and the transforms are written out in
  torch on [3, H, W] tensors in [0, 1] (the hue jitter as a rotation in YIQ space; cv2's blur as a separable Gaussian
  with reflection padding); their random draws come from a generator seeded from ``seed``;
- sizes for 2 CPU cores: images 32x32 -> 16x16 (RandomResizedCrop(32) -> (16); the blur kernel stays int(0.1 * 32)),
  batch_size 256 -> 16, the k of the k-NN 200 -> 10, num_workers 0; no DataParallel, no CUDA;
- ``criterion`` reads ``temperature`` and ``device`` as module globals in the original; here ``temperature`` is an
  argument and there is no device;
- one ``train_step`` is one iteration of ``train``'s loop (a new shuffled epoch, after ``net.train()``, when the loader
  runs out); tqdm, the checkpoints and the every-100-epochs schedule of ``test`` are dropped; ``eval_fn`` is ``test``
  (top-1 k-NN accuracy; the top-5 count, meaningless with 4 classes, dropped) on the memory and test sets, then
  ``net.train()``;
- the Program's batch is the first training batch (the two views), its ``loss_fn`` the same objective on the model's
  outputs for the concatenated views;
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
import torch.optim as optim
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import resnet18

SIZE = 16  # (port) 32


# model.py
class Model(nn.Module):
    def __init__(self, feature_dim=128):
        super(Model, self).__init__()

        self.f = []
        for name, module in resnet18(width=4).named_children():  # (port) resnet50()
            if name == 'conv1':
                module = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)  # (port) 64 channels
            if not isinstance(module, nn.Linear) and not isinstance(module, nn.MaxPool2d):
                self.f.append(module)
        # encoder
        self.f = nn.Sequential(*self.f)
        # projection head
        self.g = nn.Sequential(nn.Linear(32, 512, bias=False), nn.BatchNorm1d(512),  # (port) 2048 inputs
                               nn.ReLU(inplace=True), nn.Linear(512, feature_dim, bias=True))

    def forward(self, x):
        x = self.f(x)
        feature = torch.flatten(x, start_dim=1)
        out = self.g(feature)
        return F.normalize(feature, dim=-1), F.normalize(out, dim=-1)


# main.py
def get_negative_mask(batch_size):
    negative_mask = torch.ones((batch_size, 2 * batch_size), dtype=bool)
    for i in range(batch_size):
        negative_mask[i, i] = 0
        negative_mask[i, i + batch_size] = 0

    negative_mask = torch.cat((negative_mask, negative_mask), 0)
    return negative_mask

def criterion(out_1,out_2,tau_plus,batch_size,beta, estimator, temperature, bug=None):
        # neg score
        out = torch.cat([out_1, out_2], dim=0)
        neg = torch.exp(torch.mm(out, out.t().contiguous()) / temperature)
        old_neg = neg.clone()
        mask = get_negative_mask(batch_size)
        neg = neg.masked_select(mask).view(2 * batch_size, -1)

        # pos score
        pos = torch.exp(torch.sum(out_1 * out_2, dim=-1) / temperature)
        pos = torch.cat([pos, pos], dim=0)

        # negative samples similarity scoring
        if estimator=='hard':
            N = batch_size * 2 - 2
            if bug == "hardness_weights_inverted":
                imp = (-beta* neg.log()).exp()
            else:
                imp = (beta* neg.log()).exp()
            reweight_neg = (imp*neg).sum(dim = -1) / imp.mean(dim = -1)
            Ng = (-tau_plus * N * pos + reweight_neg) / (1 - tau_plus)
            # constrain (optional)
            Ng = torch.clamp(Ng, min = N * np.e**(-1 / temperature))
        elif estimator=='easy':
            Ng = neg.sum(dim=-1)
        else:
            raise Exception('Invalid estimator selected. Please use any of [hard, easy]')

        # contrastive loss
        loss = (- torch.log(pos / (pos + Ng) )).mean()

        return loss


# utils.py, the torchvision / cv2 transforms written out on tensors
def _u(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def _random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, h, w = img.shape
    ch, cw, top, left = h, w, 0, 0
    for _ in range(10):
        target, aspect = h * w * _u(g, *scale), math.exp(_u(g, math.log(ratio[0]), math.log(ratio[1])))
        tw, th = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < tw <= w and 0 < th <= h:
            ch, cw = th, tw
            top, left = int(torch.randint(0, h - ch + 1, (), generator=g)), int(torch.randint(0, w - cw + 1, (), generator=g))
            break
    crop = img[:, top:top + ch, left:left + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def _color_jitter(img, g, brightness, contrast, saturation, hue):
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            img = (img * _u(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif op == 1:
            m = _gray(img).mean()
            img = ((img - m) * _u(g, 1 - contrast, 1 + contrast) + m).clamp(0, 1)
        elif op == 2:
            img = ((img - _gray(img)) * _u(g, 1 - saturation, 1 + saturation) + _gray(img)).clamp(0, 1)
        else:
            th = 2 * math.pi * _u(g, -hue, hue)
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1.0, 0, 0], [0, math.cos(th), -math.sin(th)], [0, math.sin(th), math.cos(th)]])
            img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
    return img


class GaussianBlur(object):
    # Implements Gaussian blur as described in the SimCLR paper
    def __init__(self, kernel_size, g, min=0.1, max=2.0):
        self.min = min
        self.max = max
        # kernel size is set to be 10% of the image height/width
        self.kernel_size = kernel_size
        self.g = g

    def __call__(self, sample):
        # blur the image with a 50% chance
        prob = _u(self.g, 0, 1)

        if prob < 0.5:
            sigma = (self.max - self.min) * _u(self.g, 0, 1) + self.min
            r = self.kernel_size // 2  # (port) cv2.GaussianBlur(sample, (k, k), sigma)
            x = torch.exp(-torch.arange(-r, r + 1, dtype=torch.float32) ** 2 / (2 * sigma * sigma))
            x = x / x.sum()
            sample = F.pad(sample[None], (r, r, r, r), mode="reflect")
            sample = F.conv2d(sample, x.view(1, 1, -1, 1).repeat(3, 1, 1, 1), groups=3)
            sample = F.conv2d(sample, x.view(1, 1, 1, -1).repeat(3, 1, 1, 1), groups=3)[0]
        return sample


_MEAN, _STD = torch.tensor([0.4914, 0.4822, 0.4465])[:, None, None], torch.tensor([0.2023, 0.1994, 0.2010])[:, None, None]


def make_train_transform(g):
    blur = GaussianBlur(kernel_size=int(0.1 * 32), g=g)

    def train_transform(img):
        img = _random_resized_crop(img, SIZE, g)  # (port) RandomResizedCrop(32)
        if _u(g, 0, 1) < 0.5:
            img = img.flip(-1)
        if _u(g, 0, 1) < 0.8:
            img = _color_jitter(img, g, 0.4, 0.4, 0.4, 0.1)
        if _u(g, 0, 1) < 0.2:
            img = _gray(img).repeat(3, 1, 1)
        return (blur(img) - _MEAN) / _STD
    return train_transform


def test_transform(img):
    return (img - _MEAN) / _STD


class STL10Pair(torch.utils.data.Dataset):  # (port) the synthetic images instead of torchvision's STL10
    def __init__(self, seed, n, transform=None, bug=None):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
        self.data, self.labels = [], []
        for i in range(n):
            kind = i % 4
            bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, SIZE, SIZE, generator=g)
            color = torch.rand(3, 1, 1, generator=g)
            cy, cx = torch.randint(4, SIZE - 4, (2,), generator=g).tolist()
            mask = [((yy - cy).abs() < 3) & ((xx - cx).abs() < 3), (yy - cy) ** 2 + (xx - cx) ** 2 < 12,
                    (yy // 2) % 2 == 0, (xx // 2) % 2 == 0][kind]
            self.data.append(torch.where(mask, color, bg).clamp(0, 1))
            self.labels.append(kind)
        self.transform, self.bug = transform, bug

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], self.labels[index]

        if self.transform is not None:
            pos_1 = self.transform(img)
            if self.bug == "second_view_from_other_images":
                pos_2 = self.transform(self.data[(index + 1) % len(self.data)])
            else:
                pos_2 = self.transform(img)

        return pos_1, pos_2, target


def test(net, memory_data_loader, test_data_loader, k, c, temperature):
    net.eval()
    total_top1, total_num, feature_bank = 0.0, 0, []
    with torch.no_grad():
        # generate feature bank
        for data, _, target in memory_data_loader:
            feature, out = net(data)
            feature_bank.append(feature)
        # [D, N]
        feature_bank = torch.cat(feature_bank, dim=0).t().contiguous()
        # [N]
        feature_labels = torch.tensor(memory_data_loader.dataset.labels, device=feature_bank.device)
        # loop test data to predict the label by weighted knn search
        for data, _, target in test_data_loader:
            feature, out = net(data)

            total_num += data.size(0)
            # compute cos similarity between each feature vector and feature bank ---> [B, N]
            sim_matrix = torch.mm(feature, feature_bank)
            # [B, K]
            sim_weight, sim_indices = sim_matrix.topk(k=k, dim=-1)
            # [B, K]
            sim_labels = torch.gather(feature_labels.expand(data.size(0), -1), dim=-1, index=sim_indices)
            sim_weight = (sim_weight / temperature).exp()

            # counts for each class
            one_hot_label = torch.zeros(data.size(0) * k, c, device=sim_labels.device)
            # [B*K, C]
            one_hot_label = one_hot_label.scatter(dim=-1, index=sim_labels.view(-1, 1).long(), value=1.0)
            # weighted score ---> [B, C]
            pred_scores = torch.sum(one_hot_label.view(data.size(0), -1, c) * sim_weight.unsqueeze(dim=-1), dim=1)

            pred_labels = pred_scores.argsort(dim=-1, descending=True)
            total_top1 += torch.sum((pred_labels[:, :1] == target.unsqueeze(dim=-1)).any(dim=-1).float()).item()
    net.train()  # (port) train() calls net.train() at the start of each epoch
    return total_top1 / total_num * 100


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(feature_dim=128, temperature=0.5, tau_plus=0.1, k=10, batch_size=16, epochs=400,
                                 estimator='hard', beta=1.0, anneal=None)  # (port) k 200, batch_size 256
    feature_dim, temperature, tau_plus, k = args.feature_dim, args.temperature, args.tau_plus, args.k
    batch_size, epochs, estimator = args.batch_size, args.epochs,  args.estimator
    beta = args.beta

    # data prepare
    g = torch.Generator().manual_seed(seed)
    train_data = STL10Pair(seed, 64, transform=make_train_transform(g), bug=bug)
    train_loader = DataLoader(train_data, batch_size=batch_size, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    memory_data = STL10Pair(seed, 64, transform=test_transform)
    memory_loader = DataLoader(memory_data, batch_size=batch_size, shuffle=False, num_workers=0)
    test_data = STL10Pair(seed + 1, 32, transform=test_transform)
    test_loader = DataLoader(test_data, batch_size=batch_size, shuffle=False, num_workers=0)

    # model setup and optimizer config
    model = Model(feature_dim)
    optimizer = optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-6)
    c = 4  # (port) len(memory_data.classes)
    model.train()
    state = {"it": iter(train_loader)}

    def train_step():
        try:
            pos_1, pos_2, target = next(state["it"])
        except StopIteration:
            model.train()
            state["it"] = iter(train_loader)
            pos_1, pos_2, target = next(state["it"])
        feature_1, out_1 = model(pos_1)
        feature_2, out_2 = model(pos_2)

        loss = criterion(out_1, out_2, tau_plus, batch_size, beta, estimator, temperature, bug)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.item()

    def loss_fn(outputs, _target):
        _, out = outputs
        return criterion(out[:batch_size], out[batch_size:], tau_plus, batch_size, beta, estimator, temperature, bug)

    pos_1, pos_2, target = next(iter(DataLoader(train_data, batch_size=batch_size, shuffle=False)))
    return Program(name="hcl_hard_negatives", model=model, batch=(torch.cat([pos_1, pos_2]), target),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, loader=train_loader,
                   eval_fn=lambda m, _b=None: test(m, memory_loader, test_loader, k, c, temperature))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip in the importance weights: ``imp = exp(-beta * log(neg))`` up-weights the easiest negatives
    # instead of the hardest, so the estimator concentrates on the negatives that are already far away.
    Bug("hardness_weights_inverted", functools.partial(_build, bug="hardness_weights_inverted"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic pairing slip: ``STL10Pair.__getitem__`` draws the second view from the next image (index + 1), so each
    # "positive" pair is two different images.
    Bug("second_view_from_other_images", functools.partial(_build, bug="second_view_from_other_images"),
        "learning_ledger", ("TASK",)),
    # zero_grad moved between loss.backward() and optimizer.step() (classic): every step applies a zero gradient (only
    # the weight decay moves the weights).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
