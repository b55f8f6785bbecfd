"""rng_audit with DataLoader workers: every worker observed whatever the batch size (or said why not), a stream
shared across workers ranked first, and the item and loader shapes real pipelines have (tuples, dicts, strings,
sparse tensors, iterable datasets, explicit generators and samplers) audited or SKIPPED with a reason."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
    get_worker_info,
)

from firstdiv import Status, rng_audit
from firstdiv.lab._rng_cover import MAX_COMPUTED, budget
from firstdiv.lab._rng_probe import find_held
from firstdiv.render import to_text

pytestmark = pytest.mark.usefixtures("one_thread")


class HeldRng(Dataset):
    """A generator made in __init__ (copied into every worker) drawn once per item."""

    def __init__(self, n=160):
        self.n, self.rng = n, np.random.default_rng(0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([float(i), self.rng.random()])


class NumpyGlobal(Dataset):
    def __init__(self, n=16):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([float(i), info.id if info else -1.0, np.random.rand()])


class PerIndex(Dataset):
    """Correct: each item's draws come from a generator seeded by its index."""

    def __init__(self, n=40, make=lambda i, rng: rng.random(3)):
        self.n, self.make = n, make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(i, np.random.default_rng([5, i]))


def _cell(report, rng, workers):
    return next(r for r in report.details["rows"] if r["rng"] == rng)["cells"][str(workers)]


def test_numpy_legacy_global_is_reseeded_per_worker_on_this_torch():
    # No worker_init_fn: PyTorch (>= 1.9) seeds np.random in each worker from the loader's base seed.
    torch.manual_seed(0)
    rows = torch.cat(list(DataLoader(NumpyGlobal(), batch_size=2, num_workers=2)))
    by_worker = {w: rows[rows[:, 1] == w, 2].tolist() for w in (0.0, 1.0)}
    assert len(by_worker[0.0]) == 8 and not set(by_worker[0.0]) & set(by_worker[1.0])
    report = rng_audit(NumpyGlobal(), (2,), items=8, batch_size=2)
    cell = _cell(report, "numpy legacy global", 2)
    assert cell["drawn"] and cell["reproduces"] and cell["duplicated"] == 0
    assert report.status is Status.PASS, report.first_divergence


def test_batch_larger_than_items_still_observes_every_worker():
    # items=16, batch_size=32, 2 workers: the first batch alone would be worker 0's 32 items.
    report = rng_audit(DataLoader(HeldRng(), batch_size=32, shuffle=True), (0, 2), items=16)
    assert report.details["observed"] == {"num_workers=0": {"main": 32}, "num_workers=2": {"0": 64, "1": 64}}
    div = report.first_divergence
    assert (div.where, div.kind) == ("dataset.rng", "rng.duplicated_across_workers")
    assert "workers [0, 1] share the dataset.rng stream" in div.observed and "worker 1: 64 items" in div.observed
    cover = {f.check: f for f in report.findings if f.where == "coverage"}
    assert cover["num_workers=2"].status is Status.PASS and cover["num_workers=2"].evidence["observed"] == {"0": 64,
                                                                                                           "1": 64}
    assert "items observed per pass: num_workers=0: 32 in the main process; num_workers=2: 64 from worker 0, 64 " \
           "from worker 1" in to_text(report, width=200)


def test_duplication_is_the_first_divergence_before_pass_to_pass_differences():
    # num_workers=0 does not reproduce the held generator (it carries over between passes); the workers share it.
    report = rng_audit(HeldRng(n=24), (0, 2), items=8, batch_size=2)
    failing = [(f.where, f.check) for f in report.findings if f.status is Status.FAIL]
    assert failing.index(("dataset.rng", "num_workers=0")) < failing.index(("dataset.rng", "num_workers=2"))
    assert report.first_divergence.kind == "rng.duplicated_across_workers"
    assert report.first_divergence.expected == "num_workers=2: a distinct stream in each worker"


def test_workers_the_dataset_cannot_reach_are_a_skipped_finding():
    report = rng_audit(DataLoader(HeldRng(n=32), batch_size=16), (3,), items=4)
    cover = next(f for f in report.findings if f.where == "coverage" and f.check == "num_workers=3")
    assert cover.status is Status.SKIPPED and "workers [2] received no batch" in cover.message
    assert "one epoch has 2 batches for 3 workers" in cover.message and "among workers [0, 1]" in cover.message
    assert report.first_divergence.where == "dataset.rng"  # still found among the workers it reached
    assert "not observed (num_workers=3): workers [2]" in to_text(report, width=200)
    alone = rng_audit(DataLoader(PerIndex(n=8), batch_size=8), (2,))
    cover = next(f for f in alone.findings if f.where == "coverage" and f.check == "num_workers=2")
    assert cover.status is Status.SKIPPED and "could not be checked" in cover.message
    assert alone.status is Status.PASS  # what could not be checked is no FAIL


def test_budget_caps_the_cost_and_says_so(monkeypatch):
    assert budget(16, 32, 2, 1, 100).batches == 4  # two batches per worker
    assert budget(16, 1, 2, 1, 100).batches == 16  # items already give each worker 8
    assert budget(16, 3, 4, 1, 100).batches == 8  # two batches (6 items) per worker
    assert budget(16, 32, 2, 1, 3).batches == 3  # never more than one epoch
    assert budget(1, 64, 4, 1, 100).batches == 4  # 4 x 2 x 64 + prefetch exceeds 512 items: one batch per worker
    big = budget(1, 128, 4, 1, 100)  # even one batch per worker exceeds it: only worker 0
    assert (big.batches, big.capped, MAX_COMPUTED) == (1, True, 512)
    monkeypatch.setattr("firstdiv.lab._rng_cover.MAX_COMPUTED", 32)  # the same at a size a test can afford
    report = rng_audit(DataLoader(PerIndex(n=64), batch_size=16), (2,), items=1)
    cover = next(f for f in report.findings if f.where == "coverage" and f.check == "num_workers=2")
    assert cover.status is Status.SKIPPED and "exceed the audit's 32 items per pass" in cover.message
    assert "smaller batch_size=" in cover.message and report.status is Status.PASS
    monkeypatch.undo()
    sampler = BatchSampler(RandomSampler(range(160)), 32, drop_last=False)  # planned by its batch_size too
    report = rng_audit(DataLoader(HeldRng(), batch_sampler=sampler), (2,), items=16)
    assert report.details["observed"] == {"num_workers=2": {"0": 64, "1": 64}}
    assert report.first_divergence.where == "dataset.rng"


@pytest.mark.parametrize("make", [
    lambda i, rng: (torch.from_numpy(rng.random(3)), int(i % 3)),
    lambda i, rng: {"ids": torch.from_numpy(rng.integers(0, 9, 4)), "text": "tok " * int(rng.integers(1, 4))},
    lambda i, rng: "".join(rng.choice(list("acgt"), 6)),
    lambda i, rng: torch.from_numpy(rng.random((3, 4)) * (rng.random((3, 4)) > 0.7)).to_sparse(),
    lambda i, rng: torch.from_numpy(rng.random((3, 4)) * (rng.random((3, 4)) > 0.7)).to_sparse_csr(),
    lambda i, rng: object(),  # no bytes to read: compared by type only
    lambda i, rng: np.array([f"img_{i}.png", {"boxes": rng.random(2).tolist()}], dtype=object),  # bytes are addresses
    lambda i, rng: (torch.Generator().manual_seed(int(i)), i),  # compared by its state
], ids=["tuple", "dict", "str", "sparse_coo", "sparse_csr", "object", "object_array", "generator"])
def test_common_item_types_reproduce_as_a_bare_dataset(make):
    report = rng_audit(PerIndex(n=12, make=make), (0, 2), items=4, batch_size=2)
    assert report.status is Status.PASS, (report.reason, report.first_divergence)
    assert report.table["item content"] == {"num_workers=0": "REPRODUCES", "num_workers=2": "REPRODUCES",
                                            "with the repair": "REPRODUCES"}


def test_sparse_items_through_the_default_collate_are_skipped_with_the_loaders_reason():
    report = rng_audit(DataLoader(PerIndex(n=8, make=lambda i, rng: torch.eye(2).to_sparse()), batch_size=2), (0,))
    assert report.status is Status.SKIPPED and "sparse tensors" in report.reason and "Traceback" not in report.reason


def test_loaders_with_generator_and_samplers():
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state().clone()
    for loader in (DataLoader(PerIndex(), batch_size=4, shuffle=True, generator=gen),
                   DataLoader(PerIndex(), batch_size=4, sampler=SubsetRandomSampler(range(0, 40, 2), generator=gen)),
                   # with replacement the same index can reach two workers: same draws, not a shared stream
                   DataLoader(PerIndex(), batch_size=4, sampler=WeightedRandomSampler([1.0] * 40, 40, generator=gen))):
        report = rng_audit(loader, (0, 2), items=8)
        assert report.status is Status.PASS, (report.reason, report.first_divergence)
        assert report.table["data order"]["num_workers=2"] == "REPRODUCES"
    assert torch.equal(gen.get_state(), state)


def test_iterable_datasets_are_skipped_with_the_reason():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(8))

    for obj in (Stream(), DataLoader(Stream(), batch_size=2, num_workers=2)):
        report = rng_audit(obj)
        assert report.status is Status.SKIPPED and "IterableDataset" in report.reason and "map-style" in report.reason


def test_random_module_shared_by_a_constant_worker_init_fn_is_named():
    def same_seed(worker_id):
        random.seed(7)

    class Masking(PerIndex):
        def __getitem__(self, i):
            return [random.random() < 0.15 for _ in range(4)]

    report = rng_audit(DataLoader(Masking(n=32), batch_size=4, worker_init_fn=same_seed), (2,))
    div = report.first_divergence
    assert (div.where, div.kind) == ("random", "rng.duplicated_across_workers") and "one constant" in div.hint
    assert report.details["repair_ok"] is True  # the repair reseeds after the caller's worker_init_fn


def test_generators_in_wrapped_datasets_are_found_named_and_repaired():
    full = HeldRng(n=64)
    train, _ = torch.utils.data.random_split(full, [48, 16], generator=torch.Generator().manual_seed(0))
    both = torch.utils.data.ConcatDataset([train, HeldRng(n=8)])
    assert [g.name for g in find_held(both)] == ["dataset.datasets[0].dataset.rng", "dataset.datasets[1].rng"]
    state = full.rng.bit_generator.state
    report = rng_audit(DataLoader(train, batch_size=4, shuffle=True), (2,))
    div = report.first_divergence
    assert (div.where, div.kind) == ("dataset.dataset.rng", "rng.duplicated_across_workers")
    assert report.details["repair_ok"] is True
    assert "ds.dataset.rng = np.random.default_rng(derived_seed(seed, 0))" in report.details["repair_code"]
    assert full.rng.bit_generator.state == state


def test_a_sampler_that_cannot_be_copied_is_skipped_with_the_reason():
    class LockedSampler(torch.utils.data.Sampler):
        def __init__(self):
            import threading

            self.lock = threading.Lock()

        def __len__(self):
            return 8

        def __iter__(self):
            return iter(range(8))

    report = rng_audit(DataLoader(PerIndex(n=8), batch_size=2, sampler=LockedSampler()), (0,))
    assert report.status is Status.SKIPPED and report.reason.startswith("copy.deepcopy(loader.sampler) raised TypeError")
    assert "make LockedSampler deep-copyable" in report.reason
