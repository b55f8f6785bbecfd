"""OOM by phase (chapter 31, "When the GPU runs out of memory": identify the phase).

``with memory_phases(model, optimizer) as mp:`` around training or evaluation code tracks which phase the
program is in and the memory at every phase boundary:

- ``forward`` / ``evaluation``: forward pre/post hooks on ``model`` (evaluation = a forward pass with
  ``model.training`` False or gradients disabled); the phase lasts until the next phase starts, so the loss
  computed from the outputs counts as forward;
- ``backward``: a TorchFunctionMode that sees ``Tensor.backward`` / ``torch.autograd.backward`` /
  ``torch.autograd.grad`` calls (the whole backward pass, the loss's own backward included);
- ``first_optimizer_step`` / ``optimizer_step``: step pre/post hooks on ``optimizer`` (on every optimizer when
  none is given); the first step is the one that finds no optimizer state yet and allocates it;
- ``loading``, ``export`` or any other name: ``with mp.phase("loading"):``. An explicit phase names everything
  inside it, including forward passes that ``torch.export`` runs.

Memory: CUDA allocated / reserved / peak allocated since the previous boundary when ``model`` lives on CUDA (or
CUDA is in use), else the bytes of live tensors created inside the context (a storage-counting
TorchDispatchMode, :class:`~firstdiv.instruments._core.memory.LiveTensors`) and the process RSS. ``cap_bytes`` caps
those live bytes: an operator that would exceed it raises ``torch.OutOfMemoryError`` -- the injected
allocation failure that makes OOM-by-phase testable on CPU.

When memory runs out (the cap, or a real ``torch.OutOfMemoryError``) the phase, the memory at each boundary so
far and chapter 31's advice for that phase go into ``mp.report`` (kind ``memory.oom``, where = the phase) and the
error is re-raised unless ``suppress=True``. Without an OOM the report PASSes with the per-phase table, or WARNs
(``memory.growth`` where ``"step"``) when memory at the start of each training forward pass rose at every one of
at least three steps after the first (the retained-graph check). Hooks and modes are removed on exit, also
when the body raises.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core import batch as _batch
from .._core.checks import Check, check, compose
from .._core.closure import innermost
from .._core.memory import LiveTensors, cuda_memory, fmt_bytes, is_oom, rss
from .._core.user_hooks import reports_user_hooks
from ._advice import ADVICE, RETAINED, advice

__all__ = ["ADVICE", "MemoryPhases", "advice", "memory_phases"]

_NAME = "memory_phases"
_BEFORE = "before_first_phase"


@reports_user_hooks
def memory_phases(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
                  cap_bytes: int | None = None, suppress: bool = False) -> MemoryPhases:
    """A context manager (also usable as a decorator) that names the phase in which memory runs out.

    ``cap_bytes``: refuse (``torch.OutOfMemoryError``) any operator that would bring the bytes of live tensors
    created inside the block above this many bytes. ``suppress``: swallow the OOM after recording it.
    Read ``mp.report`` after the block."""
    if model is not None:
        _batch.check_model(model)
    if optimizer is not None:
        _batch.check_optimizer(optimizer)
    if cap_bytes is not None and (isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int) or cap_bytes <= 0):
        raise InvalidArgument(f"Expected `cap_bytes` to be a positive integer number of bytes but got {cap_bytes!r}")
    if not isinstance(suppress, bool):
        raise InvalidArgument(f"Expected `suppress` to be True or False but got {suppress!r}")
    return MemoryPhases(model, optimizer, cap_bytes, suppress)


class _Backward(TorchFunctionMode):
    """Marks the backward phase around the calls that run the autograd engine."""

    def __init__(self, owner: MemoryPhases) -> None:
        super().__init__()
        self.owner = owner
        self.targets = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func not in self.targets:
            return func(*args, **(kwargs or {}))
        with self.owner._hook_phase("backward"):
            return func(*args, **(kwargs or {}))


class MemoryPhases(contextlib.ContextDecorator):
    """The context manager :func:`memory_phases` returns; see the module docstring."""

    def __init__(self, model: nn.Module | None, optimizer: torch.optim.Optimizer | None, cap_bytes: int | None,
                 suppress: bool) -> None:
        self.model, self.optimizer, self.cap_bytes, self.suppress = model, optimizer, cap_bytes, suppress
        self._active = False
        self._report: Report | None = None
        self._stepped: weakref.WeakSet = weakref.WeakSet()  # optimizers seen stepping, across uses of this object
        self._reset()

    def _reset(self) -> None:
        self._explicit: list[str] = []
        self._current = _BEFORE
        self._boundaries: list[dict[str, Any]] = []
        self._oom: dict[str, Any] | None = None
        self._forward_starts: list[int] = []
        self._handles: list[Any] = []
        self._modes: list[Any] = []
        self._tracker_used = False
        self._device = self._pick_device()

    def _pick_device(self) -> torch.device | None:
        """The CUDA device whose allocator is measured, or None for live-tensor counting."""
        if self.model is not None:
            found = next((t.device for t in (*self.model.parameters(), *self.model.buffers())), None)
            if found is not None:
                return found if found.type == "cuda" else None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.device("cuda", torch.cuda.current_device())
        return None

    # --- phases ---------------------------------------------------------------------------------------------------

    @property
    def current_phase(self) -> str:
        return self._explicit[-1] if self._explicit else self._current

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """``with mp.phase("loading"):`` -- name the code inside (loading, export, or any phase hooks cannot see)."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"Expected `name` to be a non-empty phase name such as 'loading' or 'export' but got {name!r}")
        if not self._active:
            raise InvalidArgument(f"Expected mp.phase({name!r}) inside the `with memory_phases(...) as mp:` block but the "
                                  "block is not active")
        self._explicit.append(name)
        self._boundary(f"{name} start")
        try:
            yield
        except BaseException as exc:
            self._note(exc)
            raise
        finally:
            self._boundary(f"{name} end")
            self._explicit.pop()

    @contextlib.contextmanager
    def _hook_phase(self, name: str) -> Iterator[None]:
        self._enter_phase(name)
        try:
            yield
        except BaseException as exc:
            self._note(exc)
            raise
        self._boundary(f"{name} end")

    def _enter_phase(self, name: str) -> None:
        if not self._explicit:  # inside an explicit phase, hooks record boundaries but the explicit name holds
            self._current = name
        self._boundary(f"{name} start")

    def _forward_pre(self, module: nn.Module, args: Any) -> None:
        training = module.training and torch.is_grad_enabled()
        self._enter_phase("forward" if training else "evaluation")
        if training and not self._explicit:
            self._forward_starts.append(self._boundaries[-1]["bytes"])

    def _forward_post(self, module: nn.Module, args: Any, output: Any) -> None:
        self._boundary(f"{'forward' if module.training and torch.is_grad_enabled() else 'evaluation'} end")

    def _step_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        fresh = optimizer not in self._stepped and not any(
            optimizer.state.get(p) for g in optimizer.param_groups for p in g["params"])
        self._stepped.add(optimizer)
        self._enter_phase("first_optimizer_step" if fresh else "optimizer_step")

    def _step_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._boundary(f"{self._current} end")

    # --- memory ---------------------------------------------------------------------------------------------------

    def _boundary(self, event: str) -> None:
        row: dict[str, Any] = {"index": len(self._boundaries), "event": event, "phase": self.current_phase}
        if self._device is not None:
            row.update(cuda_memory(self._device))
            row["bytes"] = row["allocated"]
            torch.cuda.reset_peak_memory_stats(self._device)  # so the next row's peaks are this phase's
        tracker = self._tracker()
        if tracker is not None:
            row["live_bytes"] = tracker.live_bytes()
            row.setdefault("bytes", row["live_bytes"])
        row["rss"] = rss()[0]
        self._boundaries.append(row)

    def _tracker(self) -> LiveTensors | None:
        return next((m for m in self._modes if isinstance(m, LiveTensors)), None)

    def _note(self, exc: BaseException | None) -> None:
        """Record the first OOM with the phase it happened in (before unwinding leaves that phase)."""
        if self._oom is not None or not is_oom(exc):
            return
        tracker = self._tracker()
        failure = dict(tracker.failure) if tracker is not None and tracker.failure else {}
        failure.pop("message", None)
        self._oom = {"phase": failure.get("phase") or self.current_phase, "error": _batch.describe_error(exc),
                     "boundaries_before": len(self._boundaries), **failure}
        if self._device is not None:
            self._oom.update({f"cuda_{k}": v for k, v in cuda_memory(self._device).items()})

    def _note_caught(self) -> None:
        """An injected failure the user's code caught inside the block still happened: record it."""
        tracker = self._tracker()
        if self._oom is not None or tracker is None or not tracker.failure:
            return
        failure = dict(tracker.failure)
        message = failure.pop("message")
        self._oom = {"error": f"OutOfMemoryError: {message} (caught inside the block)", "boundaries_before": None,
                     **failure}

    # --- context --------------------------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._active:
            raise InvalidArgument("Expected memory_phases to be entered once at a time but it is already active; "
                                  "use one `with` block (or a new memory_phases(...)) per region")
        self._reset()
        self._report = None
        self._active = True
        try:
            self._install()
            self._boundary("enter")
        except BaseException:
            self._uninstall()
            self._active = False
            raise
        return self

    def _install(self) -> None:
        if self._device is None or self.cap_bytes is not None:
            mode = LiveTensors(self.cap_bytes, label=lambda: self.current_phase)
            mode.__enter__()
            self._modes.append(mode)
            self._tracker_used = True
        fmode = _Backward(self)
        fmode.__enter__()
        self._modes.append(fmode)
        if self.model is not None:
            self._handles += [self.model.register_forward_pre_hook(self._forward_pre),
                              self.model.register_forward_hook(self._forward_post)]
        if self.optimizer is not None:
            inner = innermost(self.optimizer)  # a framework's wrapper steps the one it wraps
            self._handles += [inner.register_step_pre_hook(self._step_pre), inner.register_step_post_hook(self._step_post)]
        else:
            self._handles += [register_optimizer_step_pre_hook(self._step_pre),
                              register_optimizer_step_post_hook(self._step_post)]

    def _uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
            if isinstance(mode, LiveTensors):
                mode.clear()
        self._modes.clear()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            self._note(exc)
            self._note_caught()
            self._boundary("exit")
        finally:
            self._uninstall()
            self._active = False
        self._report = _compose(self)
        return bool(self.suppress and is_oom(exc))

    @property
    def report(self) -> Report:
        """The report of the last completed ``with`` block (FAIL ``memory.oom`` where = phase when memory ran out)."""
        if self._report is None:
            raise InvalidArgument("Expected mp.report to be read after the `with memory_phases(...)` block has exited "
                                  "but the block has not finished yet")
        return self._report


# --- the report ---------------------------------------------------------------------------------------------------

def _table(boundaries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per phase, in order of first appearance: how often it started, bytes at its first start and last end, and
    the largest rise from a start to the next boundary."""
    table: dict[str, dict[str, Any]] = {}
    for row, nxt in zip(boundaries, boundaries[1:] + [None]):
        name = row["phase"]
        if name == _BEFORE:  # code before the first phase started: no start boundary to measure from
            continue
        entry = table.setdefault(name, {"starts": 0, "bytes_at_first_start": row["bytes"], "bytes_at_last_end": None,
                                        "max_rise": 0})
        if row["event"] == f"{name} start":
            entry["starts"] += 1
            if nxt is not None:
                entry["max_rise"] = max(entry["max_rise"], nxt["bytes"] - row["bytes"])
        if row["event"] == f"{name} end":
            entry["bytes_at_last_end"] = row["bytes"]
        if "peak_allocated" in row and nxt is not None:
            entry["peak_allocated"] = max(entry.get("peak_allocated", 0), nxt["peak_allocated"])
    return table


def _phase_checks(table: dict[str, dict[str, Any]], measure: str) -> list[Check]:
    return [check(name, "memory.phase", Status.PASS,
                  f"{name}: {row['starts']} start(s), {measure} {fmt_bytes(row['bytes_at_first_start'])} at the first "
                  f"start, largest rise within the phase {fmt_bytes(row['max_rise'])}", row)
            for name, row in table.items()]


def _growth_check(starts: list[int], measure: str) -> Check | None:
    later = starts[1:]  # the first step allocates gradients and optimizer state; identical steps follow
    steps = [b - a for a, b in itertools.pairwise(later)]
    if len(steps) < 3:
        return None
    ev = {"bytes_at_forward_start": later, "increments": steps}
    if all(d > 0 for d in steps):
        return check("step", "memory.growth", Status.WARN,
                     f"{measure} at the start of each training forward pass rose at every one of {len(steps)} steps "
                     f"(+{fmt_bytes(sum(steps) / len(steps))}/step): {RETAINED}", ev)
    return check("step", "memory.growth", Status.PASS,
                 f"{measure} at the start of training forward passes did not rise at every step (increments {steps})", ev)


def _oom_check(oom: dict[str, Any]) -> Check:
    phase, tip = oom["phase"], advice(oom["phase"])
    ev = {k: v for k, v in oom.items() if k != "error"}
    ev.update(tip)
    return check(phase, "memory.oom", Status.FAIL,
                 f"out of memory during {phase}: {oom['error']}. Usually {tip['cause']}. Measure first: "
                 f"{tip['measure_first']}. Then: {tip['fix']}", ev,
                 expected=f"{phase} fits in memory", observed=oom["error"], hint=f"{tip['fix']}; {RETAINED}")


def _compose(mp: MemoryPhases) -> Report:
    cuda = mp._device is not None
    measure = "CUDA allocated" if cuda else "live tensor bytes"
    table = _table(mp._boundaries)
    checks = _phase_checks(table, measure)
    growth = _growth_check(mp._forward_starts, measure)
    if growth is not None:
        checks.append(growth)
    if mp._oom is not None:
        checks.append(_oom_check(mp._oom))
    details = {"measure": f"{measure} ({mp._device})" if cuda else
               "bytes of live tensors created inside the context (storage-counting TorchDispatchMode) and process RSS",
               "cap_bytes": mp.cap_bytes, "boundaries": mp._boundaries, "phases": table, "oom": mp._oom}
    if mp._oom is not None:
        details["advice"] = advice(mp._oom["phase"])
    effects = ["forward hooks, optimizer step hooks and a TorchFunctionMode were active inside the block only"]
    if mp._tracker_used:
        effects.append("a TorchDispatchMode counted tensor bytes inside the block (every operator ran through it)")
    if cuda:
        effects.append("CUDA peak memory statistics reset at every phase boundary (torch.cuda.reset_peak_memory_stats)")
    return compose(_NAME, checks, "; ".join(effects), details)
