# ruff: noqa: UP008, UP039, PLR0402  (the original's code style is kept as written)
"""Siamese network with the contrastive loss of Hadsell, Chopra and LeCun (margin 2) on same/different pairs, from
harveyslash/Facial-Similarity-with-Siamese-Networks-in-Pytorch (the notebook ``Siamese-networks-medium.ipynb``).

Source: https://github.com/harveyslash/Facial-Similarity-with-Siamese-Networks-in-Pytorch
Commit: f4a5352e38a25dca8eae68bcef5aa3ac7bbcb270
Files: Siamese-networks-medium.ipynb (Config, SiameseNetworkDataset, SiameseNetwork, ContrastiveLoss, the loop)
License: MIT (Copyright (c) 2018 Harshvardhan Gupta; full text in
         LICENSES/harveyslash-Facial-Similarity-with-Siamese-Networks-in-Pytorch.txt)
Domain: contrastive metric learning (siamese CNN, pairwise contrastive loss)

Kept as written: ``SiameseNetworkDataset`` (a random first image, then with probability 1/2 a random image of the same
class, else of another class, found by rejection; label 1 for a different-class pair, as float32 of shape [1]),
``SiameseNetwork`` (three ReflectionPad - Conv3x3 - ReLU - BatchNorm blocks with 4/8/8 channels, then Linear 500 -
500 - 5, ``forward_once`` shared by both inputs), ``ContrastiveLoss(margin=2.0)`` with
``F.pairwise_distance(..., keepdim=True)``, Adam(lr 0.0005), and the loop body (zero_grad, net(img0, img1),
criterion, backward, step).

Deviations from the original:
- data: the AT&T faces folder (``dset.ImageFolder(root=Config.training_dir)``, PIL images) is replaced by synthetic
  grayscale "faces" made from ``seed``: 20 identities x 8 images; each identity is a random smooth template, each
  image the template shifted by up to 2 pixels with pixel noise; ``imageFolderDataset.imgs`` is the same list of
  (image, class) pairs; ``should_invert=False`` as the notebook sets it; the transform ``Resize((100, 100)) +
  ToTensor()`` becomes images made at 24x24 directly, so the first Linear is ``8*24*24 -> 500`` (original
  ``8*100*100``);
- sizes: train_batch_size 32 (Config: 64); num_workers 0; ``.cuda()`` dropped; the visualisation cells, printing
  and plotting are dropped; one call of ``train_step`` is one iteration of the notebook's inner loop;
- ``eval_fn`` is the notebook's test cell turned into a number: the fraction of fresh pairs whose distance is on
  the right side of margin/2 (the notebook shows the dissimilarities for inspection);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

SIZE, N_ID, PER_ID = 24, 20, 8


class Config():
    train_batch_size = 32
    train_number_epochs = 100


class _FakeImageFolder:
    """Stand-in for dset.ImageFolder: ``imgs`` is a list of (image, class) pairs (images already tensors)."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)
        low = torch.rand(N_ID, 1, 6, 6, generator=g)
        templates = F.interpolate(low, size=(SIZE + 4, SIZE + 4), mode="bilinear", align_corners=False)
        self.imgs = []
        for c in range(N_ID):
            for _ in range(PER_ID):
                dy, dx = torch.randint(0, 5, (2,), generator=g).tolist()
                img = templates[c, :, dy:dy + SIZE, dx:dx + SIZE] + 0.05 * torch.randn(1, SIZE, SIZE, generator=g)
                self.imgs.append((img.clamp(0, 1), c))


class SiameseNetworkDataset(Dataset):

    def __init__(self,imageFolderDataset,transform=None,should_invert=True,bug=None):
        self.imageFolderDataset = imageFolderDataset
        self.transform = transform
        self.should_invert = should_invert
        self.bug = bug

    def __getitem__(self,index):
        img0_tuple = random.choice(self.imageFolderDataset.imgs)
        #we need to make sure approx 50% of images are in the same class
        should_get_same_class = random.randint(0,1)
        if should_get_same_class:
            while True:
                #keep looping till the same class image is found
                img1_tuple = random.choice(self.imageFolderDataset.imgs)
                if img0_tuple[1]==img1_tuple[1]:
                    break
        else:
            while True:
                #keep looping till a different class image is found

                img1_tuple = random.choice(self.imageFolderDataset.imgs)
                if img0_tuple[1] !=img1_tuple[1]:
                    break
        img0 = img0_tuple[0]  # Image.open(...).convert("L"): already a grayscale image here
        img1 = img1_tuple[0]

        if self.should_invert:
            img0 = 1.0 - img0
            img1 = 1.0 - img1
        if self.transform is not None:
            img0 = self.transform(img0)
            img1 = self.transform(img1)

        if self.bug == "label_means_same":  # classic: the pair label written as "same class" for a loss that reads
            return img0, img1 , torch.from_numpy(np.array([int(img1_tuple[1]==img0_tuple[1])],dtype=np.float32))  # 1 = different
        return img0, img1 , torch.from_numpy(np.array([int(img1_tuple[1]!=img0_tuple[1])],dtype=np.float32))

    def __len__(self):
        return len(self.imageFolderDataset.imgs)


class SiameseNetwork(nn.Module):
    def __init__(self, bug=None):
        super(SiameseNetwork, self).__init__()
        self.bug = bug
        self.cnn1 = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(1, 4, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(4),

            nn.ReflectionPad2d(1),
            nn.Conv2d(4, 8, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(8),

            nn.ReflectionPad2d(1),
            nn.Conv2d(8, 8, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(8),
        )

        self.fc1 = nn.Sequential(
            nn.Linear(8*SIZE*SIZE, 500),
            nn.ReLU(inplace=True),

            nn.Linear(500, 500),
            nn.ReLU(inplace=True),

            nn.Linear(500, 5))

    def forward_once(self, x):
        output = self.cnn1(x)
        output = output.view(output.size()[0], -1)
        output = self.fc1(output)
        return output

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        if self.bug == "second_branch_on_input1":  # classic copy-paste slip: both branches see the first image
            output2 = self.forward_once(input1)
        else:
            output2 = self.forward_once(input2)
        return output1, output2


class ContrastiveLoss(torch.nn.Module):
    """
    Contrastive loss function.
    Based on: http://yann.lecun.com/exdb/publis/pdf/hadsell-chopra-lecun-06.pdf
    """

    def __init__(self, margin=2.0, bug=None):
        super(ContrastiveLoss, self).__init__()
        self.margin = margin
        self.bug = bug

    def forward(self, output1, output2, label):
        if self.bug == "distance_without_keepdim":  # the notebook's line before PR #29: (B,) against label (B, 1)
            euclidean_distance = F.pairwise_distance(output1, output2)
        else:
            euclidean_distance = F.pairwise_distance(output1, output2, keepdim = True)
        loss_contrastive = torch.mean((1-label) * torch.pow(euclidean_distance, 2) +
                                      (label) * torch.pow(torch.clamp(self.margin - euclidean_distance, min=0.0), 2))


        return loss_contrastive


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    folder_dataset = _FakeImageFolder(seed)
    siamese_dataset = SiameseNetworkDataset(imageFolderDataset=folder_dataset,
                                            transform=None,
                                            should_invert=False,
                                            bug=bug)
    train_dataloader = DataLoader(siamese_dataset,
                                  shuffle=True,
                                  num_workers=0,
                                  batch_size=Config.train_batch_size,
                                  generator=torch.Generator().manual_seed(seed))

    net = SiameseNetwork(bug=bug)
    criterion = ContrastiveLoss(bug=bug)
    optimizer = optim.Adam(net.parameters(),lr = 0.0005 )

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        img0, img1 , label = next_batch()
        optimizer.zero_grad()
        output1,output2 = net(img0,img1)
        loss_contrastive = criterion(output1,output2,label)
        loss_contrastive.backward()
        optimizer.step()
        return loss_contrastive.detach()

    def loss_fn(outputs, label):
        output1, output2 = outputs
        return criterion(output1, output2, label)

    def eval_fn(model, batch):
        (inputs, label) = batch
        with torch.no_grad():
            o1, o2 = model(**inputs)
            d = F.pairwise_distance(o1, o2, keepdim=True)
        return float(((d > criterion.margin / 2).float() == label).float().mean())

    img0, img1, label = next(iter(DataLoader(siamese_dataset, batch_size=Config.train_batch_size)))
    return Program(name="siamesefaces_contrastive", model=net, batch=({"input1": img0, "input2": img1}, label),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/harveyslash/Facial-Similarity-with-Siamese-Networks-in-Pytorch/issues/27 (and #26), fixed by
    # PR #29: F.pairwise_distance without keepdim=True gives (B,), the label is (B, 1): the loss broadcasts to (B, B)
    # and pairs every distance with every label.
    Bug("distance_without_keepdim", functools.partial(_build, bug="distance_without_keepdim"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the pair label written as 1 for the same class, while the loss reads 1 as "different".
    Bug("label_means_same", functools.partial(_build, bug="label_means_same"), "learning_ledger", ("TASK",)),
    # classic copy-paste slip: forward_once(input1) for both outputs; the second image never reaches the model.
    Bug("second_branch_on_input1", functools.partial(_build, bug="second_branch_on_input1"), "learning_ledger",
        ("DEPENDENCY",)),
]
