"""The `firstdiv` command line. Exit codes: 0 ran and found nothing to act on, 1 found what the
user asked to fail on, 2 usage or input error (one line on stderr: what, and how to fix it)."""

from __future__ import annotations

import importlib
import sys

import click

from ..errors import FirstdivError
from ._common import EXIT_OK, EXIT_USAGE

__all__ = ["LAZY_COMMANDS", "cli", "main"]

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
    """click's documented pattern for lazily loaded subcommands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="firstdiv")
def cli() -> None:
    """Find the first divergence; tell a real regression from noise and from a changed measurement."""


def main(argv: list[str] | None = None) -> int:
    try:
        rc = cli.main(args=argv, prog_name="firstdiv", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_USAGE
    except click.UsageError as exc:
        cmd = f" {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else ""
        click.echo(f"firstdiv: error: {exc.format_message()} (see firstdiv{cmd} --help)", err=True)
        return EXIT_USAGE
    except click.Abort:
        click.echo("firstdiv: interrupted; recorded runs are kept and a rerun resumes", err=True)
        return 130
    except FirstdivError as exc:
        click.echo(f"firstdiv: error: {exc}", err=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("firstdiv: interrupted; recorded runs are kept and a rerun resumes", err=True)
        return 130
    return rc if isinstance(rc, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
