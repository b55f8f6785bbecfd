"""Every page of the site: the index (its own template) and the pages it links, which are the existing HTML
reports of firstdiv.render.html, rendered from the store when asked for.

Links are relative (``sweep/ID.html``, ``compare/BASE--CAND.html``, ``incident/ID.html``, ``?workload=X``),
so the same index works served by `firstdiv ui` and opened from a folder written by `firstdiv report --site`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import re
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe

from .._format import describe_error, first_line
from ..errors import FirstdivError, InvalidArgument, NotFound
from . import _query
from ._query import Filters

PER_PAGE = 200
#: the highest page number the index answers (its offset stays far inside SQLite's 64-bit integers)
MAX_PAGE = 10**9
#: a page address: kind/NAME.html, NAME made of the characters the store's ids use
_ROUTE = re.compile(r"^/?(sweep|incident|compare)/([A-Za-z0-9_-]{1,130})\.html$")
_SWEEP_ID = re.compile(r"^[0-9a-f]{1,64}$")
# matplotlib and its font cache are shared process state: one page is drawn at a time
_DRAWING = threading.Lock()


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("firstdiv.site", "templates"),
                                  jinja2.PackageLoader("firstdiv.render.html", "templates")])  # its _style.html.j2
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


@functools.lru_cache(maxsize=1)
def _script() -> tuple[str, markupsafe.Markup]:
    """The static index's filter script and its CSP hash (the page allows that script and nothing else)."""
    text = (Path(__file__).parent / "templates" / "filter.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return text, markupsafe.Markup(f"'sha256-{digest}'")  # base64: nothing to escape


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("firstdiv")
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Route:
    """A page the index links: ``kind`` sweep, compare or incident, and the ids it shows."""

    kind: str
    ids: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"{self.kind}/{'--'.join(self.ids)}.html"


def parse_route(path: str) -> Route | None:
    """The page at ``path`` (``/sweep/ID.html`` ...), None when there is no such address."""
    match = _ROUTE.match(path)
    if not match:
        return None
    kind, name = match.groups()
    ids = tuple(name.split("--")) if kind == "compare" else (name,)
    if kind == "compare" and len(ids) != 2:
        return None
    if kind != "incident" and not all(_SWEEP_ID.match(i) for i in ids):
        return None
    return Route(kind, ids)


def config_summaries(rows: list[_query.SweepRow]) -> dict[str, str]:
    """Per sweep, the config values that tell it apart from the other listed sweeps of its workload."""
    by_workload: dict[str, list[_query.SweepRow]] = {}
    for row in rows:
        by_workload.setdefault(row.workload, []).append(row)
    out = {}
    for group in by_workload.values():
        keys = sorted({k for r in group for k in r.config})
        varying = [k for k in keys if len({repr(r.config.get(k)) for r in group}) > 1]
        for row in group:
            parts = [f"{k}={row.config.get(k)}" for k in varying if k in row.config]
            out[row.id] = ", ".join(parts[:4]) + (f" +{len(parts) - 4} more" if len(parts) > 4 else "")
    return out


def _link(filters: dict[str, str], **changes: Any) -> str:
    query = {**filters, **{k: str(v) for k, v in changes.items() if v is not None}}
    return "?" + urlencode(query) if query else "?"


def page_number(text: str) -> int:
    """The index page a query's ``page=`` asks for: ASCII digits, 1 to ``MAX_PAGE``; else one InvalidArgument."""
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_PAGE))) or not 1 <= int(text) <= MAX_PAGE:
        raise InvalidArgument(f"Expected page as an integer from 1 to {MAX_PAGE} but got {text[:24]!r}; "
                              "follow the index's page links")
    return int(text)


def index_html(store_path: str | os.PathLike[str], filters: Filters, *, page: int = 1, static: bool = False) -> str:
    """The index: sweeps (``PER_PAGE`` a page, or all of them with ``static``), comparable pairs, incidents."""
    if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= MAX_PAGE:
        raise InvalidArgument(f"Expected page as an integer from 1 to {MAX_PAGE} but got {page!r}")
    if static:  # every row is listed; the page's script filters them
        filters, page = Filters(), 1
    with _query.connect(store_path) as conn:
        total = _query.sweep_total(conn, filters)
        rows = _query.sweep_rows(conn, filters, max(total, 1) if static else PER_PAGE, (page - 1) * PER_PAGE)
        incidents = _query.incident_rows(conn, filters, limit=None if static else PER_PAGE)
        workloads = _query.workloads(conn)
    script, script_hash = _script()
    first = (page - 1) * PER_PAGE
    ctx = {"title": f"Run store {Path(store_path).name}", "store": str(store_path), "version": _version(),
           "rows": rows, "summaries": config_summaries(rows), "incidents": incidents, "workloads": workloads,
           "filters": filters.as_dict(), "total": total, "static": static, "script": script,
           "script_hash": script_hash, "first": first + 1 if rows else 0, "last": first + len(rows),
           "prev_link": _link(filters.as_dict(), page=page - 1) if page > 1 and not static else None,
           "next_link": _link(filters.as_dict(), page=page + 1) if first + len(rows) < total and not static else None,
           "link": functools.partial(_link, filters.as_dict())}
    return _env().get_template("index.html.j2").render(ctx)


def error_html(status: int, reason: str) -> str:
    """The page for a status that is not 200: the status and the one-line reason, nothing else."""
    titles = {400: "Bad request", 403: "Forbidden", 404: "Not found", 500: "This page could not be rendered"}
    return _env().get_template("error.html.j2").render(
        title=f"{status} {titles.get(status, 'Error')}", reason=reason, version=_version())


@contextlib.contextmanager
def _glyph_notes_dropped() -> Iterator[None]:
    """matplotlib names a sweep's control characters it has no glyph for; the page shows the name escaped."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        yield


def page_html(store_path: str | os.PathLike[str], route: Route, *, metric: str | None = None) -> str:
    """The existing report page for ``route``, rendered now from the store opened read-only.

    A sweep's page is `firstdiv report SWEEP`'s; a pair's is `firstdiv report BASE CAND`'s on ``metric``
    (default val_loss when both sides have it, else the first metric they share); an incident's is
    `firstdiv report incident:ID`'s."""
    from ..lab.store import Store
    from ..render.html import to_html

    with Store(store_path, readonly=True) as st, _DRAWING, _glyph_notes_dropped():
        if route.kind == "incident":
            from ..diagnosis.incident import incident_show

            found = incident_show(route.ids[0], store=st)
            if found.id != route.ids[0]:
                raise NotFound(f"No incident {route.ids[0]!r} in {st.path}")
            return to_html(found)
        sides = [_sweep(st, i) for i in route.ids]
        if route.kind == "sweep":
            return to_html(sides[0])
        from ..lab.compare import comparison_view

        return to_html(comparison_view(sides[0], sides[1], metric=metric or _shared_metric(*sides)))


def _sweep(st: Any, sweep_id: str) -> Any:
    from ..lab.sweep import load_sweep

    if not _sweep_exists(st.path, sweep_id):
        raise NotFound(f"No sweep with id {sweep_id} in {st.path}; reload the index")
    result = load_sweep(sweep_id, st)
    if result.sweep.id != sweep_id:  # a sweep whose *name* is this id: read the one the address means
        raise NotFound(f"Sweep id {sweep_id} is also another sweep's name; open it with `firstdiv report {sweep_id}`")
    return result


def _sweep_exists(store_path: Path, sweep_id: str) -> bool:
    with _query.connect(store_path) as conn:
        return _query.sweep_name(conn, sweep_id) is not None


def _shared_metric(base: Any, cand: Any) -> str:
    shared = [m for m in base.metrics if m in set(cand.metrics)]
    if "val_loss" in shared or not shared:
        return "val_loss"
    return shared[0]


def describe(exc: BaseException) -> str:
    """One line for a page that failed: what went wrong, without a traceback."""
    return first_line(exc, 300) if isinstance(exc, FirstdivError) else describe_error(exc)
