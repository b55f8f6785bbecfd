"""Statistics cross-checked on fixed data: firstdiv.lab.stats, firstdiv.compare, the criteria grammar.

Reference values come from textbook formulas computed here with numpy (t and Welch by hand), from
scipy's own tests on the same data, from exact small-sample distributions, and from published
sample-size tables (Cohen 1988).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from _paths import WORKLOADS
from scipy import stats as sps

import firstdiv
from firstdiv import InvalidArgument
from firstdiv.lab import stats
from firstdiv.lab.criteria import MET, NOT_MET, UNRESOLVED, Criterion, grade, parse_criterion

BASE = [0.912, 0.874, 0.951, 0.899, 0.930, 0.887, 0.905, 0.941, 0.868, 0.923]
CAND = [0.931, 0.880, 0.949, 0.925, 0.951, 0.902, 0.907, 0.968, 0.891, 0.930]


# --------------------------------------------------------------------------------------------
# describe


def test_describe_matches_hand_computed_summary():
    s = stats.describe([3.0, 1.0, 4.0, 1.0, 5.0])
    # mean 2.8; squared deviations .04 + 3.24 + 1.44 + 3.24 + 4.84 = 12.8; / (n-1) = 3.2
    assert s["n"] == 5
    assert s["median"] == 3.0
    assert s["mean"] == pytest.approx(2.8)
    assert s["stdev"] == pytest.approx(math.sqrt(3.2))
    assert (s["min"], s["max"], s["spread"]) == (1.0, 5.0, 4.0)


def test_describe_even_count_single_value_and_empty():
    assert stats.describe([10.0, 1.0, 3.0, 2.0])["median"] == 2.5
    one = stats.describe([0.7])
    assert one["n"] == 1 and one["stdev"] == 0.0 and one["spread"] == 0.0 and one["median"] == 0.7
    assert stats.describe([]) == {"n": 0}


# --------------------------------------------------------------------------------------------
# paired


def _hand_paired_t(base, cand, confidence=0.95):
    d = np.asarray(cand, float) - np.asarray(base, float)
    n = d.size
    mean = d.sum() / n
    sd = math.sqrt(((d - mean) ** 2).sum() / (n - 1))
    se = sd / math.sqrt(n)
    t = mean / se
    p = 2 * sps.t.sf(abs(t), n - 1)
    half = sps.t.ppf(0.5 + confidence / 2, n - 1) * se
    return mean, sd, t, p, mean - half, mean + half


def test_paired_t_statistic_p_and_ci_match_textbook_formulas():
    out = stats.paired(BASE, CAND)
    mean, sd, t, p, lo, hi = _hand_paired_t(BASE, CAND)
    assert out["n"] == 10
    assert out["deltas"] == pytest.approx(list(np.subtract(CAND, BASE)))
    assert out["mean_delta"] == pytest.approx(mean)
    assert out["stdev_delta"] == pytest.approx(sd)
    assert out["t_stat"] == pytest.approx(t)
    assert out["p_value"] == pytest.approx(p)
    assert out["ci_low"] == pytest.approx(lo)
    assert out["ci_high"] == pytest.approx(hi)
    # the 97.5% t quantile at 9 df is 2.262157 in every table: the half-width is not a z interval
    assert (out["ci_high"] - out["ci_low"]) / 2 == pytest.approx(2.262157 * sd / math.sqrt(10), rel=1e-5)
    assert out["test"] == "paired t"


def test_paired_confidence_level_changes_interval_width():
    c95 = stats.paired(BASE, CAND)
    c99 = stats.paired(BASE, CAND, confidence=0.99)
    _, _, _, _, lo, hi = _hand_paired_t(BASE, CAND, confidence=0.99)
    assert (c99["ci_low"], c99["ci_high"]) == pytest.approx((lo, hi))
    assert c99["ci_low"] < c95["ci_low"] and c99["ci_high"] > c95["ci_high"]
    assert c99["p_value"] == pytest.approx(c95["p_value"])


def test_paired_wilcoxon_matches_scipy_on_the_same_data():
    out = stats.paired(BASE, CAND)
    assert out["wilcoxon_p"] == pytest.approx(sps.wilcoxon(CAND, BASE).pvalue)
    assert out["wilcoxon_p"] == pytest.approx(sps.wilcoxon(np.subtract(CAND, BASE)).pvalue)


@pytest.mark.parametrize("n", [5, 6, 8])
def test_paired_wilcoxon_exact_small_sample_value(n):
    # every delta positive and distinct: the exact two-sided p is 2 / 2**n (one extreme of 2**n sign patterns)
    base = [float(i) for i in range(n)]
    cand = [b + 0.1 * (i + 1) for i, b in enumerate(base)]
    out = stats.paired(base, cand)
    assert out["wilcoxon_p"] == pytest.approx(2 / 2 ** n)


def test_paired_counts_worse_and_better_by_metric_direction():
    base = [1.0, 1.0, 1.0, 1.0, 1.0]
    cand = [2.0, -1.0, 1.0, 4.0, 0.5]  # deltas +1, -2, 0, +3, -0.5
    lower = stats.paired(base, cand, higher_is_better=False)
    assert (lower["worse"], lower["better"], lower["ties"]) == (2, 2, 1)
    cand2 = [2.0, -1.0, 1.0, 4.0, 3.0]  # deltas +1, -2, 0, +3, +2
    lower = stats.paired(base, cand2)
    higher = stats.paired(base, cand2, higher_is_better=True)
    assert (lower["worse"], lower["better"], lower["ties"]) == (3, 1, 1)
    assert (higher["worse"], higher["better"], higher["ties"]) == (1, 3, 1)
    # direction changes the counts, never the test
    assert lower["p_value"] == higher["p_value"] and lower["mean_delta"] == higher["mean_delta"]


def test_paired_all_zero_deltas_is_no_difference():
    out = stats.paired([1.0, 2.0, 3.5], [1.0, 2.0, 3.5])
    assert out["p_value"] == 1.0
    assert out["wilcoxon_p"] == 1.0
    assert (out["ci_low"], out["ci_high"]) == (0.0, 0.0)
    assert out["ties"] == 3 and out["worse"] == 0 and out["better"] == 0


def test_paired_constant_nonzero_shift_is_a_difference_with_zero_spread():
    out = stats.paired([1.0, 2.0, 3.0, 4.0], [1.25, 2.25, 3.25, 4.25])
    assert out["p_value"] == 0.0
    assert (out["ci_low"], out["ci_high"]) == (0.25, 0.25)
    assert out["mean_delta"] == 0.25 and out["stdev_delta"] == 0.0
    assert out["worse"] == 4


def test_paired_one_seed_gives_no_test_and_mismatched_lengths_raise():
    out = stats.paired([1.0], [2.0])
    assert out["n"] == 1 and out["p_value"] is None and out["ci_low"] is None
    with pytest.raises(ValueError):
        stats.paired([1.0, 2.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("k", range(60))
def test_paired_invariants_on_random_inputs(k):
    rng = np.random.default_rng(k)
    n = int(rng.integers(2, 30))
    base = rng.normal(1.0, 0.1, size=n)
    cand = base + rng.normal(rng.normal(0, 0.05), rng.uniform(0.001, 0.2), size=n)
    out = stats.paired(base, cand, higher_is_better=bool(k % 2))
    assert out["ci_low"] <= out["mean_delta"] <= out["ci_high"]
    assert 0.0 <= out["p_value"] <= 1.0 and 0.0 <= out["wilcoxon_p"] <= 1.0
    assert out["worse"] + out["better"] + out["ties"] == n
    # duality of the t test and its interval: 0 lies outside the 95% CI exactly when p < 0.05
    if abs(out["p_value"] - 0.05) > 1e-9:
        assert (out["ci_low"] > 0 or out["ci_high"] < 0) == (out["p_value"] < 0.05)
    wide = stats.paired(base, cand, confidence=0.99)
    assert wide["ci_low"] <= out["ci_low"] and out["ci_high"] <= wide["ci_high"]


# --------------------------------------------------------------------------------------------
# unpaired


UB = [0.91, 0.87, 0.95, 0.90, 0.93, 0.89, 0.92]
UC = [0.97, 0.99, 0.94, 1.02, 0.96, 1.05, 0.93, 0.98, 1.01]


def test_unpaired_welch_matches_welch_satterthwaite_by_hand():
    out = stats.unpaired(UB, UC, rng=np.random.default_rng(0))
    b, c = np.asarray(UB), np.asarray(UC)
    vb, vc = b.var(ddof=1) / b.size, c.var(ddof=1) / c.size
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb ** 2 / (b.size - 1) + vc ** 2 / (c.size - 1))
    diff = c.mean() - b.mean()
    t = diff / se
    p = 2 * sps.t.sf(abs(t), df)
    half = sps.t.ppf(0.975, df) * se
    assert out["n_base"] == 7 and out["n_cand"] == 9
    assert out["mean_delta"] == pytest.approx(diff)
    assert out["median_delta"] == pytest.approx(np.median(c) - np.median(b))
    assert out["p_value"] == pytest.approx(p)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((diff - half, diff + half))


def test_unpaired_mann_whitney_matches_scipy_and_exact_value():
    out = stats.unpaired(UB, UC, rng=np.random.default_rng(0))
    assert out["mannwhitney_p"] == pytest.approx(sps.mannwhitneyu(UC, UB, alternative="two-sided").pvalue)
    # complete separation of 4 vs 4: exact two-sided p = 2 / C(8, 4) = 2/70
    sep = stats.unpaired([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], rng=np.random.default_rng(0))
    assert sep["mannwhitney_p"] == pytest.approx(2 / 70)


def test_unpaired_bootstrap_is_reproducible_uses_the_generator_and_contains_the_estimate():
    a = stats.unpaired(UB, UC, rng=np.random.default_rng(123))
    np.random.seed(999)  # the global RNG must not matter
    b = stats.unpaired(UB, UC, rng=np.random.default_rng(123))
    assert (a["median_ci_low"], a["median_ci_high"]) == (b["median_ci_low"], b["median_ci_high"])
    assert a["median_ci_low"] <= a["median_delta"] <= a["median_ci_high"]
    assert a["median_ci_low"] < a["median_ci_high"]
    gen = np.random.default_rng(5)
    before = gen.bit_generator.state
    stats.unpaired(UB, UC, rng=gen)
    assert gen.bit_generator.state != before, "the bootstrap must draw from the Generator it was given"


def test_unpaired_constant_samples_and_too_few_values():
    same = stats.unpaired([2.0, 2.0, 2.0], [2.0, 2.0], rng=np.random.default_rng(0))
    assert same["p_value"] == 1.0 and same["mean_delta"] == 0.0
    diff = stats.unpaired([2.0, 2.0, 2.0], [3.0, 3.0], rng=np.random.default_rng(0))
    assert diff["p_value"] == 0.0 and (diff["ci_low"], diff["ci_high"]) == (1.0, 1.0)
    few = stats.unpaired([1.0], [2.0, 3.0], rng=np.random.default_rng(0))
    assert few["p_value"] is None and few["mean_delta"] == pytest.approx(1.5)


# --------------------------------------------------------------------------------------------
# seeds_to_resolve


@pytest.mark.parametrize("d, paired_design, expected", [
    (0.5, True, 34),    # one-sample/paired t, d = 0.5, alpha .05 two-sided, power .8
    (0.5, False, 64),   # two-sample t, per group (Cohen's table)
    (0.8, False, 26),
    (0.2, False, 394),
])
def test_seeds_to_resolve_matches_textbook_sample_sizes(d, paired_design, expected):
    assert stats.seeds_to_resolve(d, 1.0, paired_design=paired_design) == expected
    # scale-free: delta and sd enter only through their ratio, and the sign does not matter
    assert stats.seeds_to_resolve(-d * 0.01, 0.01, paired_design=paired_design) == expected


def test_seeds_to_resolve_is_monotone_and_near_the_normal_approximation():
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    effects = [0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5]
    for paired_design, factor in ((True, 1), (False, 2)):
        ns = [stats.seeds_to_resolve(d, 1.0, paired_design=paired_design) for d in effects]
        assert all(a >= b for a, b in itertools.pairwise(ns)), ns
        assert ns[0] > ns[-1]
        for d, n in zip(effects, ns):
            approx = factor * (z / d) ** 2  # the t test needs a little more than the z approximation
            assert approx <= n <= approx + 3, (d, n, approx)
    for d in effects:  # pairing (sd of deltas) needs fewer seeds than two independent groups
        assert stats.seeds_to_resolve(d, 1.0, paired_design=True) < stats.seeds_to_resolve(d, 1.0, paired_design=False)


def test_seeds_to_resolve_reaches_power_at_n_and_not_at_n_minus_one():
    n = stats.seeds_to_resolve(0.5, 1.0, paired_design=True)
    def power(m):
        df, nc = m - 1, 0.5 * math.sqrt(m)
        crit = sps.t.ppf(0.975, df)
        return sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)
    assert power(n) >= 0.8 > power(n - 1)


def test_seeds_to_resolve_edge_cases():
    assert stats.seeds_to_resolve(0.0, 1.0, paired_design=True) is None
    assert stats.seeds_to_resolve(float("nan"), 1.0, paired_design=True) is None
    assert stats.seeds_to_resolve(1e-4, 1.0, paired_design=True) is None  # beyond max_n
    assert stats.seeds_to_resolve(0.3, 0.0, paired_design=True) == 2       # no spread: two seeds show it


def test_seeds_to_resolve_nan_sd_is_not_two_seeds():
    assert stats.seeds_to_resolve(0.5, float("nan"), paired_design=True) is None


# --------------------------------------------------------------------------------------------
# compare on real run records of the tiny workload


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):

    target = str(WORKLOADS / "tiny.py") + ":train"
    store = tmp_path_factory.mktemp("cmp") / "runs.db"
    seeds = "0-5"
    out = {
        "base": firstdiv.sweep(target, seeds, name="base", store=store),
        "same": firstdiv.sweep(target, seeds, name="same", store=store),
        "shift": firstdiv.sweep(target, seeds, sets=["shift=0.5"], name="shift", store=store),
        "better": firstdiv.sweep(target, seeds, sets=["shift=-0.5"], name="better", store=store),
        "evaltest": firstdiv.sweep(target, seeds, sets=["eval_split=test"], name="evaltest", store=store),
        "eval_and_shift": firstdiv.sweep(target, seeds, sets=["eval_split=test", "shift=0.5"], name="eval_and_shift",
                                         store=store),
        "disjoint": firstdiv.sweep(target, "10-15", name="disjoint", store=store),
    }
    out["store"] = store
    return out


def _cmp(a, b, **kw):
    with warnings.catch_warnings():
        # shift=0.5 deltas are 0.5 up to rounding: scipy warns about the near-zero variance
        warnings.simplefilter("ignore", RuntimeWarning)
        return firstdiv.compare(a, b, **kw)


def test_identical_sweeps_are_not_resolved(sweeps):
    assert sweeps["same"].ran == () and sweeps["same"].reused == (0, 1, 2, 3, 4, 5)
    c = _cmp(list(sweeps["base"].records), list(sweeps["same"].records))
    assert c.verdict == "NOT_RESOLVED" and c.direction is None
    assert set(c.identity.values()) == {"SAME"}
    assert c.details["design"] == "paired" and c.details["shared_seeds"] == [0, 1, 2, 3, 4, 5]
    assert c.paired["p_value"] == 1.0 and c.paired["ties"] == 6
    assert c.details["seeds_to_resolve"] is None
    assert c.ok and c.first_divergence is None


def test_shift_is_a_system_change_for_the_worse_with_config_changed(sweeps):
    c = _cmp(list(sweeps["base"].records), list(sweeps["shift"].records))
    assert c.verdict == "SYSTEM_CHANGED" and c.direction == "worse"
    assert c.identity == {"config": "CHANGED", "eval_fingerprint": "SAME", "env": "SAME", "code": "SAME",
                          "data": "SAME"}
    assert c.details["identity_detail"]["config"]["fields"] == {"shift": [0.0, 0.5]}
    p = c.paired
    assert set(p) >= {"n", "deltas", "mean_delta", "stdev_delta", "worse", "better", "ties", "t_stat", "p_value",
                      "ci_low", "ci_high", "wilcoxon_p", "confidence", "test"}
    assert p["n"] == 6 and p["worse"] == 6 and p["better"] == 0
    assert p["mean_delta"] == pytest.approx(0.5) and p["p_value"] < 0.05
    assert p["wilcoxon_p"] == pytest.approx(2 / 2 ** 6)
    assert not c.ok and c.status.value == "FAIL"
    assert c.first_divergence.kind == "system.changed.worse" and c.first_divergence.where == "val_loss"
    assert "config" in c.first_divergence.hint


def test_direction_follows_the_metric(sweeps):
    better = _cmp(sweeps["base"], sweeps["better"])
    assert (better.verdict, better.direction) == ("SYSTEM_CHANGED", "better")
    assert better.status.value == "WARN"
    # val_acc is higher-is-better: tiny's val_acc is 0.5 - 0.1*shift, so shift=0.5 lowers it -> worse
    acc = _cmp(sweeps["base"], sweeps["shift"], metric="val_acc")
    assert acc.details["higher_is_better"] is True
    assert (acc.verdict, acc.direction) == ("SYSTEM_CHANGED", "worse")
    assert acc.paired["mean_delta"] == pytest.approx(-0.05) and acc.paired["worse"] == 6


def test_changed_eval_path_is_measurement_changed_naming_the_field(sweeps):
    c = _cmp(sweeps["base"], sweeps["evaltest"])
    assert c.verdict == "MEASUREMENT_CHANGED"
    assert c.identity["eval_fingerprint"] == "CHANGED"
    assert c.identity["config"] == "SAME"  # eval keys are not part of the trained system's config
    assert c.details["identity_detail"]["eval_fingerprint"]["fields"] == {"split": ["val", "test"]}
    assert c.first_divergence.kind == "measurement.changed"
    assert "split" in c.first_divergence.hint
    assert not c.ok


def test_measurement_change_wins_over_a_real_shift(sweeps):
    c = _cmp(sweeps["base"], sweeps["eval_and_shift"])
    assert c.verdict == "MEASUREMENT_CHANGED"


def test_measurement_changed_has_no_direction(sweeps):
    c = _cmp(sweeps["base"], sweeps["eval_and_shift"])
    assert c.verdict == "MEASUREMENT_CHANGED"
    assert c.direction is None


def test_disjoint_seeds_compare_unpaired_and_say_so(sweeps):
    c = _cmp(sweeps["base"], sweeps["disjoint"])
    assert c.details["design"] == "unpaired" and c.paired is None and c.details["shared_seeds"] == []
    assert c.unpaired["n_base"] == 6 and c.unpaired["n_cand"] == 6
    assert c.verdict == "NOT_RESOLVED"
    need = c.details["seeds_to_resolve"]
    assert need is None or need > 6


def test_compare_by_name_in_store_matches_compare_of_records(sweeps):
    by_name = _cmp("base", "shift", store=sweeps["store"])
    by_records = _cmp(list(sweeps["base"].records), list(sweeps["shift"].records))
    assert by_name.verdict == by_records.verdict
    assert by_name.paired == by_records.paired
    assert by_name.details["baseline_name"] == "base" and by_name.details["candidate_name"] == "shift"


def test_compare_rejects_unknown_metric_and_bad_alpha(sweeps):
    with pytest.raises(firstdiv.NotFound, match="val_loss"):
        _cmp(sweeps["base"], sweeps["shift"], metric="not_recorded")
    with pytest.raises(InvalidArgument):
        _cmp(sweeps["base"], sweeps["shift"], alpha=1.5)


# --------------------------------------------------------------------------------------------
# criteria grammar


@pytest.mark.parametrize("text, form, metric, op, value", [
    ("val_loss delta within noise", "within_noise", "val_loss", "", 0.0),
    ("val_loss within the noise floor", "within_noise", "val_loss", "", 0.0),
    ("  val_loss delta is within noise  ", "within_noise", "val_loss", "", 0.0),
    ("val_loss delta < 0.01", "bound", "val_loss", "<", 0.01),
    ("val_loss delta<=-1e-3", "bound", "val_loss", "<=", -0.001),
    ("eval/top1.acc delta > 2", "bound", "eval/top1.acc", ">", 2.0),
    ("val_acc delta >= +.5", "bound", "val_acc", ">=", 0.5),
    ("val_acc improves", "improves", "val_acc", "", 0.0),
    ("VAL_ACC IMPROVES", "improves", "VAL_ACC", "", 0.0),
])
def test_parse_criterion_forms(text, form, metric, op, value):
    c = parse_criterion(text)
    assert (c.form, c.metric, c.op) == (form, metric, op)
    assert c.value == pytest.approx(value)
    assert c.text == text


@pytest.mark.parametrize("text", ["", "val_loss", "val_loss gets better", "delta < 0.01", "val_loss delta == 0.1",
                                  "val_loss delta < abc", "val_loss improves a lot", "1loss improves"])
def test_parse_criterion_rejects_ungradeable_text(text):
    with pytest.raises(InvalidArgument, match="within noise"):
        parse_criterion(text)


@pytest.mark.parametrize("ci, floor, expected", [
    ((-0.01, 0.02), 0.05, MET),
    ((-0.05, 0.05), 0.05, MET),          # boundaries are inside
    ((0.06, 0.10), 0.05, NOT_MET),
    ((-0.20, -0.06), 0.05, NOT_MET),
    ((0.01, 0.08), 0.05, UNRESOLVED),    # straddles the floor
    ((-0.01, 0.02), None, UNRESOLVED),   # no noise floor
    ((None, None), 0.05, UNRESOLVED),    # no interval
])
def test_grade_within_noise(ci, floor, expected):
    crit = parse_criterion("val_loss delta within noise")
    assert grade(crit, ci=ci, noise_floor=floor, resolved=False, direction=None)["result"] == expected


@pytest.mark.parametrize("op, ci, expected", [
    ("<", (-0.02, 0.005), MET), ("<", (0.01, 0.03), NOT_MET), ("<", (0.0, 0.02), UNRESOLVED),
    ("<", (-0.02, 0.01), UNRESOLVED), ("<=", (-0.02, 0.01), MET), ("<=", (0.01, 0.02), UNRESOLVED),
    (">", (0.02, 0.05), MET), (">", (-0.1, 0.01), NOT_MET), (">", (0.0, 0.05), UNRESOLVED),
    (">=", (0.01, 0.05), MET), (">=", (-0.1, 0.009), NOT_MET),
])
def test_grade_bound(op, ci, expected):
    crit = parse_criterion(f"val_loss delta {op} 0.01")
    out = grade(crit, ci=ci, noise_floor=0.05, resolved=True, direction="worse")
    assert out["result"] == expected
    assert out["why"]


@pytest.mark.parametrize("resolved, direction, expected", [
    (True, "better", MET), (True, "worse", NOT_MET), (False, None, UNRESOLVED),
])
def test_grade_improves(resolved, direction, expected):
    crit = Criterion("improves", "val_acc")
    assert grade(crit, ci=(0.01, 0.02), noise_floor=0.05, resolved=resolved, direction=direction)["result"] == expected


def test_declared_criterion_is_graded_in_a_comparison(tmp_path, tiny):
    store = tmp_path / "runs.db"
    base = firstdiv.sweep(f"{tiny}:train", "0-5", name="b", store=store)
    cand = firstdiv.sweep(f"{tiny}:train", "0-5", sets=["shift=-0.5"], name="c", store=store,
                          hypothesis="a lower offset lowers the loss", success="val_loss improves")
    dec = _cmp(base, cand).details["declared"]
    assert dec["hypothesis"] == "a lower offset lowers the loss" and dec["declared_before_runs"] is True
    assert dec["result"] == MET
    other = _cmp(base, cand, metric="val_acc").details["declared"]
    assert other["result"] == UNRESOLVED and "--metric val_loss" in other["why"]
