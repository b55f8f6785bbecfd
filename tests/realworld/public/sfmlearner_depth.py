"""Unsupervised depth and ego-motion (SfMLearner) of ClementPinard/SfmLearner-Pytorch: ``DispNetS`` (a seven-stage
encoder-decoder predicting disparity at four scales through ``alpha * sigmoid + beta``) and ``PoseExpNet`` (the
6-DoF poses of the reference frames scaled by 0.01, and the explainability masks at four scales), both in
``DataParallel``, trained jointly with one Adam (lr 2e-4, betas 0.9/0.999) by ``train.py``'s loop body: depth is
``1 / disp`` at each scale, ``photometric_reconstruction_loss`` inverse-warps each reference frame into the target
view (``inverse_warp``: back-projection by the inverted intrinsics, ``pose_vec2mat`` with Euler angles, projection,
``grid_sample`` with zero padding, the valid-points mask) with the intrinsics rescaled to each depth scale, L1
between the target and the warped references weighted by the explainability mask, plus ``explainability_loss``
(BCE of the masks toward 1) and the second-order ``smooth_loss`` over the depth scales, weighted ``w1 = 1``,
``w2 = 0.2``, ``w3 = 0.1`` (the README's ``-b4 -m0.2 -s0.1 --sequence-length 3`` command).

Source: https://github.com/ClementPinard/SfmLearner-Pytorch
Commit: 59689e6045dbd8199bb8b7665cd61596e52108bc
Files: train.py, loss_functions.py, inverse_warp.py, models/DispNetS.py, models/PoseExpNet.py, custom_transforms.py,
datasets/sequence_folders.py, README.md
License: MIT (Copyright (c) 2017 Tinghui Zhou; full text in LICENSES/ClementPinard-SfmLearner-Pytorch.txt)
Domain: vision, self-supervised monocular depth and camera pose (view synthesis by inverse warping, multi-scale
photometric loss, explainability masks, smoothness)

Deviations from the original:
- data: the formatted KITTI sequence folders are replaced by synthetic sequences rendered from ``seed``: a camera
  driving forward (with a small yaw) down a textured corridor (ground plane, two side walls and a far wall, each
  with its own procedural colour texture), ray-cast analytically at every frame, with the pinhole intrinsics the
  ``cam.txt`` files hold; ``SequenceFolder``'s ``crawl_folders`` and ``__getitem__`` are kept, reading the rendered
  frames from memory instead of ``imread`` on jpg files; ``RandomScaleCrop``'s ``skimage.transform.resize`` is
  written out as a bilinear ``F.interpolate`` (skimage is not here); the other ``custom_transforms`` are as written;
- sizes for 2 CPU cores: images 128x416 -> 32x96, the two networks' channel widths halved (the layouts, scales and
  heads unchanged), 16 training scenes of 5 frames (48 samples) and 4 validation scenes, ``--epoch-size`` 3000 ->
  the loader's length; batch 4 as in the README;
- tensorboard, the csv logs, the progress bars, ``log_output`` and checkpoints are dropped; ``.to(device)`` is the
  CPU; ``DataParallel`` without GPUs calls its module directly;
- one ``train_step`` is one batch of ``train()``'s loop (forward of both networks, the three losses, ``zero_grad``,
  ``backward``, ``step``); the epoch's ``disp_net.train()`` / ``pose_exp_net.train()`` run before its first batch;
  ``eval_fn`` is ``validate_without_gt``'s mean total loss (no ground truth depth here, as in the original's
  default), which puts both networks back in training mode when it is done (the original's next ``train()`` does); the ``Program``'s model is ``disp_net`` and its loss calls ``pose_exp_net`` inside, as the loop does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, SIM101, PLR0402, F841, UP004, RUF059, PLW0602, PLR0124  (the original code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data
from torch import sigmoid
from torch.nn.init import xavier_uniform_, zeros_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

H, W, N_TRAIN_SCENES, N_VAL_SCENES, FRAMES = 32, 96, 16, 4, 5
device = torch.device("cpu")


class args:  # (port) the README's command: -b4 -m0.2 -s0.1 --sequence-length 3, defaults otherwise
    sequence_length = 3
    rotation_mode = 'euler'
    padding_mode = 'zeros'
    epochs = 200
    epoch_size = 0
    batch_size = 4
    lr = 2e-4
    momentum = 0.9
    beta = 0.999
    weight_decay = 0
    seed = 0
    photo_loss_weight = 1
    mask_loss_weight = 0.2
    smooth_loss_weight = 0.1


# ---- inverse_warp.py -------------------------------------------------------------------------------------------

pixel_coords = None


def set_id_grid(depth):
    global pixel_coords
    b, h, w = depth.size()
    i_range = torch.arange(0, h).view(1, h, 1).expand(1, h, w).type_as(depth)  # [1, H, W]
    j_range = torch.arange(0, w).view(1, 1, w).expand(1, h, w).type_as(depth)  # [1, H, W]
    ones = torch.ones(1, h, w).type_as(depth)

    pixel_coords = torch.stack((j_range, i_range, ones), dim=1)  # [1, 3, H, W]


def check_sizes(input, input_name, expected):
    condition = [input.ndimension() == len(expected)]
    for i, size in enumerate(expected):
        if size.isdigit():
            condition.append(input.size(i) == int(size))
    assert(all(condition)), "wrong size for {}, expected {}, got  {}".format(input_name, 'x'.join(expected), list(input.size()))


def pixel2cam(depth, intrinsics_inv):
    global pixel_coords
    """Transform coordinates in the pixel frame to the camera frame.
    Args:
        depth: depth maps -- [B, H, W]
        intrinsics_inv: intrinsics_inv matrix for each element of batch -- [B, 3, 3]
    Returns:
        array of (u,v,1) cam coordinates -- [B, 3, H, W]
    """
    b, h, w = depth.size()
    if (pixel_coords is None) or pixel_coords.size(2) < h:
        set_id_grid(depth)
    current_pixel_coords = pixel_coords[..., :h, :w].expand(b, 3, h, w).reshape(b, 3, -1)  # [B, 3, H*W]
    cam_coords = (intrinsics_inv @ current_pixel_coords).reshape(b, 3, h, w)
    return cam_coords * depth.unsqueeze(1)


def cam2pixel(cam_coords, proj_c2p_rot, proj_c2p_tr):
    """Transform coordinates in the camera frame to the pixel frame.
    Args:
        cam_coords: pixel coordinates defined in the first camera coordinates system -- [B, 4, H, W]
        proj_c2p_rot: rotation matrix of cameras -- [B, 3, 4]
        proj_c2p_tr: translation vectors of cameras -- [B, 3, 1]
    Returns:
        array of [-1,1] coordinates -- [B, 2, H, W]
    """
    b, _, h, w = cam_coords.size()
    cam_coords_flat = cam_coords.reshape(b, 3, -1)  # [B, 3, H*W]
    if proj_c2p_rot is not None:
        pcoords = proj_c2p_rot @ cam_coords_flat
    else:
        pcoords = cam_coords_flat

    if proj_c2p_tr is not None:
        pcoords = pcoords + proj_c2p_tr  # [B, 3, H*W]
    X = pcoords[:, 0]
    Y = pcoords[:, 1]
    Z = pcoords[:, 2].clamp(min=1e-3)

    X_norm = 2*(X / Z)/(w-1) - 1  # Normalized, -1 if on extreme left, 1 if on extreme right (x = w-1) [B, H*W]
    Y_norm = 2*(Y / Z)/(h-1) - 1  # Idem [B, H*W]

    pixel_coords = torch.stack([X_norm, Y_norm], dim=2)  # [B, H*W, 2]
    return pixel_coords.reshape(b, h, w, 2)


def euler2mat(angle):
    """Convert euler angles to rotation matrix.

     Reference: https://github.com/pulkitag/pycaffe-utils/blob/master/rot_utils.py#L174

    Args:
        angle: rotation angle along 3 axis (in radians) -- size = [B, 3]
    Returns:
        Rotation matrix corresponding to the euler angles -- size = [B, 3, 3]
    """
    B = angle.size(0)
    x, y, z = angle[:, 0], angle[:, 1], angle[:, 2]

    cosz = torch.cos(z)
    sinz = torch.sin(z)

    zeros = z.detach()*0
    ones = zeros.detach()+1
    zmat = torch.stack([cosz, -sinz, zeros,
                        sinz,  cosz, zeros,
                        zeros, zeros,  ones], dim=1).reshape(B, 3, 3)

    cosy = torch.cos(y)
    siny = torch.sin(y)

    ymat = torch.stack([cosy, zeros,  siny,
                        zeros,  ones, zeros,
                        -siny, zeros,  cosy], dim=1).reshape(B, 3, 3)

    cosx = torch.cos(x)
    sinx = torch.sin(x)

    xmat = torch.stack([ones, zeros, zeros,
                        zeros,  cosx, -sinx,
                        zeros,  sinx,  cosx], dim=1).reshape(B, 3, 3)

    rotMat = xmat @ ymat @ zmat
    return rotMat


def pose_vec2mat(vec, rotation_mode='euler'):
    """
    Convert 6DoF parameters to transformation matrix.

    Args:s
        vec: 6DoF parameters in the order of tx, ty, tz, rx, ry, rz -- [B, 6]
    Returns:
        A transformation matrix -- [B, 3, 4]
    """
    translation = vec[:, :3].unsqueeze(-1)  # [B, 3, 1]
    rot = vec[:, 3:]
    if rotation_mode == 'euler':
        rot_mat = euler2mat(rot)  # [B, 3, 3]
    transform_mat = torch.cat([rot_mat, translation], dim=2)  # [B, 3, 4]
    return transform_mat


def inverse_warp(img, depth, pose, intrinsics, rotation_mode='euler', padding_mode='zeros'):
    """
    Inverse warp a source image to the target image plane.

    Args:
        img: the source image (where to sample pixels) -- [B, 3, H, W]
        depth: depth map of the target image -- [B, H, W]
        pose: 6DoF pose parameters from target to source -- [B, 6]
        intrinsics: camera intrinsic matrix -- [B, 3, 3]
    Returns:
        projected_img: Source image warped to the target image plane
        valid_points: Boolean array indicating point validity
    """
    check_sizes(img, 'img', 'B3HW')
    check_sizes(depth, 'depth', 'BHW')
    check_sizes(pose, 'pose', 'B6')
    check_sizes(intrinsics, 'intrinsics', 'B33')

    batch_size, _, img_height, img_width = img.size()

    cam_coords = pixel2cam(depth, intrinsics.inverse())  # [B,3,H,W]

    pose_mat = pose_vec2mat(pose, rotation_mode)  # [B,3,4]

    # Get projection matrix for tgt camera frame to source pixel frame
    proj_cam_to_src_pixel = intrinsics @ pose_mat  # [B, 3, 4]

    rot, tr = proj_cam_to_src_pixel[..., :3], proj_cam_to_src_pixel[..., -1:]
    src_pixel_coords = cam2pixel(cam_coords, rot, tr)  # [B,H,W,2]
    projected_img = F.grid_sample(img, src_pixel_coords, padding_mode=padding_mode, align_corners=True)

    valid_points = src_pixel_coords.abs().max(dim=-1)[0] <= 1

    return projected_img, valid_points


# ---- loss_functions.py -----------------------------------------------------------------------------------------

def photometric_reconstruction_loss(tgt_img, ref_imgs, intrinsics,
                                    depth, explainability_mask, pose,
                                    rotation_mode='euler', padding_mode='zeros', bug=None):
    def one_scale(depth, explainability_mask):
        assert(explainability_mask is None or depth.size()[2:] == explainability_mask.size()[2:])
        assert(pose.size(1) == len(ref_imgs))

        reconstruction_loss = 0
        b, _, h, w = depth.size()
        downscale = tgt_img.size(2)/h

        tgt_img_scaled = F.interpolate(tgt_img, (h, w), mode='area')
        ref_imgs_scaled = [F.interpolate(ref_img, (h, w), mode='area') for ref_img in ref_imgs]
        if bug == "intrinsics_not_rescaled":
            intrinsics_scaled = intrinsics
        else:
            intrinsics_scaled = torch.cat((intrinsics[:, 0:2]/downscale, intrinsics[:, 2:]), dim=1)

        warped_imgs = []
        diff_maps = []

        for i, ref_img in enumerate(ref_imgs_scaled):
            current_pose = pose[:, i]

            ref_img_warped, valid_points = inverse_warp(ref_img, depth[:,0], current_pose,
                                                        intrinsics_scaled,
                                                        rotation_mode, padding_mode)
            diff = (tgt_img_scaled - ref_img_warped) * valid_points.unsqueeze(1).float()

            if explainability_mask is not None:
                diff = diff * explainability_mask[:,i:i+1].expand_as(diff)

            reconstruction_loss += diff.abs().mean()
            assert((reconstruction_loss == reconstruction_loss).item() == 1)

            warped_imgs.append(ref_img_warped[0])
            diff_maps.append(diff[0])

        return reconstruction_loss, warped_imgs, diff_maps

    warped_results, diff_results = [], []
    if type(explainability_mask) not in [tuple, list]:
        explainability_mask = [explainability_mask]
    if type(depth) not in [list, tuple]:
        depth = [depth]

    total_loss = 0
    for d, mask in zip(depth, explainability_mask):
        loss, warped, diff = one_scale(d, mask)
        total_loss += loss
        warped_results.append(warped)
        diff_results.append(diff)
    return total_loss, warped_results, diff_results


def explainability_loss(mask):
    if type(mask) not in [tuple, list]:
        mask = [mask]
    loss = 0
    for mask_scaled in mask:
        ones_var = torch.ones_like(mask_scaled)
        loss += nn.functional.binary_cross_entropy(mask_scaled, ones_var)
    return loss


def smooth_loss(pred_map):
    def gradient(pred):
        D_dy = pred[:, :, 1:] - pred[:, :, :-1]
        D_dx = pred[:, :, :, 1:] - pred[:, :, :, :-1]
        return D_dx, D_dy

    if type(pred_map) not in [tuple, list]:
        pred_map = [pred_map]

    loss = 0
    weight = 1.

    for scaled_map in pred_map:
        dx, dy = gradient(scaled_map)
        dx2, dxdy = gradient(dx)
        dydx, dy2 = gradient(dy)
        loss += (dx2.abs().mean() + dxdy.abs().mean() + dydx.abs().mean() + dy2.abs().mean())*weight
        weight /= 2.3  # don't ask me why it works better
    return loss


# ---- models/DispNetS.py (widths halved) ------------------------------------------------------------------------

def downsample_conv(in_planes, out_planes, kernel_size=3):
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size, stride=2, padding=(kernel_size-1)//2),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_planes, out_planes, kernel_size=kernel_size, padding=(kernel_size-1)//2),
        nn.ReLU(inplace=True)
    )


def predict_disp(in_planes):
    return nn.Sequential(
        nn.Conv2d(in_planes, 1, kernel_size=3, padding=1),
        nn.Sigmoid()
    )


def conv_disp(in_planes, out_planes):
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, kernel_size=3, padding=1),
        nn.ReLU(inplace=True)
    )


def upconv_disp(in_planes, out_planes):
    return nn.Sequential(
        nn.ConvTranspose2d(in_planes, out_planes, kernel_size=3, stride=2, padding=1, output_padding=1),
        nn.ReLU(inplace=True)
    )


def crop_like(input, ref):
    assert(input.size(2) >= ref.size(2) and input.size(3) >= ref.size(3))
    return input[:, :, :ref.size(2), :ref.size(3)]


class DispNetS(nn.Module):

    def __init__(self, alpha=10, beta=0.01):
        super(DispNetS, self).__init__()

        self.alpha = alpha
        self.beta = beta

        conv_planes = [16, 32, 64, 128, 256, 256, 256]  # (port) [32, 64, 128, 256, 512, 512, 512]
        self.conv1 = downsample_conv(3,              conv_planes[0], kernel_size=7)
        self.conv2 = downsample_conv(conv_planes[0], conv_planes[1], kernel_size=5)
        self.conv3 = downsample_conv(conv_planes[1], conv_planes[2])
        self.conv4 = downsample_conv(conv_planes[2], conv_planes[3])
        self.conv5 = downsample_conv(conv_planes[3], conv_planes[4])
        self.conv6 = downsample_conv(conv_planes[4], conv_planes[5])
        self.conv7 = downsample_conv(conv_planes[5], conv_planes[6])

        upconv_planes = [256, 256, 128, 64, 32, 16, 8]  # (port) [512, 512, 256, 128, 64, 32, 16]
        self.upconv7 = upconv_disp(conv_planes[6],   upconv_planes[0])
        self.upconv6 = upconv_disp(upconv_planes[0], upconv_planes[1])
        self.upconv5 = upconv_disp(upconv_planes[1], upconv_planes[2])
        self.upconv4 = upconv_disp(upconv_planes[2], upconv_planes[3])
        self.upconv3 = upconv_disp(upconv_planes[3], upconv_planes[4])
        self.upconv2 = upconv_disp(upconv_planes[4], upconv_planes[5])
        self.upconv1 = upconv_disp(upconv_planes[5], upconv_planes[6])

        self.iconv7 = conv_disp(upconv_planes[0] + conv_planes[5], upconv_planes[0])
        self.iconv6 = conv_disp(upconv_planes[1] + conv_planes[4], upconv_planes[1])
        self.iconv5 = conv_disp(upconv_planes[2] + conv_planes[3], upconv_planes[2])
        self.iconv4 = conv_disp(upconv_planes[3] + conv_planes[2], upconv_planes[3])
        self.iconv3 = conv_disp(1 + upconv_planes[4] + conv_planes[1], upconv_planes[4])
        self.iconv2 = conv_disp(1 + upconv_planes[5] + conv_planes[0], upconv_planes[5])
        self.iconv1 = conv_disp(1 + upconv_planes[6], upconv_planes[6])

        self.predict_disp4 = predict_disp(upconv_planes[3])
        self.predict_disp3 = predict_disp(upconv_planes[4])
        self.predict_disp2 = predict_disp(upconv_planes[5])
        self.predict_disp1 = predict_disp(upconv_planes[6])

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
                xavier_uniform_(m.weight)
                if m.bias is not None:
                    zeros_(m.bias)

    def forward(self, x):
        out_conv1 = self.conv1(x)
        out_conv2 = self.conv2(out_conv1)
        out_conv3 = self.conv3(out_conv2)
        out_conv4 = self.conv4(out_conv3)
        out_conv5 = self.conv5(out_conv4)
        out_conv6 = self.conv6(out_conv5)
        out_conv7 = self.conv7(out_conv6)

        out_upconv7 = crop_like(self.upconv7(out_conv7), out_conv6)
        concat7 = torch.cat((out_upconv7, out_conv6), 1)
        out_iconv7 = self.iconv7(concat7)

        out_upconv6 = crop_like(self.upconv6(out_iconv7), out_conv5)
        concat6 = torch.cat((out_upconv6, out_conv5), 1)
        out_iconv6 = self.iconv6(concat6)

        out_upconv5 = crop_like(self.upconv5(out_iconv6), out_conv4)
        concat5 = torch.cat((out_upconv5, out_conv4), 1)
        out_iconv5 = self.iconv5(concat5)

        out_upconv4 = crop_like(self.upconv4(out_iconv5), out_conv3)
        concat4 = torch.cat((out_upconv4, out_conv3), 1)
        out_iconv4 = self.iconv4(concat4)
        disp4 = self.alpha * self.predict_disp4(out_iconv4) + self.beta

        out_upconv3 = crop_like(self.upconv3(out_iconv4), out_conv2)
        disp4_up = crop_like(F.interpolate(disp4, scale_factor=2, mode='bilinear', align_corners=False), out_conv2)
        concat3 = torch.cat((out_upconv3, out_conv2, disp4_up), 1)
        out_iconv3 = self.iconv3(concat3)
        disp3 = self.alpha * self.predict_disp3(out_iconv3) + self.beta

        out_upconv2 = crop_like(self.upconv2(out_iconv3), out_conv1)
        disp3_up = crop_like(F.interpolate(disp3, scale_factor=2, mode='bilinear', align_corners=False), out_conv1)
        concat2 = torch.cat((out_upconv2, out_conv1, disp3_up), 1)
        out_iconv2 = self.iconv2(concat2)
        disp2 = self.alpha * self.predict_disp2(out_iconv2) + self.beta

        out_upconv1 = crop_like(self.upconv1(out_iconv2), x)
        disp2_up = crop_like(F.interpolate(disp2, scale_factor=2, mode='bilinear', align_corners=False), x)
        concat1 = torch.cat((out_upconv1, disp2_up), 1)
        out_iconv1 = self.iconv1(concat1)
        disp1 = self.alpha * self.predict_disp1(out_iconv1) + self.beta

        if self.training:
            return disp1, disp2, disp3, disp4
        else:
            return disp1


# ---- models/PoseExpNet.py (widths halved) ----------------------------------------------------------------------

def conv(in_planes, out_planes, kernel_size=3):
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size, padding=(kernel_size-1)//2, stride=2),
        nn.ReLU(inplace=True)
    )


def upconv(in_planes, out_planes):
    return nn.Sequential(
        nn.ConvTranspose2d(in_planes, out_planes, kernel_size=4, stride=2, padding=1),
        nn.ReLU(inplace=True)
    )


class PoseExpNet(nn.Module):

    def __init__(self, nb_ref_imgs=2, output_exp=False):
        super(PoseExpNet, self).__init__()
        self.nb_ref_imgs = nb_ref_imgs
        self.output_exp = output_exp

        conv_planes = [8, 16, 32, 64, 128, 128, 128]  # (port) [16, 32, 64, 128, 256, 256, 256]
        self.conv1 = conv(3*(1+self.nb_ref_imgs), conv_planes[0], kernel_size=7)
        self.conv2 = conv(conv_planes[0], conv_planes[1], kernel_size=5)
        self.conv3 = conv(conv_planes[1], conv_planes[2])
        self.conv4 = conv(conv_planes[2], conv_planes[3])
        self.conv5 = conv(conv_planes[3], conv_planes[4])
        self.conv6 = conv(conv_planes[4], conv_planes[5])
        self.conv7 = conv(conv_planes[5], conv_planes[6])

        self.pose_pred = nn.Conv2d(conv_planes[6], 6*self.nb_ref_imgs, kernel_size=1, padding=0)

        if self.output_exp:
            upconv_planes = [128, 64, 32, 16, 8]  # (port) [256, 128, 64, 32, 16]
            self.upconv5 = upconv(conv_planes[4],   upconv_planes[0])
            self.upconv4 = upconv(upconv_planes[0], upconv_planes[1])
            self.upconv3 = upconv(upconv_planes[1], upconv_planes[2])
            self.upconv2 = upconv(upconv_planes[2], upconv_planes[3])
            self.upconv1 = upconv(upconv_planes[3], upconv_planes[4])

            self.predict_mask4 = nn.Conv2d(upconv_planes[1], self.nb_ref_imgs, kernel_size=3, padding=1)
            self.predict_mask3 = nn.Conv2d(upconv_planes[2], self.nb_ref_imgs, kernel_size=3, padding=1)
            self.predict_mask2 = nn.Conv2d(upconv_planes[3], self.nb_ref_imgs, kernel_size=3, padding=1)
            self.predict_mask1 = nn.Conv2d(upconv_planes[4], self.nb_ref_imgs, kernel_size=3, padding=1)

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
                xavier_uniform_(m.weight.data)
                if m.bias is not None:
                    zeros_(m.bias)

    def forward(self, target_image, ref_imgs):
        assert(len(ref_imgs) == self.nb_ref_imgs)
        input = [target_image]
        input.extend(ref_imgs)
        input = torch.cat(input, 1)
        out_conv1 = self.conv1(input)
        out_conv2 = self.conv2(out_conv1)
        out_conv3 = self.conv3(out_conv2)
        out_conv4 = self.conv4(out_conv3)
        out_conv5 = self.conv5(out_conv4)
        out_conv6 = self.conv6(out_conv5)
        out_conv7 = self.conv7(out_conv6)

        pose = self.pose_pred(out_conv7)
        pose = pose.mean(3).mean(2)
        pose = 0.01 * pose.view(pose.size(0), self.nb_ref_imgs, 6)

        if self.output_exp:
            out_upconv5 = self.upconv5(out_conv5  )[:, :, 0:out_conv4.size(2), 0:out_conv4.size(3)]
            out_upconv4 = self.upconv4(out_upconv5)[:, :, 0:out_conv3.size(2), 0:out_conv3.size(3)]
            out_upconv3 = self.upconv3(out_upconv4)[:, :, 0:out_conv2.size(2), 0:out_conv2.size(3)]
            out_upconv2 = self.upconv2(out_upconv3)[:, :, 0:out_conv1.size(2), 0:out_conv1.size(3)]
            out_upconv1 = self.upconv1(out_upconv2)[:, :, 0:input.size(2), 0:input.size(3)]

            exp_mask4 = sigmoid(self.predict_mask4(out_upconv4))
            exp_mask3 = sigmoid(self.predict_mask3(out_upconv3))
            exp_mask2 = sigmoid(self.predict_mask2(out_upconv2))
            exp_mask1 = sigmoid(self.predict_mask1(out_upconv1))
        else:
            exp_mask4 = None
            exp_mask3 = None
            exp_mask2 = None
            exp_mask1 = None

        if self.training:
            return [exp_mask1, exp_mask2, exp_mask3, exp_mask4], pose
        else:
            return exp_mask1, pose


# ---- custom_transforms.py --------------------------------------------------------------------------------------

class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, images, intrinsics):
        for t in self.transforms:
            images, intrinsics = t(images, intrinsics)
        return images, intrinsics


class Normalize(object):
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def __call__(self, images, intrinsics):
        for tensor in images:
            for t, m, s in zip(tensor, self.mean, self.std):
                t.sub_(m).div_(s)
        return images, intrinsics


class ArrayToTensor(object):
    """Converts a list of numpy.ndarray (H x W x C) along with a intrinsics matrix to a list of torch.FloatTensor of shape (C x H x W) with a intrinsics tensor."""

    def __call__(self, images, intrinsics):
        tensors = []
        for im in images:
            # put it from HWC to CHW format
            im = np.transpose(im, (2, 0, 1))
            # handle numpy array
            tensors.append(torch.from_numpy(im).float()/255)
        return tensors, intrinsics


class RandomHorizontalFlip(object):
    """Randomly horizontally flips the given numpy array with a probability of 0.5"""

    def __call__(self, images, intrinsics):
        assert intrinsics is not None
        if random.random() < 0.5:
            output_intrinsics = np.copy(intrinsics)
            output_images = [np.copy(np.fliplr(im)) for im in images]
            w = output_images[0].shape[1]
            output_intrinsics[0,2] = w - output_intrinsics[0,2]
        else:
            output_images = images
            output_intrinsics = intrinsics
        return output_images, output_intrinsics


def resize(im, shape):
    """(port) skimage.transform.resize (bilinear, float output) written out."""
    t = torch.from_numpy(np.ascontiguousarray(im)).permute(2, 0, 1)[None].double()
    return F.interpolate(t, size=shape, mode='bilinear', align_corners=False)[0].permute(1, 2, 0).numpy().astype(np.float32)


class RandomScaleCrop(object):
    """Randomly zooms images up to 15% and crop them to keep same size as before."""

    def __init__(self, bug=None):
        self.bug = bug

    def __call__(self, images, intrinsics):
        assert intrinsics is not None
        output_intrinsics = np.copy(intrinsics)

        in_h, in_w, _ = images[0].shape
        x_scaling, y_scaling = np.random.uniform(1,1.15,2)
        scaled_h, scaled_w = int(in_h * y_scaling), int(in_w * x_scaling)

        output_intrinsics[0] *= x_scaling
        output_intrinsics[1] *= y_scaling
        scaled_images = [resize(im, (scaled_h, scaled_w)) for im in images]

        offset_y = np.random.randint(scaled_h - in_h + 1)
        offset_x = np.random.randint(scaled_w - in_w + 1)
        cropped_images = [im[offset_y:offset_y + in_h, offset_x:offset_x + in_w] for im in scaled_images]

        if self.bug != "crop_offset_not_in_intrinsics":
            output_intrinsics[0,2] -= offset_x
            output_intrinsics[1,2] -= offset_y

        return cropped_images, output_intrinsics


# ---- (port) synthetic driving sequences ------------------------------------------------------------------------

def _rot_y(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def render_scene(rng, n_frames):
    """A camera driving forward (with a slight yaw) down a textured corridor, ray-cast at each frame (uint8-range
    float32 HxWx3 images, as ``imread(...).astype(np.float32)``), and the scene's ``cam.txt`` intrinsics."""
    fx = fy = 0.5 * W
    K = np.array([[fx, 0, W / 2], [0, fy, H / 2], [0, 0, 1]], dtype=np.float32)
    planes = [(np.array([0., 1., 0.]), rng.uniform(0.8, 1.4)),  # ground, y = +h (y points down)
              (np.array([1., 0., 0.]), rng.uniform(1.2, 2.5)),  # right wall
              (np.array([-1., 0., 0.]), rng.uniform(1.2, 2.5)),  # left wall, x = -d
              (np.array([0., 0., 1.]), rng.uniform(8., 14.))]  # far wall
    tex = [(rng.uniform(-3, 3, (3, 2)) * np.array([[1.0], [2.0], [4.0]]), rng.uniform(0, 6.3, 3),
            rng.uniform(0.2, 0.8, 3)) for _ in planes]
    speed, yaw = rng.uniform(0.2, 0.45), rng.uniform(-0.03, 0.03)
    jj, ii = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
    rays = np.stack([jj, ii, np.ones_like(jj)], -1) @ np.linalg.inv(K).T  # [H, W, 3] camera rays
    frames = []
    for k in range(n_frames):
        R = _rot_y(yaw * k)
        c = np.array([0., 0., speed * k])
        d = rays @ R.T
        best_t = np.full((H, W), np.inf)
        img = np.zeros((H, W, 3))
        for (n, off), (freq, phase, base) in zip(planes, tex):
            denom = d @ n
            with np.errstate(divide='ignore', invalid='ignore'):
                t = (off - c @ n) / denom
            hit = (t > 0) & (t < best_t) & np.isfinite(t)
            p = c + t[..., None] * d
            axes = [a for a in range(3) if abs(n[a]) < 0.5]
            uv = p[..., axes]  # in-plane coordinates
            col = np.stack([base[ch] + 0.25 * np.sin(uv @ freq[ch] + phase[ch]) + 0.12 * np.sin(3.1 * uv[..., 0] - 2.3 * uv[..., 1] + ch)
                            for ch in range(3)], -1)
            img = np.where(hit[..., None], col, img)
            best_t = np.where(hit, t, best_t)
        frames.append((255 * np.clip(img, 0, 1)).astype(np.float32))
    return frames, K


# ---- datasets/sequence_folders.py ------------------------------------------------------------------------------

class SequenceFolder(data.Dataset):
    """A sequence data loader where the files are arranged in this way:
        root/scene_1/0000000.jpg
        root/scene_1/0000001.jpg
        ..
        root/scene_1/cam.txt
        root/scene_2/0000000.jpg
        .

        transform functions must take in a list a images and a numpy array (usually intrinsics matrix)
    """

    def __init__(self, root, seed=None, train=True, sequence_length=3, transform=None, target_transform=None):
        np.random.seed(seed)
        random.seed(seed)
        self.root = root  # (port) {'train': [(frames, K), ...], 'val': [...]} in memory
        self.scenes = root['train'] if train else root['val']
        self.transform = transform
        self.crawl_folders(sequence_length)

    def crawl_folders(self, sequence_length):
        sequence_set = []
        demi_length = (sequence_length-1)//2
        shifts = list(range(-demi_length, demi_length + 1))
        shifts.pop(demi_length)
        for scene in self.scenes:
            intrinsics = scene[1].astype(np.float32).reshape((3, 3))
            imgs = scene[0]
            if len(imgs) < sequence_length:
                continue
            for i in range(demi_length, len(imgs)-demi_length):
                sample = {'intrinsics': intrinsics, 'tgt': imgs[i], 'ref_imgs': []}
                for j in shifts:
                    sample['ref_imgs'].append(imgs[i+j])
                sequence_set.append(sample)
        random.shuffle(sequence_set)
        self.samples = sequence_set

    def __getitem__(self, index):
        sample = self.samples[index]
        tgt_img = np.copy(sample['tgt'])  # (port) load_as_float(path)
        ref_imgs = [np.copy(ref_img) for ref_img in sample['ref_imgs']]
        if self.transform is not None:
            imgs, intrinsics = self.transform([tgt_img] + ref_imgs, np.copy(sample['intrinsics']))
            tgt_img = imgs[0]
            ref_imgs = imgs[1:]
        else:
            intrinsics = np.copy(sample['intrinsics'])
        return tgt_img, ref_imgs, intrinsics, np.linalg.inv(intrinsics)

    def __len__(self):
        return len(self.samples)


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    global pixel_coords
    pixel_coords = None
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    root = {'train': [render_scene(rng, FRAMES) for _ in range(N_TRAIN_SCENES)],
            'val': [render_scene(rng, FRAMES) for _ in range(N_VAL_SCENES)]}

    # Data loading code
    normalize = Normalize(mean=[0.5, 0.5, 0.5],
                          std=[0.5, 0.5, 0.5])
    train_transform = Compose([
        RandomHorizontalFlip(),
        RandomScaleCrop(bug=bug),
        ArrayToTensor(),
        normalize
    ])

    valid_transform = Compose([ArrayToTensor(), normalize])

    train_set = SequenceFolder(
        root,
        transform=train_transform,
        seed=seed,
        train=True,
        sequence_length=args.sequence_length
    )
    val_set = SequenceFolder(
        root,
        transform=valid_transform,
        seed=seed,
        train=False,
        sequence_length=args.sequence_length,
    )
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True,
        generator=torch.Generator().manual_seed(seed))
    val_loader = torch.utils.data.DataLoader(
        val_set, batch_size=args.batch_size, shuffle=False)

    epoch_size = len(train_loader)  # args.epoch_size == 0

    # create model
    disp_net = DispNetS().to(device)
    output_exp = args.mask_loss_weight > 0
    pose_exp_net = PoseExpNet(nb_ref_imgs=args.sequence_length - 1, output_exp=args.mask_loss_weight > 0).to(device)

    pose_exp_net.init_weights()
    disp_net.init_weights()

    disp_net = torch.nn.DataParallel(disp_net)
    pose_exp_net = torch.nn.DataParallel(pose_exp_net)

    optim_params = [
        {'params': disp_net.parameters(), 'lr': args.lr},
        {'params': pose_exp_net.parameters(), 'lr': args.lr}
    ]
    optimizer = torch.optim.Adam(optim_params,
                                 betas=(args.momentum, args.beta),
                                 weight_decay=args.weight_decay)

    w1, w2, w3 = args.photo_loss_weight, args.mask_loss_weight, args.smooth_loss_weight
    st = {"it": None}

    def total_loss(disparities, tgt_img, ref_imgs, intrinsics):
        depth = [1/disp for disp in disparities]
        explainability_mask, pose = pose_exp_net(tgt_img, ref_imgs)

        loss_1, warped, diff = photometric_reconstruction_loss(tgt_img, ref_imgs, intrinsics,
                                                               depth, explainability_mask, pose,
                                                               args.rotation_mode, args.padding_mode, bug=bug)
        if w2 > 0:
            loss_2 = explainability_loss(explainability_mask)
        else:
            loss_2 = 0
        loss_3 = smooth_loss(depth)

        return w1*loss_1 + w2*loss_2 + w3*loss_3

    def train_step():
        if st["it"] is None:
            # switch to train mode
            disp_net.train()
            pose_exp_net.train()
            st["it"] = enumerate(train_loader)
        i, (tgt_img, ref_imgs, intrinsics, intrinsics_inv) = next(st["it"])
        tgt_img = tgt_img.to(device)
        ref_imgs = [img.to(device) for img in ref_imgs]
        intrinsics = intrinsics.to(device)

        # compute output
        disparities = disp_net(tgt_img)
        loss = total_loss(disparities, tgt_img, ref_imgs, intrinsics)

        # compute gradient and do Adam step
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if i >= epoch_size - 1:
            st["it"] = None
        return loss.detach()

    @torch.no_grad()
    def validate_without_gt():
        disp_net.eval()
        pose_exp_net.eval()
        losses = []
        for i, (tgt_img, ref_imgs, intrinsics, intrinsics_inv) in enumerate(val_loader):
            disp = disp_net(tgt_img)
            depth = 1/disp
            explainability_mask, pose = pose_exp_net(tgt_img, ref_imgs)

            loss_1, warped, diff = photometric_reconstruction_loss(tgt_img, ref_imgs,
                                                                   intrinsics, depth,
                                                                   explainability_mask, pose,
                                                                   args.rotation_mode, args.padding_mode, bug=bug)
            loss_1 = loss_1.item()
            if w2 > 0:
                loss_2 = explainability_loss(explainability_mask).item()
            else:
                loss_2 = 0
            loss_3 = smooth_loss(depth).item()
            losses.append(w1*loss_1 + w2*loss_2 + w3*loss_3)
        disp_net.train()
        pose_exp_net.train()
        return float(np.mean(losses))

    def eval_fn(m, batch):
        return validate_without_gt()

    def loss_fn(disparities, targets):
        tgt_img, ref_imgs, intrinsics = targets
        return total_loss(disparities, tgt_img, ref_imgs, intrinsics)

    tgt_img, ref_imgs, intrinsics, _ = next(iter(torch.utils.data.DataLoader(train_set, batch_size=args.batch_size)))
    return Program(name="sfmlearner_depth", model=disp_net, batch=(tgt_img, (tgt_img, ref_imgs, intrinsics)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the per-scale intrinsics rescaling whose purpose is asked about in
    # https://github.com/ClementPinard/SfmLearner-Pytorch/issues/94 and
    # https://github.com/ClementPinard/SfmLearner-Pytorch/issues/63, left out
    Bug("intrinsics_not_rescaled", functools.partial(_build, bug="intrinsics_not_rescaled"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the crop of RandomScaleCrop not carried into the principal point
    Bug("crop_offset_not_in_intrinsics", functools.partial(_build, bug="crop_offset_not_in_intrinsics"),
        "learning_ledger", ("TASK",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
