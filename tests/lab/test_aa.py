"""The A/A self-check: identical configs on disjoint seeds must rarely be called SYSTEM_CHANGED."""

import json

import pytest

import firstdiv
from firstdiv.errors import InvalidArgument


def test_tiny_workload_false_alarm_rate_is_reported_with_an_exact_interval(tiny, store_path):
    report = firstdiv.aa(f"{tiny}:train", pairs=20, seeds_per_side=4, store=store_path)
    d = report.details
    assert sum(d["verdicts"].values()) == 20 and d["alarms"] == d["verdicts"].get("SYSTEM_CHANGED", 0)
    assert d["ci_low"] <= d["rate"] <= d["ci_high"]
    assert d["rate"] <= 0.2 and report.ok


def test_bad_arguments(tiny):
    with pytest.raises(InvalidArgument, match="pairs"):
        firstdiv.aa(f"{tiny}:train", pairs=0)
    with pytest.raises(InvalidArgument, match="alpha"):
        firstdiv.aa(f"{tiny}:train", alpha=1.5)


def test_cli_json(cli, tiny, tmp_path, store_path):
    proc = cli("aa", f"{tiny}:train", "--pairs", "5", "--seeds-per-side", "3", "--store", store_path, "--json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["payload"]["details"]["pairs"] == 5


def test_cli_min_effect(cli, tiny, tmp_path, store_path):
    proc = cli("aa", f"{tiny}:train", "--pairs", "5", "--seeds-per-side", "3", "--min-effect", "3x", "--store",
               store_path, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    details = json.loads(proc.stdout)["payload"]["details"]
    assert details["min_effect"] == "3x" and "SYSTEM_CHANGED" not in details["verdicts"]
    fresh = tmp_path / "fresh.db"
    bad = cli("aa", f"{tiny}:train", "--min-effect", "0x", "--store", fresh, cwd=tmp_path)
    assert bad.returncode == 2 and "min_effect" in bad.stderr and not fresh.exists()  # refused before any run


@pytest.mark.quality
def test_builtin_mlp_false_alarm_rate_stays_near_alpha(store_path):
    # Measured at full config: 50 pairs x 4 seeds a side gave the rate in the issue notes; here a
    # shorter schedule (4 epochs) keeps CI fast: the property does not depend on the epoch count.
    report = firstdiv.aa("builtin:mlp", pairs=25, seeds_per_side=4, sets=["epochs=4"], store=store_path)
    assert report.details["rate"] <= 0.16  # alpha 0.05 with a generous margin for 25 pairs
    assert report.ok
