"""Which run a sweep's seed refers to, and reading a run back (schema version 3, see store_schema).

A seed pinned to a run (``sweep_seeds.run_id``) reads that run; an unpinned seed reads the newest
ok run of the sweep's identity, else its newest failed attempt. A forced rerun pins every other
sweep to what it reads now before appending, so no sweep's view changes under another's --force.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from .._format import first_line
from ..errors import StoreError
from .record import RunRecord

# The run an unpinned seed reads: newest ok, else newest attempt.
_NEWEST = ("(SELECT r2.id FROM runs r2 WHERE r2.identity=? AND r2.seed=s.seed "
           "ORDER BY r2.status='ok' DESC, r2.id DESC LIMIT 1)")


def view(column: str = "r.record") -> str:
    """(seed, run id, status, ``column``) of each run a sweep reads, in seed order; parameters (identity, sweep id)."""
    return (f"SELECT s.seed, r.id, r.status, {column} FROM sweep_seeds s JOIN runs r ON r.id = "
            f"COALESCE(s.run_id, {_NEWEST}) WHERE s.sweep_id=? ORDER BY s.seed")


VIEW = view()


def fields_of(conn: sqlite3.Connection, sweep_identity: str, sweep_id: str,
              names: tuple[str, ...]) -> list[tuple[int, list[Any]]] | None:
    """(store id, the values of the record's fields ``names``) of each run the sweep reads, in seed order: SQLite
    parses each record and hands back just those fields. None when SQLite cannot parse one (e.g. a config value
    that is NaN, which Python writes and SQLite's JSON does not take): read that sweep with :func:`parse`."""
    paths = ", ".join(f"'$.{name}'" for name in (names if len(names) > 1 else names * 2))  # >1 path: a JSON array
    try:
        rows = conn.execute(view(f"json_extract(r.record, {paths})"), (sweep_identity, sweep_id))
        return [(run_id, json.loads(values)[:len(names)]) for _seed, run_id, _status, values in rows]
    except sqlite3.OperationalError as exc:
        if "JSON" not in str(exc):
            raise
        return None


def _mode(conn: sqlite3.Connection, record: RunRecord, replace: bool, sweep_id: str | None) -> bool | None:
    """None: the run is already recorded for this sweep (skip). True: append and pin. False: replace failed attempts."""
    if replace:
        return True
    pin = conn.execute("SELECT s.run_id, r.status FROM sweep_seeds s LEFT JOIN runs r ON r.id = s.run_id "
                       "WHERE s.sweep_id=? AND s.seed=? AND s.run_id IS NOT NULL", (sweep_id, record.seed)).fetchone()
    if pin is not None:  # a seed pinned to a failed (or dropped) run is retried for this sweep alone
        return None if pin[1] == "ok" else True
    ok = conn.execute("SELECT 1 FROM runs WHERE identity=? AND seed=? AND status='ok' LIMIT 1",
                      (record.identity, record.seed)).fetchone()
    return None if ok else False


def done_seeds(conn: sqlite3.Connection, sweep_id: str, identity: str) -> set[int]:
    """Seeds the sweep reads as an ok run: its pinned run when pinned, else any ok run of its identity."""
    rows = conn.execute(
        "SELECT s.seed FROM sweep_seeds s WHERE s.sweep_id=? AND CASE WHEN s.run_id IS NULL "
        "THEN EXISTS (SELECT 1 FROM runs r WHERE r.identity=? AND r.seed=s.seed AND r.status='ok') "
        "ELSE EXISTS (SELECT 1 FROM runs r WHERE r.id=s.run_id AND r.status='ok') END", (sweep_id, identity))
    return {r[0] for r in rows}


def insert(conn: sqlite3.Connection, record: RunRecord, payload: str, *, replace: bool, sweep_id: str | None) -> bool:
    """Store ``record`` (inside the caller's write transaction); False when it is already recorded.

    ``replace`` (--force) or a seed this sweep pinned to a failed run: keep what every other sweep
    reads (pin it), then append the run and pin ``sweep_id`` to it. Otherwise a new attempt replaces
    the failed attempts no sweep pins."""
    append = _mode(conn, record, replace, sweep_id)
    if append is None:
        return False
    key = (record.identity, record.seed)
    unreferenced = "NOT EXISTS (SELECT 1 FROM sweep_seeds p WHERE p.run_id = runs.id)"  # by sweep_seeds_by_run
    if append:  # `+s.run_id`: read by the sweeps of the identity, not by sweep_seeds_by_run's (many) NULLs
        conn.execute(f"UPDATE sweep_seeds AS s SET run_id = {_NEWEST} WHERE +s.run_id IS NULL AND s.seed=? "
                     "AND s.sweep_id IN (SELECT id FROM sweeps WHERE identity=?) AND s.sweep_id IS NOT ?",
                     (record.identity, record.seed, record.identity, sweep_id))
        conn.execute("UPDATE sweep_seeds SET run_id=NULL WHERE sweep_id=? AND seed=?", (sweep_id, record.seed))
        # What no sweep refers to any more is this sweep's own previous run: replaced, not duplicated.
        conn.execute(f"DELETE FROM runs WHERE identity=? AND seed=? AND {unreferenced}", key)
    else:
        conn.execute(f"DELETE FROM runs WHERE identity=? AND seed=? AND status!='ok' AND {unreferenced}", key)
    cur = conn.execute("INSERT INTO runs (identity, seed, workload, status, created, record) VALUES (?, ?, ?, ?, ?, ?)",
                       (*key, record.workload, record.status, record.created, payload))
    if sweep_id is not None and append:
        conn.execute("UPDATE sweep_seeds SET run_id=? WHERE sweep_id=? AND seed=?", (cur.lastrowid, sweep_id, record.seed))
    return True


def parse(run_id: int, payload: str, *, path: Path, sweep: str | None, seed: int | None) -> RunRecord:
    """A stored run back as a RunRecord; damage (bad JSON, missing or mistyped fields) is one StoreError
    naming the run and how to get rid of it."""
    try:
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        record = RunRecord.from_dict(data)
        _check_types(record)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        where = f"run {run_id}" + (f" (sweep {sweep!r}, seed {seed})" if sweep is not None else
                                   f" (seed {seed})" if seed is not None else "")
        why = first_line(exc, 120)
        raise StoreError(f"{where} in {path} is damaged ({why}); drop it with `firstdiv runs --drop {run_id} "
                         f"--store {path}`, then rerun its sweep to record seed {seed} again") from None
    return record


_TYPES: dict[str, Any] = {"workload": str, "seed": int, "config": dict, "identity": str, "code": dict, "env": dict,
                          "curves": dict, "final": dict, "directions": dict, "grad_norm": dict, "throughput": dict,
                          "status": str, "eval_fields": list, "extra": dict, "wall_seconds": (int, float)}


def _check_types(record: RunRecord) -> None:
    for name, kind in _TYPES.items():
        value = getattr(record, name)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise TypeError(f"field {name!r} is a {type(value).__name__}")
    bad = [k for k, v in record.final.items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if bad:
        raise TypeError(f"final metric {bad[0]!r} is not a number")


def drop(conn: sqlite3.Connection, run_id: int) -> tuple[str, int, list[str]] | None:
    """Delete one run; seeds pinned to it fall back to the newest run of their identity.
    Returns (identity, seed, names of the sweeps that held the seed), None when there is no such run."""
    row = conn.execute("SELECT identity, seed FROM runs WHERE id=?", (run_id,)).fetchone()
    if row is None:
        return None
    names = [r[0] for r in conn.execute(
        "SELECT DISTINCT w.name FROM sweeps w JOIN sweep_seeds s ON s.sweep_id = w.id "
        "WHERE w.identity=? AND s.seed=? ORDER BY w.name", row)]
    conn.execute("UPDATE sweep_seeds SET run_id=NULL WHERE run_id=?", (run_id,))
    conn.execute("DELETE FROM runs WHERE id=?", (run_id,))
    return row[0], row[1], names
