"""Mean Teacher for semi-supervised medical image segmentation, HiLab-git/SSL4MIS's ``train_mean_teacher_2D.py``
(the ACDC recipe of ``train_acdc_unet_semi_seg.sh``: ``--num_classes 4 --labeled_num 7``): a 2D U-Net student
trained on a ``TwoStreamBatchSampler`` batch (labeled slices first, unlabeled after) with ``0.5 * (Dice + CE)`` on
the labeled part plus a sigmoid-ramped MSE between the student's softmax on the unlabeled slices and the softmax of
an EMA teacher (parameters ``detach_()``-ed, updated by ``update_ema_variables`` after every step) on the same
slices with clamped Gaussian noise; SGD (momentum 0.9, weight decay 1e-4) with the poly learning rate set after
every step; ``RandomGenerator`` augmentation (random rot90 + flip or a random rotation, zoom to the patch size).

Source: https://github.com/HiLab-git/SSL4MIS
Commit: 06df6047a59aba9988ced8331998b5957ecb356b
Files: code/train_mean_teacher_2D.py, code/networks/unet.py and code/utils/losses.py (``UNet`` and ``DiceLoss``, in
the helper ``_ssl4mis.py``), code/networks/net_factory.py, code/dataloaders/dataset.py, code/val_2D.py,
code/train_acdc_unet_semi_seg.sh
License: MIT (Copyright (c) 2020 xdluo; full text in LICENSES/HiLab-git-SSL4MIS.txt)
Domain: vision, semi-supervised semantic segmentation (Mean Teacher: EMA teacher, consistency ramp-up)

Kept as written: ``ConvBlock`` / ``DownBlock`` / ``UpBlock`` / ``Encoder`` / ``Decoder`` / ``UNet`` (transposed-conv
up-sampling, the dropout rates), ``DiceLoss``, ``random_rot_flip`` / ``random_rotate`` / ``RandomGenerator``,
``update_ema_variables`` (the true average first, then ``ema_decay`` 0.99), ``create_model(ema=True)``, the loop body (noise clamped to
+-0.2 on the teacher's input, teacher under ``no_grad``, supervised ``0.5 * (loss_dice + loss_ce)``, the consistency
held at 0 during a warm-up, zero_grad / backward / step, EMA update, poly lr), ``base_lr`` 0.01, ``consistency`` 0.1,
``consistency_rampup`` 200, ``test_single_volume``'s slice-wise argmax prediction for validation.

Deviations from the original:
- data: the ACDC h5 slices are replaced by synthetic "short-axis cine" slices made from ``seed`` (40x40: a bright
  left-ventricle disk (class 3) inside a myocardium ring (class 2), a right-ventricle crescent (class 1) beside
  it, textured background and noise; random centres, radii and intensities): 192 training slices of which the first
  24 are labeled (``patients_to_slices``' ACDC table is not used) and 4 validation volumes of 4 slices;
  ``BaseDataSets`` reads that list instead of the h5 files;
- sizes for 2 CPU cores: the U-Net's ``feature_chns`` [16, 32, 64, 128, 256] -> [4, 8, 16, 32, 64],
  ``--patch_size`` 256 -> 32, ``--batch_size`` 24 -> 8 with ``--labeled_bs`` 12 -> 4, ``--max_iterations`` 30000
  -> 200; the loop's hard-coded time constants are scaled with it (150x shorter): the consistency warm-up
  ``iter_num < 1000`` -> ``< 7`` and the ramp's ``iter_num // 150`` -> ``iter_num // 1``; ``num_workers`` 0;
- ``TwoStreamBatchSampler`` (``utils/util.py``, with ``iterate_once`` / ``iterate_eternally`` / ``grouper``) comes
  originally from CuriousAI's mean-teacher code (CC BY-NC), so it is written here from its behaviour (the same batches
  from the same numpy draws), not copied;
- ``utils/ramps.py`` carries a CC BY-NC header, so ``sigmoid_rampup`` is written here from the formula of
  Laine & Aila (2017), ``exp(-5 (1 - t / T)^2)`` with ``t`` clipped to ``[0, T]``, rather than copied;
- ``val_2D``'s ``calculate_metric_percase`` uses medpy (not installed): the Dice is written with numpy and the
  HD95 is dropped; ``eval_fn`` is the loop's validation (``model.eval()``, mean Dice over the foreground classes
  of the validation volumes, ``model.train()``); checkpoints, tensorboard images and logging are dropped;
  ``.cuda()`` calls are dropped (CPU);
- one ``train_step`` is one batch of the ``for i_batch, sampled_batch in enumerate(trainloader)`` loop (a new pass
  over the sampler when it is exhausted);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from scipy import ndimage
from scipy.ndimage import zoom
from torch import optim
from torch.nn.modules.loss import CrossEntropyLoss
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import Sampler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _ssl4mis import DiceLoss, UNet


class args:  # (port) the argparse namespace with train_acdc_unet_semi_seg.sh's flags, sizes shrunk
    max_iterations = 200  # 30000
    batch_size = 8  # 24
    base_lr = 0.01
    patch_size = [32, 32]  # [256, 256]  # noqa: RUF012
    num_classes = 4
    labeled_bs = 4  # 12
    ema_decay = 0.99
    consistency = 0.1
    consistency_rampup = 200.0

def sigmoid_rampup(current, rampup_length):
    """(port) Laine & Aila's ramp-up, written from the paper's formula (utils/ramps.py is CC BY-NC)."""
    if rampup_length == 0:
        return 1.0
    t = float(np.clip(current, 0.0, rampup_length)) / rampup_length
    return float(np.exp(-5.0 * (1.0 - t) ** 2))

# dataloaders/dataset.py
class BaseDataSets(Dataset):
    def __init__(self, base_dir=None, split="train", num=None, transform=None):
        self._base_dir = base_dir  # (port) {"train": [(image, label), ...], "val": [...]} instead of a folder
        self.sample_list = list(range(len(base_dir[split])))
        self.split = split
        self.transform = transform
        if num is not None and self.split == "train":
            self.sample_list = self.sample_list[:num]

    def __len__(self):
        return len(self.sample_list)

    def __getitem__(self, idx):
        case = self.sample_list[idx]
        image, label = self._base_dir[self.split][case]  # (port) h5py.File(...)["image"], ["label"]
        sample = {"image": image, "label": label}
        if self.split == "train":
            sample = self.transform(sample)
        sample["idx"] = idx
        return sample

def random_rot_flip(image, label=None):
    k = np.random.randint(0, 4)
    image = np.rot90(image, k)
    axis = np.random.randint(0, 2)
    image = np.flip(image, axis=axis).copy()
    if label is not None:
        label = np.rot90(label, k)
        label = np.flip(label, axis=axis).copy()
        return image, label
    else:
        return image

def random_rotate(image, label):
    angle = np.random.randint(-20, 20)
    image = ndimage.rotate(image, angle, order=0, reshape=False)
    label = ndimage.rotate(label, angle, order=0, reshape=False)
    return image, label

class RandomGenerator:
    def __init__(self, output_size):
        self.output_size = output_size

    def __call__(self, sample):
        image, label = sample["image"], sample["label"]
        rand_value = random.random()
        if rand_value < 0.5:
            image, label = random_rot_flip(image, label)
        else:
            image, label = random_rotate(image, label)
        x, y = image.shape
        image = zoom(image, (self.output_size[0] / x, self.output_size[1] / y), order=0)
        label = zoom(label, (self.output_size[0] / x, self.output_size[1] / y), order=0)
        image = torch.from_numpy(image.astype(np.float32)).unsqueeze(0)
        label = torch.from_numpy(label.astype(np.uint8))
        sample = {"image": image, "label": label}
        return sample

class TwoStreamBatchSampler(Sampler):
    """(port) SSL4MIS's two-stream batches, written here rather than copied (the class SSL4MIS ships comes from
    CuriousAI's mean-teacher code, CC BY-NC): each batch is ``batch_size - secondary_batch_size`` indices from one
    shuffled pass over the primary (labeled) indices, then ``secondary_batch_size`` indices from back-to-back shuffles
    of the secondary (unlabeled) ones; the epoch ends with the primary pass (a partial last batch dropped). The
    shuffles are drawn from numpy's global RNG in the original's order."""

    def __init__(self, primary_indices, secondary_indices, batch_size, secondary_batch_size):
        self.primary_indices = primary_indices
        self.secondary_indices = secondary_indices
        self.secondary_batch_size = secondary_batch_size
        self.primary_batch_size = batch_size - secondary_batch_size
        assert len(self.primary_indices) >= self.primary_batch_size > 0
        assert len(self.secondary_indices) >= self.secondary_batch_size > 0

    def __iter__(self):
        primary = np.random.permutation(self.primary_indices)  # drawn when iteration starts, as in the original
        return self._batches(primary)

    def _batches(self, primary):
        secondary = self._shuffles()
        n = self.primary_batch_size
        for start in range(0, len(primary) - n + 1, n):
            yield tuple(primary[start:start + n]) + tuple(next(secondary) for _ in range(self.secondary_batch_size))

    def _shuffles(self):
        while True:
            yield from np.random.permutation(self.secondary_indices)

    def __len__(self):
        return len(self.primary_indices) // self.primary_batch_size


def _synthetic_slice(rng, size=40):
    """(port) A short-axis slice: LV disk (3) in a myocardium ring (2), an RV crescent (1) beside it."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    cy, cx = size / 2 + rng.uniform(-5, 5, size=2)
    r_lv, wall = rng.uniform(4, 7), rng.uniform(2, 4)
    d = np.hypot(yy - cy, xx - cx)
    ang = rng.uniform(0, 2 * np.pi)
    ry, rx = cy + np.sin(ang) * (r_lv + wall + 3), cx + np.cos(ang) * (r_lv + wall + 3)
    d_rv = np.hypot(yy - ry, xx - rx)
    label = np.zeros((size, size), np.uint8)
    label[(d_rv < r_lv + 1) & (d >= r_lv + wall)] = 1
    label[(d >= r_lv) & (d < r_lv + wall)] = 2
    label[d < r_lv] = 3
    levels = np.array([0.1, 0.65, 0.3, 0.9]) + rng.uniform(-0.05, 0.05, size=4)
    image = levels[label] + 0.08 * np.sin(xx * rng.uniform(0.2, 0.6)) + rng.normal(0, 0.05, (size, size))
    return image.astype(np.float32), label

def _validate(model, db_val, classes):
    """(port) the loop's validation: val_2D.test_single_volume (argmax per slice, Dice per class), hd95 dropped."""
    model.eval()
    metric_list = 0.0
    for image, label in db_val:
        prediction = np.zeros_like(label)
        for ind in range(image.shape[0]):
            slice = image[ind, :, :]
            x, y = slice.shape[0], slice.shape[1]
            slice = zoom(slice, (args.patch_size[0] / x, args.patch_size[1] / y), order=0)
            input = torch.from_numpy(slice).unsqueeze(0).unsqueeze(0).float()
            with torch.no_grad():
                out = torch.argmax(torch.softmax(model(input), dim=1), dim=1).squeeze(0)
                out = out.cpu().detach().numpy()
                pred = zoom(out, (x / args.patch_size[0], y / args.patch_size[1]), order=0)
                prediction[ind] = pred
        metric_i = []
        for i in range(1, classes):
            pred_i, gt_i = prediction == i, label == i
            metric_i.append(2.0 * (pred_i & gt_i).sum() / (pred_i.sum() + gt_i.sum()) if pred_i.sum() > 0 else 0.0)
        metric_list += np.array(metric_i)
    model.train()
    return float(np.mean(metric_list / len(db_val)))

# train_mean_teacher_2D.py
def get_current_consistency_weight(epoch):
    # Consistency ramp-up from https://arxiv.org/abs/1610.02242
    return args.consistency * sigmoid_rampup(epoch, args.consistency_rampup)

def update_ema_variables(model, ema_model, alpha, global_step):
    # Use the true average until the exponential average is more correct
    alpha = min(1 - 1 / (global_step + 1), alpha)
    for ema_param, param in zip(ema_model.parameters(), model.parameters()):
        ema_param.data.mul_(alpha).add_(1 - alpha, param.data)

def _data(seed):
    rng = np.random.RandomState(seed)
    root = {"train": [_synthetic_slice(rng) for _ in range(192)],
            "val": [tuple(np.stack(z) for z in zip(*[_synthetic_slice(rng) for _ in range(4)])) for _ in range(4)]}
    db_train = BaseDataSets(base_dir=root, split="train", num=None, transform=RandomGenerator(args.patch_size))
    total_slices = len(db_train)
    labeled_slice = 24  # (port) patients_to_slices(args.root_path, args.labeled_num)
    labeled_idxs = list(range(labeled_slice))
    unlabeled_idxs = list(range(labeled_slice, total_slices))
    batch_sampler = TwoStreamBatchSampler(
        labeled_idxs, unlabeled_idxs, args.batch_size, args.batch_size-args.labeled_bs)
    trainloader = DataLoader(db_train, batch_sampler=batch_sampler, num_workers=0)
    return root["val"], trainloader

def _models(num_classes):
    def create_model(ema=False):
        # Network definition
        model = UNet(in_chns=1, class_num=num_classes)  # (port) net_factory(net_type="unet", ...) without .cuda()
        if ema:
            for param in model.parameters():
                param.detach_()
        return model

    model = create_model()
    ema_model = create_model(ema=True)
    return model, ema_model


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    base_lr = args.base_lr
    num_classes = args.num_classes
    max_iterations = args.max_iterations
    model, ema_model = _models(num_classes)
    db_val, trainloader = _data(seed)
    model.train()
    optimizer = optim.SGD(model.parameters(), lr=base_lr, momentum=0.9, weight_decay=0.0001)
    ce_loss = CrossEntropyLoss()
    dice_loss = DiceLoss(num_classes)
    st = {"iter_num": 0, "it": iter(trainloader)}

    def train_step():
        sampled_batch = next(st["it"], None)
        if sampled_batch is None:  # the next epoch
            st["it"] = iter(trainloader)
            sampled_batch = next(st["it"])
        iter_num = st["iter_num"]
        volume_batch, label_batch = sampled_batch['image'], sampled_batch['label']
        unlabeled_volume_batch = volume_batch[args.labeled_bs:]
        noise = torch.clamp(torch.randn_like(unlabeled_volume_batch) * 0.1, -0.2, 0.2)
        ema_inputs = unlabeled_volume_batch + noise
        outputs = model(volume_batch)
        outputs_soft = torch.softmax(outputs, dim=1)
        with torch.no_grad():
            ema_output = ema_model(ema_inputs)
            ema_output_soft = torch.softmax(ema_output, dim=1)
        sup_labels = label_batch[args.labeled_bs:] if bug == "labels_from_unlabeled_half" else label_batch[:args.labeled_bs]
        loss_ce = ce_loss(outputs[:args.labeled_bs],
                          sup_labels.long())
        loss_dice = dice_loss(
            (outputs if bug == "dice_on_logits" else outputs_soft)[:args.labeled_bs], sup_labels.unsqueeze(1))
        supervised_loss = 0.5 * (loss_dice + loss_ce)
        consistency_weight = get_current_consistency_weight(iter_num // 1)  # (port) iter_num//150
        if iter_num < 7:  # (port) iter_num < 1000
            consistency_loss = 0.0
        else:
            consistency_loss = torch.mean(
                (outputs_soft[args.labeled_bs:]-ema_output_soft)**2)
        loss = supervised_loss + consistency_weight * consistency_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if bug == "ema_update_reversed":
            update_ema_variables(ema_model, model, args.ema_decay, iter_num)
        else:
            update_ema_variables(model, ema_model, args.ema_decay, iter_num)
        lr_ = base_lr * (1.0 - iter_num / max_iterations) ** 0.9
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr_
        st["iter_num"] = iter_num + 1
        return loss.item()
    first = next(iter(trainloader))
    return Program(name="ssl4mis_mean_teacher", model=model,
                   batch=(first["image"][:args.labeled_bs], first["label"][:args.labeled_bs].long()),
                   loss_fn=ce_loss, optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda m, _b=None: _validate(m, db_val, num_classes), loader=trainloader)

build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the EMA update called with the models swapped: the student is pulled toward the teacher, which only
    # ever moves toward the student (at step 0, alpha = 0 copies the teacher's initial weights into the student).
    Bug("ema_update_reversed", functools.partial(_build, bug="ema_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # classic slicing slip: the supervised losses read the labels of the unlabeled half of the two-stream batch
    # (same size, so nothing fails) for the labeled images' outputs.
    Bug("labels_from_unlabeled_half", functools.partial(_build, bug="labels_from_unlabeled_half"),
        "learning_ledger", ("TASK",)),
    # classic: the Dice term fed the logits instead of the softmax (DiceLoss's softmax flag left False).
    Bug("dice_on_logits", functools.partial(_build, bug="dice_on_logits"), "learning_ledger", ("OBJECTIVE",)),
]
