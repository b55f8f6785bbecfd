"""Observed passes for the RNG audit: a probe around the dataset records RNG states (never drawing),
a loader rebuilt like the caller's, and the repair that :mod:`firstdiv.lab.rng_audit` verifies."""

from __future__ import annotations

import copy
import hashlib
import pickle
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, get_worker_info

from ._rng_cover import Budget, budget, epoch_batches

GLOBALS = ("torch global", "numpy legacy global", "random")
_HELD_KINDS = ((np.random.Generator, "numpy.Generator"), (np.random.RandomState, "numpy.RandomState"),
               (torch.Generator, "torch.Generator"), (random.Random, "random.Random"))


# -- observing without drawing ---------------------------------------------------------------------


def _feed(h: Any, obj: Any) -> None:
    """Feed a structural description of ``obj`` (states, tensors, arrays, containers) into hash ``h``."""
    if isinstance(obj, torch.Tensor):
        _feed_tensor(h, obj)
    elif isinstance(obj, np.ndarray):
        h.update(f"A{obj.dtype}{obj.shape}".encode())
        if obj.dtype.hasobject:  # its bytes are addresses: describe the elements instead
            _feed(h, obj.ravel().tolist())
        else:
            h.update(np.ascontiguousarray(obj).tobytes())
    elif _kind(obj):  # a generator handed out in an item: its state
        h.update(_kind(obj).encode())
        _feed(h, _state(obj, _kind(obj)))
    elif isinstance(obj, dict):
        h.update(b"{")
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"(" if isinstance(obj, tuple) else b"[")
        for value in obj:
            _feed(h, value)
        h.update(b")")
    elif obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif callable(getattr(obj, "tobytes", None)):  # PIL images and other buffers
        h.update(type(obj).__name__.encode() + obj.tobytes())
    else:
        try:
            h.update(pickle.dumps(obj))
        except Exception:  # noqa: BLE001 (content we cannot serialise counts by type only)
            h.update(f"<{type(obj).__qualname__}>".encode())


def _feed_tensor(h: Any, obj: torch.Tensor) -> None:
    t = obj.detach().cpu()
    h.update(f"T{t.dtype}{t.layout}{tuple(t.shape)}".encode())
    if t.layout != torch.strided:  # sparse COO/CSR/CSC/BSR: the coalesced indices and values
        t = t.to_sparse_coo().coalesce() if t.layout != torch.sparse_coo else t.coalesce()
        for part in (t.indices(), t.values()):
            _feed_tensor(h, part)
        return
    if t.is_quantized:
        t = t.dequantize()
    t = t.contiguous()
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def _digest(obj: Any) -> str:
    h = hashlib.blake2b(digest_size=8)
    try:
        _feed(h, obj)
    except Exception:  # noqa: BLE001 (an item we cannot read byte by byte is described by type and repr)
        h = hashlib.blake2b(digest_size=8)  # by type only: a repr may hold an address that differs per pass
        h.update(f"<{type(obj).__qualname__}>".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Held:
    """A generator the dataset holds: ``dataset.<attr>`` or ``dataset.<attr>[key]``, also in a dataset it wraps
    (``via``: the steps ``(attr, key or None)`` to it, as ``Subset.dataset`` or ``ConcatDataset.datasets[k]``)."""

    name: str
    attr: str
    key: Any
    kind: str
    via: tuple[tuple[str, Any], ...] = ()

    def _holder(self, ds: Any) -> Any:
        for attr, key in self.via:
            ds = getattr(ds, attr, None) if key is None else getattr(ds, attr)[key]
        return ds

    def get(self, ds: Any) -> Any:
        obj = getattr(self._holder(ds), self.attr, None)
        return obj if self.key is None or obj is None else obj[self.key]

    def put(self, ds: Any, value: Any) -> None:
        holder = self._holder(ds)
        if self.key is None:
            setattr(holder, self.attr, value)
        else:
            getattr(holder, self.attr)[self.key] = value

    def code(self, root: str = "ds") -> str:
        steps = [*self.via, (self.attr, self.key)]
        return root + "".join(f".{a}" + ("" if k is None else f"[{k!r}]") for a, k in steps)


def _kind(obj: Any) -> str | None:
    return next((name for cls, name in _HELD_KINDS if isinstance(obj, cls)), None)


def find_held(ds: Any, via: tuple[tuple[str, Any], ...] = (), seen: set[int] | None = None) -> list[Held]:
    """Generators among the dataset's attributes and one level into its lists and dicts, and the same in
    the datasets it wraps (a Subset's, a ConcatDataset's), three levels deep."""
    seen = set() if seen is None else seen
    if id(ds) in seen or len(via) > 3:
        return []
    seen.add(id(ds))
    found, inner = [], []
    for attr, value in sorted(getattr(ds, "__dict__", {}).items()):
        if _kind(value):
            found.append(Held(Held("", attr, None, "", via).code("dataset"), attr, None, _kind(value), via))
        elif isinstance(value, Dataset):
            inner.append(((*via, (attr, None)), value))
        elif isinstance(value, (list, dict)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if _kind(v):
                    found.append(Held(Held("", attr, k, "", via).code("dataset"), attr, k, _kind(v), via))
                elif isinstance(v, Dataset):
                    inner.append(((*via, (attr, k)), v))
    for path, value in inner:
        found += find_held(value, path, seen)
    return found


def _state(obj: Any, kind: str) -> Any:
    if kind == "numpy.Generator":
        return obj.bit_generator.state
    return obj.getstate() if kind == "random.Random" else obj.get_state()


def _states(ds: Any, held: list[Held]) -> dict[str, str]:
    py = hashlib.blake2b(repr(random.getstate()).encode(), digest_size=8).hexdigest()  # 625 ints: one repr
    out = dict(zip(GLOBALS, (_digest(torch.get_rng_state()), _digest(np.random.get_state()), py)))
    for g in held:
        obj = g.get(ds)
        out[g.name] = _digest(_state(obj, g.kind)) if _kind(obj) == g.kind else "missing"
    return out


class _Probe(Dataset):
    """Calls the user's ``__getitem__`` between two observations; attribute access reaches the user's
    dataset, so a ``worker_init_fn`` that sets ``get_worker_info().dataset.rng`` works as without it."""

    def __init__(self, inner: Any, held: list[Held]) -> None:
        self.__dict__.update(_fd_inner=inner, _fd_held=held)

    def __len__(self) -> int:
        return len(self._fd_inner)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_fd_inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fd_inner, name, value)

    def __getitem__(self, index: Any) -> tuple[dict[str, Any], Any]:
        info = get_worker_info()
        rec: dict[str, Any] = {"index": int(index) if isinstance(index, (int, np.integer)) else repr(index),
                               "worker": info.id if info is not None else -1}
        rec["before"] = _states(self._fd_inner, self._fd_held)
        try:
            item = self._fd_inner[index]
        except Exception as exc:  # noqa: BLE001 (the user's __getitem__ failing is recorded, not raised)
            return {**rec, "error": f"{type(exc).__name__}: {exc}"}, None
        rec["after"] = _states(self._fd_inner, self._fd_held)
        return {**rec, "item": _digest(item)}, item


class _ProbeCollate:
    """Runs the loader's own collate (its draws count; none for a bare Dataset) and returns the probe records."""

    def __init__(self, collate: Any, batched: bool) -> None:
        self.collate, self.batched = collate, batched

    def __call__(self, batch: Any) -> list[dict[str, Any]]:
        pairs = batch if self.batched else [batch]
        records = [rec for rec, _ in pairs]
        if self.collate is not None and not any("error" in rec for rec in records):
            self.collate([item for _, item in pairs] if self.batched else pairs[0][1])
        return records


def derived_seed(seed: int, k: int) -> int:
    """An independent seed for the k-th generator a dataset holds."""
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


class _Repair:
    """The repair's ``worker_init_fn``; :func:`repair_code` prints the same steps as pasteable code."""

    def __init__(self, held: list[Held], user_init: Any = None) -> None:
        self.held, self.user_init = held, user_init

    def __call__(self, worker_id: int) -> None:
        if self.user_init is not None:
            self.user_init(worker_id)
        self.apply(get_worker_info().dataset)

    def apply(self, ds: Any) -> None:
        ds = getattr(ds, "_fd_inner", ds)
        seed = torch.initial_seed() % 2**32  # per worker: the loader's generator + worker id
        np.random.seed(seed)
        random.seed(seed)
        for k, g in enumerate(self.held):
            if g.kind == "numpy.Generator":
                g.put(ds, np.random.default_rng(derived_seed(seed, k)))
            elif g.kind == "torch.Generator":
                g.get(ds).manual_seed(derived_seed(seed, k))
            else:
                g.get(ds).seed(derived_seed(seed, k))


# -- running passes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    dataset: Any
    loader: DataLoader | None
    batch_size: int | None
    items: int
    seed: int
    held: list[Held]


def _seed_torch(seed: int) -> None:
    # torch.manual_seed without its lazy CUDA seeding, which would outlive the audit if CUDA starts later
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


class CopyError(Exception):
    """A part of the caller's loader that the audit could not copy (it never runs on the caller's own)."""


def _copy(obj: Any, memo: dict[int, Any], what: str) -> Any:
    try:
        return copy.deepcopy(obj, memo)
    except Exception as exc:  # noqa: BLE001 (any copy failure is the caller's object's, said in one line)
        raise CopyError(f"copy.deepcopy(loader.{what}) raised {type(exc).__name__}: {exc}; the audit runs each pass on "
                        f"a copy to leave yours untouched: make {type(obj).__name__} deep-copyable") from None


def _loader(plan: Plan, probe: _Probe, workers: int, repair: _Repair | None) -> DataLoader:
    src = plan.loader
    gen = torch.Generator().manual_seed(plan.seed) if repair else None
    batched = plan.batch_size is not None or (src is not None and src.batch_sampler is not None)
    collate = src.collate_fn if src is not None else None  # a bare Dataset: its items need not be collatable
    kw: dict[str, Any] = {"num_workers": workers, "collate_fn": _ProbeCollate(collate, batched)}
    if workers:  # prefetching decides how many batches are computed ahead, not what a worker draws for an item
        kw["prefetch_factor"] = 1
    if src is None:
        kw.update(batch_size=plan.batch_size, shuffle=True, generator=gen, worker_init_fn=repair)
        return DataLoader(probe, **kw)
    memo: dict[int, Any] = {id(src.dataset): probe._fd_inner}
    if src.generator is not None:  # a fresh copy of the caller's generator each pass (or the repair's)
        gen = _copy(src.generator, {}, "generator") if gen is None else gen
        memo[id(src.generator)] = gen
    if src.batch_size is None and src.batch_sampler is not None:
        kw["batch_sampler"] = _copy(src.batch_sampler, memo, "batch_sampler")
        sampler = getattr(kw["batch_sampler"], "sampler", None)
    else:
        kw.update(sampler=_copy(src.sampler, memo, "sampler"), batch_size=plan.batch_size, drop_last=src.drop_last)
        sampler = kw["sampler"]
    if repair and isinstance(sampler, RandomSampler) and sampler.generator is None:
        sampler.generator = gen  # what shuffle=True with generator=gen builds
    kw.update(generator=gen, worker_init_fn=repair or src.worker_init_fn, timeout=src.timeout if workers else 0)
    if workers:
        kw["multiprocessing_context"] = src.multiprocessing_context
    return DataLoader(probe, **kw)


def _one_pass(plan: Plan, probe: _Probe, workers: int, repair: _Repair | None) -> tuple[list[dict[str, Any]], Budget]:
    """One pass of as many whole batches as :func:`budget` plans, so that every worker is observed."""
    _seed_torch(plan.seed)
    if repair is not None and workers == 0:
        repair.apply(probe)  # worker_init_fn never runs without workers: seed in the main process
    loader = _loader(plan, probe, workers, repair)
    size = getattr(loader.batch_sampler, "batch_size", None)  # also a caller's batch_sampler= that says its size
    plan_of = budget(plan.items, size if isinstance(size, int) else None, workers, loader.prefetch_factor or 0,
                     epoch_batches(loader))
    records: list[dict[str, Any]] = []
    it = iter(loader)
    try:
        for k, batch in enumerate(it):
            records.extend(batch)
            if k + 1 >= plan_of.batches or any("error" in r for r in batch):
                break
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # stop workers now, not at garbage collection
        if shutdown is not None:
            shutdown()
    return records, plan_of


def run_setting(plan: Plan, inner: Any, workers: int, repair: bool) -> tuple[list[list[dict[str, Any]]], Budget]:
    """Two passes over ``inner``, one copy of the dataset (its held generators carry over, as in a process),
    and the budget they ran under."""
    probe = _Probe(inner, plan.held)
    fix = _Repair(plan.held, plan.loader.worker_init_fn if plan.loader is not None else None) if repair else None
    (first, plan_of), (second, _) = (_one_pass(plan, probe, workers, fix) for _ in range(2))
    return [first, second], plan_of


def repair_code(seed: int, held: list[Held], user_init: str | None = None, workers: Iterable[int] = (2,)) -> str:
    """The repair as code a user can paste; it performs exactly what :class:`_Repair` does."""
    lines = ["import random", "import numpy as np", "import torch", "",
             "def derived_seed(seed, k):  # an independent seed for the k-th generator the dataset holds",
             "    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])", "",
             "def seed_worker(worker_id):",
             "    seed = torch.initial_seed() % 2**32  # differs per worker; set by the loader's generator",
             "    np.random.seed(seed)", "    random.seed(seed)"]
    if held:
        lines += ["    info = torch.utils.data.get_worker_info()",
                  "    ds = info.dataset if info is not None else dataset"]
    for k, g in enumerate(held):
        target = g.code()
        lines.append({"numpy.Generator": f"    {target} = np.random.default_rng(derived_seed(seed, {k}))",
                      "torch.Generator": f"    {target}.manual_seed(derived_seed(seed, {k}))"}
                     .get(g.kind, f"    {target}.seed(derived_seed(seed, {k}))"))
    init = "seed_worker"
    if user_init:
        lines += ["", "def init_worker(worker_id):  # your worker_init_fn, then the seeding",
                  f"    {user_init}(worker_id)", "    seed_worker(worker_id)"]
        init = "init_worker"
    lines += ["", (f"loader = DataLoader(dataset, ..., generator=torch.Generator().manual_seed({seed}), "
                   f"worker_init_fn={init})")]
    if 0 in set(workers):
        lines += ["# num_workers=0 never calls worker_init_fn: seed the main process before each pass",
                  f"torch.manual_seed({seed})", "seed_worker(0)"]
    return "\n".join(lines)


class RngDemo(Dataset):
    """Chapter 14's E4: each item draws once from torch, numpy's legacy global, ``random`` and a held
    ``np.random.default_rng(0)``; returns those draws with the index, shape (5,), float32."""

    def __init__(self, n: int = 64) -> None:
        self.n = n
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i), torch.rand(()).item(), np.random.rand(), random.random(), self.rng.random()])
