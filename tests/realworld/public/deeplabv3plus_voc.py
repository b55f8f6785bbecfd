"""DeepLabV3+ with a MobileNetV2 backbone trained on Pascal VOC by VainF's ``main.py``, as its README runs it
(``python main.py --model deeplabv3plus_mobilenet --year 2012_aug --crop_val --lr 0.01 --crop_size 513 --batch_size
16 --output_stride 16``, with the ``--separable_conv`` option the README recommends): the MobileNetV2 features split
into low-level (stride 4) and high-level (stride 16) maps by ``IntermediateLayerGetter``, ``DeepLabHeadV3Plus`` (a
48-channel projection of the low-level map, ASPP with rates 6/12/18 and image pooling, concatenation and a 3x3 +
1x1 classifier; its 3x3 convs converted to atrous separable convs), bilinear upsampling to the input size;
``CrossEntropyLoss(ignore_index=255)`` (VOC's void boundary pixels), SGD (momentum 0.9, weight decay 1e-4) with the
backbone at 0.1x the lr, ``PolyLR`` (power 0.9) stepped every iteration, backbone BN momentum 0.01, and the VOC
train transforms (random scale 0.5-2, random crop padded if needed, horizontal flip of image and mask).

Source: https://github.com/VainF/DeepLabV3Plus-Pytorch
Commit: 4e1087de98bc49d55b9239ae92810ef7368660db
Files: main.py, network/modeling.py, network/_deeplab.py, network/utils.py, network/backbone/mobilenetv2.py,
  utils/scheduler.py, utils/utils.py, utils/ext_transforms.py, datasets/voc.py, metrics/stream_metrics.py
License: MIT (Copyright (c) 2020 Gongfan Fang; LICENSES/VainF-DeepLabV3Plus-Pytorch.txt)
Domain: semantic segmentation (DeepLabV3+, ASPP, ignore_index void pixels, poly lr, paired image/mask augmentation)

Deviations from the original:
- sizes: MobileNetV2 ``width_mult`` 1.0 -> 0.25 (the ``inverted_residual_setting`` unchanged; its ``int(c *
  width_mult)`` channels give 80 high-level and 6 low-level channels, so ``_segm_mobilenet``'s constants inplanes
  320 -> 80 and low_level_planes 24 -> 6 follow); in the head, ASPP's out_channels 256 -> 32, the low-level
  projection 48 -> 12 and the classifier's 304 -> 44 / 256 -> 32 channels; num_classes 21 -> 4; crop_size 513 ->
  32 on 64x64 images; batch 16 -> 8; total_itrs 30e3 unchanged; ``SELF_CHECK_STEPS`` is 20 (for 2 CPU cores);
- ``pretrained_backbone``: the ImageNet MobileNetV2 download is skipped (random init); ``nn.DataParallel``, the
  device moves, visdom, checkpoints and the validation loop's image dumps are left out;
- data: VOC is replaced by synthetic 64x64 RGB images made from ``seed`` (a noisy background of class 0 and one or
  two filled rectangles or ellipses of classes 1-3, each class with its own colour, the object outlines labelled 255
  as VOC's void boundaries), 64 training and 8 validation images held as PIL images (``Image.open`` replaced);
  torchvision is not available: the ``torchvision.transforms.functional`` calls of ``ext_transforms`` (resize,
  pad, crop, hflip, to_tensor, normalize) are written out with PIL and torch, same arguments (the crop's padding
  fills the mask with 0, as ``F.pad``'s default fill does in the original);
- one ``train_step`` is one iteration of the ``while True`` loop's batch loop (zero_grad, forward, loss, backward,
  step, ``scheduler.step()``); ``model.train()`` runs when an epoch starts; ``eval_fn`` is ``validate``'s Mean IoU
  (``StreamSegMetrics``) on a given batch, without sklearn (imported but unused there);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B006, PIE790, PLR0402, RUF046, UP004, UP008, UP031, UP032  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import random
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageOps
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN = 64
N_VAL = 8
ASPP_CHANNELS = 32  # 256 in the original
PROJECT_CHANNELS = 12  # 48 in the original
SELF_CHECK_STEPS = 20


# ---- network/backbone/mobilenetv2.py -------------------------------------------------------------------------

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


class ConvBNReLU(nn.Sequential):
    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, dilation=1, groups=1):
        #padding = (kernel_size - 1) // 2
        super(ConvBNReLU, self).__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, 0, dilation=dilation, groups=groups, bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True)
        )


def fixed_padding(kernel_size, dilation):
    kernel_size_effective = kernel_size + (kernel_size - 1) * (dilation - 1)
    pad_total = kernel_size_effective - 1
    pad_beg = pad_total // 2
    pad_end = pad_total - pad_beg
    return (pad_beg, pad_end, pad_beg, pad_end)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, dilation, expand_ratio):
        super(InvertedResidual, self).__init__()
        self.stride = stride
        assert stride in [1, 2]

        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = self.stride == 1 and inp == oup

        layers = []
        if expand_ratio != 1:
            # pw
            layers.append(ConvBNReLU(inp, hidden_dim, kernel_size=1))

        layers.extend([
            # dw
            ConvBNReLU(hidden_dim, hidden_dim, stride=stride, dilation=dilation, groups=hidden_dim),
            # pw-linear
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ])
        self.conv = nn.Sequential(*layers)

        self.input_padding = fixed_padding( 3, dilation )

    def forward(self, x):
        x_pad = F.pad(x, self.input_padding)
        if self.use_res_connect:
            return x + self.conv(x_pad)
        else:
            return self.conv(x_pad)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, output_stride=8, width_mult=1.0, inverted_residual_setting=None, round_nearest=8):
        """
        MobileNet V2 main class

        Args:
            num_classes (int): Number of classes
            width_mult (float): Width multiplier - adjusts number of channels in each layer by this amount
            inverted_residual_setting: Network structure
            round_nearest (int): Round the number of channels in each layer to be a multiple of this number
            Set to 1 to turn off rounding
        """
        super(MobileNetV2, self).__init__()
        block = InvertedResidual
        input_channel = 32
        last_channel = 1280
        self.output_stride = output_stride
        current_stride = 1
        if inverted_residual_setting is None:
            inverted_residual_setting = [
                # t, c, n, s
                [1, 16, 1, 1],
                [6, 24, 2, 2],
                [6, 32, 3, 2],
                [6, 64, 4, 2],
                [6, 96, 3, 1],
                [6, 160, 3, 2],
                [6, 320, 1, 1],
            ]

        # only check the first element, assuming user knows t,c,n,s are required
        if len(inverted_residual_setting) == 0 or len(inverted_residual_setting[0]) != 4:
            raise ValueError("inverted_residual_setting should be non-empty "
                             "or a 4-element list, got {}".format(inverted_residual_setting))

        # building first layer
        input_channel = _make_divisible(input_channel * width_mult, round_nearest)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features = [ConvBNReLU(3, input_channel, stride=2)]
        current_stride *= 2
        dilation=1
        previous_dilation = 1

        # building inverted residual blocks
        for t, c, n, s in inverted_residual_setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            previous_dilation = dilation
            if current_stride == output_stride:
                stride = 1
                dilation *= s
            else:
                stride = s
                current_stride *= s
            output_channel = int(c * width_mult)

            for i in range(n):
                if i==0:
                    features.append(block(input_channel, output_channel, stride, previous_dilation, expand_ratio=t))
                else:
                    features.append(block(input_channel, output_channel, 1, dilation, expand_ratio=t))
                input_channel = output_channel
        # building last several layers
        features.append(ConvBNReLU(input_channel, self.last_channel, kernel_size=1))
        # make it nn.Sequential
        self.features = nn.Sequential(*features)

        # building classifier
        self.classifier = nn.Sequential(
            nn.Dropout(0.2),
            nn.Linear(self.last_channel, num_classes),
        )

        # weight initialization
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.features(x)
        x = x.mean([2, 3])
        x = self.classifier(x)
        return x


def mobilenet_v2(pretrained=False, progress=True, **kwargs):
    """
    Constructs a MobileNetV2 architecture from
    `"MobileNetV2: Inverted Residuals and Linear Bottlenecks" <https://arxiv.org/abs/1801.04381>`_.
    """
    model = MobileNetV2(**kwargs)
    return model


# ---- network/utils.py ----------------------------------------------------------------------------------------

class _SimpleSegmentationModel(nn.Module):
    def __init__(self, backbone, classifier):
        super(_SimpleSegmentationModel, self).__init__()
        self.backbone = backbone
        self.classifier = classifier

    def forward(self, x):
        input_shape = x.shape[-2:]
        features = self.backbone(x)
        x = self.classifier(features)
        x = F.interpolate(x, size=input_shape, mode='bilinear', align_corners=False)
        return x


class IntermediateLayerGetter(nn.ModuleDict):
    """
    Module wrapper that returns intermediate layers from a model
    """
    def __init__(self, model, return_layers, hrnet_flag=False):
        if not set(return_layers).issubset([name for name, _ in model.named_children()]):
            raise ValueError("return_layers are not present in model")

        self.hrnet_flag = hrnet_flag

        orig_return_layers = return_layers
        return_layers = {k: v for k, v in return_layers.items()}
        layers = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            if name in return_layers:
                del return_layers[name]
            if not return_layers:
                break

        super(IntermediateLayerGetter, self).__init__(layers)
        self.return_layers = orig_return_layers

    def forward(self, x):
        out = OrderedDict()
        for name, module in self.named_children():
            x = module(x)

            if name in self.return_layers:
                out_name = self.return_layers[name]
                out[out_name] = x
        return out


# ---- network/_deeplab.py -------------------------------------------------------------------------------------

class DeepLabV3(_SimpleSegmentationModel):
    """
    Implements DeepLabV3 model from
    `"Rethinking Atrous Convolution for Semantic Image Segmentation"
    <https://arxiv.org/abs/1706.05587>`_.
    """
    pass


class DeepLabHeadV3Plus(nn.Module):
    def __init__(self, in_channels, low_level_channels, num_classes, aspp_dilate=[12, 24, 36]):
        super(DeepLabHeadV3Plus, self).__init__()
        self.project = nn.Sequential(
            nn.Conv2d(low_level_channels, PROJECT_CHANNELS, 1, bias=False),
            nn.BatchNorm2d(PROJECT_CHANNELS),
            nn.ReLU(inplace=True),
        )

        self.aspp = ASPP(in_channels, aspp_dilate)

        self.classifier = nn.Sequential(
            nn.Conv2d(PROJECT_CHANNELS + ASPP_CHANNELS, ASPP_CHANNELS, 3, padding=1, bias=False),
            nn.BatchNorm2d(ASPP_CHANNELS),
            nn.ReLU(inplace=True),
            nn.Conv2d(ASPP_CHANNELS, num_classes, 1)
        )
        self._init_weight()

    def forward(self, feature):
        low_level_feature = self.project( feature['low_level'] )
        output_feature = self.aspp(feature['out'])
        output_feature = F.interpolate(output_feature, size=low_level_feature.shape[2:], mode='bilinear', align_corners=False)
        return self.classifier( torch.cat( [ low_level_feature, output_feature ], dim=1 ) )

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


class AtrousSeparableConvolution(nn.Module):
    """ Atrous Separable Convolution
    """
    def __init__(self, in_channels, out_channels, kernel_size,
                            stride=1, padding=0, dilation=1, bias=True):
        super(AtrousSeparableConvolution, self).__init__()
        self.body = nn.Sequential(
            # Separable Conv
            nn.Conv2d( in_channels, in_channels, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias, groups=in_channels ),
            # PointWise Conv
            nn.Conv2d( in_channels, out_channels, kernel_size=1, stride=1, padding=0, bias=bias),
        )

        self._init_weight()

    def forward(self, x):
        return self.body(x)

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


class ASPPConv(nn.Sequential):
    def __init__(self, in_channels, out_channels, dilation):
        modules = [
            nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)
        ]
        super(ASPPConv, self).__init__(*modules)


class ASPPPooling(nn.Sequential):
    def __init__(self, in_channels, out_channels):
        super(ASPPPooling, self).__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True))

    def forward(self, x):
        size = x.shape[-2:]
        x = super(ASPPPooling, self).forward(x)
        return F.interpolate(x, size=size, mode='bilinear', align_corners=False)


class ASPP(nn.Module):
    def __init__(self, in_channels, atrous_rates):
        super(ASPP, self).__init__()
        out_channels = ASPP_CHANNELS
        modules = []
        modules.append(nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)))

        rate1, rate2, rate3 = tuple(atrous_rates)
        modules.append(ASPPConv(in_channels, out_channels, rate1))
        modules.append(ASPPConv(in_channels, out_channels, rate2))
        modules.append(ASPPConv(in_channels, out_channels, rate3))
        modules.append(ASPPPooling(in_channels, out_channels))

        self.convs = nn.ModuleList(modules)

        self.project = nn.Sequential(
            nn.Conv2d(5 * out_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Dropout(0.1),)

    def forward(self, x):
        res = []
        for conv in self.convs:
            res.append(conv(x))
        res = torch.cat(res, dim=1)
        return self.project(res)


def convert_to_separable_conv(module):
    new_module = module
    if isinstance(module, nn.Conv2d) and module.kernel_size[0]>1:
        new_module = AtrousSeparableConvolution(module.in_channels,
                                      module.out_channels,
                                      module.kernel_size,
                                      module.stride,
                                      module.padding,
                                      module.dilation,
                                      module.bias)
    for name, child in module.named_children():
        new_module.add_module(name, convert_to_separable_conv(child))
    return new_module


# ---- network/modeling.py -------------------------------------------------------------------------------------

def _segm_mobilenet(name, backbone_name, num_classes, output_stride, pretrained_backbone, width_mult=0.25):
    if output_stride==8:
        aspp_dilate = [12, 24, 36]
    else:
        aspp_dilate = [6, 12, 18]

    backbone = mobilenet_v2(pretrained=pretrained_backbone, output_stride=output_stride, width_mult=width_mult)

    # rename layers
    backbone.low_level_features = backbone.features[0:4]
    backbone.high_level_features = backbone.features[4:-1]
    backbone.features = None
    backbone.classifier = None

    inplanes = int(320 * width_mult)
    low_level_planes = int(24 * width_mult)

    if name=='deeplabv3plus':
        return_layers = {'high_level_features': 'out', 'low_level_features': 'low_level'}
        classifier = DeepLabHeadV3Plus(inplanes, low_level_planes, num_classes, aspp_dilate)
    backbone = IntermediateLayerGetter(backbone, return_layers=return_layers)

    model = DeepLabV3(backbone, classifier)
    return model


def deeplabv3plus_mobilenet(num_classes=21, output_stride=8, pretrained_backbone=True):
    """Constructs a DeepLabV3+ model with a MobileNetv2 backbone.

    Args:
        num_classes (int): number of classes.
        output_stride (int): output stride for deeplab.
        pretrained_backbone (bool): If True, use the pretrained backbone.
    """
    return _segm_mobilenet('deeplabv3plus', 'mobilenetv2', num_classes, output_stride=output_stride, pretrained_backbone=pretrained_backbone)


# ---- utils/scheduler.py, utils/utils.py ----------------------------------------------------------------------

class PolyLR(_LRScheduler):
    def __init__(self, optimizer, max_iters, power=0.9, last_epoch=-1, min_lr=1e-6):
        self.power = power
        self.max_iters = max_iters  # avoid zero lr
        self.min_lr = min_lr
        super(PolyLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        return [ max( base_lr * ( 1 - self.last_epoch/self.max_iters )**self.power, self.min_lr)
                for base_lr in self.base_lrs]


def set_bn_momentum(model, momentum=0.1):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = momentum


# ---- utils/ext_transforms.py (torchvision.transforms.functional written out with PIL / torch) ---------------

def _resize(img, size, interpolation):
    return img.resize((size[1], size[0]), interpolation)  # F.resize(img, (h, w), interpolation)


def _pad(img, padding):
    return ImageOps.expand(img, border=padding, fill=0)  # F.pad(img, padding), fill 0


def _crop(img, i, j, h, w):
    return img.crop((j, i, j + w, i + h))  # F.crop(img, i, j, h, w)


def _hflip(img):
    return img.transpose(Image.FLIP_LEFT_RIGHT)  # F.hflip(img)


class ExtCompose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img, lbl):
        for t in self.transforms:
            img, lbl = t(img, lbl)
        return img, lbl


class ExtRandomScale(object):
    def __init__(self, scale_range, interpolation=Image.BILINEAR):
        self.scale_range = scale_range
        self.interpolation = interpolation

    def __call__(self, img, lbl):
        assert img.size == lbl.size
        scale = random.uniform(self.scale_range[0], self.scale_range[1])
        target_size = ( int(img.size[1]*scale), int(img.size[0]*scale) )
        return _resize(img, target_size, self.interpolation), _resize(lbl, target_size, Image.NEAREST)


class ExtRandomCrop(object):
    def __init__(self, size, padding=0, pad_if_needed=False):
        if isinstance(size, int):
            self.size = (int(size), int(size))
        else:
            self.size = size
        self.padding = padding
        self.pad_if_needed = pad_if_needed

    @staticmethod
    def get_params(img, output_size):
        w, h = img.size
        th, tw = output_size
        if w == tw and h == th:
            return 0, 0, h, w

        i = random.randint(0, h - th)
        j = random.randint(0, w - tw)
        return i, j, th, tw

    def __call__(self, img, lbl):
        assert img.size == lbl.size, 'size of img and lbl should be the same. %s, %s'%(img.size, lbl.size)
        if self.padding > 0:
            img = _pad(img, self.padding)
            lbl = _pad(lbl, self.padding)

        # pad the width if needed
        if self.pad_if_needed and img.size[0] < self.size[1]:
            img = _pad(img, padding=int((1 + self.size[1] - img.size[0]) / 2))
            lbl = _pad(lbl, padding=int((1 + self.size[1] - lbl.size[0]) / 2))

        # pad the height if needed
        if self.pad_if_needed and img.size[1] < self.size[0]:
            img = _pad(img, padding=int((1 + self.size[0] - img.size[1]) / 2))
            lbl = _pad(lbl, padding=int((1 + self.size[0] - lbl.size[1]) / 2))

        i, j, h, w = self.get_params(img, self.size)

        return _crop(img, i, j, h, w), _crop(lbl, i, j, h, w)


class ExtRandomHorizontalFlip(object):
    def __init__(self, p=0.5, bug=None):
        self.p = p
        self.bug = bug

    def __call__(self, img, lbl):
        if random.random() < self.p:
            if self.bug == "mask_not_flipped_with_image":
                return _hflip(img), lbl
            return _hflip(img), _hflip(lbl)
        return img, lbl


class ExtToTensor(object):
    def __init__(self, normalize=True, target_type='uint8'):
        self.normalize = normalize
        self.target_type = target_type

    def __call__(self, pic, lbl):
        # F.to_tensor(pic): HWC uint8 -> CHW float in [0, 1]
        return torch.from_numpy(np.array(pic, dtype=np.float32).transpose(2, 0, 1) / 255.0), \
            torch.from_numpy( np.array( lbl, dtype=self.target_type) )


class ExtNormalize(object):
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def __call__(self, tensor, lbl):
        mean = torch.tensor(self.mean).view(-1, 1, 1)
        std = torch.tensor(self.std).view(-1, 1, 1)
        return (tensor - mean) / std, lbl  # F.normalize(tensor, self.mean, self.std)


# ---- datasets/voc.py on synthetic images ---------------------------------------------------------------------

CLASS_COLOURS = [(60, 60, 60), (220, 60, 50), (60, 200, 70), (70, 80, 230)]


def make_voc(rs, n, size=64, bug=None):
    """(PIL RGB image, PIL 'L' mask) pairs: a noisy class-0 background, one or two filled shapes of classes 1-3 in
    their colours, the shapes' outlines (2 px) labelled 255 (void) as in VOC's masks."""
    out = []
    for _ in range(n):
        mask = Image.new('L', (size, size), 0)
        draw = ImageDraw.Draw(mask)
        for _k in range(rs.randint(1, 3)):
            cls = int(rs.randint(1, 4))
            x0, y0 = rs.randint(0, size - 24, 2)
            w, h = rs.randint(14, 28, 2)
            box = [int(x0), int(y0), int(min(size - 1, x0 + w)), int(min(size - 1, y0 + h))]
            if rs.rand() < 0.5:
                draw.rectangle(box, fill=cls, outline=255, width=2)
            else:
                draw.ellipse(box, fill=cls, outline=255, width=2)
        lbl = np.array(mask)
        cls_map = np.where(lbl == 255, 0, lbl)
        # outline pixels take the colour of the object they border (half-way between it and the background)
        img = np.array(CLASS_COLOURS, dtype=np.float64)[cls_map]
        img[lbl == 255] = 0.5 * (img[lbl == 255] + np.array(CLASS_COLOURS[0]))
        img = np.clip(img + rs.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
        if bug == "void_pixels_as_background":
            lbl = np.where(lbl == 255, 0, lbl).astype(np.uint8)
        out.append((Image.fromarray(img, 'RGB'), Image.fromarray(lbl, 'L')))
    return out


class VOCSegmentation(data.Dataset):
    def __init__(self, samples, transform=None):
        self.samples = samples
        self.transform = transform

    def __getitem__(self, index):
        """
        Args:
            index (int): Index
        Returns:
            tuple: (image, target) where target is the image segmentation.
        """
        img = self.samples[index][0].convert('RGB')
        target = self.samples[index][1]
        if self.transform is not None:
            img, target = self.transform(img, target)

        return img, target

    def __len__(self):
        return len(self.samples)


# ---- metrics/stream_metrics.py -------------------------------------------------------------------------------

class StreamSegMetrics(object):
    """
    Stream Metrics for Semantic Segmentation Task
    """
    def __init__(self, n_classes):
        self.n_classes = n_classes
        self.confusion_matrix = np.zeros((n_classes, n_classes))

    def update(self, label_trues, label_preds):
        for lt, lp in zip(label_trues, label_preds):
            self.confusion_matrix += self._fast_hist( lt.flatten(), lp.flatten() )

    def _fast_hist(self, label_true, label_pred):
        mask = (label_true >= 0) & (label_true < self.n_classes)
        hist = np.bincount(
            self.n_classes * label_true[mask].astype(int) + label_pred[mask],
            minlength=self.n_classes ** 2,
        ).reshape(self.n_classes, self.n_classes)
        return hist

    def get_results(self):
        hist = self.confusion_matrix
        iu = np.diag(hist) / (hist.sum(axis=1) + hist.sum(axis=0) - np.diag(hist))
        mean_iu = np.nanmean(iu)
        return {"Mean IoU": mean_iu}


# ---- main.py -------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    opts = argparse.Namespace(data_root='./datasets/data', dataset='voc', num_classes=None,
                              model='deeplabv3plus_mobilenet', separable_conv=True, output_stride=16,
                              test_only=False, total_itrs=30e3, lr=0.01, lr_policy='poly', step_size=10000,
                              crop_val=True, batch_size=8, val_batch_size=4, crop_size=32, ckpt=None,
                              continue_training=False, loss_type='cross_entropy', weight_decay=1e-4,
                              random_seed=seed, year='2012_aug')
    if opts.dataset.lower() == 'voc':
        opts.num_classes = 4

    # Setup random seed
    torch.manual_seed(opts.random_seed)
    np.random.seed(opts.random_seed)
    random.seed(opts.random_seed)

    # Setup dataloader (get_dataset(opts))
    train_transform = ExtCompose([
        ExtRandomScale((0.5, 2.0)),
        ExtRandomCrop(size=(opts.crop_size, opts.crop_size), pad_if_needed=True),
        ExtRandomHorizontalFlip(bug=bug),
        ExtToTensor(),
        ExtNormalize(mean=[0.485, 0.456, 0.406],
                     std=[0.229, 0.224, 0.225]),
    ])
    val_transform = ExtCompose([
        ExtToTensor(),
        ExtNormalize(mean=[0.485, 0.456, 0.406],
                     std=[0.229, 0.224, 0.225]),
    ])
    rs = np.random.RandomState(seed)
    train_dst = VOCSegmentation(make_voc(rs, N_TRAIN, bug=bug), transform=train_transform)
    val_dst = VOCSegmentation(make_voc(rs, N_VAL, bug=bug), transform=val_transform)
    train_loader = data.DataLoader(
        train_dst, batch_size=opts.batch_size, shuffle=True, num_workers=0,
        drop_last=True, generator=torch.Generator().manual_seed(seed))  # drop_last=True to ignore single-image batches.

    # Set up model (all models are 'constructed at network.modeling)
    model = deeplabv3plus_mobilenet(num_classes=opts.num_classes, output_stride=opts.output_stride,
                                    pretrained_backbone=False)
    if opts.separable_conv and 'plus' in opts.model and bug != "separable_conv_after_optimizer":
        convert_to_separable_conv(model.classifier)
    set_bn_momentum(model.backbone, momentum=0.01)

    # Set up optimizer
    optimizer = torch.optim.SGD(params=[
        {'params': model.backbone.parameters(), 'lr': 0.1 * opts.lr},
        {'params': model.classifier.parameters(), 'lr': opts.lr},
    ], lr=opts.lr, momentum=0.9, weight_decay=opts.weight_decay)
    if bug == "separable_conv_after_optimizer":
        # the conversion moved below the optimizer: its new separable convs are not in any param group
        convert_to_separable_conv(model.classifier)
    if opts.lr_policy == 'poly':
        scheduler = PolyLR(optimizer, opts.total_itrs, power=0.9)

    # Set up criterion
    if opts.loss_type == 'cross_entropy':
        criterion = nn.CrossEntropyLoss(ignore_index=255, reduction='mean')

    state = {"it": None, "cur_itrs": 0, "cur_epochs": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            # =====  Train  =====
            model.train()
            state["cur_epochs"] += 1
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        images, labels = next_batch()
        state["cur_itrs"] += 1
        images = images.to(dtype=torch.float32)
        labels = labels.to(dtype=torch.long)

        optimizer.zero_grad()
        outputs = model(images)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

        scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        """validate(): Mean IoU of StreamSegMetrics on one batch."""
        images, labels = batch
        metrics = StreamSegMetrics(opts.num_classes)
        model.eval()
        with torch.no_grad():
            outputs = model(images.to(dtype=torch.float32))
            preds = outputs.detach().max(dim=1)[1].cpu().numpy()
            targets = labels.cpu().numpy()
            metrics.update(targets, preds)
        model.train()
        return float(metrics.get_results()['Mean IoU'])

    first_images, first_labels = next(iter(data.DataLoader(val_dst, batch_size=N_VAL)))
    return Program(name="deeplabv3plus_voc", model=model, batch=(first_images, first_labels.long()),
                   loss_fn=criterion, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # ExtRandomHorizontalFlip flips the image but returns the mask unflipped: half the training pairs have their
    # objects' labels mirrored away from the objects (classic paired-augmentation slip).
    Bug("mask_not_flipped_with_image", functools.partial(_build, bug="mask_not_flipped_with_image"),
        "learning_ledger", ("TASK",)),
    # network.convert_to_separable_conv(model.classifier) run after the optimizer is built: the separable convs it
    # puts in the head are in no param group (they never train) while the optimizer holds the replaced convs
    # (classic ordering slip).
    Bug("separable_conv_after_optimizer", functools.partial(_build, bug="separable_conv_after_optimizer"),
        "four_structures", ("classifier.aspp.convs.1.0.body",)),
    # the masks' void value 255 decoded as background (the "mask[mask == 255] = 0" of a custom-dataset conversion;
    # how to set the ignore value for one's own data is asked in
    # https://github.com/VainF/DeepLabV3Plus-Pytorch/issues/80): object boundaries are trained as background.
    Bug("void_pixels_as_background", functools.partial(_build, bug="void_pixels_as_background"), "learning_ledger",
        ("TASK",)),
]
