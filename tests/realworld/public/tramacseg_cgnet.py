"""Semantic segmentation of Tramac/awesome-semantic-segmentation-pytorch: the repository's ``CGNet`` (Context Guided
Network: conv-BN-PReLU stem, input injection by average pooling, context guided blocks with local, dilated surrounding
and global (squeeze-excitation) features, residuals, a dropout + 1x1 head upsampled to the input size) trained by
``scripts/train.py``'s ``Trainer`` with its defaults: ``MixSoftmaxCrossEntropyLoss`` (cross-entropy with
``ignore_index=-1``; masks map the VOC boundary label 255 to -1), SGD lr 1e-4 with every module listed in the model's
``exclusive`` at 10x, momentum 0.9, weight decay 1e-4, ``WarmupPolyLR`` (power 0.9, no warm-up by default) stepped
each iteration before the forward, batch 4, validation every ``val_epoch`` epochs (pixel accuracy, mIoU).

Source: https://github.com/Tramac/awesome-semantic-segmentation-pytorch
Commit: d37d2a17221d2681ad454958cf06a1065e9b1f7f
Files: ``scripts/train.py`` (``Trainer``), ``core/models/cgnet.py``, ``core/nn/basic.py`` (``_ConvBNPReLU``,
``_BNPReLU``), ``core/utils/loss.py`` (``MixSoftmaxCrossEntropyLoss``, ``get_segmentation_loss``),
``core/utils/lr_scheduler.py`` (``WarmupPolyLR``), ``core/data/dataloader/pascal_voc.py`` (``_mask_transform``)
License: Apache-2.0 (full text in LICENSES/Tramac-awesome-semantic-segmentation-pytorch.txt)
Domain: vision, semantic segmentation (light-weight CGNet, ignore label)

Deviations from the original:
- PASCAL VOC is not here: 32 training and 8 validation 48x48 images are made from ``seed``: up to three rectangles of
  4 foreground classes (each class a colour, with noise) on a noisy background, the mask holding the class ids,
  0 for background and 255 on a one-pixel ring around each rectangle (VOC's boundary label); ``nclass`` 21 -> 5; the
  PIL random scale / crop / flip / blur of ``_sync_transform`` are left out (images are drawn at the crop size
  48 in place of 480); ``transforms.ToTensor`` and ``Normalize`` are written out;
- the samplers: ``make_batch_data_sampler``'s iteration-based sampler is a shuffled ``DataLoader`` re-iterated each
  epoch (``max_iters`` = 50 epochs x 8 iterations, as ``Trainer`` computes it); no distributed run, no
  ``SyncBatchNorm``, no ``reduce_loss_dict`` (one process), no checkpoints, no logging;
- sizes for 2 CPU cores: the images (above); stage 3 of ``N=21`` -> 7 blocks (``M=3`` kept);
- one ``train_step`` is one iteration of ``Trainer.train``; the validation runs every ``val_epoch`` (1) epochs, then
  ``self.model.train()`` as written; ``eval_fn`` is the validation's pixel accuracy on a batch (``model.eval()``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PIE808, C408, UP032  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NCLASS, IMG, N_TRAIN, N_VAL, N_BLOCKS = 5, 48, 32, 8, 7


# ---- core/nn/basic.py ----------------------------------------------------------------------------------------

class _ConvBNPReLU(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, norm_layer=nn.BatchNorm2d, **kwargs):
        super(_ConvBNPReLU, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias=False)
        self.bn = norm_layer(out_channels)
        self.prelu = nn.PReLU(out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = self.prelu(x)
        return x


class _BNPReLU(nn.Module):
    def __init__(self, out_channels, norm_layer=nn.BatchNorm2d, **kwargs):
        super(_BNPReLU, self).__init__()
        self.bn = norm_layer(out_channels)
        self.prelu = nn.PReLU(out_channels)

    def forward(self, x):
        x = self.bn(x)
        x = self.prelu(x)
        return x


# ---- core/models/cgnet.py ------------------------------------------------------------------------------------

class CGNet(nn.Module):
    def __init__(self, nclass, backbone='', aux=False, jpu=False, pretrained_base=True, M=3, N=21, bug=None,
                 **kwargs):
        super(CGNet, self).__init__()
        # stage 1
        self.stage1_0 = _ConvBNPReLU(3, 32, 3, 2, 1, **kwargs)
        self.stage1_1 = _ConvBNPReLU(32, 32, 3, 1, 1, **kwargs)
        self.stage1_2 = _ConvBNPReLU(32, 32, 3, 1, 1, **kwargs)

        self.sample1 = _InputInjection(1)
        self.sample2 = _InputInjection(2)
        self.bn_prelu1 = _BNPReLU(32 + 3, **kwargs)

        # stage 2
        self.stage2_0 = ContextGuidedBlock(32 + 3, 64, dilation=2, reduction=8, down=True, residual=False, **kwargs)
        self.stage2 = nn.ModuleList()
        for i in range(0, M - 1):
            self.stage2.append(ContextGuidedBlock(64, 64, dilation=2, reduction=8, **kwargs))
        self.bn_prelu2 = _BNPReLU(128 + 3, **kwargs)

        # stage 3
        self.stage3_0 = ContextGuidedBlock(128 + 3, 128, dilation=4, reduction=16, down=True, residual=False, **kwargs)
        self.stage3 = nn.ModuleList()
        for i in range(0, N - 1):
            self.stage3.append(ContextGuidedBlock(128, 128, dilation=4, reduction=16, **kwargs))
        self.bn_prelu3 = _BNPReLU(256, **kwargs)

        self.head = nn.Sequential(
            nn.Dropout2d(0.1, False),
            nn.Conv2d(256, nclass, 1))

        exclusive = ['stage1_0', 'stage1_1', 'stage1_2', 'sample1', 'sample2',
                     'bn_prelu1', 'stage2_0', 'stage2', 'bn_prelu2', 'stage3_0',
                     'stage3', 'bn_prelu3', 'head']
        if bug == "head_left_out_of_exclusive":
            exclusive.remove('head')
        self.__setattr__('exclusive', exclusive)

    def forward(self, x):
        size = x.size()[2:]
        # stage1
        out0 = self.stage1_0(x)
        out0 = self.stage1_1(out0)
        out0 = self.stage1_2(out0)

        inp1 = self.sample1(x)
        inp2 = self.sample2(x)

        # stage 2
        out0_cat = self.bn_prelu1(torch.cat([out0, inp1], dim=1))
        out1_0 = self.stage2_0(out0_cat)
        for i, layer in enumerate(self.stage2):
            if i == 0:
                out1 = layer(out1_0)
            else:
                out1 = layer(out1)
        out1_cat = self.bn_prelu2(torch.cat([out1, out1_0, inp2], dim=1))

        # stage 3
        out2_0 = self.stage3_0(out1_cat)
        for i, layer in enumerate(self.stage3):
            if i == 0:
                out2 = layer(out2_0)
            else:
                out2 = layer(out2)
        out2_cat = self.bn_prelu3(torch.cat([out2_0, out2], dim=1))

        outputs = []
        out = self.head(out2_cat)
        out = F.interpolate(out, size, mode='bilinear', align_corners=True)
        outputs.append(out)
        return tuple(outputs)


class _ChannelWiseConv(nn.Module):
    def __init__(self, in_channels, out_channels, dilation=1, **kwargs):
        super(_ChannelWiseConv, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, 1, dilation, dilation, groups=in_channels, bias=False)

    def forward(self, x):
        x = self.conv(x)
        return x


class _FGlo(nn.Module):
    def __init__(self, in_channels, reduction=16, **kwargs):
        super(_FGlo, self).__init__()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Linear(in_channels, in_channels // reduction),
            nn.ReLU(True),
            nn.Linear(in_channels // reduction, in_channels),
            nn.Sigmoid())

    def forward(self, x):
        n, c, _, _ = x.size()
        out = self.gap(x).view(n, c)
        out = self.fc(out).view(n, c, 1, 1)
        return x * out


class _InputInjection(nn.Module):
    def __init__(self, ratio):
        super(_InputInjection, self).__init__()
        self.pool = nn.ModuleList()
        for i in range(0, ratio):
            self.pool.append(nn.AvgPool2d(3, 2, 1))

    def forward(self, x):
        for pool in self.pool:
            x = pool(x)
        return x


class ContextGuidedBlock(nn.Module):
    def __init__(self, in_channels, out_channels, dilation=2, reduction=16, down=False,
                 residual=True, norm_layer=nn.BatchNorm2d, **kwargs):
        super(ContextGuidedBlock, self).__init__()
        inter_channels = out_channels // 2 if not down else out_channels
        if down:
            self.conv = _ConvBNPReLU(in_channels, inter_channels, 3, 2, 1, norm_layer=norm_layer, **kwargs)
            self.reduce = nn.Conv2d(inter_channels * 2, out_channels, 1, bias=False)
        else:
            self.conv = _ConvBNPReLU(in_channels, inter_channels, 1, 1, 0, norm_layer=norm_layer, **kwargs)
        self.f_loc = _ChannelWiseConv(inter_channels, inter_channels, **kwargs)
        self.f_sur = _ChannelWiseConv(inter_channels, inter_channels, dilation, **kwargs)
        self.bn = norm_layer(inter_channels * 2)
        self.prelu = nn.PReLU(inter_channels * 2)
        self.f_glo = _FGlo(out_channels, reduction, **kwargs)
        self.down = down
        self.residual = residual

    def forward(self, x):
        out = self.conv(x)
        loc = self.f_loc(out)
        sur = self.f_sur(out)

        joi_feat = torch.cat([loc, sur], dim=1)
        joi_feat = self.prelu(self.bn(joi_feat))
        if self.down:
            joi_feat = self.reduce(joi_feat)

        out = self.f_glo(joi_feat)
        if self.residual:
            out = out + x

        return out


# ---- core/utils/loss.py, core/utils/lr_scheduler.py ----------------------------------------------------------

class MixSoftmaxCrossEntropyLoss(nn.CrossEntropyLoss):
    def __init__(self, aux=True, aux_weight=0.2, ignore_index=-1, **kwargs):
        super(MixSoftmaxCrossEntropyLoss, self).__init__(ignore_index=ignore_index)
        self.aux = aux
        self.aux_weight = aux_weight

    def _aux_forward(self, *inputs, **kwargs):
        *preds, target = tuple(inputs)

        loss = super(MixSoftmaxCrossEntropyLoss, self).forward(preds[0], target)
        for i in range(1, len(preds)):
            aux_loss = super(MixSoftmaxCrossEntropyLoss, self).forward(preds[i], target)
            loss += self.aux_weight * aux_loss
        return loss

    def forward(self, *inputs, **kwargs):
        preds, target = tuple(inputs)
        inputs = tuple(list(preds) + [target])
        if self.aux:
            return dict(loss=self._aux_forward(*inputs))
        else:
            return dict(loss=super(MixSoftmaxCrossEntropyLoss, self).forward(*inputs))


class WarmupPolyLR(torch.optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer, target_lr=0, max_iters=0, power=0.9, warmup_factor=1.0 / 3,
                 warmup_iters=500, warmup_method='linear', last_epoch=-1):
        if warmup_method not in ("constant", "linear"):
            raise ValueError(
                "Only 'constant' or 'linear' warmup_method accepted "
                "got {}".format(warmup_method))

        self.target_lr = target_lr
        self.max_iters = max_iters
        self.power = power
        self.warmup_factor = warmup_factor
        self.warmup_iters = warmup_iters
        self.warmup_method = warmup_method

        super(WarmupPolyLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        N = self.max_iters - self.warmup_iters
        T = self.last_epoch - self.warmup_iters
        if self.last_epoch < self.warmup_iters:
            if self.warmup_method == 'constant':
                warmup_factor = self.warmup_factor
            elif self.warmup_method == 'linear':
                alpha = float(self.last_epoch) / self.warmup_iters
                warmup_factor = self.warmup_factor * (1 - alpha) + alpha
            else:
                raise ValueError("Unknown warmup type.")
            return [self.target_lr + (base_lr - self.target_lr) * warmup_factor for base_lr in self.base_lrs]
        factor = pow(1 - T / N, self.power)
        return [self.target_lr + (base_lr - self.target_lr) * factor for base_lr in self.base_lrs]


# ---- the data: synthetic VOC-like images, pascal_voc.py's _mask_transform -----------------------------------

def _images_and_masks(gen, n):
    colours = torch.tensor([[0.9, 0.1, 0.1], [0.1, 0.8, 0.2], [0.2, 0.3, 0.9], [0.9, 0.8, 0.1]])
    imgs = 0.45 + 0.12 * torch.randn(n, IMG, IMG, 3, generator=gen)
    masks = np.zeros((n, IMG, IMG), dtype=np.uint8)
    for i in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            c = int(torch.randint(0, 4, (1,), generator=gen))
            y, x = torch.randint(2, IMG - 22, (2,), generator=gen).tolist()
            h, w = torch.randint(10, 20, (2,), generator=gen).tolist()
            imgs[i, y:y + h, x:x + w] = colours[c] + 0.08 * torch.randn(h, w, 3, generator=gen)
            masks[i, y - 1:y + h + 1, x - 1:x + w + 1] = 255
            masks[i, y:y + h, x:x + w] = c + 1
    imgs = (imgs.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return imgs, masks


class VOCSegmentation(data.Dataset):
    NUM_CLASS = NCLASS

    def __init__(self, images, masks, transform=None, bug=None):
        self.images, self.masks, self.transform = images, masks, transform
        self.num_class = self.NUM_CLASS
        self.mask_order = list(range(len(masks)))
        if bug == "masks_listed_out_of_order":  # the mask list sorted apart from the image list
            self.mask_order = self.mask_order[1:] + self.mask_order[:1]

    def __getitem__(self, index):
        img, mask = self.images[index], self.masks[self.mask_order[index]]
        mask = self._mask_transform(mask)
        if self.transform is not None:
            img = self.transform(img)
        return img, mask, str(index)

    def __len__(self):
        return len(self.images)

    def _mask_transform(self, mask):
        target = np.array(mask).astype('int32')
        target[target == 255] = -1
        return torch.from_numpy(target).long()


def input_transform(img):
    """(port) ``transforms.ToTensor()`` then ``transforms.Normalize([.485, .456, .406], [.229, .224, .225])``."""
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).float().div(255)
    return (t - torch.tensor([.485, .456, .406])[:, None, None]) / torch.tensor([.229, .224, .225])[:, None, None]


# ---- scripts/train.py ----------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    args = dict(lr=1e-4, momentum=0.9, weight_decay=1e-4, batch_size=4, epochs=50, aux=False, aux_weight=0.4,
                warmup_iters=0, warmup_factor=1.0 / 3, warmup_method='linear', val_epoch=1)

    train_dataset = VOCSegmentation(*_images_and_masks(gen, N_TRAIN), transform=input_transform, bug=bug)
    val_dataset = VOCSegmentation(*_images_and_masks(gen, N_VAL), transform=input_transform)
    iters_per_epoch = len(train_dataset) // (1 * args['batch_size'])
    max_iters = args['epochs'] * iters_per_epoch
    train_loader = data.DataLoader(dataset=train_dataset, batch_size=args['batch_size'], shuffle=True, drop_last=True,
                                   generator=torch.Generator().manual_seed(seed))
    val_loader = data.DataLoader(dataset=val_dataset, batch_size=args['batch_size'], shuffle=False)

    model = CGNet(train_dataset.NUM_CLASS, backbone='', aux=args['aux'], jpu=False, N=N_BLOCKS,
                  norm_layer=nn.BatchNorm2d, bug=bug)
    criterion = MixSoftmaxCrossEntropyLoss(aux=args['aux'], aux_weight=args['aux_weight'], ignore_index=-1)

    # optimizer, for model just includes pretrained, head and auxlayer
    params_list = list()
    if hasattr(model, 'pretrained'):
        params_list.append({'params': model.pretrained.parameters(), 'lr': args['lr']})
    if hasattr(model, 'exclusive'):
        for module in model.exclusive:
            params_list.append({'params': getattr(model, module).parameters(), 'lr': args['lr'] * 10})
    optimizer = torch.optim.SGD(params_list,
                                lr=args['lr'],
                                momentum=args['momentum'],
                                weight_decay=args['weight_decay'])
    lr_scheduler = WarmupPolyLR(optimizer,
                                max_iters=max_iters,
                                power=0.9,
                                warmup_factor=args['warmup_factor'],
                                warmup_iters=args['warmup_iters'],
                                warmup_method=args['warmup_method'])

    def pixel_accuracy(output, target):
        predict = torch.argmax(output, 1)
        labeled = target >= 0
        return float(((predict == target) & labeled).sum()) / max(float(labeled.sum()), 1.0)

    def validation():
        model.eval()
        for i, (image, target, filename) in enumerate(val_loader):
            with torch.no_grad():
                outputs = model(image)
            pixel_accuracy(outputs[0], target)

    state = {"it": None, "iteration": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_loader)
            return next(state["it"])

    model.train()

    def train_step():
        images, targets, _ = next_batch()
        state["iteration"] += 1
        iteration = state["iteration"]
        lr_scheduler.step()

        outputs = model(images)
        loss_dict = criterion(outputs, targets)

        losses = sum(loss for loss in loss_dict.values())

        optimizer.zero_grad()
        losses.backward()
        optimizer.step()

        if iteration % (args['val_epoch'] * iters_per_epoch) == 0:
            validation()
            model.train()
        return losses.item()

    def eval_fn(model, batch):
        image, target = batch
        model.eval()
        with torch.no_grad():
            acc = pixel_accuracy(model(image)[0], target)
        model.train()
        return acc

    images, targets, _ = next(iter(data.DataLoader(val_dataset, batch_size=args['batch_size'])))
    return Program(name="tramacseg_cgnet", model=model, batch=(images, targets),
                   loss_fn=lambda outputs, targets: sum(criterion(outputs, targets).values()),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # A module left out of the model's ``exclusive`` list (here the head): ``Trainer`` builds the SGD parameter groups
    # from that list only, so the classifier keeps its random initialization.
    Bug("head_left_out_of_exclusive", functools.partial(_build, bug="head_left_out_of_exclusive"), "four_structures",
        ("head",)),
    # The mask file list not in the image list's order: every image is trained against another image's mask.
    Bug("masks_listed_out_of_order", functools.partial(_build, bug="masks_listed_out_of_order"), "learning_ledger",
        ("TASK",)),
]
