"""`firstdiv report --site DIR`: every page of the store as static files, links relative and resolving to files,
pages identical to what `firstdiv ui` serves; written atomically (a failure leaves no DIR, or the previous
site untouched); a folder that is not a site is never replaced."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from _site_store import shared_store, sweep_ids

from firstdiv import site
from firstdiv.errors import FirstdivError, InvalidArgument
from firstdiv.site import _pages


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="module")
def written(store, tmp_path_factory):
    root = tmp_path_factory.mktemp("static") / "site"
    return root, site.build_site(root, store).to_dict()


def _report_site(*args, cwd):
    return subprocess.run([sys.executable, "-m", "firstdiv", "report", *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd)


@pytest.fixture
def notebook_store(tmp_path):
    """A store holding one incident and no sweep: its site is two pages, quick to write."""
    from firstdiv.diagnosis.incident import incident_new

    incident_new(store=tmp_path / "notes.db", symptom="grad norm explodes at step 300")
    return tmp_path / "notes.db"


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_the_site_holds_the_index_and_every_page_it_links(written, store):
    root, payload = written
    ids = sweep_ids(store)
    [incident] = site.incident_rows(store)
    pages = sorted(["index.html", *(f"sweep/{i}.html" for i in ids.values()),
                    f"compare/{ids['base']}--{ids['LR-high']}.html", f"incident/{incident.id}.html"])
    assert _files(root) == sorted([".firstdiv-site", *pages])
    assert payload == {"site": str(root), "pages": len(pages)}


def test_every_link_is_relative_and_resolves_to_a_file(written):
    root, _ = written
    for page in root.rglob("*.html"):
        for href in re.findall(r'href="([^"]*)"', page.read_text(encoding="utf-8")):
            parts = urlsplit(href)
            assert not parts.scheme and not parts.netloc and not parts.path.startswith("/"), (page, href)
            if parts.path:  # "?workload=..." reopens the index itself with its filter
                assert (page.parent / parts.path).is_file(), (page, href)
    index = (root / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r'href="(?:sweep|compare|incident)/', index)) == 5


def test_static_pages_are_the_pages_the_server_renders(written, store):
    root, _ = written
    ids = sweep_ids(store)
    route = _pages.Route("compare", (ids["base"], ids["LR-high"]))
    assert (root / route.path).read_text(encoding="utf-8") == _pages.page_html(store, route)


def _damaged_copy(store, tmp_path):
    copy = tmp_path / "damaged.db"
    with sqlite3.connect(store) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("UPDATE runs SET record='[]' WHERE workload='builtin:mlp' AND seed=2")
    conn.close()
    return copy


def test_a_failing_page_leaves_no_folder_and_no_leftovers(store, tmp_path):
    damaged = _damaged_copy(store, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FirstdivError, match=r"The site was not written: its page sweep/\w+\.html failed \(run \d+ .* is damaged"):
        site.build_site(out / "site", damaged)
    assert list(out.iterdir()) == []  # neither the site nor its temporary folder


def test_a_failing_rebuild_keeps_the_previous_site_as_it_was(written, store, tmp_path):
    previous = tmp_path / "site"
    shutil.copytree(written[0], previous)
    before = {name: (previous / name).read_bytes() for name in _files(previous)}
    damaged = _damaged_copy(store, tmp_path)
    with pytest.raises(FirstdivError, match="The site was not written"):
        site.build_site(previous, damaged)
    assert {name: (previous / name).read_bytes() for name in _files(previous)} == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("damaged.db")) == ["site"]


def test_report_site_json_and_a_site_it_wrote_is_replaced(notebook_store, tmp_path):
    target = tmp_path / "out"
    first = _report_site("--site", target, "--store", notebook_store, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["payload"] == {"site": str(target), "pages": 2}
    (target / "incident" / "stale.html").write_text("from an older store")
    again = _report_site("--site", target, "--store", notebook_store, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == f"wrote site {target} (2 pages; open {target / 'index.html'})\n"
    assert _files(target) == [".firstdiv-site", f"incident/{site.incident_rows(notebook_store)[0].id}.html", "index.html"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("notes.db")) == ["out"]


def test_a_folder_that_is_not_a_site_is_never_replaced(store, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(InvalidArgument, match="holds files and is not a site firstdiv wrote; pass a new or empty folder"):
        site.build_site(tmp_path / "mine", store)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidArgument, match="is a file, not a folder"):
        site.build_site(tmp_path / "afile", store)
    with pytest.raises(InvalidArgument, match="create it first"):
        site.build_site(tmp_path / "no" / "such" / "site", store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "mine"]


@pytest.mark.parametrize(("args", "message"), [
    (["--site", "s", "base"], "--site DIR writes every page of the store: give it no SWEEP, incident or report"),
    ([], "Missing argument 'SWEEP [SWEEP_B] | incident:REF | REPORT.json' (or --site DIR)"),
])
def test_report_site_usage_errors_exit_2(args, message, tmp_path):
    proc = _report_site(*args, "--store", Path(tmp_path) / "x.db", cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert list(Path(tmp_path).iterdir()) == []
