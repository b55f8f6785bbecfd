"""HRNet human pose estimation on MPII, as trained by leoxiaobin/deep-high-resolution-net.pytorch's ``tools/train.py``
with ``experiments/mpii/hrnet/w32_256x256_adam_lr1e-3.yaml``: ``PoseHighResolutionNet`` (parallel multi-resolution
branches fused after every module, one heatmap per joint from the highest-resolution branch; in the helpers
``_hrnetpose_lib.py`` / ``_hrnetpose_net.py``), ``JointsMSELoss`` (half the mean squared error per joint, each joint's
heatmaps multiplied by its visibility weight, averaged over the 16 joints), Adam at 1e-3, ``MultiStepLR`` stepped at
the start of every epoch, top-down crops with random scale, rotation and flip (the data path in the helper
``_hrnetpose_data.py``), and ``validate``'s flip test (the flipped input's heatmaps flipped back, left/right channels
swapped, shifted one pixel and averaged) with the heatmap PCK ``accuracy``.

Source: https://github.com/leoxiaobin/deep-high-resolution-net.pytorch
Commit: 6f69e4676ad8d43d0d61b64b1b9726f0c369e7b1
Files: tools/train.py, lib/core/function.py, lib/core/loss.py, lib/core/evaluate.py, lib/core/inference.py,
lib/utils/utils.py (get_optimizer), lib/config/default.py, experiments/mpii/hrnet/w32_256x256_adam_lr1e-3.yaml
(model and data files in the helpers _hrnetpose_lib.py, _hrnetpose_net.py, _hrnetpose_data.py)
License: MIT (Copyright (c) 2019 Leo Xiao; the files' header: Copyright (c) Microsoft, Licensed under the MIT
License; full text in LICENSES/leoxiaobin-deep-high-resolution-net.pytorch.txt)
Domain: vision, human pose estimation (top-down heatmap regression, HRNet)

Kept as written: ``train``'s loop body (``model.train()`` per epoch, forward, the list-of-outputs branch, ``criterion
(output, target, target_weight)``, zero_grad / backward / step, ``accuracy`` on the detached heatmaps), ``main``'s
epoch loop (``lr_scheduler.step()`` before ``train``, then ``validate``), ``JointsMSELoss``, ``get_optimizer``'s
``adam`` branch, ``MultiStepLR(LR_STEP [170, 200], LR_FACTOR 0.1)``, ``validate``'s forward / flip test / loss /
``accuracy`` under ``eval()`` and ``no_grad``, ``get_max_preds``, ``calc_dists``, ``dist_acc``, ``accuracy``; the
yaml's dataset, loss and training settings other than the sizes below.

Deviations from the original:
- sizes for 2 CPU cores: ``IMAGE_SIZE`` 256x256 -> 64x64 and ``HEATMAP_SIZE`` 64x64 -> 16x16 (the same 1/4),
  ``SIGMA`` 2 -> 1 (the heatmap is a quarter as wide); stage widths 32/64/128/256 -> 4/8/16/32, ``NUM_BLOCKS`` 4 -> 1,
  ``NUM_MODULES`` of stages 3 and 4 4 / 3 -> 1, the stem and ``layer1`` / 8 (see the helper);
  ``BATCH_SIZE_PER_GPU`` 32 on 4 GPUs -> 16 on one; ``TEST.BATCH_SIZE_PER_GPU`` 32 -> 16; ``END_EPOCH`` 210 kept;
- data: MPII is replaced by synthetic front-facing stick figures made from ``seed`` (128 training and 32 validation
  images of 96x96): the 16 MPII joints of a jittered, scaled and rotated template, limbs drawn in grey and each joint
  a disc whose colour names its part (ankle, knee, hip, ... the same colour for the left and the right one, so left
  and right are told apart by the side of the body, as in real images); about 1 in 12 joints unannotated (visibility
  0, not drawn); annotations in MPII's json form (1-based ``joints``, ``joints_vis``, ``center``, ``scale`` = person
  height / 200 with the centre written 15 x scale above the body as MPII's are);
- ``torchvision.transforms`` ``ToTensor`` + ``Normalize`` are written out; no DataParallel / CUDA (``.cuda()`` calls
  dropped), no tensorboard, logger, debug images, checkpoints or auto-resume; ``WORKERS`` 0, no ``pin_memory``;
- ``validate``: the MPII PCKh evaluation (``get_final_preds`` back to image coordinates and ``val_dataset.evaluate``
  against the ``.mat`` ground truth) is not ported: its ``perf_indicator`` is the averaged heatmap ``accuracy`` the
  function also computes;
- one ``train_step`` is one iteration of ``train``'s batch loop; the epoch's ``lr_scheduler.step()`` and
  ``model.train()`` run before its first batch and ``validate`` after its last; ``eval_fn`` is ``validate``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, UP034, RUF059

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _hrnetpose_data
from _api import Bug, Program
from _hrnetpose_data import MPIIDataset, flip_back
from _hrnetpose_net import get_pose_net


class CfgNode(dict):
    """(port) yacs' CfgNode, attribute and key access."""
    __getattr__ = dict.__getitem__


def _stage(modules, branches, channels):
    return CfgNode(NUM_MODULES=modules, NUM_BRANCHES=branches, BLOCK='BASIC', NUM_BLOCKS=[1] * branches,
                   NUM_CHANNELS=channels, FUSE_METHOD='SUM')


cfg = CfgNode(
    DATASET=CfgNode(COLOR_RGB=True, DATASET='mpii', FLIP=True, NUM_JOINTS_HALF_BODY=8, PROB_HALF_BODY=-1.0,
                    ROT_FACTOR=30, SCALE_FACTOR=0.25, TEST_SET='valid', TRAIN_SET='train'),
    MODEL=CfgNode(INIT_WEIGHTS=True, NAME='pose_hrnet', NUM_JOINTS=16, PRETRAINED='', TARGET_TYPE='gaussian',
                  IMAGE_SIZE=[64, 64], HEATMAP_SIZE=[16, 16], SIGMA=1,
                  EXTRA=CfgNode(FINAL_CONV_KERNEL=1, STAGE2=_stage(1, 2, [4, 8]), STAGE3=_stage(1, 3, [4, 8, 16]),
                                STAGE4=_stage(1, 4, [4, 8, 16, 32]), PRETRAINED_LAYERS=['*'])),
    LOSS=CfgNode(USE_TARGET_WEIGHT=True, USE_DIFFERENT_JOINTS_WEIGHT=False),
    TRAIN=CfgNode(BATCH_SIZE_PER_GPU=16, SHUFFLE=True, BEGIN_EPOCH=0, END_EPOCH=210, OPTIMIZER='adam', LR=0.001,
                  LR_FACTOR=0.1, LR_STEP=[170, 200], WD=0.0001, MOMENTUM=0.9, NESTEROV=False),
    TEST=CfgNode(BATCH_SIZE_PER_GPU=16, FLIP_TEST=True, POST_PROCESS=True, SHIFT_HEATMAP=True),
    GPUS=(0,), WORKERS=0)


# ---- lib/core/loss.py -------------------------------------------------------------------------------------------

class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight, bug=None):
        super(JointsMSELoss, self).__init__()
        self.criterion = nn.MSELoss(reduction='mean')
        self.use_target_weight = use_target_weight
        self.bug = bug  # (port) the variant being built

    def forward(self, output, target, target_weight):
        batch_size = output.size(0)
        num_joints = output.size(1)
        if self.bug == "heatmaps_reshaped_joints_first":  # [B, J, ...] read as [J, B, ...]: joints and images mixed
            heatmaps_pred = output.reshape((num_joints, batch_size, -1)).transpose(0, 1).split(1, 1)
        else:
            heatmaps_pred = output.reshape((batch_size, num_joints, -1)).split(1, 1)
        heatmaps_gt = target.reshape((batch_size, num_joints, -1)).split(1, 1)
        loss = 0

        for idx in range(num_joints):
            heatmap_pred = heatmaps_pred[idx].squeeze()
            heatmap_gt = heatmaps_gt[idx].squeeze()
            if self.use_target_weight:
                loss += 0.5 * self.criterion(
                    heatmap_pred.mul(target_weight[:, idx]),
                    heatmap_gt.mul(target_weight[:, idx])
                )
            else:
                loss += 0.5 * self.criterion(heatmap_pred, heatmap_gt)

        return loss / num_joints


# ---- lib/core/inference.py, lib/core/evaluate.py ----------------------------------------------------------------

def get_max_preds(batch_heatmaps):
    '''
    get predictions from score maps
    heatmaps: numpy.ndarray([batch_size, num_joints, height, width])
    '''
    assert isinstance(batch_heatmaps, np.ndarray), \
        'batch_heatmaps should be numpy.ndarray'
    assert batch_heatmaps.ndim == 4, 'batch_images should be 4-ndim'

    batch_size = batch_heatmaps.shape[0]
    num_joints = batch_heatmaps.shape[1]
    width = batch_heatmaps.shape[3]
    heatmaps_reshaped = batch_heatmaps.reshape((batch_size, num_joints, -1))
    idx = np.argmax(heatmaps_reshaped, 2)
    maxvals = np.amax(heatmaps_reshaped, 2)

    maxvals = maxvals.reshape((batch_size, num_joints, 1))
    idx = idx.reshape((batch_size, num_joints, 1))

    preds = np.tile(idx, (1, 1, 2)).astype(np.float32)

    preds[:, :, 0] = (preds[:, :, 0]) % width
    preds[:, :, 1] = np.floor((preds[:, :, 1]) / width)

    pred_mask = np.tile(np.greater(maxvals, 0.0), (1, 1, 2))
    pred_mask = pred_mask.astype(np.float32)

    preds *= pred_mask
    return preds, maxvals


def calc_dists(preds, target, normalize):
    preds = preds.astype(np.float32)
    target = target.astype(np.float32)
    dists = np.zeros((preds.shape[1], preds.shape[0]))
    for n in range(preds.shape[0]):
        for c in range(preds.shape[1]):
            if target[n, c, 0] > 1 and target[n, c, 1] > 1:
                normed_preds = preds[n, c, :] / normalize[n]
                normed_targets = target[n, c, :] / normalize[n]
                dists[c, n] = np.linalg.norm(normed_preds - normed_targets)
            else:
                dists[c, n] = -1
    return dists


def dist_acc(dists, thr=0.5):
    ''' Return percentage below threshold while ignoring values with a -1 '''
    dist_cal = np.not_equal(dists, -1)
    num_dist_cal = dist_cal.sum()
    if num_dist_cal > 0:
        return np.less(dists[dist_cal], thr).sum() * 1.0 / num_dist_cal
    else:
        return -1


def accuracy(output, target, hm_type='gaussian', thr=0.5):
    '''
    Calculate accuracy according to PCK,
    but uses ground truth heatmap rather than x,y locations
    First value to be returned is average accuracy across 'idxs',
    followed by individual accuracies
    '''
    idx = list(range(output.shape[1]))
    norm = 1.0
    if hm_type == 'gaussian':
        pred, _ = get_max_preds(output)
        target, _ = get_max_preds(target)
        h = output.shape[2]
        w = output.shape[3]
        norm = np.ones((pred.shape[0], 2)) * np.array([h, w]) / 10
    dists = calc_dists(pred, target, norm)

    acc = np.zeros((len(idx) + 1))
    avg_acc = 0
    cnt = 0

    for i in range(len(idx)):
        acc[i + 1] = dist_acc(dists[idx[i]])
        if acc[i + 1] >= 0:
            avg_acc = avg_acc + acc[i + 1]
            cnt += 1

    avg_acc = avg_acc / cnt if cnt != 0 else 0
    if cnt != 0:
        acc[0] = avg_acc
    return acc, avg_acc, cnt, pred


# ---- the synthetic MPII (port) ------------------------------------------------------------------------------------

# MPII's 16 joints of a front-facing figure (its right side on the image's left), pelvis at 0, height 1, y down
_TEMPLATE = np.array([[-.12, .5], [-.1, .27], [-.08, .03], [.08, .03], [.1, .27], [.12, .5], [0, 0], [0, -.28],
                      [0, -.34], [0, -.48], [-.28, .02], [-.22, -.12], [-.13, -.27], [.13, -.27], [.22, -.12],
                      [.28, .02]])
_PART = [0, 1, 2, 2, 1, 0, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7]  # ankle, knee, hip, pelvis, thorax, neck, head, wrist, ...


def _synthetic_mpii(rng, n, split, colours):
    """(port) Stick figures and their MPII-style annotations (1-based coordinates, centre 15 x scale above)."""
    parent_ids = [1, 2, 6, 6, 3, 4, 6, 6, 7, 8, 11, 12, 7, 7, 13, 14]
    anno = []
    for k in range(n):
        height, rot = rng.uniform(45, 65), np.deg2rad(rng.uniform(-15, 15))
        rmat = np.array([[np.cos(rot), -np.sin(rot)], [np.sin(rot), np.cos(rot)]])
        body = (_TEMPLATE + rng.normal(0, 0.03, size=_TEMPLATE.shape)) @ rmat.T * height
        joints = body + np.array([48, 46]) + rng.uniform(-8, 8, size=2)
        vis = (rng.rand(16) > 1 / 12).astype(np.int64)
        img = Image.fromarray(rng.randint(40, 110, size=(96, 96, 3)).astype(np.uint8), 'RGB')
        draw = ImageDraw.Draw(img)
        for j, p in enumerate(parent_ids):
            if p != j:
                draw.line([tuple(joints[j]), tuple(joints[p])], fill=(150, 150, 150), width=2)
        for j in range(16):
            if vis[j]:
                x, y = joints[j]
                draw.ellipse([x - 2.5, y - 2.5, x + 2.5, y + 2.5], fill=tuple(int(v) for v in colours[_PART[j]]))
        name = f'{split}/{k:05d}.jpg'
        _hrnetpose_data.IMAGES[name] = np.asarray(img)
        scale = height * 1.1 / 200
        centre = (joints.min(0) + joints.max(0)) / 2 - np.array([0, 15 * scale])
        anno.append({'image': name, 'center': (centre + 1).tolist(), 'scale': scale,
                     'joints': (joints + 1).tolist(), 'joints_vis': vis.tolist()})
    return anno


def _to_tensor_normalize(input):
    """(port) transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])."""
    x = torch.from_numpy(np.ascontiguousarray(input)).permute(2, 0, 1).float().div(255)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    return (x - mean[:, None, None]) / std[:, None, None]


# ---- lib/core/function.py, tools/train.py -------------------------------------------------------------------------

def train_batch(model, criterion, optimizer, batch, bug=None):
    """The body of ``train``'s ``for i, (input, target, target_weight, meta) in enumerate(train_loader)`` loop."""
    input, target, target_weight, meta = batch
    # compute output
    outputs = model(input)

    if isinstance(outputs, list):
        loss = criterion(outputs[0], target, target_weight)
        for output in outputs[1:]:
            loss += criterion(output, target, target_weight)
    else:
        output = outputs
        loss = criterion(output, target, target_weight)

    # compute gradient and do update step
    if bug != "no_zero_grad":  # the variant never clears the gradients
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    # measure accuracy and record loss
    _, avg_acc, cnt, pred = accuracy(output.detach().cpu().numpy(),
                                     target.detach().cpu().numpy())
    return loss.item()


def validate(config, val_loader, val_dataset, model, criterion):
    # switch to evaluate mode
    model.eval()
    losses, accs = [], []
    with torch.no_grad():
        for i, (input, target, target_weight, meta) in enumerate(val_loader):
            # compute output
            outputs = model(input)
            output = outputs[-1] if isinstance(outputs, list) else outputs

            if config.TEST.FLIP_TEST:
                input_flipped = input.flip(3)
                outputs_flipped = model(input_flipped)
                output_flipped = outputs_flipped[-1] if isinstance(outputs_flipped, list) else outputs_flipped

                output_flipped = flip_back(output_flipped.cpu().numpy(),
                                           val_dataset.flip_pairs)
                output_flipped = torch.from_numpy(output_flipped.copy())

                # feature is not aligned, shift flipped heatmap for higher accuracy
                if config.TEST.SHIFT_HEATMAP:
                    output_flipped[:, :, :, 1:] = \
                        output_flipped.clone()[:, :, :, 0:-1]

                output = (output + output_flipped) * 0.5

            loss = criterion(output, target, target_weight)
            _, avg_acc, cnt, pred = accuracy(output.cpu().numpy(),
                                             target.cpu().numpy())
            losses.append(loss.item())
            accs.append((avg_acc, cnt))
    # (port) perf_indicator: the heatmap accuracy averaged over the joints counted (the PCKh evaluation not ported)
    return sum(a * c for a, c in accs) / max(1, sum(c for _, c in accs))


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    colours = rng.permutation(np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                                        [145, 30, 180], [70, 240, 240], [240, 50, 230], [250, 190, 212],
                                        [255, 255, 255]]))

    model = get_pose_net(cfg, is_train=True)
    criterion = JointsMSELoss(use_target_weight=cfg.LOSS.USE_TARGET_WEIGHT, bug=bug)
    train_dataset = MPIIDataset(cfg, _synthetic_mpii(rng, 128, 'train', colours), cfg.DATASET.TRAIN_SET, True,
                                _to_tensor_normalize, bug=bug)
    valid_dataset = MPIIDataset(cfg, _synthetic_mpii(rng, 32, 'valid', colours), cfg.DATASET.TEST_SET, False,
                                _to_tensor_normalize, bug=bug)
    train_loader = DataLoader(train_dataset, batch_size=cfg.TRAIN.BATCH_SIZE_PER_GPU*len(cfg.GPUS),
                              shuffle=cfg.TRAIN.SHUFFLE, num_workers=cfg.WORKERS)
    valid_loader = DataLoader(valid_dataset, batch_size=cfg.TEST.BATCH_SIZE_PER_GPU*len(cfg.GPUS), shuffle=False,
                              num_workers=cfg.WORKERS)

    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.TRAIN.LR)  # get_optimizer's 'adam' branch
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, cfg.TRAIN.LR_STEP, cfg.TRAIN.LR_FACTOR,
                                                        last_epoch=-1)
    st = {"epoch": cfg.TRAIN.BEGIN_EPOCH, "it": None, "i": 0}

    def train_step():
        if st["it"] is None:  # for epoch in range(begin_epoch, END_EPOCH): lr_scheduler.step(); train(...)
            lr_scheduler.step()
            model.train()
            st["it"], st["i"] = iter(train_loader), 0
        loss = train_batch(model, criterion, optimizer, next(st["it"]), bug=bug)
        st["i"] += 1
        if st["i"] == len(train_loader):  # the epoch ends: evaluate on validation set
            validate(cfg, valid_loader, valid_dataset, model, criterion)
            st["epoch"], st["it"] = st["epoch"] + 1, None
        return loss

    def eval_fn(m, _batch=None):
        return validate(cfg, valid_loader, valid_dataset, m, criterion)

    def loss_fn(output, targets):
        return criterion(output, *targets)

    input0, target0, weight0, _ = next(iter(DataLoader(train_dataset, batch_size=16)))
    return Program(name="hrnet_pose_mpii", model=model, batch=(input0, (target0, weight0)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the horizontal flip mirrors the x coordinates but keeps the left/right joint labels, so on half the
    # training crops every left joint's heatmap sits on the right limb and the reverse.
    Bug("flip_pairs_not_swapped", functools.partial(_build, bug="flip_pairs_not_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: the [B, J, H, W] heatmaps reshaped as [J, B, H*W] in the loss, so each joint's target is compared
    # with other images' and other joints' predictions.
    Bug("heatmaps_reshaped_joints_first", functools.partial(_build, bug="heatmaps_reshaped_joints_first"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() left out of the loop: gradients add up over every step.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
