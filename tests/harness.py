"""The leave-no-trace harness: every instrument, on every program of the fault catalog, must leave
the user's objects exactly as it found them (DESIGN.md), also when the user's code raises half-way.

Instruments join by adding one entry to ``CALLS``: the evidence it needs (Program attributes) and
how to call it with them. A program without that evidence is not a case for that instrument.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import firstdiv
from firstdiv.instruments._core.state import Snapshot

_TRAINING = ("model", "batch", "loss_fn", "optimizer")


@dataclasses.dataclass(frozen=True)
class Call:
    needs: tuple[str, ...]
    run: Callable[[Any], Any]

    def applies(self, program: Any) -> bool:
        """Whether the program has the evidence this instrument needs."""
        return all(getattr(program, key, None) is not None for key in self.needs)

    def __call__(self, program: Any) -> Any:
        return self.run(program)


def _attention(p: Any) -> Any:
    module, inputs, options = p.attention
    return firstdiv.attention_check(module, inputs, **options)


#: instrument name -> how to call it on a zoo Program (the evidence a user would have at hand)
CALLS: dict[str, Call] = {
    "step_probe": Call(_TRAINING, lambda p: firstdiv.step_probe(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                 train_step=p.train_step)),
    "reachability": Call(_TRAINING, lambda p: firstdiv.reachability(p.model, p.batch, p.loss_fn)),
    "four_structures": Call(_TRAINING, lambda p: firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn)),
    "six_claims": Call(_TRAINING, lambda p: firstdiv.six_claims(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                 eval_fn=p.eval_fn, train_step=p.train_step)),
    "learning_ledger": Call(_TRAINING, lambda p: firstdiv.learning_ledger(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                           task_probe=p.task_probe, overfit_steps=60,
                                                                           train_step=p.train_step)),
    "evidence_packet": Call(("model",), lambda p: firstdiv.evidence_packet(**p.evidence())),
    "tensor_trace": Call(("model", "inputs"), lambda p: firstdiv.tensor_trace(p.model, p.inputs, contracts=p.contracts)),
    "shape_ledger": Call(("model", "inputs"), lambda p: firstdiv.shape_ledger(p.model, p.inputs)),
    "feature_space": Call(("features",), lambda p: firstdiv.feature_space(p.features, axis=-1)),
    "attention_check": Call(("attention",), _attention),
    "stage_trace": Call(("sample", "stages"), lambda p: firstdiv.stage_trace(
        p.sample, p.stages, probes=p.stage_probes, contracts=p.stage_contracts)),
    "loader_timing": Call(("loader_case",), lambda p: firstdiv.loader_timing(p.loader_case[0], step=p.loader_case[1],
                                                                           **p.loader_case[2])),
    "performance_ledger": Call(("perf_case",), lambda p: firstdiv.performance_ledger(*p.perf_case[:2], **p.perf_case[2])),
    "compile_ledger": Call(("compile_case",), lambda p: firstdiv.compile_ledger(*p.compile_case[:2], **p.compile_case[2])),
    "compare_outputs": Call(("variants_case",), lambda p: firstdiv.compare_outputs(*p.variants_case[:2],
                                                                                  **p.variants_case[2])),
}
#: registered instruments the battery does not call, and why
NOT_IN_BATTERY = {
    "tensor_facts": "reads the evidence packet's report only: it never sees a user object",
    "DiagnosticSet": "check() needs a set that create() stored by running the model first, so a battery call would "
                     "measure both; test_diagnostic_set.py checks check() leaves the model as it was",
    "memory_phases": "observes the user's own training step, whose updates are the user's to make; "
                     "test_memory_phases.py's test_no_trace_on_the_users_objects checks a forward-only block",
}


def tier_holds(tier: str, side_effects: str) -> bool:
    """Whether a report's ``side_effects`` stays within what the registry's tier for its instrument promises
    ("none" always does: a run that stopped early, or a copy-only run that says so after "none:")."""
    text = side_effects.lower()
    return text.startswith("none") or {"reads": False, "copies": "cop" in text, "restores": "restored" in text}[tier]


class Injected(RuntimeError):
    """The failure the harness injects into user code."""


def _tensors(value: Any) -> Iterator[Any]:
    if isinstance(value, (torch.Tensor, nn.Module, torch.optim.Optimizer)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def watched(program: Any) -> list[Any]:
    """The user's objects: model, optimizer, and every tensor or module handed to an instrument (a
    snapshot of a model also covers what it holds outside PyTorch's registry)."""
    fields = ("model", "optimizer", "batch", "inputs", "features", "attention", "sample")
    return list(_tensors([getattr(program, f, None) for f in fields]))


def raising_after(fn: Callable[..., Any], calls: int) -> Callable[..., Any]:
    """``fn`` that raises :class:`Injected` on its ``calls``-th call (counting from 1)."""
    count = 0

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        if count >= calls:
            raise Injected(f"injected failure on call {count}")
        return fn(*args, **kwargs)

    return wrapped


@contextmanager
def failing(program: Any, calls: int) -> Iterator[Any]:
    """The program with its user code failing on the ``calls``-th call: loss_fn, train_step (and the
    step inside the loader and performance cases), each stage,
    and the forward of the model and of the attention module (a pre-hook, installed before the
    snapshot and removed after it)."""
    changes: dict[str, Any] = {}
    for key in ("loss_fn", "train_step"):
        if getattr(program, key, None) is not None:
            changes[key] = raising_after(getattr(program, key), calls)
    if getattr(program, "loader_case", None) is not None:
        loader, step, options = program.loader_case
        changes["loader_case"] = (loader, raising_after(step, calls), options)
    if getattr(program, "perf_case", None) is not None:
        step, batch, options = program.perf_case
        changes["perf_case"] = (raising_after(step, calls), batch, options)
    if getattr(program, "stages", None) is not None:
        changes["stages"] = [(name, raising_after(fn, calls)) for name, fn in program.stages]
    attention = getattr(program, "attention", None) or (None,)
    modules = [m for m in (program.model, attention[0]) if isinstance(m, nn.Module)]
    handles = [m.register_forward_pre_hook(_raising_hook(calls)) for m in modules]
    try:
        yield dataclasses.replace(program, **changes)
    finally:
        for handle in handles:
            handle.remove()


def _raising_hook(calls: int) -> Callable[..., None]:
    hook = raising_after(lambda *args: None, calls)
    return lambda module, args: hook()


def _tensor_entry(t: torch.Tensor) -> tuple[Any, ...]:
    """Identity and version counter of a tensor and of its ``.grad``: code holding ``p.grad`` (DDP bucket
    views, accumulation buffers) and pending autograd graphs (saved tensors check the version) rely on both."""
    grad = t.grad if t.is_leaf else None
    return (id(t), t._version, None if grad is None else (id(grad), grad._version))


def _plain(value: Any) -> Any:
    return ("tensor", id(value), value._version) if torch.is_tensor(value) else copy.deepcopy(value)


def _optimizer_entries(key: str, opt: torch.optim.Optimizer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g, group in enumerate(opt.param_groups):
        out[f"{key} group {g}"] = {k: ([_tensor_entry(p) for p in v] if k == "params" else _plain(v))
                                   for k, v in group.items()}
    for p, state in opt.state.items():
        out[f"{key} state of tensor {id(p)}"] = {k: _plain(v) for k, v in state.items()}
    return out


def _scheduler_types() -> tuple[type, ...]:
    from torch.optim import lr_scheduler

    return tuple(t for t in (getattr(lr_scheduler, "LRScheduler", None), lr_scheduler.ReduceLROnPlateau) if t)


def independent_trace(objects: list[Any]) -> dict[str, Any]:
    """What user code may hold on to, recorded without firstdiv's own Snapshot: identities and version
    counters of every parameter, buffer and ``.grad``, optimizer state tensors' identities, param groups,
    LR schedulers' and GradScalers' ``state_dict()`` (and ``get_scale()``), and Python's random state."""
    out: dict[str, Any] = {"python random.getstate()": random.getstate()}
    for i, obj in enumerate(objects):
        key = f"{type(obj).__name__}[{i}]"
        if isinstance(obj, nn.Module):
            out.update({f"{key} parameter {n}": _tensor_entry(t) for n, t in obj.named_parameters(remove_duplicate=False)})
            out.update({f"{key} buffer {n}": _tensor_entry(t) for n, t in obj.named_buffers(remove_duplicate=False)
                        if t is not None})
        elif isinstance(obj, torch.optim.Optimizer):
            out.update(_optimizer_entries(key, obj))
        elif isinstance(obj, torch.Tensor):
            out[key] = _tensor_entry(obj)
        elif isinstance(obj, torch.amp.GradScaler):
            out[key] = (copy.deepcopy(obj.state_dict()), obj.get_scale())
        elif isinstance(obj, _scheduler_types()):
            out[key] = copy.deepcopy(obj.state_dict())
    return out


def _trace_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k, 'absent')!r:.160} -> {after.get(k, 'absent')!r:.160}" for k in keys
            if before.get(k) != after.get(k)]


def assert_no_trace(call: Callable[[], Any], objects: list[Any]) -> Any:
    """Run ``call``; assert ``objects`` and the global state are unchanged whether it returned or raised,
    both by firstdiv's own Snapshot (values, flags, hooks, RNGs) and by :func:`independent_trace`
    (identities and version counters, which a Snapshot taken after the fact cannot see).
    Returns the result, or the exception it raised."""
    before, trace = Snapshot.take(*objects), independent_trace(objects)
    try:
        out: Any = call()
    except Exception as exc:  # noqa: BLE001 - the harness checks state after any failure
        out = exc
    changed = before.diff(Snapshot.take(*objects)) + _trace_changes(trace, independent_trace(objects))
    assert changed == [], f"instrument left a trace: {changed[:8]}"
    return out
