# ruff: noqa: UP008, UP031
"""YOLOv3 of bubbliiiing/yolo3-pytorch: a DarkNet-53 backbone with three anchor-based heads (13 / 26 / 52 grids at
416 pixels, three anchors each, upsample-and-concatenate necks), trained by ``YOLOLoss`` per head: targets assigned
to the best-IoU anchor of ``yolo_anchors.txt`` at the ground truth's grid cell (``get_target``), predictions whose
decoded box already overlaps a ground truth above 0.5 removed from the no-object set (``get_ignore``), GIoU
location loss, BCE class and objectness losses with the per-level ``balance`` and the input-size-scaled ratios;
``fit_one_epoch``'s loop (zero_grad, sum of the three heads' losses, backward, step), SGD with Nesterov momentum
0.937 in three groups (BN weights without decay, conv weights with 5e-4, biases), the batch-size-scaled learning
rate and the warm-up cosine ``get_lr_scheduler("cos")`` set per epoch by ``set_optimizer_lr``.

Source: https://github.com/bubbliiiing/yolo3-pytorch
Commit: 8fbb81d3377b7a404c8634ad26ff3f1193da2cad
Files: train.py, utils/utils_fit.py, utils/dataloader.py, utils/utils.py, nets/yolo_training.py, and (in the helper
``_yolo3bubbliiiing.py``) nets/darknet.py, nets/yolo.py and ``YOLOLoss``; model_data/yolo_anchors.txt
License: MIT (Copyright (c) 2020 JiaQi Xu; full text in LICENSES/bubbliiiing-yolo3-pytorch.txt)
Domain: vision, object detection (anchor-based one-stage detector, YOLOv3 loss with GIoU and ignore mask)

Kept as written: ``YOLOLoss`` (``giou = True``, ``balance``, ``box_ratio``, ``obj_ratio``, ``cls_ratio``,
``ignore_threshold``), ``weights_init`` (normal, gain 0.02), ``get_lr_scheduler`` / ``set_optimizer_lr``,
``YoloDataset.__getitem__``'s ``preprocess_input`` and corner-to-centre box conversion, ``yolo_dataset_collate``,
train.py's optimizer construction (``pg0`` / ``pg1`` / ``pg2``, ``nbs`` 64, ``Init_lr_fit`` / ``Min_lr_fit``
limits) and ``fit_one_epoch``'s training and validation bodies; the configuration train.py's comments give for
training from scratch (``model_path = ''``, ``pretrained = False``, ``Freeze_Train = False``; ``UnFreeze_Epoch``
300, ``Unfreeze_batch_size`` 8, ``Init_lr`` 1e-2, ``Min_lr`` 1e-4, ``sgd``, momentum 0.937, weight decay 5e-4,
``cos``).

Deviations from the original:
- data: VOC is replaced by synthetic 96x96 scenes made from ``seed`` (a textured background with 1 to 3 objects of
  3 classes: red rectangles, green ellipses, blue triangles, 12 to 48 pixels, outlines jittered), 64 training and
  16 validation images, handed to ``YoloDataset`` as (image, corner boxes) instead of annotation lines;
  ``get_random_data``'s jitter / flip / HSV augmentation (cv2) is not ported, the images are drawn at
  ``input_shape``;
- sizes for 2 CPU cores: ``input_shape`` [416, 416] -> [96, 96] (grids 3 / 6 / 12), the anchors of
  ``yolo_anchors.txt`` scaled by 96 / 416, the model's widths / 16 (see the helper), ``num_classes`` 20 -> 3,
  ``num_workers`` 0; ``Cuda`` False (``YOLOLoss``'s ``cuda`` branch off), ``fp16`` False, no DataParallel;
- one ``train_step`` is one batch of ``fit_one_epoch``'s training loop; when an epoch's ``epoch_step`` batches
  are done the next epoch starts with ``set_optimizer_lr``; ``eval_fn`` is ``fit_one_epoch``'s validation loop
  (``model_train.eval()``, the summed head losses under ``no_grad``), returning the mean validation loss, then
  ``model_train.train()`` as the next epoch's start does; loss history, the mAP callback, tqdm and checkpoints are
  dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import partial

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn, optim
from torch.utils.data import DataLoader
from torch.utils.data.dataset import Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _yolo3bubbliiiing import YoloBody, YOLOLoss

# model_data/yolo_anchors.txt, scaled by 96 / 416 (port)
YOLO_ANCHORS = np.array([10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119, 116, 90, 156, 198, 373, 326],
                        dtype=np.float64).reshape(-1, 2) * 96 / 416


# nets/yolo_training.py
def weights_init(net, init_type='normal', init_gain = 0.02):
    def init_func(m):
        classname = m.__class__.__name__
        if hasattr(m, 'weight') and classname.find('Conv') != -1:
            if init_type == 'normal':
                torch.nn.init.normal_(m.weight.data, 0.0, init_gain)
            elif init_type == 'xavier':
                torch.nn.init.xavier_normal_(m.weight.data, gain=init_gain)
            elif init_type == 'kaiming':
                torch.nn.init.kaiming_normal_(m.weight.data, a=0, mode='fan_in')
            elif init_type == 'orthogonal':
                torch.nn.init.orthogonal_(m.weight.data, gain=init_gain)
            else:
                raise NotImplementedError('initialization method [%s] is not implemented' % init_type)
        elif classname.find('BatchNorm2d') != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)
    net.apply(init_func)

def get_lr_scheduler(lr_decay_type, lr, min_lr, total_iters, warmup_iters_ratio = 0.05, warmup_lr_ratio = 0.1, no_aug_iter_ratio = 0.05, step_num = 10):
    def yolox_warm_cos_lr(lr, min_lr, total_iters, warmup_total_iters, warmup_lr_start, no_aug_iter, iters):
        if iters <= warmup_total_iters:
            lr = (lr - warmup_lr_start) * pow(iters / float(warmup_total_iters), 2) + warmup_lr_start
        elif iters >= total_iters - no_aug_iter:
            lr = min_lr
        else:
            lr = min_lr + 0.5 * (lr - min_lr) * (
                1.0 + math.cos(math.pi* (iters - warmup_total_iters) / (total_iters - warmup_total_iters - no_aug_iter))
            )
        return lr

    def step_lr(lr, decay_rate, step_size, iters):
        if step_size < 1:
            raise ValueError("step_size must above 1.")
        n       = iters // step_size
        out_lr  = lr * decay_rate ** n
        return out_lr

    if lr_decay_type == "cos":
        warmup_total_iters  = min(max(warmup_iters_ratio * total_iters, 1), 3)
        warmup_lr_start     = max(warmup_lr_ratio * lr, 1e-6)
        no_aug_iter         = min(max(no_aug_iter_ratio * total_iters, 1), 15)
        func = partial(yolox_warm_cos_lr ,lr, min_lr, total_iters, warmup_total_iters, warmup_lr_start, no_aug_iter)
    else:
        decay_rate  = (min_lr / lr) ** (1 / (step_num - 1))
        step_size   = total_iters / step_num
        func = partial(step_lr, lr, decay_rate, step_size)

    return func

def set_optimizer_lr(optimizer, lr_scheduler_func, epoch):
    lr = lr_scheduler_func(epoch)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


# utils/utils.py
def preprocess_input(image):
    image /= 255.0
    return image


# utils/dataloader.py
class YoloDataset(Dataset):
    def __init__(self, annotation_lines, input_shape, num_classes, train):
        super(YoloDataset, self).__init__()
        self.annotation_lines   = annotation_lines
        self.input_shape        = input_shape
        self.num_classes        = num_classes
        self.length             = len(self.annotation_lines)
        self.train              = train

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        index       = index % self.length
        image, box  = self.annotation_lines[index]  # (port) self.get_random_data(...): drawn at input_shape
        image       = np.transpose(preprocess_input(np.array(image, dtype=np.float32)), (2, 0, 1))
        box         = np.array(box, dtype=np.float32)
        if len(box) != 0:
            box[:, [0, 2]] = box[:, [0, 2]] / self.input_shape[1]
            box[:, [1, 3]] = box[:, [1, 3]] / self.input_shape[0]
            if getattr(self, "bug", None) != "corners_not_converted":  # (port) BUGS variant
                box[:, 2:4] = box[:, 2:4] - box[:, 0:2]
                box[:, 0:2] = box[:, 0:2] + box[:, 2:4] / 2
        return image, box


# DataLoader中collate_fn使用
def yolo_dataset_collate(batch):
    images = []
    bboxes = []
    for img, box in batch:
        images.append(img)
        bboxes.append(box)
    images = torch.from_numpy(np.array(images)).type(torch.FloatTensor)
    bboxes = [torch.from_numpy(ann).type(torch.FloatTensor) for ann in bboxes]
    return images, bboxes


def _synthetic_scenes(rng, n, size=96):
    """(port) Scenes with 1-3 objects: 0 red rectangle, 1 green ellipse, 2 blue triangle; corner boxes + class."""
    colours = [(220, 40, 40), (40, 200, 60), (50, 70, 230)]
    out = []
    for _ in range(n):
        base = rng.randint(60, 140, size=3)
        arr = base[None, None, :] + rng.randint(-25, 25, size=(size, size, 3))
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        boxes = []
        for _o in range(rng.randint(1, 4)):
            w, h = rng.randint(12, 49, size=2)
            x1, y1 = rng.randint(0, size - w), rng.randint(0, size - h)
            c = int(rng.randint(0, 3))
            shade = tuple(int(v) for v in np.clip(np.array(colours[c]) + rng.randint(-30, 30, size=3), 0, 255))
            if c == 0:
                draw.rectangle([x1, y1, x1 + w - 1, y1 + h - 1], fill=shade)
            elif c == 1:
                draw.ellipse([x1, y1, x1 + w - 1, y1 + h - 1], fill=shade)
            else:
                draw.polygon([(x1 + w / 2, y1), (x1, y1 + h - 1), (x1 + w - 1, y1 + h - 1)], fill=shade)
            boxes.append([x1, y1, x1 + w, y1 + h, c])
        out.append((img, boxes))
    return out


class cfg:  # (port) train.py's settings: the from-scratch configuration, sizes shrunk
    anchors_mask = [[6, 7, 8], [3, 4, 5], [0, 1, 2]]  # noqa: RUF012
    input_shape = [96, 96]  # [416, 416]  # noqa: RUF012
    num_classes = 3  # VOC's 20
    UnFreeze_Epoch = 300
    Unfreeze_batch_size = 8
    Init_lr = 1e-2
    Min_lr = Init_lr * 0.01
    optimizer_type = "sgd"
    momentum = 0.937
    weight_decay = 5e-4
    lr_decay_type = "cos"


def _optimizer(model, batch_size, bug=None):
    nbs             = 64
    lr_limit_max    = 1e-3 if cfg.optimizer_type == 'adam' else 5e-2
    lr_limit_min    = 3e-4 if cfg.optimizer_type == 'adam' else 5e-4
    Init_lr_fit     = min(max(batch_size / nbs * cfg.Init_lr, lr_limit_min), lr_limit_max)
    Min_lr_fit      = min(max(batch_size / nbs * cfg.Min_lr, lr_limit_min * 1e-2), lr_limit_max * 1e-2)
    pg0, pg1, pg2 = [], [], []
    for k, v in model.named_modules():
        if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)
        if isinstance(v, nn.BatchNorm2d) or "bn" in k:
            pg0.append(v.weight)
        elif hasattr(v, "weight") and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)
    optimizer = {
        'adam'  : optim.Adam(pg0, Init_lr_fit, betas = (cfg.momentum, 0.999)),
        'sgd'   : optim.SGD(pg0, Init_lr_fit, momentum = cfg.momentum, nesterov=True)
    }[cfg.optimizer_type]
    optimizer.add_param_group({"params": pg1, "weight_decay": cfg.weight_decay})
    if bug != "bias_group_dropped":
        optimizer.add_param_group({"params": pg2})
    lr_scheduler_func = get_lr_scheduler(cfg.lr_decay_type, Init_lr_fit, Min_lr_fit, cfg.UnFreeze_Epoch)
    return optimizer, lr_scheduler_func


def _summed_loss(model_train, yolo_loss, images, targets):
    outputs         = model_train(images)
    loss_value_all  = 0
    for l in range(len(outputs)):
        loss_item = yolo_loss(l, outputs[l], targets)
        loss_value_all  += loss_item
    return loss_value_all


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    anchors, num_classes, input_shape = YOLO_ANCHORS, cfg.num_classes, cfg.input_shape
    model = YoloBody(cfg.anchors_mask, num_classes, pretrained=False)
    weights_init(model)
    yolo_loss = YOLOLoss(anchors, num_classes, input_shape, False, cfg.anchors_mask)
    yolo_loss.bug = bug  # (port) the variant being built
    model_train = model.train()
    batch_size = cfg.Unfreeze_batch_size
    optimizer, lr_scheduler_func = _optimizer(model, batch_size, bug)
    train_dataset   = YoloDataset(_synthetic_scenes(rng, 64), input_shape, num_classes, train = True)
    val_dataset     = YoloDataset(_synthetic_scenes(rng, 16), input_shape, num_classes, train = False)
    train_dataset.bug = val_dataset.bug = bug  # (port) the variant being built
    epoch_step      = len(train_dataset) // batch_size
    gen             = DataLoader(train_dataset, shuffle = True, batch_size = batch_size, num_workers = 0,
                                 drop_last=True, collate_fn=yolo_dataset_collate)
    gen_val         = DataLoader(val_dataset, shuffle = True, batch_size = batch_size, num_workers = 0,
                                 drop_last=True, collate_fn=yolo_dataset_collate)
    st = {"epoch": 0, "iteration": 0, "it": None}

    def train_step():
        if st["it"] is None or st["iteration"] >= epoch_step:  # a new epoch of fit_one_epoch
            if st["it"] is not None:
                st["epoch"] += 1
            set_optimizer_lr(optimizer, lr_scheduler_func, st["epoch"])
            model_train.train()
            st["it"], st["iteration"] = iter(gen), 0
        images, targets = next(st["it"])
        optimizer.zero_grad()
        loss_value = _summed_loss(model_train, yolo_loss, images, targets)
        loss_value.backward()
        optimizer.step()
        st["iteration"] += 1
        return loss_value.item()

    def eval_fn(model_train, _batch=None):
        model_train.eval()
        val_loss = 0
        for iteration, batch in enumerate(gen_val):
            images, targets = batch[0], batch[1]
            with torch.no_grad():
                optimizer.zero_grad()
                val_loss += _summed_loss(model_train, yolo_loss, images, targets).item()
        model_train.train()
        return val_loss / (iteration + 1)

    images0, targets0 = next(iter(DataLoader(train_dataset, batch_size=batch_size, collate_fn=yolo_dataset_collate)))
    return Program(name="yolo3bubbliiiing_voc", model=model, batch=(images0, targets0),
                   loss_fn=lambda outputs, targets: sum(yolo_loss(l, outputs[l], targets) for l in range(len(outputs))),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=gen)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic index slip: get_target writes the ground truth at [j, i] swapped (the cell's column used as its row),
    # so objectness, class and box targets sit at the transposed cell of the grid.
    Bug("grid_cell_x_y_swapped", functools.partial(_build, bug="grid_cell_x_y_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: __getitem__'s corner-to-centre conversion left out, so the loss reads (x1, y1, x2, y2) as
    # (cx, cy, w, h): every target sits at its top-left corner's cell with the wrong size.
    Bug("corners_not_converted", functools.partial(_build, bug="corners_not_converted"), "learning_ledger",
        ("TASK",)),
    # classic: the third parameter group (every bias: the BatchNorm biases and the heads' output-conv biases) never
    # added to the optimizer, so no bias is ever trained.
    Bug("bias_group_dropped", functools.partial(_build, bug="bias_group_dropped"), "four_structures", ("bias",)),
]
