"""The typed sweep path: RunIdentity round-trips today's identity dict; backends.get gives a Backend once."""

import dataclasses

import pytest
from _paths import WORKLOADS

from firstdiv.errors import InvalidArgument
from firstdiv.lab import backends
from firstdiv.lab.identity import RunIdentity
from firstdiv.lab.runner import identity
from firstdiv.lab.workload import resolve

KEYS = ["workload", "config", "config_hash", "code", "env", "env_hash", "hypothesis", "success", "extra", "identity"]


def test_run_identity_gives_the_dict_the_store_keeps_and_reads_it_back():
    wl = resolve(f"{WORKLOADS / 'tiny.py'}:train")
    ident = identity(wl, wl.config(sets=["shift=0.5"]), hypothesis="h", success="val_loss delta within noise")
    d = ident.to_dict()
    assert list(d) == KEYS
    assert d["config"]["shift"] == 0.5 and d["hypothesis"] == "h" and d["extra"]["eval_keys"] == ["eval_split"]
    assert ident.threads == int(d["env"]["threads"]) == 1
    assert RunIdentity.from_dict(d) == ident and RunIdentity.from_dict(d).to_dict() == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        ident.identity = "x"  # type: ignore[misc]


def test_backends_get_returns_run_check_and_warm_with_no_ops_where_undefined():
    serial = backends.get("serial")
    assert serial.name == "serial" and serial.run.__module__ == "firstdiv.lab.backends.serial"
    assert serial.check(None, {}) is None and serial.warm({}, None, None) is None  # the module defines neither
    process = backends.get("process")
    assert process.warm.__name__ == "warm" and process.warm.__module__ == "firstdiv.lab.backends._pool"
    with pytest.raises(InvalidArgument, match=r"^Unknown backend 'nope'; choose one of serial, process, vectorized, ray$"):
        backends.get("nope")
