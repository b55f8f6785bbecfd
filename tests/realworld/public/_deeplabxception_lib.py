"""DeepLab v3+ of jfzhang95/pytorch-deeplab-xception with its MobileNetV2 backbone, for the port
``deeplabxception_voc``: ``MobileNetV2`` (inverted residuals with ``fixed_padding``, the stride turned into dilation
past ``output_stride``, low-level features after the fourth block), ``ASPP`` (1x1 and three atrous 3x3 branches plus
image pooling, concatenated, 1x1 projection, dropout 0.5), ``Decoder`` (1x1 reduction of the low-level features,
upsampled ASPP output concatenated, two 3x3 conv/BN/ReLU/dropout layers, 1x1 classifier) and ``DeepLab`` (bilinear
upsampling to the input size, ``get_1x_lr_params`` over the backbone and ``get_10x_lr_params`` over ASPP and decoder).

Source: https://github.com/jfzhang95/pytorch-deeplab-xception
Commit: 9135e104a7a51ea9effa9c6676a2fcffe6a6a2e6
Files: modeling/deeplab.py, modeling/aspp.py, modeling/decoder.py, modeling/backbone/__init__.py,
modeling/backbone/mobilenet.py
License: MIT (Copyright (c) 2018 Pyjcsx; full text in LICENSES/jfzhang95-pytorch-deeplab-xception.txt)

Deviations from the original: widths for 2 CPU cores: MobileNetV2 built with its own ``width_mult`` argument at
``WIDTH_MULT`` = 0.25 (the ASPP's hard-coded ``inplanes`` 320 and the decoder's ``low_level_inplanes`` 24 scaled
with it), the ASPP's 256 channels -> ``ASPP_PLANES`` = 32 (its 1280 = 5 x 256 -> 5 x 32), the decoder's 48 -> 12 and
256 -> 32 (its 304 = 256 + 48 -> 44); ``pretrained=False`` (the ImageNet weights are a download); only the
``mobilenet`` branch of ``build_backbone`` and ``nn.BatchNorm2d`` (``sync_bn`` False on one device) are ported, so the
``isinstance(m, SynchronizedBatchNorm2d)`` tests are dropped, and so is ``DeepLab.freeze_bn()`` (shadowed by the
``freeze_bn`` attribute and never called by ``train.py``); the
``bug`` argument of ``DeepLab.get_10x_lr_params`` selects the port's ``decoder_left_out_of_optimizer`` variant.
"""
# ruff: noqa: UP008, PLR0402, SIM101

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTH_MULT, ASPP_PLANES, LOW_LEVEL_PLANES, DECODER_PLANES = 0.25, 32, 12, 32


# ---- modeling/backbone/mobilenet.py -----------------------------------------------------------------------------

def conv_bn(inp, oup, stride, BatchNorm):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False),
        BatchNorm(oup),
        nn.ReLU6(inplace=True)
    )


def fixed_padding(inputs, kernel_size, dilation):
    kernel_size_effective = kernel_size + (kernel_size - 1) * (dilation - 1)
    pad_total = kernel_size_effective - 1
    pad_beg = pad_total // 2
    pad_end = pad_total - pad_beg
    padded_inputs = F.pad(inputs, (pad_beg, pad_end, pad_beg, pad_end))
    return padded_inputs


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, dilation, expand_ratio, BatchNorm):
        super(InvertedResidual, self).__init__()
        self.stride = stride
        assert stride in [1, 2]

        hidden_dim = round(inp * expand_ratio)
        self.use_res_connect = self.stride == 1 and inp == oup
        self.kernel_size = 3
        self.dilation = dilation

        if expand_ratio == 1:
            self.conv = nn.Sequential(
                # dw
                nn.Conv2d(hidden_dim, hidden_dim, 3, stride, 0, dilation, groups=hidden_dim, bias=False),
                BatchNorm(hidden_dim),
                nn.ReLU6(inplace=True),
                # pw-linear
                nn.Conv2d(hidden_dim, oup, 1, 1, 0, 1, 1, bias=False),
                BatchNorm(oup),
            )
        else:
            self.conv = nn.Sequential(
                # pw
                nn.Conv2d(inp, hidden_dim, 1, 1, 0, 1, bias=False),
                BatchNorm(hidden_dim),
                nn.ReLU6(inplace=True),
                # dw
                nn.Conv2d(hidden_dim, hidden_dim, 3, stride, 0, dilation, groups=hidden_dim, bias=False),
                BatchNorm(hidden_dim),
                nn.ReLU6(inplace=True),
                # pw-linear
                nn.Conv2d(hidden_dim, oup, 1, 1, 0, 1, bias=False),
                BatchNorm(oup),
            )

    def forward(self, x):
        x_pad = fixed_padding(x, self.kernel_size, dilation=self.dilation)
        if self.use_res_connect:
            x = x + self.conv(x_pad)
        else:
            x = self.conv(x_pad)
        return x


class MobileNetV2(nn.Module):
    def __init__(self, output_stride=8, BatchNorm=None, width_mult=1., pretrained=True):
        super(MobileNetV2, self).__init__()
        block = InvertedResidual
        input_channel = 32
        current_stride = 1
        rate = 1
        interverted_residual_setting = [
            # t, c, n, s
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]

        # building first layer
        input_channel = int(input_channel * width_mult)
        self.features = [conv_bn(3, input_channel, 2, BatchNorm)]
        current_stride *= 2
        # building inverted residual blocks
        for t, c, n, s in interverted_residual_setting:
            if current_stride == output_stride:
                stride = 1
                dilation = rate
                rate *= s
            else:
                stride = s
                dilation = 1
                current_stride *= s
            output_channel = int(c * width_mult)
            for i in range(n):
                if i == 0:
                    self.features.append(block(input_channel, output_channel, stride, dilation, t, BatchNorm))
                else:
                    self.features.append(block(input_channel, output_channel, 1, dilation, t, BatchNorm))
                input_channel = output_channel
        self.features = nn.Sequential(*self.features)
        self._initialize_weights()

        if pretrained:
            raise RuntimeError("(port) the pretrained weights are a download")

        self.low_level_features = self.features[0:4]
        self.high_level_features = self.features[4:]

    def forward(self, x):
        low_level_feat = self.low_level_features(x)
        x = self.high_level_features(low_level_feat)
        return x, low_level_feat

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                # n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                # m.weight.data.normal_(0, math.sqrt(2. / n))
                torch.nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


def build_backbone(backbone, output_stride, BatchNorm):
    if backbone == 'mobilenet':
        return MobileNetV2(output_stride, BatchNorm, width_mult=WIDTH_MULT, pretrained=False)
    else:
        raise NotImplementedError


# ---- modeling/aspp.py -------------------------------------------------------------------------------------------

class _ASPPModule(nn.Module):
    def __init__(self, inplanes, planes, kernel_size, padding, dilation, BatchNorm):
        super(_ASPPModule, self).__init__()
        self.atrous_conv = nn.Conv2d(inplanes, planes, kernel_size=kernel_size,
                                     stride=1, padding=padding, dilation=dilation, bias=False)
        self.bn = BatchNorm(planes)
        self.relu = nn.ReLU()

        self._init_weight()

    def forward(self, x):
        x = self.atrous_conv(x)
        x = self.bn(x)

        return self.relu(x)

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


class ASPP(nn.Module):
    def __init__(self, backbone, output_stride, BatchNorm):
        super(ASPP, self).__init__()
        if backbone == 'mobilenet':
            inplanes = int(320 * WIDTH_MULT)
        else:
            inplanes = 2048
        if output_stride == 16:
            dilations = [1, 6, 12, 18]
        elif output_stride == 8:
            dilations = [1, 12, 24, 36]
        else:
            raise NotImplementedError

        planes = ASPP_PLANES
        self.aspp1 = _ASPPModule(inplanes, planes, 1, padding=0, dilation=dilations[0], BatchNorm=BatchNorm)
        self.aspp2 = _ASPPModule(inplanes, planes, 3, padding=dilations[1], dilation=dilations[1], BatchNorm=BatchNorm)
        self.aspp3 = _ASPPModule(inplanes, planes, 3, padding=dilations[2], dilation=dilations[2], BatchNorm=BatchNorm)
        self.aspp4 = _ASPPModule(inplanes, planes, 3, padding=dilations[3], dilation=dilations[3], BatchNorm=BatchNorm)

        self.global_avg_pool = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)),
                                             nn.Conv2d(inplanes, planes, 1, stride=1, bias=False),
                                             BatchNorm(planes),
                                             nn.ReLU())
        self.conv1 = nn.Conv2d(5 * planes, planes, 1, bias=False)
        self.bn1 = BatchNorm(planes)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(0.5)
        self._init_weight()

    def forward(self, x):
        x1 = self.aspp1(x)
        x2 = self.aspp2(x)
        x3 = self.aspp3(x)
        x4 = self.aspp4(x)
        x5 = self.global_avg_pool(x)
        x5 = F.interpolate(x5, size=x4.size()[2:], mode='bilinear', align_corners=True)
        x = torch.cat((x1, x2, x3, x4, x5), dim=1)

        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)

        return self.dropout(x)

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                # n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                # m.weight.data.normal_(0, math.sqrt(2. / n))
                torch.nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


def build_aspp(backbone, output_stride, BatchNorm):
    return ASPP(backbone, output_stride, BatchNorm)


# ---- modeling/decoder.py ----------------------------------------------------------------------------------------

class Decoder(nn.Module):
    def __init__(self, num_classes, backbone, BatchNorm):
        super(Decoder, self).__init__()
        if backbone == 'mobilenet':
            low_level_inplanes = int(24 * WIDTH_MULT)
        else:
            raise NotImplementedError

        self.conv1 = nn.Conv2d(low_level_inplanes, LOW_LEVEL_PLANES, 1, bias=False)
        self.bn1 = BatchNorm(LOW_LEVEL_PLANES)
        self.relu = nn.ReLU()
        self.last_conv = nn.Sequential(nn.Conv2d(ASPP_PLANES + LOW_LEVEL_PLANES, DECODER_PLANES, kernel_size=3,
                                                 stride=1, padding=1, bias=False),
                                       BatchNorm(DECODER_PLANES),
                                       nn.ReLU(),
                                       nn.Dropout(0.5),
                                       nn.Conv2d(DECODER_PLANES, DECODER_PLANES, kernel_size=3, stride=1, padding=1,
                                                 bias=False),
                                       BatchNorm(DECODER_PLANES),
                                       nn.ReLU(),
                                       nn.Dropout(0.1),
                                       nn.Conv2d(DECODER_PLANES, num_classes, kernel_size=1, stride=1))
        self._init_weight()

    def forward(self, x, low_level_feat):
        low_level_feat = self.conv1(low_level_feat)
        low_level_feat = self.bn1(low_level_feat)
        low_level_feat = self.relu(low_level_feat)

        x = F.interpolate(x, size=low_level_feat.size()[2:], mode='bilinear', align_corners=True)
        x = torch.cat((x, low_level_feat), dim=1)
        x = self.last_conv(x)

        return x

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


def build_decoder(num_classes, backbone, BatchNorm):
    return Decoder(num_classes, backbone, BatchNorm)


# ---- modeling/deeplab.py ----------------------------------------------------------------------------------------

class DeepLab(nn.Module):
    def __init__(self, backbone='resnet', output_stride=16, num_classes=21,
                 sync_bn=True, freeze_bn=False, bug=None):
        super(DeepLab, self).__init__()
        self.bug = bug  # (port) the variant being built
        if backbone == 'drn':
            output_stride = 8

        if sync_bn == True:
            raise NotImplementedError("(port) SynchronizedBatchNorm2d needs several devices")
        else:
            BatchNorm = nn.BatchNorm2d

        self.backbone = build_backbone(backbone, output_stride, BatchNorm)
        self.aspp = build_aspp(backbone, output_stride, BatchNorm)
        self.decoder = build_decoder(num_classes, backbone, BatchNorm)

        self.freeze_bn = freeze_bn

    def forward(self, input):
        x, low_level_feat = self.backbone(input)
        x = self.aspp(x)
        x = self.decoder(x, low_level_feat)
        x = F.interpolate(x, size=input.size()[2:], mode='bilinear', align_corners=True)

        return x

    def get_1x_lr_params(self):
        modules = [self.backbone]
        for i in range(len(modules)):
            for m in modules[i].named_modules():
                if self.freeze_bn:
                    if isinstance(m[1], nn.Conv2d):
                        for p in m[1].parameters():
                            if p.requires_grad:
                                yield p
                else:
                    if isinstance(m[1], nn.Conv2d) or isinstance(m[1], nn.BatchNorm2d):
                        for p in m[1].parameters():
                            if p.requires_grad:
                                yield p

    def get_10x_lr_params(self):
        # the variant lists the ASPP head alone: the decoder is never handed to the optimizer
        modules = [self.aspp] if self.bug == "decoder_left_out_of_optimizer" else [self.aspp, self.decoder]
        for i in range(len(modules)):
            for m in modules[i].named_modules():
                if self.freeze_bn:
                    if isinstance(m[1], nn.Conv2d):
                        for p in m[1].parameters():
                            if p.requires_grad:
                                yield p
                else:
                    if isinstance(m[1], nn.Conv2d) or isinstance(m[1], nn.BatchNorm2d):
                        for p in m[1].parameters():
                            if p.requires_grad:
                                yield p
