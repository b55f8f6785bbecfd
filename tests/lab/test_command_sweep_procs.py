"""Command sweeps and processes: a timeout and Ctrl-C kill the command's whole process group, rank 0 of a
launcher reports, the process backend runs commands in its workers, and the command line's `--`. Waits are on the
event itself (a pid file filled, a process gone) with a ceiling of minutes, so a loaded machine only makes them
slower; what a failing test leaves running is killed in its finally."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import firstdiv

SLEEPER = """
import argparse, os, subprocess, sys, time
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--pids")
a = p.parse_args()
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(a.pids, "a") as fh:
    fh.write(f"{os.getpid()} {grandchild.pid}\\n")
firstdiv.log(step=0, val_loss=1.0)
time.sleep(600)
"""

LAUNCHER = """
import argparse, os, subprocess, sys
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
a = p.parse_args()
procs = [subprocess.Popen([sys.executable, "worker.py", str(a.seed)], env=dict(os.environ, RANK=str(rank)))
         for rank in (0, 1)]
sys.exit(max(proc.wait() for proc in procs))
"""

WORKER = """
import os, sys
import firstdiv
seed, rank = int(sys.argv[1]), int(os.environ["RANK"])
for step in range(3):
    firstdiv.log(step=step, val_loss=100 * rank + seed + step)
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


#: The ceiling of a wait for an event: only a broken sweep reaches it, however loaded the machine.
CEILING_S = 300.0


def wait_for(event, seconds=CEILING_S, poll=0.05):
    """Whether ``event()`` came true before the ceiling; returns as soon as it does."""
    end = time.monotonic() + seconds
    while not event():
        if time.monotonic() > end:
            return False
        time.sleep(poll)
    return True


def wait_gone(pids, seconds=CEILING_S):
    """The pids still alive when all the others are gone, or at the ceiling."""
    pids = list(pids)
    wait_for(lambda: not any(alive(p) for p in pids), seconds)
    return [p for p in pids if alive(p)]


def pids_of(path):
    return [int(p) for line in path.read_text().split("\n") if line for p in line.split()] if path.exists() else []


def kill_pids(pids):
    """What a failing test left running: killed, so that it cannot outlive the test either."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_a_timeout_kills_the_process_group_and_fails_the_run(tmp_path, store_path):
    script, pids = write(tmp_path, "sleeper.py", SLEEPER), tmp_path / "pids.txt"
    try:
        result = firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--pids", str(pids)], "0",
                                config={"timeout": 2}, store=store_path)
        (failed,) = result.failed
        assert "timed out after 2 s" in failed.error and failed.curves == {"val_loss": [1.0]}
        assert failed.exit_code == -signal.SIGTERM  # the sweep stopped it (the script sleeps for 10 minutes)
        assert failed.config["timeout"] == 2
        assert len(pids_of(pids)) == 2 and wait_gone(pids_of(pids)) == []  # the script and the process it started
    finally:
        kill_pids(pids_of(pids))


def test_rank_0_reports_for_a_multi_process_launcher(tmp_path, store_path, monkeypatch):
    write(tmp_path, "worker.py", WORKER)
    write(tmp_path, "launch.py", LAUNCHER)
    monkeypatch.chdir(tmp_path)  # the command runs in the sweep's working directory (the launcher's worker.py)
    result = firstdiv.sweep([sys.executable, "launch.py", "--seed", "{seed}"], "4-5", store=store_path)
    assert [r.curves["val_loss"] for r in result.records] == [[4.0, 5.0, 6.0], [5.0, 6.0, 7.0]]


def test_the_process_backend_runs_commands_in_its_workers_with_the_serial_results(tmp_path, store_path):
    script = write(tmp_path, "train.py", """
        import argparse, os, firstdiv
        p = argparse.ArgumentParser(); p.add_argument("--seed", type=int); p.add_argument("--lr", type=float)
        a = p.parse_args()
        firstdiv.log(step=0, val_loss=a.seed * a.lr, threads=float(os.environ["OMP_NUM_THREADS"]))
    """)
    argv = [sys.executable, str(script), "--seed", "{seed}", "--lr", "{lr}"]
    serial = firstdiv.sweep(argv, "0-3", sets=["lr=0.5"], name="serial", store=store_path)
    pooled = firstdiv.sweep(argv, "0-3", sets=["lr=0.5"], name="pooled", store=store_path, backend="process",
                            workers=2, force=True)
    assert not pooled.failed and [r.final for r in pooled.records] == [r.final for r in serial.records]
    assert [r.final["val_loss"] for r in serial.records] == [0.0, 0.5, 1.0, 1.5]


def test_the_command_line_runs_the_command_after_the_double_dash(tmp_path, cli):
    script = write(tmp_path, "train.py", """
        import argparse, firstdiv
        p = argparse.ArgumentParser(); p.add_argument("--seed", type=int); p.add_argument("--lr", type=float)
        a = p.parse_args()
        firstdiv.log(val_loss=a.lr + a.seed)
    """)
    store = tmp_path / "runs.db"
    proc = cli("sweep", "--name", "base", "--seeds", "0-1", "--set", "lr=0.25", "--store", store, "--json", "--",
               sys.executable, script, "--seed", "{seed}", "--lr", "{lr}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["payload"]
    assert "val_loss" in out["summary"] and out["sweep"]["seeds"] == [0, 1]
    unknown = cli("sweep", "--store", tmp_path / "other.db", "--", sys.executable, script, "--seed", "{seed}",
                  "--lr", "{lr}", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "--set lr=VALUE" in unknown.stderr and not (tmp_path / "other.db").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT")
@pytest.mark.parametrize("backend", ["serial", "process"])
def test_ctrl_c_kills_the_running_command_and_its_children(tmp_path, backend):
    """Serial: the sweep's own interrupt kills the group; process: the worker, stopped by SIGTERM, kills it."""
    script, pids = write(tmp_path, "sleeper.py", SLEEPER), tmp_path / "pids.txt"
    env = {k: v for k, v in os.environ.items() if k != "FIRSTDIV_STORE"}
    proc = subprocess.Popen([sys.executable, "-m", "firstdiv", "sweep", "--seeds", "0-1", "--store", "runs.db",
                             "--backend", backend, "--workers", "2", "--",
                             sys.executable, str(script), "--seed", "{seed}", "--pids", str(pids)],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    running = 2 if backend == "serial" else 4  # one command (and its child) per worker
    try:
        assert wait_for(lambda: len(pids_of(pids)) == running), f"{running} processes never ran: {pids_of(pids)}"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=CEILING_S)
        assert proc.returncode == 130 and "interrupted" in err
        assert wait_gone(pids_of(pids)) == []
    finally:
        proc.kill()
        proc.communicate()
        kill_pids(pids_of(pids))
