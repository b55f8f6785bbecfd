"""Hand-written attention as user code has it: a nanoGPT-style decoder (``CausalSelfAttention`` with a ``tril``
buffer), a padded encoder on ``nn.MultiheadAttention`` and a decoder block on ``F.scaled_dot_product_attention`` with
``is_causal=True``. ``bug`` plants one slip a user makes: ``missing_scale`` (no 1/sqrt(head_dim)), ``scale_by_dim``
(1/head_dim), ``mask_sees_future`` (``tril(diagonal=1)``), ``split_without_transpose`` (``reshape(B, nh, T, hd)`` in place
of ``view(B, T, nh, hd).transpose(1, 2)``), ``eval_dropout`` (``dropout_p=self.dropout`` whatever the mode)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


@dataclasses.dataclass
class AttentionProgram:
    """What the user hands over: the model, its inputs, and the path of the attention module to check."""

    model: nn.Module
    inputs: Any
    path: str


def check(program: AttentionProgram) -> firstdiv.Report:
    return firstdiv.attention_check(program.model, program.inputs, module=program.path)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, bug: str = "") -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.n_head, self.n_embd, self.bug = n_head, n_embd, bug
        diagonal = 1 if bug == "mask_sees_future" else 0
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size), diagonal=diagonal)
                             .view(1, 1, block_size, block_size))

    def heads(self, z: torch.Tensor, B: int, T: int, C: int) -> torch.Tensor:
        if self.bug == "split_without_transpose":
            return z.reshape(B, self.n_head, T, C // self.n_head)
        return z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = self.heads(q, B, T, C), self.heads(k, B, T, C), self.heads(v, B, T, C)
        hd = k.size(-1)
        scale = {"missing_scale": 1.0, "scale_by_dim": 1.0 / hd}.get(self.bug, 1.0 / math.sqrt(hd))
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class SdpaSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, bug: str = "") -> None:
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head, self.dropout, self.bug = n_head, 0.1, bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.bug == "eval_dropout" or self.training else 0.0
        scale = 1.0 if self.bug == "missing_scale" else None
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=scale)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, attn: nn.Module, n_embd: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(n_embd), attn, nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 50, n_embd: int = 32, n_head: int = 4, n_layer: int = 2, block_size: int = 16,
                 sdpa: bool = False, bug: str = "", bug_layer: int = 0) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)

        def attn(i: int) -> nn.Module:
            b = bug if i == bug_layer else ""
            return SdpaSelfAttention(n_embd, n_head, b) if sdpa else CausalSelfAttention(n_embd, n_head, block_size, b)

        self.blocks = nn.ModuleList(Block(attn(i), n_embd) for i in range(n_layer))
        self.ln_f, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class PaddedEncoder(nn.Module):
    """A text classifier: embeddings, one nn.MultiheadAttention layer fed the padding mask, mean over real tokens."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        x = self.embed(tokens)
        h, _ = self.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.norm(x + h)
        keep = (~pad).unsqueeze(-1).float()
        return self.out((x * keep).sum(1) / keep.sum(1))


class SeqFirstEncoder(nn.Module):
    """nn.TransformerEncoder in its default (T, B, E) layout with src_key_padding_mask: in eval mode torch runs its
    fused fast path, which never calls ``layers.N.self_attn`` unless something observes it."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(dim, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(tokens).transpose(0, 1), src_key_padding_mask=tokens == 0)
        return self.out(h[0])


def tokens(seed: int, batch: int = 2, length: int = 8, vocab: int = 50, pad_tail: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, length), generator=g)
    if pad_tail:
        ids[-1, length - pad_tail:] = 0
    return ids
