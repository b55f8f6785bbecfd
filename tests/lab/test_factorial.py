"""The 2x2 factorial (chapter 14, "When both the code and the data changed"): effects from per-seed
contrasts recovered exactly on constructed data, validation before any run, the command line, and
one quality run on builtin:mlp."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest
from _paths import WORKLOADS
from scipy import stats as sps

import firstdiv
from firstdiv import Factorial, InvalidArgument, NotFound, Report, Status
from firstdiv.lab.factorial import contrasts, effect

CURVY = WORKLOADS / "curvy.py"
SEEDS = range(6)


def _curvy_module():
    spec = importlib.util.spec_from_file_location("_curvy_for_tests", CURVY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Z = np.array([_curvy_module().draws(s) for s in SEEDS])  # [seed, z0..z4]


@pytest.fixture
def curvy(tmp_path):
    """curvy.py copied out of the git tree: files others change in the repo cannot change its code
    version between the sweeps of one test."""
    dst = tmp_path / "wl" / "curvy.py"
    dst.parent.mkdir()
    shutil.copy(CURVY, dst)
    return f"{dst}:train"


def _check_invariants(r: Factorial) -> None:
    for name, e in r.effects.items():
        assert e["ci_low"] <= e["mean"] <= e["ci_high"], name
        assert e["resolved"] == (e["ci_low"] > 0 or e["ci_high"] < 0), name
        assert (e["direction"] is None) == (not e["resolved"]), name
    assert r.resolved == [k for k in ("A", "B", "interaction") if r.effects[k]["resolved"]]


# --------------------------------------------------------------------------------------------
# the statistics, pure


def test_contrasts_and_effect_against_scipy():
    v = {"base": np.array([1.0, 2.0, 3.0]), "A": np.array([2.0, 3.5, 4.0]),
         "B": np.array([1.5, 2.0, 3.5]), "AB": np.array([3.0, 4.0, 5.5])}
    c = contrasts(v)
    np.testing.assert_allclose(c["A"], [1.25, 1.75, 1.5])  # ((A-base)+(AB-B))/2
    np.testing.assert_allclose(c["B"], [0.75, 0.25, 1.0])
    np.testing.assert_allclose(c["interaction"], [0.5, 0.5, 1.0])  # (AB-B)-(A-base)
    e = effect(c["A"], alpha=0.05, scale=5.5, higher_is_better=False)
    res = sps.ttest_1samp(c["A"], 0.0)
    ci = res.confidence_interval(confidence_level=0.95)
    assert e["mean"] == pytest.approx(1.5) and e["p_value"] == pytest.approx(res.pvalue)
    assert (e["ci_low"], e["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert e["resolved"] and e["direction"] == "worse" and e["test"] == "one-sample t"
    assert effect(c["A"], alpha=0.05, scale=5.5, higher_is_better=True)["direction"] == "better"


def test_effect_constant_and_rounding_contrasts():
    shift = effect(np.array([0.25, 0.25, 0.25]), alpha=0.05, scale=1.0, higher_is_better=False)
    assert (shift["mean"], shift["ci_low"], shift["ci_high"], shift["p_value"]) == (0.25, 0.25, 0.25, 0.0)
    assert shift["resolved"] and shift["direction"] == "worse"
    # spread far below the values' float resolution: rounding of an exact zero, not an effect
    noise = effect(np.array([1e-17, -2e-17, 0.0, 3e-17]), alpha=0.05, scale=1.0, higher_is_better=False)
    assert noise["mean"] == 0.0 and noise["p_value"] == 1.0 and not noise["resolved"]


# --------------------------------------------------------------------------------------------
# effects recovered on constructed data


def test_additive_factors_recovered_exactly(curvy, store_path):
    r = firstdiv.factorial(curvy, "a=0.5", {"b": -0.25}, "0-5", sets=["jitter=0.25"], store=store_path)
    assert isinstance(r, Factorial) and r.details["seeds"] == list(SEEDS)
    exp_a, exp_b = 0.5 * (1 + 0.25 * Z[:, 1]), -0.25 * (1 + 0.25 * Z[:, 2])
    np.testing.assert_allclose(r.effects["A"]["contrasts"], exp_a, rtol=1e-12)
    np.testing.assert_allclose(r.effects["B"]["contrasts"], exp_b, rtol=1e-12)
    assert r.effects["A"]["mean"] == pytest.approx(exp_a.mean(), rel=1e-12)
    ci = sps.ttest_1samp(exp_a, 0.0).confidence_interval(confidence_level=0.95)
    assert (r.effects["A"]["ci_low"], r.effects["A"]["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    inter = r.effects["interaction"]
    assert inter["mean"] == 0.0 and inter["p_value"] == 1.0 and not inter["resolved"]
    assert r.effects["A"]["direction"] == "worse" and r.effects["B"]["direction"] == "better"
    assert r.resolved == ["A", "B"] and r.status is Status.WARN
    _check_invariants(r)
    assert r.cells["AB"]["changes"] == {"a": [0.0, 0.5], "b": [0.0, -0.25]}
    assert "interaction not resolved" in r.details["summary"]


def test_constructed_interaction_detected_with_its_sign(curvy, store_path):
    for ab, sign in ((0.3, "worse"), (-0.3, "better")):
        r = firstdiv.factorial(curvy, "a=0.5", "b=0.25", "0-5", sets=["jitter=0.25", f"ab={ab}"], store=store_path)
        exp = ab * (1 + 0.25 * Z[:, 3])
        assert r.effects["interaction"]["mean"] == pytest.approx(exp.mean(), rel=1e-9)
        assert r.effects["interaction"]["resolved"] and r.effects["interaction"]["direction"] == sign
        main_a = 0.5 * (1 + 0.25 * Z[:, 1]) + exp / 2
        assert r.effects["A"]["mean"] == pytest.approx(main_a.mean(), rel=1e-9)
        assert r.details["simple_effects"]["A with B"]["mean"] - r.details["simple_effects"]["A without B"]["mean"] \
            == pytest.approx(exp.mean(), rel=1e-9)
        assert "interaction resolved" in r.details["summary"] and "simple effects" in str(r)
        _check_invariants(r)
    # the same runs read on a higher-is-better metric: reused, and the direction follows the metric
    acc = firstdiv.factorial(curvy, "a=0.5", "b=0.25", "0-5", sets=["jitter=0.25", "ab=-0.3"], metric="val_acc",
                             store=store_path)
    assert all(c["ran"] == 0 and c["reused"] == 6 for c in acc.cells.values())
    assert acc.details["higher_is_better"] is True
    assert acc.effects["interaction"]["mean"] == pytest.approx((0.3 * (1 + 0.25 * Z[:, 3])).mean() / 4, rel=1e-9)
    assert acc.effects["interaction"]["direction"] == "better" and acc.effects["A"]["direction"] == "worse"


def test_tiny_failed_seeds_and_a_factor_that_changes_the_measurement(tiny, store_path):
    r = firstdiv.factorial(f"{tiny}:train", "shift=0.5", "eval_split=test", "0-4", sets=["fail_seed=2"],
                           store=store_path)
    assert r.details["seeds"] == [0, 1, 3, 4] and r.details["requested_seeds"] == [0, 1, 2, 3, 4]
    a = r.effects["A"]
    assert (a["mean"], a["ci_low"], a["ci_high"]) == pytest.approx((0.5, 0.5, 0.5)) and a["direction"] == "worse"
    assert r.effects["B"]["mean"] == 0.0 and r.effects["interaction"]["mean"] == 0.0
    warns = {f.where: f.message for f in r.findings if f.status is Status.WARN}
    assert "seed" in warns["cell AB"] and "[2]" in warns["cell AB"]
    assert "eval_split" in warns["factor B"] and "measured" in warns["factor B"]
    _check_invariants(r)
    skipped = firstdiv.factorial(f"{tiny}:train", "shift=0.5", "noise=0.1", "0-1", sets=["fail_seed=1"],
                                 store=store_path)
    assert skipped.status is Status.SKIPPED and "only 1 seed" in skipped.reason and skipped.effects == {}
    assert "skipped: only 1 seed" in str(skipped) and "no effects" in skipped.details["summary"]


# --------------------------------------------------------------------------------------------
# bad input: one line naming the problem and the fix, and nothing written


@pytest.mark.parametrize("a, b, kw, problem", [
    ("a=0.5", "a=0.2", {}, "both set a"),
    ("a=0.5", "b=0.1,a=0.2", {}, "both set a"),
    ("zzz=1", "b=0.1", {}, "Unknown config key 'zzz'"),
    ("a=0.0", "b=0.1", {}, "changes nothing"),
    ({"a": 0.0}, "b=0.1", {}, "changes nothing"),
    ("a=0.5", "b=0.1", {"sets": ["b=0.1"]}, "changes nothing"),
    ("", "b=0.1", {}, "KEY=VALUE"),
    ({}, "b=0.1", {}, "changes nothing"),
    ("a", "b=0.1", {}, "KEY=VALUE"),
    ("a=1,a=2", "b=0.1", {}, "more than once"),
    ("a=x", "b=0.1", {}, "expects float"),
    ("a=0.5", "b=0.1", {"seeds": "3"}, "at least 2 seeds"),
    ("a=0.5", "b=0.1", {"alpha": 1.5}, "alpha"),
    ("a=0.5", "b=0.1", {"metric": ""}, "metric name"),
])
def test_bad_input_raises_before_any_run(curvy, store_path, a, b, kw, problem):
    seeds = kw.pop("seeds", "0-3")
    with pytest.raises(InvalidArgument) as info:
        firstdiv.factorial(curvy, a, b, seeds, store=store_path, **kw)
    message = str(info.value)
    assert problem in message and "\n" not in message
    assert not store_path.parent.exists()


def test_unknown_metric_names_the_recorded_ones(curvy, store_path):
    with pytest.raises(NotFound, match=r"Metric 'val_f1' is not recorded .* recorded metrics: .*val_acc"):
        firstdiv.factorial(curvy, "a=0.5", "b=0.1", "0-1", metric="val_f1", store=store_path)


def test_report_round_trips_and_renders(curvy, store_path):
    r = firstdiv.factorial(curvy, "a=0.5", "b=0.25", "0-3", sets=["jitter=0.25", "ab=0.3"], store=store_path)
    back = Report.from_dict(json.loads(r.to_json()))
    assert type(back) is Factorial and back.effects == r.effects and back.resolved == r.resolved
    text = str(r)
    for piece in ("FACTORIAL  WARN", "main effect A", "interaction A x B", "RESOLVED (worse)", "CELLS", "SUMMARY"):
        assert piece in text, piece


# --------------------------------------------------------------------------------------------
# command line


def test_cli_runs_and_prints_json(cli, curvy, store_path):
    proc = cli("factorial", curvy, "--a", "a=0.5", "--b", "b=-0.25", "--seeds", "0-3", "--set", "jitter=0.25",
               "--store", store_path, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["payload"]
    assert out["type"] == "Factorial" and out["details"]["resolved"] == ["A", "B"]
    text = cli("factorial", curvy, "--a", "a=0.5", "--b", "b=-0.25", "--seeds", "0-3", "--set", "jitter=0.25",
               "--store", store_path)
    assert text.returncode == 0 and "SUMMARY  resolved: A worse" in text.stdout


@pytest.mark.parametrize("args, problem", [
    (["--a", "a=0.5", "--b", "a=0.1"], "both set a"),
    (["--a", "a=0.5", "--b", "b=0.1", "--seeds", "4"], "at least 2 seeds"),
    (["--a", "a=0.5"], "Missing option '--b'"),
])
def test_cli_bad_input_exits_2_with_one_line(cli, curvy, store_path, args, problem):
    proc = cli("factorial", curvy, *args, "--store", store_path)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("firstdiv: error: ") and problem in lines[0], proc.stderr
    assert not store_path.parent.exists()


# --------------------------------------------------------------------------------------------
# quality: builtin:mlp


@pytest.mark.quality
def test_mlp_learning_rate_main_effect_is_worse_and_resolved(store_path):
    r = firstdiv.factorial("builtin:mlp", "lr=0.2", "val_noise=0.29", "0-5", store=store_path)
    a = r.effects["A"]
    assert a["resolved"] and a["direction"] == "worse" and a["mean"] > 0
    _check_invariants(r)
    print(str(r))
