"""A failed run's error is printed, returned and put in the JSON envelope as the store keeps it: scrubbed of
secrets (a command's stderr tail, an in-process workload's exception)."""

import sys

import pytest

import firstdiv

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize("kind", ["command", "workload"])
def test_a_failed_runs_error_is_printed_scrubbed_as_the_store_keeps_it(tmp_path, cli, kind):
    message = f"signing failed: aws_secret_access_key={SECRET} with token {TOKEN}"
    if kind == "command":
        script = tmp_path / "fail.py"
        script.write_text(f"import sys\nprint({message!r}, file=sys.stderr)\nsys.exit(1)\n")
        target = ["--", sys.executable, script, "{seed}"]
    else:
        (tmp_path / "wl.py").write_text(f"def train(seed, config, rec):\n    raise RuntimeError({message!r})\n")
        target = ["wl.py:train"]
    for json_out in ([], ["--json"]):
        proc = cli("sweep", "--seeds", "0", "--store", tmp_path / "runs.db", *json_out, *target, cwd=tmp_path,
                   env={"COLUMNS": "400"})
        assert proc.returncode == 1, proc.stderr
        assert "signing failed" in proc.stdout and "[redacted]" in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr and TOKEN not in proc.stdout + proc.stderr


def test_the_returned_failed_record_is_the_stored_one(tmp_path, store_path):
    (tmp_path / "wl.py").write_text(f"def train(seed, config, rec):\n    raise RuntimeError('token {TOKEN}')\n")
    result = firstdiv.sweep(f"{tmp_path / 'wl.py'}:train", "0", store=store_path, progress=False)
    (failed,) = result.failed
    assert failed.error.startswith("RuntimeError: token [redacted]") and TOKEN not in str(result.report())
