"""torch.compile ledger (appendix section 13): inspect the compiler's hidden state.

"A compiled call that returns the right number has proved correctness. It has not proved: the hot region was
captured, the graph was reused, guards remained valid, recompilation stopped, steady-state performance
improved, cold cost amortized." The ledger walks the chapter's progression and stops at the first link
that fails (``where`` = the link; later links are "not reached"):

RUNS      eager and compiled both run on every input of ``inputs_seq`` (eager first: if eager is already
          wrong, compilation is not the first problem). ``compile.eager_raised`` / ``compile.compiled_raised``.
CORRECT   compiled outputs equal eager outputs on every input within ``atol + rtol * |eager|``, leaf by leaf
          (max abs and max relative error in evidence). ``compile.incorrect``.
CAPTURED  one capture of ``inputs_seq[0]`` with a recording backend (what ``torch._dynamo.explain`` reports:
          graphs, graph breaks, each break's reason and user file:line; not ``explain`` itself, which calls
          ``torch._dynamo.reset()`` twice) and ``fullgraph=True`` as a capture test. A graph break is not an error: WARN, or FAIL when ``fullgraph_required=True``.
          ``compile.graph_break``. With ``backend="eager"`` the main pass's first call is that capture (the recorder
          compiles exactly what the eager backend does), not a second compile.
STABLE    the compiled function over the whole ``inputs_seq`` (the user's real, varying inputs): every
          recompilation with the input that triggered it and the failed guard(s), each in a category
          (shape, dtype, device, value, other), and whether the recompile limit was hit (the frame then runs
          eager for unmatched inputs). ``compile.recompiles`` FAILs on any recompilation beyond the expected
          ones or on a limit hit. Expected: none, except, with ``dynamic=None`` (torch's automatic dynamic
          shapes), the first recompilation of each frame when every failed guard is a shape guard or a
          Python number (torch then marks that size/number dynamic and compiles once more); a second
          recompilation of the same frame means the generalisation did not hold.
WORTH_IT  eager call (median) vs cold first compiled call (fresh dynamo cache: the first compile on fresh
          code objects) vs warm-cache first call (fresh dynamo cache again, inductor's FX graph and AOT caches
          now warm: hits and misses in evidence) vs steady state (median after compiling);
          ``break_even_calls = (cold - eager) / (eager - steady)`` when steady < eager, else "never".
          WARN (``compile.not_worth_it``) when it never pays off or needs more than ``payoff_calls`` calls.
          Debugging backends (``eager``, ``aot_eager`` ...) do not optimize: their timings are reported,
          not judged, and the warm-cache call is not made (no code-generation cache; ``warm_cache_measured``
          False, the cold figures stand in). CAPTURED compiles ``fullgraph=True`` only when the recording
          capture saw a break or not exactly one graph (one graph without a break is what it demands).

Leave no trace (how, in :mod:`firstdiv.instruments.compile_ledger._capture`): modules are deep-copied and run in
their current mode; every compile uses its own copy of the top frame's code object, so the user's dynamo
caches are neither used nor extended and ``torch._dynamo.reset()`` is never called (it would discard
everything the user compiled); no ``torch._dynamo.config`` value is changed (the recompile limit is passed
per call); dynamo's counters, guard-failure lists, compile metrics, compile times, graph-break reasons and the
automatic-dynamic profile are put back; the logging handler is removed; RNG states and grad mode restored.
What persists is named in ``side_effects``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...errors import InvalidArgument
from ...report import Report, Status, skipped
from .._core.batch import describe_error
from .._core.checks import Check, check, compose, reached, walk
from .._core.progress import progress
from .._core.state import guarded
from .._core.trace import call_args
from .._core.user_hooks import reports_user_hooks
from ._capture import (
    Target,
    effective_limit,
    fresh_profile,
    limit_patch,
    recording,
    watching,
)
from ._compare import clone_args, compare
from ._context import Ctx
from ._links import CaptureRecorder, captured_link, stable_link, timed, worth_it_link

__all__ = ["compile_ledger"]

_NAME = "compile_ledger"
LINKS = ("RUNS", "CORRECT", "CAPTURED", "STABLE", "WORTH_IT")
_SEED = 20240607


@reports_user_hooks(count=False)  # a counting wrapper would change what torch.compile guards on
def compile_ledger(fn: nn.Module | Callable[..., Any], inputs_seq: list[Any], *, backend: str | Callable = "inductor",
                   rtol: float = 1e-4, atol: float = 1e-5, cache_limit: int | None = None, dynamic: bool | None = None,
                   fullgraph_required: bool = False, repeats: int = 10, payoff_calls: float = 1000) -> Report:
    """Walk RUNS -> CORRECT -> CAPTURED -> STABLE -> WORTH_IT for ``fn`` over your real input sequence.

    Args:
        fn: an ``nn.Module`` (run in its current mode on a deep copy) or a function (called as given; modules it
            reaches through its closure or globals are snapshotted and restored).
        inputs_seq: the inputs in the order your program sees them, as a list; each is a tensor, a tuple of
            positional arguments or a dict of keyword arguments. Varying shapes/values belong here: they are
            what STABLE checks. RUNS/CAPTURED/WORTH_IT use ``inputs_seq[0]``.
        backend: a ``torch.compile`` backend name (``torch._dynamo.list_backends(None)``) or callable.
        rtol, atol: CORRECT passes when ``|compiled - eager| <= atol + rtol * |eager|`` on every element.
        cache_limit: recompile limit for this compile (``torch.compile(recompile_limit=...)``); None: torch's
            ``torch._dynamo.config.recompile_limit``.
        dynamic: passed to ``torch.compile``: None = automatic dynamic shapes, False = always specialize,
            True = dynamic from the first compile.
        fullgraph_required: make a graph break a FAIL instead of a WARN.
        repeats: calls timed for the eager and steady-state medians; payoff_calls: WORTH_IT WARNs when the
            cold compile is not paid back within this many calls.
    """
    calls = _validated(fn, inputs_seq, backend, rtol, atol, cache_limit, dynamic, fullgraph_required, repeats, payoff_calls)
    if not torch._dynamo.is_dynamo_supported():
        return skipped(_NAME, "torch.compile is not supported on this Python/platform (torch._dynamo.is_dynamo_supported() "
                              "is False); run on a supported Python version")
    try:
        target = Target(fn)
    except Exception as exc:  # noqa: BLE001 - the copy is how the ledger leaves your module untouched
        return skipped(_NAME, f"could not deep-copy the module ({describe_error(exc)}); the ledger compiles a copy: "
                              "make copy.deepcopy(model) work")
    ctx = Ctx(target, calls, backend, dynamic, cache_limit, float(rtol), float(atol), fullgraph_required, repeats,
              float(payoff_calls))
    with (guarded(*target.guard), watching() as logs, limit_patch(cache_limit),
          progress("compile_ledger: eager vs compiled on each input", total=len(calls) + 1) as tick):
        ctx.logs = logs
        _main_pass(ctx, tick)
        tick(0, description="compile_ledger: capture, stability and timing")
        checks = _walk(ctx)
        tick()
    return _report(ctx, checks)


# --- running ------------------------------------------------------------------------------------------------


def _run_eager(ctx: Ctx, i: int) -> Any:
    args, kwargs = clone_args(ctx.calls[i])
    torch.manual_seed(_SEED + i)  # dropout in training mode draws the same numbers in both runs (eager backends)
    return ctx.target.eager(*args, **kwargs)


def _main_pass(ctx: Ctx, tick: Callable[..., None]) -> None:
    """Eager then compiled on every input, in order: outputs compared, compile events recorded per call
    (``tick`` once per input: the progress display)."""
    fresh_profile()
    recorder = CaptureRecorder() if ctx.backend == "eager" else None  # the same compile CAPTURED would make again
    try:
        ctx.compiled = ctx.target.compiled(**ctx.kwargs(recorder.backend if recorder else None))
    except Exception as exc:  # noqa: BLE001 - torch.compile refused the callable itself: RUNS reports it
        ctx.compiled_error = (0, _compiler_error(exc))
        return
    for i in range(len(ctx.calls)):
        if recorder is not None and i == 1:
            ctx.capture = recorder.end()
        try:
            expected = _run_eager(ctx, i)
        except Exception as exc:  # noqa: BLE001 - user code: RUNS reports it
            ctx.eager_error = (i, describe_error(exc))
            return
        args, kwargs = clone_args(ctx.calls[i])
        torch.manual_seed(_SEED + i)
        if recorder is not None and i == 0:
            recorder.begin()
        try:
            with recording() as rec:
                got, rec.seconds = timed(ctx.compiled, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the compiler or the compiled code raised: RUNS reports it
            ctx.records.append(rec)
            ctx.compiled_error = (i, _compiler_error(exc))
            return
        ctx.records.append(rec)
        ctx.comparisons.append(compare(expected, got, ctx.rtol, ctx.atol))
        del expected, got
        tick()
    if recorder is not None and ctx.capture is None:
        ctx.capture = recorder.end()


def _compiler_error(exc: BaseException) -> str:
    """``BackendCompilerFailed: backend='x' raised: <- RuntimeError: the backend's own message (at file:line)``."""
    text = describe_error(exc)
    inner = getattr(exc, "inner_exception", None) or exc.__cause__
    if inner is not None and inner is not exc:
        text = f"{text.split(' (at ')[0]} <- {describe_error(inner)}"
    return text


# --- links --------------------------------------------------------------------------------------------------


def _runs(ctx: Ctx) -> Check:
    n = len(ctx.calls)
    if ctx.eager_error is not None:
        i, err = ctx.eager_error
        return check("RUNS", "compile.eager_raised", Status.FAIL, f"eager raised on input {i} {ctx.describe(i)}: {err}",
                     {"input": i, "inputs": n, "error": err, "call": ctx.describe(i)},
                     expected="eager runs on every input", observed=f"input {i}: {err}",
                     hint="eager itself fails: fix the function or its inputs first; compilation is not the first problem")
    if ctx.compiled_error is not None:
        i, err = ctx.compiled_error
        return check("RUNS", "compile.compiled_raised", Status.FAIL, f"eager ran but the compiled call raised on input {i} "
                     f"{ctx.describe(i)}: {err}", {"input": i, "inputs": n, "error": err, "call": ctx.describe(i)},
                     expected="the compiled function runs wherever eager runs", observed=f"input {i}: {err}",
                     hint="find the failing stage: backend='eager' (capture only), then 'aot_eager' (adds AOT autograd), "
                          "then 'inductor' (adds code generation)")
    cold = ctx.records[0].seconds
    return check("RUNS", "compile.runs", Status.PASS, f"eager and compiled both ran on all {n} inputs (first compiled call "
                 f"{cold:.3g} s)", {"inputs": n, "first_compiled_call_s": cold})


def _correct(ctx: Ctx) -> Check:
    bad = next(((i, c) for i, c in enumerate(ctx.comparisons) if not c.ok), None)
    worst_abs = max(c.max_abs for c in ctx.comparisons)
    worst_rel = max(c.max_rel for c in ctx.comparisons)
    ev: dict[str, Any] = {"inputs": len(ctx.comparisons), "rtol": ctx.rtol, "atol": ctx.atol,
                          "max_abs_error": _num(worst_abs), "max_rel_error": _num(worst_rel),
                          "per_input_max_abs": [_num(c.max_abs) for c in ctx.comparisons]}
    caches = sorted({p for c in ctx.comparisons for p in c.caches})
    note = ""
    if caches:
        ev["cache_objects"] = caches
        note = (f"; note: key/value cache object(s) at {', '.join(caches[:3])} compared by the tensors they hold "
                f"(not by ==)")
    if bad is None:
        return check("CORRECT", "compile.correct", Status.PASS, f"compiled outputs match eager on all {len(ctx.comparisons)} inputs: "
                     f"max abs error {worst_abs:.3g}, max rel error {worst_rel:.3g} (atol {ctx.atol:g}, rtol {ctx.rtol:g})"
                     f"{note}", ev)
    i, c = bad
    ev.update({"input": i, "call": ctx.describe(i), "path": c.worst, "input_max_abs": _num(c.max_abs),
               "input_max_rel": _num(c.max_rel), "bad_elements": c.bad_elements, "problem": c.problem})
    what = c.problem or (f"{c.worst}: max abs error {c.max_abs:.3g}, max rel error {c.max_rel:.3g}, "
                         f"{c.bad_elements} element(s) beyond atol {ctx.atol:g} + rtol {ctx.rtol:g} * |eager|")
    hint = ("compare backend='eager' and 'aot_eager' with this one to find the stage that changes the numbers; "
            "reduced precision (TF32, bf16 autocast) and reordered float reductions move results too")
    if _random_in_training(ctx):
        hint = "the module is in training mode with dropout: compiled random numbers differ from eager; call .eval() first"
    noise = _eager_noise(ctx, i)  # the premise: eager reproduces itself, whatever its random numbers
    ev["eager_vs_eager_other_rng"] = noise if isinstance(noise, str) else {"max_abs": _num(noise.max_abs),
                                                                          "bad_elements": noise.bad_elements}
    if isinstance(noise, str) or not noise.ok:
        why = (f"eager could not be replayed ({noise})" if isinstance(noise, str) else
               f"eager itself, replayed on a fresh copy with another RNG state, differs from its own run by "
               f"{noise.max_abs:.3g} ({noise.bad_elements} element(s) beyond the tolerance): compiled code draws other "
               "random numbers, so the difference is not shown to be the compiler's")
        return check("CORRECT", "compile.incorrect", Status.WARN, f"input {i} {ctx.describe(i)}: {what}; not a FAIL: "
                     f"{why}; put random layers in eval mode (or compare with compare_outputs)", ev, hint=hint)
    return check("CORRECT", "compile.incorrect", Status.FAIL, f"input {i} {ctx.describe(i)}: {what}", ev,
                 expected=f"|compiled - eager| <= {ctx.atol:g} + {ctx.rtol:g} * |eager|", observed=f"input {i}: {what}",
                 hint=hint)


def _eager_noise(ctx: Ctx, i: int) -> Any:
    """Eager's spread on input ``i``: two replays of inputs 0..i on fresh copies (state kept between calls evolves as
    in the main pass), the first with the main pass's seeds, the second with another RNG state at input ``i``; their
    Comparison, or why they could not run."""
    outs = []
    for seed in (_SEED + i, _SEED + i + 7919):
        try:
            eager = ctx.target.fresh_eager()
            for j in range(i + 1):
                args, kwargs = clone_args(ctx.calls[j])
                torch.manual_seed(_SEED + j if j < i else seed)
                out = eager(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - user code: the replay is evidence, not a requirement
            return describe_error(exc)
        outs.append(out)
    return compare(outs[0], outs[1], ctx.rtol, ctx.atol)


def _random_in_training(ctx: Ctx) -> bool:
    work = ctx.target.work
    modules = [work] if isinstance(work, nn.Module) else ctx.target.guard
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0
               for mod in modules for m in mod.modules())


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


# --- the walk and the report --------------------------------------------------------------------------------

def _walk(ctx: Ctx) -> list[Check]:
    return walk((name, lambda run=run: run(ctx)) for name, run in (("RUNS", _runs), ("CORRECT", _correct),
                                                                   ("CAPTURED", captured_link), ("STABLE", stable_link),
                                                                   ("WORTH_IT", worth_it_link)))


def _report(ctx: Ctx, checks: list[Check]) -> Report:
    details = {"links": reached(checks), "backend": ctx.backend if isinstance(ctx.backend, str) else getattr(ctx.backend, "__name__", "callable"),
               "dynamic": "None" if ctx.dynamic is None else ctx.dynamic, "recompile_limit": effective_limit(ctx.cache_limit),
               "inputs": len(ctx.calls), "calls": [ctx.describe(i) for i in range(min(len(ctx.calls), 50))],
               "grad_enabled": torch.is_grad_enabled(), "target": ctx.target.kind, "torch": torch.__version__,
               "timings": ctx.timings}
    return compose(_NAME, checks, _side_effects(ctx), details)


def _side_effects(ctx: Ctx) -> str:
    t = ctx.target
    head = {"module": "compiled and ran deep copies of your module (your module was not called)",
            "method": "compiled and ran a deep copy of the method's module (your module was not called)",
            "function": "called your function eagerly and compiled copies of it"
                        + (f" (the {len(t.guard)} module(s) it reaches were snapshotted and restored)" if t.guard else ""),
            "callable": "called and compiled your callable as given (its code object is yours: each compile ran in "
                        "its own isolated recompile region, whose cache entries stay on that code; your own "
                        "torch.compile calls do not look them up)"}[t.kind]
    fresh = ("each compile used its own copy of the top frame's code object, so torch's caches for your code were "
             "neither used nor extended")
    parts = [head] + ([] if t.shared_code else [fresh]) + [
        "torch._dynamo.reset() was not called and no torch._dynamo.config value changed",
        ("dynamo's counters, guard failures, compile metrics and automatic-dynamic profile were restored; RNG states and "
         "grad mode restored")]
    shared = sorted({e.frame for r in ctx.records for e in r.events if e.frame and not t.owns(e)})
    if shared and not t.shared_code:
        parts.append(f"frames compiled on shared code after graph breaks ({', '.join(shared[:5])}) keep cache entries "
                     "in isolated regions your own torch.compile calls do not look up")
    if ctx.backend == "inductor":
        parts.append("inductor's on-disk cache keeps the kernels it compiled for these graphs, as after any torch.compile")
    return "; ".join(parts)


# --- validation ---------------------------------------------------------------------------------------------


def _validated(fn: Any, inputs_seq: Any, backend: Any, rtol: Any, atol: Any, cache_limit: Any, dynamic: Any,
               fullgraph_required: Any, repeats: Any, payoff_calls: Any) -> list[tuple[tuple, dict]]:
    if not callable(fn):
        raise InvalidArgument(f"Expected `fn` to be a torch.nn.Module or a callable but got {type(fn).__name__}")
    calls = _calls_of(inputs_seq)
    if isinstance(backend, str):
        names = torch._dynamo.list_backends(None)
        if backend not in names:
            raise InvalidArgument(f"Expected `backend` to be a torch.compile backend ({', '.join(torch._dynamo.list_backends())} "
                                  f"or a debugging one such as 'eager', 'aot_eager') or a callable but got {backend!r}")
    elif not callable(backend):
        raise InvalidArgument(f"Expected `backend` to be a backend name or a callable but got {type(backend).__name__}")
    for name, value in (("rtol", rtol), ("atol", atol), ("payoff_calls", payoff_calls)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
            raise InvalidArgument(f"Expected `{name}` to be a finite number >= 0 but got {value!r}")
    if cache_limit is not None and (isinstance(cache_limit, bool) or not isinstance(cache_limit, int) or cache_limit < 1):
        raise InvalidArgument(f"Expected `cache_limit` to be None or an integer >= 1 but got {cache_limit!r}")
    if dynamic not in (None, True, False):
        raise InvalidArgument(f"Expected `dynamic` to be None, True or False but got {dynamic!r}")
    if not isinstance(fullgraph_required, bool):
        raise InvalidArgument(f"Expected `fullgraph_required` to be True or False but got {fullgraph_required!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidArgument(f"Expected `repeats` to be an integer >= 1 but got {repeats!r}")
    return calls


def _calls_of(inputs_seq: Any) -> list[tuple[tuple, dict]]:
    what = "a list of inputs (each a tensor, a tuple of positional arguments or a dict of keyword arguments)"
    if isinstance(inputs_seq, torch.Tensor):
        raise InvalidArgument(f"Expected `inputs_seq` to be {what} but got a Tensor; pass [x] for a single input")
    if not isinstance(inputs_seq, (list, tuple)):
        raise InvalidArgument(f"Expected `inputs_seq` to be {what} but got {type(inputs_seq).__name__}")
    if not inputs_seq:
        raise InvalidArgument(f"Expected `inputs_seq` to be {what} but got an empty {type(inputs_seq).__name__}")
    calls = []
    for i, item in enumerate(inputs_seq):
        try:
            calls.append(call_args(item))
        except InvalidArgument as exc:
            raise InvalidArgument(str(exc).replace("`inputs`", f"`inputs_seq[{i}]`")) from None
    return calls
