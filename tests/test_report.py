"""The report model (DESIGN.md): frozen, JSON-safe, round-trips, refuses tensors, renders user
strings literally in text and escaped in HTML."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import firstdiv
from firstdiv import Comparison, Divergence, Finding, FirstdivError, InvalidArgument, Report, Status
from firstdiv.report import skipped


def _fail_report(**over) -> Report:
    div = Divergence("fc2.weight", "optimizer.stale_parameter", "a nonzero update", 0.0,
                     "pass model.parameters() to the optimizer after replacing fc2")
    findings = (
        Finding("forward", "outputs finite", Status.PASS, "logits finite", {"max_abs": 3.25, "shape": (8, 10)}),
        Finding("OPTIMIZER_OWNERSHIP", "every trainable parameter is owned", Status.FAIL, "1 of 6 not owned",
                {"missing": ["fc2.weight"], "owned": 5, "ratio": np.float64(5 / 6), "step": np.int64(3),
                 "scalar_tensor": torch.tensor(0.5), "flag": np.bool_(True), "nested": {"a": [1, (2, 3)]}}),
    )
    fields = {"instrument": "learning_ledger", "status": Status.FAIL, "first_divergence": div, "findings": findings,
              "side_effects": "one sacrificial optimizer step on a deep copy", "details": {"steps": 1, "lr": 0.01}}
    fields.update(over)
    return Report(**fields)


# --------------------------------------------------------------------------------------------
# shape and invariants


def test_report_divergence_and_finding_are_frozen():
    r = _fail_report()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = Status.PASS
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.first_divergence.where = "elsewhere"
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.findings[0].status = Status.FAIL
    assert isinstance(r.findings, tuple)


def test_ok_and_status():
    assert Report("x", Status.PASS).ok
    assert Report("x", "PASS").status is Status.PASS  # strings are accepted and normalised
    assert not _fail_report().ok
    warn_with_div = Report("x", Status.WARN, Divergence("a", "k.k", 1, 2))
    assert not warn_with_div.ok


def test_skipped_report_requires_a_reason():
    with pytest.raises(InvalidArgument, match="reason"):
        Report("loader_timing", Status.SKIPPED)
    r = skipped("loader_timing", "no loader given: pass loader=...", wanted="loader")
    assert r.status is Status.SKIPPED and r.reason == "no loader given: pass loader=..."
    assert r.details == {"wanted": "loader"}


def test_fail_report_requires_a_first_divergence():
    with pytest.raises(InvalidArgument, match="first_divergence"):
        Report("step_probe", Status.FAIL)


# --------------------------------------------------------------------------------------------
# to_dict / from_dict


@pytest.mark.parametrize("report", [
    _fail_report(),
    Report("route", Status.PASS, details={"candidates": ["optimizer", "loader"], "score": {"a": 1.5}}),
    Report("six_claims", Status.WARN, Divergence("step 3", "loss.flat", "decreasing", [0.7, 0.7, 0.7], ""),
           (Finding("step 3", "loss moves", "WARN", "flat", {}),)),
    skipped("attention_check", "no attention module found"),
], ids=["fail", "pass", "warn", "skipped"])
def test_to_dict_is_json_safe_and_round_trips(report):
    d = report.to_dict()
    text = json.dumps(d, allow_nan=False)  # strict JSON: no tensors, arrays or numpy scalars left
    assert Report.from_dict(d) == report
    assert Report.from_dict(json.loads(text)) == report
    assert json.loads(report.to_json()) == json.loads(text)
    assert d["instrument"] == report.instrument and d["status"] == report.status.value and d["ok"] == report.ok


def test_numpy_and_torch_scalars_become_plain_numbers():
    ev = _fail_report().findings[1].evidence
    assert type(ev["ratio"]) is float and ev["ratio"] == pytest.approx(5 / 6)
    assert type(ev["step"]) is int and ev["step"] == 3
    assert type(ev["scalar_tensor"]) is float and ev["scalar_tensor"] == 0.5
    assert ev["flag"] is True
    assert ev["nested"] == {"a": [1, [2, 3]]}


@pytest.mark.parametrize("bad", [torch.ones(3), np.ones(3), [1.0, torch.zeros(2)], {"inner": np.zeros((2, 2))},
                                 {1, 2}, object()])
def test_tensors_and_other_non_plain_values_in_evidence_are_rejected(bad):
    with pytest.raises(InvalidArgument) as info:
        Finding("fc1", "grad", Status.PASS, "msg", {"value": bad})
    assert isinstance(info.value, ValueError) and isinstance(info.value, FirstdivError)
    with pytest.raises(ValueError):  # callers catching the builtin get it too
        Report("x", Status.PASS, details={"value": bad})


def test_a_tensor_in_a_divergence_never_reaches_json():
    with pytest.raises(InvalidArgument):  # refused when built, long before anything is serialised
        Divergence("fc1", "k.k", torch.ones(2), 0.0)


def test_divergence_with_a_shape_tuple_round_trips():
    r = Report("shape_ledger", Status.FAIL, Divergence("conv2", "shape.mismatch", (8, 16, 5, 5), (8, 16, 4, 4)))
    assert Report.from_dict(r.to_dict()) == r


def test_divergence_rejects_a_tensor_when_built():
    with pytest.raises(InvalidArgument):
        Divergence("fc1", "k.k", torch.ones(2), 0.0)


# --------------------------------------------------------------------------------------------
# rendering


def test_str_renders_instrument_status_divergence_findings_and_side_effects():
    text = str(_fail_report())
    lines = text.splitlines()
    assert lines[0].split() == ["LEARNING_LEDGER", "FAIL"]
    assert "FIRST DIVERGENCE at fc2.weight  [optimizer.stale_parameter]" in text
    assert "expected: a nonzero update" in text
    assert "observed: 0" in text
    assert "hint:     pass model.parameters() to the optimizer after replacing fc2" in text
    assert any("OPTIMIZER_OWNERSHIP" in l and "FAIL" in l and "1 of 6 not owned" in l for l in lines)
    assert any("forward" in l and "PASS" in l and "logits finite" in l for l in lines)
    assert lines[-1].strip() == "side effects: one sacrificial optimizer step on a deep copy"
    assert "\x1b[" not in text  # plain text, no terminal escapes


def test_str_of_pass_and_skipped_reports():
    ok = str(Report("route", Status.PASS))
    assert ok.splitlines()[0].split() == ["ROUTE", "PASS"] and "FIRST DIVERGENCE" not in ok
    sk = str(skipped("loader_timing", "no loader given: pass loader=..."))
    assert sk.splitlines()[0].split() == ["LOADER_TIMING", "SKIPPED"]
    assert "skipped: no loader given: pass loader=..." in sk


MARKUP = "[bold]x[/bold]"
SCRIPT = "<script>alert(1)</script>"


def test_user_strings_in_a_divergence_are_literal_in_text_and_escaped_in_html():
    r = Report("tensor_trace", Status.FAIL, Divergence(f"blocks.{MARKUP}", "shape.mismatch", SCRIPT, "[red]b",
                                                       f"hint {MARKUP} {SCRIPT}"))
    text = str(r)
    assert f"FIRST DIVERGENCE at blocks.{MARKUP}" in text
    assert f"expected: {SCRIPT}" in text and "observed: [red]b" in text
    assert f"hint {MARKUP} {SCRIPT}" in text
    html = r._repr_html_()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert MARKUP in html


def test_user_strings_in_findings_are_literal_in_text_and_html():
    r = Report("six_claims", Status.WARN, findings=(Finding(f"layer.{MARKUP}", "check", Status.PASS,
                                                            f"message {MARKUP} {SCRIPT}"),))
    text = str(r)
    assert f"layer.{MARKUP}" in text and f"message {MARKUP}" in text
    html = r._repr_html_()
    assert "<script>" not in html and MARKUP in html


def test_a_stray_closing_tag_in_a_finding_does_not_break_rendering():
    r = Report("six_claims", Status.PASS, findings=(Finding("x", "check", Status.PASS, "[/bold] in a message"),))
    assert "[/bold] in a message" in str(r)


# --------------------------------------------------------------------------------------------
# the Comparison report of the lab


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    target = str(Path(__file__).resolve().parent / "workloads" / "tiny.py") + ":train"
    store = tmp_path_factory.mktemp("rep") / "runs.db"
    base = firstdiv.sweep(target, "0-4", name=f"base {MARKUP}", store=store)
    cand = firstdiv.sweep(target, "0-4", sets=["shift=0.5"], name=f"cand {SCRIPT}", store=store,
                          hypothesis="shift raises the loss", success="val_loss delta > 0.1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return firstdiv.compare(base, cand)


def test_comparison_round_trips_as_a_comparison(comparison):
    assert comparison.verdict == "SYSTEM_CHANGED"
    d = comparison.to_dict()
    assert d["type"] == "Comparison"
    back = Report.from_dict(json.loads(json.dumps(d, allow_nan=False)))
    assert type(back) is Comparison
    assert back == comparison
    assert (back.verdict, back.direction, back.identity, back.paired) == (
        comparison.verdict, comparison.direction, comparison.identity, comparison.paired)
    assert back.details["declared"]["result"] == "MET"


def test_comparison_is_frozen(comparison):
    with pytest.raises(dataclasses.FrozenInstanceError):
        comparison.status = Status.PASS


def test_comparison_renders_sweep_names_literally(comparison):
    text = str(comparison)
    assert text.splitlines()[0].split() == ["COMPARE", "FAIL"]
    assert f"RUN cand {SCRIPT}   BASELINE base {MARKUP}" in text
    assert "VERDICT  SYSTEM_CHANGED (worse): changed config" in text
    assert "shift: 0.0 -> 0.5" in text
    html = comparison._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html and MARKUP in html


def test_runs_lists_a_sweep_name_with_brackets(cli, tiny, tmp_path):
    store = tmp_path / "runs.db"
    firstdiv.sweep(f"{tiny}:train", "0-1", name="[/bold]odd", store=store)
    proc = cli("runs", "--store", store, cwd=tmp_path, env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr[-300:]
    assert "[/bold]odd" in proc.stdout


def test_rendering_a_report_the_first_time_leaves_pythons_random_state_alone():
    import subprocess
    import sys

    probe = ("import random, firstdiv\n"
             "from firstdiv.report import Report, Status\n"
             "r = Report('x', Status.PASS)\n"
             "s = random.getstate(); str(r); a = s == random.getstate()\n"
             "s = random.getstate(); r._repr_html_(); b = s == random.getstate()\n"
             "print(a, b)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]  # rich draws getrandbits when first imported; the renderer gives the state back
