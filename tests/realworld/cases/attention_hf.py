"""attention_check on the attention of Hugging Face models built from tiny configs (random weights, eval mode), each
checked by its path in the model and run on the model's own inputs: GPT-2 (``transformer.h.0.attn``), BERT with a
padding mask (``bert.encoder.layer.0.attention.self``), T5 (relative position bias, unscaled scores by design), Llama
(rotary ``position_embeddings``, grouped key/value heads) and ViT (``layers.0.attention``). The bug: a GPT-2 config
with ``scale_attn_weights=False``, so the scores are not divided by sqrt(head_dim)."""

from __future__ import annotations

import pytest
import torch
from _attention_models import AttentionProgram, check, tokens
from _cases import Case

transformers = pytest.importorskip("transformers")

INSTRUMENT, VOCAB = "attention_check", 64


def _gpt2(seed: int, impl: str = "eager", **config) -> AttentionProgram:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=32, vocab_size=VOCAB, bos_token_id=0,
                                  eos_token_id=0, attn_implementation=impl, **config)
    return AttentionProgram(transformers.GPT2LMHeadModel(cfg).eval(), {"input_ids": tokens(seed, vocab=VOCAB)},
                            "transformer.h.0.attn")


def _bert(seed: int, path: str = "bert.encoder.layer.0.attention.self") -> AttentionProgram:
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64,
                                  vocab_size=VOCAB, num_labels=2)
    ids = tokens(seed, vocab=VOCAB)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return AttentionProgram(transformers.BertForSequenceClassification(cfg).eval(),
                            {"input_ids": ids, "attention_mask": mask}, path)


def _t5(seed: int, path: str) -> AttentionProgram:
    torch.manual_seed(seed)
    cfg = transformers.T5Config(d_model=32, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2, d_ff=64,
                                vocab_size=VOCAB, decoder_start_token_id=0)
    ids = tokens(seed, vocab=VOCAB)
    return AttentionProgram(transformers.T5ForConditionalGeneration(cfg).eval(),
                            {"input_ids": ids, "decoder_input_ids": tokens(seed + 1, length=5, vocab=VOCAB)}, path)


def _llama(seed: int, impl: str) -> AttentionProgram:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                   num_hidden_layers=2, vocab_size=VOCAB, attn_implementation=impl)
    return AttentionProgram(transformers.LlamaForCausalLM(cfg).eval(), {"input_ids": tokens(seed, vocab=VOCAB)},
                            "model.layers.1.self_attn")


def _vit(seed: int) -> AttentionProgram:
    torch.manual_seed(seed)
    cfg = transformers.ViTConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64,
                                 image_size=16, patch_size=8)
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed))
    model = transformers.ViTModel(cfg).eval()
    names = dict(model.named_modules())  # transformers 5 names it layers.0.attention, 4.x encoder.layer.0.attention.attention
    path = next(p for p in ("layers.0.attention", "encoder.layer.0.attention.attention") if p in names)
    return AttentionProgram(model, pixels, path)


def _bf16(program: AttentionProgram) -> AttentionProgram:
    program.model.to(torch.bfloat16)
    return program


def _case(name: str, build, **bug) -> Case:
    return Case(name, INSTRUMENT, build, check, **bug)


CASES = [
    _case("gpt2_eager", _gpt2),
    _case("gpt2_sdpa", lambda s: _gpt2(s, "sdpa")),
    _case("gpt2_sdpa_bf16", lambda s: _bf16(_gpt2(s, "sdpa"))),
    _case("bert_padded", _bert),
    _case("bert_attention_block", lambda s: _bert(s, "bert.encoder.layer.0.attention")),
    _case("t5_encoder_relative_bias", lambda s: _t5(s, "encoder.block.0.layer.0.SelfAttention")),
    _case("t5_decoder_causal", lambda s: _t5(s, "decoder.block.1.layer.0.SelfAttention")),
    _case("llama_rotary_gqa", lambda s: _llama(s, "sdpa")),
    _case("llama_rotary_gqa_eager", lambda s: _llama(s, "eager")),
    _case("vit_patches", _vit),
    _case("gpt2_scale_attn_weights_off", lambda s: _gpt2(s, scale_attn_weights=False), bug=True,
          where=("transformer.h.0.attn",), kind="missing_scale"),
]
