"""The gates of the corpus for the instruments outside the learning chain (``_cases.py`` says what a case is):

- every correct case, at each of its seeds: no FAIL, a WARN only with its declared reason, no raw exception,
  and no trace left on the objects it handed to the instrument;
- every bug case: its instrument gives the bug's status at the place the case names.
"""

from __future__ import annotations

import pytest
from _cases import load_cases, localized, outcome
from _results import RESULTS
from harness import assert_no_trace, watched

CASES = load_cases()
CORRECT = [(m, c, s) for m, cases in CASES.items() for c in cases if not c.bug for s in c.seeds]
BUGS = [(m, c) for m, cases in CASES.items() for c in cases if c.bug]


@pytest.mark.parametrize(("module", "case", "seed"), CORRECT, ids=[f"{m}-{c.name}-{s}" for m, c, s in CORRECT])
def test_correct_case_gets_no_false_alarm(module, case, seed, one_thread):
    program = case.build(seed)
    report = assert_no_trace(lambda: case.call(program), watched(program))
    assert hasattr(report, "status"), f"{case.instrument} raised {report!r}"
    out = outcome(report)
    RESULTS.cases[(module, case.name, seed)] = (case, out)
    assert out.status != "FAIL", f"{case.instrument}: {out.summary}"
    assert out.status != "WARN" or case.warn, f"{case.instrument} WARN: {out.summary}"


@pytest.mark.parametrize(("module", "case"), BUGS, ids=[f"{m}-{c.name}" for m, c in BUGS])
def test_bug_case_is_localized(module, case, one_thread):
    out = outcome(case.call(case.build(0)))
    RESULTS.cases[(module, case.name, "bug")] = (case, out)
    assert localized(case, out), (f"{case.instrument}: expected {case.status} at {case.where} {case.kind}, got "
                                  f"{out.status} {out.where} {out.kind}: {out.summary}")
