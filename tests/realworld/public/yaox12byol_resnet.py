"""BYOL (Grill et al.), Xin Yao's BYOL-PyTorch: an online ResNet encoder + MLP projection (Linear-BN-ReLU-Linear)
and predictor, a target encoder + projection initialized from the online one and moved by a momentum (EMA) update
inside ``forward`` before it embeds the swapped views, the symmetric normalized-MSE loss
``2 - 2 * sum(cos) / bz`` over the concatenated views, LARS over the online network and predictor (bias and BN
excluded from weight decay and adaptation), linear warm-up then cosine learning rate per step, and the target
momentum raised from ``base_momentum`` to 1 by a cosine per step; two augmentation pipelines (blur always / rarely,
solarize never / 0.2).

Source: https://github.com/yaox12/BYOL-PyTorch
Commit: edefc01aa72716c5c59219883af1ff0ae1127053
Files: model/byol_model.py, model/basic_modules.py, trainer/byol_trainer.py, optimizer/LARSSGD.py,
utils/params_util.py, data/byol_transform.py, data/imagenet_loader.py, config/train_config.yaml, byol_main.py
License: MIT (Copyright (c) 2020 Xin Yao; full text in LICENSES/yaox12-BYOL-PyTorch.txt)
Domain: self-supervised, self-distillation with an EMA teacher (BYOL)

Deviations from the original:
- sizes: torchvision's ``resnet50`` -> the ResNet-18 of ``_tv_resnet.py`` at width 8 (torchvision is not installed
  here; ``pretrained`` false as configured), so the projection's ``input_dim`` 2048 -> 64; hidden_dim 4096 -> 64,
  output_dim 256 -> 32 (projection and predictor); images 224 -> 24 pixels; train_batch_size 128 -> 8;
  num_examples 1281167 -> 128 (16 steps an epoch), total_epochs 300 -> 20, warmup_epochs 10 -> 1;
- data: ImageNet's ``ImageFolder`` is replaced by 128 synthetic 32x32 RGB images made from ``seed`` (one of 8
  coloured shape patterns on a noisy background, at a random place); the torchvision/PIL/cv2 augmentations are
  written out in torch on each image, drawn from a ``torch.Generator(seed)``: RandomResizedCrop(24) with its
  scale (0.08, 1) / ratio (3/4, 4/3) sampling and bilinear resize, horizontal flip, ColorJitter(0.4, 0.4, 0.2)
  at p 0.8 (brightness, contrast, saturation in random order; the 0.1 hue jitter is left out), grayscale at p
  0.2, Gaussian blur (kernel 23 on 224 pixels -> 3 on 24, sigma in [0.1, 2]) at p 1.0 / 0.1, solarize at
  threshold 128 (0.5 on [0, 1]) at p 0.0 / 0.2, then the ImageNet normalization; ``MultiViewDataInjector``
  stacks the two views as written;
- CUDA, apex (``amp.initialize`` at opt_level O0 is the plain fp32 path, ``convert_syncbn_model``, DDP),
  ``torch.distributed``, the data prefetcher, tensorboard, logging and checkpoints are dropped (one process, CPU):
  the step runs the O0 branch ``loss.backward()``;
- ``param_k.data.mul_(mm).add_(1. - mm, param_q.data)`` is written ``add_(param_q.data, alpha=1. - mm)`` (this
  torch no longer takes the positional alpha);
- one ``train_step`` is one iteration of ``train_epoch``'s loop (lr and momentum adjusted for ``steps``, the two
  views, forward with ``mm``, loss, zero_grad/backward/step); the model is put in train mode once, as
  ``train_epoch`` does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, PLR0402, C408, UP039

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import Optimizer, required

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _tv_resnet import resnet18

WIDTH = 8
IMG = 24

config = {
    'model': {
        'base_momentum': 0.99,
        'backbone': {'type': "resnet18", 'pretrained': False},
        'projection': {'type': "MLP", 'input_dim': 8 * WIDTH, 'hidden_dim': 64, 'output_dim': 32},
        'predictor': {'type': "MLP", 'input_dim': 32, 'hidden_dim': 64, 'output_dim': 32},
    },
    'data': {'resize_size': IMG, 'train_batch_size': 8, 'dual_views': True, 'num_examples': 128},
    'optimizer': {'type': 'lars', 'base_lr': 0.3, 'momentum': 0.9, 'weight_decay': 1.0e-6, 'total_epochs': 20,
                  'warmup_epochs': 1, 'exclude_bias_and_bn': True},
    'world_size': 1,
}


# model/basic_modules.py
class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim):
        super().__init__()

        self.l1 = nn.Linear(input_dim, hidden_dim)
        self.bn1 = nn.BatchNorm1d(hidden_dim)
        self.relu1 = nn.ReLU(inplace=True)
        self.l2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x):
        x = self.l1(x)
        x = self.bn1(x)
        x = self.relu1(x)
        x = self.l2(x)
        return x


class EncoderwithProjection(nn.Module):
    def __init__(self, config):
        super().__init__()
        # backbone
        pretrained = config['model']['backbone']['pretrained']
        base_encoder = resnet18(pretrained=pretrained, width=WIDTH)
        self.encoder = nn.Sequential(*list(base_encoder.children())[:-1])

        # projection
        input_dim = config['model']['projection']['input_dim']
        hidden_dim = config['model']['projection']['hidden_dim']
        output_dim = config['model']['projection']['output_dim']
        self.projetion = MLP(input_dim=input_dim, hidden_dim=hidden_dim, output_dim=output_dim)

    def forward(self, x):
        x = self.encoder(x)
        x = torch.flatten(x, 1)
        x = self.projetion(x)
        return x


class Predictor(nn.Module):
    def __init__(self, config):
        super().__init__()

        # predictor
        input_dim = config['model']['predictor']['input_dim']
        hidden_dim = config['model']['predictor']['hidden_dim']
        output_dim = config['model']['predictor']['output_dim']
        self.predictor = MLP(input_dim=input_dim, hidden_dim=hidden_dim, output_dim=output_dim)

    def forward(self, x):
        return self.predictor(x)


# model/byol_model.py
class BYOLModel(torch.nn.Module):
    def __init__(self, config, bug=None):
        super().__init__()
        self.bug = bug

        # online network
        self.online_network = EncoderwithProjection(config)

        # target network
        self.target_network = EncoderwithProjection(config)

        # predictor
        self.predictor = Predictor(config)

        self._initializes_target_network()

    @torch.no_grad()
    def _initializes_target_network(self):
        for param_q, param_k in zip(self.online_network.parameters(), self.target_network.parameters()):
            param_k.data.copy_(param_q.data)  # initialize
            param_k.requires_grad = False     # not update by gradient

    @torch.no_grad()
    def _update_target_network(self, mm):
        """Momentum update of target network"""
        for param_q, param_k in zip(self.online_network.parameters(), self.target_network.parameters()):
            if self.bug == "momentum_update_reversed":
                param_k.data.mul_(1. - mm).add_(param_q.data, alpha=mm)
            else:
                param_k.data.mul_(mm).add_(param_q.data, alpha=1. - mm)

    def forward(self, view1, view2, mm):
        # online network forward
        q = self.predictor(self.online_network(torch.cat([view1, view2], dim=0)))

        # target network forward
        with torch.no_grad():
            self._update_target_network(mm)
            if self.bug == "target_views_not_swapped":
                target_z = self.target_network(torch.cat([view1, view2], dim=0)).detach().clone()
            else:
                target_z = self.target_network(torch.cat([view2, view1], dim=0)).detach().clone()

        return q, target_z


# optimizer/LARSSGD.py
class LARS(Optimizer):
    def __init__(self,
                 params,
                 lr=required,
                 momentum=0,
                 dampening=0,
                 weight_decay=0,
                 eta=0.001,
                 nesterov=False):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if weight_decay < 0.0:
            raise ValueError(
                "Invalid weight_decay value: {}".format(weight_decay))
        if eta < 0.0:
            raise ValueError("Invalid LARS coefficient value: {}".format(eta))

        defaults = dict(
            lr=lr, momentum=momentum, dampening=dampening,
            weight_decay=weight_decay, nesterov=nesterov, eta=eta)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

        super(LARS, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(LARS, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault('nesterov', False)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            weight_decay = group['weight_decay']
            momentum = group['momentum']
            dampening = group['dampening']
            eta = group['eta']
            nesterov = group['nesterov']
            lr = group['lr']
            lars_exclude = group.get('lars_exclude', False)

            for p in group['params']:
                if p.grad is None:
                    continue

                d_p = p.grad

                if lars_exclude:
                    local_lr = 1.
                else:
                    weight_norm = torch.norm(p).item()
                    grad_norm = torch.norm(d_p).item()
                    # Compute local learning rate for this layer
                    local_lr = eta * weight_norm / \
                        (grad_norm + weight_decay * weight_norm)

                actual_lr = local_lr * lr
                d_p = d_p.add(p, alpha=weight_decay).mul(actual_lr)
                if momentum != 0:
                    param_state = self.state[p]
                    if 'momentum_buffer' not in param_state:
                        buf = param_state['momentum_buffer'] = \
                                torch.clone(d_p).detach()
                    else:
                        buf = param_state['momentum_buffer']
                        buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
                    if nesterov:
                        d_p = d_p.add(buf, alpha=momentum)
                    else:
                        d_p = buf
                p.add_(-d_p)

        return loss


# utils/params_util.py
def collect_params(model_list, exclude_bias_and_bn=True):
    param_list = []
    for model in model_list:
        for name, param in model.named_parameters():
            if exclude_bias_and_bn and ('bn' in name or 'downsample.1' in name or 'bias' in name):
                param_dict = {'params': param, 'weight_decay': 0., 'lars_exclude': True}
            else:
                param_dict = {'params': param}
            param_list.append(param_dict)
    return param_list


# data/byol_transform.py, written out in torch (torchvision / PIL / cv2 are not installed here)
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def _u(gen, lo=0.0, hi=1.0):
    return lo + (hi - lo) * float(torch.rand((), generator=gen))


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]).unsqueeze(0)


def get_transform(gen, gb_prob=1.0, solarize_prob=0.):
    def transform(img):  # img: [3, H, W] in [0, 1]
        _, h, w = img.shape
        area = h * w
        for _ in range(10):  # RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))
            target_area = area * _u(gen, 0.08, 1.0)
            aspect = math.exp(_u(gen, math.log(3 / 4), math.log(4 / 3)))
            cw, ch = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
            if 0 < cw <= w and 0 < ch <= h:
                top = int(torch.randint(0, h - ch + 1, (), generator=gen))
                left = int(torch.randint(0, w - cw + 1, (), generator=gen))
                break
        else:
            ch, cw, top, left = h, w, 0, 0
        img = F.interpolate(img[None, :, top:top + ch, left:left + cw], size=(IMG, IMG), mode="bilinear",
                            align_corners=False)[0]
        if _u(gen) < 0.5:  # RandomHorizontalFlip
            img = img.flip(-1)
        if _u(gen) < 0.8:  # RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), hue left out
            for k in torch.randperm(3, generator=gen).tolist():
                if k == 0:
                    img = (img * _u(gen, 0.6, 1.4)).clamp(0, 1)
                elif k == 1:
                    img = ((img - _gray(img).mean()) * _u(gen, 0.6, 1.4) + _gray(img).mean()).clamp(0, 1)
                else:
                    img = ((img - _gray(img)) * _u(gen, 0.8, 1.2) + _gray(img)).clamp(0, 1)
        if _u(gen) < 0.2:  # RandomGrayscale(p=0.2)
            img = _gray(img).expand(3, -1, -1).clone()
        if _u(gen) < gb_prob:  # RandomApply([GaussianBlur(kernel_size=23 -> 3)], p=gb_prob)
            sigma = _u(gen, 0.1, 2.0)
            k = torch.exp(-torch.tensor([-1.0, 0.0, 1.0]) ** 2 / (2 * sigma * sigma))
            k = k / k.sum()
            k2 = (k[:, None] * k[None, :]).expand(3, 1, 3, 3)
            img = F.conv2d(F.pad(img[None], (1, 1, 1, 1), mode="reflect"), k2, groups=3)[0]
        if _u(gen) < solarize_prob:  # RandomApply([Solarize()], p=solarize_prob)
            img = torch.where(img < 0.5, img, 1.0 - img)
        return (img - MEAN) / STD  # ToTensor, Normalize

    return transform


class MultiViewDataInjector():
    def __init__(self, transform_list):
        self.transform_list = transform_list

    def __call__(self, sample):
        output = [transform(sample).unsqueeze(0) for transform in self.transform_list]
        output_cat = torch.cat(output, dim=0)
        return output_cat


def synthetic_images(seed, n=128, size=32):
    """8 coloured shape patterns (square, disc, bars, cross in two colours each) on a noisy background."""
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    palette = torch.rand(8, 3, generator=gen)
    out = []
    for i in range(n):
        c = i % 8
        cy, cx = torch.randint(9, size - 9, (2,), generator=gen).tolist()
        shape = c % 4
        if shape == 0:
            m = ((yy - cy).abs() < 8) & ((xx - cx).abs() < 8)
        elif shape == 1:
            m = (yy - cy) ** 2 + (xx - cx) ** 2 < 81
        elif shape == 2:
            m = ((yy - cy).abs() < 9) & ((xx % 6) < 3) & ((xx - cx).abs() < 9)
        else:
            m = (((yy - cy).abs() < 2) & ((xx - cx).abs() < 9)) | (((xx - cx).abs() < 2) & ((yy - cy).abs() < 9))
        img = 0.3 + 0.1 * torch.rand(3, size, size, generator=gen)
        img = torch.where(m[None], palette[c].view(3, 1, 1), img)
        out.append(img.clamp(0, 1))
    return torch.stack(out)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    total_epochs = config['optimizer']['total_epochs']
    warmup_epochs = config['optimizer']['warmup_epochs']
    train_batch_size = config['data']['train_batch_size']
    global_batch_size = config['world_size'] * train_batch_size
    num_examples = config['data']['num_examples']
    warmup_steps = warmup_epochs * num_examples // global_batch_size
    total_steps = total_epochs * num_examples // global_batch_size
    base_lr = config['optimizer']['base_lr'] / 256
    max_lr = base_lr * global_batch_size
    base_mm = config['model']['base_momentum']

    images = synthetic_images(seed, n=num_examples)
    transform = MultiViewDataInjector([get_transform(gen), get_transform(gen, gb_prob=0.1, solarize_prob=0.2)])

    model = BYOLModel(config, bug=bug)
    momentum = config['optimizer']['momentum']
    weight_decay = config['optimizer']['weight_decay']
    exclude_bias_and_bn = config['optimizer']['exclude_bias_and_bn']
    if bug == "predictor_left_out":
        params = collect_params([model.online_network], exclude_bias_and_bn=exclude_bias_and_bn)
    else:
        params = collect_params([model.online_network, model.predictor],
                                exclude_bias_and_bn=exclude_bias_and_bn)
    optimizer = LARS(params, lr=max_lr, momentum=momentum, weight_decay=weight_decay)

    def adjust_learning_rate(step):
        """learning rate warm up and decay"""
        max_lr_ = max_lr
        min_lr = 1e-3 * max_lr_
        if step < warmup_steps:
            lr = (max_lr_ - min_lr) * step / warmup_steps + min_lr
        else:
            lr = min_lr + 0.5 * (max_lr_ - min_lr) * (1 + np.cos((step - warmup_steps) * np.pi / total_steps))
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    def adjust_mm(step):
        state["mm"] = 1 - (1 - base_mm) * (np.cos(np.pi * step / total_steps) + 1) / 2

    def forward_loss(preds, targets):
        bz = preds.size(0)
        preds_norm = F.normalize(preds, dim=1)
        targets_norm = F.normalize(targets, dim=1)
        loss = 2 - 2 * (preds_norm * targets_norm).sum() / bz
        return loss

    def next_images():  # a shuffled DataLoader over the dual-view dataset, drop_last
        if state["pos"] + train_batch_size > num_examples:
            state["perm"], state["pos"] = torch.randperm(num_examples, generator=gen), 0
        idx = state["perm"][state["pos"]:state["pos"] + train_batch_size]
        state["pos"] += train_batch_size
        return torch.stack([transform(images[int(i)]) for i in idx])

    state = {"steps": 0, "mm": base_mm, "perm": torch.randperm(num_examples, generator=gen), "pos": 0}
    first = next_images()
    batch = (first[:, 0, ...].contiguous(), first[:, 1, ...].contiguous(), base_mm)
    model.train()

    def train_step():
        adjust_learning_rate(state["steps"])
        adjust_mm(state["steps"])
        state["steps"] += 1

        images_ = next_images()
        assert images_.dim() == 5, f"Input must have 5 dims, got: {images_.dim()}"
        view1 = images_[:, 0, ...].contiguous()
        view2 = images_[:, 1, ...].contiguous()

        # forward
        q, target_z = model(view1, view2, state["mm"])

        loss = forward_loss(q, target_z)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return Program(name="yaox12byol_resnet", model=model, batch=batch,
                   loss_fn=lambda out, _targets: forward_loss(*out), optimizer=optimizer, train_step=train_step,
                   frozen=("target_network.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("target_views_not_swapped", functools.partial(_build, bug="target_views_not_swapped"), "learning_ledger",
        ("TASK",)),
    Bug("predictor_left_out", functools.partial(_build, bug="predictor_left_out"), "four_structures",
        ("predictor",)),
    Bug("momentum_update_reversed", functools.partial(_build, bug="momentum_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]
