"""A local-attention transformer as a byte-level causal language model, from lucidrains' local-attention: every
layer attends within fixed windows of ``local_attn_window_size`` tokens and one window back (``look_around``,
padded keys masked, an exact-window causal mask), a learned dynamic position bias (an MLP over relative distances,
in place of rotary embeddings), pre-norm attention and GEGLU feedforward blocks with residuals, absolute position
embeddings; the loss shifts the sequence into inputs and labels inside ``forward(return_loss = True)``; Adam at
2e-4, gradients accumulated over 4 micro-batches, clipped at 0.5.

Source: https://github.com/lucidrains/local-attention
Commit: b44c268e6c1c238c86c37834b46381f9477a37fe
Files: train.py, local_attention/transformer.py, local_attention/local_attention.py
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-local-attention.txt)
Domain: language modelling, byte-level causal LM (windowed local attention, dynamic position bias)

The commit is the last before the transformer's residuals became hyper-connections (5b2e0cd, an external
``hyper_connections`` package); train.py is the same at both.

Kept as written: ``exists``, ``default``, ``max_neg_value``, ``l2norm``, ``pad_to_multiple``, ``look_around``,
``LocalAttention`` (autopad, bucketing, ``look_around`` of keys and values, the attention bias repeated per head,
the causal mask with ``exact_windowsize``, the padding mask, the key padding mask branch), ``LocalMHA`` (its
non-cache path), ``GEGLU``, ``FeedForward``, ``DynamicPositionBias``, ``LocalTransformer`` (its ``forward`` with
``return_loss``), ``TextSamplerDataset``, ``cycle``, and train.py's configuration (``causal = True``,
``use_dynamic_pos_bias = True``) and loop body (``model.train()``, ``GRADIENT_ACCUMULATE_EVERY`` forward/backward
passes with ``return_loss = True``, ``clip_grad_norm_(0.5)``, step, ``zero_grad``) and its validation loss.

Deviations from the original:
- enwik8 is not here: the bytes are a synthetic English-like text made from ``seed`` (40 made-up lowercase words,
  each followed mostly by one of two successors, spaces and full stops), 60000 training and 8000 validation bytes,
  split as ``np.split`` does; ``num_tokens`` 256 kept.
- sizes for 2 CPU cores: ``dim`` 512 -> 32, ``depth`` 6 -> 2, ``heads`` 8 -> 2, ``dim_head`` 64 -> 16,
  ``local_attn_window_size`` 256 -> 16, ``SEQ_LEN`` (and ``max_seq_len``) 2048 -> 64 (four windows);
  ``BATCH_SIZE`` 4 and ``GRADIENT_ACCUMULATE_EVERY`` 4 kept; ``LEARNING_RATE`` 2e-4 -> 1e-3 so 30 steps show
  learning.
- einops is not here: ``rearrange`` / ``repeat`` / ``pack`` / ``unpack`` are written out with ``reshape``,
  ``transpose``, ``permute``, ``unsqueeze`` and ``expand`` (each line marks the pattern it replaces).
- with ``use_dynamic_pos_bias = True`` the rotary embedding is never built (``use_rotary_pos_emb = False``), so
  ``local_attention/rotary.py`` is not copied; the key/value cache branch of ``LocalMHA`` (used only by
  ``generate``), ``generate``, ``top_k`` and ``eval_decorator`` are left out; no global attention layer is given
  (``global_attn_layer = None``, as in train.py), so ``global_layers`` holds ``None``s as written.
- CUDA (``.cuda()``) dropped; the progress bar, prints and the sampling every 500 batches are dropped.
- ``train_step`` is one iteration of the loop (the four micro-batches, clip, step, zero_grad), returning the last
  micro-batch's loss as the loop prints it; ``eval_fn`` is the validation loss on one validation batch.
- the Program's model is the ``LocalTransformer`` called with ``return_loss = True`` (it returns the loss), held as
  ``net`` by a one-line wrapper module; its batch one ``[4, SEQ_LEN + 1]`` training draw, its ``loss_fn`` the
  identity on that loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, C417, C419, F841, RUF059

from __future__ import annotations

import functools
import math
import pathlib
import sys
from copy import deepcopy

import numpy as np
import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.nn import Module, ModuleList
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- local_attention/local_attention.py --------------------------------------------------------------------------

# constant

TOKEN_SELF_ATTN_VALUE = -5e4

# helper functions


def exists(val):
    return val is not None


def default(value, d):
    return d if not exists(value) else value


def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max


def l2norm(tensor):
    dtype = tensor.dtype
    normed = F.normalize(tensor, dim = -1)
    return normed.type(dtype)


def pad_to_multiple(tensor, multiple, dim=-1, value=0):
    seqlen = tensor.shape[dim]
    m = seqlen / multiple
    if m.is_integer():
        return False, tensor
    remainder = math.ceil(m) * multiple - seqlen
    pad_offset = (0,) * (-1 - dim) * 2
    return True, F.pad(tensor, (*pad_offset, 0, remainder), value = value)


def look_around(x, backward = 1, forward = 0, pad_value = -1, dim = 2):
    t = x.shape[1]
    dims = (len(x.shape) - dim) * (0, 0)
    padded_x = F.pad(x, (*dims, backward, forward), value = pad_value)
    tensors = [padded_x[:, ind:(ind + t), ...] for ind in range(forward + backward + 1)]
    return torch.cat(tensors, dim = dim)

# main class


class LocalAttention(Module):
    def __init__(
        self,
        window_size,
        causal = False,
        look_backward = 1,
        look_forward = None,
        dropout = 0.,
        shared_qk = False,
        rel_pos_emb_config = None,
        dim = None,
        autopad = False,
        exact_windowsize = False,
        scale = None,
        use_rotary_pos_emb = True,
        use_xpos = False,
        xpos_scale_base = None,
        bug = None
    ):
        super().__init__()
        look_forward = default(look_forward, 0 if causal else 1)
        assert not (causal and look_forward > 0), 'you cannot look forward if causal'

        self.scale = scale

        self.window_size = window_size
        self.autopad = autopad
        self.exact_windowsize = exact_windowsize

        self.causal = causal

        self.look_backward = look_backward
        self.look_forward = look_forward

        self.dropout = nn.Dropout(dropout)

        self.shared_qk = shared_qk
        self.bug = bug  # (port) the bug switch of the variants

        # relative positions

        self.rel_pos = None
        self.use_xpos = use_xpos

        # (port) `use_rotary_pos_emb` is False under train.py's use_dynamic_pos_bias: SinusoidalEmbeddings not built
        assert not use_rotary_pos_emb

    def forward(
        self,
        q, k, v,
        mask = None,
        input_mask = None,
        attn_bias = None,
        window_size = None
    ):

        mask = default(mask, input_mask)

        assert not (exists(window_size) and not self.use_xpos), 'cannot perform window size extrapolation if xpos is not turned on'

        shape, autopad, pad_value, window_size, causal, look_backward, look_forward, shared_qk = q.shape, self.autopad, -1, default(window_size, self.window_size), self.causal, self.look_backward, self.look_forward, self.shared_qk

        # https://github.com/arogozhnikov/einops/blob/master/docs/4-pack-and-unpack.ipynb
        # (port) pack([t], '* n d')
        packed_shape = q.shape[:-2]
        q, k, v = map(lambda t: t.reshape(-1, *t.shape[-2:]), (q, k, v))

        # auto padding

        if autopad:
            orig_seq_len = q.shape[1]
            (needed_pad, q), (_, k), (_, v) = map(lambda t: pad_to_multiple(t, self.window_size, dim = -2), (q, k, v))

        b, n, dim_head, device, dtype = *q.shape, q.device, q.dtype

        scale = default(self.scale, dim_head ** -0.5)

        assert (n % window_size) == 0, f'sequence length {n} must be divisible by window size {window_size} for local attention'

        windows = n // window_size

        if shared_qk:
            k = l2norm(k)

        seq = torch.arange(n, device = device)
        b_t = seq.reshape(1, windows, window_size)  # (port) rearrange(seq, '(w n) -> 1 w n', ...)

        # bucketing

        # (port) rearrange(t, 'b (w n) d -> b w n d', w = windows)
        bq, bk, bv = map(lambda t: t.reshape(t.shape[0], windows, -1, t.shape[-1]), (q, k, v))

        bq = bq * scale

        look_around_kwargs = dict(
            backward =  look_backward,
            forward =  look_forward,
            pad_value = pad_value
        )

        bk = look_around(bk, **look_around_kwargs)
        bv = look_around(bv, **look_around_kwargs)

        # rotary embeddings

        if exists(self.rel_pos):
            raise NotImplementedError  # (port) not built in this configuration

        # calculate positions for masking

        bq_t = b_t
        bq_k = look_around(b_t, **look_around_kwargs)

        bq_t = bq_t.unsqueeze(-1)  # (port) rearrange(bq_t, '... i -> ... i 1')
        bq_k = bq_k.unsqueeze(-2)  # (port) rearrange(bq_k, '... j -> ... 1 j')

        pad_mask = bq_k == pad_value

        sim = einsum('b h i e, b h j e -> b h i j', bq, bk)

        if exists(attn_bias):
            heads = attn_bias.shape[0]
            assert (b % heads) == 0

            # (port) repeat(attn_bias, 'h i j -> (b h) 1 i j', b = b // heads)
            attn_bias = attn_bias.unsqueeze(0).expand(b // heads, *attn_bias.shape).reshape(b, 1, *attn_bias.shape[1:])
            sim = sim + attn_bias

        mask_value = max_neg_value(sim)

        if shared_qk:
            self_mask = bq_t == bq_k
            sim = sim.masked_fill(self_mask, TOKEN_SELF_ATTN_VALUE)
            del self_mask

        if causal:
            causal_mask = bq_t < bq_k

            if self.exact_windowsize:
                max_causal_window_size = (self.window_size * self.look_backward)
                if self.bug == "causal_mask_dropped":
                    causal_mask = (bq_t > (bq_k + max_causal_window_size))
                else:
                    causal_mask = causal_mask | (bq_t > (bq_k + max_causal_window_size))

            sim = sim.masked_fill(causal_mask, mask_value)
            del causal_mask

        # masking out for exact window size for non-causal
        # as well as masking out for padding value

        if not causal and self.exact_windowsize:
            max_backward_window_size = (self.window_size * self.look_backward)
            max_forward_window_size = (self.window_size * self.look_forward)
            window_mask = ((bq_k - max_forward_window_size) > bq_t) | (bq_t > (bq_k + max_backward_window_size)) | pad_mask
            sim = sim.masked_fill(window_mask, mask_value)
        else:
            sim = sim.masked_fill(pad_mask, mask_value)

        # take care of key padding mask passed in

        if exists(mask):
            batch = mask.shape[0]
            assert (b % batch) == 0

            h = b // mask.shape[0]

            if autopad:
                _, mask = pad_to_multiple(mask, window_size, dim = -1, value = False)

            mask = mask.reshape(-1, windows, window_size)  # (port) '... (w n) -> (...) w n'
            mask = look_around(mask, **{**look_around_kwargs, 'pad_value': False})
            mask = mask.unsqueeze(-2)  # (port) '... j -> ... 1 j'
            mask = mask.repeat_interleave(h, dim = 0)  # (port) repeat(mask, 'b ... -> (b h) ...', h = h)
            sim = sim.masked_fill(~mask, mask_value)
            del mask

        # attention

        attn = sim.softmax(dim = -1)
        attn = self.dropout(attn)

        # aggregation

        out = einsum('b h i j, b h j e -> b h i e', attn, bv)
        out = out.reshape(out.shape[0], -1, out.shape[-1])  # (port) rearrange(out, 'b w n d -> b (w n) d')

        if autopad:
            out = out[:, :orig_seq_len, :]

        out = out.reshape(*packed_shape, *out.shape[-2:])  # (port) unpack(out, packed_shape, '* n d')
        return out


# ---- local_attention/transformer.py ------------------------------------------------------------------------------

# multi-head attention

class LocalMHA(Module):
    def __init__(
        self,
        *,
        dim,
        window_size,
        dim_head = 64,
        heads = 8,
        dropout = 0.,
        causal = False,
        prenorm = False,
        qk_rmsnorm = False,
        qk_scale = 8,
        use_xpos = False,
        xpos_scale_base = None,
        exact_windowsize = None,
        gate_values_per_head = False,
        **kwargs
    ):
        super().__init__()
        inner_dim = dim_head * heads

        self.norm = nn.LayerNorm(dim) if prenorm else None

        self.heads = heads
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.qk_rmsnorm = qk_rmsnorm

        if qk_rmsnorm:
            self.q_scale = nn.Parameter(torch.ones(dim_head))
            self.k_scale = nn.Parameter(torch.ones(dim_head))

        self.causal = causal
        self.window_size = window_size
        self.exact_windowsize = default(exact_windowsize, True)

        self.attn_fn = LocalAttention(
            dim = dim_head,
            window_size = window_size,
            causal = causal,
            autopad = True,
            scale = (qk_scale if qk_rmsnorm else None),
            exact_windowsize = self.exact_windowsize,
            use_xpos = use_xpos,
            xpos_scale_base = xpos_scale_base,
            **kwargs
        )

        self.to_v_gate = None

        if gate_values_per_head:
            self.to_v_gate = nn.Sequential(
                nn.Linear(dim, heads)
            )

        self.to_out = nn.Linear(inner_dim, dim, bias = False)

    def forward(
        self,
        x,
        mask = None,
        attn_bias = None,
        cache = None,
        return_cache = False
    ):
        seq_len = x.shape[-2]

        if exists(self.norm):
            x = self.norm(x)

        q, k, v = self.to_qkv(x).chunk(3, dim = -1)
        # (port) rearrange(t, 'b n (h d) -> b h n d', h = self.heads)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2), (q, k, v))

        if self.qk_rmsnorm:
            q, k = map(l2norm, (q, k))
            q = q * self.q_scale
            k = k * self.k_scale

        assert not exists(cache)  # (port) the kv-cache branch (generate only) is left out
        out = self.attn_fn(q, k, v, mask = mask, attn_bias = attn_bias)

        if return_cache:
            kv = torch.stack((k, v))

        if exists(self.to_v_gate):
            gates = self.to_v_gate(x)
            gates = gates.transpose(1, 2).unsqueeze(-1)  # (port) rearrange(gates, 'b n h -> b h n 1')
            out = out * gates.sigmoid()

        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)  # (port) 'b h n d -> b n (h d)'
        out = self.to_out(out)

        if not return_cache:
            return out

        return out, kv

# feedforward


class GEGLU(Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim = -1)
        return x * F.gelu(gate)


def FeedForward(dim, mult = 4, dropout = 0.):
    inner_dim = int(dim * mult * 2 / 3)

    return nn.Sequential(
        nn.LayerNorm(dim),
        nn.Linear(dim, inner_dim * 2, bias = False),
        GEGLU(),
        nn.Dropout(dropout),
        nn.Linear(inner_dim, dim, bias = False)
    )

# dynamic positional bias


class DynamicPositionBias(Module):
    def __init__(
        self,
        dim,
        heads
    ):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(1, dim),
            nn.SiLU(),
            nn.Linear(dim, dim),
            nn.SiLU(),
            nn.Linear(dim, heads)
        )

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, i, j):
        device = self.device
        assert j >= i

        rel_dist = torch.arange(j, dtype = torch.float, device = device)
        bias = self.mlp(rel_dist.unsqueeze(-1))  # (port) rearrange(rel_dist, '... -> ... 1')

        i_seq = torch.arange(j - i, j, device = device)
        j_seq = torch.arange(j, device = device)

        # (port) rearrange(i_seq, 'i -> i 1') - rearrange(j_seq, 'j -> 1 j')
        rel_dist_indices = (i_seq.unsqueeze(1) - j_seq.unsqueeze(0)).abs()

        bias = bias[rel_dist_indices].permute(2, 0, 1)  # (port) rearrange(..., 'i j h -> h i j')
        return bias

# main transformer class


class LocalTransformer(Module):
    def __init__(
        self,
        *,
        num_tokens,
        max_seq_len,
        dim,
        depth,
        causal = True,
        local_attn_window_size = 512,
        dim_head = 64,
        heads = 8,
        ff_mult = 4,
        attn_dropout = 0.,
        ff_dropout = 0.,
        ignore_index = -1,
        use_xpos = False,
        xpos_scale_base = None,
        use_dynamic_pos_bias = False,
        global_attn_layer: Module | None = None,
        layers_insert_global_attn: tuple[int, ...] | None = None,
        **kwargs
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.max_seq_len = max_seq_len
        self.layers = ModuleList([])

        self.local_attn_window_size = local_attn_window_size
        self.dynamic_pos_bias = None
        if use_dynamic_pos_bias:
            self.dynamic_pos_bias = DynamicPositionBias(dim = dim // 2, heads = heads)

        # allow for inserting global attention or memory layers

        layers_insert_global_attn = default(layers_insert_global_attn, tuple(range(1, depth + 1)))
        assert all([0 < layer <= depth for layer in layers_insert_global_attn])

        global_attn_layers = set(layers_insert_global_attn)

        self.global_layers = ModuleList([])

        # define modules throughout layers

        for index in range(depth):
            layer = index + 1

            self.global_layers.append(deepcopy(global_attn_layer) if exists(global_attn_layer) and layer in global_attn_layers else None)

            self.layers.append(nn.ModuleList([
                LocalMHA(dim = dim, dim_head = dim_head, heads = heads, dropout = attn_dropout, causal = causal, window_size = local_attn_window_size, use_xpos = use_xpos, xpos_scale_base = xpos_scale_base, use_rotary_pos_emb = not use_dynamic_pos_bias, prenorm = True, **kwargs),
                FeedForward(dim = dim, mult = ff_mult, dropout = ff_dropout)
            ]))

        self.ignore_index = ignore_index
        self.bug = None  # (port) the bug switch of the variants

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens, bias = False)
        )

    def forward(
        self,
        x,
        mask = None,
        cache = None,
        return_loss = False,
        return_cache = False
    ):
        if return_loss:
            if self.bug == "labels_not_shifted":
                x, labels = x[:, :-1], x[:, :-1]
            else:
                x, labels = x[:, :-1], x[:, 1:]

        n, device = x.shape[1], x.device
        x = self.token_emb(x)

        assert n <= self.max_seq_len
        x = x + self.pos_emb(torch.arange(n, device = device))

        # handle old and new cache

        has_cache = exists(cache)
        cached_kv = cached_attn_bias = None

        if has_cache:
            cached_kv, cached_attn_bias = cache

        new_cached_kv = []
        iter_cached_kv = iter(default(cached_kv, []))

        if has_cache:
            x = x[:, -1:]

        # dynamic pos bias

        attn_bias = cached_attn_bias

        if not exists(attn_bias) and exists(self.dynamic_pos_bias):
            w = self.local_attn_window_size
            attn_bias = self.dynamic_pos_bias(w, w * 2)

        # go through layers

        for (attn, ff), global_layer in zip(self.layers, self.global_layers):

            if exists(global_layer):
                x = global_layer(x) + x

            attn_out, layer_cached_kv = attn(
                x,
                mask = mask,
                attn_bias = attn_bias,
                return_cache = True,
                cache = next(iter_cached_kv, None)
            )

            new_cached_kv.append(layer_cached_kv)

            x = x + attn_out

            x = ff(x) + x

        # to logits

        logits = self.to_logits(x)

        if not return_loss:

            if not return_cache:
                return logits

            return logits, (new_cached_kv, attn_bias)  # (port) Cache(new_cached_kv, attn_bias)

        # cross entropy loss

        loss = F.cross_entropy(
            logits.transpose(1, 2),  # (port) rearrange(logits, 'b n c -> b c n')
            labels,
            ignore_index = self.ignore_index
        )

        return loss


# ---- train.py ----------------------------------------------------------------------------------------------------

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 1e-3  # (port) 2e-4
SEQ_LEN = 64  # (port) 2048


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


class _ReturnLoss(nn.Module):
    """(port) ``model(x, return_loss = True)`` as one module call, for the Program's model."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x, return_loss = True)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    # instantiate GPT-like decoder model

    model = LocalTransformer(
        num_tokens = 256,
        dim = 32,  # (port) 512
        depth = 2,  # (port) 6
        causal = True,
        local_attn_window_size = 16,  # (port) 256
        max_seq_len = SEQ_LEN,
        use_dynamic_pos_bias = True,
        heads = 2, dim_head = 16,  # (port) the defaults 8, 64
    )
    model.bug = bug
    for module in model.modules():  # (port) the bug switch of the variants
        if isinstance(module, LocalAttention):
            module.bug = bug

    x = synthetic_text(rng, 68000)
    trX, vaX = np.split(x, [60000])
    data_train, data_val = torch.from_numpy(trX), torch.from_numpy(vaX)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader  = cycle(DataLoader(train_dataset, batch_size = BATCH_SIZE))
    val_loader    = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()
            loss = model(next(train_loader), return_loss = True)
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
    wrapped = _ReturnLoss(model)
    return Program(name="localattention_lm", model=wrapped, batch=(batch, None), loss_fn=lambda out, _t: out,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the ``bq_t < bq_k`` causal mask dropped, only the exact-window limit kept: every position attends to
    # the later positions of its own window and reads the byte it must predict.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the labels not shifted against the inputs (x[:, :-1] for x[:, 1:]): every position is scored on its
    # own input byte.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # optim.zero_grad() inside the accumulation loop (classic): each update keeps only the last micro-batch's gradient.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
