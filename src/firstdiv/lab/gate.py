"""Chapter 14's E10 with a stated guarantee: a regression gate calibrated on healthy seeds.

Rule (split conformal): from n healthy calibration runs, the threshold is the
``ceil((n+1)(1-alpha))``-th best value of the metric, and a run fails when it is worse than that.
If a new healthy run is exchangeable with the calibration runs (same workload, config, code, data,
measurement and environment; only the seed differs), P(it fails) <= alpha, averaged over
calibrations. The threshold actually chosen is then tried on held-out healthy seeds that did not
choose it, and its false-alarm rate is reported with an exact binomial interval.

Checking m runs at once fails when k of them exceed the threshold and a one-sided binomial test of
"the rate is above alpha" gives p <= alpha; one run fails when it exceeds the threshold.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import InvalidArgument, NotFound
from ..report import Divergence, Finding, Report, Status
from .compare import higher_is_better
from .gate_digest import check_types, digest, verify_digest
from .gate_render import holdout_text, margin_text, rule_text, run_text, seed_text, value_text
from .record import RunRecord, now_iso
from .store import Store
from .sweep import SweepResult, parse_seeds

GATE_FORMAT = "firstdiv.gate"
# Gate file versions, append-only history: 1 — firstdiv 0.1 (conformal threshold, held-out check).
#   2 — calibration_identity (the calibration runs' identities) and calibration_digest (gate_digest).
GATE_VERSION = 2
CONFIDENCE = 0.95  # of the held-out false-alarm interval


# -- the statistics: pure functions ---------------------------------------------------------------

def conformal_rank(n: int, alpha: float) -> int:
    """1-based rank ``ceil((n+1)(1-alpha))`` of the threshold among n values ordered best to worst."""
    return max(1, math.ceil((n + 1) * (1 - alpha) - 1e-9))  # the epsilon keeps exact integers exact


def seeds_needed(alpha: float) -> int:
    """The fewest calibration runs that support ``alpha``: n >= 1/alpha - 1."""
    n = max(1, math.floor(1 / alpha - 1))
    while conformal_rank(n, alpha) > n:
        n += 1
    return n


def conformal_threshold(values: Sequence[float], alpha: float, *,
                        higher_is_better: bool = False) -> tuple[float, int]:
    """``values``: shape (n,), one metric value per healthy calibration run. Returns (threshold, rank):
    the rank-th best value. Raises InvalidArgument when n is too small for ``alpha``."""
    _check_alpha(alpha)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidArgument(f"Expected a non-empty 1-d sequence of calibration values but got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgument(f"{int(np.sum(~np.isfinite(arr)))} of the {arr.size} calibration values are NaN or "
                              "infinite; calibrate on healthy runs only")
    n, rank = int(arr.size), conformal_rank(int(arr.size), alpha)
    if rank > n:
        smallest = math.ceil(1e4 / (n + 1)) / 1e4
        raise InvalidArgument(f"alpha={alpha:g} needs at least {seeds_needed(alpha)} calibration seeds "
                              f"(n >= 1/alpha - 1) but got {n}; sweep more seeds or use alpha >= {smallest:.4f}, "
                              f"the smallest these {n} seeds support")
    ordered = np.sort(arr)[::-1] if higher_is_better else np.sort(arr)
    return float(ordered[rank - 1]), rank


def exceeds(value: float, threshold: float, hib: bool) -> bool:
    """Worse than the threshold. A value that is not finite (a diverged or failed run) always is."""
    if not math.isfinite(value):
        return True
    return value < threshold if hib else value > threshold


def margin(value: float, threshold: float, hib: bool) -> float | None:
    """Room left before the threshold, in metric units: positive passes, negative fails."""
    if not math.isfinite(value):
        return None
    return value - threshold if hib else threshold - value


def false_alarm_rate(k: int, m: int, alpha: float, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """k of m healthy runs exceeded: rate, exact (Clopper-Pearson) interval, p of "rate > alpha"."""
    ci = sps.binomtest(k, m).proportion_ci(confidence_level=confidence, method="exact")
    p = float(sps.binomtest(k, m, alpha, alternative="greater").pvalue)
    return {"false_alarms": k, "n": m, "rate": k / m, "ci_low": float(ci.low), "ci_high": float(ci.high),
            "confidence": confidence, "p_value": p, "consistent": p > alpha}


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, numbers.Real) and 0 < alpha < 1):
        raise InvalidArgument(f"Expected alpha in (0, 1), e.g. 0.05, but got {alpha!r}")


# -- the gate -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gate:
    """A threshold on one metric with its false-alarm bound and what it was calibrated on."""

    metric: str
    alpha: float
    higher_is_better: bool
    threshold: float
    rank: int
    calibration_seeds: tuple[int, ...]
    calibration_values: tuple[float, ...]
    workload: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    config_hash: str | None = None
    eval_fingerprint: str | None = None
    eval_contract: dict[str, Any] | None = None
    env_hash: str | None = None
    code_version: str | None = None
    calibration_sweep: str | None = None
    holdout: dict[str, Any] | None = None
    created: str = ""
    calibration_identity: str | None = None

    @property
    def n(self) -> int:
        return len(self.calibration_values)

    @property
    def op(self) -> str:
        return ">=" if self.higher_is_better else "<="

    @property
    def bound(self) -> float:
        """The exact false-alarm probability of the rule for continuous metrics, (n+1-rank)/(n+1)."""
        return (self.n + 1 - self.rank) / (self.n + 1)

    @property
    def calibrated(self) -> bool:
        """Validated on held-out healthy seeds, whose false alarms are consistent with alpha."""
        return self.holdout is not None and bool(self.holdout["consistent"])

    @classmethod
    def calibrate(cls, sweep: Any, *, alpha: float = 0.05, holdout: Any = None, metric: str = "val_loss",
                  store: Store | str | os.PathLike[str] | None = None) -> Gate:
        """Calibrate on ``sweep`` (a sweep name, SweepResult or run records); validate on ``holdout``
        (seeds like "20-59" run on the same workload and config, or a sweep/records)."""
        _check_alpha(alpha)
        if store is None and isinstance(sweep, SweepResult) and sweep.store_path:
            store = sweep.store_path  # held-out runs go where the calibration runs are
        named = isinstance(sweep, str) or (isinstance(holdout, str) and not _is_seed_spec(holdout))
        owned = named and not isinstance(store, Store)
        st = Store(store, create=False) if owned else store
        try:
            label, records = _source(sweep, st, "calibration")
            records = _healthy(records, metric, label)
            hib = higher_is_better(metric, records)
            threshold, rank = conformal_threshold([r.final[metric] for r in records], alpha, higher_is_better=hib)
            first = records[0]
            gate = cls(metric, float(alpha), hib, threshold, rank, tuple(r.seed for r in records),
                       tuple(float(r.final[metric]) for r in records), first.workload, dict(first.config),
                       first.config_hash, first.eval_fingerprint, first.eval_contract,
                       _joined(r.env_hash for r in records), _joined(r.code.get("version") for r in records),
                       label, None, now_iso(), _joined(r.identity for r in records))
            return gate if holdout is None else replace(gate, holdout=_holdout(gate, holdout, st, label))
        finally:
            if owned:
                st.close()  # type: ignore[union-attr]

    def check(self, x: Any) -> GateCheck:
        """Check one value, many values, a SweepResult or run records against the threshold."""
        return _check(self, _entries(x, self.metric))

    def report(self) -> Report:
        """The calibration as a report: FAIL when the held-out false alarms exceed alpha."""
        h, div, status = self.holdout, None, Status.PASS
        if h is None:
            status = Status.WARN
        elif not h["consistent"]:
            status = Status.FAIL
            moved = [k for k in ("code_version", "env_hash") if h.get(k) != getattr(self, k)]
            div = Divergence(self.metric, "gate.miscalibrated", f"false-alarm rate <= {self.alpha:g}",
                             f"{h['false_alarms']}/{h['n']} held-out healthy runs over the threshold",
                             f"binomial p={h['p_value']:.3g} <= alpha: " + (
                                 f"the held-out runs have another {' and '.join(moved)}; " if moved else
                                 "this draw of calibration seeds set the threshold low (the bound is an average "
                                 "over draws); ") + "recalibrate on calibration + held-out seeds, validate on fresh ones")
        findings = [Finding(self.metric, "threshold", Status.PASS, rule_text(self), {"threshold": self.threshold,
                                                                                     "rank": self.rank, "n": self.n})]
        findings.append(Finding("holdout", "false alarms", status, holdout_text(self), h or {}))
        return Report("gate", status, div, tuple(findings), side_effects="none (held-out runs recorded in the store)",
                      details=self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["calibration_seeds"], out["calibration_values"] = list(self.calibration_seeds), list(self.calibration_values)
        return {"format": GATE_FORMAT, "version": GATE_VERSION, **out, "calibration_digest": digest(out)}

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "gate data") -> Gate:
        fix = "recreate it with `firstdiv gate calibrate SWEEP --holdout-seeds SEEDS -o FILE`"
        if not isinstance(data, dict) or data.get("format") != GATE_FORMAT:
            raise InvalidArgument(f"{source} is not a firstdiv gate file (no \"format\": \"{GATE_FORMAT}\"); {fix}")
        version = data.get("version")
        if not isinstance(version, int) or version < 1:
            raise InvalidArgument(f"{source} has no valid gate format version (got {version!r}); {fix}")
        if version > GATE_VERSION:
            raise InvalidArgument(f"{source} has gate format version {version}, newer than this firstdiv's "
                                  f"{GATE_VERSION}; upgrade firstdiv (pip install -U firstdiv) to read it")
        names = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls)[:7] if f.name not in data]
        if missing:
            raise InvalidArgument(f"{source} is missing {', '.join(missing)}; {fix}")
        check_types(data, source, fix)
        try:
            kw = {k: v for k, v in data.items() if k in names}
            kw["calibration_seeds"] = tuple(int(s) for s in kw["calibration_seeds"])
            kw["calibration_values"] = tuple(float(v) for v in kw["calibration_values"])
            gate = cls(**kw)
            expected = conformal_threshold(gate.calibration_values, gate.alpha, higher_is_better=gate.higher_is_better)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"{source} is malformed ({str(exc).splitlines()[0]}); {fix}") from None
        if expected != (gate.threshold, gate.rank) or len(gate.calibration_seeds) != gate.n:
            raise InvalidArgument(f"{source}: threshold {gate.threshold!r} (rank {gate.rank}) does not follow from its "
                                  f"calibration values (expected {expected[0]!r}, rank {expected[1]}); {fix}")
        verify_digest(data, source, fix)
        return gate

    def save(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        try:
            p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise InvalidArgument(f"Cannot write the gate file {p}: {exc.strerror}; pass a writable -o PATH") from None
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Gate:
        p = Path(path)
        if not p.is_file():
            raise NotFound(f"No gate file at {p}; create one with `firstdiv gate calibrate SWEEP "
                           f"--holdout-seeds SEEDS -o {p}`")
        try:
            data = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InvalidArgument(f"{p} is not a firstdiv gate file ({str(exc).splitlines()[0]}); recreate it with "
                                  f"`firstdiv gate calibrate SWEEP --holdout-seeds SEEDS -o {p}`") from None
        return cls.from_dict(data, source=str(p))

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from .gate_render import render_gate

        yield from render_gate(self)

    def __str__(self) -> str:
        from .._render import to_text

        return to_text(self)


class GateCheck(Report):
    """A gate's verdict on new runs; ``details`` hold every run's value and margin."""

    @property
    def margin(self) -> float | None:
        """The smallest margin over the checked runs (None when a run had no finite value)."""
        return self.details["margin"]

    @property
    def threshold(self) -> float:
        return self.details["threshold"]

    def __rich_body__(self) -> Any:
        from .gate_render import render_check

        return render_check(self)


# -- calibration inputs ---------------------------------------------------------------------------

def _is_seed_spec(text: str) -> bool:
    try:
        parse_seeds(text)
    except InvalidArgument:
        return False
    return True


def _source(ref: Any, st: Any, role: str) -> tuple[str | None, tuple[RunRecord, ...]]:
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


def _healthy(records: Sequence[RunRecord], metric: str, label: str | None) -> tuple[RunRecord, ...]:
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


def _holdout(gate: Gate, holdout: Any, store: Any, label: str | None) -> dict[str, Any]:
    seeds = None
    if isinstance(holdout, str) and _is_seed_spec(holdout):
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
        name, records = _source(holdout, store, "held-out")
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
            "code_version": _joined(r.code.get("version") for r in records), "env_hash": _joined(r.env_hash for r in records)}


def _no_overlap(seeds: Iterable[int], calib: set[int]) -> None:
    seeds = list(seeds)
    if not seeds:
        raise InvalidArgument("Expected held-out runs but got none; pass held-out seeds such as '20-39'")
    both = sorted(set(seeds) & calib)
    if both:
        top = max(calib) + 1
        raise InvalidArgument(f"Held-out seeds {seed_text(both)} were also used to calibrate (seeds "
                              f"{seed_text(sorted(calib))}); hold out other seeds, e.g. {top}-{top + len(calib) - 1}")


def _joined(values: Iterable[Any]) -> str | None:
    seen = sorted({str(v) for v in values if v is not None})
    return ",".join(seen) if seen else None


# -- checking -------------------------------------------------------------------------------------

def _entries(x: Any, metric: str) -> list[dict[str, Any]]:
    if isinstance(x, SweepResult):
        items: list[Any] = [*x.records, *x.failed]
    elif isinstance(x, (RunRecord, numbers.Real)) or (getattr(x, "ndim", None) == 0 and hasattr(x, "item")):
        items = [x]
    elif isinstance(x, Iterable) and not isinstance(x, (str, bytes, dict)):
        items = list(x)
    else:
        raise InvalidArgument(f"Expected a value, values, a SweepResult or run records to check but got {type(x).__name__}")
    if not items:
        raise InvalidArgument("Expected at least one value or run to check but got none")
    out = []
    for i, item in enumerate(items):
        if getattr(item, "ndim", None) == 0 and hasattr(item, "item"):
            item = item.item()
        if isinstance(item, RunRecord):
            if item.ok and metric not in item.final:
                raise NotFound(f"Metric {metric!r} is not recorded for seed {item.seed}; recorded: {', '.join(item.final)}")
            out.append({"label": f"seed {item.seed}", "seed": item.seed, "fingerprint": item.eval_fingerprint,
                        "contract": item.eval_contract, "error": item.error,
                        "value": float(item.final[metric]) if item.ok else math.nan})
        elif isinstance(item, numbers.Real) and not isinstance(item, bool):
            out.append({"label": f"run {i + 1}" if len(items) > 1 else "run", "seed": None, "value": float(item),
                        "fingerprint": None, "contract": None, "error": None})
        else:
            raise InvalidArgument(f"Expected numbers or run records to check but got {type(item).__name__} at position {i}")
    return out


def _measurement(gate: Gate, entries: list[dict[str, Any]]) -> dict[str, Any]:
    seen = sorted({e["fingerprint"] for e in entries if e["fingerprint"] is not None})
    if gate.eval_fingerprint is None or not seen:
        return {"state": "UNKNOWN", "calibrated": gate.eval_fingerprint, "observed": seen, "fields": []}
    other = [e for e in entries if e["fingerprint"] not in (None, gate.eval_fingerprint)]
    if not other:
        return {"state": "SAME", "calibrated": gate.eval_fingerprint, "observed": seen, "fields": []}
    a, b = gate.eval_contract or {}, other[0]["contract"] or {}
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return {"state": "CHANGED", "calibrated": gate.eval_fingerprint, "observed": seen, "fields": changed}


def _check(gate: Gate, entries: list[dict[str, Any]]) -> GateCheck:
    thr, hib, alpha = gate.threshold, gate.higher_is_better, gate.alpha
    runs = [{"label": e["label"], "seed": e["seed"], "value": e["value"] if math.isfinite(e["value"]) else None,
             "margin": margin(e["value"], thr, hib), "exceeded": exceeds(e["value"], thr, hib), "error": e["error"]}
            for e in entries]
    k, m = sum(r["exceeded"] for r in runs), len(runs)
    # One run: fail on exceeding. The binomial p of 1/1 at rate alpha is alpha itself, but scipy
    # computes it as 1 - (1 - alpha), a hair above alpha, so the one-run rule is stated directly.
    p = float(sps.binomtest(k, m, alpha, alternative="greater").pvalue) if m > 1 else None
    failed = bool(k) if p is None else p <= alpha
    margins = [r["margin"] for r in runs]
    meas = _measurement(gate, entries)
    details = {"metric": gate.metric, "threshold": thr, "op": gate.op, "alpha": alpha, "higher_is_better": hib,
               "runs": runs, "exceeded": k, "m": m, "p_value": p, "failed": failed, "measurement": meas,
               "margin": None if None in margins else min(margins),  # type: ignore[type-var]
               "rule": "one run fails when it exceeds the threshold" if m == 1 else
               f"fail when binomtest(k, m, {alpha:g}, 'greater') p <= {alpha:g}",
               "gate": {key: getattr(gate, key) for key in ("workload", "config_hash", "eval_fingerprint", "env_hash",
                                                            "code_version", "calibration_sweep", "n", "rank", "bound",
                                                            "calibrated")},
               "validation": "none" if gate.holdout is None else "passed" if gate.calibrated else "failed"}
    findings = [Finding(r["label"], "threshold", Status.FAIL if r["exceeded"] else Status.PASS,
                        run_text(gate.metric, thr, r), {"value": r["value"], "threshold": thr, "margin": r["margin"]})
                for r in runs]
    if m > 1:
        findings.append(Finding(gate.metric, "binomial", Status.FAIL if failed else Status.WARN if k else Status.PASS,
                                f"{k}/{m} over the threshold; one-sided binomial p={p:.3g} against a rate of {alpha:g}",
                                {"k": k, "m": m, "p_value": p}))
    state = meas["state"]
    findings.append(Finding("eval_fingerprint", "measurement", {"CHANGED": Status.FAIL, "SAME": Status.PASS}.get(
        state, Status.WARN), f"{meas['calibrated']} -> {', '.join(meas['observed']) or 'not recorded'} {state}", meas))
    div = _divergence(gate, details)
    status = Status.FAIL if div else Status.WARN if k or (state == "UNKNOWN" and runs[0]["seed"] is not None) \
        else Status.PASS
    return GateCheck("gate", status, div, tuple(findings), side_effects="none (read-only)", details=details)


def _divergence(gate: Gate, d: dict[str, Any]) -> Divergence | None:
    """Measurement first (chapter 14's order): a changed eval path is not evidence about the model."""
    meas = d["measurement"]
    if meas["state"] == "CHANGED":
        return Divergence("eval_fingerprint", "measurement.changed", meas["calibrated"], ", ".join(meas["observed"]),
                          "the gate cannot vouch for a different measurement (changed: " +
                          (", ".join(meas["fields"]) or "fingerprint") +
                          "); evaluate under the calibrated contract or recalibrate")
    if not d["failed"]:
        return None
    worst = min((r for r in d["runs"] if r["exceeded"]),
                key=lambda r: -math.inf if r["margin"] is None else r["margin"])
    observed = worst["value"] if d["m"] == 1 else f"{d['exceeded']}/{d['m']} runs over the threshold " \
                                                  f"(worst {value_text(worst['value'])})"
    why = (f"binomial p={d['p_value']:.3g} <= alpha={gate.alpha:g}" if d["m"] > 1 else
           f"a healthy run fails with probability <= {gate.alpha:g}")
    return Divergence(gate.metric, "gate.exceeded", f"{gate.op} {gate.threshold:.6g}", observed,
                      f"margin {margin_text(worst['margin'])} ({worst['label']}: {gate.metric} "
                      f"{value_text(worst['value'])} vs threshold {gate.threshold:.4f})" +
                      (f"; {worst['error']}" if worst["error"] else "") + f"; {why}")
