"""Runs out of the store: one row per run in CSV or JSON lines, and the curves in long form.

A run row flattens what the run was and what it did: ``run_id`` (the store's id, as ``firstdiv runs --drop``
takes it), the sweep's ``sweep`` name and ``sweep_id``, ``workload``, ``identity``, ``config_hash``, the code
version as ``code.<key>`` (commit, dirty, dirty_hash, version), ``env_hash``, ``seed``, ``status``, ``exit_code``
(a command run's child process; empty for an in-process run), ``error``, ``created``, ``wall_seconds``, then
every config key as ``config.<key>`` and every final metric as ``metric.<key>``. Rows come sweep by sweep
(oldest sweep first), each sweep's runs in seed order; a run two sweeps share appears under each. A curve row is ``run_id, metric, step, value`` (step counts the logged rows from 0),
once per run. In CSV a missing value is an empty cell, a list or dict value is its JSON, and a text cell a
spreadsheet would run as a formula (starting with = + - @ TAB or CR) starts with a single quote (see export_text);
in JSON lines every row has every column (null when missing), text is exact, and a NaN or infinite number is the
string "nan", "inf" or "-inf".
The output is written whole or not at all: every record is read (and checked) before the first row is written,
and a file is written beside its place, then moved there. Rows stream through a temporary spool, so a store of
100,000s of runs is exported in bounded memory; the sweeps are chosen by the store's indexes, and SQLite hands
over just the fields a row needs of each record (the curves, environment and eval contract stay unparsed).
"""

from __future__ import annotations

import io
import marshal
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from ..errors import InvalidArgument, NotFound
from . import export_text
from .export_text import emit
from .record import NONFINITE, RunRecord, from_json
from .store import Store, SweepInfo

__all__ = ["FORMATS", "Written", "curve_rows", "export", "export_to", "run_rows", "runs", "write"]

FORMATS = ("csv", "jsonl")
CURVE_COLUMNS = ("run_id", "metric", "step", "value")
_HEAD = ("run_id", "sweep", "sweep_id", "workload", "identity", "config_hash")
_TAIL = ("env_hash", "seed", "status", "exit_code", "error", "created", "wall_seconds")

#: one exported run: its store id (None when not known, as in a SweepResult), its sweep, its record
Entry = tuple[int | None, SweepInfo, RunRecord]
#: the same, with just some of the record's fields
FieldEntry = tuple[int | None, SweepInfo, dict[str, Any]]


def select(store: Store, *, name: str | None = None, workload: str | None = None) -> list[SweepInfo]:
    """The sweeps with ``name`` and ``workload`` (all without either), oldest first; none is NotFound."""
    sweeps = store.sweeps(name=name, workload=workload)
    if not sweeps and (name is not None or workload is not None):
        known, more = store.sweep_names(workloads=name is None)
        what = f"sweep named {name!r}" + (f" of workload {workload!r}" if workload is not None else "") \
            if name is not None else f"sweep of workload {workload!r}"
        shown = ", ".join(known) + (" ..." if more else "") if known else "none yet"
        raise NotFound(f"No {what} in {store.path} (known {'names' if name is not None else 'workloads'}: {shown}); "
                       "see `firstdiv runs`")
    return sweeps


def entries(store: Store, sweeps: Iterable[SweepInfo]) -> Iterator[Entry]:
    """Each sweep's runs (failed ones included) in seed order, read one sweep at a time."""
    for s in sweeps:
        yield from ((run_id, s, record) for run_id, record in store.runs_of(s))


def runs(store: Store, *, name: str | None = None, workload: str | None = None) -> list[Entry]:
    """Every run the store's sweeps read (failed ones included), filtered by sweep ``name`` and ``workload``."""
    return list(entries(store, select(store, name=name, workload=workload)))


#: what a run row reads of its record: SQLite extracts just these, the curves, environment and contract stay unread
_FIELDS = ("workload", "identity", "config_hash", "code", "env_hash", "seed", "status", "exit_code", "error",
           "created", "wall_seconds", "config", "final")
_KINDS: dict[str, Any] = {"workload": str, "identity": str, "config_hash": str, "code": dict, "env_hash": str,
                          "seed": int, "status": str, "exit_code": (int, type(None)), "error": (str, type(None)),
                          "created": str, "wall_seconds": (int, float), "config": dict, "final": dict}


def _row(run_id: int | None, sweep: SweepInfo, f: dict[str, Any]) -> dict[str, Any]:
    row = {"run_id": run_id, "sweep": sweep.name, "sweep_id": sweep.id, "workload": f["workload"],
           "identity": f["identity"], "config_hash": f["config_hash"], **{f"code.{k}": v for k, v in f["code"].items()},
           "env_hash": f["env_hash"], "seed": f["seed"], "status": f["status"], "exit_code": f["exit_code"],
           "error": f["error"], "created": f["created"], "wall_seconds": f["wall_seconds"]}
    row.update({f"config.{k}": v for k, v in f["config"].items()})
    row.update({f"metric.{k}": v for k, v in f["final"].items()})
    return row


def _well_formed(f: dict[str, Any]) -> bool:
    """The fields as RunRecord.from_dict and the store's checks would take them (anything else, a missing
    field that has a default included, is read the slow way, which fills it in or names the damage)."""
    for name, kind in _KINDS.items():
        value = f[name]
        if not isinstance(value, kind) or value is True or value is False:
            return False
    return all(type(v) in (int, float) or isinstance(v, str) and v in NONFINITE for v in f["final"].values())


def fields(store: Store, sweeps: Iterable[SweepInfo], names: tuple[str, ...] = _FIELDS) -> Iterator[FieldEntry]:
    """Each sweep's runs (failed ones included) in seed order, with just the record's fields ``names`` (the run
    row's, or ``("curves",)``) as the store reads them, metric values decoded. SQLite parses the records; a run
    it cannot hand over well-formed is read whole, so a damaged one is the store's error naming it."""
    check = _well_formed if names == _FIELDS else (lambda f: isinstance(f["curves"], dict))
    for s in sweeps:
        rows = store.run_fields(s, names)
        if rows is None:  # one record SQLite's JSON does not take: the sweep read whole
            yield from ((run_id, s, _pick(r, names)) for run_id, r in store.runs_of(s))
            continue
        whole: dict[int, RunRecord] | None = None
        for run_id, values in rows:
            f = dict(zip(names, values))
            if check(f):
                for name in {"final", "curves"}.intersection(names):
                    f[name] = from_json(f[name])
            else:
                whole = dict(store.runs_of(s)) if whole is None else whole  # raises the error naming damage
                f = _pick(whole[run_id], names)
            yield run_id, s, f


def _pick(r: RunRecord, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(r, name) for name in names}


class _Columns:
    """The run rows' columns, gathered row by row: the code keys as first seen, config and metric keys sorted."""

    def __init__(self) -> None:
        self.code: dict[str, None] = {}
        self.extra: set[str] = set()
        self.seen: set[tuple[str, ...]] = set()  # the key sets met so far: a sweep's runs mostly share one

    def add(self, row: dict[str, Any]) -> None:
        keys = tuple(row)
        if keys in self.seen:
            return
        self.seen.add(keys)
        self.code.update(dict.fromkeys(k for k in keys if k.startswith("code.")))
        self.extra.update(k for k in keys if k.startswith(("config.", "metric.")))

    def columns(self, with_run_id: bool = True) -> list[str]:
        head = [c for c in _HEAD if with_run_id or c != "run_id"]
        return [*head, *self.code, *_TAIL, *sorted(k for k in self.extra if k.startswith("config.")),
                *sorted(k for k in self.extra if k.startswith("metric."))]


def run_rows(entries: Iterable[Entry], *, with_run_id: bool = True) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, one dict per run); see the module docstring for the columns."""
    cols = _Columns()
    rows = []
    for run_id, sweep, record in entries:
        rows.append(_row(run_id, sweep, _pick(record, _FIELDS)))
        cols.add(rows[-1])
    columns = cols.columns(with_run_id)
    return columns, [{c: row.get(c) for c in columns} for row in rows]


def curve_rows(entries: Iterable[Entry]) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, one dict per logged value): run_id, metric, step, value; each run once."""
    seen: set[Any] = set()
    rows: list[dict[str, Any]] = []
    for run_id, _sweep, r in entries:
        if run_id in seen:
            continue
        seen.add(run_id)
        rows += [{"run_id": run_id, "metric": metric, "step": step, "value": value}
                 for metric, values in r.curves.items() for step, value in enumerate(values)]
    return list(CURVE_COLUMNS), rows


def render(columns: list[str], rows: Iterable[dict[str, Any]], fmt: str) -> str:
    """The rows as CSV (with a header) or JSON lines (see :mod:`firstdiv.lab.export_text`)."""
    check_format(fmt)
    return export_text.render(columns, rows, fmt)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidArgument(f"Unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}")


def check_output(output: str | os.PathLike[str]) -> Path:
    """The output file's path, refused (one line) when it cannot be written there."""
    path = Path(output)
    if path.is_dir():
        raise InvalidArgument(f"--output {path} is a directory; pass a file path, e.g. {path / 'runs.csv'}")
    if not path.parent.is_dir():
        raise InvalidArgument(f"--output {path}: directory {path.parent} does not exist; create it or pass another path")
    return path


def write(text: str, output: str | os.PathLike[str]) -> Path:
    """Write ``text`` to ``output`` whole: a temporary file beside it, then moved into place."""
    with _replacing(output) as (path, fh):
        fh.write(text)
    return path


@contextmanager
def _replacing(output: str | os.PathLike[str]) -> Iterator[tuple[Path, TextIO]]:
    """A file to write ``output``'s text to: a temporary file beside it, moved into place when the block ends
    without an error (removed when it raises)."""
    path = check_output(output)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InvalidArgument(f"Cannot write --output {path} ({exc.strerror}); pass a writable path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield path, fh
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())  # not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Written:
    """What an export wrote: the file (None: the text went to ``put``), its row count and its columns."""

    path: Path | None
    rows: int
    columns: list[str]


def _spool(items: Iterable[FieldEntry], curves: bool, spool: IO[bytes]) -> list[str]:
    """Read every run into ``spool`` (its row, or its curves) and return the columns. Every record is parsed and
    checked here, before anything is written out. The spool holds batches of plain values in marshal's format
    (read back by this process only), each after its length."""
    cols, seen, batch = _Columns(), set(), []
    for run_id, sweep, f in items:
        if not curves:
            batch.append(_row(run_id, sweep, f))
            cols.add(batch[-1])
        elif run_id not in seen:
            seen.add(run_id)
            batch.append((run_id, f["curves"]))
        if len(batch) >= _BATCH:
            _put(spool, batch)
            batch = []
    _put(spool, batch)
    return list(CURVE_COLUMNS) if curves else cols.columns()


_BATCH = 512


def _put(spool: IO[bytes], batch: list[Any]) -> None:
    if batch:
        blob = marshal.dumps(batch)
        spool.write(len(blob).to_bytes(8, "little") + blob)


def _unspool(spool: IO[bytes], curves: bool) -> Iterator[dict[str, Any]]:
    spool.seek(0)
    while head := spool.read(8):
        for item in marshal.loads(spool.read(int.from_bytes(head, "little"))):
            if not curves:
                yield item
                continue
            run_id, values = item
            yield from ({"run_id": run_id, "metric": metric, "step": step, "value": value}
                        for metric, series in values.items() for step, value in enumerate(series))


def export_to(store: Store, output: str | os.PathLike[str] | None = None, *, fmt: str = "csv", curves: bool = False,
              name: str | None = None, workload: str | None = None,
              put: Callable[[str], Any] | None = None) -> Written:
    """Stream the export (see :func:`export`) to ``output``, whole or not at all, or without one to ``put``
    (a ``write`` for text, e.g. stdout's); nothing is written when a record is damaged or a filter matches nothing."""
    check_format(fmt)
    if output is None and put is None:
        raise InvalidArgument("export_to() needs an output file or a `put` to write the text to")
    if output is not None:
        check_output(output)
    with tempfile.SpooledTemporaryFile(max_size=16 << 20) as spool:
        chosen = select(store, name=name, workload=workload)
        columns = _spool(fields(store, chosen, ("curves",) if curves else _FIELDS), curves, spool)
        if output is None:
            return Written(None, emit(columns, _unspool(spool, curves), fmt, put), columns)  # type: ignore[arg-type]
        with _replacing(output) as (path, fh):
            n = emit(columns, _unspool(spool, curves), fmt, fh.write)
    return Written(path, n, columns)


def export(store: Store | str | os.PathLike[str] | None = None, *, fmt: str = "csv", curves: bool = False,
           name: str | None = None, workload: str | None = None,
           output: str | os.PathLike[str] | None = None) -> str:
    """The store's runs (or with ``curves`` their curves, long form) as CSV or JSON lines text; with ``output``
    also written to that file, whole or not at all. ``name`` and ``workload`` keep the sweeps that match."""
    check_format(fmt)
    if output is not None:
        check_output(output)
    owned = not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    buf = io.StringIO()
    try:
        export_to(st, fmt=fmt, curves=curves, name=name, workload=workload, put=buf.write)  # type: ignore[arg-type]
    finally:
        if owned:
            st.close()  # type: ignore[union-attr]
    text = buf.getvalue()
    if output is not None:
        write(text, output)
    return text


def to_pandas(result: Any) -> Any:
    """A SweepResult's runs (ok and failed, seed order) as a pandas DataFrame with the export's columns, less
    ``run_id`` (a SweepResult does not carry the store's ids)."""
    try:
        import pandas as pd
    except ImportError:
        raise InvalidArgument("SweepResult.to_pandas() needs pandas, which is not installed here; install it with: "
                              "pip install pandas") from None
    records = sorted((*result.records, *result.failed), key=lambda r: r.seed)
    columns, rows = run_rows(((None, result.sweep, r) for r in records), with_run_id=False)
    return pd.DataFrame(rows, columns=columns)
