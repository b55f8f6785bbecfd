"""Look inside a variant for compare_outputs: which module tree names its layers, which modules run in
training mode, and each named module's output on the fixed inputs, in execution order.

How each kind of variant is opened:

- an ``nn.Module`` (eager, in-process reloaded, int8 -- quantized layers keep their paths): forward hooks
  on every named submodule;
- a ``torch.compile``'d module (``OptimizedModule``): the hooks go on ``_orig_mod``'s submodules and the
  call goes through the variant's own compiler context applied to a fresh wrapper function (dynamo does
  not re-trace a cached frame when hooks are added, so hooks on an already compiled module never fire;
  a fresh code object is traced with the hooks inside). Recording makes every module output a graph
  output, which can change what the backend fuses: said in the evidence;
- an exported program's module (``torch.export.export(...).module()``): its graph is interpreted node by
  node and each module path's output is the value of the last node its ``nn_module_stack`` names;
- any object with ``firstdiv_layer_outputs(args, kwargs)`` (the fresh-process reload): asked directly;
- any other callable: not comparable (the divergence is reported at the variant).

Outputs are ``[(path, output), ...]`` in the order modules finished; a module called twice appears twice.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .outputs import clone_tree

_MAX_LISTED = 10


class NotComparable(Exception):
    """The variant's layers cannot be recorded; the message says why."""


def orig_module(variant: Any) -> nn.Module | None:
    """The module whose ``named_modules()`` names the variant's layers (``_orig_mod`` for compiled ones)."""
    inner = getattr(variant, "_orig_mod", None)
    if isinstance(inner, nn.Module) and hasattr(variant, "dynamo_ctx"):
        return inner
    return variant if isinstance(variant, nn.Module) else None


def is_compiled(variant: Any) -> bool:
    return isinstance(getattr(variant, "_orig_mod", None), nn.Module) and hasattr(variant, "dynamo_ctx")


def is_exported(variant: Any) -> bool:
    """A GraphModule whose nodes carry ``nn_module_stack`` (what ``ExportedProgram.module()`` returns)."""
    graph = getattr(variant, "graph", None)
    return isinstance(variant, torch.fx.GraphModule) and graph is not None and any(
        "nn_module_stack" in n.meta for n in graph.nodes)


# --- training mode -------------------------------------------------------------------------------------------------

def _active(m: nn.Module) -> str | None:
    if not m.training:
        return None
    if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
        return f"{type(m).__name__}(p={m.p:g})"
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return type(m).__name__
    if isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
        return f"MultiheadAttention(dropout={m.dropout:g})"
    return None


def _graph_train_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Exported graphs bake the mode in: dropout with train=True, batch norm with training=True."""
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        live = ("dropout" in name and len(node.args) > 2 and node.args[2] is True and node.args[1] not in (0, 0.0)) or (
            "batch_norm" in name and "no_training" not in name and len(node.args) > 5 and node.args[5] is True)
        if live:
            stack = list(node.meta.get("nn_module_stack", {}).values())
            path = stack[-1][0] if stack else "(graph)"
            found.append(f"{path} ({name})")
    return found


def train_mode_modules(variant: Any) -> list[str]:
    """``["drop (Dropout(p=0.5))", ...]``: modules that behave differently in training mode and are in it."""
    declared = getattr(variant, "firstdiv_train_modules", None)
    if declared is not None:
        return list(declared)
    if is_exported(variant):
        return _graph_train_ops(variant)
    root = orig_module(variant)
    if root is None:
        return []
    return [f"{name or '(root)'} ({what})" for name, m in root.named_modules() if (what := _active(m))]


# --- layer outputs -------------------------------------------------------------------------------------------------

def _hooked(root: nn.Module, record: list[tuple[str, Any]]) -> list[Any]:
    handles = []
    for name, m in root.named_modules():
        if name:
            handles.append(m.register_forward_hook(lambda _m, _i, out, name=name: record.append((name, clone_tree(out)))))
    return handles


def _run_compiled(variant: Any, args: tuple, kwargs: dict) -> Any:
    def _layer_run(mod: Any, a: tuple, k: dict) -> Any:
        return mod(*a, **k)
    # a fresh code object per recording: dynamo caches by code object, and a cached frame ignores new hooks
    fresh = type(_layer_run)(_layer_run.__code__.replace(co_name="_firstdiv_layer_run"), _layer_run.__globals__)
    return variant.dynamo_ctx(fresh)(variant._orig_mod, args, kwargs)


def _module_layers(variant: Any, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    root = orig_module(variant)
    assert root is not None
    record: list[tuple[str, Any]] = []
    handles = _hooked(root, record)
    try:
        if is_compiled(variant):
            _run_compiled(variant, args, kwargs)
        else:
            variant(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return record


def _exported_layers(gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    from torch.utils._pytree import tree_flatten

    last: dict[str, torch.fx.Node] = {}
    paths: dict[str, str] = {}
    for node in gm.graph.nodes:
        for key, value in node.meta.get("nn_module_stack", {}).items():
            path = value[0] if isinstance(value, (tuple, list)) else str(value)
            if path:
                last[key], paths[key] = node, path
    wanted = {node: key for key, node in last.items()}
    flat, spec = tree_flatten((tuple(args), dict(kwargs)))
    in_spec = getattr(gm, "_in_spec", None)
    if in_spec is not None and spec != in_spec:
        raise NotComparable(f"the inputs' structure {spec} does not match the exported program's {in_spec}")
    values: dict[torch.fx.Node, Any] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            if n in wanted:
                values[n] = clone_tree(out)
            return out

    _Recorder(gm).run(*flat)
    order = sorted(last.items(), key=lambda kv: _index(gm, kv[1]))
    return [(paths[key], values[node]) for key, node in order if node in values]


def _index(gm: torch.fx.GraphModule, node: torch.fx.Node) -> int:
    for i, n in enumerate(gm.graph.nodes):
        if n is node:
            return i
    return -1


def layer_outputs(variant: Any, args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any]], str]:
    """``(records, how)`` for the variant, or raise NotComparable."""
    ask = getattr(variant, "firstdiv_layer_outputs", None)
    if callable(ask):
        return list(ask(args, kwargs)), "recorded by the variant itself (forward hooks in its own process)"
    if is_exported(variant):
        return _exported_layers(variant, args, kwargs), "exported graph interpreted node by node (nn_module_stack)"
    if is_compiled(variant):
        return (_module_layers(variant, args, kwargs),
                "forward hooks inside a recompilation with the variant's backend (recording can change fusion)")
    if isinstance(variant, nn.Module):
        return _module_layers(variant, args, kwargs), "forward hooks on named submodules"
    raise NotComparable(f"a {type(variant).__name__} has no named modules to compare; pass an nn.Module, a compiled "
                        f"module or an exported program's module to localize the layer")


def by_call(records: list[tuple[str, Any]]) -> dict[tuple[str, int], Any]:
    """``{(path, k): output of the k-th call}`` keeping the execution order."""
    seen: dict[str, int] = {}
    out: dict[tuple[str, int], Any] = {}
    for path, value in records:
        k = seen.get(path, 0)
        seen[path] = k + 1
        out[(path, k)] = value
    return out


def listed(items: list[str]) -> str:
    head = ", ".join(items[:_MAX_LISTED])
    return head + (f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")
