"""The incident worksheet (appendix, "A reusable incident worksheet") as a Report, and its assembly from what
the ladder observed. :mod:`._playbook` pre-fills HYPOTHESES, DISTINGUISHING EXPERIMENT, MUST CHANGE and MUST NOT
CHANGE from the first divergence's kind; the terminal and Markdown layouts are in :mod:`firstdiv.render.worksheet`.

Every field lives in ``details`` (plain values) so the worksheet round-trips through ``to_dict``/``from_dict``
and the run store. :func:`firstdiv.diagnosis.diagnose` fills them through :func:`build`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._book import ALL_GREEN, CONTRACTS, FIELDS
from .._registry import SPECS
from ..report import Divergence, Finding, Report, Status
from ._playbook import play_for, prefixes

__all__ = ["ALL_GREEN", "CONTRACTS", "FIELDS", "Worksheet", "build", "contract_of"]

_CONTRACT_BY_INSTRUMENT = {s.name: s.contract for s in SPECS}
#: kind prefixes whose contract differs from their instrument's (the most specific prefix wins)
_CONTRACT_BY_KIND = {
    "step.no_gradient": "graph", "step.zero_gradient": "graph", "step.requires_grad_false": "graph",
    "step.not_updated": "ownership", "step.nonfinite_loss": "tensor", "claim.differentiation": "graph",
    "claim.update": "ownership", "dependency": "graph", "optimizer": "ownership", "structure": "ownership",
    "trace.forward_raised": "geometry", "shape": "geometry",
}


def contract_of(instrument: str, kind: str) -> str:
    """The worksheet contract (one of :data:`CONTRACTS`) a divergence of ``kind`` from ``instrument`` violates."""
    for prefix in prefixes(kind):
        if prefix in _CONTRACT_BY_KIND:
            return _CONTRACT_BY_KIND[prefix]
    return _CONTRACT_BY_INSTRUMENT.get(instrument, "tensor")


class Worksheet(Report):
    """A pre-filled incident worksheet (``instrument == "diagnose"``). Every field is in ``details`` under its
    snake_case name (``symptom``, ``reproduction``, ``first_contract``, ``observations``, ``first_divergence``,
    ``hypotheses``, ``distinguishing_experiment``, ``intervention``, ``must_change``, ``must_not_change``,
    ``verification``, ``regression_test``) plus ``checked``, ``not_checked``, ``not_reached``, ``order`` and
    ``reports`` (every instrument's own report as a dict)."""

    def field(self, name: str) -> Any:
        """One worksheet field by its book name (``"MUST CHANGE"``) or its details key (``"must_change"``)."""
        return self.details[name.lower().replace(" ", "_")]

    def report_of(self, instrument: str) -> Report | None:
        """The report an instrument returned during this diagnosis (None when it did not run)."""
        data = self.details.get("reports", {}).get(instrument)
        return None if data is None else Report.from_dict(data)

    def __rich_body__(self) -> Iterable[Any]:
        from ..render.worksheet import render_worksheet

        return render_worksheet(self)

    def to_markdown(self) -> str:
        """The worksheet as Markdown, for pasting into an issue or a notebook."""
        from ..render.worksheet import worksheet_markdown

        return worksheet_markdown(self)


# ---- assembly ---------------------------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    import torch

    if torch.is_tensor(value):
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')} on {value.device}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)) and len(value) <= 8:
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if callable(value):
        return getattr(value, "__qualname__", type(value).__name__)
    return type(value).__name__


def _reproduction(ev: dict[str, Any], reports: dict[str, Report]) -> dict[str, Any]:
    """The evidence given, as plain text: the smallest reproduction this diagnosis ran on."""
    out: dict[str, Any] = {}
    model = ev.get("model")
    if model is not None:
        params = list(model.parameters())
        out["model"] = (f"{type(model).__name__} ({len(params)} parameter tensors, {sum(p.numel() for p in params)} elements, "
                        f"{'train' if model.training else 'eval'} mode)")
    if "optimizer" in ev:
        groups = ev["optimizer"].param_groups
        out["optimizer"] = f"{type(ev['optimizer']).__name__} ({len(groups)} group(s), lr {[g.get('lr') for g in groups]})"
    if "batch" in ev:
        from ..instruments._core.batch import split_batch
        b = split_batch(ev["batch"], model)
        out["batch"] = f"inputs {_describe(b.inputs)}; targets {_describe(b.targets)}"
    loss = reports.get("evidence_packet")
    value = None if loss is None else loss.details.get("packet", {}).get("loss", {}).get("value")
    if value is not None:
        out["loss on the batch"] = value
    if "loader" in ev:
        loader = ev["loader"]
        out["loader"] = (f"{type(loader).__name__} (batch_size {getattr(loader, 'batch_size', '?')}, num_workers "
                         f"{getattr(loader, 'num_workers', '?')}, dataset {type(getattr(loader, 'dataset', None)).__name__})")
    for key in ("train_step", "eval_fn", "task_probe", "step", "loss_fn"):
        if key in ev:
            out[key] = _describe(ev[key])
    for key in ("inputs", "sample", "features", "variant_inputs", "contracts"):
        if key in ev:
            out[key] = _describe(ev[key])
    if "stages" in ev:
        stages = ev["stages"]
        out["stages"] = ", ".join(str(s[0]) for s in stages) if isinstance(stages, (list, tuple)) else ", ".join(map(str, stages))
    if "attention" in ev:
        out["attention"] = f"{type(ev['attention'][0]).__name__} on {_describe(ev['attention'][1])}"
    if "variants" in ev:
        out["variants"] = ", ".join(map(str, ev["variants"]))
    out["given"] = sorted(ev)
    return out


def build(symptom: str | None, expected: str | None, ev: dict[str, Any], reports: dict[str, Report],
          observations: list[dict[str, Any]], not_checked: list[dict[str, str]], not_reached: list[str],
          first: dict[str, Any] | None, order: tuple[str, ...], test: str | None) -> Worksheet:
    """The worksheet of one diagnosis: ``order`` is the ladder's instrument order, ``test`` the call a regression
    test asserts ``.ok`` on for the first divergence's instrument (None without one)."""
    ran = [o for o in observations if o["status"] != Status.SKIPPED.value]
    not_checked = [*({"instrument": o["instrument"], "rung": o["rung"], "needs": "evidence it could use; it ran and said: "
                      + o["summary"]} for o in observations if o["status"] == Status.SKIPPED.value), *not_checked]
    details: dict[str, Any] = {
        "symptom": symptom, "expected": expected, "reproduction": _reproduction(ev, reports),
        "first_contract": first["contract"] if first else None,
        "contracts_checked": list(dict.fromkeys(o["contract"] for o in ran)), "observations": observations,
        "first_divergence": None, "hypotheses": [], "distinguishing_experiment": None, "playbook_key": None,
        "must_change": [], "must_not_change": [], "checked": [o["instrument"] for o in ran],
        "not_checked": not_checked, "not_reached": not_reached, "order": list(order), "warning": ALL_GREEN,
        "reports": {name: r.to_dict() for name, r in reports.items()},
    }
    div = None
    if first is not None:
        own = reports[first["instrument"]].first_divergence
        assert own is not None  # a FAIL report always carries one
        div = Divergence(f"{first['instrument']}:{own.where}", own.kind, own.expected, own.observed, own.hint)
        details["first_divergence"] = {"instrument": first["instrument"], "instrument_where": own.where, **div.to_dict()}
        details.update(play_for(own.kind, own.where))
    details.update(_placeholders(details, test))
    findings = tuple(Finding(o["instrument"], f"diagnose.{o['contract'].replace(' ', '_')}", Status(o["status"]), o["summary"],
                             {k: o[k] for k in ("rung", "contract", "where", "kind", "seconds")}) for o in observations)
    side = "; ".join(f"{name}: {r.side_effects}" for name, r in reports.items() if r.side_effects != "none") or "none"
    status, reason = _status(observations, not_checked, first)
    return Worksheet("diagnose", status, div, findings, side, reason, details)


def _status(observations: list[dict[str, Any]], not_checked: list[dict[str, str]],
            first: dict[str, Any] | None) -> tuple[Status, str]:
    if first is not None:
        return Status.FAIL, ""
    statuses = {o["status"] for o in observations}
    if statuses <= {Status.SKIPPED.value}:
        needs = "; ".join(f"{n['instrument']} needs {n['needs']}" for n in not_checked[:-1])
        what = "no instrument could check anything" if observations else "no instrument had its evidence"
        return Status.SKIPPED, f"{what}: {needs or 'pass model=..., batch=(inputs, targets), loss_fn=..., optimizer=...'}"
    # an instrument that had its evidence but could not run (user code raised) is not part of a clean bill; one with
    # nothing of its kind to check (``details["not_applicable"]``: no shape-changing layer) is listed, not warned on
    warned = {o["status"] for o in observations if not o.get("not_applicable")}
    return (Status.WARN if warned & {Status.WARN.value, Status.SKIPPED.value} else Status.PASS), ""


def _placeholders(details: dict[str, Any], test: str | None) -> dict[str, str]:
    div = details["first_divergence"]
    if div is None:
        return {"intervention": "none: no divergence was found in what was checked",
                "verification": "[fill in] nothing to verify; if the symptom persists, supply the evidence listed under "
                                "NOT CHECKED and rerun diagnose",
                "regression_test": "[fill in] keep this diagnosis as a test: assert firstdiv.diagnose(**evidence).ok"}
    at = div["where"]
    change = details["must_change"][0] if details["must_change"] else "the MUST CHANGE measurement"
    return {
        "intervention": f"[fill in] change exactly one mechanism at {at}: the one hypothesis the distinguishing experiment "
                        "supports. Do not also change input layout, layer dimensions, learning rate, optimizer or "
                        "normalization in the same edit (the one-bug rule).",
        "verification": f"[fill in after the repair] rerun diagnose on the same evidence: the divergence at {at} is gone for "
                        "the predicted reason (MUST CHANGE measured), MUST NOT CHANGE measured unchanged; a new first "
                        "divergence is the next bug. Repeat the final check once without instruments.",
        "regression_test": f"[fill in] a test that fails today and passes after the repair: assert {test or 'the instrument passes'}"
                           f", and assert the MUST CHANGE measurement ({change})",
    }
