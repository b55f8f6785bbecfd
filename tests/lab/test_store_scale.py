"""A store of many runs: an older schema migrates on open keeping every run and sweep, the queries behind `runs`,
`compare` and `export --name` are answered by indexes, `runs` lists the newest sweeps and says how many more
there are, and the streamed export is the text the rows make. The stores come from the store-scale benchmark's
generator (the same records and schema, a few thousand runs instead of 100,000); its times are not asserted."""

import csv
import importlib.util
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest

from firstdiv.errors import StoreError
from firstdiv.lab import store_schema
from firstdiv.lab.compare import compare
from firstdiv.lab.export import curve_rows, export, export_to, render, run_rows, runs
from firstdiv.lab.store import SCHEMA_VERSION, Store

_SPEC = importlib.util.spec_from_file_location("store_scale", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "store_scale.py")
scale = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scale)

NEW_INDEXES = {"sweeps_by_created", "sweeps_by_workload", "sweeps_by_identity", "sweep_seeds_by_run"}


def _tables(path):
    with sqlite3.connect(path) as conn:
        out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("runs", "sweeps", "sweep_seeds")}
        out["indexes"] = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        out["version"] = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    conn.close()
    return out


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """3,000 runs: 150 sweeps x 20 seeds, made at the schema before this one, then opened (migrated) once."""
    path = tmp_path_factory.mktemp("scale") / "runs.db"
    scale.build(path, sweeps=150, seeds=20, schema_version=SCHEMA_VERSION - 1)
    before = _tables(path)
    with Store(path, create=False):
        pass
    return path, before


def test_the_previous_schema_migrates_on_open_keeping_every_run_sweep_and_pin(big):
    path, before = big
    after = _tables(path)
    assert before["version"] == str(SCHEMA_VERSION - 1) and after["version"] == str(SCHEMA_VERSION)
    assert not NEW_INDEXES & before["indexes"] and NEW_INDEXES <= after["indexes"]
    for table in ("runs", "sweeps", "sweep_seeds"):
        assert after[table] == before[table], table
    assert len(after["runs"]) == 3000 and len(after["sweeps"]) == 150
    assert sum(row[2] is not None for row in after["sweep_seeds"]) == 60  # every 50th sweep's seeds are pinned
    with Store(path, create=False) as st:  # every stored record reads back as a RunRecord the store accepts
        read = {(s.name, r.seed): r for s in st.sweeps() for r in st.records(s, include_failed=True)}
        assert len(read) == 3000 and all(s.seeds == tuple(range(20)) for s in st.sweeps())
        ok = [r for r in read.values() if r.ok]
        assert 0 < len(read) - len(ok) < 60 and all("val_loss" in r.final for r in ok)
    again = _tables(path)  # a second open migrates nothing
    assert again == after


def _plans(path, work):
    """EXPLAIN QUERY PLAN of every query (SELECT, UPDATE, DELETE) the store runs while ``work(store)`` does."""
    with Store(path, create=False) as st:
        seen = []
        st._conn.set_trace_callback(seen.append)
        work(st)
        st._conn.set_trace_callback(None)
        queries = [q for q in seen if q.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE"))]
        return {q: [r[3] for r in st._conn.execute("EXPLAIN QUERY PLAN " + q)] for q in queries}


def _listing(st):
    from firstdiv.cli.lab import RUNS_LIMIT

    for s in st.sweeps(limit=RUNS_LIMIT):
        st.records(s, include_failed=True)
    st.count_sweeps()


def _force(st):
    """What `firstdiv sweep --force` does per seed: append a run, pinning the other sweeps of its identity."""
    sweep = st.find_sweep(scale.sweep_name(50))  # pinned seeds; the sweep "nightly" shares no identity with it
    st.add(st.records(sweep)[0], replace=True, sweep=sweep)
    st.records(sweep)


@pytest.mark.parametrize("command", ["runs", "compare", "export --name", "sweep --force"])
def test_the_queries_behind_each_command_read_runs_by_index_never_by_scan(big, command, tmp_path):
    path, _ = big
    if command == "sweep --force":  # it writes: on a copy
        with sqlite3.connect(path) as src, sqlite3.connect(tmp_path / "copy.db") as dst:
            src.backup(dst)
        src.close()
        dst.close()
        path = tmp_path / "copy.db"
    work = {"runs": _listing,
            "compare": lambda st: compare(scale.sweep_name(61), scale.sweep_name(65), store=st),
            "export --name": lambda st: export(st, name=scale.sweep_name(77)), "sweep --force": _force}[command]
    plans = _plans(path, work)
    assert any("FROM sweep_seeds s JOIN runs r" in q for q in plans), list(plans)  # the runs were read
    for query, plan in plans.items():
        for step in plan:
            assert not re.match(r"SCAN (runs|r|r2)\b", step), (query, plan)  # no pass over the runs table
            assert not re.fullmatch(r"SCAN (sweeps|w|sweep_seeds|s)", step), (query, plan)  # nor an unindexed one
        if "run_id IS NULL" in query:  # the unpinned seeds are nearly all of them: no reading them by that index
            assert not any("sweep_seeds_by_run" in step for step in plan), (query, plan)
        if "ORDER BY w.created" in query:  # the newest come off the index, not out of a sort of every sweep
            assert "USE TEMP B-TREE FOR ORDER BY" not in plan, (query, plan)


def _one_error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("firstdiv: error:"), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """60 sweeps of 2 seeds; sweep 0 is named "nightly"."""
    path = tmp_path_factory.mktemp("many") / "runs.db"
    scale.build(path, sweeps=60, seeds=2)
    return path


def test_runs_lists_the_newest_sweeps_and_says_how_many_more_there_are(many, cli, tmp_path):
    wide = {"COLUMNS": "300"}
    shown = cli("runs", "--store", many, "--limit", "5", cwd=tmp_path, env=wide)
    assert shown.returncode == 0, shown.stderr
    names = re.findall(r"^(exp-\d{5}|nightly) ", shown.stdout, re.MULTILINE)
    assert names == [scale.sweep_name(i) for i in range(55, 60)]  # the newest five, the oldest of them first
    assert "55 older sweeps not listed; use --name NAME or --limit N (0 lists all)" in shown.stdout
    default = cli("runs", "--store", many, cwd=tmp_path, env=wide)
    from firstdiv.cli.lab import RUNS_LIMIT

    assert len(re.findall(r"^exp-\d{5} ", default.stdout, re.MULTILINE)) == RUNS_LIMIT
    assert f"{60 - RUNS_LIMIT} older sweeps not listed" in default.stdout
    every = cli("runs", "--store", many, "--limit", "0", cwd=tmp_path, env=wide)
    assert len(re.findall(r"^(exp-\d{5}|nightly) ", every.stdout, re.MULTILINE)) == 60 and "not listed" not in every.stdout
    listed = json.loads(cli("runs", "--store", many, "--limit", "3", "--json", cwd=tmp_path).stdout)["payload"]
    assert [s["name"] for s in listed["sweeps"]] == [scale.sweep_name(i) for i in (57, 58, 59)] and listed["more"] == 57
    assert all(s["runs"] + s["failed"] == 2 for s in listed["sweeps"])
    one = json.loads(cli("runs", "--store", many, "--name", "nightly", "--json", cwd=tmp_path).stdout)["payload"]
    assert [s["name"] for s in one["sweeps"]] == ["nightly"] and one["more"] == 0
    none = cli("runs", "--store", many, "--name", "nope", cwd=tmp_path, env=wide)
    assert none.returncode == 0 and f"no sweeps named 'nope' in {many}" in none.stdout, none.stdout
    assert "--limit" in _one_error_line(cli("runs", "--store", many, "--limit", "-1", cwd=tmp_path))


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """A small store whose runs differ in what they carry: one run with an extra code key, one NaN metric,
    failed runs, seeds pinned and not."""
    path = tmp_path_factory.mktemp("odd") / "runs.db"
    scale.build(path, sweeps=12, seeds=4)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET record = json_set(record, '$.code.branch', 'main') WHERE id = 6")
        conn.execute("UPDATE runs SET record = json_set(record, '$.final.val_loss', 'nan') WHERE id = 9")
        conn.execute("UPDATE runs SET record = json_set(record, '$.config.layers', json('[1, 2]')) WHERE id = 10")
    conn.close()
    return path


@pytest.mark.parametrize("curves", [False, True])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_streamed_export_is_the_text_its_rows_render_to(odd, fmt, curves):
    with Store(odd, create=False) as st:
        workload = st.sweeps()[1].workload
        for where in ({}, {"name": "exp-00005"}, {"workload": workload}):
            rows = (curve_rows if curves else run_rows)(runs(st, **where))
            assert export(st, fmt=fmt, curves=curves, **where) == render(*rows, fmt), where
    text = export(odd, fmt=fmt, curves=curves)
    if not curves:
        table = list(csv.DictReader(io.StringIO(text))) if fmt == "csv" else [json.loads(x) for x in text.splitlines()]
        assert len(table) == 48 and [r["run_id"] for r in table][:3] in (["1", "2", "3"], [1, 2, 3])
        assert {r["code.branch"] for r in table} == ({"", "main"} if fmt == "csv" else {None, "main"})
        assert next(r["metric.val_loss"] for r in table if str(r["run_id"]) == "9") == "nan"
        assert next(r["config.layers"] for r in table if str(r["run_id"]) == "10") in ("[1, 2]", [1, 2])


def test_export_command_streams_to_stdout_and_to_a_file_the_same_text(odd, cli, tmp_path):
    out = tmp_path / "runs.jsonl"
    wrote = cli("export", "--store", odd, "--format", "jsonl", "-o", out, "--json", cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["payload"]["rows"] == 48
    assert out.read_text() == export(odd, fmt="jsonl") == cli("export", "--store", odd, "--format", "jsonl").stdout


def test_a_damaged_run_writes_nothing_anywhere(odd, cli, tmp_path):
    path = tmp_path / "damaged.db"
    with sqlite3.connect(odd) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
        dst.execute("UPDATE runs SET record = '{\"broken' WHERE id = 40")  # a late run: rows before it are fine
    src.close()
    dst.close()
    kept = tmp_path / "kept.csv"
    kept.write_text("before\n")
    with Store(path, create=False) as st, pytest.raises(StoreError, match=r"run 40 .*runs --drop 40"):
        export_to(st, kept)
    proc = cli("export", "--store", path, cwd=tmp_path)
    assert proc.stdout == "" and "run 40" in _one_error_line(proc)
    assert kept.read_text() == "before\n" and sorted(p.name for p in tmp_path.iterdir() if "kept" in p.name) == ["kept.csv"]


def test_the_generator_writes_the_schema_the_migrations_make(tmp_path):
    path = tmp_path / "runs.db"
    scale.build(path, sweeps=2, seeds=1)
    with Store(tmp_path / "fresh.db"):
        pass
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    made = sqlite3.connect(path)
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert made.execute(schema).fetchall() == fresh.execute(schema).fetchall()
    assert store_schema.SCHEMA_VERSION == len(store_schema.MIGRATIONS)
    fresh.close()
    made.close()
