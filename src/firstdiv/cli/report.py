"""`firstdiv report`: a self-contained HTML page for a sweep, a comparison of two sweeps, an incident,
or a report saved with --json."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import InvalidArgument, NotFound
from ._common import EXIT_OK, echo, emit, json_option, ok_of, store_option, verdict_of

INCIDENT_PREFIX = "incident:"


@click.command("report")
@click.argument("refs", nargs=-1, metavar="SWEEP [SWEEP_B] | incident:REF | REPORT.json")
@click.option("--html", "html_path", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the page ('-' writes it to stdout).")
@click.option("--metric", default="val_loss", show_default=True, help="The metric two sweeps are compared on.")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level of the comparison.")
@click.option("--title", default=None, help="Page title (default: what the page shows).")
@click.option("--site", "site_dir", default=None, type=click.Path(file_okay=False),
              help="Instead of one page, write the whole store's index and every page it links to this folder.")
@store_option
@json_option
def report_command(refs: tuple[str, ...], html_path: str, metric: str, alpha: float, title: str | None,
                   site_dir: str | None, store: str | None, as_json: bool) -> int:
    """Write a self-contained HTML page (inline CSS and SVG plots, no scripts, nothing fetched).

    One sweep gives its identity, noise floor, seed distributions and learning curves; two sweeps
    (BASELINE CANDIDATE) give their comparison: verdict, what changed, paired deltas per seed, both
    sides' distributions and curves. incident:REF gives an incident worksheet; a JSON file written by
    any command's --json gives that report's page. The page is written to --html (default
    report.html in the current directory) and its path printed; --json prints what was written.
    --site DIR (no arguments) writes the index of the whole store and every page it links as
    static files (the same pages `firstdiv ui` serves), replacing a site written there before.
    """
    if site_dir is not None:
        return _site(refs, site_dir, store, as_json)
    if not refs:
        raise click.UsageError("Missing argument 'SWEEP [SWEEP_B] | incident:REF | REPORT.json' (or --site DIR)")
    if html_path == "-" and as_json:
        raise click.UsageError("--html - writes the page to stdout, where --json writes JSON: choose one")
    kind, obj, payload = _load(refs, metric=metric, alpha=alpha, store=store)
    from ..render.html import to_html, write_html

    with _warnings_shown_safely():
        if html_path == "-":
            sys.stdout.write(to_html(obj, title=title))
            return EXIT_OK
        target = write_html(obj, html_path, title=title).resolve()
    if as_json:
        shown = getattr(obj, "comparison", obj)  # a comparison's page shows its view: the verdict is the comparison's
        emit(None, True, {"html": str(target), "kind": kind, "bytes": target.stat().st_size, **payload},
             status=verdict_of(shown), ok=ok_of(shown))
    else:
        echo(f"wrote {kind} page {target} ({target.stat().st_size / 1024:.0f} kB)")  # the path is user data
    return EXIT_OK


def _site(refs: tuple[str, ...], site_dir: str, store: str | None, as_json: bool) -> int:
    if refs:
        raise click.UsageError("--site DIR writes every page of the store: give it no SWEEP, incident or report")
    from ..lab.store import default_path
    from ..site import build_site

    written = build_site(site_dir, default_path() if store is None else store)
    if as_json:
        emit(None, True, written.to_dict())
    else:
        echo(f"wrote site {written.path} ({written.pages} pages; open {written.path / 'index.html'})")
    return EXIT_OK


@contextlib.contextmanager
def _warnings_shown_safely() -> Iterator[None]:
    """Warnings raised while drawing quote user strings (matplotlib names a sweep's control characters
    it has no glyph for): those glyph notes are dropped (the page shows the name escaped), others are
    printed with their control characters made visible."""
    with warnings.catch_warnings(record=True) as caught:  # the filters in force stay as they are
        yield
    for w in caught:
        text = str(w.message)
        if not re.match(r"Glyph \d+ .* missing from font", text):
            echo(f"firstdiv: warning: {text.splitlines()[0] if text else w.category.__name__}", err=True)


def _load(refs: tuple[str, ...], *, metric: str, alpha: float, store: str | None) -> tuple[str, Any, dict[str, Any]]:
    if len(refs) > 2:
        raise click.UsageError(f"Expected one sweep, two sweeps (baseline candidate), incident:REF or a report .json, "
                               f"but got {len(refs)} arguments")
    special = [r for r in refs if r.startswith(INCIDENT_PREFIX) or r.endswith(".json")]
    if special and len(refs) > 1:
        raise click.UsageError(f"{special[0]!r} is a page of its own: give it alone")
    if refs[0].startswith(INCIDENT_PREFIX):
        return _incident(refs[0][len(INCIDENT_PREFIX):], store)
    if refs[0].endswith(".json"):
        return _saved_report(Path(refs[0]))
    from ..lab.store import Store

    with Store(store, create=False) as st:
        if len(refs) == 1:
            from ..lab.sweep import load_sweep

            result = load_sweep(refs[0], st)
            return "sweep", result, {"sweep": result.to_dict()}
        from ..lab.compare import comparison_view

        view = comparison_view(refs[0], refs[1], metric=metric, store=st, alpha=alpha)
    return "comparison", view, {"verdict": view.comparison.verdict, "direction": view.comparison.direction,
                                "report": view.comparison.to_dict()}


def _incident(ref: str, store: str | None) -> tuple[str, Any, dict[str, Any]]:
    if not ref.strip():
        raise InvalidArgument("Expected incident:REF with the incident's id (see `firstdiv incident list`)")
    from ..diagnosis.incident import incident_show

    found = incident_show(ref, store=store)
    data = found.to_dict() if callable(getattr(found, "to_dict", None)) else found
    return "incident", found, {"incident": data}


def _saved_report(path: Path) -> tuple[str, Any, dict[str, Any]]:
    """A report saved with --json: Report.to_dict() itself, or a command's JSON holding it under 'report'."""
    from ..lab import compare  # noqa: F401 - registers Comparison so from_dict rebuilds it
    from ..report import Report

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(f"No report file {path}; write one with any command's --json (> {path.name})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"Cannot read {path} as a report saved with --json: {exc}") from None
    if isinstance(data, dict) and "schema_version" in data and "command" in data:  # a command's --json envelope
        if not isinstance(data.get("payload"), dict):
            raise InvalidArgument(f"{path} holds no report but a failed command's output ({data.get('error')}); "
                                  "rerun the command and save its --json")
        data = data["payload"]
    if isinstance(data, dict) and isinstance(data.get("report"), dict):
        data = data["report"]
    if not isinstance(data, dict) or "instrument" not in data or "status" not in data:
        raise InvalidArgument(f"{path} is JSON but not a report (no 'instrument' and 'status'); "
                              "save one with an instrument's or command's --json")
    try:
        report = Report.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"{path} holds a malformed report ({type(exc).__name__}: {exc})") from None
    return "report", report, {"report": report.to_dict()}
