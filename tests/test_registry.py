"""The instrument registry is the one place an instrument is written down: the lazy public names, diagnose's
ladder, the routing table's calls and the worksheet's contracts all come from it or agree with it."""

from __future__ import annotations

import pytest

import firstdiv
from firstdiv._registry import SPECS, InstrumentSpec, ladder, lazy_names, spec
from firstdiv.diagnosis import ORDER
from firstdiv.diagnosis._routing_table import _CALL, INSTRUMENTS, ROUTES
from firstdiv.diagnosis.worksheet import CONTRACTS, contract_of

LAB = ("sweep", "compare", "bisect", "factorial", "Gate", "determinism", "rng_audit")


def test_the_routing_table_names_exactly_the_registered_instruments():
    public = {s.name for s in SPECS if s.public}
    assert set(INSTRUMENTS) - set(LAB) == public
    assert all(_CALL[name] == spec(name).call for name in public)
    named = {name for route in ROUTES for name in route.instruments}
    assert named <= set(INSTRUMENTS)


def test_every_public_instrument_loads_lazily_from_its_module():
    for name, module in lazy_names().items():
        assert firstdiv._LAZY[name] == module
        assert getattr(firstdiv, name).__module__.startswith(module)


def test_diagnose_runs_the_registered_ladder_in_its_order():
    assert ORDER == tuple(s.name for s in ladder())
    assert all(s.rung and s.needs and s.test for s in ladder())


def test_each_instruments_contract_is_the_worksheets():
    for s in SPECS:
        assert s.contract in CONTRACTS
        assert contract_of(s.name, "") == s.contract


@pytest.mark.parametrize(("field", "value", "message"), [("tier", "writes", "tier 'writes'"),
                                                         ("rung", "a rung", "a rung and a run go together")])
def test_a_malformed_spec_is_refused(field, value, message):
    base = {"name": "x", "module": "m", "contract": "tensor", "tier": "reads", "call": ""}
    with pytest.raises(ValueError, match=message):
        InstrumentSpec(**{**base, field: value})


def test_an_unknown_instrument_names_the_known_ones():
    with pytest.raises(KeyError, match="step_probe"):
        spec("nope")
