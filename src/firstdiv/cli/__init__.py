"""The `firstdiv` command line. Exit codes: 0 ran and found nothing to act on, 1 found what the
user asked to fail on, 2 usage or input error (one line on stderr: what, and how to fix it).
With --json every command prints one JSON object on stdout, the envelope of docs/json.md."""

from __future__ import annotations

import importlib
import sys
import warnings

import click

from ..errors import FirstdivError
from . import _common
from ._common import EXIT_OK, EXIT_USAGE, level_options

__all__ = ["LAZY_COMMANDS", "cli", "main"]

INTERRUPTED = "interrupted; recorded runs are kept and a rerun resumes"

#: Every command, by the module that defines it: imported only when invoked (or listed by --help), so that
#: `firstdiv --help` loads no torch or scipy and `firstdiv sweep` does not pay for what it does not use.
LAZY_COMMANDS = {
    "aa": "firstdiv.cli.lab:aa_command",
    "bisect": "firstdiv.cli.lab:bisect_command",
    "compare": "firstdiv.cli.compare:compare_command",
    "curves": "firstdiv.cli.lab:curves_command",
    "demo": "firstdiv.cli.lab:demo_command",
    "determinism": "firstdiv.cli.lab:determinism_command",
    "diagnose": "firstdiv.cli.diagnose:diagnose_command",
    "export": "firstdiv.cli.export:export_command",
    "factorial": "firstdiv.cli.lab:factorial_command",
    "gate": "firstdiv.cli.lab:gate_cli",
    "incident": "firstdiv.cli.incident:incident_command",
    "report": "firstdiv.cli.report:report_command",
    "rng-audit": "firstdiv.cli.lab:rng_audit_command",
    "route": "firstdiv.cli.diagnose:route_command",
    "runs": "firstdiv.cli.lab:runs_command",
    "sweep": "firstdiv.cli.sweep:sweep_command",
    "ui": "firstdiv.cli.ui:ui_command",
}


class _LazyGroup(click.Group):
    """click's documented pattern for lazily loaded subcommands; each gets -q/-v."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[name].partition(":")
            return level_options(getattr(importlib.import_module(module), attr))
        found = super().get_command(ctx, name)
        return level_options(found) if found is not None else None

    def invoke(self, ctx: click.Context) -> object:
        rc = super().invoke(ctx)
        _common.verbose_summary(rc if isinstance(rc, int) else EXIT_OK)
        return rc


@level_options
@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="firstdiv")
def cli() -> None:
    """Find the first divergence; tell a real regression from noise and from a changed measurement.

    Every command takes --json (one JSON envelope on stdout, docs/json.md), -q/--quiet and -v/--verbose.
    """


cli._firstdiv_root = True  # type: ignore[attr-defined]  # left out of the envelope's command name


def _json_requested(argv: list[str]) -> bool:
    """--json among the arguments before a `--` (after it they belong to the swept command)."""
    head = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in head


def _command_from_argv(argv: list[str]) -> str:
    """The command an argument list names (for an error before click got to it): its first one or two words."""
    words = [a for a in (argv[:argv.index("--")] if "--" in argv else argv) if not a.startswith("-")]
    if not words or words[0] not in LAZY_COMMANDS:
        return words[0] if words else ""
    if words[0] in ("gate", "incident") and len(words) > 1:
        return " ".join(words[:2])
    return words[0]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _common.begin()
    try:
        with warnings.catch_warnings():  # -q silences warnings for this command only
            return _run(args)
    finally:
        _common.end()


def _run(args: list[str]) -> int:
    try:
        rc = cli.main(args=args, prog_name="firstdiv", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_USAGE
    except click.UsageError as exc:
        cmd = f" {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else ""
        click.echo(f"firstdiv: error: {exc.format_message()} (see firstdiv{cmd} --help)", err=True)
        where = _common.command_path(exc.ctx) if exc.ctx else ""
        return _failed(args, exc, EXIT_USAGE, where or _common.command_name())
    except (click.Abort, KeyboardInterrupt) as exc:
        click.echo(f"firstdiv: {INTERRUPTED}", err=True)
        return _failed(args, exc, 130, message=INTERRUPTED)
    except FirstdivError as exc:
        click.echo(f"firstdiv: error: {exc}", err=True)
        return _failed(args, exc, EXIT_USAGE)
    return rc if isinstance(rc, int) else EXIT_OK


def _failed(args: list[str], exc: BaseException, rc: int, command: str = "", message: str = "") -> int:
    """Under --json, the error as the one JSON object on stdout too (nothing the command kept is printed)."""
    if _json_requested(args):
        _common.print_json(_common.error_envelope(command or _common.command_name() or _command_from_argv(args),
                                                  exc, rc, message))
    return rc


if __name__ == "__main__":
    sys.exit(main())
