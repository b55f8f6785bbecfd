"""The calibrated policy gate (chapter 14, E10): the conformal threshold and its false-alarm bound,
held-out validation, the gate file, checks of one and many runs, the CLI and the pytest plugin."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _paths import WORKLOADS
from scipy import stats

import firstdiv
from firstdiv import Gate, InvalidArgument, NotFound
from firstdiv.lab.gate import GATE_VERSION, conformal_rank, conformal_threshold, false_alarm_rate, seeds_needed
from firstdiv.lab.store import Store
from firstdiv.lab.sweep import sweep

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, tiny):
    """A gate on the tiny workload: 20 calibration seeds, 20 held-out seeds, alpha 0.05."""
    store = tmp_path_factory.mktemp("gate") / "runs.db"
    result = sweep(f"{tiny}:train", "0-19", store=store, name="base")
    return Gate.calibrate(result, alpha=0.05, holdout="20-39"), result, store


@pytest.fixture(scope="module")
def tiny():
    """The tests' tiny workload file (conftest's fixture of the same name, at module scope)."""
    return str(WORKLOADS / "tiny.py")


# -- the rule, by hand ----------------------------------------------------------------------------

def test_conformal_rank_by_hand():
    assert conformal_rank(19, 0.05) == 19  # ceil(20 * 0.95) = 19: the largest of 19
    assert conformal_rank(20, 0.05) == 20  # ceil(21 * 0.95) = ceil(19.95)
    assert conformal_rank(20, 0.10) == 19  # ceil(21 * 0.9) = ceil(18.9)
    assert conformal_rank(8, 0.10) == 9  # too few: more than the 8 values, 1/alpha - 1 = 9 needed
    assert [seeds_needed(a) for a in (0.05, 0.1, 0.2, 0.3, 0.5)] == [19, 9, 4, 3, 1]


def test_conformal_threshold_by_hand():
    values = [7.0, 3.0, 19.0, 1.0, 12.0, 5.0, 20.0, 9.0, 2.0, 14.0, 6.0, 18.0, 4.0, 11.0, 16.0, 8.0, 13.0, 10.0,
              17.0, 15.0]  # 1..20 shuffled
    assert conformal_threshold(values, 0.1) == (19.0, 19)  # 19th smallest
    assert conformal_threshold(values, 0.1, higher_is_better=True) == (2.0, 19)  # 19th largest
    assert conformal_threshold(values, 0.05) == (20.0, 20)
    assert conformal_threshold(values[:9], 0.1) == (20.0, 9)  # n = 9 = 1/alpha - 1: the largest of the nine
    assert conformal_threshold(values[9:18], 0.1) == (18.0, 9)


def test_guarantee_holds_on_synthetic_calibrations():
    """Many calibrations from a seeded generator: fresh healthy draws fail at most alpha of the time,
    and not far below the rule's exact rate (n+1-rank)/(n+1) (the bound is tight, not vacuous)."""
    rng = np.random.default_rng(20240514)
    draw = {"normal": lambda size: rng.normal(1.0, 0.02, size),
            "exponential": lambda size: rng.exponential(1.0, size),
            "lognormal": lambda size: rng.lognormal(0.0, 1.0, size)}
    for (n, alpha, dist, hib) in [(19, 0.05, "normal", False), (30, 0.10, "exponential", False),
                                  (45, 0.05, "lognormal", True)]:
        trials, fresh = 3000, 40
        rates = np.empty(trials)
        for t in range(trials):
            thr, rank = conformal_threshold(draw[dist](n), alpha, higher_is_better=hib)
            new = draw[dist](fresh)
            rates[t] = np.mean(new < thr if hib else new > thr)
        exact = (n + 1 - rank) / (n + 1)
        assert rates.mean() <= alpha + 0.006, (n, alpha, dist, rates.mean())
        assert abs(rates.mean() - exact) < 0.006, (n, alpha, dist, rates.mean(), exact)


def test_too_few_seeds_says_how_many_and_the_smallest_alpha():
    with pytest.raises(InvalidArgument, match=r"at least 19 calibration seeds .*got 12.*alpha >= 0\.0770"):
        conformal_threshold(np.linspace(0, 1, 12), 0.05)
    with pytest.raises(InvalidArgument, match=r"alpha in \(0, 1\)"):
        conformal_threshold([1.0, 2.0], 1.5)
    with pytest.raises(InvalidArgument, match="NaN or infinite"):
        conformal_threshold([1.0] * 18 + [math.nan], 0.05)


def test_too_few_seeds_from_a_sweep(calibrated):
    _, result, _ = calibrated
    with pytest.raises(InvalidArgument, match=r"at least 99 calibration seeds.*got 20.*alpha >= 0\.0477"):
        Gate.calibrate(result, alpha=0.01)


def test_false_alarm_interval_is_scipys_exact_interval():
    out = false_alarm_rate(3, 40, 0.05)
    ci = stats.binomtest(3, 40).proportion_ci(confidence_level=0.95, method="exact")
    assert (out["ci_low"], out["ci_high"]) == (ci.low, ci.high)
    assert out["ci_low"] <= out["rate"] == 3 / 40 <= out["ci_high"]
    assert out["p_value"] == stats.binomtest(3, 40, 0.05, alternative="greater").pvalue
    assert out["consistent"] == (out["p_value"] > 0.05)
    assert false_alarm_rate(0, 20, 0.05)["ci_low"] == 0.0


# -- calibration on runs ---------------------------------------------------------------------------

def test_calibrate_on_a_sweep_with_held_out_seeds(calibrated):
    gate, result, _ = calibrated
    values = result.values("val_loss")
    assert gate.n == 20 and gate.rank == 20 and gate.threshold == max(values)
    assert gate.calibration_seeds == tuple(range(20)) and list(gate.calibration_values) == values
    first = result.records[0]
    assert (gate.workload, gate.config_hash, gate.eval_fingerprint, gate.env_hash) == (
        first.workload, first.config_hash, first.eval_fingerprint, first.env_hash)
    assert gate.code_version == first.code["version"] and gate.config == first.config
    h = gate.holdout
    assert h["seeds"] == list(range(20, 40)) and h["n"] == 20
    assert h["false_alarms"] == sum(v > gate.threshold for v in h["values"])
    ci = stats.binomtest(h["false_alarms"], 20).proportion_ci(method="exact")
    assert (h["ci_low"], h["ci_high"]) == (ci.low, ci.high) and h["ci_low"] <= h["rate"] <= h["ci_high"]
    assert gate.calibrated == (h["p_value"] > 0.05)
    text = str(gate)
    for part in ("threshold = the 20th smallest of n=20", "probability <= 0.05", "held-out healthy seeds (20-39)",
                 "95% CI"):
        assert part in text, text


def test_calibrate_by_name_and_against_a_held_out_sweep(calibrated):
    gate, _, store = calibrated
    with Store(store) as st:
        by_name = Gate.calibrate("base", alpha=0.05, holdout="base-holdout", store=st)
        held = st.records(st.find_sweep("base-holdout"))
        base = st.records(st.find_sweep("base"))
    assert by_name.threshold == gate.threshold and by_name.calibration_sweep == "base"
    assert by_name.holdout["seeds"] == list(range(20, 40)) and by_name.holdout["sweep"] == "base-holdout"
    from_records = Gate.calibrate(base, alpha=0.05, holdout=held)
    assert from_records.threshold == gate.threshold and from_records.calibration_sweep is None
    assert from_records.holdout["false_alarms"] == gate.holdout["false_alarms"]


def test_holdout_overlapping_calibration_seeds_is_refused_before_running(calibrated):
    _, result, store = calibrated
    with pytest.raises(InvalidArgument, match=r"Held-out seeds 15-19 were also used to calibrate.*e\.g\. 20-39"):
        Gate.calibrate(result, holdout="15-30")
    with pytest.raises(InvalidArgument, match="Held-out seeds 3 were also used"):
        Gate.calibrate(result, holdout=list(result.records[3:4]))
    with Store(store) as st:
        assert [s.name for s in st.sweeps()].count("base-holdout") == 1  # nothing new ran


def test_calibration_refuses_mixed_measurements(calibrated, tiny):
    _, result, store = calibrated
    other = sweep(f"{tiny}:train", "20-21", config={"eval_split": "test"}, store=store)
    with pytest.raises(InvalidArgument, match="mixes 2 eval fingerprints"):
        Gate.calibrate(list(result.records) + list(other.records), alpha=0.1)
    with pytest.raises(InvalidArgument, match="held-out runs have eval fingerprint"):
        Gate.calibrate(result, holdout=other)


# -- the gate file ---------------------------------------------------------------------------------

def test_save_load_round_trip(calibrated, tmp_path):
    gate, _, _ = calibrated
    path = gate.save(tmp_path / "gate.json")
    data = json.loads(path.read_text())
    assert data["format"] == "firstdiv.gate" and data["version"] == GATE_VERSION
    loaded = Gate.load(path)
    assert loaded == gate and isinstance(loaded.calibration_seeds, tuple)
    assert loaded.check(gate.threshold).to_dict() == gate.check(gate.threshold).to_dict()


@pytest.mark.parametrize("edit, message", [
    (lambda d: {**d, "version": GATE_VERSION + 1},
     f"gate format version {GATE_VERSION + 1}, newer than this firstdiv's {GATE_VERSION}"),
    (lambda d: {**d, "version": "one"}, "no valid gate format version"),
    (lambda d: {k: v for k, v in d.items() if k != "threshold"}, "is missing threshold"),
    (lambda d: {**d, "format": "other"}, "is not a firstdiv gate file"),
    (lambda d: [1, 2], "is not a firstdiv gate file"),
    (lambda d: {**d, "threshold": d["threshold"] + 1}, "does not follow from its calibration values"),
    (lambda d: {**d, "alpha": 2}, "malformed"),
    (lambda d: {**d, "calibration_values": ["x"] * 20}, "field 'calibration_values' should be a list of numbers"),
])
def test_bad_gate_files_name_the_file(calibrated, tmp_path, edit, message):
    gate, _, _ = calibrated
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(edit(gate.to_dict())))
    with pytest.raises(InvalidArgument, match=message) as err:
        Gate.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_unreadable_or_missing_gate_file(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="garbage.json is not a firstdiv gate file"):
        Gate.load(tmp_path / "garbage.json")
    with pytest.raises(NotFound, match="No gate file at .*nope.json.*firstdiv gate calibrate"):
        Gate.load(tmp_path / "nope.json")


# -- checks -----------------------------------------------------------------------------------------

def test_check_one_value_pass_fail_and_margin(calibrated):
    gate, _, _ = calibrated
    thr = gate.threshold
    ok = gate.check(thr - 0.0125)
    assert ok.ok and ok.instrument == "gate" and ok.margin == pytest.approx(0.0125)
    assert "pass=True" in str(ok) and "margin +0.0125" in str(ok)
    edge = gate.check(thr)
    assert edge.ok and edge.margin == 0.0  # the threshold itself passes: fail means worse than it
    bad = gate.check(thr + 0.333)
    assert not bad.ok and bad.margin == pytest.approx(-0.333)
    div = bad.first_divergence
    assert (div.where, div.kind, div.expected) == ("val_loss", "gate.exceeded", f"<= {thr:.6g}")
    assert div.observed == pytest.approx(thr + 0.333) and "margin -0.333" in div.hint
    diverged = gate.check(float("nan"))
    assert not diverged.ok and diverged.margin is None  # a diverged run never passes
    assert type(firstdiv.Report.from_dict(bad.to_dict())).__name__ == "GateCheck"


def test_check_higher_is_better_is_mirrored(calibrated):
    _, result, _ = calibrated
    gate = Gate.calibrate(result, metric="val_acc", alpha=0.1)  # tiny's val_acc: 0.5 at every seed
    assert gate.higher_is_better and gate.threshold == 0.5 and gate.op == ">="
    assert gate.check(0.6).ok and gate.check(0.6).margin == pytest.approx(0.1)
    assert not gate.check(0.4).ok and gate.check(0.4).first_divergence.expected == ">= 0.5"


@pytest.mark.parametrize("k, fails", [(0, False), (1, False), (3, False), (4, True), (20, True)])
def test_check_many_values_uses_the_binomial_rule(calibrated, k, fails):
    gate, _, _ = calibrated
    values = [gate.threshold + 0.01] * k + [gate.threshold - 0.01] * (20 - k)
    report = gate.check(values)
    p = stats.binomtest(k, 20, 0.05, alternative="greater").pvalue
    assert report.details["p_value"] == p and report.details["exceeded"] == k
    assert report.ok == (not fails) and bool(p <= 0.05) == fails
    assert report.status.value == ("FAIL" if fails else "WARN" if k else "PASS")
    if fails:
        assert report.first_divergence.observed.startswith(f"{k}/20 runs over the threshold")


def test_check_with_a_min_effect_fails_only_regressions_larger_than_it(calibrated):
    gate, _, _ = calibrated
    median = float(np.median(gate.calibration_values))
    small = gate.threshold + 0.01  # over the calibrated threshold, by little
    assert not gate.check(small).ok
    x = small - median + 0.05  # the min effect reaches past that run
    check = gate.check(small, min_effect=x)
    e = check.details["min_effect"]
    assert check.ok and e["threshold"] == pytest.approx(median + x) and e["decides"]
    assert e["calibrated_threshold"] == gate.threshold and "min effect" in str(check)
    assert not gate.check(median + x + 0.01, min_effect=x).ok  # a larger regression still fails
    # a min effect inside the calibrated threshold changes nothing: the false-alarm bound holds either way
    tiny_effect = gate.check(small, min_effect="0.01x")
    assert not tiny_effect.ok and tiny_effect.details["min_effect"]["threshold"] == gate.threshold
    spread = max(gate.calibration_values) - min(gate.calibration_values)
    assert gate.check(small, min_effect="3x").details["min_effect"]["value"] == pytest.approx(3 * spread)
    assert gate.check(small).details["min_effect"] is None
    with pytest.raises(InvalidArgument, match="min_effect"):
        gate.check(small, min_effect="-1")


def test_check_runs_and_sweeps(calibrated, tiny):
    gate, _, store = calibrated
    healthy = sweep(f"{tiny}:train", "999", config=gate.config, store=store)
    report = gate.check(healthy)
    assert report.details["measurement"]["state"] == "SAME"
    assert report.details["runs"][0]["label"] == "seed 999"
    assert report.ok == (healthy.records[0].final["val_loss"] <= gate.threshold)
    shifted = sweep(f"{tiny}:train", "1000-1019", config={**gate.config, "shift": 0.5}, store=store)
    bad = gate.check(shifted)
    assert not bad.ok and bad.details["exceeded"] == 20 and bad.first_divergence.kind == "gate.exceeded"


def test_changed_eval_fingerprint_fails_as_measurement_changed(calibrated, tiny):
    gate, _, store = calibrated
    moved = sweep(f"{tiny}:train", "999", config={**gate.config, "eval_split": "test"}, store=store)
    assert moved.records[0].final["val_loss"] <= gate.threshold + 1  # the value alone would not decide it
    report = gate.check(moved.records)
    assert not report.ok
    div = report.first_divergence
    assert (div.where, div.kind, div.expected) == ("eval_fingerprint", "measurement.changed", gate.eval_fingerprint)
    assert div.observed == moved.records[0].eval_fingerprint and "split" in div.hint


def test_check_bad_input(calibrated):
    gate, _, _ = calibrated
    for bad in ([], "1.0", {"val_loss": 1.0}, [1.0, "x"]):
        with pytest.raises(InvalidArgument, match="Expected"):
            gate.check(bad)


# -- command line -----------------------------------------------------------------------------------

def test_cli_check_min_effect(cli, calibrated, tmp_path):
    gate, _, store = calibrated
    gate_file = gate.save(tmp_path / "gate.json")
    sweep(f"{WORKLOADS / 'tiny.py'}:train", "500-503", config={**gate.config, "shift": 0.15}, store=store,
          name="lifted")
    plain = cli("gate", "check", gate_file, "lifted", "--store", store, cwd=tmp_path)
    assert plain.returncode == 1, plain.stdout
    wide = cli("gate", "check", gate_file, "lifted", "--min-effect", "10x", "--store", store, "--json", cwd=tmp_path)
    assert wide.returncode == 0, wide.stdout + wide.stderr
    assert json.loads(wide.stdout)["payload"]["details"]["min_effect"]["spec"] == "10x"
    bad = cli("gate", "check", gate_file, "lifted", "--min-effect", "wide", "--store", store, cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "min_effect" in bad.stderr


def test_cli_calibrate_and_check(cli, tiny, tmp_path, store_path):
    target = f"{tiny}:train"
    sweep(target, "0-19", store=store_path, name="base")
    gate_file = tmp_path / "gate.json"
    proc = cli("gate", "calibrate", "base", "--alpha", "0.05", "--holdout-seeds", "20-39", "-o", gate_file,
               "--store", store_path, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for part in ("val_loss <= ", "20th smallest of n=20", "probability <= 0.05", "/20 held-out healthy seeds",
                 "95% CI", f"wrote {gate_file}"):
        assert part in proc.stdout, proc.stdout
    gate = Gate.load(gate_file)

    proc = cli("gate", "check", gate_file, target, "--store", store_path, "--json", cwd=tmp_path)
    out = json.loads(proc.stdout)["payload"]
    assert proc.returncode == (0 if out["ok"] else 1) and out["details"]["runs"][0]["seed"] == 999

    proc = cli("gate", "check", gate_file, target, "--set", "shift=0.5", "--store", store_path, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pass=False" in proc.stdout and "margin -0.4" in proc.stdout and "gate.exceeded" in proc.stdout

    proc = cli("gate", "check", gate_file, "base", "--store", store_path, cwd=tmp_path)
    assert proc.returncode == 0 and "seed 19" in proc.stdout  # the calibration runs pass their own gate
    assert gate.check(gate.calibration_values).ok


@pytest.mark.parametrize("args, problem", [
    (["check", "{tmp}/missing.json", "base"], "No gate file at"),
    (["calibrate", "base", "--alpha", "0.01", "--holdout-seeds", "20-39", "-o", "{tmp}/g.json"], "at least 99"),
    (["calibrate", "base", "--holdout-seeds", "10-30", "-o", "{tmp}/g.json"], "Held-out seeds 10-19"),
    (["calibrate", "base", "--holdout-seeds", "x-y", "-o", "{tmp}/g.json"], "'x-y'"),
    (["calibrate", "nosuch", "--holdout-seeds", "20-39", "-o", "{tmp}/g.json"], "No sweep named 'nosuch'"),
    (["check", "{tmp}/garbage.json", "base"], "is not a firstdiv gate file"),
    (["check", "{tmp}/gate.json", "neither-sweep-nor-target"], "neither a stored sweep nor a workload target"),
])
def test_cli_bad_input_exits_2_with_one_line(cli, tmp_path, calibrated, args, problem):
    gate, _, store_path = calibrated  # its store holds the sweep "base"
    gate.save(tmp_path / "gate.json")
    (tmp_path / "garbage.json").write_text("[")
    proc = cli("gate", *[a.format(tmp=tmp_path) for a in args], "--store", store_path, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.splitlines()) == 1 and problem in proc.stderr and not proc.stdout.strip()
    assert not (tmp_path / "g.json").exists()


# -- pytest plugin ----------------------------------------------------------------------------------

def test_pytest_plugin_gates_a_test(pytester, calibrated):
    gate, _, _ = calibrated
    gate.save(pytester.path / "gate.json")
    pytester.makepyfile(f"""
        from firstdiv import Gate

        def test_healthy(firstdiv_gate):
            report = firstdiv_gate("gate.json", {gate.threshold - 0.01!r})
            assert report.ok

        def test_regressed(firstdiv_gate):
            firstdiv_gate(Gate.load("gate.json"), [{gate.threshold + 0.25!r}])
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_regressed*", "*gate.exceeded*", "*margin -0.25*"])


# -- chapter 14's E10 on the built-in workload ------------------------------------------------------

@pytest.mark.quality
def test_builtin_mlp_gate_passes_healthy_and_fails_lr_x10(tmp_path):
    """E10 on builtin:mlp at alpha 0.05: calibrate on 20 seeds, validate on 20 held-out seeds; lr x10
    fails by far more than seed noise; a new healthy seed passes a gate that passed validation.

    The rule's 5% is an average over calibration draws; one draw of 20 seeds can set the threshold
    low, and then the held-out seeds say so. Seeds 0-19 are such a draw here (their maximum sits near
    the 75th percentile of seeds 0-99, 8/20 held-out seeds exceed it). The declared remedy, applied
    only when validation fails: recalibrate on calibration + held-out seeds, validate on fresh seeds.
    """
    store = tmp_path / "runs.db"
    gate = Gate.calibrate(sweep("builtin:mlp", "0-19", store=store, name="mlp-base"), alpha=0.05, holdout="20-39")
    h = gate.holdout
    assert gate.rank == 20 and h["n"] == 20 and h["ci_low"] <= h["rate"] <= h["ci_high"]
    healthy_run = sweep("builtin:mlp", "999", config=gate.config, store=store)
    lr10_run = sweep("builtin:mlp", "999", config={**gate.config, "lr": 0.2}, store=store)
    lines = [(f"0-19 | 20-39: threshold {gate.threshold:.4f} held-out {h['false_alarms']}/20 "
              f"[{h['ci_low']:.3f}, {h['ci_high']:.3f}] p={h['p_value']:.3g}; seed 999 healthy margin "
              f"{gate.check(healthy_run).margin:+.4f}, lr x10 margin {gate.check(lr10_run).margin:+.4f}")]
    assert gate.check(lr10_run).margin < -0.2 and gate.check(lr10_run).first_divergence.kind == "gate.exceeded"
    if not gate.calibrated:
        gate = Gate.calibrate(sweep("builtin:mlp", "0-39", store=store, name="mlp-base-40"), alpha=0.05,
                              holdout="40-59")
        h = gate.holdout
        lines.append(f"0-39 | 40-59: threshold {gate.threshold:.4f} held-out {h['false_alarms']}/20 "
                     f"[{h['ci_low']:.3f}, {h['ci_high']:.3f}] p={h['p_value']:.3g}")
    healthy, lr10 = gate.check(healthy_run), gate.check(lr10_run)
    print("\n" + "\n".join(lines) + f"\nvalidated gate: seed 999 healthy margin {healthy.margin:+.4f}, "
          f"lr x10 margin {lr10.margin:+.4f}")
    assert gate.calibrated
    assert healthy.ok and healthy.margin > 0 and "pass=True" in str(healthy)
    assert not lr10.ok and lr10.margin < -0.2 and "pass=False" in str(lr10)
