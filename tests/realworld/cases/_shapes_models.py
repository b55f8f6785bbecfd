"""CNNs as users write them, with torchvision's module names (torchvision itself cannot be installed beside this
torch): a ResNet-18-shaped net (``conv1, bn1, relu, maxpool, layer1..layer4`` of BasicBlocks with ``downsample``,
``avgpool``, ``fc``), a VGG-shaped one (``features, avgpool, classifier``), a MobileNet-shaped depthwise-separable
net, a UNet-shaped encoder-decoder with skip concatenation, a 1-D conv audio classifier. Small widths and inputs."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn


@dataclasses.dataclass
class Program:
    model: nn.Module
    inputs: Any
    designed: dict | None = None


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), layers=(2, 2, 2, 2), num_classes: int = 10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], layers[0])
        self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * BasicBlock.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


#: ResNet-18's design at 64x64 with widths 8..64 (the paper's table, scaled): per-example outputs
RESNET_DESIGN = {"conv1": (8, 32, 32), "maxpool": (8, 16, 16), "layer1": (8, 16, 16), "layer2": (16, 8, 8),
                 "layer3": (32, 4, 4), "layer4": (64, 2, 2), "avgpool": (64, 1, 1), "fc": (10,)}


def resnet(seed: int, **kw: Any) -> Program:
    torch.manual_seed(seed)
    return Program(ResNet(**kw).eval(), torch.randn(2, 3, 64, 64), dict(RESNET_DESIGN))


class VGG(nn.Module):
    def __init__(self, cfg=(8, "M", 16, "M", 32, 32, "M", 64, 64, "M"), num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(cin, v, kernel_size=3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Linear(cin * 2 * 2, 64), nn.ReLU(True), nn.Dropout(0.5),
                                        nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.dw = ConvBNReLU(cin, cin, 3, stride, groups=cin)
        self.pw = ConvBNReLU(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pw(self.dw(x))


class MobileNet(nn.Module):
    def __init__(self, num_classes: int = 10, pw_in: int | None = None):
        super().__init__()
        plan = [(8, 16, 1), (16, 24, 2), (24, 24, 1), (24, 32, 2), (32, 64, 2)]
        blocks = [DepthwiseSeparable(cin, cout, s) for cin, cout, s in plan]
        if pw_in is not None:  # a typo in one pointwise conv's in_channels
            blocks[3].pw[0] = nn.Conv2d(pw_in, 32, 1, bias=False)
        self.features = nn.Sequential(ConvBNReLU(3, 8, stride=2), *blocks)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Up(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, n_classes: int = 2, w: int = 8):
        super().__init__()
        self.inc = DoubleConv(3, w)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(w, 2 * w))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(2 * w, 4 * w))
        self.up1, self.up2 = Up(4 * w, 2 * w), Up(2 * w, w)
        self.outc = nn.Conv2d(w, n_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


class AudioNet(nn.Module):
    """Raw waveform -> strided Conv1d front end -> conv blocks with pooling -> global pool -> classes."""

    def __init__(self, n_classes: int = 5, w: int = 16):
        super().__init__()
        self.frontend = nn.Sequential(nn.Conv1d(1, w, kernel_size=80, stride=16, padding=32), nn.BatchNorm1d(w),
                                      nn.ReLU())
        self.blocks = nn.Sequential(nn.Conv1d(w, w, 3, padding=1), nn.BatchNorm1d(w), nn.ReLU(), nn.MaxPool1d(4),
                                    nn.Conv1d(w, 2 * w, 3, padding=1), nn.BatchNorm1d(2 * w), nn.ReLU(),
                                    nn.MaxPool1d(4))
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(2 * w, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.blocks(self.frontend(x))).squeeze(-1))
