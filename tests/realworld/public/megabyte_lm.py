"""MEGABYTE (Yu et al., multiscale byte-level transformers), Phil Wang's implementation trained as in its
``train.py`` on bytes: a three-stage hierarchy of causal transformers (global over patches, then finer stages inside
each patch), each stage's tokens the byte embeddings of its patch concatenated and projected, a learned start token
per stage, the previous stage's output projected and summed into the next one shifted by one position, token
shift, RMSNorm, flash attention (SDPA, ``is_causal``); cross-entropy over the flattened bytes with the pad id
ignored; Adam 2e-4, four micro-batches accumulated, gradient norm clipped at 0.5.

Source: https://github.com/lucidrains/MEGABYTE-pytorch
Commit: 21eec73ae6e9268ad5b77be3c5dd5cbd7daeaa4d
Files: train.py, MEGABYTE_pytorch/megabyte.py, MEGABYTE_pytorch/attend.py
License: MIT (Copyright (c) 2023 Phil Wang; full text in LICENSES/lucidrains-MEGABYTE-pytorch.txt)
Domain: language modelling, byte-level (hierarchical patch transformer)

Kept as written: ``MEGABYTE`` (token embeddings per stage, start tokens, ``to_next_transformer_projections``, the
``attended[..., :-1, :]`` shift, the loss with the start-token logits prepended and ``ignore_index = pad_id``),
``Transformer``, ``Attention``, ``FeedForward``, ``RMSNorm``, ``token_shift``, ``RotaryEmbedding`` (unused:
``rel_pos`` False by default, as in train.py), ``Attend``'s flash path; ``train.py``'s ``TextSamplerDataset``
(random crops with ``torch.randint``), ``cycle``, ``Adam(model.parameters(), lr=LEARNING_RATE)`` and the loop body
(``model.train()``, ``GRADIENT_ACCUMULATE_EVERY`` backward passes of the un-divided loss, ``clip_grad_norm_(0.5)``,
step, zero_grad) and its validation (``model.eval()``, ``no_grad``, one validation batch).

Deviations from the original:
- einops is not here: ``rearrange`` / ``repeat`` / ``pack`` / ``unpack`` and the ``Rearrange`` layers are written out
  with ``view`` / ``reshape`` / ``transpose`` / ``expand`` / ``flatten`` (``Rearrange`` as a small module of the same
  place in each ``nn.Sequential``); beartype's check of the constructor and the unused sampling helpers
  (``generate``, ``forward_empty``, ``top_k``, ``gumbel_sample``) are dropped; the non-flash attention branch of
  ``Attend`` is kept;
- sizes for 2 CPU cores: ``dim`` (768, 512, 256) -> (64, 48, 32), ``depth`` (6, 4, 2) -> (2, 1, 1), ``max_seq_len``
  (512, 4, 4) -> (8, 4, 4), so ``SEQ_LEN`` 8192 -> 128; ``dim_head`` 64 -> 16 and ``heads`` 8 -> 4 (given to the
  constructor); ``BATCH_SIZE`` 4 kept, ``LEARNING_RATE`` 2e-4 -> 1e-3 so that 30 steps show learning;
- data: enwik8 is not here: the bytes are synthetic English-like text made from ``seed`` (words from a small
  lexicon chained by a random bigram table, with punctuation and capitals; no zero byte, the pad id), 60000 bytes
  for training and 6000 for validation, held as uint8 tensors like the split of ``enwik8.gz``;
- CPU only (``.cuda()`` dropped); the prints, tqdm and the generation every ``GENERATE_EVERY`` batches are dropped;
- one ``train_step`` is one iteration of the training loop (returning the last micro-batch's loss, the one train.py
  prints); ``eval_fn`` is its validation block; the Program's batch is one validation batch with
  ``return_loss=True``, the model returning its loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C417, F841

from __future__ import annotations

import functools
import pathlib
import sys
from itertools import zip_longest

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import Module, ModuleList
from torch.nn.attention import SDPBackend
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

NUM_BATCHES = int(1e5)
BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 1e-3  # (port) 2e-4
VALIDATE_EVERY = 100
SEQ_LEN = 128  # (port) 8192


# helpers (megabyte.py)

def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def remainder_to_mult(num, mult):
    return (mult - num % mult) % mult


def cast_tuple(t, length=1):
    return t if isinstance(t, tuple) else ((t,) * length)


def reduce_mult(nums):
    return functools.reduce(lambda x, y: x * y, nums, 1)


# einops' layers written out (port)

class FlattenLast2(Module):
    """Rearrange('... r d -> ... (r d)')"""

    def forward(self, x):
        return x.flatten(-2)


class MergeMiddle(Module):
    """Rearrange('b ... d -> b (...) d')"""

    def forward(self, x):
        return x.reshape(x.shape[0], -1, x.shape[-1])


class SplitToBatch(Module):
    """Rearrange('b m (n d) -> (b m) n d', n = n)"""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        b, m, nd = x.shape
        return x.reshape(b * m, self.n, nd // self.n)


# token shift, from Peng et al of RWKV

def token_shift(t):
    t, t_shift = t.chunk(2, dim=-1)
    t_shift = F.pad(t_shift, (0, 0, 1, -1))
    return torch.cat((t, t_shift), dim=-1)


# rotary positional embedding

class RotaryEmbedding(Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    @property
    def device(self):
        return next(self.buffers()).device

    def forward(self, seq_len):
        t = torch.arange(seq_len, device=self.device).type_as(self.inv_freq)
        freqs = torch.einsum('i , j -> i j', t, self.inv_freq)
        freqs = torch.cat((freqs, freqs), dim=-1)
        return freqs


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(pos, t):
    return t * pos.cos() + rotate_half(t) * pos.sin()


# norm

class RMSNorm(Module):
    def __init__(self, dim, eps=1e-8):
        super().__init__()
        self.scale = dim ** -0.5
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = torch.norm(x, dim=-1, keepdim=True) * self.scale
        return x / norm.clamp(min=self.eps) * self.g


# attend.py

class Attend(nn.Module):
    def __init__(self, causal=False, dropout=0., flash=False, bug=None):
        super().__init__()
        self.dropout = dropout
        self.attn_dropout = nn.Dropout(dropout)

        self.causal = causal
        self.flash = flash
        self.bug = bug

        # default cpu attention configs
        self.attn_cfg = [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION]

    def get_mask(self, i, j, device):
        return torch.ones((i, j), device=device, dtype=torch.bool).triu(j - i + 1)

    def flash_attn(self, q, k, v, mask=None, attn_bias=None):
        _, heads, q_len, _, k_len, is_cuda, device = *q.shape, k.shape[-2], q.is_cuda, q.device

        # single headed key / values

        if k.ndim == 3:
            k = k.unsqueeze(1)

        if v.ndim == 3:
            v = v.unsqueeze(1)

        # Check if mask exists and expand to compatible shape
        # The mask is B L, so it would have to be expanded to B H N L

        if exists(mask) and mask.ndim != 4:
            mask = mask[:, None, None, :]
            mask = mask.expand(-1, heads, q_len, -1)

        # pytorch 2.0 flash attn: q, k, v, mask, dropout, causal, softmax_scale

        with torch.nn.attention.sdpa_kernel(self.attn_cfg):
            if self.bug == "attention_not_causal":
                # is_causal left out: every position attends to the bytes it must predict
                out = F.scaled_dot_product_attention(
                    q, k, v,
                    attn_mask=mask,
                    dropout_p=self.dropout if self.training else 0.,
                )
            else:
                out = F.scaled_dot_product_attention(
                    q, k, v,
                    attn_mask=mask,
                    dropout_p=self.dropout if self.training else 0.,
                    is_causal=self.causal
                )
        return out

    def forward(self, q, k, v, mask=None):
        q_len, k_len, device = q.shape[-2], k.shape[-2], q.device

        scale = q.shape[-1] ** -0.5

        if self.flash:
            return self.flash_attn(q, k, v, mask=mask)

        # similarity

        sim = torch.matmul(q, k.transpose(-1, -2)) * scale

        # causal mask

        if self.causal:
            causal_mask = self.get_mask(q_len, k_len, device)
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)

        # attention

        attn = sim.softmax(dim=-1)
        attn = self.attn_dropout(attn)

        # aggregate values

        out = torch.matmul(attn, v)

        return out


# helper classes

def FeedForward(*, dim, mult=4, dropout=0.):
    return nn.Sequential(
        RMSNorm(dim),
        nn.Linear(dim, dim * mult),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(dim * mult, dim)
    )


class Attention(Module):
    def __init__(self, *, dim, dim_head=64, heads=8, dropout=0., flash=False, bug=None):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        inner_dim = dim_head * heads

        self.attend = Attend(
            causal=True,
            flash=flash,
            dropout=dropout,
            bug=bug
        )

        self.dropout = nn.Dropout(dropout)
        self.norm = RMSNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x, rotary_emb=None):
        h, device = self.heads, x.device

        x = self.norm(x)
        q, k, v = (self.to_q(x), *self.to_kv(x).chunk(2, dim=-1))
        # rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.reshape(*t.shape[:2], h, -1).transpose(1, 2), (q, k, v))

        if exists(rotary_emb):
            q, k = map(lambda t: apply_rotary_pos_emb(rotary_emb, t), (q, k))

        out = self.attend(q, k, v)

        out = out.transpose(1, 2).flatten(-2)  # rearrange(out, 'b h n d -> b n (h d)')
        return self.to_out(out)


class Transformer(Module):
    def __init__(self, *, dim, layers, dim_head=64, heads=8, attn_dropout=0., ff_dropout=0., ff_mult=4,
                 rel_pos=True, flash_attn=False, bug=None):
        super().__init__()
        self.rotary_emb = RotaryEmbedding(dim_head) if rel_pos else None
        self.layers = ModuleList([])

        for _ in range(layers):
            self.layers.append(ModuleList([
                Attention(dim=dim, dim_head=dim_head, heads=heads, dropout=attn_dropout, flash=flash_attn, bug=bug),
                FeedForward(dim=dim, mult=ff_mult, dropout=ff_dropout)
            ]))

        self.norm = RMSNorm(dim)

    def forward(self, x):
        n = x.shape[-2]
        rotary_emb = self.rotary_emb(n) if exists(self.rotary_emb) else None

        for attn, ff in self.layers:
            x = attn(token_shift(x), rotary_emb=rotary_emb) + x
            x = ff(token_shift(x)) + x

        return self.norm(x)


# main class

class MEGABYTE(Module):

    def __init__(self, *, num_tokens, dim, depth, max_seq_len, dim_head=64, heads=8, attn_dropout=0., ff_mult=4,
                 ff_dropout=0., pad_id=0, rel_pos=False, pos_emb=False, flash_attn=False, bug=None):
        super().__init__()

        # simplified configuration for each stage of the hierarchy
        # depth = (2, 2, 4) would translate to depth 2 at first stage, depth 2 second stage, depth 4 third
        # max_seq_len = (16, 8, 4) would translate to max sequence length of 16 at first stage, length of 8 at
        # second stage, length of 4 for last

        assert isinstance(depth, tuple) and isinstance(max_seq_len, tuple)
        assert len(depth) == len(max_seq_len)
        self.bug = bug

        self.stages = len(depth)
        dim = cast_tuple(dim, self.stages)

        assert len(dim) == self.stages

        *_, fine_dim = dim

        self.max_seq_len = max_seq_len

        self.start_tokens = nn.ParameterList([nn.Parameter(torch.randn(h_dim))
                                              for h_dim, seq_len in zip(dim, max_seq_len)])
        self.pos_embs = ModuleList([nn.Embedding(seq_len, h_dim)
                                    for h_dim, seq_len in zip(dim, max_seq_len)]) if pos_emb else None

        self.token_embs = ModuleList([])

        patch_size = 1
        self.token_embs.append(nn.Embedding(num_tokens, fine_dim))

        for dim_out, seq_len in zip(reversed(dim[:-1]), reversed(max_seq_len[1:])):
            patch_size *= seq_len

            self.token_embs.append(nn.Sequential(
                nn.Embedding(num_tokens, fine_dim),
                FlattenLast2(),
                nn.LayerNorm(patch_size * fine_dim),
                nn.Linear(patch_size * fine_dim, dim_out),
                nn.LayerNorm(dim_out)
            ))

        self.transformers = ModuleList([])
        self.to_next_transformer_projections = ModuleList([])

        for h_dim, next_h_dim, stage_depth, next_seq_len in zip_longest(dim, dim[1:], depth, max_seq_len[1:]):
            self.transformers.append(Transformer(
                dim=h_dim,
                layers=stage_depth,
                dim_head=dim_head,
                heads=heads,
                attn_dropout=attn_dropout,
                ff_dropout=ff_dropout,
                ff_mult=ff_mult,
                rel_pos=rel_pos,
                flash_attn=flash_attn,
                bug=bug
            ))

            proj = nn.Identity()

            if exists(next_h_dim):
                proj = nn.Sequential(
                    MergeMiddle(),
                    nn.Linear(h_dim, next_h_dim * next_seq_len),
                    SplitToBatch(next_seq_len)
                )

            self.to_next_transformer_projections.append(proj)

        self.to_logits = nn.Linear(fine_dim, num_tokens)
        self.pad_id = pad_id

    def forward(self, ids, return_loss=False):
        batch = ids.shape[0]

        assert ids.ndim in {2, self.stages + 1}
        flattened_dims = ids.ndim == 2

        if flattened_dims:
            # allow for ids to be given in the shape of (batch, seq)
            # in which case it will be auto-padded to the next nearest multiple of depth seq len
            seq_len = ids.shape[-1]
            multiple_of = reduce_mult(self.max_seq_len[1:])
            padding = remainder_to_mult(seq_len, multiple_of)
            ids = F.pad(ids, (0, padding), value=self.pad_id)
            ids = ids.reshape(batch, -1, *self.max_seq_len[1:])

        b, *prec_dims, device = *ids.shape, ids.device

        # check some dimensions

        assert prec_dims[0] <= self.max_seq_len[0], 'the first dimension of your axial autoregressive transformer must be less than the first tuple element of max_seq_len (like any autoregressive transformer)'
        assert tuple(prec_dims[1:]) == tuple(self.max_seq_len[1:]), 'all subsequent dimensions must match exactly'

        # get tokens for all hierarchical stages, reducing by appropriate dimensions
        # and adding the absolute positional embeddings

        num_stages = len(prec_dims)

        tokens_at_stages = []
        pos_embs = default(self.pos_embs, (None,) * num_stages)

        for ind, pos_emb, token_emb in zip_longest(range(num_stages), reversed(pos_embs), self.token_embs):
            is_first = ind == 0

            tokens = token_emb(ids)

            if exists(pos_emb):
                positions = pos_emb(torch.arange(tokens.shape[-2], device=device))
                tokens = tokens + positions

            tokens_at_stages.insert(0, tokens)

            if is_first:
                continue

            ids = ids.flatten(-2)  # rearrange(ids, '... m n -> ... (m n)')

        # the un-pixelshuffled representations of the previous hierarchy, starts with None

        prev_stage_tokens_repr = None

        # spatial tokens is tokens with depth pos reduced along depth dimension + spatial positions

        for stage_start_tokens, stage_tokens, transformer, proj in zip(self.start_tokens, tokens_at_stages,
                                                                        self.transformers,
                                                                        self.to_next_transformer_projections):
            ps = stage_tokens.shape[:-2]  # pack_one(stage_tokens, '* n d')
            stage_tokens = stage_tokens.reshape(-1, *stage_tokens.shape[-2:])
            # repeat(stage_start_tokens, 'f -> b 1 f', b = stage_tokens.shape[0])
            stage_start_tokens = stage_start_tokens.expand(stage_tokens.shape[0], 1, -1)

            # concat start token

            stage_tokens = torch.cat((
                stage_start_tokens,
                stage_tokens,
            ), dim=-2)

            # sum the previous hierarchy's representation

            if exists(prev_stage_tokens_repr):
                prev_stage_tokens_repr = F.pad(prev_stage_tokens_repr, (0, 0, 1, 0), value=0.)
                stage_tokens = stage_tokens + prev_stage_tokens_repr

            attended = transformer(stage_tokens)

            attended = attended.reshape(*ps, *attended.shape[-2:])  # unpack_one(attended, ps, '* n d')

            # project for next stage in the hierarchy

            if self.bug == "global_output_not_shifted":
                # the stage's outputs from the first patch on: each patch is conditioned on its own content
                prev_stage_tokens_repr = proj(attended[..., 1:, :])
            else:
                prev_stage_tokens_repr = proj(attended[..., :-1, :])

        # project to logits

        logits = self.to_logits(attended)

        start_tokens = logits[(slice(None), *((0,) * (logits.ndim - 2)), slice(None))]
        start_tokens = start_tokens.unsqueeze(1)  # rearrange(start_tokens, 'b d -> b 1 d')

        logits = logits[..., 1:, :]

        if not return_loss:

            if flattened_dims:
                logits = logits.reshape(logits.shape[0], -1, logits.shape[-1])
                logits = logits[:, :seq_len]

            return logits

        logits = logits.reshape(logits.shape[0], -1, logits.shape[-1])  # 'b ... c -> b (...) c'
        logits = torch.cat((start_tokens, logits), dim=-2)

        preds = logits.transpose(1, 2)  # rearrange(logits, 'b n c -> b c n')
        labels = ids.reshape(ids.shape[0], -1)  # rearrange(ids, 'b ... -> b (...)')

        loss = F.cross_entropy(
            preds[..., :-1],
            labels,
            ignore_index=self.pad_id
        )

        return loss


# train.py

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
        full_seq = self.data[rand_start: rand_start + self.seq_len].long()
        return full_seq  # (port) .cuda()

    def __len__(self):
        return self.data.size(0) // self.seq_len


def synthetic_text(rng, n_bytes):
    """English-like bytes: words of a small lexicon chained by a random bigram table (port)."""
    letters = np.array(list("etaoinshrdlucmfwypvbgk"))
    lexicon = ["".join(rng.choice(letters, size=rng.integers(1, 7))) for _ in range(60)]
    trans = rng.dirichlet(np.full(60, 0.15), size=60)
    out, w, cap, total = [], int(rng.integers(60)), True, 0
    while total < n_bytes:
        word = lexicon[w]
        out.append(word.capitalize() if cap else word)
        r = rng.random()
        out.append(". " if r < 0.08 else (", " if r < 0.15 else " "))
        total += len(out[-2]) + len(out[-1])
        cap = r < 0.08
        w = int(rng.choice(60, p=trans[w]))
    return np.frombuffer("".join(out).encode("ascii")[:n_bytes], dtype=np.uint8).copy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    # instantiate GPT-like decoder model

    model = MEGABYTE(
        num_tokens=256,
        dim=(64, 48, 32),  # (port) (768, 512, 256)
        depth=(2, 1, 1),  # (port) (6, 4, 2)
        max_seq_len=(8, 4, 4),  # (port) (512, 4, 4)
        dim_head=16,  # (port) the default 64
        heads=4,  # (port) the default 8
        flash_attn=True,
        bug=bug
    )

    # prepare enwik8 data (port: synthetic bytes)

    x = synthetic_text(rng, 66000)
    train_x, valid_x = np.split(x, [60000])
    data_train, data_val = map(torch.from_numpy, (train_x, valid_x))

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
    train_loader = cycle(train_data_loader)
    val_loader = cycle(DataLoader(val_dataset, batch_size=BATCH_SIZE))

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    # training

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()
            loss = model(next(train_loader), return_loss=True)
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        return loss.item()

    def eval_fn(model, _batch=None):
        model.eval()
        with torch.no_grad():
            loss = model(next(val_loader), return_loss=True)
        return float(loss)

    gen_state = torch.get_rng_state()
    first = torch.stack([val_dataset[i] for i in range(BATCH_SIZE)])
    torch.set_rng_state(gen_state)
    return Program(name="megabyte_lm", model=model, batch=({"ids": first, "return_loss": True},),
                   loss_fn=lambda loss, _targets=None: loss, optimizer=optim, train_step=train_step, eval_fn=eval_fn,
                   loader=train_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # scaled_dot_product_attention called without is_causal (classic): every stage sees the bytes it must predict.
    Bug("attention_not_causal", functools.partial(_build, bug="attention_not_causal"), "learning_ledger",
        ("DEPENDENCY",)),
    # the coarser stage's outputs handed on as attended[..., 1:, :] instead of [..., :-1, :] (classic off-by-one of the
    # hierarchy's shift): the representation summed into a patch has already read that patch's bytes.
    Bug("global_output_not_shifted", functools.partial(_build, bug="global_output_not_shifted"), "learning_ledger",
        ("DEPENDENCY",)),
    # optim.zero_grad() inside the accumulation loop (classic): each update keeps only the last micro-batch's gradient.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
