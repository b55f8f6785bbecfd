"""firstdiv: find the first place where a PyTorch training system stops matching its intended
computation, and tell whether a difference between two runs is real.

Public names load on first use, so ``import firstdiv`` (and the pytest plugin, and ``firstdiv
--help``) stays cheap: torch and scipy are imported only when an instrument or the lab needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._registry import lazy_names
from .errors import FirstdivError, InvalidArgument, NotFound, StoreError, WorkloadError
from .report import Divergence, Finding, Report, Status

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "aa": "firstdiv.lab.aa",
    "bisect": "firstdiv.lab.bisect",
    "compare": "firstdiv.lab.compare",
    "Comparison": "firstdiv.lab.compare",
    "curves": "firstdiv.lab.curves",
    "CurveComparison": "firstdiv.lab.curves",
    "determinism": "firstdiv.lab.determinism",
    "factorial": "firstdiv.lab.factorial",
    "Functional": "firstdiv.lab.functional",
    "vectorizable": "firstdiv.lab.functional",
    "Factorial": "firstdiv.lab.factorial",
    "Gate": "firstdiv.lab.gate",
    "Recorder": "firstdiv.lab.record",
    "RunRecord": "firstdiv.lab.record",
    "rng_audit": "firstdiv.lab.rng_audit",
    "Store": "firstdiv.lab.store",
    "sweep": "firstdiv.lab.sweep",
    "SweepResult": "firstdiv.lab.sweep",
    "workload": "firstdiv.lab.workload",
    **lazy_names(),  # the instruments, from their registry
    "variants": "firstdiv.instruments.compare_outputs.variants",
    "route": "firstdiv.diagnosis.route",
    "routes": "firstdiv.diagnosis.route",
    "diagnose": "firstdiv.diagnosis",
    "Worksheet": "firstdiv.diagnosis",
    "log": "firstdiv._log",
    "eval_contract": "firstdiv._log",
    "throughput": "firstdiv._log",
    "grad_norm": "firstdiv._log",
    "log_config": "firstdiv._log",
    "Incident": "firstdiv.diagnosis.incident",
    "incident_new": "firstdiv.diagnosis.incident",
    "incident_list": "firstdiv.diagnosis.incident",
    "incident_show": "firstdiv.diagnosis.incident",
    "incident_close": "firstdiv.diagnosis.incident",
    "to_html": "firstdiv.render.html",
    "watch": "firstdiv.instruments.watch",
}

__all__ = [
    "Comparison",
    "CurveComparison",
    "DiagnosticSet",
    "Divergence",
    "Factorial",
    "Finding",
    "FirstdivError",
    "Functional",
    "Gate",
    "Incident",
    "InvalidArgument",
    "NotFound",
    "Recorder",
    "Report",
    "RunRecord",
    "Status",
    "Store",
    "StoreError",
    "SweepResult",
    "WorkloadError",
    "Worksheet",
    "__version__",
    "aa",
    "attention_check",
    "bisect",
    "compare",
    "compare_outputs",
    "compile_ledger",
    "curves",
    "determinism",
    "diagnose",
    "eval_contract",
    "evidence_packet",
    "factorial",
    "feature_space",
    "four_structures",
    "grad_norm",
    "incident_close",
    "incident_list",
    "incident_new",
    "incident_show",
    "learning_ledger",
    "loader_timing",
    "log",
    "log_config",
    "memory_phases",
    "performance_ledger",
    "reachability",
    "rng_audit",
    "route",
    "routes",
    "shape_ledger",
    "six_claims",
    "stage_trace",
    "step_probe",
    "sweep",
    "tensor_trace",
    "throughput",
    "to_html",
    "variants",
    "vectorizable",
    "watch",
    "workload",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'firstdiv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from .lab.aa import aa
    from .lab.bisect import bisect
    from .lab.compare import Comparison, compare
    from .lab.curves import CurveComparison, curves
    from .lab.determinism import determinism
    from .lab.factorial import Factorial, factorial
    from .lab.functional import Functional, vectorizable
    from .lab.gate import Gate
    from .lab.record import Recorder, RunRecord
    from .lab.rng_audit import rng_audit
    from .lab.store import Store
    from .lab.sweep import SweepResult, sweep
    from .lab.workload import workload
