"""FCN-8s semantic segmentation from zijundeng/pytorch-semantic-segmentation: ``models/fcn8s.py``'s ``FCN8s`` (VGG-16
features with the first convolution padded by 100, ``ceil_mode`` max pools, fc6/fc7 as convolutions initialized
from VGG's classifier, zero-initialized score layers, bilinear-initialized transposed convolutions, the scaled
pool3/pool4 skips and the caffe crop offsets 5, 9 and 31) trained by ``train/voc-fcn/train.py``: batch size 1,
``CrossEntropyLoss2d(size_average=False, ignore_index=255)`` (``NLLLoss2d`` on ``log_softmax``) divided by the batch
size, Adam with two parameter groups (biases at twice the learning rate without weight decay, the weights with
weight decay 1e-4), betas (0.95, 0.999), ``ReduceLROnPlateau`` on the validation loss, and ``validate`` (``eval()``,
per-image loss, argmax predictions, pixel accuracy / class accuracy / mean IU / fwavacc from the confusion matrix).

Source: https://github.com/zijundeng/pytorch-semantic-segmentation
Commit: 4a1721f9a3284788336430efb140288096c6dd09
Files: train/voc-fcn/train.py, models/fcn8s.py, utils/misc.py, utils/transforms.py, datasets/voc.py
License: MIT (Copyright (c) 2017 ZijunDeng)
Domain: semantic segmentation (fully convolutional network)

Deviations from the original:
- sizes: every VGG-16 width divided by 16 (64/128/256/512 -> 4/8/16/32) and fc6/fc7 4096 -> 256; 5 classes
  instead of VOC's 21; 48x48 images; the caffe crop offsets need no change (they depend on the layer geometry);
- learning rate: 1e-10 -> 1e-4. The script's 1e-10 is the caffe FCN value for SGD on an unnormalized loss, carried
  over to Adam, where it moves no weight measurably (the scale-free Adam step is about lr); the 2x bias rate, the
  weight decay and the betas are as written;
- no pretrained VGG-16 can be loaded (``pretrained=False``): torchvision's ``vgg16()`` is written out in plain torch
  with its initialization (kaiming-normal fan-out convolutions, N(0, 0.01) linear layers, zero biases), and fc6/fc7
  are copied from its random classifier as the model does;
- data: VOC is replaced by synthetic 48x48 images made from ``seed`` (a noisy background, one to three rectangles or
  discs, each class with its own colour) with masks whose object borders are 255 (VOC's ignore label), as tensors
  (``ToTensor`` then ``Normalize`` with the ImageNet mean/std; ``MaskToTensor`` as ``long``);
- one ``train_step`` is one iteration of ``train``'s loop; at the end of each epoch ``validate`` runs on 8 held-out
  images and ``scheduler.step(val_loss)`` follows, as in ``main``; tensorboard, snapshots, the visualization and
  CUDA are left out (``Variable(..., volatile=True)`` is ``torch.no_grad()``, ``loss.data[0]`` is ``loss.item()``).
"""
# ruff: noqa: UP008  (the original's code style is kept)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES, IGNORE_LABEL, IMG = 5, 255, 48
VGG16_CFG = [4, 4, 'M', 8, 8, 'M', 16, 16, 16, 'M', 32, 32, 32, 'M', 32, 32, 32, 'M']  # 64..512 / 16
FC_WIDTH = 256  # 4096 / 16

args = {
    'epoch_num': 300,
    'lr': 1e-4,
    'weight_decay': 1e-4,
    'momentum': 0.95,
    'lr_patience': 100,  # large patience denotes fixed lr
}


# ---- torchvision.models.vgg16 (written out) ------------------------------------------------------------------

class VGG16(nn.Module):
    def __init__(self):
        super().__init__()
        layers, in_c = [], 3
        for v in VGG16_CFG:
            if v == 'M':
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(in_c, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                in_c = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(in_c * 7 * 7, FC_WIDTH), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(FC_WIDTH, FC_WIDTH), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(FC_WIDTH, 1000))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)


# ---- utils/misc.py -------------------------------------------------------------------------------------------

def get_upsampling_weight(in_channels, out_channels, kernel_size):
    factor = (kernel_size + 1) // 2
    if kernel_size % 2 == 1:
        center = factor - 1
    else:
        center = factor - 0.5
    og = np.ogrid[:kernel_size, :kernel_size]
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    weight = np.zeros((in_channels, out_channels, kernel_size, kernel_size), dtype=np.float64)
    weight[list(range(in_channels)), list(range(out_channels)), :, :] = filt
    return torch.from_numpy(weight).float()


class CrossEntropyLoss2d(nn.Module):
    def __init__(self, weight=None, size_average=True, ignore_index=255, bug=None):
        super(CrossEntropyLoss2d, self).__init__()
        self.nll_loss = nn.NLLLoss(weight, ignore_index=ignore_index,
                                   reduction='mean' if size_average else 'sum')  # NLLLoss2d(weight, size_average, ...)
        self.bug = bug

    def forward(self, inputs, targets):
        if self.bug == "log_softmax_over_width":
            return self.nll_loss(F.log_softmax(inputs, dim=-1), targets)
        return self.nll_loss(F.log_softmax(inputs, dim=1), targets)  # F.log_softmax(inputs): implicit dim 1 on 4-D


def _fast_hist(label_pred, label_true, num_classes):
    mask = (label_true >= 0) & (label_true < num_classes)
    hist = np.bincount(
        num_classes * label_true[mask].astype(int) +
        label_pred[mask], minlength=num_classes ** 2).reshape(num_classes, num_classes)
    return hist


def evaluate(predictions, gts, num_classes):
    hist = np.zeros((num_classes, num_classes))
    for lp, lt in zip(predictions, gts):
        hist += _fast_hist(lp.flatten(), lt.flatten(), num_classes)
    # axis 0: gt, axis 1: prediction
    acc = np.diag(hist).sum() / hist.sum()
    with np.errstate(divide='ignore', invalid='ignore'):
        acc_cls = np.diag(hist) / hist.sum(axis=1)
        acc_cls = np.nanmean(acc_cls)
        iu = np.diag(hist) / (hist.sum(axis=1) + hist.sum(axis=0) - np.diag(hist))
    mean_iu = np.nanmean(iu)
    freq = hist.sum(axis=1) / hist.sum()
    fwavacc = (freq[freq > 0] * iu[freq > 0]).sum()
    return acc, acc_cls, mean_iu, fwavacc


# ---- models/fcn8s.py -----------------------------------------------------------------------------------------

class FCN8s(nn.Module):
    def __init__(self, num_classes, pretrained=True, caffe=False):
        super(FCN8s, self).__init__()
        vgg = VGG16()
        features, classifier = list(vgg.features.children()), list(vgg.classifier.children())

        features[0].padding = (100, 100)

        for f in features:
            if 'MaxPool' in f.__class__.__name__:
                f.ceil_mode = True
            elif 'ReLU' in f.__class__.__name__:
                f.inplace = True

        self.features3 = nn.Sequential(*features[: 17])
        self.features4 = nn.Sequential(*features[17: 24])
        self.features5 = nn.Sequential(*features[24:])

        self.score_pool3 = nn.Conv2d(VGG16_CFG[8], num_classes, kernel_size=1)
        self.score_pool4 = nn.Conv2d(VGG16_CFG[12], num_classes, kernel_size=1)
        self.score_pool3.weight.data.zero_()
        self.score_pool3.bias.data.zero_()
        self.score_pool4.weight.data.zero_()
        self.score_pool4.bias.data.zero_()

        fc6 = nn.Conv2d(VGG16_CFG[-2], FC_WIDTH, kernel_size=7)
        fc6.weight.data.copy_(classifier[0].weight.data.view(FC_WIDTH, VGG16_CFG[-2], 7, 7))
        fc6.bias.data.copy_(classifier[0].bias.data)
        fc7 = nn.Conv2d(FC_WIDTH, FC_WIDTH, kernel_size=1)
        fc7.weight.data.copy_(classifier[3].weight.data.view(FC_WIDTH, FC_WIDTH, 1, 1))
        fc7.bias.data.copy_(classifier[3].bias.data)
        score_fr = nn.Conv2d(FC_WIDTH, num_classes, kernel_size=1)
        score_fr.weight.data.zero_()
        score_fr.bias.data.zero_()
        self.score_fr = nn.Sequential(
            fc6, nn.ReLU(inplace=True), nn.Dropout(), fc7, nn.ReLU(inplace=True), nn.Dropout(), score_fr
        )

        self.upscore2 = nn.ConvTranspose2d(num_classes, num_classes, kernel_size=4, stride=2, bias=False)
        self.upscore_pool4 = nn.ConvTranspose2d(num_classes, num_classes, kernel_size=4, stride=2, bias=False)
        self.upscore8 = nn.ConvTranspose2d(num_classes, num_classes, kernel_size=16, stride=8, bias=False)
        self.upscore2.weight.data.copy_(get_upsampling_weight(num_classes, num_classes, 4))
        self.upscore_pool4.weight.data.copy_(get_upsampling_weight(num_classes, num_classes, 4))
        self.upscore8.weight.data.copy_(get_upsampling_weight(num_classes, num_classes, 16))

    def forward(self, x):
        x_size = x.size()
        pool3 = self.features3(x)
        pool4 = self.features4(pool3)
        pool5 = self.features5(pool4)

        score_fr = self.score_fr(pool5)
        upscore2 = self.upscore2(score_fr)

        score_pool4 = self.score_pool4(0.01 * pool4)
        upscore_pool4 = self.upscore_pool4(score_pool4[:, :, 5: (5 + upscore2.size()[2]), 5: (5 + upscore2.size()[3])]
                                           + upscore2)

        score_pool3 = self.score_pool3(0.0001 * pool3)
        upscore8 = self.upscore8(score_pool3[:, :, 9: (9 + upscore_pool4.size()[2]), 9: (9 + upscore_pool4.size()[3])]
                                 + upscore_pool4)
        return upscore8[:, :, 31: (31 + x_size[2]), 31: (31 + x_size[3])].contiguous()


# ---- datasets/voc.py (synthetic scenes instead of VOC) -------------------------------------------------------

def make_scenes(gen, n):
    """[n, 3, IMG, IMG] images in [0, 1] and [n, IMG, IMG] masks: rectangles and discs of class colours on a noisy
    background (class 0); a one-pixel border around every object is IGNORE_LABEL, as VOC marks object outlines."""
    colours = torch.tensor([[0.45, 0.45, 0.45], [0.9, 0.15, 0.1], [0.1, 0.8, 0.2], [0.15, 0.2, 0.9],
                            [0.9, 0.85, 0.1]])
    yy, xx = torch.meshgrid(torch.arange(IMG), torch.arange(IMG), indexing='ij')
    imgs, masks = [], []
    for _ in range(n):
        mask = torch.zeros(IMG, IMG, dtype=torch.long)
        for _k in range(int(torch.randint(1, 4, (1,), generator=gen))):
            c = int(torch.randint(1, NUM_CLASSES, (1,), generator=gen))
            cy, cx = (torch.randint(8, IMG - 8, (2,), generator=gen)).tolist()
            r = int(torch.randint(4, 10, (1,), generator=gen))
            if torch.rand(1, generator=gen) < 0.5:
                inside = ((yy - cy).abs() <= r) & ((xx - cx).abs() <= r)
            else:
                inside = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            mask[inside] = c
        img = colours[mask].permute(2, 0, 1) + 0.08 * torch.randn(3, IMG, IMG, generator=gen)
        edge = F.max_pool2d(mask[None, None].float(), 3, 1, 1)[0, 0] != -F.max_pool2d(
            -mask[None, None].float(), 3, 1, 1)[0, 0]
        mask[edge] = IGNORE_LABEL
        imgs.append(img.clamp(0, 1))
        masks.append(mask)
    return torch.stack(imgs), torch.stack(masks)


class VOC(Dataset):
    mean_std = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])

    def __init__(self, imgs, masks, bug=None):
        self.imgs, self.masks, self.bug = imgs, masks, bug
        self.mean = torch.tensor(self.mean_std[0])[:, None, None]
        self.std = torch.tensor(self.mean_std[1])[:, None, None]

    def __getitem__(self, index):
        img = (self.imgs[index] - self.mean) / self.std  # ToTensor(), Normalize(*mean_std)
        mask = self.masks[index].long()  # MaskToTensor()
        if self.bug == "mask_transposed":
            mask = mask.t()  # the mask array read as (width, height)
        return img, mask

    def __len__(self):
        return len(self.imgs)


# ---- train/voc-fcn/train.py ----------------------------------------------------------------------------------

def validate(net, loader, criterion):
    net.eval()
    val_loss, count = 0.0, 0
    gts_all, predictions_all = [], []
    with torch.no_grad():
        for inputs, gts in loader:
            N = inputs.size(0)
            outputs = net(inputs)
            predictions = outputs.data.max(1)[1].squeeze_(1).squeeze_(0).cpu().numpy()
            val_loss += criterion(outputs, gts).item() / N * N
            count += N
            gts_all.append(gts.data.squeeze_(0).cpu().numpy())
            predictions_all.append(predictions)
    acc, acc_cls, mean_iu, fwavacc = evaluate(predictions_all, gts_all, NUM_CLASSES)
    net.train()
    return {'val_loss': val_loss / count, 'acc': acc, 'acc_cls': acc_cls, 'mean_iu': mean_iu, 'fwavacc': fwavacc}


def make_optimizer(net, train_args, bug=None):
    groups = [
        {'params': [param for name, param in net.named_parameters() if name[-4:] == 'bias'],
         'lr': 2 * train_args['lr']},
        {'params': [param for name, param in net.named_parameters() if name[-4:] != 'bias'],
         'lr': train_args['lr'], 'weight_decay': train_args['weight_decay']}
    ]
    if bug == "bias_group_dropped":
        groups = groups[1:]  # the bias group left out of the list: the biases are never updated
    return optim.Adam(groups, betas=(train_args['momentum'], 0.999))


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_set = VOC(*make_scenes(gen, 64), bug=bug)
    val_set = VOC(*make_scenes(gen, 8))
    train_args = dict(args)

    net = FCN8s(num_classes=NUM_CLASSES, pretrained=False)
    net.train()

    train_loader = DataLoader(train_set, batch_size=1, num_workers=0, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=1, num_workers=0, shuffle=False)

    criterion = CrossEntropyLoss2d(size_average=False, ignore_index=IGNORE_LABEL, bug=bug)

    optimizer = make_optimizer(net, train_args, bug)
    scheduler = ReduceLROnPlateau(optimizer, 'min', patience=train_args['lr_patience'], min_lr=1e-10)

    state = {'it': None}

    def train_step():
        try:
            inputs, labels = next(state['it'])
        except (StopIteration, TypeError):
            if state['it'] is not None:  # the epoch ended: validate, then scheduler.step(val_loss)
                scheduler.step(validate(net, val_loader, criterion)['val_loss'])
            state['it'] = iter(train_loader)
            inputs, labels = next(state['it'])
        assert inputs.size()[2:] == labels.size()[1:]
        N = inputs.size(0)

        optimizer.zero_grad()
        outputs = net(inputs)
        assert outputs.size()[2:] == labels.size()[1:]
        assert outputs.size()[1] == NUM_CLASSES

        loss = criterion(outputs, labels) / N
        loss.backward()
        optimizer.step()
        return loss.detach()

    batch = next(iter(DataLoader(train_set, batch_size=1, shuffle=False)))
    return Program(name="zijundengseg_fcn8s", model=net, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda model, b: validate(model, [b], criterion), loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: log_softmax over the wrong axis (the last, the image width) instead of the class axis that
    # F.log_softmax's implicit dim picks on 4-D input: the NLL then rewards a column, not a class.
    Bug("log_softmax_over_width", functools.partial(_build, bug="log_softmax_over_width"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the mask read transposed (width and height swapped) against its image; square images hide it.
    Bug("mask_transposed", functools.partial(_build, bug="mask_transposed"), "learning_ledger", ("TASK",)),
    # classic: the bias group dropped from the Adam parameter list: the zero-initialized score biases never move.
    Bug("bias_group_dropped", functools.partial(_build, bug="bias_group_dropped"), "four_structures",
        ("score_fr.6.bias",)),
]
