"""The user's model for :func:`~firstdiv.instruments.attention_check.attention_check`: ``attention_check(model,
model_inputs, module="transformer.h.0.attn")`` runs a deep copy of the model in eval mode once on its own inputs,
records what the named attention module receives (hidden states, ``attention_mask``, ``position_embeddings``,
``cache_position``... exactly as the model passes them) and stops there; the module is then checked on those inputs and
every finding is placed at its path. ``torch.compile``d models and modules are checked through the eager module they
wrap (``_orig_mod``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...errors import InvalidArgument
from .._core.modes import set_mode
from .._core.state import detached_copy
from ._capture import describe
from ._setup import check_hidden, split_inputs, type_name


def eager(obj: Any, notes: list[str]) -> Any:
    """The module behind ``torch.compile`` (an OptimizedModule keeps it as ``_orig_mod``), with a note."""
    inner = getattr(obj, "_orig_mod", None)
    if isinstance(obj, nn.Module) and isinstance(inner, nn.Module):
        notes.append(f"{type(obj).__name__} from torch.compile: checked the eager {type(inner).__name__} it wraps "
                     "(the compiled graph computes the same function)")
        return inner
    return obj


@dataclass
class ModuleInputs:
    """What the model passed to the module at ``path`` on its first call (or why it could not be recorded)."""

    module: nn.Module | None
    inputs: Any = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)


class _Plain(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _Stop(Exception):
    """Raised by the pre-hook once the module's inputs are recorded: the rest of the model need not run."""


def _attention_paths(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if n and "attention" in type(m).__name__.lower()][:6]


def check_path(model: Any, path: Any) -> None:
    if not isinstance(model, nn.Module):
        raise InvalidArgument(f"Expected `attn` to be the model (an nn.Module) when `module` is given but got {type_name(model)}")
    if not isinstance(path, str) or path not in dict(model.named_modules()) or not path:
        names = _attention_paths(model) or [n for n, _ in model.named_modules() if n][:6]
        raise InvalidArgument(f"Expected `module` to be the named_modules() path of the attention module in the model but got "
                              f"{path!r}; try one of {names}")


def _call(model: nn.Module, inputs: Any) -> None:
    if isinstance(inputs, dict):
        model(**inputs)
    elif isinstance(inputs, (tuple, list)):
        model(*inputs)
    else:
        model(inputs)


def _as_kwargs(module: nn.Module, args: tuple, kwargs: dict) -> Any:
    """The recorded call as one dict of keyword arguments (a tuple when it cannot be bound by name)."""
    try:
        sig = inspect.signature(module.forward)
        b = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return tuple(args) if not kwargs else dict(kwargs)
    out: dict[str, Any] = {}
    for name, value in b.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                return tuple(args) if not kwargs else dict(kwargs)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def _without_cache(inputs: Any, notes: list[str]) -> Any:
    """A key/value cache would grow with every probe pass: the module is checked without one (prefill)."""
    if not isinstance(inputs, dict):
        return inputs
    out = dict(inputs)
    for name, value in inputs.items():
        if value is not None and "cache" in type(value).__name__.lower() and not isinstance(value, torch.Tensor):
            out[name] = None
            notes.append(f"the model's {type(value).__name__} ({name}) was not passed on: each pass starts with no cache")
    if out.get("use_cache") is True:
        out["use_cache"] = False
    return out


def _uncompile(work: nn.Module, notes: list[str]) -> None:
    """torch.compile'd submodules of the copy are replaced by the eager modules they wrap (no compilation runs)."""
    for name, sub in list(work.named_modules()):
        inner = getattr(sub, "_orig_mod", None)
        if name and isinstance(inner, nn.Module) and "._orig_mod" not in f".{name}":
            parent, _, attr = name.rpartition(".")
            setattr(work.get_submodule(parent) if parent else work, attr, inner)
            notes.append(f"{name} is torch.compile'd: checked the eager {type(inner).__name__} it wraps")


def attention_inputs_reason(inputs: Any, path: str) -> str:
    """Why what the model passed to ``path`` is not attention inputs (hidden states [B, T, E] first), '' when it is."""
    try:
        args, kwargs, loc = split_inputs(inputs)
        check_hidden(args[loc] if isinstance(loc, int) else kwargs[loc])
    except InvalidArgument as exc:
        return f"what the model passes to {path} is not attention inputs ({exc})"
    return ""


def module_inputs(model: nn.Module, inputs: Any, path: str) -> ModuleInputs:
    """Run a copy of ``model`` on ``inputs`` until the module at ``path`` is called; its module and inputs."""
    notes: list[str] = []
    try:
        work = set_mode(detached_copy(model)[0], False)
    except Exception as exc:  # noqa: BLE001 - an uncopyable model is reported, not run on the user's object
        return ModuleInputs(None, reason=f"the model could not be deep-copied ({describe(exc)})")
    _uncompile(work, notes)
    target = work.get_submodule(path)
    seen: list[tuple[tuple, dict]] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.append((args, kwargs))
        raise _Stop

    handle = target.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad(), _Plain():  # a mode turns torch's fused eval fast paths off: every submodule is called
            _call(work, inputs)
    except _Stop:
        pass
    except Exception as exc:  # noqa: BLE001 - user code
        if not seen:
            return ModuleInputs(None, reason=f"the model raised {describe(exc)} before calling {path}")
    finally:
        handle.remove()
    if not seen:
        return ModuleInputs(None, reason=f"the model's forward pass never called {path} ({type(target).__name__})")
    if model.training:
        notes.append("the model was in training mode; its copy ran in eval mode (as it would be evaluated)")
    args, kwargs = seen[0]
    return ModuleInputs(target, _without_cache(_as_kwargs(target, args, kwargs), notes), notes=notes)
