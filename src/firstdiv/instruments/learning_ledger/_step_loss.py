"""What the user's own ``train_step`` computes, read in one call of it on the user's objects, under :func:`guarded`
(everything put back). ``loss_fn`` is how the user says the loss is applied, but a loop often computes its loss itself,
and draws its batch itself (a loader with its augmentation), so what the step feeds never reaches ``loss_fn`` or the
declared batch:

- OBJECTIVE reads the graph of every tensor the call backpropagates, before the backward frees it, with the same
  two-fold confirmation as ``loss_fn``'s graph (:mod:`.._core.loss_graph`: the graph's nodes and the values the loss
  node saved): a loss misfed in the step (probabilities into a loss that applies its own softmax or sigmoid, raw scores
  into an NLL);
- OBJECTIVE also reads, in every backward of the call, a prediction broadcast against a target of another shape at an
  elementwise regression loss (``[N, 1]`` against ``[N]``: every prediction meets every target), and a binary
  cross-entropy whose targets leave [0, 1];
- TASK reads what the step feeds: the model's first forward arguments and the targets the first backward's loss nodes
  saved (``_step_fed``: a cross-entropy's class map, a regression's target maps).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .._core.batch import rebuild
from .._core.closure import closure_state
from .._core.loss_graph import Misfed, bce_target_outside, broadcast_into_loss, graph_nodes, misfed_backwards, saved_tensor
from .._core.state import guarded
from .._core.task import Ctx
from .._core.trace import tensors

#: the loss nodes whose saved ``_saved_target`` is the target the loss compares with
_TARGET_NODES = ("NllLoss2DBackward0", "NllLossBackward0", "MseLossBackward0", "L1LossBackward0", "SmoothL1LossBackward0",
                 "BinaryCrossEntropyWithLogitsBackward0", "BinaryCrossEntropyBackward0", "HuberLossBackward0")


def step_misfed(ctx: Ctx) -> Misfed | None:
    """What the first misfed loss node of ``train_step``'s own backward is, or None (no train_step, nothing misfed, or
    the step raised: other links report a step that raises)."""
    _run_once(ctx)
    return ctx.notes.get("step_misfed")


def step_fed(ctx: Ctx) -> tuple[tuple[Any, dict[str, Any]], list[torch.Tensor]] | None:
    """The model's first forward arguments in ``train_step`` (args, kwargs) and the targets its first backward's loss
    nodes saved, or None (no train_step, no forward, or the step raised). ``ctx.notes["step_fed_model_in_loss"]``
    says whether that backward's graph holds the model's first output (else its loss is another network's)."""
    _run_once(ctx)
    return ctx.notes.get("step_fed")


def step_broadcast(ctx: Ctx) -> tuple[list[int], list[int]] | None:
    """(the prediction's shape, the shape it was expanded to) at an elementwise regression loss node of a backward
    ``train_step`` runs (:func:`broadcast_into_loss`), or None."""
    _run_once(ctx)
    return ctx.notes.get("step_broadcast")


def step_bce_outside(ctx: Ctx) -> dict[str, Any] | None:
    """A binary cross-entropy of a backward ``train_step`` runs whose targets leave [0, 1] (:func:`bce_target_outside`)."""
    _run_once(ctx)
    return ctx.notes.get("step_bce_outside")


def step_outputs(ctx: Ctx) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(module name, output, its gradient)`` for the float ``[B, L, V]`` outputs of the model's first forward in
    ``train_step`` aligned with an integer ``[B, T]`` argument of it (batch first), that the step's backward reached."""
    _run_once(ctx)
    return ctx.notes.get("step_outputs") or []


def _run_once(ctx: Ctx) -> None:
    if ctx.train_step is None or "step_misfed" in ctx.notes:
        return
    found: list[Misfed] = []
    fed: dict[str, Any] = {}
    try:
        with guarded(ctx.model, ctx.optimizer, ctx.train_step, closure_state(ctx.train_step)), \
                torch.enable_grad(), misfed_backwards(found), _reading_fed(ctx.model, ctx.loss_fn, fed), \
                _aligned_outputs(ctx.model, fed, ctx.batch_axis):
            ctx.train_step()
    except Exception:  # noqa: BLE001 - the user's step: PARAMETER_UPDATE reports a step that raises
        found, fed = [], {}
    ctx.notes["objective_ran_train_step"] = 1
    ctx.notes["step_misfed"] = found[0] if found else None
    given = [t for t in fed.get("given", []) if not any(t.shape == s.shape and torch.equal(t, s) for s in fed.get("targets", []))]
    ctx.notes["step_fed"] = (fed["args"], fed.get("targets", []) + given) if "args" in fed else None
    ctx.notes["step_fed_model_in_loss"] = bool(fed.get("model_in_loss"))  # the model's first output in that backward
    ctx.notes["step_broadcast"] = fed.get("broadcast")
    ctx.notes["step_bce_outside"] = fed.get("bce_outside")
    ctx.notes["step_outputs"] = [(name, out, grad) for name, (out, grad) in fed.get("aligned", {}).items() if grad is not None]


def _clone(x: Any) -> Any:
    if torch.is_tensor(x):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return rebuild(x, [_clone(v) for v in x])
    return x


@contextlib.contextmanager
def _reading_fed(model: torch.nn.Module, loss_fn: Any, fed: dict[str, Any]) -> Iterator[None]:
    """While open: the model's first forward arguments (copies), the saved targets of the loss nodes of the first
    backward (wrapping ``torch.autograd.backward`` inside :func:`misfed_backwards`'s wrapper; both put back on exit)
    and, where ``loss_fn`` is a module the step calls itself (an ``nn.L1Loss``, whose node saves no target), the
    tensors after the first argument of its first call."""
    def pre(_m: Any, args: Any, kwargs: Any) -> None:
        fed.setdefault("args", (_clone(args), _clone(kwargs)))

    def post(_m: Any, _args: Any, _kwargs: Any, out: Any) -> None:
        fed.setdefault("outputs", [t.grad_fn for t in tensors(out) if t.grad_fn is not None])

    def given(_m: Any, args: Any, kwargs: Any) -> None:
        fed.setdefault("given", [_clone(t) for t in (*args[1:], *kwargs.values()) if torch.is_tensor(t)])

    original = torch.autograd.backward

    def reading(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        roots = [t for t in (tensors if isinstance(tensors, (tuple, list)) else (tensors,)) if torch.is_tensor(t)]
        if fed.get("broadcast") is None:  # any backward of the step: a value net's loss may come after a policy's
            fed["broadcast"] = next((b for r in roots if (b := broadcast_into_loss(r)) is not None), None)
        if fed.get("bce_outside") is None:
            fed["bce_outside"] = next((b for r in roots if (b := bce_target_outside(r)) is not None), None)
        if "targets" not in fed:
            nodes = [n for r in roots if r.grad_fn is not None for n in graph_nodes(r)]
            saved = (saved_tensor(n, "_saved_target", floating=False) for n in nodes if type(n).__name__ in _TARGET_NODES)
            fed["targets"] = [t.clone() for t in saved if t is not None]
            ids = {id(n) for n in nodes}
            fed["model_in_loss"] = any(id(n) in ids for n in fed.get("outputs", ()))
        return original(tensors, *args, **kwargs)

    handles = [model.register_forward_pre_hook(pre, with_kwargs=True),
               model.register_forward_hook(post, with_kwargs=True)]
    if isinstance(loss_fn, torch.nn.Module):
        handles.append(loss_fn.register_forward_pre_hook(given, with_kwargs=True))
    torch.autograd.backward = reading
    try:
        yield
    finally:
        torch.autograd.backward = original
        for h in handles:
            h.remove()



def _sequence_shapes(args: Any, kwargs: dict[str, Any], axis: int) -> tuple[set[tuple[int, int]], int]:
    """(B, L) an output aligned with an integer [B, T] argument has (L = T or T - 1, T >= 4), and the least id above
    every token of those arguments (scores over the tokens have at least that many entries)."""
    ids = [t.transpose(0, 1) if axis == 1 else t for t in (*args, *kwargs.values()) if torch.is_tensor(t) and t.dim() == 2
           and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool and t.shape[1] >= 4 and t.numel()]
    shapes = {(int(t.shape[0]), n) for t in ids for n in (int(t.shape[1]), int(t.shape[1]) - 1)}
    return shapes, max((int(t.max()) + 1 for t in ids), default=0)


@contextlib.contextmanager
def _aligned_outputs(model: torch.nn.Module, fed: dict[str, Any], axis: int) -> Iterator[None]:
    """While open, in the model's first forward only: every module's first float output ``[B, L, V]`` aligned with an
    integer sequence argument of that forward, kept (a copy) in ``fed["aligned"]`` with the gradient its first backward
    brings (a hook on the output tensor, which dies with the step's graph). Module hooks removed on exit."""
    kept: dict[str, list[Any]] = {}
    state: dict[str, Any] = {"shapes": None, "vocab": 0, "done": False}

    def pre(_m: Any, args: Any, kwargs: Any) -> None:
        if state["shapes"] is None:
            state["shapes"], state["vocab"] = _sequence_shapes(args, kwargs, axis)

    def post(_m: Any, _args: Any, _out: Any) -> None:
        state["done"] = state["done"] or state["shapes"] is not None

    def keep(name: str) -> Any:
        def hook(_m: Any, _i: Any, out: Any) -> None:
            if state["done"] or not state["shapes"] or name in kept:
                return
            for k, t in enumerate(list(tensors(out))[:4]):
                o = t.transpose(0, 1) if axis == 1 and t.dim() == 3 else t
                if t.is_floating_point() and t.dim() == 3 and t.requires_grad and o.shape[-1] >= max(state["vocab"], 2) \
                        and (o.shape[0], o.shape[1]) in state["shapes"]:
                    site = f"{name}#{k}" if k else name
                    kept[site] = [o.detach().clone(), None]
                    t.register_hook(lambda g, s=site: _first_grad(kept[s], g, axis))
        return hook

    handles = [model.register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [m.register_forward_hook(keep(n)) for n, m in model.named_modules()]
    handles.append(model.register_forward_hook(post))  # after the root's own keep hook
    fed["aligned"] = kept
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _first_grad(slot: list[Any], g: torch.Tensor, axis: int) -> None:
    if slot[1] is None:
        slot[1] = (g.transpose(0, 1) if axis == 1 else g).detach().clone()
