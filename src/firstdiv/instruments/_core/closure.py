"""The objects a training step reaches: its closure cells, defaults, the globals it names, a bound method's
object, a partial's arguments, a suspended generator's locals, and the attributes/items of plain objects and containers found there. The
loader ledger restores the modules and optimizers found this way; the state snapshot walks the same edges."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

_SKIP = (str, bytes, int, float, complex, bool, type(None), torch.Tensor, type, types.ModuleType, torch.Generator)


def closure_state(step: Any, depth: int = 4, limit: int = 2000) -> list[Any]:
    """Modules and optimizers ``step`` reaches: its closure cells, defaults, the globals it names, a bound
    method's object, a partial's arguments, and the attributes/items of plain objects and containers found
    there, up to ``depth`` levels (``limit`` objects visited). The instrument restores these afterwards."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    frontier = [step]
    for _ in range(depth + 1):
        nxt: list[Any] = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, _SKIP) or len(seen) >= limit:
                continue
            seen.add(id(obj))
            if isinstance(obj, (nn.Module, torch.optim.Optimizer)):
                found.setdefault(id(obj), obj)
            else:
                nxt.extend(_children(obj))
        frontier = nxt
    return list(found.values())


def _children(obj: Any) -> list[Any]:
    if isinstance(obj, types.FunctionType):
        cells = [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
        named = [obj.__globals__[n] for n in obj.__code__.co_names if n in obj.__globals__]
        return cells + list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values()) + named
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, types.GeneratorType):  # a loop written as a generator: its suspended frame's locals
        return list(obj.gi_frame.f_locals.values())[:200] if obj.gi_frame is not None else []
    if isinstance(obj, Mapping):
        return list(obj.values())[:200]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)[:200]
    if hasattr(obj, "func") and hasattr(obj, "args") and hasattr(obj, "keywords"):  # functools.partial
        return [obj.func, *obj.args, *obj.keywords.values()]
    if dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__"):
        return [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    if isinstance(obj, (DataLoader, Dataset)):
        return []
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return list(attrs.values())[:200] + ([type(obj).__call__] if callable(obj) else [])
    return []


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # an empty cell: a variable not yet assigned
        return False
    return True


def step_optimizers(train_step: Any, optimizer: torch.optim.Optimizer | None = None,
                    model: nn.Module | None = None) -> list[torch.optim.Optimizer]:
    """The optimizers a program steps: ``optimizer`` first, then every other optimizer ``train_step`` reaches
    (a GAN's generator optimizer, a ``SparseAdam`` beside the dense one). With ``model``, only those that own
    at least one of its parameters (a teacher's or a replay buffer's optimizer is not this model's)."""
    found = [optimizer] if optimizer is not None else []
    if train_step is not None:
        found += [o for o in closure_state(train_step) if isinstance(o, torch.optim.Optimizer)
                  and all(not same_update(o, f) for f in found)]
    if model is None:
        return found
    mine = {id(p) for p in model.parameters()}
    return [o for o in found if o is optimizer or any(id(p) in mine for g in o.param_groups for p in g["params"])]


def trained_elsewhere(train_step: Any, optimizer: torch.optim.Optimizer | None, model: nn.Module,
                      idle: frozenset[int] = frozenset()) -> set[str]:
    """Names of ``model``'s parameters that ``optimizer`` does not own but another optimizer ``train_step`` reaches
    owns at an lr above 0: an alternating schedule (encoder and decoder phases, a GAN's other network) trains them in
    calls other than the ones watched, so not moving in those is no evidence they are never trained. ``idle``: ids of
    optimizers seen cleared but never stepped in the calls watched (a step forgotten, not another phase)."""
    if train_step is None:
        return set()
    mine = {id(p) for g in optimizer.param_groups for p in g["params"]} if optimizer is not None else set()
    others = {id(p) for o in step_optimizers(train_step, optimizer, model)[1 if optimizer is not None else 0:]
              if id(o) not in idle for g in o.param_groups if float(g.get("lr", 1.0) or 0.0) > 0 for p in g["params"]}
    return {n for n, p in model.named_parameters() if id(p) in others and id(p) not in mine}


def innermost(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that really updates: a framework's wrapper (Accelerate's ``AcceleratedOptimizer``, Lightning's
    ``LightningOptimizer``) keeps the one it wraps in ``.optimizer`` or ``._optimizer`` and forwards ``step`` to it, and
    an optimizer holding another over its very ``param_groups`` (sharpness-aware minimization's ``base_optimizer``,
    stepped by its ``second_step``) delegates the update to it; step hooks belong on that one (a wrapper may not even
    carry the hook tables)."""
    seen = {id(optimizer)}
    while True:
        named = (vars(optimizer).get("optimizer"), vars(optimizer).get("_optimizer"))
        shared = (v for v in vars(optimizer).values()  # sharpness-aware minimization's base_optimizer: the same groups
                  if isinstance(v, torch.optim.Optimizer) and _attr(v, "param_groups") is _attr(optimizer, "param_groups"))
        inner = next((v for v in (*named, *shared) if isinstance(v, torch.optim.Optimizer) and id(v) not in seen), None)
        if inner is None:
            return optimizer
        seen.add(id(inner))
        optimizer = inner


def same_update(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> bool:
    """Whether two optimizer objects apply one and the same update: one wraps the other, or they share their
    parameter groups or their state (the evidence is the objects themselves, not their count)."""
    ia, ib = innermost(a), innermost(b)
    return ia is ib or _attr(a, "param_groups") is _attr(b, "param_groups") or _attr(a, "state") is _attr(b, "state")


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001 - a wrapper's property that raises is no evidence of sharing
        return object()


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors a batch holds (in tuples, lists and mappings), for a guard around the user's own step: a step that
    runs the program's data pipeline may rewrite memory the batch's tensors share with it (a numpy dataset shuffled in
    place at each epoch's start)."""
    if torch.is_tensor(value):
        return [value]
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return [t for v in items for t in tensors_in(v)]
