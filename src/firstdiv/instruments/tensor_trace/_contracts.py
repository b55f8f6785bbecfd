"""Named-axis contracts of ``tensor_trace``: ``{module path: "B T D"}`` parsed, then checked on the recorded
ledger in execution order.

Names are bound on first sight ("B" takes the size of the first tensor that has it; later tensors must agree),
integers are literal sizes, ``...`` stands for any number of axes. A list of strings checks a module's several
output tensors in order.

API (for ``tensor_trace``):

- ``parse_contracts(contracts, root) -> {path: [Spec, ...]}`` — validates; raises InvalidArgument.
- ``contract_checks(rows, specs) -> ([(row index, Check), ...], {name: size bound})`` — one PASS per contract
  (first call), the first violation per module (``contract.axis_mismatch``), ``contract.not_reached`` for a
  module that never returned a tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torch import nn

from ...errors import InvalidArgument
from ...report import Status
from .._core.checks import Check, check
from .._core.trace import Recorder, Row

_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_']*|\d+|\.\.\.)$")
#: axis name -> {"size", "at" (module path where it was bound), "axis"}
Bound = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Spec:
    text: str
    head: tuple[str | int, ...]
    tail: tuple[str | int, ...] | None  # after "..."; None when the spec has no "..."


def _parse(key: str, text: Any) -> Spec:
    if not isinstance(text, str):
        raise InvalidArgument(f"Expected contract for {key!r} to be a string of axis names like 'B T D' but got "
                              f"{type(text).__name__}")
    tokens = text.replace(",", " ").split()
    bad = next((t for t in tokens if not _TOKEN.match(t)), None)
    if not tokens or bad is not None or tokens.count("...") > 1:
        why = f"token {bad!r}" if bad else ("several '...'" if tokens else "an empty string")
        raise InvalidArgument(f"Expected contract for {key!r} to be axis names, integers or one '...' separated by "
                              f"spaces (like 'B T D') but got {why}")
    parsed = [int(t) if t.isdigit() else t for t in tokens]
    if "..." in parsed:
        cut = parsed.index("...")
        return Spec(text, tuple(parsed[:cut]), tuple(parsed[cut + 1:]))
    return Spec(text, tuple(parsed), None)


def parse_contracts(contracts: Any, root: nn.Module | None) -> dict[str, list[Spec]]:
    """``{module path: "B T D" or a list of them}`` validated against ``root``'s modules ('' = the model output)."""
    if contracts is None:
        return {}
    if not isinstance(contracts, dict):
        raise InvalidArgument(f"Expected `contracts` to be a dict {{module path: 'B T D'}} but got {type(contracts).__name__}")
    known = {path for path, _ in root.named_modules()} if root is not None else {""}
    out = {}
    for key, value in contracts.items():
        if not isinstance(key, str) or key not in known:
            sample = ", ".join(sorted(known - {""})[:8]) or "none"
            raise InvalidArgument(f"Expected `contracts` keys to be module paths as in named_modules() or '' for the "
                                  f"model output but got {key!r} (modules: {sample})")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        out[key] = [_parse(key, v) for v in values]
    return out


def _pairs(spec: Spec, shape: tuple[int, ...]) -> list[tuple[int, str | int]] | None:
    """(axis, token) pairs, or None when the rank cannot match."""
    if spec.tail is None:
        return list(enumerate(spec.head)) if len(shape) == len(spec.head) else None
    if len(shape) < len(spec.head) + len(spec.tail):
        return None
    start = len(shape) - len(spec.tail)
    return list(enumerate(spec.head)) + [(start + i, t) for i, t in enumerate(spec.tail)]


def _match(spec: Spec, shape: tuple[int, ...], bound: Bound, where: str) -> dict[str, Any] | None:
    """None when ``shape`` satisfies ``spec`` (new names are then bound); otherwise what disagrees."""
    pairs = _pairs(spec, shape)
    if pairs is None:
        need = f"{len(spec.head)}" if spec.tail is None else f"at least {len(spec.head) + len(spec.tail)}"
        return {"reason": f"rank {len(shape)}, '{spec.text}' needs {need} axes", "axis": None}
    new: Bound = {}
    for axis, token in pairs:
        size = shape[axis]
        if isinstance(token, int):
            if size != token:
                return {"reason": f"axis {axis} is {size}, the contract says {token}", "axis": axis}
            continue
        known = bound.get(token) or new.get(token)
        if known is not None and known["size"] != size:
            return {"reason": f"axis {axis} is {size} but {token}={known['size']} (bound at {known['at'] or '(model)'} "
                              f"axis {known['axis']})", "axis": axis, "name": token, "bound": known["size"],
                    "bound_at": known["at"]}
        new.setdefault(token, {"size": size, "at": where, "axis": axis})
    for token, info in new.items():
        bound.setdefault(token, info)
    return None


def _expected(spec: Spec, bound: Bound) -> str:
    def show(t: str | int) -> str:
        return str(t) if isinstance(t, int) or t not in bound else f"{t}={bound[t]['size']}"
    parts = [show(t) for t in spec.head] + ([] if spec.tail is None else ["..."] + [show(t) for t in spec.tail])
    return f"'{spec.text}' ({', '.join(parts)})"


def _between(rows: list[Row], start: int, stop: int, inside: str) -> list[str]:
    """Where the value went between two contract boundaries, outside the module now being checked."""
    def within(path: str) -> bool:
        return path == inside or path.startswith(inside + ".") if inside else True
    seen = [Recorder.where(r) for r in rows[start + 1:stop] if r[0] != "input" and not within(r[1])]
    return list(dict.fromkeys(seen))[-8:]


def _mismatch(rows: list[Row], last_ok: int, i: int, spec: Spec, problem: dict[str, Any], ev: dict[str, Any],
              bound: Bound) -> Check:
    """Row ``i`` (a module output) violates ``spec``; ``last_ok`` is the last row that satisfied a contract."""
    key, shape = rows[i][1], rows[i][4]
    since = _between(rows, last_ok, i, key)
    ev.update(problem, ops_since_last_match=since)
    ev.pop("reason")
    after = Recorder.where(rows[last_ok]) or "(model)" if last_ok >= 0 else "the inputs"
    return check(key, "contract.axis_mismatch", Status.FAIL,
                 f"{key or '(model)'} output {list(shape)} violates '{spec.text}': {problem['reason']}", ev,
                 expected=_expected(spec, bound), observed=list(shape),
                 hint=f"the axes changed meaning between {after} and {key or '(model)'} (outside it: "
                      f"{', '.join(since) or 'nothing'}); look for the transpose/permute/reshape there and "
                      "repair the producer, do not reshape here")


def _not_reached(key: str, spec: Spec) -> Check:
    return check(key, "contract.not_reached", Status.WARN,
                 f"{key or '(model)'} never returned a tensor in this forward pass, so its contract '{spec.text}' was "
                 "not checked", {"contract": spec.text})


def contract_checks(rows: list[Row], specs: dict[str, list[Spec]]) -> tuple[list[tuple[int, Check]], dict[str, int]]:
    """Each contracted module output checked in execution order: ``(row index, check)`` pairs and the sizes bound."""
    bound: Bound = {}
    out: list[tuple[int, Check]] = []
    calls: dict[str, int] = {}
    failed: set[str] = set()
    last_ok = -1
    for i, row in enumerate(rows):
        if row[0] != "output" or row[1] not in specs or int(row[3] or 0) >= len(specs[row[1]]):
            continue
        key, slot, shape = row[1], int(row[3] or 0), row[4]
        spec = specs[key][slot]
        problem = _match(spec, shape, bound, key)
        calls[key] = calls.get(key, 0) + (slot == 0)
        ev = {"contract": spec.text, "shape": list(shape), "output": slot, "call": calls[key]}
        if problem is None:
            last_ok = i
            if calls[key] == 1 and slot == 0:
                out.append((i, check(key, "contract.axes", Status.PASS,
                                     f"{key or '(model)'} output {list(shape)} matches '{spec.text}'", ev)))
        elif key not in failed:
            failed.add(key)
            out.append((i, _mismatch(rows, last_ok, i, spec, problem, ev, bound)))
    out += [(len(rows), _not_reached(key, specs[key][0])) for key in specs if key not in calls]
    return out, {k: v["size"] for k, v in bound.items()}
