"""loader_timing: the limiting phase on inline loaders (a sleeping __getitem__, a slow collate_fn, a heavy
step, workers with a start-up cost, a plain iterable), sweeps, bad input, and no trace on the loader's
generators, the global RNGs and the objects the step closes over.

Timings assert orderings with wide margins (a 5 ms sleep per example against a ~0.1 ms step), never values."""

from __future__ import annotations

import functools
import json
import time
from statistics import median

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, default_collate

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.closure import closure_state
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.loader_timing import _checks as lc
from firstdiv.instruments.loader_timing import loader_timing

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




class Sleepy(Dataset):
    """``(features [3], label)``; each __getitem__ sleeps ``delay`` seconds and records its index."""

    def __init__(self, n: int = 24, delay: float = 0.005) -> None:
        self.n, self.delay, self.seen = n, delay, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.seen.append(int(i))
        if self.delay:
            time.sleep(self.delay)
        return torch.full((3,), float(i)), i % 2


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(12):
            yield torch.full((3,), float(i)), i % 2


def slow_collate(items):
    time.sleep(0.02)
    return default_collate(items)


def slow_start(_worker_id: int) -> None:
    time.sleep(0.3)


def fast_data(n: int = 24) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g))


def trainer(delay: float = 0.0):
    """A model, its optimizer, and a step that trains them on a batch (after sleeping ``delay`` seconds)."""
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        inputs, targets = batch
        if delay:
            time.sleep(delay)
        opt.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        opt.step()

    return model, opt, step


def timed(loader, *objects, **kwargs) -> Report:
    """loader_timing, asserting the objects, global RNGs and the loader's generator are as before."""
    gen = getattr(loader, "generator", None)
    gen_state = gen.get_state() if gen is not None else None
    before = Snapshot.take(*objects)
    report = loader_timing(loader, **kwargs)
    assert before.diff(Snapshot.take(*objects)) == []
    if gen is not None:
        assert torch.equal(gen.get_state(), gen_state)
    json.dumps(report.to_dict())  # JSON-safe, strictly (no NaN)
    return report


def finding_of(report, kind):
    return next(f for f in report.findings if f.check == kind)


def test_sleeping_getitem_starves_at_read_decode_transform():
    model, opt, step = trainer()
    loader = DataLoader(Sleepy(delay=0.005), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    r = timed(loader, model, opt, step=step, batches=4)
    assert r.status is Status.FAIL
    assert (r.first_divergence.where, r.first_divergence.kind) == ("read_decode_transform", "loader.starved")
    assert r.first_divergence.observed.startswith("Sleepy.__getitem__: ")
    d = r.details
    assert d["limiting_phase"] == "read_decode_transform" and d["starved"] is True
    assert d["wait_ms"]["median"] > 10 * d["work_ms"]["median"]  # 4 x 5 ms of sleep vs a tiny Linear step
    assert median(d["producer"]["getitem_ms"]) > 5 * median(d["producer"]["collate_ms"])
    assert d["wait_ms"]["n"] == 4 and d["batches_measured"] == 5
    assert set(d["wait_ms"]) >= {"median", "p95", "max"}
    t = d["throughput"]
    assert t["unit"] == "examples/s" and t["consumer"] > 10 * t["end_to_end"]
    assert "restored" in r.side_effects and "Linear" in r.side_effects
    text = str(r)
    assert "read_decode_transform" in text and "loader.starved" in text
    assert Report.from_dict(r.to_dict()).to_dict() == r.to_dict()


def test_slow_collate_starves_at_collate():
    model, opt, step = trainer()
    loader = DataLoader(fast_data(), batch_size=4, collate_fn=slow_collate)
    r = timed(loader, model, opt, step=step, batches=3)
    assert r.status is Status.FAIL
    assert (r.first_divergence.where, r.first_divergence.kind) == ("collate", "loader.starved")
    assert "in your code slow_collate" in finding_of(r, "loader.starved").message
    p = r.details["producer"]
    assert median(p["collate_ms"]) > 5 * median(p["getitem_ms"])


def test_heavy_step_passes_as_consumer_compute():
    model, opt, step = trainer(delay=0.01)
    r = timed(DataLoader(fast_data(), batch_size=4, shuffle=True), model, opt, step=step, batches=4)
    assert r.status is Status.PASS and r.first_divergence is None
    assert r.details["limiting_phase"] == "consumer_compute" and r.details["starved"] is False
    assert r.details["work_ms"]["median"] > 5 * r.details["wait_ms"]["median"]
    verdict = [f for f in r.findings if f.check == "loader.starved"]
    assert verdict[0].where == "consumer_compute" and verdict[0].status is Status.PASS


def test_no_step_times_the_loader_alone():
    r = timed(DataLoader(Sleepy(delay=0.002), batch_size=4), batches=2)
    assert r.status is Status.PASS and r.details["starved"] is None
    assert r.details["limiting_phase"] == "read_decode_transform"
    assert r.details["throughput"]["consumer"] is None
    assert [f.status for f in r.findings if f.check in ("loader.work", "loader.starved")] == [Status.SKIPPED] * 2
    assert r.side_effects == "none"


def test_step_raising_is_a_report_and_restores_the_model():
    model, opt, train = trainer()
    calls = []

    def step(batch):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("bad batch")
        train(batch)

    r = timed(DataLoader(fast_data(), batch_size=4), model, opt, step=step, batches=3)
    assert r.status is Status.SKIPPED and r.first_divergence is None
    assert "step raised ValueError: bad batch" in r.reason and "test_loader_timing.py" in r.reason
    assert "on batch 1" in r.reason and r.details["error_in"] == "step"
    assert "step called 2 times" in r.side_effects
    str(r)


class Broken(Sleepy):
    def __getitem__(self, i: int):
        if i == 5:
            raise KeyError("missing image 5")
        return super().__getitem__(i)


def test_loader_raising_and_empty_loader_are_reports():
    r = timed(DataLoader(Broken(delay=0), batch_size=4), batches=3)
    assert r.status is Status.SKIPPED and "the loader raised KeyError" in r.reason
    r = timed(DataLoader(fast_data(3), batch_size=4, drop_last=True), batches=2)
    assert r.status is Status.SKIPPED and "yielded no batches" in r.reason


def _order(loader) -> list[float]:
    return [float(v) for inputs, _ in loader for v in inputs[:, 0]]


def test_loader_generator_state_and_order_unchanged():
    seeded = DataLoader(Sleepy(n=12, delay=0), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))
    twin = DataLoader(Sleepy(n=12, delay=0), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))
    timed(seeded, batches=5, sweep={"batch_size": [2]})  # more batches than one epoch: two iterators
    assert _order(seeded) == _order(twin)

    unseeded = DataLoader(Sleepy(n=12, delay=0), batch_size=4, shuffle=True)  # shuffles from the global RNG
    rng = torch.get_rng_state()
    expected = _order(unseeded)
    torch.set_rng_state(rng)
    timed(unseeded, batches=2)  # timed() asserts the global RNG states are unchanged
    assert _order(unseeded) == expected


def test_producer_is_timed_on_the_first_batches_indices():
    data = Sleepy(n=16, delay=0)
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))
    r = timed(loader, batches=2, warmup=1)
    main, producer = data.seen[:12], data.seen[12:]  # warm-up + 2 batches, then min(3, batches) batches
    assert len(producer) == 8 and producer == main[:8]  # the same sampler draws
    assert r.details["producer"]["examples"] == [4, 4]


def test_sweep_has_a_row_for_each_setting():
    model, opt, step = trainer()
    loader = DataLoader(Sleepy(n=16, delay=0.002), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    sweep = {"num_workers": [0, 2], "batch_size": [2, 8], "pin_memory": [True], "prefetch_factor": [2],
             "persistent_workers": [True]}
    r = timed(loader, model, opt, step=step, batches=2, sweep=sweep)
    rows = r.details["sweep"]
    assert [(row["control"], row["value"]) for row in rows] == [(k, v) for k, vs in sweep.items() for v in vs]
    by = {(row["control"], row["value"]): row for row in rows}
    for key in [("num_workers", 0), ("num_workers", 2), ("batch_size", 2), ("batch_size", 8), ("pin_memory", True)]:
        assert by[key]["status"] == "ok" and by[key]["examples_per_s"] > 0 and by[key]["wait_ms"]["n"] >= 1
    assert by[("num_workers", 2)]["first_wait_ms"] is not None
    for key in [("prefetch_factor", 2), ("persistent_workers", True)]:
        assert by[key]["status"] == "skipped" and "num_workers > 0" in by[key]["reason"]
    if not torch.cuda.is_available():
        assert "only speeds host-to-device" in by[("pin_memory", True)]["notes"][0]
    assert {f.where for f in r.findings} >= {f"sweep:{k}" for k in sweep} | {"cpu_contention"}


def test_worker_startup_is_the_limit_of_short_epochs():
    model, opt, step = trainer(delay=0.002)
    loader = DataLoader(fast_data(16), batch_size=4, num_workers=1, worker_init_fn=slow_start)
    r = timed(loader, model, opt, step=step, batches=6)  # 7 batches: two epochs of 4, two worker starts
    assert r.status is Status.FAIL and r.first_divergence.where == "process_startup"
    d = r.details
    assert d["startup_batches"] == 2 and d["startup_per_epoch_ms"] > 250
    assert d["startup_per_batch_ms"] > d["wait_ms"]["median"]

    model, opt, step = trainer(delay=0.01)
    persistent = DataLoader(fast_data(16), batch_size=4, num_workers=1, worker_init_fn=slow_start, persistent_workers=True)
    r = timed(persistent, model, opt, step=step, batches=6)  # workers start once: paid once per run
    assert persistent._iterator is None  # the worker it started is gone again
    assert r.details["startup_batches"] == 1 and r.details["startup_per_batch_ms"] == 0.0
    assert r.details["limiting_phase"] != "process_startup"  # (a heavily loaded host may still starve it otherwise)


def test_iterable_dataset_is_split_too():
    r = timed(DataLoader(Stream(), batch_size=4), batches=2)
    assert "IterableDataset" in r.details["producer"]["source"] and r.details["producer"]["examples"] == [4, 4]


def test_plain_iterables():
    model, opt, step = trainer()
    batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(3)]

    def slow():
        for b in batches:
            time.sleep(0.01)
            yield b

    r = timed(slow(), model, opt, step=step, batches=5, sweep={"num_workers": [0, 1]})
    verdict = finding_of(r, "loader.starved")  # measured once: a one-shot iterator cannot be measured again
    assert r.status is Status.WARN and verdict.where == "producer" and verdict.status is Status.WARN
    assert "a one-shot iterator cannot be measured again to confirm it" in verdict.message
    assert r.details["exhausted"] is True and r.details["batches_measured"] == 3
    assert "took 3 batches from your iterator" in r.side_effects
    skipped = {f.where for f in r.findings if f.status is Status.SKIPPED}
    assert {"read_decode_transform", "collate", "sweep:num_workers"} <= skipped

    model, opt, step = trainer(delay=0.01)
    r = timed(batches, model, opt, step=step, batches=5)  # a list restarts like an epoch
    assert r.status is Status.PASS and r.details["batches_measured"] == 6 and r.details["exhausted"] is False


@pytest.mark.parametrize("kwargs, fragment", [
    ({"loader": 5}, "got int"),
    ({"loader": "batches"}, "got str"),
    ({"loader": torch.zeros(3)}, "got Tensor"),
    ({"loader": fast_data()}, "wrap it"),
    ({"loader": {"a": 1}}, "got dict"),
    ({"batches": 0}, "`batches`"),
    ({"batches": True}, "`batches`"),
    ({"warmup": -1}, "`warmup`"),
    ({"step": 3}, "`step` to be callable"),
    ({"sweep": {"workers": [1]}}, "'workers'"),
    ({"sweep": {"num_workers": []}}, "non-empty list"),
    ({"sweep": {"num_workers": [-1]}}, "integers >= 0"),
    ({"sweep": {"pin_memory": [1]}}, "booleans"),
    ({"sweep": [("num_workers", [0])]}, "got list"),
])
def test_bad_input_is_a_one_line_error(kwargs, fragment):
    args = {"loader": DataLoader(fast_data(), batch_size=4), **kwargs}
    with pytest.raises(InvalidArgument) as info:
        loader_timing(args.pop("loader"), **args)
    message = str(info.value)
    assert message.startswith("Expected") and "\n" not in message and fragment in message


def _row(workers, wait, work, eps):
    return {"control": "num_workers", "value": workers, "status": "ok", "examples_per_s": eps,
            "wait_ms": {"median": wait}, "work_ms": {"median": work}}


def test_cpu_contention_rule():
    found = lc.contention([_row(0, 10.0, 10.0, 200.0), _row(2, 1.0, 18.0, 210.0)])
    assert found["from_workers"] == 0 and found["to_workers"] == 2 and found["work_ms"] == [10.0, 18.0]
    assert lc.contention([_row(0, 10.0, 10.0, 200.0), _row(2, 1.0, 10.5, 380.0)]) is None  # workers helped
    assert lc.contention([_row(0, 10.0, 10.0, 200.0)]) is None
    starved = lc.Numbers(8.0, 10.0, 0.0, None, 7.0, 1.0, None, 2, False, 10, True)
    assert lc.decide(starved, found).phase == "cpu_contention"
    assert lc.decide(starved, None).phase == "read_decode_transform"


def test_limiting_phase_rules():
    def numbers(wait, work, stall=0.0, step=True, h2d=None):
        return lc.Numbers(wait, work, stall, None, 1.0, 0.1, h2d, 0, False, 10, step)

    assert lc.decide(numbers(0.4, 0.1), None).starved is False  # below the 0.5 ms noise floor
    assert lc.decide(numbers(6.0, 10.0), None).starved is True  # wait > 0.5 x work
    assert lc.decide(numbers(4.0, 10.0), None).starved is False
    assert lc.decide(numbers(4.0, 10.0, stall=0.3), None).starved is True  # the tail rule
    assert lc.decide(numbers(4.0, 10.0, step=False), None).starved is None
    assert lc.decide(numbers(1.0, 10.0, h2d=6.0), None).phase == "host_to_device"


def test_closure_state_finds_modules_and_optimizers():
    model, opt, step = trainer()

    class Program:
        def __init__(self):
            self.model, self.optimizer = model, opt

        def train_on(self, batch):
            step(batch)

    program = Program()
    found = {id(o) for o in closure_state(program.train_on)}
    assert found == {id(model), id(opt)}
    assert {id(o) for o in closure_state(functools.partial(lambda p, b: None, program))} == {id(model), id(opt)}
    assert {id(o) for o in closure_state(lambda b: program.train_on(b))} == {id(model), id(opt)}
    assert closure_state(lambda b: None) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: host-to-device copies are timed on CUDA only")
def test_host_to_device_is_timed_when_cuda_is_in_use():
    torch.cuda.init()
    model = nn.Linear(3, 2).cuda()

    def step(batch):
        inputs, _ = batch
        model(inputs.cuda(non_blocking=True)).sum().item()

    r = timed(DataLoader(fast_data(), batch_size=4, pin_memory=True), model, step=step, batches=3)
    h2d = next(f for f in r.findings if f.where == "host_to_device" and f.check == "loader.phase_time")
    assert h2d.status is Status.PASS and h2d.evidence["median_ms"] > 0 and h2d.evidence["pinned"] is True
    assert len(r.details["host_to_device_ms"]) == 3


def slow_batches(n: int = 12, delay: float = 0.01):
    for i in range(n):
        time.sleep(delay)
        yield torch.full((4, 3), float(i)), torch.zeros(4, dtype=torch.long)


def test_a_one_shot_iterator_starved_once_is_a_warning_not_a_failure():
    model, opt, step = trainer()
    r = timed(slow_batches(), model, opt, step=step, batches=6, warmup=1)
    verdict = finding_of(r, "loader.starved")
    assert verdict.status is Status.WARN and r.status is not Status.FAIL, verdict.message
    assert "not a FAIL: the wait is at a phase the producer's cost cannot split and was measured once" in verdict.message
    assert "re-iterable loader" in verdict.message


class Reiterable:
    """The same slow batches, iterable again: the starved verdict is measured twice and confirmed."""

    def __iter__(self):
        return slow_batches()


def test_a_reiterable_plain_loader_starved_twice_still_fails():
    model, opt, step = trainer()
    r = timed(Reiterable(), model, opt, step=step, batches=6, warmup=1)
    assert r.first_divergence is not None and r.first_divergence.kind == "loader.starved"
    assert "starved in two measurements in a row" in str(r.details["measurements"])


def test_a_stand_in_consumer_starved_is_a_warning_naming_step():
    from firstdiv._registry import _copy_consumer

    model, opt, _ = trainer()
    stand_in = _copy_consumer(model, opt, nn.functional.cross_entropy)
    loader = DataLoader(Sleepy(delay=0.005), batch_size=4)
    r = timed(loader, model, opt, step=stand_in, batches=4)
    verdict = finding_of(r, "loader.starved")
    assert verdict.status is Status.WARN and r.status is not Status.FAIL, verdict.message
    assert "not a FAIL: the consumer timed is one forward/backward/step of a copy of model" in verdict.message
    assert "pass step= (or train_step= to diagnose)" in verdict.message
