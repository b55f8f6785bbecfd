"""How many batches a pass of the RNG audit takes so that every DataLoader worker is observed, and what
each pass did observe per worker (:mod:`firstdiv.lab.rng_audit` reports both)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

#: each worker is observed for at least this many batches and items, when the cost allows
MIN_BATCHES, MIN_ITEMS = 2, 4
#: items one pass may compute, counting the batches the workers prefetch and the audit discards
MAX_COMPUTED = 512


@dataclass(frozen=True)
class Budget:
    """A pass's plan: ``batches`` consumed in order (batch k comes from worker k % workers), out of
    ``epoch`` batches in one epoch (None when the sampler has no length)."""

    batches: int
    batch_size: int | None
    workers: int
    prefetch: int
    epoch: int | None
    capped: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def budget(items: int, batch_size: int | None, workers: int, prefetch: int, epoch: int | None) -> Budget:
    """At least ``items`` items, and with two or more workers ``MIN_BATCHES`` batches (``MIN_ITEMS`` items)
    of every worker, within ``MAX_COMPUTED`` items computed (then one batch per worker, or as many workers
    as the budget reaches); never more than one epoch."""
    size = batch_size or 1  # a batch_sampler's batches: counted as one item each
    need, capped = _ceil(items, size), False
    if workers >= 2:
        limit = max(need, MAX_COMPUTED // size - workers * prefetch, 1)
        per = max(MIN_BATCHES, _ceil(MIN_ITEMS, size))
        if workers * per > limit:
            per, capped = 1, workers > limit
        need = max(need, min(workers * per, limit))
    if epoch is not None:
        need = min(need, epoch)
    return Budget(max(need, 1), batch_size, workers, prefetch, epoch, capped)


def epoch_batches(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # a sampler without __len__
        return None


def observed_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Items observed in one pass, per worker id (``"main"`` for the main process)."""
    counts = Counter(r["worker"] for r in records)
    return {("main" if w < 0 else str(w)): counts[w] for w in sorted(counts)}


def unobserved(plan_of: Budget, counts: dict[str, int]) -> str | None:
    """Why some workers of this setting were never observed (None when every worker was)."""
    if plan_of.workers < 2:
        return None
    missing = [w for w in range(plan_of.workers) if counts.get(str(w), 0) == 0]
    if not missing:
        return None
    seen = sorted(int(w) for w in counts if w != "main")
    checked = (f"cross-worker duplication was checked among workers {seen} only" if len(seen) >= 2
               else "cross-worker duplication could not be checked")
    if plan_of.epoch is not None and plan_of.epoch < plan_of.workers:
        why = (f"one epoch has {plan_of.epoch} batches for {plan_of.workers} workers; audit a longer dataset or "
               "a smaller batch_size")
    elif plan_of.capped:
        why = (f"{plan_of.workers} workers x batch_size {plan_of.batch_size} (prefetch {plan_of.prefetch}) exceed the "
               f"audit's {MAX_COMPUTED} items per pass; pass a smaller batch_size= to rng_audit")
    else:
        why = "the loader ended before reaching them"
    return f"workers {missing} received no batch: {why}; {checked}"
