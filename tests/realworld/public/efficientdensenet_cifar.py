"""Memory-efficient DenseNet-BC on CIFAR-10 from gpleiss/efficient_densenet_pytorch: dense blocks whose bottleneck
``BN-ReLU-1x1 conv`` over the concatenated features is recomputed in the backward by ``torch.utils.checkpoint``
(``efficient=True``), transitions with compression 0.5, ``small_inputs`` stem; ``demo.py``'s training loop
(cross-entropy, SGD lr 0.1, Nesterov momentum 0.9, weight decay 1e-4, MultiStepLR at 50% and 75% of the epochs).

Source: https://github.com/gpleiss/efficient_densenet_pytorch
Commit: d2d0629dae2912ec4f0444fab5e3df4c375c44fd
Files: demo.py, models/densenet.py
License: MIT (Copyright (c) 2018 Geoff Pleiss; full text in LICENSES/gpleiss-efficient_densenet_pytorch.txt)
Domain: vision, image classification (DenseNet-BC with checkpointed bottlenecks)

Kept as written: ``models/densenet.py`` whole (``_bn_function_factory``, ``_DenseLayer`` with ``cp.checkpoint``
when any input requires grad, ``_Transition``, ``_DenseBlock``, ``DenseNet`` with its init loop over parameter
names); ``demo.py``'s ``train_epoch`` loop body (forward, ``F.cross_entropy``, top-1 error bookkeeping,
zero_grad/backward/step), ``test_epoch`` (``model.eval()``, ``no_grad``, cross-entropy and error), ``train``'s
optimizer and scheduler, ``demo``'s configuration (``block_config = [(depth - 4) // 6] * 3``,
``num_init_features = 2 * growth_rate``, ``small_inputs=True``, ``efficient=True``), the CIFAR mean/std
normalization and the train augmentation (random crop with 4-pixel padding, horizontal flip).

Deviations from the original:
- sizes for 2 CPU cores: depth 100 -> 10 (one layer per block), growth_rate 12 -> 8, images 32x32 -> 16x16
  (random-crop padding 4 -> 2), batch_size 64 -> 16, 5000-image validation split -> a 64-image test set;
- data: the torchvision CIFAR-10 download is replaced by synthetic 3x16x16 images made from ``seed`` (10 classes,
  each a colour and a stripe orientation, with noise), kept as uint8-like values in [0, 1]; torchvision's
  ``RandomCrop``/``RandomHorizontalFlip``/``ToTensor``/``Normalize`` are written out in plain torch on tensors;
- CUDA/DataParallel, ``fire``, the printing, the csv log and checkpoint saving are dropped; the MultiStepLR
  milestones are set for ``n_epochs`` 300 as in the original and stepped once per epoch of the synthetic set;
- ``cp.checkpoint`` is given ``use_reentrant=True`` (the default of the torch the repository was written for;
  this torch refuses the call without the argument);
- one ``train_step`` is one iteration of ``train_epoch``'s loop (``model.train()`` set as ``train_epoch`` does at its
  start; the scheduler steps when an epoch of the loader ends); ``eval_fn`` is ``test_epoch`` on the test loader (returns the error);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP031, PLR0402, SIM114, TRY002

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16

def _bn_function_factory(norm, relu, conv):
    def bn_function(*inputs):
        concated_features = torch.cat(inputs, 1)
        bottleneck_output = conv(relu(norm(concated_features)))
        return bottleneck_output

    return bn_function


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size, drop_rate, efficient=False):
        super(_DenseLayer, self).__init__()
        self.add_module('norm1', nn.BatchNorm2d(num_input_features)),
        self.add_module('relu1', nn.ReLU(inplace=True)),
        self.add_module('conv1', nn.Conv2d(num_input_features, bn_size * growth_rate,
                        kernel_size=1, stride=1, bias=False)),
        self.add_module('norm2', nn.BatchNorm2d(bn_size * growth_rate)),
        self.add_module('relu2', nn.ReLU(inplace=True)),
        self.add_module('conv2', nn.Conv2d(bn_size * growth_rate, growth_rate,
                        kernel_size=3, stride=1, padding=1, bias=False)),
        self.drop_rate = drop_rate
        self.efficient = efficient

    def forward(self, *prev_features):
        bn_function = _bn_function_factory(self.norm1, self.relu1, self.conv1)
        if self.efficient and any(prev_feature.requires_grad for prev_feature in prev_features):
            bottleneck_output = cp.checkpoint(bn_function, *prev_features, use_reentrant=True)  # (port) the old default, now explicit
        else:
            bottleneck_output = bn_function(*prev_features)
        new_features = self.conv2(self.relu2(self.norm2(bottleneck_output)))
        if self.drop_rate > 0:
            new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
        return new_features


class _Transition(nn.Sequential):
    def __init__(self, num_input_features, num_output_features):
        super(_Transition, self).__init__()
        self.add_module('norm', nn.BatchNorm2d(num_input_features))
        self.add_module('relu', nn.ReLU(inplace=True))
        self.add_module('conv', nn.Conv2d(num_input_features, num_output_features,
                                          kernel_size=1, stride=1, bias=False))
        self.add_module('pool', nn.AvgPool2d(kernel_size=2, stride=2))


class _DenseBlock(nn.Module):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate, drop_rate, efficient=False):
        super(_DenseBlock, self).__init__()
        for i in range(num_layers):
            layer = _DenseLayer(
                num_input_features + i * growth_rate,
                growth_rate=growth_rate,
                bn_size=bn_size,
                drop_rate=drop_rate,
                efficient=efficient,
            )
            self.add_module('denselayer%d' % (i + 1), layer)

    def forward(self, init_features):
        features = [init_features]
        for name, layer in self.named_children():
            new_features = layer(*features)
            features.append(new_features)
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    r"""Densenet-BC model class, based on
    `"Densely Connected Convolutional Networks" <https://arxiv.org/pdf/1608.06993.pdf>`
    Args:
        growth_rate (int) - how many filters to add each layer (`k` in paper)
        block_config (list of 3 or 4 ints) - how many layers in each pooling block
        num_init_features (int) - the number of filters to learn in the first convolution layer
        bn_size (int) - multiplicative factor for number of bottle neck layers
            (i.e. bn_size * k features in the bottleneck layer)
        drop_rate (float) - dropout rate after each dense layer
        num_classes (int) - number of classification classes
        small_inputs (bool) - set to True if images are 32x32. Otherwise assumes images are larger.
        efficient (bool) - set to True to use checkpointing. Much more memory efficient, but slower.
    """
    def __init__(self, growth_rate=12, block_config=(16, 16, 16), compression=0.5,
                 num_init_features=24, bn_size=4, drop_rate=0,
                 num_classes=10, small_inputs=True, efficient=False):

        super(DenseNet, self).__init__()
        assert 0 < compression <= 1, 'compression of densenet should be between 0 and 1'

        # First convolution
        if small_inputs:
            self.features = nn.Sequential(OrderedDict([
                ('conv0', nn.Conv2d(3, num_init_features, kernel_size=3, stride=1, padding=1, bias=False)),
            ]))
        else:
            self.features = nn.Sequential(OrderedDict([
                ('conv0', nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ]))
            self.features.add_module('norm0', nn.BatchNorm2d(num_init_features))
            self.features.add_module('relu0', nn.ReLU(inplace=True))
            self.features.add_module('pool0', nn.MaxPool2d(kernel_size=3, stride=2, padding=1,
                                                           ceil_mode=False))

        # Each denseblock
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(
                num_layers=num_layers,
                num_input_features=num_features,
                bn_size=bn_size,
                growth_rate=growth_rate,
                drop_rate=drop_rate,
                efficient=efficient,
            )
            self.features.add_module('denseblock%d' % (i + 1), block)
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                trans = _Transition(num_input_features=num_features,
                                    num_output_features=int(num_features * compression))
                self.features.add_module('transition%d' % (i + 1), trans)
                num_features = int(num_features * compression)

        # Final batch norm
        self.features.add_module('norm_final', nn.BatchNorm2d(num_features))

        # Linear layer
        self.classifier = nn.Linear(num_features, num_classes)

        # Initialization
        for name, param in self.named_parameters():
            if 'conv' in name and 'weight' in name:
                n = param.size(0) * param.size(2) * param.size(3)
                param.data.normal_().mul_(math.sqrt(2. / n))
            elif 'norm' in name and 'weight' in name:
                param.data.fill_(1)
            elif 'norm' in name and 'bias' in name:
                param.data.fill_(0)
            elif 'classifier' in name and 'bias' in name:
                param.data.fill_(0)

    def forward(self, x):
        features = self.features(x)
        out = F.relu(features, inplace=True)
        out = F.adaptive_avg_pool2d(out, (1, 1))
        out = torch.flatten(out, 1)
        out = self.classifier(out)
        return out


# demo.py: transforms.Normalize's constants
mean = [0.49139968, 0.48215841, 0.44653091]
stdv = [0.24703223, 0.24348513, 0.26158784]


def _normalize(x):
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(stdv).view(3, 1, 1)


def _random_crop_flip(x, gen, padding=2):
    # transforms.RandomCrop(IMG, padding=...) and transforms.RandomHorizontalFlip() on one CHW tensor
    padded = F.pad(x, (padding, padding, padding, padding))
    i, j = torch.randint(0, 2 * padding + 1, (2,), generator=gen).tolist()
    x = padded[:, i:i + IMG, j:j + IMG]
    if float(torch.rand((), generator=gen)) < 0.5:
        x = x.flip(-1)
    return x


class StripeColours(torch.utils.data.Dataset):
    """10 classes: 5 colours x 2 stripe orientations, stripes of random phase, pixel noise; values in [0, 1]."""

    def __init__(self, seed, n, train, bug=None):
        gen = torch.Generator().manual_seed(seed)
        self.train = train
        self.bug = bug
        self.gen = torch.Generator().manual_seed(seed + 7)
        colours = torch.rand(5, 3, generator=torch.Generator().manual_seed(1234)) * 0.8 + 0.1  # the class rule
        self.targets = torch.randint(0, 10, (n,), generator=gen)
        phase = torch.randint(0, 4, (n,), generator=gen)
        grid = torch.arange(IMG)
        imgs = []
        for c, p in zip(self.targets.tolist(), phase.tolist()):
            stripes = ((grid + p) // 2 % 2).float()
            pattern = stripes.view(1, IMG).expand(IMG, IMG) if c % 2 == 0 else stripes.view(IMG, 1).expand(IMG, IMG)
            img = 0.25 + 0.5 * colours[c // 2].view(3, 1, 1) * (0.4 + 0.6 * pattern)
            imgs.append(img)
        self.data = (torch.stack(imgs) + 0.05 * torch.randn(n, 3, IMG, IMG, generator=gen)).clamp(0, 1)

    def __getitem__(self, i):
        x = self.data[i]
        if self.train:
            x = _random_crop_flip(x, self.gen)
        x = _normalize(x)
        if self.bug == "labels_misaligned":
            return x, self.targets[(i + 1) % len(self.targets)]
        return x, self.targets[i]

    def __len__(self):
        return len(self.targets)



def _build(seed, bug=None):
    torch.manual_seed(seed)
    depth, growth_rate, efficient = 10, 8, True
    n_epochs, batch_size, lr, wd, momentum = 300, 16, 0.1, 0.0001, 0.9

    # demo(): DenseNet configuration
    if (depth - 4) % 3:
        raise Exception('Invalid depth')
    block_config = [(depth - 4) // 6 for _ in range(3)]

    train_set = StripeColours(seed, 320, train=True, bug=bug)
    test_set = StripeColours(seed + 1000, 64, train=False)

    model = DenseNet(
        growth_rate=growth_rate,
        block_config=block_config,
        num_init_features=growth_rate*2,
        num_classes=10,
        small_inputs=True,
        efficient=efficient,
    )

    # train(): loaders, optimizer, scheduler
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=0,
                                               generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=batch_size, shuffle=False, num_workers=0)
    model_wrapper = model
    if bug == "classifier_left_out_of_optimizer":
        params = model_wrapper.features.parameters()
    else:
        params = model_wrapper.parameters()
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=wd)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[0.5 * n_epochs, 0.75 * n_epochs],
                                                     gamma=0.1)

    state = {"it": iter(train_loader)}

    def train_step():
        # one iteration of train_epoch's loop
        try:
            input, target = next(state["it"])
        except StopIteration:
            scheduler.step()
            state["it"] = iter(train_loader)
            input, target = next(state["it"])
        model_wrapper.train()

        # compute output
        output = model_wrapper(input)
        loss = torch.nn.functional.cross_entropy(output, target)

        # measure accuracy and record loss
        batch_size_ = target.size(0)
        _, pred = output.data.cpu().topk(1, dim=1)
        _error = torch.ne(pred.squeeze(), target.cpu()).float().sum().item() / batch_size_

        # compute gradient and do SGD step
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def test_epoch(model, loader):
        # Model on eval mode
        model.eval()
        errors, count = 0.0, 0
        with torch.no_grad():
            for batch_idx, (input, target) in enumerate(loader):
                output = model(input)
                _loss = torch.nn.functional.cross_entropy(output, target)
                _, pred = output.data.cpu().topk(1, dim=1)
                errors += torch.ne(pred.squeeze(), target.cpu()).float().sum().item()
                count += target.size(0)
        model.train()
        return errors / count

    def eval_fn(model, batch):
        return test_epoch(model, test_loader)

    gen = torch.Generator().manual_seed(seed + 2)
    idx = torch.randperm(len(train_set), generator=gen)[:batch_size]
    xb = torch.stack([train_set[int(i)][0] for i in idx])
    yb = torch.stack([train_set[int(i)][1] for i in idx])

    return Program(name="efficientdensenet_cifar", model=model, batch=(xb, yb),
                   loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out, y), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the optimizer built over the feature extractor only: the linear classifier stays at its init (classic)
    Bug("classifier_left_out_of_optimizer", functools.partial(_build, bug="classifier_left_out_of_optimizer"),
        "four_structures", ("classifier",)),
    # the dataset's __getitem__ pairs image i with the label of image i + 1 (classic off-by-one): the labels carry
    # nothing about the images
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() left out of train_epoch: gradients pile up over the steps (classic, README rule 6)
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
