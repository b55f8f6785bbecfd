"""loader_timing on a synthetic slow dataset, with a num_workers sweep (appendix section 6: sweep one control
at a time, recording examples/s, the batch-wait distribution and the post-batch work time).

Two producers, chosen with --kind:

- ``sleep``: __getitem__ sleeps (I/O-like: reading from a slow disk). More workers overlap the waiting, so
  examples/s should rise with num_workers until the consumer is the limit.
- ``cpu``: __getitem__ burns CPU (decode/transform-like) and so does the step. On a machine with few free
  cores, more workers cut the wait but slow the step by competing for the same CPU, and end-to-end
  examples/s stays flat: the cpu_contention finding.

Usage: ``python benchmarks/loader_sweep.py --kind cpu --workers 0 1 2 --batches 8``. Prints the sweep table
and the report; numbers depend on the machine and its load (this is a demonstration, not a test).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

from firstdiv.instruments.loader_timing import loader_timing


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds  # CPU time, so a descheduled process keeps burning once it runs again
    while time.process_time() < end:
        pass


class SlowDataset(Dataset):
    """``n`` examples of 64 features; each __getitem__ costs ``cost`` seconds of sleep or CPU."""

    def __init__(self, n: int, cost: float, kind: str) -> None:
        self.n, self.cost, self.kind = n, cost, kind

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.kind == "sleep":
            time.sleep(self.cost)
        else:
            _burn(self.cost)
        return torch.full((64,), float(i)), i % 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("sleep", "cpu"), default="sleep")
    ap.add_argument("--cost-ms", type=float, default=2.0, help="cost of one __getitem__")
    ap.add_argument("--step-ms", type=float, default=10.0, help="CPU cost of one step")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(SlowDataset(args.batch_size * 64, args.cost_ms / 1e3, args.kind), batch_size=args.batch_size,
                        shuffle=True, generator=torch.Generator().manual_seed(0))

    def step(_batch: object) -> None:
        _burn(args.step_ms / 1e3)

    t0 = time.perf_counter()
    report = loader_timing(loader, step=step, batches=args.batches, sweep={"num_workers": args.workers})
    print(f"cpus available: {len(os.sched_getaffinity(0))}; kind={args.kind}; getitem {args.cost_ms} ms x "
          f"{args.batch_size} per batch; step {args.step_ms} ms of CPU; took {time.perf_counter() - t0:.1f} s\n")
    print(f"{'num_workers':>11} {'examples/s':>11} {'wait med':>9} {'wait p95':>9} {'work med':>9} {'first':>9}")
    for row in report.details["sweep"]:
        if row["status"] != "ok":
            print(f"{row['value']:>11} {row['status']}: {row.get('reason', '')}")
            continue
        w, k = row["wait_ms"], row["work_ms"]
        print(f"{row['value']:>11} {row['examples_per_s']:>11.1f} {w['median']:>9.2f} {w['p95']:>9.2f} {k['median']:>9.2f} "
              f"{row['first_wait_ms'] or 0:>9.1f}")
    print(f"\nlimiting phase: {report.details['limiting_phase']}; cpu_contention: {report.details['cpu_contention']}\n")
    print(report)


if __name__ == "__main__":
    main()
