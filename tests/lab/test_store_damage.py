"""A store that is damaged, or that cannot grow: each says what happened to the file and what to do, in one line,
exit code 2, and nothing is written. A full disk is not damage: the store is intact and keeps its runs."""

import random
import shutil
import sqlite3

import pytest
from conftest import TINY, run_cli

from firstdiv.errors import StoreError
from firstdiv.lab.record import RunRecord
from firstdiv.lab.store import Store
from firstdiv.lab.sweep import sweep


def _one_error_line(proc):
    assert proc.returncode == 2, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("firstdiv: error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A store with one sweep of three runs, and tiny.py copied beside it (outside any git tree)."""
    root = tmp_path_factory.mktemp("damage")
    shutil.copy(TINY, root / "tiny.py")
    wl = f"{root / 'tiny.py'}:train"
    sweep(wl, "0-2", store=root / "runs.db", name="main")
    return root / "runs.db", wl


def _page(path, name):
    """(offset, size) of the page at the root of table or index ``name``."""
    with sqlite3.connect(path) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (name,)).fetchone()[0]
    conn.close()
    return (root - 1) * size, size


def _cells_zeroed(data, path):
    """The meta table's index page says it holds no cells: the schema version is not found (SQLite sees no damage)."""
    start, _ = _page(path, "sqlite_autoindex_meta_1")
    return data[:start + 3] + b"\0\0" + data[start + 5:]


def _tail_scribbled(data, path):
    """Random bytes over the second half of the meta table's index page."""
    start, size = _page(path, "sqlite_autoindex_meta_1")
    return data[:start + size // 2] + random.Random(2).randbytes(size // 2) + data[start + size:]


def _runs_scribbled(data, path):
    """Random bytes over the root page of the runs table."""
    start, size = _page(path, "runs")
    return data[:start] + random.Random(0).randbytes(size) + data[start + size:]


def _name_not_utf8(data, path):
    """A table's name in the schema turned into bytes that are not UTF-8."""
    assert b"tablesweepssweeps" in data
    return data.replace(b"tablesweepssweeps", b"table\xff\xfeeepssweeps", 1)


@pytest.mark.parametrize("scribble", [_cells_zeroed, _tail_scribbled, _runs_scribbled, _name_not_utf8],
                         ids=["meta-index-cells", "meta-index-tail", "runs-root", "name-not-utf8"])
def test_a_scribbled_store_is_named_damaged_with_what_to_do_and_is_not_written(tmp_path, made, scribble):
    src, wl = made
    path = tmp_path / "runs.db"
    path.write_bytes(scribble(src.read_bytes(), src))
    before = path.read_bytes()
    line = _one_error_line(run_cli("sweep", wl, "--seeds", "0-1", "--name", "main", "--store", path, cwd=tmp_path))
    assert f"The run store {path} is damaged" in line, line
    assert "move it aside" in line and "restore it from a backup" in line and "already exists" not in line, line
    assert path.read_bytes() == before
    listed = run_cli("runs", "--store", path, cwd=tmp_path)  # one line, or the listing naming the damaged sweep
    said = " ".join((listed.stdout + listed.stderr).split())
    assert "is damaged" in said and "restore it from a backup" in said and "Traceback" not in said, said
    assert path.read_bytes() == before
    with pytest.raises(StoreError, match="is damaged"), Store(path) as st:
        [st.records(s) for s in st.sweeps()]


def _record(seed):
    return RunRecord(workload="w.py:train", seed=seed, config={"lr": 0.1}, config_hash="c", identity="ident",
                     code={}, env={}, env_hash="e", data_identity=None, eval_contract=None, eval_fingerprint=None,
                     eval_fields=[], curves={"val_loss": [0.5] * 10}, final={"val_loss": 0.5}, directions={},
                     grad_norm={}, throughput={}, wall_seconds=1.0, hypothesis="more than a page of words " * 800)


def _fill(st):
    """No page left to grow into, as on a full disk: SQLite answers SQLITE_FULL to the next write that needs one."""
    pages = st._conn.execute("PRAGMA page_count").fetchone()[0]
    st._conn.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_says_so_keeps_the_runs_and_the_store_works_once_there_is_room(tmp_path):
    path = tmp_path / "runs.db"
    with Store(path) as st:
        info = st.upsert_sweep("s", "ident", "w.py:train", {"config": {}}, [0, 1, 2])
        assert st.add(_record(0), sweep=info)
        _fill(st)
        with pytest.raises(StoreError) as err:
            st.add(_record(1), sweep=info)
        message = str(err.value)
        assert f"No space left for the run store at {path}" in message, message
        assert "recorded runs are kept" in message and "free some space" in message and "rerun" in message, message
        assert "not a readable" not in message and "move it aside" not in message and "damaged" not in message
        assert st.recorded_seeds("ident", sweep=info) == {0}  # nothing half-written, the connection still usable
        st._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
        assert st.add(_record(1), sweep=info)
    with Store(path, create=False) as st:
        assert st.recorded_seeds("ident") == {0, 1}


def test_a_sweep_that_runs_out_of_disk_is_one_line_exit_2_and_a_rerun_resumes(tmp_path, made, monkeypatch, capsys):
    from firstdiv.cli import main

    src, wl = made
    path = tmp_path / "runs.db"
    shutil.copy(src, path)
    connect = Store._connect

    def full(self):
        conn = connect(self)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(Store, "_connect", full)
    capsys.readouterr()
    rc = main(["sweep", wl, "--seeds", "0-9", "--name", "more", "--set", "shift=0.5", "--store", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert "No space left" in err[0] and "recorded runs are kept" in err[0] and "free some space" in err[0], err
    monkeypatch.undo()
    listed = run_cli("runs", "--store", path, cwd=tmp_path)
    assert listed.returncode == 0 and "sweeps in" in listed.stdout, listed.stderr
    with Store(path, create=False) as st:
        assert len(st.records(st.find_sweep("main"))) == 3
    assert main(["sweep", wl, "--seeds", "0-9", "--name", "more", "--set", "shift=0.5", "--store", str(path)]) == 0


def test_unfolded_changes_that_cannot_be_copied_for_reading_are_said_in_one_line(tmp_path, monkeypatch):
    """A read-only store whose -wal file holds changes is read from a copy; with no room for the copy, the user
    is told the store has changes that cannot be read here (not shown an older store)."""
    import errno
    import tempfile

    from firstdiv.lab import store_open

    path = tmp_path / "runs.db"
    path.write_bytes(b"store")
    path.with_name("runs.db-wal").write_bytes(b"changes")

    def no_room(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(store_open.shutil, "copyfile", no_room)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(StoreError) as err:
        store_open._copy_with_wal(path, path.with_name("runs.db-wal"), 7)
    message = str(err.value)
    assert message.startswith(f"{path} has changes not yet folded into it (runs.db-wal, 7 bytes)"), message
    assert "No space left on device" in message and "pass the copy to --store" in message and "\n" not in message
    assert not list((tmp_path / "tmp").iterdir())  # the half-made copy is removed
