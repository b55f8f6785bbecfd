"""CenterNet ("Objects as Points") with a ResNet-50 backbone, Bubbliiiing's centernet-pytorch: ResNet-50 features
(stride 32), three stride-2 transposed-convolution stages to stride 4, three heads (class heatmap through
``sigmoid_``, box width/height, centre offset), targets drawn as Gaussians of ``gaussian_radius`` at box centres,
the penalty-reduced focal loss over the heatmap + ``0.1 *`` masked L1 on sizes + masked L1 on offsets, Adam
(betas (0.9, 0.999)) at a batch-scaled lr with the YOLOX warm-up/cosine schedule set per epoch, and the backbone
frozen for the first ``Freeze_Epoch`` epochs; PIL-based random rescale/flip/HSV augmentation.

Source: https://github.com/bubbliiiing/centernet-pytorch
Commit: 8c2bcc27630e6c5a75be5646525b52c9b7aae531
Files: train.py, nets/centernet.py, nets/resnet50.py, nets/centernet_training.py, utils/dataloader.py,
utils/utils.py, utils/utils_fit.py
License: MIT (Copyright (c) 2020 Bubbliiiing; full text in LICENSES/bubbliiiing-centernet-pytorch.txt)
Domain: vision, object detection (anchor-free, centre heatmap head)

Deviations from the original:
- sizes: input_shape 512x512 -> 64x64 (output 16x16); the ResNet-50 keeps its Bottleneck layout [3, 4, 6, 3] at
  base width 64 -> 8 (``WIDTH``), so the decoder's input 2048 -> 256, its filters [256, 128, 64] -> [32, 16, 8] and
  the heads' 64 channels -> 8; num_classes 20 (VOC) -> 3; Freeze_Epoch 50 -> 3, UnFreeze_Epoch 100 -> 8,
  Freeze_batch_size 16 and Unfreeze_batch_size 8 kept; the ``wanted_step`` warning is left out;
- data: the VOC annotation lines (image file + boxes) are replaced by 64 synthetic 80x64 RGB images made from
  ``seed``: 1-3 filled rectangles of 3 class colours (with a darker border) on a noisy grey background, the boxes as
  ``[x1, y1, x2, y2, cls]``; ``get_random_data`` takes the image and boxes instead of a line and opening a file;
  ``model_path`` (VOC weights) is not loaded and ``pretrained`` is False as configured;
- ``get_random_data``'s HSV jitter uses PIL's HSV conversion instead of cv2's (cv2 is not installed here): the same
  per-channel lookup tables, with the hue wrapped at PIL's 256 instead of cv2's 180; ``np.random`` is seeded with
  ``seed`` (the augmentation draws from it);
- CUDA, DataParallel/DDP, fp16, the loss history, evaluation callback, checkpoints and tqdm are dropped (CPU only);
- one ``train_step`` is one iteration of ``fit_one_epoch``'s resnet50 branch; at each epoch's start
  ``set_optimizer_lr`` runs, and at ``Freeze_Epoch`` the unfreeze block (batch size, lr limits, scheduler, loader,
  ``unfreeze_backbone``) runs as in ``train.py``; ``print`` in ``weights_init`` is not reached (it is not called by
  train.py);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, C410

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from PIL import Image
from torch.utils.data import DataLoader
from torch.utils.data.dataset import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH = 8


# nets/resnet50.py
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False) # change
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, # change
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
    def __init__(self, block, layers, num_classes=1000):
        self.inplanes = WIDTH
        super(ResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, WIDTH, kernel_size=7, stride=2, padding=3,bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True) # change

        self.layer1 = self._make_layer(block, WIDTH, layers[0])

        self.layer2 = self._make_layer(block, 2 * WIDTH, layers[1], stride=2)

        self.layer3 = self._make_layer(block, 4 * WIDTH, layers[2], stride=2)

        self.layer4 = self._make_layer(block, 8 * WIDTH, layers[3], stride=2)

        self.avgpool = nn.AvgPool2d(7)
        self.fc = nn.Linear(8 * WIDTH * block.expansion, num_classes)

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


def resnet50(pretrained = True):
    model = ResNet(Bottleneck, [3, 4, 6, 3])
    features = list([model.conv1, model.bn1, model.relu, model.maxpool, model.layer1, model.layer2, model.layer3, model.layer4])
    features = nn.Sequential(*features)
    return features


class resnet50_Decoder(nn.Module):
    def __init__(self, inplanes, bn_momentum=0.1):
        super(resnet50_Decoder, self).__init__()
        self.bn_momentum = bn_momentum
        self.inplanes = inplanes
        self.deconv_with_bias = False

        self.deconv_layers = self._make_deconv_layer(
            num_layers=3,
            num_filters=[4 * WIDTH, 2 * WIDTH, WIDTH],
            num_kernels=[4, 4, 4],
        )

    def _make_deconv_layer(self, num_layers, num_filters, num_kernels):
        layers = []
        for i in range(num_layers):
            kernel = num_kernels[i]
            planes = num_filters[i]

            layers.append(
                nn.ConvTranspose2d(
                    in_channels=self.inplanes,
                    out_channels=planes,
                    kernel_size=kernel,
                    stride=2,
                    padding=1,
                    output_padding=0,
                    bias=self.deconv_with_bias))
            layers.append(nn.BatchNorm2d(planes, momentum=self.bn_momentum))
            layers.append(nn.ReLU(inplace=True))
            self.inplanes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        return self.deconv_layers(x)


class resnet50_Head(nn.Module):
    def __init__(self, num_classes=80, channel=WIDTH, bn_momentum=0.1):
        super(resnet50_Head, self).__init__()
        self.cls_head = nn.Sequential(
            nn.Conv2d(WIDTH, channel,
                      kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(WIDTH, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, num_classes,
                      kernel_size=1, stride=1, padding=0))
        self.wh_head = nn.Sequential(
            nn.Conv2d(WIDTH, channel,
                      kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(WIDTH, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, 2,
                      kernel_size=1, stride=1, padding=0))

        self.reg_head = nn.Sequential(
            nn.Conv2d(WIDTH, channel,
                      kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(WIDTH, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, 2,
                      kernel_size=1, stride=1, padding=0))

    def forward(self, x):
        hm = self.cls_head(x).sigmoid_()
        wh = self.wh_head(x)
        offset = self.reg_head(x)
        return hm, wh, offset


# nets/centernet.py
class CenterNet_Resnet50(nn.Module):
    def __init__(self, num_classes = 20, pretrained = False):
        super(CenterNet_Resnet50, self).__init__()
        self.pretrained = pretrained
        # 512,512,3 -> 16,16,2048
        self.backbone = resnet50(pretrained = pretrained)
        # 16,16,2048 -> 128,128,64
        self.decoder = resnet50_Decoder(8 * WIDTH * 4)
        self.head = resnet50_Head(channel=WIDTH, num_classes=num_classes)

        self._init_weights()

    def freeze_backbone(self):
        for param in self.backbone.parameters():
            param.requires_grad = False

    def unfreeze_backbone(self):
        for param in self.backbone.parameters():
            param.requires_grad = True

    def _init_weights(self):
        if not self.pretrained:
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                    m.weight.data.normal_(0, math.sqrt(2. / n))
                elif isinstance(m, nn.BatchNorm2d):
                    m.weight.data.fill_(1)
                    m.bias.data.zero_()

        self.head.cls_head[-1].weight.data.fill_(0)
        self.head.cls_head[-1].bias.data.fill_(-2.19)

    def forward(self, x):
        feat = self.backbone(x)
        return self.head(self.decoder(feat))


# nets/centernet_training.py
def focal_loss(pred, target):
    pred = pred.permute(0, 2, 3, 1)

    pos_inds = target.eq(1).float()
    neg_inds = target.lt(1).float()
    neg_weights = torch.pow(1 - target, 4)

    pred = torch.clamp(pred, 1e-6, 1 - 1e-6)
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds
    neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg_inds

    num_pos = pos_inds.float().sum()
    pos_loss = pos_loss.sum()
    neg_loss = neg_loss.sum()

    if num_pos == 0:
        loss = -neg_loss
    else:
        loss = -(pos_loss + neg_loss) / num_pos
    return loss


def reg_l1_loss(pred, target, mask):
    pred = pred.permute(0,2,3,1)
    expand_mask = torch.unsqueeze(mask,-1).repeat(1,1,1,2)

    loss = F.l1_loss(pred * expand_mask, target * expand_mask, reduction='sum')
    loss = loss / (mask.sum() + 1e-4)
    return loss


def get_lr_scheduler(lr_decay_type, lr, min_lr, total_iters, warmup_iters_ratio = 0.05, warmup_lr_ratio = 0.1, no_aug_iter_ratio = 0.05, step_num = 10):
    def yolox_warm_cos_lr(lr, min_lr, total_iters, warmup_total_iters, warmup_lr_start, no_aug_iter, iters):
        if iters <= warmup_total_iters:
            # lr = (lr - warmup_lr_start) * iters / float(warmup_total_iters) + warmup_lr_start
            lr = (lr - warmup_lr_start) * pow(iters / float(warmup_total_iters), 2) + warmup_lr_start
        elif iters >= total_iters - no_aug_iter:
            lr = min_lr
        else:
            lr = min_lr + 0.5 * (lr - min_lr) * (
                1.0 + math.cos(math.pi* (iters - warmup_total_iters) / (total_iters - warmup_total_iters - no_aug_iter))
            )
        return lr

    def step_lr(lr, decay_rate, step_size, iters):
        if step_size < 1:
            raise ValueError("step_size must above 1.")
        n       = iters // step_size
        out_lr  = lr * decay_rate ** n
        return out_lr

    if lr_decay_type == "cos":
        warmup_total_iters  = min(max(warmup_iters_ratio * total_iters, 1), 3)
        warmup_lr_start     = max(warmup_lr_ratio * lr, 1e-6)
        no_aug_iter         = min(max(no_aug_iter_ratio * total_iters, 1), 15)
        func = partial(yolox_warm_cos_lr ,lr, min_lr, total_iters, warmup_total_iters, warmup_lr_start, no_aug_iter)
    else:
        decay_rate  = (min_lr / lr) ** (1 / (step_num - 1))
        step_size   = total_iters / step_num
        func = partial(step_lr, lr, decay_rate, step_size)

    return func


def set_optimizer_lr(optimizer, lr_scheduler_func, epoch):
    lr = lr_scheduler_func(epoch)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


# utils/utils.py
def preprocess_input(image):
    image   = np.array(image,dtype = np.float32)[:, :, ::-1]
    mean    = [0.40789655, 0.44719303, 0.47026116]
    std     = [0.2886383, 0.27408165, 0.27809834]
    return (image / 255. - mean) / std


# utils/dataloader.py
def draw_gaussian(heatmap, center, radius, k=1):
    diameter = 2 * radius + 1
    gaussian = gaussian2D((diameter, diameter), sigma=diameter / 6)

    x, y = int(center[0]), int(center[1])

    height, width = heatmap.shape[0:2]

    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)

    masked_heatmap = heatmap[y - top:y + bottom, x - left:x + right]
    masked_gaussian = gaussian[radius - top:radius + bottom, radius - left:radius + right]
    if min(masked_gaussian.shape) > 0 and min(masked_heatmap.shape) > 0:  # TODO debug
        np.maximum(masked_heatmap, masked_gaussian * k, out=masked_heatmap)
    return heatmap


def gaussian2D(shape, sigma=1):
    m, n = [(ss - 1.) / 2. for ss in shape]
    y, x = np.ogrid[-m:m + 1, -n:n + 1]

    h = np.exp(-(x * x + y * y) / (2 * sigma * sigma))
    h[h < np.finfo(h.dtype).eps * h.max()] = 0
    return h


def gaussian_radius(det_size, min_overlap=0.7):
    height, width = det_size

    a1 = 1
    b1 = (height + width)
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    sq1 = np.sqrt(b1 ** 2 - 4 * a1 * c1)
    r1 = (b1 + sq1) / 2

    a2 = 4
    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    sq2 = np.sqrt(b2 ** 2 - 4 * a2 * c2)
    r2 = (b2 + sq2) / 2

    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    sq3 = np.sqrt(b3 ** 2 - 4 * a3 * c3)
    r3 = (b3 + sq3) / 2
    return min(r1, r2, r3)


class CenternetDataset(Dataset):
    def __init__(self, annotation_lines, input_shape, num_classes, train, bug=None):
        super(CenternetDataset, self).__init__()
        self.annotation_lines   = annotation_lines
        self.length             = len(self.annotation_lines)

        self.input_shape        = input_shape
        self.output_shape       = (int(input_shape[0]/4) , int(input_shape[1]/4))
        self.num_classes        = num_classes
        self.train              = train
        self.bug                = bug

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        index = index % self.length

        image, box      = self.get_random_data(self.annotation_lines[index], self.input_shape, random = self.train)

        batch_hm        = np.zeros((self.output_shape[0], self.output_shape[1], self.num_classes), dtype=np.float32)
        batch_wh        = np.zeros((self.output_shape[0], self.output_shape[1], 2), dtype=np.float32)
        batch_reg       = np.zeros((self.output_shape[0], self.output_shape[1], 2), dtype=np.float32)
        batch_reg_mask  = np.zeros((self.output_shape[0], self.output_shape[1]), dtype=np.float32)

        if len(box) != 0:
            boxes = np.array(box[:, :4],dtype=np.float32)
            boxes[:, [0, 2]] = np.clip(boxes[:, [0, 2]] / self.input_shape[1] * self.output_shape[1], 0, self.output_shape[1] - 1)
            boxes[:, [1, 3]] = np.clip(boxes[:, [1, 3]] / self.input_shape[0] * self.output_shape[0], 0, self.output_shape[0] - 1)

        for i in range(len(box)):
            bbox    = boxes[i].copy()
            cls_id  = int(box[i, -1])

            h, w = bbox[3] - bbox[1], bbox[2] - bbox[0]
            if h > 0 and w > 0:
                radius = gaussian_radius((math.ceil(h), math.ceil(w)))
                radius = max(0, int(radius))
                ct = np.array([(bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2], dtype=np.float32)
                ct_int = ct.astype(np.int32)
                batch_hm[:, :, cls_id] = draw_gaussian(batch_hm[:, :, cls_id], ct_int, radius)
                if self.bug == "wh_written_as_hw":
                    batch_wh[ct_int[1], ct_int[0]] = 1. * h, 1. * w
                else:
                    batch_wh[ct_int[1], ct_int[0]] = 1. * w, 1. * h
                batch_reg[ct_int[1], ct_int[0]] = ct - ct_int
                batch_reg_mask[ct_int[1], ct_int[0]] = 1

        image = np.transpose(preprocess_input(image), (2, 0, 1))

        return image, batch_hm, batch_wh, batch_reg, batch_reg_mask

    def rand(self, a=0, b=1):
        return np.random.rand()*(b-a) + a

    def get_random_data(self, annotation_line, input_shape, jitter=.3, hue=.1, sat=0.7, val=0.4, random=True):
        image, box = annotation_line  # (the synthetic image and its boxes, instead of a file name and box text)
        box = box.copy()
        iw, ih  = image.size
        h, w    = input_shape

        if not random:
            scale = min(w/iw, h/ih)
            nw = int(iw*scale)
            nh = int(ih*scale)
            dx = (w-nw)//2
            dy = (h-nh)//2

            image       = image.resize((nw,nh), Image.BICUBIC)
            new_image   = Image.new('RGB', (w,h), (128,128,128))
            new_image.paste(image, (dx, dy))
            image_data  = np.array(new_image, np.float32)

            if len(box)>0:
                np.random.shuffle(box)
                box[:, [0,2]] = box[:, [0,2]]*nw/iw + dx
                box[:, [1,3]] = box[:, [1,3]]*nh/ih + dy
                box[:, 0:2][box[:, 0:2]<0] = 0
                box[:, 2][box[:, 2]>w] = w
                box[:, 3][box[:, 3]>h] = h
                box_w = box[:, 2] - box[:, 0]
                box_h = box[:, 3] - box[:, 1]
                box = box[np.logical_and(box_w>1, box_h>1)] # discard invalid box

            return image_data, box

        new_ar = w/h * self.rand(1-jitter,1+jitter) / self.rand(1-jitter,1+jitter)
        scale = self.rand(.25, 2)
        if new_ar < 1:
            nh = int(scale*h)
            nw = int(nh*new_ar)
        else:
            nw = int(scale*w)
            nh = int(nw/new_ar)
        image = image.resize((nw,nh), Image.BICUBIC)

        dx = int(self.rand(0, w-nw))
        dy = int(self.rand(0, h-nh))
        new_image = Image.new('RGB', (w,h), (128,128,128))
        new_image.paste(image, (dx, dy))
        image = new_image

        flip = self.rand()<.5
        if flip: image = image.transpose(Image.FLIP_LEFT_RIGHT)

        image_data      = np.array(image, np.uint8)
        r               = np.random.uniform(-1, 1, 3) * [hue, sat, val] + 1
        # (cv2.cvtColor to HSV / cv2.LUT / back, written with PIL's HSV: hue wraps at 256 there)
        hsv             = np.array(Image.fromarray(image_data).convert('HSV'))
        dtype           = image_data.dtype
        x       = np.arange(0, 256, dtype=r.dtype)
        lut_hue = ((x * r[0]) % 256).astype(dtype)
        lut_sat = np.clip(x * r[1], 0, 255).astype(dtype)
        lut_val = np.clip(x * r[2], 0, 255).astype(dtype)

        hsv = np.stack([lut_hue[hsv[..., 0]], lut_sat[hsv[..., 1]], lut_val[hsv[..., 2]]], axis=-1)
        image_data = np.array(Image.fromarray(hsv, 'HSV').convert('RGB'))

        if len(box)>0:
            np.random.shuffle(box)
            box[:, [0,2]] = box[:, [0,2]]*nw/iw + dx
            box[:, [1,3]] = box[:, [1,3]]*nh/ih + dy
            if flip: box[:, [0,2]] = w - box[:, [2,0]]
            box[:, 0:2][box[:, 0:2]<0] = 0
            box[:, 2][box[:, 2]>w] = w
            box[:, 3][box[:, 3]>h] = h
            box_w = box[:, 2] - box[:, 0]
            box_h = box[:, 3] - box[:, 1]
            box = box[np.logical_and(box_w>1, box_h>1)]

        return image_data, box


# DataLoader中collate_fn使用
def centernet_dataset_collate(batch):
    imgs, batch_hms, batch_whs, batch_regs, batch_reg_masks = [], [], [], [], []

    for img, batch_hm, batch_wh, batch_reg, batch_reg_mask in batch:
        imgs.append(img)
        batch_hms.append(batch_hm)
        batch_whs.append(batch_wh)
        batch_regs.append(batch_reg)
        batch_reg_masks.append(batch_reg_mask)

    imgs            = torch.from_numpy(np.array(imgs)).type(torch.FloatTensor)
    batch_hms       = torch.from_numpy(np.array(batch_hms)).type(torch.FloatTensor)
    batch_whs       = torch.from_numpy(np.array(batch_whs)).type(torch.FloatTensor)
    batch_regs      = torch.from_numpy(np.array(batch_regs)).type(torch.FloatTensor)
    batch_reg_masks = torch.from_numpy(np.array(batch_reg_masks)).type(torch.FloatTensor)
    return imgs, batch_hms, batch_whs, batch_regs, batch_reg_masks


COLOURS = [(220, 40, 40), (40, 200, 60), (50, 70, 230)]


def synthetic_lines(seed, n=64, iw=80, ih=64):
    """(PIL image, boxes [x1, y1, x2, y2, cls]) pairs: 1-3 filled rectangles of a class colour with a dark border."""
    gen = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        img = np.clip(128 + 20 * gen.standard_normal((ih, iw, 3)), 0, 255)
        boxes = []
        for _ in range(int(gen.integers(1, 4))):
            bw, bh = int(gen.integers(12, 36)), int(gen.integers(12, 30))
            x1, y1 = int(gen.integers(0, iw - bw)), int(gen.integers(0, ih - bh))
            c = int(gen.integers(0, 3))
            img[y1:y1 + bh, x1:x1 + bw] = 40
            img[y1 + 2:y1 + bh - 2, x1 + 2:x1 + bw - 2] = COLOURS[c]
            boxes.append([x1, y1, x1 + bw, y1 + bh, c])
        lines.append((Image.fromarray(img.astype(np.uint8)), np.array(boxes, dtype=np.int64)))
    return lines


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    input_shape     = [64, 64]
    pretrained      = False
    Init_Epoch          = 0
    Freeze_Epoch        = 3
    Freeze_batch_size   = 16
    UnFreeze_Epoch      = 8
    Unfreeze_batch_size = 8
    Freeze_Train        = True
    Init_lr             = 5e-4
    Min_lr              = Init_lr * 0.01
    optimizer_type      = "adam"
    momentum            = 0.9
    weight_decay        = 0
    lr_decay_type       = 'cos'
    num_classes         = 3

    model = CenterNet_Resnet50(num_classes, pretrained = pretrained)
    model_train     = model.train()

    train_lines = synthetic_lines(seed)
    num_train   = len(train_lines)

    UnFreeze_flag = False
    if Freeze_Train:
        model.freeze_backbone()
    batch_size = Freeze_batch_size if Freeze_Train else Unfreeze_batch_size
    nbs             = 64
    lr_limit_max    = 5e-4 if optimizer_type == 'adam' else 5e-2
    lr_limit_min    = 2.5e-4 if optimizer_type == 'adam' else 5e-4
    Init_lr_fit     = min(max(batch_size / nbs * Init_lr, lr_limit_min), lr_limit_max)
    Min_lr_fit      = min(max(batch_size / nbs * Min_lr, lr_limit_min * 1e-2), lr_limit_max * 1e-2)
    optimizer = {
        'adam'  : optim.Adam(model.parameters(), Init_lr_fit, betas = (momentum, 0.999), weight_decay = weight_decay),
        'sgd'   : optim.SGD(model.parameters(), Init_lr_fit, momentum = momentum, nesterov=True, weight_decay = weight_decay)
    }[optimizer_type]
    lr_scheduler_func = get_lr_scheduler(lr_decay_type, Init_lr_fit, Min_lr_fit, UnFreeze_Epoch)
    epoch_step      = num_train // batch_size

    train_dataset   = CenternetDataset(train_lines, input_shape, num_classes, train = True, bug=bug)
    loader_gen = torch.Generator().manual_seed(seed)
    gen             = DataLoader(train_dataset, shuffle = True, batch_size = batch_size, drop_last=True,
                                 collate_fn=centernet_dataset_collate, generator=loader_gen)

    state = {"epoch": Init_Epoch, "iteration": 0, "it": None, "gen": gen, "epoch_step": epoch_step,
             "UnFreeze_flag": UnFreeze_flag, "lr_scheduler_func": lr_scheduler_func}

    def start_epoch():
        epoch = state["epoch"]
        if epoch >= Freeze_Epoch and not state["UnFreeze_flag"] and Freeze_Train:
            batch_size = Unfreeze_batch_size
            nbs             = 64
            lr_limit_max    = 5e-4 if optimizer_type == 'adam' else 5e-2
            lr_limit_min    = 2.5e-4 if optimizer_type == 'adam' else 5e-4
            Init_lr_fit     = min(max(batch_size / nbs * Init_lr, lr_limit_min), lr_limit_max)
            Min_lr_fit      = min(max(batch_size / nbs * Min_lr, lr_limit_min * 1e-2), lr_limit_max * 1e-2)
            state["lr_scheduler_func"] = get_lr_scheduler(lr_decay_type, Init_lr_fit, Min_lr_fit, UnFreeze_Epoch)
            model.unfreeze_backbone()
            state["epoch_step"]      = num_train // batch_size
            state["gen"]             = DataLoader(train_dataset, shuffle = True, batch_size = batch_size,
                                                  drop_last=True, collate_fn=centernet_dataset_collate,
                                                  generator=loader_gen)
            state["UnFreeze_flag"] = True
        set_optimizer_lr(optimizer, state["lr_scheduler_func"], epoch)
        model_train.train()
        state["it"], state["iteration"] = iter(state["gen"]), 0

    start_epoch()

    def compute_loss(outputs, targets):
        hm, wh, offset = outputs
        batch_hms, batch_whs, batch_regs, batch_reg_masks = targets
        if bug == "heatmap_sigmoid_twice":
            hm = hm.sigmoid()
        c_loss          = focal_loss(hm, batch_hms)
        wh_loss         = 0.1 * reg_l1_loss(wh, batch_whs, batch_reg_masks)
        if bug == "offset_mask_dropped":
            off_loss    = reg_l1_loss(offset, batch_regs, torch.ones_like(batch_reg_masks))
        else:
            off_loss    = reg_l1_loss(offset, batch_regs, batch_reg_masks)
        return c_loss + wh_loss + off_loss

    def train_step():
        if state["iteration"] >= state["epoch_step"]:
            state["epoch"] += 1
            start_epoch()
        batch = next(state["it"])
        state["iteration"] += 1
        batch_images, batch_hms, batch_whs, batch_regs, batch_reg_masks = batch

        optimizer.zero_grad()
        hm, wh, offset  = model_train(batch_images)
        if bug == "heatmap_sigmoid_twice":  # the hourglass branch's ``output["hm"].sigmoid()`` on this head
            hm = hm.sigmoid()
        c_loss          = focal_loss(hm, batch_hms)
        wh_loss         = 0.1 * reg_l1_loss(wh, batch_whs, batch_reg_masks)
        if bug == "offset_mask_dropped":
            off_loss    = reg_l1_loss(offset, batch_regs, torch.ones_like(batch_reg_masks))
        else:
            off_loss    = reg_l1_loss(offset, batch_regs, batch_reg_masks)

        loss            = c_loss + wh_loss + off_loss
        loss.backward()
        optimizer.step()
        return loss.detach()

    first = centernet_dataset_collate([train_dataset[i] for i in range(Freeze_batch_size)])

    class Batches:
        # fit_one_epoch's ``batch_images, batch_hms, ... = batch`` as (input, targets)
        def __iter__(self):
            for b in state["gen"]:
                yield b[0], tuple(b[1:])

    return Program(name="bubbliiiingcenternet_resnet", model=model, batch=(first[0], tuple(first[1:])),
                   loss_fn=compute_loss, optimizer=optimizer, train_step=train_step, loader=Batches(),
                   frozen=("backbone.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("heatmap_sigmoid_twice", functools.partial(_build, bug="heatmap_sigmoid_twice"), "learning_ledger",
        ("OBJECTIVE",)),
    Bug("wh_written_as_hw", functools.partial(_build, bug="wh_written_as_hw"), "learning_ledger", ("TASK",)),
    Bug("offset_mask_dropped", functools.partial(_build, bug="offset_mask_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
]
