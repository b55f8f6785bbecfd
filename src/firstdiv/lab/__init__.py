"""The regression lab: workloads, run records, the store, sweeps and comparisons."""

from .compare import Comparison, compare
from .record import Recorder, RunRecord
from .store import Store, SweepInfo
from .sweep import SweepResult, parse_seeds, sweep
from .workload import resolve, workload

__all__ = ["Comparison", "Recorder", "RunRecord", "Store", "SweepInfo", "SweepResult", "compare",
           "parse_seeds", "resolve", "sweep", "workload"]
