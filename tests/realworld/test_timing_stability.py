"""The stability gate of the timing cases: the correct ``timing=True`` cases run 20 times in all (spread over the
cases and their seeds) while two processes burn the CPU beside them, and none may raise a false alarm (a FAIL, or
a WARN the case does not declare). ``benchmarks/timing_stability.py`` runs 20 per case and the bug cases too."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from _cases import load_cases, outcome

RUNS = 20
# a busy loop that also ends itself, so a neighbour outlives the test by a minute at most
BURN = "import time\nend = time.monotonic() + 90\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def burner():
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        time.sleep(0.2)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_timing_cases_raise_no_false_alarm_under_a_cpu_burning_neighbour(burner, one_thread):
    correct = [c for cases in load_cases().values() for c in cases if c.timing and not c.bug]
    assert len(correct) >= 5
    alarms, loads = [], []
    for i in range(RUNS):
        case = correct[i % len(correct)]
        seed = case.seeds[(i // len(correct)) % len(case.seeds)]
        report = case.call(case.build(seed))
        assert all(p.poll() is None for p in burner), "the CPU-burning neighbour stopped: the run was not under load"
        out = outcome(report)
        machine = report.details.get("machine") or {}
        loads.append(machine.get("load_per_cpu"))
        if out.status == "FAIL" or (out.status == "WARN" and not case.warn) or out.status == "SKIPPED":
            alarms.append(f"{case.name}[{seed}] {out.status}: {out.summary}")
    seen = [x for x in loads if x is not None]
    print(f"\ntiming stability: {len(alarms)} false alarms (FAIL, undeclared WARN, SKIPPED) in {RUNS} runs under 2 "
          f"burning processes "
          f"(load per CPU {min(seen, default=0):.2f}-{max(seen, default=0):.2f})")
    assert alarms == [], f"{len(alarms)}/{RUNS} false alarms under load: " + "; ".join(alarms)
