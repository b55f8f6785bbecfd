"""PARAMETER_UPDATE through the user's own ``train_step``: the step of their loop (manual
``p.data.add_(p.grad, alpha=-lr)`` updates, momentum, clipping, gradient accumulation, schedulers, LBFGS
closures) run on their objects under :func:`guarded`, which puts every value back afterwards.

What it reads: the loss of the model on the ledger's batch before and after each of up to ``STEPS`` calls (no
grad, the model's own mode, the same seed before each evaluation so dropout draws the same masks), and each
trainable parameter's change. Verdicts:

- ``update.ascends``: the first step moved the parameters along the gradient (cosine of the update with the
  gradient above ``ASCENT_COSINE``, the gradient read on the ledger's copy) and the loss on the batch rose at every
  call, and so did the loss train_step reports on its own batches where it returns one: training climbs the loss
  (``(-loss).backward()``, ``p.data.add_(p.grad, alpha=+lr)``).
- ``update.diverges``: the loss became non-finite or grew ``DIVERGE``-fold within the calls: the step size is too
  large; the finding names the lr and the param group of the parameter that moved most.
- ``update.not_moved``: a trainable parameter with a healthy gradient never changed over the calls.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from ..._globals import preserved_globals
from .._core.batch import compute_loss
from .._core.checks import Check
from .._core.closure import closure_state, innermost, trained_elsewhere
from .._core.invariance import loss_depends
from .._core.lr import lr_of
from .._core.state import guarded
from .._core.task import Ctx, err, seed_copies
from ._common import failed, g4, passed, skipped_link, warned
from ._links import LIST_CAP, dense, trainable

ASCENT_COSINE = 0.3  # measured: correct corpus programs -1.0 .. -0.23 (near 0 with dropout noise); (-loss).backward() with AdamW 0.49, manual +lr 1.0
STEPS = 4
DIVERGE = 10.0
AGAIN = 16  # train_step's next calls from the same start that confirm a blow-up (a spike needs ~10 to settle)
ROUNDING = 1e-6  # a gradient below this fraction of the largest one is float rounding (a cancelled bias)


def _names(names: list[str]) -> list[str]:
    return names if len(names) <= LIST_CAP else [*names[:LIST_CAP], f"... {len(names) - LIST_CAP} more"]


def _loss_on_batch(ctx: Ctx) -> float:
    seed_copies()
    with torch.no_grad():
        loss = compute_loss(ctx.model, ctx.batch, ctx.loss_fn)[1]
    return float(loss.detach().float()) if torch.is_tensor(loss) and loss.numel() == 1 else math.nan


def _grads(ctx: Ctx) -> dict[str, torch.Tensor]:
    """The gradient of the ledger's batch loss at the user's parameter values (GRADIENT's backward on the copy)."""
    return {n: dense(p.grad).detach() for n, p in ctx.work.named_parameters() if p.grad is not None}


def _run(ctx: Ctx, steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor], dict[str, torch.Tensor], str | None]:
    """Call train_step up to ``steps`` times on the user's objects (restored afterwards): the losses on the batch
    (before, then after each call), each parameter's change after the first call and after the last."""
    params = trainable(ctx.model)
    start = {n: p.detach().clone() for n, p in params}
    first: dict[str, torch.Tensor] = {}
    losses: list[float] = []
    calls = 0
    stepped: dict[int, float] = {}  # the largest lr each parameter's group had at an optimizer.step (a warmup from 0)
    hook = innermost(ctx.optimizer).register_step_pre_hook(
        lambda o, *_: stepped.update({id(q): max(stepped.get(id(q), 0.0), lr_of(g)) for g in o.param_groups
                                      for q in g["params"]})) if ctx.optimizer is not None else None
    ctx.notes["lr_at_steps"] = stepped
    reported: list[float] = []  # what each call returned, where it is a number (the loss on its own batch)
    ctx.notes["step_reported"] = reported
    reached: list[set[str]] = []  # the parameters each call's own backward reached
    ctx.notes["step_reached"] = reached
    with guarded(ctx.model, ctx.optimizer, ctx.train_step, closure_state(ctx.train_step)), torch.enable_grad():
        arrivals = [p.register_post_accumulate_grad_hook(_arrived(reached, n)) for n, p in params]
        try:
            losses.append(_loss_on_batch(ctx))
            for i in range(steps):
                calls += 1
                reached.append(set())
                reported.append(_number(ctx.train_step()))
                if i == 0:
                    first = {n: (p.detach() - start[n]).clone() for n, p in params}
                losses.append(_loss_on_batch(ctx))
                if not math.isfinite(losses[-1]):
                    break
            total = {n: (p.detach() - start[n]).clone() for n, p in params}
        except Exception as exc:  # noqa: BLE001 - user code; restored by the guard
            ctx.notes["ran_train_step"] = calls
            return losses, first, {}, f"train_step raised {err(exc)} on call {calls}"
        finally:
            for h in arrivals if hook is None else [hook, *arrivals]:
                h.remove()
    ctx.notes["ran_train_step"] = calls
    return losses, first, total, None


def _other_calls(ctx: Ctx, ev: dict[str, Any], not_moved: list[str]) -> tuple[set[str], list[str]]:
    """Parameters that did not move because other calls train them, each noted: owned by another optimizer the step
    reaches (an alternating schedule), or never reached by the watched calls' backwards that reach a subset drawn per
    call."""
    elsewhere = trained_elsewhere(ctx.train_step, ctx.optimizer, ctx.model) & set(not_moved)
    if elsewhere:  # another optimizer the step reaches owns them: trained in other calls (an alternating schedule)
        ev["owned_by_another_optimizer"] = _names(sorted(elsewhere))
        ctx.report_notes.append(f"note: {len(elsewhere)} parameters did not move in the calls watched, but another "
                                f"optimizer train_step reaches owns them (first: {min(elsewhere)}): an alternating "
                                "schedule trains them in other calls; not checked")
    drawn = _drawn_subset(ctx, [n for n in not_moved if n not in elsewhere])
    if drawn:  # the calls' own backwards reached other parameters each time, never these: a subset drawn per call
        ev["never_reached_by_the_step"] = _names(drawn)
        ctx.report_notes.append(f"note: {len(drawn)} parameters did not move in the {ev['calls']} calls watched, and "
                                f"train_step's own backward never reached them while it reached other parameters at "
                                f"different calls (first: {drawn[0]}): the step trains a subset it draws per call (a "
                                "head per sampled time step, an expert a router picks); not judged")
    return elsewhere, drawn


def _drawn_subset(ctx: Ctx, names: list[str]) -> list[str]:
    """Of ``names`` (parameters that did not move), those no call's backward reached, where the calls reached
    different sets of parameters: the step draws what it trains at each call (none where every call reached the same
    set: a part the step never trains is then the finding)."""
    reached = ctx.notes.get("step_reached") or []
    if len({frozenset(r) for r in reached}) < 2:
        return []
    return [n for n in names if not any(n in r for r in reached)]


def _arrived(reached: list[set[str]], name: str) -> Any:
    """A post-accumulate-grad hook adding ``name`` to the current call's reached set."""
    def hook(_p: torch.Tensor) -> None:
        if reached:
            reached[-1].add(name)
    return hook


def _along(update: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], names: list[str]) -> tuple[float, float]:
    """(<update, gradient>, their cosine) over ``names``."""
    same = [n for n in names if update[n].shape == grads[n].shape]
    dot = sum(float((update[n].double() * grads[n].double()).sum()) for n in same)
    norms = [sum(float(t[n].double().pow(2).sum()) for n in same) ** 0.5 for t in (update, grads)]
    return dot, dot / (norms[0] * norms[1]) if norms[0] * norms[1] > 0 else 0.0


def _climbing(losses: list[float]) -> bool:
    """The loss on the batch rose at every call, or became non-finite."""
    finite = [v for v in losses if math.isfinite(v)]
    return bool(losses) and (not math.isfinite(losses[-1]) or
                             (all(b > a for a, b in itertools.pairwise(finite)) and len(finite) == len(losses)))


def _climbs_again(ctx: Ctx, ev: dict[str, Any], healthy: list[str], grads: dict[str, torch.Tensor]) -> bool:
    """The same start run again through train_step's next calls (a data stream draws other batches) climbs again: the
    update along the batch's gradient and the loss rising at every call. One climb can be chance where each call steps
    on another batch (its cosine with this batch's gradient reaches +-0.35); a step that climbs its loss does it twice."""
    done = ctx.notes.get("ran_train_step", 0)
    with preserved_globals(seed=1):  # other draws where the step samples its batches from the global RNGs
        losses, first, _, error = _run(ctx)
    ctx.notes["ran_train_step"] = done + ctx.notes.get("ran_train_step", 0)
    if error is not None or not first:
        return True  # nothing to contradict the first climb
    cosine = _along(first, grads, healthy)[1]
    ev.update(update_gradient_cosine_again=cosine, losses_on_batch_again=losses)
    if cosine > ASCENT_COSINE and _climbing(losses):
        return True
    ctx.report_notes.append(f"note: train_step's first calls moved up this batch's gradient (cosine "
                            f"{g4(ev['update_gradient_cosine'])}), but the same start run again did not (cosine "
                            f"{g4(cosine)}): chance in the batches it drew, not a climb")
    return False


def _descends_own(ctx: Ctx, ev: dict[str, Any]) -> bool:
    """Whether train_step reports its loss on its own batches (a finite number at each call) and that loss did not
    rise at every call while this batch's did: a step that climbs its objective climbs the loss it reports, so the
    climb here is what the step's own data does to this batch (a discriminator whose fakes move on, a stream that
    drifts from the batch), not a sign; noted."""
    reported = ctx.notes.get("step_reported") or []
    if len(reported) < 2 or not all(math.isfinite(v) for v in reported) or \
            all(b > a for a, b in itertools.pairwise(reported)):
        return False
    ev["train_step_reported"] = reported
    ctx.report_notes.append(f"note: train_step's first calls moved up this batch's gradient (cosine "
                            f"{g4(ev['update_gradient_cosine'])}) while the loss it reports on its own batches did not "
                            f"rise at every call ({' -> '.join(g4(v) for v in reported)}): it descends its own "
                            "objective; not a climb")
    return True


def _number(value: Any) -> float:
    if torch.is_tensor(value) and value.numel() == 1 and value.is_floating_point():
        return float(value.detach())
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _within_reported(ctx: Ctx, ev: dict[str, Any], l0: float, last: float, peak: float) -> Check | None:
    """The premise of a 10-fold rise is that the batch's start is the program's loss scale. Where train_step reports
    its loss on its own batches (returns a number at each call) and this batch started far below it (an easy batch, a
    sine task of small amplitude), a rise that stays under 10x of the first reported value is not a blow-up: WARN."""
    reported = [v for v in ctx.notes.get("step_reported", []) if math.isfinite(v)]
    if not reported or not math.isfinite(last) or reported[0] <= l0 or peak > DIVERGE * reported[0]:
        return None
    ev["train_step_reported"] = reported
    return warned("PARAMETER_UPDATE", f"the loss on the batch went {g4(l0)} -> {g4(peak)} within {ev['calls']} calls of "
                  f"train_step, but it started below the loss train_step reports on its own batches ({g4(reported[0])} "
                  "at its first call) and stays under 10x of that: an easy batch that got less easy, not shown to be a "
                  "divergence", ev, kind="update.diverges")


def _blew_up(losses: list[float]) -> bool:
    finite = [v for v in losses if math.isfinite(v)]
    l0 = losses[0] if losses else math.nan
    return math.isfinite(l0) and (not math.isfinite(losses[-1]) or (l0 > 0 and max(finite) > DIVERGE * l0))


def _healthy(ctx: Ctx, grads: dict[str, torch.Tensor]) -> list[str]:
    """The trainable parameters with a finite gradient above float rounding: a bias a batch norm cancels gets ~1e-8
    where the weights get ~0.1, which no update can act on."""
    finite = {n: g for n, g in grads.items() if bool(torch.isfinite(g).all())}
    scale = max((float(g.abs().max()) for g in finite.values() if g.numel()), default=0.0)
    return [n for n, _ in trainable(ctx.model) if n in finite and finite[n].numel()
            and float(finite[n].abs().max()) > ROUNDING * scale]


def _stays_up(losses: list[float]) -> bool:
    """Blown up and not come back: the last loss non-finite, or the losses after the start living above DIVERGE x the
    start (their median: one dip on the way is no recovery, one spike is no divergence)."""
    after = sorted(v if math.isfinite(v) else math.inf for v in losses[1:])
    return not math.isfinite(losses[-1]) or (bool(after) and after[len(after) // 2] > DIVERGE * losses[0])


def _groups(ctx: Ctx) -> dict[int, tuple[int, float]]:
    if ctx.optimizer is None:
        return {}
    return {id(p): (gi, lr_of(g)) for gi, g in enumerate(ctx.optimizer.param_groups) for p in g["params"]}


def check_user_step(ctx: Ctx) -> Check:
    losses, first, total, error = _run(ctx)
    if error is not None:
        return skipped_link("PARAMETER_UPDATE", f"could not judge the update: {error}", {"error": error})
    grads = _grads(ctx)
    healthy = _healthy(ctx, grads)
    moved = [n for n in healthy if bool(total[n].any())]
    not_moved = [n for n in healthy if n not in moved]
    descent, cosine = _along(first, grads, healthy)
    ev: dict[str, Any] = {"source": "train_step", "calls": len(losses) - 1, "losses_on_batch": losses,
                          "update_dot_gradient": descent, "intended": len(healthy), "moved": len(moved),
                          "not_moved": _names(not_moved), "update_gradient_cosine": cosine}
    l0, last = losses[0], losses[-1]
    finite = [v for v in losses if math.isfinite(v)]
    # clearly up the gradient, and the loss rose at every call: a train_step drawing other batches (a data stream)
    # moves this batch's loss up and down by chance, and its cosine with this batch's gradient reaches +-0.35
    if cosine > ASCENT_COSINE and math.isfinite(l0) and _climbing(losses) and not _descends_own(ctx, ev) \
            and _climbs_again(ctx, ev, healthy, grads):
        return _ascends(ev, healthy, first, grads, l0, last)
    if _blew_up(losses):
        return _within_reported(ctx, ev, l0, last, max(finite)) or _blow_up(ctx, ev, total, l0, last, max(finite))
    ctx.notes["user_step_losses"] = losses if len(finite) == len(losses) else None
    at_zero = _at_lr_zero(ctx, not_moved)
    elsewhere, drawn = _other_calls(ctx, ev, [n for n in not_moved if n not in at_zero])
    not_moved = [n for n in not_moved if n not in at_zero and n not in elsewhere and n not in drawn]
    depends = loss_depends(ctx.model, ctx.batch, ctx.loss_fn, not_moved) if not_moved else {}
    invariant = [n for n in not_moved if depends[n] is False]
    ev["loss_invariant_to"] = _names(invariant)
    unknown = [n for n in not_moved if depends[n] is None]
    not_moved = [n for n in not_moved if depends[n]]  # confirmed: perturbing it on a copy moves the loss
    if not_moved:
        return failed("PARAMETER_UPDATE", "update.not_moved",
                      f"{len(not_moved)} of {len(healthy)} trainable parameters with healthy gradients did not change over "
                      f"{ev['calls']} calls of train_step, although the loss depends on them (perturbing them on a copy "
                      f"moves it); first {not_moved[0]}", ev,
                      expected="train_step changes every trainable parameter that has a gradient",
                      observed=f"unchanged: {', '.join(_names(not_moved)[:5])}",
                      hint="train_step's update skips them: an optimizer or manual-update loop over a subset of the "
                           "parameters; freeze them with requires_grad_(False) if they should not train")
    if unknown:
        ev["unconfirmed"] = _names(unknown)
        return warned("PARAMETER_UPDATE", f"{len(unknown)} of {len(healthy)} trainable parameters with healthy gradients "
                      f"did not change over {ev['calls']} calls of train_step (first {unknown[0]}); not confirmed that the "
                      "loss depends on them (the counterfactual on a copy could not run), so they may be frozen on "
                      "purpose: if so, set requires_grad_(False)", ev, kind="update.not_moved")
    if invariant:
        ctx.report_notes.append(f"note: {len(invariant)} parameters did not move in train_step, and the loss does not "
                                f"depend on them (perturbing them on a copy leaves it unchanged; first: {invariant[0]}), "
                                "so there was nothing to learn for them: a term that cancels, a unit the objective "
                                "never reads")
    return _moved_all(ev, healthy, invariant, at_zero, descent, l0, last, len(elsewhere) + len(drawn))


def _blow_up(ctx: Ctx, ev: dict[str, Any], total: dict[str, torch.Tensor], l0: float, last: float, peak: float) -> Check:
    """``update.diverges`` once the same start blows up again on train_step's next calls (other batches); else WARN."""
    again = _run(ctx, AGAIN)[0]
    ev["losses_on_batch_again"] = again
    if not _blew_up(again):
        return warned("PARAMETER_UPDATE", f"the loss on the batch went {g4(l0)} -> {g4(last)} within {ev['calls']} calls "
                      f"of train_step, but not when the same start ran train_step's next calls "
                      f"({' -> '.join(g4(v) for v in again)}): a blow-up on some batches, not shown to be the step size",
                      ev, kind="update.diverges")
    if not _stays_up(again):
        return warned("PARAMETER_UPDATE", f"the loss on the batch jumped {g4(l0)} -> {g4(peak)} in train_step's first calls "
                      f"and came back: over the next {len(again) - 1} calls from the same start it lived within 10x of "
                      f"its start ({' -> '.join(g4(v) for v in again)}): a spike the training recovers from (a large "
                      "first step), not a divergence", ev, kind="update.diverges")
    return _diverges(ctx, ev, total, l0, last, peak)


def _at_lr_zero(ctx: Ctx, not_moved: list[str]) -> list[str]:
    """The unmoved parameters whose group's lr was 0 at every optimizer.step (a warmup from 0), noted."""
    params = dict(trainable(ctx.model))
    at_zero = [n for n in not_moved if ctx.notes["lr_at_steps"].get(id(params[n])) == 0.0]
    if at_zero:
        ctx.report_notes.append(f"note: {len(at_zero)} parameters did not move in train_step because their group's lr "
                                f"was 0 at every optimizer.step (a warmup from 0?; first: {at_zero[0]})")
    return at_zero


def _moved_all(ev: dict[str, Any], healthy: list[str], invariant: list[str], at_zero: list[str], descent: float,
               l0: float, last: float, unjudged: int = 0) -> Check:
    """PASS; ``unjudged``: parameters another optimizer owns or the step's own backward never reached (noted)."""
    if at_zero and len(at_zero) == len(healthy):
        return passed("PARAMETER_UPDATE", f"note: the update was not judged: every optimizer.step of {ev['calls']} calls "
                      "ran at lr 0 (a warmup from 0?)", ev)
    left = (f"; {len(at_zero)} at lr 0 at every step were left" if at_zero else "") + \
        (f"; {unjudged} trained in other calls were left (see the notes)" if unjudged else "")
    skipped = f" the loss depends on ({len(invariant)} it does not depend on were left)" if invariant else ""
    return passed("PARAMETER_UPDATE", f"train_step moved all {len(healthy) - len(invariant) - len(at_zero) - unjudged} trainable "
                  f"parameters with healthy gradients{skipped}{left}, {_direction(descent)} (<update, gradient> = "
                  f"{g4(descent)}; loss on the batch {g4(l0)} -> {g4(last)} over {ev['calls']} calls)", ev)


def _direction(descent: float) -> str:
    """How the first update lies against the declared loss's gradient on the batch (its sign, not a verdict: the step
    may train on other batches or other terms)."""
    return "down the loss" if descent < 0 else "not down the declared loss's gradient" if descent > 0 else \
        "across the declared loss's gradient"


def _ascends(ev: dict[str, Any], healthy: list[str], first: dict[str, torch.Tensor], grads: dict[str, torch.Tensor],
             l0: float, last: float) -> Check:
    up = [n for n in healthy if float((first[n].double() * grads[n].double()).sum()) > 0]
    ev["ascending"] = _names(up)
    return failed("PARAMETER_UPDATE", "update.ascends",
                  f"train_step moves the parameters up the loss: <update, gradient> = {g4(ev['update_dot_gradient'])} > 0 "
                  f"and the loss on the batch went {g4(l0)} -> {g4(last)} over {ev['calls']} calls; "
                  f"{len(up)} parameters ascend, first {', '.join(_names(up)[:3])}", ev,
                  expected="an update against the gradient that lowers the loss",
                  observed=f"<update, gradient> = {g4(ev['update_dot_gradient'])}, loss {g4(l0)} -> {g4(last)}",
                  hint="the step climbs the loss: a (-loss).backward(), a gradient added instead of subtracted "
                       "(p.data.add_(p.grad, alpha=+lr)), or maximize=True")


def _diverges(ctx: Ctx, ev: dict[str, Any], total: dict[str, torch.Tensor], l0: float, last: float, peak: float) -> Check:
    groups = _groups(ctx)
    params = dict(trainable(ctx.model))
    rel = {n: float(d.float().norm()) / max(float(params[n].detach().float().norm()), 1e-12) for n, d in total.items()
           if torch.isfinite(d).all()}
    worst = max(rel, key=rel.get) if rel else next(iter(total), "?")
    gi, lr = groups.get(id(params.get(worst)), (None, None))
    ev.update(lr=lr, param_group=gi, parameter=worst)
    where = f"lr {g4(lr)} in param group {gi}" if lr is not None else "the step size of train_step's manual update"
    what = f"{last}" if not math.isfinite(last) else f"{g4(peak)} ({peak / l0:.0f}x)"
    return failed("PARAMETER_UPDATE", "update.diverges",
                  f"the loss on the batch went {g4(l0)} -> {what} within {ev['calls']} calls of train_step: the updates "
                  f"diverge at {where} (largest relative change: {worst})", ev,
                  expected=f"a loss that does not grow {DIVERGE:.0f}-fold or become non-finite over a few steps",
                  observed=f"loss {g4(l0)} -> {what} at {where}",
                  hint="lower the learning rate of that group (try 10x smaller), or clip the gradients")
