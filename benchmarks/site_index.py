"""How long the run store's index takes (firstdiv.site.index_rows, and the whole index page `firstdiv ui` serves)
on a store of many runs. Target: well under 1 s for 100,000 runs.

The store is made by the store's own API (schema, one real sweep of builtin:mlp whose run record is the
template) and then filled by bulk SQL consistent with the schema: sweeps of SEEDS seeds over several
workloads and dates, a failed run here and there, and seeds pinned to a run as a forced rerun leaves them.

    python benchmarks/site_index.py [--runs 100000] [--seeds 50] [--repeat 5] [--store PATH]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import firstdiv
from firstdiv import site
from firstdiv.lab.store import Store
from firstdiv.site import _pages

WORKLOADS = ("builtin:mlp", "train.py:train", "finetune.py:main", "cmd:bench.sh")


def build(path: Path, runs: int, seeds: int) -> None:
    firstdiv.sweep("builtin:mlp", "0", sets=["epochs=1", "n_train=200", "n_val=100"], store=path, name="template")
    with Store(path) as st:
        template = st.sweeps()[0]
        record = st.records(template)[0].to_dict()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    n_sweeps = runs // seeds
    for i in range(n_sweeps):
        workload = WORKLOADS[i % len(WORKLOADS)]
        identity, sweep_id = f"ident{i:07d}", f"{i:012x}"
        created = f"2026-{1 + i * 11 // n_sweeps:02d}-{1 + i % 28:02d}T12:00:00.000+00:00"
        info = dict(template.info, config={**template.config, "lr": 0.001 * (1 + i % 7)}, config_hash=f"{i:012x}")
        conn.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                     (sweep_id, f"sweep-{i}-lr{1 + i % 7}", identity, workload, created, json.dumps(info)))
        rows = []
        for seed in range(seeds):
            status = "failed" if (i + seed) % 97 == 0 else "ok"
            payload = json.dumps(dict(record, seed=seed, identity=identity, workload=workload, status=status))
            rows.append((identity, seed, workload, status, created, payload))
        conn.executemany("INSERT INTO runs (identity, seed, workload, status, created, record) VALUES (?, ?, ?, ?, ?, ?)", rows)
        pinned = "(SELECT id FROM runs WHERE identity=? AND seed=sweep_seeds.seed ORDER BY id DESC LIMIT 1)"
        conn.executemany("INSERT INTO sweep_seeds (sweep_id, seed) VALUES (?, ?)", [(sweep_id, s) for s in range(seeds)])
        if i % 10 == 0:  # a forced rerun pins its seeds
            conn.execute(f"UPDATE sweep_seeds SET run_id = {pinned} WHERE sweep_id=?", (identity, sweep_id))
    conn.execute("COMMIT")
    conn.close()


def timed(label: str, repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    best, median = min(times), statistics.median(times)
    shown = len(result) if isinstance(result, (list, str)) else result
    print(f"{label:<44} median {median * 1000:8.1f} ms  best {best * 1000:8.1f} ms  ({shown})")
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=50, help="seeds per sweep")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", type=Path, default=None, help="reuse (or make) the store here")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="firstdiv-site-bench-")
    path = args.store or Path(tmp.name) / "runs.db"
    if not path.exists():
        start = time.perf_counter()
        build(path, args.runs, args.seeds)
        print(f"built {path}: {args.runs} runs in {args.runs // args.seeds} sweeps in {time.perf_counter() - start:.1f} s "
              f"({path.stat().st_size / 2**20:.0f} MiB)")
    with Store(path, readonly=True) as st:
        print(f"store: {st.count_runs()} runs")
    first = timed("index_rows() first page of 200", args.repeat, lambda: site.index_rows(path))
    timed("index_rows(name='lr3')", args.repeat, lambda: site.index_rows(path, name="lr3"))
    timed("index_rows(workload='train.py:train')", args.repeat, lambda: site.index_rows(path, workload="train.py:train"))
    timed("index_rows(since=2026-03-01, until=2026-04-30)", args.repeat,
          lambda: site.index_rows(path, since="2026-03-01", until="2026-04-30"))
    timed("index_rows(offset=last page)", args.repeat, lambda: site.index_rows(path, offset=max(site.index_total(path) - 200, 0)))
    timed("index_total()", args.repeat, lambda: site.index_total(path))
    page = timed("index page as `firstdiv ui` serves it", args.repeat, lambda: _pages.index_html(path, site.Filters()))
    print(f"index time: {first * 1000:.1f} ms for the first page ({page * 1000:.1f} ms the whole HTML page); "
          f"target < 1000 ms: {'met' if max(first, page) < 1.0 else 'NOT met'}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
