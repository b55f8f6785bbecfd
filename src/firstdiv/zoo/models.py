"""The clean reference models, written the way a user writes them.

Each class is an ordinary ``nn.Module`` with readable attribute names; the fault catalog
(:mod:`firstdiv.zoo.faults`) subclasses them to re-create a bug in the place a user would write it.
Weights are set by the zoo from a local generator after construction (see ``_program.seeded``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MLPClassifier(nn.Module):
    """fc1 -> ReLU -> fc2 -> ReLU -> fc3: inputs ``(N, in_features)`` -> logits ``(N, classes)``."""

    def __init__(self, in_features: int = 16, hidden: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = self.act(self.fc2(h))
        return self.fc3(h)


class SmallCNN(nn.Module):
    """Two conv/BatchNorm/ReLU/max-pool blocks and a linear head: ``(N, 1, 12, 12)`` -> ``(N, classes)``."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(16 * 3 * 3, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.head(x.flatten(1))


def pretrained_backbone(in_features: int = 16, hidden: int = 32) -> nn.Sequential:
    """The feature extractor a fine-tuning script loads (here: freshly seeded by the zoo)."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())


class FineTuneClassifier(nn.Module):
    """A ``backbone`` producing features and a ``head`` Linear mapping them to class logits."""

    def __init__(self, backbone: nn.Module, head: nn.Linear) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t attends to positions <= t. ``(B, T, E)`` -> ``(B, T, E)``.

    Written out by hand, one step per method: project to q, k, v; split the embedding into ``heads``
    heads of ``head_dim``; scaled dot-product scores; causal mask; softmax over the keys; weighted sum
    of values; merge the heads back; output projection.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def split_heads(self, z: torch.Tensor) -> torch.Tensor:
        """``(B, T, E)`` -> ``(B, H, T, Dh)``."""
        b, t, _ = z.shape
        return z.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """``(B, H, T, Dh)`` -> ``(B, T, E)``: heads back next to each other in the embedding axis."""
        b, _, t, _ = y.shape
        return y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)

    def causal_mask(self, t: int, device: torch.device) -> torch.Tensor:
        """``(T, T)`` bool, True where query i must not see key j: the strict upper triangle (j > i)."""
        return torch.ones(t, t, dtype=torch.bool, device=device).triu(diagonal=1)

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``(B, H, T, Dh)`` queries and keys -> ``(B, H, T_query, T_key)`` weights; each row sums to 1."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.causal_mask(q.shape[-2], q.device), float("-inf"))
        return scores.softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (self.split_heads(z) for z in self.qkv(x).split(x.shape[-1], dim=-1))
        return self.proj(self.merge_heads(self.attention_weights(q, k) @ v))


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim: int, heads: int, attention: type[CausalSelfAttention] = CausalSelfAttention) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """Token ids ``(B, T)`` -> next-token logits ``(B, T, vocab)``; token and position embeddings, ``blocks``.

    ``attention`` is the attention class every block uses.
    """

    def __init__(self, vocab: int = 16, dim: int = 32, heads: int = 2, layers: int = 2, context: int = 16,
                 attention: type[CausalSelfAttention] = CausalSelfAttention) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = self.make_blocks(dim, heads, layers, attention)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def make_blocks(self, dim: int, heads: int, layers: int, attention: type[CausalSelfAttention]) -> nn.ModuleList:
        return nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class MLPRegressor(nn.Module):
    """fc1 -> ReLU -> fc2 -> ReLU -> fc3: inputs ``(N, in_features)`` -> predictions ``(N, 1)``."""

    def __init__(self, in_features: int = 2, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = self.act(self.fc2(h))
        return self.fc3(h)
