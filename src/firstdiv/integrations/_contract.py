"""The eval contract of a trainer's evaluation: what its dataloader visits and how it is measured.

Fields (each a plain JSON value, so the fingerprint is the same on every machine and in every process):
``indices`` (the sampler's kind and length, and a hash of the dataset indices it visits in order when the order
is fixed), ``dataset`` (the class, and for a ``Subset`` chain each class), ``preprocessing`` (the dataset's
``transform``/``target_transform``/``transforms`` and a Hugging Face dataset's ``_fingerprint``), ``collate``,
``batch_size``, ``drop_last``, ``reduction`` (the loss modules' reductions, where the model holds any) and
``mode`` (``"eval"``, or ``"train"`` when the model or one of its dropout/normalization layers was in train mode
at the first evaluation batch). Nothing is read from the dataset and no sampler that draws random numbers is
iterated: the contract costs no data loading and moves no RNG.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from torch import nn
from torch.utils.data import RandomSampler, SequentialSampler, Subset

from ..lab.record import content_hash


def loader_contract(loader: Any, model: nn.Module, *, mode: str) -> dict[str, Any]:
    """The contract of evaluating ``model`` on ``loader`` (a torch DataLoader, or anything shaped like one)."""
    dataset = getattr(loader, "dataset", None)
    contract: dict[str, Any] = {
        "indices": _indices(getattr(loader, "sampler", None), dataset),
        "dataset": _chain(dataset),
        "preprocessing": _preprocessing(dataset),
        "collate": describe(_unwrap(getattr(loader, "collate_fn", None))),
        "batch_size": _batch_size(loader),
        "drop_last": bool(getattr(loader, "drop_last", False)),
        "mode": mode,
    }
    reductions = sorted({f"{type(m).__name__}:{m.reduction}" for m in model.modules()
                         if isinstance(m, nn.modules.loss._Loss) and isinstance(getattr(m, "reduction", None), str)})
    if reductions:
        contract["reduction"] = ", ".join(reductions)
    return contract


def _unwrap(collate: Any) -> Any:
    """The user's collator inside the Trainer's column-removing wrapper."""
    return getattr(collate, "data_collator", collate)


def _batch_size(loader: Any) -> int | None:
    """The loader's batch size, also through the batch samplers that accelerate wraps around the user's."""
    size, sampler = getattr(loader, "batch_size", None), getattr(loader, "batch_sampler", None)
    while size is None and sampler is not None:
        size, sampler = getattr(sampler, "batch_size", None), getattr(sampler, "batch_sampler", None)
    return size if isinstance(size, int) else None


def eval_mode(model: nn.Module) -> str:
    """``"train"`` when evaluation would compute as in training (the model, or a dropout/norm layer, in train
    mode), else ``"eval"``."""
    from ..instruments.watch import _modes

    return "train" if _modes.train_mode_modules(model) else "eval"


def _indices(sampler: Any, dataset: Any) -> dict[str, Any]:
    kind = type(sampler).__qualname__ if sampler is not None else "none"
    try:
        count = len(sampler) if sampler is not None else len(dataset)
    except TypeError:
        count = None
    out: dict[str, Any] = {"sampler": kind, "count": count}
    if isinstance(sampler, RandomSampler):
        out["order"] = "random"
    elif isinstance(sampler, SequentialSampler) and count is not None:
        visited = _base_indices(dataset, np.arange(count))
        out.update(order="sequential", hash=content_hash(visited.astype(np.int64)))
    else:
        out["order"] = "unknown"  # iterating an unknown sampler might draw random numbers
    return out


def _base_indices(dataset: Any, idx: np.ndarray) -> np.ndarray:
    """The indices into the innermost dataset that ``idx`` reach through a chain of ``Subset``s."""
    while isinstance(dataset, Subset):
        idx = np.asarray(dataset.indices, dtype=np.int64)[idx]
        dataset = dataset.dataset
    return idx


def _chain(dataset: Any) -> str:
    names = []
    while dataset is not None:
        names.append(_qualname(type(dataset)))
        dataset = dataset.dataset if isinstance(dataset, Subset) else None
    return " > ".join(names) or "none"


def _preprocessing(dataset: Any) -> dict[str, str]:
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    out = {}
    for attr in ("transform", "target_transform", "transforms", "_fingerprint"):
        value = getattr(dataset, attr, None)
        if value is not None:
            out[attr.lstrip("_")] = describe(value)
    return out


def describe(obj: Any) -> str | None:
    """A description of a transform or collate function that is equal across processes: its repr when that
    names no memory address, else its qualified name (a ``functools.partial`` with its arguments)."""
    if obj is None:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, functools.partial):
        return f"partial({describe(obj.func)}, {obj.args!r}, {sorted(obj.keywords.items())!r})"
    if callable(obj) and hasattr(obj, "__qualname__"):  # a function, method or class
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    text = repr(obj)
    if " at 0x" in text or " object at " in text:  # the default repr: the class and its plain settings
        plain = {k: v for k, v in sorted(getattr(obj, "__dict__", {}).items())
                 if isinstance(v, (int, float, str, bool, type(None)))}
        return f"{_qualname(type(obj))}({plain})" if plain else _qualname(type(obj))
    return text


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
