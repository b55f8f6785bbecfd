"""The `firstdiv` command line. Exit codes: 0 ran and found nothing to act on, 1 found what the
user asked to fail on, 2 usage or input error (one line on stderr: what, and how to fix it)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from ._cli_common import EXIT_FOUND, EXIT_OK, EXIT_USAGE, json_option, store_option
from ._cli_common import console as _console
from ._cli_common import emit as _emit
from .errors import FirstdivError

#: Commands defined in their own modules, imported only when invoked (or listed by --help), so
#: that `firstdiv sweep` does not pay for scipy.stats and torch it does not use.
LAZY_COMMANDS = {
    "aa": "firstdiv.lab.commands:aa_command",
    "bisect": "firstdiv.lab.commands:bisect_command",
    "curves": "firstdiv.lab.curves:curves_command",
    "determinism": "firstdiv.lab.commands:determinism_command",
    "diagnose": "firstdiv.diagnosis:diagnose_command",
    "factorial": "firstdiv.lab.factorial:factorial_command",
    "gate": "firstdiv.lab.commands:gate_cli",
    "incident": "firstdiv.incident:incident_command",
    "report": "firstdiv.report_cli:report_command",
    "rng-audit": "firstdiv.lab.rng_audit:rng_audit_command",
    "route": "firstdiv.routing:route_command",
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


@cli.command()
@click.argument("target")
@click.option("--seeds", default="0-11", show_default=True, help="Seeds: 0-11, 0,3,5 or 0-3,8.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.option("--name", default=None, help="Sweep name (default: derived from the changed config keys).")
@click.option("--backend", default="serial", show_default=True, help="serial, process, vectorized or ray.")
@click.option("--workers", type=int, default=None, help="Parallel workers: process/ray (default: CPU count); vectorized (default 1: one process).")
@click.option("--address", default=None, help="Ray cluster address for --backend ray (default: start a local Ray).")
@click.option("--chunk", type=int, default=None, help="Seeds trained at once by --backend vectorized (default: by memory).")
@click.option("--hypothesis", default=None, help="What you expect, declared before the runs.")
@click.option("--success", default=None, help="Gradeable criterion, e.g. 'val_loss delta within noise'.")
@click.option("--checkpoint-policy", default=None, help="Declared checkpoint selection: last, best or best:patience=N.")
@click.option("--force", is_flag=True, help="Rerun seeds already recorded for this identity.")
@store_option
@json_option
def sweep(target: str, seeds: str, sets: tuple[str, ...], name: str | None, backend: str, workers: int | None,
          address: str | None, chunk: int | None,
          hypothesis: str | None, success: str | None, checkpoint_policy: str | None, force: bool, store: str | None,
          as_json: bool) -> int:
    """Run TARGET (builtin:mlp, file.py:fn or module:fn) at many seeds; print the noise floor."""
    from .lab import backends

    options = {k: v for k, v in (("address", address), ("chunk", chunk)) if v is not None} or None
    if backend in backends.BACKENDS:  # e.g. the process backend's workers import torch while this process does
        backends.check_options(backend, dict(options or {}))  # --chunk or --address where they do nothing
        backends.warm(backend, dict(options or {}), workers, target)
    from .lab.sweep import sweep as run_sweep

    result = run_sweep(target, seeds, sets=list(sets), name=name, store=store, backend=backend, workers=workers,
                       backend_options=options,
                       hypothesis=hypothesis, success=success, checkpoint_policy=checkpoint_policy, force=force,
                       progress=not as_json)
    _emit(result, as_json)
    return EXIT_FOUND if result.failed or result.diverged else EXIT_OK


@cli.command()
@click.option("--drop", "drop", default=None, metavar="RUN_ID", help="Delete one stored run (e.g. a damaged one).")
@store_option
@json_option
def runs(store: str | None, as_json: bool, drop: str | None = None) -> int:
    """List the stored sweeps with their identity hashes."""
    if drop is not None:
        from ._runs_drop import drop_run

        return drop_run(store, drop, as_json)
    from ._rich import Table, Text
    from .lab.store import Store

    with Store(store, create=False) as st:
        rows, damaged = _sweep_rows(st)
    if as_json:
        _emit(None, True, {"store": str(st.path), "sweeps": [
            {**s.to_dict(), "runs": sum(r.ok for r in recs), "failed": sum(not r.ok for r in recs)} for s, recs in rows],
            "damaged": [{**s.to_dict(), "error": why} for s, why in damaged]})
        return EXIT_OK
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"sweeps in {st.path}", title_justify="left")
    for col in ("name", "id", "workload", "runs", "config", "eval fp", "env", "code", "created"):
        table.add_column(col, no_wrap=True, overflow="ellipsis" if col in ("name", "workload") else "fold")
    for s, recs in rows:
        fps = sorted({(r.eval_fingerprint or "-")[:8] for r in recs if r.ok}) or ["-"]
        ok = sum(r.ok for r in recs)
        runs_text = f"{ok}/{len(s.seeds)}" + (f" ({len(recs) - ok} failed)" if len(recs) > ok else "")
        table.add_row(Text(s.name), s.id[:8], Text(s.workload), runs_text, s.info.get("config_hash", "")[:8], ",".join(fps),
                      s.info.get("env_hash", "")[:8], _short_code(s.info.get("code", {})), s.created[5:16].replace("T", " "))
    _console().print(table if rows else f"no {'readable ' if damaged else ''}sweeps in {st.path}")
    for s, why in damaged:  # the other sweeps stay listed and usable; each damaged one is named with its repair
        _console().print(Text(f"sweep {s.name} ({s.id[:8]}) not listed: {why}"))
    return EXIT_OK


def _sweep_rows(st: Any) -> tuple[list[tuple[Any, list[Any]]], list[tuple[Any, str]]]:
    """(sweep, its records) for every readable sweep, and (sweep, the error) for each with a damaged run."""
    from .errors import StoreError

    rows, damaged = [], []
    for s in st.sweeps():
        try:
            rows.append((s, st.records(s, include_failed=True)))
        except StoreError as exc:
            damaged.append((s, str(exc)))
    return rows, damaged


@cli.command()
@click.argument("baseline")
@click.argument("candidate")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level of the tests.")
@click.option("--fail-on-regression", is_flag=True, help="Exit 1 on SYSTEM_CHANGED (worse) or MEASUREMENT_CHANGED.")
@store_option
@json_option
def compare(baseline: str, candidate: str, metric: str, alpha: float, fail_on_regression: bool,
            store: str | None, as_json: bool) -> int:
    """Compare two sweeps: identity, paired deltas, cost, declared criterion, verdict."""
    from .lab.compare import compare as run_compare
    from .lab.store import Store

    with Store(store, create=False) as st:
        result = run_compare(baseline, candidate, metric=metric, store=st, alpha=alpha)
    _emit(result, as_json, _comparison_json(result) if as_json else None)
    regression = result.verdict == "MEASUREMENT_CHANGED" or (result.verdict == "SYSTEM_CHANGED" and result.direction == "worse")
    return EXIT_FOUND if fail_on_regression and regression else EXIT_OK


def _short_code(code: dict[str, Any]) -> str:
    if not code.get("commit"):
        return str(code.get("version"))
    return code["commit"][:8] + (f"+{code['dirty_hash'][:6]}" if code.get("dirty_hash") else "")


def _comparison_json(c: Any) -> dict[str, Any]:
    from .lab.record import jsonable

    d = c.details
    return jsonable({**{k: d[k] for k in ("verdict", "direction", "identity", "metric", "design", "shared_seeds",
                                          "paired", "unpaired", "noise_floor", "noise_ratio", "seeds_to_resolve",
                                          "diverged", "baseline", "candidate", "cost", "declared", "identity_detail")},
                     "report": c.to_dict()})


@cli.command()
@store_option
@json_option
def demo(store: str | None, as_json: bool) -> int:
    """Chapter 14 on builtin:mlp: E1 noise floor, E2 determinism, E5 pairing, E6 eval paths, E7 regressions."""
    from .lab.demo import run_demo

    result = run_demo(store=store, progress=not as_json, console=None if as_json else _console())
    if as_json:
        _emit(None, True, result)
    return EXIT_OK


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
