"""A firstdiv run as an MLflow run (params, metrics, tags) and an MLflow run back as a firstdiv RunRecord."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from typing import Any

from ..errors import InvalidArgument
from ..lab.record import RunRecord, jsonable, short_hash

TAG = "firstdiv."
#: the tag that names a pushed run: ``IDENTITY:SEED``, the same in every store (a store's run id is local to it)
RUN_ID_TAG = TAG + "run_id"
SWEEP_TAG = TAG + "sweep"
RUN_NAME_TAG = "mlflow.runName"
MAX_PARAM, MAX_TAG = 6000, 8000
_KEY = re.compile(r"[^\w\-. /]")


def key(name: str) -> str:
    """An MLflow key (letters, digits, _ - . space /; 250 characters at most)."""
    return _KEY.sub("_", str(name))[:250] or "_"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(jsonable(value), sort_keys=True, default=str)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts as ``a.b`` keys; every value as text (strings as they are, the rest as JSON)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, name + "."))
        else:
            out[key(name)] = _text(v)[:MAX_PARAM]
    return out


def fid(record: RunRecord) -> str:
    return f"{record.identity}:{record.seed}"


def params_of(record: RunRecord, seed_param: str = "seed") -> dict[str, str]:
    params = flatten(record.config)
    if seed_param in params and params[seed_param] != str(record.seed):
        params["config." + seed_param] = params.pop(seed_param)
    params[seed_param] = str(record.seed)
    return params


def tags_of(record: RunRecord, sweep: Any, store_run_id: int | None) -> dict[str, str]:
    code = record.code or {}
    tags: dict[str, Any] = {
        SWEEP_TAG: sweep.name, TAG + "sweep_id": sweep.id, TAG + "workload": record.workload,
        TAG + "identity": record.identity, TAG + "config_hash": record.config_hash,
        TAG + "code_version": code.get("version"), TAG + "code_commit": code.get("commit"),
        TAG + "code_dirty": code.get("dirty"), TAG + "env_hash": record.env_hash,
        TAG + "eval_fingerprint": record.eval_fingerprint, TAG + "data_identity": record.data_identity,
        RUN_ID_TAG: fid(record), TAG + "store_run_id": store_run_id, TAG + "seed": record.seed,
        TAG + "status": record.status, TAG + "exit_code": record.exit_code, TAG + "error": record.error,
        TAG + "created": record.created, TAG + "hypothesis": record.hypothesis, TAG + "success": record.success,
        TAG + "directions": record.directions or None,
        TAG + "config_roles": {k: record.extra[k] for k in ("eval_keys", "exec_keys") if record.extra.get(k)} or None,
        RUN_NAME_TAG: f"{sweep.name} seed {record.seed}",
        "mlflow.source.git.commit": code.get("commit"),
    }
    return {k: _text(v)[:MAX_TAG] for k, v in tags.items() if v is not None}


def metrics_of(record: RunRecord) -> list[tuple[str, float, int]]:
    """(key, value, step): every curve value at its step (the logged row, from 0); a final value that is not its
    curve's last one goes one step past it (step 0 when there is no curve), so the last logged value is the final
    one; then the grad-norm quantiles and the wall time."""
    out = [(key(name), float(v), step) for name, values in record.curves.items() for step, v in enumerate(values)]
    for name, value in record.final.items():
        curve = record.curves.get(name) or []
        if curve and _same(curve[-1], value):
            continue
        out.append((key(name), float(value), len(curve)))
    out += [(key(f"grad_norm.{q}"), float(v), 0) for q, v in record.grad_norm.items()]
    if "wall_seconds" not in record.final:
        out.append(("wall_seconds", float(record.wall_seconds), 0))
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def millis(created: str, default: int) -> int:
    try:
        return int(_dt.datetime.fromisoformat(created).timestamp() * 1000)
    except (TypeError, ValueError):
        return default


def _value(text: str) -> Any:
    """A param's text as the value it was (JSON when it parses, the text otherwise)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _json_tag(tags: dict[str, str], name: str) -> Any:
    try:
        return json.loads(tags[name]) if name in tags else None
    except ValueError:
        return None


def _int_tag(tags: dict[str, str], name: str) -> int | None:
    value = _json_tag(tags, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def seed_of(run: Any, seed_param: str) -> int | None:
    """The run's seed from param ``seed_param`` (None when absent); a value that is not an integer is refused."""
    text = run.data.params.get(seed_param)
    if text is None:
        return None
    try:
        value = float(text)
        if not value.is_integer():
            raise ValueError
        return int(value)
    except ValueError:
        raise InvalidArgument(f"MLflow run {run.info.run_id} has {seed_param}={text!r}, which is not an integer seed; "
                              "pass the param that holds the seed with --seed-param NAME") from None


def record_of(run: Any, seed: int, seed_param: str, experiment: str) -> RunRecord:
    """An MLflow run as a read-only RunRecord: final metrics = each metric's last logged value. A run pushed by
    firstdiv keeps the identity it was pushed with; any other run's identity is its params' hash, with its
    code version from MLflow's git commit tag and no environment or eval fingerprint (UNKNOWN in a comparison)."""
    tags, metrics = run.data.tags, dict(run.data.metrics)
    pushed = TAG + "identity" in tags
    config = {k: _value(v) for k, v in sorted(run.data.params.items()) if k != seed_param}
    grad: dict[str, float] = {}
    wall = (run.info.end_time - run.info.start_time) / 1000 if run.info.end_time and run.info.start_time else 0.0
    if pushed:
        grad = {k.removeprefix("grad_norm."): metrics.pop(k) for k in list(metrics) if k.startswith("grad_norm.")}
        wall = metrics.pop("wall_seconds", wall)
    config_hash = tags.get(TAG + "config_hash") or short_hash(config)
    code = {"version": tags.get(TAG + "code_version") or tags.get("mlflow.source.git.commit"),
            "commit": tags.get(TAG + "code_commit") or tags.get("mlflow.source.git.commit")}
    started = _dt.datetime.fromtimestamp((run.info.start_time or 0) / 1000, _dt.UTC).isoformat(timespec="milliseconds")
    extra = {"mlflow": {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id}}
    extra.update(_json_tag(tags, TAG + "config_roles") or {})
    return RunRecord(
        workload=tags.get(TAG + "workload") or f"mlflow:{experiment}", seed=seed, config=config,
        config_hash=config_hash, identity=tags.get(TAG + "identity") or short_hash({"experiment": experiment,
                                                                                    "config": config}),
        code=code, env={}, env_hash=tags.get(TAG + "env_hash"), data_identity=tags.get(TAG + "data_identity"),
        eval_contract=None, eval_fingerprint=tags.get(TAG + "eval_fingerprint"), eval_fields=[], curves={},
        final=metrics, directions=_json_tag(tags, TAG + "directions") or {}, grad_norm=grad,
        throughput={"examples_per_s": metrics.get("examples_per_s", 0.0)}, wall_seconds=float(wall),
        hypothesis=tags.get(TAG + "hypothesis"), success=tags.get(TAG + "success"),
        status="ok" if run.info.status == "FINISHED" else "failed", error=tags.get(TAG + "error"),
        exit_code=_int_tag(tags, TAG + "exit_code"), created=tags.get(TAG + "created") or started, extra=extra)
