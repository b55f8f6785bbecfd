"""Parameters frozen on purpose, as the user declares them: ``frozen=`` fnmatch patterns of parameter names (or
module paths, which name their tensors), shared by the instruments that take a ``frozen`` declaration."""

from __future__ import annotations

import difflib
from fnmatch import fnmatchcase
from typing import Any

from torch import nn

from ...errors import InvalidArgument

__all__ = ["check_frozen", "declared", "matches"]


def check_frozen(frozen: Any) -> tuple[str, ...]:
    """The patterns as a tuple (a single string is one pattern); InvalidArgument for anything else."""
    if isinstance(frozen, str):
        return (frozen,)
    if not isinstance(frozen, (tuple, list)) or not all(isinstance(p, str) for p in frozen):
        raise InvalidArgument("Expected `frozen` to be a tuple of fnmatch patterns of parameter names "
                              f"(e.g. frozen=('backbone.stage1.*',)) but got {type(frozen).__name__}")
    return tuple(frozen)


def matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or fnmatchcase(name, pattern + ".*")  # a module path names its tensors


def declared(model: nn.Module, patterns: tuple[str, ...]) -> dict[int, str]:
    """``{id: name}`` of the parameters a pattern matches; InvalidArgument for a pattern matching none."""
    named = list(model.named_parameters(remove_duplicate=False))
    names = [n for n, _ in named]
    for pattern in patterns:
        if not any(matches(n, pattern) for n in names):
            modules = [m for m, _ in model.named_modules() if m]
            close = difflib.get_close_matches(pattern, [*names, *modules, *(f"{m}.*" for m in modules)], n=3, cutoff=0.4)
            raise InvalidArgument(f"`frozen` pattern {pattern!r} matches no parameter of {type(model).__name__}"
                                  + (f"; close names: {', '.join(close)}" if close else "")
                                  + "; use fnmatch patterns of names from model.named_parameters() (e.g. 'backbone.stage1.*')")
    out: dict[int, str] = {}
    for n, p in named:
        if any(matches(n, pat) for pat in patterns):
            out.setdefault(id(p), n)
    return out
