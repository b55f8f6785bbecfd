"""The task a batch belongs to, shared by the learning ledger and the evidence packet: the context the
inference reads (:class:`Ctx`), :func:`infer_task` itself and the small tensor helpers it needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .batch import Batch
from .examples import logits_of

TASKS = ("auto", "classification", "regression", "language_model")
IGNORE_INDEX = -100  # PyTorch's default ignore_index for cross_entropy / nll_loss


@dataclass
class Ctx:
    """Everything the links read. ``work``/``work_opt`` are a deep copy (the links may backward and step
    them); ``model``/``optimizer`` are the user's objects, only read."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    work: nn.Module
    work_opt: torch.optim.Optimizer | None
    loss_fn: Callable[..., Any]
    batch: Batch
    outputs: Any
    task_probe: Any = None
    requested_task: str = "auto"
    overfit_steps: int = 200
    overfit_batch: Batch | None = None
    reference_loss: Callable[..., Any] | None = None
    loss: Any = None
    task: str = "unknown"
    task_note: str = ""
    class_dim: int | None = None
    num_classes: int | None = None
    ignore_index: int = IGNORE_INDEX
    notes: dict[str, Any] = field(default_factory=dict)
    #: the user's own step (manual updates, their loop) and the axis of the batch's examples
    train_step: Callable[[], Any] | None = None
    batch_axis: int = 0
    #: one-line notes for the report (things not verified on a healthy program): ``details["notes"]``
    report_notes: list[str] = field(default_factory=list)
    #: classification targets: "multiclass" (class ids), "binary" or "multilabel" (0/1 floats, one per output)
    label_kind: str = ""


def seed_copies(seed: int = 0) -> None:
    """Seed the RNGs the copies draw from (dropout, shuffles) so a run is reproducible. Unlike
    ``torch.manual_seed`` this never queues a seed for a CUDA that is not initialised yet (that would
    outlive the guard that restores the RNG states)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def err(exc: BaseException) -> str:
    """One line naming an exception raised by user code."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def shape(x: Any) -> Any:
    if torch.is_tensor(x):
        return list(x.shape)
    if isinstance(x, Mapping):
        return {str(k): shape(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [shape(v) for v in x]
    return type(x).__name__


def is_int(t: Any) -> bool:
    return torch.is_tensor(t) and not t.is_floating_point() and not t.is_complex() and t.dtype is not torch.bool


def input_ids(b: Batch) -> torch.Tensor | None:
    """The token ids of a language-model batch: the inputs tensor, or ``inputs['input_ids']``."""
    x = b.inputs
    if isinstance(x, dict):
        x = x.get("input_ids", next((v for v in x.values() if is_int(v)), None))
    return x if is_int(x) else None


def _class_dims(o: torch.Tensor, t: torch.Tensor) -> list[int]:
    if o.dim() != t.dim() + 1 or o.dim() < 2:
        return []
    dims = []
    if tuple(o.shape[:1]) + tuple(o.shape[2:]) == tuple(t.shape):
        dims.append(1)
    if tuple(o.shape[:-1]) == tuple(t.shape) and o.dim() - 1 not in dims:
        dims.append(o.dim() - 1)
    return dims


def _zero_one(o: torch.Tensor, t: torch.Tensor) -> str:
    """"binary"/"multilabel" for 0/1 targets (float, integer or bool) with one output per label (``[N]``, ``[N, 1]``,
    ``[N, K]``)."""
    if t.is_complex() or t.numel() == 0 or tuple(o.shape) != tuple(t.shape) or t.dim() > 2:
        return ""
    if not bool(((t == 0) | (t == 1)).all()):
        return ""
    return "multilabel" if t.dim() == 2 and t.shape[1] > 1 else "binary"


def infer_task(ctx: Ctx) -> None:
    """Fill ``ctx.task``/``class_dim``/``num_classes``/``label_kind``/``task_note`` from the requested task and the shapes.

    The outputs are read through :func:`logits_of` (a tensor, a ``ModelOutput``'s logits, a tuple's first float tensor).
    auto: integer targets [N] + outputs [N, K] (or [N, K, ...] with targets [N, ...]) -> classification;
    0/1 targets of the outputs' shape ([N], [N, 1], [N, K]) -> classification (binary / multilabel);
    integer inputs [B, T] + integer targets [B, T] + outputs [B, T, V] -> language_model;
    other floating-point targets -> regression; anything else -> unknown (the task-specific checks are skipped).
    """
    o, t, req = logits_of(ctx.outputs), ctx.batch.targets, ctx.requested_task
    declared = getattr(ctx.loss_fn, "ignore_index", IGNORE_INDEX)  # a loss class may hold None (nothing ignored)
    ctx.ignore_index = int(declared) if isinstance(declared, int) and not isinstance(declared, bool) else IGNORE_INDEX
    described = f"outputs {shape(ctx.outputs)} {getattr(o, 'dtype', '')}, targets {shape(t)} {getattr(t, 'dtype', '')}"
    described = described.replace("torch.", "")
    if req == "regression":
        ctx.task, ctx.task_note = "regression", f"task='regression' given; {described}"
        return
    if o is None or not o.is_floating_point() or not torch.is_tensor(t) or t.layout != torch.strided:
        ctx.task = req if req != "auto" else "unknown"
        ctx.task_note = (f"cannot read a task from {described}: the task-specific checks need tensor outputs and "
                         f"targets{' (the targets are sparse)' if torch.is_tensor(t) and t.layout != torch.strided else ''}")
        return
    zero_one = _zero_one(o, t) if req in ("auto", "classification") else ""
    if zero_one:
        ctx.task, ctx.label_kind = "classification", zero_one
        how = "inferred" if req == "auto" else "given"
        ctx.task_note = f"task='classification' ({zero_one}: 0/1 targets, one output per label) {how} from {described}"
        return
    _infer_classes(ctx, o, t, req, described)


def _infer_classes(ctx: Ctx, o: torch.Tensor, t: Any, req: str, described: str) -> None:
    dims = _class_dims(o, t) if is_int(t) else []
    ids = input_ids(ctx.batch)
    lm_like = ids is not None and tuple(ids.shape) == tuple(t.shape) and t.dim() == 2 and (o.dim() - 1) in dims
    if req == "auto":
        if dims:
            req = "language_model" if lm_like else "classification"
        elif t.is_floating_point():
            req = "regression"
        else:
            ctx.task_note = f"cannot infer the task from {described}; pass task='classification'|'regression'|'language_model'"
            return
        how = "inferred"
    else:
        how = "given"
    ctx.task = req
    if req in ("classification", "language_model"):
        if not dims:
            ctx.task_note = (f"task={req!r} {how}, but {described} have no class axis (outputs should be targets' shape "
                             f"plus one class axis, targets integer class ids); class checks skipped")
            return
        last = o.dim() - 1
        prefer_last = req == "language_model" or ctx.batch_axis != 0  # [T, B, K] outputs: axis 1 holds the examples
        class_dim = last if (prefer_last and last in dims) else 1 if 1 in dims else dims[0]
        if o.shape[class_dim] < 2:
            ctx.task_note = (f"task={req!r} {how} from {described}: one output column is a binary logit, not K class "
                             f"scores; class checks skipped")
            return
        ctx.class_dim, ctx.num_classes, ctx.label_kind = class_dim, int(o.shape[class_dim]), "multiclass"
    ctx.task_note = f"task={req!r} {how} from {described}" + (
        f"; {ctx.num_classes} classes on axis {ctx.class_dim}" if ctx.num_classes else "")
