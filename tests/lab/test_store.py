"""The SQLite run store: concurrent writers, resume after a kill, failed runs, --force, and refusing
(clearly, without touching the file) stores it cannot or must not write."""

import json
import multiprocessing as mp
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import traceback

import pytest
from conftest import ok_seeds

from firstdiv.errors import NotFound, StoreError
from firstdiv.lab.store import SCHEMA_VERSION, Store

# -- helpers ------------------------------------------------------------------------------------

def _runs(path):
    """(identity, seed, status) of every row in the runs table, read with plain sqlite3."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT identity, seed, status FROM runs ORDER BY identity, seed").fetchall()
    conn.close()
    return rows


def _one_error_line(proc):
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got:\n{proc.stderr}"
    assert lines[0].startswith("firstdiv: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def _sweep_json(proc, expected_rc=0):
    assert proc.returncode == expected_rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout)["payload"]


def _tree(root):
    """Every file under root with its bytes: a snapshot to prove nothing was written."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _make_store(path, seeds=(0, 1, 2)):
    """A valid store with one sweep (written through the Store API; no workload needed)."""
    with Store(path) as st:
        st.upsert_sweep("s", "ident", "w.py:train", {"config": {}}, list(seeds))
    return path


# -- 1. concurrent writers ---------------------------------------------------------------------

def _concurrent_sweep(target, seeds, name, store, barrier, queue):
    """Worker (spawned): warm the imports, wait for the others, then sweep into the shared store."""
    try:
        import torch  # noqa: F401  (import cost before the barrier so all writers really overlap)

        from firstdiv.lab.sweep import sweep

        barrier.wait(timeout=120)
        start = time.time()
        res = sweep(target, seeds, name=name, sets=["sleep=0.05"], store=store)
        queue.put({"name": name, "seeds": seeds, "ran": list(res.ran), "reused": list(res.reused),
                   "records": [r.seed for r in res.records], "identity": res.sweep.identity,
                   "start": start, "end": time.time(), "error": None})
    except BaseException:  # noqa: BLE001 - a child process reports whatever stopped it to the parent
        queue.put({"name": name, "error": traceback.format_exc()})


def test_concurrent_writers_lose_and_duplicate_nothing(store_path, tiny):
    plan = [("shared", list(range(8))), ("shared", list(range(4, 12))),
            ("other", list(range(8, 16))), ("evens", list(range(0, 20, 2)))]
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(len(plan)), ctx.Queue()
    procs = [ctx.Process(target=_concurrent_sweep, args=(f"{tiny}:train", seeds, name, str(store_path), barrier, queue))
             for name, seeds in plan]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=180) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in results if r["error"]]
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in procs)
    # Precondition: the writers really ran at the same time, into one identity.
    assert max(r["start"] for r in results) < min(r["end"] for r in results)
    identities = {r["identity"] for r in results}
    assert len(identities) == 1
    (ident,) = identities

    for r in results:  # each caller got its whole sweep back
        assert sorted(r["ran"] + r["reused"]) == r["seeds"]
        assert r["records"] == r["seeds"]

    expected = sorted(set().union(*(seeds for _, seeds in plan)))
    rows = _runs(store_path)
    assert rows == [(ident, s, "ok") for s in expected]  # each (identity, seed) exactly once
    with Store(store_path) as st:
        assert st.count_runs() == len(expected)
        assert sorted(r.seed for r in st.iter_runs()) == expected
        sweeps = {s.name: s for s in st.sweeps()}
        assert sorted(sweeps) == ["evens", "other", "shared"]
        want = {"shared": list(range(12)), "other": list(range(8, 16)), "evens": list(range(0, 20, 2))}
        for name, seeds in want.items():
            assert list(sweeps[name].seeds) == seeds, name
            assert [r.seed for r in st.records(sweeps[name])] == seeds, name


# -- 2. resume after a kill --------------------------------------------------------------------

def test_sweep_killed_halfway_resumes_with_only_missing_seeds(store_path, tiny, cli, tmp_path):
    args = ["sweep", f"{tiny}:train", "--seeds", "0-9", "--set", "sleep=0.2", "--name", "resume",
            "--store", store_path]
    env = dict(os.environ, COLUMNS="120")
    env.pop("FIRSTDIV_STORE", None)
    proc = subprocess.Popen([sys.executable, "-m", "firstdiv", *map(str, args)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while len(ok_seeds(store_path)) < 2:
            assert proc.poll() is None, f"sweep exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the sweep recorded fewer than 2 runs in 90 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    before = ok_seeds(store_path)
    assert 2 <= len(before) < 10, before  # killed half-way
    missing = sorted(set(range(10)) - set(before))

    out = _sweep_json(cli(*args, "--json", cwd=tmp_path))
    assert out["reused"] == before, "the rerun did not reuse the recorded runs (did the identity change?)"
    assert out["ran"] == missing
    assert out["failed"] == []
    assert out["seeds"] == list(range(10))
    assert out["sweep"]["seeds"] == list(range(10))
    rows = _runs(store_path)
    assert [(seed, status) for _, seed, status in rows] == [(s, "ok") for s in range(10)]
    assert {ident for ident, _, _ in rows} == {out["sweep"]["identity"]}


# -- 3-5. stores that cannot or must not be written ----------------------------------------------

def test_corrupt_file_gives_store_error_and_is_not_overwritten(tmp_path, cli):
    path = tmp_path / "runs.db"
    path.write_bytes(random.Random(0).randbytes(16384))
    before = path.read_bytes()

    with pytest.raises(StoreError, match="not a readable firstdiv store"):
        Store(path)
    proc = cli("runs", "--store", path, cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert str(path) in line
    assert path.read_bytes() == before


def test_store_damaged_past_first_page_gives_store_error(tmp_path, cli):
    path = _make_store(tmp_path / "runs.db")
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        keep = {1} | {r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name='meta'")}
    conn.close()
    data = bytearray(path.read_bytes())
    rng = random.Random(1)
    for page in range(2, len(data) // page_size + 1):  # damage every table but meta: the store still opens
        if page not in keep:
            data[(page - 1) * page_size: page * page_size] = rng.randbytes(page_size)
    path.write_bytes(bytes(data))
    before = path.read_bytes()

    proc = cli("runs", "--store", path, cwd=tmp_path)
    assert path.read_bytes() == before
    assert proc.returncode == 2, proc.stderr
    _one_error_line(proc)
    with pytest.raises(StoreError), Store(path) as st:
        st.sweeps()


def test_newer_schema_version_is_refused_naming_both_versions(tmp_path, cli):
    path = _make_store(tmp_path / "runs.db")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    before = path.read_bytes()

    def names_both(message):
        words = set(re.findall(r"\d+", message.replace(str(path), "")))
        return {str(SCHEMA_VERSION), str(SCHEMA_VERSION + 1)} <= words and "newer" in message

    with pytest.raises(StoreError) as err:
        Store(path)
    assert names_both(str(err.value)), str(err.value)
    proc = cli("runs", "--store", path, cwd=tmp_path)
    assert proc.returncode == 2
    assert names_both(_one_error_line(proc))
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:  # the newer store is still what it was
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION + 1)
    conn.close()


def _foreign_db(path):
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
    conn.close()
    return path


def test_foreign_sqlite_database_gives_clear_error(tmp_path, cli):
    path = _foreign_db(tmp_path / "other.db")
    with pytest.raises(StoreError, match="not a firstdiv store"):
        Store(path)
    proc = cli("runs", "--store", path, cwd=tmp_path)
    assert proc.returncode == 2
    assert "not a firstdiv store" in _one_error_line(proc)
    with sqlite3.connect(path) as conn:  # no firstdiv tables were added to it
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"notes"}
        assert conn.execute("SELECT body FROM notes").fetchall() == [("keep me",)]
    conn.close()


def test_foreign_sqlite_database_is_not_modified(tmp_path, cli):
    path = _foreign_db(tmp_path / "other.db")
    before = path.read_bytes()
    with pytest.raises(StoreError):
        Store(path)
    assert cli("runs", "--store", path, cwd=tmp_path).returncode == 2
    assert path.read_bytes() == before


def test_unwritable_store_path_exits_2_and_writes_nothing(tmp_path, cli, tiny):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    path = blocker / "sub" / "runs.db"
    before = _tree(tmp_path)

    with pytest.raises(StoreError, match="Cannot create the run store"):
        Store(path)
    proc = cli("sweep", f"{tiny}:train", "--seeds", "0-1", "--store", path, "--json", cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert str(path) in line and "--store" in line
    assert json.loads(proc.stdout)["error"]["message"] in line  # --json: the error as the one JSON object
    assert _tree(tmp_path) == before  # no store, no .firstdiv/ in the working directory


def test_reading_commands_do_not_create_a_store(tmp_path, store_path):
    with pytest.raises(NotFound):
        Store(store_path, create=False)
    assert not store_path.exists() and not store_path.parent.exists()


# -- 6. failed runs ------------------------------------------------------------------------------

def test_failed_seed_is_recorded_and_retried_alone(store_path, tiny, cli, tmp_path):
    args = ["sweep", f"{tiny}:train", "--seeds", "0-5", "--set", "fail_seed=3", "--store", store_path]
    first = cli(*args, cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    assert "seed 3 exploded" in first.stdout + first.stderr
    rows = _runs(store_path)
    assert [(seed, status) for _, seed, status in rows] == [(s, "failed" if s == 3 else "ok") for s in range(6)]
    with Store(store_path) as st:
        (sw,) = st.sweeps()
        assert [r.seed for r in st.records(sw)] == [0, 1, 2, 4, 5]
        failed = [r for r in st.records(sw, include_failed=True) if not r.ok]
        assert [r.seed for r in failed] == [3] and "RuntimeError: seed 3 exploded" in failed[0].error

    out = _sweep_json(cli(*args, "--json", cwd=tmp_path), expected_rc=1)
    assert out["ran"] == [3]
    assert out["reused"] == [0, 1, 2, 4, 5]
    assert [f["seed"] for f in out["failed"]] == [3] and "seed 3 exploded" in out["failed"][0]["error"]
    assert len(_runs(store_path)) == 6  # the new failure replaced the old one


FLAKY = textwrap.dedent('''
    import os

    def train(seed, config, rec):
        """Fails at the seeds in $FLAKY_FAIL_SEEDS: a transient failure (OOM, preemption), not in the identity."""
        if str(seed) in os.environ.get("FLAKY_FAIL_SEEDS", "").split(","):
            raise RuntimeError(f"transient failure at seed {seed}")
        rec.log(val_loss=1.0 + seed / 100)
''')


def test_rerun_after_transient_failure_runs_only_that_seed_and_replaces_it(store_path, tmp_path, monkeypatch):
    from firstdiv.lab.sweep import sweep

    wl = tmp_path / "flaky.py"
    wl.write_text(FLAKY)
    monkeypatch.setenv("FLAKY_FAIL_SEEDS", "3")
    first = sweep(f"{wl}:train", "0-4", store=store_path)
    assert first.ran == (0, 1, 2, 3, 4)
    assert [r.seed for r in first.failed] == [3] and "transient failure at seed 3" in first.failed[0].error
    assert [r.seed for r in first.records] == [0, 1, 2, 4]

    monkeypatch.delenv("FLAKY_FAIL_SEEDS")
    second = sweep(f"{wl}:train", "0-4", store=store_path)
    assert second.sweep.identity == first.sweep.identity
    assert second.ran == (3,)
    assert second.reused == (0, 1, 2, 4)
    assert second.failed == ()
    assert [r.seed for r in second.records] == [0, 1, 2, 3, 4]
    rows = _runs(store_path)
    assert [(seed, status) for _, seed, status in rows] == [(s, "ok") for s in range(5)]


# -- 7. --force ------------------------------------------------------------------------------------

def test_force_reruns_recorded_seeds_without_duplicating(store_path, tiny):
    from firstdiv.lab.sweep import sweep

    first = sweep(f"{tiny}:train", "0-3", store=store_path)
    assert first.ran == (0, 1, 2, 3)
    created = {r.seed: r.created for r in first.records}

    forced = sweep(f"{tiny}:train", "0-3", store=store_path, force=True)
    assert forced.sweep.identity == first.sweep.identity
    assert forced.ran == (0, 1, 2, 3)
    assert forced.reused == ()
    assert [r.seed for r in forced.records] == [0, 1, 2, 3]
    assert forced.values("val_loss") == first.values("val_loss")  # the same runs, re-executed
    rows = _runs(store_path)
    assert [(seed, status) for _, seed, status in rows] == [(s, "ok") for s in range(4)]
    with Store(store_path) as st:
        assert st.count_runs() == 4
        recreated = {r.seed: r.created for r in st.iter_runs()}
        (sw,) = st.sweeps()
        assert list(sw.seeds) == [0, 1, 2, 3]
    assert all(recreated[s] > created[s] for s in range(4))  # the stored records are the new runs

    again = sweep(f"{tiny}:train", "0-3", store=store_path)  # and they count as recorded
    assert again.ran == () and again.reused == (0, 1, 2, 3)


def test_force_flag_on_the_cli_reruns_every_seed(store_path, tiny, cli, tmp_path):
    from firstdiv.lab.sweep import sweep

    first = sweep(f"{tiny}:train", "0-2", store=store_path, name="f")
    out = _sweep_json(cli("sweep", f"{tiny}:train", "--seeds", "0-2", "--name", "f", "--store", store_path,
                          "--force", "--json", cwd=tmp_path))
    assert out["sweep"]["identity"] == first.sweep.identity
    assert out["ran"] == [0, 1, 2] and out["reused"] == []
    assert [(seed, status) for _, seed, status in _runs(store_path)] == [(s, "ok") for s in range(3)]


# -- 8. schema -------------------------------------------------------------------------------------

def test_fresh_store_has_current_schema_version_and_wal(store_path):
    with Store(store_path):
        pass
    assert store_path.is_file()
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"meta", "runs", "sweeps", "sweep_seeds"} <= tables
    conn.close()
    # Reopening a current store migrates nothing and keeps what is there.
    _make_store(store_path, seeds=(5,))
    with Store(store_path) as st:
        assert [s.seeds for s in st.sweeps()] == [(5,)]


def test_ctrl_c_exits_130_keeps_recorded_runs_and_resumes(store_path, tiny, cli, tmp_path):
    args = ["sweep", f"{tiny}:train", "--seeds", "0-7", "--set", "sleep=0.2", "--store", str(store_path)]
    proc = subprocess.Popen([sys.executable, "-m", "firstdiv", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - no threads yet
    deadline = time.time() + 60
    while time.time() < deadline and len(ok_seeds(store_path)) < 2:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "firstdiv: interrupted; recorded runs are kept and a rerun resumes"
    kept = sorted(seed for _, seed, status in _runs(store_path) if status == "ok")
    assert 2 <= len(kept) < 8
    out = _sweep_json(cli(*args, "--json", cwd=tmp_path))
    assert out["reused"] == kept and sorted(out["ran"] + out["reused"]) == list(range(8))
