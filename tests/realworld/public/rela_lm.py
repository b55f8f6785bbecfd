"""ReLA transformer (rectified linear attention: ``relu(q k^T)`` in place of the softmax, values normalized by a
gated RMSNorm, pre-norm residual blocks with learned absolute positions) trained as a causal byte-level language
model by the repository's enwik8 script: ``AutoregressiveWrapper`` (inputs ``x[:, :-1]``, labels ``x[:, 1:]``,
cross-entropy ignoring the pad byte 0), Adam lr 3e-4, 4 micro-batches accumulated per update with the loss divided
by 4, ``clip_grad_norm_(0.5)``, validation under ``eval()`` and ``no_grad``.

Source: https://github.com/lucidrains/rela-transformer
Commit: b58b121e59463b5c73fa5dea9297c841b1a3a362
Files: train.py, rela_transformer/rela_transformer.py, rela_transformer/autoregressive_wrapper.py
License: MIT (Copyright (c) 2022 Phil Wang)
Domain: causal language model (byte level)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, heads 8 -> 2, dim_head 64 -> 16 (the default), SEQ_LEN 512 -> 32
  (BATCH_SIZE 4, GRADIENT_ACCUMULATE_EVERY 4, lr and clipping unchanged);
- einops is not available: ``repeat`` and the ``rearrange`` calls are written out as expand/view/transpose in plain
  torch (same tensors);
- ``.cuda()`` calls dropped (CPU);
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); the dataset class is unchanged;
- one ``train_step`` is one iteration of the training loop (4 micro-batches, clip, step, zero_grad); the validation
  (``eval_fn``) is the script's validation on a given batch; printing and generation are left out.
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
LEARNING_RATE = 3e-4
SEQ_LEN = 32
SELF_CHECK_STEPS = 40


def exists(val):
    return val is not None


def default(value, default):
    return value if exists(value) else default


# ---- rela_transformer/rela_transformer.py ---------------------------------------------------------------------

class GatedRMSNorm(nn.Module):
    def __init__(
        self,
        dim,
        eps = 1e-8
    ):
        super().__init__()
        self.scale = dim ** -0.5
        self.eps = eps
        self.w = nn.Parameter(torch.ones(dim))
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = torch.norm(x, dim = -1, keepdim = True) * self.scale
        normed_x = x / norm.clamp(min = self.eps) * self.g
        return normed_x * (x * self.w).sigmoid()


def FeedForward(dim, mult = 4):
    return nn.Sequential(
        nn.LayerNorm(dim),
        nn.Linear(dim, dim * mult),
        nn.GELU(),
        nn.Linear(dim * mult, dim)
    )


class ReLA(nn.Module):
    def __init__(
        self,
        *,
        dim,
        causal = True,
        dim_head = 64,
        heads = 8,
        num_memory_kv = 0,
        relu_squared = False,
        bug = None
    ):
        super().__init__()
        self.heads = heads
        inner_dim = dim_head * heads
        self.scale = dim_head ** -0.5
        self.causal = causal
        self.relu_squared = relu_squared
        self.norm = GatedRMSNorm(dim)
        self.bug = bug

        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.mem_k = nn.Parameter(torch.randn(num_memory_kv, inner_dim))
        self.mem_v = nn.Parameter(torch.randn(num_memory_kv, inner_dim))

        self.norm_values = GatedRMSNorm(dim_head)
        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
        )

    def forward(self, x, mask = None):
        b, device = x.shape[0], x.device
        x = self.norm(x)
        h = self.heads

        q, k, v = self.to_qkv(x).chunk(3, dim = -1)

        # repeat(t, 'n d -> b n d', b = b)
        mem_k, mem_v = map(lambda t: t.unsqueeze(0).expand(b, *t.shape), (self.mem_k, self.mem_v))
        k = torch.cat((mem_k, k), dim = 1)
        v = torch.cat((mem_v, v), dim = 1)

        # rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2), (q, k, v))

        q = q * self.scale
        sim = einsum('b h i d, b h j d -> b h i j', q, k)

        attn = F.relu(sim)

        if self.relu_squared:
            attn = attn ** 2

        if exists(mask):
            mask = mask[:, None, None, :]  # rearrange(mask, 'b j -> b 1 1 j')
            attn = attn.masked_fill(~mask, 0.)

        if self.causal:
            i, j = attn.shape[-2:]
            if self.bug == "causal_mask_off_by_one":
                # the mask starts one diagonal too far up: every position also sees the next token
                causal_mask = torch.ones(i, j, device = device).triu_(j - i + 2).bool()
            else:
                causal_mask = torch.ones(i, j, device = device).triu_(j - i + 1).bool()
            attn = attn.masked_fill(causal_mask, 0.)

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = self.norm_values(out)

        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)  # rearrange(out, 'b h n d -> b n (h d)')
        return self.to_out(out)


class ReLATransformer(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        max_seq_len,
        causal = True,
        heads = 8,
        dim_head = 64,
        num_memory_kv = 0,
        no_ff = False,
        ff_mult = 4,
        relu_squared = False,
        bug = None
    ):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                ReLA(dim = dim, relu_squared = relu_squared, heads = heads, dim_head = dim_head,
                     num_memory_kv = num_memory_kv, causal = causal, bug = bug),
                FeedForward(dim = dim, mult = ff_mult) if not no_ff else None
            ]))

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        )

    def forward(self, x, mask = None):
        n, device = x.shape[1], x.device
        x = self.token_emb(x)
        pos_emb = self.pos_emb(torch.arange(n, device = device))
        x = x + pos_emb[None]  # rearrange(pos_emb, 'n d -> 1 n d')

        for attn, ff in self.layers:
            x = attn(x, mask = mask) + x

            if exists(ff):
                x = ff(x) + x

        return self.to_logits(x)


# ---- rela_transformer/autoregressive_wrapper.py (training path) -------------------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index = None, pad_value = 0, bug = None):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = default(ignore_index, pad_value)

        self.net = net
        self.max_seq_len = net.max_seq_len
        self.bug = bug

    def forward(self, x, *args, **kwargs):
        if self.bug == "labels_not_shifted":
            inp, labels = x[:, :-1], x[:, :-1]
        else:
            inp, labels = x[:, :-1], x[:, 1:]
        out = self.net(inp, *args, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), labels, ignore_index = self.ignore_index)
        return loss


# ---- train.py --------------------------------------------------------------------------------------------------

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
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X = make_bytes(gen, 12000)
    trX, vaX = X[:10000], X[10000:]
    data_train, data_val = trX, vaX

    model = ReLATransformer(
        num_tokens = 256,
        dim = 32,
        depth = 2,
        max_seq_len = SEQ_LEN,
        heads = 2,
        dim_head = 16,
        causal = True,
        bug = bug
    )

    model = AutoregressiveWrapper(model, bug = bug)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset   = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader  = cycle(train_data_loader)

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            (loss / GRADIENT_ACCUMULATE_EVERY).backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    first = torch.stack([val_dataset[i] for i in range(BATCH_SIZE)])
    return Program(name="rela_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # labels taken from the same positions as the inputs (the shift dropped): the model learns to copy its input.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # triu_(j - i + 2) for triu_(j - i + 1): the relu attention of every position also reaches the byte it predicts.
    Bug("causal_mask_off_by_one", functools.partial(_build, bug="causal_mask_off_by_one"), "learning_ledger",
        ("DEPENDENCY",)),
    # optim.zero_grad() dropped after the step: gradients accumulate across updates.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (), kind="step.grad_accumulation"),
]
