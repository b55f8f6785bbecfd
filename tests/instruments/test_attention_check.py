"""attention_check: four levels (shape, axis semantics, numerical invariants, behaviour), the earliest failing one
reported; hand-written attention with each fault, nn.MultiheadAttention, nn.TransformerEncoderLayer, functions."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.attention_check import attention_check

LEVELS = ("LEVEL_1", "LEVEL_2", "LEVEL_3", "LEVEL_4")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny modules: one thread, no spin-waiting


class HandAttention(nn.Module):
    """Multi-head self-attention written the way the zoo's CausalSelfAttention is (qkv + proj Linears), with one fault
    at a time: `view_merge` (heads merged by .view without transpose), `leaky_causal_mask` (the next position is
    visible), `softmax_wrong_axis` (softmax over queries), `missing_scale` (no 1/sqrt(Dh)), `batch_heads` (heads split
    through the batch axis in the wrong order, merged back the usual way), `ignore_padding` (key_padding_mask accepted, never applied)."""

    def __init__(self, dim=16, heads=2, causal=True, fault=None):
        super().__init__()
        self.heads, self.is_causal_flag, self.fault = heads, causal, fault
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def split(self, z, b, t, d):
        if self.fault == "batch_heads":  # [B, T, E] -> [Nh, B, T, Dh] -> read as [B, Nh, T, Dh]
            return z.view(b, t, self.heads, d // self.heads).permute(2, 0, 1, 3).reshape(b, self.heads, t, d // self.heads)
        return z.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = (self.split(z, b, t, d) for z in self.qkv(x).split(d, dim=-1))
        scale = 1.0 if self.fault == "missing_scale" else math.sqrt(d // self.heads)
        scores = q @ k.transpose(-2, -1) / scale  # (B, heads, T, T)
        if self.is_causal_flag:
            future = torch.ones(t, t, dtype=torch.bool).triu(2 if self.fault == "leaky_causal_mask" else 1)
            scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None and self.fault != "ignore_padding":
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = scores.softmax(dim=-2 if self.fault == "softmax_wrong_axis" else -1)
        out = weights @ v
        merged = out.view(b, t, d) if self.fault == "view_merge" else out.transpose(1, 2).reshape(b, t, d)
        return self.proj(merged)


def hidden(b=2, t=6, e=16, seed=0):
    return torch.randn(b, t, e, generator=torch.Generator().manual_seed(seed))


def checked(attn, inputs, **options):
    """attention_check with the leave-no-trace assertion on the module."""
    watched = [attn] if isinstance(attn, nn.Module) else []
    before = Snapshot.take(*watched)
    report = attention_check(attn, inputs, **options)
    assert before.diff(Snapshot.take(*watched)) == []
    assert isinstance(report, Report)
    json.dumps(report.to_dict())  # plain values only
    return report


def levels(report):
    return report.details["levels"]


def by_level(report, level):
    return [f for f in report.findings if f.where == level]


def assert_clean(report, expect_skipped=()):
    assert report.status is Status.PASS, str(report)
    assert report.first_divergence is None
    for f in report.findings:
        assert f.status in (Status.PASS, Status.SKIPPED)
        if f.status is Status.PASS:
            assert f.evidence, f"PASS without evidence: {f}"
        else:
            assert f.message, "SKIPPED without a reason"
    skipped = {(f.where, f.evidence.get("probe", f.check)) for f in report.findings if f.status is Status.SKIPPED}
    assert skipped == set(expect_skipped), skipped


def test_clean_hand_written_causal_attention_passes_every_level():
    torch.manual_seed(0)
    report = checked(HandAttention(), hidden(), num_heads=2, causal=True)
    assert_clean(report)
    assert levels(report) == dict.fromkeys(LEVELS, "PASS")
    scores = by_level(report, "LEVEL_1")[0]
    assert scores.evidence["observed"] == [2, 2, 6, 6] and scores.evidence["op"] == "Tensor.softmax"
    assert report.details["projections"]["q"] == "qkv" and report.details["projections"]["merged"] == "input of proj"
    assert report.side_effects.startswith("none")


def test_causal_inferred_from_the_weights_and_heads_from_the_module():
    torch.manual_seed(0)
    report = checked(HandAttention(), hidden())
    assert report.details["causal"] is True and report.details["causal_from"].startswith("captured weights: 60 of 60")
    assert report.details["axes"]["Nh"] == 2 and report.details["heads_from"] == "heads"
    assert_clean(report)


@pytest.mark.parametrize("fault, level, kind", [
    ("view_merge", "LEVEL_2", "attention.axis_semantics"),
    ("batch_heads", "LEVEL_2", "attention.axis_semantics"),
    ("leaky_causal_mask", "LEVEL_3", "attention.forbidden_weight"),
    ("softmax_wrong_axis", "LEVEL_3", "attention.rows_not_normalized"),
    ("missing_scale", "LEVEL_4", "attention.reference_mismatch"),
])
def test_each_fault_is_reported_at_its_level(fault, level, kind):
    torch.manual_seed(0)
    report = checked(HandAttention(fault=fault), hidden(), num_heads=2, causal=True)
    assert report.status is Status.FAIL
    assert (report.first_divergence.where, report.first_divergence.kind) == (level, kind), str(report)
    assert report.details["first_failing_level"] == level
    assert all(levels(report)[lv] == "PASS" for lv in LEVELS[:LEVELS.index(level)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_clean_passes_and_faults_still_localize(dtype):
    torch.manual_seed(0)
    x = hidden().to(dtype)
    assert_clean(checked(HandAttention().to(dtype), x, num_heads=2, causal=True))
    for fault, level in (("view_merge", "LEVEL_2"), ("missing_scale", "LEVEL_4")):
        torch.manual_seed(0)
        report = checked(HandAttention(fault=fault).to(dtype), x, num_heads=2, causal=True)
        assert report.first_divergence.where == level, str(report)


def test_view_merge_names_where_the_misplaced_value_came_from():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="view_merge"), hidden(), num_heads=2, causal=True)
    merge = next(f for f in report.findings if f.evidence.get("probe") == "merge_split")
    assert merge.status is Status.FAIL and "heads mixed with time" in merge.message
    origin = merge.evidence["value_belongs_to"]
    assert origin["position"] != merge.evidence["first_wrong"][1]
    pinned = next(f for f in report.findings if f.evidence.get("probe") == "time_isolation")
    assert pinned.status is Status.FAIL and pinned.evidence["pinning"].startswith("weights pinned")


def test_view_merge_in_non_causal_attention_is_caught_by_the_merge_probe():
    torch.manual_seed(0)
    report = checked(HandAttention(causal=False, fault="view_merge"), hidden(), num_heads=2, causal=False)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("LEVEL_2", "attention.axis_semantics")
    time_probe = next(f for f in report.findings if f.evidence.get("probe") == "time_isolation")
    assert time_probe.status is Status.SKIPPED and "not informative" in time_probe.message


def test_batch_heads_mixing_is_seen_as_a_batch_leak():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="batch_heads"), hidden(), num_heads=2, causal=True)
    batch = next(f for f in report.findings if f.evidence.get("probe") == "batch_isolation")
    assert batch.status is Status.FAIL and batch.evidence["max_change_other_batches"] > 1e-3


def test_leaky_mask_found_without_being_told_causal():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="leaky_causal_mask"), hidden(), num_heads=2)
    assert report.details["causal"] is True and "read as causal" in report.details["causal_from"]
    assert (report.first_divergence.where, report.first_divergence.kind) == ("LEVEL_3", "attention.forbidden_weight")
    leak = next(f for f in report.findings if f.check == "attention.forbidden_weight")
    _, _, t, s = leak.evidence["first"]
    assert s == t + 1 and leak.evidence["forbidden_by"] == "future key (causal)"


def test_wrong_softmax_axis_says_columns_sum_to_one():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="softmax_wrong_axis"), hidden(), num_heads=2, causal=True)
    rows = next(f for f in report.findings if f.check == "attention.rows_not_normalized")
    assert rows.evidence["columns_sum_to_1"] is True and rows.evidence["softmax_dim"] == 2


def test_missing_scale_matches_the_unscaled_reference():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="missing_scale"), hidden(), num_heads=2, causal=True)
    ref = next(f for f in report.findings if f.check == "attention.reference_mismatch")
    assert ref.evidence["max_abs_error_vs_unscaled"] <= ref.evidence["tolerance"] < ref.evidence["max_abs_error"]
    assert "1/sqrt(Dh)" in report.first_divergence.hint


def test_fully_masked_row_gives_nonfinite_and_blocked_query():
    torch.manual_seed(0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1] = True  # the second sequence is all padding: softmax over a row of -inf
    report = checked(HandAttention(causal=False), (hidden(), pad), num_heads=2, key_padding_mask=pad)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("LEVEL_3", "attention.nonfinite")
    nonfinite, blocked = by_level(report, "LEVEL_3")[:2]
    assert nonfinite.evidence["row_fully_masked"] is True and nonfinite.evidence["first"][0] == 1
    # the blocked queries are padding themselves: their outputs are normally discarded, so not a FAIL (the NaN is)
    assert blocked.status is Status.WARN and blocked.evidence["blocked_queries"] == 6
    assert "not a FAIL: those queries are padding themselves" in blocked.message
    assert levels(report)["LEVEL_1"] == levels(report)["LEVEL_2"] == "PASS"


def test_padding_masked_passes_and_ignored_padding_is_a_forbidden_weight():
    torch.manual_seed(0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    clean = checked(HandAttention(), {"x": hidden(), "key_padding_mask": pad}, num_heads=2, causal=True)
    assert_clean(clean)
    assert clean.details["padding_from"] == "inputs key_padding_mask"
    faulty = checked(HandAttention(fault="ignore_padding"), hidden(), num_heads=2, causal=True, key_padding_mask=pad)
    assert clean.details["masks_built"] == [] and faulty.details["masks_built"] == ["key_padding_mask from the key_padding_mask argument"]
    assert (faulty.first_divergence.where, faulty.first_divergence.kind) == ("LEVEL_3", "attention.forbidden_weight")
    leak = next(f for f in faulty.findings if f.check == "attention.forbidden_weight")
    assert leak.evidence["forbidden_by"] == "padding key" and leak.evidence["first"][0] == 1


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_passes(batch_first):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    x = hidden() if batch_first else hidden().transpose(0, 1)
    plain = checked(mha, (x, x, x))
    assert_clean(plain, {("LEVEL_2", "time_isolation"), ("LEVEL_3", "attention.forbidden_weight"),
                         ("LEVEL_4", "future_token")})
    assert plain.details["causal"] is False and plain.details["layout"] == ("[B, T, E]" if batch_first else "[T, B, E]")
    assert by_level(plain, "LEVEL_1")[0].evidence["op"] == "F.multi_head_attention_forward"
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[0, 5:] = True
    causal = checked(mha, (x, x, x), causal=True, key_padding_mask=pad)
    assert_clean(causal)
    assert any("attn_mask" in m for m in causal.details["masks_built"])
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    given = checked(mha, {"query": x, "key": x, "value": x, "attn_mask": mask, "need_weights": False})
    assert given.details["causal"] is True and "attn_mask" in given.details["causal_from"]
    assert_clean(given)


def test_multihead_attention_cross_attention_shapes():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True)
    memory = hidden(t=9, seed=1)
    report = checked(mha, (hidden(), memory, memory))
    assert by_level(report, "LEVEL_1")[0].evidence["observed"] == [2, 2, 6, 9]
    assert report.status is Status.PASS
    time_probe = next(f for f in report.findings if f.evidence.get("probe") == "time_isolation")
    assert time_probe.status is Status.SKIPPED and "cross-attention" in time_probe.message


def test_transformer_encoder_layer_whole_and_its_self_attn():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)  # training mode, dropout 0.1: probes use an eval copy
    x = hidden()
    whole = checked(layer, x, causal=True)
    assert_clean(whole)
    assert by_level(whole, "LEVEL_1")[0].evidence["module"] == "self_attn"
    assert any("src_mask" in m for m in whole.details["masks_built"]) and whole.details["notes"]
    inner = checked(layer.self_attn, (x, x, x), causal=True)
    assert_clean(inner)
    bidirectional = checked(layer, x)
    assert bidirectional.status is Status.PASS and levels(bidirectional)["LEVEL_4"] == "PASS"
    assert layer.training  # untouched


def test_function_with_sdpa_and_a_wrong_scale():
    w = torch.randn(3, 16, 16, generator=torch.Generator().manual_seed(3)) / 4

    def attend(x, scale=None):
        b, t, e = x.shape
        q, k, v = ((x @ w[i]).view(b, t, 4, 4).transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2).reshape(b, t, e)

    clean = checked(attend, hidden())
    assert clean.details["causal"] is True and clean.status is Status.PASS
    merge = next(f for f in clean.findings if f.evidence.get("probe") == "merge_split")
    assert merge.status is Status.SKIPPED and "not identified" in merge.message
    wrong = checked(attend, (hidden(), 1.0))
    assert (wrong.first_divergence.where, wrong.first_divergence.kind) == ("LEVEL_4", "attention.reference_mismatch")


def test_no_softmax_seen_is_skipped_with_the_reason():
    class ExpAttention(nn.Module):  # softmax written by hand: nothing for the mode to capture
        def forward(self, x):
            s = torch.exp(x @ x.transpose(-2, -1) / 4)
            return (s / s.sum(-1, keepdim=True)) @ x

    report = checked(ExpAttention(), hidden())
    scores = by_level(report, "LEVEL_1")[0]
    assert scores.status is Status.SKIPPED and "no attention weights observed" in scores.message
    assert all(f.status is Status.SKIPPED for f in by_level(report, "LEVEL_3"))
    assert report.status is Status.PASS  # batch isolation and the merged shape still hold


class Flaky(HandAttention):
    """Raises on the n-th forward call of any instance (copies included): the class counts."""

    calls = 0
    fail_at = 2

    def forward(self, x, key_padding_mask=None):
        type(self).calls += 1
        if type(self).calls == type(self).fail_at:
            raise RuntimeError("boom half-way")
        return super().forward(x, key_padding_mask)


@pytest.mark.parametrize("fail_at", [1, 2, 4])
def test_module_raising_half_way_leaves_no_trace(fail_at):
    Flaky.calls, Flaky.fail_at = 0, fail_at
    module = Flaky()
    module.train()
    report = checked(module, hidden(), num_heads=2, causal=True)
    assert module.training
    if fail_at == 1:
        assert report.status is Status.SKIPPED and "RuntimeError: boom half-way" in report.reason
    else:
        assert report.status is not Status.FAIL
        assert any("boom half-way" in f.message for f in report.findings if f.status is Status.SKIPPED)


def test_report_round_trips_and_renders():
    torch.manual_seed(0)
    report = checked(HandAttention(fault="view_merge"), hidden(), num_heads=2, causal=True)
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.first_divergence == report.first_divergence and len(again.findings) == 12
    assert "LEVEL_2" in str(report)


@pytest.mark.parametrize("call, message", [
    (lambda: attention_check(3, hidden()), "Expected `attn` to be a torch.nn.Module or a callable but got int"),
    (lambda: attention_check(HandAttention(), "x"), "Expected `inputs` to be a tensor"),
    (lambda: attention_check(HandAttention(), (1, 2)), "Expected the first of `inputs` to be the hidden-states tensor"),
    (lambda: attention_check(HandAttention(), {"mask": None}), "hold the hidden-states tensor"),
    (lambda: attention_check(HandAttention(), torch.randn(6, 16)), "3-d floating-point tensor [B, T, E] but got shape (6, 16)"),
    (lambda: attention_check(HandAttention(), torch.ones(2, 6, 16, dtype=torch.long)), "floating-point"),
    (lambda: attention_check(HandAttention(), hidden(), num_heads=5), "Expected `num_heads` to divide the embedding size E=16"),
    (lambda: attention_check(HandAttention(), hidden(), num_heads=0), "positive integer"),
    (lambda: attention_check(HandAttention(), hidden(), causal="yes"), "Expected `causal` to be True, False or None"),
    (lambda: attention_check(HandAttention(), hidden(), atol=-1.0), "Expected `atol`"),
    (lambda: attention_check(HandAttention(), hidden(), key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)),
     "Expected `key_padding_mask` to be a bool tensor [B, Tk] = [2, 6]"),
])
def test_misuse_is_a_one_line_invalid_argument(call, message):
    with pytest.raises(InvalidArgument) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)
