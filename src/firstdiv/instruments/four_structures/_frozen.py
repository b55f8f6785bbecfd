"""Declared intent: parameters frozen on purpose (``frozen=`` fnmatch patterns of parameter names) must have
requires_grad=False, keep it across ``model.train()`` / ``model.eval()`` (a ``train`` override that re-enables
``requires_grad`` trains a frozen stage), and not be trained by the optimizer; every other parameter is
expected trainable."""

from __future__ import annotations

import difflib
from fnmatch import fnmatchcase
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Status
from .._core.checks import Check
from .._core.state import guarded
from ._common import Audit, few, finding, listed, modules_of, note, severity


def check_frozen(frozen: Any) -> tuple[str, ...]:
    if isinstance(frozen, str):
        return (frozen,)
    if not isinstance(frozen, (tuple, list)) or not all(isinstance(p, str) for p in frozen):
        raise InvalidArgument("Expected `frozen` to be a tuple of fnmatch patterns of parameter names "
                              f"(e.g. frozen=('backbone.stage1.*',)) but got {type(frozen).__name__}")
    return tuple(frozen)


def _matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or fnmatchcase(name, pattern + ".*")  # a module path names its tensors


def declared(model: nn.Module, patterns: tuple[str, ...]) -> dict[int, str]:
    """``{id: name}`` of the parameters a pattern matches; InvalidArgument for a pattern matching none."""
    named = list(model.named_parameters(remove_duplicate=False))
    names = [n for n, _ in named]
    for pattern in patterns:
        if not any(_matches(n, pattern) for n in names):
            modules = [m for m, _ in model.named_modules() if m]
            close = difflib.get_close_matches(pattern, [*names, *modules, *(f"{m}.*" for m in modules)], n=3, cutoff=0.4)
            raise InvalidArgument(f"`frozen` pattern {pattern!r} matches no parameter of {type(model).__name__}"
                                  + (f"; close names: {', '.join(close)}" if close else "")
                                  + "; use fnmatch patterns of names from model.named_parameters() (e.g. 'backbone.stage1.*')")
    out: dict[int, str] = {}
    for n, p in named:
        if any(_matches(n, pat) for pat in patterns):
            out.setdefault(id(p), n)
    return out


def _mode_flips(model: nn.Module, optimizer: Any, params: list[tuple[str, torch.Tensor]]) -> tuple[dict[str, list[str]], str]:
    """Which declared-frozen parameters have requires_grad=True again after ``model.train()`` and after ``model.eval()``
    (each starting from requires_grad=False), on the user's model inside ``guarded`` (flags and modes restored)."""
    flips: dict[str, list[str]] = {}
    try:
        with guarded(model, optimizer):
            for mode in ("train", "eval"):
                for _, p in params:
                    p.requires_grad_(False)
                getattr(model, mode)()
                flips[mode] = [n for n, p in params if p.requires_grad]
    except Exception as exc:  # noqa: BLE001 - the user's train()/eval() raised
        return flips, f"model.train()/eval() raised {type(exc).__name__}: {exc}"
    return flips, ""


def _overrides(model: nn.Module) -> list[str]:
    return list(dict.fromkeys(type(m).__name__ for m in model.modules() if type(m).train is not nn.Module.train))


def frozen_findings(a: Audit, patterns: tuple[str, ...]) -> list[Check]:
    if not patterns:
        return []
    params = [(n, a.reg.params[i][0]) for i, n in a.declared.items()]
    owned = a.owned_ids
    flips, error = _mode_flips(a.model, a.optimizer, params)
    flipped = list(dict.fromkeys(n for names in flips.values() for n in names))
    now = [n for n, p in params if p.requires_grad]
    trained = [n for n, p in params if id(p) in owned and (p.requires_grad or n in flipped)]
    ev = {"patterns": list(patterns), "declared": len(params), "requires_grad_now": few(now),
          "unfrozen_by": {m: few(n) for m, n in flips.items() if n}, "owned_by_optimizer": few(trained),
          "train_overrides": _overrides(a.model)}
    owns = (f"; the optimizer owns {len(trained)} of them, so every step updates them" if trained else
            "; the optimizer does not own them" if a.optimizer is not None else "")
    out: list[Check] = []
    if flipped:
        calls = " and ".join(f"model.{m}()" for m, n in flips.items() if n)
        mods = modules_of(flipped)
        out.append(finding(flipped[0], "frozen.unfrozen_by_train", Status.FAIL,
                           f"{flipped[0]}: declared frozen ({', '.join(patterns)}) but {calls} sets requires_grad=True "
                           f"again on {len(flipped)} of them ({len(mods)} modules: {listed(mods)}; train() overridden in "
                           f"{', '.join(ev['train_overrides']) or 'no module'}); requires_grad now: "
                           f"{'True' if flipped[0] in now else 'False'}{owns}", ev))
    elif now:
        mods = modules_of(now)
        out.append(finding(now[0], "frozen.requires_grad", Status.FAIL,
                           f"{now[0]}: declared frozen ({', '.join(patterns)}) but {len(now)} of them have "
                           f"requires_grad=True ({len(mods)} modules: {listed(mods)}){owns}", ev))
    if error:
        out.append(note(a, "FROZEN", "frozen.modes", f"could not check that train()/eval() keep them frozen: {error}"))
    undeclared = [names[0] for p, names in a.reg.params.values() if not p.requires_grad and id(p) not in a.declared]
    if undeclared:
        out.append(finding(undeclared[0], "frozen.undeclared", Status.WARN,
                           f"{len(undeclared)} parameters have requires_grad=False but no `frozen` pattern names them "
                           f"(first: {undeclared[0]}; modules: {listed(modules_of(undeclared))}): they will not train",
                           {"count": len(undeclared), "names": few(undeclared)}))
    status = max((c.finding.status for c in out), key=severity, default=Status.PASS)
    summary = finding("FROZEN", "structure.frozen", status,
                      f"{len(params)} parameters declared frozen ({', '.join(patterns)}): {len(now)} with requires_grad=True, "
                      f"{len(flipped)} unfrozen by model.train()/eval(), {len(trained)} trained by the optimizer", ev)
    return [summary, *out]
