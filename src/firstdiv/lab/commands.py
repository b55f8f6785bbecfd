"""Command-line entries for bisection, the determinism audit, the A/A self-check and the gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .._cli_common import EXIT_FOUND, EXIT_OK, emit, json_option, store_option
from ..errors import InvalidArgument, NotFound


@click.command("bisect")
@click.argument("target")
@click.option("--base", "base", multiple=True, metavar="CONFIG",
              help="Baseline config: a .json/.yaml file or k=v,k=v over the workload's defaults (repeatable).")
@click.option("--candidate", "candidate", multiple=True, required=True, metavar="CONFIG",
              help="Candidate config, in full: a .json/.yaml file or k=v,k=v over the workload's defaults.")
@click.option("--order", default=None, help="Order of the changed keys, k1,k2,... (default: as the candidate lists them).")
@click.option("--seeds", default="0-7", show_default=True)
@click.option("--max-seeds", type=int, default=32, show_default=True, help="Seeds a probe may grow to while UNKNOWN.")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--margin", type=float, default=None, help="Regression criterion (default: the baseline's seed spread).")
@click.option("--alpha", type=float, default=0.05, show_default=True)
@store_option
@json_option
def bisect_command(target: str, base: tuple[str, ...], candidate: tuple[str, ...], order: str | None, seeds: str,
                   max_seeds: int, metric: str, margin: float | None, alpha: float, store: str | None,
                   as_json: bool) -> int:
    """Find which change between two configs of TARGET regresses METRIC, confirmed alone."""
    from .bisect import bisect

    report = bisect(target, list(base), list(candidate), seeds, order=order, metric=metric, margin=margin,
                    max_seeds=max_seeds, alpha=alpha, store=store, progress=not as_json)
    emit(report, as_json)
    return EXIT_OK


@click.command("determinism")
@click.argument("target")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--noise-seeds", default="0-5", show_default=True, help="Seeds whose spread is the noise floor.")
@click.option("--fail-on-nondeterminism", is_flag=True, help="Exit 1 when the same seed twice is not bit-identical.")
@store_option
@json_option
def determinism_command(target: str, seed: int, sets: tuple[str, ...], metric: str, noise_seeds: str,
                        fail_on_nondeterminism: bool, store: str | None, as_json: bool) -> int:
    """Same seed twice (bit-identical?), then threads, deterministic algorithms, device, one at a time."""
    from .determinism import determinism

    report = determinism(target, seed, sets=list(sets), metric=metric, noise_seeds=noise_seeds, store=store,
                         progress=not as_json)
    emit(report, as_json)
    return EXIT_FOUND if fail_on_nondeterminism and not report.ok else EXIT_OK


@click.command("aa")
@click.argument("target")
@click.option("--pairs", type=int, default=20, show_default=True)
@click.option("--seeds-per-side", type=int, default=4, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True)
@click.option("--start", type=int, default=0, show_default=True, help="First seed; runs already recorded are reused.")
@store_option
@json_option
def aa_command(target: str, pairs: int, seeds_per_side: int, sets: tuple[str, ...], metric: str, alpha: float,
               start: int, store: str | None, as_json: bool) -> int:
    """A/A self-check: how often does compare call identical configs SYSTEM_CHANGED? Exit 1 if above alpha."""
    from .aa import aa

    report = aa(target, pairs, seeds_per_side, sets=list(sets), metric=metric, alpha=alpha, start=start, store=store,
                progress=not as_json)
    emit(report, as_json)
    return EXIT_OK if report.ok else EXIT_FOUND


# -- gate -----------------------------------------------------------------------------------------

@click.group("gate")
def gate_cli() -> None:
    """Calibrated regression gate (chapter 14, E10): calibrate on healthy seeds, then check new runs."""


@gate_cli.command("calibrate")
@click.argument("sweep_name", metavar="SWEEP")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Allowed false-alarm rate of a healthy run.")
@click.option("--holdout-seeds", default=None, help="Healthy seeds to validate on, e.g. 20-59 (not the calibration seeds).")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Gate file to write (JSON).")
@store_option
@json_option
def calibrate(sweep_name: str, alpha: float, holdout_seeds: str | None, metric: str, output: str,
              store: str | None, as_json: bool) -> int:
    """Set the threshold from SWEEP's seeds; measure its false-alarm rate on held-out seeds."""
    from ..report import Status
    from .gate import Gate
    from .store import Store
    from .sweep import parse_seeds

    if holdout_seeds is not None:
        parse_seeds(holdout_seeds)  # bad input is a usage error before anything runs
    if not Path(output).resolve().parent.is_dir():
        raise InvalidArgument(f"Cannot write the gate file {output}: its directory does not exist; create it first")
    with Store(store, create=False) as st:
        gate = Gate.calibrate(sweep_name, alpha=alpha, holdout=holdout_seeds, metric=metric, store=st)
    gate.save(output)
    report = gate.report()
    if as_json:
        emit(None, True, {"gate": gate.to_dict(), "path": output, "report": report.to_dict()})
    else:
        emit(gate, False)
        click.echo(f"  wrote {output}")
    return EXIT_FOUND if report.status is Status.FAIL else EXIT_OK


@gate_cli.command("check")
@click.argument("gate_file", metavar="GATE_FILE")
@click.argument("ref", metavar="SWEEP_OR_TARGET")
@click.option("--seeds", default=None, help="Seeds to run when checking a workload target (default 999).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override the gate's config (repeatable).")
@store_option
@json_option
def check(gate_file: str, ref: str, seeds: str | None, sets: tuple[str, ...], store: str | None, as_json: bool) -> int:
    """Check a stored sweep's runs, or run a target at --seeds with the gate's config, against the gate."""
    from .gate import Gate
    from .gate_digest import verify_gate_file

    gate = Gate.load(gate_file)
    verify_gate_file(gate, gate_file, store)  # consistent tampering: the store still has the real values
    records = _stored(ref, store)
    if records is not None:
        if seeds is not None or sets:
            raise InvalidArgument(f"{ref!r} is a stored sweep; --seeds and --set apply to a workload target: drop them")
        report = gate.check(records)
    elif ":" in ref:
        from .sweep import default_name
        from .sweep import sweep as run_sweep
        from .workload import resolve

        workload = resolve(ref)
        cfg = workload.config(gate.config, list(sets))
        result = run_sweep(workload, seeds or "999", config=cfg, store=store, progress=not as_json,
                           name="gate-check-" + default_name(workload, cfg))
        report = gate.check(result)
    else:
        raise NotFound(f"{ref!r} is neither a stored sweep nor a workload target; pass a sweep name (see `firstdiv "
                       "runs`) or a target like builtin:mlp or path/to/file.py:train")
    emit(report, as_json)
    return EXIT_OK if report.ok else EXIT_FOUND


def _stored(ref: str, store: str | None) -> list[Any] | None:
    from .store import Store

    try:
        with Store(store, create=False) as st:
            info = st.find_sweep(ref)
            return st.records(info, include_failed=True)
    except NotFound:
        return None
