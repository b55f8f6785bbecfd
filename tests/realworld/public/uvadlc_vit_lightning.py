"""The Vision Transformer of the UvA Deep Learning tutorials (Phillip Lippe, tutorial 15 "Vision Transformers"):
CIFAR-10 images cut into 4x4 patches by ``img_to_patch``, a linear patch embedding, a learned [CLS] token and positional
embedding, pre-LayerNorm ``AttentionBlock``s around ``nn.MultiheadAttention`` (sequence-first), an MLP head on the
[CLS] output; a Lightning module with ``F.cross_entropy``, AdamW (lr 3e-4) and MultiStepLR (milestones 100, 150,
gamma 0.1, per epoch); training augmentation by horizontal flip and RandomResizedCrop (scale 0.8-1, ratio 0.9-1.1).

Source: https://github.com/phlippe/uvadlc_notebooks
Commit: 0da8037c7abc32f478ff6142acceb72dbcf088ee
Files: docs/tutorial_notebooks/tutorial15/Vision_Transformer.ipynb
License: MIT (Copyright (c) 2020 Phillip Lippe; full text in LICENSES/phlippe-uvadlc_notebooks.txt)
Domain: vision, image classification (ViT, Lightning module)

Deviations from the original:
- sizes: embed_dim 256 -> 32, hidden_dim 512 -> 64, num_heads 8 -> 4, num_layers 6 -> 2; patch_size 4,
  num_patches 64, num_classes 10 and dropout 0.2 unchanged; batch_size 128 -> 16; lr 3e-4 -> 1e-3 so that 30
  steps show the loss falling (the original trains 180 epochs);
- data: torchvision's CIFAR10 download is replaced by 32x32 RGB images made from ``seed`` (10 classes, each a fixed
  smooth random colour pattern, scaled, plus noise; 512 for training, 64 for validation); the transforms are
  written out in plain torch (RandomHorizontalFlip; RandomResizedCrop((32, 32), scale=(0.8, 1.0),
  ratio=(0.9, 1.1)) as a crop resized back bilinearly; ToTensor is the identity; Normalize with the notebook's
  CIFAR statistics); no workers, no pin_memory; the 45000/5000 split is the two synthetic sets;
- the notebook's plotting, tensorboard, pretrained-checkpoint download and ``ModelCheckpoint`` /
  ``LearningRateMonitor`` callbacks are left out; ``example_input_array`` is taken from the port's train loader;
- ``Trainer.fit`` is driven one step at a time (``_lightning_loop.automatic_step``: ``training_step``, the
  ``optimizer_zero_grad`` hook, ``backward``, ``optimizer_step``), a ``Trainer(barebones=True)`` attached so that
  ``self.log`` runs; at an epoch's end the validation loop runs and the MultiStepLR steps (Lightning's default
  interval);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from pytorch_lightning import Trainer

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

BATCH_SIZE = 16
N_TRAIN, N_VAL = 512, 64
MEAN = torch.tensor([0.49139968, 0.48215841, 0.44653091]).view(3, 1, 1)
STD = torch.tensor([0.24703223, 0.24348513, 0.26158784]).view(3, 1, 1)


# ---- data (CIFAR10 + the notebook's transforms, written out) ------------------------------------------------------

def make_images(seed):
    """10 classes, each a fixed smooth random RGB pattern; an image is its class pattern, scaled, plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate((torch.rand(10, 3, 4, 4, generator=g) < 0.5).float(), size=32, mode="bilinear",
                              align_corners=False)

    def sample(n):
        labels = torch.randint(10, (n,), generator=g)
        scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
        images = (templates[labels] * scale + 0.1 * torch.rand(n, 3, 32, 32, generator=g)).clamp(0, 1)
        return images, labels

    return sample(N_TRAIN), sample(N_VAL)


class SyntheticCIFAR10(data.Dataset):
    def __init__(self, images, labels, train):
        self.images, self.labels, self.train = images, labels, train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            if torch.rand(()) < 0.5:  # transforms.RandomHorizontalFlip()
                img = img.flip(-1)
            # transforms.RandomResizedCrop((32,32),scale=(0.8,1.0),ratio=(0.9,1.1))
            area = 32 * 32 * float(torch.empty(()).uniform_(0.8, 1.0))
            ratio = float(torch.exp(torch.empty(()).uniform_(float(torch.log(torch.tensor(0.9))),
                                                             float(torch.log(torch.tensor(1.1))))))
            w = min(32, round((area * ratio) ** 0.5))
            h = min(32, round((area / ratio) ** 0.5))
            top = int(torch.randint(0, 32 - h + 1, ()))
            left = int(torch.randint(0, 32 - w + 1, ()))
            img = F.interpolate(img[None, :, top:top + h, left:left + w], size=(32, 32), mode="bilinear",
                                align_corners=False)[0]
        return (img - MEAN) / STD, self.labels[i]  # transforms.ToTensor(), transforms.Normalize(...)


# ---- the notebook's model cells -----------------------------------------------------------------------------------

def img_to_patch(x, patch_size, flatten_channels=True, bug=None):
    """
    Inputs:
        x - torch.Tensor representing the image of shape [B, C, H, W]
        patch_size - Number of pixels per dimension of the patches (integer)
        flatten_channels - If True, the patches will be returned in a flattened format
                           as a feature vector instead of a image grid.
    """
    B, C, H, W = x.shape
    if bug == "patches_without_permute":
        # the image reshaped straight into [B, H'*W', C*p*p] (classic): each "patch" is a run of pixel rows
        # across channels, not a p x p square
        return x.reshape(B, (H//patch_size)*(W//patch_size), C*patch_size*patch_size)
    x = x.reshape(B, C, H//patch_size, patch_size, W//patch_size, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5) # [B, H', W', C, p_H, p_W]
    x = x.flatten(1,2)              # [B, H'*W', C, p_H, p_W]
    if flatten_channels:
        x = x.flatten(2,4)          # [B, H'*W', C*p_H*p_W]
    return x


class AttentionBlock(nn.Module):

    def __init__(self, embed_dim, hidden_dim, num_heads, dropout=0.0):
        """
        Inputs:
            embed_dim - Dimensionality of input and attention feature vectors
            hidden_dim - Dimensionality of hidden layer in feed-forward network
                         (usually 2-4x larger than embed_dim)
            num_heads - Number of heads to use in the Multi-Head Attention block
            dropout - Amount of dropout to apply in the feed-forward network
        """
        super().__init__()

        self.layer_norm_1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads,
                                          dropout=dropout)
        self.layer_norm_2 = nn.LayerNorm(embed_dim)
        self.linear = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, embed_dim),
            nn.Dropout(dropout)
        )


    def forward(self, x):
        inp_x = self.layer_norm_1(x)
        x = x + self.attn(inp_x, inp_x, inp_x)[0]
        x = x + self.linear(self.layer_norm_2(x))
        return x


class VisionTransformer(nn.Module):

    def __init__(self, embed_dim, hidden_dim, num_channels, num_heads, num_layers, num_classes, patch_size, num_patches,
                 dropout=0.0, bug=None):
        """
        Inputs:
            embed_dim - Dimensionality of the input feature vectors to the Transformer
            hidden_dim - Dimensionality of the hidden layer in the feed-forward networks
                         within the Transformer
            num_channels - Number of channels of the input (3 for RGB)
            num_heads - Number of heads to use in the Multi-Head Attention block
            num_layers - Number of layers to use in the Transformer
            num_classes - Number of classes to predict
            patch_size - Number of pixels that the patches have per dimension
            num_patches - Maximum number of patches an image can have
            dropout - Amount of dropout to apply in the feed-forward network and
                      on the input encoding
        """
        super().__init__()
        self.bug = bug

        self.patch_size = patch_size

        # Layers/Networks
        self.input_layer = nn.Linear(num_channels*(patch_size**2), embed_dim)
        self.transformer = nn.Sequential(*[AttentionBlock(embed_dim, hidden_dim, num_heads, dropout=dropout)
                                           for _ in range(num_layers)])
        self.mlp_head = nn.Sequential(
            nn.LayerNorm(embed_dim),
            nn.Linear(embed_dim, num_classes)
        )
        self.dropout = nn.Dropout(dropout)

        # Parameters/Embeddings
        self.cls_token = nn.Parameter(torch.randn(1,1,embed_dim))
        self.pos_embedding = nn.Parameter(torch.randn(1,1+num_patches,embed_dim))


    def forward(self, x):
        # Preprocess input
        x = img_to_patch(x, self.patch_size, bug=self.bug)
        B, T, _ = x.shape
        x = self.input_layer(x)

        # Add CLS token and positional encoding
        cls_token = self.cls_token.repeat(B, 1, 1)
        x = torch.cat([cls_token, x], dim=1)
        x = x + self.pos_embedding[:,:T+1]

        # Apply Transforrmer
        x = self.dropout(x)
        if self.bug == "attention_over_batch":
            # the transpose to sequence-first dropped and the [CLS] read as x[:, 0] to make the shapes fit
            # (classic): nn.MultiheadAttention (batch_first=False) attends across the images of the batch
            x = self.transformer(x)
            cls = x[:, 0]
        else:
            x = x.transpose(0, 1)
            x = self.transformer(x)

            # Perform classification prediction
            cls = x[0]
        out = self.mlp_head(cls)
        return out


class ViT(pl.LightningModule):

    def __init__(self, model_kwargs, lr, example_input_array=None, bug=None):
        super().__init__()
        self.save_hyperparameters(ignore=["example_input_array", "bug"])
        self.model = VisionTransformer(**model_kwargs, bug=bug)
        self.example_input_array = example_input_array

    def forward(self, x):
        return self.model(x)

    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr)
        lr_scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[100,150], gamma=0.1)
        return [optimizer], [lr_scheduler]

    def _calculate_loss(self, batch, mode="train"):
        imgs, labels = batch
        preds = self.model(imgs)
        loss = F.cross_entropy(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()

        self.log(f'{mode}_loss', loss)
        self.log(f'{mode}_acc', acc)
        return loss

    def training_step(self, batch, batch_idx):
        loss = self._calculate_loss(batch, mode="train")
        return loss

    def validation_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="val")

    def test_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="test")


# ---- train_model(...) -------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    pl.seed_everything(seed, verbose=False)
    (train_x, train_y), (val_x, val_y) = make_images(seed)
    train_set = SyntheticCIFAR10(train_x, train_y, train=True)
    val_set = SyntheticCIFAR10(val_x, val_y, train=False)
    train_loader = data.DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                                   generator=torch.Generator().manual_seed(seed))
    val_loader = data.DataLoader(val_set, batch_size=BATCH_SIZE, shuffle=False, drop_last=False)

    model = ViT(model_kwargs={
                    'embed_dim': 32,
                    'hidden_dim': 64,
                    'num_heads': 4,
                    'num_layers': 2,
                    'patch_size': 4,
                    'num_channels': 3,
                    'num_patches': 64,
                    'num_classes': 10,
                    'dropout': 0.2
                },
                lr=1e-3, example_input_array=next(iter(train_loader))[0], bug=bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=180)
    trainer.strategy.connect(model)
    model.trainer = trainer
    [optimizer], [lr_scheduler] = model.configure_optimizers()

    def epoch_end():
        model.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_loader):
                model.validation_step(batch, batch_idx)
        model.train()
        lr_scheduler.step()  # Lightning's default interval: "epoch"

    train_step = automatic_step(model, optimizer, train_loader, epoch_end=epoch_end)

    def eval_fn(module, batch):
        imgs, labels = batch
        module.eval()
        with torch.no_grad():
            preds = module(imgs)
        module.train()
        return float((preds.argmax(dim=-1) == labels).float().mean())

    first = (torch.stack([(x - MEAN) / STD for x in train_x[:BATCH_SIZE]]), train_y[:BATCH_SIZE])
    return Program(name="uvadlc_vit_lightning", model=model, batch=first,
                   loss_fn=lambda preds, labels: F.cross_entropy(preds, labels), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sequence-first transpose dropped before nn.MultiheadAttention (batch_first=False) and the [CLS] read as
    # x[:, 0] so the shapes fit (classic): every image attends to the other images of its batch, not its patches.
    Bug("attention_over_batch", functools.partial(_build, bug="attention_over_batch"), "tensor_trace",
        ("model.transformer",)),
    # img_to_patch's permute left out (classic layout slip): the "patches" are runs of rows across channels.
    Bug("patches_without_permute", functools.partial(_build, bug="patches_without_permute"), "tensor_trace",
        ("model.input_layer",)),
]
