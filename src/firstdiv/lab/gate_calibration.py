"""What a gate is calibrated on and validated against: the calibration runs (a sweep name, a SweepResult or
run records), the checks that they are healthy runs of one workload, config and measurement, and the held-out
healthy seeds that did not choose the threshold (run here when given as seeds)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .._format import seed_text
from ..errors import InvalidArgument, NotFound
from .record import RunRecord
from .stats import exceeds, false_alarm_rate
from .sweep import SweepResult, parse_seeds


def is_seed_spec(text: str) -> bool:
    try:
        parse_seeds(text)
    except InvalidArgument:
        return False
    return True


def source(ref: Any, st: Any, role: str) -> tuple[str | None, tuple[RunRecord, ...]]:
    if isinstance(ref, SweepResult):
        return ref.sweep.name, tuple(ref.records) + tuple(ref.failed)
    if isinstance(ref, str):
        info = st.find_sweep(ref)
        return info.name, tuple(st.records(info, include_failed=True))
    records = tuple(ref) if isinstance(ref, Iterable) else ()
    if records and all(isinstance(r, RunRecord) for r in records):
        return None, records
    raise InvalidArgument(f"Expected the {role} runs as a sweep name, a SweepResult or run records "
                          f"but got {type(ref).__name__}")


def healthy(records: Sequence[RunRecord], metric: str, label: str | None) -> tuple[RunRecord, ...]:
    name = f"sweep {label!r}" if label else "the calibration records"
    bad = [r.seed for r in records if not r.ok]
    if not records or bad:
        raise InvalidArgument(f"{name} has " + (f"failed runs (seeds {bad[:5]})" if bad else "no runs") +
                              "; calibrate on completed healthy runs only (rerun the sweep)")
    missing = [r.seed for r in records if metric not in r.final]
    if missing:
        raise NotFound(f"Metric {metric!r} is not recorded in {name} (seeds {missing[:5]}); recorded metrics: "
                       + ", ".join(sorted(set().union(*(r.final for r in records)))))
    for what, get in (("config hashes", lambda r: r.config_hash), ("eval fingerprints", lambda r: r.eval_fingerprint),
                      ("workloads", lambda r: r.workload)):
        seen = sorted({str(get(r)) for r in records})
        if len(seen) > 1:
            raise InvalidArgument(f"{name} mixes {len(seen)} {what} ({', '.join(seen[:3])}); calibrate on runs "
                                  "of one workload, config and measurement")
    seeds = [r.seed for r in records]
    if len(set(seeds)) != len(seeds):
        raise InvalidArgument(f"{name} repeats seeds {sorted({s for s in seeds if seeds.count(s) > 1})[:5]}; "
                              "each calibration run needs its own seed")
    return tuple(sorted(records, key=lambda r: r.seed))


def holdout_runs(gate: Any, holdout: Any, store: Any, label: str | None) -> dict[str, Any]:
    seeds = None
    if isinstance(holdout, str) and is_seed_spec(holdout):
        seeds = parse_seeds(holdout)
    elif isinstance(holdout, (list, tuple, range)) and all(isinstance(s, int) for s in holdout):
        seeds = parse_seeds(list(holdout))
    calib = set(gate.calibration_seeds)
    if seeds is not None:
        _no_overlap(seeds, calib)
        if not gate.workload:
            raise InvalidArgument("The calibration records name no workload to run held-out seeds on; "
                                  "pass the held-out runs as a sweep or records instead")
        from .sweep import sweep as run_sweep

        result = run_sweep(gate.workload, seeds, config=gate.config, store=store,
                           name=f"{label or 'gate-' + str(gate.config_hash)[:8]}-holdout")
        name, records = result.sweep.name, tuple(result.records) + tuple(result.failed)
    else:
        name, records = source(holdout, store, "held-out")
        _no_overlap([r.seed for r in records], calib)
    ok = [r for r in records if r.ok]
    for what, attr in (("config hash", "config_hash"), ("eval fingerprint", "eval_fingerprint")):
        seen = sorted({str(getattr(r, attr)) for r in ok} - {str(getattr(gate, attr))})
        if seen and getattr(gate, attr) is not None:
            raise InvalidArgument(f"The held-out runs have {what} {', '.join(seen)}, the calibration runs "
                                  f"{getattr(gate, attr)}; hold out healthy seeds of the same workload and config")
    records = sorted(records, key=lambda r: r.seed)
    values = [float(r.final.get(gate.metric, math.nan)) if r.ok else math.nan for r in records]
    k = sum(exceeds(v, gate.threshold, gate.higher_is_better) for v in values)
    return {"sweep": name, "seeds": [r.seed for r in records], "values": [v if math.isfinite(v) else None for v in values],
            "failed_seeds": [r.seed for r in records if not r.ok], **false_alarm_rate(k, len(records), gate.alpha),
            "code_version": joined(r.code.get("version") for r in records), "env_hash": joined(r.env_hash for r in records)}


def _no_overlap(seeds: Iterable[int], calib: set[int]) -> None:
    seeds = list(seeds)
    if not seeds:
        raise InvalidArgument("Expected held-out runs but got none; pass held-out seeds such as '20-39'")
    both = sorted(set(seeds) & calib)
    if both:
        top = max(calib) + 1
        raise InvalidArgument(f"Held-out seeds {seed_text(both)} were also used to calibrate (seeds "
                              f"{seed_text(sorted(calib))}); hold out other seeds, e.g. {top}-{top + len(calib) - 1}")


def joined(values: Iterable[Any]) -> str | None:
    seen = sorted({str(v) for v in values if v is not None})
    return ",".join(seen) if seen else None
