# ruff: noqa: PLR0402, UP004, SIM401, RUF046
"""SimCLR (Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations") as re-implemented
by Andrei Atanov and Arsenii Ashukha to match the TensorFlow original: a CIFAR-headed ResNet encoder with a
Linear-BN-ReLU-Linear-BN projection, the NT-Xent loss over ``multiplier`` views sampled by repeating every index of
the batch, SGD wrapped in LARS (no weight decay or adaptation on BatchNorm and bias parameters), linear warm-up then
cosine annealing stepped every iteration.

Source: https://github.com/AndrewAtanov/simclr-pytorch
Commit: 85e5d5479759671f74347dbb64a57d5a4733ec6a
Files: ``train.py``, ``models/ssl.py`` (``SimCLR``, ``configure_optimizers``), ``models/losses.py`` (``NTXent``),
``models/encoder.py``, ``models/resnet.py``, ``utils/lars_optimizer.py``, ``utils/datautils.py``
(``MultiplyBatchSampler``, ``get_color_distortion``, ``Clip``), ``utils/utils.py`` (``LinearWarmupAndCosineAnneal``),
``configs/cifar_train_epochs1000_bs1024.yaml``
License: MIT (Copyright (c) 2020 Andrei Atanov, Arsenii Ashukha; full text in LICENSES/AndrewAtanov-simclr-pytorch.txt)
Domain: vision, self-supervised contrastive learning (SimCLR, NT-Xent, LARS)

Kept as written: ``SimCLR`` (``EncodeProject`` in ``nn.DataParallel``, which on a machine without GPUs calls the
module directly; ``reset_parameters`` called before ``self.model`` exists, so, as upstream, it initializes nothing;
``step`` / ``train_step`` / ``test_step``), ``EncodeProject`` (``fc1`` - ``bn1`` - ``relu1`` - ``fc2`` -
``BatchNorm1dNoBias`` to 128), ``ResNetEncoder`` (3x3 stride-1 ``conv1`` without max-pool for the CIFAR head, the
unused ``fc`` of torchvision's ResNet kept), ``NTXent`` (z normalized and divided by ``sqrt(tau)``, the diagonal
set to -1e9, positives at ``i + k n / m``, the contrastive accuracy), ``configure_optimizers`` ('lars': SGD momentum
0.9 over two groups split by ``'bn' in name`` or ``'bias' in name``, wrapped in ``LARS`` with trust coefficient
0.001; 'warmup-anneal'), ``LARS.step``, ``LinearWarmupAndCosineAnneal``, ``MultiplyBatchSampler`` (the batch's
indices repeated ``multiplier`` times, each drawn through its own random augmentation), the CIFAR configuration
(``multiplier`` 2, ``temperature`` 0.5, ``lr`` 4.0, ``warmup`` 0.01, ``weight_decay`` 1e-6, ``color_dist_s`` 0.5,
``scale_lower`` 0.08), and ``main_worker``'s loop body (``model.train_step(batch, cur_iter)``, zero_grad, backward,
step, ``scheduler.step()``).

Deviations from the original:
- sizes for 2 CPU cores: ``arch`` ResNet50 -> resnet18 (the config's other choice) with channel widths 64 -> 16
  (encoder_dim 512 -> 128; torchvision's ResNet is written out in ``_tv_resnet.py``, ``self._norm_layer`` being
  ``nn.BatchNorm2d`` as in torchvision); ``batch_size`` 1024 -> 16 (32 views); images 32x32 -> 16x16; ``iters``
  48000 -> 300 (so the 1% warm-up is 3 iterations and the cosine schedule is not flat over the 30 steps of the
  self-check);
- data: torchvision's CIFAR-10 is replaced by synthetic 16x16 RGB images made from ``seed`` (ten classes of
  coloured shapes on textured backgrounds); the augmentation pipeline is written out in plain torch on tensors:
  ``RandomResizedCrop(16, scale=(0.08, 1))`` (torchvision's sampling of area and log-ratio, bilinear instead of
  PIL bicubic), ``RandomHorizontalFlip``, ``get_color_distortion(0.5)`` (``ColorJitter(0.4, 0.4, 0.4, 0.1)`` with
  p 0.8 - brightness, contrast, saturation and a hue shift by rotating the chroma plane - then
  ``RandomGrayscale(p=0.2)``), ``Clip``; the random draws use the global torch generator seeded by ``seed``; no
  workers, no pinned memory;
- ``dist`` 'ddp' (the CIFAR config) -> 'dp' (``train.py``'s default), so no process group, no SyncBatchNorm and
  the NT-Xent's gather branch is not taken; CUDA, the logger, checkpoints and ``myexman`` are dropped;
- ``train_step`` is one iteration of ``main_worker``'s loop; ``eval_fn`` is ``test_step`` under ``model.eval()``
  and ``no_grad`` on a held-out batch of the same sampler (the NT-Xent loss), as the ``eval_freq`` block does;
  the Program's ``optimizer`` is the SGD inside ``LARS`` (``LARS`` is not a ``torch.optim.Optimizer``; its
  ``param_groups`` are the SGD's), its batch the first 16 images in two views each;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import warnings
from argparse import Namespace
from collections import OrderedDict

import numpy as np
import scipy.stats
import torch
import torch.nn as nn
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program

IMG = 16  # (port) CIFAR's 32
WIDTH = 16  # (port) torchvision's 64


# models/resnet.py
class ResNetEncoder(_tv_resnet.ResNet):
    """Wrapper for TorchVison ResNet Model
    This was needed to remove the final FC Layer from the ResNet Model"""
    def __init__(self, block, layers, cifar_head=False, hparams=None):
        super().__init__(block, layers, width=WIDTH)
        self.cifar_head = cifar_head
        if cifar_head:
            self.conv1 = nn.Conv2d(3, WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(WIDTH)  # self._norm_layer(64)
            self.relu = nn.ReLU(inplace=True)
        self.hparams = hparams

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        if not self.cifar_head:
            x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)

        return x


class ResNet18(ResNetEncoder):
    def __init__(self, cifar_head=True):
        super().__init__(_tv_resnet.BasicBlock, [2, 2, 2, 2], cifar_head=cifar_head)


# models/encoder.py
class BatchNorm1dNoBias(nn.BatchNorm1d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias.requires_grad = False


class EncodeProject(nn.Module):
    def __init__(self, hparams):
        super().__init__()

        if hparams.arch == 'resnet18':
            self.convnet = ResNet18(cifar_head=(hparams.data == 'cifar'))
            self.encoder_dim = 8 * WIDTH  # 512
        else:
            raise NotImplementedError

        self.proj_dim = 128
        projection_layers = [
            ('fc1', nn.Linear(self.encoder_dim, self.encoder_dim, bias=False)),
            ('bn1', nn.BatchNorm1d(self.encoder_dim)),
            ('relu1', nn.ReLU()),
            ('fc2', nn.Linear(self.encoder_dim, 128, bias=False)),
            ('bn2', BatchNorm1dNoBias(128)),
        ]

        self.projection = nn.Sequential(OrderedDict(projection_layers))

    def forward(self, x, out='z'):
        h = self.convnet(x)
        if out == 'h':
            return h
        return self.projection(h)


# models/losses.py
def accuracy(logits, labels, k):
    topk = torch.sort(logits.topk(k, dim=1)[1], 1)[0]
    labels = torch.sort(labels, 1)[0]
    acc = (topk == labels).all(1).float()
    return acc


class NTXent(nn.Module):
    """
    Contrastive loss with distributed data parallel support
    """
    LARGE_NUMBER = 1e9

    def __init__(self, tau=1., gpu=None, multiplier=2, distributed=False):
        super().__init__()
        self.tau = tau
        self.multiplier = multiplier
        self.distributed = distributed
        self.norm = 1.

    def forward(self, z, get_map=False):
        n = z.shape[0]
        assert n % self.multiplier == 0

        z = F.normalize(z, p=2, dim=1) / np.sqrt(self.tau)

        assert not self.distributed  # (port) the all_gather branch needs a process group

        logits = z @ z.t()
        logits[np.arange(n), np.arange(n)] = -self.LARGE_NUMBER

        logprob = F.log_softmax(logits, dim=1)

        # choose all positive objects for an example, for i it would be (i + k * n/m), where k=0...(m-1)
        m = self.multiplier
        labels = (np.repeat(np.arange(n), m) + np.tile(np.arange(m) * n // m, n)) % n
        # remove labels pointet to itself, i.e. (i, i)
        labels = labels.reshape(n, m)[:, 1:].reshape(-1)

        loss = -logprob[np.repeat(np.arange(n), m - 1), labels].sum() / n / (m - 1) / self.norm

        # zero the probability of identical pairs
        pred = logprob.data.clone()
        pred[np.arange(n), np.arange(n)] = -self.LARGE_NUMBER
        acc = accuracy(pred, torch.LongTensor(labels.reshape(n, m - 1)).to(logprob.device), m - 1)

        return loss, acc


# models/ssl.py
class SimCLR(nn.Module):
    def __init__(self, hparams, device=None):
        super().__init__()
        self.hparams = hparams

        self.hparams.dist = getattr(self.hparams, 'dist', 'dp')

        model = EncodeProject(hparams)
        self.reset_parameters()
        if device is not None:
            model = model.to(device)
        if self.hparams.dist == 'dp':
            self.model = nn.DataParallel(model)
        else:
            raise NotImplementedError

        self.criterion = NTXent(
            tau=hparams.temperature,
            multiplier=hparams.multiplier,
            distributed=(hparams.dist == 'ddp'),
        )

    def reset_parameters(self):
        def conv2d_weight_truncated_normal_init(p):
            fan_in = p.shape[1]
            stddev = np.sqrt(1. / fan_in) / .87962566103423978
            r = scipy.stats.truncnorm.rvs(-2, 2, loc=0, scale=1., size=p.shape)
            r = stddev * r
            with torch.no_grad():
                p.copy_(torch.FloatTensor(r))

        def linear_normal_init(p):
            with torch.no_grad():
                p.normal_(std=0.01)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                conv2d_weight_truncated_normal_init(m.weight)
            elif isinstance(m, nn.Linear):
                linear_normal_init(m.weight)

    def step(self, batch):
        x, _ = batch
        z = self.model(x)
        loss, acc = self.criterion(z)
        return {
            'loss': loss,
            'contrast_acc': acc,
        }

    def encode(self, x):
        return self.model(x, out='h')

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def train_step(self, batch, it=None):
        logs = self.step(batch)

        if it is not None:
            logs['epoch'] = it / len(self.batch_trainsampler)

        return logs

    def test_step(self, batch):
        return self.step(batch)


# utils/lars_optimizer.py
class LARS(object):
    def __init__(self,
                 optimizer,
                 trust_coefficient=0.001,
                 ):
        self.param_groups = optimizer.param_groups
        self.optim = optimizer
        self.trust_coefficient = trust_coefficient

    def __getstate__(self):
        return self.optim.__getstate__()

    def __setstate__(self, state):
        self.optim.__setstate__(state)

    def __repr__(self):
        return self.optim.__repr__()

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)

    def zero_grad(self):
        self.optim.zero_grad()

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)

    def step(self):
        with torch.no_grad():
            weight_decays = []
            for group in self.optim.param_groups:
                # absorb weight decay control from optimizer
                weight_decay = group['weight_decay'] if 'weight_decay' in group else 0
                weight_decays.append(weight_decay)
                group['weight_decay'] = 0
                for p in group['params']:
                    if p.grad is None:
                        continue

                    if weight_decay != 0:
                        p.grad.data += weight_decay * p.data

                    param_norm = torch.norm(p.data)
                    grad_norm = torch.norm(p.grad.data)
                    adaptive_lr = 1.

                    if param_norm != 0 and grad_norm != 0 and group['layer_adaptation']:
                        adaptive_lr = self.trust_coefficient * param_norm / grad_norm

                    p.grad.data *= adaptive_lr

        self.optim.step()
        # return weight decay control to optimizer
        for i, group in enumerate(self.optim.param_groups):
            group['weight_decay'] = weight_decays[i]


# utils/utils.py
class LinearWarmupAndCosineAnneal(torch.optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer, warm_up, T_max, last_epoch=-1, smooth=1e-9):
        self.warm_up = int(warm_up * T_max)
        self.T_max = T_max - self.warm_up
        self.smooth = smooth
        super().__init__(optimizer, last_epoch=last_epoch)

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, "
                          "please use `get_last_lr()`.")

        if self.last_epoch == 0:
            return [lr / (self.warm_up + 1) for lr in self.base_lrs]
        elif self.last_epoch <= self.warm_up:
            c = (self.last_epoch + 1) / self.last_epoch
            return [group['lr'] * c for group in self.optimizer.param_groups]
        else:
            le = self.last_epoch - self.warm_up

            if le > self.T_max:
                warnings.warn(f"Epoch {self.last_epoch}: reached maximum number of iterations {self.T_max + self.warm_up}. "
                              "This is unexpected behavior, and this SimCLR implementation was not tested in this regime!")

            return [(1 + np.cos(np.pi * le / self.T_max)) /
                    (1 + np.cos(np.pi * (le - 1) / self.T_max) + self.smooth) *
                    group['lr']
                    for group in self.optimizer.param_groups]


def configure_optimizers(args, model, cur_iter=-1, bug=None):
    iters = args.iters

    def exclude_from_wd_and_adaptation(name):
        if 'bn' in name:
            return True
        if args.opt == 'lars' and 'bias' in name:
            return True

    param_groups = [
        {
            'params': [p for name, p in model.named_parameters() if not exclude_from_wd_and_adaptation(name)],
            'weight_decay': args.weight_decay,
            'layer_adaptation': True,
        },
        {
            'params': [p for name, p in model.named_parameters() if exclude_from_wd_and_adaptation(name)],
            'weight_decay': 0.,
            'layer_adaptation': False,
        },
    ]
    if bug == "bn_group_left_out":
        param_groups = param_groups[:1]

    LR = args.lr

    if args.opt == 'lars':
        optimizer = torch.optim.SGD(
            param_groups,
            lr=LR,
            momentum=0.9,
        )
        larc_optimizer = LARS(optimizer)
    else:
        raise NotImplementedError

    if args.lr_schedule == 'warmup-anneal':
        scheduler = LinearWarmupAndCosineAnneal(
            optimizer,
            args.warmup,
            iters,
            last_epoch=cur_iter,
        )
    else:
        raise NotImplementedError

    if args.opt == 'lars':
        optimizer = larc_optimizer

    return optimizer, scheduler


# utils/datautils.py, with the transforms written out on tensors
class MultiplyBatchSampler(torch.utils.data.sampler.BatchSampler):
    MULTILPLIER = 2
    bug = None

    def __iter__(self):
        for batch in super().__iter__():
            if self.bug == "views_interleaved":
                yield [i for i in batch for _ in range(self.MULTILPLIER)]
            else:
                yield batch * self.MULTILPLIER


def random_resized_crop(img, size, scale, ratio=(3. / 4., 4. / 3.)):
    _, height, width = img.shape
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * float(torch.empty(1).uniform_(scale[0], scale[1]))
        aspect_ratio = math.exp(float(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)))
            j = int(torch.randint(0, width - w + 1, size=(1,)))
            break
    else:
        h, w, i, j = height, width, 0, 0
    crop = img[:, i:i + h, j:j + w]
    return F.interpolate(crop[None], size=(size, size), mode='bilinear', align_corners=False)[0]


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None].expand(3, -1, -1)


def color_jitter(img, b, c, s, h):
    for t in torch.randperm(4).tolist():
        if t == 0:
            img = (img * float(torch.empty(1).uniform_(1 - b, 1 + b))).clamp(0, 1)
        elif t == 1:
            mean = _gray(img).mean()
            img = ((img - mean) * float(torch.empty(1).uniform_(1 - c, 1 + c)) + mean).clamp(0, 1)
        elif t == 2:
            g = _gray(img)
            img = ((img - g) * float(torch.empty(1).uniform_(1 - s, 1 + s)) + g).clamp(0, 1)
        else:
            # hue: rotate the chroma plane around the grey axis by up to h turns
            theta = 2 * math.pi * float(torch.empty(1).uniform_(-h, h))
            cos_t, sin_t = math.cos(theta), math.sin(theta)
            k = torch.ones(3) / math.sqrt(3)
            kx = torch.tensor([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
            rot = cos_t * torch.eye(3) + sin_t * kx + (1 - cos_t) * torch.outer(k, k)
            img = torch.einsum('ij,jhw->ihw', rot, img).clamp(0, 1)
    return img


def get_color_distortion(img, s=1.0):
    if float(torch.rand(1)) < 0.8:  # RandomApply([ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)], p=0.8)
        img = color_jitter(img, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
    if float(torch.rand(1)) < 0.2:  # RandomGrayscale(p=0.2)
        img = _gray(img).clone()
    return img


class SyntheticCifar(torch.utils.data.Dataset):
    """Ten classes of 16x16 RGB images: a class colour and shape (disc, square, bar, cross) on a textured
    background; ``__getitem__`` applies SimCLR's CIFAR train transform."""

    def __init__(self, seed, n, hparams):
        gen = torch.Generator().manual_seed(seed)
        self.hparams = hparams
        self.targets = torch.arange(n) % 10
        yy, xx = torch.meshgrid(torch.arange(IMG), torch.arange(IMG), indexing='ij')
        palette = torch.rand(10, 3, generator=torch.Generator().manual_seed(777))
        imgs = []
        for c in self.targets.tolist():
            bg = 0.3 * torch.rand(3, 1, 1, generator=gen) + 0.1 * torch.rand(3, IMG, IMG, generator=gen)
            cy, cx = torch.randint(4, IMG - 4, (2,), generator=gen).tolist()
            shape = c % 4
            if shape == 0:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= 12
            elif shape == 1:
                mask = ((yy - cy).abs() <= 3) & ((xx - cx).abs() <= 3)
            elif shape == 2:
                mask = (yy - cy).abs() <= 1
            else:
                mask = ((yy - cy).abs() <= 1) | ((xx - cx).abs() <= 1)
            img = torch.where(mask, palette[c][:, None, None].expand(3, IMG, IMG), bg)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)

    def transform(self, img):
        img = random_resized_crop(img, IMG, scale=(self.hparams.scale_lower, 1.0))
        if float(torch.rand(1)) < 0.5:
            img = img.flip(-1)
        img = get_color_distortion(img, s=self.hparams.color_dist_s)
        return torch.clamp(img, 0, 1)  # datautils.Clip()

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]

    def __len__(self):
        return len(self.targets)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)

    # configs/cifar_train_epochs1000_bs1024.yaml, with train.py's and SimCLR's defaults
    args = Namespace(
        arch='resnet18',  # (port) ResNet50
        aug=True,
        batch_size=16,  # (port) 1024
        color_dist_s=0.5,
        data='cifar',
        dist='dp',  # (port) ddp
        iters=300,  # (port) 48000
        lr=4.0,
        lr_schedule='warmup-anneal',
        multiplier=2,
        opt='lars',
        problem='sim-clr',
        scale_lower=0.08,
        sync_bn=True,
        temperature=0.5,
        warmup=0.01,
        weight_decay=1.0e-06,
        workers=0,
    )

    model = SimCLR(args, device=torch.device('cpu'))

    trainset = SyntheticCifar(seed, 320, args)
    testset = SyntheticCifar(seed + 1000, 64, args)
    MultiplyBatchSampler.MULTILPLIER = args.multiplier
    trainsampler = torch.utils.data.sampler.RandomSampler(trainset, generator=torch.Generator().manual_seed(seed))
    testsampler = torch.utils.data.sampler.RandomSampler(testset, generator=torch.Generator().manual_seed(seed + 1))
    model.batch_trainsampler = MultiplyBatchSampler(trainsampler, args.batch_size, drop_last=True)
    model.batch_trainsampler.bug = bug
    train_loader = torch.utils.data.DataLoader(trainset, num_workers=0, batch_sampler=model.batch_trainsampler)
    test_batch_sampler = MultiplyBatchSampler(testsampler, args.batch_size, drop_last=True)
    test_batch_sampler.bug = bug
    val_loader = torch.utils.data.DataLoader(testset, num_workers=0, batch_sampler=test_batch_sampler)

    cur_iter = 0
    optimizer, scheduler = configure_optimizers(args, model, cur_iter - 1, bug=bug)

    model.train()
    state = {"it": iter(train_loader), "cur_iter": cur_iter}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        state["cur_iter"] += 1

        # forward pass and compute loss
        logs = model.train_step(batch, state["cur_iter"])
        loss = logs['loss']

        # gradient step
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if scheduler is not None:
            scheduler.step()
        return loss.detach()

    def loss_fn(z, targets):
        return model.criterion(z)[0]

    def eval_fn(m, batch):
        m.eval()
        with torch.no_grad():
            logs = m.test_step(next(iter(val_loader)))
        m.train()
        return float(logs['loss'])

    first_sampler = MultiplyBatchSampler(torch.utils.data.sampler.SequentialSampler(trainset), args.batch_size,
                                         drop_last=True)
    first_sampler.bug = bug
    x0, y0 = next(iter(torch.utils.data.DataLoader(trainset, batch_sampler=first_sampler)))
    return Program(name="atanovsimclr_resnet18", model=model, batch=(x0, y0), loss_fn=loss_fn,
                   optimizer=optimizer.optim, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``MultiplyBatchSampler`` repeating each index in place (``[i, i, j, j, ...]``) instead of the batch
    # (``batch * m``) that ``NTXent``'s positives ``i + k n / m`` assume (classic layout mismatch): the "positive"
    # pairs are views of different images.
    Bug("views_interleaved", functools.partial(_build, bug="views_interleaved"), "learning_ledger", ("OBJECTIVE",)),
    # the second parameter group (BatchNorm and bias parameters, no weight decay, no adaptation) left out of the
    # optimizer (classic): those parameters never move.
    Bug("bn_group_left_out", functools.partial(_build, bug="bn_group_left_out"), "four_structures", ("bn",)),
    # ``optimizer.zero_grad()`` dropped from the loop (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
