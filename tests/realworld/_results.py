"""The corpus's counts, printed at the end of the run (the root conftest's terminal summary): false alarms per
instrument on correct programs, bugs localized per instrument. Not a conftest.py: a second module named conftest
would shadow the root one for ``from conftest import run_cli``.

Under pytest-xdist each worker holds the results of the tests it ran: :func:`plain` turns them into lists of plain
values a worker can send to the controller (``workeroutput``), :func:`merge` adds the workers' together, and
:func:`counts` reads the merged form."""

from __future__ import annotations

import dataclasses
from collections import Counter


@dataclasses.dataclass
class Results:
    correct: dict = dataclasses.field(default_factory=dict)
    bugs: dict = dataclasses.field(default_factory=dict)
    cases: dict = dataclasses.field(default_factory=dict)  # (module, case, seed | 'bug') -> (Case, Outcome)


RESULTS = Results()
KEYS = ("correct", "bugs", "case_runs", "case_bugs")


def plain(results: Results) -> dict[str, list]:
    """The results as lists of plain values: per correct run its diagnose status and per-instrument statuses; per bug
    (and bug case) its instrument and whether it was localized; per correct case run its instrument and status."""
    from _cases import localized as case_localized
    from _gate import localized

    out: dict[str, list] = {k: [] for k in KEYS}
    out["correct"] = [[status, {name: v.status for name, v in verdicts.items()}]
                      for status, verdicts in results.correct.values()]
    out["bugs"] = [[bug.instrument, localized(bug, v)] for bug, v in results.bugs.values()]
    for (_module, _name, seed), (case, o) in results.cases.items():
        if seed == "bug":
            out["case_bugs"].append([case.instrument, case_localized(case, o)])
        else:
            out["case_runs"].append([case.instrument, o.status])
    return out


def merge(parts) -> dict[str, list]:
    """The workers' :func:`plain` results together."""
    return {k: [row for part in parts for row in part.get(k, [])] for k in KEYS}


def counts(results: dict[str, list]) -> list[str]:
    """Lines (from :func:`plain` or :func:`merge`): per instrument, FAIL / WARN counts over the correct runs; bugs
    localized."""
    lines: list[str] = []
    if results["correct"] or results["bugs"]:
        by: dict[str, Counter] = {}
        for _status, verdicts in results["correct"]:
            for name, status in verdicts.items():
                by.setdefault(name, Counter())[status] += 1
        passed = sum(s == "PASS" for s, _ in results["correct"])
        lines = [f"correct programs: {len(results['correct'])} runs; diagnose PASS {passed}"]
        lines += [f"  {name:20s} {_statuses(c)}" for name, c in sorted(by.items())]
        lines += _localized("bugs localized", results["bugs"])
    if results["case_runs"] or results["case_bugs"]:
        runs: dict[str, Counter] = {}
        for instrument, status in results["case_runs"]:
            runs.setdefault(instrument, Counter())[status] += 1
        lines += [f"instrument cases: {len(results['case_runs'])} correct runs"]
        lines += [f"  {name:20s} {_statuses(c)}" for name, c in sorted(runs.items())]
        lines += _localized("bug cases localized", results["case_bugs"])
    return lines


def _statuses(c: Counter) -> str:
    return ", ".join(f"{k} {c[k]}" for k in ("PASS", "WARN", "SKIPPED", "FAIL") if c[k])


def _localized(title: str, rows: list) -> list[str]:
    hits: dict[str, list[int]] = {}
    for instrument, hit in rows:
        h = hits.setdefault(instrument, [0, 0])
        h[0] += bool(hit)
        h[1] += 1
    lines = [f"{title}: {sum(h[0] for h in hits.values())}/{sum(h[1] for h in hits.values())}"]
    return lines + [f"  {name:20s} {h[0]}/{h[1]}" for name, h in sorted(hits.items())]
