"""Stage contracts of ``stage_trace``: ``{stage: {key: {"dtype": ..., "shape": [...], "range": (lo, hi),
"layout": "CHW"}}}``, validated up front and checked on the sample after that stage (key ``""`` or ``"sample"``
for a bare tensor sample). ``dtype``, ``shape`` and ``layout`` are STRUCTURE outcomes, ``range`` a NUMERIC one.

API (for ``stage_trace``): ``check_contracts(contracts, stage_names)`` (raises InvalidArgument) and
``contract_outcomes(stage, seen_after, per_key) -> [Outcome, ...]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgument
from ._normalize import numbers
from ._probes import Outcome, Seen, dtype_name, layout

_CONTRACT_KEYS = ("dtype", "shape", "range", "layout", "normalized")
_LAYOUTS = ("HW", "CHW", "HWC", "NCHW", "NHWC")


def check_contracts(contracts: Any, names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """``contracts`` validated against the stage ``names`` (None -> {}); raises InvalidArgument."""
    if contracts is None:
        return {}
    if not isinstance(contracts, dict):
        raise InvalidArgument(f"Expected `contracts` to be a dict stage -> {{key: spec}} but got {type(contracts).__name__}")
    for stage, per_key in contracts.items():
        if stage not in names:
            raise InvalidArgument(f"Expected contract stages among {', '.join(names)} but got {stage!r}")
        if not isinstance(per_key, dict):
            raise InvalidArgument(f"Expected contracts[{stage!r}] to be a dict key -> spec but got {type(per_key).__name__}")
        for key, spec in per_key.items():
            _check_spec(f"contracts[{stage!r}][{key!r}]", spec)
    return contracts


def _check_spec(label: str, spec: Any) -> None:
    if not isinstance(spec, dict) or not spec or set(spec) - set(_CONTRACT_KEYS):
        raise InvalidArgument(f"Expected {label} to be a dict with keys among {', '.join(_CONTRACT_KEYS)} but got {spec!r:.80}")
    if "dtype" in spec:
        _wanted_dtype(spec["dtype"], label)
    shape = spec.get("shape", ())
    if not isinstance(shape, (list, tuple)) or any(s is not None and (isinstance(s, bool) or not isinstance(s, int)) for s in shape):
        raise InvalidArgument(f"Expected {label}['shape'] to be a list of ints (None or -1 for any size) but got {shape!r}")
    rng = spec.get("range", (0, 0))
    if not (isinstance(rng, (list, tuple)) and len(rng) == 2 and all(isinstance(v, (int, float)) for v in rng) and rng[0] <= rng[1]):
        raise InvalidArgument(f"Expected {label}['range'] to be (low, high) numbers with low <= high but got {rng!r}")
    norm = spec.get("normalized", {"mean": 0, "std": 1})
    if not (isinstance(norm, dict) and set(norm) == {"mean", "std"} and numbers(norm["mean"]) is not None
            and (std := numbers(norm["std"])) is not None and (std > 0).all()):
        raise InvalidArgument(f"Expected {label}['normalized'] to be {{'mean': [...], 'std': [...]}} (numbers, std > 0) "
                              f"but got {norm!r:.80}")
    if spec.get("layout", "HW") not in _LAYOUTS:
        raise InvalidArgument(f"Expected {label}['layout'] to be one of {', '.join(_LAYOUTS)} but got {spec['layout']!r}")


def _wanted_dtype(value: Any, label: str) -> str:
    """'float32', 'uint8', ... or the generic 'float' / 'int'."""
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, str):
        name = value.lower()
        if name in ("float", "floating", "int", "integer"):
            return name[:3] if name.startswith("int") else "float"
        if isinstance(getattr(torch, name, None), torch.dtype):
            return dtype_name(getattr(torch, name))
    else:
        try:
            return np.dtype(value).name
        except (TypeError, ValueError):
            pass
    raise InvalidArgument(f"Expected {label}['dtype'] to be a torch/numpy dtype or a name like 'float32' but got {value!r}")


def contract_outcomes(stage: str, after: Seen, per_key: dict[str, dict[str, Any]]) -> list[Outcome]:
    """One outcome per contract item of each key, on the sample after ``stage``; a missing key fails once."""
    found = after.arrays
    out = []
    for key, spec in per_key.items():
        t = found.get(key, found.get("") if key in ("", "sample", "image") else None)
        probe = f"contract:{key or 'sample'}"
        if t is None:
            out.append(Outcome("structure", probe, False, f"contract for {key!r}: no such array after the stage",
                               {"keys": sorted(found)}, expected=f"an array at {key!r}", observed=f"arrays: {sorted(found)}"))
            continue
        for item in _ITEMS:
            if item in spec:
                out.append(_contract_item(probe, item, spec[item], t, f"{key or 'sample'}"))
    return out


def _dtype_item(want: Any, t: torch.Tensor, probe: str) -> tuple[Any, bool]:
    name = _wanted_dtype(want, probe)
    got = dtype_name(t.dtype)
    if name == "float":
        return got, t.is_floating_point()
    if name == "int":
        return got, not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)
    return got, got == name


def _shape_item(want: Any, t: torch.Tensor, probe: str) -> tuple[Any, bool]:
    got = list(t.shape)
    return got, len(got) == len(want) and all(w is None or w == -1 or w == g for w, g in zip(want, got))


def _layout_item(want: Any, t: torch.Tensor, probe: str) -> tuple[Any, bool]:
    got = layout(t) or "ambiguous"
    return got, t.dim() == len(want) and ("C" not in want or t.shape[want.index("C")] in (1, 3, 4)) and got in (want, "ambiguous")


def _range_item(want: Any, t: torch.Tensor, probe: str) -> tuple[Any, bool]:
    x = t.double()
    fin = x[torch.isfinite(x)]
    got = [float(fin.min()), float(fin.max())] if fin.numel() else None
    tol = 1e-6 * max(1.0, float(want[1]) - float(want[0]))
    return got, got is not None and fin.numel() == x.numel() and got[0] >= want[0] - tol and got[1] <= want[1] + tol


_ITEMS = {"dtype": _dtype_item, "shape": _shape_item, "range": _range_item, "layout": _layout_item}


def _contract_item(probe: str, item: str, want: Any, t: torch.Tensor, key: str) -> Outcome:
    got, ok = _ITEMS[item](want, t, probe)
    category = "numeric" if item == "range" else "structure"
    msg = f"{key}.{item}: expected {want}, observed {got}"
    return Outcome(category, f"{probe}.{item}", ok, msg, {"expected": str(want), "observed": str(got)},
                   expected=f"{key} {item} {want}", observed=f"{got}")
