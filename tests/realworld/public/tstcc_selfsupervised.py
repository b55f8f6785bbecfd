"""TS-TCC (Eldele et al., "Time-Series Representation Learning via Temporal and Contextual Contrasting", IJCAI
2021), the ``self_supervised`` training mode: a 3-block 1-D CNN encoder (``base_Model``) applied to a weak view
(scaling) and a strong view (permutation + jitter) of each series, both made once when the dataset is built;
temporal contrasting (``TC``: a small Transformer summarizes one view's past into a context ``c_t`` that predicts
the other view's next ``timesteps`` feature vectors, an InfoNCE over the batch) in both directions; contextual
contrasting (``NTXentLoss`` with cosine similarity, temperature 0.2) between the two contexts' projections;
``loss = (tc1 + tc2) * 1 + nt_xent * 0.7``; two Adam optimizers (betas (0.9, 0.99), weight decay 3e-4), one per
model, both zeroed before and stepped after the backward.

Source: https://github.com/emadeldeen24/TS-TCC
Commit: 15bdfd6eced6aeb6c638839828effe1b4b2ea391
Files: trainer/trainer.py (``model_train``), main.py (models, optimizers, seeds), models/model.py, models/TC.py,
models/attention.py, models/loss.py, dataloader/dataloader.py (``Load_Dataset``), dataloader/augmentations.py,
config_files/HAR_Configs.py
License: MIT (Copyright (c) 2022 Emadeldeen Eldele; full text in LICENSES/emadeldeen24-TS-TCC.txt)
Domain: time series, self-supervised representation learning (temporal + contextual contrasting)

Deviations from the original:
- data: UCI HAR's ``train.pt`` (a download, preprocessed) is replaced by synthetic 3-channel series of length 32
  made from ``seed``: 6 classes, each a class-specific frequency and phase pattern across channels with random
  amplitude and noise (the labels are loaded and batched as in the original, unused by the self-supervised loss);
  the augmentations draw from the global ``np.random`` as written, seeded by ``np.random.seed(seed)`` as
  ``main.py`` does; the train DataLoader's shuffle is seeded from ``seed``;
- sizes: HAR_Configs' input_channels 9 -> 3, final_out_channels 128 -> 16, features_len 18 -> 6 (the encoder's
  output length for series of 32), TC.hidden_dim 100 -> 16, TC.timesteps 6 -> 2, batch_size 128 -> 16 (drop_last
  kept), lr 3e-4 -> 3e-3 so that the 30 steps of the self-check show learning; kernel_size 8, stride 1, dropout
  0.35, augmentation ratios (1.1, 0.8, max_seg 8), temperature 0.2 and the Seq_Transformer's depth 4 / heads 4 /
  mlp_dim 64 kept;
- einops is not installed here: ``rearrange(t, 'b n (h d) -> b h n d')``, ``rearrange(out, 'b h n d -> b n (h
  d)')`` and ``repeat(c_token, '() n d -> b n d')`` are written with ``view``/``transpose``/``expand``;
- ``permutation``: ``np.random.permutation(splits)`` on the ragged list of segments is refused by NumPy 2 (no ragged
  arrays); the list is made an object array first (the same shuffle of the segments) and the index cast to int;
- ``nn.LogSoftmax()`` is written ``nn.LogSoftmax(dim=1)``, the dimension its implicit choice takes on the 2-D
  scores (without the deprecation warning);
- as written, ``permutation``'s ``ret[i] = pat[0, warp]`` copies the permuted first channel into every channel of
  the strong view;
- CPU only, logging, the ReduceLROnPlateau (not stepped in self-supervised mode), evaluation and checkpoints are
  dropped;
- one ``train_step`` is one iteration of ``model_train``'s loop; the Program's model is the encoder
  ``base_Model`` (the ``TC`` model and its optimizer stay in the loop and in ``loss_fn``), its batch the two
  augmented views of a batch, its ``loss_fn`` the self-supervised loss of ``model_train`` on the encoder's outputs;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, UP034, C417, RUF059, PLR0402  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# config_files/HAR_Configs.py (sizes reduced)
class Config(object):
    def __init__(self):
        # model configs
        self.input_channels = 3
        self.kernel_size = 8
        self.stride = 1
        self.final_out_channels = 16

        self.num_classes = 6
        self.dropout = 0.35
        self.features_len = 6

        # training configs
        self.num_epoch = 40

        # optimizer parameters
        self.beta1 = 0.9
        self.beta2 = 0.99
        self.lr = 3e-3

        # data parameters
        self.drop_last = True
        self.batch_size = 16

        self.Context_Cont = Context_Cont_configs()
        self.TC = TC_configs()
        self.augmentation = augmentations()


class augmentations(object):
    def __init__(self):
        self.jitter_scale_ratio = 1.1
        self.jitter_ratio = 0.8
        self.max_seg = 8


class Context_Cont_configs(object):
    def __init__(self):
        self.temperature = 0.2
        self.use_cosine_similarity = True


class TC_configs(object):  # ``TC`` in the config file
    def __init__(self):
        self.hidden_dim = 16
        self.timesteps = 2


# dataloader/augmentations.py
def DataTransform(sample, config):

    weak_aug = scaling(sample, config.augmentation.jitter_scale_ratio)
    strong_aug = jitter(permutation(sample, max_segments=config.augmentation.max_seg), config.augmentation.jitter_ratio)

    return weak_aug, strong_aug


def jitter(x, sigma=0.8):
    # https://arxiv.org/pdf/1706.00527.pdf
    return x + np.random.normal(loc=0., scale=sigma, size=x.shape)


def scaling(x, sigma=1.1):
    # https://arxiv.org/pdf/1706.00527.pdf
    factor = np.random.normal(loc=2., scale=sigma, size=(x.shape[0], x.shape[2]))
    ai = []
    for i in range(x.shape[1]):
        xi = x[:, i, :]
        ai.append(np.multiply(xi, factor[:, :])[:, np.newaxis, :])
    return np.concatenate((ai), axis=1)


def permutation(x, max_segments=5, seg_mode="random"):
    orig_steps = np.arange(x.shape[2])

    num_segs = np.random.randint(1, max_segments, size=(x.shape[0]))

    ret = np.zeros_like(x)
    for i, pat in enumerate(x):
        if num_segs[i] > 1:
            if seg_mode == "random":
                split_points = np.random.choice(x.shape[2] - 2, num_segs[i] - 1, replace=False)
                split_points.sort()
                splits = np.split(orig_steps, split_points)
            else:
                splits = np.array_split(orig_steps, num_segs[i])
            warp = np.concatenate(np.random.permutation(np.array(splits, dtype=object))).ravel().astype(np.int64)
            ret[i] = pat[0,warp]
        else:
            ret[i] = pat
    return torch.from_numpy(ret)


# dataloader/dataloader.py
class Load_Dataset(Dataset):
    # Initialize your data, download, etc.
    def __init__(self, dataset, config, training_mode):
        super(Load_Dataset, self).__init__()
        self.training_mode = training_mode

        X_train = dataset["samples"]
        y_train = dataset["labels"]

        if len(X_train.shape) < 3:
            X_train = X_train.unsqueeze(2)

        if X_train.shape.index(min(X_train.shape)) != 1:  # make sure the Channels in second dim
            X_train = X_train.permute(0, 2, 1)

        if isinstance(X_train, np.ndarray):
            self.x_data = torch.from_numpy(X_train)
            self.y_data = torch.from_numpy(y_train).long()
        else:
            self.x_data = X_train
            self.y_data = y_train

        self.len = X_train.shape[0]
        if training_mode == "self_supervised":  # no need to apply Augmentations in other modes
            self.aug1, self.aug2 = DataTransform(self.x_data, config)

    def __getitem__(self, index):
        if self.training_mode == "self_supervised":
            return self.x_data[index], self.y_data[index], self.aug1[index], self.aug2[index]
        else:
            return self.x_data[index], self.y_data[index], self.x_data[index], self.x_data[index]

    def __len__(self):
        return self.len


# models/model.py
class base_Model(nn.Module):
    def __init__(self, configs):
        super(base_Model, self).__init__()

        self.conv_block1 = nn.Sequential(
            nn.Conv1d(configs.input_channels, 32, kernel_size=configs.kernel_size,
                      stride=configs.stride, bias=False, padding=(configs.kernel_size//2)),
            nn.BatchNorm1d(32),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=2, stride=2, padding=1),
            nn.Dropout(configs.dropout)
        )

        self.conv_block2 = nn.Sequential(
            nn.Conv1d(32, 64, kernel_size=8, stride=1, bias=False, padding=4),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=2, stride=2, padding=1)
        )

        self.conv_block3 = nn.Sequential(
            nn.Conv1d(64, configs.final_out_channels, kernel_size=8, stride=1, bias=False, padding=4),
            nn.BatchNorm1d(configs.final_out_channels),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=2, stride=2, padding=1),
        )

        model_output_dim = configs.features_len
        self.logits = nn.Linear(model_output_dim * configs.final_out_channels, configs.num_classes)

    def forward(self, x_in):
        x = self.conv_block1(x_in)
        x = self.conv_block2(x)
        x = self.conv_block3(x)

        x_flat = x.reshape(x.shape[0], -1)
        logits = self.logits(x_flat)
        return logits, x


# models/attention.py
class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout=0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dropout=0.):
        super().__init__()
        self.heads = heads
        self.scale = dim ** -0.5

        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Sequential(
            nn.Linear(dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x, mask=None):
        b, n, _, h = *x.shape, self.heads
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        # rearrange(t, 'b n (h d) -> b h n d', h=h)
        q, k, v = map(lambda t: t.view(b, n, h, -1).transpose(1, 2), qkv)

        dots = torch.einsum('bhid,bhjd->bhij', q, k) * self.scale

        if mask is not None:
            mask = F.pad(mask.flatten(1), (1, 0), value=True)
            assert mask.shape[-1] == dots.shape[-1], 'mask has incorrect dimensions'
            mask = mask[:, None, :] * mask[:, :, None]
            dots.masked_fill_(~mask, float('-inf'))
            del mask

        attn = dots.softmax(dim=-1)

        out = torch.einsum('bhij,bhjd->bhid', attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)  # rearrange(out, 'b h n d -> b n (h d)')
        out = self.to_out(out)
        return out


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, mlp_dim, dropout):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual(PreNorm(dim, Attention(dim, heads=heads, dropout=dropout))),
                Residual(PreNorm(dim, FeedForward(dim, mlp_dim, dropout=dropout)))
            ]))

    def forward(self, x, mask=None):
        for attn, ff in self.layers:
            x = attn(x, mask=mask)
            x = ff(x)
        return x


class Seq_Transformer(nn.Module):
    def __init__(self, *, patch_size, dim, depth, heads, mlp_dim, channels=1, dropout=0.1):
        super().__init__()
        patch_dim = channels * patch_size
        self.patch_to_embedding = nn.Linear(patch_dim, dim)
        self.c_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = Transformer(dim, depth, heads, mlp_dim, dropout)
        self.to_c_token = nn.Identity()

    def forward(self, forward_seq):
        x = self.patch_to_embedding(forward_seq)
        b, n, _ = x.shape
        c_tokens = self.c_token.expand(b, -1, -1)  # repeat(self.c_token, '() n d -> b n d', b=b)
        x = torch.cat((c_tokens, x), dim=1)
        x = self.transformer(x)
        c_t = self.to_c_token(x[:, 0])
        return c_t


# models/TC.py
class TC(nn.Module):
    def __init__(self, configs, device):
        super(TC, self).__init__()
        self.num_channels = configs.final_out_channels
        self.timestep = configs.TC.timesteps
        self.Wk = nn.ModuleList([nn.Linear(configs.TC.hidden_dim, self.num_channels) for i in range(self.timestep)])
        self.lsoftmax = nn.LogSoftmax(dim=1)  # nn.LogSoftmax(): the implicit dim of a 2-D input
        self.device = device

        self.projection_head = nn.Sequential(
            nn.Linear(configs.TC.hidden_dim, configs.final_out_channels // 2),
            nn.BatchNorm1d(configs.final_out_channels // 2),
            nn.ReLU(inplace=True),
            nn.Linear(configs.final_out_channels // 2, configs.final_out_channels // 4),
        )

        self.seq_transformer = Seq_Transformer(patch_size=self.num_channels, dim=configs.TC.hidden_dim, depth=4, heads=4, mlp_dim=64)

    def forward(self, features_aug1, features_aug2):
        z_aug1 = features_aug1  # features are (batch_size, #channels, seq_len)
        seq_len = z_aug1.shape[2]
        z_aug1 = z_aug1.transpose(1, 2)

        z_aug2 = features_aug2
        z_aug2 = z_aug2.transpose(1, 2)

        batch = z_aug1.shape[0]
        t_samples = torch.randint(seq_len - self.timestep, size=(1,)).long().to(self.device)  # randomly pick time stamps

        nce = 0  # average over timestep and batch
        encode_samples = torch.empty((self.timestep, batch, self.num_channels)).float().to(self.device)

        for i in np.arange(1, self.timestep + 1):
            encode_samples[i - 1] = z_aug2[:, t_samples + i, :].view(batch, self.num_channels)
        forward_seq = z_aug1[:, :t_samples + 1, :]

        c_t = self.seq_transformer(forward_seq)

        pred = torch.empty((self.timestep, batch, self.num_channels)).float().to(self.device)
        for i in np.arange(0, self.timestep):
            linear = self.Wk[i]
            pred[i] = linear(c_t)
        for i in np.arange(0, self.timestep):
            total = torch.mm(encode_samples[i], torch.transpose(pred[i], 0, 1))
            nce += torch.sum(torch.diag(self.lsoftmax(total)))
        nce /= -1. * batch * self.timestep
        return nce, self.projection_head(c_t)


# models/loss.py
class NTXentLoss(torch.nn.Module):

    def __init__(self, device, batch_size, temperature, use_cosine_similarity):
        super(NTXentLoss, self).__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.device = device
        self.softmax = torch.nn.Softmax(dim=-1)
        self.mask_samples_from_same_repr = self._get_correlated_mask().type(torch.bool)
        self.similarity_function = self._get_similarity_function(use_cosine_similarity)
        self.criterion = torch.nn.CrossEntropyLoss(reduction="sum")

    def _get_similarity_function(self, use_cosine_similarity):
        if use_cosine_similarity:
            self._cosine_similarity = torch.nn.CosineSimilarity(dim=-1)
            return self._cosine_simililarity
        else:
            return self._dot_simililarity

    def _get_correlated_mask(self):
        diag = np.eye(2 * self.batch_size)
        l1 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=-self.batch_size)
        l2 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=self.batch_size)
        mask = torch.from_numpy((diag + l1 + l2))
        mask = (1 - mask).type(torch.bool)
        return mask.to(self.device)

    @staticmethod
    def _dot_simililarity(x, y):
        v = torch.tensordot(x.unsqueeze(1), y.T.unsqueeze(0), dims=2)
        # x shape: (N, 1, C)
        # y shape: (1, C, 2N)
        # v shape: (N, 2N)
        return v

    def _cosine_simililarity(self, x, y):
        # x shape: (N, 1, C)
        # y shape: (1, 2N, C)
        # v shape: (N, 2N)
        v = self._cosine_similarity(x.unsqueeze(1), y.unsqueeze(0))
        return v

    def forward(self, zis, zjs):
        representations = torch.cat([zjs, zis], dim=0)

        similarity_matrix = self.similarity_function(representations, representations)

        # filter out the scores from the positive samples
        l_pos = torch.diag(similarity_matrix, self.batch_size)
        r_pos = torch.diag(similarity_matrix, -self.batch_size)
        positives = torch.cat([l_pos, r_pos]).view(2 * self.batch_size, 1)

        negatives = similarity_matrix[self.mask_samples_from_same_repr].view(2 * self.batch_size, -1)

        logits = torch.cat((positives, negatives), dim=1)
        logits /= self.temperature

        labels = torch.zeros(2 * self.batch_size).to(self.device).long()
        loss = self.criterion(logits, labels)

        return loss / (2 * self.batch_size)


def make_har_like(rs, n=96, channels=3, length=32):
    t = np.arange(length) / length * 2 * math.pi
    y = rs.randint(0, 6, size=n)
    X = np.zeros((n, channels, length), dtype=np.float64)
    for k in range(n):
        f = 1 + y[k]
        for c in range(channels):
            X[k, c] = (1 + 0.3 * rs.randn()) * np.sin(f * t + c * (y[k] % 3)) + 0.2 * rs.randn(length)
    return {"samples": torch.from_numpy(X), "labels": torch.from_numpy(y).long()}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    configs = Config()
    device = torch.device("cpu")
    training_mode = "self_supervised"
    train_dataset = Load_Dataset(make_har_like(np.random.RandomState(seed)), configs, training_mode)
    train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=configs.batch_size,
                                               shuffle=True, drop_last=configs.drop_last,
                                               num_workers=0, generator=torch.Generator().manual_seed(seed))

    model = base_Model(configs).to(device)
    temporal_contr_model = TC(configs, device).to(device)
    model_optimizer = torch.optim.Adam(model.parameters(), lr=configs.lr, betas=(configs.beta1, configs.beta2), weight_decay=3e-4)
    temp_cont_optimizer = torch.optim.Adam(temporal_contr_model.parameters(), lr=configs.lr, betas=(configs.beta1, configs.beta2), weight_decay=3e-4)

    def ssl_loss(features1, features2):
        # normalize projection feature vectors
        features1 = F.normalize(features1, dim=1)
        features2 = F.normalize(features2, dim=1)

        temp_cont_loss1, temp_cont_lstm_feat1 = temporal_contr_model(features1, features2)
        temp_cont_loss2, temp_cont_lstm_feat2 = temporal_contr_model(features2, features1)

        # normalize projection feature vectors
        zis = temp_cont_lstm_feat1
        zjs = temp_cont_lstm_feat2

        # compute loss
        lambda1 = 1
        lambda2 = 0.7
        nt_xent_criterion = NTXentLoss(device, configs.batch_size, configs.Context_Cont.temperature,
                                       configs.Context_Cont.use_cosine_similarity)
        loss = (temp_cont_loss1 + temp_cont_loss2) * lambda1 + nt_xent_criterion(zis, zjs) * lambda2
        return loss

    state = {"it": iter(train_loader)}

    def train_step():
        try:
            data, labels, aug1, aug2 = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            data, labels, aug1, aug2 = next(state["it"])
        model.train()
        temporal_contr_model.train()
        # send to device
        data, labels = data.float().to(device), labels.long().to(device)
        aug1, aug2 = aug1.float().to(device), aug2.float().to(device)
        if bug == "one_view_twice":
            aug2 = aug1  # the weak view passed as both views

        # optimizer
        if bug != "no_zero_grad":
            model_optimizer.zero_grad()
        temp_cont_optimizer.zero_grad()

        predictions1, features1 = model(aug1)
        predictions2, features2 = model(aug2)
        loss = ssl_loss(features1, features2)

        loss.backward()
        model_optimizer.step()
        temp_cont_optimizer.step()
        return loss.detach()

    _x, _y, a1, a2 = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=configs.batch_size)))
    a1, a2 = a1.float(), a2.float()
    if bug == "one_view_twice":
        a2 = a1

    def loss_fn(outputs, aug2_):
        _predictions1, features1 = outputs
        _predictions2, features2 = model(aug2_)
        return ssl_loss(features1, features2)

    return Program(name="tstcc_selfsupervised", model=model, batch=(a1, a2), loss_fn=loss_fn,
                   optimizer=model_optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the weak view fed in place of the strong one (classic): both contrasts compare a view with itself, so
    # nothing has to be learned about the series beyond the identity of the view.
    Bug("one_view_twice", functools.partial(_build, bug="one_view_twice"), "learning_ledger", ("TASK",)),
    # the encoder's optimizer never zeroed (classic): its gradients pile up across iterations (the TC model's
    # optimizer is still zeroed).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # every parameter of the Program's model alike (README rule 6)
]
