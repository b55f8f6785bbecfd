"""OPTIMIZER_OWNERSHIP: what the optimizer's param groups own against the model's parameters, read from the user's
objects. Evidence before FAIL: a stale tensor (owned, not in the model) FAILs once it is paired with a current
trainable parameter of its shape that no optimizer owns (a module replaced after the optimizer was built); unpaired, it
may be trained on purpose outside the model (a learnable temperature, a loss module's parameters) and is a WARN. A
trainable parameter no optimizer owns FAILs once the GRADIENT link's backward on the ledger's copy gave it a gradient
(the program computes it and never applies it) and, with ``train_step``, one call of it on the user's objects (every
value restored) does not move it another way; otherwise a WARN naming what is not confirmed."""

from __future__ import annotations

from typing import Any

import torch

from .._core.checks import Check
from .._core.closure import closure_state, step_optimizers
from .._core.rebound import rebound_in_forward
from .._core.state import guarded
from .._core.task import Ctx, err
from ._common import failed, passed, warned
from ._links import LIST_CAP, _names, by_module


def _modules_of(names: list[str]) -> list[str]:
    return list(dict.fromkeys(n.rpartition(".")[0] or "(model)" for n in names))


def _moved_by_step(ctx: Ctx, names: list[str]) -> tuple[list[str], str]:
    """Which of ``names`` one call of ``train_step`` on the user's objects (inside ``guarded``) changes; '' or why
    it could not run."""
    params = dict(ctx.model.named_parameters())
    before = {n: params[n].detach().clone() for n in names}
    try:
        with guarded(ctx.model, ctx.optimizer, ctx.train_step, closure_state(ctx.train_step)), torch.enable_grad():
            ctx.train_step()
            return [n for n in names if not torch.equal(before[n], params[n].detach())], ""
    except Exception as exc:  # noqa: BLE001 - user code; restored by the guard
        return [], f"train_step raised {err(exc)}"


def _confirm_missing(ctx: Ctx, missing: list[str]) -> tuple[list[str], list[str], str]:
    """The premise that unowned trainable parameters are meant to train: the GRADIENT link's backward on the copy
    gave them a gradient, and train_step (when given) does not move them itself. Returns the confirmed names, the
    names train_step moves, and why the others are not confirmed ('' if all are)."""
    grads = {n: p.grad for n, p in ctx.work.named_parameters()}
    if not any(g is not None for g in grads.values()):
        return [], [], "the ledger's backward on its copy did not run, so whether the loss reaches them is not known"
    graded = [n for n in missing if grads.get(n) is not None]
    why = "" if len(graded) == len(missing) else ("the loss's backward on the ledger's copy gave them no gradient (the "
                                                  "loss does not reach them)")
    if not graded or ctx.train_step is None:
        return graded, [], why
    moved, error = _moved_by_step(ctx, graded)
    if error:
        return [], [], f"whether train_step moves them in another way is not known ({error})"
    ctx.notes["ownership_ran_train_step"] = 1
    return [n for n in graded if n not in moved], moved, why


def check_ownership(ctx: Ctx) -> Check:
    model, opt = ctx.model, ctx.optimizer
    if opt is None:
        note = ("note: no torch.optim optimizer: parameters are updated by train_step; which ones it moves is checked at "
                "PARAMETER_UPDATE")
        ctx.report_notes.append(note)
        return passed("OPTIMIZER_OWNERSHIP", note, {"optimizer": None, "train_step": True})
    params = list(model.named_parameters())
    model_ids = {id(p) for _, p in params}
    owned = [(gi, p) for gi, g in enumerate(opt.param_groups) for p in g["params"]]
    # the other optimizers the user's step steps (a SparseAdam beside the dense one) own their parameters too
    others = [p for o in step_optimizers(ctx.train_step, opt, model)[1:] for g in o.param_groups for p in g["params"]]
    owned_ids = {id(p) for _, p in owned} | {id(p) for p in others}
    missing = [n for n, p in params if p.requires_grad and id(p) not in owned_ids]
    # a loss module's own parameters (proxies, class centres, a learnable temperature) train beside the model's
    loss_ids = {id(p) for p in ctx.loss_fn.parameters()} if isinstance(ctx.loss_fn, torch.nn.Module) else set()
    stale = [(k, gi, p) for k, (gi, p) in enumerate(owned) if id(p) not in model_ids | loss_ids]
    ev: dict[str, Any] = {"owned": len(owned), "owned_by_other_optimizers": len(others),
                          "param_groups": len(opt.param_groups), "missing": _names(missing),
                          "missing_count": len(missing), "stale_count": len(stale),
                          "frozen_owned": sum(1 for _, p in owned if id(p) in model_ids and not p.requires_grad)}
    shapes = {tuple(p.shape) for n, p in params if n in missing}
    paired = [s for s in stale if tuple(s[2].shape) in shapes]
    if paired and (written := rebound_in_forward(model, ctx.batch) & set(missing)):  # an EMA codebook the forward rebinds
        ev["rebound_by_forward"] = _names(sorted(written))
        missing = [n for n in missing if n not in written]
        shapes = {tuple(p.shape) for n, p in params if n in missing}
        paired = [s for s in stale if tuple(s[2].shape) in shapes]
    if stale:
        slots = _match_stale(stale, params, missing)
        ev.update(stale_shapes=[list(p.shape) for _, _, p in stale][:LIST_CAP], stale_slots=slots[:LIST_CAP],
                  stale_paired=len(paired))
    if paired:
        first = ev["stale_slots"][0]
        return failed("OPTIMIZER_OWNERSHIP", "optimizer.stale_parameter",
                      f"the optimizer owns {len(stale)} tensors that are not in the model (shapes "
                      f"{ev['stale_shapes'][:3]}); the slot of {first} holds an old tensor, and {len(missing)} current "
                      f"trainable parameters are not owned ({len(paired)} stale tensors have the shape of one of them)",
                      ev, expected="the optimizer owns exactly the model's current parameter objects",
                      observed=f"{len(stale)} stale tensors, first in the slot of {first}",
                      hint="a module was replaced (or the model reloaded/moved) after the optimizer was built: build the "
                           "optimizer after the last change to the model")
    live = [p for _, p in owned if id(p) in model_ids]
    if missing and live and all(not p.requires_grad for p in live):
        return _owns_only_frozen(params, live, missing, ev)
    return _missing(ctx, missing, ev) or _unpaired(stale, ev) or passed(
        "OPTIMIZER_OWNERSHIP", f"the optimizer owns every trainable parameter object ({len(owned)} tensors in "
        f"{len(opt.param_groups)} group(s)), none stale", ev)


def _missing(ctx: Ctx, missing: list[str], ev: dict[str, Any]) -> Check | None:
    if not missing:
        return None
    confirmed, moved, why = _confirm_missing(ctx, missing)
    if moved:
        ctx.report_notes.append(f"note: no optimizer owns {len(moved)} trainable parameters (first: {moved[0]}), but "
                                "train_step moves them itself (a hand-written update)")
        ev["moved_by_train_step"] = _names(moved)
    names = confirmed or [n for n in missing if n not in moved]
    if not names:
        return None
    ev["missing_by_module"] = by_module(names)
    if confirmed:
        moves = "; train_step does not move them in another way" if ctx.train_step is not None else ""
        return failed("OPTIMIZER_OWNERSHIP", "optimizer.missing_parameter",
                      f"{len(names)} trainable parameters are not in any param group: {by_module(names)}; the loss "
                      f"gives them a gradient that no step applies{moves}",
                      ev, expected="every trainable parameter in an optimizer param group",
                      observed=f"not owned: {by_module(names)}",
                      hint="pass model.parameters() (or every intended group) to the optimizer, or freeze what should "
                           "not train (requires_grad_(False))")
    ev["unconfirmed"] = why
    return warned("OPTIMIZER_OWNERSHIP", f"{len(names)} trainable parameters are not in any param group: "
                  f"{by_module(names)}; not confirmed that they are meant to train: {why}; if they are frozen on "
                  "purpose, set requires_grad_(False)", ev, kind="optimizer.missing_parameter")


def _unpaired(stale: list[tuple[int, int, torch.Tensor]], ev: dict[str, Any]) -> Check | None:
    if not stale:
        return None
    return warned("OPTIMIZER_OWNERSHIP", f"the optimizer owns {len(stale)} tensors that are not in the model (shapes "
                  f"{ev['stale_shapes'][:3]}), and no trainable parameter of the model it leaves out has their shape: "
                  "not confirmed that a replaced module left them (a tensor trained on purpose outside the model, such as "
                  "a learnable temperature or a loss module's parameters, looks the same)", ev,
                  kind="optimizer.stale_parameter")


def _owns_only_frozen(params: list[tuple[str, torch.Tensor]], live: list[torch.Tensor], missing: list[str],
                      ev: dict[str, Any]) -> Check:
    ids = {id(p) for p in live}
    owned_names = [n for n, p in params if id(p) in ids]
    mods = _modules_of(owned_names)
    ev.update(owned_modules=mods, owned_names=_names(owned_names), missing_by_module=by_module(missing))
    return failed("OPTIMIZER_OWNERSHIP", "optimizer.owns_only_frozen",
                  f"everything the optimizer owns is frozen: {', '.join(mods)} ({len(owned_names)} tensors, all "
                  f"requires_grad=False), so no step changes anything; the {len(missing)} trainable parameters are not "
                  f"owned: {by_module(missing)}", ev,
                  expected="the optimizer owns the trainable parameters",
                  observed=f"owns only frozen {', '.join(mods)}; trainable but not owned: {by_module(missing)}",
                  hint=f"build the optimizer over the parameters that train (e.g. [p for p in model.parameters() if "
                       f"p.requires_grad]), or unfreeze {', '.join(mods)} if it is the part meant to train")


def _match_stale(stale: list[tuple[int, int, torch.Tensor]], params: list[tuple[str, torch.Tensor]],
                 missing: list[str]) -> list[str]:
    """Name the model parameter whose slot each stale tensor fills: same shape, preferring parameters the
    optimizer does not own, then the one at the same position in ``named_parameters()`` order."""
    index = {n: i for i, (n, _) in enumerate(params)}
    shapes = {n: tuple(p.shape) for n, p in params}
    used: set[str] = set()
    out = []
    for k, gi, p in stale:
        pool = [n for n in missing if shapes[n] == tuple(p.shape) and n not in used]
        pool = pool or [n for n in index if shapes[n] == tuple(p.shape) and n not in used]
        if pool:
            name = min(pool, key=lambda n: abs(index[n] - k))
            used.add(name)
            out.append(name)
        else:
            out.append(f"param_groups[{gi}] entry {k} (shape {list(p.shape)}, no model parameter of that shape)")
    return out


