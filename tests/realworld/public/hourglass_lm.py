"""The hourglass transformer (Nawrot et al., "Hierarchical Transformers Are More Efficient Language Models") as a
byte-level causal language model, from lucidrains' hourglass-transformer-pytorch: pre-valley causal transformer
layers, the sequence shifted right by ``shorten_factor - 1`` and average-pooled, attention resampling (the pooled
token attends to its bucket), a shortened valley transformer, repeat upsampling plus the residual, attention
resampling back, post-valley layers; the ``AutoregressiveWrapper`` shifts the sequence into inputs and labels; Adam at
2e-4, gradients accumulated over 4 micro-batches, clipped at 0.5.

Source: https://github.com/lucidrains/hourglass-transformer-pytorch
Commit: 4be33bb41adfedf1b739cd24bec9481bc83a93e2
Files: train.py, hourglass_transformer_pytorch/hourglass_transformer_pytorch.py,
hourglass_transformer_pytorch/autoregressive_wrapper.py
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-hourglass-transformer-pytorch.txt)
Domain: language modelling, byte-level causal LM (hierarchical: shortened valley between full-length layers)

Kept as written: ``pad_to_multiple``, ``cast_tuple``, ``get_hourglass_transformer``, ``NaiveDownsample``,
``NaiveUpsample``, ``LinearDownsample``, ``LinearUpsample``, ``PreNormResidual``, ``Attention`` (causal mask by
``triu_(j - i + 1)``), ``FeedForward``, ``Transformer``, ``HourglassTransformer`` (the causal shift, attention
resampling, the residual, ``x[:, :n]``), ``HourglassTransformerLM``, ``AutoregressiveWrapper.forward`` (cross
entropy with ``ignore_index = pad_value``), ``TextSamplerDataset``, ``cycle``, and train.py's configuration
(``depth = (4, 2, 4)``, ``shorten_factor = 2``, naive up/down sampling) and loop body (``model.train()``,
``GRADIENT_ACCUMULATE_EVERY`` forward/backward passes, ``clip_grad_norm_(0.5)``, step, ``zero_grad``) and its
validation loss.

Deviations from the original:
- enwik8 is not here: the bytes are a synthetic English-like text made from ``seed`` (40 made-up lowercase words,
  each followed mostly by one of two successors, spaces and full stops), 60000 training and 8000 validation bytes,
  split as ``np.split`` does; ``num_tokens`` 256 kept.
- sizes for 2 CPU cores: ``dim`` 512 -> 32, ``heads`` 8 -> 2, ``dim_head`` 64 -> 16, ``depth`` (4, 2, 4) -> (1, 1, 1),
  ``SEQ_LEN`` 512 -> 48; ``BATCH_SIZE`` 4 and ``GRADIENT_ACCUMULATE_EVERY`` 4 kept; ``LEARNING_RATE`` 2e-4 -> 1e-3 so
  30 steps show learning.
- einops is not here: ``rearrange`` / ``reduce`` / ``repeat`` are written out with ``reshape``, ``transpose``,
  ``mean``, ``sum``, ``repeat_interleave`` and ``unsqueeze`` (each line marks the pattern it replaces);
  ``pad_to_multiple``'s missing ``import math`` is added; ``generate`` / ``top_k`` are left out.
- CUDA (``.cuda()``) dropped; the progress bar, prints and the sampling every 500 batches are dropped.
- ``train_step`` is one iteration of the loop (the four micro-batches, clip, step, zero_grad), returning the last
  micro-batch's loss as the loop prints it; ``eval_fn`` is the validation loss on one validation batch.
- the Program's model is the ``AutoregressiveWrapper`` (it returns the loss), its batch one ``[4, SEQ_LEN + 1]``
  training draw, its ``loss_fn`` the identity on that loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, C417, PLW0127

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# helpers


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def pad_to_multiple(tensor, multiple, dim = -1, value = 0):
    seq_len = tensor.shape[dim]
    m = seq_len / multiple
    if m.is_integer():
        return tensor
    remainder = math.ceil(m) * multiple - seq_len
    pad_offset = (0,) * (-1 - dim) * 2
    return F.pad(tensor, (*pad_offset, 0, remainder), value = value)


def cast_tuple(val, depth = 1):
    return val if isinstance(val, tuple) else ((val,) * depth)

# factory


def get_hourglass_transformer(
    dim,
    *,
    depth,
    shorten_factor,
    attn_resampling,
    updown_sample_type,
    **kwargs
):
    assert isinstance(depth, int) or (isinstance(depth, tuple)  and len(depth) == 3), 'depth must be either an integer or a tuple of 3, indicating (pre_transformer_depth, <nested-hour-glass-config>, post_transformer_depth)'
    assert not (isinstance(depth, int) and shorten_factor), 'there does not need to be a shortening factor when only a single transformer block is indicated (depth of one integer value)'

    if isinstance(depth, int):
        return Transformer(dim = dim, depth = depth, **kwargs)

    return HourglassTransformer(dim = dim, depth = depth, shorten_factor = shorten_factor, attn_resampling = attn_resampling, updown_sample_type = updown_sample_type, **kwargs)

# up and down sample classes


class NaiveDownsample(nn.Module):
    def __init__(self, shorten_factor):
        super().__init__()
        self.shorten_factor = shorten_factor

    def forward(self, x):
        # (port) reduce(x, 'b (n s) d -> b n d', 'mean', s = self.shorten_factor)
        b, ns, d = x.shape
        return x.reshape(b, ns // self.shorten_factor, self.shorten_factor, d).mean(dim = 2)


class NaiveUpsample(nn.Module):
    def __init__(self, shorten_factor):
        super().__init__()
        self.shorten_factor = shorten_factor

    def forward(self, x):
        # (port) repeat(x, 'b n d -> b (n s) d', s = self.shorten_factor)
        return x.repeat_interleave(self.shorten_factor, dim = 1)


class LinearDownsample(nn.Module):
    def __init__(self, dim, shorten_factor):
        super().__init__()
        self.proj = nn.Linear(dim * shorten_factor, dim)
        self.shorten_factor = shorten_factor

    def forward(self, x):
        # (port) rearrange(x, 'b (n s) d -> b n (s d)', s = self.shorten_factor)
        b, ns, d = x.shape
        x = x.reshape(b, ns // self.shorten_factor, self.shorten_factor * d)
        return self.proj(x)


class LinearUpsample(nn.Module):
    def __init__(self, dim, shorten_factor):
        super().__init__()
        self.proj = nn.Linear(dim, dim * shorten_factor)
        self.shorten_factor = shorten_factor

    def forward(self, x):
        x = self.proj(x)
        # (port) rearrange(x, 'b n (s d) -> b (n s) d', s = self.shorten_factor)
        b, n, sd = x.shape
        return x.reshape(b, n * self.shorten_factor, sd // self.shorten_factor)

# classes


class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs) + x


class Attention(nn.Module):
    def __init__(
        self,
        dim,
        heads = 8,
        dim_head = 64,
        dropout = 0.,
        causal = False
    ):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.scale = dim_head ** -0.5
        inner_dim = heads * dim_head

        self.to_q = nn.Linear(dim, inner_dim, bias = False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias = False)
        self.to_out = nn.Linear(inner_dim, dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, x, context = None, mask = None):
        h, device = self.heads, x.device
        kv_input = default(context, x)

        q, k, v = self.to_q(x), *self.to_kv(kv_input).chunk(2, dim = -1)
        # (port) rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2), (q, k, v))

        q = q * self.scale

        sim = einsum('b h i d, b h j d -> b h i j', q, k)
        mask_value = -torch.finfo(sim.dtype).max

        if exists(mask):
            mask = mask[:, None, None, :]  # (port) rearrange(mask, 'b j -> b () () j')
            sim = sim.masked_fill(~mask, mask_value)

        if self.causal:
            i, j = sim.shape[-2:]
            mask = torch.ones(i, j, device = device, dtype = torch.bool).triu_(j - i + 1)
            mask = mask[None, None]  # (port) rearrange(mask, 'i j -> () () i j')
            sim = sim.masked_fill(mask, mask_value)

        attn = sim.softmax(dim = -1)
        attn = self.dropout(attn)

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)  # (port) 'b h n d -> b n (h d)'
        return self.to_out(out)


def FeedForward(dim, mult = 4, dropout = 0.):
    return nn.Sequential(
        nn.Linear(dim, dim * mult),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(dim * mult, dim)
    )

# transformer classes


class Transformer(nn.Module):
    def __init__(
        self,
        dim,
        *,
        depth,
        causal = False,
        heads = 8,
        dim_head = 64,
        attn_dropout = 0.,
        ff_mult = 4,
        ff_dropout = 0.,
        norm_out = False
    ):
        super().__init__()
        self.layers = nn.ModuleList([])

        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                PreNormResidual(dim, Attention(dim, heads = heads, dim_head = dim_head, dropout = attn_dropout, causal = causal)),
                PreNormResidual(dim, FeedForward(dim, mult = ff_mult, dropout = ff_dropout))
            ]))

        self.norm = nn.LayerNorm(dim) if norm_out else nn.Identity()

    def forward(self, x, context = None, mask = None):
        for attn, ff in self.layers:
            x = attn(x, context = context, mask = mask)
            x = ff(x)

        return self.norm(x)


class HourglassTransformer(nn.Module):
    def __init__(
        self,
        dim,
        *,
        depth,
        shorten_factor = 2,
        attn_resampling = True,
        updown_sample_type = 'naive',
        heads = 8,
        dim_head = 64,
        causal = False,
        norm_out = False
    ):
        super().__init__()
        assert len(depth) == 3, 'depth should be a tuple of length 3'
        assert updown_sample_type in {'naive', 'linear'}, 'downsample / upsample type must be either naive (average pool and repeat) or linear (linear projection and reshape)'

        pre_layers_depth, valley_depth, post_layers_depth = depth

        if isinstance(shorten_factor, (tuple, list)):
            shorten_factor, *rest_shorten_factor = shorten_factor
        elif isinstance(valley_depth, int):
            shorten_factor, rest_shorten_factor = shorten_factor, None
        else:
            shorten_factor, rest_shorten_factor = shorten_factor, shorten_factor

        transformer_kwargs = dict(
            dim = dim,
            heads = heads,
            dim_head = dim_head
        )

        self.causal = causal
        self.shorten_factor = shorten_factor
        self.bug = None  # (port) the bug switch of the variants

        if updown_sample_type == 'naive':
            self.downsample = NaiveDownsample(shorten_factor)
            self.upsample   = NaiveUpsample(shorten_factor)
        elif updown_sample_type == 'linear':
            self.downsample = LinearDownsample(dim, shorten_factor)
            self.upsample   = LinearUpsample(dim, shorten_factor)
        else:
            raise ValueError('unknown updown_sample_type keyword value - must be either naive or linear for now')

        self.valley_transformer = get_hourglass_transformer(
            shorten_factor = rest_shorten_factor,
            depth = valley_depth,
            attn_resampling = attn_resampling,
            updown_sample_type = updown_sample_type,
            causal = causal,
            **transformer_kwargs
        )

        self.attn_resampling_pre_valley = Transformer(depth = 1, **transformer_kwargs) if attn_resampling else None
        self.attn_resampling_post_valley = Transformer(depth = 1, **transformer_kwargs) if attn_resampling else None

        self.pre_transformer = Transformer(depth = pre_layers_depth, causal = causal, **transformer_kwargs)
        self.post_transformer = Transformer(depth = post_layers_depth, causal = causal, **transformer_kwargs)
        self.norm_out = nn.LayerNorm(dim) if norm_out else nn.Identity()

    def forward(self, x, mask = None):
        # b : batch, n : sequence length, d : feature dimension, s : shortening factor

        s, b, n = self.shorten_factor, *x.shape[:2]

        # top half of hourglass, pre-transformer layers

        x = self.pre_transformer(x, mask = mask)

        # pad to multiple of shortening factor, in preparation for pooling

        x = pad_to_multiple(x, s, dim = -2)

        if exists(mask):
            padded_mask = pad_to_multiple(mask, s, dim = -1, value = False)

        # save the residual, and for "attention resampling" at downsample and upsample

        x_residual = x.clone()

        # if autoregressive, do the shift by shortening factor minus one

        if self.causal and self.bug != "causal_shift_dropped":
            shift = s - 1
            x = F.pad(x, (0, 0, shift, -shift), value = 0.)

            if exists(mask):
                padded_mask = F.pad(padded_mask, (shift, -shift), value = False)

        # naive average pool

        downsampled = self.downsample(x)

        if exists(mask):
            # (port) reduce(padded_mask, 'b (n s) -> b n', 'sum', s = s) > 0
            downsampled_mask = padded_mask.reshape(b, -1, s).sum(dim = -1) > 0
        else:
            downsampled_mask = None

        # pre-valley "attention resampling" - they have the pooled token in each bucket attend to the tokens pre-pooled

        if exists(self.attn_resampling_pre_valley):
            if exists(mask):
                attn_resampling_mask = padded_mask.reshape(-1, s)  # (port) 'b (n s) -> (b n) s'
            else:
                attn_resampling_mask = None

            downsampled = self.attn_resampling_pre_valley(
                downsampled.reshape(-1, 1, downsampled.shape[-1]),  # (port) 'b n d -> (b n) () d'
                x.reshape(-1, s, x.shape[-1]),  # (port) 'b (n s) d -> (b n) s d'
                mask = attn_resampling_mask
            )

            downsampled = downsampled.reshape(b, -1, downsampled.shape[-1])  # (port) '(b n) () d -> b n d'

        # the "valley" - either a regular transformer or another hourglass

        x = self.valley_transformer(downsampled, mask = downsampled_mask)

        valley_out = x.clone()

        # naive repeat upsample

        x = self.upsample(x)

        # add the residual

        x = x + x_residual

        # post-valley "attention resampling"

        if exists(self.attn_resampling_post_valley):
            x = self.attn_resampling_post_valley(
                x.reshape(-1, s, x.shape[-1]),  # (port) 'b (n s) d -> (b n) s d'
                valley_out.reshape(-1, 1, valley_out.shape[-1])  # (port) 'b n d -> (b n) () d'
            )

            x = x.reshape(b, -1, x.shape[-1])  # (port) '(b n) s d -> b (n s) d'

        # bring sequence back to original length, if it were padded for pooling

        x = x[:, :n]

        # post-valley transformers

        x = self.post_transformer(x, mask = mask)
        return self.norm_out(x)

# main class


class HourglassTransformerLM(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        max_seq_len,
        depth,
        shorten_factor = None,
        heads = 8,
        dim_head = 64,
        attn_resampling = True,
        updown_sample_type = 'naive',
        causal = True
    ):
        super().__init__()
        self.max_seq_len = max_seq_len

        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.transformer = get_hourglass_transformer(
            dim = dim,
            depth = depth,
            shorten_factor = shorten_factor,
            attn_resampling = attn_resampling,
            updown_sample_type = updown_sample_type,
            dim_head = dim_head,
            heads = heads,
            causal = causal,
            norm_out = True
        )

        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, mask = None):
        device = x.device
        x = self.token_emb(x)
        pos_emb = self.pos_emb(torch.arange(x.shape[-2], device = device))
        x = x + pos_emb[None]  # (port) rearrange(pos_emb, 'n d -> () n d')

        x = self.transformer(x, mask = mask)
        return self.to_logits(x)


# hourglass_transformer_pytorch/autoregressive_wrapper.py
class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, pad_value = 0, bug = None):
        super().__init__()
        assert hasattr(net, 'max_seq_len'), 'your transformer class must have max_seq_len set to the maximum sequence length'

        self.pad_value = pad_value
        self.net = net
        self.max_seq_len = net.max_seq_len
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            x_inp, x_labels = x[:, :-1], x[:, :-1]
        else:
            x_inp, x_labels = x[:, :-1], x[:, 1:]
        logits = self.net(x_inp, **kwargs)
        return F.cross_entropy(logits.transpose(1, 2), x_labels, ignore_index = self.pad_value)


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

    model = HourglassTransformerLM(
        num_tokens = 256,
        dim = 32,  # (port) 512
        max_seq_len = SEQ_LEN,
        depth = (1, 1, 1),  # (port) (4, 2, 4)
        shorten_factor = 2,
        heads = 2,  # (port) 8
        dim_head = 16,  # (port) the default 64
    )
    for module in model.modules():  # (port) the bug switch of the variants
        if isinstance(module, HourglassTransformer):
            module.bug = bug

    model = AutoregressiveWrapper(model, bug = bug)

    x = synthetic_text(rng, 68000)
    train_x, valid_x = np.split(x, [60000])
    data_train, data_val = torch.from_numpy(train_x), torch.from_numpy(valid_x)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader  = cycle(DataLoader(train_dataset, batch_size = BATCH_SIZE))
    val_loader    = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()
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
    return Program(name="hourglass_lm", model=model, batch=(batch, None), loss_fn=lambda out, _t: out,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the right shift by ``shorten_factor - 1`` before pooling left out, so each pooled token averages the
    # bytes after the first of its bucket and, upsampled, hands every position the byte it must predict.
    Bug("causal_shift_dropped", functools.partial(_build, bug="causal_shift_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the labels not shifted against the inputs (x[:, :-1] for x[:, 1:]): every position is scored on its
    # own input byte.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # optim.zero_grad() inside the accumulation loop (classic): each update keeps only the last micro-batch's gradient.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
