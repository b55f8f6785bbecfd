"""six_claims' controlled run: forward (recording every Linear/Conv layer's output), loss, backward and
one sacrificial optimizer step, all on ``detached_copy(model, optimizer)``, measured for the claims."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._core.batch import Batch, compute_loss, loss_problem
from .._core.closure import innermost
from .._core.examples import dense
from .._core.later_steps import TINY_LR, moved_later
from .._core.loss_graph import head_inside_loss
from .._core.lr import lr_of, step_at_base_lr
from .._core.state import detached_copy

SEED = 0  # the copies' forward passes draw dropout masks from this seed, so loss evaluations compare


@dataclass
class Measured:
    """One controlled forward/backward/step on a deep copy of model and optimizer."""

    outputs: Any = None
    loss: Any = None
    loss_problem: str | None = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    trainable: list[str] = field(default_factory=list)
    activations: dict[str, torch.Tensor] = field(default_factory=dict)
    values: dict[str, torch.Tensor] = field(default_factory=dict)
    moved: dict[str, bool] = field(default_factory=dict)
    owned: dict[str, bool] = field(default_factory=dict)
    lr: dict[str, float | None] = field(default_factory=dict)
    step_error: str = ""
    head: list[str] = field(default_factory=list)  # trainable tensors loss_fn applies to the outputs (a generator)
    by_step: dict[str, bool] = field(default_factory=dict)  # beside an optimizer: what one train_step call moved
    moved_later: list[str] = field(default_factory=list)  # held by the optimizer's first step, moved by its next
    elsewhere: set[str] = field(default_factory=set)  # owned by another optimizer train_step reaches (closure.trained_elsewhere)


def weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Linear and Conv layers with a weight tensor: the layers whose hidden units COMPUTATION compares."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)) and isinstance(getattr(m, "weight", None), torch.Tensor)]


def measure(model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Batch, loss_fn: Any) -> Measured:
    """Forward, loss, backward and one optimizer step (none without an optimizer), all on
    ``detached_copy(model, optimizer)``."""
    m_copy, o_copy = detached_copy(model, optimizer)
    step_at_base_lr(o_copy)  # a warmup schedule's first step has lr 0: the claim is about the update rule
    groups = o_copy.param_groups if o_copy is not None else []
    for t in (*m_copy.parameters(), *(p for g in groups for p in g["params"])):
        t.grad = None
    out = Measured()
    handles = [mod.register_forward_hook(_recorder(out.activations, name)) for name, mod in weighted_layers(m_copy)]
    try:
        torch.manual_seed(SEED)
        with torch.enable_grad():
            out.outputs, out.loss = compute_loss(m_copy, batch, loss_fn)
            out.head = head_inside_loss(out.loss, out.outputs, m_copy)
    finally:
        for h in handles:
            h.remove()
    out.loss_problem = loss_problem(out.loss)
    if out.loss_problem is None and not bool(torch.isfinite(out.loss.detach()).all()):
        out.loss_problem = f"loss is {float(out.loss.detach().reshape(-1)[0])}"
    named = list(m_copy.named_parameters(remove_duplicate=False))
    out.trainable = [n for n, p in m_copy.named_parameters() if p.requires_grad]
    if out.loss_problem is None and out.loss.requires_grad:
        out.loss.reshape(()).backward()
    out.grads = {n: _dense_grad(p.grad) for n, p in named}
    owned = {id(p): g.get("lr") for g in groups for p in g["params"]}
    out.owned = {n: id(p) in owned for n, p in named}
    out.lr = {n: (float(owned[id(p)]) if isinstance(owned.get(id(p)), (int, float, torch.Tensor)) else None) for n, p in named}
    out.values = before = {n: p.detach().clone() for n, p in named}
    if out.loss_problem is None and o_copy is not None:
        out.step_error = _step(o_copy, m_copy, batch, loss_fn)
        out.moved = {n: not torch.equal(before[n], p.detach()) for n, p in named}
        held = {n: p for n, p in named if not out.moved[n] and out.owned.get(n) and out.lr.get(n)
                and p.grad is not None and bool(p.grad.ne(0).any())}
        if held and not out.step_error:  # the optimizer's own step may hold its first update (_core.later_steps)
            out.moved_later = sorted(moved_later(o_copy, held, any_lr=True))
            out.moved.update(dict.fromkeys(out.moved_later, True))
    out.outputs = _detach(out.outputs)
    out.loss = out.loss.detach() if torch.is_tensor(out.loss) else out.loss
    return out


def _dense_grad(grad: torch.Tensor | None) -> torch.Tensor | None:
    """A copy of ``grad``; a sparse gradient (``Embedding(sparse=True)``) densified, so every check reads it alike."""
    if grad is None:
        return None
    return dense(grad.detach()).clone()


def step_moves(model: nn.Module, train_step: Any, optimizers: tuple = (),
               lr_at_step: dict[int, float] | None = None) -> tuple[dict[str, bool], str]:
    """Call the user's ``train_step()`` once on the user's objects (the caller restores them) and say which
    parameters it moved; ``(moved, "")`` or ``({}, why it could not run)``. ``lr_at_step`` (given with the
    ``optimizers`` train_step steps) receives, per parameter id, the largest lr its group had at a ``step()``."""
    named = list(model.named_parameters(remove_duplicate=False))
    before = {n: p.detach().clone() for n, p in named}
    record = lr_at_step if lr_at_step is not None else {}
    hooks = [innermost(o).register_step_pre_hook(lambda o, *_: record.update(
        {id(q): max(record.get(id(q), 0.0), lr_of(g)) for g in o.param_groups for q in g["params"]}))
        for o in optimizers]
    try:
        train_step()
    except Exception as exc:  # noqa: BLE001 - a step that cannot run leaves UPDATE without evidence
        text = str(exc).strip().splitlines()
        return {}, f"train_step raised {type(exc).__name__}: {text[0] if text else ''}"
    finally:
        for h in hooks:
            h.remove()
    now = dict(model.named_parameters(remove_duplicate=False))
    return {n: n in now and not torch.equal(before[n], now[n].detach()) for n, _ in named}, ""


def held_by_lr(model: nn.Module, optimizers: list, run: Measured, names: list[str], lr_at_step: dict[int, float]) -> list[str]:
    """Of ``names`` (parameters one call of train_step left in place), those an optimizer it steps owns in a group
    whose lr at that step was positive and at most ``TINY_LR`` (a warmup's start), and that a step of a copy of that
    optimizer, at the lr of that step and then at a raised one (``_core.later_steps``), moves on the measured gradient:
    the update reaches them, below float32's resolution next to the weights at the program's lr. The copies only step."""
    params, out = dict(model.named_parameters()), []
    for opt in optimizers:
        groups = innermost(opt).param_groups
        mine = [n for n in names if n in params and run.grads.get(n) is not None and n not in out
                and 0 < lr_at_step.get(id(params[n]), 0.0) <= TINY_LR
                and any(id(params[n]) == id(q) for g in groups for q in g["params"])]
        if not mine:
            continue
        m_copy, o_copy = detached_copy(model, opt)
        for g, h in zip(groups, o_copy.param_groups):
            at = [lr_at_step[id(q)] for q in g["params"] if id(q) in lr_at_step]
            h["lr"] = max(at) if at and not torch.is_tensor(h["lr"]) else h["lr"]
        copies = dict(m_copy.named_parameters())
        for q in m_copy.parameters():
            q.grad = None
        for n in mine:
            copies[n].grad = run.grads[n].clone()
        out += sorted(moved_later(o_copy, {n: copies[n] for n in mine}))
    return out


def _recorder(store: dict[str, torch.Tensor], name: str) -> Any:
    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        if torch.is_tensor(output):
            store[name] = output.detach()
    return hook


def _detach(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return [_detach(v) for v in value]
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


def _step(opt: torch.optim.Optimizer, model: nn.Module, batch: Batch, loss_fn: Any) -> str:
    """One sacrificial step on the copy; optimizers that need a closure (LBFGS) get one."""
    def closure() -> torch.Tensor:
        opt.zero_grad()
        torch.manual_seed(SEED)
        with torch.enable_grad():
            loss = compute_loss(model, batch, loss_fn)[1]
            loss.reshape(()).backward()
        return loss
    try:
        try:
            opt.step()
        except TypeError:
            opt.step(closure)
    except Exception as exc:  # noqa: BLE001 - a step that cannot run leaves UPDATE without evidence, not a crash
        return f"optimizer.step() raised {type(exc).__name__}: {exc}"
    return ""
