"""Command sweeps on Ray: the wall time of a 12-seed command sweep on the process backend and on a local Ray, then
the working directory shipped to a Ray cluster given by --address (a head started here with `ray start --head` on
127.0.0.1): the command runs in each worker's copy of the directory, and a directory over Ray's upload limit is a
one-line usage error. Prints times and checks; exits 1 when a check fails. Too slow for the test suite (starting
a head takes seconds, connecting a driver and shipping the directory more), so it lives here.

    python benchmarks/command_ray.py [--seeds 0-11] [--work-s 0.5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TRAIN = """
import argparse, os, random, time
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--work", type=float)
a = p.parse_args()
scale = float(open("data/scale.txt").read())  # relative: the sweep's directory, or the worker's copy of it
time.sleep(a.work)  # stands in for training
firstdiv.log(step=0, val_loss=scale * random.Random(a.seed).random(), shipped=float("_ray_pkg_" in os.getcwd()),
             store_shipped=float(os.path.exists(".firstdiv")))
"""


def project(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "scale.txt").write_text("0.5\n")
    (root / "train.py").write_text(textwrap.dedent(TRAIN))
    return root


def timed_sweeps(root: Path, seeds: str, work: float) -> list[str]:
    import firstdiv

    argv = [sys.executable, str(root / "train.py"), "--seed", "{seed}", "--work", str(work)]
    failures, finals = [], {}
    for backend in ("process", "ray"):
        start = time.perf_counter()
        result = firstdiv.sweep(argv, seeds, name=backend, store=root / "runs.db", backend=backend, workers=2,
                                force=True, progress=False)
        wall = time.perf_counter() - start
        finals[backend] = [r.final["val_loss"] for r in result.records]
        print(f"{backend:8s} {len(result.records)} seeds ({work:g} s of work each, 2 workers): {wall:6.2f} s wall"
              + (f", {len(result.failed)} failed: {result.failed[0].error}" if result.failed else ""))
    if finals["process"] != finals["ray"]:
        failures.append("the ray backend's final metrics differ from the process backend's")
    return failures


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_head(port: int) -> subprocess.Popen[bytes]:
    head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--node-ip-address",
                             "127.0.0.1", "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
                             "--disable-usage-stats", "--block"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, RAY_AUTH_MODE="disabled"))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return head
        except OSError:
            time.sleep(0.1)
    stop_head(head)
    raise SystemExit("the Ray head did not answer within 60 s")


def stop_head(head: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, None)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            return
        try:
            head.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def shipped_sweeps(root: Path, seeds: str) -> list[str]:
    import firstdiv
    from firstdiv.errors import InvalidArgument

    failures = []
    port = free_port()
    start = time.perf_counter()
    head = start_head(port)
    print(f"ray head on 127.0.0.1:{port} up in {time.perf_counter() - start:.2f} s")
    try:
        argv = [sys.executable, str(root / "train.py"), "--seed", "{seed}", "--work", "0"]
        start = time.perf_counter()
        result = firstdiv.sweep(argv, seeds, name="shipped", store=root / ".firstdiv" / "runs.db", backend="ray",
                                backend_options={"address": f"127.0.0.1:{port}"}, force=True, progress=False)
        print(f"shipped  {len(result.records)} seeds to the cluster: {time.perf_counter() - start:.2f} s wall")
        if result.failed or not all(r.final["shipped"] == 1.0 for r in result.records):
            failures.append(f"the commands did not all run in the shipped directory: {result.failed[:1]}")
        if any(r.final["store_shipped"] for r in result.records):
            failures.append("the run store (.firstdiv/) travelled with the working directory")
        from ray._private.runtime_env import packaging

        limit, packaging.GCS_STORAGE_MAX_SIZE = packaging.GCS_STORAGE_MAX_SIZE, 100_000
        (root / "data" / "big.bin").write_bytes(os.urandom(300_000))
        try:
            firstdiv.sweep(argv, seeds, name="too-big", store=root / "runs.db", backend="ray",
                           backend_options={"address": f"127.0.0.1:{port}"}, force=True, progress=False)
            failures.append("a working directory over Ray's limit was shipped")
        except InvalidArgument as exc:
            print(f"too big   {exc}")
            if ".rayignore" not in str(exc) or "\n" in str(exc):
                failures.append(f"the too-large error is not one line naming .rayignore: {exc}")
        finally:
            packaging.GCS_STORAGE_MAX_SIZE = limit
    finally:
        stop_head(head)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-11")
    parser.add_argument("--work-s", type=float, default=0.5, help="seconds each command sleeps (its training)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="firstdiv-cmd-ray-") as tmp:
        root = project(Path(tmp) / "project")
        here = os.getcwd()
        os.chdir(root)  # the sweeps' directory, where the script reads data/ from
        try:
            failures = timed_sweeps(root, args.seeds, args.work_s) + shipped_sweeps(root, "0-2")
        finally:
            os.chdir(here)
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
