"""SSD detector of amdegroot/ssd.pytorch trained by its ``train.py``: the repository's ``SSD`` (VGG base with the
conv4_3 source L2-normalised by ``L2Norm``, pool5 / dilated conv6 / conv7, extra layers, per-source 3x3 loc and conf
heads, ``PriorBox`` default boxes), ``MultiBoxLoss`` (jaccard matching of priors to ground-truth boxes at 0.5 with every
ground truth forced onto its best prior, offsets encoded with the variances, smooth-L1 localisation loss on the
positives, cross-entropy on the positives and the hard negatives mined 3:1 by confidence loss, both divided by the
number of positives), SGD(lr 1e-3, momentum 0.9, weight_decay 5e-4), the step lr decay at ``lr_steps`` (gamma 0.1), the
xavier init of the extras and heads, ``detection_collate`` (a list of [num_objs, 5] target tensors per batch).

Source: https://github.com/amdegroot/ssd.pytorch
Commit: 5b0b77faa955c1917b0c710d770739ba8fbff9b7
Files: train.py, ssd.py, layers/modules/multibox_loss.py, layers/modules/l2norm.py, layers/functions/prior_box.py,
       layers/box_utils.py, data/config.py, data/__init__.py (detection_collate), data/voc0712.py
License: MIT (Copyright (c) 2017 Max deGroot, Ellis Brown)
Domain: object detection (single-shot, default boxes, hard negative mining)

Deviations from the original:
- sizes: input 300x300 -> 64x64 and a tiny VGG: every width divided by 8 (base 64..512 -> 8..64, conv6/conv7 1024 ->
  128, ``L2Norm(512, 20)`` -> ``L2Norm(64, 20)``), the layer pattern unchanged (so conv4_3 is still ``vgg[21]`` and
  ``range(23)`` still ends at its ReLU); three feature maps instead of six: the extras config is cut to its first
  pair (``[256, 'S', 512]`` / 8 -> ``[32, 'S', 64]``) and the VOC prior config to its first three maps, scaled to 64
  pixels (feature_maps [8, 4, 2], steps [8, 16, 32], min/max sizes x 64/300, aspect ratios and variances unchanged);
  ``mbox`` [4, 6, 6]; batch 32 -> 16 (256 training images); max_iter 120000 -> 120 and lr_steps (80000, 100000, 120000) -> (80, 100, 120);
- the pretrained ``vgg16_reducedfc.pth`` cannot be loaded: the VGG base gets train.py's ``weights_init`` (xavier,
  zero bias) like the extras and heads (with PyTorch's default init its activations vanish through the 15 layers
  before fc7); ``DataParallel``, ``.cuda()``, cudnn, visdom and checkpoint saving are dropped; ``loss_l.data[0]`` (an
  error on PyTorch >= 0.5) becomes ``loss_l.item()``; the test phase (``Detect``, softmax, NMS), ``load_weights`` and
  ``build_ssd``'s size-300 check are left out;
- ``MultiBoxLoss.forward``: ``loss_c[pos] = 0`` runs after ``loss_c = loss_c.view(num, -1)`` (the two lines swapped),
  the fix given in https://github.com/amdegroot/ssd.pytorch/issues/292 and #173 for the shape error the original
  order raises on PyTorch >= 0.4;
- ``train.py`` never restarts ``batch_iterator`` and stops with StopIteration after one pass; here a new iterator is
  taken when the loader is exhausted;
- data: VOC is replaced by synthetic 64x64 images made from ``seed``: 1-2 filled rectangles per image, each of one
  of three classes (VOC labels 0-2) told apart by colour, on a noisy grey background, with targets as
  ``VOCAnnotationTransform`` gives them ([xmin, ymin, xmax, ymax] scaled to [0, 1], label); of ``SSDAugmentation``
  only the final ``SubtractMeans(MEANS)`` is kept (photometric distortion, expand, random crop, mirror and cv2
  resize are left out), then HWC -> CHW as ``VOCDetection.pull_item`` does;
- one ``train_step`` is one iteration of the training loop (lr step check, next batch, forward, ``zero_grad``,
  ``loss_l + loss_c``, backward, step); there is no evaluation in train.py, so no ``eval_fn``.
"""
# ruff: noqa: C408, F841, PLC0414, PLR0402, UP004, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from itertools import product as product
from math import sqrt as sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
import torch.utils.data as data
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, BATCH_SIZE = 64, 256, 16
LR, MOMENTUM, WEIGHT_DECAY, GAMMA = 1e-3, 0.9, 5e-4, 0.1


# ---- data/config.py (scaled to 64 pixels, first three feature maps) ------------------------------------------

MEANS = (104, 117, 123)

voc = {
    'num_classes': 21,
    'lr_steps': (80, 100, 120),
    'max_iter': 120,
    'feature_maps': [8, 4, 2],
    'min_dim': 64,
    'steps': [8, 16, 32],
    'min_sizes': [30 * 64 / 300, 60 * 64 / 300, 111 * 64 / 300],
    'max_sizes': [60 * 64 / 300, 111 * 64 / 300, 162 * 64 / 300],
    'aspect_ratios': [[2], [2, 3], [2, 3]],
    'variance': [0.1, 0.2],
    'clip': True,
    'name': 'VOC',
}

coco = {  # only its 'variance' is read here (MultiBoxLoss does `from data import coco as cfg`)
    'num_classes': 201,
    'variance': [0.1, 0.2],
    'name': 'COCO',
}


# ---- layers/box_utils.py -------------------------------------------------------------------------------------

def point_form(boxes):
    """ Convert prior_boxes to (xmin, ymin, xmax, ymax)
    representation for comparison to point form ground truth data.
    """
    return torch.cat((boxes[:, :2] - boxes[:, 2:]/2,     # xmin, ymin
                     boxes[:, :2] + boxes[:, 2:]/2), 1)  # xmax, ymax


def intersect(box_a, box_b):
    """ We resize both tensors to [A,B,2] without new malloc:
    [A,2] -> [A,1,2] -> [A,B,2]
    [B,2] -> [1,B,2] -> [A,B,2]
    Then we compute the area of intersect between box_a and box_b.
    """
    A = box_a.size(0)
    B = box_b.size(0)
    max_xy = torch.min(box_a[:, 2:].unsqueeze(1).expand(A, B, 2),
                       box_b[:, 2:].unsqueeze(0).expand(A, B, 2))
    min_xy = torch.max(box_a[:, :2].unsqueeze(1).expand(A, B, 2),
                       box_b[:, :2].unsqueeze(0).expand(A, B, 2))
    inter = torch.clamp((max_xy - min_xy), min=0)
    return inter[:, :, 0] * inter[:, :, 1]


def jaccard(box_a, box_b):
    """Compute the jaccard overlap of two sets of boxes.  The jaccard overlap
    is simply the intersection over union of two boxes.  Here we operate on
    ground truth boxes and default boxes.
    """
    inter = intersect(box_a, box_b)
    area_a = ((box_a[:, 2]-box_a[:, 0]) *
              (box_a[:, 3]-box_a[:, 1])).unsqueeze(1).expand_as(inter)  # [A,B]
    area_b = ((box_b[:, 2]-box_b[:, 0]) *
              (box_b[:, 3]-box_b[:, 1])).unsqueeze(0).expand_as(inter)  # [A,B]
    union = area_a + area_b - inter
    return inter / union  # [A,B]


def match(threshold, truths, priors, variances, labels, loc_t, conf_t, idx, bug=None):
    """Match each prior box with the ground truth box of the highest jaccard
    overlap, encode the bounding boxes, then return the matched indices
    corresponding to both confidence and location preds.
    """
    # jaccard index
    overlaps = jaccard(
        truths,
        point_form(priors)
    )
    # (Bipartite Matching)
    # [1,num_objects] best prior for each ground truth
    best_prior_overlap, best_prior_idx = overlaps.max(1, keepdim=True)
    # [1,num_priors] best ground truth for each prior
    best_truth_overlap, best_truth_idx = overlaps.max(0, keepdim=True)
    best_truth_idx.squeeze_(0)
    best_truth_overlap.squeeze_(0)
    best_prior_idx.squeeze_(1)
    best_prior_overlap.squeeze_(1)
    best_truth_overlap.index_fill_(0, best_prior_idx, 2)  # ensure best prior
    # TODO refactor: index  best_prior_idx with long tensor
    # ensure every gt matches with its prior of max overlap
    for j in range(best_prior_idx.size(0)):
        best_truth_idx[best_prior_idx[j]] = j
    matches = truths[best_truth_idx]          # Shape: [num_priors,4]
    if bug == "labels_not_offset_for_background":
        conf = labels[best_truth_idx]         # Shape: [num_priors]
    else:
        conf = labels[best_truth_idx] + 1         # Shape: [num_priors]
    conf[best_truth_overlap < threshold] = 0  # label as background
    loc = encode(matches, priors, variances)
    loc_t[idx] = loc    # [num_priors,4] encoded offsets to learn
    conf_t[idx] = conf  # [num_priors] top class label for each prior


def encode(matched, priors, variances):
    """Encode the variances from the priorbox layers into the ground truth boxes
    we have matched (based on jaccard overlap) with the prior boxes.
    """

    # dist b/t match center and prior's center
    g_cxcy = (matched[:, :2] + matched[:, 2:])/2 - priors[:, :2]
    # encode variance
    g_cxcy /= (variances[0] * priors[:, 2:])
    # match wh / prior wh
    g_wh = (matched[:, 2:] - matched[:, :2]) / priors[:, 2:]
    g_wh = torch.log(g_wh) / variances[1]
    # return target for smooth_l1_loss
    return torch.cat([g_cxcy, g_wh], 1)  # [num_priors,4]


def log_sum_exp(x):
    """Utility function for computing log_sum_exp while determining
    This will be used to determine unaveraged confidence loss across
    all examples in a batch.
    """
    x_max = x.data.max()
    return torch.log(torch.sum(torch.exp(x-x_max), 1, keepdim=True)) + x_max


# ---- layers/functions/prior_box.py ---------------------------------------------------------------------------

class PriorBox(object):
    """Compute priorbox coordinates in center-offset form for each source
    feature map.
    """
    def __init__(self, cfg):
        super(PriorBox, self).__init__()
        self.image_size = cfg['min_dim']
        # number of priors for feature map location (either 4 or 6)
        self.num_priors = len(cfg['aspect_ratios'])
        self.variance = cfg['variance'] or [0.1]
        self.feature_maps = cfg['feature_maps']
        self.min_sizes = cfg['min_sizes']
        self.max_sizes = cfg['max_sizes']
        self.steps = cfg['steps']
        self.aspect_ratios = cfg['aspect_ratios']
        self.clip = cfg['clip']
        self.version = cfg['name']
        for v in self.variance:
            if v <= 0:
                raise ValueError('Variances must be greater than 0')

    def forward(self):
        mean = []
        for k, f in enumerate(self.feature_maps):
            for i, j in product(range(f), repeat=2):
                f_k = self.image_size / self.steps[k]
                # unit center x,y
                cx = (j + 0.5) / f_k
                cy = (i + 0.5) / f_k

                # aspect_ratio: 1
                # rel size: min_size
                s_k = self.min_sizes[k]/self.image_size
                mean += [cx, cy, s_k, s_k]

                # aspect_ratio: 1
                # rel size: sqrt(s_k * s_(k+1))
                s_k_prime = sqrt(s_k * (self.max_sizes[k]/self.image_size))
                mean += [cx, cy, s_k_prime, s_k_prime]

                # rest of aspect ratios
                for ar in self.aspect_ratios[k]:
                    mean += [cx, cy, s_k*sqrt(ar), s_k/sqrt(ar)]
                    mean += [cx, cy, s_k/sqrt(ar), s_k*sqrt(ar)]
        # back to torch land
        output = torch.Tensor(mean).view(-1, 4)
        if self.clip:
            output.clamp_(max=1, min=0)
        return output


# ---- layers/modules/l2norm.py --------------------------------------------------------------------------------

class L2Norm(nn.Module):
    def __init__(self,n_channels, scale):
        super(L2Norm,self).__init__()
        self.n_channels = n_channels
        self.gamma = scale or None
        self.eps = 1e-10
        self.weight = nn.Parameter(torch.Tensor(self.n_channels))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight,self.gamma)

    def forward(self, x):
        norm = x.pow(2).sum(dim=1, keepdim=True).sqrt()+self.eps
        #x /= norm
        x = torch.div(x,norm)
        out = self.weight.unsqueeze(0).unsqueeze(2).unsqueeze(3).expand_as(x) * x
        return out


# ---- layers/modules/multibox_loss.py -------------------------------------------------------------------------

class MultiBoxLoss(nn.Module):
    """SSD Weighted Loss Function
    Compute Targets:
        1) Produce Confidence Target Indices by matching  ground truth boxes
           with (default) 'priorboxes' that have jaccard index > threshold parameter
           (default threshold: 0.5).
        2) Produce localization target by 'encoding' variance into offsets of ground
           truth boxes and their matched  'priorboxes'.
        3) Hard negative mining to filter the excessive number of negative examples
           that comes with using a large number of default bounding boxes.
           (default negative:positive ratio 3:1)
    Objective Loss:
        L(x,c,l,g) = (Lconf(x, c) + αLloc(x,l,g)) / N
        Where, Lconf is the CrossEntropy Loss and Lloc is the SmoothL1 Loss
        weighted by α which is set to 1 by cross val.
    """

    def __init__(self, num_classes, overlap_thresh, prior_for_matching,
                 bkg_label, neg_mining, neg_pos, neg_overlap, encode_target,
                 use_gpu=True, bug=None):
        super(MultiBoxLoss, self).__init__()
        self.use_gpu = use_gpu
        self.num_classes = num_classes
        self.threshold = overlap_thresh
        self.background_label = bkg_label
        self.encode_target = encode_target
        self.use_prior_for_matching = prior_for_matching
        self.do_neg_mining = neg_mining
        self.negpos_ratio = neg_pos
        self.neg_overlap = neg_overlap
        self.variance = coco['variance']
        self.bug = bug

    def forward(self, predictions, targets):
        """Multibox Loss
        Args:
            predictions (tuple): A tuple containing loc preds, conf preds,
            and prior boxes from SSD net.
                conf shape: torch.size(batch_size,num_priors,num_classes)
                loc shape: torch.size(batch_size,num_priors,4)
                priors shape: torch.size(num_priors,4)

            targets (tensor): Ground truth boxes and labels for a batch,
                shape: [batch_size,num_objs,5] (last idx is the label).
        """
        loc_data, conf_data, priors = predictions
        num = loc_data.size(0)
        priors = priors[:loc_data.size(1), :]
        num_priors = (priors.size(0))
        num_classes = self.num_classes

        # match priors (default boxes) and ground truth boxes
        loc_t = torch.Tensor(num, num_priors, 4)
        conf_t = torch.LongTensor(num, num_priors)
        for idx in range(num):
            truths = targets[idx][:, :-1].data
            labels = targets[idx][:, -1].data
            defaults = priors.data
            match(self.threshold, truths, defaults, self.variance, labels,
                  loc_t, conf_t, idx, bug=self.bug)
        if self.use_gpu:
            loc_t = loc_t.cuda()
            conf_t = conf_t.cuda()
        # wrap targets
        loc_t = Variable(loc_t, requires_grad=False)
        conf_t = Variable(conf_t, requires_grad=False)

        pos = conf_t > 0
        num_pos = pos.sum(dim=1, keepdim=True)

        # Localization Loss (Smooth L1)
        # Shape: [batch,num_priors,4]
        pos_idx = pos.unsqueeze(pos.dim()).expand_as(loc_data)
        loc_p = loc_data[pos_idx].view(-1, 4)
        loc_t = loc_t[pos_idx].view(-1, 4)
        loss_l = F.smooth_l1_loss(loc_p, loc_t, size_average=False)

        # Compute max conf across batch for hard negative mining
        batch_conf = conf_data.view(-1, self.num_classes)
        loss_c = log_sum_exp(batch_conf) - batch_conf.gather(1, conf_t.view(-1, 1))

        # Hard Negative Mining
        loss_c = loss_c.view(num, -1)  # swapped with the next line: ssd.pytorch issue #292
        loss_c[pos] = 0  # filter out pos boxes for now
        if self.bug == "negatives_mined_ascending":
            _, loss_idx = loss_c.sort(1)  # the easiest negatives ranked first
        else:
            _, loss_idx = loss_c.sort(1, descending=True)
        _, idx_rank = loss_idx.sort(1)
        num_pos = pos.long().sum(1, keepdim=True)
        num_neg = torch.clamp(self.negpos_ratio*num_pos, max=pos.size(1)-1)
        neg = idx_rank < num_neg.expand_as(idx_rank)

        # Confidence Loss Including Positive and Negative Examples
        pos_idx = pos.unsqueeze(2).expand_as(conf_data)
        neg_idx = neg.unsqueeze(2).expand_as(conf_data)
        conf_p = conf_data[(pos_idx+neg_idx).gt(0)].view(-1, self.num_classes)
        targets_weighted = conf_t[(pos+neg).gt(0)]
        loss_c = F.cross_entropy(conf_p, targets_weighted, size_average=False)

        # Sum of losses: L(x,c,l,g) = (Lconf(x, c) + αLloc(x,l,g)) / N

        N = num_pos.data.sum()
        loss_l /= N
        loss_c /= N
        return loss_l, loss_c


# ---- ssd.py --------------------------------------------------------------------------------------------------

class SSD(nn.Module):
    """Single Shot Multibox Architecture
    The network is composed of a base VGG network followed by the
    added multibox conv layers.  Each multibox layer branches into
        1) conv2d for class conf scores
        2) conv2d for localization predictions
        3) associated priorbox layer to produce default bounding
           boxes specific to the layer's feature map size.
    """

    def __init__(self, phase, size, base, extras, head, num_classes):
        super(SSD, self).__init__()
        self.phase = phase
        self.num_classes = num_classes
        self.cfg = (coco, voc)[num_classes == 21]
        self.priorbox = PriorBox(self.cfg)
        self.priors = Variable(self.priorbox.forward(), volatile=True)
        self.size = size

        # SSD network
        self.vgg = nn.ModuleList(base)
        # Layer learns to scale the l2 normalized features from conv4_3
        self.L2Norm = L2Norm(64, 20)
        self.extras = nn.ModuleList(extras)

        self.loc = nn.ModuleList(head[0])
        self.conf = nn.ModuleList(head[1])

    def forward(self, x):
        """Applies network layers and ops on input image(s) x.

        Return:
            train:
                list of concat outputs from:
                    1: confidence layers, Shape: [batch*num_priors,num_classes]
                    2: localization layers, Shape: [batch,num_priors*4]
                    3: priorbox layers, Shape: [2,num_priors*4]
        """
        sources = list()
        loc = list()
        conf = list()

        # apply vgg up to conv4_3 relu
        for k in range(23):
            x = self.vgg[k](x)

        s = self.L2Norm(x)
        sources.append(s)

        # apply vgg up to fc7
        for k in range(23, len(self.vgg)):
            x = self.vgg[k](x)
        sources.append(x)

        # apply extra layers and cache source layer outputs
        for k, v in enumerate(self.extras):
            x = F.relu(v(x), inplace=True)
            if k % 2 == 1:
                sources.append(x)

        # apply multibox head to source layers
        for (x, l, c) in zip(sources, self.loc, self.conf):
            loc.append(l(x).permute(0, 2, 3, 1).contiguous())
            conf.append(c(x).permute(0, 2, 3, 1).contiguous())

        loc = torch.cat([o.view(o.size(0), -1) for o in loc], 1)
        conf = torch.cat([o.view(o.size(0), -1) for o in conf], 1)
        output = (
            loc.view(loc.size(0), -1, 4),
            conf.view(conf.size(0), -1, self.num_classes),
            self.priors
        )
        return output


# This function is derived from torchvision VGG make_layers()
# https://github.com/pytorch/vision/blob/master/torchvision/models/vgg.py
def vgg(cfg, i, batch_norm=False):
    layers = []
    in_channels = i
    for v in cfg:
        if v == 'M':
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        elif v == 'C':
            layers += [nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True)]
        else:
            conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = v
    pool5 = nn.MaxPool2d(kernel_size=3, stride=1, padding=1)
    conv6 = nn.Conv2d(64, 128, kernel_size=3, padding=6, dilation=6)
    conv7 = nn.Conv2d(128, 128, kernel_size=1)
    layers += [pool5, conv6,
               nn.ReLU(inplace=True), conv7, nn.ReLU(inplace=True)]
    return layers


def add_extras(cfg, i, batch_norm=False):
    # Extra layers added to VGG for feature scaling
    layers = []
    in_channels = i
    flag = False
    for k, v in enumerate(cfg):
        if in_channels != 'S':
            if v == 'S':
                layers += [nn.Conv2d(in_channels, cfg[k + 1],
                           kernel_size=(1, 3)[flag], stride=2, padding=1)]
            else:
                layers += [nn.Conv2d(in_channels, v, kernel_size=(1, 3)[flag])]
            flag = not flag
        in_channels = v
    return layers


def multibox(vgg, extra_layers, cfg, num_classes):
    loc_layers = []
    conf_layers = []
    vgg_source = [21, -2]
    for k, v in enumerate(vgg_source):
        loc_layers += [nn.Conv2d(vgg[v].out_channels,
                                 cfg[k] * 4, kernel_size=3, padding=1)]
        conf_layers += [nn.Conv2d(vgg[v].out_channels,
                        cfg[k] * num_classes, kernel_size=3, padding=1)]
    for k, v in enumerate(extra_layers[1::2], 2):
        loc_layers += [nn.Conv2d(v.out_channels, cfg[k]
                                 * 4, kernel_size=3, padding=1)]
        conf_layers += [nn.Conv2d(v.out_channels, cfg[k]
                                  * num_classes, kernel_size=3, padding=1)]
    return vgg, extra_layers, (loc_layers, conf_layers)


base = {
    '64': [8, 8, 'M', 16, 16, 'M', 32, 32, 32, 'C', 64, 64, 64, 'M',
           64, 64, 64],
}
extras = {
    '64': [32, 'S', 64],
}
mbox = {
    '64': [4, 6, 6],  # number of boxes per feature map location
}


def build_ssd(phase, size=64, num_classes=21):
    base_, extras_, head_ = multibox(vgg(base[str(size)], 3),
                                     add_extras(extras[str(size)], 128),
                                     mbox[str(size)], num_classes)
    return SSD(phase, size, base_, extras_, head_, num_classes)


# ---- data: synthetic VOC-like detection images, detection_collate ---------------------------------------------

COLOURS = np.array([[40, 40, 220], [40, 200, 40], [220, 60, 40]], dtype=np.float32)  # BGR per class 0, 1, 2


class ShapesDetection(data.Dataset):
    """VOCDetection stand-in: pull_item's (img, target) with target rows [xmin, ymin, xmax, ymax, label] in [0, 1]."""

    def __init__(self, seed, n):
        rng = np.random.RandomState(seed)
        self.items = []
        for _ in range(n):
            img = 128 + 25 * rng.randn(IMG, IMG, 3).astype(np.float32)
            boxes = []
            for _ in range(rng.randint(1, 3)):
                w, h = rng.uniform(0.15, 0.45, size=2)
                x0, y0 = rng.uniform(0, 1 - w), rng.uniform(0, 1 - h)
                label = rng.randint(0, 3)
                c0, r0, c1, r1 = (round(v * IMG) for v in (x0, y0, x0 + w, y0 + h))
                img[r0:r1, c0:c1] = COLOURS[label] + 10 * rng.randn(r1 - r0, c1 - c0, 3)
                boxes.append([c0 / IMG, r0 / IMG, c1 / IMG, r1 / IMG, label])
            self.items.append((img, np.array(boxes, dtype=np.float32)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        img, target = self.items[index]
        img = img - np.array(MEANS, dtype=np.float32)  # SSDAugmentation's SubtractMeans
        return torch.from_numpy(img).permute(2, 0, 1), target


def detection_collate(batch):
    """Custom collate fn for dealing with batches of images that have a different
    number of associated object annotations (bounding boxes).
    """
    targets = []
    imgs = []
    for sample in batch:
        imgs.append(sample[0])
        targets.append(torch.FloatTensor(sample[1]))
    return torch.stack(imgs, 0), targets


# ---- train.py ------------------------------------------------------------------------------------------------

def xavier(param):
    init.xavier_uniform(param)


def weights_init(m):
    if isinstance(m, nn.Conv2d):
        xavier(m.weight.data)
        m.bias.data.zero_()


def adjust_learning_rate(optimizer, gamma, step):
    """Sets the learning rate to the initial LR decayed by 10 at every
        specified step
    """
    lr = LR * (gamma ** (step))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def _build(seed, bug=None):
    torch.manual_seed(seed)
    cfg = voc
    dataset = ShapesDetection(seed, N_TRAIN)

    ssd_net = build_ssd('train', cfg['min_dim'], cfg['num_classes'])
    net = ssd_net

    # initialize newly added layers' weights with xavier method
    ssd_net.vgg.apply(weights_init)  # in place of ssd_net.vgg.load_state_dict(vgg_weights): no pretrained base
    ssd_net.extras.apply(weights_init)
    ssd_net.loc.apply(weights_init)
    ssd_net.conf.apply(weights_init)

    optimizer = optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM,
                          weight_decay=WEIGHT_DECAY)
    criterion = MultiBoxLoss(cfg['num_classes'], 0.5, True, 0, True, 3, 0.5,
                             False, False, bug=bug)

    net.train()
    data_loader = data.DataLoader(dataset, BATCH_SIZE,
                                  num_workers=0,
                                  shuffle=True, collate_fn=detection_collate,
                                  pin_memory=False, generator=torch.Generator().manual_seed(seed))
    state = {"batch_iterator": iter(data_loader), "iteration": 0, "step_index": 0,
             "loc_loss": 0.0, "conf_loss": 0.0}

    def train_step():
        iteration = state["iteration"]
        if iteration in cfg['lr_steps']:
            state["step_index"] += 1
            adjust_learning_rate(optimizer, GAMMA, state["step_index"])

        # load train data
        try:
            images, targets = next(state["batch_iterator"])
        except StopIteration:
            state["batch_iterator"] = iter(data_loader)
            images, targets = next(state["batch_iterator"])

        images = Variable(images)
        targets = [Variable(ann, volatile=True) for ann in targets]
        # forward
        out = net(images)
        # backprop
        optimizer.zero_grad()
        loss_l, loss_c = criterion(out, targets)
        loss = loss_l + loss_c
        loss.backward()
        optimizer.step()
        state["loc_loss"] += loss_l.item()
        state["conf_loss"] += loss_c.item()
        state["iteration"] += 1
        return loss.detach()

    def loss_fn(out, targets):
        loss_l, loss_c = criterion(out, targets)
        return loss_l + loss_c

    first = detection_collate([dataset[i] for i in range(BATCH_SIZE)])
    return Program(name="ssdpytorch_multibox", model=ssd_net, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=data_loader)


build = functools.partial(_build)

BUGS = [
    # the `+ 1` dropped from `conf = labels[best_truth_idx] + 1`: class 0 objects become background and every other
    # class is shifted by one. The line is the repository's (https://github.com/amdegroot/ssd.pytorch/issues/404,
    # #17); a fork that lost the offset is https://github.com/lzx1413/PytorchSSD/issues/7 ("box label bug").
    Bug("labels_not_offset_for_background", functools.partial(_build, bug="labels_not_offset_for_background"),
        "learning_ledger", ("TASK",)),
    # hard negative mining sorts the confidence losses ascending: the 3:1 negatives kept are the easiest ones, not
    # the hardest, so the confidence loss trains on negatives the model already gets right (classic).
    Bug("negatives_mined_ascending", functools.partial(_build, bug="negatives_mined_ascending"), "learning_ledger",
        ("OBJECTIVE",)),
]
