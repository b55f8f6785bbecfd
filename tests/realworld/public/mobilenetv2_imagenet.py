"""MobileNetV2 (inverted residuals with linear bottlenecks, ReLU6, depthwise convs, width multiplier) trained by the
repository's ``imagenet.py`` as its README runs it (``-a mobilenetv2 --epochs 150 --lr-decay cos --lr 0.05 --wd
4e-5 --width-mult <w> --input-size <r>``): SGD momentum 0.9, ``adjust_learning_rate`` setting a cosine lr at every
iteration, ``CrossEntropyLoss``, ``DataParallel``, the uint8 ``fast_collate`` batches normalised by the
``PrefetchedWrapper``, ``model.train()`` at the start of each epoch and ``validate`` in eval mode after it.

Source: https://github.com/d-li14/mobilenetv2.pytorch
Commit: 1733532bd43743442077326e1efc556d7cfd025d
Files: imagenet.py, models/imagenet/mobilenetv2.py, utils/dataloaders.py, utils/eval.py, README.md
License: Apache-2.0 (LICENSES/d-li14-mobilenetv2.pytorch.txt)
Domain: image classification (MobileNetV2, per-iteration cosine lr, uint8 pipeline normalised on the fly)

Deviations from the original:
- sizes: ``--width-mult 0.25`` (the README trains 0.1-1.0 multipliers; the final 1x1 conv keeps 1280 channels as
  written for multipliers <= 1), ``--input-size 32`` (224 in the README; 96-192 are also published), 1000 -> 4
  classes, batch 256 -> 16, epochs 150 -> 15 with an epoch of 2 batches; lr, momentum, wd, cos decay unchanged;
- no GPU: ``.cuda()`` calls, ``cudnn`` flags and the CUDA stream of ``PrefetchedWrapper.prefetched_loader`` are
  left out (the prefetcher's one-batch lag, ``float()`` and ``sub_(mean).div_(std)`` on the 0-255 scale are kept);
  ``DataParallel`` is kept (on CPU it calls the module); DALI, the Bar progress printer, the Logger, tensorboardX,
  checkpoints and the ``--resume`` / ``--evaluate`` branches are left out;
- argparse: the namespace is built in ``_build`` with the README's values (``args`` stays a module global as the
  script's ``global args`` does);
- data: ``datasets.ImageFolder`` of ImageNet is replaced by synthetic 40x40 RGB uint8 images made from ``seed``
  (4 classes, each a dominant colour - red, green, blue, yellow - with noise and a random darker blob);
  torchvision's ``RandomResizedCrop(32)`` (scale (0.08, 1), ratio (3/4, 4/3), bilinear) and
  ``RandomHorizontalFlip`` are written out in plain torch on each image; ``fast_collate`` is kept (its numpy
  array of each image stands for the PIL image); validation uses ``Resize(int(32 / 0.875))`` + ``CenterCrop(32)``
  written out likewise;
- ``accuracy``: ``correct[:k].view(-1)`` -> ``.reshape(-1)`` (a non-contiguous slice that current torch refuses to
  view) and ``topk=(1, 5)`` -> ``(1, 2)`` (4 classes); ``validate`` keeps sums instead of the AverageMeters and the
  Bar;
- one ``train_step`` is one iteration of ``train``'s loop (at the start of an epoch ``model.train()`` runs, at its
  end ``validate``); ``eval_fn`` is ``validate``'s top-1 on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F821, F823, PLR0402, UP004, UP008, UP032, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys
from math import cos, pi

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCHES_PER_EPOCH = 2
N_CLASSES = 4
RAW = 40


# ---- models/imagenet/mobilenetv2.py ------------------------------------------------------------------------------

def _make_divisible(v, divisor, min_value=None):
    """
    This function is taken from the original tf repo.
    It ensures that all layers have a channel number that is divisible by 8
    It can be seen here:
    https://github.com/tensorflow/models/blob/master/research/slim/nets/mobilenet/mobilenet.py
    :param v:
    :param divisor:
    :param min_value:
    :return:
    """
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    # Make sure that round down does not go down by more than 10%.
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def conv_3x3_bn(inp, oup, stride):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True)
    )


def conv_1x1_bn(inp, oup):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True)
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super(InvertedResidual, self).__init__()
        assert stride in [1, 2]

        hidden_dim = round(inp * expand_ratio)
        self.identity = stride == 1 and inp == oup

        if expand_ratio == 1:
            self.conv = nn.Sequential(
                # dw
                nn.Conv2d(hidden_dim, hidden_dim, 3, stride, 1, groups=hidden_dim, bias=False),
                nn.BatchNorm2d(hidden_dim),
                nn.ReLU6(inplace=True),
                # pw-linear
                nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
                nn.BatchNorm2d(oup),
            )
        else:
            self.conv = nn.Sequential(
                # pw
                nn.Conv2d(inp, hidden_dim, 1, 1, 0, bias=False),
                nn.BatchNorm2d(hidden_dim),
                nn.ReLU6(inplace=True),
                # dw
                nn.Conv2d(hidden_dim, hidden_dim, 3, stride, 1, groups=hidden_dim, bias=False),
                nn.BatchNorm2d(hidden_dim),
                nn.ReLU6(inplace=True),
                # pw-linear
                nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
                nn.BatchNorm2d(oup),
            )

    def forward(self, x):
        if self.identity:
            return x + self.conv(x)
        else:
            return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.):
        super(MobileNetV2, self).__init__()
        # setting of inverted residual blocks
        self.cfgs = [
            # t, c, n, s
            [1,  16, 1, 1],
            [6,  24, 2, 2],
            [6,  32, 3, 2],
            [6,  64, 4, 2],
            [6,  96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]

        # building first layer
        input_channel = _make_divisible(32 * width_mult, 4 if width_mult == 0.1 else 8)
        layers = [conv_3x3_bn(3, input_channel, 2)]
        # building inverted residual blocks
        block = InvertedResidual
        for t, c, n, s in self.cfgs:
            output_channel = _make_divisible(c * width_mult, 4 if width_mult == 0.1 else 8)
            for i in range(n):
                layers.append(block(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        self.features = nn.Sequential(*layers)
        # building last several layers
        output_channel = _make_divisible(1280 * width_mult, 4 if width_mult == 0.1 else 8) if width_mult > 1.0 else 1280
        self.conv = conv_1x1_bn(input_channel, output_channel)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Linear(output_channel, num_classes)

        self._initialize_weights()

    def forward(self, x):
        x = self.features(x)
        x = self.conv(x)
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.classifier(x)
        return x

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.data.normal_(0, 0.01)
                m.bias.data.zero_()

def mobilenetv2(**kwargs):
    """
    Constructs a MobileNet V2 model
    """
    return MobileNetV2(**kwargs)



# ---- utils/eval.py -----------------------------------------------------------------------------------------------

def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ---- utils/dataloaders.py (pytorch backend, CPU) ----------------------------------------------------------------

def fast_collate(batch):
    imgs = [img[0] for img in batch]
    targets = torch.tensor([target[1] for target in batch], dtype=torch.int64)
    w = imgs[0].shape[1]
    h = imgs[0].shape[0]
    tensor = torch.zeros( (len(imgs), 3, h, w), dtype=torch.uint8 )
    for i, img in enumerate(imgs):
        nump_array = np.asarray(img, dtype=np.uint8)
        if(nump_array.ndim < 3):
            nump_array = np.expand_dims(nump_array, axis=-1)
        nump_array = np.rollaxis(nump_array, 2)

        tensor[i] += torch.from_numpy(nump_array)

    return tensor, targets


class PrefetchedWrapper(object):
    def prefetched_loader(loader):
        mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).view(1,3,1,1)
        std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).view(1,3,1,1)

        first = True

        for next_input, next_target in loader:
            next_input = next_input.float()
            next_input = next_input.sub_(mean).div_(std)

            if not first:
                yield input, target
            else:
                first = False

            input = next_input
            target = next_target

        yield input, target

    def __init__(self, dataloader):
        self.dataloader = dataloader
        self.epoch = 0

    def __iter__(self):
        self.epoch += 1
        return PrefetchedWrapper.prefetched_loader(self.dataloader)


def make_images(gen, n):
    """Dominant-colour images (HWC uint8): red, green, blue or yellow with noise and a darker blob."""
    colours = torch.tensor([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]], dtype=torch.float32)
    labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
    imgs = []
    for i in range(n):
        img = colours[labels[i]].view(1, 1, 3) + torch.randn(RAW, RAW, 3, generator=gen) * 40
        s = int(torch.randint(8, 20, (1,), generator=gen))
        y, x = torch.randint(0, RAW - s + 1, (2,), generator=gen).tolist()
        img[y:y + s, x:x + s] *= 0.5
        imgs.append(img.clamp(0, 255).to(torch.uint8).numpy())
    return imgs, labels.tolist()


def random_resized_crop_flip(img, size, gen, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
    """transforms.RandomResizedCrop(size) then transforms.RandomHorizontalFlip() on an HWC uint8 array."""
    height, width = img.shape[:2]
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    top, left, h, w = 0, 0, height, width
    for _ in range(10):
        target_area = area * float(torch.empty(1).uniform_(scale[0], scale[1], generator=gen))
        aspect = math.exp(float(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=gen)))
        cw = round(math.sqrt(target_area * aspect))
        ch = round(math.sqrt(target_area / aspect))
        if 0 < cw <= width and 0 < ch <= height:
            top = int(torch.randint(0, height - ch + 1, (1,), generator=gen))
            left = int(torch.randint(0, width - cw + 1, (1,), generator=gen))
            h, w = ch, cw
            break
    t = torch.from_numpy(img[top:top + h, left:left + w]).permute(2, 0, 1).float()[None]
    t = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False)[0]
    if float(torch.rand(1, generator=gen)) < 0.5:
        t = t.flip(-1)
    return t.round().clamp(0, 255).permute(1, 2, 0).to(torch.uint8).numpy()


def resize_center_crop(img, size):
    """transforms.Resize(int(size / 0.875)) then transforms.CenterCrop(size)."""
    r = int(size / 0.875)
    t = torch.from_numpy(img).permute(2, 0, 1).float()[None]
    t = F.interpolate(t, size=(r, r), mode="bilinear", align_corners=False)[0]
    o = (r - size) // 2
    return t[:, o:o + size, o:o + size].round().clamp(0, 255).permute(1, 2, 0).to(torch.uint8).numpy()


class ImageList(torch.utils.data.Dataset):
    def __init__(self, imgs, labels, transform):
        self.imgs, self.labels, self.transform = imgs, labels, transform

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, index):
        return self.transform(self.imgs[index]), self.labels[index]


# ---- imagenet.py -------------------------------------------------------------------------------------------------

args = None


def adjust_learning_rate(optimizer, epoch, iteration, num_iter):
    lr = optimizer.param_groups[0]['lr']

    warmup_epoch = 5 if args.warmup else 0
    warmup_iter = warmup_epoch * num_iter
    current_iter = iteration + epoch * num_iter
    max_iter = args.epochs * num_iter

    if args.lr_decay == 'step':
        lr = args.lr * (args.gamma ** ((current_iter - warmup_iter) / (max_iter - warmup_iter)))
    elif args.lr_decay == 'cos':
        lr = args.lr * (1 + cos(pi * (current_iter - warmup_iter) / (max_iter - warmup_iter))) / 2
    elif args.lr_decay == 'linear':
        lr = args.lr * (1 - (current_iter - warmup_iter) / (max_iter - warmup_iter))
    elif args.lr_decay == 'schedule':
        count = sum([1 for s in args.schedule if s <= epoch])
        lr = args.lr * pow(args.gamma, count)
    else:
        raise ValueError('Unknown lr mode {}'.format(args.lr_decay))

    if epoch < warmup_epoch:
        lr = args.lr * current_iter / warmup_iter

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def validate(val_loader, val_loader_len, model, criterion):
    losses, top1, n = 0., 0., 0
    # switch to evaluate mode
    model.eval()

    for i, (input, target) in enumerate(val_loader):
        with torch.no_grad():
            # compute output
            output = model(input)
            loss = criterion(output, target)

        # measure accuracy and record loss
        prec1, prec5 = accuracy(output, target, topk=(1, 2))
        losses += loss.item() * input.size(0)
        top1 += prec1.item() * input.size(0)
        n += input.size(0)
    return (losses / n, top1 / n)


def _build(seed, bug=None):
    global args
    args = argparse.Namespace(
        data="synthetic", data_backend="pytorch", arch="mobilenetv2", workers=0, epochs=15, start_epoch=0,
        batch_size=16, lr=0.05, momentum=0.9, weight_decay=4e-5, print_freq=10, resume="", evaluate=False,
        pretrained=False, world_size=-1, rank=-1, seed=None, lr_decay="cos", step=30, schedule=[150, 225], gamma=0.1,
        warmup=False, checkpoint="checkpoints", width_mult=0.25, input_size=32, weight="",
    )
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    aug = torch.Generator().manual_seed(seed + 1)

    # create model
    model = mobilenetv2(width_mult=args.width_mult, num_classes=N_CLASSES)
    model = torch.nn.DataParallel(model)

    # define loss function (criterion) and optimizer
    criterion = nn.CrossEntropyLoss()

    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)

    train_imgs, train_labels = make_images(gen, args.batch_size * BATCHES_PER_EPOCH)
    val_imgs, val_labels = make_images(gen, 16)
    train_dataset = ImageList(train_imgs, train_labels, lambda img: random_resized_crop_flip(img, args.input_size, aug))
    val_dataset = ImageList(val_imgs, val_labels, lambda img: resize_center_crop(img, args.input_size))
    train_loader = PrefetchedWrapper(torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, collate_fn=fast_collate,
        generator=torch.Generator().manual_seed(seed)))
    train_loader_len = len(train_loader.dataloader)
    val_loader = PrefetchedWrapper(torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, num_workers=args.workers, collate_fn=fast_collate))
    val_loader_len = len(val_loader.dataloader)

    state = {"epoch": args.start_epoch, "it": None, "i": 0}

    def train_step():
        if state["it"] is None:
            # train(): switch to train mode at the start of the epoch
            if bug != "train_mode_not_restored":
                model.train()
            # bug "train_mode_not_restored": the epoch's model.train() left out; the module starts in train mode,
            # so the first epoch is right, and every epoch after the first validate trains in eval mode
            state["it"], state["i"] = iter(train_loader), 0
        epoch, i = state["epoch"], state["i"]
        input, target = next(state["it"])
        adjust_learning_rate(optimizer, epoch, i, train_loader_len)

        # compute output
        output = model(input)
        loss = criterion(output, target)

        # measure accuracy and record loss
        prec1, prec5 = accuracy(output, target, topk=(1, 2))

        # compute gradient and do SGD step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        state["i"] += 1
        if state["i"] == train_loader_len:
            # end of the epoch: evaluate on validation set
            validate(val_loader, val_loader_len, model, criterion)
            state["epoch"] += 1
            state["it"] = None
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            prec1, = accuracy(model(batch[0]), batch[1], topk=(1,))
        return float(prec1)

    first = next(iter(PrefetchedWrapper(torch.utils.data.DataLoader(
        ImageList(train_imgs, train_labels, lambda img: resize_center_crop(img, args.input_size)),
        batch_size=args.batch_size, collate_fn=fast_collate))))

    return Program(name="mobilenetv2_imagenet", model=model, batch=first, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader.dataloader)


build = functools.partial(_build)

BUGS = [
    # train()'s model.train() left out: after the first validate() the network trains in eval mode (BatchNorm on
    # its running statistics)
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("features.0.1",)),
    # optimizer.zero_grad() between backward and step: every update applies a zero gradient (whole-model step slip)
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
