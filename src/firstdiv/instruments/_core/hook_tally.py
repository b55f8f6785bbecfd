"""Counting the calls of the user's own hooks during an instrument (see :mod:`._user_hooks` for why hooks are
kept and reported rather than removed).

Counting wraps each registered hook in place for the duration of the call and puts the user's own hook
object back under its own key afterwards (also when the instrument raises). A wrapper deep-copies as the
user's hook would (a stateful hook object is copied, and its copy's calls touch nothing of the user's)
and pickles as the user's hook itself. Legacy reparametrization hooks (spectral_norm, weight_norm) are
PyTorch's computation, not user hooks: left alone and not counted.
"""

from __future__ import annotations

import copy
import functools
import itertools
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module_globals

from .copying import modules_in

_MODULE_HOOKS = {"_forward_pre_hooks": "forward pre-hook", "_forward_hooks": "forward hook",
                 "_backward_pre_hooks": "backward pre-hook", "_backward_hooks": "backward hook"}
_TENSOR_HOOKS = {"_backward_hooks": "gradient hook", "_post_accumulate_grad_hooks": "post-accumulate-grad hook"}
_GLOBAL_HOOKS = {"_global_forward_pre_hooks": "global forward pre-hook", "_global_forward_hooks": "global forward hook",
                 "_global_backward_pre_hooks": "global backward pre-hook", "_global_backward_hooks": "global backward hook"}
_CLOSURE_DEPTH = 3  # how far a train_step's closure (and the closures it holds) is searched for modules
_MAX_ITEMS = 256  # items looked at per container or object: a dataset held in a list is not walked example by example
#: never walked: values, tensors, and Python modules (a closure holding ``np`` must not walk numpy)
_OPAQUE = (torch.Tensor, str, bytes, int, float, complex, bool, type(None), types.ModuleType)


def _torch_hook(hook: Any) -> bool:
    """Hooks that implement a reparametrization (part of PyTorch's computation, not the user's)."""
    from torch.nn.utils.spectral_norm import SpectralNorm, SpectralNormLoadStateDictPreHook, SpectralNormStateDictHook
    from torch.nn.utils.weight_norm import WeightNorm

    return isinstance(hook, (SpectralNorm, WeightNorm, SpectralNormStateDictHook, SpectralNormLoadStateDictPreHook))


def _unwrapped(hook: Any) -> Any:
    return hook


class _Counted:
    """The user's ``hook``, counting its calls into ``tally[label]`` as (on the user's modules, on copies)."""

    def __init__(self, hook: Any, label: str, tally: dict[str, Any], originals: set[int] | None) -> None:
        self.hook, self.label, self.tally, self.originals = hook, label, tally, originals

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        counts = self.tally.setdefault(self.label, [0, 0])
        on_copy = self.originals is not None and bool(args) and id(args[0]) not in self.originals
        counts[1 if on_copy else 0] += 1
        return self.hook(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        inner = copy.deepcopy(self.hook, memo)
        return self if inner is self.hook else inner  # a copied hook object no longer reaches the user's state

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Any]]:
        return _unwrapped, (self.hook,)


def _reach(value: Any, depth: int, seen: set[int], out: list[nn.Module]) -> None:
    """Modules ``value`` reaches: itself, container items, a bound method's ``__self__``, a function's closure
    cells, a partial's arguments, a plain object's attributes (a train_step closing over a model)."""
    if id(value) in seen or depth > _CLOSURE_DEPTH or isinstance(value, _OPAQUE):
        return
    seen.add(id(value))
    if isinstance(value, nn.Module):
        out.append(value)
        return
    if isinstance(value, dict):
        items: list[Any] = list(itertools.islice(value.values(), _MAX_ITEMS))
    elif isinstance(value, (list, tuple)):
        items = list(value[:_MAX_ITEMS])
    elif isinstance(value, functools.partial):
        items = [value.func, *value.args, *value.keywords.values()]
    elif hasattr(value, "__self__") and hasattr(value, "__func__"):
        items = [value.__self__, value.__func__]
    elif hasattr(value, "__code__"):
        items = [cell.cell_contents for cell in getattr(value, "__closure__", None) or () if _filled(cell)]
    else:
        items = [] if isinstance(value, type) else list(getattr(value, "__dict__", {}).values())
    for item in items[:_MAX_ITEMS]:
        _reach(item, depth + 1, seen, out)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError for a variable not bound yet
    except ValueError:
        return False
    return True


def user_modules(args: tuple, kwargs: dict[str, Any]) -> list[nn.Module]:
    """Every module the instrument's arguments reach (directly, in containers, through callables' closures)."""
    roots: list[nn.Module] = []
    seen: set[int] = set()
    for value in (*args, *kwargs.values()):
        _reach(value, 0, seen, roots)
    return modules_in(roots)


def _names(roots: list[nn.Module]) -> dict[int, str]:
    names: dict[int, str] = {}
    for root in roots:
        for name, m in root.named_modules(remove_duplicate=False):
            names.setdefault(id(m), name or "(root)")
    return names


class _Swaps:
    """The wrapped hooks, to put the user's own objects back under their own keys."""

    def __init__(self, tally: dict[str, list[int] | None], wrapping: bool) -> None:
        self.tally, self.wrapping = tally, wrapping
        self.done: list[tuple[Any, Any, Any]] = []

    def wrap(self, hooks: Any, label: str, originals: set[int] | None) -> None:
        if not hooks:
            return
        user = [(key, hook) for key, hook in hooks.items() if not _torch_hook(hook) and not isinstance(hook, _Counted)]
        for i, (key, hook) in enumerate(user):
            name = label if len(user) == 1 else f"{label} #{i + 1}"
            if not self.wrapping:  # present, not counted
                self.tally.setdefault(name, None)
                continue
            hooks[key] = _Counted(hook, name, self.tally, originals)
            self.done.append((hooks, key, hook))

    def undo(self) -> None:
        for hooks, key, hook in reversed(self.done):
            if isinstance(hooks.get(key), _Counted):  # a hook the user's code removed meanwhile stays removed
                hooks[key] = hook


@contextmanager
def counting(roots: list[nn.Module], wrapping: bool = True) -> Iterator[dict[str, list[int] | None]]:
    """Count, per user hook, the calls made inside the block: ``{label: [on the user's modules, on copies]}``
    for module hooks of every module in ``roots``, gradient hooks of their parameters, and global module
    hooks ("on copies" then means: on any module that is not the user's). With ``wrapping=False`` nothing is
    wrapped and every hook present maps to None (torch.compile guards on the hook objects it inlines, so a
    counting wrapper would change what an instrument of compilation observes)."""
    tally: dict[str, list[int] | None] = {}
    swaps, names = _Swaps(tally, wrapping), _names(roots)
    modules = modules_in(roots)
    originals = {id(m) for m in modules}
    for m in modules:
        where = names.get(id(m), type(m).__name__)
        for attr, kind in _MODULE_HOOKS.items():
            swaps.wrap(getattr(m, attr, None), f"{where} {kind}", originals)
        prefix = "" if where == "(root)" else f"{where}."
        for pname, p in m.named_parameters(recurse=False):
            for attr, kind in _TENSOR_HOOKS.items():  # a deep copy drops tensor hooks: these run on the user's only
                swaps.wrap(getattr(p, attr, None), f"parameter {prefix}{pname} {kind}", None)
    for attr, kind in _GLOBAL_HOOKS.items():
        swaps.wrap(getattr(_module_globals, attr, None), kind, originals)
    try:
        yield tally
    finally:
        swaps.undo()
