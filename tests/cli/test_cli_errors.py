"""Bad input on the command line: exit 2, one line on stderr saying what is wrong and how to fix
it, nothing on stdout, and nothing written (no store, no .firstdiv directory in the cwd)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _paths import WORKLOADS

import firstdiv

EXIT_USAGE = 2


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for directories)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def assert_usage_error(proc, *, problem=(), fix=(), fix_any=()) -> str:
    """rc 2, empty stdout, exactly one stderr line `firstdiv: error: ...` containing every string in
    `problem` and `fix` and, when given, at least one string of `fix_any`. Returns the line."""
    assert proc.returncode == EXIT_USAGE, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.strip() == "", proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("firstdiv: error: "), line
    assert "Traceback" not in line
    for text in (*problem, *fix):
        assert text in line, f"{text!r} not in {line!r}"
    if fix_any:
        assert any(text in line for text in fix_any), f"none of {fix_any!r} in {line!r}"
    return line


def assert_wrote_nothing(cwd: Path, before: dict, store: Path | None = None) -> None:
    assert not (cwd / ".firstdiv").exists()
    if store is not None:
        assert not store.exists() and not store.parent.exists()
    assert _tree(cwd) == before


# --------------------------------------------------------------------------------------------
# sweep: bad targets, seeds, config, options. Every case fails before any run.


# Validation errors need no run. Cases that do not depend on what the workload is use LIGHT, a
# workload module without torch (importing torch would double each subprocess's time); the
# target-lookup cases use the tiny workload, the config cases builtin:mlp, as users would.
LIGHT_SOURCE = """
import firstdiv

@firstdiv.workload(defaults={"epochs": 3, "noise": 0.05})
def train(seed, config, rec):
    rec.log(val_loss=1.0 + config["noise"])
"""


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    """Target of a torch-free workload file, kept outside the cwd of the commands under test."""
    path = tmp_path_factory.mktemp("light") / "light.py"
    path.write_text(LIGHT_SOURCE)
    return f"{path}:train"


def _sweep_cases(tiny: str, light: str):
    return {
        "unknown builtin": (["sweep", "builtin:nope", "--seeds", "0"], ["builtin:nope"], ["builtin:mlp"]),
        "function missing in file": (["sweep", f"{tiny}:nofunction", "--seeds", "0"], ["'nofunction'"],
                                     ["train(seed, config, rec)"]),
        "no colon": (["sweep", "no-colon-here", "--seeds", "0"], ["no-colon-here"], ["builtin:mlp", "module:train"]),
        "seed range reversed": (["sweep", light, "--seeds", "5-2"], ["5-2"], ["LOW-HIGH"]),
        "seeds not numbers": (["sweep", light, "--seeds", "abc"], ["'abc'"], ["0-11"]),
        "seeds empty": (["sweep", light, "--seeds", ""], ["''"], ["0-11"]),
        "unknown --set key": (["sweep", "builtin:mlp", "--seeds", "0", "--set", "bogus=1"], ["'bogus'"],
                              ["known keys", "epochs", "lr", "noise"]),
        "int expected": (["sweep", "builtin:mlp", "--seeds", "0", "--set", "epochs=abc"], ["'epochs'", "'abc'"],
                         ["int"]),
        "float expected": (["sweep", "builtin:mlp", "--seeds", "0", "--set", "lr=fast"], ["'lr'", "'fast'"],
                           ["float"]),
        "out of range": (["sweep", "builtin:mlp", "--seeds", "0", "--set", "noise=1.5"], ["noise", "1.5"],
                         ["[0, 1)"]),
        "--set without =": (["sweep", light, "--seeds", "0", "--set", "epochs"], ["'epochs'"], ["KEY=VALUE"]),
        "unknown option": (["sweep", light, "--seeds", "0", "--bogus-option"], ["--bogus-option"],
                           ["firstdiv sweep --help"]),
        "unknown command": (["nosuchcommand"], ["nosuchcommand"], ["firstdiv --help"]),
        "hypothesis without success": (["sweep", light, "--seeds", "0", "--hypothesis", "lower lr helps"],
                                       ["--success"], ["--hypothesis"]),
        "ungradeable success": (["sweep", light, "--seeds", "0", "--hypothesis", "h", "--success",
                                 "val_loss gets better"], ["'val_loss gets better'"], ["within noise", "improves"]),
        "zero workers": (["sweep", light, "--seeds", "0-1", "--backend", "process", "--workers", "0"], ["0"],
                         [">= 1"]),
    }


SWEEP_CASES = list(_sweep_cases("TINY", "LIGHT"))


@pytest.mark.parametrize("case", SWEEP_CASES)
def test_sweep_bad_input_is_one_line_exit_2_and_writes_nothing(case, cli, tiny, light, tmp_path, store_path):
    args, problem, fix = _sweep_cases(tiny, light)[case]
    before = _tree(tmp_path)
    proc = cli(*args, "--store", store_path, cwd=tmp_path, timeout=120)
    assert_usage_error(proc, problem=problem, fix=fix)
    assert_wrote_nothing(tmp_path, before, store_path)


def test_sweep_bad_input_with_the_default_store_writes_no_firstdiv_dir(cli, light, tmp_path):
    before = _tree(tmp_path)
    proc = cli("sweep", light, "--seeds", "3-1", cwd=tmp_path)
    assert_usage_error(proc, problem=["3-1"])
    assert_wrote_nothing(tmp_path, before)


# Targets that cannot be found: the line names the target; the fix should say what a target looks
# like or where it was looked for. These two messages state only the problem.
TARGET_FIX_HINTS = ("path/to/file.py:train", "module:train", "PYTHONPATH", "sys.path", "working directory")


@pytest.mark.parametrize("target, problem", [("nofile.py:train", "nofile.py"),
                                              ("no_such_module:fn", "no_such_module")])
def test_sweep_missing_target_names_it(target, problem, cli, tmp_path, store_path):
    before = _tree(tmp_path)
    proc = cli("sweep", target, "--seeds", "0", "--store", store_path, cwd=tmp_path)
    assert_usage_error(proc, problem=[problem])
    assert_wrote_nothing(tmp_path, before, store_path)


@pytest.mark.parametrize("target", ["nofile.py:train", "no_such_module:fn"])
def test_sweep_missing_target_says_how_to_fix(target, cli, tmp_path, store_path):
    proc = cli("sweep", target, "--seeds", "0", "--store", store_path, cwd=tmp_path)
    assert_usage_error(proc, fix_any=TARGET_FIX_HINTS + (str(tmp_path),))


# --------------------------------------------------------------------------------------------
# compare and runs


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """A store holding one 3-seed sweep of the tiny workload, named `base`."""
    tiny = WORKLOADS / "tiny.py"
    store = tmp_path_factory.mktemp("store") / "runs.db"
    result = firstdiv.sweep(f"{tiny}:train", "0-2", name="base", store=store)
    assert len(result.records) == 3
    return store


def test_compare_on_a_missing_store(cli, tmp_path, store_path):
    before = _tree(tmp_path)
    proc = cli("compare", "base", "cand", "--store", store_path, cwd=tmp_path)
    assert_usage_error(proc, problem=[str(store_path)], fix=["firstdiv sweep", "--store"])
    assert_wrote_nothing(tmp_path, before, store_path)


def test_compare_on_a_store_without_sweeps(cli, tmp_path):
    store = tmp_path / "empty" / "runs.db"
    firstdiv.Store(store).close()
    before = _tree(tmp_path)
    proc = cli("compare", "base", "cand", "--store", store, cwd=tmp_path)
    assert_usage_error(proc, problem=["'base'"], fix=["firstdiv runs"])
    assert_wrote_nothing(tmp_path, before)


def test_compare_on_a_zero_byte_store_file_is_an_error(cli, tmp_path):
    store = tmp_path / "runs.db"
    store.write_bytes(b"")
    proc = cli("compare", "base", "cand", "--store", store, cwd=tmp_path)
    assert_usage_error(proc, problem=["is empty, not a run store"])


def test_compare_on_a_zero_byte_store_file_writes_nothing(cli, tmp_path):
    store = tmp_path / "runs.db"
    store.write_bytes(b"")
    before = _tree(tmp_path)
    cli("compare", "base", "cand", "--store", store, cwd=tmp_path)
    assert store.stat().st_size == 0
    assert _tree(tmp_path) == before


def test_compare_names_a_missing_sweep_and_lists_the_known_ones(cli, tmp_path, small_store):
    before_store = _tree(small_store.parent)
    before = _tree(tmp_path)
    proc = cli("compare", "base", "nope", "--store", small_store, cwd=tmp_path)
    assert_usage_error(proc, problem=["'nope'"], fix=["base", "firstdiv runs"])
    assert_wrote_nothing(tmp_path, before)
    assert _tree(small_store.parent) == before_store


def test_compare_unknown_metric_names_the_recorded_metrics(cli, tmp_path, small_store):
    before_store = _tree(small_store.parent)
    before = _tree(tmp_path)
    proc = cli("compare", "base", "base", "--metric", "not_recorded", "--store", small_store, cwd=tmp_path)
    assert_usage_error(proc, problem=["'not_recorded'"], fix=["val_loss", "val_acc", "train_loss"])
    assert_wrote_nothing(tmp_path, before)
    assert _tree(small_store.parent) == before_store


def test_compare_bad_alpha(cli, tmp_path, small_store):
    proc = cli("compare", "base", "base", "--alpha", "1.5", "--store", small_store, cwd=tmp_path)
    assert_usage_error(proc, problem=["1.5"], fix=["(0, 1)"])


@pytest.mark.parametrize("flags", [("--seed-param", "random_seed"), ("--tracking-uri", "http://mlflow:5000")])
def test_compare_refuses_mlflow_flags_without_an_mlflow_side(cli, tmp_path, small_store, flags):
    """--seed-param and --tracking-uri only shape mlflow: sides; given for two stored sweeps they would be
    silently ignored, so they are refused."""
    proc = cli("compare", "base", "base", *flags, "--store", small_store, cwd=tmp_path)
    assert_usage_error(proc, problem=[flags[0], "mlflow:"], fix=["drop " + flags[0], "mlflow:EXPERIMENT"])


def test_the_store_fixture_compares_cleanly(cli, tmp_path, small_store):
    """Control for the cases above: the same store and names work when the input is right."""
    proc = cli("compare", "base", "base", "--store", small_store, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"verdict": "NOT_RESOLVED"' in proc.stdout


def test_runs_with_a_missing_store(cli, tmp_path, store_path):
    before = _tree(tmp_path)
    proc = cli("runs", "--store", store_path, cwd=tmp_path)
    assert_usage_error(proc, problem=[str(store_path)], fix=["firstdiv sweep"])
    assert_wrote_nothing(tmp_path, before, store_path)


def test_runs_with_the_default_store_missing(cli, tmp_path):
    before = _tree(tmp_path)
    proc = cli("runs", cwd=tmp_path)
    assert_usage_error(proc, problem=[".firstdiv"], fix=["--store"])
    assert_wrote_nothing(tmp_path, before)
