"""Stochastic Weight Averaging of timgaripov/swa: the repository's ``VGG16BN`` (``models/vgg.py``: VGG-16 conv stack
with BatchNorm, dropout MLP classifier, He-normal conv init) trained by ``train.py`` with ``--swa``: SGD (momentum
0.9, weight decay 5e-4) over ``F.cross_entropy``, the piecewise-linear ``schedule(epoch)`` (constant to half of
``swa_start``, linear down to ``swa_lr`` by 90%, then flat) set each epoch with ``utils.adjust_learning_rate``,
``utils.train_epoch``'s loop body (forward, loss, ``zero_grad``, ``backward``, ``step``), and from ``swa_start`` on,
every ``swa_c_epochs`` epochs, ``utils.moving_average(swa_model, model, 1 / (swa_n + 1))``, ``utils.bn_update``
over the training loader and ``utils.eval`` of the SWA model.

Source: https://github.com/timgaripov/swa
Commit: 411b2fcad59bec60c6c9eb1eb19ab906540e5ea2
Files: train.py, utils.py, models/vgg.py, README.md (the VGG16 SWA command: --lr_init=0.05 --wd=5e-4 --swa
--swa_lr=0.01)
License: BSD-2-Clause (Copyright (c) 2018, Pavel Izmailov, Dmitrii Podoprikhin, Timur Garipov, Dmitry Vetrov,
Andrew Gordon Wilson; full text in LICENSES/timgaripov-swa.txt)
Domain: vision, image classification (SGD with a piecewise-linear schedule, then stochastic weight averaging with
BatchNorm statistics re-estimated for the averaged model)

Deviations from the original:
- model: ``VGG16BN``, the BatchNorm variant ``models/vgg.py`` defines, in place of the README command's ``VGG16``
  (so that ``bn_update`` has statistics to re-estimate); the command's optimizer settings are kept;
- sizes for 2 CPU cores: the VGG-16 configuration's widths divided by 8 (64..512 -> 8..64) and the classifier's
  512-wide layers -> 64 (the ``cfg`` layout, 13 convs and 5 max-pools, is kept); batch 128 -> 32; 50000 training
  images -> 256, 10000 test images -> 128; epochs 300 -> 12 and ``swa_start`` 161 -> 7 (the same proportion);
- data: CIFAR is replaced by synthetic 32x32 RGB images made from ``seed`` (each class a left-right symmetric smooth
  pattern, so the flip keeps the label, plus noise); torchvision is not available, so ``transform_train``
  (RandomHorizontalFlip, RandomCrop(32, padding=4), ToTensor, Normalize) and ``transform_test`` are written out in
  plain torch; DataLoader without workers or pinned memory;
- ``.cuda()``, ``cudnn.benchmark``, ``Variable``, ``async=True``, checkpoint saving, ``tabulate`` printing and
  ``--resume`` are dropped (CPU); ``loss.data[0]`` (pre-0.4 PyTorch) is ``loss.item()``;
  ``eval`` and ``bn_update`` run under ``torch.no_grad()`` (the original's Variables build graphs it never uses);
- one ``train_step`` is one batch of ``utils.train_epoch``; the epoch's ``schedule`` / ``adjust_learning_rate`` run
  before its first batch, and after its last batch the rest of the epoch body of ``train.py`` runs (the periodic
  ``eval``, and the SWA collection with ``bn_update`` and the SWA model's ``eval``); ``eval_fn`` is ``utils.eval``'s
  accuracy on the test loader;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, C408, SIM118  (the original code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class args:  # (port) the argparse namespace of the README's VGG16 SWA command, sizes shrunk
    batch_size = 32  # 128
    epochs = 12  # 300
    eval_freq = 5
    lr_init = 0.05
    momentum = 0.9
    wd = 5e-4
    swa = True
    swa_start = 7  # 161
    swa_lr = 0.01
    swa_c_epochs = 1
    seed = 1


IMG, N_TRAIN, N_TEST, NUM_CLASSES = 32, 256, 128, 10
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ---- models/vgg.py ---------------------------------------------------------------------------------------------

def make_layers(cfg, batch_norm=False):
    layers = list()
    in_channels = 3
    for v in cfg:
        if v == 'M':
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = v
    return nn.Sequential(*layers)


cfg = {  # (port) widths / 8
    16: [8, 8, 'M', 16, 16, 'M', 32, 32, 32, 'M', 64, 64, 64, 'M', 64, 64, 64, 'M'],
}
HIDDEN = 64  # (port) 512


class VGG(nn.Module):
    def __init__(self, num_classes=10, depth=16, batch_norm=False):
        super(VGG, self).__init__()
        self.features = make_layers(cfg[depth], batch_norm)
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(True),
            nn.Linear(HIDDEN, num_classes),
        )

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                m.bias.data.zero_()

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1)
        x = self.classifier(x)
        return x


# ---- (port) transform_train / transform_test written out --------------------------------------------------------

def _normalize(x):
    return (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def transform_train(x):
    if torch.rand(()) < 0.5:  # RandomHorizontalFlip
        x = x.flip(-1)
    x = F.pad(x, (4, 4, 4, 4))  # RandomCrop(32, padding=4)
    i, j = torch.randint(0, 9, (2,)).tolist()
    x = x[:, i:i + IMG, j:j + IMG]
    return _normalize(x)


def transform_test(x):
    return _normalize(x)


class SyntheticCIFAR(torch.utils.data.Dataset):
    """Each class a smooth left-right symmetric RGB pattern (from ``seed``), plus per-image noise, in [0, 1]."""

    def __init__(self, seed, n, transform, split_seed):
        gen = torch.Generator().manual_seed(seed)
        low = torch.rand(NUM_CLASSES, 3, 4, 4, generator=gen)
        low = (low + low.flip(-1)) / 2
        templates = F.interpolate(low, size=(IMG, IMG), mode='bilinear', align_corners=False)
        sgen = torch.Generator().manual_seed(split_seed)
        self.targets = torch.randint(0, NUM_CLASSES, (n,), generator=sgen)
        noise = 0.15 * torch.randn(n, 3, IMG, IMG, generator=sgen)
        self.data = (templates[self.targets] + noise).clamp(0, 1)
        self.transform = transform

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]

    def __len__(self):
        return len(self.targets)


# ---- utils.py --------------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    return lr


def eval(loader, model, criterion, bug=None):
    loss_sum = 0.0
    correct = 0.0

    if bug != "eval_without_model_eval":
        model.eval()

    for i, (input, target) in enumerate(loader):
        input_var = input
        target_var = target

        with torch.no_grad():  # (port) the original builds a graph it never uses
            output = model(input_var)
        loss = criterion(output, target_var)

        loss_sum += loss.item() * input.size(0)
        pred = output.data.max(1, keepdim=True)[1]
        correct += pred.eq(target_var.data.view_as(pred)).sum().item()

    return {
        'loss': loss_sum / len(loader.dataset),
        'accuracy': correct / len(loader.dataset) * 100.0,
    }


def moving_average(net1, net2, alpha=1):
    for param1, param2 in zip(net1.parameters(), net2.parameters()):
        param1.data *= (1.0 - alpha)
        param1.data += param2.data * alpha


def _check_bn(module, flag):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        flag[0] = True


def check_bn(model):
    flag = [False]
    model.apply(lambda module: _check_bn(module, flag))
    return flag[0]


def reset_bn(module):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.running_mean = torch.zeros_like(module.running_mean)
        module.running_var = torch.ones_like(module.running_var)


def _get_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        momenta[module] = module.momentum


def _set_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.momentum = momenta[module]


def bn_update(loader, model):
    """
        BatchNorm buffers update (if any).
        Performs 1 epochs to estimate buffers average using train dataset.

        :param loader: train dataset loader for buffers average estimation.
        :param model: model being update
        :return: None
    """
    if not check_bn(model):
        return
    model.train()
    momenta = {}
    model.apply(reset_bn)
    model.apply(lambda module: _get_momenta(module, momenta))
    n = 0
    with torch.no_grad():  # (port) as the original's Variable without requires_grad
        for input, _ in loader:
            input_var = input
            b = input_var.data.size(0)

            momentum = b / (n + b)
            for module in momenta.keys():
                module.momentum = momentum

            model(input_var)
            n += b

    model.apply(lambda module: _set_momenta(module, momenta))


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)

    train_set = SyntheticCIFAR(seed, N_TRAIN, transform_train, split_seed=seed + 1)
    test_set = SyntheticCIFAR(seed, N_TEST, transform_test, split_seed=seed + 2)
    loaders = {
        'train': torch.utils.data.DataLoader(
            train_set,
            batch_size=args.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),
        ),
        'test': torch.utils.data.DataLoader(
            test_set,
            batch_size=args.batch_size,
            shuffle=False,
        )
    }
    num_classes = int(max(train_set.targets)) + 1

    model = VGG(num_classes=num_classes, batch_norm=True)  # VGG16BN: kwargs = {'batch_norm': True}

    if args.swa:
        swa_model = VGG(num_classes=num_classes, batch_norm=True)
        swa_n = 0

    def schedule(epoch):
        t = (epoch) / (args.swa_start if args.swa else args.epochs)
        lr_ratio = args.swa_lr / args.lr_init if args.swa else 0.01
        if t <= 0.5:
            factor = 1.0
        elif t <= 0.9:
            factor = 1.0 - (1.0 - lr_ratio) * (t - 0.5) / 0.4
        else:
            factor = lr_ratio
        return args.lr_init * factor

    criterion = F.cross_entropy
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=args.lr_init,
        momentum=args.momentum,
        weight_decay=args.wd
    )

    st = {"epoch": 0, "it": None, "i": 0, "swa_n": swa_n, "loss_sum": 0.0, "correct": 0.0, "test_res": None,
          "swa_res": None}
    n_batches = len(loaders['train'])

    def end_of_epoch(epoch):
        if epoch == 0 or epoch % args.eval_freq == args.eval_freq - 1 or epoch == args.epochs - 1:
            st["test_res"] = eval(loaders['test'], model, criterion, bug=bug)
        else:
            st["test_res"] = {'loss': None, 'accuracy': None}

        if args.swa and (epoch + 1) >= args.swa_start and (epoch + 1 - args.swa_start) % args.swa_c_epochs == 0:
            if bug == "moving_average_args_swapped":
                moving_average(model, swa_model, 1.0 / (st["swa_n"] + 1))
            else:
                moving_average(swa_model, model, 1.0 / (st["swa_n"] + 1))
            st["swa_n"] += 1
            if epoch == 0 or epoch % args.eval_freq == args.eval_freq - 1 or epoch == args.epochs - 1:
                bn_update(loaders['train'], swa_model)
                st["swa_res"] = eval(loaders['test'], swa_model, criterion, bug=bug)
            else:
                st["swa_res"] = {'loss': None, 'accuracy': None}

    def train_step():
        # one batch of utils.train_epoch(loaders['train'], model, criterion, optimizer)
        if st["it"] is None:
            lr = schedule(st["epoch"])
            adjust_learning_rate(optimizer, lr)
            model.train()
            st["it"] = enumerate(loaders['train'])
            st["loss_sum"], st["correct"] = 0.0, 0.0
        i, (input, target) = next(st["it"])
        input_var = input
        target_var = target

        output = model(input_var)
        loss = criterion(output, target_var)

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()

        st["loss_sum"] += loss.item() * input.size(0)
        pred = output.data.max(1, keepdim=True)[1]
        st["correct"] += pred.eq(target_var.data.view_as(pred)).sum().item()

        if i == n_batches - 1:  # the epoch's end: the rest of train.py's epoch body
            st["it"] = None
            end_of_epoch(st["epoch"])
            st["epoch"] = (st["epoch"] + 1) % args.epochs
        return loss.detach()

    def eval_fn(m, batch):
        return eval(loaders['test'], m, criterion, bug=bug)['accuracy']

    first = next(iter(torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=False)))
    return Program(name="swa_vgg16bn", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=loaders['train'])


build = functools.partial(_build)

BUGS = [
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
    # classic: utils.eval without model.eval(): dropout and batch statistics at evaluation
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
    # classic: moving_average's arguments swapped: the SGD model is pulled onto the running average
    Bug("moving_average_args_swapped", functools.partial(_build, bug="moving_average_args_swapped"), "step_probe",
        (), kind="step.soft_update_reversed"),
]
