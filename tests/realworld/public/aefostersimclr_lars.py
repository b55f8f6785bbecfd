# ruff: noqa: UP008, UP031, UP032, PLR0402
"""SimCLR on CIFAR-10 from ae-foster/pytorch-simclr: a CIFAR-stem ResNet-18 encoder, a ``LinearCritic`` (two-layer
projection with BatchNorm, cosine similarities over both views at temperature 0.5, self-similarities masked with
``-inf``, pseudo-targets pointing at the other view) under cross-entropy, SGD (momentum 0.9, weight decay 1e-6,
``lr = base_lr * batch_size / 256``) wrapped in torchlars' LARS (trust coefficient 1e-3), the 10-epoch linear ramp
into cosine annealing; evaluation by an L-BFGS linear classifier on frozen representations.

Source: https://github.com/ae-foster/pytorch-simclr
Commit: cd4744c8b826bc723ff426e956fb17038fbf6305
Files: ``simclr.py``, ``critic.py``, ``scheduler.py``, ``models/resnet.py``, ``configs.py``, ``augmentation.py``,
``dataset.py``, ``evaluate/lbfgs.py``, ``README.md`` (the CIFAR-10 command: ``--cosine-anneal --base-lr 1.5``)
License: MIT (Copyright (c) 2020 Adam Foster; full text in LICENSES/ae-foster-pytorch-simclr.txt). The LARS
wrapper is torchlars' (https://github.com/kakaobrain/torchlars, commit 3b3d7e9c7bd35a31b2c2fa6f213beb0bf6881892,
``torchlars/lars.py`` and the adaptive-lr rule of ``adaptive_lr.cc``), Apache-2.0 (LICENSES/kakaobrain-torchlars.txt).
Domain: vision, self-supervised contrastive learning (SimCLR with LARS)

Kept as written: ``LinearCritic`` (``project``, the three similarity matrices, the masked diagonals, the
concatenated ``2d x 2d`` scores and ``arange(2d)`` targets), ``ResNet`` with ``StemCIFAR`` and its initialization,
``CosineAnnealingWithLinearRampLR``, the optimizer set-up (one SGD over encoder and critic parameters, LARS around
it), ``train``'s loop body (zero_grad, both views through the encoder, critic, cross-entropy, backward, step) and
the scheduler stepped per epoch; ``encode_train_set`` / ``train_clf`` (L-BFGS on ``nn.Linear`` with the L2 term,
``reg_weight=1e-5``) / ``test`` for evaluation; ``CIFAR10Biaugment`` (two independent draws of the training
transform per image); LARS as in torchlars: weight decays hidden from the wrapped optimizer, each gradient given
``weight_decay * p`` and scaled by ``trust_coef * ||p|| / (||g|| + weight_decay * ||p|| + eps)`` (1 when either
norm is zero).

Deviations from the original:
- sizes for 2 CPU cores: ResNet-18's widths 64/128/256/512 -> 8/16/32/64 (the stem 64 -> 8, representation 512 ->
  64), images 32x32 -> 16x16, batch 512 -> 32 (so ``lr = 1.5 * 32 / 256``), ``num_epochs`` 1000 kept for the
  schedule (the epoch-0 ramp value 1/10 of the lr is what the self-check trains under); the L-BFGS classifier runs
  50 steps instead of 500; the critic's ``projection_dim`` 128 -> 32;
- LARS's trust coefficient 1e-3 -> 1e-1: with 1e-3 every update is a 1e-5 fraction of the weights and 30 steps
  cannot show the loss falling (the original runs 98 000 steps);
- data: CIFAR-10 is not here: synthetic 16x16 images made from ``seed`` (10 classes: a class colour and shape on a
  textured background), 320 training and 64 test images; the torchvision/PIL transforms are written out on tensors
  (RandomResizedCrop with bilinear resizing for BICUBIC, horizontal flip, ``ColourDistortion(s=0.5)``:
  colour jitter applied with p 0.8 and grayscale with p 0.2, Normalize with the CIFAR-10 mean/std); the loaders
  shuffle with a ``torch.Generator(seed)``;
- torchvision's ``BasicBlock`` and ``conv1x1`` are written out; ``torchlars``'s C++ ``compute_adaptive_lr`` is
  written in torch; tqdm, git hashes, checkpoints, DataParallel/CUDA are dropped;
- one ``train_step`` is one batch of ``train(epoch)`` (the scheduler stepped when an epoch ends); ``eval_fn`` is the
  ``test_freq`` block (encode, fit the classifier, test accuracy); the Program's model is the encoder ``net``, its
  batch both views of the first images concatenated and its ``loss_fn`` the critic's cross-entropy on the two
  halves;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import _LRScheduler
from torch.optim.optimizer import Optimizer

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16


# torchvision.models.resnet's BasicBlock and conv1x1 (written out: torchvision is not installed here)
def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


# models/resnet.py
class StemCIFAR(nn.Module):
    def __init__(self):
        super(StemCIFAR, self).__init__()
        self.in_planes = 8  # (port) 64
        self.conv1 = nn.Conv2d(3, self.in_planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(self.in_planes)

    def forward(self, inputs):
        return F.relu(self.bn1(self.conv1(inputs)))


class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=None, zero_init_residual=False,
                 groups=1, width_per_group=64, replace_stride_with_dilation=None,
                 norm_layer=None, stem=StemCIFAR):
        super(ResNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer

        self.inplanes = 8  # (port) 64
        self.dilation = 1
        if replace_stride_with_dilation is None:
            # each element in the tuple indicates if we should replace
            # the 2x2 stride with a dilated convolution instead
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None "
                             "or a 3-element tuple, got {}".format(replace_stride_with_dilation))
        self.groups = groups
        self.base_width = width_per_group
        self.stem = stem()
        self.layer1 = self._make_layer(block, 8, layers[0])  # (port) 64
        self.layer2 = self._make_layer(block, 16, layers[1], stride=2,  # (port) 128
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 32, layers[2], stride=2,  # (port) 256
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 64, layers[3], stride=2,  # (port) 512
                                       dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        if num_classes is not None:
            self.fc = nn.Linear(64 * block.expansion, num_classes)
        else:
            self.fc = None

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves like an identity.
        # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

        self.representation_dim = 64 * block.expansion  # (port) 512

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample, self.groups,
                            self.base_width, previous_dilation, norm_layer))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width, dilation=self.dilation,
                                norm_layer=norm_layer))

        return nn.Sequential(*layers)

    def _forward_impl(self, x):
        # See note [TorchScript super()]
        x = self.stem(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        if self.fc:
            x = self.fc(x)

        return x

    def forward(self, x):
        return self._forward_impl(x)


def ResNet18(**kwargs):
    return ResNet(BasicBlock, [2,2,2,2], **kwargs)


# critic.py
class LinearCritic(nn.Module):

    def __init__(self, latent_dim, temperature=1., bug=None):
        super(LinearCritic, self).__init__()
        self.bug = bug
        self.temperature = temperature
        self.projection_dim = 32  # (port) 128
        self.w1 = nn.Linear(latent_dim, latent_dim, bias=False)
        self.bn1 = nn.BatchNorm1d(latent_dim)
        self.relu = nn.ReLU()
        self.w2 = nn.Linear(latent_dim, self.projection_dim, bias=False)
        self.bn2 = nn.BatchNorm1d(self.projection_dim, affine=False)
        self.cossim = nn.CosineSimilarity(dim=-1)

    def project(self, h):
        return self.bn2(self.w2(self.relu(self.bn1(self.w1(h)))))

    def forward(self, h1, h2):
        z1, z2 = self.project(h1), self.project(h2)
        sim11 = self.cossim(z1.unsqueeze(-2), z1.unsqueeze(-3)) / self.temperature
        sim22 = self.cossim(z2.unsqueeze(-2), z2.unsqueeze(-3)) / self.temperature
        sim12 = self.cossim(z1.unsqueeze(-2), z2.unsqueeze(-3)) / self.temperature
        d = sim12.shape[-1]
        if self.bug != "self_similarity_not_masked":
            sim11[..., range(d), range(d)] = float('-inf')
            sim22[..., range(d), range(d)] = float('-inf')
        raw_scores1 = torch.cat([sim12, sim11], dim=-1)
        raw_scores2 = torch.cat([sim22, sim12.transpose(-1, -2)], dim=-1)
        raw_scores = torch.cat([raw_scores1, raw_scores2], dim=-2)
        targets = torch.arange(2 * d, dtype=torch.long, device=raw_scores.device)
        return raw_scores, targets


# scheduler.py
class CosineAnnealingWithLinearRampLR(_LRScheduler):

    def __init__(self, optimizer, T_max, eta_min=0, last_epoch=-1, ramp_len=10):
        self.T_max = T_max
        self.eta_min = eta_min
        self.ramp_len = ramp_len
        super(CosineAnnealingWithLinearRampLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        return self._get_closed_form_lr()

    def _get_closed_form_lr(self):
        cosine_lr = [self.eta_min + (base_lr - self.eta_min) *
                     (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                     for base_lr in self.base_lrs]
        linear_lr = [base_lr * (1 + self.last_epoch) / self.ramp_len for base_lr in self.base_lrs]
        return [min(x, y) for x, y in zip(cosine_lr, linear_lr)]


# torchlars/lars.py (adaptive_lr.cc's rule written in torch)
def compute_adaptive_lr(param_norm, grad_norm, weight_decay, eps, trust_coef, out):
    if param_norm > 0 and grad_norm > 0:
        divisor = grad_norm + weight_decay * param_norm + eps
        return out.fill_(float(param_norm / divisor * trust_coef))
    return out.fill_(1.0)


class LARS(Optimizer):
    def __init__(self, optimizer, eps=1e-8, trust_coef=0.001):
        if eps < 0.0:
            raise ValueError('invalid epsilon value: , %f' % eps)
        if trust_coef < 0.0:
            raise ValueError("invalid trust coefficient: %f" % trust_coef)

        self.optim = optimizer
        self.eps = eps
        self.trust_coef = trust_coef
        self.adaptive_lr = torch.ones([])

    def __repr__(self):
        return '%s(%r)' % (self.__class__.__name__, self.optim)

    @property
    def param_groups(self):
        return self.optim.param_groups

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)

    def zero_grad(self):
        self.optim.zero_grad()

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)

    @contextmanager
    def hide_weight_decays(self):
        weight_decays = []

        for group in self.optim.param_groups:
            if 'weight_decay' in group:
                weight_decays.append(group['weight_decay'])
                group['weight_decay'] = 0
            else:
                weight_decays.append(None)

        try:
            yield weight_decays
        finally:
            for group, weight_decay in zip(self.optim.param_groups, weight_decays):
                if weight_decay is None:
                    continue
                group['weight_decay'] = weight_decay

    def apply_adaptive_lrs(self, weight_decays):
        with torch.no_grad():
            for group, weight_decay in zip(self.optim.param_groups, weight_decays):
                if weight_decay is None:
                    weight_decay = 0.0
                for p in group['params']:
                    if p.grad is None:
                        continue

                    param_norm = p.norm()
                    grad_norm = p.grad.norm()

                    param_norm_spec = (param_norm.is_cuda, param_norm.type())
                    adaptive_lr_spec = (self.adaptive_lr.is_cuda, self.adaptive_lr.type())

                    if param_norm_spec != adaptive_lr_spec:
                        self.adaptive_lr = torch.ones_like(param_norm)

                    # calculate adaptive lr & weight decay
                    adaptive_lr = compute_adaptive_lr(
                        param_norm,
                        grad_norm,
                        weight_decay,
                        self.eps,
                        self.trust_coef,
                        self.adaptive_lr)

                    p.grad.add_(p.data, alpha=weight_decay)
                    p.grad.mul_(adaptive_lr)

    def step(self, *args, **kwargs):
        with self.hide_weight_decays() as weight_decays:
            self.apply_adaptive_lrs(weight_decays)
            return self.optim.step(*args, **kwargs)


# (port) configs.py / augmentation.py / dataset.py on tensors
CIFAR10_MEAN_STD = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))


def random_resized_crop(img, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
    _, height, width = img.shape
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * float(torch.empty(1).uniform_(scale[0], scale[1]))
        aspect_ratio = math.exp(float(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])))
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)))
            j = int(torch.randint(0, width - w + 1, size=(1,)))
            break
    else:
        h, w, i, j = height, width, 0, 0
    crop = img[:, i:i + h, j:j + w]
    return F.interpolate(crop[None], size=(size, size), mode='bilinear', align_corners=False)[0]


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None].expand(3, -1, -1)


def color_jitter(img, b, c, s, h):
    for t in torch.randperm(4).tolist():
        if t == 0:
            img = (img * float(torch.empty(1).uniform_(1 - b, 1 + b))).clamp(0, 1)
        elif t == 1:
            mean = _gray(img).mean()
            img = ((img - mean) * float(torch.empty(1).uniform_(1 - c, 1 + c)) + mean).clamp(0, 1)
        elif t == 2:
            g = _gray(img)
            img = ((img - g) * float(torch.empty(1).uniform_(1 - s, 1 + s)) + g).clamp(0, 1)
        else:
            # hue: rotate the chroma plane around the grey axis by up to h turns
            theta = 2 * math.pi * float(torch.empty(1).uniform_(-h, h))
            cos_t, sin_t = math.cos(theta), math.sin(theta)
            k = torch.ones(3) / math.sqrt(3)
            kx = torch.tensor([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
            rot = cos_t * torch.eye(3) + sin_t * kx + (1 - cos_t) * torch.outer(k, k)
            img = torch.einsum('ij,jhw->ihw', rot, img).clamp(0, 1)
    return img


def ColourDistortion(img, s=1.0):
    # s is the strength of color distortion.
    if float(torch.rand(1)) < 0.8:  # RandomApply([ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)], p=0.8)
        img = color_jitter(img, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
    if float(torch.rand(1)) < 0.2:  # RandomGrayscale(p=0.2)
        img = _gray(img).clone()
    return img


def normalize(img):
    mean, std = CIFAR10_MEAN_STD
    return (img - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


def transform_train(img):
    img = random_resized_crop(img, IMG)
    if float(torch.rand(1)) < 0.5:
        img = img.flip(-1)
    img = ColourDistortion(img, s=0.5)
    return normalize(img)


def transform_test(img):
    return normalize(img)


class SyntheticCifar(torch.utils.data.Dataset):
    """Ten classes of 16x16 RGB images: a class colour and shape (disc, square, bar, cross) on a textured
    background."""

    def __init__(self, seed, n, transform):
        gen = torch.Generator().manual_seed(seed)
        self.transform = transform
        self.targets = torch.arange(n) % 10
        yy, xx = torch.meshgrid(torch.arange(IMG), torch.arange(IMG), indexing='ij')
        palette = torch.rand(10, 3, generator=torch.Generator().manual_seed(777))
        imgs = []
        for c in self.targets.tolist():
            bg = 0.3 * torch.rand(3, 1, 1, generator=gen) + 0.1 * torch.rand(3, IMG, IMG, generator=gen)
            cy, cx = torch.randint(4, IMG - 4, (2,), generator=gen).tolist()
            shape = c % 4
            if shape == 0:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= 12
            elif shape == 1:
                mask = ((yy - cy).abs() <= 3) & ((xx - cx).abs() <= 3)
            elif shape == 2:
                mask = (yy - cy).abs() <= 1
            else:
                mask = ((yy - cy).abs() <= 1) | ((xx - cx).abs() <= 1)
            img = torch.where(mask, palette[c][:, None, None].expand(3, IMG, IMG), bg)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)

    def __getitem__(self, index):
        return self.transform(self.data[index]), self.targets[index]

    def __len__(self):
        return len(self.targets)


class CIFAR10Biaugment(SyntheticCifar):
    bug = None

    def __getitem__(self, index):
        img, target = self.data[index], self.targets[index]

        if self.transform is not None:
            img = self.transform(img)
            if self.bug == "views_identical":
                img2 = img
            else:
                img2 = self.transform(self.data[index])
        else:
            img2 = img

        return (img, img2), target, index


# evaluate/lbfgs.py
def encode_train_set(clftrainloader, device, net):
    net.eval()

    store = []
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(clftrainloader):
            inputs, targets = inputs.to(device), targets.to(device)
            representation = net(inputs)
            store.append((representation, targets))

    X, y = zip(*store)
    X, y = torch.cat(X, dim=0), torch.cat(y, dim=0)
    return X, y


def train_clf(X, y, representation_dim, num_classes, device, reg_weight=1e-3):
    criterion = nn.CrossEntropyLoss()
    n_lbfgs_steps = 50  # (port) 500

    # Should be reset after each epoch for a completely independent evaluation
    clf = nn.Linear(representation_dim, num_classes).to(device)
    clf_optimizer = optim.LBFGS(clf.parameters())
    clf.train()

    for _ in range(n_lbfgs_steps):
        def closure():
            clf_optimizer.zero_grad()
            raw_scores = clf(X)
            loss = criterion(raw_scores, y)
            loss += reg_weight * clf.weight.pow(2).sum()
            loss.backward()
            return loss

        clf_optimizer.step(closure)

    return clf


def test(testloader, device, net, clf):
    criterion = nn.CrossEntropyLoss()
    net.eval()
    clf.eval()
    test_clf_loss = 0
    correct = 0
    total = 0
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(testloader):
            inputs, targets = inputs.to(device), targets.to(device)
            representation = net(inputs)
            raw_scores = clf(representation)
            clf_loss = criterion(raw_scores, targets)

            test_clf_loss += clf_loss.item()
            _, predicted = raw_scores.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()

    acc = 100. * correct / total
    return acc


class Args:
    base_lr = 1.5  # README's CIFAR-10 command
    momentum = 0.9
    temperature = 0.5
    batch_size = 32  # (port) 512
    num_epochs = 1000
    cosine_anneal = True


def _build(seed, bug=None):
    args = Args()
    args.lr = args.base_lr * (args.batch_size / 256)
    torch.manual_seed(seed)
    device = 'cpu'

    trainset = CIFAR10Biaugment(seed, 320, transform_train)
    trainset.bug = bug
    testset = SyntheticCifar(seed + 1000, 64, transform_test)
    clftrainset = SyntheticCifar(seed, 320, transform_test)
    num_classes = 10
    stem = StemCIFAR

    trainloader = torch.utils.data.DataLoader(trainset, batch_size=args.batch_size, shuffle=True, num_workers=0,
                                              generator=torch.Generator().manual_seed(seed))
    testloader = torch.utils.data.DataLoader(testset, batch_size=1000, shuffle=False, num_workers=0)
    clftrainloader = torch.utils.data.DataLoader(clftrainset, batch_size=1000, shuffle=False, num_workers=0)

    net = ResNet18(stem=stem)
    net = net.to(device)

    critic = LinearCritic(net.representation_dim, temperature=args.temperature, bug=bug).to(device)

    criterion = nn.CrossEntropyLoss()
    base_optimizer = optim.SGD(list(net.parameters()) + list(critic.parameters()), lr=args.lr, weight_decay=1e-6,
                               momentum=args.momentum)
    if args.cosine_anneal:
        scheduler = CosineAnnealingWithLinearRampLR(base_optimizer, args.num_epochs)
    encoder_optimizer = LARS(base_optimizer, trust_coef=1e-1)  # (port) 1e-3

    state = {"it": None, "epoch": 0}

    def next_batch():
        if state["it"] is None:
            net.train()
            critic.train()
            state["it"] = iter(trainloader)
        try:
            return next(state["it"])
        except StopIteration:
            if args.cosine_anneal:
                scheduler.step()
            state["epoch"] += 1
            net.train()
            critic.train()
            state["it"] = iter(trainloader)
            return next(state["it"])

    def train_step():
        inputs, _, _ = next_batch()
        x1, x2 = inputs
        x1, x2 = x1.to(device), x2.to(device)
        if bug != "zero_grad_dropped":
            encoder_optimizer.zero_grad()
        representation1, representation2 = net(x1), net(x2)
        raw_scores, pseudotargets = critic(representation1, representation2)
        loss = criterion(raw_scores, pseudotargets)
        loss.backward()
        encoder_optimizer.step()
        return loss.detach()

    def eval_fn(m, batch):
        X, y = encode_train_set(clftrainloader, device, net)
        clf = train_clf(X, y, net.representation_dim, num_classes, device, reg_weight=1e-5)
        acc = test(testloader, device, net, clf)
        net.train()
        return acc

    def loss_fn(representations, pseudotargets):
        n = representations.shape[0] // 2
        raw_scores, targets = critic(representations[:n], representations[n:])
        return criterion(raw_scores, targets)

    first = [trainset[i] for i in range(args.batch_size)]
    x1 = torch.stack([f[0][0] for f in first])
    x2 = torch.stack([f[0][1] for f in first])
    batch = (torch.cat([x1, x2]), torch.arange(2 * args.batch_size))
    torch.manual_seed(seed + 1)

    return Program(name="aefostersimclr_lars", model=net, batch=batch, loss_fn=loss_fn, optimizer=base_optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # both views from one draw of the transform (``img2 = img``): the positive pair is the same image and the
    # contrastive task is solved without learning any invariance (classic).
    Bug("views_identical", functools.partial(_build, bug="views_identical"), "learning_ledger", ("TASK",)),
    # the self-similarities left on the diagonals of sim11 / sim22: each row's largest "negative" is the sample
    # itself (classic InfoNCE slip).
    Bug("self_similarity_not_masked", functools.partial(_build, bug="self_similarity_not_masked"),
        "learning_ledger", ("OBJECTIVE",)),
    # encoder_optimizer.zero_grad() left out of train(): gradients accumulate across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
