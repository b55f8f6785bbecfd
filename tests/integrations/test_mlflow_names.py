"""MLflow keys and values firstdiv did not choose, against a real file-backed MLflow in tmp_path: metric and config
names MLflow does not accept are pushed under distinct keys and read back as they were (two names never merge);
names that still collide are refused before anything is written; a param or tag anyone could have written (JSON
nested thousands deep, a firstdiv tag of the wrong shape) never breaks a comparison."""

import json
import os
import random

import pytest

from firstdiv.cli import main
from firstdiv.integrations import mlflow as fm
from firstdiv.integrations._mlflow_records import key, unkey
from firstdiv.lab.compare import compare
from firstdiv.lab.record import RunRecord
from firstdiv.lab.store import Store

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install 'firstdiv[mlflow]'")
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import path_not_unique

ALLOW = "MLFLOW_ALLOW_FILE_STORE"
#: what MLflow accepts on every platform (on Windows no colon): slashes, word characters, periods, dashes, spaces
VALID = __import__("re").compile(r"[/\w.\- ]+")
NAMES = ["acc!", "acc?", "acc_", "acc-", "acc--", "acc-21-", "a+b", "a@b", "a_b", "a-b", "-", "--", "", ".", "..",
         "a/", "/a", "a//b", "..x", "x/../y", "x/./y", "top-1", "acc@5", "recall@10", "é", "💥", "a:b", " ", "a.b",
         "train/loss", "val_loss", "x" * 300, "x" * 299 + "!", "!" * 60]


@pytest.fixture(autouse=True)
def no_allow(monkeypatch):
    monkeypatch.delenv(ALLOW, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _client(uri):
    os.environ[ALLOW] = "true"
    return MlflowClient(str(uri))


def test_the_key_of_a_name_is_valid_distinct_and_gives_the_name_back():
    rng = random.Random(0)
    names = NAMES + ["".join(rng.choice("ab-_!./ :@é") for _ in range(rng.randrange(0, 7))) for _ in range(5000)]
    keys = {}
    for name in set(names):
        k = key(name)
        assert VALID.fullmatch(k) and not path_not_unique(k) and len(k) <= 250, (name, k)
        if len(name) < 40:  # longer ones may meet in MLflow's 250 characters: refused when they do (below)
            assert keys.setdefault(k, name) == name, f"{name!r} and {keys[k]!r} both become {k!r}"
            assert unkey(k) == name, (name, k)
    for plain in ("val_loss", "train/loss", "a.b", "lr", "grad_norm.max", "val acc"):  # what MLflow takes stays as is
        assert key(plain) == plain


def _record(sweep_seed, seed, config, curves):
    final = {name: values[-1] for name, values in curves.items()}
    return RunRecord(workload="names.py:train", seed=seed, config=config, config_hash=f"c{sweep_seed}",
                     identity=f"ident{sweep_seed}", code={"version": "v1"}, env={}, env_hash="e", data_identity=None,
                     eval_contract=None, eval_fingerprint=None, eval_fields=[], curves=curves, final=final,
                     directions={}, grad_norm={"max": 2.0}, throughput={}, wall_seconds=1.0)


def _store(path, sweeps):
    """A store holding ``sweeps``: {name: (config, {seed: curves})}."""
    with Store(path) as st:
        for i, (name, (config, runs)) in enumerate(sweeps.items()):
            info = st.upsert_sweep(name, f"ident{i}", "names.py:train", {"config": config}, sorted(runs))
            for seed, curves in runs.items():
                st.add(_record(i, seed, config, curves), sweep=info)
    return path


def test_names_mlflow_does_not_take_are_pushed_apart_and_read_back_as_they_were(tmp_path, capsys):
    config = {"a+b": 1, "a@b": 2, "top-1": "x", "nested": {"k!": 3}}
    runs = {s: {"acc!": [0.1 * s, 0.2 + 0.01 * s], "acc?": [0.9, 0.8 - 0.01 * s], "val_loss": [1.0, 0.5]}
            for s in range(4)}
    worse = {s: {**c, "acc!": [0.1, 0.4 + 0.01 * s]} for s, c in runs.items()}
    store = _store(tmp_path / "runs.db", {"s": (config, runs), "t": (config, worse)})
    uri = tmp_path / "mlruns"
    pushed = fm.push("s", experiment="names", tracking_uri=str(uri), store=store)
    fm.push("t", experiment="names", tracking_uri=str(uri), store=store)
    client = _client(uri)
    try:
        run = client.get_run(pushed.run_ids[1])
        history = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)]
                   for k in run.data.metrics}
    finally:
        del os.environ[ALLOW]
    assert {unkey(k): v for k, v in history.items() if k not in ("wall_seconds", "grad_norm.max")} == {
        name: list(enumerate(values)) for name, values in runs[1].items()}  # two curves, not one interleaved
    assert len({key(k) for k in config}) == len(config) and {unkey(k) for k in run.data.params} == {
        "a+b", "a@b", "top-1", "nested.k!", "seed"}
    side = fm.load("mlflow:names?sweep=s", tracking_uri=str(uri))
    assert [r.final for r in side.records] == [{n: v[-1] for n, v in runs[s].items()} for s in range(4)]
    assert side.records[0].config == {"a+b": 1, "a@b": 2, "top-1": "x", "nested.k!": 3}
    stored = compare("s", "t", metric="acc!", store=store)
    back = fm.compare("mlflow:names?sweep=s", "mlflow:names?sweep=t", metric="acc!", tracking_uri=str(uri))
    assert back.details["paired"] == stored.details["paired"] and back.verdict == stored.verdict
    rc = main(["compare", "mlflow:names?sweep=s", "mlflow:names?sweep=t", "--metric", "acc?", "--tracking-uri",
               str(uri), "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["payload"]["metric"] == "acc?"


@pytest.mark.parametrize("config, curves, says", [
    ({"a": {"b": 1}, "a.b": 2}, {"val_loss": [1.0]},
     ["config key 'a' > 'b' and config key 'a.b' both become MLflow param 'a.b'"]),
    ({"x" * 260: 1, "x" * 261: 2}, {"val_loss": [1.0]}, ["both become MLflow param 'xxxx", "..."]),
    ({}, {"grad_norm.max": [1.0]}, ["metric 'grad_norm.max' and the gradient-norm quantile 'max'",
                                    "both become MLflow metric 'grad_norm.max'"]),
])
def test_names_that_still_meet_in_one_key_are_refused_before_anything_is_written(tmp_path, capsys, config, curves,
                                                                                  says):
    store = _store(tmp_path / "runs.db", {"s": (config, {0: curves})})
    uri = tmp_path / "mlruns"
    capsys.readouterr()
    rc = main(["export", "--format", "mlflow", "--name", "s", "--store", str(store), "--tracking-uri", str(uri)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("firstdiv: error: sweep 's' seed 0: "), err
    assert all(part in err[0] for part in says) and "rename one of them" in err[0], err
    assert not uri.exists()


def _hostile(uri):
    """Runs a user logged by hand, base and cand per seed, one cand run carrying a param nested 2,900 deep and tags
    of firstdiv's names with values of the wrong shape (a list, nested thousands deep, a dict of lists)."""
    client = _client(uri)
    try:
        exp = client.create_experiment("hostile")
        deep = "[" * 2900 + "]" * 2900
        for seed in range(4):
            for variant, shift in (("base", 0.0), ("cand", 0.3)):
                run = client.create_run(exp, tags={"variant": variant})
                value = 1.0 + 0.01 * seed + shift * (1 + 0.1 * seed)
                client.log_batch(run.info.run_id, metrics=[Metric("val_loss", value, 0, 0)])
                client.log_param(run.info.run_id, "seed", seed)
                if variant == "cand" and seed == 1:
                    client.log_param(run.info.run_id, "deep", deep)
                    for tag, value in (("firstdiv.config_roles", "[1, 2]"), ("firstdiv.directions", deep),
                                       ("firstdiv.exit_code", deep), ("deep", deep)):
                        client.set_tag(run.info.run_id, tag, value)
                if variant == "cand" and seed == 2:
                    client.set_tag(run.info.run_id, "firstdiv.config_roles", json.dumps({"eval_keys": [[1]]}))
                    client.set_tag(run.info.run_id, "firstdiv.directions", json.dumps({"val_loss": [1]}))
                client.set_terminated(run.info.run_id)
    finally:
        del os.environ[ALLOW]
    return deep


def test_params_and_tags_anyone_could_write_never_break_a_comparison(tmp_path, capsys):
    uri = tmp_path / "mlruns"
    deep = _hostile(uri)
    capsys.readouterr()
    rc = main(["compare", "mlflow:hostile?tag.variant=base", "mlflow:hostile?tag.variant=cand", "--tracking-uri",
               str(uri), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    assert json.loads(out)["payload"]["verdict"] == "SYSTEM_CHANGED"
    side = fm.load("mlflow:hostile?tag.variant=cand", tracking_uri=str(uri))
    hurt = next(r for r in side.records if r.seed == 1)
    assert hurt.config["deep"] == deep  # taken as the text it is
    assert hurt.directions == {} and "eval_keys" not in hurt.extra and hurt.exit_code is None  # not firstdiv's shape
