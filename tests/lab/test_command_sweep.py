"""Command sweeps (issue 17): existing training scripts run as child processes per seed, reporting with
firstdiv.log. The scripts are tiny argparse programs written into tmp_path; none imports torch."""

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab.store import Store

TRAIN = """
import argparse, random
import firstdiv
from helper import SCALE
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
p.add_argument("--lr", type=float, default=0.1)
a = p.parse_args()
r = random.Random(a.seed)
loss = 1.0
for epoch in range(4):
    loss = loss * (1 - a.lr) + SCALE * r.random()
    firstdiv.log(epoch=epoch, val_loss=loss, train_loss=loss * 0.9)
print("final", loss)
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def script(tmp_path):
    write(tmp_path, "helper.py", "SCALE = 0.01\n")
    return write(tmp_path, "train.py", TRAIN)


def command(script, *extra):
    return [sys.executable, str(script), "--seed", "{seed}", *extra]


def test_records_hold_config_code_env_curves_and_final_metrics(script, store_path):
    result = firstdiv.sweep(command(script, "--lr", "{lr}"), "0-2", sets=["lr=0.2"], name="base", store=store_path)
    assert [r.seed for r in result.records] == [0, 1, 2] and not result.failed
    rec = result.records[0]
    assert rec.config == {"lr": 0.2, "threads": 1}
    assert rec.workload == f"cmd:{sys.executable} {script} --seed {{seed}} --lr {{lr}}"
    assert len(rec.curves["val_loss"]) == 4 and rec.final["val_loss"] == rec.curves["val_loss"][-1]
    assert rec.final["train_loss"] == pytest.approx(rec.final["val_loss"] * 0.9)
    assert len({r.final["val_loss"] for r in result.records}) == 3  # the seed reached the script
    assert rec.code["version"].startswith("script.") and rec.code["files"] == ["helper.py", "train.py"]
    assert rec.env["python"] == platform.python_version() and rec.env["child"] == sys.executable
    assert rec.env["torch"] is not None and rec.wall_seconds > 0
    assert rec.extra["command"][-1] == "{lr}"
    # a changed local import is a changed code version: a new identity, so the seeds run again
    (script.parent / "helper.py").write_text("SCALE = 0.02\n")
    again = firstdiv.sweep(command(script, "--lr", "{lr}"), "0-2", sets=["lr=0.2"], name="base2", store=store_path)
    assert again.records[0].code["version"] != rec.code["version"] and again.ran == (0, 1, 2)
    assert again.records[0].final["val_loss"] != rec.final["val_loss"]


def test_a_rerun_reuses_the_recorded_seeds(script, store_path):
    first = firstdiv.sweep(command(script), "0-1", store=store_path)
    second = firstdiv.sweep(command(script), "0-2", store=store_path)
    assert first.sweep.name == "train-default" and second.reused == (0, 1) and second.ran == (2,)


def test_the_script_runs_bare_and_log_is_a_no_op(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTDIV_")}
    proc = subprocess.run([sys.executable, str(script), "--seed", "3"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("final "), proc.stderr
    assert not (tmp_path / ".firstdiv").exists()


def test_log_writes_json_lines_only_under_a_sweep_and_only_on_rank_0(tmp_path, monkeypatch):
    from firstdiv._log import log

    report = tmp_path / "report.jsonl"
    monkeypatch.delenv("FIRSTDIV_REPORT_FILE", raising=False)
    monkeypatch.delenv("FIRSTDIV_REPORT_FD", raising=False)
    log(step=0, val_loss=1.0)
    assert not report.exists()
    monkeypatch.setenv("FIRSTDIV_REPORT_FILE", str(report))
    monkeypatch.setenv("RANK", "1")
    log(step=0, val_loss=1.0)
    assert not report.exists()
    monkeypatch.setenv("RANK", "0")
    log(step=2, val_loss=0.5)
    assert json.loads(report.read_text()) == {"step": 2, "val_loss": 0.5}
    with pytest.raises(TypeError, match="val_loss"):
        log(val_loss="low")
    read, write_end = os.pipe()
    monkeypatch.setenv("FIRSTDIV_REPORT_FD", str(write_end))
    log(acc=0.75)
    os.close(write_end)
    assert json.loads(os.read(read, 1000)) == {"acc": 0.75}
    os.close(read)


def test_a_failing_command_is_a_failed_run_with_its_exit_code_and_stderr(tmp_path, store_path):
    bad = write(tmp_path, "bad.py", """
        import sys, firstdiv
        firstdiv.log(val_loss=1.0)
        print("about to fail", file=sys.stderr)
        sys.exit(3)
    """)
    silent = write(tmp_path, "silent.py", "import sys\nprint(sys.argv)\n")
    result = firstdiv.sweep(command(bad), "0-1", store=store_path)
    assert len(result.failed) == 2 and not result.records
    assert "exit code 3" in result.failed[0].error and "about to fail" in result.failed[0].error
    assert result.failed[0].exit_code == 3
    assert result.failed[0].curves == {"val_loss": [1.0]}  # what it reported before failing is kept
    quiet = firstdiv.sweep(command(silent), "0", store=store_path)
    assert "reported no metrics" in quiet.failed[0].error and "firstdiv.log" in quiet.failed[0].error
    missing = firstdiv.sweep([str(tmp_path / "no-such-program"), "{seed}"], "0", store=store_path)
    assert "cannot start" in missing.failed[0].error
    # another Python than firstdiv's (here: this one without its site-packages, nor PYTHONPATH) names the
    # interpreter to use
    elsewhere = firstdiv.sweep([sys.executable, "-I", "-S", str(bad), "{seed}"], "0", store=store_path)
    assert f"its Python cannot import firstdiv: run the command with {sys.executable}" in elsewhere.failed[0].error
    assert firstdiv.sweep(command(silent), "0", store=store_path).report().status.name == "FAIL"


@pytest.mark.parametrize("argv,needle", [
    (["python", "train.py", "--lr", "0.1"], "no {seed} placeholder"),
    (["python", "train.py", "--seed", "{seed}", "--wd", "{wd}"], "{wd}"),
    ([], "non-empty list"),
    (["python", 3], "list of strings"),
])
def test_bad_commands_are_one_line_errors_that_write_nothing(script, store_path, argv, needle):
    with pytest.raises(InvalidArgument) as info:
        firstdiv.sweep(argv, "0-1", store=store_path)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not store_path.exists()


def test_a_command_sweep_refuses_the_vectorized_backend(script, store_path):
    with pytest.raises(InvalidArgument, match="serial, process or ray, not vectorized"):
        firstdiv.sweep(command(script), "0", store=store_path, backend="vectorized")
    assert not store_path.exists()


def test_compare_works_on_two_command_sweeps(script, store_path):
    base = firstdiv.sweep(command(script, "--lr", "{lr}"), "0-5", sets=["lr=0.1"], name="base", store=store_path)
    fast = firstdiv.sweep(command(script, "--lr", "{lr}"), "0-5", sets=["lr=0.5"], name="fast", store=store_path)
    assert not base.failed and not fast.failed
    comparison = firstdiv.compare("base", "fast", store=store_path)
    assert comparison.verdict == "SYSTEM_CHANGED" and comparison.direction == "better"
    cost = comparison.details["cost"]["examples_per_s"]  # the script counts no examples: no rate, not a zero one
    assert cost == {"baseline": None, "candidate": None, "change": None}
    text = str(comparison)
    assert "examples/s  not reported by these runs" in text and "0.0000  ->" not in text
    assert "Throughput: not reported by these runs." in firstdiv.to_html(comparison)
    with Store(store_path) as st:
        assert {s.name for s in st.sweeps()} >= {"base", "fast"}


def test_inside_git_the_code_version_is_the_scripts_commit_and_its_local_changes(script, store_path, monkeypatch):
    repo = script.parent
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "train.py", "helper.py"], ["commit", "-qm", "train"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    clean = firstdiv.sweep(command(script), "0", store=store_path).records[0].code
    assert clean["commit"] == head.stdout.strip() and not clean["dirty"] and clean["version"] == head.stdout[:12]
    (repo / "helper.py").write_text("SCALE = 0.5\n")
    dirty = firstdiv.sweep(command(script), "0", store=store_path).records[0].code
    assert dirty["dirty"] and dirty["version"].startswith(head.stdout[:12] + "+dirty.")


def test_a_timeout_must_be_whole_seconds_and_is_not_in_the_config_hash(script, store_path):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match="timeout"):
            firstdiv.sweep(command(script), "0", config={"timeout": bad}, store=store_path)
    assert not store_path.exists()
    plain = firstdiv.sweep(command(script), "0", name="a", store=store_path).records[0]
    limited = firstdiv.sweep(command(script), "0", name="b", config={"timeout": 3600}, store=store_path).records[0]
    assert limited.config_hash == plain.config_hash and limited.final == plain.final


LOOP = """
import argparse, random, time
import firstdiv
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
p.add_argument("--val-size", type=int, default=20)
a = p.parse_args()
firstdiv.log_config({**vars(a), "optimizer": "sgd", "out": __import__("pathlib").Path("out")})
r = random.Random(a.seed)
start, w = time.perf_counter(), 1.0
for step in range(5):
    grad = 2 * w + r.gauss(0, 0.01)
    firstdiv.grad_norm(abs(grad))
    w -= 0.1 * grad
firstdiv.throughput(examples=5 * 32, seconds=time.perf_counter() - start, tokens=5 * 32 * 12)
firstdiv.eval_contract(indices=range(a.val_size), preprocessing="none", reduction="mean", mode="eval")
firstdiv.log(val_loss=w * w)
"""


def test_a_hand_written_loop_reports_what_an_in_process_workload_records(tmp_path, store_path):
    """firstdiv.grad_norm / throughput / eval_contract / log_config from a plain script: the record holds grad-norm
    quantiles, examples/s and tokens/s, the eval fingerprint (the same one rec.eval_contract gives for that
    contract) and the config the script saw; a changed evaluation set is a changed measurement."""
    from firstdiv.lab.record import Recorder

    loop = write(tmp_path, "loop.py", LOOP)
    base = firstdiv.sweep(command(loop, "--val-size", "{val}"), "0-3", sets=["val=20"], name="base", store=store_path)
    (r, *_) = base.records
    assert not base.failed and len(base.records) == 4
    assert set(r.grad_norm) == {"min", "median", "p90", "max"} and 0 < r.grad_norm["min"] < r.grad_norm["max"] < 2.1
    assert r.throughput["examples"] == 160 and r.throughput["tokens"] == 1920
    assert r.throughput["tokens_per_s"] == pytest.approx(12 * r.throughput["examples_per_s"]) and r.final["examples_per_s"] > 0
    expected = Recorder(0, {}).eval_contract(indices=range(20), preprocessing="none", reduction="mean", mode="eval")
    assert r.eval_fingerprint == expected and r.eval_fields == ["indices", "mode", "preprocessing", "reduction"]
    assert r.extra["reported_config"] == {"seed": r.seed, "val_size": 20, "optimizer": "sgd", "out": "out"}
    firstdiv.sweep(command(loop, "--val-size", "{val}"), "0-3", sets=["val=10"], name="shifted", store=store_path)
    comparison = firstdiv.compare("base", "shifted", store=store_path)
    assert comparison.verdict == "MEASUREMENT_CHANGED", comparison.verdict
    assert comparison.details["cost"]["examples_per_s"]["baseline"] > 0


def test_the_reporting_calls_are_no_ops_bare_but_still_refuse_bad_values(tmp_path, monkeypatch):
    monkeypatch.delenv("FIRSTDIV_REPORT_FILE", raising=False)
    monkeypatch.delenv("FIRSTDIV_REPORT_FD", raising=False)
    monkeypatch.chdir(tmp_path)
    firstdiv.throughput(examples=10, seconds=1.0)
    firstdiv.grad_norm(float("nan"))  # a broken step's norm is reported as it is
    firstdiv.eval_contract(indices=[1, 2], mode="eval")
    firstdiv.log_config({"lr": 0.1})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="seconds must be a number >= 0"):
        firstdiv.throughput(examples=10, seconds=-1.0)
    with pytest.raises(TypeError, match="examples must be a number"):
        firstdiv.throughput(examples="ten", seconds=1.0)
    with pytest.raises(ValueError, match="needs at least one field"):
        firstdiv.eval_contract()
