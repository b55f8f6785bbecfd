"""The incident worksheet (appendix, "A reusable incident worksheet") as a Report: its fields and its terminal
and Markdown layouts. :mod:`firstdiv._playbook` pre-fills HYPOTHESES, DISTINGUISHING EXPERIMENT, MUST CHANGE
and MUST NOT CHANGE from the first divergence's kind.

Every field lives in ``details`` (plain values) so the worksheet round-trips through ``to_dict``/``from_dict``
and the run store; this module only reads them. :func:`firstdiv.diagnosis.diagnose` fills them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._playbook import prefixes
from ._render import _fmt
from .report import Report

#: the worksheet's fields, in the book's order, with the question each one answers
FIELDS: tuple[tuple[str, str], ...] = (
    ("SYMPTOM", "What exactly was observed?"),
    ("EXPECTED", "What specific value, shape, behavior or metric was expected?"),
    ("REPRODUCTION", "What is the smallest input / batch / configuration that reproduces it?"),
    ("FIRST CONTRACT", "Which contract should be checked first?"),
    ("OBSERVATIONS", "What did the instrument actually report?"),
    ("FIRST DIVERGENCE", "Where does observed behavior first disagree with the expectation?"),
    ("HYPOTHESES", "What are the smallest two or three mechanisms consistent with that evidence?"),
    ("DISTINGUISHING EXPERIMENT", "What one experiment makes those hypotheses predict different outcomes?"),
    ("INTERVENTION", "Change exactly one mechanism."),
    ("MUST CHANGE", "Which measurement should change if the diagnosis is correct?"),
    ("MUST NOT CHANGE", "Which correctness property must remain unchanged?"),
    ("VERIFICATION", "Did the original failure disappear for the predicted reason?"),
    ("REGRESSION TEST", "What small test should remain so this exact failure cannot silently return?"),
)

#: the appendix's list of contracts ("FIRST CONTRACT")
CONTRACTS = ("tensor", "graph", "ownership", "input representation", "geometry", "attention", "learning chain",
             "performance", "compiler", "run comparison")

#: the appendix's warning, given with every clean bill
ALL_GREEN = ("An all-green report is not a clean bill of health for what was not probed: different failures violate "
             "different contracts, and the dangerous ones often preserve every simpler contract below them.")

_CONTRACT_BY_INSTRUMENT = {
    "evidence_packet": "tensor", "tensor_facts": "tensor", "stage_trace": "input representation",
    "four_structures": "ownership", "reachability": "graph", "step_probe": "learning chain",
    "learning_ledger": "learning chain", "six_claims": "learning chain", "shape_ledger": "geometry",
    "attention_check": "attention", "tensor_trace": "tensor", "feature_space": "tensor", "loader_timing": "performance",
    "performance_ledger": "performance", "compile_ledger": "compiler", "compare_outputs": "run comparison",
}
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


# ---- presentation ---------------------------------------------------------------------------------------------------------


def _reproduction_lines(rep: dict[str, Any]) -> list[str]:
    lines = [f"{key}: {_fmt(value)}" for key, value in rep.items() if key != "given"]
    return lines + [f"evidence given: {', '.join(rep.get('given', [])) or 'none'}"]


def _divergence_lines(div: dict[str, Any] | None) -> list[str]:
    if not div:
        return ["none: every instrument that ran passed (see OBSERVATIONS)"]
    return [f"where:      {div['where']}  (instrument {div['instrument']}, at {div['instrument_where']})",
            f"kind:       {div['kind']}",
            f"expected:   {_fmt(div['expected'])}", f"observed:   {_fmt(div['observed'])}"] + \
        ([f"hint:       {div['hint']}"] if div.get("hint") else [])


def _clean_bill_lines(d: dict[str, Any]) -> list[str]:
    lines = ["checked (" + str(len(d["checked"])) + "): " + (", ".join(d["checked"]) or "nothing")]
    lines += [f"NOT checked: {n['instrument']} (needs {n['needs']})" for n in d["not_checked"]]
    return lines + [ALL_GREEN]


def sections(d: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """``(FIELD, lines)`` for every field but OBSERVATIONS (rendered as a table), from the worksheet's details."""
    lines: dict[str, list[str]] = {
        "SYMPTOM": [d["symptom"] or "[fill in] not given: pass symptom=... (what exactly was observed)"],
        "EXPECTED": [d["expected"] or "[fill in] not given: pass expected=... (the value, shape, behavior or metric expected)"],
        "REPRODUCTION": _reproduction_lines(d["reproduction"]),
        "FIRST CONTRACT": [d["first_contract"] or "none violated; contracts checked: " + ", ".join(d["contracts_checked"])],
        "FIRST DIVERGENCE": _divergence_lines(d["first_divergence"]),
        "HYPOTHESES": [f"{'ABC'[i]}. {h}" for i, h in enumerate(d["hypotheses"])] or ["none: no divergence to explain"],
        "DISTINGUISHING EXPERIMENT": [d["distinguishing_experiment"] or "none needed"],
        "INTERVENTION": [d["intervention"]],
        "MUST CHANGE": d["must_change"] or ["nothing: no repair proposed"],
        "MUST NOT CHANGE": d["must_not_change"] or ["everything checked above keeps passing"],
        "VERIFICATION": [d["verification"]],
        "REGRESSION TEST": [d["regression_test"]],
    }
    out = [(name, lines[name]) for name, _ in FIELDS if name in lines]
    if d["first_divergence"] is None:
        out.insert(5, ("CLEAN BILL", _clean_bill_lines(d)))
    else:
        out.append(("NOT CHECKED", [f"{n['instrument']} (needs {n['needs']})" for n in d["not_checked"]] or ["nothing"]))
        if d["not_reached"]:
            out.append(("NOT REACHED", ["stopped at the first divergence (the one-bug rule): " + ", ".join(d["not_reached"])]))
    return out


def _observation_rows(d: dict[str, Any]) -> list[tuple[str, ...]]:
    return [(str(i + 1), o["instrument"], o["contract"], o["status"], f"{o['seconds']:.2f}s", o["summary"])
            for i, o in enumerate(d["observations"])]


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
        from ._rich import Padding, Table, Text

        if not self.details.get("observations") and self.reason:
            return
        yield Text("PYTORCH INCIDENT", style="bold underline")
        for name, lines in sections(self.details):
            if name == "FIRST DIVERGENCE":
                yield from self._rich_observations(Table, Text, Padding)
            yield Text(name, style="bold")
            yield Padding(Text("\n".join(lines)), (0, 0, 0, 4), expand=False)

    def _rich_observations(self, table_cls: Any, text_cls: Any, padding_cls: Any) -> Iterable[Any]:
        yield text_cls("OBSERVATIONS", style="bold")
        table = table_cls(box=None, header_style="bold", pad_edge=False)
        for col in ("#", "instrument", "contract", "status", "time", "summary"):
            table.add_column(col, overflow="fold")
        styles = {"PASS": "green", "FAIL": "bold red", "WARN": "yellow", "SKIPPED": "dim"}
        for row in _observation_rows(self.details):
            table.add_row(*(text_cls(c, style=styles.get(c, "")) if i == 3 else text_cls(c) for i, c in enumerate(row)))
        yield padding_cls(table, (0, 0, 0, 4), expand=False)

    def to_markdown(self) -> str:
        """The worksheet as Markdown, for pasting into an issue or a notebook."""
        d = self.details
        if not d.get("observations") and self.reason:
            return f"## PYTORCH INCIDENT\n\nnot diagnosed: {self.reason}\n"
        out = [f"## PYTORCH INCIDENT ({self.status.value})", ""]
        for name, lines in sections(d):
            if name == "FIRST DIVERGENCE":
                out += ["### OBSERVATIONS", "", "| # | instrument | contract | status | time | summary |",
                        "|---|---|---|---|---|---|"]
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in _observation_rows(d)] + [""]
            out += [f"### {name}", ""] + [f"- {_md_text(line)}" for line in lines] + [""]
        return "\n".join(out)


def _md_text(text: str) -> str:
    return text.replace("\n", " ")


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|")
