# ruff: noqa: UP028
"""nGPT, the normalized Transformer, from lucidrains/nGPT-pytorch (``train.py``): a character LM whose every weight
matrix lives on the unit hypersphere (``NormLinear`` under a ``register_parametrization`` l2-norm), the hidden state
renormalized after each block by a learned-rate spherical interpolation (``Residual``: ``l2norm(lerp(x,
l2norm(f(x)), alpha))``), rotary positions, a value residual from the first layer, SiLU-gated feedforward with learned
scales, tied embeddings with a learned logit scale, and the loss computed inside ``forward(ids, return_loss=True)``
on the ids shifted by one; Adam, 4 micro-batches accumulated per step.

Source: https://github.com/lucidrains/nGPT-pytorch
Commit: 166bbe73c3b18f06a87ce23d4837a6667ff343bc
Files: train.py, nGPT_pytorch/nGPT.py (``l2norm``, ``Scale``, ``Residual``, ``L2Norm``, ``NormLinear``,
``Attention``, ``FeedForward``, ``nGPT``); ``RotaryEmbedding`` from https://github.com/lucidrains/rotary-embedding-torch
(MIT, its default interleaved 'lang' rotation, written out)
License: MIT (Copyright (c) 2024 Phil Wang; full text in LICENSES/lucidrains-nGPT-pytorch.txt)
Domain: causal language model, normalized Transformer (hypersphere weights and hidden states, char-level)

Kept as written: ``l2norm``, ``Scale`` (``scale * init / scale``), ``Residual``, ``L2Norm``, ``NormLinear`` (the
parametrization, ``norm_weights_`` copying the normed weight into ``original``, the output scale), ``Attention``
(q, k, v NormLinears, value residual ``0.5 * (v + first_values)``, rotary on q and k, the ``qk_scale`` with its
``dim ** -1`` scale, ``scaled_dot_product_attention(is_causal=True, scale=dim_head ** 0.5)``), ``FeedForward``
(``dim * 4 * 2/3`` inner width, hidden and gate scales, the gate times ``sqrt(dim)``), ``nGPT.forward`` (tied
``token_embed.weight`` lookup and logits, ``logit_scale``, the shift and ``cross_entropy(ignore_index=-1)``), and
``train.py``'s model arguments (``tied_embedding=True``, ``add_value_residual=True``, ``attn_norm_qk=False``,
parametrized weights), ``TextSamplerDataset``, ``cycle``, Adam at LEARNING_RATE 1e-3, GRAD_ACCUM_EVERY 4 and the
loop body (micro-batches, ``loss / GRAD_ACCUM_EVERY`` backward through the scaler, step, update, zero_grad).

Deviations from the original:
- enwik8 is not here: the text is synthetic, made from ``seed`` (40 random lowercase words, each followed by one of
  three words fixed per word, joined by spaces), read as bytes (256 tokens) exactly as the enwik8 bytes are;
- sizes for 2 CPU cores: dim 512 -> 64, depth 8 -> 2, heads 8 -> 2, dim_head 64 -> 32, SEQ_LEN 512 -> 64
  (BATCH_SIZE 4 and GRAD_ACCUM_EVERY 4 kept);
- the GPU-only parts: USE_AMP is False (there is no CUDA here; the GradScaler and autocast are then the identity, as
  the script's own assert requires without CUDA); the ``sdpa_kernel`` backend context is left out (CPU math path);
- the code paths ``train.py`` does not take are left out: ``num_hyperspheres`` (1), ``norm_eps`` (0), the
  attention ``mask``, per-layer tuples of scale hyperparameters (every layer takes the defaults, as in train.py),
  ``manual_norm_weights`` / ``register_step_post_hook`` (USE_PARAMETRIZE is True); einops' ``rearrange`` /
  ``einsum`` / ``Rearrange`` are written as ``view`` / ``transpose`` / ``matmul``;
- ``train_step`` is one iteration of the loop (no tqdm, printing, generation); ``eval_fn`` is the validation loss on
  a fixed validation batch (lower is better). ``rotary_embed.freqs`` is the rotary library's ``nn.Parameter(requires_grad=False)``,
  declared frozen;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import Module, ModuleList
from torch.nn.utils.parametrize import register_parametrization
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


def exists(v):
    return v is not None


def default(v, d):
    return v if exists(v) else d


def l2norm(t, dim = -1, norm_eps = 0., eps = None, groups = 1):
    return F.normalize(t, dim = dim, p = 2)  # (port) the groups == 1, norm_eps == 0 path


# rotary_embedding_torch.RotaryEmbedding (defaults: freqs_for 'lang', theta 10000, interleaved pairs), written out
def rotate_half(x):
    x = x.unflatten(-1, (-1, 2))
    x1, x2 = x.unbind(dim = -1)
    x = torch.stack((-x2, x1), dim = -1)
    return x.flatten(-2)


class RotaryEmbedding(Module):
    def __init__(self, dim, theta = 10000):
        super().__init__()
        freqs = 1. / (theta ** (torch.arange(0, dim, 2)[:(dim // 2)].float() / dim))
        self.freqs = nn.Parameter(freqs, requires_grad = False)

    def rotate_queries_or_keys(self, t, seq_dim = -2):
        seq_len = t.shape[seq_dim]
        pos = torch.arange(seq_len, device = t.device, dtype = self.freqs.dtype)
        freqs = (pos[:, None] * self.freqs[None, :]).repeat_interleave(2, dim = -1)
        return t * freqs.cos() + rotate_half(t) * freqs.sin()


class Scale(Module):
    def __init__(self, dim, init = 1., scale = 1.):
        super().__init__()
        self.dim = dim
        self.scale = nn.Parameter(torch.ones(dim) * scale)
        self.forward_scale = init / scale

    def forward(self):
        return self.scale * self.forward_scale


class Residual(Module):
    def __init__(self, fn: Module, dim: int, init: float, scale: float | None = None, groups = 1, norm_eps = 0.):
        super().__init__()
        self.fn = fn
        self.branch_scale = Scale(dim, init, default(scale, dim ** -0.5))
        self.l2norm = L2Norm(dim = -1, norm_eps = norm_eps, groups = groups)

    def forward(self, x, **kwargs):
        residual = x
        out = self.fn(x, **kwargs)
        tuple_output = isinstance(out, tuple)
        if tuple_output:
            out, *rest = out
        out = self.l2norm(out)
        out = self.l2norm(residual.lerp(out, self.branch_scale()))
        if tuple_output:
            out = (out, *rest)
        return out


class L2Norm(Module):
    def __init__(self, dim = -1, norm_eps = 0., groups = 1):
        super().__init__()
        self.dim = dim
        self.norm_eps = norm_eps
        self.groups = groups

    def forward(self, t):
        return l2norm(t, dim = self.dim, norm_eps = self.norm_eps, groups = self.groups)


class NormLinear(Module):
    def __init__(self, dim, dim_out, norm_dim_in = True, parametrize = True, norm_eps = 0., groups = 1):
        super().__init__()
        self.dim = dim
        self.dim_out = dim_out
        self.linear = nn.Linear(dim, dim_out, bias = False)
        self.scale = groups ** -1
        self.parametrize = parametrize
        self.l2norm = L2Norm(dim = -1 if norm_dim_in else 0, norm_eps = norm_eps, groups = groups)
        if parametrize:
            register_parametrization(self.linear, 'weight', self.l2norm)
        self.norm_weights_()

    @torch.no_grad()
    def norm_weights_(self):
        if self.parametrize:
            normed = self.weight
            original = self.linear.parametrizations.weight.original
            original.copy_(normed)
        else:
            self.weight.copy_(self.l2norm(self.weight))

    @property
    def weight(self):
        return self.linear.weight

    def forward(self, x):
        return self.linear(x) * self.scale


class Attention(Module):
    def __init__(self, dim, *, dim_head = 64, heads = 8, norm_qk = True, causal = True, s_qk_init = 1.,
                 s_qk_scale = None, bug = None):
        super().__init__()
        self.dim, self.dim_head, self.heads, self.causal, self.bug = dim, dim_head, heads, causal, bug
        self.l2norm = l2norm
        self.attn_scale = dim_head ** 0.5
        dim_inner = dim_head * heads
        self.to_q = NormLinear(dim, dim_inner)
        self.to_k = NormLinear(dim, dim_inner)
        self.to_v = NormLinear(dim, dim_inner)
        self.norm_qk = norm_qk
        self.qk_scale = Scale(dim_inner, s_qk_init, default(s_qk_scale, dim ** -1))
        self.split_heads = lambda t: t.unflatten(-1, (heads, -1)).transpose(1, 2)  # 'b n (h d) -> b h n d'
        self.merge_heads = lambda t: t.transpose(1, 2).flatten(-2)  # 'b h n d -> b n (h d)'
        self.to_out = NormLinear(dim_inner, dim, norm_dim_in = False)

    def forward(self, x, mask = None, rotary_embed: Module | None = None, value_residual = None,
                return_values = False):
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        q, k, v = map(self.split_heads, (q, k, v))
        if exists(value_residual):
            v = 0.5 * (v + value_residual)
        if exists(rotary_embed):
            q = rotary_embed.rotate_queries_or_keys(q)
            k = rotary_embed.rotate_queries_or_keys(k)
        if self.norm_qk:
            q, k = map(self.l2norm, (q, k))
        q = q * self.qk_scale().view(self.heads, 1, -1)  # '(h d) -> h 1 d'
        out = F.scaled_dot_product_attention(q, k, v, attn_mask = mask,
                                             is_causal = self.causal and self.bug != "attention_not_causal",
                                             scale = self.attn_scale)
        out = self.merge_heads(out)
        out = self.to_out(out)
        if not return_values:
            return out
        return out, v


class FeedForward(Module):
    def __init__(self, dim, *, expand_factor = 4, s_hidden_init = 1., s_hidden_scale = 1., s_gate_init = 1.,
                 s_gate_scale = 1.):
        super().__init__()
        self.dim = dim
        self.expand_factor = expand_factor
        dim_inner = int(dim * expand_factor * 2 / 3)
        self.dim_inner = dim_inner
        self.to_hidden = NormLinear(dim, dim_inner)
        self.to_gate = NormLinear(dim, dim_inner)
        self.hidden_scale = Scale(dim_inner, s_hidden_init, s_hidden_scale)
        self.gate_scale = Scale(dim_inner, s_gate_init, s_gate_scale)
        self.to_out = NormLinear(dim_inner, dim, norm_dim_in = False)

    def forward(self, x):
        hidden, gate = self.to_hidden(x), self.to_gate(x)
        hidden = hidden * self.hidden_scale()
        gate = gate * self.gate_scale() * (self.dim ** 0.5)
        hidden = F.silu(gate) * hidden
        return self.to_out(hidden)


class nGPT(Module):
    def __init__(self, *, num_tokens, dim, depth, dim_head = 64, heads = 8, attn_norm_qk = True,
                 ff_expand_factor = 4., ce_ignore_index = -1, tied_embedding = False, causal = True,
                 add_value_residual = True, alpha_init: float | None = None, s_logit_init: float = 1.,
                 s_logit_scale: float | None = None, bug = None):
        super().__init__()
        self.num_tokens, self.dim, self.heads, self.dim_head, self.depth = num_tokens, dim, heads, dim_head, depth
        self.ff_expand_factor, self.causal, self.bug = ff_expand_factor, causal, bug
        alpha_init = default(alpha_init, 1. / depth)
        self.add_value_residual = add_value_residual # https://arxiv.org/abs/2410.17897v1
        self.token_embed = NormLinear(dim, num_tokens)
        self.rotary_embed = RotaryEmbedding(dim_head)
        self.layers = ModuleList([])
        for _ in range(depth):
            attn = Attention(dim, dim_head = dim_head, heads = heads, causal = causal, norm_qk = attn_norm_qk,
                             bug = bug)
            ff = FeedForward(dim, expand_factor = ff_expand_factor)
            attn_with_residual = Residual(attn, dim, alpha_init, dim ** -0.5)
            ff_with_residual = Residual(ff, dim, alpha_init, dim ** -0.5)
            self.layers.append(ModuleList([attn_with_residual, ff_with_residual]))
        self.to_logits = NormLinear(dim, num_tokens) if not tied_embedding else None
        self.logit_scale = Scale(num_tokens, s_logit_init, default(s_logit_scale, dim ** -0.5))
        self.ignore_index = ce_ignore_index

    def forward(self, ids, mask = None, return_loss = False):
        token_embed, rotary_embed = self.token_embed.weight, self.rotary_embed
        if return_loss:
            assert self.causal
            ids, labels = ids[:, :-1], ids[:, 1:]
            if self.bug == "labels_not_shifted":
                labels = ids
        tokens = token_embed[ids]
        first_values = None
        for attn, ff in self.layers:
            tokens, values = attn(tokens, mask = mask, rotary_embed = rotary_embed, return_values = True,
                                  value_residual = first_values if self.add_value_residual else None)
            first_values = default(first_values, values)
            tokens = ff(tokens)
        if exists(self.to_logits):
            logits = self.to_logits(tokens)
        else:
            # tied embeddings
            logits = tokens @ token_embed.t()  # einsum 'b n d, c d -> b n c'
        logits = logits * self.logit_scale()
        if not return_loss:
            return logits
        loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index = self.ignore_index)
        return loss


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

    def __len__(self):
        return self.data.size(0) // self.seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq


def _synthetic_text(seed, n_chars):
    """(port) Stands in for enwik8: words following a fixed per-word successor table, as bytes."""
    rng = np.random.default_rng(seed)
    words = [''.join(chr(97 + c) for c in rng.integers(0, 26, int(rng.integers(3, 8)))) for _ in range(40)]
    succ = rng.integers(0, len(words), (len(words), 3))
    out, w, n = [], 0, 0
    while n < n_chars:
        out.append(words[w])
        n += len(words[w]) + 1
        w = int(succ[w, rng.integers(0, 3)])
    return np.frombuffer(' '.join(out).encode()[:n_chars], dtype=np.uint8).copy()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    BATCH_SIZE, GRAD_ACCUM_EVERY, LEARNING_RATE, SEQ_LEN = 4, 4, 1e-3, 64  # (port) SEQ_LEN 512
    USE_AMP = False  # (port) True needs CUDA
    model = nGPT(num_tokens = 256, dim = 64, depth = 2, heads = 2, dim_head = 32, tied_embedding = True,
                 add_value_residual = True, attn_norm_qk = False, bug = bug)  # (port) dim 512, depth 8, 8 heads of 64
    scaler = torch.amp.GradScaler(enabled = USE_AMP)
    data = _synthetic_text(seed, 60000)
    np_train, np_valid = np.split(data, [54000])
    data_train, data_val = torch.from_numpy(np_train), torch.from_numpy(np_valid)
    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    val_loader = DataLoader(val_dataset, batch_size = BATCH_SIZE)
    optim = Adam(model.parameters(), lr = LEARNING_RATE)
    train_iter = cycle(train_loader)
    valid_data = next(iter(val_loader))

    def train_step():
        model.train()
        for _ in range(GRAD_ACCUM_EVERY):
            data = next(train_iter)
            with torch.autocast(device_type = 'cpu', dtype = torch.bfloat16, enabled = USE_AMP):
                loss = model(data, return_loss = True)
            if bug == "zero_grad_every_micro_step":
                optim.zero_grad()
            scaler.scale(loss / GRAD_ACCUM_EVERY).backward()
        scaler.step(optim)
        scaler.update()
        optim.zero_grad()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        with torch.no_grad():
            loss = model(valid_data, return_loss = True)
        model.train(was)
        return loss.item()

    first = next(iter(DataLoader(train_dataset, batch_size = BATCH_SIZE)))
    return Program(name="ngpt_enwik8", model=model, batch={"ids": first, "return_loss": True},
                   loss_fn=lambda loss, _targets: loss, optimizer=optim, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader, frozen=("rotary_embed.freqs",))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the labels taken from the unshifted ids, so every position is trained to output its own input token.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: is_causal left out of scaled_dot_product_attention, so each position attends to the very token it is
    # asked to predict.
    Bug("attention_not_causal", functools.partial(_build, bug="attention_not_causal"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic accumulation slip: optim.zero_grad() inside the micro-batch loop, so each update sees only the last
    # of the 4 micro-batches, at a quarter of its scale.
    Bug("zero_grad_every_micro_step", functools.partial(_build, bug="zero_grad_every_micro_step"), "step_probe", (),
        kind="step.gradient_discarded"),  # re-declared after public-27's measurement by its mechanism (README rule 6)
]
