"""Command sweeps on Ray: each seed's command runs on a Ray worker with the records the serial backend gives,
in the sweep's directory and environment; a failing seed is a failed run with its exit code and stderr; Ctrl-C
kills the commands' process groups. One local Ray (2 CPUs) serves the module, as in test_backends."""

import os
import signal
import sys
import textwrap
import threading

import pytest
from test_backends import RAY_MISSING, local_ray  # noqa: F401 (the module's Ray)
from test_command_sweep_procs import SLEEPER, kill_pids, pids_of, wait_for, wait_gone

import firstdiv

pytestmark = pytest.mark.skipif(RAY_MISSING is not None, reason=RAY_MISSING or "")

TRAIN = """
import argparse, os, random, sys
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
a = p.parse_args()
scale = float(open("data/scale.txt").read())  # relative to the sweep's directory
r = random.Random(a.seed)
for step in range(3):
    firstdiv.log(step=step, val_loss=scale * r.random(), mark=float(os.environ["FIRSTDIV_TEST_MARK"]))
if a.seed == 3:
    print("seed 3 cannot converge", file=sys.stderr)
    sys.exit(5)
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_command_sweep_on_ray_gives_the_serial_records(local_ray, tmp_path, store_path, monkeypatch):  # noqa: F811
    write(tmp_path, "train.py", TRAIN)
    write(tmp_path, "data/scale.txt", "0.5\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIRSTDIV_TEST_MARK", "7")  # set after Ray started: the sweep's environment reaches the child
    argv = [sys.executable, "train.py", "--seed", "{seed}"]
    serial = firstdiv.sweep(argv, "0-3", name="serial", store=store_path, progress=False)
    on_ray = firstdiv.sweep(argv, "0-3", name="ray", store=store_path, backend="ray", workers=2, force=True,
                            progress=False)
    assert [r.seed for r in on_ray.records] == [0, 1, 2] and [r.seed for r in on_ray.failed] == [3]
    assert [r.curves for r in on_ray.records] == [r.curves for r in serial.records]
    assert [r.final for r in on_ray.records] == [r.final for r in serial.records]
    assert on_ray.records[0].final["mark"] == 7.0 and len({r.final["val_loss"] for r in on_ray.records}) == 3
    assert [r.exit_code for r in on_ray.records] == [0, 0, 0]
    assert on_ray.records[0].env == serial.records[0].env and on_ray.records[0].env["child"] == sys.executable
    assert on_ray.records[0].extra["cwd"] == str(tmp_path)
    (failed,) = on_ray.failed
    assert failed.exit_code == 5 and failed.error == serial.failed[0].error
    assert "exit code 5" in failed.error and "seed 3 cannot converge" in failed.error
    assert len(failed.curves["val_loss"]) == 3  # what it reported before it failed is kept


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_ctrl_c_on_ray_kills_the_commands_and_their_children(local_ray, tmp_path, store_path):  # noqa: F811
    script, pids = write(tmp_path, "sleeper.py", SLEEPER), tmp_path / "pids.txt"

    over = threading.Event()

    def interrupt_once_both_run():  # at the ceiling too, unless the sweep is over: a sweep left running is stopped
        wait_for(lambda: over.is_set() or len(pids_of(pids)) == 4)
        if not over.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_both_run, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--pids", str(pids)], "0-1",
                           store=store_path, backend="ray", workers=2, progress=False)
        assert len(pids_of(pids)) == 4 and wait_gone(pids_of(pids)) == []
    finally:
        over.set()
        watcher.join()
        kill_pids(pids_of(pids))
    assert local_ray.is_initialized()  # a Ray the caller started stays up


def test_a_timeout_on_ray_kills_the_command_and_fails_the_run(local_ray, tmp_path, store_path):  # noqa: F811
    script, pids = write(tmp_path, "sleeper.py", SLEEPER), tmp_path / "pids.txt"
    try:
        result = firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--pids", str(pids)], "0",
                                config={"timeout": 2}, store=store_path, backend="ray", progress=False)
        (failed,) = result.failed
        assert "timed out after 2 s" in failed.error and failed.exit_code == -signal.SIGTERM
        assert len(pids_of(pids)) == 2 and wait_gone(pids_of(pids)) == []
    finally:
        kill_pids(pids_of(pids))
