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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from scipy import stats as sps

from .._format import margin_text, ordinal, seed_text, value_text
from ..errors import InvalidArgument, NotFound
from ..report import Divergence, Finding, Report, Status
from .compare import higher_is_better
from .gate_calibration import healthy, holdout_runs, is_seed_spec, joined, source
from .gate_digest import check_types, digest, verify_digest
from .record import RunRecord, now_iso
from .stats import check_alpha, conformal_rank, conformal_threshold, exceeds, false_alarm_rate, margin, seeds_needed
from .store import Store
from .sweep import SweepResult

# the rule's statistics live in stats and stay importable from here
__all__ = ["GATE_FORMAT", "GATE_VERSION", "Gate", "GateCheck", "conformal_rank", "conformal_threshold", "exceeds",
           "false_alarm_rate", "holdout_text", "margin", "rule_text", "run_text", "seeds_needed"]

GATE_FORMAT = "firstdiv.gate"
# Gate file versions, append-only history: 1 — firstdiv 0.1 (conformal threshold, held-out check).
#   2 — calibration_identity (the calibration runs' identities) and calibration_digest (gate_digest).
GATE_VERSION = 2


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
        check_alpha(alpha)
        if store is None and isinstance(sweep, SweepResult) and sweep.store_path:
            store = sweep.store_path  # held-out runs go where the calibration runs are
        named = isinstance(sweep, str) or (isinstance(holdout, str) and not is_seed_spec(holdout))
        owned = named and not isinstance(store, Store)
        st = Store(store, create=False) if owned else store
        try:
            label, records = source(sweep, st, "calibration")
            records = healthy(records, metric, label)
            hib = higher_is_better(metric, records)
            threshold, rank = conformal_threshold([r.final[metric] for r in records], alpha, higher_is_better=hib)
            first = records[0]
            gate = cls(metric, float(alpha), hib, threshold, rank, tuple(r.seed for r in records),
                       tuple(float(r.final[metric]) for r in records), first.workload, dict(first.config),
                       first.config_hash, first.eval_fingerprint, first.eval_contract,
                       joined(r.env_hash for r in records), joined(r.code.get("version") for r in records),
                       label, None, now_iso(), joined(r.identity for r in records))
            return gate if holdout is None else replace(gate, holdout=holdout_runs(gate, holdout, st, label))
        finally:
            if owned:
                st.close()  # type: ignore[union-attr]

    def check(self, x: Any, *, min_effect: float | str | None = None) -> GateCheck:
        """Check one value, many values, a SweepResult or run records against the threshold; with
        ``min_effect`` a run fails only when also worse than the calibration median by more than it."""
        from .gate_effect import effect_threshold

        gate, effect = effect_threshold(self, min_effect)
        report = _check(gate, _entries(x, self.metric))
        report.details["min_effect"] = effect
        return report

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
        from ..render.experiments import render_gate

        yield from render_gate(self, rule_text(self), holdout_text(self))

    def __str__(self) -> str:
        from ..render import to_text

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
        from ..render.experiments import render_check

        return render_check(self, run_text)


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


# -- the findings' wording ------------------------------------------------------------------------

def run_text(metric: str, threshold: float, r: dict[str, Any]) -> str:
    """The chapter's line: ``val_loss 0.9924   threshold 1.0574   pass=True   margin +0.065``."""
    text = (f"{metric} {value_text(r['value'])}   threshold {threshold:.4f}   pass={not r['exceeded']}   "
            f"margin {margin_text(r['margin'])}")
    return text + (f"   ({r['error']})" if r["error"] else "")


def rule_text(g: Gate) -> str:
    order = "largest" if g.higher_is_better else "smallest"
    return (f"split conformal: threshold = the {ordinal(g.rank)} {order} of n={g.n} calibration values "
            f"(rank ceil((n+1)(1-alpha)) at alpha={g.alpha:g}); a run fails when {g.metric} is "
            f"{'below' if g.higher_is_better else 'above'} it")


def holdout_text(g: Gate) -> str:
    h = g.holdout
    if h is None:
        return "not validated on held-out healthy seeds; calibrate with holdout= (--holdout-seeds) before relying on it"
    verdict = "consistent with alpha" if h["consistent"] else f"MORE than alpha={g.alpha:g}: not calibrated"
    return (f"{h['false_alarms']}/{h['n']} held-out healthy seeds ({seed_text(h['seeds'])}) over the threshold: "
            f"rate {h['rate']:.3f}, {h['confidence']:.0%} CI [{h['ci_low']:.3f}, {h['ci_high']:.3f}] (exact); "
            f"p={h['p_value']:.3g} for rate > {g.alpha:g}: {verdict}")
