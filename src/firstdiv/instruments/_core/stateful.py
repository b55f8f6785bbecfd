"""LR schedulers and GradScalers: state the user's own step changes outside the model and optimizer.

An instrument that runs the user's ``train_step`` on the user's objects also steps their scheduler (its
``last_epoch``, ``_last_lr`` and the param-group ``lr`` it writes) and their ``torch.amp.GradScaler`` (its
scale, growth tracker and lazily created tensors). :func:`reachable` finds them where a step holds them (its
closure, the globals its code names, defaults, ``functools.partial`` arguments, a bound method's object and
plain attributes); :class:`StatefulState` snapshots one, diffs it and puts it back. Objects reached only
through something else (a loader iterator, a logger, a C extension) are not found, and not restored.
"""

from __future__ import annotations

import copy
import types
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .closure import _SKIP
from .closure import _children as step_children
from .python_graph import _INTERNAL
from .state_values import neq, put_back, same, version_of

_MAX_DEPTH = 4  # step -> helper function -> trainer object -> its attribute -> a container in it
_MAX_OBJECTS = 2000  # a walk never costs more than this many objects, however large the user's globals are
_LEAVES = (*_SKIP, torch.optim.Optimizer)


def _scheduler_types() -> tuple[type, ...]:
    from torch.optim import lr_scheduler

    return (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau)


def is_stateful(obj: Any) -> bool:
    """Whether ``obj`` is an LR scheduler or a GradScaler (the kinds this module restores)."""
    return isinstance(obj, (torch.amp.GradScaler, *_scheduler_types()))


def _function_refs(fn: types.FunctionType) -> list[Any]:
    out = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # a cell whose variable is not bound yet
            pass
    codes = [fn.__code__]
    while codes:  # names used by nested lambdas and comprehensions resolve in the same globals
        c = codes.pop()
        out += [fn.__globals__[n] for n in c.co_names if n in fn.__globals__]
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


def _children(obj: Any) -> list[Any]:
    """What one step of the walk reaches from ``obj``: loader_timing's walk of a step's closure, with the
    names nested code uses, and only a module's plain attributes (its registry holds no schedulers)."""
    if isinstance(obj, types.FunctionType):
        return _function_refs(obj)
    if isinstance(obj, nn.Module):
        return [v for k, v in vars(obj).items() if k not in _INTERNAL]
    return step_children(obj)


def reachable(roots: Iterable[Any]) -> list[Any]:
    """LR schedulers and GradScalers among ``roots`` or reachable from them (see the module docstring), each
    once, in the order found. Models and optimizers are not searched beyond their plain attributes."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    frontier = deque((obj, 0) for obj in roots)
    while frontier and len(seen) < _MAX_OBJECTS:
        obj, depth = frontier.popleft()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        if is_stateful(obj):
            found.setdefault(id(obj), obj)
            frontier.extend((v, depth + 1) for v in _nested(obj))  # a warmup wrapping its after_scheduler
        elif depth < _MAX_DEPTH and not isinstance(obj, _LEAVES) and not (depth and isinstance(obj, nn.Module)):
            frontier.extend((child, depth + 1) for child in _children(obj))
    return list(found.values())


def _nested(obj: Any) -> list[Any]:
    """The schedulers a scheduler holds as attributes (a warmup's ``after_scheduler``, a list of them)."""
    items = [v for v in vars(obj).values() if not isinstance(v, torch.optim.Optimizer)]
    items += [x for v in items if isinstance(v, (list, tuple)) for x in v]
    return [v for v in items if is_stateful(v)]


def _kept(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of a ``state_dict()`` that keeps the schedulers it holds by reference (a warmup's ``state_dict`` holds
    its ``after_scheduler`` object): restoring must put that very object back, its own state restored on its own."""
    def held(v: Any) -> bool:
        return is_stateful(v) or (isinstance(v, (list, tuple)) and any(is_stateful(x) for x in v))
    return {k: (v if held(v) else copy.deepcopy(v)) for k, v in state.items()}


@dataclass
class StatefulState:
    """One scheduler's ``state_dict()`` plus the param-group hyperparameters it writes to its optimizer, or one
    scaler's attributes (its tensors kept by identity, with a copy of their values and version counters)."""

    obj: Any
    saved: dict[str, Any]
    tensors: dict[str, tuple[torch.Tensor, torch.Tensor, int | None]]
    groups: list[dict[str, Any]] | None

    @classmethod
    def of(cls, obj: Any) -> StatefulState:
        if isinstance(obj, torch.amp.GradScaler):  # its state_dict() cannot say its scale was never created
            tensors = {k: (v, v.detach().clone(), version_of(v)) for k, v in vars(obj).items() if torch.is_tensor(v)}
            return cls(obj, {k: copy.deepcopy(v) for k, v in vars(obj).items() if k not in tensors}, tensors, None)
        opt = getattr(obj, "optimizer", None)
        groups = None if opt is None else [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                                           for g in opt.param_groups]
        return cls(obj, _kept(obj.state_dict()), {}, groups)

    def diff(self, after: StatefulState) -> list[str]:
        name = type(self.obj).__name__
        out = [f"{name}: {k} changed" for k in sorted(set(self.saved) | set(after.saved))
               if k not in self.saved or k not in after.saved or neq(self.saved[k], after.saved[k])]
        for k, (ref, value, _) in self.tensors.items():
            now = after.tensors.get(k)
            if now is None or now[0] is not ref:
                out.append(f"{name}: tensor {k} replaced or removed")
            elif not same(value, now[1]):
                out.append(f"{name}: tensor {k} value changed")
        if self.groups is not None and (after.groups is None or neq(self.groups, after.groups)):
            out.append(f"{name}: the param-group hyperparameters of its optimizer changed")
        return out

    def restore(self) -> None:
        """Put the state back; call under ``torch.no_grad()``."""
        if not isinstance(self.obj, torch.amp.GradScaler):
            self.obj.load_state_dict(_kept(self.saved))
            for g, saved in zip(self.obj.optimizer.param_groups if self.groups else (), self.groups or ()):
                g.update(copy.deepcopy(saved))
            return
        attrs = vars(self.obj)
        for key in set(attrs) - set(self.saved) - set(self.tensors):
            del attrs[key]
        attrs.update(copy.deepcopy(self.saved))  # a scale created lazily during the step goes back to None
        for key, (ref, value, version) in self.tensors.items():
            attrs[key] = ref
            put_back(ref, value, version)
