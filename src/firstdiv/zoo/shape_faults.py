"""The faults of shape and meaning: tensors of the right size holding the wrong things (attention
written slightly wrong, batch and time swapped), shapes that stop fitting (a widened conv before an
unchanged head), and features that carry nothing (dead ReLUs in a fine-tuned backbone).

Like :mod:`firstdiv.zoo.faults`, each is the user's code with the bug in the line a user would get
wrong; the attention faults subclass the hand-written
:class:`~firstdiv.zoo.models.CausalSelfAttention` and replace one of its steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from . import models, references
from ._program import Recipe

# ---- attention written slightly wrong ------------------------------------------------------------


class ViewMergeAttention(models.CausalSelfAttention):
    """fault ``merge_heads_view``: heads merged by reshaping ``(B, H, T, Dh)`` straight to ``(B, T, E)``."""

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = y.shape
        return y.reshape(b, t, self.heads * self.head_dim)  # bug: no transpose(1, 2) first: heads and time interleave


class UnscaledAttention(models.CausalSelfAttention):
    """fault ``missing_scale``: raw dot products go into the softmax."""

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-2, -1)  # bug: no / math.sqrt(self.head_dim), the softmax saturates
        scores = scores.masked_fill(self.causal_mask(q.shape[-2], q.device), float("-inf"))
        return scores.softmax(dim=-1)


class LeakyMaskAttention(models.CausalSelfAttention):
    """fault ``leaky_causal_mask``: the mask starts one diagonal too high."""

    def causal_mask(self, t: int, device: torch.device) -> torch.Tensor:
        return torch.ones(t, t, dtype=torch.bool, device=device).triu(diagonal=2)  # bug: query i also sees key i + 1


class QueryAxisSoftmaxAttention(models.CausalSelfAttention):
    """fault ``softmax_wrong_axis``: softmax over the queries instead of the keys."""

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.causal_mask(q.shape[-2], q.device), float("-inf"))
        return scores.softmax(dim=-2)  # bug: columns sum to 1, rows (one query's weights over keys) do not


def _lm(attention: type[models.CausalSelfAttention]) -> Callable[[], models.TinyCausalLM]:
    return lambda: models.TinyCausalLM(references.VOCAB, context=references.CONTEXT, attention=attention)


class SequenceFirstLM(models.TinyCausalLM):
    """fault ``batch_time_swap``: the hidden states go through the blocks as ``(T, B, D)``."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        x = x.transpose(0, 1)  # bug: "(T, B, D) as nn.MultiheadAttention wants", but these blocks are batch-first
        for block in self.blocks:
            x = block(x)  # attention now runs over the batch axis, causally, across different sequences
        return self.lm_head(self.ln_f(x.transpose(0, 1)))


# ---- a shape that stops fitting, features that carry nothing ------------------------------------


class WidenedCNN(models.SmallCNN):
    """fault ``wrong_flatten``: conv2 widened to 32 channels; the head still expects 16 * 3 * 3 inputs."""

    def __init__(self, classes: int = references.CLASSES) -> None:
        super().__init__(classes)
        self.conv2 = nn.Conv2d(8, 32, kernel_size=3, padding=1)  # bug: widened (was 16) ...
        self.bn2 = nn.BatchNorm2d(32)  # ... with its BatchNorm, but self.head = nn.Linear(16 * 3 * 3, ...) was not updated


#: the bias the user's init gives the backbone's last layer (its pre-activations have std ~0.3)
DEAD_BIAS = -1.0


def sparse_feature_init(model: models.FineTuneClassifier, gen: torch.Generator) -> None:
    """fault ``dead_features``: init code meant to make the backbone's features "sparse", then the head swap."""
    nn.init.constant_(model.backbone[2].bias, DEAD_BIAS)  # bug: far below every pre-activation: the last ReLU outputs ~all zeros
    references.replace_head(model, gen)


INJECTIONS: dict[str, Callable[[Recipe], Recipe]] = {
    "merge_heads_view": lambda r: r.replace(model=_lm(ViewMergeAttention)),
    "missing_scale": lambda r: r.replace(model=_lm(UnscaledAttention)),
    "leaky_causal_mask": lambda r: r.replace(model=_lm(LeakyMaskAttention)),
    "softmax_wrong_axis": lambda r: r.replace(model=_lm(QueryAxisSoftmaxAttention)),
    "batch_time_swap": lambda r: r.replace(model=lambda: SequenceFirstLM(references.VOCAB, context=references.CONTEXT)),
    "wrong_flatten": lambda r: r.replace(model=WidenedCNN),
    "dead_features": lambda r: r.replace(prepare=sparse_feature_init),
}
