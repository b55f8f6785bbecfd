"""CNN shape ledger (appendix section 8): derive the geometry before each layer runs, compare with what it
produced, and name the first disagreement.

Two questions kept apart: the CHANNEL question (C_in -> C_out, declared by the layer) and the SPATIAL question
(L / H, W / D, H, W in -> out, derived from kernel, stride, padding, dilation, output size or scale). Before each
layer runs (a forward pre-hook) the expected output is derived from the observed input and the layer's
hyperparameters, and the input is checked against what the layer declares (``in_channels``, ``num_features``,
``in_features``, ``normalized_shape``, rank); after it runs (a forward hook) the observed output is compared with
the derived one (channels and kernel from the weight the layer holds, a transposed conv's ``output_size``
included); a disagreement FAILs only when torch's forward of the layer's class, replayed on a meta copy of the layer,
gives the derived geometry (``_confirm``). Covered: Conv1d/2d/3d, ConvTranspose1d/2d/3d, Max/Avg/LP pooling, adaptive pooling, Flatten,
Unflatten, Linear, Upsample, PixelShuffle/Unshuffle, padding layers, Embedding, and the pass-through layers
(BatchNorm, GroupNorm, LayerNorm, InstanceNorm, activations, Dropout, Identity). Functional ``flatten``, pooling
and ``interpolate`` called in a model's own ``forward`` are derived too; ``view``/``reshape``/``permute``/``cat``
are recorded as observed.

The ledger rows are: stage, operation, observed input, expected output, observed output.

"mat1 and mat2 shapes cannot be multiplied" at a Linear after a flatten is derived backward: ``in_features`` is
compared with the flattened C*H*W that arrived, the factorizations ``in_features`` admits given the recorded H, W
(or C) say whether the channel count or the spatial size differs, and the last earlier layer that set that
quantity is the ``culprit`` (e.g. ``conv2``). Never repair the final Linear first.

A self-consistent network can still differ from its design (a head's ``in_features`` patched to whatever ran):
``designed={"layer4": (512, 7, 7), "avgpool": (512, 1, 1), "fc": (1000,)}`` (per-example output shapes by module
path) makes the first module whose output differs a ``shape.design_mismatch``, with the culprit layer since the
last designed output that matched. Conv/pooling windows whose last window stops before the input's edge leave rows
or columns never read (``shape.unread_pixels``: WARN, or as declared by ``unread=``); a stride longer than the
window (a 1x1 stride-2 shortcut) skips rows by design and is not flagged.

A shape ledger proves composition; it does not prove that height and width were not swapped or that the
preprocessing kept meaning (``tensor_trace`` contracts and ``stage_trace`` do that). The forward pass runs once on
the user's model under a guard (buffers, RNG states and grad mode restored, hooks removed).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status, skipped
from .._core.batch import check_model, fresh
from .._core.checks import Check, check, compose
from .._core.state import guarded
from .._core.trace import Recorder, call_args, exception_line, refused_inputs, refused_message
from .._core.user_hooks import reports_user_hooks
from ._confirm import Call, confirm
from ._design import design_checks, parse_designed, user_path
from ._flatten_culprit import functional_linear, input_check
from ._geometry import OP_FUNCS, PASS_NAMES, Entry, Ledger
from ._unread import VERDICTS, unread_check

__all__ = ["shape_ledger"]

_NAME = "shape_ledger"
_NOTHING_DERIVED = ("no shape-changing layer ran (Conv, pooling, Flatten, Linear, Upsample, padding, Embedding): the "
                    "ledger derives geometry from those layers' hyperparameters; for other models declare axis contracts "
                    "with tensor_trace(model, inputs, contracts=...)")


@reports_user_hooks
def shape_ledger(model: nn.Module, inputs: Any, *, designed: dict[str, Any] | None = None,
                 unread: str = "warn") -> Report:
    """Derive every layer's output geometry before it runs and compare with what it produced (and with the design).

    Args:
        model: the ``nn.Module`` (run once under a guard; left as found). A ``torch.compile``d module, or one with
            compiled submodules, runs eagerly (dynamo disabled for this pass: nothing is compiled), its paths
            without the ``_orig_mod`` level.
        inputs: a tensor (``model(x)``), a tuple of positional args or a dict of keyword args.
        designed: the design's per-example output shape (the first axis of the output, the batch, left out;
            ``None`` for a free axis; the first tensor of a tuple/dict/``ModelOutput``) by module path, e.g. ``{"layer4": (512, 7, 7), "avgpool": (512, 1, 1), "fc": (1000,)}`` for a ResNet-18 on 224x224.
            A network "repaired" by patching a head's ``in_features`` runs and is self-consistent; the design
            catches it at the first module (in execution order) whose output differs (``shape.design_mismatch``,
            ``where`` = that module, evidence ``culprit`` = the layer since the last matching designed output that
            set the differing channels or spatial size). Give the stage outputs and the layer before the head.
        unread: what input rows/columns a conv or pooling window never reads mean (``shape.unread_pixels``,
            e.g. ``MaxPool2d(3, stride=2)`` on 8x8 drops the last row and column): ``"warn"`` (default),
            ``"fail"`` (the design reads every pixel) or ``"note"`` (dropping the edge is intended: a PASS finding).

    Returns a Report: ``details["ledger"]`` lists rows ``stage, operation, observed_input, expected_output,
    observed_output, status``; the first divergence names the first layer whose derived and observed geometry
    disagree (``shape.mismatch``), the Linear after a flatten whose ``in_features`` does not match the arriving
    C*H*W (``shape.flatten_mismatch``, evidence ``culprit`` = the earlier layer that changed C or H, W, or the
    pooling layer whose change explains the size), or the first module that differs from its design. SKIPPED (with
    ``details["not_applicable"]``) when no shape-changing layer ran; SKIPPED when this backend cannot run the
    model's dtype or layout.
    """
    check_model(model)
    if unread not in VERDICTS:
        raise InvalidArgument(f"Expected `unread` to be one of {sorted(VERDICTS)} but got {unread!r}")
    args, kwargs = call_args(fresh(inputs))  # the model may write its inputs in place: never the user's
    design = parse_designed(model, designed)
    ledger = Ledger(frozenset(design))
    rec = Recorder(model, watch={f: ledger.op for f in OP_FUNCS}, on_pre=ledger.pre, on_post=ledger.post)
    compiled = any(isinstance(m, _optimized()) for m in model.modules())
    with guarded(model), _eager(compiled):
        _, exc = rec.run(model, args, kwargs)
    entries = ledger.entries
    for e in entries:
        e.stage = user_path(e.stage)
    checks = _ordered(_findings(entries, unread, ledger.calls), design_checks(ledger, design, user_path))
    if exc is not None and _unsupported(exc) and not any(c.finding.status is Status.FAIL for c in checks):
        return skipped(_NAME, f"this backend cannot run the model as given ({exception_line(exc)}): the geometry "
                              "after it was not observed; run it where the model runs (its device and dtype)",
                       raised=True, ledger=[e.row() for e in entries])
    if exc is not None and any(c.finding.status is Status.FAIL for c in checks):
        checks.append(_raised_after(rec, exc))
    elif exc is not None:
        checks.append(functional_linear(rec, entries) or _raised(rec, exc, entries))
    details = {"ledger": [e.row() for e in entries], "raised": exc is not None}
    if compiled:
        details["compiled"] = "torch.compile'd modules ran eagerly for this pass (dynamo disabled; nothing compiled)"
    if rec.internal_errors:
        details["internal_errors"] = rec.internal_errors[:10]
    if exc is None and not design and not any(e.expected_output is not None and e.operation.split("(")[0]
                                              not in PASS_NAMES for e in entries):
        return skipped(_NAME, _NOTHING_DERIVED, not_applicable=True, **details)  # nothing of its kind here
    return compose(_NAME, checks, "none", details)


def _optimized() -> type:
    from torch._dynamo.eval_frame import OptimizedModule

    return OptimizedModule


@contextmanager
def _eager(compiled: bool) -> Iterator[None]:
    """Compiled modules run their original forward (hooks see every layer), and torch's warning that global hooks
    meet a compiled module is not the user's concern here."""
    if not compiled:
        yield
        return
    import torch._dynamo

    with torch._dynamo.config.patch(disable=True), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        yield


def _unsupported(exc: Exception) -> bool:
    """The backend, not the model: an op without a kernel for this dtype, layout or device."""
    text = str(exc)
    return isinstance(exc, NotImplementedError) or "not implemented for" in text or "Could not run" in text


def _ordered(entry_checks: list[tuple[int, Check]], design: list[tuple[int, Check]]) -> list[Check]:
    """Entry and design checks in execution order; after the first FAIL a later FAIL of either kind is a
    consequence, kept as SKIPPED ``shape.after_divergence``."""
    out, failed = [], False
    for _, c in sorted(entry_checks + design, key=lambda kc: kc[0]):
        if failed and c.finding.status is Status.FAIL and c.finding.check != "shape.unread_pixels":
            c = check(c.finding.where, "shape.after_divergence", Status.SKIPPED,
                      f"{c.finding.message} (after the first divergence)", c.finding.evidence)
        failed = failed or c.finding.status is Status.FAIL
        out.append(c)
    return out


def _findings(entries: list[Entry], unread: str, calls: dict[int, Call]) -> list[tuple[int, Check]]:
    out: list[tuple[int, Check]] = []
    failed = False
    for e in entries:
        if e.expected_output is None and not e.problem:
            continue
        ev, clock = e.row(), (e.end if e.ran else e.start)
        if failed:
            out.append((clock, check(e.stage, "shape.after_divergence", Status.SKIPPED,
                                     f"{e.operation}: after the first divergence", ev)))
        elif e.problem:
            out.append((e.start, input_check(entries, e)))
            failed = True
        elif e.ran and e.observed_output != e.expected_output and "own_forward" in e.extra:
            out.append((clock, check(e.stage, "shape.mismatch", Status.WARN,
                                     f"{e.stage} {e.operation}: derived {e.expected_output} from input {e.observed_input}, "
                                     f"observed {e.observed_output}; {e.extra['own_forward']} writes its own forward, so "
                                     "this geometry may be its design (not checked)", ev)))
        elif e.ran and e.observed_output != e.expected_output:
            verdict, why = confirm(e, calls.get(e.index))
            out.append((clock, _mismatch(e, verdict, why, ev)))
            failed = verdict == "confirmed"
        elif e.ran:
            out.append((clock, check(e.stage, "shape.derived", Status.PASS,
                                     f"{e.operation}: {e.observed_input} -> {e.observed_output} (derived)", ev)))
            lost = unread_check(e, unread)
            if lost is not None:
                out.append((clock, lost))
    return out


def _mismatch(e: Entry, verdict: str, why: str, ev: dict) -> Check:
    """A layer's observed output differs from the derived one: FAIL only when torch's own forward of its class,
    replayed on a meta copy, confirms the derived geometry; torch's arithmetic is a PASS; else a WARN."""
    ev = {**ev, "confirmation": why}
    said = f"{e.stage} {e.operation}: derived {e.expected_output} from input {e.observed_input}, observed {e.observed_output}"
    if verdict == "torch":
        return check(e.stage, "shape.derived", Status.PASS, f"{e.operation}: {e.observed_input} -> {e.observed_output} "
                     f"({why}; the ledger's rule derived {e.expected_output})", ev)
    if verdict == "unconfirmed":
        return check(e.stage, "shape.mismatch", Status.WARN, f"{said}; not confirmed: {why}", ev)
    return check(e.stage, "shape.mismatch", Status.FAIL, f"{said} ({why})", ev,
                 expected=e.expected_output, observed=e.observed_output,
                 hint="this layer computes a different geometry than its hyperparameters say (custom forward or "
                      "padding); derive it by hand and repair here")


def _raised(rec: Recorder, exc: Exception, entries: list[Entry]) -> Check:
    where, ev = rec.failure_evidence(exc, last_rows=[e.row() for e in entries[-4:]])
    where, ev["module_stack"] = user_path(where), [user_path(p) for p in ev["module_stack"]]
    if refused_inputs(where, exc):
        return check(where, "shape.inputs_refused", Status.SKIPPED, refused_message(exc), ev)
    return check(where, "shape.forward_raised", Status.FAIL, f"forward raised inside {where or '(model)'}: {ev['exception']}",
                 ev, expected="the forward pass completes", observed=ev["exception"],
                 hint="no layer before the failure disagreed with its derived geometry: the failure is in code the "
                      "ledger does not derive (look at the failing op's input shapes)")


def _raised_after(rec: Recorder, exc: Exception) -> Check:
    """The forward raised after an earlier layer already diverged: noted, not analysed."""
    stack = rec.stack_at(exc)
    return check(user_path(stack[-1]) if stack else "", "shape.forward_raised", Status.FAIL,
                 f"then the forward raised: {exception_line(exc)}", {"exception": exception_line(exc)},
                 expected="the forward pass completes", observed=exception_line(exc))
