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


RESULTS = Results()


def counts(results: Results) -> list[str]:
    """Lines: per instrument, FAIL / WARN counts over the correct runs; bugs localized."""
    from _gate import localized

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
    return lines
