# ruff: noqa: UP008, UP031
"""Barlow Twins on CIFAR-10 as IgorSusmelj/barlowtwins writes it: a Lightning module (``BartonTwins``) whose
backbone is lightly's ``ResNetGenerator('resnet-18')`` without its classifier plus ``AdaptiveAvgPool2d``, wrapped in
lightly's ``SimSiam`` model (3-layer projection MLP, prediction MLP); two SimCLR views per image; the loss
``BarlowTwinsLoss`` standardizes both projections along the batch, forms the cross-correlation matrix and sums
``(c - I)^2`` with the off-diagonal terms scaled by ``lambda`` 5e-3; SGD (momentum 0.9, weight decay 5e-4) with a
per-epoch CosineAnnealingLR; a kNN monitor over backbone features (``BenchmarkModule``).

Source: https://github.com/IgorSusmelj/barlowtwins
Commit: d6e3530fce8d59c58e8d2180a1c400f08a903745
Files: ``main.py`` (``BartonTwins``, the loaders and hyperparameters), ``loss.py`` (``BarlowTwinsLoss``),
``utils.py`` (``knn_predict``, ``BenchmarkModule``); lightly 1.0.8 (``requirements.txt``:
https://github.com/lightly-ai/lightly at b8a19889ef47f1a6cd545a527b46adba30d88412, tag v1.0.8):
``lightly/models/resnet.py`` (``BasicBlock``, ``ResNet``, ``ResNetGenerator``), ``lightly/models/simsiam.py``,
``lightly/data/collate.py`` (``SimCLRCollateFunction``, ``BaseCollateFunction``)
License: MIT (barlowtwins: Copyright (c) 2022 Igor Susmelj, LICENSES/IgorSusmelj-barlowtwins.txt; lightly: MIT,
LICENSES/lightly-ai-lightly.txt)
Domain: self-supervised learning (Barlow Twins redundancy reduction, two views, kNN monitor)

Kept as written: ``BarlowTwinsLoss`` (``(z - mean) / std`` along the batch, ``c = z_a^T z_b / N``, the boolean-mask
in-place scaling of the off-diagonal terms), ``BartonTwins`` (backbone = the ResNet's children but the last, then
``AdaptiveAvgPool2d(1)``; ``SimSiam(backbone, num_ftrs, num_mlp_layers=3)``; ``training_step`` takes the
projections ``z`` of both views, the predictions are computed and unused; ``configure_optimizers``), its
``optimizer_steps`` warm-up hook, which Lightning never calls (the name is not ``optimizer_step``) and is kept
uncalled, ``knn_predict`` and ``BenchmarkModule`` (feature bank at the end of each training epoch, kNN top-1 in
validation), lightly's ``BasicBlock`` / ``ResNet`` / ``SimSiam`` heads (BN in every projection layer), batch
``drop_last=True``.

Deviations from the original:
- CIFAR-10 is not here (nor torchvision): 96 synthetic 16x16 RGB images of 4 kinds (a coloured square, disk, or
  horizontal / vertical stripes on a noisy background) made from ``seed``, 64 for training, 32 for testing; the
  ``SimCLRCollateFunction(input_size=16, gaussian_blur=0.)`` views are written out on tensors with 1.0.8's
  defaults (random resized crop scale 0.08-1, horizontal flip 0.5, colour jitter 0.4/0.4/0.4/0.1 with p 0.8, hue
  as a YIQ rotation, grayscale 0.2, ImageNet normalization), drawn from a generator seeded from ``seed``;
- sizes for 2 CPU cores: ResNet-18 at width 1/8 (``ResNetGenerator(width=0.125)``, feature size 64, so
  ``num_ftrs`` 512 -> 64), the SimSiam heads' defaults 2048/2048/512 -> proj_hidden 128, out 128, pred_hidden 32;
  batch 512 -> 32, knn_k 200 -> 10, num_workers 0; lightly 1.0.8's ResNet and collate function are in the helper
  ``_lightly108.py`` (its docstring lists what is written out and left out), the SimSiam docstrings are dropped;
- the module subclasses ``pytorch_lightning.LightningModule`` (2.x): ``training_epoch_end`` / ``validation_epoch_end``
  are called by hand, a ``Trainer(barebones=True)`` is attached so ``self.log`` works; one ``train_step`` is one
  batch of Lightning's automatic optimization (``_lightning_loop.automatic_step``); at an epoch's end the feature
  bank is rebuilt and the scheduler steps; ``eval_fn`` is the kNN top-1 accuracy on the test images;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import warnings

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _lightly108 import ResNetGenerator, SimCLRCollateFunction
from _lightning_loop import automatic_step

SIZE, N_TRAIN, N_TEST = 16, 64, 32  # (port) synthetic images


# loss.py
class BarlowTwinsLoss(torch.nn.Module):

    def __init__(self, device, lambda_param=5e-3, bug=None):
        super(BarlowTwinsLoss, self).__init__()
        self.lambda_param = lambda_param
        self.device = device
        self.bug = bug

    def off_diagonal(self, x: torch.Tensor):  # (port) the helper before 34f7c8b, used by the bug variant
        return x.masked_select(~torch.eye(x.size(0), dtype=bool))

    def forward(self, z_a: torch.Tensor, z_b: torch.Tensor):
        # normalize repr. along the batch dimension
        z_a_norm = (z_a - z_a.mean(0)) / z_a.std(0) # NxD
        z_b_norm = (z_b - z_b.mean(0)) / z_b.std(0) # NxD

        N = z_a.size(0)
        D = z_a.size(1)

        # cross-correlation matrix
        c = torch.mm(z_a_norm.T, z_b_norm) / N # DxD
        # loss
        c_diff = (c - torch.eye(D,device=self.device)).pow(2) # DxD
        # multiply off-diagonal elems of c_diff by lambda
        if self.bug == "off_diagonal_scaled_on_copy":
            self.off_diagonal(c_diff).mul_(self.lambda_param)
        else:
            c_diff[~torch.eye(D, dtype=bool)] *= self.lambda_param
        loss = c_diff.sum()

        return loss


# lightly 1.0.8: lightly/models/simsiam.py
def _prediction_mlp(in_dims, h_dims, out_dims):
    l1 = nn.Sequential(nn.Linear(in_dims, h_dims),
                       nn.BatchNorm1d(h_dims),
                       nn.ReLU(inplace=True))
    l2 = nn.Linear(h_dims, out_dims)
    prediction = nn.Sequential(l1, l2)
    return prediction


def _projection_mlp(in_dims, h_dims, out_dims, num_layers=3):
    l1 = nn.Sequential(nn.Linear(in_dims, h_dims),
                       nn.BatchNorm1d(h_dims),
                       nn.ReLU(inplace=True))
    l2 = nn.Sequential(nn.Linear(h_dims, h_dims),
                       nn.BatchNorm1d(h_dims),
                       nn.ReLU(inplace=True))
    l3 = nn.Sequential(nn.Linear(h_dims, out_dims),
                       nn.BatchNorm1d(out_dims))
    if num_layers == 3:
        projection = nn.Sequential(l1, l2, l3)
    elif num_layers == 2:
        projection = nn.Sequential(l1, l3)
    else:
        raise NotImplementedError("Only MLPs with 2 and 3 layers are implemented.")
    return projection


class SimSiam(nn.Module):

    def __init__(self, backbone, num_ftrs=2048, proj_hidden_dim=2048, pred_hidden_dim=512, out_dim=2048,
                 num_mlp_layers=3):
        super(SimSiam, self).__init__()
        self.backbone = backbone
        self.num_ftrs = num_ftrs
        self.proj_hidden_dim = proj_hidden_dim
        self.pred_hidden_dim = pred_hidden_dim
        self.out_dim = out_dim
        self.projection_mlp = \
            _projection_mlp(num_ftrs, proj_hidden_dim, out_dim, num_mlp_layers)
        self.prediction_mlp = \
            _prediction_mlp(out_dim, pred_hidden_dim, out_dim)

    def forward(self, x0, x1=None, return_features=False):
        f0 = self.backbone(x0).squeeze()
        z0 = self.projection_mlp(f0)
        p0 = self.prediction_mlp(z0)
        out0 = (z0, p0)
        # append features if requested
        if return_features:
            out0 = (out0, f0)
        if x1 is None:
            return out0
        f1 = self.backbone(x1).squeeze()
        z1 = self.projection_mlp(f1)
        p1 = self.prediction_mlp(z1)
        out1 = (z1, p1)
        # append features if requested
        if return_features:
            out1 = (out1, f1)
        return out0, out1


def _synthetic_images(seed, n):
    """(port) The stand-in for CIFAR-10: (image, label, filename) of 4 kinds of pattern."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    items = []
    for i in range(n):
        kind = i % 4
        bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, SIZE, SIZE, generator=g)
        color = torch.rand(3, 1, 1, generator=g)
        cy, cx = torch.randint(4, SIZE - 4, (2,), generator=g).tolist()
        masks = [((yy - cy).abs() < 3) & ((xx - cx).abs() < 3), (yy - cy) ** 2 + (xx - cx) ** 2 < 12,
                 (yy // 2) % 2 == 0, (xx // 2) % 2 == 0]
        items.append((torch.where(masks[kind], color, bg).clamp(0, 1), kind, "%d.png" % i))
    return items


# utils.py
def knn_predict(feature, feature_bank, feature_labels, classes: int, knn_k: int, knn_t: float):
    # compute cos similarity between each feature vector and feature bank ---> [B, N]
    sim_matrix = torch.mm(feature, feature_bank)
    # [B, K]
    sim_weight, sim_indices = sim_matrix.topk(k=knn_k, dim=-1)
    # [B, K]
    sim_labels = torch.gather(feature_labels.expand(feature.size(0), -1), dim=-1, index=sim_indices)
    # we do a reweighting of the similarities
    sim_weight = (sim_weight / knn_t).exp()
    # counts for each class
    one_hot_label = torch.zeros(feature.size(0) * knn_k, classes, device=sim_labels.device)
    # [B*K, C]
    one_hot_label = one_hot_label.scatter(dim=-1, index=sim_labels.view(-1, 1), value=1.0)
    # weighted score ---> [B, C]
    pred_scores = torch.sum(one_hot_label.view(feature.size(0), -1, classes) * sim_weight.unsqueeze(dim=-1), dim=1)
    pred_labels = pred_scores.argsort(dim=-1, descending=True)
    return pred_labels


class BenchmarkModule(pl.LightningModule):
    def __init__(self, dataloader_kNN, gpus, classes, knn_k, knn_t):
        super().__init__()
        self.backbone = nn.Module()
        self.max_accuracy = 0.0
        self.dataloader_kNN = dataloader_kNN
        self.gpus = gpus
        self.classes = classes
        self.knn_k = knn_k
        self.knn_t = knn_t

    def training_epoch_end(self, outputs):
        # update feature bank at the end of each training epoch
        self.backbone.eval()
        self.feature_bank = []
        self.targets_bank = []
        with torch.no_grad():
            for data in self.dataloader_kNN:
                img, target, _ = data
                feature = self.backbone(img).squeeze()
                feature = F.normalize(feature, dim=1)
                self.feature_bank.append(feature)
                self.targets_bank.append(target)
        self.feature_bank = torch.cat(self.feature_bank, dim=0).t().contiguous()
        self.targets_bank = torch.cat(self.targets_bank, dim=0).t().contiguous()
        self.backbone.train()

    def validation_step(self, batch, batch_idx):
        # we can only do kNN predictions once we have a feature bank
        if hasattr(self, 'feature_bank') and hasattr(self, 'targets_bank'):
            images, targets, _ = batch
            feature = self.backbone(images).squeeze()
            feature = F.normalize(feature, dim=1)
            pred_labels = knn_predict(feature, self.feature_bank, self.targets_bank, self.classes, self.knn_k, self.knn_t)
            num = images.size(0)
            top1 = (pred_labels[:, 0] == targets).float().sum().item()
            return (num, top1)


# main.py
class BartonTwins(BenchmarkModule):
    def __init__(self, dataloader_kNN, gpus, classes, knn_k, knn_t, max_epochs=800, bug=None):
        super().__init__(dataloader_kNN, gpus, classes, knn_k, knn_t)
        self.max_epochs, self.bug = max_epochs, bug
        # create a ResNet backbone and remove the classification head
        resnet = ResNetGenerator('resnet-18', width=0.125)
        self.backbone = nn.Sequential(
            *list(resnet.children())[:-1],
            nn.AdaptiveAvgPool2d(1),
        )
        # create a simsiam model based on ResNet
        # note that bartontwins has the same architecture
        self.resnet_simsiam = \
            SimSiam(self.backbone, num_ftrs=64, proj_hidden_dim=128, pred_hidden_dim=32, out_dim=128,
                    num_mlp_layers=3)
        self.criterion = BarlowTwinsLoss(device='cpu', bug=bug)

    def forward(self, x):
        self.resnet_simsiam(x)

    def training_step(self, batch, batch_idx):
        (x0, x1), _, _ = batch
        x0, x1 = self.resnet_simsiam(x0, x1)
        # our simsiam model returns both (features + projection head)
        z_a, _ = x0
        z_b, _ = x1
        loss = self.criterion(z_a, z_b)
        self.log('train_loss_ssl', loss)
        return loss

    # learning rate warm-up
    def optimizer_steps(self, epoch=None, batch_idx=None, optimizer=None, optimizer_idx=None,
                        optimizer_closure=None, on_tpu=None, using_native_amp=None, using_lbfgs=None):
        # 120 steps ~ 1 epoch
        if self.trainer.global_step < 1000:
            lr_scale = min(1., float(self.trainer.global_step + 1) / 1000.)
            for pg in optimizer.param_groups:
                pg['lr'] = lr_scale * 1e-3
        # update params
        optimizer.step()
        optimizer.zero_grad()

    def configure_optimizers(self):
        params = self.resnet_simsiam.parameters()
        if self.bug == "optimizer_over_heads_only":
            params = list(self.resnet_simsiam.projection_mlp.parameters()) + \
                list(self.resnet_simsiam.prediction_mlp.parameters())
        optim = torch.optim.SGD(params, lr=1e-3, momentum=0.9, weight_decay=5e-4)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optim, self.max_epochs)
        return [optim], [scheduler]


def _build(seed, bug=None):
    pl.seed_everything(seed, verbose=False)
    knn_k, knn_t, classes, batch_size = 10, 0.1, 4, 32
    collate_fn = SimCLRCollateFunction(torch.Generator().manual_seed(seed), input_size=SIZE, gaussian_blur=0.)
    norm = SimCLRCollateFunction(None)
    test_transforms = lambda items: [((img - norm.mean) / norm.std, y, f) for img, y, f in items]
    data = _synthetic_images(seed, N_TRAIN + N_TEST)
    loader = functools.partial(torch.utils.data.DataLoader, batch_size=batch_size, num_workers=0)
    dataloader_train_ssl = loader(data[:N_TRAIN], shuffle=True, collate_fn=collate_fn, drop_last=True)
    dataloader_train_kNN = loader(test_transforms(data[:N_TRAIN]), shuffle=False, drop_last=False)
    dataloader_test = loader(test_transforms(data[N_TRAIN:]), shuffle=False, drop_last=False)

    module = BartonTwins(dataloader_train_kNN, gpus=0, classes=classes, knn_k=knn_k, knn_t=knn_t, bug=bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=800)
    trainer.strategy.connect(module)
    module.trainer = trainer
    [optim], [scheduler] = module.configure_optimizers()

    def epoch_end():
        module.training_epoch_end([])
        scheduler.step()

    train_step = automatic_step(module, optim, dataloader_train_ssl, epoch_end=epoch_end)

    def eval_fn(model, _batch=None):
        # validation_step + validation_epoch_end over the test loader: the kNN top-1 accuracy
        if not hasattr(module, 'feature_bank'):
            module.training_epoch_end([])
        module.eval()
        with torch.no_grad():
            outs = [module.validation_step(b, i) for i, b in enumerate(dataloader_test)]
        module.train()
        return sum(t for _, t in outs) / sum(n for n, _ in outs)

    (x0, x1), _, _ = next(iter(dataloader_train_ssl))
    loss_fn = lambda out, v1: module.criterion(out[0], module.resnet_simsiam(v1)[0])
    return Program(name="barlowtwins_lightly", model=module.resnet_simsiam, batch=(x0, x1), loss_fn=loss_fn,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=dataloader_train_ssl)


build = functools.partial(_build, bug=None)

BUGS = [
    # the repository's own loss before 34f7c8b ("Fix buggy loss"): masked_select returns a copy, so mul_ scales
    # nothing and the off-diagonal (redundancy) terms weigh 1 instead of lambda 5e-3.
    Bug("off_diagonal_scaled_on_copy", functools.partial(_build, bug="off_diagonal_scaled_on_copy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: configure_optimizers over the projection / prediction heads only; the backbone never trains.
    Bug("optimizer_over_heads_only", functools.partial(_build, bug="optimizer_over_heads_only"), "four_structures",
        ("backbone",)),
]
