"""Terminal (and Markdown) layout of the book's worksheets: the diagnose worksheet, the routing table's
matches and the notebook's incidents, in the appendix's layout. Their fields come from
:mod:`firstdiv._book`; their values are plain details the diagnosis filled in."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .._book import ALL_GREEN, FIELDS, INCIDENT_WORKSHEET
from .._format import inline
from .._rich import Padding, Table, Text

# ---- the diagnose worksheet -------------------------------------------------------------------------------------------


def _reproduction_lines(rep: dict[str, Any]) -> list[str]:
    lines = [f"{key}: {inline(value)}" for key, value in rep.items() if key != "given"]
    return lines + [f"evidence given: {', '.join(rep.get('given', [])) or 'none'}"]


def _divergence_lines(div: dict[str, Any] | None) -> list[str]:
    if not div:
        return ["none: every instrument that ran passed (see OBSERVATIONS)"]
    return [f"where:      {div['where']}  (instrument {div['instrument']}, at {div['instrument_where']})",
            f"kind:       {div['kind']}",
            f"expected:   {inline(div['expected'])}", f"observed:   {inline(div['observed'])}"] + \
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


def render_worksheet(ws: Any) -> Iterable[Any]:
    """A diagnose Worksheet in the appendix's layout; the body is empty when nothing was diagnosed."""
    if not ws.details.get("observations") and ws.reason:
        return
    yield Text("PYTORCH INCIDENT", style="bold underline")
    for name, lines in sections(ws.details):
        if name == "FIRST DIVERGENCE":
            yield from _rich_observations(ws.details)
        yield Text(name, style="bold")
        yield Padding(Text("\n".join(lines)), (0, 0, 0, 4), expand=False)


def _rich_observations(details: dict[str, Any]) -> Iterable[Any]:
    yield Text("OBSERVATIONS", style="bold")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("#", "instrument", "contract", "status", "time", "summary"):
        table.add_column(col, overflow="fold")
    styles = {"PASS": "green", "FAIL": "bold red", "WARN": "yellow", "SKIPPED": "dim"}
    for row in _observation_rows(details):
        table.add_row(*(Text(c, style=styles.get(c, "")) if i == 3 else Text(c) for i, c in enumerate(row)))
    yield Padding(table, (0, 0, 0, 4), expand=False)


def worksheet_markdown(ws: Any) -> str:
    """The worksheet as Markdown, for pasting into an issue or a notebook."""
    d = ws.details
    if not d.get("observations") and ws.reason:
        return f"## PYTORCH INCIDENT\n\nnot diagnosed: {ws.reason}\n"
    out = [f"## PYTORCH INCIDENT ({ws.status.value})", ""]
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


# ---- routes -----------------------------------------------------------------------------------------------------------


def render_route(report: Any) -> Iterable[Any]:
    """A Route: the ranked matches, each with its contract, instruments, call, experiment and packet."""
    d = report.details
    if not d.get("matches"):
        if d.get("did_you_mean"):
            yield Text("  did you mean: " + "; ".join(f'"{p}"' for p in d["did_you_mean"]))
        return
    shown, total = len(d["matches"]), d["total_matches"]
    more = f" (showing {shown}; --all for every match)" if total > shown else ""
    yield Text.assemble("  symptom: ", (repr(d["symptom"]), "bold"), f"  ->  {total} route(s){more}")
    packets_shown: set[str] = set()
    for m in d["matches"]:
        style = "green" if m["strength"] == "strong" else "yellow"
        yield Text.assemble(f"\n{m['rank']:>3}  ", (m["id"], "bold"), "  ", (f"{m['strength']} {m['score']:.2f}", style),
                            f"  [{m['section']}]")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()
        rows = (("symptom", m["symptom"] + (f'  (matched "{m["matched_phrasing"]}")' if m["matched_phrasing"] != m["symptom"]
                                            else "")),
                ("contract", m["contract"]),
                ("run first", " then ".join(m["instruments"]) + f"  (look at {m['focus']})"),
                ("call", m["call"]), ("command", m["command"]),
                ("experiment", f"A: {m['hypotheses']['A']}  /  B: {m['hypotheses']['B']}  ->  {m['experiment']}"),
                ("capture", f"{m['packet']} packet" + (" (as above)" if m["packet"] in packets_shown
                                                        else ": " + ", ".join(m["packet_items"]))),
                ("stop when", m["stop_when"]))
        for label, value in rows:
            if value:
                grid.add_row(Text(f"     {label}"), Text(value))
        packets_shown.add(m["packet"])
        yield grid
    yield Text("\n  escalate only when the cheaper instrument passes: " + " -> ".join(d["escalation"]), style="dim")
    yield Text("  stop debugging when all four hold: " + " ".join(f"({i}) {s}" for i, s in enumerate(d["stop_debugging"], 1)),
               style="dim")


# ---- incidents --------------------------------------------------------------------------------------------------------

_CAUSE = {"confirmed": ("CAUSE — CONFIRMED", "bold green"), "hypothesis": ("CAUSE — HYPOTHESIS (not confirmed)", "bold yellow")}
_VAGUE = "If you cannot fill in MUST CHANGE and MUST NOT CHANGE, the proposed repair is probably still too vague."


def render_incident(inc: Any) -> Iterator[Any]:
    """An Incident in the appendix's layout: headings in capitals, answers indented, empty ones as the question."""
    closed = inc.status == "closed"
    yield Text.assemble(("PYTORCH INCIDENT  ", "bold"), (inc.id or "(not stored)", "bold cyan"), "  ",
                        ("CLOSED" if closed else "OPEN", "green" if closed else "bold yellow"), "  ", Text(inc.title))
    if inc.created:
        yield Text(f"created {inc.created[:19].replace('T', ' ')} · updated {inc.updated[:19].replace('T', ' ')}", style="dim")
    for name, heading, question in INCIDENT_WORKSHEET:
        value = getattr(inc, name).strip()
        style = "bold"
        if name == "cause" and value:
            heading, style = _CAUSE[inc.cause_status]
        yield Text("")
        yield Text(heading, style=style)
        yield Padding(Text(value) if value else Text(f"— {question}", style="dim italic"), (0, 0, 0, 4), expand=False)
    if inc.notes.strip():
        yield Text("")
        yield Text("NOTES", style="bold")
        yield Padding(Text(inc.notes.strip()), (0, 0, 0, 4), expand=False)
    if inc.evidence:
        yield Text("")
        yield Text("EVIDENCE", style="bold")
        for i, e in enumerate(inc.evidence, 1):
            head = " ".join(x for x in (e.get("kind", "json"), e.get("instrument", ""), e.get("status", "")) if x)
            tail = "".join(x for x in (f"  {e.get('summary')}" if e.get("summary") else "",
                                       f"  (from {e['source']})" if e.get("source") else ""))
            yield Padding(Text(f"{i}. {head}{tail}"), (0, 0, 0, 4), expand=False)
    yield from _footer(inc)


def _footer(inc: Any) -> Iterator[Any]:
    yield Text("")
    if (inc.intervention.strip() or inc.repair.strip()) and not (inc.must_change.strip() and inc.must_not_change.strip()):
        yield Text(_VAGUE, style="yellow")
    if inc.redacted or inc.env_dropped:
        yield Text(f"scrubbed before storing: {inc.redacted} secret(s) redacted, "
                   f"{inc.env_dropped} environment variable(s) dropped", style="dim")
    if inc.status == "open":
        missing = ", ".join(inc.missing_to_close) or "nothing (confirm the cause)"
        yield Text(f"open: closing needs a confirmed cause, repair, verification and regression test (missing: {missing}); "
                   f"firstdiv incident close {inc.id or 'ID'} --cause ... --repair ... --verification ... "
                   "--regression-test ...", style="dim")


def incident_table(incidents: list[Any], path: Path) -> Any:
    """``firstdiv incident list``: one row per incident."""
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"incidents in {path}", title_justify="left")
    for col in ("id", "status", "cause", "created", "title"):
        table.add_column(col, no_wrap=col != "title", overflow="fold")
    for inc in incidents:
        cause = (inc.cause_status if inc.cause.strip() else "-", _CAUSE[inc.cause_status][1] if inc.cause.strip() else "dim")
        table.add_row(inc.id, Text(inc.status, style="green" if inc.status == "closed" else "yellow"), Text(*cause),
                      inc.created[:16].replace("T", " "), Text(inc.title))
    return table
