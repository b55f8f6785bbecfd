"""attention_check confirms a check's premise on the module's own behaviour before it FAILs (DESIGN "evidence before
FAIL"): correct modules that break an assumption by design get a WARN (or a PASS with the evidence), and the bugs the
checks are for still FAIL through the confirmation."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import Status
from firstdiv.instruments.attention_check import attention_check

pytestmark = pytest.mark.usefixtures("one_thread")


class Attention(nn.Module):
    """Self-attention with qkv/proj Linears. ``pattern``: "causal", "prefix" (the first 3 keys visible to every query, a
    prefix-LM), "shift2" (a causal mask off by two: tril(diagonal=2)) or "none"; ``slots``: softmax over the queries,
    then a weighted mean over the keys (slot attention); ``over_queries``: softmax over the queries, read as is (the
    bug); ``minfill``: masking with finfo.min (Hugging Face style) so a fully masked row stays finite; ``out_dim``: the
    output projection's width."""

    def __init__(self, dim=16, heads=2, pattern="causal", slots=False, over_queries=False, minfill=False, out_dim=None):
        super().__init__()
        self.heads, self.pattern, self.slots, self.over_queries, self.minfill = heads, pattern, slots, over_queries, minfill
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, out_dim or dim)

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        future = torch.ones(t, t, dtype=torch.bool).triu({"shift2": 3}.get(self.pattern, 1))
        if self.pattern == "prefix":
            future[:, :3] = False
        masked = torch.zeros(b, 1, t, t, dtype=torch.bool) | (future if self.pattern != "none" else False)
        if key_padding_mask is not None:
            masked = masked | key_padding_mask[:, None, None, :]
        fill = torch.finfo(scores.dtype).min if self.minfill else float("-inf")
        scores = scores.masked_fill(masked, fill)
        if self.slots:
            w = scores.softmax(dim=-2) + 1e-8
            w = w / w.sum(dim=-1, keepdim=True)
        else:
            w = scores.softmax(dim=-2 if self.over_queries else -1)
        merged = (w @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(merged)


def hidden(b=2, t=6, e=16, seed=0):
    return torch.randn(b, t, e, generator=torch.Generator().manual_seed(seed))


def finding(report, kind):
    return next(f for f in report.findings if f.check == kind)


def test_slot_attention_renormalised_over_the_keys_is_not_a_rows_failure():
    torch.manual_seed(0)
    report = attention_check(Attention(pattern="none", slots=True), hidden(), num_heads=2, causal=False)
    rows = finding(report, "attention.rows_not_normalized")
    assert rows.status is Status.PASS, rows.message
    assert "renormalises them over the keys itself" in rows.message
    assert rows.evidence["columns_sum_to_1"] is True and rows.evidence["renormalised_output_change"] <= 1e-4


def test_softmax_over_the_queries_read_as_is_still_fails_with_the_counterfactual():
    torch.manual_seed(0)
    report = attention_check(Attention(pattern="none", over_queries=True), hidden(), num_heads=2, causal=False)
    rows = finding(report, "attention.rows_not_normalized")
    assert rows.status is Status.FAIL and "the module reads them as they are" in rows.message
    assert rows.evidence["renormalised_output_change"] > rows.evidence["renormalised_threshold"]
    assert rows.evidence["diagnosis"] == "attention.softmax_axis"


def test_prefix_lm_with_causality_read_from_the_weights_warns_and_names_causal():
    torch.manual_seed(0)
    report = attention_check(Attention(pattern="prefix"), hidden(), num_heads=2)
    assert report.details["causal"] is True and "read as causal" in report.details["causal_from"]
    forbidden, causality = finding(report, "attention.forbidden_weight"), finding(report, "attention.causality")
    for f in (forbidden, causality):
        assert f.status is Status.WARN, f.message
        assert "not a FAIL: causality was read from the captured weights" in f.message and "causal=True" in f.message
    assert report.status is Status.WARN, str(report)  # the reference uses the module's own pattern of zero weights
    declared = attention_check(Attention(pattern="prefix"), hidden(), num_heads=2, causal=True)
    assert declared.first_divergence.kind == "attention.forbidden_weight"
    assert finding(declared, "attention.causality").status is Status.FAIL


def test_a_causal_mask_off_by_a_constant_is_confirmed_from_the_weights():
    torch.manual_seed(0)
    report = attention_check(Attention(pattern="shift2"), hidden(t=10), num_heads=2)
    assert "causal mask shifted by 2" in report.details["causal_from"]
    assert report.first_divergence.kind == "attention.forbidden_weight"
    assert finding(report, "attention.causality").status is Status.FAIL


def test_left_padded_query_under_a_causal_mask_is_a_warning_not_a_failure():
    torch.manual_seed(0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, :2] = True  # left padding: query 0 of batch 1 sees only padding keys under the causal mask
    report = attention_check(Attention(minfill=True), {"x": hidden(), "key_padding_mask": pad}, num_heads=2, causal=True)
    blocked = finding(report, "attention.blocked_query")
    assert blocked.status is Status.WARN and blocked.evidence["blocked_real_queries"] == 0
    assert "not a FAIL: those queries are padding themselves" in blocked.message
    assert report.status is not Status.FAIL, str(report)


def test_a_real_token_with_no_allowed_key_still_fails():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    no_self = torch.ones(6, 6, dtype=torch.bool).triu(0)  # the diagonal forbidden too: query 0 (a real token) sees nothing
    x = hidden()
    report = attention_check(mha, (x, x, x, pad, True, no_self))
    blocked = finding(report, "attention.blocked_query")
    assert blocked.status is Status.FAIL, blocked.message
    assert blocked.evidence["first"] == [0, 0] and "a real token as the inputs' padding says" in blocked.message


def test_an_output_projection_to_another_width_is_a_warning():
    torch.manual_seed(0)
    report = attention_check(Attention(out_dim=24), hidden(), num_heads=2, causal=True)
    merged = next(f for f in report.findings if f.check == "attention.shape" and f.evidence.get("stage") == "merged")
    assert merged.status is Status.WARN and "only the last axis differs" in merged.message
    assert report.status is not Status.FAIL, str(report)


class QKNorm(Attention):
    """Queries and keys normalised after the projection (QK-norm): a score function other than the reference's."""

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        q, k = F.normalize(q, dim=-1) * 4, F.normalize(k, dim=-1)
        scores = (q @ k.transpose(-2, -1)).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def test_another_score_function_is_a_warning_not_a_reference_failure():
    torch.manual_seed(0)
    report = attention_check(QKNorm(), hidden(), num_heads=2, causal=True)
    ref = finding(report, "attention.reference_mismatch")
    assert ref.status is Status.WARN and "not a FAIL: no other score scale explains it" in ref.message, ref.message
    assert report.status is Status.WARN, str(report)


def test_a_scale_slip_still_fails_the_reference():
    class Unscaled(Attention):
        def forward(self, x, key_padding_mask=None):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
            scores = (q @ k.transpose(-2, -1)).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    torch.manual_seed(0)
    report = attention_check(Unscaled(), hidden(), num_heads=2, causal=True)
    assert report.first_divergence.kind == "attention.reference_mismatch"
    assert report.first_divergence.observed.startswith("scores are q·k with scale 1")


def test_an_unmerged_output_is_a_shape_warning():
    class Unmerged(Attention):
        def forward(self, x, key_padding_mask=None):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
            return (q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)).softmax(-1) @ v  # [B, Nh, T, Dh], no merge

    torch.manual_seed(0)
    report = attention_check(Unmerged(pattern="none"), hidden(), num_heads=2, causal=False)
    merged = next(f for f in report.findings if f.check == "attention.shape" and f.evidence.get("stage") == "merged")
    assert merged.status is Status.WARN and "an output of another shape" in merged.message, merged.message


class Scaled(Attention):
    """Scores scaled by ``factor`` (muP uses 1/Dh by design)."""

    def __init__(self, factor, **kw):
        super().__init__(**kw)
        self.factor = factor

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = (q @ k.transpose(-2, -1) * self.factor).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1),
                                                                     float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def test_a_declared_scale_is_the_reference():
    torch.manual_seed(0)
    mup = Scaled(1 / 8)  # Dh = 8: 1/Dh by design
    assert attention_check(mup, hidden(), num_heads=2, causal=True).first_divergence.observed.startswith(
        "scores are q·k scaled by 1/Dh=0.125, not 1/sqrt(Dh)=0.3536")
    declared = attention_check(mup, hidden(), num_heads=2, causal=True, scale=1 / 8)
    assert declared.status is Status.PASS, str(declared)
    assert finding(declared, "attention.reference_mismatch").evidence["scale_declared"] is True
    slipped = attention_check(Scaled(1.0), hidden(), num_heads=2, causal=True, scale=1 / 8)
    assert slipped.first_divergence.observed.startswith("scores are q·k with scale 1 (scale=0.125 missing)")
    with pytest.raises(ValueError, match="Expected `scale` to be None or a finite number > 0"):
        attention_check(mup, hidden(), num_heads=2, scale=0.0)
