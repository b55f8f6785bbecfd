"""The determinism audit: same seed twice, then one condition changed at a time."""

import json

import pytest
import torch
from conftest import ROOT

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab.workload import resolve

LAB = str(ROOT / "tests" / "workloads" / "lab.py")


def checks(report):
    return {c["name"]: c for c in report.details["checks"]}


def test_deterministic_workload_is_bit_identical_everywhere(store_path):
    report = firstdiv.determinism(f"{LAB}:jitter", 3, store=store_path)
    assert report.ok and report.status.value == "PASS"
    c = checks(report)
    assert c["same seed twice"]["bit_identical"] and c["same seed twice"]["state_identical"]
    assert c["threads 1 -> 2"]["bit_identical"]
    assert c["torch.use_deterministic_algorithms(True)"]["bit_identical"]
    if not torch.cuda.is_available():
        assert "no GPU" in c["device cpu -> cuda"]["skipped"]


def test_unseeded_randomness_fails_at_the_first_diverging_epoch(store_path):
    report = firstdiv.determinism(f"{LAB}:jitter", 0, sets=["unseeded=true"], store=store_path)
    assert not report.ok
    assert report.first_divergence.kind == "determinism.not_reproducible"
    same = checks(report)["same seed twice"]
    assert same["first_diverging_epoch"] == 2 and same["max_abs_diff"] > 0
    assert same["state_identical"] is True  # the weights were seeded; the curve was not


def test_thread_dependence_is_measured_against_the_noise_floor(store_path):
    report = firstdiv.determinism(f"{LAB}:jitter", 0, sets=["thread_sensitive=true"], store=store_path)
    assert report.ok  # same seed twice is still identical
    threads = checks(report)["threads 1 -> 2"]
    assert threads["bit_identical"] is False and threads["first_diverging_epoch"] == 1
    assert threads["max_abs_diff"] == pytest.approx(1e-7, rel=1e-3)
    assert threads["relative_to_noise_floor"] == pytest.approx(1e-7 / report.details["noise_floor"], rel=1e-3)


def test_leaves_global_flags_and_threads_as_found(store_path):
    threads = torch.get_num_threads()
    firstdiv.determinism(f"{LAB}:jitter", 0, store=store_path)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.get_num_threads() == threads


def test_records_determinism_flags_in_the_environment(store_path):
    report = firstdiv.determinism(f"{LAB}:jitter", 0, store=store_path)
    env = report.details["environment"]
    assert env["deterministic_algorithms"] is False and "cublas_workspace_config" in env
    torch.use_deterministic_algorithms(True)
    try:
        run = firstdiv.sweep(f"{LAB}:jitter", "0", store=store_path)
    finally:
        torch.use_deterministic_algorithms(False)
    assert run.records[0].env["deterministic_algorithms"] is True


def test_cuda_device_that_is_not_there_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InvalidArgument, match="device.*not available"):
        resolve("builtin:mlp").config(sets=["device=cuda"])


def test_cli(cli, tmp_path, store_path):
    ok = cli("determinism", f"{LAB}:jitter", "--seed", "1", "--store", store_path, "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["payload"]["status"] == "PASS"
    bad = cli("determinism", f"{LAB}:jitter", "--set", "unseeded=true", "--fail-on-nondeterminism",
              "--store", store_path, cwd=tmp_path)
    assert bad.returncode == 1 and "determinism.not_reproducible" in bad.stdout
    usage = cli("determinism", f"{LAB}:jitter", "--metric", "nope", "--store", store_path, cwd=tmp_path)
    assert usage.returncode == 2 and "nope" in usage.stderr and usage.stderr.count("\n") == 1


@pytest.mark.quality
def test_builtin_mlp_is_bit_identical_at_one_thread(store_path):
    report = firstdiv.determinism("builtin:mlp", 0, noise_seeds="0-3", store=store_path)
    same = checks(report)["same seed twice"]
    assert same["bit_identical"] and same["state_identical"]
