"""``step.norm_statistics_never_estimated``: a batch-norm layer that normalizes a training forward (gradients on, its
output on the graph) in eval mode while its running statistics are still the values it was built with (mean 0,
variance 1, no batch counted), or still mostly those (the few batches counted at its momentum leave the built values at
least half their weight: one train-mode forward before an evaluation whose ``eval()`` is never undone). In eval mode it divides by those, not by any statistic of the data: the layer does not
normalize at all, and nothing will ever update them (eval mode does not track). Frozen batch norm in fine-tuning is
not this: its statistics were estimated (loaded or counted) before; nor is an eval-mode pass of a module the same step
also runs in train mode (an adversarial attack under ``model.eval()`` before the training forward, TRADES's). Read from
forward hooks on the modules only while the step runs; the hooks are removed in ``finally``.

``step.trained_in_eval_mode``: on the user's own ``train_step`` (never the controlled step, which runs in whatever mode
the model was handed over), a dropout layer built to drop (``p > 0``; a custom module reading ``self.training`` with a
drop rate above 0, such as stochastic depth) ran a training forward (gradients on, its output on the graph) in eval
mode because the whole model was in eval mode: it dropped nothing while the model trained. Dropout switched off on
purpose module by module (the model itself in train mode) is not this."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Self

import torch
from torch import nn

from ...report import Status
from .._core.checks import Check, check
from .._core.modes import drop_rate, mode_dependent, set_mode
from .._core.trace import tensors


def _initial(m: nn.modules.batchnorm._BatchNorm) -> bool:
    """Running statistics that are still mostly the constructor's (mean 0, variance 1): never estimated, or estimated
    from so few batches that the constructor's values keep at least half their weight in them ((1 - momentum) ** n >=
    1/2: one to six batches at torch's momentum of 0.1; a cumulative average, ``momentum=None``, replaces them at the
    first batch)."""
    mean, var, count = m.running_mean, m.running_var, getattr(m, "num_batches_tracked", None)
    if mean is None or var is None:
        return False
    n = None if count is None else int(count)
    if n:
        return isinstance(m.momentum, float) and 0 < m.momentum < 1 and (1 - m.momentum) ** n >= 0.5
    return bool((mean == 0).all()) and bool((var == 1).all())


class NormWatch:
    """Records the batch-norm modules of ``model`` that ran a training forward in eval mode on never-estimated
    statistics."""

    def __init__(self, model: nn.Module, dropout: bool = False) -> None:
        self.model, self.dropout = model, dropout
        self.hits: dict[str, dict[str, Any]] = {}
        self.drops: dict[str, dict[str, Any]] = {}
        self.order: dict[str, int] = {}
        self.handles: list[Any] = []
        self.trained: set[str] = set()

    def __enter__(self) -> Self:
        for name, m in self.model.named_modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                self.handles.append(m.register_forward_hook(self._hook(name or type(m).__name__)))
            rate = drop_rate(m) if self.dropout else 0.0
            if rate > 0:
                self.handles.append(m.register_forward_hook(self._drop_hook(name or type(m).__name__, rate)))
        return self

    def __exit__(self, *_: object) -> None:
        for h in self.handles:
            h.remove()
        for name in self.trained:  # an adversarial attack under model.eval() before the training forward (TRADES)
            self.hits.pop(name, None)

    def _hook(self, name: str) -> Any:
        def hook(m: nn.Module, _inputs: Any, out: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if m.training:
                self.trained.add(name)  # the step trains it in train mode: an eval-mode pass beside is auxiliary
                return
            if name not in self.hits and torch.is_tensor(out) and out.requires_grad and _initial(m):
                self.hits[name] = {"module": name, "type": type(m).__name__, "training": False,
                                   "model_training": self.model.training,
                                   "num_batches_tracked": int(getattr(m, "num_batches_tracked", 0) or 0),
                                   "momentum": m.momentum}
        return hook

    def _drop_hook(self, name: str, rate: float) -> Any:
        def hook(m: nn.Module, _inputs: Any, out: Any) -> None:
            if m.training or self.model.training or name in self.drops or not torch.is_grad_enabled():
                return
            if torch.is_tensor(out) and out.requires_grad:  # recorded once a backward passes through it
                self.order.setdefault(name, len(self.order))  # forward order: the backward meets the last layer first
                out.register_hook(lambda g: self._backpropagated(name, type(m).__name__, rate, g))
        return hook

    def _backpropagated(self, name: str, kind: str, rate: float, grad: torch.Tensor) -> torch.Tensor:
        self.drops.setdefault(name, {"module": name, "type": kind, "rate": rate, "order": self.order.get(name, 0)})
        return grad


def drop_check(drops: dict[str, dict[str, Any]]) -> Check | None:
    """The FAIL for the first dropout layer that ran the user's training forward in eval mode, or None."""
    if not drops:
        return None
    ranked = sorted(drops.values(), key=lambda d: d["order"])
    first, names = ranked[0], [d["module"] for d in ranked]
    return check(first["module"], "step.trained_in_eval_mode", Status.FAIL,
                 f"{len(names)} dropout layer(s) built to drop (first: {names[0]}, {first['type']} p={first['rate']:g}) "
                 "ran train_step's training forward with the model in eval mode: they dropped nothing while the model "
                 "trained", {"modules": names[:10], "count": len(names), "rate": first["rate"]},
                 expected="training forwards in train mode (model.train())",
                 observed=f"model.training == False and {names[0]}.training == False in a forward that was backpropagated",
                 hint="call model.train() at the start of each training step (an evaluation's model.eval() stays on "
                      "until then)")


def norm_check(hits: dict[str, dict[str, Any]], where_seen: str) -> Check | None:
    """The FAIL for the first module recorded, or None."""
    if not hits:
        return None
    first, names = next(iter(hits.values())), list(hits)
    if all(h.get("model_training") for h in hits.values()):  # frozen module by module while the model trains
        return check(first["module"], "step.norm_statistics_never_estimated", Status.WARN,
                     f"{len(names)} batch-norm layer(s) frozen in eval mode while the model trains (first: {names[0]}) "
                     "hold the statistics they were built with (mean 0, variance 1, no batch counted): they normalize "
                     "nothing; if they were meant to come from pretrained weights, load those before freezing",
                     {"modules": names[:10], "count": len(names), "model_training": True})
    n = first.get("num_batches_tracked", 0)
    state = ("never estimated (mean 0, variance 1, no batch counted" if not n else
             f"still mostly the values they were built with (mean 0, variance 1: {n} batch(es) counted at momentum "
             f"{first['momentum']:g} leave them {(1 - first['momentum']) ** n:.0%} of the weight")
    effect = "normalize next to nothing" if n else "normalize nothing"
    return check(first["module"], "step.norm_statistics_never_estimated", Status.FAIL,
                 f"{len(names)} batch-norm layer(s) ran {where_seen} in eval mode with their running statistics {state}; "
                 f"first: {names[0]}): they {effect}, and eval mode never updates them: the model is trained in eval mode",
                 {"modules": names[:10], "count": len(names), "num_batches_tracked": n},
                 expected="training forwards in train mode (model.train()), or statistics estimated before freezing",
                 observed=f"{names[0]}.training == False, running_mean == 0, running_var == 1, num_batches_tracked == 0"
                 if not n else f"{names[0]}.training == False, num_batches_tracked == {n}",
                 hint="call model.train() before the training loop (and again after every evaluation that calls "
                      "model.eval())")


class ModeTrail:
    """Per call of the user's ``train_step`` (numbered by ``clock.call``), the mode in which each mode-dependent module
    (``mode_dependent(own_code=True)``) ran its training forwards (gradients on, output on the graph), and the
    inputs of its first training forward in eval mode, for the counterfactual. Hooks removed on exit."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.clock = model, SimpleNamespace(call=0)  # the clock: StepWatch, whose ``call`` is 1, 2 or 0
        self.modes: dict[int, dict[str, set[tuple[bool, bool]]]] = {}
        self.inputs: dict[str, tuple[nn.Module, tuple]] = {}
        self.order: dict[str, int] = {}
        self.handles: list[Any] = []
        self.trained: set[str] = set()

    def __enter__(self) -> Self:
        for name, m in mode_dependent(self.model, own_code=True):
            self.handles.append(m.register_forward_hook(self._hook(name or type(m).__name__)))
        return self

    def __exit__(self, *_: object) -> None:
        for h in self.handles:
            h.remove()
        for name in self.trained:  # an adversarial attack under model.eval() before the training forward (TRADES)
            self.hits.pop(name, None)

    @property
    def calls(self) -> int:
        return max(self.modes, default=0)

    def one_more(self, train_step: Callable[[], Any]) -> str | None:
        """Call ``train_step`` once more, watched as the next call; the error's text if it raised."""
        self.clock = SimpleNamespace(call=self.calls + 1)
        try:
            train_step()
        except Exception as exc:  # noqa: BLE001 - user code: nothing is confirmed by a call that raised
            return f"{type(exc).__name__}: {exc}"
        finally:
            self.clock = SimpleNamespace(call=0)
        return None

    def _hook(self, name: str) -> Any:
        def hook(m: nn.Module, inputs: Any, out: Any) -> None:
            current = self.clock.call
            if not current or not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors(out)):
                return
            self.order.setdefault(name, len(self.order))
            self.modes.setdefault(current, {}).setdefault(name, set()).add((m.training, self.model.training))
            if not m.training and name not in self.inputs and len(self.inputs) < _TRAIL_INPUTS:
                self.inputs[name] = (m, tuple(t.detach().clone() if torch.is_tensor(t) else t for t in inputs))
        return hook

    def left_in_eval(self) -> bool:
        """The last call trained some module in train mode and ended with the model in eval mode."""
        last = self.modes.get(self.calls, {})
        return not self.model.training and any((True, True) in modes for modes in last.values())

    def switched(self) -> tuple[int, int, list[str]] | None:
        """``(k, j, names)``: call k trained ``names`` in train mode only, a later call j only in eval mode with the
        model itself in eval mode; None when no call follows one in which the mode was right."""
        for k in sorted(self.modes):
            for j in (c for c in sorted(self.modes) if c > k):
                names = [n for n, modes in self.modes[j].items() if modes == {(False, False)}
                         and self.modes[k].get(n) == {(True, True)}]
                if names:
                    return k, j, sorted(names, key=lambda n: self.order[n])
        return None


_TRAIL_INPUTS = 8


def _mode_matters(m: nn.Module, inputs: tuple) -> bool:
    """The counterfactual: a copy of ``m`` run on the recorded inputs in train and in eval mode (same seed) gives
    different outputs or leaves different buffers."""
    runs = []
    for training in (True, False):
        twin = set_mode(copy.deepcopy(m), training)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            try:
                out = twin(*inputs)
            except Exception:  # noqa: BLE001 - a module that needs its call context: nothing confirmed
                return False
        runs.append([t.detach() for t in tensors(out)] + [b.detach() for b in twin.buffers()])
    return any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(*runs, strict=False))


def switch_check(trail: ModeTrail) -> Check | None:
    """The FAIL ``step.eval_mode_not_restored`` when a call of train_step trained in eval mode modules an earlier call
    trained in train mode, and the mode changes what the first of them computes (the counterfactual); else None."""
    found = trail.switched()
    if found is None:
        return None
    k, j, names = found
    confirmed = [n for n in names if n in trail.inputs and _mode_matters(*trail.inputs[n])]
    if not confirmed:
        return None
    first = confirmed[0]
    ev = {"modules": confirmed[:10], "count": len(confirmed), "trained_in_train_mode_in_call": k,
          "trained_in_eval_mode_in_call": j, "calls_watched": trail.calls}
    return check(first, "step.eval_mode_not_restored", Status.FAIL,
                 f"call {j} of train_step trained {len(confirmed)} mode-dependent module(s) (first: {first}) with the "
                 f"model in eval mode, which call {k} trained in train mode: an eval() of the program was not undone "
                 f"before training went on, and {first} computes differently in eval mode (a copy run both ways)", ev,
                 expected=f"call {j}'s training forward in train mode, as call {k}'s", observed=f"model.training == False "
                 f"and {first}.training == False in a training forward of call {j}",
                 hint="call model.train() at the start of each training step or epoch (an evaluation's model.eval() "
                      "stays on until then)")
