# ruff: noqa: UP008, SIM102, RUF059, UP004, UP032, PLR1730, RUF046
"""Person re-identification "Bag of Tricks" strong baseline (michuanhaohao/reid-strong-baseline), trained with the
``softmax_triplet_with_center`` configuration: a ResNet backbone with last stride 1, global average pooling and the
BNNeck (a BatchNorm1d whose bias is frozen, then a bias-free classifier), the label-smoothed cross-entropy on the
classifier's scores plus the batch-hard triplet loss (margin 0.3) and the center loss (weight 0.0005) on the pooled
features; Adam with per-parameter groups (base lr 3.5e-4, weight decay 5e-4), the centers on their own SGD (lr 0.5)
whose gradients are rescaled by ``1 / CENTER_LOSS_WEIGHT`` before the step, ``WarmupMultiStepLR`` stepped when an
epoch starts, and identity-balanced batches (``RandomIdentitySampler``: P identities x K instances).

Source: https://github.com/michuanhaohao/reid-strong-baseline
Commit: 3da7e6f03164a92e696cb6da059b1cd771b0346d
Files: tools/train.py, engine/trainer.py (``create_supervised_trainer_with_center``, ``do_train_with_center``),
modeling/baseline.py, modeling/backbones/resnet.py, layers/__init__.py (``make_loss_with_center``),
layers/triplet_loss.py, layers/center_loss.py, solver/build.py, solver/lr_scheduler.py,
data/samplers/triplet_sampler.py, data/collate_batch.py, data/datasets/dataset_loader.py, data/transforms/,
config/defaults.py, configs/softmax_triplet_with_center.yml
License: MIT (Copyright (c) 2019 HaoLuo; full text in LICENSES/michuanhaohao-reid-strong-baseline.txt)
Domain: metric learning, person re-identification (ID loss + batch-hard triplet + center loss, BNNeck)

Kept as written: ``ResNet`` with ``BasicBlock`` (the conv1/bn1/maxpool stem without its ReLU, as written,
``last_stride``), ``Baseline`` (``gap``, the ``bnneck`` branch, ``weights_init_kaiming``/``weights_init_classifier``,
``(cls_score, global_feat)`` in training, the after-BN feature at test), ``euclidean_dist``,
``hard_example_mining``, ``TripletLoss``, ``CrossEntropyLabelSmooth`` (epsilon 0.1), ``CenterLoss``,
``make_loss_with_center``'s ``triplet_center`` + label-smooth sum, ``make_optimizer_with_center``, ``WarmupMultiStepLR``
(steps (40, 70), gamma 0.1, warmup factor 0.01 over 10 epochs, linear), the ``_update`` loop body
(``model.train()``, both ``zero_grad``, forward, loss, backward, ``optimizer.step()``, the centers' gradient
rescaled by ``1 / center_loss_weight``, ``optimizer_center.step()``), ``RandomIdentitySampler``, ``train_collate_fn``,
``ImageDataset``, ``RandomErasing`` and the configuration's hyper-parameters (margin 0.3, label smoothing on, center
lr 0.5 and weight 0.0005, bias lr factor 1, weight decay 5e-4 for weights and biases, flip 0.5, erasing 0.5).

Deviations from the original:
- sizes: ``MODEL.NAME`` 'resnet50' -> 'resnet18' (one of the repository's own choices: ``BasicBlock``, [2, 2, 2, 2],
  ``in_planes`` 512), with every width divided by 4 (64/128/256/512 -> 16/32/64/128, so ``in_planes`` and the center
  loss's ``feat_dim`` are 128); input 256x128 -> 64x32 (``Pad`` 10 -> 3); 751 Market-1501 identities -> 16;
  batch 64 (16 ids x 4 instances) -> 16 (4 ids x 4 instances);
- the backbone is not loaded from ImageNet weights (no download here): ``PRETRAIN_CHOICE`` 'imagenet''s
  ``load_param`` is skipped and the backbone keeps PyTorch's default initialization, the rest as written;
- data: Market-1501 is replaced by 128 synthetic 64x32 "pedestrians" made from ``seed`` (8 per identity; an identity
  is a fixed set of head/torso/legs colours and a torso stripe, each image shifted, brightness-jittered and noised,
  with a random camera id 0-5); torchvision's transforms are written out in torch (flip, pad + random crop,
  ``Normalize`` with the ImageNet mean/std, then ``RandomErasing`` as written); the images are generated at the
  training size, so ``Resize`` is the identity;
- the sampler draws from a ``random.Random(seed)`` / ``numpy.random.RandomState(seed)`` instead of the global
  generators; ``.cuda()`` and ``use_gpu`` are off (``CrossEntropyLabelSmooth(use_gpu=False)``,
  ``CenterLoss(use_gpu=False)``); the removed positional ``addmm_(1, -2, x, y.t())`` overload is written with
  keywords (``addmm_(x, y.t(), beta=1, alpha=-2)``), the same computation;
- ignite's ``Engine`` is replaced by its handlers' effect: ``scheduler.step()`` at each epoch's start (the
  sampler's length per epoch), then the ``_update`` body per batch; one ``train_step`` is one ``_update`` and
  returns ``loss.item()``; logging, checkpoints, the timer and the R1/mAP evaluator are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys
import types
from bisect import bisect_right
from collections import defaultdict

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- configs/softmax_triplet_with_center.yml over config/defaults.py (sizes shrunk) -------------------------------

CFG = types.SimpleNamespace(
    MODEL=types.SimpleNamespace(NAME="resnet18", LAST_STRIDE=1, NECK="bnneck", METRIC_LOSS_TYPE="triplet_center",
                                IF_LABELSMOOTH="on", IF_WITH_CENTER="yes"),
    INPUT=types.SimpleNamespace(SIZE_TRAIN=[64, 32], PROB=0.5, RE_PROB=0.5, PADDING=3,
                                PIXEL_MEAN=[0.485, 0.456, 0.406], PIXEL_STD=[0.229, 0.224, 0.225]),
    DATALOADER=types.SimpleNamespace(SAMPLER="softmax_triplet", NUM_INSTANCE=4),
    SOLVER=types.SimpleNamespace(OPTIMIZER_NAME="Adam", BASE_LR=0.00035, MARGIN=0.3, CENTER_LR=0.5,
                                 CENTER_LOSS_WEIGHT=0.0005, BIAS_LR_FACTOR=1, WEIGHT_DECAY=0.0005,
                                 WEIGHT_DECAY_BIAS=0.0005, IMS_PER_BATCH=16, STEPS=[40, 70], GAMMA=0.1,
                                 WARMUP_FACTOR=0.01, WARMUP_ITERS=10, WARMUP_METHOD="linear", MOMENTUM=0.9),
    TEST=types.SimpleNamespace(NECK_FEAT="after"),
)
WIDTH = 16  # ResNet's 64 as written; every stage's width follows it (/4)

# ---- modeling/backbones/resnet.py ---------------------------------------------------------------------------------


def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class ResNet(nn.Module):
    def __init__(self, last_stride=2, block=BasicBlock, layers=[2, 2, 2, 2]):  # noqa: B006
        self.inplanes = WIDTH
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTH, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        # self.relu = nn.ReLU(inplace=True)   # add missed relu
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, WIDTH, layers[0])
        self.layer2 = self._make_layer(block, WIDTH * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, WIDTH * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(
            block, WIDTH * 8, layers[3], stride=last_stride)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        # x = self.relu(x)    # add missed relu
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        return x


# ---- modeling/baseline.py -----------------------------------------------------------------------------------------


def weights_init_kaiming(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        nn.init.kaiming_normal_(m.weight, a=0, mode='fan_out')
        nn.init.constant_(m.bias, 0.0)
    elif classname.find('Conv') != -1:
        nn.init.kaiming_normal_(m.weight, a=0, mode='fan_in')
        if m.bias is not None:
            nn.init.constant_(m.bias, 0.0)
    elif classname.find('BatchNorm') != -1:
        if m.affine:
            nn.init.constant_(m.weight, 1.0)
            nn.init.constant_(m.bias, 0.0)


def weights_init_classifier(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        nn.init.normal_(m.weight, std=0.001)
        if m.bias:
            nn.init.constant_(m.bias, 0.0)


class Baseline(nn.Module):
    in_planes = 2048

    def __init__(self, num_classes, last_stride, model_path, neck, neck_feat, model_name, pretrain_choice):
        super(Baseline, self).__init__()
        if model_name == 'resnet18':
            self.in_planes = WIDTH * 8  # 512 as written
            self.base = ResNet(last_stride=last_stride,
                               block=BasicBlock,
                               layers=[2, 2, 2, 2])

        # pretrain_choice == 'imagenet': self.base.load_param(model_path) -- no weights here (see the docstring)

        self.gap = nn.AdaptiveAvgPool2d(1)
        # self.gap = nn.AdaptiveMaxPool2d(1)
        self.num_classes = num_classes
        self.neck = neck
        self.neck_feat = neck_feat

        if self.neck == 'no':
            self.classifier = nn.Linear(self.in_planes, self.num_classes)
        elif self.neck == 'bnneck':
            self.bottleneck = nn.BatchNorm1d(self.in_planes)
            self.bottleneck.bias.requires_grad_(False)  # no shift
            self.classifier = nn.Linear(self.in_planes, self.num_classes, bias=False)

            self.bottleneck.apply(weights_init_kaiming)
            self.classifier.apply(weights_init_classifier)

    def forward(self, x):

        global_feat = self.gap(self.base(x))  # (b, 2048, 1, 1)
        global_feat = global_feat.view(global_feat.shape[0], -1)  # flatten to (bs, 2048)

        if self.neck == 'no':
            feat = global_feat
        elif self.neck == 'bnneck':
            feat = self.bottleneck(global_feat)  # normalize for angular softmax

        if self.training:
            cls_score = self.classifier(feat)
            return cls_score, global_feat  # global feature for triplet loss
        else:
            if self.neck_feat == 'after':
                # print("Test with feature after BN")
                return feat
            else:
                # print("Test with feature before BN")
                return global_feat


# ---- layers/triplet_loss.py ---------------------------------------------------------------------------------------


def euclidean_dist(x, y):
    """
    Args:
      x: pytorch Variable, with shape [m, d]
      y: pytorch Variable, with shape [n, d]
    Returns:
      dist: pytorch Variable, with shape [m, n]
    """
    m, n = x.size(0), y.size(0)
    xx = torch.pow(x, 2).sum(1, keepdim=True).expand(m, n)
    yy = torch.pow(y, 2).sum(1, keepdim=True).expand(n, m).t()
    dist = xx + yy
    dist.addmm_(x, y.t(), beta=1, alpha=-2)
    dist = dist.clamp(min=1e-12).sqrt()  # for numerical stability
    return dist


def hard_example_mining(dist_mat, labels, return_inds=False, bug=None):
    """For each anchor, find the hardest positive and negative sample.
    NOTE: Only consider the case in which all labels have same num of samples,
      thus we can cope with all anchors in parallel.
    """

    assert len(dist_mat.size()) == 2
    assert dist_mat.size(0) == dist_mat.size(1)
    N = dist_mat.size(0)

    # shape [N, N]
    is_pos = labels.expand(N, N).eq(labels.expand(N, N).t())
    is_neg = labels.expand(N, N).ne(labels.expand(N, N).t())

    if bug == "mining_easiest_examples":
        # min over the positives and max over the negatives: the easiest pair of each anchor
        dist_ap, relative_p_inds = torch.min(
            dist_mat[is_pos].contiguous().view(N, -1), 1, keepdim=True)
        dist_an, relative_n_inds = torch.max(
            dist_mat[is_neg].contiguous().view(N, -1), 1, keepdim=True)
    else:
        # `dist_ap` means distance(anchor, positive)
        # both `dist_ap` and `relative_p_inds` with shape [N, 1]
        dist_ap, relative_p_inds = torch.max(
            dist_mat[is_pos].contiguous().view(N, -1), 1, keepdim=True)
        # `dist_an` means distance(anchor, negative)
        # both `dist_an` and `relative_n_inds` with shape [N, 1]
        dist_an, relative_n_inds = torch.min(
            dist_mat[is_neg].contiguous().view(N, -1), 1, keepdim=True)
    # shape [N]
    dist_ap = dist_ap.squeeze(1)
    dist_an = dist_an.squeeze(1)

    return dist_ap, dist_an


class TripletLoss(object):
    """Modified from Tong Xiao's open-reid (https://github.com/Cysu/open-reid).
    Related Triplet Loss theory can be found in paper 'In Defense of the Triplet
    Loss for Person Re-Identification'."""

    def __init__(self, margin=None, bug=None):
        self.margin = margin
        self.bug = bug
        if margin is not None:
            self.ranking_loss = nn.MarginRankingLoss(margin=margin)
        else:
            self.ranking_loss = nn.SoftMarginLoss()

    def __call__(self, global_feat, labels, normalize_feature=False):
        dist_mat = euclidean_dist(global_feat, global_feat)
        dist_ap, dist_an = hard_example_mining(
            dist_mat, labels, bug=self.bug)
        y = dist_an.new().resize_as_(dist_an).fill_(1)
        if self.margin is not None:
            loss = self.ranking_loss(dist_an, dist_ap, y)
        else:
            loss = self.ranking_loss(dist_an - dist_ap, y)
        return loss, dist_ap, dist_an


class CrossEntropyLabelSmooth(nn.Module):
    """Cross entropy loss with label smoothing regularizer.

    Equation: y = (1 - epsilon) * y + epsilon / K.
    """
    def __init__(self, num_classes, epsilon=0.1, use_gpu=True, bug=None):
        super(CrossEntropyLabelSmooth, self).__init__()
        self.num_classes = num_classes
        self.epsilon = epsilon
        self.use_gpu = use_gpu
        if bug == "log_softmax_over_batch":
            # the softmax's dim slipped to the batch axis: each class normalized over the images
            self.logsoftmax = nn.LogSoftmax(dim=0)
        else:
            self.logsoftmax = nn.LogSoftmax(dim=1)

    def forward(self, inputs, targets):
        log_probs = self.logsoftmax(inputs)
        targets = torch.zeros(log_probs.size()).scatter_(1, targets.unsqueeze(1).data.cpu(), 1)
        if self.use_gpu: targets = targets.cuda()
        targets = (1 - self.epsilon) * targets + self.epsilon / self.num_classes
        loss = (- targets * log_probs).mean(0).sum()
        return loss


# ---- layers/center_loss.py ----------------------------------------------------------------------------------------


class CenterLoss(nn.Module):
    """Center loss.

    Reference:
    Wen et al. A Discriminative Feature Learning Approach for Deep Face Recognition. ECCV 2016.
    """

    def __init__(self, num_classes=751, feat_dim=2048, use_gpu=True):
        super(CenterLoss, self).__init__()
        self.num_classes = num_classes
        self.feat_dim = feat_dim
        self.use_gpu = use_gpu

        self.centers = nn.Parameter(torch.randn(self.num_classes, self.feat_dim))

    def forward(self, x, labels):
        assert x.size(0) == labels.size(0), "features.size(0) is not equal to labels.size(0)"

        batch_size = x.size(0)
        distmat = torch.pow(x, 2).sum(dim=1, keepdim=True).expand(batch_size, self.num_classes) + \
                  torch.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(self.num_classes, batch_size).t()
        distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)

        classes = torch.arange(self.num_classes).long()
        labels = labels.unsqueeze(1).expand(batch_size, self.num_classes)
        mask = labels.eq(classes.expand(batch_size, self.num_classes))

        dist = distmat * mask.float()
        loss = dist.clamp(min=1e-12, max=1e+12).sum() / batch_size
        return loss


# ---- layers/__init__.py (make_loss_with_center) -------------------------------------------------------------------


def make_loss_with_center(cfg, num_classes, bug=None):    # modified by gu
    feat_dim = WIDTH * 8  # 512 for resnet18 as written

    triplet = TripletLoss(cfg.SOLVER.MARGIN, bug=bug)  # triplet loss
    center_criterion = CenterLoss(num_classes=num_classes, feat_dim=feat_dim, use_gpu=False)  # center loss

    xent = CrossEntropyLabelSmooth(num_classes=num_classes, use_gpu=False, bug=bug)     # new add by luo

    def loss_func(score, feat, target):
        return xent(score, target) + \
                triplet(feat, target)[0] + \
                cfg.SOLVER.CENTER_LOSS_WEIGHT * center_criterion(feat, target)
    return loss_func, center_criterion


# ---- solver/build.py, solver/lr_scheduler.py ----------------------------------------------------------------------


def make_optimizer_with_center(cfg, model, center_criterion):
    params = []
    for key, value in model.named_parameters():
        if not value.requires_grad:
            continue
        lr = cfg.SOLVER.BASE_LR
        weight_decay = cfg.SOLVER.WEIGHT_DECAY
        if "bias" in key:
            lr = cfg.SOLVER.BASE_LR * cfg.SOLVER.BIAS_LR_FACTOR
            weight_decay = cfg.SOLVER.WEIGHT_DECAY_BIAS
        params += [{"params": [value], "lr": lr, "weight_decay": weight_decay}]
    if cfg.SOLVER.OPTIMIZER_NAME == 'SGD':
        optimizer = getattr(torch.optim, cfg.SOLVER.OPTIMIZER_NAME)(params, momentum=cfg.SOLVER.MOMENTUM)
    else:
        optimizer = getattr(torch.optim, cfg.SOLVER.OPTIMIZER_NAME)(params)
    optimizer_center = torch.optim.SGD(center_criterion.parameters(), lr=cfg.SOLVER.CENTER_LR)
    return optimizer, optimizer_center


class WarmupMultiStepLR(torch.optim.lr_scheduler._LRScheduler):
    def __init__(
        self,
        optimizer,
        milestones,
        gamma=0.1,
        warmup_factor=1.0 / 3,
        warmup_iters=500,
        warmup_method="linear",
        last_epoch=-1,
    ):
        if not list(milestones) == sorted(milestones):
            raise ValueError(
                "Milestones should be a list of" " increasing integers. Got {}",
                milestones,
            )

        if warmup_method not in ("constant", "linear"):
            raise ValueError(
                "Only 'constant' or 'linear' warmup_method accepted"
                "got {}".format(warmup_method)
            )
        self.milestones = milestones
        self.gamma = gamma
        self.warmup_factor = warmup_factor
        self.warmup_iters = warmup_iters
        self.warmup_method = warmup_method
        super(WarmupMultiStepLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        warmup_factor = 1
        if self.last_epoch < self.warmup_iters:
            if self.warmup_method == "constant":
                warmup_factor = self.warmup_factor
            elif self.warmup_method == "linear":
                alpha = self.last_epoch / self.warmup_iters
                warmup_factor = self.warmup_factor * (1 - alpha) + alpha
        return [
            base_lr
            * warmup_factor
            * self.gamma ** bisect_right(self.milestones, self.last_epoch)
            for base_lr in self.base_lrs
        ]


# ---- data/samplers/triplet_sampler.py -----------------------------------------------------------------------------


class RandomIdentitySampler(Sampler):
    """
    Randomly sample N identities, then for each identity,
    randomly sample K instances, therefore batch size is N*K.
    """

    def __init__(self, data_source, batch_size, num_instances, rng, np_rng):
        self.data_source = data_source
        self.batch_size = batch_size
        self.num_instances = num_instances
        self.num_pids_per_batch = self.batch_size // self.num_instances
        self.rng, self.np_rng = rng, np_rng
        self.index_dic = defaultdict(list)
        for index, (_, pid, _) in enumerate(self.data_source):
            self.index_dic[pid].append(index)
        self.pids = list(self.index_dic.keys())

        # estimate number of examples in an epoch
        self.length = 0
        for pid in self.pids:
            idxs = self.index_dic[pid]
            num = len(idxs)
            if num < self.num_instances:
                num = self.num_instances
            self.length += num - num % self.num_instances

    def __iter__(self):
        batch_idxs_dict = defaultdict(list)

        for pid in self.pids:
            idxs = copy.deepcopy(self.index_dic[pid])
            if len(idxs) < self.num_instances:
                idxs = self.np_rng.choice(idxs, size=self.num_instances, replace=True)
            self.rng.shuffle(idxs)
            batch_idxs = []
            for idx in idxs:
                batch_idxs.append(idx)
                if len(batch_idxs) == self.num_instances:
                    batch_idxs_dict[pid].append(batch_idxs)
                    batch_idxs = []

        avai_pids = copy.deepcopy(self.pids)
        final_idxs = []

        while len(avai_pids) >= self.num_pids_per_batch:
            selected_pids = self.rng.sample(avai_pids, self.num_pids_per_batch)
            for pid in selected_pids:
                batch_idxs = batch_idxs_dict[pid].pop(0)
                final_idxs.extend(batch_idxs)
                if len(batch_idxs_dict[pid]) == 0:
                    avai_pids.remove(pid)

        self.length = len(final_idxs)
        return iter(final_idxs)

    def __len__(self):
        return self.length


# ---- data/transforms/transforms.py, data/transforms/build.py (torchvision written out) ----------------------------


class RandomErasing(object):
    """ Randomly selects a rectangle region in an image and erases its pixels.
        'Random Erasing Data Augmentation' by Zhong et al.
    """

    def __init__(self, probability=0.5, sl=0.02, sh=0.4, r1=0.3, mean=(0.4914, 0.4822, 0.4465), rng=random):
        self.probability = probability
        self.mean = mean
        self.sl = sl
        self.sh = sh
        self.r1 = r1
        self.rng = rng

    def __call__(self, img):

        if self.rng.uniform(0, 1) >= self.probability:
            return img

        for attempt in range(100):
            area = img.size()[1] * img.size()[2]

            target_area = self.rng.uniform(self.sl, self.sh) * area
            aspect_ratio = self.rng.uniform(self.r1, 1 / self.r1)

            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))

            if w < img.size()[2] and h < img.size()[1]:
                x1 = self.rng.randint(0, img.size()[1] - h)
                y1 = self.rng.randint(0, img.size()[2] - w)
                if img.size()[0] == 3:
                    img[0, x1:x1 + h, y1:y1 + w] = self.mean[0]
                    img[1, x1:x1 + h, y1:y1 + w] = self.mean[1]
                    img[2, x1:x1 + h, y1:y1 + w] = self.mean[2]
                else:
                    img[0, x1:x1 + h, y1:y1 + w] = self.mean[0]
                return img

        return img


def build_transforms(cfg, rng):
    """T.Resize (identity here), RandomHorizontalFlip, Pad, RandomCrop, ToTensor, Normalize, RandomErasing."""
    mean = torch.tensor(cfg.INPUT.PIXEL_MEAN).view(3, 1, 1)
    std = torch.tensor(cfg.INPUT.PIXEL_STD).view(3, 1, 1)
    erasing = RandomErasing(probability=cfg.INPUT.RE_PROB, mean=cfg.INPUT.PIXEL_MEAN, rng=rng)
    h, w = cfg.INPUT.SIZE_TRAIN
    p = cfg.INPUT.PADDING

    def transform(img):
        if rng.random() < cfg.INPUT.PROB:
            img = img.flip(-1)
        img = torch.nn.functional.pad(img, (p, p, p, p))
        top, left = rng.randint(0, 2 * p), rng.randint(0, 2 * p)
        img = img[:, top:top + h, left:left + w]
        img = (img - mean) / std
        return erasing(img.clone())

    return transform


# ---- data/datasets/dataset_loader.py, data/collate_batch.py -------------------------------------------------------


class ImageDataset(Dataset):
    """Image Person ReID Dataset"""

    def __init__(self, dataset, transform=None):
        self.dataset = dataset
        self.transform = transform

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        img_path, pid, camid = self.dataset[index]
        img = img_path  # the synthetic image itself stands where read_image(img_path) was

        if self.transform is not None:
            img = self.transform(img)

        return img, pid, camid, img_path


def train_collate_fn(batch):
    imgs, pids, _, _, = zip(*batch)
    pids = torch.tensor(pids, dtype=torch.int64)
    return torch.stack(imgs, dim=0), pids


def _synthetic_market(num_pids, per_pid, size, gen):
    """Each identity: head/torso/legs colours and a torso stripe; each image shifted, jittered and noised."""
    h, w = size
    colours = torch.rand(num_pids, 3, 3, generator=gen)  # [pid, part, rgb]
    stripe = torch.rand(num_pids, 3, generator=gen)
    stripe_row = torch.randint(h // 4, h // 2, (num_pids,), generator=gen)
    out = []
    for pid in range(num_pids):
        for _ in range(per_pid):
            img = torch.full((3, h, w), 0.5)
            dy = int(torch.randint(-3, 4, (1,), generator=gen))
            bounds = [(0, h // 5), (h // 5, h // 2 + h // 10), (h // 2 + h // 10, h)]
            for part, (a, b) in enumerate(bounds):
                a, b = max(0, a + dy), min(h, b + dy)
                img[:, a:b, w // 6:w - w // 6] = colours[pid, part].view(3, 1, 1)
            r = int(stripe_row[pid]) + dy
            img[:, r:r + 3, w // 6:w - w // 6] = stripe[pid].view(3, 1, 1)
            img = img * (0.8 + 0.4 * torch.rand(1, generator=gen)) + 0.05 * torch.randn(3, h, w, generator=gen)
            camid = int(torch.randint(0, 6, (1,), generator=gen))
            out.append((img.clamp(0, 1), pid, camid))
    return out


# ---- tools/train.py, engine/trainer.py ----------------------------------------------------------------------------


def _build(seed, bug=None):
    cfg = CFG
    torch.manual_seed(seed)
    rng = random.Random(seed)
    np_rng = np.random.RandomState(seed)
    gen = torch.Generator().manual_seed(seed)

    num_classes = 16
    train = _synthetic_market(num_classes, 8, cfg.INPUT.SIZE_TRAIN, gen)
    train_set = ImageDataset(train, build_transforms(cfg, rng))
    train_loader = DataLoader(
        train_set, batch_size=cfg.SOLVER.IMS_PER_BATCH,
        sampler=RandomIdentitySampler(train, cfg.SOLVER.IMS_PER_BATCH, cfg.DATALOADER.NUM_INSTANCE, rng, np_rng),
        collate_fn=train_collate_fn
    )

    model = Baseline(num_classes, cfg.MODEL.LAST_STRIDE, None, cfg.MODEL.NECK, cfg.TEST.NECK_FEAT, cfg.MODEL.NAME,
                     "imagenet")

    loss_func, center_criterion = make_loss_with_center(cfg, num_classes, bug=bug)  # modified by gu
    optimizer, optimizer_center = make_optimizer_with_center(cfg, model, center_criterion)
    scheduler = WarmupMultiStepLR(optimizer, cfg.SOLVER.STEPS, cfg.SOLVER.GAMMA, cfg.SOLVER.WARMUP_FACTOR,
                                  cfg.SOLVER.WARMUP_ITERS, cfg.SOLVER.WARMUP_METHOD)
    cetner_loss_weight = cfg.SOLVER.CENTER_LOSS_WEIGHT

    def _update(batch):
        model.train()
        optimizer.zero_grad()
        optimizer_center.zero_grad()
        img, target = batch
        score, feat = model(img)
        loss = loss_func(score, feat, target)
        loss.backward()
        optimizer.step()
        for param in center_criterion.parameters():
            param.grad.data *= (1. / cetner_loss_weight)
        optimizer_center.step()

        # compute acc
        acc = (score.max(1)[1] == target).float().mean()
        return loss.item(), acc.item()

    state = {"it": None}

    def train_step():
        if bug == "scheduler_stepped_per_iteration":
            # the handler attached to Events.ITERATION_STARTED instead of EPOCH_STARTED
            scheduler.step()
        if state["it"] is None:
            if bug != "scheduler_stepped_per_iteration":
                scheduler.step()  # @trainer.on(Events.EPOCH_STARTED) adjust_learning_rate
            state["it"] = iter(train_loader)
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = None
            return train_step()
        loss, _ = _update(batch)
        return loss

    def loss_fn(outputs, target):
        score, feat = outputs
        return loss_func(score, feat, target)

    def eval_fn(model, batch):
        img, target = batch
        model.eval()
        with torch.no_grad():
            feat = model(img)
        model.train()
        # rank-1 within the batch on the after-BN features (the R1_mAP metric's query-vs-gallery ranking)
        d = euclidean_dist(feat, feat) + torch.eye(len(target)) * 1e6
        return (target[d.argmin(1)] == target).float().mean().item()

    batch = next(iter(train_loader))
    return Program(name="reidstrong_bnneck", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the batch-hard miner's max/min swapped: each anchor's easiest positive and easiest negative enter the
    # margin ranking loss, which is then satisfied almost everywhere and stops shaping the embedding.
    Bug("mining_easiest_examples", functools.partial(_build, bug="mining_easiest_examples"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``nn.LogSoftmax(dim=0)`` in the label-smoothed cross-entropy: the scores normalized over the batch's
    # images instead of over the classes, so the ID loss no longer asks each image for its own identity.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the warmup/multi-step schedule, written for epochs, stepped on every iteration: the 10-epoch warmup
    # ends after 10 batches and the lr drops 10x after 40 and 100x after 70 batches.
    Bug("scheduler_stepped_per_iteration", functools.partial(_build, bug="scheduler_stepped_per_iteration"),
        "learning_ledger", ("PARAMETER_UPDATE",)),
]
