"""MoCo (momentum encoder + fixed-size queue, softmax InfoNCE) as HobbitLong/CMC implements it in
``train_moco_ins.py --moco --softmax``: two augmented crops of each image stacked along the channels and split,
the query from ``model`` (``InsResNet50``: torchvision-layout ResNet-50 ending in a 128-d linear + L2
normalization), the key from ``model_ema`` under ``no_grad`` with ShuffleBN (keys computed on a shuffled batch and
put back in order, ``model_ema`` in eval mode but its BatchNorms in train mode), ``MemoryMoCo`` (positive logit
``q.k``, negatives against the queue, divided by ``nce_t`` 0.07, the keys enqueued), ``NCESoftmaxLoss``
(cross-entropy with label 0); SGD (lr 0.03, momentum 0.9, weight decay 1e-4) over ``model`` only, the lr decayed
by ``adjust_learning_rate`` at the ``lr_decay_epochs``; after each step ``moment_update(model, model_ema, 0.999)``.

Source: https://github.com/HobbitLong/CMC
Commit: 7b227be0b10ef4e526c72af07664f5079ed9ee09
Files: train_moco_ins.py, NCE/NCEAverage.py (MemoryMoCo), NCE/NCECriterion.py (NCESoftmaxLoss), models/resnet.py,
  dataset.py (ImageFolderInstance two_crop), util.py (adjust_learning_rate), README command for MoCo
License: BSD-2-Clause (Copyright (c) 2020, Yonglong Tian; full text in LICENSES/HobbitLong-CMC.txt)
Domain: self-supervised contrastive learning (MoCo: EMA key encoder, queue of negatives, ShuffleBN)

Deviations from the original:
- sizes (2 CPU cores): ResNet-50 ``width`` 1 -> 0.125 (the script's ``width`` argument; the stem keeps its 64
  channels), images 224 -> 32, so the final ``AvgPool2d(7)`` becomes ``AvgPool2d(1)`` (the map is 1x1);
  batch_size 128 -> 16, nce_k (queue) 16384 -> 64; nce_t 0.07, alpha 0.999, lr 0.03, momentum 0.9, weight decay
  1e-4, lr_decay_epochs 120,160,200 unchanged.
- data: the ImageNet-100 folder is replaced by 128 synthetic 32x32 RGB images made from ``seed`` (two to four
  coloured rectangles on a coloured background); ``ImageFolderInstance(two_crop=True)`` returns the two
  transformed crops concatenated on the channels, the label and the index, as written.
- augmentation: the script's ``--aug NULL`` pipeline (``RandomResizedCrop(image_size, scale=(0.2, 1.))``,
  ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize(ImageNet mean/std)``) written out in plain torch (there
  is no torchvision here; the crop box is drawn as torchvision draws it, the resize is bilinear through
  ``F.interpolate``). The default ``--aug CJ`` adds ColorJitter and RandomGrayscale, which would need torchvision.
- ``nn.DataParallel`` around the encoder, ``.cuda()`` calls (in ``get_shuffle_ids``, ``MemoryMoCo`` and
  ``NCESoftmaxLoss``), apex amp, tensorboard logging, the meters, printing and checkpoints are left out;
  ``moment_update``'s deprecated ``add_(1-m, p)`` is written ``add_(p, alpha=1-m)`` (the old overload no longer
  runs).
- the queue (``MemoryMoCo.memory``) starts holding ``model_ema``'s keys of the first ``nce_k`` images (one view
  each, BatchNorm in train mode) instead of uniform random vectors: random negatives are so easy that the first
  losses would be far below every later one, and the loss could not be seen to fall in a short run. From then on
  the queue is updated as written.
- one ``train_step`` is one iteration of ``train_moco``'s loop (``model.train()``, ``model_ema.eval()`` with its
  BatchNorms set to train, as at the start of each epoch); it returns the loss. ``loss_fn(feat_q, x2)`` is the
  same loss for a query batch (the key through ``model_ema`` with ShuffleBN, logits against the queue, without
  enqueuing).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, RUF059  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 16
IMAGE_SIZE = 32
WIDTH = 0.125
NCE_K = 64
NCE_T = 0.07
ALPHA = 0.999
LEARNING_RATE = 0.03
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
LR_DECAY_EPOCHS = [120, 160, 200]
LR_DECAY_RATE = 0.1
CROP = 0.2
N_DATA = 128


# ---- models/resnet.py -----------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class Normalize(nn.Module):

    def __init__(self, power=2):
        super(Normalize, self).__init__()
        self.power = power

    def forward(self, x):
        norm = x.pow(self.power).sum(1, keepdim=True).pow(1. / self.power)
        out = x.div(norm)
        return out


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


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class ResNet(nn.Module):

    def __init__(self, block, layers, low_dim=128, in_channel=3, width=1):
        self.inplanes = 64
        super(ResNet, self).__init__()
        self.conv1 = nn.Conv2d(in_channel, 64, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)

        self.base = int(64 * width)

        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, self.base, layers[0])
        self.layer2 = self._make_layer(block, self.base * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, self.base * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, self.base * 8, layers[3], stride=2)
        self.avgpool = nn.AvgPool2d(1, stride=1)  # AvgPool2d(7) at 224x224
        self.fc = nn.Linear(self.base * 8 * block.expansion, low_dim)
        self.l2norm = Normalize(2)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

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

    def forward(self, x, layer=7):
        if layer <= 0:
            return x
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        if layer == 1:
            return x
        x = self.layer1(x)
        if layer == 2:
            return x
        x = self.layer2(x)
        if layer == 3:
            return x
        x = self.layer3(x)
        if layer == 4:
            return x
        x = self.layer4(x)
        if layer == 5:
            return x
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        if layer == 6:
            return x
        x = self.fc(x)
        x = self.l2norm(x)

        return x


def resnet50(pretrained=False, **kwargs):
    """Constructs a ResNet-50 model.
    Args:
        pretrained (bool): If True, returns a model pre-trained on ImageNet
    """
    model = ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)
    return model


class InsResNet50(nn.Module):
    """Encoder for instance discrimination and MoCo"""
    def __init__(self, width=1):
        super(InsResNet50, self).__init__()
        self.encoder = resnet50(width=width)

    def forward(self, x, layer=7):
        return self.encoder(x, layer)


# ---- NCE/NCEAverage.py, NCE/NCECriterion.py -------------------------------------------------------------------

class MemoryMoCo(nn.Module):
    """Fixed-size queue with momentum encoder"""
    def __init__(self, inputSize, outputSize, K, T=0.07, use_softmax=False):
        super(MemoryMoCo, self).__init__()
        self.outputSize = outputSize
        self.inputSize = inputSize
        self.queueSize = K
        self.T = T
        self.index = 0
        self.use_softmax = use_softmax

        self.register_buffer('params', torch.tensor([-1]))
        stdv = 1. / math.sqrt(inputSize / 3)
        self.register_buffer('memory', torch.rand(self.queueSize, inputSize).mul_(2 * stdv).add_(-stdv))

    def forward(self, q, k, update=True):
        batchSize = q.shape[0]
        k = k.detach()

        Z = self.params[0].item()

        # pos logit
        l_pos = torch.bmm(q.view(batchSize, 1, -1), k.view(batchSize, -1, 1))
        l_pos = l_pos.view(batchSize, 1)
        # neg logit
        queue = self.memory.clone()
        l_neg = torch.mm(queue.detach(), q.transpose(1, 0))
        l_neg = l_neg.transpose(0, 1)

        out = torch.cat((l_pos, l_neg), dim=1)

        if self.use_softmax:
            out = torch.div(out, self.T)
            out = out.squeeze().contiguous()
        else:
            out = torch.exp(torch.div(out, self.T))
            if Z < 0:
                self.params[0] = out.mean() * self.outputSize
                Z = self.params[0].clone().detach().item()
            # compute the out
            out = torch.div(out, Z).squeeze().contiguous()

        if not update:
            return out
        # # update memory
        with torch.no_grad():
            out_ids = torch.arange(batchSize)
            out_ids += self.index
            out_ids = torch.fmod(out_ids, self.queueSize)
            out_ids = out_ids.long()
            self.memory.index_copy_(0, out_ids, k)
            self.index = (self.index + batchSize) % self.queueSize

        return out


class NCESoftmaxLoss(nn.Module):
    """Softmax cross-entropy loss (a.k.a., info-NCE loss in CPC paper)"""
    def __init__(self):
        super(NCESoftmaxLoss, self).__init__()
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x):
        bsz = x.shape[0]
        x = x.squeeze()
        label = torch.zeros([bsz]).long()
        loss = self.criterion(x, label)
        return loss


# ---- util.py --------------------------------------------------------------------------------------------------

def adjust_learning_rate(epoch, opt, optimizer):
    """Sets the learning rate to the initial LR decayed by 0.2 every steep step"""
    steps = np.sum(epoch > np.asarray(opt.lr_decay_epochs))
    if steps > 0:
        new_lr = opt.learning_rate * (opt.lr_decay_rate ** steps)
        for param_group in optimizer.param_groups:
            param_group['lr'] = new_lr


# ---- dataset.py (ImageFolderInstance, two_crop) with the --aug NULL transform written out -------------------------

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def train_transform(img, size=IMAGE_SIZE, scale=(CROP, 1.), ratio=(3. / 4., 4. / 3.)):
    """RandomResizedCrop(size, scale) + RandomHorizontalFlip() + ToTensor() + Normalize(mean, std)."""
    _, height, width = img.shape
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    box = (0, 0, height, width)
    for _ in range(10):
        target_area = area * float(torch.empty(1).uniform_(scale[0], scale[1]))
        aspect_ratio = math.exp(float(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])))
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)))
            j = int(torch.randint(0, width - w + 1, size=(1,)))
            box = (i, j, h, w)
            break
    i, j, h, w = box
    img = F.interpolate(img[None, :, i:i + h, j:j + w], size=(size, size), mode='bilinear',
                        align_corners=False)[0]
    if torch.rand(1) < 0.5:
        img = img.flip(-1)
    return (img - MEAN) / STD


def make_images(gen, n, size=IMAGE_SIZE):
    """Two to four coloured rectangles on a coloured background, values in [0, 1]."""
    imgs = torch.empty(n, 3, size, size)
    for k in range(n):
        img = torch.rand(3, 1, 1, generator=gen).expand(3, size, size).clone()
        for _ in range(int(torch.randint(2, 5, (1,), generator=gen))):
            r, c = (int(v) for v in torch.randint(0, size - 8, (2,), generator=gen))
            h, w = (int(v) for v in torch.randint(6, 16, (2,), generator=gen))
            img[:, r:r + h, c:c + w] = torch.rand(3, 1, 1, generator=gen)
        imgs[k] = img
    return imgs


class ImageFolderInstance(torch.utils.data.Dataset):
    """Folder datasets which returns the index of the image as well
    """

    def __init__(self, images, transform=None, target_transform=None, two_crop=False):
        self.images = images
        self.transform = transform
        self.target_transform = target_transform
        self.two_crop = two_crop

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image, target = self.images[index], 0
        if self.transform is not None:
            img = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)

        if self.two_crop:
            img2 = self.transform(image)
            img = torch.cat([img, img2], dim=0)

        return img, target, index


# ---- train_moco_ins.py ----------------------------------------------------------------------------------------

def moment_update(model, model_ema, m):
    """ model_ema = m * model_ema + (1 - m) model """
    for p1, p2 in zip(model.parameters(), model_ema.parameters()):
        p2.data.mul_(m).add_(p1.detach().data, alpha=1-m)


def get_shuffle_ids(bsz):
    """generate shuffle ids for ShuffleBN"""
    forward_inds = torch.randperm(bsz).long()
    backward_inds = torch.zeros(bsz).long()
    value = torch.arange(bsz).long()
    backward_inds.index_copy_(0, forward_inds, value)
    return forward_inds, backward_inds


class _Opt:
    learning_rate = LEARNING_RATE
    lr_decay_epochs = LR_DECAY_EPOCHS
    lr_decay_rate = LR_DECAY_RATE
    alpha = ALPHA


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    args = _Opt()

    train_dataset = ImageFolderInstance(make_images(gen, N_DATA), transform=train_transform, two_crop=True)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0, drop_last=False,
        generator=torch.Generator().manual_seed(seed))

    # create model and optimizer
    n_data = len(train_dataset)
    model = InsResNet50(width=WIDTH)
    model_ema = InsResNet50(width=WIDTH)

    # copy weights from `model' to `model_ema'
    moment_update(model, model_ema, 0)

    # set the contrast memory and criterion
    contrast = MemoryMoCo(128, n_data, NCE_K, NCE_T, True)
    criterion = NCESoftmaxLoss()

    optimizer = torch.optim.SGD(model.parameters(),
                                lr=args.learning_rate,
                                momentum=MOMENTUM,
                                weight_decay=WEIGHT_DECAY)

    def set_bn_train(m):
        classname = m.__class__.__name__
        if classname.find('BatchNorm') != -1:
            m.train()

    state = {"epoch": 1, "it": None}

    def next_inputs():
        while True:
            if state["it"] is None:
                adjust_learning_rate(state["epoch"], args, optimizer)
                state["it"] = iter(train_loader)
            try:
                return next(state["it"])
            except StopIteration:
                state["epoch"] += 1
                state["it"] = None

    def keys(x2, bsz):
        # ids for ShuffleBN
        shuffle_ids, reverse_ids = get_shuffle_ids(bsz)
        with torch.no_grad():
            x2 = x2[shuffle_ids]
            feat_k = model_ema(x2)
            if bug != "keys_not_unshuffled":
                feat_k = feat_k[reverse_ids]
        return feat_k

    def train_step():
        model.train()
        model_ema.eval()
        model_ema.apply(set_bn_train)

        inputs, _, index = next_inputs()
        bsz = inputs.size(0)

        inputs = inputs.float()

        # ===================forward=====================
        x1, x2 = torch.split(inputs, [3, 3], dim=1)

        feat_q = model(x1)
        feat_k = keys(x2, bsz)

        out = contrast(feat_q, feat_k)

        loss = criterion(out)

        # ===================backward=====================
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if bug == "moment_update_reversed":
            moment_update(model_ema, model, args.alpha)
        else:
            moment_update(model, model_ema, args.alpha)
        return loss.detach()

    # the queue starts holding the keys of the first NCE_K images (the original starts it at random vectors,
    # which makes the first losses far lower than any later one)
    with torch.no_grad():
        model_ema.train()
        prime = torch.stack([torch.split(train_dataset[i][0], [3, 3], dim=0)[1] for i in range(NCE_K)])
        contrast.memory.copy_(model_ema(prime))

    def loss_fn(feat_q, x2):
        feat_k = keys(x2, x2.size(0))
        return criterion(contrast(feat_q, feat_k, update=False))

    first, _, _ = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=False)))
    x1, x2 = torch.split(first.float(), [3, 3], dim=1)
    return Program(name="cmc_moco_ins", model=model, batch=(x1, x2), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ShuffleBN's keys not put back in order (``feat_k[reverse_ids]`` left out, classic): each query's positive is
    # the key of another image.
    Bug("keys_not_unshuffled", functools.partial(_build, bug="keys_not_unshuffled"), "learning_ledger", ("TASK",)),
    # moment_update called with its models swapped (classic): the trained encoder is pulled toward the key encoder,
    # which never moves.
    Bug("moment_update_reversed", functools.partial(_build, bug="moment_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]
