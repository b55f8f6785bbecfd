"""Bisection over config changes: prefix search, confirmation alone, interactions, UNKNOWN handling."""

import json

import pytest
from conftest import ROOT

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab.bisect import bisect

LAB = str(ROOT / "tests" / "workloads" / "lab.py")


def probes(report):
    return {p["label"]: p for p in report.details["probes"]}


def test_names_the_culprit_and_confirms_it_alone(store_path):
    report = bisect(f"{LAB}:interact", "a=1", "a=1,c=1,b=1,d=1", "0-5", store=store_path)
    # Both configs are given in full (each over the workload's defaults); a=1 on both sides makes b
    # alone sufficient: the regression is b.
    assert report.culprit == "b"
    assert report.first_divergence.kind == "bisect.culprit"
    assert report.first_divergence.expected == 0 and report.first_divergence.observed == 1
    p = probes(report)
    assert p["candidate"]["decision"] == "DIFFERENT"
    assert p["alone-b"]["decision"] == "DIFFERENT" and p["revert-b"]["decision"] == "SAME"
    assert [c["key"] for c in report.details["changes"]] == ["c", "b", "d"]  # the candidate's own order
    assert "confirmed" in report.details["conclusion"]


def test_interaction_is_reported_with_the_combination_that_reproduces(store_path):
    report = bisect(f"{LAB}:interact", {}, {"c": 1, "a": 1, "d": 1, "b": 1}, "0-5", store=store_path)
    assert report.culprit == "b"
    assert report.details["partner"] == "a"
    assert report.first_divergence.kind == "bisect.interaction"
    p = probes(report)
    assert p["alone-b"]["decision"] == "SAME"
    assert p["pair-a-b"]["decision"] == "DIFFERENT"
    assert "interacts with a" in report.details["conclusion"]


def test_order_option_and_binary_search_probe_count(store_path):
    report = bisect(f"{LAB}:interact", "a=1", "a=1,c=1,b=1,d=1", "0-5", order="d,c,b", store=store_path)
    assert [c["key"] for c in report.details["changes"]] == ["d", "c", "b"]
    assert report.culprit == "b"
    prefixes = [p for p in report.details["probes"] if p["label"].startswith("prefix")]
    assert len(prefixes) <= 2  # ceil(log2(3))


def test_no_regression_is_a_clean_result(store_path):
    report = bisect(f"{LAB}:interact", {}, "c=1,d=1", "0-3", store=store_path)
    assert report.ok and report.culprit is None
    assert report.details["kind"] == "bisect.no_regression"


def test_unknown_probes_add_seeds_then_say_undecided(store_path):
    # Effect 0.5 with margin 0.5: the CI straddles the criterion however many seeds are added.
    report = bisect(f"{LAB}:interact", "a=1", "a=1,b=1", "0-3", margin=0.5, max_seeds=8, store=store_path)
    cand = probes(report)["candidate"]
    assert cand["decision"] == "UNKNOWN" and cand["n"] == 8
    assert report.details["kind"] == "bisect.undecided" and report.status.value == "WARN"


def test_min_effect_is_the_margin_written_as_for_compare(store_path):
    as_margin = bisect(f"{LAB}:interact", "a=1", "a=1,b=1", "0-3", margin=0.5, max_seeds=4, store=store_path)
    as_effect = bisect(f"{LAB}:interact", "a=1", "a=1,b=1", "0-3", min_effect=0.5, max_seeds=4, store=store_path)
    assert as_effect.details["margin"] == as_margin.details["margin"] == 0.5
    assert [p["decision"] for p in as_effect.details["probes"]] == [p["decision"] for p in as_margin.details["probes"]]
    assert as_effect.details["min_effect"] == "0.5" and "(min effect 0.5)" in str(as_effect)
    default = bisect(f"{LAB}:interact", "a=1", "a=1,b=1", "0-3", max_seeds=4, store=store_path)
    half = bisect(f"{LAB}:interact", "a=1", "a=1,b=1", "0-3", min_effect="0.5x", max_seeds=4, store=store_path)
    assert half.details["margin"] == pytest.approx(default.details["margin"] / 2)  # default: 1x the noise floor
    assert default.details["min_effect"] is None and default.details["margin"] > 0


@pytest.mark.parametrize("kwargs,match", [
    ({"base": {}, "candidate": "b=1", "margin": 0.1, "min_effect": "0.5x"}, "not both"),
    ({"base": {}, "candidate": "b=1", "min_effect": "big"}, "min_effect"),
    ({"base": "a=1", "candidate": "a=1"}, "identical"),
    ({"base": {}, "candidate": "b=1", "order": "zz"}, "does not change"),
    ({"base": {}, "candidate": "b=1", "seeds": "0"}, "at least 2 seeds"),
    ({"base": {}, "candidate": "q=1"}, "Unknown config key 'q'"),
    ({"base": {}, "candidate": "missing.json"}, "does not exist"),
])
def test_bad_input(kwargs, match, store_path):
    with pytest.raises(InvalidArgument, match=match):
        bisect(f"{LAB}:interact", **{"seeds": "0-3", **kwargs}, store=store_path)
    assert not store_path.exists()


def test_configs_from_json_and_yaml_files(tmp_path, store_path):
    (tmp_path / "base.yaml").write_text("a: 1\n")
    (tmp_path / "cand.json").write_text(json.dumps({"a": 1, "c": 1, "b": 1}))
    report = bisect(f"{LAB}:interact", str(tmp_path / "base.yaml"), str(tmp_path / "cand.json"), "0-3", store=store_path)
    assert report.culprit == "b"


def test_cli_prints_the_probe_table_and_json(cli, tmp_path, store_path):
    args = ["bisect", f"{LAB}:interact", "--base", "a=1", "--candidate", "a=1,c=1,b=1", "--seeds", "0-3", "--store", store_path]
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "CULPRIT b (0 -> 1)" in proc.stdout and "alone-b" in proc.stdout and "DIFFERENT" in proc.stdout
    data = json.loads(cli(*args, "--json", cwd=tmp_path).stdout)["payload"]
    assert data["details"]["culprit"] == "b" and data["first_divergence"]["where"] == "b"
    bad = cli("bisect", f"{LAB}:interact", "--candidate", "zz=1", "--store", tmp_path / "x.db", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "zz" in bad.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.quality
def test_builtin_mlp_six_changes_names_lr(store_path):
    report = firstdiv.bisect("builtin:mlp", {}, "optimizer=adam,weight_decay=0.005,dropout=0.35,lr=0.2,hidden=28,epochs=18",
                             "0-7", store=store_path)
    assert report.culprit == "lr"
    assert report.first_divergence.kind == "bisect.culprit"
    p = probes(report)
    assert p["alone-lr"]["decision"] == "DIFFERENT" and p["revert-lr"]["decision"] == "SAME"
    assert p["candidate"]["mean_delta"] > 10 * report.details["margin"] / 2
