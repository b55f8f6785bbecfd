"""The run record: what one run was (identity) and what it did (curves, metrics, cost).

Identity hashes are short sha256 prefixes of canonical JSON, so equal inputs give equal hashes on
every machine and Python version.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from .identity import RunIdentity

#: 2: ``exit_code`` (a record of version 1 loads with it None)
RECORD_VERSION = 2
_HASH_LEN = 12


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace; floats as repr so 0.02 and 0.020 agree."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def short_hash(value: Any) -> str:
    data = value if isinstance(value, bytes) else canonical(value).encode()
    return hashlib.sha256(data).hexdigest()[:_HASH_LEN]


def content_hash(*objs: Any) -> str:
    """Hash tensors, arrays, bytes or strings by content (dtype and shape included)."""
    h = hashlib.sha256()
    for obj in objs:
        if hasattr(obj, "detach") and hasattr(obj, "cpu"):
            obj = obj.detach().cpu().contiguous().numpy()
        if isinstance(obj, np.ndarray):
            h.update(f"{obj.dtype}{obj.shape}".encode())
            h.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, bytes):
            h.update(obj)
        elif isinstance(obj, str):
            h.update(obj.encode())
        else:
            h.update(canonical(obj).encode())
    return h.hexdigest()[:_HASH_LEN]


class Recorder:
    """Handed to a workload as its third argument; everything it is told ends up in the run record.

    A workload needs only ``log``; the rest make comparisons sharper::

        def train(seed, config, rec):
            rec.data_identity(x_train, y_train, x_val, y_val)   # hashes the arrays
            rec.eval_contract(indices=range(len(x_val)), reduction="mean", mode="eval")
            for epoch in range(config["epochs"]):
                ...
                rec.log(train_loss=..., val_loss=..., val_acc=...)
    """

    def __init__(self, seed: int, config: dict[str, Any]) -> None:
        self.seed = seed
        self.config = dict(config)
        self.rows: list[dict[str, float]] = []
        self.grad_norm_values: list[float] = []
        self.final: dict[str, float] = {}
        self.directions: dict[str, str] = {}
        self.data_id: str | None = None
        self.contract: dict[str, Any] | None = None
        self.examples_seen = 0
        self.tokens_seen = 0
        self.extra: dict[str, Any] = {}  # kept in the record's ``extra`` (e.g. a command's reported config)
        self.train_seconds: float | None = None
        self.state_hash: str | None = None
        self.exit_code: int | None = None  # a command run's child process: how it ended

    def log(self, /, epoch: int | None = None, **metrics: float) -> None:
        """Record one epoch's metrics (plain numbers); ``epoch`` defaults to the next index."""
        row: dict[str, float] = {"epoch": len(self.rows) if epoch is None else int(epoch)}
        for name, value in metrics.items():
            row[name] = _number(name, value)
        self.rows.append(row)

    def metric(self, name: str, value: float, *, higher_is_better: bool | None = None) -> None:
        """Set a final metric explicitly (otherwise the last logged value is final)."""
        self.final[name] = _number(name, value)
        if higher_is_better is not None:
            self.directions[name] = "higher" if higher_is_better else "lower"

    def direction(self, name: str, better: str) -> None:
        """Declare whether a metric is better ``"higher"`` or ``"lower"``."""
        if better not in ("higher", "lower"):
            raise InvalidArgument(f"Expected `better` to be 'higher' or 'lower' but got {better!r}")
        self.directions[name] = better

    def data_identity(self, *objs: Any) -> str:
        """Record what data this run saw: tensors/arrays are hashed by content, strings kept."""
        if not objs:
            raise InvalidArgument("data_identity() needs the data (arrays, tensors) or a version string")
        self.data_id = objs[0] if len(objs) == 1 and isinstance(objs[0], str) else content_hash(*objs)
        return self.data_id

    def eval_contract(self, contract: dict[str, Any] | None = None, **fields: Any) -> str:
        """Declare the measurement contract (indices, preprocessing, reduction, mode, ...).

        Iterables of indices are hashed by content. Returns the eval fingerprint.
        """
        merged = dict(contract or {}, **fields)
        if not merged:
            raise InvalidArgument("eval_contract() needs at least one field, e.g. indices=..., mode='eval'")
        self.contract = {k: contract_value(v) for k, v in merged.items()}
        return short_hash(self.contract)

    def grad_norm(self, value: float) -> None:
        self.grad_norm_values.append(_number("grad_norm", value))

    def grad_norms(self, values: Iterable[float]) -> None:
        self.grad_norm_values.extend(_number("grad_norm", v) for v in values)

    def examples(self, n: int) -> None:
        """Count training examples processed (for examples/s)."""
        self.examples_seen += int(n)

    def throughput(self, *, examples: int, seconds: float, tokens: int | None = None) -> None:
        """Report examples (and, for text, non-padding tokens) processed and the seconds spent training them
        (excludes eval)."""
        self.examples_seen = int(examples)
        if tokens is not None:
            self.tokens_seen = int(tokens)
        self.train_seconds = float(seconds)

    def state(self, *objs: Any) -> str:
        """Record a content hash of the trained state: modules (their state_dict), tensors or arrays.

        Two runs with equal curves but different weights are told apart by this hash.
        """
        if not objs:
            raise InvalidArgument("state() needs the model (an nn.Module) or its tensors")
        flat: list[Any] = []
        for obj in objs:
            if hasattr(obj, "state_dict"):
                sd = obj.state_dict()
                flat += [k for k in sd] + list(sd.values())
            elif isinstance(obj, (list, tuple)):
                flat += list(obj)
            else:
                flat.append(obj)
        self.state_hash = content_hash(*flat)
        return self.state_hash

    def generator(self, stream: str) -> Any:
        """A torch.Generator for one named random stream of this run, derived from the seed alone."""
        import torch

        state = np.random.SeedSequence([self.seed, int(content_hash(stream), 16) % (1 << 32)]).generate_state(1, np.uint64)
        return torch.Generator().manual_seed(int(state[0]) & ((1 << 63) - 1))


def _number(name: str, value: Any) -> float:
    item = getattr(value, "item", None)
    if callable(item):
        value = item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"Expected metric `{name}` to be a number but got {type(value).__name__}") from None


def contract_value(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): contract_value(v) for k, v in value.items()}
    if hasattr(value, "detach"):  # a tensor, on any device: its values
        value = value.detach().cpu().numpy()
    if isinstance(value, (range, list, tuple, np.ndarray)):
        arr = np.asarray(list(value) if isinstance(value, range) else value)
        return {"hash": content_hash(arr), "count": int(arr.size)}
    return str(value)


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    q = np.quantile(arr, [0.0, 0.5, 0.9, 1.0])
    return {"min": float(q[0]), "median": float(q[1]), "p90": float(q[2]), "max": float(q[3])}


@dataclass(frozen=True)
class RunRecord:
    """One run, JSON-safe. ``identity`` is the key that makes two runs interchangeable.

    ``exit_code``: a command run's child process, 0 when it succeeded, its exit status when it failed, minus the
    signal number when a signal ended it (a timeout: the signal the sweep sent, with the error saying it timed
    out); None for an in-process workload, and for a command that could not be started.
    """

    workload: str
    seed: int
    config: dict[str, Any]
    config_hash: str
    identity: str
    code: dict[str, Any]
    env: dict[str, Any]
    env_hash: str
    data_identity: str | None
    eval_contract: dict[str, Any] | None
    eval_fingerprint: str | None
    eval_fields: list[str]
    curves: dict[str, list[float]]
    final: dict[str, float]
    directions: dict[str, str]
    grad_norm: dict[str, float]
    throughput: dict[str, float]
    wall_seconds: float
    hypothesis: str | None = None
    success: str | None = None
    status: str = "ok"
    error: str | None = None
    created: str = ""
    version: int = RECORD_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    state_hash: str | None = None
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON: a non-finite metric value is kept as the string "nan", "inf" or "-inf"."""
        data = asdict(self)
        for key in _NUMERIC_FIELDS:
            data[key] = jsonable(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Tolerates fields written by a newer firstdiv: they are kept under ``extra['unknown']``."""
        known = {f.name for f in fields(cls)}
        unknown = {k: v for k, v in data.items() if k not in known}
        data = {k: from_json(v) if k in _NUMERIC_FIELDS else v for k, v in data.items() if k in known}
        record = cls(**data)
        if unknown:
            record.extra.setdefault("unknown", {}).update(unknown)
        return record

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def nonfinite(self) -> dict[str, dict[str, Any]]:
        """Final metrics that are NaN or infinite: per metric its value and the first epoch whose
        logged value was non-finite (None for a metric set only with ``rec.metric``)."""
        out: dict[str, dict[str, Any]] = {}
        for name, value in self.final.items():
            if isinstance(value, float) and not math.isfinite(value):
                curve = self.curves.get(name, [])
                epoch = next((i for i, v in enumerate(curve) if not math.isfinite(v)), None)
                out[name] = {"value": value, "epoch": epoch}
        return out


#: Record fields that hold metric values (which may be NaN or infinite, and are encoded for JSON).
_NUMERIC_FIELDS = ("curves", "final", "grad_norm", "throughput")
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def jsonable(value: Any) -> Any:
    """``value`` with every NaN/infinite float replaced by "nan", "inf" or "-inf" (JSON has no
    spelling for them, and a strict reader rejects Python's NaN/Infinity tokens)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """Undo :func:`jsonable` in a metric field (where a string is never anything but these three)."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


def build_record(rec: Recorder, *, workload: str, identity: RunIdentity, wall: float,
                 status: str = "ok", error: str | None = None) -> RunRecord:
    """Assemble the record from what the workload told the recorder plus the precomputed identity."""
    curves: dict[str, list[float]] = {}
    for row in rec.rows:
        for name, value in row.items():
            if name != "epoch":
                curves.setdefault(name, []).append(value)
    final = {name: values[-1] for name, values in curves.items() if values}
    final.update(rec.final)
    seconds = rec.train_seconds if rec.train_seconds is not None else wall
    throughput = {"examples": rec.examples_seen, "seconds": seconds,
                  "examples_per_s": rec.examples_seen / seconds if seconds > 0 and rec.examples_seen else 0.0}
    if throughput["examples_per_s"]:
        final["examples_per_s"] = throughput["examples_per_s"]
    if rec.tokens_seen and seconds > 0:
        throughput.update(tokens=rec.tokens_seen, tokens_per_s=rec.tokens_seen / seconds)
    contract = rec.contract
    return RunRecord(
        workload=workload, seed=rec.seed, config=identity.config, config_hash=identity.config_hash,
        identity=identity.identity, code=identity.code, env=identity.env, env_hash=identity.env_hash,
        data_identity=rec.data_id, eval_contract=contract,
        eval_fingerprint=short_hash(contract) if contract else None,
        eval_fields=sorted(contract) if contract else [], curves=curves, final=final,
        directions=dict(rec.directions), grad_norm=quantiles(rec.grad_norm_values), throughput=throughput,
        wall_seconds=wall, hypothesis=identity.hypothesis, success=identity.success,
        status=status, error=error, created=now_iso(), extra={**identity.extra, **rec.extra}, state_hash=rec.state_hash,
        exit_code=rec.exit_code,
    )


def timer() -> float:
    return time.perf_counter()
