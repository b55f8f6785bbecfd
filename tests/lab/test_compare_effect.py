"""compare's min_effect: an effect that matters clears the threshold, one inside it is PRACTICALLY_EQUIVALENT,
one whose CI straddles it is NOT_RESOLVED against it; the verdict order and the A/A rate still hold."""

import json
import warnings

import numpy as np
import pytest
from _paths import WORKLOADS
from scipy import stats as sps

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab._effect import MinEffect, parse_min_effect, tost
from firstdiv.lab.compare import is_regression


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    target = str(WORKLOADS / "tiny.py") + ":train"
    store = tmp_path_factory.mktemp("effect") / "runs.db"
    run = lambda name, seeds="0-5", **kw: firstdiv.sweep(target, seeds, name=name, store=store, **kw)
    return {
        "base": run("base"),
        "tiny": run("tiny", sets=["shift=0.002"]),
        "tiny_declared": run("tiny_declared", sets=["shift=0.002", "noise=0.0500001"],
                             hypothesis="a rounding change moves nothing", success="val_loss delta within noise"),
        "big": run("big", sets=["shift=0.5"]),
        "eval": run("eval", sets=["shift=0.002", "eval_split=test"]),
        "far": run("far", "10-15", sets=["shift=0.15"]),
        "store": store,
    }


def _cmp(a, b, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant deltas: scipy's precision warning
        return firstdiv.compare(a, b, **kw)


@pytest.mark.parametrize("spec, kind, value", [(0.01, "absolute", 0.01), ("0.01", "absolute", 0.01),
                                               ("2%", "relative", 2.0), ("0.5x", "noise", 0.5), (" 3X ", "noise", 3.0)])
def test_parse_min_effect_forms(spec, kind, value):
    e = parse_min_effect(spec)
    assert (e.kind, e.value) == (kind, value)


@pytest.mark.parametrize("spec", ["-0.01", "0", 0, -1.0, "abc", "2%x", True, float("nan")])
def test_parse_min_effect_rejects_what_is_not_a_positive_effect(spec):
    with pytest.raises(InvalidArgument, match="min_effect"):
        parse_min_effect(spec)


def test_thresholds_follow_the_baseline():
    base = [1.0, 1.2, 1.1]
    assert MinEffect("absolute", 0.01, "0.01").threshold(base) == 0.01
    assert MinEffect("relative", 2.0, "2%").threshold(base) == pytest.approx(0.022)
    assert MinEffect("noise", 0.5, "0.5x").threshold(base) == pytest.approx(0.1)
    assert MinEffect("noise", 0.5, "0.5x").threshold([1.0]) is None


def test_tost_equivalence_is_the_two_alpha_ci_inside_the_bounds():
    rng = np.random.default_rng(3)
    for _ in range(40):
        b = rng.normal(size=8)
        c = b + rng.normal(0.1, 0.3, size=8)
        for paired in (True, False):
            bound = float(rng.uniform(0.05, 0.6))
            res = tost(b, c, bound, paired_design=paired, alpha=0.05)
            assert res["equivalent"] == (-bound < res["ci_low"] and res["ci_high"] < bound)
    d = c - b
    expected = max(sps.ttest_1samp(d, -0.4, alternative="greater").pvalue,
                   sps.ttest_1samp(d, 0.4, alternative="less").pvalue)
    assert tost(b, c, 0.4, paired_design=True, alpha=0.05)["p_value"] == pytest.approx(expected)


def test_a_tiny_resolved_change_is_practically_equivalent_with_a_min_effect(sides):
    plain = _cmp(sides["base"], sides["tiny"])
    assert plain.verdict == "SYSTEM_CHANGED" and plain.direction == "worse" and is_regression(plain)
    assert plain.details["min_effect"] is None
    for spec in (0.01, "2%", "0.5x"):
        c = _cmp(sides["base"], sides["tiny"], min_effect=spec)
        e = c.details["min_effect"]
        assert c.verdict == "PRACTICALLY_EQUIVALENT" and c.direction is None and c.ok and not is_regression(c)
        assert e["relation"] == "inside" and e["resolved_from_zero"] and e["tost"]["equivalent"]
        assert -e["threshold"] < e["ci_low"] <= e["ci_high"] < e["threshold"]
    text = str(_cmp(sides["base"], sides["tiny"], min_effect=0.01))
    assert "min effect 0.01 (absolute) = +-0.01" in text and "VERDICT  PRACTICALLY_EQUIVALENT" in text
    assert "equivalence (TOST)" in text


def test_an_effect_beyond_the_threshold_is_still_a_system_change(sides):
    c = _cmp(sides["base"], sides["big"], min_effect=0.1)
    assert c.verdict == "SYSTEM_CHANGED" and c.direction == "worse" and is_regression(c)
    assert c.details["min_effect"]["relation"] == "beyond"
    assert "clears the min effect +-0.1" in str(c)
    assert _cmp(sides["base"], sides["big"], min_effect=0.6).verdict == "PRACTICALLY_EQUIVALENT"


def test_a_ci_straddling_the_threshold_is_not_resolved_against_it_with_seeds_needed(sides):
    plain = _cmp(sides["base"], sides["far"])
    assert plain.verdict == "SYSTEM_CHANGED" and plain.details["design"] == "unpaired"
    lo, hi = plain.details["unpaired"]["ci_low"], plain.details["unpaired"]["ci_high"]
    threshold = lo + 0.3 * (hi - lo)  # inside the CI: it straddles
    c = _cmp(sides["base"], sides["far"], min_effect=threshold)
    e = c.details["min_effect"]
    assert c.verdict == "NOT_RESOLVED" and c.direction is None and not is_regression(c)
    assert e["relation"] == "straddles" and e["resolved_from_zero"] and e["seeds_to_resolve"] > 6
    assert "resolved from zero but not resolved against the min effect" in str(c)


def test_measurement_changed_still_comes_first(sides):
    c = _cmp(sides["base"], sides["eval"], min_effect=0.01)
    assert c.verdict == "MEASUREMENT_CHANGED" and is_regression(c)


def test_bad_min_effect_is_one_line_naming_the_fix(sides):
    with pytest.raises(InvalidArgument, match=r"0\.01, 2% or 0\.5x|absolute value"):
        _cmp(sides["base"], sides["tiny"], min_effect="lots")


def test_a_met_within_noise_criterion_never_renders_as_fail(sides):
    c = _cmp(sides["base"], sides["tiny_declared"])
    assert c.details["declared"]["result"] == "MET" and c.verdict == "SYSTEM_CHANGED"
    assert c.status.name != "FAIL" and not is_regression(c)
    assert "inside the declared noise criterion" in str(c)


def test_cli_min_effect_gates_fail_on_regression(cli, sides, tmp_path):
    store = str(sides["store"])
    assert cli("compare", "base", "tiny", "--fail-on-regression", "--store", store, cwd=tmp_path).returncode == 1
    proc = cli("compare", "base", "tiny", "--min-effect", "0.01", "--fail-on-regression", "--json", "--store", store,
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["payload"]
    assert out["verdict"] == "PRACTICALLY_EQUIVALENT" and out["min_effect"]["threshold"] == 0.01
    assert cli("compare", "base", "big", "--min-effect", "0.1", "--fail-on-regression", "--store", store,
               cwd=tmp_path).returncode == 1
    bad = cli("compare", "base", "tiny", "--min-effect", "-3", "--store", store, cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "min_effect" in bad.stderr


def test_aa_with_a_min_effect_never_claims_a_system_change(tiny, store_path):
    report = firstdiv.aa(f"{tiny}:train", pairs=20, seeds_per_side=4, store=store_path, min_effect="2x")
    verdicts = report.details["verdicts"]
    assert set(verdicts) <= {"PRACTICALLY_EQUIVALENT", "NOT_RESOLVED", "SYSTEM_CHANGED"}
    assert report.details["rate"] <= 0.05 and report.ok and report.details["min_effect"] == "2x"
    assert verdicts.get("PRACTICALLY_EQUIVALENT", 0) > 0


@pytest.fixture(scope="module")
def mlp_store(tmp_path_factory):
    return tmp_path_factory.mktemp("mlp") / "runs.db"


def test_power_the_chapters_e5_effect_stays_a_system_change_below_its_size(mlp_store):
    # E5: val_noise 0.30 -> 0.29 lowers val_loss by about 0.009 at 8 paired seeds (noise floor spread ~0.03)
    base = firstdiv.sweep("builtin:mlp", "0-7", name="e5-a", store=mlp_store, backend="vectorized")
    cand = firstdiv.sweep("builtin:mlp", "0-7", sets=["val_noise=0.29"], name="e5-b", store=mlp_store,
                          backend="vectorized")
    plain = _cmp(base, cand)
    assert plain.verdict == "SYSTEM_CHANGED" and plain.direction == "better"
    size = abs(plain.paired["mean_delta"])
    below = _cmp(base, cand, min_effect=size / 3)
    assert below.verdict == "SYSTEM_CHANGED" and below.direction == "better"
    assert below.details["min_effect"]["relation"] == "beyond"
    above = _cmp(base, cand, min_effect=3 * size)
    assert above.verdict == "PRACTICALLY_EQUIVALENT" and above.details["min_effect"]["tost"]["equivalent"]


def test_builtin_mlp_aa_with_a_min_effect_stays_at_or_under_alpha(mlp_store):
    report = firstdiv.aa("builtin:mlp", pairs=8, seeds_per_side=3, start=100, store=mlp_store, min_effect="1x",
                         backend="vectorized")
    plain = firstdiv.aa("builtin:mlp", pairs=8, seeds_per_side=3, start=100, store=mlp_store, backend="vectorized")
    verdicts = report.details["verdicts"]
    assert report.ok and report.details["p_value"] >= 0.05  # the false-alarm rate is not above alpha
    # a CI beyond +-threshold is beyond zero: a min effect only ever removes alarms
    assert report.details["alarms"] <= plain.details["alarms"]
    assert verdicts.get("PRACTICALLY_EQUIVALENT", 0) + verdicts.get("NOT_RESOLVED", 0) >= 8 - plain.details["alarms"]


def test_html_comparison_page_shows_the_min_effect(sides):
    from firstdiv import html

    page = html.to_html(html.comparison_view(sides["base"], sides["tiny"], min_effect=0.01))
    assert "PRACTICALLY_EQUIVALENT" in page and "min effect 0.01" in page and "equivalence (TOST)" in page


def test_a_diverged_candidate_stays_a_regression_whatever_the_min_effect(tmp_path):
    diverge = str(WORKLOADS / "unruly.py") + ":diverge"
    store = tmp_path / "runs.db"
    base = firstdiv.sweep(diverge, "0-3", sets=["diverge_seeds=[]"], name="base", store=store)
    cand = firstdiv.sweep(diverge, "0-3", sets=["diverge_seeds=[1,3]"], name="diverged", store=store)
    c = _cmp(base, cand, min_effect=1e6)
    assert (c.verdict, c.direction) == ("SYSTEM_CHANGED", "worse") and is_regression(c)  # a diverged run is no noise
