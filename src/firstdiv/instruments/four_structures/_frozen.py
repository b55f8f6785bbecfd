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
from .._core.invariance import loss_depends
from .._core.modes import switches_modes
from .._core.state import guarded
from ._common import Audit, few, finding, listed, modules_of, note, severity
from ._confirm import graph_after_train


def _mode_flips(model: nn.Module, optimizer: Any, params: list[tuple[str, torch.Tensor]]) -> tuple[dict[str, list[str]], str]:
    """Which declared-frozen parameters have requires_grad=True again after ``model.train()`` and after ``model.eval()``
    (each starting from requires_grad=False), on the user's model inside ``guarded`` (flags and modes restored)."""
    flips: dict[str, list[str]] = {}
    if not switches_modes(model):
        return flips, "model.train() is not the train/eval switch here (it takes other arguments): not called"
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


def _trained(a: Audit, names: list[str], params: list[tuple[str, torch.Tensor]],
             reached: dict[int, torch.Tensor] | None) -> tuple[list[str], str]:
    """The premise's confirmation: of these declared-frozen parameters (requires_grad=True now or after train()),
    those a step trains because an optimizer owns them and the loss's graph reaches them; else why not confirmed."""
    by_name = dict(params)
    owned = [n for n in names if id(by_name[n]) in a.owned_ids]
    if a.optimizer is None:
        return [], "whether an optimizer trains them is not known (pass the optimizer)"
    if not owned:
        return [], "no optimizer owns them, so no optimizer step moves them (a hand-written update in train_step could)"
    if reached is None:
        return [], "whether the loss reaches them is not known (pass batch and loss_fn)"
    hit = [n for n in owned if id(by_name[n]) in reached]
    return hit, "" if hit else "the loss's graph does not reach them, so they get no gradient to apply"


def _verdict(where: str, kind: str, text: str, trained: list[str], why: str, ev: dict) -> Check:
    """FAIL when a step is confirmed to train them; otherwise a WARN with the same kind naming the assumption."""
    if trained:
        return finding(where, kind, Status.FAIL, f"{text}; the optimizer owns {len(trained)} of them and the loss "
                       "reaches them, so every step updates them", {**ev, "trained_by_step": few(trained)})
    return finding(where, kind, Status.WARN, f"{text}; not confirmed that a step trains them: {why}; the frozen= "
                   "declaration says they should not train: set requires_grad_(False) on them", {**ev, "unconfirmed": why})


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
    out: list[Check] = []
    if flipped:
        calls = " and ".join(f"model.{m}()" for m, n in flips.items() if n)
        mods = modules_of(flipped)
        after = graph_after_train(a.model, a.optimizer, a.batch, a.loss_fn) if a.loss_fn is not None else None
        out.append(_verdict(flipped[0], "frozen.unfrozen_by_train",
                            f"{flipped[0]}: declared frozen ({', '.join(patterns)}) but {calls} sets requires_grad=True "
                            f"again on {len(flipped)} of them ({len(mods)} modules: {listed(mods)}; train() overridden in "
                            f"{', '.join(ev['train_overrides']) or 'no module'}); requires_grad now: "
                            f"{'True' if flipped[0] in now else 'False'}", *_trained(a, flipped, params, after), ev))
    elif now:
        mods = modules_of(now)
        out.append(_verdict(now[0], "frozen.requires_grad",
                            f"{now[0]}: declared frozen ({', '.join(patterns)}) but {len(now)} of them have "
                            f"requires_grad=True ({len(mods)} modules: {listed(mods)})",
                            *_trained(a, now, params, a.reached), ev))
    if error:
        out.append(note(a, "FROZEN", "frozen.modes", f"could not check that train()/eval() keep them frozen: {error}"))
    undeclared = [(names[0], p) for p, names in a.reg.params.values() if not p.requires_grad and id(p) not in a.declared]
    if undeclared:
        out.append(_undeclared(a, undeclared, patterns))
    status = max((c.finding.status for c in out), key=severity, default=Status.PASS)
    summary = finding("FROZEN", "structure.frozen", status,
                      f"{len(params)} parameters declared frozen ({', '.join(patterns)}): {len(now)} with requires_grad=True, "
                      f"{len(flipped)} unfrozen by model.train()/eval(), {len(trained)} trained by the optimizer", ev)
    return [summary, *out]


def _undeclared(a: Audit, params: list[tuple[str, torch.Tensor]], patterns: tuple[str, ...]) -> Check:
    """Frozen parameters the ``frozen=`` declaration leaves out: FAIL when the program says twice that they should
    train (the optimizer owns them, and the loss depends on them: perturbing them on a copy moves it), else WARN."""
    names = [n for n, _ in params]
    text = (f"{len(names)} parameters have requires_grad=False but no `frozen` pattern names them (first: {names[0]}; "
            f"modules: {listed(modules_of(names))}): they will not train")
    ev: dict[str, Any] = {"count": len(names), "names": few(names), "patterns": list(patterns)}
    owned = [n for n, p in params if id(p) in a.owned_ids]
    if not owned or a.batch is None or a.loss_fn is None:
        return finding(names[0], "frozen.undeclared", Status.WARN, text, ev)
    depends = loss_depends(a.model, a.batch, a.loss_fn, owned)
    hit = [n for n in owned if depends.get(n) is True]
    ev.update(owned_by_optimizer=few(owned), loss_depends_on=few(hit))
    if not hit:
        return finding(names[0], "frozen.undeclared", Status.WARN, f"{text}; the loss was not shown to depend on the "
                       "ones the optimizer owns, so that they should train is not confirmed", ev)
    return finding(hit[0], "frozen.undeclared", Status.FAIL,
                   f"{text}; the optimizer owns {len(owned)} of them and the loss depends on {len(hit)} (perturbing them "
                   f"on a copy moves it; first: {hit[0]}), while frozen= ({', '.join(patterns)}) leaves them out: frozen "
                   "by accident", ev)


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
