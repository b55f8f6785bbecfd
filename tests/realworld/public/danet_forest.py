# ruff: noqa: PLR0402, UP008, PLR1711
"""DANet (Deep Abstract Networks) classifying forest-cover-like tabular data, from WhatAShot/DANet.

Source: https://github.com/WhatAShot/DANet, commit b007c57121ec9082f6ef19ec7465d9df70767c26, files ``main.py``,
``DAN_Task.py`` (``DANetClassifier``), ``abstract_model.py`` (``DANsModel.fit``, ``_train_epoch``,
``_train_batch``, ``_predict_epoch``, ``_set_optimizer``, ``_set_callbacks``), ``model/DANet.py``,
``model/sparsemax.py`` (``Entmax15``), ``lib/utils.py`` (``FastTensorDataLoader``, ``create_dataloaders``),
``lib/callbacks.py`` (``LRSchedulerCallback``), ``config/default.py`` and ``config/forest_cover_type.yaml``.
License: MIT (Copyright (c) 2021 Ronnie Rocket; full text in LICENSES/WhatAShot-DANet.txt).

Kept as written: the network (``BasicBlock``s of two ``AbstractLayer``s, each an Entmax-1.5 ``LearnableLocality``
feature mask, a grouped 1x1 convolution initialized by ``initialize_glu``, ghost batch norm and the k-way gated
ReLU sum; the shortcut an ``AbstractLayer`` on the raw input after dropout; later blocks read the raw input and the
previous output; dropout 0.1 and the 256-512 MLP head), ``Entmax15Function`` (forward and backward), the
classifier's ``cross_entropy`` on ``y.long()`` after the sorted-label mapping, ``_train_batch`` (zero_grad,
forward, loss, backward, ``clip_grad_norm_(network.parameters(), clip_value=2)``, step), the train/eval mode
switches of ``_train_epoch``/``_predict_epoch``, ``StepLR(gamma=0.95, step_size=20)`` stepped at each epoch end by
``LRSchedulerCallback``, ``FastTensorDataLoader`` (in-place shuffling of every tensor by one permutation), the
optimizer settings of ``main.py`` (QHAdam, lr 0.008, weight decay 1e-5, nus (0.8, 1.0)).

Deviations:
- ``qhoptim`` is not installed here: ``QHAdam`` is written here from its published update rule (Ma and Yarats,
  2019; facebookresearch/qhoptim, MIT): weight decay added to the gradient, bias-corrected moment averages through
  the ``beta_weight`` recursion, ``nu``-mixtures of the averages with the current gradient (and its square), the
  square root plus ``eps`` as denominator; qhoptim's defaults betas (0.9, 0.999), eps 1e-8.
- sizes: layer 4 (20: one init block plus ``layer // 2 - 1`` blocks), base_outdim 32 (64), k 5 as written,
  batch 256 (8192), virtual batch 64 (256), an epoch of 4 batches; 20 numeric features and 7 classes.
- the data: the forest cover type set is replaced by synthetic standardized features labelled by the argmax of a
  random two-layer network of a few features, from ``seed``; sklearn's ``check_array`` and ``unique_labels`` are
  ``np.unique`` on the labels; metrics and early stopping are replaced by the validation accuracy in ``eval_fn``.
- logging, checkpoints (``save_check``) and the accelerated inference module are dropped.
- left out of ``model/sparsemax.py`` as unused by DANet: ``Sparsemax``, ``Entmoid15`` and their functions.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function
from torch.nn.functional import cross_entropy
from torch.nn.utils import clip_grad_norm_
from torch.optim.optimizer import Optimizer

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_FEATURES = 20
N_CLASSES = 7
BATCHES_PER_EPOCH = 4


# ---- model/sparsemax.py ------------------------------------------------------------------------------------------
def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class Entmax15Function(Function):
    """
    An implementation of exact Entmax with alpha=1.5 (B. Peters, V. Niculae, A. Martins). See
    :cite:`https://arxiv.org/abs/1905.05702 for detailed description.
    Source: https://github.com/deep-spin/entmax
    """

    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim

        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val  # same numerical stability trick as for softmax
        input = input / 2  # divide by 2 to solve actual Entmax

        tau_star, _ = Entmax15Function._threshold_and_support(input, dim)
        output = torch.clamp(input - tau_star, min=0) ** 2
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        Y, = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = grad_output * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        Xsrt, _ = torch.sort(input, descending=True, dim=dim)

        rho = _make_ix_like(input, dim)
        mean = Xsrt.cumsum(dim) / rho
        mean_sq = (Xsrt ** 2).cumsum(dim) / rho
        ss = rho * (mean_sq - mean ** 2)
        delta = (1 - ss) / rho

        # NOTE this is not exactly the same as in reference algo
        # Fortunately it seems the clamped values never wrongly
        # get selected by tau <= sorted_z. Prove this!
        delta_nz = torch.clamp(delta, 0)
        tau = mean - torch.sqrt(delta_nz)

        support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
        tau_star = tau.gather(dim, support_size - 1)
        return tau_star, support_size


entmax15 = Entmax15Function.apply


class Entmax15(nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super(Entmax15, self).__init__()

    def forward(self, input):
        return entmax15(input, self.dim)


# ---- model/DANet.py ----------------------------------------------------------------------------------------------
def initialize_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)
    return


class GBN(torch.nn.Module):
    """
    Ghost Batch Normalization
    https://arxiv.org/abs/1705.08741
    """
    def __init__(self, input_dim, virtual_batch_size=512):
        super(GBN, self).__init__()
        self.input_dim = input_dim
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(self.input_dim)

    def forward(self, x):
        if self.training == True:
            chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
            res = [self.bn(x_) for x_ in chunks]
            return torch.cat(res, dim=0)
        else:
            return self.bn(x)


class LearnableLocality(nn.Module):

    def __init__(self, input_dim, k):
        super(LearnableLocality, self).__init__()
        self.register_parameter('weight', nn.Parameter(torch.rand(k, input_dim)))
        self.smax = Entmax15(dim=-1)

    def forward(self, x):
        mask = self.smax(self.weight)
        masked_x = torch.einsum('nd,bd->bnd', mask, x)  # [B, k, D]
        return masked_x


class AbstractLayer(nn.Module):
    def __init__(self, base_input_dim, base_output_dim, k, virtual_batch_size, bias=True):
        super(AbstractLayer, self).__init__()
        self.masker = LearnableLocality(input_dim=base_input_dim, k=k)
        self.fc = nn.Conv1d(base_input_dim * k, 2 * k * base_output_dim, kernel_size=1, groups=k, bias=bias)
        initialize_glu(self.fc, input_dim=base_input_dim * k, output_dim=2 * k * base_output_dim)
        self.bn = GBN(2 * base_output_dim * k, virtual_batch_size)
        self.k = k
        self.base_output_dim = base_output_dim

    def forward(self, x):
        b = x.size(0)
        x = self.masker(x)  # [B, D] -> [B, k, D]
        x = self.fc(x.view(b, -1, 1))  # [B, k, D] -> [B, k * D, 1] -> [B, k * (2 * D'), 1]
        x = self.bn(x)
        chunks = x.chunk(self.k, 1)  # k * [B, 2 * D', 1]
        x = sum([F.relu(torch.sigmoid(x_[:, :self.base_output_dim, :]) * x_[:, self.base_output_dim:, :])
                 for x_ in chunks])  # k * [B, D', 1] -> [B, D', 1]
        return x.squeeze(-1)


class BasicBlock(nn.Module):
    def __init__(self, input_dim, base_outdim, k, virtual_batch_size, fix_input_dim, drop_rate):
        super(BasicBlock, self).__init__()
        self.conv1 = AbstractLayer(input_dim, base_outdim // 2, k, virtual_batch_size)
        self.conv2 = AbstractLayer(base_outdim // 2, base_outdim, k, virtual_batch_size)

        self.downsample = nn.Sequential(
            nn.Dropout(drop_rate),
            AbstractLayer(fix_input_dim, base_outdim, k, virtual_batch_size)
        )

    def forward(self, x, pre_out=None):
        if pre_out == None:
            pre_out = x
        out = self.conv1(pre_out)
        out = self.conv2(out)
        identity = self.downsample(x)
        out += identity
        return F.leaky_relu(out, 0.01)


class DANet(nn.Module):
    def __init__(self, input_dim, num_classes, layer_num, base_outdim, k, virtual_batch_size, drop_rate=0.1,
                 bug=None):
        super(DANet, self).__init__()
        params = {'base_outdim': base_outdim, 'k': k, 'virtual_batch_size': virtual_batch_size,
                  'fix_input_dim': input_dim, 'drop_rate': drop_rate}
        self.init_layer = BasicBlock(input_dim, **params)
        self.lay_num = layer_num
        self.layer = nn.ModuleList()
        for i in range((layer_num // 2) - 1):
            self.layer.append(BasicBlock(base_outdim, **params))
        self.drop = nn.Dropout(0.1)
        self.bug = bug

        self.fc = nn.Sequential(nn.Linear(base_outdim, 256),
                                nn.ReLU(inplace=True),
                                nn.Linear(256, 512),
                                nn.ReLU(inplace=True),
                                nn.Linear(512, num_classes))

    def forward(self, x):
        out = self.init_layer(x)
        for i in range(len(self.layer)):
            out = self.layer[i](x, out)
        out = self.drop(out)
        out = self.fc(out)
        if self.bug == "softmax_in_forward":
            out = torch.nn.Softmax(dim=1)(out)
        return out


# ---- qhoptim.pyt.QHAdam (written from the published update rule) ------------------------------------------------
class QHAdam(Optimizer):
    """Quasi-hyperbolic Adam (Ma and Yarats, 2019), the update of facebookresearch/qhoptim's ``QHAdam``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), nus=(1.0, 1.0), weight_decay=0.0, eps=1e-8):
        super().__init__(params, {"lr": lr, "betas": betas, "nus": nus, "weight_decay": weight_decay, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            (beta1, beta2), (nu1, nu2) = group["betas"], group["nus"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["weight_decay"] != 0:
                    g = g + group["weight_decay"] * p
                st = self.state[p]
                if not st:
                    st["w1"], st["w2"] = 0.0, 0.0
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                st["w1"] = 1.0 + beta1 * st["w1"]
                st["w2"] = 1.0 + beta2 * st["w2"]
                a1, a2 = 1.0 - 1.0 / st["w1"], 1.0 - 1.0 / st["w2"]
                st["m"].mul_(a1).add_((1.0 - a1) * g)
                st["v"].mul_(a2).add_((1.0 - a2) * g * g)
                num = nu1 * st["m"] + (1.0 - nu1) * g
                den = (nu2 * st["v"] + (1.0 - nu2) * g * g).sqrt() + group["eps"]
                p.addcdiv_(num, den, value=-group["lr"])


# ---- lib/utils.py ------------------------------------------------------------------------------------------------
class FastTensorDataLoader:
    """
    A DataLoader-like object for a set of tensors that can be much faster than
    TensorDataset + DataLoader because dataloader grabs individual indices of
    the dataset and calls cat (slow).
    Source: https://discuss.pytorch.org/t/dataloader-much-slower-than-manual-batching/27014/6
    """
    def __init__(self, *tensors, batch_size=32, shuffle=False, bug=None):
        assert all(t.shape[0] == tensors[0].shape[0] for t in tensors)
        self.tensors = tensors
        self.bug = bug

        self.dataset_len = self.tensors[0].shape[0]
        self.batch_size = batch_size
        self.shuffle = shuffle

        # Calculate # batches
        n_batches, remainder = divmod(self.dataset_len, self.batch_size)
        if remainder > 0:
            n_batches += 1
        self.n_batches = n_batches

    def __iter__(self):
        if self.shuffle:
            r = torch.randperm(self.dataset_len)
            if self.bug == "features_shuffled_alone":
                self.tensors = [self.tensors[0][r]] + list(self.tensors[1:])
            else:
                self.tensors = [t[r] for t in self.tensors]
        self.i = 0
        return self

    def __next__(self):
        if self.i >= self.dataset_len:
            raise StopIteration
        batch = tuple(t[self.i:self.i+self.batch_size] for t in self.tensors)
        self.i += self.batch_size
        return batch

    def __len__(self):
        return self.n_batches


def make_forest_like(seed, n):
    """(port) forest cover stand-in: standardized features, 7 classes by a random two-layer rule on 6 features."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, N_FEATURES, generator=g)
    w1 = torch.randn(6, 16, generator=g)
    w2 = torch.randn(16, N_CLASSES, generator=g)
    y = (torch.tanh(X[:, :6] @ w1) @ w2).argmax(1)
    return X.numpy(), y.numpy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    fit_lr, batch_size, virtual_batch_size, clip_value = 0.008, 256, 64, 2
    model_config = {'layer': 4, 'base_outdim': 32, 'k': 5, 'drop_rate': 0.1}

    X_all, y_all = make_forest_like(seed, 1024 + 512)
    X_train, y_train, X_valid, y_valid = X_all[:1024], y_all[:1024], X_all[1024:], y_all[1024:]

    # DANetClassifier.update_fit_params / prepare_target
    classes_ = np.unique(y_train)
    output_dim = len(classes_)
    target_mapper = {class_label: index for index, class_label in enumerate(classes_)}
    y_train_mapped = np.vectorize(target_mapper.get)(y_train)
    y_valid_mapped = np.vectorize(target_mapper.get)(y_valid)

    # create_dataloaders
    train_dataloader = FastTensorDataLoader(torch.from_numpy(X_train).float(), torch.from_numpy(y_train_mapped),
                                            batch_size=batch_size, shuffle=True, bug=bug)
    valid_X, valid_y = torch.from_numpy(X_valid).float(), torch.from_numpy(y_valid_mapped)

    # _set_network / _set_optimizer / LRSchedulerCallback
    network = DANet(X_train.shape[1], output_dim, layer_num=model_config['layer'],
                    base_outdim=model_config['base_outdim'], k=model_config['k'],
                    virtual_batch_size=virtual_batch_size, drop_rate=model_config['drop_rate'], bug=bug)
    optimizer = QHAdam(network.parameters(), lr=fit_lr, weight_decay=1e-5, nus=(0.8, 1.0))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, gamma=0.95, step_size=20)
    loss_fn = cross_entropy

    def compute_loss(y_pred, y_true):
        return loss_fn(y_pred, y_true.long())

    state = {"it": None, "batch_idx": 0}

    def _predict_epoch(net):
        net.eval()
        with torch.no_grad():
            scores = net(valid_X)
        net.train()
        return float((scores.argmax(1) == valid_y).float().mean())

    def next_batch():
        if state["it"] is None or state["batch_idx"] == BATCHES_PER_EPOCH:
            if state["it"] is not None:  # end of the epoch: _predict_epoch, then the callbacks' scheduler step
                _predict_epoch(network)
                scheduler.step()
            network.train()
            state["it"] = iter(train_dataloader)
            state["batch_idx"] = 0
        state["batch_idx"] += 1
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        X, y = next_batch()
        # _train_batch
        X = X.float()
        y = y.float()
        optimizer.zero_grad()
        output = network(X)
        loss = compute_loss(output, y)
        # Perform backward pass and optimization
        loss.backward()
        if clip_value:
            clip_grad_norm_(network.parameters(), clip_value)
        optimizer.step()
        return loss.detach()

    batch = (torch.from_numpy(X_train[:batch_size]).float(), torch.from_numpy(y_train_mapped[:batch_size]))
    return Program(name="danet_forest", model=network, batch=batch, loss_fn=compute_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda m, _batch: _predict_epoch(m), loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # a Softmax added at the end of forward (the one predict_proba applies), so cross_entropy's log-softmax runs
    # on probabilities (classic).
    Bug("softmax_in_forward", functools.partial(_build, bug="softmax_in_forward"), "learning_ledger",
        ("OBJECTIVE",)),
    # FastTensorDataLoader's in-place shuffle applied to the features alone: each epoch pairs the rows with
    # another row's labels (classic: one permutation not applied to every tensor).
    Bug("features_shuffled_alone", functools.partial(_build, bug="features_shuffled_alone"), "learning_ledger",
        ("TASK",)),
]
