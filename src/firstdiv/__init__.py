"""firstdiv: find the first place where a PyTorch training system stops matching its intended
computation, and tell whether a difference between two runs is real."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import FirstdivError, InvalidArgument, NotFound, StoreError, WorkloadError
from .lab import Comparison, Recorder, RunRecord, Store, SweepResult, compare, sweep, workload
from .report import Divergence, Finding, Report, Status

__all__ = [
    "Comparison", "Divergence", "Finding", "FirstdivError", "InvalidArgument", "NotFound", "Recorder", "Report",
    "RunRecord", "Status", "Store", "StoreError", "SweepResult", "WorkloadError", "__version__", "compare",
    "sweep", "workload",
]
