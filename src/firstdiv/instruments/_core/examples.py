"""The examples of a batch, in the shapes real code takes: which axis holds them, how to take a few, and which
output tensor holds the predictions.

API (stable; the learning instruments import it):

- ``batch_axis(batch, declared=None) -> int``: the axis of the examples. ``declared`` (the user's
  ``batch_axis=``) wins; otherwise axis 0, or axis 1 when the inputs are sequence-first ``[T, B, ...]``:
  the targets' leading size matches the inputs' second axis and not their first.
- ``take_examples(batch, n, axis) -> Batch | None``: the first ``n`` examples (every tensor whose size along
  ``axis`` is the batch size is sliced there; other values, e.g. a shared adjacency, are kept whole); None
  when the examples cannot be separated (a sparse tensor of examples, or tensors whose sizes disagree, such
  as targets flattened to ``[T*B]``): the caller then uses the whole batch and says so.
- ``num_examples(batch, axis) -> int | None``.
- ``dense(t) -> Tensor``: ``t`` in the strided layout (a sparse ``.grad`` from ``EmbeddingBag(sparse=True)``
  densified), for the arithmetic the instruments do on gradients.
- ``logits_of(outputs) -> Tensor | None``: the prediction tensor of a model output: the tensor itself; a Hugging
  Face ``ModelOutput`` or dict's ``logits`` (else its first floating tensor other than ``loss``); a tuple's first
  floating tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .batch import Batch, rebuild

__all__ = ["batch_axis", "dense", "logits_of", "num_examples", "take_examples", "tensors"]


def tensors(x: Any) -> list[torch.Tensor]:
    """Every tensor in ``x`` (nested dicts, lists, tuples, ``ModelOutput``s), in order."""
    if torch.is_tensor(x):
        return [x]
    values = x.values() if isinstance(x, Mapping) else x if isinstance(x, (list, tuple)) else ()
    return [t for v in values for t in tensors(v)]


def _dense(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t for t in ts if t.layout == torch.strided and t.dim() > 0]


def batch_axis(batch: Batch, declared: int | None = None) -> int:
    """The axis that holds the examples (module docstring)."""
    if declared is not None:
        return int(declared)
    xs, ys = _dense(tensors(batch.inputs)), _dense(tensors(batch.targets))
    if not xs or not ys:
        return 0
    x, n = xs[0], ys[0].shape[0]
    if x.dim() >= 2 and x.shape[0] != n and x.shape[1] == n:
        return 1
    return 0


def num_examples(batch: Batch, axis: int = 0) -> int | None:
    """The batch size along ``axis``: the targets' size there (their first axis when they have no ``axis``:
    targets ``[B]`` beside sequence-first inputs ``[T, B]``), the inputs' when there are no targets."""
    ys, xs = _dense(tensors(batch.targets)), _dense(tensors(batch.inputs))
    if ys:
        return int(ys[0].shape[axis] if ys[0].dim() > axis else ys[0].shape[0])
    if xs:
        return int(xs[0].shape[axis] if xs[0].dim() > axis else xs[0].shape[0])
    return None


def _axis_for(t: torch.Tensor, n: int, axis: int) -> int | None:
    if t.dim() > axis and t.shape[axis] == n:
        return axis
    if axis != 0 and t.shape[0] == n:  # targets [B] beside inputs [T, B]
        return 0
    return None


def _take(x: Any, n: int, k: int, axis: int) -> Any:
    if torch.is_tensor(x):
        if x.layout != torch.strided:
            raise ValueError("sparse")
        if x.dim() == 0:
            return x
        ax = _axis_for(x, n, axis)
        if ax is None:
            raise ValueError("size")
        return x.narrow(ax, 0, k)
    if isinstance(x, Mapping):
        return {key: _take(v, n, k, axis) for key, v in x.items()}
    if isinstance(x, (list, tuple)):
        return rebuild(x, (_take(v, n, k, axis) for v in x))
    return x


def take_examples(batch: Batch, k: int, axis: int = 0) -> Batch | None:
    """The first ``k`` examples of ``batch`` along ``axis``, or None when they cannot be separated."""
    n = num_examples(batch, axis)
    if n is None:
        return None
    if k >= n:
        return batch
    try:
        return Batch(_take(batch.inputs, n, k, axis), _take(batch.targets, n, k, axis), batch.as_kwargs)
    except ValueError:
        return None


def logits_of(outputs: Any, labels: torch.Tensor | None = None) -> torch.Tensor | None:
    """The prediction tensor of a model output (module docstring); None when there is none. With integer ``labels``,
    of several floating tensors the first that can score them (shaped ``labels.shape + (classes,)`` with more
    classes than the largest label: a model returning ``(hidden_states, logits)``), else the first."""
    if torch.is_tensor(outputs):
        return outputs
    if isinstance(outputs, dict):  # ModelOutput is an OrderedDict
        if torch.is_tensor(outputs.get("logits")):
            return outputs["logits"]
        items = [v for k, v in outputs.items() if k != "loss"]
    elif isinstance(outputs, (list, tuple)):
        items = list(outputs)
    else:
        return None
    floats = [t for t in items if torch.is_tensor(t) and t.is_floating_point() and t.dim() > 0]
    if labels is not None and len(floats) > 1 and not labels.is_floating_point() and labels.numel():
        top = int(labels.max())
        fits = [t for t in floats if tuple(t.shape[:-1]) == tuple(labels.shape) and t.shape[-1] > top]
        floats = fits + [t for t in floats if not any(t is f for f in fits)]
    return floats[0] if floats else None


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` in the strided layout: a sparse gradient densified, anything else as it is."""
    return t.to_dense() if t.layout != torch.strided else t
