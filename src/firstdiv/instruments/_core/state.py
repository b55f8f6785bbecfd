"""What "leave no trace" means, as code: a snapshot of everything an instrument may touch on the user's objects, a
diff between two snapshots, and a guard that restores the snapshot on exit.

Instruments observe through :func:`guarded` (restores even when they raise half-way); the test harness compares
:class:`Snapshot` objects taken before and after every instrument call.

Covered, per DESIGN.md: parameter and buffer values, identities and version counters, ``.grad`` (None vs tensor, its
identity and values), ``requires_grad``, module train/eval flags, registered hooks (module, tensor, optimizer and global),
instance attributes added to modules or optimizers (monkey-patched methods), optimizer state (its tensors by identity;
a wrapper's in the optimizer it wraps) and param groups (membership by identity and hyperparameters), devices, LR
schedulers and GradScalers passed in or reachable from a passed callable (:mod:`._stateful`), the global RNG states of
torch (CPU and CUDA), numpy and ``random``, and torch's grad mode.

Restoring writes only what changed, into the original objects, and winds version counters back (:mod:`._state_values`),
so code holding ``p.grad`` keeps its link and a pending ``backward()`` still runs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..._globals import restore_rng, rng_state
from .closure import innermost
from .copying import detached_copy, kept_derived  # noqa: F401 - detached_copy: imported from here by the instruments
from .python_graph import hidden_objects
from .state_diff import _diff_globals, _diff_module, _diff_optimizer, _diff_tensor
from .state_values import put_back, version_of
from .stateful import StatefulState, is_stateful, reachable

_MODULE_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                      "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                      "_load_state_dict_post_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_module_registration_hooks",
                 "_global_parameter_registration_hooks", "_global_buffer_registration_hooks")


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().clone()


def _tensor_hooks(t: torch.Tensor) -> tuple[int, int]:
    hooks = getattr(t, "_backward_hooks", None)
    post = getattr(t, "_post_accumulate_grad_hooks", None)
    return (len(hooks) if hooks else 0, len(post) if post else 0)


@dataclass
class _TensorState:
    ident: int
    value: torch.Tensor
    requires_grad: bool
    grad: torch.Tensor | None
    hooks: tuple[int, int]
    version: int | None = None
    grad_ref: torch.Tensor | None = None  # the original .grad object: restored into, never replaced
    grad_version: int | None = None

    @classmethod
    def of(cls, t: torch.Tensor) -> _TensorState:
        grad = t.grad if t.is_leaf else None
        return cls(id(t), _clone(t), bool(t.requires_grad), _clone(grad), _tensor_hooks(t), version_of(t), grad,
                   None if grad is None else version_of(grad))


@dataclass
class _ModuleState:
    training: dict[str, bool]
    params: dict[str, _TensorState]
    buffers: dict[str, _TensorState | None]
    hooks: dict[str, tuple[int, ...]]
    attrs: dict[str, frozenset[str]]
    hook_keys: dict[str, tuple[frozenset, ...]]
    children: dict[str, int]
    objects: dict[str, nn.Module]
    #: each module's buffer slots (the tensor objects, or None) and its non-persistent names: a forward that
    #: registers a buffer (a cached causal mask) or assigns a new tensor to one (a ghost batch norm) is undone
    slots: dict[str, tuple[dict[str, Any], frozenset[str]]] = field(default_factory=dict)
    #: each module's plain attributes by identity (a forward that stores its last loss, rebinds a cached list)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: each module's parameter slots by identity: a forward rebinding its own parameter (``self.w = Parameter(...)``) is undone
    pslots: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the items of each plain list or dict attribute: a forward that writes into its own list (a recurrent state
    #: carried between calls, ``self.hidden_states[l] = ...``) is undone item by item
    contents: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: nn.Module) -> _ModuleState:
        mods = dict(model.named_modules(remove_duplicate=False))
        return cls(
            training={n: m.training for n, m in mods.items()},
            params={n: _TensorState.of(p) for n, p in model.named_parameters(remove_duplicate=False)},
            buffers={n: (None if b is None else _TensorState.of(b)) for n, b in model.named_buffers(remove_duplicate=False)},
            hooks={n: tuple(len(getattr(m, h, {}) or {}) for h in _MODULE_HOOK_DICTS) for n, m in mods.items()},
            attrs={n: frozenset(vars(m)) for n, m in mods.items()},
            hook_keys={n: tuple(frozenset(getattr(m, h, {}) or {}) for h in _MODULE_HOOK_DICTS) for n, m in mods.items()},
            children={n: id(m) for n, m in mods.items()}, objects=mods,
            slots={n: (dict(m._buffers), frozenset(getattr(m, "_non_persistent_buffers_set", ())))
                   for n, m in mods.items()},
            pslots={n: dict(m._parameters) for n, m in mods.items()},
            values={n: {k: v for k, v in vars(m).items() if k not in _REGISTRY_DICTS} for n, m in mods.items()},
            contents={n: {k: (list(v) if type(v) is list else dict(v)) for k, v in vars(m).items()
                          if type(v) in (list, dict) and k not in _REGISTRY_DICTS} for n, m in mods.items()},
        )


@dataclass
class _OptimizerState:
    params: dict[int, _TensorState]
    groups: list[dict[str, Any]]
    members: list[list[int]]
    state: dict[int, dict[str, Any]]
    hooks: tuple[int, int]
    attrs: frozenset[str]
    originals: dict[int, tuple[dict[str, Any], dict[str, tuple[torch.Tensor, int | None]]]] = field(default_factory=dict)

    @classmethod
    def of(cls, opt: torch.optim.Optimizer) -> _OptimizerState:
        groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in opt.param_groups]
        members = [[id(p) for p in g["params"]] for g in opt.param_groups]
        state = {id(p): {k: (_clone(v) if torch.is_tensor(v) else copy.deepcopy(v)) for k, v in s.items()}
                 for p, s in getattr(opt, "state", {}).items()}
        hooks = (len(getattr(opt, "_optimizer_step_pre_hooks", {}) or {}),
                 len(getattr(opt, "_optimizer_step_post_hooks", {}) or {}))
        params = {id(p): _TensorState.of(p) for g in opt.param_groups for p in g["params"]}
        # the per-parameter dicts and their tensors themselves, so restoring keeps every identity
        originals = {id(p): (s, {k: (v, version_of(v)) for k, v in s.items() if torch.is_tensor(v)})
                     for p, s in getattr(opt, "state", {}).items()}
        return cls(params, groups, members, state, hooks, frozenset(vars(opt)), originals)


def _globals_state() -> dict[str, Any]:
    from torch.nn.modules import module as _m

    return {"rng": rng_state(), "grad_enabled": torch.is_grad_enabled(),
            "global_hooks": tuple(len(getattr(_m, h, {}) or {}) for h in _GLOBAL_HOOKS)}


@dataclass
class Snapshot:
    """Everything an instrument must give back. ``diff`` lists what changed, in the user's names."""

    modules: dict[str, _ModuleState] = field(default_factory=dict)
    optimizers: dict[str, _OptimizerState] = field(default_factory=dict)
    tensors: dict[str, _TensorState] = field(default_factory=dict)
    stateful: dict[str, StatefulState] = field(default_factory=dict)
    globals: dict[str, Any] = field(default_factory=dict)
    _models: dict[str, nn.Module] = field(default_factory=dict, repr=False)
    _opts: dict[str, torch.optim.Optimizer] = field(default_factory=dict, repr=False)
    _tensors: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    _holders: list[tuple[Any, str, Any, Any]] = field(default_factory=list, repr=False)

    @classmethod
    def take(cls, *objects: Any) -> Snapshot:
        """Snapshot ``objects``; a module brings along the tensors and modules it holds outside
        PyTorch's registry (plain attributes, lists, dicts), which are the user's objects too. LR schedulers
        and GradScalers among ``objects`` or reachable from them (a ``train_step``'s closure, the globals it
        names, a model's plain attributes) are snapshotted too, since running a user's step moves them; the plain
        lists and dicts of every submodule (a forward's cache of its outputs) get their contents back."""
        snap = cls(globals=_globals_state())
        flat = list(_flatten(objects))
        for i, obj in enumerate(reachable(flat)):
            try:
                snap.stateful[f"{type(obj).__name__}[{i}]"] = StatefulState.of(obj)
            except Exception:  # noqa: BLE001, S112 - a custom scheduler whose state cannot be saved is not restored
                continue
        for i, obj in enumerate(_with_hidden(o for o in flat if not is_stateful(o))):
            if isinstance(obj, nn.Module):
                snap._models[f"model[{i}]"] = obj
                snap.modules[f"model[{i}]"] = _ModuleState.of(obj)
            elif isinstance(obj, torch.optim.Optimizer):
                snap._opts[f"optimizer[{i}]"] = obj
                snap.optimizers[f"optimizer[{i}]"] = _OptimizerState.of(obj)
            elif isinstance(obj, torch.Tensor):
                snap._tensors[f"tensor[{i}]"] = obj
                snap.tensors[f"tensor[{i}]"] = _TensorState.of(obj)
        snap._holders = _holders(snap._models.values())
        return snap

    def diff(self, after: Snapshot) -> list[str]:
        """Human-readable differences between this snapshot (before) and ``after``."""
        out: list[str] = []
        for kind, mine, theirs, diff in (("module", self.modules, after.modules, _diff_module),
                                         ("optimizer", self.optimizers, after.optimizers, _diff_optimizer),
                                         ("tensor", self.tensors, after.tensors, _diff_tensor)):
            for key, before in mine.items():
                out += diff(key, before, theirs[key]) if key in theirs else [f"{key}: the {kind} is no longer reached"]
            out += [f"{key}: a {kind} reached now that was not before" for key in set(theirs) - set(mine)]
        for key, before in self.stateful.items():
            out += [f"{key} {msg}" for msg in before.diff(after.stateful[key])] if key in after.stateful else []
        out += _diff_globals(self.globals, after.globals)
        return out

    def restore(self) -> None:
        """Put every captured value back in place (object identities are kept: values are copied in)."""
        with torch.no_grad():
            for key, state in self.modules.items():
                _restore_module(self._models[key], state)
            for key, state in self.optimizers.items():
                _restore_optimizer(self._opts[key], state)
            for key, state in self.tensors.items():
                if self._tensors[key].is_leaf:
                    _restore_tensor(self._tensors[key], state)
            for state in self.stateful.values():
                state.restore()
            _put_holders_back(self._holders)
        restore_rng(self.globals["rng"])
        torch.set_grad_enabled(self.globals["grad_enabled"])


def _holders(models: Iterable[nn.Module]) -> list[tuple[Any, str, Any, Any]]:
    """``(module, attribute, value, shallow copy)`` for each plain attribute of every submodule that holds a tensor, or
    a list or dict of them: a forward that caches its outputs there (``self.outputs['q1'] = q1``) replaces them."""
    out, seen = [], set()
    for model in models:
        for m in model.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            for key, value in vars(m).items():
                if key.startswith("_") or not (torch.is_tensor(value) or isinstance(value, (list, dict))):
                    continue
                items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
                if not items or any(torch.is_tensor(v) for v in items):  # an empty cache fills up in forward
                    out.append((m, key, value, copy.copy(value) if isinstance(value, (list, dict)) else None))
    return out


def _put_holders_back(holders: list[tuple[Any, str, Any, Any]]) -> None:
    for module, key, value, contents in holders:
        if vars(module).get(key) is not value:
            vars(module)[key] = value
        if isinstance(value, dict) and (value.keys() != contents.keys() or any(value[k] is not contents[k] for k in value)):
            value.clear()
            value.update(contents)
        elif isinstance(value, list) and (len(value) != len(contents) or any(a is not b for a, b in zip(value, contents))):
            value[:] = contents


def _with_hidden(objects: Iterable[Any]) -> list[Any]:
    out: dict[int, Any] = {}
    for obj in objects:
        out.setdefault(id(obj), obj)
        if isinstance(obj, nn.Module):
            for extra in hidden_objects(obj):
                out.setdefault(id(extra), extra)
    return list(out.values())


def _flatten(objects: Iterable[Any]) -> Iterator[Any]:
    for obj in objects:
        if isinstance(obj, (list, tuple)):
            yield from _flatten(obj)
        elif obj is not None:
            yield obj
            if isinstance(obj, torch.optim.Optimizer) and (inner := innermost(obj)) is not obj:
                yield inner  # a wrapper (torchlars' LARS, Accelerate's) keeps the state in the optimizer it wraps


def _restore_tensor(t: torch.Tensor, s: _TensorState) -> None:
    """Values into ``t`` itself where they differ; ``.grad`` back to its original object (or None)."""
    put_back(t, s.value, s.version)
    if not t.is_leaf:
        return
    if t.requires_grad != s.requires_grad:
        t.requires_grad_(s.requires_grad)
    if s.grad_ref is None or s.grad is None:
        if t.grad is not None:
            t.grad = None
        return
    put_back(s.grad_ref, s.grad, s.grad_version)  # before re-attaching: its layout must match t's again
    if t.grad is not s.grad_ref:
        t.grad = s.grad_ref


_MISSING = object()
#: a module's own registries (restored entry by entry elsewhere), not plain attributes
_REGISTRY_DICTS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                             "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                             "_state_dict_hooks", "_load_state_dict_pre_hooks", "_forward_hooks_with_kwargs",
                             "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called"})


def _put_items_back(held: list | dict, items: list | dict) -> None:
    """The items a list or dict held (by identity), put back in place where they differ."""
    if type(held) is dict:
        if held.keys() != items.keys() or any(held[k] is not v for k, v in items.items()):
            held.clear()
            held.update(items)
    elif len(held) != len(items) or any(a is not b for a, b in zip(held, items)):
        held[:] = items


def _restore_module(model: nn.Module, s: _ModuleState) -> None:
    mods = dict(model.named_modules(remove_duplicate=False))
    for name, mode in s.training.items():
        if name in mods:
            mods[name].training = mode
            for key in set(vars(mods[name])) - s.attrs[name]:  # monkey-patched methods, stray attributes
                delattr(mods[name], key)
            for hook_dict, keys in zip(_MODULE_HOOK_DICTS, s.hook_keys[name]):
                d = getattr(mods[name], hook_dict, None)
                for k in set(d or ()) - keys:
                    del d[k]
    for name, saved in s.values.items():
        m = mods.get(name)
        if m is not None and m is s.objects.get(name):
            for key, value in saved.items():
                if vars(m).get(key, _MISSING) is not value and key != "training":
                    vars(m)[key] = value
    for name, saved_items in s.contents.items():
        m = mods.get(name)
        for key, items in saved_items.items() if m is not None and m is s.objects.get(name) else ():
            if vars(m).get(key) is s.values[name].get(key):
                _put_items_back(vars(m)[key], items)
    for name, (slots, nonpersistent) in s.slots.items():
        m = mods.get(name)
        if m is None or m is not s.objects.get(name):
            continue
        for key in set(m._buffers) - set(slots):
            del m._buffers[key]
        for key, t in slots.items():
            if m._buffers.get(key, _MISSING) is not t:
                m._buffers[key] = t
        if getattr(m, "_non_persistent_buffers_set", None) is not None and m._non_persistent_buffers_set != nonpersistent:
            m._non_persistent_buffers_set.clear()
            m._non_persistent_buffers_set.update(nonpersistent)
    for name, saved in s.pslots.items():
        m = mods.get(name)
        if m is not None and m is s.objects.get(name) and m._parameters.keys() == saved.keys():
            m._parameters.update((k, v) for k, v in saved.items() if m._parameters[k] is not v)
    for name, p in model.named_parameters(remove_duplicate=False):
        if name in s.params and id(p) == s.params[name].ident:
            _restore_tensor(p, s.params[name])
    for name, b in model.named_buffers(remove_duplicate=False):
        st = s.buffers.get(name)
        if st is not None and b is not None and id(b) == st.ident:
            _restore_tensor(b, st)


def _restore_optimizer(opt: torch.optim.Optimizer, s: _OptimizerState) -> None:
    by_id = {id(p): p for g in opt.param_groups for p in g["params"]}
    for pid, st in s.params.items():
        if pid in by_id:
            _restore_tensor(by_id[pid], st)
    for g, saved in zip(opt.param_groups, s.groups):
        g.update(copy.deepcopy(saved))
    for key in set(vars(opt)) - s.attrs:
        delattr(opt, key)
    getattr(opt, "state", {}).clear()
    for pid, st in s.state.items():
        if pid in by_id:  # the original per-parameter dict and tensors, values copied in where they differ
            entry, tensors = s.originals[pid]
            entry.clear()
            for k, v in st.items():
                entry[k] = tensors[k][0] if k in tensors else copy.deepcopy(v)
                if k in tensors:
                    put_back(tensors[k][0], v, tensors[k][1])
            opt.state[by_id[pid]] = entry


def grad_leaves(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The leaf tensors requiring grad held directly in ``value`` (nested tuples, lists, dicts; not the parameters of
    a module, which the module's own snapshot covers)."""
    if torch.is_tensor(value):
        return [value] if value.is_leaf and value.requires_grad and not isinstance(value, nn.Parameter) else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    return list({id(t): t for v in (items if depth <= 4 else ()) for t in grad_leaves(v, depth + 1)}.values())


@contextmanager
def kept_leaves(value: Any) -> Iterator[None]:
    """The :func:`grad_leaves` of ``value`` (values, ``.grad``, hooks) put back on exit, also when the body raises."""
    saved = [(t, _TensorState.of(t)) for t in grad_leaves(value)]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, state in saved:
                _restore_tensor(t, state)


@contextmanager
def guarded(*objects: Any) -> Iterator[Snapshot]:
    """Snapshot ``objects`` (modules, optimizers, lists of them) and the global RNGs and grad mode;
    restore all of it on exit, also when the body raises."""
    snap = Snapshot.take(*objects)
    try:
        with kept_derived(*objects):  # reparametrization hooks replace module.weight on every forward
            yield snap
    finally:
        snap.restore()

