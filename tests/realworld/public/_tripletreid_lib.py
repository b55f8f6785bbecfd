"""The data and optimizer code of CoinCheung/triplet-reid-pytorch (``AdamOptimWrapper``, ``RandomErasing``, the
``Market1501`` dataset on synthetic identities, ``BatchSampler``), for the port ``tripletreid_batchhard.py``.

Source: https://github.com/CoinCheung/triplet-reid-pytorch
Commit: b32f5df1084c70aeceb5084001f242dce31d0ebb
Files: optimizer.py, random_erasing.py, datasets/Market1501.py, batch_sampler.py
License: Apache-2.0 (the repository's LICENSE file; no copyright line, repository owner CoinCheung)

Deviations from the original: the logger calls are left out; ``Market1501`` holds synthetic image tensors
(``make_people``) instead of reading Market-1501 jpgs, and its torchvision transforms are written in plain torch at
1/8 scale (random 32 x 16 crop of a 36 x 18 image, horizontal flip, Normalize, RandomErasing; the test transform's
TenCrop is one centre crop); ``RandomErasing`` keeps only its 3-channel branch.
"""
# ruff: noqa: UP008, UP004, B006, C408, RUF046, PERF102

from __future__ import annotations

import math
import random

import numpy as np
import torch
from torch.utils.data import Dataset
from torch.utils.data.sampler import Sampler

H, W = 32, 16


# ---- optimizer.py -------------------------------------------------------------------------------------------------

class AdamOptimWrapper(object):
    '''
    A wrapper of Adam optimizer which allows to adjust the optimizing parameters
    according to the stategy presented in the paper
    '''
    def __init__(self, params, lr, wd=0, t0=15000, t1=25000, *args, **kwargs):
        super(AdamOptimWrapper, self).__init__(*args, **kwargs)
        self.base_lr = lr
        self.wd = wd
        self.t0 = t0
        self.t1 = t1
        self.step_count = 0
        self.optim = torch.optim.Adam(params,
                lr = self.base_lr,
                weight_decay = self.wd)

    def step(self):
        self.step_count += 1
        self.optim.step()
        # adjust optimizer parameters
        if self.step_count == self.t0:
            self.optim.param_groups[0]['betas'] = (0.5, 0.999)
        elif self.t0 < self.step_count < self.t1:
            lr = self.base_lr * (0.001 ** ((self.step_count + 1.0 - self.t0) / (self.t1 + 1.0 - self.t0)))
            for pg in self.optim.param_groups:
                pg['lr'] = lr
            self.optim.defaults['lr'] = lr

    def zero_grad(self):
        self.optim.zero_grad()

    @property
    def lr(self):
        return self.optim.param_groups[0]['lr']


# ---- random_erasing.py, datasets/Market1501.py (synthetic identities), batch_sampler.py ---------------------------

class RandomErasing(object):
    def __init__(self, probability = 0.5, sl = 0.02, sh = 0.4, r1 = 0.3, mean=[0.4914, 0.4822, 0.4465]):
        self.probability = probability
        self.mean = mean
        self.sl = sl
        self.sh = sh
        self.r1 = r1

    def __call__(self, img):

        if random.uniform(0, 1) > self.probability:
            return img

        for _attempt in range(100):
            area = img.size()[1] * img.size()[2]

            target_area = random.uniform(self.sl, self.sh) * area
            aspect_ratio = random.uniform(self.r1, 1/self.r1)

            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))

            if w < img.size()[2] and h < img.size()[1]:
                x1 = random.randint(0, img.size()[1] - h)
                y1 = random.randint(0, img.size()[2] - w)
                img[0, x1:x1+h, y1:y1+w] = self.mean[0]
                img[1, x1:x1+h, y1:y1+w] = self.mean[1]
                img[2, x1:x1+h, y1:y1+w] = self.mean[2]
                return img

        return img


MEAN, STD = torch.tensor([0.486, 0.459, 0.408])[:, None, None], torch.tensor([0.229, 0.224, 0.225])[:, None, None]


def make_people(gen, n_ids, per_id):
    """[0, 1] images at 36 x 18 (Resize(288, 144) scaled by 1/8): a top and a bottom colour per identity."""
    colours = torch.rand(n_ids, 2, 3, generator=gen)
    imgs, lbs = [], []
    for lb in range(n_ids):
        for _ in range(per_id):
            split = 16 + int(torch.randint(-3, 4, (1,), generator=gen))
            img = torch.empty(3, 36, 18)
            img[:, :split] = colours[lb, 0][:, None, None]
            img[:, split:] = colours[lb, 1][:, None, None]
            imgs.append((img + 0.08 * torch.randn(3, 36, 18, generator=gen)).clamp(0, 1))
            lbs.append(lb)
    cams = torch.randint(1, 7, (len(lbs),), generator=gen).tolist()
    return torch.stack(imgs), lbs, cams


class Market1501(Dataset):
    def __init__(self, imgs, lb_ids, lb_cams, is_train = True):
        self.is_train = is_train
        self.imgs, self.lb_ids, self.lb_cams = imgs, lb_ids, lb_cams
        self.erase = RandomErasing(0.5, mean=[0.0, 0.0, 0.0])
        # useful for sampler
        self.lb_img_dict = dict()
        self.lb_ids_uniq = set(self.lb_ids)
        lb_array = np.array(self.lb_ids)
        for lb in self.lb_ids_uniq:
            idx = np.where(lb_array == lb)[0]
            self.lb_img_dict.update({lb: idx})

    def trans(self, img):
        if not self.is_train:
            return (img[:, 2:2 + H, 1:1 + W] - MEAN) / STD
        i, j = random.randint(0, 36 - H), random.randint(0, 18 - W)  # RandomCrop
        img = img[:, i:i + H, j:j + W]
        if random.random() < 0.5:  # RandomHorizontalFlip
            img = img.flip(-1)
        return self.erase((img - MEAN) / STD)  # ToTensor, Normalize, RandomErasing

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, idx):
        img = self.trans(self.imgs[idx])
        return img, self.lb_ids[idx], self.lb_cams[idx]


class BatchSampler(Sampler):
    def __init__(self, dataset, n_class, n_num, *args, **kwargs):
        self.n_class = n_class
        self.n_num = n_num
        self.batch_size = n_class * n_num
        self.dataset = dataset
        self.labels = np.array(dataset.lb_ids)
        self.labels_uniq = np.array(list(dataset.lb_ids_uniq))
        self.len = len(dataset) // self.batch_size
        self.lb_img_dict = dataset.lb_img_dict
        self.iter_num = len(self.labels_uniq) // self.n_class

    def __iter__(self):
        curr_p = 0
        np.random.shuffle(self.labels_uniq)
        for k, _v in self.lb_img_dict.items():
            random.shuffle(self.lb_img_dict[k])
        for _i in range(self.iter_num):
            label_batch = self.labels_uniq[curr_p: curr_p + self.n_class]
            curr_p += self.n_class
            idx = []
            for lb in label_batch:
                if len(self.lb_img_dict[lb]) > self.n_num:
                    idx_smp = np.random.choice(self.lb_img_dict[lb],
                            self.n_num, replace = False)
                else:
                    idx_smp = np.random.choice(self.lb_img_dict[lb],
                            self.n_num, replace = True)
                idx.extend(idx_smp.tolist())
            yield idx

    def __len__(self):
        return self.iter_num
