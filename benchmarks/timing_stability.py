"""False-alarm and detection rates of the timing instruments under load: every ``timing=True`` case of the corpus
(``tests/realworld/cases/timing_*.py``) run ``--runs`` times (default 20, seeds cycled) while ``--burners``
processes (default 2) spin on the CPU beside them.

For a correct case a false alarm is a FAIL, a WARN the case does not declare, or a SKIPPED; for a bug case a
detection is its instrument's status at the place the case names. "remeasured": runs whose evidence disagreed at
first (loader_timing's wait vs the producer's cost, performance_ledger's phases vs the step) and were measured
again. Prints one row per case and the totals; no
assertion (tests/realworld/test_timing_stability.py is the gate, with 20 runs in all).

    python benchmarks/timing_stability.py [--runs 20] [--burners 2] [--threads 1] [--only loader_timing]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
BURN = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="runs per case")
    p.add_argument("--burners", type=int, default=2, help="CPU-burning neighbour processes (0: an idle machine)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the corpus gates run with 1)")
    p.add_argument("--only", default="", help="only the cases of this instrument")
    return p.parse_args()


def _row(case, runs: int, localized, outcome) -> dict:
    bad, again, seconds, statuses = 0, 0, [], {}
    for i in range(runs):
        seed = case.seeds[i % len(case.seeds)] if not case.bug else i
        t0 = time.perf_counter()
        report = case.call(case.build(seed))
        seconds.append(time.perf_counter() - t0)
        out = outcome(report)
        again += len(report.details.get("measurements") or report.details.get("reconcile") or [None]) > 1
        statuses[out.status] = statuses.get(out.status, 0) + 1
        if case.bug:
            bad += not localized(case, out)
        else:
            bad += out.status in ("FAIL", "SKIPPED") or (out.status == "WARN" and not case.warn)
    return {"bad": bad, "again": again, "median_s": float(np.median(seconds)), "statuses": statuses}


def main() -> None:
    args = _args()
    sys.path[:0] = [str(ROOT / "tests" / "realworld"), str(ROOT / "src")]
    import torch
    from _cases import load_cases, localized, outcome

    if args.threads:
        torch.set_num_threads(args.threads)
    cases = [c for cs in load_cases().values() for c in cs if c.timing and (not args.only or c.instrument == args.only)]
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(args.burners)]
    totals = {False: [0, 0], True: [0, 0]}
    try:
        time.sleep(0.5)
        print(f"{len(cases)} timing cases x {args.runs} runs, {args.burners} burning processes, "
              f"torch threads {torch.get_num_threads()}")
        print(f"{'case':42} {'kind':8} {'rate':>16} {'median s':>9} {'remeasured':>10}  statuses")
        for case in cases:
            r = _row(case, args.runs, localized, outcome)
            good = args.runs - r["bad"] if case.bug else r["bad"]
            totals[case.bug][0] += good
            totals[case.bug][1] += args.runs
            what = "detected" if case.bug else "false"
            print(f"{case.name:42} {'bug' if case.bug else 'correct':8} {f'{good}/{args.runs} {what}':>16} "
                  f"{r['median_s']:9.3f} {r['again']:>10}  {r['statuses']}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
    fa, n = totals[False]
    det, m = totals[True]
    print(f"false alarms: {fa}/{n} ({fa / max(1, n):.1%}); bugs detected at their place: {det}/{m} "
          f"({det / max(1, m):.1%})")


if __name__ == "__main__":
    main()
