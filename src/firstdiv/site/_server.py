"""`firstdiv ui`'s server: the standard library's ThreadingHTTPServer answering every request from the store,
opened read-only and rendered then (a reload shows new runs). Unknown addresses are 404 pages, bad filter
values 400, a page whose rendering fails a 500 page with the one-line reason; no traceback reaches the browser."""

from __future__ import annotations

import errno
import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ..errors import InvalidArgument, NotFound
from . import _pages, _query
from ._query import Filters

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def respond(store_path: str | os.PathLike[str], target: str) -> tuple[int, str]:
    """The status and the page for the request target ``target`` (a path with its query)."""
    url = urlsplit(target)
    query = parse_qs(url.query)
    try:
        if url.path in ("/", "/index.html"):
            page = _pages.page_number(query.get("page", ["1"])[-1])
            return 200, _pages.index_html(store_path, Filters.from_query(query), page=page)
        route = _pages.parse_route(url.path)
        if route is None:
            raise NotFound(f"No page at {url.path[:200]}; the index at / links every page")
        return 200, _pages.page_html(store_path, route, metric=query.get("metric", [None])[-1])
    except NotFound as exc:
        return 404, _pages.error_html(404, _pages.describe(exc))
    except InvalidArgument as exc:
        return 400, _pages.error_html(400, _pages.describe(exc))
    except Exception as exc:  # noqa: BLE001 - the server's boundary: a failed page is a 500 page, not a traceback
        reason = _pages.describe(exc)
        print(f"firstdiv ui: {url.path[:200]}: {reason}", file=sys.stderr)
        return 500, _pages.error_html(500, reason)


#: sent with every response, error responses of http.server included: no page of the store is framed by another
#: site (each page's own policy, in its <meta>, cannot say frame-ancestors)
SECURITY_HEADERS = (("X-Frame-Options", "DENY"), ("Content-Security-Policy", "frame-ancestors 'none'"),
                    ("X-Content-Type-Options", "nosniff"))


class _Handler(BaseHTTPRequestHandler):
    server: SiteServer
    server_version = "firstdiv-ui"

    def version_string(self) -> str:
        """The Server header: the program's name, not the interpreter's version."""
        return self.server_version

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        if not self.server.host_allowed(self.headers.get("Host", "")):
            status, page = 403, _pages.error_html(403, "This server answers requests addressed to it by its own "
                                                         "host name only; open the URL `firstdiv ui` printed")
        else:
            status, page = respond(self.server.store_path, self.path)
        data = page.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Requests are not logged line by line; a page that fails says so on stderr (see respond)."""


class SiteServer(ThreadingHTTPServer):
    """Serves the store at ``store_path`` on ``host``:``port`` (0: any free port); see :attr:`url`."""

    daemon_threads = True

    def __init__(self, store_path: str | os.PathLike[str], host: str, port: int) -> None:
        self.store_path = Path(store_path)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"http://{shown}:{port}/"

    def host_allowed(self, header: str) -> bool:
        """Bound to a loopback address, only requests naming a loopback host are answered (a web page
        elsewhere cannot reach the store through a DNS name that resolves here)."""
        bound = str(self.server_address[0])
        if bound not in _LOOPBACK:
            return True
        name = header.rsplit(":", 1)[0] if not header.startswith("[") else header[1:].split("]")[0]
        return name in _LOOPBACK


def make_server(store_path: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 8765) -> SiteServer:
    """A server for the store (checked readable first); a port in use is an InvalidArgument suggesting port 0."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgument(f"Expected a port from 0 to 65535 but got {port!r}; 0 picks any free port")
    with _query.connect(store_path):
        pass
    try:
        return SiteServer(store_path, host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InvalidArgument(f"Port {port} on {host} is in use; pass --port 0 for any free port, "
                                  "or another --port") from None
        reason = exc.strerror or str(exc)
        raise InvalidArgument(f"Cannot listen on {host}:{port} ({reason}); pass another --host or --port") from None
