"""Deep metric learning with a plain classification loss, as jeromerony/dml_cross_entropy's ``experiment.py`` trains
it: a ResNet-18 feature extractor (ImageNet mean/std normalization inside the model, BatchNorm kept in eval mode
during training by ``set_bn_eval``, the last BatchNorm of every block zero-initialized), a zero-initialized linear
classifier on the 512-d features (standardized by an affine-free ``BatchNorm1d``: ``model.norm_layer=batch``),
label-smoothed cross-entropy written as a KL divergence (``SmoothCrossEntropy``,
epsilon 0.1), SGD(lr 0.05, weight decay 5e-4 on weights, none on biases and norms) with the ``warmcos`` schedule
(linear warm-up over 100 iterations, cosine decay) stepped per batch; after every epoch the query features of
held-out classes are ranked by L2 and cosine distance (Recall@k).

Source: https://github.com/jeromerony/dml_cross_entropy
Commit: 787e863a5c6ab345b69cad2672953b30a80790d9
Files: experiment.py, utils/training.py, utils/utils.py (SmoothCrossEntropy), utils/metrics.py (recall_at_ks),
       models/base_model.py, models/architectures/resnet.py, models/ingredient.py, utils/data/dataset_ingredient.py
License: BSD-3-Clause (Copyright (c) 2019, Jerome Rony)
Domain: metric learning (classification-trained embeddings, Recall@k on unseen classes)

The configuration is the README's CARS-196 command (``epochs=100 lr=0.05 model.norm_layer=batch``) with the
default ``model.arch`` resnet18 in place of ``model.resnet50`` (so ``num_features`` 512 and dropout 0).

Deviations from the original:
- sizes: the ResNet-18's widths 64/128/256/512 -> 16/32/64/128 (``num_features`` follows: 128, so ``remap`` stays
  the identity, as with 512), crop_size 224 -> 32, batch_size 128 -> 32, test_batch_size 256 -> 64, recalls
  [1, 2, 4, 8, 16, 32] -> [1, 2, 4, 8]; lr, momentum 0, weight decay, label smoothing, ``no_bias_decay``,
  ``set_bn_eval`` and the warm-up of 100 iterations kept; epochs 100 kept (the cosine spans 100 x 6 iterations);
- ``pretrained=True`` (torchvision's ImageNet weights) is not available: the ResNet starts from torchvision's
  initialization (Kaiming normal, BatchNorm 1/0), then the repository's zero-init of each block's last BatchNorm;
  torchvision's ``BasicBlock`` and ``conv1x1`` are written out (module names kept); only resnet18 is kept (the
  ``Bottleneck`` zero-init branch and the dilation check left out); ``evaluate`` keeps its recall path only (the
  cross-entropy and accuracy parts are left out);
- data: CARS-196 is replaced by synthetic 3x32x32 images made from ``seed``: each class is a colour and a stripe
  orientation on noise; 8 training classes of 24 images and 4 held-out query classes of 12 (the CARS split of
  the classes into train and test halves); the train transform is a random horizontal flip (Resize, ColorJitter and
  RandomResizedCrop are left out), the test transform the identity; the dataset returns ``(image, label, index)``
  as ``ImageDataset`` does;
- ``recall_at_ks`` ranks with ``torch.cdist`` / a matrix product and ``topk`` instead of faiss on a GPU;
- no sacred, visdom, tqdm, cudnn flags, DataParallel or saved state dicts (the best-validation copy is kept in
  memory); one ``train_step`` is one batch of ``utils.training.train``, an epoch's end runs ``evaluate`` on the
  query loader (no gallery: the CARS protocol) and then ``model.train()`` at the next epoch's start; ``eval_fn`` is the
  cosine Recall@1 of a given batch's features under ``eval()``.
"""
# ruff: noqa: UP008, PLR0402, C408, SIM210, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from copy import deepcopy
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import SGD, lr_scheduler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH = 16  # torchvision's 64
N_TRAIN_CLASSES, N_TEST_CLASSES, PER_TRAIN, PER_TEST, SIZE = 8, 4, 24, 12, 32
CONFIG = dict(epochs=100, lr=0.05, momentum=0., nesterov=False, weight_decay=5e-4, scheduler='warmcos',
              no_bias_decay=True, label_smoothing=0.1, batch_size=32, test_batch_size=64, recalls=[1, 2, 4, 8])


# ---- torchvision.models.resnet (BasicBlock, conv1x1), written out ---------------------------------------------

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


# ---- models/base_model.py -------------------------------------------------------------------------------------

class BaseModel(nn.Module):
    def __init__(self,
                 num_classes: int,
                 num_features: int,
                 dropout: float = 0.,
                 detach: bool = False,
                 norm_layer=None,
                 normalize: bool = False,
                 set_bn_eval: bool = False,
                 remap: bool = False,
                 normalize_weight: bool = False,
                 **kwargs) -> None:
        super(BaseModel, self).__init__()
        self.num_classes = num_classes
        self.num_features = num_features
        self.detach = detach
        self.normalize = normalize
        self.set_bn_eval = set_bn_eval
        self.normalize_weight = normalize_weight

        self.norm_layer = nn.Identity()
        if norm_layer == 'layer':
            self.norm_layer = nn.LayerNorm(self.backbone_features, elementwise_affine=False)
        if norm_layer == 'batch':
            self.norm_layer = nn.BatchNorm1d(self.backbone_features, affine=False)

        self.remap = nn.Identity()
        if remap or num_features != self.backbone_features:
            self.remap = nn.Linear(self.backbone_features, num_features)
            nn.init.zeros_(self.remap.bias)

        self.dropout = nn.Dropout(p=dropout)
        self.classifier = nn.Linear(num_features, num_classes)
        nn.init.zeros_(self.classifier.weight)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x: torch.Tensor):
        features = self.feature_extractor(x)
        features = self.norm_layer(features)
        features = self.remap(features)

        if self.normalize:
            features = nn.functional.normalize(features, p=2, dim=1)

        classification_features = self.dropout(features.detach() if self.detach else features)
        classifier_weight = self.classifier.weight
        if self.normalize_weight:
            classifier_weight = F.normalize(classifier_weight)
        logits = F.linear(classification_features, classifier_weight, self.classifier.bias)

        return logits, features

    def train(self, mode=True):
        self.training = mode
        for module in self.children():
            module.train(mode)

        if self.set_bn_eval:
            for module in self.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.eval()
        return self


# ---- models/architectures/resnet.py ---------------------------------------------------------------------------

class ResNet(BaseModel):
    def __init__(self,
                 block,
                 layers,
                 groups: int = 1,
                 width_per_group: int = 64,
                 replace_stride_with_dilation=None,
                 mean=(0.485, 0.456, 0.406),
                 std=(0.229, 0.224, 0.225),
                 **kwargs) -> None:
        self.backbone_features = 8 * WIDTH * block.expansion
        super(ResNet, self).__init__(**kwargs)
        self._norm_layer = nn.BatchNorm2d

        self.register_buffer('mean', torch.as_tensor(mean).view(1, 3, 1, 1))
        self.register_buffer('std', torch.as_tensor(std).view(1, 3, 1, 1))
        self.inplanes = WIDTH
        self.dilation = 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, WIDTH, layers[0])
        self.layer2 = self._make_layer(block, 2 * WIDTH, layers[1], stride=2,
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 4 * WIDTH, layers[2], stride=2,
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 8 * WIDTH, layers[3], stride=2,
                                       dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

        # torchvision's ResNet.__init__ initialization (not pretrained here)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-init
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.constant_(m.bn2.weight, 0)

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

    def feature_extractor(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.std
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        features = torch.flatten(x, 1)

        return features


def resnet18(pretrained: bool = False, progress: bool = True, **kwargs) -> nn.Module:
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


# ---- models/ingredient.py (config defaults) -------------------------------------------------------------------

def get_model(num_classes, arch='resnet18', pretrained=True, num_features=8 * WIDTH, norm_layer=None, detach=False,
              remap=False, normalize=False, normalize_weight=False, set_bn_eval=True, dropout=0.):
    return resnet18(num_classes=num_classes, num_features=num_features, pretrained=pretrained, dropout=dropout,
                    norm_layer=norm_layer, detach=detach, remap=remap, normalize=normalize,
                    normalize_weight=normalize_weight, set_bn_eval=set_bn_eval)


# ---- utils/utils.py -------------------------------------------------------------------------------------------

class SmoothCrossEntropy(nn.Module):
    def __init__(self, epsilon: float = 0.):
        super(SmoothCrossEntropy, self).__init__()
        self.epsilon = float(epsilon)

    def forward(self, logits: torch.Tensor, labels: torch.LongTensor) -> torch.Tensor:
        target_probs = torch.full_like(logits, self.epsilon / (logits.shape[1] - 1))
        target_probs.scatter_(1, labels.unsqueeze(1), 1 - self.epsilon)
        return F.kl_div(torch.log_softmax(logits, 1), target_probs, reduction='none').sum(1)


# ---- utils/metrics.py (recall_at_ks, faiss replaced by an exact search) ---------------------------------------

def recall_at_ks(query_features, query_labels, ks, gallery_features=None, gallery_labels=None, cosine=False):
    offset = 0
    if gallery_features is None and gallery_labels is None:
        offset = 1
        gallery_features = query_features
        gallery_labels = query_labels
    elif gallery_features is None or gallery_labels is None:
        raise ValueError('gallery_features and gallery_labels needs to be both None or both Tensors.')

    if cosine:
        query_features = F.normalize(query_features, p=2, dim=1)
        gallery_features = F.normalize(gallery_features, p=2, dim=1)

    max_k = max(ks)
    if cosine:  # faiss.GpuIndexFlatIP: largest inner products first
        closest_indices = (query_features @ gallery_features.t()).topk(max_k + offset, dim=1)[1]
    else:  # faiss.GpuIndexFlatL2: smallest distances first
        closest_indices = torch.cdist(query_features, gallery_features).topk(max_k + offset, dim=1,
                                                                               largest=False)[1]
    q_l, g_l, closest_indices = query_labels.numpy(), gallery_labels.numpy(), closest_indices.numpy()

    recalls = {}
    for k in ks:
        indices = closest_indices[:, offset:k + offset]
        recalls[k] = (q_l[:, None] == g_l[indices]).any(1).mean()
    return {k: round(v * 100, 2) for k, v in recalls.items()}


# ---- experiment.py (get_optimizer_scheduler) ------------------------------------------------------------------

def get_optimizer_scheduler(parameters, loader_length, epochs, lr, momentum, nesterov, weight_decay, scheduler,
                            lr_step=None):
    optimizer = SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay,
                    nesterov=True if nesterov and momentum else False)
    if epochs == 0:
        scheduler = None
    elif scheduler == 'cos':
        scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * loader_length, eta_min=0)
    elif scheduler == 'warmcos':
        warm_cosine = lambda i: min((i + 1) / 100, (1 + math.cos(math.pi * i / (epochs * loader_length))) / 2)
        scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=warm_cosine)
    else:
        scheduler = lr_scheduler.StepLR(optimizer, epochs * loader_length)
    return optimizer, scheduler


# ---- utils/training.py (evaluate) -----------------------------------------------------------------------------

def evaluate(model, query_loader, gallery_loader=None, xent=False, recall=None):
    model.eval()
    all_query_labels = []
    all_query_features = []
    all_predictions = []

    with torch.no_grad():
        for batch, labels, _ in query_loader:
            logits, features = model(batch)

            all_query_labels.append(labels)
            if recall is not None:
                all_query_features.append(features)
            all_predictions.append(logits.argmax(1))

        all_query_labels = torch.cat(all_query_labels, 0)
        if recall is not None:
            all_query_features = torch.cat(all_query_features, 0)
            recall_function = partial(
                recall_at_ks, query_features=all_query_features, query_labels=all_query_labels, ks=recall,
                gallery_features=None, gallery_labels=None
            )
            recalls = {'l2': recall_function(), 'cosine': recall_function(cosine=True)}
    return recalls


# ---- synthetic data (CARS-196's role) --------------------------------------------------------------------------

def make_images(g, classes, per_class):
    """Each class: a colour and a stripe orientation; every image that pattern with its own phase on noise."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    images, labels = [], []
    for c, (colour, angle) in classes:
        for _ in range(per_class):
            phase = g.uniform(0, 2 * np.pi)
            stripes = 0.5 + 0.5 * np.sin((np.cos(angle) * xx + np.sin(angle) * yy) * 0.6 + phase)
            img = colour[:, None, None] * stripes[None] + 0.15 * g.randn(3, SIZE, SIZE)
            images.append(np.clip(img, 0, 1).astype(np.float32))
            labels.append(c)
    return torch.from_numpy(np.stack(images)), torch.tensor(labels)


def make_sets(seed):
    g = np.random.RandomState(seed)
    n = N_TRAIN_CLASSES + N_TEST_CLASSES
    specs = [(g.uniform(0.1, 1.0, 3).astype(np.float32), g.uniform(0, np.pi)) for _ in range(n)]
    train = make_images(g, [(c, specs[c]) for c in range(N_TRAIN_CLASSES)], PER_TRAIN)
    query = make_images(g, [(c, specs[N_TRAIN_CLASSES + c]) for c in range(N_TEST_CLASSES)], PER_TEST)
    return train, query


def _build(seed, bug=None):
    cfg = CONFIG
    torch.manual_seed(seed)
    (train_x, train_y), (query_x, query_y) = make_sets(seed)
    g = torch.Generator().manual_seed(seed)
    loader_length = len(train_x) // cfg['batch_size']  # BatchSampler(RandomSampler, drop_last=True)
    query_loader = [(query_x[i:i + cfg['test_batch_size']], query_y[i:i + cfg['test_batch_size']],
                     torch.arange(i, min(i + cfg['test_batch_size'], len(query_x))))
                    for i in range(0, len(query_x), cfg['test_batch_size'])]

    torch.manual_seed(seed)
    model = get_model(num_classes=int(train_y.max()) + 1, norm_layer='batch', detach=(bug == "features_detached"))
    class_loss = SmoothCrossEntropy(epsilon=cfg['label_smoothing'])

    parameters = []
    if cfg['no_bias_decay']:
        parameters.append({'params': [par for par in model.parameters() if par.dim() != 1]})
        parameters.append({'params': [par for par in model.parameters() if par.dim() == 1], 'weight_decay': 0})
    else:
        parameters.append({'params': model.parameters()})
    optimizer, scheduler = get_optimizer_scheduler(parameters=parameters, loader_length=loader_length,
                                                   epochs=cfg['epochs'], lr=cfg['lr'], momentum=cfg['momentum'],
                                                   nesterov=cfg['nesterov'], weight_decay=cfg['weight_decay'],
                                                   scheduler=cfg['scheduler'])

    eval_function = partial(evaluate, model=model, recall=cfg['recalls'], query_loader=query_loader,
                            gallery_loader=None)
    metrics = eval_function()
    state = {"best_val": (0, metrics, deepcopy(model.state_dict())), "epoch": 0, "batches": None}

    def train_transform(batch):
        flip = torch.rand(batch.size(0), generator=g) < 0.5  # RandomHorizontalFlip
        return torch.where(flip[:, None, None, None], batch.flip(3), batch)

    def epoch_batches():
        model.train()
        order = torch.randperm(len(train_x), generator=g)
        for i in range(loader_length):
            indices = order[i * cfg['batch_size']:(i + 1) * cfg['batch_size']]
            if bug == "labels_not_permuted":
                yield train_transform(train_x[indices]), train_y[i * cfg['batch_size']:(i + 1) * cfg['batch_size']], indices
            else:
                yield train_transform(train_x[indices]), train_y[indices], indices

    def train_step():
        """One batch of utils/training.py's `train`; an epoch's end runs experiment.py's validation."""
        if state["batches"] is None:
            state["batches"] = epoch_batches()
        item = next(state["batches"], None)
        if item is None:
            state["batches"] = epoch_batches()
            item = next(state["batches"])
        batch, labels, indices = item
        logits, features = model(batch)
        loss = class_loss(logits, labels).mean()

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        scheduler.step()

        if scheduler.last_epoch % loader_length == 0:  # the epoch's last batch: validation
            state["epoch"] += 1
            metrics = eval_function()
            if metrics['cosine'][1] >= state["best_val"][1]['cosine'][1]:
                state["best_val"] = (state["epoch"], metrics, deepcopy(model.state_dict()))
        return loss.detach()

    batch = (train_x[:cfg['batch_size']], train_y[:cfg['batch_size']])
    if bug == "labels_not_permuted":
        batch = (batch[0], train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(seed + 1))[
            :cfg['batch_size']]])

    def loss_fn(output, labels):
        logits, features = output
        return class_loss(logits, labels).mean()

    def eval_fn(model, batch):
        x, labels = batch
        was = model.training
        model.eval()
        with torch.no_grad():
            _, features = model(x)
        model.train(was)
        return recall_at_ks(features, labels, [1], cosine=True)[1]

    return Program(name="dmlxent_resnet", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # the batch's labels sliced from the unshuffled targets while its images follow the sampler's permutation:
    # every image is trained towards the class of some other image.
    Bug("labels_not_permuted", functools.partial(_build, bug="labels_not_permuted"), "learning_ledger", ("TASK",)),
    # the `detach` named config left on ("prevents training of the feature extractor with cross-entropy"): only the
    # classifier learns and the embedding used for retrieval stays the random one.
    Bug("features_detached", functools.partial(_build, bug="features_detached"), "reachability", ("conv1",)),
    # optimizer.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
