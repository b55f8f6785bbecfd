"""FCN-8s semantic segmentation trained by the repository's ``train.py`` with its ``configs/fcn8s_pascal.yml``:
a VGG-16-shaped encoder (the first conv padded by 100), a fully-convolutional classifier (7x7 and 1x1 convs with
Dropout2d), ``score_pool4`` / ``score_pool3`` skips cropped at offsets 5 / 9 and fused through bilinear-initialised
learned ``ConvTranspose2d`` upsampling, the output cropped at offset 31; ``cross_entropy2d`` (pixels flattened,
``ignore_index=250``, ``size_average=False``: summed), SGD with momentum 0.99 and weight decay 5e-4, ``ConstantLR``
(no lr_schedule) stepped before each update, ``model.train()`` at every iteration and periodic validation in eval
mode.

Source: https://github.com/meetps/pytorch-semseg
Commit: 801fb200547caa5b0d91b8dde56b837da029f746
Files: train.py, configs/fcn8s_pascal.yml, ptsemseg/models/fcn.py, ptsemseg/models/utils.py (get_upsampling_weight),
  ptsemseg/models/__init__.py, ptsemseg/loss/ (loss.py, __init__.py), ptsemseg/optimizers/__init__.py,
  ptsemseg/schedulers/ (schedulers.py ConstantLR, __init__.py), ptsemseg/loader/pascal_voc_loader.py (transform)
License: MIT (Copyright (c) 2017 Meet Pragnesh Shah; LICENSES/meetps-pytorch-semseg.txt)
Domain: semantic segmentation (FCN-8s: skip fusion with crops, learned bilinear upsampling, summed pixel CE)

Deviations from the original:
- sizes: channel widths divided by 16 (64/128/256/512/512 -> 4/8/16/32/32; the classifier's 4096 -> 32), 21 -> 3
  classes; images 'same' (about 500x375 in VOC) -> 32x32; batch_size 1 -> 2; train_iters 300000 -> as many as the
  caller runs; val_interval 1000 -> 2 (4 validation images); print_interval and the logger/tensorboard writer are
  left out;
- ``get_model`` initialises fcn8s from torchvision's ImageNet VGG-16 (``init_vgg16_params``, a download that is not
  available here): the port starts from PyTorch's default initialisation (the upsampling layers keep their
  bilinear init); for a network trained from scratch at 32x32 the config's lr 1.0e-10 (meant for fine-tuning from
  VGG weights with a loss summed over ~190k pixels) does not move the loss, so lr is 1.0e-10 -> 1.0e-4
  (momentum 0.99 and weight decay 5e-4 unchanged);
- ``cross_entropy2d`` passes ``size_average=False`` to ``F.cross_entropy`` as written (deprecated, same meaning as
  ``reduction='sum'``; the deprecation warnings are silenced);
- ``torch.nn.DataParallel`` is kept (on CPU it calls the module); no GPU; the ``resume`` checkpoint is absent (the
  script then starts from scratch, as written); checkpoint saving of the best model is left out;
- data: the VOC loader is replaced by synthetic 32x32 RGB images made from ``seed``: a noisy background (class 0)
  with one to three red or green squares (class 1 or 2); ``transform``'s ``ToTensor`` + ImageNet ``Normalize``
  are written out, and ``lbl[lbl == 255] = 0`` runs on the label maps (no 255 pixels here); no augmentations (the
  config has none);
- one ``train_step`` is one iteration of the ``for (images, labels) in trainloader`` body (the validation branch
  included, with the running metrics kept as a pixel accuracy); ``eval_fn`` is the pixel accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008, UP032, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import SGD, Adam
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 32
W = 16  # channel width divisor of the VGG-16 encoder

cfg_template = {
    "model": {"arch": "fcn8s"},
    "data": {"dataset": "pascal", "train_split": "train_aug", "val_split": "val", "img_rows": "same",
             "img_cols": "same"},
    "training": {
        "train_iters": 300000,
        "batch_size": 2,
        "val_interval": 2,
        "n_workers": 0,
        "print_interval": 50,
        "optimizer": {"name": "sgd", "lr": 1e-4, "weight_decay": 0.0005, "momentum": 0.99},
        "loss": {"name": "cross_entropy", "size_average": False},
        "lr_schedule": None,
        "resume": None,
    },
}


# ---- ptsemseg/loss/loss.py -------------------------------------------------------------------------------------

def cross_entropy2d(input, target, weight=None, size_average=True, bug=None):
    n, c, h, w = input.size()
    nt, ht, wt = target.size()

    # Handle inconsistent size between input and target
    if h != ht and w != wt:  # upsample labels
        input = F.interpolate(input, size=(ht, wt), mode="bilinear", align_corners=True)

    if bug == "logits_viewed_not_transposed":
        # the (n, c, h, w) scores flattened to (-1, c) without moving the class axis last
        input = input.contiguous().view(-1, c)
    else:
        input = input.transpose(1, 2).transpose(2, 3).contiguous().view(-1, c)
    target = target.view(-1)
    loss = F.cross_entropy(
        input, target, weight=weight, size_average=size_average, ignore_index=250
    )
    return loss


key2loss = {
    "cross_entropy": cross_entropy2d,
}


def get_loss_function(cfg, bug=None):
    if cfg["training"]["loss"] is None:
        return cross_entropy2d

    else:
        loss_dict = cfg["training"]["loss"]
        loss_name = loss_dict["name"]
        loss_params = {k: v for k, v in loss_dict.items() if k != "name"}

        if loss_name not in key2loss:
            raise NotImplementedError("Loss {} not implemented".format(loss_name))

        if bug is not None:
            loss_params["bug"] = bug
        return functools.partial(key2loss[loss_name], **loss_params)


# ---- ptsemseg/optimizers/__init__.py, ptsemseg/schedulers/ -----------------------------------------------------

key2opt = {
    "sgd": SGD,
    "adam": Adam,
}


def get_optimizer(cfg):
    if cfg["training"]["optimizer"] is None:
        return SGD

    else:
        opt_name = cfg["training"]["optimizer"]["name"]
        if opt_name not in key2opt:
            raise NotImplementedError("Optimizer {} not implemented".format(opt_name))

        return key2opt[opt_name]


class ConstantLR(_LRScheduler):
    def __init__(self, optimizer, last_epoch=-1):
        super(ConstantLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr for base_lr in self.base_lrs]


def get_scheduler(optimizer, scheduler_dict):
    if scheduler_dict is None:
        return ConstantLR(optimizer)
    raise NotImplementedError("only the config's lr_schedule (None) is ported")


# ---- ptsemseg/models/utils.py, ptsemseg/models/fcn.py ----------------------------------------------------------

def get_upsampling_weight(in_channels, out_channels, kernel_size):
    """Make a 2D bilinear kernel suitable for upsampling"""
    factor = (kernel_size + 1) // 2
    if kernel_size % 2 == 1:
        center = factor - 1
    else:
        center = factor - 0.5
    og = np.ogrid[:kernel_size, :kernel_size]
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    weight = np.zeros((in_channels, out_channels, kernel_size, kernel_size), dtype=np.float64)
    weight[range(in_channels), range(out_channels), :, :] = filt
    return torch.from_numpy(weight).float()


class fcn8s(nn.Module):
    def __init__(self, n_classes=21, learned_billinear=True):
        super(fcn8s, self).__init__()
        self.learned_billinear = learned_billinear
        self.n_classes = n_classes
        self.loss = functools.partial(cross_entropy2d, size_average=False)

        self.conv_block1 = nn.Sequential(
            nn.Conv2d(3, 64 // W, 3, padding=100),
            nn.ReLU(inplace=True),
            nn.Conv2d(64 // W, 64 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )

        self.conv_block2 = nn.Sequential(
            nn.Conv2d(64 // W, 128 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(128 // W, 128 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )

        self.conv_block3 = nn.Sequential(
            nn.Conv2d(128 // W, 256 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256 // W, 256 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256 // W, 256 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )

        self.conv_block4 = nn.Sequential(
            nn.Conv2d(256 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(512 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(512 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )

        self.conv_block5 = nn.Sequential(
            nn.Conv2d(512 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(512 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(512 // W, 512 // W, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )

        self.classifier = nn.Sequential(
            nn.Conv2d(512 // W, 4096 // 128, 7),
            nn.ReLU(inplace=True),
            nn.Dropout2d(),
            nn.Conv2d(4096 // 128, 4096 // 128, 1),
            nn.ReLU(inplace=True),
            nn.Dropout2d(),
            nn.Conv2d(4096 // 128, self.n_classes, 1),
        )

        self.score_pool4 = nn.Conv2d(512 // W, self.n_classes, 1)
        self.score_pool3 = nn.Conv2d(256 // W, self.n_classes, 1)

        if self.learned_billinear:
            self.upscore2 = nn.ConvTranspose2d(
                self.n_classes, self.n_classes, 4, stride=2, bias=False
            )
            self.upscore4 = nn.ConvTranspose2d(
                self.n_classes, self.n_classes, 4, stride=2, bias=False
            )
            self.upscore8 = nn.ConvTranspose2d(
                self.n_classes, self.n_classes, 16, stride=8, bias=False
            )

        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d):
                m.weight.data.copy_(
                    get_upsampling_weight(m.in_channels, m.out_channels, m.kernel_size[0])
                )

    def forward(self, x):
        conv1 = self.conv_block1(x)
        conv2 = self.conv_block2(conv1)
        conv3 = self.conv_block3(conv2)
        conv4 = self.conv_block4(conv3)
        conv5 = self.conv_block5(conv4)

        score = self.classifier(conv5)

        if self.learned_billinear:
            upscore2 = self.upscore2(score)
            score_pool4c = self.score_pool4(conv4)[
                :, :, 5 : 5 + upscore2.size()[2], 5 : 5 + upscore2.size()[3]
            ]
            upscore_pool4 = self.upscore4(upscore2 + score_pool4c)

            score_pool3c = self.score_pool3(conv3)[
                :, :, 9 : 9 + upscore_pool4.size()[2], 9 : 9 + upscore_pool4.size()[3]
            ]

            out = self.upscore8(score_pool3c + upscore_pool4)[
                :, :, 31 : 31 + x.size()[2], 31 : 31 + x.size()[3]
            ]
            return out.contiguous()

        else:
            raise NotImplementedError("learned_billinear=False (F.upsample) path not ported")


def get_model(model_dict, n_classes, version=None):
    name = model_dict["arch"]
    model = {"fcn8s": fcn8s}[name]
    param_dict = copy.deepcopy(model_dict)
    param_dict.pop("arch")
    model = model(n_classes=n_classes, **param_dict)
    # vgg16 = models.vgg16(pretrained=True); model.init_vgg16_params(vgg16)  -- no download here
    return model


# ---- ptsemseg/loader/pascal_voc_loader.py (synthetic stand-in) ------------------------------------------------

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class SyntheticSegLoader(data.Dataset):
    n_classes = 3

    def __init__(self, n, seed, bug=None):
        gen = torch.Generator().manual_seed(seed)
        self.imgs, self.lbls = [], []
        for _ in range(n):
            img = torch.rand(3, IMG, IMG, generator=gen) * 0.3 + 0.2
            lbl = torch.zeros(IMG, IMG, dtype=torch.long)
            for _k in range(int(torch.randint(1, 4, (1,), generator=gen))):
                s = int(torch.randint(6, 13, (1,), generator=gen))
                y, x = torch.randint(0, IMG - s + 1, (2,), generator=gen).tolist()
                cls = int(torch.randint(1, 3, (1,), generator=gen))
                img[:, y:y + s, x:x + s] = 0.1
                img[cls - 1, y:y + s, x:x + s] = 0.9
                lbl[y:y + s, x:x + s] = cls
            self.imgs.append(img)
            self.lbls.append(lbl)
        self.bug = bug

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, index):
        img, lbl = self.imgs[index], self.lbls[index].clone()
        img = (img - MEAN) / STD  # self.tf: ToTensor + Normalize
        if self.bug == "label_map_transposed":
            # the label array read as (w, h): rows and columns of the map swapped against the image
            lbl = lbl.t().contiguous()
        lbl[lbl == 255] = 0
        return img, lbl


# ---- train.py (one iteration of the training loop per call) ---------------------------------------------------

def _build(seed, bug=None):
    cfg = copy.deepcopy(cfg_template)
    torch.manual_seed(cfg.get("seed", 1337) + seed)
    np.random.seed(cfg.get("seed", 1337) + seed)

    device = torch.device("cpu")

    t_loader = SyntheticSegLoader(32, seed, bug=bug)
    v_loader = SyntheticSegLoader(4, seed + 1000)

    n_classes = t_loader.n_classes
    trainloader = data.DataLoader(
        t_loader,
        batch_size=cfg["training"]["batch_size"],
        num_workers=cfg["training"]["n_workers"],
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )

    valloader = data.DataLoader(
        v_loader, batch_size=cfg["training"]["batch_size"], num_workers=cfg["training"]["n_workers"]
    )

    model = get_model(cfg["model"], n_classes).to(device)

    model = torch.nn.DataParallel(model, device_ids=range(torch.cuda.device_count()))

    optimizer_cls = get_optimizer(cfg)
    optimizer_params = {k: v for k, v in cfg["training"]["optimizer"].items() if k != "name"}

    optimizer = optimizer_cls(model.parameters(), **optimizer_params)

    scheduler = get_scheduler(optimizer, cfg["training"]["lr_schedule"])

    loss_fn = get_loss_function(cfg, bug="logits_viewed_not_transposed" if bug == "logits_viewed_not_transposed"
                                else None)

    state = {"i": 0, "it": iter(trainloader), "val_acc": None}
    if bug == "train_mode_set_once":
        model.train()

    def train_step():
        try:
            images, labels = next(state["it"])
        except StopIteration:
            state["it"] = iter(trainloader)
            images, labels = next(state["it"])
        state["i"] += 1
        i = state["i"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scheduler.step()
        if bug != "train_mode_set_once":
            model.train()
        # bug "train_mode_set_once": model.train() called once before the loop; after the first validation the
        # model keeps training in eval mode (Dropout2d off)
        images = images.to(device)
        labels = labels.to(device)

        optimizer.zero_grad()
        outputs = model(images)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = loss_fn(input=outputs, target=labels)

        loss.backward()
        optimizer.step()

        if (i + 1) % cfg["training"]["val_interval"] == 0 or (i + 1) == cfg["training"][
            "train_iters"
        ]:
            model.eval()
            correct, total = 0, 0
            with torch.no_grad():
                for i_val, (images_val, labels_val) in enumerate(valloader):
                    outputs = model(images_val)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        val_loss = loss_fn(input=outputs, target=labels_val)  # noqa: F841

                    pred = outputs.data.max(1)[1].cpu().numpy()
                    gt = labels_val.data.cpu().numpy()
                    correct += int((pred == gt).sum())
                    total += gt.size
            state["val_acc"] = correct / total

        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            pred = model(batch[0]).max(1)[1]
        return float((pred == batch[1]).float().mean())

    first = next(iter(data.DataLoader(t_loader, batch_size=cfg["training"]["batch_size"])))

    def user_loss(outputs, targets):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return loss_fn(input=outputs, target=targets)

    return Program(name="ptsemseg_fcn8s", model=model, batch=(first[0], first[1]), loss_fn=user_loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build)

BUGS = [
    # the class axis not moved last before ``view(-1, c)``: scores of different pixels and classes mixed
    Bug("logits_viewed_not_transposed", functools.partial(_build, bug="logits_viewed_not_transposed"),
        "learning_ledger", ("OBJECTIVE",)),
    # model.train() hoisted out of the loop: after the first validation the network trains in eval mode
    Bug("train_mode_set_once", functools.partial(_build, bug="train_mode_set_once"), "step_probe", ("classifier",)),
    # the label map read with rows and columns swapped against the image
    Bug("label_map_transposed", functools.partial(_build, bug="label_map_transposed"), "learning_ledger", ("TASK",)),
]
