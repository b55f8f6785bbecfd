"""The run store: SQLite in WAL mode, schema versioned, safe under concurrent writers.

Runs carry their identity and seed: two processes recording the same run insert it once.
A sweep is a named, ordered set of seeds over one identity; a seed reads the newest ok run of that
identity (or the run it is pinned to, after a --force; see store_runs), so re-running a sweep
reuses every run already recorded and an interrupted sweep resumes. Runs are appended; a sweep
never changes the records another sweep reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from ..errors import NotFound, StoreError
from . import store_discovery, store_open, store_runs, store_schema
from .record import RunRecord, now_iso, short_hash
from .store_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["DEFAULT_STORE", "MIGRATIONS", "SCHEMA_VERSION", "Store", "SweepInfo", "default_path"]

DEFAULT_STORE = Path(".firstdiv") / "runs.db"
# The schema and its append-only migrations live in store_schema; they are re-exported here.
LOCK_PATIENCE_S = 60.0  # how long a command waits for another process's write lock before saying so
#: A sweep's row with its seeds (a JSON array), read by the sweeps' indexes and sweep_seeds' primary key.
SWEEP_ROWS = ("SELECT w.id, w.name, w.identity, w.workload, w.created, w.info, (SELECT json_group_array(s.seed) "
              "FROM sweep_seeds s WHERE s.sweep_id = w.id) FROM sweeps w")


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
    """``$FIRSTDIV_STORE``, else the store found from the working directory upwards like git finds its repository
    (the nearest ``.firstdiv/``, within the git work tree; created at its top, or here outside one): see
    :mod:`firstdiv.lab.store_discovery`."""
    return Path(os.environ.get("FIRSTDIV_STORE") or store_discovery.discover())


def _filters(name: str | None, workload: str | None) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (and its parameters) keeping the sweeps with ``name`` and ``workload``."""
    terms = [(f"w.{col}=?", value) for col, value in (("name", name), ("workload", workload)) if value is not None]
    return (" WHERE " + " AND ".join(t for t, _ in terms) if terms else ""), tuple(v for _, v in terms)


class Store:
    """Open (and with ``create=True`` create) the store at ``path``; see module docstring.

    ``create=False`` opens an existing store and, when it cannot be written (a read-only directory
    or file), opens it read-only: reading commands still work, writes fail with "Cannot write".
    ``readonly=True`` always opens it read-only. ``patience`` is how many seconds a command waits
    for another process's lock.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True,
                 readonly: bool = False, patience: float | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._create = create and not readonly
        self.readonly = readonly
        self.patience = LOCK_PATIENCE_S if patience is None else float(patience)
        self._copy: weakref.finalize | None = None  # a read-only store's private copy, removed on close
        if not self.path.exists():
            if not self._create:
                raise NotFound(f"No run store at {self.path}; run `firstdiv sweep` first or pass --store PATH")
            try:
                store_discovery.make_store_dir(self.path.parent)  # a new .firstdiv/ gets its .gitignore
            except OSError as exc:
                raise StoreError(f"Cannot create the run store at {self.path}: {exc.strerror}; "
                                 "pass a writable --store PATH") from None
        elif self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a run store; pass a file path to --store")
        self._conn = self._connect()
        try:
            self._open_with_retry()
        except StoreError as exc:
            if self.readonly or create or not str(exc).startswith("Cannot write the run store"):
                raise
            # A store we may read but not write (read-only directory or file): reading needs no writes.
            self.close()
            self.readonly = True
            self._conn = self._connect()
            self._open_with_retry()

    def _open_with_retry(self) -> None:
        # Switching a new file to WAL takes an exclusive lock that SQLite's busy handler does not
        # wait for; several processes creating one store at once retry here instead of failing.
        deadline = time.monotonic() + self.patience
        delay = 0.01
        while True:
            try:
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if not store_open.locked(exc):
                    raise self._broken(exc) from None
                if time.monotonic() > deadline:
                    raise self._broken(exc) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _connect(self) -> sqlite3.Connection:
        # WAL is switched on only in _migrate, after the file is known to be ours: opening someone
        # else's database must not rewrite its header.
        try:
            if self.readonly:
                conn, copy = store_open.connect_readonly(self.path, self.patience)
                if copy is not None:
                    self._copy = weakref.finalize(self, shutil.rmtree, copy, ignore_errors=True)
            else:
                conn = sqlite3.connect(self.path, timeout=self.patience, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(self.patience * 1000)}")
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._broken(exc) from None
        return conn

    def _rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read query; damage found mid-file becomes a StoreError, not a traceback."""
        return self._guarded(lambda: self._conn.execute(query, params).fetchall())

    def _guarded(self, read: Any, *args: Any) -> Any:
        """``read(*args)``, a database error raised as the StoreError that says what to do."""
        try:
            return read(*args)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._broken(exc) from None

    def _broken(self, exc: BaseException) -> StoreError:
        return store_open.broken(self.path, exc, self.patience)

    def _migrate(self) -> None:
        try:
            tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = 0
            if "meta" in tables:
                version = store_schema.read_version(self._conn, self.path)
            elif tables:
                raise StoreError(f"{self.path} is a SQLite database but not a firstdiv store; pass another --store PATH")
            elif not self._create:
                raise NotFound(f"{self.path} is empty, not a run store; run `firstdiv sweep --store {self.path}` first")
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has store schema version {version}, newer than this firstdiv's "
                                 f"{SCHEMA_VERSION}; upgrade firstdiv (pip install -U firstdiv) to read it")
            if self.readonly:
                if version < SCHEMA_VERSION:
                    raise StoreError(f"{self.path} has store schema version {version} and needs upgrading to "
                                     f"{SCHEMA_VERSION}, which writes to it, but it is read-only here; run a firstdiv "
                                     "command once where it is writable, or copy it and pass the copy to --store")
                return
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            if version == SCHEMA_VERSION:
                return
            with self._write():
                current = self._conn.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
                store_schema.apply(self._conn, store_schema.read_version(self._conn, self.path) if current else 0)
        except sqlite3.OperationalError:
            raise
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._broken(exc) from None

    def _write(self) -> Any:
        store = self

        class _Tx:
            def __enter__(self) -> sqlite3.Connection:
                store._conn.execute("BEGIN IMMEDIATE")
                return store._conn

            def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
                conn = store._conn
                try:
                    if exc_type is None:
                        conn.execute("COMMIT")
                finally:  # an error (SQLITE_FULL among them) may have ended the transaction already
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.DatabaseError):
                            conn.execute("ROLLBACK")

        return _Tx()

    def close(self) -> None:
        self._conn.close()
        if self._copy is not None:
            self._copy()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
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
                conn.executemany("INSERT OR IGNORE INTO sweep_seeds (sweep_id, seed) VALUES (?, ?)", [(sweep_id, s) for s in seeds])
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None
        return self._sweep_by_id(sweep_id)

    def find_sweep_exact(self, name: str, identity: str) -> SweepInfo | None:
        rows = self._rows("SELECT id FROM sweeps WHERE name=? AND identity=?", (name, identity))
        return self._sweep_by_id(rows[0][0]) if rows else None

    def _sweep_by_id(self, sweep_id: str) -> SweepInfo:
        return self._sweep(self._rows(f"{SWEEP_ROWS} WHERE w.id=?", (sweep_id,))[0])

    def _sweep(self, row: tuple[Any, ...]) -> SweepInfo:
        """A SweepInfo from one SWEEP_ROWS row; a damaged description is one StoreError naming its repair."""
        try:
            info = json.loads(row[5])
            if not isinstance(info, dict):
                raise TypeError(f"a JSON {type(info).__name__}, not an object")
        except (ValueError, TypeError) as exc:
            raise StoreError(f"sweep {row[1]!r} (id {row[0]}) in {self.path} has a damaged description ({exc}); "
                             f"move the store aside, or delete that sweep: sqlite3 {self.path} \"DELETE FROM "
                             f"sweep_seeds WHERE sweep_id='{row[0]}'; DELETE FROM sweeps WHERE id='{row[0]}'\"") from None
        seeds = tuple(sorted(json.loads(row[6]))) if row[6] else ()
        return SweepInfo(row[0], row[1], row[2], row[3], row[4], info, seeds)

    def sweeps(self, *, name: str | None = None, workload: str | None = None, limit: int | None = None) -> list[SweepInfo]:
        """The sweeps oldest first, those with ``name`` and ``workload`` when given; with ``limit``, the newest
        ``limit`` of them (still oldest first). Each is read by an index: no scan of the runs."""
        where, params = _filters(name, workload)
        if limit is None:
            rows = self._rows(f"{SWEEP_ROWS}{where} ORDER BY w.created, w.id", params)
        else:
            rows = self._rows(f"{SWEEP_ROWS}{where} ORDER BY w.created DESC, w.id DESC LIMIT ?", (*params, int(limit)))[::-1]
        return [self._sweep(r) for r in rows]

    def count_sweeps(self, *, name: str | None = None, workload: str | None = None) -> int:
        where, params = _filters(name, workload)
        return int(self._rows(f"SELECT COUNT(*) FROM sweeps w{where}", params)[0][0])

    def sweep_names(self, *, workloads: bool = False, limit: int = 10) -> tuple[list[str], bool]:
        """The first ``limit`` sweep names (or workloads) in sorted order, and whether there are more."""
        column = "workload" if workloads else "name"
        found = [r[0] for r in self._rows(f"SELECT DISTINCT {column} FROM sweeps ORDER BY {column} LIMIT ?", (limit + 1,))]
        return found[:limit], len(found) > limit

    def find_sweep(self, ref: str) -> SweepInfo:
        """A sweep by name (the most recent with that name) or by a unique prefix of its id."""
        named = self._rows("SELECT id FROM sweeps WHERE name=? ORDER BY created DESC, id LIMIT 1", (ref,))
        if named:
            return self._sweep_by_id(named[0][0])
        rows = self._rows("SELECT id FROM sweeps WHERE id LIKE ? ESCAPE '\\'",
                          (ref.replace("%", r"\%").replace("_", r"\_") + "%",))
        if len(rows) == 1:
            return self._sweep_by_id(rows[0][0])
        if len(rows) > 1:
            raise NotFound(f"Sweep id prefix {ref!r} is ambiguous ({len(rows)} sweeps); give more characters")
        names, more = self.sweep_names()
        known = ", ".join(names) + (" ..." if more else "") if names else "none yet"
        raise NotFound(f"No sweep named {ref!r} in {self.path} (known: {known}); see `firstdiv runs`")

    # -- runs ---------------------------------------------------------------------------------

    def recorded_seeds(self, identity: str, *, sweep: SweepInfo | None = None) -> set[int]:
        """Seeds with a successful run for this identity; with ``sweep``, as that sweep reads them
        (a seed it pinned to a failed run is not recorded for it)."""
        if sweep is not None:
            return self._guarded(store_runs.done_seeds, self._conn, sweep.id, identity)
        return {r[0] for r in self._rows("SELECT seed FROM runs WHERE identity=? AND status='ok'", (identity,))}

    def add(self, record: RunRecord, *, replace: bool = False, sweep: SweepInfo | None = None) -> bool:
        """Record a run; returns False when an ok run with this identity and seed already exists.

        A failed run is replaced by a new attempt. ``replace`` (--force) appends the new run and
        points ``sweep`` at it; every other sweep keeps reading the runs it read before.
        """
        from .._secrets import scrub_record  # an error message can carry a token, a URL's password

        record = scrub_record(record)
        payload = json.dumps(record.to_dict())
        try:
            with self._write() as conn:
                return store_runs.insert(conn, record, payload, replace=replace,
                                         sweep_id=sweep.id if sweep is not None else None)
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None

    def records(self, sweep: SweepInfo, *, include_failed: bool = False) -> list[RunRecord]:
        """The sweep's runs in seed order (only those recorded so far)."""
        return [r for _, r in self.runs_of(sweep, include_failed=include_failed)]

    def runs_of(self, sweep: SweepInfo, *, include_failed: bool = True) -> list[tuple[int, RunRecord]]:
        """(store id, record) of each run the sweep reads, in seed order."""
        rows = self._rows(store_runs.VIEW, (sweep.identity, sweep.id))
        return [(run_id, store_runs.parse(run_id, payload, path=self.path, sweep=sweep.name, seed=seed))
                for seed, run_id, status, payload in rows if include_failed or status == "ok"]

    def run_fields(self, sweep: SweepInfo, names: tuple[str, ...]) -> list[tuple[int, list[Any]]] | None:
        """Just the fields ``names`` of the runs the sweep reads, as :func:`store_runs.fields_of` reads them."""
        return self._guarded(store_runs.fields_of, self._conn, sweep.identity, sweep.id, names)

    def iter_runs(self) -> Iterator[RunRecord]:
        for run_id, seed, payload in self._rows("SELECT id, seed, record FROM runs ORDER BY id"):
            yield store_runs.parse(run_id, payload, path=self.path, sweep=None, seed=seed)

    def metric_values(self, identities: list[str], seed: int, metric: str) -> list[float]:
        """``final[metric]`` of every ok run of ``seed`` under one of ``identities``, oldest first."""
        marks = ",".join("?" * len(identities))
        rows = self._rows(f"SELECT id, record FROM runs WHERE seed=? AND status='ok' AND identity IN ({marks}) ORDER BY id",
                          (seed, *identities))
        values = (store_runs.parse(i, p, path=self.path, sweep=None, seed=seed).final.get(metric) for i, p in rows)
        return [float(v) for v in values if v is not None]

    def drop_run(self, run_id: int) -> tuple[str, int, list[str]] | None:
        """Delete run ``run_id`` (e.g. a damaged one): (identity, seed, sweeps holding that seed), or None."""
        try:
            with self._write() as conn:
                return store_runs.drop(conn, int(run_id))
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from None

    def count_runs(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM runs")[0][0])

    # -- incidents (the failure notebook; see firstdiv.diagnosis.incident) ------------------------

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
