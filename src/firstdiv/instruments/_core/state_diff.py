"""The diff half of the leave-no-trace snapshot: what changed between two :class:`~._state.Snapshot`
parts, in the user's names (a parameter as in ``named_parameters()``, a module as in ``named_modules()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .state_values import neq as _neq
from .state_values import same as _same

if TYPE_CHECKING:
    from .state import _ModuleState, _OptimizerState, _TensorState


def _diff_tensor(where: str, a: _TensorState, b: _TensorState) -> list[str]:
    out = []
    if a.ident != b.ident:
        out.append(f"{where}: replaced by a different tensor object")
    elif a.version != b.version:  # a pending backward() through this tensor would now refuse to run
        out.append(f"{where}: version counter {a.version} -> {b.version} (written in place)")
    if not _same(a.value, b.value):
        out.append(f"{where}: value changed")
    if a.requires_grad != b.requires_grad:
        out.append(f"{where}: requires_grad {a.requires_grad} -> {b.requires_grad}")
    if (a.grad is None) != (b.grad is None):
        out.append(f"{where}: .grad {'None' if a.grad is None else 'tensor'} -> {'None' if b.grad is None else 'tensor'}")
    elif not _same(a.grad, b.grad):
        out.append(f"{where}: .grad values changed")
    elif a.grad_ref is not b.grad_ref:  # code holding p.grad (DDP buckets, accumulators) lost its link
        out.append(f"{where}: .grad replaced by a different tensor object")
    elif a.grad_version != b.grad_version:
        out.append(f"{where}: .grad version counter {a.grad_version} -> {b.grad_version}")
    if a.hooks != b.hooks:
        out.append(f"{where}: tensor hooks {a.hooks} -> {b.hooks}")
    return out


def _diff_module(key: str, a: _ModuleState, b: _ModuleState) -> list[str]:
    out = []
    for attr in ("params", "buffers", "children"):
        if set(getattr(a, attr)) != set(getattr(b, attr)):
            out.append(f"{key}: registered {attr} changed: {sorted(set(getattr(a, attr)) ^ set(getattr(b, attr)))}")
    for name, ta in a.params.items():
        if name in b.params:
            out += _diff_tensor(f"{key} parameter {name}", ta, b.params[name])
    for name, ta in a.buffers.items():
        tb = b.buffers.get(name)
        if (ta is None) != (tb is None):
            out.append(f"{key} buffer {name}: None-ness changed")
        elif ta is not None and tb is not None:
            out += _diff_tensor(f"{key} buffer {name}", ta, tb)
    for name, mode in a.training.items():
        if name in b.training and b.training[name] != mode:
            out.append(f"{key} module {name or '(root)'}: training {mode} -> {b.training[name]}")
    for name, hooks in a.hooks.items():
        if name in b.hooks and b.hooks[name] != hooks:
            out.append(f"{key} module {name or '(root)'}: hook counts {hooks} -> {b.hooks[name]}")
    for name, attrs in a.attrs.items():
        if name in b.attrs and b.attrs[name] != attrs:
            out.append(f"{key} module {name or '(root)'}: instance attributes changed {sorted(attrs ^ b.attrs[name])}")
    return out


def _diff_optimizer(key: str, a: _OptimizerState, b: _OptimizerState) -> list[str]:
    out = []
    for i, (pid, ta) in enumerate(a.params.items()):  # owned tensors, stale ones no longer in a model too
        if pid in b.params:
            out += [f"{key} owned tensor #{i}{msg}" for msg in _diff_tensor("", ta, b.params[pid])]
    if a.members != b.members:
        out.append(f"{key}: param group membership changed")
    if len(a.groups) != len(b.groups) or any(_neq(ga, gb) for ga, gb in zip(a.groups, b.groups)):
        out.append(f"{key}: param group settings changed")
    if set(a.state) != set(b.state):
        out.append(f"{key}: optimizer state gained/lost entries ({len(a.state)} -> {len(b.state)})")
    else:
        for pid, sa in a.state.items():
            if _neq(sa, b.state[pid]):
                out.append(f"{key}: optimizer state values changed")
                break
    if a.hooks != b.hooks:
        out.append(f"{key}: step hook counts {a.hooks} -> {b.hooks}")
    if a.attrs != b.attrs:
        out.append(f"{key}: instance attributes changed {sorted(a.attrs ^ b.attrs)}")
    return out


def _diff_globals(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    if not torch.equal(a["rng"]["torch"], b["rng"]["torch"]):
        out.append("torch CPU RNG state changed")
    na, nb = a["rng"]["numpy"], b["rng"]["numpy"]
    if na[0] != nb[0] or not np.array_equal(na[1], nb[1]) or tuple(na[2:]) != tuple(nb[2:]):
        out.append("numpy global RNG state changed")
    if a["rng"]["python"] != b["rng"]["python"]:
        out.append("Python random state changed")
    if a["grad_enabled"] != b["grad_enabled"]:
        out.append(f"grad mode {a['grad_enabled']} -> {b['grad_enabled']}")
    if a["global_hooks"] != b["global_hooks"]:
        out.append(f"global module hooks {a['global_hooks']} -> {b['global_hooks']}")
    if "cuda" in a["rng"] and "cuda" in b["rng"] and any(not torch.equal(x, y) for x, y in zip(a["rng"]["cuda"], b["rng"]["cuda"])):
        out.append("CUDA RNG state changed")
    return out
