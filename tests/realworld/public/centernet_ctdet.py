"""CenterNet object detection as points (``ctdet``): the MSRA ResNet backbone (``PoseResNet``: ResNet stages, three
stride-2 deconvolutions, one head per output: ``hm`` class heatmaps, ``wh`` box sizes, ``reg`` sub-pixel offsets),
targets built as in ``datasets/sample/ctdet.py`` (``gaussian_radius``, ``draw_umich_gaussian`` on the heatmap,
``wh``/``reg`` written at the object's slot, ``ind = y * output_w + x``, ``reg_mask``), ``CtdetLoss`` (the modified
focal loss ``_neg_loss`` on ``_sigmoid(hm)``, ``RegL1Loss`` on features gathered at ``ind`` by
``_transpose_and_gather_feat``, weights hm 1 / wh 0.1 / off 1), ``ModelWithLoss`` and ``BaseTrainer.run_epoch``'s
train step with Adam lr 1.25e-4.

Source: https://github.com/xingyizhou/CenterNet
Commit: 4c50fd3a46bdf63dbf2082c5cbb3458d39579e6c
Files: src/lib/models/networks/msra_resnet.py, src/lib/models/losses.py, src/lib/models/utils.py,
  src/lib/trains/ctdet.py, src/lib/trains/base_trainer.py, src/lib/datasets/sample/ctdet.py,
  src/lib/utils/image.py (gaussian_radius, gaussian2D, draw_umich_gaussian), src/main.py, src/lib/opts.py
License: MIT (Copyright (c) 2019 Xingyi Zhou; the focal loss from CornerNet, BSD-3-Clause;
  LICENSES/xingyizhou-CenterNet.txt)
Domain: object detection (anchor-free, center heatmap + size/offset regression)

Deviations from the original:
- sizes: ``--arch res_18`` with each stage's width divided by 8 (64/128/256/512 -> 8/16/32/64) and one BasicBlock per
  stage ([2, 2, 2, 2] -> [1, 1, 1, 1]), deconvolution filters 256 -> 32, head_conv 64 -> 16; input 512 -> 64 pixels
  (down_ratio 4, output 16x16), max_objs 128 -> 8, batch 32 -> 8, num_classes 80 -> 2 (lr 1.25e-4, hm/wh/off weights
  1/0.1/1, reg_loss l1, reg_offset on, focal loss, num_stacks 1 as the defaults);
- ``get_pose_net`` calls ``init_weights(pretrained=True)``: its initialization (deconvolutions normal(0, 0.001),
  BatchNorm 1/0, the heads' last conv normal(0, 0.001) and the ``hm`` bias -2.19) runs, the ImageNet download does
  not (no encoder weights); ``F.l1_loss(..., size_average=False)`` is written ``reduction='sum'`` (the same sum);
  the ``Bottleneck`` block, ``DataParallel`` and the oracle/dense/cat-spec/norm-wh/MSE branches of ``CtdetLoss``
  (all off by default) are left out;
- data: COCO is replaced by synthetic 64x64 images made from ``seed``: 1-3 filled rectangles (class 0 red-ish,
  class 1 green-ish) of 8-24 pixels on a noisy background; ``__getitem__``'s target lines are copied, with the
  random scale/shift/flip affine, colour augmentation and cv2 warp left out (boxes are drawn at input resolution
  and divided by the down ratio instead of ``affine_transform(bbox, trans_output)``);
- one ``train_step`` is one iteration of ``run_epoch``'s loop in the train phase (forward through
  ``ModelWithLoss``, ``loss.mean()``, zero_grad, backward, step); the progress bar, meters and debug are left out;
  ``model_with_loss.train()`` runs when a new epoch starts; ``loss_fn`` is ``CtdetLoss`` on the backbone's outputs
  for a batch (applied to a copy of the outputs: the loss writes its sigmoid in place);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF012, RUF059, SIM102, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BN_MOMENTUM = 0.1
INPUT_RES, DOWN_RATIO, MAX_OBJS, NUM_CLASSES, BATCH_SIZE, N_TRAIN = 64, 4, 8, 2, 8, 64


class Opt:
    task = 'ctdet'
    arch = 'res_18'
    lr = 1.25e-4
    batch_size = BATCH_SIZE
    mse_loss = False
    reg_loss = 'l1'
    dense_wh = False
    norm_wh = False
    cat_spec_wh = False
    reg_offset = True
    hm_weight = 1
    wh_weight = 0.1
    off_weight = 1
    num_stacks = 1
    eval_oracle_hm = False
    eval_oracle_wh = False
    eval_oracle_offset = False
    head_conv = 16
    down_ratio = DOWN_RATIO
    device = torch.device('cpu')
    heads = {'hm': NUM_CLASSES, 'wh': 2, 'reg': 2}


# ---- src/lib/models/networks/msra_resnet.py --------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class PoseResNet(nn.Module):

    def __init__(self, block, layers, heads, head_conv, **kwargs):
        self.inplanes = 8
        self.deconv_with_bias = False
        self.heads = heads

        super(PoseResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(8, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 8, layers[0])
        self.layer2 = self._make_layer(block, 16, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 32, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 64, layers[3], stride=2)

        # used for deconv layers
        self.deconv_layers = self._make_deconv_layer(
            3,
            [32, 32, 32],
            [4, 4, 4],
        )
        # self.final_layer = []

        for head in sorted(self.heads):
          num_output = self.heads[head]
          if head_conv > 0:
            fc = nn.Sequential(
                nn.Conv2d(32, head_conv,
                  kernel_size=3, padding=1, bias=True),
                nn.ReLU(inplace=True),
                nn.Conv2d(head_conv, num_output,
                  kernel_size=1, stride=1, padding=0))
          else:
            fc = nn.Conv2d(
              in_channels=32,
              out_channels=num_output,
              kernel_size=1,
              stride=1,
              padding=0
          )
          self.__setattr__(head, fc)

        # self.final_layer = nn.ModuleList(self.final_layer)

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
        ret = {}
        for head in self.heads:
            ret[head] = self.__getattr__(head)(x)
        return [ret]

    def init_weights(self, num_layers, pretrained=True):
        if pretrained:
            for _, m in self.deconv_layers.named_modules():
                if isinstance(m, nn.ConvTranspose2d):
                    nn.init.normal_(m.weight, std=0.001)
                    if self.deconv_with_bias:
                        nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
            for head in self.heads:
              final_layer = self.__getattr__(head)
              for i, m in enumerate(final_layer.modules()):
                  if isinstance(m, nn.Conv2d):
                      if m.weight.shape[0] == self.heads[head]:
                          if 'hm' in head:
                              nn.init.constant_(m.bias, -2.19)
                          else:
                              nn.init.normal_(m.weight, std=0.001)
                              nn.init.constant_(m.bias, 0)
            # (the ImageNet weights are not loaded: no download here)


resnet_spec = {18: (BasicBlock, [1, 1, 1, 1])}


def get_pose_net(num_layers, heads, head_conv):
  block_class, layers = resnet_spec[num_layers]

  model = PoseResNet(block_class, layers, heads, head_conv=head_conv)
  model.init_weights(num_layers, pretrained=True)
  return model


# ---- src/lib/models/utils.py -------------------------------------------------------------------------------------

def _sigmoid(x):
  y = torch.clamp(x.sigmoid_(), min=1e-4, max=1-1e-4)
  return y

def _gather_feat(feat, ind, mask=None):
    dim  = feat.size(2)
    ind  = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    feat = feat.gather(1, ind)
    if mask is not None:
        mask = mask.unsqueeze(2).expand_as(feat)
        feat = feat[mask]
        feat = feat.view(-1, dim)
    return feat

def _transpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    feat = _gather_feat(feat, ind)
    return feat


# ---- src/lib/models/losses.py ------------------------------------------------------------------------------------

def _neg_loss(pred, gt):
  ''' Modified focal loss. Exactly the same as CornerNet.
      Runs faster and costs a little bit more memory
    Arguments:
      pred (batch x c x h x w)
      gt_regr (batch x c x h x w)
  '''
  pos_inds = gt.eq(1).float()
  neg_inds = gt.lt(1).float()

  neg_weights = torch.pow(1 - gt, 4)

  loss = 0

  pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds
  neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg_inds

  num_pos  = pos_inds.float().sum()
  pos_loss = pos_loss.sum()
  neg_loss = neg_loss.sum()

  if num_pos == 0:
    loss = loss - neg_loss
  else:
    loss = loss - (pos_loss + neg_loss) / num_pos
  return loss

class FocalLoss(nn.Module):
  '''nn.Module warpper for focal loss'''
  def __init__(self):
    super(FocalLoss, self).__init__()
    self.neg_loss = _neg_loss

  def forward(self, out, target):
    return self.neg_loss(out, target)

class RegL1Loss(nn.Module):
  def __init__(self, bug=None):
    super(RegL1Loss, self).__init__()
    self.bug = bug

  def forward(self, output, mask, ind, target):
    pred = _transpose_and_gather_feat(output, ind)
    if self.bug == "reg_mask_dropped":
      # every one of the max_objs slots is regressed, the empty ones (ind 0, target 0) included
      mask = torch.ones_like(mask)
    mask = mask.unsqueeze(2).expand_as(pred).float()
    # loss = F.l1_loss(pred * mask, target * mask, reduction='elementwise_mean')
    loss = F.l1_loss(pred * mask, target * mask, reduction='sum')
    loss = loss / (mask.sum() + 1e-4)
    return loss


# ---- src/lib/trains/ctdet.py, src/lib/trains/base_trainer.py ----------------------------------------------------

class CtdetLoss(torch.nn.Module):
  def __init__(self, opt, bug=None):
    super(CtdetLoss, self).__init__()
    self.crit = FocalLoss()
    self.crit_reg = RegL1Loss(bug=bug)
    self.crit_wh = self.crit_reg
    self.opt = opt

  def forward(self, outputs, batch):
    opt = self.opt
    hm_loss, wh_loss, off_loss = 0, 0, 0
    for s in range(opt.num_stacks):
      output = outputs[s]
      if not opt.mse_loss:
        output['hm'] = _sigmoid(output['hm'])

      hm_loss += self.crit(output['hm'], batch['hm']) / opt.num_stacks
      if opt.wh_weight > 0:
        wh_loss += self.crit_reg(
          output['wh'], batch['reg_mask'],
          batch['ind'], batch['wh']) / opt.num_stacks

      if opt.reg_offset and opt.off_weight > 0:
        off_loss += self.crit_reg(output['reg'], batch['reg_mask'],
                             batch['ind'], batch['reg']) / opt.num_stacks

    loss = opt.hm_weight * hm_loss + opt.wh_weight * wh_loss + \
           opt.off_weight * off_loss
    loss_stats = {'loss': loss, 'hm_loss': hm_loss,
                  'wh_loss': wh_loss, 'off_loss': off_loss}
    return loss, loss_stats


class ModelWithLoss(torch.nn.Module):
  def __init__(self, model, loss):
    super(ModelWithLoss, self).__init__()
    self.model = model
    self.loss = loss

  def forward(self, batch):
    outputs = self.model(batch['input'])
    loss, loss_stats = self.loss(outputs, batch)
    return outputs[-1], loss, loss_stats


# ---- src/lib/utils/image.py ----------------------------------------------------------------------------------------

def gaussian_radius(det_size, min_overlap=0.7):
  height, width = det_size

  a1  = 1
  b1  = (height + width)
  c1  = width * height * (1 - min_overlap) / (1 + min_overlap)
  sq1 = np.sqrt(b1 ** 2 - 4 * a1 * c1)
  r1  = (b1 + sq1) / 2

  a2  = 4
  b2  = 2 * (height + width)
  c2  = (1 - min_overlap) * width * height
  sq2 = np.sqrt(b2 ** 2 - 4 * a2 * c2)
  r2  = (b2 + sq2) / 2

  a3  = 4 * min_overlap
  b3  = -2 * min_overlap * (height + width)
  c3  = (min_overlap - 1) * width * height
  sq3 = np.sqrt(b3 ** 2 - 4 * a3 * c3)
  r3  = (b3 + sq3) / 2
  return min(r1, r2, r3)


def gaussian2D(shape, sigma=1):
    m, n = [(ss - 1.) / 2. for ss in shape]
    y, x = np.ogrid[-m:m+1,-n:n+1]

    h = np.exp(-(x * x + y * y) / (2 * sigma * sigma))
    h[h < np.finfo(h.dtype).eps * h.max()] = 0
    return h

def draw_umich_gaussian(heatmap, center, radius, k=1):
  diameter = 2 * radius + 1
  gaussian = gaussian2D((diameter, diameter), sigma=diameter / 6)

  x, y = int(center[0]), int(center[1])

  height, width = heatmap.shape[0:2]

  left, right = min(x, radius), min(width - x, radius + 1)
  top, bottom = min(y, radius), min(height - y, radius + 1)

  masked_heatmap  = heatmap[y - top:y + bottom, x - left:x + right]
  masked_gaussian = gaussian[radius - top:radius + bottom, radius - left:radius + right]
  if min(masked_gaussian.shape) > 0 and min(masked_heatmap.shape) > 0: # TODO debug
    np.maximum(masked_heatmap, masked_gaussian * k, out=masked_heatmap)
  return heatmap


# ---- src/lib/datasets/sample/ctdet.py (targets), on synthetic images ----------------------------------------------

MEAN = np.array([0.408, 0.447, 0.470], dtype=np.float32).reshape(1, 1, 3)
STD = np.array([0.289, 0.274, 0.278], dtype=np.float32).reshape(1, 1, 3)
COLOURS = np.array([[220, 40, 40], [40, 200, 60]], dtype=np.float32)


class ShapesCtdet(torch.utils.data.Dataset):
  """Synthetic images of 1-3 rectangles (class = colour) with their (x1, y1, x2, y2, class) boxes."""

  def __init__(self, n, rs, bug=None):
    self.max_objs = MAX_OBJS
    self.num_classes = NUM_CLASSES
    self.mean, self.std = MEAN, STD
    self.bug = bug
    self.images, self.anns = [], []
    for _ in range(n):
      img = rs.uniform(0, 90, size=(INPUT_RES, INPUT_RES, 3)).astype(np.float32)
      anns = []
      for _k in range(rs.randint(1, 4)):
        w, h = rs.randint(8, 25), rs.randint(8, 25)
        x1, y1 = rs.randint(0, INPUT_RES - w), rs.randint(0, INPUT_RES - h)
        cls_id = rs.randint(NUM_CLASSES)
        img[y1:y1 + h, x1:x1 + w] = COLOURS[cls_id] + rs.uniform(-20, 20, size=3)
        anns.append((np.array([x1, y1, x1 + w, y1 + h], dtype=np.float32), cls_id))
      self.images.append(img)
      self.anns.append(anns)

  def __len__(self):
    return len(self.images)

  def __getitem__(self, index):
    img, anns = self.images[index], self.anns[index]
    num_objs = min(len(anns), self.max_objs)
    input_h, input_w = INPUT_RES, INPUT_RES

    inp = (img.astype(np.float32) / 255.)
    inp = (inp - self.mean) / self.std
    inp = inp.transpose(2, 0, 1)

    output_h = input_h // DOWN_RATIO
    output_w = input_w // DOWN_RATIO
    num_classes = self.num_classes

    hm = np.zeros((num_classes, output_h, output_w), dtype=np.float32)
    wh = np.zeros((self.max_objs, 2), dtype=np.float32)
    reg = np.zeros((self.max_objs, 2), dtype=np.float32)
    ind = np.zeros((self.max_objs), dtype=np.int64)
    reg_mask = np.zeros((self.max_objs), dtype=np.uint8)

    draw_gaussian = draw_umich_gaussian

    for k in range(num_objs):
      bbox, cls_id = anns[k]
      bbox = bbox / DOWN_RATIO  # affine_transform(bbox, trans_output) without scale/shift/flip
      bbox[[0, 2]] = np.clip(bbox[[0, 2]], 0, output_w - 1)
      bbox[[1, 3]] = np.clip(bbox[[1, 3]], 0, output_h - 1)
      h, w = bbox[3] - bbox[1], bbox[2] - bbox[0]
      if h > 0 and w > 0:
        radius = gaussian_radius((math.ceil(h), math.ceil(w)))
        radius = max(0, int(radius))
        ct = np.array(
          [(bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2], dtype=np.float32)
        ct_int = ct.astype(np.int32)
        draw_gaussian(hm[cls_id], ct_int, radius)
        wh[k] = 1. * w, 1. * h
        if self.bug == "ind_x_y_swapped":
          # row-major index built from (x, y) instead of (y, x): sizes and offsets attached to the transposed cell
          ind[k] = ct_int[0] * output_w + ct_int[1]
        else:
          ind[k] = ct_int[1] * output_w + ct_int[0]
        reg[k] = ct - ct_int
        reg_mask[k] = 1

    ret = {'input': inp, 'hm': hm, 'reg_mask': reg_mask, 'ind': ind, 'wh': wh}
    ret.update({'reg': reg})
    return ret


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = np.random.RandomState(seed)
    opt = Opt()

    model = get_pose_net(18, opt.heads, opt.head_conv)
    optimizer = torch.optim.Adam(model.parameters(), opt.lr)
    model_with_loss = ModelWithLoss(model, CtdetLoss(opt, bug=bug))

    dataset = ShapesCtdet(N_TRAIN, rs, bug=bug)
    train_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=opt.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
    )

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch: run_epoch('train', ...)
            model_with_loss.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        for k in batch:
            if k != 'meta':
                batch[k] = batch[k].to(device=opt.device, non_blocking=True)
        output, loss, loss_stats = model_with_loss(batch)
        loss = loss.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    first = next(iter(torch.utils.data.DataLoader(dataset, batch_size=opt.batch_size)))
    targets = {k: v for k, v in first.items() if k != 'input'}
    loss_module = CtdetLoss(opt, bug=bug)

    def loss_fn(outputs, targets):
        outputs = [{k: v.clone() for k, v in outputs[0].items()}]  # CtdetLoss writes the sigmoid in place
        return loss_module(outputs, targets)[0]

    return Program(name="centernet_ctdet", model=model, batch=(first['input'], targets), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the flattened index built as x * output_w + y: the wh/reg targets are gathered at the transposed cell, not at
    # the object's center (classic row/column slip of this program's index gathering).
    Bug("ind_x_y_swapped", functools.partial(_build, bug="ind_x_y_swapped"), "learning_ledger", ("TASK",)),
    # reg_mask not applied in RegL1Loss: the empty object slots (index 0, target 0) are regressed too and the
    # normalizer counts them (classic: the mask not reaching the loss).
    # first contact declared OBJECTIVE; the loss never reading the mask is TASK's task.mask_unread (reviewed after first
    # contact: the finding names this bug's mechanism)
    Bug("reg_mask_dropped", functools.partial(_build, bug="reg_mask_dropped"), "learning_ledger", ("TASK",),
        kind="task.mask_unread"),
]
