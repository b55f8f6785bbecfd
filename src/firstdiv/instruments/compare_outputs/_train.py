"""compare_outputs' ``mode="train"``: each variant runs one training forward (grad enabled, modules in the
training/eval flags they have) and, with ``loss=`` (a callable ``output -> scalar tensor``), one backward through
``torch.autograd.grad`` on the variant's parameters -- ``.grad`` is never written, so nothing accumulates on the
user's parameters. The gradients are compared per parameter name (as in the reference module's
``named_parameters()``): the first parameter whose gradient leaves the variant's tolerance is
``outputs.gradient_diverged`` at ``"<variant>:<parameter name>"``. A variant without parameters to differentiate
(a fresh-process reload, a callable, an int8 model's packed weights) is a SKIPPED gradient finding with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ...report import Status
from .._core.batch import describe_error
from .._core.checks import Check, check
from .._core.layers import orig_module
from .._core.outputs import Run, Tolerance, clone_tree, compare
from .._core.state import guarded
from ._diverged import g

NO_LOSS = "no loss= given"


def _params(variant: Any) -> list[tuple[str, torch.Tensor]]:
    root = orig_module(variant)
    if root is None:
        return []
    return [(n, p) for n, p in root.named_parameters() if p.requires_grad and p.is_floating_point()]


def _grads(variant: Any, output: Any, loss: Callable[[Any], Any]) -> tuple[dict[str, Any] | None, str]:
    params = _params(variant)
    if not params:
        return None, "no parameter requiring grad is reachable (not an nn.Module, a compiled or an exported module)"
    scalar = loss(output)
    if not torch.is_tensor(scalar) or scalar.numel() != 1:
        return None, f"loss(output) gave {type(scalar).__name__}{list(scalar.shape) if torch.is_tensor(scalar) else ''}, not a scalar tensor"
    if not scalar.requires_grad:
        return None, "loss(output) does not require grad (the variant's forward is not differentiable here)"
    found = torch.autograd.grad(scalar, [p for _, p in params], allow_unused=True)
    return {n: (None if d is None else d.detach().clone()) for (n, _), d in zip(params, found)}, ""


def call_train(variant: Any, args: tuple, kwargs: dict, loss: Callable[[Any], Any] | None) -> Run:
    """One training forward (and backward with ``loss``) inside ``guarded``: values, buffers (BatchNorm's running
    statistics), flags, hooks, RNG states and grad mode are restored."""
    module = variant if isinstance(variant, nn.Module) else None
    start = time.perf_counter()
    try:
        with guarded(*([module] if module is not None else [])), torch.enable_grad():
            out = variant(*clone_tree(args), **clone_tree(kwargs))
            grads, why = (None, NO_LOSS) if loss is None else _grads(variant, out, loss)
    except Exception as exc:  # noqa: BLE001 - a variant that raises on the fixed inputs is a finding
        return Run(error=describe_error(exc), seconds=time.perf_counter() - start)
    run = Run(_detached(out), "", time.perf_counter() - start)
    run.grads, run.grad_error = grads, why
    return run


def _detached(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach()
    if isinstance(value, Mapping):  # a ModelOutput too: its leaves keep their paths (output['logits'])
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_detached(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


def gradient_check(name: str, ref_name: str, ref: Run, run: Run, tol: Tolerance) -> Check:
    """The variant's parameter gradients against the reference's, per parameter name."""
    if ref.grads is None:
        return check(name, "outputs.gradient_diverged", Status.SKIPPED,
                     f"gradients not compared: the reference's: {ref.grad_error}", {"reason": ref.grad_error})
    if run.grads is None:
        return check(name, "outputs.gradient_diverged", Status.SKIPPED,
                     f"gradients not compared: {run.grad_error}", {"reason": run.grad_error})
    bad, rows = None, {}
    for pname, r in ref.grads.items():
        if pname not in run.grads:
            continue
        v = run.grads[pname]
        if r is None or v is None:
            ok = r is None and v is None
            rows[pname] = "unused in both" if ok else f"gradient {'None' if v is None else 'a tensor'} vs reference " \
                                                        f"{'None' if r is None else 'a tensor'}"
        else:
            summary = compare(r, v, tol).summary()
            ok = summary["tolerance_ratio"] != "inf" and float(summary["tolerance_ratio"]) <= 1 and "problems" not in summary
            rows[pname] = f"max abs error {g(summary['max_abs_error'])} ({g(summary['tolerance_ratio'])}x the tolerance)"
        if not ok and bad is None:
            bad = pname
    missing = [p for p in ref.grads if p not in run.grads]
    ev = {"parameters": len(ref.grads), "compared": len(rows), "missing_in_variant": missing[:10],
          "per_parameter": dict(list(rows.items())[:50])}
    if bad is None:
        note = f"; {len(missing)} parameter(s) absent from the variant" if missing else ""
        return check(name, "outputs.gradient_diverged", Status.PASS, f"parameter gradients of {len(rows)} parameter(s) "
                     f"within {tol.describe()} of {ref_name!r}{note}", ev)
    return check(f"{name}:{bad}", "outputs.gradient_diverged", Status.FAIL, f"gradient of {bad}: {rows[bad]}", ev,
                 expected=f"the gradient of every parameter within {tol.describe()} of {ref_name!r}",
                 observed=f"{bad}: {rows[bad]}",
                 hint="the forward agrees but the backward differs: compare backend='aot_eager' with the failing backend "
                      "(AOT autograd vs code generation), and check custom autograd Functions and in-place ops")
