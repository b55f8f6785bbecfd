"""compile_ledger's CAPTURED, STABLE and WORTH_IT links: what dynamo captured of one call, what it recompiled over
the user's input sequence, and what compiling cost and bought (the rules are in
:mod:`firstdiv.instruments.compile_ledger`)."""

from __future__ import annotations

import collections
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ...report import Status
from .._core.batch import describe_error
from .._core.checks import Check, check
from ._capture import CallRecord, Event, effective_limit, fresh_profile, recording
from ._compare import clone_args
from ._context import Ctx
from ._guards import compile_id_of, guard_category, guard_text, numeric_value_guard

# --- CAPTURED -----------------------------------------------------------------------------------------------


def _user_frame(stack: Any) -> str:
    """``file.py:12 in fn: code`` for the innermost frame of the user's own code: outside torch and
    outside installed libraries (a library that wraps ``print``, as Ray's tqdm patch does once Ray is
    running, would otherwise take the blame); failing that, outside torch; failing that, the last."""
    frames = list(stack or [])
    if not frames:
        return ""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep  # by folder: a user path may say "/torch/"
    outside_torch = [f for f in frames if not os.path.abspath(str(f.filename)).startswith(torch_dir)]
    user = [f for f in outside_torch if "-packages/" not in str(f.filename)] or outside_torch or frames
    f = user[-1]
    line = (f.line or "").strip()
    return f"{str(f.filename).rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" + (f": {line}" if line else "")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


class CaptureRecorder:
    """A backend that records each graph it gets (op count, graph-break reason and user line) while ``active``
    and runs it as captured (what backend='eager' does), plus the graph breaks dynamo counted meanwhile."""

    def __init__(self) -> None:
        self.graphs: list[int] = []
        self.breaks: list[dict[str, str]] = []
        self.active = False
        self._before: collections.Counter[str] = collections.Counter()

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        if self.active:
            self.graphs.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
            why = getattr(gm, "compile_subgraph_reason", None)
            if why is not None and getattr(why, "graph_break", False):
                self.breaks.append({"reason": _first_line(why.reason), "at": _user_frame(getattr(why, "user_stack", None))})
        return gm.forward

    def begin(self) -> None:
        self._before = collections.Counter(torch._dynamo.utils.counters.get("graph_break", {}))
        self.active = True

    def end(self, error: str = "") -> dict[str, Any]:
        self.active = False
        seen = {b["reason"] for b in self.breaks}
        counted = collections.Counter(torch._dynamo.utils.counters.get("graph_break", {})) - self._before
        for reason, n in counted.items():
            if _first_line(reason) not in seen:  # a break with nothing captured before it compiles no graph
                self.breaks += [{"reason": _first_line(reason), "at": ""}] * n
        return {"graphs": len(self.graphs), "ops_per_graph": self.graphs, "breaks": self.breaks, "error": error}


def _capture(ctx: Ctx) -> dict[str, Any]:
    """One call of ``inputs_seq[0]`` through a recording backend: graphs, op counts and break reasons (already
    recorded by the main pass when its backend was 'eager', which compiles exactly what the recorder does)."""
    if ctx.capture is not None:
        return ctx.capture
    recorder = CaptureRecorder()
    fresh_profile()
    args, kwargs = clone_args(ctx.calls[0])
    error = ""
    recorder.begin()
    try:
        ctx.target.compiled(**ctx.kwargs(recorder.backend))(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported as evidence; RUNS already proved the call runs
        error = describe_error(exc)
    return recorder.end(error)


def _fullgraph(ctx: Ctx) -> str:
    """'' when ``fullgraph=True`` captures the call, else the first line of why not and the user line."""
    fresh_profile()
    args, kwargs = clone_args(ctx.calls[0])
    try:
        ctx.target.compiled(**ctx.kwargs("eager", fullgraph=True))(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - this is the capture test's answer
        where = _user_frame(getattr(exc, "real_stack", None))
        return f"{type(exc).__name__}: {_first_line(str(exc))}" + (f" (at {where})" if where else "")
    return ""


def captured_link(ctx: Ctx) -> Check:
    cap = _capture(ctx)
    breaks = cap["breaks"]
    implied = cap["graphs"] == 1 and not breaks and not cap["error"]  # one graph, no break: what fullgraph=True demands
    full = "" if implied else _fullgraph(ctx)
    ev = {"graphs": cap["graphs"], "graph_breaks": len(breaks), "ops_per_graph": cap["ops_per_graph"],
          "break_reasons": [f"{b['reason']}" + (f" @ {b['at']}" if b["at"] else "") for b in breaks],
          "fullgraph": "captured" if not full else full, "capture_error": cap["error"],
          "fullgraph_test": "implied by one graph without a break (not compiled again)" if implied else "compiled"}
    if not breaks and not full and cap["graphs"] >= 1:
        return check("CAPTURED", "compile.captured", Status.PASS, f"one call captured as {cap['graphs']} graph(s) with "
                     f"{sum(cap['ops_per_graph'])} ops, no graph break; fullgraph=True compiles", ev)
    if not breaks and not full:
        return check("CAPTURED", "compile.graph_break", Status.WARN, "dynamo captured no graph for the call (the frame was skipped "
                     "or holds no tensor operation): nothing is compiled", ev)
    first = breaks[0] if breaks else {"reason": full, "at": ""}
    where = f" at {first['at']}" if first["at"] else ""
    msg = (f"{cap['graphs']} graph(s), {len(breaks)} graph break(s); first: {first['reason']}{where}; "
           f"fullgraph=True: {'compiles' if not full else full}")
    status = Status.FAIL if ctx.fullgraph_required else Status.WARN
    return check("CAPTURED", "compile.graph_break", status, msg, ev, expected="one graph, no graph break (fullgraph=True compiles)",
                 observed=f"{len(breaks)} graph break(s): {first['reason']}{where}",
                 hint="rewrite the line so it stays in tensors (no .item()/print/data-dependent Python branch; torch.cond "
                      "for branches), or accept the break: each break splits the graph and costs a return to Python")


# --- STABLE -------------------------------------------------------------------------------------------------


def _frame_id(compile_id: str) -> str:
    cid = compile_id_of(compile_id.lstrip("[!"))
    return cid.split("/")[0] if cid else compile_id


def _recompilations(ctx: Ctx) -> tuple[list[dict[str, Any]], list[tuple[int, Event]], list[str]]:
    """Every recompilation (input, frame, guards, category, expected?), the limit hits, and each input's action."""
    events = [(i, e) for i, rec in enumerate(ctx.records) for e in rec.events]
    ours = {compile_id_of(e.compile_id.lstrip("[!")) for _, e in events}
    frames = {_frame_id(e.compile_id): e.frame for _, e in events if e.frame}
    auto = ctx.dynamic is None and bool(getattr(torch._dynamo.config, "automatic_dynamic_shapes", False))
    per_frame: collections.Counter[str] = collections.Counter()
    out: list[dict[str, Any]] = []
    limits: list[tuple[int, Event]] = []
    for i, e in events:
        if e.limit_hit:
            limits.append((i, e))
            continue
        if e.recompile_reason is None or e.fail_type:
            continue
        fid = _frame_id(e.compile_id)
        reasons = [e.recompile_reason] + [r for r in ctx.records[i].reasons
                                          if compile_id_of(r) in ours and _frame_id(r) == fid and r != e.recompile_reason]
        generalisable = all(guard_category(r) == "shape" or numeric_value_guard(r) for r in reasons)
        per_frame[fid] += 1
        out.append({"input": i, "call": ctx.describe(i), "frame": frames.get(fid, fid), "compile_id": e.compile_id,
                    "guard": guard_text(e.recompile_reason), "category": guard_category(e.recompile_reason),
                    "categories": sorted({guard_category(r) for r in reasons}),
                    "guards": list(dict.fromkeys(guard_text(r) for r in reasons))[:8],
                    "expected": auto and per_frame[fid] == 1 and generalisable})
    return out, limits, _actions(ctx)


def _actions(ctx: Ctx) -> list[str]:
    actions, limited = [], False
    for rec in ctx.records:
        if any(e.limit_hit for e in rec.events):
            limited = True
            actions.append("limit hit: ran eager")
        elif any(e.recompile_reason is not None and not e.fail_type for e in rec.events):
            actions.append("recompiled")
        elif any(not e.fail_type for e in rec.events):
            actions.append("compiled")
        else:
            actions.append("cached graph or eager (after the limit)" if limited else "cached graph")
    return actions


_HINTS = {
    "shape": "a size varies across inputs and each new size compiled a new graph: mark it dynamic "
             "(torch._dynamo.mark_dynamic(x, dim) or dynamic=None/True) or pad/bucket to a few sizes",
    "value": "a Python value is baked into the graph and changes between calls: pass it as a tensor, keep it "
             "constant, or move the branch out of the compiled region",
    "dtype": "inputs arrive in different dtypes: cast them consistently before the compiled call",
    "device": "inputs arrive on different devices: move them once, before the compiled call",
    "other": "an object identity, type, requires_grad or global state (grad mode) changed between calls: keep it fixed",
}


def stable_link(ctx: Ctx) -> Check:
    recs, limits, actions = _recompilations(ctx)
    warned = [w for w in (ctx.logs.records if ctx.logs else []) if "recompile_limit" in w or "cache_size_limit" in w]
    limit = effective_limit(ctx.cache_limit)
    unexpected = [r for r in recs if not r["expected"]]
    compiles = sum(1 for rec in ctx.records for e in rec.events if e.recompile_reason is None and not e.fail_type)
    ev: dict[str, Any] = {"inputs": len(ctx.calls), "compiles": compiles, "recompiles": len(recs),
                          "expected_recompiles": len(recs) - len(unexpected), "unexpected_recompiles": len(unexpected),
                          "recompile_limit": limit, "limit_hit": bool(limits or warned),
                          "limit_hit_input": limits[0][0] if limits else None,
                          "categories": dict(collections.Counter(r["category"] for r in recs)),
                          "recompilations": recs[:20], "per_input": actions, "dynamic": str(ctx.dynamic),
                          "limit_warnings": [w.splitlines()[0] for w in warned][:3]}
    if not unexpected and not limits and not warned:
        auto = [r for r in recs if r["expected"]]
        note = (f"; {len(auto)} expected automatic-dynamic recompilation(s) (input {', '.join(str(r['input']) for r in auto)})"
                if auto else "")
        return check("STABLE", "compile.recompiles", Status.PASS, f"{compiles} compile(s) over {len(ctx.calls)} inputs, no unexpected "
                     f"recompilation{note}; later inputs reused the cached graphs", ev)
    first = unexpected[0] if unexpected else (recs[-1] if recs else None)
    if limits or warned:
        at = limits[0][0] if limits else "?"
        observed = f"recompile limit ({limit}) hit at input {at}: later inputs that match no cached graph run eager"
        if first is not None:
            observed += f"; {len(recs)} recompilation(s), e.g. {first['category']} guard {first['guard']!r} (input {first['input']})"
    else:
        observed = (f"{len(unexpected)} unexpected recompilation(s) of {first['frame']}; first at input {first['input']} "
                    f"{first['call']}: {first['category']} guard {first['guard']!r}")
    category = first["category"] if first is not None else "other"
    if unexpected and not limits and not warned:  # the premise: the recompiled graphs are not paid back by reuse
        after = actions[min(r["input"] for r in unexpected):]
        recompiled, reused = after.count("recompiled"), sum(a.startswith("cached graph") for a in after)
        ev.update({"recompiled_inputs": recompiled, "reused_inputs": reused})
        if reused >= recompiled:
            return check("STABLE", "compile.recompiles", Status.WARN, f"{observed}; not a FAIL: in inputs_seq the "
                         f"compiled graphs were reused by {reused} input(s) against {recompiled} recompilation(s), so "
                         "one compile per bucket may be the design (dynamic=False with a few padded sizes); no argument "
                         "declares the expected recompiles", ev, hint=_HINTS.get(category, _HINTS["other"]))
    return check("STABLE", "compile.recompiles", Status.FAIL, observed, ev,
                 expected="one compile per frame reused across inputs (plus one automatic-dynamic recompilation with "
                          "dynamic=None)", observed=observed, hint=_HINTS.get(category, _HINTS["other"]))


# --- WORTH_IT ---------------------------------------------------------------------------------------------------


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # time completed device work, not submission


def timed(f: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, float]:
    _sync()
    t0 = time.perf_counter()
    out = f(*args, **kwargs)
    _sync()
    return out, time.perf_counter() - t0


def _median_time(f: Callable[..., Any], ctx: Ctx) -> float:
    times = []
    for _ in range(ctx.repeats):
        args, kwargs = clone_args(ctx.calls[0])
        times.append(timed(f, args, kwargs)[1])
    return statistics.median(times)


def _break_even(first: float, eager: float, steady: float) -> float | str:
    if steady >= eager:
        return "never"
    return max(0.0, (first - eager) / (eager - steady))


def worth_it_link(ctx: Ctx) -> Check:
    eager = _median_time(ctx.target.eager, ctx)
    steady = _median_time(ctx.compiled, ctx)
    cold_rec = ctx.records[0]
    if _optimizing(ctx.backend):  # a debugging backend has no code-generation cache to warm: not compiled again
        fresh_profile()
        warm_fn = ctx.target.compiled(**ctx.kwargs())
        args, kwargs = clone_args(ctx.calls[0])
        with recording() as warm_rec:
            _, warm_rec.seconds = timed(warm_fn, args, kwargs)
    else:
        warm_rec = CallRecord([], [], cold_rec.seconds)
    cold, warm = cold_rec.seconds, warm_rec.seconds
    even, even_warm = _break_even(cold, eager, steady), _break_even(warm, eager, steady)
    ev = {"eager_s": eager, "cold_first_call_s": cold, "warm_cache_first_call_s": warm, "steady_s": steady,
          "speedup": eager / steady if steady > 0 else "inf", "break_even_calls": even,
          "break_even_calls_warm_cache": even_warm, "repeats": ctx.repeats, "payoff_calls": ctx.payoff_calls,
          "cold_compile_s": sum(e.seconds or 0.0 for e in cold_rec.events),
          "warm_compile_s": sum(e.seconds or 0.0 for e in warm_rec.events),
          "cold_caches": cold_rec.caches, "warm_caches": warm_rec.caches, "measured_on": "inputs_seq[0]",
          "warm_cache_measured": _optimizing(ctx.backend)}
    ctx.timings.update(ev)
    msg = (f"eager {eager * 1e3:.3g} ms, cold first call {cold:.3g} s, warm-cache first call {warm:.3g} s, "
           f"steady {steady * 1e3:.3g} ms; break-even: {_calls(even)} (warm cache: {_calls(even_warm)})")
    if not ev["warm_cache_measured"]:
        msg = (f"eager {eager * 1e3:.3g} ms, cold first call {cold:.3g} s, steady {steady * 1e3:.3g} ms; break-even: "
               f"{_calls(even)} (warm-cache call not made: no code-generation cache)")
    if not _optimizing(ctx.backend):
        return check("WORTH_IT", "compile.worth_it", Status.SKIPPED, f"{msg}; not judged: backend {ctx.backend!r} is a debugging "
                     "backend that does not optimize", ev)
    if even == "never" or float(even) > ctx.payoff_calls:
        why = "steady state is not faster than eager" if even == "never" else f"needs more than {ctx.payoff_calls:g} calls"
        return check("WORTH_IT", "compile.not_worth_it", Status.WARN, f"{msg}: {why}", ev,
                     expected=f"compiled steady state faster than eager, paying back within {ctx.payoff_calls:g} calls",
                     observed=why, hint="small or overhead-bound work gains little; compile a larger region, run "
                     "under torch.no_grad()/inference_mode for inference, or do not compile")
    return check("WORTH_IT", "compile.worth_it", Status.PASS, msg, ev)


def _calls(even: float | str) -> str:
    return "never" if even == "never" else f"{float(even):.1f} calls"


def _optimizing(backend: Any) -> bool:
    return not isinstance(backend, str) or backend in torch._dynamo.list_backends()
