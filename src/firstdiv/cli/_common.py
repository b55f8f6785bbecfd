"""Pieces every command of the command line shares: exit codes, common options, output levels and the one JSON
envelope every ``--json`` prints (docs/json.md)."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import click

from .._rich import Console
from ._levels import NORMAL, QUIET, VERBOSE, render

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2

#: version of the JSON envelope (docs/json.md, docs/json-envelope.schema.json); raised on an incompatible change
SCHEMA_VERSION = 1

store_option = click.option("--store", "store", type=click.Path(dir_okay=False), default=None, envvar="FIRSTDIV_STORE",
                            help="Run store (SQLite). Default: $FIRSTDIV_STORE, else the nearest .firstdiv/runs.db up from "
                                 "here (within this git work tree), else a new one at the work tree's top or here.")
_json_flag = click.option("--json", "as_json", is_flag=True,
                          help="Print one JSON object on stdout: the envelope of docs/json.md.")


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The --json flag. Under it, what the command kept with emit() is printed as the envelope once the command
    has returned its exit code (so every command that uses this option and emit() prints the envelope)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        rc = fn(*args, **kwargs)
        if kwargs.get("as_json"):
            _RUN.command = command_path(click.get_current_context())
            env = envelope(rc if isinstance(rc, int) else EXIT_OK)
            _RUN.result = None
            if env is not None:
                print_json(env)
        return rc

    return _json_flag(run)


def flush_json() -> None:
    """Print the kept envelope now (exit code 0) for a command that goes on running, as ui's server does: it says
    where it serves before serving; nothing is printed again when it returns."""
    _RUN.command = command_path(click.get_current_context())
    env = envelope(EXIT_OK)
    _RUN.result = None
    if env is not None:
        print_json(env)


def command_path(ctx: click.Context) -> str:
    """'gate check' for the context of `firstdiv gate check` (the root group's own name left out)."""
    names = []
    while ctx is not None:
        if not getattr(ctx.command, "_firstdiv_root", False):
            names.append(ctx.command.name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


class _Invocation:
    """What the one command this process runs has said so far: its output level, its name, and (under --json)
    its verdict and payload, printed as the envelope once the exit code is known."""

    def __init__(self) -> None:
        self.level = NORMAL
        self.command = ""
        self.result: tuple[str, bool, Any] | None = None
        self.started = time.perf_counter()
        self.saved_progress: str | None = None
        self.ctx: click.Context | None = None


_RUN = _Invocation()


def begin() -> None:
    """A fresh invocation (main() calls it first: in-process callers run several)."""
    global _RUN
    _RUN = _Invocation()


def end() -> None:
    """Undo what the output level changed in the process (the progress variable, the firstdiv logger)."""
    if _RUN.level == QUIET:
        if _RUN.saved_progress is None:
            os.environ.pop("FIRSTDIV_PROGRESS", None)
        else:
            os.environ["FIRSTDIV_PROGRESS"] = _RUN.saved_progress
    if _RUN.level == VERBOSE:
        logger = logging.getLogger("firstdiv")
        for handler in [h for h in logger.handlers if getattr(h, "_firstdiv_cli", False)]:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def level() -> int:
    return _RUN.level


def command_name() -> str:
    return _RUN.command


def show_progress(as_json: bool) -> bool:
    """Progress bars: not under --json (stdout is for the envelope) nor -q."""
    return not as_json and _RUN.level > QUIET


def _set_level(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    _RUN.command, _RUN.ctx = command_path(ctx), ctx
    if not value:
        return value
    wanted = QUIET if param.name == "quiet" else VERBOSE
    if _RUN.level not in (NORMAL, wanted):
        raise click.UsageError("-q/--quiet and -v/--verbose contradict each other: give one of them", ctx)
    if _RUN.level == NORMAL:
        _RUN.level = wanted
        _apply(wanted)
    return value


def _apply(wanted: int) -> None:
    if wanted == QUIET:  # the existing switch every progress display obeys
        _RUN.saved_progress = os.environ.get("FIRSTDIV_PROGRESS")
        os.environ["FIRSTDIV_PROGRESS"] = "0"
        import warnings

        warnings.simplefilter("ignore")  # main() restores the filters it found
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("firstdiv: %(name)s: %(message)s"))
        handler._firstdiv_cli = True  # type: ignore[attr-defined]
        logger = logging.getLogger("firstdiv")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


def level_options(cmd: click.Command) -> click.Command:
    """Give ``cmd`` (and, for a group, every subcommand) -q/--quiet and -v/--verbose; idempotent."""
    if getattr(cmd, "_firstdiv_levels", False):
        return cmd
    cmd.params.extend([
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_level,
                     help="Only the result: no progress, notes or warnings (a report's headline and verdict)."),
        click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, callback=_set_level,
                     help="More detail: every finding with its evidence, the store used, timings; DEBUG logging."),
    ])
    cmd._firstdiv_levels = True  # type: ignore[attr-defined]
    for sub in getattr(cmd, "commands", {}).values():
        level_options(sub)
    return cmd


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


def note(text: str, *, err: bool = False) -> None:
    """An informational line (what was written where): not under -q."""
    if _RUN.level > QUIET:
        echo(text, err=err)


def detail(text: str) -> None:
    """A line only -v prints, on stderr (stdout keeps the result)."""
    if _RUN.level == VERBOSE:
        echo(f"firstdiv: {text}", err=True)


def emit(obj: Any, as_json: bool, payload: dict[str, Any] | None = None, *, status: str | None = None,
         ok: bool | None = None) -> None:
    """Print ``obj`` (a rich renderable; under -q a report's short form, under -v its findings' evidence too) or,
    with ``--json``, keep ``payload`` / ``obj.to_dict()`` with its status for the envelope main() prints."""
    if as_json:
        data = payload if payload is not None else obj.to_dict()
        _RUN.result = (status or verdict_of(obj, data), ok if ok is not None else ok_of(obj), data)
        return
    render(obj, _RUN.level, console())


def verdict_of(obj: Any, payload: Any = None) -> str:
    """The verdict word: a comparison's verdict, else a report's status, else OK."""
    from ..report import Report

    if isinstance(obj, Report):
        verdict = obj.details.get("verdict")
        return verdict if isinstance(verdict, str) else obj.status.value
    return "OK"


def ok_of(obj: Any) -> bool:
    from ..report import Report

    return obj.ok if isinstance(obj, Report) else True


def envelope(exit_code: int) -> dict[str, Any] | None:
    """The envelope of what the command kept with emit(), or None when it printed no JSON."""
    if _RUN.result is None:
        return None
    status, ok, payload = _RUN.result
    return {"schema_version": SCHEMA_VERSION, "command": _RUN.command, "ok": bool(ok and exit_code == 0),
            "status": status, "exit_code": exit_code, "payload": payload}


def error_envelope(command: str, exc: BaseException, exit_code: int, message: str = "") -> dict[str, Any]:
    message = message or (exc.format_message() if isinstance(exc, click.ClickException) else str(exc))
    return {"schema_version": SCHEMA_VERSION, "command": command, "ok": False, "status": "ERROR",
            "exit_code": exit_code, "error": {"type": type(exc).__name__, "message": message}}


def print_json(obj: dict[str, Any]) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def verbose_summary(rc: int) -> None:
    """-v: the store the command used and how long it took, on stderr."""
    if _RUN.level != VERBOSE:
        return
    params = _RUN.ctx.params if _RUN.ctx is not None else {}
    if "store" in params:
        from ..lab.store import default_path

        detail(f"store {params['store'] or default_path()}")
    detail(f"{_RUN.command or 'firstdiv'} took {time.perf_counter() - _RUN.started:.2f} s, exit code {rc}")
