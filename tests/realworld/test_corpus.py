"""The gates of the real-program corpus (``programs/``; ``_api.py`` says what a program is).

- every correct program, at three seeds: no instrument FAILs; an instrument WARNs only where the program
  names the reason a user would agree with (``Program.warns``); ``diagnose`` returns PASS on every program
  that has a task probe or a declared task (and never FAIL on any); and the run leaves no trace on the
  program's model, optimizer and batch (the no-trace harness's check, over every instrument diagnose ran);
- every correct program genuinely learns under its own loop (else it is not a correct program);
- every bug: the instrument it names does not PASS, and its first divergence names the bug's place.

The counts are printed at the end of the run (``_results.py``, through the root conftest).
"""

from __future__ import annotations

import pytest
import torch
from _api import load_programs, self_check
from _gate import CHAIN, localized, run_bug, run_correct
from _results import RESULTS
from harness import assert_no_trace, watched

PROGRAMS = load_programs()
SEEDS = (0, 1, 2)
CORRECT = [(name, seed) for name in PROGRAMS for seed in SEEDS]
BUGS = [(name, bug) for name, module in PROGRAMS.items() for bug in module.BUGS]


def test_the_corpus_is_large_enough():
    assert len(PROGRAMS) >= 25, sorted(PROGRAMS)
    assert len(BUGS) >= len(PROGRAMS), "at least one bug per program on average"


@pytest.mark.parametrize(("name", "seed"), CORRECT, ids=[f"{n}-{s}" for n, s in CORRECT])
def test_correct_program_gets_no_false_alarm(name, seed, one_thread):
    program = PROGRAMS[name].build(seed)
    out = assert_no_trace(lambda: run_correct(program), watched(program))  # every instrument diagnose ran
    assert isinstance(out, tuple), f"diagnose raised {out!r}"
    status, verdicts = out
    RESULTS.correct[(name, seed)] = (status, verdicts)
    alarms = {k: v for k, v in verdicts.items() if v.status == "FAIL"}
    assert not alarms, "\n".join(f"{k}: {v.summary}" for k, v in alarms.items())
    warns = {k: v for k, v in verdicts.items() if v.status in ("WARN", "SKIPPED") and k not in program.warns
             and not v.not_applicable}
    assert not warns, "\n".join(f"{k} {v.status}: {v.summary}" for k, v in warns.items())
    assert set(CHAIN) <= set(verdicts), f"not run: {set(CHAIN) - set(verdicts)}"
    if program.task_probe is not None or program.task != "auto":
        assert status == "PASS", f"diagnose {status}: " + "; ".join(f"{k} {v.status}" for k, v in verdicts.items())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_correct_program_learns_under_its_own_loop(name, one_thread):
    first, last = self_check(PROGRAMS[name].build(0), steps=getattr(PROGRAMS[name], "SELF_CHECK_STEPS", 30))
    assert torch.isfinite(torch.tensor(last)) and last < first, (first, last)


@pytest.mark.parametrize(("name", "bug"), BUGS, ids=[f"{n}-{b.name}" for n, b in BUGS])
def test_bug_is_localized(name, bug, one_thread):
    v = run_bug(bug)
    RESULTS.bugs[(name, bug.name)] = (bug, v)
    assert localized(bug, v), (f"{bug.instrument}: expected {bug.status} at {bug.where} {bug.kind}, got {v.status} "
                               f"{v.where} {v.kind}: {v.summary}")
