"""pytest plugin (entry point ``firstdiv``): the ``firstdiv_gate`` fixture gates a metric in a test.

::

    def test_training_did_not_regress(firstdiv_gate):
        firstdiv_gate("gate.json", train_and_eval(seed=999))   # fails with the margin when over

pytest loads this module in every session of every project that has firstdiv installed, so it
imports nothing heavy here: the gate (numpy, scipy, the lab) is imported when the fixture is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest


def gate_check(gate: Any, observed: Any) -> Any:
    """Check ``observed`` (a value, values, a SweepResult or run records) against ``gate`` (a
    :class:`firstdiv.Gate` or the path of a gate file). Fails the calling test with the report's
    text, margin included, when the gate fails; returns the report otherwise."""
    from firstdiv.lab.gate import Gate

    if isinstance(gate, (str, os.PathLike)):
        gate = Gate.load(gate)
    elif not isinstance(gate, Gate):
        raise TypeError(f"Expected a firstdiv.Gate or the path of a gate file but got {type(gate).__name__}")
    report = gate.check(observed)
    if not report.ok:
        pytest.fail(str(report), pytrace=False)
    return report


@pytest.fixture
def firstdiv_gate() -> Callable[[Any, Any], Any]:
    """``check(gate_path_or_Gate, value_or_values_or_records)``: fail the test when the calibrated
    gate fails (see ``firstdiv gate calibrate``); returns the gate's report when it passes."""
    return gate_check
