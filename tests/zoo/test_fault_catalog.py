"""The fault catalog: each fault is localized by the instrument the catalog names, at the named
parameter, module or link; the clean references raise no alarm over three seeds."""

from __future__ import annotations

import pytest
from harness import CALLS

from firstdiv import zoo
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")  # a loaded machine must not decide a timing verdict

CASES = [(name, ref, exp) for name, fault in sorted(zoo.FAULTS.items()) for ref in fault.applies_to
         for exp in fault.expected]


@pytest.mark.parametrize(("fault", "reference", "expect"), CASES,
                         ids=[f"{f}-{e.instrument}" for f, _, e in CASES])
def test_fault_is_localized(fault, reference, expect):
    report = CALLS[expect.instrument](zoo.build(reference, fault=fault, seed=0))
    if expect.status == "WARN":  # named, not confirmed as a fault (evidence before FAIL)
        warned = [f for f in report.findings if f.status is Status.WARN and f.where == expect.where]
        assert report.status is Status.WARN and warned, f"{expect.instrument} did not name {fault}:\n{report}"
        assert not expect.kind or warned[0].check == expect.kind
        return
    div = report.first_divergence
    assert report.status is Status.FAIL and div is not None, f"{expect.instrument} missed {fault}:\n{report}"
    assert div.where == expect.where, f"{fault}: expected where={expect.where!r}, got {div.where!r} ({div.kind})"
    if expect.kind:
        assert div.kind == expect.kind, f"{fault}: expected kind {expect.kind}, got {div.kind}"


@pytest.mark.quality
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("reference", zoo.REFERENCES)
def test_clean_references_raise_no_alarm(reference, seed):
    program = zoo.build(reference, seed=seed)
    for name, call in CALLS.items():
        if not call.applies(program):
            continue
        report = call(program)
        assert report.status is not Status.FAIL, f"false alarm from {name} on clean {reference} seed {seed}:\n{report}"


def test_every_instrument_of_this_issue_localizes_some_fault():
    covered = {e.instrument for f in zoo.FAULTS.values() for e in f.expected}
    assert covered >= {"step_probe", "reachability", "four_structures", "six_claims", "learning_ledger"}
