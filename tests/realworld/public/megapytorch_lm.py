"""Mega (moving average equipped gated attention) as a byte-level causal language model, from lucidrains'
Mega-pytorch: per layer a multi-headed damped EMA (learned alphas and dampening, applied as an FFT convolution),
single-headed softmax attention on the EMA output with a T5 relative position bias and a causal mask, reset and
update gates and the GRU-like combination of equation 14, post-norm, a feedforward; the ``AutoregressiveWrapper``
shifts the sequence into inputs and labels; Adam at 2e-4, gradients accumulated over 4 micro-batches, clipped at 0.5.

Source: https://github.com/lucidrains/Mega-pytorch
Commit: dc765fd5313bf02419a473dfc819b2ab33e046e8
Files: train.py, mega_pytorch/mega_pytorch.py, mega_pytorch/autoregressive_wrapper.py
License: MIT (Copyright (c) 2022 Phil Wang; full text in LICENSES/lucidrains-Mega-pytorch.txt)
Domain: language modelling, byte-level causal LM (EMA + gated single-headed attention)

Kept as written: ``conv1d_fft`` (scipy's ``next_fast_len``), ``T5RelativePositionBias``, ``OffsetScale``,
``SingleHeadedAttention``, ``MultiHeadedEMA``, ``MegaLayer``, ``FeedForward``, ``Mega`` (post-norm, the default),
``AutoregressiveWrapper.forward``, ``TextSamplerDataset``, ``cycle``, and train.py's loop body (``model.train()``,
``GRADIENT_ACCUMULATE_EVERY`` forward/backward passes, ``clip_grad_norm_(0.5)``, step, ``zero_grad``) and its
validation loss.

Deviations from the original:
- enwik8 is not here: the bytes are a synthetic English-like text made from ``seed`` (40 made-up lowercase words,
  each followed mostly by one of two successors, spaces and full stops), 60000 training and 8000 validation bytes,
  split as ``np.split`` does; ``num_tokens`` 256 kept.
- sizes for 2 CPU cores: ``dim`` 512 -> 32, ``depth`` 8 -> 2, ``ema_heads`` 16 -> 4, ``attn_dim_qk`` 64 -> 16,
  ``attn_dim_value`` 256 -> 64, ``SEQ_LEN`` 512 -> 48; ``BATCH_SIZE`` 4 and ``GRADIENT_ACCUMULATE_EVERY`` 4 kept;
  ``LEARNING_RATE`` 2e-4 -> 1e-3 so 30 steps show learning.
- einops is not here: ``rearrange(t, 'j -> 1 j')`` / ``'i -> i 1'`` / ``'i j 1 -> i j'`` / ``'... l -> ... l 1'``
  are ``unsqueeze`` / ``squeeze``, and ``rearrange(logits, 'b c n -> b n c')`` is ``transpose(1, 2)``; the unused
  ``Rearrange`` (only for ``norm_mhesa_heads``, off by default) and ``generate`` / ``top_k`` are left out.
- CUDA (``.cuda()``) dropped; the progress bar, prints and the sampling every 500 batches are dropped.
- ``train_step`` is one iteration of the loop (the four micro-batches, clip, step, zero_grad), returning the last
  micro-batch's loss as the loop prints it; ``eval_fn`` is the validation loss on one validation batch.
- the Program's model is the ``AutoregressiveWrapper`` (it returns the loss), its batch one ``[4, SEQ_LEN + 1]``
  training draw, its ``loss_fn`` the identity on that loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from scipy.fftpack import next_fast_len
from torch import einsum, nn
from torch.fft import irfft, rfft
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# functions

def exists(val):
    return val is not None


def identity(t, *args, **kwargs):
    return t


def default(val, d):
    return val if exists(val) else d


def append_dims(x, num_dims):
    if num_dims <= 0:
        return x
    return x.view(*x.shape, *((1,) * num_dims))


def conv1d_fft(x, weights, dim = -2, weight_dim = -1):
    # O(N log(N)) 1d convolution using some fourier trick

    assert weight_dim >= dim

    N = x.shape[dim]
    M = weights.shape[weight_dim]

    fast_len = next_fast_len(N + M - 1)

    f_x = rfft(x, n = fast_len, dim = dim)
    f_weight = rfft(weights, n = fast_len, dim = weight_dim)

    f_v_weight = f_x * append_dims(f_weight.conj(), weight_dim - dim)
    out = irfft(f_v_weight, fast_len, dim = dim)
    out = out.roll(-1, dims = (dim,))

    indices = torch.arange(start = fast_len - N, end = fast_len, dtype = torch.long, device = x.device)
    out = out.index_select(dim, indices)
    return out


# positional bias for single-headed attention

class T5RelativePositionBias(nn.Module):
    def __init__(
        self,
        scale,
        causal = False,
        num_buckets = 32,
        max_distance = 128
    ):
        super().__init__()
        self.scale = scale
        self.causal = causal
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, 1)

    @staticmethod
    def _relative_position_bucket(
        relative_position,
        causal = True,
        num_buckets = 32,
        max_distance = 128
    ):
        ret = 0
        n = -relative_position
        if not causal:
            num_buckets //= 2
            ret += (n < 0).long() * num_buckets
            n = torch.abs(n)
        else:
            n = torch.max(n, torch.zeros_like(n))

        max_exact = num_buckets // 2
        is_small = n < max_exact

        val_if_large = max_exact + (
            torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).long()
        val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))

        ret += torch.where(is_small, n, val_if_large)
        return ret

    def forward(self, x):
        i, j, device = *x.shape[-2:], x.device
        q_pos = torch.arange(i, dtype = torch.long, device = device)
        k_pos = torch.arange(j, dtype = torch.long, device = device)
        rel_pos = k_pos.unsqueeze(0) - q_pos.unsqueeze(1)  # (port) rearrange 'j -> 1 j', 'i -> i 1'
        rp_bucket = self._relative_position_bucket(rel_pos, causal = self.causal, num_buckets = self.num_buckets,
                                                   max_distance = self.max_distance)
        values = self.relative_attention_bias(rp_bucket)
        bias = values.squeeze(-1)  # (port) rearrange 'i j 1 -> i j'
        return bias * self.scale


# classes

class LaplacianAttnFn(nn.Module):
    def forward(self, x):
        mu = math.sqrt(0.5)
        std = math.sqrt((4 * math.pi) ** -1)
        return (1 + torch.special.erf((x - mu) / (std * math.sqrt(2)))) * 0.5


class OffsetScale(nn.Module):
    def __init__(self, dim, heads = 1):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(heads, dim))
        self.beta = nn.Parameter(torch.zeros(heads, dim))
        nn.init.normal_(self.gamma, std = 0.02)

    def forward(self, x):
        out = einsum('... d, h d -> ... h d', x, self.gamma) + self.beta
        return out.unbind(dim = -2)


class SingleHeadedAttention(nn.Module):
    def __init__(
        self,
        *,
        dim,
        dim_qk,
        dim_value,
        causal = False,
        laplacian_attn_fn = False
    ):
        super().__init__()
        self.causal = causal
        self.laplacian_attn_fn = laplacian_attn_fn

        self.attn_fn = partial(F.softmax, dim = -1) if not laplacian_attn_fn else LaplacianAttnFn()

        self.rel_pos_bias = T5RelativePositionBias(causal = causal, scale = dim_qk ** 0.5)

        self.to_qk = nn.Sequential(
            nn.Linear(dim, dim_qk),
            nn.SiLU()
        )

        self.offsetscale = OffsetScale(dim_qk, heads = 2)

        self.to_v = nn.Sequential(
            nn.Linear(dim, dim_value),
            nn.SiLU()
        )

    def forward(self, x, v_input = None):
        seq_len, dim, device, dtype = *x.shape[-2:], x.device, x.dtype

        v_input = default(v_input, x)

        qk, v = self.to_qk(x), self.to_v(v_input)
        q, k = self.offsetscale(qk)

        scale = (seq_len ** -1) if self.laplacian_attn_fn else (dim ** -0.5)

        sim = einsum('b i d, b j d -> b i j', q, k) * scale

        sim = sim + self.rel_pos_bias(sim)

        if self.causal:
            causal_mask = torch.ones((seq_len, seq_len), device = device, dtype = torch.bool).triu(1)

        if self.causal and not self.laplacian_attn_fn and getattr(self, "bug", None) != "causal_mask_dropped":
            # is softmax attention and using large negative value pre-softmax
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)

        attn = self.attn_fn(sim)

        if self.causal and self.laplacian_attn_fn:
            # if using laplacian attention function, zero out upper triangular with 0s
            attn = attn.masked_fill(causal_mask, 0.)

        return einsum('b i j, b j d -> b i d', attn, v)


class MultiHeadedEMA(nn.Module):
    def __init__(
        self,
        *,
        dim,
        heads,
        bidirectional = False,
        norm_mhesa_heads = False
    ):
        super().__init__()
        self.bidirectional = bidirectional

        self.expansion = nn.Parameter(torch.randn(heads * (2 if bidirectional else 1), dim))
        self.reduction = nn.Parameter(torch.randn(heads * (2 if bidirectional else 1), dim))

        # learned alpha and dampening factors

        self.alphas = nn.Parameter(torch.randn(heads))
        self.dampen_factors = nn.Parameter(torch.randn(heads))

        if bidirectional:
            self.reverse_alphas = nn.Parameter(torch.randn(heads))
            self.reverse_dampen_factors = nn.Parameter(torch.randn(heads))

        self.heads = heads

        self.norm_heads = nn.Identity()

        if norm_mhesa_heads:  # (port) the einops Rearrange sandwich is not written out (off by default)
            raise NotImplementedError

    def forward(self, x):
        device, seq_len = x.device, x.shape[1]

        # project in and split heads

        x = einsum('... d, h d -> ... h d', x, self.expansion)

        if self.bidirectional:
            x, x_reversed = x.chunk(2, dim = -2)
            x_reversed = torch.flip(x_reversed, dims = (1,))

        # weights derived from alphas (learned exponential smoothing decay rate)

        def apply_learned_ema_with_damping(x, alphas, dampen_factors):
            alphas = alphas.sigmoid()
            dampen_factors = dampen_factors.sigmoid()

            reversed_powers = torch.arange(seq_len - 1, -1, -1, device = device)
            K = alphas * (((1 - alphas) * dampen_factors) ** reversed_powers.unsqueeze(-1))  # (port) rearrange

            # conv1d fft O(nlog(n))

            return conv1d_fft(x, K, dim = -3, weight_dim = -2)

        x = apply_learned_ema_with_damping(x, self.alphas, self.dampen_factors)

        if self.bidirectional:
            x_reversed = apply_learned_ema_with_damping(x_reversed, self.reverse_alphas, self.reverse_dampen_factors)
            x_reversed = torch.flip(x_reversed, dims = (1,))
            x = torch.cat((x, x_reversed), dim = -2)

        # maybe norm heads

        x = self.norm_heads(x)

        # combine heads and out

        return einsum('... h d, h d -> ... d', x, self.reduction)


# Mega Layer
# Single headed Attention + Multi-headed EMA, then GRU-esque gating

class MegaLayer(nn.Module):
    def __init__(
        self,
        *,
        dim = 128,
        ema_heads = 16,
        attn_dim_qk = 64,
        attn_dim_value = 256,
        laplacian_attn_fn = False,
        causal = True,
        norm_mhesa_heads = False
    ):
        super().__init__()

        self.single_headed_attn = SingleHeadedAttention(
            dim = dim,
            dim_qk = attn_dim_qk,
            dim_value = attn_dim_value,
            causal = causal,
            laplacian_attn_fn = laplacian_attn_fn
        )

        self.multi_headed_ema = MultiHeadedEMA(
            dim = dim,
            heads = ema_heads,
            bidirectional = not causal,
            norm_mhesa_heads = norm_mhesa_heads
        )

        self.to_reset_gate = nn.Sequential(
            nn.Linear(dim, attn_dim_value),
            nn.SiLU()
        )

        self.to_update_gate = nn.Sequential(
            nn.Linear(dim, dim),
            nn.Sigmoid()
        )

        # equation 14, for calculating H

        self.Wh = nn.Parameter(torch.randn(dim, dim))
        self.Uh = nn.Parameter(torch.randn(attn_dim_value, dim))
        self.bh = nn.Parameter(torch.randn(dim))

    def forward(self, x, residual = None):
        residual = default(residual, x)

        ema_output = self.multi_headed_ema(x)
        attn_output = self.single_headed_attn(ema_output, x)

        reset_gate = self.to_reset_gate(ema_output)
        update_gate = self.to_update_gate(ema_output)

        gated_attn_output = attn_output * reset_gate

        # equation 14

        H = F.silu(ema_output @ self.Wh + gated_attn_output @ self.Uh + self.bh)

        # update gate

        return update_gate * H + (1 - update_gate) * residual


# Mega

def FeedForward(dim, ff_mult):
    dim_hidden = int(dim * ff_mult)
    return nn.Sequential(
        nn.Linear(dim, dim_hidden),
        nn.GELU(),
        nn.Linear(dim_hidden, dim)
    )


class Mega(nn.Module):
    def __init__(
        self,
        *,
        dim,
        num_tokens,
        depth,
        ff_mult = 2,
        pre_norm = False,
        **kwargs
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pre_norm = pre_norm

        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                MegaLayer(dim = dim, **kwargs),
                nn.LayerNorm(dim),
                FeedForward(dim = dim, ff_mult = ff_mult),
                nn.LayerNorm(dim)
            ]))

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim) if pre_norm else nn.Identity(),
            nn.Linear(dim, num_tokens)
        )

    def forward(self, x):
        pre_norm = self.pre_norm
        post_norm = not self.pre_norm

        x = self.token_emb(x)

        for mega_layer, mega_norm, ff, ff_norm in self.layers:
            mega_maybe_prenorm = mega_norm if pre_norm else identity
            ff_maybe_prenorm = ff_norm if pre_norm else identity

            mega_maybe_postnorm = mega_norm if post_norm else identity
            ff_maybe_postnorm = ff_norm if post_norm else identity

            x = mega_layer(mega_maybe_prenorm(x), x)

            x = mega_maybe_postnorm(x)

            x = ff(ff_maybe_prenorm(x)) + x

            x = ff_maybe_postnorm(x)

        return self.to_logits(x)


# mega_pytorch/autoregressive_wrapper.py
class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, pad_value = 0, bug = None):
        super().__init__()
        self.pad_value = pad_value
        self.net = net
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            x_inp, x_labels = x[:, :-1], x[:, :-1]
        else:
            x_inp, x_labels = x[:, :-1], x[:, 1:]
        logits = self.net(x_inp, **kwargs)
        return F.cross_entropy(logits.transpose(1, 2), x_labels)  # (port) rearrange 'b c n -> b n c'


# train.py
BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 1e-3  # (port) 2e-4
SEQ_LEN = 48  # (port) 512


def cycle(loader):
    while True:
        yield from loader


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start: rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def synthetic_text(rng, n_bytes):
    """(port) English-like bytes: 40 made-up words, each followed mostly by one of two successors."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=int(rng.integers(2, 7)))) for _ in range(40)]
    succ = rng.integers(0, 40, size=(40, 2))
    out, w, n = [], int(rng.integers(40)), 0
    while n < n_bytes:
        out.append(words[w])
        out.append(". " if rng.random() < 0.1 else " ")
        n += len(out[-2]) + len(out[-1])
        w = int(succ[w, int(rng.integers(2))]) if rng.random() < 0.9 else int(rng.integers(40))
    return np.frombuffer("".join(out).encode()[:n_bytes], dtype=np.uint8).copy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    model = Mega(
        num_tokens = 256,
        dim = 32,  # (port) 512
        depth = 2,  # (port) 8
        ema_heads = 4, attn_dim_qk = 16, attn_dim_value = 64,  # (port) the defaults 16, 64, 256
    )

    for module in model.modules():  # (port) the bug switch of the variants
        if isinstance(module, SingleHeadedAttention):
            module.bug = bug

    model = AutoregressiveWrapper(model, bug = bug)

    x = synthetic_text(rng, 68000)
    train_x, valid_x = np.split(x, [60000])
    data_train, data_val = torch.from_numpy(train_x), torch.from_numpy(valid_x)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader = cycle(DataLoader(train_dataset, batch_size = BATCH_SIZE))
    val_loader = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        return loss.item()

    def eval_fn(m, _batch=None):
        m.eval()
        with torch.no_grad():
            loss = m(next(val_loader))
        m.train()
        return loss.item()

    batch = next(train_loader)
    return Program(name="megapytorch_lm", model=model, batch=(batch, None), loss_fn=lambda out, _t: out,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the labels not shifted against the inputs (x[:, :-1] for x[:, 1:]): every position is scored on its
    # own input byte.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the causal mask's masked_fill left out of SingleHeadedAttention, so each position attends to the
    # bytes after it and reads its own target.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
]
