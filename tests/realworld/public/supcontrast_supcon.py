# ruff: noqa: UP008, PLR0402, UP032
"""Supervised contrastive learning (SupCon): a ResNet encoder and an MLP head whose L2-normalized features of two
views are trained with SupConLoss (positives: every view of the same class), SGD with momentum and step decay.

Source: https://github.com/HobbitLong/SupContrast
Commit: 66a8fe53880d6a1084b2e4e0db0a019024d6d41a
Files: losses.py (SupConLoss), main_supcon.py (set_loader, set_model, train, main), networks/resnet_big.py
(BasicBlock, ResNet, resnet18, SupConResNet), util.py (TwoCropTransform, adjust_learning_rate, warmup_learning_rate,
set_optimizer)
License: BSD-2-Clause (Copyright (c) 2020, Yonglong Tian; full text in LICENSES/HobbitLong-SupContrast.txt)
Domain: supervised contrastive (two views, temperature)

Kept as written: ``SupConLoss`` whole (temperature 0.07, contrast_mode 'all', base_temperature 0.07, the label mask,
the self-contrast mask, the max-subtracted logits, the edge case of anchors without positives); ``SupConResNet``
(encoder, ``head='mlp'``: Linear/ReLU/Linear to feat_dim 128, ``F.normalize(dim=1)``); the CIFAR ResNet of
resnet_big.py (3x3 stem, no max-pool, BasicBlocks, global average pool); ``set_optimizer`` (SGD lr 0.05, momentum
0.9, weight_decay 1e-4); ``adjust_learning_rate`` (step decay 0.1 at epochs 700, 800, 900) and
``warmup_learning_rate`` (off: batch size <= 256, no ``--warm``); the train() loop body (``torch.cat`` of the two
crops, warm-up, forward, ``torch.split`` into f1/f2, stacked to ``[bsz, 2, 128]``, ``criterion(features, labels)``
for method 'SupCon', zero_grad, backward, step); the CIFAR-10 augmentation (RandomResizedCrop(32, scale=(0.2, 1)),
RandomHorizontalFlip, RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), RandomGrayscale(p=0.2), ToTensor,
Normalize with the CIFAR-10 mean/std) inside ``TwoCropTransform``.

Deviations from the original:
- CIFAR-10 (``datasets.CIFAR10(download=True)``) is replaced by 64 synthetic 32x32 RGB images made from the seed, 4
  classes (a coloured square, disk, horizontal or vertical stripes at a random place on a noisy background).
- torchvision is not installed: the transforms are written out below on tensors (bilinear resize; ColorJitter's hue
  shift as a rotation in YIQ space, torchvision shifts H in HSV), their random draws from a generator seeded from
  the seed.
- sizes for 2 CPU cores: model 'resnet50' -> 'resnet18' (in the same model_dict), the ResNet's channel widths 64..512
  -> 8..64 (a ``width`` argument, so dim_in 512 -> 64); batch_size 256 -> 16; num_workers 16 -> 0, pin_memory off.
- no GPU: the ``.cuda()`` moves, DataParallel and ``cudnn.benchmark`` are dropped; tensorboard logging,
  AverageMeter/printing and checkpoint saving are dropped.
- train()'s two lines from the features to ``[bsz, 2, f_dim]`` (``torch.split``, ``torch.cat`` of the unsqueezed
  views) are the function ``stack_views``, which ``loss_fn`` calls too.
- ``train_step`` runs one iteration of train()'s loop inside main()'s epoch loop (a generator over both loops, with
  ``adjust_learning_rate`` and ``model.train()`` at each epoch's start).
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

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_IMAGES, SIZE, N_CLASSES = 64, 32, 4


# ---------------------------------------------------------------- losses.py
class SupConLoss(nn.Module):
    """Supervised Contrastive Learning: https://arxiv.org/pdf/2004.11362.pdf.
    It also supports the unsupervised contrastive loss in SimCLR"""
    def __init__(self, temperature=0.07, contrast_mode='all',
                 base_temperature=0.07):
        super(SupConLoss, self).__init__()
        self.temperature = temperature
        self.contrast_mode = contrast_mode
        self.base_temperature = base_temperature

    def forward(self, features, labels=None, mask=None):
        device = (torch.device('cuda')
                  if features.is_cuda
                  else torch.device('cpu'))

        if len(features.shape) < 3:
            raise ValueError('`features` needs to be [bsz, n_views, ...],'
                             'at least 3 dimensions are required')
        if len(features.shape) > 3:
            features = features.view(features.shape[0], features.shape[1], -1)

        batch_size = features.shape[0]
        if labels is not None and mask is not None:
            raise ValueError('Cannot define both `labels` and `mask`')
        elif labels is None and mask is None:
            mask = torch.eye(batch_size, dtype=torch.float32).to(device)
        elif labels is not None:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError('Num of labels does not match num of features')
            mask = torch.eq(labels, labels.T).float().to(device)
        else:
            mask = mask.float().to(device)

        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        if self.contrast_mode == 'one':
            anchor_feature = features[:, 0]
            anchor_count = 1
        elif self.contrast_mode == 'all':
            anchor_feature = contrast_feature
            anchor_count = contrast_count
        else:
            raise ValueError('Unknown mode: {}'.format(self.contrast_mode))

        # compute logits
        anchor_dot_contrast = torch.div(
            torch.matmul(anchor_feature, contrast_feature.T),
            self.temperature)
        # for numerical stability
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()

        # tile mask
        mask = mask.repeat(anchor_count, contrast_count)
        # mask-out self-contrast cases
        logits_mask = torch.scatter(
            torch.ones_like(mask),
            1,
            torch.arange(batch_size * anchor_count).view(-1, 1).to(device),
            0
        )
        mask = mask * logits_mask

        # compute log_prob
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))

        # compute mean of log-likelihood over positive
        # modified to handle edge cases when there is no positive pair
        # for an anchor point.
        # Edge case e.g.:-
        # features of shape: [4,1,...]
        # labels:            [0,1,1,2]
        # loss before mean:  [nan, ..., ..., nan]
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs

        # loss
        loss = - (self.temperature / self.base_temperature) * mean_log_prob_pos
        loss = loss.view(anchor_count, batch_size).mean()

        return loss


# ---------------------------------------------------------------- networks/resnet_big.py
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, is_last=False):
        super(BasicBlock, self).__init__()
        self.is_last = is_last
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        preact = out
        out = F.relu(out)
        if self.is_last:
            return out, preact
        else:
            return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, in_channel=3, zero_init_residual=False, width=64):
        super(ResNet, self).__init__()
        self.in_planes = width

        self.conv1 = nn.Conv2d(in_channel, width, kernel_size=3, stride=1, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2 * width, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, num_blocks[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves
        # like an identity. This improves the model by 0.2~0.3% according to:
        # https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for i in range(num_blocks):
            stride = strides[i]
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x, layer=100):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = self.avgpool(out)
        out = torch.flatten(out, 1)
        return out


def resnet18(**kwargs):
    return ResNet(BasicBlock, [2, 2, 2, 2], width=8, **kwargs)


model_dict = {
    'resnet18': [resnet18, 64],
}


class SupConResNet(nn.Module):
    """backbone + projection head"""
    def __init__(self, name='resnet50', head='mlp', feat_dim=128):
        super(SupConResNet, self).__init__()
        model_fun, dim_in = model_dict[name]
        self.encoder = model_fun()
        if head == 'linear':
            self.head = nn.Linear(dim_in, feat_dim)
        elif head == 'mlp':
            self.head = nn.Sequential(
                nn.Linear(dim_in, dim_in),
                nn.ReLU(inplace=True),
                nn.Linear(dim_in, feat_dim)
            )
        else:
            raise NotImplementedError(
                'head not supported: {}'.format(head))

    def forward(self, x):
        feat = self.encoder(x)
        feat = F.normalize(self.head(feat), dim=1)
        return feat


# ---------------------------------------------------------------- util.py
class TwoCropTransform:
    """Create two crops of the same image"""
    def __init__(self, transform):
        self.transform = transform

    def __call__(self, x):
        return [self.transform(x), self.transform(x)]


def adjust_learning_rate(args, optimizer, epoch):
    lr = args.learning_rate
    if args.cosine:
        eta_min = lr * (args.lr_decay_rate ** 3)
        lr = eta_min + (lr - eta_min) * (
                1 + math.cos(math.pi * epoch / args.epochs)) / 2
    else:
        steps = np.sum(epoch > np.asarray(args.lr_decay_epochs))
        if steps > 0:
            lr = lr * (args.lr_decay_rate ** steps)

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def warmup_learning_rate(args, epoch, batch_id, total_batches, optimizer):
    if args.warm and epoch <= args.warm_epochs:
        p = (batch_id + (epoch - 1) * total_batches) / \
            (args.warm_epochs * total_batches)
        lr = args.warmup_from + p * (args.warmup_to - args.warmup_from)

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def set_optimizer(opt, model):
    optimizer = optim.SGD(model.parameters(),
                          lr=opt.learning_rate,
                          momentum=opt.momentum,
                          weight_decay=opt.weight_decay)
    return optimizer


# ---------------------------------------------------------------- torchvision transforms, written out on tensors
def _u(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def random_resized_crop(img, size, g, scale, ratio=(3 / 4, 4 / 3)):
    _, h, w = img.shape
    area = h * w
    for _ in range(10):
        target = area * _u(g, *scale)
        aspect = math.exp(_u(g, math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (), generator=g))
            left = int(torch.randint(0, w - cw + 1, (), generator=g))
            break
    else:
        ch, cw, top, left = h, w, 0, 0
    crop = img[:, top:top + ch, left:left + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def color_jitter(img, g, brightness, contrast, saturation, hue):
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            img = (img * _u(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif op == 1:
            img = ((img - _gray(img).mean()) * _u(g, 1 - contrast, 1 + contrast) + _gray(img).mean()).clamp(0, 1)
        elif op == 2:
            img = ((img - _gray(img)) * _u(g, 1 - saturation, 1 + saturation) + _gray(img)).clamp(0, 1)
        else:
            theta = 2 * math.pi * _u(g, -hue, hue)
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(theta), -math.sin(theta)],
                                [0.0, math.sin(theta), math.cos(theta)]])
            img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
    return img


def train_transform_for(size, mean, std, g):
    """RandomResizedCrop(size, scale=(0.2, 1.)), RandomHorizontalFlip(), RandomApply([ColorJitter(0.4, 0.4, 0.4,
    0.1)], p=0.8), RandomGrayscale(p=0.2), ToTensor(), Normalize(mean, std) on a [3, H, W] tensor in [0, 1]."""
    mean, std = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)

    def transform(img):
        img = random_resized_crop(img, size, g, scale=(0.2, 1.))
        if _u(g, 0, 1) < 0.5:
            img = img.flip(-1)
        if _u(g, 0, 1) < 0.8:
            img = color_jitter(img, g, 0.4, 0.4, 0.4, 0.1)
        if _u(g, 0, 1) < 0.2:
            img = _gray(img).repeat(3, 1, 1)
        return (img - mean) / std
    return transform


class SyntheticCIFAR(torch.utils.data.Dataset):
    """64 images of 4 classes (square, disk, horizontal stripes, vertical stripes) in random colours and places."""

    def __init__(self, seed, transform, bug=None):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
        self.data, self.targets, self.transform = [], [], transform
        for i in range(N_IMAGES):
            kind = i % N_CLASSES
            bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, SIZE, SIZE, generator=g)
            color = torch.rand(3, 1, 1, generator=g)
            cy, cx = torch.randint(8, SIZE - 8, (2,), generator=g).tolist()
            if kind == 0:
                mask = ((yy - cy).abs() < 6) & ((xx - cx).abs() < 6)
            elif kind == 1:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 < 49
            elif kind == 2:
                mask = (yy // 4) % 2 == 0
            else:
                mask = (xx // 4) % 2 == 0
            self.data.append(torch.where(mask, color, bg).clamp(0, 1))
            self.targets.append(kind)
        if bug == "labels_misaligned":
            # the label list is put in another order than the image list (e.g. images sorted by file name, labels
            # read in the annotation file's order): each image carries another image's class
            self.targets = [self.targets[j] for j in torch.randperm(N_IMAGES, generator=g).tolist()]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]


# ---------------------------------------------------------------- main_supcon.py
def set_loader(opt, seed):
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2023, 0.1994, 0.2010)
    train_transform = train_transform_for(opt.size, mean, std, torch.Generator().manual_seed(seed))
    train_dataset = SyntheticCIFAR(seed, transform=TwoCropTransform(train_transform), bug=opt.bug)

    train_sampler = None
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=opt.batch_size, shuffle=(train_sampler is None),
        num_workers=opt.num_workers, pin_memory=False, sampler=train_sampler,
        generator=torch.Generator().manual_seed(seed))

    return train_loader


def set_model(opt):
    model = SupConResNet(name=opt.model)
    criterion = SupConLoss(temperature=opt.temp)
    return model, criterion


def stack_views(features, bsz, bug=None):
    """train()'s lines from the model's features to the criterion's ``[bsz, n_views, f_dim]``."""
    if bug == "views_reshaped_not_split":
        # the [2 * bsz, f_dim] features (all first views, then all second views) reshaped straight to
        # [bsz, 2, f_dim]: rows 2i and 2i+1 become "the two views of sample i"
        return features.view(bsz, 2, -1)
    f1, f2 = torch.split(features, [bsz, bsz], dim=0)
    features = torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1)
    return features


def _build(seed, bug=None):
    torch.manual_seed(seed)
    opt = types.SimpleNamespace(print_freq=10, save_freq=50, batch_size=16, num_workers=0, epochs=1000,
                                learning_rate=0.05, lr_decay_epochs=[700, 800, 900], lr_decay_rate=0.1,
                                weight_decay=1e-4, momentum=0.9, model='resnet18', dataset='cifar10', size=32,
                                method='SupCon', temp=0.07, cosine=False, syncBN=False, warm=False, trial='0',
                                bug=bug)

    train_loader = set_loader(opt, seed)
    model, criterion = set_model(opt)
    optimizer = set_optimizer(opt, model)

    def loop():
        for epoch in range(1, opt.epochs + 1):
            adjust_learning_rate(opt, optimizer, epoch)

            # train for one epoch
            model.train()
            for idx, (images, labels) in enumerate(train_loader):
                images = torch.cat([images[0], images[1]], dim=0)
                bsz = labels.shape[0]

                # warm-up learning rate
                warmup_learning_rate(opt, epoch, idx, len(train_loader), optimizer)

                # compute loss
                features = model(images)
                features = stack_views(features, bsz, bug)
                if opt.method == 'SupCon':
                    loss = criterion(features, labels)
                elif opt.method == 'SimCLR':
                    loss = criterion(features)
                else:
                    raise ValueError('contrastive method not supported: {}'.
                                     format(opt.method))

                # SGD
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                yield loss

    steps = loop()
    views, labels = next(iter(torch.utils.data.DataLoader(
        SyntheticCIFAR(seed, TwoCropTransform(train_transform_for(opt.size, (0.4914, 0.4822, 0.4465),
                                                                  (0.2023, 0.1994, 0.2010),
                                                                  torch.Generator().manual_seed(seed + 1))), bug=bug),
        batch_size=opt.batch_size)))
    images = torch.cat([views[0], views[1]], dim=0)

    def loss_fn(features, labels):
        return criterion(stack_views(features, labels.shape[0], bug), labels)

    return Program(name="supcontrast_supcon", model=model, batch=(images, labels), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=lambda: next(steps), loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the two views stacked by a reshape of the view-major features instead of split + cat (classic): the positive
    # pairs and the labels' anchors are other images' views.
    Bug("views_reshaped_not_split", functools.partial(_build, bug="views_reshaped_not_split"), "learning_ledger",
        ("OBJECTIVE",)),
    # the labels are out of order with the images (classic): the class positives are random images.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
]
