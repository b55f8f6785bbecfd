"""The lab on the command line: runs, demo, curves, factorial, bisect, determinism, aa, gate and
rng-audit. Each command imports what it runs when it runs (``firstdiv --help`` loads no torch or scipy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import InvalidArgument, NotFound
from ._common import EXIT_FOUND, EXIT_OK, EXIT_USAGE, console, echo, emit, json_option, note, show_progress, store_option

RUNS_LIMIT = 20  # sweeps `firstdiv runs` lists by default: the newest (a screenful)


@click.command("runs")
@click.option("--drop", "drop", default=None, metavar="RUN_ID", help="Delete one stored run (e.g. a damaged one).")
@click.option("--name", default=None, help="Only the sweeps with this name.")
@click.option("--limit", type=click.IntRange(min=0), default=RUNS_LIMIT, show_default=True,
              help="List the newest N sweeps (oldest of them first); 0 lists all.")
@store_option
@json_option
def runs_command(store: str | None, as_json: bool, drop: str | None = None, name: str | None = None,
                 limit: int = RUNS_LIMIT) -> int:
    """List the stored sweeps with their identity hashes."""
    if drop is not None:
        return _drop_run(store, drop, as_json)
    from .._rich import Table, Text
    from ..lab.store import Store

    with Store(store, create=False) as st:
        rows, damaged = _sweep_rows(st, name, limit or None)
        more = st.count_sweeps(name=name) - len(rows) - len(damaged)
    if as_json:
        emit(None, True, {"store": str(st.path), "sweeps": [
            {**s.to_dict(), "runs": sum(r.ok for r in recs), "failed": sum(not r.ok for r in recs)} for s, recs in rows],
            "damaged": [{**s.to_dict(), "error": why} for s, why in damaged], "more": more})
        return EXIT_OK
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"sweeps in {st.path}", title_justify="left")
    cells = [_sweep_cells(s, recs) for s, recs in rows]
    columns = ("name", "id", "workload", "runs", "config", "eval fp", "env", "code", "created")
    for i, col in enumerate(columns):
        # a narrow terminal shortens the columns in proportion, but the name keeps up to 24 characters (the other
        # commands take it) and the runs column its whole text (which seeds failed, with which exit codes)
        widest = max((len(c[i].plain) for c in cells), default=0)
        keep = min(widest, 24) if col == "name" else max(widest, len(col)) if col == "runs" else None
        table.add_column(col, no_wrap=True, overflow="ellipsis" if col in ("name", "workload") else "fold",
                         min_width=keep)
    for row in cells:
        table.add_row(*row)
    named = f" named {name!r}" if name is not None else ""
    console().print(table if rows else Text(f"no {'readable ' if damaged else ''}sweeps{named} in {st.path}"))
    for s, why in damaged:  # the other sweeps stay listed and usable; each damaged one is named with its repair
        console().print(Text(f"sweep {s.name} ({s.id[:8]}) not listed: {why}"))
    if more:
        echo(f"{more} older sweep{'s' if more > 1 else ''} not listed; use --name NAME or --limit N (0 lists all)")
    return EXIT_OK


def _sweep_cells(s: Any, recs: list[Any]) -> tuple[Any, ...]:
    """One row of ``firstdiv runs`` (rich Texts): name, id, workload, runs, config, eval fingerprints, env, code,
    created."""
    from .._rich import Text

    fps = sorted({(r.eval_fingerprint or "-")[:8] for r in recs if r.ok}) or ["-"]
    ok = sum(r.ok for r in recs)
    codes = sorted({r.exit_code for r in recs if not r.ok and r.exit_code is not None})
    exits = f", exit {','.join(map(str, codes))}" if codes else ""
    runs_text = f"{ok}/{len(s.seeds)}" + (f" ({len(recs) - ok} failed{exits})" if len(recs) > ok else "")
    return (Text(s.name), Text(s.id[:8]), Text(s.workload), Text(runs_text), Text(s.info.get("config_hash", "")[:8]),
            Text(",".join(fps)), Text(s.info.get("env_hash", "")[:8]), Text(_short_code(s.info.get("code", {}))),
            Text(s.created[5:16].replace("T", " ")))


def _sweep_rows(st: Any, name: str | None = None,
                limit: int | None = None) -> tuple[list[tuple[Any, list[Any]]], list[tuple[Any, str]]]:
    """(sweep, its records) for every readable sweep (the newest ``limit`` with ``name``), and (sweep, the error)
    for each with a damaged run."""
    from ..errors import StoreError

    rows, damaged = [], []
    for s in st.sweeps(name=name, limit=limit):
        try:
            rows.append((s, st.records(s, include_failed=True)))
        except StoreError as exc:
            damaged.append((s, str(exc)))
    return rows, damaged


def _short_code(code: dict[str, Any]) -> str:
    if not code.get("commit"):
        return str(code.get("version"))
    return code["commit"][:8] + (f"+{code['dirty_hash'][:6]}" if code.get("dirty_hash") else "")


@click.command("demo")
@store_option
@json_option
def demo_command(store: str | None, as_json: bool) -> int:
    """Chapter 14 on builtin:mlp: E1 noise floor, E2 determinism, E5 pairing, E6 eval paths, E7 regressions."""
    from ..demo import run_demo

    result = run_demo(store=store, progress=show_progress(as_json), console=None if as_json else console())
    if as_json:
        emit(None, True, result)
    return EXIT_OK


def _drop_run(store: str | None, run_id: str, as_json: bool) -> int:
    """Drop run ``run_id`` from the store and say which sweeps will record its seed again."""
    from ..lab.store import Store

    try:
        rid = int(run_id)
    except ValueError:
        raise InvalidArgument(f"Expected --drop RUN_ID to be a run's integer id (as an error names it) "
                              f"but got {run_id!r}") from None
    with Store(store, create=False) as st:
        dropped = st.drop_run(rid)
        path = st.path
    if dropped is None:
        raise NotFound(f"No run with id {rid} in {path}; the id is the one a damaged-run error names")
    identity, seed, sweeps = dropped
    if as_json:
        emit(None, True, {"store": str(path), "dropped": rid, "identity": identity, "seed": seed, "sweeps": sweeps})
        return EXIT_OK
    held = f" (sweeps {', '.join(repr(s) for s in sweeps)})" if sweeps else ""
    echo(f"dropped run {rid}, seed {seed} of identity {identity}{held}; rerun the sweep to record seed {seed} again")
    return EXIT_OK


# -- experiments --------------------------------------------------------------------------------

@click.command("curves")
@click.argument("baseline")
@click.argument("candidate")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--policy", default=None, help="Checkpoint selection: last, best or best:patience=N. Overrides the "
              "policy the sweeps declared (sweep --checkpoint-policy) and is then reported as chosen after the runs.")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level of the tests.")
@store_option
@json_option
def curves_command(baseline: str, candidate: str, metric: str, policy: str | None, alpha: float, store: str | None,
                   as_json: bool) -> int:
    """Compare two sweeps' per-epoch curves: bands, where they separate, and a checkpoint policy."""
    from ..lab.curves import curves
    from ..lab.policy import parse_policy
    from ..lab.store import Store

    if not 0 < alpha < 1:
        raise InvalidArgument(f"Expected --alpha in (0, 1) but got {alpha}")
    chosen = parse_policy(policy) if policy is not None else None  # validated before the store opens
    with Store(store, create=False) as st:
        result = curves(baseline, candidate, metric=metric, policy=chosen, store=st, alpha=alpha)
    emit(result, as_json)
    return EXIT_OK


@click.command("factorial")
@click.argument("target")
@click.option("--a", "a", required=True, metavar="KEY=VALUE[,KEY=VALUE]", help="Change A, on top of the base config.")
@click.option("--b", "b", required=True, metavar="KEY=VALUE[,KEY=VALUE]", help="Change B (other keys than A).")
@click.option("--seeds", default="0-11", show_default=True, help="Shared seeds of all four cells: 0-11, 0,3,5.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Base config override (repeatable).")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level of the intervals.")
@store_option
@json_option
def factorial_command(target: str, a: str, b: str, seeds: str, sets: tuple[str, ...], metric: str, alpha: float,
                      store: str | None, as_json: bool) -> int:
    """Run the 2x2 design base / A / B / AB on TARGET at shared seeds: main effects and interaction."""
    from ..lab.factorial import factorial

    result = factorial(target, a, b, seeds, sets=list(sets), metric=metric, store=store, alpha=alpha,
                       progress=show_progress(as_json))
    emit(result, as_json)
    return EXIT_OK


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
@click.option("--min-effect", default=None, metavar="X", help="The criterion as for compare: 0.01, 2% or 0.5x.")
@click.option("--alpha", type=float, default=0.05, show_default=True)
@store_option
@json_option
def bisect_command(target: str, base: tuple[str, ...], candidate: tuple[str, ...], order: str | None, seeds: str,
                   max_seeds: int, metric: str, margin: float | None, min_effect: str | None, alpha: float,
                   store: str | None, as_json: bool) -> int:
    """Find which change between two configs of TARGET regresses METRIC, confirmed alone."""
    from ..lab.bisect import bisect

    report = bisect(target, list(base), list(candidate), seeds, order=order, metric=metric, margin=margin,
                    max_seeds=max_seeds, alpha=alpha, store=store, progress=show_progress(as_json), min_effect=min_effect)
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
    from ..lab.determinism import determinism

    report = determinism(target, seed, sets=list(sets), metric=metric, noise_seeds=noise_seeds, store=store,
                         progress=show_progress(as_json))
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
@click.option("--min-effect", default=None, metavar="X", help="Each comparison's min effect (as for compare).")
@store_option
@json_option
def aa_command(target: str, pairs: int, seeds_per_side: int, sets: tuple[str, ...], metric: str, alpha: float,
               start: int, min_effect: str | None, store: str | None, as_json: bool) -> int:
    """A/A self-check: how often does compare call identical configs SYSTEM_CHANGED? Exit 1 if above alpha."""
    from ..lab.aa import aa

    report = aa(target, pairs, seeds_per_side, sets=list(sets), metric=metric, alpha=alpha, start=start, store=store,
                progress=show_progress(as_json), min_effect=min_effect)
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
    from ..lab.gate import Gate
    from ..lab.store import Store
    from ..lab.sweep import parse_seeds
    from ..report import Status

    if holdout_seeds is not None:
        parse_seeds(holdout_seeds)  # bad input is a usage error before anything runs
    if not Path(output).resolve().parent.is_dir():
        raise InvalidArgument(f"Cannot write the gate file {output}: its directory does not exist; create it first")
    with Store(store, create=False) as st:
        gate = Gate.calibrate(sweep_name, alpha=alpha, holdout=holdout_seeds, metric=metric, store=st)
    gate.save(output)
    report = gate.report()
    if as_json:
        emit(report, True, {"gate": gate.to_dict(), "path": output, "report": report.to_dict()})
    else:
        emit(gate, False)
        note(f"  wrote {output}")
    return EXIT_FOUND if report.status is Status.FAIL else EXIT_OK


@gate_cli.command("check")
@click.argument("gate_file", metavar="GATE_FILE")
@click.argument("ref", metavar="SWEEP_OR_TARGET")
@click.option("--seeds", default=None, help="Seeds to run when checking a workload target (default 999).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override the gate's config (repeatable).")
@click.option("--min-effect", default=None, metavar="X",
              help="Fail only runs also worse than the calibration median by more than X (0.01, 2% or 0.5x).")
@store_option
@json_option
def check(gate_file: str, ref: str, seeds: str | None, sets: tuple[str, ...], min_effect: str | None,
          store: str | None, as_json: bool) -> int:
    """Check a stored sweep's runs, or run a target at --seeds with the gate's config, against the gate."""
    from ..lab._effect import parse_min_effect
    from ..lab.gate import Gate
    from ..lab.gate_digest import verify_gate_file

    parse_min_effect(min_effect)  # a bad one fails before any run
    gate = Gate.load(gate_file)
    verify_gate_file(gate, gate_file, store)  # consistent tampering: the store still has the real values
    records = _stored(ref, store)
    if records is not None:
        if seeds is not None or sets:
            raise InvalidArgument(f"{ref!r} is a stored sweep; --seeds and --set apply to a workload target: drop them")
        report = gate.check(records, min_effect=min_effect)
    elif ":" in ref:
        from ..lab.sweep import default_name
        from ..lab.sweep import sweep as run_sweep
        from ..lab.workload import resolve

        workload = resolve(ref)
        cfg = workload.config(gate.config, list(sets))
        result = run_sweep(workload, seeds or "999", config=cfg, store=store, progress=show_progress(as_json),
                           name="gate-check-" + default_name(workload, cfg))
        report = gate.check(result, min_effect=min_effect)
    else:
        raise NotFound(f"{ref!r} is neither a stored sweep nor a workload target; pass a sweep name (see `firstdiv "
                       "runs`) or a target like builtin:mlp or path/to/file.py:train")
    emit(report, as_json)
    return EXIT_OK if report.ok else EXIT_FOUND


def _stored(ref: str, store: str | None) -> list[Any] | None:
    from ..lab.store import Store

    try:
        with Store(store, create=False) as st:
            info = st.find_sweep(ref)
            return st.records(info, include_failed=True)
    except NotFound:
        return None


@click.command("rng-audit")
@click.argument("target", required=False, default="builtin:rng-demo")
@click.option("--workers", default="0,2", show_default=True, help="num_workers settings to audit, comma-separated.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed given to torch.manual_seed before each pass.")
@click.option("--items", type=int, default=16, show_default=True, help="Items observed per pass, at least (with workers: enough whole batches to observe each worker).")
@click.option("--batch-size", type=int, default=None, help="Batch size (default: the loader's, or 1 for a Dataset).")
@json_option
def rng_audit_command(target: str, workers: str, seed: int, items: int, batch_size: int | None, as_json: bool) -> int:
    """Which RNGs in TARGET's data pipeline reproduce from the seed, per num_workers (chapter 14, E4).

    TARGET is builtin:rng-demo (default), path/to/file.py:function or module:function, a zero-argument
    function returning a Dataset or DataLoader. Exit 1 when a stream does not reproduce or is shared by workers.
    """
    from ..lab.rng_audit import load_target, parse_workers, rng_audit
    from ..report import Status

    settings = parse_workers(workers)
    report = rng_audit(load_target(target), settings, seed=seed, items=items, batch_size=batch_size)
    if report.status is Status.SKIPPED:  # could not run: one line (and the report only when asked for JSON)
        if as_json:
            emit(report, True)
        click.echo(f"firstdiv: error: {report.reason}", err=True)
        return EXIT_USAGE
    emit(report, as_json)
    return EXIT_OK if report.ok else EXIT_FOUND
