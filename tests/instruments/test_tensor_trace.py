"""tensor_trace: the ledger at every module boundary and functional op, named-axis contracts, values moved
across axes (reshape where a permute was meant), and the ledger when the forward pass raises."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.tensor_trace import moved_by_reshape, tensor_trace

LM_CONTRACTS = {"embed": "B T D", "blocks.0": "B T D", "lm_head": "B T V"}


# --- models written the way users write them (names as in the zoo's references) ------------------------------------


class Attention(nn.Module):
    def __init__(self, dim, heads, merge="transpose"):
        super().__init__()
        self.heads, self.merge = heads, merge
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        weights = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(dim=-1)
        out = weights @ v  # [B, heads, T, Dh]
        if self.merge == "reshape":  # the bug: heads merged without moving them next to Dh
            out = out.reshape(b, t, d)
        elif self.merge == "view":
            out = out.contiguous().view(b, -1).view(b, t, d)  # the same bug in two steps
        else:
            out = out.transpose(1, 2).reshape(b, t, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim, heads, merge):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, merge)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=16, dim=32, heads=2, layers=2, merge="transpose", swap=False):
        super().__init__()
        self.swap = swap
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(16, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, merge) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        if self.swap:  # batch_time_swap: [B, T, D] -> [T, B, D] before the blocks; every shape stays legal
            x = x.transpose(0, 1)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class CNN(nn.Module):
    def __init__(self, head_in=16 * 3 * 3):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.pool, self.head = nn.MaxPool2d(2), nn.Linear(head_in, 4)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.head(x.flatten(1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(self.drop(F.relu(self.fc1(x))))))


class ToCHW(nn.Module):
    """HWC -> CHW, as a rearrangement module; ``how`` picks the (right or wrong) way to do it."""

    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):  # [B, H, W, C]
        b, h, w, c = x.shape
        if self.how == "permute":
            return x.permute(0, 3, 1, 2)
        if self.how == "reshape":
            return x.reshape(b, c, h, w)
        return x.contiguous().as_strided((b, c, h, w), (h * w * c, h * w, w, 1))  # a reshape the op check cannot see


class Images(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.to_chw, self.conv = ToCHW(how), nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(self.to_chw(x))


def tokens(seed=0, b=4, t=12):
    return torch.randint(1, 16, (b, t), generator=torch.Generator().manual_seed(seed))


def trace(model, inputs, **kw):
    """tensor_trace that must leave no trace (values, buffers, hooks, RNG, grad mode, mode stack) and render."""
    watched = [model] if isinstance(model, nn.Module) else []
    before = Snapshot.take(*watched)
    report = tensor_trace(model, inputs, **kw)
    assert before.diff(Snapshot.take(*watched)) == []
    assert torch._C._len_torch_function_stack() == 0
    assert isinstance(report, Report) and report.instrument == "tensor_trace"
    assert str(report)
    assert Report.from_dict(json.loads(json.dumps(report.to_dict()))).to_dict() == report.to_dict()
    return report


# --- clean models: PASS ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_transformer_passes_with_contracts(seed):
    torch.manual_seed(seed)
    report = trace(TinyLM(), tokens(seed), contracts=LM_CONTRACTS)
    assert report.status is Status.PASS, str(report)
    assert report.details["bindings"] == {"B": 4, "T": 12, "D": 32, "V": 16}
    checked = [f.where for f in report.findings if f.check == "contract.axes"]
    assert checked == ["embed", "blocks.0", "lm_head"]


def test_clean_cnn_mlp_and_builtin_attention_pass():
    assert trace(CNN().train(), torch.randn(8, 1, 12, 12), contracts={"conv1": "B C H W", "": "B K"}).ok
    assert trace(MLP().train(), torch.randn(8, 16), contracts={"fc1": "N 32", "": "N 4"}).ok
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    assert trace(layer, torch.randn(2, 5, 16), contracts={"": "B T 16", "self_attn": ["B T 16", "B T T"]}).ok
    mha = nn.MultiheadAttention(16, 4)  # [T, B, E] internals reshape [T, B*H, Dh]: legitimate, never flagged
    report = trace(mha, (torch.randn(8, 2, 16),) * 3)
    assert report.ok, str(report)


def test_ledger_rows_hold_shape_dtype_device_stride_contiguity_and_ops():
    report = trace(TinyLM(), tokens())
    rows = report.details["rows"]
    assert report.details["rows_total"] == len(rows)
    embed = next(r for r in rows if r["where"] == "embed" and r["event"] == "output")
    assert embed == {**embed, "shape": [4, 12, 32], "dtype": "float32", "device": "cpu", "stride": [384, 32, 1],
                     "contiguous": True, "op": "Embedding"}
    wheres = {r["where"] for r in rows}
    assert {"op:softmax@blocks.0.attn", "op:matmul@blocks.0.attn", "op:transpose@blocks.0.attn",
            "op:view@blocks.1.attn", "op:add@blocks.0"} <= wheres
    transposed = next(r for r in rows if r["where"] == "op:transpose@blocks.0.attn")
    assert transposed["contiguous"] is False and transposed["shape"] == [4, 2, 12, 16]
    assert not any(r["where"].startswith("op:linear") for r in rows)  # torch.nn internals: the boundary says it


# --- faults -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("merge", ["reshape", "view"])
def test_merge_heads_without_transpose_is_values_moved_at_the_attention(merge):
    report = trace(TinyLM(merge=merge), tokens(), contracts=LM_CONTRACTS)
    # evidence before FAIL: the values are a permutation of the input's and no example's values reach another
    # example: a layout change that may be the design (patches to an image), named with the axes it mixed
    assert report.status is Status.WARN and report.first_divergence is None, str(report)
    warn = next(f for f in report.findings if f.where == "blocks.0.attn")
    assert warn.check == "layout.values_moved" and "examples axis (size 4)" in warn.message
    ev = warn.evidence
    assert ev["op"] == f"op:{merge}@blocks.0.attn"
    assert ev["chain_input_shape"] == [4, 2, 12, 16] and ev["output_shape"] == [4, 12, 32]
    assert ev["input_axis"] == 2 and ev["output_axis"] == 1 and ev["output_axis_holds_input_axes"] == [1, 2]
    assert ev["example"] == "output[0, 1, 0] holds input[0, 0, 2, 0]"  # position 1 holds time 2 of head 0
    assert [f.where for f in report.findings if f.check == "layout.values_moved"] == ["blocks.0.attn", "blocks.1.attn"]


def test_batch_time_swap_is_an_axis_mismatch_at_the_first_block():
    report = trace(TinyLM(swap=True), tokens(), contracts=LM_CONTRACTS)
    div = report.first_divergence
    assert (div.where, div.kind) == ("blocks.0", "contract.axis_mismatch")
    assert div.observed == [12, 4, 32] and "B=4" in div.expected
    ev = next(f.evidence for f in report.findings if f.check == "contract.axis_mismatch")
    assert ev["axis"] == 0 and ev["name"] == "B" and ev["bound"] == 4 and ev["bound_at"] == "embed"
    assert "op:transpose@" in ev["ops_since_last_match"]
    assert not any(f.check == "layout.values_moved" for f in report.findings)  # shapes legal, nothing reshaped


def test_reshape_hwc_as_chw_is_caught_by_the_op_check_and_the_arange_probe():
    x = torch.randn(2, 5, 5, 3)
    assert trace(Images("permute"), x, contracts={"to_chw": "B 3 H W"}).ok
    by_reshape = trace(Images("reshape"), x)  # named (WARN): the examples keep their values
    assert [(f.where, f.status) for f in by_reshape.findings if f.check == "layout.values_moved"] == [("to_chw", Status.WARN)]
    by_strides = trace(Images("strided"), x)  # no reshape op to see: only the arange probe finds it
    moved = [f for f in by_strides.findings if f.check == "layout.values_moved"]
    assert [(f.where, f.status) for f in moved] == [("to_chw", Status.WARN)] and moved[0].evidence["size"] == 3
    assert trace(Images("strided"), x, layout_probe=False).ok


def test_reshape_rule_flags_axes_that_move_and_keeps_merges_and_splits():
    assert moved_by_reshape((4, 2, 12, 16), (4, 12, 32)) is not None  # heads merged without transpose
    assert moved_by_reshape((1, 2, 12, 16), (1, 12, 32)) is not None  # batch of one
    assert moved_by_reshape((8, 8, 3), (3, 8, 8)) is not None  # HWC read as CHW
    assert moved_by_reshape((2, 3, 8, 8), (2, 8, 8, 3)) is not None  # NCHW -> NHWC by view
    for src, dst in [((4, 12, 2, 16), (4, 12, 32)), ((4, 12, 32), (4, 12, 2, 16)), ((4, 16, 3, 3), (4, 144)),
                     ((8, 4, 32), (8, 8, 16)), ((4, 16, 16), (4, 16, 4, 4)), ((4, 2, 1, 16), (4, 1, 32)),
                     ((4, 12, 32), (48, 32)), ((6,), (6,))]:
        assert moved_by_reshape(src, dst) is None, (src, dst)


# --- contracts ------------------------------------------------------------------------------------------------------


def test_contract_literals_ellipsis_rank_and_unreached_modules():
    model = CNN()
    x = torch.randn(8, 1, 12, 12)
    assert trace(model, x, contracts={"conv1": "B 8 ... W", "conv2": "B C H2 W2", "": "B 4"}).ok
    literal = trace(model, x, contracts={"conv2": "B 32 H W"})
    assert (literal.first_divergence.where, literal.first_divergence.kind) == ("conv2", "contract.axis_mismatch")
    rank = trace(model, x, contracts={"head": "B T K"})
    assert "rank 2" in rank.findings[[f.check for f in rank.findings].index("contract.axis_mismatch")].message
    never = trace(MLP(), torch.randn(4, 16), contracts={"drop": "N 32"})
    assert never.status is Status.PASS
    model.extra = nn.Linear(2, 2)  # registered, never called
    unreached = trace(model, x, contracts={"extra": "B 2"})
    assert unreached.status is Status.WARN
    assert [f.where for f in unreached.findings if f.check == "contract.not_reached"] == ["extra"]


# --- when the forward pass raises ----------------------------------------------------------------------------------


class Raising(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(32, 2, "transpose") for _ in range(2))
        self.blocks[1].attn.qkv = nn.Linear(16, 96)  # the second block's projection expects 16 features

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_forward_raising_returns_the_ledger_up_to_the_failure():
    report = trace(CNN(head_in=10), torch.randn(8, 1, 12, 12), contracts={"conv2": "B C H W"})
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("head", "trace.forward_raised")
    assert "mat1 and mat2 shapes cannot be multiplied" in div.observed
    ev = report.findings[-1].evidence
    assert ev["last_rows"][-2:] == ["op:flatten@ op [8, 144] float32", "head input [8, 144] float32"]
    assert report.details["raised"] and report.details["rows"][-1]["where"] == "head"
    nested = trace(Raising(), torch.randn(2, 5, 32))
    assert nested.first_divergence.where == "blocks.1.attn.qkv"
    assert nested.findings[-1].evidence["module_stack"] == ["", "blocks.1", "blocks.1.attn", "blocks.1.attn.qkv"]


def test_a_failing_functional_op_is_named_in_the_evidence():
    def fn(x):
        return torch.cat([x, x.t()], dim=0)
    report = trace(fn, torch.randn(3, 4))
    assert report.first_divergence.kind == "trace.forward_raised" and report.first_divergence.where == ""
    assert report.findings[-1].evidence["failing_op"] == "op:cat@"
    assert report.findings[-1].evidence["op_input_shapes"] == [[3, 4], [4, 3]]


def test_a_contract_violated_before_the_crash_is_the_first_divergence():
    report = trace(CNN(head_in=10), torch.randn(8, 1, 12, 12), contracts={"conv2": "B 32 H W"})
    assert [f.check for f in report.findings if f.status is Status.FAIL] == ["contract.axis_mismatch", "trace.forward_raised"]
    assert report.first_divergence.where == "conv2"


def test_no_trace_when_forward_raises_in_training_mode_with_dropout_and_batchnorm():
    model = CNN(head_in=10).train()
    model.drop = nn.Dropout(0.5)
    torch.manual_seed(3)
    trace(model, torch.randn(8, 1, 12, 12))  # snapshot diff covers BN running stats, RNG states and hooks
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


# --- inputs, callables, misuse ----------------------------------------------------------------------------------


def test_callables_tuples_and_keyword_inputs():
    report = trace(lambda x, y: F.relu(x @ y).reshape(-1), (torch.randn(3, 4), torch.randn(4, 5)), contracts={"": "N"})
    assert report.ok and {r["where"] for r in report.details["rows"]} >= {"op:matmul@", "op:relu@", "op:reshape@", ""}
    model = TinyLM()
    assert trace(model.forward, tokens()).ok  # a bound method: only ops are seen, its module is still guarded

    class Keywords(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, scale=1.0):
            return self.fc(x) * scale
    assert trace(Keywords(), {"x": torch.randn(3, 4), "scale": 2.0}, contracts={"fc": "N 2"}).ok


@pytest.mark.parametrize("call, message", [
    (lambda: tensor_trace(3, torch.randn(2)), "Expected `model` to be a torch.nn.Module or a callable but got int"),
    (lambda: tensor_trace(MLP(), [torch.randn(2, 16)]), "(pass (your_list,) to give a list as one argument)"),
    (lambda: tensor_trace(MLP(), "x"), "Expected `inputs` to be a tensor, a tuple"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), contracts=["B D"]), "Expected `contracts` to be a dict"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), contracts={"encoder": "B D"}), "got 'encoder' (modules: drop, fc1"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), contracts={"fc1": "B D!"}), "got token 'D!'"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), contracts={"fc1": "... B ..."}), "several '...'"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), contracts={"fc1": 3}), "got int"),
    (lambda: tensor_trace(MLP(), torch.randn(2, 16), layout_probe="yes"), "Expected `layout_probe` to be a bool"),
])
def test_misuse_is_one_line_invalid_argument(call, message):
    with pytest.raises(InvalidArgument) as info:
        call()
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_inside_a_users_own_torch_function_mode():
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))
    with Counting():
        report = tensor_trace(TinyLM(merge="reshape"), tokens())
        assert torch._C._len_torch_function_stack() == 1
    assert next(f.where for f in report.findings if f.check == "layout.values_moved") == "blocks.0.attn"
    assert Counting.calls > 0


def test_a_rearrangement_that_moves_values_between_examples_fails():
    """[B, T, D] read as [T, B, D] by view: example 0's later positions land in other examples' slots."""
    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            b, t, d = x.shape
            return self.lin(x.view(t, b, d).mean(0))

    report = trace(Mixer(), torch.randn(4, 6, 8))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("", "layout.values_moved"), str(report)


def test_real_attention_implementations_raise_no_false_alarm():
    transformers = pytest.importorskip("transformers")
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    configs = [transformers.GPT2Model(transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=4, n_positions=16)),
               transformers.BertModel(transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                                               num_attention_heads=4, intermediate_size=64)),
               transformers.LlamaModel(transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                                                 num_attention_heads=4, num_key_value_heads=2,
                                                                 intermediate_size=64))]
    for model in configs:
        report = trace(model.eval(), {"input_ids": ids})
        assert report.status is Status.PASS, str(report)
        assert report.findings[[f.check for f in report.findings].index("layout.reshapes")].evidence["checked"] > 5


def test_an_exception_caught_inside_forward_leaves_attribution_intact():
    class Catcher(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.fc = nn.Sequential(nn.Linear(3, 4), nn.Linear(3, 4)), nn.Linear(3, 2)

        def forward(self, x):
            try:
                self.inner(x)  # the second Linear raises; the model carries on without it
            except RuntimeError:
                pass
            return torch.relu(self.fc(x))
    report = trace(Catcher(), torch.randn(2, 3))
    assert report.ok and [r["where"] for r in report.details["rows"]][-3:] == ["fc", "op:relu@", ""]
