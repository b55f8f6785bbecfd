"""Fed the same? ``preprocessing`` / ``generation`` settings per variant, fingerprinted (sha256 of the sorted
JSON) and compared key by key (nested keys dotted) with the reference's, so "it was fed differently" is told
apart from "the exported model differs" before any output is compared."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from ...report import Status
from .._core.checks import Check, check

_MISSING = object()

def _jsonable(value: Any) -> Any:
    if torch.is_tensor(value) or hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def fingerprint(settings: dict[str, Any]) -> str:
    """sha256 (first 16 hex digits) of the settings as sorted JSON; equal settings, equal fingerprints."""
    text = json.dumps(_jsonable(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _differing(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            out += _differing(a.get(key, _MISSING), b.get(key, _MISSING), f"{prefix}{key}.")
        return out
    same = a is b or (a is not _MISSING and b is not _MISSING and _jsonable(a) == _jsonable(b))
    return [] if same else [prefix.rstrip(".")]


def _shown(value: Any) -> str:
    return "(absent)" if value is _MISSING else f"{json.dumps(_jsonable(value), sort_keys=True):.80}"


def _lookup(settings: dict[str, Any], dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
    return value


def fed_checks(arg: str, settings: dict[str, dict] | None, names: dict[str, Any], ref: str, details: dict) -> list[Check]:
    if not settings:
        return []
    base = ref if ref in settings else next(iter(settings))
    prints = {name: fingerprint(s) for name, s in settings.items()}
    details[arg] = {"fingerprints": prints, "compared_with": base, "undeclared": [n for n in names if n not in settings]}
    out = []
    for name in names:
        if name == base or name not in settings:
            continue
        keys = _differing(settings[base], settings[name])
        ev = {"field": arg, "fingerprint": prints[name], "reference_fingerprint": prints[base], "differing_keys": keys}
        if not keys:
            out.append(check(name, "outputs.fed_differently", Status.PASS,
                             f"{arg} identical to {base!r} (fingerprint {prints[name]})", ev))
            continue
        pairs = {k: f"{_shown(_lookup(settings[base], k))} -> {_shown(_lookup(settings[name], k))}" for k in keys}
        ev["values"] = pairs
        shown = "; ".join(f"{k}: {v}" for k, v in list(pairs.items())[:4])
        out.append(check(name, "outputs.fed_differently", Status.FAIL,
                         f"{arg} differs from {base!r} in {len(keys)} key(s): {shown}", ev,
                         expected=f"the same {arg} as {base!r} (fingerprint {prints[base]})",
                         observed=f"{arg} fingerprint {prints[name]}; differing keys {keys}",
                         hint=f"feed every variant through the same {arg} before comparing models: a difference here "
                              f"explains output differences without any fault in the model itself"))
    return out
