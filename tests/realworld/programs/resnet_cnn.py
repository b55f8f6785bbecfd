"""A torchvision-shaped ResNet (BasicBlock, conv1/bn1/layer1..layer4/avgpool/fc, CIFAR stem without max-pool) at tiny
widths on 3x16x16 images, 10 classes; SGD momentum 0.9 nesterov weight_decay 5e-4 lr 0.05 with MultiStepLR, and an
accuracy evaluation under model.eval() + torch.no_grad()."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES = 10


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000, width=8):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def make_images(seed: int, n: int = 20):
    """Each class is a fixed 3x16x16 template; an image is its class's template plus noise (nearest template = label)."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(NUM_CLASSES, 3, 16, 16, generator=g)
    labels = torch.arange(n) % NUM_CLASSES
    images = templates[labels] + 0.5 * torch.randn(n, 3, 16, 16, generator=g)

    def nearest_template(x):
        flat, t = x.flatten(1), templates.flatten(1)
        return (flat @ t.T - 0.5 * (t * t).sum(1)).argmax(dim=1)

    return images, labels, nearest_template


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    images, labels, nearest_template = make_images(seed)
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=NUM_CLASSES)
    criterion = nn.CrossEntropyLoss()
    params = model.parameters()
    if bug == "frozen_head_only":
        model.fc.requires_grad_(False)
        params = model.fc.parameters()
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[100, 150], gamma=0.1)

    def train_step():
        model.train()
        optimizer.zero_grad()
        outputs = model(images)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss

    def evaluate(net, batch):
        inputs, targets = batch
        if bug != "no_eval_mode":
            net.eval()
        with torch.no_grad():
            correct = (net(inputs).argmax(1) == targets).sum().item()
        net.train()
        return correct / targets.numel()

    return Program(name="resnet_cnn", model=model, batch=(images, labels), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=nearest_template, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("frozen_head_only", functools.partial(_build, bug="frozen_head_only"), "four_structures", ("fc",)),
    Bug("no_eval_mode", functools.partial(_build, bug="no_eval_mode"), "six_claims", ("EVALUATION",)),
]
