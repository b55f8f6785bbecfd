"""Daniil-Osokin/lightweight-human-pose-estimation.pytorch's network and training targets, for ``lwpose_coco`` (moved
out of the port to keep it readable): ``modules/conv.py`` (``conv``, ``conv_dw``, ``conv_dw_no_bn``),
``models/with_mobilenet.py`` (``Cpm``, ``InitialStage``, ``RefinementStageBlock``, ``RefinementStage``,
``PoseEstimationWithMobileNet``), ``datasets/coco.py``'s ``CocoTrainDataset`` target generation (``_add_gaussian``,
``_generate_keypoint_maps``, ``_set_paf``, ``_generate_paf_maps``, the masks and the image scaling) and
``datasets/transformations.py``'s ``Flip``, plus the synthetic stick figures that replace COCO.

Source: https://github.com/Daniil-Osokin/lightweight-human-pose-estimation.pytorch
Commit: d23c284b09acf27a163e1febd511e7482cac25ed
Files: modules/conv.py, models/with_mobilenet.py, datasets/coco.py, datasets/transformations.py
License: Apache-2.0 (the repository of Daniil Osokin; its LICENSE carries no copyright line)
Domain: human pose estimation (bottom-up: keypoint heatmaps and part affinity fields)

Deviations from the original: see ``lwpose_coco.py`` (widths divided by 8, images as in-memory arrays with labels
already in the prepared-annotation form, no cv2 / pycocotools).
"""
# ruff: noqa: PLR1704, PLR1730  (the original's code style is kept)

from __future__ import annotations

import copy
import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data.dataset import Dataset

W = 8  # the width divisor
BODY_PARTS_KPT_IDS = [[1, 8], [8, 9], [9, 10], [1, 11], [11, 12], [12, 13], [1, 2], [2, 3], [3, 4], [2, 16],
                      [1, 5], [5, 6], [6, 7], [5, 17], [1, 0], [0, 14], [0, 15], [14, 16], [15, 17]]
IMG = 128


# ---- modules/conv.py -----------------------------------------------------------------------------------------

def conv(in_channels, out_channels, kernel_size=3, padding=1, bn=True, dilation=1, stride=1, relu=True, bias=True):
    modules = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, bias=bias)]
    if bn:
        modules.append(nn.BatchNorm2d(out_channels))
    if relu:
        modules.append(nn.ReLU(inplace=True))
    return nn.Sequential(*modules)


def conv_dw(in_channels, out_channels, kernel_size=3, padding=1, stride=1, dilation=1):
    return nn.Sequential(
        nn.Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation=dilation, groups=in_channels,
                  bias=False),
        nn.BatchNorm2d(in_channels),
        nn.ReLU(inplace=True),

        nn.Conv2d(in_channels, out_channels, 1, 1, 0, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


def conv_dw_no_bn(in_channels, out_channels, kernel_size=3, padding=1, stride=1, dilation=1):
    return nn.Sequential(
        nn.Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation=dilation, groups=in_channels,
                  bias=False),
        nn.ELU(inplace=True),

        nn.Conv2d(in_channels, out_channels, 1, 1, 0, bias=False),
        nn.ELU(inplace=True),
    )


# ---- models/with_mobilenet.py --------------------------------------------------------------------------------

class Cpm(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.align = conv(in_channels, out_channels, kernel_size=1, padding=0, bn=False)
        self.trunk = nn.Sequential(
            conv_dw_no_bn(out_channels, out_channels),
            conv_dw_no_bn(out_channels, out_channels),
            conv_dw_no_bn(out_channels, out_channels)
        )
        self.conv = conv(out_channels, out_channels, bn=False)

    def forward(self, x):
        x = self.align(x)
        x = self.conv(x + self.trunk(x))
        return x


class InitialStage(nn.Module):
    def __init__(self, num_channels, num_heatmaps, num_pafs):
        super().__init__()
        self.trunk = nn.Sequential(
            conv(num_channels, num_channels, bn=False),
            conv(num_channels, num_channels, bn=False),
            conv(num_channels, num_channels, bn=False)
        )
        self.heatmaps = nn.Sequential(
            conv(num_channels, 512 // W, kernel_size=1, padding=0, bn=False),
            conv(512 // W, num_heatmaps, kernel_size=1, padding=0, bn=False, relu=False)
        )
        self.pafs = nn.Sequential(
            conv(num_channels, 512 // W, kernel_size=1, padding=0, bn=False),
            conv(512 // W, num_pafs, kernel_size=1, padding=0, bn=False, relu=False)
        )

    def forward(self, x):
        trunk_features = self.trunk(x)
        heatmaps = self.heatmaps(trunk_features)
        pafs = self.pafs(trunk_features)
        return [heatmaps, pafs]


class RefinementStageBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.initial = conv(in_channels, out_channels, kernel_size=1, padding=0, bn=False)
        self.trunk = nn.Sequential(
            conv(out_channels, out_channels),
            conv(out_channels, out_channels, dilation=2, padding=2)
        )

    def forward(self, x):
        initial_features = self.initial(x)
        trunk_features = self.trunk(initial_features)
        return initial_features + trunk_features


class RefinementStage(nn.Module):
    def __init__(self, in_channels, out_channels, num_heatmaps, num_pafs):
        super().__init__()
        self.trunk = nn.Sequential(*[RefinementStageBlock(in_channels if i == 0 else out_channels, out_channels)
                                     for i in range(5)])
        self.heatmaps = nn.Sequential(
            conv(out_channels, out_channels, kernel_size=1, padding=0, bn=False),
            conv(out_channels, num_heatmaps, kernel_size=1, padding=0, bn=False, relu=False)
        )
        self.pafs = nn.Sequential(
            conv(out_channels, out_channels, kernel_size=1, padding=0, bn=False),
            conv(out_channels, num_pafs, kernel_size=1, padding=0, bn=False, relu=False)
        )

    def forward(self, x):
        trunk_features = self.trunk(x)
        heatmaps = self.heatmaps(trunk_features)
        pafs = self.pafs(trunk_features)
        return [heatmaps, pafs]


class PoseEstimationWithMobileNet(nn.Module):
    def __init__(self, num_refinement_stages=1, num_channels=128, num_heatmaps=19, num_pafs=38):
        super().__init__()
        self.model = nn.Sequential(
            conv(3, 32 // W, stride=2, bias=False),
            conv_dw(32 // W, 64 // W),
            conv_dw(64 // W, 128 // W, stride=2),
            conv_dw(128 // W, 128 // W),
            conv_dw(128 // W, 256 // W, stride=2),
            conv_dw(256 // W, 256 // W),
            conv_dw(256 // W, 512 // W),  # conv4_2
            conv_dw(512 // W, 512 // W, dilation=2, padding=2),
            conv_dw(512 // W, 512 // W),
            conv_dw(512 // W, 512 // W),
            conv_dw(512 // W, 512 // W),
            conv_dw(512 // W, 512 // W)   # conv5_5
        )
        self.cpm = Cpm(512 // W, num_channels)

        self.initial_stage = InitialStage(num_channels, num_heatmaps, num_pafs)
        self.refinement_stages = nn.ModuleList()
        for _idx in range(num_refinement_stages):
            self.refinement_stages.append(RefinementStage(num_channels + num_heatmaps + num_pafs, num_channels,
                                                          num_heatmaps, num_pafs))

    def forward(self, x):
        backbone_features = self.model(x)
        backbone_features = self.cpm(backbone_features)

        stages_output = self.initial_stage(backbone_features)
        for refinement_stage in self.refinement_stages:
            stages_output.extend(
                refinement_stage(torch.cat([backbone_features, stages_output[-2], stages_output[-1]], dim=1)))

        return stages_output


def net_factory(num_refinement_stages):
    return PoseEstimationWithMobileNet(num_refinement_stages, num_channels=128 // W)


# ---- synthetic people (COCO replaced) ------------------------------------------------------------------------

TEMPLATE = np.array([[0, -36], [0, -26], [-10, -26], [-14, -12], [-16, 0], [10, -26], [14, -12], [16, 0],
                     [-6, 0], [-7, 16], [-8, 32], [6, 0], [7, 16], [8, 32], [-3, -39], [3, -39], [-6, -37],
                     [6, -37]], dtype=np.float32)  # the 18 COCO keypoints of a standing figure (x, y)
MIRRORED_LIMB = [3, 4, 5, 0, 1, 2, 10, 11, 12, 13, 6, 7, 8, 9, 14, 16, 15, 18, 17]  # the other side's limb
_COLOURS = np.random.RandomState(7).uniform(0, 255, size=(len(BODY_PARTS_KPT_IDS), 3)).astype(np.float32)
LIMB_COLOURS = _COLOURS[[min(i, j) for i, j in enumerate(MIRRORED_LIMB)]]  # left and right limbs look alike


def make_people(gen, n):
    """Prepared labels (keypoints as [x, y, visibility]) with images and masks: one jittered stick figure per image,
    its limbs drawn in fixed colours (a limb and its mirror image alike) on noise; half the images get a crowd region (mask 0) with a figure in it."""
    rng = np.random.RandomState(int(torch.randint(2 ** 31 - 1, (1,), generator=gen)))
    samples = []
    for _ in range(n):
        image = rng.uniform(60, 100, size=(IMG, IMG, 3)).astype(np.float32)
        mask = np.ones((IMG, IMG), dtype=np.float32)
        scale = rng.uniform(1.0, 1.5)
        centre = rng.uniform(48, 80, size=2)
        kpts = TEMPLATE * scale + centre + rng.normal(0, 2.0, size=TEMPLATE.shape)
        _draw(image, kpts)
        if rng.rand() < 0.5:  # an unannotated person in a masked crowd region
            x0, y0 = rng.randint(0, IMG - 32, size=2)
            _draw(image, TEMPLATE * 0.5 + np.array([x0 + 16, y0 + 16]))
            mask[y0:y0 + 32, x0:x0 + 32] = 0
        label = {'keypoints': [[float(x), float(y), 1] for x, y in kpts], 'processed_other_annotations': [],
                 'img_width': IMG, 'img_height': IMG}
        samples.append({'label': label, 'image': image, 'mask': mask})
    return samples


def _draw(image, kpts):
    for colour, (a, b) in zip(LIMB_COLOURS, BODY_PARTS_KPT_IDS):
        for t in np.linspace(0, 1, 24):
            x, y = (1 - t) * kpts[a] + t * kpts[b]
            xi, yi = round(float(x)), round(float(y))
            image[max(yi - 1, 0):yi + 2, max(xi - 1, 0):xi + 2] = colour


# ---- datasets/transformations.py: Flip -----------------------------------------------------------------------

class Flip:
    def __init__(self, prob=0.5, swap_left_right=True):
        self._prob = prob
        self._swap = swap_left_right

    def __call__(self, sample):
        prob = random.random()
        do_flip = prob <= self._prob
        if not do_flip:
            return sample

        sample['image'] = sample['image'][:, ::-1].copy()
        sample['mask'] = sample['mask'][:, ::-1].copy()

        label = sample['label']
        w = label['img_width']
        for keypoint in label['keypoints']:
            keypoint[0] = w - 1 - keypoint[0]
        if self._swap:
            label['keypoints'] = self._swap_left_right(label['keypoints'])
        return sample

    def _swap_left_right(self, keypoints):
        right = [2, 3, 4, 8, 9, 10, 14, 16]
        left = [5, 6, 7, 11, 12, 13, 15, 17]
        for r, l in zip(right, left):
            keypoints[r], keypoints[l] = keypoints[l], keypoints[r]
        return keypoints


# ---- datasets/coco.py: CocoTrainDataset ----------------------------------------------------------------------

class CocoTrainDataset(Dataset):
    def __init__(self, samples, stride, sigma, paf_thickness, swap_left_right=True):
        super().__init__()
        self._samples = samples
        self._stride = stride
        self._sigma = sigma
        self._paf_thickness = paf_thickness
        self._transform = Flip(swap_left_right=swap_left_right)

    def __getitem__(self, idx):
        sample = copy.deepcopy(self._samples[idx])  # label modified in transform
        if self._transform:
            sample = self._transform(sample)

        mask = F.avg_pool2d(torch.from_numpy(sample['mask'])[None], self._stride)[0].numpy()  # INTER_AREA at 1/8
        keypoint_maps = self._generate_keypoint_maps(sample)
        sample['keypoint_maps'] = keypoint_maps
        keypoint_mask = np.zeros(shape=keypoint_maps.shape, dtype=np.float32)
        for idx in range(keypoint_mask.shape[0]):
            keypoint_mask[idx] = mask
        sample['keypoint_mask'] = keypoint_mask

        paf_maps = self._generate_paf_maps(sample)
        sample['paf_maps'] = paf_maps
        paf_mask = np.zeros(shape=paf_maps.shape, dtype=np.float32)
        for idx in range(paf_mask.shape[0]):
            paf_mask[idx] = mask
        sample['paf_mask'] = paf_mask

        image = sample['image'].astype(np.float32)
        image = (image - 128) / 256
        sample['image'] = image.transpose((2, 0, 1)).copy()
        del sample['label']
        return sample

    def __len__(self):
        return len(self._samples)

    def _generate_keypoint_maps(self, sample):
        n_keypoints = 18
        n_rows, n_cols, _ = sample['image'].shape
        keypoint_maps = np.zeros(shape=(n_keypoints + 1,
                                        n_rows // self._stride, n_cols // self._stride), dtype=np.float32)  # +1 for bg

        label = sample['label']
        for keypoint_idx in range(n_keypoints):
            keypoint = label['keypoints'][keypoint_idx]
            if keypoint[2] <= 1:
                self._add_gaussian(keypoint_maps[keypoint_idx], keypoint[0], keypoint[1], self._stride, self._sigma)
        keypoint_maps[-1] = 1 - keypoint_maps.max(axis=0)
        return keypoint_maps

    def _add_gaussian(self, keypoint_map, x, y, stride, sigma):
        n_sigma = 4
        tl = [int(x - n_sigma * sigma), int(y - n_sigma * sigma)]
        tl[0] = max(tl[0], 0)
        tl[1] = max(tl[1], 0)

        br = [int(x + n_sigma * sigma), int(y + n_sigma * sigma)]
        map_h, map_w = keypoint_map.shape
        br[0] = min(br[0], map_w * stride)
        br[1] = min(br[1], map_h * stride)

        shift = stride / 2 - 0.5
        for map_y in range(tl[1] // stride, br[1] // stride):
            for map_x in range(tl[0] // stride, br[0] // stride):
                d2 = (map_x * stride + shift - x) * (map_x * stride + shift - x) + \
                    (map_y * stride + shift - y) * (map_y * stride + shift - y)
                exponent = d2 / 2 / sigma / sigma
                if exponent > 4.6052:  # threshold, ln(100), ~0.01
                    continue
                keypoint_map[map_y, map_x] += math.exp(-exponent)
                if keypoint_map[map_y, map_x] > 1:
                    keypoint_map[map_y, map_x] = 1

    def _generate_paf_maps(self, sample):
        n_pafs = len(BODY_PARTS_KPT_IDS)
        n_rows, n_cols, _ = sample['image'].shape
        paf_maps = np.zeros(shape=(n_pafs * 2, n_rows // self._stride, n_cols // self._stride), dtype=np.float32)

        label = sample['label']
        for paf_idx in range(n_pafs):
            keypoint_a = label['keypoints'][BODY_PARTS_KPT_IDS[paf_idx][0]]
            keypoint_b = label['keypoints'][BODY_PARTS_KPT_IDS[paf_idx][1]]
            if keypoint_a[2] <= 1 and keypoint_b[2] <= 1:
                self._set_paf(paf_maps[paf_idx * 2:paf_idx * 2 + 2],
                              keypoint_a[0], keypoint_a[1], keypoint_b[0], keypoint_b[1],
                              self._stride, self._paf_thickness)
        return paf_maps

    def _set_paf(self, paf_map, x_a, y_a, x_b, y_b, stride, thickness):
        x_a /= stride
        y_a /= stride
        x_b /= stride
        y_b /= stride
        x_ba = x_b - x_a
        y_ba = y_b - y_a
        _, h_map, w_map = paf_map.shape
        x_min = int(max(min(x_a, x_b) - thickness, 0))
        x_max = int(min(max(x_a, x_b) + thickness, w_map))
        y_min = int(max(min(y_a, y_b) - thickness, 0))
        y_max = int(min(max(y_a, y_b) + thickness, h_map))
        norm_ba = (x_ba * x_ba + y_ba * y_ba) ** 0.5
        if norm_ba < 1e-7:  # Same points, no paf
            return
        x_ba /= norm_ba
        y_ba /= norm_ba

        for y in range(y_min, y_max):
            for x in range(x_min, x_max):
                x_ca = x - x_a
                y_ca = y - y_a
                d = math.fabs(x_ca * y_ba - y_ca * x_ba)
                if d <= thickness:
                    paf_map[0, y, x] = x_ba
                    paf_map[1, y, x] = y_ba
