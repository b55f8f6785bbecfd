"""attention_check on the user's model (``module=`` path): findings at the module path with kinds that name the
problem and the level in the evidence; eval-mode randomness; torch.compile; what cannot be run is SKIPPED with the
reason; misuse is a one-line InvalidArgument."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.attention_check import attention_check

E, HEADS, T = 16, 2, 6
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting


class Attention(nn.Module):
    """Causal self-attention with one slip at a time (``bug``)."""

    def __init__(self, bug=""):
        super().__init__()
        self.qkv, self.proj, self.bug = nn.Linear(E, 3 * E), nn.Linear(E, E), bug
        self.register_buffer("mask", torch.tril(torch.ones(T, T), diagonal=1 if bug == "future" else 0))

    def forward(self, x):
        b, t, _ = x.shape
        split = (lambda z: z.reshape(b, HEADS, t, E // HEADS)) if self.bug == "split" else \
            (lambda z: z.view(b, t, HEADS, E // HEADS).transpose(1, 2))
        q, k, v = (split(z.contiguous()) for z in self.qkv(x).split(E, dim=-1))
        dh = E // HEADS
        scale = {"missing_scale": 1.0, "one_over_dh": 1 / dh}.get(self.bug, 1 / math.sqrt(dh))
        scores = (q @ k.transpose(-2, -1) * scale).masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        w = scores.softmax(dim=-2 if self.bug == "softmax_axis" else -1)
        w = F.dropout(w, 0.2, training=True) if self.bug == "dropout" else w
        out = w @ v
        if self.bug == "noise":
            out = out + 1e-2 * torch.randn_like(out)
        return self.proj(out.transpose(1, 2).reshape(b, t, E))


class Model(nn.Module):
    def __init__(self, bug=""):
        super().__init__()
        self.embed = nn.Embedding(20, E)
        self.blocks = nn.ModuleList(nn.ModuleDict({"attn": Attention(bug if i == 0 else ""), "ln": nn.LayerNorm(E)})
                                    for i in range(2))
        self.head = nn.Linear(E, 20)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = x + block["attn"](block["ln"](x))
        return self.head(x)


def ids(seed=0):
    return torch.randint(0, 20, (2, T), generator=torch.Generator().manual_seed(seed))


def checked(model, inputs, **options):
    before, rng = Snapshot.take(model), torch.get_rng_state()
    report = attention_check(model, inputs, **options)
    assert before.diff(Snapshot.take(model)) == [] and torch.equal(rng, torch.get_rng_state())
    assert isinstance(report, Report)
    json.dumps(report.to_dict())
    return report


def model(bug="", seed=0):
    torch.manual_seed(seed)
    return Model(bug).eval()


def test_clean_model_passes_with_every_finding_at_the_module_path():
    report = checked(model(), ids(), module="blocks.0.attn")
    assert report.status is Status.PASS, str(report)
    assert {f.where for f in report.findings} == {"blocks.0.attn"}
    assert {f.evidence["level"] for f in report.findings} == {"LEVEL_1", "LEVEL_2", "LEVEL_3", "LEVEL_4"}
    assert report.details["path"] == "blocks.0.attn" and report.details["levels"]["LEVEL_4"] == "PASS"
    assert report.details["causal"] is True


@pytest.mark.parametrize("bug, kind, level, said", [
    ("missing_scale", "attention.missing_scale", "LEVEL_4", "scores are q·k with scale 1 (1/sqrt(Dh)=0.3536 missing)"),
    ("one_over_dh", "attention.wrong_scale", "LEVEL_4", "scaled by 1/Dh=0.125, not 1/sqrt(Dh)=0.3536"),
    ("future", "attention.future_visible", "LEVEL_3", "the causal mask lets a query see future keys"),
    ("split", "attention.head_split_merge", "LEVEL_2", "heads split/merged"),
    ("softmax_axis", "attention.softmax_axis", "LEVEL_3", "softmax taken over the query axis"),
    ("dropout", "attention.eval_dropout", "LEVEL_4", "F.dropout(p=0.2) in blocks.0.attn is active under eval()"),
    ("noise", "attention.eval_randomness", "LEVEL_4", "outputs differ"),
])
def test_each_slip_is_named_at_the_module_path(bug, kind, level, said):
    m = model(bug)
    m.train()  # the user's mode comes back; the check runs the eval path
    report = checked(m, ids(), module="blocks.0.attn")
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("blocks.0.attn", kind), str(report)
    assert said in str(div.observed), div.observed
    first = next(f for f in report.findings if f.status is Status.FAIL)
    assert first.check == kind and first.evidence["level"] == level
    assert m.training
    clean_layer = checked(m, ids(), module="blocks.1.attn")
    assert clean_layer.status is Status.PASS, str(clean_layer)


def test_eval_dropout_is_never_reproduced_and_the_other_levels_still_run():
    report = checked(model("dropout"), ids(), module="blocks.0.attn")
    assert [f.check for f in report.findings if f.status is Status.FAIL] == ["attention.eval_dropout"]
    random = report.findings[0]
    assert random.evidence["stochastic_ops"] == ["F.dropout(p=0.2) in blocks.0.attn"]
    assert any("dropout left out" in n for n in report.details["notes"])


def test_module_alone_keeps_the_level_as_where_and_names_the_diagnosis():
    torch.manual_seed(0)
    report = checked(Attention("missing_scale"), torch.randn(2, T, E))
    div = report.first_divergence
    assert (div.where, div.kind) == ("LEVEL_4", "attention.reference_mismatch")
    assert "scale 1 (1/sqrt(Dh)=0.3536 missing)" in div.observed
    ref = next(f for f in report.findings if f.status is Status.FAIL)
    assert ref.evidence["diagnosis"] == "attention.missing_scale"
    torch.manual_seed(0)
    dropped = checked(Attention("dropout"), torch.randn(2, T, E))
    assert (dropped.first_divergence.where, dropped.first_divergence.kind) == ("LEVEL_4", "attention.eval_dropout")


def test_sdpa_with_dropout_p_in_eval_is_flagged():
    class Sdpa(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.p = nn.Linear(E, 3 * E), 0.1

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, HEADS, E // HEADS).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True).transpose(1, 2).reshape(b, t, E)

    torch.manual_seed(0)
    report = checked(Sdpa().eval(), torch.randn(2, T, E))
    assert report.first_divergence.kind == "attention.eval_dropout"
    assert "F.scaled_dot_product_attention dropout_p(p=0.1)" in report.findings[0].message


def test_torch_compiled_module_and_model_are_checked_through_the_eager_module():
    torch.manual_seed(0)
    compiled = torch.compile(Attention())
    report = checked(compiled, torch.randn(2, T, E))
    assert report.status is Status.PASS and any("torch.compile" in n for n in report.details["notes"])
    whole = checked(torch.compile(model("missing_scale")), ids(), module="blocks.0.attn")
    assert (whole.first_divergence.where, whole.first_divergence.kind) == ("blocks.0.attn", "attention.missing_scale")
    inner = model("future")
    inner.blocks[0]["attn"] = torch.compile(inner.blocks[0]["attn"])  # compiled in place: never compiled by the check
    part = checked(inner, ids(), module="blocks.0.attn")
    assert (part.first_divergence.where, part.first_divergence.kind) == ("blocks.0.attn", "attention.future_visible")
    assert any("blocks.0.attn is torch.compile'd" in n for n in part.details["notes"])


def test_model_that_cannot_reach_the_module_is_skipped_with_the_reason():
    class Broken(Model):
        def forward(self, ids):
            raise ValueError("bad batch")

    torch.manual_seed(0)
    report = checked(Broken(), ids(), module="blocks.0.attn")
    assert report.status is Status.SKIPPED and "ValueError: bad batch" in report.reason and "blocks.0.attn" in report.reason

    class Skips(Model):
        def forward(self, ids):
            return self.head(self.embed(ids))

    torch.manual_seed(0)
    never = checked(Skips(), ids(), module="blocks.1.attn")
    assert never.status is Status.SKIPPED and "never called blocks.1.attn" in never.reason
    embedding = checked(model(), ids(), module="embed")  # integer ids: not hidden states
    assert embedding.status is Status.SKIPPED and "what the model passes to embed is not attention inputs" in embedding.reason


@pytest.mark.parametrize("call, message", [
    (lambda: attention_check(model(), ids(), module="blocks.0.atn"),
     ("Expected `module` to be the named_modules() path of the attention module in the model but got 'blocks.0.atn'; "
     "try one of ['blocks.0.attn', 'blocks.1.attn']")),
    (lambda: attention_check(lambda x: x, ids(), module="blocks.0.attn"), "Expected `attn` to be the model"),
    (lambda: attention_check(model(), ids(), module=3), "but got 3"),
    (lambda: attention_check(model(), ids(), module="blocks.0.attn", causal="yes"), "Expected `causal`"),
])
def test_misuse_of_module_is_a_one_line_invalid_argument(call, message):
    with pytest.raises(InvalidArgument) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_inputs_the_model_passes_that_do_not_fit_are_skipped_not_raised():
    class Masked(Attention):
        def forward(self, x, key_padding_mask=None):  # takes a [B, 1, 1, T] mask its model builds
            return super().forward(x)

    class Outer(Model):
        def __init__(self):
            super().__init__()
            self.blocks[0]["attn"] = Masked()

        def forward(self, ids):
            x = self.embed(ids)
            return self.head(self.blocks[0]["attn"](x, key_padding_mask=(ids == 0)[:, None, None, :]))

    torch.manual_seed(0)
    report = checked(Outer(), ids(), module="blocks.0.attn")
    assert report.status is Status.SKIPPED and "what the model passes it does not fit" in report.reason
    assert "Expected `key_padding_mask` to be a bool tensor [B, Tk]" in report.reason
    with pytest.raises(InvalidArgument, match="key_padding_mask"):
        attention_check(Outer(), ids(), module="blocks.0.attn", key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("fail_at", [1, 2, 5])
def test_user_code_raising_half_way_leaves_no_trace(fail_at):
    calls = {"n": 0}

    def hook(module, args):
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise RuntimeError("boom half-way")

    m = model()
    m.train()
    handle = m.blocks[0]["attn"].register_forward_pre_hook(hook)  # the copies carry it: user code that raises
    try:
        report = checked(m, ids(), module="blocks.0.attn")
    finally:
        handle.remove()
    assert m.training and report.status is not Status.FAIL, str(report)
    if fail_at == 1:
        assert report.status is Status.SKIPPED and "RuntimeError: boom half-way" in report.reason
    else:  # a later pass raised: the checks that needed it say so
        assert "boom half-way" in report.reason + " ".join(f.message for f in report.findings), str(report)
