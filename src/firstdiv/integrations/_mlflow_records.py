"""A firstdiv run as an MLflow run (params, metrics, tags) and an MLflow run back as a firstdiv RunRecord."""

from __future__ import annotations

import datetime as _dt
import json
import math
import posixpath
import re
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidArgument
from ..lab.record import RunRecord, jsonable, short_hash

TAG = "firstdiv."
#: the tag that names a pushed run: ``IDENTITY:SEED``, the same in every store (a store's run id is local to it)
RUN_ID_TAG = TAG + "run_id"
SWEEP_TAG = TAG + "sweep"
#: "1" on a run whose metric and param keys are :func:`key`'s (read back with :func:`unkey`); older pushes lack it
KEY_FORMAT_TAG = TAG + "key_format"
RUN_NAME_TAG = "mlflow.runName"
MAX_PARAM, MAX_TAG, MAX_KEY = 6000, 8000, 250
MAX_DEPTH = 64  # a param's JSON nested deeper than this is kept as its text
_UNSAFE = re.compile(r"[^\w. /]")  # what MLflow does not take in a key on every platform, and the escape "-"
_UNSAFE_PATH = re.compile(r"[^\w ]")  # the same, with the path characters . and /
_ESCAPED = re.compile(r"--|-([0-9a-f]{1,6})-")


def _escape(match: re.Match[str]) -> str:
    c = match.group(0)
    return "--" if c == "-" else f"-{ord(c):x}-"


def key(name: str) -> str:
    """The MLflow key of metric or param ``name``: the characters MLflow takes everywhere (letters, digits, ``_``,
    ``.``, space, ``/``) as they are, any other as ``-HEX-`` (its code point), a ``-`` as ``--``; a name MLflow would
    read as another path (``a/``, ``a//b``, ``..``) has its ``.`` and ``/`` escaped too. Two names never share a key
    (up to MLflow's 250 characters) and :func:`unkey` gives the name back; ``""`` is ``-``."""
    name = str(name)
    if not name:
        return "-"
    out = _UNSAFE.sub(_escape, name)
    if _not_a_plain_path(out):
        out = _UNSAFE_PATH.sub(_escape, name)
    return out[:MAX_KEY]


def _not_a_plain_path(k: str) -> bool:
    """MLflow's own rule: a key must not read as another path (normalised, absolute, ``.`` or ``..``)."""
    return posixpath.normpath(k) != k or k == "." or k.startswith(("/", ".."))


def unkey(k: str) -> str:
    """The name :func:`key` made ``k`` from."""
    if k == "-":
        return ""

    def one(match: re.Match[str]) -> str:
        code = int(match.group(1), 16) if match.group(1) else ord("-")
        return chr(code) if code <= 0x10FFFF else match.group(0)

    return _ESCAPED.sub(one, k)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(jsonable(value), sort_keys=True, default=str)


def _claim(seen: dict[str, str], k: str, what: str, kind: str, where: str) -> str:
    """``k``, noted as ``what``'s; a key another name already has is refused: MLflow would merge the two."""
    other = seen.setdefault(k, what)
    if other != what:
        shown = k if len(k) <= 60 else k[:57] + "..."
        raise InvalidArgument(f"{where}{other} and {what} both become MLflow {kind} {shown!r}; rename one of them to "
                              "push this sweep (MLflow keeps one value per key)")
    return k


def _flat(config: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in config.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, (*path, str(k)))
        else:
            yield (*path, str(k)), v


def flatten(config: dict[str, Any], where: str = "", seen: dict[str, str] | None = None) -> dict[str, str]:
    """Nested dicts as ``a.b`` keys (each escaped by :func:`key`); every value as text (strings as they are, the
    rest as JSON). Two config keys that would share an MLflow key are refused."""
    out: dict[str, str] = {}
    seen = {} if seen is None else seen
    for path, v in _flat(config):
        label = "config key " + " > ".join(repr(p) for p in path)
        out[_claim(seen, key(".".join(path)), label, "param", where)] = _text(v)[:MAX_PARAM]
    return out


def fid(record: RunRecord) -> str:
    return f"{record.identity}:{record.seed}"


def params_of(record: RunRecord, seed_param: str = "seed", where: str = "") -> dict[str, str]:
    seen: dict[str, str] = {}
    params = flatten(record.config, where, seen)
    if seed_param in params and params[seed_param] != str(record.seed):  # the config's own seed, kept apart
        moved = params.pop(seed_param)
        params[_claim(seen, "config." + seed_param, f"config key {seed_param!r} (as config.{seed_param})", "param",
                      where)] = moved
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
        KEY_FORMAT_TAG: "1",
        RUN_NAME_TAG: f"{sweep.name} seed {record.seed}",
        "mlflow.source.git.commit": code.get("commit"),
    }
    return {k: _text(v)[:MAX_TAG] for k, v in tags.items() if v is not None}


def metrics_of(record: RunRecord, where: str = "") -> list[tuple[str, float, int]]:
    """(key, value, step): every curve value at its step (the logged row, from 0); a final value that is not its
    curve's last one goes one step past it (step 0 when there is no curve), so the last logged value is the final
    one; then the grad-norm quantiles and the wall time. Two names that would share a key are refused."""
    seen: dict[str, str] = {}
    out = []
    for name, values in record.curves.items():
        k = _claim(seen, key(name), f"metric {name!r}", "metric", where)
        out += [(k, float(v), step) for step, v in enumerate(values)]
    for name, value in record.final.items():
        k = _claim(seen, key(name), f"metric {name!r}", "metric", where)
        curve = record.curves.get(name) or []
        if not (curve and _same(curve[-1], value)):
            out.append((k, float(value), len(curve)))
    for q, v in record.grad_norm.items():
        k = _claim(seen, key(f"grad_norm.{q}"), f"the gradient-norm quantile {q!r}", "metric", where)
        out.append((k, float(v), 0))
    if "wall_seconds" not in record.final:
        out.append((_claim(seen, "wall_seconds", "the wall time", "metric", where), float(record.wall_seconds), 0))
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def millis(created: str, default: int) -> int:
    try:
        return int(_dt.datetime.fromisoformat(created).timestamp() * 1000)
    except (TypeError, ValueError):
        return default


def _loads(text: str) -> Any:
    """``text`` as JSON; ValueError when it is not, or is nested deeper than MAX_DEPTH (anyone can write a param)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError("nested too deep")
            stack += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return value


def _value(text: str) -> Any:
    """A param's text as the value it was (JSON when it parses, the text otherwise)."""
    try:
        return _loads(text)
    except ValueError:
        return text


def _json_tag(tags: dict[str, str], name: str, fits: Any = lambda v: True) -> Any:
    """Tag ``name`` as the JSON firstdiv wrote there; None when absent, not JSON, or not of the shape ``fits`` takes
    (a tag anyone could have written never breaks a comparison)."""
    try:
        value = _loads(tags[name]) if name in tags else None
    except ValueError:
        return None
    return value if value is not None and fits(value) else None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _roles(value: Any) -> bool:
    return isinstance(value, dict) and all(k in ("eval_keys", "exec_keys") and _strings(v) for k, v in value.items())


def _directions(value: Any) -> bool:
    return isinstance(value, dict) and all(v in ("higher", "lower") for v in value.values())


def _int_tag(tags: dict[str, str], name: str) -> int | None:
    return _json_tag(tags, name, lambda v: isinstance(v, int) and not isinstance(v, bool))


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
    tags = run.data.tags
    name = unkey if tags.get(KEY_FORMAT_TAG) == "1" else str
    metrics = {name(k): v for k, v in run.data.metrics.items()}
    pushed = TAG + "identity" in tags
    config = {name(k): _value(v) for k, v in sorted(run.data.params.items()) if k != seed_param}
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
    extra.update(_json_tag(tags, TAG + "config_roles", _roles) or {})
    return RunRecord(
        workload=tags.get(TAG + "workload") or f"mlflow:{experiment}", seed=seed, config=config,
        config_hash=config_hash, identity=tags.get(TAG + "identity") or short_hash({"experiment": experiment,
                                                                                    "config": config}),
        code=code, env={}, env_hash=tags.get(TAG + "env_hash"), data_identity=tags.get(TAG + "data_identity"),
        eval_contract=None, eval_fingerprint=tags.get(TAG + "eval_fingerprint"), eval_fields=[], curves={},
        final=metrics, directions=_json_tag(tags, TAG + "directions", _directions) or {}, grad_norm=grad,
        throughput={"examples_per_s": metrics.get("examples_per_s", 0.0)}, wall_seconds=float(wall),
        hypothesis=tags.get(TAG + "hypothesis"), success=tags.get(TAG + "success"),
        status="ok" if run.info.status == "FINISHED" else "failed", error=tags.get(TAG + "error"),
        exit_code=_int_tag(tags, TAG + "exit_code"), created=tags.get(TAG + "created") or started, extra=extra)
