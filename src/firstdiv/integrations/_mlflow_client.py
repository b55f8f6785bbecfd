"""The MLflow client firstdiv talks through: imported on first use, its tracking URI resolved, its errors one line.

A file store (a plain path, ``file:...``) needs ``MLFLOW_ALLOW_FILE_STORE=true`` in MLflow 3.x; :func:`session` sets
it for the duration of firstdiv's own calls only and puts the previous value back afterwards.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..errors import FirstdivError, InvalidArgument, NotFound

ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
DEFAULT_URI = "./mlruns"
_DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
_KNOWN = ("file", "http", "https", "databricks", "databricks-uc", "uc", *_DB_SCHEMES)
_PAGE = 1000
#: MLflow's limits on one log_batch call
MAX_METRICS, MAX_PARAMS_TAGS = 1000, 100


def import_mlflow() -> Any:
    """The ``mlflow`` package (MlflowClient and the entities), or a one-line error saying how to install it."""
    try:
        import mlflow.entities
        import mlflow.exceptions
        import mlflow.tracking
    except ImportError:
        raise InvalidArgument("MLflow is not installed here; install it with: pip install 'firstdiv[mlflow]' "
                              "(or pip install mlflow-skinny)") from None
    return mlflow


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def resolve_uri(tracking_uri: str | None) -> tuple[str, bool]:
    """(the URI MLflow is given, whether it is a file store): ``tracking_uri``, else $MLFLOW_TRACKING_URI, else
    ./mlruns. A plain path is made absolute; a database URI without SQLAlchemy is refused here, in one line."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidArgument(f"Expected a tracking URI such as ./mlruns or http://host:5000 but got {uri!r}")
    scheme = urlparse(uri).scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):  # a path (C:\... on Windows)
        return str(Path(uri).expanduser().resolve()), True
    if scheme == "file":
        return uri, True
    if scheme.split("+")[0] in _DB_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
        raise InvalidArgument(f"Tracking URI {uri!r} is a database store, which needs the full MLflow (SQLAlchemy is "
                              "not installed here); install it with: pip install mlflow, or use a file store "
                              "(--tracking-uri ./mlruns) or a server (--tracking-uri http://host:5000)")
    return uri, False


@dataclass
class Session:
    """An MlflowClient on one tracking URI, with the entity classes firstdiv logs."""

    client: Any
    uri: str
    mlflow: Any

    def experiment(self, name: str, *, create: bool = False) -> Any:
        """The active experiment ``name`` (created when ``create``), else a one-line NotFound naming the known ones."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"Expected an MLflow experiment name but got {name!r}")
        exp = self.client.get_experiment_by_name(name)
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise InvalidArgument(f"MLflow experiment {name!r} at {self.uri} is deleted; restore it (mlflow "
                                  "experiments restore) or choose another name with --experiment")
        if exp is None and create:
            return self.client.get_experiment(self.client.create_experiment(name))
        if exp is None:
            names = sorted(e.name for e in self.client.search_experiments())
            shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "") if names else "none"
            raise NotFound(f"No MLflow experiment named {name!r} at {self.uri} (experiments there: {shown}); "
                           "check the name, or pass the right server with --tracking-uri")
        return exp

    def runs(self, experiment_id: str, filter_string: str = "") -> list[Any]:
        """Every active run of the experiment that matches ``filter_string``, page by page."""
        out: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=filter_string, max_results=_PAGE,
                                           page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out


def _local_path(uri: str) -> Path:
    return Path(url2pathname(urlparse(uri).path)) if urlparse(uri).scheme.lower() == "file" else Path(uri)


@contextmanager
def session(tracking_uri: str | None, *, create: bool = True) -> Iterator[Session]:
    """An MLflow client for the block; MLflow's errors inside it become one-line FirstdivErrors. For a file store,
    MLFLOW_ALLOW_FILE_STORE is "true" inside the block and as it was before outside it; without ``create``, a file
    store that does not exist is a NotFound (MLflow would create it)."""
    uri, file_store = resolve_uri(tracking_uri)
    mlflow = import_mlflow()
    if file_store and not create and not _local_path(uri).is_dir():
        raise NotFound(f"No MLflow file store at {_local_path(uri)}; pass the directory the runs were logged to with "
                       "--tracking-uri (or set MLFLOW_TRACKING_URI)")
    previous = os.environ.get(ALLOW_FILE_STORE)
    if file_store:
        os.environ[ALLOW_FILE_STORE] = "true"
    try:
        try:
            client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        except mlflow.exceptions.MlflowException as exc:
            scheme = urlparse(uri).scheme
            why = one_line(exc) if scheme.split("+")[0] in _KNOWN else f"MLflow knows no {scheme!r} scheme"
            raise FirstdivError(f"Cannot open the MLflow tracking URI {uri!r} ({why}); pass a directory "
                                "(./mlruns), an http(s):// server or a database URI with --tracking-uri") from None
        try:
            yield Session(client, uri, mlflow)
        except mlflow.exceptions.MlflowException as exc:
            raise FirstdivError(f"MLflow at {uri}: {one_line(exc)}") from None
        except OSError as exc:
            raise FirstdivError(f"MLflow at {uri}: {exc.strerror or one_line(exc)} ({exc.filename or ''}); "
                                "check the tracking URI and its permissions") from None
    finally:
        if file_store:
            if previous is None:
                os.environ.pop(ALLOW_FILE_STORE, None)
            else:
                os.environ[ALLOW_FILE_STORE] = previous


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
