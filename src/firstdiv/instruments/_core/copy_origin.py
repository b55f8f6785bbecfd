"""Which user module a copy was made from, and a ``loss_fn`` that reads the copy it is evaluated on.

A loss often reads the model it belongs to through its closure: a VAE's KL from ``model.mean`` and ``model.logstd``
that ``forward`` stored, DiffPool's ``model.loss(pred, label, adj)`` with the assignment tensor ``forward`` kept, a
mixture of experts' ``model.aux_loss``. Evaluated on a copy of the model, such a loss would read the user's model
instead: attributes its forward never set (an ``AttributeError``), or values left from the user's last step, and a
graph that reaches the user's parameters. :func:`model_copy` records each copied module's origin (the user's module,
through copies of copies); :func:`reading` returns the loss with every closure cell that holds the origin of the
evaluated model, or of one of its submodules (or another copy of it), pointing at the copy instead. A module of the same class that is not
the origin (a teacher network of the student's architecture) is left alone. The loss's own closure cells are read, and
one level into a plain object or dict a cell holds (a namespace of the training objects whose ``t.D`` the loss calls:
a shallow copy of it, with those modules pointing at the copies, takes its place); a module the loss reaches through
globals or another function stays as it is.
"""

from __future__ import annotations

import copy
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from torch import nn

_ORIGIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # copy -> weakref to the user's module


def remember(originals: Iterable[nn.Module], memo: dict[int, Any]) -> None:
    """After ``copy.deepcopy(..., memo)``: each copied module's origin (the user's module it stands for)."""
    for m in originals:
        copied = memo.get(id(m))
        if isinstance(copied, nn.Module) and copied is not m:
            _ORIGIN[copied] = _ORIGIN.get(m) or weakref.ref(m)


def origin(m: nn.Module) -> nn.Module | None:
    ref = _ORIGIN.get(m)
    return ref() if ref is not None else None


def reading(loss_fn: Callable[..., Any], model: Any) -> Callable[..., Any]:
    """``loss_fn`` reading ``model`` (a copy) where its closure holds the user's module ``model`` was copied from, or
    the origin of one of its submodules (module docstring); ``loss_fn`` itself when there is none."""
    inner = getattr(loss_fn, "__wrapped__", None)
    if inner is not None and callable(getattr(loss_fn, "rewrapped", None)):  # firstdiv's own wrapper of the user's loss
        swapped = reading(inner, model)
        return loss_fn if swapped is inner else loss_fn.rewrapped(swapped)
    closure = getattr(loss_fn, "__closure__", None)
    if not isinstance(loss_fn, types.FunctionType) or not closure or not isinstance(model, nn.Module) \
            or not any(_holds_module(_held(c)) for c in closure):  # the common case: no module held
        return loss_fn
    twins = {id(o): sub for sub in model.modules() if (o := origin(sub)) is not None}
    if not twins:
        return loss_fn
    cells = tuple(_swapped(c, twins) for c in closure)
    if all(a is b for a, b in zip(cells, closure)):
        return loss_fn
    fn = types.FunctionType(loss_fn.__code__, loss_fn.__globals__, loss_fn.__name__, loss_fn.__defaults__, cells)
    fn.__kwdefaults__ = loss_fn.__kwdefaults__
    fn.__dict__.update(loss_fn.__dict__)
    return fn


def _held(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _items(value: Any) -> dict[Any, Any]:
    """A plain object's attributes or a dict's items (empty for modules, functions, classes, tensors)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (nn.Module, types.FunctionType, types.MethodType, types.ModuleType, type)):
        return {}
    attrs = getattr(value, "__dict__", None)
    return attrs if isinstance(attrs, dict) else {}


def _holds_module(value: Any) -> bool:
    return isinstance(value, nn.Module) or any(isinstance(v, nn.Module) for v in list(_items(value).values())[:200])


def _twin(value: Any, twins: dict[int, nn.Module]) -> Any:
    """The copy standing for ``value`` where it is a module copied (or a copy of one), else ``value``."""
    if not isinstance(value, nn.Module):
        return value
    key = id(origin(value) or value)  # the user's module, or another copy of it (a loss already reading a copy)
    return twins.get(key, value)


def _swapped(cell: types.CellType, twins: dict[int, nn.Module]) -> types.CellType:
    value = _held(cell)
    if isinstance(value, nn.Module):
        return types.CellType(_twin(value, twins)) if _twin(value, twins) is not value else cell
    swap = {k: _twin(v, twins) for k, v in list(_items(value).items())[:200] if _twin(v, twins) is not v}
    if not swap:
        return cell
    try:  # one level down: a shallow copy of the namespace, its modules pointing at the copies
        other = copy.copy(value)
        target = other if isinstance(other, dict) else vars(other)
        if target is _items(value):
            return cell
        target.update(swap)
    except Exception:  # noqa: BLE001 - an object that refuses a shallow copy is read as it is
        return cell
    return types.CellType(other)
