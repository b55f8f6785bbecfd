"""`firstdiv export`: the stored runs out as CSV or JSON lines (one row per run, or the curves in long form)."""

from __future__ import annotations

import click

from ._common import EXIT_OK, echo, emit, json_option, store_option


@click.command("export")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default="csv", show_default=True,
              help="CSV with a header, or one JSON object per line.")
@click.option("--output", "-o", default=None, metavar="FILE", help="Write to FILE (whole or not at all); default stdout.")
@click.option("--curves", is_flag=True, help="The curves in long form (run_id, metric, step, value) instead of one row per run.")
@click.option("--name", default=None, help="Only the sweeps with this name.")
@click.option("--workload", default=None, help="Only the sweeps of this workload (as `firstdiv runs` shows it).")
@store_option
@json_option
def export_command(fmt: str, output: str | None, curves: bool, name: str | None, workload: str | None,
                   store: str | None, as_json: bool) -> int:
    """Export the stored runs: one row per run (sweep, workload, config hash, code version, env hash, seed, status,
    config.<key>, metric.<key>, wall time) or, with --curves, every logged value. With --json (needs --output),
    print what was written as JSON."""
    from ..lab.export import export_to
    from ..lab.store import Store

    if as_json and output is None:
        raise click.UsageError("--json describes the file written: give --output FILE, or use --format jsonl for "
                               "JSON lines on stdout")
    with Store(store, create=False) as st:  # streamed: every record is read before the first row is written
        done = export_to(st, output, fmt=fmt, curves=curves, name=name, workload=workload,
                         put=lambda text: click.echo(text, nl=False))
    if output is None:
        return EXIT_OK
    if as_json:
        emit(None, True, {"output": str(done.path), "format": fmt, "rows": done.rows, "columns": done.columns,
                          "curves": curves})
    else:
        echo(f"wrote {done.rows} {'curve values' if curves else 'runs'} ({fmt}) to {done.path}")
    return EXIT_OK
