"""Shared recording machinery of ``tensor_trace`` and ``shape_ledger``: one forward pass observed at every
module boundary (global forward pre/post hooks, removed in ``finally``) and at every torch function
(a :class:`~torch.overrides.TorchFunctionMode`), each op attributed to the innermost running module.

Only metadata is recorded (shape, dtype, device, stride, contiguity), never values. To keep the trace
cheap (see ``benchmarks/trace_overhead.py``):

- while a ``torch.nn`` built-in module runs (``nn.Linear``, ``nn.Conv2d``, ``nn.MultiheadAttention``) the
  mode steps off the stack, so its internal ops (``F.linear`` ...) run at full speed and are not rows: the
  module's boundary rows already show them, and library internals are not where a user's layout bug lives.
  The mode comes back for user modules nested inside (a user module in an ``nn.Sequential``);
- boundary rows hold their tensor until the pass ends (or 256 rows accumulate, or an in-place op that
  changes shape or strides is about to run), then read its metadata.

Module inputs are recorded from positional arguments (global pre-hooks do not see keyword arguments).
Post-hooks run with ``always_call``: when a forward raises, the module stack at that moment is kept for the
report (``stack_at``) and unwound, so an exception a model catches itself leaves attribution intact. A failing
op is remembered (name, module, input shapes) when it runs outside ``torch.nn`` internals.

API (for the two instruments):

- ``call_args(inputs) -> (args, kwargs)`` — a tensor, a tuple of positional args or a dict of kwargs.
- ``Recorder(root, watch=..., on_pre=..., on_post=...).run(fn, args, kwargs) -> (output, exception)``.
- ``Recorder.rows`` — raw rows :data:`Row`; ``Recorder.where(row)``; ``Recorder.plain(rows)`` JSON-safe.
- ``Recorder.failure_evidence(exc, **more) -> (where, evidence)`` — for the finding of a forward that raised.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module
from torch.overrides import TorchFunctionMode

from ...errors import InvalidArgument

#: (event, module path, op or module class, slot, shape, dtype, device, stride, contiguous); event is
#: "input" / "output" (module boundary) or "op"
Row = tuple[str, str, Any, str, tuple[int, ...], Any, Any, Any, bool]
_MAX_TENSORS = 8  # tensors recorded per boundary (a module with more inputs records the first eight)
_MAX_ROWS = 200_000  # recording stops here (the stack and the failure are still tracked)
_DISABLED = torch._C.DisableTorchFunction
#: in-place ops that change a tensor's shape or strides: pending boundary rows read their metadata before these run
_METADATA_INPLACE = frozenset(getattr(torch.Tensor, name) for name in (
    "unsqueeze_", "squeeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "resize_", "resize_as_", "as_strided_", "set_")
    if hasattr(torch.Tensor, name))


def call_args(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``inputs`` as the model receives them: a tensor -> ``(inputs,)``; a tuple -> positional args; a dict ->
    keyword args. Anything else is misuse (a list is ambiguous: wrap it, ``(my_list,)``)."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, tuple):
        return inputs, {}
    if isinstance(inputs, dict):
        if not all(isinstance(k, str) for k in inputs):
            raise InvalidArgument("Expected `inputs` dict keys to be argument names (str) but got "
                                  f"{next(type(k).__name__ for k in inputs if not isinstance(k, str))}")
        return (), dict(inputs)
    extra = " (pass (your_list,) to give a list as one argument)" if isinstance(inputs, list) else ""
    raise InvalidArgument("Expected `inputs` to be a tensor, a tuple of positional arguments or a dict of keyword "
                          f"arguments but got {'None' if inputs is None else type(inputs).__name__}{extra}")


def tensors(value: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Tensors in ``value`` (a tensor, or nested tuples/lists/dicts of them, 3 levels), in order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors(item, depth + 1)
    elif depth < 3 and isinstance(value, Mapping):
        for item in value.values():
            yield from tensors(item, depth + 1)


def is_builtin(module: nn.Module) -> bool:
    """A module class from ``torch.nn`` itself (a user subclass with its own ``forward`` is the user's)."""
    return type(module).__module__.startswith("torch.nn.")


def op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    if name == "__get__":  # a property such as Tensor.T or Tensor.data
        return str(getattr(getattr(func, "__self__", None), "__name__", "property"))
    return name


def _meta(t: torch.Tensor) -> tuple[tuple[int, ...], Any, Any, Any, bool]:
    try:
        return tuple(t.shape), t.dtype, t.device, t.stride(), t.is_contiguous()
    except (RuntimeError, NotImplementedError):  # sparse / nested tensors have no strides
        return tuple(t.shape), t.dtype, t.device, None, False


class Recorder(TorchFunctionMode):
    """Records one forward pass. ``watch`` maps torch functions to callbacks ``(func, args, kwargs, out, path)``
    called after the op ran (outside torch.nn internals); ``on_pre(path, module, args)`` and
    ``on_post(path, module, args, output)`` are called at the boundaries of the root's registered modules.
    Callbacks run with torch functions disabled; an exception in one is kept in ``internal_errors``."""

    def __init__(self, root: nn.Module | None, *, watch: dict[Any, Callable[..., None]] | None = None,
                 on_pre: Callable[..., None] | None = None, on_post: Callable[..., None] | None = None) -> None:
        super().__init__()
        modules = root.named_modules() if root is not None else ()
        self.paths = {id(m): (path, is_builtin(m), type(m).__name__) for path, m in modules}
        self.watch = watch or {}
        self.on_pre, self.on_post = on_pre, on_post
        self.stack: list[str] = []  # running modules, outermost first
        self.trusted: list[bool] = []
        self.inside_builtin = False
        self.rows: list[Row] = []
        self.failure: dict[str, Any] | None = None
        self.internal_errors: list[str] = []
        self.raised_in: dict[int, tuple[BaseException, list[str]]] = {}  # exception -> module stack when it was raised
        self.flushed = 0  # rows before this index hold metadata only
        self.active = False  # this mode is on the torch-function mode stack

    # --- the hot path ------------------------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _METADATA_INPLACE:
            self.flush()
        try:
            out = func(*args, **kwargs) if kwargs else func(*args)
        except Exception:
            if self.failure is None:
                self._failed(func, args, kwargs)
            raise
        if self.inside_builtin:
            return out
        if isinstance(out, torch.Tensor):
            if len(self.rows) < _MAX_ROWS:
                self.rows.append(("op", self.stack[-1] if self.stack else "", func, "", *_meta(out)))
            callback = self.watch.get(func)
            if callback is not None:
                self._callback(callback, func, args, kwargs or {}, out, self.stack[-1] if self.stack else "")
        elif type(out) in (tuple, list) and out and isinstance(out[0], torch.Tensor) and len(self.rows) < _MAX_ROWS:
            path = self.stack[-1] if self.stack else ""
            for i, t in enumerate(out[:_MAX_TENSORS]):
                if isinstance(t, torch.Tensor):
                    self.rows.append(("op", path, func, str(i), *_meta(t)))
        return out

    def _failed(self, func: Any, args: Any, kwargs: Any) -> None:
        with _DISABLED():
            shapes = [list(t.shape) for t in tensors((args, kwargs or {}))][:_MAX_TENSORS]
        self.failure = {"op": op_name(func), "module": self.stack[-1] if self.stack else "", "input_shapes": shapes}

    def _callback(self, callback: Callable[..., None], *args: Any) -> None:
        with _DISABLED():
            try:
                callback(*args)
            except Exception as exc:  # noqa: BLE001 - an instrument bug must not look like the user's failure
                self.internal_errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])

    # --- module boundaries -------------------------------------------------------------------------------------
    def _pre(self, module: nn.Module, args: Any) -> None:
        entry = self.paths.get(id(module))
        if entry is None:
            return
        path, builtin, kind = entry
        self.stack.append(path)
        self.trusted.append(builtin)
        self.inside_builtin = builtin
        if builtin == self.active:
            self._switch(not builtin)
        if self.on_pre is not None:
            self._callback(self.on_pre, path, module, args)
        self._boundary("input", path, kind, args[0] if len(args) == 1 else args)

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        entry = self.paths.get(id(module))
        if entry is None:
            return
        path = entry[0]
        unwinding = sys.exc_info()[1] if output is None else None  # always_call: the forward is raising
        if unwinding is not None:
            self.raised_in.setdefault(id(unwinding), (unwinding, list(self.stack)))
        else:
            self._boundary("output", path, entry[2], output)
            if self.on_post is not None:
                self._callback(self.on_post, path, module, args, output)
        stack = self.stack
        if stack and stack[-1] == path:
            stack.pop()
            self.trusted.pop()
        elif path in stack:  # defensive: entries above this module are stale
            depth = len(stack) - 1 - stack[::-1].index(path)
            del stack[depth:], self.trusted[depth:]
        self.inside_builtin = self.trusted[-1] if self.trusted else False
        if self.inside_builtin == self.active:
            self._switch(not self.inside_builtin)

    def _switch(self, on: bool) -> None:
        """Leave the mode while a torch.nn built-in runs (its ops are not recorded: they run at full speed) and
        come back for user code; only when this mode is the innermost one."""
        depth = torch._C._len_torch_function_stack()
        if not on and depth and torch._C._get_function_stack_at(depth - 1) is self:
            torch._C._pop_torch_function_stack()
            self.active = False
        elif on and not self.active:
            torch._C._push_on_torch_function_stack(self)
            self.active = True

    def _boundary(self, event: str, path: str, kind: str, value: Any) -> None:
        """Boundary rows keep the tensor until ``flush`` reads its metadata (after the pass, or every 256 rows
        so that at most 256 tensors are held): reading metadata here would cost as much as the row itself."""
        rows = self.rows
        if len(rows) >= _MAX_ROWS:
            return
        if isinstance(value, torch.Tensor):  # the common case, without walking containers
            rows.append((event, path, kind, "", value))
        else:
            with _DISABLED():
                found = list(tensors(value))[:_MAX_TENSORS]
            for i, t in enumerate(found):
                rows.append((event, path, kind, str(i) if len(found) > 1 else "", t))
        if len(rows) - self.flushed > 256:
            self.flush()

    def flush(self) -> None:
        """Replace held tensors in rows by their metadata."""
        rows = self.rows
        with _DISABLED():
            for i in range(self.flushed, len(rows)):
                if len(rows[i]) == 5:
                    rows[i] = rows[i][:4] + _meta(rows[i][4])
        self.flushed = len(rows)

    def record_output(self, output: Any) -> None:
        """The output of a root that is not a module (a plain callable): recorded as the "" output boundary."""
        found = list(tensors(output))[:_MAX_TENSORS]
        for i, t in enumerate(found):
            self.rows.append(("output", "", "output", str(i) if len(found) > 1 else "", *_meta(t)))
        self.flushed = len(self.rows)

    # --- running -------------------------------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
        """``fn(*args, **kwargs)`` under the recorder; returns ``(output, None)`` or ``(None, exception)``. The hooks
        are removed and the mode exited whatever happens; ``stack_at(exception)`` gives the modules running when it
        was raised (post-hooks run with ``always_call``, so an exception a forward catches does not leave stale entries)."""
        pre = _module.register_module_forward_pre_hook(self._pre)
        post = _module.register_module_forward_hook(self._post, always_call=True)
        self._switch(True)
        try:
            return fn(*args, **kwargs), None
        except Exception as exc:  # noqa: BLE001 - the user's failure is evidence, reported by the instrument
            return None, exc
        finally:
            self._switch(False)
            self.active = False
            post.remove()
            pre.remove()
            self.flush()

    def stack_at(self, exc: BaseException) -> list[str]:
        """The running modules (outermost first) when ``exc`` left the innermost one."""
        if id(exc) in self.raised_in and self.raised_in[id(exc)][0] is exc:
            return self.raised_in[id(exc)][1]
        return list(self.raised_in.values())[-1][1] if self.raised_in else list(self.stack)

    def failure_evidence(self, exc: BaseException, **more: Any) -> tuple[str, dict[str, Any]]:
        """Where a forward that raised stopped (the innermost running module, '' for the root) and the evidence:
        the exception, the module stack, ``more``, then the failing op and its input shapes when one was seen."""
        stack = self.stack_at(exc)
        ev: dict[str, Any] = {"exception": exception_line(exc), "module_stack": stack, **more}
        if self.failure is not None:
            ev.update(failing_op=f"op:{self.failure['op']}@{self.failure['module']}",
                      op_input_shapes=self.failure["input_shapes"])
        return (stack[-1] if stack else ""), ev

    @staticmethod
    def where(row: Row) -> str:
        """A row's place in the user's terms: a module path, or ``op:<name>@<module path>`` for a functional op."""
        return f"op:{op_name(row[2])}@{row[1]}" if row[0] == "op" else row[1]

    @staticmethod
    def plain(rows: list[Row], start: int = 0) -> list[dict[str, Any]]:
        """JSON-safe ledger rows (``i`` is the row's index in execution order)."""
        out = []
        for i, (event, path, what, slot, shape, dtype, device, stride, contiguous) in enumerate(rows, start):
            out.append({"i": i, "where": Recorder.where((event, path, what, slot, shape, dtype, device, stride,
                                                         contiguous)),
                        "event": event, "op": what if isinstance(what, str) else op_name(what), "slot": slot,
                        "shape": list(shape), "dtype": str(dtype).replace("torch.", ""), "device": str(device),
                        "stride": None if stride is None else list(stride), "contiguous": bool(contiguous)})
        return out


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


#: errors of Python code refusing what it was handed (not of a torch op on a wrong shape)
_REFUSALS = (TypeError, ValueError, KeyError, AttributeError)


def _binding_error(exc: BaseException) -> bool:
    """A TypeError raised while binding the arguments of a module's ``forward``: the innermost frame is torch's module
    call, the forward itself never started (``missing 1 required positional argument``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return isinstance(exc, TypeError) and tb is not None and tb.tb_frame.f_code.co_filename.endswith(
        ("torch/nn/modules/module.py", "torch\\nn\\modules\\module.py")) and "argument" in str(exc)


def refused_inputs(where: str, exc: BaseException) -> bool:
    """Whether a forward that raised refused the inputs themselves: the model's own top-level code (no submodule
    running) raised a Python error (the inputs are not what it takes: a whole-batch dict, another argument
    layout), or a wrapper's one child (``model.module``) could not bind them to its forward. That is how firstdiv
    read the batch, not evidence of a defect in the program."""
    if isinstance(exc, NotImplementedError) or not isinstance(exc, _REFUSALS):
        return False
    return not where or ("." not in where and _binding_error(exc))


def refused_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return (f"not checked: the model's forward refused the inputs as read from the batch ({type(exc).__name__}: "
            f"{text}); pass inputs= as your loop calls the model")
