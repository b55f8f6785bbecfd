# ruff: noqa: PLR0402, TRY002, UP004, UP008, UP032, UP039
"""SimSiam (PatrickHua's reimplementation): two augmented views through a shared encoder (CIFAR ResNet-18 backbone +
projection MLP), a bottleneck prediction MLP, the symmetric negative cosine loss with stop-gradient on the
projections, SGD with momentum over a base and a predictor parameter group, warmup + cosine lr with a constant
predictor lr.

Source: https://github.com/PatrickHua/SimSiam
Commit: 75a7c51362c30e8628ad83949055ef73829ce786
Files: ``main.py`` (the loop), ``models/simsiam.py`` (``D``, ``projection_MLP``, ``prediction_MLP``, ``SimSiam``),
``models/__init__.py`` (``get_backbone``, ``get_model``), ``models/backbones/cifar_resnet_1.py`` (``resnet18``,
``BasicBlock``, ``ResNet``), ``optimizers/__init__.py`` (``get_optimizer``), ``optimizers/lr_scheduler.py``
(``LR_Scheduler``), ``augmentations/simsiam_aug.py`` (``SimSiamTransform``), ``configs/simsiam_cifar.yaml``.
License: MIT (Copyright (c) 2020 PatrickHua; full text in LICENSES/PatrickHua-SimSiam.txt)
Domain: self-supervised learning, two augmented views (SimSiam: stop-gradient, predictor, no negatives)

Kept as written: ``D`` ('simplified': ``-cosine_similarity(p, z.detach())``), ``projection_MLP`` (three
Linear-BN(-ReLU) layers, ``set_layers(2)`` from the config's ``proj_layers: 2``, its last BN built with
``hidden_dim``), ``prediction_MLP`` (Linear-BN-ReLU, Linear), ``SimSiam.forward`` (``L = D(p1, z2) / 2 + D(p2, z1)
/ 2``), ``get_backbone`` (the backbone's ``fc`` replaced by ``Identity``, ``output_dim`` its in-features), the
CIFAR ResNet-18 (3x3 stem, no max-pool, BasicBlocks [2, 2, 2, 2], kaiming fan-out init), ``get_optimizer`` (SGD,
momentum 0.9, weight decay 5e-4, 'base' and 'predictor' groups), ``LR_Scheduler`` (linear warmup from
``warmup_lr`` then cosine to ``final_lr``, predictor kept at ``base_lr``), the lr scaling ``base_lr * batch_size /
256`` with base_lr 0.03, and the loop body (``model.zero_grad()``, ``model.forward(images1, images2)``,
``data_dict['loss'].mean()``, backward, ``optimizer.step()``, ``lr_scheduler.step()``).

Deviations from the original:
- CIFAR-10 is replaced by a synthetic image set made from ``seed``: 64 RGB 16 x 16 images, each one of 8 random
  smooth colour patterns plus noise (labels = the pattern, read only by nobody: SimSiam ignores them).
- torchvision is not installed: ``SimSiamTransform`` is written out on tensors with the same steps and parameters
  (RandomResizedCrop scale (0.2, 1.0) resized back with bilinear interpolation, horizontal flip p 0.5, colour
  jitter (0.4, 0.4, 0.4) applied with p 0.8 as brightness/contrast/saturation factors (the hue jitter 0.1 is
  left out), grayscale p 0.2, no blur at image size 32 or less, normalization by the ImageNet mean/std).
- sizes for 2 CPU cores: images 16 x 16 (32), batch_size 32 (512), ResNet widths 8/16/32/64 (64/128/256/512),
  projector hidden/out 64 (2048), predictor hidden 16 (512); ``num_epochs`` 800 and ``warmup_epochs`` 10 as in the
  config with 2 iterations per epoch. The lr keeps the config's value: ``base_lr * 512 / 256`` (0.06) with the
  config's batch size 512 in the formula, not the port's 32 (which would give 0.00375 and no visible learning in
  the check's 30 steps).
- ``torch.nn.DataParallel`` and the CUDA device are dropped (so parameter names have no ``module.`` prefix, which
  ``get_optimizer``'s prefix tuple already covers); the kNN monitor, logger, tqdm, checkpointing and linear
  evaluation are dropped. ``train_step`` is one iteration of the inner loop and returns the loss.
- provenance note: ``cifar_resnet_1.py`` says in its header that it is copied from huyvnphan/PyTorch_CIFAR10's
  ``cifar10_models/resnet.py`` (itself torchvision's ResNet with a CIFAR stem); it is kept as this repository has it.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

W = 8  # (port) the ResNet's base width (64 in the original)
PROJ, PRED_HIDDEN = 64, 16  # (port) 2048 and 512 in the original
IMAGE_SIZE, N_IMAGES, BATCH_SIZE = 16, 64, 32
LR_BATCH_SIZE = 512  # (port) the config's batch_size, used where the original scales the lr by batch_size / 256


# ---- models/simsiam.py ----

def D(p, z, version='simplified', bug=None): # negative cosine similarity
    if version == 'original':
        z = z.detach() # stop gradient
        p = F.normalize(p, dim=1) # l2-normalize
        z = F.normalize(z, dim=1) # l2-normalize
        return -(p*z).sum(dim=1).mean()

    elif version == 'simplified':# same thing, much faster. Scroll down, speed test in __main__
        if bug == "stop_gradient_dropped":
            return - F.cosine_similarity(p, z, dim=-1).mean()
        return - F.cosine_similarity(p, z.detach(), dim=-1).mean()
    else:
        raise Exception


class projection_MLP(nn.Module):
    def __init__(self, in_dim, hidden_dim=PROJ, out_dim=PROJ):
        super().__init__()
        ''' page 3 baseline setting
        Projection MLP. The projection MLP (in f) has BN ap-
        plied to each fully-connected (fc) layer, including its out-
        put fc. Its output fc has no ReLU. The hidden fc is 2048-d.
        This MLP has 3 layers.
        '''
        self.layer1 = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True)
        )
        self.layer2 = nn.Sequential(
            nn.Linear(hidden_dim, hidden_dim),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True)
        )
        self.layer3 = nn.Sequential(
            nn.Linear(hidden_dim, out_dim),
            nn.BatchNorm1d(hidden_dim)
        )
        self.num_layers = 3
    def set_layers(self, num_layers):
        self.num_layers = num_layers

    def forward(self, x):
        if self.num_layers == 3:
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
        elif self.num_layers == 2:
            x = self.layer1(x)
            x = self.layer3(x)
        else:
            raise Exception
        return x


class prediction_MLP(nn.Module):
    def __init__(self, in_dim=PROJ, hidden_dim=PRED_HIDDEN, out_dim=PROJ): # bottleneck structure
        super().__init__()
        ''' page 3 baseline setting
        Prediction MLP. The prediction MLP (h) has BN applied
        to its hidden fc layers. Its output fc does not have BN
        (ablation in Sec. 4.4) or ReLU. This MLP has 2 layers.
        The dimension of h's input and output (z and p) is d = 2048,
        and h's hidden layer's dimension is 512, making h a
        bottleneck structure (ablation in supplement).
        '''
        self.layer1 = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True)
        )
        self.layer2 = nn.Linear(hidden_dim, out_dim)

    def forward(self, x):
        x = self.layer1(x)
        x = self.layer2(x)
        return x

class SimSiam(nn.Module):
    def __init__(self, backbone, bug=None):
        super().__init__()

        self.backbone = backbone
        self.projector = projection_MLP(backbone.output_dim)

        self.encoder = nn.Sequential( # f encoder
            self.backbone,
            self.projector
        )
        self.predictor = prediction_MLP()
        self.bug = bug

    def forward(self, x1, x2):

        f, h = self.encoder, self.predictor
        z1, z2 = f(x1), f(x2)
        p1, p2 = h(z1), h(z2)
        L = D(p1, z2, bug=self.bug) / 2 + D(p2, z1, bug=self.bug) / 2
        return {'loss': L}


# ---- models/backbones/cifar_resnet_1.py (resnet18 and what it uses) ----

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=dilation, groups=groups, bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1,
                 base_width=64, dilation=1, norm_layer=None):
        super(BasicBlock, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError('BasicBlock only supports groups=1 and base_width=64')
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        # Both self.conv1 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=10, zero_init_residual=False,
                 groups=1, width_per_group=64, replace_stride_with_dilation=None,
                 norm_layer=None):
        super(ResNet, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer

        self.inplanes = W
        self.dilation = 1
        if replace_stride_with_dilation is None:
            # each element in the tuple indicates if we should replace
            # the 2x2 stride with a dilated convolution instead
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None "
                             "or a 3-element tuple, got {}".format(replace_stride_with_dilation))
        self.groups = groups
        self.base_width = width_per_group

        ## CIFAR10: kernel_size 7 -> 3, stride 2 -> 1, padding 3->1
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)
        ## END

        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        # self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, W, layers[0])
        self.layer2 = self._make_layer(block, 2 * W, layers[1], stride=2,
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 4 * W, layers[2], stride=2,
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 8 * W, layers[3], stride=2,
                                       dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * W * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample, self.groups,
                            self.base_width, previous_dilation, norm_layer))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width, dilation=self.dilation,
                                norm_layer=norm_layer))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        # x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = x.reshape(x.size(0), -1)
        x = self.fc(x)

        return x


def resnet18(**kwargs):
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


# ---- models/__init__.py ----

def get_backbone(backbone, castrate=True):
    backbone = resnet18()  # (port) eval(f"{backbone}()") with backbone 'resnet18_cifar_variant1'

    if castrate:
        backbone.output_dim = backbone.fc.in_features
        backbone.fc = torch.nn.Identity()

    return backbone


# ---- optimizers/__init__.py, optimizers/lr_scheduler.py ----

def get_optimizer(name, model, lr, momentum, weight_decay, bug=None):

    predictor_prefix = ('module.predictor', 'predictor')
    parameters = [{
        'name': 'base',
        'params': [param for name, param in model.named_parameters() if not name.startswith(predictor_prefix)],
        'lr': lr
    },{
        'name': 'predictor',
        'params': [param for name, param in model.named_parameters() if name.startswith(predictor_prefix)],
        'lr': lr
    }]
    if bug == "base_group_over_backbone_only":
        parameters[0]['params'] = list(model.backbone.parameters())
    if name == 'sgd':
        optimizer = torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        raise NotImplementedError
    return optimizer


class LR_Scheduler(object):
    def __init__(self, optimizer, warmup_epochs, warmup_lr, num_epochs, base_lr, final_lr, iter_per_epoch, constant_predictor_lr=False):
        self.base_lr = base_lr
        self.constant_predictor_lr = constant_predictor_lr
        warmup_iter = iter_per_epoch * warmup_epochs
        warmup_lr_schedule = np.linspace(warmup_lr, base_lr, warmup_iter)
        decay_iter = iter_per_epoch * (num_epochs - warmup_epochs)
        cosine_lr_schedule = final_lr+0.5*(base_lr-final_lr)*(1+np.cos(np.pi*np.arange(decay_iter)/decay_iter))

        self.lr_schedule = np.concatenate((warmup_lr_schedule, cosine_lr_schedule))
        self.optimizer = optimizer
        self.iter = 0
        self.current_lr = 0
    def step(self):
        for param_group in self.optimizer.param_groups:

            if self.constant_predictor_lr and param_group['name'] == 'predictor':
                param_group['lr'] = self.base_lr
            else:
                lr = param_group['lr'] = self.lr_schedule[self.iter]

        self.iter += 1
        self.current_lr = lr
        return lr
    def get_lr(self):
        return self.current_lr


# ---- augmentations/simsiam_aug.py, written out on tensors (no torchvision here) ----

imagenet_mean_std = [[0.485, 0.456, 0.406],[0.229, 0.224, 0.225]]


class SimSiamTransform():
    def __init__(self, image_size, generator, mean_std=imagenet_mean_std):
        self.image_size = image_size
        self.g = generator
        self.mean = torch.tensor(mean_std[0]).view(3, 1, 1)
        self.std = torch.tensor(mean_std[1]).view(3, 1, 1)

    def _rand(self):
        return float(torch.rand((), generator=self.g))

    def transform(self, x):
        # T.RandomResizedCrop(image_size, scale=(0.2, 1.0))
        s = x.shape[-1]
        area = s * s * (0.2 + 0.8 * self._rand())
        ratio = float(np.exp(np.log(3 / 4) + (np.log(4 / 3) - np.log(3 / 4)) * self._rand()))
        w = round(min(s, max(1, (area * ratio) ** 0.5)))
        h = round(min(s, max(1, (area / ratio) ** 0.5)))
        i = int(self._rand() * (s - h + 1))
        j = int(self._rand() * (s - w + 1))
        x = F.interpolate(x[None, :, i:i + h, j:j + w], size=(self.image_size, self.image_size), mode='bilinear',
                          align_corners=False)[0]
        # T.RandomHorizontalFlip()
        if self._rand() < 0.5:
            x = x.flip(-1)
        # T.RandomApply([T.ColorJitter(0.4,0.4,0.4,0.1)], p=0.8) (brightness, contrast, saturation)
        if self._rand() < 0.8:
            x = x * (0.6 + 0.8 * self._rand())
            m = x.mean()
            x = (x - m) * (0.6 + 0.8 * self._rand()) + m
            gray = (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2])[None]
            x = (x - gray) * (0.6 + 0.8 * self._rand()) + gray
            x = x.clamp(0, 1)
        # T.RandomGrayscale(p=0.2)
        if self._rand() < 0.2:
            x = (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2])[None].expand(3, -1, -1)
        # no GaussianBlur at image_size <= 32; T.ToTensor(); T.Normalize(*mean_std)
        return (x - self.mean) / self.std

    def __call__(self, x):
        x1 = self.transform(x)
        x2 = self.transform(x)
        return x1, x2


def synthetic_images(g):
    """(port) N_IMAGES RGB images in [0, 1]: one of 8 smooth random colour patterns each, plus noise."""
    patterns = F.interpolate(torch.rand(8, 3, 4, 4, generator=g), size=(IMAGE_SIZE, IMAGE_SIZE), mode='bilinear',
                             align_corners=False)
    labels = torch.randint(0, 8, (N_IMAGES,), generator=g)
    images = (patterns[labels] + 0.1 * torch.randn(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)).clamp(0, 1)
    return images, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    images, labels = synthetic_images(g)
    transform = SimSiamTransform(IMAGE_SIZE, g)

    def train_loader():
        """(port) DataLoader(shuffle=True, batch_size) over the dataset with the two-view transform."""
        perm = torch.randperm(N_IMAGES, generator=g)
        for k in range(0, N_IMAGES, BATCH_SIZE):
            idx = perm[k:k + BATCH_SIZE]
            views = [transform(images[i]) for i in idx]
            yield (torch.stack([v[0] for v in views]), torch.stack([v[1] for v in views])), labels[idx]

    iter_per_epoch = N_IMAGES // BATCH_SIZE

    # define model
    model = SimSiam(get_backbone('resnet18_cifar_variant1'), bug=bug)
    model.projector.set_layers(2)

    base_lr, warmup_lr, final_lr = 0.03, 0, 0
    # define optimizer
    optimizer = get_optimizer(
        'sgd', model,
        lr=base_lr*LR_BATCH_SIZE/256,
        momentum=0.9,
        weight_decay=0.0005, bug=bug)

    lr_scheduler = LR_Scheduler(
        optimizer,
        10, warmup_lr*LR_BATCH_SIZE/256,
        800, base_lr*LR_BATCH_SIZE/256, final_lr*LR_BATCH_SIZE/256,
        iter_per_epoch,
        constant_predictor_lr=True # see the end of section 4.2 predictor
    )

    def batches():
        while True:
            model.train()
            yield from train_loader()

    stream = batches()
    (images1, images2), first_labels = next(train_loader())

    def train_step():
        (images1, images2), _labels = next(stream)

        if bug == "model_in_eval_mode":
            model.eval()
        model.zero_grad()
        data_dict = model.forward(images1, images2)
        loss = data_dict['loss'].mean() # ddp
        loss.backward()
        optimizer.step()
        lr_scheduler.step()
        return loss

    return Program(name="patrickhuasimsiam_cifar", model=model, batch=({"x1": images1, "x2": images2}, first_labels),
                   loss_fn=lambda data_dict, _labels: data_dict['loss'].mean(), optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the stop-gradient of ``D`` left out -- what https://github.com/PatrickHua/SimSiam/issues/39 thought was missing
    # ("This model is effectively training both the path"): the loss value is the same, its gradient also flows
    # through the target projections, the collapse SimSiam's stop-gradient prevents.
    Bug("stop_gradient_dropped", functools.partial(_build, bug="stop_gradient_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the 'base' group built over the backbone only (classic): the projector is in no parameter group and never
    # moves.
    Bug("base_group_over_backbone_only", functools.partial(_build, bug="base_group_over_backbone_only"),
        "four_structures", ("projector",)),
    # the model left in eval mode for the step (classic: an evaluation pass before the loop, ``model.train()`` not
    # called again): every BatchNorm normalizes with running statistics instead of the batch's.
    Bug("model_in_eval_mode", functools.partial(_build, bug="model_in_eval_mode"), "step_probe", ("backbone",)),
]
