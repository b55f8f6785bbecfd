"""Every experiment command: bad input is one line on stderr, exit code 2, and nothing written."""

import pytest
from conftest import ROOT

LAB = str(ROOT / "tests" / "workloads" / "lab.py")


@pytest.mark.parametrize("args,needle", [
    (["bisect", f"{LAB}:interact", "--candidate", "b=1", "--seeds", "5-2"], "5-2"),
    (["bisect", f"{LAB}:interact", "--candidate", "b=1", "--order", "nope"], "nope"),
    (["bisect", f"{LAB}:interact"], "--candidate"),
    (["factorial", f"{LAB}:interact", "--a", "a=1"], "--b"),
    (["factorial", f"{LAB}:interact", "--a", "a=1", "--b", "a=0"], "a"),
    (["determinism", f"{LAB}:jitter", "--seed", "-1"], "seed"),
    (["determinism", f"{LAB}:jitter", "--set", "epochs=many"], "epochs"),
    (["aa", f"{LAB}:interact", "--pairs", "0"], "pairs"),
    (["aa", "builtin:nope"], "builtin:nope"),
    (["curves", "missing-a", "missing-b"], "No run store"),
    (["gate", "check", "no-such-gate.json", f"{LAB}:interact"], "no-such-gate.json"),
    (["gate", "calibrate", "missing", "-o", "g.json"], "No run store"),
    (["rng-audit", "no_such_file.py:make"], "no_such_file.py"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(cli, tmp_path, args, needle):
    store = tmp_path / "store" / "runs.db"
    proc = cli(*args, "--store", store, cwd=tmp_path) if args[0] != "rng-audit" else cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("firstdiv: error:"), proc.stderr
    assert needle in lines[0]
    assert not store.exists() and not (tmp_path / ".firstdiv").exists() and not (tmp_path / "g.json").exists()
