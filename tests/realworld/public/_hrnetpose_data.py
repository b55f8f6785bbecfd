"""The keypoint data path of leoxiaobin/deep-high-resolution-net.pytorch, for the port ``hrnet_pose_mpii``:
``utils/transforms.py`` (``flip_back``, ``fliplr_joints``, ``get_affine_transform``, ``affine_transform``),
``JointsDataset.__getitem__`` (random scale and rotation, horizontal flip with the left/right joint pairs swapped, the
affine crop to the input size, joints carried through the same transform, Gaussian heatmap targets with a visibility
weight per joint) and ``MPIIDataset`` (16 joints, flip pairs, the annotation's centre moved down by 15 x scale and the
scale enlarged by 1.25, 1-based coordinates made 0-based).

Source: https://github.com/leoxiaobin/deep-high-resolution-net.pytorch
Commit: 6f69e4676ad8d43d0d61b64b1b9726f0c369e7b1
Files: lib/utils/transforms.py, lib/dataset/JointsDataset.py, lib/dataset/mpii.py
License: MIT (Copyright (c) 2019 Leo Xiao; the files' header: Copyright (c) Microsoft, Licensed under the MIT
License; full text in LICENSES/leoxiaobin-deep-high-resolution-net.pytorch.txt)

Deviations from the original:
- there is no OpenCV here: ``cv2.getAffineTransform`` is solved with numpy from the same three point pairs and
  ``cv2.warpAffine(..., flags=cv2.INTER_LINEAR)`` (constant 0 border) is written with
  ``scipy.ndimage.map_coordinates`` (order 1) through the inverse map; ``cv2.imread`` + ``cvtColor(BGR2RGB)`` is
  replaced by reading the RGB array from the port's in-memory store (``IMAGES``);
- ``MPIIDataset._get_db`` reads the annotation records from a list (the json file's content) instead of
  ``annot/<set>.json``; ``evaluate`` (PCKh against the MPII ``.mat`` ground truth), ``select_data`` (off for
  MPII) and ``half_body_transform`` (``PROB_HALF_BODY`` -1 for MPII: never taken; an assert keeps its test) are not
  ported; the zip reader, the logger and the unused ``meta`` fields (file names) are dropped;
- the ``bug`` argument of ``fliplr_joints`` selects the port's ``flip_pairs_not_swapped`` variant.
"""
# ruff: noqa: B008, SIM401

from __future__ import annotations

import copy
import random

import numpy as np
import torch
from scipy import ndimage
from torch.utils.data import Dataset

IMAGES = {}  # (port) image path -> RGB uint8 array: stands in for the image files


# ---- lib/utils/transforms.py ------------------------------------------------------------------------------------

def flip_back(output_flipped, matched_parts):
    '''
    ouput_flipped: numpy.ndarray(batch_size, num_joints, height, width)
    '''
    assert output_flipped.ndim == 4,\
        'output_flipped should be [batch_size, num_joints, height, width]'

    output_flipped = output_flipped[:, :, :, ::-1]

    for pair in matched_parts:
        tmp = output_flipped[:, pair[0], :, :].copy()
        output_flipped[:, pair[0], :, :] = output_flipped[:, pair[1], :, :]
        output_flipped[:, pair[1], :, :] = tmp

    return output_flipped


def fliplr_joints(joints, joints_vis, width, matched_parts, bug=None):
    """
    flip coords
    """
    joints[:, 0] = width - joints[:, 0] - 1

    if bug == "flip_pairs_not_swapped":  # the variant mirrors the x coordinates and keeps the left/right labels
        return joints*joints_vis, joints_vis
    for pair in matched_parts:
        joints[pair[0], :], joints[pair[1], :] = \
            joints[pair[1], :], joints[pair[0], :].copy()
        joints_vis[pair[0], :], joints_vis[pair[1], :] = \
            joints_vis[pair[1], :], joints_vis[pair[0], :].copy()

    return joints*joints_vis, joints_vis


def _get_affine_transform_cv2(src, dst):
    """(port) cv2.getAffineTransform: the 2x3 matrix M with M @ [x, y, 1] = dst for the three point pairs."""
    A = np.concatenate([src.astype(np.float64), np.ones((3, 1))], axis=1)
    return np.linalg.solve(A, dst.astype(np.float64)).T


def _warp_affine(img, M, dsize):
    """(port) cv2.warpAffine(img, M, dsize, flags=cv2.INTER_LINEAR), constant 0 border, for an HxWxC uint8 image."""
    w, h = dsize
    Minv = np.linalg.inv(np.vstack([M, [0, 0, 1]]))[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    sx = Minv[0, 0] * xs + Minv[0, 1] * ys + Minv[0, 2]
    sy = Minv[1, 0] * xs + Minv[1, 1] * ys + Minv[1, 2]
    out = np.stack([ndimage.map_coordinates(img[:, :, ch].astype(np.float64), [sy, sx], order=1, cval=0.0)
                    for ch in range(img.shape[2])], axis=2)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def get_affine_transform(
        center, scale, rot, output_size,
        shift=np.array([0, 0], dtype=np.float32), inv=0
):
    if not isinstance(scale, np.ndarray) and not isinstance(scale, list):
        scale = np.array([scale, scale])

    scale_tmp = scale * 200.0
    src_w = scale_tmp[0]
    dst_w = output_size[0]
    dst_h = output_size[1]

    rot_rad = np.pi * rot / 180
    src_dir = get_dir([0, src_w * -0.5], rot_rad)
    dst_dir = np.array([0, dst_w * -0.5], np.float32)

    src = np.zeros((3, 2), dtype=np.float32)
    dst = np.zeros((3, 2), dtype=np.float32)
    src[0, :] = center + scale_tmp * shift
    src[1, :] = center + src_dir + scale_tmp * shift
    dst[0, :] = [dst_w * 0.5, dst_h * 0.5]
    dst[1, :] = np.array([dst_w * 0.5, dst_h * 0.5]) + dst_dir

    src[2:, :] = get_3rd_point(src[0, :], src[1, :])
    dst[2:, :] = get_3rd_point(dst[0, :], dst[1, :])

    if inv:
        trans = _get_affine_transform_cv2(np.float32(dst), np.float32(src))
    else:
        trans = _get_affine_transform_cv2(np.float32(src), np.float32(dst))

    return trans


def affine_transform(pt, t):
    new_pt = np.array([pt[0], pt[1], 1.]).T
    new_pt = np.dot(t, new_pt)
    return new_pt[:2]


def get_3rd_point(a, b):
    direct = a - b
    return b + np.array([-direct[1], direct[0]], dtype=np.float32)


def get_dir(src_point, rot_rad):
    sn, cs = np.sin(rot_rad), np.cos(rot_rad)

    src_result = [0, 0]
    src_result[0] = src_point[0] * cs - src_point[1] * sn
    src_result[1] = src_point[0] * sn + src_point[1] * cs

    return src_result


# ---- lib/dataset/JointsDataset.py, lib/dataset/mpii.py ----------------------------------------------------------

class MPIIDataset(Dataset):
    """``JointsDataset`` with ``MPIIDataset``'s joints, flip pairs and ``_get_db``."""

    def __init__(self, cfg, anno, image_set, is_train, transform=None, bug=None):
        self.bug = bug  # (port) the variant being built
        self.pixel_std = 200
        self.is_train = is_train
        self.image_set = image_set
        self.scale_factor = cfg.DATASET.SCALE_FACTOR
        self.rotation_factor = cfg.DATASET.ROT_FACTOR
        self.flip = cfg.DATASET.FLIP
        self.num_joints_half_body = cfg.DATASET.NUM_JOINTS_HALF_BODY
        self.prob_half_body = cfg.DATASET.PROB_HALF_BODY
        self.target_type = cfg.MODEL.TARGET_TYPE
        self.image_size = np.array(cfg.MODEL.IMAGE_SIZE)
        self.heatmap_size = np.array(cfg.MODEL.HEATMAP_SIZE)
        self.sigma = cfg.MODEL.SIGMA
        self.use_different_joints_weight = cfg.LOSS.USE_DIFFERENT_JOINTS_WEIGHT
        self.joints_weight = 1
        self.transform = transform

        self.num_joints = 16
        self.flip_pairs = [[0, 5], [1, 4], [2, 3], [10, 15], [11, 14], [12, 13]]
        self.parent_ids = [1, 2, 6, 6, 3, 4, 6, 6, 7, 8, 11, 12, 7, 7, 13, 14]
        self.upper_body_ids = (7, 8, 9, 10, 11, 12, 13, 14, 15)
        self.lower_body_ids = (0, 1, 2, 3, 4, 5, 6)
        self.db = self._get_db(anno)

    def _get_db(self, anno):
        gt_db = []
        for a in anno:
            image_name = a['image']

            c = np.array(a['center'], dtype=np.float64)
            s = np.array([a['scale'], a['scale']], dtype=np.float64)

            # Adjust center/scale slightly to avoid cropping limbs
            if c[0] != -1:
                c[1] = c[1] + 15 * s[1]
                s = s * 1.25

            # MPII uses matlab format, index is based 1,
            # we should first convert to 0-based index
            c = c - 1

            joints_3d = np.zeros((self.num_joints, 3), dtype=np.float64)
            joints_3d_vis = np.zeros((self.num_joints, 3), dtype=np.float64)
            if self.image_set != 'test':
                joints = np.array(a['joints'])
                joints[:, 0:2] = joints[:, 0:2] - 1
                joints_vis = np.array(a['joints_vis'])
                assert len(joints) == self.num_joints

                joints_3d[:, 0:2] = joints[:, 0:2]
                joints_3d_vis[:, 0] = joints_vis[:]
                joints_3d_vis[:, 1] = joints_vis[:]

            gt_db.append({'image': image_name, 'center': c, 'scale': s, 'joints_3d': joints_3d,
                          'joints_3d_vis': joints_3d_vis})

        return gt_db

    def __len__(self,):
        return len(self.db)

    def __getitem__(self, idx):
        db_rec = copy.deepcopy(self.db[idx])

        image_file = db_rec['image']
        data_numpy = IMAGES[image_file]  # (port) cv2.imread + cvtColor(BGR2RGB)

        joints = db_rec['joints_3d']
        joints_vis = db_rec['joints_3d_vis']

        c = db_rec['center']
        s = db_rec['scale']
        score = db_rec['score'] if 'score' in db_rec else 1
        r = 0

        if self.is_train:
            assert not (np.sum(joints_vis[:, 0]) > self.num_joints_half_body
                        and np.random.rand() < self.prob_half_body)  # (port) PROB_HALF_BODY -1 for MPII

            sf = self.scale_factor
            rf = self.rotation_factor
            s = s * np.clip(np.random.randn()*sf + 1, 1 - sf, 1 + sf)
            r = np.clip(np.random.randn()*rf, -rf*2, rf*2) \
                if random.random() <= 0.6 else 0

            if self.flip and random.random() <= 0.5:
                data_numpy = data_numpy[:, ::-1, :]
                joints, joints_vis = fliplr_joints(
                    joints, joints_vis, data_numpy.shape[1], self.flip_pairs, bug=self.bug)
                c[0] = data_numpy.shape[1] - c[0] - 1

        trans = get_affine_transform(c, s, r, self.image_size)
        input = _warp_affine(
            data_numpy,
            trans,
            (int(self.image_size[0]), int(self.image_size[1])))

        if self.transform:
            input = self.transform(input)

        for i in range(self.num_joints):
            if joints_vis[i, 0] > 0.0:
                joints[i, 0:2] = affine_transform(joints[i, 0:2], trans)

        target, target_weight = self.generate_target(joints, joints_vis)

        target = torch.from_numpy(target)
        target_weight = torch.from_numpy(target_weight)

        meta = {'joints': joints, 'joints_vis': joints_vis, 'center': c, 'scale': s, 'rotation': r,
                'score': score}

        return input, target, target_weight, meta

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

        if self.use_different_joints_weight:
            target_weight = np.multiply(target_weight, self.joints_weight)

        return target, target_weight
