"""torchvision's classification reference training script: ``train_one_epoch`` (forward, criterion, zero_grad,
backward, optional clipping, step, EMA update every ``model_ema_steps`` iterations, the EMA reset to a copy during
the warmup epochs), ``nn.CrossEntropyLoss(label_smoothing=...)`` on the soft targets that a collate function makes
with ``RandomMixup`` / ``RandomCutmix`` (one of the two per batch, ``RandomChoice``), SGD with momentum and weight
decay, a linear warmup (``LinearLR``) followed by ``CosineAnnealingLR`` through ``SequentialLR`` stepped per epoch,
and ``utils.ExponentialMovingAverage`` (an ``AveragedModel``) with the decay adjusted by ``model_ema_steps``,
batch size and epochs, on ``torchvision.models.resnet18``.

Source: https://github.com/pytorch/vision
Commit: 017e9b99b5daddec3d82d5b05fe26f6834c48fa9 (references/classification/train.py);
transforms.py (RandomMixup, RandomCutmix) read at commit 02a0a90b7ad1e9d69f1f392ad6701eb069f7db02
Files: references/classification/train.py, references/classification/transforms.py,
references/classification/utils.py (ExponentialMovingAverage), references/classification/presets.py
License: BSD-3-Clause (Copyright (c) Soumith Chintala 2016; full text in LICENSES/pytorch-vision.txt, taken from the
LICENSE that torchvision 0.28.0's wheel ships, the repository's LICENSE not being in the index)
Domain: image classification recipe (label smoothing, mixup/cutmix, EMA, lr warmup)

How it was read: the repository (1.4 GB) is over the fetch limit here, so train.py and transforms.py were read from
the code index at the commits above (the versions it stores: transforms.py is not stored at train.py's commit, so
RandomMixup/RandomCutmix are taken from the later commit as read there, ``F.get_dimensions(batch)`` written as the
tensor's shape). references/classification/utils.py is stored only at
older commits (before EMA existed), so ``ExponentialMovingAverage`` is written out as utils.py had it when
train.py called ``model_ema.n_averaged.fill_(0)``: a ``torch.optim.swa_utils.AveragedModel`` whose ``avg_fn`` is
``decay * avg + (1 - decay) * param`` and whose ``update_parameters`` averages every ``state_dict`` entry
(buffers included), copying on the first update.

Deviations from the original:
- the run's options (all flags of train.py, a recipe of the README's kind): ``--model resnet18 --label-smoothing 0.1
  --mixup-alpha 0.2 --cutmix-alpha 1.0 --lr-scheduler cosineannealinglr --lr-warmup-epochs 2 --lr-warmup-method
  linear --model-ema --epochs 30``; the other defaults stand (SGD lr 0.1, momentum 0.9, weight decay 1e-4,
  lr-warmup-decay 0.01, model-ema-steps 32, model-ema-decay 0.99998, no clipping, no amp, norm-weight-decay None);
- sizes: batch 32 -> 16, crop 224 -> 32, 10 classes; resnet18's channel widths / 8 (``_tv_resnet.py``: torchvision
  is not installed; same module names, randomly initialized);
- data: the ImageFolder dataset is replaced by 64 synthetic 40x40 images made from ``seed`` (a coloured square on a
  noisy background, the colour is one of 10 classes); ``ClassificationPresetTrain`` is written out in torch:
  RandomResizedCrop(32) (scale 0.08-1, ratio 3/4-4/3, bilinear), RandomHorizontalFlip(0.5), ConvertImageDtype,
  Normalize (ImageNet mean/std); no auto-augment, no random erasing (their flags are off); the sampler is a
  seeded RandomSampler;
- ``torchvision.transforms.RandomChoice`` is written out (``random.choice`` from a ``random.Random(seed)``);
  ``F.get_dimensions(batch)`` in RandomCutmix is ``batch.shape[-3:]``;
- one ``train_step`` is one iteration of ``train_one_epoch``'s loop; at the end of an epoch of the loader
  ``lr_scheduler.step()`` runs as main() does; the metric logger and ``utils.accuracy`` (logging only) are left
  out; ``eval_fn`` is ``evaluate``'s loss (eval mode, no gradient) on a batch; device cuda -> cpu,
  single process; ``utils.get_optimizer_params(optimizer)`` (for the unused clipping) is written inline;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF046, RUF100, UP006, UP035  (the original's style is kept)

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torch.utils.data.dataloader import default_collate

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program

N_CLASSES = 10
N_IMAGES = 64
RAW = 40
CROP = 32


# ---- references/classification/transforms.py -------------------------------------------------------------------

class RandomMixup(torch.nn.Module):
    """Randomly apply Mixup to the provided batch and targets.
    The class implements the data augmentations as described in the paper
    `"mixup: Beyond Empirical Risk Minimization" <https://arxiv.org/abs/1710.09412>`_.

    Args:
        num_classes (int): number of classes used for one-hot encoding.
        p (float): probability of the batch being transformed. Default value is 0.5.
        alpha (float): hyperparameter of the Beta distribution used for mixup.
            Default value is 1.0.
        inplace (bool): boolean to make this transform inplace. Default set to False.
    """

    def __init__(self, num_classes: int, p: float = 0.5, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()

        if num_classes < 1:
            raise ValueError(
                f"Please provide a valid positive value for the num_classes. Got num_classes={num_classes}"
            )

        if alpha <= 0:
            raise ValueError("Alpha param can't be zero.")

        self.num_classes = num_classes
        self.p = p
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, batch: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
            batch (Tensor): Float tensor of size (B, C, H, W)
            target (Tensor): Integer tensor of size (B, )

        Returns:
            Tensor: Randomly transformed batch.
        """
        if batch.ndim != 4:
            raise ValueError(f"Batch ndim should be 4. Got {batch.ndim}")
        if target.ndim != 1:
            raise ValueError(f"Target ndim should be 1. Got {target.ndim}")
        if not batch.is_floating_point():
            raise TypeError(f"Batch dtype should be a float tensor. Got {batch.dtype}.")
        if target.dtype != torch.int64:
            raise TypeError(f"Target dtype should be torch.int64. Got {target.dtype}")

        if not self.inplace:
            batch = batch.clone()
            target = target.clone()

        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)

        if torch.rand(1).item() >= self.p:
            return batch, target

        # It's faster to roll the batch by one instead of shuffling it to create image pairs
        batch_rolled = batch.roll(1, 0)
        target_rolled = target.roll(1, 0)

        # Implemented as on mixup paper, page 3.
        lambda_param = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch_rolled.mul_(1.0 - lambda_param)
        batch.mul_(lambda_param).add_(batch_rolled)

        target_rolled.mul_(1.0 - lambda_param)
        target.mul_(lambda_param).add_(target_rolled)

        return batch, target

    def __repr__(self) -> str:
        s = (
            f"{self.__class__.__name__}("
            f"num_classes={self.num_classes}"
            f", p={self.p}"
            f", alpha={self.alpha}"
            f", inplace={self.inplace}"
            f")"
        )
        return s


class RandomCutmix(torch.nn.Module):
    """Randomly apply Cutmix to the provided batch and targets.
    The class implements the data augmentations as described in the paper
    `"CutMix: Regularization Strategy to Train Strong Classifiers with Localizable Features"
    <https://arxiv.org/abs/1905.04899>`_.

    Args:
        num_classes (int): number of classes used for one-hot encoding.
        p (float): probability of the batch being transformed. Default value is 0.5.
        alpha (float): hyperparameter of the Beta distribution used for cutmix.
            Default value is 1.0.
        inplace (bool): boolean to make this transform inplace. Default set to False.
    """

    def __init__(self, num_classes: int, p: float = 0.5, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError("Please provide a valid positive value for the num_classes.")
        if alpha <= 0:
            raise ValueError("Alpha param can't be zero.")

        self.num_classes = num_classes
        self.p = p
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, batch: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
            batch (Tensor): Float tensor of size (B, C, H, W)
            target (Tensor): Integer tensor of size (B, )

        Returns:
            Tensor: Randomly transformed batch.
        """
        if batch.ndim != 4:
            raise ValueError(f"Batch ndim should be 4. Got {batch.ndim}")
        if target.ndim != 1:
            raise ValueError(f"Target ndim should be 1. Got {target.ndim}")
        if not batch.is_floating_point():
            raise TypeError(f"Batch dtype should be a float tensor. Got {batch.dtype}.")
        if target.dtype != torch.int64:
            raise TypeError(f"Target dtype should be torch.int64. Got {target.dtype}")

        if not self.inplace:
            batch = batch.clone()
            target = target.clone()

        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)

        if torch.rand(1).item() >= self.p:
            return batch, target

        # It's faster to roll the batch by one instead of shuffling it to create image pairs
        batch_rolled = batch.roll(1, 0)
        target_rolled = target.roll(1, 0)

        # Implemented as on cutmix paper, page 12 (with minor corrections on typos).
        lambda_param = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        _, H, W = batch.shape[-3:]  # F.get_dimensions(batch)

        r_x = torch.randint(W, (1,))
        r_y = torch.randint(H, (1,))

        r = 0.5 * math.sqrt(1.0 - lambda_param)
        r_w_half = int(r * W)
        r_h_half = int(r * H)

        x1 = int(torch.clamp(r_x - r_w_half, min=0))
        y1 = int(torch.clamp(r_y - r_h_half, min=0))
        x2 = int(torch.clamp(r_x + r_w_half, max=W))
        y2 = int(torch.clamp(r_y + r_h_half, max=H))

        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lambda_param = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))

        target_rolled.mul_(1.0 - lambda_param)
        target.mul_(lambda_param).add_(target_rolled)

        return batch, target

    def __repr__(self) -> str:
        s = (
            f"{self.__class__.__name__}("
            f"num_classes={self.num_classes}"
            f", p={self.p}"
            f", alpha={self.alpha}"
            f", inplace={self.inplace}"
            f")"
        )
        return s


# ---- references/classification/utils.py: ExponentialMovingAverage (written out, see the module docstring) ------

class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """Maintains moving averages of model parameters using an exponential decay.
    ``ema_avg = decay * avg_model_param + (1 - decay) * model_param``
    `torch.optim.swa_utils.AveragedModel <https://pytorch.org/docs/stable/optim.html#custom-averaging-strategies>`_
    is used to compute the EMA.
    """

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg)

    def update_parameters(self, model):
        for p_swa, p_model in zip(self.module.state_dict().values(), model.state_dict().values()):
            device = p_swa.device
            p_model_ = p_model.detach().to(device)
            if self.n_averaged == 0:
                p_swa.detach().copy_(p_model_)
            else:
                p_swa.detach().copy_(self.avg_fn(p_swa.detach(), p_model_, self.n_averaged.to(device)))
        self.n_averaged += 1


# ---- torchvision.transforms pieces (not installed here), written out -------------------------------------------

class RandomChoice:
    """torchvision.transforms.RandomChoice: apply one transform picked at random (with ``*args``)."""

    def __init__(self, transforms, rng):
        self.transforms = transforms
        self.rng = rng

    def __call__(self, *args):
        t = self.rng.choice(self.transforms)
        return t(*args)


class ClassificationPresetTrain:
    """presets.ClassificationPresetTrain(crop_size) on a float image tensor in [0, 1] (PILToTensor +
    ConvertImageDtype already applied): RandomResizedCrop, RandomHorizontalFlip(0.5), Normalize."""

    def __init__(self, *, crop_size, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), hflip_prob=0.5,
                 scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.crop_size = crop_size
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)
        self.hflip_prob = hflip_prob
        self.scale = scale
        self.ratio = ratio

    def _crop_params(self, img):  # RandomResizedCrop.get_params
        height, width = img.shape[-2:]
        area = height * width
        log_ratio = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        return 0, 0, height, width

    def __call__(self, img):
        i, j, h, w = self._crop_params(img)
        img = F.interpolate(img[None, :, i:i + h, j:j + w], size=(self.crop_size, self.crop_size), mode="bilinear",
                            align_corners=False)[0]
        if torch.rand(1).item() < self.hflip_prob:
            img = img.flip(-1)
        return (img - self.mean) / self.std


class SyntheticImageFolder(Dataset):
    """Stands in for ``torchvision.datasets.ImageFolder``: a coloured square on a noisy background; its colour (one of
    10) is the class."""

    COLOURS = torch.tensor([[0.9, 0.1, 0.1], [0.1, 0.9, 0.1], [0.1, 0.1, 0.9], [0.9, 0.9, 0.1], [0.9, 0.1, 0.9],
                            [0.1, 0.9, 0.9], [0.9, 0.5, 0.1], [0.5, 0.1, 0.9], [0.95, 0.95, 0.95], [0.05, 0.05, 0.05]])

    def __init__(self, n, seed, transform):
        gen = torch.Generator().manual_seed(seed)
        self.classes = [f"class_{k}" for k in range(N_CLASSES)]
        self.targets = torch.randint(0, N_CLASSES, (n,), generator=gen)
        self.images = 0.5 + 0.1 * torch.randn(n, 3, RAW, RAW, generator=gen)
        for i in range(n):
            y, x = (int(v) for v in torch.randint(0, RAW - 20, (2,), generator=gen))
            self.images[i, :, y:y + 20, x:x + 20] = self.COLOURS[self.targets[i]].view(3, 1, 1)
        self.images = self.images.clamp(0, 1)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return self.transform(self.images[index]), int(self.targets[index])


# ---- references/classification/train.py ------------------------------------------------------------------------

def get_args():
    """get_args_parser()'s defaults with the options of the module docstring."""
    return types.SimpleNamespace(
        data_path="", model="resnet18", device="cpu", batch_size=16, epochs=30, workers=0, opt="sgd", lr=0.1,
        momentum=0.9, weight_decay=1e-4, norm_weight_decay=None, label_smoothing=0.1, mixup_alpha=0.2,
        cutmix_alpha=1.0, lr_scheduler="cosineannealinglr", lr_warmup_epochs=2, lr_warmup_method="linear",
        lr_warmup_decay=0.01, lr_step_size=30, lr_gamma=0.1, print_freq=10, output_dir="", resume="",
        start_epoch=0, cache_dataset=False, sync_bn=False, test_only=False, pretrained=False, auto_augment=None,
        random_erase=0.0, amp=False, world_size=1, distributed=False, model_ema=True, model_ema_steps=32,
        model_ema_decay=0.99998, use_deterministic_algorithms=False, interpolation="bilinear",
        val_resize_size=40, val_crop_size=CROP, train_crop_size=CROP, clip_grad_norm=None, weights=None)


def _build(seed, bug=None):
    args = get_args()
    device = torch.device(args.device)
    torch.manual_seed(seed)
    rng = random.Random(seed)

    dataset = SyntheticImageFolder(N_IMAGES, seed, ClassificationPresetTrain(crop_size=args.train_crop_size))
    train_sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))

    collate_fn = None
    num_classes = len(dataset.classes)
    mixup_transforms = []
    if args.mixup_alpha > 0.0:
        mixup_transforms.append(RandomMixup(num_classes, p=1.0, alpha=args.mixup_alpha))
    if args.cutmix_alpha > 0.0:
        mixup_transforms.append(RandomCutmix(num_classes, p=1.0, alpha=args.cutmix_alpha))
    if mixup_transforms:
        mixupcutmix = RandomChoice(mixup_transforms, rng)
        if bug == "mixed_images_hard_labels":
            # the mixed images are kept but the mixed targets are thrown away: the loss sees the unmixed labels
            def collate_fn(batch):
                image, target = default_collate(batch)
                return mixupcutmix(image, target)[0], target
        else:
            collate_fn = lambda batch: mixupcutmix(*default_collate(batch))  # noqa: E731
    data_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=train_sampler,
        num_workers=args.workers,
        collate_fn=collate_fn,
    )

    model = _tv_resnet.resnet18(pretrained=args.pretrained, num_classes=num_classes, width=8)
    model.to(device)

    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    parameters = model.parameters()

    model_without_ddp = model
    model_ema = None
    if bug == "optimizer_over_ema_copy":
        # the EMA copy is made first and its parameters are handed to the optimizer: the trained model never moves
        adjust = args.world_size * args.batch_size * args.model_ema_steps / args.epochs
        alpha = 1.0 - args.model_ema_decay
        alpha = min(1.0, alpha * adjust)
        model_ema = ExponentialMovingAverage(model_without_ddp, device=device, decay=1.0 - alpha)
        parameters = model_ema.module.parameters()

    opt_name = args.opt.lower()
    if opt_name.startswith("sgd"):
        optimizer = torch.optim.SGD(
            parameters,
            lr=args.lr,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            nesterov="nesterov" in opt_name,
        )
    elif opt_name == "rmsprop":
        optimizer = torch.optim.RMSprop(
            parameters, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, eps=0.0316, alpha=0.9
        )
    elif opt_name == "adamw":
        optimizer = torch.optim.AdamW(parameters, lr=args.lr, weight_decay=args.weight_decay)
    else:
        raise RuntimeError(f"Invalid optimizer {args.opt}. Only SGD, RMSprop and AdamW are supported.")

    scaler = None

    args.lr_scheduler = args.lr_scheduler.lower()
    if args.lr_scheduler == "steplr":
        main_lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step_size, gamma=args.lr_gamma)
    elif args.lr_scheduler == "cosineannealinglr":
        main_lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=args.epochs - args.lr_warmup_epochs
        )
    elif args.lr_scheduler == "exponentiallr":
        main_lr_scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=args.lr_gamma)
    else:
        raise RuntimeError(
            f"Invalid lr scheduler '{args.lr_scheduler}'. Only StepLR, CosineAnnealingLR and ExponentialLR "
            "are supported."
        )

    if args.lr_warmup_epochs > 0:
        if args.lr_warmup_method == "linear":
            warmup_lr_scheduler = torch.optim.lr_scheduler.LinearLR(
                optimizer, start_factor=args.lr_warmup_decay, total_iters=args.lr_warmup_epochs
            )
        elif args.lr_warmup_method == "constant":
            warmup_lr_scheduler = torch.optim.lr_scheduler.ConstantLR(
                optimizer, factor=args.lr_warmup_decay, total_iters=args.lr_warmup_epochs
            )
        else:
            raise RuntimeError(
                f"Invalid warmup lr method '{args.lr_warmup_method}'. Only linear and constant are supported."
            )
        lr_scheduler = torch.optim.lr_scheduler.SequentialLR(
            optimizer, schedulers=[warmup_lr_scheduler, main_lr_scheduler], milestones=[args.lr_warmup_epochs]
        )
    else:
        lr_scheduler = main_lr_scheduler

    if args.model_ema and model_ema is None:
        # Decay adjustment that aims to keep the decay independent from other hyper-parameters originally proposed at:
        # https://github.com/facebookresearch/pycls/blob/f8cd9627/pycls/core/net.py#L123
        #
        # total_ema_updates = (Dataset_size / n_GPUs) * epochs / (batch_size_per_gpu * EMA_steps)
        # We consider constant = Dataset_size for a given dataset/setup and ommit it. Thus:
        # adjust = 1 / total_ema_updates ~= n_GPUs * batch_size_per_gpu * EMA_steps / epochs
        adjust = args.world_size * args.batch_size * args.model_ema_steps / args.epochs
        alpha = 1.0 - args.model_ema_decay
        alpha = min(1.0, alpha * adjust)
        model_ema = ExponentialMovingAverage(model_without_ddp, device=device, decay=1.0 - alpha)

    state = {"epoch": args.start_epoch, "i": 0, "it": iter(data_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the end of train_one_epoch: main() steps the scheduler, the next epoch starts
            lr_scheduler.step()
            state["epoch"] += 1
            state["i"] = 0
            state["it"] = iter(data_loader)
            return next(state["it"])

    def train_step():
        model.train()
        image, target = next_batch()
        i, epoch = state["i"], state["epoch"]
        image, target = image.to(device), target.to(device)
        output = model(image)

        optimizer.zero_grad()
        if args.amp:
            with torch.cuda.amp.autocast():
                loss = criterion(output, target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = criterion(output, target)
            loss.backward()

        if args.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], args.clip_grad_norm)

        optimizer.step()

        if model_ema and i % args.model_ema_steps == 0:
            model_ema.update_parameters(model)
            if epoch < args.lr_warmup_epochs:
                # Reset ema buffer to keep copying weights during warmup period
                model_ema.n_averaged.fill_(0)
        state["i"] += 1
        return loss.detach()

    @torch.inference_mode()
    def eval_fn(model, batch):
        model.eval()
        image, target = batch
        output = model(image)
        return float(criterion(output, target))

    first = next(iter(DataLoader(dataset, batch_size=args.batch_size, collate_fn=collate_fn)))
    return Program(name="tvrefs_classification", model=model, batch=first, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=data_loader, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the collate function keeps the mixed images but returns the original hard labels, so the targets no
    # longer describe the inputs (a pasted CutMix patch or a blended image is labelled with one class only).
    Bug("mixed_images_hard_labels", functools.partial(_build, bug="mixed_images_hard_labels"), "learning_ledger",
        ("TASK",)),
    # classic: the optimizer is built over the EMA copy's parameters; the model being trained never moves.
    Bug("optimizer_over_ema_copy", functools.partial(_build, bug="optimizer_over_ema_copy"), "four_structures",
        ("conv1.weight",)),
]
