"""Results and runs that must not mislead: diverged runs, config values, exits inside a workload,
API arguments and options that would do nothing (issue 13, items 1, 4, 7, 14 and 16)."""

import json
import math
import re
import sqlite3

import numpy as np
import pytest
from conftest import ROOT, TINY

import firstdiv
from firstdiv.lab.store import Store
from firstdiv.render.sweeps import render_comparison_body

UNRULY = str(ROOT / "tests" / "workloads" / "unruly.py")
DIVERGE = f"{UNRULY}:diverge"
STACKED = str(ROOT / "tests" / "workloads" / "unruly_functional.py") + ":stacked"


def _strict(text):
    """json.loads that refuses Python's NaN/Infinity tokens, as every other JSON reader does."""
    return json.loads(text, parse_constant=lambda token: (_ for _ in ()).throw(ValueError(f"not JSON: {token}")))


def _one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("firstdiv: error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- 1. a diverged run is not a PASS -------------------------------------------------------------

def test_nonfinite_metrics_are_recorded_as_such_in_strict_json(tmp_path):
    store = tmp_path / "runs.db"
    res = firstdiv.sweep(DIVERGE, "0-2", sets=["diverge_seeds=[0,2]", "value=inf"], store=store)
    by_seed = {r.seed: r for r in res.records}
    assert by_seed[0].final["val_loss"] == math.inf and by_seed[0].curves["val_loss"][1:] == [math.inf, math.inf]
    assert math.isfinite(by_seed[1].final["val_loss"])
    for (payload,) in sqlite3.connect(store).execute("SELECT record FROM runs"):
        _strict(payload)  # no Infinity/NaN tokens in the store
    with Store(store) as st:
        again = {r.seed: r for r in st.iter_runs()}
    assert again[2].final["val_loss"] == math.inf and again[2].curves["val_loss"][0] < 2
    assert [r.seed for r in res.diverged] == [0, 2]
    assert res.report().status is firstdiv.Status.FAIL
    assert res.report().first_divergence.kind == "run.diverged"


def test_sweep_with_diverged_seeds_exits_1_naming_seeds_and_epoch(cli, tmp_path):
    store = tmp_path / "runs.db"
    proc = cli("sweep", DIVERGE, "--seeds", "0-2", "--set", "diverge_seeds=[1]", "--set", "diverge_epoch=2",
               "--store", store, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "1 DIVERGED" in proc.stdout and "seed 1 DIVERGED: val_loss nan from epoch 2" in proc.stdout, proc.stdout
    js = cli("sweep", DIVERGE, "--seeds", "0-2", "--set", "diverge_seeds=[1]", "--set", "diverge_epoch=2",
             "--store", store, "--json", cwd=tmp_path)
    assert js.returncode == 1
    data = _strict(js.stdout)["payload"]
    assert data["diverged"] == [{"seed": 1, "metrics": {"val_loss": {"value": "nan", "epoch": 2}}}]
    assert data["summary"]["val_loss"]["median"] == "nan"


def test_builtin_with_an_overflowing_lr_is_a_diverged_sweep(tmp_path):
    res = firstdiv.sweep("builtin:mlp", "0", sets=["epochs=1", "lr=1e30"], store=tmp_path / "runs.db")
    assert [r.seed for r in res.diverged] == [0], res.records[0].final
    assert res.report().status is firstdiv.Status.FAIL


def test_compare_with_a_diverged_candidate_is_a_regression_and_exits_1(cli, tmp_path):
    store = tmp_path / "runs.db"
    firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[]"], name="base", store=store)
    firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[1,3]"], name="diverged", store=store)
    proc = cli("compare", "base", "diverged", "--fail-on-regression", "--store", store, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "SYSTEM_CHANGED (worse): diverged: candidate val_loss non-finite on 2 of 4 seeds (seeds 1, 3)" in proc.stdout
    js = cli("compare", "base", "diverged", "--json", "--store", store, cwd=tmp_path)
    data = _strict(js.stdout)["payload"]
    assert (data["verdict"], data["direction"]) == ("SYSTEM_CHANGED", "worse")
    assert data["diverged"]["candidate_seeds"] == [1, 3] and data["candidate"]["metrics"]["val_loss"]["nonfinite"] == 2


def test_compare_reads_divergence_by_side_and_keeps_the_verdict_order(tmp_path):
    store = tmp_path / "runs.db"
    ok = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[]"], store=store)
    some = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[2]", "value=-inf"], store=store)
    every = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[0,1,2,3]"], store=store)
    every_too = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[0,1,2,3]", "shift=0.5"], store=store)
    other_eval = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[0,1,2,3]", "eval_split=test"], store=store)

    better = firstdiv.compare(some, ok)
    assert (better.verdict, better.direction) == ("SYSTEM_CHANGED", "better")
    assert "baseline val_loss non-finite on 1 of 4 seeds (seed 2)" in str(better)
    worse = firstdiv.compare(some, every)
    assert (worse.verdict, worse.direction) == ("SYSTEM_CHANGED", "worse")
    head = next(iter(render_comparison_body(worse))).plain  # the RUN ... BASELINE ... line the command prints
    assert head.endswith("(no shared seeds with finite values: unpaired)"), head  # the seeds are shared; values are not
    neither = firstdiv.compare(every, every_too)
    assert neither.verdict == "NOT_RESOLVED" and "no finite values to compare" in str(neither)
    assert firstdiv.compare(ok, other_eval).verdict == "MEASUREMENT_CHANGED"  # the measurement is read first
    hyp = firstdiv.sweep(DIVERGE, "0-3", sets=["diverge_seeds=[0]"], store=store, name="declared",
                         hypothesis="harmless", success="val_loss delta within noise")
    assert firstdiv.compare(ok, hyp).details["declared"]["result"] == "NOT MET"


# -- 4. config values are validated before anything is written -----------------------------------

@pytest.mark.parametrize("target,setting,needle", [
    ("builtin:mlp", "lr=nan", "'lr'"),
    ("builtin:mlp", "hidden=100000000", "GiB"),
    (DIVERGE, "threads=100000", "threads"),
    (f"{UNRULY}:picky", "limit=abc", "TypeError"),
])
def test_bad_config_values_exit_2_with_one_line_and_write_nothing(cli, tmp_path, target, setting, needle):
    store = tmp_path / "store" / "runs.db"
    proc = cli("sweep", target, "--seeds", "0", "--set", setting, "--store", store, cwd=tmp_path)
    _one_line_exit_2(proc, needle)
    assert not store.exists() and not (tmp_path / ".firstdiv").exists()


@pytest.mark.parametrize("target,settings,needle", [
    ("builtin:mlp", {"lr": "inf"}, "'lr'"),
    ("builtin:mlp", {"weight_decay": "nan"}, "'weight_decay'"),
    ("builtin:mlp", {"eval_input_scale": "-inf"}, "'eval_input_scale'"),
    ("builtin:mlp", {"data_seed": "-1"}, "data_seed"),
    ("builtin:mlp", {"threads": "100000"}, "threads"),
    ("builtin:mlp", {"n_train": "10000000000"}, "GiB"),
    (DIVERGE, {"shift": "inf"}, "nonfinite=('shift',)"),
    (f"{TINY}:free", {"offset": "NaN"}, "'offset'"),  # no declared defaults: parsed as JSON, still refused
])
@pytest.mark.parametrize("how", ["sets", "config"])
def test_bad_config_values_are_refused_from_sets_and_from_dicts(tmp_path, target, settings, needle, how):
    store = tmp_path / "runs.db"
    kwargs = ({"sets": [f"{k}={v}" for k, v in settings.items()]} if how == "sets"
              else {"config": {k: json.loads(v.replace("inf", "Infinity").replace("nan", "NaN")) for k, v in settings.items()}})
    with pytest.raises(firstdiv.InvalidArgument) as info:
        firstdiv.sweep(target, "0", store=store, **kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not store.exists()


def test_non_finite_values_are_accepted_where_the_workload_says_so(tmp_path):
    store = tmp_path / "runs.db"
    res = firstdiv.sweep(f"{UNRULY}:clipped", "0", sets=["max_grad_norm=inf", "scale=inf"], store=store)
    assert res.records[0].config["max_grad_norm"] == math.inf and res.records[0].config["scale"] == math.inf
    with pytest.raises(firstdiv.InvalidArgument, match="'lr' is nan"):
        firstdiv.sweep(f"{UNRULY}:clipped", "0", config={"lr": float("nan")}, store=store)


# -- 7. sys.exit() in a workload fails its run, not the sweep ------------------------------------

def test_sys_exit_in_a_serial_workload_is_a_failed_run_and_later_seeds_run(tmp_path):
    store = tmp_path / "runs.db"
    res = firstdiv.sweep(f"{UNRULY}:exits", "0-3", store=store)
    assert [r.seed for r in res.records] == [0, 2, 3]
    assert [r.seed for r in res.failed] == [1]
    assert re.fullmatch(r"SystemExit\(3\) at unruly\.py:\d+", res.failed[0].error), res.failed[0].error


@pytest.mark.parametrize("backend", ["serial", "vectorized"])
@pytest.mark.parametrize("where,code", [("spec", 4), ("apply", 5)])
def test_sys_exit_in_a_functional_workload_fails_every_seed_it_held(tmp_path, backend, where, code):
    res = firstdiv.sweep(STACKED, "0-2", sets=[f"exit_in={where}"], store=tmp_path / "runs.db",
                         backend=backend)
    assert res.records == () and [r.seed for r in res.failed] == [0, 1, 2]
    assert all(r.error.startswith(f"SystemExit({code})") for r in res.failed), res.failed[0].error


def test_keyboard_interrupt_in_a_workload_still_stops_the_sweep(tmp_path):
    store = tmp_path / "runs.db"
    with pytest.raises(KeyboardInterrupt):
        firstdiv.sweep(f"{UNRULY}:interrupted", "0-2", store=store)
    with Store(store) as st:
        assert sorted(r.seed for r in st.iter_runs()) == [0]


# -- 14. API arguments: one-line errors, numpy seeds accepted -------------------------------------

@pytest.mark.parametrize("kwargs,needle", [
    ({"seeds": None}, "seeds"),
    ({"seeds": [2**63]}, "2**63-1"),
    ({"seeds": "9223372036854775808"}, "2**63-1"),
    ({"seeds": [1.5]}, "seeds"),
    ({"config": ["epochs=1"]}, "`config`"),
    ({"target": 123}, "`target`"),
    ({"target": None}, "`target`"),
    ({"sets": [1]}, "`sets`"),
    ({"name": 5}, "`name`"),
    ({"workers": "2"}, "--workers"),
    ({"backend": ["serial"]}, "`backend`"),
    ({"backend_options": "chunk=2"}, "`backend_options`"),
])
def test_bad_sweep_arguments_are_one_line_errors_and_write_nothing(tmp_path, kwargs, needle):
    store = tmp_path / "runs.db"
    args = {"target": f"{UNRULY}:exits", "seeds": "0", "store": store, **kwargs}
    with pytest.raises(firstdiv.FirstdivError) as info:
        firstdiv.sweep(args.pop("target"), args.pop("seeds"), **args)
    assert isinstance(info.value, (ValueError, TypeError)) and "\n" not in str(info.value)
    assert needle in str(info.value)
    assert not store.exists()


def test_numpy_seeds_and_a_single_set_string_are_accepted(tmp_path):
    res = firstdiv.sweep(f"{UNRULY}:exits", np.array([0, 2], dtype=np.int64), sets="epochs=1", store=tmp_path / "r.db",
                         workers=None)
    assert [r.seed for r in res.records] == [0, 2] and all(type(r.seed) is int for r in res.records)
    assert res.records[0].config["epochs"] == 1 and len(res.records[0].curves["val_loss"]) == 1
    assert [r.seed for r in firstdiv.sweep(f"{UNRULY}:exits", np.int32(3), store=tmp_path / "r.db").records] == [3]


def test_seed_beyond_the_stores_range_exits_2_on_the_command_line(cli, tmp_path):
    store = tmp_path / "runs.db"
    _one_line_exit_2(cli("sweep", f"{UNRULY}:exits", "--seeds", "9223372036854775808", "--store", store, cwd=tmp_path),
                     "2**63-1")
    assert not store.exists()


@pytest.mark.parametrize("kwargs,needle", [
    ({"metric": 5}, "`metric`"),
    ({"alpha": "0.05"}, "alpha"),
    ({"baseline": None}, "baseline"),
    ({"candidate": 123}, "candidate"),
])
def test_bad_compare_arguments_are_one_line_errors(tmp_path, kwargs, needle):
    res = firstdiv.sweep(DIVERGE, "0-1", sets=["diverge_seeds=[]"], store=tmp_path / "runs.db")
    args = {"baseline": res, "candidate": res, **kwargs}
    with pytest.raises(firstdiv.FirstdivError) as info:
        firstdiv.compare(args.pop("baseline"), args.pop("candidate"), **args)
    assert needle in str(info.value) and "\n" not in str(info.value)


# -- 16. options that would do nothing are refused ------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["--chunk", "2"], "--chunk applies only to --backend vectorized"),
    (["--address", "127.0.0.1:1", "--backend", "process"], "--address applies only to --backend ray"),
    (["--set", "diverge_seeds=abc"], "expects a list"),
])
def test_options_that_would_do_nothing_exit_2_and_write_nothing(cli, tmp_path, args, needle):
    store = tmp_path / "runs.db"
    _one_line_exit_2(cli("sweep", DIVERGE, "--seeds", "0", *args, "--store", store, cwd=tmp_path), needle)
    assert not store.exists()


@pytest.mark.parametrize("backend,options,needle", [
    ("process", {"chunk": 2}, "--chunk applies only to --backend vectorized"),
    ("serial", {"address": "127.0.0.1:1"}, "--address applies only to --backend ray"),
    ("vectorized", {"address": "127.0.0.1:1"}, "--address applies only to --backend ray"),
    ("process", {"nice": 5}, "Unknown option 'nice' for the process backend; it takes no options"),
])
def test_backend_options_a_backend_would_ignore_are_refused(tmp_path, backend, options, needle):
    with pytest.raises(firstdiv.InvalidArgument) as info:
        firstdiv.sweep(STACKED, "0", backend=backend, backend_options=options, store=tmp_path / "runs.db")
    assert needle in str(info.value)
    assert not (tmp_path / "runs.db").exists()


def test_a_list_key_refuses_a_string_from_a_dict_too(tmp_path):
    with pytest.raises(firstdiv.InvalidArgument, match="'diverge_seeds' expects a list"):
        firstdiv.sweep(DIVERGE, "0", config={"diverge_seeds": "1,2"}, store=tmp_path / "runs.db")
    assert firstdiv.sweep(DIVERGE, "0", config={"diverge_seeds": (0,)}, store=tmp_path / "runs.db").diverged
