"""Judging the check steps' measurements over time, and the report: the first step at which an invariant broke."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...report import Divergence, Finding, Report, Status
from ._checks import Event, Measurement

__all__ = ["Bounds", "Judge"]

#: causes before consequences within one step: a parameter nobody trains explains a stalled one, a non-finite
#: gradient explains an exploding update
_RANK = ("ownership.unowned", "ownership.undeclared_frozen", "frozen.moved", "loss.nonfinite", "grad.nonfinite",
         "grad.none_at_step",
         "grad.not_zeroed", "update.too_large", "mode.train_at_eval", "mode.eval_at_train", "param.stalled", "update.large", "grad.missing",
         "update.too_small", "loss.not_decreasing", "ownership.foreign")


#: update.too_large FAILs when the loss at the next step rose by more than this fraction of the measured step's loss
LARGE_RISE = 0.05


@dataclass(frozen=True)
class Bounds:
    low: float
    high: float
    stall_checks: int
    loss_window: int


@dataclass
class Judge:
    bounds: Bounds
    frozen_names: set[str]
    events: list[Event] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)
    checks: int = 0
    unmoved: dict[str, int] = field(default_factory=dict)
    losses: list[tuple[int, float]] = field(default_factory=list)
    max_ratio: list[tuple[int, str, float]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    #: parameter -> the check step since which its update ratio has been above the high bound
    high_since: dict[str, int] = field(default_factory=dict)
    prev_ratio: dict[str, float] = field(default_factory=dict)
    #: weights (>= 2 dims) whose norm was zero at the last check
    zero_norm: set[str] = field(default_factory=set)
    #: update.too_large waiting for the next step's loss: name -> (step, ratio, the loss of that step's iteration)
    large: dict[str, tuple[int, float, float | None]] = field(default_factory=dict)

    def add(self, step: int, kind: str, where: str, status: str, message: str, **extra: Any) -> None:
        """Record an event once per (kind, where): the first step it was seen is the one that matters."""
        if (kind, where) in self.seen:
            return
        self.seen.add((kind, where))
        self.events.append(Event(step, kind, where, status, message, **extra))

    def tally(self, check: str) -> None:
        self.counts[check] = self.counts.get(check, 0) + 1

    def measurement(self, step: int, m: Measurement, loss: float | None = None) -> None:
        self.checks += 1
        for check in ("grads", "updates", "mode"):
            self.tally(check)
        for name, norm in m.nonfinite_grad:
            self.add(step, "grad.nonfinite", name, "FAIL", f"the gradient of {name} is not finite (norm {norm})",
                     expected="finite gradient", observed=norm,
                     hint="look for log(0), division by zero or an overflow in the loss")
        if m.missing_grad and len(m.missing_grad) == m.held_trainable and not m.closure:
            self.add(step, "grad.none_at_step", "optimizer", "FAIL",
                     f"the optimizer stepped with no gradient on any of its {m.held_trainable} trainable parameters",
                     expected="gradients from backward()", observed="every .grad None",
                     hint="zero_grad() between backward() and step(), or step() before backward()")
            return
        for name in m.missing_grad:
            self.add(step, "grad.missing", name, "WARN",
                     f"{name} is held by the optimizer but had no gradient at the optimizer step (unused this step?)")
        if not m.training:
            self.add(step, "mode.eval_at_train", "model", "WARN",
                     "the model was in eval mode at an optimizer step (dropout and batch-norm statistics are off)",
                     expected="model.training == True", observed=False)
        self._ratios(step, m, loss)
        self._stalls(step, m)

    def _ratios(self, step: int, m: Measurement, loss: float | None) -> None:
        b = self.bounds
        for name, moved in m.moved.items():
            if name in self.frozen_names and moved:
                self.add(step, "frozen.moved", name, "FAIL", f"{name} is declared frozen but this step moved it",
                         expected="unchanged", observed="changed",
                         hint="remove it from the optimizer or set requires_grad=False")
        if not m.ratio:
            return
        name, top = max(m.ratio.items(), key=lambda kv: kv[1])
        self.max_ratio.append((step, name, top))
        fresh, self.zero_norm = self.zero_norm, {n for n in m.moved if n in m.dims2 and n not in m.ratio}
        for name, r in m.ratio.items():
            if name in self.frozen_names:
                continue
            prev = self.prev_ratio.get(name)
            self.prev_ratio[name] = r
            if r <= b.high:
                self.high_since.pop(name, None)
                if 0 < r < b.low:
                    self.add(step, "update.too_small", name, "WARN",
                             f"one step changed {name} by {r:.3g} of its norm (bound {b.low:g}): it barely learns",
                             expected=f">= {b.low:g}", observed=r)
                continue
            first = self.high_since.setdefault(name, step)
            # larger than the weight itself, except on a weight created from zeros at the previous check (a
            # zero-initialised adapter's first steps are as large as the weight they create)
            if r > 1 and name not in fresh and (prev is not None or self.checks == 1):
                if ("update.too_large", name) not in self.seen:  # judged at the next step, from the loss it left
                    self.large.setdefault(name, (step, r, loss))
            elif prev is not None and prev > b.high and r >= prev:  # momentum's warm-up also does this: a warning
                self.add(step, "update.large", name, "WARN",
                         f"one step changed {name} by {r:.3g} of its norm, above {b.high:g} since step {first} and "
                         "not shrinking (rule of thumb ~1e-3)", expected=f"<= {b.high:g}", observed=r)

    def settle_large(self, idx: int, after: float | None) -> None:
        """The premise of update.too_large, confirmed at the step after the one measured: the update larger than the
        weight hurt the loss (``after``, this iteration's loss, is non-finite or above the measured iteration's by
        more than ``LARGE_RISE`` of it). A loss that did not rise is a WARN (a weight initialised small under Adam
        has such a first step); without losses passed to the watch, a WARN saying so."""
        for name, (k, r, before) in list(self.large.items()):
            if k >= idx:
                continue
            del self.large[name]
            size = f"one step changed {name} by {r:.3g} of its norm (the update is larger than the weight)"
            if before is None or after is None:
                self.add(k, "update.too_large", name, "WARN", f"{size}; whether it hurt the loss is not confirmed: "
                         "no loss was passed to w.step(loss) / w.observe(loss=) at that step and the next")
            elif not math.isfinite(after) or after - before > LARGE_RISE * max(abs(before), 1e-12):
                self.add(k, "update.too_large", name, "FAIL", f"{size}, and the loss went {before:.4g} -> {after:.4g} "
                         "at the next step (rule of thumb ~1e-3)", expected="<= 1", observed=r,
                         hint="a learning rate far too high, or gradients accumulating without optimizer.zero_grad()")
            else:
                self.add(k, "update.too_large", name, "WARN", f"{size}, but the loss did not rise at the next step "
                         f"({before:.4g} -> {after:.4g}): a weight initialised small takes such steps under Adam")

    def unsettled(self) -> list[Event]:
        return [Event(k, "update.too_large", name, "WARN", f"one step changed {name} by {r:.3g} of its norm; whether it "
                      "hurt the loss shows at the next step, not reached yet") for name, (k, r, _) in self.large.items()]

    def _stalls(self, step: int, m: Measurement) -> None:
        if not any(m.moved.values()):
            return  # nothing moved (a warm-up from lr=0, a skipped step): no parameter stalled relative to others
        for name, moved in m.moved.items():
            if name in self.frozen_names:
                continue
            self.unmoved[name] = 0 if moved else self.unmoved.get(name, 0) + 1
            if self.unmoved[name] >= self.bounds.stall_checks:
                self.add(step, "param.stalled", name, "WARN",
                         f"{name} did not change at the last {self.unmoved[name]} checks while other parameters moved",
                         expected="changes", observed="unchanged")

    def loss(self, step: int, value: float) -> None:
        self.tally("loss")
        if not math.isfinite(value):
            self.add(step, "loss.nonfinite", "loss", "FAIL", f"the mean loss since the last check is {value}",
                     expected="finite", observed=value, hint="look for log(0), division by zero or an overflow")
            return
        self.losses.append((step, value))
        w = self.bounds.loss_window
        if w and len(self.losses) > w:
            first, last = self.losses[-w - 1][1], self.losses[-1][1]
            if last >= first:
                self.add(step, "loss.not_decreasing", "loss", "WARN",
                         f"the mean loss did not decrease over the last {w} checks ({first:.4g} -> {last:.4g})",
                         expected=f"< {first:.6g}", observed=last)

    def report(self, steps: int, every: int, side_effects: str, notes: list[str], pending: list[Event] = ()) -> Report:
        ordered = sorted([*self.events, *pending, *self.unsettled()], key=lambda e: (e.step, _RANK.index(e.kind) if e.kind in _RANK else 99))
        fails = [e for e in ordered if e.status == "FAIL"]
        findings = [Finding(e.where, e.kind, Status(e.status), e.message,
                            {"step": e.step, "observed": e.observed, "expected": e.expected}) for e in ordered]
        findings += [Finding("run", "not_checked", Status.SKIPPED, note) for note in notes]
        for check, n in sorted(self.counts.items()):
            findings.append(Finding("run", check, Status.PASS, f"{check} checked {n} time(s)", {"checks": n}))
        details = {"steps": steps, "every": every, "checks": self.checks, "notes": notes,
                   "loss": [list(x) for x in self.losses[-50:]],
                   "max_update_ratio": [list(x) for x in self.max_ratio[-50:]],
                   "bounds": {"low": self.bounds.low, "high": self.bounds.high}}
        if not self.checks and not self.counts and not ordered:
            return Report("watch", Status.SKIPPED, findings=tuple(findings), side_effects=side_effects,
                          reason=f"no check step was reached: {steps} step(s) with every={every} (and no optimizer "
                                 "step measured); run longer or pass a smaller every=", details=details)
        if fails:
            e = fails[0]
            div = Divergence(f"step {e.step}: {e.where}", e.kind, e.expected, e.observed, e.hint)
            return Report("watch", Status.FAIL, div, tuple(findings), side_effects, details=details)
        status = Status.WARN if ordered else Status.PASS
        return Report("watch", status, None, tuple(findings), side_effects, details=details)
