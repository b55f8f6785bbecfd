"""RepDistiller's knowledge distillation benchmark, as its README runs Hinton's KD
(``python train_student.py --path_t ./save/models/resnet32x4_vanilla/ckpt_epoch_240.pth --distill kd --model_s
resnet8x4 -r 0.1 -a 0.9 -b 0``): a CIFAR ResNet student distilled from a teacher CIFAR ResNet by
``train_distill`` (``loss = gamma * CE(logit_s, target) + alpha * DistillKL(T=4)(logit_s, logit_t) + beta * 0``), the
teacher run in eval mode under ``no_grad``, SGD (lr 0.05, momentum 0.9, weight decay 5e-4) over ``trainable_list``
(the student) and the step decay of ``adjust_learning_rate`` at epochs 150/180/210. The teacher is trained first by
``train_teacher.py`` (``train_vanilla``, the same SGD settings).

Source: https://github.com/HobbitLong/RepDistiller
Commit: b84f547c5db6a35318d4671d7d5c4de74c822403
Files: train_student.py, train_teacher.py, helper/loops.py, helper/util.py, distiller_zoo/KD.py, models/resnet.py,
  dataset/cifar100.py, scripts/run_cifar_distill.sh
License: BSD-2-Clause (Copyright (c) 2020, Yonglong Tian; LICENSES/HobbitLong-RepDistiller.txt)
Domain: knowledge distillation (logit KD with temperature, CIFAR ResNets, teacher trained first)

Deviations from the original:
- sizes: the teacher resnet32x4 (depth 32, filters [32, 64, 128, 256]) -> depth 8, filters [8, 16, 32, 64]; the
  student resnet8x4 (depth 8, filters [32, 64, 128, 256]) -> depth 8, filters [4, 8, 16, 32]; 100 classes -> 10;
  batch 64 -> 16; the ResNet class and blocks are unchanged;
- the teacher: ``load_teacher`` loads a downloaded checkpoint; here the teacher is trained at build time by
  ``train_vanilla``'s loop body (train_teacher.py's SGD lr 0.05, momentum 0.9, weight decay 5e-4) for 40 steps on
  the same training data, once per seed (cached), and its state dict is loaded into a fresh model as
  ``load_teacher`` does;
- data: CIFAR-100 (``CIFAR100Instance``, which adds the sample index) is replaced by synthetic 32x32 RGB images made
  from ``seed`` (10 classes, each a fixed smooth random pattern, with a random brightness and noise), 256 training
  and 64 validation images; torchvision is not available, so the ``RandomCrop(32, padding=4)``,
  ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize`` of ``get_cifar100_dataloaders`` are written out in plain
  torch; no workers, no GPU (the ``.cuda()`` branches are dropped);
- ``train_distill``'s other distillation branches (hint, crd, attention, ... : not configured by ``--distill kd``)
  are left out, as are the ``AverageMeter``/``accuracy`` meters, printing, tensorboard logging and checkpoint saving;
  ``F.kl_div(..., size_average=False)`` (deprecated) is written ``reduction='sum'``, its documented equivalent;
- one ``train_step`` is one iteration of ``train_distill``'s batch loop (the epoch's ``module.train()`` /
  teacher ``eval()`` setup and ``adjust_learning_rate`` run when an epoch starts); ``eval_fn`` is ``validate``'s
  top-1 accuracy of the student on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C410, PLR0402, RUF059, UP008  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN = 256
N_VAL = 64
N_CLS = 10
TEACHER_STEPS = 40


# ---- models/resnet.py ----------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, is_last=False):
        super(BasicBlock, self).__init__()
        self.is_last = is_last
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        preact = out
        out = F.relu(out)
        if self.is_last:
            return out, preact
        else:
            return out


class ResNet(nn.Module):

    def __init__(self, depth, num_filters, block_name='BasicBlock', num_classes=10):
        super(ResNet, self).__init__()
        # Model type specifies number of layers for CIFAR-10 model
        if block_name.lower() == 'basicblock':
            assert (depth - 2) % 6 == 0, 'When use basicblock, depth should be 6n+2, e.g. 20, 32, 44, 56, 110, 1202'
            n = (depth - 2) // 6
            block = BasicBlock
        else:
            raise ValueError('block_name shoule be Basicblock or Bottleneck')

        self.inplanes = num_filters[0]
        self.conv1 = nn.Conv2d(3, num_filters[0], kernel_size=3, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(num_filters[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, num_filters[1], n)
        self.layer2 = self._make_layer(block, num_filters[2], n, stride=2)
        self.layer3 = self._make_layer(block, num_filters[3], n, stride=2)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(num_filters[3] * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = list([])
        layers.append(block(self.inplanes, planes, stride, downsample, is_last=(blocks == 1)))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes, is_last=(i == blocks-1)))

        return nn.Sequential(*layers)

    def forward(self, x, is_feat=False, preact=False):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)  # 32x32
        f0 = x

        x, f1_pre = self.layer1(x)  # 32x32
        f1 = x
        x, f2_pre = self.layer2(x)  # 16x16
        f2 = x
        x, f3_pre = self.layer3(x)  # 8x8
        f3 = x

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        f4 = x
        x = self.fc(x)

        if is_feat:
            if preact:
                return [f0, f1_pre, f2_pre, f3_pre, f4], x
            else:
                return [f0, f1, f2, f3, f4], x
        else:
            return x


def resnet8x4(**kwargs):
    return ResNet(8, [4, 8, 16, 32], 'basicblock', **kwargs)


def resnet32x4(**kwargs):
    return ResNet(8, [8, 16, 32, 64], 'basicblock', **kwargs)


model_dict = {
    'resnet8x4': resnet8x4,
    'resnet32x4': resnet32x4,
}


# ---- distiller_zoo/KD.py -------------------------------------------------------------------------------------

class DistillKL(nn.Module):
    """Distilling the Knowledge in a Neural Network"""
    def __init__(self, T, bug=None):
        super(DistillKL, self).__init__()
        self.T = T
        self.bug = bug

    def forward(self, y_s, y_t):
        p_s = F.log_softmax(y_s/self.T, dim=1)
        if self.bug == "teacher_temperature_dropped":
            p_t = F.softmax(y_t, dim=1)
        else:
            p_t = F.softmax(y_t/self.T, dim=1)
        if self.bug == "kl_div_mean_reduction":
            loss = F.kl_div(p_s, p_t, reduction='mean') * (self.T**2) / y_s.shape[0]
        else:
            loss = F.kl_div(p_s, p_t, reduction='sum') * (self.T**2) / y_s.shape[0]
        return loss


# ---- helper/util.py ------------------------------------------------------------------------------------------

def adjust_learning_rate(epoch, opt, optimizer):
    """Sets the learning rate to the initial LR decayed by decay rate every steep step"""
    steps = np.sum(epoch > np.asarray(opt.lr_decay_epochs))
    if steps > 0:
        new_lr = opt.learning_rate * (opt.lr_decay_rate ** steps)
        for param_group in optimizer.param_groups:
            param_group['lr'] = new_lr


# ---- dataset/cifar100.py (CIFAR100Instance on synthetic images) ----------------------------------------------

MEAN = torch.tensor((0.5071, 0.4867, 0.4408)).view(3, 1, 1)
STD = torch.tensor((0.2675, 0.2565, 0.2761)).view(3, 1, 1)


def make_images(seed):
    """N_CLS classes, each a fixed smooth random RGB pattern; an image is its class pattern, scaled, plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate((torch.rand(N_CLS, 3, 4, 4, generator=g) < 0.5).float(), size=32, mode="bilinear",
                              align_corners=False)

    def sample(n):
        labels = torch.randint(N_CLS, (n,), generator=g)
        scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
        images = (templates[labels] * scale + 0.1 * torch.rand(n, 3, 32, 32, generator=g)).clamp(0, 1)
        return images, labels

    return templates, sample(N_TRAIN), sample(N_VAL)


class CIFAR100Instance(Dataset):
    """CIFAR100Instance Dataset: (img, target, index), the transforms written out.
    """
    def __init__(self, images, labels, train):
        self.images, self.labels, self.train = images, labels, train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        img = self.images[index]
        if self.train:  # transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = (int(v) for v in torch.randint(0, 9, (2,)))
            img = padded[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
        img = (img - MEAN) / STD  # transforms.ToTensor(), transforms.Normalize(mean, std)
        if self.train:
            return img, self.labels[index], index
        return img, self.labels[index]


# ---- train_teacher.py (train_vanilla's loop body), cached per seed -------------------------------------------

_TEACHERS = {}


def train_teacher(seed, train_x, train_y):
    if seed not in _TEACHERS:
        g = torch.get_rng_state()
        torch.manual_seed(seed + 1000)
        model = model_dict['resnet32x4'](num_classes=N_CLS)
        optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        criterion = nn.CrossEntropyLoss()
        loader = DataLoader(CIFAR100Instance(train_x, train_y, train=True), batch_size=16, shuffle=True,
                            generator=torch.Generator().manual_seed(seed + 1000))
        model.train()
        step = 0
        while step < TEACHER_STEPS:
            for input, target, _index in loader:
                input = input.float()
                output = model(input)
                loss = criterion(output, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step == TEACHER_STEPS:
                    break
        _TEACHERS[seed] = {'model': {k: v.clone() for k, v in model.state_dict().items()}}
        torch.set_rng_state(g)
    return _TEACHERS[seed]


def load_teacher(checkpoint, n_cls):
    model = model_dict['resnet32x4'](num_classes=n_cls)
    model.load_state_dict(checkpoint['model'])
    return model


# ---- train_student.py + helper/loops.py (train_distill) ------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    opt = argparse.Namespace(batch_size=16, num_workers=0, epochs=240, learning_rate=0.05,
                             lr_decay_epochs='150,180,210', lr_decay_rate=0.1, weight_decay=5e-4, momentum=0.9,
                             dataset='cifar100', model_s='resnet8x4', distill='kd', gamma=0.1, alpha=0.9, beta=0.0,
                             kd_T=4.0)
    iterations = opt.lr_decay_epochs.split(',')
    opt.lr_decay_epochs = list([])
    for it in iterations:
        opt.lr_decay_epochs.append(int(it))

    _templates, (train_x, train_y), (_val_x, _val_y) = make_images(seed)
    train_loader = DataLoader(CIFAR100Instance(train_x, train_y, train=True), batch_size=opt.batch_size,
                              shuffle=True, num_workers=opt.num_workers,
                              generator=torch.Generator().manual_seed(seed))
    n_cls = N_CLS

    # model
    model_t = load_teacher(train_teacher(seed, train_x, train_y), n_cls)
    model_s = model_dict[opt.model_s](num_classes=n_cls)

    data = torch.randn(2, 3, 32, 32)
    model_t.eval()
    model_s.eval()
    feat_t, _ = model_t(data, is_feat=True)
    feat_s, _ = model_s(data, is_feat=True)

    module_list = nn.ModuleList([])
    module_list.append(model_s)
    trainable_list = nn.ModuleList([])
    trainable_list.append(model_s)

    criterion_cls = nn.CrossEntropyLoss()
    criterion_div = DistillKL(opt.kd_T, bug=bug)
    if opt.distill == 'kd':
        criterion_kd = DistillKL(opt.kd_T, bug=bug)
    else:
        raise NotImplementedError(opt.distill)

    criterion_list = nn.ModuleList([])
    criterion_list.append(criterion_cls)    # classification loss
    criterion_list.append(criterion_div)    # KL divergence loss, original knowledge distillation
    criterion_list.append(criterion_kd)     # other knowledge distillation loss

    # optimizer
    optimizer = optim.SGD(trainable_list.parameters(),
                          lr=opt.learning_rate,
                          momentum=opt.momentum,
                          weight_decay=opt.weight_decay)

    # append teacher after optimizer to avoid weight_decay
    module_list.append(model_t)

    state = {"it": None, "epoch": 0}

    def start_epoch():
        state["epoch"] += 1
        epoch = state["epoch"]
        adjust_learning_rate(epoch, opt, optimizer)
        # train_distill: set modules as train()
        if bug != "student_left_in_eval_mode":
            for module in module_list:
                module.train()
        # set teacher as eval()
        module_list[-1].eval()
        state["it"] = iter(train_loader)

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            start_epoch()
            return next(state["it"])

    def train_step():
        data = next_batch()
        input, target, index = data

        criterion_cls = criterion_list[0]
        criterion_div = criterion_list[1]

        model_s = module_list[0]
        model_t = module_list[-1]

        input = input.float()

        # ===================forward=====================
        preact = False
        feat_s, logit_s = model_s(input, is_feat=True, preact=preact)
        with torch.no_grad():
            feat_t, logit_t = model_t(input, is_feat=True, preact=preact)
            feat_t = [f.detach() for f in feat_t]

        # cls + kl div
        loss_cls = criterion_cls(logit_s, target)
        loss_div = criterion_div(logit_s, logit_t)

        # other kd beyond KL divergence
        if opt.distill == 'kd':
            loss_kd = 0
        else:
            raise NotImplementedError(opt.distill)

        loss = opt.gamma * loss_cls + opt.alpha * loss_div + opt.beta * loss_kd

        # ===================backward=====================
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        """validate(val_loader, model_s, criterion_cls, opt)'s top-1 accuracy on one batch."""
        input, (target, _logit_t) = batch
        model.eval()
        with torch.no_grad():
            output = model(input.float())
        model.train()
        return float((output.argmax(1) == target).float().mean())

    val_input, val_target = next(iter(DataLoader(CIFAR100Instance(train_x, train_y, train=False),
                                                 batch_size=opt.batch_size)))
    with torch.no_grad():
        val_logit_t = model_t(val_input)

    def loss_fn(logit_s, targets):
        target, logit_t = targets
        return opt.gamma * criterion_list[0](logit_s, target) + opt.alpha * criterion_list[1](logit_s, logit_t)

    return Program(name="repdistiller_kd", model=model_s, batch=(val_input, (val_target, val_logit_t)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the teacher's logits softened without the temperature while the student's are divided by T: the student is
    # pulled toward T-times sharper targets, and the T**2 factor scales that mismatch (classic).
    Bug("teacher_temperature_dropped", functools.partial(_build, bug="teacher_temperature_dropped"),
        "learning_ledger", ("OBJECTIVE",)),
    # the deprecated size_average=False migrated to reduction='mean' instead of 'sum': the KL term is divided by the
    # number of classes as well as the batch (a second time by the batch size), so distillation all but vanishes
    # (classic; PyTorch's kl_div documents 'batchmean' for the math definition).
    Bug("kl_div_mean_reduction", functools.partial(_build, bug="kl_div_mean_reduction"), "learning_ledger",
        ("OBJECTIVE",)),
    # train_distill's "for module in module_list: module.train()" left out: the student stays in the eval mode set
    # for train_student.py's feature-shape probe, so its batch norms never use batch statistics and never estimate
    # running ones (classic).
    Bug("student_left_in_eval_mode", functools.partial(_build, bug="student_left_in_eval_mode"), "step_probe",
        ("bn1",)),
]
