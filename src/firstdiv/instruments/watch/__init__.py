"""Watch mode on a live run: the cheap invariants of the learning chain, every ``every`` steps of the user's own
hand-written loop, on the real model and optimizer (not a copy).

``w = watch(model, optimizer, every=50)``; call ``w.step(loss)`` once per iteration of the loop (after
``optimizer.step()``; a trainer stepping with a closure also calls ``w.gradients_ready(optimizer)`` after the
closure's backward); wrap evaluation in ``with w.evaluating():``; read ``w.report`` at any time; ``w.close()`` (or
leaving ``with watch(...) as w:``) removes every hook. The first step (index 0) and every ``every``-th after it is
a check step:

- ownership: a parameter requiring grad that no watched optimizer holds (FAIL ``ownership.unowned`` once it had a
  gradient at the check step and was unchanged at the next step; else WARN, see ``._unowned``); a parameter
  with ``requires_grad=False`` not matched by ``frozen=`` (FAIL once ``frozen`` is declared, ``frozen=()`` meaning
  nothing is frozen; WARN while undeclared); optimizer tensors that are not the model's (WARN);
- gradients, read by an optimizer step pre-hook before the step (so before ``zero_grad``, and after GradScaler's
  unscale; a step GradScaler skips is no measurement and the next step is measured instead): non-finite (FAIL
  ``grad.nonfinite``), missing on every held parameter (FAIL ``grad.none_at_step``, unless the step was given a
  closure), missing on some (WARN);
- the update of that one optimizer step, from a copy of the parameters taken in the pre-hook: ``||delta|| /
  ||weight||`` of every weight with >= 2 dims (the rule of thumb is ~1e-3): larger than 1, the update bigger than
  the weight, is FAIL ``update.too_large`` once the loss at the next step rose (WARN when it did not, or no loss was
  passed; exempt: a weight that had a zero norm at the previous check, as a zero-initialised adapter has); above ``ratio_bounds[1]`` and not shrinking at consecutive checks is a WARN (the
  warm-up of momentum does that on a correct run), below ``ratio_bounds[0]`` a WARN; a declared-frozen parameter
  that moved is FAIL; a parameter unchanged at ``stall_checks`` consecutive checks while others moved is a WARN;
- zeroing: from a check step to that optimizer's next step, a gradient hook on one of its parameters sees whether
  any arriving gradient found ``.grad`` None or zero (else FAIL ``grad.not_zeroed``: ``optimizer.zero_grad()``
  forgotten; accumulation over several batches per optimizer step is fine);
- the loss passed to ``w.step(loss)`` / ``w.observe(loss=...)``, averaged between checks: non-finite (FAIL), not
  lower than ``loss_window`` checks earlier (WARN);
- mode: modules in train mode at the first forward inside ``w.evaluating()`` (FAIL ``mode.train_at_eval``), the
  model in eval mode at a measured optimizer step (WARN: fine-tuning with frozen statistics does that on purpose).

Between check steps the cost is a counter and, with a tensor loss, one detached addition. A check that cannot
run (an exotic tensor type) is a SKIPPED finding and the user's training goes on. The report's
``first_divergence`` is the first FAIL by step (causes before consequences within one step), in the user's
parameter names and module paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Self

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report
from .._core.closure import innermost
from .._core.frozen import check_frozen, declared
from ._checks import Measurement, grad_facts, ownership, snapshot, update_sizes
from ._judge import Bounds, Judge
from ._modes import train_mode_modules
from ._unowned import Unowned

__all__ = ["Watch", "watch"]

_SIDE = ("none left after close(): while open, an optimizer step pre/post-hook (a forward pre-hook inside "
         "evaluating(), a gradient hook on one parameter from a check step to the next step) read gradients and copy "
         "parameters on check steps, under torch.no_grad()")


def watch(model: nn.Module, optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer], *, every: int = 50,
          frozen: str | Sequence[str] | None = None, ratio_bounds: tuple[float, float] = (1e-7, 1e-1),
          stall_checks: int = 3, loss_window: int = 5) -> Watch:
    """Watch the live run of ``model`` trained by ``optimizer`` (one or a list); see the module docstring."""
    if not isinstance(model, nn.Module):
        raise InvalidArgument(f"Expected `model` to be a torch.nn.Module but got {type(model).__name__}; pass the model your loop trains")
    opts = [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else list(optimizer) if isinstance(optimizer, (list, tuple)) else None
    if not opts or not all(isinstance(o, torch.optim.Optimizer) for o in opts):
        raise InvalidArgument(f"Expected `optimizer` to be a torch.optim.Optimizer (or a list of them) but got "
                              f"{type(optimizer).__name__}; pass the optimizer(s) your loop steps")
    for label, value, least in (("every", every, 1), ("stall_checks", stall_checks, 1), ("loss_window", loss_window, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidArgument(f"Expected `{label}` to be an integer >= {least} but got {value!r}")
    ok = (isinstance(ratio_bounds, (tuple, list)) and len(ratio_bounds) == 2
          and all(isinstance(b, (int, float)) and b > 0 for b in ratio_bounds) and ratio_bounds[0] < ratio_bounds[1])
    if not ok:
        raise InvalidArgument(f"Expected `ratio_bounds` to be (low, high) with 0 < low < high, e.g. (1e-7, 1e-1), but got {ratio_bounds!r}")
    patterns = None if frozen is None else check_frozen(frozen)
    frozen_ids = declared(model, patterns) if patterns else {}
    bounds = Bounds(float(ratio_bounds[0]), float(ratio_bounds[1]), stall_checks, loss_window)
    return Watch(model, opts, every, frozen_ids, patterns is not None, bounds)


class Watch:
    """The live watch returned by :func:`watch`: ``step(loss)``, ``observe(loss=)``, ``evaluating()``,
    ``report``, ``close()``; a context manager that closes on exit."""

    def __init__(self, model: nn.Module, optimizers: list[torch.optim.Optimizer], every: int,
                 frozen: dict[int, str], declared_frozen: bool, bounds: Bounds) -> None:
        self.model, self.optimizers, self.every = model, optimizers, every
        self._frozen, self._declared = frozen, declared_frozen
        self._judge = Judge(bounds, set(frozen.values()))
        self._n = 0
        self._armed = True  # the first optimizer step is measured
        self._current: Measurement | None = None
        self._stepped: set[int] = set()
        self._named: list[tuple[str, nn.Parameter]] = []
        self._losses: list[Any] = []
        self._notes: list[str] = []
        self._sentinels: dict[int, tuple[str, Any, dict[str, Any]]] = {}
        self._unowned = Unowned()
        self._iteration: list[Any] = []  # the losses observed since the last step(): read only around a measurement
        inner = list({id(i): i for i in map(innermost, optimizers)}.values())  # a framework's wrapper steps the one it wraps
        self._handles = [h for o in inner for h in (o.register_step_pre_hook(self._pre), o.register_step_post_hook(self._post))]
        self.closed = False

    # -- the loop's calls ---------------------------------------------------------------------------------------
    def step(self, loss: Any = None) -> None:
        """One iteration of the loop is done (call it after ``optimizer.step()``); ``loss`` is its loss."""
        if loss is not None:
            self.observe(loss=loss)
        idx = self._n
        self._n += 1
        self._unowned.settle(self._judge, idx)
        now = _mean(self._iteration) if self._judge.large or self._current is not None else None
        self._iteration = []
        self._judge.settle_large(idx, now)
        graded = None
        if self._current is not None:
            self._judge.measurement(idx, self._current, now)
            graded = self._current.graded
            self._current, self._armed = None, False
            self._stepped.clear()
        if idx % self.every == 0:
            self._check(idx, graded)
        if (idx + 1) % self.every == 0:
            self._armed = True

    def observe(self, *, loss: Any) -> None:
        """Record a loss without ending a step (several losses per step are averaged with the rest)."""
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise InvalidArgument(f"Expected a scalar loss but got a tensor of shape {tuple(loss.shape)}; pass loss.mean()")
            value: Any = loss.detach()  # summed at the check step: nothing is computed (or synchronised) here
        elif isinstance(loss, (int, float)) and not isinstance(loss, bool):
            value = float(loss)
        else:
            raise InvalidArgument(f"Expected the loss to be a scalar tensor or a number but got {type(loss).__name__}")
        self._losses.append(value)
        self._iteration.append(value)

    def gradients_ready(self, optimizer: torch.optim.Optimizer) -> None:
        """The gradients ``optimizer`` is about to apply are final now. For a trainer that steps with a closure
        (Lightning's automatic optimization runs forward and backward inside ``optimizer.step``, after the step
        pre-hook): call it between the closure's backward and the update, and the gradient facts of a check step
        are read here instead of in the pre-hook."""
        m = self._current
        if m is None or id(optimizer) in self._stepped or not m.before:
            return
        held = _held(optimizer)
        mine = {n for n, p in self._named if id(p) in held and p.requires_grad}
        m.missing_grad = [n for n in m.missing_grad if n not in mine]
        m.nonfinite_grad = [(n, v) for n, v in m.nonfinite_grad if n not in mine]
        m.held_trainable -= len(mine)
        m.closure = False  # the gradients were read after the backward: a missing one is missing
        m.graded.update(n for n, p in self._named if p.grad is not None)
        try:
            grad_facts(self._named, held, m)
        except Exception as exc:  # noqa: BLE001 (as in _pre)
            self._give_up(exc)

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[Self]:
        """Around evaluation code: the first forward of ``model`` inside must find it (and its dropout and
        normalization layers) in eval mode."""
        seen = [False]

        def pre(module: nn.Module, args: Any) -> None:
            if seen[0]:
                return
            seen[0] = True
            self._judge.tally("eval_mode")
            bad = train_mode_modules(module)
            if bad:
                where = bad[0] or "model"
                status = "FAIL" if bad[0] else "WARN"  # no dropout/norm layer: train mode changes nothing visible
                self._judge.add(max(self._n - 1, 0), "mode.train_at_eval", where, status,
                                f"evaluation after step {max(self._n - 1, 0)} ran with {where} in train mode "
                                f"({len(bad)} module(s) in train mode)", expected="eval mode (model.eval())",
                                observed="train mode", hint="call model.eval() before evaluating and model.train() after")

        handle = self.model.register_forward_pre_hook(pre)
        try:
            yield self
        finally:
            handle.remove()

    # -- the hooks ----------------------------------------------------------------------------------------------
    def _pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._sentinels and id(optimizer) in self._sentinels:
            self._settle_zeroing(optimizer)
        if not self._armed or id(optimizer) in self._stepped:
            return
        try:
            self._take_before(optimizer, args, kwargs)
        except Exception as exc:  # noqa: BLE001 (a check that cannot run must not stop the user's training)
            self._give_up(exc)

    def _take_before(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._current is None:
            self._current = Measurement(training=self.model.training, closure=_has_closure(args, kwargs))
            self._named = list(self.model.named_parameters())
        held = _held(optimizer)
        self._current.graded.update(n for n, p in self._named if p.grad is not None)
        grad_facts(self._named, held, self._current)
        self._current.before.update(snapshot(self._named, held, self._frozen))

    def _post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._current is None or id(optimizer) in self._stepped or not self._current.before:
            return
        self._stepped.add(id(optimizer))
        try:
            update_sizes(self._named, self._current)
            self._watch_next_backward(optimizer, _held(optimizer))
        except Exception as exc:  # noqa: BLE001 (as in _pre: a note, and training goes on)
            self._give_up(exc)

    def _watch_next_backward(self, optimizer: torch.optim.Optimizer, held: set[int]) -> None:
        """A gradient hook on one stepped parameter until this optimizer's next step: at least one gradient to
        arrive in between must find ``.grad`` None or zero, else the step's gradients were never zeroed (a GAN's
        generator backward may reach the discriminator's stale gradients, as long as they are zeroed before the
        discriminator's own backward)."""
        key = id(optimizer)
        if key in self._sentinels:
            return
        pick = next(((n, p) for n, p in self._named if id(p) in held and p.requires_grad and p.grad is not None), None)
        if pick is None:
            return
        name, p = pick
        seen = {"arrivals": 0, "zeroed": False}

        def arrived(grad: torch.Tensor) -> None:
            seen["arrivals"] += 1
            if not seen["zeroed"]:
                old = p.grad
                seen["zeroed"] = old is None or old.is_sparse or not bool(old.detach().ne(0).any())

        self._sentinels[key] = (name, p.register_hook(arrived), seen)

    def _settle_zeroing(self, optimizer: torch.optim.Optimizer) -> None:
        """At this optimizer's next step: were its gradients zeroed since the step its sentinel watched?"""
        name, handle, seen = self._sentinels.pop(id(optimizer))
        handle.remove()
        if seen["arrivals"] and not seen["zeroed"]:
            self._judge.add(self._n, "grad.not_zeroed", name, "FAIL",
                            f"the gradients of step {self._n} were added to those of the previous step: {name}.grad was "
                            "never zeroed in between", expected="grad None or zero before the first backward",
                            observed="the previous step's gradient", hint="call optimizer.zero_grad() once per optimizer step")

    def _unhook_backward(self) -> None:
        for _, handle, _ in self._sentinels.values():
            handle.remove()
        self._sentinels = {}

    def _give_up(self, exc: Exception) -> None:
        """This check step's measurement could not be taken: a note saying why, and the next step is measured."""
        note = f"step {self._n}: the gradient/update check could not run ({type(exc).__name__}: {exc})"
        if note not in self._notes:
            self._notes.append(note)
        self._current = None

    def _check(self, idx: int, graded: set[str] | None = None) -> None:
        named = list(self.model.named_parameters())
        held: set[int] = set()
        n_held = 0
        for o in self.optimizers:
            ids = _held(o)
            n_held += len(ids - held)
            held |= ids
        self._judge.tally("ownership")
        for kind, where, status, message in ownership(named, held, n_held, self._frozen, self._declared):
            self._judge.add(idx, kind, where, status, message)
        self._unowned.check(self._judge, idx, named, held, self._frozen, graded)
        if self._losses:
            mean = _mean(self._losses)
            self._losses = []
            self._judge.loss(idx, mean)

    # -- results and cleanup ------------------------------------------------------------------------------------
    @property
    def report(self) -> Report:
        """What the watch found so far: the first step at which an invariant broke, or PASS with what was checked."""
        return self._judge.report(self._n, self.every, _SIDE, list(self._notes), self._unowned.unsettled())

    def close(self) -> None:
        """Remove every hook (idempotent); the report stays readable."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._unhook_backward()
        self._current = None
        self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Watch(every={self.every}, steps={self._n}, checks={self._judge.checks}, closed={self.closed})"


def _mean(losses: list[Any]) -> float | None:
    """The mean of losses passed as numbers or scalar tensors, with one synchronisation (None when there are none)."""
    if not losses:
        return None
    tensors = [v.reshape(()).float() for v in losses if isinstance(v, torch.Tensor)]
    total = sum(v for v in losses if not isinstance(v, torch.Tensor))
    if tensors:
        total += float(torch.stack([t.to(tensors[0].device) for t in tensors]).sum())
    return total / len(losses)


def _has_closure(args: Any, kwargs: Any) -> bool:
    """Whether ``optimizer.step`` was given a closure (the hook's args start with the optimizer itself)."""
    return any(a is not None for a in args[1:]) or kwargs.get("closure") is not None


def _held(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}
