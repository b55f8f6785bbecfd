"""SRFBN (the super-resolution feedback network of Li et al., CVPR 2019) trained by Paper99/SRFBN_CVPR19's
``train.py`` with ``options/train/train_SRFBN_example.json``: ``SRFBN`` x4 (a feedback block unrolled over
``num_steps`` with one super-resolved output per step; in the helper ``_srfbn_lib.py``), ``SRSolver.train_step``'s
curriculum loss (the L1 loss of every step's output against the HR patch, weighted by ``cl_weights`` and summed, over
``split_batch`` sub-batches), Adam, the stability guard that skips a batch whose loss exceeds ``skip_threshold`` times
the last stepped one, ``MultiStepLR`` stepped per epoch, random LR patches with the matching HR patches, flips and
90-degree rotations; validation PSNR on the Y channel after every epoch.

Source: https://github.com/Paper99/SRFBN_CVPR19
Commit: 046f693afc58dc53f240a7d85ea78213eec08490
Files: train.py, solvers/SRSolver.py, solvers/base_solver.py, data/LRHR_dataset.py, data/common.py, utils/util.py,
options/train/train_SRFBN_example.json (network files in the helper _srfbn_lib.py, data/common.py and the PSNR
of utils/util.py in the helper _srfbn_data.py)
License: MIT (Copyright (c) 2019 Zhen Li; full text in LICENSES/Paper99-SRFBN_CVPR19.txt)
Domain: vision, single-image super-resolution (feedback network, curriculum L1 loss)

Kept as written: ``SRSolver.feed_data`` (the ``LR`` / ``HR`` buffers resized and copied), ``train_step`` (``model.train()``,
zero_grad, per sub-batch the ``cl_weights``-weighted L1 over the step outputs divided by ``split_batch`` and backward,
the skip guard around ``optimizer.step()``, ``model.eval()`` at the end), ``test`` (eval, ``no_grad``, last step's
output, back to train), ``update_learning_rate`` (``scheduler.step(epoch)``), the epoch loop of ``train.py``
(training batches, validation PSNR, ``update_learning_rate``), ``LRHRDataset`` (``repeat`` 2, ``_get_patch``:
``get_patch``, ``augment``, ``add_noise``; ``np2Tensor`` with ``rgb_range`` 255), ``init_weights('kaiming')``, the
json's solver settings other than the ones below.

Deviations from the original:
- sizes for 2 CPU cores: ``num_features`` 32 -> 8, ``num_groups`` 3 -> 2, ``num_steps`` 4 kept (``cl_weights`` four
  1.0); ``LR_size`` 40 -> 12 (HR patches 48); ``batch_size`` 16 -> 8; ``learning_rate`` 1e-4 -> 1e-3 (30 steps
  instead of 1000 epochs); ``lr_steps`` [200, 400, 600, 800] kept;
- data: DIV2K (``.npy`` LR/HR pairs) and Set5 are replaced by synthetic 64x64 RGB images made from ``seed`` (smooth
  colour fields with edges and stripes), the LR images their bicubic x4 reductions (Pillow), 16 training and 4
  validation pairs read from an in-memory list; ``noise`` '.' (none) as in the json;
- validation: PSNR on the Y channel with ``crop_border`` = scale (``calc_metrics``' PSNR; SSIM, image saving,
  checkpoints, the csv log and ``use_chop``'s overlapped forward are not ported); the validation loader's batch size 1;
- ``create_model`` / ``create_solver`` / ``create_dataloader`` are inlined, ``BaseSolver``'s attributes set in
  ``SRSolver.__init__``; no DataParallel / CUDA; no prints or tqdm (the skipped-batch warning is dropped);
  ``n_workers`` 0;
- one ``train_step`` is one ``solver.feed_data(batch); solver.train_step()`` of the epoch loop; validation and
  ``update_learning_rate`` run after the epoch's last batch; ``eval_fn`` is the validation PSNR;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402, SIM210

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from PIL import Image
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _srfbn_data import Tensor2np, add_noise, augment, calc_psnr, get_patch, np2Tensor, rgb2ycbcr
from _srfbn_lib import SRFBN, init_weights

opt = {
    "mode": "sr", "use_cl": True, "scale": 4, "is_train": True, "use_chop": False, "rgb_range": 255,
    "self_ensemble": False, "save_image": False,
    "datasets": {"train": {"mode": "LRHR", "data_type": "npy", "n_workers": 0, "batch_size": 8, "LR_size": 12,
                           "use_flip": True, "use_rot": True, "noise": ".", "phase": "train", "scale": 4,
                           "rgb_range": 255},
                 "val": {"mode": "LRHR", "data_type": "img", "phase": "val", "scale": 4, "rgb_range": 255}},
    "networks": {"which_model": "SRFBN", "num_features": 8, "in_channels": 3, "out_channels": 3, "num_steps": 4,
                 "num_groups": 2, "scale": 4},
    "solver": {"type": "ADAM", "learning_rate": 0.001, "weight_decay": 0, "lr_scheme": "MultiStepLR",
               "lr_steps": [200, 400, 600, 800], "lr_gamma": 0.5, "loss_type": "l1", "manual_seed": 0,
               "num_epochs": 1000, "skip_threshold": 3, "split_batch": 1, "cl_weights": [1.0, 1.0, 1.0, 1.0]},
}


def calc_psnr_y(img1, img2, crop_border):
    """``calc_metrics``' PSNR (``test_Y``): both [0, 255] images to Y, ``crop_border`` pixels cropped."""
    img1 = img1 / 255.
    img2 = img2 / 255.
    im1_in = rgb2ycbcr(img1)
    im2_in = rgb2ycbcr(img2)
    height, width = img1.shape[:2]
    cropped_im1 = im1_in[crop_border:height-crop_border, crop_border:width-crop_border]
    cropped_im2 = im2_in[crop_border:height-crop_border, crop_border:width-crop_border]
    return calc_psnr(cropped_im1 * 255, cropped_im2 * 255)


# ---- data/LRHR_dataset.py (the images read from a list) ----------------------------------------------------------

class LRHRDataset(Dataset):
    '''
    Read LR and HR images in train and eval phases.
    '''

    def __init__(self, opt, pairs, bug=None):
        super(LRHRDataset, self).__init__()
        self.opt = opt
        self.bug = bug  # (port) the variant being built
        self.train = (opt['phase'] == 'train')
        self.split = 'train' if self.train else 'test'
        self.scale = self.opt['scale']
        # change the length of train dataset (influence the number of iterations in each epoch)
        self.repeat = 2
        self.imgs_LR = [p[0] for p in pairs]  # (port) the read images, in place of the paths
        self.imgs_HR = [p[1] for p in pairs]

    def __getitem__(self, idx):
        lr, hr = self._load_file(idx)
        if self.train:
            lr, hr = self._get_patch(lr, hr)
        lr_tensor, hr_tensor = np2Tensor([lr, hr], self.opt['rgb_range'])
        return {'LR': lr_tensor, 'HR': hr_tensor}

    def __len__(self):
        if self.train:
            return len(self.imgs_HR) * self.repeat
        else:
            return len(self.imgs_LR)

    def _get_index(self, idx):
        if self.train:
            return idx % len(self.imgs_HR)
        else:
            return idx

    def _load_file(self, idx):
        idx = self._get_index(idx)
        return self.imgs_LR[idx], self.imgs_HR[idx]

    def _get_patch(self, lr, hr):
        LR_size = self.opt['LR_size']
        # random crop and augment
        lr, hr = get_patch(
            lr, hr, LR_size, self.scale, bug=self.bug)
        lr, hr = augment([lr, hr])
        lr = add_noise(lr, self.opt['noise'])

        return lr, hr


def _synthetic_pairs(rng, n, size=64, scale=4):
    """(port) (LR, HR) uint8 pairs: smooth colour fields plus a stripe pattern and a bright disc; LR is the bicubic
    x``scale`` reduction of HR."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    pairs = []
    for _ in range(n):
        c0, c1 = rng.uniform(40, 215, size=(2, 3))
        t = (np.sin(2 * np.pi * (rng.uniform(0.5, 3) * xx + rng.uniform(0, 1)))
             * np.cos(2 * np.pi * rng.uniform(0.5, 3) * yy))[..., None]
        img = c0 + (c1 - c0) * (0.5 + 0.5 * t)
        cy, cx, r = rng.uniform(0.2, 0.8, size=3) * np.array([1, 1, 0.4])
        img[((yy - cy) ** 2 + (xx - cx) ** 2) < r ** 2] = rng.uniform(0, 255, size=3)
        hr = np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)
        lr = np.asarray(Image.fromarray(hr).resize((size // scale, size // scale), Image.BICUBIC))
        pairs.append((lr, hr))
    return pairs


# ---- solvers/SRSolver.py, solvers/base_solver.py -----------------------------------------------------------------

class SRSolver(object):
    def __init__(self, opt, bug=None):
        self.opt = opt
        self.bug = bug  # (port) the variant being built
        self.scale = opt['scale']
        self.use_cl = True if opt['use_cl'] else False
        self.Tensor = torch.FloatTensor
        # for better training (stablization and less GPU memory usage)
        self.last_epoch_loss = 1e8
        self.skip_threshold = opt['solver']['skip_threshold']
        # save GPU memory during training
        self.split_batch = opt['solver']['split_batch']
        self.train_opt = opt['solver']
        self.LR = self.Tensor()
        self.HR = self.Tensor()
        self.SR = None

        n = opt['networks']
        self.model = SRFBN(in_channels=n['in_channels'], out_channels=n['out_channels'],
                           num_features=n['num_features'], num_steps=n['num_steps'], num_groups=n['num_groups'],
                           upscale_factor=n['scale'])
        self.model.train()
        self.cl_weights = self.opt['solver']['cl_weights']
        self.criterion_pix = nn.L1Loss()
        weight_decay = self.train_opt['weight_decay'] if self.train_opt['weight_decay'] else 0
        self.optimizer = optim.Adam(self.model.parameters(),
                                    lr=self.train_opt['learning_rate'], weight_decay=weight_decay)
        self.scheduler = optim.lr_scheduler.MultiStepLR(self.optimizer,
                                                        self.train_opt['lr_steps'],
                                                        self.train_opt['lr_gamma'])
        init_weights(self.model, 'kaiming')  # self.load() without a pretrained model: self._net_init()

    def feed_data(self, batch, need_HR=True):
        input = batch['LR']
        self.LR.resize_(input.size()).copy_(input)

        if need_HR:
            target = batch['HR']
            self.HR.resize_(target.size()).copy_(target)

    def train_step(self):
        self.model.train()
        self.optimizer.zero_grad()

        loss_batch = 0.0
        sub_batch_size = int(self.LR.size(0) / self.split_batch)
        for i in range(self.split_batch):
            loss_sbatch = 0.0
            split_LR = self.LR.narrow(0, i*sub_batch_size, sub_batch_size)
            split_HR = self.HR.narrow(0, i*sub_batch_size, sub_batch_size)
            if self.use_cl:
                outputs = self.model(split_LR)
                loss_steps = [self.criterion_pix(sr, split_HR) for sr in outputs]
                for step in range(len(loss_steps)):
                    loss_sbatch += self.cl_weights[step] * loss_steps[step]
            else:
                output = self.model(split_LR)
                loss_sbatch = self.criterion_pix(output, split_HR)

            loss_sbatch /= self.split_batch
            loss_sbatch.backward()

            loss_batch += (loss_sbatch.item())

        # for stable training
        if self.bug == "skip_guard_inverted":  # the comparison written the other way round: every batch is skipped
            stable = loss_batch > self.skip_threshold * self.last_epoch_loss
        else:
            stable = loss_batch < self.skip_threshold * self.last_epoch_loss
        if stable:
            self.optimizer.step()
            self.last_epoch_loss = loss_batch

        self.model.eval()
        return loss_batch

    def test(self):
        self.model.eval()
        with torch.no_grad():
            SR = self.model.forward(self.LR)
            if isinstance(SR, list):
                self.SR = SR[-1]
            else:
                self.SR = SR

        self.model.train()
        loss_pix = self.criterion_pix(self.SR, self.HR)
        return loss_pix.item()

    def update_learning_rate(self, epoch):
        self.scheduler.step(epoch)


def validate(solver, val_loader):
    """The validation part of ``train.py``'s epoch loop: the mean PSNR (Y channel) over the validation images."""
    psnr_list = []
    for iter, batch in enumerate(val_loader):
        solver.feed_data(batch)
        solver.test()
        sr, hr = Tensor2np([solver.SR.data[0].float().cpu(), solver.HR.data[0].float().cpu()], opt['rgb_range'])
        psnr_list.append(calc_psnr_y(sr, hr, crop_border=opt['scale']))
    return sum(psnr_list)/len(psnr_list)


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    train_set = LRHRDataset(opt['datasets']['train'], _synthetic_pairs(rng, 16), bug=bug)
    val_set = LRHRDataset(opt['datasets']['val'], _synthetic_pairs(rng, 4), bug=bug)
    train_loader = DataLoader(train_set, batch_size=opt['datasets']['train']['batch_size'], shuffle=True,
                              num_workers=0)
    val_loader = DataLoader(val_set, batch_size=1, shuffle=False, num_workers=0)
    solver = SRSolver(opt, bug=bug)
    st = {"epoch": 1, "it": None, "i": 0}

    def train_step():
        if st["it"] is None:  # for epoch in range(start_epoch, NUM_EPOCH + 1): the training batches
            st["it"], st["i"] = iter(train_loader), 0
        batch = next(st["it"])
        solver.feed_data(batch)
        iter_loss = solver.train_step()
        st["i"] += 1
        if st["i"] == len(train_loader):  # validation, then update lr
            validate(solver, val_loader)
            solver.update_learning_rate(st["epoch"])
            st["epoch"], st["it"] = st["epoch"] + 1, None
        return iter_loss

    def eval_fn(model, _batch=None):
        return validate(solver, val_loader)

    def loss_fn(outputs, hr):
        """``train_step``'s curriculum loss of one sub-batch."""
        return sum(solver.cl_weights[step] * solver.criterion_pix(sr, hr) for step, sr in enumerate(outputs))

    batch0 = next(iter(DataLoader(train_set, batch_size=opt['datasets']['train']['batch_size'])))
    return Program(name="srfbn_div2k", model=solver.model, batch=(batch0['LR'], batch0['HR']), loss_fn=loss_fn,
                   optimizer=solver.optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the HR patch cropped at the LR patch's offsets (not scaled by the factor), so the target is another
    # part of the image than the input.
    Bug("hr_patch_at_lr_offsets", functools.partial(_build, bug="hr_patch_at_lr_offsets"), "learning_ledger",
        ("TASK",)),
    # classic: the stability guard's comparison inverted: no batch is ever stepped.
    Bug("skip_guard_inverted", functools.partial(_build, bug="skip_guard_inverted"), "step_probe", (),
        kind="step.no_optimizer_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
