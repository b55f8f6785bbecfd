"""Parallel efficiency of the process and Ray sweep backends on builtin:mlp, against the serial backend.

Efficiency = serial time / (workers x parallel time); target >= 85% for the process backend at 2
workers. Measured two ways, all in one run of this script so machine noise hits every ratio alike:

- command line: ``firstdiv sweep`` in a fresh interpreter per backend, start to exit (what a user
  waits for, interpreter and torch import included on both sides);
- library: ``firstdiv.sweep`` calls in this one process, where the process backend's fork server
  starts on the first parallel sweep (cold) and is reused by the next (warm).

Each row also gives the mean time of one run where it ran: when it is well above the serial one,
something else was using the CPUs and the efficiency says more about the machine than the backend.

    python benchmarks/parallel_efficiency.py [--seeds 24] [--workers 2] [--no-cli] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _per_run(store: Path) -> float:
    """Mean seconds one run took where it ran: equal across backends unless the CPUs were shared."""
    from firstdiv.lab.store import Store

    with Store(store) as st:
        walls = [r.wall_seconds for r in st.iter_runs() if r.ok]
    return sum(walls) / len(walls)


def _cli(backend: str, seeds: int, workers: int, store: Path) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "firstdiv", "sweep", "builtin:mlp", "--seeds", f"0-{seeds - 1}", "--backend", backend,
           "--workers", str(workers), "--store", str(store), "--json"]
    env = {k: v for k, v in os.environ.items() if k != "FIRSTDIV_STORE"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return wall, _per_run(store)


def _lib(backend: str, seeds: int, workers: int, store: Path) -> tuple[float, float]:
    from firstdiv.lab.sweep import sweep

    t0 = time.perf_counter()
    res = sweep("builtin:mlp", range(seeds), store=store, backend=backend, workers=workers, force=True)
    wall = time.perf_counter() - t0
    if res.failed:
        raise SystemExit(f"{backend}: seed {res.failed[0].seed} failed: {res.failed[0].error}")
    return wall, sum(r.wall_seconds for r in res.records) / len(res.records)


def _row(label: str, timing: tuple[float, float], serial: tuple[float, float] | None, workers: int) -> str:
    wall, per_run = timing
    text = f"  {label:<44} {wall:6.2f} s  ({per_run:.3f} s/run)"
    if serial is None:
        return text
    speedup = serial[0] / wall
    text += f"  speed-up {speedup:4.2f}x  efficiency {speedup / workers:6.1%}"
    if per_run > 1.15 * serial[1]:
        text += f"  [runs {per_run / serial[1]:.1f}x slower than serial ones: the CPUs were shared]"
    return text


def _have_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-cli", action="store_true", help="skip the command-line measurements")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray even when it is installed")
    args = parser.parse_args()
    n, w = args.seeds, args.workers
    ray = _have_ray() and not args.no_ray
    print(f"builtin:mlp (default config), {n} seeds, {w} workers, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}" + ("" if ray else "; Ray not measured (not installed or --no-ray)"))
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        cli = None
        if not args.no_cli:
            print("command line (fresh interpreter per sweep):")
            serial = _cli("serial", n, w, store / "cli-serial.db")
            print(_row("serial", serial, None, w))
            cli = (serial, _cli("serial", 1, w, store / "cli-one.db"))
            print(_row("process", _cli("process", n, w, store / "cli-process.db"), serial, w))
            if ray:
                print(_row("ray (starts and stops a local Ray)", _cli("ray", n, w, store / "cli-ray.db"), serial, w))
        print("library (one Python process):")
        _lib("serial", 1, w, store / "warm.db")  # imports torch and the workload, so serial is timed warm too
        serial = _lib("serial", n, w, store / "lib.db")
        print(_row("serial", serial, None, w))
        first = _lib("process", n, w, store / "lib.db")
        print(_row("process, first sweep (fork server starts)", first, serial, w))
        warm = _lib("process", n, w, store / "lib.db")
        print(_row("process, next sweep (fork server running)", warm, serial, w))
        if ray:
            _ray_rows(n, w, store, serial)
    steady = serial[0] / warm[0] / w
    print(f"target: process backend efficiency >= 85%: {steady:.1%} with its fork server running "
          f"({'met' if steady >= 0.85 else 'NOT met'}); the first sweep of a process also pays the fork server's "
          f"start (importing torch once, {first[0] - warm[0]:.1f} s here), and the command line "
          "a fresh interpreter on both sides: fixed costs that more seeds amortise")
    if cli is not None:
        _amdahl(cli, n, w)
    print(f"load average at the end {os.getloadavg()[0]:.2f} (other work on the machine lowers every ratio)")


def _amdahl(cli: tuple[tuple[float, float], tuple[float, float]], n: int, w: int) -> None:
    """The command line's ceiling: the interpreter start and imports are paid once by either backend."""
    (serial, per_run), (one, _) = cli
    fixed = max(0.0, one - per_run)
    best = fixed + (serial - fixed) / w
    print(f"command line: a fresh interpreter costs {fixed:.1f} s before any seed trains (a 1-seed sweep took "
          f"{one:.2f} s), which no backend splits; with {w} perfect workers the {n}-seed sweep would take {best:.2f} s: "
          f"{serial / best / w:.1%} efficiency is the ceiling there")


def _ray_rows(n: int, w: int, store: Path, serial: tuple[float, float]) -> None:
    import logging

    import ray

    print(_row("ray, starts and stops a local Ray", _lib("ray", n, w, store / "lib.db"), serial, w))
    ray.init(address="local", num_cpus=w, include_dashboard=False, logging_level=logging.ERROR)
    try:
        _lib("ray", w, w, store / "lib.db")  # Ray's workers import torch on their first task
        print(_row("ray, Ray already running with warm workers", _lib("ray", n, w, store / "lib.db"), serial, w))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
