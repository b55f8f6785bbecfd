"""RNG audit (chapter 14, E4): the table this PyTorch version produces, the repair verified, no trace
left on the caller's objects or RNGs, and the command line's exit codes."""

from __future__ import annotations

import json
import random
import textwrap

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import firstdiv
from firstdiv import InvalidArgument, Report, Status, WorkloadError, rng_audit
from firstdiv.lab._rng_probe import RngDemo, _Repair, find_held, repair_code
from firstdiv.lab.rng_audit import RngAuditReport, load_target
from firstdiv.render import to_text

R, NO = "REPRODUCES", "DOES NOT"
COLS = ["num_workers=0", "num_workers=2", "with the repair"]


class PerItem(Dataset):
    """Draws only from a generator seeded per item: reproduces everywhere."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.from_numpy(np.random.default_rng([7, i]).random(3))


class AllKinds(Dataset):
    """Holds one generator of every kind (one in a list, one in a dict) and draws from each."""

    def __init__(self):
        self.gen = torch.Generator().manual_seed(1)
        self.rngs = [np.random.default_rng(2)]
        self.by_name = {"legacy": np.random.RandomState(3)}
        self.py = random.Random(4)
        self.not_a_generator = [1, 2]

    def __len__(self):
        return 32

    def __getitem__(self, i):
        return (i, torch.rand(2, generator=self.gen), self.rngs[0].random(), self.by_name["legacy"].rand(),
                {"py": self.py.random()})


class Raising(AllKinds):
    def __getitem__(self, i):
        if i >= 0:
            np.random.rand()  # a draw before the failure must not leak either
            self.rngs[0].random()
            raise ValueError(f"boom at {i}")


class Unseeded(Dataset):
    """Draws from a generator created without a seed on every call: nothing the audit can reseed."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return np.random.default_rng().random(2)


class HeldRng(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return self.rng.random(2)


def reseed_held(worker_id):
    """A caller's worker_init_fn: gives each worker its own stream, from the seed PyTorch chose for it."""
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed % 2**32)


def batches_of_four(batch):
    if len(batch) != 4:
        raise AssertionError(f"collate got {len(batch)} items, expected the loader's batch_size 4")
    return torch.utils.data.default_collate(batch)


def rng_states():
    return (torch.get_rng_state().clone(), np.random.get_state(), random.getstate())


def assert_same_states(a, b):
    assert torch.equal(a[0], b[0])
    assert a[1][0] == b[1][0] and np.array_equal(a[1][1], b[1][1]) and a[1][2:] == b[1][2:]
    assert a[2] == b[2]


def held_states(ds):
    return (ds.gen.get_state().clone(), ds.rngs[0].bit_generator.state, ds.by_name["legacy"].get_state()[1].copy(),
            ds.py.getstate())


def assert_same_held(a, b):
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and np.array_equal(a[2], b[2]) and a[3] == b[3]


@pytest.fixture(scope="module")
def demo():
    return rng_audit(RngDemo(), (0, 2))


# -- the chapter's table ---------------------------------------------------------------------------------


def test_demo_table_on_this_pytorch(demo):
    # PyTorch 2.13: workers seed torch, numpy's legacy global and random from the loader's base seed,
    # so those reproduce with workers but not in the main process, where only torch is reseeded. The
    # held default_rng(0) advances across passes in the main process and is copied into every worker.
    assert demo.table == {
        "data order": dict(zip(COLS, [R, R, R])),
        "torch global": dict(zip(COLS, [R, R, R])),
        "numpy legacy global": dict(zip(COLS, [NO, R, R])),
        "random": dict(zip(COLS, [NO, R, R])),
        "dataset.rng": dict(zip(COLS, [NO, "REPRODUCES, DUPLICATED x8", R])),
        "item content": dict(zip(COLS, [NO, R, R])),
    }
    held = next(row for row in demo.details["rows"] if row["rng"] == "dataset.rng")
    # each worker's 8 draws replay the other's: 8 draws made from the same state by both workers
    assert held["cells"]["2"]["observed"] == {"0": 8, "1": 8} and demo.details["observed"]["num_workers=2"] == {"0": 8, "1": 8}
    assert held["cells"]["2"]["duplicated"] == 8 and held["cells"]["2"]["duplicated_workers"] == [0, 1]
    assert held["repair"]["2"] == {**held["repair"]["2"], "ok": True, "reproduces": True, "duplicated": 0}
    assert demo.details["repair_ok"] is True


def test_demo_report_is_self_consistent(demo):
    assert demo.status is Status.FAIL and not demo.ok
    div = demo.first_divergence
    # the stream every worker shares is ranked before the pass-to-pass differences of num_workers=0
    assert (div.where, div.kind) == ("dataset.rng", "rng.duplicated_across_workers")
    assert div.expected == "num_workers=2: a distinct stream in each worker"
    assert "workers [0, 1] share the dataset.rng stream" in div.observed and "worker 1: 8 items" in div.observed
    assert "copied into every worker" in div.hint and "worker_init_fn" in div.hint
    failing = [(f.where, f.check) for f in demo.findings if f.status is Status.FAIL]
    assert ("numpy legacy global", "num_workers=0") in failing
    assert ("dataset.rng", "num_workers=2") in failing and not any(c.startswith("repair") for _, c in failing)
    for row in demo.details["rows"]:  # every cell's text follows from its evidence
        for w, cell in row["cells"].items():
            assert cell["ok"] == (cell["reproduces"] and cell["duplicated"] == 0)
            assert demo.table[row["rng"]][f"num_workers={w}"].startswith(R if cell["reproduces"] else NO)
    order = demo.details["order"]
    assert order["num_workers=0"][0] == order["num_workers=0"][1] and len(order["num_workers=0"][0]) == 16
    assert sorted(order["num_workers=0"][0]) != order["num_workers=0"][0]  # shuffled
    assert order["repair, num_workers=2"][0] == order["repair, num_workers=2"][1]


def test_demo_renders_table_and_pasteable_repair(demo):
    text = to_text(demo, width=120)
    assert "FIRST DIVERGENCE at dataset.rng  [rng.duplicated_across_workers]" in text
    assert "dataset.rng          DOES NOT       REPRODUCES, DUPLICATED x8  REPRODUCES" in text
    assert "16 (num_workers=0) / 16 (num_workers=2) items per pass" in text
    assert "items observed per pass: num_workers=0: 16 in the main process; num_workers=2: 8 from worker 0, 8 from worker 1" in text
    assert "ds.rng = np.random.default_rng(derived_seed(seed, 0))" in text and "seed_worker(0)" in text
    back = Report.from_dict(json.loads(demo.to_json()))
    assert isinstance(back, RngAuditReport) and back.table == demo.table and back.first_divergence == demo.first_divergence


def test_demo_text_matches_golden(demo, golden):
    # the whole terminal text: divergence, per-setting item counts, table, repair, per-worker observations
    golden("rng_audit_demo.txt", to_text(demo, width=120))


def test_printed_repair_does_what_the_verified_repair_does():
    held = find_held(AllKinds())
    assert [g.name for g in held] == ["dataset.by_name['legacy']", "dataset.gen", "dataset.py", "dataset.rngs[0]"]
    code = repair_code(0, held).split("\nloader = ")[0]
    saved = rng_states()
    try:
        ours, pasted = AllKinds(), AllKinds()
        torch.manual_seed(11)
        _Repair(held).apply(ours)
        after_ours = rng_states()
        namespace = {"dataset": pasted}
        exec(code, namespace)  # noqa: S102 - the code we tell users to paste
        torch.manual_seed(11)
        namespace["seed_worker"](0)
        assert_same_states(after_ours, rng_states())
        assert_same_held(held_states(ours), held_states(pasted))
        assert ours.py.getstate() != AllKinds().py.getstate()  # it did reseed
    finally:
        torch.set_rng_state(saved[0]), np.random.set_state(saved[1]), random.setstate(saved[2])


# -- clean pipelines, loaders, honest repair --------------------------------------------------------------


def test_per_item_seeded_dataset_reproduces_everywhere():
    report = rng_audit(PerItem(), (0, 2), items=12, batch_size=3)
    assert report.ok and report.status is Status.PASS and report.first_divergence is None
    assert report.table["item content"] == dict(zip(COLS, [R, R, R]))
    assert report.table["numpy legacy global"] == dict(zip(COLS, ["not drawn"] * 3))
    assert "seed_worker" not in to_text(report, width=120)  # nothing to repair, nothing to paste


def test_loader_keeps_batch_size_worker_init_fn_and_generator():
    gen = torch.Generator().manual_seed(7)
    before = gen.get_state().clone()
    loader = DataLoader(HeldRng(), batch_size=4, shuffle=True, generator=gen, worker_init_fn=reseed_held,
                        collate_fn=batches_of_four)
    report = rng_audit(loader, (0, 2), items=8)
    assert report.status is Status.FAIL, report.reason  # the collate saw batches of four, or this is SKIPPED
    assert report.details["batch_size"] == 4 and report.details["source"] == "DataLoader over HeldRng"
    # the caller's worker_init_fn ran in the workers (no shared stream) and never without workers
    assert report.table["dataset.rng"] == dict(zip(COLS, [NO, R, R]))
    assert report.table["data order"] == dict(zip(COLS, [R, R, R]))
    assert "reseed_held(worker_id)" in report.details["repair_code"]
    assert torch.equal(gen.get_state(), before) and loader.batch_size == 4


def test_every_held_generator_kind_is_flagged_and_repaired_without_trace():
    ds = AllKinds()
    objects, states, callers = (ds.gen, ds.rngs[0], ds.by_name["legacy"], ds.py), held_states(ds), rng_states()
    report = rng_audit(ds, (0, 2), items=8, batch_size=2)
    for name in report.details["held"]:
        assert report.table[name]["num_workers=2"].startswith("REPRODUCES, DUPLICATED"), name
        assert report.table[name]["with the repair"] == R, name
    assert report.details["repair_ok"] is True
    assert (ds.gen, ds.rngs[0], ds.by_name["legacy"], ds.py) == objects
    assert_same_held(held_states(ds), states)
    assert_same_states(rng_states(), callers)


def test_repair_that_cannot_fix_a_stream_says_so():
    report = rng_audit(Unseeded(), 0, items=4)
    assert report.table["item content"] == {"num_workers=0": NO, "with the repair": "DOES NOT (num_workers=0)"}
    assert report.details["repair_ok"] is False and report.status is Status.FAIL
    assert report.first_divergence.where == "item content" and "cannot see" in report.first_divergence.hint
    assert "does NOT fix every stream" in to_text(report, width=120)


# -- could not run, misuse ---------------------------------------------------------------------------------


def test_raising_dataset_is_skipped_and_leaves_no_trace():
    ds = Raising()
    states, callers = held_states(ds), rng_states()
    report = rng_audit(ds, (0, 2), items=4)
    assert report.status is Status.SKIPPED and report.first_divergence is None
    assert "dataset[" in report.reason and "ValueError: boom at" in report.reason and "Traceback" not in report.reason
    assert "deep copies" in report.side_effects
    assert_same_held(held_states(ds), states)
    assert_same_states(rng_states(), callers)


def test_misuse_raises_and_iterable_datasets_are_skipped():
    with pytest.raises(InvalidArgument, match="map-style Dataset"):
        rng_audit(42)
    with pytest.raises(InvalidArgument, match="num_workers"):
        rng_audit(PerItem(), [])
    with pytest.raises(InvalidArgument, match="items"):
        rng_audit(PerItem(), items=0)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    assert "IterableDataset" in rng_audit(Stream()).reason
    with pytest.raises(WorkloadError, match="returned int"):
        load_target("os:getpid")
    with pytest.raises(WorkloadError, match="take no arguments"):
        load_target("math:floor")
    assert firstdiv.rng_audit is rng_audit


# -- command line ----------------------------------------------------------------------------------------


CLEAN_TARGET = textwrap.dedent("""
    import numpy as np, torch
    from torch.utils.data import Dataset

    class PerItem(Dataset):
        def __len__(self):
            return 16
        def __getitem__(self, i):
            return torch.from_numpy(np.random.default_rng([3, i]).random(2))

    def make():
        return PerItem()

    class Broken(PerItem):
        def __getitem__(self, i):
            raise KeyError(i)

    def broken():
        return Broken()
""")


def test_cli_builtin_demo_exits_1_with_json(cli):
    proc = cli("rng-audit", "--json", "--items", "8")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)["payload"]
    assert data["status"] == "FAIL" and data["first_divergence"]["where"] == "dataset.rng"
    assert data["first_divergence"]["kind"] == "rng.duplicated_across_workers"
    assert data["details"]["repair_ok"] is True


def test_cli_clean_file_target_exits_0(cli, tmp_path):
    (tmp_path / "pipe.py").write_text(CLEAN_TARGET)
    proc = cli("rng-audit", "pipe.py:make", "--workers", "0,2", "--items", "6", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RNG_AUDIT  PASS" in proc.stdout and "item content" in proc.stdout


@pytest.mark.parametrize("args, problem", [
    (("--workers", "0,x"), "Expected --workers like 0,2"),
    (("missing.py:make",), "does not exist"),
    (("pipe.py:broken", "--workers", "0"), "dataset["),
])
def test_cli_bad_input_exits_2_with_one_line(cli, tmp_path, args, problem):
    (tmp_path / "pipe.py").write_text(CLEAN_TARGET)
    proc = cli("rng-audit", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("firstdiv: error: ") and problem in proc.stderr and "Traceback" not in proc.stderr
