"""What keeping formula text inert costs a CSV export: writing rows with the check, over writing them without it.

The check scans each ~64 KiB chunk of written rows a few times (each scan led by one character) and looks at single
rows only in a chunk that may hold a cell starting with = + - @ TAB or CR. Rows are like `firstdiv export`'s (34
columns: hashes, a timestamp, config values, final metrics) and like `--curves`' (run_id, metric, step, value), with
and without negative numbers (which start with "-" and must stay numbers). Target: under 10% for each. Both sides
are timed in this process, interleaved, as CPU time (best of --repeat), so machine noise affects them alike.

    python benchmarks/csv_formula_check.py [--rows 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from firstdiv.lab import export_text

TARGET = 0.10
CODE = ("code.commit", "code.dirty", "code.dirty_hash", "code.version")
COLUMNS = ["run_id", "sweep", "sweep_id", "workload", "identity", "config_hash", *CODE, "env_hash", "seed", "status",
           "exit_code", "error", "created", "wall_seconds", *(f"config.k{i}" for i in range(14)),
           "metric.train_loss", "metric.val_acc", "metric.val_loss"]


def run_rows(n: int, negative: bool, rng: random.Random) -> list[dict[str, Any]]:
    sign = -1 if negative else 1
    rows = []
    for i in range(n):
        row = {"run_id": i + 1, "sweep": f"exp-{i // 20:05d}", "sweep_id": "862e946892ba", "workload": "builtin:mlp",
               "identity": "5211c9e4a1b2", "config_hash": "83ffb58c5054", "code.commit": "8efeaf5" * 5 + "abcde",
               "code.dirty": False, "code.dirty_hash": None, "code.version": "8efeaf5a86c4", "env_hash": "50402e7fd530",
               "seed": i % 20, "status": "ok", "exit_code": None, "error": None,
               "created": "2026-12-04T23:19:00.000+00:00", "wall_seconds": rng.random()}
        row.update({f"config.k{k}": rng.choice([3000, 0.001, "adamw", "cpu", 128, sign * 0.5]) for k in range(14)})
        row.update({"metric.train_loss": sign * rng.random(), "metric.val_acc": rng.random(),
                    "metric.val_loss": rng.random()})
        rows.append(row)
    return rows


def curve_rows(n: int, negative: bool, rng: random.Random) -> list[dict[str, Any]]:
    sign = -1 if negative else 1
    return [{"run_id": i // 30 + 1, "metric": ("train_loss", "val_loss", "val_acc")[i % 3], "step": i % 10,
             "value": sign * rng.random()} for i in range(n)]


def cpu(fn: Any) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(columns: list[str], rows: list[dict[str, Any]], repeat: int) -> tuple[float, float]:
    """(seconds with the check, seconds without: the best of ``repeat``, interleaved)."""
    real = export_text._suspect
    with_check, without = [], []
    for _ in range(repeat):
        with_check.append(cpu(lambda: export_text.emit(columns, rows, "csv", lambda text: None)))
        export_text._suspect = lambda text: False
        try:
            without.append(cpu(lambda: export_text.emit(columns, rows, "csv", lambda text: None)))
        finally:
            export_text._suspect = real
    return min(with_check), min(without)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    cases = [("run rows", COLUMNS, run_rows, args.rows), ("curve rows", ["run_id", "metric", "step", "value"],
                                                           curve_rows, args.rows * 10)]
    worst = 0.0
    for label, columns, make, n in cases:
        for negative in (False, True):
            with_check, without = measure(columns, make(n, negative, rng), args.repeat)
            cost = with_check / without - 1
            worst = max(worst, cost)
            print(f"{label:<10} {'with' if negative else 'without'} negative numbers: {n:,} rows, "
                  f"{without:.3f} s -> {with_check:.3f} s with the check (+{cost:.1%})")
    print(f"worst cost of the check: +{worst:.1%} (target under {TARGET:.0%}): {'OK' if worst < TARGET else 'OVER'}")


if __name__ == "__main__":
    main()
