"""Four-structure audit (appendix section 5, "nn.Module: compare the four structures").

A tensor can require gradients, receive gradients and take part in the forward pass, and still not be
registered, saved, moved by ``model.to(...)`` or owned by the optimizer. This instrument reconciles,
by object identity, for every tensor the model holds:

1. PYTHON: what Python can reach (instance attributes of every module, and plain lists/tuples/dicts
   in them, outside PyTorch's ``_parameters`` / ``_buffers`` / ``_modules`` registries);
2. REGISTERED: what PyTorch registered (``named_parameters`` / ``named_buffers``; tied weights once,
   with all their names);
3. AUTOGRAD: what the autograd graph of one loss reaches (only with ``batch`` and ``loss_fn``);
4. OPTIMIZER: what the optimizer's param groups own.

A finding's ``where`` is the first parameter it is about, as ``named_parameters()`` names it; its message
and evidence name every module and tensor of the group. Findings follow that order, so an unregistered tensor or module list is named before the optimizer
problem it causes. Kinds: ``structure.unregistered_tensor``, ``structure.unregistered_module``,
``structure.unreached_parameter`` (WARN), ``structure.device_mismatch``,
``optimizer.owns_only_frozen`` (everything the optimizer owns is frozen: named before the trainable tensors
it does not own), ``optimizer.missing_parameter`` (one finding per cause: the modules holding them),
``optimizer.stale_parameter`` (one per replaced module, old and new tensors), ``optimizer.frozen_parameter``
(WARN), ``structure.duplicate_in_optimizer``.

Declared intent (``frozen=``, fnmatch patterns of parameter names, or module paths): a FROZEN section
between AUTOGRAD and OPTIMIZER checks that those parameters have requires_grad=False
(``frozen.requires_grad``) and keep it across ``model.train()`` / ``model.eval()`` (called on your model
inside a guard; ``frozen.unfrozen_by_train``), warns on frozen parameters no pattern names
(``frozen.undeclared``), and leaves them out of the OPTIMIZER's missing ones. Informational checks: ``structure.unregistered_constant`` (a plain
tensor without requires_grad: PASS, WARN when on another device than the parameters) and
``structure.derived_tensor`` (a cached tensor computed from registered parameters: PASS).

Evidence before FAIL, for modules held outside the registry (``structure.unregistered_module``): the premise is
that the program uses what is hidden. It is confirmed when the forward pass runs one of those modules (a pre-hook
inside the guard), the loss's graph reaches one of their tensors, or an optimizer owns one. Unconfirmed (a deep
copy kept aside, e.g. a framework's saved hyperparameters; or no batch/loss_fn given), it is a WARN naming what
would confirm it. Modules that hide nothing (no parameter, no buffer, no module that computes otherwise
in eval mode: a Dropout with p > 0, a norm with running statistics, a forward reading ``self.training``) are a PASS:
a norm without running statistics uses the batch's statistics in both modes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Report, Status
from .._core.batch import check_loss_fn, check_model, check_optimizer, compute_loss, loss_problem, split_batch
from .._core.checks import compose, graph_leaves
from .._core.closure import step_optimizers
from .._core.frozen import check_frozen, declared
from .._core.python_graph import Hidden, Registry, hidden_modules, python_graph
from .._core.state import guarded
from .._core.user_hooks import reports_user_hooks
from ._common import Audit, finding, severity
from ._frozen import frozen_findings
from ._optimizer import optimizer_findings
from ._structures import autograd_findings, hidden_finding, registered_findings

__all__ = ["INSTRUMENT", "four_structures", "hidden_modules"]  # hidden_modules: re-exported from _core.python_graph

INSTRUMENT = "four_structures"
_STRUCTURES = ("PYTHON", "REGISTERED", "AUTOGRAD", "FROZEN", "OPTIMIZER")  # the summary rows; the divergence is an item


@reports_user_hooks
def four_structures(model: nn.Module, optimizer: torch.optim.Optimizer | None = None, batch: Any = None,
                    loss_fn: Any = None, *, frozen: tuple[str, ...] = (), train_step: Any = None) -> Report:
    """Reconcile the four structures of a module (Python, registered, autograd, optimizer) by identity.

    ``batch`` (tuple ``(inputs, targets)`` or dict, see :mod:`firstdiv.instruments._core.batch`) and
    ``loss_fn`` ``(outputs, targets) -> loss`` are optional; with both, one forward pass and loss run on
    your model inside a guard (no backward, no step) to see what the autograd graph reaches.
    ``optimizer`` may be None (the OPTIMIZER structure is then SKIPPED). ``frozen``: fnmatch patterns of the
    parameter names frozen on purpose (``("backbone.stage1.*",)``); a pattern matching none is refused.
    ``train_step`` (your step): the other optimizers it steps that own this model's parameters (a ``SparseAdam``
    beside the dense optimizer) count as owners too; it is called once on your objects (every value restored) only
    to confirm an OPTIMIZER finding: that two owners both step a shared parameter with a gradient, and that a
    parameter no optimizer owns is not moved by train_step in another way.
    """
    check_model(model)
    if optimizer is not None:
        check_optimizer(optimizer)
    if loss_fn is not None:
        check_loss_fn(loss_fn)
    patterns = check_frozen(frozen)
    if batch is not None:
        batch = split_batch(batch, model)
    reg = Registry.of(model)
    hidden, aliases = python_graph(model, reg)
    reached, reason, ran = None, "pass both batch and loss_fn to see what the autograd graph reaches", None
    if batch is not None and loss_fn is not None:
        reached, reason, ran = _autograd(model, optimizer, batch, loss_fn, hidden)
    opts = step_optimizers(train_step, optimizer, model) if optimizer is not None else []
    groups = [(g, _label(o, optimizer, train_step)) for o in opts for g in o.param_groups]
    owned = [(g, i, t) for g, (group, _) in enumerate(groups) for i, t in enumerate(group["params"])]
    audit = Audit(model, optimizer, reg, hidden, aliases, reached, reason, owned, declared(model, patterns),
                  owners=[name for _, name in groups], ran=ran, batch=batch, loss_fn=loss_fn, train_step=train_step,
                  opts=opts, opt_of_group=[k for k, o in enumerate(opts) for _ in o.param_groups])
    return _report(audit, patterns)


def _label(opt: torch.optim.Optimizer, optimizer: Any, train_step: Any) -> str:
    """How the user names ``opt``: ``optimizer`` for the one passed, else the closure variable or global of
    ``train_step`` that holds it (``optimizerG (Adam, stepped by train_step)``)."""
    kind = type(opt).__name__
    if opt is optimizer:
        return f"optimizer ({kind})"
    fn = getattr(train_step, "__func__", train_step)
    code = getattr(fn, "__code__", None)
    cells = zip(code.co_freevars, getattr(fn, "__closure__", None) or ()) if code is not None else ()
    names = [n for n, c in cells if _holds(c, opt)]
    names += [n for n in (code.co_names if code is not None else ()) if getattr(fn, "__globals__", {}).get(n) is opt]
    return f"{names[0] if names else 'another optimizer'} ({kind}, stepped by train_step)"


def _holds(cell: Any, obj: Any) -> bool:
    try:
        return cell.cell_contents is obj
    except ValueError:  # an empty cell
        return False


def _autograd(model: nn.Module, optimizer: Any, batch: Any, loss_fn: Any,
              hidden: list[Hidden]) -> tuple[dict[int, torch.Tensor] | None, str, set[str]]:
    """Leaves the loss's graph reaches (or None and why it could not be built), and the paths of the hidden
    entries whose modules ran in the forward pass. Runs one forward pass and the loss on the user's model inside
    ``guarded`` (no backward), so nothing it changes survives."""
    modules = [m for h in hidden for m in h.modules]
    ran: set[str] = set()
    try:
        with guarded(model, optimizer, *modules), torch.enable_grad():
            handles = [s.register_forward_pre_hook(lambda *_, path=h.path: ran.add(path))
                       for h in hidden for m in h.modules for s in m.modules()]
            try:
                _, loss = compute_loss(model, batch, loss_fn)
            finally:
                for handle in handles:
                    handle.remove()
            if not torch.is_tensor(loss):
                return None, loss_problem(loss) or "loss_fn did not return a tensor", ran
            return graph_leaves([loss.grad_fn] if loss.grad_fn is not None else []), "", ran
    except Exception as exc:  # noqa: BLE001 - user code failed; the other three structures still stand
        return None, f"forward pass or loss_fn raised {type(exc).__name__}: {exc}", ran


def _report(a: Audit, patterns: tuple[str, ...]) -> Report:
    devices = {t.device for t, _ in (*a.reg.params.values(), *a.reg.buffers.values())}
    python = [hidden_finding(a, h, devices) for h in a.hidden]
    py_status = max((c.finding.status for c in python), key=severity, default=Status.PASS)
    summary = finding("PYTHON", "structure.python", py_status,
                      f"{len(a.hidden)} objects held as plain attributes outside the registry; "
                      f"{a.aliases} plain attributes alias registered objects", {"hidden": len(a.hidden), "aliases": a.aliases})
    checks = [summary, *python, *registered_findings(a), *autograd_findings(a), *frozen_findings(a, patterns),
              *optimizer_findings(a)]
    touched = []
    if a.reached is not None:
        touched.append("one forward pass and loss on your model inside a guard (no backward)")
    if patterns:
        touched.append("model.train() and model.eval() called on your model inside a guard")
    if a._step is not None:
        touched.append("train_step called once on your objects inside a guard")
    side = ("; ".join(touched) + "; every value, requires_grad flag, mode and RNG state restored") if touched else "none"
    details = {"python": [h.path for h in a.hidden], "parameters": len(a.reg.params), "buffers": len(a.reg.buffers),
               "optimizer_tensors": len(a.owned_ids), "stale_tensors": len(a.stale()) if a.optimizer is not None else 0,
               "autograd_leaves": None if a.reached is None else len(a.reached)}
    if a.notes:
        details["notes"] = list(a.notes)
    return compose(INSTRUMENT, checks, side, details, diverges=lambda c: c.finding.where not in _STRUCTURES)
