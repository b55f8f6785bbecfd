"""Opening the run store's SQLite file, and what each SQLite failure means to the person at the terminal.

A failure is one of: another process holds the lock; the file cannot be written here; the disk is full (the store
is intact and keeps its runs); the file is damaged (restore it); the file is not a SQLite database at all.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from ..errors import StoreError

_MAGIC = b"SQLite format 3\x00"


def locked(exc: BaseException) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _code(exc: BaseException) -> int:
    """SQLite's primary result code of ``exc`` (0 when it carries none)."""
    return int(getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF


def full(exc: BaseException) -> bool:
    return _code(exc) == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc)


def damaged(path: Path, why: object) -> StoreError:
    """The store's file holds damage SQLite or firstdiv found (the command stops there)."""
    return StoreError(f"The run store {path} is damaged ({why}): move it aside (mv {path} {path}.damaged) and "
                      "restore it from a backup, or pass another --store PATH")


def broken(path: Path, exc: BaseException, patience: float) -> StoreError:
    """The StoreError that says what ``exc``, raised on the store at ``path``, means and what to do."""
    text = str(exc)
    if locked(exc):
        return StoreError(f"The run store at {path} is locked by another process (waited "
                          f"{patience:.0f} s); wait for that command to finish, or pass another --store PATH")
    if full(exc):
        return StoreError(f"No space left for the run store at {path} ({exc}); the recorded runs are kept and "
                          "the store is intact: free some space on that disk and rerun (recorded runs are reused)")
    if "readonly" in text or "unable to open" in text:
        return StoreError(f"Cannot write the run store at {path} ({exc}); pass a writable --store PATH")
    if _code(exc) == sqlite3.SQLITE_NOTADB or "not a database" in text:
        if not _sqlite_header(path):
            return StoreError(f"{path} is not a readable firstdiv store ({exc}); pass another --store PATH (if it "
                              "held your runs, it is damaged: move it aside and restore it from a backup)")
        return damaged(path, exc)
    if _code(exc) == sqlite3.SQLITE_CORRUPT or "malformed" in text or isinstance(exc, UnicodeDecodeError) \
            or "decode" in text:
        return damaged(path, exc)
    return StoreError(f"{path} is not a readable firstdiv store ({exc}); move it aside or pass another --store PATH")


def _sqlite_header(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def _connect_uri(path: Path, query: str, patience: float) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?{query}"
    return sqlite3.connect(uri, uri=True, timeout=patience, isolation_level=None)


def connect_readonly(path: Path, patience: float) -> tuple[sqlite3.Connection, Path | None]:
    """A connection that never writes, and the temporary directory to remove when it closes (or None).

    A WAL store needs its -shm file; in a directory where it cannot be created, the file is read as immutable
    (nothing can write there either). Immutable ignores the -wal file: when that holds changes, the store and its
    -wal are copied into a temporary directory and the copy is read, so every recorded run is listed."""
    conn = _connect_uri(path, "mode=ro", patience)
    try:
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        return conn, None
    except sqlite3.OperationalError as exc:
        if locked(exc):
            raise
        conn.close()
    wal = path.with_name(path.name + "-wal")
    try:
        changes = wal.stat().st_size
    except OSError:
        changes = 0
    if not changes:
        return _connect_uri(path, "mode=ro&immutable=1", patience), None
    copy = _copy_with_wal(path, wal, changes)
    return _connect_uri(copy / path.name, "mode=ro", patience), copy


def _copy_with_wal(path: Path, wal: Path, changes: int) -> Path:
    """A private copy of the store and its -wal file (in a new temporary directory), for reading."""
    folder = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="firstdiv-store-"))
        shutil.copyfile(path, folder / path.name)
        shutil.copyfile(wal, folder / wal.name)
        return folder
    except OSError as exc:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        where = folder.parent if folder is not None else Path(tempfile.gettempdir())
        raise StoreError(f"{path} has changes not yet folded into it ({wal.name}, {changes} bytes) that cannot be "
                         f"read here: its directory is read-only and copying it to {where} failed ({exc.strerror}); "
                         "run a firstdiv command once where the store is writable, or copy the store with its -wal "
                         "file to a writable directory and pass the copy to --store") from None
