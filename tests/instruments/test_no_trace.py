"""Every instrument leaves no trace on every program of the fault catalog, also when user code raises."""

from __future__ import annotations

import pytest
from harness import CALLS, NOT_IN_BATTERY, Injected, assert_no_trace, failing, tier_holds, watched

from firstdiv import zoo
from firstdiv._registry import SPECS, spec
from firstdiv.report import Report

PROGRAMS = [(ref, None) for ref in zoo.REFERENCES] + [
    (ref, name) for name, fault in sorted(zoo.FAULTS.items()) for ref in fault.applies_to]


def _cases(programs):
    """(instrument, reference, fault) for every program that carries the instrument's evidence."""
    built = {(ref, fault): zoo.build(ref, fault=fault, seed=0) for ref, fault in programs}
    return [(name, ref, fault) for name in sorted(CALLS) for (ref, fault), p in built.items() if CALLS[name].applies(p)]


CASES = _cases(PROGRAMS)
CLEAN = _cases([(ref, None) for ref in zoo.REFERENCES])


def test_every_instrument_meets_some_program():
    assert {name for name, _, _ in CASES} == set(CALLS)


def test_the_battery_calls_every_registered_instrument():
    """An instrument added to the registry joins the battery, or says here why it cannot."""
    assert set(CALLS) | set(NOT_IN_BATTERY) == {s.name for s in SPECS}
    assert not set(CALLS) & set(NOT_IN_BATTERY)


@pytest.mark.parametrize(("instrument", "reference", "fault"), CASES, ids=[f"{i}-{r}-{f or 'clean'}" for i, r, f in CASES])
def test_instrument_leaves_no_trace(instrument, reference, fault):
    program = zoo.build(reference, fault=fault, seed=0)
    out = assert_no_trace(lambda: CALLS[instrument](program), watched(program))
    assert isinstance(out, Report), f"{instrument} raised on {reference}/{fault}: {out!r}"
    assert out.instrument in (instrument, spec(instrument).module.rpartition(".")[2])  # DiagnosticSet: diagnostic_set
    assert tier_holds(spec(instrument).tier, out.side_effects), (spec(instrument).tier, out.side_effects)
    Report.from_dict(out.to_dict())  # JSON-safe


@pytest.mark.parametrize(("instrument", "reference", "fault"), CLEAN, ids=[f"{i}-{r}" for i, r, _ in CLEAN])
@pytest.mark.parametrize("calls", [1, 2, 3])
def test_no_trace_when_user_code_raises_half_way(instrument, reference, fault, calls):
    program = zoo.build(reference, seed=0)
    with failing(program, calls) as broken:
        out = assert_no_trace(lambda: CALLS[instrument](broken), watched(broken))
    assert isinstance(out, (Report, Injected)), f"{instrument}: unexpected {out!r}"
