"""Curves, not endpoints (chapter 14, E8): per-epoch bands, where trajectories separate, and the
comparison under a checkpoint-selection policy declared before the runs."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest
from _paths import WORKLOADS

import firstdiv
from firstdiv import CurveComparison, InvalidArgument, NotFound, Report, Status
from firstdiv.lab.curves import bands, separation
from firstdiv.lab.identity import RunIdentity
from firstdiv.lab.record import Recorder, build_record

CURVY = WORKLOADS / "curvy.py"
BASE_CURVE = [1.0, 0.8, 0.9, 0.95, 0.7, 0.75]
CAND_CURVE = [1.0, 0.85, 0.6, 0.65, 0.7, 0.72]


@pytest.fixture
def curvy(tmp_path):
    """curvy.py copied out of the git tree, so its code version stays fixed during a test."""
    dst = tmp_path / "wl" / "curvy.py"
    dst.parent.mkdir()
    shutil.copy(CURVY, dst)
    return f"{dst}:train"


def _draws(seeds):
    spec = importlib.util.spec_from_file_location("_curvy_for_curves", CURVY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return np.array([module.draws(s) for s in seeds])


def _records(curve, seeds=range(4), metric="val_loss", name="hand"):
    """Hand-made runs: ``curve`` plus an exact per-seed offset of seed/8."""
    ident = RunIdentity(workload="hand", config={}, config_hash=name, code={"version": "v"}, env={}, env_hash="e",
                        identity=name)
    out = []
    for seed in seeds:
        rec = Recorder(seed, {})
        rec.eval_contract(mode="eval")
        for value in curve:
            rec.log(**{metric: value + seed / 8})
        out.append(build_record(rec, workload="hand", identity=ident, wall=0.0))
    return out


def _warn(r, where):
    return [f.message for f in r.findings if f.status is Status.WARN and f.where == where]


# --------------------------------------------------------------------------------------------
# pure pieces


def test_bands_and_separation_on_plain_numbers():
    b = bands({0: [1.0, 2.0], 1: [3.0, 4.0, 9.0], 2: [5.0, 6.0]})
    assert [x["n"] for x in b] == [3, 3, 1]
    assert (b[0]["min"], b[0]["q25"], b[0]["median"], b[0]["q75"], b[0]["max"]) == (1.0, 2.0, 3.0, 4.0, 5.0)
    rows = [{"epoch": e, "mean_delta": d, "ci_low": d, "ci_high": d, "p_value": 0.0 if r else 1.0, "resolved": r,
             "direction": ("worse" if d > 0 else "better") if r else None}
            for e, (d, r) in enumerate([(0.0, False), (0.3, True), (0.0, False), (-0.1, True), (-0.2, True)])]
    s = separation(rows)
    assert s["first_resolved"] == 1 and s["from_epoch"] == 3 and s["direction"] == "better"
    assert s["largest"]["epoch"] == 1 and s["resolved_epochs"] == [1, 3, 4]
    rows[1]["direction"], rows[3]["direction"] = "better", "worse"  # a flip resets "stays resolved"
    assert separation(rows)["from_epoch"] == 4


# --------------------------------------------------------------------------------------------
# checkpoint policies on hand-made curves


@pytest.mark.parametrize("policy, base_epoch, cand_epoch", [("last", 5, 5), ("best", 4, 2), ("best:patience=2", 1, 2)])
def test_policy_selection_on_hand_made_curves(policy, base_epoch, cand_epoch):
    r = firstdiv.curves(_records(BASE_CURVE), _records(CAND_CURVE), policy=policy)
    sel = r.selected
    assert sel["baseline"]["epochs"] == [base_epoch] * 4 and sel["candidate"]["epochs"] == [cand_epoch] * 4
    assert sel["baseline"]["values"] == pytest.approx([BASE_CURVE[base_epoch] + s / 8 for s in range(4)])
    delta = CAND_CURVE[cand_epoch] - BASE_CURVE[base_epoch]
    assert r.verdict["mean_delta"] == pytest.approx(delta) and r.verdict["resolved"]
    assert r.verdict["direction"] == ("better" if delta < 0 else "worse")
    assert r.policy["used"] == {"baseline": policy, "candidate": policy} and r.policy["post_hoc"] is True
    assert "chosen after the runs existed" in _warn(r, "checkpoint policy")[0]


def test_no_declared_policy_reads_the_last_epoch_and_best_follows_the_metric_direction():
    r = firstdiv.curves(_records(BASE_CURVE), _records(CAND_CURVE))
    assert r.policy["source"] == "default" and r.policy["used"]["baseline"] == "last" and not r.policy["post_hoc"]
    assert not _warn(r, "checkpoint policy")
    acc = firstdiv.curves(_records(BASE_CURVE, metric="val_acc"), _records(CAND_CURVE, metric="val_acc"),
                          metric="val_acc")
    assert acc.endpoints["best"]["baseline"]["epochs"] == [0] * 4  # higher is better: the maximum
    assert acc.endpoints["last"]["direction"] == "worse"  # 0.72 < 0.75 in accuracy


# --------------------------------------------------------------------------------------------
# separation where it was constructed


def test_separation_epoch_found_where_constructed(curvy, store_path):
    base = firstdiv.sweep(curvy, "0-5", store=store_path)
    cand = firstdiv.sweep(curvy, "0-5", sets=["gap=-0.2", "gap_from=5", "jitter=0.25"], store=store_path)
    r = firstdiv.curves(base, cand)
    sep = r.separation
    assert sep["first_resolved"] == 5 and sep["from_epoch"] == 5 and sep["direction"] == "better"
    assert sep["resolved_epochs"] == [5, 6, 7, 8, 9] and 5 <= sep["largest"]["epoch"] <= 9
    gap = -0.2 * (1 + 0.25 * _draws(range(6))[:, 4])
    assert sep["largest"]["mean_delta"] == pytest.approx(gap.mean(), rel=1e-9)
    assert all(row["mean_delta"] == 0.0 and not row["resolved"] for row in r.details["per_epoch"][:5])
    assert r.first_divergence.where == "epoch 5" and r.first_divergence.kind == "curves.separated.better"
    z0 = _draws(range(6))[:, 0]
    assert r.details["bands"]["baseline"][0]["median"] == pytest.approx(np.median(1.5 + 0.0625 * z0))
    assert r.verdict["resolved"] and r.verdict["direction"] == "better" and r.status is Status.WARN


def test_equal_endpoints_hide_a_transient_separation(curvy, store_path):
    base = firstdiv.sweep(curvy, "0-5", store=store_path)
    cand = firstdiv.sweep(curvy, "0-5", sets=["gap=0.3", "gap_from=3", "gap_to=7", "jitter=0.25"], store=store_path)
    r = firstdiv.curves(base, cand)
    assert r.separation["resolved_epochs"] == [3, 4, 5, 6] and r.separation["from_epoch"] is None
    assert r.endpoints["last"]["mean_delta"] == 0.0 and not r.endpoints["last"]["resolved"]
    assert not r.verdict["resolved"]
    assert "equal endpoints hide different trajectories" in _warn(r, "endpoints")[0]
    assert r.first_divergence.where == "epoch 3" and "does not persist" in r.first_divergence.hint


def test_unmatched_seeds_compare_unpaired_and_say_so(curvy, store_path):
    base = firstdiv.sweep(curvy, "0-3", store=store_path)
    cand = firstdiv.sweep(curvy, "10-13", sets=["gap=0.5"], store=store_path)
    r = firstdiv.curves(base, cand)
    assert r.details["design"] == "unpaired" and r.selected["design"] == "unpaired"
    assert r.separation["from_epoch"] == 0 and r.verdict["direction"] == "worse"
    assert "seeds do not match: unpaired per epoch" in str(r)


# --------------------------------------------------------------------------------------------
# declared policies and unequal budgets (E8)


def test_declared_best_over_unequal_budgets_warns_with_numbers(curvy, store_path):
    longer = ["epochs=20", "min_at=14", "low=0.9"]
    base = firstdiv.sweep(curvy, "0-5", checkpoint_policy="best", store=store_path)
    cand = firstdiv.sweep(curvy, "0-5", sets=longer, checkpoint_policy="best", store=store_path)
    r = firstdiv.curves(base, cand)
    assert r.policy["source"] == "declared" and not r.policy["post_hoc"] and not _warn(r, "checkpoint policy")
    assert r.details["shape"]["baseline"]["best_epoch"] == 4 and r.details["shape"]["candidate"]["best_epoch"] == 14
    assert r.selected["baseline"]["epochs"] == [4] * 6 and r.selected["candidate"]["epochs"] == [14] * 6
    assert r.verdict["direction"] == "better" and r.verdict["mean_delta"] == pytest.approx(-0.1)
    (budget,) = _warn(r, "epoch budget")
    for piece in ("the verdict compares best epochs over unequal budgets (baseline 10, candidate 20 epochs)",
                  "more chances at a low point", "past epoch 9 in 6/6 seeds", "within the first 10 epochs"):
        assert piece in budget, piece
    assert r.details["budget"]["matched"]["direction"] == "worse"  # within 10 epochs the slow descent is behind
    assert not r.endpoints["last"]["resolved"] and r.endpoints["best"]["resolved"]
    # the same policy passed again is the declared one, not a post-hoc choice
    assert not firstdiv.curves(base, cand, policy="best").policy["post_hoc"]
    # under last, or with patience declared, the budget touches only the endpoints' post-hoc best row
    last = firstdiv.curves(base, cand, policy="last")
    assert "chosen after the runs existed" in _warn(last, "checkpoint policy")[0]
    assert "the verdict under last does not" in _warn(last, "epoch budget")[0]
    patient = firstdiv.sweep(curvy, "0-5", sets=longer, name="cand-patient", checkpoint_policy="best:patience=3",
                             store=store_path)
    assert patient.ran == ()  # same runs, another declared policy
    mixed = firstdiv.curves(base, patient)
    assert "declared different policies" in _warn(mixed, "checkpoint policy")[0]
    base_patient = firstdiv.sweep(curvy, "0-5", name="base-patient", checkpoint_policy="best:patience=3",
                                  store=store_path)
    fair = firstdiv.curves(base_patient, patient)
    assert not fair.details["budget"]["affects_verdict"] and "does not" in _warn(fair, "epoch budget")[0]
    # both reused runs that existed before their policy was declared, and the report says so
    assert "baseline and candidate: the policy was declared after" in _warn(fair, "checkpoint policy")[0]
    assert fair.selected["baseline"]["epochs"] == [4] * 6 and fair.selected["candidate"]["epochs"] == [14] * 6


# --------------------------------------------------------------------------------------------
# errors, round trip, rendering


def test_bad_input_is_one_line(store_path):
    base, cand = _records(BASE_CURVE), _records(CAND_CURVE)
    with pytest.raises(InvalidArgument, match="Unknown checkpoint policy 'worst'"):
        firstdiv.curves(base, cand, policy="worst")
    with pytest.raises(InvalidArgument, match="alpha"):
        firstdiv.curves(base, cand, alpha=0)
    with pytest.raises(NotFound, match=r"Metric 'val_f1' has no per-epoch curve .* recorded curves: val_loss"):
        firstdiv.curves(base, cand, metric="val_f1")
    with pytest.raises(InvalidArgument, match="two runs of seed 0"):
        firstdiv.curves(base + base[:1], cand)
    with pytest.raises(NotFound, match="No run store at"):
        firstdiv.curves("base", cand, store=store_path)
    assert not store_path.exists()


def test_report_round_trips_and_renders():
    r = firstdiv.curves(_records(BASE_CURVE), _records(CAND_CURVE), policy="best")
    back = Report.from_dict(json.loads(r.to_json()))
    assert type(back) is CurveComparison and back.separation == r.separation and back.verdict == r.verdict
    text = str(r)
    policy_line = "CHECKPOINT POLICY   best   (chosen after the runs: post hoc)"
    for piece in ("CURVES  WARN", "PER EPOCH", "SEPARATION", "ENDPOINTS", policy_line,
                  "VERDICT  under best: the candidate is better"):
        assert piece in text, piece
    assert max(len(line) for line in text.splitlines()) <= 100


# --------------------------------------------------------------------------------------------
# command line


def test_cli_exit_codes(cli, curvy, store_path):
    firstdiv.sweep(curvy, "0-3", name="base", store=store_path)
    firstdiv.sweep(curvy, "0-3", name="cand", sets=["gap=0.3", "gap_from=2"], store=store_path)
    proc = cli("curves", "base", "cand", "--store", store_path, "--policy", "best", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["payload"]
    assert out["type"] == "CurveComparison" and out["details"]["separation"]["from_epoch"] == 2
    assert out["details"]["policy"]["post_hoc"] is True
    text = cli("curves", "base", "cand", "--store", store_path)
    assert text.returncode == 0 and "VERDICT  under last: the candidate is worse" in text.stdout
    for args, problem in ((["--policy", "worst"], "Unknown checkpoint policy 'worst'"),
                          (["--metric", "val_f1"], "no per-epoch curve"),
                          (["--alpha", "2"], "--alpha")):
        bad = cli("curves", "base", "cand", "--store", store_path, *args)
        lines = bad.stderr.splitlines()
        assert bad.returncode == 2 and bad.stdout == "" and len(lines) == 1, bad.stderr
        assert lines[0].startswith("firstdiv: error: ") and problem in lines[0]
    missing = cli("curves", "nope", "cand", "--store", store_path)
    assert missing.returncode == 2 and "No sweep named 'nope'" in missing.stderr


# --------------------------------------------------------------------------------------------
# quality: builtin:mlp, chapter 14's E8


@pytest.mark.quality
def test_mlp_lower_lr_longer_budget_e8(store_path):
    base = firstdiv.sweep("builtin:mlp", "0-5", checkpoint_policy="best", store=store_path)
    cand = firstdiv.sweep("builtin:mlp", "0-5", sets=["lr=0.01", "epochs=40"], checkpoint_policy="best",
                          store=store_path)
    r = firstdiv.curves(base, cand)
    shape = r.details["shape"]
    assert 0 <= shape["baseline"]["best_epoch"] < 20 and 0 <= shape["candidate"]["best_epoch"] < 40
    assert r.separation["epochs_compared"] == 20 and r.separation["first_resolved"] is not None
    assert len(r.selected["candidate"]["epochs"]) == 6
    (budget,) = _warn(r, "epoch budget")
    assert "the verdict compares best epochs over unequal budgets (baseline 20, candidate 40 epochs)" in budget
    print(str(r))
