"""What every step of the compile ledger reads and fills: the target, the inputs, the options, and what the
main pass recorded (outputs compared, compile events per call, errors, timings)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._capture import CallRecord, Target, WarningCapture, compile_kwargs
from ._compare import Comparison, describe_call


@dataclass
class Ctx:
    target: Target
    calls: list[tuple[tuple, dict]]
    backend: Any
    dynamic: bool | None
    cache_limit: int | None
    rtol: float
    atol: float
    fullgraph_required: bool
    repeats: int
    payoff_calls: float
    logs: WarningCapture | None = None
    compiled: Callable[..., Any] | None = None
    records: list[CallRecord] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    eager_error: tuple[int, str] | None = None
    compiled_error: tuple[int, str] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    capture: dict[str, Any] | None = None  # CAPTURED's record of inputs_seq[0], when the main pass made it

    def kwargs(self, backend: Any = None, fullgraph: bool = False) -> dict[str, Any]:
        return compile_kwargs(self.backend if backend is None else backend, self.dynamic, self.cache_limit, fullgraph)

    def describe(self, i: int) -> str:
        return describe_call(*self.calls[i])
