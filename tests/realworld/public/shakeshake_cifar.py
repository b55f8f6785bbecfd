"""Shake-Shake regularization on CIFAR-10 of hysts/pytorch_shake_shake: the repository's ``shake_shake`` network
(a 3x3 stem with BatchNorm, three stages of BasicBlocks each holding two ReLU-conv-BN-ReLU-conv-BN residual paths
mixed by ``ShakeFunction``: ``alpha`` per image in the forward pass and an independent ``beta`` per image in the
backward pass while training, 0.5 each in eval; a two-branch 1x1-conv skip connection with a one-pixel shifted second
branch when the width changes; ReLU, global average pooling and a linear head; Kaiming fan-out init), trained by
``train.py`` as the README runs it (``--shake_forward True --shake_backward True --shake_image True``):
``CrossEntropyLoss``, SGD (lr 0.2, momentum 0.9, weight decay 1e-4, Nesterov), cosine annealing to ``lr_min`` 0
through ``LambdaLR`` stepped after every batch, ``test`` (``eval()``, ``no_grad``) before training and after every
epoch; ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``Normalize`` with the CIFAR-10 statistics.

Source: https://github.com/hysts/pytorch_shake_shake
Commit: 0a40ddd8e3526e9f1cd5510fbf55d684512b17c4
Files: train.py, shake_shake.py, functions/shake_shake_function.py, dataloader.py, README.md
License: MIT (Copyright (c) 2017 hysts)
Domain: image classification (residual CNN with stochastic branch mixing)

Deviations from the original:
- sizes: ``--depth 26 --base_channels 32`` -> depth 8 (one block per stage) and base channels 8; 32x32 images ->
  16x16 (``RandomCrop(16, padding=4)``; ``input_shape`` follows); batch 128 -> 32; 50000 / 10000 CIFAR-10 images ->
  512 / 64 synthetic ones; 1800 epochs -> 30 (the cosine schedule spans epochs x steps per epoch as written);
- ``ctx.saved_variables`` (removed from current PyTorch) is read as ``ctx.saved_tensors``;
- data: ``torchvision.datasets.CIFAR10`` (a download) is replaced by synthetic RGB images made from ``seed``: each class
  a colour plus a class-specific stripe orientation over smooth noise, in [0, 1]; the torchvision transforms are
  written out in plain torch; DataLoader without workers or pinning;
- logging, tensorboard, the json log and checkpoint saving are dropped; ``.to(device)`` is dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop (``scheduler.step()`` after every batch, as written); when the
  loader is exhausted the epoch ends as in ``main()``: ``test``, then the next ``train()`` call's ``model.train()``;
  the ``test`` before training runs in ``build``; ``eval_fn`` is ``test``'s accuracy on a batch; ``task_probe`` a
  held-out (images, labels) pair.
"""
# ruff: noqa: F841, PLR0402, RUF059, UP032  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_TEST, N_CLASSES = 16, 512, 64, 10
DEPTH, BASE_CHANNELS, EPOCHS, BATCH_SIZE = 8, 8, 30, 32
BASE_LR, WEIGHT_DECAY, MOMENTUM, NESTEROV, LR_MIN = 0.2, 1e-4, 0.9, True, 0


# ---- functions/shake_shake_function.py -----------------------------------------------------------------------

class ShakeFunction(Function):
    @staticmethod
    def forward(ctx, x1, x2, alpha, beta):
        ctx.save_for_backward(x1, x2, alpha, beta)

        y = x1 * alpha + x2 * (1 - alpha)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2, alpha, beta = ctx.saved_tensors
        grad_x1 = grad_x2 = grad_alpha = grad_beta = None

        if ctx.needs_input_grad[0]:
            grad_x1 = grad_output * beta
        if ctx.needs_input_grad[1]:
            grad_x2 = grad_output * (1 - beta)

        return grad_x1, grad_x2, grad_alpha, grad_beta


shake_function = ShakeFunction.apply


def get_alpha_beta(batch_size, shake_config, device):
    forward_shake, backward_shake, shake_image = shake_config

    if forward_shake and not shake_image:
        alpha = torch.rand(1)
    elif forward_shake and shake_image:
        alpha = torch.rand(batch_size).view(batch_size, 1, 1, 1)
    else:
        alpha = torch.FloatTensor([0.5])

    if backward_shake and not shake_image:
        beta = torch.rand(1)
    elif backward_shake and shake_image:
        beta = torch.rand(batch_size).view(batch_size, 1, 1, 1)
    else:
        beta = torch.FloatTensor([0.5])

    alpha = alpha.to(device)
    beta = beta.to(device)

    return alpha, beta


# ---- shake_shake.py ------------------------------------------------------------------------------------------
def initialize_weights(module):
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight.data, mode='fan_out')
    elif isinstance(module, nn.BatchNorm2d):
        module.weight.data.fill_(1)
        module.bias.data.zero_()
    elif isinstance(module, nn.Linear):
        module.bias.data.zero_()


class ResidualPath(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()

        self.conv1 = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=3,
            stride=stride,
            padding=1,
            bias=False,
        )
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels,
                               out_channels,
                               kernel_size=3,
                               stride=1,
                               padding=1,
                               bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        x = F.relu(x, inplace=False)
        x = F.relu(self.bn1(self.conv1(x)), inplace=False)
        x = self.bn2(self.conv2(x))
        return x


class SkipConnection(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels,
                               out_channels // 2,
                               kernel_size=1,
                               stride=1,
                               padding=0,
                               bias=False)
        self.conv2 = nn.Conv2d(in_channels,
                               out_channels // 2,
                               kernel_size=1,
                               stride=1,
                               padding=0,
                               bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.stride = stride

    def forward(self, x):
        x = F.relu(x, inplace=False)
        y1 = F.avg_pool2d(x, kernel_size=1, stride=self.stride, padding=0)
        y1 = self.conv1(y1)

        y2 = F.pad(x[:, :, 1:, 1:], (0, 1, 0, 1))
        y2 = F.avg_pool2d(y2, kernel_size=1, stride=self.stride, padding=0)
        y2 = self.conv2(y2)

        z = torch.cat([y1, y2], dim=1)
        z = self.bn(z)

        return z


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride, shake_config, bug=None):
        super().__init__()
        self.bug = bug

        self.shake_config = shake_config

        self.residual_path1 = ResidualPath(in_channels, out_channels, stride)
        self.residual_path2 = ResidualPath(in_channels, out_channels, stride)

        self.shortcut = nn.Sequential()
        if in_channels != out_channels:
            self.shortcut.add_module(
                'skip', SkipConnection(in_channels, out_channels, stride))

    def forward(self, x):
        x1 = self.residual_path1(x)
        x2 = self.residual_path2(x)

        if self.training or self.bug == "shake_kept_in_eval":
            shake_config = self.shake_config
        else:
            shake_config = (False, False, False)

        alpha, beta = get_alpha_beta(x.size(0), shake_config, x.device)
        y = shake_function(x1, x2, alpha, beta)

        return self.shortcut(x) + y


class Network(nn.Module):
    def __init__(self, config, bug=None):
        super().__init__()
        self.bug = bug

        input_shape = config['input_shape']
        n_classes = config['n_classes']

        base_channels = config['base_channels']
        depth = config['depth']
        self.shake_config = (config['shake_forward'], config['shake_backward'],
                             config['shake_image'])

        block = BasicBlock
        n_blocks_per_stage = (depth - 2) // 6
        assert n_blocks_per_stage * 6 + 2 == depth

        n_channels = [base_channels, base_channels * 2, base_channels * 4]

        self.conv = nn.Conv2d(input_shape[1],
                              16,
                              kernel_size=3,
                              stride=1,
                              padding=1,
                              bias=False)
        self.bn = nn.BatchNorm2d(16)

        self.stage1 = self._make_stage(16,
                                       n_channels[0],
                                       n_blocks_per_stage,
                                       block,
                                       stride=1)
        self.stage2 = self._make_stage(n_channels[0],
                                       n_channels[1],
                                       n_blocks_per_stage,
                                       block,
                                       stride=2)
        self.stage3 = self._make_stage(n_channels[1],
                                       n_channels[2],
                                       n_blocks_per_stage,
                                       block,
                                       stride=2)

        # compute conv feature size
        with torch.no_grad():
            self.feature_size = self._forward_conv(
                torch.zeros(*input_shape)).view(-1).shape[0]

        self.fc = nn.Linear(self.feature_size, n_classes)

        # initialize weights
        self.apply(initialize_weights)

    def _make_stage(self, in_channels, out_channels, n_blocks, block, stride):
        stage = nn.Sequential()
        for index in range(n_blocks):
            block_name = 'block{}'.format(index + 1)
            if index == 0:
                stage.add_module(
                    block_name,
                    block(in_channels,
                          out_channels,
                          stride=stride,
                          shake_config=self.shake_config, bug=self.bug))
            else:
                stage.add_module(
                    block_name,
                    block(out_channels,
                          out_channels,
                          stride=1,
                          shake_config=self.shake_config, bug=self.bug))
        return stage

    def _forward_conv(self, x):
        x = self.bn(self.conv(x))
        x = self.stage1(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = F.relu(x, inplace=True)
        x = F.adaptive_avg_pool2d(x, output_size=1)
        return x

    def forward(self, x):
        x = self._forward_conv(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        return x


# ---- synthetic CIFAR-10 and dataloader.py's transforms in plain torch -----------------------------------------

MEAN = torch.tensor([0.4914, 0.4822, 0.4465])[:, None, None]
STD = torch.tensor([0.2470, 0.2435, 0.2616])[:, None, None]


def make_images(gen, n, colours, angles):
    labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.arange(IMG, dtype=torch.float32), torch.arange(IMG, dtype=torch.float32),
                            indexing="ij")
    a = angles[labels][:, None, None]
    phase = 2 * np.pi * torch.rand(n, 1, 1, generator=gen)
    stripes = 0.25 * torch.sin(1.2 * (xx * torch.cos(a) + yy * torch.sin(a)) + phase)
    noise = F.interpolate(0.2 * torch.randn(n, 3, IMG // 4, IMG // 4, generator=gen), size=(IMG, IMG),
                          mode="bilinear", align_corners=False)
    images = colours[labels][:, :, None, None] + stripes[:, None] + noise
    return images.clamp(0, 1), labels


class ImageSet(Dataset):
    def __init__(self, images, labels, train, gen):
        self.images, self.labels, self.train, self.gen = images, labels, train, gen

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = F.pad(x, (4, 4, 4, 4))  # RandomCrop(32, padding=4)
            i = int(torch.randint(0, 9, (1,), generator=self.gen))
            j = int(torch.randint(0, 9, (1,), generator=self.gen))
            x = x[:, i:i + IMG, j:j + IMG]
            if float(torch.rand(1, generator=self.gen)) < 0.5:  # RandomHorizontalFlip()
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[idx]  # ToTensor(), Normalize(mean, std)


# ---- train.py ------------------------------------------------------------------------------------------------

def _cosine_annealing(step, total_steps, lr_max, lr_min):
    return lr_min + (lr_max -
                     lr_min) * 0.5 * (1 + np.cos(step / total_steps * np.pi))


def get_cosine_annealing_scheduler(optimizer, optim_config):
    total_steps = optim_config['epochs'] * optim_config['steps_per_epoch']

    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lr_lambda=lambda step: _cosine_annealing(
            step,
            total_steps,
            1,  # since lr_lambda computes multiplicative factor
            optim_config['lr_min'] / optim_config['base_lr']))

    return scheduler


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = 0.2 + 0.6 * torch.rand(N_CLASSES, 3, generator=gen)
    angles = torch.randperm(N_CLASSES, generator=gen).float() * (np.pi / N_CLASSES)
    train_x, train_y = make_images(gen, N_TRAIN, colours, angles)
    test_x, test_y = make_images(gen, N_TEST, colours, angles)
    train_loader = DataLoader(ImageSet(train_x, train_y, True, torch.Generator().manual_seed(seed + 1)),
                              batch_size=BATCH_SIZE, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, False, None), batch_size=BATCH_SIZE, num_workers=0,
                             shuffle=False, drop_last=False)

    model_config = {'arch': 'shake_shake', 'depth': DEPTH, 'base_channels': BASE_CHANNELS,
                    'shake_forward': True, 'shake_backward': True, 'shake_image': True,
                    'input_shape': (1, 3, IMG, IMG), 'n_classes': N_CLASSES}
    optim_config = {'epochs': EPOCHS, 'batch_size': BATCH_SIZE, 'base_lr': BASE_LR, 'weight_decay': WEIGHT_DECAY,
                    'momentum': MOMENTUM, 'nesterov': NESTEROV, 'lr_min': LR_MIN}
    model = Network(model_config, bug=bug)
    criterion = nn.CrossEntropyLoss(reduction='mean')
    optim_config['steps_per_epoch'] = len(train_loader)
    optimizer = torch.optim.SGD(model.parameters(),
                                lr=optim_config['base_lr'],
                                momentum=optim_config['momentum'],
                                weight_decay=optim_config['weight_decay'],
                                nesterov=optim_config['nesterov'])
    scheduler = get_cosine_annealing_scheduler(optimizer, optim_config)

    def test():
        model.eval()
        with torch.no_grad():
            for step, (data, targets) in enumerate(test_loader):
                outputs = model(data)
                loss = criterion(outputs, targets)
                _, preds = torch.max(outputs, dim=1)

    test()  # run test before start training

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                test()
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, targets = next_batch()

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        outputs = model(data)
        loss = criterion(outputs, targets)
        loss.backward()

        optimizer.step()

        _, preds = torch.max(outputs, dim=1)
        scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        data, targets = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            _, preds = torch.max(model(data), dim=1)
        model.train(was_training)
        return float(preds.eq(targets).float().mean())

    probe = ((test_x - MEAN) / STD, test_y)
    first = next(iter(DataLoader(ImageSet(train_x, train_y, False, None), batch_size=BATCH_SIZE)))
    return Program(name="shakeshake_cifar", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # BasicBlock's ``if self.training`` test dropped: the random alpha mixing stays on under eval(), so test-time
    # predictions are stochastic instead of the 0.5 / 0.5 average of the two residual paths.
    Bug("shake_kept_in_eval", functools.partial(_build, bug="shake_kept_in_eval"), "six_claims", ("EVALUATION",)),
    # optimizer.zero_grad() dropped from the loop: the gradients of every batch accumulate.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
