"""CAPABILITY: can the controlled system overfit a tiny fixed batch?

Deep copies of the model and optimizer (same class, groups and hyperparameters, state reset; plain SGD without a
torch.optim optimizer) train on the first ``TINY`` examples along the batch axis (or ``overfit_batch``; the whole
batch when its examples cannot be separated or the program refuses a subset), no shuffling, in the model's current
mode, up to ``overfit_steps`` steps per round.

Escalation (why): a recipe lr (SGD 1e-3, AdamW 1e-5) is tuned for thousands of steps, not this budget. Rounds run at
the program's lr x1, x10, x100, x1000 (every group scaled) and stop as soon as one fits; a round ends early when it
fits, diverges, plateaus (under 0.1% of the initial loss gained in ``WINDOW`` steps) or, before the last round, is
too slow to reach the criterion within ``PROBE`` steps (then the next lr is tried; past ``PROBE`` steps a round still
on course keeps the whole budget, and no higher lr is tried after it; the last round, and the program's lr again when
a higher one diverged, run the full budget). A diverging round ends it; if the program's own lr diverges, x0.1 and
x0.01 are tried instead.
Criterion: *fit* = the loss fell by ``FIT`` (90%) of its initial value, or every supervised element of the tiny
batch is predicted right (classification and language models); objectives without a known floor (a VAE's ELBO, an
energy ``out.sum()``, a task not classification/LM/regression) and stochastic ones (the batch's loss differs between
two forwards with fixed weights) are judged *learning* (down ``LEARN``, 10%), with a note. Fitted/learning at some
lr is PASS (a note names the lr when it is not the program's); learning by ``STEADY`` (50%) and still falling
(``STILL``, 2% of the initial loss over ``WINDOW`` steps) with the weights moving is PASS "not fitted within the
budget"; learning by ``PROGRESS`` (25%), or a budget under ``MIN_BUDGET`` steps, is WARN. FAIL only when the evidence
says why: the weights barely moved at every lr (relative change < 1e-3 even at x1000), the program's lr and every
lower one diverge, or every lr plateaued at the same loss with the weights moving and a copy with a learnable offset
and scale on its outputs fits (the model cannot express them: ``_cause``); weights that barely moved at every lr
first get the escalation again from the lr the program's own schedule reaches, when that is higher (a warmup's start:
``_schedule``). Anything else, and anything cut by ``TIME_BUDGET`` before every lr was tried, is WARN "inconclusive"; so is a
divergence at every lr where the program's own ``train_step`` kept the loss finite (its own clipping or schedule).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ....report import Status
from ..._core.batch import Batch, compute_loss, loss_problem
from ..._core.checks import Check
from ..._core.examples import logits_of, num_examples, take_examples
from ..._core.lr import lr_of
from ..._core.task import Ctx, err, is_int, seed_copies
from .._common import failed, g4, passed, skipped_link, to_logits_2d, warned
from .._links import step, trainable
from ._cause import cannot, soft_floor
from ._premises import floor, reads_own_model, relative_change, trained_copy, untestable
from ._schedule import at_schedule

TINY, FIT, LEARN, PROGRESS = 8, 0.9, 0.10, 0.25
STEADY = 0.5  # a round that fell this much and was still falling when it ended is learning (PASS with a note) ...
STILL = 0.02  # ... still falling: by this fraction of the initial loss over its last WINDOW steps
MIN_BUDGET = 20  # below this many steps a loss that has not fallen is a verdict only when the weights did not move
SCALES, DOWN = (1.0, 10.0, 100.0, 1000.0), (0.1, 0.01)
WINDOW, PROBE = 20, 40  # PROBE: steps a round before the last gets before the next lr is tried
TIME_BUDGET = 15.0  # wall-clock seconds the escalation may take (a large copy's rounds stop there: never a FAIL)
DIVERGE = 10.0
PLAIN_SGD_LR = 1e-2  # no torch.optim optimizer (manual updates): plain SGD on a copy, escalated from here


@dataclass
class Round:
    scale: float
    lr: list[float]
    losses: list[float] = field(default_factory=list)
    accs: list[float | None] = field(default_factory=list)
    moved: float = 0.0
    outcome: str = "budget"  # fitted | learning | plateau | slow | diverged | budget

    @property
    def progress(self) -> float:
        finite = [v for v in self.losses if math.isfinite(v)]
        first = self.losses[0] if self.losses else 0.0
        return (first - min(finite)) / abs(first) if finite and first != 0 and math.isfinite(first) else 0.0

    @property
    def recent(self) -> float:
        """The fall over the last ``WINDOW`` steps, as a fraction of the initial loss (0 when shorter or not finite)."""
        head, first = self.losses[: len(self.losses) - WINDOW], self.losses[0] if self.losses else 0.0
        if not head or not all(map(math.isfinite, self.losses)) or first == 0:
            return 0.0
        return (min(head) - min(self.losses)) / abs(first)

    def summary(self) -> dict[str, Any]:
        return {"lr": self.lr, "scale": self.scale, "steps": max(len(self.losses) - 1, 0), "outcome": self.outcome,
                "fell_by": self.progress, "parameter_change": self.moved}


def _accuracy(ctx: Ctx, outputs: Any, targets: Any) -> float | None:
    outputs = logits_of(outputs)
    if ctx.class_dim is None or not is_int(targets) or outputs is None or outputs.dim() <= ctx.class_dim:
        return None
    if outputs.shape[ctx.class_dim] != ctx.num_classes:
        return None
    with torch.no_grad():
        pred = to_logits_2d(ctx, outputs.detach()).argmax(-1)
        flat = targets.reshape(-1)
        if flat.numel() != pred.numel():
            return None
        m = flat != ctx.ignore_index
        return float((pred[m] == flat[m]).float().mean()) if bool(m.any()) else None


def _tiny(ctx: Ctx) -> Batch:
    if ctx.overfit_batch is not None:
        return ctx.overfit_batch
    tiny = take_examples(ctx.batch, TINY, ctx.batch_axis)
    if tiny is None:
        ctx.report_notes.append("note: the examples of this batch cannot be separated (sparse inputs, shared structure or "
                                "flattened targets): CAPABILITY overfits the whole batch")
        return ctx.batch
    return tiny


def _judge(r: Round, known: bool, i: int, budget: int, last: bool) -> str | None:
    first, now = r.losses[0], r.losses[-1]
    if not math.isfinite(now) or (first > 0 and now > DIVERGE * first):
        return "diverged"
    if known and _fit(first, now, r.accs[-1]):
        return "fitted"
    if not known and r.progress >= LEARN:
        return "learning"
    if i >= budget:
        return "budget"
    if i < WINDOW or i % WINDOW:
        return None
    gained = (min(r.losses[: i - WINDOW + 1]) - min(r.losses)) / max(abs(first), 1e-12)
    if gained < 1e-3:
        return "plateau"
    if last:
        return None
    target = FIT if known else LEARN
    # a round before the last is a probe (the next lr is cheaper) until PROBE steps; past them, a round on course to fit
    # within the whole budget at its current pace keeps the budget (the next lr would start over)
    horizon = min(budget, PROBE) if i < PROBE else budget
    return None if r.progress + gained * (horizon - i) / WINDOW >= target else "slow"


def _round(ctx: Ctx, tiny: Batch, scale: float, known: bool, last: bool, prepare: Any = None) -> tuple[Round, str | None]:
    """Train one copy at ``scale`` x the program's lr (changed first by ``prepare(model, opt)``, a counterfactual):
    the round, or the reason it could not train."""
    seed_copies()
    model, opt = trained_copy(ctx, scale, PLAIN_SGD_LR)
    if prepare is not None:
        prepare(model, opt)
    start = [p.detach().clone() for _, p in trainable(model)]
    r = Round(scale, [lr_of(g) for g in opt.param_groups])

    def closure() -> Any:
        opt.zero_grad()
        loss = compute_loss(model, tiny, ctx.loss_fn)[1]
        loss.backward()
        return loss

    deadline = ctx.notes.get("capability_deadline", math.inf)
    for i in range(ctx.overfit_steps + 1):
        if time.perf_counter() > deadline:  # the time budget: a round cut short is "budget", never a cause
            ctx.notes["capability_timed_out"] = True
            break
        opt.zero_grad(set_to_none=True)
        try:
            outputs, loss = compute_loss(model, tiny, ctx.loss_fn)
        except Exception as exc:  # noqa: BLE001 - user code
            return r, f"step {i} raised {err(exc)}"
        problem = loss_problem(loss)
        if problem is not None:
            return r, problem
        r.losses.append(float(loss.detach().float()))
        if i == 0 and not math.isfinite(r.losses[0]):  # a mean over an empty subset (no negatives among these examples)
            return r, f"the loss is {r.losses[0]} on these examples before any step"
        r.accs.append(_accuracy(ctx, outputs, tiny.targets))
        outcome = _judge(r, known, i, ctx.overfit_steps, last)
        if outcome is not None:
            r.outcome = outcome
            break
        try:
            loss.backward()
            if i == 0 and all(p.grad is None for _, p in trainable(model)):
                return r, "no gradient reaches the trained copy's parameters from the loss"
            step(opt, closure)
        except Exception as exc:  # noqa: BLE001 - user code
            if i == 0 and isinstance(exc, KeyError) and ctx.optimizer is not None and \
                    not ctx.notes.get("capability_keep_state"):  # its step reads state its constructor made
                ctx.notes["capability_keep_state"] = True
                return _round(ctx, tiny, scale, known, last, prepare)
            return r, f"backward/step {i} raised {err(exc)}"
    r.moved = relative_change(start, [p.detach() for _, p in trainable(model)])
    return r, None


def _escalate(ctx: Ctx, tiny: Batch, known: bool) -> tuple[list[Round], str | None]:
    rounds: list[Round] = []
    for k, scale in enumerate(SCALES):
        if ctx.notes.get("capability_timed_out"):
            break
        r, error = _round(ctx, tiny, scale, known, last=k == len(SCALES) - 1)
        if error is not None:
            return rounds, error
        rounds.append(r)
        if r.outcome in ("fitted", "learning") or r.outcome == "budget" and len(r.losses) - 1 > PROBE:
            break  # fitted, or on course past its probe it kept (and spent) the whole budget
        if r.outcome == "diverged":
            if k == 0:
                for down in DOWN:
                    d, error = _round(ctx, tiny, down, known, last=True)
                    if error is not None:
                        return rounds, error
                    rounds.append(d)
                    if d.outcome != "diverged":
                        break
            elif rounds[0].outcome == "slow":  # learning but slowly: the whole budget at the largest lr that held
                again, error = _round(ctx, tiny, rounds[-2].scale, known, last=True)
                if error is not None:
                    return rounds, error
                rounds.append(again)
            break
    return rounds, None


def check_capability(ctx: Ctx) -> Check:
    tiny = _tiny(ctx)
    known = floor(ctx, tiny)
    plain = ctx.optimizer is None
    ev: dict[str, Any] = {"examples": num_examples(tiny, ctx.batch_axis), "budget": ctx.overfit_steps,
                          "optimizer": "SGD (plain, on a copy: the program has no torch.optim optimizer)" if plain
                          else type(ctx.optimizer).__name__,
                          "lr": [PLAIN_SGD_LR] if plain else [lr_of(g) for g in ctx.optimizer.param_groups],
                          "mode": "train" if ctx.model.training else "eval", "floor_known": known,
                          "criterion": (f"loss falls by {FIT:.0%} of its initial value, or 100% accuracy" if known else
                                        f"the loss falls by {LEARN:.0%} (this objective has no known floor)")}
    why = ("" if plain else untestable(ctx.optimizer)) or ("the loss reaches parameters trained outside the copy (the "
           "program's own model, reached through a global, or a second network its optimizer trains): it cannot lower them"
           if reads_own_model(ctx, tiny) else "")
    if why:
        return _skipped(f"{why}, so whether the model can fit was not checked", ev)
    t0 = time.perf_counter()
    ctx.notes["capability_deadline"] = t0 + TIME_BUDGET
    rounds, error = _escalate(ctx, tiny, known)
    if error is not None and tiny is not ctx.batch and ctx.overfit_batch is None and not any(r.losses[1:] for r in rounds):
        # the program refused a subset of its batch (a loss built for the full batch, a fixed graph): its whole batch
        ctx.report_notes.append(f"note: the program does not run on the first {ev['examples']} examples alone ({error}); "
                                "CAPABILITY overfits the whole batch")
        tiny = ctx.batch
        known = floor(ctx, tiny)
        ev.update(examples=num_examples(tiny, ctx.batch_axis), floor_known=known)
        rounds, error = _escalate(ctx, tiny, known)
    again = at_schedule(ctx, rounds, lambda: _escalate(ctx, tiny, known), ev, TIME_BUDGET) if error is None else None
    rounds, error = again or (rounds, error)  # a warmup's start: the escalation again from the scheduled lr
    ev.update(seconds=round(time.perf_counter() - t0, 4), steps=sum(max(len(r.losses) - 1, 0) for r in rounds),
              rounds=[r.summary() for r in rounds])
    if error is not None:
        return _skipped(f"could not train the copy: {error}", ev)
    if not rounds or not rounds[0].losses:
        return _skipped(f"no step fitted in the time budget ({TIME_BUDGET:g} s)", ev)
    ev["soft_target_floor"] = soft_floor(tiny.targets)  # a cross-entropy against distributions: their entropy
    verdict = _verdict(ctx, rounds, known, ev, lambda prepare: _retry(ctx, tiny, rounds, known, prepare))
    if ctx.notes.get("capability_timed_out") and verdict.finding.status is Status.FAIL:  # not every lr was tried
        ev["stopped_at_time_budget"] = TIME_BUDGET
        return warned("CAPABILITY", f"inconclusive within the time budget ({TIME_BUDGET:g} s): "
                      f"{verdict.finding.message}", ev)
    return verdict


def _skipped(message: str, ev: dict[str, Any]) -> Check:
    return skipped_link("CAPABILITY", message, ev)


def _lrs(r: Round) -> str:
    return ", ".join(g4(v) for v in r.lr)


def _what(ctx: Ctx, ev: dict[str, Any], r: Round) -> str:
    name = "plain SGD" if ctx.optimizer is None else type(ctx.optimizer).__name__
    return f"{ev['examples']} fixed examples, {name} lr {_lrs(r)}"


def _retry(ctx: Ctx, tiny: Batch, rounds: list[Round], known: bool, prepare: Any) -> tuple[str, float, float, str] | None:
    """A round on a copy ``prepare`` changed (``_cause.Retry``), at the rounds' lrs from the largest down,
    until one does not diverge (a new tensor at the largest lr can); at most three."""
    ctx.notes.pop("capability_deadline", None)  # the counterfactual's rounds, whatever the escalation spent
    out = None
    for scale in sorted({r.scale for r in rounds if r.outcome != "diverged"} or {rounds[0].scale}, reverse=True)[:3]:
        r, error = _round(ctx, tiny, scale, known, last=True, prepare=prepare)
        if error is not None or not r.losses:
            return out
        out = (r.outcome, r.losses[0], min(r.losses), _lrs(r))
        if r.outcome != "diverged":
            return out
    return out


def _verdict(ctx: Ctx, rounds: list[Round], known: bool, ev: dict[str, Any], retry: Any = None) -> Check:
    base = rounds[0]
    usable = [r for r in rounds if r.outcome != "diverged"] or rounds
    good = next((r for r in rounds if r.outcome in ("fitted", "learning")), None)
    chosen = good or max(usable, key=lambda r: r.progress)
    first = base.losses[0]
    best = min((min(v for v in r.losses if math.isfinite(v)) for r in usable if any(map(math.isfinite, r.losses))),
               default=math.nan)
    ev.update(initial_loss=first, final_loss=chosen.losses[-1], best_loss=best, fell_by=max(r.progress for r in usable),
              parameter_change=max(r.moved for r in usable), initial_accuracy=base.accs[0], final_accuracy=chosen.accs[-1],
              fitted_lr=chosen.lr if good else None)
    if good is not None:
        return _passed(ctx, ev, good, base)
    if base.outcome == "diverged" and all(r.outcome == "diverged" for r in rounds) and _scales_with_lr(rounds):
        return _diverged(ctx, ev, base)
    steps = max(len(r.losses) - 1 for r in usable)
    stuck = ev["parameter_change"] < 1e-3
    top = max(usable, key=lambda r: r.scale)
    what = _what(ctx, ev, base)
    if not stuck and steps < MIN_BUDGET:
        return warned("CAPABILITY", f"inconclusive: {steps} steps per round on {what} (up to lr {_lrs(top)}) took the loss "
                      f"{g4(first)} -> best {g4(best)} ({ev['fell_by']:.0%} down) with the weights moving (relative change "
                      f"{g4(ev['parameter_change'])}); give overfit_steps >= {MIN_BUDGET} for a verdict", ev)
    steady = max(usable, key=lambda r: r.progress)
    if steady.progress >= STEADY and steady.outcome in ("slow", "budget") and steady.recent >= STILL \
            and steady.moved >= 1e-3:
        return _learning(ctx, ev, steady)
    if ev["fell_by"] >= PROGRESS:
        return warned("CAPABILITY", f"learning but not fitted: on {what}, up to lr {_lrs(top)}, loss {g4(first)} -> best "
                      f"{g4(best)} ({ev['fell_by']:.0%} down) in {ev['steps']} steps; raise overfit_steps to see whether "
                      f"it fits", ev)
    plateaus = [r for r in usable if r.outcome in ("plateau", "slow") and r.moved >= 1e-3]
    same = len(plateaus) == len(usable) and any(r.outcome == "plateau" for r in usable) and all(
        abs(min(r.losses) - best) <= 0.05 * abs(first) for r in plateaus)
    if same and not stuck and ctx.notes.get("stochastic_objective"):  # a plateau of a noisy loss: not "cannot fit"
        return warned("CAPABILITY", f"inconclusive: the loss of this stochastic objective plateaued on {what} at every "
                      f"lr up to {_lrs(top)} ({g4(first)} -> best {g4(best)}, {ev['fell_by']:.0%} down) with the weights "
                      "moving; its noise (dropout, sampling) may be the floor, so the model was not shown unable to fit",
                      ev)
    if stuck or same:
        return cannot(ctx, ev, _what(ctx, ev, base), base.losses[0], _lrs(top), stuck, FIT, retry)
    return warned("CAPABILITY", f"inconclusive: not fitted on {what} at any lr up to {_lrs(top)} (loss {g4(first)} -> best "
                  f"{g4(best)}, {ev['fell_by']:.0%} down, in {ev['steps']} steps) and no evidence of why; raise "
                  f"overfit_steps or pass overfit_batch", ev)


def _passed(ctx: Ctx, ev: dict[str, Any], good: Round, base: Round) -> Check:
    steps = len(good.losses) - 1
    what = _what(ctx, ev, good)
    if good.outcome == "learning":
        note = (f"note: the objective has no known floor (not classification, LM or a non-negative regression loss): "
                f"CAPABILITY judged learning (loss {g4(good.losses[0])} -> {g4(min(good.losses))}, "
                f"{good.progress:.0%} down at lr {_lrs(good)}), not fitting")
        ctx.report_notes.append(note)
        return passed("CAPABILITY", f"learning on {what}: loss down {good.progress:.0%} in {steps} steps; {note}", ev)
    how = f"accuracy {good.accs[-1]:.0%}" if good.accs[-1] == 1.0 else f"loss {g4(good.losses[0])} -> {g4(good.losses[-1])}"
    msg = f"fitted {what} in {steps} steps ({how})"
    if good.scale > 1:
        note = (f"note: fitted at lr {_lrs(good)} (the program uses {_lrs(base)}): the batch is learnable; the program's "
                f"lr is small for a {ctx.overfit_steps}-step budget")
        ctx.report_notes.append(note)
        return passed("CAPABILITY", f"{msg}; {note}", ev)
    if good.scale < 1:
        return warned("CAPABILITY", f"{msg}, but the program's lr {_lrs(base)} diverges on these examples (loss "
                      f"{g4(base.losses[0])} -> {base.losses[-1]:.4g} at step {len(base.losses) - 1}): the lr is too large "
                      f"for this batch", ev)
    return passed("CAPABILITY", msg, ev)


def _learning(ctx: Ctx, ev: dict[str, Any], r: Round) -> Check:
    """A large fall still under way when the round ended: a learning batch, not a reason to look."""
    note = (f"note: learning: {r.progress:.0%} down in {len(r.losses) - 1} steps at lr {_lrs(r)} (loss {g4(r.losses[0])} -> "
            f"best {g4(min(r.losses))}, still falling), not fitted within the budget (raise overfit_steps to see it fit)")
    ctx.report_notes.append(note)
    return passed("CAPABILITY", f"learning on {_what(ctx, ev, r)}; {note}", ev)


def _scales_with_lr(rounds: list[Round]) -> bool:
    """The smallest lr moved the parameters less than the program's own (not a write of the program: an EMA codebook)."""
    return min(r.moved for r in rounds) < 0.5 * max(r.moved for r in rounds)


def _diverged(ctx: Ctx, ev: dict[str, Any], base: Round) -> Check:
    i, own = len(base.losses) - 1, ctx.notes.get("user_step_losses")
    ev.update(diverged_at_step=i, user_step_losses=own)
    if own:  # the program's own step (its clipping, its schedule) kept the loss finite: the copy's plain step is not it
        return warned("CAPABILITY", f"inconclusive: the copy's plain steps diverged at lr {_lrs(base)} and 100x below "
                      f"(loss {base.losses[-1]:.4g} at step {i}), but train_step's own calls kept the loss finite "
                      f"({' -> '.join(g4(v) for v in own)}): what the program adds to its step is missing from the copy", ev)
    return failed("CAPABILITY", "capability.cannot_overfit",
                  f"the loss became {base.losses[-1]:.4g} at step {i} while fitting {ev['examples']} examples (initial "
                  f"{g4(base.losses[0])}) at lr {_lrs(base)}, and also at lr x{DOWN[0]:g} and x{DOWN[-1]:g}", ev,
                  expected="a finite loss that falls on a tiny fixed batch",
                  observed=f"loss {base.losses[-1]:.4g} at step {i}",
                  hint="the updates diverge even at a 100x smaller lr: check for exploding gradients or a loss that is "
                       "unbounded below")


def _fit(first: float, last: float, acc: float | None) -> bool:
    if acc == 1.0 or abs(first) <= 1e-8:
        return True
    return math.isfinite(last) and (first - last) >= FIT * abs(first)

