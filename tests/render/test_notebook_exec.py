"""examples/quickstart.ipynb, executed by a real Jupyter kernel (ipykernel running this test's interpreter): every
cell runs; a Report displays once (its HTML and its text in ONE output, not doubled by rich taking itself for
Jupyter); str(report) shows nothing as a side effect; a SweepResult and a Comparison echo their one-line repr
with an HTML repr beside it."""

from __future__ import annotations

import json
import sys

import pytest
from _paths import ROOT

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install 'firstdiv[notebook]')")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install 'firstdiv[notebook]')")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install 'firstdiv[notebook]')")

NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
KERNEL = "firstdiv-test-python"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook, run in a fresh directory by a kernel whose spec (written here) starts sys.executable; a last
    cell added here prints the kernel's interpreter."""
    root = tmp_path_factory.mktemp("notebook")
    spec = root / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "firstdiv test", "language": "python"}))
    work = root / "work"
    work.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("JUPYTER_PATH", str(root / "jupyter"))  # the kernel spec is found there
    patch.setenv("JUPYTER_RUNTIME_DIR", str(root / "runtime"))
    patch.setenv("IPYTHONDIR", str(root / "ipython"))  # no profile of the user's is read or written
    patch.delenv("FIRSTDIV_STORE", raising=False)
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
        client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                                         resources={"metadata": {"path": str(work)}})
        client.execute()  # raises CellExecutionError, naming the cell, if any cell raises
    finally:
        patch.undo()
    return nb, work


def code_cell(nb, source_start):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    return cell


def only_result(cell):
    """The cell's one output, an execute_result (no stream, no separate display)."""
    assert [o.output_type for o in cell.outputs] == ["execute_result"], cell.outputs
    return cell.outputs[0].data


def test_every_cell_ran_in_the_tests_interpreter(executed):
    nb, work = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert code[-1].outputs[0].text.strip() == sys.executable
    assert (work / "quickstart-runs.db").is_file()  # the notebook's store, in its own directory


def test_a_report_displays_once_with_html_and_text(executed):
    nb, _ = executed
    data = only_result(code_cell(nb, "import torch"))
    assert set(data) == {"text/html", "text/plain"}
    assert data["text/plain"].startswith("<Report shape_ledger ") and data["text/plain"].count("\n") == 0
    assert data["text/html"].lstrip().startswith("<") and "shape_ledger" in data["text/html"]


def test_str_of_a_report_has_no_side_effect(executed):
    nb, _ = executed
    data = only_result(code_cell(nb, "text = str(report)"))
    assert set(data) == {"text/plain"} and "shape_ledger" in data["text/plain"].lower()


def test_sweeps_and_the_comparison_echo_a_short_repr_and_html(executed):
    nb, _ = executed
    base = only_result(code_cell(nb, "import firstdiv"))
    assert base["text/plain"] == "<SweepResult 'base' builtin:mlp 6 runs (6 ran, 0 reused, 0 failed)>"
    cand = only_result(code_cell(nb, "cand = "))
    assert cand["text/plain"] == "<SweepResult 'lr-x10' builtin:mlp 6 runs (6 ran, 0 reused, 0 failed)>"
    comparison = only_result(code_cell(nb, "comparison = "))
    assert comparison["text/plain"].startswith("<Comparison 'base' -> 'lr-x10' val_loss: ") and "\n" not in comparison["text/plain"]
    for data in (base, cand, comparison):
        assert data["text/html"].lstrip().startswith("<")
    assert "lr-x10" in cand["text/html"] and "SYSTEM_CHANGED" in comparison["text/html"]
    (printed,) = code_cell(nb, "print(comparison.verdict").outputs
    assert printed.text.split() == ["SYSTEM_CHANGED", "worse"]
    frame = only_result(code_cell(nb, "base.to_pandas()"))
    assert "text/html" in frame and frame["text/plain"].splitlines()[0].split() == ["seed", "status",
                                                                                    "metric.val_loss", "metric.val_acc"]
