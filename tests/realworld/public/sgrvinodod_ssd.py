# ruff: noqa: UP008, C408
"""SSD300 from sgrvinod/a-PyTorch-Tutorial-to-Object-Detection (``train.py``): a VGG-16 base with atrous fc6/fc7
convolutions, auxiliary convolutions down to 1x1, per-map localization and class prediction convolutions over 8732
prior boxes (six feature maps, several aspect ratios, the L2-normed conv4_3 with learned rescale factors), trained
with ``MultiBoxLoss`` (priors matched to objects by Jaccard overlap at 0.5 with each object forced onto its best prior,
offsets encoded against the priors with the 10/5 variances, an L1 localization loss over positives, cross-entropy
over positives and the hard negatives mined at 3:1, normalized by the positives), SGD with momentum, weight decay and
twice the rate for biases, the rate decayed by 10 at fixed iterations.

Source: https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Object-Detection
Commit: 5d5b75968c3cf1ffd2718bf828a7560b7ee8e8b5
Files: ``train.py`` (``main``, ``train``, the learning parameters), ``model.py`` (``SSD300`` and its parts, in the
helper ``_sgrvinod_ssd.py``; ``MultiBoxLoss``), ``utils.py`` (``xy_to_cxcy``, ``cxcy_to_xy``, ``cxcy_to_gcxgcy``,
``gcxgcy_to_cxcy``, ``find_intersection``, ``find_jaccard_overlap``, ``adjust_learning_rate``, ``resize``' percent
coordinates and ``transform``'s normalization), ``datasets.py`` (``PascalVOCDataset.__getitem__``, ``collate_fn``)
License: MIT (Copyright (c) 2019 Sagar Vinodababu; full text in LICENSES/sgrvinod-a-PyTorch-Tutorial-to-Object-Detection.txt)
Domain: vision, object detection (SSD head: prior matching, hard negative mining)

Kept as written: ``SSD300`` (see ``_sgrvinod_ssd.py``), ``MultiBoxLoss`` (its ``nn.L1Loss`` and the per-image
matching loop), the box utilities, the optimizer (``biases`` at ``2 * lr`` and ``not_biases``, ``SGD(lr=1e-3,
momentum=0.9, weight_decay=5e-4)``), the conversion of iterations to epochs and
``adjust_learning_rate`` at ``decay_lr_at``, ``train``'s loop body (forward, criterion, zero_grad, backward, the
``grad_clip = None`` branch, step), ``model.train()`` at each epoch, ``collate_fn``.

Deviations from the original:
- Pascal VOC is not here: ``PascalVOCDataset`` reads in-memory scenes made from ``seed``: 300x300 images of a noisy
  grey background with 1-2 axis-aligned rectangles whose colour (red, green, blue) is their class, ``label_map`` of
  these 3 classes plus background (``n_classes`` 21 -> 4), boxes in percent coordinates as ``resize`` returns them,
  no difficult objects;
- ``transform``'s training augmentations (photometric distortion, expand, random crop, flip) need PIL and
  torchvision: left out; the ImageNet normalization is kept, written out;
- sizes for 2 CPU cores: every channel count of ``SSD300`` divided by 16, no ImageNet VGG-16 weights
  (``load_pretrained_layers`` needs torchvision's download), batch 8 -> 4, 32 training images, ``iterations``
  120000 -> 240 and ``decay_lr_at`` [80000, 100000] -> [160, 200] (the same fractions); ``.to(device)`` on CPU;
- the timing meters, prints, ``save_checkpoint`` and the checkpoint branch are dropped; ``main``'s epoch loop is
  unrolled: one ``train_step`` is one batch of ``train`` (``adjust_learning_rate`` and ``model.train()`` at the start
  of an epoch); ``train.py`` has no evaluation, so there is no ``eval_fn``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.utils.data
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _sgrvinod_ssd import SSD300

device = torch.device("cpu")
voc_labels = ('red', 'green', 'blue')  # (port) the synthetic classes
label_map = {k: v + 1 for v, k in enumerate(voc_labels)}
label_map['background'] = 0
N_IMAGES = 32
SELF_CHECK_STEPS = 40


# utils.py
def xy_to_cxcy(xy):
    return torch.cat([(xy[:, 2:] + xy[:, :2]) / 2,  # c_x, c_y
                      xy[:, 2:] - xy[:, :2]], 1)  # w, h


def cxcy_to_xy(cxcy):
    return torch.cat([cxcy[:, :2] - (cxcy[:, 2:] / 2),  # x_min, y_min
                      cxcy[:, :2] + (cxcy[:, 2:] / 2)], 1)  # x_max, y_max


def cxcy_to_gcxgcy(cxcy, priors_cxcy):

    # The 10 and 5 below are referred to as 'variances' in the original Caffe repo, completely empirical
    # They are for some sort of numerical conditioning, for 'scaling the localization gradient'
    # See https://github.com/weiliu89/caffe/issues/155
    return torch.cat([(cxcy[:, :2] - priors_cxcy[:, :2]) / (priors_cxcy[:, 2:] / 10),  # g_c_x, g_c_y
                      torch.log(cxcy[:, 2:] / priors_cxcy[:, 2:]) * 5], 1)  # g_w, g_h


def gcxgcy_to_cxcy(gcxgcy, priors_cxcy):

    return torch.cat([gcxgcy[:, :2] * priors_cxcy[:, 2:] / 10 + priors_cxcy[:, :2],  # c_x, c_y
                      torch.exp(gcxgcy[:, 2:] / 5) * priors_cxcy[:, 2:]], 1)  # w, h


def find_intersection(set_1, set_2):

    # PyTorch auto-broadcasts singleton dimensions
    lower_bounds = torch.max(set_1[:, :2].unsqueeze(1), set_2[:, :2].unsqueeze(0))  # (n1, n2, 2)
    upper_bounds = torch.min(set_1[:, 2:].unsqueeze(1), set_2[:, 2:].unsqueeze(0))  # (n1, n2, 2)
    intersection_dims = torch.clamp(upper_bounds - lower_bounds, min=0)  # (n1, n2, 2)
    return intersection_dims[:, :, 0] * intersection_dims[:, :, 1]  # (n1, n2)


def find_jaccard_overlap(set_1, set_2):

    # Find intersections
    intersection = find_intersection(set_1, set_2)  # (n1, n2)

    # Find areas of each box in both sets
    areas_set_1 = (set_1[:, 2] - set_1[:, 0]) * (set_1[:, 3] - set_1[:, 1])  # (n1)
    areas_set_2 = (set_2[:, 2] - set_2[:, 0]) * (set_2[:, 3] - set_2[:, 1])  # (n2)

    # Find the union
    # PyTorch auto-broadcasts singleton dimensions
    union = areas_set_1.unsqueeze(1) + areas_set_2.unsqueeze(0) - intersection  # (n1, n2)

    return intersection / union  # (n1, n2)


def adjust_learning_rate(optimizer, scale):
    for param_group in optimizer.param_groups:
        param_group['lr'] = param_group['lr'] * scale
    # (port) the print of the new rate dropped


# model.py
class MultiBoxLoss(nn.Module):

    def __init__(self, priors_cxcy, threshold=0.5, neg_pos_ratio=3, alpha=1., bug=None):
        super(MultiBoxLoss, self).__init__()
        self.bug = bug
        self.priors_cxcy = priors_cxcy
        self.priors_xy = cxcy_to_xy(priors_cxcy)
        self.threshold = threshold
        self.neg_pos_ratio = neg_pos_ratio
        self.alpha = alpha

        self.smooth_l1 = nn.L1Loss()  # *smooth* L1 loss in the paper; see Remarks section in the tutorial
        self.cross_entropy = nn.CrossEntropyLoss(reduce=False)

    def forward(self, predicted_locs, predicted_scores, boxes, labels):
        batch_size = predicted_locs.size(0)
        n_priors = self.priors_cxcy.size(0)
        n_classes = predicted_scores.size(2)

        assert n_priors == predicted_locs.size(1) == predicted_scores.size(1)

        true_locs = torch.zeros((batch_size, n_priors, 4), dtype=torch.float).to(device)  # (N, 8732, 4)
        true_classes = torch.zeros((batch_size, n_priors), dtype=torch.long).to(device)  # (N, 8732)

        # For each image
        for i in range(batch_size):
            n_objects = boxes[i].size(0)

            overlap = find_jaccard_overlap(boxes[i],
                                           self.priors_xy)  # (n_objects, 8732)

            # For each prior, find the object that has the maximum overlap
            overlap_for_each_prior, object_for_each_prior = overlap.max(dim=0)  # (8732)

            # We don't want a situation where an object is not represented in our positive (non-background) priors -
            # 1. An object might not be the best object for all priors, and is therefore not in object_for_each_prior.
            # 2. All priors with the object may be assigned as background based on the threshold (0.5).

            # To remedy this -
            # First, find the prior that has the maximum overlap for each object.
            _, prior_for_each_object = overlap.max(dim=1)  # (N_o)

            # Then, assign each object to the corresponding maximum-overlap-prior. (This fixes 1.)
            object_for_each_prior[prior_for_each_object] = torch.LongTensor(range(n_objects)).to(device)

            # To ensure these priors qualify, artificially give them an overlap of greater than 0.5. (This fixes 2.)
            overlap_for_each_prior[prior_for_each_object] = 1.

            # Labels for each prior
            label_for_each_prior = labels[i][object_for_each_prior]  # (8732)
            # Set priors whose overlaps with objects are less than the threshold to be background (no object)
            label_for_each_prior[overlap_for_each_prior < self.threshold] = 0  # (8732)

            # Store
            true_classes[i] = label_for_each_prior

            # Encode center-size object coordinates into the form we regressed predicted boxes to
            true_locs[i] = cxcy_to_gcxgcy(xy_to_cxcy(boxes[i][object_for_each_prior]), self.priors_cxcy)  # (8732, 4)

        # Identify priors that are positive (object/non-background)
        positive_priors = true_classes != 0  # (N, 8732)

        # LOCALIZATION LOSS

        # Localization loss is computed only over positive (non-background) priors
        loc_loss = self.smooth_l1(predicted_locs[positive_priors], true_locs[positive_priors])  # (), scalar

        # Note: indexing with a torch.uint8 (byte) tensor flattens the tensor when indexing is across multiple dimensions (N & 8732)
        # So, if predicted_locs has the shape (N, 8732, 4), predicted_locs[positive_priors] will have (total positives, 4)

        # CONFIDENCE LOSS

        # Confidence loss is computed over positive priors and the most difficult (hardest) negative priors in each image
        # That is, FOR EACH IMAGE,
        # we will take the hardest (neg_pos_ratio * n_positives) negative priors, i.e where there is maximum loss
        # This is called Hard Negative Mining - it concentrates on hardest negatives in each image, and also minimizes pos/neg imbalance

        # Number of positive and hard-negative priors per image
        n_positives = positive_priors.sum(dim=1)  # (N)
        n_hard_negatives = self.neg_pos_ratio * n_positives  # (N)

        # First, find the loss for all priors
        conf_loss_all = self.cross_entropy(predicted_scores.view(-1, n_classes), true_classes.view(-1))  # (N * 8732)
        conf_loss_all = conf_loss_all.view(batch_size, n_priors)  # (N, 8732)

        # We already know which priors are positive
        conf_loss_pos = conf_loss_all[positive_priors]  # (sum(n_positives))

        # Next, find which priors are hard-negative
        # To do this, sort ONLY negative priors in each image in order of decreasing loss and take top n_hard_negatives
        conf_loss_neg = conf_loss_all.clone()  # (N, 8732)
        if self.bug != "positives_mined_as_negatives":
            conf_loss_neg[positive_priors] = 0.  # (N, 8732), positive priors are ignored (never in top n_hard_negatives)
        conf_loss_neg, _ = conf_loss_neg.sort(dim=1, descending=True)  # (N, 8732), sorted by decreasing hardness
        hardness_ranks = torch.LongTensor(range(n_priors)).unsqueeze(0).expand_as(conf_loss_neg).to(device)  # (N, 8732)
        hard_negatives = hardness_ranks < n_hard_negatives.unsqueeze(1)  # (N, 8732)
        conf_loss_hard_neg = conf_loss_neg[hard_negatives]  # (sum(n_hard_negatives))

        # As in the paper, averaged over positive priors only, although computed over both positive and hard-negative priors
        conf_loss = (conf_loss_hard_neg.sum() + conf_loss_pos.sum()) / n_positives.sum().float()  # (), scalar

        # TOTAL LOSS

        return conf_loss + self.alpha * loc_loss


def _scenes(gen):
    """(port) In place of the VOC images and their json lists: 1-2 coloured rectangles on a noisy grey field."""
    images = 0.45 + 0.08 * torch.randn(N_IMAGES, 3, 300, 300, generator=gen)
    all_boxes, all_labels = [], []
    for n in range(N_IMAGES):
        k = int(torch.randint(1, 3, (1,), generator=gen))
        wh = 0.2 + 0.3 * torch.rand(k, 2, generator=gen)
        xy = torch.rand(k, 2, generator=gen) * (1 - wh)
        boxes = torch.cat([xy, xy + wh], 1)  # fractional (x_min, y_min, x_max, y_max), as resize() returns them
        labels = torch.randint(1, len(label_map), (k,), generator=gen)
        for (x0, y0, x1, y1), c in zip((boxes * 300).round().long().tolist(), labels.tolist()):
            images[n, :, y0:y1, x0:x1] = 0.15 + 0.7 * torch.eye(3)[c - 1].view(3, 1, 1)
        all_boxes.append(boxes)
        all_labels.append(labels)
    return images.clamp(0, 1), all_boxes, all_labels


class PascalVOCDataset(torch.utils.data.Dataset):
    """(port) The dataset of datasets.py over the in-memory scenes; ``transform`` reduced to its normalization."""

    def __init__(self, scenes, split, keep_difficult=False, bug=None):
        self.split = split.upper()
        self.images, self.objects_boxes, self.objects_labels = scenes
        self.keep_difficult = keep_difficult
        self.bug = bug

    def __getitem__(self, i):
        image = self.images[i]
        boxes = self.objects_boxes[i]  # (n_objects, 4)
        labels = self.objects_labels[i]  # (n_objects)
        if self.bug == "labels_not_offset_for_background":
            labels = labels - 1  # class indices counted from 0, as if label_map had no background entry
        difficulties = torch.zeros_like(labels, dtype=torch.uint8)  # (n_objects)

        mean = [0.485, 0.456, 0.406]
        std = [0.229, 0.224, 0.225]
        image = (image - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)  # FT.normalize
        return image, boxes, labels, difficulties

    def __len__(self):
        return len(self.images)

    def collate_fn(self, batch):
        images = list()
        boxes = list()
        labels = list()
        difficulties = list()

        for b in batch:
            images.append(b[0])
            boxes.append(b[1])
            labels.append(b[2])
            difficulties.append(b[3])

        images = torch.stack(images, dim=0)

        return images, boxes, labels, difficulties  # tensor (N, 3, 300, 300), 3 lists of N tensors each


# train.py's learning parameters
n_classes = len(label_map)  # number of different types of objects
batch_size = 4  # (port) 8
iterations = 240  # (port) 120000
lr = 1e-3  # learning rate
decay_lr_at = [160, 200]  # (port) [80000, 100000]
decay_lr_to = 0.1  # decay learning rate to this fraction of the existing learning rate
momentum = 0.9  # momentum
weight_decay = 5e-4  # weight decay
grad_clip = None


def _build(seed, bug=None):
    torch.manual_seed(seed)
    model = SSD300(n_classes=n_classes)
    # Initialize the optimizer, with twice the default learning rate for biases, as in the original Caffe repo
    biases = list()
    not_biases = list()
    for param_name, param in model.named_parameters():
        if param.requires_grad:
            if param_name.endswith('.bias'):
                biases.append(param)
            else:
                not_biases.append(param)
    optimizer = torch.optim.SGD(params=[{'params': biases, 'lr': 2 * lr}, {'params': not_biases}],
                                lr=lr, momentum=momentum, weight_decay=weight_decay)
    criterion = MultiBoxLoss(priors_cxcy=model.priors_cxcy, bug=bug).to(device)

    train_dataset = PascalVOCDataset(_scenes(torch.Generator().manual_seed(seed)), split='train', bug=bug)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True,
                                               collate_fn=train_dataset.collate_fn,
                                               generator=torch.Generator().manual_seed(seed))
    epochs = iterations // (len(train_dataset) // 32)  # noqa: F841
    decay_epochs = [it // (len(train_dataset) // 32) for it in decay_lr_at]  # (port) main()'s decay_lr_at
    state = {"it": None, "epoch": 0}

    def train_step():
        try:
            images, boxes, labels, _ = next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                state["epoch"] += 1
            if state["epoch"] in decay_epochs:
                adjust_learning_rate(optimizer, decay_lr_to)
            model.train()  # training mode enables dropout
            state["it"] = iter(train_loader)
            images, boxes, labels, _ = next(state["it"])

        # Forward prop.
        predicted_locs, predicted_scores = model(images)  # (N, 8732, 4), (N, 8732, n_classes)
        # Loss
        loss = criterion(predicted_locs, predicted_scores, boxes, labels)  # scalar
        # Backward prop.
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        # Clip gradients, if necessary
        if grad_clip is not None:
            clip_gradient(optimizer, grad_clip)  # noqa: F821
        # Update model
        optimizer.step()
        return loss.detach()

    first = train_dataset.collate_fn([train_dataset[i] for i in range(batch_size)])

    return Program(name="sgrvinodod_ssd", model=model, batch=(first[0], (first[1], first[2])),
                   loss_fn=lambda out, targets: criterion(out[0], out[1], targets[0], targets[1]),
                   optimizer=optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the object labels counted from 0 although label 0 is the background class of MultiBoxLoss: every
    # object of the first class is matched as background and each other class is learned under its neighbour's id.
    Bug("labels_not_offset_for_background", functools.partial(_build, bug="labels_not_offset_for_background"),
        "learning_ledger", ("TASK",)),
    # classic: the positives' losses not zeroed before mining, so the hard "negatives" are mostly the positive
    # priors again and the background is hardly trained against.
    Bug("positives_mined_as_negatives", functools.partial(_build, bug="positives_mined_as_negatives"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: zero_grad moved between backward and step: every step applies only the weight decay.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
