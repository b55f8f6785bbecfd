"""How compile_ledger watches ``torch.compile`` without borrowing or touching the user's compiler state.

What works in torch 2.13 (CPU), and what this module relies on:

- **Fresh code objects.** Dynamo keeps its cache entries, frame ids and recompile counts on the *code object*
  of the frame it compiles, so a deep copy of a module still shares ``type(model).forward.__code__`` (and its
  cache) with the user's model. Every compile made here gets its own copy of that code object
  (``code.replace()``): for a module, a throw-away subclass of its class whose ``forward`` is a copy of the
  original function (guards then read ``L['x']`` exactly as for ``torch.compile(model)``); for a function, a
  copy of the function. Torch's own cache for the user's code is neither consulted nor extended, and no
  ``torch._dynamo.reset()`` is needed (``torch._dynamo.explain`` is not used: it calls ``reset()`` twice, which
  would throw away everything the user compiled). ``isolate_recompiles=True`` keeps frames compiled on shared
  code (after a graph break inside a submodule) out of the user's recompile count.
- **Recompilations** are read from the records dynamo appends for every frame it compiles
  (``torch._dynamo.utils._compilation_metrics``: compile id, frame, ``recompile_reason`` = the first failed
  guard of the most recent cache entry, ``fail_type``/``fail_reason`` = "Dynamo recompile limit exceeded" when
  the limit forces eager) and from ``torch._dynamo.utils.guard_failures`` (every cache entry's failed guard,
  computed on every recompilation whatever the logging settings). Recompile *logging*
  (``torch._logging.set_logs(recompiles=True)``) is not used: it replaces every other logging setting the user
  made and prints to stderr. A handler on the ``torch._dynamo`` logger captures its warnings (the
  "hit config.recompile_limit" warning) as a second witness of a limit hit.
- **Automatic dynamic shapes** remember, per (file, line, function name), which sizes varied
  (``torch._dynamo.pgo``); a copied code object shares that profile. Each compile here starts from an empty
  profile, as in a fresh process, and the user's profile is put back afterwards (when
  ``torch.compiler.config.job_id`` is set, torch also writes the profile to its cache directory after each
  compile; that file is not rolled back).
- **Bookkeeping restored**: dynamo's counters, guard failures, compile metrics, compile times and
  graph-break reasons are put back as they were, so the user's own counts do not include ours.
"""

from __future__ import annotations

import collections
import copy
import inspect
import logging
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._core.copying import model_copy

# --- fresh code objects ---------------------------------------------------------------------------------------


def span_of(f: types.FunctionType) -> tuple[str, int, int]:
    """(file, first line, last line) of a function's code: its resume functions (after a graph break) lie inside."""
    code = f.__code__
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return code.co_filename, code.co_firstlineno, max(lines, default=code.co_firstlineno)


def fresh_function(f: types.FunctionType) -> types.FunctionType:
    """A copy of ``f`` with its own code object (same globals, defaults and closure cells)."""
    g = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = copy.copy(f.__kwdefaults__)
    g.__qualname__ = f.__qualname__
    g.__dict__.update(f.__dict__)
    return g


def _own_forward(module: nn.Module) -> types.FunctionType | None:
    """The class's ``forward`` function when it can be copied into a subclass (user code, plain function)."""
    fwd = getattr(type(module), "forward", None)
    if "forward" in vars(module) or not isinstance(fwd, types.FunctionType):
        return None
    if (fwd.__module__ or "").startswith("torch."):  # torch.nn's own modules: compiled through a wrapper frame
        return None
    return fwd


def _call_module(module: nn.Module) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:  # the frame dynamo compiles for torch's own modules
        return module(*args, **kwargs)

    return forward


def modules_in(fn: Any) -> list[nn.Module]:
    """Modules a function reaches through its closure and globals (they are run, so they are guarded)."""
    func = getattr(fn, "__func__", fn)
    found: list[nn.Module] = []
    if isinstance(getattr(fn, "__self__", None), nn.Module):
        found.append(fn.__self__)
    try:
        cv = inspect.getclosurevars(func)
        values = list(cv.nonlocals.values()) + list(cv.globals.values())
    except (TypeError, ValueError):
        values = []
    for value in values:
        if isinstance(value, nn.Module) and all(value is not m for m in found):
            found.append(value)
    return found


class Target:
    """What is compiled: a deep copy of a module (or of a bound method's module), or the user's function.

    ``eager`` runs it uncompiled (for a module: on a second deep copy, so state a module keeps between calls
    evolves separately in the eager and the compiled run); ``compiled(**kwargs)`` returns a callable compiled by
    ``torch.compile`` on fresh code objects, so every compile starts from an empty dynamo cache of its own. A
    function's eager and compiled runs share its closure and globals.
    """

    def __init__(self, fn: Any) -> None:
        self.user = fn
        self.guard: list[nn.Module] = []
        self.shared_code = False  # True when the top frame's code object is the user's (compiled as given)
        self.span: tuple[str, int, int] = ("", 0, -1)  # (file, first, last line) of the code compiled fresh
        if isinstance(fn, nn.Module):  # two copies: a module that keeps state (a call counter) evolves in each
            self.work: Any = model_copy(fn)
            self.kind = "module"
            self.eager: Callable[..., Any] = model_copy(fn)
        elif isinstance(fn, types.MethodType) and isinstance(fn.__self__, nn.Module) \
                and isinstance(fn.__func__, types.FunctionType):
            self.work = model_copy(fn.__self__)
            self.kind = "method"
            self.eager = types.MethodType(fn.__func__, model_copy(fn.__self__))
        else:
            self.work = None
            self.kind = "function" if isinstance(fn, types.FunctionType) else "callable"
            self.shared_code = self.kind == "callable"
            self.guard = modules_in(fn)
            self.eager = fn

    def fresh_eager(self) -> Callable[..., Any]:
        """Eager on a new copy of the user's module, in the state it was handed over (a function: itself)."""
        if self.kind == "module":
            return model_copy(self.user)
        if self.kind == "method":
            return types.MethodType(self.user.__func__, model_copy(self.user.__self__))
        return self.eager

    def compiled(self, **kwargs: Any) -> Callable[..., Any]:
        if self.kind == "module":
            return self._compiled_module(kwargs)
        if self.kind == "method":
            func = self.user.__func__
            self.span = span_of(func)
            return torch.compile(types.MethodType(fresh_function(func), self.work), **kwargs)
        if self.kind == "function":
            self.span = span_of(self.user)
            return torch.compile(fresh_function(self.user), **kwargs)
        return torch.compile(self.user, **kwargs)

    def owns(self, event: Event) -> bool:
        """Whether a compiled frame is the fresh top frame or one of its resume functions (not shared code)."""
        file, first, last = self.span
        return event.where[0] == file and first <= event.where[1] <= last

    def _compiled_module(self, kwargs: dict[str, Any]) -> Callable[..., Any]:
        base = type(self.user)
        fwd = _own_forward(self.user)
        sub = None
        if fwd is not None:
            try:
                sub = type(base.__name__, (base,), {"forward": fresh_function(fwd), "__module__": base.__module__,
                                                    "__qualname__": base.__qualname__})
                self.work.__class__ = sub
            except TypeError:  # a metaclass or layout that refuses a subclass: use the wrapper frame
                self.work.__class__, sub = base, None
        if sub is None:
            wrapper = _call_module(self.work)
            self.span = span_of(wrapper)
            return torch.compile(fresh_function(wrapper), **kwargs)
        self.span = span_of(fwd)
        opt = torch.compile(self.work, **kwargs)
        work = self.work

        def call(*args: Any, **kw: Any) -> Any:
            work.__class__ = sub  # one copy serves every compile; each compile runs its own forward code
            return opt(*args, **kw)

        return call


def compile_kwargs(backend: Any, dynamic: bool | None, cache_limit: int | None, fullgraph: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``torch.compile``: the recompile limit and isolation per call when torch has them."""
    params = inspect.signature(torch.compile).parameters
    out: dict[str, Any] = {"backend": backend, "dynamic": dynamic, "fullgraph": fullgraph}
    if "isolate_recompiles" in params:
        out["isolate_recompiles"] = True
    if cache_limit is not None:
        out["recompile_limit"] = cache_limit
    return out


def effective_limit(cache_limit: int | None) -> int:
    cfg = torch._dynamo.config
    return int(cache_limit if cache_limit is not None else getattr(cfg, "recompile_limit", getattr(cfg, "cache_size_limit", 8)))


@contextmanager
def limit_patch(cache_limit: int | None) -> Iterator[None]:
    """Older torch has no per-call ``recompile_limit``: patch the config for the duration (restored on exit)."""
    if cache_limit is None or "recompile_limit" in inspect.signature(torch.compile).parameters:
        yield
        return
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch(**{name: cache_limit}):
        yield


# --- dynamo's process-wide bookkeeping ------------------------------------------------------------------------


def _utils() -> Any:
    return torch._dynamo.utils


def _pgo() -> Any:
    try:
        from torch._dynamo import pgo
    except ImportError:  # older torch: automatic dynamic state lives on the frame
        return None
    return pgo if hasattr(pgo, "_CODE_STATE") and hasattr(pgo, "CodeState") else None


@dataclass
class Bookkeeping:
    """Dynamo's global records that compiling adds to, saved so they can be put back exactly."""

    counters: dict[str, collections.Counter] = field(default_factory=dict)
    guard_failures: dict[Any, list] = field(default_factory=dict)
    metrics: list[Any] = field(default_factory=list)
    times: dict[str, Any] = field(default_factory=dict)
    breaks: list[Any] = field(default_factory=list)
    profile: tuple[Any, ...] | None = None

    @classmethod
    def take(cls) -> Bookkeeping:
        u = _utils()
        pgo = _pgo()
        return cls(counters={k: collections.Counter(v) for k, v in u.counters.items()},
                   guard_failures={k: list(v) for k, v in getattr(u, "guard_failures", {}).items()},
                   metrics=list(getattr(u, "_compilation_metrics", ())),
                   times={k: copy.copy(v) for k, v in getattr(u, "compilation_time_metrics", {}).items()},
                   breaks=list(getattr(u, "graph_break_reasons", ())),
                   profile=None if pgo is None else (pgo._CODE_STATE, pgo._INIT_CODE_STATE,
                                                     getattr(pgo, "_LOGGED_DYNAMIC_ALLOWLIST", False)))

    def restore(self) -> None:
        u = _utils()
        u.counters.clear()
        u.counters.update({k: collections.Counter(v) for k, v in self.counters.items()})
        for name, saved in (("guard_failures", self.guard_failures), ("compilation_time_metrics", self.times)):
            target = getattr(u, name, None)
            if target is not None:
                target.clear()
                target.update(saved)
        for name, saved_list in (("_compilation_metrics", self.metrics), ("graph_break_reasons", self.breaks)):
            target = getattr(u, name, None)
            if target is not None:
                target.clear()
                target.extend(saved_list)
        pgo = _pgo()
        if pgo is not None and self.profile is not None:
            pgo._CODE_STATE, pgo._INIT_CODE_STATE = self.profile[0], self.profile[1]
            if hasattr(pgo, "_LOGGED_DYNAMIC_ALLOWLIST"):
                pgo._LOGGED_DYNAMIC_ALLOWLIST = self.profile[2]


def fresh_profile() -> None:
    """Start automatic dynamic shapes from an empty profile (as in a new process); Bookkeeping puts the user's back."""
    pgo = _pgo()
    if pgo is not None:
        pgo._CODE_STATE = collections.defaultdict(pgo.CodeState)
        pgo._INIT_CODE_STATE = None


class WarningCapture(logging.Handler):
    """Records what the ``torch._dynamo`` logger emits at WARNING and above while attached."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a malformed record must not break the user's compile
            self.records.append(str(record.msg))


@contextmanager
def watching() -> Iterator[WarningCapture]:
    """Save dynamo's bookkeeping and attach the warning handler; put both back on exit (also on errors)."""
    saved = Bookkeeping.take()
    handler = WarningCapture()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        saved.restore()


# --- what one call compiled -----------------------------------------------------------------------------------


@dataclass
class Event:
    """One frame dynamo compiled (or refused to) during a call."""

    compile_id: str
    frame: str  # "forward (model.py:12)"; "" when dynamo refused before naming the frame (the limit)
    recompile_reason: str | None
    fail_type: str | None
    fail_reason: str | None
    seconds: float | None
    where: tuple[str, int] = ("", 0)  # (file, first line) of the compiled code

    @property
    def limit_hit(self) -> bool:
        return "recompile limit" in (self.fail_reason or "").lower() or "cache size limit" in (self.fail_reason or "").lower()


def _frame_label(m: Any) -> str:
    if not getattr(m, "co_name", None):
        return ""
    return f"{m.co_name} ({str(m.co_filename).rsplit('/', 1)[-1]}:{m.co_firstlineno})"


@dataclass
class CallRecord:
    events: list[Event]
    reasons: list[str]  # every failed guard dynamo computed during the call ("<compile id>: <guard>")
    seconds: float = 0.0
    caches: dict[str, int] = field(default_factory=dict)  # inductor / AOT autograd cache hits and misses


def _cache_counts() -> dict[str, int]:
    counters = _utils().counters
    return {f"{group}.{key}": int(n) for group in ("inductor", "aot_autograd")
            for key, n in counters.get(group, {}).items() if "cache" in key}


@contextmanager
def recording() -> Iterator[CallRecord]:
    """Collect the frames compiled and the guard failures computed while the body runs."""
    u = _utils()
    before_metrics = list(getattr(u, "_compilation_metrics", ()))
    seen = {id(m) for m in before_metrics}
    gf = getattr(u, "guard_failures", {})
    before_gf = {k: len(v) for k, v in gf.items()}
    before_caches = _cache_counts()
    rec = CallRecord([], [])
    try:
        yield rec
    finally:
        after = _cache_counts()
        rec.caches = {k: n - before_caches.get(k, 0) for k, n in after.items() if n != before_caches.get(k, 0)}
        for m in getattr(u, "_compilation_metrics", ()):
            if id(m) not in seen:
                rec.events.append(Event(str(m.compile_id), _frame_label(m), m.recompile_reason, m.fail_type,
                                        m.fail_reason, getattr(m, "entire_frame_compile_time_s", None),
                                        (str(m.co_filename or ""), int(m.co_firstlineno or 0))))
        for code, reasons in gf.items():
            rec.reasons += [str(r) for r in reasons[before_gf.get(code, 0):]]
        del before_metrics
