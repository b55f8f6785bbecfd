"""YOLOv1 (Redmon et al. 2016) as trained by motokimura/yolo_v1_pytorch: a DarkNet conv backbone (BN variant,
Kaiming init), YOLOv1's four extra 3x3 convs (one stride 2) and a fully connected head ending in a sigmoid that
outputs the S x S x (5B + C) grid (S 7, B 2, C 20); VOC boxes encoded per cell by ``VOCDataset.encode`` (cell-
relative centre, image-relative size, confidence 1 and a one-hot class, repeated for the B boxes); the YOLO loss of
``loss.py`` (the responsible box chosen per object cell by IoU, sum-squared errors on xy and sqrt-wh weighted by
lambda_coord 5, on the confidence against that IoU, on the class scores, and lambda_noobj 0.5 on the empty
cells' confidences, divided by the batch size); SGD momentum 0.9, weight decay 5e-4, the lr burnt in from 1e-3 to
1e-2 over the first epoch (``(i / (len - 1)) ** 4``), then steps at epochs 75 and 105.

Source: https://github.com/motokimura/yolo_v1_pytorch
Commit: c3e60d7abdb6a36c472e4dae55ed696dfc08dd43
Files: train_yolo.py, yolo_v1.py, darknet.py, loss.py, voc.py, util_layers.py
License: MIT (Copyright (c) 2017 Motoki Kimura; full text in LICENSES/motokimura-yolo_v1_pytorch.txt)
Domain: vision, object detection (YOLOv1 grid regression with IoU-assigned responsible boxes)

Deviations from the original:
- sizes: every conv and fc width divided by 16 (DarkNet 64/192/128/256/512/1024 -> 4/12/8/16/32/64 channels, the
  head's 4096 -> 256 units), batch_size 64 -> 4; image_size 448 and the 7x7 grid kept (the net's strides need
  448 for S = 7); 32 training images, so an epoch is 8 batches and the burn-in spans 8 steps; the lrs, momentum,
  weight decay, lambdas and the schedule are unchanged;
- no pretrained DarkNet (the original loads ``weights/darknet/model_best.pth.tar`` into the features): the
  features keep DarkNet's ``_initialize_weights``; the ``torch.nn.DataParallel`` wrappers are dropped (CPU, one
  device), so the parameter names have no ``module.``; only the branches ``train_yolo.py`` takes are copied
  (``DarkNet._make_conv_bn_layers`` for ``bn=True``, and YOLOv1's ``_make_conv_layers(bn=True)``, which as written
  has no BatchNorm; its ``bn=False`` branch and DarkNet's ``fc`` head are left out);
- data: Pascal VOC 2007+2012 is replaced by synthetic 448x448 scenes made from ``seed``: one to three
  axis-aligned rectangles per image, each filled with its class's colour (20 classes) over a grey background
  with blocky (4x4) noise, the box list in pixels as the label files give it; of ``VOCDataset``'s augmentations only
  ``random_flip`` is kept (scale, blur, brightness, hue, saturation, shift and crop are cv2 photometric and
  geometric jitter, left out), drawn from a ``random.Random(seed)``; the debug JPEG writes are dropped; the
  images are made at 448x448 so ``cv2.resize`` is the identity, ``BGR2RGB`` is not needed (the scenes are RGB),
  then ``(img - mean) / 255`` and ``ToTensor`` as written; DataLoader without workers, shuffled with a
  ``torch.Generator(seed)``;
- ``loss.py`` runs on CPU: ``torch.cuda.ByteTensor`` masks are ``torch.bool`` tensors (uint8 masks no longer index),
  ``.cuda()`` calls and ``Variable`` wrappers dropped; ``max_index`` is taken as an int;
- one ``train_step`` is one batch of the epoch loop (``update_lr``, forward, loss, zero_grad, backward, step); when
  the loader is exhausted the validation pass runs (``yolo.eval()``, no_grad) and the next epoch starts with
  ``yolo.train()``; tensorboard, printing and checkpoints are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

D = 16  # width divisor
IMAGE_SIZE = 448
N_TRAIN, N_VAL = 32, 4

# Training hyper parameters.
init_lr = 0.001
base_lr = 0.01
momentum = 0.9
weight_decay = 5.0e-4
num_epochs = 135
batch_size = 4  # 64


# ---- util_layers.py --------------------------------------------------------------------------------------------

class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)


# ---- darknet.py (conv_only=True, bn=True: the parts train_yolo.py uses) ------------------------------------------

class DarkNet(nn.Module):
    def __init__(self, conv_only=False, bn=True, init_weight=True):
        super(DarkNet, self).__init__()

        # Make layers
        self.features = self._make_conv_bn_layers()
        assert conv_only

        # Initialize weights
        if init_weight:
            self._initialize_weights()

        self.conv_only = conv_only

    def forward(self, x):
        x = self.features(x)
        return x

    def _make_conv_bn_layers(self):
        conv = nn.Sequential(
            nn.Conv2d(3, 64 // D, 7, stride=2, padding=3),
            nn.BatchNorm2d(64 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.MaxPool2d(2),

            nn.Conv2d(64 // D, 192 // D, 3, padding=1),
            nn.BatchNorm2d(192 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.MaxPool2d(2),

            nn.Conv2d(192 // D, 128 // D, 1),
            nn.BatchNorm2d(128 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(128 // D, 256 // D, 3, padding=1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 256 // D, 1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 512 // D, 3, padding=1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.MaxPool2d(2),

            nn.Conv2d(512 // D, 256 // D, 1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 512 // D, 3, padding=1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 256 // D, 1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 512 // D, 3, padding=1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 256 // D, 1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 512 // D, 3, padding=1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 256 // D, 1),
            nn.BatchNorm2d(256 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(256 // D, 512 // D, 3, padding=1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 512 // D, 1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 1024 // D, 3, padding=1),
            nn.BatchNorm2d(1024 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.MaxPool2d(2),

            nn.Conv2d(1024 // D, 512 // D, 1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 1024 // D, 3, padding=1),
            nn.BatchNorm2d(1024 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(1024 // D, 512 // D, 1),
            nn.BatchNorm2d(512 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(512 // D, 1024 // D, 3, padding=1),
            nn.BatchNorm2d(1024 // D),
            nn.LeakyReLU(0.1, inplace=True)
        )
        return conv

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_in', nonlinearity='leaky_relu')
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)


# ---- yolo_v1.py ------------------------------------------------------------------------------------------------

class YOLOv1(nn.Module):
    def __init__(self, features, num_bboxes=2, num_classes=20, bn=True):
        super(YOLOv1, self).__init__()

        self.feature_size = 7
        self.num_bboxes = num_bboxes
        self.num_classes = num_classes

        self.features = features
        self.conv_layers = self._make_conv_layers(bn)
        self.fc_layers = self._make_fc_layers()

    def _make_conv_layers(self, bn):
        if bn:
            net = nn.Sequential(
                nn.Conv2d(1024 // D, 1024 // D, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(1024 // D, 1024 // D, 3, stride=2, padding=1),
                nn.LeakyReLU(0.1),

                nn.Conv2d(1024 // D, 1024 // D, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(1024 // D, 1024 // D, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True)
            )

        else:
            raise NotImplementedError  # the bn=False branch (with BatchNorm2d layers) is not used by train_yolo.py

        return net

    def _make_fc_layers(self):
        S, B, C = self.feature_size, self.num_bboxes, self.num_classes

        net = nn.Sequential(
            Flatten(),
            nn.Linear(7 * 7 * (1024 // D), 4096 // D),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Dropout(0.5, inplace=False), # is it okay to use Dropout with BatchNorm?
            nn.Linear(4096 // D, S * S * (5 * B + C)),
            nn.Sigmoid()
        )

        return net

    def forward(self, x):
        S, B, C = self.feature_size, self.num_bboxes, self.num_classes

        x = self.features(x)
        x = self.conv_layers(x)
        x = self.fc_layers(x)

        x = x.view(-1, S, S, 5 * B + C)
        return x


# ---- loss.py ---------------------------------------------------------------------------------------------------

class Loss(nn.Module):

    def __init__(self, feature_size=7, num_bboxes=2, num_classes=20, lambda_coord=5.0, lambda_noobj=0.5, bug=None):
        """ Constructor.
        Args:
            feature_size: (int) size of input feature map.
            num_bboxes: (int) number of bboxes per each cell.
            num_classes: (int) number of the object classes.
            lambda_coord: (float) weight for bbox location/size losses.
            lambda_noobj: (float) weight for no-objectness loss.
        """
        super(Loss, self).__init__()

        self.S = feature_size
        self.B = num_bboxes
        self.C = num_classes
        self.lambda_coord = lambda_coord
        self.lambda_noobj = lambda_noobj
        self.bug = bug


    def compute_iou(self, bbox1, bbox2):
        """ Compute the IoU (Intersection over Union) of two set of bboxes, each bbox format: [x1, y1, x2, y2].
        Args:
            bbox1: (Tensor) bounding bboxes, sized [N, 4].
            bbox2: (Tensor) bounding bboxes, sized [M, 4].
        Returns:
            (Tensor) IoU, sized [N, M].
        """
        N = bbox1.size(0)
        M = bbox2.size(0)

        # Compute left-top coordinate of the intersections
        lt = torch.max(
            bbox1[:, :2].unsqueeze(1).expand(N, M, 2), # [N, 2] -> [N, 1, 2] -> [N, M, 2]
            bbox2[:, :2].unsqueeze(0).expand(N, M, 2)  # [M, 2] -> [1, M, 2] -> [N, M, 2]
        )
        # Conpute right-bottom coordinate of the intersections
        rb = torch.min(
            bbox1[:, 2:].unsqueeze(1).expand(N, M, 2), # [N, 2] -> [N, 1, 2] -> [N, M, 2]
            bbox2[:, 2:].unsqueeze(0).expand(N, M, 2)  # [M, 2] -> [1, M, 2] -> [N, M, 2]
        )
        # Compute area of the intersections from the coordinates
        wh = rb - lt   # width and height of the intersection, [N, M, 2]
        wh[wh < 0] = 0 # clip at 0
        inter = wh[:, :, 0] * wh[:, :, 1] # [N, M]

        # Compute area of the bboxes
        area1 = (bbox1[:, 2] - bbox1[:, 0]) * (bbox1[:, 3] - bbox1[:, 1]) # [N, ]
        area2 = (bbox2[:, 2] - bbox2[:, 0]) * (bbox2[:, 3] - bbox2[:, 1]) # [M, ]
        area1 = area1.unsqueeze(1).expand_as(inter) # [N, ] -> [N, 1] -> [N, M]
        area2 = area2.unsqueeze(0).expand_as(inter) # [M, ] -> [1, M] -> [N, M]

        # Compute IoU from the areas
        union = area1 + area2 - inter # [N, M, 2]
        iou = inter / union           # [N, M, 2]

        return iou

    def forward(self, pred_tensor, target_tensor):
        """ Compute loss for YOLO training.
        Args:
            pred_tensor: (Tensor) predictions, sized [n_batch, S, S, Bx5+C], 5=len([x, y, w, h, conf]).
            target_tensor: (Tensor) targets, sized [n_batch, S, S, Bx5+C].
        Returns:
            (Tensor): loss, sized [1, ].
        """
        # TODO: Romove redundant dimensions for some Tensors.

        S, B, C = self.S, self.B, self.C
        N = 5 * B + C    # 5=len([x, y, w, h, conf]

        batch_size = pred_tensor.size(0)
        coord_mask = target_tensor[:, :, :, 4] > 0  # mask for the cells which contain objects. [n_batch, S, S]
        noobj_mask = target_tensor[:, :, :, 4] == 0 # mask for the cells which do not contain objects. [n_batch, S, S]
        coord_mask = coord_mask.unsqueeze(-1).expand_as(target_tensor) # [n_batch, S, S] -> [n_batch, S, S, N]
        noobj_mask = noobj_mask.unsqueeze(-1).expand_as(target_tensor) # [n_batch, S, S] -> [n_batch, S, S, N]

        coord_pred = pred_tensor[coord_mask].view(-1, N)            # pred tensor on the cells which contain objects. [n_coord, N]
                                                                    # n_coord: number of the cells which contain objects.
        bbox_pred = coord_pred[:, :5*B].contiguous().view(-1, 5)    # [n_coord x B, 5=len([x, y, w, h, conf])]
        class_pred = coord_pred[:, 5*B:]                            # [n_coord, C]

        coord_target = target_tensor[coord_mask].view(-1, N)        # target tensor on the cells which contain objects. [n_coord, N]
                                                                    # n_coord: number of the cells which contain objects.
        bbox_target = coord_target[:, :5*B].contiguous().view(-1, 5)# [n_coord x B, 5=len([x, y, w, h, conf])]
        class_target = coord_target[:, 5*B:]                        # [n_coord, C]

        # Compute loss for the cells with no object bbox.
        noobj_pred = pred_tensor[noobj_mask].view(-1, N)        # pred tensor on the cells which do not contain objects. [n_noobj, N]
                                                                # n_noobj: number of the cells which do not contain objects.
        noobj_target = target_tensor[noobj_mask].view(-1, N)    # target tensor on the cells which do not contain objects. [n_noobj, N]
                                                                # n_noobj: number of the cells which do not contain objects.
        noobj_conf_mask = torch.zeros(noobj_pred.size(), dtype=torch.bool) # [n_noobj, N]
        for b in range(B):
            noobj_conf_mask[:, 4 + b*5] = 1 # noobj_conf_mask[:, 4] = 1; noobj_conf_mask[:, 9] = 1
        noobj_pred_conf = noobj_pred[noobj_conf_mask]       # [n_noobj, 2=len([conf1, conf2])]
        noobj_target_conf = noobj_target[noobj_conf_mask]   # [n_noobj, 2=len([conf1, conf2])]
        loss_noobj = F.mse_loss(noobj_pred_conf, noobj_target_conf, reduction='sum')

        # Compute loss for the cells with objects.
        coord_response_mask = torch.zeros(bbox_target.size(), dtype=torch.bool)    # [n_coord x B, 5]
        coord_not_response_mask = torch.ones(bbox_target.size(), dtype=torch.bool)# [n_coord x B, 5]
        bbox_target_iou = torch.zeros(bbox_target.size())                    # [n_coord x B, 5], only the last 1=(conf,) is used

        # Choose the predicted bbox having the highest IoU for each target bbox.
        for i in range(0, bbox_target.size(0), B):
            pred = bbox_pred[i:i+B] # predicted bboxes at i-th cell, [B, 5=len([x, y, w, h, conf])]
            pred_xyxy = torch.FloatTensor(pred.size()) # [B, 5=len([x1, y1, x2, y2, conf])]
            # Because (center_x,center_y)=pred[:, 2] and (w,h)=pred[:,2:4] are normalized for cell-size and image-size respectively,
            # rescale (center_x,center_y) for the image-size to compute IoU correctly.
            if self.bug == "iou_centre_column_slip":
                # the repository's lines before 2b4fe93 "Fix #1" (issue #1, PR #2): ``pred[:, 2]`` for ``pred[:, :2]``
                pred_xyxy[:,  :2] = pred[:, 2]/float(S) - 0.5 * pred[:, 2:4]
                pred_xyxy[:, 2:4] = pred[:, 2]/float(S) + 0.5 * pred[:, 2:4]
            else:
                pred_xyxy[:,  :2] = pred[:, :2]/float(S) - 0.5 * pred[:, 2:4]
                pred_xyxy[:, 2:4] = pred[:, :2]/float(S) + 0.5 * pred[:, 2:4]

            target = bbox_target[i] # target bbox at i-th cell. Because target boxes contained by each cell are identical in current implementation, enough to extract the first one.
            target = bbox_target[i].view(-1, 5) # target bbox at i-th cell, [1, 5=len([x, y, w, h, conf])]
            target_xyxy = torch.FloatTensor(target.size()) # [1, 5=len([x1, y1, x2, y2, conf])]
            # Because (center_x,center_y)=target[:, 2] and (w,h)=target[:,2:4] are normalized for cell-size and image-size respectively,
            # rescale (center_x,center_y) for the image-size to compute IoU correctly.
            if self.bug == "iou_centre_column_slip":
                target_xyxy[:,  :2] = target[:, 2]/float(S) - 0.5 * target[:, 2:4]
                target_xyxy[:, 2:4] = target[:, 2]/float(S) + 0.5 * target[:, 2:4]
            else:
                target_xyxy[:,  :2] = target[:, :2]/float(S) - 0.5 * target[:, 2:4]
                target_xyxy[:, 2:4] = target[:, :2]/float(S) + 0.5 * target[:, 2:4]

            iou = self.compute_iou(pred_xyxy[:, :4], target_xyxy[:, :4]) # [B, 1]
            max_iou, max_index = iou.max(0)
            max_index = int(max_index.data)

            coord_response_mask[i+max_index] = 1
            coord_not_response_mask[i+max_index] = 0

            # "we want the confidence score to equal the intersection over union (IOU) between the predicted box and the ground truth"
            # from the original paper of YOLO.
            bbox_target_iou[i+max_index, torch.LongTensor([4])] = (max_iou).data

        # BBox location/size and objectness loss for the response bboxes.
        bbox_pred_response = bbox_pred[coord_response_mask].view(-1, 5)      # [n_response, 5]
        bbox_target_response = bbox_target[coord_response_mask].view(-1, 5)  # [n_response, 5], only the first 4=(x, y, w, h) are used
        target_iou = bbox_target_iou[coord_response_mask].view(-1, 5)        # [n_response, 5], only the last 1=(conf,) is used
        loss_xy = F.mse_loss(bbox_pred_response[:, :2], bbox_target_response[:, :2], reduction='sum')
        loss_wh = F.mse_loss(torch.sqrt(bbox_pred_response[:, 2:4]), torch.sqrt(bbox_target_response[:, 2:4]), reduction='sum')
        loss_obj = F.mse_loss(bbox_pred_response[:, 4], target_iou[:, 4], reduction='sum')

        # Class probability loss for the cells which contain objects.
        loss_class = F.mse_loss(class_pred, class_target, reduction='sum')

        # Total loss
        loss = self.lambda_coord * (loss_xy + loss_wh) + loss_obj + self.lambda_noobj * loss_noobj + loss_class
        loss = loss / float(batch_size)

        return loss


# ---- voc.py (Pascal VOC replaced by synthetic scenes) ------------------------------------------------------------

def make_scenes(seed, n, size=IMAGE_SIZE, num_classes=20):
    """RGB scenes (H x W x 3 floats in 0..255) with 1-3 class-coloured rectangles; boxes [x1, y1, x2, y2] in pixels."""
    rng = np.random.RandomState(seed)
    colours = np.random.RandomState(12345).randint(0, 256, size=(num_classes, 3)).astype(np.float32)
    imgs, boxes, labels = [], [], []
    for _ in range(n):
        noise = rng.normal(0, 10, size=(size // 4, size // 4, 3)).astype(np.float32)
        img = 128 + noise.repeat(4, axis=0).repeat(4, axis=1)
        box, label = [], []
        for _ in range(rng.randint(1, 4)):
            w, h = rng.randint(60, 200), rng.randint(60, 200)
            x1, y1 = rng.randint(0, size - w), rng.randint(0, size - h)
            c = rng.randint(0, num_classes)
            img[y1:y1 + h, x1:x1 + w] = colours[c]
            box.append([x1, y1, x1 + w, y1 + h])
            label.append(c)
        imgs.append(np.clip(img, 0, 255))
        boxes.append(torch.Tensor(box))
        labels.append(torch.LongTensor(label))
    return imgs, boxes, labels


class VOCDataset(Dataset):

    def __init__(self, is_train, seed, image_size=448, grid_size=7, num_bboxes=2, num_classes=20, bug=None):
        self.is_train = is_train
        self.image_size = image_size

        self.S = grid_size
        self.B = num_bboxes
        self.C = num_classes
        self.bug = bug

        mean_rgb = [122.67891434, 116.66876762, 104.00698793]
        self.mean = np.array(mean_rgb, dtype=np.float32)

        self.imgs, self.boxes, self.labels = make_scenes(seed if is_train else seed + 1000, N_TRAIN if is_train else N_VAL)
        self.random = random.Random(seed + 7)
        self.num_samples = len(self.imgs)

    def __getitem__(self, idx):
        img = self.imgs[idx]
        boxes = self.boxes[idx].clone() # [n, 4]
        labels = self.labels[idx].clone() # [n,]

        if self.is_train:
            img, boxes = self.random_flip(img, boxes)

        h, w, _ = img.shape
        boxes /= torch.Tensor([[w, h, w, h]]).expand_as(boxes) # normalize (x1, y1, x2, y2) w.r.t. image width/height.
        target = self.encode(boxes, labels) # [S, S, 5 x B + C]

        # (cv2.resize to image_size x image_size: the scenes are already that size; BGR2RGB: they are RGB)
        img = (img - self.mean) / 255.0 # normalize from -1.0 to 1.0.
        img = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))) # transforms.ToTensor()

        return img, target

    def __len__(self):
        return self.num_samples

    def encode(self, boxes, labels):
        """ Encode box coordinates and class labels as one target tensor.
        Args:
            boxes: (tensor) [[x1, y1, x2, y2]_obj1, ...], normalized from 0.0 to 1.0 w.r.t. image width/height.
            labels: (tensor) [c_obj1, c_obj2, ...]
        Returns:
            An encoded tensor sized [S, S, 5 x B + C], 5=(x, y, w, h, conf)
        """

        S, B, C = self.S, self.B, self.C
        N = 5 * B + C

        target = torch.zeros(S, S, N)
        cell_size = 1.0 / float(S)
        boxes_wh = boxes[:, 2:] - boxes[:, :2] # width and height for each box, [n, 2]
        boxes_xy = (boxes[:, 2:] + boxes[:, :2]) / 2.0 # center x & y for each box, [n, 2]
        for b in range(boxes.size(0)):
            xy, wh, label = boxes_xy[b], boxes_wh[b], int(labels[b])

            ij = (xy / cell_size).ceil() - 1.0
            i, j = int(ij[0]), int(ij[1]) # y & x index which represents its location on the grid.
            if self.bug == "grid_indices_swapped":
                i, j = j, i  # (bug) the cell's row and column taken the wrong way round (classic)
            x0y0 = ij * cell_size # x & y of the cell left-top corner.
            xy_normalized = (xy - x0y0) / cell_size # x & y of the box on the cell, normalized from 0.0 to 1.0.

            # TBM, remove redundant dimensions from target tensor.
            # To remove these, loss implementation also has to be modified.
            for k in range(B):
                s = 5 * k
                target[j, i, s  :s+2] = xy_normalized
                target[j, i, s+2:s+4] = wh
                target[j, i, s+4    ] = 1.0
            target[j, i, 5*B + label] = 1.0

        return target

    def random_flip(self, img, boxes):
        if self.random.random() < 0.5:
            return img, boxes

        h, w, _ = img.shape  # noqa: RUF059

        img = np.fliplr(img)

        x1, x2 = boxes[:, 0], boxes[:, 2]
        x1_new = w - x2
        x2_new = w - x1
        boxes[:, 0], boxes[:, 2] = x1_new, x2_new

        return img, boxes


# ---- train_yolo.py ---------------------------------------------------------------------------------------------

def update_lr(optimizer, epoch, burnin_base, burnin_exp=4.0):
    if epoch == 0:
        lr = init_lr + (base_lr - init_lr) * math.pow(burnin_base, burnin_exp)
    elif epoch == 1:
        lr = base_lr
    elif epoch == 75:
        lr = 0.001
    elif epoch == 105:
        lr = 0.0001
    else:
        return

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def _build(seed, bug=None):
    torch.manual_seed(seed)

    # Load pre-trained darknet.  (no pretrained weights here)
    darknet = DarkNet(conv_only=True, bn=True, init_weight=True)

    # Load YOLO model.
    yolo = YOLOv1(darknet.features)

    # Setup loss and optimizer.
    criterion = Loss(feature_size=yolo.feature_size, bug=bug)
    optimizer = torch.optim.SGD(yolo.parameters(), lr=init_lr, momentum=momentum, weight_decay=weight_decay)

    # Load Pascal-VOC dataset.
    train_dataset = VOCDataset(True, seed, bug=bug)
    train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))

    val_dataset = VOCDataset(False, seed, bug=bug)
    val_loader = DataLoader(val_dataset, batch_size=batch_size, shuffle=False, num_workers=0)

    state = {"epoch": 0, "i": 0, "it": None}

    def validate():
        yolo.eval()
        val_loss = 0.0
        total_batch = 0
        for i, (imgs, targets) in enumerate(val_loader):
            batch_size_this_iter = imgs.size(0)
            with torch.no_grad():
                preds = yolo(imgs)
            loss = criterion(preds, targets)
            val_loss += loss.item() * batch_size_this_iter
            total_batch += batch_size_this_iter
        return val_loss / float(total_batch)

    def next_batch():
        if state["it"] is not None:
            try:
                batch = next(state["it"])
                state["i"] += 1
                return batch
            except StopIteration:
                validate()
                state["epoch"] += 1
        # Training.
        yolo.train()
        state["it"], state["i"] = iter(train_loader), 0
        return next(state["it"])

    def train_step():
        imgs, targets = next_batch()
        epoch, i = state["epoch"], state["i"]
        # Update learning rate.
        update_lr(optimizer, epoch, float(i) / float(len(train_loader) - 1))

        # Forward to compute loss.
        preds = yolo(imgs)
        loss = criterion(preds, targets)

        # Backward to update model weight.
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        imgs, targets = batch
        model.eval()
        with torch.no_grad():
            loss = criterion(model(imgs), targets)
        model.train()
        return float(loss)

    first = next(iter(val_loader))
    return Program(name="yolov1mk_voc", model=yolo, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the repository's own IoU slip before commit 2b4fe93 "Fix #1" (https://github.com/motokimura/yolo_v1_pytorch/issues/1,
    # https://github.com/motokimura/yolo_v1_pytorch/pull/2): the box corners are built from the width column
    # ``pred[:, 2]`` (broadcast over the B boxes) instead of the centres ``pred[:, :2]``, so the responsible box and its confidence target (the
    # IoU) are chosen from wrong boxes.
    Bug("iou_centre_column_slip", functools.partial(_build, bug="iou_centre_column_slip"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``encode`` writes each object into the transposed grid cell (classic row/column swap): the targets no longer
    # sit where the objects are in the image.
    Bug("grid_indices_swapped", functools.partial(_build, bug="grid_indices_swapped"), "learning_ledger",
        ("TASK",)),
]
