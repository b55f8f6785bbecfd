"""A user's workload: targets, config handling, and what lands in the run record."""

import random
import subprocess
import textwrap

import numpy as np
import pytest
import torch

import firstdiv
from firstdiv.errors import InvalidArgument, WorkloadError
from firstdiv.lab.env import code_version
from firstdiv.lab.workload import resolve

WORKLOAD = textwrap.dedent('''
    import firstdiv

    @firstdiv.workload(defaults={"lr": 0.1, "epochs": 2, "name": "a", "flag": False})
    def train(seed, config, rec):
        rec.data_identity("v1")
        rec.eval_contract(indices=range(10), mode="eval")
        for e in range(config["epochs"]):
            rec.log(val_loss=1.0 + seed * 0.01 + config["lr"])
        rec.examples(10)

    def silent(seed, config, rec):
        pass

    def returns(seed, config, rec):
        return {"val_loss": 0.5 + seed, "label": "ignored"}
''')


@pytest.fixture
def repo(tmp_path):
    """A git work tree holding a workload file, committed."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "wl.py").write_text(WORKLOAD)
    for args in (["add", "wl.py"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "wl"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    return tmp_path


def test_file_target_and_record_fields(repo):
    result = firstdiv.sweep(f"{repo}/wl.py:train", "0-2", store=repo / ".firstdiv" / "runs.db",
                            sets=["lr=0.2"], hypothesis="h", success="val_loss delta < 0.5")
    assert [r.seed for r in result.records] == [0, 1, 2]
    rec = result.records[0]
    assert rec.config["lr"] == 0.2 and rec.config["threads"] == 1
    assert rec.curves["val_loss"] == [pytest.approx(1.2)] * 2 and rec.final["val_loss"] == pytest.approx(1.2)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    assert rec.code["commit"] == head and rec.code["dirty"] is False  # the store inside the tree is not a change
    assert rec.data_identity == "v1"
    assert rec.eval_fields == ["indices", "mode"] and rec.eval_fingerprint
    assert rec.env["threads"] == 1 and rec.env["torch"] == torch.__version__ and len(rec.env_hash) == 12
    assert rec.hypothesis == "h" and rec.success == "val_loss delta < 0.5"
    assert rec.throughput["examples"] == 10 and rec.final["examples_per_s"] > 0
    assert result.sweep.info["declared_before"] is True


def test_uncommitted_changes_change_the_code_version(repo):
    before = code_version(repo / "wl.py")
    (repo / "wl.py").write_text(WORKLOAD + "\n# edit\n")
    after = code_version(repo / "wl.py")
    assert before["commit"] == after["commit"] and after["dirty"] and after["version"] != before["version"]
    (repo / "new.py").write_text("x = 1\n")
    assert code_version(repo / "wl.py")["version"] != after["version"]


def test_outside_git_uses_fallback(tmp_path):
    (tmp_path / "wl.py").write_text(WORKLOAD)
    assert code_version(tmp_path / "wl.py", fallback="v9")["version"] == "v9"


def test_module_target(repo, monkeypatch):
    monkeypatch.chdir(repo)
    wl = resolve("wl:train")
    assert wl.spec.defaults["lr"] == 0.1


def test_declared_defaults_type_check_set_values(repo):
    wl = resolve(f"{repo}/wl.py:train")
    cfg = wl.config(sets=["epochs=3", "flag=true", "name=b", "lr=1e-3"])
    assert cfg == {"lr": 0.001, "epochs": 3, "name": "b", "flag": True, "threads": 1}
    with pytest.raises(InvalidArgument, match="epochs.*int"):
        wl.config(sets=["epochs=2.5"])
    with pytest.raises(InvalidArgument, match="Unknown config key 'lrr'.*known keys: epochs, flag, lr, name"):
        wl.config(sets=["lrr=1"])
    with pytest.raises(InvalidArgument, match="KEY=VALUE"):
        wl.config(sets=["lr"])


def test_free_form_config_parses_json_values(tiny):
    wl = resolve(f"{tiny}:free")
    assert wl.config(sets=["offset=1.5", "tag=abc", "layers=[1, 2]"]) == {
        "offset": 1.5, "tag": "abc", "layers": [1, 2], "threads": 1}


def test_returned_metrics_and_silent_workloads(repo, store_path):
    ok = firstdiv.sweep(f"{repo}/wl.py:returns", "0-1", store=store_path)
    assert [r.final["val_loss"] for r in ok.records] == [0.5, 1.5]
    silent = firstdiv.sweep(f"{repo}/wl.py:silent", "0", store=store_path)
    assert silent.records == () and "no metrics" in silent.failed[0].error


@pytest.mark.parametrize("target,match", [
    ("builtin:nope", "available: builtin:mlp"), ("nofile.py:train", "does not exist"),
    ("no_such_module_xyz:train", "Cannot import module"), ("train", "Expected a target"),
])
def test_bad_targets(target, match):
    with pytest.raises(WorkloadError, match=match):
        resolve(target)


def test_run_restores_caller_rng_and_threads(tiny, store_path):
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # the caller's count differs from the run's (threads=1)
    try:
        expect = (torch.rand(3), np.random.rand(3), random.random())
        torch.manual_seed(7)
        np.random.seed(7)
        random.seed(7)
        firstdiv.sweep(f"{tiny}:free", "0-1", store=store_path, sets=["threads=1"])
        got = (torch.rand(3), np.random.rand(3), random.random())
        assert torch.equal(expect[0], got[0]) and np.array_equal(expect[1], got[1]) and expect[2] == got[2]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_threads_go_to_the_environment_not_the_config_hash(tiny, store_path):
    one = firstdiv.sweep(f"{tiny}:train", "0-1", store=store_path)
    two = firstdiv.sweep(f"{tiny}:train", "0-1", store=store_path, sets=["threads=2"])
    assert one.records[0].config_hash == two.records[0].config_hash
    assert one.records[0].env_hash != two.records[0].env_hash
    cmp = firstdiv.compare(one, two)
    assert cmp.identity["config"] == "SAME" and cmp.identity["env"] == "CHANGED"
    assert cmp.details["identity_detail"]["env"]["fields"] == {"threads": [1, 2]}


def test_resume_reuses_recorded_seeds(tiny, store_path):
    first = firstdiv.sweep(f"{tiny}:train", "0-3", store=store_path)
    again = firstdiv.sweep(f"{tiny}:train", "0-5", store=store_path)
    assert first.ran == (0, 1, 2, 3)
    assert again.ran == (4, 5) and again.reused == (0, 1, 2, 3) and len(again.records) == 6


def test_process_backend_matches_serial(tiny, tmp_path):
    serial = firstdiv.sweep(f"{tiny}:train", "0-3", store=tmp_path / "a.db")
    proc = firstdiv.sweep(f"{tiny}:train", "0-3", store=tmp_path / "b.db", backend="process", workers=2)
    strip = lambda r: (r.seed, r.curves, r.identity, r.eval_fingerprint, r.config_hash)
    assert [strip(r) for r in serial.records] == [strip(r) for r in proc.records]


def test_every_public_name_resolves_and_import_stays_light():
    import subprocess
    import sys

    assert set(firstdiv.__all__) >= set(firstdiv._LAZY)
    for name in firstdiv.__all__:
        assert getattr(firstdiv, name) is not None
    probe = "import sys, firstdiv; print('torch' in sys.modules, 'scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]  # `import firstdiv` (and the pytest plugin) must not load torch or scipy
