"""DeepLab v3+ semantic segmentation on Pascal VOC, as trained by jfzhang95/pytorch-deeplab-xception's ``train.py``
with ``--backbone mobilenet``: ``DeepLab`` (MobileNetV2 backbone at output stride 16, ASPP, decoder; in the helper
``_deeplabxception_lib.py``), SGD over two parameter groups (the backbone at ``lr``, ASPP and decoder at ``10 * lr``;
momentum 0.9, weight decay 5e-4), the ``poly`` ``LR_Scheduler`` called before every batch, ``SegmentationLosses``'
cross-entropy (``ignore_index=255``, mean over pixels, then divided by the batch size: ``batch_average``), and the
Pascal training transforms (random horizontal flip, random scale and crop with zero padding, random Gaussian blur,
ImageNet normalization); ``validation`` after every epoch (``model.eval()``, ``no_grad``, confusion-matrix mIoU).

Source: https://github.com/jfzhang95/pytorch-deeplab-xception
Commit: 9135e104a7a51ea9effa9c6676a2fcffe6a6a2e6
Files: train.py, utils/loss.py, utils/lr_scheduler.py, utils/metrics.py, dataloaders/__init__.py,
dataloaders/datasets/pascal.py (dataloaders/custom_transforms.py in the helper _deeplabxception_transforms.py,
the model files in the helper _deeplabxception_lib.py)
License: MIT (Copyright (c) 2018 Pyjcsx; full text in LICENSES/jfzhang95-pytorch-deeplab-xception.txt)
Domain: vision, semantic segmentation (DeepLab v3+, atrous spatial pyramid pooling, encoder-decoder)

Kept as written: ``Trainer.training``'s loop body (``model.train()`` at the epoch start, ``scheduler(optimizer, i,
epoch, best_pred)``, zero_grad, forward, ``criterion(output, target)``, backward, step), ``Trainer.validation``
(eval mode, ``no_grad``, loss, argmax, ``Evaluator.add_batch``, mIoU kept as ``best_pred``), the optimizer's two
groups (``get_1x_lr_params`` / ``get_10x_lr_params``), ``LR_Scheduler`` ('poly', the head groups at 10x),
``SegmentationLosses.CrossEntropyLoss`` (with the deprecated ``size_average`` written as the ``reduction='mean'`` it
means, and ``loss /= n``: the double averaging of https://github.com/jfzhang95/pytorch-deeplab-xception/issues/55 is
kept as the upstream has it), the custom transforms and ``Evaluator``; the Pascal defaults of ``main()``:
``lr = 0.007 / (4 * len(gpu_ids)) * batch_size``, 50 epochs, batch size 4, momentum 0.9, weight decay 5e-4,
``--use-balanced-weights`` off, ``--loss-type ce``.

Deviations from the original:
- data: VOC 2012 (and SBD) are replaced by in-memory PIL images made from ``seed``: 64 training and 16 validation
  images of 72-96 x 56-80 pixels, a textured background (class 0) with 1-3 filled rectangles or ellipses of the 20
  object classes, each class with its own colour, the mask (mode 'L') holding the class ids with a 255 outline on
  every object's border as VOC's masks have; ``VOCSegmentation`` reads them from that list instead of the disk;
  ``--base-size`` / ``--crop-size`` 513 -> 64; ``torchvision.transforms.Compose`` is written out (four lines);
- sizes for 2 CPU cores: the widths of the helper (MobileNetV2 ``width_mult`` 0.25, ASPP 256 -> 32, decoder
  48 / 256 -> 12 / 32); epochs 50 -> 4 (the poly schedule runs over 4 x 16 batches); ``lr`` 0.007 -> 0.05 (30 steps
  instead of 50 epochs of VOC; still the per-batch-size rule's value times 50 / 7);
- no CUDA / DataParallel / SyncBN, no checkpoint saving or resuming, no tensorboard, tqdm or prints; ``num_workers``
  0 and no ``pin_memory``; the ``Saver`` and ``TensorboardSummary`` objects are dropped;
- one ``train_step`` is one iteration of ``training``'s batch loop; when an epoch's batches are used up the next
  call runs ``validation`` for it (``--eval-interval`` 1) and starts the next epoch with ``training``'s
  ``model.train()``; past the 4 epochs the last epoch's schedule repeats (the poly rate would turn negative);
  ``eval_fn`` is ``validation``'s mIoU on the validation loader;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, PLR0402, RUF059, PLR1730

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _deeplabxception_lib import DeepLab
from _deeplabxception_transforms import (
    Compose,
    FixScaleCrop,
    Normalize,
    RandomGaussianBlur,
    RandomHorizontalFlip,
    RandomScaleCrop,
    ToTensor,
)

BASE_SIZE, CROP_SIZE, BATCH_SIZE, EPOCHS, LR = 64, 64, 4, 4, 0.05
N_TRAIN, N_VAL = 64, 16


# ---- utils/loss.py ----------------------------------------------------------------------------------------------

class SegmentationLosses(object):
    def __init__(self, weight=None, size_average=True, batch_average=True, ignore_index=255, cuda=False):
        self.ignore_index = ignore_index
        self.weight = weight
        self.size_average = size_average
        self.batch_average = batch_average
        self.cuda = cuda

    def build_loss(self, mode='ce'):
        """Choices: ['ce' or 'focal']"""
        if mode == 'ce':
            return self.CrossEntropyLoss
        else:
            raise NotImplementedError

    def CrossEntropyLoss(self, logit, target):
        n, c, h, w = logit.size()
        criterion = nn.CrossEntropyLoss(weight=self.weight, ignore_index=self.ignore_index,
                                        reduction='mean' if self.size_average else 'sum')

        loss = criterion(logit, target.long())

        if self.batch_average:
            loss /= n

        return loss


# ---- utils/lr_scheduler.py --------------------------------------------------------------------------------------

class LR_Scheduler(object):
    """Learning Rate Scheduler (the 'poly' and 'cos' modes: ``lr = baselr * (1 - iter/maxiter) ^ 0.9``)"""
    def __init__(self, mode, base_lr, num_epochs, iters_per_epoch=0,
                 lr_step=0, warmup_epochs=0):
        self.mode = mode
        self.lr = base_lr
        if mode == 'step':
            assert lr_step
        self.lr_step = lr_step
        self.iters_per_epoch = iters_per_epoch
        self.N = num_epochs * iters_per_epoch
        self.epoch = -1
        self.warmup_iters = warmup_epochs * iters_per_epoch

    def __call__(self, optimizer, i, epoch, best_pred):
        T = epoch * self.iters_per_epoch + i
        if self.mode == 'cos':
            lr = 0.5 * self.lr * (1 + math.cos(1.0 * T / self.N * math.pi))
        elif self.mode == 'poly':
            lr = self.lr * pow((1 - 1.0 * T / self.N), 0.9)
        elif self.mode == 'step':
            lr = self.lr * (0.1 ** (epoch // self.lr_step))
        else:
            raise NotImplementedError
        # warm up lr schedule
        if self.warmup_iters > 0 and T < self.warmup_iters:
            lr = lr * 1.0 * T / self.warmup_iters
        if epoch > self.epoch:
            self.epoch = epoch
        assert lr >= 0
        self._adjust_learning_rate(optimizer, lr)

    def _adjust_learning_rate(self, optimizer, lr):
        if len(optimizer.param_groups) == 1:
            optimizer.param_groups[0]['lr'] = lr
        else:
            # enlarge the lr at the head
            optimizer.param_groups[0]['lr'] = lr
            for i in range(1, len(optimizer.param_groups)):
                optimizer.param_groups[i]['lr'] = lr * 10


# ---- utils/metrics.py -------------------------------------------------------------------------------------------

class Evaluator(object):
    def __init__(self, num_class):
        self.num_class = num_class
        self.confusion_matrix = np.zeros((self.num_class,)*2)

    def Mean_Intersection_over_Union(self):
        MIoU = np.diag(self.confusion_matrix) / (
                    np.sum(self.confusion_matrix, axis=1) + np.sum(self.confusion_matrix, axis=0) -
                    np.diag(self.confusion_matrix))
        MIoU = np.nanmean(MIoU)
        return MIoU

    def _generate_matrix(self, gt_image, pre_image):
        mask = (gt_image >= 0) & (gt_image < self.num_class)
        label = self.num_class * gt_image[mask].astype('int') + pre_image[mask]
        count = np.bincount(label, minlength=self.num_class**2)
        confusion_matrix = count.reshape(self.num_class, self.num_class)
        return confusion_matrix

    def add_batch(self, gt_image, pre_image):
        assert gt_image.shape == pre_image.shape
        self.confusion_matrix += self._generate_matrix(gt_image, pre_image)

    def reset(self):
        self.confusion_matrix = np.zeros((self.num_class,) * 2)


# ---- dataloaders/datasets/pascal.py (the files read from a list of PIL pairs) ---------------------------------

class VOCSegmentation(Dataset):
    """
    PascalVoc dataset
    """
    NUM_CLASSES = 21

    def __init__(self, args, pairs, split='train'):
        super().__init__()
        self.split = [split]
        self.args = args
        self.images = [p[0] for p in pairs]
        self.categories = [p[1] for p in pairs]
        assert (len(self.images) == len(self.categories))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        _img, _target = self._make_img_gt_point_pair(index)
        sample = {'image': _img, 'label': _target}

        for split in self.split:
            if split == "train":
                return self.transform_tr(sample)
            elif split == 'val':
                return self.transform_val(sample)

    def _make_img_gt_point_pair(self, index):
        _img = self.images[index].convert('RGB')
        _target = self.categories[index]

        return _img, _target

    def transform_tr(self, sample):
        composed_transforms = Compose([
            RandomHorizontalFlip(bug=self.args.bug),
            RandomScaleCrop(base_size=self.args.base_size, crop_size=self.args.crop_size),
            RandomGaussianBlur(),
            Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
            ToTensor()])

        return composed_transforms(sample)

    def transform_val(self, sample):

        composed_transforms = Compose([
            FixScaleCrop(crop_size=self.args.crop_size),
            Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
            ToTensor()])

        return composed_transforms(sample)


def _synthetic_voc(rng, n, colours):
    """(port) VOC-like (image, mask) PIL pairs: textured background, 1-3 shapes of object classes, 255 outlines."""
    pairs = []
    for _ in range(n):
        w, h = int(rng.randint(72, 97)), int(rng.randint(56, 81))
        arr = rng.randint(60, 120, size=(h, w, 3)) + rng.randn(h, w, 1) * 8
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), 'RGB')
        mask = Image.new('L', (w, h), 0)
        d_img, d_mask = ImageDraw.Draw(img), ImageDraw.Draw(mask)
        for _ in range(int(rng.randint(1, 4))):
            c = int(rng.randint(1, 21))
            x0, y0 = int(rng.randint(0, w - 24)), int(rng.randint(0, h - 24))
            box = (x0, y0, x0 + int(rng.randint(16, 40)), y0 + int(rng.randint(16, 40)))
            shape = d_img.rectangle if rng.rand() < 0.5 else d_img.ellipse
            getattr(d_mask, shape.__name__)(box, fill=c, outline=255, width=1)
            shape(box, fill=tuple(int(v) for v in colours[c]))
        pairs.append((img, mask))
    return pairs


# ---- train.py ---------------------------------------------------------------------------------------------------

class Trainer(object):
    def __init__(self, args, seed):
        self.args = args

        # Define Dataloader (make_data_loader's pascal branch; num_workers 0)
        rng = np.random.RandomState(seed)
        colours = rng.randint(0, 256, size=(21, 3))
        train_set = VOCSegmentation(args, _synthetic_voc(rng, N_TRAIN, colours), split='train')
        val_set = VOCSegmentation(args, _synthetic_voc(rng, N_VAL, colours), split='val')
        self.nclass = train_set.NUM_CLASSES
        self.train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
        self.val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)

        # Define network
        model = DeepLab(num_classes=self.nclass,
                        backbone=args.backbone,
                        output_stride=args.out_stride,
                        sync_bn=args.sync_bn,
                        freeze_bn=args.freeze_bn, bug=args.bug)

        train_params = [{'params': model.get_1x_lr_params(), 'lr': args.lr},
                        {'params': model.get_10x_lr_params(), 'lr': args.lr * 10}]

        # Define Optimizer
        optimizer = torch.optim.SGD(train_params, momentum=args.momentum,
                                    weight_decay=args.weight_decay, nesterov=args.nesterov)

        # Define Criterion
        weight = None
        self.criterion = SegmentationLosses(weight=weight, cuda=args.cuda).build_loss(mode=args.loss_type)
        self.model, self.optimizer = model, optimizer

        # Define Evaluator
        self.evaluator = Evaluator(self.nclass)
        # Define lr scheduler
        self.scheduler = LR_Scheduler(args.lr_scheduler, args.lr,
                                      args.epochs, len(self.train_loader))
        self.best_pred = 0.0

    def training_batch(self, i, sample, epoch):
        """The body of ``training``'s ``for i, sample in enumerate(tbar)`` loop."""
        image, target = sample['image'], sample['label']
        self.scheduler(self.optimizer, i, epoch, self.best_pred)
        self.optimizer.zero_grad()
        output = self.model(image)
        loss = self.criterion(output, target)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def validation(self, epoch):
        self.model.eval()
        self.evaluator.reset()
        test_loss = 0.0
        for i, sample in enumerate(self.val_loader):
            image, target = sample['image'], sample['label']
            with torch.no_grad():
                output = self.model(image)
            loss = self.criterion(output, target)
            test_loss += loss.item()
            pred = output.data.cpu().numpy()
            target = target.cpu().numpy()
            pred = np.argmax(pred, axis=1)
            # Add batch sample into evaluator
            self.evaluator.add_batch(target, pred)

        mIoU = self.evaluator.Mean_Intersection_over_Union()
        new_pred = mIoU
        if new_pred > self.best_pred:
            self.best_pred = new_pred
        return mIoU


def _args(bug):
    """``main()``'s arguments for ``--backbone mobilenet --dataset pascal`` (sizes for 2 CPU cores)."""
    class Args:
        pass
    args = Args()
    args.backbone, args.out_stride, args.dataset, args.sync_bn, args.freeze_bn = 'mobilenet', 16, 'pascal', False, False
    args.base_size, args.crop_size, args.loss_type = BASE_SIZE, CROP_SIZE, "ce"
    args.epochs, args.batch_size = EPOCHS, BATCH_SIZE
    args.lr, args.lr_scheduler, args.momentum, args.weight_decay, args.nesterov = LR, 'poly', 0.9, 5e-4, False
    args.cuda, args.eval_interval, args.no_val, args.bug = False, 1, False, bug
    return args


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = _args(bug)
    trainer = Trainer(args, seed)
    st = {"epoch": 0, "it": None, "i": 0}

    def train_step():
        if st["it"] is None:  # trainer.training(epoch) begins
            if bug != "train_mode_not_restored":  # the variant leaves training()'s model.train() out
                trainer.model.train()
            st["it"], st["i"] = iter(trainer.train_loader), 0
        sample = next(st["it"])
        loss = trainer.training_batch(st["i"], sample, st["epoch"])
        st["i"] += 1
        if st["i"] == len(trainer.train_loader):  # the epoch ends: validation (eval_interval 1), next epoch
            if not args.no_val and st["epoch"] % args.eval_interval == (args.eval_interval - 1):
                trainer.validation(st["epoch"])
            st["epoch"], st["it"] = min(st["epoch"] + 1, args.epochs - 1), None
        return loss

    def eval_fn(model, _batch=None):
        return trainer.validation(st["epoch"])

    sample0 = next(iter(DataLoader(trainer.train_loader.dataset, batch_size=args.batch_size)))
    return Program(name="deeplabxception_voc", model=trainer.model, batch=(sample0['image'], sample0['label']),
                   loss_fn=trainer.criterion, optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=trainer.train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the horizontal flip applied to the image and not to its mask, so half the training masks are
    # mirrored against their images.
    Bug("mask_not_flipped", functools.partial(_build, bug="mask_not_flipped"), "learning_ledger", ("TASK",)),
    # classic: the decoder left out of the 10x parameter group (get_10x_lr_params over the ASPP alone): the decoder,
    # classifier included, keeps its initialization.
    Bug("decoder_left_out_of_optimizer", functools.partial(_build, bug="decoder_left_out_of_optimizer"),
        "four_structures", ("decoder",)),
    # classic: model.train() left out of training(): after the first epoch's validation the model trains in eval
    # mode (BatchNorm on its running statistics, dropout off).
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]
