"""Browse the run store: an index of its sweeps and incidents linking each one's HTML report.

    from firstdiv import site
    rows = site.index_rows("runs.db", workload="builtin:mlp", since="2026-01-01")  # SQL aggregates only
    server = site.make_server("runs.db", port=0)       # `firstdiv ui`: server.url, server.serve_forever()
    written = site.build_site("store-site", "runs.db")   # `firstdiv report --site DIR`

The index reads no run record: each sweep's seeds, ok and failed counts come from SQL over the store's
sweeps, sweep_seeds and runs tables, so it answers at the same speed for ten runs or a hundred thousand.
Each linked page is the existing report (firstdiv.render.html) of that sweep, of the comparison of a sweep
with the sweep before it of the same workload, or of an incident, rendered from the store opened read-only.
"""

from __future__ import annotations

import os

from ._query import Filters, IncidentRow, SweepRow
from ._server import SiteServer, make_server, respond
from ._static import Site, build_site

__all__ = ["Filters", "IncidentRow", "Site", "SiteServer", "SweepRow", "build_site", "incident_rows", "index_rows",
           "index_total", "make_server", "respond"]


def index_rows(store_path: str | os.PathLike[str], name: str | None = None, workload: str | None = None,
               since: str | None = None, until: str | None = None, limit: int = 200, offset: int = 0) -> list[SweepRow]:
    """Sweeps of the store, newest first: ``name`` a part of the name (any case), ``workload`` exactly,
    ``since``/``until`` UTC dates YYYY-MM-DD (both days included); ``limit`` rows from ``offset``."""
    from . import _query

    filters = Filters(name=name, workload=workload, since=since, until=until)
    with _query.connect(store_path) as conn:
        return _query.sweep_rows(conn, filters, limit, offset)


def index_total(store_path: str | os.PathLike[str], name: str | None = None, workload: str | None = None,
                since: str | None = None, until: str | None = None) -> int:
    """How many sweeps match the filters (see :func:`index_rows`)."""
    from . import _query

    with _query.connect(store_path) as conn:
        return _query.sweep_total(conn, Filters(name=name, workload=workload, since=since, until=until))


def incident_rows(store_path: str | os.PathLike[str], name: str | None = None, since: str | None = None,
                  until: str | None = None, limit: int = 200) -> list[IncidentRow]:
    """Incidents of the store, newest first; ``name`` matches a part of the title."""
    from . import _query

    with _query.connect(store_path) as conn:
        return _query.incident_rows(conn, Filters(name=name, since=since, until=until), limit)
