"""What ``loss_fn`` does while it runs on the copy's outputs (one watched call): ``objective.penalty_without_graph``, a
loss term built from ``torch.autograd.grad`` without ``create_graph=True``, and ``objective.kl_input_not_log``, an
``F.kl_div`` handed probabilities where it takes log-probabilities.

``F.kl_div(input, target)`` computes ``target * (log(target) - input)``: its input is read as log-probabilities. A
probability there (the classic: ``kl_div(softmax(s), softmax(t))``) makes the loss linear in the student's
probabilities, no divergence at all. Log-probabilities are never above 0, so an input with values above 0 shows
probabilities (or raw scores) by their values alone; the call is watched as ``loss_fn`` runs (a torch-function mode sees
``F.kl_div`` itself, wherever ``loss_fn`` calls it). A target with values below 0 without ``log_target=True`` is the
mirror slip (log-probabilities given as the target).

A gradient penalty (WGAN-GP, R1, a Jacobian or input-gradient regularizer) is a function of a gradient. Taken without
``create_graph=True``, that gradient is a constant to autograd: the penalty adds its value to the loss and none of its
gradient, so the weights never feel it. The premise is confirmed on the ledger's copy by a counterfactual:

1. while ``loss_fn`` runs on the copy's outputs, the gradients it takes with ``torch.autograd.grad`` with respect to
   tensors that are not parameters (interpolated or real inputs) are watched (at the autograd engine, so ``from
   torch.autograd import grad`` is seen too); one taken without ``create_graph``. A gradient with respect to the weights
   taken without it (first-order MAML's inner step) is a first-order approximation by design and is not watched;
2. the same loss built again with those calls given ``create_graph=True`` has the same value, but its gradient with
   respect to the trainable parameters (the copy's and any of the program's own model that ``loss_fn`` reaches, read
   with ``autograd.grad``: no ``.grad`` is written) differs by more than a thousandth of its norm: the penalty was
   meant to train and does not. A gradient taken for another purpose, which the loss does not use, changes nothing:
   no finding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..._globals import preserved_globals
from .._core.batch import compute_loss
from .._core.checks import Check
from .._core.task import Ctx
from ._common import failed, g4

MOVES = 1e-3  # relative change of the parameters' gradient that counts


@contextlib.contextmanager
def _watched(seen: list[bool], force: bool) -> Iterator[None]:
    """While open, every ``autograd.grad`` call (an engine run that does not accumulate into ``.grad``) is recorded in
    ``seen`` (True: without create_graph); with ``force``, each one runs with ``create_graph=True``."""
    original = torch.autograd._engine_run_backward

    def run(outputs: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = args[3] if len(args) >= 4 and isinstance(args[3], (tuple, list)) else ()
        if kwargs.get("accumulate_grad") is False and len(args) >= 3 and inputs and \
                not any(isinstance(t, torch.nn.Parameter) for t in inputs):  # a gradient of the data, not the weights
            seen.append(not args[2])
            if force and not args[2]:
                args = (args[0], True, True, *args[3:])
        return original(outputs, *args, **kwargs)

    torch.autograd._engine_run_backward = run
    try:
        yield
    finally:
        torch.autograd._engine_run_backward = original


class _KlCalls(TorchFunctionMode):
    """Records the (input, target, log_target) of each ``F.kl_div`` call, detached."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, torch.Tensor, bool]] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.kl_div and len(args) >= 2 and torch.is_tensor(args[0]) and torch.is_tensor(args[1]):
            self.calls.append((args[0].detach(), args[1].detach(), bool(kwargs.get("log_target", False))))
        return func(*args, **kwargs)


def _loss(ctx: Ctx, force: bool, kl: _KlCalls | None = None) -> tuple[Any, list[bool]]:
    seen: list[bool] = []
    try:
        with preserved_globals(seed=0), torch.enable_grad(), _watched(seen, force), kl or contextlib.nullcontext():
            return compute_loss(ctx.work, ctx.batch, ctx.loss_fn)[1], seen
    except Exception:  # noqa: BLE001 - user code on the copy: no finding
        return None, seen


def loss_terms(ctx: Ctx, od: Any, value: float, ev: dict[str, Any]) -> Check | None:
    """One watched call of ``loss_fn``: its ``kl_div`` inputs, then its gradient penalties (module docstring)."""
    kl = _KlCalls()
    as_written, seen = _loss(ctx, force=False, kl=kl)
    return _kl_input(kl.calls, value, ev) or _penalty(ctx, as_written, seen, value, ev)


def _kl_input(calls: list[tuple[torch.Tensor, torch.Tensor, bool]], value: float, ev: dict[str, Any]) -> Check | None:
    for x, t, log_target in calls:
        if x.numel() and x.is_floating_point() and float(x.max()) > 1e-6:
            what = "probabilities" if float(x.min()) >= 0 else "raw scores"
            ev.update(kl_div_input_min=float(x.min()), kl_div_input_max=float(x.max()), kl_div_input_read_as=what)
            return failed("OBJECTIVE", "objective.kl_input_not_log",
                          f"F.kl_div is handed an input in [{g4(x.min())}, {g4(x.max())}]: it reads its input as "
                          f"log-probabilities (never above 0), so these are {what}, and the loss ({g4(value)}) is "
                          "linear in them, no divergence", ev,
                          expected="log-probabilities as kl_div's input (log_softmax)",
                          observed=f"input values in [{g4(x.min())}, {g4(x.max())}]",
                          hint="pass F.log_softmax(student_logits / T, dim=1) as the input of F.kl_div (the target stays "
                               "probabilities, or log-probabilities with log_target=True)")
        if not log_target and t.numel() and t.is_floating_point() and float(t.max()) <= 0 and float(t.min()) < -1e-6:
            ev.update(kl_div_target_min=float(t.min()), kl_div_target_max=float(t.max()))
            return failed("OBJECTIVE", "objective.kl_input_not_log",
                          f"F.kl_div is handed a target in [{g4(t.min())}, {g4(t.max())}] without log_target=True: "
                          "log-probabilities where it reads probabilities", ev,
                          expected="probabilities as kl_div's target, or log_target=True",
                          observed=f"target values in [{g4(t.min())}, {g4(t.max())}], log_target=False",
                          hint="pass log_target=True, or the target's probabilities (softmax, not log_softmax)")
    return None


def _grads(loss: Any, params: list[torch.Tensor]) -> torch.Tensor | None:
    if not torch.is_tensor(loss) or loss.numel() != 1 or loss.grad_fn is None:
        return None
    got = torch.autograd.grad(loss.reshape(()), params, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten().double() for p, g in zip(params, got)])


def _penalty(ctx: Ctx, as_written: Any, seen: list[bool], value: float, ev: dict[str, Any]) -> Check | None:
    if not any(seen):
        return None
    forced, _ = _loss(ctx, force=True)
    own = [p for p in ctx.model.parameters() if p.requires_grad]
    params = [p for p in ctx.work.parameters() if p.requires_grad] + own
    try:
        g0, g1 = _grads(as_written, params), _grads(forced, params)
    except RuntimeError:  # a graph the user's code freed: no finding
        return None
    if g0 is None or g1 is None or not float(g1.norm()):
        return None
    moved = float((g1 - g0).norm() / g1.norm())
    ev["penalty_without_graph"] = {"grad_calls_without_create_graph": sum(seen), "gradient_change": moved}
    if moved <= MOVES:
        return None
    return failed("OBJECTIVE", "objective.penalty_without_graph",
                  f"loss_fn takes {sum(seen)} gradient(s) with torch.autograd.grad without create_graph=True and uses "
                  f"them in the loss: built with create_graph=True, the same loss ({g4(value)}) has a gradient "
                  f"{moved:.0%} different with respect to the weights, so the term (a gradient penalty) adds its value "
                  "and none of its gradient", ev,
                  expected="a penalty on a gradient built with create_graph=True, so that it trains",
                  observed=f"the parameters' gradient moves by {moved:.0%} of its norm with create_graph=True",
                  hint="pass create_graph=True (and retain_graph=True) to torch.autograd.grad inside the penalty")
