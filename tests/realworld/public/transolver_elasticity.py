# ruff: noqa: UP004, UP008, UP039, SIM118, PLR0402, PLW0127, RUF059
"""Transolver (Wu et al., ICML 2024): a transformer PDE solver on an irregular mesh. Every mesh point's features are
softly assigned to ``slice_num`` learned slices per head (a softmax over slices with a learned temperature); the
slice tokens are the weighted means of the points' features, attention runs among the slice tokens, and the result
is spread back to the points with the same weights. The elasticity benchmark maps the point cloud of a unit cell
with a void (the points' coordinates only) to the stress at every point; the loss is the relative L2 error on the
decoded stress, with AdamW, gradient clipping and a per-epoch cosine schedule.

Source: https://github.com/thuml/Transolver
Commit: 75e0f67643806a81cd1d3f6adc88dd8c02416fe7
Files: ``PDE-Solving-StandardBenchmark/exp_elas.py`` (``main``: data split, ``UnitTransformer`` on the stress,
AdamW, ``CosineAnnealingLR``, ``TestLoss(size_average=False)``, the epoch loop and the test loop),
``model/Transolver_Irregular_Mesh.py`` (``MLP``, ``Transolver_block``, ``Model``), ``model/Physics_Attention.py``
(``Physics_Attention_Irregular_Mesh``), ``utils/testloss.py`` (``TestLoss``), ``utils/normalizer.py``
(``UnitTransformer``), ``model_dict.py``, ``scripts/Transolver_Elas.sh``
License: MIT (Copyright (c) 2024 THUML @ Tsinghua University; full text in LICENSES/thuml-Transolver.txt)
Domain: scientific ML, neural operator on a point cloud (physics-attention transformer, relative L2 loss)

Kept as written: ``Physics_Attention_Irregular_Mesh`` (in_project_x / in_project_fx, orthogonal init of
in_project_slice, softmax over slices divided by the temperature parameter (init 0.5), slice tokens normalized by
the slice weights' sums + 1e-5, q/k/v among slice tokens, scaled dot-product softmax, deslice by the same weights,
heads merged, ``to_out``), ``MLP``, ``Transolver_block`` (pre-LN attention and MLP with residuals, the last block's
LayerNorm + linear head), ``Model`` (``preprocess`` MLP of the coordinates to 2 * n_hidden -> n_hidden, the
``placeholder`` parameter added to every point, trunc-normal(0.02) init of linears, LayerNorm init),
``TestLoss.rel``, ``UnitTransformer`` (mean and std over samples and points), ``exp_elas.py``'s training loop body
(``model.train()``, zero_grad, ``out = model(x, None).squeeze(-1)``, both ``out`` and ``y`` decoded, the relative
L2 loss summed over the batch, backward, ``clip_grad_norm_`` to ``max_grad_norm``, step; ``scheduler.step()`` per
epoch), the test loop (``model.eval()``, decoded output against the raw test stress, the summed relative error over
ntest), the script's settings (lr 1e-3, weight decay 1e-5, max_grad_norm 0.1, mlp_ratio 1, dropout 0,
unified_pos 0, Time_Input False, fun_dim 0, out_dim 1).

Deviations from the original:
- the elasticity data (``Random_UnitCell_sigma_10.npy`` / ``Random_UnitCell_XY_10.npy``, downloaded) are not here:
  ``_synthetic_elasticity`` makes, from ``seed``, unit cells with a circular void of random centre and radius, 96
  points drawn at more than 1.1 radii from its centre, and the hoop stress of a plate with a hole under tension
  (Kirsch: ``s0 / 2 * (1 + r^2 / d^2) - s0 / 2 * (1 + 3 r^4 / d^4) * cos(2 theta)`` at distance ``d`` and angle
  ``theta`` from the void's centre, the far-field ``s0 = 100 + 200 y`` varying along the cell) (learnable: the void is where the points are not); ntrain 1000 -> 96, ntest 200 -> 32;
- sizes for 2 CPU cores: n_hidden 128 -> 32, n_heads 8 -> 4, n_layers 8 -> 2, slice_num 64 -> 16, batch size 1 ->
  8, epochs 500 (the cosine schedule's T_max) kept;
- ``timm``'s ``trunc_normal_`` is ``torch.nn.init.trunc_normal_`` (the same defaults); einops' ``rearrange(out_x,
  'b h n d -> b n (h d)')`` is written out as permute + reshape; the ``T`` / ``Time_Input`` path
  (``timestep_embedding``) and ``get_grid`` (unified_pos only) are left out since the script never uses them; the
  ``.cuda()`` calls are dropped;
- the epoch loop is unrolled: one ``train_step`` is one batch of it (``model.train()`` and a new shuffled loader pass
  at the start of an epoch, ``scheduler.step()`` when it ends); ``eval_fn`` is the test loop returning ``rel_err``
  (the plots, prints, ``count_parameters`` and checkpoints are dropped);
- long signatures and calls are joined on fewer lines; ``main``'s data part is ``_data``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
from torch.nn.init import trunc_normal_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_POINTS, NTRAIN, NTEST = 96, 96, 32  # (port) synthetic elasticity
SELF_CHECK_STEPS = 200

ACTIVATION = {'gelu': nn.GELU, 'tanh': nn.Tanh, 'sigmoid': nn.Sigmoid, 'relu': nn.ReLU, 'leaky_relu': nn.LeakyReLU(0.1),
              'softplus': nn.Softplus, 'ELU': nn.ELU, 'silu': nn.SiLU}


# model/Physics_Attention.py
class Physics_Attention_Irregular_Mesh(nn.Module):
    ## for irregular meshes in 1D, 2D or 3D space
    def __init__(self, dim, heads=8, dim_head=64, dropout=0., slice_num=64, bug=None):
        super().__init__()
        self.bug = bug
        inner_dim = dim_head * heads
        self.dim_head = dim_head
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.temperature = nn.Parameter(torch.ones([1, heads, 1, 1]) * 0.5)

        self.in_project_x = nn.Linear(dim, inner_dim)
        self.in_project_fx = nn.Linear(dim, inner_dim)
        self.in_project_slice = nn.Linear(dim_head, slice_num)
        for l in [self.in_project_slice]:
            torch.nn.init.orthogonal_(l.weight)  # use a principled initialization
        self.to_q = nn.Linear(dim_head, dim_head, bias=False)
        self.to_k = nn.Linear(dim_head, dim_head, bias=False)
        self.to_v = nn.Linear(dim_head, dim_head, bias=False)
        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        # B N C
        B, N, C = x.shape

        ### (1) Slice
        fx_mid = self.in_project_fx(x).reshape(B, N, self.heads, self.dim_head) \
            .permute(0, 2, 1, 3).contiguous()  # B H N C
        x_mid = self.in_project_x(x).reshape(B, N, self.heads, self.dim_head) \
            .permute(0, 2, 1, 3).contiguous()  # B H N C
        if self.bug == "slice_softmax_over_points":
            # classic wrong axis: each slice's weights normalized over the points instead of each point's over slices
            slice_weights = torch.softmax(self.in_project_slice(x_mid) / self.temperature, dim=2)
        else:
            slice_weights = self.softmax(self.in_project_slice(x_mid) / self.temperature)  # B H N G
        slice_norm = slice_weights.sum(2)  # B H G
        slice_token = torch.einsum("bhnc,bhng->bhgc", fx_mid, slice_weights)
        slice_token = slice_token / ((slice_norm + 1e-5)[:, :, :, None].repeat(1, 1, 1, self.dim_head))

        ### (2) Attention among slice tokens
        q_slice_token = self.to_q(slice_token)
        k_slice_token = self.to_k(slice_token)
        v_slice_token = self.to_v(slice_token)
        dots = torch.matmul(q_slice_token, k_slice_token.transpose(-1, -2)) * self.scale
        attn = self.softmax(dots)
        attn = self.dropout(attn)
        out_slice_token = torch.matmul(attn, v_slice_token)  # B H G D

        ### (3) Deslice
        out_x = torch.einsum("bhgc,bhng->bhnc", out_slice_token, slice_weights)
        if self.bug == "heads_merged_without_permute":
            # classic: (h, n) flattened as if they were (n, h), every point gets another point's heads
            out_x = out_x.reshape(B, N, self.heads * self.dim_head)
        else:
            out_x = out_x.permute(0, 2, 1, 3).reshape(B, N, self.heads * self.dim_head)  # (port) einops rearrange
        return self.to_out(out_x)


# model/Transolver_Irregular_Mesh.py
class MLP(nn.Module):
    def __init__(self, n_input, n_hidden, n_output, n_layers=1, act='gelu', res=True):
        super(MLP, self).__init__()

        if act in ACTIVATION.keys():
            act = ACTIVATION[act]
        else:
            raise NotImplementedError
        self.n_input = n_input
        self.n_hidden = n_hidden
        self.n_output = n_output
        self.n_layers = n_layers
        self.res = res
        self.linear_pre = nn.Sequential(nn.Linear(n_input, n_hidden), act())
        self.linear_post = nn.Linear(n_hidden, n_output)
        self.linears = nn.ModuleList([nn.Sequential(nn.Linear(n_hidden, n_hidden), act()) for _ in range(n_layers)])

    def forward(self, x):
        x = self.linear_pre(x)
        for i in range(self.n_layers):
            if self.res:
                x = self.linears[i](x) + x
            else:
                x = self.linears[i](x)
        x = self.linear_post(x)
        return x


class Transolver_block(nn.Module):
    """Transformer encoder block."""

    def __init__(self, num_heads: int, hidden_dim: int, dropout: float, act='gelu', mlp_ratio=4, last_layer=False,
                 out_dim=1, slice_num=32, bug=None):
        super().__init__()
        self.last_layer = last_layer
        self.ln_1 = nn.LayerNorm(hidden_dim)
        self.Attn = Physics_Attention_Irregular_Mesh(hidden_dim, heads=num_heads, dim_head=hidden_dim // num_heads,
                                                     dropout=dropout, slice_num=slice_num, bug=bug)
        self.ln_2 = nn.LayerNorm(hidden_dim)
        self.mlp = MLP(hidden_dim, hidden_dim * mlp_ratio, hidden_dim, n_layers=0, res=False, act=act)
        if self.last_layer:
            self.ln_3 = nn.LayerNorm(hidden_dim)
            self.mlp2 = nn.Linear(hidden_dim, out_dim)

    def forward(self, fx):
        fx = self.Attn(self.ln_1(fx)) + fx
        fx = self.mlp(self.ln_2(fx)) + fx
        if self.last_layer:
            return self.mlp2(self.ln_3(fx))
        else:
            return fx


class Model(nn.Module):
    def __init__(self, space_dim=1, n_layers=5, n_hidden=256, dropout=0.0, n_head=8, Time_Input=False, act='gelu',
                 mlp_ratio=1, fun_dim=1, out_dim=1, slice_num=32, ref=8, unified_pos=False, bug=None):
        super(Model, self).__init__()
        self.__name__ = 'Transolver_1D'
        self.ref = ref
        self.unified_pos = unified_pos
        self.Time_Input = Time_Input
        self.n_hidden = n_hidden
        self.space_dim = space_dim
        if self.unified_pos:
            self.preprocess = MLP(fun_dim + self.ref * self.ref, n_hidden * 2, n_hidden, n_layers=0, res=False, act=act)
        else:
            self.preprocess = MLP(fun_dim + space_dim, n_hidden * 2, n_hidden, n_layers=0, res=False, act=act)

        self.blocks = nn.ModuleList([Transolver_block(num_heads=n_head, hidden_dim=n_hidden, dropout=dropout, act=act,
                                                      mlp_ratio=mlp_ratio, out_dim=out_dim, slice_num=slice_num,
                                                      last_layer=(_ == n_layers - 1), bug=bug)
                                     for _ in range(n_layers)])
        self.initialize_weights()
        self.placeholder = nn.Parameter((1 / (n_hidden)) * torch.rand(n_hidden, dtype=torch.float))

    def initialize_weights(self):
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward(self, x, fx, T=None):
        if fx is not None:
            fx = torch.cat((x, fx), -1)
            fx = self.preprocess(fx)
        else:
            fx = self.preprocess(x)
        fx = fx + self.placeholder[None, None, :]

        for block in self.blocks:
            fx = block(fx)

        return fx


# utils/testloss.py
class TestLoss(object):
    def __init__(self, d=2, p=2, size_average=True, reduction=True):
        super(TestLoss, self).__init__()

        assert d > 0 and p > 0

        self.d = d
        self.p = p
        self.reduction = reduction
        self.size_average = size_average

    def rel(self, x, y):
        num_examples = x.size()[0]

        diff_norms = torch.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples, -1), self.p, 1)
        if self.reduction:
            if self.size_average:
                return torch.mean(diff_norms / y_norms)
            else:
                return torch.sum(diff_norms / y_norms)

        return diff_norms / y_norms

    def __call__(self, x, y):
        return self.rel(x, y)


# utils/normalizer.py
class UnitTransformer():
    def __init__(self, X):
        self.mean = X.mean(dim=(0, 1), keepdim=True)
        self.std = X.std(dim=(0, 1), keepdim=True) + 1e-8

    def encode(self, x):
        x = (x - self.mean) / (self.std)
        return x

    def decode(self, x):
        return x * self.std + self.mean


def _synthetic_elasticity(seed, n):
    """(port) Unit cells with a circular void; Kirsch's hoop stress at 96 points outside it."""
    rng = np.random.RandomState(seed)
    xy, sigma = np.zeros((n, N_POINTS, 2)), np.zeros((n, N_POINTS))
    for i in range(n):
        c, r = rng.uniform(0.3, 0.7, size=2), rng.uniform(0.1, 0.25)
        pts = rng.uniform(0, 1, size=(4 * N_POINTS, 2))
        pts = pts[np.linalg.norm(pts - c, axis=1) > 1.1 * r][:N_POINTS]
        d = np.linalg.norm(pts - c, axis=1)
        theta = np.arctan2(pts[:, 1] - c[1], pts[:, 0] - c[0])
        s0 = 100.0 + 200.0 * pts[:, 1]  # far-field tension varying along y (bending)
        xy[i] = pts
        sigma[i] = s0 / 2 * (1 + r**2 / d**2) - s0 / 2 * (1 + 3 * r**4 / d**4) * np.cos(2 * theta)
    return torch.tensor(sigma, dtype=torch.float), torch.tensor(xy, dtype=torch.float)


# exp_elas.py
def _data(seed, args):
    ntrain = args.ntrain
    ntest = NTEST
    input_s, input_xy = _synthetic_elasticity(seed, ntrain + ntest)  # (port) instead of the .npy files
    train_s = input_s[:ntrain]
    test_s = input_s[-ntest:]
    train_xy = input_xy[:ntrain]
    test_xy = input_xy[-ntest:]
    y_normalizer = UnitTransformer(train_s)
    train_s = y_normalizer.encode(train_s)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_xy, train_xy, train_s),
                                               batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(test_xy, test_xy, test_s),
                                              batch_size=args.batch_size, shuffle=False)
    return ntest, train_xy, train_s, y_normalizer, train_loader, test_loader


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(lr=1e-3, epochs=500, weight_decay=1e-5, model='Transolver_Irregular_Mesh',
                                 n_hidden=32, n_layers=2, n_heads=4, batch_size=8, max_grad_norm=0.1, mlp_ratio=1,
                                 dropout=0.0, ntrain=NTRAIN, unified_pos=0, ref=8, slice_num=16)  # (port) sizes
    ntest, train_xy, train_s, y_normalizer, train_loader, test_loader = _data(seed, args)
    model = Model(space_dim=2, n_layers=args.n_layers, n_hidden=args.n_hidden, dropout=args.dropout,
                  n_head=args.n_heads, Time_Input=False, mlp_ratio=args.mlp_ratio, fun_dim=0, out_dim=1,
                  slice_num=args.slice_num, ref=args.ref, unified_pos=args.unified_pos, bug=bug)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    myloss = TestLoss(size_average=False)
    state = {"it": None}

    def train_step():
        if state["it"] is None:
            model.train()
            state["it"] = iter(train_loader)
        try:
            pos, fx, y = next(state["it"])
        except StopIteration:
            scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            pos, fx, y = next(state["it"])
        x, fx, y = pos, fx, y  # x:B,N,2  fx:B,N,2  y:B,N,
        optimizer.zero_grad()
        out = model(x, None).squeeze(-1)
        out = y_normalizer.decode(out)
        if bug != "y_left_encoded":
            # (bug) the target's decode dropped: decoded predictions fitted to normalized stresses
            y = y_normalizer.decode(y)
        loss = myloss(out, y)
        loss.backward()
        if args.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        return loss.detach()

    def loss_fn(out, y):
        return myloss(y_normalizer.decode(out.squeeze(-1)), y_normalizer.decode(y))

    def eval_fn(model, batch):
        model.eval()
        rel_err = 0.0
        with torch.no_grad():
            for pos, fx, y in test_loader:
                x, fx, y = pos, fx, y
                out = model(x, None).squeeze(-1)
                out = y_normalizer.decode(out)
                tl = myloss(out, y).item()
                rel_err += tl
        rel_err /= ntest
        model.train()
        return rel_err

    batch = (train_xy[:args.batch_size], train_s[:args.batch_size])
    return Program(name="transolver_elasticity", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic wrong axis: the slice weights' softmax taken over the points (dim 2) instead of over the slices, so a
    # point's weights no longer form a distribution over slices and the deslice mixes scales
    Bug("slice_softmax_over_points", functools.partial(_build, bug="slice_softmax_over_points"), "tensor_trace",
        ("blocks.0.Attn",)),
    # classic: einops' rearrange 'b h n d -> b n (h d)' replaced by a bare reshape, without moving the head axis
    Bug("heads_merged_without_permute", functools.partial(_build, bug="heads_merged_without_permute"),
        "tensor_trace", ("blocks.0.Attn",)),
    # classic normalizer slip: the target's decode left out, the decoded prediction is fitted to the normalized
    # stress
    Bug("y_left_encoded", functools.partial(_build, bug="y_left_encoded"), "learning_ledger", ("TASK",)),
]
