"""The index's queries: plain SQL aggregates over the store's sweeps, sweep_seeds, runs and incidents tables
(schema version 3, see firstdiv.lab.store_schema), read through a read-only connection. No run record is
parsed: a page of the index costs one indexed look-up per seed of the sweeps it shows."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, NotFound, StoreError
from ..lab import store_open, store_schema

#: whether a seed reads an ok run / any run (firstdiv.lab.store_runs: a pinned seed reads its run, an
#: unpinned one the newest ok run of the identity, else its newest attempt), answered from the index alone
_READS = ("CASE WHEN s.run_id IS NULL THEN EXISTS (SELECT 1 FROM runs r WHERE r.identity=pg.identity AND r.seed=s.seed{ok}) "
          "ELSE EXISTS (SELECT 1 FROM runs r WHERE r.id=s.run_id{ok}) END")
_READ_OK, _READ_ANY = _READS.format(ok=" AND r.status='ok'"), _READS.format(ok="")
#: every sweep with the sweep before it of the same workload (the comparable pair the index links)
_WITH_PREVIOUS = ("SELECT id, name, identity, workload, created, LAG(id) OVER w AS prev_id FROM sweeps "
                  "WINDOW w AS (PARTITION BY workload ORDER BY created, id)")
# A page of sweeps first (no JSON copied around), then its seeds' counts, then the page's descriptions.
_PAGE = ("WITH page AS MATERIALIZED (SELECT p.id, p.identity, p.prev_id FROM ({previous}) p WHERE {where} "
         "ORDER BY p.created DESC, p.id DESC LIMIT ? OFFSET ?), "
         "counts AS (SELECT pg.id, COUNT(s.seed) AS n, COALESCE(SUM({read_ok}), 0) AS ok, "
         "COALESCE(SUM({read_any}), 0) - COALESCE(SUM({read_ok}), 0) AS bad "
         "FROM page pg LEFT JOIN sweep_seeds s ON s.sweep_id = pg.id GROUP BY pg.id) "
         "SELECT w.id, w.name, w.workload, w.created, json_extract(w.info, '$.config_hash'), "
         "json_extract(w.info, '$.code.version'), json_extract(w.info, '$.config'), pg.prev_id, pw.name, "
         "c.n, c.ok, c.bad FROM page pg JOIN sweeps w ON w.id = pg.id JOIN counts c ON c.id = pg.id "
         "LEFT JOIN sweeps pw ON pw.id = pg.prev_id ORDER BY w.created DESC, w.id DESC")


@dataclass(frozen=True)
class Filters:
    """What the index shows: ``name`` (a part of the sweep's name, any case), ``workload`` (exactly),
    ``since``/``until`` (UTC dates, both days included)."""

    name: str | None = None
    workload: str | None = None
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        for key in ("name", "workload", "since", "until"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise InvalidArgument(f"Expected the {key} filter as text but got {type(value).__name__}")
            object.__setattr__(self, key, (value.strip() or None) if value is not None else None)
        for key in ("since", "until"):
            _day(key, getattr(self, key))
        if self.since and self.until and self.since > self.until:
            raise InvalidArgument(f"The date filter since={self.since} is after until={self.until}; swap them")

    @classmethod
    def from_query(cls, query: Mapping[str, list[str]]) -> Filters:
        return cls(**{k: query[k][-1] for k in ("name", "workload", "since", "until") if query.get(k)})

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("name", self.name), ("workload", self.workload), ("since", self.since),
                                  ("until", self.until)) if v}

    def where(self, alias: str = "p", name_column: str = "name") -> tuple[str, list[Any]]:
        """The SQL condition and its parameters (``alias`` names the table, ``name_column`` what the name matches)."""
        clauses, params = ["1"], []
        if self.name:
            clauses.append(f"{alias}.{name_column} LIKE ? ESCAPE '\\'")
            params.append("%" + self.name.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_") + "%")
        if self.workload:
            clauses.append(f"{alias}.workload = ?")
            params.append(self.workload)
        if self.since:
            clauses.append(f"{alias}.created >= ?")
            params.append(self.since)
        if self.until:
            clauses.append(f"{alias}.created < ?")
            params.append((_dt.date.fromisoformat(self.until) + _dt.timedelta(days=1)).isoformat())
        return " AND ".join(clauses), params


def _day(key: str, value: str | None) -> None:
    if value is None:
        return
    try:
        _dt.date.fromisoformat(value)
        if len(value) != 10:
            raise ValueError
    except ValueError:
        raise InvalidArgument(f"Expected the {key} filter as a date YYYY-MM-DD (UTC) but got {value[:40]!r}") from None


@dataclass(frozen=True)
class SweepRow:
    """One sweep as the index shows it: its identity and how its seeds' runs stand."""

    id: str
    name: str
    workload: str
    created: str
    seeds: int
    ok: int
    failed: int
    config_hash: str
    code_version: str
    config: dict[str, Any] = field(default_factory=dict)
    previous: tuple[str, str] | None = None  # (id, name) of the sweep before it of the same workload

    @property
    def missing(self) -> int:
        """Seeds with no run recorded yet (an interrupted sweep)."""
        return self.seeds - self.ok - self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "workload": self.workload, "created": self.created,
                "seeds": self.seeds, "ok": self.ok, "failed": self.failed, "missing": self.missing,
                "config_hash": self.config_hash, "code_version": self.code_version, "config": self.config,
                "previous": list(self.previous) if self.previous else None}


@dataclass(frozen=True)
class IncidentRow:
    id: str
    title: str
    status: str
    created: str
    updated: str


@contextmanager
def connect(store_path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store at ``store_path`` (never creates or migrates it; a read-only copy whose
    -wal file holds changes is read whole, as every command reads it); a store this firstdiv cannot read is one
    StoreError or NotFound naming the fix."""
    path = Path(store_path)
    if not path.is_file():
        what = "is a directory, not a run store" if path.is_dir() else "does not exist"
        raise NotFound(f"{path} {what}; run `firstdiv sweep` first or pass --store PATH")
    conn, copy = None, None
    try:
        conn, copy = store_open.connect_readonly(path, 10.0)
        _check_version(conn, path)
        yield conn
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise store_open.broken(path, exc, 10.0) from None
    finally:
        if conn is not None:
            conn.close()
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise StoreError(f"{path} is not a firstdiv store (no meta table); pass another --store PATH")
    version = store_schema.read_version(conn, path)
    if version != store_schema.SCHEMA_VERSION:
        raise StoreError(f"{path} has store schema version {version}, this firstdiv reads {store_schema.SCHEMA_VERSION}: "
                         + ("upgrade firstdiv to read it" if version > store_schema.SCHEMA_VERSION else
                            "run any firstdiv command on it once (e.g. `firstdiv runs --store PATH`) to upgrade it"))


#: the largest limit or offset passed to SQLite (its integers are 64-bit)
_SQL_INT_MAX = 2**63 - 1


def _limits(limit: int, offset: int) -> tuple[int, int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _SQL_INT_MAX:
        raise InvalidArgument(f"Expected limit as an integer from 1 to 2**63-1 but got {_short(limit)}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= _SQL_INT_MAX:
        raise InvalidArgument(f"Expected offset as an integer from 0 to 2**63-1 but got {_short(offset)}")
    return limit, offset


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def sweep_rows(conn: sqlite3.Connection, filters: Filters, limit: int, offset: int) -> list[SweepRow]:
    """A page of sweeps, newest first, each with its seeds' ok and failed counts."""
    limit, offset = _limits(limit, offset)
    where, params = filters.where("p")
    query = _PAGE.format(previous=_WITH_PREVIOUS, where=where, read_ok=_READ_OK, read_any=_READ_ANY)
    rows = conn.execute(query, (*params, limit, offset)).fetchall()
    return [SweepRow(id=r[0], name=r[1], workload=r[2], created=r[3], config_hash=str(r[4] or ""),
                     code_version=str(r[5] or ""), config=_config(r[6]), previous=(r[7], r[8]) if r[7] else None,
                     seeds=r[9], ok=r[10], failed=r[11]) for r in rows]


def _config(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def sweep_total(conn: sqlite3.Connection, filters: Filters) -> int:
    where, params = filters.where("p")
    return int(conn.execute(f"SELECT COUNT(*) FROM sweeps p WHERE {where}", params).fetchone()[0])


def workloads(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """Every workload in the store with its number of sweeps (the index's filter links)."""
    return [(r[0], r[1]) for r in conn.execute("SELECT workload, COUNT(*) FROM sweeps GROUP BY workload ORDER BY workload")]


def incident_rows(conn: sqlite3.Connection, filters: Filters, limit: int | None = 200) -> list[IncidentRow]:
    """Incidents, newest first (``limit`` of them, None: all); the name filter matches their title, the dates
    their opening day (the workload filter does not apply: an incident names no workload)."""
    where, params = Filters(name=filters.name, since=filters.since, until=filters.until).where("i", "title")
    rows = conn.execute(f"SELECT id, title, status, created, updated FROM incidents i WHERE {where} "
                        "ORDER BY created DESC, id DESC LIMIT ?", (*params, -1 if limit is None else limit)).fetchall()
    return [IncidentRow(*r) for r in rows]


def sweep_name(conn: sqlite3.Connection, sweep_id: str) -> str | None:
    row = conn.execute("SELECT name FROM sweeps WHERE id=?", (sweep_id,)).fetchone()
    return row[0] if row else None


def all_pages(conn: sqlite3.Connection) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """Every page the site has: sweep ids, comparable pairs (previous, sweep) and incident ids."""
    sweeps, pairs = [], []
    for sweep_id, prev_id in conn.execute(f"SELECT id, prev_id FROM ({_WITH_PREVIOUS}) ORDER BY created, id"):
        sweeps.append(sweep_id)
        if prev_id:
            pairs.append((prev_id, sweep_id))
    incidents = [r[0] for r in conn.execute("SELECT id FROM incidents ORDER BY created, id")]
    return sweeps, pairs, incidents
