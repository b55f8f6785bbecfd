"""Issue 13, the store's part: --force never rewrites another sweep's runs, a damaged record is one
error naming the run, a malformed schema version or a lock is said plainly, a read-only store can be
read, firstdiv's own files are not code, terminal escapes never reach the terminal, a gate file
cannot be tampered with, and an unreachable Ray cluster fails before anything is written."""

import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import TINY, run_cli

from firstdiv.errors import StoreError
from firstdiv.lab.store import SCHEMA_VERSION, Store
from firstdiv.lab.sweep import sweep


def _one_error_line(proc):
    assert proc.returncode == 2, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got:\n{proc.stderr}"
    assert lines[0].startswith("firstdiv: error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def wl(tmp_path):
    """tiny.py outside any git tree: its code identity cannot move while other files are edited."""
    path = tmp_path / "wl" / "tiny.py"
    path.parent.mkdir()
    shutil.copy(TINY, path)
    return f"{path}:train"


@pytest.fixture
def sp(tmp_path):
    return tmp_path / "store" / "runs.db"


# -- item 2: --force appends, another sweep's records never change ----------------------------------

def test_force_under_a_new_name_leaves_the_older_sweeps_records_untouched(wl, sp):
    old = sweep(wl, "0-2", store=sp, name="old")
    forced = sweep(wl, "0-2", store=sp, name="new", force=True)
    assert forced.sweep.identity == old.sweep.identity and forced.ran == (0, 1, 2)
    with Store(sp) as st:
        old_now = st.records(st.find_sweep("old"))
        new_now = st.records(st.find_sweep("new"))
    assert [r.to_dict() for r in old_now] == [r.to_dict() for r in old.records]  # timestamps, throughput: all
    assert [r.to_dict() for r in new_now] == [r.to_dict() for r in forced.records]
    assert all(n.created > o.created for n, o in zip(new_now, old_now))

    again = sweep(wl, "0-2", store=sp, name="old")  # the older sweep still reuses exactly its runs
    assert again.ran == () and [r.to_dict() for r in again.records] == [r.to_dict() for r in old.records]


def test_forcing_one_sweep_twice_keeps_one_record_per_seed_and_others_views(wl, sp):
    sweep(wl, "0-1", store=sp, name="a")
    b1 = sweep(wl, "0-1", store=sp, name="b", force=True)
    b2 = sweep(wl, "0-1", store=sp, name="b", force=True)
    with Store(sp) as st:
        assert st.count_runs() == 4  # a's two runs and b's latest two: b's first forced pair was replaced
        assert [r.created for r in st.records(st.find_sweep("b"))] == [r.created for r in b2.records]
        assert all(r.created not in {x.created for x in b1.records} for r in st.records(st.find_sweep("a")))
    c = sweep(wl, "0-2", store=sp, name="c")  # a new plain sweep reads the newest ok runs, runs only seed 2
    assert c.ran == (2,) and [r.created for r in c.records[:2]] == [r.created for r in b2.records]


def test_version_2_store_migrates_keeping_every_run_and_sweep(tmp_path, wl, sp):
    from firstdiv.lab import store_schema

    first = sweep(wl, "0-1", store=sp, name="main")
    v2 = tmp_path / "v2.db"
    with sqlite3.connect(v2) as conn:  # a store as version 2 wrote it
        for script in store_schema.MIGRATIONS[:2]:
            conn.executescript(script)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        src = sqlite3.connect(sp)
        for row in src.execute("SELECT id, identity, seed, workload, status, created, record FROM runs"):
            conn.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        for row in src.execute("SELECT id, name, identity, workload, created, info FROM sweeps"):
            conn.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?)", row)
        for row in src.execute("SELECT sweep_id, seed FROM sweep_seeds"):
            conn.execute("INSERT INTO sweep_seeds VALUES (?, ?)", row)
        src.close()
    conn.close()
    with Store(v2) as st:
        assert st._rows("SELECT value FROM meta WHERE key='schema_version'")[0][0] == str(SCHEMA_VERSION)
        assert [r.to_dict() for r in st.records(st.find_sweep("main"))] == [r.to_dict() for r in first.records]
    assert sweep(wl, "0-1", store=v2, name="main").ran == ()


# -- item 5: a damaged record is one error naming the run; other sweeps stay usable -------------------

def _damage(sp, sweep_name, seed, how):
    """Flip what a byte flip does inside a run's JSON: break the syntax, or a field name."""
    with sqlite3.connect(sp) as conn:
        ident = conn.execute("SELECT identity FROM sweeps WHERE name=?", (sweep_name,)).fetchone()[0]
        run_id, payload = conn.execute("SELECT id, record FROM runs WHERE identity=? AND seed=?", (ident, seed)).fetchone()
        damaged = payload.replace('"final"', '"fin@l"') if how == "key" else payload[:40] + "\x01" + payload[41:]
        conn.execute("UPDATE runs SET record=? WHERE id=?", (damaged, run_id))
    conn.close()
    return run_id


@pytest.mark.parametrize("how", ["json", "key"])
def test_damaged_record_is_a_store_error_naming_the_run(wl, sp, how):
    sweep(wl, "0-1", store=sp, name="other", sets=["shift=0.5"])
    sweep(wl, "0-1", store=sp, name="hurt")
    run_id = _damage(sp, "hurt", 1, how)
    with Store(sp) as st:
        with pytest.raises(StoreError) as err:
            st.records(st.find_sweep("hurt"))
        assert len(st.records(st.find_sweep("other"))) == 2  # the other sweep reads as before
    assert f"run {run_id} (sweep 'hurt', seed 1)" in str(err.value) and f"runs --drop {run_id}" in str(err.value)


@pytest.mark.quality
def test_damaged_record_fails_each_command_in_one_line_and_drop_then_rerun_repairs_it(tmp_path, wl, sp):
    sweep(wl, "0-1", store=sp, name="base", sets=["shift=0.5"])
    sweep(wl, "0-1", store=sp, name="cand", sets=["shift=0.6"])
    sweep(wl, "0-1", store=sp, name="hurt")
    run_id = _damage(sp, "hurt", 1, "json")

    store = ["--store", str(sp)]
    listed = run_cli("runs", *store, cwd=tmp_path)  # the listing goes on: the readable sweeps, then the damaged one named
    assert listed.returncode == 0 and "sweep hurt" in listed.stdout, listed.stderr
    assert f"firstdiv runs --drop {run_id}" in " ".join(listed.stdout.split()), listed.stdout
    listing = json.loads(run_cli("runs", *store, "--json", cwd=tmp_path).stdout)["payload"]
    assert [s["name"] for s in listing["sweeps"]] == ["base", "cand"] and [d["name"] for d in listing["damaged"]] == ["hurt"]
    for args in (["compare", "base", "hurt"], ["report", "hurt", "--html", str(tmp_path / "r.html")],
                 ["sweep", wl, "--seeds", "0-1", "--name", "hurt"], ["curves", "base", "hurt"]):
        line = _one_error_line(run_cli(*args, *store, cwd=tmp_path))
        assert f"run {run_id} (sweep 'hurt', seed 1)" in line and "damaged" in line, line
        assert f"firstdiv runs --drop {run_id}" in line, line
    ok = run_cli("compare", "base", "cand", *store, "--json", cwd=tmp_path)
    assert ok.returncode == 0 and json.loads(ok.stdout)["payload"]["verdict"], ok.stderr  # the other sweeps are untouched

    dropped = run_cli("runs", "--drop", str(run_id), *store, cwd=tmp_path)
    assert dropped.returncode == 0 and "seed 1" in dropped.stdout and "'hurt'" in dropped.stdout, dropped.stderr
    again = run_cli("sweep", wl, "--seeds", "0-1", "--name", "hurt", *store, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["payload"]["ran"] == [1]
    assert run_cli("runs", *store, cwd=tmp_path).returncode == 0


def test_drop_of_an_unknown_run_id_is_a_usage_error(tmp_path, wl, sp):
    sweep(wl, "0", store=sp)
    assert "No run with id 99" in _one_error_line(run_cli("runs", "--drop", "99", "--store", sp, cwd=tmp_path))
    assert "integer id" in _one_error_line(run_cli("runs", "--drop", "x", "--store", sp, cwd=tmp_path))


# -- item 14: a schema version that is not an integer -------------------------------------------------

def test_schema_version_that_is_not_an_integer_is_one_line(tmp_path, wl, sp):
    sweep(wl, "0", store=sp)
    with sqlite3.connect(sp) as conn:
        conn.execute("UPDATE meta SET value='three' WHERE key='schema_version'")
    conn.close()
    before = sp.read_bytes()
    with pytest.raises(StoreError, match="schema version 'three', not an integer"):
        Store(sp)
    for args in (["runs"], ["sweep", wl, "--seeds", "0"]):
        assert "not an integer" in _one_error_line(run_cli(*args, "--store", sp, cwd=tmp_path))
    assert sp.read_bytes() == before


# -- item 15: read-only stores are readable; a lock says another process holds it ---------------------

def test_readonly_open_reads_and_refuses_writes(wl, sp):
    first = sweep(wl, "0-1", store=sp, name="main")
    with Store(sp, readonly=True) as st:
        assert [r.to_dict() for r in st.records(st.find_sweep("main"))] == [r.to_dict() for r in first.records]
        with pytest.raises(StoreError, match="Cannot write the run store"):
            st.upsert_sweep("x", "y", "z", {}, [1])


def _as_nobody():
    """Run a command as an unprivileged user: root ignores permission bits, so a read-only test as root is not real."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop privileges to make a directory read-only")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import firstdiv"], check=False, capture_output=True, text=True)
    if probe.returncode != 0:  # e.g. the checkout sits in a 0700 folder: the unprivileged user cannot import it
        pytest.skip(f"an unprivileged user cannot import firstdiv from {sys.executable}: {probe.stderr.strip()[-120:]}")
    return prefix


def _copy_with_unfolded_changes(sp, write):
    """Leave ``sp`` as a copy taken while ``write``'s changes were still in its -wal file only (another reader held
    the store open, so nothing folded them in): a store with a non-empty -wal file and no -shm file."""
    reader = sqlite3.connect(sp)
    reader.execute("SELECT COUNT(*) FROM runs").fetchall()
    write()
    wal = sp.with_name(sp.name + "-wal")
    saved = {p: p.read_bytes() for p in (sp, wal)}
    reader.close()
    assert saved[wal], "the changes were folded into the store before the copy"
    for p, data in saved.items():
        p.write_bytes(data)
    sp.with_name(sp.name + "-shm").unlink(missing_ok=True)


@pytest.mark.quality
def test_store_in_a_readonly_directory_can_be_read_by_every_reading_command(wl):
    prefix = _as_nobody()
    base = Path(tempfile.mkdtemp(prefix="firstdiv-ro-"))  # not under pytest's 0700 tmp dir: nobody must reach it
    try:
        sp = base / "store" / "runs.db"
        shutil.copy(wl.rpartition(":")[0], base / "tiny.py")
        wl = f"{base / 'tiny.py'}:train"
        sweep(wl, "0-1", store=sp, name="a")
        sweep(wl, "0-1", store=sp, name="b", sets=["shift=0.5"])
        _copy_with_unfolded_changes(sp, lambda: sweep(wl, "0-1", store=sp, name="c", sets=["shift=0.7"]))
        for p in (base, *base.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (base / "store").chmod(0o555)
        out = base / "out"
        out.mkdir(mode=0o777)
        out.chmod(0o777)
        before = {p.name: p.read_bytes() for p in (base / "store").iterdir()}
        env = {k: v for k, v in os.environ.items() if k != "FIRSTDIV_STORE"}
        env.update(HOME=str(out), COLUMNS="120", PYTHONDONTWRITEBYTECODE="1")
        for args in (["runs", "--json"], ["compare", "a", "c"], ["curves", "a", "b"],
                     ["report", "a", "b", "--html", str(out / "r.html")]):
            proc = subprocess.run([*prefix, sys.executable, "-m", "firstdiv", *args, "--store", str(sp)], cwd=out,
                                  env=env, check=False, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, (args, proc.stderr)
            if args[0] == "runs":  # sweep c lives in the -wal file only: it is listed too
                assert [s["name"] for s in json.loads(proc.stdout)["payload"]["sweeps"]] == ["a", "b", "c"]
        ui = "import sys, firstdiv.site as s; print(sorted(r.name for r in s.index_rows(sys.argv[1])))"
        proc = subprocess.run([*prefix, sys.executable, "-c", ui, str(sp)], cwd=out, env=env, check=False,
                              capture_output=True, text=True, timeout=120)  # firstdiv ui's index reads it whole too
        assert (proc.returncode, proc.stdout.strip()) == (0, "['a', 'b', 'c']"), proc.stderr
        proc = subprocess.run([*prefix, sys.executable, "-m", "firstdiv", "sweep", wl, "--seeds", "5", "--name", "a",
                               "--store", str(sp)], cwd=out, env=env, check=False, capture_output=True, text=True, timeout=120)
        assert "Cannot write the run store" in _one_error_line(proc)
        assert {p.name: p.read_bytes() for p in (base / "store").iterdir()} == before
        assert not [p for p in Path(tempfile.gettempdir()).glob("firstdiv-store-*") if p.stat().st_uid == 65534]
    finally:
        for p in (base, *base.rglob("*")):
            if p.is_dir():
                p.chmod(stat.S_IRWXU)
        shutil.rmtree(base, ignore_errors=True)


def test_lock_held_by_another_process_is_reported_as_such(wl, sp):
    sweep(wl, "0", store=sp, name="main")
    holder = sqlite3.connect(sp, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer in the middle of a long transaction
    try:
        with Store(sp, patience=0.3) as st:
            start = time.monotonic()
            with pytest.raises(StoreError) as err:
                st.upsert_sweep("other", "ident", "w", {}, [0])
            assert time.monotonic() - start < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    message = str(err.value)
    assert "locked by another process" in message and "not a readable" not in message and "move it aside" not in message


# -- item 18: control characters in names are shown, never obeyed ------------------------------------

EVIL = "x\x1b]0;pwned\x07\x1b[2J\x9b31m"


def test_terminal_escapes_in_a_name_never_reach_the_terminal_and_json_stays_exact(tmp_path, wl, sp):
    store = ["--store", str(sp)]
    printed = run_cli("sweep", wl, "--seeds", "0-1", "--name", EVIL, *store, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    other = run_cli("sweep", wl, "--seeds", "0-1", "--set", "shift=0.5", "--name", "plain", *store, cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    outputs = {"sweep": printed, "runs": run_cli("runs", *store, cwd=tmp_path),
               "compare": run_cli("compare", EVIL, "plain", *store, cwd=tmp_path),
               "report": run_cli("report", EVIL, "--html", str(tmp_path / f"{EVIL}.html"), *store, cwd=tmp_path)}
    for command, proc in outputs.items():
        assert proc.returncode == 0, (command, proc.stderr)
        text = proc.stdout + proc.stderr
        assert not any(c in text for c in "\x1b\x07\x9b"), (command, text)
        assert "x␛]0;pwned" in text, (command, text)  # made visible, not dropped: the user sees what is there
    listed = json.loads(run_cli("runs", *store, "--json", cwd=tmp_path).stdout)["payload"]
    assert EVIL in [s["name"] for s in listed["sweeps"]]  # stored and exported exactly as given
    with Store(sp) as st:
        assert st.find_sweep(EVIL).name == EVIL


def test_str_of_a_result_shows_control_characters_visibly(wl, sp):
    result = sweep(wl, "0", store=sp, name=EVIL)
    text = str(result)
    assert "\x1b" not in text and "x␛]0;pwned" in text


# -- item 6: an unreachable Ray address fails at once, before anything is written ---------------------

def _closed_port():
    with socket.socket() as s:  # bound then closed: nothing listens there now
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_probe_accepts_a_listening_address_and_refuses_a_closed_one():
    from firstdiv.errors import InvalidArgument
    from firstdiv.lab.backends.ray_backend import probe

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe(f"127.0.0.1:{server.getsockname()[1]}")
        probe(f"ray://127.0.0.1:{server.getsockname()[1]}")
    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(InvalidArgument, match="Cannot reach the Ray cluster"):
            probe(address, timeout=2)
    with pytest.raises(InvalidArgument, match="Expected --address like"):
        probe("127.0.0.1:notaport")


def test_sweep_on_an_unreachable_ray_address_is_one_line_exit_2_and_writes_nothing(tmp_path, wl, sp):
    pytest.importorskip("ray")
    start = time.monotonic()
    proc = run_cli("sweep", wl, "--seeds", "0-1", "--backend", "ray", "--address", f"127.0.0.1:{_closed_port()}",
                   "--store", sp, cwd=tmp_path, timeout=120)
    assert time.monotonic() - start < 60
    line = _one_error_line(proc)
    assert "Cannot reach the Ray cluster" in line and "127.0.0.1" in line
    assert not sp.exists() and not sp.parent.exists()


# -- item 3: firstdiv's own files are not code; other untracked files are listed, not hashed ----------

def _git_repo(root):
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(TINY, root / "train.py")
    for args in (["init", "-q"], ["add", "train.py"],
                 ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "workload"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def test_reports_gate_files_and_stores_written_in_the_tree_do_not_change_the_code_version(tmp_path):
    from firstdiv.lab.env import code_version

    repo = _git_repo(tmp_path / "repo")
    clean = code_version(repo / "train.py")
    assert clean["dirty"] is False and "+dirty" not in clean["version"]
    (repo / "report.html").write_text('<!doctype html><html><head><meta name="generator" content="firstdiv 0.1">')
    (repo / "gate.json").write_text(json.dumps({"format": "firstdiv.gate", "version": 1}, indent=2))
    Store(repo / "elsewhere.db").close()  # a store outside .firstdiv/, with no --store exclusion given
    (repo / "notes.txt").write_text("what I tried\n")
    (repo / "data.csv").write_text("1,2\n")
    after = code_version(repo / "train.py")
    assert after["version"] == clean["version"] and after["dirty"] is False
    assert after["untracked"] == ["data.csv", "notes.txt"]  # listed in the record, not hashed

    (repo / "helper.py").write_text("X = 1\n")  # untracked source is code
    assert "+dirty" in code_version(repo / "train.py")["version"]


def test_untracked_file_the_workload_imports_is_code_whatever_its_name(tmp_path):
    from firstdiv.lab.env import code_version

    repo = _git_repo(tmp_path / "repo")
    (repo / "settings.cfg").write_text("lr = 0.1\n")
    assert code_version(repo / "train.py", closure=())["dirty"] is False
    assert code_version(repo / "train.py", closure=(repo / "settings.cfg",))["dirty"] is True


def test_report_written_next_to_committed_code_leaves_the_next_sweep_reusing_everything(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    args = ["sweep", "train.py:train", "--seeds", "0-1", "--name", "main", "--json"]
    first = run_cli(*args, cwd=repo)
    assert first.returncode == 0, first.stderr
    page = run_cli("report", "main", cwd=repo)  # writes report.html into the work tree
    assert page.returncode == 0 and (repo / "report.html").is_file(), page.stderr
    second = run_cli(*args, cwd=repo)
    assert second.returncode == 0, second.stderr
    a, b = json.loads(first.stdout)["payload"], json.loads(second.stdout)["payload"]
    assert b["sweep"]["code"]["version"] == a["sweep"]["code"]["version"] and "+dirty" not in a["sweep"]["code"]["version"]
    assert b["ran"] == [] and b["reused"] == [0, 1]


def test_a_committed_report_rewritten_by_firstdiv_is_not_a_code_change_but_an_edit_is(tmp_path):
    from firstdiv.lab.env import code_version

    repo = _git_repo(tmp_path / "repo")
    page = '<!doctype html><html><head><meta name="generator" content="firstdiv 0.1"><title>{}</title>'
    (repo / "report.html").write_text(page.format("first"))
    for args in (["add", "report.html"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "page"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    clean = code_version(repo / "train.py")
    (repo / "report.html").write_text(page.format("second"))
    assert code_version(repo / "train.py") == clean
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n# edit\n")
    assert "+dirty" in code_version(repo / "train.py")["version"]


# -- items 14 and 19: gate files with mistyped fields or tampered values ------------------------------

@pytest.fixture
def gated(tmp_path, wl, sp):
    """A gate calibrated at alpha 0.25 on 4 seeds (the fewest that alpha allows: fast), saved to a file."""
    from firstdiv.lab.gate import Gate

    result = sweep(wl, "0-3", store=sp, name="base")
    gate = Gate.calibrate(result, alpha=0.25)
    path = gate.save(tmp_path / "gate.json")
    return gate, path, json.loads(path.read_text())


@pytest.mark.parametrize("field, value, says", [
    ("threshold", "1.0", "field 'threshold' should be a number but is a string"),
    ("metric", 5, "field 'metric' should be a string"),
    ("higher_is_better", "no", "field 'higher_is_better' should be true or false"),
    ("rank", 2.5, "field 'rank' should be an integer"),
    ("calibration_seeds", "0123", "field 'calibration_seeds' should be a list of integers"),
    ("config", [1], "field 'config' should be an object"),
    ("holdout", "x", "field 'holdout' should be an object"),
    ("holdout", {"n": 3}, "field 'holdout.false_alarms' should be an integer but is missing"),
    ("eval_contract", [1], "field 'eval_contract' should be an object"),
])
def test_gate_file_with_a_mistyped_field_is_one_clear_error(gated, field, value, says):
    from firstdiv.errors import InvalidArgument
    from firstdiv.lab.gate import Gate

    _, path, data = gated
    path.write_text(json.dumps({**data, field: value}))
    with pytest.raises(InvalidArgument) as err:
        Gate.load(path)
    assert says in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_gate_check_of_a_mistyped_file_is_one_line_exit_2(tmp_path, gated, sp):
    _, path, data = gated
    path.write_text(json.dumps({**data, "threshold": str(data["threshold"])}))
    line = _one_error_line(run_cli("gate", "check", path, "base", "--store", sp, cwd=tmp_path))
    assert "field 'threshold' should be a number" in line


def _scaled(data, factor):
    values = [v * factor for v in data["calibration_values"]]
    return {**data, "calibration_values": values, "threshold": data["threshold"] * factor}


def test_gate_file_scaled_consistently_without_its_digest_is_refused(gated):
    from firstdiv.errors import InvalidArgument
    from firstdiv.lab.gate import Gate

    _, path, data = gated
    path.write_text(json.dumps(_scaled(data, 1.5)))  # threshold still follows from the values: only the digest tells
    with pytest.raises(InvalidArgument, match="calibration_digest .* does not match .* edited after calibration"):
        Gate.load(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "calibration_digest"}))
    with pytest.raises(InvalidArgument, match="has no calibration_digest"):
        Gate.load(path)


def test_gate_file_tampered_with_a_recomputed_digest_is_caught_against_the_store(tmp_path, gated, sp):
    from firstdiv.lab.gate_digest import digest

    gate, path, data = gated
    forged = _scaled(data, 1.5)
    forged["calibration_digest"] = digest(forged)
    path.write_text(json.dumps(forged))
    line = _one_error_line(run_cli("gate", "check", path, "base", "--store", sp, cwd=tmp_path))
    seed, value = gate.calibration_seeds[0], gate.calibration_values[0]
    assert f"calibration seed {seed} has val_loss {value * 1.5!r} in the gate file but {value!r} in the store" in line

    path.write_text(json.dumps(data))  # the genuine file checks as before
    honest = run_cli("gate", "check", path, "base", "--store", sp, "--json", cwd=tmp_path)
    assert honest.returncode in (0, 1) and json.loads(honest.stdout)["payload"]["instrument"] == "gate", honest.stderr


def test_version_1_gate_file_without_a_digest_still_loads(gated):
    from firstdiv.lab.gate import Gate

    gate, path, data = gated
    old = {k: v for k, v in data.items() if k not in ("calibration_digest", "calibration_identity")}
    path.write_text(json.dumps({**old, "version": 1}))
    assert Gate.load(path).threshold == gate.threshold
