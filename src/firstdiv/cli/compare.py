"""`firstdiv compare`: two sweeps, their identity, paired deltas, cost, declared criterion and verdict."""

from __future__ import annotations

from typing import Any

import click

from ._common import EXIT_FOUND, EXIT_OK, echo, emit, json_option, store_option

MIN_EFFECT_HELP = ("Smallest effect that matters: absolute (0.01), relative to the baseline mean (2%) or a multiple of "
                   "the noise floor (0.5x). SYSTEM_CHANGED only when the CI clears it; PRACTICALLY_EQUIVALENT inside it.")


@click.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option("--metric", default="val_loss", show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level of the tests.")
@click.option("--min-effect", default=None, metavar="X", help=MIN_EFFECT_HELP)
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 on SYSTEM_CHANGED (worse; beyond --min-effect when given) or MEASUREMENT_CHANGED.")
@click.option("--seed-param", default=None, metavar="NAME",
              help="mlflow: sides: the MLflow param holding the seed (default: seed).")
@click.option("--tracking-uri", default=None, metavar="URI",
              help="mlflow: sides: the tracking URI (default $MLFLOW_TRACKING_URI, else ./mlruns).")
@store_option
@json_option
def compare_command(baseline: str, candidate: str, metric: str, alpha: float, min_effect: str | None,
                    fail_on_regression: bool, seed_param: str | None, tracking_uri: str | None, store: str | None,
                    as_json: bool) -> int:
    """Compare two sweeps: identity, paired deltas, cost, declared criterion, verdict.

    BASELINE and CANDIDATE are stored sweeps (name or id prefix) or runs in MLflow:
    "mlflow:EXPERIMENT?QUERY", QUERY being conditions joined by & that every run must meet: sweep=NAME (runs
    pushed from sweep NAME), run_name=NAME, tag.KEY=VALUE, param.KEY=VALUE (URL-encoded; none: every run), e.g.
    "mlflow:demo?tag.variant=base&param.lr=0.1". Only FINISHED runs count, one per seed (--seed-param), each
    with its last logged --metric value. See docs/mlflow.md.
    """
    from ..errors import InvalidArgument
    from ..lab.compare import compare as run_compare
    from ..lab.compare import is_regression
    from ..lab.store import Store

    if any(ref.startswith("mlflow:") for ref in (baseline, candidate)):
        from ..integrations.mlflow import compare as mlflow_compare
        from ..integrations.mlflow import source_lines

        result = mlflow_compare(baseline, candidate, metric=metric, seed_param=seed_param or "seed",
                                tracking_uri=tracking_uri, store=store, alpha=alpha, min_effect=min_effect)
        if not as_json:
            echo("\n".join(source_lines(result.details)) + "\n")
    else:
        given = [flag for flag, value in (("--seed-param", seed_param), ("--tracking-uri", tracking_uri)) if value]
        if given:
            raise InvalidArgument(f"{' and '.join(given)} only appl{'y' if given[1:] else 'ies'} to mlflow: sides, "
                                  f"and neither {baseline!r} nor "
                                  f"{candidate!r} is one; drop {' and '.join(given)} or write e.g. "
                                  f"\"mlflow:EXPERIMENT?tag=base\"")
        with Store(store, create=False) as st:
            result = run_compare(baseline, candidate, metric=metric, store=st, alpha=alpha, min_effect=min_effect)
    regression = is_regression(result)
    emit(result, as_json, comparison_json(result) if as_json else None, ok=not regression)
    return EXIT_FOUND if fail_on_regression and regression else EXIT_OK


def comparison_json(c: Any) -> dict[str, Any]:
    """The comparison's evidence for machines: the verdict, the tests, the min effect and the report."""
    from ..lab.record import jsonable

    d = c.details
    return jsonable({**{k: d[k] for k in ("verdict", "direction", "identity", "metric", "design", "shared_seeds",
                                          "paired", "unpaired", "noise_floor", "noise_ratio", "seeds_to_resolve",
                                          "min_effect", "diverged", "baseline", "candidate", "cost", "declared",
                                          "identity_detail")},
                     **({"source": d["source"]} if "source" in d else {}),
                     "report": c.to_dict()})
