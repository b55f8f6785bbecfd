"""The backbone of abeardear/pytorch-YOLO-v1 that ``train.py`` builds (``resnet50()`` of ``resnet_yolo.py``: ResNet-50
with a DetNet layer and a 30-channel sigmoid head), moved out of ``pytorchyolov1_detnet.py`` to keep that port
readable. Copied as written except the widths, divided by ``DIV`` = 16 (the port's header lists that deviation), the
commented-out lines of ``ResNet.__init__`` and ``forward``, the unused ``conv3x3`` / ``BasicBlock`` / other depths, and
``resnet50``'s model_zoo branch.

Source: https://github.com/abeardear/pytorch-YOLO-v1
Commit: 823c45185a4af4f895d53ca466f725a1edbcfec0
Files: resnet_yolo.py (``Bottleneck``, ``detnet_bottleneck``, ``ResNet``, ``resnet50``)
License: MIT (Copyright (c) 2018 xiongzihua; full text in LICENSES/abeardear-pytorch-YOLO-v1.txt)
"""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import math

import torch.nn as nn
import torch.nn.functional as F

DIV = 16  # (port) the widths divided by 16


# ---- resnet_yolo.py ----------------------------------------------------------------------------------------------

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


class detnet_bottleneck(nn.Module):
    # no expansion
    # dilation = 2
    # type B use 1x1 conv
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, block_type='A'):
        super(detnet_bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=2, bias=False,dilation=2)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, self.expansion*planes, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(self.expansion*planes)

        self.downsample = nn.Sequential()
        if stride != 1 or in_planes != self.expansion*planes or block_type=='B':
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion*planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += self.downsample(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=1470):
        self.inplanes = 64 // DIV
        super(ResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 64 // DIV, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(64 // DIV)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64 // DIV, layers[0])
        self.layer2 = self._make_layer(block, 128 // DIV, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256 // DIV, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512 // DIV, layers[3], stride=2)
        self.layer5 = self._make_detnet_layer(in_channels=2048 // DIV)
        self.conv_end = nn.Conv2d(256 // DIV, 30, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn_end = nn.BatchNorm2d(30)
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

    def _make_detnet_layer(self,in_channels):
        layers = []
        layers.append(detnet_bottleneck(in_planes=in_channels, planes=256 // DIV, block_type='B'))
        layers.append(detnet_bottleneck(in_planes=256 // DIV, planes=256 // DIV, block_type='A'))
        layers.append(detnet_bottleneck(in_planes=256 // DIV, planes=256 // DIV, block_type='A'))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.layer5(x)
        x = self.conv_end(x)
        x = self.bn_end(x)
        x = F.sigmoid(x) #归一化到0-1
        x = x.permute(0,2,3,1) #(-1,7,7,30)

        return x


def resnet50(pretrained=False, **kwargs):
    model = ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)
    return model  # (port) the model_zoo branch is left out (pretrained=False)
