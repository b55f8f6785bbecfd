"""Time per builtin:mlp run and the cost of writing its run record, as a fraction of the run.

Target: writing the record costs under 1% of the run. Ratios come from one process and one run of
this script, so machine noise affects numerator and denominator alike.

    python benchmarks/record_overhead.py [--runs 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from firstdiv.lab.record import Recorder, build_record
from firstdiv.lab.runner import identity, run_seed
from firstdiv.lab.store import Store
from firstdiv.lab.workload import resolve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    wl = resolve("builtin:mlp")
    config = wl.config()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "runs.db")
        t0 = time.perf_counter()
        ident = identity(wl, config, store_path=store.path)
        ident_s = time.perf_counter() - t0
        run_s, build_s, write_s = [], [], []
        for seed in range(args.runs):
            t0 = time.perf_counter()
            rec = run_seed(wl, seed, ident)
            run_s.append(time.perf_counter() - t0)
            # Rebuild the record from a recorder holding the same rows to time assembly alone.
            r = Recorder(seed, config)
            r.rows = [dict(epoch=i, **{k: v[i] for k, v in rec.curves.items()}) for i in range(len(rec.curves["val_loss"]))]
            r.grad_norm_values = [rec.grad_norm["median"]] * 480
            t0 = time.perf_counter()
            build_record(r, workload=wl.target, identity=ident, wall=run_s[-1])
            build_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            store.add(rec)
            write_s.append(time.perf_counter() - t0)
        store.close()
    run = statistics.median(run_s)
    per_run = statistics.median(build_s) + statistics.median(write_s)
    print(f"runs measured                 {args.runs}")
    print(f"time per run (median)         {run * 1e3:8.1f} ms")
    print(f"record assembly (median)      {statistics.median(build_s) * 1e3:8.3f} ms")
    print(f"store write (median)          {statistics.median(write_s) * 1e3:8.3f} ms")
    print(f"identity (git, env) per sweep {ident_s * 1e3:8.1f} ms  (once per sweep; /12 seeds = {ident_s / 12 * 1e3:.1f} ms)")
    print(f"record cost / run             {per_run / run:8.2%}   (target < 1%)")
    print(f"incl. identity over 12 seeds  {(per_run + ident_s / 12) / run:8.2%}")


if __name__ == "__main__":
    main()
