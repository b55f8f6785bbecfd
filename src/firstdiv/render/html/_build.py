"""Page contexts: what each page shows, as plain strings, numbers and (already safe) SVG markup.

Nothing here computes a statistic and nothing here imports the lab: the numbers come from the objects
(``SweepResult.summary``, ``SweepResult.bands``, ``Comparison.details``) and the instruments' reports.
Every user string stays a plain ``str`` here and is escaped by the templates (autoescape); only the SVG
from :mod:`._plots` is marked safe.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

from ..._book import PAGE_WORKSHEET
from ..._format import fmt, seed_ranges
from ..._secrets import scrub_text
from ...report import Report, Status
from . import _plots

MAX_ROWS = 200  # runs listed in a table; the plots always use every run
MAX_FIGURES = 12  # curves or metrics plotted per section; the rest are named
MAX_DETAILS = 200_000  # characters of a report's details shown as JSON
IDENTITY_LABELS = {"config": "config", "code": "code version", "data": "data identity",
                   "eval_fingerprint": "eval fingerprint", "env": "environment"}


def _figure(title: str, svg: str, caption: str = "") -> dict[str, Any]:
    # The one string marked safe: _plots strips the prolog/comments/metadata and refuses unsafe markup.
    return {"title": title, "svg": Markup(svg), "caption": caption}


def _values(records: Sequence[Any], metric: str) -> tuple[list[int], list[float]]:
    pairs = [(r.seed, r.final[metric]) for r in records if metric in r.final]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _curve_names(records: Sequence[Any]) -> list[str]:
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(k for k, v in r.curves.items() if v))
    return list(names)


def _capped(names: list[str]) -> tuple[list[str], list[str]]:
    return names[:MAX_FIGURES], names[MAX_FIGURES:]


# -- sweep -------------------------------------------------------------------------------------


def sweep_context(result: Any) -> dict[str, Any]:
    s, records = result.sweep, result.records
    summary = result.summary()
    metrics, more_metrics = _capped([m for m in result.metrics if summary.get(m, {}).get("n")])
    curves, more_curves = _capped(_curve_names(records))
    strips = [_figure(m, _plots.strip_plot([(s.name, *_values(records, m), _plots.SINGLE)], m)) for m in metrics]
    bands = [_figure(c, _plots.curve_plot([(s.name, result.bands(c), _plots.SINGLE)], c)) for c in curves]
    return {
        "kind": "sweep", "title": f"Sweep {s.name}", "name": s.name, "sweep_id": s.id,
        "status": Status.FAIL.value if result.failed else Status.PASS.value,
        "n_runs": len(records), "seeds": seed_ranges([r.seed for r in records]), "store": result.store_path,
        "declared_seeds": seed_ranges(s.seeds), "identity": sweep_identity(s.to_dict(), records),
        "noise_floor": [{"metric": m, **summary[m]} for m in result.metrics if summary.get(m, {}).get("n")],
        "strips": strips, "more_metrics": more_metrics, "curves": bands, "more_curves": more_curves,
        "runs": _run_rows(records, result.metrics), "runs_hidden": max(0, len(records) - MAX_ROWS),
        "run_metrics": result.metrics,
        # scrubbed here too: the result in memory, and stores written before errors were scrubbed on the way in
        "failed": [{"seed": r.seed, "error": scrub_text(r.error) if r.error else "failed"} for r in result.failed],
    }


def sweep_identity(info: dict[str, Any], records: Sequence[Any]) -> list[dict[str, Any]]:
    """Rows (label, value, nested key/value pairs) naming everything that makes two runs interchangeable."""
    data_ids = sorted({str(r.data_identity) for r in records if r.data_identity is not None})
    fps = sorted({str(r.eval_fingerprint) for r in records if r.eval_fingerprint is not None})
    contract = next((r.eval_contract for r in records if r.eval_contract), None) or {}
    code = info.get("code") or {}
    rows = [
        _row("workload", info.get("workload")),
        _row("sweep", f"{info.get('name')}  (id {info.get('id')}, identity {info.get('identity')})"),
        _row("config", f"hash {info.get('config_hash')}", info.get("config") or {}),
        _row("code version", code.get("version"), {k: v for k, v in code.items() if k != "version"}),
        _row("data identity", ", ".join(data_ids) if data_ids else "not recorded (rec.data_identity(...) records it)"),
        _row("eval fingerprint", ", ".join(fps) if fps else "not recorded (rec.eval_contract(...) records it)", contract),
        _row("environment", f"hash {info.get('env_hash')}", info.get("env") or {}),
    ]
    for key in ("hypothesis", "success", "checkpoint_policy"):
        if info.get(key):
            rows.append(_row(key.replace("_", " "), scrub_text(str(info[key]))))
    rows.append(_row("created", info.get("created")))
    return rows


def _row(label: str, value: Any, pairs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"label": label, "value": fmt(value), "pairs": [(str(k), fmt(v)) for k, v in (pairs or {}).items()]}


def _run_rows(records: Sequence[Any], metrics: list[str]) -> list[dict[str, Any]]:
    return [{"seed": r.seed, "values": [fmt(r.final.get(m)) for m in metrics], "eval_fingerprint": r.eval_fingerprint or "–",
             "created": r.created} for r in records[:MAX_ROWS]]


# -- comparison --------------------------------------------------------------------------------


def comparison_context(c: Any, baseline: Any = None, candidate: Any = None) -> dict[str, Any]:
    """A Comparison's page; with both sides' SweepResults, their distributions and curves too."""
    from ..sweeps import _stats_lines, _verdict_line

    d = c.details
    metric = d["metric"]
    ctx = report_page(c)
    sentence = _verdict_line(d).plain.removeprefix("VERDICT").strip().removeprefix(d["verdict"]).strip()
    sentence = sentence.removeprefix(f"({d['direction']})").lstrip(": ")
    ctx.update({
        "kind": "comparison", "title": f"Comparison {d['baseline_name']} → {d['candidate_name']} on {metric}",
        "verdict": d["verdict"], "direction": d["direction"], "verdict_sentence": sentence,
        "baseline_name": d["baseline_name"], "candidate_name": d["candidate_name"], "metric": metric,
        "better": "higher" if d["higher_is_better"] else "lower", "design": d["design"],
        "shared_seeds": seed_ranges(d["shared_seeds"]), "n_shared": len(d["shared_seeds"]),
        "identity_rows": _identity_rows(d["identity_detail"]),
        "stats_lines": [t.plain.strip() for t in _stats_lines(d, metric)],
        "correctness": _correctness(d), "cost": d["cost"]["examples_per_s"], "declared": _declared(d["declared"]),
        "seeds_to_resolve": d["seeds_to_resolve"], "noise_floor": d["noise_floor"],
        "paired_plot": _paired_figure(d), "strips": [], "curves": [], "sides": baseline is not None and candidate is not None,
    })
    if baseline is not None and candidate is not None:
        ctx["strips"], ctx["curves"] = _side_figures(baseline, candidate, metric)
    return ctx


def _declared(declared: dict[str, Any] | None) -> dict[str, Any] | None:
    """The candidate's declared hypothesis and criterion, without secrets (a store may predate scrubbing)."""
    if not declared:
        return declared
    return {k: scrub_text(v) if k in ("hypothesis", "success") and isinstance(v, str) else v for k, v in declared.items()}


def _identity_rows(detail: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, label in IDENTITY_LABELS.items():
        v = detail[key]
        rows.append({"label": label, "state": v["state"], "baseline": fmt(v["baseline"]), "candidate": fmt(v["candidate"]),
                     "fields": [(str(k), fmt(a), fmt(b)) for k, (a, b) in v["fields"].items()]})
    return rows


def _correctness(d: dict[str, Any]) -> list[dict[str, Any]]:
    bm, cm = d["baseline"]["metrics"], d["candidate"]["metrics"]
    rows = []
    for name in [m for m in bm if m in cm]:
        b, k = bm[name], cm[name]
        rows.append({"metric": name, "compared": name == d["metric"], "baseline": b, "candidate": k,
                     "delta": k["median"] - b["median"] if b.get("n") and k.get("n") else None})
    return rows


def _paired_figure(d: dict[str, Any]) -> dict[str, Any] | None:
    p = d["paired"]
    if not p or not p["n"]:
        return None
    svg = _plots.paired_plot(d["shared_seeds"], p["deltas"], mean=p["mean_delta"], ci=(p["ci_low"], p["ci_high"]),
                             higher_is_better=d["higher_is_better"], metric=d["metric"],
                             floor=d["noise_floor"].get("spread") or 0.0)
    return _figure("paired deltas", svg, f"{p['worse']} of {p['n']} seeds worse, {p['better']} better, {p['ties']} tied; "
                   "the y axis spans at least the baseline's seed spread (the noise floor)")


def _side_figures(baseline: Any, candidate: Any, metric: str) -> tuple[list[Any], list[Any]]:
    bname, cname = f"baseline {baseline.sweep.name}", f"candidate {candidate.sweep.name}"
    shared = [m for m in baseline.metrics if m in set(candidate.metrics)]
    metrics, _ = _capped(sorted(shared, key=lambda m: m != metric))
    strips = [_figure(m, _plots.strip_plot([(bname, *_values(baseline.records, m), _plots.BASE),
                                            (cname, *_values(candidate.records, m), _plots.CAND)], m)) for m in metrics]
    cnames = [n for n in _curve_names(baseline.records) if n in set(_curve_names(candidate.records))]
    names, _ = _capped(sorted(cnames, key=lambda m: m != metric))
    curves = [_figure(n, _plots.curve_plot([(bname, baseline.bands(n), _plots.BASE),
                                            (cname, candidate.bands(n), _plots.CAND)], n)) for n in names]
    return strips, curves


# -- instrument reports ------------------------------------------------------------------------


def first_row(report: Report) -> int | None:
    """The findings row that is the first divergence: same place and kind, else same place, else the first FAIL."""
    div, findings = report.first_divergence, report.findings
    if div is None:
        return None
    for test in (lambda f: f.where == div.where and f.check == div.kind, lambda f: f.where == div.where,
                 lambda f: f.status is Status.FAIL):
        for i, f in enumerate(findings):
            if test(f):
                return i
    return None


def report_page(report: Report) -> dict[str, Any]:
    return {"kind": "report", "title": f"{report.instrument} report", "r": report_context(report)}


def report_context(report: Report) -> dict[str, Any]:
    """The parts every report page shows: status, first divergence, the findings ledger, side effects."""
    from .. import to_text

    div = report.first_divergence
    highlight = first_row(report)
    details = json.dumps(report.details, indent=1, default=str)
    return {
        "instrument": report.instrument,
        "status": report.status.value, "reason": report.reason, "side_effects": report.side_effects,
        "divergence": None if div is None else {"where": div.where, "kind": div.kind, "expected": fmt(div.expected, 4000),
                                                "observed": fmt(div.observed, 4000), "hint": div.hint},
        "findings": [{"where": f.where, "check": f.check, "status": f.status.value, "message": f.message,
                      "evidence": fmt(f.evidence, 600), "first": i == highlight} for i, f in enumerate(report.findings)],
        "first_index": None if highlight is None else highlight + 1,
        "n_fail": sum(f.status is Status.FAIL for f in report.findings),
        "n_warn": sum(f.status is Status.WARN for f in report.findings),
        "details": details if len(details) <= MAX_DETAILS else details[:MAX_DETAILS] + "\n… (cut; see to_json())",
        "text": to_text(report, width=110),
    }


# -- incidents ---------------------------------------------------------------------------------

_HEADER_KEYS = ("type", "id", "title", "status", "cause_status", "created", "updated", "closed", "confirmed",
                "cause_confirmed", "evidence", "redacted", "env_dropped")


def incident_data(obj: Any) -> dict[str, Any]:
    """An incident as a dict: a dict itself, ``obj.to_dict()``, or a dataclass's fields."""
    if callable(getattr(obj, "to_dict", None)):
        data = obj.to_dict()
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = dataclasses.asdict(obj)
    else:
        data = obj
    if not isinstance(data, dict):
        raise TypeError(f"Expected an incident dict or an object with to_dict() but got {type(obj).__name__}")
    return data


def incident_context(data: dict[str, Any]) -> dict[str, Any]:
    """The worksheet in the appendix's order; ``cause_status`` (firstdiv.diagnosis.incident) says hypothesis or confirmed."""
    used: set[str] = set(_HEADER_KEYS)
    sections = []
    for label, keys in PAGE_WORKSHEET:
        key = next((k for k in keys if k in data), keys[0])
        used.add(key)
        sections.append({"label": label, "key": key, "block": _block(data.get(key)), "must": label.startswith("MUST")})
    confirmed = data.get("confirmed", data.get("cause_confirmed"))
    if "cause_status" in data:
        confirmed = data["cause_status"] == "confirmed"
    ident = data.get("id", "")
    title = data.get("title") or data.get("symptom") or ""
    scrubbed = [f"{data[k]} {what}" for k, what in (("redacted", "secrets redacted"), ("env_dropped", "environment values dropped"))
                if data.get(k)]
    return {
        "kind": "incident", "title": f"Incident {ident}: {fmt(title, 120)}" if ident else f"Incident: {fmt(title, 120)}",
        "incident_id": fmt(ident) if ident != "" else "", "status": fmt(data.get("status") or "open"),
        "confirmed": None if confirmed is None or not data.get("cause") else bool(confirmed),
        "dates": [(k, fmt(data[k])) for k in ("created", "updated", "closed") if data.get(k)],
        "sections": sections, "evidence": [_evidence(e) for e in data.get("evidence") or ()],
        "scrubbed": ", ".join(scrubbed), "other": [(str(k), _block(v)) for k, v in data.items() if k not in used],
    }


def _evidence(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {"head": fmt(item), "summary": "", "data": ""}
    head = " · ".join(fmt(item[k]) for k in ("kind", "instrument", "status", "source") if item.get(k))
    data = json.dumps(item.get("data"), indent=1, default=str) if item.get("data") is not None else ""
    return {"head": head or "evidence", "summary": fmt(item.get("summary") or "", 4000),
            "data": data if len(data) <= MAX_DETAILS else data[:MAX_DETAILS] + "\n… (cut)"}


def _block(value: Any) -> dict[str, Any]:
    """A worksheet value as text, a list of items, or key/value rows; empty is shown as not filled in."""
    out: dict[str, Any] = {"empty": False, "rows": [], "items": [], "text": ""}
    if value is None or value == "" or value == [] or value == {}:
        out["empty"] = True
    elif isinstance(value, dict):
        out["rows"] = [(str(k), fmt(v, 2000)) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        out["items"] = [fmt(v, 2000) for v in value]
    else:
        out["text"] = fmt(value, 20_000)
    return out
