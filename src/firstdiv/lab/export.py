"""Runs out of the store: one row per run in CSV or JSON lines, and the curves in long form.

A run row flattens what the run was and what it did: ``run_id`` (the store's id, as ``firstdiv runs --drop``
takes it), the sweep's ``sweep`` name and ``sweep_id``, ``workload``, ``identity``, ``config_hash``, the code
version as ``code.<key>`` (commit, dirty, dirty_hash, version), ``env_hash``, ``seed``, ``status``, ``error``,
``created``, ``wall_seconds``, then every config key as ``config.<key>`` and every final metric as
``metric.<key>``. Rows come sweep by sweep (oldest sweep first), each sweep's runs in seed order; a run two sweeps
share appears under each. A curve row is ``run_id, metric, step, value`` (step counts the logged rows from 0),
once per run. In CSV a missing value is an empty cell and a list or dict value is its JSON; in JSON lines every
row has every column (null when missing) and a NaN or infinite number is the string "nan", "inf" or "-inf".
The output is written whole or not at all: it is built first, then moved into place.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, NotFound
from . import store_runs
from .record import RunRecord, jsonable
from .store import Store, SweepInfo

__all__ = ["FORMATS", "curve_rows", "export", "run_rows", "runs", "write"]

FORMATS = ("csv", "jsonl")
CURVE_COLUMNS = ("run_id", "metric", "step", "value")
_HEAD = ("run_id", "sweep", "sweep_id", "workload", "identity", "config_hash")
_TAIL = ("env_hash", "seed", "status", "error", "created", "wall_seconds")

#: one exported run: its store id (None when not known, as in a SweepResult), its sweep, its record
Entry = tuple[int | None, SweepInfo, RunRecord]


def runs(store: Store, *, name: str | None = None, workload: str | None = None) -> list[Entry]:
    """Every run the store's sweeps read (failed ones included), filtered by sweep ``name`` and ``workload``."""
    sweeps = [s for s in store.sweeps() if (name is None or s.name == name) and (workload is None or s.workload == workload)]
    if not sweeps and (name is not None or workload is not None):
        known = sorted({s.name if name is not None else s.workload for s in store.sweeps()})
        what = f"sweep named {name!r}" + (f" of workload {workload!r}" if workload is not None else "") \
            if name is not None else f"sweep of workload {workload!r}"
        shown = ", ".join(known[:10]) + (" ..." if len(known) > 10 else "") if known else "none yet"
        raise NotFound(f"No {what} in {store.path} (known {'names' if name is not None else 'workloads'}: {shown}); "
                       "see `firstdiv runs`")
    out: list[Entry] = []
    for s in sweeps:
        rows = store._rows(store_runs.VIEW, (s.identity, s.id))  # Store.records, keeping each run's id
        out += [(run_id, s, store_runs.parse(run_id, payload, path=store.path, sweep=s.name, seed=seed))
                for seed, run_id, _status, payload in rows]
    return out


def run_rows(entries: Iterable[Entry], *, with_run_id: bool = True) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, one dict per run); see the module docstring for the columns."""
    rows: list[dict[str, Any]] = []
    code_keys: dict[str, None] = {}
    extra: dict[str, None] = {}
    for run_id, sweep, r in entries:
        code = {f"code.{k}": v for k, v in r.code.items()}
        code_keys.update(dict.fromkeys(code))
        row = {"run_id": run_id, "sweep": sweep.name, "sweep_id": sweep.id, "workload": r.workload,
               "identity": r.identity, "config_hash": r.config_hash, **code, "env_hash": r.env_hash, "seed": r.seed,
               "status": r.status, "error": r.error, "created": r.created, "wall_seconds": r.wall_seconds}
        row.update({f"config.{k}": v for k, v in r.config.items()})
        row.update({f"metric.{k}": v for k, v in r.final.items()})
        extra.update(dict.fromkeys(k for k in row if k.startswith(("config.", "metric."))))
        rows.append(row)
    head = [c for c in _HEAD if with_run_id or c != "run_id"]
    columns = [*head, *code_keys, *_TAIL, *sorted(k for k in extra if k.startswith("config.")),
               *sorted(k for k in extra if k.startswith("metric."))]
    if not with_run_id:
        for row in rows:
            row.pop("run_id")
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


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(jsonable(value), sort_keys=True)
    return value


def render(columns: list[str], rows: list[dict[str, Any]], fmt: str) -> str:
    """The rows as CSV (with a header) or JSON lines."""
    check_format(fmt)
    buf = io.StringIO()
    if fmt == "csv":
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({c: _cell(row.get(c)) for c in columns} for row in rows)
    else:
        for row in rows:
            buf.write(json.dumps(jsonable({c: row.get(c) for c in columns}), allow_nan=False) + "\n")
    return buf.getvalue()


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
    path = check_output(output)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InvalidArgument(f"Cannot write --output {path} ({exc.strerror}); pass a writable path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())  # not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    try:
        entries = runs(st, name=name, workload=workload)  # type: ignore[arg-type]
    finally:
        if owned:
            st.close()  # type: ignore[union-attr]
    text = render(*(curve_rows(entries) if curves else run_rows(entries)), fmt)
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
