"""Tensor trace (appendix section 2): find the first wrong tensor, not the first illegal one.

One forward pass is recorded at every module boundary (input and output of each registered module) and
at every functional op (``F.relu``, ``torch.cat``, ``view``/``permute``/``reshape``/``transpose``,
``matmul``, ``softmax`` ...), each op attributed to the innermost running module (``op:<name>@<module
path>``): shape, dtype, device, stride and contiguity, never values. Against that ledger:

- **Named-axis contracts** ``{module path: "B T D"}`` (``""`` = the model's output) are checked on each
  call's output without editing the model. Names are bound on first sight ("B" takes the size of the
  first tensor that has it; later tensors must agree), integers are literal sizes, ``...`` stands for any
  number of axes. The first violated contract in execution order is a ``contract.axis_mismatch``.
- **Values moved across axes** (``layout.values_moved``). A tensor can have the right shape and the wrong
  meaning; random numbers hide that, arange values show it. Two probes:

  1. *Reshape check (every trace, costs nothing).* Each ``view``/``reshape``/``flatten``/``unflatten``
     (chains of them composed) is analysed as ``arange(input).reshape(output)``: in row-major order, input
     axis ``j`` occupies the flat-index digits ``[stride_j, stride_j * n_j)``. An input axis is *cut* when
     its digits do not fall inside one output axis: its values are spread over several output axes. A
     reshape is flagged when an input axis of size ``n`` is cut **and** an output axis of the same size
     ``n`` is not that axis (it holds pieces of other axes): the output has an axis that looks like the
     input's axis but is not. This is exactly the merge-heads bug ``[B, H, T, Dh] -> view(B, T, H*Dh)``
     (T is cut into (T/H, H); the output's "T" axis holds (H, T/H)), HWC read as CHW with ``reshape``, and
     NCHW -> NHWC by ``view``. Merges of adjacent axes, splits of one axis and a permute followed by a merge
     are never flagged; a split-then-merge whose sizes do not coincide with a cut axis is not flagged
     either (``[T, B, E] -> [T, B*H, Dh]`` is legitimate), so the rule errs towards silence. Ops inside
     ``torch.nn``'s own modules (``nn.MultiheadAttention``) are trusted and not checked.
  2. *Arange probe (``layout_probe=True``).* On a deep copy, every user-defined module whose output is a
     rearrangement of one of its float inputs (same number of elements, same sorted values) is run again
     on ``arange`` values in that input's place, which gives the exact map "output position <- input
     position". The same criterion is applied to that map (an input axis cut across output axes while an
     output axis of its size walks other axes), which catches rearrangements made by indexing, ``cat`` or
     ``as_strided`` rather than ``reshape``. Modules that only permute axes are legitimate (a transpose is a
     choice only a contract can judge: declare one).

If the forward pass raises, the report still holds the ledger up to the failure (``trace.forward_raised``,
``where`` = the innermost module running when it raised, evidence = the exception and the last rows).
The user's model is run once under a guard (buffers, RNG states and grad mode restored, hooks removed);
the arange probe runs on a deep copy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status
from .._core.batch import fresh
from .._core.checks import Check, check, compose
from .._core.state import guarded
from .._core.trace import Recorder, call_args, refused_inputs, refused_message, tensors
from .._core.user_hooks import reports_user_hooks
from ._contracts import Spec, contract_checks, parse_contracts
from ._layout import ReshapeWatch as _ReshapeWatch  # the name benchmarks/trace_overhead.py imports
from ._layout import arange_probe, examples_mixed, moved_by_reshape, output_crosstalk

__all__ = ["moved_by_reshape", "tensor_trace"]  # moved_by_reshape: re-exported from _layout (the reshape rule alone)

_NAME = "tensor_trace"
_MAX_DETAIL_ROWS = 5000


@reports_user_hooks
def tensor_trace(model: nn.Module | Callable[..., Any], inputs: Any, *, contracts: dict[str, Any] | None = None,
                 layout_probe: bool = True, batch_axis: int = 0) -> Report:
    """Trace one forward pass: shape, dtype, device, stride and contiguity at every module boundary and
    functional op; check named-axis contracts; report the first tensor whose axes or layout diverge.

    Args:
        model: an ``nn.Module`` or any callable (then only functional ops are seen, unless it is a bound
            method of a module).
        inputs: a tensor (``model(x)``), a tuple of positional args or a dict of keyword args.
        contracts: ``{module path: "B T D"}`` on that module's output (``""`` = the model's output); a list of
            strings checks a module's several output tensors in order.
        layout_probe: also run the arange probe on a deep copy (module docstring, probe 2).
        batch_axis: the axis of the first input tensor that holds the examples: values moved across an axis of that
            size (examples mixed) FAIL; moved only among other axes (patches to image, a relative-position shift) is
            a rearrangement that may be the design: a WARN.

    Returns a Report whose ``details["rows"]`` is the ledger (JSON-safe rows: ``where``, ``event``, ``op``,
    ``shape``, ``dtype``, ``device``, ``stride``, ``contiguous``), ``details["bindings"]`` the axis sizes bound.
    """
    fn, root = _model(model)
    args, kwargs = call_args(fresh(inputs))  # the model may write its inputs in place: never the user's
    specs = parse_contracts(contracts, root)
    if not isinstance(layout_probe, bool):
        raise InvalidArgument(f"Expected `layout_probe` to be a bool but got {type(layout_probe).__name__}")
    rec = Recorder(root)
    reshapes = _ReshapeWatch(rec.rows)
    rec.watch = reshapes.watch()
    with guarded(*([root] if root is not None else [])):
        output, exc = rec.run(fn, args, kwargs)
        if exc is None and fn is not root:
            rec.record_output(output)
        order = _first_outputs(rec)
        probe_found, probe = arange_probe(root, args, kwargs, order) if layout_probe and root is not None else ([], {})
    first = next(tensors(args), None)
    examples = first.shape[batch_axis] if first is not None and -first.dim() <= batch_axis < first.dim() else None
    crosses = functools.cache(lambda: output_crosstalk(root, fn, args, kwargs, batch_axis, examples))
    return _report(rec, exc, specs, reshapes, [(i, examples_mixed(c, examples, crosses)) for i, c in probe_found], probe,
                   layout_probe, examples, crosses)


def _model(model: Any) -> tuple[Callable[..., Any], nn.Module | None]:
    if isinstance(model, nn.Module):
        return model, model
    if not callable(model):
        raise InvalidArgument(f"Expected `model` to be a torch.nn.Module or a callable but got "
                              f"{'None' if model is None else type(model).__name__}")
    owner = getattr(model, "__self__", None)  # a bound method of a module, e.g. model.generate
    return model, owner if isinstance(owner, nn.Module) else None


def _first_outputs(rec: Recorder) -> dict[str, int]:
    """Module path -> the index of its first output row (the arange probe's findings sort by it)."""
    order: dict[str, int] = {}
    for i, row in enumerate(rec.rows):
        if row[0] == "output":
            order.setdefault(row[1], i)
    return order


# --- the report ----------------------------------------------------------------------------------------------------


def _failure_check(rec: Recorder, exc: Exception) -> Check:
    last = [f"{r['where']} {r['event']} {r['shape']} {r['dtype']}"
            for r in Recorder.plain(rec.rows[-5:], max(0, len(rec.rows) - 5))]
    where, ev = rec.failure_evidence(exc, rows_recorded=len(rec.rows), last_rows=last)
    if refused_inputs(where, exc):
        return check(where, "trace.inputs_refused", Status.SKIPPED, refused_message(exc), ev)
    return check(where, "trace.forward_raised", Status.FAIL,
                 f"forward raised inside {where or '(model)'}: {ev['exception']}", ev,
                 expected="the forward pass completes", observed=ev["exception"],
                 hint="the ledger up to the failure is in details['rows']; find the first row whose shape or layout "
                      "disagrees with what you intended, not the row that raised")


def _summary(rows: list, exc: Exception | None, reshapes: _ReshapeWatch) -> list[tuple[int, Check]]:
    """The PASS findings that say what was recorded and how many reshapes were checked."""
    modules = sum(r[0] == "output" for r in rows)
    ops = sum(r[0] == "op" for r in rows)
    out = [(-1, check("", "trace.forward", Status.PASS,
                      f"{modules} module outputs and {ops} op outputs recorded" + ("" if exc is None else " before the failure"),
                      {"module_outputs": modules, "op_outputs": ops, "rows": len(rows)}))]
    if not reshapes.flagged:
        out.append((len(rows), check("", "layout.reshapes", Status.PASS,
                                     f"{reshapes.checked} reshape/view ops checked: none moved values across axes",
                                     {"checked": reshapes.checked})))
    return out


def _probe_check(probe: dict, found: int) -> Check:
    """The arange probe's own finding: SKIPPED when the model could not be copied, else what it probed."""
    status = Status.SKIPPED if "skipped" in probe else Status.PASS
    text = probe.get("skipped") or (f"arange probe on a deep copy: {len(probe['rearrangements'])} module(s) rearrange "
                                    f"an input ({', '.join(probe['rearrangements'][:5]) or 'none'}), "
                                    f"{found} moved values across axes"
                                    + ("; stopped where the forward raised" if "stopped" in probe else ""))
    return check("", "layout.probe", status, text, probe)


def _report(rec: Recorder, exc: Exception | None, specs: dict[str, list[Spec]], reshapes: _ReshapeWatch,
            probe_found: list[tuple[int, Check]], probe: dict, layout_probe: bool, examples: int | None,
            crosses: Callable[[], bool | None]) -> Report:
    """Every finding placed at its row in execution order; the first FAIL is the first divergence."""
    rows = rec.rows
    ordered, bindings = contract_checks(rows, specs)
    flagged_paths = {c.finding.where for _, c in reshapes.flagged}
    ordered += [(i, examples_mixed(c, examples, crosses)) for i, c in reshapes.flagged] + [(i, c) for i, c in probe_found if c.finding.where not in flagged_paths]
    ordered += _summary(rows, exc, reshapes)
    if layout_probe and probe:
        ordered.append((len(rows), _probe_check(probe, len(probe_found))))
    if exc is not None:
        ordered.append((len(rows) + 1, _failure_check(rec, exc)))
    if rec.internal_errors:
        ordered.append((len(rows) + 2, check("", "trace.internal", Status.SKIPPED, "some checks could not run: "
                                             + "; ".join(rec.internal_errors[:3]), {"errors": rec.internal_errors[:10]})))
    ordered.sort(key=lambda pair: pair[0])
    details = {"rows": Recorder.plain(rows[:_MAX_DETAIL_ROWS]), "rows_total": len(rows), "bindings": bindings,
               "contracts": {k: [s.text for s in v] for k, v in specs.items()}, "raised": exc is not None}
    return compose(_NAME, [c for _, c in ordered], "none", details)
