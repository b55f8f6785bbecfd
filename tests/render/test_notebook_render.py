"""In a notebook a report renders once: rendering to text or HTML into a buffer displays nothing as a side effect
(rich's consoles take themselves for Jupyter there and display what they render)."""

from __future__ import annotations

import rich.console
import rich.jupyter

import firstdiv
from firstdiv.report import Report, Status


def test_str_and_html_of_a_report_display_nothing_in_a_notebook(monkeypatch):
    shown = []
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    monkeypatch.setattr(rich.jupyter, "display", lambda *a, **k: shown.append(a))
    assert rich.console.Console().is_jupyter  # the notebook is simulated: a plain console would display
    report = Report("shape_ledger", Status.PASS, reason="")
    text = str(report)
    html = report._repr_html_()
    assert "shape_ledger" in text.lower() and "shape_ledger" in html.lower()
    assert shown == []


def test_str_of_a_sweep_displays_nothing_in_a_notebook(monkeypatch, tmp_path):
    shown = []
    result = firstdiv.sweep("builtin:mlp", "0-1", store=tmp_path / "runs.db", backend="vectorized",
                            config={"epochs": 2}, progress=False)
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    monkeypatch.setattr(rich.jupyter, "display", lambda *a, **k: shown.append(a))
    assert "2 runs" in str(result) and shown == []


def test_a_reports_repr_is_one_short_line():
    from firstdiv.report import Divergence, Finding

    div = Divergence(where="fc", kind="shape.mismatch", observed="[8, 2048]", expected="[8, 512]")
    report = Report("shape_ledger", Status.FAIL, div, (Finding("fc", "geometry", Status.FAIL, "off"),),
                    details={"ledger": [{"row": i} for i in range(500)]})
    assert repr(report) == "<Report shape_ledger FAIL at fc: shape.mismatch, 1 findings>"
    assert repr(Report("x", Status.SKIPPED, reason="no model given")) == "<Report x SKIPPED: no model given, 0 findings>"


def test_a_sweeps_repr_is_one_short_line_and_it_has_an_html_repr(tmp_path):
    result = firstdiv.sweep("builtin:mlp", "0-2", store=tmp_path / "runs.db", backend="vectorized",
                            config={"epochs": 2}, progress=False, name="base")
    assert repr(result) == "<SweepResult 'base' builtin:mlp 3 runs (3 ran, 0 reused, 0 failed)>"
    html = result._repr_html_()
    assert html.lstrip().startswith("<") and "base" in html


def test_a_comparisons_repr_is_one_line_with_its_verdict_and_it_has_an_html_repr(tmp_path):
    store = tmp_path / "runs.db"
    for name, lr in (("base", 0.05), ("fast", 0.2)):
        firstdiv.sweep("builtin:mlp", "0-3", store=store, backend="vectorized", config={"epochs": 2, "lr": lr},
                       progress=False, name=name)
    c = firstdiv.compare("base", "fast", store=store)
    text = repr(c)
    paired = c.details["paired"]
    assert text.startswith(f"<Comparison 'base' -> 'fast' val_loss: {c.verdict}") and "\n" not in text
    assert f"delta {paired['mean_delta']:+.4g} [{paired['ci_low']:+.4g}, {paired['ci_high']:+.4g}]" in text
    assert text.endswith("4 shared seeds>")
    html = c._repr_html_()
    assert html.lstrip().startswith("<") and "fast" in html
