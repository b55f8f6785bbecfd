"""Simple Baselines for human pose estimation (Microsoft's ``human-pose-estimation.pytorch``) as its MPII
experiment trains it (``experiments/mpii/resnet50/256x256_d256x3_adam_lr1e-3.yaml``): ``PoseResNet`` (a ResNet
backbone, three stride-2 4x4 deconvolutions with batch norm and ReLU, a 1x1 conv to one heatmap per joint) regresses
Gaussian joint heatmaps made by ``JointsDataset.generate_target`` (sigma 2, target_weight 0 for invisible joints)
under ``JointsMSELoss(use_target_weight=True)``, with Adam (lr 1e-3), ``MultiStepLR`` (90, 120; x0.1) stepped at
the start of each epoch, horizontal-flip augmentation through ``fliplr_joints`` (left/right joints swapped by
``flip_pairs``), and the PCK ``accuracy`` of ``core/evaluate.py``.

Source: https://github.com/microsoft/human-pose-estimation.pytorch
Commit: 49f3f4458c9d5917c75c37a6db48c6a0d7cd89a1
Files: pose_estimation/train.py, lib/core/function.py, lib/core/loss.py, lib/core/evaluate.py,
  lib/core/inference.py, lib/models/pose_resnet.py, lib/dataset/JointsDataset.py, lib/dataset/mpii.py,
  lib/utils/transforms.py, lib/utils/utils.py, experiments/mpii/resnet50/256x256_d256x3_adam_lr1e-3.yaml
License: MIT (Copyright (c) Microsoft Corporation; LICENSES/microsoft-human-pose-estimation.pytorch.txt)
Domain: keypoint detection (top-down heatmap regression, deconvolution head, target-weighted MSE)

Deviations from the original:
- sizes: IMAGE_SIZE 256x256 -> 64x64 and HEATMAP_SIZE 64x64 -> 16x16 (stride 4 kept); NUM_JOINTS 16 -> 6 (MPII's
  legs: r-ankle, r-knee, r-hip, l-hip, l-knee, l-ankle, flip_pairs [[0, 5], [1, 4], [2, 3]]); ResNet-50
  (Bottleneck [3, 4, 6, 3], widths 64/128/256/512, stem 64) -> Bottleneck [1, 1, 1, 1] with widths 8/16/32/64 and
  stem 8 (the constants in ``PoseResNet.__init__`` scaled; a ``width`` divisor added); NUM_DECONV_FILTERS 256 -> 32;
  batch 32 -> 8; END_EPOCH 140 and LR_STEP unchanged;
- ``init_weights``: the ImageNet checkpoint does not exist here (the original raises without it); the deconv and
  final-layer initialisation it does before loading (normal std 0.001, BN 1/0) is applied and the load skipped;
  ``torch.nn.DataParallel``, ``.cuda()``, the tensorboard writer, the model-file copy and checkpoints are left out;
- data: MPII is replaced by synthetic 64x64 images made from ``seed``: each of the three left/right joint pairs has
  its own colour, the right joint lies in the image's left half and its left twin in the right half (so a flipped
  image is again a valid person once ``fliplr_joints`` swaps the pair), each joint drawn as a small Gaussian blob on
  a noisy background, 15% of the joints invisible (not drawn, joints_vis 0); 128 training and 16 validation
  images. cv2 is not available: ``cv2.imread`` is replaced by the generated array and the scale/rotation
  ``get_affine_transform`` + ``cv2.warpAffine`` crop is left out (the image already is the crop: the affine map is
  the identity); the flip (``data_numpy[:, ::-1, :]`` + ``fliplr_joints``) and ``generate_target`` are copied;
  ``transforms.ToTensor()`` + ``Normalize`` are written out in numpy/torch; ``meta`` is not returned;
- one ``train_step`` is one iteration of ``train()``'s batch loop (forward, ``JointsMSELoss``, zero_grad, backward,
  step); the ``lr_scheduler.step()`` and ``model.train()`` run when an epoch starts; the AverageMeters, logging and
  debug images are left out; ``eval_fn`` is ``accuracy``'s average PCK on a given batch (``eval()``, no gradients);
- ``nn.MSELoss(size_average=True)`` (deprecated) is written ``reduction='mean'``, its documented equivalent;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, SIM102, UP008, UP034  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BN_MOMENTUM = 0.1
N_TRAIN = 128
N_VAL = 16
WIDTH = 8  # ResNet-50's widths divided by 8


# ---- lib/models/pose_resnet.py -------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, kernel_size=1,
                               bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion,
                                  momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class PoseResNet(nn.Module):

    def __init__(self, block, layers, cfg, **kwargs):
        self.inplanes = 64 // WIDTH
        extra = cfg.MODEL.EXTRA
        self.deconv_with_bias = extra.DECONV_WITH_BIAS

        super(PoseResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 64 // WIDTH, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(64 // WIDTH, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64 // WIDTH, layers[0])
        self.layer2 = self._make_layer(block, 128 // WIDTH, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256 // WIDTH, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512 // WIDTH, layers[3], stride=2)

        # used for deconv layers
        self.deconv_layers = self._make_deconv_layer(
            extra.NUM_DECONV_LAYERS,
            extra.NUM_DECONV_FILTERS,
            extra.NUM_DECONV_KERNELS,
        )

        self.final_layer = nn.Conv2d(
            in_channels=extra.NUM_DECONV_FILTERS[-1],
            out_channels=cfg.MODEL.NUM_JOINTS,
            kernel_size=extra.FINAL_CONV_KERNEL,
            stride=1,
            padding=1 if extra.FINAL_CONV_KERNEL == 3 else 0
        )

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion, momentum=BN_MOMENTUM),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def _get_deconv_cfg(self, deconv_kernel, index):
        if deconv_kernel == 4:
            padding = 1
            output_padding = 0
        elif deconv_kernel == 3:
            padding = 1
            output_padding = 1
        elif deconv_kernel == 2:
            padding = 0
            output_padding = 0

        return deconv_kernel, padding, output_padding

    def _make_deconv_layer(self, num_layers, num_filters, num_kernels):
        assert num_layers == len(num_filters), \
            'ERROR: num_deconv_layers is different len(num_deconv_filters)'
        assert num_layers == len(num_kernels), \
            'ERROR: num_deconv_layers is different len(num_deconv_filters)'

        layers = []
        for i in range(num_layers):
            kernel, padding, output_padding = \
                self._get_deconv_cfg(num_kernels[i], i)

            planes = num_filters[i]
            layers.append(
                nn.ConvTranspose2d(
                    in_channels=self.inplanes,
                    out_channels=planes,
                    kernel_size=kernel,
                    stride=2,
                    padding=padding,
                    output_padding=output_padding,
                    bias=self.deconv_with_bias))
            layers.append(nn.BatchNorm2d(planes, momentum=BN_MOMENTUM))
            layers.append(nn.ReLU(inplace=True))
            self.inplanes = planes

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.deconv_layers(x)
        x = self.final_layer(x)

        return x

    def init_weights(self, pretrained=''):
        # the deconv / final layer initialisation of init_weights; the ImageNet checkpoint load is skipped
        for name, m in self.deconv_layers.named_modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, std=0.001)
                if self.deconv_with_bias:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        for m in self.final_layer.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.001)
                nn.init.constant_(m.bias, 0)


resnet_spec = {50: (Bottleneck, [1, 1, 1, 1])}


def get_pose_net(cfg, is_train, **kwargs):
    num_layers = cfg.MODEL.EXTRA.NUM_LAYERS

    block_class, layers = resnet_spec[num_layers]

    model = PoseResNet(block_class, layers, cfg, **kwargs)

    if is_train and cfg.MODEL.INIT_WEIGHTS:
        model.init_weights(cfg.MODEL.PRETRAINED)

    return model


# ---- lib/core/loss.py ----------------------------------------------------------------------------------------

class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight):
        super(JointsMSELoss, self).__init__()
        self.criterion = nn.MSELoss(reduction='mean')
        self.use_target_weight = use_target_weight

    def forward(self, output, target, target_weight):
        batch_size = output.size(0)
        num_joints = output.size(1)
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


# ---- lib/core/inference.py, lib/core/evaluate.py -------------------------------------------------------------

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


# ---- lib/utils/transforms.py ---------------------------------------------------------------------------------

def fliplr_joints(joints, joints_vis, width, matched_parts):
    """
    flip coords
    """
    # Flip horizontal
    joints[:, 0] = width - joints[:, 0] - 1

    # Change left-right parts
    for pair in matched_parts:
        joints[pair[0], :], joints[pair[1], :] = \
            joints[pair[1], :], joints[pair[0], :].copy()
        joints_vis[pair[0], :], joints_vis[pair[1], :] = \
            joints_vis[pair[1], :], joints_vis[pair[0], :].copy()

    return joints*joints_vis, joints_vis


# ---- lib/dataset/JointsDataset.py + mpii.py (on a synthetic db) -----------------------------------------------

PAIR_COLOURS = np.array([[230, 40, 40], [40, 230, 40], [40, 40, 230]], dtype=np.float64)


def make_db(rs, n, num_joints, size):
    """Synthetic people: pair p (joints p and 5 - p) has colour p; the right joint in the left half, its twin in
    the right half; each joint a Gaussian blob (sigma 1.5 px) on a noisy dark background; 15% invisible."""
    yy, xx = np.mgrid[0:size, 0:size]
    db = []
    for _ in range(n):
        joints = np.zeros((num_joints, 3), dtype=np.float64)
        joints_vis = np.zeros((num_joints, 3), dtype=np.float64)
        img = rs.uniform(0, 40, (size, size, 3))
        for p in range(num_joints // 2):
            for j, (lo, hi) in ((p, (4, size // 2 - 4)), (num_joints - 1 - p, (size // 2 + 4, size - 4))):
                x, y = rs.uniform(lo, hi), rs.uniform(4, size - 4)
                joints[j, :2] = (x, y)
                if rs.rand() < 0.85:
                    joints_vis[j, :2] = 1
                    blob = np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * 1.5 ** 2))
                    img = img + blob[..., None] * PAIR_COLOURS[p]
        db.append({'image': np.clip(img, 0, 255).astype(np.uint8), 'joints_3d': joints,
                   'joints_3d_vis': joints_vis})
    return db


class MPIIDataset(Dataset):
    def __init__(self, cfg, db, is_train, bug=None):
        self.num_joints = cfg.MODEL.NUM_JOINTS
        self.flip_pairs = [[0, 5], [1, 4], [2, 3]]
        self.is_train = is_train
        self.flip = cfg.DATASET.FLIP
        self.image_size = np.array(cfg.MODEL.IMAGE_SIZE)
        self.target_type = cfg.MODEL.EXTRA.TARGET_TYPE
        self.heatmap_size = np.array(cfg.MODEL.EXTRA.HEATMAP_SIZE)
        self.sigma = cfg.MODEL.EXTRA.SIGMA
        self.db = db
        self.bug = bug
        self.mean = np.array([0.485, 0.456, 0.406])
        self.std = np.array([0.229, 0.224, 0.225])

    def __len__(self,):
        return len(self.db)

    def __getitem__(self, idx):
        db_rec = copy.deepcopy(self.db[idx])

        data_numpy = db_rec['image']

        joints = db_rec['joints_3d']
        joints_vis = db_rec['joints_3d_vis']

        if self.is_train:
            if self.flip and random.random() <= 0.5:
                data_numpy = data_numpy[:, ::-1, :]
                if self.bug == "flip_pairs_not_swapped":
                    joints[:, 0] = data_numpy.shape[1] - joints[:, 0] - 1
                else:
                    joints, joints_vis = fliplr_joints(
                        joints, joints_vis, data_numpy.shape[1], self.flip_pairs)

        # the affine crop is the identity here (the image already is the 64x64 crop)
        input = data_numpy
        # transforms.ToTensor(), normalize
        input = torch.from_numpy(((input / 255.0 - self.mean) / self.std).transpose(2, 0, 1).copy()).float()

        target, target_weight = self.generate_target(joints, joints_vis)

        target = torch.from_numpy(target)
        target_weight = torch.from_numpy(target_weight)

        return input, target, target_weight

    def generate_target(self, joints, joints_vis):
        '''
        :param joints:  [num_joints, 3]
        :param joints_vis: [num_joints, 3]
        :return: target, target_weight(1: visible, 0: invisible)
        '''
        target_weight = np.ones((self.num_joints, 1), dtype=np.float32)
        target_weight[:, 0] = joints_vis[:, 0]

        assert self.target_type == 'gaussian', \
            'Only support gaussian map now!'

        if self.target_type == 'gaussian':
            target = np.zeros((self.num_joints,
                               self.heatmap_size[1],
                               self.heatmap_size[0]),
                              dtype=np.float32)

            tmp_size = self.sigma * 3

            for joint_id in range(self.num_joints):
                feat_stride = self.image_size / self.heatmap_size
                if self.bug == "heatmap_xy_swapped":
                    mu_x = int(joints[joint_id][1] / feat_stride[1] + 0.5)
                    mu_y = int(joints[joint_id][0] / feat_stride[0] + 0.5)
                else:
                    mu_x = int(joints[joint_id][0] / feat_stride[0] + 0.5)
                    mu_y = int(joints[joint_id][1] / feat_stride[1] + 0.5)
                # Check that any part of the gaussian is in-bounds
                ul = [int(mu_x - tmp_size), int(mu_y - tmp_size)]
                br = [int(mu_x + tmp_size + 1), int(mu_y + tmp_size + 1)]
                if ul[0] >= self.heatmap_size[0] or ul[1] >= self.heatmap_size[1] \
                        or br[0] < 0 or br[1] < 0:
                    # If not, just return the image as is
                    target_weight[joint_id] = 0
                    continue

                # # Generate gaussian
                size = 2 * tmp_size + 1
                x = np.arange(0, size, 1, np.float32)
                y = x[:, np.newaxis]
                x0 = y0 = size // 2
                # The gaussian is not normalized, we want the center value to equal 1
                g = np.exp(- ((x - x0) ** 2 + (y - y0) ** 2) / (2 * self.sigma ** 2))

                # Usable gaussian range
                g_x = max(0, -ul[0]), min(br[0], self.heatmap_size[0]) - ul[0]
                g_y = max(0, -ul[1]), min(br[1], self.heatmap_size[1]) - ul[1]
                # Image range
                img_x = max(0, ul[0]), min(br[0], self.heatmap_size[0])
                img_y = max(0, ul[1]), min(br[1], self.heatmap_size[1])

                v = target_weight[joint_id]
                if v > 0.5:
                    target[joint_id][img_y[0]:img_y[1], img_x[0]:img_x[1]] = \
                        g[g_y[0]:g_y[1], g_x[0]:g_x[1]]

        return target, target_weight


# ---- pose_estimation/train.py + lib/core/function.py (train) -------------------------------------------------

def _ns(**kw):
    return SimpleNamespace(**kw)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    config = _ns(
        DATASET=_ns(DATASET='mpii', FLIP=True, ROT_FACTOR=30, SCALE_FACTOR=0.25),
        MODEL=_ns(NAME='pose_resnet', INIT_WEIGHTS=True, PRETRAINED='models/pytorch/imagenet/resnet50-19c8e357.pth',
                  IMAGE_SIZE=[64, 64], NUM_JOINTS=6,
                  EXTRA=_ns(TARGET_TYPE='gaussian', SIGMA=2, HEATMAP_SIZE=[16, 16], FINAL_CONV_KERNEL=1,
                            DECONV_WITH_BIAS=False, NUM_DECONV_LAYERS=3, NUM_DECONV_FILTERS=[32, 32, 32],
                            NUM_DECONV_KERNELS=[4, 4, 4], NUM_LAYERS=50)),
        LOSS=_ns(USE_TARGET_WEIGHT=True),
        TRAIN=_ns(BATCH_SIZE=8, SHUFFLE=True, BEGIN_EPOCH=0, END_EPOCH=140, OPTIMIZER='adam', LR=0.001,
                  LR_FACTOR=0.1, LR_STEP=[90, 120], WD=0.0001, GAMMA1=0.99, GAMMA2=0.0, MOMENTUM=0.9,
                  NESTEROV=False),
        TEST=_ns(BATCH_SIZE=16, FLIP_TEST=False))

    model = get_pose_net(config, is_train=True)

    # define loss function (criterion) and optimizer
    criterion = JointsMSELoss(
        use_target_weight=config.LOSS.USE_TARGET_WEIGHT
    )

    optimizer = torch.optim.Adam(model.parameters(), lr=config.TRAIN.LR)  # get_optimizer(config, model): 'adam'

    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, config.TRAIN.LR_STEP, config.TRAIN.LR_FACTOR
    )

    rs = np.random.RandomState(seed)
    train_dataset = MPIIDataset(config, make_db(rs, N_TRAIN, 6, 64), True, bug=bug)
    valid_dataset = MPIIDataset(config, make_db(rs, N_VAL, 6, 64), False, bug=bug)
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=config.TRAIN.BATCH_SIZE,
        shuffle=config.TRAIN.SHUFFLE,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed),
    )

    state = {"it": None, "epoch": config.TRAIN.BEGIN_EPOCH - 1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["epoch"] += 1
            lr_scheduler.step()
            # train for one epoch: switch to train mode
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target, target_weight = next_batch()

        # compute output
        output = model(input)

        loss = criterion(output, target, target_weight)

        # compute gradient and do update step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        input, (target, _target_weight) = batch
        model.eval()
        with torch.no_grad():
            output = model(input)
        model.train()
        _, avg_acc, _cnt, _pred = accuracy(output.cpu().numpy(), target.cpu().numpy())
        return float(avg_acc)

    first_input, first_target, first_weight = next(iter(DataLoader(valid_dataset, batch_size=config.TEST.BATCH_SIZE)))
    return Program(name="simplebaseline_pose", model=model, batch=(first_input, (first_target, first_weight)),
                   loss_fn=lambda output, targets: criterion(output, *targets), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the flip augmentation mirrors the x coordinates but keeps the joint ids: after a flip the "right ankle" heatmap
    # sits on the left ankle, so half the training labels swap each left/right pair (classic: the flip_pairs
    # swap of fliplr_joints left out).
    Bug("flip_pairs_not_swapped", functools.partial(_build, bug="flip_pairs_not_swapped"), "learning_ledger",
        ("TASK",)),
    # generate_target reads the joint's x as the heatmap row and its y as the column: every Gaussian lands at the
    # transposed position (classic coordinate-order slip).
    Bug("heatmap_xy_swapped", functools.partial(_build, bug="heatmap_xy_swapped"), "learning_ledger", ("TASK",)),
]
