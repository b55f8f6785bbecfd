"""Pieces every command of the command line shares: exit codes, common options, output."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .._rich import Console

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2

store_option = click.option("--store", "store", type=click.Path(dir_okay=False), default=None, envvar="FIRSTDIV_STORE",
                            help="Run store (SQLite). Default: $FIRSTDIV_STORE, else the nearest .firstdiv/runs.db up from "
                                 "here (within this git work tree), else a new one at the work tree's top or here.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")


def console() -> Console:
    """The command line's stdout console; control characters in printed data are shown, not obeyed."""
    from ..render import safe_console

    out = safe_console(highlight=False, soft_wrap=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = safe_console(highlight=False, soft_wrap=False, width=120)  # logs and pipes: no 80-column folding
    return out


def echo(text: str, err: bool = False) -> None:
    """click.echo for lines that carry user data (names, paths): control characters made visible."""
    from ..render import visible

    click.echo(visible(text), err=err)


def emit(obj: Any, as_json: bool, payload: dict[str, Any] | None = None) -> None:
    """Print ``obj`` (a rich renderable) or, with ``--json``, ``payload`` / ``obj.to_dict()``."""
    if as_json:
        click.echo(json.dumps(payload if payload is not None else obj.to_dict(), indent=2, default=str))
    else:
        console().print(obj)
