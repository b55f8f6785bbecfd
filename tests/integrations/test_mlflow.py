"""MLflow both ways, against a real file-backed MLflow in tmp_path: sweeps pushed as MLflow runs (params, curves,
final metrics, tags; FAILED runs; idempotent), compared back from MLflow with the same verdict and numbers as the
stored sweeps, runs a user logged with the MLflow API compared too, and every bad input one line, exit 2."""

import json
import os
import re
import sys

import numpy as np
import pytest
from conftest import TINY

import firstdiv
from firstdiv.cli import main
from firstdiv.integrations import mlflow as fm
from firstdiv.lab.store import Store

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install 'firstdiv[mlflow]'")
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

MLP = ["epochs=2", "n_train=64", "n_val=32"]
ALLOW = "MLFLOW_ALLOW_FILE_STORE"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Two builtin-MLP sweeps (base, and cand with a larger learning rate) and a tiny one with a failed seed."""
    root = tmp_path_factory.mktemp("mlflow")
    store = root / "store" / "runs.db"
    firstdiv.sweep("builtin:mlp", "0-3", sets=MLP, store=store, name="base")
    firstdiv.sweep("builtin:mlp", "0-3", sets=[*MLP, "lr=0.05"], store=store, name="cand")
    firstdiv.sweep(f"{TINY}:train", "0-2", sets=["fail_seed=1"], store=store, name="flaky")
    firstdiv.sweep(f"{TINY}:train", "0-2", store=store, name="tiny-val")
    firstdiv.sweep(f"{TINY}:train", "0-2", sets=["eval_split=test"], store=store, name="tiny-test")
    return {"store": store, "uri": str(root / "mlruns"), "root": root}


@pytest.fixture
def client(lab, monkeypatch):
    """A user's own MLflow client on the module's tracking directory (the file store allowed, for it only)."""
    monkeypatch.setenv(ALLOW, "true")
    c = MlflowClient(lab["uri"])
    yield c
    monkeypatch.delenv(ALLOW)


@pytest.fixture(autouse=True)
def no_allow(monkeypatch):
    monkeypatch.delenv(ALLOW, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _cli(capsys, *args):
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_error(capsys, *args):
    rc, out, err = _cli(capsys, *args)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("firstdiv: error: "), (rc, out, err)
    return lines[0]


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def _value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


@pytest.fixture(scope="module")
def pushed(lab):
    return {name: fm.push(name, experiment="rt", tracking_uri=lab["uri"], store=lab["store"]) for name in ("base", "cand")}


def test_push_logs_each_run_with_config_curves_finals_and_tags(lab, pushed, client):
    with Store(lab["store"], create=False) as st:
        records = {r.seed: r for r in st.records(st.find_sweep("base"))}
    res = pushed["base"]
    assert (res.pushed[0]["seed"], len(res.pushed), len(res.existing)) == (0, 4, 0)
    exp = client.get_experiment_by_name("rt")
    assert res.experiment_id == exp.experiment_id
    for row in res.pushed:
        run, r = client.get_run(row["mlflow_run_id"]), records[row["seed"]]
        assert run.info.status == "FINISHED" and run.info.experiment_id == exp.experiment_id
        assert {k: _value(v) for k, v in run.data.params.items()} == {**r.config, "seed": r.seed}
        history = client.get_metric_history(run.info.run_id, "val_loss")
        assert [(m.step, m.value) for m in history] == list(enumerate(r.curves["val_loss"]))
        assert all(run.data.metrics[k] == v for k, v in r.final.items())
        tags = run.data.tags
        assert (tags["firstdiv.sweep"], tags["firstdiv.workload"], tags["firstdiv.identity"], tags["firstdiv.env_hash"],
                tags["firstdiv.code_version"], tags["firstdiv.run_id"], tags["firstdiv.status"]) == (
            "base", r.workload, r.identity, r.env_hash, r.code["version"], f"{r.identity}:{r.seed}", "ok")
        assert tags["mlflow.runName"] == f"base seed {r.seed}"
        assert "firstdiv.exit_code" not in tags  # an in-process run has no child process


def test_push_again_adds_nothing_and_env_is_left_as_it_was(lab, pushed, client, monkeypatch):
    exp = client.get_experiment_by_name("rt").experiment_id
    before = sorted(r.info.run_id for r in client.search_runs([exp]))
    monkeypatch.setenv(ALLOW, "false")  # a user's own setting comes back after the call
    again = fm.push("base", experiment="rt", tracking_uri=lab["uri"], store=lab["store"])
    assert os.environ[ALLOW] == "false"
    monkeypatch.delenv(ALLOW)
    again2 = fm.push("cand", experiment="rt", tracking_uri=lab["uri"], store=lab["store"])
    assert ALLOW not in os.environ
    assert (len(again.pushed), len(again.existing), len(again2.pushed)) == (0, 4, 0)
    assert again.run_ids == pushed["base"].run_ids
    monkeypatch.setenv(ALLOW, "true")
    assert sorted(r.info.run_id for r in client.search_runs([exp])) == before and len(before) == 8


def test_round_trip_compare_equals_compare_of_the_stored_sweeps(lab, pushed, capsys):
    for min_effect in (None, "0.5x"):
        stored = firstdiv.compare("base", "cand", store=lab["store"], min_effect=min_effect)
        back = fm.compare("mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", tracking_uri=lab["uri"], min_effect=min_effect)
        for key in ("verdict", "direction", "shared_seeds", "design", "paired", "unpaired", "min_effect", "identity",
                    "identity_detail", "noise_floor", "seeds_to_resolve", "cost"):
            assert back.details[key] == stored.details[key], key
    assert stored.verdict == "SYSTEM_CHANGED" and stored.details["shared_seeds"] == [0, 1, 2, 3]
    src = back.details["source"]
    assert src["baseline"]["run_ids"] == pushed["base"].run_ids and src["candidate"]["query"] == "sweep=cand"
    assert src["params_differ"] == {"lr": [["0.02"], ["0.05"]]}
    rc, out, err = _cli(capsys, "compare", "mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", "--tracking-uri", lab["uri"],
                        "--json")
    assert rc == 0 and json.loads(out)["payload"]["paired"] == stored.details["paired"], err
    assert json.loads(out)["payload"]["source"]["candidate"]["run_ids"] == pushed["cand"].run_ids
    rc, out, _ = _cli(capsys, "compare", "mlflow:rt?sweep=base", "cand", "--tracking-uri", lab["uri"],
                      "--store", lab["store"], "--fail-on-regression")
    assert rc == 1 and out.startswith("SOURCE\n") and "stored sweep 'cand'" in out and "SYSTEM_CHANGED (worse)" in out
    assert ALLOW not in os.environ


def test_a_changed_eval_contract_still_reads_measurement_changed_from_mlflow(lab):
    for name in ("tiny-val", "tiny-test"):
        fm.push(name, experiment="eval", tracking_uri=lab["uri"], store=lab["store"])
    stored = firstdiv.compare("tiny-val", "tiny-test", store=lab["store"])
    back = fm.compare("mlflow:eval?sweep=tiny-val", "mlflow:eval?sweep=tiny-test", tracking_uri=lab["uri"])
    assert back.verdict == stored.verdict == "MEASUREMENT_CHANGED"
    assert back.details["identity"] == stored.details["identity"] and back.details["paired"] == stored.details["paired"]


def test_a_missing_file_store_is_not_created_by_compare(lab, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_error(capsys, "compare", "mlflow:rt?sweep=base", "mlflow:rt?sweep=cand")  # default ./mlruns
    assert f"No MLflow file store at {tmp_path / 'mlruns'}" in line and "--tracking-uri" in line
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path / 'elsewhere'}")
    assert "elsewhere" in _one_error(capsys, "compare", "mlflow:rt?sweep=base", "mlflow:rt?sweep=cand")
    assert _tree(tmp_path) == []


def test_export_format_mlflow_pushes_failed_runs_as_failed(lab, cli, tmp_path):
    uri = tmp_path / "runs"
    proc = cli("export", "--format", "mlflow", "--name", "flaky", "--store", lab["store"], "--tracking-uri", uri, "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["payload"]
    assert (got["experiment"], got["pushed"], got["existing"], got["failed"]) == ("flaky", 3, 0, 1)
    again = cli("export", "--format", "mlflow", "--name", "flaky", "--store", lab["store"], "--tracking-uri", uri)
    assert again.returncode == 0 and "0 new runs, 3 already there, 1 FAILED" in again.stdout, again.stderr
    os.environ[ALLOW] = "true"
    try:
        runs = {r.data.params["seed"]: r for r in MlflowClient(str(uri)).search_runs(
            [MlflowClient(str(uri)).get_experiment_by_name("flaky").experiment_id])}
    finally:
        del os.environ[ALLOW]
    assert sorted(runs) == ["0", "1", "2"] and runs["1"].info.status == "FAILED"
    with Store(lab["store"], create=False) as st:
        failed = st.records(st.find_sweep("flaky"), include_failed=True)[1]
    assert "seed 1 exploded" in runs["1"].data.tags["firstdiv.error"] and failed.error == runs["1"].data.tags["firstdiv.error"]
    assert runs["1"].data.tags["firstdiv.status"] == failed.status != "ok"
    side = fm.load("mlflow:flaky", tracking_uri=str(uri))
    assert [r.seed for r in side.records] == [0, 2] and side.sweep.info["source"]["left_out"] == [
        f"{runs['1'].info.run_id} (FAILED)"]


def test_a_command_runs_exit_code_goes_to_mlflow_and_comes_back(lab, tmp_path, client):
    store = tmp_path / "runs.db"
    script = "import sys, firstdiv; firstdiv.log(val_loss=0.5); sys.exit(3 if sys.argv[1] == '1' else 0)"
    firstdiv.sweep([sys.executable, "-c", script, "{seed}"], seeds=[0, 1], name="cmd", store=store)
    fm.push("cmd", experiment="cmd", tracking_uri=lab["uri"], store=store)
    runs = client.search_runs([client.get_experiment_by_name("cmd").experiment_id])
    assert sorted((r.data.params["seed"], r.info.status, r.data.tags["firstdiv.exit_code"]) for r in runs) == [
        ("0", "FINISHED", "0"), ("1", "FAILED", "3")]
    assert [r.exit_code for r in fm.load("mlflow:cmd", tracking_uri=lab["uri"]).records] == [0]


def _user_runs(client, experiment, seed_param="seed", seeds=range(6), shift=0.2, nan_seed=None):
    """What a user logs by hand: per seed a base and a candidate run, val_loss over 3 steps, the candidate worse."""
    exp = client.create_experiment(experiment)
    finals = {"base": {}, "cand": {}}
    for seed in seeds:
        noise = np.random.default_rng(seed).normal(0, 0.02)
        for variant, lr, delta in (("base", "0.1", 0.0), ("cand", "0.3", shift + 0.01 * seed)):
            run = client.create_run(exp, tags={"variant": variant})
            curve = [1.5 + noise + delta, 1.2 + noise + delta, 1.0 + noise + delta]
            if variant == "cand" and seed == nan_seed:
                curve[-1] = float("nan")
            client.log_batch(run.info.run_id, metrics=[Metric("val_loss", v, 0, s) for s, v in enumerate(curve)])
            for k, v in (("lr", lr), (seed_param, seed)):
                client.log_param(run.info.run_id, k, v)
            client.set_terminated(run.info.run_id)
            finals[variant][seed] = curve[-1]
    return finals


@pytest.fixture(scope="module")
def user(lab):
    os.environ[ALLOW] = "true"
    try:
        c = MlflowClient(lab["uri"])
        _user_runs(c, "user-seeds", seed_param="random_seed", seeds=range(100, 106))
        _user_runs(c, "user-diverged", seeds=range(4), shift=0.0, nan_seed=2)
        return _user_runs(c, "user")
    finally:
        del os.environ[ALLOW]


def test_runs_a_user_logged_with_mlflow_compare_by_tag_and_param(lab, user):
    c = fm.compare("mlflow:user?tag.variant=base", "mlflow:user?tag.variant=cand", tracking_uri=lab["uri"])
    deltas = [user["cand"][s] - user["base"][s] for s in range(6)]
    assert (c.verdict, c.direction, c.details["shared_seeds"]) == ("SYSTEM_CHANGED", "worse", [0, 1, 2, 3, 4, 5])
    assert c.details["paired"]["mean_delta"] == pytest.approx(np.mean(deltas), abs=1e-12)
    assert c.details["identity"]["config"] == "CHANGED" and c.details["identity_detail"]["config"]["fields"]["lr"] == [
        0.1, 0.3]
    assert c.details["identity"]["env"] == "UNKNOWN" and c.details["source"]["params_differ"]["lr"] == [["0.1"], ["0.3"]]
    labelled = fm.compare("mlflow:user?tag=base", "mlflow:user?tag=cand", tracking_uri=lab["uri"])
    assert labelled.details["paired"] == c.details["paired"] and labelled.verdict == c.verdict
    by_param = fm.compare("mlflow:user?param.lr=0.1", "mlflow:user?param.lr=0.3&tag.variant=cand", tracking_uri=lab["uri"])
    assert by_param.details["paired"] == c.details["paired"]
    other = fm.compare("mlflow:user-seeds?param.lr=0.1", "mlflow:user-seeds?param.lr=0.3", tracking_uri=lab["uri"],
                       seed_param="random_seed")
    assert other.details["shared_seeds"] == list(range(100, 106)) and other.verdict == "SYSTEM_CHANGED"
    diverged = fm.compare("mlflow:user-diverged?tag.variant=base", "mlflow:user-diverged?tag.variant=cand",
                          tracking_uri=lab["uri"])
    assert (diverged.verdict, diverged.direction, diverged.details["diverged"]["candidate_seeds"]) == (
        "SYSTEM_CHANGED", "worse", [2])
    same = fm.compare("mlflow:user?tag.variant=base", "mlflow:user?tag.variant=base", tracking_uri=lab["uri"],
                      min_effect="0.05")
    assert same.verdict == "PRACTICALLY_EQUIVALENT"


def test_a_push_that_fails_half_way_leaves_no_partial_run_and_a_rerun_completes(lab, client, monkeypatch, capsys):
    calls = []
    real = MlflowClient.log_batch

    def flaky(self, run_id, *a, **kw):
        calls.append(run_id)
        if len(set(calls)) == 2:
            raise mlflow.exceptions.MlflowException("disk full")
        return real(self, run_id, *a, **kw)

    exp = client.create_experiment("half")
    with Store(lab["store"], create=False) as st:
        last = st.records(st.find_sweep("base"))[-1]
    # what a push killed between create_run and set_terminated leaves: a RUNNING run with the run's tags
    crashed = client.create_run(exp, tags={"firstdiv.sweep": "base", "firstdiv.run_id": f"{last.identity}:{last.seed}"})
    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    line = _one_error(capsys, "export", "--format", "mlflow", "--name", "base", "--experiment", "half",
                      "--tracking-uri", lab["uri"], "--store", lab["store"])
    assert "disk full" in line
    runs = client.search_runs([exp])  # seed 0 whole, seed 1 removed when its logging failed, the crashed one
    assert sorted(r.info.status for r in runs) == ["FINISHED", "RUNNING"]
    monkeypatch.setattr(MlflowClient, "log_batch", real)
    done = fm.push("base", experiment="half", tracking_uri=lab["uri"], store=lab["store"])
    assert (len(done.pushed), len(done.existing), done.replaced) == (3, 1, (crashed.info.run_id,))
    runs = client.search_runs([exp])
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1", "2", "3"] and {r.info.status for r in runs} == {
        "FINISHED"}


@pytest.mark.parametrize("args,needle", [
    (["mlflow:nope?sweep=base", "mlflow:rt?sweep=base"], "No MLflow experiment named 'nope'"),
    (["mlflow:rt?sweep=zzz", "mlflow:rt?sweep=base"], "no active runs in MLflow experiment 'rt' match 'sweep=zzz'"),
    (["mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", "--seed-param", "rs"], "have no param 'rs'"),
    (["mlflow:user", "mlflow:rt?sweep=base"], "seed 0 is in 2 MLflow runs"),
    (["mlflow:user?tag.variant=base", "mlflow:user?tag.variant=cand", "--seed-param", "lr"], "not an integer seed"),
    (["mlflow:rt?tag=", "mlflow:rt?sweep=cand"], "tag= needs a value"),
    (["mlflow:rt?color=red", "mlflow:rt?sweep=cand"], "unknown key 'color'"),
    (["mlflow:?sweep=base", "mlflow:rt?sweep=cand"], "names no experiment"),
    (["mlflow:rt?sweep=base&sweep=cand", "mlflow:rt?sweep=cand"], "gives sweep twice"),
    (["mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", "--metric", "nope"], "Metric 'nope' is not recorded"),
    (["mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", "--tracking-uri", "nosuch://x"], "MLflow knows no 'nosuch' scheme"),
    (["mlflow:rt?sweep=base", "mlflow:rt?sweep=cand", "--tracking-uri", "sqlite:///m.db"], "pip install mlflow"),
])
def test_compare_bad_mlflow_input_is_one_line_exit_2_and_writes_nothing(lab, pushed, user, capsys, tmp_path, monkeypatch,
                                                                       args, needle):
    monkeypatch.chdir(tmp_path)
    before = _tree(lab["root"])
    uri = [] if "--tracking-uri" in args else ["--tracking-uri", lab["uri"]]
    assert needle in _one_error(capsys, "compare", *args, *uri)
    assert _tree(lab["root"]) == before and _tree(tmp_path) == [] and ALLOW not in os.environ


@pytest.mark.parametrize("args,needle", [
    (["--name", "nope"], "No sweep named 'nope'"),
    ([], "give --name SWEEP"),
    (["--name", "base", "--output", "x.csv"], "--output does not apply to --format mlflow"),
    (["--name", "base", "--tracking-uri", "sqlite:///m.db"], "pip install mlflow"),
    (["--name", "base", "--tracking-uri", "nosuch://x"], "MLflow knows no 'nosuch' scheme"),
])
def test_export_mlflow_bad_input_is_one_line_exit_2_and_writes_nothing(lab, capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    uri = [] if "--tracking-uri" in args else ["--tracking-uri", tmp_path / "mlruns"]
    assert needle in _one_error(capsys, "export", "--format", "mlflow", *args, *uri, "--store", lab["store"])
    assert _tree(tmp_path) == [] and ALLOW not in os.environ
    assert "are for --format mlflow" in _one_error(capsys, "export", "--experiment", "x", "--store", lab["store"])


def test_without_mlflow_installed_both_ways_say_how_to_install_it(lab, pushed, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import mlflow...` now raises ImportError
    fix = "pip install 'firstdiv[mlflow]'"
    assert fix in _one_error(capsys, "export", "--format", "mlflow", "--name", "base", "--store", lab["store"])
    assert fix in _one_error(capsys, "compare", "mlflow:rt?sweep=base", "base", "--store", lab["store"],
                             "--tracking-uri", lab["uri"])
    assert _tree(tmp_path) == []


def test_compare_of_mlflow_runs_prints_where_they_came_from(lab, user, capsys, monkeypatch, golden):
    monkeypatch.delenv("COLUMNS", raising=False)
    rc, out, err = _cli(capsys, "compare", "mlflow:user?tag.variant=base", "mlflow:user?tag.variant=cand",
                        "--tracking-uri", lab["uri"], "--fail-on-regression")
    assert rc == 1, err
    exp = json.loads(_cli(capsys, "compare", "mlflow:user?tag.variant=base", "mlflow:user?tag.variant=cand",
                          "--tracking-uri", lab["uri"], "--json")[1])["payload"]["source"]["baseline"]["experiment_id"]
    text = out.replace(lab["uri"], "<MLRUNS>").replace(exp, "<EXPERIMENT ID>")
    golden("compare_mlflow.txt", re.sub(r"\b[0-9a-f]{8}\b", "<RUN>", text))
