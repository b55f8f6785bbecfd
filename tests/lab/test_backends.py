"""Issue 4's identity rule: a seed's record does not depend on the backend that ran it. Plus what every
parallel backend owes: records streamed to the driver as runs finish, a progress bar, a crashed
worker recorded as a failed run, and (process backend) Ctrl-C that keeps finished runs and resumes."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _paths import ROOT
from conftest import ok_seeds

import firstdiv
from firstdiv.lab import sweep as sweep_module
from firstdiv.lab.store import Store

CRASHY = str(ROOT / "tests" / "workloads" / "crashy.py")
FUNCTIONAL = str(ROOT / "tests" / "workloads" / "functional.py")
MLP_SETS = ["epochs=3", "n_train=600"]
SEEDS = "0-5"

try:
    import ray
    RAY_MISSING = None
except ImportError as exc:  # make test installs it (the dev extra); elsewhere: pip install 'firstdiv[ray]'
    ray = None
    RAY_MISSING = f"ray cannot be imported ({exc}); install it with pip install 'firstdiv[ray]'"
needs_ray = pytest.mark.skipif(RAY_MISSING is not None, reason=RAY_MISSING or "")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray with 2 CPUs for the module (start-up takes seconds); the backend must leave it running."""
    if RAY_MISSING:
        pytest.skip(RAY_MISSING)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


class _Bar:
    """Stands in for the rich progress bar (shown only on a terminal) to see what the sweep tells it."""

    def __init__(self):
        self.total, self.advanced = None, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, _name, total):
        self.total = total
        return 0

    def advance(self, _task):
        self.advanced += 1


# -- 1. the identity rule -----------------------------------------------------------------------

def _backend_params():
    yield pytest.param("process", id="process")
    yield pytest.param("ray", id="ray", marks=needs_ray)
    yield pytest.param("vectorized", id="vectorized")


def _run_pair(backend, store, monkeypatch):
    """Baseline and lr=0.2 sweeps of builtin:mlp on one backend; each bar and each record is checked."""
    out = []
    for sets in (MLP_SETS, MLP_SETS + ["lr=0.2"]):
        bar, seen = _Bar(), []
        monkeypatch.setattr(sweep_module, "_progress", lambda enabled, total, label, bar=bar: bar)
        res = firstdiv.sweep("builtin:mlp", SEEDS, sets=sets, store=store, backend=backend, workers=2,
                             progress=True, on_record=lambda r, seen=seen: seen.append(r.seed))
        assert res.failed == () and res.ran == tuple(range(6)), (backend, res.failed)
        assert sorted(seen) == list(range(6)), f"{backend}: done() must be called once per seed, got {seen}"
        assert (bar.total, bar.advanced) == (6, 6), f"{backend}: the progress bar saw {bar.advanced}/{bar.total}"
        out.append(res)
    return out


def _verdict(base, cand):
    """The comparison's reading (exact) and its statistics (numbers, flattened)."""
    d = firstdiv.compare(base, cand, metric="val_loss").details
    reading = {k: d[k] for k in ("verdict", "direction", "identity", "design", "shared_seeds", "resolved",
                                 "seeds_to_resolve")}
    numbers = {f"{part}.{k}": v for part in ("paired", "unpaired", "noise_floor") for k, v in (d[part] or {}).items()}
    return reading, numbers


def _same(a, b, *, exact):
    """The identity rule, field by field. examples_per_s is a measured speed, not a result."""
    for field in ("seed", "identity", "config_hash", "eval_fingerprint", "eval_fields", "data_identity",
                  "env_hash", "code", "status"):
        assert getattr(a, field) == getattr(b, field), (field, a.seed)
    final_a = {k: v for k, v in a.final.items() if k != "examples_per_s"}
    final_b = {k: v for k, v in b.final.items() if k != "examples_per_s"}
    assert final_a.keys() == final_b.keys() and a.curves.keys() == b.curves.keys()
    if exact:
        assert a.curves == b.curves, a.seed
        assert final_a == final_b, a.seed
        assert a.state_hash == b.state_hash, a.seed
        assert a.grad_norm == b.grad_norm, a.seed
    else:
        for name in a.curves:
            assert a.curves[name] == pytest.approx(b.curves[name], abs=1e-6, rel=0), (name, a.seed)
        assert final_a == pytest.approx(final_b, abs=1e-6, rel=0), a.seed


@pytest.mark.parametrize("backend", list(_backend_params()))
def test_backend_gives_the_serial_records_and_verdicts(backend, tmp_path, monkeypatch, request):
    if backend == "ray":
        request.getfixturevalue("local_ray")
    serial = _run_pair("serial", tmp_path / "serial.db", monkeypatch)
    other = _run_pair(backend, tmp_path / f"{backend}.db", monkeypatch)
    for s_res, o_res in zip(serial, other):
        assert [r.seed for r in o_res.records] == [r.seed for r in s_res.records] == list(range(6))
        for a, b in zip(s_res.records, o_res.records):
            _same(a, b, exact=backend != "vectorized")
    (reading, numbers), (serial_reading, serial_numbers) = _verdict(*other), _verdict(*serial)
    assert reading == serial_reading
    if backend == "vectorized":  # values within 1e-6 move the statistics by about as little
        assert numbers.keys() == serial_numbers.keys()
        for key, value in numbers.items():
            if isinstance(value, (float, list)):
                assert value == pytest.approx(serial_numbers[key], rel=1e-4, abs=1e-6), key
            else:  # counts, names of tests, None where a test could not run
                assert value == serial_numbers[key], key
    else:
        assert numbers == serial_numbers
    if backend == "ray":
        assert ray.is_initialized(), "the ray backend shut down a Ray it did not start"


# -- 2. streaming: the driver writes each record as its run finishes -----------------------------

@pytest.mark.parametrize("backend", ["process", pytest.param("ray", marks=needs_ray)])
def test_records_reach_the_store_while_other_seeds_still_run(backend, tmp_path, request):
    """Seed 1 waits for a file that the driver creates on receiving seed 0's record: a backend that
    reported only at the end would make seed 1 time out."""
    if backend == "ray":
        request.getfixturevalue("local_ray")
    gate, store = tmp_path / "gate", tmp_path / "runs.db"
    seen = []

    def on_record(rec):
        with Store(store) as st:
            seen.append((rec.seed, sorted(st.recorded_seeds(rec.identity))))
        gate.touch()

    res = firstdiv.sweep(f"{CRASHY}:gated", "0-1", sets=[f"gate={gate}", "patience=60"], store=store,
                         backend=backend, workers=2, on_record=on_record)
    assert res.failed == (), res.failed[0].error
    assert seen == [(0, [0]), (1, [0, 1])], "each record is in the store when the driver hands it on"


# -- 3. a crashed worker is a failed run, not a failed sweep -------------------------------------

@pytest.mark.parametrize("backend", ["process", pytest.param("ray", marks=needs_ray)])
def test_worker_that_exits_mid_run_is_a_failed_seed_and_the_rest_complete(backend, tmp_path, request):
    if backend == "ray":
        request.getfixturevalue("local_ray")
    attempts = tmp_path / "attempts"
    store = tmp_path / "runs.db"
    sets = ["crash_seed=2", f"attempts={attempts}"]
    res = firstdiv.sweep(f"{CRASHY}:train", "0-5", sets=sets, store=store, backend=backend, workers=2)
    assert [r.seed for r in res.records] == [0, 1, 3, 4, 5]
    assert [r.seed for r in res.failed] == [2]
    error = res.failed[0].error
    if backend == "process":
        assert "seed 2" in error and "exit code 3" in error and "--backend serial" in error, error
        assert attempts.read_text().count("\n") == 1
    else:
        assert "seed 2" in error and "retried once" in error and "WorkerCrashedError" in error, error
        assert attempts.read_text().count("\n") == 2, "a crashed Ray task is retried exactly once"
    with Store(store) as st:
        rows = {r.seed: r.status for r in st.iter_runs()}
    assert rows == {0: "ok", 1: "ok", 2: "failed", 3: "ok", 4: "ok", 5: "ok"}
    if backend == "process":  # a rerun retries only the failed seed (and it crashes again)
        again = firstdiv.sweep(f"{CRASHY}:train", "0-5", sets=sets, store=store, backend=backend, workers=2)
        assert again.ran == (2,) and [r.seed for r in again.failed] == [2]


def test_process_workers_that_die_while_starting_stop_the_sweep_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr("firstdiv.lab.backends._pool._serve", _die_at_start)
    with pytest.raises(firstdiv.WorkloadError, match=r"die while starting.*exit code 7.*if __name__"):
        firstdiv.sweep(f"{CRASHY}:train", "0-3", store=tmp_path / "runs.db", backend="process", workers=2)
    with Store(tmp_path / "runs.db") as st:
        assert st.count_runs() == 0, "no seed is blamed for a worker that never started"


def _die_at_start(*_args):
    os._exit(7)


# -- 4. Ctrl-C on the process backend ------------------------------------------------------------

def _descendants(pid):
    kids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the worker processes")
@pytest.mark.parametrize("backend", ["process", "vectorized"])
def test_ctrl_c_with_worker_processes_exits_130_stops_workers_keeps_runs_and_resumes(backend, tiny, cli, tmp_path,
                                                                                      store_path):
    if backend == "process":
        work = [f"{tiny}:train", "--set", "sleep=0.2"]
    else:  # stacks of one seed, each long enough to be interrupted
        work = [f"{FUNCTIONAL}:train", "--set", "epochs=60", "--chunk", "1"]
    args = ["sweep", *work, "--seeds", "0-7", "--backend", backend, "--workers", "2", "--store", str(store_path)]
    env = dict(os.environ)
    env.pop("FIRSTDIV_STORE", None)
    # Its own process group, so that SIGINT reaches every process of the sweep, as Ctrl-C at a terminal does.
    proc = subprocess.Popen([sys.executable, "-m", "firstdiv", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 (the child must take Ctrl-C as a user's shell gives it)
    try:
        deadline = time.monotonic() + 90
        while len(ok_seeds(store_path)) < 2:
            assert proc.poll() is None, f"the sweep exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "fewer than 2 runs recorded in 90 s"
            time.sleep(0.05)
        workers = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "firstdiv: interrupted; recorded runs are kept and a rerun resumes"
    deadline = time.monotonic() + 15
    while [p for p in workers if Path(f"/proc/{p}").exists()] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if Path(f"/proc/{p}").exists()], "worker processes outlived the interrupted sweep"
    kept = ok_seeds(store_path)
    assert 2 <= len(kept) < 8
    out = json.loads(cli(*args, "--json", cwd=tmp_path).stdout)["payload"]
    assert out["reused"] == kept and out["ran"] == sorted(set(range(8)) - set(kept)) and out["failed"] == []


# -- 5. the ray backend from the command line, and without ray -----------------------------------

@needs_ray
def test_cli_ray_starts_a_local_ray_and_shuts_it_down(cli, tmp_path):
    before = set(_ray_processes())
    proc = cli("sweep", f"{CRASHY}:train", "--seeds", "0-3", "--backend", "ray", "--workers", "2",
               "--store", tmp_path / "runs.db", "--json", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["payload"]
    assert out["ran"] == [0, 1, 2, 3] and out["failed"] == []
    serial = firstdiv.sweep(f"{CRASHY}:train", "0-3", store=tmp_path / "serial.db")
    assert [r["final"] for r in out["runs"]] == [r.final for r in serial.records]
    deadline = time.monotonic() + 20
    while set(_ray_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(_ray_processes()) - before, "the Ray started for the sweep outlived it"


def _ray_processes():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"raylet" in cmd or b"gcs_server" in cmd:
                yield int(entry)


def test_missing_ray_is_a_usage_error_with_the_install_line(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from firstdiv.cli import main\n"
            f"sys.exit(main(['sweep', {CRASHY + ':train'!r}, '--seeds', '0-1', '--backend', 'ray', "
            f"'--store', {str(tmp_path / 'runs.db')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [("firstdiv: error: --backend ray needs Ray, which is not installed "
                                                 "here; install it with: pip install 'firstdiv[ray]'")]
    assert not (tmp_path / "runs.db").exists(), "nothing is written when the backend cannot run"


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork server")
def test_fork_server_preloads_torch_optim_imports_only_for_workloads_that_may_use_them(monkeypatch):
    import multiprocessing.context as mpc

    from firstdiv.lab.backends import _pool as process

    seen = []
    monkeypatch.setattr(mpc.ForkServerContext, "set_forkserver_preload", lambda self, names: seen.append(list(names)))
    process.context("builtin:mlp")
    process.context(f"{CRASHY}:train")
    process.context(None)
    assert "torch" in seen[0] and "torch._dynamo" not in seen[0]  # built-in workloads never build a torch.optim
    assert "torch._dynamo" in seen[1] and "torch._dynamo" in seen[2]
