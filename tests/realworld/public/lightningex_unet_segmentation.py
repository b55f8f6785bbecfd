"""Semantic segmentation with a U-Net Lightning module, from Lightning-AI/pytorch-lightning's domain template
``examples/pytorch/domain_templates/semantic_segmentation.py``: a KITTI dataset whose masks are encoded by
``encode_segmap`` (16 void labels set to ``ignore_index`` 250, 19 valid labels mapped to 0..18), a U-Net of
``DoubleConv`` (conv / BN / ReLU twice), ``Down`` (max-pool then ``DoubleConv``) and ``Up`` (transposed convolution,
pad to the skip's size, concatenate, ``DoubleConv``) blocks, ``F.cross_entropy(out, mask, ignore_index=250)``, Adam
and ``CosineAnnealingLR(T_max=10)`` stepped per epoch by Lightning.

Source: https://github.com/Lightning-AI/pytorch-lightning
Commit: 7f0c3436cd3f6ad3753125672024fc415cbcb414
Files: ``examples/pytorch/domain_templates/semantic_segmentation.py`` (``KITTI``, ``UNet``, ``DoubleConv``, ``Down``,
``Up``, ``SegModel``, ``main``)
License: Apache-2.0 (Copyright The Lightning AI team; full text in LICENSES/Lightning-AI-pytorch-lightning.txt)
Domain: vision, semantic segmentation (Lightning module, U-Net, cross-entropy with an ignore index)

Kept as written: ``KITTI`` (the 80/20 split drawn by ``random.Random(12345)``, ``encode_segmap``, the transform on
the image only), ``UNet`` / ``DoubleConv`` / ``Down`` / ``Up`` (doctests dropped, docstrings shortened),
``SegModel.training_step`` (returning the ``{"loss", "log", "progress_bar"}`` dict), ``validation_step``,
``configure_optimizers`` (Adam over ``self.net.parameters()``, ``CosineAnnealingLR(opt, T_max=10)``), the data
loaders (shuffled training loader).

Deviations from the original:
- ``configure_optimizers`` reads ``self.learning_rate``, which ``SegModel`` never sets (``__init__`` stores
  ``self.lr``): as written it raises AttributeError, so the port reads ``self.lr`` (the ``--lr`` default 0.001);
- KITTI is not here: ``KITTI`` is given in-memory scenes made from ``seed`` instead of the files under
  ``training/image_2`` and ``training/semantic`` (``get_filenames`` lists indices, ``__getitem__`` reads arrays, the PIL
  ``resize`` is dropped: the scenes are made at ``img_size``): 32x32 masks of raw KITTI label ids (6 valid and 2 void
  labels drawn from the seed; a background label and 2-4 rectangles), the image's pixel the colour of its raw label
  (the labels in use get the 8 corners of a shrunken RGB cube) plus noise; the rule a pixel's class follows is its
  colour (``task_probe``);
- torchvision is not here: ``ToTensor`` and ``Normalize`` (the template's KITTI means and stds) are written out;
- sizes for 2 CPU cores: ``features_start`` 64 -> 8, ``num_layers`` 3 (the ``SegModel`` default), batch 8, 160 scenes;
- there is no Trainer here: ``Trainer.fit``'s automatic optimization is driven one batch at a time (the
  ``training_step`` dict's ``"loss"`` in the optimizer closure, the ``optimizer_zero_grad`` hook, ``backward``,
  ``optimizer_step``); when a training epoch ends the validation loop runs (eval mode, ``no_grad``) and the
  scheduler steps, as Lightning's default ``interval="epoch"`` does; ``self.log`` runs without a trainer attached;
  ``eval_fn`` is the pixel accuracy over the non-ignored pixels of one batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from pytorch_lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

DEFAULT_VOID_LABELS = (0, 1, 2, 3, 4, 5, 6, 9, 10, 14, 15, 16, 18, 29, 30, -1)
DEFAULT_VALID_LABELS = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)
MEAN = torch.tensor([0.35675976, 0.37380189, 0.3764753]).view(3, 1, 1)
STD = torch.tensor([0.32064945, 0.32098866, 0.32325324]).view(3, 1, 1)
N_SCENES, SIZE = 160, 32  # (port)
SELF_CHECK_STEPS = 40


def _scenes(seed):
    """(port) In place of the KITTI files: raw-label masks of rectangles and their noisy palette-coloured images."""
    rng = np.random.RandomState(seed)
    palette = rng.uniform(0, 1, (34, 3))
    used = rng.choice(DEFAULT_VALID_LABELS, 6, replace=False).tolist() + rng.choice(DEFAULT_VOID_LABELS[:-1], 2).tolist()
    corners = np.array([[(k >> b) & 1 for b in range(3)] for k in range(8)])
    palette[used] = 0.15 + 0.7 * corners[rng.permutation(8)]  # the labels in use: well-separated colours
    masks = np.zeros((N_SCENES, SIZE, SIZE), dtype=np.uint8)
    for m in masks:
        m[:] = rng.choice(used[:2])
        for _ in range(rng.randint(2, 5)):
            y0, x0 = rng.randint(0, SIZE - 8, 2)
            h, w = rng.randint(6, 17, 2)
            m[y0:y0 + h, x0:x0 + w] = rng.choice(used)
    images = palette[masks] + rng.normal(0, 0.02, masks.shape + (3,))
    images = (np.clip(images, 0, 1) * 255).round().astype(np.uint8)
    return images, masks, palette


def _transform(img):
    """(port) ``transforms.Compose([ToTensor(), Normalize(mean, std)])`` written out."""
    return (img.permute(2, 0, 1).float() / 255 - MEAN) / STD


class KITTI(Dataset):
    def __init__(self, scenes, split: str, img_size: tuple = (SIZE, SIZE), void_labels: list = DEFAULT_VOID_LABELS,
                 valid_labels: list = DEFAULT_VALID_LABELS, transform=None, bug=None):
        self.img_size = img_size
        self.void_labels = void_labels
        self.valid_labels = valid_labels
        self.ignore_index = 250
        self.class_map = dict(zip(self.valid_labels, range(len(self.valid_labels))))
        self.transform = transform
        self.bug = bug

        self.split = split
        self.images, self.masks = scenes  # (port) instead of data_path / IMAGE_PATH and MASK_PATH
        self.img_list = self.get_filenames(self.images)
        self.mask_list = self.get_filenames(self.masks)

        # Split between train and valid set (80/20)
        random_inst = random.Random(12345)  # for repeatability
        n_items = len(self.img_list)
        idxs = random_inst.sample(range(n_items), n_items // 5)
        if self.split == "train":
            idxs = [idx for idx in range(n_items) if idx not in idxs]
        self.img_list = [self.img_list[i] for i in idxs]
        self.mask_list = [self.mask_list[i] for i in idxs]

    def __len__(self):
        return len(self.img_list)

    def __getitem__(self, idx):
        img = self.images[self.img_list[idx]]  # (port) Image.open(...).resize(self.img_size)
        img = torch.tensor(img)

        mask = self.masks[self.mask_list[idx]]  # (port) Image.open(...).convert("L").resize(self.img_size)
        mask = torch.tensor(mask)
        if self.bug == "mask_transposed":
            mask = mask.t()  # a (width, height) vs (height, width) slip: the mask no longer lies on its image
        mask = self.encode_segmap(mask)

        if self.transform:
            img = self.transform(img)

        return img, mask

    def encode_segmap(self, mask):
        """Sets void classes to zero so they won't be considered for training."""
        for voidc in self.void_labels:
            mask[mask == voidc] = self.ignore_index
        for validc in self.valid_labels:
            mask[mask == validc] = self.class_map[validc]
        # remove extra idxs from updated dataset
        mask[mask > 18] = self.ignore_index
        return mask

    def get_filenames(self, path):
        return list(range(len(path)))  # (port) the in-memory scenes' indices in place of the files in ``path``


class UNet(nn.Module):
    """Architecture based on U-Net: Convolutional Networks for Biomedical Image Segmentation."""

    def __init__(self, num_classes: int = 19, num_layers: int = 5, features_start: int = 64, bilinear: bool = False):
        super().__init__()
        self.num_layers = num_layers

        layers = [DoubleConv(3, features_start)]

        feats = features_start
        for _ in range(num_layers - 1):
            layers.append(Down(feats, feats * 2))
            feats *= 2

        for _ in range(num_layers - 1):
            layers.append(Up(feats, feats // 2, bilinear))
            feats //= 2

        layers.append(nn.Conv2d(feats, num_classes, kernel_size=1))

        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        xi = [self.layers[0](x)]
        # Down path
        for layer in self.layers[1 : self.num_layers]:
            xi.append(layer(xi[-1]))
        # Up path
        for i, layer in enumerate(self.layers[self.num_layers : -1]):
            xi[-1] = layer(xi[-1], xi[-2 - i])
        return self.layers[-1](xi[-1])


class DoubleConv(nn.Module):
    """Double Convolution and BN and ReLU (3x3 conv -> BN -> ReLU) ** 2."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.net(x)


class Down(nn.Module):
    """Combination of MaxPool2d and DoubleConv in series."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.net = nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2), DoubleConv(in_ch, out_ch))

    def forward(self, x):
        return self.net(x)


class Up(nn.Module):
    """Upsampling (by either bilinear interpolation or transpose convolutions) followed by concatenation of feature map
    from contracting path, followed by double 3x3 convolution."""

    def __init__(self, in_ch: int, out_ch: int, bilinear: bool = False):
        super().__init__()
        self.upsample = None
        if bilinear:
            self.upsample = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
                nn.Conv2d(in_ch, in_ch // 2, kernel_size=1),
            )
        else:
            self.upsample = nn.ConvTranspose2d(in_ch, in_ch // 2, kernel_size=2, stride=2)

        self.conv = DoubleConv(in_ch, out_ch)

    def forward(self, x1, x2):
        x1 = self.upsample(x1)

        # Pad x1 to the size of x2
        diff_h = x2.shape[2] - x1.shape[2]
        diff_w = x2.shape[3] - x1.shape[3]

        x1 = F.pad(x1, [diff_w // 2, diff_w - diff_w // 2, diff_h // 2, diff_h - diff_h // 2])

        # Concatenate along the channels axis
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class SegModel(LightningModule):
    """Semantic Segmentation Module (the template's docstring shortened).

    Adam optimizer is used along with Cosine Annealing learning rate scheduler.
    """

    def __init__(
        self,
        data_path,
        batch_size: int = 4,
        lr: float = 1e-3,
        num_layers: int = 3,
        features_start: int = 64,
        bilinear: bool = False,
        bug=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.data_path = data_path
        self.batch_size = batch_size
        self.lr = lr
        self.num_layers = num_layers
        self.features_start = features_start
        self.bilinear = bilinear
        self.bug = bug

        self.net = UNet(
            num_classes=19, num_layers=self.num_layers, features_start=self.features_start, bilinear=self.bilinear
        )
        self.transform = _transform  # (port) ToTensor and Normalize written out
        self.trainset = KITTI(self.data_path, split="train", transform=self.transform, bug=bug)
        self.validset = KITTI(self.data_path, split="valid", transform=self.transform, bug=bug)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_nb):
        img, mask = batch
        img = img.float()
        mask = mask.long()
        out = self(img)
        if self.bug == "softmax_before_cross_entropy":
            out = F.softmax(out, dim=1)  # "probabilities per pixel" handed to a loss that applies log-softmax
        loss = F.cross_entropy(out, mask, ignore_index=250)
        log_dict = {"train_loss": loss}
        return {"loss": loss, "log": log_dict, "progress_bar": log_dict}

    def validation_step(self, batch, batch_idx):
        img, mask = batch
        img = img.float()
        mask = mask.long()
        out = self(img)
        val_loss = F.cross_entropy(out, mask, ignore_index=250)
        self.log("val_loss", val_loss, prog_bar=True)

    def configure_optimizers(self):
        params = self.net.parameters()
        if self.bug == "up_path_not_optimized":
            params = self.net.layers[: self.num_layers].parameters()  # the contracting path only
        opt = torch.optim.Adam(params, lr=self.lr)  # (port) self.learning_rate is never set: AttributeError
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        return [opt], [sch]

    def train_dataloader(self):
        return DataLoader(self.trainset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.validset, batch_size=self.batch_size, shuffle=False)


def _fit_step(model, optimizer, scheduler, loader, val_loader):
    """(port) ``Trainer.fit``'s automatic optimization, one batch per call; validation and the scheduler per epoch."""
    state = {"it": None, "epoch": 0, "batch_idx": 0}

    def epoch_end():
        model.eval()
        with torch.no_grad():
            for i, batch in enumerate(val_loader):
                model.validation_step(batch, i)
        scheduler.step()

    def train_step():
        try:
            batch = next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                epoch_end()
                state["epoch"] += 1
            model.train()
            state["it"], state["batch_idx"] = iter(loader), 0
            batch = next(state["it"])
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        result = {}

        def closure():
            output = model.training_step(batch, batch_idx)
            loss = output["loss"]
            model.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            model.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        model.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    return train_step


def _build(seed, bug=None):
    torch.manual_seed(seed)
    images, masks, palette = _scenes(seed)
    hparams = {"data_path": (images, masks), "batch_size": 8, "lr": 0.001, "num_layers": 3, "features_start": 8,
               "bilinear": False}
    model = SegModel(**hparams, bug=bug)
    [optimizer], [scheduler] = model.configure_optimizers()
    loader = model.train_dataloader()
    loader.generator = torch.Generator().manual_seed(seed)
    train_step = _fit_step(model, optimizer, scheduler, loader, model.val_dataloader())

    def eval_fn(module, batch):
        img, mask = batch
        module.eval()
        with torch.no_grad():
            pred = module(img.float()).argmax(1)
        module.train()
        keep = mask != 250
        return float((pred[keep] == mask[keep]).float().mean())

    palette_t = torch.tensor(palette, dtype=torch.float32)
    encoder = KITTI(([], []), split="train")

    def task_probe(img):
        """The labelling rule: the raw label whose palette colour is nearest the pixel's, encoded."""
        raw = (img * STD + MEAN).permute(0, 2, 3, 1)
        nearest = torch.cdist(raw.reshape(-1, 3), palette_t).argmin(1).reshape(raw.shape[:3])
        return encoder.encode_segmap(nearest.to(torch.uint8)).long()

    first = next(iter(DataLoader(model.trainset, batch_size=8)))
    return Program(name="lightningex_unet_segmentation", model=model, batch=(first[0], first[1].long()),
                   loss_fn=lambda out, mask: F.cross_entropy(out, mask, ignore_index=250), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task_probe=task_probe, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the mask read with its axes swapped ((width, height) for (height, width)): on square scenes nothing
    # fails, but every pixel's label now belongs to the transposed pixel of the image.
    Bug("mask_transposed", functools.partial(_build, bug="mask_transposed"), "learning_ledger", ("TASK",)),
    # classic: a softmax over the class axis before F.cross_entropy, which applies log-softmax itself.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the optimizer built over the contracting path's layers only: the Up blocks and the 1x1 head keep
    # their initial weights.
    Bug("up_path_not_optimized", functools.partial(_build, bug="up_path_not_optimized"), "four_structures",
        ("net.layers.3",)),
]
