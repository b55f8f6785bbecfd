"""The run store: SQLite in WAL mode, schema versioned, safe under concurrent writers.

Runs are keyed by (identity, seed): two processes recording the same run insert it once.
A sweep is a named, ordered set of seeds over one identity; its runs are looked up by that key, so
re-running a sweep reuses every run already recorded and an interrupted sweep resumes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import NotFound, StoreError
from .record import RunRecord, now_iso, short_hash

DEFAULT_STORE = Path(".firstdiv") / "runs.db"

# Append-only. Each entry migrates version i to i+1; never edit a released entry.
# History: 1 — runs, sweeps, sweep_seeds (firstdiv 0.1).
#          2 — incidents: the failure notebook (firstdiv.incident); one JSON worksheet per row.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        identity TEXT NOT NULL,
        seed INTEGER NOT NULL,
        workload TEXT NOT NULL,
        status TEXT NOT NULL,
        created TEXT NOT NULL,
        record TEXT NOT NULL,
        UNIQUE (identity, seed)
    );
    CREATE TABLE sweeps (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        identity TEXT NOT NULL,
        workload TEXT NOT NULL,
        created TEXT NOT NULL,
        info TEXT NOT NULL,
        UNIQUE (name, identity)
    );
    CREATE TABLE sweep_seeds (
        sweep_id TEXT NOT NULL REFERENCES sweeps(id),
        seed INTEGER NOT NULL,
        PRIMARY KEY (sweep_id, seed)
    );
    CREATE INDEX sweeps_by_name ON sweeps(name, created);
    """,
    """
    CREATE TABLE incidents (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('open', 'closed')),
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX incidents_by_status ON incidents(status, created);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True)
class SweepInfo:
    """A named sweep: its identity (workload, config, code, environment) and declared intent."""

    id: str
    name: str
    identity: str
    workload: str
    created: str
    info: dict[str, Any]
    seeds: tuple[int, ...] = ()

    @property
    def config(self) -> dict[str, Any]:
        return self.info.get("config", {})

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "identity": self.identity, "workload": self.workload,
                "created": self.created, "seeds": list(self.seeds), **self.info}


def default_path() -> Path:
    return Path(os.environ.get("FIRSTDIV_STORE") or DEFAULT_STORE)


class Store:
    """Open (and with ``create=True`` create) the store at ``path``; see module docstring."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._create = create
        if not self.path.exists():
            if not create:
                raise NotFound(f"No run store at {self.path}; run `firstdiv sweep` first or pass --store PATH")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"Cannot create the run store at {self.path}: {exc.strerror}; "
                                 "pass a writable --store PATH") from None
        elif self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a run store; pass a file path to --store")
        self._conn = self._connect()
        self._open_with_retry()

    def _open_with_retry(self, patience: float = 60.0) -> None:
        # Switching a new file to WAL takes an exclusive lock that SQLite's busy handler does not
        # wait for; several processes creating one store at once retry here instead of failing.
        deadline = time.monotonic() + patience
        delay = 0.01
        while True:
            try:
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise self._broken(exc) from None
                if time.monotonic() > deadline:
                    raise StoreError(f"The run store at {self.path} stayed locked for {patience:.0f} s; "
                                     "another process holds it: wait for it or pass another --store PATH") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _connect(self) -> sqlite3.Connection:
        # WAL is switched on only in _migrate, after the file is known to be ours: opening someone
        # else's database must not rewrite its header.
        try:
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 60000")
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None
        return conn

    def _rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read query; damage found mid-file becomes a StoreError, not a traceback."""
        try:
            return self._conn.execute(query, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None

    def _broken(self, exc: Exception) -> StoreError:
        text = str(exc)
        if "readonly" in text or "unable to open" in text:
            return StoreError(f"Cannot write the run store at {self.path} ({exc}); pass a writable --store PATH")
        return StoreError(f"{self.path} is not a readable firstdiv store ({exc}); move it aside or pass another --store PATH")

    def _migrate(self) -> None:
        try:
            tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = 0
            if "meta" in tables:
                row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                version = int(row[0]) if row else 0
            elif tables:
                raise StoreError(f"{self.path} is a SQLite database but not a firstdiv store; pass another --store PATH")
            elif not self._create:
                raise NotFound(f"{self.path} is empty, not a run store; run `firstdiv sweep --store {self.path}` first")
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has store schema version {version}, newer than this firstdiv's "
                                 f"{SCHEMA_VERSION}; upgrade firstdiv (pip install -U firstdiv) to read it")
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            if version == SCHEMA_VERSION:
                return
            with self._write():
                current = self._conn.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
                version = 0
                if current:
                    row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                    version = int(row[0]) if row else 0
                for script in MIGRATIONS[version:]:
                    for statement in filter(str.strip, script.split(";")):
                        self._conn.execute(statement)
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None

    def _write(self) -> Any:
        store = self

        class _Tx:
            def __enter__(self) -> sqlite3.Connection:
                store._conn.execute("BEGIN IMMEDIATE")
                return store._conn

            def __exit__(self, exc_type: Any, *_: Any) -> None:
                store._conn.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # -- sweeps -------------------------------------------------------------------------------

    def upsert_sweep(self, name: str, identity: str, workload: str, info: dict[str, Any], seeds: list[int]) -> SweepInfo:
        """Create the sweep (or find the one with this name and identity) and add ``seeds`` to it."""
        from .._secrets import scrub_sweep_info  # a declared hypothesis is shown on shareable pages

        info = scrub_sweep_info(info)
        sweep_id = short_hash({"name": name, "identity": identity})
        try:
            with self._write() as conn:
                conn.execute("INSERT OR IGNORE INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                             (sweep_id, name, identity, workload, now_iso(), json.dumps(info)))
                conn.executemany("INSERT OR IGNORE INTO sweep_seeds VALUES (?, ?)", [(sweep_id, s) for s in seeds])
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None
        return self._sweep_by_id(sweep_id)

    def find_sweep_exact(self, name: str, identity: str) -> SweepInfo | None:
        rows = self._rows("SELECT id FROM sweeps WHERE name=? AND identity=?", (name, identity))
        return self._sweep_by_id(rows[0][0]) if rows else None

    def _sweep_by_id(self, sweep_id: str) -> SweepInfo:
        row = self._rows("SELECT id, name, identity, workload, created, info FROM sweeps WHERE id=?", (sweep_id,))[0]
        seeds = tuple(r[0] for r in self._rows("SELECT seed FROM sweep_seeds WHERE sweep_id=? ORDER BY seed", (sweep_id,)))
        return SweepInfo(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), seeds)

    def sweeps(self) -> list[SweepInfo]:
        ids = [r[0] for r in self._rows("SELECT id FROM sweeps ORDER BY created, id")]
        return [self._sweep_by_id(i) for i in ids]

    def find_sweep(self, ref: str) -> SweepInfo:
        """A sweep by name (the most recent with that name) or by a unique prefix of its id."""
        named = self._rows("SELECT id FROM sweeps WHERE name=? ORDER BY created DESC, id LIMIT 1", (ref,))
        if named:
            return self._sweep_by_id(named[0][0])
        rows = self._rows("SELECT id FROM sweeps WHERE id LIKE ? ESCAPE '\\'",
                          (ref.replace("%", r"\%").replace("_", r"\_") + "%",))
        if len(rows) == 1:
            return self._sweep_by_id(rows[0][0])
        names = sorted({s.name for s in self.sweeps()})
        if len(rows) > 1:
            raise NotFound(f"Sweep id prefix {ref!r} is ambiguous ({len(rows)} sweeps); give more characters")
        known = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "") if names else "none yet"
        raise NotFound(f"No sweep named {ref!r} in {self.path} (known: {known}); see `firstdiv runs`")

    # -- runs ---------------------------------------------------------------------------------

    def recorded_seeds(self, identity: str) -> set[int]:
        """Seeds with a successful run for this identity."""
        return {r[0] for r in self._rows("SELECT seed FROM runs WHERE identity=? AND status='ok'", (identity,))}

    def add(self, record: RunRecord, *, replace: bool = False) -> bool:
        """Insert a run; returns False when an ok run with this identity and seed already exists.

        A failed run is always replaced by a new attempt; ``replace`` also replaces ok runs.
        """
        from .._secrets import scrub_record  # an error message can carry a token, a URL's password

        record = scrub_record(record)
        payload = json.dumps(record.to_dict())
        try:
            with self._write() as conn:
                row = conn.execute("SELECT status FROM runs WHERE identity=? AND seed=?",
                                   (record.identity, record.seed)).fetchone()
                if row and row[0] == "ok" and not replace:
                    return False
                conn.execute("INSERT OR REPLACE INTO runs (identity, seed, workload, status, created, record) "
                             "VALUES (?, ?, ?, ?, ?, ?)",
                             (record.identity, record.seed, record.workload, record.status, record.created, payload))
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None
        return True

    def records(self, sweep: SweepInfo, *, include_failed: bool = False) -> list[RunRecord]:
        """The sweep's runs in seed order (only those recorded so far)."""
        query = ("SELECT r.record FROM runs r JOIN sweep_seeds s ON r.seed = s.seed "
                 "WHERE s.sweep_id=? AND r.identity=?" + ("" if include_failed else " AND r.status='ok'") +
                 " ORDER BY r.seed")
        return [RunRecord.from_dict(json.loads(r[0])) for r in self._rows(query, (sweep.id, sweep.identity))]

    def iter_runs(self) -> Iterator[RunRecord]:
        for (payload,) in self._rows("SELECT record FROM runs ORDER BY id"):
            yield RunRecord.from_dict(json.loads(payload))

    def count_runs(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM runs")[0][0])

    # -- incidents (the failure notebook; see firstdiv.incident) ----------------------------------

    def add_incident(self, record: dict[str, Any]) -> bool:
        """Insert one incident worksheet (``record`` holds id, title, status, created, updated); False if the id is taken."""
        try:
            with self._write() as conn:
                conn.execute("INSERT INTO incidents VALUES (?, ?, ?, ?, ?, ?)",
                             (record["id"], record["title"], record["status"], record["created"], record["updated"],
                              json.dumps(record)))
        except sqlite3.IntegrityError:
            return False
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None
        return True

    def replace_incident(self, record: dict[str, Any], *, was: str) -> bool:
        """Overwrite an incident only while its status is still ``was``; False when another writer got there first."""
        try:
            with self._write() as conn:
                cur = conn.execute("UPDATE incidents SET title=?, status=?, updated=?, record=? WHERE id=? AND status=?",
                                   (record["title"], record["status"], record["updated"], json.dumps(record),
                                    record["id"], was))
                return cur.rowcount == 1
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None

    def incidents(self, status: str | None = None, *, id_prefix: str = "") -> list[dict[str, Any]]:
        """Incident records, oldest first; ``status`` 'open'/'closed' filters, ``id_prefix`` matches ids."""
        query, params = "SELECT record FROM incidents WHERE id LIKE ? ESCAPE '\\'", [
            id_prefix.replace("%", r"\%").replace("_", r"\_") + "%"]
        if status is not None:
            query += " AND status=?"
            params.append(status)
        return [json.loads(r[0]) for r in self._rows(query + " ORDER BY created, id", tuple(params))]
