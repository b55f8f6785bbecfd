"""The gates of the public corpus (``public/``: ports of correct programs from public repositories nobody here
wrote; their first-contact results are in ``first_contact.json``). These run after first contact, on today's code:

- every correct port, at seeds 0, 1, 2: ``diagnose(stop_at_first=False)`` raises nothing, no instrument FAILs, and
  the run leaves no trace on the program's objects (the no-trace harness, over every instrument diagnose ran);
- every bug variant: its owning instrument localizes it (its first divergence names the bug's place) and so does
  plain ``diagnose``. The bugs firstdiv does not localize yet are listed in ``_public_missed.py`` with the reason,
  as strict expected failures: one that starts being localized fails the run until it is taken off the list, and a
  localized bug that regresses fails it too.

WARNs on correct ports are not gated here (a port may not declare them: ``public/README.md``); they are counted in
``first_contact.json`` and the README of this directory.
"""

from __future__ import annotations

import pathlib

import pytest
from _api import load_dir
from _gate import localized, run_bug, run_correct
from _public_missed import MISSED
from first_contact import diagnose_bug
from harness import assert_no_trace, watched

PUBLIC = load_dir(pathlib.Path(__file__).resolve().parent / "public", "realworld_public")
SEEDS = (0, 1, 2)
CORRECT = [(name, seed) for name in PUBLIC for seed in SEEDS]
BUGS = [(name, bug) for name, module in PUBLIC.items() for bug in module.BUGS]


def _case(name: str, bug):
    reason = MISSED.get(f"{name}.{bug.name}")
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(name, bug, marks=marks, id=f"{name}-{bug.name}")


def test_every_listed_miss_is_a_bug_of_the_corpus():
    known = {f"{n}.{b.name}" for n, b in BUGS}
    assert set(MISSED) <= known, sorted(set(MISSED) - known)


@pytest.mark.parametrize(("name", "seed"), CORRECT, ids=[f"{n}-{s}" for n, s in CORRECT])
def test_correct_public_program_gets_no_fail(name, seed, one_thread):
    program = PUBLIC[name].build(seed)
    out = assert_no_trace(lambda: run_correct(program), watched(program))
    assert isinstance(out, tuple), f"diagnose raised {out!r}"
    status, verdicts = out
    alarms = {k: v for k, v in verdicts.items() if v.status == "FAIL"}
    assert status != "FAIL" and not alarms, "\n".join(f"{k}: {v.summary}" for k, v in alarms.items())


@pytest.mark.parametrize(("name", "bug"), [_case(n, b) for n, b in BUGS])
def test_public_bug_is_localized_by_its_instrument_and_by_diagnose(name, bug, one_thread):
    v = run_bug(bug)
    assert localized(bug, v), (f"{bug.instrument}: expected {bug.status} at {bug.where} {bug.kind}, got {v.status} "
                               f"{v.where} {v.kind}: {v.summary}")
    d = diagnose_bug(bug)
    assert d["localized"], f"diagnose: {d}"
