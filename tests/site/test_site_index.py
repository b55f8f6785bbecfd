"""The run store's index (firstdiv.site.index_rows and the index page): each sweep's identity and how its
seeds' runs stand, read by SQL alone and agreeing with what the store's own reading gives; the filters by
name, workload and date; pagination; bad filter values."""

import re

import pytest
from _site_store import SWEEPS, SYMPTOM, TINY, shared_store, sweep_ids

from firstdiv import site
from firstdiv.errors import InvalidArgument, NotFound, StoreError
from firstdiv.lab.store import Store
from firstdiv.site import _pages


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


def _names(rows):
    return [r.name for r in rows]


def test_index_lists_every_sweep_newest_first_with_its_identity(store):
    rows = site.index_rows(store)
    assert _names(rows) == ["tiny-fail", "LR-high", "base"]
    with Store(store, readonly=True) as st:
        for row in rows:
            info = st.find_sweep(row.name)
            runs = st.records(info, include_failed=True)
            assert (row.id, row.workload, row.created) == (info.id, info.workload, info.created)
            assert row.workload == SWEEPS[row.name][0] and row.created.startswith(SWEEPS[row.name][1])
            assert row.seeds == len(info.seeds)
            assert (row.ok, row.failed) == (sum(r.ok for r in runs), sum(not r.ok for r in runs))
            assert row.config_hash == info.info["config_hash"] and row.code_version == info.info["code"]["version"]
            assert row.config == info.config
    by_name = {r.name: r for r in rows}
    assert (by_name["tiny-fail"].seeds, by_name["tiny-fail"].ok, by_name["tiny-fail"].failed) == (3, 2, 1)
    assert (by_name["LR-high"].seeds, by_name["LR-high"].ok, by_name["LR-high"].failed) == (3, 3, 0)  # pinned by --force


def test_each_sweep_is_paired_with_the_one_before_it_of_its_workload(store):
    ids = sweep_ids(store)
    previous = {r.name: r.previous for r in site.index_rows(store)}
    assert previous == {"base": None, "LR-high": (ids["base"], "base"), "tiny-fail": None}


def test_config_summary_names_what_tells_a_sweep_apart_from_its_workloads_others(store):
    rows = site.index_rows(store)
    summaries = _pages.config_summaries(rows)
    by_name = {r.name: summaries[r.id] for r in rows}
    assert by_name["base"] == "lr=0.02"
    assert by_name["LR-high"] == "lr=0.05"
    assert by_name["tiny-fail"] == ""  # alone in its workload: its config hash identifies it


@pytest.mark.parametrize(("filters", "expected"), [
    ({"name": "high"}, ["LR-high"]),  # any case
    ({"name": "BASE"}, ["base"]),
    ({"name": "-"}, ["tiny-fail", "LR-high"]),
    ({"name": "%"}, []),  # LIKE's wildcards are matched literally
    ({"name": "_"}, []),
    ({"workload": "builtin:mlp"}, ["LR-high", "base"]),
    ({"workload": TINY}, ["tiny-fail"]),
    ({"workload": "builtin"}, []),  # a workload is matched exactly
    ({"since": "2026-02-20"}, ["tiny-fail", "LR-high"]),  # the day itself included
    ({"until": "2026-02-20"}, ["LR-high", "base"]),
    ({"since": "2026-02-01", "until": "2026-03-06"}, ["tiny-fail", "LR-high"]),
    ({"since": "2026-02-01", "until": "2026-03-05"}, ["LR-high"]),
    ({"workload": "builtin:mlp", "since": "2026-02-01"}, ["LR-high"]),
    ({"since": "2027-01-01"}, []),
])
def test_filters_select_the_right_sweeps(store, filters, expected):
    assert _names(site.index_rows(store, **filters)) == expected
    assert site.index_total(store, **filters) == len(expected)


def test_pages_of_the_index_follow_each_other(store):
    everything = _names(site.index_rows(store))
    pages = [_names(site.index_rows(store, limit=2, offset=o)) for o in (0, 2, 4)]
    assert pages == [everything[:2], everything[2:], []]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"since": "yesterday"}, "Expected the since filter as a date YYYY-MM-DD (UTC) but got 'yesterday'"),
    ({"until": "2026-02-30"}, "Expected the until filter as a date YYYY-MM-DD (UTC)"),
    ({"since": "2026-03-01", "until": "2026-02-01"}, "since=2026-03-01 is after until=2026-02-01; swap them"),
    ({"limit": 0}, "Expected limit as an integer from 1 to 2**63-1 but got 0"),
    ({"offset": -1}, "Expected offset as an integer from 0 to 2**63-1 but got -1"),
])
def test_bad_filters_are_one_line_errors(store, kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        site.index_rows(store, **kwargs)


def test_a_missing_or_foreign_store_is_an_error_naming_the_fix(tmp_path):
    with pytest.raises(NotFound, match="does not exist; run `firstdiv sweep` first or pass --store PATH"):
        site.index_rows(tmp_path / "nothing.db")
    (tmp_path / "notes.db").write_text("not sqlite at all " * 100)
    with pytest.raises(StoreError, match="not a readable firstdiv store"):
        site.index_rows(tmp_path / "notes.db")


def test_incidents_are_listed_and_filtered_by_title_and_date(store):
    [incident] = site.incident_rows(store)
    assert incident.title == SYMPTOM and incident.status == "open" and incident.id.startswith("inc-")
    assert site.incident_rows(store, name="FLAT") == [incident]
    assert site.incident_rows(store, name="exploding") == []
    assert site.incident_rows(store, since=incident.created[:10]) == [incident]
    assert site.incident_rows(store, until="2026-01-01") == []


def test_index_page_shows_rows_links_and_filter_form(store):
    ids = sweep_ids(store)
    page = _pages.index_html(store, site.Filters(workload="builtin:mlp"))
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page  # served: the server filters
    assert page.count('<tr class="sweep"') == 2 and "tiny-fail" not in page
    assert f'href="sweep/{ids["base"]}.html"' in page
    assert f'href="compare/{ids["base"]}--{ids["LR-high"]}.html">vs base</a>' in page
    assert '<option value="builtin:mlp" selected>' in page and "2 sweeps match; showing 1–2" in page
    assert 'href="incident/inc-' in page and SYMPTOM in page
    static = _pages.index_html(store, site.Filters(), static=True)
    assert static.count('<tr class="sweep"') == 3 and static.count("<script>") == 1
    assert "script-src 'sha256-" in static  # the page allows its own filter script and no other


def test_a_name_with_markup_is_shown_as_text(tmp_path):
    store = tmp_path / "runs.db"
    name = "<script>alert(1)</script>"
    import firstdiv

    firstdiv.sweep("builtin:mlp", "0", sets=["epochs=1", "n_train=100", "n_val=50"], store=store, name=name)
    page = _pages.index_html(store, site.Filters(name="script"))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and name not in page
