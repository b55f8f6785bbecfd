"""The corpus's counts, printed at the end of the run (the root conftest's terminal summary): false alarms per
instrument on correct programs, bugs localized per instrument. Not a conftest.py: a second module named conftest
would shadow the root one for ``from conftest import run_cli``."""

from __future__ import annotations

import dataclasses
from collections import Counter


@dataclasses.dataclass
class Results:
    correct: dict = dataclasses.field(default_factory=dict)
    bugs: dict = dataclasses.field(default_factory=dict)
    cases: dict = dataclasses.field(default_factory=dict)  # (module, case, seed | 'bug') -> (Case, Outcome)


RESULTS = Results()


def counts(results: Results) -> list[str]:
    """Lines: per instrument, FAIL / WARN counts over the correct runs; bugs localized."""
    from _gate import localized

    if not (results.correct or results.bugs):
        return _case_counts(results)
    runs = len(results.correct)
    by: dict[str, Counter] = {}
    for _status, verdicts in results.correct.values():
        for name, v in verdicts.items():
            by.setdefault(name, Counter())[v.status] += 1
    lines = [f"correct programs: {runs} runs; diagnose PASS {sum(s == 'PASS' for s, _ in results.correct.values())}"]
    lines += [f"  {name:20s} " + ", ".join(f"{k} {c[k]}" for k in ("PASS", "WARN", "SKIPPED", "FAIL") if c[k])
              for name, c in sorted(by.items())]
    hits: dict[str, list[int]] = {}
    for bug, v in results.bugs.values():
        h = hits.setdefault(bug.instrument, [0, 0])
        h[0] += localized(bug, v)
        h[1] += 1
    lines += [f"bugs localized: {sum(h[0] for h in hits.values())}/{sum(h[1] for h in hits.values())}"]
    lines += [f"  {name:20s} {h[0]}/{h[1]}" for name, h in sorted(hits.items())]
    return lines + _case_counts(results) if results.cases else lines


def _case_counts(results: Results) -> list[str]:
    """Per instrument: FAIL/WARN over the correct cases' runs, bug cases localized."""
    from _cases import localized

    runs: dict[str, Counter] = {}
    hits: dict[str, list[int]] = {}
    for (_module, _name, seed), (case, out) in results.cases.items():
        if seed == "bug":
            h = hits.setdefault(case.instrument, [0, 0])
            h[0] += localized(case, out)
            h[1] += 1
        else:
            runs.setdefault(case.instrument, Counter())[out.status] += 1
    lines = [f"instrument cases: {sum(sum(c.values()) for c in runs.values())} correct runs"]
    lines += [f"  {name:20s} " + ", ".join(f"{k} {c[k]}" for k in ("PASS", "WARN", "SKIPPED", "FAIL") if c[k])
              for name, c in sorted(runs.items())]
    lines += [f"bug cases localized: {sum(h[0] for h in hits.values())}/{sum(h[1] for h in hits.values())}"]
    return lines + [f"  {name:20s} {h[0]}/{h[1]}" for name, h in sorted(hits.items())]
