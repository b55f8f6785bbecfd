"""PaLM causal language model (parallel attention + feedforward blocks, multi-query attention, rotary embeddings,
SwiGLU, tied input/output embedding) trained by the repository's enwik8 script: ``AutoregressiveWrapper`` (inputs
``x[:, :-1]``, labels ``x[:, 1:]``, cross-entropy), Adam lr 2e-4, 4 micro-batches accumulated per update (the loss is
summed, not divided, as written), ``clip_grad_norm_(0.5)``.

Source: https://github.com/lucidrains/PaLM-pytorch
Commit: 7164d13d5a831647edb5838544017f387130f987
Files: train.py, palm_pytorch/palm_pytorch.py, palm_pytorch/autoregressive_wrapper.py
License: MIT (Copyright (c) 2022 Phil Wang)
Domain: causal language model

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, heads 8 -> 2, dim_head 64 -> 16, SEQ_LEN 1024 -> 32 (BATCH_SIZE 4,
  GRADIENT_ACCUMULATE_EVERY 4, lr, clipping unchanged);
- train.py imports the Triton PaLM (``palm_pytorch.triton``, GPU only); the plain PyTorch ``palm_pytorch.PaLM`` of
  the same repository is used instead, and ``.cuda()`` calls are dropped;
- einops is not available: the four ``rearrange`` calls are written out as view/transpose/reshape in plain torch;
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); the dataset class is unchanged;
- one ``train_step`` is one iteration of the outer training loop (4 micro-batches, clip, step, zero_grad); the
  validation (``eval_fn``) is the script's validation step on a given batch; generation and printing are left out.
"""
# ruff: noqa: C417, UP028  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-4
SEQ_LEN = 32


# ---- palm_pytorch/palm_pytorch.py -------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.register_buffer("beta", torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, max_seq_len, *, device):
        seq = torch.arange(max_seq_len, device=device, dtype=self.inv_freq.dtype)
        freqs = einsum("i , j -> i j", seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x = x.reshape(*x.shape[:-1], 2, x.shape[-1] // 2)  # rearrange(x, "... (j d) -> ... j d", j=2)
    x1, x2 = x.unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(pos, t):
    return (t * pos.cos()) + (rotate_half(t) * pos.sin())


class SwiGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


class ParallelTransformerBlock(nn.Module):
    def __init__(self, dim, dim_head=64, heads=8, ff_mult=4, bug=None):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.bug = bug

        attn_inner_dim = dim_head * heads
        ff_inner_dim = dim * ff_mult
        self.fused_dims = (attn_inner_dim, dim_head, dim_head, (ff_inner_dim * 2))

        self.heads = heads
        self.scale = dim_head**-0.5
        self.rotary_emb = RotaryEmbedding(dim_head)

        self.fused_attn_ff_proj = nn.Linear(dim, sum(self.fused_dims), bias=False)
        self.attn_out = nn.Linear(attn_inner_dim, dim, bias=False)

        self.ff_out = nn.Sequential(
            SwiGLU(),
            nn.Linear(ff_inner_dim, dim, bias=False)
        )

        # for caching causal mask and rotary embeddings

        self.register_buffer("mask", None, persistent=False)
        self.register_buffer("pos_emb", None, persistent=False)

    def get_mask(self, n, device):
        if self.mask is not None and self.mask.shape[-1] >= n:
            return self.mask[:n, :n]

        if self.bug == "causal_mask_lower":
            # the mask built from the wrong triangle: the past is hidden, the future is visible
            mask = torch.ones((n, n), device=device, dtype=torch.bool).tril(-1)
        else:
            mask = torch.ones((n, n), device=device, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        return mask

    def get_rotary_embedding(self, n, device):
        if self.pos_emb is not None and self.pos_emb.shape[-2] >= n:
            return self.pos_emb[:n]

        pos_emb = self.rotary_emb(n, device=device)
        self.register_buffer("pos_emb", pos_emb, persistent=False)
        return pos_emb

    def forward(self, x):
        n, device, h = x.shape[1], x.device, self.heads

        # pre layernorm
        x = self.norm(x)

        # attention queries, keys, values, and feedforward inner
        q, k, v, ff = self.fused_attn_ff_proj(x).split(self.fused_dims, dim=-1)

        # split heads (multi-query: one key/value head shared by all query heads)
        b = q.shape[0]
        q = q.view(b, n, h, -1).transpose(1, 2)  # rearrange(q, "b n (h d) -> b h n d", h=h)

        # rotary embeddings
        positions = self.get_rotary_embedding(n, device)
        q, k = map(lambda t: apply_rotary_pos_emb(positions, t), (q, k))

        # scale
        q = q * self.scale

        # similarity
        sim = einsum("b h i d, b j d -> b h i j", q, k)

        # causal mask
        causal_mask = self.get_mask(n, device)
        sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)

        # attention
        attn = sim.softmax(dim=-1)

        # aggregate values
        out = einsum("b h i j, b j d -> b h i d", attn, v)

        # merge heads
        out = out.transpose(1, 2).reshape(b, n, -1)  # rearrange(out, "b h n d -> b n (h d)")
        return self.attn_out(out) + self.ff_out(ff)


def PaLM(*, dim, num_tokens, depth, dim_head=64, heads=8, ff_mult=4, bug=None):
    net = nn.Sequential(
        nn.Embedding(num_tokens, dim),
        *[
            Residual(ParallelTransformerBlock(dim=dim, dim_head=dim_head, heads=heads, ff_mult=ff_mult, bug=bug))
            for _ in range(depth)
        ],
        LayerNorm(dim),
        nn.Linear(dim, num_tokens, bias=False)
    )

    # they used embedding weight tied projection out to logits, not common, but works
    net[-1].weight = net[0].weight

    nn.init.normal_(net[0].weight, std=0.02)
    return net


# ---- palm_pytorch/autoregressive_wrapper.py (training path) ----------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, max_seq_len=2048, pad_value=0, bug=None):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.pad_value = pad_value
        self.net = net
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            x_inp, x_labels = x[:, :-1], x[:, :-1]
        else:
            x_inp, x_labels = x[:, :-1], x[:, 1:]
        logits = self.net(x_inp, **kwargs)
        return F.cross_entropy(logits.transpose(1, 2), x_labels)  # rearrange(logits, "b c n -> b n c")


# ---- train.py ------------------------------------------------------------------------------------------------

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
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_bytes(gen, n):
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data_train = make_bytes(gen, 10000)

    model = PaLM(num_tokens=256, dim=32, depth=2, dim_head=16, heads=2, bug=bug)
    model = AutoregressiveWrapper(model, max_seq_len=SEQ_LEN, bug=bug)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
    train_loader = cycle(train_data_loader)

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    return Program(name="palm_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # labels taken from the same positions as the inputs (the shift dropped): the model learns to copy its input.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # the causal mask built from the wrong triangle: every position sees the tokens it must predict.
    Bug("causal_mask_lower", functools.partial(_build, bug="causal_mask_lower"), "learning_ledger", ("DEPENDENCY",)),
]
