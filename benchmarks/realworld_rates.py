"""False-alarm and localization rates of the learning-chain instruments on the real-program corpus
(``tests/realworld/programs/``).

Correct programs run through ``firstdiv.diagnose(stop_at_first=False)`` at each seed (every instrument whose
evidence the program has runs once, as diagnose calls it); per instrument: runs, FAIL (false alarms), WARN and
SKIPPED. Each bug runs the instrument it names; per instrument: bugs, flagged (not PASS), localized (the first
divergence names the bug's place), and the bugs missed with what the instrument said. Also the seconds per call.

No assertion: the gates are ``tests/realworld/test_corpus.py``; this prints the rates.

    python benchmarks/realworld_rates.py [--seeds 3] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests" / "realworld"),
                str(Path(__file__).resolve().parent.parent / "tests")]

from _api import load_programs
from _gate import localized, run_bug, run_correct


def _correct(programs: dict, seeds: int) -> tuple[dict[str, Counter], Counter, list[str]]:
    by: dict[str, Counter] = defaultdict(Counter)
    diagnose: Counter = Counter()
    alarms: list[str] = []
    for name, module in programs.items():
        for seed in range(seeds):
            t0 = time.perf_counter()
            status, verdicts = run_correct(module.build(seed))
            by["diagnose"]["seconds"] += time.perf_counter() - t0
            diagnose[status] += 1
            for inst, v in verdicts.items():
                by[inst][v.status] += 1
                if v.status == "FAIL":
                    alarms.append(f"{name}@{seed} {inst}: {v.summary}")
    return by, diagnose, alarms


def _bugs(programs: dict) -> tuple[dict[str, Counter], list[str]]:
    by: dict[str, Counter] = defaultdict(Counter)
    missed: list[str] = []
    for name, module in programs.items():
        for bug in module.BUGS:
            t0 = time.perf_counter()
            v = run_bug(bug)
            c = by[bug.instrument]
            c["seconds"] += time.perf_counter() - t0
            c["bugs"] += 1
            c["flagged"] += v.status != "PASS"
            hit = localized(bug, v)
            c["localized"] += hit
            if not hit:
                missed.append(f"{name}/{bug.name} {bug.instrument}: expected {bug.where}, got {v.status} {v.where} {v.kind}")
    return by, missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated program names")
    args = parser.parse_args()
    torch.set_num_threads(1)
    programs = load_programs()
    if args.only:
        programs = {k: v for k, v in programs.items() if k in args.only.split(",")}
    console = Console()
    by, diagnose, alarms = _correct(programs, args.seeds)
    runs = len(programs) * args.seeds
    table = Table(title=f"correct programs: {len(programs)} x {args.seeds} seeds = {runs} runs")
    for col in ("instrument", "runs", "FAIL (false alarm)", "false-alarm rate", "WARN", "SKIPPED"):
        table.add_column(col)
    for inst, c in sorted(by.items()):
        if inst == "diagnose":
            continue
        n = sum(c[s] for s in ("PASS", "WARN", "SKIPPED", "FAIL"))
        table.add_row(inst, str(n), str(c["FAIL"]), f"{c['FAIL'] / n:.1%}", str(c["WARN"]), str(c["SKIPPED"]))
    console.print(table)
    console.print(f"diagnose: {dict(diagnose)}; {by['diagnose']['seconds'] / runs:.2f} s per program")
    for line in alarms:
        console.print(f"  false alarm: {line}")
    bugs, missed = _bugs(programs)
    table = Table(title="bug variants")
    for col in ("instrument", "bugs", "flagged", "localized", "localization rate", "s per call"):
        table.add_column(col)
    for inst, c in sorted(bugs.items()):
        table.add_row(inst, str(c["bugs"]), str(c["flagged"]), str(c["localized"]), f"{c['localized'] / c['bugs']:.0%}",
                      f"{c['seconds'] / c['bugs']:.2f}")
    console.print(table)
    for line in missed:
        console.print(f"  missed: {line}")


if __name__ == "__main__":
    main()
