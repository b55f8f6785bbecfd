"""The HTML report (firstdiv.html, `firstdiv report`): what each page shows, escaping, self-containment.

Pages are built from a real store of the tiny workload's sweeps and real instrument reports on the
zoo; the browser tests (test_browser.py) open the same pages in headless Chromium.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import WORKLOADS

import firstdiv
from firstdiv import html, zoo
from firstdiv.errors import InvalidArgument
from firstdiv.report import Report, Status, skipped

TINY = str(WORKLOADS / "tiny.py")
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
XSS_SWEEP = f"xss {XSS}"
SVG_SIZE = re.compile(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"')


def build_store(root: Path) -> Path:
    """Four sweeps of the tiny workload: a baseline, a shifted config (same seeds), a changed eval split
    whose value and sweep name carry a <script> tag, and a near-copy at other seeds (unpaired)."""
    from firstdiv.lab.sweep import sweep

    store = root / "runs.db"
    target = f"{TINY}:train"
    sweep(target, "0-5", store=store, name="base")
    sweep(target, "0-5", store=store, name="shifted", config={"shift": 0.2})
    sweep(target, "0-5", store=store, name=XSS_SWEEP, config={"eval_split": XSS})
    sweep(target, "6-11", store=store, name="other-seeds", config={"shift": 0.001})
    return store


def stale_optimizer_report() -> Report:
    p = zoo.build("finetune", fault="stale_optimizer")
    return firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn)


def build_pages(store: Path) -> dict[str, str]:
    """Every kind of page from the store of :func:`build_store`, as full documents, keyed by name
    (the browser tests open the same set)."""
    from firstdiv.lab.store import Store

    with Store(store) as st:
        sweep_result = html.load_sweep("base", st)
        xss_sweep = html.load_sweep(XSS_SWEEP, st)
    incident = {"id": "inc-1", "title": f"flat loss {XSS}", "status": "open", "symptom": "loss is flat after finetuning",
                "expected": "loss falls by 10% in 20 steps", "first_divergence": "head.weight is not owned by the optimizer",
                "hypotheses": ["optimizer built before the head was replaced", "lr is zero"],
                "must_change": "head.weight moves after a step", "must_not_change": f"backbone stays frozen {XSS}",
                "cause": "stale optimizer", "cause_status": "hypothesis", "notes": XSS}
    return {
        "sweep": html.to_html(sweep_result),
        "sweep_xss": html.to_html(xss_sweep),
        "system_changed": html.to_html(html.comparison_view("base", "shifted", store=store)),
        "measurement_changed": html.to_html(html.comparison_view("base", XSS_SWEEP, store=store)),
        "unpaired": html.to_html(html.comparison_view("base", "other-seeds", store=store)),
        "report": html.to_html(stale_optimizer_report()),
        "incident": html.to_html(incident),
    }


#: SVG plots each page must carry: sweep = 4 metrics + 3 curves; comparison = paired + 4 strips + 3 curves
EXPECTED_PLOTS = {"sweep": 7, "sweep_xss": 7, "system_changed": 8, "measurement_changed": 8, "unpaired": 7,
                  "report": 0, "incident": 0}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("html-store"))


@pytest.fixture(scope="module")
def pages(store):
    return build_pages(store)


def _first_rows(page: str) -> list[str]:
    return re.findall(r'<tr class="first"[^>]*>(.*?)</tr>', page, re.DOTALL)


def _verdict(page: str) -> str:
    return re.search(r'<div class="box verdict ([A-Z_]+)', page).group(1)


def test_every_page_is_self_contained_and_runs_nothing(pages):
    for name, page in pages.items():
        assert page.startswith("<!DOCTYPE html>"), name
        assert "<script" not in page.lower(), name
        assert "http://" not in page and "https://" not in page, name  # not even SVG namespace URLs
        assert not re.search(r"\s(src|href)\s*=\s*[\"'](?!#)", page), name  # only in-page links
        assert "@import" not in page and "@font-face" not in page, name
        assert re.findall(r"url\((?!#)", page) == [], name
        assert "default-src 'none'" in page, name  # the CSP refuses anything a browser might still try
        assert len(SVG_SIZE.findall(page)) == EXPECTED_PLOTS[name], name
        for width, height in SVG_SIZE.findall(page):
            assert float(width) * 4 / 3 > 100 and float(height) * 4 / 3 > 100, (name, width, height)


def test_sweep_page_shows_identity_noise_floor_plots_and_runs(pages, store):
    from firstdiv.lab.store import Store

    with Store(store) as st:
        result = html.load_sweep("base", st)
    page, info = pages["sweep"], result.sweep.info
    for text in ("Sweep base", f"hash {info['config_hash']}", info["code"]["version"], "tiny-v1",
                 f"hash {info['env_hash']}", result.records[0].eval_fingerprint, result.sweep.workload,
                 "seeds <code>0-5</code>"):
        assert text in page, text
    summary = result.summary()["val_loss"]
    row = re.search(r'<tr><td class="mono">val_loss</td>(.*?)</tr>', page, re.DOTALL).group(1)
    assert f"{summary['median']:.6g}" in row and f"{summary['spread']:.4g}" in row and ">6<" in row
    for metric in ("train_loss", "val_loss", "val_acc", "examples_per_s"):
        assert f'data-plot="{metric}"' in page
    assert page.count("one dot per seed") == 4 and page.count("median, IQR and min-max over seeds") == 3
    assert len(re.findall(r'<tr><td class="num">\d+</td>', page)) == 6  # one row per run


def test_sweep_page_lists_failed_runs_and_survives_having_none_that_succeeded(store):
    from firstdiv.lab.store import Store
    from firstdiv.lab.sweep import sweep

    sweep(f"{TINY}:train", "0-2", store=store, name="some-fail", config={"fail_seed": 1})
    sweep(f"{TINY}:train", "1", store=store, name="all-fail", config={"fail_seed": 1})
    with Store(store) as st:
        some, none = html.to_html(html.load_sweep("some-fail", st)), html.to_html(html.load_sweep("all-fail", st))
    assert '<span class="badge FAIL">FAIL</span>' in some and "<strong>1 failed</strong>" in some
    assert re.search(r'<tr class="first"><td class="num">1</td><td class="mono">RuntimeError: seed 1 exploded', some)
    assert len(SVG_SIZE.findall(some)) == 7  # the two seeds that ran still give their distributions
    assert "No successful runs recorded yet" in none and len(SVG_SIZE.findall(none)) == 0
    assert "<h2>Runs</h2>" not in none


def test_comparison_page_shows_verdict_what_changed_and_paired_deltas(pages):
    page = pages["system_changed"]
    assert _verdict(page) == "SYSTEM_CHANGED"
    assert '<span class="dir">worse</span>' in page
    changed = re.findall(r'<tr class="changed"><th>([^<]+)</th>', page)
    assert changed == ["config"]
    assert re.search(r'<td class="mono muted">&nbsp;&nbsp;shift</td><td></td><td class="mono">0</td><td class="mono">0.2</td>',
                     page)
    assert "candidate − baseline per seed" in page and "6 of 6 seeds worse, 0 better, 0 tied" in page
    assert "baseline base" in page and "candidate shifted" in page  # both sides in the strip plots and curves
    assert "paired t p=" in page  # the statistics lines of the terminal report
    first = _first_rows(page)
    assert len(first) == 1 and "val_loss" in first[0]  # the ledger marks the metric's row


def test_measurement_changed_page_escapes_the_script_config_value(pages):
    page = pages["measurement_changed"]
    assert _verdict(page) == "MEASUREMENT_CHANGED"
    assert "eval path differs in split" in page
    changed = re.findall(r'<tr class="changed"><th>([^<]+)</th>', page)
    assert changed == ["eval fingerprint"]
    assert f'<td class="mono">{ESCAPED}</td>' in page  # the eval split's value, shown as text
    assert re.search(r"<text [^>]*>candidate xss &lt;script&gt;alert", page)  # the sweep name in the plots (cut)
    assert XSS not in page and "<script" not in page
    sweep_page = pages["sweep_xss"]
    assert f"Sweep xss {ESCAPED}" in sweep_page and f'<td class="mono">{ESCAPED}</td>' in sweep_page
    assert XSS not in sweep_page


def test_unpaired_comparison_says_so_and_draws_no_paired_plot(pages):
    page = pages["unpaired"]
    assert "no shared seeds: unpaired" in page
    assert "candidate − baseline per seed" not in page
    assert _verdict(page) in ("NOT_RESOLVED", "SYSTEM_CHANGED")
    assert "Welch p=" in page


def test_comparison_alone_renders_through_repr_html_as_a_fragment(store):
    from firstdiv.lab.compare import compare

    c = compare("base", "shifted", store=store)
    frag = c._repr_html_()
    assert frag.startswith('<div class="fd-report" data-kind="comparison">') and "<html" not in frag
    assert _verdict(frag) == "SYSTEM_CHANGED"
    assert len(SVG_SIZE.findall(frag)) == 1  # the paired deltas; per-side plots need the runs
    assert "comparison_view(...)" in frag


def test_instrument_report_highlights_the_first_divergence_row(pages):
    page = pages["report"]
    report = stale_optimizer_report()
    div = report.first_divergence
    assert '<span class="badge FAIL">FAIL</span> <code>four_structures</code>' in page
    box = re.search(r'<div class="box divergence" id="first-divergence">(.*?)</div>', page, re.DOTALL).group(1)
    assert f"<code>{div.where}</code>" in box and div.kind in box and "row 5 of the findings" in box
    first = _first_rows(page)
    assert len(first) == 1
    assert "head.weight" in first[0] and "optimizer.stale_parameter" in first[0] and "first divergence" in first[0]
    assert page.count("<tr class=") == len(report.findings)
    assert "one forward pass and loss on your model inside a guard" in page  # side effects


def test_clean_and_skipped_reports_say_so(tmp_path):
    p = zoo.build("finetune")
    clean = firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn)
    assert clean.status is Status.PASS
    page = html.to_html(clean)
    assert "No divergence found" in page and _first_rows(page) == []
    skip = html.to_html(skipped("feature_space", f"needs a model with named layers {XSS}"))
    assert f"<strong>SKIPPED</strong>: needs a model with named layers {ESCAPED}" in skip


def test_repr_html_of_a_report_is_the_report_page_fragment():
    frag = stale_optimizer_report()._repr_html_()
    assert frag.startswith('<div class="fd-report" data-kind="report">')
    assert "<html" not in frag and "Content-Security-Policy" not in frag
    assert len(_first_rows(frag)) == 1


def test_incident_page_follows_the_worksheet_and_escapes_every_field(pages):
    page = pages["incident"]
    labels = re.findall(r'<tr class="(?:must)?" data-key="(\w+)"><th>([^<]+)</th>', page)
    assert [k for k, _ in labels][:6] == ["symptom", "expected", "reproduction", "first_contract", "observations",
                                          "first_divergence"]
    assert ("must_change", "MUST CHANGE") in labels and ("must_not_change", "MUST NOT CHANGE") in labels
    assert '<tr class="must" data-key="must_change">' in page
    assert "<li>optimizer built before the head was replaced</li>" in page
    assert "cause is a hypothesis" in page and "not filled in" in page  # reproduction was left empty
    assert page.count(ESCAPED) == 4 and XSS not in page  # title twice (title, h1), a field, and the notes


def test_incident_from_the_store_renders_its_evidence(tmp_path):
    from firstdiv.diagnosis import incident

    store = tmp_path / "runs.db"
    inc = incident.incident_new(store, symptom=f"flat loss {XSS}", attach=[stale_optimizer_report()])
    page = html.to_html(incident.incident_show(inc.id, store=store))
    assert f"Incident {inc.id}: flat loss {ESCAPED}" in page
    assert "report · four_structures · FAIL" in page and XSS not in page


def test_plots_escape_svg_text_and_leave_matplotlib_settings_alone():
    import matplotlib

    from firstdiv.render.html import _plots

    before = {k: v for k, v in matplotlib.rcParams.items() if k != "backend"}
    svg = _plots.strip_plot([(XSS, [0, 1, 2], [1.0, 1.1, 0.9], _plots.BASE), ("cost $5 $x$", [0, 1], [1.2, 1.3], _plots.CAND)],
                            "loss <b>")
    after = {k: v for k, v in matplotlib.rcParams.items() if k != "backend"}
    assert before.keys() == after.keys()
    assert all(before[k] == after[k] or before[k] != before[k] for k in before)  # NaN-safe equality
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert "cost $5 $x$" in svg  # dollars shown as typed, not as mathtext
    assert "loss &lt;b&gt;" in svg and "<b>" not in svg
    assert svg.startswith("<svg ") and "<?xml" not in svg and "<!--" not in svg and "<metadata" not in svg


def test_to_html_refuses_what_it_cannot_show():
    with pytest.raises(InvalidArgument, match="Expected a Report, a SweepResult"):
        html.to_html(42)
    with pytest.raises(InvalidArgument, match="holding 'symptom'"):
        html.to_html({"title": "no symptom"})


# -- the command line -------------------------------------------------------------------------


@pytest.fixture
def main(monkeypatch, tmp_path):
    from firstdiv import cli

    monkeypatch.chdir(tmp_path)  # the default --html report.html lands here, if anywhere
    monkeypatch.setitem(cli.LAZY_COMMANDS, "report", "firstdiv.cli.report:report_command")
    return cli.main


def test_cli_writes_sweep_and_comparison_pages(main, store, tmp_path, capsys):
    out = tmp_path / "sweep.html"
    assert main(["report", "base", "--store", str(store), "--html", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote sweep page {out}")
    assert "Sweep base" in out.read_text()
    out2 = tmp_path / "cmp.html"
    assert main(["report", "base", XSS_SWEEP, "--store", str(store), "--html", str(out2), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)["payload"]
    assert payload["kind"] == "comparison" and payload["verdict"] == "MEASUREMENT_CHANGED"
    assert payload["html"] == str(out2) and payload["bytes"] == out2.stat().st_size
    assert _verdict(out2.read_text()) == "MEASUREMENT_CHANGED"


def test_cli_html_dash_writes_the_page_to_stdout(main, store, capsys):
    assert main(["report", "shifted", "--store", str(store), "--html", "-"]) == 0
    assert "Sweep shifted" in capsys.readouterr().out


def test_cli_renders_a_report_saved_with_json(main, store, tmp_path, capsys):
    from firstdiv.lab.compare import compare

    saved = tmp_path / "four.json"
    saved.write_text(stale_optimizer_report().to_json())
    assert main(["report", str(saved), "--html", str(tmp_path / "four.html")]) == 0
    assert len(_first_rows((tmp_path / "four.html").read_text())) == 1
    wrapped = tmp_path / "compare.json"  # the shape `firstdiv compare --json` prints: the report under "report"
    wrapped.write_text(json.dumps({"verdict": "x", "report": compare("base", "shifted", store=store).to_dict()}))
    assert main(["report", str(wrapped), "--html", str(tmp_path / "cmp.html")]) == 0
    assert _verdict((tmp_path / "cmp.html").read_text()) == "SYSTEM_CHANGED"
    capsys.readouterr()


@pytest.mark.parametrize("args, message", [
    (["nope"], "No sweep named 'nope'"),
    (["base", "shifted", "--metric", "nope"], "Metric 'nope' is not recorded"),
    (["base", "--html", "{tmp}/missing/dir/out.html"], "Cannot write the report to"),
    (["base", "--html", "{tmp}"], "is a directory"),
    (["a", "b", "c"], "but got 3 arguments"),
    (["incident:inc-1", "base"], "is a page of its own"),
    (["base", "--html", "-", "--json"], "choose one"),
    (["{tmp}/none.json"], "No report file"),
])
def test_cli_errors_exit_2_with_one_line(main, store, tmp_path, capsys, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(["report", *args, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("firstdiv: error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.glob("**/*.html"))


def test_cli_unknown_store_and_unknown_incident_exit_2(main, tmp_path, store, capsys):
    assert main(["report", "base", "--store", str(tmp_path / "none.db")]) == 2
    assert "No run store" in capsys.readouterr().err
    assert main(["report", "incident:inc-nope", "--store", str(store)]) == 2
    assert capsys.readouterr().err.startswith("firstdiv: error: ")


def test_cli_as_a_process(store, tmp_path):
    out = tmp_path / "page.html"
    proc = subprocess.run([sys.executable, "-m", "firstdiv", "report", "base", "shifted", "--store", str(store),
                           "--html", str(out), "--json"], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["payload"]["verdict"] == "SYSTEM_CHANGED" and out.stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "firstdiv", "report", "nope", "--store", str(store)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stdout == ""
