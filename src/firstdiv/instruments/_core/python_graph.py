"""What Python reaches outside PyTorch's registry: tensors and modules a module holds as plain instance
attributes, directly or in lists, tuples and dicts. One walk serves the leave-no-trace snapshot
(:func:`hidden_objects`: they are the user's objects too) and four_structures' PYTHON structure
(:func:`python_graph`: where each one is held, and which merely alias registered objects)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

_INTERNAL = frozenset(vars(nn.Module()))  # nn.Module's own bookkeeping: registries, hooks, flags
_MAX_DEPTH = 3  # how deep plain containers are searched ("blocks[0]['q']")


def held(module: nn.Module, keep: Callable[[str], bool],
         expanded: set[int] | None = None) -> Iterator[tuple[str, str, torch.Tensor | nn.Module]]:
    """``(attribute, path, value)`` for each tensor or module in ``module``'s instance attributes named
    ``keep(attribute)``, in attribute order, depth-first through containers up to 3 deep; the path reads
    like code (``blocks[0]['q']``). A container whose id is in ``expanded`` is skipped; each container
    walked is added to it (pass one set across modules to walk a shared container once)."""
    for key, value in vars(module).items():
        if keep(key):
            for path, found in _contained(key, value, 0, expanded):
                yield key, path, found


def _contained(path: str, value: Any, depth: int, expanded: set[int] | None) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (torch.Tensor, nn.Module)):
        yield path, value
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple, dict)):
        if expanded is not None:
            if id(value) in expanded:
                return
            expanded.add(id(value))
        is_dict = isinstance(value, dict)
        for key, item in (value.items() if is_dict else enumerate(value)):
            yield from _contained(f"{path}[{key!r}]" if is_dict else f"{path}[{key}]", item, depth + 1, expanded)


def hidden_objects(model: nn.Module) -> list[Any]:
    """Tensors and modules ``model`` holds as plain attributes (directly or in lists, tuples, dicts),
    outside PyTorch's registry: not moved by ``.to()``, not in ``parameters()``, still the user's."""
    found: dict[int, Any] = {}
    pending, seen = [model], set()
    while pending:
        module = pending.pop()
        for sub in module.modules():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            for _, _, value in held(sub, lambda key: not key.startswith("_")):
                found.setdefault(id(value), value)
        pending += [v for v in found.values() if isinstance(v, nn.Module) and id(v) not in seen]
    return [v for v in found.values() if not (isinstance(v, nn.Module) and v is model)]


@dataclass
class Hidden:
    """Something Python reaches outside the registry: one tensor, or the modules under one attribute."""

    path: str
    tensor: torch.Tensor | None = None
    modules: list[nn.Module] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)

    def tensors(self) -> list[torch.Tensor]:
        if self.tensor is not None:
            return [self.tensor]
        seen: dict[int, torch.Tensor] = {}
        for m in self.modules:
            for t in (*m.parameters(), *m.buffers()):
                seen.setdefault(id(t), t)
        return list(seen.values())


@dataclass
class Registry:
    """What PyTorch registered, by identity: parameters and buffers (each once, with all its names), modules."""

    params: dict[int, tuple[torch.Tensor, list[str]]]
    buffers: dict[int, tuple[torch.Tensor, list[str]]]
    module_ids: set[int]

    @classmethod
    def of(cls, model: nn.Module) -> Registry:
        params: dict[int, tuple[torch.Tensor, list[str]]] = {}
        buffers: dict[int, tuple[torch.Tensor, list[str]]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            params.setdefault(id(p), (p, []))[1].append(name)
        for name, b in model.named_buffers(remove_duplicate=False):
            if b is not None:
                buffers.setdefault(id(b), (b, []))[1].append(name)
        return cls(params, buffers, {id(m) for m in model.modules()})

    def name(self, t: torch.Tensor) -> str | None:
        entry = self.params.get(id(t)) or self.buffers.get(id(t))
        return entry[1][0] if entry else None


def python_graph(model: nn.Module, reg: Registry) -> tuple[list[Hidden], int]:
    """Tensors and modules held as plain attributes, in attribute order, and how many plain attributes
    merely alias registered objects (harmless)."""
    found: dict[str, Hidden] = {}
    tensor_at: dict[int, Hidden] = {}
    module_ids: set[int] = set()
    expanded: set[int] = set()
    aliases = 0
    for mpath, module in model.named_modules():
        for key, rel, value in held(module, lambda k: k not in _INTERNAL, expanded):
            top, path = (f"{mpath}.{key}", f"{mpath}.{rel}") if mpath else (key, rel)
            if id(value) in reg.params or id(value) in reg.buffers or id(value) in reg.module_ids:
                aliases += 1
            elif isinstance(value, nn.Module):
                if id(value) not in module_ids:
                    module_ids.add(id(value))
                    found.setdefault(top, Hidden(top)).modules.append(value)
            elif id(value) in tensor_at:
                tensor_at[id(value)].aliases.append(path)
            else:
                tensor_at[id(value)] = found[path] = Hidden(path, tensor=value)
    return list(found.values()), aliases


def hidden_modules(model: nn.Module) -> list[nn.Module]:
    """Modules the model holds outside its registry (plain lists/dicts/attributes): an instrument that
    runs the model must guard them too, since ``model.modules()`` does not list them."""
    hidden, _ = python_graph(model, Registry.of(model))
    return [m for h in hidden for m in h.modules]
