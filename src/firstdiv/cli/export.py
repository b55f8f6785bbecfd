"""`firstdiv export`: the stored runs out as CSV or JSON lines (one row per run, or the curves in long form)."""

from __future__ import annotations

import click

from ._common import EXIT_OK, echo, emit, json_option, store_option


@click.command("export")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl", "mlflow"]), default="csv", show_default=True,
              help="CSV with a header, one JSON object per line, or mlflow: push sweep --name's runs into MLflow.")
@click.option("--output", "-o", default=None, metavar="FILE", help="Write to FILE (whole or not at all); default stdout.")
@click.option("--curves", is_flag=True, help="The curves in long form (run_id, metric, step, value) instead of one row per run.")
@click.option("--name", default=None, help="Only the sweeps with this name.")
@click.option("--workload", default=None, help="Only the sweeps of this workload (as `firstdiv runs` shows it).")
@click.option("--experiment", default=None, help="--format mlflow: the MLflow experiment (default: the sweep's name).")
@click.option("--tracking-uri", default=None, metavar="URI",
              help="--format mlflow: the tracking URI (default $MLFLOW_TRACKING_URI, else ./mlruns).")
@store_option
@json_option
def export_command(fmt: str, output: str | None, curves: bool, name: str | None, workload: str | None,
                   experiment: str | None, tracking_uri: str | None, store: str | None, as_json: bool) -> int:
    """Export the stored runs: one row per run (sweep, workload, config hash, code version, env hash, seed, status,
    config.<key>, metric.<key>, wall time) or, with --curves, every logged value. With --json (needs --output),
    print what was written as JSON. With --format mlflow --name SWEEP, log the sweep's runs into MLflow, one
    MLflow run per run, skipping those already there (see docs/mlflow.md)."""
    from ..lab.export import export_to
    from ..lab.store import Store

    if fmt == "mlflow":
        return _push(name, experiment, tracking_uri, store, as_json, output=output, curves=curves, workload=workload)
    if experiment is not None or tracking_uri is not None:
        raise click.UsageError("--experiment and --tracking-uri are for --format mlflow")
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


def _push(name: str | None, experiment: str | None, tracking_uri: str | None, store: str | None, as_json: bool,
          **unused: object) -> int:
    from ..integrations.mlflow import push

    given = [f"--{k.replace('_', '-')}" for k, v in unused.items() if v not in (None, False)]
    if given:
        raise click.UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --format mlflow "
                               "(it pushes one sweep: --name SWEEP)")
    if name is None:
        raise click.UsageError("--format mlflow pushes one sweep: give --name SWEEP (see `firstdiv runs`)")
    result = push(name, experiment=experiment, tracking_uri=tracking_uri, store=store)
    if as_json:
        emit(None, True, result.to_dict())
    else:
        echo(result.summary())
    return EXIT_OK
