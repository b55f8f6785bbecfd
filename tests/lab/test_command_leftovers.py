"""Nothing a command sweep starts outlives it: a sweep killed with SIGKILL (the OOM killer, a scheduler) takes the
running command, the processes it started and its temporary directory with it; a command that exits leaving
processes behind in its process group has them ended with its run. Every wait is on the event itself (a pid file,
a process gone) with a ceiling of minutes; whatever a failing test leaves running is killed in its finally."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from test_command_sweep_procs import alive, wait_for, wait_gone

import firstdiv

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGKILL")

#: Starts a child, writes "<its pid> <the child's pid> <its report directory>", reports, sleeps.
LINGER = """
import argparse, os, subprocess, sys, time
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--out")
p.add_argument("--exit", action="store_true")
a = p.parse_args()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
report_dir = os.path.dirname(os.environ["FIRSTDIV_REPORT_FILE"])
firstdiv.log(step=0, val_loss=1.0)
with open(a.out, "a") as fh:
    fh.write(f"{os.getpid()} {child.pid} {report_dir}\\n")
if not a.exit:
    time.sleep(600)
"""


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def started(out):
    """[(command pid, its child's pid, the run's temporary directory)] written so far."""
    rows = [line.split(" ", 2) for line in out.read_text().splitlines() if line.count(" ") >= 2] if out.exists() else []
    return [(int(a), int(b), d) for a, b, d in rows]


@pytest.mark.parametrize("backend", ["serial", "process"])
def test_a_sweep_killed_with_sigkill_takes_its_command_and_the_commands_children_with_it(tmp_path, backend):
    script, out = tmp_path / "linger.py", tmp_path / "started.txt"
    script.write_text(textwrap.dedent(LINGER))
    env = {k: v for k, v in os.environ.items() if k != "FIRSTDIV_STORE"}
    sweep = subprocess.Popen([sys.executable, "-m", "firstdiv", "sweep", "--seeds", "0", "--store", "runs.db",
                              "--backend", backend, "--workers", "1", "--",
                              sys.executable, str(script), "--seed", "{seed}", "--out", str(out)],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: started(out)), "the command never started"
        ((command, child, report_dir),) = started(out)
        assert alive(command) and alive(child) and os.path.isdir(report_dir)
        sweep.kill()  # SIGKILL: no handler of the sweep's runs
        sweep.wait()
        assert wait_gone([command, child]) == []
        assert wait_for(lambda: not os.path.exists(report_dir)), f"{report_dir} was left behind"
    finally:
        sweep.kill()
        sweep.wait()
        kill_all(p for row in started(out) for p in row[:2])


def test_processes_a_command_leaves_in_its_group_end_with_its_run(tmp_path, store_path):
    script, out = tmp_path / "linger.py", tmp_path / "started.txt"
    script.write_text(textwrap.dedent(LINGER))
    try:
        result = firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--out", str(out), "--exit"], "0-1",
                                store=store_path, progress=False)
        assert [r.exit_code for r in result.records] == [0, 0]  # the runs succeeded: ending the rest is no failure
        rows = started(out)
        assert len(rows) == 2 and wait_gone([child for _, child, _ in rows]) == []
        assert all(not os.path.exists(d) for _, _, d in rows)
        note = "processes the command left running in its process group were ended when it exited"
        assert all(note in " ".join(r.extra.get("notes", [])) for r in result.records)
    finally:
        kill_all(p for row in started(out) for p in row[:2])


def test_a_run_that_leaves_nothing_behind_ends_without_a_note_or_a_wait(tmp_path, store_path):
    script = tmp_path / "plain.py"
    script.write_text("import firstdiv\nfirstdiv.log(val_loss=1.0)\n")
    (rec,) = firstdiv.sweep([sys.executable, str(script), "{seed}"], "0", store=store_path, progress=False).records
    assert rec.exit_code == 0 and "notes" not in rec.extra


def test_the_watchdog_ends_the_group_and_removes_the_directory_when_its_pipe_closes(tmp_path):
    """The watchdog alone: a group whose launcher is gone (the run's process killed) is ended; a run that ended
    normally (the watchdog told so before its pipe closes) is left as it is."""
    from firstdiv.lab._command_watch import start_watchdog

    for finished in (False, True):
        work = tmp_path / f"run-{finished}"
        work.mkdir()
        group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        try:
            watchdog = start_watchdog(work)
            watchdog.watch(group.pid)
            if finished:
                watchdog.release()
            else:
                os.close(watchdog.fd)  # as the death of the process holding it would
            assert watchdog.proc.wait(timeout=300) == 0
            if finished:
                assert alive(group.pid) and work.is_dir()
            else:
                assert group.wait(timeout=300) == -signal.SIGTERM and not work.exists()
        finally:
            group.kill()
            group.wait()

