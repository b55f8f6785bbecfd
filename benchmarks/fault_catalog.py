"""Detection and false-alarm counts of the instruments over the fault catalog (firstdiv.zoo).

For each fault: did the instrument the catalog names localize it (FAIL, right `where`, right kind)?
Did any *other* instrument also fire? For each clean reference and seed: did any instrument fire
(a false alarm)? Prints the table and the totals.

    python benchmarks/fault_catalog.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import CALLS

from firstdiv import zoo
from firstdiv.report import Status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    console = Console(width=200)
    table = Table("fault", "origin", "on", "instrument", "localized", "where / kind", "also fired")
    detected = total = 0
    t0 = time.perf_counter()
    for name, fault in sorted(zoo.FAULTS.items()):
        for ref in fault.applies_to:
            for exp in fault.expected:
                report = CALLS[exp.instrument](zoo.build(ref, fault=name, seed=0))
                div = report.first_divergence
                ok = (report.status is Status.FAIL and div is not None and div.where == exp.where
                      and (not exp.kind or div.kind == exp.kind))
                program = zoo.build(ref, fault=name, seed=0)
                others = [n for n, call in CALLS.items() if n != exp.instrument and call.applies(program)
                          and call(zoo.build(ref, fault=name, seed=0)).status is Status.FAIL]
                detected += ok
                total += 1
                table.add_row(name, fault.origin, ref, exp.instrument, "yes" if ok else "NO",
                              f"{div.where} / {div.kind}" if div else "-", ", ".join(others))
    console.print(table)
    alarms = runs = 0
    for ref in zoo.REFERENCES:
        for seed in range(args.seeds):
            program = zoo.build(ref, seed=seed)
            for name, call in CALLS.items():
                if not call.applies(program):
                    continue
                runs += 1
                if call(program).status is Status.FAIL:
                    alarms += 1
                    console.print(f"false alarm: {name} on clean {ref} seed {seed}")
    console.print(f"detected {detected}/{total} fault localizations; false alarms {alarms}/{runs} instrument runs "
                  f"on clean references over {args.seeds} seeds; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
