"""Every instrument leaves no trace on every program of the fault catalog, also when user code raises."""

from __future__ import annotations

import pytest
from harness import CALLS, Injected, assert_no_trace, failing, watched

from firstdiv import zoo
from firstdiv.report import Report

PROGRAMS = [(ref, None) for ref in zoo.REFERENCES] + [
    (ref, name) for name, fault in sorted(zoo.FAULTS.items()) for ref in fault.applies_to]


@pytest.mark.parametrize("instrument", sorted(CALLS))
@pytest.mark.parametrize(("reference", "fault"), PROGRAMS, ids=[f"{r}-{f or 'clean'}" for r, f in PROGRAMS])
def test_instrument_leaves_no_trace(instrument, reference, fault):
    program = zoo.build(reference, fault=fault, seed=0)
    if not CALLS[instrument].applies(program):
        pytest.skip(f"{reference} has no evidence for {instrument}")
    out = assert_no_trace(lambda: CALLS[instrument](program), watched(program))
    assert isinstance(out, Report), f"{instrument} raised on {reference}/{fault}: {out!r}"
    assert out.instrument == instrument
    Report.from_dict(out.to_dict())  # JSON-safe


@pytest.mark.parametrize("instrument", sorted(CALLS))
@pytest.mark.parametrize("reference", zoo.REFERENCES)
@pytest.mark.parametrize("calls", [1, 2, 3])
def test_no_trace_when_user_code_raises_half_way(instrument, reference, calls):
    program = zoo.build(reference, seed=0)
    if not CALLS[instrument].applies(program):
        pytest.skip(f"{reference} has no evidence for {instrument}")
    with failing(program, calls) as broken:
        out = assert_no_trace(lambda: CALLS[instrument](broken), watched(broken))
    assert isinstance(out, (Report, Injected)), f"{instrument}: unexpected {out!r}"
