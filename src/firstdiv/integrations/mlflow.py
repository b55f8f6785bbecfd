"""MLflow both ways: push a sweep's runs into an MLflow experiment, and compare runs that live in MLflow.

* :func:`push` logs one MLflow run per firstdiv run (params: the config, flattened, and ``seed``; metrics: the curves
  at their steps and the final metrics; tags under ``firstdiv.``: sweep, workload, identity, code version, env hash,
  run id, status, error). Pushing again adds only the runs not there yet (found by the ``firstdiv.run_id`` tag).
* :func:`load` reads the runs an ``mlflow:EXPERIMENT?QUERY`` reference selects as a read-only SweepResult (nothing
  is written anywhere), one run per seed, each run's final metric being the metric's last logged value.
* :func:`compare` compares two sides, either of which may be such a reference, with firstdiv's own comparison.

The tracking URI is ``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``./mlruns``. MLflow is imported only here,
only when called. See docs/mlflow.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InvalidArgument, NotFound
from . import _mlflow_records as rec
from ._mlflow_client import MAX_METRICS, MAX_PARAMS_TAGS, chunks, session
from ._mlflow_query import SYNTAX, Query, is_ref, parse

__all__ = ["SYNTAX", "PushResult", "compare", "is_ref", "load", "parse", "push"]


@dataclass(frozen=True)
class PushResult:
    """What :func:`push` did: per firstdiv run (seed order) its MLflow run id, new or already there."""

    sweep: str
    experiment: str
    experiment_id: str
    tracking_uri: str
    pushed: tuple[dict[str, Any], ...] = ()
    existing: tuple[dict[str, Any], ...] = ()
    replaced: tuple[str, ...] = field(default=())

    @property
    def run_ids(self) -> list[str]:
        return [r["mlflow_run_id"] for r in sorted((*self.pushed, *self.existing), key=lambda r: r["seed"])]

    def to_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "experiment": self.experiment, "experiment_id": self.experiment_id,
                "tracking_uri": self.tracking_uri, "pushed": len(self.pushed), "existing": len(self.existing),
                "failed": sum(r["status"] != "ok" for r in (*self.pushed, *self.existing)),
                "replaced_incomplete": list(self.replaced), "run_ids": self.run_ids,
                "runs": sorted((*self.pushed, *self.existing), key=lambda r: r["seed"])}

    def summary(self) -> str:
        d = self.to_dict()
        failed = f", {d['failed']} FAILED" if d["failed"] else ""
        again = f", {len(self.replaced)} incomplete ones redone" if self.replaced else ""
        return (f"pushed sweep {self.sweep!r} to MLflow experiment {self.experiment!r} (id {self.experiment_id}) at "
                f"{self.tracking_uri}: {d['pushed']} new runs, {d['existing']} already there{failed}{again}")


def push(sweep_name: str, experiment: str | None = None, tracking_uri: str | None = None,
         store: Any = None) -> PushResult:
    """Log sweep ``sweep_name``'s runs (failed ones as FAILED runs with the error as a tag) into MLflow experiment
    ``experiment`` (default: the sweep's name; created if missing). Idempotent: a run already pushed there is kept;
    a run a crash left unfinished is deleted and pushed again; a run whose logging fails is deleted, not left."""
    from ..lab.export import runs
    from ..lab.store import Store

    if not isinstance(sweep_name, str) or not sweep_name:
        raise InvalidArgument(f"Expected the name of a stored sweep but got {sweep_name!r}; see `firstdiv runs`")
    owned = not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    try:
        info = st.find_sweep(sweep_name)
        entries = [e for e in runs(st, name=info.name) if e[1].id == info.id]
    finally:
        if owned:
            st.close()
    name = experiment if experiment is not None else info.name
    logged = [_logged(record, info.name) for _, _, record in entries]  # names MLflow would merge: refused here
    with session(tracking_uri) as s:
        exp = s.experiment(name, create=True)
        found = {r.data.tags.get(rec.RUN_ID_TAG): r for r in s.runs(exp.experiment_id, _sweep_filter(info.name))
                 if r.data.tags.get(rec.SWEEP_TAG) == info.name}
        pushed, existing, replaced = [], [], []
        for i, (store_run_id, sweep, record) in enumerate(entries):
            row = {"seed": record.seed, "firstdiv_run_id": rec.fid(record), "status": record.status}
            old = found.get(rec.fid(record))
            if old is not None and old.info.status != "RUNNING":
                existing.append({**row, "mlflow_run_id": old.info.run_id})
                continue
            if old is not None:  # a push that stopped half way: not a run anyone should read
                s.client.delete_run(old.info.run_id)
                replaced.append(old.info.run_id)
            pushed.append({**row, "mlflow_run_id": _log_run(s, exp.experiment_id, record, sweep, store_run_id,
                                                             logged[i])})
    return PushResult(info.name, name, exp.experiment_id, s.uri, tuple(pushed), tuple(existing), tuple(replaced))


def _sweep_filter(name: str) -> str:
    return Query("", "", ((rec.SWEEP_TAG, name),)).filter_string()


def _logged(record: Any, sweep_name: str) -> tuple[dict[str, str], list[tuple[str, float, int]]]:
    """(params, metrics) of ``record`` as MLflow will hold them."""
    where = f"sweep {sweep_name!r} seed {record.seed}: "
    return rec.params_of(record, where=where), rec.metrics_of(record, where=where)


def _log_run(s: Any, experiment_id: str, record: Any, sweep: Any, store_run_id: int | None,
             logged: tuple[dict[str, str], list[tuple[str, float, int]]]) -> str:
    """One MLflow run for ``record`` (``logged``: its params and metrics), logged whole: on any error it is deleted
    before the error goes on."""
    ent = s.mlflow.entities
    now = int(time.time() * 1000)
    start = rec.millis(record.created, now)
    run = s.client.create_run(experiment_id, start_time=start, tags=rec.tags_of(record, sweep, store_run_id))
    run_id = run.info.run_id
    try:
        metrics = [ent.Metric(k, v, start, step) for k, v, step in logged[1]]
        params = [ent.Param(k, v) for k, v in logged[0].items()]
        for batch in chunks(metrics, MAX_METRICS):
            s.client.log_batch(run_id, metrics=batch)
        for batch in chunks(params, MAX_PARAMS_TAGS):
            s.client.log_batch(run_id, params=batch)
        status = "FINISHED" if record.ok else "FAILED"
        s.client.set_terminated(run_id, status, end_time=start + int(record.wall_seconds * 1000))
    except BaseException:
        s.client.delete_run(run_id)
        raise
    return run_id


def load(ref: str, *, seed_param: str = "seed", tracking_uri: str | None = None) -> Any:
    """The FINISHED runs ``ref`` (``mlflow:EXPERIMENT?QUERY``, see :data:`SYNTAX`) selects, as a read-only
    SweepResult named ``ref``, one run per seed (param ``seed_param``). Its ``sweep.info['source']`` says where the
    runs came from (tracking URI, experiment, query, run ids, the runs left out because they did not finish)."""
    from ..lab.store import SweepInfo
    from ..lab.sweep import SweepResult

    query = parse(ref)
    if not isinstance(seed_param, str) or not seed_param:
        raise InvalidArgument(f"Expected --seed-param to name the MLflow param holding the seed but got {seed_param!r}")
    with session(tracking_uri, create=False) as s:
        exp = s.experiment(query.experiment)
        selected = [r for r in s.runs(exp.experiment_id, query.filter_string()) if query.matches(r)]
        total = len(s.runs(exp.experiment_id)) if not selected else None
    finished = [r for r in selected if r.info.status == "FINISHED"]
    if not finished:
        raise NotFound(_empty(query, selected, total))
    seeds = _seeds(query, finished, seed_param)
    records = tuple(rec.record_of(r, seeds[r.info.run_id], seed_param, query.experiment)
                    for r in sorted(finished, key=lambda r: seeds[r.info.run_id]))
    left = sorted(f"{r.info.run_id} ({r.info.status})" for r in selected if r.info.status != "FINISHED")
    first = records[0]
    source = {"kind": "mlflow", "tracking_uri": s.uri, "experiment": query.experiment,
              "experiment_id": exp.experiment_id, "query": query.text,
              "run_ids": [r.extra["mlflow"]["run_id"] for r in records], "left_out": left,
              "params": _param_values(finished, seed_param)}
    identities = {r.identity for r in records}
    info = SweepInfo(id=f"mlflow:{exp.experiment_id}", name=ref,
                     identity=first.identity if len(identities) == 1 else "mixed", workload=first.workload,
                     created=min(r.created for r in records), seeds=tuple(r.seed for r in records),
                     info={"config": first.config, "config_hash": first.config_hash, "env_hash": first.env_hash,
                           "code": first.code, "hypothesis": first.hypothesis, "success": first.success,
                           "source": source})
    return SweepResult(sweep=info, records=records, store_path=s.uri)


def _empty(query: Query, selected: list[Any], total: int | None) -> str:
    where = f"MLflow experiment {query.experiment!r}"
    if selected:
        states = sorted({r.info.status for r in selected})
        return (f"{query.ref!r}: {len(selected)} runs in {where} match but none FINISHED (status: {', '.join(states)}); "
                "let them finish, or select finished runs")
    what = f"match {query.text!r}" if query.text else "exist"
    return (f"{query.ref!r}: no active runs in {where} {what} ({total} runs there); check the query ({SYNTAX}) "
            "against the runs' tags and params in the MLflow UI")


def _seeds(query: Query, runs: list[Any], seed_param: str) -> dict[str, int]:
    """{MLflow run id: seed}; a run without the seed param, or a seed two runs share, is a one-line error."""
    seeds = {r.info.run_id: rec.seed_of(r, seed_param) for r in runs}
    missing = [i for i, v in seeds.items() if v is None]
    if missing:
        known = sorted({k for r in runs for k in r.data.params})
        shown = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "") if known else "none"
        raise InvalidArgument(f"{query.ref!r}: MLflow runs {_ids(missing)} have no param {seed_param!r} (params "
                              f"there: {shown}); pass the param that holds the seed with --seed-param NAME")
    by_seed: dict[int, list[str]] = {}
    for run_id, seed in seeds.items():
        by_seed.setdefault(seed, []).append(run_id)  # type: ignore[arg-type]
    dup = {seed: ids for seed, ids in sorted(by_seed.items()) if len(ids) > 1}
    if dup:
        seed, ids = next(iter(dup.items()))
        raise InvalidArgument(f"{query.ref!r}: seed {seed} is in {len(ids)} MLflow runs ({_ids(ids)})"
                              f"{f' and {len(dup) - 1} more seeds repeat' if len(dup) > 1 else ''}; narrow the query "
                              "(e.g. add &sweep=NAME or &tag.KEY=VALUE) so each seed is one run, or delete the extras")
    return seeds  # type: ignore[return-value]


def _ids(ids: list[str]) -> str:
    return ", ".join(sorted(ids)[:5]) + (" ..." if len(ids) > 5 else "")


def _param_values(runs: list[Any], seed_param: str) -> dict[str, list[str]]:
    values: dict[str, set[str]] = {}
    for r in runs:
        for k, v in r.data.params.items():
            if k != seed_param:
                values.setdefault(k, set()).add(v)
    keys = {k for r in runs for k in r.data.params}
    return {k: sorted(values.get(k, set())) + ([] if all(k in r.data.params for r in runs) else ["(unset)"])
            for k in sorted(keys) if k != seed_param}


def compare(baseline: Any, candidate: Any, *, metric: str = "val_loss", seed_param: str = "seed",
            tracking_uri: str | None = None, store: Any = None, alpha: float = 0.05, rng: Any = None,
            min_effect: float | str | None = None) -> Any:
    """firstdiv's comparison of two sides, each an ``mlflow:...`` reference (read with :func:`load`) or anything
    :func:`firstdiv.compare` takes (a stored sweep's name needs ``store``). The statistics are firstdiv's own;
    ``details['source']`` says where the MLflow sides came from and which of their params differ."""
    from ..lab.compare import compare as lab_compare

    sides = [load(ref, seed_param=seed_param, tracking_uri=tracking_uri) if is_ref(ref) else ref
             for ref in (baseline, candidate)]
    result = lab_compare(sides[0], sides[1], metric=metric, store=store, alpha=alpha, rng=rng, min_effect=min_effect)
    src = [getattr(getattr(side, "sweep", None), "info", {}).get("source") for side in sides]
    params = [s["params"] if s else {} for s in src]
    differ = {k: [params[0].get(k, ["(unset)"]), params[1].get(k, ["(unset)"])]
              for k in sorted(set(params[0]) | set(params[1])) if params[0].get(k) != params[1].get(k)}
    source = {"baseline": src[0], "candidate": src[1], "params_differ": differ if all(src) else None}
    return replace(result, details={**result.details, "source": source})


def source_lines(details: dict[str, Any]) -> list[str]:
    """The SOURCE block of a comparison with an MLflow side, for the terminal."""
    source = details.get("source") or {}
    lines = ["SOURCE"]
    for side in ("baseline", "candidate"):
        s = source.get(side)
        if not s:
            lines.append(f"  {side:<10}stored sweep {details[side + '_name']!r}")
            continue
        runs = ", ".join(i[:8] for i in s["run_ids"][:6]) + (" ..." if len(s["run_ids"]) > 6 else "")
        left = f"; left out (not FINISHED): {len(s['left_out'])}" if s["left_out"] else ""
        lines.append(f"  {side:<10}MLflow {s['tracking_uri']} experiment {s['experiment']!r} (id {s['experiment_id']})"
                     f" query {s['query'] or '(all runs)'!r}: {len(s['run_ids'])} runs {runs}{left}")
    for k, (a, b) in list((source.get("params_differ") or {}).items())[:12]:
        lines.append(f"  param {k}: {', '.join(a)} -> {', '.join(b)}")
    return lines

