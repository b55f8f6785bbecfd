"""What keeps a gate file honest: field types, a digest of what the threshold was computed from, and
a check of the calibration values against the store's runs.

The digest (sha256 of the canonical JSON of the fields below) catches an edit that forgot to
recompute it. Someone who scales the values and the threshold together and recomputes the digest is
caught by ``verify_with_store``: the calibration runs are looked up by identity and seed, and each
value in the file must be the one the store recorded.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from typing import Any

from ..errors import InvalidArgument
from .record import canonical

#: Gate fields the digest covers: everything the threshold and its validation follow from.
DIGESTED = ("metric", "alpha", "higher_is_better", "threshold", "rank", "calibration_seeds", "calibration_values",
            "calibration_identity", "workload", "config", "config_hash", "eval_fingerprint", "eval_contract",
            "env_hash", "code_version", "calibration_sweep", "holdout")

_NUMBER, _STR, _DICT = "a number", "a string", "an object"
_TYPES: dict[str, tuple[str, bool]] = {  # field -> (what it must be, may be null)
    "metric": (_STR, False), "alpha": (_NUMBER, False), "higher_is_better": ("true or false", False),
    "threshold": (_NUMBER, False), "rank": ("an integer", False), "calibration_seeds": ("a list of integers", False),
    "calibration_values": ("a list of numbers", False), "workload": (_STR, True), "config": (_DICT, False),
    "config_hash": (_STR, True), "eval_fingerprint": (_STR, True), "eval_contract": (_DICT, True),
    "env_hash": (_STR, True), "code_version": (_STR, True), "calibration_sweep": (_STR, True),
    "holdout": (_DICT, True), "created": (_STR, False), "calibration_identity": (_STR, True),
    "calibration_digest": (_STR, True),
}
_HOLDOUT = {"false_alarms": "an integer", "n": "an integer", "rate": _NUMBER, "ci_low": _NUMBER, "ci_high": _NUMBER,
            "p_value": _NUMBER, "consistent": "true or false", "seeds": "a list of integers"}


def _is(value: Any, kind: str) -> bool:
    def num(v: Any) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    def integer(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    return {_NUMBER: num, _STR: lambda v: isinstance(v, str), _DICT: lambda v: isinstance(v, dict),
            "true or false": lambda v: isinstance(v, bool), "an integer": integer,
            "a list of integers": lambda v: isinstance(v, list) and all(integer(x) for x in v),
            "a list of numbers": lambda v: isinstance(v, list) and all(num(x) for x in v)}[kind](value)


def check_types(data: dict[str, Any], source: str, fix: str) -> None:
    """One InvalidArgument naming the first field whose JSON type is wrong."""
    for name, (kind, nullable) in _TYPES.items():
        if name in data and not (data[name] is None and nullable) and not _is(data[name], kind):
            raise InvalidArgument(f"{source}: field {name!r} should be {kind} but is {_shown(data[name])}; {fix}")
    holdout = data.get("holdout")
    for name, kind in _HOLDOUT.items() if isinstance(holdout, dict) else ():
        if name not in holdout or not _is(holdout[name], kind):
            what = "missing" if name not in holdout else _shown(holdout[name])
            raise InvalidArgument(f"{source}: field 'holdout.{name}' should be {kind} but is {what}; {fix}")


def _shown(value: Any) -> str:
    kind = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(
        type(value), "a number")
    return f"{kind} ({canonical(value)[:40]})"


def digest(data: dict[str, Any]) -> str:
    """sha256 over the digested fields (canonical JSON; tuples as lists), 16 hex digits."""
    return hashlib.sha256(canonical({k: _plain(data.get(k)) for k in DIGESTED}).encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def verify_digest(data: dict[str, Any], source: str, fix: str) -> None:
    """A version-2 file must carry the digest of its own fields."""
    stored = data.get("calibration_digest")
    if stored is None:
        if int(data.get("version", 1)) >= 2:
            raise InvalidArgument(f"{source} has no calibration_digest (gate format 2 always writes one); "
                                  f"the file was edited; {fix}")
        return
    if stored != digest(data):
        raise InvalidArgument(f"{source}: calibration_digest {stored} does not match the file's threshold, "
                              f"calibration seeds, values and identity (digest {digest(data)}): the file was "
                              f"edited after calibration; {fix}")


def verify_with_store(gate: Any, store: Any, source: str) -> int:
    """Compare the file's calibration values with the store's runs of the same identity and seed.

    Returns how many seeds were verified (0 when the store holds none of them); a value that differs
    from every run recorded for its seed is an InvalidArgument naming the seed and both values.
    """
    identities = [i for i in (gate.calibration_identity or "").split(",") if i]
    verified = 0
    for seed, value in zip(gate.calibration_seeds, gate.calibration_values):
        stored = store.metric_values(identities, seed, gate.metric) if identities else []
        if not stored:
            continue
        if not any(math.isclose(v, value, rel_tol=0, abs_tol=0) for v in stored):
            raise InvalidArgument(f"{source}: calibration seed {seed} has {gate.metric} {value!r} in the gate file "
                                  f"but {stored[-1]!r} in the store's run of that identity and seed; the gate file "
                                  "was altered: recreate it with `firstdiv gate calibrate SWEEP --holdout-seeds "
                                  f"SEEDS -o {source}`")
        verified += 1
    return verified


def verify_gate_file(gate: Any, source: str, store: str | None) -> int:
    """``verify_with_store`` against the store at ``store`` (or the default one) when there is one."""
    from ..errors import NotFound
    from .store import Store

    try:
        st = Store(store, create=False)
    except NotFound:
        return 0  # no store here: the file's own digest is all there is to check
    with st:
        return verify_with_store(gate, st, source)
