"""Curves, not endpoints (chapter 14, E8): where two sweeps' per-epoch trajectories separate, and
how they compare under a checkpoint-selection policy declared before the runs.

Equal-looking endpoints can hide different trajectories, and the best epoch of a run is a post-hoc
minimum: a run with a longer budget gets more chances at a low point. So the report gives the
per-epoch bands of both sides, the epoch from which their paired per-epoch deltas are resolved and
stay resolved, and the comparison of the checkpoints a declared policy would have kept.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgument, NotFound
from ..report import Divergence, Finding, Report, Status
from . import stats
from .compare import CHANGED, Side, higher_is_better, identity, load_side
from .policy import FORMS_HELP, Policy, parse_policy
from .stats import bands
from .store import Store, SweepInfo

#: seed -> the metric's value at each epoch
Curves = dict[int, list[float]]
LAST, BEST = Policy("last"), Policy("best")
SIDES = ("baseline", "candidate")


class CurveComparison(Report):
    """A Report whose ``details`` hold per-epoch bands, the separation, and the policy comparison."""

    @property
    def separation(self) -> dict[str, Any]:
        return self.details["separation"]

    @property
    def policy(self) -> dict[str, Any]:
        return self.details["policy"]

    @property
    def selected(self) -> dict[str, Any]:
        return self.details["selected"]

    @property
    def endpoints(self) -> dict[str, Any]:
        return self.details["endpoints"]

    @property
    def verdict(self) -> dict[str, Any]:
        return self.details["verdict"]

    def __rich_body__(self) -> Any:
        from ..render.experiments import render_curves_body

        return render_curves_body(self)


# -- per-epoch statistics: pure functions over {seed: curve} -----------------------------------


def _direction(delta: float | None, resolved: bool, hib: bool) -> str | None:
    if not resolved or not delta:
        return None
    return "worse" if (delta < 0) == hib else "better"


def _row(epoch: int, test: dict[str, Any], alpha: float, hib: bool) -> dict[str, Any]:
    resolved = test["p_value"] is not None and test["p_value"] < alpha
    return {"epoch": epoch, "mean_delta": test["mean_delta"], "ci_low": test["ci_low"], "ci_high": test["ci_high"],
            "p_value": test["p_value"], "resolved": resolved, "direction": _direction(test["mean_delta"], resolved, hib)}


def per_epoch(base: Curves, cand: Curves, *, hib: bool, alpha: float,
              rng: np.random.Generator) -> tuple[str, list[dict[str, Any]]]:
    """(design, rows): candidate - baseline at each epoch both sides reached. Paired t on the
    shared seeds when there are two or more; otherwise unpaired (Welch t across runs)."""
    shared = sorted(set(base) & set(cand))
    if len(shared) >= 2:
        n = min(min(len(base[s]), len(cand[s])) for s in shared)
        return "paired", [_row(e, stats.paired([base[s][e] for s in shared], [cand[s][e] for s in shared],
                                                higher_is_better=hib, confidence=1 - alpha), alpha, hib)
                          for e in range(n)]
    reach = [sorted(len(c) for c in side.values())[-2] if len(side) > 1 else 0 for side in (base, cand)]
    rows = []
    for e in range(min(reach)):  # epochs that at least two runs of each side reached
        test = stats.unpaired([c[e] for c in base.values() if len(c) > e], [c[e] for c in cand.values() if len(c) > e],
                              rng=rng, confidence=1 - alpha)
        rows.append(_row(e, test, alpha, hib))
    return "unpaired", rows


def separation(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """First resolved epoch, the epoch from which the rows stay resolved in one direction to the
    last compared epoch (None when the last is not resolved), and the largest mean delta."""
    resolved = [r["epoch"] for r in rows if r["resolved"]]
    out: dict[str, Any] = {"epochs_compared": len(rows), "resolved_epochs": resolved,
                           "first_resolved": resolved[0] if resolved else None, "from_epoch": None, "direction": None,
                           "largest": None}
    if rows and rows[-1]["resolved"]:
        i = len(rows) - 1
        while i > 0 and rows[i - 1]["resolved"] and rows[i - 1]["direction"] == rows[-1]["direction"]:
            i -= 1
        out.update(from_epoch=rows[i]["epoch"], direction=rows[-1]["direction"])
    if rows:
        out["largest"] = dict(max(rows, key=lambda r: abs(r["mean_delta"] or 0.0)))
    return out


def select(curves: Curves, policy: Policy, *, hib: bool, budget: int | None = None) -> dict[int, tuple[int, float]]:
    """Per seed, the (epoch, value) ``policy`` keeps, optionally from the first ``budget`` epochs."""
    return {s: policy.select(c[:budget] if budget else c, higher_is_better=hib) for s, c in curves.items()}


def compare_selected(sb: dict[int, tuple[int, float]], sc: dict[int, tuple[int, float]], *, hib: bool, alpha: float,
                     rng: np.random.Generator) -> dict[str, Any]:
    """The selected values compared: paired on shared seeds (two or more), else unpaired."""
    shared = sorted(set(sb) & set(sc))
    if len(shared) >= 2:
        design = "paired"
        test = stats.paired([sb[s][1] for s in shared], [sc[s][1] for s in shared], higher_is_better=hib,
                            confidence=1 - alpha)
    else:
        design = "unpaired"
        test = stats.unpaired([v for _, v in sb.values()], [v for _, v in sc.values()], rng=rng, confidence=1 - alpha)
    resolved = test["p_value"] is not None and test["p_value"] < alpha
    side = {name: {"seeds": list(sel), "epochs": [e for e, _ in sel.values()], "values": [v for _, v in sel.values()],
                   "value": stats.describe([v for _, v in sel.values()]),
                   "epoch": stats.describe([e for e, _ in sel.values()])} for name, sel in zip(SIDES, (sb, sc))}
    return {"design": design, "test": test, "mean_delta": test["mean_delta"], "resolved": resolved,
            "direction": _direction(test["mean_delta"], resolved, hib), **side}


def _shape(band: list[dict[str, float]], hib: bool) -> dict[str, Any]:
    med = [b["median"] for b in band]
    i = int(np.argmax(med) if hib else np.argmin(med))
    return {"best_epoch": i, "best_value": med[i], "final_epoch": len(med) - 1, "final_value": med[-1]}


# -- policy and budgets ------------------------------------------------------------------------


def _policies(base: Side, cand: Side, override: Policy | None) -> dict[str, Any]:
    """Which policy reads each side, and whether it was declared before the runs."""
    declared = {"baseline": base.info.get("checkpoint_policy"), "candidate": cand.info.get("checkpoint_policy")}
    before = {"baseline": base.info.get("declared_before"), "candidate": cand.info.get("declared_before")}
    post_hoc = False
    if override is not None:
        post_hoc = any(d != str(override) for d in declared.values())
        used, source = {k: override for k in SIDES}, "override" if post_hoc else "declared"
    elif all(declared.values()):
        used, source = {k: parse_policy(v) for k, v in declared.items()}, "declared"
    elif any(declared.values()):
        who = "baseline" if declared["baseline"] else "candidate"
        used, source = {k: parse_policy(declared[who]) for k in SIDES}, f"declared by the {who} only"
    else:
        used, source = {k: LAST for k in SIDES}, "default"
    return {"used": used, "source": source, "post_hoc": post_hoc, "declared": declared, "declared_before": before}


def _budget(cb: Curves, cc: Curves, used: dict[str, Policy], hib: bool, alpha: float,
            rng: np.random.Generator) -> dict[str, Any]:
    """Epoch budgets of both sides. When they differ, best-epoch selection (the verdict's policy if it
    is post-hoc best, else the endpoints' best row) re-applied to the first ``matched_epochs`` epochs
    of every run, the budget both sides had, and how many seeds chose an epoch past it."""
    lengths = {"baseline": sorted({len(c) for c in cb.values()}), "candidate": sorted({len(c) for c in cc.values()})}
    equal = lengths["baseline"] == lengths["candidate"] and len(lengths["baseline"]) == 1
    out: dict[str, Any] = {"epochs": lengths, "equal": equal, "matched_epochs": None, "matched": None, "beyond": None,
                           "affects_verdict": False}
    if equal:
        return out
    verdict = any(p.kind == "best" and p.patience is None for p in used.values())  # post-hoc best decides
    pols = used if verdict else {k: BEST for k in SIDES}
    m = min(lengths["baseline"] + lengths["candidate"])
    full = {k: select(c, pols[k], hib=hib) for k, c in zip(SIDES, (cb, cc))}
    out.update(matched_epochs=m, affects_verdict=verdict, beyond={k: sum(e >= m for e, _ in full[k].values()) for k in SIDES},
               matched=compare_selected(select(cb, pols["baseline"], hib=hib, budget=m),
                                        select(cc, pols["candidate"], hib=hib, budget=m), hib=hib, alpha=alpha, rng=rng))
    return out


# -- the comparison ----------------------------------------------------------------------------


def curves(baseline: Any, candidate: Any, *, metric: str = "val_loss", policy: str | Policy | None = None,
           store: Store | str | os.PathLike[str] | None = None, alpha: float = 0.05) -> CurveComparison:
    """Compare the per-epoch ``metric`` curves of two sweeps (names, SweepResults or record lists).

    ``policy`` ('last', 'best', 'best:patience=N') overrides the checkpoint policy the sweeps
    declared before their runs; the report then warns that it was chosen after the runs existed.
    """
    if not 0 < alpha < 1:
        raise InvalidArgument(f"Expected alpha in (0, 1) but got {alpha}")
    if policy is not None and not isinstance(policy, (str, Policy)):
        raise InvalidArgument(f"Expected policy as {FORMS_HELP} but got {type(policy).__name__}")
    override = parse_policy(policy) if isinstance(policy, str) else policy
    owned = any(isinstance(ref, (str, SweepInfo)) for ref in (baseline, candidate)) and not isinstance(store, Store)
    st = Store(store, create=False) if owned else store
    try:
        base, cand = load_side(baseline, st, "baseline"), load_side(candidate, st, "candidate")  # type: ignore[arg-type]
    finally:
        if owned:
            st.close()  # type: ignore[union-attr]
    cb, cc = _curves(base, metric, "baseline"), _curves(cand, metric, "candidate")
    return _build(base, cand, cb, cc, metric, override, alpha)


def _curves(side: Side, metric: str, label: str) -> Curves:
    records = [r for r in side.records if r.ok]
    if not records:
        raise NotFound(f"Sweep {side.name!r} has no successful runs to compare; run it with `firstdiv sweep`")
    missing = [r.seed for r in records if not r.curves.get(metric)]
    if missing:
        known = sorted(set().union(*(r.curves for r in records)))
        raise NotFound(f"Metric {metric!r} has no per-epoch curve in sweep {side.name!r} (seeds {missing[:5]}); "
                       f"recorded curves: {', '.join(known) or 'none'}; pass --metric NAME")
    out: Curves = {}
    for r in records:
        if r.seed in out:
            raise InvalidArgument(f"The {label} holds two runs of seed {r.seed}; pass one run per seed")
        out[r.seed] = [float(v) for v in r.curves[metric]]
    return out


def _build(base: Side, cand: Side, cb: Curves, cc: Curves, metric: str, override: Policy | None,
           alpha: float) -> CurveComparison:
    rng = np.random.default_rng(0)
    hib = higher_is_better(metric, base.records + cand.records)
    design, rows = per_epoch(cb, cc, hib=hib, alpha=alpha, rng=rng)
    pol = _policies(base, cand, override)
    used = pol["used"]
    band = {"baseline": bands(cb), "candidate": bands(cc)}
    ident = identity(base.records, cand.records)
    selected = compare_selected(select(cb, used["baseline"], hib=hib), select(cc, used["candidate"], hib=hib),
                                hib=hib, alpha=alpha, rng=rng)
    details: dict[str, Any] = {
        "metric": metric, "higher_is_better": hib, "alpha": alpha, "baseline_name": base.name,
        "candidate_name": cand.name, "design": design, "shared_seeds": sorted(set(cb) & set(cc)),
        "seeds": {"baseline": sorted(cb), "candidate": sorted(cc)},
        "identity": {k: v["state"] for k, v in ident.items()},
        "eval_fields_changed": sorted(ident["eval_fingerprint"]["fields"]),
        "bands": band, "shape": {k: _shape(band[k], hib) for k in SIDES},
        "per_epoch": rows, "separation": separation(rows),
        "policy": {**pol, "used": {k: str(p) for k, p in used.items()}},
        "selected": selected,
        "endpoints": {name: compare_selected(select(cb, p, hib=hib), select(cc, p, hib=hib), hib=hib, alpha=alpha,
                                             rng=rng) for name, p in (("last", LAST), ("best", BEST))},
        "budget": _budget(cb, cc, used, hib, alpha, rng),
    }
    details["verdict"] = _verdict(details)
    findings = _findings(details)
    div = _divergence(details)
    status = Status.WARN if div is not None or any(f.status is Status.WARN for f in findings) else Status.PASS
    return CurveComparison("curves", status, div, tuple(findings), side_effects="none (read-only)", details=details)


def _policy_name(details: dict[str, Any]) -> str:
    used = details["policy"]["used"]
    return used["baseline"] if used["baseline"] == used["candidate"] else f"{used['baseline']} vs {used['candidate']}"


def _verdict(d: dict[str, Any]) -> dict[str, Any]:
    s = d["selected"]
    t = s["test"]
    n = len(d["shared_seeds"]) if s["design"] == "paired" else min(len(v) for v in d["seeds"].values())
    if s["resolved"]:
        text = f"under {_policy_name(d)}: the candidate is {s['direction']} (mean delta {s['mean_delta']:+.4g})"
    else:
        text = f"under {_policy_name(d)}: no difference resolved at {n} {'shared ' if s['design'] == 'paired' else ''}seeds"
    return {"policy": _policy_name(d), "post_hoc": d["policy"]["post_hoc"], "design": s["design"],
            "resolved": s["resolved"], "direction": s["direction"], "mean_delta": s["mean_delta"],
            "ci_low": t["ci_low"], "ci_high": t["ci_high"], "p_value": t["p_value"], "text": text}


def _divergence(d: dict[str, Any]) -> Divergence | None:
    sep = d["separation"]
    if sep["first_resolved"] is None:
        return None
    row = d["per_epoch"][sep["first_resolved"]]
    persists = (f"it persists from epoch {sep['from_epoch']} to the last shared epoch {sep['epochs_compared'] - 1}"
                if sep["from_epoch"] is not None else "it does not persist to the last shared epoch")
    return Divergence(f"epoch {row['epoch']}", f"curves.separated.{row['direction']}", "per-epoch delta within seed noise",
                      f"mean delta {row['mean_delta']:+.4g}, CI [{row['ci_low']:+.4g}, {row['ci_high']:+.4g}]",
                      f"the trajectories separate here; {persists}")


def _findings(d: dict[str, Any]) -> list[Finding]:
    """Every check, in reading order: measurement, trajectories, endpoints, policy, budget, verdict."""
    out: list[Finding] = []
    if d["identity"]["eval_fingerprint"] == CHANGED:
        out.append(Finding("eval_fingerprint", "identity", Status.WARN,
                           f"the sides were evaluated differently ({', '.join(d['eval_fields_changed'])}): curve "
                           "differences may be the measurement, not the system", {"fields": d["eval_fields_changed"]}))
    out.append(_separation_finding(d))
    out += _endpoint_findings(d) + _policy_findings(d) + _budget_findings(d)
    v, conf = d["verdict"], f"{1 - d['alpha']:.0%}"
    ci = "" if v["ci_low"] is None else f", {conf} CI [{v['ci_low']:+.4g}, {v['ci_high']:+.4g}]"
    out.append(Finding(f"checkpoint policy {v['policy']}", f"{v['design']} selected values",
                       Status.WARN if v["resolved"] else Status.PASS, v["text"] + ci,
                       {k: v[k] for k in ("mean_delta", "ci_low", "ci_high", "p_value", "resolved", "direction")}))
    return out


def _separation_finding(d: dict[str, Any]) -> Finding:
    sep, n = d["separation"], d["separation"]["epochs_compared"]
    head = "" if d["design"] == "paired" else "seeds do not match: unpaired per-epoch Welch t across runs (weaker); "
    if not sep["resolved_epochs"]:
        return Finding("per epoch", f"{d['design']} delta per epoch", Status.PASS,
                       f"{head}no epoch of {n} resolves a difference", {"epochs_compared": n})
    big = sep["largest"]
    persists = (f"separated from epoch {sep['from_epoch']} to the last shared epoch {n - 1} ({sep['direction']})"
                if sep["from_epoch"] is not None else "the separation does not persist to the last shared epoch")
    msg = (f"{head}resolved at {len(sep['resolved_epochs'])}/{n} epochs, first at epoch {sep['first_resolved']}; "
           f"{persists}; largest at epoch {big['epoch']}: {big['mean_delta']:+.4g}")
    return Finding("per epoch", f"{d['design']} delta per epoch", Status.WARN, msg,
                   {k: sep[k] for k in ("first_resolved", "from_epoch", "direction", "epochs_compared")})


def _endpoint_findings(d: dict[str, Any]) -> list[Finding]:
    last, sep = d["endpoints"]["last"], d["separation"]
    if last["resolved"] or not sep["resolved_epochs"]:
        return []
    big = sep["largest"]
    return [Finding("endpoints", "last epoch vs trajectory", Status.WARN,
                    f"equal endpoints hide different trajectories: the last epochs differ by {last['mean_delta']:+.4g} "
                    f"(not resolved) but {len(sep['resolved_epochs'])}/{sep['epochs_compared']} shared epochs differ "
                    f"resolvably (epochs {_spans(sep['resolved_epochs'])}), most at epoch {big['epoch']} "
                    f"({big['mean_delta']:+.4g})",
                    {"last_delta": last["mean_delta"], "resolved_epochs": sep["resolved_epochs"]})]


def _policy_findings(d: dict[str, Any]) -> list[Finding]:
    p = d["policy"]
    declared = ", ".join(f"{k} {v or 'none'}" for k, v in p["declared"].items())
    out = []
    if p["post_hoc"]:
        out.append(Finding("checkpoint policy", "declared before the runs", Status.WARN,
                           f"policy {p['used']['baseline']} was chosen after the runs existed (declared: {declared}); "
                           "a rule picked after seeing the curves can fit the outcome: declare it with "
                           f"`firstdiv sweep --checkpoint-policy {p['used']['baseline']}` before the runs",
                           {"declared": p["declared"]}))
    elif p["source"] == "declared" and p["used"]["baseline"] != p["used"]["candidate"]:
        out.append(Finding("checkpoint policy", "same rule on both sides", Status.WARN,
                           f"the sides declared different policies ({declared}): each is read under its own, so the "
                           "comparison mixes selection rules; pass --policy to read both under one", p["declared"]))
    elif p["source"] == "default":
        out.append(Finding("checkpoint policy", "declared before the runs", Status.PASS,
                           "no policy declared: reading the last epoch, the endpoint compare uses", {}))
    late = [k for k, v in p["declared_before"].items() if v is False and p["declared"][k]]
    if late and not p["post_hoc"]:
        out.append(Finding("checkpoint policy", "declared before the runs", Status.WARN,
                           f"{' and '.join(late)}: the policy was declared after some of the runs already existed "
                           "(they could have informed it); declare it under a new --name before any run",
                           {"declared_before": p["declared_before"]}))
    return out


def _budget_findings(d: dict[str, Any]) -> list[Finding]:
    b = d["budget"]
    if b["matched"] is None:
        return []
    e, m, n = b["epochs"], b["matched"], b["matched_epochs"]
    longer = max(SIDES, key=lambda k: max(e[k]))
    conf = f"{1 - d['alpha']:.0%}"
    ci = "" if m["test"]["ci_low"] is None else f", {conf} CI [{m['test']['ci_low']:+.4g}, {m['test']['ci_high']:+.4g}]"
    what = ("the verdict compares best epochs" if b["affects_verdict"] else
            f"the endpoints' best row compares post-hoc per-seed best epochs (the verdict under {_policy_name(d)} does not)")
    msg = (f"{what} over unequal budgets (baseline {_epochs(e['baseline'])}, candidate {_epochs(e['candidate'])} "
           f"epochs): the longer run gets more chances at a low point; the {longer}'s best epoch is past epoch {n - 1} in "
           f"{b['beyond'][longer]}/{len(d['seeds'][longer])} seeds; within the first {n} epochs the delta is "
           f"{m['mean_delta']:+.4g}{ci} ({'resolved, ' + str(m['direction']) if m['resolved'] else 'not resolved'}); "
           "declare best:patience=N before the runs or compare equal budgets")
    return [Finding("epoch budget", "best epoch across unequal budgets", Status.WARN, msg,
                    {"epochs": e, "matched_epochs": n, "beyond": b["beyond"], "affects_verdict": b["affects_verdict"],
                     "matched_delta": m["mean_delta"], "matched_resolved": m["resolved"]})]


def _spans(epochs: list[int]) -> str:
    """[0, 2, 3, 4, 9] -> '0, 2-4, 9'."""
    spans: list[list[int]] = []
    for e in epochs:
        if spans and e == spans[-1][1] + 1:
            spans[-1][1] = e
        else:
            spans.append([e, e])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _epochs(lengths: list[int]) -> str:
    return "/".join(map(str, lengths))
