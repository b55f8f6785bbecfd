"""CNN shape ledger (appendix section 8): derive the geometry before each layer runs, compare with what it
produced, and name the first disagreement.

Two questions kept apart: the CHANNEL question (C_in -> C_out, declared by the layer) and the SPATIAL question
(L / H, W / D, H, W in -> out, derived from kernel, stride, padding, dilation, output size or scale). Before each
layer runs (a forward pre-hook) the expected output is derived from the observed input and the layer's
hyperparameters, and the input is checked against what the layer declares (``in_channels``, ``num_features``,
``in_features``, ``normalized_shape``, rank); after it runs (a forward hook) the observed output is compared with
the derived one. Covered: Conv1d/2d/3d, ConvTranspose1d/2d/3d, Max/Avg/LP pooling, adaptive pooling, Flatten,
Unflatten, Linear, Upsample, PixelShuffle/Unshuffle, padding layers, Embedding, and the pass-through layers
(BatchNorm, GroupNorm, LayerNorm, InstanceNorm, activations, Dropout, Identity). Functional ``flatten``, pooling
and ``interpolate`` called in a model's own ``forward`` are derived too; ``view``/``reshape``/``permute``/``cat``
are recorded as observed.

The ledger rows are: stage, operation, observed input, expected output, observed output.

"mat1 and mat2 shapes cannot be multiplied" at a Linear after a flatten is derived backward: ``in_features`` is
compared with the flattened C*H*W that arrived, the factorizations ``in_features`` admits given the recorded H, W
(or C) say whether the channel count or the spatial size differs, and the last earlier layer that set that
quantity is the ``culprit`` (e.g. ``conv2``). Never repair the final Linear first.

A shape ledger proves composition; it does not prove that height and width were not swapped or that the
preprocessing kept meaning (``tensor_trace`` contracts and ``stage_trace`` do that). The forward pass runs once on
the user's model under a guard (buffers, RNG states and grad mode restored, hooks removed).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...report import Report, Status, skipped
from .._core.batch import check_model
from .._core.checks import Check, check, compose
from .._core.state import guarded
from .._core.trace import Recorder, call_args, exception_line
from .._core.user_hooks import reports_user_hooks
from ._flatten_culprit import functional_linear, input_check
from ._geometry import OP_FUNCS, PASS_NAMES, Entry, Ledger

__all__ = ["shape_ledger"]

_NAME = "shape_ledger"
_NOTHING_DERIVED = ("no shape-changing layer ran (Conv, pooling, Flatten, Linear, Upsample, padding, Embedding): the "
                    "ledger derives geometry from those layers' hyperparameters; for other models declare axis contracts "
                    "with tensor_trace(model, inputs, contracts=...)")


@reports_user_hooks
def shape_ledger(model: nn.Module, inputs: Any) -> Report:
    """Derive every layer's output geometry before it runs and compare with what it produced.

    Args:
        model: the ``nn.Module`` (run once under a guard; left as found).
        inputs: a tensor (``model(x)``), a tuple of positional args or a dict of keyword args.

    Returns a Report: ``details["ledger"]`` lists rows ``stage, operation, observed_input, expected_output,
    observed_output, status``; the first divergence names the first layer whose derived and observed geometry
    disagree (``shape.mismatch``), or the Linear after a flatten whose ``in_features`` does not match the arriving
    C*H*W (``shape.flatten_mismatch``, evidence ``culprit`` = the earlier layer that changed C or H, W).
    """
    check_model(model)
    args, kwargs = call_args(inputs)
    ledger = Ledger()
    rec = Recorder(model, watch={f: ledger.op for f in OP_FUNCS}, on_pre=ledger.pre, on_post=ledger.post)
    with guarded(model):
        _, exc = rec.run(model, args, kwargs)
    entries = ledger.entries
    checks = _findings(entries)
    if exc is not None and any(c.finding.status is Status.FAIL for c in checks):
        checks.append(_raised_after(rec, exc))
    elif exc is not None:
        checks.append(functional_linear(rec, entries) or _raised(rec, exc, entries))
    details = {"ledger": [e.row() for e in entries], "raised": exc is not None}
    if rec.internal_errors:
        details["internal_errors"] = rec.internal_errors[:10]
    if exc is None and not any(e.expected_output is not None and e.operation.split("(")[0] not in PASS_NAMES
                               for e in entries):
        return skipped(_NAME, _NOTHING_DERIVED, not_applicable=True, **details)  # nothing of its kind here
    return compose(_NAME, checks, "none", details)


def _findings(entries: list[Entry]) -> list[Check]:
    out: list[Check] = []
    failed = False
    for e in entries:
        if e.expected_output is None and not e.problem:
            continue
        ev = e.row()
        if failed:
            out.append(check(e.stage, "shape.after_divergence", Status.SKIPPED, f"{e.operation}: after the first divergence", ev))
        elif e.problem:
            out.append(input_check(entries, e))
            failed = True
        elif e.ran and e.observed_output != e.expected_output:
            out.append(check(e.stage, "shape.mismatch", Status.FAIL,
                             f"{e.stage} {e.operation}: derived {e.expected_output} from input {e.observed_input}, "
                             f"observed {e.observed_output}", ev, expected=e.expected_output, observed=e.observed_output,
                             hint="this layer computes a different geometry than its hyperparameters say (custom forward "
                                  "or padding); derive it by hand and repair here"))
            failed = True
        elif e.ran:
            out.append(check(e.stage, "shape.derived", Status.PASS,
                             f"{e.operation}: {e.observed_input} -> {e.observed_output} (derived)", ev))
    return out


def _raised(rec: Recorder, exc: Exception, entries: list[Entry]) -> Check:
    where, ev = rec.failure_evidence(exc, last_rows=[e.row() for e in entries[-4:]])
    return check(where, "shape.forward_raised", Status.FAIL, f"forward raised inside {where or '(model)'}: {ev['exception']}",
                 ev, expected="the forward pass completes", observed=ev["exception"],
                 hint="no layer before the failure disagreed with its derived geometry: the failure is in code the "
                      "ledger does not derive (look at the failing op's input shapes)")


def _raised_after(rec: Recorder, exc: Exception) -> Check:
    """The forward raised after an earlier layer already diverged: noted, not analysed."""
    stack = rec.stack_at(exc)
    return check(stack[-1] if stack else "", "shape.forward_raised", Status.FAIL,
                 f"then the forward raised: {exception_line(exc)}", {"exception": exception_line(exc)},
                 expected="the forward pass completes", observed=exception_line(exc))
