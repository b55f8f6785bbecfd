"""SCARF (self-supervised contrastive learning for tabular data: each row's features are replaced at random by draws
from the features' empirical uniform marginals, encoder MLP + pretraining head MLP embed the row and its corrupted
view, NT-Xent with cosine similarity pulls the two together) trained as in the repository's example notebook:
``SCARFDataset`` of standardized features, ``train_epoch`` (forward both views, loss, backward, ``optimizer.step()``,
``optimizer.zero_grad()``), Adam lr 1e-3 with weight decay 1e-5, batch 128.

Source: https://github.com/clabrugere/pytorch-scarf
Commit: 3cc5b0641fdd1acedb9784f84e3cab68cf6015a3
Files: example/example.ipynb, example/utils.py, scarf/model.py, scarf/loss.py, scarf/dataset.py
License: MIT (Copyright (c) 2022 Clément Labrugere)
Domain: tabular deep model (self-supervised contrastive pretraining of a tabular encoder)

Deviations from the original:
- sizes: as in the notebook (encoder 3 layers of 8, head 2 layers of 24, corruption_rate 0.6, dropout 0.1,
  batch 128, lr 1e-3, weight_decay 1e-5, NTXent temperature 1.0);
- data: sklearn's breast-cancer table (sklearn is not installed) is replaced by a synthetic table made from
  ``seed`` of the same shape (569 rows, 30 numeric features: two classes, each feature a class-dependent mean plus
  a few shared latent factors and noise, so features are correlated as in the original); the notebook's 80/20
  stratified split and ``StandardScaler`` are written out in numpy (no constant columns to drop);
- ``get_device`` is the CPU; the tqdm bar is not needed; the notebook's downstream logistic-regression and t-SNE
  cells (sklearn) are left out, so ``eval_fn`` is the NT-Xent loss on the test rows in eval mode;
- the bug variants reach ``SCARF.forward`` and ``NTXent.forward`` through a module-level switch ``_BUG`` set by
  ``build``;
- one ``train_step`` is one iteration of ``train_epoch``'s ``for x in train_loader`` loop (``model.train()`` at each
  epoch start); the epoch-loss bookkeeping is kept per epoch.
"""
# ruff: noqa: PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.distributions.uniform import Uniform
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

_BUG = [None]

# ---- scarf/model.py -----------------------------------------------------------------------------------------------

class MLP(torch.nn.Sequential):
    def __init__(self, input_dim: int, hidden_dim: int, num_hidden: int, dropout: float = 0.0) -> None:
        layers = []
        in_dim = input_dim
        for _ in range(num_hidden - 1):
            layers.append(nn.Linear(in_dim, hidden_dim))
            layers.append(nn.BatchNorm1d(hidden_dim))
            layers.append(nn.ReLU(inplace=True))
            layers.append(nn.Dropout(dropout))
            in_dim = hidden_dim

        layers.append(nn.Linear(in_dim, hidden_dim))

        super().__init__(*layers)


class SCARF(nn.Module):
    def __init__(
        self,
        input_dim: int,
        features_low: int,
        features_high: int,
        dim_hidden_encoder: int,
        num_hidden_encoder: int,
        dim_hidden_head: int,
        num_hidden_head: int,
        corruption_rate: float = 0.6,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()

        self.encoder = MLP(input_dim, dim_hidden_encoder, num_hidden_encoder, dropout)
        self.pretraining_head = MLP(dim_hidden_encoder, dim_hidden_head, num_hidden_head, dropout)

        # uniform disstribution over marginal distributions of dataset's features
        self.marginals = Uniform(torch.Tensor(features_low), torch.Tensor(features_high))
        self.corruption_rate = corruption_rate

    def forward(self, x: Tensor) -> Tensor:
        batch_size, _ = x.size()

        # 1: create a mask of size (batch size, m) where for each sample we set the jth column to True at random, such that corruption_len / m = corruption_rate
        # 2: create a random tensor of size (batch size, m) drawn from the uniform distribution defined by the min, max values of the training set
        # 3: replace x_corrupted_ij by x_random_ij where mask_ij is true
        corruption_mask = torch.rand_like(x, device=x.device) > self.corruption_rate
        x_random = self.marginals.sample(torch.Size((batch_size,))).to(x.device)
        x_corrupted = torch.where(corruption_mask, x_random, x)

        # get embeddings
        embeddings = self.pretraining_head(self.encoder(x))
        if _BUG[0] == "corrupted_view_not_used":
            embeddings_corrupted = self.pretraining_head(self.encoder(x))
        else:
            embeddings_corrupted = self.pretraining_head(self.encoder(x_corrupted))

        return embeddings, embeddings_corrupted

    @torch.inference_mode()
    def get_embeddings(self, x: Tensor) -> Tensor:
        return self.encoder(x)


# ---- scarf/loss.py ------------------------------------------------------------------------------------------------

class NTXent(nn.Module):
    def __init__(self, temperature: float = 1.0) -> None:
        """NT-Xent loss for contrastive learning using cosine distance as similarity metric as used in [SimCLR](https://arxiv.org/abs/2002.05709).
        Implementation adapted from https://theaisummer.com/simclr/#simclr-loss-implementation

        Args:
            temperature (float, optional): scaling factor of the similarity metric. Defaults to 1.0.
        """
        super().__init__()
        self.temperature = temperature

    def forward(self, z_i: Tensor, z_j: Tensor) -> Tensor:
        """Compute NT-Xent loss using only anchor and positive batches of samples. Negative samples are the 2*(N-1) samples in the batch

        Args:
            z_i (torch.tensor): anchor batch of samples
            z_j (torch.tensor): positive batch of samples

        Returns:
            float: loss
        """
        batch_size = z_i.size(0)

        # compute similarity between the sample's embedding and its corrupted view
        z = torch.cat([z_i, z_j], dim=0)
        similarity = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)

        if _BUG[0] == "positives_on_main_diagonal":
            sim_ij = torch.diag(similarity, 0)[:batch_size]
            sim_ji = torch.diag(similarity, 0)[batch_size:]
        else:
            sim_ij = torch.diag(similarity, batch_size)
            sim_ji = torch.diag(similarity, -batch_size)
        positives = torch.cat([sim_ij, sim_ji], dim=0)

        mask = (~torch.eye(batch_size * 2, batch_size * 2, dtype=torch.bool, device=z_i.device)).float()
        numerator = torch.exp(positives / self.temperature)
        denominator = mask * torch.exp(similarity / self.temperature)

        all_losses = -torch.log(numerator / torch.sum(denominator, dim=1))
        loss = torch.sum(all_losses) / (2 * batch_size)

        return loss


# ---- scarf/dataset.py ---------------------------------------------------------------------------------------------

class SCARFDataset(Dataset):
    def __init__(self, data, target, columns=None):
        self.data = np.array(data)
        self.target = np.array(target)
        self.columns = columns

    @property
    def features_low(self):
        return self.data.min(axis=0)

    @property
    def features_high(self):
        return self.data.max(axis=0)

    @property
    def shape(self):
        return self.data.shape

    def __getitem__(self, index):
        return torch.tensor(self.data[index], dtype=torch.float32)

    def __len__(self):
        return len(self.data)


# ---- example/utils.py, example/example.ipynb ----------------------------------------------------------------------

def fix_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_table(seed, n=569, d=30):
    """Synthetic stand-in for the breast-cancer table: two classes, correlated numeric features."""
    rng = np.random.RandomState(seed)
    target = (rng.rand(n) < 0.63).astype(np.int64)
    latent = rng.randn(n, 4)
    mixing = rng.randn(4, d)
    shift = rng.randn(d) * 1.5
    data = latent @ mixing + target[:, None] * shift + 0.5 * rng.randn(n, d)
    return data * rng.uniform(0.5, 20, d) + rng.uniform(-5, 50, d), target


def _build(seed, bug=None):
    _BUG[0] = bug
    fix_seed(seed)
    data, target = make_table(seed)
    # train_test_split(test_size=0.2, stratify=target) and StandardScaler, written out
    rng = np.random.RandomState(seed)
    test_idx = np.concatenate([rng.permutation(np.where(target == c)[0])[:round(0.2 * (target == c).sum())]
                               for c in (0, 1)])
    train_idx = np.setdiff1d(np.arange(len(data)), test_idx)
    train_data, test_data = data[train_idx], data[test_idx]
    train_target = target[train_idx]
    mean, scale = train_data.mean(axis=0), train_data.std(axis=0)
    train_data, test_data = (train_data - mean) / scale, (test_data - mean) / scale

    # to torch dataset
    train_ds = SCARFDataset(train_data, train_target)
    test_ds = SCARFDataset(test_data, test_data)

    batch_size = 128
    device = torch.device("cpu")

    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True)

    model = SCARF(
        input_dim=train_ds.shape[1],
        features_low=train_ds.features_low,
        features_high=train_ds.features_high,
        dim_hidden_encoder=8,
        num_hidden_encoder=3,
        dim_hidden_head=24,
        num_hidden_head=2,
        corruption_rate=0.6,
        dropout=0.1,
    ).to(device)

    optimizer = Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
    ntxent_loss = NTXent()

    loss_history = []

    def epochs():
        # train_epoch(model, ntxent_loss, train_loader, optimizer, device), one batch per train_step
        while True:
            model.train()
            epoch_loss = 0.0

            for x in train_loader:
                x = x.to(device)

                # get embeddings
                emb_anchor, emb_positive = model(x)

                # compute loss
                loss = ntxent_loss(emb_anchor, emb_positive)
                loss.backward()

                if bug == "zero_grad_before_step":
                    optimizer.zero_grad()
                # update model weights
                optimizer.step()

                # reset gradients
                optimizer.zero_grad()

                # log progress
                epoch_loss += loss.item()
                yield loss.detach()

            loss_history.append(epoch_loss / len(train_loader.dataset))

    loop = epochs()

    def train_step():
        _BUG[0] = bug
        try:
            return next(loop)
        finally:
            _BUG[0] = None

    def eval_fn(model, batch):
        _BUG[0] = bug
        try:
            model.eval()
            with torch.no_grad():
                x = torch.tensor(test_ds.data, dtype=torch.float32)
                return float(ntxent_loss(*model(x)))
        finally:
            _BUG[0] = None

    def loss_fn(outputs, _targets=None):
        _BUG[0] = bug
        try:
            return ntxent_loss(*outputs)
        finally:
            _BUG[0] = None

    first = torch.tensor(train_data[:batch_size], dtype=torch.float32)
    _BUG[0] = None
    return Program(name="scarf_tabular", model=model, batch=(first,), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the second view embedded from the clean rows instead of the corrupted ones (classic): the positive pair is the
    # same row twice (up to dropout), the pretext task no longer asks for corruption-invariant features.
    Bug("corrupted_view_not_used", functools.partial(_build, bug="corrupted_view_not_used"), "learning_ledger",
        ("TASK",)),
    # the positives read from the main diagonal (offset 0) instead of offset +/-batch_size (classic): each embedding's
    # "positive" is its own similarity 1, the loss only pushes the batch apart.
    Bug("positives_on_main_diagonal", functools.partial(_build, bug="positives_on_main_diagonal"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() also called between backward() and step() (classic): every step applies no gradient.
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
