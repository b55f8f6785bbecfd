"""Memory measurement shared by performance_ledger and memory_phases (appendix section 12, "Memory").

- ``rss() -> (bytes | None, source)``: the process's resident set size from psutil when installed, else
  ``/proc/self/statm``, else ``resource.getrusage`` (which only knows the *peak* RSS; the source says so).
- ``cuda_memory(device) -> dict``: allocated / reserved / peak allocated / peak reserved bytes from the CUDA
  caching allocator (peaks since the last ``torch.cuda.reset_peak_memory_stats``).
- :class:`LiveTensors`: a ``TorchDispatchMode`` that counts the bytes of live tensor storages created while it
  is active, device-agnostic and exact: every non-aliasing operator output is recorded by its storage
  (deduplicated by data pointer, so views and in-place results never count twice) through a C++-level weak
  reference to the storage (``StorageWeakRef``). A storage kept alive only inside autograd (a saved
  activation, a retained graph) is still counted, which weak references to Python tensor objects miss.
  With ``cap_bytes`` it refuses an operator whose outputs would bring the live total over the cap by raising
  ``torch.OutOfMemoryError``: the injected allocation failure that makes OOM-by-phase testable on CPU.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: the exception a real allocator raises; torch.cuda.OutOfMemoryError on torch versions without the alias
OOM_ERRORS: tuple[type[BaseException], ...] = tuple({getattr(torch, "OutOfMemoryError", None),
                                                     getattr(torch.cuda, "OutOfMemoryError", None)} - {None})
_OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
_CREATES = ("aten.lift_fresh", "aten.lift_fresh_copy")  # a tensor made from Python data enters dispatch here
_SWEEP_EVERY = 1024


def fmt_bytes(n: float | None) -> str:
    """``1.5 MiB``; sign kept for deltas."""
    if n is None:
        return "n/a"
    sign, n = ("-" if n < 0 else ""), abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    return f"{sign}{n:.2f} GiB"  # pragma: no cover


@functools.lru_cache(maxsize=1)
def _psutil_process() -> Any:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process()


def rss() -> tuple[int | None, str]:
    """(resident set size in bytes, where it came from). getrusage reports the peak, not the current value."""
    proc = _psutil_process()
    if proc is not None:
        return int(proc.memory_info().rss), "psutil"
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"), "/proc/self/statm"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        import sys
    except ImportError:  # pragma: no cover - not POSIX
        return None, "unavailable"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024), "resource.getrusage (peak RSS)"


def cuda_memory(device: torch.device | int | None = None) -> dict[str, int]:
    """Caching-allocator counters for ``device``: live allocations vs the pool, and their peaks."""
    return {"allocated": int(torch.cuda.memory_allocated(device)), "reserved": int(torch.cuda.memory_reserved(device)),
            "peak_allocated": int(torch.cuda.max_memory_allocated(device)),
            "peak_reserved": int(torch.cuda.max_memory_reserved(device))}


@functools.lru_cache(maxsize=4096)
def _aliasing(func: Any) -> tuple[bool, ...]:
    """Per schema return: True when it aliases an input (views, in-place and out= results allocate nothing)."""
    if str(func.overloadpacket) in _CREATES:
        return (False,)
    try:
        return tuple(r.alias_info is not None for r in func._schema.returns)
    except AttributeError:
        return (False,)


def _outputs(func: Any, out: Any, aliased: bool) -> list[torch.Tensor]:
    """The output tensors that alias an input (``aliased``) or that are fresh allocations (not ``aliased``)."""
    flags = _aliasing(func)
    if all(flags) or not any(flags) or not isinstance(out, (tuple, list)):
        return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)] if all(flags) == aliased else []
    return [t for o, flag in zip(out, flags) if flag == aliased for t in tree_leaves(o) if isinstance(t, torch.Tensor)]


class LiveTensors(TorchDispatchMode):
    """Counts bytes of live tensor storages created while active (see the module docstring).

    ``label()`` names where the program is (a phase) for the OOM message; ``tag`` marks the records made
    now (an iteration index) and, with ``keep_tensors``, Python weak references to the output tensors are
    kept so :meth:`survivors` can say which tensors outlived their iteration and whether they carry a graph.
    """

    def __init__(self, cap_bytes: int | None = None, label: Callable[[], str] = lambda: "",
                 keep_tensors: bool = False) -> None:
        super().__init__()
        self.cap_bytes = cap_bytes
        self.label = label
        self.keep_tensors = keep_tensors
        self.tag = 0
        self.failure: dict[str, Any] | None = None
        self._storages: dict[tuple[int, Any], tuple[StorageWeakRef, int]] = {}
        self._total = 0  # sum over self._storages, expired entries included until the next sweep
        self._records = 0
        self._tensors: list[tuple[weakref.ref, int, str]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        new = 0
        for t in _outputs(func, out, aliased=False):
            new += self._record(t, func)
        if self.keep_tensors:  # views of tensors made here (x.detach()) keep those storages alive too
            for t in _outputs(func, out, aliased=True):
                self._keep_view(t, func)
        if new and self.cap_bytes is not None and self._total > self.cap_bytes:
            self.sweep()
            if self._total > self.cap_bytes:
                self._refuse(func, new)
        return out

    def _record(self, t: torch.Tensor, func: Any) -> int:
        try:
            s = t.untyped_storage()
            nbytes, ptr, device = s.nbytes(), s.data_ptr(), s.device
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # sparse, nested, fake tensors
            return 0
        if nbytes == 0 or ptr == 0 or device.type == "meta":
            return 0
        key = (ptr, device)
        old = self._storages.get(key)
        if old is not None and not old[0].expired():
            return 0
        if old is not None:
            self._total -= old[1]
        self._storages[key] = (StorageWeakRef(s), nbytes)
        self._total += nbytes
        if self.keep_tensors:
            self._tensors.append((weakref.ref(t), self.tag, str(func)))
        self._records += 1
        if self._records % _SWEEP_EVERY == 0:
            self.sweep()
        return nbytes

    def _keep_view(self, t: torch.Tensor, func: Any) -> None:
        try:
            s = t.untyped_storage()
            key = (s.data_ptr(), s.device)
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):
            return
        if key in self._storages:  # a view of a storage created here, not of a parameter updated in place
            self._tensors.append((weakref.ref(t), self.tag, str(func)))

    def sweep(self) -> None:
        """Forget storages that have been freed (exact: a storage is freed when its last owner lets go)."""
        dead = [k for k, (ref, _) in self._storages.items() if ref.expired()]
        for k in dead:
            self._total -= self._storages.pop(k)[1]

    def live_bytes(self) -> int:
        """Bytes of storages created while active and still alive (call ``gc.collect()`` first to drop cycles)."""
        self.sweep()
        return self._total

    def _refuse(self, func: Any, new: int) -> None:
        phase = self.label()
        message = (f"firstdiv memory cap: {func} allocating {fmt_bytes(new)} during {phase or 'this context'} would "
                   f"bring live tensor bytes created in this context to {fmt_bytes(self._total)}, over "
                   f"cap_bytes={self.cap_bytes} ({fmt_bytes(self.cap_bytes)}); injected allocation failure")
        if self.failure is None:  # the first refusal is the one that matters; later ones are its aftermath
            self.failure = {"phase": phase, "op": str(func), "requested_bytes": new, "live_bytes": self._total,
                            "cap_bytes": self.cap_bytes, "message": message}
        raise _OOM(message)

    def survivors(self, tags: range) -> list[dict[str, Any]]:
        """Tensors recorded under ``tags`` that are still alive: op, shape, dtype and autograd node, if any."""
        out = []
        for ref, tag, op in self._tensors:
            t = ref()
            if t is not None and tag in tags:
                grad_fn = t.grad_fn
                out.append({"iteration": tag, "op": op, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                            "grad_fn": type(grad_fn).__name__ if grad_fn is not None else None})
        return out

    def clear(self) -> None:
        """Drop every record (weak references only: nothing of the user's is kept or changed)."""
        self._storages.clear()
        self._tensors.clear()
        self._total = 0


def is_oom(exc: BaseException | None) -> bool:
    return exc is not None and isinstance(exc, OOM_ERRORS)
