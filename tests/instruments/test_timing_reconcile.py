"""Timing verdicts on a busy machine: loader_timing reconciles a starved wait with the producer's measured cost
(repeating while they disagree) and reports the machine's load; train_step= is the consumer; performance_ledger
reconciles its phases with the whole step; common inputs (sparse, nested, bf16/fp16, channels_last, compiled)
give a report, never a raw exception."""

from __future__ import annotations

import sys
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from firstdiv import InvalidArgument, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.loader_timing import _checks as lc
from firstdiv.instruments.loader_timing import _reconcile as rc
from firstdiv.instruments.loader_timing import loader_timing
from firstdiv.instruments.performance_ledger import _reconcile as prc
from firstdiv.instruments.performance_ledger import performance_ledger

pytestmark = pytest.mark.usefixtures("one_thread")


def numbers(wait, work, getitem, collate, stall=0.0):
    return lc.Numbers(wait, work, stall, None, getitem, collate, None, 0, False, 10, True)


# --- loader_timing: the reconciliation rules ------------------------------------------------------------------


def test_a_wait_the_producer_cannot_explain_is_not_blamed_on_getitem():
    n = numbers(wait=12.0, work=5.0, getitem=0.9, collate=0.1)  # a 12 ms stall, a 1 ms producer
    v = lc.decide(n, None)
    assert v.starved and v.phase == "read_decode_transform"
    ok, why = rc.explained(n, v)
    assert ok is False and "cannot explain" in why
    assert rc.settled([(n, v)], can_repeat=True) == (False, why)  # measure again
    assert rc.settled([(n, v)], can_repeat=False)[0]  # an iterator: decided, as noise
    noise = rc.noise_verdict(n, v, why, 3)
    assert noise.starved is False and "noise" in noise.rule


def test_a_producer_that_costs_the_wait_explains_it():
    n = numbers(wait=80.0, work=1.0, getitem=80.0, collate=0.2)  # 4 items x 20 ms
    v = lc.decide(n, None)
    assert rc.explained(n, v)[0] is True and rc.settled([(n, v)], True)[0]
    tail = numbers(wait=0.6, work=2.0, getitem=2.5, collate=0.1, stall=0.5)  # tail rule: stalls longer than work
    assert rc.explained(tail, lc.decide(tail, None))[0] is True
    tail_noise = numbers(wait=0.6, work=2.0, getitem=0.3, collate=0.1, stall=0.5)
    assert rc.explained(tail_noise, lc.decide(tail_noise, None))[0] is False


def test_an_unsplit_phase_must_be_starved_twice():
    n = lc.Numbers(30.0, 1.0, 0.0, None, None, None, None, 0, False, 10, True)
    v = lc.decide(n, None)
    assert v.phase == "producer" and rc.explained(n, v)[0] is None
    assert not rc.settled([(n, v)], True)[0] and rc.settled([(n, v), (n, v)], True)[0]


def test_machine_load_is_measured():
    facts = rc.Load.begin().end().facts()
    assert facts["cpus"] >= 1 and facts["wall_s"] >= 0 and set(facts) >= {"loadavg", "cpu_share", "busy"}
    assert "CPUs" in rc.text(facts)


# --- loader_timing: measured again on real loaders ------------------------------------------------------------


class Stalled(Dataset):
    """Fast items; while ``stall_calls`` lasts, or whenever the DataLoader's own fetcher asks (``loop_only``), each
    item first waits ``stall`` seconds: a machine stall the producer timed on its own does not see."""

    def __init__(self, stall_calls: int = 0, loop_only: bool = False, stall: float = 0.01) -> None:
        self.left, self.loop_only, self.stall = stall_calls, loop_only, stall
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(16, 3, generator=g), torch.randint(0, 2, (16,), generator=g)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i):
        in_loop = sys._getframe(2).f_code.co_name == "fetch"  # torch's _MapDatasetFetcher.fetch
        if self.left > 0 or (self.loop_only and in_loop):
            self.left -= 1
            time.sleep(self.stall)
        return self.x[i], self.y[i]


def trainer():
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(batch):
        x, y = batch
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt, train_step


def test_a_stall_during_the_first_measurement_is_measured_again_and_passes():
    model, opt, train_step = trainer()
    before = Snapshot.take(model, opt)
    r = loader_timing(DataLoader(Stalled(stall_calls=10), batch_size=2), train_step=train_step, batches=4)
    assert before.diff(Snapshot.take(model, opt)) == []
    assert r.status is not Status.FAIL, str(r)
    ms = r.details["measurements"]
    assert len(ms) >= 2 and ms[0]["starved"] is True and "cannot explain" in ms[0]["settled"]
    assert ms[-1]["starved"] is False
    note = next(f for f in r.findings if f.check == "loader.machine")
    assert "measured" in note.message and r.details["machine"]["cpus"] >= 1


def test_waits_only_in_the_loop_are_machine_noise_not_a_slow_getitem():
    *_, train_step = trainer()
    r = loader_timing(DataLoader(Stalled(loop_only=True), batch_size=2), train_step=train_step, batches=3)
    assert r.status is Status.PASS, str(r)
    assert len(r.details["measurements"]) == rc.TRIES
    verdict = next(f for f in r.findings if f.check == "loader.starved")
    assert "noise" in verdict.message and "cannot explain" in verdict.message


def test_train_step_is_the_consumer_and_both_consumers_is_an_error():
    *_, train_step = trainer()
    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randint(0, 2, (8,))), batch_size=2)
    r = loader_timing(loader, train_step=train_step, batches=3)
    assert r.details["work_ms"]["n"] == 3 and "Linear" in r.side_effects
    with pytest.raises(InvalidArgument, match="both `step` and `train_step`"):
        loader_timing(loader, train_step, train_step=train_step)
    with pytest.raises(InvalidArgument, match="train_step"):
        loader_timing(loader, train_step=3)


# --- performance_ledger: phases against the step ---------------------------------------------------------------


def measured(step, phases, step_cpu=(), phases_cpu=None):
    return prc.Measured(list(step), [0.0] * len(step), phases, list(step_cpu), [0.0] * len(step_cpu), phases_cpu or {})


def test_compare_rules():
    agree = prc.compare(measured([0.010] * 5, {"forward": [0.004] * 5, "backward": [0.005] * 5}))
    assert agree["agree"] and abs(agree["ratio"] - 0.9) < 1e-9
    five = prc.compare(measured([0.002] * 5, {"forward": [0.004] * 5, "backward": [0.006] * 5}))
    assert not five["agree"] and five["ratio"] == pytest.approx(5.0)
    tiny = prc.compare(measured([0.00001] * 5, {"forward": [0.0001] * 5}))  # 10x, but 90 us: within noise
    assert tiny["agree"]
    noisy = prc.compare(measured([0.001, 0.001, 0.001, 0.02, 0.001],
                                 {"forward": [0.004, 0.004, 0.03, 0.004, 0.03]}))  # wide spreads excuse nothing
    assert not noisy["agree"] and noisy["iqr_sum_s"] > noisy["phase_sum_s"] - noisy["step_plus_wait_s"]
    calls = []
    _, rounds = prc.reconcile(measured([0.002] * 5, {"f": [0.01] * 5}),
                              lambda: calls.append(1) or measured([0.01] * 5, {"f": [0.01] * 5}))
    assert len(calls) == 1 and [r["agree"] for r in rounds] == [False, True]


def test_a_loaded_machine_stretching_the_wall_clock_is_said_not_warned():
    # the step read at 20 ms of wall-clock while other processes held the cores; its CPU time is the phases'
    m = measured([0.020] * 5, {"forward": [0.002] * 5, "backward": [0.002] * 5}, [0.004] * 5,
                 {"forward": [0.002] * 5, "backward": [0.002] * 5})
    _, rounds = prc.reconcile(m, lambda: m, use_cpu=True)  # no second measurement: the load would stretch it again
    assert len(rounds) == 1 and rounds[-1]["cpu"]["agree"] and not rounds[-1]["agree"]
    c = prc.reconcile_check(rounds)
    assert c.finding.status is Status.PASS and "CPU time agrees" in c.finding.message
    both = measured([0.020] * 5, {"forward": [0.002] * 5}, [0.020] * 5, {"forward": [0.002] * 5})
    assert prc.reconcile_check(prc.reconcile(both, lambda: None, use_cpu=True)[1]).finding.status is Status.WARN


def program():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, (torch.randn(32, 16), torch.randint(0, 4, (32,)))


def test_phases_five_times_the_step_warn_with_the_numbers():
    torch.manual_seed(0)  # phases of several ms, far beyond a loaded machine's noise; a step of microseconds
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(256, 256), torch.randint(0, 4, (256,)))
    before = Snapshot.take(model, opt)

    def step(b):  # a step that does far less than the phases time: one small forward, no backward
        with torch.no_grad():
            model[0](b[0][:1])
    r = performance_ledger(step, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=5, warmup=1)
    assert before.diff(Snapshot.take(model, opt)) == []
    rec = next(f for f in r.findings if f.check == "perf.reconcile")
    assert r.status is Status.WARN and rec.status is Status.WARN, str(r)
    assert "disagree: " in rec.message and "ratio" in rec.message and "(in CPU time too)" in rec.message
    assert len(r.details["reconcile"]) == 1  # CPU time far outside the bounds: the work differs, not measured again


def test_cpu_time_far_outside_the_bounds_is_measured_once_near_them_again():
    calls = []
    far = measured([0.002] * 5, {"f": [0.01] * 5}, [0.002] * 5, {"f": [0.01] * 5})  # CPU ratio 5: other work
    _, rounds = prc.reconcile(far, lambda: calls.append(1) or far, use_cpu=True)
    assert calls == [] and len(rounds) == 1
    near = measured([0.004] * 5, {"f": [0.01] * 5}, [0.004] * 5, {"f": [0.01] * 5})  # CPU ratio 2.5: maybe noise
    _, rounds = prc.reconcile(near, lambda: calls.append(1) or near, use_cpu=True)
    assert len(calls) == prc.ROUNDS - 1 and len(rounds) == prc.ROUNDS


def test_a_full_train_step_reconciles():
    model, opt, batch = program()

    def step(b):
        opt.zero_grad()
        F.cross_entropy(model(b[0]), b[1]).backward()
        opt.step()
    r = performance_ledger(step, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=5, warmup=1)
    rec = next(f for f in r.findings if f.check == "perf.reconcile")
    assert rec.status is Status.PASS and r.status is Status.PASS, str(r)


# --- common inputs: a report, never a raw exception -----------------------------------------------------------


def _inputs():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    lin = nn.Linear(4, 2)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 2)).to(memory_format=torch.channels_last)
    img = torch.randn(8, 3, 8, 8).to(memory_format=torch.channels_last)
    return {
        "sparse": (lin, (x.to_sparse(), y), lambda m, b: m(b[0].to_dense())),
        "nested": (lin, {"x": (x,), "y": y}, lambda m, b: m(b["x"][0])),
        "bf16": (nn.Linear(4, 2).to(torch.bfloat16), (x.bfloat16(), y), lambda m, b: m(b[0]).float()),
        "fp16": (nn.Linear(4, 2).half(), (x.half(), y), lambda m, b: m(b[0]).float()),
        "channels_last": (cnn, (img, y), lambda m, b: m(b[0])),
        "dtype_mismatch": (nn.Linear(4, 2).to(torch.bfloat16), (x, y), lambda m, b: m(b[0])),
    }


@pytest.mark.parametrize("name", list(_inputs()))
def test_common_inputs_give_a_report(name):
    model, batch, forward = _inputs()[name]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    target = batch["y"] if isinstance(batch, dict) else batch[1]

    def step(b):
        opt.zero_grad()
        F.cross_entropy(forward(model, b).float(), target).backward()
        opt.step()
    before = Snapshot.take(model, opt)
    r = performance_ledger(step, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=3, warmup=1)
    assert before.diff(Snapshot.take(model, opt)) == []
    assert r.status is not Status.FAIL, str(r)
    if name == "dtype_mismatch":
        assert r.status is Status.SKIPPED and "dtype" in r.reason
    loader = DataLoader(TensorDataset(batch[0].to_dense() if name == "sparse" else batch[0], target), batch_size=4) \
        if not isinstance(batch, dict) else [batch, batch, batch]
    lt = loader_timing(loader, train_step=lambda b: step(batch), batches=2)
    assert lt.status is not Status.FAIL, str(lt)


def test_compiled_model_gives_a_report():
    model, opt, batch = program()
    compiled = torch.compile(model, backend="eager")

    def step(b):
        opt.zero_grad()
        F.cross_entropy(compiled(b[0]), b[1]).backward()
        opt.step()
    r = performance_ledger(step, batch, model=compiled, optimizer=opt, loss_fn=F.cross_entropy, repeats=3, warmup=1)
    assert r.status is not Status.FAIL and r.details["contract"]["execution"].startswith("compiled"), str(r)


def test_sparse_items_with_the_default_collate_are_skipped_with_the_reason():
    class Sparse(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.eye(3)[i % 3].to_sparse(), i % 2
    r = loader_timing(DataLoader(Sparse(), batch_size=4), train_step=lambda b: None, batches=2)
    assert r.status is Status.SKIPPED and "sparse" in r.reason and "collate_fn" in r.reason
