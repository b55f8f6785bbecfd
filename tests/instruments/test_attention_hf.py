"""attention_check on Hugging Face attention modules nobody here wrote: GPT-2, BERT and Llama attention built from tiny
configs with random weights (no download). Clean modules pass every level they can check; a missing scale is LEVEL_4."""

import json

import pytest
import torch

from firstdiv import Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.attention_check import attention_check

pytest.importorskip("transformers", reason="transformers is a test dependency: pip install -e '.[dev]'")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting

from transformers import BertConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, T5Config, T5EncoderModel
from transformers.models.bert.modeling_bert import BertAttention, BertSelfAttention
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

E, HEADS, B, T = 32, 4, 2, 6
LEVELS = ("LEVEL_1", "LEVEL_2", "LEVEL_3", "LEVEL_4")


def hidden(seed=0):
    return torch.randn(B, T, E, generator=torch.Generator().manual_seed(seed))


def padding():
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, 4:] = True
    return pad


def checked(attn, inputs, **options):
    before = Snapshot.take(attn)
    report = attention_check(attn, inputs, **options)
    assert before.diff(Snapshot.take(attn)) == []
    json.dumps(report.to_dict())
    return report


def assert_clean(report, skipped=()):
    """PASS; no finding FAILs; every PASS carries evidence; exactly the expected checks are SKIPPED (with a reason)."""
    assert report.status is Status.PASS and report.first_divergence is None, str(report)
    for f in report.findings:
        assert f.status in (Status.PASS, Status.SKIPPED) and (f.evidence if f.status is Status.PASS else f.message)
    got = {(f.where, f.evidence.get("probe", f.check)) for f in report.findings if f.status is Status.SKIPPED}
    assert got == set(skipped), got


NOT_CAUSAL = {("LEVEL_2", "time_isolation"), ("LEVEL_4", "future_token")}


def gpt2(impl):
    torch.manual_seed(0)
    return GPT2Attention(GPT2Config(n_embd=E, n_head=HEADS, n_layer=1, attn_implementation=impl), layer_idx=0)


def bert_config(impl):
    return BertConfig(hidden_size=E, num_attention_heads=HEADS, num_hidden_layers=1, intermediate_size=2 * E,
                      attn_implementation=impl)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_gpt2_attention_passes_every_level(impl):
    report = checked(gpt2(impl), hidden())
    assert_clean(report)
    d = report.details
    assert d["causal"] is True and d["causal_from"] == "attribute is_causal=True"
    assert d["masks_built"] and "attention_mask [B, 1, Tq, Tk]" in d["masks_built"][0]
    assert d["projections"] == {"q": "c_attn", "k": "c_attn", "v": "c_attn", "fused": True, "merged": "input of c_proj"}
    assert d["axes"]["Nh"] == HEADS and d["heads_from"] == "num_heads"
    op = "F.softmax" if impl == "eager" else "F.scaled_dot_product_attention"
    assert report.findings[0].evidence["op"] == op


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpt2_sdpa_half_precision_passes(dtype):
    report = checked(gpt2("sdpa").to(dtype), hidden().to(dtype))
    assert_clean(report)
    pinned = next(f for f in report.findings if f.evidence.get("probe") == "time_isolation")
    assert pinned.evidence["pinning"].startswith("weights pinned")


def test_gpt2_with_the_callers_mask_and_padding():
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    forbidden = future[None, None] | padding()[:, None, None, :]
    mask = torch.zeros(B, 1, T, T).masked_fill(forbidden, torch.finfo(torch.float32).min)
    report = checked(gpt2("eager"), {"hidden_states": hidden(), "attention_mask": mask})
    assert_clean(report)
    assert report.details["masks_built"] == []
    leak = next(f for f in report.findings if f.check == "attention.forbidden_weight")
    assert leak.evidence["forbidden_weights_checked"] == HEADS * int(forbidden.sum())


def test_gpt2_missing_scale_is_level_4():
    module = gpt2("eager")
    module.scaling = 1.0  # the score scale a user forgot
    report = checked(module, hidden())
    assert (report.first_divergence.where, report.first_divergence.kind) == ("LEVEL_4", "attention.reference_mismatch")
    assert [report.details["levels"][lv] for lv in LEVELS] == ["PASS", "PASS", "PASS", "FAIL"]
    assert "1/sqrt(Dh)" in report.first_divergence.hint
    assert "scores are q·k with scale 1 (1/sqrt(Dh)=0.3536 missing)" in report.first_divergence.observed


def test_gpt2_given_a_mask_that_lets_the_future_through():
    report = checked(gpt2("eager"), {"hidden_states": hidden(), "attention_mask": torch.zeros(B, 1, T, T)}, causal=True)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("LEVEL_3", "attention.forbidden_weight")


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_self_attention_passes(impl):
    torch.manual_seed(0)
    report = checked(BertSelfAttention(bert_config(impl)), hidden())
    assert_clean(report, NOT_CAUSAL | {("LEVEL_3", "attention.forbidden_weight")})
    assert report.details["causal"] is False and report.details["causal_from"] == "attribute is_causal=False"
    assert report.details["projections"]["merged"] == "module output (no projection after the attention)"


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_attention_with_padding_passes(impl):
    torch.manual_seed(0)
    report = checked(BertAttention(bert_config(impl)), hidden(), key_padding_mask=padding())
    assert_clean(report, NOT_CAUSAL)
    d = report.details
    assert d["projections"]["q"] == "self.query" and d["projections"]["merged"] == "input of output.dense"
    assert d["heads_from"] == "self.num_attention_heads" and d["padding_from"] == "argument key_padding_mask="
    leak = next(f for f in report.findings if f.check == "attention.forbidden_weight")
    assert leak.status is Status.PASS and leak.evidence["forbidden_weights_checked"] == HEADS * T * 2


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_llama_attention_with_rotary_and_grouped_kv_passes(impl):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=E, num_attention_heads=HEADS, num_key_value_heads=2, intermediate_size=2 * E,
                         num_hidden_layers=1, attn_implementation=impl)
    module = LlamaAttention(config, layer_idx=0)
    x = hidden()
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(T)[None].expand(B, T))
    report = checked(module, {"hidden_states": x, "position_embeddings": (cos, sin)})
    assert_clean(report)
    assert report.details["heads_from"] == "config.num_attention_heads"
    ref = next(f for f in report.findings if f.check == "attention.reference_mismatch")
    assert "rotary position embeddings applied" in ref.evidence["from"]
    unrotated = checked(module, {"hidden_states": x, "position_embeddings": (torch.ones_like(cos), torch.zeros_like(sin))})
    assert unrotated.status is Status.PASS  # cos=1, sin=0: identity rotation, same verdict
    missing = checked(module, x)  # LlamaAttention needs (cos, sin) from its model
    assert missing.status is Status.SKIPPED and "TypeError" in missing.reason and "LlamaRotaryEmbedding" in missing.reason


def tiny_gpt2(**config):
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=E, n_head=HEADS, n_layer=2, n_positions=16, vocab_size=40, bos_token_id=0, eos_token_id=0,
                     **config)
    return GPT2LMHeadModel(cfg).eval()


def ids():
    return torch.randint(0, 40, (B, T), generator=torch.Generator().manual_seed(0))


def test_gpt2_model_checked_at_its_path_on_the_models_own_inputs():
    report = checked(tiny_gpt2(), {"input_ids": ids()}, module="transformer.h.1.attn")
    assert report.status is Status.PASS and {f.where for f in report.findings} == {"transformer.h.1.attn"}, str(report)
    assert any("Cache" in n for n in report.details["notes"])  # the model's cache is not passed on: no growth per pass
    bug = checked(tiny_gpt2(scale_attn_weights=False), {"input_ids": ids()}, module="transformer.h.0.attn")
    div = bug.first_divergence
    assert (div.where, div.kind) == ("transformer.h.0.attn", "attention.missing_scale"), str(bug)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_model_is_checked_not_crashed(dtype):
    report = checked(tiny_gpt2(attn_implementation="sdpa").to(dtype), {"input_ids": ids()}, module="transformer.h.0.attn")
    assert report.status is Status.PASS, str(report)


def test_t5_reference_is_skipped_by_design_not_failed():
    torch.manual_seed(0)
    model = T5EncoderModel(T5Config(d_model=E, d_kv=8, num_heads=HEADS, num_layers=1, d_ff=2 * E, vocab_size=40)).eval()
    report = checked(model, {"input_ids": ids()}, module="encoder.block.0.layer.0.SelfAttention")
    assert report.status is Status.PASS, str(report)
    ref = next(f for f in report.findings if f.check == "attention.reference_mismatch")
    assert ref.status is Status.SKIPPED and "by design (T5), does not scale them by 1/sqrt(Dh)" in ref.message


def test_llama_attention_with_cache_position_and_a_4d_additive_mask():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=E, num_attention_heads=HEADS, num_key_value_heads=2, intermediate_size=2 * E,
                         num_hidden_layers=1, attn_implementation="eager")
    module = LlamaAttention(config, layer_idx=0)
    x = hidden()
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(T)[None].expand(B, T))
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = torch.zeros(B, 1, T, T).masked_fill(future | padding()[:, None, None, :], torch.finfo(torch.float32).min)
    report = checked(module, {"hidden_states": x, "position_embeddings": (cos, sin), "attention_mask": mask,
                              "cache_position": torch.arange(T)})
    assert_clean(report)
    assert report.details["causal"] is True and report.details["masks_built"] == []


def test_gpt2_left_padding_under_the_causal_mask_is_a_warning_not_a_blocked_query_failure():
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, :2] = True  # left padding: queries 0 and 1 of batch 1 see only padding keys, their outputs unused
    forbidden = torch.ones(T, T, dtype=torch.bool).triu(1)[None, None] | pad[:, None, None, :]
    mask = torch.zeros(B, 1, T, T).masked_fill(forbidden, torch.finfo(torch.float32).min)
    report = checked(gpt2("eager"), {"hidden_states": hidden(), "attention_mask": mask})
    blocked = next(f for f in report.findings if f.check == "attention.blocked_query")
    assert blocked.status is Status.WARN and blocked.evidence["blocked_queries"] == 2, blocked.message
    assert "not a FAIL: those queries are padding themselves" in blocked.message  # keys no query may see: padding
    assert report.status is Status.WARN, str(report)
