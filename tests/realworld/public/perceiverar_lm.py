# ruff: noqa: C417, UP028
"""Phil Wang's Perceiver AR (Hawthorne et al., 2022): a causal byte-level language model whose first layer
cross-attends from the last ``max_seq_len - cross_attn_seq_len`` positions to the whole prefix
(``CausalPrefixAttention``: keys and values from the prefix and the sequence, a causal mask offset by the prefix,
a random half of the prefix dropped in training with its rotary positions), followed by causal self-attention
layers with rotary embeddings and feed-forwards; the loss is the cross-entropy of the shifted tokens after the
prefix (``AutoregressiveWrapper``: ``x[:, :-1]`` in, ``x[:, 1:]`` as labels, ``ignore_index=0``). ``train.py`` samples
random windows of enwik8, accumulates 4 micro-batches (each loss backpropagated as is), clips the gradient norm at
0.5 and steps Adam.

Source: https://github.com/lucidrains/perceiver-ar-pytorch
Commit: f6005174e73f18d12d260dc80b6c907d67556db9
Files: ``train.py``, ``perceiver_ar_pytorch/perceiver_ar_pytorch.py``, ``perceiver_ar_pytorch/autoregressive_wrapper.py``
License: MIT (Copyright (c) 2022 Phil Wang; full text in LICENSES/lucidrains-perceiver-ar-pytorch.txt)
Domain: causal language model (Perceiver AR: prefix cross-attention, rotary embeddings, gradient accumulation)

Kept as written: ``FeedForward``, ``RotaryEmbedding``, ``rotate_half``, ``apply_rotary_pos_emb``,
``CausalAttention``, ``CausalPrefixAttention`` (the cross-attention dropout of the prefix, the head chunks),
``PerceiverAR`` (token and learned position embeddings, the prefix split, one perceive layer, the loss on the
labels after the prefix), ``AutoregressiveWrapper.forward``, ``TextSamplerDataset``, ``cycle`` and the loop body of
``train.py`` (``model.train()``, 4 accumulated micro-batch backwards, clipping at 0.5, Adam step, zero_grad),
``cross_attn_dropout=0.5``, batch 4, LEARNING_RATE 2e-4.

Deviations from the original:
- enwik8 is not here: a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each repeated
  3-6 times, so a byte is predictable from the bytes before it), 10,000 bytes; ``TextSamplerDataset`` draws its
  window start below ``len - seq_len - 1`` (the original's bound can read one byte short at the very end);
- sizes for 2 CPU cores: SEQ_LEN 4096 -> 64, PREFIX_SEQ_LEN 3584 -> 48, dim 512 -> 32, depth 8 -> 2, heads 8 -> 2,
  dim_head 64 -> 32 (the rotary dimension is at least 32);
- einops is not installed: every ``rearrange``/``repeat`` is the same ``reshape``/``transpose``/``expand`` in plain
  torch; ``.cuda()`` dropped;
- one ``train_step`` is one iteration of the training loop; the validation print, the sampling and ``generate``
  are left out: ``eval_fn`` is the validation loss on a given batch, under ``no_grad`` in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

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
SEQ_LEN = 64
PREFIX_SEQ_LEN = 48


def exists(val):
    return val is not None


def FeedForward(dim, mult = 4, dropout = 0.):
    hidden_dim = int(dim * mult)
    return nn.Sequential(
        nn.LayerNorm(dim),
        nn.Linear(dim, hidden_dim, bias = False),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_dim, dim, bias = False)
    )


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, max_seq_len, *, device):
        seq = torch.arange(max_seq_len, device = device, dtype = self.inv_freq.dtype)
        freqs = einsum("i , j -> i j", seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim = -1)


def rotate_half(x):
    x = x.reshape(*x.shape[:-1], 2, -1)  # rearrange(x, "... (j d) -> ... j d", j = 2)
    x1, x2 = x.unbind(dim = -2)
    return torch.cat((-x2, x1), dim = -1)


def apply_rotary_pos_emb(pos, t):
    seq_len, rotate_dim = t.shape[-2], pos.shape[-1]
    pos = pos[..., -seq_len:, :]
    t, t_pass = t[..., :rotate_dim], t[..., rotate_dim:]
    t = (t * pos.cos()) + (rotate_half(t) * pos.sin())
    return torch.cat((t, t_pass), dim = -1)


def _split_heads(t, h):
    """rearrange(t, 'b n (h d) -> b h n d', h = h)"""
    b, n, _ = t.shape
    return t.reshape(b, n, h, -1).transpose(1, 2)


def _merge_heads(t):
    """rearrange(t, 'b h n d -> b n (h d)')"""
    b, _, n, _ = t.shape
    return t.transpose(1, 2).reshape(b, n, -1)


class CausalAttention(nn.Module):
    def __init__(self, *, dim, dim_head = 64, heads = 8, dropout = 0., bug = None):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.bug = bug
        inner_dim = heads * dim_head
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)
        self.to_out = nn.Linear(inner_dim, dim, bias = False)

    def forward(self, x, rotary_pos_emb = None):
        x = self.norm(x)
        q, k, v = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = map(lambda t: _split_heads(t, self.heads), (q, k, v))
        q = q * self.scale
        if exists(rotary_pos_emb):
            q = apply_rotary_pos_emb(rotary_pos_emb, q)
            k = apply_rotary_pos_emb(rotary_pos_emb, k)
        sim = einsum('b h i d, b h j d -> b h i j', q, k)
        i, j = sim.shape[-2:]
        causal_mask = torch.ones((i, j), device = x.device, dtype = torch.bool).triu(j - i + 1)
        if self.bug != "causal_mask_dropped":
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim = -1)
        attn = self.dropout(attn)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = _merge_heads(out)
        return self.to_out(out)


class CausalPrefixAttention(nn.Module):
    def __init__(self, *, dim, dim_head = 64, heads = 8, max_heads_process = 2, dropout = 0., cross_attn_dropout = 0.):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.max_heads_process = max_heads_process
        inner_dim = heads * dim_head
        self.norm = nn.LayerNorm(dim)
        self.context_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.cross_attn_dropout = cross_attn_dropout
        self.to_q = nn.Linear(dim, inner_dim, bias = False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias = False)
        self.to_out = nn.Linear(inner_dim, dim)

    def forward(self, x, context, context_mask = None, rotary_pos_emb = None):
        batch, context_len, device = x.shape[0], context.shape[-2], x.device
        q_rotary_pos_emb = rotary_pos_emb
        k_rotary_pos_emb = rotary_pos_emb
        if self.training and self.cross_attn_dropout > 0.:
            rand = torch.zeros((batch, context_len), device = device).uniform_()
            keep_context_len = context_len - int(context_len * self.cross_attn_dropout)
            keep_indices = rand.topk(keep_context_len, dim = -1).indices
            keep_mask = torch.zeros_like(rand).scatter_(1, keep_indices, 1).bool()
            context = context[keep_mask].reshape(batch, -1, context.shape[-1])  # '(b n) d -> b n d'
            if exists(context_mask):
                context_mask = context_mask[keep_mask].reshape(batch, -1)  # '(b n) -> b n'
            k_rotary_pos_emb = k_rotary_pos_emb.unsqueeze(0).expand(batch, *k_rotary_pos_emb.shape)  # '... -> b ...'
            k_rotary_pos_emb_context, k_rotary_pos_emb_seq = k_rotary_pos_emb[:, :context_len], k_rotary_pos_emb[:, context_len:]
            k_rotary_pos_emb_context = k_rotary_pos_emb_context[keep_mask].reshape(batch, -1, k_rotary_pos_emb.shape[-1])
            k_rotary_pos_emb = torch.cat((k_rotary_pos_emb_context, k_rotary_pos_emb_seq), dim = 1)
            k_rotary_pos_emb = k_rotary_pos_emb.unsqueeze(1)  # 'b n d -> b 1 n d'
        x = self.norm(x)
        context = self.context_norm(context)
        q = self.to_q(x)
        k_input, v_input = self.to_kv(x).chunk(2, dim = -1)
        k_context, v_context = self.to_kv(context).chunk(2, dim = -1)
        k = torch.cat((k_context, k_input), dim = 1)
        v = torch.cat((v_context, v_input), dim = 1)
        q, k, v = map(lambda t: _split_heads(t, self.heads), (q, k, v))
        q = q * self.scale
        if exists(rotary_pos_emb):
            q = apply_rotary_pos_emb(q_rotary_pos_emb, q)
            k = apply_rotary_pos_emb(k_rotary_pos_emb, k)
        i, j = q.shape[-2], k.shape[-2]
        mask_value = -torch.finfo(q.dtype).max
        if exists(context_mask):
            mask_len = context_mask.shape[-1]
            context_mask = F.pad(context_mask, (0, max(j - mask_len, 0)), value = True)
            context_mask = context_mask[:, None, None, :]  # 'b j -> b 1 1 j'
        causal_mask = torch.ones((i, j), device = x.device, dtype = torch.bool).triu(j - i + 1)
        out = []
        max_heads = self.max_heads_process
        for q_chunk, k_chunk, v_chunk in zip(q.split(max_heads, dim = 1), k.split(max_heads, dim = 1), v.split(max_heads, dim = 1)):
            sim = einsum('b h i d, b h j d -> b h i j', q_chunk, k_chunk)
            if exists(context_mask):
                sim = sim.masked_fill(~context_mask, mask_value)
            sim = sim.masked_fill(causal_mask, mask_value)
            attn = sim.softmax(dim = -1)
            attn = self.dropout(attn)
            out_chunk = einsum('b h i j, b h j d -> b h i d', attn, v_chunk)
            out.append(out_chunk)
        out = torch.cat(out, dim = 1)
        out = _merge_heads(out)
        return self.to_out(out)


class PerceiverAR(nn.Module):
    def __init__(self, *, num_tokens, dim, depth, max_seq_len, cross_attn_seq_len, dim_head = 64, heads = 8,
                 dropout = 0., cross_attn_dropout = 0., ff_mult = 4, perceive_depth = 1, perceive_max_heads_process = 2,
                 bug = None):
        super().__init__()
        assert max_seq_len > cross_attn_seq_len, 'max_seq_len must be greater than cross_attn_seq_len'
        self.max_seq_len = max_seq_len
        self.cross_attn_seq_len = cross_attn_seq_len
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.rotary_pos_emb = RotaryEmbedding(dim = max(32, dim_head // 2))
        self.perceive_layers  = nn.ModuleList([])
        for _ in range(perceive_depth):
            self.perceive_layers.append(nn.ModuleList([
                CausalPrefixAttention(dim = dim, dim_head = dim_head, heads = heads, max_heads_process = perceive_max_heads_process, dropout = dropout, cross_attn_dropout = cross_attn_dropout),
                FeedForward(dim, mult = ff_mult, dropout = dropout)
            ]))
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                CausalAttention(dim = dim, dim_head = dim_head, heads = heads, bug = bug),
                FeedForward(dim, mult = ff_mult, dropout = dropout),
            ]))
        self.to_logits = nn.Linear(dim, num_tokens, bias = False)

    def forward(self, x, prefix_mask = None, labels = None):
        seq_len, device = x.shape[1], x.device
        assert self.cross_attn_seq_len < seq_len <= self.max_seq_len
        x = self.token_emb(x)
        x = x + self.pos_emb(torch.arange(seq_len, device = device))
        rotary_pos_emb = self.rotary_pos_emb(seq_len, device = device)
        prefix, x = x[:, :self.cross_attn_seq_len], x[:, self.cross_attn_seq_len:]
        for cross_attn, ff in self.perceive_layers:
            x = cross_attn(x, prefix, context_mask = prefix_mask, rotary_pos_emb = rotary_pos_emb) + x
            x = ff(x) + x
        for attn, ff in self.layers:
            x = attn(x, rotary_pos_emb = rotary_pos_emb) + x
            x = ff(x) + x
        logits = self.to_logits(x)
        if not exists(labels):
            return logits
        labels = labels[:, self.cross_attn_seq_len:]
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index = 0)  # rearrange 'b n c -> b c n'


# perceiver_ar_pytorch/autoregressive_wrapper.py (generation left out)
class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, pad_value=0, bug=None):
        super().__init__()
        self.max_seq_len = net.max_seq_len
        self.pad_value = pad_value
        self.net = net
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            x_inp, x_labels = x[:, :-1], x[:, :-1]
        else:
            x_inp, x_labels = x[:, :-1], x[:, 1:]
        return self.net(x_inp, labels = x_labels, **kwargs)


# train.py
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
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_bytes(gen, n):
    """(port) Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes
    repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data_train = make_bytes(gen, 10000)
    model = PerceiverAR(num_tokens = 256, dim = 32, depth = 2, heads = 2, dim_head = 32, cross_attn_dropout = 0.5,
                        max_seq_len = SEQ_LEN, cross_attn_seq_len = PREFIX_SEQ_LEN, bug = bug)
    model = AutoregressiveWrapper(model, bug = bug)
    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    train_loader = cycle(train_data_loader)
    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

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
        return loss.detach()

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        model.train(was)
        return float(loss)

    return Program(name="perceiverar_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the labels are the inputs themselves (``x[:, :-1]``), not shifted by one: each position is trained
    # to output the byte it was fed.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the causal mask of the self-attention layers left out, so every position sees the bytes after it.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: zero_grad inside the accumulation loop, so only the last micro-batch's gradient reaches the step.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),
]
