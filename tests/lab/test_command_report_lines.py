"""The report protocol: a line that cannot be used is skipped, counted and named in the run's notes (the record's
``extra["notes"]``, printed under the sweep), never an interpreter exception failing a good run."""

import sys
import textwrap

import pytest

import firstdiv

#: Writes a good line, then the bad one given in a file, then a good line, straight to the report file.
WRITER = """
import argparse, os, sys
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--bad")
a = p.parse_args()
bad = open(a.bad).read()
with open(os.environ["FIRSTDIV_REPORT_FILE"], "a") as fh:
    fh.write('{"step": 0, "val_loss": 1.0}\\n' + bad + '\\n{"step": 1, "val_loss": 0.5}\\n')
"""

HUGE = "9" * 400
BAD_LINES = {
    "nan step": ('{"step": NaN, "val_loss": 2.0}', "step is not a finite number"),
    "infinite step": ('{"step": Infinity, "val_loss": 2.0}', "step is not a finite number"),
    "negative infinite epoch": ('{"epoch": -Infinity, "val_loss": 2.0}', "step is not a finite number"),
    "400-digit value": ('{"step": 2, "val_loss": ' + HUGE + "}", "val_loss is too large for a float"),
    "400-digit step": ('{"step": ' + HUGE + ', "val_loss": 2.0}', "step is not a finite number"),
    "1e999 step": ('{"step": 1e999, "val_loss": 2.0}', "step is not a finite number"),
    "100,000 deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "deep run line": ('{"_firstdiv": "config", "data": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}",
                      "nested too deeply"),
    "400-digit grad norm": ('{"_firstdiv": "grad_norm", "data": [1.0, ' + HUGE + "]}", "too large for a float"),
    "infinite examples": ('{"_firstdiv": "throughput", "data": {"examples": Infinity, "seconds": 1}}',
                          "throughput needs finite numbers >= 0"),
    "400-digit seconds": ('{"_firstdiv": "throughput", "data": {"examples": 3, "seconds": ' + HUGE + "}}",
                          "throughput needs finite numbers >= 0"),
    "ragged eval indices": ('{"_firstdiv": "eval_contract", "data": {"indices": [[1], [1, 2]]}}',
                            "eval_contract cannot be fingerprinted"),
    "cut short": ('{"step": 2, "val_lo', "not JSON"),
}


@pytest.fixture
def writer(tmp_path):
    path = tmp_path / "writer.py"
    path.write_text(textwrap.dedent(WRITER))
    return path


@pytest.mark.parametrize("shape", list(BAD_LINES))
def test_a_line_that_cannot_be_used_is_skipped_and_named_in_the_notes(writer, tmp_path, store_path, shape):
    line, why = BAD_LINES[shape]
    (tmp_path / "bad.txt").write_text(line)
    result = firstdiv.sweep([sys.executable, str(writer), "--seed", "{seed}", "--bad", str(tmp_path / "bad.txt")],
                            "0", store=store_path, progress=False)
    assert not result.failed, result.failed[0].error
    (rec,) = result.records
    assert rec.curves == {"val_loss": [1.0, 0.5]} and rec.exit_code == 0  # the good lines, as written
    (note,) = rec.extra["notes"]
    assert note.startswith("1 report line could not be used and was skipped: line 2 (") and why in note, note
    assert len(note) < 400 and "\n" not in note
    assert rec.grad_norm == {} and rec.eval_fingerprint is None and "reported_config" not in rec.extra


def test_the_notes_count_every_skipped_line_and_the_sweep_prints_them(writer, tmp_path, cli):
    (tmp_path / "bad.txt").write_text("\n".join(['{"step": NaN, "x": 1}'] * 5 + ["[" * 5000 + "]" * 5000]))
    proc = cli("sweep", "--seeds", "0", "--store", tmp_path / "runs.db", "--", sys.executable, writer, "--seed",
               "{seed}", "--bad", tmp_path / "bad.txt", cwd=tmp_path, env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    (shown,) = [line.strip() for line in proc.stdout.splitlines() if "skipped" in line]
    assert shown.startswith("seed 0: 6 report lines could not be used and were skipped: line 2 (step is not a "
                            "finite number), line 3 (step is not a finite number), line 4 (")
    assert "and 3 more" in shown


def test_a_metric_named_like_a_recorder_argument_is_a_metric(writer, tmp_path, store_path):
    (tmp_path / "bad.txt").write_text('{"step": 2, "self": 3.0}')
    result = firstdiv.sweep([sys.executable, str(writer), "--seed", "{seed}", "--bad", str(tmp_path / "bad.txt")],
                            "0", store=store_path, progress=False)
    (rec,) = result.records
    assert rec.curves == {"val_loss": [1.0, 0.5], "self": [3.0]} and "notes" not in rec.extra
