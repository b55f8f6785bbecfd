"""compile_ledger: RUNS -> CORRECT -> CAPTURED -> STABLE -> WORTH_IT on small inline modules and functions, with
the fast debugging backends ("eager", "aot_eager", custom callables; guards and recompiles do not depend on the
backend) and one inductor run marked quality. Every ledger call is also checked for leaving no trace: the user's
objects, dynamo's bookkeeping, its config, the user's own compiled caches and the logging handlers."""

import json
import logging

import pytest
import torch
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.compile_ledger import LINKS, compile_ledger
from firstdiv.instruments.compile_ledger._compare import compare
from firstdiv.instruments.compile_ledger._guards import guard_category, numeric_value_guard

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




# --- code written the way users write it ------------------------------------------------------------------------


class Tiny(nn.Module):
    """[B, T, 8] -> [B, 8]; any T."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x).relu().sum(1)


class CallCounter(nn.Module):
    """Keeps a Python int that changes on every call and shapes the output: a value baked into each graph."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.proj(x) * self.calls


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        h = self.body(x)
        return {"logits": h * scale, "aux": (h.sum(-1), h.mean())}


def item_branch(x):
    y = x * 2
    if y.sum().item() > 0:  # data-dependent Python branch: a graph break
        return y + 1
    return y - 1


def raises_on_wide(x):
    if x.shape[-1] > 4:
        raise ValueError(f"width {x.shape[-1]} is not supported")
    return x * 2


def perturbing(gm, example_inputs):
    """A broken compiler: runs the graph, then adds 1e-2 to every float output."""
    def run(*args):
        return [o + 1e-2 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in gm(*args)]
    return run


def failing(gm, example_inputs):
    raise RuntimeError("this compiler cannot lower the graph")


def lengths(*ts, width=8):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, t, width, generator=gen) for t in ts]


# --- leave no trace ----------------------------------------------------------------------------------------------


def dynamo_state():
    u = torch._dynamo.utils
    from torch._dynamo import pgo

    return ({k: dict(v) for k, v in u.counters.items()}, {id(k): len(v) for k, v in u.guard_failures.items()},
            [id(m) for m in u._compilation_metrics], len(u.graph_break_reasons), id(pgo._CODE_STATE),
            list(logging.getLogger("torch._dynamo").handlers), torch._dynamo.config.get_config_copy(),
            torch._inductor.config.get_config_copy())


def ledger(fn, inputs_seq, watch=(), **options):
    """compile_ledger plus the no-trace checks every call must pass."""
    objects = [fn] if isinstance(fn, nn.Module) else list(watch)
    before, dyn = Snapshot.take(*objects), dynamo_state()
    report = compile_ledger(fn, inputs_seq, **options)
    assert before.diff(Snapshot.take(*objects)) == []
    assert dynamo_state() == dyn
    assert isinstance(report, Report) and report.instrument == "compile_ledger"
    assert [f.where for f in report.findings] == list(LINKS)
    json.dumps(report.to_dict())
    return report


def finding(report, link):
    return next(f for f in report.findings if f.where == link)


# --- the links ---------------------------------------------------------------------------------------------------


def test_healthy_module_with_fixed_shapes_passes_runs_to_stable():
    model = Tiny()
    report = ledger(model, lengths(5, 5, 5), backend="eager", repeats=3)
    assert report.status is Status.PASS and report.first_divergence is None
    assert [finding(report, link).status for link in LINKS[:4]] == [Status.PASS] * 4
    stable = finding(report, "STABLE").evidence
    assert stable["compiles"] == 1 and stable["recompiles"] == 0 and stable["limit_hit"] is False
    assert stable["per_input"] == ["compiled", "cached graph", "cached graph"]
    assert finding(report, "CAPTURED").evidence["graphs"] == 1
    assert finding(report, "CAPTURED").evidence["fullgraph"] == "captured"
    worth = finding(report, "WORTH_IT")
    assert worth.status is Status.SKIPPED and "debugging backend" in worth.message  # eager does not optimize
    assert worth.evidence["cold_first_call_s"] > 0 and worth.evidence["steady_s"] > 0
    assert "deep copies" in report.side_effects and "reset() was not called" in report.side_effects
    text = str(report)
    assert "COMPILE_LEDGER" in text and "STABLE" in text and "compile.recompiles" in text
    assert Report.from_dict(report.to_dict()).to_dict() == report.to_dict()


def test_data_dependent_item_branch_is_a_graph_break_with_its_user_line():
    x = torch.ones(6)
    report = ledger(item_branch, [x, x + 1], backend="eager", repeats=2)
    cap = finding(report, "CAPTURED")
    assert report.status is Status.WARN and report.first_divergence is None
    assert cap.status is Status.WARN and cap.check == "compile.graph_break"
    assert cap.evidence["graph_breaks"] >= 1 and cap.evidence["graphs"] == 2
    reason = cap.evidence["break_reasons"][0]
    assert "item()" in reason and "test_compile_ledger.py:" in reason and "if y.sum().item() > 0" in reason
    assert cap.evidence["fullgraph"] != "captured"  # fullgraph=True refuses the same line
    assert finding(report, "STABLE").status is Status.PASS  # the break is not a recompilation

    strict = ledger(item_branch, [x], backend="eager", fullgraph_required=True, repeats=1)
    assert strict.status is Status.FAIL
    assert (strict.first_divergence.where, strict.first_divergence.kind) == ("CAPTURED", "compile.graph_break")
    assert finding(strict, "STABLE").check == "not_reached"


def test_varying_sequence_lengths_with_dynamic_false_fail_stable_on_a_shape_guard():
    report = ledger(Tiny(), lengths(3, 5, 7, 9), backend="eager", dynamic=False)
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("STABLE", "compile.recompiles")
    ev = finding(report, "STABLE").evidence
    assert ev["recompiles"] == 3 and ev["unexpected_recompiles"] == 3 and ev["categories"] == {"shape": 3}
    first = ev["recompilations"][0]
    assert first["input"] == 1 and first["category"] == "shape" and first["expected"] is False
    assert "size mismatch at index 1" in first["guard"] and "expected 3, actual 5" in first["guard"]
    assert first["frame"].startswith("forward (test_compile_ledger.py:")
    assert "mark_dynamic" in div.hint
    assert [finding(report, link).status for link in ("RUNS", "CORRECT", "CAPTURED")] == [Status.PASS] * 3
    assert finding(report, "WORTH_IT").check == "not_reached"


def test_automatic_dynamic_shapes_one_recompile_is_expected():
    report = ledger(Tiny(), lengths(3, 5, 7, 9), backend="eager", repeats=2)
    stable = finding(report, "STABLE")
    assert stable.status is Status.PASS
    assert stable.evidence["recompiles"] == 1 and stable.evidence["expected_recompiles"] == 1
    assert stable.evidence["recompilations"][0]["input"] == 1
    assert stable.evidence["per_input"] == ["compiled", "recompiled", "cached graph", "cached graph"]


def test_recompile_limit_hit_is_reported_with_the_input_that_fell_back_to_eager():
    report = ledger(Tiny(), lengths(3, 4, 5, 6, 7), backend="eager", dynamic=False, cache_limit=2)
    ev = finding(report, "STABLE").evidence
    assert report.first_divergence.where == "STABLE" and report.first_divergence.kind == "compile.recompiles"
    assert ev["limit_hit"] is True and ev["limit_hit_input"] == 2 and ev["recompile_limit"] == 2
    assert ev["per_input"][2] == "limit hit: ran eager"
    assert "recompile limit (2) hit at input 2" in report.first_divergence.observed
    assert "hit config.recompile_limit (2)" in ev["limit_warnings"][0]  # torch's own warning, through the log handler
    assert finding(report, "CORRECT").status is Status.PASS  # eager fallback still gives eager's numbers


def test_python_value_that_changes_every_call_recompiles_on_a_value_guard():
    x = torch.randn(3, 4)
    report = ledger(CallCounter(), [x, x, x, x], backend="eager")
    ev = finding(report, "STABLE").evidence
    assert report.first_divergence.where == "STABLE"
    assert ev["recompiles"] == 3 and ev["categories"] == {"value": 3}
    assert "self.calls == 0" in ev["recompilations"][0]["guard"]  # the value the first graph baked in
    assert "Python value" in report.first_divergence.hint


def test_a_compiler_that_perturbs_outputs_fails_correct():
    model = TwoHeads()
    x = torch.randn(3, 4)
    report = ledger(model, [x, {"x": x, "scale": 2.0}], backend=perturbing)
    div = report.first_divergence
    assert (div.where, div.kind) == ("CORRECT", "compile.incorrect")
    ev = finding(report, "CORRECT").evidence
    assert ev["input"] == 0 and ev["path"].startswith("out[")
    assert ev["input_max_abs"] == pytest.approx(1e-2, rel=1e-3)
    assert [finding(report, link).check for link in ("CAPTURED", "STABLE", "WORTH_IT")] == ["not_reached"] * 3


def test_a_compiler_that_perturbs_outputs_fails_because_eager_reproduces_itself():
    report = ledger(TwoHeads(), [torch.randn(3, 4)], backend=perturbing)
    correct = finding(report, "CORRECT")
    assert correct.status is Status.FAIL  # eager replayed with another RNG state agrees with itself: the premise holds
    assert correct.evidence["eager_vs_eager_other_rng"]["bad_elements"] == 0


class Dropping(nn.Module):
    """Dropout left in training mode: eager's output depends on the random numbers drawn."""

    def __init__(self):
        super().__init__()
        self.body, self.drop = nn.Linear(4, 4), nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.body(x))


def reseeding(gm, example_inputs):
    """A correct compiler whose generated code draws its random numbers from another stream than eager."""
    def run(*args):
        torch.manual_seed(12345)
        return gm(*args)
    return run


def test_random_module_in_training_mode_is_a_warning_not_incorrect_compilation():
    report = ledger(Dropping().train(), [torch.randn(8, 4)], backend=reseeding, repeats=1)
    correct = finding(report, "CORRECT")
    assert correct.status is Status.WARN and correct.check == "compile.incorrect", correct.message
    assert "not a FAIL: eager itself, replayed on a fresh copy with another RNG state, differs" in correct.message
    assert correct.evidence["eager_vs_eager_other_rng"]["bad_elements"] > 0
    assert report.status is not Status.FAIL


def test_bucketed_sizes_reused_in_the_sequence_are_a_warning_not_a_recompile_failure():
    report = ledger(Tiny(), lengths(8, 16, 8, 16, 8, 16), backend="eager", dynamic=False, repeats=1)
    stable = finding(report, "STABLE")
    assert stable.status is Status.WARN and stable.check == "compile.recompiles", stable.message
    assert stable.evidence["recompiled_inputs"] == 1 and stable.evidence["reused_inputs"] == 4
    assert "one compile per bucket may be the design" in stable.message and report.status is not Status.FAIL


def test_eager_that_raises_fails_runs_as_a_report():
    report = ledger(raises_on_wide, [torch.ones(3, 4), torch.ones(3, 6)], backend="eager")
    div = report.first_divergence
    assert (div.where, div.kind) == ("RUNS", "compile.eager_raised")
    assert "input 1" in div.observed and "ValueError: width 6 is not supported" in div.observed
    assert "test_compile_ledger.py" in div.observed  # the user's frame


def test_a_compiler_that_raises_fails_runs():
    report = ledger(Tiny(), lengths(3), backend=failing)
    div = report.first_divergence
    assert (div.where, div.kind) == ("RUNS", "compile.compiled_raised")
    assert "cannot lower the graph" in div.observed and "aot_eager" in div.hint


def test_inputs_written_in_place_are_private_and_the_users_module_is_untouched():
    model = Tiny()
    x = torch.randn(2, 5, 8)
    saved = x.clone()

    def step(t):
        t.add_(1)  # writes into its input
        return model(t)

    report = ledger(step, [x, x.clone()], watch=[model], backend="aot_eager", repeats=2)
    assert torch.equal(x, saved)
    assert finding(report, "CORRECT").status is Status.PASS
    assert "snapshotted and restored" in report.side_effects


def test_the_users_own_compiled_cache_is_neither_used_nor_extended():
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    model = Tiny()
    mine = torch.compile(model, backend="eager", dynamic=False)
    mine(lengths(3)[0])
    entries = len(_debug_get_cache_entry_list(Tiny.forward))
    report = ledger(model, lengths(3, 5, 7), backend="eager", dynamic=False)
    assert finding(report, "STABLE").evidence["recompiles"] == 2  # counted from the ledger's own compile only
    assert len(_debug_get_cache_entry_list(Tiny.forward)) == entries
    frames = dict(torch._dynamo.utils.counters["frames"])
    mine(lengths(3)[0])  # the user's compiled model still hits its own graph
    assert dict(torch._dynamo.utils.counters["frames"]) == frames


class Chatty(nn.Module):
    def forward(self, x):
        print("chatty", end="")  # a graph break inside a submodule: its frame is compiled on its own (shared) code
        return x * 2


class WithChatty(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.chatty = nn.Linear(4, 4), Chatty()

    def forward(self, x):
        return self.chatty(self.proj(x)) + 1


def test_frames_compiled_on_shared_code_stay_isolated_and_are_named():
    from torch._dynamo.eval_frame import _get_cache_entries_for_region

    model = WithChatty()
    report = ledger(model.forward, [torch.randn(2, 4)] * 2, watch=[model], backend="eager", repeats=1)
    cap = finding(report, "CAPTURED")
    assert cap.status is Status.WARN and "test_compile_ledger.py:" in cap.evidence["break_reasons"][0]
    assert "frames compiled on shared code" in report.side_effects and "forward (test_compile_ledger.py:" in report.side_effects
    assert _get_cache_entries_for_region(Chatty.forward, -1) == []  # torch.compile(model) by the user never sees them
    assert report.details["target"] == "method"


def test_module_in_training_mode_with_dropout_matches_with_the_eager_backend():
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    report = ledger(model, [torch.randn(5, 4)], backend="eager", repeats=2)
    assert finding(report, "CORRECT").status is Status.PASS
    assert model.training


@pytest.mark.parametrize("kwargs, message", [
    ({"fn": 3}, "Expected `fn` to be a torch.nn.Module or a callable but got int"),
    ({"inputs_seq": torch.ones(2)}, "pass [x] for a single input"),
    ({"inputs_seq": []}, "but got an empty list"),
    ({"inputs_seq": [torch.ones(2), [torch.ones(2)]]}, "`inputs_seq[1]`"),
    ({"backend": "no_such_backend"}, "Expected `backend` to be a torch.compile backend"),
    ({"rtol": -1.0}, "Expected `rtol` to be a finite number >= 0"),
    ({"cache_limit": 0}, "Expected `cache_limit` to be None or an integer >= 1"),
    ({"dynamic": "yes"}, "Expected `dynamic` to be None, True or False"),
    ({"repeats": 0}, "Expected `repeats` to be an integer >= 1"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
    args = {"fn": Tiny(), "inputs_seq": lengths(3)}
    args.update(kwargs)
    fn, seq = args.pop("fn"), args.pop("inputs_seq")
    with pytest.raises(InvalidArgument) as info:
        compile_ledger(fn, seq, **args)
    assert message in str(info.value) and "\n" not in str(info.value)


# --- the pieces --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason, category", [
    ("0/1: tensor 'x' size mismatch at index 1. expected 3, actual 5", "shape"),
    ("3/0: tensor 'x' stride mismatch at index 0. expected 1, actual 2", "shape"),
    ("0/2: 2 <= L['x'].size()[1]  # return x  # model.py:4 in forward", "shape"),
    ("1/0: tensor 'x' dtype mismatch. expected Float, actual Double", "dtype"),
    ("1/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU), actual DispatchKeySet(CUDA)", "device"),
    ("1/0: tensor 'x' Tensor device index mismatch. Expected device index to be 0, actual 1", "device"),
    ("2/0: n == 2                                  # return x * n  # f.py:3 in h", "value"),
    ("2/1: flag == True", "value"),
    ("0/0: s.scale == 1.0", "value"),
    ("0/3: mode == 'relu'", "value"),
    ("1/2: tensor 'x' requires_grad mismatch. expected requires_grad=1", "other"),
    ("0/0: ___check_obj_id(L['self'], 140012)", "other"),
])
def test_guard_categories(reason, category):
    assert guard_category(reason) == category


def test_numeric_value_guards_are_the_ones_automatic_dynamic_generalises():
    assert numeric_value_guard("2/0: n == 2   # return x * n  # f.py:3 in h")
    assert numeric_value_guard("0/0: s.scale == 1.0")
    assert not numeric_value_guard("2/1: flag == True")
    assert not numeric_value_guard("0/3: mode == 'relu'")


def test_nested_outputs_are_compared_leaf_by_leaf():
    t = torch.arange(6.0)
    ok = compare({"a": t, "b": (t, 3)}, {"a": t.clone(), "b": (t.clone(), 3)}, 1e-4, 1e-5)
    assert ok.ok and ok.leaves == 3
    off = compare({"a": t, "b": (t, 3)}, {"a": t, "b": (t + 0.5, 3)}, 1e-4, 1e-5)
    assert not off.ok and off.worst == "out['b'][0]" and off.max_abs == pytest.approx(0.5) and off.bad_elements == 6
    shape = compare((t,), (t[:3],), 1e-4, 1e-5)
    assert not shape.ok and "out[0]" in shape.problem and "[6]" in shape.problem
    nan = torch.tensor([1.0, float("nan")])
    assert compare(nan, nan.clone(), 0.0, 0.0).ok


# --- slower / device ---------------------------------------------------------------------------------------------


@pytest.mark.quality
def test_inductor_on_cpu_times_cold_warm_and_steady_calls():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
    x = torch.randn(8, 16)
    with torch.no_grad():
        report = ledger(model, [x, x.clone()], backend="inductor", repeats=5)
    assert [finding(report, link).status for link in LINKS[:4]] == [Status.PASS] * 4
    worth = finding(report, "WORTH_IT")
    assert worth.status in (Status.PASS, Status.WARN) and worth.check in ("compile.worth_it", "compile.not_worth_it")
    ev = worth.evidence
    assert ev["cold_first_call_s"] > ev["steady_s"] > 0 and ev["warm_cache_first_call_s"] > ev["steady_s"]
    assert ev["break_even_calls"] == "never" or ev["break_even_calls"] >= 0
    if not torch._inductor.config.force_disable_caches:
        assert ev["warm_caches"].get("inductor.fxgraph_cache_hit", 0) >= 1  # the cold compile filled the cache
    assert "inductor's on-disk cache" in report.side_effects


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: timing synchronizes the device")
def test_cuda_module_runs_the_ledger_with_device_synchronised_timing():
    model = Tiny().cuda()
    report = ledger(model, [t.cuda() for t in lengths(4, 4)], backend="eager", repeats=3)
    assert [finding(report, link).status for link in LINKS[:4]] == [Status.PASS] * 4
    assert finding(report, "WORTH_IT").evidence["steady_s"] > 0
