import difflib
import json
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
    if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist gives its workers the controller's terminal width (COLUMNS=80
        os.environ.pop("COLUMNS", None)  # without a terminal): the tests' commands see what one process would give them
        os.environ.pop("LINES", None)


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


def _corpus_summary() -> dict | None:
    """This process's share of the real-program corpus's summary, as plain values (None when no corpus test ran
    here): the counts of ``tests/realworld/_results.py``, the gate workers' CPU seconds, and the public scope."""
    results, pool, gate = (sys.modules.get(m) for m in ("_results", "_gate_pool", "test_public_gate"))
    out = {"results": results.plain(results.RESULTS) if results is not None else None,
           "cpu": pool.plain_cpu() if pool is not None else [],
           "scope": [len(gate.SELECTED), len(gate.PUBLIC)] if gate is not None else None}
    return out if out["results"] or out["cpu"] else None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under pytest-xdist: keep each worker's share of the corpus summary for the controller's terminal summary."""
    part = getattr(node, "workeroutput", {}).get("firstdiv_corpus")
    if part:
        _WORKER_PARTS.append(json.loads(part))


_WORKER_PARTS: list[dict] = []


def pytest_terminal_summary(terminalreporter):
    """The real-program corpus's counts (tests/realworld/_results.py), when its gates ran, and what the public gate
    covered and cost (in this process, or added up over the pytest-xdist workers)."""
    parts = _WORKER_PARTS or [p for p in [_corpus_summary()] if p]
    if not parts:
        return
    sys.path.insert(0, str(ROOT / "tests" / "realworld"))
    try:
        import _gate_pool
        import _results
        import _scope
    finally:
        sys.path.pop(0)
    lines = _results.counts(_results.merge([p["results"] for p in parts if p["results"]]))
    if lines:
        terminalreporter.section("real-program corpus")
        for line in lines:
            terminalreporter.write_line(line)
    lines = _gate_pool.cost_lines([row for p in parts for row in p["cpu"]])
    scope = next((p["scope"] for p in parts if p["scope"]), None)
    if lines and scope:  # what the gate covered: a fixed sample unless FIRSTDIV_CORPUS=full
        lines.insert(0, _scope.line(*scope))
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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadfile`` (``make test``): each test file goes to one worker as a whole (its module fixtures
    are built once), except the public gate's per-program tests, which go one by one: they come last (see
    :func:`pytest_collection_modifyitems`), and hundreds of short independent jobs even out the workers' ends."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesThenGateTests(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path.rsplit("/", 1)[-1][:-3] in _GATE_MODULES else path

    return FilesThenGateTests(config, log)


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
    if keys and not session.config.option.collectonly and not sys.modules["_gate_pool"].under_xdist():
        sys.modules["_gate_pool"].start(keys)  # imported by test_public_gate.py and test_public_programs.py


def pytest_sessionfinish(session, exitstatus):
    pool = sys.modules.get("_gate_pool")
    if pool is not None:
        pool.stop()
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: its share of the summary goes to the controller
        part = _corpus_summary()
        if part:
            session.config.workeroutput["firstdiv_corpus"] = json.dumps(part)
