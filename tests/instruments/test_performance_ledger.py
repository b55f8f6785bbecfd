"""performance_ledger: the measurement contract, phase times with their spread, memory, growth across identical
iterations (a retained loss), the profiler for localization, and the instrument's own overhead."""

import gc
import json
import re
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.performance_ledger import performance_ledger
from firstdiv.instruments.performance_ledger._reconcile import ROUNDS
from firstdiv.instruments.performance_ledger._timing import PHASES
from firstdiv.render import to_text

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




def program(device="cpu"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 4, generator=g).to(device), torch.randint(0, 3, (8,), generator=g).to(device))
    return model, optimizer, batch


def step_for(model, optimizer, history=None, keep="loss"):
    """The user's step; ``history`` is the list a logging line appends to (the bug: the tensor itself)."""
    def step(batch):
        x, y = batch
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if history is not None:
            history.append({"loss": loss, "detached": loss.detach(), "item": loss.item()}[keep])
        return loss.item()
    return step


def ledger(model, optimizer, step, batch, **kw):
    """Call the ledger, prove it left no trace on model/optimizer, the dispatch/function mode stacks and gc, and
    that the report renders and round-trips."""
    before = Snapshot.take(model, optimizer)
    kw.setdefault("repeats", 4)
    kw.setdefault("warmup", 1)
    report = performance_ledger(step, batch, model=model, optimizer=optimizer, **kw)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    assert torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0
    assert gc.get_freeze_count() == 0
    assert to_text(report).startswith("PERFORMANCE_LEDGER")
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    return report


def finding(report, check):
    return next(f for f in report.findings if f.check == check)


# --- healthy step ------------------------------------------------------------------------------------------------


def test_healthy_step_passes_with_contract_phases_memory_and_overhead():
    model, opt, batch = program()
    r = ledger(model, opt, step_for(model, opt), batch, loss_fn=F.cross_entropy)
    assert r.status is Status.PASS and r.ok, str(r)
    c = r.details["contract"]
    assert c["workload"].endswith("step_for.<locals>.step")
    assert (c["inputs"], c["device"], c["dtype"], c["mode"], c["execution"]) == (
        "([8, 4] float32, [8] int64)", "cpu", "float32", "train", "eager")
    assert (c["warmup"], c["repeats"]) == (1, 4) and "CPU operators finish" in c["synchronization"]
    assert c["metric"].startswith("seconds per step")
    assert set(r.details["phases"]) == set(PHASES)
    for s in r.details["phases"].values():
        assert s["n"] == 4 and s["p25"] <= s["median"] <= s["p75"] and s["iqr"] >= 0
    assert r.details["dominant_phase"] in PHASES
    assert finding(r, "perf.dominant_phase").where == r.details["dominant_phase"]
    assert r.details["step_seconds"]["median"] > 0 and r.details["examples_per_second"] > 0
    growth = finding(r, "memory.growth")
    assert growth.status is Status.PASS and set(growth.evidence["increments"]) == {0}
    assert r.details["memory"]["rss_start"] > 0 and r.details["memory"]["rss_source"]
    over = r.details["overhead"]
    assert 0 < over["empty_step_seconds"] < r.details["step_seconds"]["median"]
    # 1 warm-up, 4 timed, and the growth watch, which stops once live bytes do not rise (after 2 iterations here)
    assert growth.evidence["iterations"] == 2 and growth.evidence["live_bytes"][0] == growth.evidence["live_bytes"][1]
    assert "step called 7 times" in r.side_effects and "not restored" in r.side_effects
    assert "deep copy" in r.side_effects


def test_phases_only_without_a_step_and_no_phases_without_the_evidence():
    model, opt, batch = program()
    r = performance_ledger(None, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=3, warmup=0,
                           profile=True)
    assert set(r.details["phases"]) == set(PHASES) and "growth" not in r.details
    assert finding(r, "perf.profile").status is Status.SKIPPED and r.status is Status.PASS
    r = performance_ledger(step_for(model, opt), batch, model=model, optimizer=opt, repeats=3)
    skipped = finding(r, "perf.phase_time")
    assert skipped.status is Status.SKIPPED and "loss_fn=" in skipped.message
    assert "phases" not in r.details and r.status is Status.PASS


def test_slow_batch_factory_makes_input_wait_dominate():
    model, opt, batch = program()

    def next_batch():
        time.sleep(0.03)  # a slow decode in the main process
        return batch

    r = ledger(model, opt, step_for(model, opt), next_batch, loss_fn=F.cross_entropy, repeats=3, warmup=0)
    assert r.details["dominant_phase"] == "input_wait"
    phases = r.details["phases"]
    assert phases["input_wait"]["median"] > 5 * max(phases[p]["median"] for p in PHASES if p != "input_wait")
    assert r.details["input_wait_seconds"]["median"] > 0.025 > r.details["step_seconds"]["median"]
    assert r.details["contract"]["inputs"] == "([8, 4] float32, [8] int64)"


def test_step_without_a_batch_is_called_with_no_argument_and_eval_mode_is_recorded():
    model, opt, batch = program()
    model.eval()
    calls = []

    def train_step():
        calls.append(1)
        step_for(model, opt)(batch)

    r = ledger(model, opt, train_step, None, phases=False)
    assert len(calls) == 1 + 4 + 2 and r.details["contract"]["mode"] == "eval"
    assert r.details["contract"]["inputs"] == "none: step() takes no batch"


def test_step_that_makes_cyclic_garbage_is_not_growth():
    model, opt, batch = program()
    inner = step_for(model, opt)

    def step(b):
        node = {"activation": model(b[0])}
        node["self"] = node  # a reference cycle holding a tensor: freed only by the cycle collector
        return inner(b)

    r = ledger(model, opt, step, batch, phases=False)
    assert finding(r, "memory.growth").status is Status.PASS, str(r)


# --- memory growth -----------------------------------------------------------------------------------------------


def test_appended_loss_is_memory_growth_at_step():
    model, opt, batch = program()
    history = []
    r = ledger(model, opt, step_for(model, opt, history), batch, loss_fn=F.cross_entropy)
    assert r.status is Status.FAIL and not r.ok
    div = r.first_divergence
    assert (div.where, div.kind) == ("step", "memory.growth")
    assert "loss.item()" in div.hint
    ev = finding(r, "memory.growth").evidence
    assert all(d > 0 for d in ev["increments"]) and ev["bytes_per_iteration"] >= 4
    assert ev["kept_with_graph"] >= 4 and "NllLossBackward0" in ev["graph_nodes"]
    # the user's list is theirs: not restored, and said so, with the count of calls (1 warm-up, 4 timed, 6 growth
    # iterations, and 4 more per reconciliation round, up to ROUNDS - 1, when a noisy machine makes the step and
    # phase timings disagree)
    called = int(re.search(r"step called (\d+) times on your objects", r.side_effects).group(1))
    assert len(history) == called and called in [1 + 4 + 6 + 4 * k for k in range(ROUNDS)], r.side_effects
    assert "objects your step appends to" in r.side_effects


def test_detached_tensors_kept_every_step_are_growth_without_a_graph():
    model, opt, batch = program()
    r = ledger(model, opt, step_for(model, opt, [], keep="detached"), batch, phases=False)
    # evidence before FAIL: detached results kept every step are what an epoch's statistics buffer does; only a kept
    # autograd graph is a confirmed leak (test above), so this growth is named as a WARN with its numbers
    growth = finding(r, "memory.growth")
    assert growth.status is Status.WARN and r.first_divergence is None, str(r)
    ev = growth.evidence
    assert ev["kept_with_graph"] == 0 and ev["kept_tensors"] >= 4 and ev["bytes_per_iteration"] > 0


def test_logging_item_is_not_growth():
    model, opt, batch = program()
    r = ledger(model, opt, step_for(model, opt, [], keep="item"), batch, phases=False)
    assert r.status is Status.PASS


# --- profiler, compiled, errors ------------------------------------------------------------------------------------


def test_profile_localizes_and_final_numbers_stay_unprofiled():
    model, opt, batch = program()
    r = ledger(model, opt, step_for(model, opt), batch, phases=False, profile=True)
    prof = r.details["profile"]
    assert prof["iterations"] == 3 and prof["top_ops"]
    assert any(row["op"].startswith("aten::") for row in prof["top_ops"])
    assert prof["top_ops"][0]["self_seconds_per_step"] >= prof["top_ops"][-1]["self_seconds_per_step"]
    assert finding(r, "perf.profile").evidence["unprofiled_step_median_s"] == r.details["step_seconds"]["median"]
    assert "10 times" in r.side_effects


def test_compiled_model_is_named_in_the_contract():
    model, opt, batch = program()
    compiled = torch.compile(model, backend="eager")  # not called: only the wrapper type matters here
    r = performance_ledger(step_for(model, opt), batch, model=compiled, optimizer=opt, phases=False, repeats=3)
    assert r.details["contract"]["execution"] == "compiled (torch.compile module)"


def test_step_that_raises_half_way_is_skipped_and_everything_restored():
    model, opt, batch = program()
    calls = []
    inner = step_for(model, opt)

    def step(b):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("data ran out")
        return inner(b)

    r = ledger(model, opt, step, batch)
    assert r.status is Status.SKIPPED and "step raised RuntimeError: data ran out" in r.reason


def test_oom_in_the_step_points_to_memory_phases():
    model, opt, batch = program()

    def step(b):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    r = ledger(model, opt, step, batch)
    assert r.status is Status.SKIPPED and "memory_phases" in r.reason


def test_broken_loss_fn_skips_phases_only():
    model, opt, batch = program()
    r = ledger(model, opt, step_for(model, opt), batch, loss_fn=lambda out, y: out)
    skipped = finding(r, "perf.phase_time")
    assert skipped.status is Status.SKIPPED and "not a scalar" in skipped.message
    assert r.status is Status.PASS


@pytest.mark.parametrize("args, kwargs, message", [
    ((3,), {}, "Expected `step` to be callable but got int"),
    ((None,), {}, "Expected `step` to be callable (step(batch) runs one training step) but got None"),
    ((print,), {"repeats": 1}, "Expected `repeats` to be an integer >= 3 but got 1"),
    ((print,), {"warmup": -1}, "Expected `warmup` to be an integer >= 0 but got -1"),
    ((print,), {"repeats": 5.0}, "Expected `repeats` to be an integer >= 3 but got 5.0"),
    ((print,), {"phases": "yes"}, "Expected `phases` to be True or False but got 'yes'"),
    ((print,), {"profile": 1}, "Expected `profile` to be True or False but got 1"),
    ((print,), {"model": "net"}, "Expected `model` to be a torch.nn.Module but got str"),
    ((print,), {"optimizer": 0.1}, "Expected `optimizer` to be a torch.optim.Optimizer but got float"),
    ((print,), {"loss_fn": 2}, "Expected `loss_fn` to be callable but got int"),
])
def test_bad_input_is_a_one_line_error(args, kwargs, message):
    with pytest.raises(InvalidArgument) as info:
        performance_ledger(*args, **kwargs)
    assert str(info.value) == message


# --- CUDA --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: synchronized timing and allocator counters")
def test_cuda_contract_memory_and_growth():
    model, opt, batch = program("cuda")
    r = ledger(model, opt, step_for(model, opt), batch, loss_fn=F.cross_entropy)
    assert r.status is Status.PASS, str(r)
    assert r.details["contract"]["device"].startswith("cuda")
    assert "torch.cuda.synchronize" in r.details["contract"]["synchronization"]
    mem = r.details["memory"]
    assert {"allocated", "reserved", "peak_allocated", "peak_reserved"} <= set(mem)
    assert mem["peak_allocated"] >= mem["allocated"] > 0 and mem["reserved"] >= mem["allocated"]
    assert "reset_peak_memory_stats" in r.side_effects
    history = []
    r = ledger(model, opt, step_for(model, opt, history), batch, repeats=6)
    assert (r.first_divergence.where, r.first_divergence.kind) == ("step", "memory.growth")
    assert finding(r, "memory.growth").evidence["cuda_allocated_bytes_per_iteration"] > 0
