"""The report file's run lines (grad norms, throughput, eval contract, config): written by ``firstdiv._log.report``,
read by the command sweep into the run record's fields; plain metric lines unchanged. No training library needed."""

from __future__ import annotations

import json
import math

import pytest

from firstdiv import _log
from firstdiv.lab._command_run import _read, apply_run_lines
from firstdiv.lab.identity import RunIdentity
from firstdiv.lab.record import Recorder, build_record, short_hash

CONTRACT = {"indices": {"sampler": "SequentialSampler", "count": 16, "order": "sequential", "hash": "abc"},
            "mode": "eval", "batch_size": 8}


def _identity():
    return RunIdentity(workload="cmd:python train.py --seed {seed}", config={}, config_hash="c", code={"version": "v"},
                       env={}, env_hash="e", hypothesis=None, success=None, extra={"eval_keys": []}, identity="i")


def test_run_lines_become_the_records_fields(tmp_path, monkeypatch):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(_log.REPORT_FILE, str(report))
    monkeypatch.delenv(_log.REPORT_FD, raising=False)
    _log.log(step=0, val_loss=0.5)
    _log.report("grad_norm", [1.0, 2.0])
    _log.log(step=1, val_loss=0.25)
    _log.report("grad_norm", [3.0, float("nan")])
    _log.report("throughput", {"examples": 100, "seconds": 2.0, "tokens": 1000})
    _log.report("eval_contract", CONTRACT)
    _log.report("config", {"learning_rate": 0.001, "optim": "adamw_torch"})
    rows, runs = _read(report)
    assert rows == [{"val_loss": 0.5, "step": 0}, {"val_loss": 0.25, "step": 1}]
    rec = Recorder(0, {})
    for row in rows:
        rec.log(row.pop("step"), **row)
    apply_run_lines(rec, runs)
    record = build_record(rec, workload="cmd:x", identity=_identity(), wall=3.0)
    assert record.curves == {"val_loss": [0.5, 0.25]}
    assert rec.grad_norm_values[:3] == [1.0, 2.0, 3.0] and math.isnan(rec.grad_norm_values[3])  # both lines, in order
    assert math.isnan(record.grad_norm["max"])  # a non-finite gradient norm is not averaged away
    assert record.throughput["examples_per_s"] == 50.0 and record.throughput["tokens_per_s"] == 500.0
    assert record.eval_fingerprint == short_hash(CONTRACT) and record.eval_fields == ["batch_size", "indices", "mode"]
    assert record.extra["reported_config"] == {"learning_rate": 0.001, "optim": "adamw_torch"}
    assert record.extra["eval_keys"] == []  # the identity's extra is kept


def test_a_reader_of_metric_lines_alone_skips_run_lines(tmp_path, monkeypatch):
    """Run lines hold no number at the top level, so a reader that only knows metrics lines finds no row in them."""
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(_log.REPORT_FILE, str(report))
    _log.report("throughput", {"examples": 10, "seconds": 1.0})
    for line in report.read_text().splitlines():
        obj = json.loads(line)
        assert not [k for k, v in obj.items() if isinstance(v, (int, float))]
    assert _read(report) == ([], {"throughput": {"examples": 10, "seconds": 1.0}})


def test_report_is_a_no_op_outside_a_sweep_and_off_rank_zero(tmp_path, monkeypatch):
    monkeypatch.delenv(_log.REPORT_FILE, raising=False)
    monkeypatch.delenv(_log.REPORT_FD, raising=False)
    _log.report("config", {"lr": 1})
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(_log.REPORT_FILE, str(report))
    monkeypatch.setenv("RANK", "1")
    _log.report("config", {"lr": 1})
    assert not report.exists()
    with pytest.raises(ValueError, match="must be one of"):
        _log.report("grad_norms", [1.0])


def test_eval_contract_hashes_index_tensors_like_their_values(tmp_path, monkeypatch):
    """A script's firstdiv.eval_contract(indices=tensor) gives the fingerprint rec.eval_contract gives for the same
    values as an array (a tensor that needs grad, or lives on a GPU, is read through .detach().cpu())."""
    import numpy as np
    import torch

    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(_log.REPORT_FILE, str(report))
    monkeypatch.delenv(_log.REPORT_FD, raising=False)
    _log.eval_contract(indices=torch.arange(8.0, requires_grad=True), mode="eval")
    _, runs = _read(report)
    assert Recorder(0, {}).eval_contract(runs["eval_contract"]) == Recorder(0, {}).eval_contract(
        indices=np.arange(8, dtype=np.float32), mode="eval")
