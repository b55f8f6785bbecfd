"""Long-Short Transformer character language model trained by the repository's enwik8 script:
``LongShortTransformer`` (token embedding, per layer a pre-LayerNorm ``LongShortAttention``: rotary positions on the
queries and the tied keys/values, sliding-window local attention over the window and the one before it, and a global
attention over per-segment summaries made by a learned dynamic projection, masked so that a position only reads
segments it has fully seen; then a pre-LayerNorm GELU feedforward; a LayerNorm + linear head), wrapped in
``AutoregressiveWrapper`` (``cross_entropy`` of the logits on ``x[:, :-1]`` against ``x[:, 1:]``), Adam lr 3e-4, 4
micro-batches back-propagated (not divided) before ``clip_grad_norm_(0.5)``, ``step`` and ``zero_grad``.

Source: https://github.com/lucidrains/long-short-transformer
Commit: cce1416862201ab3d1f54b521bd8170d4b4c6703
Files: train.py, long_short_transformer/long_short_transformer.py, long_short_transformer/autoregressive_wrapper.py
License: MIT (Copyright (c) 2021 Phil Wang; full text in LICENSES/lucidrains-long-short-transformer.txt)
Domain: causal language model (Long-Short Transformer, Zhu et al. 2021: local windows + dynamic low-rank global
attention), character level

Kept as written: ``lcm``, ``pad_to_multiple``, ``look_around``, ``PreNorm``, ``FeedForward``, ``LongShortAttention``
(padding to the window/segment multiple, the key padding mask branch, rotary embedding, the local windows with
``look_around`` and ``local_norm``, the causal segment summaries with ``to_dynamic_proj`` and ``global_norm``, the
segment mask ``g_mask``, the local causal mask ``triu_(j - i + 1)``, the softmax over the concatenated global and
local scores), ``LongShortTransformer`` (one ``RotaryEmbedding`` shared by all layers), the wrapper's ``forward``,
train.py's ``TextSamplerDataset``, ``cycle``, the optimizer, the loop body and the validation step.

Deviations from the original:
- sizes for 2 CPU cores: dim 512 -> 64, depth 8 -> 2, heads 8 -> 4, dim_head 64 -> 16, SEQ_LEN 1024 -> 32,
  window_size 128 -> 16 (segment_size 16 and r 1, the causal defaults, kept; BATCH_SIZE 4,
  GRADIENT_ACCUMULATE_EVERY 4 and the clipping at 0.5 unchanged); LEARNING_RATE 3e-4 -> 3e-3 so that the 30 steps of
  the self-check show the loss falling (the original runs 1e6 batches);
- einops' ``rearrange``/``repeat`` written out with ``reshape``/``permute``/``expand``/``repeat_interleave`` (the
  same layouts, each einops pattern kept as a comment);
- ``rotary_embedding_torch`` (``RotaryEmbedding(dim_head)``, its ``forward(t, cache_key)`` and ``apply_rotary_emb``,
  frequencies ``1 / 10000 ** (arange(0, dim, 2) / dim)`` repeated per interleaved pair, ``rotate_half`` on
  interleaved pairs) written out; the fixed frequencies are a buffer;
- data: enwik8 (``data/enwik8.gz``) is replaced by a synthetic byte stream made from ``seed``: lower-case words of 3-6
  letters from a lexicon of 24, each followed by a space; 12,000 bytes split 10,000 / 2,000 for training and
  validation as the original splits 90e6 / 5e6; ``__getitem__``'s ``torch.randint`` draws from the global RNG seeded
  by ``build``; ``.cuda()`` calls dropped (CPU);
- one ``train_step`` is one iteration of the training loop; ``eval_fn`` is the validation step on a given batch; the
  tqdm progress bar, printing and the generation every 500 batches are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP028, C408, C417

from __future__ import annotations

import functools
import pathlib
import sys
from math import ceil, gcd

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 3e-3  # (port) 3e-4
SEQ_LEN = 32  # (port) 1024


# ---- rotary_embedding_torch (written out) -----------------------------------------------------------------------

def rotate_half(x):
    # (port) rearrange(x, '... (d r) -> ... d r', r = 2); stack((-x2, x1)); rearrange('... d r -> ... (d r)')
    x = x.reshape(*x.shape[:-1], -1, 2)
    x1, x2 = x.unbind(dim = -1)
    x = torch.stack((-x2, x1), dim = -1)
    return x.reshape(*x.shape[:-2], -1)

def apply_rotary_emb(freqs, t, start_index = 0):
    rot_dim = freqs.shape[-1]
    end_index = start_index + rot_dim
    t_left, t, t_right = t[..., :start_index], t[..., start_index:end_index], t[..., end_index:]
    t = (t * freqs.cos()) + (rotate_half(t) * freqs.sin())
    return torch.cat((t_left, t, t_right), dim = -1)

class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta = 10000):
        super().__init__()
        freqs = 1. / (theta ** (torch.arange(0, dim, 2)[:(dim // 2)].float() / dim))
        self.register_buffer('freqs', freqs)
        self.cache = dict()

    def forward(self, t, cache_key = None):
        freqs = torch.einsum('..., f -> ... f', t.type(self.freqs.dtype), self.freqs)
        # (port) repeat(freqs, '... n -> ... (n r)', r = 2)
        return freqs.repeat_interleave(2, dim = -1)


# ---- long_short_transformer.py ----------------------------------------------------------------------------------

# helpers

def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

def lcm(*numbers):
    return int(functools.reduce(lambda x, y: int((x * y) / gcd(x, y)), numbers, 1))

def pad_to_multiple(tensor, multiple, dim = -1, value = 0):
    seqlen = tensor.shape[dim]
    m = seqlen / multiple

    if m.is_integer():
        return tensor

    remainder = ceil(m) * multiple - seqlen
    pad_offset = (0,) * (-1 - dim) * 2
    return F.pad(tensor, (*pad_offset, 0, remainder), value=value)

def look_around(x, backward = 1, forward = 0, pad_value = -1, dim = 2):
    t = x.shape[1]
    dims = (len(x.shape) - dim) * (0, 0)
    padded_x = F.pad(x, (*dims, backward, forward), value= pad_value)
    tensors = [padded_x[:, ind:(ind + t), ...] for ind in range(forward + backward + 1)]
    return torch.cat(tensors, dim=dim)

# classes

class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, **kwargs):
        x = self.norm(x)
        return self.fn(x, **kwargs)

class FeedForward(nn.Module):
    def __init__(self, dim, mult = 4, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim)
        )

    def forward(self, x):
        return self.net(x)

class LongShortAttention(nn.Module):
    def __init__(
        self,
        *,
        dim,
        heads = 8,
        dim_head = 64,
        causal = True,
        window_size = 128,
        pos_emb = None,
        segment_size = 16,
        r = 1,
        dropout = 0.,
        bug = None
    ):
        super().__init__()
        assert not (causal and r >= segment_size), 'r should be less than segment size, if autoregressive'

        inner_dim = heads * dim_head
        self.scale = dim_head ** -0.5

        self.heads = heads
        self.causal = causal

        self.window_size = window_size
        self.segment_size = segment_size
        self.pad_to_multiple = window_size if not causal else lcm(window_size, segment_size)

        self.to_dynamic_proj = nn.Linear(dim_head, r, bias = False)
        self.local_norm = nn.LayerNorm(dim_head)
        self.global_norm = nn.LayerNorm(dim_head)

        self.pos_emb = default(pos_emb, RotaryEmbedding(dim_head))

        self.attn_dropout = nn.Dropout(dropout)

        self.to_q = nn.Linear(dim, inner_dim, bias = False)
        self.to_kv = nn.Linear(dim, inner_dim, bias = False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.bug = bug

    def forward(self, x, mask = None):
        b, n, *_, h, device, causal, w, s = *x.shape, self.heads, x.device, self.causal, self.window_size, self.segment_size

        # pad input sequence to multiples of window size (or window size and segment length if causal)

        x = pad_to_multiple(x, self.pad_to_multiple, dim = -2, value = 0.)

        # derive from variables

        padded_len = x.shape[-2]
        windows = padded_len // w
        is_padded = padded_len != n

        mask_value = -torch.finfo(x.dtype).max

        # handle mask if padding was needed and mask was not given

        if is_padded:
            mask = default(mask, torch.ones((b, n), device = device).bool())
            mask = pad_to_multiple(mask, w, dim = -1, value = False)

        # get queries, keys, values

        qkv = (self.to_q(x), self.to_kv(x))

        # get sequence range, for calculating mask

        seq_range = torch.arange(padded_len, device = device)

        # split heads

        # (port) rearrange(t, 'b n (h d) -> (b h) n d', h = h)
        q, kv = map(lambda t: t.reshape(b, padded_len, h, -1).transpose(1, 2).reshape(b * h, padded_len, -1), qkv)

        # rotary embedding

        if exists(self.pos_emb):
            rotary_emb = self.pos_emb(seq_range, cache_key = padded_len)
            rotary_emb = rotary_emb[None]  # (port) rearrange(rotary_emb, 'n d -> () n d')
            q, kv = map(lambda t: apply_rotary_emb(rotary_emb, t), (q, kv))

        # scale queries

        q = q * self.scale

        # get local queries and keys similarity scores

        window_fn = lambda t: t.reshape(t.shape[0], -1, w, t.shape[-1])  # (port) 'b (w n) d -> b w n d', n = w
        lq, lkv = map(window_fn, (q, kv))

        lookaround_kwargs = {'backward': 1, 'forward': (0 if causal else 1)}
        lkv = look_around(lkv, **lookaround_kwargs)

        lkv = self.local_norm(lkv)
        lsim = einsum('b w i d, b w j d -> b w i j', lq, lkv)

        # prepare global key / values

        if self.causal:
            # autoregressive global attention is handled in segments
            # later on, these segments are carefully masked to prevent leakage

            gkv = kv.reshape(kv.shape[0], -1, s, kv.shape[-1])  # (port) 'b (n s) d -> b n s d', s = s
            pkv = self.to_dynamic_proj(gkv)

            if exists(mask):
                # (port) repeat(mask, 'b (n s) -> (b h) n s', s = s, h = h)
                pmask = mask.reshape(b, -1, s).repeat_interleave(h, dim = 0)
                pkv.masked_fill_(~pmask[..., None], mask_value)

            pkv = pkv.softmax(dim = -2)

            gkv = einsum('b n s d, b n s r -> b n r d', gkv, pkv)
            gkv = gkv.reshape(gkv.shape[0], -1, gkv.shape[-1])  # (port) 'b n r d -> b (n r) d'
        else:
            # equation (3) in the paper

            pkv = self.to_dynamic_proj(kv)

            if exists(mask):
                pkv.masked_fill_(~mask[..., None], mask_value)

            pkv = pkv.softmax(dim = -2)

            gkv = einsum('b n d, b n r -> b r d', kv, pkv)

        # calculate global queries and keys similarity scores

        gkv = self.global_norm(gkv)
        gsim = einsum('b n d, b r d -> b n r', q, gkv)

        # concat values together (same as keys)

        gkv = gkv[:, None].expand(-1, windows, -1, -1)  # (port) repeat(gkv, 'b r d -> b w r d', w = windows)
        v = torch.cat((gkv, lkv), dim = -2)

        # masking

        buckets, i, j = lsim.shape[-3:]

        if exists(mask):
            # (port) repeat(mask, 'b (w n) -> (b h) w n', n = w, h = h)
            mask = mask.reshape(b, -1, w).repeat_interleave(h, dim = 0)
            mask = look_around(mask, pad_value = False, **lookaround_kwargs)
            mask = mask[:, :, None, :]  # (port) rearrange(mask, 'b w n -> b w () n')
            lsim.masked_fill_(~mask, mask_value)

        # mask out padding

        seq_range_windowed = seq_range.reshape(1, windows, -1)  # (port) '(w n) -> () w n', w = windows
        pad_mask = look_around(seq_range_windowed, pad_value = -1, **lookaround_kwargs) == -1
        lsim.masked_fill_(pad_mask[:, :, None], mask_value)

        # calculate causal masking for both global and local

        if self.causal:
            g_range = seq_range.reshape(-1, s)  # (port) rearrange(seq_range, '(n s) -> n s', s = s)
            if self.bug == "segment_summary_leaks":
                g_range_max = g_range.amin(dim = -1)
            else:
                g_range_max = g_range.amax(dim = -1)
            g_mask = seq_range[:, None] >= g_range_max[None, :]
            g_mask = g_mask[None]  # (port) rearrange(g_mask, 'i j -> () i j')
            gsim.masked_fill_(~g_mask, mask_value)

            causal_mask = torch.ones(i, j, device = device).triu_(j - i + 1).bool()
            # (port) repeat(causal_mask, 'i j -> () u i j', u = buckets)
            causal_mask = causal_mask[None, None].expand(1, buckets, i, j)
            lsim.masked_fill_(causal_mask, mask_value)

        # concat local and global similarities together to ready for attention

        gsim = gsim.reshape(gsim.shape[0], windows, -1, gsim.shape[-1])  # (port) 'b (w n) r -> b w n r', w = windows
        sim = torch.cat((gsim, lsim), dim = -1)

        # attention

        attn = sim.softmax(dim = -1)
        attn = self.attn_dropout(attn)

        # aggregate values (same as keys, since tied) and project out

        out = einsum('b w i j, b w j d -> b w i d', attn, v)
        # (port) rearrange(out, '(b h) w n d -> b (w n) (h d)', h = h)
        out = out.reshape(b, h, windows, w, -1).permute(0, 2, 3, 1, 4).reshape(b, windows * w, -1)
        out = out[:, :n]
        return self.to_out(out)

# main class

class LongShortTransformer(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        max_seq_len,
        window_size = 128,
        causal = True,
        dim_head = 64,
        heads = 8,
        ff_mult = 4,
        segment_size = None,
        r = None,
        ff_dropout = 0.,
        attn_dropout = 0.,
        bug = None
    ):
        super().__init__()
        self.max_seq_len = max_seq_len

        self.token_emb = nn.Embedding(num_tokens, dim)
        pos_emb = RotaryEmbedding(dim_head)

        # handle autoregressive default variables differently
        # specifically, segments are only used for autoregressive case
        # r is the projected r << n in the non-autoregressive case, and the projected r per segment for the
        # autoregressive case
        # yea, it is confusing, i know

        segment_size = default(segment_size, 16 if causal else None)
        r = default(r, 1 if causal else 128)

        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                PreNorm(dim, LongShortAttention(dim = dim, heads = heads, dim_head = dim_head,
                                                window_size = window_size, causal = causal, pos_emb = pos_emb,
                                                segment_size = segment_size, r = r, dropout = attn_dropout,
                                                bug = bug)),
                PreNorm(dim, FeedForward(dim = dim, mult = ff_mult, dropout = ff_dropout))
            ]))

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        )

    def forward(self, x, mask = None):
        x = self.token_emb(x)

        for attn, ff in self.layers:
            x = attn(x, mask = mask) + x
            x = ff(x) + x

        return self.to_logits(x)


# ---- autoregressive_wrapper.py ----------------------------------------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = -100, pad_value = 0):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index

        self.net = net
        self.max_seq_len = net.max_seq_len

    def forward(self, x, **kwargs):
        xi = x[:, :-1]
        xo = x[:, 1:]

        # help auto-solve a frequent area of confusion around input masks in auto-regressive
        # if user supplies a mask that is only off by one from the source sequence, resolve it for them
        mask = kwargs.get('mask', None)
        if mask is not None and mask.shape[1] == x.shape[1]:
            mask = mask[:, :-1]
            kwargs.update(mask = mask)

        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index = self.ignore_index)
        return loss


# ---- train.py ---------------------------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data

class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len - 1, (1,))
        full_seq = self.data[rand_start: rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_bytes(gen, n):
    """(port) Lower-case words (3-6 letters) drawn from a lexicon of 24, each followed by a space."""
    lexicon = [torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(24)]
    out = []
    while len(out) < n:
        out.extend(lexicon[int(torch.randint(len(lexicon), (1,), generator=gen))] + [32])
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # instantiate GPT-like decoder model

    model = LongShortTransformer(
        num_tokens = 256,
        dim = 64,  # (port) 512
        depth = 2,  # (port) 8
        heads = 4,  # (port) 8
        dim_head = 16,  # (port) default 64
        max_seq_len = SEQ_LEN,
        causal = True,
        window_size = 16,  # (port) 128
        bug = bug,
    )

    model = AutoregressiveWrapper(model)

    # prepare enwik8 data (synthetic, see the module docstring)

    data = make_bytes(gen, 12000)
    data_train, data_val = data[:10000], data[10000:]

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)
    val_loader    = cycle(DataLoader(val_dataset, batch_size = BATCH_SIZE))  # noqa: F841

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr = LEARNING_RATE)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        if bug == "clip_after_step":
            optim.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optim.step()
        optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    return Program(name="longshort_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # the segment mask built from each segment's first position (``amin``) instead of its last (``amax``): a position
    # reads the summary of the segment it is in, so the bytes after it in that segment leak into its prediction (the
    # leakage the code's comment "these segments are carefully masked to prevent leakage" guards against).
    Bug("segment_summary_leaks", functools.partial(_build, bug="segment_summary_leaks"), "learning_ledger",
        ("DEPENDENCY",)),
    # ``clip_grad_norm_`` moved after ``optim.step()`` (classic): the update uses the unclipped accumulated gradient
    # and the clipping acts on a gradient that ``zero_grad`` then erases.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
