"""Random masks the program asks for in its own code. A dropout kept on in evaluation by ``training=True`` written at
the call (``F.dropout(x, p=0.5, training=True)``: Tacotron 2's prenet, Monte Carlo dropout) is the program's design,
not a forgotten ``training=self.training``: the call's default is ``training=True``, so only a literal ``True`` the
user wrote (a keyword or the third positional argument) says so. Each mask is traced to the innermost frame outside
torch and firstdiv, and that line's call is read from the file's syntax tree; a site that cannot be read (no source,
a call that is not a dropout, ``training`` from a variable) is not intended."""

from __future__ import annotations

import ast
import functools
import linecache
import os
import sys
from typing import Any

from .._core.batch import LIBRARY_DIRS

Site = tuple[str, int]  # (file, line) of the user's frame that drew a mask


def user_site() -> Site | None:
    """The innermost frame of the current stack outside torch and firstdiv: its file and line."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not os.path.abspath(path).startswith(LIBRARY_DIRS):
            return path, frame.f_lineno
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=64)
def _tree(path: str) -> ast.Module | None:
    text = "".join(linecache.getlines(path))
    try:
        return ast.parse(text) if text else None
    except SyntaxError:
        return None


def _true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _asks_for_mask(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if "dropout" not in name.lower():
        return False
    if any(k.arg == "training" for k in call.keywords):
        return any(k.arg == "training" and _true(k.value) for k in call.keywords)
    return len(call.args) >= 3 and _true(call.args[2])


def written_on(site: Site) -> bool:
    """The dropout call at ``site`` passes a literal ``training=True`` (module docstring)."""
    tree = _tree(site[0])
    if tree is None:
        return False
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= site[1] <= (n.end_lineno or n.lineno)]
    return any(_asks_for_mask(c) for c in calls)


def intended(sites: dict[Site, int]) -> list[str]:
    """``file:line`` of each site when every mask was drawn by a dropout written with ``training=True``; else []."""
    if not sites or not all(written_on(s) for s in sites):
        return []
    return [f"{os.path.basename(path)}:{line}" for path, line in sites]


def describe(where: list[str], masks: Any) -> str:
    return (f"eval_fn drew {masks} random masks from dropout kept on by training=True written in the program "
            f"({', '.join(where[:3])}): evaluation is stochastic by design (an always-on prenet, Monte Carlo dropout), "
            "so one call's metric is noisy; average repeated calls or fix the seed to compare runs")
