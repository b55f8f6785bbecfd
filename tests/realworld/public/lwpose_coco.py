"""Lightweight OpenPose from Daniil-Osokin/lightweight-human-pose-estimation.pytorch: ``models/with_mobilenet.py``'s
``PoseEstimationWithMobileNet`` (a MobileNet backbone of depthwise-separable convolutions, the ``Cpm`` block, an
initial stage and one refinement stage, each predicting 19 keypoint heatmaps and 38 part-affinity-field channels)
trained by ``train.py``: ``datasets/coco.py``'s targets (Gaussian keypoint maps at stride 8 with a background map,
PAFs of the 19 limbs, both masked where unannotated people are), ``modules/loss.py``'s masked ``l2_loss`` summed over
every stage's heatmaps and PAFs, Adam over the script's 13 parameter groups (per-part learning-rate multipliers and
weight decay 5e-4), ``MultiStepLR`` per epoch, and gradient accumulation over ``--batches-per-iter`` batches.

Source: https://github.com/Daniil-Osokin/lightweight-human-pose-estimation.pytorch
Commit: d23c284b09acf27a163e1febd511e7482cac25ed
Files: train.py, models/with_mobilenet.py, modules/conv.py, modules/loss.py, modules/get_parameters.py,
       datasets/coco.py, datasets/transformations.py (Flip)
License: Apache-2.0 (the repository of Daniil Osokin; its LICENSE carries no copyright line)
Domain: human pose estimation (bottom-up: keypoint heatmaps and part affinity fields)

Deviations from the original:
- sizes: every backbone width divided by 8 (32..512 -> 4..64), ``num_channels`` 128 -> 16, the 512-wide 1x1
  convolutions of the initial stage -> 64; 19 heatmaps, 38 PAF channels and one refinement stage as in the script;
  batch size 80 -> 8, images 368x368 -> 128x128 (16x16 maps at stride 8; ``sigma`` 7 and ``path_thickness`` 1 kept);
- learning rate: ``--base-lr`` 4e-5 -> 1e-3 (the script fine-tunes from a MobileNet checkpoint, which cannot be
  loaded here: the network starts from PyTorch's default initialization; the group multipliers are kept);
- data: COCO is replaced by synthetic 128x128 images made from ``seed``: one stick figure per image (the 18 COCO
  keypoints of a jittered template, its 19 limbs drawn as lines of fixed colours, a left limb like its right one, on a noisy background) and, in
  half of the images, an unannotated region masked out as ``get_mask`` does for crowd segmentations; cv2 and
  pycocotools are not used (``cv2.resize(..., INTER_AREA)`` at 1/8 is an 8x8 average pool);
- of the training transforms only ``Flip`` (with its left/right keypoint swap) is written out; ``Scale``, ``Rotate``
  and ``CropPad`` are left out (the synthetic figures are already placed, scaled and centred at random);
- one ``train_step`` is one optimizer step (``batches_per_iter`` = 1 batch); ``scheduler.step()`` runs at the start
  of every epoch as in the loop; DataParallel, CUDA, logging, checkpoints and the COCO validation are left out
  (``eval_fn`` is the summed stage loss on a batch under ``eval()`` and ``no_grad``).
"""
# ruff: noqa: PLR0402  (the original's import style is kept)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import torch
import torch.optim as optim
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _lwpose_lib import CocoTrainDataset, make_people, net_factory

BASE_LR, BATCH_SIZE, BATCHES_PER_ITER, NUM_REFINEMENT_STAGES = 1e-3, 8, 1, 1
STRIDE, SIGMA, PATH_THICKNESS = 8, 7, 1


# ---- modules/loss.py -----------------------------------------------------------------------------------------

def l2_loss(input, target, mask, batch_size, bug=None):
    if bug == "loss_mask_dropped":
        loss = input - target  # the mask left out: unannotated people are trained as background
    else:
        loss = (input - target) * mask
    loss = (loss * loss) / 2 / batch_size

    return loss.sum()


# ---- modules/get_parameters.py -------------------------------------------------------------------------------

def get_parameters(model, predicate):
    for module in model.modules():
        for param_name, param in module.named_parameters():
            if predicate(module, param_name):
                yield param


def get_parameters_conv(model, name):
    return get_parameters(model, lambda m, p: isinstance(m, torch.nn.Conv2d) and m.groups == 1 and p == name)


def get_parameters_conv_depthwise(model, name):
    return get_parameters(model, lambda m, p: isinstance(m, torch.nn.Conv2d)
                          and m.groups == m.in_channels
                          and m.in_channels == m.out_channels
                          and p == name)


def get_parameters_bn(model, name):
    return get_parameters(model, lambda m, p: isinstance(m, torch.nn.BatchNorm2d) and p == name)


# ---- train.py ------------------------------------------------------------------------------------------------

def make_optimizer(net, base_lr, bug=None):
    groups = [
        {'params': get_parameters_conv(net.model, 'weight')},
        {'params': get_parameters_conv_depthwise(net.model, 'weight'), 'weight_decay': 0},
        {'params': get_parameters_bn(net.model, 'weight'), 'weight_decay': 0},
        {'params': get_parameters_bn(net.model, 'bias'), 'lr': base_lr * 2, 'weight_decay': 0},
        {'params': get_parameters_conv(net.cpm, 'weight'), 'lr': base_lr},
        {'params': get_parameters_conv(net.cpm, 'bias'), 'lr': base_lr * 2, 'weight_decay': 0},
        {'params': get_parameters_conv_depthwise(net.cpm, 'weight'), 'weight_decay': 0},
        {'params': get_parameters_conv(net.initial_stage, 'weight'), 'lr': base_lr},
        {'params': get_parameters_conv(net.initial_stage, 'bias'), 'lr': base_lr * 2, 'weight_decay': 0},
        {'params': get_parameters_conv(net.refinement_stages, 'weight'), 'lr': base_lr * 4},
        {'params': get_parameters_conv(net.refinement_stages, 'bias'), 'lr': base_lr * 8, 'weight_decay': 0},
        {'params': get_parameters_bn(net.refinement_stages, 'weight'), 'weight_decay': 0},
        {'params': get_parameters_bn(net.refinement_stages, 'bias'), 'lr': base_lr * 2, 'weight_decay': 0},
    ]
    if bug == "refinement_groups_dropped":
        groups = groups[:9]  # the optimizer of a model without refinement stages: the refinement stage never moves
    groups = [dict(g, params=list(g['params'])) for g in groups]
    return optim.Adam(groups, lr=base_lr, weight_decay=5e-4)


def stage_losses(stages_output, batch_data, num_refinement_stages, bug=None):
    images = batch_data['image']
    total_losses = [0, 0] * (num_refinement_stages + 1)  # heatmaps loss, paf loss per stage
    losses = []
    for loss_idx in range(len(total_losses) // 2):
        losses.append(l2_loss(stages_output[loss_idx * 2], batch_data['keypoint_maps'], batch_data['keypoint_mask'],
                              images.shape[0], bug))
        losses.append(l2_loss(stages_output[loss_idx * 2 + 1], batch_data['paf_maps'], batch_data['paf_mask'],
                              images.shape[0], bug))
    loss = losses[0]
    for loss_idx in range(1, len(losses)):
        loss += losses[loss_idx]
    return loss


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    dataset = CocoTrainDataset(make_people(gen, 64), STRIDE, SIGMA, PATH_THICKNESS,
                               swap_left_right=bug != "flip_without_left_right_swap")
    train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0)
    net = net_factory(NUM_REFINEMENT_STAGES)

    optimizer = make_optimizer(net, BASE_LR, bug)
    drop_after_epoch = [100, 200, 260]
    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=drop_after_epoch, gamma=0.333)
    net.train()
    state = {'it': None, 'batch_per_iter_idx': 0}

    def next_batch():
        try:
            return next(state['it'])
        except (StopIteration, TypeError):  # `for epochId in ...: scheduler.step()` then the loader
            scheduler.step()
            state['it'] = iter(train_loader)
            return next(state['it'])

    def train_step():
        while True:
            batch_data = next_batch()
            if state['batch_per_iter_idx'] == 0:
                optimizer.zero_grad()

            stages_output = net(batch_data['image'])
            loss = stage_losses(stages_output, batch_data, NUM_REFINEMENT_STAGES, bug)
            loss /= BATCHES_PER_ITER
            loss.backward()
            state['batch_per_iter_idx'] += 1
            if state['batch_per_iter_idx'] == BATCHES_PER_ITER:
                optimizer.step()
                state['batch_per_iter_idx'] = 0
                return loss.detach()

    def evaluate(model, batch_data):
        model.eval()
        with torch.no_grad():
            loss = stage_losses(model(batch_data['image']), batch_data, NUM_REFINEMENT_STAGES).item()
        model.train()
        return loss

    batch = next(iter(DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="lwpose_coco", model=net, batch=batch,
                   loss_fn=lambda out, b: stage_losses(out, b, NUM_REFINEMENT_STAGES), optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the mask left out of l2_loss: the unannotated (crowd) regions, whose people have no keypoints in the
    # targets, are trained as background.
    Bug("loss_mask_dropped", functools.partial(_build, bug="loss_mask_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: Flip mirrors the image and the keypoints' x but does not swap the left and right keypoints, so half
    # the batches label the left wrist as the right one.
    Bug("flip_without_left_right_swap", functools.partial(_build, bug="flip_without_left_right_swap"),
        "learning_ledger", ("TASK",)),
    # classic: the optimizer's refinement-stage groups left out (the group list of a model without refinement
    # stages): the refinement stage keeps its initialization while its loss is summed in.
    Bug("refinement_groups_dropped", functools.partial(_build, bug="refinement_groups_dropped"), "four_structures",
        ("refinement_stages.0.trunk.0.initial.0.weight",)),
]
