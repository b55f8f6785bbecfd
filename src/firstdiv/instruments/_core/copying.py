"""Deep copies that work on every model practitioners write, and derived attributes kept by identity.

The legacy reparametrizations (``nn.utils.spectral_norm``, ``nn.utils.weight_norm``) recompute a plain
attribute (``module.weight``) from registered parameters (``weight_orig``; ``weight_g`` and ``weight_v``)
in a forward pre-hook. After any forward with grad enabled that attribute is a non-leaf tensor, and
``copy.deepcopy`` refuses non-leaf tensors ("Only Tensors created explicitly by the user ... support the
deepcopy protocol"). A user caching an activation on a module (``self.last = out``) hits the same wall.

:func:`model_copy` deep-copies with a memo that maps each such non-leaf attribute to a detached clone of
its current value: the copy holds what the original holds, and its own pre-hook re-derives the
attribute from the copy's parameters on the copy's next forward (``torch.nn.utils.parametrize``
needs nothing: it derives the weight on access).

:func:`kept_derived` puts those attributes back by identity after an instrument ran the user's model:
each forward replaces ``module.weight`` with a new tensor, and code holding the old one (or a later
``copy.deepcopy`` of the model) must find exactly what it found before.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from .closure import innermost
from .copy_origin import remember
from .python_graph import held, hidden_objects

_MAX_DEPTH = 3  # how deep evidence containers (lists, tuples, dicts) are searched for modules


def modules_in(objects: Iterable[Any], depth: int = 0) -> list[nn.Module]:
    """Every module reachable from ``objects`` (modules, bound methods of modules, lists/tuples/dicts of
    them): each module's submodules and the modules it holds outside the registry, each once."""
    found: dict[int, nn.Module] = {}
    for obj in objects:
        obj = getattr(obj, "__self__", obj)  # a bound method such as model.forward
        if isinstance(obj, nn.Module):
            for sub in (obj, *hidden_objects(obj)):
                if isinstance(sub, nn.Module):
                    for m in sub.modules():
                        found.setdefault(id(m), m)
        elif depth < _MAX_DEPTH and isinstance(obj, (list, tuple, dict)):
            items = obj.values() if isinstance(obj, dict) else obj
            for m in modules_in(items, depth + 1):
                found.setdefault(id(m), m)
    return list(found.values())


def _non_leaf_attributes(modules: list[nn.Module]) -> Iterator[torch.Tensor]:
    """Non-leaf tensors held in modules' instance attributes (directly or in plain containers)."""
    for module in modules:
        for _, _, value in held(module, lambda key: True):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                yield value


def copy_memo(objects: Iterable[Any]) -> dict[int, Any]:
    """A ``copy.deepcopy`` memo mapping every non-leaf tensor attribute of the modules in ``objects`` to a
    detached clone of its value (what the copy holds until its own forward re-derives it)."""
    return {id(t): t.detach().clone() for t in _non_leaf_attributes(modules_in(objects))}


def model_copy(obj: Any) -> Any:
    """``copy.deepcopy(obj)`` that also copies models whose attributes hold non-leaf tensors (legacy
    spectral_norm / weight_norm after a forward, cached activations); ``obj`` may be a module, a bound
    method of one, or a tuple/list/dict holding modules and optimizers. What deepcopy still refuses is tried
    once more (:func:`_copy_again`); if that fails too, the first error is raised."""
    memo = copy_memo([obj])
    try:
        copied = copy.deepcopy(obj, memo)
    except Exception as first:  # noqa: BLE001 - the user's objects: a second, wider try, then their own error
        try:
            copied, memo = _copy_again(obj)
        except Exception:  # noqa: BLE001
            raise first from None
    remember(modules_in([obj]), memo)
    return copied


def _copy_again(obj: Any) -> tuple[Any, dict[int, Any]]:
    """The deep copy with what real programs hold and deepcopy refuses handled: a non-leaf tensor held deeper than a
    module's attributes (a controller object's cached hidden state) is copied as a detached clone, and an object whose
    attribute lookup raises something other than AttributeError (an attribute-access dict, ``__getattr__ =
    dict.__getitem__``, raising KeyError for ``__deepcopy__``) is shared, not copied: such configs are read, not
    trained."""
    memo = copy_memo([obj]) | {id(v): v for v in _refusing([obj], 0, set())}
    original = torch.Tensor.__deepcopy__

    def deepcopy_tensor(self: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
        if self.is_leaf:
            return original(self, memo)
        memo[id(self)] = out = self.detach().clone()
        return out

    torch.Tensor.__deepcopy__ = deepcopy_tensor
    try:
        return copy.deepcopy(obj, memo), memo
    finally:
        torch.Tensor.__deepcopy__ = original


def _refusing(values: Iterable[Any], depth: int, seen: set[int]) -> Iterator[Any]:
    """Objects among ``values`` (and what they hold, 4 levels down) whose ``__deepcopy__`` lookup raises."""
    for v in values:
        if id(v) in seen or isinstance(v, (torch.Tensor, str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(v))
        try:
            getattr(v, "__deepcopy__", None)
        except Exception:  # noqa: BLE001 - the lookup itself fails: deepcopy would too
            yield v
            continue
        if depth >= 4:
            continue
        if isinstance(v, dict):
            yield from _refusing(v.values(), depth + 1, seen)
        elif isinstance(v, (list, tuple, set)):
            yield from _refusing(v, depth + 1, seen)
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            yield from _refusing(vars(v).values(), depth + 1, seen)


def _attribute_tensors(modules: list[nn.Module]) -> list[tuple[nn.Module, str, torch.Tensor]]:
    return [(m, key, value) for m in modules for key, value in vars(m).items() if isinstance(value, torch.Tensor)]


@contextmanager
def kept_derived(*objects: Any) -> Iterator[None]:
    """On exit, every tensor a module of ``objects`` held as a plain attribute on entry is that module's
    attribute again, the very same object (a reparametrization hook replaces it on every forward)."""
    saved = _attribute_tensors(modules_in(objects))
    try:
        yield
    finally:
        for module, key, value in saved:
            if key not in module._parameters and key not in module._buffers:
                module.__dict__[key] = value


def folded(model: nn.Module) -> list[str]:
    """Fold every reparametrization of ``model`` (a copy: this changes it) into a plain parameter holding its
    current value, as a deployment does before quantizing (a quantized module keeps the float module's
    pre-hooks, and a legacy hook would then look for ``weight_orig`` on a module that has none); returns the
    tensors folded. ``parametrize.remove_parametrizations`` is not used: it deletes the property from the
    module's class, which a deep copy shares with the user's model."""
    from torch.nn.utils import parametrize
    from torch.nn.utils.spectral_norm import SpectralNorm, remove_spectral_norm
    from torch.nn.utils.weight_norm import WeightNorm, remove_weight_norm

    done: list[str] = []
    for path, module in list(model.named_modules()):
        prefix = f"{path}." if path else ""
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, (SpectralNorm, WeightNorm)):
                (remove_spectral_norm if isinstance(hook, SpectralNorm) else remove_weight_norm)(module, hook.name)
                done.append(prefix + hook.name)
        if parametrize.is_parametrized(module):
            done += [prefix + name for name in _fold_parametrized(module)]
    return done


def _fold_parametrized(module: nn.Module) -> list[str]:
    """What ``remove_parametrizations(leave_parametrized=True)`` does, on this instance only."""
    values = {}
    with torch.no_grad():
        for name, chain in module.parametrizations.items():
            first = getattr(chain, "original", None)
            first = getattr(chain, "original0", None) if first is None else first
            values[name] = (getattr(module, name).detach().clone(), isinstance(first, nn.Parameter),
                            bool(getattr(first, "requires_grad", False)))
    del module._modules["parametrizations"]
    module.__class__ = type(module).__bases__[0]  # parametrize subclasses the module's own class per instance
    for name, (value, is_param, requires_grad) in values.items():
        if is_param:
            module.register_parameter(name, nn.Parameter(value, requires_grad=requires_grad))
        else:
            module.register_buffer(name, value)
    return list(values)


def detached_copy(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> tuple[nn.Module, Any]:
    """Deep-copy a model and its optimizer together, so the copy's optimizer owns the copy's
    parameters by identity (and stale parameters it owned stay stale in the copy); optimizer attributes
    that pickling drops (LBFGS's ``_params``, ``_numel_cache``) are rebuilt, so the copy can step."""
    # a framework's wrapper steps only when its own state says so (Accelerate skips step() between gradient
    # accumulation boundaries), and pickling an Optimizer subclass keeps only its groups and state (Fabric's wrapper
    # loses the optimizer it forwards to): the copy is of the optimizer that really updates
    inner = innermost(optimizer) if optimizer is not None else None
    copied, opt_copy = model_copy((model, inner))  # also with non-leaf derived attributes
    if inner is not None:
        _restore_lost_attributes(inner, opt_copy)
    return copied, opt_copy


def _restore_lost_attributes(original: torch.optim.Optimizer, copied: torch.optim.Optimizer) -> None:
    """Optimizer pickling keeps only defaults/state/param_groups; attributes such as LBFGS's ``_params`` (a list
    of the group's parameters) and ``_numel_cache`` are lost in the copy. Rebuild parameter lists from the
    copy's own parameters; copy plain scalar attributes."""
    twin = {id(p): q for g, h in zip(original.param_groups, copied.param_groups) for p, q in zip(g["params"], h["params"])}
    for key in set(vars(original)) - set(vars(copied)):
        value = getattr(original, key)
        if isinstance(value, list) and value and all(id(v) in twin for v in value):
            setattr(copied, key, [twin[id(v)] for v in value])
        elif value is None or isinstance(value, (bool, int, float, str)):
            setattr(copied, key, value)


def restarting(work: nn.Module) -> nn.Module:
    """``work`` (an instrument's own copy of the user's model) with a forward pre-hook that puts back, before each of
    its forwards, every tensor (or tuple of tensors) its modules held as a plain attribute when this was called: a
    recurrent state the forward
    stores on the module (``self.hidden = ...``), which the user's loop re-initializes per batch, starts every forward
    of the copy from where the user's model stood instead of from the last forward's (by then freed) graph."""
    def state(v: Any) -> bool:  # a tensor, or a tuple/list of them (an LSTM's (h, c))
        return torch.is_tensor(v) or isinstance(v, (tuple, list)) and bool(v) and all(map(torch.is_tensor, v))
    saved = [(m, key, value) for m in work.modules() for key, value in vars(m).items()
             if state(value) and key not in m._parameters and key not in m._buffers]

    def restart(*_: Any) -> None:
        for m, key, value in saved:
            m.__dict__[key] = value
    if saved:
        work.register_forward_pre_hook(restart)
    return work
