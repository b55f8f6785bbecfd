"""`firstdiv report --site DIR`: the index and every page it links, written as static files with relative
links (they work from file://). The site is written into a new folder beside DIR and renamed into place at
the end: an error leaves DIR as it was (absent, or the previous site) and no half-written folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._files import swap_in
from ..errors import FirstdivError, InvalidArgument
from . import _pages, _query
from ._query import Filters

#: the file that marks a folder as a site this command wrote (and may therefore replace)
MARKER = ".firstdiv-site"


@dataclass(frozen=True)
class Site:
    """A written site: its folder and how many HTML pages it holds (the index included)."""

    path: Path
    pages: int

    def to_dict(self) -> dict[str, object]:
        return {"site": str(self.path), "pages": self.pages}


def _check_target(target: Path) -> None:
    if target.exists() and not target.is_dir():
        raise InvalidArgument(f"{target} is a file, not a folder; pass a new folder to --site")
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise InvalidArgument(f"{target} holds files and is not a site firstdiv wrote; pass a new or empty folder to --site")
    if not target.parent.is_dir():
        raise InvalidArgument(f"No folder {target.parent} to write the site {target.name!r} into; create it first")


def build_site(directory: str | os.PathLike[str], store_path: str | os.PathLike[str]) -> Site:
    """Write the site for the store at ``store_path`` to ``directory`` (replacing a site written there before)."""
    target = Path(directory).absolute()
    _check_target(target)
    with _query.connect(store_path):  # an unreadable store fails before anything is made
        pass
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        pages = _write_all(tmp, Path(store_path))
        os.chmod(tmp, 0o755)  # mkdtemp's folder is private; a site is meant to be read
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Site(target, pages)


def _write_all(root: Path, store_path: Path) -> int:
    (root / MARKER).write_text("written by `firstdiv report --site`; the command replaces this folder\n", encoding="utf-8")
    (root / "index.html").write_text(_pages.index_html(store_path, Filters(), static=True), encoding="utf-8")
    with _query.connect(store_path) as conn:
        sweeps, pairs, incidents = _query.all_pages(conn)
    routes = ([_pages.Route("sweep", (s,)) for s in sweeps] + [_pages.Route("compare", p) for p in pairs]
              + [_pages.Route("incident", (i,)) for i in incidents])
    for kind in ("sweep", "compare", "incident"):
        (root / kind).mkdir()
    for route in routes:
        if _pages.parse_route(route.path) != route:  # an incident id no file can be named by
            raise InvalidArgument(f"Cannot name a page for {route.kind} {route.ids[0]!r}; it is not written")
        try:
            page = _pages.page_html(store_path, route)
        except Exception as exc:  # noqa: BLE001 - any failure is one line naming the page; nothing is written
            raise FirstdivError(f"The site was not written: its page {route.path} failed ({_pages.describe(exc)})") from None
        (root / route.path).write_text(page, encoding="utf-8")
    return 1 + len(routes)
