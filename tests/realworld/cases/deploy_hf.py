"""Deployment corpus, Hugging Face models: tiny GPT-2, BERT, T5, Llama and ViT (random weights) through
compare_outputs with the deployment variants a user builds before shipping (reloaded, int8, exported), GPT-2
through compile_ledger with its default key/value cache, and a user's own attention block whose eval path
still drops out."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from _cases import Case
from _deploy_common import bert, gpt2, llama, program, t5, tokens, vit
from torch import nn

from firstdiv import compare_outputs, compile_ledger
from firstdiv.instruments.compare_outputs.variants import variants


def _compare(p, kinds, **kw):
    built, tols = variants(p.model, kinds, example_inputs=p.inputs if "export" in kinds else None, **kw)
    return compare_outputs(built, p.inputs, tolerances=tols)


def _gpt2(seed):
    return program(gpt2(seed), {"input_ids": tokens(seed)})


def _bert(seed):
    ids = tokens(seed)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # the second sentence is padded
    return program(bert(seed), {"input_ids": ids, "attention_mask": mask})


def _t5(seed):
    return program(t5(seed), {"input_ids": tokens(seed), "decoder_input_ids": tokens(seed + 7, length=5)})


def _llama(seed):
    return program(llama(seed), {"input_ids": tokens(seed)})


def _vit(seed):
    g = torch.Generator().manual_seed(seed)
    return program(vit(seed), {"pixel_values": torch.randn(2, 3, 8, 8, generator=g)})


# --- a user's attention block -------------------------------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float, eval_dropout_bug: bool) -> None:
        super().__init__()
        self.heads, self.dropout, self.bug = heads, dropout, eval_dropout_bug
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if (self.training or self.bug) else 0.0  # the bug: dropout_p hard-coded outside training
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout, bug):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, dropout, bug)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, bug: bool, vocab=64, dim=32, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(16, dim) / math.sqrt(dim))
        self.blocks = nn.ModuleList(Block(dim, heads, dropout, bug) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _tiny_lm(bug):
    def build(seed):
        torch.manual_seed(seed)
        return program(TinyLM(bug).eval(), tokens(seed, length=8))
    return build


CASES = [
    Case("gpt2_reloaded_int8", "compare_outputs", _gpt2, lambda p: _compare(p, ("eager", "reloaded", "int8"))),
    Case("bert_padded_reloaded_int8_export", "compare_outputs", _bert,
         lambda p: _compare(p, ("eager", "reloaded", "int8", "export"))),
    Case("t5_decoder_inputs", "compare_outputs", _t5, lambda p: _compare(p, ("eager", "reloaded", "int8"))),
    Case("llama_reloaded_int8", "compare_outputs", _llama, lambda p: _compare(p, ("eager", "reloaded", "int8"))),
    Case("vit_reloaded_int8", "compare_outputs", _vit, lambda p: _compare(p, ("eager", "reloaded", "int8"))),
    Case("tiny_lm_eval_deterministic", "compare_outputs", _tiny_lm(False),
         lambda p: _compare(p, ("eager", "reloaded"))),
    Case("gpt2_compile_default_cache", "compile_ledger", _gpt2,
         lambda p: compile_ledger(p.model, [p.inputs], backend="eager", repeats=2)),
    Case("tiny_lm_attention_dropout_in_eval", "compare_outputs", _tiny_lm(True),
         lambda p: _compare(p, ("eager", "reloaded")), bug=True, where=("eager", "blocks.0.attn"),
         kind="outputs.nondeterministic_eval"),
]
