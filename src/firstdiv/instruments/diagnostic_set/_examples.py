"""DiagnosticSet's examples: what an example may hold and how it is checked, the copies stored on CPU and run on
the model's device, the fingerprint of outputs and the decision an output makes."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from .._core.batch import to_device
from .._core.outputs import call_once, leaves, split_inputs

CATEGORIES = ("ordinary", "boundary", "missing_input", "abstention")
_KEYS = {"name", "category", "inputs", "note", "abstain_class", "abstain_below"}
ABSTAIN = "abstain"


def check_storable(value: Any, what: str) -> None:
    for path, leaf in leaves(value, what).items():
        if not (torch.is_tensor(leaf) or leaf is None or isinstance(leaf, (bool, int, float, str))):
            raise InvalidArgument(f"Expected {what} to hold tensors, numbers, strings or None (in tuples, lists, dicts) but "
                                  f"{path} is a {type(leaf).__name__}")


def check_example(i: int, ex: Any, seen: set[str]) -> dict[str, Any]:
    if not isinstance(ex, dict):
        raise InvalidArgument(f"Expected example {i} to be a dict with name, category, inputs, note but got {type(ex).__name__}")
    unknown = sorted(set(ex) - _KEYS)
    missing = [k for k in ("name", "category", "inputs") if k not in ex]
    if unknown or missing:
        raise InvalidArgument(f"Expected example {i} to have keys name, category, inputs, note (optional abstain_class, "
                              f"abstain_below) but got {'unknown ' + str(unknown) if unknown else 'no ' + str(missing)}")
    name = ex["name"]
    if not isinstance(name, str) or not name.strip() or name in seen:
        raise InvalidArgument(f"Expected example {i} to have a unique non-empty str name but got {name!r}")
    if ex["category"] not in CATEGORIES:
        raise InvalidArgument(f"Expected category of {name!r} to be one of {', '.join(CATEGORIES)} but got {ex['category']!r}")
    note = ex.get("note", "")
    if not isinstance(note, str):
        raise InvalidArgument(f"Expected note of {name!r} to be a str but got {type(note).__name__}")
    cls, below = ex.get("abstain_class"), ex.get("abstain_below")
    if cls is not None and (isinstance(cls, bool) or not isinstance(cls, int)):
        raise InvalidArgument(f"Expected abstain_class of {name!r} to be an int class index but got {cls!r}")
    if below is not None and (isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below <= 1):
        raise InvalidArgument(f"Expected abstain_below of {name!r} to be a probability in (0, 1] but got {below!r}")
    check_storable(ex["inputs"], f"the inputs of {name!r}")
    seen.add(name)
    return {"name": name, "category": ex["category"], "note": note, "abstain_class": cls,
            "abstain_below": None if below is None else float(below)}


def to_cpu(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().cpu().clone()
    if isinstance(value, dict) or (hasattr(value, "items") and callable(value.items)):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return (tuple if isinstance(value, tuple) else list)(to_cpu(v) for v in value)
    to_tuple = getattr(value, "to_tuple", None)
    return to_cpu(to_tuple()) if callable(to_tuple) else value


def device_of(model_or_fn: Any) -> torch.device | None:
    if isinstance(model_or_fn, nn.Module):
        t = next(iter(model_or_fn.parameters()), None)
        if t is None:
            t = next(iter(model_or_fn.buffers()), None)
        return None if t is None else t.device
    return None


def fingerprint(outputs: Any) -> str:
    """sha256 over each leaf's path, dtype, shape and bytes (tensors) or repr (other leaves)."""
    h = hashlib.sha256()
    for path, leaf in leaves(outputs).items():
        h.update(path.encode())
        if torch.is_tensor(leaf):
            t = leaf.detach().cpu().contiguous()
            h.update(f"{t.dtype}{list(t.shape)}".encode())
            h.update(t.flatten().view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(leaf).encode())
    return h.hexdigest()


def decision(output: Any, abstain_class: int | None = None, abstain_below: float | None = None) -> Any:
    """The decision an output makes (see the module docstring): "abstain", a label, a list of argmaxes, or None."""
    if output is None:
        return ABSTAIN
    if isinstance(output, (str, bool, int)):
        return output
    logits = next((t for t in leaves(output).values() if torch.is_tensor(t) and t.is_floating_point() and t.ndim >= 1
                   and t.shape[-1] >= 2), None)
    if logits is None:
        return None
    logits = logits.detach().double().cpu().reshape(-1, logits.shape[-1])
    top = logits.argmax(-1).tolist()
    prob = torch.softmax(logits, -1).max(-1).values.tolist()
    out = []
    for k, p in zip(top, prob):
        abstain = (abstain_class is not None and k == abstain_class) or (abstain_below is not None and p < abstain_below)
        out.append(ABSTAIN if abstain else k)
    return out[0] if len(out) == 1 else out


def run_example(model_or_fn: Any, inputs: Any) -> tuple[Any, str]:
    args, kwargs = split_inputs(to_device(inputs, device_of(model_or_fn)))
    run = call_once(model_or_fn, args, kwargs)
    return (None, run.error) if run.error else (to_cpu(run.output), "")


def record(meta: dict[str, Any], inputs: Any, outputs: Any) -> dict[str, Any]:
    return {**meta, "input_keys": list(leaves(inputs, "inputs")), "output_keys": list(leaves(outputs)),
            "output_fingerprint": fingerprint(outputs),
            "decision": decision(outputs, meta.get("abstain_class"), meta.get("abstain_below"))}


def expected_outputs(model_or_fn: Any, entries: list[dict], inputs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for e in entries:
        value, error = run_example(model_or_fn, inputs[e["name"]])
        if error:
            raise InvalidArgument(f"Expected model_or_fn to run on example {e['name']!r} but it raised {error}; nothing "
                                  f"was written")
        check_storable(value, f"the output for {e['name']!r}")
        out[e["name"]] = value
    return out
