"""attention_check on hand-written attention inside the user's model, checked by its path: a nanoGPT-style decoder
(``blocks.N.attn`` with a ``tril`` buffer mask), a padded text encoder on ``nn.MultiheadAttention`` with
``key_padding_mask`` and a decoder on ``F.scaled_dot_product_attention(is_causal=True)``; the bugs are the slips those
modules get: a missing or wrong score scale, a mask that sees the future, heads split without the transpose, dropout
left on in eval mode."""

from __future__ import annotations

import torch
from _attention_models import AttentionProgram, PaddedEncoder, SeqFirstEncoder, TinyGPT, check, tokens
from _cases import Case

INSTRUMENT = "attention_check"


def _gpt(seed: int, path: str = "blocks.0.attn", **options) -> AttentionProgram:
    torch.manual_seed(seed)
    model = TinyGPT(**options).eval()
    return AttentionProgram(model, tokens(seed), path)


def _encoder(seed: int) -> AttentionProgram:
    torch.manual_seed(seed)
    return AttentionProgram(PaddedEncoder().eval(), tokens(seed, pad_tail=3), "self_attn")


def _seq_first(seed: int) -> AttentionProgram:
    torch.manual_seed(seed)
    return AttentionProgram(SeqFirstEncoder().eval(), tokens(seed, pad_tail=2), "encoder.layers.1.self_attn")


def _case(name: str, build, **bug) -> Case:
    return Case(name, INSTRUMENT, build, check, **bug)


CASES = [
    _case("nanogpt_tril_buffer", lambda s: _gpt(s, "blocks.1.attn")),
    _case("mha_key_padding_mask", _encoder),
    _case("transformer_encoder_seq_first_padding", _seq_first),
    _case("sdpa_is_causal", lambda s: _gpt(s, "blocks.0.attn", sdpa=True)),
    _case("nanogpt_missing_scale", lambda s: _gpt(s, bug="missing_scale"), bug=True, where=("blocks.0.attn",),
          kind="missing_scale"),
    _case("nanogpt_scale_by_head_dim", lambda s: _gpt(s, "blocks.1.attn", bug="scale_by_dim", bug_layer=1), bug=True,
          where=("blocks.1.attn",), kind="wrong_scale"),
    _case("nanogpt_tril_diagonal_1", lambda s: _gpt(s, bug="mask_sees_future"), bug=True, where=("blocks.0.attn",),
          kind="future_visible"),
    _case("nanogpt_split_without_transpose", lambda s: _gpt(s, bug="split_without_transpose"), bug=True,
          where=("blocks.0.attn",), kind="head_split_merge"),
    _case("sdpa_dropout_in_eval", lambda s: _gpt(s, sdpa=True, bug="eval_dropout"), bug=True, where=("blocks.0.attn",),
          kind="eval_dropout"),
    _case("sdpa_missing_scale", lambda s: _gpt(s, sdpa=True, bug="missing_scale"), bug=True, where=("blocks.0.attn",),
          kind="missing_scale"),
]
