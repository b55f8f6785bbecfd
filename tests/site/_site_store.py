"""A small real run store for the site's tests, and a server for it in a thread.

Three sweeps: two of builtin:mlp on tiny configs (one rerun with --force, so its seeds are pinned) and
one of the tests' tiny workload whose seed 1 fails; one incident. The sweeps' creation dates are then set
to days in 2026 (as if they had been recorded then) so the date filters have something to select.
"""

import contextlib
import sqlite3
import threading
import urllib.error
import urllib.request
from pathlib import Path

from _paths import WORKLOADS

import firstdiv

FAST = ["epochs=1", "n_train=200", "n_val=100"]
TINY = f"{WORKLOADS / 'tiny.py'}:train"
#: sweep name -> (workload, day it is dated)
SWEEPS = {"base": ("builtin:mlp", "2026-01-10"), "LR-high": ("builtin:mlp", "2026-02-20"), "tiny-fail": (TINY, "2026-03-06")}
SYMPTOM = "loss is flat after finetuning"


def build_store(root: Path) -> Path:
    from firstdiv.diagnosis.incident import incident_new

    store = root / "runs.db"
    firstdiv.sweep("builtin:mlp", "0-2", sets=FAST, store=store, name="base")
    firstdiv.sweep("builtin:mlp", "0-2", sets=[*FAST, "lr=0.05"], store=store, name="LR-high")
    firstdiv.sweep("builtin:mlp", "0-2", sets=[*FAST, "lr=0.05"], store=store, name="LR-high", force=True)
    firstdiv.sweep(TINY, "0-2", config={"fail_seed": 1}, store=store, name="tiny-fail")
    incident_new(store=store, symptom=SYMPTOM)
    conn = sqlite3.connect(store, isolation_level=None)
    for name, (_, day) in SWEEPS.items():
        conn.execute("UPDATE sweeps SET created=? WHERE name=?", (f"{day}T12:00:00.000+00:00", name))
    conn.close()
    return store


_SHARED: dict[str, Path] = {}


def shared_store(tmp_path_factory) -> Path:
    """One store of :func:`build_store` for every test module of the session (they only read it)."""
    if "store" not in _SHARED:
        _SHARED["store"] = build_store(tmp_path_factory.mktemp("site-store"))
    return _SHARED["store"]


def sweep_ids(store: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT name, id FROM sweeps"))
    finally:
        conn.close()


@contextlib.contextmanager
def serving(store: Path):
    """`firstdiv ui`'s server for ``store`` on a free port, in a thread; shut down afterwards."""
    from firstdiv.site import make_server

    server = make_server(store, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def get(url: str, headers: dict | None = None, method: str = "GET") -> tuple[int, str, dict]:
    """(status, body, headers) of a GET (or ``method``), error statuses included."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode("utf-8"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8"), dict(exc.headers)
