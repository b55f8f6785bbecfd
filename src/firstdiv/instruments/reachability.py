"""Autograd reachability (appendix section 3): does the loss depend on each parameter in the graph that
executed, and if not, where does the dependency path stop and why?

For every parameter: ``requires_grad``, ``is_leaf``, whether the loss's ``grad_fn`` graph reaches it (walked to
``AccumulateGrad.variable``), and its gradient after a controlled ``torch.autograd.grad`` of every trainable parameter
(None vs zero vs nonzero; no ``.grad`` written; a gradient arriving off the walked graph comes through a custom autograd
function: reached). With a batch and a loss function the forward pass is traced: module hooks record which modules
ran, under which grad mode, and what they returned; a torch-function mode records every operation whose inputs
required grad but whose outputs do not (the cuts). An unreachable parameter is explained by the first cut that
consumed it (``detached``, ``no_grad``, ``integer_cast``), else by its module never running (``not_executed``), else
``unused``; an ``unused`` one whose perturbation on a copy moves the loss is ``cut`` (a FAIL: a cut the trace missed).
A reached parameter with an exactly-zero gradient FAILs only where the loss depends on it and no signal reaches its
uses (``_core.cancelling``: contributions that cancel between loss terms or examples are a WARN).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import InvalidArgument
from ..report import Report, Status, skipped
from ._core import batch as _batch
from ._core.cancelling import cancelled, cancelled_check
from ._core.checks import Check, check, compose, controlled_grads, grad_state, graph_leaves, label, nested_grads, unique_params
from ._core.elsewhere import noted_other, other_objective
from ._core.frozen import check_frozen, declared
from ._core.invariance import loss_depends
from ._core.rebound import rebound, written_by_program
from ._core.state import guarded
from ._core.trace import tensors
from ._core.user_hooks import reports_user_hooks

__all__ = ["reachability"]

_NAME = "reachability"
_EFFECTS = "none"  # one forward pass + autograd.grad (no .grad written) under guarded(); hooks removed in finally
_ROOT = "(root module)"


@reports_user_hooks
def reachability(model: nn.Module, batch: Any = None, loss_fn: Callable[[Any, Any], torch.Tensor] | None = None, *,
                 loss: torch.Tensor | None = None, frozen: tuple[str, ...] = (),
                 optimizer: torch.optim.Optimizer | None = None, train_step: Callable[[], Any] | None = None) -> Report:
    """For every parameter: is it on the loss's autograd graph, and what gradient does it get?

    Give ``batch`` (``(inputs, targets)`` or a dict) and ``loss_fn`` to trace one forward pass and name, for each
    unreachable parameter, the module boundary where its dependency path stops and why; or give ``loss=`` a loss tensor
    from your own forward pass to walk its graph only (cause not localized). The user's objects are left as found:
    gradients come from ``torch.autograd.grad`` (``.grad`` is not written) under a guard that restores buffers, RNG
    states and grad mode. ``frozen``: fnmatch patterns of the parameter names frozen on purpose (as four_structures
    takes them); a declared-frozen parameter with requires_grad=False is a note, an undeclared one a WARN.
    ``optimizer`` and ``train_step``: a parameter the optimizer does not own and another optimizer the step reaches
    trains is trained by another objective: no gradient from this loss is a note there (``_core.elsewhere``).
    """
    mode = _validated(model, batch, loss_fn, loss, optimizer, train_step)
    intent = declared(model, check_frozen(frozen))
    if not mode:
        return skipped(_NAME, "reachability needs a loss: pass batch and loss_fn (reachability(model, batch, loss_fn)) "
                              "or a loss tensor (reachability(model, loss=loss))")
    params = unique_params(model)
    if not params:
        return skipped(_NAME, "the model has no parameters, so no parameter can be reached; pass the module that owns "
                              "the trainable parameters")
    with guarded(model):
        tracer = None
        if mode == "batch":
            try:
                tracer, loss = _traced_loss(model, batch, loss_fn)
            except _batch.UserCodeError as exc:
                return skipped(_NAME, f"{exc}; reachability needs one forward pass and loss that run")
            if not isinstance(loss, torch.Tensor):
                return skipped(_NAME, f"{_batch.loss_problem(loss)}; reachability needs the loss tensor to walk its graph")
        assert loss is not None
        reached = set(graph_leaves([loss.grad_fn])) if loss.grad_fn is not None else set()
        checks = _loss_check(loss, reached, params, tracer is not None)
        # every trainable parameter, not only those the walk reached: a custom autograd Function (reversible layers
        # recomputing their forward in backward) delivers gradients the walk cannot see
        off_walk = [p for p, _ in params if p.requires_grad and id(p) not in reached]
        nested = nested_grads(loss, off_walk) if off_walk and loss.grad_fn is not None else {}
        grads = {**controlled_grads(loss, [p for p, _ in params if p.requires_grad], checks), **nested}  # graph kept: cancelled
        taint = tracer.info.get(id(loss), (None, frozenset()))[1] if tracer else frozenset()
        explain = (lambda p, names: _explain(p, names, tracer, taint)) if tracer else None
        empty = [names[0] for p, names in params if id(p) in grads and grad_state(grads[id(p)])[0] in ("zero", "none")]
        depends = loss_depends(model, batch, loss_fn, empty) if empty and mode == "batch" else {}
        cancel = cancelled(loss, [p for p, n in params if depends.get(n[0]) and id(p) in reached])  # a zero that cancels
        checks = written_by_program(checks + _cut_first([_param_check(p, n, reached, grads, explain, id(p) in intent,
                                                                      depends, cancel.get(id(p))) for p, n in params]),
                                    rebound(model, params))
        checks = noted_other(checks, lambda: other_objective(train_step, optimizer, model), ("reachability.",))
        details = {"parameters": len(params), "reached": sum(id(p) in reached for p, _ in params),
                   "modules_ran": sorted(k or _ROOT for k in tracer.modules) if tracer else [],
                   "cuts": [{"op": c.op, "grad_enabled": c.grad_enabled, "dtype": c.dtype, "origin": c.origin}
                            for c in tracer.cuts[:20]] if tracer else []}
        if notes := [c.finding.message for c in checks if c.finding.message.startswith("note: ")]:
            details["notes"] = notes
    return compose(_NAME, checks, _EFFECTS, details)


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    if name == "__get__":  # a property such as Tensor.data
        return f"Tensor.{getattr(getattr(func, '__self__', None), '__name__', '?')}"
    owner = getattr(func, "__objclass__", None)
    return f"Tensor.{name}" if owner is not None and "Tensor" in owner.__name__ else f"torch.{name}"


@dataclass
class _Cut:
    """An operation whose inputs required grad and whose outputs do not: the dependency stops here."""

    index: int
    op: str
    grad_enabled: bool
    dtype: str
    integer: bool
    stack: tuple[tuple[str, bool], ...]  # (module path, grad mode at its call), outermost first
    origin: str | None  # module whose output (or something derived from it) was cut
    roots: list[Any] = field(repr=False)  # grad_fn of non-leaf inputs, leaf tensors themselves
    _leaves: set[int] | None = field(default=None, repr=False)

    def leaves(self) -> set[int]:
        if self._leaves is None:
            fns = [r for r in self.roots if not isinstance(r, torch.Tensor)]
            self._leaves = set(graph_leaves(fns)) | {id(r) for r in self.roots if isinstance(r, torch.Tensor)}
        return self._leaves


class _Tracer(TorchFunctionMode):
    """Records cuts, the cuts each tensor's value flowed through (taint), and which module produced it."""

    def __init__(self) -> None:
        super().__init__()
        self.info: dict[int, tuple[torch.Tensor, frozenset[int], str | None, bool]] = {}
        self.cuts: list[_Cut] = []
        self.stack: list[tuple[str, bool]] = []
        self.modules: dict[str, dict[str, Any]] = {}
        self.paused = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        ins = list(tensors((args, kwargs)))
        req = [t for t in ins if t.requires_grad]
        roots = [t if t.grad_fn is None else t.grad_fn for t in req]  # before the call: detach_ mutates in place
        out = func(*args, **kwargs)
        outs = list(tensors(out))
        if not outs:
            return out
        known = [self.info[id(t)] for t in req + ins if id(t) in self.info]
        taint = frozenset().union(*(k[1] for k in known)) if known else frozenset()
        origin = next((k[2] for k in known if k[2] is not None), None)
        name = _op_name(func)
        if req and not any(o.requires_grad for o in outs) and not name.endswith("_like") and ".new_" not in name:
            dtype = outs[0].dtype
            self.cuts.append(_Cut(len(self.cuts), name, torch.is_grad_enabled(), str(dtype).replace("torch.", ""),
                                  not (dtype.is_floating_point or dtype.is_complex), tuple(self.stack), origin, roots))
            taint = taint | {len(self.cuts) - 1}
        for o in outs:
            self.info[id(o)] = (o, taint, origin, False)
        return out

    def pre_hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.stack.append((path, torch.is_grad_enabled()))
        return hook

    def post_hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.paused = True
            try:
                if self.stack and self.stack[-1][0] == path:
                    self.stack.pop()
                rec = self.modules.setdefault(path, {"calls": 0, "grad_enabled": [], "output_requires_grad": [],
                                                     "output_dtypes": []})
                outs = list(tensors(output))
                rec["calls"] += 1
                rec["grad_enabled"].append(torch.is_grad_enabled())
                rec["output_requires_grad"].append(any(o.requires_grad for o in outs))
                rec["output_dtypes"].append(sorted({str(o.dtype).replace("torch.", "") for o in outs}))
                for o in outs:
                    _, taint, origin, hooked = self.info.get(id(o), (o, frozenset(), None, False))
                    inner = hooked and origin is not None and (path == "" or origin.startswith(path + "."))
                    self.info[id(o)] = (o, taint, origin if inner else path, True)
            finally:
                self.paused = False
        return hook


def _traced_loss(model: nn.Module, batch: Any, loss_fn: Callable) -> tuple[_Tracer, Any]:
    tracer = _Tracer()
    handles = []
    try:
        for path, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(tracer.pre_hook(path)))
            handles.append(module.register_forward_hook(tracer.post_hook(path)))
        with torch.enable_grad(), tracer:
            _, loss = _batch.compute_loss(model, batch, loss_fn)
    finally:
        for h in handles:
            h.remove()
    return tracer, loss


# --- explaining an unreachable parameter -------------------------------------------------------------------------


def _cut_first(checks: list[Check]) -> list[Check]:
    """FAILs of parameters inside the module whose output was cut first (it names the cut); else the model's order."""
    return sorted(checks, key=lambda c: not (c.finding.status is Status.FAIL and c.finding.evidence.get("cause") in
                                              _VALUE_REACHED and c.finding.where.startswith(
                                                  (c.finding.evidence.get("boundary") or "\0") + ".")))


def _cause_of(cut: _Cut) -> str:
    return "no_grad" if not cut.grad_enabled else "integer_cast" if cut.integer else "detached"


def _rank(cut: _Cut) -> tuple[int, int]:
    if not cut.grad_enabled or "detach" in cut.op or cut.op == "Tensor.data":
        return 0, cut.index
    if cut.integer:
        casts = ("to", "type", "long", "int", "short", "byte", "char", "bool")
        return (1 if cut.op.split(".")[-1] in casts else 2), cut.index
    return 3, cut.index


def _boundary_of(cut: _Cut) -> str:
    if not cut.grad_enabled:
        return next((path for path, enabled in cut.stack if not enabled), cut.stack[-1][0] if cut.stack else "loss_fn")
    if cut.origin is not None:
        return cut.origin
    return cut.stack[-1][0] if cut.stack else "loss_fn"


def _owner_chain(name: str) -> list[str]:
    parts = name.split(".")[:-1]
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _explain(p: nn.Parameter, names: list[str], tracer: _Tracer, loss_taint: frozenset[int]) -> tuple[str, str, dict]:
    """(cause, boundary, extra evidence) for a trainable parameter the loss graph does not reach."""
    cuts = sorted((tracer.cuts[i] for i in loss_taint if id(p) in tracer.cuts[i].leaves()), key=_rank)
    if cuts:
        cut = cuts[0]
        inside = cut.stack[-1][0] if cut.stack else "loss_fn"
        return _cause_of(cut), _boundary_of(cut), {"op": cut.op, "op_output_dtype": cut.dtype,
                                                   "grad_enabled": cut.grad_enabled,
                                                   "inside": inside or _ROOT, "cuts_considered": len(cuts)}
    nevers = [next((m for m in _owner_chain(n) if tracer.modules.get(m, {}).get("calls", 0) == 0), None) for n in names]
    if all(m is not None for m in nevers):
        return "not_executed", str(nevers[0]), {"calls": 0}
    owner = names[0].rpartition(".")[0]
    rec = tracer.modules.get(owner, {})
    return "unused", owner, {"calls": rec.get("calls", 0), "grad_enabled": rec.get("grad_enabled", []),
                             "output_requires_grad": rec.get("output_requires_grad", [])}


#: causes where the parameter's value was traced into the loss through an op that carries no gradient: the loss
#: depends on it and the gradient path is cut (a confirmed defect); the other causes are unused parameters
_VALUE_REACHED = ("detached", "no_grad", "integer_cast")

#: cause -> (why, hint)
_CAUSES = {
    "detached": ("its value reached the loss only through {op} (detach/.data), which cuts the graph",
                 "remove the .detach()/.data on the training path"),
    "no_grad": ("it was used with grad mode disabled (torch.no_grad or inference_mode) in {inside}, op {op}",
                "move the torch.no_grad() block off the training path (or call the module outside it)"),
    "integer_cast": (("its value reached the loss only through {op} with {op_output_dtype} output (integers carry no "
                      "gradient)"), "keep the activation floating-point; round/cast only outside the training path"),
    "not_executed": ("module {boundary} never ran in this forward pass",
                     "call the module in forward, or remove it (and its parameters) from the model"),
    "unused": ("module {boundary} ran {calls} time(s) but nothing computed from this parameter reached the loss",
               "use the module's output in the loss, or remove the module"),
    "unreached": ("not in the loss graph (only a loss tensor was given, so the cause cannot be localized)",
                  "pass batch and loss_fn instead of a loss tensor to localize the boundary"),
    "cut": ("", "find the .detach()/.data/.item() between this module's output and the loss; keep it off the training path"),
}


# --- the per-parameter checks ------------------------------------------------------------------------------------


def _param_check(p: nn.Parameter, names: list[str], reached: set[int], grads: dict[int, Any],
                 explain: Callable[[nn.Parameter, list[str]], tuple[str, str, dict]] | None, declared_frozen: bool = False,
                 depends: dict[str, bool | None] | None = None, cancel: tuple[bool | None, int] | None = None) -> Check:
    """One parameter's finding; ``depends``: whether the loss depends on it (a counterfactual), per name; ``cancel``:
    whether its zero gradient is a cancellation between its uses (:func:`cancelled`) and how many uses it has."""
    depends = depends or {}
    where, owner = names[0], names[0].rpartition(".")[0]
    ev: dict[str, Any] = {"requires_grad": bool(p.requires_grad), "is_leaf": bool(p.is_leaf), "reached": id(p) in reached}
    ev.update({"names": names} if len(names) > 1 else {})
    if not p.requires_grad:
        ev.update(boundary=owner, cause="requires_grad_false", declared_frozen=declared_frozen)
        if declared_frozen:
            return check(where, "reachability.declared_frozen", Status.PASS,
                         f"note: {label(names)}: requires_grad=False, declared frozen: it receives no gradient, as declared", ev)
        return check(where, "reachability.requires_grad_false", Status.WARN,
                     f"{label(names)}: requires_grad=False (frozen); it cannot receive a gradient", ev)
    if id(p) in reached:
        state, gnorm = grad_state(grads.get(id(p))) if id(p) in grads else ("unknown", None)
        ev.update(grad=state, grad_norm=gnorm)
        if state in ("zero", "none") and depends.get(where) is not True:
            ev.update(boundary=owner, cause="zero_gradient", loss_depends=depends.get(where))
            return check(where, "reachability.zero_gradient", Status.WARN,
                         f"{label(names)}: in the loss graph but its gradient is {'exactly zero' if state == 'zero' else 'None'}"
                         ", and " + ("the loss does not depend on it at these weights (perturbing it on a copy leaves "
                                     "the loss unchanged: a zero-initialized layer downstream, a term that cancels)"
                                     if depends.get(where) is False else "whether the loss depends on it was not checked "
                                     "(give batch and loss_fn)"), ev)
        if state == "zero" and cancel is not None and cancel[0]:
            return cancelled_check(where, label(names), dict(ev, boundary=owner, loss_depends=True), cancel[1])
        if state in ("zero", "none"):
            ev.update(boundary=owner, cause="zero_gradient", loss_depends=True, cancels=None if cancel is None else cancel[0])
            return check(where, "reachability.zero_gradient", Status.FAIL,
                         f"{label(names)}: in the loss graph but its gradient is {'exactly zero' if state == 'zero' else 'None'}",
                         ev, expected="a nonzero gradient", observed=state,
                         hint="a zero factor, dead units or a constant downstream of this parameter")
        if state == "nonfinite":
            return check(where, "reachability.nonfinite_gradient", Status.WARN,
                         f"{label(names)}: reached, but its gradient has NaN/inf values", ev)
        return check(where, "reachability.reached", Status.PASS, f"{label(names)}: reached, grad {state}"
                     + (f" (norm {gnorm:.4g})" if gnorm is not None else ""), ev)
    if id(p) in grads and grad_state(grads[id(p)])[0] in ("nonzero", "nonfinite"):  # a custom autograd function
        return check(where, "reachability.reached", Status.PASS, f"{label(names)}: not on the graph the walk sees, but "
                     "backward delivers its gradient: reached through a custom autograd function that rebuilds its "
                     "graph in backward (reversible layers, checkpointing)", dict(ev, grad=grad_state(grads[id(p)])[0]))
    return _unreached(p, names, explain, depends.get(where), ev)


def _unreached(p: nn.Parameter, names: list[str], explain: Callable[[nn.Parameter, list[str]], tuple[str, str, dict]] | None,
               depends: bool | None, ev: dict[str, Any]) -> Check:
    """An unreached trainable parameter: why, and whether its value reaches the loss (``depends``, None: not run)."""
    cause, boundary, extra = explain(p, names) if explain else ("unreached", names[0].rpartition(".")[0], {})
    ev.update(extra, boundary=boundary, cause=cause, grad="none")
    why = _CAUSES[cause][0].format(boundary=boundary or _ROOT, **{"op": "", "inside": "", "op_output_dtype": "", "calls": 0,
                                                           **extra})
    if cause not in _VALUE_REACHED and depends:  # the trace saw no cut, the counterfactual shows one
        cause, why = "cut", (f"its value reaches the loss (perturbing it on a copy moves the loss) but no gradient path "
                             f"does: {why}, so its output is cut from the graph on the way (a .detach(), .data, .item() "
                             "or numpy round trip)")
        ev.update(cause=cause, loss_depends=True)
    if cause not in _VALUE_REACHED + ("cut",):  # nothing computed from it reached the loss: unused, by design or not
        ev["loss_depends"] = depends
        return check(names[0], f"reachability.{cause}", Status.WARN,
                     f"{label(names)}: not reached from the loss; {why}. " + ("Its value never reaches the loss either "
                     "(perturbing it on a copy leaves the loss unchanged), so " if depends is False else
                     "Whether its value reaches the loss was not checked; ") + "whether it should is the program's "
                     "intent: declare it with frozen=[...] if it is unused by design", ev, hint=_CAUSES[cause][1])
    return check(names[0], f"reachability.{cause}", Status.FAIL,
                 f"{label(names)}: not reached from the loss; path stops at {boundary or _ROOT}: {why}", ev,
                 expected="loss depends on this parameter", observed=f"no path ({cause} at {boundary or _ROOT})",
                 hint=_CAUSES[cause][1])


def _loss_check(loss: torch.Tensor, reached: set[int], params: list, traced: bool) -> list[Check]:
    trainable = sum(p.requires_grad for p, _ in params)
    ev = {"requires_grad": bool(loss.requires_grad), "grad_fn": type(loss.grad_fn).__name__ if loss.grad_fn else "None",
          "dtype": str(loss.dtype).replace("torch.", ""), "shape": list(loss.shape),
          "parameters_reached": sum(id(p) in reached for p, _ in params), "parameters": len(params), "trainable": trainable}
    value = float(loss.detach().reshape(())) if loss.numel() == 1 and loss.is_floating_point() else None
    ev.update({"loss": value if math.isfinite(value) else str(value)} if value is not None else {})
    out = [check("loss", "reachability.loss_graph", Status.WARN, f"loss has no grad_fn (requires_grad="
                 f"{loss.requires_grad}): no parameter can receive a gradient", ev) if loss.grad_fn is None else
           check("loss", "reachability.loss_graph", Status.PASS,
                 f"loss {ev['grad_fn']} reaches {ev['parameters_reached']} of {len(params)} parameters", ev)]
    if loss.numel() != 1:
        out.append(check("loss", "reachability.loss_not_scalar", Status.WARN,
                         f"loss has shape {tuple(loss.shape)}, not a scalar; gradients computed for loss.sum()", ev))
    if not traced:
        out.append(check("loss", "reachability.boundary", Status.SKIPPED,
                         "only a loss tensor was given: no forward hooks possible, so an unreachable parameter is "
                         "located at its own module with cause unknown; pass batch and loss_fn to localize it"))
    return out


def _validated(model: Any, batch: Any, loss_fn: Any, loss: Any, optimizer: Any, train_step: Any) -> str:
    _batch.check_model(model)
    if optimizer is not None:
        _batch.check_optimizer(optimizer)
    if train_step is not None:
        _batch.check_callable(train_step, "train_step")
    if loss is not None:
        if batch is not None or loss_fn is not None:
            raise InvalidArgument("Expected either `loss` or `batch` and `loss_fn` but got both")
        if not isinstance(loss, torch.Tensor):
            raise InvalidArgument(f"Expected `loss` to be a torch.Tensor but got {type(loss).__name__}")
        return "loss"
    if batch is None or loss_fn is None:
        return ""
    _batch.check_loss_fn(loss_fn)
    _batch.split_batch(batch, model)
    return "batch"
