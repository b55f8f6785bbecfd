"""DEPENDENCY, GRADIENT, OPTIMIZER_OWNERSHIP, PARAMETER_UPDATE and CAPABILITY: the links after the
objective. Each is a small, self-contained check (the ledger does not import the other instruments).

DEPENDENCY, GRADIENT and PARAMETER_UPDATE work on the ledger's deep copy (one forward, one controlled
backward from ``.grad = None``, one optimizer step); OPTIMIZER_OWNERSHIP only reads the user's objects;
CAPABILITY trains a second deep copy on a tiny fixed batch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._core.batch import compute_loss
from .._core.checks import Check, nested_grads
from .._core.elsewhere import other_objective, other_objective_note, split_other
from .._core.examples import dense
from .._core.invariance import loss_depends, sort_gradless, unused_message
from .._core.later_steps import moved_later
from .._core.lr import lr_of
from .._core.task import Ctx, err, seed_copies
from ._attention_mask import padding_read
from ._common import failed, g4, passed, skipped_link, warned
from ._crosstalk import examples_mixed
from ._dependency import future_visible, input_without_gradient, reached_leaves, shifted_target_read, target_as_input
from ._future_fed import fed_future_visible
from ._sequence import future_or_copy

LIST_CAP = 20  # names listed in evidence before eliding


def _other(ctx: Ctx) -> set[str]:
    """``other_objective`` once per ledger run: DEPENDENCY and GRADIENT both ask, and it may run the user's step."""
    if "other_objective" not in ctx.notes:
        ctx.notes["other_objective"] = other_objective(ctx.train_step, ctx.optimizer, ctx.model)
    return ctx.notes["other_objective"]


def _names(names: list[str]) -> list[str]:
    return names if len(names) <= LIST_CAP else [*names[:LIST_CAP], f"... {len(names) - LIST_CAP} more"]


def trainable(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def next_token_future(ctx: Ctx, ev: dict[str, Any]) -> Check | None:
    """A next-token objective read from the loss itself (or the data), whose earlier positions see later tokens."""
    return future_or_copy(ctx, ev, "next")


def check_dependency(ctx: Ctx) -> Check:
    train = trainable(ctx.work)
    frozen = [n for n, p in ctx.work.named_parameters() if not p.requires_grad]
    grad_fn = getattr(ctx.loss, "grad_fn", None)
    ev: dict[str, Any] = {"trainable": len(train), "frozen": len(frozen), "frozen_names": _names(frozen),
                          "loss_grad_fn": type(grad_fn).__name__ if grad_fn is not None else None,
                          "loss_requires_grad": bool(getattr(ctx.loss, "requires_grad", False))}
    if not train:
        return failed("DEPENDENCY", "dependency.no_trainable_parameters",
                      f"the model has no trainable parameter ({len(frozen)} frozen): nothing can learn", ev,
                      expected="at least one parameter with requires_grad=True", observed=f"0 trainable, {len(frozen)} frozen",
                      hint="unfreeze the parameters meant to train (p.requires_grad_(True)) before building the optimizer")
    leaves, nodes = reached_leaves(ctx.loss) if grad_fn is not None else (set(), 0)
    unreachable = [n for n, p in train if id(p) not in leaves]
    ev.update(graph_nodes=nodes, reached=len(train) - len(unreachable), unreachable=_names(unreachable),
              unreachable_count=len(unreachable))
    arrives = _gradient_arrives(ctx, unreachable) if unreachable else set()
    unreachable = [n for n in unreachable if n not in arrives]
    cut, unused, unknown = sort_gradless(ctx.model, ctx.batch, ctx.loss_fn, unreachable) if unreachable else ([], [], [])
    cut, other = split_other(cut, _other(ctx) if cut else set())
    if other:
        ctx.report_notes.append(other_objective_note(other))
    ev.update(loss_depends_on=_names(cut), loss_invariant_to=_names(unused), unconfirmed=_names(unknown),
              trained_by_another_objective=_names(other))
    if cut:
        why = "the loss has no grad_fn (it does not require grad)" if grad_fn is None else f"{nodes} graph nodes walked"
        return failed("DEPENDENCY", "dependency.unreachable",
                      f"{len(cut)} of {len(train)} trainable parameters are not on the loss's autograd graph "
                      f"({why}) although the loss depends on them (perturbing them on a copy moves it): "
                      f"{', '.join(_names(cut)[:5])}", ev,
                      expected="every trainable parameter the loss depends on is reachable from loss.grad_fn",
                      observed=f"unreachable: {', '.join(_names(cut)[:5])}",
                      hint="find where the dependency path stops (reachability): a .detach(), torch.no_grad(), an "
                           "integer cast, .item()/.numpy()")
    for probe in (target_as_input, future_visible, fed_future_visible, next_token_future, shifted_target_read,
                  input_without_gradient, padding_read, examples_mixed):
        found = probe(ctx, ev)
        if found is not None:
            return found
    if unused or unknown:  # after the probes: a head the objective never reads does not hide a leak
        ctx.report_notes.append(unused_message(unused, unknown))
        return warned("DEPENDENCY", f"{len(unreachable)} of {len(train)} trainable parameters are not on the loss's "
                      f"autograd graph: {unused_message(unused, unknown)}", ev)
    if other:
        return passed("DEPENDENCY", f"{len(train) - len(other)} of {len(train)} trainable parameters are on the loss's "
                      f"graph ({nodes} nodes walked); {other_objective_note(other)[6:]}", ev)
    return passed("DEPENDENCY", f"all {len(train)} trainable parameters are on the loss's graph ({nodes} nodes walked)", ev)


def _gradient_arrives(ctx: Ctx, names: list[str]) -> set[str]:
    """Of the parameters the graph walk did not reach, those a backward still gives a nonzero ``.grad``: a custom
    autograd Function (reversible layers, checkpointing) runs its own backward inside, out of the walk's sight, and
    writes ``.grad`` itself (``autograd.grad`` would not return it). On the ledger's copy, its ``.grad`` put back."""
    params = dict(ctx.work.named_parameters())
    loss = ctx.loss
    if not any(n in params for n in names) or not torch.is_tensor(loss) or loss.numel() != 1:
        return set()
    got = nested_grads(loss, list(params.values()))  # every .grad cleared and put back, not only the names'
    return {n for n in names if n in params and id(params[n]) in got}


def _backward(ctx: Ctx) -> None:
    """``ctx.loss.backward()``; when the earlier links' forwards on the copy wrote a tensor its graph saved (a buffer a
    forward updates in place: the program's own loop never runs a second forward before its backward), the loss is
    computed again from the copy as it is now (same seed) and differentiated once more."""
    try:
        ctx.loss.backward()
    except RuntimeError as exc:
        if "inplace operation" not in str(exc):
            raise
        seed_copies()
        ctx.loss = compute_loss(ctx.work, ctx.batch, ctx.loss_fn)[1]
        ctx.loss.backward()


def check_gradient(ctx: Ctx) -> Check:
    train = trainable(ctx.work)
    for p in ctx.work.parameters():
        p.grad = None
    try:
        _backward(ctx)
    except Exception as exc:  # noqa: BLE001 - user graph; the failure is the finding
        return skipped_link("GRADIENT", f"backward raised {err(exc)}", {"error": err(exc)})
    norms: dict[str, float | None] = {}
    problems: dict[str, list[str]] = {"nonfinite": [], "missing": [], "zero": []}
    for n, p in train:
        g = None if p.grad is None else dense(p.grad)
        if g is None:
            problems["missing"].append(n)
            norms[n] = None
        elif not bool(torch.isfinite(g).all()):
            problems["nonfinite"].append(n)
            norms[n] = None  # listed under "nonfinite"
        else:
            norms[n] = float(g.detach().float().norm())
            if norms[n] == 0.0:
                problems["zero"].append(n)
    finite = [v for v in norms.values() if v is not None and math.isfinite(v)]
    ev: dict[str, Any] = {"grad_norms": norms if len(norms) <= LIST_CAP else {"count": len(norms)},
                          "grad_norm_min": min(finite, default=None), "grad_norm_max": max(finite, default=None)}
    ev.update({k: _names(v) for k, v in problems.items()})
    empty, other = split_other(problems["missing"] + problems["zero"],
                               _other(ctx) if problems["missing"] else set())
    problems = {k: [n for n in v if n not in other] for k, v in problems.items()}
    if other:
        ctx.report_notes.append(other_objective_note(other))
    depends = loss_depends(ctx.model, ctx.batch, ctx.loss_fn, empty) if empty else {}
    ev["loss_invariant_to"] = _names([n for n in empty if depends[n] is False])
    ev["unconfirmed"] = _names([n for n in empty if depends[n] is None])
    bad = [(n, k) for n, _ in train for k, v in problems.items() if n in v and (k == "nonfinite" or depends[n])]
    if not bad and empty:  # no gradient where the loss does not depend on it (or could not be shown to): not a defect
        unused = [n for n in empty if depends[n] is False]
        return warned("GRADIENT", unused_message(unused, [n for n in empty if depends[n] is None]), ev)
    if not bad:
        return passed("GRADIENT", f"all {len(train) - len(other)} trainable parameters this loss trains have finite "
                      f"nonzero gradients (norms {g4(min(finite, default=0.0))} .. {g4(max(finite, default=0.0))})", ev)
    name, kind = bad[0]
    text = {"missing": ".grad is None", "nonfinite": "gradient has NaN/inf", "zero": "gradient is exactly zero"}
    return failed("GRADIENT", f"gradient.{kind}",
                  f"{name}: {text[kind]} after one backward from .grad=None"
                  f"{'' if kind == 'nonfinite' else ', although the loss depends on it (perturbing it on a copy moves it)'} "
                  f"({len(problems['missing'])} None, {len(problems['zero'])} zero, {len(problems['nonfinite'])} non-finite)",
                  ev, expected="finite, nonzero gradients for every trainable parameter", observed=f"{name}: {text[kind]}",
                  hint={"missing": "a hook or custom autograd function drops the gradient on its way to the parameter",
                        "nonfinite": "the backward pass overflows: trace the first non-finite gradient (step_probe)",
                        "zero": "the path exists but carries nothing: dead ReLUs, a zero-initialised layer downstream, "
                                "or a multiplication by a zero mask"}[kind])


def by_module(names: list[str]) -> str:
    """``body.0 (weight, bias), body.2 (weight, bias)``: parameter names grouped by the module that holds them
    (by top-level module when that is still long)."""
    def group(level: int | None) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in names:
            mod, _, leaf = n.rpartition(".")
            if level is not None and mod:
                mod, leaf = n.split(".", 1)[0], n.split(".", 1)[1]
            out.setdefault(mod or "(model)", []).append(leaf)
        return out
    groups = group(None)
    if len(groups) > 5:
        groups = group(1)
    text = [f"{m} ({', '.join(v) if len(v) <= 3 else f'{len(v)} tensors'})" for m, v in groups.items()]
    return ", ".join(text[:6]) + (f", ... {len(text) - 6} more modules" if len(text) > 6 else "")


def step(opt: torch.optim.Optimizer, closure: Any) -> None:
    if isinstance(opt, torch.optim.LBFGS):
        opt.step(closure)
    else:
        opt.step()


def _visible(opt: torch.optim.Optimizer, group: dict[str, Any], p: torch.Tensor) -> bool:
    """Whether one step *should* change at least one element of ``p`` at float resolution: SGD moves by
    lr*|grad| (+ lr*wd*|p|), adaptive optimizers by about lr per element."""
    lr = float(group.get("lr", 0.0) if not torch.is_tensor(group.get("lr")) else group["lr"])
    with torch.no_grad():
        w = p.detach()
        if isinstance(opt, torch.optim.SGD):
            size = lr * dense(p.grad).abs() + lr * float(group.get("weight_decay", 0.0)) * w.abs()
        else:
            size = torch.full_like(w, lr)
        try:
            ulp = (torch.nextafter(w, torch.full_like(w, math.inf)) - w).abs()
        except RuntimeError:  # nextafter is not implemented for every dtype/device: assume it should move
            return True
        return bool((size > 0.5 * ulp).any())


def check_update(ctx: Ctx) -> Check:
    opt, model = ctx.work_opt, ctx.work
    group_of = {id(p): (gi, g) for gi, g in enumerate(opt.param_groups) for p in g["params"]}
    intended = [(n, p) for n, p in trainable(model) if id(p) in group_of and p.grad is not None and bool(dense(p.grad).any())]
    if not intended:
        return skipped_link("PARAMETER_UPDATE", "no owned trainable parameter holds a nonzero gradient to apply (see GRADIENT)",
                            {"optimizer": type(opt).__name__})
    before = {n: p.detach().clone() for n, p in intended}
    visible = {n: _visible(opt, group_of[id(p)][1], p) for n, p in intended}

    def closure() -> Any:
        opt.zero_grad()
        return compute_loss(model, ctx.batch, ctx.loss_fn)[1].backward()

    try:
        step(opt, closure)
    except Exception as exc:  # noqa: BLE001 - user optimizer; the failure is the finding
        return skipped_link("PARAMETER_UPDATE", f"optimizer.step() raised {err(exc)}", {"error": err(exc)})
    deltas, not_moved, below = {}, [], []
    descent = 0.0  # <update, gradient>: negative for any method that descends the loss
    for n, p in intended:
        descent += float(((p.detach() - before[n]).double() * dense(p.grad).double()).sum()) if p.grad is not None else 0.0
        d = float((p.detach() - before[n]).float().norm())
        deltas[n] = {"delta_norm": d, "relative": d / max(float(before[n].float().norm()), 1e-12),
                     "group": group_of[id(p)][0], "lr": lr_of(group_of[id(p)][1])}
        if d == 0.0:
            (not_moved if visible[n] or deltas[n]["lr"] == 0.0 else below).append(n)
    ev: dict[str, Any] = {"optimizer": type(opt).__name__, "intended": len(intended), "moved": len(intended) - len(not_moved) - len(below),
                          "not_moved": _names(not_moved), "below_float_resolution": _names(below),
                          "deltas": deltas if len(deltas) <= LIST_CAP else {"count": len(deltas)}}
    ev["update_dot_gradient"] = descent
    maximize = [gi for gi, g in enumerate(opt.param_groups) if g.get("maximize")]
    if descent > 0 and maximize:
        return warned("PARAMETER_UPDATE", f"one {type(opt).__name__} step moved the parameters up loss_fn "
                      f"(<update, gradient> = {g4(descent)} > 0): param group(s) {maximize} have maximize=True; right if "
                      "loss_fn returns a reward, wrong if it returns a loss (then drop maximize=True)", ev,
                      kind="update.wrong_direction")
    zero_lr = [n for n in not_moved if deltas[n]["lr"] == 0.0]  # lr 0 may freeze a group on purpose: not confirmed
    not_moved = [n for n in not_moved if n not in zero_lr]
    not_moved = _stuck_later(ctx, opt, intended, not_moved, ev)
    if not_moved:
        n = not_moved[0]
        return failed("PARAMETER_UPDATE", "update.not_moved",
                      f"{len(not_moved)} of {len(intended)} owned parameters with nonzero gradients did not change in one "
                      f"{type(opt).__name__} step; first {n} (group {deltas[n]['group']}, lr {deltas[n]['lr']})", ev,
                      expected="every owned parameter with a nonzero gradient changes after optimizer.step()",
                      observed=f"{n} unchanged (lr {deltas[n]['lr']})",
                      hint="lr 0 in its group, a step hook that restores the weights, or a step() override that skips "
                           "it; freeze with requires_grad_(False) if it should not train")
    if zero_lr:
        n = zero_lr[0]
        return warned("PARAMETER_UPDATE", f"{len(zero_lr)} of {len(intended)} owned parameters with nonzero gradients did "
                      f"not change in one {type(opt).__name__} step because their param group's lr is 0 (first {n}, group "
                      f"{deltas[n]['group']}); not confirmed that they are meant to train: an lr of 0 may freeze them on "
                      "purpose (then requires_grad_(False) says so); otherwise give the group an lr > 0", ev,
                      kind="update.not_moved")
    extra = f"; {len(below)} changes were below float resolution at this lr" if below else ""
    return passed("PARAMETER_UPDATE", f"{len(intended) - len(below)} of {len(intended)} owned parameters moved in one {type(opt).__name__} "
                  f"step{extra}", ev)


def _stuck_later(ctx: Ctx, opt: torch.optim.Optimizer, intended: list, not_moved: list[str], ev: dict[str, Any]) -> list[str]:
    """The parameters the copy's next steps on the same gradients leave in place too; the others were held by the
    optimizer's own first step (a warmup computed inside step), a note."""
    later = moved_later(opt, {n: p for n, p in intended if n in not_moved}) if not_moved else set()
    if later:
        ev["moved_on_later_steps"] = _names(sorted(later))
        ctx.report_notes.append(f"{len(later)} parameter(s) did not move on {type(opt).__name__}'s first step but its "
                                "next steps on the same gradients move them (a warmup inside step?), or a larger lr "
                                "does where it is at most 1e-6 (an update below float32's resolution)")
    return [n for n in not_moved if n not in later]

