"""The label probe of ``stage_trace`` (SEMANTICS): the label a record must end with, from ``label_rule(record)``
(a callable on the input sample), else ``class_to_idx[name]`` for a label entering as a class name, else the
label the record entered with. Every stage that changes the label must leave a class index equal to it (an
int, an integral scalar tensor, or a one-hot/probability vector's argmax); a label turned into a non-integral
number (scaled like a feature) fails too.

The label is the leaf named ``label_key``, else one named label/labels/target/targets/y/class, else the
second element of a 2-tuple sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ._probes import Outcome, as_tensor, leaves

LABEL_KEYS = ("label", "labels", "target", "targets", "y", "class", "class_idx")


@dataclass
class Labels:
    """What the label probe knows: where the label is, the class it must become, and why not when unknown."""

    key: str | None
    class_to_idx: dict[Any, int] | None
    expected: int | None = None
    name: Any = None
    note: str = ""             # why the label cannot be checked at all
    info: str = ""             # what part of the declarations cannot be checked


def find(sample: Any, fields: tuple[str, ...], key: str | None) -> tuple[str, Any] | None:
    every = leaves(sample, fields)
    if key is not None and key in every:
        return key, every[key]
    for k, v in every.items():
        if k.rsplit(".", 1)[-1] in LABEL_KEYS:
            return k, v
    if isinstance(sample, (list, tuple)) and len(sample) == 2 and "1" in every and not isinstance(sample[1], (list, tuple, dict)):
        return "1", every["1"]
    return None


def class_of(value: Any) -> tuple[int | None, str]:
    """(class index, how): how is 'index', 'one-hot', 'name', 'scaled' (a non-integral number) or 'other'."""
    if isinstance(value, str):
        return None, "name"
    if isinstance(value, (bool, np.bool_)):
        return int(value), "index"
    t = as_tensor(np.asarray(value) if isinstance(value, (int, float, np.generic)) else value)
    if t is None or t.numel() == 0 or t.is_complex():
        return None, "other"
    x = t.double().reshape(-1)
    if not bool(torch.isfinite(x).all()):
        return None, "other"
    if x.numel() == 1:
        v = float(x[0])
        return (round(v), "index") if abs(v - round(v)) < 1e-6 else (None, "scaled")
    top = x.max()
    if t.dim() == 1 and bool((x >= 0).all()) and abs(float(x.sum()) - 1) < 1e-3 and int((x == top).sum()) == 1:
        return int(x.argmax()), "one-hot"
    return None, "other"


def start(sample: Any, fields: tuple[str, ...], key: str | None, class_to_idx: dict[Any, int] | None,
          rule: Callable[[Any], Any] | None) -> Labels:
    """The expected class of ``sample`` (a copy) as its declarations say."""
    labels = Labels(key, class_to_idx)
    found = find(sample, fields, key)
    value = found[1] if found else None
    if rule is not None:
        try:
            value = rule(sample)
        except Exception as exc:  # noqa: BLE001 - a broken rule is a note, not a verdict on the pipeline
            labels.note = f"label_rule raised {type(exc).__name__}: {exc}"
            return labels
    elif found is None:
        labels.note = "no label found: name it with label_key= (a key, or a tuple position like '1')"
        return labels
    idx, how = class_of(value)
    if how == "name":
        labels.name = value
        if class_to_idx is None:
            labels.note = f"the label is the class name {value!r} and no class_to_idx= was given"
        elif value not in class_to_idx:
            labels.note = f"class {value!r} is not in class_to_idx ({len(class_to_idx)} classes)"
        else:
            labels.expected = class_to_idx[value]
    elif idx is not None:
        labels.expected = idx
        if class_to_idx is not None and rule is None:
            labels.info = (f"the label entered as class index {idx}: class_to_idx was applied before the first stage; "
                           "give label_rule= (record -> class name or index) to check that mapping")
    else:
        labels.note = f"the {'rule' if rule else 'input'}'s label {value!r:.60} is not a class name or index"
    return labels


def _first(value: Any) -> float:
    t = as_tensor(np.asarray(value) if not isinstance(value, (torch.Tensor, np.ndarray)) else value)
    return float(t.double().reshape(-1)[0]) if t is not None and t.numel() else float("nan")


def _same(a: Any, b: Any) -> bool:
    ta, tb = as_tensor(a), as_tensor(b)
    if ta is not None or tb is not None:
        return ta is not None and tb is not None and ta.dtype == tb.dtype and ta.shape == tb.shape and torch.equal(ta, tb)
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable values count as changed
        return False


def label_outcomes(stage: str, before: Any, after: Any, fields: tuple[str, ...], labels: Labels) -> list[Outcome]:
    """The label after ``stage`` against the expected class, when the stage changed it."""
    was, now = find(before, fields, labels.key), find(after, fields, labels.key)
    if now is None or (was is not None and _same(was[1], now[1])):
        return []
    key, value = now
    if labels.note or labels.expected is None:
        return [Outcome("semantics", "label", None, f"label {key} not checked: {labels.note or 'no expected class'}")]
    idx, how = class_of(value)
    source = (f"class_to_idx[{labels.name!r}]" if labels.name is not None else "the record's label")
    ev = {"key": key, "expected": labels.expected, "observed": repr(value)[:80], "how": how, "source": source}
    if how == "scaled":
        return [Outcome("semantics", "label", False, f"{key}: {stage!r} turned the class label {labels.expected} into "
                        f"{_first(value):.4g}: the label was transformed like a feature (scaled or standardized)", ev,
                        expected=f"class index {labels.expected}", observed=f"{value!r:.40}", subkind="label_changed")]
    if idx is None:
        return [Outcome("semantics", "label", None, f"label {key} after {stage!r} is {how} ({value!r:.40}): not a class index")]
    if idx != labels.expected:
        return [Outcome("semantics", "label", False, f"{key}: {stage!r} gives class {idx} ({how}); {source} is "
                        f"{labels.expected}: the label map differs from the declared one", ev,
                        expected=f"class {labels.expected} ({source})", observed=f"class {idx}", subkind="label_map")]
    return [Outcome("semantics", "label", True, f"{key}: class {idx} ({how}) = {source}", ev)]
