"""loader_timing's setup: argument checks, what must be given back (the loader's generators, a
persistent-workers iterator it did not have, the modules and optimizers ``step`` closes over, found by
``_core.closure``), and the DataLoaders a sweep rebuilds over the same dataset with one control changed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler

from ...errors import InvalidArgument
from .._core.batch import _type_name, check_callable

#: sweepable controls -> (check of one value, what it must be)
CONTROLS: dict[str, tuple[Any, str]] = {
    "num_workers": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "integers >= 0"),
    "pin_memory": (lambda v: isinstance(v, bool), "booleans"),
    "batch_size": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "integers >= 1"),
    "prefetch_factor": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "integers >= 1"),
    "persistent_workers": (lambda v: isinstance(v, bool), "booleans"),
}


def check_loader(loader: Any) -> Any:
    """A DataLoader, or an iterable of batches (not a dataset of single examples, a tensor, a string or a mapping)."""
    if isinstance(loader, DataLoader):
        return loader
    if isinstance(loader, (Dataset, IterableDataset)):
        raise InvalidArgument(f"Expected `loader` to be a DataLoader or an iterable of batches but got a dataset "
                              f"({type(loader).__name__}): wrap it, e.g. DataLoader(dataset, batch_size=32)")
    if isinstance(loader, (str, bytes, torch.Tensor, Mapping)) or not hasattr(loader, "__iter__"):
        raise InvalidArgument(f"Expected `loader` to be a torch.utils.data.DataLoader or an iterable of batches "
                              f"but got {_type_name(loader)}")
    return loader


def check_consumer(step: Any, train_step: Any) -> Any:
    """The consumer: ``step`` or ``train_step`` (one of them, callable), or None."""
    if step is not None and train_step is not None:
        raise InvalidArgument("Expected one consumer but got both `step` and `train_step`: pass train_step=your_step "
                              "(train_step(batch) of your loop) and leave step out")
    if (chosen := step if step is not None else train_step) is not None:
        check_callable(chosen, "step" if step is not None else "train_step")
    return chosen


def check_count(value: Any, name: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgument(f"Expected `{name}` to be an integer >= {minimum} but got {value!r}")
    return value


def check_sweep(sweep: Any) -> dict[str, list[Any]]:
    """``{control: [values...]}`` with known controls and non-empty lists of valid values."""
    if sweep is None:
        return {}
    if not isinstance(sweep, Mapping):
        raise InvalidArgument(f"Expected `sweep` to be a dict {{control: [values]}} but got {_type_name(sweep)}")
    out = {}
    for key, values in sweep.items():
        if key not in CONTROLS:
            raise InvalidArgument(f"Expected `sweep` keys among {', '.join(CONTROLS)} but got {key!r}")
        ok, what = CONTROLS[key]
        if not isinstance(values, (list, tuple)) or not values or not all(ok(v) for v in values):
            raise InvalidArgument(f"Expected `sweep[{key!r}]` to be a non-empty list of {what} but got {values!r}")
        out[key] = list(values)
    return out


# ---- giving back what iterating the loader moves -----------------------------------------------------

def loader_generators(loader: Any) -> list[torch.Generator]:
    """The torch.Generators iterating ``loader`` advances: its own (worker base seed) and its samplers'."""
    found: dict[int, torch.Generator] = {}
    holders = [loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
               getattr(getattr(loader, "batch_sampler", None), "sampler", None)]
    for holder in holders:
        gen = getattr(holder, "generator", None)
        if isinstance(gen, torch.Generator):
            found.setdefault(id(gen), gen)
    return list(found.values())


@contextmanager
def kept_loader(loader: Any) -> Iterator[Any]:
    """Give back the loader's generator states (and, for persistent workers, the absence of an iterator)
    on exit. Yields a callable that rewinds the generators (to replay the first batches' indices)."""
    gens = loader_generators(loader)
    states = [g.get_state() for g in gens]
    had_iterator = getattr(loader, "_iterator", None) is not None

    def rewind() -> None:
        for g, s in zip(gens, states):
            g.set_state(s)

    try:
        yield rewind
    finally:
        rewind()
        if isinstance(loader, DataLoader) and loader.persistent_workers and not had_iterator and loader._iterator is not None:
            from ._measure import shutdown

            shutdown(loader._iterator)
            loader._iterator = None


# ---- the DataLoaders a sweep builds -----------------------------------------------------------------

def _sampler_kwargs(loader: DataLoader) -> dict[str, Any]:
    """Keyword arguments that reproduce the loader's sampler kind without touching its generators."""
    if isinstance(loader.dataset, IterableDataset):
        return {"batch_size": loader.batch_size, "drop_last": loader.drop_last}
    bs = loader.batch_sampler
    if bs is not None and type(bs) is not BatchSampler:
        return {"batch_sampler": bs}
    s = loader.sampler
    if type(s) is RandomSampler:
        sampler: Any = RandomSampler(loader.dataset, replacement=s.replacement, num_samples=s._num_samples,
                                     generator=torch.Generator().manual_seed(0))
    elif type(s) is SequentialSampler:
        sampler = None
    else:
        sampler = s  # the user's own sampler object; its generator is given back afterwards
    return {"batch_size": loader.batch_size, "drop_last": loader.drop_last, "sampler": sampler}


def _copied_generator(gen: torch.Generator | None) -> torch.Generator | None:
    if gen is None:
        return None
    copy = torch.Generator(device=gen.device)
    copy.set_state(gen.get_state())
    return copy


def rebuild(loader: DataLoader, control: str, value: Any) -> tuple[DataLoader | None, str]:
    """A DataLoader over ``loader.dataset`` like ``loader`` with ``control`` set to ``value``; (None, reason)
    when that setting cannot be built."""
    base = _sampler_kwargs(loader)
    if control == "batch_size":
        if "batch_sampler" in base:
            return None, f"a custom batch_sampler ({type(loader.batch_sampler).__name__}) fixes the batch size"
        if loader.batch_size is None:
            return None, "the loader does not batch (batch_size=None): a batch_size would change what one item is"
    kwargs = dict(base, num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                  timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                  multiprocessing_context=loader.multiprocessing_context, generator=_copied_generator(loader.generator),
                  prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers)
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    kwargs[control] = value
    if kwargs["num_workers"] == 0:
        if control == "prefetch_factor" or (control == "persistent_workers" and value):
            return None, f"{control} needs num_workers > 0 (the loader has num_workers=0)"
        kwargs["prefetch_factor"], kwargs["persistent_workers"] = None, False
    try:
        return DataLoader(loader.dataset, **kwargs), ""
    except (ValueError, TypeError) as exc:
        return None, f"DataLoader refused {control}={value!r}: {str(exc).splitlines()[0]}"
