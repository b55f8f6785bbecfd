"""Gradients cleared at the wrong time. ``carried_check``: a step that starts from the previous step's gradient
(zero_grad missing), judged by what ``.grad`` holds when the owning optimizer steps (``GradOrigins``: another loss's
backward may reach the parameters first and find the old gradient, cleared before their own backward).
``DiscardTracker``: gradients a step computes and then throws away before ``optimizer.step`` uses them: ``zero_grad``
called between the backward passes of one step (per micro-batch instead of per update, under gradient accumulation).

Premise: the backward passes of one update are meant to add up in ``.grad`` for its ``optimizer.step``. Confirmed on
the user's own step, never assumed. The update's window opens at a zero_grad and closes at optimizer.step; the finding
needs a second zero_grad inside one window that was seen to erase gradients (``.grad`` nonzero before, None or zero
after) computed after the window opened, with no parameter changed in place since it opened (a sharpness-aware step
moves the weights between its two backward passes on purpose), outside any ``optimizer.step`` (an LBFGS closure
clears inside it), and then an optimizer.step in the same call using gradients of those parameters. A zero_grad that
opens a window may erase anything (a GAN's discriminator loss reaching the generator, the previous step's leftovers);
one that leaves the gradients in place (Accelerate's wrapper while it accumulates) erased nothing, and the gradients it
left still count as computed in the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ...report import Status
from .._core.checks import Check, Collected, check, grad_state, label, norm
from .._core.closure import innermost


@dataclass
class DiscardTracker:
    """Per call of ``train_step``: the parameters a backward reached since the last step or clearing
    (``segment``), the sets erased by a zero_grad before any step used them, and the sets each step used."""

    segment: set[int] = field(default_factory=set)
    erased: list[tuple[int, frozenset[int]]] = field(default_factory=list)
    stepped: list[tuple[int, frozenset[int]]] = field(default_factory=list)
    in_step: bool = False
    opened_at: int | None = None  # the parameters' summed version counters when the window opened; None: closed

    def reached(self, pid: int) -> None:
        if not self.in_step:
            self.segment.add(pid)

    def call_started(self) -> None:
        """Gradients an earlier call left (a GAN's generator backward reaching the discriminator after its step) are no
        micro-batch of this call's update: a zero_grad may erase them. A window an earlier call opened stays open (a
        loop that clears after every micro-batch, one micro-batch per call, erases this call's gradients in it)."""
        self.segment.clear()

    def pre_step(self, call: int) -> None:
        self.stepped.append((call, frozenset(self.segment)))
        self.segment.clear()
        self.in_step, self.opened_at = True, None

    def post_step(self) -> None:
        self.in_step = False

    def cleared(self, call: int, params: dict[int, torch.Tensor]) -> None:
        """After a zero_grad: record the parameters whose gradients it erased inside an open window."""
        if self.in_step:
            return
        versions = sum(p._version for p in params.values())
        gone = frozenset(pid for pid in self.segment if pid in params and _empty(params[pid].grad))
        if self.opened_at is not None and self.opened_at == versions and gone:
            self.erased.append((call, gone))
        self.segment -= gone  # a zero_grad that left a gradient (Accelerate's while it accumulates) erased nothing
        self.opened_at = versions

    def finding(self, names: dict[int, list[str]], events: list[str]) -> Check | None:
        """FAIL when a call erased gradients of exactly the parameters its optimizer.step then used."""
        for call, gone in self.erased:
            used = next((s & gone for c, s in self.stepped if c == call and s & gone), None)
            if used is None:
                continue
            first = next(n for pid, n in names.items() if pid in used)  # the model's first
            times = sum(c == call for c, _ in self.erased)
            return check(first[0], "step.gradient_discarded", Status.FAIL,
                         f"{label(first)}: in train_step call {call}, zero_grad erased the gradients of {len(gone)} "
                         f"parameters {times} time(s) before optimizer.step used them; the step used only the last "
                         "backward's gradient, so the micro-batches before it were computed and thrown away",
                         {"call": call, "erased_times": times, "parameters": len(gone), "events": events},
                         expected="the backward passes of one step add up in .grad until optimizer.step",
                         observed="zero_grad between backward passes of one step",
                         hint="under gradient accumulation call optimizer.zero_grad() once per update, after "
                              "optimizer.step(), not once per micro-batch")
        return None


@dataclass
class GradOrigins:
    """Which call began the sum each ``.grad`` holds, judged by the value the gradient hook reads before each
    accumulation (so a clearing the probe does not wrap, ``p.grad = None`` or another optimizer's zero_grad, counts):
    a backward that finds ``.grad`` None or zero begins a new sum in its call; one that finds it nonzero adds to the
    old. At each call-2 optimizer.step, for the parameters that optimizer owns, the earliest call whose sum it stepped
    with (``used``), and which parameters an owning optimizer stepped in call 2 at all (``stepped_by_owner``)."""

    began: dict[int, int] = field(default_factory=dict)
    used: dict[int, int] = field(default_factory=dict)
    stepped_by_owner: set[int] = field(default_factory=set)

    def reached(self, pid: int, prior: torch.Tensor | None, call: int) -> None:
        if _empty(prior):
            self.began[pid] = call
        else:
            self.began.setdefault(pid, call)  # a .grad the probe did not see begin: assumed this call's

    def stepped(self, call: int, opt: torch.optim.Optimizer, params: dict[int, torch.Tensor]) -> None:
        if call != 2:
            return
        for q in (q for g in opt.param_groups for q in g["params"] if id(q) in params):
            self.stepped_by_owner.add(id(q))
            if not _empty(q.grad):
                self.used[id(q)] = min(self.used.get(id(q), call), self.began.get(id(q), call))

    def stale_at_step(self, pid: int) -> bool:
        """Whether call 2's step of the parameter's optimizer used a sum begun in call 1 (True where no optimizer that
        owns it stepped in call 2: a manual update, whose moment is unknown, keeps the plain premise)."""
        return pid not in self.stepped_by_owner or self.used.get(pid, 2) < 2


def _empty(grad: torch.Tensor | None) -> bool:
    if grad is None:
        return True
    g = grad.coalesce().values() if grad.is_sparse else grad
    return not bool(g.detach().any())


def _moved_in(self: Any, p: torch.Tensor, call: int) -> bool:
    """Whether call ``call`` changed ``p`` (True where its values before or after were not kept)."""
    if len(self.values) <= call:
        return True
    before, after = self.values[call - 1].get(id(p)), self.values[call].get(id(p))
    return before is None or after is None or not torch.equal(before, after)


def _applied(self: Any, p: torch.Tensor) -> bool:
    """Whether call 2 changed ``p``: a gradient left in ``.grad`` of a parameter no step of that call moved (its own
    optimizer trains it in other calls of an alternating schedule, and clears it first) was not used by a step."""
    return _moved_in(self, p, 2)


def _consumed_in_call1(self: Any, p: torch.Tensor) -> bool:
    """Whether call 1 applied an update that used ``p``'s gradient: an optimizer.step of the watched optimizer ran in
    call 1 (manual updates: call 1 changed ``p``). A call that only backpropagates (one micro-batch of gradient
    accumulation across calls, stepping every k-th) leaves its gradient for the step to come, by design."""
    return any(r.call == 1 for r in self.steps) if self.opt is not None else _moved_in(self, p, 1)


def carried_check(self: Any, out: Collected) -> None:
    """Premise: each step starts from cleared gradients. Confirmed by the gradient seen in ``.grad`` when step 2's
    backward first reached a parameter (step 1's, already applied by a step of call 1, not stepped away), where call 2
    then changed the parameter."""
    held = [(p, n) for p, n in self.params if grad_state(self.prior.get((2, id(p))))[0] in ("nonzero", "nonfinite")
            and _applied(self, p) and _consumed_in_call1(self, p)]
    carried = [(p, n) for p, n in held if self.origins.stale_at_step(id(p))]
    reached = sum((2, id(p)) in self.prior for p, _ in self.params)
    if not carried:
        if held:
            note = (f"note: when call 2's first backward reached {len(held)} parameters .grad still held call 1's "
                    "gradient (another loss's backward reached them first), but it was cleared before their own "
                    "backward: each optimizer.step of call 2 used a gradient begun in call 2")
            out.checks.append(check("optimizer.zero_grad", "step.grad_accumulation", Status.PASS, note,
                                    {"reached": reached, "cleared_before_own_backward": len(held)}))
            out.details.setdefault("notes", []).append(note)
        elif reached:
            out.checks.append(check("optimizer.zero_grad", "step.grad_accumulation", Status.PASS,
                                    f"before step 2's backward .grad was None or zero for all {reached} parameters "
                                    "it reached", {"reached": reached}))
        return
    p, names = carried[0]
    prior = self.prior[(2, id(p))]
    step2 = next((r for r in self.steps if r.call == 2), None)
    ev: dict[str, Any] = {"grad_before_step2_backward_norm": grad_state(prior)[1], "carried": len(carried),
                          "reached": reached, "events": self.events}
    if step2 is not None and step2.grads[id(p)] is not None and id(p) in step2.produced:
        total, seen = prior + step2.produced[id(p)], step2.grads[id(p)]
        ev["step2_grad_vs_g1_plus_g2_relative_error"] = norm(seen - total) / max(norm(total), 1e-300)
        ev["step2_backward_grad_norm"] = norm(step2.produced[id(p)])
    fresh, after = self.call_grads.get(2, {}).get(id(p)), self.after_grads[1].get(id(p)) if len(self.after_grads) > 1 else None
    if self.opt is None and fresh is not None and after is not None and after.shape == fresh.shape:
        total = (prior + fresh).to_dense()  # a manual loop: .grad after call 2 vs its fresh gradient plus step 1's
        ev["grad_after_call2_vs_g1_plus_g2_relative_error"] = norm(after.to_dense() - total) / max(norm(total), 1e-300)
        ev["step2_backward_grad_norm"] = norm(fresh)
    out.checks.append(check(names[0], "step.grad_accumulation", Status.FAIL,
                            ("" if self.opt is not None else "gradients accumulate across steps: model.zero_grad() "
                             "missing; ") + f"{label(names)}: before step 2's backward .grad already held norm "
                            f"{ev['grad_before_step2_backward_norm']:.4g} from step 1 ({len(carried)} of {reached} "
                            "parameters); step 2 used grad1 + grad2", ev,
                            expected=".grad None or zero before each step's backward",
                            observed="step 1's gradient still in .grad",
                            hint="call optimizer.zero_grad() once per step, before loss.backward()" if self.opt is not None
                            else "gradients accumulate across steps: model.zero_grad() missing; call it before "
                                 "loss.backward()"))


RESTEP_TOLERANCE = 1e-4  # relative: .grad at the later step minus its own backward's gradient vs the earlier step's


def restep_check(self: Any, out: Collected) -> None:
    """Premise: each optimizer.step applies a gradient once. Confirmed within one call: a later step of the watched
    optimizer found in ``.grad`` exactly the gradient its earlier step of that call applied (at lr > 0), plus what the
    backward between them produced (a loop stepping twice per call, the second time without zero_grad: a dense
    re-feeding step, a second epoch over the buffer). Other optimizers' parameters (a GAN's discriminator reached by the
    generator's backward) are not judged: the earlier step did not apply their gradient."""
    owned = {id(q) for g in self.opt.param_groups for q in g["params"]} if self.opt is not None else set()
    for r1, r2 in zip(self.steps, self.steps[1:]):
        if r1.call != r2.call:
            continue
        for p, names in self.params:
            g1, g2, new = r1.grads.get(id(p)), r2.grads.get(id(p)), r2.produced.get(id(p))
            if id(p) not in owned or g1 is None or g2 is None or new is None or r1.lrs.get(id(p), 0.0) <= 0 or \
                    g1.is_sparse or g2.is_sparse or new.shape != g2.shape or not bool(g1.any()) or not bool(new.any()):
                continue
            error = norm(g2 - new - g1) / max(norm(g1), 1e-300)
            if error > RESTEP_TOLERANCE:
                continue
            ev = {"call": r1.call, "earlier_step_grad_norm": norm(g1), "backward_between_norm": norm(new),
                  "later_step_grad_vs_earlier_plus_new_relative_error": error, "events": self.events}
            out.checks.append(check(names[0], "step.grad_accumulation", Status.FAIL,
                                    f"{label(names)}: in train_step call {r1.call}, optimizer.step ran twice and the "
                                    "second found in .grad the gradient the first had already applied (norm "
                                    f"{norm(g1):.4g}) plus the new backward's: that gradient was applied twice", ev,
                                    expected=".grad cleared after each optimizer.step before the next backward",
                                    observed="step 1's gradient applied again by the next step of the same call",
                                    hint="call optimizer.zero_grad() before each backward that feeds a step, also for a "
                                         "second update inside the same iteration"))
            return


def cleared_before_step(self: Any, out: Collected) -> None:
    """``step.zero_grad_before_step``: a gradient a backward produced that .grad no longer held at the step."""
    for rec in self.steps:
        produced = [(p, n) for p, n in self.params if grad_state(rec.produced.get(id(p)))[0] == "nonzero"]
        cleared = [(p, n) for p, n in produced if grad_state(rec.grads[id(p)])[0] in ("none", "zero")]
        if not cleared:
            continue
        p, names = cleared[0]
        status = Status.FAIL if len(cleared) == len(produced) else Status.WARN
        ev = {"call": rec.call, "backward_grad_norm": grad_state(rec.produced[id(p)])[1],
              "grad_at_step": grad_state(rec.grads[id(p)])[0], "cleared": len(cleared), "produced": len(produced),
              "events": self.events}
        out.checks.append(check(names[0], "step.zero_grad_before_step", status,
                                f"{label(names)}: backward gave grad norm {ev['backward_grad_norm']:.4g} but at "
                                f"optimizer.step (call {rec.call}) .grad was {ev['grad_at_step']}; {len(cleared)} of "
                                f"{len(produced)} parameters cleared between backward and step", ev,
                                expected="optimizer.step sees the gradient backward produced",
                                observed=f".grad {ev['grad_at_step']} at optimizer.step",
                                hint="call optimizer.zero_grad() before loss.backward() (or after step), never between"))
        return
    if self.steps:
        out.checks.append(check("optimizer.step", "step.zero_grad_before_step", Status.PASS,
                                f"at each of {len(self.steps)} optimizer.step calls .grad held what backward produced"))


def step_before_backward(self: Any) -> Check | None:
    """In both calls every optimizer.step ran before the call's first backward, on a .grad that was None or zero
    for every parameter: each step applied nothing, and the gradient computed after it is cleared before the
    next one. A step placed first on purpose (applying the previous call's gradient) sees a nonzero .grad in
    call 2: no finding."""
    if self.opt is None or not self.steps:
        return None
    for call in (1, 2):
        tags = [e.split(": ", 1)[1] for e in self.events if e.startswith(f"call {call}: ")]
        if "backward" not in tags or "optimizer.step" not in tags:
            return None
        if max(i for i, t in enumerate(tags) if t == "optimizer.step") > tags.index("backward"):
            return None
    if any(grad_state(g)[0] != "none" and grad_state(g)[0] != "zero" for rec in self.steps for g in rec.grads.values()):
        return None
    return check("optimizer.step", "step.step_before_backward", Status.FAIL,
                 f"in both calls of train_step optimizer.step() ran before loss.backward(), on gradients that were "
                 f"None or zero for all {len(self.params)} trainable parameters: no step applied a gradient",
                 {"events": self.events, "optimizer_steps": len(self.steps)},
                 expected="loss.backward() before optimizer.step()", observed="optimizer.step() before backward",
                 hint="order each step as optimizer.zero_grad(); loss.backward(); optimizer.step()")


def watch_others(watch: Any, others: list[torch.optim.Optimizer], undo: list) -> list[Any]:
    """Which other optimizers the watched calls clear and step (into ``watch.cleared_others``/``stepped_others``): one
    cleared but never stepped is idle (a step forgotten); one never touched trains its parameters in other calls (an
    alternating schedule). The zero_grad wrappers are undone through ``undo``; the returned hooks are removed by the
    caller."""
    for o in others:
        had, old, orig = "zero_grad" in vars(o), vars(o).get("zero_grad"), o.zero_grad

        def cleared(*args: Any, o: Any = o, orig: Any = orig, **kwargs: Any) -> Any:
            watch.cleared_others.add(id(o))
            return orig(*args, **kwargs)
        o.zero_grad = cleared
        undo.append(lambda o=o, had=had, old=old: setattr(o, "zero_grad", old) if had else delattr(o, "zero_grad"))
    params = {id(p): p for p, _ in watch.params}
    return [h for o in others for h in (
        innermost(o).register_step_pre_hook(lambda *_, o=o: watch.stepped_others.add(id(o))),
        innermost(o).register_step_post_hook(lambda *_, o=o: watch.origins.stepped(watch.call, o, params)))]
