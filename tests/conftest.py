import difflib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests" / "workloads" / "tiny.py")


def ok_seeds(path):
    """Seeds with an ok run, read through a read-only connection (safe while a writer is running)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        return sorted(r[0] for r in conn.execute("SELECT seed FROM runs WHERE status='ok'"))
    except sqlite3.Error:  # not created yet, or mid-migration
        return []
    finally:
        conn.close()


# The suite runs three CPU-bound processes on the 2-core CI machine (this one and the public gate's two workers,
# tests/realworld/_gate_pool.py): each computes on one intra-op thread, so none spin-waits against the others as
# torch's default of one thread per core does. The processes the tests start inherit it through the environment.
os.environ["OMP_NUM_THREADS"] = "1"


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store" / "runs.db"


def run_cli(*args, cwd=None, env=None, timeout=300):
    """Run `python -m firstdiv ARGS` in a subprocess; returns CompletedProcess with text output."""
    full_env = dict(os.environ)
    full_env.pop("FIRSTDIV_STORE", None)
    full_env.update(env or {})
    full_env.setdefault("COLUMNS", "120")
    return subprocess.run([sys.executable, "-m", "firstdiv", *map(str, args)], check=False, cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def tiny():
    return TINY


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one intra-op thread, and do not spin-wait against other processes on a
    shared machine; the caller's thread count comes back afterwards. Use it per module:
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the expected files under tests/golden/ instead of comparing with them")


@pytest.fixture
def golden(request):
    """``golden(name, text)``: ``text`` must equal tests/golden/NAME byte for byte; a mismatch fails with a
    unified diff, a missing file fails too (it is never created silently). With ``--update-golden`` the file
    is written instead: review the change with ``git diff tests/golden`` before committing it."""
    update = request.config.getoption("--update-golden")

    def check(name, text):
        path, actual = ROOT / "tests" / "golden" / name, text.encode("utf-8")
        if update:
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(actual)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}: run pytest with --update-golden to write it, then review it", pytrace=False)
        expected = path.read_bytes()
        if actual != expected:
            diff = difflib.unified_diff(expected.decode("utf-8").splitlines(keepends=True), text.splitlines(keepends=True),
                                        fromfile=f"tests/golden/{name} (expected)", tofile=f"{name} (actual)")
            pytest.fail(f"output differs from tests/golden/{name}:\n{''.join(diff)}\nIf the change is intended, rerun "
                        "with --update-golden and review `git diff tests/golden`.", pytrace=False)

    return check


def pytest_terminal_summary(terminalreporter):
    """The real-program corpus's counts (tests/realworld/_results.py), when its gates ran."""
    import sys

    results = sys.modules.get("_results")
    if results is not None and (results.RESULTS.correct or results.RESULTS.bugs or results.RESULTS.cases):
        terminalreporter.section("real-program corpus")
        for line in results.counts(results.RESULTS):
            terminalreporter.write_line(line)
    pool = sys.modules.get("_gate_pool")
    lines = pool.cost_lines() if pool is not None else []
    gate = sys.modules.get("test_public_gate")
    if lines and gate is not None:  # what the gate covered: a fixed sample unless FIRSTDIV_CORPUS=full
        lines.insert(0, sys.modules["_scope"].line(len(gate.SELECTED), len(gate.PUBLIC)))
    if lines:  # where the suite's time goes (its longest part): the workers' CPU seconds
        terminalreporter.section("public corpus gate")
        for line in lines:
            terminalreporter.write_line(line)


# The public corpus gate (tests/realworld/test_public_gate.py) starts its two workers as soon as collection ends, not
# when its first test runs: the gate is the suite's longest part and the rest of the suite runs on one core, so its
# jobs share the machine with the serial tests instead of waiting for them; its tests run last (they only wait). Only the selected gate tests' jobs are
# submitted, so a ``-k`` run starts what it needs alone, and a collect-only run starts nothing.
_GATE_TESTS = {"test_correct_public_program_gets_no_fail": ("correct", "seed"),
               "test_public_bug_is_localized_by_its_instrument_and_by_diagnose": ("bug", "index"),
               "test_port_learns_under_its_own_loop": ("learns", None),
               "test_bug_variant_builds_and_steps": ("steps", "index")}
_GATE_MODULES = ("test_public_gate", "test_public_programs")


def pytest_collection_modifyitems(session, config, items):
    """The tests that wait on the gate's workers run last: the serial tests before them keep the second core busy beside
    the workers, and the suite ends while both workers still compute, instead of ending on the serial tests alone with
    one core idle (the order within each part stays as collected)."""
    def waits(item) -> bool:
        return getattr(getattr(item, "module", None), "__name__", "") in _GATE_MODULES

    if any(map(waits, items)):
        items[:] = [item for item in items if not waits(item)] + [item for item in items if waits(item)]


def pytest_collection_finish(session):
    keys = []
    for item in session.items:
        kind = _GATE_TESTS.get(getattr(item, "originalname", ""))
        not_run = any(m.kwargs.get("run") is False for m in item.iter_markers("xfail"))  # a listed miss
        if kind and item.module.__name__ in _GATE_MODULES and not not_run:
            name = item.callspec.params["name"]
            keys.append((kind[0], name) if kind[1] is None else (kind[0], name, item.callspec.params[kind[1]]))
    if keys and not session.config.option.collectonly:
        sys.modules["_gate_pool"].start(keys)  # imported by test_public_gate.py and test_public_programs.py


def pytest_sessionfinish(session, exitstatus):
    pool = sys.modules.get("_gate_pool")
    if pool is not None:
        pool.stop()
