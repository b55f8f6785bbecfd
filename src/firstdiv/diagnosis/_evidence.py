"""What the notebook attaches to an incident and how it writes it as worksheet text: a Report, a dict or a JSON
file becomes an evidence entry (kind, source, instrument, status, summary, data), and a worksheet's values
(findings, observations, a divergence) become the plain text of its fields."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument

#: worksheet keys some reports use for a notebook field
ALIASES = {"experiment": "distinguishing_experiment", "contract": "first_contract", "divergence": "first_divergence",
            "hypothesis": "hypotheses", "observed": "observations"}


def as_dict(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        obj = obj.to_dict()
    if isinstance(obj, (str, os.PathLike)):
        obj = _load_json(Path(obj))
    if not isinstance(obj, dict):
        raise InvalidArgument(f"Expected a Report, a dict or a JSON file path as evidence but got {type(obj).__name__}")
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"Expected JSON-safe evidence (plain numbers, strings, lists, dicts) but {exc}") from None


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgument(f"Cannot read {path}: {exc.strerror}; pass a JSON file saved with --json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidArgument(f"{path} is not valid JSON{where}; pass a worksheet or report saved with --json") from None
    if isinstance(data, dict) and "schema_version" in data and isinstance(data.get("payload"), dict):
        data = data["payload"]  # a command's --json envelope (docs/json.md): its payload is the evidence
    if not isinstance(data, dict):
        raise InvalidArgument(f"Expected {path} to hold a JSON object (a Report or worksheet) but got {type(data).__name__}")
    return data


def report_dict(data: dict[str, Any]) -> dict[str, Any] | None:
    """The Report inside ``data`` (itself, or under 'report' as in `compare --json`), else None."""
    for cand in (data, data.get("report")):
        if isinstance(cand, dict) and "instrument" in cand and "status" in cand:
            return cand
    return None


def entries(attach: Any) -> list[dict[str, Any]]:
    """Evidence entries for ``attach``: one Report, dict or JSON path, or an iterable of them."""
    items = list(attach) if isinstance(attach, (list, tuple)) else [attach]
    return [entry(as_dict(a), str(a) if isinstance(a, (str, os.PathLike)) else "") for a in items]


def entry(data: dict[str, Any], source: str) -> dict[str, Any]:
    rep = report_dict(data)
    if rep is None:
        return {"kind": "json", "source": source, "instrument": "", "status": "", "summary": "", "data": data}
    worksheet = rep.get("type") == "Worksheet" or rep.get("instrument") == "diagnose"
    div = rep.get("first_divergence")
    summary = f"first divergence at {div.get('where', '?')} [{div.get('kind', '?')}]" if isinstance(div, dict) else \
        (rep.get("reason") or "no divergence")
    return {"kind": "worksheet" if worksheet else "report", "source": source, "instrument": str(rep["instrument"]),
            "status": str(rep["status"]), "summary": str(summary), "data": data}


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(f"- {_inline(v)}" for v in value)
    if isinstance(value, dict):
        if "where" in value and "kind" in value:
            where, inst = str(value["where"]), value.get("instrument")
            where = f"{inst}:{where}" if inst and not where.startswith(f"{inst}:") else where
            text = f"{where}: {value['kind']} (expected {_inline(value.get('expected'))}, " \
                   f"observed {_inline(value.get('observed'))})"
            return text + (f"; {value['hint']}" if value.get("hint") else "")
        return "\n".join(f"{k}: {_inline(v)}" for k, v in value.items())
    return str(value)


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        if "check" in value:
            return finding_line(value)
        if "instrument" in value and "summary" in value:  # one of diagnose's observations
            return f"{value['instrument']} {value.get('status', '')}: {value['summary']}"
        return ", ".join(f"{k}={_inline(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return str(value)


def finding_line(f: Any) -> str:
    if not isinstance(f, dict):
        return str(f)
    return f"{f.get('where', '')} {f.get('check', '')} {f.get('status', '')}: {f.get('message', '')}".strip()
