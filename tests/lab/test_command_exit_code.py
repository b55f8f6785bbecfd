"""A command run's exit code is a field of its record: 0 when it succeeded, the exit status when it failed, minus
the signal number when a signal ended it (a timeout: the SIGTERM the sweep sent), None for an in-process workload
and for a command that never started. It is stored, read back, and `firstdiv runs` shows it for failed runs."""

import signal
import sys
import textwrap

import pytest

import firstdiv
from firstdiv.lab.record import RECORD_VERSION, RunRecord
from firstdiv.lab.store import Store

SCRIPT = """
import argparse, os, signal, sys, time
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--how")
a = p.parse_args()
firstdiv.log(step=0, val_loss=1.0 + a.seed)
if a.how == "exit":
    sys.exit(3)
if a.how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if a.how == "sleep":
    time.sleep(60)
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def sweep(script, how, store_path, **kw):
    return firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--how", how], "0", name=how,
                          store=store_path, progress=False, **kw)


def test_the_exit_code_of_each_way_a_command_ends(script, store_path, tmp_path):
    ok = sweep(script, "ok", store_path).records[0]
    assert ok.ok and ok.exit_code == 0
    (exited,) = sweep(script, "exit", store_path).failed
    assert exited.exit_code == 3 and "exit code 3" in exited.error
    (killed,) = sweep(script, "kill", store_path).failed
    assert killed.exit_code == -signal.SIGKILL and "killed by SIGKILL" in killed.error
    (timed_out,) = sweep(script, "sleep", store_path, config={"timeout": 1}).failed
    assert timed_out.exit_code == -signal.SIGTERM and "timed out after 1 s" in timed_out.error
    (never,) = firstdiv.sweep([str(tmp_path / "no-such-program"), "{seed}"], "0", store=store_path,
                              progress=False).failed
    assert never.exit_code is None and "cannot start" in never.error
    with Store(store_path) as st:  # read back from the store (the results above were too)
        stored = {s.name: [r.exit_code for r in st.records(s, include_failed=True)] for s in st.sweeps()}
    assert {k: stored[k] for k in ("ok", "exit", "kill", "sleep")} == {"ok": [0], "exit": [3], "kill": [-9],
                                                                       "sleep": [-15]}


def test_an_in_process_workload_has_no_exit_code_and_old_records_load(store_path):
    rec = firstdiv.sweep("builtin:mlp", "0", config={"epochs": 1, "n_train": 64}, store=store_path,
                         backend="serial", progress=False).records[0]
    assert rec.exit_code is None and rec.to_dict()["exit_code"] is None and rec.version == RECORD_VERSION
    old = {k: v for k, v in rec.to_dict().items() if k != "exit_code"}
    old["version"] = 1  # written before the field existed
    loaded = RunRecord.from_dict(old)
    assert loaded.exit_code is None and loaded.final == rec.final and "unknown" not in loaded.extra
    assert RunRecord.from_dict({**rec.to_dict(), "exit_code": 4}).exit_code == 4


def test_firstdiv_runs_shows_the_exit_codes_of_failed_command_runs(script, store_path, cli, tmp_path):
    firstdiv.sweep([sys.executable, str(script), "--seed", "{seed}", "--how", "{how}"], "0-1", sets=["how=exit"],
                   name="bad", store=store_path, progress=False)
    proc = cli("runs", "--store", store_path, cwd=tmp_path, env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("bad ")]
    assert "0/2 (2 failed, exit 3)" in row
