"""Declared intent: parameters frozen on purpose (``frozen=`` fnmatch patterns of parameter names) must have
requires_grad=False, keep it across ``model.train()`` / ``model.eval()`` (a ``train`` override that re-enables
``requires_grad`` trains a frozen stage), and not be trained by the optimizer; every other parameter is
expected trainable."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check
from .._core.state import guarded
from ._common import Audit, few, finding, listed, modules_of, note, severity


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
        return _tied_frozen(a)
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


def _tied_frozen(a: Audit) -> list[Check]:
    """Undeclared: a frozen tensor with several names (a tied embedding and output layer) freezes all of them. It may
    be meant, so a WARN naming every layer it stops; a ``frozen`` declaration naming it says it is meant."""
    out = []
    for p, names in a.reg.params.values():
        if not p.requires_grad and len(names) > 1:
            out.append(finding(names[0], "frozen.tied", Status.WARN,
                               f"{names[0]} is frozen (requires_grad=False) and tied to {', '.join(names[1:])} (the same "
                               f"tensor): {', '.join(modules_of(names[1:]))} cannot train either; if that is meant, "
                               "declare it with frozen=(...)", {"names": names, "shape": list(p.shape)}))
    return out
