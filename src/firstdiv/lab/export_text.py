"""The export's text: rows as CSV (with a header) or JSON lines, written in chunks of whole rows.

In CSV a missing value is an empty cell, a list or dict value its JSON, and a text cell a spreadsheet would run as a
formula (starting with = + - @ TAB or CR; a number such as -1.5 or -inf is not text) has a single quote put before
it, as OWASP advises against formula injection; a row holding a CR has its text cells quoted. JSON lines hold every
value exactly, a NaN or infinite number spelled "nan", "inf" or "-inf".
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .record import jsonable

__all__ = ["emit", "render"]

_NESTED = frozenset((dict, list, tuple))


def _json_line(row: dict[str, Any]) -> str:
    try:
        return json.dumps(row, allow_nan=False) + "\n"
    except ValueError:  # a NaN or infinity: spelled as a string
        return json.dumps(jsonable(row), allow_nan=False) + "\n"


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(jsonable(value), sort_keys=True)
    return value


def render(columns: list[str], rows: Iterable[dict[str, Any]], fmt: str) -> str:
    """The rows as CSV (with a header) or JSON lines."""
    buf = io.StringIO()
    emit(columns, rows, fmt, buf.write)
    return buf.getvalue()


#: a CSV row holding a cell a spreadsheet might run as a formula (starting with = + - @ TAB, a - not of a number),
#: or a CR (a spreadsheet may start a row there)
_FORMULA = re.compile(r'(?:^|,)(?:"?[=+@\t]|"-|-(?!(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan)(?:,|\n)))|\r')
#: quick looks at ~64 KiB of rows that find every chunk holding a row _FORMULA finds: most chunks pass them all, so
#: the check costs an export a few scans of its text (each led by one character), not a look at each row or cell
_PLUS = re.compile(r"\+(?<=[,\n]\+)")
_MINUS = re.compile(r"-(?<=[,\n]-)(?!(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan)[,\n])")
_NUMBER = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|inf|infinity|nan)", re.IGNORECASE)


def _suspect(text: str) -> bool:
    return bool("=" in text or "@" in text or "\t" in text or '"' in text or "\r" in text or text[:1] in ("+", "-")
                or _PLUS.search(text) or _MINUS.search(text))


def _inert(value: Any) -> Any:
    """A text cell starting with = + - @ TAB or CR with a single quote before it (OWASP's advice against formula
    injection), unless it is a number such as -1.5 or -inf."""
    if value.__class__ is str and value[:1] in "=+-@\t\r" and not (value[:1] in "+-" and _NUMBER.fullmatch(value)):
        return "'" + value
    return value


class _Text:
    def write(self, text: str) -> str:
        return text


#: a CSV row with every text cell quoted (the csv module leaves a lone CR unquoted otherwise)
_quoted = csv.writer(_Text(), lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC).writerow


def _inert_row(text: str, cells: list[Any]) -> str:
    """The CSV row ``text`` (of ``cells``) as is, or again with its formula text made inert and its text quoted."""
    return _quoted([_inert(v) for v in cells]) if _FORMULA.search(text) else text


def emit(columns: list[str], rows: Iterable[dict[str, Any]], fmt: str, put: Callable[[str], Any]) -> int:
    """Write the rows to ``put`` (CSV with a header, or JSON lines) in chunks of whole rows; returns how many."""
    out = _Chunks(put, csv_cells=fmt == "csv")
    n = 0
    if fmt == "csv":
        write, keep = csv.writer(out, lineterminator="\n").writerow, out.cells.append
        keep(columns)
        write(columns)
        for row in rows:
            get = row.get
            cells = [get(c) for c in columns]
            if not _NESTED.isdisjoint(map(type, cells)):
                cells = [_cell(v) for v in cells]
            keep(cells)  # before the row is written: a chunk is checked when it is handed on
            write(cells)
            n += 1
    else:
        for row in rows:
            get = row.get
            out.write(_json_line({c: get(c) for c in columns}))
            n += 1
    out.flush()
    return n


class _Chunks:
    """A file-like ``write`` that hands ``put`` whole rows, about 64 KiB at a time; with ``csv_cells`` (each CSV
    row's cells kept in ``cells`` before it is written) a chunk's rows a spreadsheet might misread are made inert."""

    def __init__(self, put: Callable[[str], Any], csv_cells: bool = False) -> None:
        self.put, self.parts, self.size = put, [], 0
        self.cells: list[list[Any]] = []
        self.csv = csv_cells

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > 1 << 16:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            text = "".join(self.parts)
            if self.csv and _suspect(text):
                text = "".join(map(_inert_row, self.parts, self.cells))
            self.put(text)
            self.parts, self.size = [], 0
            self.cells.clear()  # in place: the writer appends to this list
