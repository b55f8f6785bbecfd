"""`firstdiv runs`, `compare` and `export` on a run store holding 100,000 runs.

Target: each answers in under 1 s (export by --name; the whole store's export is reported too). compare's
command line pays for importing scipy.stats, whose tests it runs; that floor is timed apart, and so is the same
compare on a store of 8 sweeps, to show the part that grows with the store. The store is
generated once (5,000 sweeps x 20 seeds over four workloads, records like builtin:mlp's with 10-epoch curves, a
few failed runs and pinned seeds) in one transaction through the store's schema, and cached: under the temporary
directory, or at --store PATH. Times are the best of --repeat calls: first the library calls in this process,
then the real command lines (`python -m firstdiv ...`, which pay for Python's start-up and imports; that cost is
measured apart as `firstdiv --help` and as importing what each command imports).

    python benchmarks/store_scale.py [--store PATH] [--sweeps 5000] [--seeds 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from firstdiv.lab.record import RunRecord, short_hash
from firstdiv.lab.store_schema import MIGRATIONS, SCHEMA_VERSION

GENERATOR = 1  # bump when what build() writes changes: the cached store is then made again
WORKLOADS = ("builtin:mlp", "train.py:train", "models/resnet.py:train", "lm/finetune.py:main")
EPOCHS = 10
TARGET_S = 1.0
START = 1_700_000_000.0  # the first sweep's time; sweeps follow an hour apart

_ENV = {"python": "3.11.7", "torch": "2.13.0+cpu", "numpy": "2.4.6", "threads": 1, "device": "cpu", "gpu": None,
        "deterministic_algorithms": False, "cudnn_deterministic": False, "cudnn_benchmark": False,
        "cublas_workspace_config": None, "os": "Linux 6.18", "machine": "x86_64", "cpu": "AMD EPYC"}
_CONTRACT = {"eval_indices": "702746827e553786", "eval_count": 1000, "preprocessing": {"input_scale": 1.0},
             "aggregation": {"loss": "cross_entropy/mean", "accuracy": "mean"}, "model_mode": "eval",
             "metric": "val_loss, val_acc"}


def sweep_name(i: int) -> str:
    """Sweep ``i``'s name: unique, except every 250th sweep, which is one of the runs named "nightly"."""
    return "nightly" if i % 250 == 0 else f"exp-{i:05d}"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}+00:00"


def _template(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sweep ``i``'s run record (as a dict, before its seed's values) and its sweep info."""
    workload = WORKLOADS[i % len(WORKLOADS)]
    config = {"n_train": 3000, "n_val": 1000, "hidden": 32 << (i % 3), "epochs": EPOCHS, "batch_size": 128,
              "lr": round(0.001 * (1 + i % 50), 4), "weight_decay": 0.003, "dropout": 0.1 * (i % 4),
              "optimizer": ("adamw", "sgd")[i % 2], "label_shift": 0, "eval_mode": "eval", "threads": 1,
              "device": "cpu", "run": i}
    commit = short_hash({"commit": i // 40}) * 3 + "abcd"
    code = {"commit": commit, "dirty": False, "dirty_hash": None, "version": commit[:12]}
    config_hash, env_hash = short_hash(config), short_hash(_ENV)
    ident = short_hash({"workload": workload, "config_hash": config_hash, "code": code["version"], "env": env_hash})
    record = RunRecord(workload=workload, seed=0, config=config, config_hash=config_hash, identity=ident, code=code,
                       env=_ENV, env_hash=env_hash, data_identity="f576c833750fc154", eval_contract=_CONTRACT,
                       eval_fingerprint=short_hash(_CONTRACT), eval_fields=sorted(_CONTRACT), curves={}, final={},
                       directions={}, grad_norm={}, throughput={}, wall_seconds=0.0,
                       extra={"eval_keys": ["eval_mode"], "exec_keys": ["threads", "device"]}).to_dict()
    info = {"config": config, "config_hash": config_hash, "code": code, "env": _ENV, "env_hash": env_hash,
            "hypothesis": None, "success": None, "checkpoint_policy": None, "declared_before": None}
    return record, info


def _run(template: dict[str, Any], seed: int, curves: np.ndarray, t: float) -> tuple[str, str]:
    """(status, JSON) of one seed's run: a few runs failed half-way, with no final metrics."""
    failed = (seed * 7919 + int(t)) % 211 == 0
    n = EPOCHS // 2 if failed else EPOCHS
    names = ("train_loss", "val_loss", "val_acc")
    record = dict(template, seed=seed, created=_iso(t), wall_seconds=0.2 + float(curves[0, 0]) % 0.1,
                  curves={k: curves[j, :n].tolist() for j, k in enumerate(names)},
                  grad_norm={"min": 0.2, "median": 0.49, "p90": 0.61, "max": 0.93},
                  throughput={"examples": 30000, "seconds": 0.27, "examples_per_s": 111111.0},
                  state_hash=short_hash([template["identity"], seed]))
    if failed:
        record.update(status="failed", error="RuntimeError: loss exploded at epoch 5")
    else:
        record["final"] = {k: float(curves[j, n - 1]) for j, k in enumerate(names)} | {"examples_per_s": 111111.0}
    return record["status"], json.dumps(record)


def _schema(conn: sqlite3.Connection, version: int) -> None:
    """The store's tables as schema ``version`` made them (the migrations up to it)."""
    for script in MIGRATIONS[:version]:
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(version),))


def build(path: str | os.PathLike[str], *, sweeps: int = 5000, seeds: int = 20,
          schema_version: int = SCHEMA_VERSION) -> int:
    """Write a new store at ``path`` (schema ``schema_version``) holding ``sweeps`` x ``seeds`` runs; returns the
    number of runs. Every 50th sweep pins its seeds to their runs (as after a --force), the others read them unpinned."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; build() writes a new store")
    rng = np.random.default_rng(0)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN IMMEDIATE")
    _schema(conn, schema_version)
    run_id = 0
    for i in range(sweeps):
        template, info = _template(i)
        name, t = sweep_name(i), START + 3600.0 * i
        sweep_id = short_hash({"name": name, "identity": template["identity"]})
        conn.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                     (sweep_id, name, template["identity"], template["workload"], _iso(t), json.dumps(info)))
        curves = np.abs(rng.normal(0.9, 0.05, size=(seeds, 3, EPOCHS)))
        runs, pins = [], []
        for seed in range(seeds):
            run_id += 1
            status, payload = _run(template, seed, curves[seed], t + 1.0 + seed)
            runs.append((run_id, template["identity"], seed, template["workload"], status, _iso(t + 1.0 + seed), payload))
            pins.append((sweep_id, seed, run_id if i % 50 == 0 else None))
        conn.executemany("INSERT INTO runs (id, identity, seed, workload, status, created, record) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", runs)
        if schema_version >= 3:
            conn.executemany("INSERT INTO sweep_seeds (sweep_id, seed, run_id) VALUES (?, ?, ?)", pins)
        else:
            conn.executemany("INSERT INTO sweep_seeds (sweep_id, seed) VALUES (?, ?)", [p[:2] for p in pins])
    conn.execute("COMMIT")
    conn.close()
    return run_id


def cached(path: str | None, sweeps: int, seeds: int) -> Path:
    """The benchmark's store: made once, then reused (a store made by an older firstdiv migrates when opened)."""
    where = Path(path) if path else Path(tempfile.gettempdir()) / f"firstdiv-store-scale-g{GENERATOR}-{sweeps}x{seeds}.db"
    if not where.exists():
        t0 = time.perf_counter()
        tmp = where.with_name(where.name + ".part")
        for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            stale.unlink(missing_ok=True)
        n = build(tmp, sweeps=sweeps, seeds=seeds)
        os.replace(tmp, where)
        print(f"made {where}: {n:,} runs in {sweeps:,} sweeps, {where.stat().st_size / 2**20:.0f} MiB, "
              f"{time.perf_counter() - t0:.1f} s")
    return where


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def line(what: str, seconds: float, target: bool = True) -> None:
    verdict = ("under 1 s" if seconds < TARGET_S else "OVER 1 s") if target else "(reported)"
    print(f"  {what:<58} {seconds:7.3f} s  {verdict}")


def listing(store: Path) -> Any:
    """What `firstdiv runs` reads: the newest sweeps with their runs, and how many more there are."""
    from firstdiv.cli.lab import RUNS_LIMIT
    from firstdiv.lab.store import Store

    with Store(store, create=False) as st:
        shown = [(s, st.records(s, include_failed=True)) for s in st.sweeps(limit=RUNS_LIMIT)]
        return shown, st.count_sweeps() - len(shown)


def library(store: Path, out: Path, names: dict[str, str], repeat: int) -> None:
    from firstdiv.lab.compare import compare
    from firstdiv.lab.export import export

    print("library calls (this process, imports paid already):")
    line("runs listing", best(lambda: listing(store), repeat))
    line(f"compare {names['a']} {names['b']}", best(lambda: compare(names["a"], names["b"], store=store), repeat))
    line(f"export --name {names['one']}", best(lambda: export(store, name=names["one"], output=out), repeat))
    line("export (whole store)", best(lambda: export(store, output=out), 1), target=False)


def _cli(*args: Any) -> Callable[[], None]:
    cmd = [sys.executable, "-m", "firstdiv", *map(str, args)]

    def call() -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return call


def _imports(*modules: str) -> Callable[[], None]:
    code = f"import firstdiv.cli, {', '.join(modules)}"
    return lambda: subprocess.run([sys.executable, "-c", code], check=True)


def _loads_torch(*modules: str) -> bool:
    code = f"import sys, firstdiv.cli, {', '.join(modules)}; print('torch' in sys.modules)"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip() == "True"


def command_line(store: Path, out: Path, names: dict[str, str], repeat: int) -> None:
    print("command lines (python -m firstdiv ...; Python start-up and imports included):")
    start = best(_cli("--help"), repeat)
    line("start-up: firstdiv --help", start, target=False)
    steps = [("runs", ("firstdiv.cli.lab", "firstdiv.lab.store"), ("runs", "--store", store)),
             ("compare", ("firstdiv.cli.compare", "firstdiv.lab.compare", "firstdiv.lab.store"),
              ("compare", names["a"], names["b"], "--store", store)),
             ("export", ("firstdiv.cli.export", "firstdiv.lab.export", "firstdiv.lab.store"),
              ("export", "--name", names["one"], "-o", out, "--store", store))]
    for what, modules, args in steps:
        imports = best(_imports(*modules), repeat)
        line(f"  imports of {what}" + (" (loads torch)" if _loads_torch(*modules) else ""), imports, target=False)
        total = best(_cli(*args), repeat)
        line(f"firstdiv {' '.join(map(str, args[:3 if what != 'runs' else 1]))}", total)
        print(f"  {'  of which past the imports (timed apart: 0 is within noise)':<58} {max(total - imports, 0):7.3f} s")
    floor = best(lambda: subprocess.run([sys.executable, "-c", "from scipy import stats"], check=True), repeat)
    line("  floor of compare: python -c 'from scipy import stats'", floor, target=False)
    small = out.with_name("small.db")  # the same sweeps' records, in a store of 8 sweeps
    build(small, sweeps=8, seeds=20)
    line(f"firstdiv compare {sweep_name(1)} {sweep_name(5)} (8-sweep store)",
         best(_cli("compare", sweep_name(1), sweep_name(5), "--store", small), repeat), target=False)
    line("firstdiv export (whole store)", best(_cli("export", "-o", out, "--store", store), 1), target=False)
    print(f"  {'  its peak memory':<58} {_peak_mib('export', '-o', out, '--store', store):7.0f} MiB")


def _peak_mib(*args: Any) -> float:
    """Peak resident memory of `python -m firstdiv ARGS`, measured in a process that runs only it."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    cmd = [sys.executable, "-c", probe, sys.executable, "-m", "firstdiv", *map(str, args)]
    return int(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="Where the generated store is (made there when missing).")
    parser.add_argument("--sweeps", type=int, default=5000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    store = cached(args.store, args.sweeps, args.seeds)
    from firstdiv.lab.store import Store

    t0 = time.perf_counter()
    with Store(store, create=False) as st:  # a store made by an older schema migrates here, once
        n = st.count_runs()
    print(f"store {store}: {n:,} runs; first open {time.perf_counter() - t0:.3f} s (a migration, when one is due)")
    mid = args.sweeps // 2
    names = {"a": sweep_name(mid + 1), "b": sweep_name(mid + 1 + len(WORKLOADS)), "one": sweep_name(mid // 2 + 1)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "runs.csv"
        library(store, out, names, args.repeat)
        command_line(store, out, names, args.repeat)


if __name__ == "__main__":
    main()
