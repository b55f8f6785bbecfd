"""Two-by-two factorial experiments: separate two changes' main effects from their interaction.

Chapter 14, "When both the code and the data changed": run the four cells (base, A, B, AB) at one
set of shared seeds and read every effect from per-seed contrasts, so that the randomness the
cells share cancels as it does in a paired comparison::

    main effect of A = ((A - base) + (AB - B)) / 2
    main effect of B = ((B - base) + (AB - A)) / 2
    interaction      = (AB - B) - (A - base)

Each effect is the mean of its per-seed contrasts with a one-sample t interval (scipy). An effect is
resolved when that interval excludes 0.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import InvalidArgument, NotFound
from ..report import Finding, Report, Status
from .compare import higher_is_better
from .store import Store
from .sweep import SweepResult, parse_seeds, sweep
from .workload import Workload, resolve

CELLS = ("base", "A", "B", "AB")
EFFECTS = ("A", "B", "interaction")
#: Contrasts whose spread is below this fraction of the values' magnitude are float rounding of a
#: constant: t is undefined there (zero spread), so they are decided as constants, like stats.paired.
_RESOLUTION = 1e-12


class Factorial(Report):
    """A Report whose ``details`` hold the four cells, the three effects and which are resolved."""

    @property
    def effects(self) -> dict[str, dict[str, Any]]:
        return self.details["effects"]

    @property
    def cells(self) -> dict[str, dict[str, Any]]:
        return self.details["cells"]

    @property
    def resolved(self) -> list[str]:
        return self.details["resolved"]

    def __rich_body__(self) -> Any:
        from ..render.experiments import render_factorial_body

        return render_factorial_body(self)


# -- the statistics: pure functions over per-seed arrays ---------------------------------------


def contrasts(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-seed contrasts of the 2x2 design. ``values[cell]`` has shape [n_seeds], seeds aligned."""
    a_alone, a_with_b = values["A"] - values["base"], values["AB"] - values["B"]
    b_alone, b_with_a = values["B"] - values["base"], values["AB"] - values["A"]
    return {"A": (a_alone + a_with_b) / 2, "B": (b_alone + b_with_a) / 2, "interaction": a_with_b - a_alone,
            "A without B": a_alone, "A with B": a_with_b, "B without A": b_alone, "B with A": b_with_a}


def effect(d: np.ndarray, *, alpha: float, scale: float, higher_is_better: bool) -> dict[str, Any]:
    """Mean of the per-seed contrasts ``d`` [n_seeds >= 2], one-sample t CI at ``1 - alpha`` and
    p-value; ``direction`` (worse/better by the metric's direction) when the CI excludes 0."""
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    out: dict[str, Any] = {"n": n, "mean": mean, "stdev": sd, "confidence": 1 - alpha, "contrasts": d.tolist()}
    tol = _RESOLUTION * max(scale, 1e-300)
    if np.ptp(d) <= tol:
        zero = abs(mean) <= tol
        mean = 0.0 if zero else mean
        out.update(mean=mean, stdev=0.0 if zero else sd, ci_low=mean, ci_high=mean, p_value=1.0 if zero else 0.0,
                   t_stat=None, test="constant contrast")
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
            res = sps.ttest_1samp(d, 0.0)
        ci = res.confidence_interval(confidence_level=1 - alpha)
        out.update(ci_low=float(ci.low), ci_high=float(ci.high), p_value=float(res.pvalue),
                   t_stat=float(res.statistic), test="one-sample t")
    resolved = out["ci_low"] > 0 or out["ci_high"] < 0
    sign = (-1.0 if higher_is_better else 1.0) * mean
    out.update(resolved=resolved, direction=("worse" if sign > 0 else "better") if resolved else None)
    return out


# -- input: factors and cell configs -----------------------------------------------------------


def _parse_factor(spec: str | Mapping[str, Any], label: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """(typed overrides, 'k=v' texts, keys) of one factor given as a dict or 'k=v[,k=v]'."""
    flag = f"--{label.lower()}"
    if isinstance(spec, Mapping):
        if not spec:
            raise InvalidArgument(f"Factor {label} changes nothing: give at least one key, e.g. {flag} lr=0.2")
        return dict(spec), [], [str(k) for k in spec]
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgument(f"Expected factor {label} as KEY=VALUE[,KEY=VALUE] (e.g. {flag} lr=0.2) but got {spec!r}")
    items: list[str] = []
    for part in spec.split(","):
        if "=" in part or not items:
            items.append(part.strip())
        else:
            items[-1] += "," + part  # a value that holds a comma, e.g. a JSON list
    keys = [item.partition("=")[0].strip() for item in items]
    if any("=" not in item or not key for item, key in zip(items, keys)):
        raise InvalidArgument(f"Expected factor {label} as KEY=VALUE[,KEY=VALUE] (e.g. {flag} lr=0.2) but got {spec!r}")
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise InvalidArgument(f"Factor {label} sets {', '.join(repeated)} more than once in {spec!r}; give each key once")
    return {}, items, keys


def _describe_factor(spec: str | Mapping[str, Any]) -> str:
    return spec if isinstance(spec, str) else ",".join(f"{k}={v}" for k, v in spec.items())


def _cell_configs(workload: Workload, base: dict[str, Any], factors: dict[str, tuple[dict[str, Any], list[str], list[str]]],
                  specs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The four cells' full configs: the base, then each factor's changes on top of it."""
    def apply(*labels: str) -> dict[str, Any]:
        overrides, texts = dict(base), []
        for label in labels:
            overrides.update(factors[label][0])
            texts += factors[label][1]
        try:
            return workload.config(overrides, texts)
        except InvalidArgument as exc:
            raise InvalidArgument(f"In factor {' and '.join(labels)} ({'; '.join(specs[x] for x in labels)}): {exc}") from None

    return {"base": dict(base), "A": apply("A"), "B": apply("B"), "AB": apply("A", "B")}


def _changes(base: dict[str, Any], cell: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [base.get(k), v] for k, v in cell.items() if k not in base or base[k] != v}


def _validate(workload: Workload, a: Any, b: Any, sets: list[str] | None, config: dict[str, Any] | None,
              seeds: Any, alpha: float) -> tuple[list[int], dict[str, dict[str, Any]], dict[str, str]]:
    if not 0 < alpha < 1:
        raise InvalidArgument(f"Expected alpha in (0, 1) but got {alpha}")
    seed_list = parse_seeds(seeds)
    if len(seed_list) < 2:
        raise InvalidArgument(f"Expected at least 2 seeds for a factorial (per-seed contrasts need a spread) "
                              f"but got {seed_list}; pass e.g. --seeds 0-11")
    factors = {"A": _parse_factor(a, "A"), "B": _parse_factor(b, "B")}
    specs = {"A": _describe_factor(a), "B": _describe_factor(b)}
    both = sorted(set(factors["A"][2]) & set(factors["B"][2]))
    if both:
        raise InvalidArgument(f"Factors A ({specs['A']}) and B ({specs['B']}) both set {', '.join(both)}; a 2x2 design "
                              "needs two separate changes: keep each key in one factor")
    base = workload.config(config, sets)
    cfgs = _cell_configs(workload, base, factors, specs)
    for label in ("A", "B"):
        if not _changes(base, cfgs[label]):
            now = ", ".join(f"{k}={base.get(k)!r}" for k in factors[label][2])
            raise InvalidArgument(f"Factor {label} ({specs[label]}) changes nothing: the base config already has {now}; "
                                  "give a value that differs")
    return seed_list, cfgs, specs


# -- the experiment ----------------------------------------------------------------------------


def factorial(target: str | Workload, a: str | Mapping[str, Any], b: str | Mapping[str, Any],
              seeds: str | Sequence[int], *, sets: list[str] | None = None, config: dict[str, Any] | None = None,
              metric: str = "val_loss", store: Store | str | os.PathLike[str] | None = None, alpha: float = 0.05,
              progress: bool = False) -> Factorial:
    """Run base, A, B and AB as sweeps of ``target`` at the shared ``seeds`` and report the main
    effects of A and B and their interaction on ``metric``.

    ``a``/``b`` are changes on top of the base config (``config`` then ``sets``): 'k=v[,k=v]' or a
    dict. Runs are recorded in ``store`` and reused. Everything is validated before the store opens.
    """
    workload = target if isinstance(target, Workload) else resolve(target)
    if not isinstance(metric, str) or not metric.strip():
        raise InvalidArgument(f"Expected a metric name (e.g. val_loss) but got {metric!r}")
    seed_list, cfgs, specs = _validate(workload, a, b, sets, config, seeds, alpha)
    owned = not isinstance(store, Store)
    st = Store(store) if owned else store
    try:
        results = {cell: sweep(workload, seed_list, config=cfgs[cell], store=st, progress=progress)  # type: ignore[arg-type]
                   for cell in CELLS}
    finally:
        if owned:
            st.close()  # type: ignore[union-attr]
    return _analyse(workload, results, cfgs, specs, metric, alpha, seed_list)


def _check_metric(results: dict[str, SweepResult], metric: str) -> None:
    for cell, res in results.items():
        missing = [r.seed for r in res.records if metric not in r.final]
        if missing:
            known = sorted(set().union(*(r.final for r in res.records)))
            raise NotFound(f"Metric {metric!r} is not recorded in cell {cell} (sweep {res.sweep.name!r}, seeds "
                           f"{missing[:5]}); recorded metrics: {', '.join(known)}; pass --metric NAME")


def _analyse(workload: Workload, results: dict[str, SweepResult], cfgs: dict[str, dict[str, Any]],
             specs: dict[str, str], metric: str, alpha: float, requested: list[int]) -> Factorial:
    _check_metric(results, metric)
    by_seed = {cell: {r.seed: r.final[metric] for r in res.records} for cell, res in results.items()}
    shared = sorted(set.intersection(*(set(v) for v in by_seed.values())))
    hib = higher_is_better(metric, [r for res in results.values() for r in res.records])
    cells = {cell: _cell_summary(results[cell], cfgs["base"], cfgs[cell], by_seed[cell], shared) for cell in CELLS}
    details: dict[str, Any] = {
        "workload": workload.target, "metric": metric, "higher_is_better": hib, "alpha": alpha,
        "seeds": shared, "requested_seeds": requested, "base_config": cfgs["base"],
        "factors": {x: {"spec": specs[x], "changes": _changes(cfgs["base"], cfgs[x])} for x in ("A", "B")},
        "cells": cells, "effects": {}, "simple_effects": {}, "resolved": [],
        "code_versions": sorted({str(res.sweep.info.get("code", {}).get("version")) for res in results.values()}),
    }
    findings = _setup_findings(workload, results, details)
    if len(shared) < 2:
        reason = (f"only {len(shared)} seed(s) ran successfully in all four cells; per-seed contrasts need 2 or more: "
                  "fix the failing runs (see the sweep findings) and rerun")
        details["summary"] = summary(details)
        return Factorial("factorial", Status.SKIPPED, findings=tuple(findings), reason=reason,
                         side_effects="none (runs recorded in the store)", details=details)
    values = {cell: np.array([by_seed[cell][s] for s in shared], dtype=np.float64) for cell in CELLS}
    scale = float(max(np.abs(v).max() for v in values.values()))
    all_effects = {k: effect(d, alpha=alpha, scale=scale, higher_is_better=hib) for k, d in contrasts(values).items()}
    details["effects"] = {k: all_effects[k] for k in EFFECTS}
    details["simple_effects"] = {k: v for k, v in all_effects.items() if k not in EFFECTS}
    details["resolved"] = [k for k in EFFECTS if all_effects[k]["resolved"]]
    details["summary"] = summary(details)
    findings = _effect_findings(details) + findings
    status = Status.WARN if any(f.status is Status.WARN for f in findings) else Status.PASS
    return Factorial("factorial", status, findings=tuple(findings), side_effects="none (runs recorded in the store)",
                     details=details)


def _cell_summary(res: SweepResult, base: dict[str, Any], cfg: dict[str, Any], values: dict[int, float],
                  shared: list[int]) -> dict[str, Any]:
    from .stats import describe

    return {"sweep": res.sweep.name, "sweep_id": res.sweep.id, "changes": _changes(base, cfg),
            "ran": len(res.ran), "reused": len(res.reused), "failed": [r.seed for r in res.failed],
            **describe([values[s] for s in shared]), "values": [values[s] for s in shared]}


def _effect_findings(details: dict[str, Any]) -> list[Finding]:
    out = []
    conf = f"{1 - details['alpha']:.0%}"
    for name, e in details["effects"].items():
        where = "interaction A x B" if name == "interaction" else f"main effect {name}"
        state = f"RESOLVED ({e['direction']})" if e["resolved"] else "not resolved"
        p = "-" if e["p_value"] is None else f"{e['p_value']:.3g}"
        msg = (f"mean {e['mean']:+.4g} over {e['n']} seeds, stdev {e['stdev']:.3g}, {conf} CI "
               f"[{e['ci_low']:+.4g}, {e['ci_high']:+.4g}], p={p}: {state}")
        evidence = {k: v for k, v in e.items() if k != "contrasts"}
        out.append(Finding(where, e["test"], Status.WARN if e["resolved"] else Status.PASS, msg, evidence))
    return out


def _setup_findings(workload: Workload, results: dict[str, SweepResult], details: dict[str, Any]) -> list[Finding]:
    """Warnings about the design itself: failed runs, factors that change the measurement, drift."""
    out = []
    for cell, res in results.items():
        if res.failed:
            seeds = [r.seed for r in res.failed]
            out.append(Finding(f"cell {cell}", "runs", Status.WARN,
                               f"{len(seeds)} run(s) failed (seeds {seeds[:8]}): {res.failed[0].error}; "
                               "the effects use only seeds that ran in all four cells", {"failed": seeds}))
    for label in ("A", "B"):
        touched = sorted(set(details["factors"][label]["changes"]) & set(workload.spec.eval_keys))
        if touched:
            out.append(Finding(f"factor {label}", "eval path", Status.WARN,
                               f"changes {', '.join(touched)}, which defines the measurement: its 'effect' is a change "
                               "of what is measured, not of the trained system", {"eval_keys": touched}))
    if len(details["code_versions"]) > 1:
        out.append(Finding("cells", "code version", Status.WARN,
                           f"the cells ran under {len(details['code_versions'])} code versions "
                           f"({', '.join(details['code_versions'])}): files changed while the experiment ran; "
                           "rerun it with the tree unchanged", {"versions": details["code_versions"]}))
    return out


def summary(details: dict[str, Any]) -> str:
    """One line: which effects are resolved, their direction, and what the interaction means."""
    effects = details["effects"]
    if not effects:
        return "no effects: fewer than 2 seeds ran in all four cells"
    parts = [f"{k} {effects[k]['direction']} ({effects[k]['mean']:+.4g})"
             for k in ("A", "B") if effects[k]["resolved"]]
    head = ("resolved: " + ", ".join(parts)) if parts else f"no main effect resolved at {len(details['seeds'])} seeds"
    inter = effects["interaction"]
    if inter["resolved"]:
        tail = (f"interaction resolved ({inter['mean']:+.4g}: together {inter['direction']} than the sum of the "
                "separate changes); read the simple effects, not the main effects alone")
    else:
        tail = "interaction not resolved: the changes act additively at this resolution"
    return f"{head}; {tail}"
