"""The run store's schema: the append-only migrations and reading the version a file declares."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import StoreError
from .store_open import damaged

# Append-only. Each entry migrates version i to i+1; never edit a released entry.
# History: 1 — runs, sweeps, sweep_seeds (firstdiv 0.1).
#          2 — incidents: the failure notebook (firstdiv.diagnosis.incident); one JSON worksheet per row.
#          3 — runs are appended, never overwritten: (identity, seed) is no longer unique, and a
#              sweep seed may pin the run it refers to (sweep_seeds.run_id). A forced rerun appends
#              and pins, so another sweep of the same identity keeps reading its own records;
#              an unpinned seed reads the newest ok run of its identity (the version-2 behaviour).
#          4 — indexes for stores of 100,000s of runs, no table or column changed: sweeps by creation
#              time (`firstdiv runs` lists the newest), by workload and by identity (a forced rerun pins
#              the other sweeps of its identity), and sweep seeds by the run they pin.
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
    """
    CREATE TABLE runs_v3 (
        id INTEGER PRIMARY KEY,
        identity TEXT NOT NULL,
        seed INTEGER NOT NULL,
        workload TEXT NOT NULL,
        status TEXT NOT NULL,
        created TEXT NOT NULL,
        record TEXT NOT NULL
    );
    INSERT INTO runs_v3 (id, identity, seed, workload, status, created, record)
        SELECT id, identity, seed, workload, status, created, record FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_v3 RENAME TO runs;
    CREATE INDEX runs_by_key ON runs(identity, seed, status, id);
    ALTER TABLE sweep_seeds ADD COLUMN run_id INTEGER;
    """,
    """
    CREATE INDEX sweeps_by_created ON sweeps(created, id);
    CREATE INDEX sweeps_by_workload ON sweeps(workload, created, id);
    CREATE INDEX sweeps_by_identity ON sweeps(identity);
    CREATE INDEX sweep_seeds_by_run ON sweep_seeds(run_id);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def read_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version the file's meta table declares. Firstdiv writes the version in the transaction that
    creates the table, so a meta table without one (its page scribbled over) is damage, as is a value that is
    not an integer."""
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if not row:
        raise damaged(path, "its meta table holds no schema version")
    try:
        return int(str(row[0]).strip())
    except ValueError:
        raise StoreError(f"{path} declares store schema version {str(row[0])[:40]!r}, not an integer: the file is "
                         "damaged; move it aside or pass another --store PATH") from None


def apply(conn: sqlite3.Connection, version: int) -> None:
    """Run the migrations after ``version`` (inside the caller's write transaction)."""
    for script in MIGRATIONS[version:]:
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
